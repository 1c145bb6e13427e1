%%% Test helper: code that runs inside the traced peer: firing until a
%%% tracer listens, ready loops, counting true returns, the churn protocol,
%%% and small processes and functions for the VM-probe suites.
-module(dtrace_test_workload).

-export([fire_user_probe/1, send_large/3, wait_hibernating/1, close_port/1, named/2]).
-export([fire_until_true/1, fire_until_true/2, count_trues/2, start_ready_loop/1,
         stop_ready_loop_and_run/1, gdb_workload/1]).
-export([churn_start/1, churn_open/1, churn_close/1, churn_stop/0, churn_workers_alive/0]).
%% For the VM-probe suites.
-export([terminate_self/0, double/1, sink/0, wait_flags/2, wait_until/2, our_traced/0, our_traced/1,
         ping_load/1, span_flags/0, span_traced/0]).
%% For function spans.
-export([fspan/2, fspan_outer/0, fspan_raise/1]).
%% For the run-time provider suites.
-export([provider_holder/3, provider_handle/1]).
%% A gen_server that answers `tags' with {get_tag(), get_tag_data()}.
-behaviour(gen_server).
-export([init/1, handle_call/3, handle_cast/2]).
%% A logger handler that sends {log, Level, Text} to the pid in its config.
-export([log/2]).

gdb_workload(Fun) ->
    1 = fire_until_true(fun() -> dtrace:pn(1) end),
    Result = Fun(),
    %% false: gdb stopped listening during Fun (its lines say why).
    dtrace:pn(950) orelse erlang:error(gdb_not_listening_after_the_workload),
    Result.

%% Calls Probe() until it returns true (the tracer has raised the
%% semaphore), at most for 30 s on a quiet host
%% (dtrace_test_tracer:ceiling/1). Returns the number of true returns (1).
fire_until_true(Probe) ->
    fire_until_true(Probe, erlang:monotonic_time(millisecond) + dtrace_test_tracer:ceiling(30000)).

fire_until_true(Probe, Deadline) ->
    case Probe() of
        true -> 1;
        false ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true -> erlang:error(tracer_never_attached);
                false -> timer:sleep(10), fire_until_true(Probe, Deadline)
            end
    end.

%% Fires Ready() every 5 ms, in a process of its own, until told to stop.
start_ready_loop(Ready) ->
    Pid = spawn(fun() -> ready_loop(Ready) end),
    register(dtrace_test_ready_loop, Pid),
    ok.

ready_loop(Ready) ->
    %% A failing ready call (a port that closed under it, a race with the
    %% workload's set-up) must not end the loop: the next one may succeed.
    _ = try Ready() catch _:_ -> failed end,
    receive
        {stop, From} -> From ! {stopped, self()}
    after 5 -> ready_loop(Ready)
    end.

stop_ready_loop_and_run(Workload) ->
    Pid = whereis(dtrace_test_ready_loop),
    Pid ! {stop, self()},
    receive {stopped, Pid} -> ok end,
    Workload().

%% Calls Probe(I) for I in 1..N and returns how many calls returned true.
count_trues(Probe, N) ->
    count_trues(Probe, 1, N, 0).

count_trues(_Probe, I, N, Acc) when I > N ->
    Acc;
count_trues(Probe, I, N, Acc) ->
    count_trues(Probe, I + 1, N, case Probe(I) of true -> Acc + 1; _ -> Acc end).

-define(WINDOWS, 128).
-define(CLOSED, 1).

%% Starts N workers on all schedulers (runs in the traced peer).
churn_start(N) ->
    State = #{window => atomics:new(1, [{signed, false}]),
              started => atomics:new(?WINDOWS, [{signed, false}]),
              finished => atomics:new(?WINDOWS, [{signed, false}]),
              trues => atomics:new(?WINDOWS, [{signed, false}])},
    atomics:put(maps:get(window, State), 1, ?CLOSED),
    persistent_term:put(dtrace_churn, State),
    Pids = [spawn(fun() -> churn_worker(State, I, 0) end) || I <- lists:seq(1, N)],
    persistent_term:put(dtrace_churn_pids, Pids),
    ok.

churn_worker(#{window := W, started := S, finished := F, trues := T} = State, Id, K) ->
    receive stop -> ok
    after 0 ->
            E = atomics:get(W, 1),
            atomics:add(S, E, 1),
            R = case atomics:get(W, 1) of
                    E when K rem 2 =:= 0 -> dtrace:p(E, Id, "churn", <<"worker">>);
                    E -> dtrace:pn(3, E, Id, [<<"churn">>, $!]);
                    _ -> skipped
                end,
            R =:= true andalso E =/= ?CLOSED andalso atomics:add(T, E, 1),
            atomics:add(F, E, 1),
            %% Let the other 9,999 run too.
            K rem 8 =:= 0 andalso erlang:yield(),
            churn_worker(State, Id, K + 1)
    end.

churn_open(E) when E > ?CLOSED, E =< ?WINDOWS ->
    #{window := W} = persistent_term:get(dtrace_churn),
    atomics:put(W, 1, E).

%% Closes window E; returns the true returns counted in it once every call
%% started in it has finished.
churn_close(E) ->
    #{window := W, started := S, finished := F, trues := T} = persistent_term:get(dtrace_churn),
    %% exchange, not put: a full barrier, so the reads below cannot move
    %% before the close (a worker's add is one too).
    E = atomics:exchange(W, 1, ?CLOSED),
    wait_finished(S, F, E, erlang:monotonic_time(millisecond) + 10000),
    atomics:get(T, E).

%% A worker that died mid-call would never finish it: fail at Deadline.
wait_finished(S, F, E, Deadline) ->
    case atomics:get(S, E) =:= atomics:get(F, E) of
        true -> ok;
        false ->
            erlang:monotonic_time(millisecond) < Deadline orelse error({window_calls_unfinished, E}),
            timer:sleep(1),
            wait_finished(S, F, E, Deadline)
    end.

churn_workers_alive() ->
    length([P || P <- persistent_term:get(dtrace_churn_pids), is_process_alive(P)]).

churn_stop() ->
    [P ! stop || P <- persistent_term:get(dtrace_churn_pids)],
    ok.

log(#{level := Level, msg := Msg}, #{config := Pid}) ->
    Text = case Msg of
               {string, S} -> unicode:characters_to_list(S);
               {report, R} -> lists:flatten(io_lib:format("~p", [R]));
               {Format, Args} -> lists:flatten(io_lib:format(Format, Args))
           end,
    Pid ! {log, Level, Text}.

init([]) -> {ok, no_state}.

handle_call(tags, _From, State) ->
    {reply, {dtrace:get_tag(), dtrace:get_tag_data()}, State}.

handle_cast({hibernate, To}, State) ->
    To ! {hibernating, self()},
    {noreply, State, hibernate};
handle_cast(_Msg, State) -> {noreply, State}.

%% Exits with {terminated, self()} (OTP's dyntrace_SUITE:process/1).
terminate_self() ->
    exit({terminated, self()}).

%% A function to put call-trace patterns on.
double(X) ->
    2 * X.

%% N calls deep (body recursion), then sleeps Ms at the bottom.
fspan(0, Ms) ->
    timer:sleep(Ms),
    ok;
fspan(N, Ms) ->
    ok = fspan(N - 1, Ms),
    ok.

%% Calls fspan/2 inside: with both named, a span inside a span.
fspan_outer() ->
    ok = fspan(2, 0),
    ok.

%% Raises an exception of Class.
fspan_raise(Class) ->
    erlang:raise(Class, planted, []).

%% A process that takes any message and forgets it; `stop' ends it.
sink() ->
    receive
        stop -> ok;
        _ -> sink()
    end.

%% Waits (at most Ms) until dtrace_vm's process flags are Flags (sorted),
%% as the status map shows them after a poll; returns ok or
%% {timeout, Status}.
wait_flags(Flags, Ms) ->
    Want = lists:sort(Flags),
    Flags_ = fun() ->
                     ok = dtrace_vm:sync(),
                     #{flags := #{processes := P}} = dtrace:vm_probes(),
                     lists:sort(P)
             end,
    case wait_until(fun() -> Flags_() =:= Want end, Ms) of
        ok -> ok;
        timeout -> {timeout, dtrace:vm_probes()}
    end.

%% Load: N processes (returned) that each, forever, spawn a process, send
%% it a message and wait for its reply: spawns, exits, sends and receives.
ping_load(N) ->
    [spawn(fun Ping() ->
                   Me = self(),
                   E = spawn(fun() -> receive {P, x} -> P ! y end end),
                   E ! {Me, x},
                   receive y -> ok end,
                   Ping()
           end) || _ <- lists:seq(1, N)].

%% A fun that runs Fun in a new process registered as Name and named to
%% tracers at once (dtrace_names:sync/0: it fires dtrace_process__name for
%% each new process), and returns the process's pid (as a string) once it
%% ended.
-spec named(Name :: atom(), Fun :: fun(() -> term())) -> fun(() -> string()).
named(Name, Fun) ->
    fun() ->
            {P, R} = spawn_monitor(fun() ->
                                           true = register(Name, self()),
                                           ok = dtrace_names:sync(),
                                           Fun()
                                   end),
            receive {'DOWN', R, process, P, _} -> pid_to_list(P) end
    end.

%% Calls Cond() every 10 ms until it returns true (ok) or Ms have passed
%% (timeout).
wait_until(Cond, Ms) ->
    wait_until(Cond, erlang:monotonic_time(millisecond) + Ms, Cond()).

wait_until(_Cond, _Deadline, true) -> ok;
wait_until(Cond, Deadline, false) ->
    case erlang:monotonic_time(millisecond) > Deadline of
        true -> timeout;
        false -> timer:sleep(10), wait_until(Cond, Deadline, Cond())
    end.

%% The processes traced by dtrace's automatic mode: in its session
%% (`dtrace_auto', OTP 27+), or with its tracer {dtrace_tracer, []} and flags.
our_traced() ->
    our_traced(processes()).

%% Those of Tracees (pids and ports) traced by automatic mode.
our_traced(Tracees) ->
    case erlang:function_exported(erts_internal, trace_session_create, 3) of
        true ->
            [T || T <- Tracees, lists:keymember(dtrace_auto, 1, sessions_of(T))];
        false ->
            [T || T <- Tracees, erlang:trace_info(T, tracer) =:= {tracer, {dtrace_tracer, []}},
                  erlang:trace_info(T, flags) =/= {flags, []}]
    end.

%% The trace flags a span gave the calling process (dtrace_span_trace):
%% in the library's span session on OTP 27+, else with the tracer
%% {dtrace_tracer, span}.
span_flags() ->
    case erlang:function_exported(erts_internal, trace_session_create, 3) of
        true ->
            {flags, F} = trace:info(persistent_term:get(dtrace_span_trace:session_key()), self(), flags),
            F;
        false ->
            case erlang:trace_info(self(), tracer) of
                {tracer, {dtrace_tracer, span}} -> element(2, erlang:trace_info(self(), flags));
                _ -> []
            end
    end.

%% The processes that carry a span's trace flags now.
span_traced() ->
    case erlang:function_exported(erts_internal, trace_session_create, 3) of
        true ->
            [T || T <- processes(), lists:keymember(dtrace_span, 1, sessions_of(T))];
        false ->
            [T || T <- processes(), erlang:trace_info(T, tracer) =:= {tracer, {dtrace_tracer, span}},
                  erlang:trace_info(T, flags) =/= {flags, []}]
    end.

%% The trace sessions that trace T (none once it is gone).
sessions_of(T) ->
    case trace:session_info(T) of
        L when is_list(L) -> L;
        _ -> []
    end.

%% Defines provider Name with Probes and keeps its handle (a provider lives
%% while a handle is referenced), registered as Name; sends Parent
%% {self(), Path}. `{get, From}' hands the handle out; `{stop, From}' ends
%% the holder (the handle becomes garbage) and answers {stopped, Pid}.
provider_holder(Name, Probes, Parent) ->
    {ok, P} = dtrace_provider:new(Name, Probes),
    true = register(Name, self()),
    Parent ! {self(), binary_to_list(dtrace_provider:path(P))},
    hold(P).

hold(P) ->
    receive
        {get, From} -> From ! {handle, self(), P}, hold(P);
        {stop, From} -> From ! {stopped, self()}
    end.

%% The handle provider Name's holder keeps.
provider_handle(Name) ->
    Pid = whereis(Name),
    Pid ! {get, self()},
    receive {handle, Pid, P} -> P end.

%% Waits (at most 5 s) until P hibernates (process_info/2 wakes it).
wait_hibernating(P) ->
    ok = wait_until(
           fun() -> erlang:process_info(P, current_function) =:= {current_function, {erlang, hibernate, 3}} end,
           dtrace_test_tracer:ceiling(5000)).

%% Fires dtrace:p(I) from a frame of its own (not a tail call): the
%% function a dtrace_user__stack test finds on the stack.
fire_user_probe(I) ->
    Fired = dtrace:p(I),
    {fired, Fired}.

%% Sends To N messages Msg, yielding after each (a function with a stack
%% frame of its own): the code priv/bpftrace/large-messages.bt names.
send_large(_To, _Msg, 0) ->
    ok;
send_large(To, Msg, N) ->
    To ! Msg,
    erlang:yield(),
    send_large(To, Msg, N - 1).

%% Closes port P; a port that already exited (port_close/1 then raises
%% badarg) is fine too. (The ports here are opened with exit_status: without
%% it a port closes as soon as its program's standard output does, and
%% `cat >/dev/null' closes it at once.)
close_port(P) ->
    try port_close(P) of
        true -> ok
    catch
        error:badarg -> undefined = erlang:port_info(P), ok
    end.
