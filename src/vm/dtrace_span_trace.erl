%%% @private
%%% The trace flags of a process inside a span, for "why was it slow"
%%% (priv/python/dtrace_tools/why.py, docs/operators.md). While a tracer listens to one
%%% of the `span__vm_*' probes (LTTng: `org_erlang_dtrace:span_vm_*', which
%%% the flight recorder records by default), the outermost span of a
%%% process gives that process the trace flags of the feed rows `on=spans'
%%% (`running', `garbage_collection', `send', `receive', those whose
%%% probes listen), with the tracer `{dtrace_tracer, span}', and removes
%%% them when the span ends. No other process is traced for them, and automatic mode
%%% never sets them.
%%%
%%% The tracer: on OTP 27 and later, in a trace session of the `dtrace'
%%% application's (`dtrace_span', made by dtrace_vm), so no other tracer's
%%% flags are touched; without sessions (OTP 25, 26, or the application not
%%% running), `erlang:trace/3' on the calling process, when it has no
%%% tracer (`erlang:trace_info/2' first); a process automatic mode traces
%%% (tracer `{dtrace_tracer, []}', while a tracer listens to a VM probe)
%%% gets the flags it lacks with that tracer, and they are removed at the end; a
%%% process another tracer holds (an operator's) is left alone, and its
%%% span has no VM events.
%%%
%%% Cost, only while a `span__vm_*' probe listens: two `erlang:trace/3'
%%% calls per outermost span (and one `erlang:trace_info/2' without
%%% sessions) and the span's own trace events: docs/operators.md. While
%%% `span__vm_gc' listens on a VM where two sessions tracing a process's
%%% GC crash it (OTP 27.0 to 29.1.1), a table insert and delete and a
%%% trace:session_info/1 more (dtrace_gc_guard).
%%%
%%% A span begun with span_begin/1 that ends in another process leaves
%%% the flags on the process it began in until a span of that process
%%% ends (bounded: one process's events, only while a probe listens).
-module(dtrace_span_trace).

-export([begin_span/1, end_span/1, session_key/0]).

%% OTP 25's spec of erlang:trace_info/2 lacks the {tracer, {Module, State}}
%% it returns for a tracer module (as dtrace_vm notes).
-dialyzer({nowarn_function, [set_legacy/1]}).

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
                {_, Added} ->
                    %% Still set (a span that ended in another process).
                    put(?KEY, {Id, Added}),
                    ok;
                undefined ->
                    case set(Flags) of
                        {ok, Added} -> put(?KEY, {Id, Added});
                        error -> ok
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

%% {ok, FlagsAdded} or error. Where two sessions tracing a process for GC
%% crash the VM (OTP-20385, dtrace_gc_guard), garbage_collection only
%% when no other session traces the process for it (automatic mode
%% included, while a GC probe listens): else the span has no span__vm_gc
%% (docs/vm-probes.md, "Operators' tracing").
set(Flags) ->
    Session = persistent_term:get(?SESSION_KEY, legacy),
    case lists:member(garbage_collection, Flags) andalso dtrace_gc_guard:affected() of
        true ->
            dtrace_gc_guard:span(dtrace_gc_guard:own(Session),
                                 fun(true) -> set(Session, Flags);
                                    (false) -> set(Session, Flags -- [garbage_collection])
                                 end);
        false ->
            set(Session, Flags)
    end.

set(_Session, []) ->
    {ok, []};
set(Session, Flags) ->
    try
        case Session of
            %% The VM refuses a tracer module that is not loaded (the
            %% application, which loads it, may not run).
            legacy -> _ = erlang:module_loaded(dtrace_tracer) orelse code:ensure_loaded(dtrace_tracer),
                      set_legacy(Flags);
            _ -> 1 = trace:process(Session, self(), true, Flags), {ok, Flags}
        end
    catch
        error:_ -> error
    end.

%% Asked first: the VM refuses a second tracer with badarg and also logs
%% an error report ("can only have one tracer per process") for each
%% refusal. Automatic mode's tracer {dtrace_tracer, []} (it traces every process
%% while a tracer listens to a VM probe) takes the flags it lacks: its
%% events feed the span__vm_* probes too (the rows on processes, auto=no).
set_legacy(Flags) ->
    case erlang:trace_info(self(), tracer) of
        {tracer, []} ->
            1 = erlang:trace(self(), true, [{tracer, dtrace_tracer, span} | Flags]),
            {ok, Flags};
        {tracer, {dtrace_tracer, span}} ->
            1 = erlang:trace(self(), true, [{tracer, dtrace_tracer, span} | Flags]),
            {ok, Flags};
        {tracer, {dtrace_tracer, []}} ->
            {flags, Have} = erlang:trace_info(self(), flags),
            case Flags -- Have of
                [] -> {ok, []};
                Missing -> 1 = erlang:trace(self(), true, [{tracer, dtrace_tracer, []} | Missing]), {ok, Missing}
            end;
        _ ->
            error
    end.

clear([]) ->
    0;
clear(Flags) ->
    try
        case persistent_term:get(?SESSION_KEY, legacy) of
            legacy -> erlang:trace(self(), false, Flags);
            Session -> trace:process(Session, self(), false, Flags)
        end
    catch
        error:_ -> 0
    end.
