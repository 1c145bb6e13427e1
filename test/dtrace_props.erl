%%% PropEr properties: any term, in any position, of every public function
%%% of dtrace, gives a documented result (jiffy's "any term in, no crash").
%%%
%%% One test case draws ten terms and calls every public function with
%%% them, rotated so that each term lands in a different position for each
%%% function: ?CALLS_PER_CASE calls per case.
-module(dtrace_props).

-include_lib("proper/include/proper.hrl").

-export([prop_any_term_any_position/0, run/1, calls_per_case/0, probe_term/0, huge/0, iolist_like/0]).

%% Numbered probes the enabled runs attach (bpftrace 0.17 cannot attach
%% all 951 at once): labels the generator favours.
-define(ATTACHED_LABELS, 31).

%% Runs the property for at least Calls calls; returns the number of calls
%% made, or fails with the counterexample.
run(Calls) ->
    Cases = (Calls + calls_per_case() - 1) div calls_per_case(),
    case proper:quickcheck(prop_any_term_any_position(),
                           [{numtests, Cases}, quiet, {max_size, 40}]) of
        true -> Cases * calls_per_case();
        false -> erlang:error({counterexample, proper:counterexample()})
    end.

calls_per_case() ->
    length(functions()).

functions() ->
    [{F, A} || {F, A} <- dtrace:module_info(exports), F =/= module_info].

prop_any_term_any_position() ->
    ?FORALL(Terms, vector(10, probe_term()),
            begin
                Results = [{F, Args, call(F, Args)}
                           || {I, {F, A}} <- lists:enumerate(functions()),
                              Args <- [take(A, rotate(I, Terms))]],
                Bad = [R || {F, Args, Result} = R <- Results, not documented(F, Args, Result)],
                ?WHENFAIL(io:format("undocumented results: ~P~n", [Bad, 30]), Bad =:= [])
            end).

call(F, Args) ->
    try apply(dtrace, F, Args) of
        Result -> {ok, Result}
    catch
        Class:Reason:Stack -> {Class, Reason, hd(Stack)}
    end.

rotate(N, L) ->
    {A, B} = lists:split(N rem length(L), L),
    B ++ A.

take(N, L) ->
    lists:sublist(L, N).

%% What each function's documentation allows.
documented(available, [], {ok, B}) -> is_boolean(B);
documented(is_enabled, _, {ok, B}) -> is_boolean(B);
documented(F, _, {ok, R}) when F =:= p; F =:= pn; F =:= user_trace_i4s4; F =:= user_trace_s1 ->
    lists:member(R, [true, false, error, badarg]);
%% p/5..8 and pn/6..9 need their integers first: function_clause otherwise.
documented(p, Args, {error, function_clause, {dtrace, p, _, _}}) -> length(Args) >= 5;
documented(pn, Args, {error, function_clause, {dtrace, pn, _, _}}) -> length(Args) >= 6;
documented(put_tag, _, {ok, R}) -> R =:= undefined orelse is_binary(R);
documented(put_tag, _, {error, badarg, _}) -> true;
documented(F, [], {ok, R}) when F =:= get_tag; F =:= get_tag_data ->
    R =:= undefined orelse is_binary(R);
documented(spread_tag, _, {ok, {Flags, Tag}}) ->
    is_integer(Flags) andalso Flags >= 0 andalso (is_binary(Tag) orelse Tag =:= []);
documented(spread_tag, _, {error, badarg, _}) -> true;
documented(restore_tag, _, {ok, true}) -> true;
documented(restore_tag, _, {error, badarg, _}) -> true;
%% The internal NIFs behind dtrace_file.
documented(efile_enabled, [], {ok, B}) -> is_boolean(B);
documented(efile_entry, _, {ok, Tag}) -> is_integer(Tag) andalso Tag >= 0;
documented(efile_return, _, {ok, ok}) -> true;
documented(_, _, _) -> false.

%%% Generators

%% Terms a probe argument may meet, weighted towards the ones that reach
%% conversion code: labels of attached probes, iolist-like shapes.
probe_term() ->
    frequency([{6, integer(0, ?ATTACHED_LABELS)},
               {3, any_term()},
               {3, iolist_like()},
               {2, large_integer()},
               {1, oneof([undef, undefined, [], <<>>, 1.5, -0.0])},
               {1, oneof([exactly(T) || T <- [self(), make_ref(), hd(erlang:ports()),
                                              fun() -> ok end, fun erlang:node/0,
                                              #{a => [1]}, {x, "y"}]])},
               {1, huge()}]).

%% Like PropEr's any(), but its atoms come from a fixed pool: any() and
%% atom() make new atoms, and 10 million calls (make soak) would fill the
%% VM's atom table (1,048,576 atoms), which ends any VM.
any_term() ->
    ?SIZED(S, any_term(S)).

any_term(S) when S =< 1 ->
    oneof([integer(), float(), binary(), bitstring(), known_atom(), char(),
           exactly(self()), exactly(make_ref())]);
any_term(S) ->
    frequency([{4, any_term(0)},
               {1, ?LAZY(?LET(N, range(0, 5), vector(N, any_term(S div 4))))},
               {1, ?LAZY(?LET(N, range(0, 4), ?LET(L, vector(N, any_term(S div 4)),
                                                   list_to_tuple(L))))},
               {1, ?LAZY(?LET(N, range(0, 3), ?LET(L, vector(N, {any_term(S div 4),
                                                                 any_term(S div 4)}),
                                                   maps:from_list(L))))},
               {1, ?LAZY(?LET({H, T}, {any_term(S div 2), any_term(0)}, [H | T]))}]).

known_atom() ->
    oneof([a, undef, undefined, true, false, nil, ok, error, badarg, '', 'with space',
           '\x{444}\x{443}', 'dtrace']).

large_integer() ->
    oneof([integer(-1 bsl 70, -1 bsl 63), integer(1 bsl 63 - 2, 1 bsl 63 + 2),
           integer(-1 bsl 63 - 2, -1 bsl 63 + 2), integer(1 bsl 63, 1 bsl 200),
           integer(951, 1100), integer(-5, -1)]).

%% Nested iolist-like terms, at most 4 levels deep, lists of at most 6
%% elements (PropEr's list/1 would take its length from the global size at
%% every level).
iolist_like() ->
    iolist_like(4).

iolist_like(0) ->
    oneof([byte(), binary(), bitstring(), integer(256, 300), integer(-3, -1), []]);
iolist_like(Depth) ->
    frequency([{3, ?LAZY(?LET(N, range(0, 6), vector(N, iolist_like(Depth - 1))))},
               {1, ?LAZY(?LET({H, T}, {iolist_like(Depth - 1),
                                       oneof([binary(), [], byte(), known_atom()])},
                              [H | T]))},
               {1, ?LET(B, binary(), sub_binary(B))},
               {2, iolist_like(0)}]).

%% A sub-binary: a part of a larger binary.
sub_binary(B) ->
    Big = <<0, B/binary, 255>>,
    binary:part(Big, 1, byte_size(B)).

%% Large shapes, built once per VM: strings at and around the limit, a
%% 1 MB iolist, a list nested 10,000 deep. Wrapped in exactly/1: PropEr
%% would otherwise read a list as a list of types, element by element.
huge() ->
    oneof([exactly(T) || T <- huge_terms()]).

huge_terms() ->
    [persistent(s1024, fun() -> lists:duplicate(1024, $x) end),
           persistent(s1025, fun() -> lists:duplicate(1025, $x) end),
           persistent(b1024, fun() -> binary:copy(<<"y">>, 1024) end),
           persistent(b1025, fun() -> binary:copy(<<"y">>, 1025) end),
           persistent(mb, fun() -> lists:duplicate(1024, binary:copy(<<"z">>, 1024)) end),
           persistent(deep, fun() -> lists:foldl(fun(_, A) -> [A, $a] end, [],
                                                   lists:seq(1, 10000)) end)].

persistent(Key, Make) ->
    K = {?MODULE, Key},
    case persistent_term:get(K, undefined) of
        undefined ->
            V = Make(),
            persistent_term:put(K, V),
            V;
        V -> V
    end.
