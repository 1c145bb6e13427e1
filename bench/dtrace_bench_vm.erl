%%% The VM-probe rows of `make bench` (dtrace_bench runs them): a message
%%% ping-pong untraced, with the dtrace application idle, under a process
%%% tracer, with message__send's semaphore raised by hand and under
%%% bpftrace; and per operation, the families a ping-pong does not show.
%%% The tracer tools they use (with_vm_tracer/4, wait_vm/2, the semaphores)
%%% are dtrace_bench's.
-module(dtrace_bench_vm).

-export([pingpong/0, pingpong/1, vm_rows/1, family_rows/1, paired_send/2]).

-define(PAIRED_ROUNDS, 7).

-define(PINGPONG, 500000).

%%% VM probes: a message ping-pong

%% Time per message of a ping-pong of ?PINGPONG round trips (1M messages)
%% between this process and an echo process.
pingpong() ->
    pingpong(?PINGPONG).

%% Both processes run on scheduler 1: a message's cost is then the work of
%% one core, not also the wake-ups of the other scheduler, which change
%% with how long each side takes and would make the rows that trace the
%% messages incomparable with their floors (bench/dtrace_floors.erl does
%% the same).
pingpong(N) ->
    Self = self(),
    {P, R} = spawn_opt(fun() -> Self ! {pingpong, self(), pingpong_here(N)} end, [monitor, {scheduler, 1}]),
    receive {pingpong, P, T} -> receive {'DOWN', R, process, P, _} -> T end end.

pingpong_here(N) ->
    Echo = spawn_opt(fun Loop() -> receive {From, M} -> From ! M, Loop() end end, [link, {scheduler, 1}]),
    Me = self(),
    T0 = erlang:monotonic_time(nanosecond),
    pingpong(Echo, Me, N),
    T = erlang:monotonic_time(nanosecond) - T0,
    unlink(Echo),
    exit(Echo, kill),
    T / (2 * N).

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
                 ok = dtrace_vm:sync(),
                 {Off, pingpong()}
             end || _ <- lists:seq(1, 5)],
    Base = [{"ping-pong, dtrace application not running", dtrace_bench:stats([O || {O, _} <- Pairs])},
            {"ping-pong, dtrace application running, no tracer", dtrace_bench:stats([W || {_, W} <- Pairs])}],
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
    ProcRow = {"ping-pong, Erlang process tracer on send (erlang:trace/3)", dtrace_bench:stats(Process)},
    ByHand = {"ping-pong, message__send's semaphore raised by hand (no trap)", by_hand_pingpong()},
    case CanTrace of
        ok ->
            Send = traced_pingpong("message__send",
                                   fun(#{flags := #{processes := P}}) -> lists:member(send, P) end,
                                   fun() -> pingpong(100) end),
            %% process__spawn alone: meta tracing of the spawn BIFs, no flag.
            Spawn = traced_pingpong("process__spawn", fun(#{spawn_meta := M}) -> M =:= on end,
                                    fun() -> spawn(fun() -> ok end) end),
            Base ++ [ProcRow, ByHand,
                     {"ping-pong, bpftrace on message__send (count)", Send},
                     {"ping-pong, bpftrace on process__spawn only", Spawn}];
        {skip, _} ->
            Base ++ [ProcRow, ByHand]
    end.

%% Three ping-pong runs with bpftrace counting Probe, once automatic mode
%% has done what Ready(Status) checks and bpftrace's program saw an event.
traced_pingpong(Probe, Ready, Warm) ->
    {Runs, _} = dtrace_bench:with_vm_tracer([Probe], Ready, Warm, fun() -> [pingpong() || _ <- lists:seq(1, 5)] end),
    dtrace_bench:stats(Runs).

%% Three ping-pong runs with message__send's semaphore raised by hand: the
%% flags set, the library's trace/5 runs and fires the site's nop, no trap.
by_hand_pingpong() ->
    {Mem, Addr} = dtrace_bench:raise_semaphore(dtrace_bench:nif(), "message__send"),
    ok = dtrace_bench:wait_vm(fun(#{flags := #{processes := P}}) -> lists:member(send, P) end, 500),
    Runs = [pingpong() || _ <- lists:seq(1, 5)],
    dtrace_bench:lower_semaphore(Mem, Addr),
    ok = dtrace_bench:wait_vm(fun(#{flags := #{processes := P}}) -> P =:= [] end, 500),
    dtrace_bench:stats(Runs).

%%% message__send and message_send against their floors, round by round

%% @doc The library's message probe against its floor in the same rounds
%% (issue #52: measured in phases minutes apart, their difference, the own
%% work, moved from 66 to 252 ns over five runs of one machine): each round
%% runs the ping-pong with the application running and no tracer, the
%% floor's pair (dtrace_floors:tracer_sink_pair/2: untraced, then traced
%% by the C tracer firing the bare site under bpftrace, or recording the C
%% event), and the library's (bpftrace counting message__send, or a
%% session on org_erlang_dyntrace:message_send, automatic mode setting the
%% flags), each tracer attached for its run only. Returns #{library
%% (traced - untraced), floor (traced - untraced), own (their difference,
%% per round): stats(), rounds} ns per message, or a skip.
paired_send({skip, Why}, _Sink) ->
    {skip, Why};
paired_send({ok, Paths}, Sink) ->
    Can = case Sink of
              sdt -> dtrace_bench:can_trace();
              lttng -> dtrace_bench:can_lttng()
          end,
    case Can of
        ok ->
            io:format("~n~s against its floor, round by round (~b rounds):~n",
                      [case Sink of sdt -> "message__send under bpftrace"; lttng -> "message_send into LTTng" end,
                       ?PAIRED_ROUNDS]),
            {ok, _} = application:ensure_all_started(dtrace),
            Rounds = [paired_round(Paths, Sink) || _ <- lists:seq(1, ?PAIRED_ROUNDS)],
            case [R || {skip, _} = R <- Rounds] of
                [Skip | _] -> Skip;
                [] ->
                    Lib = [L - U || {U, _, _, L} <- Rounds],
                    Floor = [FT - FU || {_, FU, FT, _} <- Rounds],
                    Own = [L - F || {L, F} <- lists:zip(Lib, Floor)],
                    [io:format("  library ~7.1f, floor ~7.1f, own ~7.1f ns~n", [L, F, O])
                     || {L, F, O} <- lists:zip3(Lib, Floor, Own)],
                    #{library => dtrace_bench:stats(Lib), floor => dtrace_bench:stats(Floor),
                      own => dtrace_bench:stats(Own), rounds => ?PAIRED_ROUNDS}
            end;
        Skip ->
            Skip
    end.

paired_round(Paths, Sink) ->
    Untraced = pingpong(),
    case dtrace_floors:tracer_sink_pair(Paths, Sink) of
        {skip, _} = Skip -> Skip;
        {FloorUntraced, FloorTraced} -> {Untraced, FloorUntraced, FloorTraced, library_traced(Sink)}
    end.

%% One ping-pong with the library's message probe listened to.
library_traced(sdt) ->
    {T, _} = dtrace_bench:with_vm_tracer(["message__send"],
                                         fun(#{flags := #{processes := P}}) -> lists:member(send, P) end,
                                         fun() -> pingpong(100) end, fun() -> pingpong() end),
    ok = dtrace_bench:wait_vm(fun(#{flags := #{processes := P}}) -> P =:= [] end, 500),
    T;
library_traced(lttng) ->
    Dir = dtrace_bench:lttng_start(["org_erlang_dyntrace:message_send"]),
    try
        ok = dtrace_bench:wait_vm(fun(#{flags := #{processes := P}}) -> lists:member(send, P) end, 500),
        pingpong()
    after
        _ = dtrace_bench:lttng_stop(Dir),
        ok = dtrace_bench:wait_vm(fun(#{flags := #{processes := P}}) -> P =:= [] end, 500)
    end.

%%% VM probes by family

%% Per operation, untraced and with bpftrace counting a family's probes,
%% for the families a ping-pong does not show: running (scheduling of the
%% ping-pong), procs (spawn and exit), function probes (calls of
%% dtrace_bench:work/1) and garbage collection (forced major collections).
%% [{Name, Untraced, Traced, EventsPerOperation}].
family_rows({skip, Why}) ->
    io:format("~nVM probe families skipped: ~s~n", [Why]),
    [];
family_rows(ok) ->
    io:format("~nVM probes by family (ns per operation, untraced vs bpftrace counting):~n"),
    {ok, _} = application:ensure_all_started(dtrace),
    Spawn = fun(N) ->
                    lists:foreach(fun(_) ->
                                          {P, R} = spawn_monitor(fun() -> ok end),
                                          receive {'DOWN', R, process, P, _} -> ok end
                                  end, lists:seq(1, N))
            end,
    Calls = fun(N) -> calls(N, 0) end,
    Port = open_port({spawn, "cat >/dev/null"}, [binary, exit_status]),
    PortCommands = fun(N) -> _ = [port_command(Port, <<"x">>) || _ <- lists:seq(1, N)], ok end,
    Deep = fun(N) -> deep(5, N) end,
    %% In a fresh process: its heap is small (the bench process holds the
    %% 1 MB rows' terms).
    Gcs = fun(N) ->
                  Self = self(),
                  {P, R} = spawn_monitor(fun() ->
                                                 T0 = erlang:monotonic_time(nanosecond),
                                                 gcs(N),
                                                 Self ! {gc_ns, self(), erlang:monotonic_time(nanosecond) - T0}
                                         end),
                  receive {gc_ns, P, Ns} -> receive {'DOWN', R, _, _, _} -> Ns end end
          end,
    Families =
        [{"running: ping-pong, per message (process__scheduled, process__unscheduled)",
          ["process__scheduled", "process__unscheduled"],
          fun(#{flags := #{processes := P}}) -> lists:member(running, P) end,
          fun() -> pingpong() end, 2 * ?PINGPONG, fun() -> pingpong() end},
         {"procs: spawn and exit a process, per process (process__spawn, process__exit)",
          ["process__spawn", "process__exit"],
          %% process__spawn with process__exit comes from `procs' (no meta patterns).
          fun(#{flags := #{processes := P}}) -> lists:member(procs, P) end,
          fun() -> per_op(fun() -> Spawn(100000) end, 100000) end, 100000, fun() -> Spawn(100) end},
         {"function: an external call of dtrace_bench:work/1, per call (global__function__entry, function__return)",
          ["global__function__entry", "function__return"],
          fun(_) -> erlang:trace_info({dtrace_bench, work, 1}, traced) =:= {traced, global} end,
          fun() -> per_op(fun() -> Calls(1000000) end, 1000000) end, 1000000, fun() -> Calls(100) end},
         {"gc: a forced major collection of a small heap, per collection (gc_major__start, gc_major__end)",
          ["gc_major__start", "gc_major__end"],
          fun(#{flags := #{processes := P}}) -> lists:member(garbage_collection, P) end,
          fun() -> Gcs(200000) / 200000 end, 200000, fun() -> Gcs(10) end},
         %% The heap probes: the GC events' callbacks, and a probe only when
         %% the size changed (here: never, the heap stays small).
         {"heap: a forced major collection of a small heap, per collection (process__heap_grow, process__heap_shrink)",
          ["process__heap_grow", "process__heap_shrink"],
          fun(#{flags := #{processes := P}}) -> lists:member(garbage_collection, P) end,
          fun() -> Gcs(200000) / 200000 end, 200000,
          fun() -> _ = [spawn(fun() -> _ = lists:seq(1, 10000), erlang:garbage_collect() end) || _ <- [1, 2]] end},
         {"ports: a command to a port, per command (port__command, driver__output)",
          ["port__command", "driver__output"],
          fun(#{flags := #{ports := O}}) -> lists:member('receive', O) end,
          fun() -> per_op(fun() -> PortCommands(100000) end, 100000) end, 100000, fun() -> PortCommands(10) end},
         {"send code: ping-pong, per message (dtrace_message__send_code: a process dump per send)",
          ["dtrace_message__send_code"],
          fun(#{send_code := Code}) -> Code =:= on end,
          fun() -> pingpong() end, 2 * ?PINGPONG, fun() -> pingpong() end},
         {"user stack: dtrace:p/1 from a process 5 calls deep, per call (user_trace__i4s4, dtrace_user__stack)",
          ["user_trace__i4s4", "dtrace_user__stack"],
          fun(_) -> true end,
          fun() -> per_op(fun() -> Deep(100000) end, 100000) end, 100000, fun() -> Deep(10) end}],
    ok = dtrace:function_probes([{dtrace_bench, work, 1}]),
    Rows = [begin
                Untraced = dtrace_bench:stats([Run() || _ <- lists:seq(1, 5)]),
                {Traced, Events} = dtrace_bench:with_vm_tracer(Probes, Ready, Warm,
                                                               fun() -> [Run() || _ <- lists:seq(1, 5)] end),
                Row = {Name, Untraced, dtrace_bench:stats(Traced), Events / (5 * PerRun)},
                io:format("  ~-100s ~8.1f -> ~8.1f ns (~.1f events each)~n",
                          [Name, element(1, Untraced), element(1, dtrace_bench:stats(Traced)), element(4, Row)]),
                Row
            end || {Name, Probes, Ready, Run, PerRun, Warm} <- Families],
    ok = dtrace:function_probes([]),
    try port_close(Port) catch error:badarg -> true end,
    Rows.

%% dtrace:p/1 N times, Depth calls down the stack.
deep(0, N) -> _ = [dtrace:p(I) || I <- lists:seq(1, N)], ok;
deep(Depth, N) -> ok = deep(Depth - 1, N), ok.

gcs(0) -> ok;
gcs(N) -> true = erlang:garbage_collect(), gcs(N - 1).

calls(0, Acc) -> Acc;
calls(N, Acc) -> calls(N - 1, dtrace_bench:work(Acc)).

%% ns per operation of Run() (Ops operations).
per_op(Run, Ops) ->
    T0 = erlang:monotonic_time(nanosecond),
    Run(),
    (erlang:monotonic_time(nanosecond) - T0) / Ops.
