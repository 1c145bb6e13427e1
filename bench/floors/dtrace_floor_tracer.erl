%%% The erl_tracer floor's tracer module (bench/dtrace_floors.erl): the
%%% cheapest tracer a library can pass to erlang:trace/3 as
%%% {tracer, dtrace_floor_tracer, State}. Both callbacks are NIFs of
%%% floor_tracer_nif.c: enabled/3 answers `trace' for every tag (trace_status
%%% included), trace/5 returns `ok' and does nothing.
%%%
%%% Where the NIF library is: the on_load function reads the persistent term
%%% {dtrace_floor_tracer, nif}, the library's path without its ".so"
%%% (erlang:load_nif/2's form), which dtrace_floors:tracer_floor/1 puts
%%% before loading this module. No application, no environment variable:
%%% the term is set and read in the same VM.
%%% Compiled once per variant of floor_tracer_nif.c, with FLOOR_MODULE
%%% its module name (dtrace_floor_tracer when not defined).
-ifndef(FLOOR_MODULE).
-define(FLOOR_MODULE, dtrace_floor_tracer).
-endif.
-module(?FLOOR_MODULE).

-export([enabled/3, trace/5, sink_enabled/0]).

-on_load(init/0).

init() ->
    case persistent_term:get({?MODULE, nif}, undefined) of
        undefined -> {error, no_nif_path};
        Path -> erlang:load_nif(Path, 0)
    end.

-spec enabled(atom(), term(), pid() | port() | undefined) -> trace | remove | discard.
enabled(_TraceTag, _TracerState, _Tracee) ->
    erlang:nif_error(not_loaded).

-spec trace(atom(), term(), pid() | port() | undefined, term(), map()) -> ok.
trace(_Tag, _TracerState, _Tracee, _TraceTerm, _Opts) ->
    erlang:nif_error(not_loaded).

%% Does the variant's sink listen (see floor_tracer_nif.c)?
-spec sink_enabled() -> boolean().
sink_enabled() ->
    erlang:nif_error(not_loaded).
