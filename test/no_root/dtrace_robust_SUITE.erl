%%% The VM never crashes, whatever is passed and whenever a tracer comes and
%%% goes. Every test runs in a peer node, so a crash would show as a dead
%%% peer rather than take the test runner with it.
%%%
%%% Tests that need a tracer skip locally without one (saying why) and fail
%%% in CI (CI=true). The figures each test measures are printed to the CT
%%% log and to the console (grep "robust:").
-module(dtrace_robust_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_testcase/2, end_per_testcase/2]).
-export([vm_probes_listened/0]).
-export([any_term_disabled/1, any_term_enabled/1,
         huge_and_deep_iolists_cost_little/1,
         tracer_churn_under_load/1,
         lifecycle_under_load/1,
         memory_stays_flat/1,
         no_heap_allocation_on_probe_paths/1,
         nif_panic_becomes_an_erlang_error/1]).

-define(PROP_CALLS, 100000).
-define(CHURN_PROCS, 10000).
-define(CHURN_CYCLES, 50).
-define(MEMORY_CALLS, 10000000).

all() ->
    [any_term_disabled, any_term_enabled, huge_and_deep_iolists_cost_little,
     tracer_churn_under_load, lifecycle_under_load, memory_stays_flat,
     no_heap_allocation_on_probe_paths, nif_panic_becomes_an_erlang_error].

init_per_testcase(TC, Config) ->
    Needs = case TC of
                any_term_disabled -> [];
                nif_panic_becomes_an_erlang_error -> [];
                huge_and_deep_iolists_cost_little -> [gdb];
                _ -> [bpftrace]
            end,
    case lists:dropwhile(fun(T) -> dtrace_test_tracer:require_tracer(T) =:= ok end, Needs) of
        [] when TC =:= nif_panic_becomes_an_erlang_error;
                TC =:= no_heap_allocation_on_probe_paths -> Config;
        [] ->
            Peer = dtrace_test_peer:start_peer(["+P", "100000"]),
            [{peer, Peer}, {os_pid, dtrace_test_peer:os_pid(Peer)} | Config];
        [Missing | _] -> dtrace_test_tracer:require_tracer(Missing)
    end.

end_per_testcase(_TC, Config) ->
    dtrace_test_peer:stop_config_peer(Config).

in_peer(Config, M, F, A) ->
    peer:call(?config(peer, Config), M, F, A, 600000).

in_peer(Config, Fun) ->
    in_peer(Config, erlang, apply, [Fun, []]).

report(Fmt, Args) ->
    Line = io_lib:format("robust: " ++ Fmt, Args),
    ct:log("~ts", [Line]),
    io:format(user, "~ts~n", [Line]).

%%--------------------------------------------------------------------
%% Any term, any position

%% Every public function, any terms, no tracer: documented results only.
any_term_disabled(Config) ->
    Calls = in_peer(Config, dtrace_props, run, [?PROP_CALLS]),
    ?assert(Calls >= ?PROP_CALLS),
    ?assertEqual(false, in_peer(Config, dtrace, p, [])),
    report("~b calls with arbitrary terms, probes disabled: all documented", [Calls]).

%% The same with a tracer listening on user_trace__s1, user_trace__i4s4,
%% user_trace__n0..n31 (the labels the generator favours) and the four
%% efile_drv probes, so that the conversion code runs on every term.
any_term_enabled(Config) ->
    Program = [["usdt:$SO:erlang:", P, " { @events = count(); }\n"] || P <- property_probes()],
    Tracer = dtrace_test_tracer:bpftrace_start(?config(os_pid, Config), lists:flatten(Program)),
    _ = in_peer(Config, fun() ->
                                dtrace_test_workload:fire_until_true(fun() -> dtrace:user_trace_s1("x") end),
                                [dtrace_test_workload:fire_until_true(fun() -> dtrace:pn(L) end)
                                 || L <- lists:seq(0, 31)],
                                dtrace_test_workload:fire_until_true(fun dtrace:p/0),
                                dtrace_test_workload:fire_until_true(fun dtrace_nif:efile_enabled/0),
                                dtrace_test_workload:fire_until_true(fun ?MODULE:vm_probes_listened/0)
                        end),
    Calls = in_peer(Config, dtrace_props, run, [?PROP_CALLS]),
    Lines = dtrace_test_tracer:bpftrace_stop(Tracer),
    Events = dtrace_test_tracer:bpftrace_map(<<"@events">>, Lines),
    ?assert(Calls >= ?PROP_CALLS),
    %% The probes did fire on arbitrary terms (each case fires several).
    ?assert(Events > Calls div 10),
    report("~b calls with arbitrary terms, tracer attached: all documented, ~b events",
           [Calls, Events]).

%% The probes the enabled runs attach: the user probes the generator
%% favours, the file probes, and the VM probes (whose callbacks the
%% property calls by hand with any terms).
property_probes() ->
    ["user_trace__s1", "user_trace__i4s4"]
        ++ ["user_trace__n" ++ integer_to_list(L) || L <- lists:seq(0, 31)]
        ++ ["efile_drv__entry", "efile_drv__int_entry", "efile_drv__int_return",
            "efile_drv__return",
            "process__spawn", "process__exit", "process__scheduled", "process__unscheduled",
            "process__hibernate", "message__send", "message__send__remote", "message__queued",
            "global__function__entry", "local__function__entry", "function__return",
            "bif__entry", "bif__return", "gc_major__start", "gc_minor__start", "gc_major__end",
            "gc_minor__end", "port__open", "port__exit", "port__command",
            "dtrace_process__link", "dtrace_process__unlink", "dtrace_process__register",
            "dtrace_port__link", "span__begin", "span__end"].

%% In the peer: do the VM probes' semaphores show a tracer (the callbacks
%% answer trace for every kind of event)?
vm_probes_listened() ->
    Port = hd(erlang:ports()),
    lists:all(fun({Tag, Tracee}) -> dtrace_tracer:enabled(Tag, [], Tracee) =:= trace end,
              [{T, self()} || T <- [spawn, exit, in, out, send, 'receive', call, gc_minor_start,
                                    gc_major_end, link, unlink, register]]
              ++ [{T, Port} || T <- [open, closed, link, 'receive']]).

%%--------------------------------------------------------------------
%% Bounded work

%% A 100 MB iolist and lists nested 1,000,000 deep, with a tracer
%% listening: each call returns true, the strings reach the tracer as NULL,
%% and the node is fine. (The walk's bounds are asserted exactly by the
%% unit tests in args.rs; this is the same in a real VM.)
huge_and_deep_iolists_cost_little(Config) ->
    {{Results, Reductions}, Events} =
        dtrace_test_tracer:gdb_events(
          ?config(peer, Config),
          fun() ->
                  Huge = lists:duplicate(100000, binary:copy(<<"x">>, 1000)),
                  100000000 = iolist_size(Huge),
                  Deep = lists:foldl(fun(_, A) -> [A] end, [], lists:seq(1, 1000000)),
                  DeepTails = lists:foldl(fun(_, A) -> [A, $t] end, [], lists:seq(1, 1000000)),
                  {reductions, R0} = process_info(self(), reductions),
                  R = dtrace:p(1, 2, 3, 4, Huge, Deep, DeepTails, "ok"),
                  {reductions, R1} = process_info(self(), reductions),
                  {R, R1 - R0}
          end),
    ?assertEqual(true, Results),
    [Event] = Events,
    ?assertMatch({match, _}, re:run(Event, "ints=1,2,3,4 s1=NULL s2=NULL s3=NULL s4=ok$")),
    report("100 MB iolist and 1,000,000-deep lists passed as NULL (~b reductions for the call)",
           [Reductions]).

%%--------------------------------------------------------------------
%% Tracers attaching and detaching under load

%% 10,000 processes fire p and pn on all schedulers without pause while a
%% tracer attaches and detaches 50 times. The node survives, and in each
%% window during which the tracer is attached, the true returns equal the
%% events it counted (see dtrace_test_workload's churn protocol).
tracer_churn_under_load(Config) ->
    ok = in_peer(Config, dtrace_test_workload, churn_start, [?CHURN_PROCS]),
    Program = "
        usdt:$SO:erlang:user_trace__i4s4 {
            if (arg2 == 2) { printf(\"SEEN i4s4\\n\"); } else { if (arg2 >= 3) { @[arg2] = count(); } }
        }
        usdt:$SO:erlang:user_trace__n3 {
            if (arg2 == 2) { printf(\"SEEN n3\\n\"); } else { if (arg2 >= 3) { @[arg2] = count(); } }
        }",
    Windows =
        [begin
             E = Cycle + 2,
             {{Trues, _}, Lines} =
                 dtrace_test_tracer:bpftrace_window(
                   ?config(peer, Config), Program,
                   fun() -> dtrace:p(2), dtrace:pn(3, 2) end,
                   [<<"SEEN i4s4">>, <<"SEEN n3">>],
                   fun() ->
                           dtrace_test_workload:churn_open(E),
                           %% The workload: 100 ms of firing in window E
                           %% (the counts are maps, complete at once).
                           timer:sleep(100),
                           {dtrace_test_workload:churn_close(E), ok}
                   end),
             Events = dtrace_test_tracer:bpftrace_map(iolist_to_binary(["@[", integer_to_list(E), "]"]), Lines, 0),
             {E, Trues, Events}
         end || Cycle <- lists:seq(1, ?CHURN_CYCLES)],
    Alive = in_peer(Config, dtrace_test_workload, churn_workers_alive, []),
    ok = in_peer(Config, dtrace_test_workload, churn_stop, []),
    ?assertEqual(?CHURN_PROCS, Alive),
    ?assertEqual([], [W || {_, T, Ev} = W <- Windows, T =/= Ev]),
    Total = lists:sum([T || {_, T, _} <- Windows]),
    ?assert(lists:all(fun({_, T, _}) -> T > 0 end, Windows)),
    report("~b processes, ~b attach/detach cycles: ~b events, each window's true "
           "returns equal its events", [?CHURN_PROCS, ?CHURN_CYCLES, Total]).

%%--------------------------------------------------------------------
%% Lifecycle

%% While 100 processes keep firing and a tracer counts: load a new version
%% of the module (twice, purging in between), stop and start the
%% application, then delete and purge the module and load it again. The
%% probes keep firing and reaching the tracer throughout, so every true
%% return is an event.
%%
%% The workload starts only once bpftrace has printed an event (the ready
%% probe, i1 = -1): a true return alone does not mean the tracer listens,
%% since the kernel raises the semaphore when it registers the uprobe, a
%% moment before bpftrace attaches its program to it.
lifecycle_under_load(Config) ->
    Program = "
        usdt:$SO:erlang:user_trace__i4s4 {
            if (arg2 == -1) { printf(\"SEEN ready\\n\"); } else { @events = count(); }
        }",
    {{Checks, Alive, Trues}, Lines} =
        dtrace_test_tracer:bpftrace_window(
          ?config(peer, Config), Program,
          fun() -> dtrace:p(-1) end,
          [<<"SEEN ready">>],
          fun() ->
                  Self = self(),
                  Workers = [spawn(fun() -> lifecycle_worker(Self, 0) end)
                             || _ <- lists:seq(1, 100)],
                  Check = fun(Step) ->
                                  timer:sleep(50),
                                  {Step, dtrace:available(), dtrace:p(Step)}
                          end,
                  S1 = Check(1),
                  {module, dtrace} = code:load_file(dtrace),
                  S2 = Check(2),
                  true = code:soft_purge(dtrace),
                  {module, dtrace} = code:load_file(dtrace),
                  true = code:soft_purge(dtrace),
                  S3 = Check(3),
                  ok = application:start(dtrace),
                  ok = application:stop(dtrace),
                  ok = application:start(dtrace),
                  S4 = Check(4),
                  true = code:delete(dtrace),
                  ok = purge_until_done(),
                  {module, dtrace} = code:ensure_loaded(dtrace),
                  S5 = Check(5),
                  Alive0 = length([W || W <- Workers, is_process_alive(W)]),
                  [W ! stop || W <- Workers],
                  Trues0 = lists:sum([receive {trues, W, T} -> T end || W <- Workers]),
                  {[S1, S2, S3, S4, S5], Alive0, Trues0}
          end),
    ?assertEqual([{I, true, true} || I <- lists:seq(1, 5)], Checks),
    ?assertEqual(100, Alive),
    Events = dtrace_test_tracer:bpftrace_map(<<"@events">>, Lines),
    ?assert(Trues > 0),
    %% The workers' true returns and the five checks, no more, no fewer.
    ?assertEqual(Trues + 5, Events),
    report("module reloaded twice, application restarted, module deleted, purged and "
           "loaded again, under load: probes fired throughout (~b true returns, ~b events)",
           [Trues, Events]).

%% A worker may be inside the old code for a moment: soft_purge refuses
%% until it is not.
purge_until_done() ->
    case code:soft_purge(dtrace) of
        true -> ok;
        false -> timer:sleep(1), purge_until_done()
    end.

lifecycle_worker(Parent, Trues) ->
    receive stop -> Parent ! {trues, self(), Trues}
    after 0 ->
            T = case dtrace:p(7, "lifecycle") of true -> 1; _ -> 0 end,
            timer:sleep(1),
            lifecycle_worker(Parent, Trues + T)
    end.

%%--------------------------------------------------------------------
%% Memory

%% 10 million enabled calls with strings, from two processes: the VM's
%% memory and the OS's RSS stay flat.
memory_stays_flat(Config) ->
    Tracer = dtrace_test_tracer:bpftrace_start(?config(os_pid, Config), "
        usdt:$SO:erlang:user_trace__i4s4 { @events = count(); }"),
    {Before, After, Trues} =
        in_peer(Config,
                fun() ->
                        1 = dtrace_test_workload:fire_until_true(fun dtrace:p/0),
                        dtrace:put_tag(<<"memory-test">>),
                        Work = fun(N) ->
                                       dtrace_test_workload:count_trues(
                                         fun(I) -> dtrace:p(I, 2, "a charlist", <<"a binary">>) end, N)
                               end,
                        _ = Work(100000),
                        Before = memory_now(),
                        Self = self(),
                        Pids = [spawn_link(fun() ->
                                                   dtrace:put_tag(<<"memory-test">>),
                                                   Self ! {self(), Work(?MEMORY_CALLS div 2)}
                                           end) || _ <- [1, 2]],
                        T = lists:sum([receive {P, N} -> N end || P <- Pids]),
                        {Before, memory_now(), T}
                end),
    Lines = dtrace_test_tracer:bpftrace_stop(Tracer),
    ?assertEqual(?MEMORY_CALLS, Trues),
    ?assert(dtrace_test_tracer:bpftrace_map(<<"@events">>, Lines) >= Trues),
    {VmBefore, RssBefore} = Before,
    {VmAfter, RssAfter} = After,
    MB = 1024 * 1024,
    report("~b enabled calls: erlang:memory(total) ~.1f -> ~.1f MB, RSS ~.1f -> ~.1f MB",
           [Trues, VmBefore / MB, VmAfter / MB, RssBefore / MB, RssAfter / MB]),
    %% Flat: within 4 MB (allocator caches and timing noise), nowhere near
    %% the ~10 GB that leaking even the converted strings would take.
    ?assert(abs(VmAfter - VmBefore) < 4 * MB),
    ?assert(RssAfter - RssBefore < 4 * MB).

memory_now() ->
    [erlang:garbage_collect(P) || P <- processes()],
    {ok, Status} = file:read_file("/proc/self/status"),
    {match, [Kb]} = re:run(Status, "VmRSS:\\s+(\\d+) kB", [{capture, all_but_first, list}]),
    {erlang:memory(total), list_to_integer(Kb) * 1024}.

%%--------------------------------------------------------------------
%% Test builds: the cargo feature test-hooks

%% No heap allocation on any probe path, in the real NIF on real terms: a
%% build with a counting allocator (cargo feature test-hooks; dtrace_nif:test_allocations/0
%% returns the count of allocations made inside NIF bodies) runs the
%% any-term property with a tracer on every probe it fires, so that every
%% conversion runs, and then the 1024-byte strings, the 1 MB iolist and the
%% deep lists once more. The count stays 0.
no_heap_allocation_on_probe_paths(_Config) ->
    Peer = dtrace_test_peer:start_test_hooks_peer(),
    OsPid = peer:call(Peer, os, getpid, []),
    Program = [["usdt:", dtrace_test_peer:test_hooks_nif(), ":erlang:", P, " { @events = count(); }\n"]
               || P <- property_probes()],
    Tracer = dtrace_test_tracer:bpftrace_start(OsPid, lists:flatten(Program)),
    try
        _ = peer:call(Peer, erlang, apply,
                      [fun() ->
                               dtrace_test_workload:fire_until_true(fun() -> dtrace:user_trace_s1("x") end),
                               [dtrace_test_workload:fire_until_true(fun() -> dtrace:pn(L) end)
                                || L <- lists:seq(0, 31)],
                               dtrace_test_workload:fire_until_true(fun dtrace:p/0),
                               dtrace_test_workload:fire_until_true(fun dtrace_nif:efile_enabled/0),
                               dtrace_test_workload:fire_until_true(fun ?MODULE:vm_probes_listened/0)
                       end, []]),
        Calls = peer:call(Peer, dtrace_props, run, [?PROP_CALLS div 4], 600000),
        Big = peer:call(Peer, erlang, apply,
                        [fun() ->
                                 dtrace:put_tag(<<"tag">>),
                                 [dtrace:p(1, 2, 3, 4, T, T, T, T) || T <- dtrace_props:huge_terms()]
                                     ++ [dtrace:pn(3, 1, T) || T <- dtrace_props:huge_terms()]
                                     ++ [dtrace:user_trace_s1(T) || T <- dtrace_props:huge_terms()]
                         end, []]),
        Allocations = peer:call(Peer, dtrace_nif, test_allocations, []),
        Lines = dtrace_test_tracer:bpftrace_stop(Tracer),
        Events = dtrace_test_tracer:bpftrace_map(<<"@events">>, Lines),
        ?assert(lists:member(true, Big)),
        ?assert(Events > Calls div 10),
        ?assertEqual(0, Allocations),
        report("~b calls with arbitrary terms and the huge ones, tracer attached (~b events): "
               "~b heap allocations inside NIF bodies", [Calls + length(Big), Events, Allocations])
    after
        peer:stop(Peer)
    end.

%% A NIF that panics raises error:nif_panicked instead of unwinding into the
%% VM. The library never panics on purpose; this test uses the build with
%% the cargo feature test-hooks, under which dtrace_nif:test_panic/0 panics.
nif_panic_becomes_an_erlang_error(_Config) ->
    Peer = dtrace_test_peer:start_test_hooks_peer(),
    try
        ?assertEqual(true, peer:call(Peer, dtrace, available, [])),
        %% peer:call/4 raises what the remote call raised.
        ?assertError(nif_panicked, peer:call(Peer, dtrace_nif, test_panic, [])),
        %% The node and the library are fine afterwards.
        ?assertEqual(badarg, peer:call(Peer, dtrace, pn, [-1])),
        ?assertEqual(false, peer:call(Peer, dtrace, p, [1])),
        report("a panic in the NIF became error:nif_panicked; the node went on", [])
    after
        peer:stop(Peer)
    end.

