%%% `make bench': what the flight recorder costs a busy node when it is
%%% always on (issue #29).
%%%
%%% The workload is the demo's key-value store (examples/dtrace_demo.erl)
%%% without its client think time, which would hide any cost, and without
%%% its hidden merge: ?WORKERS clients, each a loop of requests, 80% gets
%%% and 20% puts, every request a span (dtrace:span_begin/1, span_end/1)
%%% under a user tag naming it; a get reads an ETS table, a put writes it
%%% and appends a record to a log file through a log-writer process
%%% (dtrace_file, raw file), waiting for its reply with the tag spread.
%%% Both schedulers are kept busy.
%%%
%%% Runs of ?SECONDS each alternate without and with the recorder
%%% (dtrace_recorder:start/1 with its defaults: every org_erlang_dtrace
%%% event, span_vm_* included, snapshot mode, 4 x 256 KiB per CPU), set up
%%% afresh for each run, ?ROUNDS of each. Reported: requests per second
%%% and the 99th-percentile request latency (every request's own
%%% monotonic-clock duration), the medians of the rounds and their ratios
%%% (on / off); and, from a snapshot taken at the end of each recorded run
%%% (babeltrace2), its events, the time they cover (first to last event) and
%%% its size against the ring's: how many seconds of history the ring holds
%%% at this load. The budget: throughput and p99 within 1.02x.
%%%
%%%   erl -noshell +S 2:2 +sbt db -pa _build/default/lib/dtrace/ebin -pa BENCH_EBIN \
%%%       -eval 'always_on_bench:main([]).'   (halts: 0, or 1 if a budget is missed)
-module(always_on_bench).

-export([main/1, run/0, markdown/1, budgets/1]).

-define(WORKERS, 4).
-define(SECONDS, 4).
-define(ROUNDS, 5).
-define(KEYS, 5000).
-define(BUDGET, 1.02).

main(_) ->
    R = run(),
    io:format("~s~n", [markdown(R)]),
    Budgets = budgets(R),
    [io:format("  ~-90s ~s~n", [T, case OK of true -> "ok"; false -> "MISSED"; _ -> OK end])
     || {T, OK} <- Budgets],
    halt(case lists:all(fun({_, OK}) -> OK =/= false end, Budgets) of true -> 0; false -> 1 end).

%% @doc #{off := [Run], on := [Run], snapshots := [Snap]} or {skip, Why};
%% Run = #{ops_per_s, p99_us, p50_us}.
run() ->
    case {os:find_executable("lttng"), string:trim(os:cmd("id -u")), dtrace:sinks()} of
        {false, _, _} -> {skip, "lttng (lttng-tools) is not installed"};
        {_, "0", #{lttng := true}} -> measure();
        {_, "0", #{lttng := L}} -> {skip, lists:flatten(io_lib:format("the LTTng sink is not loaded: ~p", [L]))};
        _ -> {skip, "the recorder's root session daemon needs root"}
    end.

measure() ->
    _ = os:cmd("pgrep -x lttng-sessiond >/dev/null || lttng-sessiond --daemonize"),
    {ok, _} = application:ensure_all_started(dtrace),
    Dir = filename:join(os:getenv("TMPDIR", "/tmp"), "dtrace_always_on." ++ os:getpid()),
    ok = filelib:ensure_path(Dir),
    io:format("~nThe flight recorder always on: key-value workload, ~b clients, ~b s a run, ~b rounds:~n",
              [?WORKERS, ?SECONDS, ?ROUNDS]),
    _ = workload(Dir, 1),
    Rounds = [begin
                  Off = workload(Dir, ?SECONDS),
                  {ok, Rec} = dtrace_recorder:start(#{dir => filename:join(Dir, "rec"), name => always_on_bench}),
                  ok = wait(fun() -> dtrace_nif:span_enabled() end, 10000),
                  On = workload(Dir, ?SECONDS),
                  Snap = snapshot(Rec),
                  ok = dtrace_recorder:stop(Rec),
                  ok = wait(fun() -> not dtrace_nif:span_enabled() end, 10000),
                  io:format("  round ~b: off ~.0f req/s p99 ~.1f us; on ~.0f req/s p99 ~.1f us; snapshot ~p~n",
                            [I, maps:get(ops_per_s, Off), maps:get(p99_us, Off),
                             maps:get(ops_per_s, On), maps:get(p99_us, On), Snap]),
                  {Off, On, Snap}
              end || I <- lists:seq(1, ?ROUNDS)],
    _ = file:del_dir_r(Dir),
    #{off => [O || {O, _, _} <- Rounds], on => [N || {_, N, _} <- Rounds], snapshots => [S || {_, _, S} <- Rounds]}.

%% A snapshot of the recorder's ring now: #{events, covered_ms, bytes}, or
%% #{error => Why}.
snapshot(Rec) ->
    case dtrace_recorder:trigger(Rec, <<"always_on_bench">>, 60000, #{force => true}) of
        {ok, #{path := Path, bytes := Bytes}} ->
            Out = os:cmd("babeltrace2 --clock-seconds '" ++ binary_to_list(Path) ++ "' 2>/dev/null | "
                         "awk 'NR == 1 { f = $1 } { l = $1 } END { print NR, f, l }'"),
            _ = file:del_dir_r(Path),
            case string:lexemes(Out, " []\n") of
                [N, F, L] -> #{events => list_to_integer(N), bytes => Bytes,
                               covered_ms => (to_float(L) - to_float(F)) * 1000};
                _ -> #{error => Out}
            end;
        Other ->
            #{error => Other}
    end.

to_float(S) ->
    try list_to_float(S) catch error:badarg -> float(list_to_integer(S)) end.

wait(F, Ms) ->
    Deadline = erlang:monotonic_time(millisecond) + Ms,
    wait_until(F, Deadline).

wait_until(F, Deadline) ->
    case F() of
        true -> ok;
        false ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true -> error(not_ready);
                false -> timer:sleep(10), wait_until(F, Deadline)
            end
    end.

%%% The workload

%% Seconds of requests by ?WORKERS clients: #{ops_per_s, p50_us, p99_us}.
workload(Dir, Seconds) ->
    Table = ets:new(kv, [public, set, {read_concurrency, true}]),
    Log = spawn_link(fun() -> log_writer(Dir) end),
    Self = self(),
    T0 = erlang:monotonic_time(),
    Deadline = erlang:monotonic_time(millisecond) + Seconds * 1000,
    Workers = [spawn_link(fun() -> Self ! {self(), client(Table, Log, Deadline, 0, [])} end)
               || _ <- lists:seq(1, ?WORKERS)],
    Results = [receive {W, R} -> R end || W <- Workers],
    Elapsed = erlang:convert_time_unit(erlang:monotonic_time() - T0, native, nanosecond) / 1.0e9,
    Log ! stop,
    ets:delete(Table),
    Ops = lists:sum([N || {N, _} <- Results]),
    Sorted = lists:sort(lists:append([Ls || {_, Ls} <- Results])),
    #{ops_per_s => Ops / Elapsed, p50_us => percentile(Sorted, 0.50), p99_us => percentile(Sorted, 0.99)}.

percentile(Sorted, P) ->
    lists:nth(max(1, round(P * length(Sorted))), Sorted) / 1000.

%% {Requests, Latencies (ns)}.
client(Table, Log, Deadline, N, Acc) ->
    case N rem 64 =:= 0 andalso erlang:monotonic_time(millisecond) >= Deadline of
        true -> {N, Acc};
        false ->
            Key = rand:uniform(?KEYS),
            Kind = case rand:uniform(10) of 1 -> put; 2 -> put; _ -> get end,
            T0 = erlang:monotonic_time(),
            dtrace:put_tag([atom_to_list(Kind), " user:", integer_to_list(Key)]),
            Span = dtrace:span_begin(Kind),
            operation(Kind, Table, Log, Key),
            _ = dtrace:span_end(Span),
            dtrace:put_tag(undefined),
            Ns = erlang:convert_time_unit(erlang:monotonic_time() - T0, native, nanosecond),
            client(Table, Log, Deadline, N + 1, [Ns | Acc])
    end.

operation(get, Table, _Log, Key) ->
    ets:lookup(Table, Key);
operation(put, Table, Log, Key) ->
    Value = term_to_binary({Key, erlang:unique_integer()}),
    ets:insert(Table, {Key, Value}),
    State = dtrace:spread_tag(true),
    Ref = make_ref(),
    Log ! {append, self(), Ref, [<<Key:32>>, Value]},
    receive {Ref, ok} -> ok end,
    dtrace:restore_tag(State).

log_writer(Dir) ->
    File = filename:join(Dir, "log." ++ integer_to_list(erlang:unique_integer([positive]))),
    {ok, Fd} = dtrace_file:open(File, [append, raw, binary]),
    log_loop(Fd, File).

log_loop(Fd, File) ->
    receive
        {append, From, Ref, Record} ->
            ok = dtrace_file:write(Fd, Record),
            From ! {Ref, ok},
            log_loop(Fd, File);
        stop ->
            ok = dtrace_file:close(Fd),
            ok = dtrace_file:delete(File)
    end.

%%% Report

median(Xs) ->
    S = lists:sort(Xs),
    lists:nth((length(S) + 1) div 2, S).

%% @doc The section of BENCHMARKS.md.
markdown({skip, Why}) ->
    ["Skipped: ", Why, ".\n"];
markdown(#{off := Off, on := On, snapshots := Snaps}) ->
    M = fun(Runs, K) -> median([maps:get(K, R) || R <- Runs]) end,
    Good = [S || #{events := _} = S <- Snaps],
    Rate = [E / (C / 1000) || #{events := E, covered_ms := C} <- Good, C > 0],
    [io_lib:format("| run | requests/s | p50 us | p99 us |~n|---|---|---|---|~n"
                   "| recorder off | ~.0f | ~.1f | ~.1f |~n"
                   "| recorder on (defaults) | ~.0f | ~.1f | ~.1f |~n"
                   "| on / off | ~.3fx | ~.3fx | ~.3fx |~n~n",
                   [M(Off, ops_per_s), M(Off, p50_us), M(Off, p99_us),
                    M(On, ops_per_s), M(On, p50_us), M(On, p99_us),
                    M(On, ops_per_s) / M(Off, ops_per_s), M(On, p50_us) / M(Off, p50_us),
                    M(On, p99_us) / M(Off, p99_us)]),
     case Good of
         [] -> io_lib:format("No snapshot could be read: ~p.~n", [Snaps]);
         _ -> io_lib:format("The recorder's ring at this load (a snapshot at the end of each recorded run, "
                            "medians): ~b events covering ~.0f ms (~.0f events/s), ~.1f KiB of the ring's "
                            "~b KiB (4 x 256 KiB per CPU, ~b CPUs).~n",
                            [median([E || #{events := E} <- Good]), median([C || #{covered_ms := C} <- Good]),
                             median(Rate), median([B || #{bytes := B} <- Good]) / 1024,
                             1024 * cpus(), cpus()])
     end].

cpus() ->
    case erlang:system_info(logical_processors) of
        N when is_integer(N) -> N;
        _ -> 1
    end.

%% @doc The budgets: requests per second and p99 within ?BUDGET.
budgets({skip, Why}) ->
    [{"flight recorder always on: skipped: " ++ Why, skipped}];
budgets(#{off := Off, on := On}) ->
    M = fun(Runs, K) -> median([maps:get(K, R) || R <- Runs]) end,
    Tput = M(Off, ops_per_s) / M(On, ops_per_s),
    P99 = M(On, p99_us) / M(Off, p99_us),
    [{io_lib:format("flight recorder always on (defaults), KV workload: throughput off/on <= ~.2fx: ~.3fx",
                    [?BUDGET, Tput]), Tput =< ?BUDGET},
     {io_lib:format("flight recorder always on (defaults), KV workload: p99 on/off <= ~.2fx: ~.3fx",
                    [?BUDGET, P99]), P99 =< ?BUDGET}].
