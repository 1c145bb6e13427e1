%%% Test helper: real tracers run as ports (bpftrace, gdb, any command),
%%% and the policy for tracers that cannot attach (skip locally, fail in
%%% CI). Waits are on what the tracer printed, with deadlines: each a
%%% ceiling/1 of the time the wait takes on a quiet host, so that a slow
%%% or busy host, or a QEMU guest's emulated CPU, waits longer for the same
%%% event instead of failing. Builds of cached artefacts (guest roots,
%%% sid's DTrace) run through build/2, outside any deadline.
-module(dtrace_test_tracer).

-export([bpftrace_version/0, require_tracer/1, with_tracer/2, in_ci/0, slowdown/0, ceiling/1, slowdown_env/0, build/2, process_report/1,
         bpftrace_start/2, bpftrace_start/3, bpftrace_stop/1,
         bpftrace_window/5, bpftrace_window/6, bpftrace_window/7, bpftrace_marked/5, bpftrace_marked/6, bpftrace_await/2,
         bpftrace_map/2, bpftrace_map/3,
         gdb_run/3, gdb_events/2, gdb_events/3, run/2]).

%% A tracer's answer (a line, its exit) on a quiet host; see ceiling/1.
-define(TIMEOUT, 60000).

in_ci() ->
    os:getenv("CI") =:= "true".

%% How much longer than on a quiet host a wait may take: the host's factor,
%% $DTRACE_TEST_SLOWDOWN (a positive number, default 1: how much slower
%% than a quiet 2-core host this one is), times 4 in a QEMU guest
%% (DTRACE_TEST_GUEST=1; the suites that boot one pass the variable on).
%% The guest's CPU is emulated (TCG), and its waits were first sized on a
%% quiet host: a host 2-2.5x slower with both cores loaded by another job
%% makes the guest about that much slower again. CONTRIBUTING.md says how
%% to try a slow host.
slowdown() ->
    Host = case os:getenv("DTRACE_TEST_SLOWDOWN") of
               V when is_list(V), V =/= "" ->
                   case {string:to_float(V), string:to_integer(V)} of
                       {{F, ""}, _} when F > 0 -> F;
                       {_, {I, ""}} when I > 0 -> I;
                       _ -> erlang:error({bad_env, "DTRACE_TEST_SLOWDOWN", V})
                   end;
               _ -> 1
           end,
    case os:getenv("DTRACE_TEST_GUEST") of
        "1" -> 4 * Host;
        _ -> Host
    end.

%% The ceiling, in ms, for a wait that takes up to Ms on a quiet host:
%% Ms times slowdown(). A wait ends as soon as its event comes; the ceiling
%% only bounds how long a missing event is waited for.
ceiling(Ms) ->
    round(Ms * slowdown()).

%% "DTRACE_TEST_SLOWDOWN=N", the host's factor, for env(1) in front of a
%% guest's command: the suites that boot a guest pass it on (1 when unset).
slowdown_env() ->
    "DTRACE_TEST_SLOWDOWN=" ++ case os:getenv("DTRACE_TEST_SLOWDOWN") of
                                   V when is_list(V), V =/= "" -> V;
                                   _ -> "1"
                               end.

%% Runs a build of something cached (Exe with Args; e.g. scripts/guest.sh
%% root NAME), with no deadline of its own (the case's timetrap bounds it),
%% so that no wait of a test includes it. Logs how long it took; returns
%% {ExitStatus, Lines}.
build(Exe, Args) ->
    T0 = erlang:monotonic_time(millisecond),
    Port = open_port({spawn_executable, os:find_executable(Exe)},
                     [{args, Args}, {line, 65536}, stderr_to_stdout, exit_status, binary]),
    {Status, Lines} = build_output(Port, []),
    ct:log("~ts ~ts: exit status ~p after ~b ms~n~ts",
           [Exe, lists:join(" ", Args), Status, erlang:monotonic_time(millisecond) - T0, lists:join("\n", Lines)]),
    {Status, Lines}.

build_output(Port, Acc) ->
    receive
        {Port, {data, {eol, Line}}} -> build_output(Port, [Line | Acc]);
        {Port, {data, {noeol, Part}}} -> build_output(Port, [Part | Acc]);
        {Port, {exit_status, Status}} -> {Status, lists:reverse(Acc)}
    end.

%% What a tracer's process (and its threads) was doing, for a failure at a
%% ceiling: state, CPU time, elapsed time, where each thread waits. Tells a
%% tracer still busy starting (CPU time growing) from one that waits on
%% something.
process_report(OsPid) when is_integer(OsPid) ->
    process_report(integer_to_list(OsPid));
process_report(OsPid) ->
    os:cmd("ps -L -o pid,tid,stat,time,etime,wchan:32,args -p " ++ OsPid ++ " 2>&1; "
           "ps -o pid,stat,time,etime,args --ppid " ++ OsPid ++ " 2>/dev/null").

port_report(Port) ->
    case erlang:port_info(Port, os_pid) of
        {os_pid, Pid} -> process_report(Pid);
        undefined -> "(exited)"
    end.

%% ok when Tool (bpftrace | gdb | perf | readelf) can be used. Otherwise
%% {skip, Why} locally; in CI the test fails, because tracer tests are
%% mandatory there.
require_tracer(Tool) ->
    Why = case os:find_executable(atom_to_list(Tool)) of
              false -> io_lib:format("~s is not installed", [Tool]);
              _ when Tool =:= readelf -> ok;
              _ ->
                  case string:trim(os:cmd("id -u")) of
                      "0" -> ok;
                      _ -> io_lib:format("~s needs root (or CAP_BPF/CAP_PERFMON/"
                                         "CAP_SYS_PTRACE) to attach", [Tool])
                  end
          end,
    case {Why, in_ci()} of
        {ok, _} -> ok;
        {_, true} -> ct:fail("CI=true and ~ts", [Why]);
        {_, false} -> {skip, lists:flatten(Why)}
    end.

%% Config when Tool can be used, else what require_tracer/1 says: for
%% init_per_testcase/2 and init_per_suite/1.
with_tracer(Tool, Config) ->
    case require_tracer(Tool) of
        ok -> Config;
        Skip -> Skip
    end.

%% Starts bpftrace on OsPid with Program (in which "$SO" stands for the NIF
%% path) and returns once it says it is attaching. With bpftrace 0.24 and
%% later, an absolute path in a `usdt:' probe is named through
%% /proc/OsPid/root, as docs/tracers.md says to: they attach `-p PID' and
%% an absolute path twice, and every event comes twice (0.17 fails on that
%% form: "couldn't get argument").
bpftrace_start(OsPid, Program) ->
    bpftrace_start(bpftrace, OsPid, Program).

%% The same with Tool: bpftrace itself, or dtrace_bpftrace, the wrapper
%% shipped as priv/bin/dtrace-bpftrace. Program may also be {file, Script} or
%% {file, Script, Args} (the script's positional parameters).
bpftrace_start(Tool, OsPid, Program) ->
    Args = case Program of
               {file, Script} -> ["-p", OsPid, Script];
               {file, Script, ScriptArgs} -> ["-p", OsPid, Script | ScriptArgs];
               _ -> ["-p", OsPid, "-e", through_root(OsPid, unicode:characters_to_list(
                                                      string:replace(Program, "$SO", dtrace_test_catalogue:nif_path(), all)))]
           end,
    Exe = case Tool of
              bpftrace -> os:find_executable("bpftrace");
              dtrace_bpftrace -> filename:join([code:priv_dir(dtrace), "bin", "dtrace-bpftrace"])
          end,
    Port = open_port({spawn_executable, Exe},
                     [{args, Args}, {env, bpftrace_env()},
                      {line, 65536}, stderr_to_stdout, exit_status, binary]),
    %% "Attaching N probes..." (bpftrace before 0.24), "Attached N probes"
    %% (0.24 and later, on stderr).
    case collect_until(Port, <<"Attach">>, []) of
        {ok, Lines} -> {Port, Lines};
        {exit, Status, Lines} ->
            ct:fail("bpftrace exited (~p) before attaching: ~p", [Status, Lines])
    end.

%% Program with each `usdt:/PATH' made `usdt:/proc/OsPid/root/PATH' where
%% bpftrace is 0.24 or later.
through_root(OsPid, Program) ->
    case bpftrace_version() >= {0, 24} of
        true -> re:replace(Program, "usdt:/(?!proc/)", "usdt:/proc/" ++ OsPid ++ "/root/", [global, {return, list}]);
        false -> Program
    end.

%% bpftrace's output buffer: 1024 pages (4 MiB; per CPU on 0.17, one
%% ring buffer on 0.23), as priv/bin/dtrace-slow-spans sets it, unless the
%% environment sets it. The default, 64 pages, loses events in a burst:
%% bpftrace 0.23 copies 1024 bytes per str() argument (its max_strlen), and
%% dtrace_vm_SUITE's 220 sends, two strings each, in a few hundred
%% microseconds overflowed 256 KiB, leaving about 90 events. From 0.25 the
%% default is larger (up to 16 MiB in all), and is kept.
bpftrace_env() ->
    case os:getenv("BPFTRACE_PERF_RB_PAGES") =:= false andalso bpftrace_version() < {0, 25} of
        true -> [{"BPFTRACE_PERF_RB_PAGES", "1024"}];
        false -> []
    end.

%% {Major, Minor} of the bpftrace on PATH ({0, 0} if it prints none).
bpftrace_version() ->
    Out = os:cmd("bpftrace --version 2>/dev/null"),
    case re:run(Out, "v?([0-9]+)\\.([0-9]+)", [{capture, all_but_first, list}]) of
        {match, [Major, Minor]} -> {list_to_integer(Major), list_to_integer(Minor)};
        nomatch -> {0, 0}
    end.

%% Waits (at most ceiling(60000) ms) until the bpftrace started with
%% bpftrace_start/2,3 has printed every line in SeenLines (binaries, or
%% {contains, Part}); returns the tracer with the lines so far.
bpftrace_await({Port, Lines}, SeenLines) ->
    {Port, collect_lines(Port, SeenLines, Lines)}.

%% Stops bpftrace with SIGINT (it then prints its maps) and returns all the
%% lines it printed.
%%
%% Under the churn test's load (10,000 processes trapping on both cores),
%% bpftrace 0.17 was seen, rarely, still polling 60 s after a SIGINT, with
%% no signal pending. So the signal is sent again every ceiling(10000) ms, at most five
%% times, and each repeat is logged.
bpftrace_stop({Port, Lines0}) ->
    {os_pid, Pid} = erlang:port_info(Port, os_pid),
    bpftrace_stop(Port, Pid, lists:reverse(Lines0), 1).

bpftrace_stop(Port, Pid, Acc, N) ->
    _ = os:cmd("kill -INT " ++ integer_to_list(Pid)),
    case collect_exit(Port, Acc, erlang:monotonic_time(millisecond) + ceiling(10000)) of
        {exit, Lines} ->
            %% Counts short of what a test awaits come with this line.
            [ct:log("bpftrace lost events: ~ts", [L]) || L <- Lines, binary:match(L, <<"Lost">>) =/= nomatch],
            Lines;
        {running, Acc1} when N < 5 ->
            ct:log("bpftrace (~p) still running ~b ms after SIGINT ~b: sending it again;~n"
                   "its state: ~ts", [Pid, ceiling(10000), N, os:cmd("grep -E 'State|SigPnd|ShdPnd|SigCgt' /proc/"
                                                      ++ integer_to_list(Pid) ++ "/status")]),
            bpftrace_stop(Port, Pid, Acc1, N + 1);
        {running, Acc1} ->
            try port_close(Port) catch error:badarg -> true end,
            ct:fail("bpftrace did not exit after ~b SIGINTs: ~p", [N, lists:reverse(Acc1)])
    end.

%% The lines Port prints (Acc: those so far, newest first) until it exits,
%% or until Deadline.
collect_exit(Port, Acc, Deadline) ->
    receive
        {Port, {data, {eol, Line}}} -> collect_exit(Port, [Line | Acc], Deadline);
        {Port, {data, {noeol, Part}}} -> collect_exit(Port, [Part | Acc], Deadline);
        {Port, {exit_status, _}} -> {exit, lists:reverse(Acc)}
    after max(0, Deadline - erlang:monotonic_time(millisecond)) ->
            {running, Acc}
    end.

%% The value of bpftrace map Name (`@name' or `@[key]') in its printed
%% output; the test fails if it is not there.
bpftrace_map(Name, Lines) ->
    case bpftrace_map(Name, Lines, undefined) of
        undefined -> ct:fail("~s not in the tracer's output: ~p", [Name, Lines]);
        V -> V
    end.

%% The same, with Default when the map is not there.
bpftrace_map(Name, Lines, Default) ->
    case [binary_to_integer(string:trim(V))
          || L <- Lines, [K, V] <- [binary:split(L, <<": ">>)], K =:= Name] of
        [N] -> N;
        [] -> Default
    end.

%% Counts need a window in which the tracer is known to be fully attached:
%% the kernel raises a probe's semaphore a little before the tracer's event
%% is enabled (and lowers it a little after it is disabled), so a call in
%% that gap returns true and no event arrives. So: start bpftrace with
%% Program; in the peer, fire Ready() every few milliseconds until bpftrace
%% has printed every line in SeenLines (binaries, or {contains, Part} for
%% a line containing Part; its program prints one when it sees
%% a Ready() event of a probe); then run Workload() in the peer, stop
%% bpftrace, and return {WorkloadResult, BpftraceLines}. Ready() events must
%% be told apart from the workload's in Program.
bpftrace_window(Peer, Program, Ready, SeenLines, Workload) ->
    bpftrace_window(bpftrace, Peer, Program, Ready, SeenLines, Workload).

%% The same with Tool (see bpftrace_start/3).
bpftrace_window(Tool, Peer, Program, Ready, SeenLines, Workload) ->
    bpftrace_window(Tool, Peer, Program, Ready, SeenLines, Workload, fun(_, _) -> true end).

%% The same, and after Workload, bpftrace runs until Until(WorkloadResult,
%% LinesSoFar) is true (the events the workload made were printed) or ceiling(30000) ms
%% pass, before it is stopped: no fixed wait for events in flight.
bpftrace_window(Tool, Peer, Program, Ready, SeenLines, Workload, Until) ->
    {Port, Lines0} = bpftrace_start(Tool, dtrace_test_peer:os_pid(Peer), Program),
    ok = peer:call(Peer, dtrace_test_workload, start_ready_loop, [Ready]),
    Lines1 = collect_lines(Port, SeenLines, Lines0),
    Result = peer:call(Peer, dtrace_test_workload, stop_ready_loop_and_run, [Workload], ceiling(120000)),
    Lines2 = collect_while(Port, fun(Ls) -> not Until(Result, Ls) end, Lines1,
                           erlang:monotonic_time(millisecond) + ceiling(30000)),
    {Result, bpftrace_stop({Port, Lines2})}.

%% bpftrace_window/5 for a workload whose events end with a marker: the
%% program also prints "WINDOW MARK <where> I" for dtrace:pn(950, I), from
%% a clause before its own and one after (bpftrace 0.17 attaches clauses
%% last to first, later versions may not: once both printed, every clause
%% between is attached). The ready loop fires pn(950, 0) with Ready()
%% (both lines are awaited with SeenLines), and once Workload() returns
%% (after every event it waits for has fired: processes it started are
%% gone, replies received) the peer fires pn(950, 1). bpftrace is stopped
%% once it printed that: what the workload fired before was read with it,
%% and an event that did not come by then (a probe that must stay silent)
%% never will.
bpftrace_marked(Peer, Program, Ready, SeenLines, Workload) ->
    bpftrace_marked(bpftrace, Peer, Program, Ready, SeenLines, Workload).

%% The same with Tool (see bpftrace_start/3).
bpftrace_marked(Tool, Peer, Program, Ready, SeenLines, Workload) ->
    Mark = fun(Where) -> "
        usdt:$SO:erlang:user_trace__n950 { printf(\"WINDOW MARK " ++ Where ++ " %ld\\n\", arg2); }
" end,
    Marks = fun(I) -> [<<"WINDOW MARK before ", I>>, <<"WINDOW MARK after ", I>>] end,
    bpftrace_window(Tool, Peer, Mark("before") ++ Program ++ Mark("after"),
                    fun() -> _ = try Ready() catch _:_ -> failed end, dtrace:pn(950, 0) end,
                    SeenLines ++ Marks($0),
                    fun() -> R = Workload(), true = dtrace:pn(950, 1), R end,
                    fun(_, Lines) -> Marks($1) -- Lines =:= [] end).

%% Collects Port's lines while Continue(Lines) holds, at most until
%% Deadline.
collect_while(Port, Continue, Acc, Deadline) ->
    case Continue(Acc) of
        false -> Acc;
        true ->
            receive
                {Port, {data, {eol, Line}}} -> collect_while(Port, Continue, Acc ++ [Line], Deadline);
                {Port, {exit_status, Status}} ->
                    ct:fail("bpftrace exited (~p) while events were awaited: ~p", [Status, Acc])
            after max(0, Deadline - erlang:monotonic_time(millisecond)) ->
                    ct:log("events awaited for ~b ms; going on with ~b lines, the last ones:~n~p",
                           [ceiling(30000), length(Acc), lists:nthtail(max(0, length(Acc) - 40), Acc)]),
                    Acc
            end
    end.

%% Wanted without the first entry Line satisfies: an equal binary, or
%% {contains, Part}.
seen(Line, [Line | Rest]) -> Rest;
seen(Line, [{contains, Part} = W | Rest]) ->
    case binary:match(Line, Part) of
        nomatch -> [W | seen(Line, Rest)];
        _ -> Rest
    end;
seen(Line, [W | Rest]) -> [W | seen(Line, Rest)];
seen(_Line, []) -> [].

collect_lines(Port, Wanted, Acc) ->
    collect_lines(Port, Wanted, lists:reverse(Acc), erlang:monotonic_time(millisecond) + ceiling(?TIMEOUT)).

%% Within one deadline for all the lines (a tracer printing other lines
%% all the time does not push it back); Rev: the lines so far, newest
%% first.
collect_lines(_Port, [], Rev, _Deadline) ->
    lists:reverse(Rev);
collect_lines(Port, Wanted, Rev, Deadline) ->
    receive
        {Port, {data, {eol, Line}}} ->
            collect_lines(Port, seen(Line, Wanted), [Line | Rev], Deadline);
        {Port, {exit_status, Status}} ->
            ct:fail("bpftrace exited (~p) before it saw ~p: ~p", [Status, Wanted, lists:reverse(Rev)])
    after max(0, Deadline - erlang:monotonic_time(millisecond)) ->
            ct:fail("bpftrace did not see ~p within ~p ms: ~p~nits process: ~ts",
                    [Wanted, ceiling(?TIMEOUT), lists:sublist(lists:reverse(Rev), 200), port_report(Port)])
    end.

%% Runs gdb in batch mode with the command files Scripts (-x, in order)
%% attached to OsPid, while Workload()
%% runs in this process; returns {WorkloadResult, GdbLines}.
gdb_run(OsPid, Scripts, Workload) ->
    Port = open_port({spawn_executable, os:find_executable("gdb")},
                     [{args, ["-q", "-batch", "-nx"] ++ lists:append([["-x", S] || S <- Scripts]) ++ ["-p", OsPid]},
                      {line, 65536}, stderr_to_stdout, exit_status, binary]),
    try Workload() of
        Result ->
            {exit, _Status, Lines} = collect_until(Port, undefined, []),
            {Result, Lines}
    catch
        Class:Reason:Stack ->
            %% gdb's lines say where it stopped listening (its script
            %% ended, and -batch detached): report them with the failure.
            {Status, Lines} = drain(Port, erlang:monotonic_time(millisecond) + 5000, []),
            ct:fail("the workload failed under gdb: ~p:~p ~p~ngdb (~p) printed: ~p",
                    [Class, Reason, Stack, Status, Lines])
    end.

%% The lines Port prints until it exits or Deadline passes (then it is
%% killed): {ExitStatus | running, Lines}.
drain(Port, Deadline, Acc) ->
    receive
        {Port, {data, {_, Line}}} -> drain(Port, Deadline, [Line | Acc]);
        {Port, {exit_status, Status}} -> {Status, lists:reverse(Acc)}
    after max(0, Deadline - erlang:monotonic_time(millisecond)) ->
            case erlang:port_info(Port, os_pid) of
                {os_pid, Pid} -> os:cmd("kill -9 " ++ integer_to_list(Pid));
                undefined -> ok
            end,
            try port_close(Port) catch error:badarg -> true end,
            {running, lists:reverse(Acc)}
    end.

%% Runs Fun in the peer while gdb runs test/tracers/i4s4.gdb on it:
%% before Fun, the peer waits until gdb listens (user_trace__n1 returns
%% true); after it, user_trace__n950 makes gdb detach. Returns
%% {FunResult, EventLines}, one "EVENT ..." line per probe hit.
gdb_events(Peer, Fun) ->
    gdb_events(Peer, "i4s4.gdb", Fun).

%% The same with another script of test/tracers/ (same protocol).
gdb_events(Peer, ScriptName, Fun) ->
    Test = filename:dirname(filename:dirname(?FILE)),
    Script = filename:join([Test, "tracers", ScriptName]),
    {Result, Lines} =
        gdb_run(dtrace_test_peer:os_pid(Peer), [filename:join([Test, "support", "gdb_probe_events.py"]), Script],
                fun() ->
                        peer:call(Peer, dtrace_test_workload, gdb_workload, [Fun], ceiling(600000))
                end),
    lists:member(<<"DONE">>, Lines) orelse ct:fail("gdb did not finish: ~p", [Lines]),
    {Result, [L || <<"EVENT", _/binary>> = L <- Lines]}.

%% Runs an executable with arguments, returning {ExitStatus, Output}.
run(Exe, Args) ->
    Port = open_port({spawn_executable, os:find_executable(Exe)},
                     [{args, Args}, {line, 65536}, stderr_to_stdout, exit_status, binary]),
    {exit, Status, Lines} = collect_until(Port, undefined, []),
    {Status, Lines}.

collect_until(Port, Marker, Acc) ->
    receive
        {Port, {data, {eol, Line}}} ->
            Acc1 = [Line | Acc],
            case Marker =/= undefined andalso binary:match(Line, Marker) =/= nomatch of
                true -> {ok, lists:reverse(Acc1)};
                false -> collect_until(Port, Marker, Acc1)
            end;
        {Port, {data, {noeol, Part}}} ->
            collect_until(Port, Marker, [Part | Acc]);
        {Port, {exit_status, Status}} ->
            {exit, Status, lists:reverse(Acc)}
    after ceiling(?TIMEOUT) ->
            Report = port_report(Port),
            try port_close(Port) catch error:badarg -> true end,
            ct:fail("tracer did not answer within ~p ms: ~p~nits process: ~ts",
                    [ceiling(?TIMEOUT), lists:reverse(Acc), Report])
    end.
