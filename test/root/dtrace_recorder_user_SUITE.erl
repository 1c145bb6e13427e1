%%% The flight recorder without root, with real LTTng sessions, triggers
%%% and snapshots, read back from disk: group `user', nodes run as an
%%% unprivileged user the suite creates, with that user's own
%%% lttng-sessiond, which the fault cases stop, freeze and restart (the
%%% root daemon is never touched); one case sends the snapshots to a relay
%%% daemon that stalls. The recorder as root is dtrace_recorder_SUITE's
%%% and dtrace_recorder_relay_SUITE's.
%%%
%%% Mandatory in CI (CI=true): nothing skips there; locally a case skips
%%% saying what is missing (not root, lttng-tools, python3-bt2, ...).
-module(dtrace_recorder_user_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("kernel/include/file.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2, init_per_testcase/2, end_per_testcase/2]).
-export([records_without_root/1, sessiond_stopped_mid_run/1, sessiond_hangs/1,
         unwritable_dir_as_user/1, relay_stalled_as_user/1]).

-define(T, dtrace_test_recorder).
-define(C, dtrace_test_recorder_cases).
-define(USER, "dtrace-rec-test").
%% The user's current session daemon ({Port, OsPid}), shared by the
%% group's cases: held by a process of the group's own.
-define(TAB, dtrace_recorder_suite_sessiond).

suite() ->
    [{timetrap, {minutes, 4}}].

all() ->
    [{group, user}].

groups() ->
    [{user, [], [records_without_root, sessiond_stopped_mid_run, sessiond_hangs,
                 unwritable_dir_as_user, relay_stalled_as_user]}].

init_per_suite(Config) ->
    ?C:init_suite(Config).

end_per_suite(_Config) ->
    ok.

init_per_group(user, Config) ->
    case ?T:require(user) of
        ok ->
            %% A user of the test's own: no login, a home in the test's
            %% directory, not in the tracing group (so its lttng talks to
            %% its own session daemon only).
            _ = ?T:run("userdel", [?USER]),
            {0, _} = ?T:run("useradd", ["--system", "--no-create-home", "--home-dir", "/nonexistent",
                                        "--shell", "/usr/sbin/nologin", ?USER]),
            %% A short path: the session daemon's Unix sockets live under
            %% it (108 bytes at most), so not in the CT log tree.
            Home = "/tmp/dtrace-rec-test." ++ os:getpid(),
            _ = file:del_dir_r(Home),
            ok = filelib:ensure_path(Home),
            {0, _} = ?T:run("chown", [?USER ++ ":", Home]),
            Holder = spawn(fun() -> ets:new(?TAB, [named_table, public]), receive stop -> ok end end),
            ?T:wait_until(fun() -> ets:whereis(?TAB) =/= undefined end, 5000, "the table"),
            Config1 = [{home, Home}, {as_user, ?T:as_user(?USER, Home)}, {holder, Holder} | Config],
            try start_user_sessiond(Config1) of
                _ -> Config1
            catch
                Class:Reason:Stack ->
                    %% end_per_group does not run: clean up here.
                    end_per_group(user, Config1),
                    erlang:raise(Class, Reason, Stack)
            end;
        Skip ->
            Skip
    end;
init_per_group(_, Config) ->
    Config.

end_per_group(user, Config) ->
    _ = stop_user_sessiond(),
    ?config(holder, Config) ! stop,
    %% Whatever the user still runs was started by this suite.
    case ?T:run("pgrep", ["-u", ?USER]) of
        {0, Pids} ->
            ct:log("processes of ~s left: ~p; killed", [?USER, Pids]),
            [?T:run("kill", ["-KILL", binary_to_list(P)]) || P <- Pids];
        _ ->
            ok
    end,
    _ = ?T:run("userdel", [?USER]),
    _ = file:del_dir_r(?config(home, Config)),
    ok;
end_per_group(_, _Config) ->
    ok.

init_per_testcase(relay_stalled_as_user, Config) ->
    %% The relay daemon runs as the user, writing in the user's home.
    Home = filename:join(?config(home, Config), "relay"),
    ok = filelib:ensure_path(filename:join(Home, "out")),
    {0, _} = ?T:run("chown", ["-R", ?USER ++ ":", Home]),
    ?C:start_relay(Home, ?config(as_user, Config), Config);
init_per_testcase(_TC, Config) ->
    Config.

end_per_testcase(_TC, Config) ->
    ?C:end_case(Config).

%%--------------------------------------------------------------------
%% Group user: an unprivileged node with its own session daemon

records_without_root(Config) ->
    Home = ?config(home, Config),
    {Peer, _} = ?T:start_peer(#{user => {?USER, Home}}),
    OsPid = peer:call(Peer, os, getpid, []),
    ?assertNotEqual("0", string:trim(peer:call(Peer, os, cmd, ["id -u"]))),
    Dir = filename:join(Home, "rec"),
    {ok, R} = peer:call(Peer, dtrace_recorder, start,
                        [#{dir => Dir, triggers => [{pn, 900, <<"i2 > 20000">>}], events => detail}], 60000),
    undefined = peer:call(Peer, ?T, requests, [100, 0, filename:join(Home, "work")], 60000),
    true = peer:call(Peer, dtrace, pn, [900, 1, 25000]),
    {ok, [#{path := Path}]} = ?T:wait_until(fun() -> case ?C:snapshots(Peer, R) of
                                                         [_] = S -> {true, S};
                                                         S -> S
                                                     end
                                            end, 2000, "the user's snapshot"),
    {ok, #file_info{uid = Uid}} = file:read_file_info(Path),
    ?assertNotEqual(0, Uid),
    Events = ?T:read_trace(binary_to_list(Path)),
    ?assert(length([T || <<"req-", _/binary>> = T <- ?T:tags_in(Events)]) >= 50),
    ?C:assert_contains(?C:report([Path], #{}), [<<"pn(900) when i2 > 20000">>, <<"label=900 i1=1 i2=25000">>]),
    ?assertMatch({[_], [_]}, ?T:lttng_names(OsPid, ?config(as_user, Config))),
    ok = peer:call(Peer, dtrace_recorder, stop, [R]),
    ?assertEqual({[], []}, ?T:lttng_names(OsPid, ?config(as_user, Config))),
    ok.

%% The session daemon stops while the recorder runs: the recorder says so,
%% the node and probes go on; the daemon back, it records again.
sessiond_stopped_mid_run(Config) ->
    Home = ?config(home, Config),
    {Peer, _} = ?T:start_peer(#{user => {?USER, Home}}),
    OsPid = peer:call(Peer, os, getpid, []),
    {ok, R} = peer:call(Peer, dtrace_recorder, start,
                        [#{dir => filename:join(Home, "rec"), triggers => [{pn, 900, <<>>}], check_ms => 300,
                           min_interval_ms => 0}], 60000),
    ok = peer:call(Peer, ?T, busy_loop, [busy]),
    ok = stop_user_sessiond(),
    {ok, Status} = ?T:wait_until(fun() ->
                                         case peer:call(Peer, dtrace_recorder, status, [R]) of
                                             #{phase := degraded} = S -> {true, S};
                                             S -> S
                                         end
                                 end, 5000, "the recorder noticing"),
    ct:log("without a daemon: ~p", [Status]),
    ?assertMatch(#{error := {no_session_daemon, _}}, Status),
    ?assertMatch({error, {not_recording, _}}, ?C:trigger(Peer, R, <<"no daemon">>)),
    _ = start_user_sessiond(Config),
    ?T:wait_until(fun() -> maps:get(phase, peer:call(Peer, dtrace_recorder, status, [R])) =:= running end,
                  30000, "the recorder recording again"),
    {ok, _} = ?C:trigger(Peer, R, <<"daemon back">>),
    ?assert(peer:call(Peer, ?T, spin_until_stopped, [busy]) > 0),
    ?assertMatch({[_], [_]}, ?T:lttng_names(OsPid, ?config(as_user, Config))),
    ok = peer:call(Peer, dtrace_recorder, stop, [R]),
    ?assertEqual({[], []}, ?T:lttng_names(OsPid, ?config(as_user, Config))),
    ok.

%% The session daemon hangs (SIGSTOP): lttng calls time out and are
%% killed; the recorder answers at once meanwhile; once the daemon runs
%% again, so does the recorder.
sessiond_hangs(Config) ->
    Home = ?config(home, Config),
    {Peer, _} = ?T:start_peer(#{user => {?USER, Home}}),
    OsPid = peer:call(Peer, os, getpid, []),
    {ok, R} = peer:call(Peer, dtrace_recorder, start,
                        [#{dir => filename:join(Home, "rec"), min_interval_ms => 0, timeout_ms => 1000,
                           check_ms => 500}], 60000),
    ok = peer:call(Peer, ?T, busy_loop, [busy]),
    [{sessiond, {_Port, DPid}}] = ets:lookup(?TAB, sessiond),
    {0, _} = ?T:run("kill", ["-STOP", integer_to_list(DPid)]),
    try
        T0 = erlang:monotonic_time(millisecond),
        Result = ?C:trigger(Peer, R, <<"hung">>),
        Took = erlang:monotonic_time(millisecond) - T0,
        ct:log("trigger with a stopped daemon: ~p after ~b ms", [Result, Took]),
        ?assertMatch({error, {lttng_timeout, _}}, Result),
        ?assert(Took < 5000),
        %% The recorder answers at once.
        T1 = erlang:monotonic_time(microsecond),
        _ = peer:call(Peer, dtrace_recorder, snapshots, [R]),
        _ = peer:call(Peer, dtrace_recorder, status, [R]),
        ?assert(erlang:monotonic_time(microsecond) - T1 < 200000),
        %% The timed-out lttng was killed: at most the recorder's current
        %% attempt waits on the daemon, none piles up.
        Waiting = case ?T:run("pgrep", ["-u", ?USER, "-x", "lttng"]) of
                      {0, Pids} -> Pids;
                      {1, _} -> []
                  end,
        ?assert(length(Waiting) =< 1)
    after
        {0, _} = ?T:run("kill", ["-CONT", integer_to_list(DPid)])
    end,
    ?T:wait_until(fun() ->
                          maps:get(phase, peer:call(Peer, dtrace_recorder, status, [R])) =:= running
                              andalso element(1, ?C:trigger(Peer, R, <<"running again">>)) =:= ok
                  end, 30000, "the recorder recording again"),
    ?assert(peer:call(Peer, ?T, spin_until_stopped, [busy]) > 0),
    ok = peer:call(Peer, dtrace_recorder, stop, [R]),
    ?assertEqual({[], []}, ?T:lttng_names(OsPid, ?config(as_user, Config))),
    ok.

%% A directory the user cannot write: an error, then fine again.
unwritable_dir_as_user(Config) ->
    Home = ?config(home, Config),
    {Peer, _} = ?T:start_peer(#{user => {?USER, Home}}),
    OsPid = peer:call(Peer, os, getpid, []),
    {ok, R} = peer:call(Peer, dtrace_recorder, start,
                        [#{dir => filename:join(Home, "rec"), triggers => [{pn, 900, <<>>}], min_interval_ms => 0,
                           check_ms => 300}], 60000),
    #{dir := SessionDir, triggers := Armed} = peer:call(Peer, dtrace_recorder, status, [R]),
    ok = file:change_mode(SessionDir, 8#500),
    ?assertMatch({error, _}, ?C:trigger(Peer, R, <<"unwritable">>)),
    true = peer:call(Peer, dtrace, pn, [900, 1, 1]),
    ?T:wait_until(fun() -> #{failed := F, triggers := T} = peer:call(Peer, dtrace_recorder, status, [R]),
                           F >= 2 andalso T =/= Armed
                  end, 5000, "the failed trigger snapshot counted, the trigger re-armed"),
    ?assertEqual([], ?C:snapshots(Peer, R)),
    ok = file:change_mode(SessionDir, 8#755),
    {ok, _} = ?C:trigger(Peer, R, <<"writable">>),
    true = peer:call(Peer, dtrace, pn, [900, 2, 2]),
    ?T:wait_until(fun() -> length(?C:snapshots(Peer, R)) =:= 2 end, 3000, "a trigger snapshot, writable again"),
    ok = peer:call(Peer, dtrace_recorder, stop, [R]),
    ?assertEqual({[], []}, ?T:lttng_names(OsPid, ?config(as_user, Config))),
    ok.

%%--------------------------------------------------------------------
%% Snapshots to a relay daemon, as the user

%% A relay that stops answering (SIGSTOP), under a session daemon started
%% with LTTNG_NETWORK_SOCKET_TIMEOUT (2 s): the snapshot is taken locally
%% once the daemon gives up on the relay, the recorder answers at once
%% meanwhile; the relay answering again, snapshots go there.
relay_stalled_as_user(Config) ->
    Relay = #{os_pid := RelayPid} = ?config(relay, Config),
    Home = ?config(home, Config),
    {Peer, _} = ?T:start_peer(#{user => {?USER, Home}}),
    {ok, R} = peer:call(Peer, dtrace_recorder, start,
                        [#{dir => filename:join(Home, "rec"), relay => ?T:relay_url(Relay),
                           relay_dir => filename:join(?config(relay_home, Config), "out"), min_interval_ms => 0,
                           timeout_ms => 10000}], 60000),
    #{relay := #{dir := RelayDir}, dir := LocalDir} = peer:call(Peer, dtrace_recorder, status, [R]),
    {ok, #{relay := sent}} = ?C:trigger(Peer, R, <<"answering">>),
    {0, _} = ?T:run("kill", ["-STOP", integer_to_list(RelayPid)]),
    try
        T0 = erlang:monotonic_time(millisecond),
        Self = self(),
        spawn_link(fun() -> Self ! {stalled, ?C:trigger(Peer, R, <<"stalled">>)} end),
        %% The recorder answers at once meanwhile.
        T1 = erlang:monotonic_time(microsecond),
        _ = peer:call(Peer, dtrace_recorder, status, [R]),
        _ = ?C:snapshots(Peer, R),
        ?assert(erlang:monotonic_time(microsecond) - T1 < 200000),
        Result = receive {stalled, Res} -> Res after 30000 -> ct:fail("trigger/3 with a stalled relay") end,
        Took = erlang:monotonic_time(millisecond) - T0,
        ct:log("with the relay stalled: ~p after ~b ms", [Result, Took]),
        {ok, #{relay := relay_down, path := Local}} = Result,
        ?assertEqual(LocalDir, filename:dirname(Local)),
        ?assert(Took < 10000),
        ?assertMatch(#{relay := #{state := relay_down, error := {relay_down, _, _}}},
                     peer:call(Peer, dtrace_recorder, status, [R]))
    after
        {0, _} = ?T:run("kill", ["-CONT", integer_to_list(RelayPid)])
    end,
    {ok, #{relay := sent, path := Back}} = ?C:trigger(Peer, R, <<"answering again">>),
    ?assertEqual(RelayDir, filename:dirname(Back)),
    ok = peer:call(Peer, dtrace_recorder, stop, [R]),
    ok.

%%--------------------------------------------------------------------
%% The user's session daemon

%% The user's session daemon, in the foreground as a port owned by a
%% process of its own (it must outlive the test case that starts it): the
%% port's OS pid is the daemon's (setpriv and env exec). The current one
%% is kept in an ETS table the group's cases share.
start_user_sessiond(Config) ->
    %% A relay that stops answering holds this daemon (and every lttng
    %% command) at most 2 s per connection (relay_stalled_as_user).
    Args = ?config(as_user, Config) ++ ["LTTNG_NETWORK_SOCKET_TIMEOUT=2000", os:find_executable("lttng-sessiond")],
    Self = self(),
    Owner = spawn(fun() ->
                          Port = open_port({spawn_executable, os:find_executable("setpriv")},
                                           [{args, Args}, exit_status, binary, stderr_to_stdout]),
                          {os_pid, Pid} = erlang:port_info(Port, os_pid),
                          Self ! {sessiond, self(), Port, Pid},
                          sessiond_owner(Port)
                  end),
    D = receive {sessiond, Owner, Port, Pid} -> {Port, Pid} end,
    ?T:wait_until(fun() ->
                          element(1, ?T:run(os:find_executable("setpriv"),
                                            ?config(as_user, Config) ++ [os:find_executable("lttng"), "list"]))
                              =:= 0
                  end, 10000, "the user's session daemon"),
    true = ets:insert(?TAB, {sessiond, D}),
    D.

sessiond_owner(Port) ->
    receive
        {Port, {exit_status, S}} -> ct:log("the user's lttng-sessiond exited: ~p", [S]);
        {Port, _} -> sessiond_owner(Port)
    end.

%% Stops the user's daemon (SIGTERM, by its pid) and waits for it to go.
stop_user_sessiond() ->
    case ets:lookup(?TAB, sessiond) of
        [{sessiond, {_Port, Pid}}] ->
            _ = ?T:run("kill", ["-TERM", integer_to_list(Pid)]),
            ?T:wait_until(fun() -> not filelib:is_dir("/proc/" ++ integer_to_list(Pid)) end,
                          10000, "the user's session daemon to stop"),
            true = ets:delete(?TAB, sessiond),
            ok;
        [] ->
            ok
    end.
