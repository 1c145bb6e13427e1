%%% The flight recorder's snapshots sent to a relay daemon (lttng-relayd
%%% on 127.0.0.1, one of each test case's own), with real LTTng sessions,
%%% triggers and snapshots, read back from disk: group `root', as
%%% dtrace_recorder_SUITE's (nodes run as root against the machine's root
%%% session daemon; only sessions and triggers named dtrace-rec-* are
%%% created, and only the test's own are removed). A relay that stalls
%%% under a user's session daemon is dtrace_recorder_user_SUITE's.
%%%
%%% Mandatory in CI (CI=true): nothing skips there; locally a case skips
%%% saying what is missing (not root, lttng-tools, python3-bt2, ...).
-module(dtrace_recorder_relay_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([relay_three_nodes_cluster_trigger/1, relay_out_of_sight/1, relay_disk_full/1]).

-define(T, dtrace_test_recorder).
-define(C, dtrace_test_recorder_cases).

suite() ->
    [{timetrap, {minutes, 4}}].

all() ->
    [{group, root}].

groups() ->
    [{root, [], [relay_three_nodes_cluster_trigger, relay_out_of_sight, relay_disk_full]}].

init_per_suite(Config) ->
    ?C:init_suite(Config).

end_per_suite(_Config) ->
    ok.

init_per_testcase(relay_disk_full, Config) ->
    %% The relay daemon writes to a small tmpfs.
    Home = filename:join(?config(priv_dir, Config), "relay_disk_full"),
    case ?C:mount_tmpfs(filename:join(Home, "out"), Config) of
        {skip, _} = Skip -> Skip;
        Config1 -> ?C:start_relay(Home, [], Config1)
    end;
init_per_testcase(TC, Config) when TC =:= relay_three_nodes_cluster_trigger; TC =:= relay_out_of_sight ->
    Home = filename:join(?config(priv_dir, Config), atom_to_list(TC)),
    ok = filelib:ensure_path(filename:join(Home, "out")),
    ?C:start_relay(Home, [], Config).

end_per_testcase(_TC, Config) ->
    ?C:end_case(Config).

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
    ?assertEqual(lists:sort([filename:basename(D) || D <- RelayDirs]), lists:sort(?C:list_dir(filename:join(Out, Host)))),
    [begin
         ?assertMatch(#{node := N, source := cluster, relay := sent}, Snap),
         ?assertEqual(RD, filename:dirname(binary_to_list(Path))),
         Events = ?T:read_trace(binary_to_list(Path)),
         ?assert(lists:member(<<"cross-1">>, ?T:tags_in(Events))),
         OsPid = list_to_integer(peer:call(P, os, getpid, [])),
         ?assertEqual([OsPid], lists:usort([V || {_, #{<<"vpid">> := V}} <- Events])),
         ?assertEqual([], dtrace_recorder_store:scan(LD))
     end || {{{P, N}, #{path := Path} = Snap}, RD, LD} <- lists:zip3(lists:zip(Peers, Snaps), RelayDirs, LocalDirs)],
    Report = ?C:report([P || #{path := P} <- Snaps], #{tags => [<<"cross-1">>]}),
    Section = ?C:section(Report, <<"Tag \"cross-1\"">>),
    Nodes = [N || Line <- Section, binary:match(Line, <<"span ">>) =/= nomatch,
                  N <- [atom_to_binary(X) || X <- [A, B, C]], binary:match(Line, N) =/= nomatch],
    ?assertEqual([atom_to_binary(X) || X <- [A, B, C]], ?C:dedup(Nodes)),
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
    {ok, #{relay := sent, path := Back}} = ?C:trigger(PC, rec, <<"relay back">>),
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
    {ok, #{relay := sent, bytes := 0, source := manual, path := Rel} = Snap} = ?C:trigger(Peer, R, <<"unseen">>),
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
    ?assertEqual([Snap], ?C:snapshots(Peer, R)),
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
    {ok, #{relay := sent, path := First}} = ?C:trigger(Peer, R, <<"room">>),
    ?assertEqual(RelayDir, filename:dirname(First)),
    %% Full: a filler leaves 64 KiB, less than a snapshot of 100,000 events.
    [Avail] = [list_to_integer(string:trim(L)) || L <- tl(string:split(os:cmd("df --output=avail -B1 " ++ Out), "\n", all)),
                                                string:trim(L) =/= ""],
    {ok, Fd} = file:open(filename:join(Out, "filler"), [write, raw]),
    ok = file:write(Fd, binary:copy(<<0>>, Avail - 65536)),
    ok = file:close(Fd),
    ok = peer:call(Peer, erlang, apply, [fun() -> [dtrace:pn(5, I, I, "fill the buffers") || I <- lists:seq(1, 100000)], ok end, []], 60000),
    Full = ?C:trigger(Peer, R, <<"relay full">>),
    ct:log("with the relay's disk full: ~p~n~p", [Full, peer:call(Peer, dtrace_recorder, status, [R])]),
    {ok, #{relay := relay_down, path := Local}} = Full,
    ?assertEqual(LocalDir, filename:dirname(Local)),
    ?assertEqual([filename:basename(binary_to_list(First))], ?C:list_dir(binary_to_list(RelayDir))),
    ?assertMatch(#{relay := #{state := relay_down, fallbacks := 1}}, peer:call(Peer, dtrace_recorder, status, [R])),
    ok = file:delete(filename:join(Out, "filler")),
    {ok, #{relay := sent, path := Again}} = ?C:trigger(Peer, R, <<"room again">>),
    ?assertEqual(RelayDir, filename:dirname(Again)),
    ok = peer:call(Peer, dtrace_recorder, stop, [R]),
    ok.

%% The next snapshot of recorder rec of node N (peer P) that is not one
%% of Known, within 5 s.
one_new_snapshot(P, N, Known) ->
    {ok, [S]} = ?T:wait_until(fun() ->
                                      case ?C:snapshots(P, rec) -- Known of
                                          [_] = L -> {true, L};
                                          L -> L
                                      end
                              end, 5000, io_lib:format("a snapshot on ~p", [N])),
    S.
