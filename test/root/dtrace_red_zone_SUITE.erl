%%% The red zone (issue #52): a traced probe site leaves the data a
%%% function keeps below its stack pointer as it was.
%%%
%%% The x86-64 System V ABI lets a function that calls nothing keep data in
%%% the 128 bytes below its stack pointer, the red zone. Linux 6.18 turns a
%%% uprobe on a 5-byte nop into a call to a trampoline after its first hit,
%%% and that call pushes 32 bytes there (ARCHITECTURE.md, "The probe site").
%%% So the library's sites are `nop; nop10' (the catalogue's `Arch::site'),
%%% on whose leading `nop' every tracer breaks, and the compiler keeps
%%% nothing below the stack pointer where a site is (no `nostack' in
%%% `sdt_site!'). x86_64 only (elsewhere the cases skip): the kernel
%%% optimizes no uprobe on aarch64.
%%%
%%% - the_library_keeps_nothing_below_the_stack_pointer: every note of
%%%   priv/dtrace_nif.so points at the catalogue's site bytes, and no
%%%   instruction of a function holding a site reads or writes below the
%%%   stack pointer (objdump); the same scan finds the red zone the
%%%   compiler does use in the DOF is-enabled functions (`nostack', a
%%%   1-byte nop: no kernel optimizes it), so the scan can see it.
%%% - red_zone_under_bpftrace, red_zone_under_perf: a C leaf function
%%%   (dtrace_red_zone_SUITE_data/red_zone.c) keeps 16 values in its red
%%%   zone across a site and checks them, 2,000,000 calls under the tracer
%%%   counting its probe: with the library's site bytes, every call finds
%%%   its values and the tracer counts every hit, with its breakpoint on the
%%%   leading nop; the control, the same leaf with a 5-byte nop, shows that
%%%   the check sees corruption where the kernel optimizes the probe (6.18:
%%%   on every call after the first). bpftrace is the one on the PATH: 0.17
%%%   on the host, 0.27 (libbpf 1.7, which moves a probe past a leading nop
%%%   it knows) under make test-sid.
%%% - red_zone_at_the_nop10: the library's form probed where a tracer that
%%%   knows it would probe on a kernel that optimizes it, the 10-byte nop at
%%%   +1 (a tracefs uprobe counted by perf): a kernel without that
%%%   optimization refuses it (no hit; 6.18 does), one with it must count
%%%   every hit and leave the values alone.
-module(dtrace_red_zone_SUITE).

-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([suite/0, all/0, init_per_suite/1, end_per_suite/1, init_per_testcase/2, end_per_testcase/2]).
-export([the_library_keeps_nothing_below_the_stack_pointer/1, red_zone_under_bpftrace/1, red_zone_under_perf/1,
         red_zone_at_the_nop10/1]).

%% Calls of the leaf per run: millions, so that a corruption of one call
%% in a million would show.
-define(CALLS, 2000000).
%% The control's site: a 5-byte nop (nopl 0x0(%rax,%rax,1)), the one 6.18
%% optimizes.
-define(NOP5, [16#0f, 16#1f, 16#44, 16#00, 16#00]).
%% The tracefs uprobe on the nop10, and its perf event.
-define(UPROBE, "dtrace_red_zone/nop10").
-define(EVENT, "dtrace_red_zone:nop10").

suite() ->
    [{timetrap, {minutes, 10}}].

all() ->
    [the_library_keeps_nothing_below_the_stack_pointer, red_zone_under_bpftrace, red_zone_under_perf,
     red_zone_at_the_nop10].

init_per_suite(Config) ->
    Missing = [T || T <- ["cc", "objdump", "readelf"], os:find_executable(T) =:= false],
    case {erlang:system_info(system_architecture), Missing} of
        {"x86_64" ++ _, []} ->
            %% The programs' directory: bpftrace's parser takes no `@' in a
            %% path, which CT's log directories have (nonode@nohost).
            Dir = string:trim(os:cmd("mktemp -d /tmp/dtrace_red_zone.XXXXXX")),
            Site = dtrace_test_catalogue:site(),
            Programs = [{Form, build(Dir, Form, Bytes)} || {Form, Bytes} <- [{library, Site}, {nop5, ?NOP5}]],
            [{dir, Dir}, {site, Site}, {programs, Programs},
             {perf_cache, filename:join(?config(priv_dir, Config), "perf-buildid-cache")} | Config];
        {"x86_64" ++ _, _} ->
            case dtrace_test_tracer:in_ci() of
                true -> ct:fail("CI=true and ~s not installed", [lists:join(", ", Missing)]);
                false -> {skip, lists:flatten(io_lib:format("~s not installed", [lists:join(", ", Missing)]))}
            end;
        {Arch, _} ->
            {skip, "x86_64 only (the red zone and the kernel's optimized uprobes): " ++ Arch}
    end.

end_per_suite(Config) ->
    _ = file:del_dir_r(?config(dir, Config)),
    Config.

init_per_testcase(the_library_keeps_nothing_below_the_stack_pointer, Config) ->
    Config;
init_per_testcase(red_zone_under_bpftrace, Config) ->
    dtrace_test_tracer:with_tracer(bpftrace, Config);
init_per_testcase(_, Config) ->
    cleanup(),
    dtrace_test_tracer:with_tracer(perf, Config).

end_per_testcase(_, _Config) ->
    cleanup().

%% Removes the events the perf cases made.
cleanup() ->
    _ = dtrace_test_tracer:run("perf", ["probe", "-d", "sdt_dtrace_red_zone:*"]),
    _ = file:write_file("/sys/kernel/tracing/uprobe_events", "-:" ++ ?UPROBE ++ "\n", [append]),
    ok.

%% red_zone.c built with Bytes as its site, into Dir.
build(Dir, Form, Bytes) ->
    Exe = filename:join(Dir, "red_zone_" ++ atom_to_list(Form)),
    Site = ".byte " ++ lists:join(", ", [io_lib:format("0x~2.16.0b", [B]) || B <- Bytes]),
    %% From the checkout, not data_dir: run as one set from test/ (no
    %% --dir: make test-sid, test-trixie), rebar3 builds the suites of
    %% every group into one directory, without their data.
    Src = filename:join([dtrace_test_catalogue:repo_root(), "test", "root", "dtrace_red_zone_SUITE_data", "red_zone.c"]),
    case dtrace_test_tracer:run("cc", ["-O2", "-Wall", "-Wextra", "-DRZ_SITE=\"" ++ lists:flatten(Site) ++ "\"",
                                       Src, "-o", Exe]) of
        {0, []} -> Exe;
        {S, Out} -> ct:fail("cc ~s: exit ~p: ~p", [Src, S, Out])
    end.

%%--------------------------------------------------------------------

the_library_keeps_nothing_below_the_stack_pointer(Config) ->
    So = dtrace_test_catalogue:nif_path(),
    Site = ?config(site, Config),
    Locations = [L || #{provider := <<"erlang">>, location := L} <- dtrace_test_catalogue:notes(So)],
    ?assertEqual(1028, length(Locations)),
    %% The site bytes, read from the file: its sites' addresses equal their
    %% file offsets (dtrace_tracer_SUITE:layout_lets_tracers_resolve_probes).
    {ok, Bin} = file:read_file(So),
    ?assertEqual([], [L || L <- Locations, binary_to_list(binary:part(Bin, L, length(Site))) =/= Site]),
    Functions = functions(So),
    Holding = lists:usort([function_at(Functions, L) || L <- Locations]),
    Below = [{Name, I} || {_, Name, Code} <- Holding, I <- below_stack_pointer(Code)],
    ct:log("~b sites in ~b functions; instructions below the stack pointer: ~p",
           [length(Locations), length(Holding), Below]),
    ?assertEqual([], Below),
    %% The scan's control: the DOF is-enabled sites' functions keep their
    %% word below the stack pointer (their block is `nostack'), and the
    %% scan sees it.
    IsEnabled = [F || {_, Name, _} = F <- Functions, string:find(Name, "dof_is_enabled") =/= nomatch],
    Seen = [Name || {_, Name, Code} <- IsEnabled, below_stack_pointer(Code) =/= []],
    ct:log("~b of ~b DOF is-enabled functions keep data below the stack pointer, e.g. ~p",
           [length(Seen), length(IsEnabled), lists:sublist(Seen, 3)]),
    ?assertNotEqual([], Seen).

%% [{Start, Name, [{Address, Instruction}]}] of So's text, by address
%% (objdump -d, AT&T syntax).
functions(So) ->
    {0, Lines} = dtrace_test_tracer:run("objdump", ["-d", "--no-show-raw-insn", So]),
    functions(Lines, []).

functions([Line | Rest], Acc) ->
    case re:run(Line, "^([0-9a-f]+) <(.*)>:$", [{capture, all_but_first, list}]) of
        {match, [A, Name]} -> functions(Rest, [{list_to_integer(A, 16), Name, []} | Acc]);
        nomatch ->
            case {re:run(Line, "^\\s+([0-9a-f]+):\\t(.*)$", [{capture, all_but_first, list}]), Acc} of
                {{match, [A, I]}, [{S, N, Code} | Acc1]} ->
                    functions(Rest, [{S, N, [{list_to_integer(A, 16), string:trim(I)} | Code]} | Acc1]);
                _ -> functions(Rest, Acc)
            end
    end;
functions([], Acc) ->
    lists:reverse([{S, N, lists:reverse(Code)} || {S, N, Code} <- Acc]).

function_at(Functions, Address) ->
    hd([F || {S, _, _} = F <- lists:reverse(Functions), S =< Address]).

%% The instructions of Code (a function, in order) with a memory operand
%% below the stack pointer: `-N(%rsp)', but for `lea -N(%rsp),%rsp' (the
%% DOF stack copy's own allocation), or `-N(%rbp)' deeper than what the
%% function reserved below its frame pointer (pushes and subtractions from
%% %rsp after `mov %rsp,%rbp'). Straight-line accounting: the sites'
%% functions reserve their frame in their prologue.
below_stack_pointer(Code) ->
    below(Code, none, []).

below([{A, I} | Rest], Depth, Acc) ->
    Disp = fun(Reg) ->
                   case re:run(I, "-0x([0-9a-f]+)\\(%" ++ Reg ++ "\\)", [{capture, all_but_first, list}]) of
                       {match, [D]} -> list_to_integer(D, 16);
                       nomatch -> none
                   end
           end,
    Imm = fun(Re) ->
                  case re:run(I, Re, [{capture, all_but_first, list}]) of
                      {match, [D]} -> list_to_integer(D, 16);
                      nomatch -> none
                  end
          end,
    FramePointer = re:run(I, "^mov\\s+%rsp,%rbp$") =/= nomatch,
    Depth1 = case {I, Depth} of
                 _ when FramePointer -> 0;
                 {_, none} -> none;
                 {"push" ++ _, D} -> D + 8;
                 {"pop" ++ _, D} -> D - 8;
                 {_, D} ->
                     case {Imm("^sub\\s+\\$0x([0-9a-f]+),%rsp$"), Imm("^add\\s+\\$0x([0-9a-f]+),%rsp$"),
                           Imm("^lea\\s+-0x([0-9a-f]+)\\(%rsp\\),%rsp$"), Imm("^lea\\s+0x([0-9a-f]+)\\(%rsp\\),%rsp$")} of
                         {N, _, _, _} when is_integer(N) -> D + N;
                         {_, N, _, _} when is_integer(N) -> D - N;
                         {_, _, N, _} when is_integer(N) -> D + N;
                         {_, _, _, N} when is_integer(N) -> D - N;
                         _ -> D
                     end
             end,
    Bad = case {Disp("rsp"), Disp("rbp"), Depth} of
              {Rsp, _, _} when is_integer(Rsp) -> re:run(I, "^lea\\s+-0x[0-9a-f]+\\(%rsp\\),%rsp$") =:= nomatch;
              {_, Rbp, none} when is_integer(Rbp) -> true;
              {_, Rbp, Reserved} when is_integer(Rbp) -> Rbp > Reserved;
              _ -> false
          end,
    below(Rest, Depth1, case Bad of true -> [{A, I} | Acc]; false -> Acc end);
below([], _, Acc) ->
    lists:reverse(Acc).

%%--------------------------------------------------------------------

red_zone_under_bpftrace(Config) ->
    Version = string:trim(os:cmd("bpftrace --version")),
    Runs = [{Form, bpftrace_run(Exe)} || {Form, Exe} <- ?config(programs, Config)],
    ct:log("~s: ~p", [Version, Runs]),
    check(Config, Runs).

%% The leaf under bpftrace -c counting its probe: the program's figures
%% and bpftrace's count as `hits'.
bpftrace_run(Exe) ->
    {0, Lines} = dtrace_test_tracer:run("bpftrace", ["-e", "usdt:" ++ Exe ++ ":dtrace_red_zone:site { @n = count(); }",
                                                     "-c", Exe ++ " " ++ integer_to_list(?CALLS)]),
    (figures(Lines))#{hits => dtrace_test_tracer:bpftrace_map(<<"@n">>, Lines)}.

red_zone_under_perf(Config) ->
    Cache = ?config(perf_cache, Config),
    Perf = fun(Args) -> dtrace_test_tracer:run("perf", ["--buildid-dir", Cache | Args]) end,
    Runs = [{Form, begin
                       {0, _} = Perf(["buildid-cache", "--add", Exe]),
                       {0, Added} = Perf(["probe", "-x", Exe, "sdt_dtrace_red_zone:site"]),
                       [Event] = [binary_to_list(E) || L <- Added,
                                                       {match, [E]} <- [re:run(L, "^\\s+(sdt_dtrace_red_zone:\\S+) \\(on ",
                                                                               [{capture, all_but_first, binary}])]],
                       R = perf_run(Event, Exe),
                       cleanup(),
                       R
                   end} || {Form, Exe} <- ?config(programs, Config)],
    ct:log("~p", [Runs]),
    check(Config, Runs).

%% The leaf under perf stat counting Event: the program's figures and
%% perf's count as `hits'.
perf_run(Event, Exe) ->
    {0, Lines} = dtrace_test_tracer:run("perf", ["stat", "-x", ",", "-e", Event, "--", Exe, integer_to_list(?CALLS)]),
    Hits = [binary_to_integer(N) || L <- Lines, [N, _, E | _] <- [binary:split(L, <<",">>, [global])],
                                    E =:= list_to_binary(Event)],
    case Hits of
        [H] -> (figures(Lines))#{hits => H};
        _ -> ct:fail("no count for ~s in perf's output: ~p", [Event, Lines])
    end.

%% The library's form: every call found its values, the tracer counted
%% every hit, with its breakpoint on the leading nop. The control: where
%% the kernel rewrote its site into a call, the check saw it corrupt.
check(Config, Runs) ->
    Site = ?config(site, Config),
    [_ | Rest] = Site,
    Library = proplists:get_value(library, Runs),
    ?assertMatch(#{calls := ?CALLS, hits := ?CALLS, bad_calls := 0, bad_slots := 0}, Library),
    ?assertEqual([16#cc | Rest], lists:sublist(maps:get(site, Library), length(Site))),
    Control = proplists:get_value(nop5, Runs),
    ?assertMatch(#{calls := ?CALLS, hits := ?CALLS}, Control),
    case maps:get(site, Control) of
        [16#e8 | _] ->
            %% Optimized into a call after the first hit (through int3).
            ?assert(maps:get(bad_calls, Control) > 0),
            ct:comment("control: the kernel optimized the 5-byte nop and ~b calls saw their red zone "
                       "overwritten; the library's site: none", [maps:get(bad_calls, Control)]);
        Other ->
            ?assertEqual(0, maps:get(bad_calls, Control)),
            ct:comment("control: this kernel (~s) did not optimize the 5-byte nop (~p): no corruption to "
                       "detect here", [string:trim(os:cmd("uname -r")), Other])
    end.

%% The program's "key value" lines: #{calls, bad_calls, bad_slots, site
%% => [Byte]}.
figures(Lines) ->
    maps:from_list(
      [case K of
           <<"site">> -> {site, [binary_to_integer(B, 16) || B <- binary:split(V, <<" ">>, [global, trim_all])]};
           _ -> {binary_to_atom(K), binary_to_integer(V)}
       end || L <- Lines, [K, V] <- [binary:split(L, <<" ">>)],
              lists:member(K, [<<"calls">>, <<"bad_calls">>, <<"bad_slots">>, <<"site">>])]).

%%--------------------------------------------------------------------

red_zone_at_the_nop10(Config) ->
    Exe = proplists:get_value(library, ?config(programs, Config)),
    Site = ?config(site, Config),
    %% The nop10: one past the note's location, at its file offset.
    [#{location := Location}] = [N || #{provider := <<"dtrace_red_zone">>} = N <- dtrace_test_catalogue:notes(Exe)],
    Offset = file_offset(Exe, Location + 1),
    Def = io_lib:format("p:~s ~s:0x~.16b~n", [?UPROBE, Exe, Offset]),
    ok = file:write_file("/sys/kernel/tracing/uprobe_events", Def, [append]),
    R = perf_run(?EVENT, Exe),
    ct:log("~s~p", [Def, R]),
    ?assertMatch(#{calls := ?CALLS, bad_calls := 0, bad_slots := 0}, R),
    case R of
        #{hits := 0} ->
            ?assertEqual(Site, lists:sublist(maps:get(site, R), length(Site))),
            ct:comment("this kernel (~s) refuses a probe on the nop10: no optimization of it to check",
                       [string:trim(os:cmd("uname -r"))]);
        #{hits := Hits, site := Now} ->
            ?assertEqual(?CALLS, Hits),
            ct:comment("the kernel probed the nop10 (site now ~p) and left the red zone alone", [Now])
    end.

%% The file offset of Address in Exe, through its loaded segment.
file_offset(Exe, Address) ->
    {0, Lines} = dtrace_test_tracer:run("readelf", ["-lW", Exe]),
    [Offset] = [Address - VA + Off
                || L <- Lines,
                   {match, [O, V, S]} <- [re:run(L, "^\\s+LOAD\\s+0x([0-9a-f]+) 0x([0-9a-f]+) 0x[0-9a-f]+ 0x[0-9a-f]+ "
                                                 "0x([0-9a-f]+) R E", [{capture, all_but_first, list}])],
                   {Off, VA, Size} <- [{list_to_integer(O, 16), list_to_integer(V, 16), list_to_integer(S, 16)}],
                   Address >= VA, Address < VA + Size],
    Offset.
