%%% The dyntrace compatibility layer, on this stock VM (no dynamic trace):
%%% installed when the application starts, logged once, removed when it
%%% stops, and never when opted out. Each test runs in a fresh peer node.
-module(dtrace_compat_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_testcase/2, end_per_testcase/2]).
-export([no_dyntrace_in_the_application/1,
         start_installs_and_logs_once/1,
         stop_puts_otps_dyntrace_back/1,
         opt_out/1,
         calls_reach_dtrace/1,
         dyntrace_is_a_tracer/1]).

all() ->
    [no_dyntrace_in_the_application, start_installs_and_logs_once,
     stop_puts_otps_dyntrace_back, opt_out, calls_reach_dtrace, dyntrace_is_a_tracer].

init_per_testcase(dyntrace_is_a_tracer, Config) ->
    case dtrace_test_tracer:require_tracer(bpftrace) of
        ok ->
            Peer = dtrace_test_peer:start_peer(),
            [{peer, Peer} | Config];
        Skip -> Skip
    end;
init_per_testcase(_TC, Config) ->
    Peer = dtrace_test_peer:start_peer(),
    none = peer:call(Peer, erlang, system_info, [dynamic_trace]),
    [{peer, Peer} | Config].

end_per_testcase(_TC, Config) ->
    dtrace_test_peer:stop_peer(?config(peer, Config)).

call(Config, M, F, A) ->
    peer:call(?config(peer, Config), M, F, A).

in_peer(Config, Fun) ->
    call(Config, erlang, apply, [Fun, []]).

%% A module named dyntrace in ebin or in the .app would break every release
%% that also holds runtime_tools ("Duplicated modules").
no_dyntrace_in_the_application(_Config) ->
    Ebin = filename:dirname(code:which(dtrace)),
    ?assertEqual([], filelib:wildcard(filename:join(Ebin, "dyntrace*"))),
    {ok, [{application, dtrace, Props}]} = file:consult(filename:join(Ebin, "dtrace.app")),
    ?assertNot(lists:member(dyntrace, proplists:get_value(modules, Props))),
    ?assert(filelib:is_file(filename:join([code:priv_dir(dtrace), "compat", "dyntrace.beam"]))).

start_installs_and_logs_once(Config) ->
    Logged = in_peer(Config,
                     fun() ->
                             Self = self(),
                             ok = logger:add_handler(t, dtrace_test_workload, #{config => Self}),
                             ok = logger:set_primary_config(level, info),
                             error = dyntrace:p(1),
                             ok = application:start(dtrace),
                             true = dtrace_compat:installed(),
                             already = dtrace_compat:install(),
                             logger:remove_handler(t),
                             receive_logs()
                     end),
    Ours = [L || {_, "dtrace: " ++ _} = L <- Logged],
    ?assertMatch([{info, "dtrace: this VM has no dynamic trace; dyntrace calls now fire"
                         " dtrace's probes" ++ _}], Ours),
    ?assertEqual({true, false, true}, in_peer(Config, fun() -> {dyntrace:available(),
                                                                 dyntrace:p(1, "x"),
                                                                 dtrace_compat:installed()}
                                                       end)).

receive_logs() ->
    receive {log, Level, Text} -> [{Level, Text} | receive_logs()]
    after 100 -> []
    end.

stop_puts_otps_dyntrace_back(Config) ->
    Which = in_peer(Config,
                    fun() ->
                            ok = application:start(dtrace),
                            Ours = code:which(dyntrace),
                            ok = application:stop(dtrace),
                            {Ours, code:which(dyntrace), dtrace_compat:installed(), dyntrace:p(1)}
                    end),
    {Ours, Otps, Installed, Result} = Which,
    ?assertMatch("/" ++ _, Ours),
    ?assertEqual(filename:join([code:priv_dir(dtrace), "compat", "dyntrace.beam"]), Ours),
    ?assertEqual(code:where_is_file("dyntrace.beam"), Otps),
    ?assertEqual(false, Installed),
    ?assertEqual(error, Result).

opt_out(Config) ->
    Result = in_peer(Config,
                     fun() ->
                             ok = application:load(dtrace),
                             ok = application:set_env(dtrace, dyntrace_compat, false),
                             ok = application:start(dtrace),
                             {dtrace_compat:installed(), dyntrace:p(1)}
                     end),
    ?assertEqual({false, error}, Result).

%% Every dyntrace function reaches dtrace: same results, same tags.
calls_reach_dtrace(Config) ->
    Result = in_peer(Config,
                     fun() ->
                             ok = application:start(dtrace),
                             undefined = dyntrace:put_tag("via-dyntrace"),
                             {dyntrace:get_tag(), dtrace:get_tag(), dyntrace:get_tag_data(),
                              dyntrace:spread_tag(true), dyntrace:restore_tag({0, []}),
                              dyntrace:pn(1000), dyntrace:pn(x), dyntrace:p(1, 2, 3, 4, a, b, c, d),
                              dyntrace:user_trace_s1("m"),
                              dyntrace:user_trace_i4s4(t, 1, 2, 3, 4, a, b, c, d)}
                     end),
    ?assertEqual({<<"via-dyntrace">>, <<"via-dyntrace">>, <<"via-dyntrace">>,
                  {0, <<"via-dyntrace">>}, true, error, badarg, false, false, false}, Result).

%% OTP documents {tracer, dyntrace, []} for its LTTng build; with the
%% compatibility layer, erlang:trace/3 accepts it on a stock VM (as stock
%% OTP's dyntrace does), and it fires dtrace's VM probes for the processes
%% traced with it: here the automatic mode is off, so only those.
dyntrace_is_a_tracer(Config) ->
    %% Automatic mode off: while it traces a process, no other tracer can
    %% (OTP 25 allows one tracer per process).
    ok = call(Config, application, load, [dtrace]),
    ok = call(Config, application, set_env, [dtrace, vm_probes, manual]),
    ok = call(Config, application, start, [dtrace]),
    true = call(Config, dtrace_compat, installed, []),
    Program = "usdt:$SO:erlang:process__spawn { printf(\"SPAWN %s %s\\n\", str(arg0), str(arg1)); }",
    {{Traced, Tracer, Child}, Lines} =
        dtrace_test_tracer:bpftrace_marked(
          ?config(peer, Config), Program, fun() -> ok end, [],
          fun() ->
                  %% A poll has run while bpftrace listens: manual mode
                  %% set nothing.
                  ok = dtrace_vm:sync(),
                  Self = self(),
                  P = spawn(fun() -> receive go -> Self ! {child, spawn(fun() -> ok end)} end end),
                  N = erlang:trace(P, true, [{tracer, dyntrace, []}, procs]),
                  T = erlang:trace_info(P, tracer),
                  P ! go,
                  C = receive {child, C0} -> C0 end,
                  {N, T, pid_to_list(C)}
          end),
    ?assertEqual(1, Traced),
    ?assertEqual({tracer, {dyntrace, []}}, Tracer),
    ?assertEqual([iolist_to_binary(["SPAWN ", Child, " erlang:apply/2"])],
                 [L || <<"SPAWN ", _/binary>> = L <- Lines]).
