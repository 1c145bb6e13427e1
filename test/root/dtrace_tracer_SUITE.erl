%%% End to end: real tracers (readelf, bpftrace, gdb, perf) on a real node.
%%%
%%% Each test traces a peer node, so that gdb stopping the traced OS process
%%% never stops the test runner. Where a tracer cannot attach (not root, not
%%% installed) the test skips and says why; with CI=true it fails instead.
-module(dtrace_tracer_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_testcase/2, end_per_testcase/2]).
-export([notes_match_the_catalogue/1,
         layout_lets_tracers_resolve_probes/1,
         shipped_scripts_print_int64_in_full/1,
         bpftrace_sees_pid_tag_and_integers/1,
         bpftrace_counts_every_true/1,
         bpftrace_user_trace_s1/1,
         bpftrace_sees_spans/1, bpftrace_sees_slow_spans/1, span_latency_bt_shows_failed_spans/1,
         dtrace_bpftrace_reads_every_argument/1,
         user_probe_bt_prints_otps_format/1,
         gdb_reads_all_ten_arguments/1,
         perf_counts_every_true/1,
         perf_shows_the_arguments/1]).

-define(MARK, 424242).
-define(N_CALLS, 20000).

all() ->
    [notes_match_the_catalogue,
     layout_lets_tracers_resolve_probes,
     shipped_scripts_print_int64_in_full,
     bpftrace_sees_pid_tag_and_integers,
     bpftrace_counts_every_true,
     bpftrace_user_trace_s1,
     bpftrace_sees_spans, bpftrace_sees_slow_spans, span_latency_bt_shows_failed_spans,
     dtrace_bpftrace_reads_every_argument,
     user_probe_bt_prints_otps_format,
     gdb_reads_all_ten_arguments,
     perf_counts_every_true,
     perf_shows_the_arguments].

init_per_testcase(TC, Config) when TC =:= notes_match_the_catalogue;
                                   TC =:= layout_lets_tracers_resolve_probes ->
    dtrace_test_tracer:with_tracer(readelf, Config);
init_per_testcase(shipped_scripts_print_int64_in_full, Config) ->
    Config;
init_per_testcase(TC, Config) ->
    Tool = case atom_to_list(TC) of
               "gdb" ++ _ -> gdb;
               "perf" ++ _ -> perf;
               _ -> bpftrace
           end,
    case dtrace_test_tracer:require_tracer(Tool) of
        ok ->
            Peer = dtrace_test_peer:start_peer(),
            [{peer, Peer}, {os_pid, dtrace_test_peer:os_pid(Peer)} | Config];
        Skip ->
            Skip
    end.

end_per_testcase(TC, Config) ->
    case atom_to_list(TC) of
        "perf" ++ _ -> perf_cleanup();
        _ -> ok
    end,
    case ?config(peer, Config) of
        undefined -> ok;
        Peer -> dtrace_test_peer:stop_peer(Peer)
    end.

%% Runs Fun() in the traced peer.
in_peer(Config, Fun) ->
    peer:call(?config(peer, Config), erlang, apply, [Fun, []], 120000).

%%--------------------------------------------------------------------

%% The library's notes are the catalogue's: every probe of probes.d (1028:
%% 953 user probes, 7 span probes, 4 file-driver probes, OTP's 55 VM probes
%% and 9 of the library's) and no other, each with its own
%% semaphore and exactly the argument specs the catalogue gives (sizes from
%% the declared types, registers fixed); argument k sits in the same
%% register in every note.
notes_match_the_catalogue(_Config) ->
    Catalogue = dtrace_test_catalogue:catalogue(),
    Notes = [N || #{provider := <<"erlang">>} = N <- dtrace_test_catalogue:notes(dtrace_test_catalogue:nif_path())],
    ?assertEqual(1028, length(Catalogue)),
    ?assertEqual(lists:sort([{Name, [S || {_, _, _, S} <- Args]} || {Name, Args} <- Catalogue]),
                 lists:sort([{Name, Args} || #{name := Name, args := Args} <- Notes])),
    Semaphores = [S || #{semaphore := S} <- Notes],
    ?assertEqual([], [N || #{name := N, semaphore := 0} <- Notes]),
    ?assertEqual(length(Notes), length(lists:usort(Semaphores))),
    %% Argument k: one register (its 32-bit view for an int) in all notes.
    Registers = lists:usort([{K, register64(Spec)} || #{args := Args} <- Notes,
                                                      {K, Spec} <- lists:enumerate(0, Args)]),
    ?assertEqual(lists:usort([K || {K, _} <- Registers]), [K || {K, _} <- Registers]),
    ?assertEqual([{0, <<"rdi">>}, {1, <<"rsi">>}, {2, <<"rdx">>}, {3, <<"rcx">>}, {4, <<"r8">>},
                  {5, <<"r9">>}, {6, <<"r10">>}, {7, <<"r11">>}, {8, <<"r12">>}, {9, <<"r13">>},
                  {10, <<"r14">>}], Registers),
    [?assertMatch({_, _}, lists:keyfind(K, 1, Registers)) || K <- lists:seq(0, 9)],
    ct:log("~b notes, registers ~p", [length(Notes), Registers]).

%% "-8@%rdx" -> <<"rdx">>, "-4@%r10d" -> <<"r10">>, "-4@%edi" -> <<"rdi">>.
register64(Spec) ->
    [_, <<"%", Reg/binary>>] = binary:split(Spec, <<"@">>),
    case Reg of
        <<"e", R/binary>> -> <<"r", R/binary>>;
        <<"r", D, _/binary>> when D >= $0, D =< $9 -> string:trim(Reg, trailing, "d");
        _ -> Reg
    end.

%% Every probe site lies in an executable segment whose file offset equals
%% its virtual address, so a tracer that takes a note's address for a file
%% offset (perf 6.1) still puts its breakpoint on the site; semaphores lie
%% in the writable .probes section, and .stapsdt.base is there.
layout_lets_tracers_resolve_probes(_Config) ->
    So = dtrace_test_catalogue:nif_path(),
    {0, Segments} = dtrace_test_tracer:run("readelf", ["-lW", So]),
    Loads = [{binary_to_integer(Off, 16), binary_to_integer(VA, 16), binary_to_integer(Sz, 16), Flags}
             || L <- Segments,
                {match, [Off, VA, Sz, Flags]} <-
                    [re:run(L, "^\\s*LOAD\\s+0x([0-9a-f]+)\\s+0x([0-9a-f]+)\\s+0x[0-9a-f]+\\s+0x[0-9a-f]+"
                                "\\s+0x([0-9a-f]+)\\s+([RWE ]+?)\\s+0x", [{capture, all_but_first, binary}])]],
    {0, Sections} = dtrace_test_tracer:run("readelf", ["-SW", So]),
    {ProbesAddr, ProbesSize} = section(Sections, ".probes"),
    {BaseAddr, _} = section(Sections, ".stapsdt.base"),
    Notes = dtrace_test_catalogue:notes(So),
    Containing = fun(Addr) -> [Seg || {_, VA, Sz, _} = Seg <- Loads, Addr >= VA, Addr < VA + Sz] end,
    Misplaced = [{Name, Loc, Containing(Loc)}
                 || #{name := Name, location := Loc} <- Notes,
                    not lists:any(fun({Off, VA, _, Flags}) ->
                                          Off =:= VA andalso binary:match(Flags, <<"E">>) =/= nomatch
                                  end, Containing(Loc))],
    ?assertEqual([], Misplaced),
    ?assertEqual([], [N || #{name := N, semaphore := S} <- Notes,
                           S < ProbesAddr orelse S + 2 > ProbesAddr + ProbesSize]),
    ?assertEqual([], [N || #{name := N, base := B} <- Notes, B =/= BaseAddr]),
    ct:log("LOAD segments ~p~n.probes ~.16b+~b", [Loads, ProbesAddr, ProbesSize]).

section(Sections, Name) ->
    case [{binary_to_integer(A, 16), binary_to_integer(S, 16)}
          || L <- Sections,
             {match, [A, S]} <- [re:run(L, "\\s" ++ re_escape(Name) ++
                                            "\\s+\\S+\\s+([0-9a-f]+)\\s+[0-9a-f]+\\s+([0-9a-f]+)\\s",
                                        [{capture, all_but_first, binary}])]] of
        [Found] -> Found;
        Other -> ct:fail("section ~s: ~p", [Name, Other])
    end.

re_escape(S) ->
    lists:append([case C of $. -> "\\."; _ -> [C] end || C <- S]).

%% bpftrace 0.17 and gdb print only the low 32 bits of an int64 with %d:
%% the shipped scripts use %ld.
shipped_scripts_print_int64_in_full(_Config) ->
    Scripts = lists:append([filelib:wildcard(filename:join(code:priv_dir(dtrace), W))
                            || W <- ["bpftrace/*.bt", "gdb/*.gdb"]]),
    ?assert(length(Scripts) >= 4),
    Found = [{filename:basename(F), Line}
             || F <- Scripts,
                {ok, Text} <- [file:read_file(F)],
                Line <- binary:split(Text, <<"\n">>, [global]),
                re:run(Line, "%[-0-9]*d") =/= nomatch],
    ?assertEqual([], Found).

%% Returns flip to true while bpftrace listens and back to false after it
%% leaves; pid, tag and i1..i4 arrive (bpftrace 0.17 reads arg0..arg5).
bpftrace_sees_pid_tag_and_integers(Config) ->
    ?assertEqual(false, in_peer(Config, fun() -> dtrace:p(1) end)),
    {{Pid, Results}, Lines} =
        dtrace_test_tracer:bpftrace_marked(?config(peer, Config), "
        usdt:$SO:erlang:user_trace__i4s4 /arg2 == " ++ integer_to_list(?MARK) ++ "/ {
            printf(\"MARK %s %s %ld %ld %ld %ld\\n\",
                   str(arg0), str(arg1), arg2, arg3, arg4, arg5);
        }
        usdt:$SO:erlang:user_trace__n7 /arg1 == 0/ {
            printf(\"N7 %s notag %ld\\n\", str(arg0), arg2);
        }", fun() -> ok end, [],
          fun() ->
                  dtrace:put_tag(<<"bt-tag">>),
                  R1 = dtrace:p(?MARK, -7, 9223372036854775807, 1 bsl 64),
                  dtrace:put_tag(undefined),
                  R2 = dtrace:pn(7, -9223372036854775808),
                  {pid_to_list(self()), [R1, R2]}
          end),
    ?assertEqual([true, true], Results),
    ?assertEqual([iolist_to_binary(["MARK ", Pid, " bt-tag 424242 -7 9223372036854775807 0"])],
                 [L || <<"MARK", _/binary>> = L <- Lines]),
    ?assertEqual([iolist_to_binary(["N7 ", Pid, " notag -9223372036854775808"])],
                 [L || <<"N7", _/binary>> = L <- Lines]),
    ?assertEqual(false, in_peer(Config, fun() -> dtrace:p(1) end)).

%% Every true return is one event the tracer counted, and only those:
%% p/1, p/2, p/8 and pn mixed, from several processes. Ready events (i1 =
%% 0; the workload's are >= 1) only open the window (see dtrace_test_tracer:bpftrace_window/5).
bpftrace_counts_every_true(Config) ->
    {{TruesI4s4, TruesN42}, Lines} =
        dtrace_test_tracer:bpftrace_window(
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
    ?assertEqual({TruesI4s4, TruesN42}, {dtrace_test_tracer:bpftrace_map(<<"@i4s4">>, Lines), dtrace_test_tracer:bpftrace_map(<<"@n42">>, Lines)}).

work() ->
    Probes = [fun(I) -> dtrace:p(I) end,
              fun(I) -> dtrace:p(I, "two") end,
              fun(I) -> dtrace:p(I, I, I, I, "a", "b", "c", "d") end,
              fun(I) -> dtrace:pn(42, I) end],
    I4s4 = dtrace_test_workload:count_trues(fun(I) -> (lists:nth(1 + I rem 3, Probes))(I) end, ?N_CALLS),
    N42 = dtrace_test_workload:count_trues(fun(I) -> (lists:nth(4, Probes))(I) end, ?N_CALLS div 2),
    {I4s4, N42}.

%% user_trace_s1: fires with the message; a bad or over-long message
%% returns badarg and fires nothing.
bpftrace_user_trace_s1(Config) ->
    {Results, Lines} =
        dtrace_test_tracer:bpftrace_window(
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
    ?assertEqual(1, dtrace_test_tracer:bpftrace_map(<<"@s1">>, Lines)).

%% gdb reads all ten arguments of user_trace__i4s4 and the numbered probes,
%% the four strings included (NULL where absent, too long, or no iolist).
gdb_reads_all_ten_arguments(Config) ->
    {{Pid, Results}, Events} =
        dtrace_test_tracer:gdb_events(
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

%% Through priv/bin/dtrace-bpftrace, a bpftrace that reads arg0..arg5 only
%% (Debian 12's 0.17) reads every argument: the ten of user_trace__i4s4
%% and of a numbered probe, the eleven of efile_drv__entry. Strings,
%% NULLs and 64-bit integers arrive. (On a bpftrace of 0.24 or later the
%% wrapper changes nothing, and the same program reads them natively.)
dtrace_bpftrace_reads_every_argument(Config) ->
    Print10 = "printf(\"%s %s %s %ld %ld %ld %ld %s %s %s %s\\n\", $KIND, str(arg0), str(arg1), "
              "arg2, arg3, arg4, arg5, str(arg6), str(arg7), str(arg8), str(arg9));",
    Program = "
        usdt:$SO:erlang:user_trace__i4s4 {
            if (arg2 == 0) { printf(\"SEEN i4s4\\n\"); } else { " ++
        string:replace(Print10, "$KIND", "\"I4S4\"") ++ " }
        }
        usdt:$SO:erlang:user_trace__n950 {
            if (arg2 == 0) { printf(\"SEEN n950\\n\"); } else { " ++
        string:replace(Print10, "$KIND", "\"N950\"") ++ " }
        }
        usdt:$SO:erlang:efile_drv__entry {
            if (arg3 == 0) { printf(\"SEEN efile\\n\"); } else {
                printf(\"ENTRY %ld %ld %s %ld %s %s %ld %ld %ld %ld %s\\n\", arg0, arg1, str(arg2),
                       arg3, str(arg4), str(arg5), arg6, arg7, arg8, arg9, str(arg10));
            }
        }",
    Max = 9223372036854775807,
    {{Pid, Results}, Lines} =
        dtrace_test_tracer:bpftrace_window(
          dtrace_bpftrace, ?config(peer, Config), Program,
          fun() ->
                  dtrace:p(0), dtrace:pn(950, 0),
                  dtrace_nif:efile_entry(1, 0, "x", "y", 0, 0, 0, 0, undefined, undefined)
          end,
          [<<"SEEN i4s4">>, <<"SEEN n950">>, <<"SEEN efile">>],
          fun() ->
                  dtrace:put_tag(<<"wrapped">>),
                  R = [dtrace:p(1, -2, Max, -Max - 1, "s-one", <<"s-two">>, ["s-", <<"three">>], "s-four"),
                       dtrace:pn(950, 5, 6, 7, 8, "a", "b", undef, "d")],
                  Op = dtrace_nif:efile_entry(3, 12, "old-name", "new-name", 11, -12, Max, 14,
                                          <<"file-tag">>, self()),
                  dtrace:put_tag(undefined),
                  {pid_to_list(self()), R ++ [is_integer(Op)]}
          end),
    ?assertEqual([true, true, true], Results),
    ?assertEqual([iolist_to_binary(["I4S4 ", Pid, " wrapped 1 -2 9223372036854775807 "
                                    "-9223372036854775808 s-one s-two s-three s-four"])],
                 [L || <<"I4S4 ", _/binary>> = L <- Lines]),
    ?assertEqual([iolist_to_binary(["N950 ", Pid, " wrapped 5 6 7 8 a b  d"])],
                 [L || <<"N950 ", _/binary>> = L <- Lines]),
    ?assertMatch([<<"ENTRY 3 ", _/binary>>], [L || <<"ENTRY ", _/binary>> = L <- Lines]),
    [<<"ENTRY 3 ", Rest/binary>>] = [L || <<"ENTRY ", _/binary>> = L <- Lines],
    ?assertMatch([_OpTag, <<"file-tag">>, <<"12">>, <<"old-name">>, <<"new-name">>, <<"11">>,
                  <<"-12">>, <<"9223372036854775807">>, <<"14">>, _], binary:split(Rest, <<" ">>, [global])),
    ?assertEqual(iolist_to_binary(Pid), lists:last(binary:split(Rest, <<" ">>, [global]))).

%% priv/bpftrace/user-probe.bt, run through priv/bin/dtrace-bpftrace, prints what OTP's
%% user-probe.d prints, s1..s4 included.
user_probe_bt_prints_otps_format(Config) ->
    Script = filename:join([code:priv_dir(dtrace), "bpftrace", "user-probe.bt"]),
    {{Pid, Results}, Lines} =
        dtrace_test_tracer:bpftrace_window(
          dtrace_bpftrace, ?config(peer, Config), {file, Script},
          fun() -> dtrace:p("ready") end,
          [{contains, <<"'ready'">>}],
          fun() ->
                  dtrace:put_tag("GGOOOAAALL!!!!!"),
                  R = dtrace:p(7, 8, 9, "one", "four"),
                  dtrace:put_tag(undefined),
                  {pid_to_list(self()), [R, dtrace:p(-1, 1 bsl 40, <<"b">>, "c", "d", "e")]}
          end),
    ?assertEqual([true, true], Results),
    Events = [L || L <- Lines, binary:match(L, <<"'ready'">>) =:= nomatch,
                   binary:match(L, list_to_binary(Pid)) =/= nomatch],
    ?assertEqual([iolist_to_binary([Pid, " GGOOOAAALL!!!!! 7 8 9 0 'one' 'four' '' ''"]),
                  iolist_to_binary([Pid, "  -1 1099511627776 0 0 'b' 'c' 'd' 'e'"])], Events).

%% perf (Debian's 6.1) places its uprobes on the sites and raises the
%% semaphores: perf stat counts exactly as many events as there were true
%% returns, from 4 processes. A ready probe (user_trace__n6) shows when
%% perf counts; the workload fires user_trace__n5.
perf_counts_every_true(Config) ->
    So = dtrace_test_catalogue:nif_path(),
    [N5, N6] = perf_add_probes(Config, So, ["user_trace__n5", "user_trace__n6"]),
    Peer = ?config(peer, Config),
    Port = open_port({spawn_executable, os:find_executable("perf")},
                     [{args, ["stat", "-I", "100", "-x", ",", "-e", N6, "-e", N5, "-p", ?config(os_pid, Config)]},
                      {line, 4096}, stderr_to_stdout, exit_status, binary]),
    ok = peer:call(Peer, dtrace_test_workload, start_ready_loop, [fun() -> dtrace:pn(6) end]),
    Seen = perf_wait_count(Port, list_to_binary(N6), []),
    Trues = peer:call(Peer, dtrace_test_workload, stop_ready_loop_and_run,
                      [fun() ->
                               Self = self(),
                               Ws = [spawn_link(fun() ->
                                                        Self ! {self(), dtrace_test_workload:count_trues(
                                                                          fun(I) -> dtrace:pn(5, I) end, 10000)}
                                                end) || _ <- lists:seq(1, 4)],
                               lists:sum([receive {W, N} -> N end || W <- Ws])
                       end], 120000),
    %% perf stat -I prints the counts of each 100 ms interval: it is
    %% stopped once they add up to the true returns (or after 30 s).
    Counts = fun(Ls) -> lists:sum([binary_to_integer(N) || L <- Ls,
                                                           [_, N, _, E | _] <-
                                                               [binary:split(string:trim(L), <<",">>, [global])],
                                                           E =:= list_to_binary(N5),
                                                           N =/= <<"<not counted>">>])
             end,
    Counting = perf_until(Port, fun(Ls) -> Counts(Ls) >= Trues end, Seen,
                          erlang:monotonic_time(millisecond) + 30000),
    {os_pid, PerfPid} = erlang:port_info(Port, os_pid),
    _ = os:cmd("kill -INT " ++ integer_to_list(PerfPid)),
    Counted = Counts(Counting ++ perf_collect(Port, [])),
    ?assertEqual(40000, Trues),
    ?assertEqual(Trues, Counted).

%% perf record + perf script show the arguments: the integers of the SDT
%% event as they were passed (64 bits, signed), and, through a tracefs
%% event at the same site and semaphore with string fetch arguments (the
%% recipe of docs/tracers.md), the strings.
perf_shows_the_arguments(Config) ->
    So = dtrace_test_catalogue:nif_path(),
    [N7] = perf_add_probes(Config, So, ["user_trace__n7"]),
    %% docs/tracers.md's recipe: the site and semaphore perf found, with
    %% string-typed fetch arguments.
    {ok, Events} = file:read_file("/sys/kernel/tracing/uprobe_events"),
    {match, [Where]} = re:run(Events, string:replace(N7, ":", "/") ++ " (\\S+)", [{capture, all_but_first, binary}]),
    Def = ["p:dtrace_erlang/n7 ", Where, " pid=+0(%di):string tag=+0(%si):string i1=%dx:s64"
           " s1=+0(%r10):string s4=+0(%r13):string\n"],
    ok = file:write_file("/sys/kernel/tracing/uprobe_events", Def, [append]),
    Priv = ?config(priv_dir, Config),
    Data = filename:join(Priv, "perf.data"),
    %% perf raises the semaphores when it opens its events, and enables
    %% them a moment later; nothing it prints tells when. So it opens them
    %% disabled (-D -1) and is told to enable them through a control FIFO:
    %% its "ack" says they are.
    [Ctl, Ack] = [filename:join(Priv, F) || F <- ["perf-ctl", "perf-ack"]],
    {0, _} = dtrace_test_tracer:run("mkfifo", [Ctl, Ack]),
    Port = open_port({spawn_executable, os:find_executable("perf")},
                     [{args, ["record", "-o", Data, "-D", "-1", "--control", "fifo:" ++ Ctl ++ "," ++ Ack,
                              "-e", N7,
                              "-e", "dtrace_erlang:n7", "-p", ?config(os_pid, Config)]},
                      {line, 4096}, stderr_to_stdout, exit_status, binary]),
    %% Both FIFOs are open on perf's side (read and write, non-blocking):
    %% the command waits in the FIFO until perf reads it.
    {0, [<<"ack">>]} = dtrace_test_tracer:run("sh", ["-c", "echo enable > \"$0\" && timeout 60 head -n 1 \"$1\"",
                                                    Ctl, Ack]),
    Pid = in_peer(Config,
                  fun() ->
                          1 = dtrace_test_workload:fire_until_true(fun() -> dtrace:is_enabled(7) end),
                          dtrace:put_tag(<<"perf-tag">>),
                          true = dtrace:pn(7, 9223372036854775807, -5, 6, 7, "s-one", "b", "c", "s-four"),
                          dtrace:put_tag(undefined),
                          pid_to_list(self())
                  end),
    %% perf record drains the kernel's buffers as it exits.
    {os_pid, PerfPid} = erlang:port_info(Port, os_pid),
    _ = os:cmd("kill -INT " ++ integer_to_list(PerfPid)),
    _ = perf_collect(Port, []),
    {0, Script} = dtrace_test_tracer:run("perf", ["script", "-i", Data]),
    ct:log("perf script: ~p", [Script]),
    [Sdt] = [L || L <- Script, binary:match(L, list_to_binary([N7, ":"])) =/= nomatch],
    ?assertMatch({match, _}, re:run(Sdt, " arg3=9223372036854775807 arg4=-5 arg5=6 arg6=7 ")),
    [Strings] = [L || L <- Script, binary:match(L, <<"dtrace_erlang:n7:">>) =/= nomatch],
    ?assertMatch({match, _}, re:run(Strings, iolist_to_binary(
                                               [" pid=\"", Pid, "\" tag=\"perf-tag\" i1=9223372036854775807"
                                                " s1=\"s-one\" s4=\"s-four\""]))).

%% Registers the SDT events of Probes with perf (perf buildid-cache, perf
%% probe), after removing any left by an earlier run. perf's build-id cache
%% is keyed by build ID: when ~/.debug already holds the same build under
%% another path (a second checkout, the CI's clone), `perf probe -x` fails
%% with "Failed to add events" (docs/tracers.md, perf). So the cache is the case's own.
%% Returns the events perf made, in the order of Probes.
perf_add_probes(Config, So, Probes) ->
    perf_cleanup(),
    Cache = filename:join(?config(priv_dir, Config), "perf-buildid-cache"),
    Perf = fun(Args) -> dtrace_test_tracer:run("perf", ["--buildid-dir", Cache | Args]) end,
    {0, _} = Perf(["buildid-cache", "--add", So]),
    [perf_event(Perf(["probe", "-x", So, "sdt_erlang:" ++ P])) || P <- Probes].

%% The event `perf probe' added, from what it printed: OTP's probe name
%% (sdt_erlang:user_trace__n7) up to perf 6.12, with `__' made `_' by
%% perf 7 (docs/tracers.md, perf).
perf_event({0, Lines}) ->
    [Event] = [binary_to_list(E) || L <- Lines, {match, [E]} <- [re:run(L, "^\\s+(sdt_erlang:\\S+) \\(on ",
                                                                         [{capture, all_but_first, binary}])]],
    Event.

%% Removes the events perf_add_probes/3 and the recipe made.
perf_cleanup() ->
    _ = dtrace_test_tracer:run("perf", ["probe", "-d", "sdt_erlang:*"]),
    _ = file:write_file("/sys/kernel/tracing/uprobe_events", "-:dtrace_erlang/n7\n", [append]),
    ok.

%% perf stat -I lines until one shows a count for Event; returns them.
perf_wait_count(Port, Event, Acc) ->
    receive
        {Port, {data, {eol, Line}}} ->
            case binary:split(string:trim(Line), <<",">>, [global]) of
                [_, N, _, Event | _] when N =/= <<"0">>, N =/= <<"<not counted>">> ->
                    lists:reverse([Line | Acc]);
                _ ->
                    perf_wait_count(Port, Event, [Line | Acc])
            end;
        {Port, {exit_status, S}} ->
            ct:fail("perf exited (~p): ~p", [S, lists:reverse(Acc)])
    after 60000 ->
            ct:fail("perf counted no ~s: ~p", [Event, lists:reverse(Acc)])
    end.

%% Port's lines, after Acc, until Done(Lines) holds or Deadline passes.
perf_until(Port, Done, Acc, Deadline) ->
    case Done(Acc) of
        true -> Acc;
        false ->
            receive
                {Port, {data, {eol, Line}}} -> perf_until(Port, Done, Acc ++ [Line], Deadline);
                {Port, {exit_status, S}} -> ct:fail("perf exited (~p): ~p", [S, Acc])
            after max(0, Deadline - erlang:monotonic_time(millisecond)) ->
                    Acc
            end
    end.

perf_collect(Port, Acc) ->
    receive
        {Port, {data, {eol, Line}}} -> perf_collect(Port, [Line | Acc]);
        {Port, {data, {noeol, Line}}} -> perf_collect(Port, [Line | Acc]);
        {Port, {exit_status, _}} -> lists:reverse(Acc)
    after 60000 ->
            ct:fail("perf did not stop: ~p", [lists:reverse(Acc)])
    end.

%% Spans: span/2 fires span__begin and span__end with the caller's pid and
%% tag, a unique id, the enclosing span as parent (nesting), the kind (an
%% atom as its name, a binary as is), the duration and the outcome ("ok");
%% the end fires when the work raises too, with the exception's class as
%% the outcome, and the exception reaches the caller with its own stack
%% trace; span_begin/1 + span_end/1,2 cross processes, the end in the
%% ending process with the beginning's tag and the outcome span_end/2 says
%% (read through priv/bin/dtrace-bpftrace: the outcome is arg6).
bpftrace_sees_spans(Config) ->
    Program = "
        usdt:$SO:erlang:span__begin /str(arg4) != \"ready\"/ {
            printf(\"B %s %s %ld %ld %s\\n\", str(arg0), str(arg1), arg2, arg3, str(arg4)); }
        usdt:$SO:erlang:span__end {
            printf(\"E %s %s %ld %ld %s %ld %s\\n\", str(arg0), str(arg1), arg2, arg3, str(arg4), arg5,
                   str(arg6)); }",
    SpanEvents = fun(Ls) -> [binary:split(L, <<" ">>, [global]) || <<K, " ", _/binary>> = L <- Ls,
                                                                   K =:= $B orelse K =:= $E,
                                                                   binary:match(L, <<" ready ">>) =:= nomatch]
                 end,
    {{Me, Other, Results}, Lines} =
        dtrace_test_tracer:bpftrace_window(
          dtrace_bpftrace, ?config(peer, Config), Program,
          fun() -> dtrace:span(ready, fun() -> ok end) end,
          [{contains, <<" ready ">>}],
          fun() ->
                  dtrace:put_tag(<<"req-7">>),
                  R1 = dtrace:span(outer, fun() ->
                                                  dtrace:span(<<"inner">>, fun() -> timer:sleep(20), 42 end)
                                          end),
                  R2 = try dtrace:span(failing, fun() -> error(boom) end)
                       catch error:boom:St -> {caught, hd(St)}
                       end,
                  R3 = try dtrace:span(thrown, fun() -> throw(t) end) catch throw:T -> T end,
                  R4 = try dtrace:span(exited, fun() -> exit(x) end) catch exit:X -> {'EXIT', X} end,
                  Span = dtrace:span_begin("cross"),
                  Self = self(),
                  P = spawn(fun() -> dtrace:put_tag(<<"other">>), Self ! {ended, dtrace:span_end(Span)} end),
                  R5 = receive {ended, E} -> E end,
                  R6 = dtrace:span_end(dtrace:span_begin(cross_failed), error),
                  {pid_to_list(self()), pid_to_list(P), [R1, R2, R3, R4, R5, R6]}
          end,
          fun(_, Ls) -> length(SpanEvents(Ls)) >= 14 end),
    ?assertMatch([42, {caught, {?MODULE, _, 0, _}}, t, {'EXIT', x}, true, true], Results),
    Events = SpanEvents(Lines),
    ct:log("span events: ~p", [Events]),
    M = list_to_binary(Me),
    O = list_to_binary(Other),
    [[<<"B">>, M, <<"req-7">>, OuterId, <<"0">>, <<"outer">>],
     [<<"B">>, M, <<"req-7">>, InnerId, OuterId, <<"inner">>],
     [<<"E">>, M, <<"req-7">>, InnerId, OuterId, <<"inner">>, InnerNs, <<"ok">>],
     [<<"E">>, M, <<"req-7">>, OuterId, <<"0">>, <<"outer">>, OuterNs, <<"ok">>],
     [<<"B">>, M, <<"req-7">>, FailId, <<"0">>, <<"failing">>],
     [<<"E">>, M, <<"req-7">>, FailId, <<"0">>, <<"failing">>, _, <<"error">>],
     [<<"B">>, M, <<"req-7">>, ThrownId, <<"0">>, <<"thrown">>],
     [<<"E">>, M, <<"req-7">>, ThrownId, <<"0">>, <<"thrown">>, _, <<"throw">>],
     [<<"B">>, M, <<"req-7">>, ExitedId, <<"0">>, <<"exited">>],
     [<<"E">>, M, <<"req-7">>, ExitedId, <<"0">>, <<"exited">>, _, <<"exit">>],
     [<<"B">>, M, <<"req-7">>, CrossId, <<"0">>, <<"cross">>],
     [<<"E">>, O, <<"req-7">>, CrossId, <<"0">>, <<"cross">>, _, <<"ok">>],
     [<<"B">>, M, <<"req-7">>, CrossFailedId, <<"0">>, <<"cross_failed">>],
     [<<"E">>, M, <<"req-7">>, CrossFailedId, <<"0">>, <<"cross_failed">>, _, <<"error">>]] = Events,
    ?assertEqual(6, length(lists:usort([OuterId, InnerId, FailId, ThrownId, ExitedId, CrossId]))),
    ?assertNotEqual(CrossId, CrossFailedId),
    ?assert(binary_to_integer(InnerNs) >= 20000000),
    ?assert(binary_to_integer(OuterNs) >= binary_to_integer(InnerNs)).

%% priv/bpftrace/span-latency.bt (through priv/bin/dtrace-bpftrace, as its usage says)
%% prints a slow span as it ends, a failed one with its outcome whatever
%% its duration, and at exit the failed spans by kind and outcome and the
%% spans per kind. A span with no user tag names its process instead.
span_latency_bt_shows_failed_spans(Config) ->
    Script = filename:join([code:priv_dir(dtrace), "bpftrace", "span-latency.bt"]),
    %% The application names processes (dtrace_names).
    {ok, _} = peer:call(?config(peer, Config), application, ensure_all_started, [dtrace]),
    {Pids, Lines} =
        dtrace_test_tracer:bpftrace_window(
          dtrace_bpftrace, ?config(peer, Config), {file, Script},
          %% Untagged, in a registered process named as it starts: once
          %% its name is printed, every clause is attached (bpftrace
          %% attaches them one by one).
          dtrace_test_workload:named(bt_ready_proc, fun() -> try dtrace:span(ready, fun() -> throw(ready) end) catch throw:ready -> ready end end),
          [{contains, <<"failed span: ready (throw)">>}, {contains, <<"(bt_ready_proc)">>}],
          fun() ->
                  dtrace:put_tag(<<"slowtag">>),
                  dtrace:span(bt_slow, fun() -> timer:sleep(15) end),
                  dtrace:put_tag(<<"failtag">>),
                  boom = try dtrace:span(bt_fail, fun() -> error(boom) end) catch error:E -> E end,
                  dtrace:put_tag(undefined),
                  [dtrace:span(bt_fast, fun() -> ok end) || _ <- [1, 2, 3]],
                  %% No tag, a registered name (fired before its spans end).
                  Named = dtrace_test_workload:named(
                            bt_named_proc,
                            fun() ->
                                    dtrace:span(bt_untagged, fun() -> timer:sleep(15) end),
                                    try dtrace:span(bt_untagged_fail, fun() -> exit(x) end) catch exit:x -> x end
                            end),
                  {pid_to_list(self()), Named()}
          end,
          fun(_, Ls) -> lists:all(fun(K) -> lists:any(fun(L) -> binary:match(L, K) =/= nomatch end, Ls) end,
                                  [<<"failed span: bt_fail ">>, <<"failed span: bt_untagged_fail ">>])
          end),
    {Pid, NamedPid} = Pids,
    P = list_to_binary(Pid),
    N = list_to_binary(NamedPid),
    Has = fun(Parts) -> [L || L <- Lines, lists:all(fun(X) -> binary:match(L, X) =/= nomatch end, Parts)] end,
    ?assertMatch([_], Has([<<" slow span: bt_slow, ">>, <<" us, tag 'slowtag', pid ", P/binary>>])),
    ?assertMatch([_], Has([<<" failed span: bt_fail (error), ">>, <<" us, tag 'failtag', pid ", P/binary>>])),
    ?assertEqual([], Has([<<"span: bt_fast">>])),
    ?assertMatch([_], Has([<<" slow span: bt_untagged, ">>, <<" us, pid ", N/binary, " (bt_named_proc)">>])),
    ?assertMatch([_], Has([<<" failed span: bt_untagged_fail (exit), ">>,
                           <<" us, pid ", N/binary, " (bt_named_proc)">>])),
    ?assertEqual(1, dtrace_test_tracer:bpftrace_map(<<"@failed_spans[bt_fail, error]">>, Lines)),
    ?assertEqual(undefined, dtrace_test_tracer:bpftrace_map(<<"@failed_spans[bt_slow, ok]">>, Lines, undefined)),
    ?assertEqual(3, dtrace_test_tracer:bpftrace_map(<<"@spans[bt_fast]">>, Lines)),
    ?assertEqual(1, dtrace_test_tracer:bpftrace_map(<<"@slow_spans[bt_slow]">>, Lines)).

%% span__slow: while it is the only span probe listened to, the spans of
%% at least the node's threshold (here 10 ms) fire it with kind, tag and
%% duration, ids 0, and the others fire nothing; listened to with
%% span__end, the slow span fires both, with the same id.
bpftrace_sees_slow_spans(Config) ->
    Peer = ?config(peer, Config),
    Old = peer:call(Peer, dtrace, slow_span_threshold, [10000]),
    try
        Ready = fun() -> dtrace:span(ready, fun() -> timer:sleep(11) end) end,
        Slow = "usdt:$SO:erlang:span__slow /str(arg4) != \"ready\"/ {
            printf(\"S %s %s %ld %ld %s %ld %s\\n\", str(arg0), str(arg1), arg2, arg3, str(arg4), arg5,
                   str(arg6)); }
        usdt:$SO:erlang:span__slow /str(arg4) == \"ready\"/ { printf(\"READY\\n\"); }",
        Lines = fun(Ls, K) -> [binary:split(L, <<" ">>, [global]) || <<C, " ", _/binary>> = L <- Ls, C =:= K] end,
        {{Me, Results}, L1} =
            dtrace_test_tracer:bpftrace_marked(
              dtrace_bpftrace, Peer, Slow, Ready, [<<"READY">>],
              fun() ->
                      dtrace:put_tag(<<"req-9">>),
                      R1 = [dtrace:span(fast, fun() -> I end) || I <- lists:seq(1, 100)],
                      R2 = dtrace:span(slow, fun() -> timer:sleep(20), 42 end),
                      Span = dtrace:span_begin(<<"cross">>),
                      timer:sleep(15),
                      R3 = dtrace:span_end(Span),
                      R4 = dtrace:span_end(dtrace:span_begin(quick)),
                      R5 = try dtrace:span(slow_fail, fun() -> timer:sleep(12), throw(t) end) catch throw:T -> T end,
                      R6 = try dtrace:span(fast_fail, fun() -> exit(x) end) catch exit:X -> {'EXIT', X} end,
                      {pid_to_list(self()), [lists:sum(R1), R2, R3, R4, R5, R6]}
              end),
        ?assertEqual([5050, 42, true, false, t, {'EXIT', x}], Results),
        M = list_to_binary(Me),
        [[<<"S">>, M, <<"req-9">>, <<"0">>, <<"0">>, <<"slow">>, SlowNs, <<"ok">>],
         [<<"S">>, M, <<"req-9">>, <<"0">>, <<"0">>, <<"cross">>, CrossNs, <<"ok">>],
         [<<"S">>, M, <<"req-9">>, <<"0">>, <<"0">>, <<"slow_fail">>, _, <<"throw">>]] = Lines(L1, $S),
        ?assert(binary_to_integer(SlowNs) >= 20000000),
        ?assert(binary_to_integer(CrossNs) >= 15000000),
        %% With span__end: full spans, and span__slow for the slow one.
        Both = Slow ++ "
        usdt:$SO:erlang:span__end /str(arg4) != \"ready\"/ {
            printf(\"E %s %s %ld %ld %s %ld %s\\n\", str(arg0), str(arg1), arg2, arg3, str(arg4), arg5,
                   str(arg6)); }",
        {true, L2} = dtrace_test_tracer:bpftrace_marked(
                       dtrace_bpftrace, Peer, Both, Ready, [<<"READY">>],
                       fun() ->
                               dtrace:put_tag(<<"req-10">>),
                               dtrace:span(fast, fun() -> ok end),
                               S = dtrace:span_begin(slow),
                               timer:sleep(20),
                               dtrace:span_end(S, exit)
                       end),
        [[<<"E">>, P2, <<"req-10">>, _, <<"0">>, <<"fast">>, _, <<"ok">>],
         [<<"E">>, P2, <<"req-10">>, Id, <<"0">>, <<"slow">>, Ns, <<"exit">>]] = Lines(L2, $E),
        ?assertEqual([[<<"S">>, P2, <<"req-10">>, Id, <<"0">>, <<"slow">>, Ns, <<"exit">>]], Lines(L2, $S)),
        ?assertNotEqual(<<"0">>, Id)
    after
        peer:call(Peer, dtrace, slow_span_threshold, [Old])
    end.
