%%% priv/bin/dtrace-doctor, "why is my probe silent", as an operator runs it on
%%% the host: each failure a test can provoke here shows its own line with
%%% its fix (a node that has not loaded the library, a library replaced
%%% under a running node, no privileges, bpftrace too old for arg6), and a
%%% healthy node names the probes a tracer listens to. The container's
%%% host pid: dtrace_container_SUITE.
-module(dtrace_doctor_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_suite/1, end_per_suite/1, init_per_testcase/2, end_per_testcase/2]).
-export([healthy_node_and_a_listening_probe/1, library_not_loaded/1, library_replaced_under_the_node/1,
         no_privileges/1, bpftrace_version_and_its_argument_limit/1, the_nodes_own_view/1,
         application_stopped/1, perf_cache_without_events/1]).

suite() ->
    [{timetrap, {minutes, 3}}].

all() ->
    [healthy_node_and_a_listening_probe, library_not_loaded, library_replaced_under_the_node,
     no_privileges, bpftrace_version_and_its_argument_limit, the_nodes_own_view, application_stopped,
     perf_cache_without_events].

init_per_suite(Config) ->
    case {string:trim(os:cmd("id -u")), os:find_executable("python3"), os:find_executable("readelf")} of
        {"0", P, R} when P =/= false, R =/= false -> Config;
        Why -> unavailable(io_lib:format("the doctor's tests need root, python3 and readelf: ~p", [Why]))
    end.

end_per_suite(_Config) ->
    ok.

unavailable(Why) ->
    case dtrace_test_tracer:in_ci() of
        true -> ct:fail("CI=true and ~ts", [Why]);
        false -> {skip, lists:flatten(Why)}
    end.

init_per_testcase(library_not_loaded, Config) ->
    %% A node with the library's code path that never called it.
    Paths = lists:usort([filename:dirname(code:which(M)) || M <- [dtrace, dtrace_test_peer]]),
    {ok, Peer, _} = peer:start_link(#{connection => standard_io, args => lists:append([["-pa", P] || P <- Paths])}),
    [{peer, Peer} | Config];
init_per_testcase(library_replaced_under_the_node, Config) ->
    %% A copy of the application (ebin and priv, links followed), loaded
    %% by a node from there.
    Copy = filename:join(?config(priv_dir, Config), "dtrace"),
    App = filename:dirname(filename:dirname(code:which(dtrace))),
    ok = filelib:ensure_path(Copy),
    [{0, _} = dtrace_test_tracer:run("cp", ["-rL", filename:join(App, D), filename:join(Copy, D)])
     || D <- ["ebin", "priv"]],
    Test = filename:dirname(code:which(dtrace_test_peer)),
    {ok, Peer, _} = peer:start_link(#{connection => standard_io,
                                      args => ["-pa", filename:join(Copy, "ebin"), "-pa", Test]}),
    true = peer:call(Peer, dtrace, available, []),
    [{peer, Peer}, {copy, Copy} | Config];
init_per_testcase(_TC, Config) ->
    Peer = dtrace_test_peer:start_peer(),
    {ok, _} = peer:call(Peer, application, ensure_all_started, [dtrace]),
    [{peer, Peer} | Config].

end_per_testcase(_TC, Config) ->
    dtrace_test_peer:stop_peer(?config(peer, Config)).

%%--------------------------------------------------------------------

%% A node with the application: process, library, its 1028 notes are ok,
%% no FAIL line, exit 0; with bpftrace attached to one probe, the
%% semaphores line names that probe.
healthy_node_and_a_listening_probe(Config) ->
    Peer = ?config(peer, Config),
    OsPid = dtrace_test_peer:os_pid(Peer),
    {0, Lines} = doctor(OsPid, []),
    Count = integer_to_binary(length(dtrace_test_catalogue:catalogue())),
    ?assert(has(Lines, <<"ok   process     ", (list_to_binary(OsPid))/binary, " is beam.smp">>)),
    ?assert(has(Lines, <<"ok   library">>)),
    ?assert(has(Lines, <<"ok   notes       ", Count/binary, " SDT probes (provider erlang)">>)),
    ?assert(has(Lines, <<"no probe has a tracer now">>)),
    ?assertNot(has(Lines, <<"FAIL">>)),
    case dtrace_test_tracer:require_tracer(bpftrace) of
        ok ->
            T = dtrace_test_tracer:bpftrace_start(OsPid, "usdt:$SO:erlang:user_trace__n7 { @n = count(); }"),
            try
                1 = peer:call(Peer, dtrace_test_workload, fire_until_true, [fun() -> dtrace:pn(7) end]),
                {0, Lines2} = doctor(OsPid, []),
                ?assert(has(Lines2, <<"1 probe(s) have a tracer now: user_trace__n7 (1)">>), Lines2)
            after
                dtrace_test_tracer:bpftrace_stop(T)
            end;
        {skip, _} ->
            ok
    end.

%% The library mapped but its application stopped (as an unload by hand
%% leaves it): the doctor asks automatic mode through bpftrace, gets no
%% answer and says so, with the fix; running, it answers.
application_stopped(Config) ->
    case dtrace_test_tracer:require_tracer(bpftrace) of
        ok ->
            Peer = ?config(peer, Config),
            OsPid = dtrace_test_peer:os_pid(Peer),
            {0, Running} = doctor(OsPid, []),
            ?assert(has(Running, <<"ok   application the dtrace application runs">>)),
            ok = peer:call(Peer, application, stop, [dtrace]),
            {0, Stopped} = doctor(OsPid, []),
            ?assert(has(Stopped, <<"warn application the library is mapped but the dtrace application does not run">>)),
            ?assert(has(Stopped, <<"fix: application:ensure_all_started(dtrace) in the node, or priv/bin/dtrace-attach NODE">>));
        Skip ->
            Skip
    end.

library_not_loaded(Config) ->
    OsPid = peer:call(?config(peer, Config), os, getpid, []),
    {1, Lines} = doctor(OsPid, []),
    ?assert(has(Lines, <<"FAIL library     the node has not loaded dtrace_nif.so">>)),
    ?assert(has(Lines, <<"fix: start the dtrace application">>)).

%% The library copied over by a new build while the node runs: a new file
%% (new inode) under the path the node mapped.
library_replaced_under_the_node(Config) ->
    OsPid = peer:call(?config(peer, Config), os, getpid, []),
    So = filename:join([?config(copy, Config), "priv", "dtrace_nif.so"]),
    {0, _} = dtrace_test_tracer:run("cp", [So, So ++ ".new"]),
    ok = file:rename(So ++ ".new", So),
    {1, Lines} = doctor(OsPid, []),
    ?assert(has(Lines, <<"FAIL library     ", (list_to_binary(So))/binary,
                         ": the node runs a file that is no longer on disk">>), Lines),
    ?assert(has(Lines, <<"fix: restart the node">>)),
    %% The node says the same of itself.
    {error, [library]} = peer:call(?config(peer, Config), dtrace, doctor, []).

%% As a user without privileges: the first line says so, with the fix.
no_privileges(Config) ->
    OsPid = dtrace_test_peer:os_pid(?config(peer, Config)),
    Setpriv = os:find_executable("setpriv"),
    ?assertNotEqual(false, Setpriv),
    {1, Lines} = dtrace_test_tracer:run(Setpriv, ["--reuid=65534", "--regid=65534", "--clear-groups",
                                                  "--inh-caps=-all", "--bounding-set=-all",
                                                  doctor_path(), OsPid]),
    ct:log("~ts", [lists:join("\n", Lines)]),
    ?assert(has(Lines, <<"FAIL privileges  uid 65534 without CAP_BPF+CAP_PERFMON+CAP_SYS_PTRACE">>)),
    ?assert(has(Lines, <<"fix: run the tracer (and this) as root">>)).

%% bpftrace before 0.24 on x86_64 reads arg0..arg5 only: the doctor names
%% the wrapper. A bpftrace that says 0.24 gets no such line.
bpftrace_version_and_its_argument_limit(Config) ->
    OsPid = dtrace_test_peer:os_pid(?config(peer, Config)),
    Stub = fun(Version) ->
                   F = filename:join(?config(priv_dir, Config), "bpftrace-" ++ Version),
                   ok = file:write_file(F, ["#!/bin/sh\necho 'bpftrace v", Version, "'\n"]),
                   ok = file:change_mode(F, 8#755),
                   F
           end,
    {_, Old} = doctor(OsPid, [{"BPFTRACE", Stub("0.17.0")}]),
    {_, New} = doctor(OsPid, [{"BPFTRACE", Stub("0.24.1")}]),
    case erlang:system_info(system_architecture) of
        "x86_64" ++ _ ->
            ?assert(has(Old, <<"warn bpftrace    0.17.0 reads USDT arguments arg0..arg5 only on x86_64">>), Old),
            ?assert(has(Old, <<"fix: priv/bin/dtrace-bpftrace">>));
        _ ->
            ok
    end,
    ?assert(has(New, <<"ok   bpftrace    0.24.1">>), New).

%% dtrace:doctor/0,1 in the node: ok on a healthy node; manual mode and
%% a stopped application are warnings with their fix; a probe with a
%% tracer is listed.
the_nodes_own_view(Config) ->
    Peer = ?config(peer, Config),
    ok = peer:call(Peer, dtrace, doctor, []),
    Find = fun(Check) -> [F || #{check := C} = F <- peer:call(Peer, dtrace, doctor, [#{}]), C =:= Check] end,
    ?assertMatch([#{level := ok}], Find(library)),
    ?assertMatch([#{level := ok}], Find(sdt)),
    ?assertMatch([#{level := ok, text := <<"automatic mode", _/binary>>}], Find(vm_probes)),
    ok = peer:call(Peer, dtrace, vm_probes, [manual]),
    ?assertMatch([#{level := warn, fix := <<"dtrace:vm_probes(auto)">>}], Find(vm_probes)),
    ok = peer:call(Peer, application, stop, [dtrace]),
    ?assertMatch([#{level := warn, fix := <<"application:ensure_all_started(dtrace)">>}], Find(vm_probes)),
    case dtrace_test_tracer:require_tracer(bpftrace) of
        ok ->
            T = dtrace_test_tracer:bpftrace_start(dtrace_test_peer:os_pid(Peer),
                                                  "usdt:$SO:erlang:user_trace__n7 { @n = count(); }"),
            try
                1 = peer:call(Peer, dtrace_test_workload, fire_until_true, [fun() -> dtrace:pn(7) end]),
                ?assertMatch([#{level := info, text := <<"1 with a tracer now: user_trace__n7">>}],
                             Find(listening))
            after
                dtrace_test_tracer:bpftrace_stop(T)
            end;
        {skip, _} ->
            ok
    end.

%%--------------------------------------------------------------------

%% perf's build-id cache with another copy of the same build added first
%% (two releases, an upgrade into a new directory): the node's copy, added
%% second, has no list of SDT events, and `perf probe -x' on it fails. The
%% doctor names it; after its fix (purge, add again) it says ok.
perf_cache_without_events(Config) ->
    case os:find_executable("perf") of
        false -> unavailable("no perf (linux-perf)");
        _ ->
            OsPid = dtrace_test_peer:os_pid(?config(peer, Config)),
            {ok, Maps} = file:read_file("/proc/" ++ OsPid ++ "/maps"),
            [Lib | _] = [P || L <- string:lexemes(binary_to_list(Maps), "\n"),
                              P <- [lists:last(string:lexemes(L, " "))], filename:basename(P) =:= "dtrace_nif.so"],
            Priv = ?config(priv_dir, Config),
            Cache = filename:join(Priv, "perf-cache"),
            Other = filename:join([Priv, "other-release", "dtrace_nif.so"]),
            ok = filelib:ensure_dir(Other),
            {ok, _} = file:copy(Lib, Other),
            Perf = fun(Args) -> {0, _} = dtrace_test_tracer:run("perf", ["--buildid-dir", Cache, "buildid-cache" | Args]) end,
            Env = [{"PERF_BUILDID_DIR", Cache}],
            {0, Empty} = doctor(OsPid, Env),
            ?assert(has(Empty, iolist_to_binary(["ok   perf-cache  ", Cache, " has no entry for the library's build id"]))),
            Perf(["--add", Other]),
            Perf(["--add", Lib]),
            {0, Stale} = doctor(OsPid, Env),
            ?assert(has(Stale, iolist_to_binary(["warn perf-cache  ", Cache, " has the library's build id "]))),
            ?assert(has(Stale, iolist_to_binary(["but no SDT events for ", Lib, ": `perf probe -x ", Lib]))),
            ?assert(has(Stale, iolist_to_binary(["perf buildid-cache --purge ", Lib, ", then add it again"]))),
            Perf(["--purge", Lib]),
            Perf(["--add", Lib]),
            {0, Fixed} = doctor(OsPid, Env),
            ?assert(has(Fixed, iolist_to_binary(["ok   perf-cache  ", Cache, " lists the SDT events of ", Lib])))
    end.

doctor_path() ->
    filename:join([code:priv_dir(dtrace), "bin", "dtrace-doctor"]).

doctor(OsPid, Env) ->
    {Status, Lines} = dtrace_test_recorder:run(doctor_path(), [OsPid], [{env, Env}]),
    ct:log("dtrace-doctor ~s (exit ~p):~n~ts", [OsPid, Status, lists:join("\n", Lines)]),
    {Status, Lines}.

has(Lines, Part) ->
    lists:any(fun(L) -> binary:match(L, Part) =/= nomatch end, Lines).
