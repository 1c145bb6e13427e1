%%% The on-call recipe for a node in a container, traced from the host
%%% (docs/operators.md, sections 1 and 3), run the way a user runs it.
%%%
%%% The "container" is a peer node started under `unshare --mount --pid
%%% --fork --mount-proc' with a tmpfs mounted on its /tmp: its own pid
%%% namespace (os:getpid() says "1" inside) and a /tmp the host cannot see.
%%% Its "image" is that /tmp: the dtrace application is copied to
%%% /tmp/app/lib/dtrace-VSN (a release's layout) before the VM starts, so
%%% the library it loads, the shipped scripts and its run-time providers all
%%% have paths that exist only in the node's mount namespace, as in a real
%%% container. From the host (this node), each test finds the node's host
%%% pid with the guide's loop over `pgrep -x beam.smp' and `NSpid' lines,
%%% then traces it with the guide's commands:
%%%
%%% - a user probe, with the shipped wrapper and the script found through
%%%   the process's root (`ls -d /proc/$PID/root/tmp/app/lib/dtrace-*/priv'):
%%%   `priv/bin/dtrace-bpftrace -p PID $PRIV/bpftrace/user-probe.bt';
%%% - a VM probe fed by automatic mode, with no library path:
%%%   `bpftrace -p PID -e "usdt::erlang:message__send {...}"';
%%% - a run-time provider whose file exists only in the node's /tmp:
%%%   `bpftrace -p PID -l "usdt:*:myapp:*"' lists it under its
%%%   `/proc/PID/root/tmp/...' path, and that path attaches.
%%%
%%% Tracers get a ready window as everywhere else (dtrace_test_tracer): the
%%% node fires ready probes until bpftrace printed them, then the workload
%%% runs, and bpftrace is stopped once the workload's events were printed.
%%% The helpers' bpftrace_window/N asks the node for its pid, which here is
%%% the namespace's ("1"): the window is driven from this suite with the host
%%% pid instead.
%%%
%%% Without bpftrace, without root, or where `unshare --mount --pid' is not
%%% permitted (an unprivileged container), the tests skip and say why; with
%%% CI=true they fail instead.
-module(dtrace_container_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([doctor_names_the_host_pid/1]).
-export([all/0, init_per_suite/1, end_per_suite/1, init_per_testcase/2, end_per_testcase/2]).
-export([the_node_has_its_own_namespaces/1,
         user_probe_script_through_the_root/1,
         vm_probe_without_a_path/1,
         provider_in_the_private_tmp/1]).
%% Run in the node.
-export([sender/2]).

%% The guide's command (section 1): every beam.smp with its NSpid line.
-define(FIND_PIDS, "for p in $(pgrep -x beam.smp); do printf '%s ' \"$p\"; grep NSpid /proc/$p/status; done").

all() ->
    [the_node_has_its_own_namespaces,
     doctor_names_the_host_pid,
     user_probe_script_through_the_root,
     vm_probe_without_a_path,
     provider_in_the_private_tmp].

%% In the chroots of make test-trixie and make test-sid (DTRACE_TEST_CHROOT,
%% set by scripts/userland.sh) there is no host to trace from: the node's
%% /proc/PID/maps names its files by paths outside the chroot. Skipped
%% there, in CI too; make test runs it on the host.
init_per_suite(Config) ->
    case {os:getenv("DTRACE_TEST_CHROOT"), dtrace_test_tracer:require_tracer(bpftrace)} of
        {"1", _} -> {skip, "in a chroot (DTRACE_TEST_CHROOT=1): no host to trace the container from"};
        {_, ok} -> require_unshare(Config);
        {_, Skip} -> Skip
    end.

end_per_suite(_Config) ->
    ok.

%% `unshare --mount --pid' with a tmpfs on /tmp must be permitted (root,
%% not inside a container that forbids it): skip locally, fail in CI.
require_unshare(Config) ->
    Why = case os:find_executable("unshare") of
              false ->
                  "unshare (util-linux) is not installed";
              _ ->
                  case dtrace_test_tracer:run("unshare", unshare_args("true") ++ ["sh", "-c", "echo $$"]) of
                      {0, [<<"1">>]} -> ok;
                      {Status, Lines} ->
                          io_lib:format("unshare --mount --pid with a tmpfs on /tmp is not "
                                        "permitted here (~p): ~p", [Status, Lines])
                  end
          end,
    case {Why, dtrace_test_tracer:in_ci()} of
        {ok, _} -> Config;
        {_, true} -> ct:fail("CI=true and ~ts", [Why]);
        {_, false} -> {skip, lists:flatten(Why)}
    end.

%% unshare's arguments up to the command its shell runs ("$0" "$@": the
%% command and its arguments, after the script), once the new mount
%% namespace has a tmpfs on /tmp and Setup (a shell command) ran. Keep
%% (directories under /tmp) are bound back at their paths in the new /tmp,
%% for a checkout, an OTP or a build that lives under /tmp (a CI clone may):
%% the old /tmp is bound aside first, and unmounted once they are.
unshare_args(Setup) ->
    unshare_args(Setup, []).

unshare_args(Setup, Keep) ->
    Aside = "old=$(mktemp -d /run/dtrace-container-tmp.XXXXXX) && mount --bind /tmp \"$old\" && "
        "mount -t tmpfs tmpfs /tmp && ",
    Back = lists:append(["mkdir -p " ++ quote(D) ++ " && mount --bind \"$old\"" ++ quote(lists:nthtail(length("/tmp"), D)) ++ " "
                         ++ quote(D) ++ " && " || D <- Keep]),
    Done = "umount -l \"$old\" && rmdir \"$old\" && ",
    ["--mount", "--pid", "--fork", "--mount-proc", "--",
     "sh", "-c", Aside ++ Back ++ Done ++ Setup ++ " && exec \"$0\" \"$@\""].

%% The top directories under /tmp of Paths that are under /tmp.
under_tmp(Paths) ->
    lists:usort(["/tmp/" ++ hd(string:split(lists:nthtail(length("/tmp/"), P), "/"))
                || P <- Paths, lists:prefix("/tmp/", P)]).

%% The release directory in the "image": the node's dtrace application is
%% copied to RELEASE/lib/dtrace-VSN, in the private /tmp, so that its
%% library and scripts exist only in the node's mount namespace.
-define(RELEASE, "/tmp/app").

quote(S) ->
    "'" ++ lists:flatten(string:replace(S, "'", "'\\''", all)) ++ "'".

init_per_testcase(_TC, Config) ->
    {Peer, HostPid, NSpid} = start_container(),
    {ok, _} = peer:call(Peer, application, ensure_all_started, [dtrace]),
    [{peer, Peer}, {host_pid, HostPid}, {nspid, NSpid},
     {priv, peer:call(Peer, code, priv_dir, [dtrace])} | Config].

end_per_testcase(_TC, Config) ->
    dtrace_test_peer:stop_peer(?config(peer, Config)),
    %% The node is the namespace's pid 1: the namespace ends with it.
    HostPid = ?config(host_pid, Config),
    Alive = fun() -> filelib:is_dir("/proc/" ++ HostPid) end,
    case dtrace_test_workload:wait_until(fun() -> not Alive() end, 10000) of
        ok ->
            ok;
        timeout ->
            _ = os:cmd("kill -KILL " ++ HostPid),
            {fail, {namespace_outlived_its_node, HostPid}}
    end.

%%--------------------------------------------------------------------

%% A peer in its own mount and pid namespaces, /tmp a tmpfs of its own,
%% running the dtrace application from a copy in that /tmp
%% (?RELEASE/lib/dtrace-VSN: ebin and priv), the test helpers from the
%% build. TMPDIR is unset (providers go to /tmp), and so is ESCRIPT_NAME:
%% under rebar3 (an escript) erlexec would make it the VM's argv[0], and the
%% node would not look like one a container runs (`beam.smp' on its command
%% line). Returns {Peer, HostPid, NSpidFields}: the host pid found as the
%% guide finds it.
start_container() ->
    Marker = lists:flatten(io_lib:format("dtrace-container-~s-~b",
                                         [os:getpid(), erlang:unique_integer([positive])])),
    AppDir = filename:dirname(filename:dirname(code:which(dtrace))),
    {ok, [{application, dtrace, App}]} = file:consult(filename:join([AppDir, "ebin", "dtrace.app"])),
    Lib = ?RELEASE ++ "/lib/dtrace-" ++ proplists:get_value(vsn, App),
    Setup = lists:flatten(["mkdir -p ", quote(Lib), " && cp -RL ", quote(AppDir ++ "/ebin"), " ",
                           quote(AppDir ++ "/priv"), " ", quote(Lib)]),
    Helpers = lists:usort([filename:dirname(code:which(M))
                           || M <- [dtrace_test_peer, dtrace_test_workload, ?MODULE]]),
    %% The node sees its own /tmp: an OTP, a build or helpers under the
    %% host's /tmp are bound back into it at the same paths.
    Keep = under_tmp([code:root_dir(), os:find_executable("erl"), AppDir | Helpers]),
    Paths = [Lib ++ "/ebin" | Helpers],
    Args = lists:append([["-pa", P] || P <- Paths]) ++ ["-dtrace_container", Marker],
    {ok, Peer, _Node} = peer:start_link(#{exec => {os:find_executable("unshare"),
                                                   unshare_args(Setup, Keep) ++ [os:find_executable("erl")]},
                                          connection => standard_io,
                                          env => [{"TMPDIR", false}, {"ESCRIPT_NAME", false}],
                                          args => Args}),
    true = peer:call(Peer, dtrace, available, []),
    Lib ++ "/priv" =:= peer:call(Peer, code, priv_dir, [dtrace]) orelse
        ct:fail("the node does not run dtrace from ~s: ~p", [Lib, peer:call(Peer, code, which, [dtrace])]),
    NsPid = peer:call(Peer, os, getpid, []),
    {HostPid, NSpid} = find_host_pid(Marker, NsPid),
    ct:log("node: pid ~s in its namespace, ~s on the host (NSpid ~p)", [NsPid, HostPid, NSpid]),
    {Peer, HostPid, NSpid}.

%% The guide's loop, on the host: "PID NSpid:\tHOST\t...\tINNER" for each
%% beam.smp. The node is the one whose command line has Marker; its NSpid
%% must end with the pid the node gave (NsPid).
find_host_pid(Marker, NsPid) ->
    Out = os:cmd(?FIND_PIDS),
    Found = [{Pid, Fields} || Line <- string:split(Out, "\n", all),
                              [Pid, "NSpid:" | Fields] <- [string:lexemes(Line, " \t")]],
    Ours = [F || {Pid, _} = F <- Found, has_marker(Pid, Marker)],
    case Ours of
        [{HostPid, NSpid}] ->
            NsPid =:= lists:last(NSpid) orelse
                ct:fail("the node says it is pid ~s, its NSpid is ~p", [NsPid, NSpid]),
            {HostPid, NSpid};
        _ ->
            ct:fail("not one beam.smp with ~s in the guide's output:~n~ts", [Marker, Out])
    end.

has_marker(Pid, Marker) ->
    case file:read_file("/proc/" ++ Pid ++ "/cmdline") of
        {ok, Cmdline} -> lists:member(list_to_binary(Marker), binary:split(Cmdline, <<0>>, [global]));
        {error, _} -> false
    end.

in_peer(Config, Fun) ->
    peer:call(?config(peer, Config), erlang, apply, [Fun, []], 120000).

%% bpftrace_window/7 of dtrace_test_tracer, with the host pid: starts Tool
%% (bpftrace, or dtrace_bpftrace: priv/bin/dtrace-bpftrace) with Program on the
%% node's host pid, runs Ready() in the node every 5 ms until bpftrace
%% printed SeenLines, runs Workload() in the node, waits (at most a minute)
%% until bpftrace printed Events(WorkloadResult) (lines as in
%% bpftrace_await/2), stops it and returns {WorkloadResult, Lines}.
%% bpftrace is interrupted on any failure.
trace(Tool, Config, Program, Ready, SeenLines, Workload, Events) ->
    Peer = ?config(peer, Config),
    {Port, _} = T0 = dtrace_test_tracer:bpftrace_start(Tool, ?config(host_pid, Config), Program),
    try
        ok = peer:call(Peer, dtrace_test_workload, start_ready_loop, [Ready]),
        T1 = dtrace_test_tracer:bpftrace_await(T0, SeenLines),
        Result = peer:call(Peer, dtrace_test_workload, stop_ready_loop_and_run, [Workload], 120000),
        T2 = dtrace_test_tracer:bpftrace_await(T1, Events(Result)),
        {Result, dtrace_test_tracer:bpftrace_stop(T2)}
    catch
        Class:Reason:Stack ->
            case erlang:port_info(Port, os_pid) of
                {os_pid, OsPid} -> _ = os:cmd("kill -INT " ++ integer_to_list(OsPid));
                undefined -> ok
            end,
            try port_close(Port) catch error:badarg -> true end,
            erlang:raise(Class, Reason, Stack)
    end.

%%--------------------------------------------------------------------

%% The node runs in namespaces of its own: it is pid 1 in its pid
%% namespace, the guide's NSpid line gives the host pid first and that pid
%% last; its pid and mount namespaces are not the host's; a file in its
%% /tmp, and the library it loaded from there, are not in the host's /tmp
%% but are under /proc/PID/root/tmp.
the_node_has_its_own_namespaces(Config) ->
    HostPid = ?config(host_pid, Config),
    {NsPid, PidNs, MntNs, TmpFile} =
        in_peer(Config, fun() ->
                                {ok, Pid} = file:read_link("/proc/self/ns/pid"),
                                {ok, Mnt} = file:read_link("/proc/self/ns/mnt"),
                                F = "/tmp/dtrace-container-" ++ os:getpid() ++ ".txt",
                                ok = file:write_file(F, <<"inside">>),
                                {os:getpid(), Pid, Mnt, F}
                        end),
    ?assertEqual("1", NsPid),
    ?assertEqual([HostPid, NsPid], ?config(nspid, Config)),
    ?assertNotEqual(NsPid, HostPid),
    ?assertNotEqual(file:read_link("/proc/self/ns/pid"), {ok, PidNs}),
    ?assertNotEqual(file:read_link("/proc/self/ns/mnt"), {ok, MntNs}),
    ?assertEqual({ok, PidNs}, file:read_link("/proc/" ++ HostPid ++ "/ns/pid")),
    ?assertEqual({ok, <<"inside">>}, file:read_file("/proc/" ++ HostPid ++ "/root" ++ TmpFile)),
    ?assertEqual({error, enoent}, file:read_file(TmpFile)),
    %% The library the node loaded is in its /tmp: mapped under that path,
    %% which the host has only under /proc/PID/root.
    Nif = ?config(priv, Config) ++ "/dtrace_nif.so",
    {ok, Maps} = file:read_file("/proc/" ++ HostPid ++ "/maps"),
    ?assertMatch({_, _}, binary:match(Maps, list_to_binary(" " ++ Nif ++ "\n"))),
    ?assertNot(filelib:is_regular(Nif)),
    ?assert(filelib:is_regular("/proc/" ++ HostPid ++ "/root" ++ Nif)).

%% priv/bin/dtrace-doctor, run on the host with the host pid: the node is in a
%% container (its pid inside named), its library mapped from the
%% container's /tmp is the file on disk there (through /proc/PID/root).
doctor_names_the_host_pid(Config) ->
    HostPid = ?config(host_pid, Config),
    {Status, Lines} = dtrace_test_tracer:run(filename:join([code:priv_dir(dtrace), "bin", "dtrace-doctor"]), [HostPid]),
    ct:log("dtrace-doctor ~s:~n~ts", [HostPid, lists:join("\n", Lines)]),
    Has = fun(Part) -> lists:any(fun(L) -> binary:match(L, Part) =/= nomatch end, Lines) end,
    ?assert(Has(iolist_to_binary(["container   pid ", HostPid, " here is pid 1 inside"]))),
    ?assert(Has(<<"ok   library">>)),
    ?assertNot(Has(<<"FAIL library">>)),
    ?assert(lists:member(Status, [0, 1])).

%% The guide's user-probe command, with the script found in the image
%% through the process's root (`PRIV=$(ls -d
%% /proc/$PID/root/<release>/lib/dtrace-*/priv)') and bpftrace finding the
%% library in the node's maps: `priv/bin/dtrace-bpftrace -p PID
%% $PRIV/bpftrace/user-probe.bt'. Its lines carry the pid text of the calling process
%% in the node, its tag and the arguments, all ten (the strings past the
%% sixth argument through the wrapper).
user_probe_script_through_the_root(Config) ->
    HostPid = ?config(host_pid, Config),
    Priv = string:trim(os:cmd("PID=" ++ HostPid ++ "; ls -d /proc/$PID/root" ++ ?RELEASE ++ "/lib/dtrace-*/priv")),
    ?assertEqual("/proc/" ++ HostPid ++ "/root" ++ ?config(priv, Config), Priv),
    Script = Priv ++ "/bpftrace/user-probe.bt",
    ?assert(filelib:is_regular(Script)),
    ?assertNot(filelib:is_regular(?config(priv, Config) ++ "/bpftrace/user-probe.bt")),
    {{Pid, Results}, Lines} =
        trace(dtrace_bpftrace, Config, {file, Script},
              fun() -> dtrace:p("ready") end,
              [{contains, <<"'ready'">>}],
              fun() ->
                      dtrace:put_tag("in-the-container"),
                      R = dtrace:p(7, 8, 9, "one", "four"),
                      dtrace:put_tag(undefined),
                      {pid_to_list(self()), [R, dtrace:p(-1, 1 bsl 40, <<"b">>, "c", "d", "e")]}
              end,
              fun({P, _}) -> lists:duplicate(2, {contains, list_to_binary(P ++ " ")}) end),
    ?assertEqual([true, true], Results),
    Events = [L || L <- Lines, binary:match(L, list_to_binary(Pid ++ " ")) =/= nomatch],
    ?assertEqual([iolist_to_binary([Pid, " in-the-container 7 8 9 0 'one' 'four' '' ''"]),
                  iolist_to_binary([Pid, "  -1 1099511627776 0 0 'b' 'c' 'd' 'e'"])], Events).

%% A VM probe in automatic mode, named without a library path (`bpftrace
%% -p PID' on `usdt::erlang:message__send'; the library's path exists only
%% in the node's namespace, bpftrace finds it through /proc/PID/root by
%% itself): while bpftrace listens the node sets the `send' flag, and every
%% send of a known process reaches the host with its sender, receiver and
%% size; once bpftrace leaves, the flag goes.
vm_probe_without_a_path(Config) ->
    {SenderText, ReceiverText} =
        in_peer(Config, fun() ->
                                Ready = spawn(fun dtrace_test_workload:sink/0),
                                R = spawn(fun dtrace_test_workload:sink/0),
                                S = spawn(?MODULE, sender, [Ready, R]),
                                register(container_sender, S),
                                {pid_to_list(S), pid_to_list(R)}
                        end),
    N = 20,
    Sent = iolist_to_binary(["SEND ", SenderText, " ", ReceiverText, " "]),
    SentLen = byte_size(Sent),
    {{Flags, Sizes}, Lines} =
        trace(bpftrace, Config,
              "usdt::erlang:message__send /str(arg0) == \"" ++ SenderText ++ "\"/ {
                   printf(\"SEND %s %s %ld\\n\", str(arg0), str(arg1), arg2); }",
              fun() -> container_sender ! ping end,
              [{contains, <<"SEND ">>}],
              fun() ->
                      Fl = dtrace_test_workload:wait_flags([send], 5000),
                      Msgs = [{request, I, <<"abc">>} || I <- lists:seq(1, N)],
                      container_sender ! {send, Msgs, self()},
                      receive sent -> ok end,
                      {Fl, [erts_debug:flat_size(M) || M <- Msgs]}
              end,
              fun(_) -> lists:duplicate(N, {contains, Sent}) end),
    ?assertEqual(ok, Flags),
    ?assertEqual(Sizes, [binary_to_integer(Size) || <<Pre:SentLen/binary, Size/binary>> <- Lines,
                                                    Pre =:= Sent]),
    ?assertEqual(ok, in_peer(Config, fun() -> dtrace_test_workload:wait_flags([], 5000) end)).

%% In the node: sends `ready' to Ready on `ping', and Msgs to R on
%% {send, Msgs, From} (then `sent' to From).
sender(Ready, R) ->
    receive
        ping -> Ready ! ready;
        {send, Msgs, From} -> [R ! M || M <- Msgs], From ! sent
    end,
    sender(Ready, R).

%% A run-time provider's file lives in the node's private /tmp: not on the
%% host's /tmp, but under /proc/PID/root/tmp. `bpftrace -p PID -l
%% "usdt:*:myapp:*"' lists its probes with that path; the listed path
%% attaches, and the host reads the events' arguments.
provider_in_the_private_tmp(Config) ->
    HostPid = ?config(host_pid, Config),
    Path = in_peer(Config, fun() ->
                                   Self = self(),
                                   Pid = spawn(dtrace_test_workload, provider_holder, [myapp, [{request__start, [int, string]},
                                                                         {request__done, [int, int]}], Self]),
                                   receive {Pid, P} -> P end
                           end),
    ct:log("the provider's file in the node: ~s", [Path]),
    ?assertMatch("/tmp/" ++ _, Path),
    Root = "/proc/" ++ HostPid ++ "/root",
    ?assert(filelib:is_regular(Root ++ Path)),
    ?assertNot(filelib:is_regular(Path)),
    {0, Listing} = dtrace_test_tracer:run("bpftrace", ["-p", HostPid, "-l", "usdt:*:myapp:*"]),
    ct:log("bpftrace -p ~s -l 'usdt:*:myapp:*':~n~p", [HostPid, Listing]),
    ?assertEqual([list_to_binary(["usdt:", Root, Path, ":myapp:", Probe])
                  || Probe <- ["request__done", "request__start"]],
                 lists:sort([L || <<"usdt:", _/binary>> = L <- Listing])),
    %% The path as listed, for the probe spec.
    [Listed] = [binary_to_list(File) || <<"usdt:", Rest/binary>> <- Listing,
                                        [File, <<"request__start">>] <- [string:split(Rest, <<":myapp:">>, trailing)]],
    {Results, Lines} =
        trace(bpftrace, Config, "
            usdt:" ++ Listed ++ ":myapp:request__start {
                if (arg0 == 0) { printf(\"SEEN\\n\"); } else { printf(\"REQ %ld %s\\n\", arg0, str(arg1)); }
            }
            usdt:" ++ Listed ++ ":myapp:request__done { printf(\"DONE %ld %ld\\n\", arg0, arg1); }",
              fun() -> dtrace_provider:fire(dtrace_test_workload:provider_handle(myapp), request__start, [0, "ready"]) end,
              [<<"SEEN">>],
              fun() ->
                      P = dtrace_test_workload:provider_handle(myapp),
                      [dtrace_provider:fire(P, request__start, [42, <<"GET /">>]),
                       dtrace_provider:fire(P, request__done, [42, 200])]
              end,
              fun(_) -> [<<"REQ 42 GET /">>, <<"DONE 42 200">>] end),
    ?assertEqual([true, true], Results),
    ?assertEqual([<<"REQ 42 GET /">>, <<"DONE 42 200">>],
                 [L || <<"REQ ", _/binary>> = L <- Lines] ++ [L || <<"DONE ", _/binary>> = L <- Lines]).

