#!/usr/bin/env escript
%%! -noshell
%% Installs dtrace's precompiled shared objects into priv/, for builds
%% without Rust. native/build-nif.sh runs it when cargo is not on the PATH
%% or DTRACE_NIF_PRECOMPILED=1; it uses OTP only (httpc, crypto, erl_tar).
%%
%%   escript native/precompiled.escript install
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
%% From where: DTRACE_NIF_URL (else PUBLISHED_URL/v<VSN> once a version is
%% published; see below), a base URL (http:// or https://, fetched with
%% httpc; https verified against the OS's CA store, public_key:cacerts_get/0)
%% or a local directory (or file:// URL) holding the archives. Each archive
%% fetched is kept in filename:basedir(user_cache, "dtrace")/precompiled and
%% reused from there; a kept archive is checked again on every use.
%%
%% Checked how: every archive's SHA-256 must be the one
%% checksum-dtrace_nif.exs (at the top of the package, committed, written
%% by make dist in rustler_precompiled's format) gives for its name. A
%% mismatch is refused: nothing is installed, the output names the file,
%% where it came from and both sums, and the exit status is 1.
%%
%% Installed where (the layout native/build-nif.sh installs from a local
%% build): priv/dtrace_nif.so, priv/dtrace_probes.json, .eterm,
%% priv/tracer/dtrace.so, priv/compat/dyntrace.so,
%% priv/libdtrace_lttng_tp.so; each written under a temporary name and
%% renamed, so a VM that has the old library mapped keeps a consistent file.
%% priv/precompiled.txt then says which archives were installed, with their
%% sums (dtrace:doctor() reports it).
-mode(compile).

-define(NAMES, ["dtrace_nif", "tracer_nif", "dtrace_lttng_tp"]).
-define(TARGETS, ["x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"]).
-define(CHECKSUMS, "checksum-dtrace_nif.exs").
-define(TIMEOUT, 120000).
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
main(_) ->
    io:format(standard_error, "usage: escript native/precompiled.escript install~n", []),
    halt(2).

install(Top) ->
    Vsn = app_vsn(Top),
    Nif = nif_version(Top),
    Target = target(),
    Sums = checksums(filename:join(Top, ?CHECKSUMS)),
    Source = source(Vsn),
    Files = [{Name, fetch(archive(Name, Vsn, Nif, Target), Source, Sums)} || Name <- ?NAMES],
    Members = [{Name, unpack(Name, Bin, Vsn, Nif, Target)} || {Name, {_, Bin}} <- Files],
    Priv = filename:join(Top, "priv"),
    {_, NifMembers} = lists:keyfind("dtrace_nif", 1, Members),
    {_, [{_, Tracer}]} = lists:keyfind("tracer_nif", 1, Members),
    {_, [{_, Lttng}]} = lists:keyfind("dtrace_lttng_tp", 1, Members),
    [Lib] = [Data || {Member, Data} <- NifMembers, lists:suffix(".so", Member)],
    Catalogue = [{Member, Data} || {Member, Data} <- NifMembers,
                                   lists:member(Member, ["dtrace_probes.json", "dtrace_probes.eterm"])],
    length(Catalogue) =:= 2 orelse throw({error, "the dtrace_nif archive holds no catalogue", []}),
    [put_file(filename:join(Priv, Member), Data, 8#644) || {Member, Data} <- Catalogue],
    put_file(filename:join(Priv, "libdtrace_lttng_tp.so"), Lttng, 8#755),
    put_file(filename:join([Priv, "tracer", "dtrace.so"]), Tracer, 8#755),
    put_file(filename:join([Priv, "compat", "dyntrace.so"]), Tracer, 8#755),
    put_file(filename:join(Priv, "dtrace_nif.so"), Lib, 8#755),
    put_file(filename:join(Priv, "precompiled.txt"),
             [[File, " sha256:", Sum, " ", From, "\n"] || {_, {{File, Sum, From}, _}} <- Files], 8#644),
    io:format("dtrace: installed the precompiled ~s (v~s, NIF ~s) from ~s~n", [Target, Vsn, Nif, Source]),
    ok.

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

%% {{File, Sum, From}, Bin}: the archive, from the cache or Source, checked.
fetch(File, Source, Sums) ->
    Want = case maps:find(File, Sums) of
               {ok, S} -> S;
               error -> throw({error, "~s lists no ~s: this version has no precompiled NIF for this "
                                      "target (build it with cargo: DTRACE_NIF_BUILD=1)", [?CHECKSUMS, File]})
           end,
    Cached = filename:join([filename:basedir(user_cache, "dtrace"), "precompiled", File]),
    case file:read_file(Cached) of
        {ok, Bin} ->
            case sha256(Bin) of
                Want -> {{File, Want, Cached}, Bin};
                _ -> fetch_fresh(File, Source, Want, Cached)
            end;
        {error, _} ->
            fetch_fresh(File, Source, Want, Cached)
    end.

fetch_fresh(File, Source, Want, Cached) ->
    {From, Bin} = get(Source, File),
    case sha256(Bin) of
        Want ->
            _ = filelib:ensure_dir(Cached),
            _ = put_file(Cached, Bin, 8#644),
            {{File, Want, From}, Bin};
        Have ->
            throw({error, "~s (from ~s) failed its checksum: ~s says sha256:~s, the file is sha256:~s; "
                          "refusing it (nothing installed)", [File, From, ?CHECKSUMS, Want, Have]})
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

put_file(Path, Data, Mode) ->
    ok = filelib:ensure_dir(Path),
    Tmp = Path ++ ".tmp",
    case file:write_file(Tmp, Data) of
        ok ->
            ok = file:change_mode(Tmp, Mode),
            ok = file:rename(Tmp, Path);
        {error, Why} ->
            throw({error, "cannot write ~s: ~s", [Tmp, file:format_error(Why)]})
    end.
