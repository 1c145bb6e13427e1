%%% End to end: real tracers (readelf, bpftrace, gdb) on a real node.
%%%
%%% Each test traces a peer node, so that gdb stopping the traced OS process
%%% never stops the test runner. Where a tracer cannot attach (not root, not
%%% installed) the test skips and says why; with CI=true it fails instead.
-module(dtrace_tracer_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_testcase/2, end_per_testcase/2]).
-export([readelf_lists_every_probe_and_semaphore/1,
         bpftrace_sees_pid_tag_and_integers/1,
         bpftrace_counts_every_true/1,
         bpftrace_user_trace_s1/1,
         gdb_reads_all_ten_arguments/1]).

-define(MARK, 424242).
-define(N_CALLS, 20000).

all() ->
    [readelf_lists_every_probe_and_semaphore,
     bpftrace_sees_pid_tag_and_integers,
     bpftrace_counts_every_true,
     bpftrace_user_trace_s1,
     gdb_reads_all_ten_arguments].

init_per_testcase(readelf_lists_every_probe_and_semaphore, Config) ->
    dtrace_test_lib:with_tracer(readelf, Config);
init_per_testcase(TC, Config) ->
    Tool = case atom_to_list(TC) of "gdb" ++ _ -> gdb; _ -> bpftrace end,
    case dtrace_test_lib:require_tracer(Tool) of
        ok ->
            Peer = dtrace_test_lib:start_peer(),
            [{peer, Peer}, {os_pid, dtrace_test_lib:os_pid(Peer)} | Config];
        Skip ->
            Skip
    end.

end_per_testcase(_TC, Config) ->
    case ?config(peer, Config) of
        undefined -> ok;
        Peer -> dtrace_test_lib:stop_peer(Peer)
    end.

%% Runs Fun() in the traced peer.
in_peer(Config, Fun) ->
    peer:call(?config(peer, Config), erlang, apply, [Fun, []], 120000).

%%--------------------------------------------------------------------

%% All 957 probes are in the library (953 user probes, 4 file-driver
%% probes), each with its own semaphore and OTP's argument count.
readelf_lists_every_probe_and_semaphore(_Config) ->
    {0, Lines} = dtrace_test_lib:run("readelf", ["-n", dtrace_test_lib:nif_path()]),
    Notes = parse_notes(Lines),
    Names = [N || {N, _, _} <- Notes],
    Efile = [{"efile_drv__entry", 11}, {"efile_drv__int_entry", 3},
             {"efile_drv__int_return", 3}, {"efile_drv__return", 6}],
    Expected = ["user_trace__s1", "user_trace__i4s4"
                | ["user_trace__n" ++ integer_to_list(L) || L <- lists:seq(0, 950)]]
        ++ [N || {N, _} <- Efile],
    ?assertEqual(957, length(Notes)),
    ?assertEqual(lists:sort(Expected), lists:sort(Names)),
    Semaphores = [S || {_, S, _} <- Notes],
    ?assertEqual([], [N || {N, 0, _} <- Notes]),
    ?assertEqual(957, length(lists:usort(Semaphores))),
    ?assertEqual([1], lists:usort([A || {"user_trace__s1", _, A} <- Notes])),
    ?assertEqual([10], lists:usort([A || {"user_trace__" ++ _ = N, _, A} <- Notes,
                                         N =/= "user_trace__s1"])),
    ?assertEqual(lists:sort(Efile), lists:sort([{N, A} || {"efile_drv__" ++ _ = N, _, A} <- Notes])).

%% [{Name, SemaphoreAddress, ArgumentCount}] of the erlang provider.
parse_notes(Lines) ->
    parse_notes([unicode:characters_to_list(L) || L <- Lines], undefined, []).

parse_notes([], _, Acc) ->
    lists:reverse(Acc);
parse_notes([Line | Rest], Provider, Acc) ->
    case string:lexemes(Line, " ,") of
        ["Provider:", P] -> parse_notes(Rest, P, Acc);
        ["Name:", Name] when Provider =:= "erlang" ->
            [Loc, Args | Rest1] = Rest,
            {match, [Sem]} = re:run(Loc, "Semaphore: 0x([0-9a-f]+)",
                                    [{capture, all_but_first, list}]),
            ["Arguments:" | ArgSpecs] = string:lexemes(Args, " "),
            parse_notes(Rest1, Provider,
                        [{Name, list_to_integer(Sem, 16), length(ArgSpecs)} | Acc]);
        _ -> parse_notes(Rest, Provider, Acc)
    end.

%% Returns flip to true while bpftrace listens and back to false after it
%% leaves; pid, tag and i1..i4 arrive (bpftrace 0.17 reads arg0..arg5).
bpftrace_sees_pid_tag_and_integers(Config) ->
    ?assertEqual(false, in_peer(Config, fun() -> dtrace:p(1) end)),
    Tracer = dtrace_test_lib:bpftrace_start(?config(os_pid, Config), "
        usdt:$SO:erlang:user_trace__i4s4 /arg2 == " ++ integer_to_list(?MARK) ++ "/ {
            printf(\"MARK %s %s %ld %ld %ld %ld\\n\",
                   str(arg0), str(arg1), arg2, arg3, arg4, arg5);
        }
        usdt:$SO:erlang:user_trace__n7 /arg1 == 0/ {
            printf(\"N7 %s notag %ld\\n\", str(arg0), arg2);
        }"),
    {Pid, Results} =
        in_peer(Config,
                fun() ->
                        1 = dtrace_test_lib:fire_until_true(fun dtrace:p/0),
                        dtrace:put_tag(<<"bt-tag">>),
                        R1 = dtrace:p(?MARK, -7, 9223372036854775807, 1 bsl 64),
                        dtrace:put_tag(undefined),
                        R2 = dtrace:pn(7, -9223372036854775808),
                        {pid_to_list(self()), [R1, R2]}
                end),
    Lines = dtrace_test_lib:bpftrace_stop(Tracer),
    ?assertEqual([true, true], Results),
    ?assertEqual([iolist_to_binary(["MARK ", Pid, " bt-tag 424242 -7 9223372036854775807 0"])],
                 [L || <<"MARK", _/binary>> = L <- Lines]),
    ?assertEqual([iolist_to_binary(["N7 ", Pid, " notag -9223372036854775808"])],
                 [L || <<"N7", _/binary>> = L <- Lines]),
    ?assertEqual(false, in_peer(Config, fun() -> dtrace:p(1) end)).

%% Every true return is one event the tracer counted, and only those:
%% p/1, p/2, p/8 and pn mixed, from several processes. Ready events (i1 =
%% 0; the workload's are >= 1) only open the window (see dtrace_test_lib:bpftrace_window/5).
bpftrace_counts_every_true(Config) ->
    {{TruesI4s4, TruesN42}, Lines} =
        dtrace_test_lib:bpftrace_window(
          ?config(peer, Config), "
            usdt:$SO:erlang:user_trace__i4s4 {
                if (arg2 == 0) { printf(\"SEEN i4s4\\n\"); } else { @i4s4 = count(); }
            }
            usdt:$SO:erlang:user_trace__n42 {
                if (arg2 == 0) { printf(\"SEEN n42\\n\"); } else { @n42 = count(); }
            }",
          fun() -> dtrace:p(0), dtrace:pn(42, 0) end,
          [<<"SEEN i4s4">>, <<"SEEN n42">>],
          fun() ->
                  Self = self(),
                  Workers = [spawn_link(fun() -> Self ! {self(), work()} end)
                             || _ <- lists:seq(1, 4)],
                  lists:foldl(fun(W, {A, B}) ->
                                      receive {W, {X, Y}} -> {A + X, B + Y} end
                              end, {0, 0}, Workers)
          end),
    ?assertEqual({4 * ?N_CALLS, 4 * (?N_CALLS div 2)}, {TruesI4s4, TruesN42}),
    ?assertEqual({TruesI4s4, TruesN42}, {dtrace_test_lib:bpftrace_map(<<"@i4s4">>, Lines), dtrace_test_lib:bpftrace_map(<<"@n42">>, Lines)}).

work() ->
    Probes = [fun(I) -> dtrace:p(I) end,
              fun(I) -> dtrace:p(I, "two") end,
              fun(I) -> dtrace:p(I, I, I, I, "a", "b", "c", "d") end,
              fun(I) -> dtrace:pn(42, I) end],
    I4s4 = dtrace_test_lib:count_trues(fun(I) -> (lists:nth(1 + I rem 3, Probes))(I) end, ?N_CALLS),
    N42 = dtrace_test_lib:count_trues(fun(I) -> (lists:nth(4, Probes))(I) end, ?N_CALLS div 2),
    {I4s4, N42}.

%% user_trace_s1: fires with the message; a bad or over-long message
%% returns badarg and fires nothing.
bpftrace_user_trace_s1(Config) ->
    {Results, Lines} =
        dtrace_test_lib:bpftrace_window(
          ?config(peer, Config), "
            usdt:$SO:erlang:user_trace__s1 {
                if (str(arg0) == \"ready\") { printf(\"SEEN s1\\n\"); }
                else { @s1 = count(); printf(\"S1 %s\\n\", str(arg0)); }
            }",
          fun() -> dtrace:user_trace_s1("ready") end,
          [<<"SEEN s1">>],
          fun() ->
                  [dtrace:user_trace_s1([<<"hel">>, "lo"]),
                   dtrace:user_trace_s1(lists:duplicate(1025, $x)),
                   dtrace:user_trace_s1(not_iolist),
                   dtrace:user_trace_s1([256])]
          end),
    ?assertEqual([true, badarg, badarg, badarg], Results),
    ?assertEqual([<<"S1 hello">>], [L || <<"S1 ", _/binary>> = L <- Lines]),
    ?assertEqual(1, dtrace_test_lib:bpftrace_map(<<"@s1">>, Lines)).

%% gdb reads all ten arguments of user_trace__i4s4 and the numbered probes,
%% the four strings included (NULL where absent, too long, or no iolist).
gdb_reads_all_ten_arguments(Config) ->
    {{Pid, Results}, Events} =
        dtrace_test_lib:gdb_events(
          ?config(peer, Config),
          fun() ->
                  dtrace:put_tag("gdb-tag"),
                  R = [dtrace:p(1, -2, "s-one", <<"s-two">>),
                       dtrace:p(1, 2, 3, 4, "a", [$b, [<<"c">>]], undef, lists:duplicate(1024, $x)),
                       dtrace:p(1, 2, 3, 4, <<>>, [], lists:duplicate(1025, $x), [-1])],
                  dtrace:put_tag(undefined),
                  {pid_to_list(self()), R ++ [dtrace:pn(0, "n-zero")]}
          end),
    ?assertEqual([true, true, true, true], Results),
    X1024 = lists:duplicate(1024, $x),
    Expected = [["EVENT i4s4 pid=", Pid, " tag=gdb-tag ints=1,-2,0,0 s1=s-one s2=s-two s3=NULL s4=NULL"],
                ["EVENT i4s4 pid=", Pid, " tag=gdb-tag ints=1,2,3,4 s1=a s2=bc s3=NULL s4=", X1024],
                ["EVENT i4s4 pid=", Pid, " tag=gdb-tag ints=1,2,3,4 s1= s2= s3=NULL s4=NULL"],
                ["EVENT n0 pid=", Pid, " tag=NULL ints=0,0,0,0 s1=n-zero s2=NULL s3=NULL s4=NULL"]],
    ?assertEqual([iolist_to_binary(E) || E <- Expected], Events).
