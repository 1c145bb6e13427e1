#!/usr/bin/env escript
%% -*- erlang -*-
%%! -hidden -connect_all false -setcookie dtrace_attach_own -kernel inet_dist_use_interface {127,0,0,1}
%%
%% dtrace-attach: the library on a running node deployed without it, and
%% off again. Run by priv/bin/dtrace-attach, which finds an escript for it
%% (its header says how: the host's, or the node's own); interpreted
%% (-mode(interpret)), so that a release's escript, whose release has no
%% `compiler', runs it on every OTP from 25.
%%
%%   dtrace-attach NODE [--cookie C | --cookie-file F] [--lib DIR] [--pid PID] [--function FUN ...]
%%   dtrace-attach --release RELDIR [...]
%%   dtrace-attach --eval "bin/myapp eval" [...]
%%   dtrace-attach NODE --detach [--cookie C | --cookie-file F]
%%   dtrace-attach NODE --status [--cookie C | --cookie-file F]
%%
%% --pid PID (given to priv/bin/dtrace-attach, which uses it to find the
%% node's escript and namespaces) is the node's OS pid as this host sees
%% it: printed, for tracers, instead of the one the node gives (its own
%% pid namespace's, in a container).
%%
%% NODE is the node's name (rabbit@myhost, myapp@127.0.0.1), on this host:
%% this script connects to it as a hidden node over loopback (a node in a
%% container is reached so when the container shares the host's network).
%% The cookie is the first line of --cookie-file (a release keeps it in
%% releases/COOKIE; RabbitMQ in /var/lib/rabbitmq/.erlang.cookie), --cookie
%% (seen by anyone who lists processes: prefer the file; a -setcookie of
%% vm.args goes there), or ~/.erlang.cookie; with none of these it refuses
%% (it never makes a cookie file). Run it as root or as the node's user.
%%
%% --release RELDIR (a relx release's directory, as deployed: RELDIR/bin,
%% RELDIR/releases) takes the node's name and cookie from the release's
%% own vm.args (releases/VSN/vm.args, VSN from releases/start_erl.data):
%% -sname or -name (a name without a host gets this host's), -setcookie.
%% NODE and --cookie, given too, win.
%%
%% --eval CMD (the node's own command that evaluates an expression on the
%% running node: a relx release's "bin/NAME eval", a mix release's
%% "bin/NAME rpc", "rabbitmqctl eval", "sudo -u rabbitmq rabbitmqctl eval")
%% asks the node itself for its name and cookie: CMD is run by /bin/sh
%% with one more argument, an expression (Erlang's, and if its output has
%% no answer, Elixir's), whose answer the node prints. Nothing else goes
%% through CMD: the rest is the connection, as with NODE. A mix release's
%% "bin/NAME eval" starts a VM of its own, not the node: it is refused, as
%% is an answer for another node than NODE.
%%
%% Attach:
%% - checks that this installation (--lib DIR, the application directory
%%   holding ebin/ and priv/, or a kit, `make kit', whose lib/otpNN/dtrace-VSN
%%   are such directories, the beams compiled by OTP NN; default: the one
%%   this script is in) was not compiled by a newer OTP than the node's
%%   (the compilers' versions), that every beam loads on the node's OTP
%%   (erlang:prepare_loading/2 on the node, nothing loaded yet), and that
%%   the NIF is built for the node's architecture; of a kit's sets, the one
%%   compiled by the newest OTP no newer than the node's that passes;
%% - refuses a node that already has another version of the library, or
%%   this version from somewhere else (its own release: nothing to do);
%% - when the node reads this installation's files (the same file, by
%%   device and inode), adds its ebin to the node's code path and loads
%%   every module (a release runs in embedded mode: nothing is loaded on
%%   demand); otherwise
%%   (a container's own filesystem) copies ebin/ and priv/ over the
%%   connection into a directory of the node's own, made for it
%%   (/tmp/dtrace-attach-OSPID-RANDOM, mode 0700, never one that exists),
%%   and the probes' library is then /proc/PID/root/tmp/dtrace-attach-... from
%%   this host (a --lib under /tmp/dtrace-attach- is such a copy too, made
%%   by priv/bin/dtrace-attach in the node's root: removed at the end
%%   unless the node now runs the library from it);
%% - starts the application (application:ensure_all_started(dtrace)),
%%   which on a stock VM also loads the library's `dyntrace' in place of
%%   OTP's (dtrace_compat) and, where liblttng-ust is installed, loads it
%%   (an LTTng-UST thread appears in the node);
%% - prints the node's OS pid, the probes' library path for tracers, and
%%   the sinks (dtrace:sinks/0). If the start fails, everything is undone
%%   as by --detach.
%%
%% Detach (only a library this script attached): stops the application
%% (automatic mode clears every trace flag and pattern it set, OTP's
%% `dyntrace' is put back), unloads its modules (soft purge: a process still
%% running old code keeps it, and that is said), removes its code path and
%% any copy (the whole /tmp/dtrace-attach-... directory), and says what stays mapped in the process and why: shared
%% libraries are not unmapped while anything holds them (the LTTng provider
%% never is: LTTng-UST cannot unload a provider in use). Mapped, they run
%% no code and no probe of theirs fires.
%%
%% --function FUN (repeatable; Erlang's M:F/A or Elixir's Mod.fun/arity):
%% after attaching, or on a node that has the library already, makes each
%% outermost call of these functions a span (dtrace:function_spans/1,
%% replacing the node's set): span-latency.bt, dtrace-slow-spans and the
%% flight recorder then see code that never calls dtrace:span/2.
%% `--function none' clears the set. They cost nothing until a tracer
%% listens to a span probe.
%%
%% Status: what the node has of the library.
%%
%% Exit status: 0 done, 1 refused or failed (the line says why), 2 bad
%% arguments.
-mode(interpret).

-define(COPY_PREFIX, "/tmp/dtrace-attach-").

main(Args) ->
    case eval(release(parse(Args, #{}))) of
        {ok, #{node := _} = Opts} ->
            try run(Opts) of
                ok -> stop(0)
            catch
                throw:{done, ok} -> stop(0);
                throw:{refuse, Fmt, FmtArgs} ->
                    io:format(standard_error, "dtrace-attach: " ++ Fmt ++ "~n", FmtArgs),
                    stop(1)
            end;
        _ ->
            usage()
    end.

%% Halts, first removing a --lib that priv/bin/dtrace-attach copied into the
%% node's root for this run (under COPY_PREFIX) unless this run attached
%% from it.
stop(Status) ->
    case {get(lib), get(attached_from)} of
        {undefined, _} -> ok;
        {Lib, Lib} -> ok;
        {Lib, _} -> _ = lists:prefix(?COPY_PREFIX, Lib) andalso file:del_dir_r(copy_root(Lib))
    end,
    halt(Status).

%% The directory COPY_PREFIX... that holds Dir.
copy_root(Dir) ->
    ?COPY_PREFIX ++ hd(string:split(string:prefix(Dir, ?COPY_PREFIX), "/")).

usage() ->
    io:format(standard_error,
              "usage: dtrace-attach NODE [--cookie C | --cookie-file F] [--lib DIR] [--pid PID] [--function M:F/A ...]~n"
              "       dtrace-attach --release RELDIR [...]~n"
              "       dtrace-attach --eval \"bin/NAME eval\" [...]~n"
              "       dtrace-attach NODE --detach | --status [--cookie C | --cookie-file F]~n", []),
    stop(2).

parse([], Opts) -> {ok, Opts};
parse(["--cookie", C | Rest], Opts) -> parse(Rest, Opts#{cookie => {value, C}});
parse(["--cookie-file", F | Rest], Opts) -> parse(Rest, Opts#{cookie => {file, F}});
parse(["--lib", D | Rest], Opts) ->
    put(lib, filename:absname(D)),
    parse(Rest, Opts#{lib => filename:absname(D)});
parse(["--pid", P | Rest], Opts) -> parse(Rest, Opts#{pid => P});
parse(["--release", D | Rest], Opts) -> parse(Rest, Opts#{release => D});
parse(["--eval", Cmd | Rest], Opts) -> parse(Rest, Opts#{eval => Cmd});
parse(["--function", "none" | Rest], Opts) -> parse(Rest, Opts#{functions => []});
parse(["--function", F | Rest], Opts) ->
    case function(F) of
        {ok, MFA} -> parse(Rest, Opts#{functions => maps:get(functions, Opts, []) ++ [MFA]});
        error -> io:format(standard_error, "dtrace-attach: ~ts is not M:F/A or Mod.fun/arity~n", [F]), error
    end;
parse(["--detach" | Rest], Opts) -> parse(Rest, Opts#{action => detach});
parse(["--status" | Rest], Opts) -> parse(Rest, Opts#{action => status});
parse(["-" ++ _ | _], _) -> error;
parse([Node | Rest], Opts) when not is_map_key(node, Opts) -> parse(Rest, Opts#{node => list_to_atom(Node)});
parse(_, _) -> error.

%% --release: the node's name and cookie from the release's vm.args, where
%% not given.
release({ok, #{release := Dir} = Opts}) ->
    Vsn = case file:read_file(filename:join([Dir, "releases", "start_erl.data"])) of
              {ok, Data} -> lists:last(string:lexemes(binary_to_list(Data), " \n"));
              {error, _} -> refuse_release(Dir, "no releases/start_erl.data")
          end,
    VmArgs = filename:join([Dir, "releases", Vsn, "vm.args"]),
    Words = case file:read_file(VmArgs) of
                {ok, Text} -> string:lexemes(binary_to_list(Text), " \t\n");
                {error, R} -> refuse_release(Dir, io_lib:format("~ts: ~ts", [VmArgs, file:format_error(R)]))
            end,
    Flag = fun(F) -> case lists:dropwhile(fun(W) -> W =/= F end, Words) of
                         [_, V | _] -> V;
                         _ -> undefined
                     end
           end,
    Node = case {Flag("-sname"), Flag("-name")} of
               {undefined, undefined} -> refuse_release(Dir, VmArgs ++ " has no -sname or -name");
               {undefined, Long} -> host(Long, long);
               {Short, _} -> host(Short, short)
           end,
    Opts1 = maps:merge(#{node => list_to_atom(Node)}, Opts),
    case Flag("-setcookie") of
        undefined -> {ok, Opts1};
        Cookie -> {ok, maps:merge(#{cookie => {value, Cookie}}, Opts1)}
    end;
release(Parsed) ->
    Parsed.

host(Name, Kind) ->
    case lists:member($@, Name) of
        true -> Name;
        false ->
            {ok, Host} = inet:gethostname(),
            Name ++ "@" ++ case Kind of
                               short -> Host;
                               long -> net_adm:localhost()
                           end
    end.

%% --eval: the node's name and cookie from the node itself, through its
%% own eval command.
eval({ok, #{eval := Cmd} = Opts}) ->
    Exprs = [%% Erlang (relx's eval, rabbitmqctl eval): the value is printed.
             "lists:flatten([\"DTRACEATTACH \", atom_to_list(node()), \" \", "
             "binary_to_list(binary:encode_hex(atom_to_binary(erlang:get_cookie())))]).",
             %% Elixir (a mix release's rpc): only what it prints is seen.
             "IO.puts(\"DTRACEATTACH #{node()} #{Base.encode16(Atom.to_string(:erlang.get_cookie()))}\")"],
    case answer(Cmd, Exprs, []) of
        {ok, "nonode@nohost", _} ->
            refuse_eval(Cmd, "it ran in a VM that is not distributed (a mix release's eval starts a VM of "
                        "its own: use its rpc)");
        {ok, Name, Cookie} ->
            Node = list_to_atom(Name),
            case Opts of
                #{node := Other} when Other =/= Node ->
                    refuse_eval(Cmd, io_lib:format("it answered for ~s, not ~s", [Node, Other]));
                _ -> {ok, maps:merge(#{node => Node, cookie => {value, Cookie}}, Opts)}
            end;
        {error, Outs} ->
            refuse_eval(Cmd, io_lib:format("no answer in its output (is the node running, and is this the "
                                           "command that evaluates on it?):~n~ts", [lists:join("\n", Outs)]))
    end;
eval(Parsed) ->
    Parsed.

answer(_Cmd, [], Outs) -> {error, lists:reverse(Outs)};
answer(Cmd, [Expr | Rest], Outs) ->
    Port = open_port({spawn_executable, "/bin/sh"}, [{args, ["-c", Cmd ++ " \"$1\"", "dtrace-attach", Expr]},
                                                     stderr_to_stdout, exit_status, binary]),
    Out = binary_to_list(port_output(Port, <<>>)),
    case re:run(Out, "DTRACEATTACH ([^ \"\n]+@[^ \"\n]+) ([0-9A-Fa-f]+)", [{capture, all_but_first, list}]) of
        {match, [Name, Hex]} -> {ok, Name, binary_to_list(binary:decode_hex(list_to_binary(Hex)))};
        nomatch ->
            %% The last lines of each try say what went wrong.
            Lines = string:split(string:trim(Out), "\n", all),
            Last = lists:nthtail(max(0, length(Lines) - 8), Lines),
            answer(Cmd, Rest, [lists:join("\n", Last) | Outs])
    end.

port_output(Port, Acc) ->
    receive
        {Port, {data, D}} -> port_output(Port, <<Acc/binary, D/binary>>);
        {Port, {exit_status, _}} -> Acc
    after 120000 ->
            try port_close(Port) catch error:badarg -> ok end,
            <<Acc/binary, "(no exit after 120 s)">>
    end.

refuse_eval(Cmd, Why) ->
    io:format(standard_error, "dtrace-attach: --eval ~ts did not give the node's name and cookie: ~ts~n", [Cmd, Why]),
    stop(1).

refuse_release(Dir, Why) ->
    io:format(standard_error, "dtrace-attach: ~ts is not a release directory that names its node: ~ts~n",
              [Dir, Why]),
    stop(1).

%% Erlang's `m:f/a' or Elixir's `Mod.fun/arity' (module Elixir.Mod).
function(Text) ->
    case string:split(Text, "/", trailing) of
        [MF, A] ->
            Arity = try list_to_integer(A) catch error:badarg -> -1 end,
            Split = case string:split(MF, ":", trailing) of
                        [M, F] -> {M, F};
                        [_] -> case string:split(MF, ".", trailing) of
                                   [M, F] -> {"Elixir." ++ M, F};
                                   [_] -> error
                               end
                    end,
            case Split of
                {Mod, Fun} when Mod =/= "", Fun =/= "", Arity >= 0, Arity =< 255 ->
                    {ok, {list_to_atom(Mod), list_to_atom(Fun), Arity}};
                _ -> error
            end;
        _ -> error
    end.

run(#{node := Node} = Opts) ->
    Lib = (lib_dir(Opts))#{again => again(Opts), pid => maps:get(pid, Opts, undefined)},
    connect(Node, cookie(Opts)),
    case maps:get(action, Opts, attach) of
        attach when is_map_key(functions, Opts) ->
            %% A node with the library (attached, or its own release's)
            %% only gets the functions.
            _ = present(Node) =:= none andalso attach(Node, Lib),
            function_spans(Node, maps:get(functions, Opts));
        attach -> attach(Node, Lib);
        detach -> detach(Node);
        status -> status(Node)
    end.

%%--------------------------------------------------------------------
%% This installation

%% The application directory: --lib, or the parent of this script's
%% priv/bin/ (in a checkout, whose ebin is rebar3's: _build/default/lib/dtrace).
lib_dir(Opts) ->
    Dir = case Opts of
              #{lib := D} -> filename:absname(D);
              _ ->
                  Bin = filename:dirname(filename:absname(resolve(escript:script_name()))),
                  Parent = filename:dirname(filename:dirname(Bin)),
                  Built = filename:join([Parent, "_build", "default", "lib", "dtrace"]),
                  case {filelib:is_regular(filename:join([Parent, "ebin", "dtrace.app"])),
                        filelib:is_regular(filename:join([Built, "ebin", "dtrace.app"]))} of
                      {false, true} -> Built;
                      _ -> Parent
                  end
          end,
    %% A kit (make kit): a set of beams per OTP that compiled them.
    Sets = case filelib:wildcard(filename:join([Dir, "lib", "otp*", "dtrace-*", "ebin", "dtrace.app"])) of
               [] -> [{any, Dir}];
               Apps -> [{otp_of(A), filename:dirname(filename:dirname(A))} || A <- Apps]
           end,
    {_, First} = hd(Sets),
    case file:consult(filename:join([First, "ebin", "dtrace.app"])) of
        {ok, [{application, dtrace, Keys}]} ->
            #{top => Dir, sets => Sets, vsn => proplists:get_value(vsn, Keys)};
        _ ->
            throw({refuse, "~ts is neither the dtrace application's directory (no ebin/dtrace.app) nor a kit "
                   "(lib/otpNN/dtrace-VSN): give one with --lib", [Dir]})
    end.

%% NN of .../lib/otpNN/dtrace-VSN/ebin/dtrace.app.
otp_of(App) ->
    "otp" ++ N = filename:basename(filename:dirname(filename:dirname(filename:dirname(App)))),
    major(N).

major(Otp) ->
    try list_to_integer(Otp) catch error:badarg -> 0 end.

%% A symbolic link to this script (mix's _build/ENV/lib/dtrace/priv is
%% one) resolved, so that its directory is the application's.
resolve(Path) ->
    case file:read_link(Path) of
        {ok, Target} -> resolve(filename:absname(Target, filename:dirname(Path)));
        _ -> Path
    end.

%%--------------------------------------------------------------------
%% The connection

cookie(Opts) ->
    case maps:get(cookie, Opts, home) of
        {value, C} -> C;
        {file, F} ->
            case file:read_file(F) of
                {ok, Text} -> string:trim(hd(string:split(binary_to_list(Text), "\n")));
                {error, R} -> throw({refuse, "cannot read the cookie file ~ts: ~ts", [F, file:format_error(R)]})
            end;
        home ->
            Home = filename:join(os:getenv("HOME", "/"), ".erlang.cookie"),
            case file:read_file(Home) of
                {ok, Text} -> string:trim(binary_to_list(Text));
                {error, _} ->
                    throw({refuse, "no cookie: give --cookie or --cookie-file (a release keeps it in "
                           "releases/COOKIE or vm.args; RabbitMQ in /var/lib/rabbitmq/.erlang.cookie); "
                           "~ts does not exist", [Home]})
            end
    end.

connect(Node, Cookie) ->
    [_, Host] = case string:split(atom_to_list(Node), "@") of
                    [_, H] = P when H =/= "" -> P;
                    _ -> throw({refuse, "~s is not a node name (NAME@HOST)", [Node]})
                end,
    Names = case lists:member($., Host) orelse inet:parse_address(Host) =/= {error, einval} of
                true -> longnames;
                false -> shortnames
            end,
    %% A long name needs a host part this host may not resolve to itself:
    %% loopback's address, as the connection goes over loopback.
    Self = list_to_atom("dtrace_attach_" ++ os:getpid() ++ case Names of
                                                             longnames -> "@127.0.0.1";
                                                             shortnames -> ""
                                                         end),
    case net_kernel:start([Self, Names]) of
        {ok, _} -> ok;
        {error, R} -> throw({refuse, "cannot start distribution (is epmd running?): ~p", [R]})
    end,
    true = erlang:set_cookie(Node, list_to_atom(Cookie)),
    case net_kernel:connect_node(Node) of
        true -> ok;
        _ -> throw({refuse, "cannot connect to ~s: is it running on this host under that name, and is "
                    "the cookie its own? (a wrong cookie shows in the node's log as a connection "
                    "attempt from a disallowed node)", [Node]})
    end.

call(Node, M, F, A) ->
    try erpc:call(Node, M, F, A, 60000)
    catch
        Class:Reason -> throw({refuse, "~s: ~p:~p/~b failed: ~p:~p", [Node, M, F, length(A), Class, Reason]})
    end.

%%--------------------------------------------------------------------
%% Attach

attach(Node, #{top := Top, sets := [{_, First} | _], vsn := Vsn} = Lib) ->
    Otp = call(Node, erlang, system_info, [otp_release]),
    case present(Node) of
        none -> ok;
        #{vsn := Vsn, attached := true} ->
            io:format("~s: dtrace ~s is attached already~n", [Node, Vsn]),
            throw({done, status(Node)});
        #{vsn := Vsn, dir := Other} ->
            throw({refuse, "~s already has dtrace ~s, from ~ts (its own release?): "
                   "nothing to attach; its probes are live while its application runs", [Node, Vsn, Other]});
        #{vsn := OtherVsn, dir := Other} ->
            throw({refuse, "~s already has dtrace ~s from ~ts, not ~s: detach or stop that one first",
                   [Node, OtherVsn, Other, Vsn]})
    end,
    check_arch(Node, filename:join([First, "priv", "dtrace_nif.so"])),
    Dir = choose(Node, Otp, Lib),
    Nif = filename:join([Dir, "priv", "dtrace_nif.so"]),
    Beams = beams(Dir),
    Ebin = case same_file(Node, Nif) of
               true -> filename:join(Dir, "ebin");
               false -> copy(Node, Dir)
           end,
    try
        true = call(Node, code, add_patha, [Ebin]),
        %% A release runs in embedded mode, where nothing is loaded on
        %% demand: every module is loaded now (and checked by now).
        ok = load_modules(Node, [M || {M, _} <- Beams]),
        ok = call(Node, application, load, [dtrace]),
        %% Marks the library as this script's: --detach undoes only that.
        ok = call(Node, application, set_env, [dtrace, attached_by, "dtrace-attach"]),
        case call(Node, application, ensure_all_started, [dtrace]) of
            {ok, _} -> ok;
            {error, Why} -> throw({refuse, "~s: the dtrace application did not start: ~p", [Node, Why]})
        end
    catch
        Class:Reason ->
            %% Whatever went wrong, the node is left as it was (as far as
            %% --detach can: see its own notes).
            io:format(standard_error, "dtrace-attach: attach failed, undoing it~n", []),
            _ = undo(Node, filename:dirname(Ebin)),
            case {Class, Reason} of
                {throw, {refuse, _, _}} -> throw(Reason);
                _ -> throw({refuse, "~s: attach failed: ~p:~p (undone)", [Node, Class, Reason]})
            end
    end,
    put(attached_from, Top),
    report(Node, Lib#{ebin => Ebin}).

%% The beams for Node, checked (check_beams/3): this installation's, or of
%% a kit's sets those compiled by the newest OTP no newer than the node's
%% that pass.
choose(Node, Otp, #{sets := [{any, Dir}]}) ->
    check_beams(Node, Otp, beams(Dir)),
    Dir;
choose(Node, Otp, #{sets := Sets, top := Top}) ->
    Fit = lists:reverse(lists:sort([S || {M, _} = S <- Sets, M =< major(Otp)])),
    Pass = fun({_, Dir}) ->
                   try check_beams(Node, Otp, beams(Dir)) of _ -> true
                   catch throw:{refuse, _, _} -> false
                   end
           end,
    case lists:dropwhile(fun(S) -> not Pass(S) end, Fit) of
        [{_, Dir} | _] -> Dir;
        [] -> throw({refuse, "~s runs OTP ~s, and none of this kit's beams (~ts: compiled by OTP ~ts) load on "
                     "it: use a kit that has the node's OTP major, or build the library with it",
                     [Node, Otp, Top, lists:join(", ", [integer_to_list(M) || {M, _} <- lists:sort(Sets)])]})
    end.

%% Loads Mods on Node from its code path, in embedded mode too: those with
%% an on_load function (the NIF modules, which ensure_modules_loaded/1
%% leaves to the code server's on-demand loading, refused in embedded mode)
%% one by one with code:load_file/1, the NIFs' module first.
load_modules(Node, Mods) ->
    Retry = case call(Node, code, ensure_modules_loaded, [Mods]) of
                ok -> [];
                {error, Failed} ->
                    [] =:= [F || {_, Why} = F <- Failed, Why =/= embedded] orelse
                        throw({refuse, "~s: cannot load ~p", [Node, Failed]}),
                    [M || {M, embedded} <- Failed]
            end,
    First = [M || M <- [dtrace_nif], lists:member(M, Retry)],
    [case call(Node, code, load_file, [M]) of
         {module, M} -> ok;
         Error -> throw({refuse, "~s: cannot load ~s: ~p", [Node, M, Error]})
     end || M <- First ++ (Retry -- First)],
    ok.

%% The dtrace application on Node, if any: #{vsn, dir, attached}.
present(Node) ->
    Loaded = call(Node, application, loaded_applications, []),
    case lists:keyfind(dtrace, 1, Loaded) of
        false -> none;
        {dtrace, _, Vsn} ->
            Dir = case call(Node, code, lib_dir, [dtrace]) of
                      D when is_list(D) -> D;
                      {error, _} -> "(not on its code path)"
                  end,
            #{vsn => Vsn, dir => Dir,
              attached => call(Node, application, get_env, [dtrace, attached_by]) =:= {ok, "dtrace-attach"}}
    end.

%% The NIF's ELF machine against the node's architecture.
check_arch(Node, Nif) ->
    Arch = call(Node, erlang, system_info, [system_architecture]),
    Machine = case file:read_file(Nif) of
                  {ok, <<16#7f, "ELF", _:14/binary, M:16/little, _/binary>>} -> M;
                  _ -> throw({refuse, "~ts: not the NIF library (build the application first)", [Nif]})
              end,
    Want = case Arch of
               "x86_64" ++ _ -> 62;
               "aarch64" ++ _ -> 183;
               _ -> throw({refuse, "~s runs on ~s: the library is built for x86_64 and aarch64 Linux only",
                           [Node, Arch]})
           end,
    Machine =:= Want orelse
        throw({refuse, "~s runs on ~s, and ~ts is built for another architecture (ELF machine ~b)",
               [Node, Arch, Nif, Machine]}).

beams(Dir) ->
    [begin
         {ok, Bin} = file:read_file(F),
         {list_to_atom(filename:basename(F, ".beam")), Bin}
     end || F <- filelib:wildcard(filename:join([Dir, "ebin", "*.beam"]))].

%% The compiler that made the beams no newer than the node's, by major and
%% minor version (a patch release of the same OTP is fine; code compiled by
%% a newer OTP may load and then call what the node's OTP lacks); asked
%% first, as the node's loader logs each beam it refuses in the node's log.
%% Then every beam checked by the node's loader, none loaded.
check_beams(Node, Otp, Beams) ->
    [{_, First} | _] = Beams,
    {ok, {_, [{compile_info, Info}]}} = beam_lib:chunks(First, [compile_info]),
    Theirs = proplists:get_value(version, Info),
    case call(Node, code, lib_dir, [compiler]) of
        Dir when is_list(Dir) ->
            case string:prefix(filename:basename(Dir), "compiler-") of
                nomatch -> ok;                  % an OTP run from its source tree
                Node_ ->
                    lists:sublist(version(Theirs), 2) =< lists:sublist(version(Node_), 2) orelse
                        throw({refuse, "~s runs OTP ~s (compiler ~s); this installation's beams were "
                               "compiled by a newer OTP (compiler ~s): build the library with the "
                               "node's OTP major", [Node, Otp, Node_, Theirs]})
            end;
        _ -> ok
    end,
    Bad = [{M, R} || {M, Bin} <- Beams,
                     {error, R} <- [call(Node, erlang, prepare_loading, [M, Bin])]],
    Bad =:= [] orelse
        throw({refuse, "~s (OTP ~s) cannot load this installation's beams (~w...): "
               "build the library with the node's OTP major", [Node, Otp, hd(Bad)]}).

version(V) ->
    [list_to_integer(P) || P <- string:lexemes(V, "."), P =/= "", lists:all(fun(C) -> C >= $0 andalso C =< $9 end, P)].

%% Does Node open the same file at Path (same device and inode)? A node in
%% a container with its own filesystem sees another file or none.
same_file(Node, Path) ->
    %% #file_info{}: major_device (the file system) is element 10, inode 12.
    Key = fun({ok, I}) -> {element(10, I), element(12, I)};
             (_) -> none
          end,
    Here = Key(file:read_file_info(Path)),
    Here =/= none andalso Key(call(Node, file, read_file_info, [Path])) =:= Here.

%% Copies ebin/ and priv/ into a directory made for it on Node (mode 0700,
%% a name no one chose before: make_dir fails on one that exists, so no
%% file planted there is ever loaded); each file is written under a
%% temporary name and renamed. Returns the copy's ebin.
copy(Node, Dir) ->
    Rand = binary:encode_hex(random_bytes(6)),
    Dest = ?COPY_PREFIX ++ call(Node, os, getpid, []) ++ "-" ++ string:lowercase(binary_to_list(Rand)),
    case call(Node, file, make_dir, [Dest]) of
        ok -> ok = call(Node, file, change_mode, [Dest, 8#700]);
        {error, R} -> throw({refuse, "~s: cannot make ~ts: ~p", [Node, Dest, R]})
    end,
    Files = [F || Sub <- ["ebin", "priv"], F <- filelib:wildcard(filename:join([Dir, Sub, "**"])),
                  filelib:is_regular(F)],
    Bytes = lists:sum([filelib:file_size(F) || F <- Files]),
    try
        [begin
             To = filename:join(Dest, string:prefix(F, Dir ++ "/")),
             Tmp = To ++ ".part",
             {ok, Bin} = file:read_file(F),
             {ok, Info} = file:read_file_info(F),
             ok = call(Node, filelib, ensure_dir, [To]),
             ok = call(Node, file, write_file, [Tmp, Bin]),
             %% The mode too: priv's scripts stay executable.
             ok = call(Node, file, change_mode, [Tmp, element(8, Info) band 8#777]),
             ok = call(Node, file, rename, [Tmp, To])
         end || F <- Files]
    catch
        Class:Reason ->
            _ = call(Node, file, del_dir_r, [Dest]),
            throw({refuse, "~s: copying the library to ~ts failed: ~p:~p (removed)", [Node, Dest, Class, Reason]})
    end,
    io:format("~s does not see this installation's files: copied ~b files (~b bytes) to ~ts there~n",
              [Node, length(Files), Bytes, Dest]),
    filename:join(Dest, "ebin").

%% Random bytes for a copy's name: crypto's, or rand's where this
%% escript's OTP has no crypto (a release's may not): the name need only be
%% new, as make_dir refuses one that exists.
random_bytes(N) ->
    try crypto:strong_rand_bytes(N)
    catch error:undef -> rand:bytes(N)
    end.

%% Sets the node's function spans (its own library's, or the one attached).
function_spans(Node, Functions) ->
    case call(Node, dtrace, function_spans, [Functions]) of
        ok when Functions =:= [] -> io:format("~s: no function spans~n", [Node]);
        ok -> io:format("~s: function spans on ~ts~n", [Node, lists:join(", ", [text(F) || F <- Functions])]);
        {error, Why} -> throw({refuse, "~s: dtrace:function_spans/1 refused: ~p", [Node, Why]})
    end.

text({M, F, A}) -> io_lib:format("~w:~w/~b", [M, F, A]).

%%--------------------------------------------------------------------
%% What the node has

report(Node, #{ebin := Ebin, again := Again} = Lib) ->
    Pid = os_pid(Node, Lib),
    %% The path the node mapped (priv/ may be a symbolic link): the one
    %% tracers name.
    Nif = case [P || P <- maps(Node), filename:basename(P) =:= "dtrace_nif.so"] of
              [Mapped | _] -> Mapped;
              [] -> filename:join([filename:dirname(Ebin), "priv", "dtrace_nif.so"])
          end,
    io:format("attached dtrace to ~s (OS pid ~s, OTP ~s)~n"
              "  probes' library: ~ts~n"
              "    (bpftrace -p ~s with usdt::erlang:PROBE, or usdt:/proc/~s/root~ts:erlang:PROBE;~n"
              "    bpftrace 0.24 to 0.27 attach -p with the bare path twice)~n"
              "  available: ~p~n"
              "  sinks: ~p~n"
              "  dyntrace: ~ts~n"
              "  liblttng-ust: ~ts~n"
              "detach with: dtrace-attach ~ts --detach~n",
              [Node, Pid, call(Node, erlang, system_info, [otp_release]), Nif, Pid, Pid, Nif,
               call(Node, dtrace, available, []), call(Node, dtrace, sinks, []),
               dyntrace(Node), lttng(Node), Again]),
    ok.

%% How this node is named again on a command line (the way it was now).
again(#{pid := Pid} = Opts) -> ["--pid ", Pid, " ", again(maps:remove(pid, Opts))];
again(#{eval := Cmd}) -> ["--eval '", Cmd, "'"];
again(#{release := Dir}) -> ["--release ", Dir];
again(#{node := Node}) -> atom_to_list(Node).

%% The node's OS pid as tracers here need it: --pid's, else the node's
%% own (the same unless the node is in a pid namespace of its own).
os_pid(Node, #{pid := undefined}) -> call(Node, os, getpid, []);
os_pid(_Node, #{pid := Pid}) -> Pid.

status(Node) ->
    Pid = call(Node, os, getpid, []),
    case present(Node) of
        none ->
            io:format("~s (OS pid ~s): no dtrace; dyntrace: ~ts~n", [Node, Pid, dyntrace(Node)]),
            mapped(Node);
        #{vsn := Vsn, dir := Dir, attached := Attached} ->
            Running = lists:keymember(dtrace, 1, call(Node, application, which_applications, [])),
            io:format("~s (OS pid ~s): dtrace ~s from ~ts, ~s~s~n",
                      [Node, Pid, Vsn, Dir, case Running of true -> "running"; false -> "not running" end,
                       case Attached of true -> ", attached by dtrace-attach"; false -> "" end]),
            Running andalso io:format("  available: ~p~n  sinks: ~p~n",
                                      [call(Node, dtrace, available, []), call(Node, dtrace, sinks, [])]),
            io:format("  dyntrace: ~ts~n", [dyntrace(Node)]),
            mapped(Node)
    end,
    ok.

%% Whose `dyntrace' the node runs.
dyntrace(Node) ->
    case call(Node, code, is_loaded, [dyntrace]) of
        false -> "not loaded";
        {file, File} ->
            Attrs = call(Node, dyntrace, module_info, [attributes]),
            case lists:keymember(dtrace_compat, 1, Attrs) of
                true -> io_lib:format("the library's (dyntrace calls fire its probes; OTP's is put back "
                                      "at detach), loaded from ~ts", [File]);
                false -> io_lib:format("OTP's, ~ts", [File])
            end
    end.

lttng(Node) ->
    case [L || L <- maps(Node), string:prefix(filename:basename(L), "liblttng-ust.so") =/= nomatch] of
        [] -> "not loaded";
        _ -> "loaded, with its listener threads (it stays after detach: see --status)"
    end.

%% The node's mapped files (/proc/self/maps), one per path.
maps(Node) ->
    case call(Node, file, read_file, ["/proc/self/maps"]) of
        {ok, Text} ->
            lists:usort([P || L <- string:lexemes(binary_to_list(Text), "\n"),
                              [_, _, _, _, _, P | _] <- [string:lexemes(L, " ")], hd(P) =:= $/]);
        _ -> []
    end.

%% What of the library stays mapped, and why.
mapped(Node) ->
    Ours = [{P, Why} || P <- maps(Node), Why <- [why_mapped(P)], Why =/= false],
    case Ours of
        [] -> io:format("  mapped: none of the library's files~n");
        _ ->
            io:format("  mapped until the node exits (no code of theirs runs, no probe of theirs fires):~n"),
            [io:format("    ~ts: ~s~n", [P, Why]) || {P, Why} <- Ours]
    end,
    ok.

why_mapped(P) ->
    Base = filename:basename(P),
    case {Base, filename:basename(filename:dirname(P))} of
        {"dtrace_nif.so", _} ->
            "the tracer modules' libraries took a reference to it (their callback tables point into it) "
            "and never give it back";
        {"dtrace_tracer.so", "tracer"} -> "the tracer module dtrace_tracer's library (unmapped once dtrace_tracer is purged)";
        {"dyntrace.so", "compat"} -> "the dyntrace module's library (unmapped once it is purged)";
        {"libdtrace_lttng_tp.so", _} ->
            "the LTTng provider package, never unloaded: LTTng-UST cannot unload a provider in use";
        {"liblttng-ust.so" ++ _, _} -> "LTTng-UST, loaded with the provider package, and its listener threads";
        {"liblttng-ust-" ++ _, _} -> "LTTng-UST's tracepoint registry, opened by dtrace_nif.so's tracepoints";
        _ -> false
    end.

%%--------------------------------------------------------------------
%% Detach

detach(Node) ->
    case present(Node) of
        none ->
            io:format("~s has no dtrace: nothing to detach~n", [Node]),
            status(Node);
        #{attached := false, dir := Dir} ->
            throw({refuse, "~s's dtrace (~ts) was not attached by dtrace-attach: it is the node's own; "
                   "stop it with the node's tools", [Node, Dir]});
        #{attached := true, dir := Dir} ->
            {Unloaded, Kept, Copy} = undo(Node, Dir),
            io:format("detached dtrace from ~s: application stopped and unloaded, ~b modules unloaded~s~s~n",
                      [Node, Unloaded,
                       case Kept of
                           [] -> "";
                           _ -> io_lib:format("; still running old code, left as old code: ~p", [Kept])
                       end,
                       case Copy of true -> io_lib:format(", copy ~ts removed", [copy_root(Dir)]); false -> "" end]),
            io:format("  dyntrace: ~ts~n", [dyntrace(Node)]),
            mapped(Node)
    end.

%% Undoes an attach of the library in Dir (the application directory, as
%% attach/2 or copy/2 made it), each step whether or not the ones before
%% worked: stops the application (automatic mode clears its flags and
%% patterns; dtrace_compat puts OTP's dyntrace back), puts OTP's dyntrace
%% back if a failed start left the library's, unloads the modules loaded
%% from Dir's ebin, unloads the application, takes the ebin off the code
%% path and removes a copy. Returns {ModulesUnloaded, ModulesKept, CopyRemoved}.
undo(Node, Dir) ->
    Ebin = filename:join(Dir, "ebin"),
    Try = fun(M, F, A) -> try erpc:call(Node, M, F, A, 60000) catch _:_ -> error end end,
    _ = Try(application, stop, [dtrace]),
    _ = case Try(code, is_loaded, [dtrace_compat]) of
            {file, _} -> Try(dtrace_compat, uninstall, []);
            _ -> ok
        end,
    Mods = case Try(code, all_loaded, []) of
               All when is_list(All) -> [M || {M, F} <- All, is_list(F), lists:prefix(Ebin ++ "/", F)];
               _ -> []
           end,
    Kept = [M || M <- Mods, Try(code, soft_purge, [M]) =/= error,
                 Try(code, delete, [M]) =/= error,
                 Try(code, soft_purge, [M]) =/= true],
    _ = Try(application, unload, [dtrace]),
    _ = Try(code, del_path, [Ebin]),
    Copy = lists:prefix(?COPY_PREFIX, Dir) andalso Try(file, del_dir_r, [copy_root(Dir)]) =:= ok,
    {length(Mods) - length(Kept), Kept, Copy}.
