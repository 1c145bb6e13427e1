%%% Helpers of the recorder suites (dtrace_recorder_SUITE,
%%% dtrace_recorder_relay_SUITE, dtrace_recorder_user_SUITE; what their
%%% cases share on the test's node is dtrace_test_recorder_cases'): the
%%% skip/fail policy (skip locally saying why, fail with CI=true), peer
%%% nodes (as root, or as an unprivileged user), traces read back with
%%% babeltrace2 (its CLI: the suites check the recorder's files with a
%%% reader other than the report's), and the workloads the peers run.
%%%
%%% A few helpers are copies of dtrace_test_lib's and dtrace_test_lttng's
%%% (kept apart so that the two can change independently).
-module(dtrace_test_recorder).

-export([in_ci/0, require/1, run/2, run/3, wait_until/3,
         start_peer/1, stop_peer/1, read_trace/1, tags_in/1,
         lttng_names/2, lttng_names/1, as_user/2,
         free_ports/1, start_relayd/3, stop_relayd/1, relay_url/1]).
%% In the peers.
-export([requests/3, request/3, storm/3, relay/0, cross_request/3, busy_loop/1, spin_until_stopped/1]).

-define(TIMEOUT, 60000).

in_ci() ->
    os:getenv("CI") =:= "true".

%% ok when What can be tested here, else {skip, Why} (locally) or a
%% failure (CI=true). What: root_lttng (lttng-tools, babeltrace2,
%% python3-bt2, root, a root session daemon, started here when none runs)
%% or user (root too, to create the user; useradd and setpriv).
require(What) ->
    Why = case missing(What) of
              [] -> ok;
              Missing -> lists:flatten(lists:join("; ", Missing))
          end,
    case {Why, in_ci()} of
        {ok, _} -> ok;
        {_, true} -> ct:fail("CI=true and ~ts", [Why]);
        {_, false} -> {skip, Why}
    end.

missing(root_lttng) ->
    Cmds = [io_lib:format("~s is not installed (Debian: lttng-tools, babeltrace2)", [C])
            || C <- ["lttng", "lttng-sessiond", "lttng-relayd", "babeltrace2"], os:find_executable(C) =:= false],
    Bt2 = case run("/usr/bin/python3", ["-c", "import bt2"]) of
              {0, _} -> [];
              _ -> ["python3-bt2 is not installed (apt-get install python3-bt2)"]
          end,
    Root = case string:trim(os:cmd("id -u")) of
               "0" -> [];
               _ -> ["the recorder's tests need root: a root session daemon shared with "
                     "the test's nodes, and a user of its own created by the test"]
           end,
    case Cmds ++ Bt2 ++ Root of
        [] -> sessiond();
        M -> M
    end;
missing(user) ->
    [io_lib:format("~s is not installed", [C]) || C <- ["useradd", "userdel", "setpriv"],
                                                  os:find_executable(C) =:= false].

%% A root session daemon: the running one, or one started now.
sessiond() ->
    case run("pgrep", ["-x", "lttng-sessiond"]) of
        {0, _} ->
            [];
        _ ->
            case run("lttng-sessiond", ["--daemonize"]) of
                {0, _} -> [];
                {_, Out} -> [io_lib:format("lttng-sessiond --daemonize failed: ~p", [Out])]
            end
    end.

run(Exe, Args) ->
    run(Exe, Args, []).

%% Runs Exe (a path or a name in PATH) with Args: {ExitStatus, Lines}.
%% Opts: {env, Env}.
run(Exe, Args, Opts) ->
    Path = case lists:member($/, Exe) of
               true -> Exe;
               false -> os:find_executable(Exe)
           end,
    case Path of
        false ->
            {127, [<<"not found">>]};
        _ ->
            Port = open_port({spawn_executable, Path},
                             [{args, Args}, {line, 65536}, stderr_to_stdout, exit_status, binary
                              | [{env, E} || {env, E} <- Opts]]),
            collect(Port, [])
    end.

collect(Port, Acc) ->
    receive
        {Port, {data, {eol, Line}}} -> collect(Port, [Line | Acc]);
        {Port, {data, {noeol, Part}}} -> collect(Port, [Part | Acc]);
        {Port, {exit_status, Status}} -> {Status, lists:reverse(Acc)}
    after ?TIMEOUT ->
            try port_close(Port) catch error:badarg -> true end,
            ct:fail("command did not end within ~p ms: ~p", [?TIMEOUT, lists:reverse(Acc)])
    end.

%% Calls Fun() until it returns true or {true, Value}, at most Ms
%% milliseconds: ok / {ok, Value}; fails the test with What otherwise.
wait_until(Fun, Ms, What) ->
    wait_until(Fun, erlang:monotonic_time(millisecond) + Ms, What, undefined).

wait_until(Fun, Deadline, What, _Last) ->
    case Fun() of
        true -> ok;
        {true, V} -> {ok, V};
        Last ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true -> ct:fail("timed out waiting for ~ts; last: ~p", [What, Last]);
                false -> timer:sleep(20), wait_until(Fun, Deadline, What, Last)
            end
    end.

%% A peer node with this library and this module, the NIF loaded and the
%% dtrace application started. Opts: name (a prefix: a distributed node
%% with a random suffix, sname), cookie, user ({User, Home}: the node runs
%% as User with HOME=Home, through setpriv), env. Returns {Peer, Node}.
start_peer(Opts) ->
    Paths = lists:usort([filename:dirname(code:which(M)) || M <- [dtrace, ?MODULE]]),
    Args = lists:append([["-pa", P] || P <- Paths])
        ++ case maps:find(cookie, Opts) of
               {ok, C} -> ["-setcookie", C];
               error -> []
           end,
    Base = #{connection => standard_io, args => Args, env => maps:get(env, Opts, [])},
    Named = case maps:find(name, Opts) of
                {ok, Prefix} -> Base#{name => peer:random_name(Prefix), longnames => false};
                error -> Base
            end,
    Exec = case maps:find(user, Opts) of
               {ok, {User, Home}} ->
                   Named#{exec => {os:find_executable("setpriv"),
                                   as_user(User, Home) ++ [os:find_executable("erl")]}};
               error ->
                   Named
           end,
    {ok, Peer, Node} = peer:start_link(Exec),
    true = peer:call(Peer, dtrace, available, []),
    {ok, _} = peer:call(Peer, application, ensure_all_started, [dtrace]),
    {Peer, Node}.

%% setpriv arguments that run the rest as User with HOME=Home (exec all
%% the way: the OS pid is the command's).
as_user(User, Home) ->
    ["--reuid=" ++ User, "--regid=" ++ User, "--init-groups", "--",
     "/usr/bin/env", "HOME=" ++ Home, "LTTNG_HOME=" ++ Home].

stop_peer(Peer) ->
    try peer:stop(Peer) catch _:_ -> ok end.

%% The events of the trace(s) under Path, read with the babeltrace2 CLI:
%% [{Event, #{Field => Value}}] in time order (names binaries; values
%% integers or binaries).
read_trace(Path) ->
    case run("babeltrace2", [Path]) of
        {0, Lines} -> [E || L <- Lines, {ok, E} <- [event(L)]];
        {_, Lines} -> ct:fail("babeltrace2 ~ts: ~p", [Path, lists:sublist(Lines, 20)])
    end.

%% The user tags of Events (org_erlang_dtrace events with a user_tag).
tags_in(Events) ->
    lists:usort([T || {_, #{<<"user_tag">> := T}} <- Events, T =/= <<"(null)">>]).

%% The recorder's sessions and triggers the session daemon has for the
%% node of OS process OsPid: {Sessions, Triggers}. Run as root, or
%% through Setpriv args (as_user/2) for a user's daemon.
lttng_names(OsPid) ->
    lttng_names(OsPid, []).

lttng_names(OsPid, Prefix) ->
    {Exe, Pre} = case Prefix of
                     [] -> {"lttng", []};
                     _ -> {os:find_executable("setpriv"), Prefix ++ [os:find_executable("lttng")]}
                 end,
    {0, S} = run(Exe, Pre ++ ["--mi", "xml", "list"]),
    {0, T} = run(Exe, Pre ++ ["--mi", "xml", "list-triggers"]),
    Names = fun(Lines, Tag) ->
                    Xml = iolist_to_binary(Lines),
                    [N || P <- tl(binary:split(Xml, Tag, [global])),
                          [N | _] <- [binary:split(P, <<"</name>">>)],
                          pid_of(N) =:= OsPid]
            end,
    {Names(S, <<"<session><name>">>), Names(T, <<"<trigger><name>">>)}.

pid_of(Name) ->
    case dtrace_recorder_session:owner(Name) of
        {_, _, _, Pid} -> Pid;
        other -> none
    end.

%%% Relay daemons

%% N TCP ports of 127.0.0.1 that nothing listens on now.
free_ports(N) ->
    Socks = [begin {ok, S} = gen_tcp:listen(0, [{ip, {127, 0, 0, 1}}]), S end || _ <- lists:seq(1, N)],
    Ports = [begin {ok, P} = inet:port(S), P end || S <- Socks],
    [gen_tcp:close(S) || S <- Socks],
    Ports.

%% An lttng-relayd writing under Out, listening on 127.0.0.1 at Ports
%% ([Control, Data, Live]), in the foreground as a port owned by a process
%% of its own (it outlives the caller; stop_relayd/1 kills it by its OS
%% pid). Prefix: setpriv arguments to run it as a user (as_user/2), or [].
%% Returns once the control port accepts connections: #{os_pid, ports,
%% owner}.
start_relayd(Out, [C, D, L] = Ports, Prefix) ->
    Relayd = os:find_executable("lttng-relayd"),
    Args = ["-o", Out, "-C", url(C), "-D", url(D), "-L", url(L)],
    {Exe, Argv} = case Prefix of
                      [] -> {Relayd, Args};
                      _ -> {os:find_executable("setpriv"), Prefix ++ [Relayd | Args]}
                  end,
    Home = filename:dirname(Out),
    Self = self(),
    Owner = spawn(fun() ->
                          Port = open_port({spawn_executable, Exe},
                                           [{args, Argv}, exit_status, binary, stderr_to_stdout,
                                            {env, [{"LTTNG_HOME", Home}]}]),
                          {os_pid, Pid} = erlang:port_info(Port, os_pid),
                          Self ! {relayd, self(), Pid},
                          relayd_owner(Port)
                  end),
    OsPid = receive {relayd, Owner, P} -> P after ?TIMEOUT -> ct:fail("lttng-relayd did not start") end,
    %% Whatever happens to the test case, end_per_testcase kills it.
    ok = file:write_file(filename:join(Home, "relayd.pids"), [integer_to_list(OsPid), "\n"], [append]),
    wait_until(fun() ->
                       case gen_tcp:connect({127, 0, 0, 1}, C, [], 500) of
                           {ok, S} -> gen_tcp:close(S), true;
                           Error -> Error
                       end
               end, 10000, "lttng-relayd listening"),
    #{os_pid => OsPid, ports => Ports, owner => Owner}.

url(Port) ->
    "tcp://127.0.0.1:" ++ integer_to_list(Port).

relayd_owner(Port) ->
    receive
        {Port, {exit_status, S}} -> ct:log("lttng-relayd exited: ~p", [S]);
        {Port, {data, Out}} -> ct:log("lttng-relayd: ~ts", [Out]), relayd_owner(Port)
    end.

%% Stops relay daemon Relay (SIGKILL by its OS pid) and waits until it
%% is gone. With a directory: every relay daemon start_relayd/3 started
%% with its output in it (their pids are in DIR/relayd.pids) and still
%% running.
stop_relayd(#{os_pid := Pid}) ->
    P = integer_to_list(Pid),
    _ = run("kill", ["-KILL", P]),
    wait_until(fun() -> not filelib:is_dir("/proc/" ++ P) end, 10000, "lttng-relayd gone");
stop_relayd(Dir) ->
    case file:read_file(filename:join(Dir, "relayd.pids")) of
        {ok, Bin} ->
            [case file:read_file("/proc/" ++ P ++ "/cmdline") of
                 {ok, Cmd} ->
                     _ = binary:match(Cmd, <<"lttng-relayd">>) =/= nomatch
                         andalso stop_relayd(#{os_pid => list_to_integer(P)}),
                     ok;
                 {error, _} ->
                     ok
             end || P <- string:lexemes(binary_to_list(Bin), "\n")],
            ok;
        {error, _} ->
            ok
    end.

%% The recorder's relay option for Relay.
relay_url(#{ports := [C, D, _]}) ->
    "net://127.0.0.1:" ++ integer_to_list(C) ++ ":" ++ integer_to_list(D).

%%% babeltrace2's text output (fields read by dtrace_test_lttng)
%%% [08:21:32.630255804] (+0.000009680) host provider:event: { cpu_id = 1 }, { vpid = 12 }, { f1 = 1, f2 = "x" }

event(<<"[", _/binary>> = Line) ->
    case binary:split(Line, <<": { cpu_id = ">>) of
        [Head, Tail] ->
            %% cpu_id, the context (vpid) and the payload, in one map.
            [_Time, _Delta, _Host, Event] = binary:split(Head, <<" ">>, [global, trim_all]),
            Body = binary:replace(<<"cpu_id = ", Tail/binary>>, <<" }, { ">>, <<", ">>, [global]),
            {ok, {Event, dtrace_test_lttng:fields(Body, #{})}};
        [_] ->
            skip
    end;
event(_) ->
    skip.

%%% Workloads, in the peers

%% Requests 1..N, each tagged "req-I": a span `request' around a span
%% `db' that writes a file through dtrace_file; request Slow (0 for none)
%% sleeps 30 ms inside. Returns the monotonic time (ms) at which the slow
%% one ended, or undefined.
requests(N, Slow, Dir) ->
    ok = filelib:ensure_path(Dir),
    lists:foldl(fun(I, Acc) ->
                        request(I, I =:= Slow, Dir),
                        case I =:= Slow of
                            true -> erlang:monotonic_time(millisecond);
                            false -> Acc
                        end
                end, undefined, lists:seq(1, N)).

request(I, Slow, Dir) ->
    _ = dtrace:put_tag(["req-", integer_to_list(I)]),
    dtrace:span(request,
                fun() ->
                        dtrace:span(db, fun() ->
                                                ok = dtrace_file:write_file(filename:join(Dir, "kv"), <<I:32>>)
                                        end),
                        Slow andalso timer:sleep(30)
                end),
    _ = dtrace:put_tag(undefined),
    ok.

%% N requests that each take Ms ms, started Every ms apart, each firing
%% dtrace:pn(900, I, LatencyUs) when done (the application's own "slow
%% request" probe). Returns when all are done.
storm(N, Ms, Every) ->
    Self = self(),
    Pids = [begin
                timer:sleep(Every),
                spawn(fun() ->
                              _ = dtrace:put_tag(["storm-", integer_to_list(I)]),
                              T0 = erlang:monotonic_time(microsecond),
                              dtrace:span(request, fun() -> timer:sleep(Ms) end),
                              _ = dtrace:pn(900, I, erlang:monotonic_time(microsecond) - T0),
                              Self ! {done, self()}
                      end)
            end || I <- lists:seq(1, N)],
    [receive {done, P} -> ok end || P <- Pids],
    ok.

%% A relay: a registered process that does a span of work (with a file
%% operation) for each {hop, From, Ref, Next} it receives, passes the
%% request on to Next (a list of {relay, Node}), and answers From.
relay() ->
    receive
        {hop, From, Ref, Next} ->
            dtrace:span(hop, fun() ->
                                     Dir = filename:join(os:getenv("TMPDIR", "/tmp"),
                                                         "dtrace_rec_relay_" ++ os:getpid()),
                                     ok = filelib:ensure_path(Dir),
                                     ok = dtrace_file:write_file(filename:join(Dir, "hop"), <<"hop">>),
                                     ok = dtrace_file:delete(filename:join(Dir, "hop")),
                                     case Next of
                                         [To | Rest] ->
                                             R = make_ref(),
                                             To ! {hop, self(), R, Rest},
                                             receive {R, done} -> ok end;
                                         [] ->
                                             ok
                                     end
                             end),
            From ! {Ref, done},
            relay();
        stop ->
            ok
    end.

%% A request tagged Tag that goes through the relays Path (a list of
%% {relay, Node}) with its tag spreading, then asks the cluster for a
%% snapshot from inside the request (the tag rides along).
cross_request(Tag, Path, Reason) ->
    _ = dtrace:put_tag(Tag),
    State = dtrace:spread_tag(true),
    dtrace:span(request, fun() ->
                                 [To | Rest] = Path,
                                 R = make_ref(),
                                 To ! {hop, self(), R, Rest},
                                 receive {R, done} -> ok end
                         end),
    dtrace:restore_tag(State),
    ok = dtrace_recorder:trigger_cluster(Reason),
    _ = dtrace:put_tag(undefined),
    ok.

%% Fires dtrace:p/4 in a loop until told to stop; answers {calls, N}.
busy_loop(Name) ->
    Pid = spawn(fun() -> spin(0) end),
    register(Name, Pid),
    ok.

spin(N) ->
    _ = dtrace:p(1, N, "busy", "loop"),
    receive
        {stop, From} -> From ! {calls, N}
    after 0 ->
            N rem 1000 =:= 0 andalso timer:sleep(1),
            spin(N + 1)
    end.

spin_until_stopped(Name) ->
    Name ! {stop, self()},
    receive {calls, N} -> N after 5000 -> timeout end.
