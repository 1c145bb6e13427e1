%%% "Why was it slow", as an on-call engineer would ask it: a service
%%% (dtrace_test_service) where every tenth request is slow for a known
%%% reason (a sleep, a GC of a large heap, a slow gen_server call, a slow
%%% file write and sync) runs under priv/dtrace-slow-spans (bpftrace) and
%%% under the flight recorder; each slow request must be named with its
%%% tag and its cause, with the cause's time within 10% of the delay the
%%% service measured itself. Both read the breakdown as printed, the text
%%% a user reads.
-module(dtrace_why_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, suite/0, init_per_testcase/2, end_per_testcase/2]).
-export([slow_spans_script/1, slow_spans_under_automatic_mode/1, recorder_report/1,
         spans_trace_only_their_process/1]).

-define(REQUESTS, 120).
-define(EVERY, 10).
%% Spans of at least this many ms are broken down (the fast requests take
%% well under 1 ms; the slow ones 20 ms and more).
-define(THRESHOLD_MS, 5).

suite() ->
    [{timetrap, {minutes, 5}}].

all() ->
    [slow_spans_script, slow_spans_under_automatic_mode, recorder_report, spans_trace_only_their_process].

init_per_testcase(recorder_report, Config) ->
    case dtrace_recorder_test_lib:require(root_lttng) of
        ok ->
            {Peer, _} = dtrace_recorder_test_lib:start_peer(#{}),
            case dtrace_lttng_lib:require_sink(peer:call(Peer, dtrace, sinks, []), Config) of
                {skip, _} = Skip -> dtrace_recorder_test_lib:stop_peer(Peer), Skip;
                _ -> [{peer, Peer} | Config]
            end;
        Skip ->
            Skip
    end;
init_per_testcase(_TC, Config) ->
    case dtrace_test_tracer:require_tracer(bpftrace) of
        ok ->
            Peer = dtrace_test_peer:start_peer(),
            {ok, _} = peer:call(Peer, application, ensure_all_started, [dtrace]),
            [{peer, Peer} | Config];
        Skip ->
            Skip
    end.

end_per_testcase(_TC, Config) ->
    dtrace_test_peer:stop_peer(?config(peer, Config)).

%%--------------------------------------------------------------------

%% priv/dtrace-slow-spans on the node: every planted slow request is
%% printed with its cause as it ends.
slow_spans_script(Config) ->
    slow_spans(Config, #{requests => ?REQUESTS, every => ?EVERY}).

%% The same while another bpftrace listens to process__scheduled and
%% message__queued: automatic mode then traces every process (on OTP 25
%% and 26 with the tracer {dtrace, []}, which a span's process keeps and
%% adds its flags to; on OTP 27 in its own session), and every breakdown
%% is still whole.
slow_spans_under_automatic_mode(Config) ->
    Peer = ?config(peer, Config),
    Other = dtrace_test_tracer:bpftrace_start(
              dtrace_test_peer:os_pid(Peer),
              "usdt:$SO:erlang:process__scheduled { @in = count(); }
               usdt:$SO:erlang:message__queued { @q = count(); }"),
    ok = dtrace_recorder_test_lib:wait_until(
           fun() -> peer:call(Peer, erlang, apply,
                              [fun() -> ok = dtrace_vm:sync(),
                                        lists:member(running, maps:get(processes, maps:get(flags, dtrace:vm_probes())))
                               end, []])
           end, 30000, "automatic mode to trace every process"),
    try
        slow_spans(Config, #{requests => 60, every => 5, causes => [sleep, call, gc]})
    after
        dtrace_test_tracer:bpftrace_stop(Other)
    end.

slow_spans(Config, Service) ->
    Peer = ?config(peer, Config),
    Dir = ?config(priv_dir, Config),
    Script = filename:join(code:priv_dir(dtrace), "dtrace-slow-spans"),
    Port = open_port({spawn_executable, Script},
                     [{args, ["-p", dtrace_test_peer:os_pid(Peer), "--threshold", integer_to_list(?THRESHOLD_MS)]},
                      {line, 65536}, stderr_to_stdout, exit_status, binary]),
    %% Attached once a ready span's breakdown shows every kind of event
    %% the rules read: its sleep, its GC, its file operation (bpftrace
    %% attaches probe by probe).
    ok = peer:call(Peer, dtrace_test_workload, start_ready_loop, [ready_span(Dir)]),
    Lines0 = collect(Port, [], fun(Ls) -> ready_seen(blocks(Ls)) end, 60000),
    Planted = peer:call(Peer, dtrace_test_workload, stop_ready_loop_and_run,
                        [fun() -> dtrace_test_service:run(Service, Dir) end], 120000),
    Tags = [Tag || {Tag, _, _, _} <- Planted],
    Lines1 = collect(Port, Lines0, fun(Ls) -> Tags -- [T || {T, _, _} <- blocks(Ls)] =:= [] end, 30000),
    Lines = stop(Port, Lines1),
    ct:log("dtrace-slow-spans printed:~n~ts", [lists:join("\n", Lines)]),
    check(Planted, blocks(Lines), Service),
    %% The summary names the slowest.
    ?assert(lists:any(fun(L) -> binary:match(L, <<"slowest, with their causes">>) =/= nomatch end, Lines)).

%% The flight recorder with its default events, a snapshot, its report.
recorder_report(Config) ->
    Peer = ?config(peer, Config),
    Dir = ?config(priv_dir, Config),
    RecDir = filename:join(Dir, "snapshots"),
    {ok, Rec} = peer:call(Peer, dtrace_recorder, start, [#{dir => RecDir, name => why_recorder}]),
    %% The recorder's session records once start/1 returns; the span
    %% probes' state is read in the node: wait until it says so.
    ok = dtrace_recorder_test_lib:wait_until(
           fun() -> peer:call(Peer, erlang, apply, [fun span_probes_on/0, []]) end, 15000,
           "the recorder's session to record the span probes"),
    Planted = peer:call(Peer, dtrace_test_service, run, [#{requests => ?REQUESTS, every => ?EVERY}, Dir], 120000),
    {ok, Snap} = peer:call(Peer, dtrace_recorder, trigger, [Rec, <<"why">>, 60000], 90000),
    Report = peer:call(Peer, dtrace_recorder, report,
                       [[Snap], #{slow => ?THRESHOLD_MS, top => 100, svg => false}], 180000),
    ?assert(is_binary(Report), Report),
    ct:log("report:~n~ts", [Report]),
    Lines = binary:split(Report, <<"\n">>, [global]),
    check(Planted, blocks(section(Lines)), #{requests => ?REQUESTS, every => ?EVERY}),
    %% An operator asking for another snapshot right after: refused within
    %% min_interval_ms (60 s by default), taken with force.
    {error, {rate_limited, _}} = peer:call(Peer, dtrace_recorder, trigger, [Rec, <<"again">>, 60000], 90000),
    {ok, #{reason := <<"now">>}} = peer:call(Peer, dtrace_recorder, trigger,
                                             [Rec, <<"now">>, 60000, #{force => true}], 90000),
    ok = peer:call(Peer, dtrace_recorder, stop, [Rec]).

%% While a span__vm_* probe listens, only a process inside a span carries
%% the flags, and only for its time; outside spans no process has a flag
%% of the library's, and another tracer's process is left alone.
spans_trace_only_their_process(Config) ->
    Peer = ?config(peer, Config),
    %% bpftrace 0.17 attaches the last clause first: span__begin's event
    %% comes once every clause is attached.
    Program = "usdt:$SO:erlang:span__begin { printf(\"BEGIN %s\\n\", str(arg1)); }
               usdt:$SO:erlang:span__vm_scheduled { @s[str(arg0)] = count(); }
               usdt:$SO:erlang:span__vm_gc { @g = count(); }
               usdt:$SO:erlang:span__vm_send { @m = count(); }
               usdt:$SO:erlang:span__vm_receive { @r = count(); }",
    {Port, _} = T0 = dtrace_test_tracer:bpftrace_start(dtrace_test_peer:os_pid(Peer), Program),
    ok = peer:call(Peer, dtrace_test_workload, start_ready_loop,
                   [fun() -> dtrace:put_tag("ready"), dtrace:span(ready, fun() -> timer:sleep(1) end) end]),
    T1 = dtrace_test_tracer:bpftrace_await(T0, [<<"BEGIN ready">>]),
    Result = peer:call(
               Peer, dtrace_test_workload, stop_ready_loop_and_run,
               [fun() ->
                        Self = self(),
                        In = dtrace:span(probe, fun dtrace_test_workload:span_flags/0),
                        Out = dtrace_test_workload:span_flags(),
                        %% A process an operator traces: its span adds nothing
                        %% to its tracer's flags, and its tracer stays.
                        Tracer = spawn(fun dtrace_test_workload:sink/0),
                        Traced = spawn(fun() -> receive go -> ok end,
                                                 dtrace:span(traced, fun() -> ok end),
                                                 Self ! {traced, erlang:trace_info(self(), flags),
                                                         erlang:trace_info(self(), tracer)}
                                       end),
                        1 = erlang:trace(Traced, true, [send, {tracer, Tracer}]),
                        Traced ! go,
                        receive
                            {traced, Fl, Tr} ->
                                {In, Out, Fl, Tr, Tracer, dtrace_test_workload:span_traced(),
                                 dtrace_test_workload:our_traced()}
                        after 10000 -> timeout
                        end
                end]),
    Lines = dtrace_test_tracer:bpftrace_stop(T1),
    _ = Port,
    {InFlags, OutFlags, OpFlags, OpTracer, Tracer, SpanTraced, Ours} = Result,
    ?assertEqual(lists:sort([running, garbage_collection, send, 'receive']), lists:sort(InFlags)),
    ?assertEqual([], OutFlags),
    ?assertEqual({flags, [send]}, OpFlags),
    ?assertEqual({tracer, Tracer}, OpTracer),
    ?assertEqual([], SpanTraced),
    ?assertEqual([], Ours),
    %% Spans' processes were seen scheduled.
    Scheduled = [L || L <- Lines, prefix(<<"@s[">>, L)],
    ?assertNotEqual([], Scheduled, Lines).

%%--------------------------------------------------------------------

%% A span of kind `ready' (tag "ready") that sleeps 2 ms past the
%% threshold, collects its heap and reads a file's information under its
%% tag: its breakdown shows each kind of event once they are all attached.
ready_span(Dir) ->
    fun() ->
            dtrace:put_tag("ready"),
            dtrace:span(ready, fun() ->
                                       {ok, _} = dtrace_file:read_file_info(Dir),
                                       true = erlang:garbage_collect(),
                                       timer:sleep(?THRESHOLD_MS + 2)
                               end)
    end.

ready_seen(Blocks) ->
    lists:any(fun({<<"ready">>, _Cause, Text}) ->
                      has(Text, <<"timer:sleep/1">>) andalso has(Text, <<"FSTAT">>)
                          andalso not has(Text, <<"(0 collections)">>);
                 (_) -> false
              end, Blocks).

span_probes_on() ->
    lists:sort(dtrace_nif:span_vm_flags()) =:= lists:sort([running, garbage_collection, send, 'receive'])
        andalso dtrace_nif:span_enabled() andalso dtrace_nif:efile_enabled().

%% Each planted slow request has its block, with the planted cause, its
%% time within 10% of the delay the service measured.
check(Planted, Blocks, #{requests := N, every := Every}) ->
    ?assertEqual(N div Every, length(Planted)),
    Results =
        [begin
             case lists:keyfind(Tag, 1, Blocks) of
                 false ->
                     {Tag, Cause, not_printed};
                 {Tag, {Text, Ms}, _} ->
                     PlantedMs = PlantedNs / 1.0e6,
                     CauseOk = case Cause of
                                   sleep -> prefix(<<"scheduled out in timer:sleep/1">>, Text);
                                   gc -> Text =:= <<"GC">>;
                                   call -> prefix(<<"scheduled out in gen:">>, Text)
                                               andalso has(Text, iolist_to_binary(["waiting on ", Extra]));
                                   file -> prefix(<<"file I/O">>, Text)
                               end,
                     TimeOk = abs(Ms - PlantedMs) =< 0.1 * PlantedMs,
                     case CauseOk andalso TimeOk of
                         true -> ok;
                         false -> {Tag, Cause, PlantedMs, Text, Ms}
                     end
             end
         end || {Tag, Cause, PlantedNs, Extra} <- Planted],
    ?assertEqual([], [R || R <- Results, R =/= ok]).

%% The breakdowns in Lines: [{Tag, {CauseText, CauseMs}, BlockText}], from
%% a "... slow span: KIND D ms, tag "TAG", pid P ..." line and the
%% "cause: TEXT, N ms (P%)" line after it.
blocks(Lines) ->
    blocks(Lines, []).

blocks([], Acc) ->
    lists:reverse(Acc);
blocks([L | Rest], Acc) ->
    case re:run(L, <<"slow span: .* tag \"([^\"]*)\"">>, [{capture, all_but_first, binary}]) of
        {match, [Tag]} ->
            {Body, Rest1} = lists:splitwith(fun(X) -> binary:match(X, <<"slow span: ">>) =:= nomatch
                                                          andalso string:trim(X) =/= <<>> end, Rest),
            Cause = case [C || B <- Body, {match, C} <- [re:run(B, <<"cause: (.*), ([0-9.]+) ms \\([0-9]+%\\)">>,
                                                                 [{capture, all_but_first, binary}])]] of
                        [[Text, Ms] | _] -> {Text, binary_to_float(Ms)};
                        [] -> {<<>>, -1.0}
                    end,
            blocks(Rest1, [{Tag, Cause, iolist_to_binary(lists:join("\n", [L | Body]))} | Acc]);
        nomatch ->
            blocks(Rest, Acc)
    end.

%% The report's "Why the slow spans were slow" section.
section(Lines) ->
    After = lists:dropwhile(fun(L) -> not prefix(<<"Why the slow spans">>, L) end, Lines),
    lists:takewhile(fun(L) -> not prefix(<<"Slowest operations">>, L) end, After).

prefix(P, B) ->
    binary:longest_common_prefix([P, B]) =:= byte_size(P).

has(B, Part) ->
    binary:match(B, Part) =/= nomatch.

%% Port's lines (Acc, oldest first) until Done(Lines) or Ms pass.
collect(Port, Acc, Done, Ms) ->
    collect_until(Port, Acc, Done, erlang:monotonic_time(millisecond) + Ms).

collect_until(Port, Acc, Done, Deadline) ->
    case Done(Acc) of
        true ->
            Acc;
        false ->
            receive
                {Port, {data, {eol, Line}}} -> collect_until(Port, Acc ++ [Line], Done, Deadline);
                {Port, {data, {noeol, Part}}} -> collect_until(Port, Acc ++ [Part], Done, Deadline);
                {Port, {exit_status, S}} -> ct:fail("dtrace-slow-spans exited (~p): ~p", [S, Acc])
            after max(0, Deadline - erlang:monotonic_time(millisecond)) ->
                    ct:fail("dtrace-slow-spans: timed out; printed so far: ~p", [Acc])
            end
    end.

%% SIGINT: the wrapper stops bpftrace, prints what is left and its summary.
stop(Port, Acc) ->
    {os_pid, Pid} = erlang:port_info(Port, os_pid),
    _ = os:cmd("kill -INT " ++ integer_to_list(Pid)),
    stop_collect(Port, Acc, erlang:monotonic_time(millisecond) + 30000).

stop_collect(Port, Acc, Deadline) ->
    receive
        {Port, {data, {eol, Line}}} -> stop_collect(Port, Acc ++ [Line], Deadline);
        {Port, {data, {noeol, Part}}} -> stop_collect(Port, Acc ++ [Part], Deadline);
        {Port, {exit_status, 0}} -> Acc;
        {Port, {exit_status, S}} -> ct:fail("dtrace-slow-spans exited with ~p: ~p", [S, Acc])
    after max(0, Deadline - erlang:monotonic_time(millisecond)) ->
            ct:fail("dtrace-slow-spans still running 30 s after SIGINT: ~p", [Acc])
    end.
