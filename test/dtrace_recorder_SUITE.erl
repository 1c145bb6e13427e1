%%% The flight recorder (dtrace_recorder), with real LTTng sessions,
%%% triggers and snapshots, read back from disk.
%%%
%%% - Group `root': nodes run as root against the machine's root session
%%%   daemon (shared with other suites: only sessions and triggers named
%%%   dtrace-rec-* are created, and only the test's own are removed).
%%% - Group `user': nodes run as an unprivileged user the suite creates,
%%%   with that user's own lttng-sessiond, which the fault cases stop,
%%%   freeze and restart (the root daemon is never touched).
%%%
%%% Mandatory in CI (CI=true): nothing skips there; locally a case skips
%%% saying what is missing (not root, lttng-tools, python3-bt2, ...).
-module(dtrace_recorder_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("kernel/include/file.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2, init_per_testcase/2, end_per_testcase/2]).
-export([catalogue_matches_the_nif/1, slow_request_triggers_one_snapshot/1, storm_is_rate_limited/1,
         default_events_keep_slow_spans_only/1,
         own_trigger_then_cluster_request/1, leftovers_of_dead_nodes/1, recorder_from_app_env/1,
         three_nodes_cluster_trigger/1, report_without_spans/1, bad_input/1, lttng_missing/1,
         lttng_hangs/1, recorder_killed_mid_run/1, unwritable_dir_and_full_disk/1,
         records_without_root/1, sessiond_stopped_mid_run/1, sessiond_hangs/1,
         unwritable_dir_as_user/1, relay_three_nodes_cluster_trigger/1, relay_out_of_sight/1,
         relay_disk_full/1, relay_stalled_as_user/1]).

-define(T, dtrace_test_recorder).
-define(USER, "dtrace-rec-test").
-define(LTTNG_CTX, #{lttng => "lttng", timeout => 15000}).
%% The user's current session daemon ({Port, OsPid}), shared by the
%% group's cases: held by a process of the group's own.
-define(TAB, dtrace_recorder_suite_sessiond).

suite() ->
    [{timetrap, {minutes, 4}}].

all() ->
    [{group, root}, {group, user}].

groups() ->
    [{root, [], [catalogue_matches_the_nif, slow_request_triggers_one_snapshot,
                 default_events_keep_slow_spans_only, storm_is_rate_limited,
                 own_trigger_then_cluster_request, leftovers_of_dead_nodes, recorder_from_app_env,
                 three_nodes_cluster_trigger, report_without_spans, bad_input, lttng_missing,
                 lttng_hangs, recorder_killed_mid_run, unwritable_dir_and_full_disk,
                 relay_three_nodes_cluster_trigger, relay_out_of_sight, relay_disk_full]},
     {user, [], [records_without_root, sessiond_stopped_mid_run, sessiond_hangs,
                 unwritable_dir_as_user, relay_stalled_as_user]}].

init_per_suite(Config) ->
    case ?T:require(root_lttng) of
        ok ->
            %% The library must load its LTTng sink on this machine.
            {Peer, _} = ?T:start_peer(#{}),
            Sinks = peer:call(Peer, dtrace, sinks, []),
            ?T:stop_peer(Peer),
            dtrace_test_lttng:require_sink(Sinks, Config);
        Skip ->
            Skip
    end.

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

init_per_testcase(unwritable_dir_and_full_disk, Config) ->
    mount_tmpfs(filename:join(?config(priv_dir, Config), "mnt"), Config);
init_per_testcase(relay_disk_full, Config) ->
    %% The relay daemon writes to a small tmpfs.
    Home = filename:join(?config(priv_dir, Config), "relay_disk_full"),
    case mount_tmpfs(filename:join(Home, "out"), Config) of
        {skip, _} = Skip -> Skip;
        Config1 -> start_relay(Home, [], Config1)
    end;
init_per_testcase(relay_stalled_as_user, Config) ->
    %% The relay daemon runs as the user, writing in the user's home.
    Home = filename:join(?config(home, Config), "relay"),
    ok = filelib:ensure_path(filename:join(Home, "out")),
    {0, _} = ?T:run("chown", ["-R", ?USER ++ ":", Home]),
    start_relay(Home, ?config(as_user, Config), Config);
init_per_testcase(TC, Config) when TC =:= relay_three_nodes_cluster_trigger; TC =:= relay_out_of_sight ->
    Home = filename:join(?config(priv_dir, Config), atom_to_list(TC)),
    ok = filelib:ensure_path(filename:join(Home, "out")),
    start_relay(Home, [], Config);
init_per_testcase(_TC, Config) ->
    Config.

mount_tmpfs(Mnt, Config) ->
    ok = filelib:ensure_path(Mnt),
    case ?T:run("mount", ["-t", "tmpfs", "-o", "size=8m", "tmpfs", Mnt]) of
        {0, _} ->
            [{mnt, Mnt} | Config];
        {_, Out} ->
            Why = lists:flatten(io_lib:format("cannot mount a tmpfs here (~p): the full-disk and "
                                              "read-only cases need one", [Out])),
            case ?T:in_ci() of
                true -> ct:fail("CI=true and ~ts", [Why]);
                false -> {skip, Why}
            end
    end.

%% A relay daemon of the test case's own, on free ports of 127.0.0.1,
%% writing to HOME/out (Prefix: setpriv arguments, or [] for root).
start_relay(Home, Prefix, Config) ->
    Relay = ?T:start_relayd(filename:join(Home, "out"), ?T:free_ports(3), Prefix),
    [{relay, Relay}, {relay_home, Home}, {relay_prefix, Prefix} | Config].

end_per_testcase(_TC, Config) ->
    [?T:stop_peer(P) || {peer, P} <- Config],
    case proplists:get_value(relay_home, Config) of
        undefined -> ok;
        Home -> ?T:stop_relayd(Home)
    end,
    case proplists:get_value(mnt, Config) of
        undefined -> ok;
        Mnt -> _ = ?T:run("umount", ["-l", Mnt]), ok
    end,
    ok.

%%--------------------------------------------------------------------
%% Group root

%% The catalogue options are checked against is what the NIF registers.
catalogue_matches_the_nif(_Config) ->
    {Peer, _} = ?T:start_peer(#{}),
    OsPid = peer:call(Peer, os, getpid, []),
    Ours = fun(N) -> lists:any(fun(P) -> binary:match(N, P) =:= {0, byte_size(P)} end,
                               [<<"org_erlang_dtrace:">>, <<"org_erlang_dyntrace:">>]) end,
    {ok, Registered} =
        ?T:wait_until(fun() ->
                              case dtrace_recorder_lttng:registered_events(?LTTNG_CTX, OsPid) of
                                  {ok, [_ | _] = R} -> {true, R};
                                  Other -> Other
                              end
                      end, 10000, "the node's events in lttng list -u"),
    Live = lists:sort([{N, lists:sort(F)} || {N, F} <- Registered, Ours(N)]),
    Catalogue = lists:sort([{N, lists:sort(F)} || {N, F} <- dtrace_recorder_lttng:events()]),
    ?assertEqual(Catalogue, Live),
    ok.

%% One slow request among hundreds: one snapshot within 2 s, holding the
%% request's begin and end, the trigger event and earlier requests; a
%% request that raised is a failed span in the events (outcome "error")
%% and in the report, apart from the slow one.
slow_request_triggers_one_snapshot(Config) ->
    {Peer, _} = ?T:start_peer(#{}),
    OsPid = peer:call(Peer, os, getpid, []),
    Dir = filename:join(?config(priv_dir, Config), "rec"),
    Work = filename:join(?config(priv_dir, Config), "work"),
    Trigger = {event, <<"org_erlang_dtrace:span_end">>,
               <<"kind == \"request\" && duration_ns > 20000000">>},
    {ok, R} = peer:call(Peer, dtrace_recorder, start, [#{dir => Dir, triggers => [Trigger], events => detail}],
                        60000),
    %% 249 fast requests, then the slow one: the clock starts when it ends.
    undefined = peer:call(Peer, ?T, requests, [249, 0, Work], 60000),
    {'EXIT', {boom, _}} = peer:call(Peer, erlang, apply,
                                    [fun() ->
                                             _ = dtrace:put_tag(<<"req-failed">>),
                                             catch dtrace:span(request, fun() -> error(boom) end)
                                     end, []]),
    ok = peer:call(Peer, ?T, request, [250, true, Work]),
    T0 = erlang:monotonic_time(millisecond),
    {ok, [Snap]} = ?T:wait_until(fun() ->
                                         case snapshots(Peer, R) of
                                             [_] = S -> {true, S};
                                             S -> S
                                         end
                                 end, 2000, "one snapshot within 2 s of the slow request"),
    ct:log("snapshot ~p after ~b ms", [Snap, erlang:monotonic_time(millisecond) - T0]),
    %% More fast requests: no other snapshot, here nor on disk.
    undefined = peer:call(Peer, ?T, requests, [50, 0, Work], 60000),
    wait_polls(Peer, R, 3),
    ?assertMatch([_], snapshots(Peer, R)),
    #{path := Path, source := trigger} = Snap,
    SessionDir = filename:dirname(binary_to_list(Path)),
    ?assertEqual([filename:basename(binary_to_list(Path))],
                 [N || #{name := N} <- dtrace_recorder_store:scan(SessionDir)]),
    %% What the snapshot holds, read with babeltrace2's CLI.
    Events = ?T:read_trace(binary_to_list(Path)),
    Tagged = fun(Name, Tag) -> [F || {E, #{<<"user_tag">> := T} = F} <- Events,
                                     E =:= <<"org_erlang_dtrace:", Name/binary>>, T =:= Tag] end,
    ?assertMatch([#{<<"kind">> := <<"request">>} | _], Tagged(<<"span_begin">>, <<"req-250">>)),
    [End] = [F || #{<<"kind">> := <<"request">>} = F <- Tagged(<<"span_end">>, <<"req-250">>)],
    ?assert(maps:get(<<"duration_ns">>, End) > 20000000),
    ?assertEqual(<<"ok">>, maps:get(<<"outcome">>, End)),
    ?assertMatch([#{<<"kind">> := <<"request">>, <<"outcome">> := <<"error">>}],
                 Tagged(<<"span_end">>, <<"req-failed">>)),
    %% (req-failed is the request that raised, not one of the 249.)
    Earlier = [T || <<"req-", N/binary>> = T <- ?T:tags_in(Events), N =/= <<"failed">>,
                    binary_to_integer(N) < 250],
    ct:log("~b events, ~b earlier requests", [length(Events), length(Earlier)]),
    ?assert(length(Earlier) >= 50),
    %% Only this node's events (the vpid filter).
    ?assertEqual([list_to_integer(OsPid)], lists:usort([V || {_, #{<<"vpid">> := V}} <- Events])),
    %% The report: the trigger, the request's spans and file operations.
    Report = report([Path], #{}),
    assert_contains(Report, [<<"Triggering event">>, <<"tag \"req-250\"  span_end when">>,
                             <<"Tag \"req-250\"">>, <<"span request">>, <<"file WRITE">>,
                             <<"Failed spans">>, <<"1 x request (error)">>, <<"request error, ">>,
                             <<"tag \"req-failed\"">>, <<"Slowest operations">>]),
    Svg = svg_of(Report),
    {ok, <<"<svg", _/binary>> = SvgText} = file:read_file(Svg),
    assert_contains(SvgText, [<<"trigger">>, <<"req-250">>]),
    ok = peer:call(Peer, dtrace_recorder, stop, [R]),
    ?assertEqual({[], []}, ?T:lttng_names(OsPid)),
    ok.

%% The default events (what an always-on recorder affords): of 500
%% requests, only the spans of at least the slow-span threshold (here
%% 20 ms) are recorded, as span_slow with kind, tag and duration; a trigger
%% on span_slow takes the snapshot; the report lists the slow span (which
%% raised: failed, outcome "throw") and says how to get its breakdown.
default_events_keep_slow_spans_only(Config) ->
    {Peer, _} = ?T:start_peer(#{}),
    Dir = filename:join(?config(priv_dir, Config), "rec"),
    1000 = peer:call(Peer, dtrace, slow_span_threshold, [20000]),
    Trigger = {event, <<"org_erlang_dtrace:span_slow">>, <<"kind == \"slow\"">>},
    {ok, R} = peer:call(Peer, dtrace_recorder, start, [#{dir => Dir, triggers => [Trigger]}], 60000),
    %% Only span_slow listens: a span is a begin time, not a full span.
    ?T:wait_until(fun() -> is_integer(peer:call(Peer, dtrace_nif, span_enabled, [])) end,
                  10000, "span_slow enabled alone"),
    ok = peer:call(Peer, erlang, apply,
                   [fun() ->
                            [begin
                                 _ = dtrace:put_tag(["fast-", integer_to_list(I)]),
                                 dtrace:span(request, fun() -> I end)
                             end || I <- lists:seq(1, 500)],
                            %% The slow one in a registered process, alive at
                            %% the snapshot: the report names it.
                            Me = self(),
                            W = spawn(fun() ->
                                              true = register(rec_slow_worker, self()),
                                              _ = dtrace:put_tag(<<"slow-1">>),
                                              late = (catch dtrace:span(slow, fun() -> timer:sleep(30),
                                                                                       throw(late) end)),
                                              Me ! {slow_done, self()},
                                              receive stop -> ok end
                                      end),
                            receive {slow_done, W} -> ok end
                    end, []]),
    {ok, [#{path := Path, source := trigger}]} =
        ?T:wait_until(fun() ->
                              case snapshots(Peer, R) of
                                  [_] = S -> {true, S};
                                  S -> S
                              end
                      end, 5000, "the span_slow trigger's snapshot"),
    Events = ?T:read_trace(binary_to_list(Path)),
    Spans = [F || {<<"org_erlang_dtrace:span", _/binary>>, F} <- Events],
    ct:log("span events: ~p", [Spans]),
    %% Every span event is a span_slow over the threshold; the slow one is
    %% there; of the 500 fast ones, at most a few (a request descheduled
    %% for 20 ms) are.
    ?assertEqual([], [E || {<<"org_erlang_dtrace:span_", K/binary>> = E, _} <- Events, K =/= <<"slow">>]),
    ?assert(lists:all(fun(#{<<"duration_ns">> := D}) -> D >= 20000000 end, Spans)),
    [Slow] = [F || #{<<"kind">> := <<"slow">>} = F <- Spans],
    ?assertMatch(#{<<"user_tag">> := <<"slow-1">>, <<"span_id">> := 0, <<"parent_id">> := 0,
                   <<"outcome">> := <<"throw">>}, Slow),
    ?assert(maps:get(<<"duration_ns">>, Slow) >= 30000000),
    ?assert(length(Spans) =< 6),
    Report = report([Path], #{tags => [<<"slow-1">>]}),
    assert_contains(Report, [<<"Tag \"slow-1\"">>, <<"span slow (span_slow) FAILED: throw">>,
                             <<"1 x slow (throw)">>, <<"events => detail">>]),
    %% The process by its pid and name (the sidecar's names).
    Worker = list_to_binary(peer:call(Peer, erlang, apply,
                                      [fun() -> pid_to_list(whereis(rec_slow_worker)) end, []])),
    assert_contains(Report, [<<Worker/binary, " (rec_slow_worker)">>]),
    ok = peer:call(Peer, dtrace_recorder, stop, [R]),
    ok.

%% 50 slow requests in 200 ms: one snapshot per min_interval_ms; and
%% max_snapshots on disk after several storms.
storm_is_rate_limited(Config) ->
    {Peer, _} = ?T:start_peer(#{}),
    Dir = filename:join(?config(priv_dir, Config), "rec"),
    {ok, R} = peer:call(Peer, dtrace_recorder, start,
                        [#{dir => Dir, triggers => [{pn, 900, <<"i2 > 20000">>}], min_interval_ms => 1000,
                           max_snapshots => 2}], 60000),
    Storm = fun(Round, Seen) ->
                    #{triggers := Armed} = peer:call(Peer, dtrace_recorder, status, [R]),
                    T0 = erlang:monotonic_time(millisecond),
                    ok = peer:call(Peer, ?T, storm, [50, 25, 4], 30000),
                    ct:log("round ~b: the storm took ~b ms", [Round, erlang:monotonic_time(millisecond) - T0]),
                    {ok, New} = ?T:wait_until(
                                  fun() ->
                                          case [P || #{path := P} <- snapshots(Peer, R), not lists:member(P, Seen)] of
                                              [] -> false;
                                              N -> {true, N}
                                          end
                                  end, 2000, "a snapshot of the storm"),
                    wait_polls(Peer, R, 4),
                    %% Exactly one snapshot for the storm.
                    ?assertEqual(New, [P || #{path := P} <- snapshots(Peer, R), not lists:member(P, Seen)]),
                    ?assertMatch([_], New),
                    %% Re-armed only once the interval is over.
                    ?T:wait_until(fun() ->
                                          #{triggers := Now} = peer:call(Peer, dtrace_recorder, status, [R]),
                                          Now =/= Armed
                                  end, 3000, "the trigger re-armed"),
                    Seen ++ New
            end,
    All = lists:foldl(Storm, [], [1, 2, 3, 4]),
    ?assertEqual(4, length(All)),
    Kept = snapshots(Peer, R),
    ?assertEqual(lists:nthtail(2, All), [P || #{path := P} <- Kept]),
    [#{time := A}, #{time := B}] = Kept,
    ?assert(B - A >= 1000),
    SessionDir = filename:dirname(binary_to_list(hd(All))),
    ?assertEqual(lists:sort([filename:basename(binary_to_list(P)) || P <- lists:nthtail(2, All)]),
                 lists:sort([N || #{name := N, kind := trigger} <- dtrace_recorder_store:scan(SessionDir)])),
    ct:log("status ~p", [peer:call(Peer, dtrace_recorder, status, [R])]),
    ok = peer:call(Peer, dtrace_recorder, stop, [R]),
    ok.

%% The slow request fires the node's trigger, then asks the cluster for
%% a snapshot too: the node writes one snapshot, the trigger's.
own_trigger_then_cluster_request(Config) ->
    {Peer, _} = ?T:start_peer(#{}),
    Dir = filename:join(?config(priv_dir, Config), "rec"),
    {ok, R} = peer:call(Peer, dtrace_recorder, start,
                        [#{dir => Dir, triggers => [{pn, 900, <<"i2 > 20000">>}], min_interval_ms => 5000}], 60000),
    ok = peer:call(Peer, erlang, apply,
                   [fun() -> _ = dtrace:put_tag(<<"slow-1">>),
                             true = dtrace:pn(900, 1, 25000),
                             dtrace_recorder:trigger_cluster(<<"slow request">>)
                    end, []]),
    ?T:wait_until(fun() -> length(snapshots(Peer, R)) =:= 1 end, 2000, "the trigger's snapshot"),
    wait_polls(Peer, R, 3),
    ?assertMatch([#{source := trigger}], snapshots(Peer, R)),
    ?assertMatch(#{suppressed := 0}, peer:call(Peer, dtrace_recorder, status, [R])),
    ok = peer:call(Peer, dtrace_recorder, stop, [R]),
    ok.

%% {dtrace, [{recorder, Opts}]}: a recorder starts with the application,
%% and goes with it.
recorder_from_app_env(Config) ->
    {Peer, _} = ?T:start_peer(#{}),
    OsPid = peer:call(Peer, os, getpid, []),
    Dir = filename:join(?config(priv_dir, Config), "rec_app_env"),
    ok = peer:call(Peer, application, stop, [dtrace]),
    ok = peer:call(Peer, application, set_env, [dtrace, recorder, #{dir => Dir, triggers => [{pn, 900, <<>>}]}]),
    {ok, _} = peer:call(Peer, application, ensure_all_started, [dtrace]),
    ?T:wait_until(fun() -> maps:get(phase, peer:call(Peer, dtrace_recorder, status, [dtrace_recorder])) =:= running end,
                  20000, "the recorder of the application environment recording"),
    true = peer:call(Peer, dtrace, pn, [900, 1, 1]),
    ?T:wait_until(fun() -> length(snapshots(Peer, dtrace_recorder)) =:= 1 end, 2000, "its trigger's snapshot"),
    ?assertMatch({[_], [_]}, ?T:lttng_names(OsPid)),
    ok = peer:call(Peer, application, stop, [dtrace]),
    ?assertEqual({[], []}, ?T:lttng_names(OsPid)),
    ok.

%% A recorder that starts removes what recorders of dead nodes of this
%% host (and without distribution) left, and nothing else.
leftovers_of_dead_nodes(Config) ->
    {Peer, Node} = ?T:start_peer(#{name => "dtrecl", cookie => "dtrace_rec_leftovers"}),
    [_, Host] = string:split(atom_to_list(Node), "@"),
    Dead = dead_pid(),
    Live = os:getpid(),
    Removed = ["dtrace-rec-ghost_" ++ Host ++ "_0badf00d-rec-" ++ Dead, "dtrace-rec-nonode-rec-" ++ Dead],
    Kept = ["dtrace-rec-ghost_otherhost_0badf00d-rec-" ++ Dead, "dtrace-rec-nonode-rec-" ++ Live,
            "dtrace-rec-ghost_" ++ Host ++ "_0badf00d-rec-" ++ Live],
    Out = ?config(priv_dir, Config),
    [{0, _} = ?T:run("lttng", ["create", S, "--snapshot", "--output=" ++ filename:join(Out, S)])
     || S <- Removed ++ Kept],
    Trigger = fun(S) -> {0, _} = ?T:run("lttng", ["add-trigger", "--name=" ++ S ++ "-t1g1",
                                                  "--condition=event-rule-matches", "--type=user",
                                                  "--name=org_erlang_dtrace:user_trace_n", "--filter=label == 1",
                                                  "--action=snapshot-session", S]) end,
    [Trigger(S) || S <- Removed ++ Kept],
    try
        {ok, R} = peer:call(Peer, dtrace_recorder, start, [#{dir => filename:join(Out, "rec")}], 60000),
        Names = fun() -> {0, L} = ?T:run("lttng", ["list"]), {0, T} = ?T:run("lttng", ["list-triggers"]),
                         iolist_to_binary([L, T]) end,
        After = Names(),
        [?assertEqual({S, nomatch}, {S, binary:match(After, list_to_binary(S))}) || S <- Removed],
        [?assertMatch({S, {_, _}}, {S, binary:match(After, list_to_binary(S ++ " "))}) || S <- Kept],
        [?assertMatch({S, {_, _}}, {S, binary:match(After, list_to_binary(S ++ "-t1g1"))}) || S <- Kept],
        ok = peer:call(Peer, dtrace_recorder, stop, [R])
    after
        [begin ?T:run("lttng", ["destroy", S]), ?T:run("lttng", ["remove-trigger", S ++ "-t1g1"]) end
         || S <- Kept]
    end,
    ok.

%% An OS pid no process has.
dead_pid() ->
    hd([integer_to_list(P) || P <- lists:seq(4194000, 4194300), not filelib:is_dir("/proc/" ++ integer_to_list(P))]).

%% Three nodes, a request crossing them with a spread tag, and
%% trigger_cluster/1 from inside it: one snapshot on each node, each with
%% the tag; the report shows the request's path in time order.
three_nodes_cluster_trigger(Config) ->
    Cookie = "dtrace_rec_" ++ integer_to_list(erlang:unique_integer([positive])),
    Peers = [?T:start_peer(#{name => "dtrec" ++ X, cookie => Cookie}) || X <- ["a", "b", "c"]],
    [{PA, A}, {PB, B}, {PC, C}] = Peers,
    [true = peer:call(P, net_kernel, connect_node, [N]) || {P, N} <- [{PA, B}, {PA, C}, {PB, C}]],
    Dir = filename:join(?config(priv_dir, Config), "rec"),
    [{ok, rec} = peer:call(P, dtrace_recorder, start, [#{dir => Dir, name => rec, events => detail}], 60000)
     || {P, _} <- Peers],
    [true = peer:call(P, erlang, register, [relay, peer:call(P, erlang, spawn, [?T, relay, []])])
     || P <- [PB, PC]],
    ?T:wait_until(fun() -> length(peer:call(PA, pg, get_members, [dtrace_recorder_pg, dtrace_recorders])) =:= 3 end,
                  10000, "the three recorders in the pg group"),
    %% Other work on every node, before.
    Work = filename:join(?config(priv_dir, Config), "work"),
    [undefined = peer:call(P, ?T, requests, [100, 0, Work], 60000) || {P, _} <- Peers],
    ok = peer:call(PA, ?T, cross_request, [<<"cross-1">>, [{relay, B}, {relay, C}], <<"slow cross-node request">>]),
    Snaps = [begin
                 {ok, [S]} = ?T:wait_until(fun() ->
                                                   case snapshots(P, rec) of
                                                       [_] = L -> {true, L};
                                                       L -> L
                                                   end
                                           end, 5000, io_lib:format("a snapshot on ~p", [N])),
                 S
             end || {P, N} <- Peers],
    [begin
         ?assertEqual(N, Node),
         ?assertEqual(cluster, Source),
         ?assert(lists:member(<<"cross-1">>, ?T:tags_in(?T:read_trace(binary_to_list(Path)))))
     end || {{_, N}, #{path := Path, node := Node, source := Source}} <- lists:zip(Peers, Snaps)],
    Report = report([P || #{path := P} <- Snaps], #{tags => [<<"cross-1">>]}),
    %% The tag's rows, in time order: the request on a, then b, then c.
    Section = section(Report, <<"Tag \"cross-1\"">>),
    Nodes = [N || Line <- Section, binary:match(Line, <<"span ">>) =/= nomatch,
                  N <- [atom_to_binary(X) || X <- [A, B, C]], binary:match(Line, N) =/= nomatch],
    ?assertEqual([atom_to_binary(X) || X <- [A, B, C]], dedup(Nodes)),
    [begin
         ok = peer:call(P, dtrace_recorder, stop, [rec]),
         ?assertEqual({[], []}, ?T:lttng_names(peer:call(P, os, getpid, [])))
     end || {P, _} <- Peers],
    ok.

%% A snapshot without span events (recording only the user and file
%% probes) reports its file operations and probes; so does one taken
%% with the lttng CLI alone, without the recorder (no sidecar).
report_without_spans(Config) ->
    {Peer, _} = ?T:start_peer(#{}),
    OsPid = peer:call(Peer, os, getpid, []),
    Dir = filename:join(?config(priv_dir, Config), "rec"),
    Work = filename:join(?config(priv_dir, Config), "work"),
    {ok, R} = peer:call(Peer, dtrace_recorder, start,
                        [#{dir => Dir, events => [<<"org_erlang_dtrace:user_trace_*">>,
                                                  <<"org_erlang_dtrace:efile_drv_*">>]}], 60000),
    undefined = peer:call(Peer, ?T, requests, [20, 0, Work], 60000),
    {ok, #{path := Path}} = peer:call(Peer, erlang, apply,
                                      [fun() -> _ = dtrace:put_tag(<<"asker">>),
                                                dtrace_recorder:trigger(R, <<"by hand">>, 30000)
                                       end, []], 60000),
    Events = ?T:read_trace(binary_to_list(Path)),
    ?assertEqual([], [E || {<<"org_erlang_dtrace:span_", _/binary>> = E, _} <- Events]),
    Report = report([Path], #{tags => all}),
    assert_contains(Report, [<<"recorder marker: \"by hand\"">>, <<"tag \"asker\"">>, <<"Tag \"req-20\"">>,
                             <<"file WRITE">>, <<"file OPEN">>]),
    ?assertEqual(nomatch, binary:match(iolist_to_binary(Report), <<"span request">>)),
    ok = peer:call(Peer, dtrace_recorder, stop, [R]),
    %% The lttng CLI alone (docs/recorder.md), read by the script.
    S = "dtrace-rec-cli-" ++ OsPid,
    Out = filename:join(?config(priv_dir, Config), "cli"),
    [{0, _} = ?T:run("lttng", A) || A <- [["create", S, "--snapshot", "--output=" ++ Out],
                                          ["enable-channel", "-u", "-s", S, "--subbuf-size=256K", "--num-subbuf=4", "ch"],
                                          ["add-context", "-u", "-s", S, "-c", "ch", "-t", "vpid"],
                                          ["enable-event", "-u", "-s", S, "-c", "ch", "org_erlang_dtrace:*",
                                           "--filter=$ctx.vpid == " ++ OsPid],
                                          ["start", S]]],
    ?T:wait_until(fun() -> peer:call(Peer, dtrace, pn, [1]) end, 5000, "the CLI's session enabled"),
    undefined = peer:call(Peer, ?T, requests, [20, 0, Work], 60000),
    {0, _} = ?T:run("lttng", ["snapshot", "record", "-s", S]),
    {0, _} = ?T:run("lttng", ["destroy", S]),
    [CliSnap] = list_dir(Out),
    {0, Lines} = ?T:run("/usr/bin/python3", [dtrace_recorder_report:script(), "--no-svg",
                                             filename:join(Out, CliSnap)]),
    assert_contains(iolist_to_binary(lists:join(<<"\n">>, Lines)),
                    [list_to_binary("/" ++ OsPid), <<"(no sidecar)">>, <<"span request">>, <<"file WRITE">>]),
    ok.

%% Bad options: {badopt, Key, Value}, and nothing created.
bad_input(Config) ->
    {Peer, _} = ?T:start_peer(#{}),
    OsPid = peer:call(Peer, os, getpid, []),
    Dir = filename:join(?config(priv_dir, Config), "rec_bad_input"),
    Start = fun(Opts) when is_map(Opts) -> peer:call(Peer, dtrace_recorder, start, [maps:merge(#{dir => Dir}, Opts)], 60000);
               (Opts) -> peer:call(Peer, dtrace_recorder, start, [Opts], 60000)
            end,
    Cases = [{#{triggers => [{pn, 900, <<"i2 >>> 3">>}]}, {badopt, triggers, {pn, 900, <<"i2 >>> 3">>}}},
             {#{triggers => [{pn, 900, <<"(i2 > 3">>}]}, {badopt, triggers, {pn, 900, <<"(i2 > 3">>}}},
             {#{triggers => [{pn, 900, <<"nosuchfield > 3">>}]}, {badopt, triggers, {pn, 900, <<"nosuchfield > 3">>}}},
             {#{triggers => [{pn, 900, <<"s1 == \"x">>}]}, {badopt, triggers, {pn, 900, <<"s1 == \"x">>}}},
             {#{triggers => [{pn, 949, <<>>}]}, {badopt, triggers, {pn, 949, <<>>}}},
             {#{triggers => [{pn, 951, <<>>}]}, {badopt, triggers, {pn, 951, <<>>}}},
             {#{triggers => [{event, <<"org_erlang_dtrace:nope">>, <<>>}]},
              {badopt, triggers, {event, <<"org_erlang_dtrace:nope">>, <<>>}}},
             {#{triggers => [{event, <<"org_erlang_dtrace:span_end">>, <<"duration > 1">>}]},
              {badopt, triggers, {event, <<"org_erlang_dtrace:span_end">>, <<"duration > 1">>}}},
             {#{triggers => not_a_list}, {badopt, triggers, not_a_list}},
             {#{buffer => {3, 262144}}, {badopt, buffer, {3, 262144}}},
             {#{buffer => {4, 1000}}, {badopt, buffer, {4, 1000}}},
             {#{buffer => {4, 1024}}, {badopt, buffer, {4, 1024}}},
             {#{buffer => {1024, 64 bsl 20}}, {badopt, buffer, {1024, 64 bsl 20}}},
             {#{buffer => big}, {badopt, buffer, big}},
             {#{events => [<<"nosuch:*">>]}, {badopt, events, <<"nosuch:*">>}},
             {#{events => [<<"org_erlang_dtrace:nope">>]}, {badopt, events, <<"org_erlang_dtrace:nope">>}},
             {#{events => []}, {badopt, events, []}},
             {#{events => [42]}, {badopt, events, 42}},
             {#{colour => red}, {badopt, colour, red}},
             {#{max_snapshots => 0}, {badopt, max_snapshots, 0}},
             {#{min_interval_ms => -1}, {badopt, min_interval_ms, -1}},
             {#{dir => ""}, {badopt, dir, ""}},
             {#{name => "rec"}, {badopt, name, "rec"}},
             {#{timeout_ms => 0}, {badopt, timeout_ms, 0}},
             {#{relay => "tcp://127.0.0.1:5342"}, {badopt, relay, "tcp://127.0.0.1:5342"}},
             {#{relay => <<"net://127.0.0.1/traces">>}, {badopt, relay, <<"net://127.0.0.1/traces">>}},
             {#{relay => "net://127.0.0.1:5342:5342"}, {badopt, relay, "net://127.0.0.1:5342:5342"}},
             {#{relay => "net://127.0.0.1:0"}, {badopt, relay, "net://127.0.0.1:0"}},
             {#{relay => "net6://::1"}, {badopt, relay, "net6://::1"}},
             {#{relay => 42}, {badopt, relay, 42}},
             {#{relay_dir => "/tmp"}, {badopt, relay_dir, "/tmp"}},
             {#{relay => "net://127.0.0.1", relay_dir => ""}, {badopt, relay_dir, ""}},
             {[{events, []}], {badopt, options, [{events, []}]}}],
    [?assertEqual({Opts, {error, Want}}, {Opts, Start(Opts)}) || {Opts, Want} <- Cases],
    %% The filters LTTng refused went as far as lttng: nothing is left.
    ?assertEqual({[], []}, ?T:lttng_names(OsPid)),
    %% No recorder either, and a good start still works afterwards.
    ?assertEqual([dtrace_recorder_pg], [Id || {Id, _, _, _} <- peer:call(Peer, supervisor, which_children,
                                                                        [dtrace_recorder_sup])]),
    %% A refused filter got as far as lttng, and the recorder's directory
    %% was made: it went again, empty.
    ?assertEqual([], list_dir(Dir)),
    {ok, R} = Start(#{}),
    ok = peer:call(Peer, dtrace_recorder, stop, [R]),
    ?assertEqual({[], []}, ?T:lttng_names(OsPid)),
    ?assertEqual([], list_dir(Dir)),
    ok.

%% No lttng: a clear error naming the fix, and the probes go on.
lttng_missing(_Config) ->
    {Peer, _} = ?T:start_peer(#{}),
    {error, {lttng_missing, Hint}} = peer:call(Peer, dtrace_recorder, start,
                                               [#{lttng => "/nonexistent/lttng", dir => "/nonexistent"}], 60000),
    assert_contains(Hint, [<<"lttng-tools">>]),
    Path = peer:call(Peer, os, getenv, ["PATH"]),
    true = peer:call(Peer, os, putenv, ["PATH", "/nonexistent"]),
    ?assertMatch({error, {lttng_missing, _}}, peer:call(Peer, dtrace_recorder, start, [#{dir => "/nonexistent"}], 60000)),
    true = peer:call(Peer, os, putenv, ["PATH", Path]),
    ?assertEqual(false, peer:call(Peer, dtrace, p, [1, 2, "still", "here"])),
    ok.

%% lttng hangs: the caller gets an error after the timeout, the hung
%% command is killed, nothing waits for ever.
lttng_hangs(Config) ->
    {Peer, _} = ?T:start_peer(#{}),
    Fake = filename:join(?config(priv_dir, Config), "lttng"),
    ok = file:write_file(Fake, "#!/bin/sh\nexec sleep 6017\n"),
    ok = file:change_mode(Fake, 8#755),
    ok = peer:call(Peer, ?T, busy_loop, [busy]),
    T0 = erlang:monotonic_time(millisecond),
    {error, {lttng_timeout, Cmd}} = peer:call(Peer, dtrace_recorder, start,
                                              [#{lttng => Fake, timeout_ms => 1000, dir => "/nonexistent"}], 60000),
    Took = erlang:monotonic_time(millisecond) - T0,
    ct:log("start gave up after ~b ms on ~s", [Took, Cmd]),
    ?assert(Took < 5000),
    %% The hung command was killed, and the node's probes kept running.
    ?assertMatch({1, _}, ?T:run("pgrep", ["-f", "sleep 6017"])),
    Calls = peer:call(Peer, ?T, spin_until_stopped, [busy]),
    ?assert(is_integer(Calls) andalso Calls > 0),
    ?assertEqual([dtrace_recorder_pg], [Id || {Id, _, _, _} <- peer:call(Peer, supervisor, which_children,
                                                                        [dtrace_recorder_sup])]),
    ok.

%% A recorder killed while it records: the node and probes go on, the
%% supervisor restarts it, and the new incarnation removes what the old
%% one left (its session, its triggers of an older generation).
recorder_killed_mid_run(Config) ->
    {Peer, _} = ?T:start_peer(#{}),
    OsPid = peer:call(Peer, os, getpid, []),
    Dir = filename:join(?config(priv_dir, Config), "rec"),
    {ok, R} = peer:call(Peer, dtrace_recorder, start,
                        [#{dir => Dir, triggers => [{pn, 900, <<>>}], min_interval_ms => 200}], 60000),
    ok = peer:call(Peer, ?T, busy_loop, [busy]),
    true = peer:call(Peer, dtrace, pn, [900, 1, 2]),
    ?T:wait_until(fun() -> length(snapshots(Peer, R)) =:= 1 end, 2000, "the first snapshot"),
    %% Re-armed: the trigger's second generation.
    {ok, Gen2} = ?T:wait_until(fun() ->
                                       case peer:call(Peer, dtrace_recorder, status, [R]) of
                                           #{triggers := [T]} = S -> {binary:match(T, <<"g2">>) =/= nomatch, S};
                                           S -> S
                                       end
                               end, 5000, "the trigger re-armed"),
    #{session := Session, triggers := [Old]} = Gen2,
    Pid = peer:call(Peer, erlang, whereis, [R]),
    true = peer:call(Peer, erlang, exit, [Pid, kill]),
    {ok, Pid2} = ?T:wait_until(fun() ->
                                       case peer:call(Peer, erlang, whereis, [R]) of
                                           P when is_pid(P), P =/= Pid -> {true, P};
                                           P -> P
                                       end
                               end, 5000, "the restarted recorder"),
    ?T:wait_until(fun() -> maps:get(phase, peer:call(Peer, dtrace_recorder, status, [R])) =:= running end,
                  20000, "the restarted recorder recording"),
    #{triggers := [New]} = peer:call(Peer, dtrace_recorder, status, [R]),
    ?assertNotEqual(Old, New),
    ?assertEqual({[Session], [New]}, ?T:lttng_names(OsPid)),
    %% The node and its probes went on.
    true = peer:call(Peer, erlang, is_process_alive, [peer:call(Peer, erlang, whereis, [busy])]),
    %% The earlier snapshot is still listed; a new one works.
    ?assertMatch([_], snapshots(Peer, R)),
    true = peer:call(Peer, dtrace, pn, [900, 2, 2]),
    ?T:wait_until(fun() -> length(snapshots(Peer, R)) =:= 2 end, 2000, "a snapshot after the restart"),
    ?assert(peer:call(Peer, ?T, spin_until_stopped, [busy]) > 0),
    ok = peer:call(Peer, dtrace_recorder, stop, [Pid2]),
    ?assertEqual({[], []}, ?T:lttng_names(OsPid)),
    ok.

%% The snapshot directory read-only, then a full disk: errors, no partial
%% snapshot left, the node and probes fine; then it works again.
unwritable_dir_and_full_disk(Config) ->
    Mnt = ?config(mnt, Config),
    {Peer, _} = ?T:start_peer(#{}),
    OsPid = peer:call(Peer, os, getpid, []),
    {ok, R} = peer:call(Peer, dtrace_recorder, start,
                        [#{dir => Mnt, triggers => [{pn, 900, <<>>}], min_interval_ms => 0,
                           check_ms => 300}], 60000),
    ok = peer:call(Peer, ?T, busy_loop, [busy]),
    {ok, _} = trigger(Peer, R, <<"first">>),
    %% Read-only.
    {0, _} = ?T:run("mount", ["-o", "remount,ro", Mnt]),
    ?assertMatch({error, {lttng_failed, _, _}}, trigger(Peer, R, <<"read-only">>)),
    #{triggers := Armed} = peer:call(Peer, dtrace_recorder, status, [R]),
    true = peer:call(Peer, dtrace, pn, [900, 1, 1]),
    %% LTTng counts the trigger's failed snapshot; the recorder sees it and
    %% re-arms the trigger.
    ?T:wait_until(fun() -> #{failed := F, triggers := T} = peer:call(Peer, dtrace_recorder, status, [R]),
                           F >= 2 andalso T =/= Armed
                  end, 5000, "the failed trigger snapshot counted, the trigger re-armed"),
    {0, _} = ?T:run("mount", ["-o", "remount,rw", Mnt]),
    true = peer:call(Peer, dtrace, pn, [900, 2, 2]),
    ?T:wait_until(fun() -> length(snapshots(Peer, R)) =:= 2 end, 3000, "a trigger snapshot, writable again"),
    %% Full: a filler leaves 64 KiB, less than a snapshot of 100,000 events.
    [Avail] = [list_to_integer(string:trim(L)) || L <- tl(string:split(os:cmd("df --output=avail -B1 " ++ Mnt), "\n", all)),
                                                string:trim(L) =/= ""],
    {ok, Fd} = file:open(filename:join(Mnt, "filler"), [write, raw]),
    ok = file:write(Fd, binary:copy(<<0>>, Avail - 65536)),
    ok = file:close(Fd),
    ok = peer:call(Peer, erlang, apply, [fun() -> [dtrace:pn(5, I, I, "fill the buffers") || I <- lists:seq(1, 100000)], ok end, []], 60000),
    Before = lists:sort(list_dir(Mnt)),
    Full = trigger(Peer, R, <<"disk full">>),
    ct:log("with a full disk: ~p", [Full]),
    ?assertMatch({error, _}, Full),
    ?assertEqual(Before, lists:sort(list_dir(Mnt))),
    ?assertEqual(Before, lists:sort(list_dir(Mnt))),
    ok = file:delete(filename:join(Mnt, "filler")),
    {ok, _} = trigger(Peer, R, <<"room again">>),
    ?assert(peer:call(Peer, ?T, spin_until_stopped, [busy]) > 0),
    ok = peer:call(Peer, dtrace_recorder, stop, [R]),
    ?assertEqual({[], []}, ?T:lttng_names(OsPid)),
    ok.

%%--------------------------------------------------------------------
%% Snapshots to a relay daemon (lttng-relayd on 127.0.0.1)

%% Three nodes send their snapshots to one relay daemon: the cluster's
%% snapshot of a request crossing them lands in the relay's output, each
%% node's in its own directory (HOSTNAME/dtrace-rec-NODE-rec), none in
%% the nodes' own directories, and the report merges them. The relay
%% down: each recorder keeps working, its snapshots (asked for, and a
%% trigger's) go to its own directory and it says relay_down; the relay
%% back on its ports, they go there again.
relay_three_nodes_cluster_trigger(Config) ->
    Relay = ?config(relay, Config),
    Out = filename:join(?config(relay_home, Config), "out"),
    {ok, Host} = inet:gethostname(),
    Cookie = "dtrace_rec_" ++ integer_to_list(erlang:unique_integer([positive])),
    Peers = [?T:start_peer(#{name => "dtrly" ++ X, cookie => Cookie}) || X <- ["a", "b", "c"]],
    [{PA, A}, {PB, B}, {PC, C}] = Peers,
    [true = peer:call(P, net_kernel, connect_node, [N]) || {P, N} <- [{PA, B}, {PA, C}, {PB, C}]],
    Dir = filename:join(?config(priv_dir, Config), "rec_relay"),
    Opts = #{dir => Dir, name => rec, events => detail, relay => ?T:relay_url(Relay), relay_dir => Out,
             triggers => [{pn, 900, <<"i2 > 20000">>}], min_interval_ms => 0, check_ms => 300},
    [{ok, rec} = peer:call(P, dtrace_recorder, start, [Opts], 60000) || {P, _} <- Peers],
    Status = [peer:call(P, dtrace_recorder, status, [rec]) || {P, _} <- Peers],
    ct:log("status: ~p", [Status]),
    RelayDirs = [begin
                     #{relay := #{state := up, fallbacks := 0, url := Url, dir := RD}} = S,
                     ?assertEqual(list_to_binary(?T:relay_url(Relay)), Url),
                     ?assertEqual(list_to_binary(filename:join(Out, Host)), filename:dirname(RD)),
                     binary_to_list(RD)
                 end || S <- Status],
    LocalDirs = [binary_to_list(D) || #{dir := D} <- Status],
    ?assertEqual(3, length(lists:usort(RelayDirs))),
    [true = peer:call(P, erlang, register, [relay, peer:call(P, erlang, spawn, [?T, relay, []])])
     || P <- [PB, PC]],
    ?T:wait_until(fun() -> length(peer:call(PA, pg, get_members, [dtrace_recorder_pg, dtrace_recorders])) =:= 3 end,
                  10000, "the three recorders in the pg group"),
    Work = filename:join(?config(priv_dir, Config), "work"),
    [undefined = peer:call(P, ?T, requests, [100, 0, Work], 60000) || {P, _} <- Peers],
    ok = peer:call(PA, ?T, cross_request, [<<"cross-1">>, [{relay, B}, {relay, C}], <<"slow cross-node request">>]),
    Snaps = [one_new_snapshot(P, N, []) || {P, N} <- Peers],
    ct:log("snapshots: ~p", [Snaps]),
    %% In the relay's output, one directory per node, each holding its
    %% node's snapshot (and its events only); nothing in the nodes' own.
    ?assertEqual(lists:sort([filename:basename(D) || D <- RelayDirs]), lists:sort(list_dir(filename:join(Out, Host)))),
    [begin
         ?assertMatch(#{node := N, source := cluster, relay := sent}, Snap),
         ?assertEqual(RD, filename:dirname(binary_to_list(Path))),
         Events = ?T:read_trace(binary_to_list(Path)),
         ?assert(lists:member(<<"cross-1">>, ?T:tags_in(Events))),
         OsPid = list_to_integer(peer:call(P, os, getpid, [])),
         ?assertEqual([OsPid], lists:usort([V || {_, #{<<"vpid">> := V}} <- Events])),
         ?assertEqual([], dtrace_recorder_store:scan(LD))
     end || {{{P, N}, #{path := Path} = Snap}, RD, LD} <- lists:zip3(lists:zip(Peers, Snaps), RelayDirs, LocalDirs)],
    Report = report([P || #{path := P} <- Snaps], #{tags => [<<"cross-1">>]}),
    Section = section(Report, <<"Tag \"cross-1\"">>),
    Nodes = [N || Line <- Section, binary:match(Line, <<"span ">>) =/= nomatch,
                  N <- [atom_to_binary(X) || X <- [A, B, C]], binary:match(Line, N) =/= nomatch],
    ?assertEqual([atom_to_binary(X) || X <- [A, B, C]], dedup(Nodes)),
    %% The relay down: the cluster's next snapshot, on every node, in the
    %% node's own directory, and the recorders say so.
    ok = ?T:stop_relayd(Relay),
    ok = peer:call(PA, dtrace_recorder, trigger_cluster, [<<"relay down">>]),
    Down = [one_new_snapshot(P, N, [S]) || {{P, N}, S} <- lists:zip(Peers, Snaps)],
    [begin
         ?assertMatch(#{source := cluster, reason := <<"relay down">>, relay := relay_down}, Snap),
         ?assertEqual(LD, filename:dirname(binary_to_list(Path))),
         ?assert(lists:member(<<"relay down">>, [R || {_, #{<<"s2">> := R}} <- ?T:read_trace(binary_to_list(Path))])),
         ?assertMatch(#{phase := running,
                        relay := #{state := relay_down, fallbacks := 1, error := {relay_down, _, _}}},
                      peer:call(P, dtrace_recorder, status, [rec]))
     end || {{P, _}, #{path := Path} = Snap, LD} <- lists:zip3(Peers, Down, LocalDirs)],
    %% A trigger's snapshot LTTng could not send is taken again locally.
    true = peer:call(PB, dtrace, pn, [900, 7, 25000]),
    #{path := TPath} = TSnap = one_new_snapshot(PB, B, [lists:nth(2, Snaps), lists:nth(2, Down)]),
    ?assertMatch(#{source := trigger, relay := relay_down}, TSnap),
    ?assertEqual(lists:nth(2, LocalDirs), filename:dirname(binary_to_list(TPath))),
    ?assertMatch([_], [E || {<<"org_erlang_dtrace:user_trace_n">>, #{<<"label">> := 900, <<"i1">> := 7} = E}
                                <- ?T:read_trace(binary_to_list(TPath))]),
    ?assertMatch(#{failed := 1, relay := #{fallbacks := 2}}, peer:call(PB, dtrace_recorder, status, [rec])),
    %% The relay back on its ports: snapshots go there again.
    _ = ?T:start_relayd(Out, maps:get(ports, Relay), []),
    {ok, #{relay := sent, path := Back}} = trigger(PC, rec, <<"relay back">>),
    ?assertEqual(lists:nth(3, RelayDirs), filename:dirname(binary_to_list(Back))),
    ?assertMatch(#{relay := #{state := up, error := none}}, peer:call(PC, dtrace_recorder, status, [rec])),
    [begin
         ok = peer:call(P, dtrace_recorder, stop, [rec]),
         ?assertEqual({[], []}, ?T:lttng_names(peer:call(P, os, getpid, [])))
     end || {P, _} <- Peers],
    ok.

%% A relay the node cannot see (no relay_dir): a snapshot asked for is
%% listed by its place in the relay's output (relative to it), and is
%% there; a trigger's snapshot lands there too, unlisted, and the trigger
%% is re-armed after min_interval_ms all the same.
relay_out_of_sight(Config) ->
    Relay = ?config(relay, Config),
    Out = filename:join(?config(relay_home, Config), "out"),
    {ok, Host} = inet:gethostname(),
    {Peer, _} = ?T:start_peer(#{}),
    Dir = filename:join(?config(priv_dir, Config), "rec_unseen"),
    {ok, R} = peer:call(Peer, dtrace_recorder, start,
                        [#{dir => Dir, relay => ?T:relay_url(Relay), triggers => [{pn, 900, <<"i2 > 20000">>}],
                           min_interval_ms => 1000, check_ms => 300}], 60000),
    #{relay := #{state := up, dir := none}, triggers := [Gen1], dir := LocalDir} =
        peer:call(Peer, dtrace_recorder, status, [R]),
    {ok, #{relay := sent, bytes := 0, source := manual, path := Rel} = Snap} = trigger(Peer, R, <<"unseen">>),
    ct:log("~p", [Snap]),
    [Where] = filelib:wildcard(binary_to_list(filename:join(Out, Rel))),
    ?assertEqual(filename:join([Out, Host, filename:basename(binary_to_list(LocalDir))]), filename:dirname(Where)),
    ?assert(lists:member(<<"unseen">>, [S || {_, #{<<"s2">> := S}} <- ?T:read_trace(Where)])),
    %% The triggers rest for min_interval_ms after a snapshot asked for.
    {ok, Gen2} = ?T:wait_until(fun() ->
                                       case peer:call(Peer, dtrace_recorder, status, [R]) of
                                           #{triggers := [G]} when G =/= Gen1 -> {true, G};
                                           S -> S
                                       end
                               end, 5000, "the trigger re-armed after the interval"),
    true = peer:call(Peer, dtrace, pn, [900, 1, 25000]),
    %% In the relay's output, complete (babeltrace2 reads it) with the
    %% triggering event.
    Fired = fun(T) -> case ?T:run("babeltrace2", [T]) of
                          {0, Lines} -> [L || L <- Lines, binary:match(L, <<"label = 900">>) =/= nomatch];
                          _ -> []
                      end
            end,
    ?T:wait_until(fun() ->
                          case filelib:wildcard(filename:join(filename:dirname(Where), "t*")) of
                              [T] -> length(Fired(T)) =:= 1;
                              L -> L
                          end
                  end, 5000, "the trigger's snapshot in the relay's output"),
    %% The recorder cannot see it fire: it re-arms its triggers every
    %% interval all the same.
    ?T:wait_until(fun() -> #{triggers := [G]} = peer:call(Peer, dtrace_recorder, status, [R]),
                           G =/= Gen1 andalso G =/= Gen2
                  end, 5000, "the trigger re-armed again"),
    ?assertEqual([Snap], snapshots(Peer, R)),
    ?assertEqual([], dtrace_recorder_store:scan(binary_to_list(LocalDir))),
    ok = peer:call(Peer, dtrace_recorder, stop, [R]),
    ok.

%% The relay's disk full: the snapshot is taken locally instead, nothing
%% partial is left in the relay's output; with room again, it goes to the
%% relay.
relay_disk_full(Config) ->
    Relay = ?config(relay, Config),
    Out = ?config(mnt, Config),
    {Peer, _} = ?T:start_peer(#{}),
    Dir = filename:join(?config(priv_dir, Config), "rec_relay_full"),
    {ok, R} = peer:call(Peer, dtrace_recorder, start,
                        [#{dir => Dir, relay => ?T:relay_url(Relay), relay_dir => Out, min_interval_ms => 0,
                           timeout_ms => 3000}], 60000),
    #{relay := #{dir := RelayDir}, dir := LocalDir} = peer:call(Peer, dtrace_recorder, status, [R]),
    {ok, #{relay := sent, path := First}} = trigger(Peer, R, <<"room">>),
    ?assertEqual(RelayDir, filename:dirname(First)),
    %% Full: a filler leaves 64 KiB, less than a snapshot of 100,000 events.
    [Avail] = [list_to_integer(string:trim(L)) || L <- tl(string:split(os:cmd("df --output=avail -B1 " ++ Out), "\n", all)),
                                                string:trim(L) =/= ""],
    {ok, Fd} = file:open(filename:join(Out, "filler"), [write, raw]),
    ok = file:write(Fd, binary:copy(<<0>>, Avail - 65536)),
    ok = file:close(Fd),
    ok = peer:call(Peer, erlang, apply, [fun() -> [dtrace:pn(5, I, I, "fill the buffers") || I <- lists:seq(1, 100000)], ok end, []], 60000),
    Full = trigger(Peer, R, <<"relay full">>),
    ct:log("with the relay's disk full: ~p~n~p", [Full, peer:call(Peer, dtrace_recorder, status, [R])]),
    {ok, #{relay := relay_down, path := Local}} = Full,
    ?assertEqual(LocalDir, filename:dirname(Local)),
    ?assertEqual([filename:basename(binary_to_list(First))], list_dir(binary_to_list(RelayDir))),
    ?assertMatch(#{relay := #{state := relay_down, fallbacks := 1}}, peer:call(Peer, dtrace_recorder, status, [R])),
    ok = file:delete(filename:join(Out, "filler")),
    {ok, #{relay := sent, path := Again}} = trigger(Peer, R, <<"room again">>),
    ?assertEqual(RelayDir, filename:dirname(Again)),
    ok = peer:call(Peer, dtrace_recorder, stop, [R]),
    ok.

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
    {ok, #{relay := sent}} = trigger(Peer, R, <<"answering">>),
    {0, _} = ?T:run("kill", ["-STOP", integer_to_list(RelayPid)]),
    try
        T0 = erlang:monotonic_time(millisecond),
        Self = self(),
        spawn_link(fun() -> Self ! {stalled, trigger(Peer, R, <<"stalled">>)} end),
        %% The recorder answers at once meanwhile.
        T1 = erlang:monotonic_time(microsecond),
        _ = peer:call(Peer, dtrace_recorder, status, [R]),
        _ = snapshots(Peer, R),
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
    {ok, #{relay := sent, path := Back}} = trigger(Peer, R, <<"answering again">>),
    ?assertEqual(RelayDir, filename:dirname(Back)),
    ok = peer:call(Peer, dtrace_recorder, stop, [R]),
    ok.

%% The next snapshot of recorder rec of node N (peer P) that is not one
%% of Known, within 5 s.
one_new_snapshot(P, N, Known) ->
    {ok, [S]} = ?T:wait_until(fun() ->
                                      case snapshots(P, rec) -- Known of
                                          [_] = L -> {true, L};
                                          L -> L
                                      end
                              end, 5000, io_lib:format("a snapshot on ~p", [N])),
    S.

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
    {ok, [#{path := Path}]} = ?T:wait_until(fun() -> case snapshots(Peer, R) of
                                                         [_] = S -> {true, S};
                                                         S -> S
                                                     end
                                            end, 2000, "the user's snapshot"),
    {ok, #file_info{uid = Uid}} = file:read_file_info(Path),
    ?assertNotEqual(0, Uid),
    Events = ?T:read_trace(binary_to_list(Path)),
    ?assert(length([T || <<"req-", _/binary>> = T <- ?T:tags_in(Events)]) >= 50),
    assert_contains(report([Path], #{}), [<<"pn(900) when i2 > 20000">>, <<"label=900 i1=1 i2=25000">>]),
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
    ?assertMatch({error, {not_recording, _}}, trigger(Peer, R, <<"no daemon">>)),
    _ = start_user_sessiond(Config),
    ?T:wait_until(fun() -> maps:get(phase, peer:call(Peer, dtrace_recorder, status, [R])) =:= running end,
                  30000, "the recorder recording again"),
    {ok, _} = trigger(Peer, R, <<"daemon back">>),
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
        Result = trigger(Peer, R, <<"hung">>),
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
                              andalso element(1, trigger(Peer, R, <<"running again">>)) =:= ok
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
    ?assertMatch({error, _}, trigger(Peer, R, <<"unwritable">>)),
    true = peer:call(Peer, dtrace, pn, [900, 1, 1]),
    ?T:wait_until(fun() -> #{failed := F, triggers := T} = peer:call(Peer, dtrace_recorder, status, [R]),
                           F >= 2 andalso T =/= Armed
                  end, 5000, "the failed trigger snapshot counted, the trigger re-armed"),
    ?assertEqual([], snapshots(Peer, R)),
    ok = file:change_mode(SessionDir, 8#755),
    {ok, _} = trigger(Peer, R, <<"writable">>),
    true = peer:call(Peer, dtrace, pn, [900, 2, 2]),
    ?T:wait_until(fun() -> length(snapshots(Peer, R)) =:= 2 end, 3000, "a trigger snapshot, writable again"),
    ok = peer:call(Peer, dtrace_recorder, stop, [R]),
    ?assertEqual({[], []}, ?T:lttng_names(OsPid, ?config(as_user, Config))),
    ok.

%%--------------------------------------------------------------------
%% Helpers

snapshots(Peer, R) ->
    peer:call(Peer, dtrace_recorder, snapshots, [R]).

trigger(Peer, R, Reason) ->
    peer:call(Peer, dtrace_recorder, trigger, [R, Reason, 30000], 60000).

%% Waits until the recorder has looked for trigger snapshots N more times.
wait_polls(Peer, R, N) ->
    #{polls := P0} = peer:call(Peer, dtrace_recorder, status, [R]),
    ?T:wait_until(fun() -> maps:get(polls, peer:call(Peer, dtrace_recorder, status, [R])) >= P0 + N end,
                  5000, "the recorder's polls").

report(Paths, Opts) ->
    case dtrace_recorder:report(Paths, Opts) of
        {error, _} = Error -> ct:fail("report: ~p", [Error]);
        Text -> ct:log("~ts", [Text]), iolist_to_binary(Text)
    end.

assert_contains(Text, Parts) ->
    Bin = iolist_to_binary(Text),
    [case binary:match(Bin, P) of
         nomatch -> ct:fail("~p not in:~n~ts", [P, Bin]);
         _ -> ok
     end || P <- Parts],
    ok.

svg_of(Report) ->
    [_, Rest] = binary:split(Report, <<"Timeline (SVG): ">>),
    [Path | _] = binary:split(Rest, <<"\n">>),
    binary_to_list(Path).

%% The lines of Report's section starting with Title, to the blank line.
section(Report, Title) ->
    [_, Rest] = binary:split(Report, Title),
    [Body | _] = binary:split(Rest, <<"\n\n">>),
    binary:split(Body, <<"\n">>, [global]).

dedup([X, X | Rest]) -> dedup([X | Rest]);
dedup([X | Rest]) -> [X | dedup(Rest)];
dedup([]) -> [].

list_dir(Dir) ->
    case file:list_dir(Dir) of
        {ok, Names} -> Names;
        {error, _} -> []
    end.

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
