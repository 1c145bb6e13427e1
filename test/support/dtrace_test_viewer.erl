%%% Test helper: the trace files dtrace's tools write (Chrome Trace Event
%%% JSON, folded stacks) opened in a real viewer, offline: speedscope, from
%%% its npm package, served on 127.0.0.1 to headless Chromium (Debian's),
%%% driven over the DevTools protocol by test/support/dtrace_viewer.py. A
%%% case checks what the viewer shows, not that a file exists: the profiles
%%% speedscope lists (one per thread of a Chrome trace, named after the
%%% "M" process_name and thread_name events), each profile's frame names
%%% (its Sandwich table, all rows: the span kinds, "scheduled out", the
%%% functions) and the page's text.
%%%
%%% setup/0 runs scripts/viewers.sh, which installs Chromium and the rest
%%% once into a cache (/var/cache/dtrace-viewers) and then only prints the
%%% paths; a viewer that cannot be set up (not root on a fresh machine, no
%%% apt-get) skips the case locally and fails it in CI, as tracers do
%%% (dtrace_test_tracer:in_ci/0). Use it in init_per_suite/1:
%%%
%%%   case dtrace_test_viewer:setup() of
%%%       {ok, Env} -> [{viewer, Env} | Config];
%%%       {skip, _} = Skip -> Skip
%%%   end
%%%
%%% then, in a case, {ok, #{profiles := Ps, frames := Fs}} =
%%% dtrace_test_viewer:open(File, ?config(viewer, Config)), or
%%% [] = dtrace_test_viewer:missing([<<"span checkout">>, ...], Shown).
%%% A Perfetto protobuf trace is not for this viewer: speedscope takes it
%%% for a pprof profile and shows it empty, which open/2 returns as an
%%% error.
-module(dtrace_test_viewer).

-export([setup/0, open/2, open/3, screenshot/3, screenshot/4, missing/2]).

%% One viewer run (start Chromium, load, read every profile) on a quiet
%% host takes about 2 s; the ceiling leaves room for a loaded one.
-define(TIMEOUT, 60000).

-type env() :: #{speedscope := string(), python := string(), chromium := string(),
                 viewer := string()}.
-type shown() :: #{title := binary(), format := binary(), profiles := [binary()],
                   frames := [[binary()]], text := binary()}.
-export_type([env/0, shown/0]).

%% {ok, Env} once scripts/viewers.sh has set the viewer up (the first time
%% it installs packages: no deadline of a case should include it; call
%% this from init_per_suite/1). Otherwise {skip, Why} locally; in CI the
%% suite fails.
%% DTRACE_TEST_VIEWER=none skips the viewer, in CI too: scripts/userland.sh
%% sets it, as the files the Python writes are opened by the host's make
%% test, on every OTP alike.
-spec setup() -> {ok, env()} | {skip, string()}.
setup() ->
    Script = filename:absname(filename:join([dtrace_test_catalogue:repo_root(), "scripts", "viewers.sh"])),
    Result = case {os:getenv("DTRACE_TEST_VIEWER"), filelib:is_regular(Script)} of
                 {"none", _} -> none;
                 {_, false} -> {error, io_lib:format("~ts is missing", [Script])};
                 {_, true} -> env(dtrace_test_tracer:build(Script, []))
             end,
    case {Result, dtrace_test_tracer:in_ci()} of
        {none, _} -> {skip, "DTRACE_TEST_VIEWER=none"};
        {{ok, Env}, _} -> {ok, Env};
        {{error, Why}, true} -> ct:fail("CI=true and the viewer is not set up: ~ts", [Why]);
        {{error, Why}, false} -> {skip, lists:flatten(io_lib:format("no viewer: ~ts", [Why]))}
    end.

env({0, Lines}) ->
    Vars = maps:from_list([{Name, Value} || Line <- Lines,
                                            {match, [Name, Value]} <- [re:run(Line, "^([A-Z_]+)='(.*)'$",
                                                                              [{capture, all_but_first, list}, unicode])]]),
    case Vars of
        #{"SPEEDSCOPE_DIR" := Dir, "VIEWER_PYTHON" := Python, "CHROMIUM" := Chromium,
          "DTRACE_VIEWER" := Viewer} when Chromium =/= "" ->
            {ok, #{speedscope => Dir, python => Python, chromium => Chromium, viewer => Viewer}};
        _ ->
            {error, io_lib:format("scripts/viewers.sh printed no paths: ~ts", [lists:join(" | ", Lines)])}
    end;
env({Status, Lines}) ->
    {error, io_lib:format("scripts/viewers.sh exited ~p: ~ts", [Status, lists:join(" | ", last(5, Lines))])}.

%% What speedscope shows for File: its title, the importer it chose (e.g.
%% <<"Trace Event Format profile">>, <<"collapsed stack format">>), the
%% profiles it lists (for a Chrome trace: "PROCESS (pid P), THREAD (tid
%% T)", from the "M" metadata events; for folded stacks: the file's name),
%% each profile's frame names (a Chrome event's name, with " " and its
%% args as JSON appended when it has args), and the page's text.
%% {error, Why} when speedscope cannot import the file, shows no frame,
%% or shows nothing before the deadline.
-spec open(file:filename_all(), env()) -> {ok, shown()} | {error, string()}.
open(File, Env) ->
    open(File, Env, []).

%% The same with Opts: {view, "time-ordered" | "left-heavy" | "sandwich"}
%% (the view left on screen), {size, "WxH"}, {screenshot, Png}.
-spec open(file:filename_all(), env(), [{view | size | screenshot, file:filename_all()}]) ->
          {ok, shown()} | {error, string()}.
open(File, #{speedscope := Dir, python := Python, chromium := Chromium, viewer := Viewer}, Opts) ->
    Timeout = dtrace_test_tracer:ceiling(?TIMEOUT),
    Args = [Viewer, "--speedscope", Dir, "--chromium", Chromium, "--lines",
            "--timeout", integer_to_list(Timeout div 1000)]
        ++ lists:append([["--" ++ atom_to_list(K), V] || {K, V} <- Opts])
        ++ [File],
    Port = open_port({spawn_executable, Python},
                     [{args, Args}, {line, 65536}, stderr_to_stdout, exit_status, binary]),
    case output(Port, <<>>, []) of
        {0, Lines} -> {ok, shown(Lines)};
        {Status, Lines} ->
            Said = [L || <<"dtrace_viewer: ", _/binary>> = L <- Lines],
            {error, lists:flatten(io_lib:format("dtrace_viewer.py exited ~p: ~ts",
                                                [Status, lists:join(" | ", case Said of
                                                                              [] -> last(5, Lines);
                                                                              _ -> Said
                                                                          end)]))}
    end.

%% Opens File as open/2 does and saves a PNG of its first profile's
%% time-ordered flame chart at Png (e.g. for a README picture).
-spec screenshot(file:filename_all(), file:filename_all(), env()) -> {ok, shown()} | {error, string()}.
screenshot(File, Png, Env) ->
    screenshot(File, Png, Env, []).

%% The same with open/3's Opts ({view, V}, {size, "WxH"}).
-spec screenshot(file:filename_all(), file:filename_all(), env(), [{view | size, file:filename_all()}]) ->
          {ok, shown()} | {error, string()}.
screenshot(File, Png, Env, Opts) ->
    open(File, Env, [{screenshot, Png} | Opts]).

%% The Names (binaries) speedscope shows nowhere: in no profile's name, no
%% frame's name, not in the page's text (each as a substring: a Chrome
%% event's frame name carries its args after it). [] when it shows them all.
-spec missing([binary()], shown()) -> [binary()].
missing(Names, #{profiles := Profiles, frames := Frames, text := Text}) ->
    Shown = [Text | Profiles ++ lists:append(Frames)],
    [N || N <- Names, not lists:any(fun(S) -> binary:match(S, N) =/= nomatch end, Shown)].

output(Port, Part, Acc) ->
    receive
        {Port, {data, {noeol, More}}} -> output(Port, <<Part/binary, More/binary>>, Acc);
        {Port, {data, {eol, More}}} -> output(Port, <<>>, [<<Part/binary, More/binary>> | Acc]);
        {Port, {exit_status, Status}} ->
            Lines = case Part of
                        <<>> -> Acc;
                        _ -> [Part | Acc]
                    end,
            {Status, lists:reverse(Lines)}
    end.

%% dtrace_viewer.py --lines: "title T", "format F", "profile I NAME",
%% "frame I NAME" (I: the profile, from 1), "text LINE".
shown(Lines) ->
    Init = #{title => <<>>, format => <<>>, profiles => [], frames => #{}, text => []},
    S = lists:foldl(fun shown/2, Init, Lines),
    #{profiles := Profiles, frames := Frames, text := Text} = S,
    S#{profiles := lists:reverse(Profiles),
       frames := [lists:reverse(maps:get(I, Frames, [])) || I <- lists:seq(1, length(Profiles))],
       text := iolist_to_binary(lists:join(<<"\n">>, lists:reverse(Text)))}.

shown(<<"title ", T/binary>>, S) -> S#{title := T};
shown(<<"format ", F/binary>>, S) -> S#{format := F};
shown(<<"profile ", Rest/binary>>, #{profiles := Ps} = S) ->
    {_, Name} = numbered(Rest),
    S#{profiles := [Name | Ps]};
shown(<<"frame ", Rest/binary>>, #{frames := Fs} = S) ->
    {I, Name} = numbered(Rest),
    S#{frames := Fs#{I => [Name | maps:get(I, Fs, [])]}};
shown(<<"text ", L/binary>>, #{text := T} = S) -> S#{text := [L | T]};
shown(_, S) -> S.

numbered(Bin) ->
    [I, Name] = binary:split(Bin, <<" ">>),
    {binary_to_integer(I), Name}.

last(N, List) ->
    lists:nthtail(max(0, length(List) - N), List).
