#!/usr/bin/env escript
%%! -noshell
%%% The figures the docs quote come from the committed run of `make bench`:
%%% BENCHMARKS.md ends with a table "Figures quoted in the docs" (key,
%%% value), and the docs mark each quoted figure
%%% <!--fig:KEY-->VALUE<!--/fig--> (the comments do not show when the
%%% markdown is rendered).
%%%
%%%   scripts/figures.escript check   every marked figure in README.md,
%%%                                   CONTRIBUTING.md and docs/*.md equals
%%%                                   the table's value (make test)
%%%   scripts/figures.escript write   rewrites them from the table (make
%%%                                   figures, after make bench)
%%%
%%% Run from the checkout's root. Exits 1 listing every mismatch or
%%% unknown key.
-mode(compile).

main([Mode]) when Mode =:= "check"; Mode =:= "write" ->
    Table = table("BENCHMARKS.md"),
    Files = ["README.md", "CONTRIBUTING.md"] ++ lists:sort(filelib:wildcard("docs/*.md")),
    Problems = lists:append([file(F, Table, Mode) || F <- Files, filelib:is_regular(F)]),
    case Problems of
        [] ->
            io:format("figures: ~s: ~b marked figures in ~b files, all from BENCHMARKS.md~n",
                      [Mode, count(Files), length(Files)]);
        _ ->
            [io:format(standard_error, "~s~n", [P]) || P <- Problems],
            io:format(standard_error, "figures: ~b problem(s); `make figures` rewrites the values "
                                      "from BENCHMARKS.md~n", [length(Problems)]),
            halt(1)
    end;
main(_) ->
    io:format(standard_error, "usage: scripts/figures.escript check|write~n", []),
    halt(2).

%% #{Key => Value} from the table after the heading.
table(File) ->
    {ok, Text} = file:read_file(File),
    case binary:split(Text, <<"## Figures quoted in the docs">>) of
        [_, Rest] ->
            maps:from_list([{K, V} || Line <- binary:split(Rest, <<"\n">>, [global]),
                                      [<<>>, K0, V0, <<>>] <- [binary:split(Line, <<"|">>, [global])],
                                      K <- [string:trim(K0)], V <- [string:trim(V0)],
                                      K =/= <<"key">>, binary:first(K) =/= $-]);
        [_] ->
            io:format(standard_error, "~s has no \"Figures quoted in the docs\" table: run make bench~n", [File]),
            halt(1)
    end.

-define(RE, "<!--fig:([a-z0-9_]+)-->(.*?)<!--/fig-->").

file(File, Table, Mode) ->
    {ok, Text} = file:read_file(File),
    Marks = case re:run(Text, ?RE, [global, {capture, all, binary}]) of
                {match, M} -> M;
                nomatch -> []
            end,
    Problems = [problem(File, K, V, Table) || [_, K, V] <- Marks],
    case Mode of
        "check" ->
            [P || P <- Problems, P =/= ok];
        "write" ->
            Unknown = [P || [_, K, _] <- Marks, not maps:is_key(K, Table),
                            P <- [io_lib:format("~s: unknown figure ~s", [File, K])]],
            New = rewrite(Text, Table),
            ok = case New =:= Text of true -> ok; false -> file:write_file(File, New) end,
            Unknown
    end.

%% Text with each known marked figure's value replaced by the table's (by
%% positions: re:replace/4 takes a fun only from OTP 27 on).
rewrite(Text, Table) ->
    case re:run(Text, ?RE, [global, {capture, all, index}]) of
        nomatch ->
            Text;
        {match, Ms} ->
            {Parts, Last} =
                lists:foldl(fun([{S, L}, {KS, KL}, _], {Acc, From}) ->
                                    Key = binary:part(Text, KS, KL),
                                    Mark = case maps:find(Key, Table) of
                                               {ok, V} -> [<<"<!--fig:">>, Key, <<"-->">>, V, <<"<!--/fig-->">>];
                                               error -> binary:part(Text, S, L)
                                           end,
                                    {[Mark, binary:part(Text, From, S - From) | Acc], S + L}
                            end, {[], 0}, Ms),
            iolist_to_binary(lists:reverse([binary:part(Text, Last, byte_size(Text) - Last) | Parts]))
    end.

problem(File, K, V, Table) ->
    case maps:find(K, Table) of
        {ok, V} -> ok;
        {ok, Want} -> io_lib:format("~s: figure ~s is ~s, BENCHMARKS.md says ~s", [File, K, V, Want]);
        error -> io_lib:format("~s: unknown figure ~s (not in BENCHMARKS.md's table)", [File, K])
    end.

count(Files) ->
    lists:sum([case file:read_file(F) of
                   {ok, T} -> case re:run(T, ?RE, [global]) of {match, M} -> length(M); nomatch -> 0 end;
                   _ -> 0
               end || F <- Files]).
