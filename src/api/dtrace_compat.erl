%%% @doc `dyntrace' calls on stock VMs go through dtrace.
%%%
%%% OTP's `dyntrace' (runtime_tools) does nothing on a VM built without
%%% dynamic trace: `dyntrace:p/N' returns `error'. When the dtrace
%%% application starts on such a VM (`erlang:system_info(dynamic_trace)' is
%%% `none'), {@link install/0} loads a `dyntrace' module that delegates every
%%% function to {@link dtrace}, so existing `dyntrace' call sites fire
%%% dtrace's probes. It is loaded with `code:load_binary/3' from
%%% `priv/compat/dyntrace.beam', never from `ebin': a release that also
%%% holds runtime_tools would refuse two `dyntrace' modules.
%%%
%%% It never displaces a working native `dyntrace': on a VM built with
%%% dynamic trace, OTP's module stays. Opt out with the application
%%% environment `{dtrace, [{dyntrace_compat, false}]}'. What was done is
%%% logged once, at info level. When the application stops,
%%% {@link uninstall/0} puts OTP's module back.
%%% @end
-module(dtrace_compat).

-export([install/0, uninstall/0, installed/0]).

%% @doc Loads the delegating `dyntrace' unless opted out or the VM has its
%% own dynamic trace. Returns what it did: `installed', `already' (it was
%% loaded before), `native' (the VM has dynamic trace: OTP's dyntrace
%% stays), `disabled' (opted out), or `{error, Reason}' (the module could
%% not be loaded; logged as a warning).
-spec install() -> installed | already | native | disabled | {error, Reason :: atom()}.
install() ->
    case {application:get_env(dtrace, dyntrace_compat, true),
          erlang:system_info(dynamic_trace), installed()} of
        {false, _, _} ->
            logger:info("dtrace: dyntrace compatibility is off "
                        "(application env dyntrace_compat = false)"),
            disabled;
        {_, _, true} ->
            already;
        {_, none, false} ->
            load();
        {_, Native, false} ->
            logger:info("dtrace: this VM has dynamic trace (~p): dyntrace stays OTP's",
                        [Native]),
            native
    end.

load() ->
    Path = filename:join([code:priv_dir(dtrace), "compat", "dyntrace.beam"]),
    case file:read_file(Path) of
        {ok, Beam} ->
            %% A module has room for one old version: free it (a process
            %% still running it keeps it, and then loading fails, logged).
            _ = code:soft_purge(dyntrace),
            case code:load_binary(dyntrace, Path, Beam) of
                {module, dyntrace} ->
                    logger:info("dtrace: this VM has no dynamic trace; dyntrace calls now "
                                "fire dtrace's probes (opt out: dtrace env dyntrace_compat)"),
                    installed;
                {error, Reason} ->
                    warn(Path, Reason)
            end;
        {error, Reason} ->
            warn(Path, Reason)
    end.

warn(Path, Reason) ->
    logger:warning("dtrace: dyntrace compatibility not installed: ~ts: ~p", [Path, Reason]),
    {error, Reason}.

%% @doc Removes the delegating `dyntrace' if it is loaded: OTP's module is
%% loaded again from the code path (runtime_tools), or, without one, the
%% module is deleted. Code still running the delegating module finishes
%% with it (soft purge). Returns `removed' or `not_installed'.
-spec uninstall() -> removed | not_installed.
uninstall() ->
    case installed() of
        false ->
            not_installed;
        true ->
            %% Ours is deleted and purged before OTP's is loaded: OTP's
            %% dyntrace loads its own NIF library in its on_load, which the
            %% VM refuses while old code of the module holds ours (OTP's
            %% library has no upgrade callback).
            _ = code:soft_purge(dyntrace),
            _ = code:delete(dyntrace),
            _ = code:soft_purge(dyntrace),
            _ = case code:where_is_file("dyntrace.beam") of
                    non_existing -> ok;
                    File -> code:load_abs(filename:rootname(File))
                end,
            removed
    end.

%% @doc Is the loaded `dyntrace' dtrace's delegating module?
-spec installed() -> boolean().
installed() ->
    case code:is_loaded(dyntrace) of
        false -> false;
        _ -> lists:keymember(dtrace_compat, 1, dyntrace:module_info(attributes))
    end.
