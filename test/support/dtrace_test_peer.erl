%%% Test helper: traced peer nodes. A tracer attaches to a peer's OS
%%% process, so that gdb stopping it never stops the test runner.
-module(dtrace_test_peer).

-export([with_dtrace_peer/1, stop_config_peer/1, start_peer/0, start_peer/1, start_named_peer/3, start_named_peer/4, stop_peer/1, stop_peer/2, os_pid/1,
         start_test_hooks_peer/0, test_hooks_nif/0]).

%% Config with a peer running the dtrace application, {peer, Peer} and
%% {os_pid, OsPid}, when bpftrace can attach; else what
%% dtrace_test_tracer:require_tracer/1 says (a skip here, a failure in CI).
%% For init_per_testcase/2; stop_config_peer/1 is its end_per_testcase/2.
with_dtrace_peer(Config) ->
    case dtrace_test_tracer:require_tracer(bpftrace) of
        ok ->
            Peer = start_peer(),
            {ok, _} = peer:call(Peer, application, ensure_all_started, [dtrace]),
            [{peer, Peer}, {os_pid, os_pid(Peer)} | Config];
        Skip ->
            Skip
    end.

%% Stops Config's peer, when it has one.
stop_config_peer(Config) ->
    case proplists:get_value(peer, Config) of
        undefined -> ok;
        Peer -> stop_peer(Peer)
    end.

%% A separate node to trace, so that a tracer stopping the traced OS
%% process (gdb) never stops the test runner. No distribution is needed:
%% the peer is driven over its standard input/output.
start_peer() ->
    start_peer([]).

start_peer(ExtraArgs) ->
    Paths = lists:usort([filename:dirname(code:which(M)) || M <- [dtrace, ?MODULE]]),
    Args = lists:append([["-pa", P] || P <- Paths]) ++ ExtraArgs,
    {ok, Peer, _Node} = peer:start_link(#{connection => standard_io, args => Args, wait_boot => wait_boot()}),
    %% Load the NIF before any tracer attaches: `bpftrace -p' finds the
    %% probes in the libraries the process has mapped.
    true = peer:call(Peer, dtrace, available, [], wait_boot()),
    Peer.

%% A distributed peer named Prefix plus a random suffix, with Cookie and
%% the code paths of this library, this module and Modules, the NIF loaded.
%% Returns {Peer, Node}. For cases that connect two nodes.
start_named_peer(Prefix, Cookie, Modules) ->
    start_named_peer(Prefix, Cookie, Modules, []).

%% The same with ExtraArgs for erl (emulator flags such as "+zdbbl").
start_named_peer(Prefix, Cookie, Modules, ExtraArgs) ->
    Paths = lists:usort([filename:dirname(code:which(M)) || M <- [dtrace, ?MODULE | Modules]]),
    Args = ["-setcookie", Cookie | lists:append([["-pa", P] || P <- Paths])] ++ ExtraArgs,
    {ok, Peer, Node} = peer:start_link(#{name => peer:random_name(Prefix), longnames => false,
                                         connection => standard_io, args => Args, wait_boot => wait_boot()}),
    true = peer:call(Peer, dtrace, available, [], wait_boot()),
    {Peer, Node}.

%% How long a peer may take to boot (peer's default, 15 s, on a quiet host),
%% and to answer this helper's calls that load the NIF:
%% longer on a slow one or in a QEMU guest (dtrace_test_tracer:ceiling/1).
wait_boot() ->
    dtrace_test_tracer:ceiling(15000).

stop_peer(Peer) ->
    try peer:stop(Peer) catch _:_ -> ok end.

%% Stops Peer and waits until its OS process OsPid (a string, os_pid/1) is
%% gone from /proc. A system-wide DTrace (erlang*:::) started while a node
%% with the library exits fails with "failed to grab process PID": DTrace
%% 2.0 grabs every process whose DOF dtprobed holds, and one still exiting
%% cannot be grabbed (docs/tracers.md). The next case's DTrace must not
%% meet the last case's peer. A node halting flushes its ports first, so
%% one that a port program never reads from can take as long as that
%% program lives: after wait_boot() it is killed (SIGKILL), and waited for
%% again.
stop_peer(Peer, OsPid) ->
    ok = stop_peer(Peer),
    Gone = fun() -> not filelib:is_file("/proc/" ++ OsPid) end,
    case dtrace_test_workload:wait_until(Gone, wait_boot()) of
        ok ->
            ok;
        timeout ->
            ct:log("peer ~s still there ~b ms after it was stopped: killed", [OsPid, wait_boot()]),
            _ = os:cmd("kill -KILL " ++ OsPid),
            ok = dtrace_test_workload:wait_until(Gone, wait_boot())
    end.

os_pid(Peer) ->
    peer:call(Peer, os, getpid, [], wait_boot()).

%% A peer that loads the library built with the cargo feature test-hooks
%% (dtrace_nif:test_panic/0, test_allocations/0), from the application
%% directory scripts/test-hooks-build.sh makes (scripts/ct.sh runs it
%% before the suites).
start_test_hooks_peer() ->
    AppDir = test_hooks_app(),
    Paths = lists:usort([filename:dirname(code:which(M)) || M <- [?MODULE, dtrace_props]]),
    {ok, Peer, _} = peer:start_link(#{connection => standard_io, wait_boot => wait_boot(),
                                      args => ["-pa", filename:join(AppDir, "ebin")
                                               | lists:append([["-pa", P] || P <- Paths])]}),
    true = peer:call(Peer, dtrace, available, [], wait_boot()),
    Peer.

%% The test-hooks library's path, for tracers.
test_hooks_nif() ->
    filename:join([test_hooks_app(), "priv", "dtrace_nif.so"]).

%% _build/test_hooks/dtrace (a path bpftrace can name: CT's log
%% directories contain an @, which bpftrace reads as a map).
test_hooks_app() ->
    Base = case os:getenv("REBAR_BASE_DIR") of
               false -> filename:join(dtrace_test_catalogue:repo_root(), "_build");
               Dir -> Dir
           end,
    AppDir = filename:join([Base, "test_hooks", "dtrace"]),
    filelib:is_regular(filename:join([AppDir, "priv", "dtrace_nif.so"]))
        orelse ct:fail("~ts has no test-hooks library: run scripts/test-hooks-build.sh "
                       "(scripts/ct.sh does)", [AppDir]),
    AppDir.
