%% priv/bin/dtrace-attach on nodes deployed without the library: a peer whose
%% code path has no dtrace, reached by name and cookie as an operator
%% reaches a production node. Attached, a real tracer (bpftrace) sees its
%% user probe and a VM probe; detached, the node is as it was: no module
%% of the library, OTP's dyntrace, no trace flag of automatic mode, the
%% application gone, and the script says what stays mapped. A node that
%% cannot see the installation's files (its own mount namespace, as in a
%% container) gets a copy, traced through /proc/PID/root. Then 20
%% attach/detach cycles, and what the script refuses.
-module(dtrace_attach_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").
-include_lib("kernel/include/file.hrl").

-export([suite/0, all/0, init_per_testcase/2, end_per_testcase/2]).
-export([attach_trace_detach/1, attach_copies_unseen_files/1, attach_detach_20_times/1, refusals/1,
         failed_start_undone/1, function_spans_say_why/1, release_attached_20_times/1]).

-define(COOKIE, "dtrace_attach_suite").

suite() ->
    [{timetrap, {minutes, 5}}].

all() ->
    [attach_trace_detach, attach_copies_unseen_files, attach_detach_20_times, refusals, failed_start_undone,
     function_spans_say_why, release_attached_20_times].

init_per_testcase(release_attached_20_times, Config) ->
    %% The release is the node: no peer.
    [{peer, none} | Config];
init_per_testcase(function_spans_say_why, Config) ->
    init_per_testcase(attach_trace_detach, Config);
init_per_testcase(attach_trace_detach, Config) ->
    case dtrace_test_tracer:require_tracer(bpftrace) of
        ok -> start(Config);
        Skip -> Skip
    end;
init_per_testcase(attach_copies_unseen_files, Config) ->
    %% A node in a mount namespace of its own, as dtrace_container_SUITE's:
    %% in a chroot its maps name paths outside it (that suite's doc).
    InChroot = os:getenv("DTRACE_TEST_CHROOT") =:= "1",
    case {dtrace_test_tracer:require_tracer(bpftrace), os:find_executable("unshare")} of
        _ when InChroot -> {skip, "in a chroot (DTRACE_TEST_CHROOT=1)"};
        {ok, false} -> {skip, "no unshare (util-linux)"};
        {ok, _} ->
            %% A copy of the installation in a directory the node's own mount
            %% namespace hides (a tmpfs over it).
            Hidden = filename:join(?config(priv_dir, Config), "hidden"),
            Lib = filename:join(Hidden, "dtrace"),
            AppDir = filename:dirname(filename:dirname(code:which(dtrace))),
            ok = filelib:ensure_path(Lib),
            {0, _} = dtrace_test_tracer:run("cp", ["-RL", filename:join(AppDir, "ebin"),
                                                   filename:join(AppDir, "priv"), Lib]),
            Exec = {os:find_executable("unshare"),
                    ["-m", "--propagation", "private", "sh", "-c", "mount -t tmpfs none \"$0\" && exec \"$@\"",
                     Hidden, os:find_executable("erl")]},
            [{lib, Lib} | start([{exec, Exec} | Config])];
        {Skip, _} -> Skip
    end;
init_per_testcase(failed_start_undone, Config) ->
    %% An application environment the library refuses to start with (its
    %% slow-span threshold must be a positive integer).
    start([{extra_args, ["-dtrace", "slow_span_us", "bad"]} | Config]);
init_per_testcase(_TC, Config) ->
    start(Config).

end_per_testcase(release_attached_20_times, _Config) ->
    ok;
end_per_testcase(_TC, Config) ->
    dtrace_test_peer:stop_peer(?config(peer, Config)).

%% A distributed peer with no dtrace on its code path (only the test
%% directories, for the workload's funs: this suite's, and its helpers',
%% another when Common Test runs the suite from test/root), driven over
%% standard I/O.
start(Config) ->
    TestDirs = lists:append([["-pa", D] || D <- lists:usort([filename:dirname(code:which(M))
                                                             || M <- [?MODULE, dtrace_test_workload]])]),
    Exec = case proplists:get_value(exec, Config) of
               undefined -> #{};
               E -> #{exec => E}
           end,
    {ok, Peer, Node} = peer:start_link(Exec#{name => peer:random_name(attach), longnames => false,
                                             connection => standard_io,
                                             wait_boot => dtrace_test_tracer:ceiling(15000),
                                             args => ["-setcookie", ?COOKIE | TestDirs]
                                                 ++ proplists:get_value(extra_args, Config, [])}),
    non_existing = peer:call(Peer, code, which, [dtrace]),
    [{peer, Peer}, {node, atom_to_list(Node)} | Config].

%%--------------------------------------------------------------------

%% Attached: the script names the node's OS pid and the probes' library;
%% bpftrace on that pid sees dtrace:p/3 with its values and a spawn (a VM
%% probe: automatic mode set trace flags). Detached: none of that is left.
attach_trace_detach(Config) ->
    Peer = ?config(peer, Config),
    OsPid = peer:call(Peer, os, getpid, []),
    {0, Out} = attach(Config, []),
    ?assert(has(Out, ["attached dtrace to ", ?config(node, Config), " (OS pid ", OsPid, ", OTP "])),
    ?assert(has(Out, ["  available: true"])),
    ?assert(has(Out, ["  dyntrace: the library's"])),
    {Spawned, Lines} =
        dtrace_test_tracer:bpftrace_window(
          dtrace_bpftrace, Peer, "
            usdt:$SO:erlang:user_trace__i4s4 {
                if (arg2 == 0) { printf(\"SEEN i4s4\\n\"); } else { printf(\"P %ld %ld %s\\n\", arg2, arg3, str(arg6)); }
            }
            usdt:$SO:erlang:process__spawn { printf(\"SPAWN %s\\n\", str(arg0)); }",
          fun() -> dtrace:p(0), spawn(fun() -> ok end) end,
          [<<"SEEN i4s4">>, {contains, <<"SPAWN ">>}],
          fun() ->
                  true = dtrace:p(7, 8, "attached"),
                  {P, Ref} = spawn_monitor(fun() -> ok end),
                  receive {'DOWN', Ref, process, P, _} -> pid_to_list(P) end
          end,
          fun(P, Ls) -> lists:member(<<"P 7 8 attached">>, Ls) andalso
                            lists:member(iolist_to_binary(["SPAWN ", P]), Ls) end),
    ?assert(lists:member(<<"P 7 8 attached">>, Lines)),
    ?assert(lists:member(iolist_to_binary(["SPAWN ", Spawned]), Lines)),
    %% Automatic mode lowers its flags once the tracer is gone (within a
    %% poll); detach then stops it altogether.
    {0, Detached} = attach(Config, ["--detach"]),
    ?assert(has(Detached, ["detached dtrace from ", ?config(node, Config)])),
    ?assert(has(Detached, ["  dyntrace: OTP's"])),
    ?assert(has(Detached, ["/dtrace_nif.so: the tracer modules' libraries took a reference"])),
    as_before(Peer, ebin()),
    {0, Status} = attach(Config, ["--status"]),
    ?assert(has(Status, [?config(node, Config), " (OS pid ", OsPid, "): no dtrace; dyntrace: OTP's"])).

%% Code that never calls the library, on a node deployed without it:
%% priv/bin/dtrace-slow-spans --node --function attaches the library through
%% dtrace-attach, breaks a slow call of that function down and names its
%% cause (a sleep: scheduled out in timer:sleep/1); stopped, it turns the
%% function spans off (no call-trace pattern), and detach leaves the node
%% as it was.
function_spans_say_why(Config) ->
    Peer = ?config(peer, Config),
    MFA = {dtrace_test_workload, fspan, 2},
    {module, _} = peer:call(Peer, code, ensure_loaded, [dtrace_test_workload]),
    ?assertMatch({2, _}, attach(Config, ["--function", "dtrace_test_workload:fspan"])),
    Script = filename:join([code:priv_dir(dtrace), "bin", "dtrace-slow-spans"]),
    Port = open_port({spawn_executable, Script},
                     [{args, ["--node", ?config(node, Config), "--cookie", ?COOKIE,
                              "--function", "dtrace_test_workload:fspan/2", "--threshold", "10"]},
                      {line, 65536}, stderr_to_stdout, exit_status, binary]),
    %% Ready once a slow call's breakdown names its sleep (the tracer
    %% attaches probe by probe; the patterns follow within a poll).
    Sleep = fun(Blocks) -> [B || {_, Cause, B} <- Blocks, Cause =:= <<"scheduled out in timer:sleep/1">>] end,
    ok = peer:call(Peer, dtrace_test_workload, start_ready_loop, [fun() -> dtrace_test_workload:fspan(0, 12) end]),
    Lines0 = dtrace_test_why:collect(Port, [], fun(Ls) -> Sleep(blocks(Ls)) =/= [] end, dtrace_test_tracer:ceiling(60000)),
    Pid = peer:call(Peer, dtrace_test_workload, stop_ready_loop_and_run,
                    [fun() -> ok = dtrace_test_workload:fspan(2, 40), pid_to_list(self()) end]),
    Mine = fun(Ls) -> [B || {P, Cause, B} <- blocks(Ls), P =:= list_to_binary(Pid),
                            Cause =:= <<"scheduled out in timer:sleep/1">>] end,
    Lines = dtrace_test_why:stop(Port, dtrace_test_why:collect(Port, Lines0, fun(Ls) -> Mine(Ls) =/= [] end,
                                                               dtrace_test_tracer:ceiling(30000))),
    ct:log("dtrace-slow-spans printed:~n~ts", [lists:join("\n", Lines)]),
    ?assert(has(Lines, ["attached dtrace to ", ?config(node, Config)])),
    ?assert(has(Lines, [": function spans on dtrace_test_workload:fspan/2"])),
    [Block] = Mine(Lines),
    ?assertMatch({match, _}, re:run(Block, "slow span: dtrace_test_workload:fspan/2 [0-9.]+ ms, tag \\(none\\)")),
    ?assertEqual([], maps:get(function_spans, peer:call(Peer, dtrace, vm_probes, []))),
    ok = peer:call(Peer, dtrace_vm, sync, []),
    ?assertEqual({traced, false}, peer:call(Peer, erlang, trace_info, [MFA, traced])),
    {0, _} = attach(Config, ["--detach"]),
    as_before(Peer, ebin()).

%% {Pid, Cause, Block} of each breakdown dtrace-slow-spans printed.
blocks(Lines) ->
    blocks(Lines, []).

blocks([], Acc) ->
    lists:reverse(Acc);
blocks([L | Rest], Acc) ->
    case re:run(L, <<"slow span: .* pid (<[0-9.]+>)">>, [{capture, all_but_first, binary}]) of
        {match, [Pid]} ->
            {Body, Rest1} = lists:splitwith(fun(X) -> binary:match(X, <<"slow span: ">>) =:= nomatch
                                                          andalso string:trim(X) =/= <<>> end, Rest),
            Cause = case [C || B <- Body, {match, [C]} <- [re:run(B, <<"cause: (.*), [0-9.]+ ms">>,
                                                                  [{capture, all_but_first, binary}])]] of
                        [C | _] -> C;
                        [] -> <<>>
                    end,
            blocks(Rest1, [{Pid, Cause, iolist_to_binary(lists:join("\n", [L | Body]))} | Acc]);
        nomatch ->
            blocks(Rest, Acc)
    end.

%% A release built without the library (rebar3's release template, relx),
%% run as operators run one (bin/NAME daemon), reached by its directory
%% (--release: name and cookie from its vm.args), then by its own eval
%% command (--eval "bin/NAME eval"), then by its name and cookie: attached and detached 20 times in a row, each detach
%% unloading the library's modules; after the last, the node has no
%% dtrace and OTP's dyntrace (or none) as before.
release_attached_20_times(Config) ->
    Priv = ?config(priv_dir, Config),
    %% The release's build and its node must not see this run's rebar3,
    %% escript and code path settings.
    Env = [{"REBAR_BASE_DIR", false}, {"ESCRIPT_NAME", false}, {"ERL_LIBS", false}, {"ERL_FLAGS", false},
           {"ERL_AFLAGS", false}, {"ERL_ZFLAGS", false}],
    {0, _} = sh(Priv, "rebar3 new release dtrace_plain", Env),
    App = filename:join(Priv, "dtrace_plain"),
    Sname = "dtrace_plain_" ++ os:getpid(),
    Cookie = "dtrace_plain_" ++ integer_to_list(erlang:unique_integer([positive])),
    ok = file:write_file(filename:join([App, "config", "vm.args"]), ["-sname ", Sname, "\n-setcookie ", Cookie, "\n"]),
    {0, _} = sh(App, "rebar3 release", Env),
    Bin = filename:join([App, "_build", "default", "rel", "dtrace_plain", "bin", "dtrace_plain"]),
    {0, _} = sh(App, Bin ++ " daemon", Env),
    {ok, Host} = inet:gethostname(),
    Node = Sname ++ "@" ++ Host,
    try
        Up = fun() -> sh(App, Bin ++ " ping", Env) =:= {0, [<<"pong">>]} end,
        ok = dtrace_test_workload:wait_until(Up, dtrace_test_tracer:ceiling(30000)),
        %% The first cycle names the release's directory only: the node's
        %% name and cookie come from its vm.args. The second names the
        %% release's eval command: the node says its name and cookie.
        RelDir = filename:dirname(filename:dirname(Bin)),
        Run = fun(1, Extra) ->
                      R = dtrace_test_tracer:run(script(), ["--release", RelDir | Extra]),
                      ct:log("dtrace-attach --release ~ts ~p: ~p", [RelDir, Extra, R]),
                      R;
                 (2, Extra) ->
                      R = dtrace_test_tracer:run(script(), ["--eval", Bin ++ " eval" | Extra]),
                      ct:log("dtrace-attach --eval '~ts eval' ~p: ~p", [Bin, Extra, R]),
                      R;
                 (_, Extra) ->
                      attach([{node, Node} | Config], ["--cookie", Cookie | Extra])
              end,
        Cycle = fun(I) ->
                        {0, A} = Run(I, []),
                        {0, D} = Run(I, ["--detach"]),
                        {I, has(A, ["attached dtrace to ", Node]), has(D, ["detached dtrace from ", Node])}
                end,
        ?assertEqual([{I, true, true} || I <- lists:seq(1, 20)], [Cycle(I) || I <- lists:seq(1, 20)]),
        {0, Status} = attach([{node, Node} | Config], ["--cookie", Cookie, "--status"]),
        ?assert(has(Status, [Node, " (OS pid "]) andalso has(Status, ["): no dtrace; dyntrace: "])),
        ?assertNot(has(Status, ["dyntrace: the library's"]))
    after
        sh(App, Bin ++ " stop", Env)
    end.

%% Cmd through sh in Dir, with Env: {ExitStatus, Lines}.
sh(Dir, Cmd, Env) ->
    Port = open_port({spawn_executable, "/bin/sh"},
                     [{args, ["-c", Cmd]}, {cd, Dir}, {env, Env}, {line, 65536}, stderr_to_stdout, exit_status,
                      binary]),
    Out = sh_collect(Port, []),
    ct:log("~ts (in ~ts): ~p", [Cmd, Dir, Out]),
    Out.

sh_collect(Port, Acc) ->
    receive
        {Port, {data, {_, Line}}} -> sh_collect(Port, [Line | Acc]);
        {Port, {exit_status, S}} -> {S, lists:reverse(Acc)}
    after dtrace_test_tracer:ceiling(120000) ->
            ct:fail("still running after ~b ms: ~p", [dtrace_test_tracer:ceiling(120000), lists:reverse(Acc)])
    end.

%% The node does not see the installation (a tmpfs hides it): the script
%% copies ebin/ and priv/ over the connection, bpftrace reaches the copy
%% through /proc/PID/root, and detach removes the copy.
attach_copies_unseen_files(Config) ->
    Peer = ?config(peer, Config),
    Lib = ?config(lib, Config),
    false = peer:call(Peer, filelib, is_dir, [filename:join(Lib, "ebin")]),
    {0, Out} = attach(Config, ["--lib", Lib]),
    OsPid = peer:call(Peer, os, getpid, []),
    %% A directory of its own: the node's pid, a random part.
    [Copy] = [C || L <- Out, {match, [C]} <- [re:run(L, " does not see this installation's files: copied [0-9]+ "
                                                        "files \\([0-9]+ bytes\\) to (/tmp/dtrace-attach-"
                                                        ++ OsPid ++ "-[0-9a-f]{12}) there$",
                                                        [{capture, all_but_first, list}])]],
    ?assertMatch({ok, #file_info{mode = Mode}} when Mode band 8#777 =:= 8#700, file:read_file_info(Copy)),
    ?assert(has(Out, ["  probes' library: ", Copy, "/priv/dtrace_nif.so"])),
    So = "/proc/" ++ OsPid ++ "/root" ++ Copy ++ "/priv/dtrace_nif.so",
    {true, Lines} =
        dtrace_test_tracer:bpftrace_window(
          Peer, "usdt:" ++ So ++ ":erlang:user_trace__i4s4 {
                if (arg2 == 0) { printf(\"SEEN\\n\"); } else { printf(\"P %ld\\n\", arg2); } }",
          fun() -> dtrace:p(0) end, [<<"SEEN">>], fun() -> dtrace:p(43) end),
    ?assert(lists:member(<<"P 43">>, Lines)),
    {0, Detached} = attach(Config, ["--detach"]),
    ?assert(has(Detached, [", copy ", Copy, " removed"])),
    as_before(Peer, Copy ++ "/ebin"),
    ?assertEqual(false, filelib:is_dir(Copy)).

%% 20 cycles: each attach starts the library, each detach leaves the node
%% as it was.
attach_detach_20_times(Config) ->
    Peer = ?config(peer, Config),
    [begin
         {0, _} = attach(Config, []),
         true = peer:call(Peer, dtrace, available, []),
         {0, _} = attach(Config, ["--detach"]),
         as_before(Peer, ebin())
     end || _ <- lists:seq(1, 20)],
    ok.

%% What the script refuses, each with its reason and exit status 1, the
%% node unchanged: no cookie, a wrong cookie, another version of the
%% library on the node, detaching a library it did not attach.
refusals(Config) ->
    Peer = ?config(peer, Config),
    Empty = filename:join(?config(priv_dir, Config), "home"),
    ok = filelib:ensure_path(Empty),
    {1, NoCookie} = dtrace_test_tracer:run("env", ["HOME=" ++ Empty, script(), ?config(node, Config)]),
    ?assert(has(NoCookie, ["dtrace-attach: no cookie: give --cookie or --cookie-file"])),
    {1, Wrong} = dtrace_test_tracer:run(script(), [?config(node, Config), "--cookie", "not_its_cookie"]),
    ?assert(has(Wrong, ["dtrace-attach: cannot connect to ", ?config(node, Config)])),
    ok = peer:call(Peer, application, load, [{application, dtrace, [{vsn, "0.0.1"}, {modules, []},
                                                                   {applications, [kernel, stdlib]}]}]),
    {1, Other} = attach(Config, []),
    ?assert(has(Other, ["dtrace-attach: ", ?config(node, Config), " already has dtrace 0.0.1 from "])),
    ok = peer:call(Peer, application, unload, [dtrace]),
    %% The node's own library (on its code path, loaded by itself).
    Ebin = filename:dirname(code:which(dtrace)),
    true = peer:call(Peer, code, add_patha, [Ebin]),
    ok = peer:call(Peer, application, load, [dtrace]),
    {1, Own} = attach(Config, ["--detach"]),
    ?assert(has(Own, ["was not attached by dtrace-attach: it is the node's own"])),
    {1, Again} = attach(Config, []),
    ?assert(has(Again, [" already has dtrace "])),
    ?assertMatch({ok, _}, peer:call(Peer, application, get_key, [dtrace, vsn])).

%% The application does not start on the node: the attach is undone, the
%% node as before.
failed_start_undone(Config) ->
    {1, Out} = attach(Config, []),
    ?assert(has(Out, ["dtrace-attach: attach failed, undoing it"])),
    ?assert(has(Out, ["the dtrace application did not start: "])),
    as_before(?config(peer, Config), ebin()).

%%--------------------------------------------------------------------

script() ->
    filename:join([code:priv_dir(dtrace), "bin", "dtrace-attach"]).

ebin() ->
    filename:dirname(code:which(dtrace)).


%% priv/bin/dtrace-attach NODE --cookie ?COOKIE Extra...: {ExitStatus, Lines}.
attach(Config, Extra) ->
    {Status, Out} = dtrace_test_tracer:run(script(), [?config(node, Config), "--cookie", ?COOKIE | Extra]),
    ct:log("dtrace-attach ~p: exit status ~p~n~ts", [Extra, Status, lists:join("\n", Out)]),
    {Status, Out}.

%% A line of Lines contains the concatenation of Parts.
has(Lines, Parts) ->
    Prefix = iolist_to_binary(Parts),
    lists:any(fun(L) -> binary:match(L, Prefix) =/= nomatch end, Lines).

%% The node as before the attach: no module loaded from the library's
%% Ebin, OTP's dyntrace (or none), no dtrace application, no process traced
%% by automatic mode.
as_before(Peer, Ebin) ->
    Ours = [M || {M, F} <- peer:call(Peer, code, all_loaded, []), is_list(F), lists:prefix(Ebin, F)],
    ?assertEqual([], Ours),
    ?assertEqual(non_existing, peer:call(Peer, code, which, [dtrace])),
    ?assertEqual(false, lists:keymember(dtrace, 1, peer:call(Peer, application, loaded_applications, []))),
    case peer:call(Peer, code, is_loaded, [dyntrace]) of
        false -> ok;
        {file, File} -> ?assertMatch({match, _}, re:run(File, "/runtime_tools-[^/]+/ebin/dyntrace\\.beam$"))
    end,
    ?assertEqual([], peer:call(Peer, dtrace_test_workload, our_traced, [])).
