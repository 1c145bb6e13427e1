%%% `make bench`: the cost of dtrace's probe paths, against baselines and
%%% against the floors every enabled probe pays whatever fires it, measured
%%% in one run on one VM, and the budgets they must meet.
%%%
%%% Every row is the time per call of a loop of N calls through a fun (the
%%% fun call is in every row, baselines included). Rows are measured in
%%% rounds, every row once per round, after a warm-up round: the first
%%% loop of a fresh VM runs slow, and measuring rows one after the other
%%% would charge that to whichever row comes first. A row reports the
%%% median of its rounds and the spread (min..max).
%%%
%%% The floors (dtrace_floors, C code in bench/floors/, built by this run):
%%% the erl_tracer floor (a C tracer module that does nothing), the same
%%% tracer firing a bare SDT site under bpftrace, or recording a C LTTng
%%% event of OTP's message_send layout, all in this node's ping-pong; a
%%% bare SDT site in a NIF of this node under bpftrace, in each site form
%%% (the library's `nop; nop10', sys/sdt.h's 1-byte nop, the 5-byte nop
%%% kernel 6.18 optimizes); the same sites in a small C program, and under
%%% perf at the library's nop and its nop10; and C LTTng events of the
%%% message_send and i4s4 layouts. And what attaching and detaching
%%% bpftrace pauses a traced program (stall_bench). Every enabled path is
%%% then printed as "total = floors + own work", and the budgets are on
%%% the own work, which is what this library can change.
%%%
%%% Enabled rows need root, bpftrace and LTTng (lttng-tools); without them
%%% those rows are skipped and say why.
%%%
%%% The VM-probe rows are dtrace_bench_vm's; the floors printed, the totals,
%%% the budgets, the figures and BENCHMARKS.md are dtrace_bench_report's.
%%% Those and the sizes in dtrace_bench.hrl are compiled with this module
%%% (bench/run.sh).
-module(dtrace_bench).

-export([main/1, empty/0, work/1, pingpong/1, vm_rows_for_test/0, p4_disabled_ns/1]).
%% For message_bench and attach_bench (and dtrace_bench_vm).
-export([command/2, can_trace/0, can_lttng/0, with_vm_tracer/4, wait_vm/2, lttng_start/1, lttng_stop/1,
         raise_semaphore/2, lower_semaphore/2, nif/0, stop_lines/1]).
%% For dtrace_bench_vm.
-export([stats/1]).
-include("dtrace_bench.hrl").

main([OutFile, FloorDir, NoLttngEbin, RecorderFile, DofEbin, AttachFile, OsFile]) ->
    LoadStart = dtrace_bench_report:load_average(),
    {module, dtrace} = code:ensure_loaded(dtrace),
    true = dtrace:available(),
    S1K = lists:duplicate(1024, $x),
    B1K = list_to_binary(S1K),
    MB = lists:duplicate(1024, B1K),
    %% A raw file for the dtrace_file rows: position/2 is the cheapest call
    %% that reaches the OS (lseek).
    TmpFile = filename:join(os:getenv("TMPDIR", "/tmp"), "dtrace_bench." ++ os:getpid()),
    ok = file:write_file(TmpFile, <<"0123456789">>),
    {ok, Fd} = file:open(TmpFile, [read, raw, binary]),
    ok = file:delete(TmpFile),
    {module, dtrace_file} = code:ensure_loaded(dtrace_file),
    %% A run-time provider with one probe of two arguments, and its probe handle.
    {ok, Prov} = dtrace_provider:new(dtrace_bench, [{req, [int, string]}]),
    Req = dtrace_provider:probe(Prov, req),
    Disabled =
        [{"empty Erlang call", fun() -> dtrace_bench:empty() end},
         {"empty NIF call (dtrace:available/0)", fun() -> dtrace:available() end},
         {"stock dyntrace:p/4 (runtime_tools)", fun() -> dyntrace:p(1, 2, "ab", "cd") end},
         {"dtrace:p/0", fun() -> dtrace:p() end},
         {"dtrace:p/4 (2 ints, 2 strings)", fun() -> dtrace:p(1, 2, "ab", "cd") end},
         {"dtrace:p/8", fun() -> dtrace:p(1, 2, 3, 4, "ab", "cd", "ef", "gh") end},
         {"dtrace:pn/5", fun() -> dtrace:pn(5, 1, 2, "ab", "cd") end},
         {"dtrace:span/2 (a fun returning ok)", fun() -> dtrace:span(bench, fun dtrace_bench:empty/0) end},
         {"dtrace_nif:efile_enabled/0 (dtrace_file's check)", fun() -> dtrace_nif:efile_enabled() end},
         {"file:position/2, no device (badarg, no I/O)", fun() -> file:position(nofile, cur) end},
         {"dtrace_file:position/2, no device (badarg)", fun() -> dtrace_file:position(nofile, cur) end},
         {"dtrace_provider:fire/3 (int, string)", fun() -> dtrace_provider:fire(Prov, req, [1, "ab"]) end},
         {"dtrace_provider:fire/2 (probe handle; int, string)", fun() -> dtrace_provider:fire(Req, [1, "ab"]) end}],
    io:format("~nDisabled (no tracer), ~b calls per round, ~b rounds:~n", [?N_DISABLED, ?ROUNDS]),
    %% A real lseek goes through a dirty I/O scheduler (1 to 14 us a call
    %% on this machine kind): its rows run a twentieth of the calls.
    Io = [{"file:position/2, raw file (lseek, dirty I/O)", fun() -> file:position(Fd, cur) end},
          {"dtrace_file:position/2, raw file", fun() -> dtrace_file:position(Fd, cur) end}],
    DisRows = measure(Disabled, ?N_DISABLED) ++ measure(Io, ?N_DISABLED div 20),
    print(DisRows),
    io:format("~nDisabled throughput, dtrace:p/4, ~b calls per process:~n", [?N_THROUGHPUT]),
    Tput = throughput(),
    [io:format("  ~b scheduler(s) busy: ~.1f M calls/s (~.1f..~.1f)~n",
               [K, Med / 1.0e6, Min / 1.0e6, Max / 1.0e6]) || {K, {Med, Min, Max}} <- Tput],
    io:format("~nMessage round trip (send, receive, reply) between two processes:~n"),
    Spread = measure_spread(),
    print(Spread),
    io:format("~nEnabled without a tracer (semaphore raised by hand: conversion and site, no trap):~n"),
    Work = by_hand(),
    print(Work),
    io:format("~nRun-time provider enabled without a tracer (semaphore raised by hand: "
              "conversion and site, no trap):~n"),
    ProvWork = provider_by_hand(Prov, Req),
    print(ProvWork),
    io:format("~nFloors (bench/floors, built in ~s):~n", [FloorDir]),
    FloorBuild = dtrace_floors:build(FloorDir),
    Floors = floors(FloorBuild),
    dtrace_bench_report:print_floors(Floors),
    Apart = case FloorBuild of
                {ok, FP} -> dtrace_floors:apart_together(FP);
                FSkip -> FSkip
            end,
    dtrace_bench_report:print_apart(Apart),
    Enabled =
        [{"dtrace:p/0", fun() -> dtrace:p() end},
         {"dtrace:p/4 (2 ints, 2 strings)", fun() -> dtrace:p(1, 2, "ab", "cd") end},
         {"dtrace:p/8", fun() -> dtrace:p(1, 2, 3, 4, "ab", "cd", "ef", "gh") end},
         {"dtrace:pn/5", fun() -> dtrace:pn(5, 1, 2, "ab", "cd") end},
         {"dtrace:p/4, 1024-byte binary", fun() -> dtrace:p(1, 2, B1K, "cd") end},
         {"dtrace:p/4, 1024-byte charlist", fun() -> dtrace:p(1, 2, S1K, "cd") end},
         {"dtrace:p/4, 1 MB iolist (passed as NULL)", fun() -> dtrace:p(1, 2, MB, "cd") end},
         {"file:position/2, no device (badarg, no I/O)", fun() -> file:position(nofile, cur) end},
         {"dtrace_file:position/2, no device (4 efile probes)",
          fun() -> dtrace_file:position(nofile, cur) end},
         {"dtrace_provider:fire/3 (int, string)", fun() -> dtrace_provider:fire(Prov, req, [1, "ab"]) end},
         {"dtrace_provider:fire/2 (probe handle; int, string)", fun() -> dtrace_provider:fire(Req, [1, "ab"]) end}],
    {EnRows, Why} =
        case can_trace() of
            ok ->
                io:format("~nEnabled (bpftrace attached, counting), ~b calls per round:~n", [?N_ENABLED]),
                Tracer = bpftrace(os:getpid(),
                                  "usdt:" ++ nif() ++ ":erlang:user_trace__i4s4 { @i4s4 = count(); } "
                                  "usdt:" ++ nif() ++ ":erlang:user_trace__n5 { @n5 = count(); } "
                                  ++ [["usdt:", nif(), ":erlang:efile_drv__", P, " { @", P, " = count(); } "]
                                      || P <- ["entry", "int_entry", "int_return", "return"]]
                                  ++ ["usdt:", binary_to_list(dtrace_provider:path(Prov)), ":dtrace_bench:req { @req = count(); } "]),
                wait_enabled(),
                wait_enabled(fun() -> dtrace_provider:is_enabled(Req) end),
                Rows = measure(Enabled, ?N_ENABLED),
                stop(Tracer),
                print(Rows),
                {Rows, ""};
            {skip, W} ->
                io:format("~nEnabled rows skipped: ~s~n", [W]),
                {[], W}
        end,
    VmRows = dtrace_bench_vm:vm_rows(can_trace()),
    print(VmRows),
    FamilyRows = dtrace_bench_vm:family_rows(can_trace()),
    print(FamilyRows),
    {LttngRows0, LttngWhy} = lttng_rows(),
    LttngRows = LttngRows0 ++ sink_rows(NoLttngEbin, DofEbin),
    print(LttngRows),
    Recorder = recorder_rows(RecorderFile),
    Messages = message_bench:rows(FloorBuild),
    Stall = stall_bench:run(FloorBuild),
    AlwaysOn = always_on_bench:run(),
    io:format("~s", [always_on_bench:markdown(AlwaysOn)]),
    %% Measured before this VM started, in one without scheduler
    %% busy-waiting (its CPU figures would count it): bench/run.sh.
    Attach = attach_bench:load(AttachFile),
    io:format("~nFunction spans (attach_bench):~n~s", [attach_bench:markdown(Attach)]),
    Os = os_bench:load(OsFile),
    io:format("~nWhy was it slow, down to the OS (os_bench):~n~s", [os_bench:markdown(Os)]),
    Paired = #{sdt => dtrace_bench_vm:paired_send(FloorBuild, sdt),
               lttng => dtrace_bench_vm:paired_send(FloorBuild, lttng)},
    Totals = dtrace_bench_report:totals(Floors, EnRows, VmRows, LttngRows, Paired),
    io:format("~nTotal = floors + own work:~n"),
    [io:format("  ~-62s total ~7.1f = floors ~7.1f (~s) + own ~6.1f ns~n",
               [Path, T, F, FloorText, T - F]) || {Path, T, F, FloorText} <- Totals],
    Budgets = dtrace_bench_report:budgets(DisRows, Tput, Work)
        ++ dtrace_bench_report:lttng_budgets(LttngRows) ++ dtrace_bench_report:provider_budgets(DisRows)
        ++ dtrace_bench_report:total_budgets(Totals, VmRows) ++ dtrace_bench_report:site_budgets(Floors, Totals, VmRows)
        ++ message_bench:budgets(Messages)
        ++ always_on_bench:budgets(AlwaysOn) ++ attach_bench:budgets(Attach) ++ os_bench:budgets(Os),
    io:format("~nBudgets:~n"),
    [io:format("  ~-84s ~s~n", [Text, dtrace_bench_report:verdict(OK)]) || {Text, OK} <- Budgets],
    Figures = dtrace_bench_report:figures(#{disabled => DisRows ++ Spread, floors => Floors, enabled => EnRows,
                                            vm => VmRows, families => FamilyRows, lttng => LttngRows,
                                            totals => Totals}) ++
        message_bench:figures(Messages) ++ always_on_bench:figures(AlwaysOn) ++ attach_bench:figures(Attach)
        ++ os_bench:figures(Os) ++ stall_bench:figures(Stall),
    dtrace_bench_report:write_md(OutFile, #{disabled => DisRows ++ Spread, tput => Tput, work => Work ++ ProvWork,
                                            floors => Floors, enabled => EnRows, why => Why, vm => VmRows,
                                            families => FamilyRows, lttng => {LttngRows, LttngWhy},
                                            recorder => Recorder, totals => Totals, budgets => Budgets,
                                            figures => Figures, messages => Messages, always_on => AlwaysOn,
                                             attach => Attach, apart => {Apart, Floors}, os => Os, stall => Stall,
                                             load_start => LoadStart}),
    io:format("~nWritten to ~s~n", [OutFile]),
    halt(case lists:all(fun({_, OK}) -> OK =/= false end, Budgets) of true -> 0; false -> 1 end).

empty() -> ok.

%% A function for the function-probe rows (called as dtrace_bench:work/1).
work(X) -> X + 1.

%%% Measuring

loop(_F, 0) -> ok;
loop(F, N) -> _ = F(), loop(F, N - 1).

ns_per_call(F, N) ->
    T0 = erlang:monotonic_time(nanosecond),
    loop(F, N),
    (erlang:monotonic_time(nanosecond) - T0) / N.

%% [{Name, {Median, Min, Max}}], in the order given.
measure(Cases, N) ->
    [ns_per_call(F, N div 10) || {_, F} <- Cases],
    Rounds = [[ns_per_call(F, N) || {_, F} <- Cases] || _ <- lists:seq(1, ?ROUNDS)],
    Columns = transpose(Rounds),
    [{Name, stats(Col)} || {{Name, _}, Col} <- lists:zip(Cases, Columns)].

transpose([[] | _]) -> [];
transpose(Rows) -> [[hd(R) || R <- Rows] | transpose([tl(R) || R <- Rows])].

stats(Xs) ->
    S = lists:sort(Xs),
    {lists:nth((length(S) + 1) div 2, S), hd(S), lists:last(S)}.

print(Rows) ->
    [io:format("  ~-44s ~8.1f ns  (~.1f..~.1f)~n", [Name, Med, Min, Max])
     || {Name, {Med, Min, Max}} <- Rows],
    ok.

%% The cost per message of tag spreading: a round trip with an echo
%% process, spreading off and on (the tag then rides in the sequential-trace
%% token both ways).
measure_spread() ->
    Echo = spawn_link(fun Loop() -> receive {From, M} -> From ! M, Loop() end end),
    RoundTrip = fun() -> Echo ! {self(), ping}, receive ping -> ok end end,
    Off = fun() -> dtrace:spread_tag(false), dtrace:put_tag(undefined), RoundTrip end,
    On = fun() -> dtrace:put_tag(<<"request-1234">>), dtrace:spread_tag(true), RoundTrip end,
    Rows = [{Name, begin F = Mode(), R = measure_one(F), F, R end}
            || {Name, Mode} <- [{"round trip, spreading off", Off},
                                {"round trip, spreading on (tag in the token)", On}]],
    dtrace:spread_tag(false),
    dtrace:put_tag(undefined),
    [{Name, R} || {Name, R} <- Rows].

measure_one(F) ->
    [{_, Stats}] = measure([{x, F}], ?N_DISABLED div 10),
    Stats.

%% Calls per second of disabled dtrace:p/4 with K processes, one bound to
%% each of K schedulers, each making N_THROUGHPUT calls. Runs with 1 and 2
%% processes alternate, 7 of each, so that both see the same machine (on a
%% small VM the host may take time from either core): [{K, {Median, Min, Max}}].
throughput() ->
    Runs = [{K, tput_run(K)} || _ <- lists:seq(1, 8), K <- [1, 2]],
    [{K, stats(tl([T || {K1, T} <- Runs, K1 =:= K]))} || K <- [1, 2]].

tput_run(K) ->
    Self = self(),
    T0 = erlang:monotonic_time(nanosecond),
    Pids = [spawn_opt(fun() ->
                              loop(fun() -> dtrace:p(1, 2, "ab", "cd") end, ?N_THROUGHPUT),
                              Self ! {done, self()}
                      end, [link, {scheduler, I}]) || I <- lists:seq(1, K)],
    [receive {done, P} -> ok end || P <- Pids],
    K * ?N_THROUGHPUT / ((erlang:monotonic_time(nanosecond) - T0) / 1.0e9).

%% The enabled path without a tracer's trap: user_trace__i4s4's semaphore
%% is raised by writing this process's own memory (/proc/self/mem at the
%% library's load address plus the semaphore's address in its note), as a
%% tracer would, but no breakpoint is installed, so the site's nop runs.
%% This is the library's own work per enabled call: conversion and site.
by_hand() ->
    {Mem, Addr} = raise_semaphore(nif(), "user_trace__i4s4"),
    true = dtrace:is_enabled(),
    Rows = measure([{"dtrace:p/0, enabled, no trap", fun() -> dtrace:p() end},
                    {"dtrace:p/4 (2 ints, 2 strings), enabled, no trap", fun() -> dtrace:p(1, 2, "ab", "cd") end},
                    {"dtrace:p/8, enabled, no trap", fun() -> dtrace:p(1, 2, 3, 4, "ab", "cd", "ef", "gh") end}],
                   ?N_ENABLED * 5),
    lower_semaphore(Mem, Addr),
    false = dtrace:is_enabled(),
    Rows.

%% The same for the run-time provider's probe req: handle, probe and
%% argument checks, conversion, and the site.
provider_by_hand(Prov, Req) ->
    {Mem, Addr} = raise_semaphore(binary_to_list(dtrace_provider:path(Prov)), "req"),
    true = dtrace_provider:is_enabled(Prov, req),
    Rows = measure([{"dtrace_provider:fire/3 (int, string), enabled, no trap",
                     fun() -> dtrace_provider:fire(Prov, req, [1, "ab"]) end},
                    {"dtrace_provider:fire/2 (probe handle; int, string), enabled, no trap",
                     fun() -> dtrace_provider:fire(Req, [1, "ab"]) end}],
                   ?N_ENABLED * 5),
    lower_semaphore(Mem, Addr),
    false = dtrace_provider:is_enabled(Prov, req),
    Rows.

%% Raises the semaphore of Probe in the object at Path, mapped in this
%% process: its load address (/proc/self/maps, matched by file name: priv/
%% may be reached through a symlink) plus the semaphore's address in the
%% probe's note (readelf), written through /proc/self/mem.
raise_semaphore(Path, Probe) ->
    Notes = os:cmd("readelf -n " ++ Path),
    {match, [Sem]} = re:run(Notes, "Name: " ++ Probe ++ "\n\\s+Location: 0x[0-9a-f]+, Base: 0x[0-9a-f]+, "
                            "Semaphore: 0x([0-9a-f]+)", [{capture, all_but_first, list}]),
    {ok, Maps} = file:read_file("/proc/self/maps"),
    Name = list_to_binary(filename:basename(Path)),
    [Base | _] = [list_to_integer(binary_to_list(hd(binary:split(Range, <<"-">>))), 16)
                  || L <- binary:split(Maps, <<"\n">>, [global]),
                     [Range, _, <<"00000000">>, _, _, File] <- [string:lexemes(L, " ")],
                     filename:basename(File) =:= Name],
    {ok, Mem} = file:open("/proc/self/mem", [read, write, raw, binary]),
    Addr = Base + list_to_integer(Sem, 16),
    ok = file:pwrite(Mem, Addr, <<1:16/little>>),
    {Mem, Addr}.

lower_semaphore(Mem, Addr) ->
    ok = file:pwrite(Mem, Addr, <<0:16/little>>),
    ok = file:close(Mem).

%%% LTTng-UST

-define(LTTNG_SESSION, "dtrace_bench").

%% With an LTTng session recording (discard mode, 8 x 8 MiB sub-buffers
%% per CPU): p/4 and pn/5 into org_erlang_dtrace, and the ping-pong with
%% automatic mode feeding org_erlang_dyntrace:message_send.
%% {Rows, WhySkipped}.
lttng_rows() ->
    case can_lttng() of
        ok ->
            io:format("~nLTTng-UST session recording (no uprobe), ~b calls per round:~n", [?N_ENABLED]),
            Dir = lttng_start(["org_erlang_dtrace:user_trace_i4s4", "org_erlang_dtrace:user_trace_n"]),
            wait_until(fun() -> dtrace:is_enabled() andalso dtrace:is_enabled(5) end),
            User = measure([{"dtrace:p/4 (2 ints, 2 strings), LTTng", fun() -> dtrace:p(1, 2, "ab", "cd") end},
                            {"dtrace:p/8, LTTng", fun() -> dtrace:p(1, 2, 3, 4, "ab", "cd", "ef", "gh") end},
                            {"dtrace:pn/5, LTTng", fun() -> dtrace:pn(5, 1, 2, "ab", "cd") end}],
                           ?N_ENABLED),
            Lost1 = lttng_stop(Dir),
            Dir2 = lttng_start(["org_erlang_dyntrace:message_send"]),
            %% The flags are set once the session enabled the event here.
            ok = wait_vm(fun(#{flags := #{processes := P}}) -> lists:member(send, P) end, 500),
            Send = stats([dtrace_bench_vm:pingpong() || _ <- lists:seq(1, 5)]),
            Lost2 = lttng_stop(Dir2),
            ok = wait_vm(fun(#{flags := #{processes := P}}) -> P =:= [] end, 500),
            %% The same ping-pong with every OTP event enabled, as
            %% `lttng enable-event -u 'org_erlang_dyntrace:*'' asks:
            %% automatic mode then sets every flag those events need
            %% (BENCHMARKS.md, "message_send into LTTng, measured other ways").
            Dir3 = lttng_start(["org_erlang_dyntrace:*"]),
            ok = wait_vm(fun(#{flags := #{processes := P}}) -> lists:member(send, P) end, 500),
            #{flags := #{processes := AllFlags}} = dtrace:vm_probes(),
            All = stats([dtrace_bench_vm:pingpong() || _ <- lists:seq(1, 5)]),
            Lost3 = lttng_stop(Dir3),
            ok = wait_vm(fun(#{flags := #{processes := P}}) -> P =:= [] end, 500),
            io:format("  (events the session discarded: ~ts; ~ts; ~ts)~n", [Lost1, Lost2, Lost3]),
            {User ++ [{"ping-pong, LTTng session on org_erlang_dyntrace:message_send (auto)", Send},
                      {lists:flatten(io_lib:format("ping-pong, LTTng session on every org_erlang_dyntrace event "
                                                   "(auto: flags ~w)", [lists:sort(AllFlags)])), All}], ""};
        {skip, Why} ->
            io:format("~nLTTng rows skipped: ~s~n", [Why]),
            {[], Why}
    end.

%% The flight recorder's rows (bench/recorder_bench.erl writes them to
%% File as a markdown table), or why they were skipped.
recorder_rows(File) ->
    case can_lttng() of
        ok ->
            io:format("~nThe flight recorder (recorder_bench):~n"),
            ok = recorder_bench:main([File]),
            {ok, Text} = file:read_file(File),
            Text;
        {skip, Why} ->
            io:format("~nRecorder rows skipped: ~s~n", [Why]),
            ["\nSkipped: ", Why, ".\n"]
    end.

%% Disabled dtrace:p/4 in three fresh nodes started alike, measured in
%% alternate rounds: A with this library, B with the same library built
%% without the LTTng sink, C with the test-hooks build in which every
%% probe's check also asks its DOF is-enabled site, as once the DOF is
%% registered with DTrace's helper device (which this machine may lack).
sink_rows(NoLttngEbin, DofEbin) ->
    io:format("~nDisabled dtrace:p/4, with and without the LTTng sink built in, and with the DOF check (three nodes):~n"),
    Bench = filename:dirname(code:which(?MODULE)),
    Start = fun(Ebin) ->
                    {ok, P, _} = peer:start_link(#{connection => standard_io,
                                                   args => ["+S", "2:2", "+sbt", "db", "-pa", Ebin, "-pa", Bench]}),
                    P
            end,
    With = Start(filename:dirname(code:which(dtrace))),
    Without = Start(NoLttngEbin),
    Dof = Start(DofEbin),
    #{lttng := true} = peer:call(With, dtrace, sinks, []),
    #{lttng := {false, <<"built without the LTTng sink">>}} = peer:call(Without, dtrace, sinks, []),
    ok = peer:call(Dof, dtrace_nif, test_dof_force_active, []),
    Run = fun(P, N) -> peer:call(P, ?MODULE, p4_disabled_ns, [N], 60000) end,
    _ = [Run(P, ?N_DISABLED div 10) || P <- [With, Without, Dof]],
    Rounds = [{Run(With, ?N_DISABLED), Run(Without, ?N_DISABLED), Run(Dof, ?N_DISABLED)}
              || _ <- lists:seq(1, ?ROUNDS)],
    [peer:stop(P) || P <- [With, Without, Dof]],
    [{"dtrace:p/4 disabled, LTTng sink built in (node A)", stats([W || {W, _, _} <- Rounds])},
     {"dtrace:p/4 disabled, built without the LTTng sink (node B)", stats([O || {_, O, _} <- Rounds])},
     {"dtrace:p/4 disabled, DOF registered: is-enabled site asked too (node C)",
      stats([D || {_, _, D} <- Rounds])}].

%% @private In a node of sink_rows/2.
p4_disabled_ns(N) ->
    false = dtrace:p(1, 2, "ab", "cd"),
    ns_per_call(fun() -> dtrace:p(1, 2, "ab", "cd") end, N).

can_lttng() ->
    case {os:find_executable("lttng"), string:trim(os:cmd("id -u")), dtrace:sinks()} of
        {false, _, _} -> {skip, "lttng (lttng-tools) is not installed"};
        {_, "0", #{lttng := true}} ->
            case os:cmd("pgrep -x lttng-sessiond") of
                "" -> os:cmd("lttng-sessiond --daemonize"), ok;
                _ -> ok
            end;
        {_, "0", #{lttng := L}} -> {skip, io_lib:format("the LTTng sink is not loaded: ~p", [L])};
        _ -> {skip, "a root session daemon needs root"}
    end.

lttng_start(Events) ->
    Dir = filename:join(os:getenv("TMPDIR", "/tmp"), "dtrace_bench_lttng." ++ os:getpid()),
    _ = lttng(["destroy", ?LTTNG_SESSION]),
    {0, _} = lttng(["create", ?LTTNG_SESSION, "--output=" ++ Dir]),
    {0, _} = lttng(["enable-channel", "-u", "-s", ?LTTNG_SESSION, "--subbuf-size=8M", "--num-subbuf=8", "bench"]),
    [{0, _} = lttng(["enable-event", "-u", "-s", ?LTTNG_SESSION, "-c", "bench", E]) || E <- Events],
    {0, _} = lttng(["start", ?LTTNG_SESSION]),
    Dir.

%% Stops and destroys the session; returns what `lttng stop' said about
%% discarded events ("none" when it said nothing).
lttng_stop(Dir) ->
    {0, Out} = lttng(["stop", ?LTTNG_SESSION]),
    {0, _} = lttng(["destroy", ?LTTNG_SESSION]),
    _ = os:cmd("rm -rf '" ++ Dir ++ "'"),
    case [L || L <- string:split(Out, "\n", all), string:find(L, "discarded") =/= nomatch] of
        [] -> "none";
        Lines -> string:trim(lists:join(" ", Lines))
    end.

lttng(Args) ->
    command(os:find_executable("lttng"), Args).

%% @doc Runs the executable Path with Args: {ExitStatus, Output (stdout
%% and stderr)}; fails after 60 s without an exit.
command(Path, Args) ->
    Port = open_port({spawn_executable, Path}, [{args, Args}, stderr_to_stdout, exit_status, binary]),
    collect(Port, Path, <<>>).

collect(Port, Path, Acc) ->
    receive
        {Port, {data, D}} -> collect(Port, Path, <<Acc/binary, D/binary>>);
        {Port, {exit_status, S}} -> {S, binary_to_list(Acc)}
    after 60000 -> error({did_not_answer, Path, Acc})
    end.

wait_until(Check) ->
    wait_until(Check, 500).

wait_until(_Check, 0) ->
    error(timeout);
wait_until(Check, Tries) ->
    case Check() of
        true -> ok;
        false -> timer:sleep(10), wait_until(Check, Tries - 1)
    end.

%%% Tracers

nif() ->
    filename:join(code:priv_dir(dtrace), "dtrace_nif.so").

can_trace() ->
    dtrace_floors:can_trace().

bpftrace(OsPid, Prog) ->
    Port = open_port({spawn_executable, os:find_executable("bpftrace")},
                     [{args, ["-p", OsPid, "-e", Prog]}, {line, 4096},
                      stderr_to_stdout, exit_status, binary]),
    wait_line(Port, <<"Attach">>),
    Port.

stop(Port) ->
    _ = stop_lines(Port),
    ok.

%% Stops bpftrace (SIGINT: it prints its maps) and returns its lines.
%% bpftrace 0.17 may miss a SIGINT (dtrace_floors_programs:interrupt/1):
%% it is sent again every 10 s, three times at most.
stop_lines(Port) ->
    {os_pid, Pid} = erlang:port_info(Port, os_pid),
    stop_lines(Port, integer_to_list(Pid), 3, []).

stop_lines(_Port, _Pid, 0, _Acc) ->
    error(bpftrace_did_not_stop);
stop_lines(Port, Pid, Tries, Acc) ->
    _ = os:cmd("kill -INT " ++ Pid),
    case lines(Port, Acc) of
        {exited, Lines} -> Lines;
        {running, Acc1} -> stop_lines(Port, Pid, Tries - 1, Acc1)
    end.

lines(Port, Acc) ->
    receive
        {Port, {data, {eol, L}}} -> lines(Port, [L | Acc]);
        {Port, {data, _}} -> lines(Port, Acc);
        {Port, {exit_status, _}} -> {exited, lists:reverse(Acc)}
    after 10000 -> {running, Acc}
    end.

wait_line(Port, Prefix) ->
    receive
        {Port, {data, {eol, Line}}} ->
            case binary:match(Line, Prefix) of
                nomatch -> wait_line(Port, Prefix);
                _ -> Line
            end;
        {Port, {exit_status, S}} -> error({tracer_exited, S})
    after 60000 -> error({no_line, Prefix})
    end.

wait_enabled() ->
    wait_enabled(fun() -> dtrace:p() andalso dtrace:pn(5) andalso dtrace_nif:efile_enabled() end).

%% Waits until Enabled() (at most a minute: a tracer attached to another
%% copy of the library, e.g. one rebuilt while this node runs, never raises
%% this node's semaphores).
wait_enabled(Enabled) ->
    wait_enabled(Enabled, 6000).

wait_enabled(_Enabled, 0) ->
    error(tracer_never_enabled_the_probes);
wait_enabled(Enabled, Tries) ->
    case Enabled() of
        true -> ok;
        false -> timer:sleep(10), wait_enabled(Enabled, Tries - 1)
    end.

%%% Tracers on the VM probes (dtrace_bench_vm, message_bench, attach_bench)

%% Polls automatic mode (dtrace_vm:sync/0) until Ready(Status) holds, every
%% 10 ms, at most Tries times.
wait_vm(_Ready, 0) ->
    timeout;
wait_vm(Ready, Tries) ->
    ok = dtrace_vm:sync(),
    case Ready(dtrace:vm_probes()) of
        true -> ok;
        false -> timer:sleep(10), wait_vm(Ready, Tries - 1)
    end.

%% Fun() with bpftrace on this node counting Probes, once automatic mode
%% did what Ready(Status) checks and bpftrace's program saw an event (Warm()
%% until it prints READY). {Fun's value, events counted}: the warm-up's
%% few events included, against millions.
with_vm_tracer(Probes, Ready, Warm, Fun) ->
    Prog = [["usdt:", nif(), ":erlang:", P, " { if (!@ready) { @ready = 1; printf(\"READY\\n\"); } "
             "@n = count(); } "] || P <- Probes],
    Port = bpftrace(os:getpid(), lists:flatten(Prog)),
    ok = wait_vm(Ready, 500),
    ok = until_ready(Port, Warm, 500),
    R = Fun(),
    Lines = stop_lines(Port),
    N = case [binary_to_integer(string:trim(C)) || <<"@n: ", C/binary>> <- Lines] of
            [C] -> C;
            [] -> 0
        end,
    {R, N}.

%% Warm() every 10 ms until Port prints READY (at most Tries times).
until_ready(_Port, _Warm, 0) ->
    error(tracer_not_ready);
until_ready(Port, Warm, Tries) ->
    _ = Warm(),
    receive
        {Port, {data, {eol, <<"READY">>}}} -> ok;
        {Port, {exit_status, S}} -> error({tracer_exited, S})
    after 10 -> until_ready(Port, Warm, Tries - 1)
    end.

%%% Floors

%% Every floor of dtrace_floors, as dtrace_floors:build/1 built them, in
%% this node: [{Key, Label, Result}], Result as dtrace_floors returns it (a
%% map with `floor', or {skip, Why}).
floors(Build) ->
    case Build of
        {skip, Why} ->
            [{K, L, {skip, Why}} || {K, L, _} <- floor_list(undefined)];
        {ok, P} ->
            [{K, L, F()} || {K, L, F} <- floor_list(P)]
    end.

%% The site forms (dtrace_floors_build:forms/0): `library' is the
%% library's own (`nop; nop10', trapped at its nop on every kernel a tracer
%% probes it at the note's address); `nop1' sys/sdt.h's; `nop5' the one
%% 6.18 optimizes into a call, the kernel's best case on this machine.
floor_list(P) ->
    [{tracer, "erl_tracer floor: a C tracer module doing nothing, per message of the ping-pong",
      fun() -> dtrace_floors:tracer_floor(P) end},
     {tracer_sdt, "erl_tracer + a bare SDT site (the library's nop; nop10) under bpftrace, per message",
      fun() -> dtrace_floors:tracer_sink_floor(P, sdt) end},
     {tracer_sdt_nop5, "erl_tracer + a bare SDT site (5-byte nop, optimized) under bpftrace, per message",
      fun() -> dtrace_floors:tracer_sink_floor(P, sdt, #{form => nop5}) end},
     {tracer_lttng, "erl_tracer + a C LTTng event (message_send layout) recorded, per message",
      fun() -> dtrace_floors:tracer_sink_floor(P, lttng) end},
     {node_library, "bare SDT site in a NIF of this node, the library's nop; nop10, under bpftrace (the hit)",
      fun() -> dtrace_floors:node_uprobe_floor(P, library) end},
     {node_nop1, "bare SDT site in a NIF of this node, 1-byte nop, under bpftrace (the hit)",
      fun() -> dtrace_floors:node_uprobe_floor(P, nop1) end},
     {node_nop5, "bare SDT site in a NIF of this node, 5-byte nop, under bpftrace (the hit)",
      fun() -> dtrace_floors:node_uprobe_floor(P, nop5) end},
     {so_library, "bare SDT site in a .so of a C program, the library's nop; nop10, under bpftrace",
      fun() -> dtrace_floors:uprobe_floor(P, library) end},
     {so_nop1, "bare SDT site in a .so of a C program, 1-byte nop, under bpftrace",
      fun() -> dtrace_floors:uprobe_floor(P, nop1) end},
     {so_nop5, "bare SDT site in a .so of a C program, 5-byte nop, under bpftrace",
      fun() -> dtrace_floors:uprobe_floor(P, nop5) end},
     {perf_library, "the library's nop; nop10 probed at its nop (int3), C program, perf counting",
      fun() -> dtrace_floors:perf_uprobe_floor(P, library, 0) end},
     {perf_library_nop10, "the library's nop; nop10 probed at its nop10 (+1), C program, perf counting",
      fun() -> dtrace_floors:perf_uprobe_floor(P, library, 1) end},
     {perf_nop5, "5-byte nop (optimized), C program, perf counting",
      fun() -> dtrace_floors:perf_uprobe_floor(P, nop5, 0) end},
     {lttng_send, "C LTTng event, message_send layout, recorded (C program)",
      fun() -> dtrace_floors:lttng_floor(P, message_send) end},
     {lttng_i4s4, "C LTTng event, i4s4 layout, recorded (C program)",
      fun() -> dtrace_floors:lttng_floor(P, i4s4) end}].

%% @private The ping-pong of the VM rows (dtrace_bench_vm), N round trips.
pingpong(N) ->
    dtrace_bench_vm:pingpong(N).

%% @private For trying the VM rows alone.
vm_rows_for_test() ->
    dtrace_bench_vm:vm_rows(can_trace()).
