%%% @private
%%% The trace flags of a process inside a span, for "why was it slow"
%%% (priv/dtrace_why.py, docs/operators.md). While a tracer listens to one
%%% of the `span__vm_*' probes (LTTng: `org_erlang_dtrace:span_vm_*', which
%%% the flight recorder records by default), the outermost span of a
%%% process gives that process the trace flags of the feed rows `on=spans'
%%% (`running', `garbage_collection', `send', `receive', those whose
%%% probes listen), with the tracer `{dtrace, span}', and removes them when
%%% the span ends. No other process is traced for them, and automatic mode
%%% never sets them.
%%%
%%% The tracer: on OTP 27 and later, in a trace session of the `dtrace'
%%% application's (`dtrace_span', made by dtrace_vm), so no other tracer's
%%% flags are touched; without sessions (OTP 25, 26, or the application not
%%% running), `erlang:trace/3' on the calling process, which the VM refuses
%%% when the process already has another tracer (an operator's, or
%%% automatic mode's `{dtrace, []}'): that span then has no VM events.
%%%
%%% Cost, only while a `span__vm_*' probe listens: two `erlang:trace/3'
%%% calls per outermost span (about 1.1 us each here) and the span's own
%%% trace events.
%%%
%%% A span begun with span_begin/1 that ends in another process leaves
%%% the flags on the process it began in until a span of that process
%%% ends (bounded: one process's events, only while a probe listens).
-module(dtrace_span_trace).

-export([begin_span/1, end_span/1, session_key/0]).

%% In the process dictionary while flags are set: {SpanId, Flags}.
-define(KEY, '$dtrace_span_trace').
%% persistent_term key of the session (OTP 27+), set by dtrace_vm.
-define(SESSION_KEY, {dtrace, span_session}).

%% @doc The persistent_term key under which dtrace_vm keeps the span
%% session (OTP 27+).
-spec session_key() -> {dtrace, span_session}.
session_key() ->
    ?SESSION_KEY.

%% @doc At the begin of span `Id' with no enclosing span in this process:
%% sets the flags the listening `span__vm_*' probes need, if any.
-spec begin_span(Id :: pos_integer()) -> ok.
begin_span(Id) ->
    case dtrace_nif:span_vm_flags() of
        [] ->
            ok;
        Flags ->
            case get(?KEY) of
                {_, Flags} ->
                    %% Still set (a span that ended in another process).
                    put(?KEY, {Id, Flags}),
                    ok;
                Old ->
                    _ = Old =/= undefined andalso clear(element(2, Old)),
                    case set(Flags) of
                        true -> put(?KEY, {Id, Flags});
                        false -> erase(?KEY)
                    end,
                    ok
            end
    end.

%% @doc At the end of span `Id' in the calling process: removes the flags
%% its begin set.
-spec end_span(Id :: pos_integer()) -> ok.
end_span(Id) ->
    case get(?KEY) of
        {Id, Flags} ->
            erase(?KEY),
            _ = clear(Flags),
            ok;
        _ ->
            ok
    end.

set(Flags) ->
    try
        case persistent_term:get(?SESSION_KEY, legacy) of
            legacy -> erlang:trace(self(), true, [{tracer, dtrace, span} | Flags]);
            Session -> trace:process(Session, self(), true, Flags)
        end
    of
        1 -> true;
        _ -> false
    catch
        error:_ -> false
    end.

clear(Flags) ->
    try
        case persistent_term:get(?SESSION_KEY, legacy) of
            legacy -> erlang:trace(self(), false, Flags);
            Session -> trace:process(Session, self(), false, Flags)
        end
    catch
        error:_ -> 0
    end.
