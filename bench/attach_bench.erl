%%% `make bench': what a function span costs (dtrace:function_spans/1,
%%% issue #39), against OTP's own call tracing of the same function with
%%% `return_trace' to a process tracer (dbg), in the same run.
%%%
%%% The function is attach_bench:work/1, an external call that sums a
%%% 20-element list (about what a small callback does before it calls
%%% out). Per call, the median of ?ROUNDS rounds of ?N calls:
%%% - untraced (CPU per call, below);
%%% - as a function span (each call is one: its outermost call), with
%%%   bpftrace on this node counting span__end: the call's two trace
%%%   events, the NIF's span table, the probe;
%%% - dbg: `dbg:tracer(process, ...)' counting the trace messages,
%%%   `dbg:p(self(), [call])', `dbg:tpl/4' with `return_trace'; the round
%%%   ends when the tracer has taken every message (its process runs on
%%%   the other scheduler).
%%% The budget: the function span no dearer than dbg.
%%%
%%% And priv/bpftrace/large-messages.bt on a busy broker-like node: two pipelines
%%% (one per scheduler), each publisher -> channel -> queue -> consumer, a
%%% message {deliver, Seq, Headers (a map of 5), Payload} whose payload is
%%% a 1 KB binary (off-heap, as a broker's are), every 100th 100 KB (over
%%% the script's 64 KB: printed); the channel routes (phash2 of the key,
%%% an ETS lookup), the queue keeps the message in ETS until the consumer
%%% acks, the consumer acks; the headers travel framed
%%% (term_to_binary/binary_to_term) from the publisher to the channel and
%%% from the consumer out, as a broker frames them; at most 500 messages in
%%% flight. Four sends a message. CPU per message, untraced and with
%%% bpftrace running the script (its defaults), the median of ?ROUNDS
%%% rounds of ?MESSAGES messages per pipeline. The budget: at most 2x the
%%% CPU a message.
%%%
%%% And a node deployed without the library (a peer without dtrace on its
%%% code path): the same broker-like round in it, before and after
%%% ?CYCLES cycles of priv/bin/dtrace-attach and --detach. The budget: after
%%% at most 1.05x before (a trace flag or pattern left behind costs
%%% several times that).
%%%
%%% CPU is the VM's, every thread's (/proc/self/task/*/schedstat): the
%%% traced process's, a tracer process's (dbg's) and the kernel's time in
%%% the probes the schedulers hit; bpftrace's own process is not in it.
%%% Run alone (make bench-attach) without scheduler busy-waiting, which
%%% would count as CPU.
%%%
%%%   erl -noshell +S 2:2 +sbt db -pa _build/default/lib/dtrace/ebin -pa BENCH_EBIN \
%%%       -eval 'attach_bench:main([]).'   (halts: 0, or 1 if a budget is missed)
-module(attach_bench).

-export([main/1, save/1, load/1, run/0, markdown/1, budgets/1, figures/1, work/1, broker_round/0, per_call/0]).

-define(N, 200000).
-define(MESSAGES, 50000).
-define(WINDOW, 500).
-define(ROUNDS, 7).
-define(CYCLES, 20).
-define(FUNCTION, {?MODULE, work, 1}).

main(_) ->
    R = run(),
    io:format("~s~n", [markdown(R)]),
    Budgets = budgets(R),
    [io:format("  ~-90s ~s~n", [T, case OK of true -> "ok"; false -> "MISSED"; _ -> OK end])
     || {T, OK} <- Budgets],
    halt(case lists:all(fun({_, OK}) -> OK =/= false end, Budgets) of true -> 0; false -> 1 end).

%% @doc For make bench (bench/run.sh): run/0's result into File, from a VM
%% started as main/1's is (no scheduler busy-waiting); dtrace_bench reads
%% it with load/1.
save(File) ->
    ok = file:write_file(File, io_lib:format("~p.~n", [run()])),
    halt(0).

load(File) ->
    {ok, [R]} = file:consult(File),
    R.

%% @doc #{untraced, span, dbg := stats(), span_events := float()} (ns per
%% call; events bpftrace counted per call) or {skip, Why}.
run() ->
    case dtrace_bench:can_trace() of
        ok -> measure();
        {skip, Why} -> {skip, Why}
    end.

work(X) ->
    X + lists:sum(lists:seq(1, 20)).

calls(0, Acc) -> Acc;
calls(N, Acc) -> calls(N - 1, attach_bench:work(Acc) band 16#ffff).

per_call() ->
    busy_per(fun() -> calls(?N, 0) end, fun() -> ok end, ?N).

%% The VM's CPU time (every thread's, from /proc/self/task/*/schedstat: a
%% tracer process's too, and the kernel's time in the probes they hit;
%% not bpftrace's) while Run() and then Wait() run, in ns per Ops.
busy_per(Run, Wait, Ops) ->
    B0 = cpu_ns(),
    _ = Run(),
    ok = Wait(),
    (cpu_ns() - B0) / Ops.

cpu_ns() ->
    lists:sum([case file:read_file(F) of
                   {ok, Text} -> binary_to_integer(hd(binary:split(Text, <<" ">>)));
                   {error, _} -> 0
               end || F <- filelib:wildcard("/proc/self/task/*/schedstat")]).

measure() ->
    {ok, _} = application:ensure_all_started(dtrace),
    _ = per_call(),
    Untraced = stats([per_call() || _ <- lists:seq(1, ?ROUNDS)]),
    ok = dtrace:function_spans([?FUNCTION]),
    {Span, Events} = dtrace_bench:with_vm_tracer(["span__end"], fun(#{function_spans_set := Set}) -> Set end,
                                                 fun() -> attach_bench:work(0) end,
                                                 fun() -> [per_call() || _ <- lists:seq(1, ?ROUNDS)] end),
    ok = dtrace:function_spans([]),
    %% Automatic mode's tracer gone from this process (OTP 25: one tracer a
    %% process) before dbg's comes.
    ok = dtrace_bench:wait_vm(fun(#{flags := #{processes := P}, function_spans_set := Set}) ->
                                      P =:= [] andalso not Set
                              end, 3000),
    Dbg = stats([dbg_round() || _ <- lists:seq(1, ?ROUNDS)]),
    _ = broker_round(),
    BrokerOff = stats([broker_round() || _ <- lists:seq(1, ?ROUNDS)]),
    {BrokerOn, Large} = large_messages(fun() -> [broker_round() || _ <- lists:seq(1, ?ROUNDS)] end),
    {Before, After} = attach_cycles(),
    #{untraced => Untraced, span => stats(Span), span_events => Events / (?ROUNDS * ?N), dbg => Dbg,
      broker_off => BrokerOff, broker_on => stats(BrokerOn), large_lines => Large / ?ROUNDS,
      cycles_before => Before, cycles_after => After}.

%% A node deployed without the library (a peer with this bench's modules
%% on its code path, not dtrace's; no scheduler busy-waiting, as here):
%% the broker-like round in it, CPU a message, before and after
%% ?CYCLES attach/detach cycles of priv/bin/dtrace-attach.
attach_cycles() ->
    Cookie = "attach_bench_" ++ integer_to_list(erlang:unique_integer([positive])),
    {ok, Peer, Node} = peer:start(#{name => peer:random_name(attach_bench), connection => standard_io,
                                    args => ["-setcookie", Cookie, "-pa", filename:dirname(code:which(?MODULE)),
                                             "+S", "2:2", "+sbwt", "none", "+sbwtdcpu", "none", "+sbwtdio", "none"]}),
    try
        non_existing = peer:call(Peer, code, which, [dtrace]),
        Rounds = fun() ->
                         _ = peer:call(Peer, ?MODULE, broker_round, [], 60000),
                         stats([peer:call(Peer, ?MODULE, broker_round, [], 60000) || _ <- lists:seq(1, ?ROUNDS)])
                 end,
        Before = Rounds(),
        Script = filename:join([code:priv_dir(dtrace), "bin", "dtrace-attach"]),
        [begin
             {0, _} = dtrace_bench:command(Script, [atom_to_list(Node), "--cookie", Cookie]),
             {0, _} = dtrace_bench:command(Script, [atom_to_list(Node), "--cookie", Cookie, "--detach"])
         end || _ <- lists:seq(1, ?CYCLES)],
        non_existing = peer:call(Peer, code, which, [dtrace]),
        {Before, Rounds()}
    after
        peer:stop(Peer)
    end.

%% Fun() with bpftrace running priv/bpftrace/large-messages.bt on this node, once
%% automatic mode set the send flag: {Fun's value, the "large:" lines it
%% printed}.
large_messages(Fun) ->
    Script = filename:join([code:priv_dir(dtrace), "bpftrace", "large-messages.bt"]),
    Port = open_port({spawn_executable, os:find_executable("bpftrace")},
                     [{args, ["-p", os:getpid(), Script]}, {line, 4096}, stderr_to_stdout, exit_status, binary]),
    ok = dtrace_bench:wait_vm(fun(#{flags := #{processes := P}}) -> lists:member(send, P) end, 3000),
    %% A large message until the script prints one: all its probes attached.
    Self = self(),
    Large = binary:copy(<<"L">>, 100 * 1024),
    Warm = fun W(0) -> error(large_messages_not_ready);
               W(I) -> Self ! {warm, Large},
                       receive {warm, _} -> ok end,
                       receive {Port, {data, {eol, <<"large: ", _/binary>>}}} -> ok after 10 -> W(I - 1) end
           end,
    ok = Warm(3000),
    R = Fun(),
    Lines = dtrace_bench:stop_lines(Port),
    {R, length([L || <<"large: ", _/binary>> = L <- Lines])}.

%% CPU ns per message of two pipelines run at once.
broker_round() ->
    Self = self(),
    busy_per(fun() ->
                     Pids = [spawn_link(fun() -> Self ! {pipeline_done, self(), pipeline(?MESSAGES)} end)
                             || _ <- [1, 2]],
                     [receive {pipeline_done, P, ok} -> ok end || P <- Pids]
             end, fun() -> ok end, 2 * ?MESSAGES).

pipeline(N) ->
    Publisher = self(),
    Routes = ets:new(routes, [set, public]),
    Store = ets:new(store, [set, public]),
    Consumer = spawn_link(fun() -> consumer(Publisher, undefined) end),
    Queue = spawn_link(fun() -> queue(Store, Consumer) end),
    Consumer ! {queue, Queue},
    Channel = spawn_link(fun() -> channel(Routes) end),
    true = ets:insert(Routes, {<<"orders">>, Queue}),
    Headers = #{content_type => <<"application/json">>, delivery_mode => 2, priority => 0,
                message_id => <<"6b2a1f0e">>, timestamp => 1700000000},
    Small = binary:copy(<<"s">>, 1024),
    Big = binary:copy(<<"B">>, 100 * 1024),
    publish(Channel, 1, N, 0, Headers, Small, Big),
    %% Gone before this process (and its tables) is.
    [begin
         unlink(P),
         Ref = monitor(process, P),
         exit(P, kill),
         receive {'DOWN', Ref, process, P, _} -> ok end
     end || P <- [Consumer, Queue, Channel]],
    ok.

%% Publishes Seq..N, at most ?WINDOW ahead of the consumer's last
%% progress report (Acked), then waits for the last.
publish(_Channel, Seq, N, Acked, _H, _S, _B) when Seq > N ->
    wait_acked(Acked, N);
publish(Channel, Seq, N, Acked, H, S, B) when Seq - Acked > ?WINDOW ->
    receive {progress, A} -> publish(Channel, Seq, N, A, H, S, B) end;
publish(Channel, Seq, N, Acked, H, S, B) ->
    Payload = case Seq rem 100 of 0 -> B; _ -> S end,
    Channel ! {publish, <<"orders">>, term_to_binary(H#{message_id => Seq}), Seq, Payload},
    publish(Channel, Seq + 1, N, Acked, H, S, B).

wait_acked(N, N) -> ok;
wait_acked(_, N) -> receive {progress, A} -> wait_acked(A, N) end.

channel(Routes) ->
    receive
        {publish, Key, Frame, Seq, P} ->
            %% The headers come framed, as AMQP's do.
            H = binary_to_term(Frame),
            _ = erlang:phash2(Key),
            [{_, Queue}] = ets:lookup(Routes, Key),
            Queue ! {deliver, Seq, H, P},
            channel(Routes)
    end.

queue(Store, Consumer) ->
    receive
        {deliver, Seq, H, P} ->
            true = ets:insert(Store, {Seq, H, P}),
            Consumer ! {msg, Seq, H, P},
            queue(Store, Consumer);
        {ack, Seq} ->
            true = ets:delete(Store, Seq),
            queue(Store, Consumer)
    end.

consumer(Publisher, Queue) ->
    receive
        {queue, Q} ->
            consumer(Publisher, Q);
        {msg, Seq, H, P} when is_binary(P) ->
            %% Framed out to the client.
            _ = iolist_size([term_to_binary(H), P]),
            Queue ! {ack, Seq},
            _ = Seq rem 100 =:= 0 andalso (Publisher ! {progress, Seq}),
            consumer(Publisher, Queue)
    end.

%% One round under dbg, until its tracer has handled the 2 * N messages
%% (call, return_from).
dbg_round() ->
    Self = self(),
    Want = 2 * ?N,
    Handler = fun(_Trace, C) when C + 1 =:= Want -> Self ! dbg_done, C + 1;
                 (_Trace, C) -> C + 1
              end,
    {ok, _} = dbg:tracer(process, {Handler, 0}),
    {ok, _} = dbg:p(Self, [call]),
    {ok, _} = dbg:tpl(?MODULE, work, 1, [{'_', [], [{return_trace}]}]),
    Ns = busy_per(fun() -> calls(?N, 0) end,
                  fun() -> receive dbg_done -> ok after 120000 -> error(dbg_tracer_late) end end, ?N),
    {ok, _} = dbg:ctpl(?MODULE, work, 1),
    ok = dbg:stop(),
    Ns.

stats(Xs) ->
    S = lists:sort(Xs),
    {lists:nth((length(S) + 1) div 2, S), hd(S), lists:last(S)}.

%% @doc The section of BENCHMARKS.md.
markdown({skip, Why}) ->
    ["\nFunction spans: skipped: ", Why, "\n"];
markdown(#{untraced := {U, Umin, Umax}, span := {S, Smin, Smax}, dbg := {D, Dmin, Dmax}, span_events := E,
           broker_off := {O, Omin, Omax}, broker_on := {L, Lmin, Lmax}, large_lines := Lines,
           cycles_before := {B, Bmin, Bmax}, cycles_after := {A, Amin, Amax}}) ->
    [io_lib:format("| ~s | ~.1f | ~.1f..~.1f | ~s |~n", [Row, M, Mi, Ma, Extra])
     || {Row, M, Mi, Ma, Extra} <-
            [{"untraced", U, Umin, Umax, ""},
             {"a function span, bpftrace counting span__end", S, Smin, Smax,
              io_lib:format("+~.1f ns a call; ~.2f span__end a call", [S - U, E])},
             {"dbg: call tracing with return_trace to a process tracer", D, Dmin, Dmax,
              io_lib:format("+~.1f ns a call", [D - U])},
             {"a broker-like message (4 sends), untraced", O, Omin, Omax, ""},
             {"a broker-like message, priv/bpftrace/large-messages.bt attached", L, Lmin, Lmax,
              io_lib:format("~.2fx; ~b large messages printed a round", [L / O, round(Lines)])},
             {"the same message in a node deployed without the library", B, Bmin, Bmax, ""},
             {io_lib:format("the same, after ~b cycles of priv/bin/dtrace-attach and --detach", [?CYCLES]),
              A, Amin, Amax, io_lib:format("~.2fx", [A / B])}]].

%% @doc The budget: a function span no dearer than dbg's call tracing.
budgets({skip, Why}) ->
    [{"function span vs dbg: skipped: " ++ Why, skipped}];
budgets(#{span := {S, _, _}, dbg := {D, _, _}, broker_off := {O, _, _}, broker_on := {L, _, _},
          cycles_before := {B, _, _}, cycles_after := {A, _, _}}) ->
    [{io_lib:format("function span per call <= dbg's call tracing with return_trace: ~.1f <= ~.1f ns", [S, D]),
      S =< D},
     {io_lib:format("large-messages.bt on a broker-like node: time a message <= 2x: ~.2fx", [L / O]),
      L =< 2 * O},
     {io_lib:format("a node after ~b attach/detach cycles: time a message <= 1.05x before: ~.2fx", [?CYCLES, A / B]),
      A =< 1.05 * B}].

%% @doc The figures the docs quote.
figures({skip, _}) ->
    [];
figures(#{untraced := {U, _, _}, span := {S, _, _}, dbg := {D, _, _}, broker_off := {O, _, _},
          broker_on := {L, _, _}, cycles_before := {B, _, _}, cycles_after := {A, _, _}}) ->
    F = fun(Fmt, Args) -> lists:flatten(io_lib:format(Fmt, Args)) end,
    [{"function_span_added", F("~b ns", [round(S - U)])}, {"function_span_dbg_added", F("~b ns", [round(D - U)])},
     {"large_messages_broker", F("~.2fx", [L / O])}, {"attach_cycles_after", F("~.2fx", [A / B])}].
