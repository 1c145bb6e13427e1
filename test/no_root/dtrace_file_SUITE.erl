%%% dtrace_file: the `file' functions with OTP's file-driver probes.
%%%
%%% One workload calls every wrapped function once, each step under a
%%% user tag of its own. Run with gdb attached (gdb reads all eleven
%%% arguments of efile_drv__entry), each step's events must show the
%%% command number, tag, strings, integers, port, success and errno that
%%% the step implies, and the four events of each operation must pair up
%%% by {thread_id, tag}. Run without a tracer, and under the tracer, the
%%% results must be those of `file' itself.
-module(dtrace_file_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").
-include_lib("kernel/include/file.hrl").

-export([all/0, init_per_testcase/2, end_per_testcase/2]).
-export([untraced_results_are_files/1, user_probe_tracer_leaves_file_probes_off/1,
         probes_for_each_function/1,
         bpftrace_pairs_and_histogram/1, d_script_matches_the_probes/1]).
-export([run_steps/2, worker_loop/0]).

all() ->
    [untraced_results_are_files, user_probe_tracer_leaves_file_probes_off, probes_for_each_function,
     bpftrace_pairs_and_histogram, d_script_matches_the_probes].

init_per_testcase(TC, Config) when TC =:= probes_for_each_function;
                                   TC =:= user_probe_tracer_leaves_file_probes_off ->
    dtrace_test_tracer:with_tracer(gdb, Config);
init_per_testcase(bpftrace_pairs_and_histogram, Config) ->
    dtrace_test_tracer:with_tracer(bpftrace, Config);
init_per_testcase(d_script_matches_the_probes, Config) ->
    dtrace_test_tracer:with_tracer(readelf, Config);
init_per_testcase(_TC, Config) ->
    Config.

end_per_testcase(_TC, _Config) ->
    _ = seq_trace:set_token([]),
    erase(),
    ok.

%%%===================================================================
%%% The workload
%%%===================================================================

%% {Tag, Call, ExpectedOps}. Call(M, Dir) runs with M = file or
%% dtrace_file; its result is compared between the two. ExpectedOps lists
%% the operations the step fires, in order, as
%% {Command, S1, S2, [I1, I2, I3, I4], Port, Success, Errno}, where a
%% string is a path under Dir ({path, "/a"}), null or any; an integer
%% may be a placeholder for a file descriptor (fd_a, ...: the same number
%% > 2 wherever used) and Port is self (the workload process), {pid, Key}
%% or any.
steps() ->
    [{"open-w", fun(M, D) -> keep(fd, M:open(D ++ "/a", [write, raw, binary])) end,
      [{1, {path, "/a"}, null, [2, 0, 0, 0], self, 1, 0}]},
     {"write", fun(M, _) -> M:write(get(fd), <<"hello\nworld\n">>) end,
      [{4, null, null, [fd_a, 0, 12, 0], self, 1, 0}]},
     {"position", fun(M, _) -> M:position(get(fd), {bof, 3}) end,
      [{3, null, null, [fd_a, 3, 0, 0], self, 1, 0}]},
     {"pwrite3", fun(M, _) -> M:pwrite(get(fd), 0, <<"H">>) end,
      [{24, null, null, [fd_a, 0, 1, 0], self, 1, 0}]},
     {"pwrite2", fun(M, _) -> M:pwrite(get(fd), [{1, <<"E">>}, {2, [<<"L">>, "L"]}]) end,
      [{24, null, null, [fd_a, 0, 3, 0], self, 1, 0}]},
     {"sync", fun(M, _) -> M:sync(get(fd)) end,
      [{9, null, null, [fd_a, 0, 0, 0], self, 1, 0}]},
     {"datasync", fun(M, _) -> M:datasync(get(fd)) end,
      [{30, null, null, [fd_a, 0, 0, 0], self, 1, 0}]},
     {"advise", fun(M, _) -> M:advise(get(fd), 0, 12, sequential) end,
      [{31, null, null, [fd_a, 0, 12, 2], self, 1, 0}]},
     {"close-w", fun(M, _) -> M:close(get(fd)) end,
      [{23, null, null, [fd_a, 0, 0, 0], self, 1, 0}]},
     {"open-r", fun(M, D) -> keep(fd, M:open(D ++ "/a", [read, raw, binary])) end,
      [{1, {path, "/a"}, null, [1, 0, 0, 0], self, 1, 0}]},
     {"read", fun(M, _) -> M:read(get(fd), 5) end,
      [{2, null, null, [fd_r, 0, 5, 0], self, 1, 0}]},
     {"read_line", fun(M, _) -> M:read_line(get(fd)) end,
      [{29, null, null, [fd_r, 0, 0, 0], self, 1, 0}]},
     {"pread3", fun(M, _) -> M:pread(get(fd), 6, 5) end,
      [{25, null, null, [fd_r, 0, 5, 0], self, 1, 0}]},
     {"pread2", fun(M, _) -> M:pread(get(fd), [{0, 1}, {6, 2}]) end,
      [{25, null, null, [fd_r, 0, 3, 0], self, 1, 0}]},
     {"info-fd", fun(M, _) -> M:read_file_info(get(fd)) end,
      [{5, null, null, [fd_r, 0, 0, 0], self, 1, 0}]},
     {"info-fd-opts", fun(M, _) -> M:read_file_info(get(fd), [{time, posix}]) end,
      [{5, null, null, [fd_r, 0, 0, 0], self, 1, 0}]},
     {"read-eof", fun(M, _) -> M:read(get(fd), 100), M:read(get(fd), 1) end,
      [{2, null, null, [fd_r, 0, 100, 0], self, 1, 0},
       {2, null, null, [fd_r, 0, 1, 0], self, 1, 0}]},
     {"close-r", fun(M, _) -> M:close(get(fd)) end,
      [{23, null, null, [fd_r, 0, 0, 0], self, 1, 0}]},
     %% Without raw: the file is an I/O server process.
     {"open-server", fun(M, D) -> keep(server, M:open(D ++ "/a", [read])) end,
      [{1, {path, "/a"}, null, [1, 0, 0, 0], self, 1, 0}]},
     {"read-server", fun(M, _) -> M:read(get(server), 2) end,
      [{2, null, null, [-1, 0, 2, 0], {pid, server}, 1, 0}]},
     {"close-server", fun(M, _) -> M:close(get(server)) end,
      [{23, null, null, [-1, 0, 0, 0], {pid, server}, 1, 0}]},
     {"read_file", fun(M, D) -> M:read_file(D ++ "/a") end,
      [{15, {path, "/a"}, null, [0, 0, 0, 0], self, 1, 0}]},
     {"write_file2", fun(M, D) -> M:write_file(D ++ "/b", ["ab", <<"cd">>]) end,
      [{1, {path, "/b"}, null, [2, 0, 0, 0], self, 1, 0},
       {4, null, null, [fd_b, 0, 4, 0], self, 1, 0},
       {23, null, null, [fd_b, 0, 0, 0], self, 1, 0}]},
     {"write_file3", fun(M, D) -> M:write_file(D ++ "/c", <<"xyz">>, [append]) end,
      [{1, {path, "/c"}, null, [6, 0, 0, 0], self, 1, 0},
       {4, null, null, [-1, 0, 3, 0], any, 1, 0},
       {23, null, null, [-1, 0, 0, 0], any, 1, 0}]},
     {"write_file-badarg", fun(M, D) -> M:write_file(D ++ "/never", [foo]) end,
      []},
     {"open-rw", fun(M, D) -> keep(fd, M:open(D ++ "/b", [read, write, raw])) end,
      [{1, {path, "/b"}, null, [3, 0, 0, 0], self, 1, 0}]},
     {"position-cur", fun(M, _) -> M:position(get(fd), {cur, 2}) end,
      [{3, null, null, [fd_rw, 2, 1, 0], self, 1, 0}]},
     {"truncate", fun(M, _) -> M:truncate(get(fd)) end,
      [{14, null, null, [fd_rw, 0, 0, 0], self, 1, 0}]},
     {"close-rw", fun(M, _) -> M:close(get(fd)) end,
      [{23, null, null, [fd_rw, 0, 0, 0], self, 1, 0}]},
     {"info-name", fun(M, D) -> M:read_file_info(D ++ "/b") end,
      [{5, {path, "/b"}, null, [-1, 0, 0, 0], self, 1, 0}]},
     {"info-name-opts", fun(M, D) -> M:read_file_info(list_to_binary(D ++ "/b"), [raw]) end,
      [{5, {path, "/b"}, null, [-1, 0, 0, 0], self, 1, 0}]},
     {"write_file_info", fun(M, D) -> M:write_file_info(D ++ "/b", #file_info{mode = 8#600}) end,
      [{16, null, null, [8#600, 0, 0, 0], self, 1, 0}]},
     {"write_file_info3", fun(M, D) ->
                                  M:write_file_info(D ++ "/b", #file_info{mode = 8#640}, [raw])
                          end,
      [{16, null, null, [8#640, 0, 0, 0], self, 1, 0}]},
     {"make_symlink", fun(M, D) -> M:make_symlink(D ++ "/a", D ++ "/sym") end,
      [{22, {path, "/a"}, {path, "/sym"}, [0, 0, 0, 0], self, 1, 0}]},
     {"read_link", fun(M, D) -> M:read_link(D ++ "/sym") end,
      [{20, {path, "/sym"}, null, [0, 0, 0, 0], self, 1, 0}]},
     {"read_link_all", fun(M, D) -> M:read_link_all([D, "/", 'sym']) end,
      [{20, {path, "/sym"}, null, [0, 0, 0, 0], self, 1, 0}]},
     {"read_link_info", fun(M, D) -> M:read_link_info(D ++ "/sym") end,
      [{19, {path, "/sym"}, null, [0, 0, 0, 0], self, 1, 0}]},
     {"read_link_info2", fun(M, D) -> M:read_link_info(D ++ "/sym", [{time, universal}]) end,
      [{19, {path, "/sym"}, null, [0, 0, 0, 0], self, 1, 0}]},
     {"make_link", fun(M, D) -> M:make_link(D ++ "/a", D ++ "/hard") end,
      [{21, {path, "/a"}, {path, "/hard"}, [0, 0, 0, 0], self, 1, 0}]},
     {"rename", fun(M, D) -> M:rename(D ++ "/hard", D ++ "/renamed") end,
      [{12, {path, "/hard"}, {path, "/renamed"}, [0, 0, 0, 0], self, 1, 0}]},
     {"rename-missing", fun(M, D) -> M:rename(D ++ "/missing", D ++ "/x") end,
      [{12, {path, "/missing"}, {path, "/x"}, [0, 0, 0, 0], self, 0, 2}]},
     {"delete", fun(M, D) -> M:delete(D ++ "/renamed") end,
      [{11, {path, "/renamed"}, null, [0, 0, 0, 0], self, 1, 0}]},
     {"delete2", fun(M, D) -> M:delete(D ++ "/c", [raw]) end,
      [{11, {path, "/c"}, null, [0, 0, 0, 0], self, 1, 0}]},
     {"make_dir", fun(M, D) -> M:make_dir(D ++ "/d") end,
      [{10, {path, "/d"}, null, [0, 0, 0, 0], self, 1, 0}]},
     {"make_dir-exists", fun(M, D) -> M:make_dir(D ++ "/d") end,
      [{10, {path, "/d"}, null, [0, 0, 0, 0], self, 0, 17}]},
     {"list_dir", fun(M, D) -> M:list_dir(D ++ "/d") end,
      [{7, {path, "/d"}, null, [0, 0, 0, 0], self, 1, 0}]},
     {"list_dir_all", fun(M, D) -> M:list_dir_all(list_to_binary(D ++ "/d")) end,
      [{7, {path, "/d"}, null, [0, 0, 0, 0], self, 1, 0}]},
     {"del_dir", fun(M, D) -> M:del_dir(D ++ "/d") end,
      [{13, {path, "/d"}, null, [0, 0, 0, 0], self, 1, 0}]},
     {"del_dir-missing", fun(M, D) -> M:del_dir(D ++ "/d") end,
      [{13, {path, "/d"}, null, [0, 0, 0, 0], self, 0, 2}]},
     {"read_file-missing", fun(M, D) -> M:read_file(D ++ "/missing") end,
      [{15, {path, "/missing"}, null, [0, 0, 0, 0], self, 0, 2}]},
     {"open-missing", fun(M, D) -> M:open(D ++ "/missing", [read, raw]) end,
      [{1, {path, "/missing"}, null, [1, 0, 0, 0], self, 0, 2}]},
     {"read-closed", fun(M, _) -> M:read(get(fd), 1) end,
      [{2, null, null, [-1, 0, 1, 0], self, 0, 22}]},
     %% (The result is the node's cwd, which differs between nodes.)
     {"get_cwd", fun(M, _) -> element(1, keep(cwd, M:get_cwd())) end,
      [{6, null, null, [0, 0, 0, 0], self, 1, 0}]},
     {"set_cwd", fun(M, _) -> M:set_cwd(get(cwd)) end,
      [{8, any, null, [0, 0, 0, 0], self, 1, 0}]},
     %% A worker without a tag of its own reads a file for a caller whose
     %% tag spreads: the probes carry the caller's tag.
     {"adopted", fun(M, D) -> via_worker(fun() -> M:read_file(D ++ "/a") end) end,
      [{15, {path, "/a"}, null, [0, 0, 0, 0], {pid, worker}, 1, 0}]}].

%% Runs the steps with module M in Dir, each under its tag, in a fresh
%% process. Returns {[{Tag, Result}], Context}: what the pid keys named.
run_steps(M, Dir) ->
    Self = self(),
    Pid = spawn_link(
            fun() ->
                    Worker = spawn_link(?MODULE, worker_loop, []),
                    put(worker, Worker),
                    Results = [begin
                                   dtrace:put_tag(Tag),
                                   {Tag, Call(M, Dir)}
                               end || {Tag, Call, _} <- steps()],
                    dtrace:put_tag(undefined),
                    %% No tag: the probes pass NULL.
                    Untagged = M:read_file(Dir ++ "/untagged"),
                    Context = #{self => pid_to_list(self()),
                                server => pid_to_list(get(server)),
                                worker => pid_to_list(Worker)},
                    Self ! {self(), Results ++ [{untagged, Untagged}], Context}
            end),
    receive {Pid, Results, Context} -> {Results, Context} end.

keep(Key, {ok, Value} = Result) ->
    put(Key, Value),
    Result.

via_worker(Fun) ->
    {0, _} = dtrace:spread_tag(true),
    Worker = get(worker),
    Ref = make_ref(),
    Worker ! {self(), Ref, Fun},
    receive {Ref, Result} -> dtrace:spread_tag(false), Result end.

worker_loop() ->
    receive
        {From, Ref, Fun} -> From ! {Ref, Fun()}, worker_loop()
    end.

%% Results made comparable between two runs in two directories.
normalize(Results, Dir) ->
    [{Tag, norm(R, Dir)} || {Tag, R} <- Results].

%% (A symlink's size is the length of its target, which names the dir.)
norm(#file_info{type = symlink, mode = M}, _) -> {file_info, symlink, M};
norm(#file_info{type = T, size = S, mode = M}, _) -> {file_info, T, S, M};
norm(P, _) when is_pid(P) -> pid;
norm(#file_descriptor{}, _) -> file_descriptor;
norm(B, Dir) when is_binary(B) -> binary:replace(B, list_to_binary(Dir), <<"DIR">>, [global]);
norm(L, Dir) when is_list(L) ->
    case io_lib:printable_unicode_list(L) of
        true -> lists:flatten(string:replace(L, Dir, "DIR", all));
        false -> [norm(E, Dir) || E <- L]
    end;
norm(T, Dir) when is_tuple(T) -> list_to_tuple(norm(tuple_to_list(T), Dir));
norm(X, _) -> X.

new_dir(Config, Name) ->
    Dir = filename:join(?config(priv_dir, Config), Name),
    ok = file:make_dir(Dir),
    Dir.

%%%===================================================================
%%% Tests
%%%===================================================================

%% No tracer: every function returns what `file' returns.
untraced_results_are_files(Config) ->
    false = dtrace_nif:efile_enabled(),
    FileDir = new_dir(Config, "file"),
    OursDir = new_dir(Config, "ours"),
    {FileResults, _} = run_steps(file, FileDir),
    {OurResults, _} = run_steps(dtrace_file, OursDir),
    ?assertEqual(normalize(FileResults, FileDir), normalize(OurResults, OursDir)),
    %% The workload did what it says (a check on the test itself).
    ?assertMatch({ok, <<"HELLo\nworld\n">>}, proplists:get_value("read_file", OurResults)),
    ?assertEqual({error, enoent}, proplists:get_value("rename-missing", OurResults)).

%% A tracer on the user probes (gdb, i4s4.gdb) does not turn the file
%% probes on: their semaphores are their own.
user_probe_tracer_leaves_file_probes_off(Config) ->
    Peer = dtrace_test_peer:start_peer(),
    try
        Dir = new_dir(Config, "user-probes-only"),
        {{UserProbe, FileProbes, Read}, _} =
            dtrace_test_tracer:gdb_events(
              Peer, fun() ->
                            {dtrace:is_enabled(0), dtrace_nif:efile_enabled(),
                             dtrace_file:read_file(Dir ++ "/missing")}
                    end),
        ?assertEqual({true, false, {error, enoent}}, {UserProbe, FileProbes, Read})
    after
        dtrace_test_peer:stop_peer(Peer)
    end.

probes_for_each_function(Config) ->
    Peer = dtrace_test_peer:start_peer(),
    try
        Dir = new_dir(Config, "traced"),
        false = peer:call(Peer, dtrace_nif, efile_enabled, []),
        {{Enabled, {Results, Context}}, Lines} =
            dtrace_test_tracer:gdb_events(
              Peer, "efile.gdb",
              fun() -> {dtrace_nif:efile_enabled(), run_steps(dtrace_file, Dir)} end),
        ?assert(Enabled),
        %% gdb has detached: the semaphores are down again.
        ?assertNot(peer:call(Peer, dtrace_nif, efile_enabled, [])),
        Events = [parse_event(L) || L <- Lines],
        ct:log("~p events", [length(Events)]),
        %% Results under the tracer are still file's.
        FileDir = new_dir(Config, "file-traced"),
        {FileResults, _} = run_steps(file, FileDir),
        ?assertEqual(normalize(FileResults, FileDir), normalize(Results, Dir)),
        Ops = operations(Events),
        Schedulers = peer:call(Peer, erlang, system_info, [schedulers]),
        [check_operation(Op, Schedulers) || Op <- Ops],
        %% Every operation has its own {thread_id, tag}.
        OpIds = [Id || {Id, _} <- Ops],
        ?assertEqual(length(OpIds), length(lists:usort(OpIds))),
        Fds = lists:foldl(fun({Tag, _, Expected}, Fds0) ->
                                  check_step(Tag, Expected, Ops, Dir, Context, Fds0)
                          end, #{}, steps()),
        ct:log("descriptors ~p", [Fds]),
        %% The untagged call passes NULL.
        Untagged = [Op || {_, [#{probe := "entry", s1 := S1} | _]} = Op <- Ops,
                          S1 =:= Dir ++ "/untagged"],
        ?assertMatch([{_, [#{utag := null}, _, _, #{utag := null, errno := 2}]}], Untagged),
        %% Nothing else fired: one operation per expected one.
        Expected = lists:sum([length(E) || {_, _, E} <- steps()]) + 1,
        ?assertEqual(Expected, length(Ops))
    after
        dtrace_test_peer:stop_peer(Peer)
    end.

%% The four events of one operation, in order, with one command.
check_operation({{Thread, Tag}, Events} = Op, Schedulers) ->
    ?assert(Thread >= 1 andalso Thread =< Schedulers, Op),
    ?assert(Tag >= 1, Op),
    ?assertMatch([#{probe := "entry", cmd := C}, #{probe := "int_entry", cmd := C},
                  #{probe := "int_return", cmd := C}, #{probe := "return", cmd := C}],
                 Events, Op),
    [#{utag := UTag} | _] = Events,
    ?assertMatch(#{utag := UTag}, lists:last(Events), Op).

check_step(Tag, Expected, Ops, Dir, Context, Fds) ->
    Mine = [Events || {_, [#{probe := "entry", utag := U} | _] = Events} <- Ops, U =:= Tag],
    length(Mine) =:= length(Expected)
        orelse ct:fail("step ~s: expected ~p operations, got ~p", [Tag, length(Expected), Mine]),
    lists:foldl(
      fun({Events, {Cmd, S1, S2, Ints, Port, Success, Errno}}, Fds0) ->
              [Entry, _, _, Return] = Events,
              Where = {step, Tag, Entry, Return},
              ?assertEqual(Cmd, maps:get(cmd, Entry), Where),
              check_string(S1, maps:get(s1, Entry), Dir, Where),
              check_string(S2, maps:get(s2, Entry), Dir, Where),
              check_port(Port, maps:get(port, Entry), Context, Where),
              ?assertEqual({Success, Errno}, {maps:get(success, Return), maps:get(errno, Return)},
                           Where),
              check_ints(Ints, maps:get(ints, Entry), Fds0, Where)
      end, Fds, lists:zip(Mine, Expected)).

check_string(any, _, _, _) -> ok;
check_string(null, Got, _, Where) -> ?assertEqual(null, Got, Where);
check_string({path, P}, Got, Dir, Where) -> ?assertEqual(Dir ++ P, Got, Where).

check_port(any, _, _, _) -> ok;
check_port(self, Got, #{self := Self}, Where) -> ?assertEqual(Self, Got, Where);
check_port({pid, Key}, Got, Context, Where) -> ?assertEqual(maps:get(Key, Context), Got, Where).

%% Placeholders (atoms) name one descriptor: a number > 2, the same in
%% every step that uses the placeholder.
check_ints(Expected, Got, Fds, Where) ->
    lists:foldl(
      fun({E, G}, Acc) when is_integer(E) -> ?assertEqual(E, G, Where), Acc;
         ({Fd, G}, Acc) ->
              ?assert(G > 2, Where),
              case Acc of
                  #{Fd := Known} -> ?assertEqual(Known, G, {Fd, Where}), Acc;
                  _ -> Acc#{Fd => G}
              end
      end, Fds, lists:zip(Expected, Got)).

%% Groups events by {thread_id, tag}, in the order they arrived.
operations(Events) ->
    {Order, Map} = lists:foldl(
                     fun(#{op := Op} = E, {O, M}) ->
                             case M of
                                 #{Op := Es} -> {O, M#{Op := [E | Es]}};
                                 _ -> {[Op | O], M#{Op => [E]}}
                             end
                     end, {[], #{}}, Events),
    [{Op, lists:reverse(maps:get(Op, Map))} || Op <- lists:reverse(Order)].

%% "EVENT entry op=1,5 utag=x cmd=1 s1=/p s2=NULL ints=2,0,0,0 port=<0.9.0>"
parse_event(Line) ->
    [<<"EVENT">>, Probe | Fields] = binary:split(Line, <<" ">>, [global]),
    lists:foldl(fun(Field, Acc) ->
                        [K, V] = binary:split(Field, <<"=">>),
                        field(binary_to_atom(K), binary_to_list(V), Acc)
                end, #{probe => binary_to_list(Probe)}, Fields).

field(op, V, Acc) -> [T, G] = string:split(V, ","), Acc#{op => {list_to_integer(T), list_to_integer(G)}};
field(ints, V, Acc) -> Acc#{ints => [list_to_integer(I) || I <- string:split(V, ",", all)]};
field(K, V, Acc) when K =:= cmd; K =:= success; K =:= errno -> Acc#{K => list_to_integer(V)};
field(K, "NULL", Acc) -> Acc#{K => null};
field(K, V, Acc) -> Acc#{K => V}.

%% priv/bpftrace/efile.bt on a real node: operations print with their tags, entry
%% and return pair up by {thread_id, tag}, and the per-tag latency
%% histograms count one operation per call.
bpftrace_pairs_and_histogram(Config) ->
    %% A short path: bpftrace cuts strings at 64 bytes.
    Dir = "/tmp/dtrace-efile-" ++ os:getpid(),
    _ = file:del_dir_r(Dir),
    ok = file:make_dir(Dir),
    ok = file:write_file(Dir ++ "/f", <<"data">>),
    {ok, Script} = file:read_file(filename:join([code:priv_dir(dtrace), "bpftrace", "efile.bt"])),
    _ = Config,
    Peer = dtrace_test_peer:start_peer(),
    try
        Ready = fun() -> dtrace:put_tag("ready"), dtrace_file:read_file_info("/") end,
        Workload =
            fun() ->
                    dtrace:put_tag("slow"),
                    R1 = [dtrace_file:read_file(Dir ++ "/f") || _ <- lists:seq(1, 5)],
                    dtrace:put_tag("fast"),
                    R2 = [dtrace_file:read_file_info(Dir) || _ <- lists:seq(1, 3)],
                    dtrace:put_tag("err"),
                    R3 = dtrace_file:rename(Dir ++ "/missing", Dir ++ "/x"),
                    dtrace:put_tag(undefined),
                    R4 = dtrace_file:list_dir(Dir),
                    {R1, [element(1, R) || R <- R2], R3, R4}
            end,
        {Result, Lines} =
            dtrace_test_tracer:bpftrace_window(Peer, Script, Ready,
                                            [{contains, <<"tag=ready ok in">>}], Workload),
        ?assertEqual({lists:duplicate(5, {ok, <<"data">>}), [ok, ok, ok], {error, enoent},
                      {ok, ["f"]}}, Result),
        Bin = list_to_binary(Dir),
        Mine = [parse_bt(L) || <<"efile ", _/binary>> = L <- Lines,
                               binary:match(L, <<"tag=ready">>) =:= nomatch],
        Entries = [E || {entry, _, _, _, _} = E <- Mine],
        Returns = [R || {return, _, _, _, _} = R <- Mine],
        ?assertEqual(lists:duplicate(5, {<<"READ_FILE(15)">>, <<"slow">>, <<"s1=", Bin/binary, "/f">>})
                     ++ lists:duplicate(3, {<<"FSTAT(5)">>, <<"fast">>, <<"s1=", Bin/binary>>})
                     ++ [{<<"RENAME(12)">>, <<"err">>, <<"s1=", Bin/binary, "/missing">>},
                         {<<"READDIR(7)">>, <<>>, <<"s1=", Bin/binary>>}],
                     [{C, T, S} || {entry, C, _, T, S} <- Entries]),
        ?assertEqual(lists:duplicate(5, {<<"slow">>, <<"ok">>})
                     ++ lists:duplicate(3, {<<"fast">>, <<"ok">>})
                     ++ [{<<"err">>, <<"error errno=2">>}, {<<>>, <<"ok">>}],
                     [{T, Outcome} || {return, _, _, T, Outcome} <- Returns]),
        %% Each entry's {thread_id, tag} has exactly one return, and all differ.
        EntryOps = [Op || {entry, _, Op, _, _} <- Entries],
        ?assertEqual(EntryOps, [Op || {return, _, Op, _, _} <- Returns]),
        ?assertEqual(length(EntryOps), length(lists:usort(EntryOps))),
        ?assertEqual([5, 3, 1, 1], [histogram_count(<<"@latency_us[", T/binary, "]:">>, Lines)
                                    || T <- [<<"slow">>, <<"fast">>, <<"err">>, <<>>]])
    after
        dtrace_test_peer:stop_peer(Peer),
        file:del_dir_r(Dir)
    end.

%% "efile READ_FILE(15) {1,7} tag=slow s1=/p s2=" or
%% "efile READ_FILE(15) {1,7} tag=slow ok in 31 us" or
%% "efile RENAME(12) {1,8} tag=err error errno=2 in 40 us"
parse_bt(Line) ->
    [<<"efile">>, Command, Op, <<"tag=", Tag/binary>> | Rest] =
        binary:split(Line, <<" ">>, [global]),
    case Rest of
        [<<"s1=", _/binary>> = S1, _S2] -> {entry, Command, Op, Tag, S1};
        [<<"ok">>, <<"in">>, _, <<"us">>] -> {return, Command, Op, Tag, <<"ok">>};
        [<<"error">>, Errno, <<"in">>, _, <<"us">>] ->
            {return, Command, Op, Tag, <<"error ", Errno/binary>>}
    end.

%% The number of values in the bpftrace histogram printed under Header.
histogram_count(Header, Lines) ->
    case lists:dropwhile(fun(L) -> string:trim(L) =/= Header end, Lines) of
        [_ | Buckets] ->
            lists:sum([binary_to_integer(N)
                       || <<"[", _/binary>> = B <- lists:takewhile(fun(L) -> L =/= <<>> end, Buckets),
                          [N | _] <- [string:lexemes(lists:nth(2, binary:split(B, <<")">>)), " ")]]);
        [] ->
            ct:fail("~s not in the tracer's output: ~p", [Header, Lines])
    end.

%% Each probe priv/dtrace/efile_drv.d names exists in the library with at least as
%% many arguments as the clause reads (dtrace_dtrace_SUITE runs the script
%% under DTrace, where a DTrace can run).
d_script_matches_the_probes(_Config) ->
    {ok, D} = file:read_file(filename:join([code:priv_dir(dtrace), "dtrace", "efile_drv.d"])),
    {0, Notes} = dtrace_test_tracer:run("readelf", ["-n", dtrace_test_catalogue:nif_path()]),
    Arity = note_arities(Notes, #{}),
    Clauses = re:split(D, "^}", [multiline]),
    Uses = lists:append([clause_uses(C) || C <- Clauses]),
    ?assertEqual(["efile_drv__entry", "efile_drv__int_entry", "efile_drv__int_return",
                  "efile_drv__return"], lists:usort([P || {P, _} <- Uses])),
    [?assert(Max < maps:get(P, Arity), {P, reads_arg, Max, has, maps:get(P, Arity)})
     || {P, Max} <- Uses],
    ?assertEqual(#{"efile_drv__entry" => 11, "efile_drv__int_entry" => 3,
                   "efile_drv__int_return" => 3, "efile_drv__return" => 6},
                 maps:with(["efile_drv__entry", "efile_drv__int_entry",
                            "efile_drv__int_return", "efile_drv__return"], Arity)).

%% Probe name => number of arguments, from readelf -n.
note_arities([<<"    Name: ", Name/binary>>, _Location, <<"    Arguments:", Args/binary>> | Rest],
             Acc) ->
    note_arities(Rest, Acc#{binary_to_list(Name) => length(string:lexemes(Args, " "))});
note_arities([_ | Rest], Acc) ->
    note_arities(Rest, Acc);
note_arities([], Acc) ->
    Acc.

%% [{Probe, HighestArgumentIndexRead}] for one D clause.
clause_uses(Clause) ->
    Probes = [binary_to_list(binary:replace(P, <<"-">>, <<"__">>))
              || [P] <- match_all(Clause, "erlang\\*:::(efile_drv-[a-z_]+)")],
    Indexes = [binary_to_integer(N) || [N] <- match_all(Clause, "\\barg([0-9])\\b")]
        ++ [binary_to_integer(N) || [N] <- match_all(Clause, "args\\[([0-9]+)\\]")],
    [{P, lists:max([-1 | Indexes])} || P <- Probes].

match_all(Subject, Re) ->
    case re:run(Subject, Re, [global, {capture, all_but_first, binary}]) of
        {match, M} -> M;
        nomatch -> []
    end.
