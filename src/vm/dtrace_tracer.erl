%%% @doc The library's tracer module (OTP's `erl_tracer' behaviour): the
%%% VM calls its {@link enabled/3} and {@link trace/5} for every process,
%%% port and function traced with `{tracer, dtrace_tracer, State}', and they
%%% fire the VM's own probes (docs/vm-probes.md) for the events a tracer
%%% listens to.
%%%
%%% Automatic mode ({@link dtrace_vm}) sets this tracer itself; in manual
%%% mode trace the processes you choose with it ({@link dtrace:vm_probes/1}
%%% shows how). The VM takes a tracer module only once it is loaded: the
%%% dtrace application loads this one. `State' is `[]' for a tracer of
%%% yours; the library's own are `auto' (automatic mode's session, OTP 27+),
%%% `spawn_meta' and `exit_meta' (meta patterns), `span' (a span's process)
%%% and `[]' (automatic mode without sessions, OTP 25 and 26).
%%%
%%% Both callbacks are NIFs of `priv/tracer/dtrace_tracer.so'
%%% (`native/tracer_nif'; `dtrace_nif''s doc says which module owns which
%%% library), which forwards to `dtrace_nif.so''s: one set of semaphores.
%%% @end
-module(dtrace_tracer).

-export([enabled/3, trace/5]).

-on_load(on_load/0).
-nifs([enabled/3, trace/5]).

-include("../api/dtrace_libraries.hrl").

on_load() ->
    %% dtrace_nif.so first, when the code server can load it (not in an
    %% embedded release; native/tracer_nif opens the library itself then).
    _ = code:ensure_loaded(dtrace_nif),
    Path = library_path(?DTRACE_TRACER_LIBRARY),
    loaded(info, "{tracer, dtrace_tracer, []} fires nothing", Path, erlang:load_nif(Path, 0)).

%% @doc erl_tracer's callback (a NIF): is anybody listening to a probe or
%% event this event feeds? `trace' or `discard' (see the feed table in
%% docs/reference.md); `remove' when the library is not loaded.
-spec enabled(TraceTag :: atom(), TracerState :: term(), Tracee :: pid() | port() | undefined) ->
          trace | discard | remove.
enabled(_TraceTag, _TracerState, _Tracee) ->
    %% Without the library: remove this tracer from the tracee, as OTP's
    %% dyntrace does on a VM without LTTng.
    ?NOT_LOADED(remove).

%% @doc erl_tracer's callback (a NIF): fires the probes and events this
%% event feeds that have a listener. Returns `ok'.
-spec trace(TraceTag :: atom(), TracerState :: term(), Tracee :: pid() | port(),
            TraceTerm :: term(), Opts :: map()) -> ok.
trace(_TraceTag, _TracerState, _Tracee, _TraceTerm, _Opts) ->
    ok.
