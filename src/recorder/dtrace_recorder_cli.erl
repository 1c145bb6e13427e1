%%% @doc External commands for the flight recorder (`lttng', `python3'),
%%% run so that none of them can block or outlive its caller.
%%%
%%% Each command runs as a port owned by a process of its own, never by the
%%% caller: the caller only waits for one message, at most `timeout'
%%% milliseconds (plus a grace second). When the time is up, the OS process
%%% is killed (SIGKILL) and `{error, timeout}' comes back; when the caller
%%% dies first, the OS process is killed too. The output kept is bounded
%%% (`max_output' bytes; the rest is dropped and counted). A hung `lttng'
%%% (a stopped session daemon, say) therefore costs a recorder one timeout,
%%% and nothing else.
%%% @end
-module(dtrace_recorder_cli).

-include_lib("kernel/include/file.hrl").

-export([run/3, find/1]).

-export_type([result/0, run_opts/0]).

-type run_opts() :: #{timeout => pos_integer(),
                      env => [{string(), string() | false}],
                      max_output => pos_integer(),
                      cd => file:filename()}.
%% `timeout': milliseconds (default 15000); `env': added to (or, with
%% `false', removed from) the environment; `max_output': bytes of output
%% kept (default 4 MiB); `cd': working directory.
-type result() :: {ok, ExitStatus :: non_neg_integer(), Output :: binary()}
                | {error, timeout | {not_found, string()} | {spawn, term()}}.

-define(DEFAULT_TIMEOUT, 15000).
-define(DEFAULT_MAX_OUTPUT, 4 bsl 20).
-define(GRACE_MS, 1000).

%% @doc Runs `Exe' (a name looked up in `PATH', or a path) with `Args' (a
%% list of strings, no shell involved) in a process of its own, and waits
%% for it at most `timeout' milliseconds of `Opts' (default 15000).
%% Returns `{ok, ExitStatus, Output}' (stdout and stderr together, at most
%% `max_output' bytes), `{error, timeout}' (the process was killed),
%% `{error, {not_found, Exe}}' or `{error, {spawn, Reason}}'.
-spec run(Exe, Args, Opts) -> result() when
      Exe :: string(),
      Args :: [unicode:chardata()],
      Opts :: run_opts().
run(Exe, Args, Opts) ->
    case find(Exe) of
        false ->
            {error, {not_found, Exe}};
        Path ->
            Timeout = maps:get(timeout, Opts, ?DEFAULT_TIMEOUT),
            Caller = self(),
            Ref = make_ref(),
            {Pid, MRef} = spawn_monitor(fun() -> runner(Caller, Ref, Path, Args, Opts, Timeout) end),
            receive
                {Ref, Result} ->
                    erlang:demonitor(MRef, [flush]),
                    Result;
                {'DOWN', MRef, process, Pid, Reason} ->
                    {error, {spawn, Reason}}
            after Timeout + 2 * ?GRACE_MS ->
                    %% The runner itself is stuck (it never should be): it
                    %% dies, and its port with it.
                    exit(Pid, kill),
                    erlang:demonitor(MRef, [flush]),
                    receive {Ref, _} -> ok after 0 -> ok end,
                    {error, timeout}
            end
    end.

%% @doc The absolute path of executable `Exe': `Exe' itself when it
%% contains a slash and is a regular executable file, else the first match
%% in `PATH'; `false' when there is none.
-spec find(Exe :: string()) -> string() | false.
find(Exe) ->
    case lists:member($/, Exe) of
        true ->
            case file:read_file_info(Exe) of
                {ok, #file_info{type = regular, mode = Mode}} when Mode band 8#111 =/= 0 -> Exe;
                _ -> false
            end;
        false ->
            os:find_executable(Exe)
    end.

runner(Caller, Ref, Path, Args, Opts, Timeout) ->
    CMon = erlang:monitor(process, Caller),
    Env = maps:get(env, Opts, []),
    PortOpts = [{args, [to_list(A) || A <- Args]}, {env, Env}, binary, exit_status,
                stderr_to_stdout, use_stdio, hide]
        ++ case maps:find(cd, Opts) of
               {ok, Dir} -> [{cd, Dir}];
               error -> []
           end,
    try open_port({spawn_executable, Path}, PortOpts) of
        Port ->
            OsPid = case erlang:port_info(Port, os_pid) of
                        {os_pid, P} -> P;
                        undefined -> undefined
                    end,
            Deadline = erlang:monotonic_time(millisecond) + Timeout,
            Max = maps:get(max_output, Opts, ?DEFAULT_MAX_OUTPUT),
            Result = collect(Port, OsPid, CMon, Deadline, Max, [], 0),
            Caller ! {Ref, Result}
    catch
        error:Reason ->
            Caller ! {Ref, {error, {spawn, Reason}}}
    end.

collect(Port, OsPid, CMon, Deadline, Max, Acc, Size) ->
    Left = max(0, Deadline - erlang:monotonic_time(millisecond)),
    receive
        {Port, {data, Data}} when Size < Max ->
            Keep = binary:part(Data, 0, min(byte_size(Data), Max - Size)),
            collect(Port, OsPid, CMon, Deadline, Max, [Keep | Acc], Size + byte_size(Keep));
        {Port, {data, _}} ->
            collect(Port, OsPid, CMon, Deadline, Max, Acc, Size);
        {Port, {exit_status, Status}} ->
            {ok, Status, iolist_to_binary(lists:reverse(Acc))};
        {'DOWN', CMon, process, _, _} ->
            %% Nobody waits for the answer any more: no command outlives
            %% the process that asked for it.
            kill(Port, OsPid),
            exit(normal)
    after Left ->
            kill(Port, OsPid),
            {error, timeout}
    end.

%% SIGKILL through the shell's builtin (no `kill' executable needed, any
%% PATH), then the port is closed.
kill(Port, OsPid) ->
    _ = is_integer(OsPid) andalso os:cmd("kill -KILL " ++ integer_to_list(OsPid) ++ " 2>/dev/null"),
    try port_close(Port) catch error:badarg -> ok end,
    ok.

to_list(A) ->
    case unicode:characters_to_list(A) of
        L when is_list(L) -> L;
        _ -> erlang:error(badarg, [A])
    end.
