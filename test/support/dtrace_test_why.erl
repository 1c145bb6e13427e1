%%% Test helper for "why was it slow": priv/dtrace-slow-spans run against
%%% a peer running dtrace_test_service, and the breakdowns it (or the
%%% recorder's report) printed, held against the delays the service
%%% planted. Used by dtrace_why_SUITE (bpftrace, the recorder) and
%%% dtrace_dtrace_SUITE (DTrace).
-module(dtrace_test_why).

-include_lib("stdlib/include/assert.hrl").

-export([slow_spans/6, check/3, blocks/1, section/1, span_probes_on/0, collect/4, stop/2]).

%% Spans of at least this many ms are broken down (the fast requests take
%% well under 1 ms; the slow ones 20 ms and more).
-define(THRESHOLD_MS, 5).

%% Runs priv/dtrace-slow-spans (with ExtraArgs, environment Env) on Peer,
%% waits (at most ReadyMs) until it prints a ready span's whole breakdown,
%% runs the service (Service: dtrace_test_service:run/2's options), waits
%% until every planted request was printed, stops it with SIGINT. Returns
%% {Planted, Lines}.
slow_spans(Peer, Dir, ExtraArgs, Env, Service, ReadyMs) ->
    Script = filename:join(code:priv_dir(dtrace), "dtrace-slow-spans"),
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
                     %% A file request's planted time also holds the
                     %% Erlang work between its four operations, which is
                     %% not file I/O: its cause may fall short by twice the
                     %% tolerance (seen: 17.3 ms of I/O in 19.3 planted).
                     TimeOk = Tolerance =:= infinity orelse
                         (Ms =< PlantedMs * (1 + Tolerance) andalso
                          Ms >= PlantedMs * (1 - case Cause of file -> 2 * Tolerance; _ -> Tolerance end)),
                     %% The sleeping request raises after its sleep (the
                     %% service's): only its breakdown says FAILED.
                     FailedOk = (Cause =:= sleep) =:= has(Block, <<"FAILED: throw">>),
                     case CauseOk andalso TimeOk andalso FailedOk of
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
    stop_collect(Port, Acc, erlang:monotonic_time(millisecond) + dtrace_test_tracer:ceiling(30000)).

stop_collect(Port, Acc, Deadline) ->
    receive
        {Port, {data, {eol, Line}}} -> stop_collect(Port, Acc ++ [Line], Deadline);
        {Port, {data, {noeol, Part}}} -> stop_collect(Port, Acc ++ [Part], Deadline);
        {Port, {exit_status, 0}} -> Acc;
        {Port, {exit_status, S}} -> ct:fail("dtrace-slow-spans exited with ~p: ~p", [S, Acc])
    after max(0, Deadline - erlang:monotonic_time(millisecond)) ->
            ct:fail("dtrace-slow-spans still running 30 s after SIGINT: ~p", [Acc])
    end.
