%%% The programs dtrace_floors runs, each with a deadline and stopped
%%% whatever happens: the C drivers and tools (cc, readelf, objdump,
%%% bpftrace) through ports read line by line or to their end, and root
%%% LTTng sessions (the lttng CLI). Nothing here prints; see dtrace_floors.
-module(dtrace_floors_programs).

-export([driver/2, key_values/1, open_lines/2, with_port/2, await_line/3, await_exit/2, interrupt/1, run/3,
         deadline/1, remaining/1,
         with_session/4, lttng/1, can_lttng/0]).

-include("dtrace_floors.hrl").

%%% Programs

%% Runs a driver to its end (exit status 0) and returns what it printed as
%% #{Key => number()}, from its "key value" lines.
driver(Exe, Args) ->
    with_port(open_lines(Exe, Args),
              fun(Port) -> key_values(await_exit(Port, deadline(?RUN_TIMEOUT))) end).

key_values(Lines) ->
    maps:from_list([{K, number(V)} || L <- Lines, [K, V] <- [binary:split(L, <<" ">>)]]).

number(B) ->
    try binary_to_integer(B)
    catch error:badarg -> binary_to_float(B)
    end.

open_lines(Exe, Args) ->
    open_port({spawn_executable, Exe},
              [{args, Args}, {line, 4096}, stderr_to_stdout, exit_status, binary]).

%% Fun(Port); then, whatever happened, the program is killed if it still
%% runs (by its own pid, known to be ours while the port is open) and the
%% port leaves nothing in this process's mailbox: its messages, and the
%% exit signal of its link if this process traps exits (unlink/1's idiom).
with_port(Port, Fun) ->
    try
        Fun(Port)
    after
        unlink(Port),
        case erlang:port_info(Port, os_pid) of
            {os_pid, Pid} ->
                _ = os:cmd("kill -KILL " ++ integer_to_list(Pid) ++ " 2>/dev/null"),
                try port_close(Port) catch error:badarg -> true end;
            undefined ->
                ok
        end,
        flush(Port)
    end.

flush(Port) ->
    receive
        {Port, _} -> flush(Port);
        {'EXIT', Port, _} -> flush(Port)
    after 0 -> ok
    end.

%% The first line starting with Prefix (lines before it are dropped).
await_line(Port, Prefix, Deadline) ->
    receive
        {Port, {data, {eol, Line}}} ->
            case binary:match(Line, Prefix) of
                {0, _} -> Line;
                _ -> await_line(Port, Prefix, Deadline)
            end;
        {Port, {data, {noeol, _}}} -> await_line(Port, Prefix, Deadline);
        {Port, {exit_status, S}} -> error({exited_before, Prefix, S})
    after remaining(Deadline) -> error({no_line, Prefix})
    end.

%% The lines the program prints until it exits; it must exit with 0.
await_exit(Port, Deadline) ->
    await_exit(Port, Deadline, []).

await_exit(Port, Deadline, Acc) ->
    receive
        {Port, {data, {eol, Line}}} -> await_exit(Port, Deadline, [Line | Acc]);
        {Port, {data, {noeol, Part}}} -> await_exit(Port, Deadline, [Part | Acc]);
        {Port, {exit_status, 0}} -> lists:reverse(Acc);
        {Port, {exit_status, S}} -> error({exited, S, lists:reverse(Acc)})
    after remaining(Deadline) -> error({no_exit, lists:reverse(Acc)})
    end.

%% Stops a tracer (bpftrace) with SIGINT and returns the lines it prints
%% until it exits (0). bpftrace 0.17 was seen, rarely, to go on polling
%% after a SIGINT with no signal pending (dtrace_test_tracer's
%% bpftrace_stop/1): the signal is sent again every 10 s, three times at
%% most.
interrupt(Port) ->
    {os_pid, Pid} = erlang:port_info(Port, os_pid),
    interrupt(Port, integer_to_list(Pid), 3, []).

interrupt(Port, Pid, Tries, Acc) ->
    _ = os:cmd("kill -INT " ++ Pid),
    try await_exit(Port, deadline(10000), Acc)
    catch error:{no_exit, Lines} when Tries > 1 -> interrupt(Port, Pid, Tries - 1, lists:reverse(Lines))
    end.

%% Runs Exe to its end within Timeout ms: {ExitStatus, Output} (stdout
%% and stderr); killed and an error after that.
run(Exe, Args, Timeout) ->
    Port = open_port({spawn_executable, Exe}, [{args, Args}, stderr_to_stdout, exit_status, binary]),
    with_port(Port, fun(P) -> collect(P, <<>>, deadline(Timeout)) end).

collect(Port, Acc, Deadline) ->
    receive
        {Port, {data, D}} -> collect(Port, <<Acc/binary, D/binary>>, Deadline);
        {Port, {exit_status, S}} -> {S, Acc}
    after remaining(Deadline) -> error({timeout, erlang:port_info(Port, name), Acc})
    end.

deadline(Ms) -> erlang:monotonic_time(millisecond) + Ms.

remaining(Deadline) -> max(0, Deadline - erlang:monotonic_time(millisecond)).

%%% LTTng sessions

%% Fun(Session) with a root LTTng session recording Event into Trace
%% (channel as the bench's: 8 x 8 MiB sub-buffers, discard mode), tracking
%% the processes Vpids ([]: all); the session is destroyed and its trace
%% deleted whatever happens.
with_session(Trace, Event, Vpids, Fun) ->
    Session = "dtrace_floors_" ++ os:getpid(),
    _ = lttng(["destroy", Session]),
    try
        ok = lttng_ok(["create", Session, "--output=" ++ Trace]),
        ok = lttng_ok(["enable-channel", "-u", "-s", Session, "--subbuf-size=8M",
                       "--num-subbuf=8", "--discard", "floors"]),
        ok = lttng_ok(["enable-event", "-u", "-s", Session, "-c", "floors", Event]),
        [ok = lttng_ok(["track", "-u", "-s", Session, "--vpid=" ++ V]) || V <- Vpids],
        ok = lttng_ok(["start", Session]),
        Fun(Session)
    after
        _ = lttng(["destroy", Session]),
        _ = file:del_dir_r(Trace)
    end.

lttng_ok(Args) ->
    case lttng(Args) of
        {0, _} -> ok;
        {Status, Out} -> error({lttng_failed, Args, Status, Out})
    end.

lttng(Args) ->
    {Status, Out} = run(os:find_executable("lttng"), Args, ?RUN_TIMEOUT),
    {Status, binary_to_list(Out)}.

%% A root session daemon: lttng-tools installed, root, and the daemon
%% running (started if not, as the bench does).
can_lttng() ->
    case {os:find_executable("lttng"), string:trim(os:cmd("id -u"))} of
        {false, _} -> {skip, "lttng (lttng-tools) is not installed"};
        {_, "0"} ->
            case string:trim(os:cmd("pgrep -x -u root lttng-sessiond")) of
                "" ->
                    case os:find_executable("lttng-sessiond") of
                        false -> {skip, "lttng-sessiond is not installed"};
                        Sd ->
                            case run(Sd, ["--daemonize"], ?RUN_TIMEOUT) of
                                {0, _} -> ok;
                                {S, Out} -> {skip, lists:flatten(io_lib:format(
                                                     "lttng-sessiond --daemonize failed (~b): ~s", [S, Out]))}
                            end
                    end;
                _ -> ok
            end;
        _ -> {skip, "a root session daemon needs root"}
    end.
