%%% Tags that follow the work: spreading with messages, between processes
%%% and between nodes, own (permanent) versus adopted tags, and restore in
%%% another process. The probe tests check that the tag reaching a real
%%% tracer is the adopted one.
-module(dtrace_spread_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_testcase/2, end_per_testcase/2]).
-export([send_spreads/1, gen_server_call_spreads/1, spawn_inherits/1,
         own_tag_wins_and_stays/1, untagged_message_drops_adopted/1,
         no_spreading_no_tag/1, restore_in_another_process/1,
         probes_carry_the_adopted_tag/1, spreads_across_nodes/1]).
-export([echo_loop/0]).

all() ->
    [send_spreads, gen_server_call_spreads, spawn_inherits, own_tag_wins_and_stays,
     untagged_message_drops_adopted, no_spreading_no_tag, restore_in_another_process,
     probes_carry_the_adopted_tag, spreads_across_nodes].

init_per_testcase(TC, Config) when TC =:= probes_carry_the_adopted_tag;
                                   TC =:= spreads_across_nodes ->
    dtrace_test_tracer:with_tracer(bpftrace, Config);
init_per_testcase(_TC, Config) ->
    Config.

end_per_testcase(_TC, _Config) ->
    _ = seq_trace:set_token([]),
    erase(),
    ok.

%% Spawns a process that, for each {Pid, Ref, Fun} it receives, replies
%% {Ref, Fun()}: what it sees after receiving that message.
echo() ->
    spawn_link(?MODULE, echo_loop, []).

echo_loop() ->
    receive
        {From, Ref, Fun} -> From ! {Ref, Fun()}, echo_loop();
        stop -> ok
    end.

ask(Pid, Fun) ->
    Ref = make_ref(),
    Pid ! {self(), Ref, Fun},
    receive {Ref, Result} -> Result after 5000 -> ct:fail(no_reply) end.

tags() ->
    {dtrace:get_tag(), dtrace:get_tag_data()}.

send_spreads(_Config) ->
    Echo = echo(),
    dtrace:put_tag(<<"req-1">>),
    {0, <<"req-1">>} = dtrace:spread_tag(true),
    ?assertEqual({undefined, <<"req-1">>}, ask(Echo, fun tags/0)),
    %% The receiver spreads it further: a third process adopts it from
    %% the receiver.
    Third = echo(),
    ?assertEqual({undefined, <<"req-1">>},
                 ask(Echo, fun() -> ask(Third, fun tags/0) end)).

gen_server_call_spreads(_Config) ->
    {ok, Server} = gen_server:start_link(dtrace_test_workload, [], []),
    dtrace:put_tag("call-7"),
    dtrace:spread_tag(true),
    ?assertEqual({undefined, <<"call-7">>}, gen_server:call(Server, tags)),
    gen_server:stop(Server).

spawn_inherits(_Config) ->
    Self = self(),
    dtrace:put_tag("parent"),
    dtrace:spread_tag(true),
    spawn_link(fun() -> Self ! {child, tags()} end),
    receive {child, T} -> ?assertEqual({undefined, <<"parent">>}, T) end.

%% A process with a tag of its own keeps it (for get_tag/0, get_tag_data/0
%% and its probes) when it receives a tagged message.
own_tag_wins_and_stays(_Config) ->
    Echo = echo(),
    ask(Echo, fun() -> dtrace:put_tag("own") end),
    dtrace:put_tag("spread"),
    dtrace:spread_tag(true),
    ?assertEqual({<<"own">>, <<"own">>}, ask(Echo, fun tags/0)),
    dtrace:spread_tag(false),
    ?assertEqual({<<"own">>, <<"own">>}, ask(Echo, fun tags/0)).

%% An adopted tag lasts until the next message without one.
untagged_message_drops_adopted(_Config) ->
    Echo = echo(),
    dtrace:put_tag("t"),
    State = dtrace:spread_tag(true),
    ?assertEqual({undefined, <<"t">>}, ask(Echo, fun tags/0)),
    true = dtrace:restore_tag(State),
    ?assertEqual({undefined, undefined}, ask(Echo, fun tags/0)).

no_spreading_no_tag(_Config) ->
    Echo = echo(),
    dtrace:put_tag("private"),
    ?assertEqual({undefined, undefined}, ask(Echo, fun tags/0)),
    %% Spreading on with no tag of its own: nothing to spread.
    dtrace:put_tag(undefined),
    {0, []} = dtrace:spread_tag(true),
    ?assertEqual({undefined, undefined}, ask(Echo, fun tags/0)).

%% OTP's pattern: take the state in one process, restore it in another,
%% which then spreads the same tag.
restore_in_another_process(_Config) ->
    dtrace:put_tag("from-a"),
    dtrace:spread_tag(true),
    State = dtrace:spread_tag(true),
    ?assertEqual({1, <<"from-a">>}, State),
    dtrace:spread_tag(false),
    dtrace:put_tag(undefined),
    B = echo(),
    C = echo(),
    Result = ask(B, fun() ->
                            _ = seq_trace:set_token([]),
                            true = dtrace:restore_tag(State),
                            {tags(), ask(C, fun tags/0)}
                    end),
    ?assertEqual({{<<"from-a">>, <<"from-a">>}, {undefined, <<"from-a">>}}, Result).

%% A process that adopted a tag fires probes that carry it; one whose
%% adopted tag was dropped fires with none.
probes_carry_the_adopted_tag(_Config) ->
    Peer = dtrace_test_peer:start_peer(),
    try
        {Results, Lines} =
            dtrace_test_tracer:bpftrace_window(
              Peer, "
                usdt:$SO:erlang:user_trace__i4s4 {
                    if (arg2 == 0) { printf(\"SEEN\\n\"); }
                    else { printf(\"EV %d tag=%s\\n\", arg2, str(arg1)); }
                }",
              fun() -> dtrace:p(0) end, [<<"SEEN">>],
              fun() ->
                      Self = self(),
                      Child = spawn_link(fun() ->
                                                 receive go -> ok end,
                                                 R1 = dtrace:p(1),
                                                 R2 = dtrace:pn(2, 2),
                                                 Self ! done,
                                                 receive plain -> ok end,
                                                 Self ! {results, [R1, R2, dtrace:p(3)]}
                                         end),
                      dtrace:put_tag("adopt-me"),
                      dtrace:spread_tag(true),
                      Child ! go,
                      receive done -> ok end,
                      dtrace:spread_tag(false),
                      Child ! plain,
                      receive {results, R} -> R end
              end),
        ?assertEqual([true, false, true], Results),
        ?assertEqual([<<"EV 1 tag=adopt-me">>, <<"EV 3 tag=">>],
                     [L || <<"EV ", _/binary>> = L <- Lines])
    after
        dtrace_test_peer:stop_peer(Peer)
    end.

%% Two distributed nodes on this machine: a tag spread on node A shows up
%% in the probes fired on node B, as bpftrace on B sees them.
spreads_across_nodes(_Config) ->
    {PeerA, NodeA} = dtrace_test_peer:start_named_peer("dtrace_a", "dtrace_spread_test", [?MODULE]),
    {PeerB, NodeB} = dtrace_test_peer:start_named_peer("dtrace_b", "dtrace_spread_test", [?MODULE]),
    try
        true = peer:call(PeerB, erlang, register, [dtrace_echo, peer:call(PeerB, erlang, spawn,
                                                                          [?MODULE, echo_loop, []])]),
        %% bpftrace on node B; its program is known to be attached once it
        %% printed an event of B's ready loop (p(0)). Then node A, tagged
        %% and spreading, asks B's echo process to fire p(42).
        Program = "usdt:$SO:erlang:user_trace__i4s4 { printf(\"EV %ld tag=%s\\n\", arg2, str(arg1)); }",
        {Result, Lines} =
            dtrace_test_tracer:bpftrace_window(
              PeerB, Program, fun() -> dtrace:p(0) end, [{contains, <<"EV 0 ">>}],
              fun() ->
                      erpc:call(NodeA,
                                fun() ->
                                        dtrace:put_tag(<<"from-node-a">>),
                                        dtrace:spread_tag(true),
                                        ask({dtrace_echo, NodeB}, fun() -> {tags(), dtrace:p(42)} end)
                                end, 60000)
              end),
        ?assertEqual({{undefined, <<"from-node-a">>}, true}, Result),
        ?assertEqual([<<"EV 42 tag=from-node-a">>], [L || <<"EV 42", _/binary>> = L <- Lines]),
        ok
    after
        dtrace_test_peer:stop_peer(PeerA),
        dtrace_test_peer:stop_peer(PeerB)
    end.
