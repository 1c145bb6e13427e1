%%% Helpers for the dtrace suites: traced peer nodes, tracers run as ports,
%%% and the policy for tracers that cannot attach (skip locally, fail in CI).
-module(dtrace_test_lib).

-export([nif_path/0, start_peer/0, start_peer/1, start_named_peer/3, stop_peer/1, os_pid/1,
         require_tracer/1, with_tracer/2, in_ci/0,
         bpftrace_start/2, bpftrace_start/3, bpftrace_stop/1,
         bpftrace_window/5, bpftrace_window/6, bpftrace_map/2, bpftrace_map/3,
         gdb_run/3, gdb_events/2, gdb_events/3,
         run/2, notes/1, catalogue/0, repo_root/0]).
%% Run inside the traced peer.
-export([fire_until_true/1, fire_until_listening/1, count_trues/2, start_ready_loop/1, stop_ready_loop_and_run/1,
         gdb_workload/1]).
%% A gen_server that answers `tags' with {get_tag(), get_tag_data()}.
-behaviour(gen_server).
-export([init/1, handle_call/3, handle_cast/2]).
%% A logger handler that sends {log, Level, Text} to the pid in its config.
-export([log/2]).
-export([churn_start/1, churn_open/1, churn_close/1, churn_stop/0, churn_workers_alive/0]).
%% For the VM-probe suites, in the traced peer.
-export([terminate_self/0, double/1, sink/0, wait_flags/2, our_traced/0]).

-define(TIMEOUT, 60000).

%% Absolute path of the NIF the tests trace.
nif_path() ->
    filename:join(code:priv_dir(dtrace), "dtrace_nif.so").

%% A separate node to trace, so that a tracer stopping the traced OS
%% process (gdb) never stops the test runner. No distribution is needed:
%% the peer is driven over its standard input/output.
start_peer() ->
    start_peer([]).

start_peer(ExtraArgs) ->
    Paths = lists:usort([filename:dirname(code:which(M)) || M <- [dtrace, ?MODULE]]),
    Args = lists:append([["-pa", P] || P <- Paths]) ++ ExtraArgs,
    {ok, Peer, _Node} = peer:start_link(#{connection => standard_io, args => Args}),
    %% Load the NIF before any tracer attaches: `bpftrace -p' finds the
    %% probes in the libraries the process has mapped.
    true = peer:call(Peer, dtrace, available, []),
    Peer.

%% A distributed peer named Prefix plus a random suffix, with Cookie and
%% the code paths of this library, this module and Modules, the NIF loaded.
%% Returns {Peer, Node}. For cases that connect two nodes.
start_named_peer(Prefix, Cookie, Modules) ->
    Paths = lists:usort([filename:dirname(code:which(M)) || M <- [dtrace, ?MODULE | Modules]]),
    Args = ["-setcookie", Cookie | lists:append([["-pa", P] || P <- Paths])],
    {ok, Peer, Node} = peer:start_link(#{name => peer:random_name(Prefix), longnames => false,
                                         connection => standard_io, args => Args}),
    true = peer:call(Peer, dtrace, available, []),
    {Peer, Node}.

stop_peer(Peer) ->
    catch peer:stop(Peer),
    ok.

os_pid(Peer) ->
    peer:call(Peer, os, getpid, []).

in_ci() ->
    os:getenv("CI") =:= "true".

%% The repository this test code belongs to.
repo_root() ->
    filename:dirname(filename:dirname(?FILE)).

%% The library's SDT notes, as readelf -n lists them, in order:
%% [#{provider, name, location, base, semaphore (integers), args (the
%% argument specs, e.g. [<<"8@%rdi">>, ...])}].
notes(Path) ->
    {0, Lines} = run("readelf", ["-n", Path]),
    notes(Lines, undefined, []).

notes([<<"    Provider: ", P/binary>> | Rest], _, Acc) ->
    notes(Rest, P, Acc);
notes([<<"    Name: ", Name/binary>>, Loc, <<"    Arguments:", Args/binary>> | Rest], P, Acc) ->
    {match, [L, B, S]} = re:run(Loc, "Location: 0x([0-9a-f]+), Base: 0x([0-9a-f]+), Semaphore: 0x([0-9a-f]+)",
                                [{capture, all_but_first, list}]),
    [Location, Base, Semaphore] = [list_to_integer(X, 16) || X <- [L, B, S]],
    Note = #{provider => P, name => Name, location => Location, base => Base,
             semaphore => Semaphore, args => string:lexemes(Args, " ")},
    notes(Rest, P, [Note | Acc]);
notes([_ | Rest], P, Acc) ->
    notes(Rest, P, Acc);
notes([], _, Acc) ->
    lists:reverse(Acc).

%% The probe catalogue (native/dtrace_nif/probes.d), every probe expanded,
%% as the dtrace-catalogue command prints it for this machine:
%% [{Name, [{ArgName, Type, Register, NoteSpec}]}], all binaries.
catalogue() ->
    {0, Lines} = run("cargo", ["run", "--quiet", "--release", "-p", "dtrace_catalogue",
                               "--manifest-path", filename:join(repo_root(), "Cargo.toml"),
                               "--", "erlang"]),
    Text = unicode:characters_to_list([[L, $\n] || L <- Lines]),
    [{list_to_binary(N), [{list_to_binary(A), list_to_binary(T), list_to_binary(R), list_to_binary(S)}
                          || {A, T, R, S} <- Args]}
     || {probe, N, Args} <- consult_string(Text)].

consult_string(Text) ->
    case erl_scan:tokens([], Text, 1) of
        {done, {ok, Tokens, _}, Rest} ->
            {ok, Term} = erl_parse:parse_term(Tokens),
            [Term | consult_string(Rest)];
        _ -> []
    end.

%% ok when Tool (bpftrace | gdb | perf | readelf) can be used. Otherwise
%% {skip, Why} locally; in CI the test fails, because tracer tests are
%% mandatory there.
require_tracer(Tool) ->
    Why = case os:find_executable(atom_to_list(Tool)) of
              false -> io_lib:format("~s is not installed", [Tool]);
              _ when Tool =:= readelf -> ok;
              _ ->
                  case string:trim(os:cmd("id -u")) of
                      "0" -> ok;
                      _ -> io_lib:format("~s needs root (or CAP_BPF/CAP_PERFMON/"
                                         "CAP_SYS_PTRACE) to attach", [Tool])
                  end
          end,
    case {Why, in_ci()} of
        {ok, _} -> ok;
        {_, true} -> ct:fail("CI=true and ~ts", [Why]);
        {_, false} -> {skip, lists:flatten(Why)}
    end.

%% Config when Tool can be used, else what require_tracer/1 says: for
%% init_per_testcase/2 and init_per_suite/1.
with_tracer(Tool, Config) ->
    case require_tracer(Tool) of
        ok -> Config;
        Skip -> Skip
    end.

%% Starts bpftrace on OsPid with Program (in which "$SO" stands for the NIF
%% path) and returns once it says it is attaching.
bpftrace_start(OsPid, Program) ->
    bpftrace_start(bpftrace, OsPid, Program).

%% The same with Tool: bpftrace itself, or dtrace_bpftrace, the wrapper
%% shipped as priv/dtrace-bpftrace. Program may also be {file, Script}.
bpftrace_start(Tool, OsPid, Program) ->
    Args = case Program of
               {file, Script} -> ["-p", OsPid, Script];
               _ -> ["-p", OsPid, "-e", unicode:characters_to_list(
                                          string:replace(Program, "$SO", nif_path(), all))]
           end,
    Exe = case Tool of
              bpftrace -> os:find_executable("bpftrace");
              dtrace_bpftrace -> filename:join(code:priv_dir(dtrace), "dtrace-bpftrace")
          end,
    Port = open_port({spawn_executable, Exe},
                     [{args, Args},
                      {line, 65536}, stderr_to_stdout, exit_status, binary]),
    case collect_until(Port, <<"Attaching">>, []) of
        {ok, Lines} -> {Port, Lines};
        {exit, Status, Lines} ->
            ct:fail("bpftrace exited (~p) before attaching: ~p", [Status, Lines])
    end.

%% Stops bpftrace with SIGINT (it then prints its maps) and returns all the
%% lines it printed.
%%
%% Under the churn test's load (10,000 processes trapping on both cores),
%% bpftrace 0.17 was seen, rarely, still polling 60 s after a SIGINT, with
%% no signal pending. So the signal is sent again every 10 s, at most five
%% times, and each repeat is logged.
bpftrace_stop({Port, Lines0}) ->
    {os_pid, Pid} = erlang:port_info(Port, os_pid),
    bpftrace_stop(Port, Pid, lists:reverse(Lines0), 1).

bpftrace_stop(Port, Pid, Acc, N) ->
    _ = os:cmd("kill -INT " ++ integer_to_list(Pid)),
    case collect_exit(Port, Acc, erlang:monotonic_time(millisecond) + 10000) of
        {exit, Lines} ->
            Lines;
        {running, Acc1} when N < 5 ->
            ct:log("bpftrace (~p) still running 10 s after SIGINT ~b: sending it again;~n"
                   "its state: ~ts", [Pid, N, os:cmd("grep -E 'State|SigPnd|ShdPnd|SigCgt' /proc/"
                                                      ++ integer_to_list(Pid) ++ "/status")]),
            bpftrace_stop(Port, Pid, Acc1, N + 1);
        {running, Acc1} ->
            catch port_close(Port),
            ct:fail("bpftrace did not exit after ~b SIGINTs: ~p", [N, lists:reverse(Acc1)])
    end.

%% The lines Port prints (Acc: those so far, newest first) until it exits,
%% or until Deadline.
collect_exit(Port, Acc, Deadline) ->
    receive
        {Port, {data, {eol, Line}}} -> collect_exit(Port, [Line | Acc], Deadline);
        {Port, {data, {noeol, Part}}} -> collect_exit(Port, [Part | Acc], Deadline);
        {Port, {exit_status, _}} -> {exit, lists:reverse(Acc)}
    after max(0, Deadline - erlang:monotonic_time(millisecond)) ->
            {running, Acc}
    end.

%% The value of bpftrace map Name (`@name' or `@[key]') in its printed
%% output; the test fails if it is not there.
bpftrace_map(Name, Lines) ->
    case bpftrace_map(Name, Lines, undefined) of
        undefined -> ct:fail("~s not in the tracer's output: ~p", [Name, Lines]);
        V -> V
    end.

%% The same, with Default when the map is not there.
bpftrace_map(Name, Lines, Default) ->
    case [binary_to_integer(string:trim(V))
          || L <- Lines, [K, V] <- [binary:split(L, <<": ">>)], K =:= Name] of
        [N] -> N;
        [] -> Default
    end.

%% Counts need a window in which the tracer is known to be fully attached:
%% the kernel raises a probe's semaphore a little before the tracer's event
%% is enabled (and lowers it a little after it is disabled), so a call in
%% that gap returns true and no event arrives. So: start bpftrace with
%% Program; in the peer, fire Ready() every few milliseconds until bpftrace
%% has printed every line in SeenLines (binaries, or {contains, Part} for
%% a line containing Part; its program prints one when it sees
%% a Ready() event of a probe); then run Workload() in the peer, stop
%% bpftrace, and return {WorkloadResult, BpftraceLines}. Ready() events must
%% be told apart from the workload's in Program.
bpftrace_window(Peer, Program, Ready, SeenLines, Workload) ->
    bpftrace_window(bpftrace, Peer, Program, Ready, SeenLines, Workload).

%% The same with Tool (see bpftrace_start/3).
bpftrace_window(Tool, Peer, Program, Ready, SeenLines, Workload) ->
    {Port, Lines0} = bpftrace_start(Tool, os_pid(Peer), Program),
    ok = peer:call(Peer, ?MODULE, start_ready_loop, [Ready]),
    Lines1 = collect_lines(Port, SeenLines, Lines0),
    Result = peer:call(Peer, ?MODULE, stop_ready_loop_and_run, [Workload], 120000),
    {Result, bpftrace_stop({Port, Lines1})}.

%% Wanted without the first entry Line satisfies: an equal binary, or
%% {contains, Part}.
seen(Line, [Line | Rest]) -> Rest;
seen(Line, [{contains, Part} = W | Rest]) ->
    case binary:match(Line, Part) of
        nomatch -> [W | seen(Line, Rest)];
        _ -> Rest
    end;
seen(Line, [W | Rest]) -> [W | seen(Line, Rest)];
seen(_Line, []) -> [].

collect_lines(_Port, [], Acc) ->
    Acc;
collect_lines(Port, Wanted, Acc) ->
    receive
        {Port, {data, {eol, Line}}} ->
            collect_lines(Port, seen(Line, Wanted), Acc ++ [Line]);
        {Port, {exit_status, Status}} ->
            ct:fail("bpftrace exited (~p) before it saw ~p: ~p", [Status, Wanted, Acc])
    after ?TIMEOUT ->
            ct:fail("bpftrace did not see ~p within ~p ms: ~p", [Wanted, ?TIMEOUT, Acc])
    end.

%% Runs gdb in batch mode with Script attached to OsPid, while Workload()
%% runs in this process; returns {WorkloadResult, GdbLines}.
gdb_run(OsPid, Script, Workload) ->
    Port = open_port({spawn_executable, os:find_executable("gdb")},
                     [{args, ["-q", "-batch", "-nx", "-x", Script, "-p", OsPid]},
                      {line, 65536}, stderr_to_stdout, exit_status, binary]),
    Result = Workload(),
    {exit, _Status, Lines} = collect_until(Port, undefined, []),
    {Result, Lines}.

%% Runs Fun in the peer while gdb runs test/tracers/i4s4.gdb on it:
%% before Fun, the peer waits until gdb listens (user_trace__n1 returns
%% true); after it, user_trace__n950 makes gdb detach. Returns
%% {FunResult, EventLines}, one "EVENT ..." line per probe hit.
gdb_events(Peer, Fun) ->
    gdb_events(Peer, "i4s4.gdb", Fun).

%% The same with another script of test/tracers/ (same protocol).
gdb_events(Peer, ScriptName, Fun) ->
    Script = filename:join([filename:dirname(?FILE), "tracers", ScriptName]),
    {Result, Lines} =
        gdb_run(os_pid(Peer), Script,
                fun() ->
                        peer:call(Peer, ?MODULE, gdb_workload, [Fun], 600000)
                end),
    lists:member(<<"DONE">>, Lines) orelse ct:fail("gdb did not finish: ~p", [Lines]),
    {Result, [L || <<"EVENT", _/binary>> = L <- Lines]}.

gdb_workload(Fun) ->
    1 = fire_until_true(fun() -> dtrace:pn(1) end),
    Result = Fun(),
    true = dtrace:pn(950),
    Result.

%% Runs an executable with arguments, returning {ExitStatus, Output}.
run(Exe, Args) ->
    Port = open_port({spawn_executable, os:find_executable(Exe)},
                     [{args, Args}, {line, 65536}, stderr_to_stdout, exit_status, binary]),
    {exit, Status, Lines} = collect_until(Port, undefined, []),
    {Status, Lines}.

collect_until(Port, Marker, Acc) ->
    receive
        {Port, {data, {eol, Line}}} ->
            Acc1 = [Line | Acc],
            case Marker =/= undefined andalso binary:match(Line, Marker) =/= nomatch of
                true -> {ok, lists:reverse(Acc1)};
                false -> collect_until(Port, Marker, Acc1)
            end;
        {Port, {data, {noeol, Part}}} ->
            collect_until(Port, Marker, [Part | Acc]);
        {Port, {exit_status, Status}} ->
            {exit, Status, lists:reverse(Acc)}
    after ?TIMEOUT ->
            catch port_close(Port),
            ct:fail("tracer did not answer within ~p ms: ~p", [?TIMEOUT, lists:reverse(Acc)])
    end.

%%% In the traced peer

%% Calls Probe() until it returns true (the tracer has raised the
%% semaphore), at most for 30 s. Returns the number of true returns (1).
fire_until_true(Probe) ->
    fire_until_true(Probe, erlang:monotonic_time(millisecond) + 30000).

%% fire_until_true/1, then 250 ms more, for cases that expect the very next
%% events to reach the tracer. The kernel raises the semaphore when
%% bpftrace registers the uprobe (perf_event_open), and bpftrace attaches
%% its BPF program to it a moment later; events in between reach no
%% program. Seen here: 100 processes firing right after the first true
%% lost 400 to 700 events. Cases that compare counts open their window on
%% an event the tracer printed instead (bpftrace_window/5).
fire_until_listening(Probe) ->
    N = fire_until_true(Probe),
    timer:sleep(250),
    N.

fire_until_true(Probe, Deadline) ->
    case Probe() of
        true -> 1;
        false ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true -> erlang:error(tracer_never_attached);
                false -> timer:sleep(10), fire_until_true(Probe, Deadline)
            end
    end.

%% Fires Ready() every 5 ms, in a process of its own, until told to stop.
start_ready_loop(Ready) ->
    Pid = spawn(fun() -> ready_loop(Ready) end),
    register(dtrace_test_ready_loop, Pid),
    ok.

ready_loop(Ready) ->
    _ = Ready(),
    receive
        {stop, From} -> From ! {stopped, self()}
    after 5 -> ready_loop(Ready)
    end.

stop_ready_loop_and_run(Workload) ->
    Pid = whereis(dtrace_test_ready_loop),
    Pid ! {stop, self()},
    receive {stopped, Pid} -> ok end,
    Workload().

%% Calls Probe(I) for I in 1..N and returns how many calls returned true.
count_trues(Probe, N) ->
    count_trues(Probe, 1, N, 0).

count_trues(_Probe, I, N, Acc) when I > N ->
    Acc;
count_trues(Probe, I, N, Acc) ->
    count_trues(Probe, I + 1, N, case Probe(I) of true -> Acc + 1; _ -> Acc end).

%%% Churn: processes firing all the time while tracers come and go.
%%%
%%% A window E (3, 4, ...) is "open" while the tracer is known to be
%%% attached. Workers fire with i1 = E while a window is open and with
%%% i1 = 1 otherwise (not counted); the tracer counts events per i1. To
%%% count exactly, each worker marks a call as started in window E, then
%%% checks that E is still open, fires, counts a true return, and marks the
%%% call finished. The coordinator closes E, then waits until every call
%%% started in E has finished: a call that checked after the close sees it
%%% closed, and one that checked before is waited for, so every counted
%%% call ran while the tracer was attached.

-define(WINDOWS, 128).
-define(CLOSED, 1).

%% Starts N workers on all schedulers (runs in the traced peer).
churn_start(N) ->
    State = #{window => atomics:new(1, [{signed, false}]),
              started => atomics:new(?WINDOWS, [{signed, false}]),
              finished => atomics:new(?WINDOWS, [{signed, false}]),
              trues => atomics:new(?WINDOWS, [{signed, false}])},
    atomics:put(maps:get(window, State), 1, ?CLOSED),
    persistent_term:put(dtrace_churn, State),
    Pids = [spawn(fun() -> churn_worker(State, I, 0) end) || I <- lists:seq(1, N)],
    persistent_term:put(dtrace_churn_pids, Pids),
    ok.

churn_worker(#{window := W, started := S, finished := F, trues := T} = State, Id, K) ->
    receive stop -> ok
    after 0 ->
            E = atomics:get(W, 1),
            atomics:add(S, E, 1),
            R = case atomics:get(W, 1) of
                    E when K rem 2 =:= 0 -> dtrace:p(E, Id, "churn", <<"worker">>);
                    E -> dtrace:pn(3, E, Id, [<<"churn">>, $!]);
                    _ -> skipped
                end,
            R =:= true andalso E =/= ?CLOSED andalso atomics:add(T, E, 1),
            atomics:add(F, E, 1),
            %% Let the other 9,999 run too.
            K rem 8 =:= 0 andalso erlang:yield(),
            churn_worker(State, Id, K + 1)
    end.

churn_open(E) when E > ?CLOSED, E =< ?WINDOWS ->
    #{window := W} = persistent_term:get(dtrace_churn),
    atomics:put(W, 1, E).

%% Closes window E; returns the true returns counted in it once every call
%% started in it has finished.
churn_close(E) ->
    #{window := W, started := S, finished := F, trues := T} = persistent_term:get(dtrace_churn),
    %% exchange, not put: a full barrier, so the reads below cannot move
    %% before the close (a worker's add is one too).
    E = atomics:exchange(W, 1, ?CLOSED),
    wait_finished(S, F, E),
    atomics:get(T, E).

wait_finished(S, F, E) ->
    case atomics:get(S, E) =:= atomics:get(F, E) of
        true -> ok;
        false -> timer:sleep(1), wait_finished(S, F, E)
    end.

churn_workers_alive() ->
    length([P || P <- persistent_term:get(dtrace_churn_pids), is_process_alive(P)]).

churn_stop() ->
    [P ! stop || P <- persistent_term:get(dtrace_churn_pids)],
    ok.

%%% Logger handler for tests

log(#{level := Level, msg := Msg}, #{config := Pid}) ->
    Text = case Msg of
               {string, S} -> unicode:characters_to_list(S);
               {report, R} -> lists:flatten(io_lib:format("~p", [R]));
               {Format, Args} -> lists:flatten(io_lib:format(Format, Args))
           end,
    Pid ! {log, Level, Text}.

%%% gen_server for the spreading tests

init([]) -> {ok, no_state}.

handle_call(tags, _From, State) ->
    {reply, {dtrace:get_tag(), dtrace:get_tag_data()}, State}.

handle_cast(_Msg, State) -> {noreply, State}.

%%% VM probes

%% Exits with {terminated, self()} (OTP's dyntrace_SUITE:process/1).
terminate_self() ->
    exit({terminated, self()}).

%% A function to put call-trace patterns on.
double(X) ->
    2 * X.

%% A process that takes any message and forgets it; `stop' ends it.
sink() ->
    receive
        stop -> ok;
        _ -> sink()
    end.

%% Waits (at most Ms) until dtrace_vm's process flags are Flags (sorted),
%% as the status map shows them; returns ok or {timeout, Status}.
wait_flags(Flags, Ms) ->
    wait_flags(lists:sort(Flags), Ms, erlang:monotonic_time(millisecond) + Ms).

wait_flags(Flags, Ms, Deadline) ->
    #{flags := #{processes := P}} = Status = dtrace:vm_probes(),
    case lists:sort(P) =:= Flags of
        true -> ok;
        false ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true -> {timeout, Status};
                false -> timer:sleep(10), wait_flags(Flags, Ms, Deadline)
            end
    end.

%% The processes traced by dtrace's automatic mode.
our_traced() ->
    [P || P <- processes(), erlang:trace_info(P, tracer) =:= {tracer, {dtrace, auto}}].
