%%% The scripts this library ships for the VM's probes, on a real node
%%% with a real tracer (bpftrace), in automatic mode as dtrace_vm_SUITE's
%%% cases: each bpftrace port of OTP's example scripts in priv/ run against
%%% a workload that makes it print; and OTP's own D scripts checked against
%%% the probe catalogue.
-module(dtrace_vm_scripts_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_testcase/2, end_per_testcase/2]).
-export([shipped_scripts/1, otp_d_scripts_match_the_catalogue/1]).

all() ->
    [shipped_scripts, otp_d_scripts_match_the_catalogue].

init_per_testcase(otp_d_scripts_match_the_catalogue, Config) ->
    dtrace_test_tracer:with_tracer(readelf, Config);
init_per_testcase(_TC, Config) ->
    dtrace_test_peer:with_dtrace_peer(Config).

end_per_testcase(_TC, Config) ->
    dtrace_test_peer:stop_config_peer(Config).

%%--------------------------------------------------------------------
%% Shipped scripts

%% Each bpftrace port of OTP's example scripts, and the send-to-scheduled
%% latency script, run against a workload that makes them print.
shipped_scripts(Config) ->
    Scripts = filename:join(code:priv_dir(dtrace), "bpftrace"),
    Peer = ?config(peer, Config),
    %% Runs Script in a window; Expect(WorkloadResult) lists the lines (a
    %% binary, or {contains, Part}) the workload must make it print: the
    %% window stays open until they came, and each must be there.
    Run = fun(ScriptArgs, Ready, Seen, Work, Expect) ->
                  {Script, Args} = case ScriptArgs of
                                       {S, A} -> {S, A};
                                       S -> {S, []}
                                   end,
                  %% filename:join/2 keeps an absolute Script as it is.
                  {R, Lines} = dtrace_test_tracer:bpftrace_window(
                                 bpftrace, Peer, {file, filename:join(Scripts, Script), Args}, Ready, Seen, Work,
                                 fun(R, Ls) -> missing(Expect(R), Ls) =:= [] end),
                  ?assertEqual({Script, []}, {Script, missing(Expect(R), Lines)}),
                  {R, Lines}
          end,
    %% A process named to tracers at once (dtrace_test_workload:named/2):
    %% its name in a script's line means the script's dtrace_process__name
    %% clause is attached (bpftrace attaches clauses one by one).
    Named = fun dtrace_test_workload:named/2,
    %% spawn-exit.bt: an exit names its process.
    Run("spawn-exit.bt", Named(bt_ready_exit, fun() -> ok end),
        [{contains, <<"mfa">>}, {contains, <<"(bt_ready_exit) reason normal">>}],
        Named(bt_shipped_exit, fun() -> exit(shipped) end),
        fun(P) -> [iolist_to_binary(["pid ", P, " mfa erlang:apply/2"]),
                   iolist_to_binary(["pid ", P, " (bt_shipped_exit) reason shipped"])]
        end),
    %% process-scheduling.bt, every event (its default is a summary at exit)
    Run({"process-scheduling.bt", ["all", "every"]},
        fun() -> P = spawn(fun() -> erlang:hibernate(erlang, exit, [normal]) end),
                 dtrace_test_workload:wait_hibernating(P), P ! wake end,
        [{contains, <<"  Schedule pid">>}, {contains, <<"Unschedule pid">>},
         {contains, <<"Hibernate pid">>}],
        fun() ->
                P = spawn(fun() -> erlang:hibernate(erlang, exit, [normal]) end),
                dtrace_test_workload:wait_hibernating(P),
                P ! wake,
                pid_to_list(P)
        end,
        %% Each line starts with the time of day (HH:MM:SS.uuuuuu).
        fun(P) -> [{contains, iolist_to_binary(["  Hibernate pid ", P, " resume mfa erlang:hibernate/3"])},
                   {contains, iolist_to_binary([" Unschedule pid ", P])},
                   {contains, iolist_to_binary(["   Schedule pid ", P, " mfa erlang:apply/2"])}]
        end),
    %% messages.bt: a send names its sender, a queueing its receiver.
    Run("messages.bt",
        Named(bt_ready_msg, fun() -> self() ! ready, receive ready -> ok end end),
        [{contains, <<"send:">>}, {contains, <<"queued:">>}, {contains, <<"(bt_ready_msg)">>}],
        fun() ->
                S = spawn(fun dtrace_test_workload:sink/0),
                true = register(bt_sink, S),
                From = (Named(bt_sender, fun() -> S ! {a, b, c} end))(),
                S ! stop,
                {From, pid_to_list(S)}
        end,
        fun({From, To}) -> [iolist_to_binary(["send:   ", From, " (bt_sender) -> ", To, ": 4 words"]),
                            iolist_to_binary(["queued: ", To, " (bt_sink): 4 words"])]
        end),
    %% garbage-collection.bt, threshold 1 us (every collection of a us or
    %% more): a line per collection as it ends; its per-process tables are
    %% maps, printed as bpftrace exits.
    %% Live data, so that each collection takes well over a microsecond.
    Collect = fun() -> L = lists:seq(1, 100000), true = erlang:garbage_collect(), length(L) end,
    {P4, L4} = Run({"garbage-collection.bt", ["1"]}, Collect,
                   [{contains, <<" GC major pid ">>}],
                   fun() ->
                           Self = self(),
                           P = spawn(fun() -> _ = Collect(), Self ! {collected, self()},
                                              receive stop -> ok end end),
                           receive {collected, P} -> pid_to_list(P) end
                   end,
                   fun(P) -> [{contains, iolist_to_binary([" GC major pid ", P, " ("])}] end),
    ?assert(lists:any(fun(L) -> re:run(L, [" GC major pid ", P4, " \\([^)]*\\): need -?[0-9]+, reclaimed -?[0-9]+ words, [0-9]+ us$"]) =/= nomatch end, L4)),
    ?assert(lists:member(<<"Time in garbage collection (us), per process:">>, L4)),
    ?assert(lists:member(<<"The slowest collection (us) of the 10 processes with the slowest:">>, L4)),
    %% function-calls.bt
    ok = peer:call(Peer, dtrace, function_probes, [[{dtrace_test_workload, double, 1}, {erlang, phash2, 1}]]),
    Run({"function-calls.bt", ["all", "every"]},
        fun() -> dtrace_test_workload:double(1), erlang:phash2(x) end,
        [{contains, <<"enter (global)">>}, {contains, <<" return ">>},
         {contains, <<"BIF entry">>}, {contains, <<"BIF return">>}],
        fun() ->
                6 = dtrace_test_workload:double(3),
                _ = erlang:phash2(y),
                pid_to_list(self())
        end,
        %% Each line starts with the time of day; a return says how long
        %% the call took.
        fun(P) -> [{contains, iolist_to_binary([" pid ", P, " enter (global)  dtrace_test_workload:double/1 depth -1"])},
                   {contains, iolist_to_binary([" pid ", P, " return dtrace_test_workload:double/1 depth -1 ("])},
                   {contains, iolist_to_binary([" pid ", P, " BIF entry  mfa erlang:phash2/1"])},
                   {contains, iolist_to_binary([" pid ", P, " BIF return mfa erlang:phash2/1"])}]
        end),
    ok = peer:call(Peer, dtrace, function_probes, [[]]),
    %% port1.bt
    Run("port1.bt",
        fun() ->
                P = open_port({spawn, "cat >/dev/null"}, [exit_status]),
                port_command(P, "x"),
                try port_close(P) catch error:badarg -> true end
        end,
        [{contains, <<"port open">>}, {contains, <<"port command">>},
         {contains, <<"port exit">>}],
        fun() ->
                P = open_port({spawn, "cat >/dev/null"}, [binary, exit_status]),
                true = port_command(P, <<"hi">>),
                dtrace_test_workload:close_port(P),
                {pid_to_list(self()), erlang:port_to_list(P)}
        end,
        fun({Owner, Port}) ->
                [iolist_to_binary(["port open pid ", Owner, " port name cat >/dev/null port ", Port]),
                 iolist_to_binary(["port command pid ", Owner, " port ", Port,
                                   " port name cat >/dev/null command type command"]),
                 {contains, iolist_to_binary(["port exit pid ", Owner, " port ", Port,
                                              " port name cat >/dev/null reason "])}]
        end),
    %% message-latency.bt: its histograms are maps, updated in the kernel
    %% at each event and printed as bpftrace exits, and its one line before
    %% then comes from BEGIN, which bpftrace runs before it attaches the
    %% probes. So the script runs between clauses that print once their
    %% probe fired, added before and after it: bpftrace 0.17 attaches the
    %% clauses last to first (bpftrace -v shows it), later versions in
    %% either order, so once all four printed, the script's are attached.
    {ok, Latency} = file:read_file(filename:join(Scripts, "message-latency.bt")),
    <<"#!", _/binary>> = Latency,
    [_Shebang, Body] = binary:split(Latency, <<"\n">>),
    ReadyClauses = fun(Where) ->
                           ["usdt::erlang:message__send /!@", Where, "_send/ { @", Where, "_send = 1; ",
                            "printf(\"READY ", Where, " send\\n\"); }\n",
                            "usdt::erlang:process__scheduled /!@", Where, "_in/ { @", Where, "_in = 1; ",
                            "printf(\"READY ", Where, " scheduled\\n\"); }\n"]
                   end,
    LatencyReady = filename:join(?config(priv_dir, Config), "message-latency-ready.bt"),
    ok = file:write_file(LatencyReady, [ReadyClauses("before"), Body, $\n, ReadyClauses("after")]),
    {ok, L7} = Run(LatencyReady,
                   fun() ->
                           Self = self(),
                           E = spawn(fun() -> receive ping -> Self ! pong end end),
                           E ! ping,
                           receive pong -> ok end
                   end,
                   [<<"READY before send">>, <<"READY before scheduled">>,
                    <<"READY after send">>, <<"READY after scheduled">>],
                   fun() ->
                           Self = self(),
                           E = spawn(fun Echo() -> receive {Self, I} -> Self ! {echo, I}, Echo() end end),
                           [begin E ! {Self, I}, receive {echo, I} -> ok end end || I <- lists:seq(1, 50)],
                           ok
                   end,
                   fun(ok) -> [] end),
    ?assert(lists:member(<<"@wait_us: ">>, L7) orelse lists:any(fun(L) -> binary:match(L, <<"@wait_us:">>) =/= nomatch end, L7)),
    ?assert(lists:any(fun(L) -> binary:match(L, <<"@max_wait_us[<">>) =/= nomatch end, L7)).

%% The entries of Wanted (a binary: a line equal to it; {contains, Part}:
%% a line containing Part) that no line of Lines matches.
missing(Wanted, Lines) ->
    [W || W <- Wanted,
          not lists:any(fun(L) -> case W of
                                      {contains, Part} -> binary:match(L, Part) =/= nomatch;
                                      Line -> L =:= Line
                                  end
                        end, Lines)].

%% OTP's D scripts for the VM probes (runtime_tools' examples) name probes
%% and argument indexes this library has: every probe of OTP's (the ones a
%% stock VM cannot feed are declared too, and never fire), with the two
%% exceptions listed here, so that a change to the catalogue shows up.
otp_d_scripts_match_the_catalogue(Config) ->
    %% The release's own examples; Debian sid's OTP 29 ships none: its
    %% source's then.
    Installed = filename:join(code:lib_dir(runtime_tools), "examples"),
    Dir = case filelib:is_dir(Installed) of
              true -> Installed;
              false -> filename:join(dtrace_test_otp_examples:source(
                                       ?config(priv_dir, Config), list_to_integer(erlang:system_info(otp_release)),
                                       ["*/lib/runtime_tools/examples/*.d"]),
                                     "lib/runtime_tools/examples")
          end,
    Scripts = ["spawn-exit.d", "messages.d", "process-scheduling.d", "garbage-collection.d",
               "function-calls.d", "port1.d", "memory1.d", "dist.d", "driver1.d"],
    Catalogue = maps:from_list([{N, length(Args)} || {N, Args} <- dtrace_test_catalogue:catalogue()]),
    Uses = lists:append([d_uses(filename:join(Dir, S)) || S <- Scripts]),
    Missing = lists:usort([P || {P, _} <- Uses, not maps:is_key(P, Catalogue)]),
    %% Every VM probe OTP declares is in the catalogue; port1.d also reads
    %% the aio_pool probes, which OTP 27's erlang_dtrace.d no longer has.
    ?assertEqual([<<"aio_pool__add">>, <<"aio_pool__get">>], Missing),
    %% driver1.d prints arg1 of driver-finish, which has one argument (an
    %% OTP bug): that read is past the probe's arguments in OTP's build too.
    Bad = [{P, Max, maps:get(P, Catalogue)} || {P, Max} <- Uses, maps:is_key(P, Catalogue),
                                               Max >= maps:get(P, Catalogue)],
    ?assertEqual([{<<"driver__finish">>, 1, 1}], lists:usort(Bad)),
    ?assert(length(Uses) >= 40).

%% [{ProbeNoteName, HighestArgIndexRead}] for the clauses of a D script.
d_uses(File) ->
    {ok, D} = file:read_file(File),
    Clauses = re:split(D, "^}", [multiline]),
    lists:append(
      [[{note_name(P), lists:max([-1 | [binary_to_integer(N) || [N] <- match_all(C, "\\barg([0-9]+)\\b")]])}
        || [P] <- match_all(C, "erlang\\*:::([a-z_-]+)")]
       || C <- Clauses]).

%% D's dashes are the note's double underscores.
note_name(P) ->
    binary:replace(P, <<"-">>, <<"__">>, [global]).

match_all(Subject, Re) ->
    case re:run(Subject, Re, [global, {capture, all_but_first, binary}]) of
        {match, M} -> M;
        nomatch -> []
    end.
