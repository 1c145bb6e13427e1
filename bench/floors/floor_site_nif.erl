%%% The in-node uprobe floor's module (bench/dtrace_floors.erl), compiled
%%% once per nop form with FLOOR_MODULE = dtrace_floor_site_nop1 or
%%% dtrace_floor_site_nop5: hit/0 is the NIF of floor_site_nif.c. The
%%% on_load reads the library's path (without ".so") from the persistent
%%% term {Module, nif}, which dtrace_floors puts before loading it.
-module(?FLOOR_MODULE).

-export([hit/0, hit_touching/1]).

-on_load(init/0).

init() ->
    case persistent_term:get({?MODULE, nif}, undefined) of
        undefined -> {error, no_nif_path};
        Path -> erlang:load_nif(Path, 0)
    end.

%% Fires the bare site if a tracer listens: true; else false.
-spec hit() -> boolean().
hit() ->
    erlang:nif_error(not_loaded).

%% Writes one byte of every 64-byte line of the first Bytes bytes of a
%% buffer (at most 8 MiB), then fires the site as hit/0.
-spec hit_touching(non_neg_integer()) -> boolean().
hit_touching(_Bytes) ->
    erlang:nif_error(not_loaded).
