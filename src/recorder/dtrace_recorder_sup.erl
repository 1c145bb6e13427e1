%%% @doc The flight recorders' supervisor, a child of the `dtrace'
%%% application's: the `pg' scope through which {@link
%%% dtrace_recorder:trigger_cluster/1} reaches the recorders of every
%%% connected node, and the recorders themselves ({@link dtrace_recorder}),
%%% added by {@link dtrace_recorder:start/1}.
%%%
%%% A recorder is `transient': restarted after a crash with the options it
%%% was started with (the new incarnation removes its predecessor's LTTng
%%% session and triggers by name, then records again), not after {@link
%%% dtrace_recorder:stop/1}. With `{dtrace, [{recorder, Opts}]}' in the
%%% application environment, a recorder with options `Opts' (a map) starts
%%% with the application.
%%% @end
-module(dtrace_recorder_sup).
-behaviour(supervisor).

-export([start_link/0, start_recorder/1, stop_recorder/1, scope/0]).
-export([init/1]).

-define(SCOPE, dtrace_recorder_pg).

%% @doc Starts the supervisor, registered as `dtrace_recorder_sup'.
-spec start_link() -> {ok, pid()} | ignore | {error, term()}.
start_link() ->
    supervisor:start_link({local, ?MODULE}, ?MODULE, []).

%% @doc The `pg' scope of the recorders (`dtrace_recorder_pg').
-spec scope() -> dtrace_recorder_pg.
scope() ->
    ?SCOPE.

%% @doc Adds a recorder with checked options `Conf' (see {@link
%% dtrace_recorder_opts:validate/1}); its id is its name.
-spec start_recorder(Conf :: dtrace_recorder_opts:conf()) -> {ok, pid()} | {error, term()}.
start_recorder(Conf) ->
    case supervisor:start_child(?MODULE, child(Conf)) of
        {ok, Pid} -> {ok, Pid};
        {ok, Pid, _} -> {ok, Pid};
        {error, already_present} ->
            %% A stopped child spec left over (it should not be): replace it.
            _ = supervisor:delete_child(?MODULE, maps:get(name, Conf)),
            start_recorder(Conf);
        {error, {already_started, _}} -> {error, {already_started, maps:get(name, Conf)}};
        {error, Reason} -> {error, Reason}
    end.

%% @doc Stops recorder `Name' (its `terminate/2' removes its session and
%% triggers) and forgets it.
-spec stop_recorder(Name :: atom()) -> ok | {error, not_found}.
stop_recorder(Name) ->
    case supervisor:terminate_child(?MODULE, Name) of
        ok -> _ = supervisor:delete_child(?MODULE, Name), ok;
        {error, not_found} -> {error, not_found}
    end.

%% @private
-spec init([]) -> {ok, {supervisor:sup_flags(), [supervisor:child_spec()]}}.
init([]) ->
    Scope = #{id => ?SCOPE, start => {pg, start_link, [?SCOPE]},
              restart => permanent, shutdown => 5000, type => worker},
    Boot = case application:get_env(dtrace, recorder) of
               {ok, Opts} when is_map(Opts) ->
                   case dtrace_recorder_opts:validate(Opts) of
                       {ok, Conf} ->
                           [child(Conf)];
                       {error, Bad} ->
                           logger:error("dtrace: recorder in the application environment not started: ~p",
                                        [Bad]),
                           []
                   end;
               _ ->
                   []
           end,
    {ok, {#{strategy => one_for_one, intensity => 10, period => 60}, [Scope | Boot]}}.

child(#{name := Name, timeout_ms := Timeout} = Conf) ->
    %% terminate/2 runs at most a few lttng calls, each with its timeout,
    %% and gives up at the first that times out.
    #{id => Name, start => {dtrace_recorder, start_link, [Conf]},
      restart => transient, shutdown => 3 * Timeout + 5000, type => worker}.
