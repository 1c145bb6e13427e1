%%% `make bench`: the cost of dtrace's probe paths, against baselines,
%%% measured in one run on one VM, and the budgets they must meet.
%%%
%%% Every row is the time per call of a loop of N calls through a fun (the
%%% fun call is in every row, baselines included). Rows are measured in
%%% rounds, every row once per round, after a warm-up round: the first
%%% loop of a fresh VM runs slow, and measuring rows one after the other
%%% would charge that to whichever row comes first. A row reports the
%%% median of its rounds and the spread (min..max).
%%%
%%% Enabled rows run with bpftrace attached to this node and counting; the
%%% floor is a bare hit of the library's own user_trace__i4s4 site from a
%%% native program (bare_probe), with the same tracer program shape. Without root or bpftrace those rows are skipped.
-module(dtrace_bench).

-export([main/1, empty/0, vm_rows_for_test/0, p4_disabled_ns/1]).

-define(ROUNDS, 7).
-define(N_DISABLED, 2000000).
-define(N_ENABLED, 200000).
-define(N_THROUGHPUT, 10000000).

main([OutFile, BareProbe, NoLttngEbin]) ->
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
         {"dtrace_nif:efile_enabled/0 (dtrace_file's check)", fun() -> dtrace_nif:efile_enabled() end},
         {"file:position/2, no device (badarg, no I/O)", fun() -> file:position(nofile, cur) end},
         {"dtrace_file:position/2, no device (badarg)", fun() -> dtrace_file:position(nofile, cur) end},
         {"file:position/2, raw file (lseek, dirty I/O)", fun() -> file:position(Fd, cur) end},
         {"dtrace_file:position/2, raw file", fun() -> dtrace_file:position(Fd, cur) end},
         {"dtrace_provider:fire/3 (int, string)", fun() -> dtrace_provider:fire(Prov, req, [1, "ab"]) end},
         {"dtrace_provider:fire/2 (probe handle; int, string)", fun() -> dtrace_provider:fire(Req, [1, "ab"]) end}],
    io:format("~nDisabled (no tracer), ~b calls per round, ~b rounds:~n", [?N_DISABLED, ?ROUNDS]),
    DisRows = measure(Disabled, ?N_DISABLED),
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
    {EnRows, Floor, Why} =
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
                F = bare_floor(BareProbe),
                io:format("  ~-44s ~8.1f ns  (~.1f..~.1f)~n",
                          ["bare SDT hit, native program (floor)" | tuple_to_list(F)]),
                {Rows, F, ""};
            {skip, W} ->
                io:format("~nEnabled rows skipped: ~s~n", [W]),
                {[], undefined, W}
        end,
    VmRows = vm_rows(can_trace()),
    print(VmRows),
    {LttngRows0, LttngWhy} = lttng_rows(),
    LttngRows = LttngRows0 ++ sink_rows(NoLttngEbin),
    print(LttngRows),
    Budgets = budgets(DisRows, Tput, EnRows, Floor, Work) ++ vm_budgets(VmRows)
        ++ lttng_budgets(LttngRows, VmRows, EnRows, Work)
        ++ provider_budgets(DisRows, ProvWork, EnRows, Floor),
    io:format("~nBudgets:~n"),
    [io:format("  ~-84s ~s~n", [Text, verdict(OK)]) || {Text, OK} <- Budgets],
    write_md(OutFile, DisRows ++ Spread, Tput, Work ++ ProvWork, EnRows, Floor, Why, VmRows,
             {LttngRows, LttngWhy}, Budgets),
    io:format("~nWritten to ~s~n", [OutFile]),
    halt(case lists:all(fun({_, OK}) -> OK =/= false end, Budgets) of true -> 0; false -> 1 end).

empty() -> ok.

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

%% The budget compares capacity: the best of each case's runs. On a small
%% VM the host may take time from one vCPU during any run, which slows the
%% 2-process case only; the best runs are the ones it did not.
best(Tput, K) ->
    {_, _, Max} = proplists:get_value(K, Tput),
    Max.

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

%%% VM probes: a message ping-pong

-define(PINGPONG, 500000).

%% Time per message of a ping-pong of ?PINGPONG round trips (1M messages)
%% between this process and an echo process.
pingpong() ->
    Echo = spawn_link(fun Loop() -> receive {From, M} -> From ! M, Loop() end end),
    Me = self(),
    T0 = erlang:monotonic_time(nanosecond),
    pingpong(Echo, Me, ?PINGPONG),
    T = erlang:monotonic_time(nanosecond) - T0,
    unlink(Echo),
    exit(Echo, kill),
    T / (2 * ?PINGPONG).

pingpong(_Echo, _Me, 0) -> ok;
pingpong(Echo, Me, N) -> Echo ! {Me, ping}, receive ping -> pingpong(Echo, Me, N - 1) end.

%% The ping-pong without the dtrace application, with it (no tracer), and
%% with it and a tracer on message__send (bpftrace, counting), against an
%% Erlang process tracer of the same send events, and with a tracer on
%% process__spawn only. [{Name, {Median, Min, Max}}] in ns per message.
vm_rows(CanTrace) ->
    io:format("~nVM probes: message ping-pong, ~b messages per run:~n", [2 * ?PINGPONG]),
    _ = pingpong(),
    Pairs = [begin
                 _ = application:stop(dtrace),
                 Off = pingpong(),
                 {ok, _} = application:ensure_all_started(dtrace),
                 timer:sleep(200),
                 {Off, pingpong()}
             end || _ <- lists:seq(1, 5)],
    Base = [{"ping-pong, dtrace application not running", stats([O || {O, _} <- Pairs])},
            {"ping-pong, dtrace application running, no tracer", stats([W || {_, W} <- Pairs])}],
    Sink = spawn(fun Drain() -> receive _ -> Drain() end end),
    Process = [begin
                   _ = erlang:trace(all, true, [send, {tracer, Sink}]),
                   T = pingpong(),
                   _ = erlang:trace(all, false, [send]),
                   T
               end || _ <- lists:seq(1, 3)],
    {message_queue_len, SinkQueue} = erlang:process_info(Sink, message_queue_len),
    exit(Sink, kill),
    io:format("  (the process tracer's sink had ~b trace messages queued after its runs)~n", [SinkQueue]),
    ProcRow = {"ping-pong, Erlang process tracer on send (erlang:trace/3)", stats(Process)},
    case CanTrace of
        ok ->
            Send = traced_pingpong("message__send",
                                   fun(#{flags := #{processes := P}}) -> lists:member(send, P) end),
            %% process__spawn alone: meta tracing of the spawn BIFs, no flag.
            Spawn = traced_pingpong("process__spawn", fun(#{spawn_meta := M}) -> M =:= on end),
            Base ++ [ProcRow,
                     {"ping-pong, bpftrace on message__send (count)", Send},
                     {"ping-pong, bpftrace on process__spawn only", Spawn}];
        {skip, _} ->
            Base ++ [ProcRow]
    end.

%% Three ping-pong runs with bpftrace counting Probe, once automatic mode
%% has done what Ready(Status) checks.
traced_pingpong(Probe, Ready) ->
    Tracer = bpftrace(os:getpid(), "usdt:" ++ nif() ++ ":erlang:" ++ Probe ++ " { @n = count(); }"),
    ok = wait_vm(Ready, 200),
    timer:sleep(500),
    Runs = [pingpong() || _ <- lists:seq(1, 3)],
    MaxQueue = lists:max([N || P <- processes(), {message_queue_len, N} <- [erlang:process_info(P, message_queue_len)]]),
    stop(Tracer),
    io:format("  (bpftrace on ~s: longest mailbox of any process after the runs: ~b)~n", [Probe, MaxQueue]),
    stats(Runs).

wait_vm(_Ready, 0) ->
    timeout;
wait_vm(Ready, Tries) ->
    case Ready(dtrace:vm_probes()) of
        true -> ok;
        false -> timer:sleep(10), wait_vm(Ready, Tries - 1)
    end.

vm_budgets(Rows) ->
    Med = fun(Name) -> case proplists:get_value(Name, Rows) of
                           {M, _, _} -> M;
                           undefined -> undefined
                       end
          end,
    Off = Med("ping-pong, dtrace application not running"),
    On = Med("ping-pong, dtrace application running, no tracer"),
    Proc = Med("ping-pong, Erlang process tracer on send (erlang:trace/3)"),
    Send = Med("ping-pong, bpftrace on message__send (count)"),
    Spawn = Med("ping-pong, bpftrace on process__spawn only"),
    [{io_lib:format("ping-pong with the application running, no tracer >= 0.98 x the throughput "
                    "without it: ~.3fx", [Off / On]), Off / On >= 0.98}
     | case Send of
           undefined ->
               [{"VM probe budgets with a tracer: not measured", skipped}];
           _ ->
               [{io_lib:format("message__send under bpftrace: overhead per message <= 0.7 x the process "
                               "tracer's: ~.1f ns vs ~.1f ns (~.2fx)",
                               [Send - On, Proc - On, (Send - On) / (Proc - On)]),
                 Send - On =< 0.7 * (Proc - On)},
                {io_lib:format("process__spawn under bpftrace: ping-pong pays <= 2%: ~.1f%",
                               [100 * (Spawn - On) / On]),
                 Spawn =< 1.02 * On}]
       end].

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
            wait_until(fun() -> #{flags := #{processes := P}} = dtrace:vm_probes(), lists:member(send, P) end),
            timer:sleep(500),
            Send = stats([pingpong() || _ <- lists:seq(1, 3)]),
            Lost2 = lttng_stop(Dir2),
            wait_until(fun() -> #{flags := #{processes := P}} = dtrace:vm_probes(), P =:= [] end),
            io:format("  (events the session discarded: ~ts; ~ts)~n", [Lost1, Lost2]),
            {User ++ [{"ping-pong, LTTng session on org_erlang_dyntrace:message_send (auto)", Send}], ""};
        {skip, Why} ->
            io:format("~nLTTng rows skipped: ~s~n", [Why]),
            {[], Why}
    end.

%% Disabled dtrace:p/4 in two fresh nodes started alike, one with this
%% library and one with the same library built without the LTTng sink,
%% measured in alternate rounds.
sink_rows(NoLttngEbin) ->
    io:format("~nDisabled dtrace:p/4, with and without the LTTng sink built in (two nodes):~n"),
    Bench = filename:dirname(code:which(?MODULE)),
    Start = fun(Ebin) ->
                    {ok, P, _} = peer:start_link(#{connection => standard_io,
                                                   args => ["+S", "2:2", "+sbt", "db", "-pa", Ebin, "-pa", Bench]}),
                    P
            end,
    With = Start(filename:dirname(code:which(dtrace))),
    Without = Start(NoLttngEbin),
    #{lttng := true} = peer:call(With, dtrace, sinks, []),
    #{lttng := {false, <<"built without the LTTng sink">>}} = peer:call(Without, dtrace, sinks, []),
    Run = fun(P, N) -> peer:call(P, ?MODULE, p4_disabled_ns, [N], 60000) end,
    _ = [Run(P, ?N_DISABLED div 10) || P <- [With, Without]],
    Rounds = [{Run(With, ?N_DISABLED), Run(Without, ?N_DISABLED)} || _ <- lists:seq(1, ?ROUNDS)],
    peer:stop(With),
    peer:stop(Without),
    [{"dtrace:p/4 disabled, LTTng sink built in (node A)", stats([W || {W, _} <- Rounds])},
     {"dtrace:p/4 disabled, built without the LTTng sink (node B)", stats([O || {_, O} <- Rounds])}].

%% @private In a node of sink_rows/1.
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
    Port = open_port({spawn_executable, os:find_executable("lttng")},
                     [{args, Args}, stderr_to_stdout, exit_status, binary]),
    collect(Port, <<>>).

collect(Port, Acc) ->
    receive
        {Port, {data, D}} -> collect(Port, <<Acc/binary, D/binary>>);
        {Port, {exit_status, S}} -> {S, binary_to_list(Acc)}
    after 60000 -> error(lttng_did_not_answer)
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

lttng_budgets(Rows, VmRows, En, Work) ->
    Med = fun(Rs, Name) -> element(1, proplists:get_value(Name, Rs)) end,
    A = Med(Rows, "dtrace:p/4 disabled, LTTng sink built in (node A)"),
    B = Med(Rows, "dtrace:p/4 disabled, built without the LTTng sink (node B)"),
    [{io_lib:format("disabled dtrace:p/4 with the LTTng sink built in within 2 ns of without it: "
                    "~.1f ns vs ~.1f ns", [A, B]), A - B =< 2}
     | lttng_session_budgets(Rows, VmRows, En, Work)].

lttng_session_budgets(Rows, VmRows, En, Work) ->
    Med = fun(Rs, Name) -> element(1, proplists:get_value(Name, Rs)) end,
    case proplists:is_defined("dtrace:p/4 (2 ints, 2 strings), LTTng", Rows) of
        false -> [{"LTTng session budgets: not measured", skipped}];
        true -> lttng_session_budgets(Rows, VmRows, En, Work, Med)
    end.

lttng_session_budgets(Rows, VmRows, En, Work, Med) ->
    P4 = Med(Rows, "dtrace:p/4 (2 ints, 2 strings), LTTng"),
    NoTrap = Med(Work, "dtrace:p/4 (2 ints, 2 strings), enabled, no trap"),
    On = Med(VmRows, "ping-pong, dtrace application running, no tracer"),
    Proc = Med(VmRows, "ping-pong, Erlang process tracer on send (erlang:trace/3)"),
    Send = Med(Rows, "ping-pong, LTTng session on org_erlang_dyntrace:message_send (auto)"),
    [{io_lib:format("(for reference, not a budget) LTTng's own cost per event: dtrace:p/4 with a "
                    "session - enabled without a trap: ~.1f ns", [P4 - NoTrap]), info}
     | case En of
           [] -> [{"dtrace:p/4 into LTTng vs under bpftrace: not measured", skipped}];
           _ ->
               Uprobe = Med(En, "dtrace:p/4 (2 ints, 2 strings)"),
               [{io_lib:format("dtrace:p/4 with an LTTng session <= 0.5 x under bpftrace (a uprobe): "
                               "~.1f ns vs ~.1f ns (~.2fx)", [P4, Uprobe, P4 / Uprobe]),
                 P4 =< 0.5 * Uprobe}]
       end]
    ++ [{io_lib:format("message_send into LTTng: overhead per message <= 0.5 x the process tracer's: "
                       "~.1f ns vs ~.1f ns (~.2fx)", [Send - On, Proc - On, (Send - On) / (Proc - On)]),
         Send - On =< 0.5 * (Proc - On)}].

%%% Tracers

nif() ->
    filename:join(code:priv_dir(dtrace), "dtrace_nif.so").

can_trace() ->
    case {os:find_executable("bpftrace"), string:trim(os:cmd("id -u"))} of
        {false, _} -> {skip, "bpftrace is not installed"};
        {_, "0"} -> ok;
        _ -> {skip, "attaching bpftrace needs root"}
    end.

bpftrace(OsPid, Prog) ->
    Port = open_port({spawn_executable, os:find_executable("bpftrace")},
                     [{args, ["-p", OsPid, "-e", Prog]}, {line, 4096},
                      stderr_to_stdout, exit_status, binary]),
    wait_line(Port, <<"Attaching">>),
    Port.

stop(Port) ->
    {os_pid, Pid} = erlang:port_info(Port, os_pid),
    _ = os:cmd("kill -INT " ++ integer_to_list(Pid)),
    drain(Port).

drain(Port) ->
    receive
        {Port, {exit_status, _}} -> ok;
        {Port, _} -> drain(Port)
    after 30000 -> error(bpftrace_did_not_stop)
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

wait_enabled(Enabled) ->
    case Enabled() of
        true -> ok;
        false -> timer:sleep(10), wait_enabled(Enabled)
    end.

%% The bare hit, five runs: {Median, Min, Max} ns per hit.
bare_floor(Exe) ->
    stats([bare_once(Exe) || _ <- lists:seq(1, 5)]).

bare_once(Exe) ->
    Port = open_port({spawn_executable, Exe},
                     [{args, [integer_to_list(?N_ENABLED * 5)]}, {line, 4096}, exit_status, binary]),
    <<"pid ", Pid/binary>> = wait_line(Port, <<"pid ">>),
    Tracer = bpftrace(binary_to_list(Pid),
                      "usdt:" ++ Exe ++ ":erlang:user_trace__i4s4 { @hits = count(); }"),
    <<"bare_hit_ns ", Ns/binary>> = wait_line(Port, <<"bare_hit_ns">>),
    drain(Port),
    stop(Tracer),
    binary_to_float(Ns).

%%% Budgets (issue: performance budgets), as ratios measured in this run.

budgets(Dis, Tput, En, Floor, Work) ->
    Med = fun(Rows, Name) -> element(1, proplists:get_value(Name, Rows)) end,
    Own = Med(Work, "dtrace:p/4 (2 ints, 2 strings), enabled, no trap")
        - Med(Dis, "dtrace:p/4 (2 ints, 2 strings)"),
    Stock = Med(Dis, "stock dyntrace:p/4 (runtime_tools)"),
    P4 = Med(Dis, "dtrace:p/4 (2 ints, 2 strings)"),
    T1 = best(Tput, 1),
    T2 = best(Tput, 2),
    %% dtrace_file's disabled overhead (measured on calls that do no I/O:
    %% a real lseek runs on a dirty I/O scheduler and varies by far more
    %% than the overhead) against one call of its semaphore check.
    Wrapped = Med(Dis, "dtrace_file:position/2, no device (badarg)")
        - Med(Dis, "file:position/2, no device (badarg, no I/O)"),
    Check = Med(Dis, "dtrace_nif:efile_enabled/0 (dtrace_file's check)"),
    [{io_lib:format("disabled dtrace:p/4 <= 0.9 x stock dyntrace:p/4: ~.2fx", [P4 / Stock]),
      P4 =< 0.9 * Stock},
     {io_lib:format("disabled dtrace_file overhead <= a call of its check: ~.1f ns vs ~.1f ns",
                    [Wrapped, Check]),
      Wrapped =< Check},
     {io_lib:format("2-scheduler disabled throughput >= 1.8 x 1-scheduler (best runs): ~.2fx",
                    [T2 / T1]),
      T2 >= 1.8 * T1},
     {io_lib:format("library's work per enabled dtrace:p/4 (enabled without a trap - disabled) "
                    "<= 150 ns: ~.1f ns", [Own]),
      Own =< 150}
     | over_floor("dtrace:p/4", "dtrace:p/4 (2 ints, 2 strings)", En, Floor)].

%% The run-time provider's budgets (issue #12): disabled fire/3 against
%% disabled dtrace:p/4; the library's own work per enabled fire/3 (enabled
%% without a trap, minus the loop's empty call) against 200 ns; and, for
%% reference, enabled fire/3 under bpftrace minus the bare SDT hit.
provider_budgets(Dis, Work, En, Floor) ->
    Med = fun(Rows, Name) -> element(1, proplists:get_value(Name, Rows)) end,
    Fire = Med(Dis, "dtrace_provider:fire/3 (int, string)"),
    P4 = Med(Dis, "dtrace:p/4 (2 ints, 2 strings)"),
    Own = Med(Work, "dtrace_provider:fire/3 (int, string), enabled, no trap") - Med(Dis, "empty Erlang call"),
    [{io_lib:format("disabled dtrace_provider:fire/3 <= 1.5 x disabled dtrace:p/4: ~.2fx", [Fire / P4]),
      Fire =< 1.5 * P4},
     {io_lib:format("library's work per enabled dtrace_provider:fire/3 (enabled without a trap "
                    "- empty call) <= 200 ns: ~.1f ns", [Own]),
      Own =< 200}
     | over_floor("dtrace_provider:fire/3", "dtrace_provider:fire/3 (int, string)", En, Floor)].

%% For reference, not a budget: the enabled row Row of Call under bpftrace
%% minus the bare SDT hit of the native floor program (En: the enabled rows;
%% Floor: the floor's row, undefined when bpftrace could not run).
over_floor(Call, _Row, [], _Floor) ->
    [{"enabled " ++ Call ++ " under bpftrace - bare SDT hit: not measured", skipped}];
over_floor(Call, Row, En, {F, _, _}) ->
    {E, _, _} = proplists:get_value(Row, En),
    [{io_lib:format("(for reference, not a budget) enabled ~s under bpftrace - bare SDT hit "
                    "in a native program: ~.1f ns", [Call, E - F]),
      info}].

verdict(true) -> "PASS";
verdict(false) -> "FAIL";
verdict(skipped) -> "skipped";
verdict(info) -> "measured".

%%% BENCHMARKS.md

write_md(File, Dis, Tput, Work, En, Floor, Why, Vm, {Lttng, LttngWhy}, Budgets) ->
    Row = fun({Name, {Med, Min, Max}}) ->
                  io_lib:format("| ~s | ~.1f | ~.1f..~.1f |~n", [Name, Med, Min, Max])
          end,
    Cpu = case re:run(os:cmd("grep -m1 'model name' /proc/cpuinfo"), ":\\s*(.*)",
                      [{capture, all_but_first, list}]) of
              {match, [C]} -> string:trim(C);
              _ -> "unknown"
          end,
    Text =
        ["# Benchmarks\n\n",
         "Written by `make bench` (bench/dtrace_bench.erl); numbers from one run on one VM.\n",
         "Each row is the time per call of a loop of calls through a fun, as the median of ",
         integer_to_list(?ROUNDS), " rounds after a warm-up round, with the spread (min..max).\n\n",
         io_lib:format("- date: ~s~n", [calendar:system_time_to_rfc3339(erlang:system_time(second))]),
         io_lib:format("- machine: ~s, ~b schedulers online~n", [Cpu, erlang:system_info(schedulers_online)]),
         io_lib:format("- kernel: ~s~n", [string:trim(os:cmd("uname -sr"))]),
         io_lib:format("- OTP: ~s (erts ~s), dynamic_trace: ~p~n",
                       [erlang:system_info(otp_release), erlang:system_info(version),
                        erlang:system_info(dynamic_trace)]),
         io_lib:format("- tracer: ~s~n~n", [string:trim(os:cmd("bpftrace --version 2>/dev/null"))]),
         "## Disabled probes (no tracer attached)\n\n| call | ns/call | spread |\n|---|---|---|\n",
         [Row(R) || R <- Dis],
         "\n## Disabled throughput, `dtrace:p/4`\n\n| schedulers busy | M calls/s | spread |\n|---|---|---|\n",
         [io_lib:format("| ~b | ~.1f | ~.1f..~.1f |~n", [K, M / 1.0e6, Mi / 1.0e6, Ma / 1.0e6])
          || {K, {M, Mi, Ma}} <- Tput],
         "\n## Enabled without a tracer (semaphore raised by hand, no trap)\n\n"
         "The library's own work per enabled call: the semaphore of `user_trace__i4s4` (or of the\n"
         "run-time provider's probe) is raised by writing the process's own memory, as a tracer\n"
         "does, but no breakpoint is installed, so the site's `nop` runs.\n\n| call | ns/call | spread |\n|---|---|---|\n",
         [Row(R) || R <- Work],
         "\n## Enabled probes (bpftrace attached, counting)\n\n",
         case En of
             [] -> ["Skipped: ", Why, ".\n"];
             _ -> ["| call | ns/call | spread |\n|---|---|---|\n", [Row(R) || R <- En],
                   Row({"bare SDT hit, native program (the floor)", Floor})]
         end,
         "\n## VM probes: message ping-pong (ns per message)\n\n"
         "Automatic mode sets the trace flags only while a tracer listens. Each row is the median of\n"
         "its runs (1M messages each).\n\n| run | ns/message | spread |\n|---|---|---|\n",
         [Row(R) || R <- Vm],
         "\n## LTTng-UST (a session recording, no uprobe)\n\n"
         "The same calls with an LTTng session (discard mode, 8 x 8 MiB sub-buffers per CPU)\n"
         "recording their `org_erlang_dtrace` events instead of bpftrace on their SDT probes, and\n"
         "the ping-pong with automatic mode feeding `org_erlang_dyntrace:message_send`.\n\n",
         case LttngWhy of
             "" -> [];
             _ -> ["Session rows skipped: ", LttngWhy, ".\n\n"]
         end,
         "The last two rows are measured in two fresh nodes started alike (alternate rounds), one\n"
         "with this library and one with the same library built without the LTTng sink.\n\n"
         "| call | ns/call | spread |\n|---|---|---|\n", [Row(R) || R <- Lttng],
         "\n## Budgets\n\n",
         [io_lib:format("- ~s: **~s**~n", [T, verdict(OK)]) || {T, OK} <- Budgets],
         "- no heap allocation on any probe path: asserted in the real NIF by\n"
         "  `dtrace_robust_SUITE:no_heap_allocation_on_probe_paths` (a build with a counting\n"
         "  allocator runs the any-term property with a tracer attached: 0 allocations inside\n"
         "  NIF bodies), and for the iolist walk by `cargo test`\n"
         "  (`args::tests::reading_allocates_nothing`). The disabled path reads one semaphore\n"
         "  and returns an atom.\n"
         "- work bounded whatever the iolist: asserted by `cargo test`\n"
         "  (`a_huge_iolist_costs_what_its_first_kilobyte_costs`,\n"
         "  `work_is_bounded_by_the_visit_budget`, `depth_is_bounded`); the 1 MB row above\n"
         "  costs about what a short string does.\n",
         "\n## Reading the numbers\n\n"
         "- Every row includes the fun call of the loop: compare rows with the empty-call baselines.\n"
         "- `dtrace_file` rows: the wrapper's disabled cost is the difference between the two\n"
         "  no-device rows (no I/O, so nothing else varies); the raw-file rows show it against a\n"
         "  real `lseek`, which runs on a dirty I/O scheduler. Enabled, a file call fires four\n"
         "  probes (each a uprobe trap, see the floor row) and formats its arguments.\n"
         "- `pn` decodes its label before the semaphore check (OTP's order: a bad label is `badarg`\n"
         "  even while disabled), hence a few ns more than `p`.\n"
         "- Enabled rows are dominated by the kernel's uprobe trap. The library's own work (pid text,\n"
         "  cached per scheduler thread; tag and argument conversion into stack buffers; the site) is\n"
         "  the \"no trap\" rows minus the disabled rows. The trap costs more inside the VM than in\n"
         "  the small native floor program on some hosts (see the reference line under Budgets), so\n"
         "  the budget is set on the library's own work.\n"],
    ok = file:write_file(File, Text).

%% @private For trying the VM rows alone.
vm_rows_for_test() ->
    Rows = vm_rows(can_trace()),
    Rows ++ [{budget, T, OK} || {T, OK} <- vm_budgets(Rows)].
