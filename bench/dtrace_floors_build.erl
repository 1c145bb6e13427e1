%%% Building the floors of dtrace_floors: their C code in bench/floors/
%%% compiled with cc (the tracer modules' NIF libraries, the uprobe sites
%%% and drivers, the LTTng driver, the in-node site's NIF library), the
%%% Erlang modules that load them, and each uprobe site checked (its note,
%%% its instruction). dtrace_floors:build/1,2 are these.
-module(dtrace_floors_build).

-export([build/1, build/2, lttng_provider/1, forms/0, form_bytes/1, file_offset/2]).

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
%% Also checks each uprobe site: its note (readelf -n) and its bytes
%% (objdump -d): those of its form (form_bytes/1).
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

%% @doc The site forms the floors are built with: `nop1', sys/sdt.h's
%% 1-byte nop (90); `library', the library's own site (the catalogue's
%% `Arch::site', read from priv/dtrace_probes.eterm: `nop; nop10' on
%% x86_64); `nop5', the 5-byte nop 6.18 optimizes (0f 1f 44 00 00).
-spec forms() -> [dtrace_floors:form()].
forms() ->
    [nop1, library, nop5].

%% @doc The machine code of a site form.
-spec form_bytes(dtrace_floors:form()) -> [byte()].
form_bytes(nop1) -> [16#90];
form_bytes(nop5) -> [16#0f, 16#1f, 16#44, 16#00, 16#00];
form_bytes(library) ->
    {ok, Terms} = file:consult(filename:join(code:priv_dir(dtrace), "dtrace_probes.eterm")),
    [Site] = [S || {site, S} <- Terms],
    Site.

%% cc's option for a site of Form (floor_site.c's FLOOR_SITE).
site_flag(Form) ->
    "-DFLOOR_SITE=" ++ lists:flatten(lists:join(";", [io_lib:format(".byte 0x~2.16.0b", [B])
                                                      || B <- form_bytes(Form)])).

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
            %% traced message written with %T (-DFLOOR_TEXT). The SDT
            %% site is the library's form; and, with constant texts, the
            %% 5-byte nop, the kernel's best case (6.18 optimizes it).
            Sdt = fun(M, Form, Extra) ->
                          case header(CC, Dir, "sys/sdt.h", [], "systemtap-sdt-dev") of
                              ok -> Nif(M, ["-DFLOOR_SINK_SDT", "-DFLOOR_PROVIDER=" ++ atom_to_list(M),
                                            site_flag(Form), filename:join(Src, "floor_site.c") | Extra]);
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
            Base#{sdt => Sdt(dtrace_floor_tracer_sdt, library, []),
                  sdt_nop5 => Sdt(dtrace_floor_tracer_sdt_nop5, nop5, []),
                  lttng => Lttng(dtrace_floor_tracer_lttng, []),
                  sdt_text => Sdt(dtrace_floor_tracer_sdt_text, library, ["-DFLOOR_TEXT"]),
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
            Objects =
                maps:from_list(
                  [begin
                       Lib = filename:join(Dir, "libdtrace_floor_" ++ atom_to_list(N) ++ ".so"),
                       cc(CC, ?CFLAGS ++ ["-fPIC", "-shared", site_flag(N), Site, "-o", Lib]),
                       {{lib, N}, Lib}
                   end || N <- forms()]
                  ++ [begin
                          Exe = filename:join(Dir, "floor_uprobe_self_" ++ atom_to_list(N)),
                          cc(CC, ?CFLAGS ++ ["-DFLOOR_SELF", site_flag(N), Driver, Site, "-o", Exe]),
                          {{exe, N}, Exe}
                      end || N <- forms()]),
            Exe = filename:join(Dir, "floor_uprobe_driver"),
            cc(CC, ?CFLAGS ++ [Driver, "-o", Exe, "-ldl"]),
            Sites = maps:map(fun({_, N}, Obj) -> check_site(Obj, N) end, Objects),
            Locations = maps:map(fun(_, Obj) -> location(Obj, "dtrace_floor") end, Objects),
            #{driver => Exe, objects => Objects, sites => Sites, locations => Locations};
        {ok, Missing} ->
            {skip, lists:flatten(io_lib:format("~s not found: install binutils",
                                               [lists:join(" and ", Missing)]))};
        {Skip, _} ->
            Skip
    end.

%% The site of floor_site.c in a NIF library per site form, with its
%% module (floor_site_nif.erl compiled as dtrace_floor_site_nop1,
%% _library, _nop5).
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
                                      "-DFLOOR_PROVIDER=" ++ atom_to_list(Module), site_flag(N),
                                      filename:join(Src, "floor_site_nif.c"), filename:join(Src, "floor_site.c"),
                                      "-o", So]),
                   ok = compile_module(filename:join(Src, "floor_site_nif.erl"), Module, Dir),
                   {N, #{module => Module, nif => filename:rootname(So), ebin => Dir,
                          site => check_site(So, N, atom_to_list(Module))}}
               end || N <- forms()]);
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

%% The objdump lines of the probe's site in Obj (its instructions), its
%% bytes checked against its form's; the note must name Provider:hit and a
%% semaphore.
check_site(Obj, Form) ->
    check_site(Obj, Form, "dtrace_floor").

check_site(Obj, Form, Provider) ->
    Loc = location(Obj, Provider),
    Want = form_bytes(Form),
    {0, Dis} = ?P:run(os:find_executable("objdump"),
                   ["-d", "--start-address=" ++ hex(Loc), "--stop-address=" ++ hex(Loc + length(Want)), Obj],
                   ?CC_TIMEOUT),
    %% Instruction lines: "  addr:\tbytes\tinstruction" (a long
    %% instruction's last bytes on a line of their own, with no text).
    Lines = [[string:trim(F) || F <- string:split(string:trim(L, leading), "\t", all)]
             || L <- string:split(binary_to_list(Dis), "\n", all),
                re:run(L, "^\\s+[0-9a-f]+:\t") =/= nomatch],
    Got = [list_to_integer(B, 16) || [_, Bytes | _] <- Lines, B <- string:lexemes(Bytes, " ")],
    case lists:sublist(Got, length(Want)) of
        Want -> lists:flatten(lists:join("; ", [I || [_, _, I | _] <- Lines]));
        _ -> error({unexpected_site, Obj, Form, Got, Want})
    end.

%% The address of the site of Provider:hit in Obj, from its note, which
%% must name a semaphore and the library's user_trace__i4s4 arguments.
location(Obj, Provider) ->
    {0, Notes} = ?P:run(os:find_executable("readelf"), ["-n", Obj], ?CC_TIMEOUT),
    Re = "Provider: " ++ Provider ++ "\\s+Name: hit\\s+Location: 0x([0-9a-f]+), "
         "Base: 0x[0-9a-f]+, Semaphore: 0x0*([1-9a-f][0-9a-f]*)\\s+"
         "Arguments: 8@%rdi 8@%rsi -8@%rdx -8@%rcx -8@%r8 -8@%r9 8@%r10 8@%r11 8@%r12 8@%r13",
    case re:run(Notes, Re, [{capture, [1], list}]) of
        {match, [L]} -> list_to_integer(L, 16);
        nomatch -> error({no_probe_note, Obj, Notes})
    end.

%% @doc The file offset of Address in Obj, through its executable
%% segment (readelf -lW): what a uprobe defined by hand names.
-spec file_offset(file:filename(), non_neg_integer()) -> non_neg_integer().
file_offset(Obj, Address) ->
    {0, Out} = ?P:run(os:find_executable("readelf"), ["-lW", Obj], ?CC_TIMEOUT),
    Segments = [[list_to_integer(X, 16) || X <- [O, V, S]]
                || L <- string:split(binary_to_list(Out), "\n", all),
                   {match, [O, V, S]} <- [re:run(L, "^\\s+LOAD\\s+0x([0-9a-f]+) 0x([0-9a-f]+) 0x[0-9a-f]+ "
                                                 "0x[0-9a-f]+ 0x([0-9a-f]+) R E", [{capture, all_but_first, list}])]],
    case [Address - V + O || [O, V, S] <- Segments, Address >= V, Address < V + S] of
        [Offset] -> Offset;
        _ -> error({no_executable_segment, Obj, Address, Segments})
    end.

hex(N) -> "0x" ++ integer_to_list(N, 16).
