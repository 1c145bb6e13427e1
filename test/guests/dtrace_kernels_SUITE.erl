%% The kernels and tracers users run: QEMU guests that boot Debian's own
%% kernels with Debian's own userland (scripts/guest.sh), and in each, on a
%% node of the project, what a user needs to see:
%% - a user probe with its tag, a VM probe and a run-time provider's probe,
%%   every argument, with the guest's bpftrace (through priv/bin/dtrace-bpftrace
%%   for arguments past the sixth), perf, gdb and SystemTap;
%% - the semaphores up while a tracer listens and down after;
%% - OTP's own SystemTap examples (lib/runtime_tools/examples/*.systemtap,
%%   from the OTP source tarball), changed only as a user must change them:
%%   `process("beam.smp")' made `process(@1)' (the library's path), and the
%%   probes the library does not feed marked optional (`?'); each prints
%%   OTP's lines;
%% - the shipped priv/systemtap/*.stp scripts, priv/bin/dtrace-slow-spans with
%%   priv/systemtap/slow-spans.stp (the planted causes of slow requests), and a
%%   shipped bpftrace script;
%% - priv/bin/dtrace-doctor on the node, then under kernel lockdown.
%%
%% Debian's SystemTap needs a runtime fix for Debian's own current kernels
%% (4.8 on 6.1.0-50, 5.1 on 6.12's uprobe API): test/guests/stap-build.sh
%% makes it in the chroot's throw-away layer, as a user would have to.
%%
%% Roots (scripts/guest.sh): bookworm-kernel (Debian 12: kernel 6.1, OTP
%% 25.2.3, bpftrace 0.17, SystemTap 4.8) and trixie-kernel (Debian 13:
%% 6.12, OTP 27.3, bpftrace 0.23, SystemTap 5.1). One case per root on the
%% host: it compiles the SystemTap modules in a chroot of the root (about
%% 15 s each natively; under the guest's TCG about 6 minutes), boots the
%% guest and runs this suite's `guest' group there with the guest's OTP
%% (test/guests/ct.sh); inside, DTRACE_TEST_GUEST=1. A run-time provider's
%% file exists only once the node defined it: the guest asks for its module
%% through the shared directory (stap/requests/NAME.stp), and the host case,
%% watching that directory while the guest runs, compiles it and answers
%% NAME.done.
%%
%% Run by `make test-kernels' (DTRACE_TEST_KERNELS=1), not by `make test':
%% each guest takes minutes. Needs root; with CI=true a guest that cannot
%% run fails, otherwise the case is skipped, saying why.
-module(dtrace_kernels_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([suite/0, all/0, groups/0, init_per_testcase/2, end_per_testcase/2]).
-export([debian12/1, debian13/1]).
-export([versions/1, bpftrace_user_vm_provider/1, perf_user_vm_provider/1, gdb_user_vm_provider/1,
         stap_user_vm_provider/1, stap_otp_examples/1, stap_shipped_scripts/1, stap_slow_spans/1,
         shipped_bpftrace_script/1,
         doctor/1]).

-define(MAX, 9223372036854775807).
%% The provider the guest defines: eight arguments, strings and integers
%% past the sixth (r10, r11 on x86_64).
-define(PROVIDER, kprov).
-define(PROBES, [{all, [int, string, int, string, int, string, string, int]}]).
-define(ARGS(First), [First, "s1", 1 bsl 40, "s3", 4, "s5", "s6", 7]).
-define(ARGS_TEXT, "-1 s1 1099511627776 s3 4 s5 s6 7").
%% A wait's ceiling (ms, or s), sized on a quiet host: longer in the guest
%% and on a slow host (dtrace_test_tracer:ceiling/1).
-define(C(Ms), dtrace_test_tracer:ceiling(Ms)).

suite() ->
    [{timetrap, {minutes, 10}}].

all() ->
    case {os:getenv("DTRACE_TEST_GUEST"), os:getenv("DTRACE_TEST_KERNELS")} of
        {"1", _} -> [{group, guest}];
            {_, "1"} -> [debian12, debian13];
        %% make test-kernels runs this suite.
        _ -> []
    end.

groups() ->
    [{guest, [], [versions, bpftrace_user_vm_provider, perf_user_vm_provider, gdb_user_vm_provider,
                  stap_user_vm_provider, stap_otp_examples, stap_shipped_scripts, stap_slow_spans,
                  shipped_bpftrace_script, doctor]}].

init_per_testcase(TC, Config) when TC =:= debian12; TC =:= debian13 ->
    case string:trim(os:cmd("id -u")) of
        "0" -> Config;
        _ -> unavailable("the guests need root (mmdebstrap, QEMU's 9p shares)")
    end;
init_per_testcase(versions, Config) ->
    Config;
init_per_testcase(_TC, Config) ->
    %% The provider's file in the directory shared with the host, which
    %% compiles a SystemTap module against it.
    true = os:putenv("TMPDIR", os:getenv("DTRACE_TEST_TMP")),
    Peer = dtrace_test_peer:start_peer(),
    true = os:unsetenv("TMPDIR"),
    {ok, _} = peer:call(Peer, application, ensure_all_started, [dtrace], ?C(5000)),
    [{peer, Peer}, {os_pid, dtrace_test_peer:os_pid(Peer)} | Config].

end_per_testcase(TC, _Config) when TC =:= debian12; TC =:= debian13; TC =:= versions ->
    ok;
end_per_testcase(_TC, Config) ->
    dtrace_test_peer:stop_peer(?config(peer, Config)).

unavailable(Why) ->
    case dtrace_test_tracer:in_ci() of
        true -> ct:fail("CI=true and ~ts", [Why]);
        false -> {skip, Why}
    end.

root() ->
    dtrace_test_catalogue:repo_root().

%%--------------------------------------------------------------------
%% On the host: one guest per kernel

debian12(Config) ->
    guest(Config, "bookworm-kernel", "6.1.").

debian13(Config) ->
    guest(Config, "trixie-kernel", "6.12.").

%% Compiles the SystemTap modules in a chroot of Root, boots Root and runs
%% the guest group there; the guest's Common Test logs land in this case's
%% log directory, and its versions line in this case's comment.
guest(Config, Root, Kernel) ->
    %% First what is cached: the root (scripts/ct.sh built it before Common
    %% Test started, unless this suite runs alone; 1-4 minutes the first
    %% time) and OTP's source, under a timetrap of their own; then the case's
    %% clock starts.
    ct:timetrap({minutes, 30}),
    {0, _} = dtrace_test_tracer:build("sh", [guest_sh(), "root", Root]),
    Priv = ?config(priv_dir, Config),
    Examples = otp_examples(Priv),
    %% The modules compiled (about 15 s each), the guest's cases (minutes:
    %% its CPU is emulated).
    ct:timetrap({minutes, 40}),
    %% Shared with the guest at its own path, which has no `@' (a log
    %% directory's nonode@nohost): bpftrace takes no `@' in a probe's path.
    %% One per run (this node's OS pid): two runs at once on one machine
    %% never see each other's modules and requests.
    Shared = filename:join("/tmp", "dtrace-kernels-" ++ Root ++ "-" ++ os:getpid()),
    _ = file:del_dir_r(Shared),
    Stap = filename:join(Shared, "stap"),
    ok = filelib:ensure_path(filename:join(Stap, "requests")),
    ok = filelib:ensure_path(filename:join(Shared, "tmp")),
    So = dtrace_test_catalogue:nif_path(),
    Notes = [binary_to_list(N) || {<<"erlang">>, N, _} <- dtrace_test_catalogue:notes(So)],
    Kern = stap_module(Stap, "kern", filename:join([root(), "test", "tracers", "kernels.stp"]), [So]),
    Modules = [otp_module(Stap, Examples, Name, Notes, So) || Name <- dtrace_test_otp_examples:names()]
        ++ [shipped_module(Stap, Script, Probes, So) || {Script, Probes} <- shipped_stap()]
        ++ [stap_module(Stap, "slow_spans", filename:join([code:priv_dir(dtrace), "systemtap", "slow-spans.stp"]), [So])],
    ok = stap_build(Root, Shared, Stap, [Kern | Modules]),
    Logs = filename:join(Priv, "guest-ct-" ++ Root),
    ok = filelib:ensure_path(Logs),
    LibDir = filename:dirname(code:lib_dir(dtrace)),
    TestDir = filename:dirname(code:which(?MODULE)),
    Port = open_port({spawn_executable, "/bin/sh"},
                     [{args, [guest_sh(), "run", Root, "-s", Priv, "-s", Shared,
                              "-t", integer_to_list(?C(2280000) div 1000), "--",
                              "env", "DTRACE_TEST_STAP=" ++ Stap, "DTRACE_TEST_KERNEL=" ++ Kernel,
                              "DTRACE_TEST_TMP=" ++ filename:join(Shared, "tmp"),
                              dtrace_test_tracer:slowdown_env(),
                              "DTRACE_TEST_VERSIONS=" ++ filename:join(Logs, "versions.txt"),
                              %% The helpers (test/support/) are built apart from
                              %% this suite when the suites run by group.
                              "ERL_FLAGS=-pa " ++ filename:dirname(code:which(dtrace_test_tracer)),
                              "sh", filename:join([root(), "test", "guests", "ct.sh"]),
                              LibDir, TestDir, Logs, atom_to_list(?MODULE)]},
                      {line, 65536}, stderr_to_stdout, exit_status, binary]),
    {Status, Lines} = serve(Port, Root, Shared, Stap, [], erlang:monotonic_time(millisecond) + ?C(2280000) + 60000),
    _ = file:del_dir_r(Shared),
    ct:log("the guest (exit status ~p):~n~ts", [Status, lists:join("\n", Lines)]),
    Summary = [L || <<"guest ct: ", _/binary>> = L <- Lines],
    Versions = case file:read_file(filename:join(Logs, "versions.txt")) of
                   {ok, V} -> string:trim(V);
                   _ -> <<"(no versions.txt)">>
               end,
    ct:comment("~ts; ~ts", [Versions, Summary]),
    ?assertEqual({0, 1}, {Status, length(Summary)}).

guest_sh() ->
    filename:join([root(), "scripts", "guest.sh"]).


%% The guest's output until it exits; meanwhile, each module the guest asks
%% for (stap/requests/NAME.stp, its arguments in NAME.args, one a line) is
%% compiled and answered with NAME.done ("ok" or "failed").
serve(Port, Root, Shared, Stap, Acc, Deadline) ->
    receive
        {Port, {data, {eol, Line}}} -> serve(Port, Root, Shared, Stap, [Line | Acc], Deadline);
        {Port, {data, {noeol, Part}}} -> serve(Port, Root, Shared, Stap, [Part | Acc], Deadline);
        {Port, {exit_status, Status}} -> {Status, lists:reverse(Acc)}
    after 1000 ->
            case erlang:monotonic_time(millisecond) > Deadline of
                true ->
                    {os_pid, OsPid} = erlang:port_info(Port, os_pid),
                    _ = os:cmd("kill -KILL " ++ integer_to_list(OsPid)),
                    ct:fail("the guest did not end in time: ~p", [lists:reverse(Acc)]);
                false ->
                    Req = filename:join(Stap, "requests"),
                    [begin
                         Name = filename:basename(S, ".stp"),
                         {ok, ArgsText} = file:read_file(filename:join(Req, Name ++ ".args")),
                         Args = string:lexemes(binary_to_list(ArgsText), "\n"),
                         Result = case stap_build(Root, Shared, Req, [stap_module(Req, Name, S, Args)]) of
                                      ok -> "ok";
                                      Other -> ct:log("~s: ~p", [Name, Other]), "failed"
                                  end,
                         ok = file:write_file(filename:join(Req, Name ++ ".done"), Result)
                     end || S <- filelib:wildcard(filename:join(Req, "*.stp")),
                            not filelib:is_regular(filename:rootname(S) ++ ".done")],
                    serve(Port, Root, Shared, Stap, Acc, Deadline)
            end
    end.

%% "NAME=SCRIPT:ARG..." for test/guests/stap-build.sh, Script copied to
%% Dir/NAME.stp when it is elsewhere.
stap_module(Dir, Name, Script, Args) ->
    Copy = filename:join(Dir, Name ++ ".stp"),
    _ = Copy =:= Script orelse file:copy(Script, Copy),
    lists:flatten([Name, "=", Copy, [[":", A] || A <- Args]]).

%% Compiles Modules in a chroot of Root into Dir (the runtime fixes for
%% Debian's kernels are in stap-build.sh: 4.8 on 6.1.0-50's
%% task_work_cancel_func, 5.1 on 6.12's uprobe API); ok, or {error, Status}.
stap_build(Root, Shared, Dir, Modules) ->
    {Status, _Out} = dtrace_test_tracer:build("sh", [guest_sh(), "chroot", Root, "-s", Shared, "--",
                                                  "sh", filename:join([root(), "test", "guests", "stap-build.sh"]),
                                                  Dir | Modules]),
    case Status of
        0 -> ok;
        _ -> {error, Status}
    end.

%% OTP's SystemTap example for Name, as a user changes it for the library
%% (see the module doc), with a clause per probe the case waits for that
%% prints "WINDOW READY <probe>" once.
otp_module(Stap, Examples, Name, Notes, So) ->
    File = dtrace_test_otp_examples:script(Name, systemtap),
    {ok, Text} = file:read_file(filename:join(Examples, File)),
    Fed = fun(Mark) -> lists:member(string:replace(Mark, "-", "__", all), Notes)
                           orelse lists:member(Mark, Notes) end,
    %% The text between the probe points, then each point's mark name
    %% (re:split/3 returns the captured group between the parts).
    Parts = re:split(Text, "process\\(\"beam\\.smp\"\\)\\.mark\\(\"([^\"]+)\"\\)", [{return, list}]),
    Changed = changed(Parts, Fed),
    Readies = readies(dtrace_test_otp_examples:probes(Name)),
    ModName = "otp_" ++ atom_to_list(Name),
    Script = filename:join(Stap, ModName ++ ".stp"),
    ok = file:write_file(Script, [Changed, Readies]),
    stap_module(Stap, ModName, Script, [So]).

changed([Text, Mark | Rest], Fed) -> [Text, mark(Mark, Fed) | changed(Rest, Fed)];
changed([Text], _Fed) -> [Text].

%% priv/systemtap/*.stp and the probes a window waits for in each.
shipped_stap() ->
    [{"user-probe", ["user_trace__i4s4"]},
     {"spawn-exit", ["process__spawn", "process__exit", "dtrace_process__name"]},
     {"span-latency", ["span__end", "dtrace_process__name"]},
     {"message-latency", ["message__send", "process__scheduled", "dtrace_process__name"]},
     {"messages", ["message__send", "message__queued"]},
     {"process-scheduling", ["process__scheduled", "process__unscheduled", "process__hibernate"]},
     {"garbage-collection", ["gc_major__start", "gc_major__end"]},
     {"function-calls", ["global__function__entry", "function__return", "bif__entry", "bif__return"]},
     {"port1", ["port__open", "port__command", "port__exit", "port__control", "port__connect", "port__busy"]},
     {"efile", ["efile_drv__entry", "efile_drv__return"]}].

%% A shipped script with a window clause per probe (as otp_module/5).
shipped_module(Stap, Base, Probes, So) ->
    {ok, Text} = file:read_file(filename:join([code:priv_dir(dtrace), "systemtap", Base ++ ".stp"])),
    ModName = "shipped_" ++ string:replace(Base, "-", "_", all),
    Script = filename:join(Stap, lists:flatten(ModName) ++ ".stp"),
    ok = file:write_file(Script, [Text, readies(Probes)]),
    stap_module(Stap, lists:flatten(ModName), Script, [So]).

readies(Probes) ->
    [io_lib:format("~nglobal window_ready~b~nprobe process(@1).mark(\"~s\") {~n"
                   "    if (!window_ready~b) { window_ready~b = 1; printf(\"WINDOW READY ~s\\n\") }~n}~n",
                   [I, P, I, I, P])
     || {I, P} <- lists:zip(lists:seq(1, length(Probes)), Probes)].

mark(Mark, Fed) ->
    case Fed(Mark) of
        true -> ["process(@1).mark(\"", Mark, "\")"];
        false -> ["process(@1).mark(\"", Mark, "\") ?"]
    end.

%% OTP's lib/runtime_tools/examples/*.systemtap from the OTP source
%% (dtrace_test_otp_examples), extracted into Priv: OTP 27's, which the
%% guests' OTPs (25 and 27) share.
otp_examples(Priv) ->
    Top = dtrace_test_otp_examples:source(Priv, 27, ["*/lib/runtime_tools/examples/*.systemtap"]),
    filename:join(Top, "lib/runtime_tools/examples").

%%--------------------------------------------------------------------
%% In the guest

%% The kernel is the root's, and the versions of what ran go to
%% versions.txt beside the logs (docs/support.md's table).
versions(_Config) ->
    Kernel = string:trim(os:cmd("uname -r")),
    ?assertEqual({Kernel, true}, {Kernel, lists:prefix(os:getenv("DTRACE_TEST_KERNEL"), Kernel)}),
    First = fun(Cmd) -> hd(string:split(string:trim(os:cmd(Cmd)), "\n")) end,
    Line = io_lib:format("kernel ~s, OTP ~s, ~s, perf ~s, ~s, SystemTap ~s",
                         [Kernel, erlang:system_info(otp_release),
                          First("bpftrace --version"),
                          lists:last(string:lexemes(First("perf version"), " ")),
                          First("gdb --version"),
                          case re:run(First("stap -V 2>&1"), "version ([0-9.]+)", [{capture, [1], list}]) of
                              {match, [V]} -> V;
                              nomatch -> "?"
                          end]),
    ct:comment("~ts", [Line]),
    ok = file:write_file(os:getenv("DTRACE_TEST_VERSIONS"), [Line, "\n"]).

%% bpftrace, through priv/bin/dtrace-bpftrace: i4s4's ten arguments with the
%% tag, process__spawn's, the provider's eight; the semaphores are down
%% before and after.
bpftrace_user_vm_provider(Config) ->
    Peer = ?config(peer, Config),
    ProvPath = define_provider(Peer),
    false = peer:call(Peer, dtrace, p, [0]),
    false = fire_provider(Peer, 0),
    Program = "
        usdt:$SO:erlang:user_trace__i4s4 {
            if (arg2 == 0) { printf(\"SEEN i4s4\\n\"); } else {
                printf(\"I4S4 %s %s %ld %ld %ld %ld %s %s %s %s\\n\", str(arg0), str(arg1), arg2, arg3,
                       arg4, arg5, str(arg6), str(arg7), str(arg8), str(arg9)); }
        }
        usdt:$SO:erlang:process__spawn { printf(\"SPAWN %s %s\\n\", str(arg0), str(arg1)); }
        usdt:" ++ ProvPath ++ ":kprov:all {
            if (arg0 == 0) { printf(\"SEEN kprov\\n\"); } else {
                printf(\"PROV %ld %s %ld %s %ld %s %s %ld\\n\", arg0, str(arg1), arg2, str(arg3), arg4,
                       str(arg5), str(arg6), arg7); }
        }",
    {{Pid, Spawned}, Lines} =
        dtrace_test_tracer:bpftrace_window(
          dtrace_bpftrace, Peer, Program,
          fun() -> dtrace:p(0), spawn(fun() -> ok end), fire_provider(0) end,
          [<<"SEEN i4s4">>, {contains, <<"SPAWN ">>}, <<"SEEN kprov">>],
          fun work/0,
          fun({_, S}, Ls) -> [] =:= wanted(S, Ls) end),
    ?assertEqual([], missing(expected(Pid, Spawned, "I4S4 ", "SPAWN ", "PROV "), Lines)),
    semaphores_down(Peer).

%% The work every tracer sees: i4s4 with a tag, a spawn, the provider's
%% probe. Returns {CallerPid, SpawnedPid}, as text.
work() ->
    dtrace:put_tag(<<"ktag">>),
    true = dtrace:p(1, -2, ?MAX, -?MAX - 1, "s-one", <<"s-two">>, ["s-", <<"three">>], "s-four"),
    dtrace:put_tag(undefined),
    S = spawn(dtrace_test_workload, sink, []),
    true = fire_provider(-1),
    exit(S, kill),
    {pid_to_list(self()), pid_to_list(S)}.

expected(Pid, Spawned, I4s4, Spawn, Prov) ->
    [iolist_to_binary([I4s4, Pid, " ktag 1 -2 9223372036854775807 -9223372036854775808 s-one s-two s-three s-four"]),
     iolist_to_binary([Spawn, Spawned, " dtrace_test_workload:sink/0"]),
     iolist_to_binary([Prov, ?ARGS_TEXT])].

wanted(Spawned, Lines) ->
    missing([{contains, iolist_to_binary(["SPAWN ", Spawned])}, {contains, <<"PROV -1">>}], Lines).

%% perf: the SDT events of the three probes (integers as perf prints
%% them) and events with string fetches at the same sites (docs/tracers.md's
%% recipe), recorded, then read with perf script.
perf_user_vm_provider(Config) ->
    Peer = ?config(peer, Config),
    ProvPath = define_provider(Peer),
    So = dtrace_test_catalogue:nif_path(),
    Cache = filename:join(?config(priv_dir, Config), "perf-buildid-cache"),
    Perf = fun(Args) -> dtrace_test_tracer:run("perf", ["--buildid-dir", Cache | Args]) end,
    _ = Perf(["probe", "-d", "sdt_erlang:*"]),
    _ = Perf(["probe", "-d", "sdt_kprov:*"]),
    _ = Perf(["probe", "-d", "dtrace_kern:*"]),
    [{0, _} = Perf(["buildid-cache", "--add", F]) || F <- [So, ProvPath]],
    [{0, _} = Perf(["probe", "-x", F, E]) || {F, E} <- [{So, "sdt_erlang:user_trace__i4s4"},
                                                        {So, "sdt_erlang:process__spawn"},
                                                        {ProvPath, "sdt_kprov:all"}]],
    {ok, Events} = file:read_file("/sys/kernel/tracing/uprobe_events"),
    Where = fun(E) -> {match, [W]} = re:run(Events, E ++ " (\\S+)", [{capture, all_but_first, binary}]), W end,
    Defs = [["p:dtrace_kern/i4s4 ", Where("sdt_erlang/user_trace__i4s4"),
             " pid=+0(%di):string tag=+0(%si):string s1=+0(%r10):string s4=+0(%r13):string\n"],
            ["p:dtrace_kern/spawn ", Where("sdt_erlang/process__spawn"), " p=+0(%di):string mfa=+0(%si):string\n"],
            ["p:dtrace_kern/prov ", Where("sdt_kprov/all"), " a1=+0(%si):string a6=+0(%r10):string a7=%r11:s64\n"]],
    [ok = file:write_file("/sys/kernel/tracing/uprobe_events", D, [append]) || D <- Defs],
    %% FIFOs in the guest's tmpfs: 9p shares take none.
    Tmp = string:trim(os:cmd("mktemp -d /tmp/kernels-perf.XXXXXX")),
    Data = filename:join(Tmp, "perf.data"),
    [Ctl, Ack] = [filename:join(Tmp, F) || F <- ["perf-ctl", "perf-ack"]],
    {0, _} = dtrace_test_tracer:run("mkfifo", [Ctl, Ack]),
    Es = ["sdt_erlang:user_trace__i4s4", "sdt_erlang:process__spawn", "sdt_kprov:all",
          "dtrace_kern:i4s4", "dtrace_kern:spawn", "dtrace_kern:prov"],
    Port = open_port({spawn_executable, os:find_executable("perf")},
                     [{args, ["--buildid-dir", Cache, "record", "-o", Data, "-D", "-1",
                              "--control", "fifo:" ++ Ctl ++ "," ++ Ack | lists:append([["-e", E] || E <- Es])]
                       ++ ["-p", ?config(os_pid, Config)]},
                      {line, 4096}, stderr_to_stdout, exit_status, binary]),
    Ceiling = integer_to_list(?C(120)),
    {0, [<<"ack">>]} = dtrace_test_tracer:run("sh", ["-c", "echo enable > \"$0\" && timeout " ++ Ceiling
                                                     ++ " head -n 1 \"$1\"", Ctl, Ack]),
    {Pid, Spawned} =
        peer:call(Peer, erlang, apply,
                  [fun() ->
                           1 = dtrace_test_workload:fire_until_true(fun() -> dtrace:p(0) end),
                           1 = dtrace_test_workload:fire_until_true(fun() -> fire_provider(0) end),
                           %% dtrace_vm sets the spawn flags once it saw
                           %% the semaphore.
                           ok = dtrace_test_workload:wait_until(fun spawn_listened/0, ?C(60000)),
                           work()
                   end, []], ?C(300000)),
    {os_pid, PerfPid} = erlang:port_info(Port, os_pid),
    _ = os:cmd("kill -INT " ++ integer_to_list(PerfPid)),
    {exit, _, PerfOut} = collect_exit(Port, [], erlang:monotonic_time(millisecond) + ?C(120000)),
    ct:log("perf record: ~p", [PerfOut]),
    {0, Script} = Perf(["script", "-i", Data]),
    ct:log("perf script: ~p", [Script]),
    Has = fun(Event, Re) -> lists:any(fun(L) -> binary:match(L, Event) =/= nomatch andalso
                                                    re:run(L, Re) =/= nomatch end, Script) end,
    ?assert(Has(<<"sdt_erlang:user_trace__i4s4:">>, " arg3=1 arg4=-2 arg5=9223372036854775807 arg6=-9223372036854775808")),
    ?assert(Has(<<"dtrace_kern:i4s4:">>, iolist_to_binary([" pid=\"", Pid, "\" tag=\"ktag\" s1=\"s-one\" s4=\"s-four\""]))),
    ?assert(Has(<<"sdt_erlang:process__spawn:">>, "")),
    ?assert(Has(<<"dtrace_kern:spawn:">>, iolist_to_binary([" p=\"", Spawned, "\" mfa=\"dtrace_test_workload:sink/0\""]))),
    ?assert(Has(<<"sdt_kprov:all:">>, " arg1=-1 .* arg3=1099511627776 .* arg5=4 ")),
    ?assert(Has(<<"dtrace_kern:prov:">>, " a1=\"s1\" a6=\"s6\" a7=7")),
    _ = Perf(["probe", "-d", "dtrace_kern:*"]),
    _ = Perf(["probe", "-d", "sdt_erlang:*"]),
    _ = Perf(["probe", "-d", "sdt_kprov:*"]),
    semaphores_down(Peer).

%% dtrace_vm has seen process__spawn's semaphore up and feeds it: from
%% spawn meta data when only it listens (no trace flag), with the procs
%% flag when process__exit listens too.
spawn_listened() ->
    ok = dtrace_vm:sync(),
    #{listening := L, spawn_meta := Meta, flags := #{processes := Flags}} = dtrace:vm_probes(),
    lists:member(<<"process__spawn">>, L) andalso (Meta =:= on orelse lists:member(procs, Flags)).

%% gdb (test/tracers/kernels.gdb): the three probes' arguments.
gdb_user_vm_provider(Config) ->
    Peer = ?config(peer, Config),
    _ = define_provider(Peer),
    {{Pid, Spawned}, Events} =
        dtrace_test_tracer:gdb_events(Peer, "kernels.gdb",
                                      fun() -> ok = dtrace_test_workload:wait_until(fun spawn_listened/0, ?C(60000)),
                                               work()
                                      end),
    ct:log("gdb: ~p", [Events]),
    ?assertEqual([], missing(expected(Pid, Spawned, "EVENT I4S4 ", "EVENT SPAWN ", "EVENT PROV "), Events)).

%% SystemTap: the module compiled before the guest booted
%% (test/tracers/kernels.stp, user and VM probes) and one the host compiled
%% against the provider's file once the node defined it.
stap_user_vm_provider(Config) ->
    Peer = ?config(peer, Config),
    ProvPath = define_provider(Peer),
    Prov = request_module("kprov_all", filename:join([root(), "test", "tracers", "kprov.stp"]), [ProvPath]),
    Kern = filename:join(os:getenv("DTRACE_TEST_STAP"), "kern.ko"),
    {Pid, Spawned} =
        stap_window(Config, [Kern, Prov],
                    fun() -> dtrace:p(0), spawn(fun() -> ok end), fire_provider(0) end,
                    [<<"SEEN i4s4">>, {contains, <<"SPAWN ">>}, <<"SEEN kprov">>],
                    fun work/0,
                    fun({P, S}) -> expected(P, S, "I4S4 ", "SPAWN ", "PROV ") end),
    ct:log("~s ~s", [Pid, Spawned]),
    semaphores_down(Peer).

%% Each of OTP's examples prints OTP's lines (dtrace_test_otp_examples).
stap_otp_examples(Config) ->
    Stap = os:getenv("DTRACE_TEST_STAP"),
    [begin
         #{ready := Ready, work := Work, expect := Expect, cleanup := Cleanup} =
             dtrace_test_otp_examples:example(Name, ?config(peer, Config)),
         Ko = filename:join(Stap, "otp_" ++ atom_to_list(Name) ++ ".ko"),
         _ = stap_window(Config, [Ko], Ready,
                         [iolist_to_binary(["WINDOW READY ", P]) || P <- dtrace_test_otp_examples:probes(Name)],
                         Work, Expect),
         Cleanup()
     end || Name <- dtrace_test_otp_examples:names()],
    ok.

%% priv/bin/dtrace-slow-spans with priv/systemtap/slow-spans.stp (compiled on the host,
%% run by the wrapper with staprun): each planted slow request is printed
%% with its planted cause. The emulated CPU makes every time long, so the
%% causes are checked and not their times (dtrace_why_SUITE checks those
%% with bpftrace on the host).
stap_slow_spans(Config) ->
    Ko = filename:join(os:getenv("DTRACE_TEST_STAP"), "slow_spans.ko"),
    Service = #{requests => 12, every => 3, causes => [sleep, gc, call, file], tolerance => infinity},
    {Planted, Lines} = dtrace_test_why:slow_spans(?config(peer, Config), ?config(priv_dir, Config),
                                                 ["--stap-module", Ko], [], Service, ?C(300000)),
    dtrace_test_why:check(Planted, dtrace_test_why:blocks(Lines), Service).

%% priv/systemtap/*.stp as shipped (plus the window's clauses), each printing its
%% lines for the workload (at exit: the tables).
stap_shipped_scripts(Config) ->
    Stap = os:getenv("DTRACE_TEST_STAP"),
    Run = fun(Base, Ready, Work, Expect) ->
                  {_, Probes} = lists:keyfind(Base, 1, shipped_stap()),
                  Ko = filename:join(Stap, "shipped_" ++ lists:flatten(string:replace(Base, "-", "_", all)) ++ ".ko"),
                  stap_window(Config, [Ko], Ready, [iolist_to_binary(["WINDOW READY ", P]) || P <- Probes],
                              Work, Expect)
          end,
    _ = Run("user-probe", fun() -> dtrace:p(-1) end,
            fun() ->
                    dtrace:put_tag(<<"stag">>),
                    true = dtrace:p(1, 2, "abc", <<"def">>),
                    dtrace:put_tag(undefined),
                    pid_to_list(self())
            end,
            fun(P) -> [iolist_to_binary([P, " stag 1 2 0 0 'abc' 'def' '' ''"])] end),
    #{ready := SpawnReady, work := SpawnWork, expect := SpawnExpect} =
        dtrace_test_otp_examples:example(shipped_spawn_exit, ?config(peer, Config)),
    _ = Run("spawn-exit", SpawnReady, SpawnWork, SpawnExpect),
    [begin
         #{ready := Ready, work := Work, expect := Expect} =
             dtrace_test_otp_examples:example(Name, ?config(peer, Config)),
         _ = Run(Base, Ready, Work, Expect)
     end || {Base, Name} <- [{"span-latency", span_latency}, {"message-latency", message_latency}]],
    #{ready := MReady, work := MWork} = dtrace_test_otp_examples:example(messages, ?config(peer, Config)),
    _ = Run("messages", MReady, MWork,
            fun({From, To}) -> [iolist_to_binary(["send:   ", From, " -> ", To, ": 4 words"]),
                                iolist_to_binary(["queued: ", To, ": 4 words"])]
            end),
    %% The lines of OTP's examples, within lines that may start with the
    %% time of day (the .bt scripts' format).
    [begin
         #{ready := Ready, work := Work, expect := Expect, cleanup := Cleanup} =
             dtrace_test_otp_examples:example(Name, ?config(peer, Config)),
         _ = Run(Base, Ready, Work,
                 fun(R) -> [case W of {contains, _} -> W; _ -> {contains, W} end || W <- Expect(R)] end),
         Cleanup()
     end || {Base, Name} <- [{"process-scheduling", process_scheduling}, {"garbage-collection", garbage_collection},
                             {"function-calls", function_calls}, {"port1", port1}]],
    File = "/tmp/kernels-efile-" ++ os:getpid() ++ ".txt",
    ok = file:write_file(File, <<"efile.stp">>),
    _ = Run("efile", fun() -> dtrace_file:read_file_info(File) end,
            fun() ->
                    dtrace:put_tag(<<"ftag">>),
                    {ok, <<"efile.stp">>} = dtrace_file:read_file(File),
                    dtrace:put_tag(undefined)
            end,
            fun(_) -> [{contains, iolist_to_binary(["efile READ_FILE(15) "])},
                       {contains, iolist_to_binary([" tag=ftag s1=", File])},
                       {contains, <<" tag=ftag ok in ">>},
                       {at_exit, <<"Latency (us) of file operations, per user tag:">>},
                       {at_exit, <<"@latency_us[ftag]:">>}]
            end),
    ok.

%% priv/bpftrace/spawn-exit.bt as shipped (a VM probe script).
shipped_bpftrace_script(Config) ->
    Script = filename:join([code:priv_dir(dtrace), "bpftrace", "spawn-exit.bt"]),
    {Port, _} = dtrace_test_tracer:bpftrace_start(bpftrace, ?config(os_pid, Config), {file, Script}),
    Peer = ?config(peer, Config),
    Pid = peer:call(Peer, erlang, apply,
                    [fun() ->
                             ok = dtrace_test_workload:wait_until(fun spawn_listened/0, ?C(60000)),
                             {P, Ref} = spawn_monitor(fun() -> exit(kernels) end),
                             receive {'DOWN', Ref, process, P, kernels} -> pid_to_list(P) end
                     end, []], ?C(120000)),
    {Port, Lines} = dtrace_test_tracer:bpftrace_await({Port, []}, [{contains, iolist_to_binary([Pid, " mfa "])},
                                                                   {contains, <<") reason kernels">>}]),
    All = dtrace_test_tracer:bpftrace_stop({Port, Lines}),
    ct:log("~ts", [lists:join("\n", All)]),
    %% The exit line names the process: empty, unless the node named it
    %% before it exited.
    ?assert(lists:any(fun(L) -> re:run(L, ["^pid ", Pid, " \\(.*\\) reason kernels$"]) =/= nomatch end, All)).

%% priv/bin/dtrace-doctor on the node: no check fails; the guest's bpftrace
%% (0.17, 0.23: both before 0.24) is named with its argument limit and the
%% wrapper; SystemTap is among the tracers found; the missing DTrace helper
%% device is named. Then, with the kernel's lockdown raised to integrity
%% (as Secure Boot does; it cannot be lowered again, and this is the
%% group's last case), the lockdown line names what it refuses.
doctor(Config) ->
    Doctor = fun() ->
                     {Status, Out} = dtrace_test_tracer:run(filename:join([code:priv_dir(dtrace), "bin", "dtrace-doctor"]),
                                                            [?config(os_pid, Config)]),
                     ct:log("dtrace-doctor (~p):~n~ts", [Status, lists:join("\n", Out)]),
                     ?assertEqual(0, Status),
                     ?assertEqual([], [L || L <- Out, binary:match(L, <<"FAIL">>) =/= nomatch]),
                     fun(Part) -> lists:any(fun(L) -> binary:match(L, Part) =/= nomatch end, Out) end
             end,
    Has = Doctor(),
    ?assert(Has(<<"reads USDT arguments arg0..arg5 only">>)),
    ?assert(Has(<<"priv/bin/dtrace-bpftrace">>)),
    ?assert(Has(<<"stap ">>)),
    ?assert(Has(<<"no DTrace helper device (/dev/dtrace/helper)">>)),
    ?assert(Has(<<"ok   lockdown    none">>)),
    ok = file:write_file("/sys/kernel/security/lockdown", <<"integrity">>),
    Locked = Doctor(),
    ?assert(Locked(<<"warn lockdown    integrity: bpf_probe_write_user is refused">>)).

%%--------------------------------------------------------------------
%% Helpers

define_provider(Peer) ->
    peer:call(Peer, erlang, apply,
              [fun() ->
                       Self = self(),
                       P = spawn(dtrace_test_workload, provider_holder, [?PROVIDER, ?PROBES, Self]),
                       receive {P, Path} -> Path end
               end, []]).

%% In the peer.
fire_provider(First) ->
    dtrace_provider:fire(dtrace_test_workload:provider_handle(?PROVIDER), all, ?ARGS(First)).

fire_provider(Peer, First) ->
    peer:call(Peer, erlang, apply, [fun() -> fire_provider(First) end, []]).

%% Once the tracer is gone, the probes return false again (the kernel
%% lowers the semaphores as the tracer detaches).
semaphores_down(Peer) ->
    ok = peer:call(Peer, dtrace_test_workload, wait_until,
                   [fun() -> not dtrace:p(0) andalso not fire_provider(0) end, ?C(60000)]).

%% Asks the host for a module compiled from Script with Args (see the
%% module doc); returns its path once compiled.
request_module(Name, Script, Args) ->
    Req = filename:join(os:getenv("DTRACE_TEST_STAP"), "requests"),
    %% An answer to an earlier request is never taken for this one's.
    _ = file:delete(filename:join(Req, Name ++ ".done")),
    ok = file:write_file(filename:join(Req, Name ++ ".args"), lists:join("\n", Args)),
    {ok, _} = file:copy(Script, filename:join(Req, Name ++ ".stp.tmp")),
    ok = file:rename(filename:join(Req, Name ++ ".stp.tmp"), filename:join(Req, Name ++ ".stp")),
    Done = filename:join(Req, Name ++ ".done"),
    ok = dtrace_test_workload:wait_until(fun() -> filelib:is_regular(Done) end, ?C(300000)),
    {ok, <<"ok">>} = file:read_file(Done),
    filename:join(Req, Name ++ ".ko").

%% staprun of each of Modules on the peer: Ready() fired in the peer until
%% every line of ReadyLines was printed, then Work() there, then every line
%% Expect(Result) names awaited (those marked {at_exit, _} are printed by
%% the script's end probe), then SIGINT, then all of them checked. Returns
%% Result.
stap_window(Config, Modules, Ready, ReadyLines, Work, Expect) ->
    Peer = ?config(peer, Config),
    Ports = [open_port({spawn_executable, os:find_executable("staprun")},
                       [{args, ["-x", ?config(os_pid, Config), Ko]},
                        {line, 65536}, stderr_to_stdout, exit_status, binary]) || Ko <- Modules],
    T0 = erlang:monotonic_time(millisecond),
    ok = peer:call(Peer, dtrace_test_workload, start_ready_loop, [Ready]),
    Lines1 = collect(Ports, fun(Ls) -> missing(ReadyLines, Ls) =/= [] end, [],
                     erlang:monotonic_time(millisecond) + ?C(180000), "the probes to attach"),
    ct:log("~p: the probes attached after ~b ms (ceiling ~b ms)",
           [Modules, erlang:monotonic_time(millisecond) - T0, ?C(180000)]),
    Result = peer:call(Peer, dtrace_test_workload, stop_ready_loop_and_run, [Work], ?C(120000)),
    Wanted = Expect(Result),
    Live = [W || W <- Wanted, not is_tuple(W) orelse element(1, W) =/= at_exit],
    Lines2 = collect(Ports, fun(Ls) -> missing(Live, Ls) =/= [] end, Lines1,
                     erlang:monotonic_time(millisecond) + ?C(60000), "the workload's lines"),
    Lines = lists:foldl(fun(Port, Acc) ->
                                {os_pid, OsPid} = erlang:port_info(Port, os_pid),
                                _ = os:cmd("kill -INT " ++ integer_to_list(OsPid)),
                                {exit, 0, More} = collect_exit(Port, [], erlang:monotonic_time(millisecond) + ?C(60000)),
                                Acc ++ More
                        end, Lines2, Ports),
    ct:log("staprun ~p: ~b lines:~n~ts", [Modules, length(Lines), lists:join("\n", Lines)]),
    ?assertEqual([], missing([case W of {at_exit, X} -> X; X -> X end || W <- Wanted], Lines)),
    Result.

%% Lines from any of Ports while Continue(Lines) holds; fails at Deadline
%% or when a tracer exits first.
collect(Ports, Continue, Acc, Deadline, What) ->
    case Continue(Acc) of
        false -> Acc;
        true ->
            receive
                {Port, {data, {eol, Line}}} when is_port(Port) ->
                    true = lists:member(Port, Ports),
                    collect(Ports, Continue, Acc ++ [Line], Deadline, What);
                {Port, {exit_status, Status}} when is_port(Port) ->
                    ct:fail("staprun exited (~p) while waiting for ~s: ~p", [Status, What, Acc])
            after max(0, Deadline - erlang:monotonic_time(millisecond)) ->
                    Reports = [case erlang:port_info(P, os_pid) of
                                   {os_pid, Pid} -> dtrace_test_tracer:process_report(Pid);
                                   undefined -> "(exited)"
                               end || P <- Ports],
                    ct:fail("staprun did not print ~s in time (ceilings times ~p): ~p~nits processes:~n~ts",
                            [What, dtrace_test_tracer:slowdown(), Acc, Reports])
            end
    end.

collect_exit(Port, Acc, Deadline) ->
    receive
        {Port, {data, {eol, Line}}} -> collect_exit(Port, [Line | Acc], Deadline);
        {Port, {data, {noeol, Part}}} -> collect_exit(Port, [Part | Acc], Deadline);
        {Port, {exit_status, Status}} -> {exit, Status, lists:reverse(Acc)}
    after max(0, Deadline - erlang:monotonic_time(millisecond)) ->
            ct:fail("the tracer did not exit in time: ~p", [lists:reverse(Acc)])
    end.

%% Those of Wanted (equal binaries, {contains, Part}) no line satisfies.
missing(Wanted, Lines) ->
    [W || W <- Wanted,
          not lists:any(fun(L) ->
                                case W of
                                    {contains, Part} -> binary:match(L, Part) =/= nomatch;
                                    _ -> L =:= W
                                end
                        end, Lines)].
