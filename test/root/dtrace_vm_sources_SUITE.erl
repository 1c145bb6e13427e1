%%% OTP's VM probes that a stock VM feeds from other events than a
%%% process's own (dtrace_vm_SUITE has those): a port's requests ('receive'
%%% on ports: port__control, port__connect, driver__*), heap sizes around a
%%% collection (process__heap_grow, process__heap_shrink), the node monitor
%%% (dist__monitor) and the system monitor (port__busy), on a real node with
%%% bpftrace in automatic mode; and an operator's system monitor, which
%%% automatic mode never takes.
-module(dtrace_vm_sources_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_testcase/2, end_per_testcase/2]).
-export([port_requests_fire_otps_port_probes/1, connect_of_ports_of_unknown_name/1, heap_grows_and_shrinks/1,
         nodes_up_and_down/1, busy_dist_port/1, busy_port_while_the_system_monitor_is_free/1,
         operators_system_monitor_untouched/1, large_messages_name_their_code/1,
         large_messages_name_their_senders/1, user_probe_stack/1,
         nif_calls/1, exit_signals/1, ustack_walks_out_of_the_nif/1]).

all() ->
    [port_requests_fire_otps_port_probes, connect_of_ports_of_unknown_name, heap_grows_and_shrinks, nodes_up_and_down, busy_dist_port,
     busy_port_while_the_system_monitor_is_free, operators_system_monitor_untouched,
     large_messages_name_their_code, large_messages_name_their_senders, user_probe_stack, nif_calls, exit_signals, ustack_walks_out_of_the_nif].

init_per_testcase(TC, Config) when TC =:= nodes_up_and_down; TC =:= busy_dist_port ->
    dtrace_test_tracer:with_tracer(bpftrace, Config);
init_per_testcase(ustack_walks_out_of_the_nif, Config) ->
    case dtrace_test_tracer:require_tracer(bpftrace) of
        ok ->
            Peer = dtrace_test_peer:start_peer(["+JPperf", "map"]),
            [{peer, Peer} | Config];
        Skip ->
            Skip
    end;
init_per_testcase(_TC, Config) ->
    dtrace_test_peer:with_dtrace_peer(Config).

end_per_testcase(_TC, Config) ->
    dtrace_test_peer:stop_config_peer(Config).

in_peer(Config, Fun) ->
    peer:call(?config(peer, Config), erlang, apply, [Fun, []], 120000).

%% The fields of the "EV <nsecs> KIND ..." lines, in time order.
events(Lines) ->
    [Rest || {_, Rest} <- lists:sort([{binary_to_integer(T), Rest}
                                      || <<"EV ", L/binary>> <- Lines,
                                         [T | Rest] <- [binary:split(L, <<" ">>, [global])]])].

%%--------------------------------------------------------------------

%% A port's requests, as OTP's probes give them: data in one binary to a
%% port whose driver takes it so (a spawn port: driver__output), in a list
%% (a TCP socket: driver__outputv), erlang:port_control/3 (inet:port/1 on
%% the socket: port__control and driver__control, the same command), the
%% driver's timer (gen_tcp:recv/3 timing out: driver__timeout, with the
%% port's owner) and erlang:port_connect/2 (port__connect, from the old
%% owner to the new one); each with the port's name as it was opened.
port_requests_fire_otps_port_probes(Config) ->
    Program = "
        usdt:$SO:erlang:driver__output { printf(\"EV %lu output %s %s %s %ld\\n\", nsecs, str(arg0), str(arg1), str(arg2), arg3); }
        usdt:$SO:erlang:driver__outputv { printf(\"EV %lu outputv %s %s %s %ld\\n\", nsecs, str(arg0), str(arg1), str(arg2), arg3); }
        usdt:$SO:erlang:port__control { printf(\"EV %lu control %s %s %s %ld\\n\", nsecs, str(arg0), str(arg1), str(arg2), arg3); }
        usdt:$SO:erlang:driver__control { printf(\"EV %lu dcontrol %s %s %s %ld %ld\\n\", nsecs, str(arg0), str(arg1), str(arg2), arg3, arg4); }
        usdt:$SO:erlang:driver__timeout { printf(\"EV %lu timeout %s %s %s\\n\", nsecs, str(arg0), str(arg1), str(arg2)); }
        usdt:$SO:erlang:port__connect { printf(\"EV %lu connect %s %s %s %s\\n\", nsecs, str(arg0), str(arg1), str(arg2), str(arg3)); }
        usdt:$SO:erlang:driver__call { printf(\"EV %lu call %s %s %s %ld %ld\\n\", nsecs, str(arg0), str(arg1), str(arg2), arg3, arg4); }",
    %% A driver with a call callback (none of OTP's has one).
    Drivers = call_driver(Config),
    %% The ready loop's own port and sockets, opened once, by a process
    %% that lives through the case (a driver goes, and its ports with it,
    %% when the process that loaded it exits).
    ok = in_peer(Config, fun() ->
                                 Self = self(),
                                 H = spawn(fun() ->
                                                   ok = erl_ddll:load_driver(Drivers, "dtrace_call_drv"),
                                                   {ok, L} = gen_tcp:listen(0, [binary, {active, false}]),
                                                   {ok, N} = inet:port(L),
                                                   {ok, C} = gen_tcp:connect("localhost", N, [binary, {active, false}]),
                                                   {ok, _A} = gen_tcp:accept(L),
                                                   P = open_port({spawn, "cat"}, [binary]),
                                                   D = open_port({spawn_driver, "dtrace_call_drv"}, []),
                                                   persistent_term:put(ready_ports, {C, P, D}),
                                                   Self ! ready,
                                                   receive stop -> ok end
                                           end),
                                 register(ready_ports_holder, H),
                                 receive ready -> ok end
                         end),
    Ready = fun() ->
                    {C, P, D} = persistent_term:get(ready_ports),
                    ready = erlang:port_call(D, 1, ready),
                    {ok, _} = inet:port(C),
                    ok = gen_tcp:send(C, <<"r">>),
                    {error, timeout} = gen_tcp:recv(C, 0, 1),
                    true = port_command(P, <<"r">>),
                    true = erlang:port_connect(P, whereis(ready_ports_holder))
            end,
    {{Me, Cat, Sock, Other, Extra}, Lines} =
        dtrace_test_tracer:bpftrace_window(
          bpftrace, ?config(peer, Config), Program, Ready,
          [{contains, <<" output ">>}, {contains, <<" outputv ">>}, {contains, <<" control ">>},
           {contains, <<" dcontrol ">>}, {contains, <<" timeout ">>}, {contains, <<" connect ">>},
           {contains, <<" call ">>}],
          fun() ->
                  {ok, L} = gen_tcp:listen(0, [binary, {active, false}]),
                  {ok, N} = inet:port(L),
                  {ok, C} = gen_tcp:connect("localhost", N, [binary, {active, false}]),
                  {ok, A} = gen_tcp:accept(L),
                  P = open_port({spawn, "cat"}, [binary]),
                  true = port_command(P, <<"hello">>),
                  ok = gen_tcp:send(C, [<<"ab">>, <<"cde">>]),
                  {ok, N2} = inet:port(C),
                  {error, timeout} = gen_tcp:recv(C, 0, 20),
                  {O, Ref} = spawn_monitor(fun() -> receive stop -> ok end end),
                  true = erlang:port_connect(P, O),
                  O ! stop,
                  receive {'DOWN', Ref, _, _, _} -> ok end,
                  _ = [gen_tcp:close(S) || S <- [A, C, L]],
                  D = open_port({spawn_driver, "dtrace_call_drv"}, []),
                  {hello, 42} = erlang:port_call(D, 7, {hello, 42}),
                  port_close(D),
                  {pid_to_list(self()), erlang:port_to_list(P), erlang:port_to_list(C), pid_to_list(O),
                   {N2, erlang:port_to_list(D)}}
          end,
          fun({_, P, S, _, {_, D}}, Ls) ->
                  Mine = [E || [_, _, Pt | _] = E <- events(Ls), lists:member(binary_to_list(Pt), [P, S, D])],
                  length(lists:usort([K || [K | _] <- Mine])) >= 7
          end),
    ct:log("~p", [Lines]),
    {PortNo, Drv} = Extra,
    {M, C, S, O, Dr} = {list_to_binary(Me), list_to_binary(Cat), list_to_binary(Sock), list_to_binary(Other),
                        list_to_binary(Drv)},
    Mine = [E || [_, _, Pt | _] = E <- events(Lines), Pt =:= C orelse Pt =:= S orelse Pt =:= Dr],
    ct:log("workload's events: ~p", [Mine]),
    ?assert(lists:member([<<"output">>, M, C, <<"cat">>, <<"5">>], Mine)),
    %% A socket's send: the 5 bytes, and on OTP 27 the header prim_inet
    %% puts before them (what the driver gets, as OTP's probe counts it).
    ?assertMatch([_ | _], [B || [<<"outputv">>, M1, S1, <<"tcp_inet">>, B] <- Mine, M1 =:= M, S1 =:= S,
                                binary_to_integer(B) >= 5]),
    ?assert(lists:member([<<"timeout">>, M, S, <<"tcp_inet">>], Mine)),
    ?assert(lists:member([<<"connect">>, M, C, <<"cat">>, O], Mine)),
    %% port_call/3's data is {hello, 42} in the external term format.
    ?assert(lists:member([<<"call">>, M, Dr, <<"dtrace_call_drv">>, <<"7">>,
                          integer_to_binary(byte_size(term_to_binary({hello, 42})))], Mine)),
    %% inet:port/1's control: the same command in both probes, data bytes >= 0.
    Controls = [Cmd || [<<"control">>, M1, S1, <<"tcp_inet">>, Cmd] <- Mine, M1 =:= M, S1 =:= S],
    DControls = [Cmd || [<<"dcontrol">>, M1, S1, <<"tcp_inet">>, Cmd, Bytes] <- Mine, M1 =:= M, S1 =:= S,
                        binary_to_integer(Bytes) >= 0],
    ?assertNotEqual([], Controls),
    ?assertEqual(Controls, DControls),
    ?assert(is_integer(PortNo)).


%% Ports whose names the library does not know: opened before anything
%% traced ports, beyond what it keeps of the ports already open then (its
%% table holds 1024, dtrace_vm's ?PORT_NAMES). port__connect gives them
%% an empty name, as port__exit and the driver probes do: never NULL,
%% which OTP never passes and OTP's port1.d copyinstr()s.
connect_of_ports_of_unknown_name(Config) ->
    Drivers = call_driver(Config),
    N = 1100,
    ok = in_peer(Config, fun() ->
                                 Self = self(),
                                 H = spawn(fun() ->
                                                   ok = erl_ddll:load_driver(Drivers, "dtrace_call_drv"),
                                                   Ps = [open_port({spawn_driver, "dtrace_call_drv"}, [])
                                                         || _ <- lists:seq(1, N)],
                                                   persistent_term:put(unknown_ports, Ps),
                                                   Self ! ready,
                                                   receive stop -> ok end
                                           end),
                                 register(unknown_ports_holder, H),
                                 receive ready -> ok end
                         end),
    %% The name's pointer, and the name with a "." after it (an empty name
    %% is ".").
    Program = "
        usdt:$SO:erlang:port__connect { printf(\"EV %lu connect %s %lu %s.\\n\", nsecs, str(arg1), arg2, str(arg2)); }",
    ConnectAll = fun() ->
                         H = whereis(unknown_ports_holder),
                         [begin true = erlang:port_connect(P, H), erlang:port_to_list(P) end
                          || P <- persistent_term:get(unknown_ports)]
                 end,
    {Ports, Lines} =
        dtrace_test_tracer:bpftrace_marked(?config(peer, Config), Program,
                                           fun() -> [P | _] = persistent_term:get(unknown_ports),
                                                    erlang:port_connect(P, whereis(unknown_ports_holder))
                                           end,
                                           [{contains, <<" connect ">>}], ConnectAll),
    Mine = [E || [<<"connect">>, Port, _, _] = E <- events(Lines), lists:member(binary_to_list(Port), Ports)],
    Unknown = [E || [_, _, _, <<".">>] = E <- Mine],
    ct:log("~b connects seen of ~b, ~b of ports of unknown name; NULL names: ~p",
           [length(Mine), N, length(Unknown), [E || [_, _, <<"0">>, _] = E <- Mine]]),
    ?assertNotEqual([], Unknown),
    ?assertNotEqual([], [E || [_, _, _, <<"dtrace_call_drv.">>] = E <- Mine]),
    ?assertEqual([], [E || [_, _, <<"0">>, _] = E <- Mine]),
    ok = in_peer(Config, fun() -> unknown_ports_holder ! stop, ok end).

%% Builds test/drivers/dtrace_call_drv.c with the VM's erl_driver.h into
%% the case's priv_dir; the directory, for erl_ddll:load_driver/2.
call_driver(Config) ->
    Dir = ?config(priv_dir, Config),
    C = filename:join([dtrace_test_catalogue:repo_root(), "test", "drivers", "dtrace_call_drv.c"]),
    Include = filename:join([code:root_dir(), "usr", "include"]),
    {0, Out} = dtrace_test_tracer:run("cc", ["-shared", "-fPIC", "-I", Include, "-o",
                                             filename:join(Dir, "dtrace_call_drv.so"), C]),
    ct:log("cc: ~p", [Out]),
    Dir.

%% A process whose heap grows as it builds a list, and shrinks when a
%% collection finds it dead: process__heap_grow and process__heap_shrink,
%% in words, the last size as process_info(P, heap_size) says after it.
heap_grows_and_shrinks(Config) ->
    Program = "
        usdt:$SO:erlang:process__heap_grow { printf(\"EV %lu grow %s %ld %ld\\n\", nsecs, str(arg0), arg1, arg2); }
        usdt:$SO:erlang:process__heap_shrink { printf(\"EV %lu shrink %s %ld %ld\\n\", nsecs, str(arg0), arg1, arg2); }",
    %% The ready loop's own process grows and shrinks a heap once.
    Cycle = fun(N) ->
                    {P, Ref} = spawn_monitor(
                                 fun() ->
                                         L = lists:seq(1, N),
                                         receive {go, From} ->
                                                 Len = length(L),
                                                 erlang:garbage_collect(),
                                                 {heap_size, Before} = process_info(self(), heap_size),
                                                 From ! {grown, self(), Len, Before},
                                                 receive {shrink, F2} ->
                                                         erlang:garbage_collect(),
                                                         F2 ! {shrunk, self(), process_info(self(), heap_size)}
                                                 end
                                         end
                                 end),
                    P ! {go, self()},
                    receive {grown, P, N, _} -> ok end,
                    P ! {shrink, self()},
                    receive {shrunk, P, {heap_size, After}} -> ok end,
                    receive {'DOWN', Ref, _, _, _} -> ok end,
                    {pid_to_list(P), After}
            end,
    {{Pid, After}, Lines} =
        dtrace_test_tracer:bpftrace_window(
          bpftrace, ?config(peer, Config), Program, fun() -> Cycle(20000) end,
          [{contains, <<" grow ">>}, {contains, <<" shrink ">>}],
          fun() -> Cycle(200000) end,
          fun({P, _}, Ls) ->
                  lists:member(<<"shrink">>, [K || [K, Pr | _] <- events(Ls), Pr =:= list_to_binary(P)])
          end),
    Mine = [{K, binary_to_integer(Old), binary_to_integer(New)}
            || [K, Pr, Old, New] <- events(Lines), Pr =:= list_to_binary(Pid)],
    ct:log("events of ~s: ~p", [Pid, Mine]),
    ?assertNotEqual([], [x || {<<"grow">>, Old, New} <- Mine, New > Old]),
    ?assertEqual([], [x || {<<"grow">>, Old, New} <- Mine, New =< Old]),
    ?assertEqual([], [x || {<<"shrink">>, Old, New} <- Mine, New >= Old]),
    %% The last event is the shrink of the last collection, to the size the
    %% process then had.
    ?assertMatch({<<"shrink">>, _, After}, lists:last(Mine)).

%% A node connecting to another and disconnecting: dist__monitor with
%% OTP's arguments (this node's name, then ~p texts, as OTP's %T: nodeup /
%% nodedown, the other node, its type, the reason: [] on nodeup).
nodes_up_and_down(_Config) ->
    {PeerA, NodeA} = dtrace_test_peer:start_named_peer("vm_sources_a", "dtrace_vm_sources", []),
    {PeerB, NodeB} = dtrace_test_peer:start_named_peer("vm_sources_b", "dtrace_vm_sources", []),
    {PeerC, NodeC} = dtrace_test_peer:start_named_peer("vm_sources_c", "dtrace_vm_sources", []),
    try
        {ok, _} = peer:call(PeerA, application, ensure_all_started, [dtrace]),
        Program = "usdt:$SO:erlang:dist__monitor {
                       printf(\"EV %lu %s %s %s %s %s\\n\", nsecs, str(arg0), str(arg1), str(arg2), str(arg3), str(arg4)); }",
        %% Ready: connecting to C and back, until one came through.
        Ready = fun() -> true = net_kernel:connect_node(NodeC), true = erlang:disconnect_node(NodeC) end,
        {ok, Lines} =
            dtrace_test_tracer:bpftrace_window(
              bpftrace, PeerA, Program, Ready, [{contains, atom_to_binary(NodeC)}],
              fun() ->
                      true = net_kernel:connect_node(NodeB),
                      true = erlang:disconnect_node(NodeB),
                      ok
              end,
              fun(ok, Ls) -> length([E || [_, _, N | _] = E <- events(Ls), N =:= quoted(NodeB)]) >= 2 end),
        ct:log("~p", [Lines]),
        {A, B} = {atom_to_binary(NodeA), quoted(NodeB)},
        Mine = [E || [_, _, N | _] = E <- events(Lines), N =:= B],
        ct:log("~p", [Mine]),
        %% Then B may connect again (its global server does, after A
        %% disconnected it): only the first two are the workload's.
        ?assertEqual([[A, <<"nodeup">>, B, <<"visible">>, <<"[]">>],
                      [A, <<"nodedown">>, B, <<"visible">>, <<"disconnect">>]], lists:sublist(Mine, 2))
    after
        _ = [dtrace_test_peer:stop_peer(P) || P <- [PeerA, PeerB, PeerC]]
    end.

%% A node whose distribution buffer is busy past 1 KB (+zdbbl 1) sending
%% megabyte messages to another: dist__port_busy with OTP's arguments (this
%% node, the distribution port, the other node as %T, the suspended pid).
busy_dist_port(_Config) ->
    {PeerA, NodeA} = dtrace_test_peer:start_named_peer("vm_busy_a", "dtrace_vm_sources", [], ["+zdbbl", "1"]),
    {PeerB, NodeB} = dtrace_test_peer:start_named_peer("vm_busy_b", "dtrace_vm_sources", [dtrace_test_workload]),
    try
        {ok, _} = peer:call(PeerA, application, ensure_all_started, [dtrace]),
        Sink = peer:call(PeerB, erlang, apply,
                         [fun() -> P = spawn(fun dtrace_test_workload:sink/0), register(dist_sink, P), P end, []]),
        Program = "usdt:$SO:erlang:dist__port_busy {
                       printf(\"EV %lu %s %s %s %s\\n\", nsecs, str(arg0), str(arg1), str(arg2), str(arg3)); }",
        %% Four senders of 20 one-megabyte messages each: a send that finds
        %% the buffer over 1 KB suspends its sender.
        Blast = fun(N) ->
                        Data = binary:copy(<<"x">>, 1 bsl 20),
                        Me = self(),
                        Senders = [spawn_link(fun() -> _ = [Sink ! Data || _ <- lists:seq(1, N)], Me ! {sent, self()} end)
                                   || _ <- lists:seq(1, 4)],
                        _ = [receive {sent, S} -> ok end || S <- Senders],
                        [pid_to_list(S) || S <- Senders]
                end,
        {Senders, Lines} =
            dtrace_test_tracer:bpftrace_window(
              bpftrace, PeerA, Program, fun() -> Blast(5) end, [{contains, <<"EV ">>}], fun() -> Blast(20) end,
              fun(Ss, Ls) -> [x || [_, _, _, P] <- events(Ls), lists:member(binary_to_list(P), Ss)] =/= [] end),
        {A, B} = {atom_to_binary(NodeA), quoted(NodeB)},
        Mine = [E || [_, _, _, P] = E <- events(Lines), lists:member(binary_to_list(P), Senders)],
        ct:log("~p", [Mine]),
        ?assertNotEqual([], Mine),
        ?assertEqual([], [E || [N, Port, R, _] = E <- Mine, {N, R} =/= {A, B} orelse binary:match(Port, <<"#Port<">>) =:= nomatch])
    after
        _ = [dtrace_test_peer:stop_peer(P) || P <- [PeerA, PeerB]]
    end.

%% Is the node's send match spec (OTP 25, 26) the default again? (With
%% sessions, ours was in our session, which trace_info/2 does not show.)
send_pattern_default() ->
    erlang:trace_info(send, match_spec) =:= {match_spec, true}.

quoted(Atom) ->
    iolist_to_binary(io_lib:format("~p", [Atom])).

%% With nobody holding the system monitor, port__busy listened to makes
%% automatic mode take it; a sender suspended on a busy port (a spawn
%% port whose program does not read, past its busy limit) fires port__busy
%% with the port; the listener gone, the system monitor is free again.
busy_port_while_the_system_monitor_is_free(Config) ->
    Program = "usdt:$SO:erlang:port__busy { printf(\"EV %lu busy %s\\n\", nsecs, str(arg0)); }",
    Busy = fun() ->
                   %% A program that never reads its standard input, and
                   %% limits that make its port busy past 4 KB queued.
                   P = open_port({spawn, "sleep 30"}, [binary, {busy_limits_port, {1024, 4096}}]),
                   Data = binary:copy(<<"x">>, 65536),
                   Sender = spawn(fun() -> _ = [port_command(P, Data) || _ <- lists:seq(1, 100)] end),
                   ok = dtrace_test_workload:wait_until(
                          fun() -> process_info(Sender, status) =:= {status, suspended} end, 10000),
                   exit(Sender, kill),
                   ok = dtrace_test_workload:close_port(P),
                   erlang:port_to_list(P)
           end,
    {Sock, Lines} =
        dtrace_test_tracer:bpftrace_window(bpftrace, ?config(peer, Config), Program, Busy,
                                           [{contains, <<" busy ">>}], Busy,
                                           fun(S, Ls) -> lists:member([<<"busy">>, list_to_binary(S)], events(Ls)) end),
    ?assert(lists:member([<<"busy">>, list_to_binary(Sock)], events(Lines))),
    ?assertEqual(ok, in_peer(Config, fun() ->
                                             dtrace_test_workload:wait_until(
                                               fun() -> ok = dtrace_vm:sync(),
                                                        erlang:system_monitor() =:= undefined andalso
                                                            maps:get(system_monitor, dtrace:vm_probes()) =:= off
                                               end, 5000)
                                     end)).

%% An operator's system monitor (a process of theirs watching long_gc and
%% busy_port): 50 times a tracer attaches to port__busy and leaves; the
%% system monitor stays theirs throughout, with their options, and the
%% status says it is taken, so port__busy is not fed (dtrace:doctor/0 says
%% so too).
operators_system_monitor_untouched(Config) ->
    Peer = ?config(peer, Config),
    Theirs = in_peer(Config, fun() ->
                                     Op = spawn(fun dtrace_test_workload:sink/0),
                                     undefined = erlang:system_monitor(Op, [{long_gc, 500}, busy_port]),
                                     erlang:system_monitor()
                             end),
    {Op, _} = Theirs,
    Program = "usdt:$SO:erlang:port__busy { @n = count(); }",
    Cycles =
        [begin
             Tracer = dtrace_test_tracer:bpftrace_start(dtrace_test_peer:os_pid(Peer), Program),
             On = peer:call(Peer, erlang, apply,
                            [fun() ->
                                     W = dtrace_test_workload:wait_until(
                                       fun() ->
                                               ok = dtrace_vm:sync(),
                                               lists:member(<<"port__busy">>, maps:get(listening, dtrace:vm_probes()))
                                                   andalso maps:get(system_monitor, dtrace:vm_probes()) =:= {taken, Op}
                                       end, 30000),
                                     %% The doctor says why port__busy is silent.
                                     Doctor = [T || #{check := system_monitor, level := warn, text := T}
                                                        <- dtrace_doctor:findings()],
                                     {W, erlang:system_monitor(), length(Doctor)}
                             end, []], 60000),
             _ = dtrace_test_tracer:bpftrace_stop(Tracer),
             Off = peer:call(Peer, erlang, apply,
                             [fun() ->
                                      ok = dtrace_test_workload:wait_until(
                                             fun() -> ok = dtrace_vm:sync(),
                                                      maps:get(listening, dtrace:vm_probes()) =:= []
                                             end, 30000),
                                      {maps:get(system_monitor, dtrace:vm_probes()), erlang:system_monitor()}
                              end, []], 60000),
             {On, Off}
         end || _ <- lists:seq(1, 50)],
    ?assertEqual([], [C || {On, Off} = C <- Cycles, {On, Off} =/= {{ok, Theirs, 1}, {off, Theirs}}]),
    ?assertEqual(Theirs, peer:call(Peer, erlang, system_monitor, [])).

%% priv/bpftrace/large-messages-code.bt (its default thresholds: 8192 words, 64 KB
%% of binaries) names the code that sent large messages: a tuple of 3000
%% floats (9001 words) and a 2 MB binary, sent by
%% dtrace_test_workload:send_large/3, are printed with that function and
%% counted for it at exit; a small message is not printed. The send match
%% spec that gives the code is gone once the script is.
large_messages_name_their_code(Config) ->
    Peer = ?config(peer, Config),
    Script = filename:join([code:priv_dir(dtrace), "bpftrace", "large-messages-code.bt"]),
    Big = list_to_tuple([float(I) || I <- lists:seq(1, 3000)]),
    Bin = binary:copy(<<"b">>, 2 bsl 20),
    {{Me, Sink}, Lines} =
        dtrace_test_tracer:bpftrace_window(
          bpftrace, Peer, {file, Script},
          fun() -> dtrace_test_workload:send_large(self(), {ready, Big}, 1),
                   receive {ready, _} -> ok end end,
          [{contains, <<"large: ">>}],
          fun() ->
                  S = spawn(fun dtrace_test_workload:sink/0),
                  ok = dtrace_test_workload:send_large(S, Big, 3),
                  ok = dtrace_test_workload:send_large(S, Bin, 2),
                  ok = dtrace_test_workload:send_large(S, small, 5),
                  S ! stop,
                  {pid_to_list(self()), pid_to_list(S)}
          end,
          fun({M, S}, Ls) ->
                  length([L || L <- Ls, binary:match(L, iolist_to_binary(["large: ", M, " -> ", S])) =/= nomatch]) >= 5
          end),
    ct:log("~p", [Lines]),
    Mine = [L || L <- Lines, binary:match(L, iolist_to_binary(["large: ", Me, " -> ", Sink, ": "])) =/= nomatch],
    Code = <<" from dtrace_test_workload:send_large/3">>,
    ?assertEqual(3, length([L || L <- Mine, binary:match(L, <<": 9001 words, 0 binary bytes,", Code/binary>>) =/= nomatch])),
    ?assertEqual(2, length([L || L <- Mine, binary:match(L, <<" binary bytes,", Code/binary>>) =/= nomatch,
                                 binary:match(L, integer_to_binary(2 bsl 20)) =/= nomatch])),
    ?assertEqual(5, length(Mine)),
    %% At exit: the count per code, the workload's five among them.
    ?assert(lists:any(fun(L) -> binary:match(L, <<"@large_messages[dtrace_test_workload:send_large/3">>) =/= nomatch end,
                      Lines)),
    ?assertEqual(ok, in_peer(Config, fun() ->
                                             dtrace_test_workload:wait_until(
                                               fun() -> ok = dtrace_vm:sync(),
                                                        maps:get(send_code, dtrace:vm_probes()) =:= off andalso
                                                            send_pattern_default()
                                               end, 5000)
                                     end)).

%% priv/bpftrace/large-messages.bt (8192 words, 64 KB of binaries by default) names
%% the processes that send large messages, without a process dump: a
%% tuple of 3000 floats and a 100 KB binary (off-heap, under the old 1 MB
%% default) are printed with the sender's name, counted at exit for the
%% receiver by its name; a small message is not printed, and no send
%% match spec is set.
large_messages_name_their_senders(Config) ->
    Peer = ?config(peer, Config),
    Script = filename:join([code:priv_dir(dtrace), "bpftrace", "large-messages.bt"]),
    Big = list_to_tuple([float(I) || I <- lists:seq(1, 3000)]),
    Bin = binary:copy(<<"b">>, 100 * 1024),
    {{Me, Sink}, Lines} =
        dtrace_test_tracer:bpftrace_window(
          bpftrace, Peer, {file, Script},
          fun() -> dtrace_test_workload:send_large(self(), {ready, Big}, 1),
                   receive {ready, _} -> ok end end,
          [{contains, <<"large: ">>}],
          fun() ->
                  S = spawn(fun dtrace_test_workload:sink/0),
                  true = register(dtrace_suite_sink, S),
                  %% Both named before the sends.
                  ok = dtrace_names:sync(),
                  ok = dtrace_test_workload:send_large(S, Big, 3),
                  ok = dtrace_test_workload:send_large(S, Bin, 2),
                  ok = dtrace_test_workload:send_large(S, small, 5),
                  S ! stop,
                  {pid_to_list(self()), pid_to_list(S)}
          end,
          fun({M, S}, Ls) ->
                  length([L || L <- Ls, binary:match(L, iolist_to_binary(["large: ", M, " "])) =/= nomatch,
                               binary:match(L, list_to_binary(S)) =/= nomatch]) >= 5
          end),
    ct:log("~p", [Lines]),
    Mine = [L || L <- Lines, binary:match(L, iolist_to_binary(["large: ", Me, " ("])) =/= nomatch,
                 binary:match(L, iolist_to_binary([" -> ", Sink, ": "])) =/= nomatch],
    ?assert(lists:member(iolist_to_binary(["@large_received[", Sink, ", dtrace_suite_sink]: 5"]), Lines)),
    ?assertEqual(3, length([L || L <- Mine, binary:match(L, <<": 9001 words, 0 binary bytes">>) =/= nomatch])),
    ?assertEqual(2, length([L || L <- Mine, binary:match(L, integer_to_binary(100 * 1024)) =/= nomatch])),
    ?assertEqual(5, length(Mine)),
    ?assertEqual(off, in_peer(Config, fun() -> maps:get(send_code, dtrace:vm_probes()) end)).

%% dtrace_user__stack, while it listens: right after user_trace__i4s4 (and
%% user_trace__n<L>), in the same process and with the same tag, the
%% caller's stack, innermost first, dtrace's own frames left out; the
%% user probe still returns true. Without its listener, p/N returns true
%% and nothing more fires.
user_probe_stack(Config) ->
    Program = "
        usdt:$SO:erlang:user_trace__i4s4 { printf(\"EV %lu probe %s %ld\\n\", nsecs, str(arg0), arg2); }
        usdt:$SO:erlang:user_trace__n7 { printf(\"EV %lu probe %s %ld\\n\", nsecs, str(arg0), arg2); }
        usdt:$SO:erlang:dtrace_user__stack { printf(\"EV %lu stack %s %s %s %s\\n\", nsecs, str(arg0), str(arg1), str(arg2), str(arg3)); }",
    {{Me, Results}, Lines} =
        dtrace_test_tracer:bpftrace_window(
          bpftrace, ?config(peer, Config), Program,
          fun() -> dtrace_test_workload:fire_user_probe(-1), dtrace:pn(7, -1) end,
          [{contains, <<" probe ">>}, {contains, <<" stack ">>}],
          fun() ->
                  dtrace:put_tag(<<"stacktag">>),
                  R1 = dtrace_test_workload:fire_user_probe(42),
                  R2 = dtrace:pn(7, 43),
                  dtrace:put_tag(undefined),
                  {pid_to_list(self()), [R1, R2]}
          end,
          fun({P, _}, Ls) -> length([x || [<<"stack">>, Pr | _] <- events(Ls), Pr =:= list_to_binary(P)]) >= 2 end),
    ?assertEqual([{fired, true}, true], Results),
    P = list_to_binary(Me),
    Mine = [E || [_, Pr | _] = E <- events(Lines), Pr =:= P],
    ct:log("~p", [Mine]),
    %% The stack's words (" <- " between frames; bpftrace's str() keeps
    %% 64 bytes): the innermost frame is the caller's, with its line.
    ?assertMatch([[<<"probe">>, P, <<"42">>],
                  [<<"stack">>, P, <<"stacktag">>, <<"user_trace__i4s4">>,
                   <<"dtrace_test_workload:fire_user_probe/1:", _/binary>>, <<"<-">> | _],
                  [<<"probe">>, P, <<"43">>],
                  [<<"stack">>, P, <<"stacktag">>, <<"user_trace__n7">>,
                   <<"dtrace_vm_sources_SUITE:-user_probe_stack/1-fun-", _/binary>> | _]], Mine),
    ?assertEqual(true, in_peer(Config, fun() -> dtrace:p(1) orelse true end)).

%% Function probes on functions of a module with NIFs (dtrace_nif, a NIF
%% library like any: slow_span_threshold/0 is in its module_info(nifs),
%% stub/1 is Erlang): a NIF's calls fire nif__entry and nif__return, not
%% the function probes, which the Erlang function fires. (A preloaded
%% module's NIFs, prim_file's, cannot be call-traced at all:
%% erlang:trace_pattern/3 sets no pattern on them.)
nif_calls(Config) ->
    ok = in_peer(Config, fun() -> dtrace:function_probes([{dtrace_nif, slow_span_threshold, 0},
                                                          {dtrace_test_workload, double, 1}]) end),
    Program = "
        usdt:$SO:erlang:nif__entry { printf(\"EV %lu nif_entry %s %s\\n\", nsecs, str(arg0), str(arg1)); }
        usdt:$SO:erlang:nif__return { printf(\"EV %lu nif_return %s %s\\n\", nsecs, str(arg0), str(arg1)); }
        usdt:$SO:erlang:global__function__entry { printf(\"EV %lu entry %s %s\\n\", nsecs, str(arg0), str(arg1)); }",
    {Me, Lines} =
        dtrace_test_tracer:bpftrace_window(
          bpftrace, ?config(peer, Config), Program,
          fun() -> dtrace_nif:slow_span_threshold(), dtrace_test_workload:double(1) end,
          [{contains, <<" nif_entry ">>}, {contains, <<" nif_return ">>}, {contains, <<" entry ">>}],
          fun() ->
                  2 = dtrace_test_workload:double(1),
                  _ = dtrace_nif:slow_span_threshold(),
                  pid_to_list(self())
          end,
          fun(P, Ls) -> length([x || [_, Pr | _] <- events(Ls), Pr =:= list_to_binary(P)]) >= 3 end),
    P = list_to_binary(Me),
    ?assertEqual([[<<"entry">>, P, <<"dtrace_test_workload:double/1">>],
                  [<<"nif_entry">>, P, <<"dtrace_nif:slow_span_threshold/0">>],
                  [<<"nif_return">>, P, <<"dtrace_nif:slow_span_threshold/0">>]],
                 [E || [_, Pr | _] = E <- events(Lines), Pr =:= P]),
    ok = in_peer(Config, fun() -> dtrace:function_probes([]) end).

%% exit/2 to live local processes: process__exit_signal with the sender,
%% the receiver and the reason (kill as killed, as OTP shows it), from meta
%% tracing of erlang:exit/2, which sets no trace flag; none for a dead pid.
%% Where the VM has them, exit/3 (OTP 28) and exit_signal/2,3 (OTP 29)
%% fire it too.
exit_signals(Config) ->
    Program = "usdt:$SO:erlang:process__exit_signal {
                   printf(\"EV %lu %s %s %s\\n\", nsecs, str(arg0), str(arg1), str(arg2)); }",
    %% Reason exit_3 and the others of newer_exits/0 are sent by that BIF.
    Kill = fun(Reason) ->
                   {P, Ref} = spawn_monitor(fun dtrace_test_workload:sink/0),
                   true = case Reason of
                              exit_3 -> erlang:apply(erlang, exit, [P, Reason, []]);
                              exit_signal_2 -> erlang:apply(erlang, exit_signal, [P, Reason]);
                              exit_signal_3 -> erlang:apply(erlang, exit_signal, [P, Reason, []]);
                              _ -> exit(P, Reason)
                          end,
                   receive {'DOWN', Ref, _, _, _} -> pid_to_list(P) end
           end,
    %% Ready once the last exit BIF dtrace_vm traces fires: it sets their
    %% patterns one by one, exit/2 first (a case once saw exit/2's event,
    %% then missed exit/3's and exit_signal/2's).
    Ready = fun() -> Kill(lists:last([ready | newer_exits()])) end,
    {{Me, Boom, Killed, Dead, Newer}, Lines} =
        dtrace_test_tracer:bpftrace_window(
          bpftrace, ?config(peer, Config), Program, Ready, [{contains, <<"EV ">>}],
          fun() ->
                  B = Kill({shutdown, boom}),
                  K = Kill(kill),
                  true = exit(list_to_pid(B), again),
                  {pid_to_list(self()), B, K, B, [{F, Kill(F)} || F <- newer_exits()]}
          end,
          fun({M, _, K, _, N}, Ls) ->
                  lists:all(fun({R, P}) -> lists:member([list_to_binary(M), list_to_binary(P), reason(R)], events(Ls)) end,
                            [{kill, K} | N])
          end),
    Mine = [E || [S | _] = E <- events(Lines), S =:= list_to_binary(Me)],
    ct:log("~p", [Mine]),
    ?assertEqual([[list_to_binary(Me), list_to_binary(Boom), <<"{shutdown,boom}">>],
                  [list_to_binary(Me), list_to_binary(Killed), <<"killed">>]],
                 [E || [_, R, _] = E <- Mine, R =/= <<"ready">>, lists:member(R, [list_to_binary(Boom), list_to_binary(Killed)])]),
    %% The dead pid got no event; no process has a trace flag for it.
    ?assertEqual(1, length([x || [_, R, _] <- Mine, R =:= list_to_binary(Dead)])),
    %% exit/3 and exit_signal/2,3, where the peer's OTP has them.
    ?assertEqual(length(newer_exits_in(Config)), length(Newer)),
    [?assert(lists:member([list_to_binary(Me), list_to_binary(P), reason(R)], Mine)) || {R, P} <- Newer],
    ?assertEqual([], in_peer(Config, fun() -> ok = dtrace_vm:sync(), dtrace_test_workload:our_traced() end)).

%% The exit BIFs newer than exit/2 this VM has (exit/3 from OTP 28,
%% exit_signal/2,3 from OTP 29), each as the reason a Kill/1 of
%% exit_signals/1 gives: its call, with an atom naming it.
newer_exits() ->
    Otp = list_to_integer(erlang:system_info(otp_release)),
    [F || {F, Since} <- [{exit_3, 28}, {exit_signal_2, 29}, {exit_signal_3, 29}], Otp >= Since].

newer_exits_in(Config) ->
    in_peer(Config, fun newer_exits/0).

reason(kill) -> <<"killed">>;
reason(R) -> atom_to_binary(R).

%% bpftrace's ustack at a user probe walks the NIF's frames (it is built
%% with frame pointers) from the probe site to the NIF function the VM
%% called, and out of it into the VM. Debian's OTPs (25, 27, 29) build
%% erts without frame pointers: the walk stops there (docs/vm-probes.md).
%% On a VM that keeps them (upstream's JIT builds from source), started
%% with +JPperf map, it goes on into the JIT's frames, which the perf map
%% names: then the Erlang function that called dtrace:p/1 must be on the
%% stack too.
ustack_walks_out_of_the_nif(Config) ->
    Peer = ?config(peer, Config),
    OsPid = dtrace_test_peer:os_pid(Peer),
    Program = "usdt:$SO:erlang:user_trace__i4s4 {
                   if (!@seen) { @seen = 1; printf(\"SEEN\\n\"); } @stacks[ustack] = count(); }",
    try
        {_, Lines} =
            dtrace_test_tracer:bpftrace_window(
              bpftrace, Peer, Program, fun() -> dtrace_test_workload:fire_user_probe(-1) end, [<<"SEEN">>],
              fun() -> [dtrace_test_workload:fire_user_probe(I) || I <- lists:seq(1, 50)], ok end),
        ct:log("~ts", [lists:join("\n", Lines)]),
        Has = fun(Re) -> lists:any(fun(L) -> re:run(L, Re) =/= nomatch end, Lines) end,
        %% The probe site, the family's fire function, the NIF the VM called
        %% (demangled by bpftrace 0.17, in Rust's v0 mangling by 0.27), and
        %% a frame past them.
        [?assert(Has(Re)) || Re <- ["user_trace__i4s4", "fire_i4s4", "dtrace_nif(::|4)user"]],
        Frames = [L || L <- Lines, re:run(L, "^\\s+\\S") =/= nomatch],
        Past = lists:dropwhile(fun(L) -> binary:match(L, <<"dtrace_nif">>) =/= nomatch end, Frames),
        ?assertNotEqual([], Past),
        case Has("\\$dtrace:p/1") of
            true -> ?assert(Has("dtrace_test_workload:fire_user_probe/1"));
            false -> {comment, "this VM has no frame pointers: the walk stops one frame into it"}
        end
    after
        file:delete("/tmp/perf-" ++ OsPid ++ ".map")
    end.
