%%% Test helper for "why was it slow": priv/bin/dtrace-slow-spans run against
%%% a peer running dtrace_test_service, and the breakdowns it (or the
%%% recorder's report) printed, held against the delays the service
%%% planted. Used by dtrace_why_SUITE (bpftrace, the recorder) and
%%% dtrace_dtrace_SUITE (DTrace).
-module(dtrace_test_why).

-include_lib("stdlib/include/assert.hrl").

-export([slow_spans/6, check/3, blocks/1, section/1, span_probes_on/0, collect/4, stop/2,
         check_files/3, trace_check/2, run_script/6]).

%% Spans of at least this many ms are broken down (the fast requests take
%% well under 1 ms; the slow ones 20 ms and more).
-define(THRESHOLD_MS, 5).

%% Runs priv/bin/dtrace-slow-spans (with ExtraArgs, environment Env) on Peer,
%% waits (at most ReadyMs) until it prints a ready span's whole breakdown,
%% runs the service (Service: dtrace_test_service:run/2's options), waits
%% until every planted request was printed, stops it with SIGINT. Returns
%% {Planted, Lines}.
slow_spans(Peer, Dir, ExtraArgs, Env, Service, ReadyMs) ->
    Script = filename:join([code:priv_dir(dtrace), "bin", "dtrace-slow-spans"]),
    Port = open_port({spawn_executable, Script},
                     [{args, ["-p", dtrace_test_peer:os_pid(Peer), "--threshold", integer_to_list(?THRESHOLD_MS)
                              | ExtraArgs]},
                      {env, Env}, {line, 65536}, stderr_to_stdout, exit_status, binary]),
    %% Attached once a ready span's breakdown shows every kind of event
    %% the rules read: its sleep, its GC, its file operation (a tracer
    %% attaches probe by probe).
    ok = peer:call(Peer, dtrace_test_workload, start_ready_loop, [ready_span(Dir)]),
    Lines0 = collect(Port, [], fun(Ls) -> ready_seen(blocks(Ls)) end, ReadyMs),
    Planted = peer:call(Peer, dtrace_test_workload, stop_ready_loop_and_run,
                        [fun() -> dtrace_test_service:run(Service, Dir) end], dtrace_test_tracer:ceiling(120000)),
    Tags = [Tag || {Tag, _, _, _} <- Planted],
    Lines1 = collect(Port, Lines0, fun(Ls) -> Tags -- [T || {T, _, _} <- blocks(Ls)] =:= [] end, dtrace_test_tracer:ceiling(30000)),
    Lines = stop(Port, Lines1),
    ct:log("dtrace-slow-spans printed:~n~ts", [lists:join("\n", Lines)]),
    {Planted, Lines}.

%% Runs priv/bin/dtrace-slow-spans (with Args, environment Env) on Peer while
%% Workload (a fun run in the peer) runs, once the script prints a ready
%% span's whole breakdown (within ReadyMs); then stops it with SIGINT.
%% Returns {WorkloadResult, Lines}.
run_script(Peer, Dir, Args, Env, Workload, ReadyMs) ->
    Script = filename:join([code:priv_dir(dtrace), "bin", "dtrace-slow-spans"]),
    Port = open_port({spawn_executable, Script},
                     [{args, ["-p", dtrace_test_peer:os_pid(Peer), "--threshold", integer_to_list(?THRESHOLD_MS)
                              | Args]},
                      {env, Env}, {line, 65536}, stderr_to_stdout, exit_status, binary]),
    ok = peer:call(Peer, dtrace_test_workload, start_ready_loop, [ready_span(Dir)]),
    Lines0 = collect(Port, [], fun(Ls) -> ready_seen(blocks(Ls)) end, ReadyMs),
    Result = peer:call(Peer, dtrace_test_workload, stop_ready_loop_and_run, [Workload],
                       dtrace_test_tracer:ceiling(120000)),
    Lines = stop(Port, Lines0),
    ct:log("dtrace-slow-spans printed:~n~ts", [lists:join("\n", Lines)]),
    {Result, Lines}.

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
        andalso dtrace_nif:span_enabled() =:= true andalso dtrace_nif:efile_enabled().

%% Each planted slow request has its block, with the planted cause, its
%% time within 10% of the delay the service measured (a file request's up
%% to 20% below it; or any time, with
%% `tolerance => infinity' in Service: under an emulated CPU).
check(Planted, Blocks, #{requests := N, every := Every} = Service) ->
    Tolerance = maps:get(tolerance, Service, 0.1),
    ?assertEqual(N div Every, length(Planted)),
    Results =
        [begin
             case lists:keyfind(Tag, 1, Blocks) of
                 false ->
                     {Tag, Cause, not_printed};
                 {Tag, {Text, Ms}, Block} ->
                     PlantedMs = PlantedNs / 1.0e6,
                     CauseOk = case Cause of
                                   sleep -> prefix(<<"scheduled out in timer:sleep/1">>, Text);
                                   gc -> Text =:= <<"GC">>;
                                   call -> prefix(<<"scheduled out in gen:">>, Text)
                                               andalso has(Text, iolist_to_binary(["waiting on ", Extra]));
                                   file -> prefix(<<"file I/O">>, Text)
                               end,
                     %% With the kernel's events, a collection's thread
                     %% kept off the CPU is the OS's (why.py's rules): a
                     %% GC may fall short by the block's preempted,
                     %% throttled and tracer's time.
                     OffCpu = case Cause of
                                  gc -> lists:sum([M || L <- binary:split(Block, <<"\n">>, [global]),
                                                        {C, M} <- [component(L)],
                                                        lists:member(C, [<<"preempted">>, <<"throttled">>,
                                                                         <<"the tracer">>])]);
                                  _ -> 0
                              end,
                     %% A file request's planted time also holds the
                     %% Erlang work between its four operations, which is
                     %% not file I/O: its cause may fall short by twice the
                     %% tolerance (seen: 17.3 ms of I/O in 19.3 planted).
                     TimeOk = Tolerance =:= infinity orelse
                         (Ms =< PlantedMs * (1 + Tolerance) andalso
                          Ms + OffCpu >= PlantedMs * (1 - case Cause of file -> 2 * Tolerance; _ -> Tolerance end)),
                     %% The sleeping request raises after its sleep (the
                     %% service's): only its breakdown says FAILED.
                     FailedOk = (Cause =:= sleep) =:= has(Block, <<"FAILED: throw">>),
                     case CauseOk andalso TimeOk andalso FailedOk of
                         true -> ok;
                         %% The whole breakdown: CI keeps only the
                         %% failure's reason.
                         false -> {Tag, Cause, PlantedMs, Text, Ms, Block}
                     end
             end
         end || {Tag, Cause, PlantedNs, Extra} <- Planted],
    ?assertEqual([], [R || R <- Results, R =/= ok]).

%% The trace files and folded stacks the tools wrote (--trace, --folded),
%% read back by test/support/dtrace_trace_check.py (run by Python, a
%% Python 3 that has the perfetto package when a file is Perfetto's), held against the breakdowns
%% printed for the same run (blocks/1): every block's span is a slice on
%% its process's track, tag and outcome kept, whose heaviest inner slices
%% are the printed cause with its time (within 5%, or 0.5 ms); in the
%% folded stacks, each span kind's heaviest path is the cause with the most
%% time among the printed causes of that kind. Returns the checker's lines
%% of each file, for more checks.
check_files(Files, Blocks, Python) ->
    [{File, check_file(File, Blocks, Python)} || File <- Files].

check_file(File, Blocks, Python) ->
    Lines = trace_check(File, Python),
    %% Slices nest, and each flow has a slice at both ends.
    ?assertEqual([], [L || [Bad | _] = L <- Lines, Bad =:= <<"BADNEST">> orelse Bad =:= <<"BADFLOW">>], File),
    case filename:extension(File) of
        ".folded" ->
            %% Per span kind, each cause's time in the flame graph is the
            %% sum of that component over the kind's printed breakdowns;
            %% the heaviest path is the heaviest of those sums.
            Folded = [{{Kind, Cause}, binary_to_float(Ms)} || [<<"FOLDED">>, Kind, Cause, Ms] <- Lines],
            Text = components(Blocks),
            ?assertNotEqual([], Text),
            %% Within 5%, or a quarter of a millisecond a span: the
            %% breakdown counts a GC or a wait up to the end event, a
            %% little after the span's measured end, where the flame graph
            %% stops at that end (its on CPU is the larger by as much).
            Spans = fun(Kind) -> length([B || {_, _, B} <- Blocks, kind_of(B) =:= Kind]) end,
            Off = [{Key, Ms, proplists:get_value(Key, Folded)}
                   || {{Kind, _} = Key, Ms} <- Text, Ms >= 1.0,
                      not near(proplists:get_value(Key, Folded), Ms, 0.25 * Spans(Kind))],
            ?assertEqual([], Off, File),
            [begin
                 {Top, TopMs} = hd(lists:reverse(lists:keysort(2, [{C, Ms} || {{K, C}, Ms} <- Text, K =:= Kind]))),
                 [_, _, Heaviest, _] = hd([L || [<<"HEAVIEST">>, K | _] = L <- Lines, K =:= Kind]),
                 %% Causes within the tolerance of the top one are a tie.
                 ?assert(Heaviest =:= Top orelse near(proplists:get_value({Kind, Heaviest}, Text), TopMs),
                         {File, Kind, Heaviest, Top})
             end || Kind <- lists:usort([K || {{K, _}, _} <- Text])];
        _ ->
            Spans = [{Tag, {Track, Name, Outcome, Cause, binary_to_float(Ms)}}
                     || [<<"SPAN">>, Track, Name, Tag, Outcome, Cause, Ms] <- Lines],
            Missing =
                [{Tag, Text, Ms, proplists:get_value(Tag, Spans)}
                 || {Tag, {Text, Ms}, Block} <- Blocks,
                    not span_matches(proplists:get_value(Tag, Spans), Text, Ms, Block)],
            ?assertEqual([], Missing, File)
    end,
    Lines.

span_matches({Track, Name, Outcome, Cause, TraceMs}, Text, Ms, Block) ->
    {match, [Pid]} = re:run(Block, <<"pid (<[0-9.]+>)">>, [{capture, all_but_first, binary}]),
    Failed = has(Block, <<"FAILED: ", Outcome/binary>>) andalso has(Name, <<"[", Outcome/binary, "]">>),
    prefix(Pid, Track) andalso prefix(kind_of(Block), Name)
        andalso (Outcome =:= <<"ok">> orelse Failed)
        andalso Cause =:= cause_group(Text)
        andalso abs(TraceMs - Ms) =< max(0.5, 0.05 * Ms);
span_matches(_, _, _, _) ->
    false.

%% The components of the printed breakdowns, summed per span kind:
%% [{{Kind, Cause}, Ms}], the causes named as the checker groups slices.
components(Blocks) ->
    Sums = lists:foldl(
             fun({_, _, Block}, Acc) ->
                     Kind = kind_of(Block),
                     lists:foldl(fun(Line, A) ->
                                         case component(Line) of
                                             {Cause, Ms} -> maps:update_with({Kind, Cause}, fun(V) -> V + Ms end, Ms, A);
                                             none -> A
                                         end
                                 end, Acc, binary:split(Block, <<"\n">>, [global]))
             end, #{}, Blocks),
    lists:sort(maps:to_list(Sums)).

component(Line) ->
    %% The OS's categories (why_os): a line each, as the folded stacks
    %% group them.
    Os = [{<<"^    ", (re_quote(C))/binary, " +([0-9.]+) ms">>, C}
          || C <- [<<"on CPU (user)">>, <<"on CPU (no sample)">>, <<"in the kernel">>, <<"preempted">>,
                   <<"throttled">>, <<"blocked">>, <<"dirty scheduler">>, <<"the tracer">>]],
    Patterns = [{<<"^\\s+on CPU +([0-9.]+) ms">>, <<"on CPU">>} | Os]
        ++ [{<<"^\\s+GC +([0-9.]+) ms">>, <<"GC">>},
            {<<"^\\s+file I/O \\(tag\\) +([0-9.]+) ms">>, <<"file I/O">>},
            {<<"^\\s+(\\S+) +([0-9.]+) ms">>, scheduled_out}],
    lists:foldl(fun({Re, Cause}, none) ->
                        case re:run(Line, Re, [{capture, all_but_first, binary}]) of
                            {match, [Ms]} -> {Cause, binary_to_float(Ms)};
                            {match, [Mfa, Ms]} -> {<<"scheduled out in ", Mfa/binary>>, binary_to_float(Ms)};
                            nomatch -> none
                        end;
                   (_, Found) -> Found
                end, none, Patterns).

re_quote(Text) ->
    re:replace(Text, <<"[()]">>, <<"\\\\&">>, [global, {return, binary}]).

near(A, B) -> near(A, B, 1.0).

near(undefined, _, _) -> false;
near(A, B, Floor) -> abs(A - B) =< max(Floor, 0.05 * B).

%% The printed cause as the checker groups slices: "scheduled out in F"
%% (without who), "file I/O" (without the commands), "GC", "on CPU".
cause_group(Text) ->
    case Text of
        <<"file I/O", _/binary>> -> <<"file I/O">>;
        _ -> hd(binary:split(Text, <<", ">>))
    end.

kind_of(Block) ->
    {match, [Kind]} = re:run(Block, <<"slow span: (\\S+) ">>, [{capture, all_but_first, binary}]),
    Kind.

%% The lines of test/support/dtrace_trace_check.py FILE, split at tabs.
trace_check(File, Python) ->
    Script = filename:join(filename:dirname(?FILE), "dtrace_trace_check.py"),
    Port = open_port({spawn_executable, Python},
                     [{args, [Script, File]}, {line, 65536}, exit_status, binary,
                      stderr_to_stdout]),
    Lines = stop_collect(Port, [], erlang:monotonic_time(millisecond) + 60000),
    [binary:split(L, <<"\t">>, [global]) || L <- Lines].

%% The breakdowns in Lines: [{Tag, {CauseText, CauseMs}, BlockText}], from
%% a "... slow span: KIND D ms, tag "TAG", pid P ..." line and the
%% "cause: TEXT, N ms (P%)" line after it (or "cause: TEXT").
blocks(Lines) ->
    blocks(Lines, []).

blocks([], Acc) ->
    lists:reverse(Acc);
blocks([L | Rest], Acc) ->
    case re:run(L, <<"slow span: .* tag \"([^\"]*)\"">>, [{capture, all_but_first, binary}]) of
        {match, [Tag]} ->
            {Body, Rest1} = lists:splitwith(fun(X) -> binary:match(X, <<"slow span: ">>) =:= nomatch
                                                          andalso string:trim(X) =/= <<>> end, Rest),
            %% A span whose begin the tracer did not see has a cause
            %% with no time ("cause: the tracer attaching its probes
            %% (...)"): -1.0 ms.
            Cause = case [C || B <- Body, {match, C} <- [re:run(B, <<"cause: (.*?)(?:, ([0-9.]+) ms \\([0-9]+%\\))?$">>,
                                                                 [{capture, all_but_first, binary}])]] of
                        [[Text, Ms] | _] -> {Text, binary_to_float(Ms)};
                        [[Text] | _] -> {Text, -1.0};
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
    case erlang:port_info(Port, os_pid) of
        {os_pid, Pid} -> _ = os:cmd("kill -INT " ++ integer_to_list(Pid));
        undefined -> ok % exited already: its status and last lines are queued
    end,
    stop_collect(Port, Acc, erlang:monotonic_time(millisecond) + dtrace_test_tracer:ceiling(30000)).

%% Port's lines (after Acc) until it exits with status 0, by Deadline; a
%% failure otherwise, naming the command.
stop_collect(Port, Acc, Deadline) ->
    receive
        {Port, {data, {eol, Line}}} -> stop_collect(Port, Acc ++ [Line], Deadline);
        {Port, {data, {noeol, Part}}} -> stop_collect(Port, Acc ++ [Part], Deadline);
        {Port, {exit_status, 0}} -> Acc;
        {Port, {exit_status, S}} -> ct:fail("~s exited with ~p: ~p", [command(Port), S, Acc])
    after max(0, Deadline - erlang:monotonic_time(millisecond)) ->
            ct:fail("~s still running at its deadline: ~p", [command(Port), Acc])
    end.

command(Port) ->
    case erlang:port_info(Port, name) of
        {name, Name} -> Name;
        undefined -> "the command"
    end.
