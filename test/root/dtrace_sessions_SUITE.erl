%%% Automatic mode and an operator's own tracing on the same node, on every
%%% OTP: with trace sessions (OTP 27+) both follow the same processes and
%%% neither sees the other; without them (OTP 25, 26) automatic mode leaves
%%% the operator's processes alone (the documented limit: one tracer per
%%% process). Tracers by hand, {tracer, dtrace_tracer, []} and {tracer, dyntrace,
%%% []}, while automatic mode runs; and no flag of dtrace's left shortly
%%% after the last listener leaves. Where two sessions tracing one process
%%% for GC crash the VM (OTP 27.0 to 29.1.1), the library never makes that
%%% overlap, whoever traced the process's GC first.
-module(dtrace_sessions_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_testcase/2, end_per_testcase/2]).
-export([operators_trace_untouched_by_attach_cycles/1, operator_traces_all_while_automatic_mode_runs/1,
         tracers_by_hand_while_automatic_mode_runs/1, no_flag_left_after_the_listeners_leave/1,
         gc_of_a_process_an_operator_traces/1, gc_of_new_processes_an_operator_traces/1,
         span_in_a_process_automatic_mode_traces_for_gc/1, gc_probe_attaching_while_a_span_traces_gc/1]).
%% In the peer.
-export([worker/1, operator_handler/2, count/1, collector/0, gc_operator/3]).

-define(SENDS, 10).
-define(CALLS, 10).
-define(CYCLES, 50).
%% Collections of one process in the GC cases: the first one of two
%% sessions tracing it for GC crashes an affected VM (OTP-20385).
-define(COLLECTIONS, 200).

all() ->
    [operators_trace_untouched_by_attach_cycles, operator_traces_all_while_automatic_mode_runs,
     tracers_by_hand_while_automatic_mode_runs, no_flag_left_after_the_listeners_leave,
     gc_of_a_process_an_operator_traces, gc_of_new_processes_an_operator_traces,
     span_in_a_process_automatic_mode_traces_for_gc, gc_probe_attaching_while_a_span_traces_gc].

init_per_testcase(_TC, Config) ->
    case dtrace_test_tracer:require_tracer(bpftrace) of
        ok ->
            Peer = dtrace_test_peer:start_peer(),
            {ok, _} = peer:call(Peer, application, ensure_all_started, [dtrace]),
            Sessions = peer:call(Peer, erlang, function_exported, [erts_internal, trace_session_create, 3]),
            Affected = peer:call(Peer, dtrace_gc_guard, affected, []),
            %% OTP 27 and 28 are affected until a patch of theirs is fixed.
            ?assert(Affected orelse not lists:member(peer:call(Peer, erlang, system_info, [otp_release]), ["27", "28"])),
            [{peer, Peer}, {sessions, Sessions}, {gc_overlap, Affected} | Config];
        Skip ->
            Skip
    end.

end_per_testcase(_TC, Config) ->
    dtrace_test_peer:stop_peer(?config(peer, Config)).

in_peer(Config, Fun) ->
    peer:call(?config(peer, Config), erlang, apply, [Fun, []], 300000).

%%--------------------------------------------------------------------

%% An operator's dbg trace of a worker (send and call flags, a match spec
%% on the function it calls), set before any probe tracer attaches. Then
%% 50 times: bpftrace attaches to message__send and
%% global__function__entry (automatic mode sets the send and call flags
%% and a pattern on the same function), the worker runs a fixed workload,
%% bpftrace leaves. With sessions, the operator's sink gets exactly the
%% events it gets with no probe tracer, with its own match spec's result,
%% and the worker's legacy tracer and flags are those dbg set, before,
%% during and after. Without sessions (OTP 25, 26), the documented limit:
%% the worker is left to dbg (counted as skipped), its tracer and flags
%% untouched and its messages counted exactly; a call pattern set on the
%% same function as the operator's replaces it while a listener is there,
%% so calls are not counted.
operators_trace_untouched_by_attach_cycles(Config) ->
    Peer = ?config(peer, Config),
    Sessions = ?config(sessions, Config),
    MFA = {dtrace_test_workload, double, 1},
    {Worker, Before} =
        in_peer(Config,
                fun() ->
                        {module, _} = code:ensure_loaded(dtrace_test_workload),
                        ok = dtrace:function_probes([MFA]),
                        ets:new(operator, [named_table, public]),
                        ets:insert(operator, [{send, 0}, {call, 0}, {other_ms, 0}]),
                        %% The table outlives this call: its owner stays.
                        ets:give_away(operator, spawn(fun() -> receive stop -> ok end end), none),
                        W = spawn(?MODULE, worker, [spawn(fun dtrace_test_workload:sink/0)]),
                        {ok, _} = dbg:tracer(process, {fun ?MODULE:operator_handler/2, W}),
                        {ok, _} = dbg:p(W, [s, c]),
                        {ok, _} = dbg:tp(dtrace_test_workload, double, 1, [{'_', [], [{message, operator}]}]),
                        _ = dtrace_test_workload:ping_load(2),
                        {W, legacy_view(W)}
                end),
    Program = "usdt:$SO:erlang:message__send { if (!@seen) { @seen = 1; printf(\"SEEN\\n\"); } }
               usdt:$SO:erlang:global__function__entry { @calls = count(); }",
    Cycles =
        [begin
             {{Wanted, During, Status}, _} =
                 dtrace_test_tracer:bpftrace_window(
                   Peer, Program, fun() -> self() ! x, receive x -> ok end end, [<<"SEEN">>],
                   fun() ->
                           W1 = dtrace_test_workload:wait_flags([arity, call, send], 5000),
                           ok = work(Worker),
                           {W1, legacy_view(Worker), dtrace:vm_probes()}
                   end),
             Off = peer:call(Peer, dtrace_test_workload, wait_flags, [[], 5000]),
             {Wanted, Off, During, Status}
         end || _ <- lists:seq(1, ?CYCLES)],
    ok = peer:call(Peer, ?MODULE, count, [Worker]),
    {Counts, After} = in_peer(Config, fun() -> {maps:from_list(ets:tab2list(operator)), legacy_view(Worker)} end),
    ct:log("operator's events: ~p; worker's legacy trace ~p", [Counts, Before]),
    ?assertEqual([], [C || {W, O, _, _} = C <- Cycles, {W, O} =/= {ok, ok}]),
    ?assertEqual([], [D || {_, _, D, _} <- Cycles, D =/= Before]),
    ?assertEqual(Before, After),
    Works = ?CYCLES + 1,
    %% Each work: ?SENDS messages to the sink and the reply.
    ?assertEqual(Works * (?SENDS + 1), maps:get(send, Counts)),
    case Sessions of
        true ->
            ?assertEqual(Works * ?CALLS, maps:get(call, Counts)),
            ?assertEqual(0, maps:get(other_ms, Counts)),
            ?assertEqual([0], lists:usort([maps:get(skipped, S) || {_, _, _, S} <- Cycles]));
        false ->
            ?assert(lists:all(fun({_, _, _, S}) -> maps:get(skipped, S) >= 1 end, Cycles)),
            ?assertEqual({tracer, dbg_tracer(Peer)}, element(1, Before))
    end.

%% What the legacy session says of a process: {Tracer, Flags}. With
%% sessions dbg has a session of its own, so this is {[], []} there.
legacy_view(P) ->
    {tracer, T} = erlang:trace_info(P, tracer),
    {flags, F} = erlang:trace_info(P, flags),
    {{tracer, T}, lists:sort(F)}.

dbg_tracer(Peer) ->
    peer:call(Peer, erlang, apply, [fun() -> {ok, T} = dbg:get_tracer(), T end, []]).

%% The worker: for each {work, From}, ?SENDS messages to the sink, ?CALLS
%% calls of the traced function, then `done' to From.
worker(Sink) ->
    receive
        {work, From} ->
            _ = [Sink ! {m, I} || I <- lists:seq(1, ?SENDS)],
            _ = [dtrace_test_workload:double(I) || I <- lists:seq(1, ?CALLS)],
            From ! done,
            worker(Sink)
    end.

work(Worker) ->
    Worker ! {work, self()},
    receive done -> ok after 60000 -> error(worker_timeout) end.

%% One more work with no probe tracer, then waits until the operator's
%% tracer has handled every event (dbg:flush_trace_port/0 is for ports;
%% a trace of our own message is the marker).
count(Worker) ->
    ok = work(Worker),
    _ = erlang:trace_delivered(Worker),
    receive {trace_delivered, Worker, _} -> ok after 60000 -> error(not_delivered) end,
    %% dbg's tracer process has the events now; a call to dbg goes
    %% through its server, after them.
    _ = dbg:get_tracer(),
    wait_handled(erlang:monotonic_time(millisecond) + 10000).

wait_handled(Deadline) ->
    {ok, T} = dbg:get_tracer(),
    case erlang:process_info(T, message_queue_len) of
        {message_queue_len, 0} -> ok;
        _ ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true -> error(operator_tracer_busy);
                false -> timer:sleep(5), wait_handled(Deadline)
            end
    end.

%% dbg's handler: counts the worker's sends, and its calls with the
%% operator's match spec result.
operator_handler({trace, W, send, _Msg, _To}, W) ->
    _ = ets:update_counter(operator, send, 1), W;
operator_handler({trace, W, call, {dtrace_test_workload, double, [_]}, operator}, W) ->
    _ = ets:update_counter(operator, call, 1), W;
operator_handler({trace, W, call, _, _}, W) ->
    _ = ets:update_counter(operator, other_ms, 1), W;
operator_handler(_, W) ->
    W.

%% An operator starts tracing every process (erlang:trace(all, ...)) while
%% automatic mode traces them too. With sessions both see their events:
%% the exits of the same processes reach the operator and the probes.
%% Without sessions, the documented limit: the operator's call takes the
%% processes spawned after it (the default tracer of new processes is
%% theirs), which automatic mode then leaves alone, so their exits reach
%% the operator and not the probes.
operator_traces_all_while_automatic_mode_runs(Config) ->
    Program = "usdt:$SO:erlang:process__exit { printf(\"EXIT %s\\n\", str(arg0)); }",
    Sessions = ?config(sessions, Config),
    {{Pids, Operator}, Lines} =
        dtrace_test_tracer:bpftrace_window(
          bpftrace, ?config(peer, Config), Program, fun() -> spawn(fun() -> ok end) end,
          [{contains, <<"EXIT">>}],
          fun() ->
                  ok = dtrace_test_workload:wait_flags([procs], 5000),
                  Self = self(),
                  Sink = spawn(fun() -> operator_sink(Self, []) end),
                  _ = erlang:trace(all, true, [procs, {tracer, Sink}]),
                  Ps = [spawn(fun() -> receive go -> ok end end) || _ <- lists:seq(1, 20)],
                  Refs = [monitor(process, P) || P <- Ps],
                  [P ! go || P <- Ps],
                  [receive {'DOWN', R, _, _, _} -> ok end || R <- Refs],
                  _ = erlang:trace(all, false, [procs, {tracer, Sink}]),
                  Sink ! {done, self()},
                  Seen = receive {exits, E} -> E end,
                  {[pid_to_list(P) || P <- Ps], [pid_to_list(P) || P <- Seen]}
          end,
          %% With sessions, stop once bpftrace printed every exit of the
          %% workload; without, at once (none is expected).
          fun({Ps, _}, Ls) ->
                  Printed = [binary_to_list(P) || <<"EXIT ", P/binary>> <- Ls],
                  not Sessions orelse lists:all(fun(P) -> lists:member(P, Printed) end, Ps)
          end),
    Probed = [binary_to_list(P) || <<"EXIT ", P/binary>> <- Lines],
    ?assertEqual(Pids, [P || P <- Pids, lists:member(P, Operator)]),
    case Sessions of
        true -> ?assertEqual(Pids, [P || P <- Pids, lists:member(P, Probed)]);
        false -> ?assertEqual([], [P || P <- Pids, lists:member(P, Probed)])
    end.

operator_sink(Parent, Exits) ->
    receive
        {trace, P, exit, _} -> operator_sink(Parent, [P | Exits]);
        {done, From} ->
            _ = erlang:trace_delivered(all),
            receive {trace_delivered, all, _} -> ok end,
            From ! {exits, flush_exits(Exits)};
        _ -> operator_sink(Parent, Exits)
    end.

flush_exits(Exits) ->
    receive
        {trace, P, exit, _} -> flush_exits([P | Exits])
    after 0 -> lists:reverse(Exits)
    end.

%% While automatic mode traces new processes (a listener on process__exit
%% sets procs), a tracer set by hand on one of them: {tracer, dtrace_tracer, []}
%% is accepted everywhere (without sessions it is the same tracer as
%% automatic mode's, and the flags add up); {tracer, dyntrace, []} is
%% accepted with sessions and, without them, refused like any other
%% tracer of another kind (one tracer per process: documented).
tracers_by_hand_while_automatic_mode_runs(Config) ->
    Sessions = ?config(sessions, Config),
    Program = "usdt:$SO:erlang:process__exit { if (!@seen) { @seen = 1; printf(\"SEEN\\n\"); } }",
    {Result, _} =
        dtrace_test_tracer:bpftrace_window(
          ?config(peer, Config), Program, fun() -> spawn(fun() -> ok end) end, [<<"SEEN">>],
          fun() ->
                  ok = dtrace_test_workload:wait_flags([procs], 5000),
                  Fresh = fun() -> spawn(fun() -> receive stop -> ok end end) end,
                  P = Fresh(),
                  Q = Fresh(),
                  ByDtrace = erlang:trace(P, true, [{tracer, dtrace_tracer, []}, 'receive']),
                  ByDyntrace = try erlang:trace(Q, true, [{tracer, dyntrace, []}, 'receive'])
                               catch error:badarg -> badarg
                               end,
                  {ByDtrace, ByDyntrace, lists:sort(element(2, erlang:trace_info(P, flags)))}
          end),
    case Sessions of
        true -> ?assertEqual({1, 1, ['receive']}, Result);
        false -> ?assertEqual({1, badarg, [procs, 'receive']}, Result)
    end.

%% Listeners on probes of several flags (send, running, procs, gc) and of
%% the ports; when bpftrace has left (its semaphores dropped), no process
%% or port carries a flag of dtrace's within 300 ms (three polls), and a
%% process spawned then has none.
no_flag_left_after_the_listeners_leave(Config) ->
    Peer = ?config(peer, Config),
    Program = "usdt:$SO:erlang:message__send { if (!@seen) { @seen = 1; printf(\"SEEN\\n\"); } }
               usdt:$SO:erlang:process__scheduled { @s = count(); }
               usdt:$SO:erlang:process__exit { @e = count(); }
               usdt:$SO:erlang:gc_minor__start { @g = count(); }
               usdt:$SO:erlang:port__open { @p = count(); }",
    Tracer = dtrace_test_tracer:bpftrace_start(dtrace_test_peer:os_pid(Peer), Program),
    ok = peer:call(Peer, dtrace_test_workload, wait_flags,
                   [[exiting, garbage_collection, procs, running, send], 30000]),
    _ = dtrace_test_tracer:bpftrace_stop(Tracer),
    Left = in_peer(Config,
                   fun() ->
                           Cond = fun() -> dtrace_test_workload:our_traced() =:= [] andalso ports_clear() end,
                           R = dtrace_test_workload:wait_until(Cond, 300),
                           New = spawn(fun() -> receive stop -> ok end end),
                           {R, New, erlang:trace_info(New, flags), dtrace_test_workload:our_traced()}
                   end),
    ?assertMatch({ok, _, {flags, []}, []}, Left).

%% No port carries a flag of dtrace's.
ports_clear() ->
    dtrace_test_workload:our_traced(erlang:ports()) =:= [].

%%--------------------------------------------------------------------
%% Two trace sessions tracing garbage_collection on one process crash
%% OTP 27.0 to 29.1.1 at its first collection (OTP-20385): on such a VM
%% the library never makes the second one (dtrace_gc_guard).

%% An operator's session (a process as its tracer) traces a worker for
%% garbage_collection; bpftrace listens to gc_minor__start. The node
%% survives the worker's collections, the operator gets all of them, and
%% the probe still fires for another process. On an affected VM automatic
%% mode holds the worker back (the status counts it) and the probe is
%% silent for it; elsewhere nothing is held back: with sessions the probe
%% fires for the worker too, without (OTP 25, 26; the operator is then
%% the legacy session's one tracer) the worker is skipped.
gc_of_a_process_an_operator_traces(Config) ->
    Peer = ?config(peer, Config),
    {Sessions, Affected} = {?config(sessions, Config), ?config(gc_overlap, Config)},
    Worker = in_peer(Config, fun() -> W = spawn(?MODULE, collector, []), ok = start_gc_operator(W, process), W end),
    {{Other, Status, Doctor, Alive, Count}, Lines} =
        dtrace_test_tracer:bpftrace_marked(
          Peer, "usdt:$SO:erlang:gc_minor__start { printf(\"GC %s\\n\", str(arg0)); }",
          fun minor_gc/0, [{contains, <<"GC <">>}],
          fun() ->
                  ok = dtrace_test_workload:wait_flags([garbage_collection], 5000),
                  ok = collect(Worker),
                  O = spawn(?MODULE, collector, []),
                  ok = collect(O),
                  {pid_to_list(O), dtrace:vm_probes(), [F || #{check := gc_overlap} = F <- dtrace_doctor:findings()],
                   is_process_alive(Worker), operator_count(Worker)}
          end),
    Collected = gc_lines(<<"GC ">>, Lines),
    ct:log("status ~p~noperator's count ~p", [Status, Count]),
    ?assert(Alive),
    ?assert(Count >= ?COLLECTIONS),
    ?assert(occurrences(Other, Collected) >= ?COLLECTIONS div 2),
    #{gc_held_back := Held} = Status,
    case Affected of
        true ->
            ?assertEqual(#{processes => 1, new_processes => false}, Held),
            ?assertEqual(0, occurrences(pid_to_list(Worker), Collected)),
            ?assertMatch([#{level := warn, fix := <<"stop the other session's garbage_collection tracing, "
                                                      "or run OTP 29.1.2+">>}], Doctor);
        false ->
            ?assertEqual(#{processes => 0, new_processes => false}, Held),
            ?assertEqual([], Doctor),
            ?assertEqual(Sessions, occurrences(pid_to_list(Worker), Collected) > 0)
    end.

%% An operator's session traces new processes for garbage_collection: on
%% an affected VM automatic mode then does not (the status says so), and
%% a process spawned then survives its collections, which reach the
%% operator and not the probe; processes that existed before are still
%% traced for the probe. Elsewhere nothing is held back.
gc_of_new_processes_an_operator_traces(Config) ->
    Peer = ?config(peer, Config),
    Affected = ?config(gc_overlap, Config),
    Old = in_peer(Config, fun() -> O = spawn(?MODULE, collector, []), ok = start_gc_operator(none, new), O end),
    {{New, Status, Alive, Count}, Lines} =
        dtrace_test_tracer:bpftrace_marked(
          Peer, "usdt:$SO:erlang:gc_minor__start { printf(\"GC %s\\n\", str(arg0)); }",
          fun minor_gc/0, [{contains, <<"GC <">>}],
          fun() ->
                  ok = dtrace_test_workload:wait_flags([garbage_collection], 5000),
                  N = spawn(?MODULE, collector, []),
                  operator_gc ! {count_of, N},
                  ok = collect(N),
                  ok = collect(Old),
                  {N, dtrace:vm_probes(), is_process_alive(N), operator_count(N)}
          end),
    Collected = gc_lines(<<"GC ">>, Lines),
    ct:log("status ~p~noperator's count ~p", [Status, Count]),
    ?assert(Alive),
    ?assert(Count >= ?COLLECTIONS),
    ?assert(occurrences(pid_to_list(Old), Collected) >= ?COLLECTIONS div 2),
    #{gc_held_back := #{new_processes := HeldNew}} = Status,
    ?assertEqual(Affected, HeldNew),
    _ = Affected andalso ?assertEqual(0, occurrences(pid_to_list(New), Collected)).

%% bpftrace listens to gc_minor__start (automatic mode traces every
%% process for GC) and span__vm_gc; a process automatic mode traces runs a
%% span. On an affected VM the span does not trace its process for GC
%% too, and the node survives its collections: gc_minor__start fires for
%% them, span__vm_gc does not (the documented loss). Elsewhere the span
%% traces them and span__vm_gc fires.
span_in_a_process_automatic_mode_traces_for_gc(Config) ->
    {Sessions, Affected} = {?config(sessions, Config), ?config(gc_overlap, Config)},
    %% span__begin too: a span is traced only while it or span__end listens.
    Program = "usdt:$SO:erlang:gc_minor__start { printf(\"GC %s\\n\", str(arg0)); }
               usdt:$SO:erlang:span__begin { @spans = count(); }
               usdt:$SO:erlang:span__vm_gc { printf(\"SPAN GC %s\\n\", str(arg0)); }",
    {{P, Flags, Status}, Lines} =
        dtrace_test_tracer:bpftrace_marked(
          ?config(peer, Config), Program, fun minor_gc/0, [{contains, <<"GC <">>}],
          fun() ->
                  ok = dtrace_test_workload:wait_flags([garbage_collection], 5000),
                  Self = self(),
                  {Pid, Ref} = spawn_monitor(
                                 fun() ->
                                         F = dtrace:span(gc, fun() -> collections(), dtrace_test_workload:span_flags() end),
                                         Self ! {flags, self(), F}
                                 end),
                  F = receive {flags, Pid, Fl} -> Fl after 60000 -> error(no_span) end,
                  receive {'DOWN', Ref, process, Pid, _} -> ok end,
                  {pid_to_list(Pid), F, dtrace:vm_probes()}
          end),
    ct:log("span's flags ~p; status ~p", [Flags, Status]),
    ?assertMatch(#{gc_held_back := #{processes := 0, new_processes := false}}, Status),
    ?assert(occurrences(P, gc_lines(<<"GC ">>, Lines)) >= ?COLLECTIONS div 2),
    SpanGc = occurrences(P, gc_lines(<<"SPAN GC ">>, Lines)),
    case Affected of
        true ->
            ?assertNot(lists:member(garbage_collection, Flags)),
            ?assertEqual(0, SpanGc);
        false ->
            ?assertEqual(Sessions, lists:member(garbage_collection, Flags)),
            ?assert(SpanGc >= ?COLLECTIONS div 2)
    end.

%% The other order: a span traces its process for GC (span__vm_gc
%% listens), then a second bpftrace attaches to gc_minor__start. On an
%% affected VM automatic mode holds the span's process back while the span
%% lasts (the node survives its collections, which span__vm_gc reports),
%% and traces it once the span ended (gc_minor__start fires for it then;
%% bpftrace_await/2 fails the case if half of them are not printed).
%% Elsewhere nothing is held back (without sessions the span's process,
%% which had another tracer when the flags were set, is not traced after).
gc_probe_attaching_while_a_span_traces_gc(Config) ->
    Peer = ?config(peer, Config),
    {Sessions, Affected} = {?config(sessions, Config), ?config(gc_overlap, Config)},
    SpanProgram = "usdt:$SO:erlang:span__begin { printf(\"BEGIN %s\\n\", str(arg4)); }
                   usdt:$SO:erlang:span__vm_gc { printf(\"SPAN GC %s\\n\", str(arg0)); }",
    T0 = dtrace_test_tracer:bpftrace_start(dtrace_test_peer:os_pid(Peer), SpanProgram),
    ok = peer:call(Peer, dtrace_test_workload, start_ready_loop, [fun() -> dtrace:span(ready, fun() -> ok end) end]),
    T1 = dtrace_test_tracer:bpftrace_await(T0, [<<"BEGIN ready">>]),
    P = peer:call(Peer, dtrace_test_workload, stop_ready_loop_and_run,
                  [fun() ->
                           Self = self(),
                           Pid = spawn(fun() -> dtrace:span(held, fun() -> Self ! {in_span, self()}, collector() end),
                                                collector()
                                       end),
                           receive {in_span, Pid} -> Pid end
                   end]),
    G0 = dtrace_test_tracer:bpftrace_start(dtrace_test_peer:os_pid(Peer),
                                           "usdt:$SO:erlang:gc_minor__start { printf(\"GC %s\\n\", str(arg0)); }"),
    {During, AutoGc} = in_peer(Config, fun() ->
                                               ok = dtrace_test_workload:wait_flags([garbage_collection], 30000),
                                               ok = collect(P),
                                               {dtrace:vm_probes(), auto_gc(P)}
                                       end),
    %% The span ends; with sessions automatic mode then traces P for GC
    %% (at the next poll).
    After = in_peer(Config, fun() ->
                                    P ! stop,
                                    Cond = fun() -> ok = dtrace_vm:sync(), auto_gc(P) end,
                                    W = case Sessions of
                                            true -> dtrace_test_workload:wait_until(Cond, 5000);
                                            false -> not_traced
                                        end,
                                    ok = collect(P),
                                    {W, dtrace:vm_probes()}
                            end),
    ct:log("during the span ~p (automatic mode traces its GC: ~p); after ~p", [During, AutoGc, After]),
    Pl = list_to_binary(pid_to_list(P)),
    Half = fun(Prefix) -> lists:duplicate(?COLLECTIONS div 2, <<Prefix/binary, Pl/binary>>) end,
    _ = dtrace_test_tracer:bpftrace_stop(dtrace_test_tracer:bpftrace_await(T1, Half(<<"SPAN GC ">>))),
    _ = dtrace_test_tracer:bpftrace_stop(case Sessions of
                                             true -> dtrace_test_tracer:bpftrace_await(G0, Half(<<"GC ">>));
                                             false -> G0
                                         end),
    ?assertMatch({_, #{gc_held_back := #{processes := 0}}}, After),
    #{gc_held_back := #{processes := HeldDuring}} = During,
    case {Sessions, Affected} of
        {true, true} ->
            ?assertEqual(1, HeldDuring),
            ?assertNot(AutoGc),
            ?assertMatch({ok, _}, After);
        {true, false} ->
            ?assertEqual(0, HeldDuring),
            ?assertMatch({ok, _}, After);
        {false, _} ->
            ?assertEqual(0, HeldDuring)
    end.

%% In the peer: starts the operator's tracer, registered as operator_gc,
%% which traces garbage_collection on W (process) or on new processes
%% (new), in a session of its own (OTP 27+) or as the legacy session's
%% tracer, and counts the gc_minor_start events of one process (W, or the
%% one named by {count_of, Pid}).
start_gc_operator(W, What) ->
    Self = self(),
    _ = spawn(?MODULE, gc_operator, [Self, W, What]),
    receive {operator_gc, ready} -> ok after 10000 -> error(no_operator) end.

gc_operator(Parent, W, What) ->
    true = register(operator_gc, self()),
    Target = case What of process -> W; new -> new end,
    %% The session's handle stays in the loop's arguments: the session
    %% lives while it does.
    Session = case erlang:function_exported(erts_internal, trace_session_create, 3) of
                   true ->
                       S = trace:session_create(operator, self(), []),
                       _ = trace:process(S, Target, true, [garbage_collection]),
                       S;
                   false ->
                       _ = erlang:trace(case Target of new -> new_processes; _ -> Target end, true,
                                        [garbage_collection, {tracer, self()}]),
                       legacy
               end,
    Parent ! {operator_gc, ready},
    gc_operator_loop(Session, W, 0).

gc_operator_loop(Session, W, N) ->
    receive
        {trace, W, Start, _} when Start =:= gc_minor_start; Start =:= gc_major_start ->
            gc_operator_loop(Session, W, N + 1);
        {count_of, P} -> gc_operator_loop(Session, P, 0);
        {count, From} -> From ! {operator_gc, N}, gc_operator_loop(Session, W, N);
        _ -> gc_operator_loop(Session, W, N)
    end.

%% The operator's count of P's collections, once every trace message of
%% P's was delivered.
operator_count(P) ->
    Ref = erlang:trace_delivered(P),
    receive {trace_delivered, P, Ref} -> ok after 10000 -> error(not_delivered) end,
    operator_gc ! {count, self()},
    receive {operator_gc, N} -> N after 10000 -> error(no_operator_count) end.

%% A process that makes ?COLLECTIONS minor collections when asked.
collector() ->
    receive
        {collect, From} -> collections(), From ! {collected, self()}, collector();
        stop -> ok
    end.

collections() ->
    _ = [minor_gc() || _ <- lists:seq(1, ?COLLECTIONS)],
    ok.

minor_gc() ->
    _ = lists:seq(1, 100),
    erlang:garbage_collect(self(), [{type, minor}]).

collect(P) ->
    P ! {collect, self()},
    receive {collected, P} -> ok after 60000 -> error({collect_timeout, P}) end.

%% Does automatic mode trace P for GC (in its session, or with its
%% legacy tracer)?
auto_gc(P) ->
    Flags = case erlang:function_exported(erts_internal, trace_session_create, 3) of
                true ->
                    case [W || {dtrace_auto, _} = W <- trace:session_info(all)] of
                        [W] -> trace:info(W, P, flags);
                        _ -> undefined
                    end;
                false ->
                    case erlang:trace_info(P, tracer) of
                        {tracer, {dtrace_tracer, []}} -> erlang:trace_info(P, flags);
                        _ -> undefined
                    end
            end,
    case Flags of
        {flags, F} -> lists:member(garbage_collection, F);
        _ -> false
    end.

%% The pids of the lines that start with Prefix, as strings.
gc_lines(Prefix, Lines) ->
    [binary_to_list(hd(binary:split(Rest, <<" ">>))) || L <- Lines, <<P:(byte_size(Prefix))/binary, Rest/binary>> <- [L],
                                                        P =:= Prefix].

occurrences(P, Pids) ->
    length([X || X <- Pids, X =:= P]).
