%%% What the recorder suites (dtrace_recorder_SUITE, dtrace_recorder_relay_SUITE,
%%% dtrace_recorder_user_SUITE) share on the test's own node: their
%%% suite's precondition and their cases' set-up and clean-up (a tmpfs, a
%%% relay daemon), the calls their cases make on a peer's recorder, and
%%% the report read and checked. The tools underneath (the skip/fail
%%% policy, peers, traces, relay daemons, the peers' workloads) are
%%% dtrace_test_recorder's.
-module(dtrace_test_recorder_cases).

-export([init_suite/1, mount_tmpfs/2, start_relay/3, end_case/1,
         snapshots/2, trigger/3, report/2, assert_contains/2, section/2, dedup/1, list_dir/1]).

-define(T, dtrace_test_recorder).

%%% Set-up and clean-up

%% init_per_suite/1 of each recorder suite: root, LTTng and babeltrace2
%% here (dtrace_test_recorder:require/1), and the library's LTTng sink
%% loading on this machine.
init_suite(Config) ->
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

%% end_per_testcase/2 of each recorder suite: the case's peers stopped,
%% its relay daemons, and its tmpfs unmounted.
end_case(Config) ->
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

%%% A peer's recorder

snapshots(Peer, R) ->
    peer:call(Peer, dtrace_recorder, snapshots, [R]).

trigger(Peer, R, Reason) ->
    peer:call(Peer, dtrace_recorder, trigger, [R, Reason, 30000], 60000).

%%% The report, and what the cases check

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
