%%% The LTTng-UST sink, with real LTTng sessions on real nodes, read back
%%% with babeltrace2.
%%%
%%% - Group `otp': OTP's own LTTng test cases (runtime_tools'
%%%   dyntrace_lttng_SUITE), on a stock VM: `{tracer, dyntrace, []}' set by
%%%   hand, OTP's `org_erlang_dyntrace' events, here with their fields
%%%   checked, not only their names.
%%% - Group `auto': the same workloads with nothing set by hand: the
%%%   dtrace application sets trace flags because a session records an
%%%   event, and takes them off when the session ends.
%%% - Group `user': the user and file probes as `org_erlang_dtrace' events,
%%%   every field, exact counts under load, and both sinks at once.
%%% - Group `absent': without liblttng-ust, or with the sink turned off, the
%%%   SDT probes work alone.
%%%
%%% The groups run one after the other: sessions are global to the machine.
-module(dtrace_lttng_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").
-include_lib("proper/include/proper.hrl").

-export([all/0, groups/0, suite/0, init_per_suite/1, end_per_suite/1,
         init_per_group/2, end_per_group/2, init_per_testcase/2, end_per_testcase/2]).
-export([procs/1, ports/1, running_process/1, running_port/1, call/1, call_return_to/1,
         call_silent/1, send/1, 'receive'/1, garbage_collection/1, all_flags/1,
         flags_follow_the_session/1, message_texts/1,
         user_probe_fields/1, exact_counts_under_load/1, file_probes/1, both_sinks_at_once/1,
         without_liblttng_ust/1, turned_off/1]).
%% Run in the traced peer.
-export([waiter/0, gcfier/1, foo_clause_exception/1, wait_auto_flags/2, printf_t/1]).

suite() ->
    [{timetrap, {minutes, 3}}].

all() ->
    [{group, otp}, {group, auto}, {group, user}, {group, absent}].

groups() ->
    Otp = [procs, ports, running_process, running_port, call, call_return_to, call_silent,
           send, 'receive', garbage_collection, all_flags],
    [{otp, [], Otp},
     {auto, [], [flags_follow_the_session, message_texts | Otp -- [call_return_to, call_silent]]},
     {user, [], [user_probe_fields, exact_counts_under_load, file_probes, both_sinks_at_once]},
     {absent, [], [without_liblttng_ust, turned_off]}].

init_per_suite(Config) ->
    case dtrace_test_lttng:require() of
        ok ->
            %% The library must have been built with the sink, and load it
            %% here; in CI anything else is a failure.
            Peer = dtrace_test_peer:start_peer(),
            Sinks = peer:call(Peer, dtrace, sinks, []),
            dtrace_test_peer:stop_peer(Peer),
            dtrace_test_lttng:require_sink(Sinks, Config);
        Skip ->
            Skip
    end.

end_per_suite(_Config) ->
    ok.

init_per_group(absent, Config) ->
    [{mode, none} | Config];
init_per_group(Group, Config) ->
    [{mode, Group} | Config].

end_per_group(_Group, _Config) ->
    ok.

init_per_testcase(TC, Config) when TC =:= without_liblttng_ust; TC =:= turned_off ->
    Config;
init_per_testcase(TC, Config) ->
    Peer = dtrace_test_peer:start_peer(),
    case ?config(mode, Config) of
        otp ->
            %% OTP's way: the dyntrace tracer module, set by hand.
            ok = peer:call(Peer, application, load, [dtrace]),
            ok = peer:call(Peer, application, set_env, [dtrace, vm_probes, manual]),
            {ok, _} = peer:call(Peer, application, ensure_all_started, [dtrace]),
            true = peer:call(Peer, dtrace_compat, installed, []);
        _ ->
            {ok, _} = peer:call(Peer, application, ensure_all_started, [dtrace])
    end,
    Name = atom_to_list(?config(mode, Config)) ++ "_" ++ atom_to_list(TC),
    [{peer, Peer}, {session, Name} | Config].

end_per_testcase(_TC, Config) ->
    _ = [dtrace_test_lttng:destroy(N) || N <- [?config(session, Config)], N =/= undefined],
    _ = [dtrace_test_peer:stop_peer(P) || P <- [?config(peer, Config)], P =/= undefined],
    ok.

in_peer(Config, Fun) ->
    peer:call(?config(peer, Config), erlang, apply, [Fun, []], 120000).

%% Starts a session recording Events in the peer and waits until the peer
%% knows (the names in Wait, as dtrace_nif:vm_listening/0 gives them).
session(Config, Events, Wait) ->
    session(Config, Events, Wait, []).

session(Config, Events, Wait, Opts) ->
    Track = [{vpid, dtrace_test_peer:os_pid(?config(peer, Config))}],
    S = dtrace_test_lttng:start(?config(session, Config), ?config(priv_dir, Config), Events, Track ++ Opts),
    ok = dtrace_test_lttng:wait_listening(?config(peer, Config), Wait),
    S.

%% Sets Flags by hand (group otp) or waits for dtrace_vm to set them
%% (group auto), runs Workload in the peer, and takes the flags off. By
%% hand, the flags are set on new processes and ports (as in OTP's
%% suite), and Workload runs in a process spawned after that, so that
%% every process of the workload is traced.
traced(Config, Flags, Workload) ->
    case ?config(mode, Config) of
        otp ->
            in_peer(Config, fun() ->
                                    _ = erlang:trace(new, true, [{tracer, dyntrace, []} | Flags]),
                                    Self = self(),
                                    {Runner, Ref} = spawn_monitor(fun() -> Self ! {self(), Workload()} end),
                                    R = receive {Runner, Result} -> Result end,
                                    receive {'DOWN', Ref, _, _, _} -> ok end,
                                    _ = erlang:trace(all, false, Flags),
                                    R
                            end);
        auto ->
            in_peer(Config, fun() -> ok = ?MODULE:wait_auto_flags(Flags, 5000), Workload() end)
    end.

%% In the peer: waits until dtrace_vm has set Flags (trace flags of
%% processes or, for ports and running_ports, of ports).
wait_auto_flags(Flags, Ms) ->
    {PortFlags, ProcFlags} = lists:partition(fun(F) -> F =:= ports orelse F =:= running_ports end, Flags),
    wait_auto_flags(ProcFlags, PortFlags, erlang:monotonic_time(millisecond) + Ms).

wait_auto_flags(ProcFlags, PortFlags, Deadline) ->
    %% After a poll, the status shows the flags set on the processes and
    %% ports that exist and on new ones.
    ok = dtrace_vm:sync(),
    #{flags := #{processes := Procs, ports := Ports}} = Status = dtrace:vm_probes(),
    case {ProcFlags -- Procs, PortFlags -- Ports} of
        {[], []} ->
            ok;
        _ ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true -> {timeout, Status};
                false -> timer:sleep(10), wait_auto_flags(ProcFlags, PortFlags, Deadline)
            end
    end.

read(S) ->
    {Events, Warnings} = dtrace_test_lttng:stop_and_read(S),
    ct:log("~p events; babeltrace2 also said: ~p", [length(Events), Warnings]),
    Events.

%% The events named Name whose fields match every pair of Want.
find(Name, Want, Events) ->
    N = <<"org_erlang_dyntrace:", (atom_to_binary(Name))/binary>>,
    [F || {E, F} <- Events, E =:= N,
          lists:all(fun({K, V}) -> maps:get(atom_to_binary(K), F, undefined) =:= bin(V) end, Want)].

bin(V) when is_integer(V) -> V;
bin(V) when is_pid(V); is_port(V) -> list_to_binary(io_lib:format("~w", [V]));
bin(V) when is_atom(V) -> atom_to_binary(V);
bin(V) -> iolist_to_binary(V).

%% Exactly N events Name with fields Want.
count(N, Name, Want, Events) ->
    case find(Name, Want, Events) of
        Found when length(Found) =:= N -> ok;
        Found -> ct:fail("~b ~p events with ~p, not ~b: ~p", [length(Found), Name, Want, N, Found])
    end.

%% At least one event Name with fields Want.
has(Name, Want, Events) ->
    case find(Name, Want, Events) of
        [] ->
            Same = [F || {E, F} <- Events, E =:= <<"org_erlang_dyntrace:", (atom_to_binary(Name))/binary>>],
            ct:fail("no ~p event with ~p among ~p ~p events: ~p",
                    [Name, Want, length(Same), Name, lists:sublist(Same, 20)]);
        [_ | _] ->
            ok
    end.

%%--------------------------------------------------------------------
%% Workloads (OTP's, in the peer), returning the pids to look for.

%% A registered process that spawns, links and unlinks a child and
%% unregisters; it returns {Self, Waiter, Child}.
procs_workload() ->
    Self = self(),
    Pid = spawn_link(fun ?MODULE:waiter/0),
    %% Let it wait in its receive: it is scheduled out there.
    %% process_info(Pid, status) of a waiting process does not schedule it
    %% (no in/out trace events, seen on OTP 25 and 27).
    ok = dtrace_test_workload:wait_until(
           fun() -> erlang:process_info(Pid, status) =:= {status, waiting} end, 5000),
    Pid ! {Self, ok},
    Child = receive {Pid, ok, C} -> C end,
    %% Their exit events come before their 'DOWN' messages.
    ok = wait_exited([Pid, Child]),
    {Self, Pid, Child}.

waiter() ->
    true = register(?MODULE, self()),
    receive
        {Pid, ok} ->
            Child = spawn(fun() -> receive ok -> ok end end),
            link(Child),
            unlink(Child),
            _ = lists:seq(1, 1000),
            Child ! ok,
            true = unregister(?MODULE),
            Pid ! {self(), ok, Child}
    end.

%% A port that runs `true' and exits: {Owner, Port}.
port_workload() ->
    Self = self(),
    Owner = spawn(fun() ->
                          Port = open_port({spawn, "true"}, [exit_status]),
                          receive {Port, {exit_status, 0}} -> ok end,
                          Self ! {self(), Port}
                  end),
    receive {Owner, Port} -> ok end,
    ok = wait_exited([Owner]),
    ok = dtrace_test_workload:wait_until(fun() -> erlang:port_info(Port) =:= undefined end, 5000),
    {Owner, Port}.

gcfier(N) ->
    receive
        {Pid, ok} ->
            _ = lists:reverse(lists:seq(1, N)),
            true = erlang:garbage_collect(),
            Pid ! {self(), ok}
    end.

gc_workload(N) ->
    Pid = spawn_link(fun() -> ?MODULE:gcfier(N) end),
    Pid ! {self(), ok},
    receive {Pid, ok} -> ok end,
    ok = wait_exited([Pid]),
    Pid.

%% Waits until the processes Pids have exited (a monitor's 'DOWN').
wait_exited(Pids) ->
    Refs = [{erlang:monitor(process, P), P} || P <- Pids],
    [receive {'DOWN', R, process, P, _} -> ok after 10000 -> error({still_alive, P}) end || {R, P} <- Refs],
    ok.

foo_clause_exception({1, 2}) -> badness.

%%--------------------------------------------------------------------

procs(Config) ->
    S = session(Config, ["org_erlang_dyntrace:process_*"],
                ["org_erlang_dyntrace:process_spawn", "org_erlang_dyntrace:process_exit",
                 "org_erlang_dyntrace:process_link", "org_erlang_dyntrace:process_register"]),
    {Self, Pid, Child} = traced(Config, [procs], fun procs_workload/0),
    Events = read(S),
    Apply = <<"erlang:apply/2">>,
    count(1, process_spawn, [{pid, Pid}, {parent, Self}, {entry, Apply}], Events),
    count(1, process_spawn, [{pid, Child}, {parent, Pid}, {entry, Apply}], Events),
    count(1, process_register, [{pid, Pid}, {name, ?MODULE}, {type, register}], Events),
    count(1, process_register, [{pid, Pid}, {name, ?MODULE}, {type, unregister}], Events),
    %% Once from each end (link and getting_linked), both named as OTP
    %% names them: from the linking process to the other.
    count(2, process_link, [{from, Pid}, {to, Child}, {type, link}], Events),
    count(2, process_link, [{from, Pid}, {to, Child}, {type, unlink}], Events),
    count(1, process_exit, [{pid, Child}, {reason, normal}], Events),
    count(1, process_exit, [{pid, Pid}, {reason, normal}], Events).

ports(Config) ->
    S = session(Config, ["org_erlang_dyntrace:port_*"],
                ["org_erlang_dyntrace:port_open", "org_erlang_dyntrace:port_exit",
                 "org_erlang_dyntrace:port_link"]),
    {Owner, Port} = traced(Config, [ports], fun port_workload/0),
    Events = read(S),
    count(1, port_open, [{pid, Owner}, {driver, "true"}, {port, Port}], Events),
    %% OTP names the process first for getting_linked (dyntrace.c).
    count(1, port_link, [{from, Owner}, {to, Port}, {type, link}], Events),
    count(1, port_exit, [{port, Port}, {reason, normal}], Events).

running_process(Config) ->
    S = session(Config, ["org_erlang_dyntrace:process_scheduled"],
                ["org_erlang_dyntrace:process_scheduled"]),
    {_, Pid, _} = traced(Config, [running], fun procs_workload/0),
    Events = read(S),
    has(process_scheduled, [{pid, Pid}, {type, in}], Events),
    has(process_scheduled, [{pid, Pid}, {type, out}], Events),
    %% Scheduled out in the receive of waiter/0.
    count(1, process_scheduled, [{pid, Pid}, {type, out}, {entry, "dtrace_lttng_SUITE:waiter/0"}], Events).

running_port(Config) ->
    S = session(Config, ["org_erlang_dyntrace:port_scheduled"], ["org_erlang_dyntrace:port_scheduled"]),
    {_, Port} = traced(Config, [running_ports], fun port_workload/0),
    Events = read(S),
    has(port_scheduled, [{pid, Port}, {type, in}], Events),
    has(port_scheduled, [{pid, Port}, {type, out}], Events).

call(Config) ->
    S = session(Config, ["org_erlang_dyntrace:function_*"],
                ["org_erlang_dyntrace:function_call", "org_erlang_dyntrace:function_return",
                 "org_erlang_dyntrace:function_exception"]),
    Workload = fun() ->
                       Dont = spawn(fun() -> ?MODULE:foo_clause_exception(nope) end),
                       {_, Pid, _} = procs_workload(),
                       undefined = erlang:process_info(Dont),
                       {Dont, Pid}
               end,
    {Dont, Pid} =
        case ?config(mode, Config) of
            otp ->
                traced(Config, [call],
                       fun() ->
                               _ = erlang:trace_pattern({?MODULE, '_', '_'},
                                                        [{'_', [], [{exception_trace}]}], [local]),
                               R = Workload(),
                               _ = erlang:trace_pattern({?MODULE, '_', '_'}, false, [local]),
                               R
                       end);
            auto ->
                ok = peer:call(?config(peer, Config), dtrace, function_probes,
                               [[{?MODULE, '_', '_', local}]]),
                traced(Config, [call], Workload)
        end,
    Events = read(S),
    Foo = "dtrace_lttng_SUITE:foo_clause_exception/1",
    count(1, function_call, [{pid, Dont}, {entry, Foo}, {depth, 0}], Events),
    count(1, function_exception, [{pid, Dont}, {entry, Foo}, {class, error}], Events),
    count(1, function_call, [{pid, Pid}, {entry, "dtrace_lttng_SUITE:waiter/0"}], Events),
    count(1, function_return, [{pid, Pid}, {entry, "dtrace_lttng_SUITE:waiter/0"}, {depth, 0}], Events).

%% return_to names no OTP event (OTP's dyntrace ignores it): the calls
%% are there, and no function_return without return_from.
call_return_to(Config) ->
    S = session(Config, ["org_erlang_dyntrace:function_*"],
                ["org_erlang_dyntrace:function_call", "org_erlang_dyntrace:function_return"]),
    Pid = traced(Config, [call, return_to],
                 fun() ->
                         _ = erlang:trace_pattern({lists, '_', '_'}, true, [local]),
                         _ = erlang:trace_pattern({?MODULE, '_', '_'}, true, [local]),
                         P = gc_workload(10),
                         _ = erlang:trace_pattern({?MODULE, '_', '_'}, false, [local]),
                         _ = erlang:trace_pattern({lists, '_', '_'}, false, [local]),
                         P
                 end),
    Events = read(S),
    count(1, function_call, [{pid, Pid}, {entry, "lists:seq/2"}], Events),
    count(1, function_call, [{pid, Pid}, {entry, "lists:reverse/1"}], Events),
    ?assertEqual([], find(function_return, [{pid, Pid}], Events)).

call_silent(Config) ->
    S = session(Config, ["org_erlang_dyntrace:function_*"],
                ["org_erlang_dyntrace:function_call", "org_erlang_dyntrace:function_return",
                 "org_erlang_dyntrace:function_exception"]),
    {Dont, Pid} = traced(Config, [call, silent],
                         fun() ->
                                 _ = erlang:trace_pattern({?MODULE, '_', '_'},
                                                          [{'_', [], [{exception_trace}]}], [local]),
                                 Dont = spawn(fun() -> ?MODULE:foo_clause_exception(nope) end),
                                 {_, P, _} = procs_workload(),
                                 _ = erlang:trace_pattern({?MODULE, '_', '_'}, false, [local]),
                                 {Dont, P}
                         end),
    Events = read(S),
    Ours = [E || {E, F} <- Events, lists:member(maps:get(<<"pid">>, F, none), [bin(Dont), bin(Pid)])],
    ?assertEqual([], Ours).

%% message_send's message is the term as erts_printf's `%.*T' writes it
%% with the library's precision (printf_t/1, a model of it), cut to 255
%% bytes: for 300 terms PropEr makes of atoms (quoted ones too), small
%% integers, `[]', pids and ports, and tuples of them, flat (the library
%% puts their text together from the cached texts of their elements) or
%% nested, long and cut (written by the VM's formatter).
message_texts(Config) ->
    Shapes = [T || _ <- lists:seq(1, 300), {ok, T} <- [proper_gen:pick(shape(), 6)]]
        ++ [list_to_tuple(lists:duplicate(N, 'a rather long atom that needs quotes, 40b')) || N <- [1, 2, 3, 9]]
        ++ [{a, list_to_atom(lists:duplicate(70, $x))}, list_to_atom(lists:duplicate(70, $y)),
            {lists:duplicate(60, $z), b}],
    S = session(Config, ["org_erlang_dyntrace:message_send"], ["org_erlang_dyntrace:message_send"]),
    {Sender, Sink, Want} =
        in_peer(Config,
                fun() ->
                        ok = ?MODULE:wait_auto_flags([send], 5000),
                        Port = hd(erlang:ports()),
                        Terms = [fill(T, self(), Port) || T <- Shapes],
                        Sink = spawn(fun dtrace_test_workload:sink/0),
                        [Sink ! T || T <- Terms],
                        Sink ! stop,
                        {self(), Sink, [printf_t(T) || T <- Terms ++ [stop]]}
                end),
    Events = read(S),
    Got = [maps:get(<<"message">>, F) || {<<"org_erlang_dyntrace:message_send">>, F} <- Events,
                                         maps:get(<<"from">>, F) =:= bin(Sender),
                                         maps:get(<<"to">>, F) =:= bin(Sink)],
    ?assertEqual([], [{W, G} || {W, G} <- lists:zip(Want, Got), W =/= G]),
    ?assertEqual(length(Want), length(Got)).

%% What erts_printf's `%.*T' writes with the library's precision, 64
%% (erts/emulator/beam/erl_printf_term.c), for the shapes of shape/0: each
%% term spends 1 of the precision, each atom also its name's length; a
%% term is written only while precision is left before it (the comma
%% before an element comes first), an atom whole; once spent, nothing more is
%% written (no closing brace either), and `... ' ends the text. Cut to 255
%% bytes, the buffer.
printf_t(T) ->
    {Out, D, _} = pt(T, 64),
    Text = iolist_to_binary([Out, [<<"... ">> || D =< 0]]),
    binary:part(Text, 0, min(255, byte_size(Text))).

pt(_T, D) when D =< 0 ->
    {[], D - 1, stop};
pt(T, D) when is_tuple(T) ->
    case pt_elements(tuple_to_list(T), D - 1, []) of
        {Out, D1, go} -> {["{", Out, "}"], D1, go};
        {Out, D1, stop} -> {["{", Out], D1, stop}
    end;
pt(T, D) when is_atom(T) ->
    %% Written whole; nothing more once that spent the precision.
    D1 = D - 1 - byte_size(atom_to_binary(T)),
    {io_lib:format("~w", [T]), D1, if D1 =< 0 -> stop; true -> go end};
pt(T, D) when is_list(T), T =/= [] ->
    %% A printable string: 1 per character.
    {Chars, D1} = lists:foldl(fun(C, {Acc, Dc}) when Dc > 0 -> {[C | Acc], Dc - 1};
                                 (_, {Acc, Dc}) -> {Acc, Dc}
                              end, {[], D - 1}, T),
    case length(Chars) =:= length(T) of
        true -> {[$", lists:reverse(Chars), $"], D1, go};
        false -> {[$", lists:reverse(Chars)], D1 - 1, stop}
    end;
pt(T, D) ->
    {io_lib:format("~w", [T]), D - 1, go}.

pt_elements([], D, Acc) ->
    {lists:reverse(Acc), D, go};
pt_elements([E | Es], D, Acc) ->
    Sep = [$, || Acc =/= []],
    case pt(E, D) of
        {[], D1, stop} -> {lists:reverse([Sep | Acc]), D1, stop};
        {Out, D1, stop} -> {lists:reverse([[Sep, Out] | Acc]), D1, stop};
        {Out, D1, go} -> pt_elements(Es, D1, [[Sep, Out] | Acc])
    end.

%% In the peer: Shape with its placeholders for a pid and a port filled in.
fill(pid, Pid, _Port) -> Pid;
fill(port, _Pid, Port) -> Port;
fill(T, Pid, Port) when is_tuple(T) -> list_to_tuple([fill(E, Pid, Port) || E <- tuple_to_list(T)]);
fill(T, _Pid, _Port) -> T.

shape() ->
    ?SIZED(S, shape(S)).

shape(S) when S =< 1 ->
    oneof([pid, port, [], ok, 'hello world', 'Quoted', '', 'a.b', true, 'don\'t',
           integer(-1000, 1000), exactly((1 bsl 59) - 1), exactly(-(1 bsl 59))]);
shape(S) ->
    frequency([{2, shape(1)},
               {3, ?LET(N, range(1, 10), ?LET(L, vector(N, shape(1)), list_to_tuple(L)))},
               {1, ?LAZY(?LET(N, range(1, 4), ?LET(L, vector(N, shape(S div 2)), list_to_tuple(L))))}]).

send(Config) ->
    S = session(Config, ["org_erlang_dyntrace:message_send"], ["org_erlang_dyntrace:message_send"]),
    {Self, Pid, Child} = traced(Config, [send], fun procs_workload/0),
    Events = read(S),
    count(1, message_send, [{from, Self}, {to, Pid}, {message, io_lib:format("~w", [{Self, ok}])}], Events),
    count(1, message_send, [{from, Pid}, {to, Self}, {message, io_lib:format("~w", [{Pid, ok, Child}])}], Events),
    count(1, message_send, [{from, Pid}, {to, Child}, {message, "ok"}], Events).

'receive'(Config) ->
    S = session(Config, ["org_erlang_dyntrace:message_receive"], ["org_erlang_dyntrace:message_receive"]),
    {Self, Pid, Child} = traced(Config, ['receive'], fun procs_workload/0),
    Events = read(S),
    count(1, message_receive, [{to, Pid}, {message, io_lib:format("~w", [{Self, ok}])}], Events),
    count(1, message_receive, [{to, Self}, {message, io_lib:format("~w", [{Pid, ok, Child}])}], Events),
    count(1, message_receive, [{to, Child}, {message, "ok"}], Events).

garbage_collection(Config) ->
    S = session(Config, ["org_erlang_dyntrace:gc_*"],
                ["org_erlang_dyntrace:gc_minor_start", "org_erlang_dyntrace:gc_minor_end",
                 "org_erlang_dyntrace:gc_major_start", "org_erlang_dyntrace:gc_major_end"]),
    Pid = traced(Config, [garbage_collection], fun() -> gc_workload(10000) end),
    Events = read(S),
    [has(E, [{pid, Pid}], Events) || E <- [gc_minor_start, gc_minor_end, gc_major_start, gc_major_end]],
    %% Starts and ends pair up.
    ?assertEqual(length(find(gc_minor_start, [{pid, Pid}], Events)),
                 length(find(gc_minor_end, [{pid, Pid}], Events))),
    ?assertEqual(length(find(gc_major_start, [{pid, Pid}], Events)),
                 length(find(gc_major_end, [{pid, Pid}], Events))),
    %% Sizes in words: a collection needs and has a heap.
    [#{<<"heap">> := Heap} | _] = find(gc_major_start, [{pid, Pid}], Events),
    ?assert(Heap > 0).

all_flags(Config) ->
    Names = [process_spawn, process_link, process_exit, process_register, port_open, port_link,
             port_exit, process_scheduled, port_scheduled, message_send, message_receive,
             gc_major_start, gc_major_end, gc_minor_start, gc_minor_end],
    S = session(Config, ["org_erlang_dyntrace:*"],
                ["org_erlang_dyntrace:" ++ atom_to_list(N) || N <- Names]),
    Flags = case ?config(mode, Config) of
                otp -> [all];
                auto -> [procs, running, send, 'receive', garbage_collection]
            end,
    {{_, Pid, _}, {_, Port}, Gc} =
        traced(Config, Flags, fun() -> {procs_workload(), port_workload(), gc_workload(10000)} end),
    Events = read(S),
    Seen = lists:usort([E || {E, _} <- Events]),
    ct:log("events seen: ~p", [Seen]),
    [?assert(lists:member(<<"org_erlang_dyntrace:", (atom_to_binary(N))/binary>>, Seen)) || N <- Names],
    has(process_register, [{pid, Pid}], Events),
    has(port_exit, [{port, Port}], Events),
    has(gc_major_end, [{pid, Gc}], Events).

%% Automatic mode: no session, no flag; a session's event sets the
%% flags it needs; when the session is destroyed they come off.
flags_follow_the_session(Config) ->
    Peer = ?config(peer, Config),
    ok = peer:call(Peer, dtrace_vm, sync, []),
    ?assertMatch(#{flags := #{processes := [], ports := []}}, peer:call(Peer, dtrace, vm_probes, [])),
    S = session(Config, ["org_erlang_dyntrace:message_send", "org_erlang_dyntrace:port_open"],
                ["org_erlang_dyntrace:message_send", "org_erlang_dyntrace:port_open"]),
    ok = peer:call(Peer, dtrace_test_workload, wait_flags, [[send], 5000]),
    ?assertMatch(#{flags := #{processes := [send], ports := [ports]}}, peer:call(Peer, dtrace, vm_probes, [])),
    _ = dtrace_test_lttng:stop_and_read(S),
    ok = peer:call(Peer, dtrace_test_workload, wait_flags, [[], 5000]),
    ?assertMatch(#{flags := #{processes := [], ports := []}, traced := 0},
                 peer:call(Peer, dtrace, vm_probes, [])),
    ?assertEqual([], peer:call(Peer, dtrace_test_workload, our_traced, [])).

%%--------------------------------------------------------------------
%% User and file probes

user(Name) -> <<"org_erlang_dtrace:", Name/binary>>.

%% Every argument of p/N, pn/N and user_trace_s1 reaches its field, with
%% the caller's pid and user tag; what SDT passes as NULL LTTng records as
%% "(null)"; a bignum is 0.
user_probe_fields(Config) ->
    S = session(Config, ["org_erlang_dtrace:*"],
                ["org_erlang_dtrace:user_trace_i4s4", "org_erlang_dtrace:user_trace_n",
                 "org_erlang_dtrace:user_trace_s1"]),
    {Pid, Returns} =
        in_peer(Config, fun() ->
                                dtrace:put_tag("req-42"),
                                R = [dtrace:p(7, -8, 1 bsl 40, 1 bsl 70, "one", <<"two">>,
                                              ["th", [<<"r">>, $e], <<"e">>], "four, \"5\""),
                                     dtrace:pn(950, 1, 2, 3, 4, "a", "b", "c", "d"),
                                     dtrace:user_trace_s1(<<"hello">>),
                                     begin dtrace:put_tag(undefined), dtrace:p(1) end,
                                     dtrace:p(binary:copy(<<"x">>, 1025))],
                                {self(), R}
                        end),
    ?assertEqual([true, true, true, true, true], Returns),
    Events = [{E, F} || {E, F} <- read(S), maps:get(<<"proc">>, F, bin(Pid)) =:= bin(Pid)],
    Null = <<"(null)">>,
    ?assertEqual(
       [{user(<<"user_trace_i4s4">>),
         #{<<"proc">> => bin(Pid), <<"user_tag">> => <<"req-42">>, <<"i1">> => 7, <<"i2">> => -8,
           <<"i3">> => 1 bsl 40, <<"i4">> => 0, <<"s1">> => <<"one">>, <<"s2">> => <<"two">>,
           <<"s3">> => <<"three">>, <<"s4">> => <<"four, \"5\"">>}},
        {user(<<"user_trace_n">>),
         #{<<"label">> => 950, <<"proc">> => bin(Pid), <<"user_tag">> => <<"req-42">>,
           <<"i1">> => 1, <<"i2">> => 2, <<"i3">> => 3, <<"i4">> => 4,
           <<"s1">> => <<"a">>, <<"s2">> => <<"b">>, <<"s3">> => <<"c">>, <<"s4">> => <<"d">>}},
        {user(<<"user_trace_s1">>), #{<<"message">> => <<"hello">>}},
        {user(<<"user_trace_i4s4">>),
         #{<<"proc">> => bin(Pid), <<"user_tag">> => Null, <<"i1">> => 1, <<"i2">> => 0,
           <<"i3">> => 0, <<"i4">> => 0, <<"s1">> => Null, <<"s2">> => Null, <<"s3">> => Null,
           <<"s4">> => Null}},
        {user(<<"user_trace_i4s4">>),
         #{<<"proc">> => bin(Pid), <<"user_tag">> => Null, <<"i1">> => 0, <<"i2">> => 0,
           <<"i3">> => 0, <<"i4">> => 0, <<"s1">> => Null, <<"s2">> => Null, <<"s3">> => Null,
           <<"s4">> => Null}}],
       Events).

%% 4 processes x 25,000 p/4 calls while a session records: every call
%% returns true and the trace holds exactly one event per call, each
%% (process, sequence number) once.
exact_counts_under_load(Config) ->
    S = session(Config, ["org_erlang_dtrace:user_trace_i4s4"], ["org_erlang_dtrace:user_trace_i4s4"],
                [{buffers, "4M", 8}]),
    N = 25000,
    Trues = in_peer(Config,
                    fun() ->
                            Self = self(),
                            Ps = [spawn_link(fun() ->
                                                     T = dtrace_test_workload:count_trues(
                                                           fun(I) -> dtrace:p(W, I, "load", "x") end, N),
                                                     Self ! {self(), T}
                                             end) || W <- lists:seq(1, 4)],
                            lists:sum([receive {P, T} -> T end || P <- Ps])
                    end),
    {Events, Warnings} = dtrace_test_lttng:stop_and_read(S),
    ?assertEqual([], [W || W <- Warnings, binary:match(W, <<"discarded">>) =/= nomatch]),
    Keys = [{I1, I2} || {<<"org_erlang_dtrace:user_trace_i4s4">>,
                         #{<<"i1">> := I1, <<"i2">> := I2, <<"s1">> := <<"load">>}} <- Events],
    ?assertEqual(4 * N, Trues),
    ?assertEqual(Trues, length(Keys)),
    ?assertEqual(lists:sort([{W, I} || W <- lists:seq(1, 4), I <- lists:seq(1, N)]), lists:sort(Keys)).

%% dtrace_file's operations as org_erlang_dtrace efile events: a failed
%% read_file is one READ_FILE (15) operation with the path, the tag, and
%% errnum ENOENT.
file_probes(Config) ->
    S = session(Config, ["org_erlang_dtrace:efile_drv_*"],
                ["org_erlang_dtrace:efile_drv_entry", "org_erlang_dtrace:efile_drv_return"]),
    Dir = ?config(priv_dir, Config),
    Missing = filename:join(Dir, "missing"),
    {error, enoent} = in_peer(Config, fun() ->
                                              true = dtrace_nif:efile_enabled(),
                                              dtrace:put_tag("file-tag"),
                                              dtrace_file:read_file(Missing)
                                      end),
    Events = read(S),
    [{_, #{<<"thread_id">> := Thread, <<"tag">> := Tag} = Entry}] =
        [E || {<<"org_erlang_dtrace:efile_drv_entry">>, #{<<"s1">> := S1}} = E <- Events,
              S1 =:= list_to_binary(Missing)],
    ?assertMatch(#{<<"user_tag">> := <<"file-tag">>, <<"command">> := 15}, Entry),
    Returns = [R || {<<"org_erlang_dtrace:efile_drv_return">>, #{<<"thread_id">> := T, <<"tag">> := G} = R}
                        <- Events, {T, G} =:= {Thread, Tag}],
    ?assertMatch([#{<<"user_tag">> := <<"file-tag">>, <<"command">> := 15, <<"success">> := 0,
                    <<"errnum">> := 2}], Returns).

%% bpftrace on the SDT probe and an LTTng session at the same time: each
%% sees every call (the session's channel is large: the ready loop fires
%% while bpftrace attaches, and the default one once discarded events in
%% test-sid).
both_sinks_at_once(Config) ->
    case dtrace_test_tracer:require_tracer(bpftrace) of
        ok -> both_sinks(Config);
        Skip -> Skip
    end.

both_sinks(Config) ->
    S = session(Config, ["org_erlang_dtrace:user_trace_i4s4"], ["org_erlang_dtrace:user_trace_i4s4"],
                [{buffers, "4M", 8}]),
    Program = counting_program(),
    N = 1000,
    {Trues, Lines} =
        dtrace_test_tracer:bpftrace_window(
          ?config(peer, Config), Program, fun() -> dtrace:p(98) end, [<<"READY">>],
          fun() -> dtrace_test_workload:count_trues(fun(I) -> dtrace:p(99, I) end, N) end),
    Events = read(S),
    Lttng = [I || {<<"org_erlang_dtrace:user_trace_i4s4">>, #{<<"i1">> := 99, <<"i2">> := I}} <- Events],
    ?assertEqual(N, Trues),
    ?assertEqual(N, dtrace_test_tracer:bpftrace_map(<<"@n">>, Lines)),
    ?assertEqual(lists:seq(1, N), lists:sort(Lttng)).

%%--------------------------------------------------------------------
%% Without the sink

%% A node where liblttng-ust cannot be loaded (hidden behind an empty
%% file in a private mount namespace): the sink says why, p/N answers
%% false with no tracer, and the SDT probes reach bpftrace.
without_liblttng_ust(_Config) ->
    Provider = filename:join(code:priv_dir(dtrace), "libdtrace_lttng_tp.so"),
    {0, Ldd} = dtrace_test_tracer:run("ldd", [Provider]),
    [Ust] = [Path || L <- Ldd, {match, [Path]} <- [re:run(L, "liblttng-ust\\.so\\.1 => (\\S+)",
                                                           [{capture, all_but_first, list}])]],
    Hide = "mount --bind /dev/null " ++ Ust ++ " && exec erl \"$@\"",
    Paths = lists:usort([filename:dirname(code:which(M)) || M <- [dtrace, dtrace_test_peer]]),
    {ok, Peer, _} = peer:start_link(#{connection => standard_io,
                                      exec => {os:find_executable("unshare"),
                                               ["-m", "--propagation", "private", "sh", "-c", Hide, "sh"]},
                                      args => lists:append([["-pa", P] || P <- Paths])}),
    try
        {Sinks, Available, P, Enabled} =
            peer:call(Peer, erlang, apply,
                      [fun() -> {dtrace:sinks(), dtrace:available(), dtrace:p(1), dtrace:is_enabled()} end, []]),
        ct:log("sinks without liblttng-ust: ~p", [Sinks]),
        ?assertMatch(#{sdt := true, lttng := {false, _}}, Sinks),
        #{lttng := {false, Why}} = Sinks,
        ?assertNotEqual(nomatch, binary:match(Why, <<"liblttng-ust">>)),
        ?assertEqual({true, false, false}, {Available, P, Enabled}),
        sdt_still_works(Peer)
    after
        dtrace_test_peer:stop_peer(Peer)
    end.

%% bpftrace counting p(99, _) calls, printing READY at the first p(98)
%% (one block: bpftrace 0.17 takes a USDT probe only once per program).
counting_program() ->
    "usdt:$SO:erlang:user_trace__i4s4 {
         if (arg2 == 98 && @ready == 0) { @ready = 1; printf(\"READY\\n\"); }
         if (arg2 == 99) { @n = count(); }
     }".

%% gdb on the SDT probe sees every call that returns true (bpftrace 0.17
%% cannot read USDT arguments of a process in another mount namespace:
%% "couldn't get argument").
sdt_still_works(Peer) ->
    case dtrace_test_tracer:require_tracer(gdb) of
        ok ->
            {Trues, Lines} = dtrace_test_tracer:gdb_events(
                               Peer, fun() -> dtrace_test_workload:count_trues(fun(I) -> dtrace:p(99, I) end, 100) end),
            ?assertEqual({100, 100}, {Trues, length([L || <<"EVENT i4s4", _/binary>> = L <- Lines])});
        {skip, Why} ->
            ct:comment("SDT side not checked: ~ts", [Why])
    end.

%% DTRACE_LTTNG=off leaves the sink out, even with a session recording.
turned_off(Config) ->
    Paths = lists:usort([filename:dirname(code:which(M)) || M <- [dtrace, dtrace_test_peer]]),
    {ok, Peer, _} = peer:start_link(#{connection => standard_io, env => [{"DTRACE_LTTNG", "off"}],
                                      args => lists:append([["-pa", P] || P <- Paths])}),
    S = dtrace_test_lttng:start("absent_turned_off", ?config(priv_dir, Config), ["org_erlang_dtrace:*"],
                               [{vpid, dtrace_test_peer:os_pid(Peer)}]),
    try
        {Sinks, P} = peer:call(Peer, erlang, apply,
                               [fun() ->
                                        %% LTTng would enable the event a moment
                                        %% after the library registered it.
                                        timeout = dtrace_test_workload:wait_until(fun() -> dtrace:p(1) end, 300),
                                        {dtrace:sinks(), dtrace:p(1)}
                                end, []]),
        ?assertMatch(#{sdt := true, lttng := {false, <<"turned off (DTRACE_LTTNG=off)">>}}, Sinks),
        ?assertEqual(false, P),
        {Events, _} = dtrace_test_lttng:stop_and_read(S),
        ?assertEqual([], Events)
    after
        dtrace_test_peer:stop_peer(Peer)
    end.
