%%% @doc The VM probes' automatic mode: trace flags only while a tracer
%%% listens.
%%%
%%% The VM's own probes (`process__spawn', `message__send', ...; the feed
%%% table of docs/reference.md) are fired from erl_tracer events by the
%%% NIF callbacks of {@link dtrace_tracer}. This process, started by the `dtrace'
%%% application, polls the probes' semaphores and LTTng events (every
%%% `vm_probes_poll_ms' milliseconds, default 100) and sets on all
%%% processes and ports exactly the trace flags whose probes have a
%%% listener (`dtrace_nif:vm_listening/0', from the feed table); when the
%%% listeners leave, it removes them. A node nobody traces has no trace
%%% flag set by dtrace.
%%%
%%% == How it traces ==
%%% OTP 27 and later: in trace sessions of its own, `dtrace_auto' (tracer
%%% `{dtrace_tracer, auto}': flags and call-trace patterns) and
%%% `dtrace_spawn_meta' (tracer `{dtrace_tracer, spawn_meta}': meta patterns on
%%% the spawn BIFs), which the VM destroys with this process, and with them
%%% every flag and pattern they set. Nothing another session set is read
%%% or changed. OTP 25 and 26: as the one tracer a process may have,
%%% `{dtrace_tracer, []}', the tracer users set by hand (so a `{tracer,
%%% dtrace_tracer, []}' of theirs adds to automatic mode's flags); processes another
%%% tracer traces are left alone and counted (`skipped' in {@link
%%% dtrace:vm_probes/0}), and the default tracer of new processes is only
%%% taken when free. What this means for an operator's own tracing, on
%%% each OTP: docs/vm-probes.md, "Operators' tracing".
%%%
%%% == Spawns ==
%%% `process__spawn' alone needs no trace flag: while it is the only
%%% probe of processes with a listener, this process meta-traces the three
%%% BIFs every local spawn goes through (`erlang:spawn/3', `spawn_link/3',
%%% `spawn_opt/4'), so a node traced for spawns only pays on each spawn,
%%% not on every scheduling of every process. It then fires when the BIF
%%% returns, which may be after the new process first ran. With other
%%% process probes listened to, it comes from the `procs' flag, in order
%%% with them. Function probes follow the patterns given to {@link
%%% dtrace:function_probes/1}: the call-trace patterns are set only while a
%%% tracer listens to a function probe.
%%% @end
-module(dtrace_vm).
-behaviour(gen_server).

-export([start_link/0, status/0, set_mode/1, function_probes/1, function_spans/1, traced/0, sync/0]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2, terminate/2, format_status/1]).

%% The tracer of automatic mode without sessions (see the module doc).
-define(LEGACY_TRACER, {dtrace_tracer, []}).
%% process__exit_signal: meta tracing of erlang:exit/2, in a session of its
%% own (OTP 27+; dtrace_vm_sessions).
-define(EXIT_META, {dtrace_tracer, exit_meta}).
-define(EXIT_BIF, {erlang, exit, 2}).
-define(MS, [{'_', [], [{exception_trace}]}]).
%% process__spawn in automatic mode: meta tracing of the BIFs every local
%% spawn goes through (spawn/1, spawn_monitor/1, proc_lib, ... call them),
%% which sets no trace flag on any process.
-define(SPAWN_BIFS, [{erlang, spawn, 3}, {erlang, spawn_link, 3}, {erlang, spawn_opt, 4}]).
-define(META, {dtrace_tracer, spawn_meta}).
%% The most ports whose names are read when ports start being traced (the
%% library keeps at most 1024).
-define(PORT_NAMES, 1024).
-define(META_MS, [{'_', [], [{return_trace}]}]).
%% dtrace_message__send_code: the send match spec whose result is the
%% sender's process dump (apply_send_code/2).
-define(SEND_CODE_MS, [{'_', [], [{message, {process_dump}}]}]).

%% OTP 25's spec of erlang:trace_info/2 says a tracer module comes back as
%% {tracer, Module, State}; the VM returns {tracer, {Module, State}} (and
%% {meta, {Module, State}}), which is what these functions match.
-dialyzer({no_match, [apply_meta/2, clear_meta/1, apply_exit_meta/2, clear_exit_meta/1, legacy_counts/0, set_new/4, ours/1]}).
%% The trace module exists from OTP 27 on; where it does not, these
%% functions are never called (tracing =:= legacy). OTP 25's spec of
%% erlang:trace_pattern/3 leaves out `send' (send_pattern/1), so dialyzer
%% takes the send match spec's functions for dead code there.
-dialyzer({nowarn_function, [sessions/0, apply_send_code/2, send_pattern/1, clear_all/0, legacy_send_taken/1,
                             other_send_tracer/1, set/4, set_new/4,
                             apply_meta/2, clear_meta/1, set_pattern/4, session_counts/1, apply_exit_meta/2,
                             clear_exit_meta/1]}).

-type flags() :: {Processes :: [atom()], Ports :: [atom()]}.
-type pattern() :: {module(), atom(), arity() | '_', global | local}.
%% How automatic mode traces: sessions of its own (OTP 27+), holding the
%% sessions' handles (never logged or sent: a copy would keep a session
%% alive after this process), or the legacy session.
-type tracing() :: {session, Auto :: term(), Meta :: term()} | legacy.

-record(s, {mode :: auto | manual,
            poll :: pos_integer(),
            tracing :: tracing(),
            flags = {[], []} :: flags(),
            patterns = [] :: [pattern()],
            spans = [] :: [mfa()],
            %% The patterns set now: function probes' and function spans'.
            active = {[], []} :: {[pattern()], [mfa()]},
            new = free :: free | ours | {taken, term()},
            spawn_meta = off :: off | on | {taken, term()},
            exit_meta = off :: off | on | {taken, term()},
            node_monitor = off :: off | on,
            send_code = off :: off | on | {taken, term()},
            system_monitor = off :: off | on | {taken, pid() | port()},
            %% Where two sessions tracing a process's GC crash the VM
            %% (dtrace_gc_guard): true, and GC's state.
            gc_guard = false :: boolean(),
            gc = off :: dtrace_gc_guard:auto()}).

%% @private
start_link() ->
    gen_server:start_link({local, ?MODULE}, ?MODULE, [], []).

%% @private Behind dtrace's vm_probes/0,1, function_probes/1, function_spans/1
%% (documented there): `{error, not_started}' while this process is not running.
-spec status() -> dtrace:vm_status() | {error, not_started}.
status() ->
    call(status).

%% @private
-spec set_mode(Mode :: auto | manual) -> ok | {error, not_started}.
set_mode(Mode) ->
    call({mode, Mode}).

%% @private
-spec function_probes(Patterns :: term()) -> ok | {error, term()}.
function_probes(Patterns) ->
    case normalize(Patterns, []) of
        {ok, Normal} -> call({patterns, Normal});
        {error, _} = Error -> Error
    end.

call(Request) ->
    try gen_server:call(?MODULE, Request)
    catch exit:{noproc, _} -> {error, not_started}
    end.

%% The most functions function_spans/1 takes (the NIF keeps as many).
-define(MAX_SPAN_FUNCTIONS, 64).

%% @private
-spec function_spans(Functions :: term()) -> ok | {error, term()}.
function_spans(Functions) ->
    case span_functions(Functions) of
        {ok, Normal} -> call({spans, Normal});
        {error, _} = Error -> Error
    end.

span_functions(L) when is_list(L), length(L) > ?MAX_SPAN_FUNCTIONS ->
    {error, {too_many, length(L)}};
span_functions(L) when is_list(L), length(L) >= 0 -> % a proper list
    case [F || F <- L, not is_mfa(F)] of
        [] -> {ok, lists:usort(L)};
        [Bad | _] -> {error, {bad_function, Bad}}
    end;
span_functions(Other) ->
    {error, {not_a_list, Other}}.

is_mfa({M, F, A}) -> is_atom(M) andalso M =/= '_' andalso is_atom(F) andalso F =/= '_'
                         andalso is_integer(A) andalso A >= 0 andalso A =< 255;
is_mfa(_) -> false.

%% @private Polls now, and returns once the flags and patterns follow the
%% listeners as they are at this moment (the poll that runs every
%% `vm_probes_poll_ms' does the same): for tests and tools that must
%% know, without waiting for the next poll.
-spec sync() -> ok.
sync() ->
    gen_server:call(?MODULE, sync).

%% @private The processes and ports automatic mode traces now (for tests
%% and the status): those with its flags, in its session or under its
%% tracer.
-spec traced() -> [pid() | port()].
traced() ->
    gen_server:call(?MODULE, traced).

%%%===================================================================

%% @private
init([]) ->
    process_flag(trap_exit, true),
    Mode = case application:get_env(dtrace, vm_probes, auto) of
               manual -> manual;
               _ -> auto
           end,
    Poll = case application:get_env(dtrace, vm_probes_poll_ms, 100) of
               P when is_integer(P), P >= 1 -> P;
               _ -> 100
           end,
    %% Patterns given to function_probes/1 (kept in the application
    %% environment, so that they outlive a restart of this process; they
    %% may also be set in sys.config).
    Patterns = case function_probes_env() of
                   {ok, Env} -> Env;
                   {error, Why} ->
                       logger:warning("dtrace: function_probes in the application environment "
                                      "ignored: ~p", [Why]),
                       []
               end,
    %% What an earlier instance of this process left (it crashed or was
    %% killed): nothing of ours stays set unless a tracer listens.
    %% The tracer module must be loaded (with its NIFs) before a session
    %% or a trace flag can name it.
    _ = code:ensure_loaded(dtrace_tracer),
    %% The GC guard's table before the span session exists.
    Guard = dtrace_gc_guard:affected() andalso dtrace_gc_guard:start() =:= ok,
    Tracing = case sessions() andalso dtrace_vm_sessions:create() of
                  {session, _, _} = T ->
                      T;
                  false ->
                      clear_all(),
                      legacy
              end,
    Spans = case span_functions(application:get_env(dtrace, function_spans, [])) of
                {ok, Sp} -> Sp;
                {error, SpWhy} ->
                    logger:warning("dtrace: function_spans in the application environment "
                                   "ignored: ~p", [SpWhy]),
                    []
            end,
    self() ! poll,
    {ok, #s{mode = Mode, poll = Poll, patterns = Patterns, spans = Spans, tracing = Tracing, gc_guard = Guard}}.

function_probes_env() ->
    normalize(application:get_env(dtrace, function_probes, []), []).

%% Does this VM have trace sessions (OTP 27+)? erts_internal's BIF, which
%% a module of the application's cannot shadow (as one named `trace'
%% could).
sessions() ->
    erlang:function_exported(erts_internal, trace_session_create, 3).

%% @private
handle_call(status, _From, S) ->
    {reply, status(S), S};
handle_call(sync, _From, S) ->
    {reply, ok, poll(S)};
handle_call(traced, _From, S) ->
    {reply, ours(S#s.tracing), S};
handle_call({mode, Mode}, _From, S) when Mode =:= auto; Mode =:= manual ->
    ok = application:set_env(dtrace, vm_probes, Mode),
    S1 = case Mode of
             manual -> apply_meta(false, clear_flags(S));
             auto -> S
         end,
    {reply, ok, poll(S1#s{mode = Mode})};
handle_call({patterns, Patterns}, _From, S) ->
    ok = application:set_env(dtrace, function_probes, [external(P) || P <- Patterns]),
    {reply, ok, poll(S#s{patterns = Patterns})};
handle_call({spans, Spans}, _From, S) ->
    ok = application:set_env(dtrace, function_spans, Spans),
    {reply, ok, poll(S#s{spans = Spans})};
handle_call(_Other, _From, S) ->
    {reply, {error, badarg}, S}.

%% @private
handle_cast(_Msg, S) ->
    {noreply, S}.

%% @private
handle_info(poll, S) ->
    S1 = try poll(S)
         catch Class:Reason:Stack ->
                 logger:warning("dtrace: VM probe poll failed: ~p:~p ~p", [Class, Reason, Stack]),
                 S
         end,
    erlang:send_after(S1#s.poll, self(), poll),
    {noreply, S1};
handle_info({NodeUpDown, Node, Info}, #s{node_monitor = on} = S)
  when NodeUpDown =:= nodeup; NodeUpDown =:= nodedown ->
    Type = proplists:get_value(node_type, Info, visible),
    Reason = proplists:get_value(nodedown_reason, Info, []),
    _ = dtrace_nif:vm_monitor_event(node_monitor, NodeUpDown, Node, {node(), Type, Reason}),
    {noreply, S};
handle_info({monitor, Pid, busy_port, Port}, #s{system_monitor = on} = S) ->
    _ = dtrace_nif:vm_monitor_event(system_monitor, busy_port, Pid, Port),
    {noreply, S};
handle_info({monitor, Pid, busy_dist_port, Port}, #s{system_monitor = on} = S) ->
    Remote = case lists:keyfind(Port, 2, erlang:system_info(dist_ctrl)) of
                 {Node, _} -> Node;
                 false -> undefined
             end,
    _ = dtrace_nif:vm_monitor_event(system_monitor, busy_dist_port, Pid, {Port, Remote, node()}),
    {noreply, S};
handle_info(_Msg, S) ->
    {noreply, S}.

%% @private Stopping (the application stops, or the process fails)
%% leaves no flag and no trace pattern behind: the sessions are destroyed
%% (they would be anyway, with this process); without sessions the flags
%% and patterns are removed.
terminate(Reason, #s{system_monitor = on} = S) ->
    terminate(Reason, apply_system_monitor(false, S));
terminate(Reason, #s{send_code = on, tracing = legacy} = S) ->
    terminate(Reason, apply_send_code(false, S));
terminate(_Reason, #s{tracing = {session, _, _} = Tracing}) ->
    dtrace_vm_sessions:destroy(Tracing);
terminate(_Reason, S) ->
    _ = quietly(fun() -> clear_flags(S) end),
    _ = quietly(fun() -> clear_patterns(S) end),
    clear_all().

%% @private Crash reports and sys:get_state/1 show the state without the
%% sessions' handles: a copy of one elsewhere would keep its session, and
%% its flags, alive after this process dies.
format_status(#{state := #s{tracing = {session, _, _}} = S} = Status) ->
    Status#{state := S#s{tracing = {session, hidden, hidden}}};
format_status(Status) ->
    Status.

%%%===================================================================
%%% Polling

poll(S) ->
    _ = dtrace_nif:vm_mode(S#s.mode =:= manual),
    {ProcFlags0, PortFlags, _Listening, Sources} = dtrace_nif:vm_listening(),
    Spawn = [spawn || lists:member(spawn, Sources)],
    CallsListened = lists:member(call, ProcFlags0),
    %% Function spans: their patterns while a span probe listens, the call
    %% flags for them, and while a span__vm_* probe listens too its flags
    %% on every process (the NIF fires those only for a process inside a
    %% function span: no code runs at a span's begin to set them).
    Spans = case S#s.spans =/= [] andalso dtrace_nif:span_enabled() =/= false of
                true -> S#s.spans;
                false -> []
            end,
    SpanFlags = case Spans of
                    [] -> [];
                    _ -> [call, arity | dtrace_nif:span_vm_flags()]
                end,
    S1 = case S#s.mode of
             auto ->
                 ProcFlags1 = lists:usort(SpanFlags ++ case S#s.patterns of
                                                          [] -> ProcFlags0 -- [call, arity];
                                                          _ -> ProcFlags0
                                                      end),
                 %% process__spawn: from the procs flag when processes are
                 %% traced anyway (events in order with the others),
                 %% otherwise from meta tracing, which costs nothing to
                 %% processes that do not spawn.
                 {ProcFlags, Meta} =
                     case {Spawn, ProcFlags1} of
                         {[], _} -> {ProcFlags1, false};
                         {_, []} -> {[], true};
                         {_, _} -> {lists:usort([procs | ProcFlags1]), false}
                     end,
                 S0 = apply_meta(Meta, apply_flags({ProcFlags, PortFlags}, S)),
                 SExit = apply_exit_meta(lists:member(exit_meta, Sources), S0),
                 S2 = apply_node_monitor(lists:member(node_monitor, Sources), SExit),
                 apply_send_code(lists:member(send_code, Sources), apply_system_monitor(lists:member(system_monitor, Sources), S2));
             manual ->
                 apply_send_code(false, apply_system_monitor(false, apply_node_monitor(false, apply_exit_meta(false, apply_meta(false, S)))))
         end,
    Probes = case CallsListened of
                 true -> S1#s.patterns;
                 false -> []
             end,
    apply_patterns({Probes, Spans}, apply_gc(S1)).

%% garbage_collection where two sessions tracing a process's GC crash the
%% VM (OTP-20385): one process at a time, by dtrace_gc_guard, never on a
%% process another session traces for GC (apply_flags/2 leaves it out).
apply_gc(#s{gc_guard = false} = S) ->
    S;
apply_gc(#s{flags = {P, _}, gc = Gc, tracing = T} = S) ->
    S#s{gc = dtrace_gc_guard:auto(lists:member(garbage_collection, P), Gc, T)}.

%% process__exit_signal: a meta pattern on erlang:exit/2 (the tracer
%% {dtrace_tracer, exit_meta}: no trace flag on any process), only while it
%% listens; in a session, on exit/3 (OTP 28) and exit_signal/2,3 (OTP 29)
%% too, where the VM has them. Without sessions, another tracer's meta
%% pattern on it is left alone ({taken, Tracer}).
apply_exit_meta(true, #s{exit_meta = on} = S) ->
    S;
apply_exit_meta(true, #s{tracing = {session, _, _}} = S) ->
    case dtrace_vm_sessions:exit_meta() of
        undefined -> S;
        Session -> _ = [trace:function(Session, B, [{'_', [], []}], [meta]) || B <- exit_bifs()],
                   S#s{exit_meta = on}
    end;
apply_exit_meta(true, #s{tracing = legacy} = S) ->
    case erlang:trace_info(?EXIT_BIF, meta) of
        {meta, T} when T =:= false; T =:= ?EXIT_META ->
            _ = erlang:trace_pattern(?EXIT_BIF, [{'_', [], []}], [{meta, dtrace_tracer, exit_meta}]),
            S#s{exit_meta = on};
        {meta, Other} ->
            S#s{exit_meta = {taken, Other}}
    end;
apply_exit_meta(false, #s{exit_meta = on, tracing = Tracing} = S) ->
    clear_exit_meta(Tracing),
    S#s{exit_meta = off};
apply_exit_meta(false, S) ->
    S#s{exit_meta = off}.

clear_exit_meta({session, _, _}) ->
    case dtrace_vm_sessions:exit_meta() of
        undefined -> ok;
        Session -> _ = [trace:function(Session, B, false, [meta]) || B <- exit_bifs()], ok
    end;
clear_exit_meta(legacy) ->
    case erlang:trace_info(?EXIT_BIF, meta) of
        {meta, ?EXIT_META} -> _ = erlang:trace_pattern(?EXIT_BIF, false, [meta]), ok;
        _ -> ok
    end.

%% The BIFs that send an exit signal to a process, of those the VM has
%% (OTP 25 has an internal erlang:exit_signal/2: the public pair comes
%% with exit_signal/3, in OTP 29).
exit_bifs() ->
    Signal = erlang:function_exported(erlang, exit_signal, 3),
    [?EXIT_BIF | [{erlang, F, A} || {F, A, Has} <- [{exit, 3, erlang:function_exported(erlang, exit, 3)},
                                                    {exit_signal, 2, Signal}, {exit_signal, 3, Signal}],
                                    Has]].

%% dist__monitor: a net_kernel:monitor_nodes/2 subscription of this
%% process (any number of subscribers may be; nodes of every type, with
%% the reasons of nodedowns), only while its probe listens.
apply_node_monitor(true, #s{node_monitor = off} = S) ->
    case quietly(fun() -> net_kernel:monitor_nodes(true, [{node_type, all}, nodedown_reason]) end) of
        ok -> S#s{node_monitor = on};
        _ -> S
    end;
apply_node_monitor(false, #s{node_monitor = on} = S) ->
    _ = quietly(fun() -> net_kernel:monitor_nodes(false, [{node_type, all}, nodedown_reason]) end),
    S#s{node_monitor = off};
apply_node_monitor(_, S) ->
    S.

%% dtrace_message__send_code: the send match spec whose result is the
%% sender's process dump (the only send match-spec action that says which
%% code sent: OTP's match_spec guide allows caller, caller_line and
%% current_stacktrace in call tracing only). In our session (OTP 27+) it
%% changes nothing of anyone else's. Without sessions the send match spec
%% is the node's: set only while no other tracer traces sends (no process,
%% nor new processes, has the send flag under another tracer) and no other
%% send match spec is set, checked at each poll; when that changes it is
%% removed ({taken, Why}: until then, up to one poll, another tracer's send
%% messages carry the dump as an extra element).
apply_send_code(true, #s{send_code = on, tracing = {session, _, _}} = S) ->
    S;
apply_send_code(true, #s{tracing = {session, Auto, _}} = S) ->
    _ = trace:send(Auto, ?SEND_CODE_MS, []),
    S#s{send_code = on};
apply_send_code(true, #s{tracing = legacy, send_code = Was} = S) ->
    case {legacy_send_taken(Was), Was} of
        {false, on} -> S;
        {false, _} -> _ = send_pattern(?SEND_CODE_MS), S#s{send_code = on};
        {Why, on} -> _ = send_pattern(true), S#s{send_code = {taken, Why}};
        {Why, _} -> S#s{send_code = {taken, Why}}
    end;
apply_send_code(false, #s{send_code = on, tracing = {session, Auto, _}} = S) ->
    _ = trace:send(Auto, true, []),
    S#s{send_code = off};
apply_send_code(false, #s{send_code = on, tracing = legacy} = S) ->
    case erlang:trace_info(send, match_spec) of
        {match_spec, ?SEND_CODE_MS} -> _ = send_pattern(true);
        _ -> ok
    end,
    S#s{send_code = off};
apply_send_code(false, S) ->
    S#s{send_code = off}.

%% The node's send match spec (OTP 25's spec of erlang:trace_pattern/3
%% leaves out `send', which the function takes since OTP 19).
send_pattern(MS) ->
    erlang:trace_pattern(send, MS, []).

%% Without sessions: why the node's send match spec is not ours to set
%% (another's match spec, or another tracer of sends), or false.
legacy_send_taken(Was) ->
    Ours = case Was of on -> ?SEND_CODE_MS; _ -> true end,
    case erlang:trace_info(send, match_spec) of
        {match_spec, MS} when MS =/= Ours, MS =/= true, MS =/= [] ->
            {send_match_spec, MS};
        _ ->
            case [T || T <- [new_processes | processes()], other_send_tracer(T)] of
                [] -> false;
                [T | _] -> {send_traced, T}
            end
    end.

other_send_tracer(T) ->
    case erlang:trace_info(T, flags) of
        {flags, Flags} ->
            lists:member(send, Flags) andalso erlang:trace_info(T, tracer) =/= {tracer, ?LEGACY_TRACER};
        _ ->
            false
    end.

%% port__busy, dist__port_busy: the node's system monitor, which has one
%% owner (erlang:system_monitor/2; OTP 27 has no per-session one). Taken
%% only while one of the probes listens and erlang:system_monitor() is
%% undefined; an operator's monitor is never replaced: if one was set
%% between the check and the call, it is put back at once (the returned
%% setting), and the probes stay unfed ({taken, Owner}) while another
%% process holds it. Released the same way: if what the release returns
%% is not ours, it is put back.
-define(SYSTEM_MONITOR, [busy_port, busy_dist_port]).
apply_system_monitor(true, #s{system_monitor = on} = S) ->
    case erlang:system_monitor() of
        {Me, _} when Me =:= self() -> S;
        undefined -> S#s{system_monitor = off};
        {Other, _} -> S#s{system_monitor = {taken, Other}}
    end;
apply_system_monitor(true, S) ->
    case erlang:system_monitor() of
        undefined ->
            case erlang:system_monitor(self(), ?SYSTEM_MONITOR) of
                undefined ->
                    S#s{system_monitor = on};
                {Other, _} = Theirs ->
                    _ = erlang:system_monitor(Theirs),
                    S#s{system_monitor = {taken, Other}}
            end;
        {Other, _} ->
            S#s{system_monitor = {taken, Other}}
    end;
apply_system_monitor(false, #s{system_monitor = on} = S) ->
    _ = case erlang:system_monitor() of
        {Me, _} when Me =:= self() ->
            case erlang:system_monitor(undefined) of
                {Me, _} -> ok;
                undefined -> ok;
                Theirs -> _ = erlang:system_monitor(Theirs)
            end;
        _ ->
            ok
    end,
    S#s{system_monitor = off};
apply_system_monitor(false, #s{system_monitor = {taken, _}} = S) ->
    S#s{system_monitor = off};
apply_system_monitor(false, S) ->
    S.

%% Sets (true) or removes (false) the meta-trace patterns that feed
%% process__spawn. Without sessions, another tracer's meta pattern on a
%% spawn BIF is left alone (and reported).
apply_meta(true, #s{spawn_meta = off, tracing = {session, _, Meta}} = S) ->
    _ = [trace:function(Meta, MFA, ?META_MS, [meta]) || MFA <- ?SPAWN_BIFS],
    S#s{spawn_meta = on};
apply_meta(true, #s{spawn_meta = off, tracing = legacy} = S) ->
    case [T || MFA <- ?SPAWN_BIFS, {meta, T} <- [erlang:trace_info(MFA, meta)], T =/= false, T =/= ?META] of
        [] ->
            _ = [erlang:trace_pattern(MFA, ?META_MS, [{meta, dtrace_tracer, spawn_meta}]) || MFA <- ?SPAWN_BIFS],
            S#s{spawn_meta = on};
        [Other | _] ->
            S#s{spawn_meta = {taken, Other}}
    end;
apply_meta(false, #s{spawn_meta = on, tracing = Tracing} = S) ->
    clear_meta(Tracing),
    S#s{spawn_meta = off};
apply_meta(false, #s{spawn_meta = {taken, _}} = S) ->
    S#s{spawn_meta = off};
apply_meta(_, S) ->
    S.

%% Removes our meta patterns from the spawn BIFs (not another tracer's).
clear_meta({session, _, Meta}) ->
    _ = [trace:function(Meta, MFA, false, [meta]) || MFA <- ?SPAWN_BIFS],
    ok;
clear_meta(legacy) ->
    _ = [erlang:trace_pattern(MFA, false, [meta])
         || MFA <- ?SPAWN_BIFS, erlang:trace_info(MFA, meta) =:= {meta, ?META}],
    ok.

apply_flags(Want, #s{flags = Want} = S) ->
    S;
apply_flags({WantP, WantO} = Want, #s{flags = {HaveP, HaveO}, tracing = T} = S) ->
    _ = lists:member(ports, WantO) andalso not lists:member(ports, HaveO) andalso port_names(),
    %% garbage_collection is apply_gc/1's where the guard is on.
    OnP = case S#s.gc_guard of
              false -> WantP;
              true -> WantP -- [garbage_collection]
          end,
    %% New ones first: a process spawned between the two calls by one that
    %% has its flags already gets them too.
    New = case {set_new(T, new_processes, HaveP -- WantP, OnP), WantP} of
              {free, [_ | _]} -> ours;
              {N, _} -> N
          end,
    _ = set_new(T, new_ports, HaveO -- WantO, WantO),
    set(T, existing_processes, HaveP -- WantP, OnP),
    set(T, existing_ports, HaveO -- WantO, WantO),
    S#s{flags = Want, new = New}.

%% The names the ports already open were opened with, for port__command and
%% port__exit (their `open` events were not traced): at most ?PORT_NAMES
%% ports are asked, as the library's table is bounded too.
port_names() ->
    Ports = lists:sublist(erlang:ports(), ?PORT_NAMES),
    _ = [quietly(fun() -> dtrace_nif:vm_port_name(P, unicode:characters_to_binary(Name), Owner) end)
         || P <- Ports, {name, Name} <- [erlang:port_info(P, name)],
            {connected, Owner} <- [erlang:port_info(P, connected)]],
    true.

%% Removes Off from our processes (ports), then sets On on ours and on
%% free ones (without sessions, erlang:trace/3 skips the ones another
%% tracer has).
set({session, Auto, _}, Spec, Off, On) ->
    {Fun, Which} = session_target(Spec),
    _ = Off =/= [] andalso trace:Fun(Auto, Which, false, Off),
    _ = On =/= [] andalso trace:Fun(Auto, Which, true, On),
    ok;
set(legacy, Spec, Off, On) ->
    _ = Off =/= [] andalso erlang:trace(Spec, false, Off ++ [{tracer, dtrace_tracer, []}]),
    _ = On =/= [] andalso erlang:trace(Spec, true, On ++ [{tracer, dtrace_tracer, []}]),
    ok.

session_target(existing_processes) -> {process, existing};
session_target(new_processes) -> {process, new};
session_target(existing_ports) -> {port, existing};
session_target(new_ports) -> {port, new}.

%% The same for new processes (ports). In a session of our own, always
%% ours; without sessions, the VM would replace the default tracer without
%% asking: only when it is free or ours.
set_new({session, _, _} = T, Spec, Off, On) ->
    set(T, Spec, Off, On),
    case On of [] -> free; _ -> ours end;
set_new(legacy, Spec, Off, On) ->
    case erlang:trace_info(Spec, tracer) of
        {tracer, Tr} when Tr =:= []; Tr =:= ?LEGACY_TRACER ->
            set(legacy, Spec, Off, On),
            case On of [] -> free; _ -> ours end;
        {tracer, Other} ->
            {taken, Other}
    end.

clear_flags(#s{flags = {P, O}, tracing = T} = S) ->
    set(T, existing_processes, P, []),
    set(T, existing_ports, O, []),
    _ = set_new(T, new_processes, P, []),
    _ = set_new(T, new_ports, O, []),
    S#s{flags = {[], []}, new = free}.

%% Without sessions: every flag the tracer {dtrace_tracer, []} may hold (the feed
%% table's, from the NIF), our meta patterns, and our send match spec.
clear_all() ->
    quietly(fun() -> clear_meta(legacy) end),
    quietly(fun() -> clear_exit_meta(legacy) end),
    _ = case erlang:trace_info(send, match_spec) of
            {match_spec, ?SEND_CODE_MS} -> send_pattern(true);
            _ -> ok
        end,
    {Procs, Ports} = dtrace_nif:vm_flags(),
    quietly(fun() -> set(legacy, existing_processes, Procs, []) end),
    quietly(fun() -> set(legacy, existing_ports, Ports, []) end),
    quietly(fun() -> set_new(legacy, new_processes, Procs, []) end),
    quietly(fun() -> set_new(legacy, new_ports, Ports, []) end),
    ok.

%%%===================================================================
%%% Function probes

apply_patterns(Want, #s{active = Want} = S) ->
    S;
apply_patterns({Probes, Spans} = Want, #s{tracing = T} = S) ->
    S1 = clear_patterns(S),
    All = set_list(Want),
    _ = [code:ensure_loaded(M) || M <- lists:usort([M || {M, _, _, _} <- All])],
    %% The NIF's tables first, so that the first events are told apart.
    ok = dtrace_nif:vm_call_probes(Probes, bifs(Probes), nifs(Probes)),
    ok = dtrace_nif:vm_function_spans(Spans),
    _ = [set_pattern(T, {M, F, A}, ?MS, Kind) || {M, F, A, Kind} <- All],
    S1#s{active = Want}.

clear_patterns(#s{active = {[], []}} = S) ->
    S;
clear_patterns(#s{active = Active, tracing = T} = S) ->
    _ = [set_pattern(T, {M, F, A}, false, Kind) || {M, F, A, Kind} <- set_list(Active)],
    _ = dtrace_nif:vm_call_probes([], [], []),
    _ = dtrace_nif:vm_function_spans([]),
    S#s{active = {[], []}}.

%% The patterns to set: the function probes', then each function span's
%% function (local calls too; after a probe pattern on it, which it
%% replaces).
set_list({Probes, Spans}) ->
    Probes ++ [{M, F, A, local} || {M, F, A} <- Spans].

%% A call-trace pattern: in our session (an operator's patterns on the
%% same function stay theirs), or without sessions the node's.
set_pattern({session, Auto, _}, MFA, MS, Kind) ->
    trace:function(Auto, MFA, MS, [Kind]);
set_pattern(legacy, MFA, MS, Kind) ->
    erlang:trace_pattern(MFA, MS, [Kind]).

%% The BIFs the patterns name (their calls fire bif__entry/bif__return).
bifs(Patterns) ->
    lists:usort([{M, F, A} || {M, PF, PA, _} <- Patterns,
                              erlang:module_loaded(M),
                              {F, A} <- M:module_info(exports),
                              PF =:= '_' orelse PF =:= F,
                              PA =:= '_' orelse PA =:= A,
                              erlang:is_builtin(M, F, A)]).

%% The NIFs the patterns name (Module:module_info(nifs), OTP 21 and
%% later; their calls fire nif__entry/nif__return).
nifs(Patterns) ->
    lists:usort([{M, F, A} || {M, PF, PA, _} <- Patterns,
                              erlang:module_loaded(M),
                              {F, A} <- M:module_info(nifs),
                              PF =:= '_' orelse PF =:= F,
                              PA =:= '_' orelse PA =:= A]).

%% {M, F, A} (global calls) or {M, F, A, local} (all calls); M an atom
%% (not '_'), F an atom or '_', A an arity or '_'.
normalize([], Acc) ->
    {ok, lists:reverse(Acc)};
normalize([P | Rest], Acc) ->
    case pattern(P) of
        {ok, Normal} ->
            normalize(Rest, [Normal | Acc -- [Normal]]);
        Error ->
            Error
    end;
normalize(Other, _Acc) ->
    {error, {not_a_list, Other}}.

pattern({M, F, A}) ->
    case pattern({M, F, A, global}) of
        {ok, _} = Ok -> Ok;
        {error, {Why, _}} -> {error, {Why, {M, F, A}}}
    end;
pattern({'_', _, _, _} = P) ->
    {error, {all_modules, P}};
pattern({M, F, A, Kind} = P)
  when is_atom(M), is_atom(F),
       (A =:= '_' orelse (is_integer(A) andalso A >= 0 andalso A =< 255)),
       (Kind =:= global orelse Kind =:= local) ->
    {ok, P};
pattern(P) ->
    {error, {bad_pattern, P}}.

%%%===================================================================
%%% Status

status(#s{mode = Mode, poll = Poll, flags = {P, O}, patterns = Patterns, spans = Spans, active = Active, new = New,
          spawn_meta = Meta, exit_meta = ExitMeta, node_monitor = NodeMonitor, system_monitor = SystemMonitor, send_code = SendCode,
          tracing = Tracing, gc = Gc}) ->
    {ListenP, ListenO, Probes, _} = dtrace_nif:vm_listening(),
    {Ours, Others} = case Tracing of
                         {session, Auto, _} -> session_counts(Auto);
                         legacy -> legacy_counts()
                     end,
    #{mode => Mode,
      poll_ms => Poll,
      tracing => case Tracing of {session, _, _} -> session; legacy -> legacy end,
      listening => Probes,
      wanted_flags => #{processes => ListenP, ports => ListenO},
      flags => #{processes => P, ports => O},
      new_processes => New,
      spawn_meta => Meta,
      exit_meta => ExitMeta,
      node_monitor => NodeMonitor,
      system_monitor => SystemMonitor,
      send_code => SendCode,
      traced => Ours,
      skipped => Others,
      gc_held_back => dtrace_gc_guard:held_back(Gc),
      function_patterns => [external(Pt) || Pt <- Patterns],
      function_patterns_set => Active =/= {[], []},
      function_spans => Spans,
      function_spans_set => element(2, Active) =/= []}.

%% The processes and ports of ours.
ours({session, Auto, _}) ->
    [T || T <- processes() ++ erlang:ports(), session_flags(Auto, T) =/= []];
ours(legacy) ->
    [T || T <- processes() ++ erlang:ports(),
          erlang:trace_info(T, tracer) =:= {tracer, ?LEGACY_TRACER},
          erlang:trace_info(T, flags) =/= {flags, []}].

session_flags(Auto, T) ->
    case trace:info(Auto, T, flags) of
        {flags, F} -> F;
        _ -> []
    end.

%% {traced by automatic mode, skipped}: in a session nothing is skipped.
session_counts(Auto) ->
    {length([P || P <- processes(), session_flags(Auto, P) =/= []]), 0}.

%% {traced by the tracer {dtrace_tracer, []}, traced by another tracer}.
legacy_counts() ->
    lists:foldl(fun(Pid, {Ours, Others} = Acc) ->
                        case erlang:trace_info(Pid, tracer) of
                            {tracer, ?LEGACY_TRACER} -> {Ours + 1, Others};
                            {tracer, []} -> Acc;
                            {tracer, _} -> {Ours, Others + 1};
                            undefined -> Acc
                        end
                end, {0, 0}, processes()).

external({M, F, A, global}) -> {M, F, A};
external(P) -> P.

%% F's value, or `failed' if it raised: a clean-up step that must not stop
%% the next (old-style catch is deprecated from OTP 29).
quietly(F) -> try F() catch _:_ -> failed end.
