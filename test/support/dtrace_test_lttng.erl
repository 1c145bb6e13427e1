%%% LTTng for the suites and the benchmark: the policy for a machine
%%% without LTTng (skip locally, fail in CI), sessions driven with the
%%% `lttng' command, and their traces read back with babeltrace2.
-module(dtrace_test_lttng).

-export([require/0, require_sink/2, start/3, start/4, stop_and_read/1, destroy/1, wait_listening/2, fields/2]).

-define(TIMEOUT, 60000).

%% ok when LTTng sessions can record here: the lttng, lttng-sessiond and
%% babeltrace2 commands, root (a root session daemon sees every process),
%% and a session daemon, started here when none runs. Otherwise
%% {skip, Why} locally; in CI the test fails (tracer tests are mandatory).
require() ->
    Missing = [C || C <- ["lttng", "lttng-sessiond", "babeltrace2"], os:find_executable(C) =:= false],
    Why = if
              Missing =/= [] ->
                  io_lib:format("~ts not installed (Debian: lttng-tools, babeltrace2)",
                                [lists:join(", ", Missing)]);
              true ->
                  case string:trim(os:cmd("id -u")) of
                      "0" -> sessiond();
                      _ -> "LTTng tests need root (a root session daemon)"
                  end
          end,
    case {Why, dtrace_test_tracer:in_ci()} of
        {ok, _} -> ok;
        {_, true} -> ct:fail("CI=true and ~ts", [Why]);
        {_, false} -> {skip, lists:flatten(Why)}
    end.

%% Config when Sinks (a node's dtrace:sinks()) says the LTTng sink loaded;
%% otherwise {skip, Why} locally, a failure in CI.
require_sink(Sinks, Config) ->
    case {Sinks, dtrace_test_tracer:in_ci()} of
        {#{lttng := true}, _} -> Config;
        {_, true} -> ct:fail("CI=true and the LTTng sink does not load: ~p", [Sinks]);
        {_, false} -> {skip, lists:flatten(io_lib:format("LTTng sink not loaded: ~p", [Sinks]))}
    end.

%% A root session daemon: the running one, or one started now.
sessiond() ->
    case os:cmd("pgrep -x lttng-sessiond") of
        "" ->
            {Status, Out} = dtrace_test_tracer:run("lttng-sessiond", ["--daemonize"]),
            case Status of
                0 -> ok;
                _ -> io_lib:format("lttng-sessiond --daemonize failed: ~ts", [Out])
            end;
        _ ->
            ok
    end.

%% Creates session Name, writing to Dir/Name, enables the user-space
%% Events (e.g. "org_erlang_dtrace:*") and starts it. Returns the session.
start(Name, Dir, Events) ->
    start(Name, Dir, Events, []).

%% Options: {buffers, SubbufSize, NumSubbuf} gives the events a channel
%% of their own with these sub-buffers per CPU (big enough that the
%% consumer never falls behind, for exact counts); {vpid, OsPid} tracks
%% that process only (`lttng track -u --vpid'): the session's events are
%% enabled in it and in no other process of the host, so that nodes the
%% session is not about (another suite's, a developer's) are untouched.
start(Name, Dir, Events, Opts) ->
    Out = filename:join(Dir, Name),
    _ = destroy(Name),
    ok = lttng(["create", Name, "--output=" ++ Out]),
    case proplists:lookup(vpid, Opts) of
        {vpid, Pid} -> ok = lttng(["track", "-u", "--vpid=" ++ Pid, "-s", Name]);
        none -> ok
    end,
    Channel = case proplists:lookup(buffers, Opts) of
                  {buffers, Size, N} ->
                      ok = lttng(["enable-channel", "-u", "-s", Name, "--subbuf-size=" ++ Size,
                                  "--num-subbuf=" ++ integer_to_list(N), "dtrace"]),
                      ["-c", "dtrace"];
                  none ->
                      []
              end,
    [ok = lttng(["enable-event", "-u", E, "-s", Name | Channel]) || E <- Events],
    ok = lttng(["start", Name]),
    #{name => Name, dir => Out}.

%% Stops and destroys the session and reads its trace:
%% {[{Event, #{Field => Value}}], Warnings}, events in time order (Event
%% and field names binaries; values integers or binaries), Warnings the
%% lines babeltrace2 printed that are not events (e.g. discarded events).
%% No trace at all (no process recorded an event) is no events.
stop_and_read(#{name := Name, dir := Out}) ->
    ok = lttng(["stop", Name]),
    ok = lttng(["destroy", Name]),
    case dtrace_test_tracer:run("babeltrace2", [Out]) of
        {0, Lines} ->
            Parsed = [event(L) || L <- Lines],
            {[E || {ok, E} <- Parsed], [L || {warning, L} <- Parsed]};
        {_, Lines} ->
            %% No process recorded anything: the session wrote no trace.
            case [L || L <- Lines, binary:match(L, <<"No trace was found">>) =/= nomatch] of
                [_ | _] -> {[], Lines};
                [] -> ct:fail("babeltrace2 ~ts: ~p", [Out, Lines])
            end
    end.

%% Destroys session Name if it exists.
destroy(Name) ->
    _ = dtrace_test_tracer:run("lttng", ["destroy", Name]),
    ok.

lttng(Args) ->
    case dtrace_test_tracer:run("lttng", Args) of
        {0, _} -> ok;
        {Status, Out} -> ct:fail("lttng ~ts: exit ~p: ~p", [lists:join(" ", Args), Status, Out])
    end.

%% Waits in the traced peer until the session records every event of
%% Names ("provider:event", as dtrace_nif:vm_listening/0 names them): the
%% session daemon tells the process asynchronously.
wait_listening(Peer, Names) ->
    Want = [list_to_binary(N) || N <- Names],
    wait_listening(Peer, Want, erlang:monotonic_time(millisecond) + 10000).

wait_listening(Peer, Want, Deadline) ->
    {_, _, Listening, _} = peer:call(Peer, dtrace_nif, vm_listening, []),
    case Want -- [iolist_to_binary(L) || L <- Listening] of
        [] -> ok;
        Missing ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true -> ct:fail("the session never enabled ~p", [Missing]);
                false -> timer:sleep(10), wait_listening(Peer, Want, Deadline)
            end
    end.

%% One line of babeltrace2's text output:
%% [08:21:32.630255804] (+0.000009680) host provider:event: { cpu_id = 1 }, { f1 = 1, f2 = "x" }
%% Plain binary matching: a trace can hold hundreds of thousands of lines.
%% A line its stderr cut (a warning of discarded events printed inside an
%% event's line) is a warning too.
event(<<"[", _/binary>> = Line) ->
    case binary:split(Line, <<": { cpu_id = ">>) of
        [Head, Tail] ->
            [_Time, _Delta, _Host, Event] = binary:split(Head, <<" ">>, [global, trim_all]),
            case binary:split(Tail, <<" }, { ">>) of
                [_Cpu, Fields] ->
                    try {ok, {Event, fields(Fields, #{})}}
                    catch error:_ -> {warning, Line}
                    end;
                [_] -> {warning, Line}
            end;
        [_] ->
            {warning, Line}
    end;
event(Line) ->
    {warning, Line}.

%% The fields of one `{ ... }' group of a line (the text after its `{ ';
%% it stops at the group's `}'), added to map M: name => integer, or
%% binary (strings unescaped, other values as printed).
fields(<<" ", R/binary>>, M) -> fields(R, M);
fields(<<",", R/binary>>, M) -> fields(R, M);
fields(<<"}", _/binary>>, M) -> M;
fields(<<>>, M) -> M;
fields(Bin, M) ->
    [Name, Rest] = binary:split(Bin, <<" = ">>),
    {Value, Rest1} = value(Rest),
    fields(Rest1, M#{Name => Value}).

value(<<"\"", R/binary>>) ->
    string(R, <<>>);
value(Bin) ->
    {V, Rest} = case binary:match(Bin, [<<",">>, <<" }">>]) of
                    {At, _} -> split_binary(Bin, At);
                    nomatch -> {Bin, <<>>}
                end,
    {try binary_to_integer(V) catch error:badarg -> V end, Rest}.

%% babeltrace2 escapes `"' and `\' with a backslash.
string(Bin, Acc) ->
    case binary:match(Bin, [<<"\\">>, <<"\"">>]) of
        {At, 1} ->
            case split_binary(Bin, At) of
                {Part, <<"\\", C, R/binary>>} -> string(R, <<Acc/binary, Part/binary, C>>);
                {Part, <<"\"", R/binary>>} -> {<<Acc/binary, Part/binary>>, R}
            end;
        nomatch ->
            {<<Acc/binary, Bin/binary>>, <<>>}
    end.
