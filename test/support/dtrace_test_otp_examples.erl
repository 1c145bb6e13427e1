%%% Test helper: OTP's own example scripts (lib/runtime_tools/examples,
%%% from the OTP source tarball; never copied here), the D ones and their
%%% SystemTap twins, which print the same lines. For each script the
%%% library feeds: the probes it needs attached, a ready call that fires
%%% them, the workload, and the lines OTP's format gives for the
%%% workload's values; the same for the library's own span-latency and
%%% message-latency scripts (.d, .bt, .stp). Used by dtrace_dtrace_SUITE
%%% (DTrace) and dtrace_kernels_SUITE (SystemTap in the guests).
-module(dtrace_test_otp_examples).

-export([names/0, script/2, probes/1, example/2, source/3]).

-type name() :: user_probe | user_probe_n | messages | process_scheduling | spawn_exit
              | garbage_collection | function_calls | port1 | memory1 | dist
              %% The library's own shipped scripts (span-latency, message-latency:
              %% .d, .bt and .stp print the same lines).
              | shipped_spawn_exit | span_latency | message_latency.
%% An expected line: equal, or one containing Part; {at_exit, _} ones are
%% printed as the tracer exits.
-type wanted() :: binary() | {contains, binary()} | {at_exit, binary() | {contains, binary()}}.
-type example() :: #{ready := fun(() -> term()), work := fun(() -> term()),
                     expect := fun((term()) -> [wanted()]), cleanup := fun(() -> term())}.
-export_type([name/0, example/0]).

%% Extracts Patterns (tar wildcards, e.g. "*/lib/runtime_tools/examples/*.d")
%% of the OTP source of release Otp (scripts/otp-source.sh: Debian sid's
%% for OTP 29 and later, trixie's OTP 27 before, as the suites always read
%% it) into Priv/otp-source; returns the source's top directory there.
-spec source(Priv :: file:filename(), Otp :: pos_integer(), Patterns :: [string()]) -> file:filename().
source(Priv, Otp, Patterns) ->
    Suite = case Otp >= 29 of true -> " erlang sid"; false -> " erlang" end,
    Fetch = filename:join([dtrace_test_catalogue:repo_root(), "scripts", "otp-source.sh"]),
    {0, Lines} = dtrace_test_tracer:build("sh", ["-c", Fetch ++ Suite ++ " 2>/dev/null"]),
    Tarball = binary_to_list(lists:last(Lines)),
    true = filelib:is_regular(Tarball),
    Dir = filename:join(Priv, "otp-source"),
    ok = filelib:ensure_path(Dir),
    {0, _} = dtrace_test_tracer:run("tar", ["-xJf", Tarball, "-C", Dir, "--wildcards" | Patterns]),
    [Top] = filelib:wildcard(filename:join(Dir, "*")),
    ct:log("OTP's source ~ts: ~p", [Tarball, Patterns]),
    Top.

%% The examples whose every probe the library feeds, or whose lines for
%% the probes it feeds are asserted, that run anywhere (dist, which needs
%% two distributed nodes, is not here: the guests have no network).
-spec names() -> [name()].
names() ->
    [user_probe, user_probe_n, messages, process_scheduling, spawn_exit, garbage_collection,
     function_calls, port1, memory1].

%% The script's file name in OTP's examples directory, for d or systemtap.
-spec script(Name :: name(), Kind :: d | systemtap) -> string().
script(Name, Kind) ->
    Base = case Name of
               user_probe -> "user-probe";
               user_probe_n -> "user-probe-n";
               process_scheduling -> "process-scheduling";
               spawn_exit -> "spawn-exit";
               garbage_collection -> "garbage-collection";
               function_calls -> "function-calls";
               _ -> atom_to_list(Name)
           end,
    Base ++ "." ++ atom_to_list(Kind).

%% The probes a window waits for (D's names; SystemTap takes them too).
-spec probes(Name :: name()) -> [string()].
probes(user_probe) -> ["user_trace-s1", "user_trace-i4s4"];
probes(user_probe_n) -> ["user_trace-n0", "user_trace-n1"];
probes(messages) -> ["message-send", "message-queued"];
probes(process_scheduling) -> ["process-scheduled", "process-unscheduled", "process-hibernate"];
probes(spawn_exit) -> ["process-spawn", "process-exit"];
probes(garbage_collection) -> ["gc_major-start", "gc_major-end"];
probes(function_calls) -> ["global-function-entry", "function-return", "bif-entry", "bif-return"];
probes(port1) -> ["port-open", "port-command", "port-exit", "port-control", "port-connect", "port-busy"];
probes(memory1) -> ["process-heap_grow", "process-heap_shrink"];
probes(dist) -> ["dist-monitor", "dist-port_busy", "process-scheduled"];
%% The library's scripts name processes: their windows wait for
%% dtrace_process__name too, which each ready call fires (dtrace_test_workload:named/2).
probes(shipped_spawn_exit) -> ["process-spawn", "process-exit", "dtrace_process-name"];
probes(span_latency) -> ["span-end", "dtrace_process-name"];
probes(message_latency) -> ["message-send", "process-scheduled", "dtrace_process-name"].

%% The example's calls, made ready in Peer (function patterns, a port
%% opened before the tracer): ready and work run in the peer; cleanup,
%% here, after the tracer stopped.
-spec example(Name :: name(), Peer :: pid()) -> example().
example(user_probe, _Peer) ->
    plain(fun() -> dtrace:user_trace_s1("ready"), dtrace:p(-1) end,
          fun() ->
                  true = dtrace:user_trace_s1("s1 from the suite"),
                  dtrace:put_tag(<<"dtag">>),
                  true = dtrace:p(1, 2, "abc", <<"def">>),
                  dtrace:put_tag(undefined),
                  true = dtrace:p(7, 8, "x"),
                  pid_to_list(self())
          end,
          fun(P) -> [<<"s1 from the suite">>,
                     iolist_to_binary([P, " dtag 1 2 0 0 'abc' 'def' '' ''"]),
                     iolist_to_binary([P, "  7 8 0 0 'x' '' '' ''"])]
          end);
example(user_probe_n, _Peer) ->
    plain(fun() -> dtrace:pn(0, -1), dtrace:pn(1, -1) end,
          fun() ->
                  true = dtrace:pn(0, 10, "zero"),
                  dtrace:put_tag(<<"ntag">>),
                  true = dtrace:pn(1, 11, 12, "one", "uno"),
                  pid_to_list(self())
          end,
          fun(P) -> [iolist_to_binary(["probe n0: ", P, "  10 0 0 0 'zero' '' '' ''"]),
                     iolist_to_binary(["probe n1: ", P, " ntag 11 12 0 0 'one' 'uno' '' ''"])]
          end);
%% The token fields are 0 without a token, so OTP's first send and queued
%% clauses print (not the "label ... token" ones).
example(messages, _Peer) ->
    plain(fun() -> self() ! ready, receive ready -> ok end end,
          fun() ->
                  S = spawn(fun dtrace_test_workload:sink/0),
                  S ! {a, b, c},
                  {pid_to_list(self()), pid_to_list(S)}
          end,
          fun({From, To}) ->
                  [iolist_to_binary(["send:   ", From, " -> ", To, ": 4 words"]),
                   iolist_to_binary(["queued: ", To, ": 4 words, queue len -1"])]
          end);
example(process_scheduling, _Peer) ->
    Hibernating = fun() ->
                          P = spawn(fun() -> erlang:hibernate(erlang, exit, [normal]) end),
                          dtrace_test_workload:wait_hibernating(P),
                          P ! wake,
                          P
                  end,
    plain(Hibernating,
          fun() -> pid_to_list(Hibernating()) end,
          fun(P) -> [iolist_to_binary(["  Schedule pid ", P, " mfa erlang:apply/2"]),
                     iolist_to_binary(["Unschedule pid ", P]),
                     iolist_to_binary(["  Hibernate pid ", P, " resume mfa erlang:hibernate/3"])]
          end);
example(spawn_exit, _Peer) ->
    plain(fun() -> spawn(fun() -> ok end) end,
          fun() ->
                  {P, Ref} = spawn_monitor(fun() -> exit(shipped) end),
                  receive {'DOWN', Ref, process, P, shipped} -> pid_to_list(P) end
          end,
          fun(P) -> [iolist_to_binary(["pid ", P, " mfa erlang:apply/2"]),
                     iolist_to_binary(["pid ", P, " reason shipped"])]
          end);
example(garbage_collection, _Peer) ->
    plain(fun() -> erlang:garbage_collect() end,
          fun() ->
                  Self = self(),
                  P = spawn(fun() -> erlang:garbage_collect(), Self ! {collected, self()},
                                     receive stop -> ok end end),
                  receive {collected, P} -> pid_to_list(P) end
          end,
          fun(P) -> [{contains, iolist_to_binary(["GC major start pid ", P, " need "])},
                     {contains, iolist_to_binary(["GC major end pid ", P, " reclaimed "])}]
          end);
example(function_calls, Peer) ->
    ok = peer:call(Peer, dtrace, function_probes, [[{dtrace_test_workload, double, 1}, {erlang, phash2, 1}]]),
    #{ready => fun() -> dtrace_test_workload:double(1), erlang:phash2(x) end,
      work => fun() ->
                      6 = dtrace_test_workload:double(3),
                      _ = erlang:phash2(y),
                      pid_to_list(self())
              end,
      expect => fun(P) -> [iolist_to_binary(["pid ", P, " enter (global)  dtrace_test_workload:double/1 depth -1"]),
                           iolist_to_binary(["pid ", P, " return dtrace_test_workload:double/1 depth -1"]),
                           iolist_to_binary(["pid ", P, " BIF entry  mfa erlang:phash2/1"]),
                           iolist_to_binary(["pid ", P, " BIF return mfa erlang:phash2/1"])]
                end,
      cleanup => fun() -> ok = peer:call(Peer, dtrace, function_probes, [[]]) end};
%% port-command and port-exit name the port as it was opened (OTP's D
%% script stops with "invalid address (0x0)" on a NULL name), a port opened
%% before the tracer started too (automatic mode reads its name as it
%% starts tracing ports); port-control (a socket's inet:port/1), port-connect
%% (from the owner to the new one) and port-busy (a sender suspended on a
%% port past its busy limit, from the system monitor, which nobody else
%% holds here).
example(port1, Peer) ->
    {Old, OldOwner} = peer:call(Peer, erlang, apply,
                                [fun() ->
                                         Self = self(),
                                         Pid = spawn(fun() ->
                                                             P = open_port({spawn, "cat >/dev/null"}, [exit_status]),
                                                             Self ! {opened, P},
                                                             receive stop -> ok end
                                                     end),
                                         receive {opened, P} -> {P, Pid} end
                                 end, []]),
    %% A program per ready call: paced, so that the ready loop leaves the
    %% tracer the CPU to start (a one-vCPU guest).
    #{ready => fun() ->
                       P = open_port({spawn, "cat >/dev/null"}, [exit_status]),
                       port_command(P, "x"),
                       true = erlang:port_connect(P, self()),
                       dtrace_test_workload:close_port(P),
                       {ok, L} = gen_tcp:listen(0, []),
                       {ok, _} = inet:port(L),
                       ok = gen_tcp:close(L),
                       _ = busy_port(),
                       timer:sleep(100)
               end,
      work => fun() ->
                      P = open_port({spawn, "cat >/dev/null"}, [binary, exit_status]),
                      true = port_command(P, <<"hi">>),
                      {O, Ref} = spawn_monitor(fun() -> receive stop -> ok end end),
                      true = erlang:port_connect(P, O),
                      dtrace_test_workload:close_port(P),
                      O ! stop,
                      receive {'DOWN', Ref, _, _, _} -> ok end,
                      true = port_command(Old, "old"),
                      {ok, L} = gen_tcp:listen(0, []),
                      {ok, _} = inet:port(L),
                      ok = gen_tcp:close(L),
                      Busy = busy_port(),
                      {pid_to_list(self()), erlang:port_to_list(P), pid_to_list(O), erlang:port_to_list(L), Busy}
              end,
      expect => fun({Owner, Port, NewOwner, Socket, Busy}) ->
                        [iolist_to_binary(["port command pid ", Owner, " port ", erlang:port_to_list(Old),
                                           " port name cat >/dev/null command type command"]),
                         iolist_to_binary(["port open pid ", Owner, " port name cat >/dev/null port ", Port]),
                         iolist_to_binary(["port command pid ", Owner, " port ", Port,
                                           " port name cat >/dev/null command type command"]),
                         iolist_to_binary(["port connect pid ", Owner, " port ", Port,
                                           " port name cat >/dev/null new pid ", NewOwner]),
                         {contains, iolist_to_binary(["port exit pid ", NewOwner, " port ", Port,
                                                      " port name cat >/dev/null reason "])},
                         {contains, iolist_to_binary(["port control pid ", Owner, " port ", Socket,
                                                      " port name tcp_inet command "])},
                         iolist_to_binary(["port busy ", Busy])]
                end,
      cleanup => fun() -> OldOwner ! stop end};
%% The peer made a distributed node (and undone by cleanup), and another
%% node: connecting to it, sending it 8 MB messages from four processes
%% (a send that finds the distribution buffer over its busy limit, 1 MB by
%% default, suspends its sender) and disconnecting print OTP's monitor
%% lines, its port_busy line and its "blocked pid ... scheduled now" line.
example(dist, Peer) ->
    Cookie = "dtrace_otp_dist",
    {PeerB, NodeB} = dtrace_test_peer:start_named_peer("dtrace_dist_b", Cookie, [dtrace_test_workload]),
    Sink = peer:call(PeerB, erlang, apply,
                     [fun() -> P = spawn(fun dtrace_test_workload:sink/0), register(dist_sink, P), P end, []]),
    NodeA = peer:call(Peer, erlang, apply,
                      [fun() ->
                               {ok, _} = net_kernel:start([list_to_atom("dtrace_dist_a_" ++ os:getpid()), shortnames]),
                               true = erlang:set_cookie(node(), list_to_atom(Cookie)),
                               node()
                       end, []]),
    Blast = fun(N) ->
                    Data = binary:copy(<<"x">>, 8 bsl 20),
                    Me = self(),
                    Senders = [spawn(fun() -> _ = [Sink ! Data || _ <- lists:seq(1, N)], Me ! {sent, self()} end)
                               || _ <- lists:seq(1, 4)],
                    [receive {sent, S} -> pid_to_list(S) end || S <- Senders]
            end,
    #{ready => fun() ->
                       true = net_kernel:connect_node(NodeB),
                       _ = Blast(2),
                       true = erlang:disconnect_node(NodeB),
                       timer:sleep(100)
               end,
      work => fun() ->
                      true = net_kernel:connect_node(NodeB),
                      Senders = Blast(4),
                      true = erlang:disconnect_node(NodeB),
                      {os:getpid(), Senders}
              end,
      expect => fun({OsPid, _Senders}) ->
                        A = atom_to_list(NodeA),
                        B = io_lib:format("~p", [NodeB]),
                        Monitor = fun(What, Reason) ->
                                          iolist_to_binary(["monitor: pid ", OsPid, ", who ", A, ", what ", What,
                                                            ", node ", B, ", type visible, reason ", Reason])
                                  end,
                        [Monitor("nodeup", "[]"), Monitor("nodedown", "disconnect"),
                         {contains, iolist_to_binary(["dist port_busy: node ", A, ", port #Port<"])},
                         {contains, iolist_to_binary([", remote_node ", B, ", blocked pid <"])},
                         {contains, <<"scheduled now, waited ">>}]
                end,
      cleanup => fun() ->
                         _ = peer:call(Peer, net_kernel, stop, []),
                         dtrace_test_peer:stop_peer(PeerB)
                 end};
%% A process whose heap grows as it builds a list, and shrinks when it is
%% dead: OTP's lines for process-heap_grow and -heap_shrink (OTP says
%% bytes; the values are words, in OTP's build too).
example(memory1, _Peer) ->
    Cycle = fun(N) ->
                    {P, Ref} = spawn_monitor(fun() ->
                                                     L = lists:seq(1, N),
                                                     receive {go, From} ->
                                                             From ! {len, length(L)},
                                                             receive shrink -> erlang:garbage_collect() end
                                                     end
                                             end),
                    P ! {go, self()},
                    receive {len, N} -> ok end,
                    P ! shrink,
                    receive {'DOWN', Ref, _, _, _} -> ok end,
                    pid_to_list(P)
            end,
    %% The ready call paced (not a wait for anything): the tracer gets the
    %% CPU to attach on a one-vCPU guest.
    plain(fun() -> Cycle(20000), timer:sleep(50) end,
          fun() -> Cycle(200000) end,
          fun(P) -> [{contains, iolist_to_binary(["proc heap grow pid ", P, " "])},
                     {contains, iolist_to_binary(["proc heap shrink pid ", P, " "])}]
          end);

%% A slow span prints as it ends, with its tag, and a failed one (it
%% raised) with its outcome; at exit, the counts and histograms per kind,
%% and the failed spans per kind and outcome.
%% The library's spawn-exit scripts (.bt, .d, .stp) name a process at
%% its exit.
example(shipped_spawn_exit, _Peer) ->
    plain(dtrace_test_workload:named(suite_ready_exit, fun() -> ok end),
          fun() -> (dtrace_test_workload:named(suite_exit, fun() -> exit(shipped) end))() end,
          fun(P) -> [iolist_to_binary(["pid ", P, " mfa erlang:apply/2"]),
                     iolist_to_binary(["pid ", P, " (suite_exit) reason shipped"])]
          end);
example(span_latency, _Peer) ->
    plain(dtrace_test_workload:named(suite_ready_span,
                                     fun() -> dtrace:span(ready, fun() -> ok end) end),
          fun() ->
                  dtrace:put_tag(<<"slowtag">>),
                  dtrace:span(suite_slow, fun() -> timer:sleep(15) end),
                  dtrace:put_tag(<<"failtag">>),
                  boom = try dtrace:span(suite_fail, fun() -> error(boom) end) catch error:E -> E end,
                  dtrace:put_tag(undefined),
                  [dtrace:span(suite_fast, fun() -> ok end) || _ <- [1, 2, 3]],
                  %% No user tag: the process's name instead.
                  Named = dtrace_test_workload:named(suite_untagged,
                                fun() -> dtrace:span(suite_untagged, fun() -> timer:sleep(15) end) end),
                  {pid_to_list(self()), Named()}
          end,
          fun({P, N}) -> [{contains, <<"slow span: suite_slow, ">>},
                         {contains, <<"slow span: suite_untagged, ">>},
                         {contains, iolist_to_binary([" us, pid ", N, " (suite_untagged)"])},
                         {contains, iolist_to_binary([" us, tag 'slowtag', pid ", P])},
                         {contains, <<"failed span: suite_fail (error), ">>},
                         {contains, iolist_to_binary([" us, tag 'failtag', pid ", P])},
                         {at_exit, <<"spans suite_fast: 3">>},
                         {at_exit, <<"spans suite_slow: 1">>},
                         {at_exit, <<"slow spans suite_slow: 1">>},
                         {at_exit, <<"failed spans suite_fail error: 1">>},
                         {at_exit, <<"latency (us) suite_slow:">>},
                         {at_exit, <<"latency (us) suite_fast:">>}]
          end);
%% The wait from a send to its receiver running, at exit, per receiver.
example(message_latency, _Peer) ->
    plain(dtrace_test_workload:named(suite_ready_msg,
                                     fun() -> Self = self(), spawn(fun() -> Self ! ready end),
                                              receive ready -> ok end end),
          fun() ->
                  Self = self(),
                  E = spawn(fun() -> receive ping -> Self ! pong end end),
                  true = register(suite_echo, E),
                  ok = dtrace_names:sync(),
                  E ! ping,
                  receive pong -> pid_to_list(E) end
          end,
          fun(E) -> [{at_exit, <<"wait (us):">>},
                     {at_exit, {contains, iolist_to_binary(["longest wait ", E, " (suite_echo): "])}}]
          end).

%% Opens a port whose program never reads, with busy limits of 4 KB, and
%% a process that sends it data until the port's busyness suspends it; the
%% port's text, once it is closed and its program killed (a port closed
%% with output queued waits for its program, and so would the node's halt).
busy_port() ->
    P = open_port({spawn, "sleep 30"}, [binary, {busy_limits_port, {1024, 4096}}]),
    {os_pid, Program} = erlang:port_info(P, os_pid),
    Data = binary:copy(<<"x">>, 65536),
    Sender = spawn(fun() -> _ = [port_command(P, Data) || _ <- lists:seq(1, 100)] end),
    ok = dtrace_test_workload:wait_until(fun() -> process_info(Sender, status) =:= {status, suspended} end,
                                         dtrace_test_tracer:ceiling(10000)),
    exit(Sender, kill),
    ok = dtrace_test_workload:close_port(P),
    _ = os:cmd("kill " ++ integer_to_list(Program)),
    erlang:port_to_list(P).

plain(Ready, Work, Expect) ->
    #{ready => Ready, work => Work, expect => Expect, cleanup => fun() -> ok end}.
