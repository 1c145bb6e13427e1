%% A real third-party application the project did not write, deployed
%% without the library: Debian's RabbitMQ (scripts/rabbitmq.sh unpacks the
%% package; it runs on the system's OTP, as Debian ships it), on
%% 127.0.0.1, given a bounded AMQP load (test/loads/amqp.py, Debian's
%% python3-pika). priv/bin/dtrace-attach reaches it through rabbitmqctl eval
%% (the node says its name and cookie), and by name and cookie file, as an
%% operator would; a shipped VM script (priv/bpftrace/message-latency.bt)
%% shows the broker's mailbox waits under the load; --detach leaves the
%% broker as it was: code path, applications, trace flags and send and
%% receive match specs equal to before the attach, no module of the library.
%%
%% Built with a newer OTP than the broker's, the library is refused, and
%% the case checks that refusal instead.
-module(dtrace_rabbitmq_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([suite/0, all/0, init_per_suite/1, end_per_suite/1]).
-export([broker_attach_trace_detach/1]).

-define(CHANNEL_CAST, {rabbit_channel, handle_cast, 2}).


suite() ->
    [{timetrap, {minutes, 10}}].

all() ->
    [broker_attach_trace_detach].

init_per_suite(Config) ->
    case dtrace_test_tracer:require_tracer(bpftrace) of
        ok -> start_broker(Config);
        Skip -> Skip
    end.

end_per_suite(Config) ->
    stop_broker(Config).

%%--------------------------------------------------------------------
%% The broker

%% Starts RabbitMQ from the unpacked package with a base directory, a
%% random cookie and free ports of its own (never a system broker's), its
%% AMQP and distribution listening on 127.0.0.1 only, on the system's OTP
%% (PATH without the suite's OTP), and distribution for this node to reach
%% it. A broker that does not come up is killed.
start_broker(Config) ->
    Script = filename:join([dtrace_test_catalogue:repo_root(), "scripts", "rabbitmq.sh"]),
    {0, Lines} = dtrace_test_tracer:build("sh", ["-c", Script ++ " 2>&1"]),
    Root = binary_to_list(lists:last(Lines)),
    Base = "/tmp/dtrace-rabbitmq-" ++ os:getpid(),
    _ = file:del_dir_r(Base),
    {Home, Cookie, CookieText} = dtrace_test_rabbitmq:home(Base),
    Node = list_to_atom("dtrace_rmq_" ++ os:getpid() ++ "@localhost"),
    [AmqpPort, DistPort] = dtrace_test_rabbitmq:free_ports(2),
    Env = [{"PATH", "/usr/sbin:/usr/bin:/sbin:/bin"}, {"HOME", Home}, {"ESCRIPT_NAME", false},
           {"RABBITMQ_NODENAME", atom_to_list(Node)}, {"RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1"},
           {"RABBITMQ_NODE_PORT", AmqpPort}, {"RABBITMQ_DIST_PORT", DistPort},
           {"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS", "-kernel inet_dist_use_interface {127,0,0,1}"}]
        ++ [{V, filename:join(Base, F)} || {V, F} <- [{"RABBITMQ_MNESIA_BASE", "mnesia"},
                                                     {"RABBITMQ_LOG_BASE", "log"},
                                                     {"RABBITMQ_ENABLED_PLUGINS_FILE", "enabled_plugins"},
                                                     {"RABBITMQ_PID_FILE", "pid"},
                                                     {"RABBITMQ_CONFIG_FILE", "rabbitmq"},
                                                     {"RABBITMQ_ADVANCED_CONFIG_FILE", "advanced.config"},
                                                     {"RABBITMQ_CONF_ENV_FILE", "rabbitmq-env.conf"}]],
    %% In the background, its output in Base/out: the broker outlives the
    %% process that runs init_per_suite.
    Server = filename:join(Root, "usr/lib/rabbitmq/bin/rabbitmq-server"),
    Port = open_port({spawn_executable, "/bin/sh"},
                     [{args, ["-c", "\"$0\" > out 2>&1 &", Server]}, {env, Env}, {cd, Base}, exit_status]),
    receive {Port, {exit_status, 0}} -> ok
    after 10000 -> ct:fail("sh did not start RabbitMQ in the background")
    end,
    {ok, _} = net_kernel:start([list_to_atom("dtrace_rabbitmq_suite_" ++ os:getpid()), shortnames]),
    true = erlang:set_cookie(Node, list_to_atom(CookieText)),
    Up = fun() -> try erpc:call(Node, rabbit, is_running, [], 5000) catch _:_ -> false end =:= true end,
    case dtrace_test_workload:wait_until(Up, dtrace_test_tracer:ceiling(120000)) of
        ok -> ok;
        timeout ->
            Out = file:read_file(filename:join(Base, "out")),
            _ = case file:read_file(filename:join(Base, "pid")) of
                    {ok, Pid} -> os:cmd("kill -KILL " ++ string:trim(binary_to_list(Pid)));
                    _ -> ok
                end,
            _ = net_kernel:stop(),
            ct:fail("RabbitMQ did not start (its log: ~ts/log): ~p", [Base, Out])
    end,
    OsPid = erpc:call(Node, os, getpid, []),
    [{broker, Node}, {broker_os_pid, OsPid}, {cookie_file, Cookie}, {base, Base}, {amqp_port, AmqpPort},
     {rabbitmqctl, filename:join(Root, "usr/lib/rabbitmq/bin/rabbitmqctl")}, {home, Home},
     {pythonpath, filename:join(Root, "usr/lib/python3/dist-packages")} | Config].

stop_broker(Config) ->
    Node = ?config(broker, Config),
    OsPid = ?config(broker_os_pid, Config),
    _ = try erpc:call(Node, init, stop, [], 5000) catch _:_ -> gone end,
    Gone = fun() -> not filelib:is_dir("/proc/" ++ OsPid) end,
    case dtrace_test_workload:wait_until(Gone, dtrace_test_tracer:ceiling(60000)) of
        ok -> ok;
        timeout -> os:cmd("kill -KILL " ++ OsPid)
    end,
    _ = net_kernel:stop(),
    _ = file:del_dir_r(?config(base, Config)),
    ok.

%%--------------------------------------------------------------------

broker_attach_trace_detach(Config) ->
    Node = ?config(broker, Config),
    Before = snapshot(Node),
    BrokerOtp = erpc:call(Node, erlang, system_info, [otp_release]),
    case list_to_integer(erlang:system_info(otp_release)) > list_to_integer(BrokerOtp) of
        true ->
            {1, Out} = attach(Config, []),
            ?assert(has(Out, ["dtrace-attach: ", atom_to_list(Node), " runs OTP ", BrokerOtp])),
            ?assert(has(Out, ["compiled by a newer OTP"])),
            ?assertEqual(Before, snapshot(Node)),
            {comment, "the library built with OTP " ++ erlang:system_info(otp_release)
             ++ " is refused by the OTP " ++ BrokerOtp ++ " broker, as it must be"};
        false ->
            trace_broker(Config, Node, Before)
    end.

trace_broker(Config, Node, Before) ->
    %% As an operator with only the broker's own tools: rabbitmqctl eval
    %% gives the node's name and cookie (no NODE, no cookie file here).
    Ctl = lists:flatten(["env -u ESCRIPT_NAME -u ERL_LIBS -u ERL_FLAGS -u ERL_AFLAGS -u ERL_ZFLAGS "
                         "PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=", ?config(home, Config), " ",
                         ?config(rabbitmqctl, Config), " -n ", atom_to_list(Node), " eval"]),
    {Status, Out} = dtrace_test_tracer:run(filename:join([code:priv_dir(dtrace), "bin", "dtrace-attach"]), ["--eval", Ctl]),
    ct:log("dtrace-attach --eval '~ts': exit status ~p~n~ts", [Ctl, Status, lists:join("\n", Out)]),
    ?assertEqual(0, Status),
    ?assert(has(Out, ["attached dtrace to ", atom_to_list(Node)])),
    [OsPid] = [P || L <- Out, {match, [P]} <- [re:run(L, "\\(OS pid ([0-9]+),", [{capture, all_but_first, list}])]],
    ?assertEqual(OsPid, erpc:call(Node, os, getpid, [])),
    Script = filename:join([code:priv_dir(dtrace), "bpftrace", "message-latency.bt"]),
    Tracer = dtrace_test_tracer:bpftrace_start(bpftrace, OsPid, {file, Script}),
    %% Automatic mode sets the send and running flags once both probes'
    %% semaphores are up: the tracer then listens to both.
    Listening = fun() ->
                        ok = erpc:call(Node, dtrace_vm, sync, []),
                        #{flags := #{processes := Flags}} = erpc:call(Node, dtrace, vm_probes, []),
                        lists:member(send, Flags) andalso lists:member(running, Flags)
                end,
    ok = dtrace_test_workload:wait_until(Listening, dtrace_test_tracer:ceiling(60000)),
    ok = amqp_load(Config, 2000, 10000),
    Lines = dtrace_test_tracer:bpftrace_stop(Tracer),
    ct:log("message-latency.bt on the broker:~n~ts", [lists:join("\n", Lines)]),
    %% The histogram of waits, and the longest wait per receiver: pids of
    %% the broker's processes, with counts.
    ?assert(lists:member(<<"Send to receiver scheduled (us), and the longest wait per receiver:">>, Lines)),
    %% Each receiver with its name (dtrace_process__name), where the
    %% broker's process has one: the channels' process_name.
    Receivers = [{P, N} || L <- Lines,
                           {match, [P, N]} <- [re:run(L, "^@max_wait_us\\[(<0\\.[0-9]+\\.0>), (.*)\\]: [0-9]+$",
                                                      [{capture, all_but_first, binary}])]],
    ?assertNotEqual([], Receivers),
    ?assertNotEqual([], [N || {_, N} <- Receivers, N =/= <<>>]),
    Causes = function_spans(Config, Node, OsPid),
    {0, Detached} = attach(Config, ["--detach"]),
    ?assert(has(Detached, ["detached dtrace from ", atom_to_list(Node)])),
    After = snapshot(Node),
    ?assertEqual(Before, After),
    Ebin = filename:dirname(code:which(dtrace)),
    ?assertEqual([], [M || {M, F} <- erpc:call(Node, code, all_loaded, []), is_list(F), lists:prefix(Ebin, F)]),
    ?assertEqual({traced, false}, erpc:call(Node, erlang, trace_info, [?CHANNEL_CAST, traced])),
    {comment, io_lib:format("~b receivers in message-latency.bt's output; function spans of ~s: ~b broken "
                            "down, causes: ~ts", [length(Receivers), "rabbit_channel:handle_cast/2",
                                                 length(Causes), lists:join("; ", lists:usort(Causes))])}.

%% The channel's casts (each AMQP method the reader passes on) as function
%% spans: priv/bin/dtrace-slow-spans (threshold 0: every one) breaks them down
%% and names a cause. Returns the causes. The VM's view only (--no-os):
%% at threshold 0 on the loaded broker, bpftrace 0.23 lost events all
%% through the kernel part (test-trixie), which dtrace_why_os_SUITE covers.
function_spans(Config, Node, OsPid) ->
    {0, Set} = attach(Config, ["--function", "rabbit_channel:handle_cast/2"]),
    ?assert(has(Set, [": function spans on rabbit_channel:handle_cast/2"])),
    Script = filename:join([code:priv_dir(dtrace), "bin", "dtrace-slow-spans"]),
    Port = open_port({spawn_executable, Script}, [{args, ["-p", OsPid, "--threshold", "0", "--no-os"]},
                                                 {line, 65536}, stderr_to_stdout, exit_status, binary]),
    Set_ = fun() -> ok = erpc:call(Node, dtrace_vm, sync, []),
                    maps:get(function_spans_set, erpc:call(Node, dtrace, vm_probes, [])) end,
    ok = dtrace_test_workload:wait_until(Set_, dtrace_test_tracer:ceiling(60000)),
    ok = amqp_load(Config, 500, 10000),
    Causes = fun(Ls) -> [C || {match, [C]} <- [re:run(L, "^    cause: (.*), [0-9.]+ ms \\([0-9]+%\\)$",
                                                        [{capture, all_but_first, binary}]) || L <- Ls]] end,
    Lines0 = dtrace_test_why:collect(Port, [], fun(Ls) -> length(Causes(Ls)) >= 10 end,
                                     dtrace_test_tracer:ceiling(30000)),
    %% The channel by its name. Its one dtrace_process__name event can be
    %% lost in the flood of spans (threshold 0; the tool says it lost
    %% events, as in test-trixie): then a small load's new channel is named.
    Named = fun(Ls) -> [L || L <- Ls, re:run(L, "slow span: rabbit_channel:handle_cast/2 .* pid <0\\.[0-9]+\\.0> "
                                                  "\\(\\{rabbit_channel,") =/= nomatch] end,
    Lost = fun(Ls) -> lists:any(fun(L) -> binary:match(L, <<"(the tracer lost events">>) =/= nomatch end, Ls) end,
    Lines1 = case Named(Lines0) =:= [] andalso Lost(Lines0) of
                 true ->
                     ok = amqp_load(Config, 20, 100),
                     dtrace_test_why:collect(Port, Lines0, fun(Ls) -> Named(Ls) =/= [] end,
                                             dtrace_test_tracer:ceiling(30000));
                 false ->
                     Lines0
             end,
    Lines = dtrace_test_why:stop(Port, Lines1),
    ct:log("dtrace-slow-spans on the broker (first 200 lines):~n~ts", [lists:join("\n", lists:sublist(Lines, 200))]),
    ?assert(has(Lines, ["slow span: rabbit_channel:handle_cast/2 "])),
    ?assertMatch([_ | _], Named(Lines)),
    ?assert(length(Causes(Lines)) >= 10),
    {0, None} = attach(Config, ["--function", "none"]),
    ?assert(has(None, [": no function spans"])),
    Causes(Lines).

%% Ports free now on 127.0.0.1 (the kernel's choice), as strings.
%% What the operator's broker must find as it was after a detach: on OTP
%% 27 and later, the trace sessions too (automatic mode's own session).
snapshot(Node) ->
    %% Each process's flags, asked one by one (the broker has no module of
    %% this suite to run a fun of).
    Traced = [P || P <- erpc:call(Node, erlang, processes, []),
                   not lists:member(erpc:call(Node, erlang, trace_info, [P, flags]), [{flags, []}, undefined])],
    #{path => erpc:call(Node, code, get_path, []),
      applications => lists:sort([A || {A, _, _} <- erpc:call(Node, application, loaded_applications, [])]),
      traced => Traced,
      new_processes => erpc:call(Node, erlang, trace_info, [new_processes, flags]),
      new_ports => erpc:call(Node, erlang, trace_info, [new_ports, flags]),
      send => erpc:call(Node, erlang, trace_info, [send, match_spec]),
      'receive' => erpc:call(Node, erlang, trace_info, ['receive', match_spec]),
      sessions => case erpc:call(Node, code, ensure_loaded, [trace]) of
                      {module, trace} -> erpc:call(Node, trace, session_info, [all]);
                      {error, _} -> none
                  end}.

%% test/loads/amqp.py on the broker: Count messages of Size bytes
%% published and consumed, or the case fails.
amqp_load(Config, Count, Size) ->
    Script = filename:join([dtrace_test_catalogue:repo_root(), "test", "loads", "amqp.py"]),
    {0, Out} = dtrace_test_tracer:run("env", ["PYTHONPATH=" ++ ?config(pythonpath, Config), "/usr/bin/python3", Script,
                                              ?config(amqp_port, Config), integer_to_list(Count),
                                              integer_to_list(Size)]),
    ?assert(lists:member(iolist_to_binary(io_lib:format("published ~b consumed ~b", [Count, Count])), Out)),
    ok.

attach(Config, Extra) ->
    Script = filename:join([code:priv_dir(dtrace), "bin", "dtrace-attach"]),
    {Status, Out} = dtrace_test_tracer:run(Script, [atom_to_list(?config(broker, Config)),
                                                    "--cookie-file", ?config(cookie_file, Config) | Extra]),
    ct:log("dtrace-attach ~p: exit status ~p~n~ts", [Extra, Status, lists:join("\n", Out)]),
    {Status, Out}.

has(Lines, Parts) ->
    Part = iolist_to_binary(Parts),
    lists:any(fun(L) -> binary:match(L, Part) =/= nomatch end, Lines).
