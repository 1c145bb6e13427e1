%%% @private
%%% @doc Spans, behind {@link dtrace}'s `span/2', `span_begin/1',
%%% `span_end/1,2' and `slow_span_threshold/0,1' (documented there, with
%%% the probes they fire: `span__begin', `span__end', `span__slow').
%%%
%%% A span is a piece of work: a kind, an id unique on the node, the id of
%%% the span it runs inside (0: none) and, at its end, its duration and how
%%% it ended (`ok', or the class of the exception it raised). While only
%%% `span__slow' listens (the flight recorder's default events) a span is a
%%% `CLOCK_MONOTONIC' begin time from the NIF and nothing else: no id, no
%%% nesting, nothing fired below the threshold (JFR's way of staying on).
%%% The caller's argument checks that raise (not a fun, not a span, a bad
%%% threshold) are the facade's, so that the exception names `dtrace'.
%%% @end
-module(dtrace_span).

-export([span/3, span_begin/1, span_end/2, slow_span_threshold/0, set_slow_span_threshold/1]).
-export_type([span/0]).

%% The id of the span/2 running in this process, the parent of the next.
-define(SPAN_KEY, '$dtrace_span').

-opaque span() :: {dtrace_span, Id :: non_neg_integer(), Parent :: non_neg_integer(),
                   Kind :: iodata(), Start :: integer(), UserTag :: binary() | undefined}
                | {dtrace_slow_span, Kind :: dtrace:span_kind(), BeginNs :: integer(),
                   UserTag :: binary() | undefined}.
%% What span_begin/1 returns: a full span (ids, kind as text, the Erlang
%% monotonic start), a slow-only span (the NIF's begin time), or, while
%% nobody listens, a full span of id 0 that span_end/2 ignores.

%% Enabled: what dtrace_nif:span_enabled/0 answered, not `false' (the
%% facade runs Fun itself then).
-spec span(Kind :: dtrace:span_kind(), Fun :: fun(() -> Result), Enabled :: true | integer()) -> Result.
span(Kind, Fun, Enabled) ->
    case Enabled of
        BeginNs when is_integer(BeginNs) ->
            Tag = dtrace_tag:get_tag_data(),
            try Fun() of
                Result ->
                    _ = slow_end(Kind, BeginNs, Tag, ok),
                    Result
            catch
                Class:Reason:Stack ->
                    _ = slow_end(Kind, BeginNs, Tag, Class),
                    erlang:raise(Class, Reason, Stack)
            end;
        true ->
            {dtrace_span, Id, _, _, _, _} = Span = traced_span_begin(Kind),
            Outer = put(?SPAN_KEY, Id),
            _ = Outer =:= undefined andalso dtrace_span_trace:begin_span(Id),
            try Fun() of
                Result ->
                    restore_span(Outer),
                    _ = span_end(Span, ok),
                    Result
            catch
                Class:Reason:Stack ->
                    restore_span(Outer),
                    _ = span_end(Span, Class),
                    erlang:raise(Class, Reason, Stack)
            end
    end.

-spec span_begin(Kind :: dtrace:span_kind()) -> span().
span_begin(Kind) ->
    case dtrace_nif:span_enabled() of
        false -> {dtrace_span, 0, 0, [], 0, undefined};
        BeginNs when is_integer(BeginNs) -> {dtrace_slow_span, Kind, BeginNs, dtrace_tag:get_tag_data()};
        true ->
            {dtrace_span, Id, _, _, _, _} = Span = traced_span_begin(Kind),
            _ = get(?SPAN_KEY) =:= undefined andalso dtrace_span_trace:begin_span(Id),
            Span
    end.

%% `badarg' (returned: the facade raises it) for anything that is not a
%% span; the outcome is the facade's to check.
-spec span_end(Span :: span() | term(), Outcome :: dtrace:span_outcome()) -> boolean() | badarg.
span_end({dtrace_span, 0, _, _, _, _}, _Outcome) ->
    false;
span_end({dtrace_span, Id, Parent, Kind, Start, Tag}, Outcome) when is_integer(Start) ->
    Fired = dtrace_nif:span_end(Id, Parent, Kind, erlang:monotonic_time(nanosecond) - Start, Tag, Outcome),
    ok = dtrace_span_trace:end_span(Id),
    Fired;
span_end({dtrace_slow_span, Kind, BeginNs, Tag}, Outcome) when is_integer(BeginNs) ->
    slow_end(Kind, BeginNs, Tag, Outcome);
span_end(_Other, _Outcome) ->
    badarg.

%% Microseconds.
-spec slow_span_threshold() -> pos_integer().
slow_span_threshold() ->
    max(1, dtrace_nif:slow_span_threshold() div 1000).

%% Microseconds, checked by the facade; returns the previous threshold.
-spec set_slow_span_threshold(Us :: pos_integer()) -> pos_integer().
set_slow_span_threshold(Us) ->
    max(1, dtrace_nif:set_slow_span_threshold(Us * 1000) div 1000).

%% The end of a span begun while only span__slow listened: fires it if the
%% span lasted the threshold. false unless fired.
slow_end(Kind, BeginNs, Tag, Outcome) ->
    case dtrace_nif:span_slow_end(BeginNs) of
        false -> false;
        Ns -> dtrace_nif:span_slow(0, 0, kind_text(Kind), Ns, Tag, Outcome)
    end.

kind_text(Kind) when is_atom(Kind) -> atom_to_binary(Kind, utf8);
kind_text(Kind) -> Kind.

traced_span_begin(Kind) ->
    Id = erlang:unique_integer([positive]),
    Parent = case get(?SPAN_KEY) of
                 undefined -> 0;
                 P -> P
             end,
    K = kind_text(Kind),
    Tag = dtrace_tag:get_tag_data(),
    _ = dtrace_nif:span_begin(Id, Parent, K, Tag),
    {dtrace_span, Id, Parent, K, erlang:monotonic_time(nanosecond), Tag}.

restore_span(undefined) -> erase(?SPAN_KEY);
restore_span(Outer) -> put(?SPAN_KEY, Outer).
