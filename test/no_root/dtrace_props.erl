%%% PropEr properties: any term, in any position, of every public function
%%% of dtrace and every NIF of dtrace_nif, gives a documented result
%%% (jiffy's "any term in, no crash").
%%%
%%% One test case draws ten terms and calls every public function with
%%% them, rotated so that each term lands in a different position for each
%%% function: ?CALLS_PER_CASE calls per case.
-module(dtrace_props).

-include_lib("proper/include/proper.hrl").

-export([prop_any_term_any_position/0, run/1, calls_per_case/0, probe_term/0, huge/0, huge_terms/0,
         iolist_like/0, rotate/2, take/2]).

%% Numbered probes the enabled runs attach (bpftrace 0.17 cannot attach
%% all 951 at once): labels the generator favours.
-define(ATTACHED_LABELS, 31).

%% Runs the property for at least Calls calls; returns the number of calls
%% made, or fails with the counterexample.
run(Calls) ->
    Cases = (Calls + calls_per_case() - 1) div calls_per_case(),
    %% slow_span_threshold/1 takes any positive integer drawn: the node's
    %% threshold is put back afterwards.
    Threshold = dtrace:slow_span_threshold(),
    Passed = try proper:quickcheck(prop_any_term_any_position(), [{numtests, Cases}, quiet, {max_size, 40}])
             after dtrace:slow_span_threshold(Threshold)
             end,
    case Passed of
        true -> Cases * calls_per_case();
        false -> erlang:error({counterexample, proper:counterexample()})
    end.

calls_per_case() ->
    length(functions()).

%% {Module, Function, Arity}: dtrace's API, dtrace_nif's NIFs and
%% dtrace_tracer's erl_tracer callbacks (not the
%% test hooks, which only a test build has, nor doctor/0, which takes no
%% term and prints).
functions() ->
    [{M, F, A} || M <- [dtrace, dtrace_nif, dtrace_tracer], {F, A} <- M:module_info(exports),
                  F =/= module_info, F =/= test_panic, F =/= test_allocations,
                  F =/= test_dof_force_active, F =/= test_block, {F, A} =/= {doctor, 0}].

prop_any_term_any_position() ->
    ?FORALL(Terms, vector(10, probe_term()),
            begin
                Results = [{{M, F}, Args, call(M, F, Args)}
                           || {I, {M, F, A}} <- lists:enumerate(functions()),
                              Args <- [take(A, rotate(I, Terms))]],
                Bad = [R || {MF, Args, Result} = R <- Results, not documented(MF, Args, Result)],
                ?WHENFAIL(io:format("undocumented results: ~P~n", [Bad, 30]), Bad =:= [])
            end).

call(M, F, Args) ->
    try apply(M, F, Args) of
        Result -> {ok, Result}
    catch
        Class:Reason:Stack -> {Class, Reason, hd(Stack)}
    end.

%% L rotated left by N (modulo its length), so that each term of a case
%% lands in a different position for each function.
rotate(N, L) ->
    {A, B} = lists:split(N rem length(L), L),
    B ++ A.

take(N, L) ->
    lists:sublist(L, N).

%% What each function's documentation allows, and nothing more.
documented({dtrace, F}, Args, Result) -> api(F, Args, Result);
documented({dtrace_nif, F}, Args, Result) -> nif(F, Args, Result);
documented({dtrace_tracer, F}, Args, Result) -> api(F, Args, Result).

%% dtrace's API.
api(available, [], {ok, B}) -> is_boolean(B);
api(sinks, [], {ok, #{sdt := S, lttng := L, dof := D}}) ->
    is_boolean(S) andalso working_or_why(L) andalso working_or_why(D);
api(is_enabled, _, {ok, B}) -> is_boolean(B);
%% p/0..4 take anything; p/5..8 need at least N - 4 leading integers
%% (at most four strings), else function_clause (OTP's clauses).
api(p, Args, {ok, R}) -> is_boolean(R) andalso routable(Args);
api(p, Args, {error, function_clause, {dtrace, p, _, _}}) -> not routable(Args);
%% pn: function_clause as p for the arguments after the label; then
%% badarg for a label that is not an integer in 0..1023, error for
%% 951..1023, true or false for a label with a probe.
api(pn, [Label | Args], {ok, R}) ->
    routable(Args) andalso
        case Label of
            L when is_integer(L), L >= 0, L =< 950 -> is_boolean(R);
            L when is_integer(L), L >= 951, L =< 1023 -> R =:= error;
            _ -> R =:= badarg
        end;
api(pn, [_ | Args], {error, function_clause, {dtrace, pn, _, _}}) -> not routable(Args);
api(user_trace_i4s4, _, {ok, R}) -> is_boolean(R);
%% badarg only when a tracer listens and the message is not an iolist of
%% at most 1024 bytes (then true is impossible).
api(user_trace_s1, [Message], {ok, R}) ->
    R =:= false orelse R =:= (case short_iolist(Message) of true -> true; false -> badarg end);
%% Spans: span/2 runs a fun of arity 0 and returns its result (the
%% generator's funs take none and return ok or the node), and raises
%% function_clause for anything else; span_begin/1 takes any kind;
%% span_end/1 takes only spans, span_end/2 only spans and outcomes.
%% slow_span_threshold/0,1: microseconds; /1 takes a positive integer up
%% to 2^40 and returns the previous one, badarg otherwise.
api(slow_span_threshold, [], {ok, Us}) -> is_integer(Us) andalso Us >= 1;
api(slow_span_threshold, [Us], {ok, Old}) -> is_integer(Us) andalso Us >= 1 andalso is_integer(Old) andalso Old >= 1;
api(slow_span_threshold, [Us], {error, badarg, {dtrace, slow_span_threshold, _, _}}) ->
    not (is_integer(Us) andalso Us >= 1 andalso Us =< 1 bsl 40);
api(span, [_, Fun], {ok, R}) -> is_function(Fun, 0) andalso R =:= Fun();
api(span, [_, Fun], {error, function_clause, {dtrace, span, _, _}}) -> not is_function(Fun, 0);
api(span_begin, [_], {ok, Span}) -> is_tuple(Span) andalso (element(1, Span) =:= dtrace_span orelse element(1, Span) =:= dtrace_slow_span);
api(span_end, [Span], {ok, R}) -> is_boolean(R) andalso is_tuple(Span);
api(span_end, [_], {error, badarg, {dtrace, span_end, _, _}}) -> true;
api(span_end, [Span, Outcome], {ok, R}) ->
    is_boolean(R) andalso is_tuple(Span) andalso lists:member(Outcome, [ok, error, exit, throw]);
api(span_end, [_, _], {error, badarg, {dtrace, span_end, _, _}}) -> true;
api(put_tag, [Data], {ok, R}) -> chardata(Data) andalso (R =:= undefined orelse is_binary(R));
api(put_tag, [Data], {error, badarg, _}) -> not chardata(Data);
api(F, [], {ok, R}) when F =:= get_tag; F =:= get_tag_data ->
    R =:= undefined orelse is_binary(R);
api(spread_tag, [B], {ok, {Flags, Tag}}) ->
    is_boolean(B) andalso is_integer(Flags) andalso Flags >= 0 andalso (is_binary(Tag) orelse Tag =:= []);
api(spread_tag, [B], {error, badarg, _}) -> not is_boolean(B);
api(restore_tag, [State], {ok, true}) -> tag_state(State);
api(restore_tag, [State], {error, badarg, _}) -> not tag_state(State);
%% The VM probes' API: the application does not run where the property
%% runs, so automatic mode answers not_started.
api(vm_probes, [], {ok, R}) -> is_map(R) orelse R =:= {error, not_started};
api(vm_probes, [M], {ok, R}) -> (M =:= auto orelse M =:= manual) andalso
                                    (R =:= ok orelse R =:= {error, not_started});
api(vm_probes, [M], {error, badarg, _}) -> not (M =:= auto orelse M =:= manual);
api(function_probes, [_], {ok, R}) -> R =:= ok orelse (is_tuple(R) andalso element(1, R) =:= error);
api(function_spans, [_], {ok, R}) -> R =:= ok orelse (is_tuple(R) andalso element(1, R) =:= error);
%% doctor/1 takes a map of options (none yet) and returns the findings.
api(doctor, [Opts], {ok, L}) -> is_map(Opts) andalso is_list(L);
api(doctor, [Opts], {error, function_clause, {dtrace, doctor, _, _}}) -> not is_map(Opts);
%% The erl_tracer callbacks, called by hand with any terms.
api(enabled, [_, _, _], {ok, R}) -> R =:= trace orelse R =:= discard;
api(trace, [_, _, _, _, _], {ok, R}) -> R =:= ok;
api(_, _, _) -> false.

%% dtrace_nif's NIFs, called with any terms: what the family's Rust file
%% says each returns.
nif(F, Args, Result) when F =:= available; F =:= sinks; F =:= is_enabled; F =:= user_trace_s1;
                          F =:= user_trace_i4s4 ->
    api(F, Args, Result);
%% The tag contract (dtrace_tag.hrl): `adopt' is answered only for the tag
%% `adopt' (the tag is the last argument), never for `undefined' or `undef'.
nif(i4s4, Args, {ok, R}) -> is_boolean(R) orelse (R =:= adopt andalso lists:last(Args) =:= adopt);
nif(user_trace_n, [Label | _] = Args, {ok, R}) ->
    case Label of
        L when is_integer(L), L >= 0, L =< 950 ->
            is_boolean(R) orelse (R =:= adopt andalso lists:last(Args) =:= adopt);
        L when is_integer(L), L >= 951, L =< 1023 -> R =:= error;
        _ -> R =:= badarg
    end;
nif(F, _, {ok, B}) when F =:= span_begin; F =:= span_end; F =:= span_slow; F =:= efile_enabled ->
    is_boolean(B);
%% span_enabled/0: a begin time (an integer) while only span__slow
%% listens; span_slow_end/1: a duration over the threshold, else false.
nif(span_enabled, [], {ok, R}) -> is_boolean(R) orelse is_integer(R);
nif(span_slow_end, [_], {ok, R}) -> R =:= false orelse (is_integer(R) andalso R >= 1);
nif(slow_span_threshold, [], {ok, Ns}) -> is_integer(Ns) andalso Ns >= 1;
nif(set_slow_span_threshold, [Ns], {ok, Old}) -> is_integer(Ns) andalso Ns >= 1 andalso is_integer(Old);
nif(set_slow_span_threshold, [Ns], {error, badarg, _}) -> not (is_integer(Ns) andalso Ns >= 1 andalso Ns < 1 bsl 63);
nif(efile_entry, _, {ok, OpId}) -> is_integer(OpId) andalso OpId >= 0;
nif(efile_return, _, {ok, ok}) -> true;
nif(vm_listening, [], {ok, {P, O, L, M}}) -> is_list(P) andalso is_list(O) andalso is_list(L) andalso is_list(M);
nif(vm_flags, [], {ok, {P, O}}) -> is_list(P) andalso is_list(O);
nif(vm_call_probes, [_, _, _], {ok, R}) -> R =:= ok;
nif(vm_function_spans, [_], {ok, R}) -> R =:= ok;
%% Process names (vm/names.rs): how many listen, and whether it fired.
nif(process_names, [], {ok, R}) -> R =:= false orelse (is_integer(R) andalso R >= 1);
nif(process_name, [_, _], {ok, R}) -> is_boolean(R);
nif(vm_port_name, [_, _, _], {ok, R}) -> is_boolean(R);
%% Monitor messages passed on (dtrace_vm): fires only a row that listens.
nif(vm_monitor_event, [_, _, _, _], {ok, R}) -> is_boolean(R);
nif(user_stack, [_, _, _], {ok, R}) -> is_boolean(R);
nif(span_vm_flags, [], {ok, Flags}) -> is_list(Flags) andalso lists:all(fun is_atom/1, Flags);
%% vm_mode/1 takes a boolean (badarg otherwise) and says whether it fired.
nif(vm_mode, [M], {ok, R}) -> is_boolean(M) andalso is_boolean(R);
nif(vm_mode, [M], {error, badarg, _}) -> not is_boolean(M);
%% The run-time providers' NIFs. Terms drawn here are never handles, so
%% every function that takes one raises badarg; provider_new returns what
%% dtrace_provider:new/2 documents (dtrace_provider_props checks each
%% reason exactly, with real handles).
nif(provider_new, [_, _], {ok, {ok, Handle}}) ->
    is_reference(Handle) andalso dtrace_nif:provider_delete(Handle) =:= ok;
nif(provider_new, [_, _], {ok, {error, Reason}}) ->
    dtrace_provider_props:is_reason(Reason);
nif(F, _, {error, badarg, {dtrace_nif, F, _, _}})
  when F =:= provider_fire; F =:= provider_is_enabled; F =:= provider_probe_is_enabled; F =:= provider_probe;
       F =:= provider_path; F =:= provider_delete ->
    true;
nif(_, _, _) -> false.

%% Can p/N route these arguments? Arities up to 4 take anything; from 5 on
%% the first N - 4 must be integers.
routable(Args) ->
    N = length(Args),
    N =< 4 orelse length(lists:takewhile(fun is_integer/1, Args)) >= N - 4.

%% What put_tag/1 takes: undefined, or chardata.
chardata(undefined) -> true;
chardata(Data) ->
    try is_binary(unicode:characters_to_binary(Data)) catch error:_ -> false end.

%% What restore_tag/1 takes.
tag_state(true) -> true;
tag_state({Flags, Tag}) -> is_integer(Flags) andalso Flags >= 0 andalso (is_binary(Tag) orelse Tag =:= []);
tag_state(_) -> false.

%% An iolist of at most 1024 bytes (the generator's iolists stay far below
%% the NIF's limits on terms and nesting).
short_iolist(Term) ->
    try iolist_size(Term) =< 1024 catch error:badarg -> false end.

%%% Generators

%% Terms a probe argument may meet, weighted towards the ones that reach
%% conversion code: labels of attached probes, iolist-like shapes.
probe_term() ->
    frequency([{6, integer(0, ?ATTACHED_LABELS)},
               {3, any_term()},
               {3, iolist_like()},
               {2, large_integer()},
               {1, oneof([undef, undefined, adopt, [], <<>>, 1.5, -0.0])},
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
           '\x{444}\x{443}', 'dtrace',
           %% erl_tracer's tags and keys, so that the VM probes' callbacks
           %% get past their dispatch
           spawn, exit, link, getting_unlinked, register, open, closed, in, out, out_exited,
           send, send_to_non_existing_process, 'receive', call, return_from, exception_from,
           gc_minor_start, gc_major_end, trace_status, extra, wordsize, erlang, hibernate,
           command, close, global, local, '_']).

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

%% A sink's state in sinks/0: true, or {false, Why} with Why a binary.
working_or_why(true) -> true;
working_or_why({false, Why}) -> is_binary(Why);
working_or_why(_) -> false.
