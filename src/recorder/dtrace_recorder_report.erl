%%% @doc The flight recorder's report: one or more snapshots, of one or
%%% more nodes, read back with babeltrace2 and merged by time.
%%%
%%% The work is done by `priv/bin/dtrace-recorder-report', which runs the
%%% Python module priv/python/dtrace_tools/recorder_report.py on
%%% babeltrace2's Python bindings (Debian: `python3-bt2'; its docstring says
%%% why the bindings rather than the `babeltrace2' CLI). It runs as an OS
%%% process of its own, with a timeout, like every command of the recorder
%%% (see {@link dtrace_recorder_cli}); it can also be run by hand on
%%% snapshot directories copied elsewhere.
%%% @end
-module(dtrace_recorder_report).

-export([report/2, script/0]).

-export_type([opts/0]).

-type opts() :: #{svg => file:filename() | false,
                  tags => all | pos_integer() | [iodata()],
                  top => pos_integer(),
                  max_lines => pos_integer(),
                  slow => number(),
                  trace => string() | binary() | [string() | binary()],
                  folded => string() | binary(),
                  timeout_ms => pos_integer(),
                  python => file:filename()}.
%% `svg': the SVG timeline's file (default `report-TIME.svg' in the
%% directory of the first snapshot), or `false'; `tags': how many user tags
%% to detail (default 10: the triggering events' tags first, then those
%% with the slowest operations), `all', or a list of tags; `top': how many
%% slowest operations and slow spans broken down (default 10);
%% `max_lines': lines per tag at most (default 200); `slow': the spans of at
%% least this many milliseconds are broken down into on CPU, scheduled out
%% (by function), GC, file I/O and messages (default 10; docs/operators.md,
%% "Why was it slow"); `trace': a file (or a list) to write those slow spans
%% to as a timeline, `FILE.json' Chrome's Trace Event JSON, any other name
%% Perfetto's protobuf (which needs the `perfetto' Python package in the
%% report's Python); `folded': a file to write their flame graph to
%% (folded stacks); what both hold: priv/python/dtrace_tools/timeline.py's
%% doc; `timeout_ms': default 120000; `python': the Python 3 with the `bt2'
%% module (default `/usr/bin/python3', where Debian's `python3-bt2' installs
%% it, else `python3' from `PATH'), which the script runs (its
%% `DTRACE_PYTHON').

-define(BT2_HINT, iolist_to_binary([<<"the report needs babeltrace2's Python bindings: apt-get install "
                                      "python3-bt2 (or the python option: a Python 3 that can import bt2)">>])).

%% @doc The report of the snapshots `Paths' (directories, as binaries or
%% strings, or snapshot maps from {@link dtrace_recorder:snapshots/1}; one
%% path alone is taken too) with options `Opts' (see {@link opts()}).
%%
%% Returns the report as text (a binary): the snapshots with their nodes and
%% reasons; the triggering event of each; per user tag, its spans, file
%% operations and probes, in time order across the nodes, with durations
%% (ms), node and process; the slowest operations; and the path of the SVG
%% timeline (lanes per node and process, spans and file operations as bars,
%% the trigger marked). Errors: `{error, {python3_bt2_missing, Hint}}',
%% `{error, {no_trace, Output}}' (a path holds no LTTng trace), `{error,
%% {report_failed, ExitStatus, Output}}' (status 5: a `trace' or `folded'
%% file could not be written, the output says why), `{error, timeout}', `{error,
%% {badopt, Key, Value}}'.
-spec report(Paths, Opts) -> binary() | {error, term()} when
      Paths :: [file:filename_all() | dtrace_recorder:snapshot()] | file:filename_all(),
      Opts :: opts().
report(Paths0, Opts) ->
    Paths = paths(Paths0),
    case args(Opts, Paths) of
        {ok, Args} when Paths =/= [] ->
            Timeout = maps:get(timeout_ms, Opts, 120000),
            case dtrace_recorder_cli:find(python(Opts)) of
                false ->
                    {error, {python3_bt2_missing, ?BT2_HINT}};
                Python ->
                    Env = [{"DTRACE_PYTHON", Python}, {"LC_ALL", "C.UTF-8"}, {"PYTHONIOENCODING", "utf-8"}],
                    case dtrace_recorder_cli:run(script(), Args ++ Paths,
                                                 #{timeout => Timeout, max_output => 64 bsl 20, env => Env}) of
                        {ok, 0, Out} -> Out;
                        {ok, 3, _} -> {error, {python3_bt2_missing, ?BT2_HINT}};
                        {ok, 4, Out} -> {error, {no_trace, Out}};
                        {ok, Status, Out} -> {error, {report_failed, Status, Out}};
                        {error, _} = Error -> Error
                    end
            end;
        {ok, _} ->
            {error, {badopt, paths, Paths0}};
        Error ->
            Error
    end.

%% @doc The path of the report script, `priv/bin/dtrace-recorder-report'.
-spec script() -> string().
script() ->
    filename:join([code:priv_dir(dtrace), "bin", "dtrace-recorder-report"]).

paths(#{path := P}) ->
    [path(P)];
paths(P) when is_binary(P) ->
    [path(P)];
paths(L) when is_list(L) ->
    case io_lib:printable_unicode_list(L) of
        true when L =/= [] -> [L];
        _ -> [path(P) || P <- L]
    end;
paths(_) ->
    [].

path(#{path := P}) -> path(P);
path(P) when is_binary(P) -> unicode:characters_to_list(P);
path(P) when is_list(P) -> P;
path(P) when is_atom(P) -> atom_to_list(P).

python(#{python := P}) ->
    unicode:characters_to_list(P);
python(_) ->
    case filelib:is_regular("/usr/bin/python3") of
        true -> "/usr/bin/python3";
        false -> "python3"
    end.

args(Opts, Paths) ->
    try
        {ok, lists:append([arg(K, V, Paths) || {K, V} <- lists:sort(maps:to_list(Opts))])
             ++ case maps:is_key(svg, Opts) of
                    true -> [];
                    false -> arg(svg, default, Paths)
                end}
    catch
        throw:{badopt, _, _} = Bad -> {error, Bad}
    end.

arg(svg, false, _) -> ["--no-svg"];
arg(svg, default, [First | _]) ->
    Stamp = calendar:system_time_to_rfc3339(erlang:system_time(second), [{offset, "Z"}]),
    Name = "report-" ++ [C || C <- Stamp, C =/= $:, C =/= $-] ++ "-"
        ++ integer_to_list(erlang:unique_integer([positive])) ++ ".svg",
    ["--svg", filename:join(filename:dirname(filename:absname(First)), Name)];
arg(svg, default, []) -> [];
arg(svg, F, _) when is_list(F); is_binary(F) -> ["--svg", unicode:characters_to_list(F)];
arg(tags, all, _) -> ["--tags", "all"];
arg(tags, N, _) when is_integer(N), N > 0 -> ["--tags", integer_to_list(N)];
arg(tags, [_ | _] = Tags, _) ->
    [case unicode:characters_to_list(T) of
         L when is_list(L) -> "--tag=" ++ L;
         _ -> throw({badopt, tags, Tags})
     end || T <- Tags];
arg(top, N, _) when is_integer(N), N > 0 -> ["--top", integer_to_list(N)];
arg(max_lines, N, _) when is_integer(N), N > 0 -> ["--max-lines", integer_to_list(N)];
arg(slow, N, _) when is_number(N), N >= 0 -> ["--slow", float_to_list(N * 1.0, [{decimals, 3}])];
arg(trace, F, _) ->
    Files = case file_arg(F) of
                {ok, Name} -> [Name];
                error when is_list(F), F =/= [] -> [file_name(trace, X, F) || X <- F];
                error -> throw({badopt, trace, F})
            end,
    ["--trace=" ++ N || N <- Files];
arg(folded, F, _) -> ["--folded=" ++ file_name(folded, F, F)];
arg(timeout_ms, N, _) when is_integer(N), N > 0 -> [];
arg(python, P, _) when is_list(P); is_binary(P) -> [];
arg(K, V, _) -> throw({badopt, K, V}).

file_name(Key, X, Whole) ->
    case file_arg(X) of
        {ok, Name} -> Name;
        error -> throw({badopt, Key, Whole})
    end.

%% A file name given as a flat, non-empty string or binary.
file_arg(F) when is_binary(F), F =/= <<>> ->
    case unicode:characters_to_list(F) of
        L when is_list(L) -> {ok, L};
        _ -> error
    end;
file_arg([_ | _] = F) ->
    case io_lib:printable_unicode_list(F) of
        true -> {ok, F};
        false -> error
    end;
file_arg(_) ->
    error.
