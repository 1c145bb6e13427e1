%%% @private
%%% @doc The VM probes' controls behind {@link dtrace}'s `vm_probes/0,1'
%%% `function_probes/1' and `function_spans/1' (documented there): each asks `dtrace_vm', the
%%% automatic mode's process, and answers `{error, not_started}' when the
%%% `dtrace' application (which runs it) is not started. The erl_tracer
%%% callbacks that fire the VM probes are NIFs of module `dtrace' (the
%%% tracer module of `{tracer, dtrace, State}'; dtrace_nif says which module
%%% owns which library).
%%% @end
-module(dtrace_vm_probes).

-export([status/0, set_mode/1, function_probes/1, function_spans/1]).

-spec status() -> dtrace:vm_status() | {error, not_started}.
status() ->
    call(fun dtrace_vm:status/0).

-spec set_mode(Mode :: auto | manual) -> ok | {error, not_started}.
set_mode(Mode) ->
    call(fun() -> dtrace_vm:set_mode(Mode) end).

-spec function_probes(Patterns :: term()) -> ok | {error, term()}.
function_probes(Patterns) ->
    call(fun() -> dtrace_vm:function_probes(Patterns) end).

-spec function_spans(Functions :: term()) -> ok | {error, term()}.
function_spans(Functions) ->
    call(fun() -> dtrace_vm:function_spans(Functions) end).

call(Fun) ->
    case whereis(dtrace_vm) of
        undefined -> {error, not_started};
        _ -> Fun()
    end.
