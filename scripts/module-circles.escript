#!/usr/bin/env escript
%%% The Erlang application's modules call each other one way, down the
%%% layers ARCHITECTURE.md's "Layers" lists: this fails, naming each call,
%%% on a circle (a strongly connected component of more than one module),
%%% on a call up a layer, and on a module no layer holds. The Rust crate's
%%% counterpart (circles only) is native/dtrace_nif/src/layering.rs.
%%%   escript scripts/module-circles.escript EBIN
%%%
%%% The calls: xref's, module to module; and the VM's on a module's behalf,
%%% which no call graph shows: a module that names a tracer module M calls
%%% M (the VM calls M:enabled/3 and M:trace/5 for the tracing it set).
%%% "Names" is read from the abstract code (debug_info): a tuple
%%% {tracer, M, _} (erlang:trace/3's flag), {meta, M, _}
%%% (erlang:trace_pattern/3's) or a call trace:session_create(_, {M, _}, _),
%%% with M an atom (macros are expanded; a tracer held in a variable is not
%%% seen).
%%%
%%% The layer order is read from ARCHITECTURE.md (beside this script's
%%% directory), not written here: it is written once, where readers find
%%% the design, and the text cannot drift from the code. Its numbered
%%% list, bottom first, names modules (`dtrace_nif') and directories of
%%% src/ (`src/vm/', matched against each module's source path).
-mode(compile).

main([Ebin]) ->
    Layers = layers(filename:join(filename:dirname(filename:dirname(escript:script_name())),
                                  "ARCHITECTURE.md")),
    {ok, _} = xref:start(?MODULE),
    xref:set_default(?MODULE, [{warnings, false}, {verbose, false}]),
    {ok, Modules} = xref:add_directory(?MODULE, Ebin),
    {ok, Calls} = xref:q(?MODULE, "ME || AM"),
    Beams = [{M, filename:join(Ebin, atom_to_list(M) ++ ".beam")} || M <- Modules],
    Found = [{{A, B}, Why} || {A, Beam} <- Beams, {B, Why} <- tracers(Beam), A =/= B, lists:member(B, Modules)],
    %% One tracer call per pair of modules: its first place.
    Named = [{A, B, Why} || {{A, B}, Why} <- lists:ukeysort(1, Found)],
    Edges = [{A, B, "a call"} || {A, B} <- Calls, A =/= B]
        ++ [E || {A, B, _} = E <- Named, not lists:member({A, B}, Calls)],
    Layer = maps:from_list([{M, layer(M, Beam, Layers)} || {M, Beam} <- Beams]),
    Unplaced = [M || M <- Modules, maps:get(M, Layer) =:= none],
    Up = [E || {A, B, _} = E <- Edges, is_integer(maps:get(A, Layer)), is_integer(maps:get(B, Layer)),
               maps:get(A, Layer) < maps:get(B, Layer)],
    Circles = circles(Edges),
    [io:format(standard_error, "module-circles: ~p is in no layer of ARCHITECTURE.md's Layers~n", [M])
     || M <- Unplaced],
    [io:format(standard_error, "module-circles: up a layer: ~p (~b) -> ~p (~b): ~s~n",
               [A, maps:get(A, Layer), B, maps:get(B, Layer), Why]) || {A, B, Why} <- Up],
    [io:format(standard_error, "module-circles: a circle among ~p:~n~s",
               [C, [io_lib:format("  ~p -> ~p: ~s~n", [A, B, Why]) || {A, B, Why} <- Edges,
                                                                 lists:member(A, C), lists:member(B, C)]])
     || C <- Circles],
    case {Unplaced, Up, Circles} of
        {[], [], []} when length(Modules) > 10, length(Edges) > 10 ->
            io:format("module-circles: ~b modules in ~b layers, ~b calls between them (~b by tracer "
                      "modules), none up a layer, no circle~n",
                      [length(Modules), length(Layers), length(Edges), length(Named)]);
        {[], [], []} ->
            io:format(standard_error, "module-circles: only ~b modules in ~s~n", [length(Modules), Ebin]),
            halt(1);
        _ ->
            halt(1)
    end;
main(_) ->
    io:format(standard_error, "usage: escript scripts/module-circles.escript EBIN~n", []),
    halt(2).

%% [[Entry]], bottom first: the numbered list of the section "## Layers",
%% each item's `quoted' words (an item may continue on indented lines).
layers(File) ->
    {ok, Text} = file:read_file(File),
    [Section | _] = string:split(case string:split(Text, <<"\n## Layers\n">>) of
                                     [_, After] -> After;
                                     [_] -> <<>>
                                 end, <<"\n## ">>),
    Items = lists:foldl(fun(<<D, _/binary>> = Line, Acc) when D >= $1, D =< $9 -> [Line | Acc];
                           (<<" ", _/binary>> = Line, [Item | Acc]) -> [<<Item/binary, Line/binary>> | Acc];
                           (_, Acc) -> Acc
                        end, [], string:split(Section, <<"\n">>, all)),
    Quoted = fun(I) -> {match, Ws} = re:run(I, <<"`([^`]+)`">>, [global, {capture, all_but_first, list}]), Ws end,
    case [[W || [W] <- Quoted(I)] || I <- lists:reverse(Items), re:run(I, <<"^[1-9][0-9]*\\. .*`">>) =/= nomatch] of
        [] -> io:format(standard_error, "module-circles: no numbered list in ~s's Layers~n", [File]), halt(1);
        Layers -> Layers
    end.

%% The layer (1, bottom, ...) whose list names module M or the src/
%% directory of its source; none when no layer does.
layer(M, Beam, Layers) ->
    {ok, {M, [{compile_info, Info}]}} = beam_lib:chunks(Beam, [compile_info]),
    Dir = filename:dirname(proplists:get_value(source, Info, "")),
    Hits = [N || {N, Entries} <- lists:enumerate(Layers), E <- Entries,
                 E =:= atom_to_list(M) orelse
                     (lists:suffix("/", E) andalso lists:suffix("/" ++ string:trim(E, trailing, "/"), Dir))],
    case Hits of
        [N | _] -> N;
        [] -> none
    end.

%% {Module, Why} for each tracer module the beam's abstract code names.
tracers(Beam) ->
    case beam_lib:chunks(Beam, [abstract_code]) of
        {ok, {_, [{abstract_code, {raw_abstract_v1, Forms}}]}} -> lists:reverse(named(Forms, []));
        _ -> io:format(standard_error, "module-circles: ~s has no debug_info~n", [Beam]), halt(1)
    end.

named({tuple, L, [{atom, _, Tag}, {atom, _, M}, _]} = T, Acc) when Tag =:= tracer; Tag =:= meta ->
    deeper(T, [{M, io_lib:format("the tracer {~p, ~p, _}, line ~p", [Tag, M, line(L)])} | Acc]);
named({call, L, {remote, _, {atom, _, trace}, {atom, _, session_create}}, [_, {tuple, _, [{atom, _, M}, _]}, _]} = T,
      Acc) ->
    deeper(T, [{M, io_lib:format("the tracer of trace:session_create/3, line ~p", [line(L)])} | Acc]);
named(T, Acc) ->
    deeper(T, Acc).

deeper(T, Acc) when is_tuple(T) -> lists:foldl(fun named/2, Acc, tuple_to_list(T));
deeper(L, Acc) when is_list(L) -> lists:foldl(fun named/2, Acc, L);
deeper(_, Acc) -> Acc.

line(Anno) -> erl_anno:line(Anno).

circles(Edges) ->
    G = digraph:new(),
    _ = [begin
             digraph:add_vertex(G, A),
             digraph:add_vertex(G, B),
             digraph:add_edge(G, A, B)
         end || {A, B, _} <- Edges],
    [lists:sort(C) || C <- digraph_utils:strong_components(G), length(C) > 1].
