%%% @doc The VM probes' automatic mode: trace flags only while a tracer
%%% listens.
%%%
%%% The VM's own probes (`process__spawn', `message__send', ...; see the
%%% README's probe table) are fired from erl_tracer events by the NIF
%%% callbacks of module `dtrace'. This process, started by the `dtrace'
%%% application, polls the probes' semaphores (every `vm_probes_poll_ms'
%%% milliseconds, default 100) and sets on all processes and ports exactly
%%% the trace flags whose probes have a tracer, with `{tracer, dtrace,
%%% auto}'; when the tracers leave, it removes them. A node nobody traces
%%% has no trace flag set by dtrace.
%%%
%%% It never takes tracing away from an operator: `erlang:trace/3' skips
%%% processes another tracer (dbg, recon, ...) already traces, and the
%%% default tracer of new processes is only taken when it is free. On OTP
%%% 25 the reverse holds too: while dtrace traces a process, another
%%% tracer cannot trace it (`erlang:trace/3' raises `badarg'); switch to
%%% manual mode first ({@link dtrace:vm_probes/1}). See {@link
%%% dtrace:vm_probes/0} for the status.
%%%
%%% `process__spawn' alone needs no trace flag: while it is the only
%%% probe of processes with a tracer, this process meta-traces the three
%%% BIFs every local spawn goes through (`erlang:spawn/3', `spawn_link/3',
%%% `spawn_opt/4'), so a node traced for spawns only pays on each spawn,
%%% not on every scheduling of every process (a traced process costs the
%%% VM a tracer check at each schedule-in). It then fires when the BIF
%%% returns, which may be after the new process first ran. With other
%%% process probes listened to, it comes from the `procs' flag, in order
%%% with them. Function probes follow the patterns given to {@link
%%% dtrace:function_probes/1}: the call-trace patterns are set only while a
%%% tracer listens to a function probe.
%%% @end
-module(dtrace_vm).
-behaviour(gen_server).

-export([start_link/0, status/0, set_mode/1, function_probes/1]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2, terminate/2]).

%% The tracer of automatic mode. Processes traced with it are ours; the
%% state tells them from a user's own {tracer, dtrace, []}.
-define(TRACER, {tracer, dtrace, auto}).
-define(MS, [{'_', [], [{exception_trace}]}]).
%% process__spawn in automatic mode: meta tracing of the BIFs every local
%% spawn goes through (spawn/1, spawn_monitor/1, proc_lib, ... call them),
%% which sets no trace flag on any process.
-define(SPAWN_BIFS, [{erlang, spawn, 3}, {erlang, spawn_link, 3}, {erlang, spawn_opt, 4}]).
-define(META, {dtrace, spawn_meta}).

%% OTP 25's spec of erlang:trace_info/2 says a tracer module comes back as
%% {tracer, Module, State}; the VM returns {tracer, {Module, State}} (and
%% {meta, {Module, State}}), which is what these functions match.
-dialyzer({no_match, [apply_meta/2, clear_meta/0, count_tracers/0]}).

-type flags() :: {Processes :: [atom()], Ports :: [atom()]}.
-type pattern() :: {module(), atom(), arity() | '_', global | local}.

-record(s, {mode :: auto | manual,
            poll :: pos_integer(),
            flags = {[], []} :: flags(),
            patterns = [] :: [pattern()],
            active = [] :: [pattern()],
            new = free :: free | ours | {taken, term()},
            spawn_meta = off :: off | on | {taken, term()}}).

%% @private
start_link() ->
    gen_server:start_link({local, ?MODULE}, ?MODULE, [], []).

%% @private The status map of {@link dtrace:vm_probes/0}.
status() ->
    gen_server:call(?MODULE, status).

%% @private
set_mode(Mode) ->
    gen_server:call(?MODULE, {mode, Mode}).

%% @private
function_probes(Patterns) ->
    case normalize(Patterns, []) of
        {ok, Normal} -> gen_server:call(?MODULE, {patterns, Normal});
        {error, _} = Error -> Error
    end.

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
    %% Flags an earlier instance of this process left (it crashed or was
    %% killed): nothing of ours stays set unless a tracer listens.
    clear_all(),
    self() ! poll,
    {ok, #s{mode = Mode, poll = Poll, patterns = Patterns}}.

function_probes_env() ->
    normalize(application:get_env(dtrace, function_probes, []), []).

%% @private
handle_call(status, _From, S) ->
    {reply, status(S), S};
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
handle_info(_Msg, S) ->
    {noreply, S}.

%% @private Stopping (the application stops, or the process fails)
%% leaves no flag and no trace pattern behind.
terminate(_Reason, S) ->
    _ = (catch clear_flags(S)),
    _ = (catch clear_patterns(S)),
    clear_all().

%%%===================================================================
%%% Polling

poll(S) ->
    {ProcFlags0, PortFlags, _Listening, Spawn} = dtrace:vm_listening(),
    CallsListened = lists:member(call, ProcFlags0),
    S1 = case S#s.mode of
             auto ->
                 ProcFlags1 = case S#s.patterns of
                                  [] -> ProcFlags0 -- [call, arity];
                                  _ -> ProcFlags0
                              end,
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
                 apply_meta(Meta, apply_flags({ProcFlags, PortFlags}, S));
             manual ->
                 apply_meta(false, S)
         end,
    apply_patterns(CallsListened andalso S1#s.patterns =/= [], S1).

%% Sets (true) or removes (false) the meta-trace patterns that feed
%% process__spawn; another tracer's meta pattern on a spawn BIF is left
%% alone (and reported).
apply_meta(true, #s{spawn_meta = off} = S) ->
    case [T || MFA <- ?SPAWN_BIFS, {meta, T} <- [erlang:trace_info(MFA, meta)], T =/= false, T =/= ?META] of
        [] ->
            [erlang:trace_pattern(MFA, [{'_', [], [{return_trace}]}], [{meta, dtrace, spawn_meta}])
             || MFA <- ?SPAWN_BIFS],
            S#s{spawn_meta = on};
        [Other | _] ->
            S#s{spawn_meta = {taken, Other}}
    end;
apply_meta(false, #s{spawn_meta = on} = S) ->
    clear_meta(),
    S#s{spawn_meta = off};
apply_meta(false, #s{spawn_meta = {taken, _}} = S) ->
    S#s{spawn_meta = off};
apply_meta(_, S) ->
    S.

%% Removes our meta patterns from the spawn BIFs (not another tracer's).
clear_meta() ->
    [erlang:trace_pattern(MFA, false, [meta])
     || MFA <- ?SPAWN_BIFS, erlang:trace_info(MFA, meta) =:= {meta, ?META}],
    ok.

apply_flags(Want, #s{flags = Want} = S) ->
    S;
apply_flags({WantP, WantO} = Want, #s{flags = {HaveP, HaveO}} = S) ->
    set(existing_processes, HaveP -- WantP, WantP),
    set(existing_ports, HaveO -- WantO, WantO),
    New = set_new(new_processes, HaveP -- WantP, WantP),
    _ = set_new(new_ports, HaveO -- WantO, WantO),
    S#s{flags = Want, new = New}.

%% Removes Off from our processes (ports), then sets On on ours and on
%% free ones (erlang:trace/3 skips the ones another tracer has).
set(Spec, Off, On) ->
    _ = Off =/= [] andalso erlang:trace(Spec, false, Off ++ [?TRACER]),
    _ = On =/= [] andalso erlang:trace(Spec, true, On ++ [?TRACER]),
    ok.

%% The same for new processes (ports), whose default tracer the VM would
%% replace without asking: only when it is free or ours.
set_new(Spec, Off, On) ->
    case erlang:trace_info(Spec, tracer) of
        {tracer, T} when T =:= []; T =:= {dtrace, auto} ->
            set(Spec, Off, On),
            case On of [] -> free; _ -> ours end;
        {tracer, Other} ->
            {taken, Other}
    end.

clear_flags(#s{flags = {P, O}} = S) ->
    set(existing_processes, P, []),
    set(existing_ports, O, []),
    _ = set_new(new_processes, P, []),
    _ = set_new(new_ports, O, []),
    S#s{flags = {[], []}, new = free}.

%% Every flag any tracer {dtrace, auto} may hold, and our meta patterns.
clear_all() ->
    _ = (catch clear_meta()),
    All = [procs, running, exiting, send, 'receive', call, arity, garbage_collection],
    _ = (catch set(existing_processes, All, [])),
    _ = (catch set(existing_ports, [ports, 'receive'], [])),
    _ = (catch set_new(new_processes, All, [])),
    _ = (catch set_new(new_ports, [ports, 'receive'], [])),
    ok.

%%%===================================================================
%%% Function probes

apply_patterns(true, #s{patterns = P, active = P} = S) ->
    S;
apply_patterns(true, #s{patterns = P} = S) ->
    S1 = clear_patterns(S),
    _ = [code:ensure_loaded(M) || M <- lists:usort([M || {M, _, _, _} <- P])],
    [erlang:trace_pattern({M, F, A}, ?MS, [Kind]) || {M, F, A, Kind} <- P],
    ok = dtrace:vm_call_probes(P, bifs(P)),
    S1#s{active = P};
apply_patterns(false, #s{active = []} = S) ->
    S;
apply_patterns(false, S) ->
    clear_patterns(S).

clear_patterns(#s{active = Active} = S) ->
    [erlang:trace_pattern({M, F, A}, false, [Kind]) || {M, F, A, Kind} <- Active],
    _ = dtrace:vm_call_probes([], []),
    S#s{active = []}.

%% The BIFs the patterns name (their calls fire bif__entry/bif__return).
bifs(Patterns) ->
    lists:usort([{M, F, A} || {M, PF, PA, _} <- Patterns,
                              erlang:module_loaded(M),
                              {F, A} <- M:module_info(exports),
                              PF =:= '_' orelse PF =:= F,
                              PA =:= '_' orelse PA =:= A,
                              erlang:is_builtin(M, F, A)]).

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

status(#s{mode = Mode, poll = Poll, flags = {P, O}, patterns = Patterns, active = Active, new = New,
          spawn_meta = Meta}) ->
    {ListenP, ListenO, Probes, _} = dtrace:vm_listening(),
    {Ours, Others} = count_tracers(),
    #{mode => Mode,
      poll_ms => Poll,
      listening => Probes,
      wanted_flags => #{processes => ListenP, ports => ListenO},
      flags => #{processes => P, ports => O},
      new_processes => New,
      spawn_meta => Meta,
      traced => Ours,
      skipped => Others,
      function_patterns => [external(Pt) || Pt <- Patterns],
      function_patterns_set => Active =/= []}.

%% {traced by dtrace's automatic mode, traced by another tracer}.
count_tracers() ->
    lists:foldl(fun(Pid, {Ours, Others} = Acc) ->
                        case erlang:trace_info(Pid, tracer) of
                            {tracer, {dtrace, auto}} -> {Ours + 1, Others};
                            {tracer, []} -> Acc;
                            {tracer, _} -> {Ours, Others + 1};
                            undefined -> Acc
                        end
                end, {0, 0}, processes()).

external({M, F, A, global}) -> {M, F, A};
external(P) -> P.
