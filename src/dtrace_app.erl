%%% @doc The dtrace application: nothing runs in it but, on a VM built
%%% without dynamic trace, the `dyntrace' compatibility layer, installed at
%%% start and removed at stop (see {@link dtrace_compat}). The probes work
%%% whether or not the application is started: `dtrace:p/N' only needs the
%%% module.
%%% @end
-module(dtrace_app).
-behaviour(application).
-behaviour(supervisor).

-export([start/2, stop/1, init/1]).

%% @private
start(_Type, _Args) ->
    _ = dtrace_compat:install(),
    supervisor:start_link({local, dtrace_sup}, ?MODULE, []).

%% @private
stop(_State) ->
    _ = dtrace_compat:uninstall(),
    ok.

%% @private
init([]) ->
    {ok, {#{strategy => one_for_one, intensity => 1, period => 5}, []}}.
