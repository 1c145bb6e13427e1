%%% @private
%%% @doc Automatic mode's trace sessions (OTP 27+), created and destroyed
%%% by `dtrace_vm' only: `dtrace_auto' (tracer `{dtrace_tracer, auto}': flags and
%%% call-trace patterns), `dtrace_spawn_meta' (`{dtrace_tracer, spawn_meta}'), and
%%% two whose handles are kept in persistent_term for the processes that
%%% use them: `dtrace_span' (`{dtrace_tracer, span}', dtrace_span_trace) and
%%% `dtrace_exit_meta' (`{dtrace_tracer, exit_meta}', process__exit_signal). The
%%% VM destroys a session with the last copy of its handle; these are
%%% destroyed by name too when an earlier instance left them.
%%% @end
-module(dtrace_vm_sessions).

-export([create/0, destroy/1, exit_meta/0]).

-define(SESSION, dtrace_auto).
-define(META_SESSION, dtrace_spawn_meta).
-define(SPAN_SESSION, dtrace_span).
-define(EXIT_SESSION, dtrace_exit_meta).
-define(EXIT_SESSION_KEY, {?MODULE, exit_meta_session}).

%% The trace module exists from OTP 27 on; dtrace_vm calls this module only
%% where it does.
-dialyzer({nowarn_function, [create/0, destroy_leftovers/0, destroy/1]}).

%% Our sessions, after removing an earlier instance's; false (and a
%% warning: automatic mode then uses the legacy session) if the VM refuses
%% them, as it does when the tracer module `dtrace_tracer' has no NIFs.
-spec create() -> {session, Auto :: term(), Meta :: term()} | false.
create() ->
    destroy_leftovers(),
    try
        T = {session, trace:session_create(?SESSION, {dtrace_tracer, auto}, []),
             trace:session_create(?META_SESSION, {dtrace_tracer, spawn_meta}, [])},
        %% The session of the processes inside a span (dtrace_span_trace):
        %% theirs to use, in persistent_term; destroyed with the others.
        persistent_term:put(dtrace_span_trace:session_key(),
                            trace:session_create(?SPAN_SESSION, {dtrace_tracer, span}, [])),
        persistent_term:put(?EXIT_SESSION_KEY,
                            trace:session_create(?EXIT_SESSION, {dtrace_tracer, exit_meta}, [])),
        T
    catch
        error:Why ->
            destroy_leftovers(),
            logger:warning("dtrace: no trace session for the VM probes (~p); "
                           "automatic mode uses the legacy session", [Why]),
            false
    end.

%% The session of process__exit_signal's meta pattern, or undefined.
-spec exit_meta() -> term().
exit_meta() ->
    persistent_term:get(?EXIT_SESSION_KEY, undefined).

-spec destroy({session, Auto :: term(), Meta :: term()}) -> ok.
destroy({session, Auto, Meta}) ->
    destroy_session(Auto),
    destroy_session(Meta),
    lists:foreach(fun(Key) ->
                          Session = persistent_term:get(Key, undefined),
                          _ = persistent_term:erase(Key),
                          Session =:= undefined orelse destroy_session(Session)
                  end, [dtrace_span_trace:session_key(), ?EXIT_SESSION_KEY]).

%% An earlier instance's sessions, if a copy of a handle kept them alive
%% after it died, by name.
destroy_leftovers() ->
    _ = [destroy_session(W) || {Name, _} = W <- trace:session_info(all),
                               lists:member(Name, [?SESSION, ?META_SESSION, ?SPAN_SESSION, ?EXIT_SESSION])],
    ok.

%% A session may be gone already (its owner died): nothing to do then.
destroy_session(Session) ->
    try trace:session_destroy(Session) catch _:_ -> ok end.
