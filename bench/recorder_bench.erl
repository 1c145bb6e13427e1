%%% The flight recorder's cost: an enabled dtrace:p/4 (and pn/5) while the
%%% recorder's snapshot session records it, against the same call into a
%%% normal LTTng session, in one run on one VM.
%%%
%%%   erlc -o /tmp bench/recorder_bench.erl
%%%   erl -noshell +S 2:2 +sbt db -pa _build/default/lib/dtrace/ebin -pa /tmp \
%%%       -eval 'recorder_bench:main(), halt().'
%%%
%%% (root, lttng-tools; a session daemon is started when none runs.)
%%%
%%% Each round sets up each configuration afresh, waits until the node
%%% records (the probe returns true), measures N calls through a fun, and
%%% tears it down; rows are the median of the rounds with the spread
%%% (min..max), in ns per call. The configurations:
%%%   - normal:   `lttng create' (discard mode), one channel of 8 x 8 MiB
%%%               per CPU, org_erlang_dtrace:user_trace_i4s4 and
%%%               user_trace_n enabled, no filter (as `make bench' does);
%%%   - recorder: dtrace_recorder:start/1 with its defaults (snapshot mode,
%%%               4 x 256 KiB per CPU, the user probes and span_slow, the
%%%               vpid context and a $ctx.vpid filter on every rule);
%%%   - recorder + trigger: the same with one trigger armed,
%%%               {pn, 900, "i2 > 20000"} (LTTng evaluates the trigger's
%%%               condition on every user_trace_n event, in the process);
%%%   - recorder without span_vm: the recorder with every event of
%%%               `events => detail' but the span_vm_* events (the spans'
%%%               own processes are then not traced: no erlang:trace/3 per
%%%               span);
%%%   - recorder detail: `events => detail' (org_erlang_dtrace:*);
%%%   - disabled: no session at all.
%%% A third column: dtrace:span/2 of a fun returning ok, which under the
%%% default recorder reads the clock twice and records nothing (below the
%%% slow-span threshold), and under `detail' sets and clears its process's
%%% trace flags (two erlang:trace/3 calls) and records span_begin and
%%% span_end.
-module(recorder_bench).

-export([main/0, main/1]).

-define(ROUNDS, 5).
-define(N, 200000).
-define(SESSION, "dtrace-rec-bench-normal").
%% The recorder's `detail' events (org_erlang_dtrace:*) but span_vm_*.
-define(NO_SPAN_VM, [<<"org_erlang_dtrace:user_trace_*">>, <<"org_erlang_dtrace:span_begin">>,
                     <<"org_erlang_dtrace:span_end">>, <<"org_erlang_dtrace:efile_drv_*">>]).

main() ->
    main([]).

%% Args: [] to print only, [File] to also write the rows (markdown) there.
main(Args) ->
    true = dtrace:available(),
    #{lttng := true} = dtrace:sinks(),
    "0" = string:trim(os:cmd("id -u")),
    _ = os:cmd("pgrep -x lttng-sessiond >/dev/null || lttng-sessiond --daemonize"),
    {ok, _} = application:ensure_all_started(dtrace),
    Dir = filename:join(os:getenv("TMPDIR", "/tmp"), "dtrace_recorder_bench." ++ os:getpid()),
    P4 = fun() -> dtrace:p(1, 2, "ab", "cd") end,
    Pn5 = fun() -> dtrace:pn(5, 1, 2, "ab", "cd") end,
    Span = fun() -> dtrace:span(bench, fun ok/0) end,
    Configs = [{normal, fun() -> normal_start(Dir) end, fun normal_stop/1},
               {recorder, fun() -> recorder_start(Dir, []) end, fun dtrace_recorder:stop/1},
               {recorder_trigger, fun() -> recorder_start(Dir, [{pn, 900, <<"i2 > 20000">>}]) end,
                fun dtrace_recorder:stop/1},
               {recorder_no_span_vm, fun() -> recorder_start(Dir, [], ?NO_SPAN_VM) end, fun dtrace_recorder:stop/1},
               {recorder_detail, fun() -> recorder_start(Dir, [], detail) end, fun dtrace_recorder:stop/1},
               {disabled, fun() -> none end, fun(none) -> ok end}],
    io:format("~ncalls per round: ~b, rounds: ~b (each configuration set up afresh per round)~n", [?N, ?ROUNDS]),
    Rounds = [[begin
                   H = Start(),
                   Expect = Name =/= disabled,
                   ok = wait_enabled(Expect),
                   R = {ns_per_call(P4, ?N), ns_per_call(Pn5, ?N), ns_per_call(Span, ?N div 4)},
                   ok = Stop(H),
                   {Name, R}
               end || {Name, Start, Stop} <- Configs]
              || _ <- lists:seq(1, ?ROUNDS)],
    Rows = [{Name, stats([P || Round <- Rounds, {N, {P, _, _}} <- Round, N =:= Name]),
             stats([Q || Round <- Rounds, {N, {_, Q, _}} <- Round, N =:= Name]),
             stats([S || Round <- Rounds, {N, {_, _, S}} <- Round, N =:= Name])}
            || {Name, _, _} <- Configs],
    Text = table(Rows),
    io:put_chars(Text),
    _ = file:del_dir_r(Dir),
    case Args of
        [File] -> ok = file:write_file(File, Text);
        [] -> ok
    end.

normal_start(Dir) ->
    Out = filename:join(Dir, "normal"),
    _ = lttng(["destroy", ?SESSION]),
    {0, _} = lttng(["create", ?SESSION, "--output=" ++ Out]),
    {0, _} = lttng(["enable-channel", "-u", "-s", ?SESSION, "--subbuf-size=8M", "--num-subbuf=8", "bench"]),
    [{0, _} = lttng(["enable-event", "-u", "-s", ?SESSION, "-c", "bench", E])
     || E <- ["org_erlang_dtrace:user_trace_i4s4", "org_erlang_dtrace:user_trace_n"]],
    {0, _} = lttng(["start", ?SESSION]),
    Out.

normal_stop(Out) ->
    {0, _} = lttng(["destroy", ?SESSION]),
    _ = file:del_dir_r(Out),
    ok.

recorder_start(Dir, Triggers) ->
    {ok, R} = dtrace_recorder:start(#{dir => Dir, triggers => Triggers, name => recorder_bench}),
    R.

recorder_start(Dir, Triggers, Events) ->
    {ok, R} = dtrace_recorder:start(#{dir => Dir, triggers => Triggers, name => recorder_bench, events => Events}),
    R.

ok() -> ok.

%% The session daemon enables a session's events in the process
%% asynchronously.
wait_enabled(Expect) ->
    wait_enabled(Expect, erlang:monotonic_time(millisecond) + 10000).

wait_enabled(Expect, Deadline) ->
    case dtrace:p(0) =:= Expect andalso dtrace:pn(5) =:= Expect of
        true -> ok;
        false ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true -> error({probes_not, Expect});
                false -> timer:sleep(10), wait_enabled(Expect, Deadline)
            end
    end.

loop(_F, 0) -> ok;
loop(F, N) -> _ = F(), loop(F, N - 1).

ns_per_call(F, N) ->
    loop(F, N div 10),
    T0 = erlang:monotonic_time(nanosecond),
    loop(F, N),
    (erlang:monotonic_time(nanosecond) - T0) / N.

stats(Xs) ->
    S = lists:sort(Xs),
    {lists:nth((length(S) + 1) div 2, S), hd(S), lists:last(S)}.

table(Rows) ->
    Label = fun(normal) -> "normal session (discard, 8 x 8 MiB per CPU)";
               (recorder) -> "flight recorder, default events (snapshot, 4 x 256 KiB, vpid filter)";
               (recorder_trigger) -> "flight recorder + trigger {pn, 900, \"i2 > 20000\"}";
               (recorder_no_span_vm) -> "flight recorder, detail without the span_vm_* events";
               (recorder_detail) -> "flight recorder, events => detail";
               (disabled) -> "no session (disabled probes)"
            end,
    {NormalP4, _, _} = element(2, lists:keyfind(normal, 1, Rows)),
    {NormalPn, _, _} = element(3, lists:keyfind(normal, 1, Rows)),
    Stamp = calendar:system_time_to_rfc3339(erlang:system_time(second), [{offset, "Z"}]),
    ["\n| ", Stamp, ", ", erlang:system_info(otp_release), ", ",
     integer_to_list(erlang:system_info(schedulers)), " schedulers | dtrace:p/4 ns | vs normal | dtrace:pn/5 ns "
     "| vs normal | dtrace:span/2 ns |\n",
     "|---|---|---|---|---|---|\n",
     [io_lib:format("| ~s | ~.1f (~.1f..~.1f) | ~.2fx | ~.1f (~.1f..~.1f) | ~.2fx | ~.1f (~.1f..~.1f) |~n",
                    [Label(Name), M1, L1, H1, M1 / NormalP4, M2, L2, H2, M2 / NormalPn, M3, L3, H3])
      || {Name, {M1, L1, H1}, {M2, L2, H2}, {M3, L3, H3}} <- Rows]].

lttng(Args) ->
    Port = open_port({spawn_executable, os:find_executable("lttng")},
                     [{args, Args}, exit_status, stderr_to_stdout, binary]),
    collect(Port, []).

collect(Port, Acc) ->
    receive
        {Port, {data, D}} -> collect(Port, [D | Acc]);
        {Port, {exit_status, S}} -> {S, iolist_to_binary(lists:reverse(Acc))}
    after 60000 -> error(lttng_did_not_answer)
    end.
