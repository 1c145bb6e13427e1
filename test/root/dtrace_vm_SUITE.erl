%%% The VM's own probes, fed from erl_tracer events, on a real node with a
%%% real tracer (bpftrace), in automatic mode: the dtrace application runs
%%% in the traced peer and sets trace flags only while bpftrace listens.
%%%
%%% Events are printed with their time (nsecs) and sorted by it: a process
%%% may move between schedulers, and bpftrace reads one buffer per CPU.
%%%
%%% The scripts shipped for these probes (priv/bpftrace/*.bt, OTP's D scripts) are
%%% dtrace_vm_scripts_SUITE's.
-module(dtrace_vm_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").
-include_lib("proper/include/proper.hrl").

-export([all/0, init_per_testcase/2, end_per_testcase/2]).
-export([no_tracer_no_flags/1, process_events_in_otps_order/1,
         sends_and_queues_with_flat_sizes/1, flat_sizes_are_erts_debugs/1, remote_send_names_the_node/1,
         links_and_unlinks/1,
         major_gcs_pair_up/1, function_probes_follow_the_tracer/1, function_spans_follow_the_tracer/1,
         process_names/1,
         gen_server_hibernates/1, attach_detach_cycles_leave_operators_alone/1,
         manual_mode_and_user_tracer/1, spawn_alone_sets_no_flag/1,
         stopping_leaves_nothing/1]).

all() ->
    [no_tracer_no_flags, process_events_in_otps_order, sends_and_queues_with_flat_sizes,
     flat_sizes_are_erts_debugs, remote_send_names_the_node, links_and_unlinks, major_gcs_pair_up, function_probes_follow_the_tracer,
     function_spans_follow_the_tracer, process_names,
     gen_server_hibernates, attach_detach_cycles_leave_operators_alone, manual_mode_and_user_tracer,
     spawn_alone_sets_no_flag, stopping_leaves_nothing].

init_per_testcase(remote_send_names_the_node, Config) ->
    dtrace_test_tracer:with_tracer(bpftrace, Config);
init_per_testcase(_TC, Config) ->
    dtrace_test_peer:with_dtrace_peer(Config).

end_per_testcase(_TC, Config) ->
    dtrace_test_peer:stop_config_peer(Config).

in_peer(Config, Fun) ->
    peer:call(?config(peer, Config), erlang, apply, [Fun, []], 120000).

%% [{Nsecs, Fields}] of the "EV <nsecs> ..." lines, sorted by time.
events(Lines) ->
    lists:sort([{binary_to_integer(T), Rest}
                || <<"EV ", L/binary>> <- Lines, [T | Rest] <- [binary:split(L, <<" ">>, [global])]]).

%%--------------------------------------------------------------------

%% With the application running and no tracer, no process or port has a
%% trace flag of dtrace's, and the status says so.
no_tracer_no_flags(Config) ->
    {Ours, Status, Flags} =
        in_peer(Config, fun() ->
                                %% A poll of the semaphores has run.
                                ok = dtrace_vm:sync(),
                                {dtrace_test_workload:our_traced(), dtrace:vm_probes(),
                                 erlang:trace_info(self(), flags)}
                        end),
    ?assertEqual([], Ours),
    ?assertEqual({flags, []}, Flags),
    ?assertMatch(#{mode := auto, poll_ms := 100, listening := [],
                   flags := #{processes := [], ports := []}, traced := 0, skipped := 0}, Status).

%% OTP's own VM-probe test (dyntrace_SUITE:process/1), ported to bpftrace:
%% a spawned process hibernates once and exits; its events come in
%% exactly this order.
process_events_in_otps_order(Config) ->
    Program = "
        usdt:$SO:erlang:process__spawn { printf(\"EV %lu spawn %s %s\\n\", nsecs, str(arg0), str(arg1)); }
        usdt:$SO:erlang:process__scheduled { printf(\"EV %lu scheduled %s %s\\n\", nsecs, str(arg0), str(arg1)); }
        usdt:$SO:erlang:process__unscheduled { printf(\"EV %lu unscheduled %s\\n\", nsecs, str(arg0)); }
        usdt:$SO:erlang:process__hibernate { printf(\"EV %lu hibernate %s %s\\n\", nsecs, str(arg0), str(arg1)); }
        usdt:$SO:erlang:process__exit { printf(\"EV %lu exit %s %s\\n\", nsecs, str(arg0), str(arg1)); }",
    %% No signal but its message may reach the hibernating process: a
    %% monitor set later, or process_info/2, wakes it to handle the signal
    %% (an extra in/out pair). So it is monitored from its spawn and says
    %% when it is about to hibernate. Its message may come before it
    %% hibernates: erlang:hibernate/3 schedules it out all the same (erts
    %% sets F_HIBERNATE_SCHED, "needed also when woken"), so the events are
    %% the same.
    Hibernating = fun() ->
                          Self = self(),
                          {P, Ref} = spawn_monitor(fun() ->
                                                           Self ! {hibernating, self()},
                                                           erlang:hibernate(dtrace_test_workload, terminate_self, [])
                                                   end),
                          receive {hibernating, P} -> ok end,
                          {P, Ref}
                  end,
    {Pid, Lines} =
        dtrace_test_tracer:bpftrace_window(
          bpftrace, ?config(peer, Config), Program,
          fun() -> {P, Ref} = Hibernating(), P ! wake, receive {'DOWN', Ref, _, _, _} -> ok end end,
          [{contains, <<" spawn ">>}, {contains, <<" scheduled ">>}, {contains, <<" hibernate ">>},
           {contains, <<" unscheduled ">>}, {contains, <<" exit ">>}],
          fun() ->
                  {P, Ref} = Hibernating(),
                  P ! wake,
                  receive {'DOWN', Ref, _, _, _} -> ok end,
                  pid_to_list(P)
          end,
          %% Its last event (unscheduled, as it exits) may come after the
          %% 'DOWN' message: the window stays open until the seven came.
          fun(P, Ls) -> length(events_of(P, Ls)) >= 7 end),
    Bin = list_to_binary(Pid),
    Mine = events_of(Pid, Lines),
    ct:log("events of ~s: ~p", [Pid, Mine]),
    Reason = iolist_to_binary(["{terminated,", Pid, "}"]),
    ?assertMatch([[<<"spawn">>, Bin, <<"erlang:apply/2">>],
                  [<<"scheduled">>, Bin | _],
                  [<<"hibernate">>, Bin, <<"erlang:hibernate/3">>],
                  [<<"unscheduled">>, Bin],
                  [<<"scheduled">>, Bin | _],
                  [<<"exit">>, Bin, Reason],
                  [<<"unscheduled">>, Bin]], Mine).

%% A gen_server that returns `hibernate': process__hibernate for its pid,
%% through erlang:hibernate/3 before OTP 28, and with gen_server's loop
%% from OTP 28, whose gen_server hibernates through erlang:hibernate/0
%% (docs/vm-probes.md).
gen_server_hibernates(Config) ->
    Program = "usdt:$SO:erlang:process__hibernate { printf(\"EV %lu hibernate %s %s\\n\", nsecs, str(arg0), str(arg1)); }",
    Hibernate = fun() ->
                        {ok, G} = gen_server:start(dtrace_test_workload, [], []),
                        gen_server:cast(G, {hibernate, self()}),
                        receive {hibernating, G} -> ok end,
                        G
                end,
    {Pid, Lines} =
        dtrace_test_tracer:bpftrace_window(
          bpftrace, ?config(peer, Config), Program, fun() -> gen_server:stop(Hibernate()) end,
          [{contains, <<" hibernate ">>}],
          fun() -> G = Hibernate(), P = pid_to_list(G), gen_server:stop(G), P end,
          fun(P, Ls) -> events_of(P, Ls) =/= [] end),
    Mfa = case list_to_integer(peer:call(?config(peer, Config), erlang, system_info, [otp_release])) of
              Otp when Otp >= 28 -> <<"gen_server:loop_hibernate/4">>;
              _ -> <<"erlang:hibernate/3">>
          end,
    ?assertEqual([[<<"hibernate">>, list_to_binary(Pid), Mfa]], lists:usort(events_of(Pid, Lines))).

%% The fields of the events of the process whose pid_to_list/1 is Pid, in
%% time order.
events_of(Pid, Lines) ->
    Bin = list_to_binary(Pid),
    [Fields || {_, [_Kind, P | _] = Fields} <- events(Lines), P =:= Bin].

%% N sends between two known processes give N message__send events with
%% their pids and the messages' flat sizes in words (erts_debug:flat_size/1),
%% and N message__queued events at the receiver; a message whose size the
%% NIF API cannot tell (a fun) has size -1.
sends_and_queues_with_flat_sizes(Config) ->
    {SenderText, ReceiverText} =
        in_peer(Config, fun() ->
                                R = spawn(fun dtrace_test_workload:sink/0),
                                S = spawn(fun Loop() ->
                                                  receive
                                                      {send, Msgs} -> [R ! M || M <- Msgs], Loop();
                                                      {send, Msgs, From} -> [R ! M || M <- Msgs], From ! sent, Loop();
                                                      ping -> R ! ready, Loop()
                                                  end
                                          end),
                                register(vm_sender, S),
                                register(vm_receiver, R),
                                {pid_to_list(S), pid_to_list(R)}
                        end),
    Program = "
        usdt:$SO:erlang:message__send /str(arg0) == \"" ++ SenderText ++ "\"/ {
            printf(\"SEND %s %s %ld\\n\", str(arg0), str(arg1), arg2); }
        usdt:$SO:erlang:message__queued /str(arg0) == \"" ++ ReceiverText ++ "\"/ {
            printf(\"QUEUED %s %ld\\n\", str(arg0), arg1); }",
    Rounds = 20,
    {Expected, Lines} =
        dtrace_test_tracer:bpftrace_marked(
          ?config(peer, Config), Program,
          fun() -> vm_sender ! ping end,
          [{contains, <<"SEND ">>}, {contains, <<"QUEUED ">>}],
          fun() ->
                  Big = binary:copy(<<"x">>, 100),
                  Msgs = [{hello, 1, <<"abc">>}, [1, 2, 3], #{k => v, n => 1, l => [a]}, 1.5,
                          Big, {self(), make_ref()}, 1 bsl 62, "string", {}, <<>>,
                          {fun() -> ok end}],
                  Sizes = [case is_tuple(M) andalso tuple_size(M) =:= 1 of
                               true -> -1;
                               false -> erts_debug:flat_size(M)
                           end || M <- Msgs],
                  [vm_sender ! {send, Msgs} || _ <- lists:seq(1, Rounds)],
                  vm_sender ! {send, [done], self()},
                  receive sent -> ok end,
                  ok = wait_queue_empty(whereis(vm_receiver)),
                  Sizes
          end),
    Sends = [binary:split(L, <<" ">>, [global]) || <<"SEND ", L/binary>> <- Lines],
    Queued = [binary:split(L, <<" ">>, [global]) || <<"QUEUED ", L/binary>> <- Lines],
    S = list_to_binary(SenderText),
    R = list_to_binary(ReceiverText),
    %% The ready messages (`ready', 0 words) and `done' are left out.
    SendSizes = lists:sort([binary_to_integer(N) || [From, To, N] <- Sends, From =:= S, To =:= R, N =/= <<"0">>]),
    QueuedSizes = lists:sort([binary_to_integer(N) || [To, N] <- Queued, To =:= R, N =/= <<"0">>]),
    Want = lists:sort(lists:append(lists:duplicate(Rounds, [Sz || Sz <- Expected, Sz =/= 0]))),
    ct:log("expected sizes per round ~p", [Expected]),
    ?assertEqual(Want, SendSizes),
    ?assertEqual(Want, QueuedSizes),
    ?assert(lists:member(-1, Expected)).

%% message__send's size is erts_debug:flat_size/1 of the message, on this
%% VM's OTP, for 300 terms PropEr makes (immediates, bignums of one digit,
%% floats, heap and reference-counted binaries, lists, tuples, flatmaps,
%% pids, references, nested), and -1 where the NIF API cannot tell (funs,
%% bitstrings, hash maps, integers past 64 bits): in the same order as
%% sent. OTP 27 changed reference-counted binaries (8 words, 6 before),
%% funs and hash maps.
flat_sizes_are_erts_debugs(Config) ->
    Peer = ?config(peer, Config),
    Terms = [T || _ <- lists:seq(1, 300), {ok, T} <- [proper_gen:pick(sized_term(), 12)]]
        ++ [binary:copy(<<"x">>, 65), binary:copy(<<"y">>, 1 bsl 20), <<1:3>>, fun() -> ok end,
            fun lists:map/2, maps:from_list([{K, K} || K <- lists:seq(1, 40)]), 1 bsl 64],
    {SenderText, ReceiverText} =
                 in_peer(Config,
                         fun() ->
                                 R = spawn(fun dtrace_test_workload:sink/0),
                                 S = spawn(fun Loop() ->
                                                   receive
                                                       {send, Msgs, From} -> [R ! M || M <- Msgs], From ! sent, Loop();
                                                       ping -> R ! ready, Loop()
                                                   end
                                           end),
                                 register(vm_sizes_sender, S),
                                 {pid_to_list(S), pid_to_list(R)}
                         end),
    %% The messages from the sender to the receiver (not its `sent' reply).
    Program = "usdt:$SO:erlang:message__send /str(arg0) == \"" ++ SenderText ++ "\" &&
                                              str(arg1) == \"" ++ ReceiverText ++ "\"/ {
                   printf(\"SIZE %lu %ld\\n\", nsecs, arg2); }",
    {Expected, Lines} =
        dtrace_test_tracer:bpftrace_window(
          bpftrace, Peer, Program, fun() -> vm_sizes_sender ! ping end, [{contains, <<"SIZE">>}],
          fun() ->
                  Sizes = [case unknown_size(T) of true -> -1; false -> erts_debug:flat_size(T) end
                           || T <- Terms],
                  vm_sizes_sender ! {send, [go | Terms], self()},
                  receive sent -> ok end,
                  Sizes
          end,
          fun(_, Ls) -> length([L || <<"SIZE ", _/binary>> = L <- Ls]) >= length(Terms) + 1 end),
    %% In time order, the last ones (the ready loop's `ready' and the marker
    %% `go' come first).
    Sizes = [binary_to_integer(N) || {_, N} <- lists:sort([{binary_to_integer(T), N}
                                                           || <<"SIZE ", L/binary>> <- Lines,
                                                              [T, N] <- [binary:split(L, <<" ">>)]])],
    Got = lists:nthtail(length(Sizes) - length(Terms), Sizes),
    Diff = [{T, W, G} || {T, W, G} <- lists:zip3(Terms, Expected, Got), W =/= G],
    ct:log("~b terms; differences ~P", [length(Terms), Diff, 40]),
    ?assertEqual([], Diff),
    %% The 65-byte binary: OTP 27's layout, or the one before.
    Release = list_to_integer(peer:call(Peer, erlang, system_info, [otp_release])),
    ?assertEqual(if Release >= 27 -> 8; true -> 6 end, lists:nth(length(Terms) - 6, Expected)).

%% The terms whose size the NIF does not tell (it passes -1): funs,
%% bitstrings that are not whole bytes, maps of more than 32 keys, integers
%% past 64 bits, anywhere inside.
unknown_size(T) when is_function(T) -> true;
unknown_size(T) when is_bitstring(T), not is_binary(T) -> true;
unknown_size(T) when is_integer(T) -> T > (1 bsl 64) - 1 orelse T < -(1 bsl 63);
unknown_size(T) when is_map(T) -> map_size(T) > 32 orelse lists:any(fun unknown_size/1, maps:keys(T) ++ maps:values(T));
unknown_size(T) when is_list(T) -> unknown_list(T);
unknown_size(T) when is_tuple(T) -> lists:any(fun unknown_size/1, tuple_to_list(T));
unknown_size(_) -> false.

unknown_list([H | T]) -> unknown_size(H) orelse unknown_list(T);
unknown_list([]) -> false;
unknown_list(Tail) -> unknown_size(Tail).

sized_term() ->
    ?SIZED(S, term_of(S)).

term_of(S) when S =< 1 ->
    oneof([integer(), integer(-(1 bsl 63), (1 bsl 63) - 1), float(), oneof([a, ok, 'with space', []]),
           binary(), ?LET(N, range(60, 200), binary(N)), exactly(self()), exactly(make_ref()), {}]);
term_of(S) ->
    frequency([{3, term_of(0)},
               {1, ?LAZY(?LET(N, range(0, 5), vector(N, term_of(S div 3))))},
               {1, ?LAZY(?LET(N, range(1, 4), ?LET(L, vector(N, term_of(S div 3)), list_to_tuple(L))))},
               {1, ?LAZY(?LET(N, range(0, 5), ?LET(L, vector(N, {term_of(0), term_of(S div 3)}),
                                                   maps:from_list(L))))},
               {1, ?LAZY(?LET({H, T}, {term_of(S div 2), term_of(0)}, [H | T]))}]).

%% Links and unlinks between two processes fire dtrace_process__link for
%% each of the four trace tags, each end's, and dtrace_process__unlink
%% (added as one feed row and one function) for unlink and
%% getting_unlinked only.
links_and_unlinks(Config) ->
    Program = "
        usdt:$SO:erlang:dtrace_process__link { printf(\"EV %lu link %s %s %s\\n\", nsecs, str(arg0), str(arg1), str(arg2)); }
        usdt:$SO:erlang:dtrace_process__unlink { printf(\"EV %lu unlink %s %s %s\\n\", nsecs, str(arg0), str(arg1), str(arg2)); }",
    {{A, B}, Lines} =
        dtrace_test_tracer:bpftrace_window(
          bpftrace, ?config(peer, Config), Program,
          fun() -> P = spawn(fun() -> receive stop -> ok end end), link(P), unlink(P), P ! stop end,
          [{contains, <<" link ">>}, {contains, <<" unlink ">>}],
          fun() ->
                  Self = self(),
                  Pa = spawn(fun() ->
                                     Pb = spawn(fun() -> receive stop -> ok end end),
                                     link(Pb),
                                     unlink(Pb),
                                     Self ! {pids, self(), Pb},
                                     receive stop -> Pb ! stop end
                             end),
                  receive {pids, Pa, Pb} -> Pa ! stop, {pid_to_list(Pa), pid_to_list(Pb)} end
          end,
          fun({Pa, _}, Ls) -> length([L || L <- Ls, binary:match(L, list_to_binary(Pa)) =/= nomatch]) >= 6 end),
    {Ab, Bb} = {list_to_binary(A), list_to_binary(B)},
    Mine = [F || {_, [_ | _] = F} <- events(Lines), lists:member(Ab, F) orelse lists:member(Bb, F)],
    ct:log("~p", [Mine]),
    ?assertEqual(lists:sort([[<<"link">>, Ab, Bb, <<"link">>], [<<"link">>, Bb, Ab, <<"getting_linked">>],
                             [<<"link">>, Ab, Bb, <<"unlink">>], [<<"link">>, Bb, Ab, <<"getting_unlinked">>],
                             [<<"unlink">>, Ab, Bb, <<"unlink">>], [<<"unlink">>, Bb, Ab, <<"getting_unlinked">>]]),
                 lists:sort(Mine)).

%% Waits (at most 10 s) until P's message queue is empty.
wait_queue_empty(P) ->
    dtrace_test_workload:wait_until(
      fun() -> erlang:process_info(P, message_queue_len) =:= {message_queue_len, 0} end, 10000).

%% A send to a process on a second node fires message__send__remote with
%% that node's name, for a pid and for {Name, Node}.
remote_send_names_the_node(_Config) ->
    {PeerA, _NodeA} = dtrace_test_peer:start_named_peer("dtrace_vm_a", "dtrace_vm_test", []),
    {PeerB, NodeB} = dtrace_test_peer:start_named_peer("dtrace_vm_b", "dtrace_vm_test", []),
    try
        {ok, _} = peer:call(PeerA, application, ensure_all_started, [dtrace]),
        RemotePid = peer:call(PeerB, erlang, spawn, [dtrace_test_workload, sink, []]),
        true = peer:call(PeerB, erlang, register, [vm_remote_sink, RemotePid]),
        true = peer:call(PeerA, net_kernel, connect_node, [NodeB]),
        Program = "
            usdt:$SO:erlang:message__send__remote {
                printf(\"REMOTE %s %s %s %ld\\n\", str(arg0), str(arg1), str(arg2), arg3); }",
        Mine = fun(Sender, Lines) ->
                       [binary:split(L, <<" ">>, [global]) || <<"REMOTE ", L/binary>> = L0 <- Lines,
                                                             binary:match(L0, list_to_binary(Sender)) =/= nomatch]
               end,
        {Sender, Lines} =
            dtrace_test_tracer:bpftrace_window(
              bpftrace, PeerA, Program,
              fun() -> {vm_remote_sink, NodeB} ! ready end,
              [{contains, <<"REMOTE ">>}],
              fun() ->
                      [RemotePid ! {to_pid, I} || I <- lists:seq(1, 10)],
                      [{vm_remote_sink, NodeB} ! {to_name, I} || I <- lists:seq(1, 10)],
                      pid_to_list(self())
              end,
              fun(S, Ls) -> length(Mine(S, Ls)) >= 20 end),
        Node = atom_to_binary(NodeB),
        Sent = Mine(Sender, Lines),
        %% {to_pid, I}: a 2-tuple of immediates, 3 words.
        ?assertEqual(10, length([x || [_, N, <<"vm_remote_sink">>, <<"3">>] <- Sent, N =:= Node])),
        ?assertEqual(10, length([x || [_, N, <<"<", _/binary>>, <<"3">>] <- Sent, N =:= Node])),
        ?assertEqual(20, length(Sent))
    after
        dtrace_test_peer:stop_peer(PeerA),
        dtrace_test_peer:stop_peer(PeerB)
    end.

%% A process forced through N major collections gives N start/end pairs.
major_gcs_pair_up(Config) ->
    N = 25,
    Pid = in_peer(Config, fun() ->
                                  P = spawn(fun Loop() ->
                                                    receive
                                                        {gc, K, From} ->
                                                            _ = [erlang:garbage_collect() || _ <- lists:seq(1, K)],
                                                            From ! {done, self()},
                                                            Loop()
                                                    end
                                            end),
                                  register(vm_gc, P),
                                  pid_to_list(P)
                          end),
    %% The ready loop collects its own heap: only vm_gc's events are the
    %% workload's.
    Program = "
        usdt:$SO:erlang:gc_major__start {
            printf(\"EV %lu start %s %ld\\n\", nsecs, str(arg0), arg1); }
        usdt:$SO:erlang:gc_major__end {
            printf(\"EV %lu end %s %ld\\n\", nsecs, str(arg0), arg1); }",
    {ok, Lines} =
        dtrace_test_tracer:bpftrace_window(
          bpftrace, ?config(peer, Config), Program,
          fun() -> erlang:garbage_collect() end,
          [{contains, <<" start ">>}, {contains, <<" end ">>}],
          fun() ->
                  vm_gc ! {gc, N, self()},
                  receive {done, _} -> ok end,
                  ok
          end,
          fun(ok, Ls) -> length(events_of(Pid, Ls)) >= 2 * N end),
    Work = [K || [K | _] <- events_of(Pid, Lines)],
    ?assertEqual(lists:append(lists:duplicate(N, [<<"start">>, <<"end">>])), Work).

%% A pattern on one function gives exactly its calls, entry and return
%% paired; nothing while no tracer listens (no trace pattern is set), and
%% nothing after the pattern is cleared.
function_probes_follow_the_tracer(Config) ->
    MFA = {dtrace_test_workload, double, 1},
    ok = in_peer(Config, fun() -> {module, _} = code:ensure_loaded(dtrace_test_workload),
                                  dtrace:function_probes([MFA]) end),
    ?assertEqual({traced, false}, in_peer(Config, fun() -> ok = dtrace_vm:sync(), erlang:trace_info(MFA, traced) end)),
    ?assertEqual({error, {all_modules, {'_', '_', '_'}}},
                 in_peer(Config, fun() -> dtrace:function_probes([{'_', '_', '_'}]) end)),
    ?assertEqual({error, {bad_pattern, {a, b, -1}}},
                 in_peer(Config, fun() -> dtrace:function_probes([{a, b, -1}]) end)),
    Program = "
        usdt:$SO:erlang:global__function__entry { printf(\"EV %lu entry %s %s %ld\\n\", nsecs, str(arg0), str(arg1), arg2); }
        usdt:$SO:erlang:function__return { printf(\"EV %lu return %s %s %ld\\n\", nsecs, str(arg0), str(arg1), arg2); }",
    N = 40,
    {{Pid, Results, Cleared, ClearedPid}, Lines} =
        dtrace_test_tracer:bpftrace_marked(
          ?config(peer, Config), Program,
          fun() -> dtrace_test_workload:double(0) end,
          [{contains, <<" entry ">>}, {contains, <<" return ">>}],
          fun() ->
                  R = [dtrace_test_workload:double(I) || I <- lists:seq(1, N)],
                  Me = pid_to_list(self()),
                  ok = dtrace:function_probes([]),
                  ok = wait_traced(MFA, false),
                  {Other, Ref} = spawn_monitor(fun() -> [dtrace_test_workload:double(I) || I <- lists:seq(1, N)] end),
                  receive {'DOWN', Ref, process, Other, normal} -> ok end,
                  {Me, R, erlang:trace_info(MFA, traced), pid_to_list(Other)}
          end),
    ?assertEqual([2 * I || I <- lists:seq(1, N)], Results),
    ?assertEqual({traced, false}, Cleared),
    P = list_to_binary(Pid),
    Mine = [{K, M, D} || {_, [K, Pr, M, D]} <- events(Lines), Pr =:= P],
    ?assertEqual(lists:append(lists:duplicate(N, [{<<"entry">>, <<"dtrace_test_workload:double/1">>, <<"-1">>},
                                                  {<<"return">>, <<"dtrace_test_workload:double/1">>, <<"-1">>}])),
                 Mine),
    ?assertEqual([], [L || L <- Lines, binary:match(L, list_to_binary(ClearedPid)) =/= nomatch]),
    %% The tracer gone, the pattern is not set again.
    ?assertEqual({traced, false}, in_peer(Config, fun() -> ok = dtrace_vm:sync(), erlang:trace_info(MFA, traced) end)).

%% Function spans: the outermost call of a named function is one span
%% (recursion inside it is not another), of kind m:f/a with its duration
%% and outcome; a named function inside another is a nested span; nothing
%% fires for another process once the functions are cleared, and no
%% trace pattern is set while no span probe listens.
function_spans_follow_the_tracer(Config) ->
    Fspan = {dtrace_test_workload, fspan, 2},
    Fns = [Fspan, {dtrace_test_workload, fspan_outer, 0}, {dtrace_test_workload, fspan_raise, 1}],
    ok = in_peer(Config, fun() -> {module, _} = code:ensure_loaded(dtrace_test_workload),
                                  dtrace:function_spans(Fns) end),
    ?assertEqual({traced, false}, in_peer(Config, fun() -> ok = dtrace_vm:sync(), erlang:trace_info(Fspan, traced) end)),
    ?assertEqual({error, {bad_function, {a, '_', 1}}}, in_peer(Config, fun() -> dtrace:function_spans([{a, '_', 1}]) end)),
    ?assertEqual({error, {too_many, 65}},
                 in_peer(Config, fun() -> dtrace:function_spans([{a, b, I} || I <- lists:seq(0, 64)]) end)),
    ?assertEqual(Fns, in_peer(Config, fun() -> maps:get(function_spans, dtrace:vm_probes()) end)),
    Program = "
        usdt:$SO:erlang:span__begin { printf(\"EV %lu begin %s %ld %ld %s\\n\", nsecs, str(arg0), arg2, arg3, str(arg4)); }
        usdt:$SO:erlang:span__end { printf(\"EV %lu end %s %ld %ld %s %ld %s\\n\", nsecs, str(arg0), arg2, arg3, str(arg4), arg5, str(arg6)); }",
    {{Pid, Caught, Cleared, ClearedPid}, Lines} =
        dtrace_test_tracer:bpftrace_marked(
          dtrace_bpftrace, ?config(peer, Config), Program,
          fun() -> dtrace_test_workload:fspan(0, 0) end,
          [{contains, <<" begin ">>}, {contains, <<" end ">>}],
          fun() ->
                  ok = dtrace_test_workload:fspan(3, 20),
                  ok = dtrace_test_workload:fspan_outer(),
                  C = [try dtrace_test_workload:fspan_raise(Cl) catch Cl:R -> {Cl, R} end || Cl <- [error, exit, throw]],
                  Me = pid_to_list(self()),
                  ok = dtrace:function_spans([]),
                  ok = wait_traced(Fspan, false),
                  {Other, Ref} = spawn_monitor(fun() -> dtrace_test_workload:fspan(1, 0) end),
                  receive {'DOWN', Ref, process, Other, normal} -> ok end,
                  {Me, C, erlang:trace_info(Fspan, traced), pid_to_list(Other)}
          end),
    ?assertEqual([{error, planted}, {exit, planted}, {throw, planted}], Caught),
    ?assertEqual({traced, false}, Cleared),
    P = list_to_binary(Pid),
    Mine = [F || {_, [_, Pr | _] = F} <- events(Lines), Pr =:= P],
    K = fun(F, A) -> iolist_to_binary(io_lib:format("dtrace_test_workload:~s/~b", [F, A])) end,
    Shape = [case F of
                 [<<"begin">>, _, _, Parent, Kind] -> {'begin', Kind, Parent =:= <<"0">>};
                 [<<"end">>, _, _, Parent, Kind, _Ns, Outcome] -> {'end', Kind, Parent =:= <<"0">>, Outcome}
             end || F <- Mine],
    ?assertEqual([{'begin', K(fspan, 2), true}, {'end', K(fspan, 2), true, <<"ok">>},
                  {'begin', K(fspan_outer, 0), true},
                  {'begin', K(fspan, 2), false}, {'end', K(fspan, 2), false, <<"ok">>},
                  {'end', K(fspan_outer, 0), true, <<"ok">>},
                  {'begin', K(fspan_raise, 1), true}, {'end', K(fspan_raise, 1), true, <<"error">>},
                  {'begin', K(fspan_raise, 1), true}, {'end', K(fspan_raise, 1), true, <<"exit">>},
                  {'begin', K(fspan_raise, 1), true}, {'end', K(fspan_raise, 1), true, <<"throw">>}],
                 Shape),
    %% The slow one lasted its sleep; ids pair up, the nested one's parent
    %% is the outer span, and ids have bit 62 set.
    [[_, _, Id1, _, _], [_, _, Id1, _, _, Ns1, _], [_, _, Outer, _, _], [_, _, _, Outer, _] | _] = Mine,
    ?assert(binary_to_integer(Ns1) >= 20000000),
    ?assert(binary_to_integer(Id1) band (1 bsl 62) =/= 0),
    ?assertEqual([], [L || L <- Lines, binary:match(L, list_to_binary(ClearedPid)) =/= nomatch]),
    ?assertEqual({traced, false}, in_peer(Config, fun() -> ok = dtrace_vm:sync(), erlang:trace_info(Fspan, traced) end)).

%% dtrace_process__name: once a tracer listens, every live process by its
%% name (registered, RabbitMQ's process_name, proc_lib's initial call, for
%% a fun's process the function it runs: its initial call, erlang:apply/2,
%% names none); then a process started after.
process_names(Config) ->
    {Registered, Dict, Plain, Fun} =
        in_peer(Config, fun() ->
                                Wait = fun() -> receive stop -> ok end end,
                                R = spawn(Wait),
                                true = register(dtrace_suite_named, R),
                                D = proc_lib:spawn(fun() -> put(process_name, {rabbit_channel, {<<"a -> b">>, 1}}),
                                                            receive stop -> ok end end),
                                P = proc_lib:spawn(fun dtrace_test_workload:sink/0),
                                F = spawn(fun() -> dtrace_test_workload:sink() end),
                                {pid_to_list(R), pid_to_list(D), pid_to_list(P), pid_to_list(F)}
                        end),
    Line = fun(Pid, Name) -> iolist_to_binary(["NAME ", Pid, " ", Name]) end,
    {New, Lines} =
        dtrace_test_tracer:bpftrace_window(
          bpftrace, ?config(peer, Config),
          "usdt:$SO:erlang:dtrace_process__name { printf(\"NAME %s %s\\n\", str(arg0), str(arg1)); }",
          fun() -> ok end,
          [Line(Registered, "dtrace_suite_named")],
          fun() ->
                  N = spawn(fun() -> receive stop -> ok end end),
                  true = register(dtrace_suite_later, N),
                  pid_to_list(N)
          end,
          fun(N, Ls) -> lists:member(Line(N, "dtrace_suite_later"), Ls) end),
    ?assert(lists:member(Line(Dict, "{rabbit_channel,{<<\"a -> b\">>,1}}"), Lines)),
    ?assert(lists:member(Line(Plain, "dtrace_test_workload:sink/0"), Lines)),
    ?assert(lists:member(Line(Fun, "dtrace_test_workload:sink/0"), Lines)),
    ?assert(lists:member(Line(New, "dtrace_suite_later"), Lines)).

%% Waits (at most 5 s) until trace_info(MFA, traced) is {traced, Want}.
wait_traced(MFA, Want) ->
    dtrace_test_workload:wait_until(fun() -> erlang:trace_info(MFA, traced) =:= {traced, Want} end, 5000).

%% Attaching a tracer sets the flags within one poll and detaching clears
%% them; 50 attach/detach cycles under load leave the node alive, no flag
%% of dtrace's set, and an operator's dbg trace of another process
%% untouched throughout.
attach_detach_cycles_leave_operators_alone(Config) ->
    Peer = ?config(peer, Config),
    {Watched, DbgBefore} =
        in_peer(Config, fun() ->
                                W = spawn(fun dtrace_test_workload:sink/0),
                                {ok, _} = dbg:tracer(process, {fun(_, N) -> N + 1 end, 0}),
                                {ok, _} = dbg:p(W, [m]),
                                Load = dtrace_test_workload:ping_load(2),
                                put(load, Load),
                                register(vm_watched, W),
                                {W, {erlang:trace_info(W, tracer), erlang:trace_info(W, flags)}}
                        end),
    %% bpftrace must be fully attached before it is stopped (a SIGINT
    %% during its set-up can leave it waiting for ever): it says SEEN at
    %% its first event.
    Program = "usdt:$SO:erlang:message__send {
                   if (!@seen) { @seen = 1; printf(\"SEEN\\n\"); } @n = count(); }",
    Cycles =
        [begin
             {{On, WatchedOn}, _} =
                 dtrace_test_tracer:bpftrace_window(
                   Peer, Program, fun() -> self() ! x, receive x -> ok end end, [<<"SEEN">>],
                   fun() ->
                           {dtrace_test_workload:wait_flags([send], 5000), erlang:trace_info(Watched, tracer)}
                   end),
             Off = peer:call(Peer, dtrace_test_workload, wait_flags, [[], 5000]),
             {On, Off, WatchedOn}
         end || _ <- lists:seq(1, 50)],
    ?assertEqual([], [C || {On, Off, _} = C <- Cycles, {On, Off} =/= {ok, ok}]),
    {DbgTracer, _} = DbgBefore,
    ?assertEqual([], [W || {_, _, W} <- Cycles, W =/= DbgTracer]),
    {Ours, DbgAfter, Status} =
        in_peer(Config, fun() ->
                                ok = dtrace_vm:sync(),
                                {dtrace_test_workload:our_traced(),
                                 {erlang:trace_info(Watched, tracer), erlang:trace_info(Watched, flags)},
                                 dtrace:vm_probes()}
                        end),
    ?assertEqual([], Ours),
    ?assertEqual(DbgBefore, DbgAfter),
    ?assertMatch(#{flags := #{processes := []}}, Status),
    ct:log("dbg's trace of ~p: ~p", [Watched, DbgAfter]).

%% Manual mode: dtrace sets no flag; a user's own {tracer, dtrace_tracer, []}
%% feeds the probes for the processes they trace.
manual_mode_and_user_tracer(Config) ->
    ok = in_peer(Config, fun() -> dtrace:vm_probes(manual) end),
    Program = "usdt:$SO:erlang:process__spawn { printf(\"SPAWN %s %s\\n\", str(arg0), str(arg1)); }",
    {{Flags, Child, Untraced}, Lines} =
        dtrace_test_tracer:bpftrace_marked(
          ?config(peer, Config), Program,
          fun() -> ok end, [],
          fun() ->
                  %% A poll has run while bpftrace listens.
                  ok = dtrace_vm:sync(),
                  F = dtrace_test_workload:our_traced(),
                  Self = self(),
                  Traced = spawn(fun() ->
                                         receive go -> ok end,
                                         C = spawn(fun() -> ok end),
                                         Self ! {child, C}
                                 end),
                  1 = erlang:trace(Traced, true, [procs, {tracer, dtrace_tracer, []}]),
                  Traced ! go,
                  C = receive {child, C0} -> C0 end,
                  U = spawn(fun() -> ok end),
                  {F, pid_to_list(C), pid_to_list(U)}
          end),
    ?assertEqual([], Flags),
    ?assertEqual([iolist_to_binary(["SPAWN ", Child, " erlang:apply/2"])],
                 [L || <<"SPAWN ", _/binary>> = L <- Lines]),
    ?assertEqual([], [L || L <- Lines, binary:match(L, list_to_binary(Untraced)) =/= nomatch]).

%% process__spawn alone sets no trace flag on any process: automatic mode
%% meta-traces the spawn BIFs, and every way of spawning fires it with the
%% function the new process starts in; the patterns go when the tracer
%% leaves. The patterns are set one BIF at a time, so the workload starts
%% once each of the three BIFs has fired (a spawn through spawn_opt/4 went
%% unseen when the first spawn/3 alone was awaited).
spawn_alone_sets_no_flag(Config) ->
    Program = "usdt:$SO:erlang:process__spawn { printf(\"SPAWN %s %s\\n\", str(arg0), str(arg1)); }",
    {{Status, Ours, Spawned}, Lines} =
        dtrace_test_tracer:bpftrace_marked(
          ?config(peer, Config), Program,
          fun() ->
                  _ = spawn(lists, reverse, [[]]),
                  _ = spawn_link(lists, seq, [1, 1]),
                  spawn_opt(lists, last, [[1]], [])
          end,
          [{contains, <<" lists:reverse/1">>}, {contains, <<" lists:seq/2">>}, {contains, <<" lists:last/1">>}],
          fun() ->
                  P1 = spawn(fun() -> ok end),
                  P2 = spawn(dtrace_test_workload, double, [1]),
                  {P3, _} = spawn_monitor(fun() -> ok end),
                  P4 = proc_lib:spawn(fun() -> ok end),
                  P5 = spawn_link(fun() -> ok end),
                  P6 = spawn_opt(fun() -> ok end, [{priority, low}]),
                  {dtrace:vm_probes(), dtrace_test_workload:our_traced(),
                   [pid_to_list(P) || P <- [P1, P2, P3, P4, P5, P6]]}
          end),
    ?assertMatch(#{flags := #{processes := [], ports := []}, spawn_meta := on}, Status),
    ?assertEqual([], Ours),
    [P1, P2, P3, P4, P5, P6] = Spawned,
    Want = [["SPAWN ", P1, " erlang:apply/2"], ["SPAWN ", P2, " dtrace_test_workload:double/1"],
            ["SPAWN ", P3, " erlang:apply/2"], ["SPAWN ", P4, " proc_lib:init_p/3"],
            ["SPAWN ", P5, " erlang:apply/2"], ["SPAWN ", P6, " erlang:apply/2"]],
    ?assertEqual([iolist_to_binary(W) || W <- Want],
                 [L || <<"SPAWN ", _/binary>> = L <- Lines,
                       lists:any(fun(P) -> binary:match(L, list_to_binary([P, " "])) =/= nomatch end, Spawned)]),
    ?assertEqual([{meta, false}, {meta, false}, {meta, false}],
                 in_peer(Config, fun() ->
                                         %% bpftrace has exited: a poll clears them.
                                         ok = dtrace_vm:sync(),
                                         [erlang:trace_info(MFA, meta)
                                          || MFA <- [{erlang, spawn, 3}, {erlang, spawn_link, 3},
                                                     {erlang, spawn_opt, 4}]]
                                 end)).

%% With tracers listening (flags, a function pattern, the spawn meta
%% patterns set): killing the automatic mode's process does not take the
%% application down, and its successor clears what it left and sets the
%% flags again; stopping the application then leaves no flag and no trace
%% pattern behind, with the tracer still attached.
stopping_leaves_nothing(Config) ->
    Peer = ?config(peer, Config),
    MFA = {dtrace_test_workload, double, 1},
    ok = in_peer(Config, fun() -> {module, _} = code:ensure_loaded(dtrace_test_workload),
                                  dtrace:function_probes([MFA]) end),
    Program = "
        usdt:$SO:erlang:message__send { if (!@seen) { @seen = 1; printf(\"SEEN\\n\"); } }
        usdt:$SO:erlang:global__function__entry { @calls = count(); }",
    {Steps, _Lines} =
        dtrace_test_tracer:bpftrace_window(
          Peer, Program, fun() -> self() ! x, receive x -> ok end end, [<<"SEEN">>],
          fun() ->
                  On = dtrace_test_workload:wait_flags([arity, call, send], 5000),
                  Old = whereis(dtrace_vm),
                  exit(Old, kill),
                  ok = dtrace_test_workload:wait_until(
                         fun() -> not lists:member(whereis(dtrace_vm), [Old, undefined]) end, 5000),
                  New = whereis(dtrace_vm),
                  Again = dtrace_test_workload:wait_flags([arity, call, send], 5000),
                  Running = lists:keymember(dtrace, 1, application:which_applications()),
                  ok = application:stop(dtrace),
                  {On, is_pid(New) andalso New =/= Old, Again, Running,
                   dtrace_test_workload:our_traced(), erlang:trace_info(MFA, traced),
                   erlang:trace_info(new_processes, tracer),
                   [erlang:trace_info(B, meta) || B <- [{erlang, spawn, 3}, {erlang, spawn_link, 3},
                                                        {erlang, spawn_opt, 4}]]}
          end),
    ?assertEqual({ok, true, ok, true, [], {traced, false}, {tracer, []},
                  [{meta, false}, {meta, false}, {meta, false}]}, Steps).
