%%% The VM feed table of the catalogue (probes.d, `#pragma dtrace_nif
%%% feed'; docs/reference.md) against what automatic mode does on a real
%%% node with real tracers: each VM probe and each of OTP's LTTng events,
%%% listened to alone, makes automatic mode set exactly the trace flags of
%%% its rows (or the spawn BIFs' meta patterns), and nothing once the
%%% listener leaves; every flag of the table goes when the automatic mode's
%%% process is killed. The expectations come from the table itself
%%% (priv/dtrace_probes.eterm), so a new row is checked without a new test.
-module(dtrace_feeds_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_testcase/2, end_per_testcase/2]).
-export([each_sdt_probe_sets_its_rows_flags/1, each_lttng_event_sets_its_rows_flags/1,
         every_flag_goes_when_automatic_mode_is_killed/1]).

%% A function with call-trace patterns, so that the call rows' flags are
%% wanted (automatic mode sets call flags only for patterns).
-define(MFA, {dtrace_test_workload, double, 1}).

all() ->
    [each_sdt_probe_sets_its_rows_flags, each_lttng_event_sets_its_rows_flags,
     every_flag_goes_when_automatic_mode_is_killed].

init_per_testcase(TC, Config) ->
    Needs = case TC of
                each_sdt_probe_sets_its_rows_flags -> [bpftrace];
                each_lttng_event_sets_its_rows_flags -> [lttng];
                every_flag_goes_when_automatic_mode_is_killed -> [bpftrace, lttng]
            end,
    case [Skip || T <- Needs, {skip, _} = Skip <- [require(T)]] of
        [] ->
            Peer = dtrace_test_peer:start_peer(),
            {ok, _} = peer:call(Peer, application, ensure_all_started, [dtrace]),
            ok = peer:call(Peer, erlang, apply,
                           [fun() -> {module, _} = code:ensure_loaded(dtrace_test_workload),
                                     dtrace:function_probes([?MFA]) end, []]),
            [{peer, Peer} | Config];
        [Skip | _] ->
            Skip
    end.

end_per_testcase(_TC, Config) ->
    dtrace_test_lttng:destroy("dtrace_feeds"),
    dtrace_test_peer:stop_peer(?config(peer, Config)).

require(lttng) -> dtrace_test_lttng:require();
require(Tool) -> dtrace_test_tracer:require_tracer(Tool).

%%--------------------------------------------------------------------

%% Every SDT probe of the feed table, with a bpftrace program on it alone.
each_sdt_probe_sets_its_rows_flags(Config) ->
    Peer = ?config(peer, Config),
    Feeds = dtrace_test_catalogue:feeds(),
    Probes = lists:usort(lists:append([S || #{sdt := S} <- Feeds])),
    Results =
        [begin
             Tracer = dtrace_test_tracer:bpftrace_start(
                        dtrace_test_peer:os_pid(Peer),
                        "usdt:$SO:erlang:" ++ binary_to_list(P) ++ " { @n = count(); }"),
             On = wait_state(Peer, P, true, expected(P, Feeds)),
             _ = dtrace_test_tracer:bpftrace_stop(Tracer),
             Off = wait_state(Peer, P, false, {[], [], false}),
             {P, On, Off}
         end || P <- Probes],
    ct:log("~p", [Results]),
    ?assertEqual([], [R || {_, On, Off} = R <- Results, {On, Off} =/= {ok, ok}]),
    ?assert(length(Probes) >= 24).

%% Every LTTng-only event of the feed table (OTP's org_erlang_dyntrace),
%% with an LTTng session recording it alone.
each_lttng_event_sets_its_rows_flags(Config) ->
    Peer = ?config(peer, Config),
    Feeds = dtrace_test_catalogue:feeds(),
    %% OTP's VM events (the probes' own org_erlang_dtrace events feed on
    %% nothing).
    Events = [E || {<<"org_erlang_dyntrace:", _/binary>> = E, _} <- dtrace_test_catalogue:events()],
    Results =
        [begin
             [_, Name] = binary:split(E, <<":">>),
             S = dtrace_test_lttng:start("dtrace_feeds", ?config(priv_dir, Config), [binary_to_list(E)],
                                        [{vpid, dtrace_test_peer:os_pid(Peer)}]),
             On = wait_state(Peer, E, true, expected(Name, Feeds)),
             _ = dtrace_test_lttng:stop_and_read(S),
             Off = wait_state(Peer, E, false, {[], [], false}),
             {E, On, Off}
         end || E <- Events],
    ct:log("~p", [Results]),
    ?assertEqual([], [R || {_, On, Off} = R <- Results, {On, Off} =/= {ok, ok}]),
    ?assertEqual(18, length(Events)).

%% With a listener on a probe of every row that sets flags (so every flag
%% of the table is set), the automatic mode's process is suspended, the
%% listeners leave, and the process is killed: its successor (OTP 25, 26:
%% clearing every flag of the table; OTP 27: its sessions died with it)
%% leaves no flag of dtrace's on any process or port.
every_flag_goes_when_automatic_mode_is_killed(Config) ->
    Peer = ?config(peer, Config),
    Feeds = dtrace_test_catalogue:feeds(),
    Auto = [F || #{auto := true, on := On} = F <- Feeds, On =/= spawn_meta],
    %% One listener per row: its first SDT probe, else its LTTng event.
    Sdt = lists:usort([P || #{sdt := [P | _]} <- Auto]),
    Lttng = lists:usort([<<"org_erlang_dyntrace:", E/binary>> || #{sdt := [], lttng := [E | _]} <- Auto]),
    Program = lists:append(["usdt:$SO:erlang:" ++ binary_to_list(P) ++ " { @n = count(); }\n" || P <- Sdt]),
    Tracer = dtrace_test_tracer:bpftrace_start(dtrace_test_peer:os_pid(Peer), Program),
    S = dtrace_test_lttng:start("dtrace_feeds", ?config(priv_dir, Config), [binary_to_list(E) || E <- Lttng],
                               [{vpid, dtrace_test_peer:os_pid(Peer)}]),
    {AllP, AllO} = peer:call(Peer, dtrace_nif, vm_flags, []),
    Want = {lists:sort(AllP), lists:sort(AllO), false},
    Listening = Sdt ++ Lttng,
    ok = peer:call(Peer, erlang, apply,
                   [fun() -> dtrace_test_workload:wait_until(fun() -> state(Listening, true) =:= Want end, 30000) end, []], 60000),
    Old = peer:call(Peer, erlang, whereis, [dtrace_vm]),
    ok = peer:call(Peer, sys, suspend, [Old]),
    _ = dtrace_test_tracer:bpftrace_stop(Tracer),
    _ = dtrace_test_lttng:stop_and_read(S),
    true = peer:call(Peer, erlang, exit, [Old, kill]),
    Left = peer:call(Peer, erlang, apply,
                     [fun() ->
                              dtrace_test_workload:wait_until(fun() -> ours() =:= [] end, 2000),
                              ours()
                      end, []]),
    ?assertEqual([], Left).

%%--------------------------------------------------------------------

%% What the table says listening to Name (an SDT probe or an LTTng event,
%% without its provider) alone makes automatic mode do: {ProcessFlags,
%% PortFlags, SpawnMeta}. Rows marked auto=no set nothing; process__spawn
%% (and OTP's process_spawn) alone come from the spawn BIFs' meta patterns.
expected(Name, Feeds) ->
    Rows = [F || #{sdt := S, lttng := L} = F <- Feeds, lists:member(Name, S ++ L)],
    Auto = [F || #{auto := true} = F <- Rows],
    P = lists:usort(lists:append([Fl || #{on := processes, flags := Fl} <- Auto])),
    O0 = lists:usort(lists:append([Fl || #{on := ports, flags := Fl} <- Auto])),
    %% port__command (and the other probes of ports' requests) names the
    %% port as it was opened, which only the port's open event says:
    %% automatic mode also sets `ports' for them (vm/mod.rs, vm_listening).
    Named = [<<"port__command">>, <<"port__exit">>, <<"port__control">>, <<"port__connect">>,
             <<"driver__output">>, <<"driver__outputv">>, <<"driver__control">>, <<"driver__call">>,
             <<"driver__timeout">>],
    O = case lists:member(Name, Named) of
            true -> lists:usort([ports | O0]);
            false -> O0
        end,
    Meta = [x || #{on := spawn_meta} <- Rows] =/= [] andalso P =:= [] andalso O =:= [],
    {P, O, Meta}.

%% Waits in the peer until Name is listened to (or not, Listened) and the
%% flags automatic mode set are Want: ok or {timeout, Last}.
wait_state(Peer, Name, Listened, Want) ->
    peer:call(Peer, erlang, apply,
              [fun() ->
                       case dtrace_test_workload:wait_until(fun() -> state([Name], Listened) =:= Want end, 30000) of
                           ok -> ok;
                           timeout -> {timeout, Want, state([Name], Listened)}
                       end
               end, []], 60000).

%% In the peer: after a poll, {ProcessFlags, PortFlags, SpawnMeta} if the
%% names are listened to as Listened says, else not_yet.
state(Names, Listened) ->
    {_, _, On, _} = dtrace_nif:vm_listening(),
    case lists:all(fun(N) -> lists:member(N, On) =:= Listened end, Names) of
        false -> not_yet;
        true ->
            ok = dtrace_vm:sync(),
            #{flags := #{processes := P, ports := O}, spawn_meta := M} = dtrace:vm_probes(),
            {lists:sort(P), lists:sort(O), M =:= on}
    end.

%% In the peer: the processes and ports that carry a flag of dtrace's
%% automatic mode (its session's, or its tracer's).
ours() ->
    dtrace_test_workload:our_traced(processes() ++ erlang:ports()).
