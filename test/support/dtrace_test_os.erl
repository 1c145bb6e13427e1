%%% Test helper for "why was it slow" down to the OS (dtrace_why_os_SUITE):
%%% the requests a peer runs, each a span tagged as the suite checks it
%%% (fast ones "fast-N", the planted one "planted"), the planted causes'
%%% work, and priv/bin/dtrace-slow-spans run around steps of the test.
-module(dtrace_test_os).

-include_lib("stdlib/include/assert.hrl").

%% In the peer.
-export([ready/0, busy/1, until_preempted/2, fast/1, planted/2, block/1, dirty/1, fresh_memory/1, start_loop/0,
         stop_loop/0]).
%% In the test.
-export([run/4, run/5, blocks/1, ready_seen/1]).

%% Slow means this many ms or more: fast requests take well under one.
-define(THRESHOLD_MS, 10).

%%% In the peer

%% A span of kind `ready' that runs 3 ms on the CPU (the profile samples
%% it: the kernel's events flow) and sleeps past the threshold (its
%% scheduling is traced: the span probes are attached).
ready() ->
    dtrace:put_tag("ready"),
    dtrace:span(ready, fun() -> busy(3), timer:sleep(?THRESHOLD_MS + 2) end).

%% Runs Ms ms of wall-clock time on the CPU.
busy(Ms) ->
    spin(erlang:monotonic_time(microsecond) + Ms * 1000, 0).

spin(Until, N) ->
    case N rem 64 =/= 0 orelse erlang:monotonic_time(microsecond) < Until of
        true -> spin(Until, N + 1);
        false -> ok
    end.

%% On the CPU until the clock has jumped GapMs ms or more between two
%% looks (the thread was kept off the CPU that long), then AfterMs ms more;
%% 20 s at most. Returns {gap, Ms} or no_gap. A request planted for a task
%% that takes the CPU: it begins before the task and outlasts the windows
%% the kernel leaves the node (50 ms a second beside a real-time task).
until_preempted(GapMs, AfterMs) ->
    T0 = erlang:monotonic_time(microsecond),
    gap(T0, T0 + 20000000, GapMs * 1000, AfterMs, 0).

gap(Last, Deadline, Gap, AfterMs, N) ->
    case N rem 64 of
        0 ->
            Now = erlang:monotonic_time(microsecond),
            if
                Now - Last >= Gap -> busy(AfterMs), {gap, (Now - Last) div 1000};
                Now >= Deadline -> no_gap;
                true -> gap(Now, Deadline, Gap, AfterMs, N + 1)
            end;
        _ ->
            gap(Last, Deadline, Gap, AfterMs, N + 1)
    end.

%% N fast requests, tagged fast-1..fast-N.
fast(N) ->
    lists:foreach(fun(I) ->
                          dtrace:put_tag("fast-" ++ integer_to_list(I)),
                          dtrace:span(request, fun() -> erlang:phash2(I) end)
                  end, lists:seq(1, N)).

%% The planted request: ?MODULE:F(Args...) in a span tagged "planted".
%% Returns {its value, its duration in ms}.
planted(F, Args) ->
    dtrace:put_tag("planted"),
    T0 = erlang:monotonic_time(microsecond),
    R = dtrace:span(request, fun() -> apply(?MODULE, F, Args) end),
    {R, (erlang:monotonic_time(microsecond) - T0) / 1000}.

%% A NIF that sleeps Ms ms in a system call on a normal scheduler (the
%% test-hooks library's).
block(Ms) ->
    ok = dtrace_nif:test_block(Ms).

%% Ms ms on a dirty CPU scheduler (erts_debug's test BIF).
dirty(Ms) ->
    ok = erts_debug:dirty_cpu(wait, Ms).

%% Writes a fresh binary of Mb megabytes: the kernel faults its pages in.
fresh_memory(Mb) ->
    byte_size(binary:copy(<<0:8388608>>, Mb)).

%% Spans of 0.5 ms on the CPU, tagged "loop", one after the other, until
%% stop_loop/0.
start_loop() ->
    Pid = spawn(fun() -> dtrace:put_tag("loop"), loop() end),
    register(dtrace_test_os_loop, Pid),
    ok.

loop() ->
    dtrace:span(loop, fun() -> spin(erlang:monotonic_time(microsecond) + 500, 0) end),
    receive
        {stop, From} -> From ! {stopped, self()}
    after 0 -> loop()
    end.

stop_loop() ->
    Pid = whereis(dtrace_test_os_loop),
    Pid ! {stop, self()},
    receive {stopped, Pid} -> ok end.

%%% In the test

%% Runs priv/bin/dtrace-slow-spans (threshold 10 ms, then Args) on Peer;
%% once it prints a ready span whose breakdown has the kernel's events
%% (BeforeReady, a fun of the test, runs first: a workload that must see
%% the attach), runs Steps() here, then stops it (SIGINT) and returns
%% {Steps' value, the lines it printed}.
run(Peer, Args, BeforeReady, Steps) ->
    run(Peer, Args, BeforeReady, Steps, true).

%% The same; Planted: whether Steps plants a request to wait for.
run(Peer, Args, BeforeReady, Steps, Planted) ->
    Script = filename:join([code:priv_dir(dtrace), "bin", "dtrace-slow-spans"]),
    BeforeReady(),
    Port = open_port({spawn_executable, Script},
                     [{args, ["-p", dtrace_test_peer:os_pid(Peer), "--threshold", integer_to_list(?THRESHOLD_MS)
                              | Args]},
                      {line, 65536}, stderr_to_stdout, exit_status, binary]),
    ok = peer:call(Peer, dtrace_test_workload, start_ready_loop, [fun ?MODULE:ready/0]),
    Lines0 = dtrace_test_why:collect(Port, [], fun(Ls) -> ready_seen(blocks(Ls)) end,
                                     dtrace_test_tracer:ceiling(60000)),
    ok = peer:call(Peer, dtrace_test_workload, stop_ready_loop_and_run, [fun() -> ok end]),
    Result = Steps(),
    %% The planted request printed before the stop, as a user waits for it
    %% before Ctrl-C (stopped at once, the planted span went missing with
    %% bpftrace 0.27), for 5 s at most.
    Lines1 = case Planted of
                 true -> planted_seen(Port, Lines0, erlang:monotonic_time(millisecond) + dtrace_test_tracer:ceiling(5000));
                 false -> Lines0
             end,
    Lines = dtrace_test_why:stop(Port, Lines1),
    ct:log("dtrace-slow-spans printed:~n~ts", [lists:join("\n", Lines)]),
    {Result, Lines}.

planted_seen(Port, Acc, Deadline) ->
    Seen = lists:any(fun(L) -> binary:match(L, <<"tag \"planted\"">>) =/= nomatch end, Acc),
    planted_seen(Port, Acc, Seen, Deadline).

%% Lines until the planted span's block has ended (a blank line after it),
%% or Deadline: each line looked at once.
planted_seen(Port, Acc, Seen, Deadline) ->
    receive
        {Port, {data, {eol, <<>>}}} when Seen -> Acc ++ [<<>>];
        {Port, {data, {eol, Line}}} ->
            planted_seen(Port, Acc ++ [Line], Seen orelse binary:match(Line, <<"tag \"planted\"">>) =/= nomatch,
                         Deadline);
        {Port, {data, {noeol, Part}}} -> planted_seen(Port, Acc ++ [Part], Seen, Deadline)
    after max(0, Deadline - erlang:monotonic_time(millisecond)) ->
            Acc
    end.

%% The breakdowns printed: [{Tag, {CauseText, CauseMs}, BlockText}].
blocks(Lines) ->
    dtrace_test_why:blocks(Lines).

%% A ready span's breakdown, split by the kernel's events.
ready_seen(Blocks) ->
    lists:any(fun({<<"ready">>, _Cause, Text}) ->
                      binary:match(Text, <<"timer:sleep/1">>) =/= nomatch
                          andalso binary:match(Text, <<"on CPU (user)">>) =/= nomatch;
                 (_) -> false
              end, Blocks).
