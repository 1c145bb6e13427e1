%%% The operators' kit (make kit, scripts/kit.sh) on hosts with nothing
%%% built: its image's root (kit/Dockerfile's steps, scripts/kit-image.sh;
%%% the root kit-trixie of scripts/guest.sh: Debian 13 with only bpftrace
%%% and python3, no Erlang, rebar3 or cargo) gets this checkout's x86_64 kit
%%% copied in as the recipe's COPY would, and runs the recipe's unpacking
%%% step; then, with only what the kit and the root hold, each case
%%% reaches a node deployed without the library, as an operator would:
%%% - a relx release (rebar3's release template, its runtime included: no
%%%   compiler, no crypto) on this host's OTP 25, by its OS pid alone: the
%%%   release's own escript runs the attach tool in the node's root, the
%%%   name and cookie come from its vm.args;
%%% - Debian sid's RabbitMQ on OTP 29, run in the sid-userland root as a
%%%   container runs (scripts/guest.sh container: its own mount namespace
%%%   and root), by its OS pid, name and cookie file.
%%% Each attach picks the beams for the node's OTP (lib/otp25 on 25,
%%% lib/otp27 on 29); dtrace-attach --function makes a slow function a span
%%% and priv/bin/dtrace-slow-spans prints a slow call with its cause; the
%%% time from unpacking to that first cause is measured (the cases'
%%% comments); --detach leaves the node with no module or application of
%%% the library, its copy removed, and mapped exactly the files the tool
%%% names. A fresh root per case.
%%%
%%% Skipped in the chroots of make test-trixie and make test-sid
%%% (DTRACE_TEST_CHROOT=1): it starts chroots of its own; make test runs
%%% it on the host.
-module(dtrace_kit_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([suite/0, all/0, init_per_suite/1, end_per_suite/1, init_per_testcase/2, end_per_testcase/2]).
-export([release_on_otp25/1, rabbitmq_on_otp29/1]).

-define(TARGET, "x86_64-unknown-linux-gnu").
%% The root of kit/Dockerfile's image.
-define(ROOT, "kit-trixie").

suite() ->
    [{timetrap, {minutes, 10}}].

all() ->
    [release_on_otp25, rabbitmq_on_otp29].

init_per_suite(Config) ->
    case {os:getenv("DTRACE_TEST_CHROOT"), dtrace_test_tracer:require_tracer(bpftrace)} of
        {"1", _} -> {skip, "in a chroot (DTRACE_TEST_CHROOT=1): the suite starts chroots of its own"};
        {_, ok} -> build_kit(Config);
        {_, Skip} -> Skip
    end.

end_per_suite(_Config) ->
    _ = net_kernel:stop(),
    ok.

%% The host target's kit, in the suite's directory (its build: dist.sh's
%% cargo build, cached in target/, and the beams of OTP 25 and 27).
build_kit(Config) ->
    Dist = filename:join(?config(priv_dir, Config), "dist"),
    {0, Lines} = dtrace_test_tracer:build("sh", [script("kit.sh"), "-o", Dist, ?TARGET]),
    [Kit] = [K || L <- Lines, {match, [K]} <- [re:run(L, "^kit: (\\S+)\\.tar\\.gz ", [{capture, all_but_first, list}])]],
    {ok, _} = net_kernel:start([list_to_atom("dtrace_kit_suite_" ++ os:getpid()), shortnames]),
    [{kit, Kit} | Config].

init_per_testcase(_TC, Config) ->
    [{root, start_root(?config(priv_dir, Config))} | Config].

end_per_testcase(_TC, Config) ->
    stop_root(?config(root, Config)).

%%--------------------------------------------------------------------

%% A relx release on this host's OTP 25, reached by its OS pid alone.
release_on_otp25(Config) ->
    "25" = erlang:system_info(otp_release),
    {Bin, Node, Cookie} = release(?config(priv_dir, Config)),
    OsPid = string:trim(os:cmd(Bin ++ " pid")),
    try
        true = erlang:set_cookie(Node, list_to_atom(Cookie)),
        Up = fun() -> net_adm:ping(Node) =:= pong end,
        ok = dtrace_test_workload:wait_until(Up, dtrace_test_tracer:ceiling(30000)),
        %% The slow call's process, spawned with a fun, is named by the
        %% function it runs.
        kit(Config, Node, OsPid, #{function => "kitrel_work:slow/1", slow_args => ["--threshold", "10"],
                                   set => "otp25", cause => "scheduled out in timer:sleep/1",
                                   process => "kitrel_work:loop/0"})
    after
        os:cmd(Bin ++ " stop"),
        %% A copy a failed case left in this host's /tmp.
        [file:del_dir_r(D) || D <- filelib:wildcard("/tmp/dtrace-attach-" ++ OsPid ++ "-*")]
    end.

%% RabbitMQ on OTP 29 in another root, reached by its OS pid, name and
%% cookie file, under an AMQP load.
rabbitmq_on_otp29(Config) ->
    Base = filename:join(?config(priv_dir, Config), "rabbitmq"),
    {Node, OsPid, Cookie, Amqp} = start_broker(Base),
    try
        Load = fun() -> {0, Out} = dtrace_test_tracer:run("sh", [script("guest.sh"), "chroot", "sid-userland", "--",
                                                                 "python3", load_script(), Amqp, "500", "10000"]),
                        ?assert(lists:member(<<"published 500 consumed 500">>, Out))
               end,
        kit(Config, Node, OsPid, #{names => [atom_to_list(Node), "--cookie-file", Cookie],
                                   function => "rabbit_channel:handle_cast/2", slow_args => ["--threshold", "0"],
                                   load => Load, set => "otp27", process => "{rabbit_channel,"})
    after
        stop_broker(Node, OsPid)
    end.

%% In a fresh kit root: the recipe's unpacking step, dtrace-attach --pid
%% OsPid [names] --function F, dtrace-slow-spans [slow_args] until a
%% breakdown of F names cause (default: any), its process named
%% (process: a part of its name), then --detach. load (a fun) runs while
%% dtrace-slow-spans listens. set: the kit's beams the attach must pick.
kit(Config, Node, OsPid, #{function := Function, slow_args := SlowArgs, set := Set, process := Process} = Opts) ->
    Names = maps:get(names, Opts, []),
    Load = maps:get(load, Opts, none),
    Cause = maps:get(cause, Opts, any),
    Root = ?config(root, Config),
    Kit = ?config(kit, Config),
    Name = filename:basename(Kit),
    %% The recipe's COPY: the archive and its sum, into the image.
    Copy = "/proc/" ++ Root ++ "/root" ++ image("copy"),
    [{ok, _} = file:copy(Kit ++ Ext, filename:join(Copy, Name ++ Ext)) || Ext <- [".tar.gz", ".tar.gz.sha256"]],
    T0 = erlang:monotonic_time(millisecond),
    [{0, _} = in_root(Root, "env KIT=" ++ Name ++ " sh -euc '" ++ Step ++ "'") || Step <- lines(image("kit"))],
    Attach = "dtrace-attach --pid " ++ OsPid ++ lists:append([" " ++ A || A <- Names]),
    {0, Attached} = in_root(Root, Attach ++ " --function " ++ Function),
    ?assert(has(Attached, ["attached dtrace to ", atom_to_list(Node), " (OS pid ", OsPid, ", OTP "])),
    ?assert(has(Attached, ["/lib/", Set, "/dtrace-"])),
    ?assert(has(Attached, [": function spans on ", Function])),
    Port = root_port(Root, "dtrace-slow-spans -p " ++ OsPid ++ lists:append([" " ++ A || A <- SlowArgs])),
    Mine = fun(Ls) -> [C || {F, C} <- causes(Ls), F =:= list_to_binary(Function),
                            Cause =:= any orelse C =:= list_to_binary(Cause)] end,
    Lines0 = case Load of
                 none -> [];
                 _ -> dtrace_test_why:collect(Port, [], fun(Ls) -> has(Ls, ["Tracing spans of OS pid"]) end,
                                              dtrace_test_tracer:ceiling(60000))
             end,
    Loader = case Load of
                 none -> none;
                 _ -> spawn_link(Load)
             end,
    Lines1 = dtrace_test_why:collect(Port, Lines0, fun(Ls) -> Mine(Ls) =/= [] end, dtrace_test_tracer:ceiling(60000)),
    Seconds = (erlang:monotonic_time(millisecond) - T0) / 1000,
    %% The process's name comes with its first dtrace_process__name event,
    %% which can follow its first spans: a later span of it is named. A
    %% flood of spans (threshold 0) can lose that event; the tool then
    %% says it lost events, and the name cannot be asked for.
    Named = fun(Ls) -> [L || L <- Ls, binary:match(L, <<"slow span: ", (list_to_binary(Function))/binary>>) =/= nomatch,
                             binary:match(L, list_to_binary(["> (", Process])) =/= nomatch] end,
    Lost = fun(Ls) -> lists:any(fun(L) -> binary:match(L, <<"(the tracer lost events">>) =/= nomatch end, Ls) end,
    Lines2 = dtrace_test_why:collect(Port, Lines1, fun(Ls) -> Named(Ls) =/= [] orelse Lost(Ls) end,
                                     dtrace_test_tracer:ceiling(30000)),
    _ = Loader =:= none orelse wait_exit(Loader),
    Lines = dtrace_test_why:stop(Port, Lines2),
    ct:log("dtrace-slow-spans printed:~n~ts", [lists:join("\n", Lines)]),
    ?assertEqual([], [L || L <- Lines, re:run(L, "WARNING|ERROR|~~") =/= nomatch]),
    ?assert(Named(Lines) =/= [] orelse Lost(Lines)),
    {0, Detached} = in_root(Root, Attach ++ " --detach"),
    ?assert(has(Detached, ["detached dtrace from ", atom_to_list(Node)])),
    ?assert(has(Detached, [", copy /tmp/dtrace-attach-", OsPid, "-"])),
    left_as_named(Node, OsPid, Detached),
    {comment, io_lib:format("~s (~s): from unpacking to the first cause ~.1f s; causes: ~ts",
                            [Node, Set, Seconds, lists:join("; ", lists:usort(Mine(Lines)))])}.

%% The load's end (linked: a failed load fails the case).
wait_exit(Pid) ->
    Ref = monitor(process, Pid),
    receive {'DOWN', Ref, process, Pid, Why} -> true = lists:member(Why, [normal, noproc]) end.

%% After --detach: no module or application of the library in the node, no
%% copy in its /tmp, and the library's files it still maps are those the
%% tool named.
left_as_named(Node, OsPid, Detached) ->
    ?assertEqual(false, lists:keymember(dtrace, 1, erpc:call(Node, application, loaded_applications, []))),
    ?assertEqual([], [M || {M, F} <- erpc:call(Node, code, all_loaded, []), is_list(F),
                           string:find(F, "/dtrace-attach-") =/= nomatch]),
    ?assertEqual([], filelib:wildcard("/proc/" ++ OsPid ++ "/root/tmp/dtrace-attach-" ++ OsPid ++ "-*")),
    Named = lists:usort([P || L <- Detached, {match, [P]} <- [re:run(L, "^    (/\\S+): ", [{capture, all_but_first, list}])]]),
    {ok, Maps} = file:read_file("/proc/" ++ OsPid ++ "/maps"),
    Ours = fun(P) ->
                   Two = filename:join(filename:basename(filename:dirname(P)), filename:basename(P)),
                   lists:member(filename:basename(P), ["dtrace_nif.so", "libdtrace_lttng_tp.so"])
                       orelse lists:member(Two, ["tracer/dtrace_tracer.so", "compat/dyntrace.so"])
                       orelse string:prefix(filename:basename(P), "liblttng-ust") =/= nomatch
           end,
    Mapped = lists:usort([P || L <- string:lexemes(binary_to_list(Maps), "\n"),
                               [_, _, _, _, _, P | _] <- [string:lexemes(L, " ")], Ours(P)]),
    ?assertNotEqual([], Named),
    ?assertEqual(Mapped, Named).

%% {Function, Cause} of each breakdown dtrace-slow-spans printed.
causes(Lines) ->
    causes(Lines, undefined, []).

causes([], _, Acc) -> lists:reverse(Acc);
causes([L | Rest], Fun, Acc) ->
    case re:run(L, <<"slow span: (\\S+) ">>, [{capture, all_but_first, binary}]) of
        {match, [F]} -> causes(Rest, F, Acc);
        nomatch ->
            case re:run(L, <<"^    cause: (.*), [0-9.]+ ms \\([0-9]+%\\)$">>, [{capture, all_but_first, binary}]) of
                {match, [C]} when Fun =/= undefined -> causes(Rest, undefined, [{Fun, C} | Acc]);
                _ -> causes(Rest, Fun, Acc)
            end
    end.

%%--------------------------------------------------------------------
%% The kit's root

%% A chroot of the kit's image root (a fresh overlay), sharing Dir, held
%% open by a sleep whose mount namespace and root the commands enter.
%% Returns the sleep's OS pid.
start_root(Dir) ->
    PidFile = filename:join(Dir, "root.pid"),
    _ = file:delete(PidFile),
    ok = file:write_file(filename:join(Dir, "hold.sh"), "echo $$ > \"$1\"; exec sleep 100000\n"),
    Cmd = io_lib:format("sh ~ts chroot ~s -s ~ts -- sh ~ts/hold.sh ~ts > ~ts/root.log 2>&1 &",
                        [script("guest.sh"), ?ROOT, Dir, Dir, PidFile, Dir]),
    _ = os:cmd(lists:flatten(Cmd)),
    Held = fun() -> case file:read_file(PidFile) of
                        {ok, P} -> filelib:is_dir("/proc/" ++ string:trim(binary_to_list(P)));
                        _ -> false
                    end
           end,
    case dtrace_test_workload:wait_until(Held, dtrace_test_tracer:ceiling(60000)) of
        ok -> ok;
        timeout -> ct:fail("no chroot of ~s: ~p", [?ROOT, file:read_file(filename:join(Dir, "root.log"))])
    end,
    {ok, P} = file:read_file(PidFile),
    string:trim(binary_to_list(P)).

stop_root(Pid) ->
    _ = os:cmd("kill " ++ Pid),
    ok.

%% Cmd run by sh in the root, as the image runs a command (its PATH, in its
%% WORKDIR): {ExitStatus, Lines}.
in_root(Root, Cmd) ->
    {Status, Out} = dtrace_test_tracer:run("nsenter", root_args(Root, Cmd)),
    ct:log("in the kit's root: ~ts~nexit status ~p~n~ts", [Cmd, Status, lists:join("\n", Out)]),
    {Status, Out}.

root_port(Root, Cmd) ->
    ct:log("in the kit's root: ~ts", [Cmd]),
    open_port({spawn_executable, os:find_executable("nsenter")},
              [{args, root_args(Root, Cmd)}, {line, 65536}, stderr_to_stdout, exit_status, binary]).

root_args(Root, Cmd) ->
    ["--target", Root, "--mount", "--root", "--wd=/", "--", "/usr/bin/env", "-i",
     "PATH=" ++ image("path") ++ ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
     "HOME=/root", "LANG=C.UTF-8", "/bin/sh", "-c", "cd /opt/dtrace-kit 2>/dev/null; exec " ++ Cmd].

%% scripts/kit-image.sh What: what kit/Dockerfile says.
image(What) ->
    string:trim(os:cmd("sh " ++ script("kit-image.sh") ++ " " ++ What)).

lines(Text) ->
    string:lexemes(Text, "\n").

%%--------------------------------------------------------------------
%% The nodes

%% A relx release of rebar3's template with a process calling
%% kitrel_work:slow/1 (a 20 ms sleep) over and over, built with its runtime
%% and started as operators start one. Returns {Bin, Node, Cookie}.
release(Dir) ->
    Env = [{"REBAR_BASE_DIR", false}, {"ESCRIPT_NAME", false}, {"ERL_LIBS", false}, {"ERL_FLAGS", false},
           {"ERL_AFLAGS", false}, {"ERL_ZFLAGS", false}],
    {0, _} = sh(Dir, "rebar3 new release kitrel", Env),
    App = filename:join(Dir, "kitrel"),
    Sname = "kitrel_" ++ os:getpid(),
    Cookie = "kitrel_" ++ integer_to_list(erlang:unique_integer([positive])),
    ok = file:write_file(filename:join([App, "config", "vm.args"]), ["-sname ", Sname, "\n-setcookie ", Cookie, "\n"]),
    ok = file:write_file(filename:join([App, "apps", "kitrel", "src", "kitrel_work.erl"]), "
-module(kitrel_work).
-export([start_link/0, slow/1]).
start_link() -> {ok, spawn_link(fun loop/0)}.
loop() -> ?MODULE:slow(20), timer:sleep(5), loop().
slow(Ms) -> timer:sleep(Ms).
"),
    Sup = filename:join([App, "apps", "kitrel", "src", "kitrel_sup.erl"]),
    {ok, Text} = file:read_file(Sup),
    ok = file:write_file(Sup, string:replace(Text, "ChildSpecs = []",
                                             "ChildSpecs = [#{id => work, start => {kitrel_work, start_link, []}}]")),
    {0, _} = sh(App, "rebar3 as prod release", Env),
    Rel = filename:join([App, "_build", "prod", "rel", "kitrel"]),
    [_] = filelib:wildcard(filename:join(Rel, "erts-*/bin/escript")),
    [] = filelib:wildcard(filename:join(Rel, "lib/compiler-*")),
    Bin = filename:join([Rel, "bin", "kitrel"]),
    {0, _} = sh(App, Bin ++ " daemon", Env),
    {ok, Host} = inet:gethostname(),
    {Bin, list_to_atom(Sname ++ "@" ++ Host), Cookie}.

sh(Dir, Cmd, Env) ->
    Port = open_port({spawn_executable, "/bin/sh"}, [{args, ["-c", Cmd]}, {cd, Dir}, {env, Env}, {line, 65536},
                                                     stderr_to_stdout, exit_status, binary]),
    {exit, Status, Out} = collect(Port, []),
    ct:log("~ts (in ~ts): exit status ~p~n~ts", [Cmd, Dir, Status, lists:join("\n", Out)]),
    {Status, Out}.

collect(Port, Acc) ->
    receive
        {Port, {data, {_, Line}}} -> collect(Port, [Line | Acc]);
        {Port, {exit_status, S}} -> {exit, S, lists:reverse(Acc)}
    after dtrace_test_tracer:ceiling(180000) ->
            ct:fail("still running: ~p", [lists:reverse(Acc)])
    end.

%% RabbitMQ (the sid-userland root's rabbitmq-server) in that root as a
%% container (scripts/guest.sh container), in the background, its files and cookie in Base (shared), on free
%% ports of 127.0.0.1. Returns {Node, OsPid, CookieFile, AmqpPort}.
start_broker(Base) ->
    {Home, Cookie, CookieText} = dtrace_test_rabbitmq:home(Base),
    Node = list_to_atom("kit_rmq_" ++ os:getpid() ++ "@localhost"),
    [Amqp, Dist] = dtrace_test_rabbitmq:free_ports(2),
    Vars = [{"HOME", Home}, {"RABBITMQ_NODENAME", atom_to_list(Node)}, {"RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1"},
            {"RABBITMQ_NODE_PORT", Amqp}, {"RABBITMQ_DIST_PORT", Dist},
            {"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS", "-kernel inet_dist_use_interface {127,0,0,1}"}]
        ++ [{V, filename:join(Base, F)} || {V, F} <- [{"RABBITMQ_MNESIA_BASE", "mnesia"}, {"RABBITMQ_LOG_BASE", "log"},
                                                     {"RABBITMQ_ENABLED_PLUGINS_FILE", "enabled_plugins"},
                                                     {"RABBITMQ_PID_FILE", "pid"}, {"RABBITMQ_CONFIG_FILE", "rabbitmq"},
                                                     {"RABBITMQ_ADVANCED_CONFIG_FILE", "advanced.config"},
                                                     {"RABBITMQ_CONF_ENV_FILE", "rabbitmq-env.conf"}]],
    ok = file:write_file(filename:join(Base, "run.sh"),
                         [[["export ", V, "='", X, "'\n"] || {V, X} <- Vars],
                          "exec /usr/lib/rabbitmq/bin/rabbitmq-server\n"]),
    _ = os:cmd(lists:flatten(io_lib:format("sh ~ts container sid-userland -s ~ts -- sh ~ts/run.sh > ~ts/out 2>&1 &",
                                           [script("guest.sh"), Base, Base, Base]))),
    true = erlang:set_cookie(Node, list_to_atom(CookieText)),
    Up = fun() -> try erpc:call(Node, rabbit, is_running, [], 5000) catch _:_ -> false end =:= true end,
    case dtrace_test_workload:wait_until(Up, dtrace_test_tracer:ceiling(120000)) of
        ok -> ok;
        timeout -> ct:fail("RabbitMQ did not start: ~p", [file:read_file(filename:join(Base, "out"))])
    end,
    %% Its pid as this host sees it (the chroot shares the pid namespace).
    OsPid = erpc:call(Node, os, getpid, []),
    {Node, OsPid, Cookie, Amqp}.

stop_broker(Node, OsPid) ->
    _ = try erpc:call(Node, init, stop, [], 5000) catch _:_ -> gone end,
    Gone = fun() -> not filelib:is_dir("/proc/" ++ OsPid) end,
    case dtrace_test_workload:wait_until(Gone, dtrace_test_tracer:ceiling(60000)) of
        ok -> ok;
        timeout -> os:cmd("kill -KILL " ++ OsPid)
    end.

load_script() ->
    filename:join([dtrace_test_catalogue:repo_root(), "test", "loads", "amqp.py"]).

script(Name) ->
    filename:join([dtrace_test_catalogue:repo_root(), "scripts", Name]).

has(Lines, Parts) ->
    Part = iolist_to_binary(Parts),
    lists:any(fun(L) -> binary:match(L, Part) =/= nomatch end, Lines).
