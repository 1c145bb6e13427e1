%%% `make bench': what "why was it slow" down to the OS costs (issue #50).
%%% The kernel's scheduler and fault events fire for every task on the
%%% host; priv/bin/dtrace-slow-spans's kernel part and priv/bin/dtrace-sched
%%% filter them in the kernel to one node's threads. Measured here, the
%%% medians of ?ROUNDS rounds, each condition once a round:
%%%
%%% - a busy host: bench/floors/host_load.c, not the node: a context switch
%%%   (two processes ping-ponging over pipes on one CPU) and a page fault
%%%   (fresh pages touched), untraced; under the floor, bpftrace with the
%%%   same tracepoints and profile doing nothing (the kernel's tracepoint
%%%   and BPF dispatch, which any tracer of these events pays); and under
%%%   dtrace-slow-spans and dtrace-sched on this node. Total = floor + own
%%%   work (the filter and, for the node's threads, the bookkeeping).
%%% - the node: CPU per request (every thread of this VM,
%%%   /proc/self/task/*/schedstat: the probes' kernel time included, not
%%%   bpftrace's or the tool's own) of spans that run ?WORK_US us on the CPU
%%%   and call a server, under dtrace-slow-spans --no-os and under
%%%   dtrace-slow-spans: the kernel part's cost a request.
%%% - the tracer's own stall: a loop of empty spans; the longest gap
%%%   between two of them while dtrace-slow-spans attaches (from its start
%%%   to its first event) and while it detaches (from SIGINT to its exit),
%%%   against the longest in as long a window before it started (the host's
%%%   own noise, measured in the same round).
%%%
%%% The budgets: a busy host's context switch and page fault pay at most
%%% ?SWITCH_OWN_NS and ?FAULT_OWN_NS of own work over the floor; a request
%%% at most ?REQUEST_OWN_NS for the kernel part.
%%%
%%% Run alone (make bench-os) without scheduler busy-waiting, which would
%%% count as CPU:
%%%
%%%   erl -noshell +S 2:2 +sbwt none +sbwtdcpu none +sbwtdio none \
%%%       -pa _build/default/lib/dtrace/ebin -pa BENCH_EBIN \
%%%       -eval 'os_bench:main([]).'   (halts: 0, or 1 if a budget is missed)
-module(os_bench).

-export([main/1, save/1, load/1, run/0, markdown/1, budgets/1, figures/1, request/1, loop/1]).

-define(ROUNDS, 5).
-define(SWITCHES, 200000).
-define(FAULT_MB, 256).
-define(FAULT_ROUNDS, 2).
-define(REQUESTS, 2000).
-define(WORK_US, 200).
-define(SWITCH_OWN_NS, 250).
-define(FAULT_OWN_NS, 150).
-define(REQUEST_OWN_NS, 20000).

main(_) ->
    R = run(),
    io:format("~s~n", [markdown(R)]),
    Budgets = budgets(R),
    [io:format("  ~-90s ~s~n", [T, case OK of true -> "ok"; false -> "MISSED"; _ -> OK end]) || {T, OK} <- Budgets],
    halt(case lists:all(fun({_, OK}) -> OK =/= false end, Budgets) of true -> 0; false -> 1 end).

%% @doc For make bench (bench/run.sh): run/0's result into File, from a VM
%% without scheduler busy-waiting (its CPU figures would count it), as
%% main/1's; dtrace_bench reads it with load/1.
save(File) ->
    ok = file:write_file(File, io_lib:format("~p.~n", [run()])),
    halt(0).

load(File) ->
    {ok, [R]} = file:consult(File),
    R.

%% @doc The measurements (medians {Median, Min, Max}), or {skip, Why}.
run() ->
    case {dtrace_bench:can_trace(), os:find_executable("cc")} of
        {ok, false} -> {skip, "no C compiler (cc)"};
        {ok, _} -> measure();
        {{skip, Why}, _} -> {skip, Why}
    end.

measure() ->
    {ok, _} = application:ensure_all_started(dtrace),
    Dir = filename:join(os:getenv("TMPDIR", "/tmp"), "os_bench." ++ os:getpid()),
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    Src = filename:join([filename:dirname(proplists:get_value(source, ?MODULE:module_info(compile))),
                         "floors", "host_load.c"]),
    Load = filename:join(Dir, "host_load"),
    {0, _} = dtrace_bench:command(os:find_executable("cc"), ["-Wall", "-Wextra", "-O2", Src, "-o", Load]),
    Server = spawn_link(fun server/0),
    Host = fun() -> #{switch => number(Load, ["switches", integer_to_list(?SWITCHES)]),
                      fault => number(Load, ["faults", integer_to_list(?FAULT_MB), integer_to_list(?FAULT_ROUNDS)])}
           end,
    Node = fun() -> requests(Server) end,
    Floor = "BEGIN { printf(\"ready\\n\"); } tracepoint:sched:sched_switch { } profile:hz:997 { } "
        ++ [" tracepoint:exceptions:page_fault_user { } tracepoint:exceptions:page_fault_kernel { }"
            || filelib:is_dir("/sys/kernel/tracing/events/exceptions")],
    Rounds = [round_of(Host, Node, Floor) || _ <- lists:seq(1, ?ROUNDS)],
    Stalls = [stall() || _ <- lists:seq(1, 3)],
    _ = file:del_dir_r(Dir),
    unlink(Server),
    exit(Server, kill),
    Col = fun(K1, K2) -> dtrace_bench:stats([maps:get(K2, maps:get(K1, R)) || R <- Rounds]) end,
    S = fun(K) -> dtrace_bench:stats([maps:get(K, X) || X <- Stalls]) end,
    #{switch => #{untraced => Col(untraced, switch), floor => Col(floor, switch), slow_spans => Col(slow_spans, switch),
                  sched => Col(sched, switch)},
      fault => #{untraced => Col(untraced, fault), floor => Col(floor, fault), slow_spans => Col(slow_spans, fault),
                 sched => Col(sched, fault)},
      request => #{untraced => Col(untraced, request), no_os => Col(no_os, request), os => Col(slow_spans, request)},
      stall => #{baseline => S(baseline), attach => S(attach), detach => S(detach)}}.

%% One round: each condition once.
round_of(Host, Node, Floor) ->
    Untraced = maps:merge(Host(), #{request => Node()}),
    FloorRow = with_port(bpftrace(Floor), <<"ready">>, Host),
    NoOs = with_port(tool("dtrace-slow-spans", ["--no-os", "--threshold", "100000"]), <<"Tracing spans">>,
                     fun() -> #{request => Node()} end),
    Os = with_port(tool("dtrace-slow-spans", ["--threshold", "100000"]), <<"Tracing spans">>,
                   fun() -> maps:merge(Host(), #{request => Node()}) end),
    Sched = with_port(tool("dtrace-sched", ["--duration", "3600"]), <<"Watching the threads">>, Host),
    #{untraced => Untraced, floor => FloorRow, no_os => NoOs, slow_spans => Os, sched => Sched}.

%% A tool of priv/bin on this node.
tool(Name, Args) ->
    {filename:join([code:priv_dir(dtrace), "bin", Name]), ["-p", os:getpid() | Args]}.

bpftrace(Prog) ->
    {os:find_executable("bpftrace"), ["-e", Prog]}.

%% Fun() while the command runs, once it printed a line with Ready.
with_port({Exe, Args}, Ready, Fun) ->
    Port = open_port({spawn_executable, Exe}, [{args, Args}, {line, 65536}, stderr_to_stdout, exit_status, binary]),
    ok = wait_line(Port, Ready, erlang:monotonic_time(millisecond) + 120000),
    %% A span while the tools listen, so that their first events are past.
    _ = request_once(whereis(os_bench_server)),
    R = Fun(),
    _ = dtrace_bench:stop_lines(Port),
    R.

wait_line(Port, Ready, Deadline) ->
    receive
        {Port, {data, {eol, L}}} ->
            case binary:match(L, Ready) of
                nomatch -> wait_line(Port, Ready, Deadline);
                _ -> ok
            end;
        {Port, {data, _}} -> wait_line(Port, Ready, Deadline);
        {Port, {exit_status, S}} -> error({exited, S})
    after max(0, Deadline - erlang:monotonic_time(millisecond)) -> error({not_ready, Ready})
    end.

number(Exe, Args) ->
    {0, Out} = dtrace_bench:command(Exe, Args),
    list_to_float(string:trim(Out)).

%% A server that answers each call.
server() ->
    register(os_bench_server, self()),
    server_loop().

server_loop() ->
    receive {From, Ref} -> From ! Ref, server_loop() end.

%% CPU ns of the VM (every thread) a request: ?REQUESTS spans, each ?WORK_US
%% us on the CPU and a call to the server.
requests(Server) ->
    B0 = cpu_ns(),
    [request_once(Server) || _ <- lists:seq(1, ?REQUESTS)],
    (cpu_ns() - B0) / ?REQUESTS.

request_once(Server) ->
    dtrace:span(os_bench, fun() -> request(Server) end).

request(Server) ->
    spin(erlang:monotonic_time(microsecond) + ?WORK_US),
    Ref = make_ref(),
    Server ! {self(), Ref},
    receive Ref -> ok end.

spin(Until) ->
    case erlang:monotonic_time(microsecond) >= Until of
        true -> ok;
        false -> spin(Until)
    end.

cpu_ns() ->
    lists:sum([case file:read_file(F) of
                   {ok, Text} -> binary_to_integer(hd(binary:split(Text, <<" ">>)));
                   {error, _} -> 0
               end || F <- filelib:wildcard("/proc/self/task/*/schedstat")]).

%%% The tracer's own stall

%% Empty spans in a loop, the gaps over 1 ms between them kept: while
%% dtrace-slow-spans attaches and detaches, and before. #{baseline, attach,
%% detach := ms}.
stall() ->
    Self = self(),
    Loop = spawn_link(fun() -> loop(Self) end),
    T0 = now_us(),
    %% As long a window of the host's own noise as the attach takes, before.
    timer:sleep(2500),
    Start = now_us(),
    {Exe, Args} = tool("dtrace-slow-spans", ["--threshold", "100000"]),
    Port = open_port({spawn_executable, Exe}, [{args, Args}, {line, 65536}, stderr_to_stdout, exit_status, binary]),
    ok = wait_line(Port, <<"Tracing spans">>, erlang:monotonic_time(millisecond) + 120000),
    Attached = now_us(),
    timer:sleep(1000),
    Stop = now_us(),
    _ = dtrace_bench:stop_lines(Port),
    Exited = now_us(),
    Loop ! {gaps, self()},
    Gaps = receive {gaps, G} -> G end,
    unlink(Loop),
    exit(Loop, kill),
    Max = fun(A, B) -> lists:max([0 | [Gap || {At, Gap} <- Gaps, At >= A, At - Gap =< B]]) / 1000 end,
    #{baseline => Max(T0, T0 + max(Attached - Start, Exited - Stop)), attach => Max(Start, Attached),
      detach => Max(Stop, Exited)}.

loop(Parent) ->
    loop(Parent, now_us(), []).

loop(Parent, Prev, Gaps) ->
    dtrace:span(os_bench_loop, fun() -> ok end),
    Now = now_us(),
    Gaps1 = case Now - Prev > 1000 of true -> [{Now, Now - Prev} | Gaps]; false -> Gaps end,
    receive
        {gaps, From} -> From ! {gaps, Gaps1}, loop(Parent, Now, [])
    after 0 -> loop(Parent, Now, Gaps1)
    end.

now_us() ->
    erlang:monotonic_time(microsecond).

%%% Reporting

%% @doc The section of BENCHMARKS.md.
markdown({skip, Why}) ->
    ["\nWhy was it slow, down to the OS: skipped: ", Why, "\n"];
markdown(#{switch := Sw, fault := F, request := Rq, stall := St}) ->
    Row = fun(Name, {M, Mi, Ma}, Extra) -> io_lib:format("| ~s | ~.1f | ~.1f..~.1f | ~s |~n", [Name, M, Mi, Ma, Extra]) end,
    Own = fun(#{floor := {Fl, _, _}} = X, K) -> {T, _, _} = maps:get(K, X), io_lib:format("floor + ~.1f ns", [T - Fl]) end,
    ["| row | median | spread | |\n|---|---|---|---|\n",
     Row("a context switch of another task, untraced (ns)", maps:get(untraced, Sw), ""),
     Row("... floor: bpftrace on sched_switch and a 997 Hz profile, doing nothing", maps:get(floor, Sw), ""),
     Row("... dtrace-slow-spans on the node", maps:get(slow_spans, Sw), Own(Sw, slow_spans)),
     Row("... dtrace-sched on the node", maps:get(sched, Sw), Own(Sw, sched)),
     Row("a page fault of another task, untraced (ns)", maps:get(untraced, F), ""),
     Row("... floor: bpftrace on the page-fault tracepoints, doing nothing", maps:get(floor, F), ""),
     Row("... dtrace-slow-spans on the node", maps:get(slow_spans, F), Own(F, slow_spans)),
     Row("... dtrace-sched on the node", maps:get(sched, F), Own(F, sched)),
     Row(io_lib:format("a request of the node (~b us on the CPU, a call), untraced (CPU ns)", [?WORK_US]),
         maps:get(untraced, Rq), ""),
     Row("... dtrace-slow-spans --no-os (the VM's view)", maps:get(no_os, Rq), ""),
     Row("... dtrace-slow-spans (the kernel's events too)", maps:get(os, Rq),
         io_lib:format("+~.1f ns for the kernel part", [element(1, maps:get(os, Rq)) - element(1, maps:get(no_os, Rq))])),
     Row("longest gap between empty spans, before attaching (ms; the host's own)", maps:get(baseline, St), ""),
     Row("... while dtrace-slow-spans attaches (ms)", maps:get(attach, St), ""),
     Row("... while it detaches (ms)", maps:get(detach, St), "")].

%% @doc The budgets: own work over the floor, and a request's kernel part.
budgets({skip, Why}) ->
    [{"why down to the OS: skipped: " ++ Why, skipped}];
budgets(#{switch := Sw, fault := F, request := Rq}) ->
    O = fun(X, K) -> element(1, maps:get(K, X)) - element(1, maps:get(floor, X)) end,
    Req = element(1, maps:get(os, Rq)) - element(1, maps:get(no_os, Rq)),
    [{io_lib:format("a busy host's context switch, dtrace-slow-spans's own work <= ~b ns: ~.1f", [?SWITCH_OWN_NS,
                                                                                             O(Sw, slow_spans)]),
      O(Sw, slow_spans) =< ?SWITCH_OWN_NS},
     {io_lib:format("a busy host's context switch, dtrace-sched's own work <= ~b ns: ~.1f", [?SWITCH_OWN_NS,
                                                                                         O(Sw, sched)]),
      O(Sw, sched) =< ?SWITCH_OWN_NS},
     {io_lib:format("a busy host's page fault, dtrace-slow-spans's own work <= ~b ns: ~.1f", [?FAULT_OWN_NS,
                                                                                          O(F, slow_spans)]),
      O(F, slow_spans) =< ?FAULT_OWN_NS},
     {io_lib:format("a request's kernel part (dtrace-slow-spans) <= ~b ns: ~.1f", [?REQUEST_OWN_NS, Req]),
      Req =< ?REQUEST_OWN_NS}].

%% @doc The figures the docs quote.
figures({skip, _}) ->
    [];
figures(#{switch := Sw, fault := F, request := Rq, stall := St}) ->
    M = fun(X, K) -> element(1, maps:get(K, X)) end,
    Fmt = fun(Format, Args) -> lists:flatten(io_lib:format(Format, Args)) end,
    [{"os_switch_untraced", Fmt("~.1f ns", [M(Sw, untraced)])},
     {"os_switch_floor", Fmt("~.1f ns", [M(Sw, floor) - M(Sw, untraced)])},
     {"os_switch_own", Fmt("~.1f ns", [M(Sw, slow_spans) - M(Sw, floor)])},
     {"os_sched_switch_own", Fmt("~.1f ns", [M(Sw, sched) - M(Sw, floor)])},
     {"os_fault_untraced", Fmt("~.1f ns", [M(F, untraced)])},
     {"os_fault_own", Fmt("~.1f ns", [M(F, slow_spans) - M(F, floor)])},
     {"os_request_added", Fmt("~b ns", [round(M(Rq, os) - M(Rq, no_os))])},
     {"os_stall_baseline", Fmt("~.1f ms", [M(St, baseline)])},
     {"os_stall_attach", Fmt("~.1f ms", [M(St, attach)])},
     {"os_stall_detach", Fmt("~.1f ms", [M(St, detach)])}].
