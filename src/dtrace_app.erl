%%% @doc The dtrace application: the VM probes' automatic mode ({@link
%%% dtrace_vm}), the process names for tracers ({@link dtrace_names}) and, on a VM built without dynamic trace, the `dyntrace'
%%% compatibility layer, installed at start and removed at stop (see
%%% {@link dtrace_compat}). The user and file probes work whether or not
%%% the application is started: `dtrace:p/N' only needs the module.
%%% @end
-module(dtrace_app).
-behaviour(application).
-behaviour(supervisor).

-export([start/2, stop/1, init/1]).

%% @private
start(_Type, _Args) ->
    case slow_span_threshold(application:get_env(dtrace, slow_span_us, 1000)) of
        ok ->
            _ = dtrace_compat:install(),
            case supervisor:start_link({local, dtrace_sup}, ?MODULE, []) of
                {ok, _} = Ok ->
                    Ok;
                Error ->
                    %% No stop/1 follows a failed start: OTP's dyntrace back.
                    _ = dtrace_compat:uninstall(),
                    Error
            end;
        {error, _} = Error ->
            Error
    end.

%% @private
stop(_State) ->
    _ = dtrace_compat:uninstall(),
    ok.

%% The application environment's slow_span_us, checked as
%% dtrace:slow_span_threshold/1 checks it: a bad value refuses the start.
slow_span_threshold(Us) ->
    try dtrace:slow_span_threshold(Us) of
        _ -> ok
    catch
        error:badarg -> {error, {bad_slow_span_us, Us}}
    end.

%% @private
init([]) ->
    Vm = #{id => dtrace_vm, start => {dtrace_vm, start_link, []},
           restart => permanent, shutdown => 5000, type => worker},
    %% The flight recorders (dtrace_recorder) and their pg scope.
    Recorders = #{id => dtrace_recorder_sup, start => {dtrace_recorder_sup, start_link, []},
                  restart => permanent, shutdown => infinity, type => supervisor},
    %% dtrace_process__name's names, while a tracer listens.
    Names = #{id => dtrace_names, start => {dtrace_names, start_link, []},
              restart => permanent, shutdown => 5000, type => worker},
    {ok, {#{strategy => one_for_one, intensity => 5, period => 10}, [Vm, Names, Recorders]}}.
