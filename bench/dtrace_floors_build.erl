%%% Building the floors of dtrace_floors: their C code in bench/floors/
%%% compiled with cc (the tracer modules' NIF libraries, the uprobe sites
%%% and drivers, the LTTng driver, the in-node site's NIF library), the
%%% Erlang modules that load them, and each uprobe site checked (its note,
%%% its instruction). dtrace_floors:build/1,2 are these.
-module(dtrace_floors_build).

-export([build/1, build/2, lttng_provider/1]).

-type skip() :: {skip, Why :: string()}.

-include("dtrace_floors.hrl").

-define(P, dtrace_floors_programs).

-define(CFLAGS, ["-Wall", "-Wextra", "-O2"]).

%% @doc build(WorkDir): build/2 with the sources in bench/floors/, next to
%% this module's source.
-spec build(file:filename()) -> {ok, dtrace_floors:paths()} | skip().
build(WorkDir) ->
    Source = proplists:get_value(source, ?MODULE:module_info(compile)),
    build(filename:join(filename:dirname(Source), "floors"), WorkDir).

%% @doc Compiles the floors' C code from SrcDir with cc into WorkDir, and
%% the tracer module dtrace_floor_tracer (its .beam in WorkDir).
%% `{skip, Why}' without cc. A floor whose header is missing is
%% `{skip, Why}' in the paths, Why naming the Debian package to install;
%% otherwise a compiler error, or any warning (the C is meant to build
%% clean with -Wall -Wextra -O2), is an error with cc's output.
%% Also checks each uprobe site: its note (readelf -n) and its instruction
%% (objdump -d): `nop' (90) or `nopl 0x0(%rax,%rax,1)' (0f 1f 44 00 00).
-spec build(file:filename(), file:filename()) -> {ok, dtrace_floors:paths()} | skip().
build(SrcDir, WorkDir) ->
    case os:find_executable("cc") of
        false ->
            {skip, "no C compiler (cc): install gcc (Debian: build-essential)"};
        CC ->
            Dir = filename:absname(WorkDir),
            Src = filename:absname(SrcDir),
            ok = filelib:ensure_dir(filename:join(Dir, "x")),
            {ok, #{dir => Dir,
                   tracer => build_tracer(CC, Src, Dir),
                   uprobe => build_uprobe(CC, Src, Dir),
                   lttng => build_lttng(CC, Src, Dir),
                   node_site => build_node_site(CC, Src, Dir)}}
    end.

build_tracer(CC, Src, Dir) ->
    Include = filename:join([code:root_dir(), "usr", "include"]),
    case header(CC, Dir, "erl_nif.h", ["-I", Include], "erlang-dev") of
        ok ->
            Nif = fun(Module, Extra) ->
                          So = filename:join(Dir, atom_to_list(Module) ++ ".so"),
                          cc(CC, ?CFLAGS ++ ["-fPIC", "-shared", "-I", Include, "-I", Src,
                                             "-DFLOOR_MODULE=" ++ atom_to_list(Module),
                                             filename:join(Src, "floor_tracer_nif.c")] ++ Extra ++ ["-o", So]),
                          ok = compile_module(filename:join(Src, "dtrace_floor_tracer.erl"), Module, Dir),
                          #{module => Module, nif => filename:rootname(So), ebin => Dir}
                  end,
            Base = Nif(dtrace_floor_tracer, []),
            %% Each sink twice: constant texts, and the texts of the
            %% traced message written with %T (-DFLOOR_TEXT).
            Sdt = fun(M, Extra) ->
                          case header(CC, Dir, "sys/sdt.h", [], "systemtap-sdt-dev") of
                              ok -> Nif(M, ["-DFLOOR_SINK_SDT", "-DFLOOR_PROVIDER=" ++ atom_to_list(M),
                                            filename:join(Src, "floor_site.c") | Extra]);
                              SdtSkip -> SdtSkip
                          end
                  end,
            Lttng = fun(M, Extra) ->
                            case header(CC, Dir, "lttng/tracepoint.h", [], "liblttng-ust-dev") of
                                ok -> Nif(M, ["-DFLOOR_SINK_LTTNG",
                                              "-DFLOOR_TP=" ++ atom_to_list(lttng_provider(M)),
                                              filename:join(Src, "floor_tp.c"), "-llttng-ust", "-ldl" | Extra]);
                                LttngSkip -> LttngSkip
                            end
                    end,
            Base#{sdt => Sdt(dtrace_floor_tracer_sdt, []), lttng => Lttng(dtrace_floor_tracer_lttng, []),
                  sdt_text => Sdt(dtrace_floor_tracer_sdt_text, ["-DFLOOR_TEXT"]),
                  lttng_text => Lttng(dtrace_floor_tracer_lttng_text, ["-DFLOOR_TEXT"])};
        Skip ->
            Skip
    end.

%% The LTTng provider of a tracer module's library (floor_tp.h's FLOOR_TP):
%% each library in the node registers its own.
lttng_provider(lttng_text) -> dtrace_floor_text;
lttng_provider(dtrace_floor_tracer_lttng_text) -> dtrace_floor_text;
lttng_provider(_) -> dtrace_floor.

%% Compiles Source as module Module (its FLOOR_MODULE) into Dir.
compile_module(Source, Module, Dir) ->
    case compile:file(Source, [binary, {d, 'FLOOR_MODULE', Module}, return_errors, return_warnings]) of
        {ok, Module, Beam, []} -> file:write_file(filename:join(Dir, atom_to_list(Module) ++ ".beam"), Beam);
        Other -> error({erlc_failed, Source, Other})
    end.

build_uprobe(CC, Src, Dir) ->
    Tools = [T || T <- ["readelf", "objdump"], os:find_executable(T) =:= false],
    case {header(CC, Dir, "sys/sdt.h", [], "systemtap-sdt-dev"), Tools} of
        {ok, []} ->
            Site = filename:join(Src, "floor_site.c"),
            Driver = filename:join(Src, "floor_uprobe_driver.c"),
            Nop = fun(nop1) -> []; (nop5) -> ["-DFLOOR_NOP5"] end,
            Objects =
                maps:from_list(
                  [begin
                       Lib = filename:join(Dir, "libdtrace_floor_" ++ atom_to_list(N) ++ ".so"),
                       cc(CC, ?CFLAGS ++ ["-fPIC", "-shared"] ++ Nop(N) ++ [Site, "-o", Lib]),
                       {{lib, N}, Lib}
                   end || N <- [nop1, nop5]]
                  ++ [begin
                          Exe = filename:join(Dir, "floor_uprobe_self_" ++ atom_to_list(N)),
                          cc(CC, ?CFLAGS ++ ["-DFLOOR_SELF"] ++ Nop(N) ++ [Driver, Site, "-o", Exe]),
                          {{exe, N}, Exe}
                      end || N <- [nop1, nop5]]),
            Exe = filename:join(Dir, "floor_uprobe_driver"),
            cc(CC, ?CFLAGS ++ [Driver, "-o", Exe, "-ldl"]),
            Sites = maps:map(fun({_, N}, Obj) -> check_site(Obj, N) end, Objects),
            #{driver => Exe, objects => Objects, sites => Sites};
        {ok, Missing} ->
            {skip, lists:flatten(io_lib:format("~s not found: install binutils",
                                               [lists:join(" and ", Missing)]))};
        {Skip, _} ->
            Skip
    end.

%% The site of floor_site.c in a NIF library per nop form, with its
%% module (floor_site_nif.erl compiled as dtrace_floor_site_nop1/_nop5).
build_node_site(CC, Src, Dir) ->
    Include = filename:join([code:root_dir(), "usr", "include"]),
    case {header(CC, Dir, "erl_nif.h", ["-I", Include], "erlang-dev"),
          header(CC, Dir, "sys/sdt.h", [], "systemtap-sdt-dev")} of
        {ok, ok} ->
            maps:from_list(
              [begin
                   Module = list_to_atom("dtrace_floor_site_" ++ atom_to_list(N)),
                   So = filename:join(Dir, atom_to_list(Module) ++ ".so"),
                   cc(CC, ?CFLAGS ++ ["-fPIC", "-shared", "-I", Include, "-DFLOOR_MODULE=" ++ atom_to_list(Module),
                                      "-DFLOOR_PROVIDER=" ++ atom_to_list(Module)]
                      ++ [D || N =:= nop5, D <- ["-DFLOOR_NOP5"]]
                      ++ [filename:join(Src, "floor_site_nif.c"), filename:join(Src, "floor_site.c"), "-o", So]),
                   ok = compile_module(filename:join(Src, "floor_site_nif.erl"), Module, Dir),
                   {N, #{module => Module, nif => filename:rootname(So), ebin => Dir,
                          site => check_site(So, N, atom_to_list(Module))}}
               end || N <- [nop1, nop5]]);
        {ok, Skip} -> Skip;
        {Skip, _} -> Skip
    end.

build_lttng(CC, Src, Dir) ->
    case header(CC, Dir, "lttng/tracepoint.h", [], "liblttng-ust-dev") of
        ok ->
            Exe = filename:join(Dir, "floor_lttng_driver"),
            cc(CC, ?CFLAGS ++ ["-I", Src, filename:join(Src, "floor_tp.c"),
                               filename:join(Src, "floor_lttng_driver.c"),
                               "-o", Exe, "-llttng-ust", "-ldl"]),
            #{driver => Exe};
        Skip ->
            Skip
    end.

%% ok if cc finds Header (with the options Opts), else {skip, Why} naming
%% the Debian package that has it.
header(CC, Dir, Header, Opts, Package) ->
    File = filename:join(Dir, "header_check.c"),
    ok = file:write_file(File, ["#include <", Header, ">\n"]),
    {Status, _} = ?P:run(CC, Opts ++ ["-E", "-o", "/dev/null", File], ?CC_TIMEOUT),
    _ = file:delete(File),
    case Status of
        0 -> ok;
        _ -> {skip, lists:flatten(io_lib:format("<~s> not found: install ~s", [Header, Package]))}
    end.

cc(CC, Args) ->
    case ?P:run(CC, Args, ?CC_TIMEOUT) of
        {0, <<>>} -> ok;
        {0, Warnings} -> error({cc_warnings, Args, Warnings});
        {Status, Out} -> error({cc_failed, Status, Args, Out})
    end.

%% The objdump line of the probe's instruction in Obj, checked against the
%% intended nop; the note must name Provider:hit and a semaphore.
check_site(Obj, Nop) ->
    check_site(Obj, Nop, "dtrace_floor").

check_site(Obj, Nop, Provider) ->
    {0, Notes} = ?P:run(os:find_executable("readelf"), ["-n", Obj], ?CC_TIMEOUT),
    Re = "Provider: " ++ Provider ++ "\\s+Name: hit\\s+Location: 0x([0-9a-f]+), "
         "Base: 0x[0-9a-f]+, Semaphore: 0x0*([1-9a-f][0-9a-f]*)\\s+"
         "Arguments: 8@%rdi 8@%rsi -8@%rdx -8@%rcx -8@%r8 -8@%r9 8@%r10 8@%r11 8@%r12 8@%r13",
    Loc = case re:run(Notes, Re, [{capture, [1], list}]) of
              {match, [L]} -> list_to_integer(L, 16);
              nomatch -> error({no_probe_note, Obj, Notes})
          end,
    {0, Dis} = ?P:run(os:find_executable("objdump"),
                   ["-d", "--start-address=" ++ hex(Loc), "--stop-address=" ++ hex(Loc + 5), Obj],
                   ?CC_TIMEOUT),
    Prefix = integer_to_list(Loc, 16),
    Line = case [string:trim(L) || L <- string:split(binary_to_list(Dis), "\n", all),
                                   lists:prefix(string:lowercase(Prefix) ++ ":", string:trim(L))] of
               [L1 | _] -> L1;
               [] -> error({no_site_instruction, Obj, Dis})
           end,
    Want = case Nop of nop1 -> "90"; nop5 -> "0f 1f 44 00 00" end,
    [_, Bytes | _] = string:split(Line, "\t", all),
    case string:trim(Bytes) of
        Want -> lists:flatten(lists:join("  ", [string:trim(F) || F <- string:lexemes(Line, "\t")]));
        Got -> error({unexpected_site, Obj, Nop, Got})
    end.

hex(N) -> "0x" ++ integer_to_list(N, 16).
