%%% Which module owns which NIF library, and how each loads it: the one
%%% place (dtrace_nif's module doc has the table). Included by the three
%%% modules that own a library (dtrace_nif, dtrace, compat/dyntrace.erl), as
%%% local functions: a module's on_load cannot call another module of the
%%% application, which a release in embedded mode may not have loaded yet.
%%%
%%%   dtrace_nif  priv/dtrace_nif.so       every probe NIF (its -nifs)
%%%   dtrace      priv/tracer/dtrace.so    enabled/3, trace/5 (erl_tracer)
%%%   dyntrace    priv/compat/dyntrace.so  enabled/3, trace/5 (erl_tracer)

%% The library of Module, without its extension, for erlang:load_nif/2
%% (which each module calls itself: a NIF library loads into its caller).
-spec library_path(Module :: dtrace_nif | dtrace | dyntrace) -> file:filename().
library_path(dtrace_nif) -> library_path(["dtrace_nif"], 2);
library_path(dtrace) -> library_path(["tracer", "dtrace"], 2);
library_path(dyntrace) -> library_path(["compat", "dyntrace"], 3).

%% Rel under priv/. Without the application (its beam files put on the code
%% path by hand), priv/ is found from this module's beam file, Up levels
%% below the application's directory (ebin/x.beam: 2; priv/compat/x.beam: 3).
library_path(Rel, Up) ->
    case code:priv_dir(dtrace) of
        {error, bad_name} ->
            Beam = case code:which(?MODULE) of
                       B when is_list(B) -> B;
                       _ -> "ebin/x.beam"
                   end,
            App = lists:foldl(fun(_, Dir) -> filename:dirname(Dir) end, Beam, lists:seq(1, Up)),
            filename:join([App, "priv" | Rel]);
        Priv ->
            filename:join([Priv | Rel])
    end.

%% What an on_load makes of erlang:load_nif/2's Result for Module's library
%% at Path: `ok' whatever happened, so that the module loads. Without its
%% library `dtrace_nif' logs a warning and every probe returns `false' (as
%% OTP's dyntrace does on a VM without dynamic trace); a tracer module logs
%% a notice and its stubs answer `remove'.
-spec loaded(Module :: dtrace_nif | dtrace | dyntrace, Path :: file:filename(),
             Result :: ok | {error, {atom(), string()}}) -> ok.
loaded(_Module, _Path, ok) ->
    ok;
loaded(_Module, _Path, {error, {reload, _}}) ->
    ok;
loaded(dtrace_nif, Path, {error, {Reason, Text}}) ->
    logger:warning("dtrace: NIF ~ts not loaded (~p: ~ts); probes are disabled", [Path, Reason, Text]);
loaded(Module, Path, {error, {Reason, Text}}) ->
    logger:info("dtrace: {tracer, ~p, []} fires nothing: ~ts: ~p: ~ts", [Module, Path, Reason, Text]).

%% What a NIF stub returns when its library is not loaded: Default.
%% erlang:nif_error/1 is the BIF OTP documents for NIF stubs: it raises like
%% erlang:error/1, and dialyzer takes it to return any term, so a stub's
%% type is its spec (what the NIF returns), not Default alone; caught here,
%% it gives the documented answer of a node without the library. Runs only
%% then.
-spec not_loaded(Default) -> Default.
not_loaded(Default) ->
    try
        erlang:nif_error(not_loaded)
    catch
        error:not_loaded -> Default
    end.
