%%% A toy service for "why was it slow" (dtrace_why_SUITE): requests, each
%%% handled by a process of its own inside dtrace:span(request, ...) under
%%% a user tag of its own, where a known few are slow for a known reason.
%%% Each slow request measures its planted delay itself, as a service's own
%%% log would, so that a test can hold a breakdown against it.
-module(dtrace_test_service).

-export([start_server/0, stop_server/1, request/3, run/2]).
-export([server_loop/0]).

-define(SLEEP_MS, 40).

%% A registered-name-free server: {slow, Ms} replies after Ms ms.
start_server() ->
    spawn(?MODULE, server_loop, []).

stop_server(S) ->
    S ! stop,
    ok.

server_loop() ->
    receive
        {'$gen_call', From, {slow, Ms}} ->
            timer:sleep(Ms),
            gen_server:reply(From, ok),
            server_loop();
        stop ->
            ok
    end.

%% Runs N requests one after the other; request K is slow for the K-th of
%% Causes when K rem Every =:= 0. Returns [{Tag, Cause, PlantedNs, Extra}]
%% of the slow ones (Extra: the server's pid for a call, else undefined).
run(Opts, Dir) ->
    N = maps:get(requests, Opts, 200),
    Every = maps:get(every, Opts, 25),
    Causes = maps:get(causes, Opts, [sleep, gc, call, file]),
    Server = start_server(),
    try
        lists:append(
          [begin
               Cause = case K rem Every of
                           0 -> lists:nth((K div Every - 1) rem length(Causes) + 1, Causes);
                           _ -> fast
                       end,
               Tag = "req-" ++ integer_to_list(K),
               R = request(Cause, Tag, #{server => Server, dir => Dir}),
               [{list_to_binary(Tag), Cause, Planted, Extra} || {Planted, Extra} <- [R], Cause =/= fast]
           end || K <- lists:seq(1, N)])
    after
        stop_server(Server)
    end.

%% One request in a process of its own; returns {PlantedNs, Extra}.
request(Cause, Tag, Env) ->
    Parent = self(),
    {Pid, Ref} =
        spawn_monitor(
          fun() ->
                  %% A GC-heavy request holds a large live heap: it is built
                  %% before the span (the request's state), collected inside.
                  Big = case Cause of
                            gc -> lists:seq(1, 2000000);
                            file -> binary:copy(<<"0123456789abcdef">>, 2 * 1024 * 1024);
                            _ -> []
                        end,
                  dtrace:put_tag(Tag),
                  %% A request that raises is a failed span (outcome throw).
                  R = try dtrace:span(request, fun() -> handle(Cause, Env#{big => Big}) end)
                      catch throw:{failed_request, Failed} -> Failed
                      end,
                  Parent ! {self(), R, erlang:external_size(Big)}
          end),
    receive
        {Pid, R, _} ->
            receive {'DOWN', Ref, process, Pid, _} -> R end;
        {'DOWN', Ref, process, Pid, Why} ->
            error({request_died, Why})
    after 30000 ->
            error(request_timeout)
    end.

handle(fast, _Env) ->
    _ = lists:sum(lists:seq(1, 1000)),
    {0, undefined};
handle(sleep, _Env) ->
    %% Slow, and then it fails: its span ends with outcome "throw".
    {T, ok} = timer:tc(fun() -> timer:sleep(?SLEEP_MS) end),
    throw({failed_request, {T * 1000, undefined}});
handle(gc, _Env) ->
    {T, true} = timer:tc(fun() -> erlang:garbage_collect() end),
    {T * 1000, undefined};
handle(call, #{server := S}) ->
    {T, ok} = timer:tc(fun() -> gen_server:call(S, {slow, ?SLEEP_MS}) end),
    {T * 1000, pid_to_list(S)};
handle(file, #{dir := Dir, big := Bin}) ->
    %% A new file each time (truncating a large one costs its own time),
    %% 32 MiB written and synced to the disk: the planted delay is the
    %% file's operations, from its open to its close.
    Path = filename:join(Dir, "slow-write-" ++ integer_to_list(erlang:unique_integer([positive]))),
    {T, ok} = timer:tc(fun() ->
                               {ok, Fd} = dtrace_file:open(Path, [write, raw, binary]),
                               ok = dtrace_file:write(Fd, Bin),
                               ok = dtrace_file:datasync(Fd),
                               dtrace_file:close(Fd)
                       end),
    ok = file:delete(Path),
    {T * 1000, undefined}.
