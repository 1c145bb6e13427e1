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
%%%
%%% Group `cargo`: the consumers build the NIF with cargo (this checkout).
%%% Group `precompiled`: the same consumers, on a PATH with no cargo, build
%%% from a copy of this checkout whose checksum-dtrace_nif.exs is that of
%%% archives `make dist` (scripts/dist.sh) made for this machine's target,
%%% served by an inets httpd on 127.0.0.1 (DTRACE_NIF_URL); their releases
%%% must hold the precompiled objects (priv/precompiled.txt) and fire.
%%% Every command after a consumer's first build (mix run, mix test, mix
%%% compile, MIX_ENV=prod mix compile, mix release, rebar3 compile, rebar3
%%% release) runs without DTRACE_NIF_URL, and the git dependency's first
%%% build too, from archives already in the cache. Then a tampered archive
%%% is refused, fetched or cached; a changed install is installed again,
%%% saying why; the archives are taken from a directory with
%%% DTRACE_NIF_PRECOMPILED=1 although cargo is there; and DTRACE_NIF_BUILD=1
%%% without cargo fails saying so.
-module(dtrace_release_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").
-include_lib("kernel/include/file.hrl").

-export([all/0, groups/0, init_per_suite/1, end_per_suite/1, init_per_group/2, end_per_group/2]).
-export([rebar3_relx_release/1, mix_release_from_git/1, mix_path_dependency/1,
         tampered_archive_is_refused/1, tampered_cache_is_refused/1, changed_install_is_replaced/1,
         precompiled_from_a_directory/1, forced_build_needs_cargo/1]).

all() ->
    [{group, cargo}, {group, precompiled}].

groups() ->
    Consumers = [mix_path_dependency, rebar3_relx_release, mix_release_from_git],
    [{cargo, [], Consumers},
     {precompiled, [], Consumers ++ [tampered_archive_is_refused, tampered_cache_is_refused,
                                     changed_install_is_replaced, precompiled_from_a_directory,
                                     forced_build_needs_cargo]}].

init_per_suite(Config) ->
    dtrace_test_tracer:with_tracer(bpftrace, Config).

end_per_suite(_Config) ->
    ok.

init_per_group(cargo, Config) ->
    [{dtrace_checkout, checkout()}, {build_env, []},
     {work, filename:join(?config(priv_dir, Config), "cargo")} | Config];
init_per_group(precompiled, Config) ->
    Priv = filename:join(?config(priv_dir, Config), "precompiled"),
    Dist = filename:join(Priv, "dist"),
    Sums = filename:join(Dist, "checksum-dtrace_nif.exs"),
    sh(checkout(), "sh scripts/dist.sh -o " ++ Dist ++ " -c " ++ Sums ++ " " ++ host_target(), []),
    Copy = copy_checkout(filename:join(Priv, "dtrace"), Sums),
    {ok, _} = application:ensure_all_started(inets),
    {ok, Httpd} = inets:start(httpd, [{port, 0}, {bind_address, {127, 0, 0, 1}},
                                      {server_name, "localhost"}, {server_root, Priv},
                                      {document_root, Dist}]),
    [{port, Port}] = httpd:info(Httpd, [port]),
    Env = [{"PATH", no_cargo_path(Priv)},
           {"XDG_CACHE_HOME", filename:join(Priv, "cache")},
           {"DTRACE_NIF_URL", "http://127.0.0.1:" ++ integer_to_list(Port) ++ "/"}],
    [{dtrace_checkout, Copy}, {build_env, Env}, {dist, Dist}, {httpd, Httpd}, {work, Priv} | Config].

end_per_group(precompiled, Config) ->
    inets:stop(httpd, ?config(httpd, Config));
end_per_group(_, _Config) ->
    ok.

checkout() ->
    dtrace_test_catalogue:repo_root().

%%--------------------------------------------------------------------

rebar3_relx_release(Config) ->
    Dir = filename:join(?config(work, Config), "rebar_consumer"),
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
    ok = file:make_symlink(?config(dtrace_checkout, Config), filename:join([Dir, "_checkouts", "dtrace"])),
    no_warning(sh(Dir, "rebar3 release", ?config(build_env, Config))),
    %% Later commands, as a user runs them: no DTRACE_NIF_URL.
    sh(Dir, "rebar3 compile", later_env(Config)),
    sh(Dir, "rebar3 release", later_env(Config)),
    Rel = filename:join([Dir, "_build", "default", "rel", "rebar_consumer"]),
    assert_built(Config, filename:join([Rel, "lib", "dtrace-" ++ vsn(), "priv"])),
    ?assertNotEqual([], filelib:wildcard(filename:join([Rel, "lib", "runtime_tools-*"]))),
    Counts = run_and_trace(filename:join([Rel, "bin", "rebar_consumer"]), ["foreground"], [], Dir, [1, 3]),
    ?assert(maps:get(1, Counts, 0) > 0),
    ?assert(maps:get(3, Counts, 0) > 0),
    ct:log("events per source: ~p", [Counts]).

mix_release_from_git(Config) ->
    Dir = filename:join(?config(work, Config), "mix_consumer"),
    Checkout = ?config(dtrace_checkout, Config),
    Sha = string:trim(os:cmd("git -C " ++ Checkout ++ " rev-parse HEAD")),
    write(Dir, "mix.exs", ["
defmodule MixConsumer.MixProject do
  use Mix.Project

  def project do
    [app: :mix_consumer, version: \"0.1.0\", elixir: \"~> 1.14\",
     deps: [{:dtrace, git: \"file://", Checkout, "\", ref: \"", Sha, "\"}],
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
    %% Precompiled: the archives are already in the cache (as a previous
    %% project's build leaves them), so even the first build needs no
    %% DTRACE_NIF_URL.
    Env = no_rebar3_env(Config, warm_cache(Config, "git_cache", later_env(Config))),
    sh(Dir, "mix deps.get", Env),
    sh(Dir, "mix release --overwrite", [{"MIX_ENV", "prod"} | Env]),
    sh(Dir, "mix release --overwrite", [{"MIX_ENV", "prod"} | Env]),
    Rel = filename:join([Dir, "_build", "prod", "rel", "mix_consumer"]),
    assert_built(Config, filename:join([Rel, "lib", "dtrace-" ++ vsn(), "priv"])),
    ?assertNotEqual([], filelib:wildcard(filename:join([Rel, "lib", "runtime_tools-*"]))),
    Counts = run_and_trace(filename:join([Rel, "bin", "mix_consumer"]), ["start"],
                           [{"RELEASE_DISTRIBUTION", "none"}], Dir, [1, 2, 3, 4]),
    ct:log("events per source: ~p", [Counts]),
    [?assert(maps:get(K, Counts, 0) > 0) || K <- [1, 2, 3, 4]].

%% A path dependency, compiled and run by mix (as `iex -S mix` would).
mix_path_dependency(Config) ->
    Dir = filename:join(?config(work, Config), "mix_path"),
    write(Dir, "mix.exs", ["
defmodule MixPath.MixProject do
  use Mix.Project
  def project, do: [app: :mix_path, version: \"0.1.0\", deps: [{:dtrace, path: \"", ?config(dtrace_checkout, Config), "\"}]]
  def application, do: [extra_applications: [:runtime_tools]]
end
"]),
    write(Dir, "test/test_helper.exs", "ExUnit.start()\n"),
    write(Dir, "test/mix_path_test.exs", "
defmodule MixPathTest do
  use ExUnit.Case
  test \"the probes are there\", do: assert DTrace.available?()
end
"),
    no_warning(sh(Dir, "mix compile", no_rebar3_env(Config, ?config(build_env, Config)))),
    %% Later commands, as a user runs them: no DTRACE_NIF_URL.
    Later = no_rebar3_env(Config, later_env(Config)),
    %% The last element: whether dtrace:doctor/1 names the precompiled archive.
    Out = sh(Dir, "mix run -e 'IO.inspect({:probe, DTrace.available?(), DTrace.p(1), "
                  ":dtrace_compat.installed(), :dyntrace.available(), "
                  "Enum.any?(:dtrace.doctor(%{}), &(&1.text =~ \"precompiled: libdtrace_nif-\"))})'",
             Later),
    Test = sh(Dir, "mix test", Later),
    %% ExUnit's summary: "1 test, 0 failures" up to Elixir 1.19, "Result: 1
    %% passed" from 1.20.
    ?assertMatch({match, _}, re:run(Test, "1 test, 0 failures|Result: 1 passed\\R")),
    sh(Dir, "mix compile", Later),
    sh(Dir, "mix compile", [{"MIX_ENV", "prod"} | Later]),
    Precompiled = atom_to_list(?config(dist, Config) =/= undefined),
    ?assertNotEqual(nomatch, string:find(Out, "{:probe, true, false, true, true, " ++ Precompiled ++ "}")),
    assert_built(Config, filename:join(?config(dtrace_checkout, Config), "priv")).

%% An archive whose bytes differ from the checksum file's sum is refused:
%% the build fails naming the file and both sums, and installs nothing.
tampered_archive_is_refused(Config) ->
    Bad = filename:join(?config(priv_dir, Config), "tampered"),
    ok = file:make_dir(Bad),
    [Nif] = filelib:wildcard(filename:join(?config(dist, Config), "libdtrace_nif-*.so.tar.gz")),
    {ok, Bin} = file:read_file(Nif),
    <<Head:100/binary, Byte, Rest/binary>> = Bin,
    ok = file:write_file(filename:join(Bad, filename:basename(Nif)), <<Head/binary, (Byte bxor 1), Rest/binary>>),
    [{ok, _} = file:copy(F, filename:join(Bad, filename:basename(F)))
     || F <- filelib:wildcard(filename:join(?config(dist, Config), "*.tar.gz")), F =/= Nif],
    Copy = ?config(dtrace_checkout, Config),
    forget_install(Copy),
    Installed = filename:join([Copy, "priv", "dtrace_nif.so"]),
    Before = file:read_file(Installed),
    Env = [{"DTRACE_NIF_URL", Bad}, {"XDG_CACHE_HOME", filename:join(?config(priv_dir, Config), "cache2")},
           {"PATH", proplists:get_value("PATH", ?config(build_env, Config))}],
    {Status, Out} = sh_status(Copy, "sh native/build-nif.sh", Env),
    ?assertEqual(1, Status),
    Want = sha256_of(Nif),
    Have = sha256_of(filename:join(Bad, filename:basename(Nif))),
    [?assertNotEqual(nomatch, string:find(Out, Part), Part)
     || Part <- [filename:basename(Nif), "sha256:" ++ Want, "sha256:" ++ Have, "refusing it"]],
    ?assertEqual(Before, file:read_file(Installed)).

%% A cached archive whose bytes differ from the checksum file's sum is
%% refused too, DTRACE_NIF_URL set or not: the cache is checked again on
%% every use, and a changed file in it is not fetched over.
tampered_cache_is_refused(Config) ->
    Copy = ?config(dtrace_checkout, Config),
    forget_install(Copy),
    Cache = proplists:get_value("XDG_CACHE_HOME", warm_cache(Config, "tampered_cache", [])),
    [Nif] = filelib:wildcard(filename:join([Cache, "dtrace", "precompiled", "*", "libdtrace_nif-*"])),
    {ok, Bin} = file:read_file(Nif),
    <<Head:100/binary, Byte, Rest/binary>> = Bin,
    ok = file:write_file(Nif, <<Head/binary, (Byte bxor 1), Rest/binary>>),
    Installed = filename:join([Copy, "priv", "dtrace_nif.so"]),
    Before = file:read_file(Installed),
    [begin
         {Status, Out} = sh_status(Copy, "sh native/build-nif.sh",
                                   [{"XDG_CACHE_HOME", Cache} | proplists:delete("XDG_CACHE_HOME", Env)]),
         ?assertEqual(1, Status),
         [?assertNotEqual(nomatch, string:find(Out, Part), Part)
          || Part <- [Nif, "sha256:" ++ sha256_of(filename:join(?config(dist, Config), filename:basename(Nif))),
                      "sha256:" ++ sha256_of(Nif), "refusing it"]]
     end || Env <- [later_env(Config), ?config(build_env, Config)]],
    ?assertEqual(Before, file:read_file(Installed)).

%% A change of version, target or NIF version (the archive names), of the
%% checksum file's sums, or of an installed object installs again, saying
%% why; what is current is left alone, with no DTRACE_NIF_URL.
changed_install_is_replaced(Config) ->
    Copy = ?config(dtrace_checkout, Config),
    Record = filename:join([Copy, "priv", "precompiled.txt"]),
    Env = warm_cache(Config, "changed_cache", later_env(Config)),
    Build = fun() -> {0, Out} = sh_status(Copy, "sh native/build-nif.sh", Env), Out end,
    _ = Build(),
    ?assertNotEqual(nomatch, string:find(Build(), "left alone")),
    Edit = fun(From, To) ->
                   {ok, Text} = file:read_file(Record),
                   ok = file:write_file(Record, string:replace(Text, From, To, all))
           end,
    Edit("-v" ++ vsn() ++ "-", "-v0.0.0-"),
    Version = Build(),
    [?assertNotEqual(nomatch, string:find(Version, Part), Part)
     || Part <- ["installing the precompiled objects again", "-v0.0.0-", "version"]],
    Nif = filename:basename(hd(filelib:wildcard(filename:join(?config(dist, Config), "libdtrace_nif-*")))),
    Sum = sha256_of(filename:join(?config(dist, Config), Nif)),
    Edit("sha256:" ++ Sum, "sha256:" ++ lists:duplicate(64, $0)),
    Sums = Build(),
    [?assertNotEqual(nomatch, string:find(Sums, Part), Part)
     || Part <- ["checksum-dtrace_nif.exs now gives " ++ Nif ++ " sha256:" ++ Sum,
                 "installed: sha256:" ++ lists:duplicate(64, $0)]],
    Tracer = filename:join([Copy, "priv", "tracer", "dtrace_tracer.so"]),
    ok = file:write_file(Tracer, <<"not the installed one">>),
    ?assertNotEqual(nomatch, string:find(Build(), "priv/tracer/dtrace_tracer.so changed since it was installed")),
    ?assertEqual(sha256_of(Tracer), sha256_of(member_of(?config(dist, Config), "libtracer_nif-", ".so"))),
    ?assertNotEqual(nomatch, string:find(Build(), "left alone")).

%% DTRACE_NIF_PRECOMPILED=1 takes the archives although cargo is on the
%% PATH; DTRACE_NIF_URL may name a directory.
precompiled_from_a_directory(Config) ->
    Copy = ?config(dtrace_checkout, Config),
    forget_install(Copy),
    Dist = ?config(dist, Config),
    ?assertNotEqual(false, os:find_executable("cargo")),
    {0, Out} = sh_status(Copy, "sh native/build-nif.sh",
                         [{"DTRACE_NIF_PRECOMPILED", "1"}, {"DTRACE_NIF_URL", Dist},
                          {"XDG_CACHE_HOME", filename:join(?config(priv_dir, Config), "cache3")}]),
    ct:log("~ts", [Out]),
    {ok, Txt} = file:read_file(filename:join([Copy, "priv", "precompiled.txt"])),
    ?assertMatch({match, _}, re:run(Txt, "^libdtrace_nif-v.* sha256:[0-9a-f]{64} " ++ Dist ++ "/", [multiline])),
    ?assertEqual(sha256_of(filename:join([Copy, "priv", "dtrace_nif.so"])),
                 sha256_of(member_of(Dist, "libdtrace_nif-", ".so"))).

%% DTRACE_NIF_BUILD=1 builds with cargo or fails saying it is missing.
forced_build_needs_cargo(Config) ->
    {Status, Out} = sh_status(?config(dtrace_checkout, Config), "sh native/build-nif.sh",
                              [{"DTRACE_NIF_BUILD", "1"} | ?config(build_env, Config)]),
    ?assertEqual(1, Status),
    ?assertNotEqual(nomatch, string:find(Out, "cargo is not on the PATH")).

%%--------------------------------------------------------------------

vsn() ->
    {ok, [{application, dtrace, Props}]} =
        file:consult(filename:join([checkout(), "src", "dtrace.app.src"])),
    proplists:get_value(vsn, Props).

%% The build environment of a consumer's later commands: the group's,
%% without DTRACE_NIF_URL (a build-time setting nobody keeps in a shell)
%% and with an empty cache, so that only what the first build installed
%% can serve them.
later_env(Config) ->
    Env = proplists:delete("DTRACE_NIF_URL", ?config(build_env, Config)),
    case proplists:is_defined("XDG_CACHE_HOME", Env) of
        true ->
            Empty = filename:join(?config(priv_dir, Config), "empty_cache"),
            ok = filelib:ensure_dir(filename:join(Empty, "x")),
            [{"XDG_CACHE_HOME", Empty} | proplists:delete("XDG_CACHE_HOME", Env)];
        false ->
            Env
    end.

%% In the precompiled group, Env with XDG_CACHE_HOME a new cache holding
%% the archives, as a build that fetched them leaves it; Env in the cargo
%% group.
warm_cache(Config, Name, Env) ->
    case ?config(dist, Config) of
        undefined -> Env;
        Dist ->
            Cache = filename:join(?config(priv_dir, Config), Name),
            %% Kept under each archive's sum, as native/precompiled.escript keeps them.
            [begin
                 To = filename:join([Cache, "dtrace", "precompiled", sha256_of(F), filename:basename(F)]),
                 ok = filelib:ensure_dir(To),
                 {ok, _} = file:copy(F, To)
             end || F <- filelib:wildcard(filename:join(Dist, "*.tar.gz"))],
            [{"XDG_CACHE_HOME", Cache} | proplists:delete("XDG_CACHE_HOME", Env)]
    end.

%% Makes the checkout's next build install its precompiled objects again,
%% as if it had never installed them (they stay in priv/).
forget_install(Copy) ->
    _ = file:delete(filename:join([Copy, "priv", "precompiled.txt"])),
    ok.

%% A PATH whose first entry has a rebar3 that fails: mix must not need it;
%% Env (a build environment, its PATH too) otherwise.
no_rebar3_env(Config, Env) ->
    Bin = filename:join(?config(priv_dir, Config), "no_rebar3"),
    write(Bin, "rebar3", "#!/bin/sh\necho 'rebar3 must not be called' >&2\nexit 1\n"),
    ok = file:change_mode(filename:join(Bin, "rebar3"), 8#755),
    Path = proplists:get_value("PATH", Env, os:getenv("PATH")),
    [{"PATH", Bin ++ ":" ++ Path}, {"MIX_REBAR3", filename:join(Bin, "rebar3")}
     | proplists:delete("PATH", Env)].

write(Dir, Name, Text) ->
    Path = filename:join(Dir, Name),
    ok = filelib:ensure_dir(Path),
    ok = file:write_file(Path, Text).

%% The build directories of this checkout's own run (REBAR_BASE_DIR,
%% MIX_BUILD_ROOT when set) must not leak into the consumer projects' builds.
own_build_env() ->
    [{"REBAR_BASE_DIR", false}, {"MIX_BUILD_ROOT", false}, {"MIX_BUILD_PATH", false}].

%% Runs a shell command in Dir; fails the test on a non-zero exit.
sh(Dir, Cmd, Env) ->
    {Status, Out} = sh_status(Dir, Cmd, Env),
    Status =:= 0 orelse ct:fail("~s failed (~p): ~ts", [Cmd, Status, Out]),
    Out.

%% A consumer's build of the library warns of nothing on this OTP and
%% Elixir (erlc's "Warning:", Elixir's "warning:").
no_warning(Out) ->
    ?assertEqual(nomatch, re:run(Out, "[Ww]arning:", [{capture, first, list}])).

%% {ExitStatus, Output} of a shell command in Dir.
sh_status(Dir, Cmd, Env) ->
    Port = open_port({spawn_executable, "/bin/sh"},
                     [{args, ["-c", Cmd ++ " 2>&1"]}, {cd, Dir}, {env, own_build_env() ++ Env},
                      exit_status, binary, stream]),
    {Status, Out} = collect(Port, []),
    ct:log("$ ~s~n~ts", [Cmd, Out]),
    {Status, unicode:characters_to_list(Out)}.

%% The built priv/ holds every object the library loads, precompiled (and
%% saying so in precompiled.txt) in the precompiled group, from cargo in
%% the other.
assert_built(Config, Priv) ->
    [?assert(filelib:is_file(filename:join(Priv, F)), F)
     || F <- ["dtrace_nif.so", "tracer/dtrace_tracer.so", "compat/dyntrace.so", "libdtrace_lttng_tp.so",
              "dtrace_probes.eterm"]],
    Precompiled = filelib:is_file(filename:join(Priv, "precompiled.txt")),
    ?assertEqual(?config(dist, Config) =/= undefined, Precompiled).

%% The Rust target of this machine, as native/precompiled.escript derives it.
host_target() ->
    [Cpu | _] = string:split(erlang:system_info(system_architecture), "-"),
    Cpu ++ "-unknown-linux-gnu".

%% A copy of this checkout's files (tracked and new, as in the work tree,
%% without build products) with Sums as its checksum file, committed in a
%% git repository of its own (mix's git dependency needs one).
copy_checkout(Copy, Sums) ->
    ok = filelib:ensure_dir(filename:join(Copy, "x")),
    Files = os:cmd("git -C " ++ checkout() ++ " ls-files --cached --others --exclude-standard"),
    [begin
         To = filename:join(Copy, F),
         ok = filelib:ensure_dir(To),
         {ok, _} = file:copy(filename:join(checkout(), F), To),
         {ok, #file_info{mode = Mode}} = file:read_file_info(filename:join(checkout(), F)),
         ok = file:change_mode(To, Mode)
     end || F <- string:lexemes(Files, "\n"), filelib:is_regular(filename:join(checkout(), F))],
    {ok, _} = file:copy(Sums, filename:join(Copy, "checksum-dtrace_nif.exs")),
    sh(Copy, "git init -q && git add -A && git -c user.name=test -c user.email=test@localhost "
             "commit -q -m copy", []),
    Copy.

%% The PATH with each directory that holds cargo replaced by one (under
%% Priv) of links to everything else in it: no cargo, rustc or rustup, and
%% the rest as before (a cargo in /usr/bin leaves erl and mix there).
no_cargo_path(Priv) ->
    Rust = ["cargo", "rustc", "rustup"],
    Dirs = [case filelib:is_regular(filename:join(D, "cargo")) of
                false -> D;
                true -> shadow(D, filename:join([Priv, "no_cargo", integer_to_list(N)]), Rust)
            end || {N, D} <- lists:enumerate(string:split(os:getenv("PATH"), ":", all))],
    Path = lists:flatten(lists:join(":", Dirs)),
    [?assertEqual(false, os:find_executable(T, Path), T) || T <- Rust],
    Path.

shadow(Dir, Shadow, Left) ->
    ok = filelib:ensure_dir(filename:join(Shadow, "x")),
    {ok, Names} = file:list_dir(Dir),
    [ok = file:make_symlink(filename:join(Dir, N), filename:join(Shadow, N))
     || N <- Names, not lists:member(N, Left), not lists:prefix("cargo-", N)],
    Shadow.

sha256_of(File) ->
    {ok, Bin} = file:read_file(File),
    string:lowercase(binary_to_list(binary:encode_hex(crypto:hash(sha256, Bin)))).

%% The member of Dir's archive named Prefix...Suffix, unpacked to a file.
member_of(Dir, Prefix, Suffix) ->
    [Archive] = filelib:wildcard(filename:join(Dir, Prefix ++ "*.tar.gz")),
    {ok, Members} = erl_tar:extract(Archive, [compressed, memory]),
    [Data] = [D || {N, D} <- Members, lists:prefix(Prefix, N), lists:suffix(Suffix, N)],
    Out = filename:join(filename:dirname(Dir), "member" ++ Suffix),
    ok = file:write_file(Out, Data),
    Out.

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
