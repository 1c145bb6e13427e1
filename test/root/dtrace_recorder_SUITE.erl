%%% The flight recorder (dtrace_recorder), with real LTTng sessions,
%%% triggers and snapshots, read back from disk: group `root', nodes run as
%%% root against the machine's root session daemon (shared with other
%%% suites: only sessions and triggers named dtrace-rec-* are created, and
%%% only the test's own are removed), their snapshots written locally.
%%% Snapshots sent to a relay daemon are dtrace_recorder_relay_SUITE's;
%%% nodes run as an unprivileged user, dtrace_recorder_user_SUITE's.
%%%
%%% Mandatory in CI (CI=true): nothing skips there; locally a case skips
%%% saying what is missing (not root, lttng-tools, python3-bt2, ...).
-module(dtrace_recorder_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_testcase/2, end_per_testcase/2]).
-export([catalogue_matches_the_nif/1, slow_request_triggers_one_snapshot/1, storm_is_rate_limited/1,
         default_events_keep_slow_spans_only/1,
         own_trigger_then_cluster_request/1, leftovers_of_dead_nodes/1, recorder_from_app_env/1,
         three_nodes_cluster_trigger/1, report_without_spans/1, bad_input/1, lttng_missing/1,
         lttng_hangs/1, recorder_killed_mid_run/1, unwritable_dir_and_full_disk/1]).

-define(T, dtrace_test_recorder).
-define(C, dtrace_test_recorder_cases).
-define(LTTNG_CTX, #{lttng => "lttng", timeout => 15000}).

suite() ->
    [{timetrap, {minutes, 4}}].

all() ->
    [{group, root}].

groups() ->
    [{root, [], [catalogue_matches_the_nif, slow_request_triggers_one_snapshot,
                 default_events_keep_slow_spans_only, storm_is_rate_limited,
                 own_trigger_then_cluster_request, leftovers_of_dead_nodes, recorder_from_app_env,
                 three_nodes_cluster_trigger, report_without_spans, bad_input, lttng_missing,
                 lttng_hangs, recorder_killed_mid_run, unwritable_dir_and_full_disk]}].

init_per_suite(Config) ->
    ?C:init_suite(Config).

end_per_suite(_Config) ->
    ok.

init_per_testcase(unwritable_dir_and_full_disk, Config) ->
    ?C:mount_tmpfs(filename:join(?config(priv_dir, Config), "mnt"), Config);
init_per_testcase(_TC, Config) ->
    Config.

end_per_testcase(_TC, Config) ->
    ?C:end_case(Config).

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
    failed = peer:call(Peer, erlang, apply,
                       [fun() ->
                                _ = dtrace:put_tag(<<"req-failed">>),
                                try dtrace:span(request, fun() -> error(boom) end)
                                catch error:boom -> failed
                                end
                        end, []]),
    ok = peer:call(Peer, ?T, request, [250, true, Work]),
    T0 = erlang:monotonic_time(millisecond),
    {ok, [Snap]} = ?T:wait_until(fun() ->
                                         case ?C:snapshots(Peer, R) of
                                             [_] = S -> {true, S};
                                             S -> S
                                         end
                                 end, 2000, "one snapshot within 2 s of the slow request"),
    ct:log("snapshot ~p after ~b ms", [Snap, erlang:monotonic_time(millisecond) - T0]),
    %% More fast requests: no other snapshot, here nor on disk.
    undefined = peer:call(Peer, ?T, requests, [50, 0, Work], 60000),
    wait_polls(Peer, R, 3),
    ?assertMatch([_], ?C:snapshots(Peer, R)),
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
    Report = ?C:report([Path], #{}),
    ?C:assert_contains(Report, [<<"Triggering event">>, <<"tag \"req-250\"  span_end when">>,
                             <<"Tag \"req-250\"">>, <<"span request">>, <<"file WRITE">>,
                             <<"Failed spans">>, <<"1 x request (error)">>, <<"request error, ">>,
                             <<"tag \"req-failed\"">>, <<"Slowest operations">>]),
    Svg = svg_of(Report),
    {ok, <<"<svg", _/binary>> = SvgText} = file:read_file(Svg),
    ?C:assert_contains(SvgText, [<<"trigger">>, <<"req-250">>]),
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
                                              late = try dtrace:span(slow, fun() -> timer:sleep(30),
                                                                                    throw(late) end)
                                                     catch throw:late -> late
                                                     end,
                                              Me ! {slow_done, self()},
                                              receive stop -> ok end
                                      end),
                            receive {slow_done, W} -> ok end
                    end, []]),
    {ok, [#{path := Path, source := trigger}]} =
        ?T:wait_until(fun() ->
                              case ?C:snapshots(Peer, R) of
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
    Report = ?C:report([Path], #{tags => [<<"slow-1">>]}),
    ?C:assert_contains(Report, [<<"Tag \"slow-1\"">>, <<"span slow (span_slow) FAILED: throw">>,
                             <<"1 x slow (throw)">>, <<"events => detail">>]),
    %% The process by its pid and name (the sidecar's names).
    Worker = list_to_binary(peer:call(Peer, erlang, apply,
                                      [fun() -> pid_to_list(whereis(rec_slow_worker)) end, []])),
    ?C:assert_contains(Report, [<<Worker/binary, " (rec_slow_worker)">>]),
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
                                          case [P || #{path := P} <- ?C:snapshots(Peer, R), not lists:member(P, Seen)] of
                                              [] -> false;
                                              N -> {true, N}
                                          end
                                  end, 2000, "a snapshot of the storm"),
                    wait_polls(Peer, R, 4),
                    %% Exactly one snapshot for the storm.
                    ?assertEqual(New, [P || #{path := P} <- ?C:snapshots(Peer, R), not lists:member(P, Seen)]),
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
    Kept = ?C:snapshots(Peer, R),
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
    ?T:wait_until(fun() -> length(?C:snapshots(Peer, R)) =:= 1 end, 2000, "the trigger's snapshot"),
    wait_polls(Peer, R, 3),
    ?assertMatch([#{source := trigger}], ?C:snapshots(Peer, R)),
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
    ?T:wait_until(fun() -> length(?C:snapshots(Peer, dtrace_recorder)) =:= 1 end, 2000, "its trigger's snapshot"),
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
        %% Their names, from LTTng's machine interface (its text changed in 2.16).
        Names = fun() -> {0, L} = ?T:run("lttng", ["--mi", "xml", "list"]),
                         {0, T} = ?T:run("lttng", ["--mi", "xml", "list-triggers"]),
                         iolist_to_binary([L, T]) end,
        After = Names(),
        Named = fun(N) -> binary:match(After, iolist_to_binary(["<name>", N, "</name>"])) end,
        [?assertEqual({S, nomatch}, {S, binary:match(After, list_to_binary(S))}) || S <- Removed],
        [?assertMatch({S, {_, _}}, {S, Named(S)}) || S <- Kept],
        [?assertMatch({S, {_, _}}, {S, Named(S ++ "-t1g1")}) || S <- Kept],
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
                                                   case ?C:snapshots(P, rec) of
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
    Report = ?C:report([P || #{path := P} <- Snaps], #{tags => [<<"cross-1">>]}),
    %% The tag's rows, in time order: the request on a, then b, then c.
    Section = ?C:section(Report, <<"Tag \"cross-1\"">>),
    Nodes = [N || Line <- Section, binary:match(Line, <<"span ">>) =/= nomatch,
                  N <- [atom_to_binary(X) || X <- [A, B, C]], binary:match(Line, N) =/= nomatch],
    ?assertEqual([atom_to_binary(X) || X <- [A, B, C]], ?C:dedup(Nodes)),
    %% The three snapshots as one trace: a process per node, the request's
    %% span on a, the hops on the relays (named processes) of b and c.
    Trace = filename:join(?config(priv_dir, Config), "cluster.json"),
    _ = ?C:report([P || #{path := P} <- Snaps], #{tags => [<<"cross-1">>], slow => 0, svg => false,
                                                  trace => Trace}),
    Read = dtrace_test_why:trace_check(Trace, "/usr/bin/python3"),
    ?assertEqual(lists:sort([atom_to_binary(X) || X <- [A, B, C]]),
                 lists:usort([Node || [<<"TRACK">>, Node, _] <- Read])),
    Relays = [Node || [<<"TRACK">>, Node, Track] <- Read, binary:match(Track, <<"(relay)">>) =/= nomatch],
    ?assertEqual(lists:sort([atom_to_binary(X) || X <- [B, C]]), lists:usort(Relays)),
    Kinds = [{Name, Tag} || [<<"SPAN">>, _Track, Name, Tag | _] <- Read, Tag =:= <<"cross-1">>],
    ?assert(lists:member({<<"request">>, <<"cross-1">>}, Kinds), Kinds),
    ?assertEqual(2, length([K || {<<"hop">>, _} = K <- Kinds]), Kinds),
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
    Report = ?C:report([Path], #{tags => all}),
    ?C:assert_contains(Report, [<<"recorder marker: \"by hand\"">>, <<"tag \"asker\"">>, <<"Tag \"req-20\"">>,
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
    [CliSnap] = ?C:list_dir(Out),
    {0, Lines} = ?T:run("env", ["DTRACE_PYTHON=/usr/bin/python3", dtrace_recorder_report:script(), "--no-svg",
                                filename:join(Out, CliSnap)]),
    ?C:assert_contains(iolist_to_binary(lists:join(<<"\n">>, Lines)),
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
    ?assertEqual([], ?C:list_dir(Dir)),
    {ok, R} = Start(#{}),
    ok = peer:call(Peer, dtrace_recorder, stop, [R]),
    ?assertEqual({[], []}, ?T:lttng_names(OsPid)),
    ?assertEqual([], ?C:list_dir(Dir)),
    ok.

%% No lttng: a clear error naming the fix, and the probes go on.
lttng_missing(_Config) ->
    {Peer, _} = ?T:start_peer(#{}),
    {error, {lttng_missing, Hint}} = peer:call(Peer, dtrace_recorder, start,
                                               [#{lttng => "/nonexistent/lttng", dir => "/nonexistent"}], 60000),
    ?C:assert_contains(Hint, [<<"lttng-tools">>]),
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
    ?T:wait_until(fun() -> length(?C:snapshots(Peer, R)) =:= 1 end, 2000, "the first snapshot"),
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
    ?assertMatch([_], ?C:snapshots(Peer, R)),
    true = peer:call(Peer, dtrace, pn, [900, 2, 2]),
    ?T:wait_until(fun() -> length(?C:snapshots(Peer, R)) =:= 2 end, 2000, "a snapshot after the restart"),
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
    {ok, _} = ?C:trigger(Peer, R, <<"first">>),
    %% Read-only.
    {0, _} = ?T:run("mount", ["-o", "remount,ro", Mnt]),
    ?assertMatch({error, {lttng_failed, _, _}}, ?C:trigger(Peer, R, <<"read-only">>)),
    #{triggers := Armed} = peer:call(Peer, dtrace_recorder, status, [R]),
    true = peer:call(Peer, dtrace, pn, [900, 1, 1]),
    %% LTTng counts the trigger's failed snapshot; the recorder sees it and
    %% re-arms the trigger.
    ?T:wait_until(fun() -> #{failed := F, triggers := T} = peer:call(Peer, dtrace_recorder, status, [R]),
                           F >= 2 andalso T =/= Armed
                  end, 5000, "the failed trigger snapshot counted, the trigger re-armed"),
    {0, _} = ?T:run("mount", ["-o", "remount,rw", Mnt]),
    true = peer:call(Peer, dtrace, pn, [900, 2, 2]),
    ?T:wait_until(fun() -> length(?C:snapshots(Peer, R)) =:= 2 end, 3000, "a trigger snapshot, writable again"),
    %% Full: a filler leaves 64 KiB, less than a snapshot of 100,000 events.
    [Avail] = [list_to_integer(string:trim(L)) || L <- tl(string:split(os:cmd("df --output=avail -B1 " ++ Mnt), "\n", all)),
                                                string:trim(L) =/= ""],
    {ok, Fd} = file:open(filename:join(Mnt, "filler"), [write, raw]),
    ok = file:write(Fd, binary:copy(<<0>>, Avail - 65536)),
    ok = file:close(Fd),
    ok = peer:call(Peer, erlang, apply, [fun() -> [dtrace:pn(5, I, I, "fill the buffers") || I <- lists:seq(1, 100000)], ok end, []], 60000),
    Before = lists:sort(?C:list_dir(Mnt)),
    Full = ?C:trigger(Peer, R, <<"disk full">>),
    ct:log("with a full disk: ~p", [Full]),
    ?assertMatch({error, _}, Full),
    ?assertEqual(Before, lists:sort(?C:list_dir(Mnt))),
    ?assertEqual(Before, lists:sort(?C:list_dir(Mnt))),
    ok = file:delete(filename:join(Mnt, "filler")),
    {ok, _} = ?C:trigger(Peer, R, <<"room again">>),
    ?assert(peer:call(Peer, ?T, spin_until_stopped, [busy]) > 0),
    ok = peer:call(Peer, dtrace_recorder, stop, [R]),
    ?assertEqual({[], []}, ?T:lttng_names(OsPid)),
    ok.

%%--------------------------------------------------------------------
%% Helpers

%% Waits until the recorder has looked for trigger snapshots N more times.
wait_polls(Peer, R, N) ->
    #{polls := P0} = peer:call(Peer, dtrace_recorder, status, [R]),
    ?T:wait_until(fun() -> maps:get(polls, peer:call(Peer, dtrace_recorder, status, [R])) >= P0 + N end,
                  5000, "the recorder's polls").

svg_of(Report) ->
    [_, Rest] = binary:split(Report, <<"Timeline (SVG): ">>),
    [Path | _] = binary:split(Rest, <<"\n">>),
    binary_to_list(Path).
