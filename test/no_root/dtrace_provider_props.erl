%%% PropEr properties for dtrace_provider: any term, in any position, of
%%% every public function, gives exactly the result its documentation
%%% states, computed here by a model.
%%%
%%% The terms are dtrace_props's (integers, iolists, huge and deep terms,
%%% anything) plus real handles: a live provider, a probe handle of each of
%%% its probes, a deleted provider and its probe handle, and a victim
%%% provider made anew for each case, which delete/1 may delete while the
%%% case runs (the model follows). Probe names of the fixtures, argument
%%% lists of the right length and provider definitions (valid and not) are
%%% drawn often, so that conversion and every error of new/2 are reached.
%%% delete/1 never gets the live provider: the enabled run needs it alive
%%% (deleting it is dtrace_provider_SUITE's delete case).
-module(dtrace_provider_props).

-include_lib("proper/include/proper.hrl").

-export([run/2, fixtures/0, is_reason/1, expected_new/2, live_probes/0, calls_per_case/0]).

-define(LIVE, dtrace_props_live).
-define(VICTIM, dtrace_props_victim).

%% The live provider's probes (the enabled run traces all three).
live_probes() ->
    [{request__start, [int, string]},
     {nothing, []},
     {all, [int, string, int, string, int, string, string, int, string, int, string, int]}].

%% Makes the fixtures (in the node that runs the property; they live as
%% long as the calling process keeps the map): the live provider, its
%% probe handles, a deleted provider and its probe handle.
fixtures() ->
    {ok, Live} = dtrace_provider:new(?LIVE, live_probes()),
    {ok, Dead} = dtrace_provider:new(dtrace_props_dead, [{gone, [int]}]),
    DeadProbe = dtrace_provider:probe(Dead, gone),
    ok = dtrace_provider:delete(Dead),
    #{live => Live,
      live_probes => [dtrace_provider:probe(Live, N) || {N, _} <- live_probes()],
      dead => Dead, dead_probe => DeadProbe}.

%% Runs the property for at least Calls calls with Fixtures; Traced says
%% whether a tracer listens on every probe of the live provider (then its
%% calls must return true). Returns the number of calls made, or fails
%% with the counterexample.
run(Fixtures, Traced) ->
    run(Fixtures, Traced, 10000).

run(Fixtures, Traced, Calls) ->
    PerCase = calls_per_case(),
    Cases = (Calls + PerCase - 1) div PerCase,
    Prop = prop_any_term(Fixtures, Traced),
    case proper:quickcheck(Prop, [{numtests, Cases}, quiet, {max_size, 30}]) of
        true -> Cases * PerCase;
        false -> erlang:error({counterexample, proper:counterexample()})
    end.

%% Every exported function, to be sure a new one is not left out.
functions() ->
    Exports = lists:sort([FA || {F, _} = FA <- dtrace_provider:module_info(exports), F =/= module_info]),
    Exports = [{delete, 1}, {fire, 2}, {fire, 3}, {is_enabled, 1}, {is_enabled, 2}, {is_enabled, 3},
               {new, 2}, {path, 1}, {probe, 2}],
    Exports.

%% Calls per case: every function once with drawn terms, then the eleven
%% well-formed calls of wellformed_calls/1 (two of them fire a live probe).
calls_per_case() ->
    length(functions()) + 11.

prop_any_term(Fixtures, Traced) ->
    ?FORALL({Terms, Wellformed}, {vector(10, term(Fixtures)), wellformed_calls(Fixtures)},
            begin
                {ok, Victim} = dtrace_provider:new(?VICTIM, [{v, [string, int]}]),
                VictimProbe = dtrace_provider:probe(Victim, v),
                Model = model(Fixtures#{victim => Victim, victim_probe => VictimProbe}, Traced),
                Terms1 = [victim(T, Victim, VictimProbe) || T <- Terms],
                Live = [maps:get(live, Fixtures) | maps:get(live_probes, Fixtures)],
                Calls = [spare_live(Live, Victim, {F, dtrace_props:take(A, dtrace_props:rotate(I, Terms1))})
                         || {I, {F, A}} <- lists:enumerate(functions())]
                    ++ [{F, [victim(T, Victim, VictimProbe) || T <- Args]} || {F, Args} <- Wellformed],
                {Bad, _} = lists:foldl(fun check/2, {[], Model}, Calls),
                ok = dtrace_provider:delete(Victim),
                ?WHENFAIL(io:format("undocumented results: ~P~n", [Bad, 40]), Bad =:= [])
            end).

%% The generator draws `victim' atoms; they stand for the case's victim.
victim(victim, Victim, _) -> Victim;
victim(victim_probe, _, VictimProbe) -> VictimProbe;
victim(T, _, _) -> T.

%% delete/1 deletes the victim where it would delete a live fixture.
spare_live(Live, Victim, {delete, [H]} = Call) ->
    case lists:member(H, Live) of
        true -> {delete, [Victim]};
        false -> Call
    end;
spare_live(_, _, Call) ->
    Call.

%% Makes call {F, Args}, compares with the model's answer, and lets the
%% model see it (a delete).
check({F, Args} = Call, {Bad, Model}) ->
    Expected = expected(F, Args, Model),
    Result = try apply(dtrace_provider, F, Args) of
                 R -> {ok, R}
             catch
                 Class:Reason:Stack -> {Class, Reason, hd(Stack)}
             end,
    OK = matches(Expected, Result),
    %% A provider new/2 made is deleted at once: the next case may make it again.
    case Result of
        {ok, {ok, Handle}} when F =:= new -> ok = dtrace_provider:delete(Handle);
        _ -> ok
    end,
    {case OK of true -> Bad; false -> [{Call, Expected, Result} | Bad] end,
     seen(F, Args, Result, Model)}.

matches({value, V}, {ok, V}) -> true;
matches(handle, {ok, H}) -> is_reference(H);
matches({new_ok, _}, {ok, {ok, H}}) -> is_reference(H) andalso is_binary(dtrace_provider:path(H));
matches({path, P}, {ok, P}) -> true;
matches(badarg, {error, badarg, {dtrace_nif, _, _, _}}) -> true;
matches(_, _) -> false.

%%% The model

%% What the model knows: each fixture handle's provider, whether that
%% provider is deleted, and whether a tracer listens on the live one.
model(#{live := Live, live_probes := LiveProbes, dead := Dead, dead_probe := DeadProbe,
        victim := Victim, victim_probe := VictimProbe}, Traced) ->
    LiveArities = maps:from_list([{N, length(Ts)} || {N, Ts} <- live_probes()]),
    Handles = maps:from_list(
                [{Live, {provider, live, LiveArities}},
                 {Dead, {provider, dead, #{gone => 1}}},
                 {DeadProbe, {probe, dead, gone, 1}},
                 {Victim, {provider, victim, #{v => 2}}},
                 {VictimProbe, {probe, victim, v, 2}}]
                ++ [{P, {probe, live, N, length(Ts)}} || {P, {N, Ts}} <- lists:zip(LiveProbes, live_probes())]),
    Paths = maps:from_list([{Id, dtrace_provider:path(H)} || {Id, H} <- [{live, Live}, {dead, Dead}, {victim, Victim}]]),
    #{handles => Handles, deleted => #{dead => true}, traced => Traced, paths => Paths,
      names => #{live => atom_to_binary(?LIVE), victim => atom_to_binary(?VICTIM)}}.

handle(H, #{handles := Hs}) ->
    maps:get(H, Hs, none).

deleted(Id, #{deleted := D}) ->
    maps:get(Id, D, false).

%% Only the live provider is traced.
enabled(live, #{traced := Traced}) -> Traced;
enabled(_, _) -> false.

seen(delete, [H], {ok, ok}, #{deleted := D} = Model) ->
    case handle(H, Model) of
        {provider, Id, _} -> Model#{deleted := D#{Id => true}};
        {probe, Id, _, _} -> Model#{deleted := D#{Id => true}};
        none -> Model
    end;
seen(_, _, _, Model) ->
    Model.

%% The documented result of each call.
expected(new, [Provider, Probes], Model) ->
    case expected_new(Provider, Probes) of
        {error, _} = Error -> {value, Error};
        {ok, Name} ->
            Defined = [N || {Id, N} <- maps:to_list(maps:get(names, Model)), not deleted(Id, Model)],
            case lists:member(Name, Defined) of
                true -> {value, {error, {already_defined, Provider}}};
                false -> {new_ok, Name}
            end
    end;
expected(fire, [H, Name, Args], Model) ->
    case handle(H, Model) of
        {provider, Id, Probes} ->
            case deleted(Id, Model) of
                true -> {value, false};
                false ->
                    case is_atom(Name) andalso maps:find(Name, Probes) of
                        {ok, Arity} -> with_args(Args, Arity, {value, enabled(Id, Model)});
                        _ -> badarg
                    end
            end;
        _ -> badarg
    end;
expected(fire, [H, Args], Model) ->
    case handle(H, Model) of
        {probe, Id, _, Arity} ->
            case deleted(Id, Model) of
                true -> {value, false};
                false -> with_args(Args, Arity, {value, enabled(Id, Model)})
            end;
        _ -> badarg
    end;
%% is_enabled(Probe, ArgCount): badarg unless a probe handle and a count
%% of the probe's arity (any count a usize holds on a deleted provider).
expected(is_enabled, [H, ArgCount], Model) when is_integer(ArgCount) ->
    case handle(H, Model) of
        {probe, Id, _, Arity} -> checked(Id, Arity, ArgCount, Model);
        _ -> badarg
    end;
expected(is_enabled, [H, Name, ArgCount], Model) ->
    case handle(H, Model) of
        {provider, Id, Probes} ->
            case {deleted(Id, Model), is_atom(Name) andalso maps:find(Name, Probes)} of
                {true, _} -> deleted_or_badarg(Id, ArgCount, Model);
                {false, {ok, Arity}} -> checked(Id, Arity, ArgCount, Model);
                {false, _} -> badarg
            end;
        _ -> badarg
    end;
expected(is_enabled, [H, Name], Model) ->
    case handle(H, Model) of
        {provider, Id, Probes} ->
            case {deleted(Id, Model), is_atom(Name) andalso maps:is_key(Name, Probes)} of
                {true, _} -> {value, false};
                {false, true} -> {value, enabled(Id, Model)};
                {false, false} -> badarg
            end;
        _ -> badarg
    end;
expected(is_enabled, [H], Model) ->
    case handle(H, Model) of
        {probe, Id, _, _} -> {value, not deleted(Id, Model) andalso enabled(Id, Model)};
        _ -> badarg
    end;
expected(probe, [H, Name], Model) ->
    case handle(H, Model) of
        {provider, _, Probes} ->
            case is_atom(Name) andalso maps:is_key(Name, Probes) of
                true -> handle;
                false -> badarg
            end;
        _ -> badarg
    end;
expected(path, [H], #{paths := Paths} = Model) ->
    case handle(H, Model) of
        {provider, Id, _} -> {path, maps:get(Id, Paths)};
        {probe, Id, _, _} -> {path, maps:get(Id, Paths)};
        none -> badarg
    end;
expected(delete, [H], Model) ->
    case handle(H, Model) of
        none -> badarg;
        _ -> {value, ok}
    end.

%% The answer of an is_enabled call with an argument count: false on a
%% deleted provider, whatever the count (a count a usize holds); else
%% badarg unless the count is the probe's arity.
checked(Id, Arity, ArgCount, Model) ->
    case deleted(Id, Model) of
        true -> deleted_or_badarg(Id, ArgCount, Model);
        false when ArgCount =:= Arity -> {value, enabled(Id, Model)};
        false -> badarg
    end.

deleted_or_badarg(Id, ArgCount, Model) ->
    case deleted(Id, Model) andalso is_integer(ArgCount) andalso ArgCount >= 0 andalso ArgCount < 1 bsl 64 of
        true -> {value, false};
        false -> badarg
    end.

%% Args must be a proper list of exactly Arity terms.
with_args(Args, Arity, Then) ->
    case is_list(Args) andalso proper_length(Args) =:= Arity of
        true -> Then;
        false -> badarg
    end.

proper_length(L) ->
    try length(L) catch error:badarg -> improper end.

%% The result new/2 documents for a definition, up to the node's state:
%% {error, Reason} for a bad definition (the first problem, in the
%% documented order), {ok, NameAsBinary} for a good one.
expected_new(Provider, Probes) ->
    case provider_name(Provider) of
        error -> {error, {invalid_provider_name, Provider}};
        {ok, Name} ->
            case probe_list(Probes, Probes, [], 0) of
                ok -> {ok, Name};
                Error -> Error
            end
    end.

provider_name(A) when is_atom(A) ->
    identifier(atom_to_binary(A, utf8));
provider_name(T) ->
    try iolist_to_binary(T) of
        B -> identifier(B)
    catch
        error:badarg -> error
    end.

identifier(<<First, Rest/binary>> = B) when byte_size(B) =< 64 ->
    case (First =:= $_ orelse (First bor 32 >= $a andalso First bor 32 =< $z))
        andalso lists:all(fun(C) -> C =:= $_ orelse (C >= $0 andalso C =< $9)
                                        orelse (C bor 32 >= $a andalso C bor 32 =< $z) end,
                          binary_to_list(Rest)) of
        true -> {ok, B};
        false -> error
    end;
identifier(_) ->
    error.

probe_list([], _All, [], _) -> {error, no_probes};
probe_list([], _All, _Seen, _) -> ok;
probe_list([_ | _], _All, _Seen, 1024) -> {error, {too_many_probes, 1024}};
probe_list([Entry | Rest], All, Seen, N) ->
    case probe_entry(Entry, Seen) of
        {ok, Name} -> probe_list(Rest, All, [Name | Seen], N + 1);
        Error -> Error
    end;
probe_list(_, All, _, _) -> {error, {invalid_probes, All}}.

probe_entry({Name, Types} = Entry, Seen) ->
    case is_atom(Name) andalso identifier(atom_to_binary(Name, utf8)) of
        {ok, _} ->
            case arg_types(Types, Entry, Name, 0) of
                ok ->
                    case lists:member(Name, Seen) of
                        true -> {error, {duplicate_probe, Name}};
                        false -> {ok, Name}
                    end;
                Error -> Error
            end;
        _ -> {error, {invalid_probe_name, Name}}
    end;
probe_entry(Entry, _Seen) ->
    {error, {invalid_probe, Entry}}.

arg_types([], _, _, _) -> ok;
arg_types([_ | _], _, Name, 12) -> {error, {too_many_args, Name, 12}};
arg_types([T | Rest], Entry, Name, N) when T =:= int; T =:= string -> arg_types(Rest, Entry, Name, N + 1);
arg_types([T | _], _, Name, _) -> {error, {invalid_arg_type, Name, T}};
arg_types(_, Entry, _, _) -> {error, {invalid_probe, Entry}}.

%% Is Reason one of the reasons new/2 documents (shape only)?
is_reason(unavailable) -> true;
is_reason(no_probes) -> true;
is_reason({too_many_probes, 1024}) -> true;
is_reason({too_many_providers, 1024}) -> true;
is_reason({Tag, _}) ->
    lists:member(Tag, [invalid_provider_name, invalid_probes, invalid_probe, invalid_probe_name,
                       duplicate_probe, already_defined, file_error, dlopen_failed]);
is_reason({invalid_arg_type, Name, _}) -> is_atom(Name);
is_reason({too_many_args, Name, 12}) -> is_atom(Name);
is_reason(_) -> false.

%%% Generators

term(F) ->
    frequency([{6, dtrace_props:probe_term()},
               {3, handle_term(F)},
               {2, probe_name()},
               {2, args_term()},
               {2, provider_name_term()},
               {2, probe_list_term()}]).

handle_term(#{live := Live, live_probes := LiveProbes, dead := Dead, dead_probe := DeadProbe}) ->
    oneof([exactly(H) || H <- [Live, Dead, DeadProbe | LiveProbes]] ++ [victim, victim_probe]).

probe_name() ->
    oneof([request__start, nothing, all, gone, v, other, 'request__start ', "all"]).

%% Argument lists: short, as long as a fixture probe's, improper.
args_term() ->
    frequency([{4, ?LET(N, oneof([0, 1, 2, 12]), vector(N, dtrace_props:probe_term()))},
               {1, ?LET(N, range(0, 14), vector(N, dtrace_props:probe_term()))},
               {1, ?LET({L, T}, {list(byte()), oneof([a, <<"t">>])}, L ++ T)}]).

provider_name_term() ->
    oneof([p_a, 'P_b', '_c1', "p_str", <<"p_bin">>, ["p_", <<"io">>], ?LIVE, ?VICTIM,
           atom_to_list(?LIVE), "../x", "a/b", '', "", "1x", 'a-b', "a b", '\x{444}',
           lists:duplicate(64, $x), lists:duplicate(65, $x), [256, $a], <<1:3>>,
           dtrace_props:probe_term()]).

probe_list_term() ->
    frequency([{5, ?LET(N, range(0, 4), vector(N, probe_entry()))},
               {1, ?LET({L, T}, {vector(2, probe_entry()), oneof([x, <<"t">>])}, L ++ T)},
               {1, dtrace_props:probe_term()}]).

probe_entry() ->
    frequency([{6, {entry_name(), arg_types_term()}},
               {1, dtrace_props:probe_term()}]).

entry_name() ->
    oneof([a, b, request__start, 'x__y', '_', '1bad', 'a-b', 'a:b', "str", <<"bin">>,
           list_to_atom(lists:duplicate(65, $y)), dtrace_props:probe_term()]).

arg_types_term() ->
    frequency([{6, list(oneof([int, string]))},
               {2, list(oneof([int, string, float, integer, "int", dtrace_props:probe_term()]))},
               {1, exactly(lists:duplicate(12, int))},
               {1, exactly(lists:duplicate(13, string))},
               {1, ?LET(L, list(oneof([int, string])), L ++ int)}]).

%% Calls with the right shape, so that every case reaches the enabled
%% check and the conversion of arbitrary argument terms, and new/2 gets
%% definitions that are good or bad in one place.
wellformed_calls(#{live := Live, live_probes := LiveProbes} = F) ->
    Arities = [length(Ts) || {_, Ts} <- live_probes()],
    ?LET({I, Args, V, Def, {H, Name}, Count},
         {range(1, 3), vector(12, dtrace_props:probe_term()), vector(2, dtrace_props:probe_term()),
          {provider_name_term(), probe_list_term()}, {handle_term(F), probe_name()},
          frequency([{4, range(0, 4)}, {1, dtrace_props:probe_term()}])},
         begin
             {ProbeName, _} = lists:nth(I, live_probes()),
             N = lists:nth(I, Arities),
             [{fire, [Live, ProbeName, dtrace_props:take(N, Args)]},
              {fire, [lists:nth(I, LiveProbes), dtrace_props:take(N, Args)]},
              {fire, [victim, v, V]},
              {fire, [victim_probe, V]},
              {new, tuple_to_list(Def)},
              {probe, [H, Name]},
              {is_enabled, [H, Name]},
              {is_enabled, [Live, ProbeName, N]},
              {is_enabled, [lists:nth(I, LiveProbes), N]},
              {is_enabled, [H, Name, Count]},
              {is_enabled, [H, Count]}]
         end).
