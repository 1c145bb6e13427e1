#!/usr/bin/env escript
%%! -noshell
%% Installs dtrace's precompiled shared objects into priv/, for builds
%% without Rust. native/build-nif.sh runs it when cargo is not on the PATH
%% or DTRACE_NIF_PRECOMPILED=1; it uses OTP only (httpc, crypto, erl_tar).
%%
%%   escript native/precompiled.escript install
%%   escript native/precompiled.escript unpack DIR TARGET PRIV
%%
%% unpack (make kit, scripts/kit.sh): TARGET's three archives from DIR,
%% just made by make dist, installed into PRIV in the same layout, with no
%% checksum file, cache or record.
%%
%% What it fetches: for this VM's target and NIF version, the three archives
%% `make dist` writes (scripts/dist.sh), named as rustler_precompiled names
%% them:
%%   lib<NAME>-v<VSN>-nif-<NIF>-<TARGET>.so.tar.gz
%% NAME: dtrace_nif, tracer_nif, dtrace_lttng_tp. VSN: src/dtrace.app.src's.
%% TARGET: erlang:system_info(system_architecture) with its vendor made
%% `unknown` (x86_64-pc-linux-gnu -> x86_64-unknown-linux-gnu), as
%% rustler_precompiled's target/1 does; x86_64 and aarch64 Linux with glibc
%% are built. NIF: the rustler feature of native/dtrace_nif/Cargo.toml
%% (2.15), which a VM of the same major NIF version and a minor at least as
%% high loads (rustler_precompiled's find_compatible_nif_version/2).
%%
%% Installed already: when priv/precompiled.txt names the archives this
%% build needs (same version, NIF version and target) with the sums
%% checksum-dtrace_nif.exs gives them now, and every object it installed
%% still has its recorded sum, nothing is done and nothing is needed: no
%% DTRACE_NIF_URL, no cache. So a consumer's later `mix run`, `mix test`,
%% `mix release`, `rebar3 compile` or `rebar3 release` keeps what its first
%% build installed. Otherwise it installs again and says why.
%%
%% From where: each archive from the cache,
%% filename:basedir(user_cache, "dtrace")/precompiled/SHA256/ (~/.cache/
%% dtrace/precompiled, or $XDG_CACHE_HOME's), when it is there; else from
%% DTRACE_NIF_URL (else PUBLISHED_URL/v<VSN> once a version is published;
%% see below), a base URL (http:// or https://, fetched with httpc; https
%% verified against the OS's CA store, public_key:cacerts_get/0) or a local
%% directory (or file:// URL) holding the archives, then kept in the cache.
%%
%% Checked how: every archive's SHA-256, fetched or cached, must be the one
%% checksum-dtrace_nif.exs (at the top of the package, committed, written
%% by make dist in rustler_precompiled's format) gives for its name. A
%% mismatch is refused: nothing is installed, the output names the file,
%% where it came from and both sums, and the exit status is 1. A cached
%% archive that fails is not fetched over: delete it to fetch it again.
%%
%% Installed where (the layout native/build-nif.sh installs from a local
%% build): priv/dtrace_nif.so, priv/dtrace_probes.json, .eterm,
%% priv/tracer/dtrace_tracer.so, priv/compat/dyntrace.so,
%% priv/libdtrace_lttng_tp.so; each written under a temporary name and
%% renamed, so a VM that has the old library mapped keeps a consistent file.
%% priv/precompiled.txt, written last, says which archives were installed
%% (name, sum, where from: dtrace:doctor() reports it) and the sum of each
%% object installed (lines `installed PATH sha256:HEX`).
-mode(compile).

-define(NAMES, ["dtrace_nif", "tracer_nif", "dtrace_lttng_tp"]).
-define(TARGETS, ["x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"]).
-define(CHECKSUMS, "checksum-dtrace_nif.exs").
-define(TIMEOUT, 120000).
-define(RECORD, "precompiled.txt").
%% What an install writes under priv/ (objects/1).
-define(OBJECTS, ["dtrace_probes.json", "dtrace_probes.eterm", "libdtrace_lttng_tp.so", "tracer/dtrace_tracer.so",
                  "compat/dyntrace.so", "dtrace_nif.so"]).
%% Where a published version's archives are, under v<VSN>/, when
%% DTRACE_NIF_URL is unset: nowhere yet (CONTRIBUTING.md, "Publishing").
-define(PUBLISHED_URL, "").

main(["install"]) ->
    Top = filename:dirname(filename:dirname(filename:absname(escript:script_name()))),
    try install(Top) of
        ok -> halt(0)
    catch
        throw:{error, Fmt, Args} ->
            io:format(standard_error, "dtrace: " ++ Fmt ++ "~n", Args),
            halt(1)
    end;
main(["unpack", Dir, Target, Priv]) ->
    Top = filename:dirname(filename:dirname(filename:absname(escript:script_name()))),
    Vsn = app_vsn(Top),
    Nif = nif_version(Top),
    Members = [begin
                   File = archive(Name, Vsn, Nif, Target),
                   {ok, Bin} = file:read_file(filename:join(Dir, File)),
                   {Name, unpack(Name, Bin, Vsn, Nif, Target)}
               end || Name <- ?NAMES],
    [put_file(filename:join(Priv, Path), Data, Mode) || {Path, Data, Mode} <- objects(Members)],
    halt(0);
main(_) ->
    io:format(standard_error, "usage: escript native/precompiled.escript install | unpack DIR TARGET PRIV~n", []),
    halt(2).

install(Top) ->
    Vsn = app_vsn(Top),
    Nif = nif_version(Top),
    Target = target(),
    Sums = checksums(filename:join(Top, ?CHECKSUMS)),
    Wanted = [{Name, File, wanted_sum(File, Sums)} || Name <- ?NAMES, File <- [archive(Name, Vsn, Nif, Target)]],
    Priv = filename:join(Top, "priv"),
    case installed(Priv, Wanted) of
        current ->
            io:format("dtrace: the precompiled ~s (v~s, NIF ~s) is installed and matches ~s; "
                      "left alone~n", [Target, Vsn, Nif, ?CHECKSUMS]);
        {stale, Why} ->
            io:format("dtrace: installing the precompiled objects again: ~ts~n", [Why]),
            put_archives(Priv, Wanted, Vsn, Nif, Target);
        none ->
            put_archives(Priv, Wanted, Vsn, Nif, Target)
    end.

put_archives(Priv, Wanted, Vsn, Nif, Target) ->
    Files = [{Name, fetch(File, Sum, Vsn)} || {Name, File, Sum} <- Wanted],
    Members = [{Name, unpack(Name, Bin, Vsn, Nif, Target)} || {Name, {_, Bin}} <- Files],
    Objects = objects(Members),
    [put_file(filename:join(Priv, Path), Data, Mode) || {Path, Data, Mode} <- Objects],
    put_file(filename:join(Priv, ?RECORD),
             [[[File, " sha256:", Sum, " ", From, "\n"] || {_, {{File, Sum, From}, _}} <- Files],
              [["installed ", Path, " sha256:", sha256(Data), "\n"] || {Path, Data, _} <- Objects]],
             8#644),
    Cache = cache_root(),
    From = lists:usort([case lists:prefix(Cache, F) of
                            true -> "the cache, " ++ Cache;
                            false -> filename:dirname(F)
                        end || {_, {{_, _, F}, _}} <- Files]),
    io:format("dtrace: installed the precompiled ~s (v~s, NIF ~s) from ~ts~n",
              [Target, Vsn, Nif, lists:join(", ", From)]),
    ok.

%% {PathUnderPriv, Data, Mode} of each object the archives install.
objects(Members) ->
    {_, NifMembers} = lists:keyfind("dtrace_nif", 1, Members),
    {_, [{_, Tracer}]} = lists:keyfind("tracer_nif", 1, Members),
    {_, [{_, Lttng}]} = lists:keyfind("dtrace_lttng_tp", 1, Members),
    [Lib] = [Data || {Member, Data} <- NifMembers, lists:suffix(".so", Member)],
    Catalogue = [{Member, Data, 8#644} || {Member, Data} <- NifMembers,
                                         lists:member(Member, ["dtrace_probes.json", "dtrace_probes.eterm"])],
    length(Catalogue) =:= 2 orelse throw({error, "the dtrace_nif archive holds no catalogue", []}),
    %% The NIF last: a build interrupted before it leaves no record, so the
    %% next build installs again.
    Catalogue ++ [{"libdtrace_lttng_tp.so", Lttng, 8#755}, {"tracer/dtrace_tracer.so", Tracer, 8#755},
                  {"compat/dyntrace.so", Tracer, 8#755}, {"dtrace_nif.so", Lib, 8#755}].

%% Whether priv/ holds what Wanted's archives install, by priv/precompiled.txt
%% (written last by put_archives/5): current when it names the same archives
%% with the sums the checksum file gives now, and each object it installed
%% still has the sum recorded then; else {stale, Why}, or none when priv/
%% holds no precompiled objects (never installed, or built with cargo, which
%% removes the record).
installed(Priv, Wanted) ->
    case file:read_file(filename:join(Priv, ?RECORD)) of
        {ok, Text} ->
            Lines = [string:lexemes(L, " ") || L <- string:lexemes(binary_to_list(Text), "\n")],
            Archives = [{File, Sum} || [File, "sha256:" ++ Sum | _] <- Lines],
            Objects = [{Path, Sum} || ["installed", Path, "sha256:" ++ Sum] <- Lines],
            stale(Priv, Wanted, Archives, Objects);
        {error, _} ->
            none
    end.

stale(Priv, [], _Archives, Objects) ->
    case lists:sort([P || {P, _} <- Objects]) =:= lists:sort(?OBJECTS) of
        true -> changed(Priv, Objects);
        false -> {stale, "priv/" ?RECORD " does not name the objects an install writes"}
    end;
stale(Priv, [{_, File, Sum} | Wanted], Archives, Objects) ->
    case lists:keyfind(File, 1, Archives) of
        {File, Sum} ->
            stale(Priv, Wanted, Archives, Objects);
        {File, Old} ->
            {stale, io_lib:format("~s now gives ~s sha256:~s (installed: sha256:~s)",
                                  [?CHECKSUMS, File, Sum, Old])};
        false ->
            Had = [F || {F, _} <- Archives, lists:prefix(lists:takewhile(fun(C) -> C =/= $- end, File), F)],
            {stale, io_lib:format("this build needs ~s (installed: ~s): the version, NIF version "
                                  "or target changed", [File, lists:join(", ", Had ++ ["none" || Had =:= []])])}
    end.

%% current when every installed object still has its recorded sum.
changed(Priv, Objects) ->
    case [{Path, Sum, Have} || {Path, Sum} <- Objects,
                               Have <- [file_sum(filename:join(Priv, Path))], Have =/= "sha256:" ++ Sum] of
        [] -> current;
        [{Path, _Sum, missing} | _] ->
            {stale, io_lib:format("priv/~s is missing", [Path])};
        [{Path, Sum, Have} | _] ->
            {stale, io_lib:format("priv/~s changed since it was installed (installed: sha256:~s, "
                                  "now: ~s)", [Path, Sum, Have])}
    end.

file_sum(Path) ->
    case file:read_file(Path) of
        {ok, Bin} -> "sha256:" ++ sha256(Bin);
        {error, enoent} -> missing;
        {error, Why} -> file:format_error(Why)
    end.

%% The version of the application, from src/dtrace.app.src.
app_vsn(Top) ->
    {ok, [{application, dtrace, Props}]} = file:consult(filename:join([Top, "src", "dtrace.app.src"])),
    proplists:get_value(vsn, Props).

%% The NIF version the crate is built for: rustler's nif_version_M_N feature.
nif_version(Top) ->
    {ok, Toml} = file:read_file(filename:join([Top, "native", "dtrace_nif", "Cargo.toml"])),
    {match, [Major, Minor]} = re:run(Toml, "\"nif_version_(\\d+)_(\\d+)\"", [{capture, all_but_first, list}]),
    Built = {list_to_integer(Major), list_to_integer(Minor)},
    [HMajor, HMinor] = [list_to_integer(P) || P <- string:split(erlang:system_info(nif_version), ".")],
    case Built of
        {HMajor, M} when M =< HMinor -> Major ++ "." ++ Minor;
        _ -> throw({error, "the precompiled NIF is for NIF version ~s.~s; this VM has ~s: "
                           "build it with cargo (DTRACE_NIF_BUILD=1)",
                    [Major, Minor, erlang:system_info(nif_version)]})
    end.

%% The Rust target triple of this VM, as rustler_precompiled derives it.
target() ->
    Arch = erlang:system_info(system_architecture),
    Target = case string:split(Arch, "-", all) of
                 [Cpu, _Vendor, Os, Abi | _] -> lists:join("-", [cpu(Cpu), "unknown", Os, Abi]);
                 _ -> Arch
             end,
    T = lists:flatten(Target),
    lists:member(T, ?TARGETS) orelse
        throw({error, "no precompiled NIF for ~s (this VM: ~s; built: ~s): "
                      "install Rust and build it (DTRACE_NIF_BUILD=1)",
               [T, Arch, lists:join(", ", ?TARGETS)]}),
    T.

cpu("amd64") -> "x86_64";
cpu("arm64") -> "aarch64";
cpu(Cpu) -> Cpu.

archive(Name, Vsn, Nif, Target) ->
    lists:flatten(["lib", Name, "-v", Vsn, "-nif-", Nif, "-", Target, ".so.tar.gz"]).

%% The checksum file: rustler_precompiled's Elixir map literal, one
%% `"FILE" => "sha256:HEX",` line per archive.
checksums(Path) ->
    case file:read_file(Path) of
        {ok, Text} ->
            {match, Pairs} = re:run(Text, "\"([^\"]+)\"\\s*=>\\s*\"sha256:([0-9a-f]{64})\"",
                                    [global, {capture, all_but_first, list}]),
            maps:from_list([{F, S} || [F, S] <- Pairs]);
        {error, Why} ->
            throw({error, "cannot read ~s: ~s", [Path, file:format_error(Why)]})
    end.

source(Vsn) ->
    case os:getenv("DTRACE_NIF_URL") of
        Unset when (Unset =:= false orelse Unset =:= ""), ?PUBLISHED_URL =/= "" ->
            ?PUBLISHED_URL ++ "/v" ++ Vsn;
        Url when Url =:= false; Url =:= "" ->
            throw({error, "DTRACE_NIF_URL is not set: set it to the base URL or the directory "
                          "holding the precompiled archives (make dist), or install Rust "
                          "(https://rustup.rs) to build the NIF", []});
        "file://" ++ Dir -> Dir;
        Url -> Url
    end.

%% The SHA-256 the checksum file gives for File.
wanted_sum(File, Sums) ->
    case maps:find(File, Sums) of
        {ok, S} -> S;
        error -> throw({error, "~s lists no ~s: this version has no precompiled NIF for this "
                               "target (build it with cargo: DTRACE_NIF_BUILD=1)", [?CHECKSUMS, File]})
    end.

%% {{File, Sum, From}, Bin}: the archive, checked against Want. From the
%% cache when it is there, without needing DTRACE_NIF_URL; the cache keeps
%% each archive under the sum the checksum file gives it, so a new `make
%% dist' of the same version misses it and fetches, while a cached archive
%% whose bytes are not that sum is refused like a fetched one (not fetched
%% over: the cache is the user's, and a changed file in it is worth knowing
%% of).
fetch(File, Want, Vsn) ->
    Cached = filename:join([cache_root(), Want, File]),
    case file:read_file(Cached) of
        {ok, Bin} ->
            check(File, Cached, Want, Bin, "; delete it to fetch it again"),
            {{File, Want, Cached}, Bin};
        {error, _} ->
            {From, Bin} = get(source(Vsn), File),
            check(File, From, Want, Bin, ""),
            %% A cache that cannot be written costs the next build a fetch,
            %% nothing more.
            try put_file(Cached, Bin, 8#644)
            catch
                _:_ -> io:format(standard_error, "dtrace: could not keep ~s in the cache ~s~n",
                                 [File, filename:dirname(Cached)])
            end,
            {{File, Want, From}, Bin}
    end.

cache_root() ->
    filename:join(filename:basedir(user_cache, "dtrace"), "precompiled").

check(File, From, Want, Bin, Hint) ->
    case sha256(Bin) of
        Want -> ok;
        Have -> throw({error, "~s (from ~s) failed its checksum: ~s says sha256:~s, the file is sha256:~s; "
                              "refusing it (nothing installed)~s", [File, From, ?CHECKSUMS, Want, Have, Hint]})
    end.

get(Source, File) ->
    case Source of
        "http://" ++ _ -> http_get(Source, File);
        "https://" ++ _ -> http_get(Source, File);
        Dir ->
            Path = filename:join(Dir, File),
            case file:read_file(Path) of
                {ok, Bin} -> {Path, Bin};
                {error, Why} -> throw({error, "cannot read ~s: ~s", [Path, file:format_error(Why)]})
            end
    end.

http_get(Base, File) ->
    Url = string:trim(Base, trailing, "/") ++ "/" ++ File,
    {ok, _} = application:ensure_all_started(inets),
    Ssl = case Base of
              "https://" ++ _ ->
                  {ok, _} = application:ensure_all_started(ssl),
                  [{ssl, [{verify, verify_peer}, {cacerts, public_key:cacerts_get()}, {depth, 4},
                          {customize_hostname_check,
                           [{match_fun, public_key:pkix_verify_hostname_match_fun(https)}]}]}];
              _ -> []
          end,
    case httpc:request(get, {Url, []}, [{timeout, ?TIMEOUT}, {connect_timeout, ?TIMEOUT}, {autoredirect, true} | Ssl],
                       [{body_format, binary}]) of
        {ok, {{_, 200, _}, _, Bin}} -> {Url, Bin};
        {ok, {{_, Status, Reason}, _, _}} -> throw({error, "~s: HTTP ~p ~s", [Url, Status, Reason]});
        {error, Why} -> throw({error, "~s: ~0p", [Url, Why]})
    end.

sha256(Bin) ->
    string:lowercase(binary_to_list(binary:encode_hex(crypto:hash(sha256, Bin)))).

%% The archive's members, in memory; the library must be there under its
%% versioned name.
unpack(Name, Bin, Vsn, Nif, Target) ->
    Lib = filename:basename(archive(Name, Vsn, Nif, Target), ".tar.gz"),
    case erl_tar:extract({binary, Bin}, [compressed, memory]) of
        {ok, Members} ->
            case lists:keymember(Lib, 1, Members) of
                true when Name =:= "dtrace_nif" -> Members;
                true -> [lists:keyfind(Lib, 1, Members)];
                false -> throw({error, "~s.tar.gz holds no ~s", [Lib, Lib]})
            end;
        {error, Why} ->
            throw({error, "~s.tar.gz: ~s", [Lib, erl_tar:format_error(Why)]})
    end.

%% Written under a name of this process's own and renamed, so that a VM
%% with the old file mapped, or another build installing at the same
%% time, sees a whole file.
put_file(Path, Data, Mode) ->
    Tmp = Path ++ ".tmp." ++ os:getpid(),
    Result = case filelib:ensure_dir(Path) of
                 ok ->
                     case file:write_file(Tmp, Data) of
                         ok ->
                             case file:change_mode(Tmp, Mode) of
                                 ok -> file:rename(Tmp, Path);
                                 Error -> Error
                             end;
                         Error -> Error
                     end;
                 Error -> Error
             end,
    case Result of
        ok -> ok;
        {error, Why} ->
            _ = file:delete(Tmp),
            throw({error, "cannot write ~s: ~s", [Path, file:format_error(Why)]})
    end.
