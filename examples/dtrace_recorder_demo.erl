%%% The flight recorder's demo: the key-value store of examples/dtrace_demo.erl
%%% (the seeds' 99th-percentile spike), split over two nodes, with a
%%% recorder on each and nobody watching.
%%%
%%% - Node `front' runs the store's workers: gets and puts, each a span
%%%   (dtrace:span_begin/span_end) under a user tag naming the request
%%%   ("put user:1234 #5678": the key and a request number).
%%% - Node `disk' runs the store's log writer. A put sends its record there
%%%   with its tag spreading, so the writer's file I/O (through
%%%   dtrace_file) carries the put's tag. Every ~400th append the writer
%%%   "merges" the log: it rewrites a 16 MB file and syncs it, and the put
%%%   waiting on it is slow.
%%%
%%% Both recorders record `events => detail' (every span, file operation
%%% and span_vm_* event: what a recorder started for an incident records;
%%% the default events, cheap enough to leave on, keep only the spans over
%%% the slow-span threshold). The front node's recorder has a trigger on
%%% the put spans over 10 ms (`org_erlang_dtrace:span_slow' with `kind ==
%%% "put" && duration_ns > 10000000'): LTTng takes the front node's snapshot itself, from inside
%%% the process, with no Erlang code on the path. The put that saw itself
%%% slow also calls dtrace_recorder:trigger_cluster/1, so that the disk node
%%% (where the time went) takes its own. The report merges the two by time:
%%% the slow put's span on the front node and the file I/O it waited for on
%%% the disk node, with the seconds before.
-module(dtrace_recorder_demo).

-export([run/2, writer_node/1, stop_writer/0]).

-define(WORKERS, 4).
-define(SLOW_NS, 10000000).

%% Runs the demo for Seconds with the recorders writing under Dir; prints
%% what it does, then the report.
run(Seconds, Dir) ->
    {ok, _} = application:ensure_all_started(dtrace),
    Opts = #{dir => Dir, buffer => {8, 1 bsl 20}, min_interval_ms => 5000, max_snapshots => 3,
             events => detail},
    %% The disk node: the log writer and a recorder of its own.
    Paths = lists:usort([filename:absname(filename:dirname(code:which(M))) || M <- [dtrace, ?MODULE]]),
    {ok, Peer, Disk} = peer:start_link(#{name => peer:random_name(disk), longnames => false,
                                         connection => standard_io,
                                         args => ["-setcookie", atom_to_list(erlang:get_cookie())
                                                  | lists:append([["-pa", P] || P <- Paths])]}),
    ok = peer:call(Peer, ?MODULE, writer_node, [Opts]),
    true = net_kernel:connect_node(Disk),
    {ok, Front} = dtrace_recorder:start(Opts#{triggers => [{event, <<"org_erlang_dtrace:span_slow">>,
                                                            <<"kind == \"put\" && duration_ns > 10000000">>}]}),
    wait_members(2),
    say("front node ~s: recorder ~p, trigger: put spans over 10 ms", [node(), Front]),
    say("disk node  ~s: the log writer, recorder without triggers", [Disk]),
    say("both record events => detail (org_erlang_dtrace:*: spans, user probes, file I/O, span_vm_*) "
        "in 8 x 1 MiB per CPU"),
    say("running the workload for ~b s; nobody is watching...", [Seconds]),
    Table = ets:new(kv, [public, set]),
    Self = self(),
    Deadline = erlang:monotonic_time(millisecond) + Seconds * 1000,
    Workers = [spawn_link(fun() -> Self ! {self(), worker(Table, {log_writer, Disk}, Deadline, 0, 0)} end)
               || _ <- lists:seq(1, ?WORKERS)],
    {Ops, Slow} = lists:foldl(fun(W, {O, S}) -> receive {W, {O1, S1}} -> {O + O1, S + S1} end end,
                              {0, 0}, Workers),
    say("~b operations, ~b puts over 10 ms", [Ops, Slow]),
    [say("~s: ~p", [N, maps:with([snapshots, suppressed, failed], S)])
     || {N, S} <- [{node(), dtrace_recorder:status(Front)},
                   {Disk, peer:call(Peer, dtrace_recorder, status, [dtrace_recorder])}]],
    FrontSnaps = wait_snapshots(fun() -> dtrace_recorder:snapshots(Front) end),
    DiskSnaps = wait_snapshots(fun() -> peer:call(Peer, dtrace_recorder, snapshots, [dtrace_recorder]) end),
    say("snapshots on disk (at most one per 5 s, at most 3 kept per node):"),
    [say("  ~s ~-7s ~6b KiB  ~s  (~s)", [N, S, B div 1024, P, R])
     || #{node := N, source := S, bytes := B, path := P, reason := R} <- FrontSnaps ++ DiskSnaps],
    case {FrontSnaps, DiskSnaps} of
        {[_ | _], [_ | _]} ->
            %% The front node's latest (the most history before it) and the
            %% disk node's snapshot nearest to it in time.
            #{time := T} = Last = lists:last(FrontSnaps),
            [Pair | _] = lists:sort(fun(#{time := A}, #{time := B}) -> abs(A - T) =< abs(B - T) end, DiskSnaps),
            Svg = filename:join(filename:dirname(Dir), "timeline.svg"),
            say("~nThe report of the front node's latest snapshot and the disk node's of the same moment:~n"
                "dtrace_recorder:report([FrontSnapshot, DiskSnapshot], #{tags => 3, top => 8, svg => ~p})~n",
                [Svg]),
            case dtrace_recorder:report([Last, Pair], #{tags => 3, top => 8, max_lines => 30, svg => Svg}) of
                {error, Why} -> say("report failed: ~p", [Why]);
                Text -> io:put_chars(Text)
            end;
        _ ->
            say("no slow put this time (the merge is random): run it again, or longer")
    end,
    ok = dtrace_recorder:stop(Front),
    ok = peer:call(Peer, dtrace_recorder, stop, [dtrace_recorder]),
    ok = peer:call(Peer, ?MODULE, stop_writer, []),
    peer:stop(Peer).

%% On the disk node: the log writer, registered, and its recorder.
writer_node(Opts) ->
    {ok, _} = application:ensure_all_started(dtrace),
    {ok, _} = dtrace_recorder:start(Opts),
    Dir = filename:join(os:getenv("TMPDIR", "/tmp"), "dtrace_recorder_demo." ++ os:getpid()),
    ok = filelib:ensure_path(Dir),
    Pid = spawn(fun() -> log_writer(Dir) end),
    true = register(log_writer, Pid),
    ok.

worker(Table, Log, Deadline, Ops, Slow) ->
    case erlang:monotonic_time(millisecond) >= Deadline of
        true ->
            {Ops, Slow};
        false ->
            Key = rand:uniform(5000),
            Kind = case rand:uniform(10) of 1 -> put; 2 -> put; _ -> get end,
            %% The tag names the request: the key and a request number.
            _ = dtrace:put_tag([atom_to_list(Kind), " user:", integer_to_list(Key), " #",
                                integer_to_list(erlang:unique_integer([positive]))]),
            T0 = erlang:monotonic_time(nanosecond),
            Span = dtrace:span_begin(Kind),
            operation(Kind, Table, Log, Key),
            _ = dtrace:span_end(Span),
            Took = erlang:monotonic_time(nanosecond) - T0,
            IsSlow = Kind =:= put andalso Took > ?SLOW_NS,
            %% The slow put asks every node for a snapshot (the front node's
            %% own trigger has fired already).
            _ = IsSlow andalso dtrace_recorder:trigger_cluster(<<"slow put">>),
            _ = dtrace:put_tag(undefined),
            timer:sleep(1),
            worker(Table, Log, Deadline, Ops + 1, Slow + case IsSlow of true -> 1; false -> 0 end)
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
    {ok, Fd} = dtrace_file:open(filename:join(Dir, "log"), [append, raw, binary]),
    log_loop(Dir, Fd, crypto:strong_rand_bytes(16 bsl 20)).

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
        {stop, From} ->
            ok = dtrace_file:close(Fd),
            _ = [file:delete(filename:join(Dir, F)) || F <- ["log", "merged"]],
            _ = file:del_dir(Dir),
            From ! {stopped, self()}
    end.

%% On the disk node: the writer deletes its files and ends.
stop_writer() ->
    Pid = whereis(log_writer),
    Pid ! {stop, self()},
    receive {stopped, Pid} -> ok after 10000 -> ok end.

merge_log(Dir, Merged) ->
    dtrace:span(merge, fun() ->
                               {ok, Fd} = dtrace_file:open(filename:join(Dir, "merged"), [write, raw, binary]),
                               ok = dtrace_file:write(Fd, Merged),
                               ok = dtrace_file:datasync(Fd),
                               ok = dtrace_file:close(Fd)
                       end).

%% Both recorders in the pg group of recorders (trigger_cluster/1).
wait_members(N) ->
    case length(pg:get_members(dtrace_recorder_pg, dtrace_recorders)) >= N of
        true -> ok;
        false -> timer:sleep(50), wait_members(N)
    end.

%% Trigger snapshots are written by LTTng and adopted within a second.
wait_snapshots(F) ->
    wait_snapshots(F, erlang:monotonic_time(millisecond) + 3000).

wait_snapshots(F, Deadline) ->
    case F() of
        [_ | _] = S -> S;
        [] ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true -> [];
                false -> timer:sleep(100), wait_snapshots(F, Deadline)
            end
    end.

say(Text) -> say(Text, []).
say(Format, Args) -> io:format("   " ++ Format ++ "~n", Args).
