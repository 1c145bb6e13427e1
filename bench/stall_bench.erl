%%% `make bench': what attaching and detaching a tracer costs a program
%%% whose probe it traces (issue #52): the longest pause of a 1 us request
%%% loop while bpftrace attaches to the loop's probe, and while it stops.
%%%
%%% The loop: each request about 1 us of work, then a call of a bare SDT
%%% site (the floors' site, bench/floors/floor_site.c, built in a site form:
%%% the library's `nop; nop10', trapped at its nop on this kernel; the 5-byte
%%% nop, which 6.18 optimizes into a call after its first hit), in two
%%% programs:
%%% - this node: a process looping on dtrace_floor_site_<Form>:hit/0 (a
%%%   NIF whose site is in its library), pinned to scheduler 1;
%%% - a C program: floor_uprobe_driver's `stall' mode, the site linked in.
%%% The loop notes every gap over 20 us between two requests, and when it
%%% saw the probe's semaphore rise (bpftrace attached) and fall (bpftrace
%%% gone). Per round: the loop starts, runs alone for 0.5 s, bpftrace -p
%%% attaches to the probe (counting it), stays 1 s, is stopped (SIGINT);
%%% the loop ends 1 s after the fall. The pauses: the longest gap within 500 ms of the rise
%%% (attach), of the fall (detach), and in the last 800 ms (quiet: nothing
%%% attached or detaching), medians of ?ROUNDS rounds, in ms.
%%%
%%% bpftrace's own start (a second or two of CPU before it attaches) runs
%%% on the other core: the loop is on one scheduler (node) or one thread (C).
%%%
%%%   make bench-stall   (prints the rows; make bench writes them into
%%%                       BENCHMARKS.md)
-module(stall_bench).

-export([main/1, run/1, markdown/1, figures/1]).

-define(ROUNDS, 5).
%% A request loop's longest run, ms (it ends 1 s after the fall).
-define(MAX_MS, 60000).
-define(GAP_US, 20).
-define(WINDOW_MS, 500).
-define(QUIET_MS, 800).

-define(P, dtrace_floors_programs).

%% @doc make bench-stall: builds the floors in FloorDir, prints the rows
%% (no budget: the pauses are reported).
main([FloorDir]) ->
    {module, dtrace} = code:ensure_loaded(dtrace),
    io:format("~s~n", [markdown(run(dtrace_floors:build(FloorDir)))]),
    halt(0).

%% @doc The rows for the floors dtrace_floors:build/1 made:
%% #{rows := [#{program, form, attach, detach, quiet, request_ns}]} (pauses
%% as {Median, Min, Max} ms), or {skip, Why}.
run({skip, Why}) ->
    {skip, Why};
run({ok, #{uprobe := {skip, Why}}}) ->
    {skip, Why};
run({ok, #{node_site := {skip, Why}}}) ->
    {skip, Why};
run({ok, #{uprobe := #{objects := Objects}, node_site := Sites}}) ->
    case dtrace_floors:can_trace() of
        ok ->
            io:format("~nAttaching and detaching bpftrace: a 1 us request loop's longest pause, ~b rounds:~n",
                      [?ROUNDS]),
            Rows = [row(Program, Form, Objects, Sites) || Program <- [node, c], Form <- [library, nop5]],
            #{rows => Rows};
        Skip ->
            Skip
    end.

row(Program, Form, Objects, Sites) ->
    Rounds = [round(Program, Form, Objects, Sites) || _ <- lists:seq(1, ?ROUNDS)],
    Stats = fun(K) -> dtrace_bench:stats([maps:get(K, R) || R <- Rounds]) end,
    Row = #{program => Program, form => Form, attach => Stats(attach), detach => Stats(detach),
            quiet => Stats(quiet), request_ns => element(1, Stats(request_ns))},
    io:format("  ~-4w ~-8w attach ~6.2f ms, detach ~6.2f ms, quiet ~6.2f ms (request ~b ns)~n",
              [Program, Form, element(1, maps:get(attach, Row)), element(1, maps:get(detach, Row)),
               element(1, maps:get(quiet, Row)), round(maps:get(request_ns, Row))]),
    Row.

%% One round: #{attach, detach, quiet (ms), request_ns}.
round(c, Form, Objects, _Sites) ->
    Exe = maps:get({exe, Form}, Objects),
    ?P:with_port(
      ?P:open_lines(Exe, ["-", integer_to_list(?MAX_MS), "stall"]),
      fun(Port) ->
              Deadline = ?P:deadline(?MAX_MS + 10000),
              <<"pid ", Pid/binary>> = ?P:await_line(Port, <<"pid ">>, Deadline),
              <<"ready">> = ?P:await_line(Port, <<"ready">>, Deadline),
              timer:sleep(500),
              attach_hold_detach(binary_to_list(Pid), "usdt:" ++ Exe ++ ":dtrace_floor:hit"),
              Lines = ?P:await_exit(Port, Deadline),
              [Rise] = [binary_to_float(T) || <<"rise ", T/binary>> <- Lines],
              [Fall] = [binary_to_float(T) || <<"fall ", T/binary>> <- Lines],
              [Ns] = [binary_to_float(T) || <<"request_ns ", T/binary>> <- Lines],
              Gaps = [{binary_to_float(At), binary_to_float(Us) / 1000}
                      || <<"gap ", G/binary>> <- Lines, [At, Us] <- [binary:split(G, <<" ">>)]],
              End = lists:max([Fall + 1000 | [At || {At, _} <- Gaps]]),
              pauses(Gaps, Rise, Fall, End, Ns)
      end);
round(node, Form, _Objects, Sites) ->
    #{module := M, nif := Nif, ebin := Ebin} = maps:get(Form, Sites),
    persistent_term:put({M, nif}, Nif),
    {module, M} = case code:is_loaded(M) of
                      {file, _} -> {module, M};
                      false -> code:load_abs(filename:join(Ebin, atom_to_list(M)))
                  end,
    Self = self(),
    {Loop, Ref} = spawn_opt(fun() -> Self ! {stall, self(), node_loop(M, Self)} end, [monitor, {scheduler, 1}]),
    try
        receive {ready, Loop} -> ok after 10000 -> error(stall_loop_not_ready) end,
        timer:sleep(500),
        attach_hold_detach(os:getpid(), "usdt:" ++ Nif ++ ".so:" ++ atom_to_list(M) ++ ":hit"),
        receive
            {stall, Loop, {Rise, Fall, End, Ns, Gaps}} -> pauses(Gaps, Rise, Fall, End, Ns);
            {'DOWN', Ref, process, Loop, Why} -> error({stall_loop, Why})
        after ?MAX_MS -> error(stall_loop_timeout)
        end
    after
        exit(Loop, kill),
        erlang:demonitor(Ref, [flush])
    end.

%% bpftrace -p Pid counting Probe: started, awaited until it attached,
%% kept 1 s, stopped (SIGINT) and awaited.
attach_hold_detach(Pid, Probe) ->
    Bt = ?P:open_lines(os:find_executable("bpftrace"), ["-p", Pid, "-e", Probe ++ " { @n = count(); }"]),
    ?P:with_port(Bt, fun(_) ->
                             _ = ?P:await_line(Bt, <<"Attach">>, ?P:deadline(60000)),
                             timer:sleep(1000),
                             _ = ?P:interrupt(Bt),
                             ok
                     end).

%% The request loop of this node: about 1 us of work and M:hit() a
%% request, until 1 s after the semaphore fell (?MAX_MS at most); tells
%% Parent `ready' once it knows how long 1 us of work is.
%% {Rise, Fall, End (ms from the start), ns per request, [{At ms, Gap ms}]}
%% of the gaps over ?GAP_US.
node_loop(M, Parent) ->
    K = calibrate(1000, 1000),
    Parent ! {ready, self()},
    T0 = erlang:monotonic_time(nanosecond),
    node_loop(M, K, T0, T0, M:hit(), T0 + ?MAX_MS * 1000000, undefined, undefined, 0, []).

node_loop(M, K, T0, Prev, Was, End, Rise, Fall, N, Gaps) ->
    _ = spin(K, 1),
    On = M:hit(),
    T = erlang:monotonic_time(nanosecond),
    Gaps1 = case T - Prev > ?GAP_US * 1000 of
                true -> [{(T - T0) / 1.0e6, (T - Prev) / 1.0e6} | Gaps];
                false -> Gaps
            end,
    {Rise1, Fall1, End1} = case {On, Was} of
                               {true, false} -> {(T - T0) / 1.0e6, Fall, End};
                               {false, true} -> {Rise, (T - T0) / 1.0e6, min(End, T + 1000000000)};
                               _ -> {Rise, Fall, End}
                           end,
    case T >= End1 of
        true -> {Rise1, Fall1, (T - T0) / 1.0e6, (T - T0) / (N + 1), lists:reverse(Gaps1)};
        false -> node_loop(M, K, T0, T, On, End1, Rise1, Fall1, N + 1, Gaps1)
    end.

%% The k for which spin(k, _) takes about Ns ns, from 100 ms of spinning.
calibrate(K, Ns) ->
    T0 = erlang:monotonic_time(nanosecond),
    Rounds = calibrate_loop(K, T0 + 100000000, 0),
    PerRound = (erlang:monotonic_time(nanosecond) - T0) / Rounds,
    max(1, round(K * Ns / PerRound)).

calibrate_loop(K, Until, Rounds) ->
    _ = spin(K, 1),
    case erlang:monotonic_time(nanosecond) >= Until of
        true -> Rounds + 1;
        false -> calibrate_loop(K, Until, Rounds + 1)
    end.

spin(0, X) -> X;
spin(K, X) -> spin(K - 1, (X * 1103515245 + 12345) band 16#7fffffff).

%% The longest gap (ms) near the rise, near the fall and in the quiet
%% end; a window with no gap over ?GAP_US counts as ?GAP_US.
pauses(Gaps, Rise, Fall, End, Ns) when is_number(Rise), is_number(Fall) ->
    Longest = fun(From, To) -> lists:max([?GAP_US / 1000 | [G || {At, G} <- Gaps, At >= From, At =< To]]) end,
    #{attach => Longest(Rise - ?WINDOW_MS, Rise + ?WINDOW_MS),
      detach => Longest(Fall - ?WINDOW_MS, Fall + ?WINDOW_MS),
      quiet => Longest(End - ?QUIET_MS, End),
      request_ns => Ns}.

%%% Report

label(node) -> "this node (a process, scheduler 1)";
label(c) -> "a C program".

form_label(library) -> "the library's nop; nop10 (int3 at the nop)";
form_label(nop5) -> "5-byte nop (optimized into a call)".

%% @doc BENCHMARKS.md's section.
markdown({skip, Why}) ->
    ["Skipped: ", Why, ".\n"];
markdown(#{rows := Rows}) ->
    ["| program | site | attach: longest pause ms (spread) | detach: longest pause ms (spread) | "
     "quiet: longest pause ms | ns a request |\n|---|---|---|---|---|---|\n",
     [io_lib:format("| ~s | ~s | **~.2f** (~.2f..~.2f) | **~.2f** (~.2f..~.2f) | ~.2f | ~b |~n",
                    [label(P), form_label(F), A, Amin, Amax, D, Dmin, Dmax, Q, round(Ns)])
      || #{program := P, form := F, attach := {A, Amin, Amax}, detach := {D, Dmin, Dmax},
           quiet := {Q, _, _}, request_ns := Ns} <- Rows]].

%% @doc The figures the docs quote: the pauses of this node's loop with the
%% library's site form.
figures({skip, _}) ->
    [];
figures(#{rows := Rows}) ->
    F = fun(X) -> lists:flatten(io_lib:format("~.1f ms", [X])) end,
    lists:append([[{"stall_" ++ atom_to_list(P) ++ "_" ++ atom_to_list(Form) ++ "_attach", F(A)},
                   {"stall_" ++ atom_to_list(P) ++ "_" ++ atom_to_list(Form) ++ "_detach", F(D)}]
                  || #{program := P, form := Form, attach := {A, _, _}, detach := {D, _, _}} <- Rows]).
