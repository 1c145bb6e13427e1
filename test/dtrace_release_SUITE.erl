%%% dtrace inside real consumer projects and real releases, each release
%%% holding runtime_tools too, traced by bpftrace:
%%% - a rebar3 application depending on this checkout (_checkouts), with a
%%%   relx release;
%%% - a mix application depending on this checkout as a git dependency, with
%%%   a `mix release`, built without rebar3 (a failing rebar3 comes first on
%%%   PATH); and a mix project with a path dependency run with `mix run`.
%%% The releases fire dtrace:p/N (i1 = 1), DTrace.p/N (2), dyntrace:p/N (3,
%%% through the compatibility layer) and DTrace.lazy/1 (4) in a loop; the
%%% tracer must count events of each.
-module(dtrace_release_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([all/0, init_per_suite/1, end_per_suite/1]).
-export([rebar3_relx_release/1, mix_release_from_git/1, mix_path_dependency/1]).

all() ->
    [mix_path_dependency, rebar3_relx_release, mix_release_from_git].

init_per_suite(Config) ->
    dtrace_test_tracer:with_tracer(bpftrace, Config).

end_per_suite(_Config) ->
    ok.

checkout() ->
    filename:dirname(filename:dirname(?FILE)).

%%--------------------------------------------------------------------

rebar3_relx_release(Config) ->
    Dir = filename:join(?config(priv_dir, Config), "rebar_consumer"),
    write(Dir, "rebar.config", "
{deps, [dtrace]}.
{relx, [{release, {rebar_consumer, \"0.1.0\"}, [rebar_consumer, dtrace, runtime_tools]},
        {dev_mode, false}, {include_erts, false}, {extended_start_script, true},
        {vm_args, \"config/vm.args\"}]}.
"),
    write(Dir, "config/vm.args", "-sname rebar_consumer\n-setcookie dtrace_test\n"),
    write(Dir, "src/rebar_consumer.app.src", "
{application, rebar_consumer,
 [{vsn, \"0.1.0\"}, {applications, [kernel, stdlib, dtrace]},
  {mod, {rebar_consumer, []}}, {env, []}]}.
"),
    write(Dir, "src/rebar_consumer.erl", "
-module(rebar_consumer).
-behaviour(application).
-export([start/2, stop/1, loop/1]).
start(_, _) ->
    true = dtrace:available(),
    ok = file:write_file(os:getenv(\"DTRACE_PIDFILE\"), os:getpid()),
    {ok, spawn_link(?MODULE, loop, [0])}.
stop(_) -> ok.
loop(N) ->
    dtrace:p(1, N, \"rebar3 release\"),
    dyntrace:p(3, N, \"rebar3 release\"),
    timer:sleep(2),
    loop(N + 1).
"),
    ok = filelib:ensure_dir(filename:join([Dir, "_checkouts", "x"])),
    ok = file:make_symlink(checkout(), filename:join([Dir, "_checkouts", "dtrace"])),
    sh(Dir, "rebar3 release", []),
    Rel = filename:join([Dir, "_build", "default", "rel", "rebar_consumer"]),
    ?assert(filelib:is_file(filename:join([Rel, "lib", "dtrace-" ++ vsn(), "priv", "dtrace_nif.so"]))),
    ?assertNotEqual([], filelib:wildcard(filename:join([Rel, "lib", "runtime_tools-*"]))),
    Counts = run_and_trace(filename:join([Rel, "bin", "rebar_consumer"]), ["foreground"], [], Dir, [1, 3]),
    ?assert(maps:get(1, Counts, 0) > 0),
    ?assert(maps:get(3, Counts, 0) > 0),
    ct:log("events per source: ~p", [Counts]).

mix_release_from_git(Config) ->
    Dir = filename:join(?config(priv_dir, Config), "mix_consumer"),
    Sha = string:trim(os:cmd("git -C " ++ checkout() ++ " rev-parse HEAD")),
    write(Dir, "mix.exs", ["
defmodule MixConsumer.MixProject do
  use Mix.Project

  def project do
    [app: :mix_consumer, version: \"0.1.0\", elixir: \"~> 1.14\",
     deps: [{:dtrace, git: \"file://", checkout(), "\", ref: \"", Sha, "\"}],
     releases: [mix_consumer: [applications: [runtime_tools: :permanent]]]]
  end

  def application, do: [mod: {MixConsumer, []}, extra_applications: [:runtime_tools]]
end
"]),
    write(Dir, "lib/mix_consumer.ex", "
defmodule MixConsumer do
  use Application
  require DTrace

  def start(_type, _args) do
    true = DTrace.available?()
    File.write!(System.fetch_env!(\"DTRACE_PIDFILE\"), :os.getpid())
    Task.start_link(fn -> loop(0) end)
  end

  defp loop(n) do
    :dtrace.p(1, n, \"mix release\")
    DTrace.p(2, n, \"mix release\")
    :dyntrace.p(3, n, \"mix release\")
    DTrace.lazy(p(4, n, inspect({:costly, n})))
    Process.sleep(2)
    loop(n + 1)
  end
end
"),
    Env = no_rebar3_env(Config),
    sh(Dir, "mix deps.get", Env),
    sh(Dir, "mix release --overwrite", [{"MIX_ENV", "prod"} | Env]),
    Rel = filename:join([Dir, "_build", "prod", "rel", "mix_consumer"]),
    ?assertNotEqual([], filelib:wildcard(filename:join([Rel, "lib", "runtime_tools-*"]))),
    Counts = run_and_trace(filename:join([Rel, "bin", "mix_consumer"]), ["start"],
                           [{"RELEASE_DISTRIBUTION", "none"}], Dir, [1, 2, 3, 4]),
    ct:log("events per source: ~p", [Counts]),
    [?assert(maps:get(K, Counts, 0) > 0) || K <- [1, 2, 3, 4]].

%% A path dependency, compiled and run by mix (as `iex -S mix` would).
mix_path_dependency(Config) ->
    Dir = filename:join(?config(priv_dir, Config), "mix_path"),
    write(Dir, "mix.exs", ["
defmodule MixPath.MixProject do
  use Mix.Project
  def project, do: [app: :mix_path, version: \"0.1.0\", deps: [{:dtrace, path: \"", checkout(), "\"}]]
  def application, do: [extra_applications: [:runtime_tools]]
end
"]),
    Out = sh(Dir, "mix run -e 'IO.inspect({:probe, DTrace.available?(), DTrace.p(1), "
                  ":dtrace_compat.installed(), :dyntrace.available()})'", no_rebar3_env(Config)),
    ?assertNotEqual(nomatch, string:find(Out, "{:probe, true, false, true, true}")).

%%--------------------------------------------------------------------

vsn() ->
    {ok, [{application, dtrace, Props}]} =
        file:consult(filename:join([checkout(), "src", "dtrace.app.src"])),
    proplists:get_value(vsn, Props).

%% A PATH whose first entry has a rebar3 that fails: mix must not need it.
no_rebar3_env(Config) ->
    Bin = filename:join(?config(priv_dir, Config), "no_rebar3"),
    write(Bin, "rebar3", "#!/bin/sh\necho 'rebar3 must not be called' >&2\nexit 1\n"),
    ok = file:change_mode(filename:join(Bin, "rebar3"), 8#755),
    [{"PATH", Bin ++ ":" ++ os:getenv("PATH")}, {"MIX_REBAR3", filename:join(Bin, "rebar3")}].

write(Dir, Name, Text) ->
    Path = filename:join(Dir, Name),
    ok = filelib:ensure_dir(Path),
    ok = file:write_file(Path, Text).

%% The build directories of this checkout's own run (make test OTP=27 sets
%% them) must not leak into the consumer projects' builds.
own_build_env() ->
    [{"REBAR_BASE_DIR", false}, {"MIX_BUILD_ROOT", false}, {"MIX_BUILD_PATH", false}].

%% Runs a shell command in Dir; fails the test on a non-zero exit.
sh(Dir, Cmd, Env) ->
    Port = open_port({spawn_executable, "/bin/sh"},
                     [{args, ["-c", Cmd ++ " 2>&1"]}, {cd, Dir}, {env, own_build_env() ++ Env},
                      exit_status, binary, stream]),
    {Status, Out} = collect(Port, []),
    ct:log("$ ~s~n~ts", [Cmd, Out]),
    Status =:= 0 orelse ct:fail("~s failed (~p): ~ts", [Cmd, Status, Out]),
    unicode:characters_to_list(Out).

collect(Port, Acc) ->
    receive
        {Port, {data, D}} -> collect(Port, [Acc, D]);
        {Port, {exit_status, S}} -> {S, iolist_to_binary(Acc)}
    after 600000 -> ct:fail("command timed out")
    end.

%% Starts a release in the foreground, waits for its OS pid, attaches
%% bpftrace until it has seen an event from each source in Want (the i1 of
%% the calls), stops the release, and returns the events counted per i1.
run_and_trace(Script, Args, Env, Dir, Want) ->
    PidFile = filename:join(Dir, "release.pid"),
    _ = file:delete(PidFile),
    Port = open_port({spawn_executable, Script},
                     [{args, Args}, {env, own_build_env() ++ [{"DTRACE_PIDFILE", PidFile} | Env]},
                      exit_status, binary, stderr_to_stdout]),
    Pid = wait_pidfile(PidFile, Port, 300),
    try
        Tracer = dtrace_test_tracer:bpftrace_start(Pid, "
            usdt::erlang:user_trace__i4s4 {
                @[arg2] = count();
                if (!@seen[arg2]) { @seen[arg2] = 1; printf(\"SEEN %ld\\n\", arg2); }
            }"),
        Seen = dtrace_test_tracer:bpftrace_await(Tracer, [iolist_to_binary(["SEEN ", integer_to_list(I)])
                                                          || I <- Want]),
        Lines = dtrace_test_tracer:bpftrace_stop(Seen),
        maps:from_list([{binary_to_integer(K), binary_to_integer(string:trim(V))}
                        || L <- Lines,
                           {match, [K, V]} <- [re:run(L, "^@\\[(\\d+)\\]: (\\d+)",
                                                      [{capture, all_but_first, binary}])]])
    after
        _ = os:cmd("kill " ++ Pid),
        receive {Port, {exit_status, _}} -> ok after 20000 -> ok end
    end.

wait_pidfile(_File, Port, 0) ->
    ct:fail("the release did not start: ~p", [flush(Port)]);
wait_pidfile(File, Port, N) ->
    case file:read_file(File) of
        {ok, Pid} when Pid =/= <<>> -> binary_to_list(Pid);
        _ ->
            receive
                {Port, {exit_status, S}} -> ct:fail("the release exited (~p): ~p", [S, flush(Port)])
            after 100 -> wait_pidfile(File, Port, N - 1)
            end
    end.

flush(Port) ->
    receive {Port, {data, D}} -> [D | flush(Port)] after 0 -> [] end.
