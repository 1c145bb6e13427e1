%%% The floors of `make bench': what any enabled probe pays whatever
%%% library fires it, measured in the same run as the library's own rows,
%%% so that an enabled figure reads "total = floors + own work".
%%%
%%% Three floors, each from small C code in bench/floors/ that build/1
%%% compiles with cc:
%%%
%%% - erl_tracer: a message ping-pong (as dtrace_bench_vm's pingpong/0) with
%%%   both processes traced on `send' by the cheapest tracer module there
%%%   is (dtrace_floor_tracer: NIFs answering `trace' and `ok'), minus the
%%%   same ping-pong untraced. ns per message.
%%% - uprobe: a bare sys/sdt.h site (provider dtrace_floor, probe hit, the
%%%   note of the library's user_trace__i4s4) in a shared library, hit under
%%%   bpftrace counting, minus the same loop with the semaphore down; in
%%%   each site form (dtrace_floors_build:forms/0: the 1-byte nop, the
%%%   library's `nop; nop10', the 5-byte nop which kernel 6.18 optimizes);
%%%   also, for comparison, with the site in the executable; and under perf
%%%   on a uprobe at any offset of the site (perf_uprobe_floor/4: the
%%%   library's nop10 at +1, where a kernel may optimize it). ns per hit.
%%% - LTTng: events with the fields of OTP's message_send and of the
%%%   library's user_trace_i4s4, recorded by a root LTTng session (channel
%%%   as the bench's: 8 x 8 MiB sub-buffers, discard mode), minus the same
%%%   loop with no session. ns per event.
%%%
%%% Each floor alternates its two runs (untraced/traced, disabled/hit, no
%%% session/session) for a number of rounds, 5 at least, and reports
%%% Stats = {Median, Min, Max} of each kind of run and of the floor, the
%%% floor of a round being its traced run minus its untraced run.
%%%
%%% Nothing here prints: every function returns its values, and the
%%% output of the tools it runs (cc, bpftrace, lttng, the drivers) is
%%% captured. Every wait has a deadline; the tracers, sessions and
%%% programs a function starts are stopped before it returns, also when it
%%% fails.
%%%
%%% The floors are built by dtrace_floors_build, and their programs run
%%% through dtrace_floors_programs (the three compiled together, with
%%% dtrace_floors.hrl).
%%%
%%% From a shell (as root, for the uprobe and LTTng floors):
%%%   erlc -o /tmp/fl bench/dtrace_floors*.erl
%%%   erl -noshell -pa /tmp/fl -eval '{ok, P} = dtrace_floors:build("/tmp/fl"),
%%%       io:format("~p~n", [dtrace_floors:all(P)]), halt().'
-module(dtrace_floors).

-export([build/1, build/2, can_trace/0,
         tracer_floor/1, tracer_floor/2, tracer_sink_floor/2, tracer_sink_floor/3, tracer_sink_pair/2,
         uprobe_floor/2, uprobe_floor/3, perf_uprobe_floor/3, perf_uprobe_floor/4,
         node_uprobe_floor/2, node_uprobe_floor/3,
         lttng_floor/2, lttng_floor/3,
         messages/0, message_pingpong/4, apart_together/1,
         all/1]).

-export_type([stats/0, paths/0, form/0]).

-type form() :: nop1 | library | nop5.
%% A site's instruction (dtrace_floors_build:forms/0).

-type stats() :: {Median :: float(), Min :: float(), Max :: float()}.
%% ns, over the rounds of a measurement.

-type skip() :: {skip, Why :: string()}.

-type paths() ::
        #{dir := file:filename(),
          tracer := #{module := module(), nif := file:filename(), ebin := file:filename(),
                      sdt := #{module := module(), nif := file:filename(), ebin := file:filename()} | skip(),
                      sdt_nop5 := #{module := module(), nif := file:filename(), ebin := file:filename()} | skip(),
                      lttng := #{module := module(), nif := file:filename(), ebin := file:filename()} | skip(),
                      sdt_text := #{module := module(), nif := file:filename(), ebin := file:filename()} | skip(),
                      lttng_text := #{module := module(), nif := file:filename(), ebin := file:filename()} | skip()}
                    | skip(),
          uprobe := #{driver := file:filename(),
                      objects := #{{lib | exe, form()} => file:filename()},
                      sites := #{{lib | exe, form()} => string()},
                      locations := #{{lib | exe, form()} => non_neg_integer()}} | skip(),
          lttng := #{driver := file:filename()} | skip(),
          node_site := #{form() => #{module := module(), nif := file:filename(),
                                     ebin := file:filename(), site := string()}} | skip()}.
%% What build/1 made. `objects': the object holding each site (a shared
%% library, or for `exe' a driver with the site linked in); `sites': the
%% objdump lines of each site's instructions; `locations': each site's
%% address (its note's). A floor whose headers or tools are missing is
%% `{skip, Why}'.

-define(ROUNDS_TRACER, 7).
%% A bpftrace attach takes a second or two: 5 rounds.
-define(ROUNDS_UPROBE, 5).
%% A recorded run is a tenth of a second, and more exposed to the rest of
%% the machine (the consumer daemon): 7 rounds.
-define(ROUNDS_LTTNG, 7).
%% Round trips of a ping-pong (2 messages each), as dtrace_bench_vm's.
-define(PINGPONG, 500000).
-define(N_HITS, 1000000).
-define(N_EVENTS, 1000000).

-include("dtrace_floors.hrl").

-define(P, dtrace_floors_programs).

%%% Building

%% @doc build(WorkDir): build/2 with the sources in bench/floors/
%% (dtrace_floors_build:build/1).
-spec build(file:filename()) -> {ok, paths()} | skip().
build(WorkDir) ->
    dtrace_floors_build:build(WorkDir).

%% @doc Compiles the floors' C code from SrcDir with cc into WorkDir, and
%% their Erlang modules; `{skip, Why}' for what cannot be built here
%% (dtrace_floors_build:build/2).
-spec build(file:filename(), file:filename()) -> {ok, paths()} | skip().
build(SrcDir, WorkDir) ->
    dtrace_floors_build:build(SrcDir, WorkDir).

%%% erl_tracer floor

%% @doc tracer_floor(Paths, #{}).
-spec tracer_floor(paths()) -> #{atom() => stats() | integer()} | skip().
tracer_floor(Paths) ->
    tracer_floor(Paths, #{}).

%% @doc The erl_tracer floor, ns per message: a ping-pong of `n' round
%% trips (500,000 by default: 1M messages) between two fresh processes,
%% untraced, and with both traced on `send' by dtrace_floor_tracer
%% (erlang:trace/3), alternating, `rounds' times (7 by default) after an
%% untraced warm-up. Returns #{untraced, traced, floor (traced - untraced
%% of each round), rounds, messages}.
-spec tracer_floor(paths(), #{rounds => pos_integer(), n => pos_integer()}) ->
          #{atom() => stats() | integer()} | skip().
tracer_floor(#{tracer := {skip, _} = Skip}, _Opts) ->
    Skip;
tracer_floor(#{tracer := Tracer}, Opts) ->
    Rounds = max(5, maps:get(rounds, Opts, ?ROUNDS_TRACER)),
    N = maps:get(n, Opts, ?PINGPONG),
    M = load_tracer(Tracer),
    _ = pingpong(false, N),
    Pairs = [{pingpong(false, N), pingpong(M, N)} || _ <- lists:seq(1, Rounds)],
    #{untraced => stats([U || {U, _} <- Pairs]),
      traced => stats([T || {_, T} <- Pairs]),
      floor => stats([T - U || {U, T} <- Pairs]),
      rounds => Rounds,
      messages => 2 * N}.

%% @doc tracer_sink_floor(Paths, Sink, #{}).
-spec tracer_sink_floor(paths(), sdt | lttng) -> #{atom() => stats() | integer()} | skip().
tracer_sink_floor(Paths, Sink) ->
    tracer_sink_floor(Paths, Sink, #{}).

%% @doc The erl_tracer floor and a sink's floor together, ns per message,
%% paid in the same ping-pong as the library's VM probes: both processes
%% traced on `send' by dtrace_floor_tracer_sdt, whose trace/5 fires a bare
%% SDT site with constant arguments under bpftrace counting it (Sink sdt),
%% or by dtrace_floor_tracer_lttng, whose trace/5 records
%% dtrace_floor:message_send with constant texts in an LTTng session
%% (Sink lttng); against the ping-pong untraced, alternating, `rounds'
%% times. The tracer (bpftrace, or the session) stays attached for all the
%% traced runs. Returns #{untraced, traced, floor, rounds, messages}.
%% The SDT site is the library's form; with `form => nop5' (Sink sdt,
%% constant texts), the 5-byte nop, the kernel's best case on 6.18.
%% With `message' (a name of messages/0) the ping-pong is
%% message_pingpong/4's, with that message and `pin' (pinned, default, or
%% unpinned), and the tracer module is the -DFLOOR_TEXT one: the texts of
%% each traced message written with %T (floor_tracer_nif.c).
-spec tracer_sink_floor(paths(), sdt | lttng, #{rounds => pos_integer(), n => pos_integer(),
                                                 message => atom(), pin => pinned | unpinned,
                                                 form => library | nop5}) ->
          #{atom() => stats() | integer()} | skip().
tracer_sink_floor(#{tracer := {skip, _} = Skip}, _Sink, _Opts) ->
    Skip;
tracer_sink_floor(Paths, Sink, Opts) when Sink =:= sdt; Sink =:= lttng ->
    Rounds = max(5, maps:get(rounds, Opts, ?ROUNDS_TRACER)),
    case sink_pairs(Paths, Sink, Opts, Rounds) of
        {skip, _} = Skip -> Skip;
        {Pairs, N} ->
            #{untraced => stats([U || {U, _} <- Pairs]),
              traced => stats([T || {_, T} <- Pairs]),
              floor => stats([T - U || {U, T} <- Pairs]),
              rounds => Rounds,
              messages => 2 * N}
    end.

%% @doc One round of tracer_sink_floor/3 (its default ping-pong): {Untraced,
%% Traced} ns per message, the tracer (bpftrace, or the session) attached
%% for this round only; for measurements that alternate the floor with
%% something else round by round (dtrace_bench_vm:paired_send/2).
-spec tracer_sink_pair(paths(), sdt | lttng) -> {float(), float()} | skip().
tracer_sink_pair(#{tracer := {skip, _} = Skip}, _Sink) ->
    Skip;
tracer_sink_pair(Paths, Sink) ->
    case sink_pairs(Paths, Sink, #{}, 1) of
        {skip, _} = Skip -> Skip;
        {[Pair], _} -> Pair
    end.

%% Rounds pairs {Untraced, Traced} of the ping-pong Opts names, the sink's
%% tracer attached around them: {Pairs, RoundTrips} or a skip.
sink_pairs(#{tracer := {skip, _} = Skip}, _Sink, _Opts, _Rounds) ->
    Skip;
sink_pairs(#{tracer := Tracer} = Paths, Sink, Opts, Rounds) ->
    Key = case {maps:is_key(message, Opts), maps:get(form, Opts, library)} of
              {true, library} -> list_to_atom(atom_to_list(Sink) ++ "_text");
              {false, library} -> Sink;
              {false, nop5} when Sink =:= sdt -> sdt_nop5
          end,
    case {maps:get(Key, Tracer), Sink, can_trace(), ?P:can_lttng()} of
        {{skip, _} = Skip, _, _, _} -> Skip;
        {_, sdt, {skip, _} = Skip, _} -> Skip;
        {_, lttng, _, {skip, _} = Skip} -> Skip;
        {Variant, _, _, _} ->
            N = maps:get(n, Opts, ?PINGPONG),
            M = load_tracer(Variant),
            PingPong = case Opts of
                           #{message := Msg} ->
                               Pin = maps:get(pin, Opts, pinned),
                               fun(T, K) -> message_pingpong(T, K, Msg, Pin) end;
                           _ ->
                               fun pingpong/2
                       end,
            _ = PingPong(false, N),
            Run = fun() -> [{PingPong(false, N), PingPong(M, N)} || _ <- lists:seq(1, Rounds)] end,
            Pairs = case Sink of
                        sdt -> with_bpftrace_on(maps:get(nif, Variant) ++ ".so", M, Run);
                        lttng -> with_session_on(Paths, atom_to_list(dtrace_floors_build:lttng_provider(Key))
                                                 ++ ":message_send", M, Run)
                    end,
            {Pairs, N}
    end.

%% Run() with bpftrace on this node counting the bare site of library So,
%% once its program saw a hit (short traced ping-pongs until it prints).
with_bpftrace_on(So, M, Run) ->
    {R, _Count} = with_site_counted(So, M, fun() -> pingpong(M, 100) end, Run),
    R.

%% {Run(), Hits}: Run() with bpftrace on this node counting (Hits) the
%% site `hit' of library So, whose provider is module M (see
%% floor_site.c). Run starts once bpftrace printed that its program saw a
%% hit, Poke() making hits until then (the semaphore rises a moment before
%% the program is attached), so every hit of the run is counted.
with_site_counted(So, M, Poke, Run) ->
    Prog = "usdt:" ++ So ++ ":" ++ atom_to_list(M) ++ ":hit { if (!@ready) { @ready = 1; printf(\"READY\\n\"); } "
        "@n = count(); }",
    ?P:with_port(
      ?P:open_lines(os:find_executable("bpftrace"), ["-p", os:getpid(), "-e", Prog]),
      fun(Bt) ->
              _ = ?P:await_line(Bt, <<"Attach">>, ?P:deadline(?ATTACH_TIMEOUT)),
              ok = until_line(Poke, Bt, <<"READY">>, ?P:deadline(?ATTACH_TIMEOUT)),
              R = Run(),
              {R, stop_bpftrace(Bt)}
      end).

%% Run() with a root LTTng session recording Event (channel as the
%% bench's, this node tracked), once the session daemon has enabled the
%% event in this node (the tracer module's sink_enabled/0).
with_session_on(#{dir := Dir}, Event, M, Run) ->
    ?P:with_session(filename:join(Dir, "lttng_node_trace"), Event, [os:getpid()],
                 fun(_Session) ->
                         ok = until_true(fun M:sink_enabled/0, ?P:deadline(?ATTACH_TIMEOUT)),
                         Run()
                 end).

until_true(F, Deadline) ->
    case F() of
        true -> ok;
        false ->
            case ?P:remaining(Deadline) of
                0 -> error(sink_never_enabled);
                _ -> timer:sleep(10), until_true(F, Deadline)
            end
    end.

%% Calls Fire() until Port prints Line.
until_line(Fire, Port, Line, Deadline) ->
    _ = Fire(),
    receive
        {Port, {data, {eol, Line}}} -> ok;
        {Port, {exit_status, S}} -> error({tracer_exited, S})
    after 10 ->
            case ?P:remaining(Deadline) of
                0 -> error({no_line, Line});
                _ -> until_line(Fire, Port, Line, Deadline)
            end
    end.

%% Loads a tracer module built by build_tracer/3, its on_load reading the
%% NIF library's path from the persistent term {Module, nif}; returns it.
load_tracer(#{module := M, nif := Nif, ebin := Ebin}) ->
    persistent_term:put({M, nif}, Nif),
    case code:is_loaded(M) of
        {file, _} -> M;
        false ->
            case code:load_abs(filename:join(Ebin, atom_to_list(M))) of
                {module, M} -> M;
                Error -> error({tracer_module_not_loaded, M, Error})
            end
    end.

%% ns per message of a ping-pong of N round trips, in a fresh process and
%% its echo process, untraced (Tracer false) or both traced on `send' by
%% tracer module Tracer; both die with the run, and their trace flags
%% with them.
pingpong(Tracer, N) ->
    %% Both processes on scheduler 1, as dtrace_bench_vm's ping-pong: one core's
    %% work per message, without the other scheduler's wake-ups.
    isolated(fun() ->
                     Echo = spawn_opt(fun Loop() -> receive {From, M} -> From ! M, Loop() end end,
                                      [link, {scheduler, 1}]),
                     Me = self(),
                     Flags = [send, {tracer, Tracer, []}],
                     case Tracer of
                         false -> ok;
                         _ -> 2 = erlang:trace(Me, true, Flags) + erlang:trace(Echo, true, Flags)
                     end,
                     T0 = erlang:monotonic_time(nanosecond),
                     pingpong_loop(Echo, Me, N),
                     T = erlang:monotonic_time(nanosecond) - T0,
                     %% Still traced at the end: the tracer was not removed.
                     case Tracer of
                         false -> {flags, []} = erlang:trace_info(Echo, flags);
                         _ -> {flags, [send]} = erlang:trace_info(Echo, flags)
                     end,
                     T / (2 * N)
             end, ?RUN_TIMEOUT).

pingpong_loop(_Echo, _Me, 0) -> ok;
pingpong_loop(Echo, Me, N) -> Echo ! {Me, ping}, receive ping -> pingpong_loop(Echo, Me, N - 1) end.

%% @doc The realistic messages of `make bench' (issue #29): {Name, Label,
%% Make}, Make() making the message in the process that sends it.
-spec messages() -> [{atom(), string(), fun(() -> term())}].
messages() ->
    [{ping, "ping (an atom)", fun() -> ping end},
     {gen_call, "gen_server call {'$gen_call', {Pid, [alias | Ref]}, {get, Key}}",
      fun() -> {'$gen_call', {self(), [alias | erlang:alias()]}, {get, <<"user:12345">>}} end},
     {bin1k, "1 KB binary", fun() -> binary:copy(<<"0123456789abcdef">>, 64) end},
     {list100, "100-element list of integers", fun() -> lists:seq(1, 100) end},
     {map10, "map of 10 fields",
      fun() -> #{id => 12345, name => <<"Ada Lovelace">>, email => <<"ada@example.com">>, age => 36,
                 active => true, role => admin, created => 1732406400, score => 98.5,
                 tags => [math, engines], node => node()}
      end}].

%% @doc ns per message of a ping-pong of N round trips in which both
%% processes send message Name (messages/0) as it is, each to the other:
%% in a fresh process and its echo process, both on scheduler 1 (Pin
%% pinned, as pingpong/2) or wherever the VM runs them (unpinned: 2
%% schedulers, wake-ups across them included); untraced by a tracer module
%% (Tracer false: the dtrace library's automatic mode may trace them) or
%% both traced on `send' by tracer module Tracer.
-spec message_pingpong(module() | false, pos_integer(), atom(), pinned | unpinned) -> float().
message_pingpong(Tracer, N, Name, Pin) ->
    {Name, _, Make} = lists:keyfind(Name, 1, messages()),
    Opts = case Pin of pinned -> [{scheduler, 1}]; unpinned -> [] end,
    isolated(fun() ->
                     Me = self(),
                     Msg = Make(),
                     Echo = spawn_opt(fun() -> echo(Me) end, [link | Opts]),
                     case Tracer of
                         false -> ok;
                         _ -> Flags = [send, {tracer, Tracer, []}],
                              2 = erlang:trace(Me, true, Flags) + erlang:trace(Echo, true, Flags)
                     end,
                     T0 = erlang:monotonic_time(nanosecond),
                     message_loop(Echo, Msg, N),
                     T = erlang:monotonic_time(nanosecond) - T0,
                     unlink(Echo),
                     exit(Echo, kill),
                     T / (2 * N)
             end, Opts, ?RUN_TIMEOUT).

echo(To) -> receive M -> To ! M, echo(To) end.

message_loop(_Echo, _Msg, 0) -> ok;
message_loop(Echo, Msg, N) -> Echo ! Msg, receive _ -> message_loop(Echo, Msg, N - 1) end.

%% Fun() in a new process, with a deadline: its value, or its error
%% raised here.
isolated(Fun, Timeout) ->
    isolated(Fun, [{scheduler, 1}], Timeout).

isolated(Fun, Opts, Timeout) ->
    {Pid, Ref} = spawn_opt(fun() -> exit({done, Fun()}) end, [monitor | Opts]),
    receive
        {'DOWN', Ref, process, Pid, {done, Value}} -> Value;
        {'DOWN', Ref, process, Pid, Reason} -> error({run_failed, Reason})
    after Timeout ->
            exit(Pid, kill),
            receive {'DOWN', Ref, process, Pid, _} -> ok end,
            error(run_timeout)
    end.

%%% uprobe floor

%% @doc uprobe_floor(Paths, Form, #{}): the site in a shared library.
-spec uprobe_floor(paths(), form()) -> #{atom() => term()} | skip().
uprobe_floor(Paths, Form) ->
    uprobe_floor(Paths, Form, #{}).

%% @doc The uprobe floor, ns per hit, for the site built in Form: `n'
%% calls (1M by default) of the function holding the site, with
%% bpftrace -p attached to the driver counting the probe, and the same
%% loop with the semaphore down, alternating, `rounds' times (5 by
%% default). `where': `lib' (default), the site in a shared library the
%% driver dlopens, as a NIF's; `exe', the site linked into the driver.
%% Returns #{hit, disabled, floor (hit - disabled of each round), site (its
%% objdump line), object, rounds, n}. Needs root and bpftrace.
-spec uprobe_floor(paths(), form(),
                   #{where => lib | exe, rounds => pos_integer(), n => pos_integer()}) ->
          #{atom() => term()} | skip().
uprobe_floor(#{uprobe := {skip, _} = Skip}, _Form, _Opts) ->
    Skip;
uprobe_floor(#{uprobe := #{driver := Driver, objects := Objects, sites := Sites}}, Nop, Opts)
  when Nop =:= nop1; Nop =:= library; Nop =:= nop5 ->
    case can_trace() of
        ok ->
            Where = maps:get(where, Opts, lib),
            Rounds = max(5, maps:get(rounds, Opts, ?ROUNDS_UPROBE)),
            N = maps:get(n, Opts, ?N_HITS),
            Obj = maps:get({Where, Nop}, Objects),
            {Exe, Arg} = case Where of
                             lib -> {Driver, Obj};
                             exe -> {Obj, "-"}
                         end,
            Pairs = [{uprobe_disabled(Exe, Arg, N), uprobe_hit(Exe, Arg, Obj, N)}
                     || _ <- lists:seq(1, Rounds)],
            #{hit => stats([H || {_, H} <- Pairs]),
              disabled => stats([D || {D, _} <- Pairs]),
              floor => stats([H - D || {D, H} <- Pairs]),
              site => maps:get({Where, Nop}, Sites),
              object => Obj,
              rounds => Rounds,
              n => N};
        Skip ->
            Skip
    end.

uprobe_disabled(Exe, Arg, N) ->
    #{<<"fired">> := 0, <<"hit_ns">> := Ns} = ?P:driver(Exe, [Arg, integer_to_list(N), "nowait"]),
    Ns.

%% One run under bpftrace: the driver prints its pid once the site's object
%% is mapped, bpftrace attaches to that process, the driver sees the
%% semaphore raised and runs; bpftrace's count must cover the N hits.
uprobe_hit(Exe, Arg, Obj, N) ->
    ?P:with_port(
      ?P:open_lines(Exe, [Arg, integer_to_list(N), "wait"]),
      fun(Port) ->
              Deadline = ?P:deadline(?RUN_TIMEOUT),
              <<"pid ", Pid/binary>> = ?P:await_line(Port, <<"pid ">>, Deadline),
              Prog = "usdt:" ++ Obj ++ ":dtrace_floor:hit { @n = count(); }",
              ?P:with_port(
                ?P:open_lines(os:find_executable("bpftrace"), ["-p", binary_to_list(Pid), "-e", Prog]),
                fun(Bt) ->
                        _ = ?P:await_line(Bt, <<"Attach">>, ?P:deadline(?ATTACH_TIMEOUT)),
                        Out = ?P:key_values(?P:await_exit(Port, Deadline)),
                        #{<<"fired">> := Fired, <<"hit_ns">> := Ns} = Out,
                        Fired =:= N orelse error({hits_not_fired, Fired, N}),
                        Count = stop_bpftrace(Bt),
                        Count >= N orelse error({bpftrace_counted, Count, N}),
                        Ns
                end)
      end).

%% Stops bpftrace (SIGINT, as the bench does) and returns its count @n.
stop_bpftrace(Bt) ->
    Lines = ?P:interrupt(Bt),
    case [binary_to_integer(C) || <<"@n: ", C/binary>> <- Lines] of
        [Count] -> Count;
        [] -> 0
    end.

%% @doc ok when bpftrace can attach here (installed, root), else {skip, Why}.
-spec can_trace() -> ok | skip().
can_trace() ->
    case {os:find_executable("bpftrace"), string:trim(os:cmd("id -u"))} of
        {false, _} -> {skip, "bpftrace is not installed"};
        {_, "0"} -> ok;
        _ -> {skip, "attaching bpftrace needs root"}
    end.

%%% uprobe floor under perf, at any offset of the site

%% @doc perf_uprobe_floor(Paths, Form, Offset, #{}).
-spec perf_uprobe_floor(paths(), form(), non_neg_integer()) -> #{atom() => term()} | skip().
perf_uprobe_floor(Paths, Form, Offset) ->
    perf_uprobe_floor(Paths, Form, Offset, #{}).

%% @doc The uprobe floor under perf, ns per hit, for a uprobe defined by
%% hand (tracefs) Offset bytes into the site of Form, where a tracer that
%% knows the form would place it (the library's nop10 is at +1): `n' calls
%% (1M by default) of the driver with the site linked in, its semaphore
%% raised by the driver itself (a hand-made uprobe raises none), counted
%% by `perf stat', against the same run with no uprobe enabled,
%% alternating, `rounds' times (5 by default). Returns #{hit, untraced,
%% floor, hits (perf's counts, per round), rounds, n}; or
%% #{refused := Why} when the kernel takes no hit there: 6.18 refuses a
%% probe on the nop10 (its `cs' prefix), as a kernel that does not
%% optimize that instruction does. Needs root, perf and tracefs.
-spec perf_uprobe_floor(paths(), form(), non_neg_integer(), #{rounds => pos_integer(), n => pos_integer()}) ->
          #{atom() => term()} | skip().
perf_uprobe_floor(#{uprobe := {skip, _} = Skip}, _Form, _Offset, _Opts) ->
    Skip;
perf_uprobe_floor(#{uprobe := #{objects := Objects, locations := Locations}}, Form, Offset, Opts) ->
    Events = "/sys/kernel/tracing/uprobe_events",
    case {os:find_executable("perf"), string:trim(os:cmd("id -u")), filelib:is_regular(Events)} of
        {false, _, _} -> {skip, "perf is not installed"};
        {_, U, _} when U =/= "0" -> {skip, "a uprobe needs root"};
        {_, _, false} -> {skip, "no tracefs at /sys/kernel/tracing (scripts/tracefs.sh)"};
        {Perf, _, true} ->
            Exe = maps:get({exe, Form}, Objects),
            At = maps:get({exe, Form}, Locations) + Offset,
            Name = "dtrace_floors/site" ++ integer_to_list(Offset),
            Event = "dtrace_floors:site" ++ integer_to_list(Offset),
            Def = lists:flatten(io_lib:format("p:~s ~s:0x~.16b", [Name, Exe, dtrace_floors_build:file_offset(Exe, At)])),
            _ = file:write_file(Events, "-:" ++ Name ++ "\n", [append]),
            ok = file:write_file(Events, Def ++ "\n", [append]),
            try
                Rounds = max(5, maps:get(rounds, Opts, ?ROUNDS_UPROBE)),
                N = maps:get(n, Opts, ?N_HITS),
                Plain = fun() ->
                                #{<<"hit_ns">> := Ns} = ?P:driver(Exe, ["-", integer_to_list(N), "raised"]),
                                Ns
                        end,
                Traced = fun() -> perf_stat(Perf, Event, Exe, N) end,
                case Traced() of
                    {_, 0} ->
                        #{refused => lists:flatten(io_lib:format("none of ~b calls hit a uprobe at +~b (~s)",
                                                                 [N, Offset, Def]))};
                    _ ->
                        Pairs = [{Plain(), Traced()} || _ <- lists:seq(1, Rounds)],
                        #{hit => stats([H || {_, {H, _}} <- Pairs]),
                          untraced => stats([P || {P, _} <- Pairs]),
                          floor => stats([H - P || {P, {H, _}} <- Pairs]),
                          hits => [C || {_, {_, C}} <- Pairs],
                          rounds => Rounds, n => N}
                end
            after
                file:write_file(Events, "-:" ++ Name ++ "\n", [append])
            end
    end.

%% One raised run of Exe under `perf stat -e Event': {ns per call, perf's
%% count}.
perf_stat(Perf, Event, Exe, N) ->
    Lines = ?P:with_port(?P:open_lines(Perf, ["stat", "-x", ",", "-e", Event, "--", Exe, "-", integer_to_list(N),
                                              "raised"]),
                         fun(Port) -> ?P:await_exit(Port, ?P:deadline(?RUN_TIMEOUT)) end),
    #{<<"hit_ns">> := Ns} = ?P:key_values([L || L <- Lines, binary:match(L, <<",">>) =:= nomatch]),
    [Count] = [binary_to_integer(C) || L <- Lines, [C, _, E | _] <- [binary:split(L, <<",">>, [global])],
                                       E =:= list_to_binary(Event)],
    {Ns, Count}.

%%% uprobe floor inside the node

%% @doc node_uprobe_floor(Paths, Form, #{}).
-spec node_uprobe_floor(paths(), form()) -> #{atom() => term()} | skip().
node_uprobe_floor(Paths, Nop) ->
    node_uprobe_floor(Paths, Nop, #{}).

%% @doc The uprobe floor in this node, ns per hit: `n' calls (1M by
%% default) of dtrace_floor_site_<Form>:hit/0, a NIF whose site is a bare
%% sys/sdt.h site in its library (floor_site_nif.c), with bpftrace -p on
%% this node counting it, and the same loop with the semaphore down,
%% alternating, `rounds' times (5 by default). The hit is what a NIF's
%% probe pays on a scheduler thread of this VM. Returns #{hit, disabled,
%% floor (hit - disabled of each round), site, rounds, n}. Needs root and
%% bpftrace.
-spec node_uprobe_floor(paths(), form(), #{rounds => pos_integer(), n => pos_integer()}) ->
          #{atom() => term()} | skip().
node_uprobe_floor(#{node_site := {skip, _} = Skip}, _Form, _Opts) ->
    Skip;
node_uprobe_floor(#{node_site := Sites}, Nop, Opts) when Nop =:= nop1; Nop =:= library; Nop =:= nop5 ->
    case can_trace() of
        ok ->
            #{module := M, nif := Nif, ebin := Ebin, site := Site} = maps:get(Nop, Sites),
            persistent_term:put({M, nif}, Nif),
            {module, M} = code:load_abs(filename:join(Ebin, atom_to_list(M))),
            Rounds = max(5, maps:get(rounds, Opts, ?ROUNDS_UPROBE)),
            N = maps:get(n, Opts, ?N_HITS),
            Loop = fun() -> isolated(fun() -> node_loop(M, N) end, ?RUN_TIMEOUT) end,
            false = M:hit(),
            _ = Loop(),
            Pairs = [{Loop(), node_hit(M, Nif ++ ".so", Loop, N)} || _ <- lists:seq(1, Rounds)],
            #{hit => stats([H || {_, H} <- Pairs]),
              disabled => stats([D || {D, _} <- Pairs]),
              floor => stats([H - D || {D, H} <- Pairs]),
              site => Site,
              rounds => Rounds,
              n => N};
        Skip ->
            Skip
    end.

%% ns per call of N calls of M:hit() (through a fun, as the bench's rows).
node_loop(M, N) ->
    F = fun M:hit/0,
    T0 = erlang:monotonic_time(nanosecond),
    node_loop(F, N, 0),
    (erlang:monotonic_time(nanosecond) - T0) / N.

node_loop(_F, 0, Trues) -> Trues;
node_loop(F, N, Trues) -> node_loop(F, N - 1, case F() of true -> Trues + 1; false -> Trues end).

%% One run of Loop() under bpftrace on this node, counting the site of
%% library So (with_site_counted/4): bpftrace must count all N hits of the
%% run.
node_hit(M, So, Loop, N) ->
    {Ns, Count} = with_site_counted(So, M, fun M:hit/0, Loop),
    Count >= N orelse error({bpftrace_counted, Count, N}),
    Ns.

%%% Floors apart and together

%% @doc Why the trap of a bare site costs more inside the ping-pong's
%% tracer callback than in a tight loop (issue #29): the hit of the
%% in-node site of the library's form (bpftrace counting it, minus the semaphore
%% down), ns per hit, in three contexts:
%% - `loop': hit/0 in a tight loop (node_uprobe_floor/2's floor);
%% - `{touch, Bytes}': each hit after writing one byte of each 64-byte
%%   line of a Bytes buffer (hit_touching/1), as work between hits does;
%% - `pingpong': hit/0 called by the ping-pong's sender before each send
%%   (the pingpong/2 shape, no tracer module): the trap between the VM's
%%   own work, but not inside an erl_tracer callback.
%% Returns [{Context, #{hit, disabled, floor}}] or a skip.
-spec apart_together(paths()) -> [{term(), #{atom() => stats()}}] | skip().
apart_together(#{node_site := {skip, _} = Skip}) ->
    Skip;
apart_together(#{node_site := #{library := #{module := M, nif := Nif, ebin := Ebin}}}) ->
    case can_trace() of
        ok ->
            persistent_term:put({M, nif}, Nif),
            {module, M} = case code:is_loaded(M) of
                              {file, _} -> {module, M};
                              false -> code:load_abs(filename:join(Ebin, atom_to_list(M)))
                          end,
            So = Nif ++ ".so",
            N = ?N_HITS div 4,
            %% About 0.3 s a run: a line written costs about 1 ns.
            Touch = fun(Bytes) ->
                            K = min(N, 300000000 div (200 + Bytes div 64)),
                            fun() -> isolated(fun() -> touch_loop(M, Bytes, K) end, ?RUN_TIMEOUT) end
                    end,
            PingPong = fun() -> isolated(fun() -> hit_pingpong(M, N) end, ?RUN_TIMEOUT) end,
            Contexts = [{loop, fun() -> isolated(fun() -> node_loop(M, N) end, ?RUN_TIMEOUT) end, N}]
                ++ [{{touch, B}, Touch(B), min(N, 300000000 div (200 + B div 64))}
                    || B <- [0, 32 bsl 10, 256 bsl 10, 1 bsl 20]]
                ++ [{pingpong, PingPong, N}],
            [begin
                 _ = Run(),
                 Pairs = [{Run(), begin
                                      {Ns, Count} = with_site_counted(So, M, fun M:hit/0, Run),
                                      Count >= Hits orelse error({bpftrace_counted, C, Count, Hits}),
                                      Ns
                                  end}
                          || _ <- lists:seq(1, ?ROUNDS_UPROBE)],
                 {C, #{hit => stats([H || {_, H} <- Pairs]), disabled => stats([D || {D, _} <- Pairs]),
                       floor => stats([H - D || {D, H} <- Pairs])}}
             end || {C, Run, Hits} <- Contexts];
        Skip ->
            Skip
    end.

%% ns per call of N calls of M:hit_touching(Bytes).
touch_loop(M, Bytes, N) ->
    T0 = erlang:monotonic_time(nanosecond),
    touch_loop_(M, Bytes, N),
    (erlang:monotonic_time(nanosecond) - T0) / N.

touch_loop_(_M, _Bytes, 0) -> ok;
touch_loop_(M, Bytes, N) -> _ = M:hit_touching(Bytes), touch_loop_(M, Bytes, N - 1).

%% ns per round trip of a ping-pong of N round trips (pingpong/2's, both on
%% scheduler 1, untraced) whose sender calls M:hit() before each send.
hit_pingpong(M, N) ->
    Echo = spawn_opt(fun Loop() -> receive {From, Msg} -> From ! Msg, Loop() end end, [link, {scheduler, 1}]),
    Me = self(),
    T0 = erlang:monotonic_time(nanosecond),
    hit_pingpong_loop(M, Echo, Me, N),
    T = erlang:monotonic_time(nanosecond) - T0,
    unlink(Echo),
    exit(Echo, kill),
    T / N.

hit_pingpong_loop(_M, _Echo, _Me, 0) -> ok;
hit_pingpong_loop(M, Echo, Me, N) ->
    _ = M:hit(),
    Echo ! {Me, ping},
    receive ping -> hit_pingpong_loop(M, Echo, Me, N - 1) end.

%%% LTTng floor

%% @doc lttng_floor(Paths, Event, #{}).
-spec lttng_floor(paths(), message_send | i4s4) -> #{atom() => term()} | skip().
lttng_floor(Paths, Event) ->
    lttng_floor(Paths, Event, #{}).

%% @doc The LTTng floor, ns per event, for the layout of Event
%% (message_send: OTP's org_erlang_dyntrace:message_send; i4s4: the
%% library's org_erlang_dtrace:user_trace_i4s4): `n' events (1M by
%% default) fired by the driver with a root session recording them
%% (channel as the bench's: 8 x 8 MiB sub-buffers, discard mode), and the
%% same loop with no session, alternating, `rounds' times (7 by default).
%% A session is created and destroyed around each recorded run. Returns
%% #{recording, no_session, floor (recording - no_session of each round),
%% discarded (what `lttng stop' said about discarded events, per round),
%% rounds, n}. Needs root and lttng-tools.
-spec lttng_floor(paths(), message_send | i4s4, #{rounds => pos_integer(), n => pos_integer()}) ->
          #{atom() => term()} | skip().
lttng_floor(#{lttng := {skip, _} = Skip}, _Event, _Opts) ->
    Skip;
lttng_floor(#{dir := Dir, lttng := #{driver := Driver}}, Event, Opts)
  when Event =:= message_send; Event =:= i4s4 ->
    case ?P:can_lttng() of
        ok ->
            Rounds = max(5, maps:get(rounds, Opts, ?ROUNDS_LTTNG)),
            N = maps:get(n, Opts, ?N_EVENTS),
            Args = [atom_to_list(Event), integer_to_list(N)],
            Tp = case Event of
                     message_send -> "dtrace_floor:message_send";
                     i4s4 -> "dtrace_floor:user_trace_i4s4"
                 end,
            Runs = [{lttng_off(Driver, Args), lttng_on(Driver, Args, Tp, Dir, N)}
                    || _ <- lists:seq(1, Rounds)],
            #{recording => stats([R || {_, {R, _}} <- Runs]),
              no_session => stats([O || {O, _} <- Runs]),
              floor => stats([R - O || {O, {R, _}} <- Runs]),
              discarded => [D || {_, {_, D}} <- Runs],
              rounds => Rounds,
              n => N};
        Skip ->
            Skip
    end.

lttng_off(Driver, Args) ->
    #{<<"recorded">> := 0, <<"event_ns">> := Ns} = ?P:driver(Driver, Args ++ ["nowait"]),
    Ns.

%% One recorded run: {ns per event, what `lttng stop' said of discarded
%% events ("none")}. The session is destroyed and its trace deleted
%% whatever happens.
lttng_on(Driver, Args, Tp, Dir, N) ->
    ?P:with_session(filename:join(Dir, "lttng_trace"), Tp, [],
                 fun(Session) ->
                         #{<<"recorded">> := Recorded, <<"event_ns">> := Ns} = ?P:driver(Driver, Args ++ ["wait"]),
                         Recorded =:= N orelse error({events_not_recorded, Recorded, N}),
                         {0, Stop} = ?P:lttng(["stop", Session]),
                         Discarded = [string:trim(L) || L <- string:split(Stop, "\n", all),
                                                        string:find(L, "discarded") =/= nomatch],
                         {Ns, case Discarded of [] -> "none"; _ -> lists:flatten(lists:join(" ", Discarded)) end}
                 end).

%%% All of them

%% @doc Every floor, as [{Name, Result}]: the erl_tracer floor, the uprobe
%% floor for each site form in a library and in the executable, the LTTng
%% floor for both layouts. Each Result as its function returns it.
-spec all(paths()) -> [{atom(), term()}].
all(Paths) ->
    [{tracer, tracer_floor(Paths)}]
    ++ [{list_to_atom("uprobe_" ++ atom_to_list(W) ++ "_" ++ atom_to_list(F)), uprobe_floor(Paths, F, #{where => W})}
        || W <- [lib, exe], F <- dtrace_floors_build:forms()]
    ++ [{lttng_message_send, lttng_floor(Paths, message_send)},
     {lttng_i4s4, lttng_floor(Paths, i4s4)}].

%% {Median, Min, Max}, as dtrace_bench's stats/1.
stats(Xs) ->
    S = lists:sort(Xs),
    {lists:nth((length(S) + 1) div 2, S), hd(S), lists:last(S)}.
