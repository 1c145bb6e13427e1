%%% @doc "Why is my probe silent?", from inside the node: what only the node
%%% knows (see {@link dtrace:doctor/0}). priv/bin/dtrace-doctor PID is the
%%% host's side: privileges, the kernel, the tracers.
%%% @end
-module(dtrace_doctor).

-export([run/0, findings/0, format/1]).

-export_type([finding/0]).

-type finding() :: #{level := ok | info | warn | fail, check := atom(), text := binary(),
                     fix => binary()}.
%% One check's result: `fail' means no tracer can see the probes it
%% concerns until `fix' is done.

%% @doc The node's findings, in the order checked: the library (loaded,
%% and the file the node mapped still the one on disk; which precompiled
%% archive it came from, when it did), the sinks (SDT
%% notes, LTTng, DOF, each with why not), the OS pid (and its pid
%% namespace), automatic mode and the probes a tracer listens to now.

%% What dtrace:doctor/0 does: prints the findings, one line each, and
%% returns `ok' or `{error, Checks}' naming the checks that failed.
-spec run() -> ok | {error, Failed :: [atom(), ...]}.
run() ->
    Findings = findings(),
    io:put_chars(format(Findings)),
    case [C || #{level := fail, check := C} <- Findings] of
        [] -> ok;
        Failed -> {error, Failed}
    end.

-spec findings() -> [finding()].
findings() ->
    lists:append([library(), origin(), sinks(), os_pid(), vm(), listening()]).

%% @doc The findings as text, one line each (`ok', `info', `warn', `FAIL',
%% the check, what was found), a failure's fix on the next line: the
%% format of priv/bin/dtrace-doctor.
-spec format([finding()]) -> binary().
format(Findings) ->
    iolist_to_binary(
      [[io_lib:format("~-4s ~-11s ~ts~n", [level(L), atom_to_list(C), T]),
        case F of
            #{fix := Fix} -> io_lib:format("     ~-11s fix: ~ts~n", ["", Fix]);
            _ -> []
        end] || #{level := L, check := C, text := T} = F <- Findings]).

level(fail) -> "FAIL";
level(L) -> atom_to_list(L).

f(Level, Check, Fmt, Args) ->
    #{level => Level, check => Check, text => iolist_to_binary(io_lib:format(Fmt, Args))}.

f(Level, Check, Fmt, Args, Fix) ->
    (f(Level, Check, Fmt, Args))#{fix => iolist_to_binary(Fix)}.

%% Where the library came from, when it is a precompiled one:
%% priv/precompiled.txt, which native/precompiled.escript writes (one line
%% per archive: its name, its SHA-256 and where it was fetched from).
origin() ->
    case file:read_file(filename:join(code:priv_dir(dtrace), "precompiled.txt")) of
        {ok, Text} ->
            [case string:lexemes(Line, " ") of
                 [Archive, Sum | _] -> f(info, library, "precompiled: ~ts, ~ts", [Archive, Sum]);
                 _ -> f(info, library, "precompiled: ~ts", [Line])
             end || Line <- string:lexemes(Text, "\n"), binary:match(Line, <<"libdtrace_nif-">>) =:= {0, 14}];
        {error, _} ->
            []
    end.

%% The library: loaded, and mapped from the file on disk under its path.
library() ->
    Path = filename:join(code:priv_dir(dtrace), "dtrace_nif.so"),
    case dtrace_nif:available() of
        false ->
            [f(fail, library, "dtrace_nif is not loaded (~ts): every probe call returns false",
               [Path], "build the library (rebar3 compile, mix compile) and see the node's log for why it "
                       "did not load")];
        true ->
            case mapped(Path) of
                {ok, Inode, Deleted} ->
                    case file:read_file_info(Path, [raw]) of
                        {ok, Info} when element(12, Info) =:= Inode, not Deleted ->
                            [f(ok, library, "~ts loaded, the file on disk", [Path])];
                        _ ->
                            [f(fail, library, "~ts: this node runs a file that is no longer on disk under that "
                                              "path (a new build copied over it): tracers given the path attach "
                                              "to the new file", [Path],
                               "restart the node; or attach with bpftrace -p PID and usdt::erlang:... probes "
                               "(no path), which follow the mapped file")]
                    end;
                unknown ->
                    [f(ok, library, "~ts loaded", [Path])]
            end
    end.

%% {ok, Inode, Deleted} of the mapping of Path's file name in this
%% process, or unknown (no /proc).
mapped(Path) ->
    Base = filename:basename(Path),
    case file:read_file("/proc/self/maps") of
        {ok, Maps} ->
            Lines = [L || L <- binary:split(Maps, <<"\n">>, [global]), binary:match(L, list_to_binary(Base)) =/= nomatch],
            case Lines of
                [L | _] ->
                    [_Range, _Perms, _Off, _Dev, Inode | Rest] = string:lexemes(L, " "),
                    {ok, binary_to_integer(Inode), lists:member(<<"(deleted)">>, Rest)};
                [] ->
                    unknown
            end;
        {error, _} ->
            unknown
    end.

sinks() ->
    #{sdt := Sdt, lttng := Lttng, dof := Dof} = dtrace_nif:sinks(),
    [case Sdt of
         true -> f(ok, sdt, "SDT notes and semaphores: bpftrace, perf, gdb, SystemTap, DTrace -p see the probes", []);
         false -> f(fail, sdt, "built without SDT probes", [], "build on Linux x86_64 or aarch64")
     end,
     case Lttng of
         true -> f(ok, lttng, "the LTTng-UST sink is loaded", []);
         {false, Why} -> f(info, lttng, "no LTTng sink: ~ts", [Why])
     end,
     case Dof of
         true -> f(ok, dof, "registered with DTrace (DOF): dtrace -n 'erlang*:::...' sees this node", []);
         {false, Why} -> f(info, dof, "no DOF: ~ts", [Why], "DTrace with -p PID through priv/bin/dtrace-d")
     end].

os_pid() ->
    Pid = os:getpid(),
    case file:read_file("/proc/self/status") of
        {ok, Status} ->
            case re:run(Status, <<"^NSpid:\\s*(.*)$">>, [multiline, {capture, all_but_first, binary}]) of
                {match, [Pids]} when byte_size(Pids) > 0 ->
                    case string:lexemes(Pids, " \t") of
                        [_] ->
                            [f(info, process, "OS pid ~s (a tracer in this pid namespace takes it; from a "
                                              "container's host, the host pid: priv/bin/dtrace-doctor there)", [Pid])];
                        [Outer | _] = All ->
                            [f(info, process, "OS pid ~s here, ~ts in the outermost pid namespace (a tracer on "
                                              "the host takes ~ts)", [Pid, Outer, Outer]) || length(All) > 1]
                    end;
                _ ->
                    [f(info, process, "OS pid ~s", [Pid])]
            end;
        {error, _} ->
            [f(info, process, "OS pid ~s", [Pid])]
    end.

vm() ->
    case dtrace_vm:status() of
        {error, not_started} ->
            [f(warn, vm_probes, "the dtrace application is not running: the VM's probes (messages, "
                                "scheduling, GC, ...) are never fed", [],
               "application:ensure_all_started(dtrace)")];
        #{mode := manual} ->
            [f(warn, vm_probes, "manual mode: the VM's probes fire only for processes traced with "
                                "{tracer, dtrace_tracer, []}", [], "dtrace:vm_probes(auto)")];
        #{mode := auto, flags := #{processes := P, ports := O}, tracing := T} = Status ->
            [f(ok, vm_probes, "automatic mode (~p), trace flags set now: processes ~p, ports ~p", [T, P, O])
             | taken(Status) ++ gc_held_back(Status)]
    end.

%% The processes automatic mode does not trace for GC because another
%% session does, on a VM where both would crash it (OTP-20385).
gc_held_back(#{gc_held_back := #{processes := N, new_processes := New}}) when N > 0; New ->
    [f(warn, gc_overlap, "GC probes not fed for ~b process(es)~ts: another trace session traces them for "
                         "garbage_collection, and a second session doing so crashes this VM (OTP-20385, "
                         "OTP 27.0 to 29.1.1)", [N, [" and new processes" || New]],
       "stop the other session's garbage_collection tracing, or run OTP 29.1.2+")];
gc_held_back(_) ->
    [].

%% The probes automatic mode leaves unfed because another holds what feeds
%% them (the system monitor, a meta pattern, the node's send match spec).
taken(Status) ->
    [f(warn, Check, "~ts not fed: ~p holds ~ts", [Probes, Owner, What], Fix)
     || {Key, Check, Probes, What, Fix} <-
            [{system_monitor, system_monitor, "port__busy, dist__port_busy", "the node's system monitor",
              "erlang:system_monitor(undefined) once the operator's monitor is no longer needed"},
             {exit_meta, exit_meta, "process__exit_signal", "the meta pattern on erlang:exit/2",
              "erlang:trace_pattern({erlang, exit, 2}, false, [meta]) if that tracer is done"},
             {spawn_meta, spawn_meta, "process__spawn (alone)", "a meta pattern on the spawn BIFs",
              "listen to another process probe too (procs feeds it), or free the pattern"},
             {send_code, send_code, "dtrace_message__send_code", "the node's send tracing (OTP 25, 26)",
              "stop the other send tracing, or use OTP 27 (sessions)"}],
        {taken, Owner} <- [maps:get(Key, Status, off)]].

listening() ->
    {_, _, Listened, _} = dtrace_nif:vm_listening(),
    case Listened of
        [] -> [f(info, listening, "no probe or event has a tracer now: each probe call returns false", [])];
        _ -> [f(info, listening, "~b with a tracer now: ~ts", [length(Listened), lists:join(", ", lists:sublist(Listened, 12))])]
    end.
