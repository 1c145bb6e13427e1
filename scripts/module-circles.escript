#!/usr/bin/env escript
%%% The Erlang application's modules call each other one way: this reads
%%% the compiled modules' calls (xref, module level) and fails, naming each
%%% call in it, on a circle (a strongly connected component of more than
%%% one module). ARCHITECTURE.md, "Layers", gives the order. The Rust
%%% crate's counterpart is native/dtrace_nif/src/layering.rs.
%%%   escript scripts/module-circles.escript EBIN
-mode(compile).

main([Ebin]) ->
    {ok, _} = xref:start(?MODULE),
    xref:set_default(?MODULE, [{warnings, false}, {verbose, false}]),
    {ok, Modules} = xref:add_directory(?MODULE, Ebin),
    {ok, Calls} = xref:q(?MODULE, "ME || AM"),
    Edges = [{A, B} || {A, B} <- Calls, A =/= B],
    G = digraph:new(),
    _ = [begin
             digraph:add_vertex(G, A),
             digraph:add_vertex(G, B),
             digraph:add_edge(G, A, B)
         end || {A, B} <- Edges],
    case [C || C <- digraph_utils:strong_components(G), length(C) > 1] of
        [] when length(Modules) > 10, length(Edges) > 10 ->
            io:format("module-circles: ~b modules, ~b calls between them, no circle~n",
                      [length(Modules), length(Edges)]);
        [] ->
            io:format(standard_error, "module-circles: only ~b modules in ~s~n", [length(Modules), Ebin]),
            halt(1);
        Circles ->
            _ = [io:format(standard_error, "module-circles: a circle among ~p:~n~s", [lists:sort(C),
                  [io_lib:format("  ~p calls ~p~n", [A, B]) || {A, B} <- Edges,
                                                             lists:member(A, C), lists:member(B, C)]])
                 || C <- Circles],
            halt(1)
    end;
main(_) ->
    io:format(standard_error, "usage: escript scripts/module-circles.escript EBIN~n", []),
    halt(2).
