%%% Which module owns which NIF library, and how each loads it: the one
%%% place (dtrace_nif's module doc has the table). Included by the three
%%% modules that own a library (dtrace_nif, dtrace_tracer, compat/dyntrace.erl), as
%%% macros and local functions: a module's on_load cannot call another
%%% module of the application, which a release in embedded mode may not have
%%% loaded yet. (No specs on the local functions: dialyzer narrows a local
%%% function's success typing to its call sites in each includer.)

%% Each owner's library: its path under priv/, and how many levels its beam
%% file lies below the application's directory (ebin/x.beam: 2;
%% priv/compat/x.beam: 3), for library_path/1.
-define(DTRACE_NIF_LIBRARY, {["dtrace_nif"], 2}).        % every probe NIF (dtrace_nif's -nifs)
-define(DTRACE_TRACER_LIBRARY, {["tracer", "dtrace_tracer"], 2}). % dtrace_tracer: enabled/3, trace/5 (erl_tracer)
-define(DYNTRACE_TRACER_LIBRARY, {["compat", "dyntrace"], 3}). % dyntrace: the same two

%% What a NIF stub returns when its library is not loaded: Default.
%% erlang:nif_error/1 is the BIF OTP documents for NIF stubs: it raises like
%% erlang:error/1, and dialyzer takes it to return any term, so a stub's
%% type is its spec (what the NIF returns), not Default alone; caught here,
%% it gives the documented answer of a node without the library.
-define(NOT_LOADED(Default),
        try
            erlang:nif_error(not_loaded)
        catch
            error:not_loaded -> Default
        end).

%% The library {Rel, Up} (a ?..._LIBRARY above), without its extension, for
%% erlang:load_nif/2, which each owner calls itself (a NIF library loads
%% into its caller). Without the application (its beam files put on the
%% code path by hand), priv/ is found from this module's beam file.
library_path({Rel, Up}) ->
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

%% What an on_load makes of erlang:load_nif/2's Result for the library at
%% Path: `ok' whatever happened, so that the module loads, after logging
%% Why at Level when it failed. Without its library `dtrace_nif' warns and
%% every probe returns `false' (as OTP's dyntrace does on a VM without
%% dynamic trace); a tracer module notes it and its stubs answer `remove'.
loaded(_Level, _Why, _Path, ok) ->
    ok;
loaded(_Level, _Why, _Path, {error, {reload, _}}) ->
    ok;
loaded(Level, Why, Path, {error, {Reason, Text}}) ->
    logger:log(Level, "dtrace: ~ts: ~ts: ~p: ~ts", [Why, Path, Reason, Text]).
