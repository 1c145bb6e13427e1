%%% The demo workload: a tiny key-value store with the seeds' problem, a
%%% 99th-percentile latency spike nobody can reproduce, instrumented with
%%% begin/end probes that cost nothing until a tracer attaches.
%%%
%%% Every operation runs as a span, dtrace:span(get | put, Fun), which
%%% fires span__begin before and span__end (with its duration) after, with
%%% the user tag naming the request ("put user:1234").
%%% priv/bpftrace/span-latency.bt turns these into a latency histogram per
%%% operation and prints the slow requests by tag, and the failed ones
%%% apart: a get of a key nobody wrote (clients ask for keys 1..5000, puts
%%% write 1..4990) raises not_found, and its span ends with outcome
%%% "error" (dtrace:span_end/2).
%%%
%%% Puts are also appended to a log on disk by a separate process, the
%%% store's log writer, through dtrace_file. The worker spreads its tag
%%% while it waits for the writer, so the writer's file I/O carries the
%%% put's tag: priv/bpftrace/efile.bt names the request each file operation was for.
%%%
%%% The hidden problem: every ~400th append, the writer "merges" the log:
%%% it rewrites an 8 MB file and syncs it (real I/O, tens of ms here), and
%%% the put waiting on it is slow; so are the puts whose appends queue up
%%% at the writer meanwhile, which priv/bpftrace/message-latency.bt (a VM probe,
%%% with the dtrace application's automatic mode) shows.
-module(dtrace_demo).

-export([run/1]).

-define(WORKERS, 4).

%% Runs the workload for Seconds, then prints how many probe calls returned
%% true (a tracer listened) and false.
run(Seconds) ->
    %% The VM probes' automatic mode: trace flags only while a tracer
    %% listens to a VM probe.
    {ok, _} = application:ensure_all_started(dtrace),
    Table = ets:new(kv, [public, set, {read_concurrency, true}]),
    true = ets:insert(Table, [{K, term_to_binary({K, 0})} || K <- lists:seq(1, 4990)]),
    Dir = filename:join(os:getenv("TMPDIR", "/tmp"), "dtrace_demo." ++ os:getpid()),
    ok = filelib:ensure_path(Dir),
    Log = spawn_link(fun() -> log_writer(Dir) end),
    register(dtrace_demo_log, Log),
    io:format("log writer: ~p~n", [Log]),
    Self = self(),
    Deadline = erlang:monotonic_time(millisecond) + Seconds * 1000,
    Workers = [spawn_link(fun() -> Self ! {self(), worker(Table, Deadline, #{})} end)
               || _ <- lists:seq(1, ?WORKERS)],
    Counts = lists:foldl(fun(W, Acc) ->
                                 receive {W, C} -> merge(C, Acc) end
                         end, #{}, Workers),
    Log ! stop,
    io:format("workload: ~b operations (~b failed: not_found); span__end fired ~b times, "
              "not ~b times~n",
              [maps:get(ops, Counts, 0), maps:get(failed, Counts, 0), maps:get(true, Counts, 0),
               maps:get(false, Counts, 0)]).

worker(Table, Deadline, Counts) ->
    case erlang:monotonic_time(millisecond) >= Deadline of
        true -> Counts;
        false ->
            Kind = case rand:uniform(10) of 1 -> put; 2 -> put; _ -> get end,
            Key = case Kind of put -> rand:uniform(4990); get -> rand:uniform(5000) end,
            Counts1 = span(Kind, Key, fun() -> operation(Kind, Table, Key) end, Counts),
            %% A client's think time, so the demo does not burn both cores.
            timer:sleep(1),
            worker(Table, Deadline, Counts1)
    end.

%% One request: a span of Kind under a tag naming it, ended as failed
%% (outcome error) when the operation raised. Counts how often a tracer
%% listened (the span's end probe fired).
span(Kind, Key, Fun, Counts) ->
    dtrace:put_tag([atom_to_list(Kind), " user:", integer_to_list(Key)]),
    Span = dtrace:span_begin(Kind),
    {Fired, Counts1} = try Fun() of
                           _ -> {dtrace:span_end(Span), Counts}
                       catch
                           error:{not_found, _} -> {dtrace:span_end(Span, error), count(failed, Counts)}
                       end,
    dtrace:put_tag(undefined),
    count(Fired, Counts1#{ops => maps:get(ops, Counts1, 0) + 1}).

operation(get, Table, Key) ->
    case ets:lookup(Table, Key) of
        [{Key, Value}] -> Value;
        [] -> error({not_found, Key})
    end;
operation(put, Table, Key) ->
    Value = term_to_binary({Key, erlang:unique_integer()}),
    ets:insert(Table, {Key, Value}),
    %% The log writer's I/O is done for this put: let the tag go with the
    %% request, and take it back after.
    State = dtrace:spread_tag(true),
    Ref = make_ref(),
    dtrace_demo_log ! {append, self(), Ref, [<<Key:32>>, Value]},
    receive {Ref, ok} -> ok end,
    dtrace:restore_tag(State).

%% The store's log: appends each record; every ~400th append also rewrites
%% and syncs an 8 MB merged file (the merge nobody sees).
log_writer(Dir) ->
    {ok, Fd} = dtrace_file:open(filename:join(Dir, "log"), [append, raw, binary]),
    log_loop(Dir, Fd, crypto:strong_rand_bytes(8 bsl 20)).

log_loop(Dir, Fd, Merged) ->
    receive
        {append, From, Ref, Record} ->
            ok = dtrace_file:write(Fd, Record),
            case rand:uniform(400) of
                1 -> merge_log(Dir, Merged);
                _ -> ok
            end,
            From ! {Ref, ok},
            log_loop(Dir, Fd, Merged);
        stop ->
            ok = dtrace_file:close(Fd),
            _ = [dtrace_file:delete(filename:join(Dir, F)) || F <- ["log", "merged"]],
            dtrace_file:del_dir(Dir)
    end.

merge_log(Dir, Merged) ->
    {ok, Fd} = dtrace_file:open(filename:join(Dir, "merged"), [write, raw, binary]),
    ok = dtrace_file:write(Fd, Merged),
    ok = dtrace_file:datasync(Fd),
    ok = dtrace_file:close(Fd).

count(Result, Counts) ->
    Counts#{Result => maps:get(Result, Counts, 0) + 1}.

merge(A, B) ->
    maps:fold(fun(K, V, Acc) -> Acc#{K => V + maps:get(K, Acc, 0)} end, B, A).
