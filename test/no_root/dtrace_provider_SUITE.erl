%%% Run-time providers (dtrace_provider) end to end: definitions and their
%%% errors, limits, the object file as readelf sees it, bpftrace and gdb
%%% reading every argument from a peer node, true returns against events,
%%% delete while traced, churn back to the baseline, garbage-collected
%%% handles, concurrent fires and deletes, files removed at exit and after
%%% dead nodes, module reloads, and the any-term property.
%%%
%%% Every test runs in a peer node (a crash would show as a dead peer, and
%%% each node has its own providers and private directory). A provider's
%%% handle lives in a holder process of the peer, registered under the
%%% provider's name (dtrace_test_workload:provider_holder/3); funs run in
%%% the peer get it with dtrace_test_workload:provider_handle/1. Tests that need a tracer skip locally without one (saying
%%% why) and fail in CI (CI=true).
-module(dtrace_provider_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("kernel/include/file.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_testcase/2, end_per_testcase/2]).
-export([a_definition_is_a_loaded_file/1,
         bad_definitions_get_a_reason/1,
         names_are_unique_per_node/1,
         limits_are_enforced/1,
         fire_checks_handle_probe_and_arguments/1,
         readelf_lists_notes_semaphores_and_sites/1,
         bpftrace_lists_the_probes/1,
         bpftrace_reads_every_argument/1,
         gdb_reads_every_argument/1,
         true_returns_equal_events/1,
         delete_while_traced/1,
         churn_returns_to_the_baseline/1,
         a_dropped_handle_is_collected/1,
         concurrent_fires_and_deletes/1,
         files_go_at_exit_and_after_dead_nodes/1,
         module_reloads_keep_handles/1,
         no_heap_allocation_when_enabled/1,
         any_term_disabled/1,
         any_term_enabled/1]).
%% Run in the peer.
-export([raise_semaphore/3, in_process/1, wait_unmapped/2]).

-define(ALL_TYPES, [int, string, int, string, int, string, string, int, string, int, string, int]).
-define(N_CALLS, 20000).
-define(CHURN, 10000).

all() ->
    [a_definition_is_a_loaded_file,
     bad_definitions_get_a_reason,
     names_are_unique_per_node,
     limits_are_enforced,
     fire_checks_handle_probe_and_arguments,
     readelf_lists_notes_semaphores_and_sites,
     bpftrace_lists_the_probes,
     bpftrace_reads_every_argument,
     gdb_reads_every_argument,
     true_returns_equal_events,
     delete_while_traced,
     churn_returns_to_the_baseline,
     a_dropped_handle_is_collected,
     concurrent_fires_and_deletes,
     files_go_at_exit_and_after_dead_nodes,
     module_reloads_keep_handles,
     no_heap_allocation_when_enabled,
     any_term_disabled,
     any_term_enabled].

init_per_testcase(TC, Config) ->
    Tool = case TC of
               readelf_lists_notes_semaphores_and_sites -> readelf;
               concurrent_fires_and_deletes -> readelf;
               no_heap_allocation_when_enabled -> readelf;
               gdb_reads_every_argument -> gdb;
               _ when TC =:= bpftrace_lists_the_probes; TC =:= bpftrace_reads_every_argument;
                      TC =:= true_returns_equal_events; TC =:= delete_while_traced;
                      TC =:= any_term_enabled -> bpftrace;
               _ -> none
           end,
    case Tool =:= none orelse dtrace_test_tracer:require_tracer(Tool) of
        Ready when Ready =:= true; Ready =:= ok ->
            Peer = dtrace_test_peer:start_peer(),
            [{peer, Peer}, {os_pid, dtrace_test_peer:os_pid(Peer)} | Config];
        Skip ->
            Skip
    end.

end_per_testcase(_TC, Config) ->
    dtrace_test_peer:stop_peer(?config(peer, Config)).

in_peer(Config, Fun) ->
    peer:call(?config(peer, Config), erlang, apply, [Fun, []], 600000).

%% The probes most tests define: two, and all twelve argument registers.
probes() ->
    [{request__start, [int, string]}, {all, ?ALL_TYPES}, {nothing, []}].

%% Arguments for `all': each conversion rule once (NULL for an atom and a
%% 1025-byte string, 0 for a bignum).
all_args() ->
    [-1, "s1", 1 bsl 40, undefined, 4, <<"s5">>, ["s", <<"6">>], -9223372036854775808,
     lists:duplicate(1025, $x), 1 bsl 64, <<"s10">>, 9223372036854775807].

%% What a tracer reads from all_args(), NULL as NULL.
all_text() ->
    "-1 s1 1099511627776 NULL 4 s5 s6 -9223372036854775808 NULL 0 s10 9223372036854775807".

%% Defines Name with Probes in the peer, in a holder process registered as
%% Name; returns the object's path.
define(Config, Name, Probes) ->
    in_peer(Config, fun() ->
                            Self = self(),
                            Pid = spawn(dtrace_test_workload, provider_holder, [Name, Probes, Self]),
                            receive {Pid, Path} -> Path end
                    end).

%% Stops Name's holder: its handle becomes garbage.
release(Config, Name) ->
    in_peer(Config, fun() ->
                            Pid = whereis(Name),
                            Pid ! {stop, self()},
                            receive {stopped, Pid} -> ok end
                    end).

%% In the peer: raises (Delta = 1) or lowers (-1) the semaphore of probe
%% Probe of the object at Path as a tracer does, by writing this process's
%% memory (/proc/self/mem) at the object's load address plus the
%% semaphore's address in its note. Then the probe's site runs, without a
%% tracer's breakpoint.
raise_semaphore(Path, Probe, Delta) ->
    [Sem] = [S || #{name := N, semaphore := S} <- dtrace_test_catalogue:notes(Path), N =:= atom_to_binary(Probe)],
    {ok, Maps} = file:read_file("/proc/self/maps"),
    [Base | _] = [binary_to_integer(hd(binary:split(Range, <<"-">>)), 16)
                  || L <- binary:split(Maps, <<"\n">>, [global]),
                     [Range, _, <<"00000000">>, _, _, File] <- [string:lexemes(L, " ")],
                     File =:= list_to_binary(Path)],
    {ok, Mem} = file:open("/proc/self/mem", [read, write, raw, binary]),
    {ok, <<Old:16/little>>} = file:pread(Mem, Base + Sem, 2),
    ok = file:pwrite(Mem, Base + Sem, <<(Old + Delta):16/little>>),
    ok = file:close(Mem).

%%--------------------------------------------------------------------
%% Definitions

%% A definition is a file in a private 0700 directory of this node,
%% loaded; nothing listens, so calls return false.
a_definition_is_a_loaded_file(Config) ->
    Path = define(Config, myapp, probes()),
    Dir = filename:dirname(Path),
    OsPid = ?config(os_pid, Config),
    ?assertEqual(filename:join(os:getenv("TMPDIR", "/tmp"), "dtrace-" ++ OsPid), lists:sublist(Dir, length(Dir) - 7)),
    ?assertEqual("myapp.1.so", filename:basename(Path)),
    {ok, #file_info{mode = DirMode, type = directory}} = file:read_link_info(Dir),
    {ok, #file_info{mode = FileMode, type = regular}} = file:read_link_info(Path),
    ?assertEqual({8#700, 8#600}, {DirMode band 8#777, FileMode band 8#777}),
    Results = in_peer(Config, fun() ->
                                      P = dtrace_test_workload:provider_handle(myapp),
                                      Probe = dtrace_provider:probe(P, all),
                                      {ok, Maps} = file:read_file("/proc/self/maps"),
                                      {binary:matches(Maps, list_to_binary(Path)) =/= [],
                                       dtrace_provider:fire(P, request__start, [1, "x"]),
                                       dtrace_provider:fire(Probe, all_args()),
                                       dtrace_provider:is_enabled(P, nothing),
                                       dtrace_provider:is_enabled(Probe),
                                       dtrace_provider:path(Probe)}
                              end),
    ?assertEqual({true, false, false, false, false, list_to_binary(Path)}, Results).

%% Each bad definition gets the reason new/2 documents; a provider name
%% never reaches a path unchecked.
bad_definitions_get_a_reason(Config) ->
    Long = list_to_atom(lists:duplicate(65, $p)),
    Cases =
        [{"../x", [{a, []}], {invalid_provider_name, "../x"}},
         {"a/b", [{a, []}], {invalid_provider_name, "a/b"}},
         {<<"a/b">>, [{a, []}], {invalid_provider_name, <<"a/b">>}},
         {'', [{a, []}], {invalid_provider_name, ''}},
         {"9lives", [{a, []}], {invalid_provider_name, "9lives"}},
         {Long, [{a, []}], {invalid_provider_name, Long}},
         {{myapp}, [{a, []}], {invalid_provider_name, {myapp}}},
         {myapp, [], no_probes},
         {myapp, probes, {invalid_probes, probes}},
         {myapp, [{a, []} | b], {invalid_probes, [{a, []} | b]}},
         {myapp, [{a, [int]}, a], {invalid_probe, a}},
         {myapp, [{a, [int], x}], {invalid_probe, {a, [int], x}}},
         {myapp, [{a, int}], {invalid_probe, {a, int}}},
         {myapp, [{a, [int | string]}], {invalid_probe, {a, [int | string]}}},
         {myapp, [{"a", []}], {invalid_probe_name, "a"}},
         {myapp, [{'a-b', []}], {invalid_probe_name, 'a-b'}},
         {myapp, [{Long, []}], {invalid_probe_name, Long}},
         {myapp, [{a, [int, float]}], {invalid_arg_type, a, float}},
         {myapp, [{a, [int, "string"]}], {invalid_arg_type, a, "string"}},
         {myapp, [{a, lists:duplicate(13, int)}], {too_many_args, a, 12}},
         {myapp, [{a, []}, {b, []}, {a, [int]}], {duplicate_probe, a}},
         %% The first problem in the list is the one reported.
         {myapp, [{a, [float]}, {'1b', []}], {invalid_arg_type, a, float}},
         {"../x", [], {invalid_provider_name, "../x"}}],
    Results = in_peer(Config, fun() -> [dtrace_provider:new(N, Ps) || {N, Ps, _} <- Cases] end),
    ?assertEqual([{error, R} || {_, _, R} <- Cases], Results),
    %% Good names of every form, 64 bytes, __ in probe names.
    Good = in_peer(Config, fun() ->
                                   [begin
                                        {ok, P} = dtrace_provider:new(N, [{request__start, [int]}, {'_x9', []}]),
                                        ok = dtrace_provider:delete(P),
                                        filename:basename(dtrace_provider:path(P))
                                    end || N <- [a, "b_c", <<"_D">>, ["e", <<"f">>], lists:duplicate(64, $g)]]
                           end),
    ?assertEqual([<<"a.1.so">>, <<"b_c.2.so">>, <<"_D.3.so">>, <<"ef.4.so">>,
                  list_to_binary(lists:duplicate(64, $g) ++ ".5.so")], Good).

%% A name is defined at most once per node, whatever its form; deleting a
%% provider frees its name at once, though its handle lives on.
names_are_unique_per_node(Config) ->
    Results = in_peer(Config, fun() ->
                                      {ok, P} = dtrace_provider:new(myapp, [{a, []}]),
                                      Taken = [dtrace_provider:new(N, [{b, []}]) || N <- [myapp, "myapp", <<"myapp">>]],
                                      ok = dtrace_provider:delete(P),
                                      {ok, P2} = dtrace_provider:new("myapp", [{b, []}]),
                                      {Taken, dtrace_provider:fire(P, a, []), dtrace_provider:fire(P2, b, []),
                                       dtrace_provider:path(P) =/= dtrace_provider:path(P2)}
                              end),
    ?assertEqual({[{error, {already_defined, myapp}}, {error, {already_defined, "myapp"}},
                   {error, {already_defined, <<"myapp">>}}], false, false, true}, Results).

%% 1024 probes per provider, 1024 providers loaded per node; a deleted
%% provider counts until its handle is garbage-collected.
limits_are_enforced(Config) ->
    Results =
        in_peer(Config,
                fun() ->
                        Probes = fun(N) -> [{list_to_atom("p" ++ integer_to_list(I)), [int, string]} || I <- lists:seq(1, N)] end,
                        %% In a process of its own, so that its handles are gone after.
                        Big = in_process(fun() ->
                                                 TooMany = dtrace_provider:new(big, Probes(1025)),
                                                 {ok, B} = dtrace_provider:new(big, Probes(1024)),
                                                 {TooMany, dtrace_provider:fire(B, p1024, [1, "x"])}
                                         end),
                        Handles = [begin
                                       {ok, H} = dtrace_provider:new("prov" ++ integer_to_list(I), [{p, []}]),
                                       H
                                   end || I <- lists:seq(1, 1024)],
                        Full = dtrace_provider:new(one_more, [{p, []}]),
                        [First | Rest] = Handles,
                        ok = dtrace_provider:delete(First),
                        StillFull = dtrace_provider:new(one_more, [{p, []}]),
                        %% First's last use: once it is collected, there is room.
                        DeletedFire = dtrace_provider:fire(First, p, []),
                        erlang:garbage_collect(),
                        {ok, _} = dtrace_provider:new(one_more, [{p, []}]),
                        Alive = length([H || H <- Rest, dtrace_provider:fire(H, p, []) =:= false]),
                        {Big, Full, StillFull, DeletedFire, Alive}
                end),
    ?assertEqual({{{error, {too_many_probes, 1024}}, false}, {error, {too_many_providers, 1024}},
                  {error, {too_many_providers, 1024}}, false, 1023}, Results).

%% In the peer: Fun() in a new process, which exits after (its handles
%% with it); its result.
in_process(Fun) ->
    {Pid, Ref} = spawn_monitor(fun() -> exit({result, Fun()}) end),
    receive {'DOWN', Ref, process, Pid, {result, R}} -> R end.

%% fire/3 and is_enabled/2 raise badarg for a term that is not a provider
%% handle, a name that is not one of its probes and, for fire, a wrong
%% number of arguments: whether or not a tracer listens. On a deleted
%% provider they return false. fire/2 and is_enabled/1 take probe handles
%% only; delete/1 and path/1 take both.
fire_checks_handle_probe_and_arguments(Config) ->
    define(Config, myapp, probes()),
    Results =
        in_peer(Config,
                fun() ->
                        P = dtrace_test_workload:provider_handle(myapp),
                        Probe = dtrace_provider:probe(P, request__start),
                        Try = fun(F) -> try F() catch error:badarg -> badarg end end,
                        Bad = [Try(F) || F <- [fun() -> dtrace_provider:fire(make_ref(), request__start, [1, "x"]) end,
                                               fun() -> dtrace_provider:fire(Probe, request__start, [1, "x"]) end,
                                               fun() -> dtrace_provider:fire(P, nope, [1, "x"]) end,
                                               fun() -> dtrace_provider:fire(P, "request__start", [1, "x"]) end,
                                               fun() -> dtrace_provider:fire(P, request__start, [1]) end,
                                               fun() -> dtrace_provider:fire(P, request__start, [1, "x", 3]) end,
                                               fun() -> dtrace_provider:fire(P, request__start, [1 | x]) end,
                                               fun() -> dtrace_provider:fire(P, nothing, nothing) end,
                                               fun() -> dtrace_provider:fire(P, [1, "x"]) end,
                                               fun() -> dtrace_provider:fire(Probe, [1]) end,
                                               fun() -> dtrace_provider:is_enabled(P, nope) end,
                                               fun() -> dtrace_provider:is_enabled(P) end,
                                               fun() -> dtrace_provider:is_enabled(Probe, request__start) end,
                                               fun() -> dtrace_provider:probe(P, nope) end,
                                               fun() -> dtrace_provider:probe(Probe, request__start) end,
                                               fun() -> dtrace_provider:path(self()) end,
                                               fun() -> dtrace_provider:delete(<<"myapp">>) end]],
                        Good = [dtrace_provider:fire(P, request__start, [1, "x"]),
                                dtrace_provider:fire(P, nothing, []),
                                dtrace_provider:fire(Probe, [not_an_int, 42])],
                        %% Deleting through a probe handle deletes the provider.
                        ok = dtrace_provider:delete(Probe),
                        ok = dtrace_provider:delete(P),
                        Deleted = [dtrace_provider:fire(P, request__start, [1, "x"]),
                                   dtrace_provider:fire(P, nope, wrong),
                                   dtrace_provider:fire(Probe, [1]),
                                   dtrace_provider:is_enabled(P, nope),
                                   dtrace_provider:is_enabled(Probe)],
                        {Bad, Good, Deleted, filelib:is_file(dtrace_provider:path(P))}
                end),
    ?assertEqual({lists:duplicate(17, badarg), [false, false, false], lists:duplicate(5, false), false}, Results).

%%--------------------------------------------------------------------
%% The object as tracers see it

%% readelf lists one note per probe, with the provider, the name, a site of
%% its own, a semaphore of its own in .probes, and the arguments in the
%% catalogue's registers (x86_64: rdi, rsi, rdx, rcx, r8, r9, r10..r15;
%% -8@ for int, 8@ for a string pointer). Sites lie in an executable
%% segment whose offset equals its address. Each definition has its own
%% build id.
readelf_lists_notes_semaphores_and_sites(Config) ->
    Path = define(Config, relf, probes()),
    Notes = dtrace_test_catalogue:notes(Path),
    Regs = [<<"rdi">>, <<"rsi">>, <<"rdx">>, <<"rcx">>, <<"r8">>, <<"r9">>,
            <<"r10">>, <<"r11">>, <<"r12">>, <<"r13">>, <<"r14">>, <<"r15">>],
    Spec = fun(int, R) -> <<"-8@%", R/binary>>; (string, R) -> <<"8@%", R/binary>> end,
    Expected = lists:sort([{<<"relf">>, atom_to_binary(N), [Spec(T, R) || {T, R} <- lists:zip(Ts, lists:sublist(Regs, length(Ts)))]}
                           || {N, Ts} <- probes()]),
    ?assertEqual(Expected, lists:sort([{P, N, A} || #{provider := P, name := N, args := A} <- Notes])),
    {0, Sections} = dtrace_test_tracer:run("readelf", ["-SW", Path]),
    {ProbesAddr, ProbesSize} = section(Sections, ".probes"),
    {TextAddr, TextSize} = section(Sections, ".text"),
    {BaseAddr, _} = section(Sections, ".stapsdt.base"),
    Semaphores = [S || #{semaphore := S} <- Notes],
    Sites = [L || #{location := L} <- Notes],
    ?assertEqual(3, length(lists:usort(Semaphores))),
    ?assertEqual(3, length(lists:usort(Sites))),
    ?assertEqual([], [S || S <- Semaphores, S < ProbesAddr orelse S + 2 > ProbesAddr + ProbesSize]),
    ?assertEqual([], [L || L <- Sites, L < TextAddr orelse L >= TextAddr + TextSize]),
    ?assertEqual([BaseAddr], lists:usort([B || #{base := B} <- Notes])),
    {0, Segments} = dtrace_test_tracer:run("readelf", ["-lW", Path]),
    Loads = [{binary_to_integer(Off, 16), binary_to_integer(VA, 16), binary_to_integer(Sz, 16), Flags}
             || L <- Segments,
                {match, [Off, VA, Sz, Flags]} <-
                    [re:run(L, "^\\s*LOAD\\s+0x([0-9a-f]+)\\s+0x([0-9a-f]+)\\s+0x[0-9a-f]+\\s+0x[0-9a-f]+"
                                "\\s+0x([0-9a-f]+)\\s+([RWE ]+?)\\s+0x", [{capture, all_but_first, binary}])]],
    ?assertEqual([], [L || L <- Sites,
                           not lists:any(fun({Off, VA, Sz, Flags}) ->
                                                 Off =:= VA andalso L >= VA andalso L < VA + Sz
                                                     andalso binary:match(Flags, <<"E">>) =/= nomatch
                                         end, Loads)]),
    %% A second definition of the same provider: a new file, a new build id.
    release(Config, relf),
    Path2 = define(Config, relf, probes()),
    ?assertNotEqual(Path, Path2),
    ?assertNotEqual(build_id(Path2), build_id(dtrace_test_catalogue:nif_path())),
    ?assertMatch(<<_:40/binary>>, build_id(Path2)),
    ct:log("notes ~p~nLOAD segments ~p", [Notes, Loads]).

build_id(Path) ->
    {0, Lines} = dtrace_test_tracer:run("readelf", ["-n", Path]),
    [Id] = [string:trim(I) || L <- Lines, [_, I] <- [binary:split(L, <<"Build ID:">>)]],
    Id.

section(Sections, Name) ->
    [Found] = [{binary_to_integer(A, 16), binary_to_integer(S, 16)}
               || L <- Sections,
                  {match, [A, S]} <- [re:run(L, "\\s" ++ string:replace(Name, ".", "\\.", all) ++
                                                 "\\s+\\S+\\s+([0-9a-f]+)\\s+[0-9a-f]+\\s+([0-9a-f]+)\\s",
                                             [{capture, all_but_first, binary}])]],
    Found.

%% bpftrace lists the probes of a running node by provider, without a path
%% (`-p PID -l usdt:*:PROVIDER:*'), and of the file by path.
bpftrace_lists_the_probes(Config) ->
    Path = define(Config, lprov, probes()),
    OsPid = ?config(os_pid, Config),
    {0, ByPid} = dtrace_test_tracer:run("bpftrace", ["-p", OsPid, "-l", "usdt:*:lprov:*"]),
    {0, ByPath} = dtrace_test_tracer:run("bpftrace", ["-l", "usdt:" ++ Path ++ ":*"]),
    Names = lists:sort([atom_to_list(N) || {N, _} <- probes()]),
    ?assertEqual([list_to_binary(["usdt:/proc/", OsPid, "/root", Path, ":lprov:", N]) || N <- Names],
                 lists:sort([L || <<"usdt:", _/binary>> = L <- ByPid])),
    ?assertEqual([list_to_binary(["usdt:", Path, ":lprov:", N]) || N <- Names],
                 lists:sort([L || <<"usdt:", _/binary>> = L <- ByPath])).

%% bpftrace reads every argument: arg0..arg5 itself (`usdt:PATH:prov:probe'),
%% arg6..arg11 through priv/bin/dtrace-bpftrace (bpftrace 0.17 reads arg0..arg5
%% only); NULL strings are NULL pointers.
bpftrace_reads_every_argument(Config) ->
    Path = define(Config, bprov, probes()),
    Ready = fun() -> dtrace_provider:fire(dtrace_test_workload:provider_handle(bprov), request__start, [0, "ready"]) end,
    {Plain, PlainLines} =
        dtrace_test_tracer:bpftrace_window(
          ?config(peer, Config), "
            usdt:" ++ Path ++ ":bprov:request__start {
                if (arg0 == 0) { printf(\"SEEN\\n\"); } else { printf(\"REQ %ld %s\\n\", arg0, str(arg1)); }
            }
            usdt:" ++ Path ++ ":bprov:nothing { printf(\"NOTHING\\n\"); }",
          Ready, [<<"SEEN">>],
          fun() ->
                  P = dtrace_test_workload:provider_handle(bprov),
                  [dtrace_provider:fire(P, request__start, [42, <<"GET /">>]),
                   dtrace_provider:fire(P, request__start, [-7, [$a, [<<"b">>], "c"]]),
                   dtrace_provider:fire(P, nothing, [])]
          end),
    ?assertEqual([true, true, true], Plain),
    ?assertEqual([<<"REQ 42 GET /">>, <<"REQ -7 abc">>, <<"NOTHING">>],
                 [L || <<"REQ ", _/binary>> = L <- PlainLines] ++ [L || <<"NOTHING">> = L <- PlainLines]),
    Show = fun(K) -> io_lib:format("printf(\"%s\", str(arg~b)); if (arg~b == 0) { printf(\"NULL\"); }", [K, K]) end,
    Int = fun(K) -> io_lib:format("printf(\"%ld\", arg~b);", [K]) end,
    Body = lists:join(" printf(\" \"); ",
                      [case T of int -> Int(K); string -> Show(K) end
                       || {K, T} <- lists:enumerate(0, ?ALL_TYPES)]),
    {All, AllLines} =
        dtrace_test_tracer:bpftrace_window(
          dtrace_bpftrace, ?config(peer, Config), lists:flatten(["
            usdt:", Path, ":bprov:request__start /arg0 == 0/ { printf(\"SEEN\\n\"); }
            usdt:", Path, ":bprov:all { printf(\"ALL \"); ", Body, " printf(\"\\n\"); }"]),
          Ready, [<<"SEEN">>],
          fun() -> dtrace_provider:fire(dtrace_provider:probe(dtrace_test_workload:provider_handle(bprov), all), all_args()) end),
    ?assertEqual(true, All),
    ?assertEqual([list_to_binary("ALL " ++ all_text())], [L || <<"ALL ", _/binary>> = L <- AllLines]).

%% gdb (`break -probe-stap gdbprov:all') reads all twelve arguments, NULL
%% strings included, and raises the semaphore while its breakpoint is in.
gdb_reads_every_argument(Config) ->
    define(Config, gdbprov, probes()),
    {Results, Events} =
        dtrace_test_tracer:gdb_events(?config(peer, Config), "provider.gdb",
                                   fun() ->
                                           P = dtrace_test_workload:provider_handle(gdbprov),
                                           [dtrace_provider:fire(P, all, all_args()),
                                            dtrace_provider:fire(dtrace_provider:probe(P, all), all_args())]
                                   end),
    ?assertEqual([true, true], Results),
    ?assertEqual(lists:duplicate(2, list_to_binary("EVENT all argc=12 " ++ all_text())), Events).

%% No tracer: false. With bpftrace counting: every true return, from four
%% processes firing at once through fire/3 and fire/2, is one event, and
%% only those. After bpftrace leaves: false again.
true_returns_equal_events(Config) ->
    Path = define(Config, cprov, probes()),
    Fire = fun() -> dtrace_provider:fire(dtrace_test_workload:provider_handle(cprov), request__start, [5, "x"]) end,
    ?assertEqual(false, in_peer(Config, Fire)),
    {Trues, Lines} =
        dtrace_test_tracer:bpftrace_window(
          ?config(peer, Config), "
            usdt:" ++ Path ++ ":cprov:request__start {
                if (arg0 == 0) { printf(\"SEEN\\n\"); } else { @start = count(); }
            }
            usdt:" ++ Path ++ ":cprov:all { @all = count(); }",
          fun() -> dtrace_provider:fire(dtrace_test_workload:provider_handle(cprov), request__start, [0, "ready"]) end,
          [<<"SEEN">>],
          fun() ->
                  Self = self(),
                  P = dtrace_test_workload:provider_handle(cprov),
                  Workers = [spawn_link(fun() -> Self ! {self(), work(P)} end) || _ <- lists:seq(1, 4)],
                  lists:foldl(fun(W, {A, B}) -> receive {W, {X, Y}} -> {A + X, B + Y} end end, {0, 0}, Workers)
          end),
    ?assertEqual({4 * ?N_CALLS, 4 * (?N_CALLS div 2)}, Trues),
    ?assertEqual(Trues, {dtrace_test_tracer:bpftrace_map(<<"@start">>, Lines),
                         dtrace_test_tracer:bpftrace_map(<<"@all">>, Lines)}),
    ?assertEqual(false, in_peer(Config, Fire)).

work(P) ->
    Start = dtrace_provider:probe(P, request__start),
    All = dtrace_provider:probe(P, all),
    S = dtrace_test_workload:count_trues(fun(I) when I rem 2 =:= 0 -> dtrace_provider:fire(P, request__start, [I, "a"]);
                                       (I) -> dtrace_provider:fire(Start, [I, <<"b">>])
                                    end, ?N_CALLS),
    A = dtrace_test_workload:count_trues(fun(I) -> dtrace_provider:fire(All, [I | tl(all_args())]) end, ?N_CALLS div 2),
    {S, A}.

%% Deleting a traced provider: its file goes, its calls return false at
%% once, and bpftrace, still attached, stops cleanly with the events of the
%% calls before the delete; the object is unloaded once its handle is
%% collected.
delete_while_traced(Config) ->
    Path = define(Config, dprov, probes()),
    Site = "usdt:" ++ Path ++ ":dprov:request__start ",
    %% The ready clause first: bpftrace 0.17 attaches clauses last to first,
    %% so once it prints, the counting clause is attached.
    Program = Site ++ "/arg0 == 0/ { if (!@ready) { @ready = 1; printf(\"READY\\n\"); } }\n"
        ++ Site ++ "/arg0 > 0/ { @n = count(); }",
    Ready = fun() -> dtrace_provider:fire(dtrace_test_workload:provider_handle(dprov), request__start, [0, "ready"]) end,
    {{Before, After, FileGone, Unloaded}, Lines} =
        dtrace_test_tracer:bpftrace_window(
          ?config(peer, Config), Program, Ready, [<<"READY">>],
          fun() ->
                  P = dtrace_test_workload:provider_handle(dprov),
                  B = dtrace_test_workload:count_trues(fun(I) -> dtrace_provider:fire(P, request__start, [I, "x"]) end, 100),
                  ok = dtrace_provider:delete(P),
                  A = dtrace_test_workload:count_trues(fun(I) -> dtrace_provider:fire(P, request__start, [I, "x"]) end, 100),
                  Gone = not filelib:is_file(Path),
                  %% The holder goes, the handle is garbage: unloaded while bpftrace is attached.
                  Holder = whereis(dprov),
                  Holder ! {stop, self()},
                  receive {stopped, Holder} -> ok end,
                  {B, A, Gone, wait_unmapped(Path, 100)}
          end),
    ?assertEqual({100, 0, true, true}, {Before, After, FileGone, Unloaded}),
    ?assertEqual(100, dtrace_test_tracer:bpftrace_map(<<"@n">>, Lines)),
    ?assertEqual([], [L || L <- Lines, binary:match(L, [<<"ERROR">>, <<"rror:">>]) =/= nomatch,
                           binary:match(L, <<"RLIMIT_MEMLOCK">>) =:= nomatch]).

%% In the peer: waits (up to N x 50 ms, collecting garbage meanwhile) until
%% no mapping names Path; true if it came.
wait_unmapped(Path, N) ->
    [erlang:garbage_collect(Pid) || Pid <- processes()],
    {ok, Maps} = file:read_file("/proc/self/maps"),
    case binary:match(Maps, list_to_binary(Path)) of
        nomatch -> true;
        _ when N =:= 0 -> false;
        _ -> timer:sleep(50), wait_unmapped(Path, N - 1)
    end.

%%--------------------------------------------------------------------
%% Lifetime

%% 10,000 define/fire/delete cycles: afterwards the node has as many open
%% files as before, no mapping of any object, as many mappings as before
%% (allocator carriers aside), no file left, and flat memory.
churn_returns_to_the_baseline(Config) ->
    {Before, After, Left} =
        in_peer(Config,
                fun() ->
                        Cycle = fun(I) ->
                                        {ok, P} = dtrace_provider:new(churn, [{p, [int, string]}]),
                                        false = dtrace_provider:fire(P, p, [I, "x"]),
                                        ok = dtrace_provider:delete(P)
                                end,
                        [Cycle(I) || I <- lists:seq(1, 100)],
                        {ok, P0} = dtrace_provider:new(churn, [{p, []}]),
                        Dir = filename:dirname(dtrace_provider:path(P0)),
                        ok = dtrace_provider:delete(P0),
                        B = footprint(Dir),
                        [Cycle(I) || I <- lists:seq(1, ?CHURN)],
                        A = footprint(Dir),
                        {ok, Files} = file:list_dir(Dir),
                        {B, A, Files}
                end),
    #{fds := Fds0, maps := Maps0, objects := Objects0, memory := Mem0, rss := Rss0} = Before,
    #{fds := Fds1, maps := Maps1, objects := Objects1, memory := Mem1, rss := Rss1} = After,
    MB = 1024 * 1024,
    ct:log("~b cycles: fds ~b -> ~b, maps ~b -> ~b, objects mapped ~b -> ~b, "
           "erlang:memory(total) ~.1f -> ~.1f MB, RSS ~.1f -> ~.1f MB",
           [?CHURN, Fds0, Fds1, Maps0, Maps1, Objects0, Objects1, Mem0 / MB, Mem1 / MB, Rss0 / MB, Rss1 / MB]),
    ?assertEqual({Fds0, 0, 0, []}, {Fds1, Objects0, Objects1, Left}),
    ?assert(Maps1 =< Maps0 + 16),
    ?assert(abs(Mem1 - Mem0) < 4 * MB),
    ?assert(Rss1 - Rss0 < 8 * MB).

%% In the peer, after collecting every process's garbage and giving the
%% destructors of what was collected (run as schedulers' auxiliary work,
%% shortly after) up to a second: open files, mappings, mappings of objects
%% in Dir, memory.
footprint(Dir) ->
    footprint(Dir, 50).

footprint(Dir, Tries) ->
    [erlang:garbage_collect(P) || P <- processes()],
    case measure(Dir) of
        #{objects := N} when N > 0, Tries > 0 -> timer:sleep(20), footprint(Dir, Tries - 1);
        Measured -> Measured
    end.

measure(Dir) ->
    {ok, Fds} = file:list_dir("/proc/self/fd"),
    {ok, Maps} = file:read_file("/proc/self/maps"),
    Lines = binary:split(Maps, <<"\n">>, [global, trim]),
    {ok, Status} = file:read_file("/proc/self/status"),
    {match, [Kb]} = re:run(Status, "VmRSS:\\s+(\\d+) kB", [{capture, all_but_first, list}]),
    #{fds => length(Fds), maps => length(Lines),
      objects => length([L || L <- Lines, binary:match(L, iolist_to_binary(Dir)) =/= nomatch]),
      memory => erlang:memory(total), rss => list_to_integer(Kb) * 1024}.

%% A process that defines a provider and dies without deleting it: once
%% its heap is gone, the provider's file is removed and its object
%% unloaded, and its name is free.
a_dropped_handle_is_collected(Config) ->
    Result =
        in_peer(Config,
                fun() ->
                        Self = self(),
                        {Pid, Ref} = spawn_monitor(fun() ->
                                                           {ok, P} = dtrace_provider:new(dropped, [{p, [int]}]),
                                                           Self ! {path, binary_to_list(dtrace_provider:path(P))}
                                                   end),
                        Path = receive {path, X} -> X end,
                        receive {'DOWN', Ref, process, Pid, _} -> ok end,
                        Unmapped = wait_unmapped(Path, 100),
                        {ok, P2} = dtrace_provider:new(dropped, [{p, [int]}]),
                        {filelib:is_file(Path), Unmapped, dtrace_provider:fire(P2, p, [1])}
                end),
    ?assertEqual({false, true, false}, Result).

%% Eight processes fire through fire/3, fire/2 and is_enabled/2 without
%% pause, with the semaphores raised (so the sites run), while another
%% deletes the provider and the defining process lets go of its handle;
%% 50 times. Every call returns a boolean, and the node lives on.
concurrent_fires_and_deletes(Config) ->
    Results =
        in_peer(Config,
                fun() ->
                        Round = fun(R) ->
                                        {ok, P} = dtrace_provider:new(race, probes()),
                                        Path = binary_to_list(dtrace_provider:path(P)),
                                        [raise_semaphore(Path, N, 1) || N <- [request__start, all]],
                                        true = dtrace_provider:is_enabled(P, all),
                                        Self = self(),
                                        Workers = [spawn_link(fun() -> Self ! {self(), race(P, R, 0, [])} end)
                                                   || _ <- lists:seq(1, 8)],
                                        timer:sleep(2),
                                        ok = dtrace_provider:delete(P),
                                        lists:usort(lists:append([receive {W, Rs} -> Rs end || W <- Workers]))
                                end,
                        Seen = lists:usort(lists:append([Round(R) || R <- lists:seq(1, 50)])),
                        {Seen, wait_unmapped("/race.", 100)}
                end),
    ?assertEqual({[false, true], true}, Results).

%% Fires until the provider is deleted and then a while longer.
race(_P, _R, After, Acc) when After > 200 ->
    Acc;
race(P, R, After, Acc) ->
    Probe = dtrace_provider:probe(P, all),
    Results = [dtrace_provider:fire(P, request__start, [R, "x"]),
               dtrace_provider:fire(Probe, all_args()),
               dtrace_provider:is_enabled(P, all)],
    race(P, R, case dtrace_provider:is_enabled(P, request__start) of false -> After + 1; true -> After end,
         lists:usort(Results ++ Acc)).

%% A node that stops removes its directory and files; a node that finds
%% the directory of a dead node (same user, pid gone) removes it when it
%% first defines a provider, and leaves other directories alone.
files_go_at_exit_and_after_dead_nodes(Config) ->
    Path = define(Config, exitprov, probes()),
    Dir = filename:dirname(Path),
    ?assert(filelib:is_dir(Dir)),
    dtrace_test_peer:stop_peer(?config(peer, Config)),
    ?assertEqual(true, wait_until(fun() -> not filelib:is_dir(Dir) end, 100)),
    %% A stale directory, as a node killed with SIGKILL leaves it.
    Tmp = os:getenv("TMPDIR", "/tmp"),
    DeadPid = string:trim(os:cmd("sh -c 'echo $$'")),
    Stale = filename:join(Tmp, "dtrace-" ++ DeadPid ++ "-Zq9Xw1"),
    NotPrivate = filename:join(Tmp, "dtrace-" ++ DeadPid ++ "-Zq9Xw2"),
    [begin
         ok = file:make_dir(D),
         ok = file:write_file(filename:join(D, "stale.1.so"), <<"x">>),
         ok = file:change_mode(D, Mode)
     end || {D, Mode} <- [{Stale, 8#700}, {NotPrivate, 8#755}]],
    Peer = dtrace_test_peer:start_peer(),
    try
        {ok, _} = peer:call(Peer, dtrace_provider, new, [fresh, [{p, []}]]),
        ?assertEqual({false, true}, {filelib:is_dir(Stale), filelib:is_file(filename:join(NotPrivate, "stale.1.so"))})
    after
        dtrace_test_peer:stop_peer(Peer),
        file:delete(filename:join(NotPrivate, "stale.1.so")),
        file:del_dir(NotPrivate)
    end.

%% Fun() until it returns true, at most N times, 50 ms apart.
wait_until(Fun, N) ->
    case Fun() of
        true -> true;
        false when N =:= 0 -> false;
        false -> timer:sleep(50), wait_until(Fun, N - 1)
    end.

%% Loading a new version of module dtrace_nif (an upgrade, as l(dtrace_nif) or a
%% relup does) and purging the old one keeps handles working, and new
%% providers can be defined (the new version takes the handle type over).
%% Deleting and purging the module while a handle lives, then loading it
%% again, makes a new handle type: the old handle raises badarg (as
%% documented), its object is still removed when it is collected, and new
%% providers work.
module_reloads_keep_handles(Config) ->
    define(Config, reload, probes()),
    Results =
        in_peer(Config,
                fun() ->
                        Fire = fun() -> dtrace_provider:fire(dtrace_test_workload:provider_handle(reload), request__start, [1, "x"]) end,
                        {module, dtrace_nif} = code:load_file(dtrace_nif),
                        R1 = Fire(),
                        true = code:soft_purge(dtrace_nif),
                        R2 = Fire(),
                        %% No handle alive across this one: the type was freed.
                        Upgraded = in_process(fun() ->
                                                      {module, dtrace_nif} = code:load_file(dtrace_nif),
                                                      true = code:soft_purge(dtrace_nif),
                                                      {ok, U} = dtrace_provider:new(upgraded, [{p, [int]}]),
                                                      dtrace_provider:fire(U, p, [1])
                                              end),
                        Path = binary_to_list(dtrace_provider:path(dtrace_test_workload:provider_handle(reload))),
                        true = code:delete(dtrace_nif),
                        true = code:soft_purge(dtrace_nif),
                        {module, dtrace_nif} = code:ensure_loaded(dtrace_nif),
                        R3 = try Fire() catch error:badarg -> badarg end,
                        {ok, New} = dtrace_provider:new(after_reload, [{p, [int]}]),
                        R4 = dtrace_provider:fire(New, p, [1]),
                        whereis(reload) ! {stop, self()},
                        receive {stopped, _} -> ok end,
                        {R1, R2, Upgraded, R3, R4, wait_unmapped(Path, 100), filelib:is_file(Path),
                         dtrace:available()}
                end),
    ?assertEqual({false, false, false, badarg, false, true, false, true}, Results).

%% No heap allocation on the enabled path of fire/3 and fire/2, in the
%% test-hooks build of the library (a counting allocator; dtrace_nif:test_allocations/0
%% returns the allocations made inside NIF bodies; dtrace_robust_SUITE
%% builds it): with the semaphores raised by hand, so that every call
%% converts its arguments and runs the site, 20,000 calls with every
%% conversion rule and the huge terms (1 MB iolist, 10,000-deep lists).
%% The peer runs that build's dtrace module, so the NIFs are called
%% directly (dtrace_provider adds nothing that allocates).
no_heap_allocation_when_enabled(_Config) ->
    Peer = dtrace_test_peer:start_test_hooks_peer(),
    try
        Result =
            peer:call(Peer, erlang, apply,
                      [fun() ->
                               {ok, P} = dtrace_nif:provider_new(alloc, [{all, ?ALL_TYPES}, {two, [int, string]}]),
                               Path = binary_to_list(dtrace_nif:provider_path(P)),
                               [raise_semaphore(Path, N, 1) || N <- [all, two]],
                               All = dtrace_nif:provider_probe(P, all),
                               Huge = dtrace_props:huge_terms(),
                               Before = dtrace_nif:test_allocations(),
                               Trues = [dtrace_nif:provider_fire(P, all, all_args()) || _ <- lists:seq(1, 5000)]
                                   ++ [dtrace_nif:provider_fire(All, all_args()) || _ <- lists:seq(1, 5000)]
                                   ++ [dtrace_nif:provider_fire(P, two, [I, H]) || H <- Huge, I <- lists:seq(1, 1000)]
                                   ++ [dtrace_nif:provider_fire(All, lists:sublist(Huge ++ Huge, 12)) || _ <- lists:seq(1, 100)],
                               {lists:usort(Trues), length(Trues), Before, dtrace_nif:test_allocations()}
                       end, []], 600000),
        ct:log("enabled calls (sites run, no tracer), allocations inside NIF bodies before/after: ~p", [Result]),
        ?assertMatch({[true], N, 0, 0} when N >= 16000, Result)
    after
        peer:stop(Peer)
    end.

%%--------------------------------------------------------------------
%% Any term

%% Every function of dtrace_provider with arbitrary terms and real handles,
%% no tracer: exactly the documented results (dtrace_provider_props).
any_term_disabled(Config) ->
    Calls = in_peer(Config, fun() ->
                                    F = dtrace_provider_props:fixtures(),
                                    dtrace_provider_props:run(F, false)
                            end),
    ct:log("~b calls with arbitrary terms, no tracer: all documented", [Calls]),
    ?assert(Calls >= 10000).

%% The same while bpftrace listens on every probe of the live provider:
%% its calls return true and convert whatever they are given.
any_term_enabled(Config) ->
    Path = in_peer(Config, fun() ->
                                   Self = self(),
                                   spawn(fun() ->
                                                 F = dtrace_provider_props:fixtures(),
                                                 persistent_term:put({?MODULE, fixtures}, F),
                                                 Self ! {path, binary_to_list(dtrace_provider:path(maps:get(live, F)))},
                                                 receive never -> ok end
                                         end),
                                   receive {path, P} -> P end
                           end),
    Program = [["usdt:", Path, ":dtrace_props_live:", atom_to_list(N), " { @events = count(); }\n"]
               || {N, _} <- dtrace_provider_props:live_probes()],
    Tracer = dtrace_test_tracer:bpftrace_start(bpftrace, ?config(os_pid, Config), lists:flatten(Program)),
    Calls = in_peer(Config,
                    fun() ->
                            F = persistent_term:get({?MODULE, fixtures}),
                            Live = maps:get(live, F),
                            [dtrace_test_workload:fire_until_true(fun() -> dtrace_provider:is_enabled(Live, N) end)
                             || {N, _} <- dtrace_provider_props:live_probes()],
                            dtrace_provider_props:run(F, true)
                    end),
    Lines = dtrace_test_tracer:bpftrace_stop(Tracer),
    Events = dtrace_test_tracer:bpftrace_map(<<"@events">>, Lines),
    ct:log("~b calls with arbitrary terms, tracer attached: all documented, ~b events", [Calls, Events]),
    ?assert(Calls >= 10000),
    %% Each case fires two live probes with well-formed arguments (traced,
    %% so each is an event), and drawn terms fire some more.
    ?assert(Events >= 2 * (Calls div dtrace_provider_props:calls_per_case())).
