%%% `dyntrace' for stock VMs: OTP's dynamic-trace API, delegated to dtrace.
%%%
%%% Not in the application's ebin (a release that also holds runtime_tools
%%% would refuse two `dyntrace' modules): the build compiles this file to
%%% priv/compat/dyntrace.beam, and dtrace_compat loads it with
%%% code:load_binary/3 when the dtrace application starts on a VM built
%%% without dynamic trace. See dtrace_compat for when it does and does not.
-module(dyntrace).

%% Marks this module as dtrace's, for dtrace_compat.
-dtrace_compat(true).

-export([available/0, user_trace_s1/1,
         p/0, p/1, p/2, p/3, p/4, p/5, p/6, p/7, p/8,
         pn/1, pn/2, pn/3, pn/4, pn/5, pn/6, pn/7, pn/8, pn/9]).
-export([put_tag/1, get_tag/0, get_tag_data/0, spread_tag/1, restore_tag/1]).
-export([user_trace_i4s4/9]).
%% erl_tracer callbacks: {tracer, dyntrace, []} fires dtrace's VM probes.
-export([enabled/3, trace/5]).

-on_load(on_load/0).
-nifs([enabled/3, trace/5]).

-include("../src/api/dtrace_libraries.hrl").

%% Loads priv/compat/dyntrace.so (native/tracer_nif), whose NIFs are
%% dtrace_nif.so's erl_tracer callbacks. Without it (module dtrace_nif not
%% loaded), the stubs answer `remove', as OTP's dyntrace does on a VM
%% without LTTng.
on_load() ->
    %% dtrace_nif.so first, when the code server can load it (not in an
    %% embedded release; native/tracer_nif opens the library itself then).
    _ = code:ensure_loaded(dtrace_nif),
    Path = library_path(?DYNTRACE_TRACER_LIBRARY),
    loaded(info, "{tracer, dyntrace, []} fires nothing", Path, erlang:load_nif(Path, 0)).

enabled(_TraceTag, _TracerState, _Tracee) -> ?NOT_LOADED(remove).
trace(_TraceTag, _TracerState, _Tracee, _TraceTerm, _Opts) -> ok.

available() -> dtrace:available().
user_trace_s1(Message) -> dtrace:user_trace_s1(Message).
user_trace_i4s4(Tag, I1, I2, I3, I4, S1, S2, S3, S4) ->
    dtrace:user_trace_i4s4(Tag, I1, I2, I3, I4, S1, S2, S3, S4).

p() -> dtrace:p().
p(A1) -> dtrace:p(A1).
p(A1, A2) -> dtrace:p(A1, A2).
p(A1, A2, A3) -> dtrace:p(A1, A2, A3).
p(A1, A2, A3, A4) -> dtrace:p(A1, A2, A3, A4).
p(A1, A2, A3, A4, A5) -> dtrace:p(A1, A2, A3, A4, A5).
p(A1, A2, A3, A4, A5, A6) -> dtrace:p(A1, A2, A3, A4, A5, A6).
p(A1, A2, A3, A4, A5, A6, A7) -> dtrace:p(A1, A2, A3, A4, A5, A6, A7).
p(A1, A2, A3, A4, A5, A6, A7, A8) -> dtrace:p(A1, A2, A3, A4, A5, A6, A7, A8).

pn(L) -> dtrace:pn(L).
pn(L, A1) -> dtrace:pn(L, A1).
pn(L, A1, A2) -> dtrace:pn(L, A1, A2).
pn(L, A1, A2, A3) -> dtrace:pn(L, A1, A2, A3).
pn(L, A1, A2, A3, A4) -> dtrace:pn(L, A1, A2, A3, A4).
pn(L, A1, A2, A3, A4, A5) -> dtrace:pn(L, A1, A2, A3, A4, A5).
pn(L, A1, A2, A3, A4, A5, A6) -> dtrace:pn(L, A1, A2, A3, A4, A5, A6).
pn(L, A1, A2, A3, A4, A5, A6, A7) -> dtrace:pn(L, A1, A2, A3, A4, A5, A6, A7).
pn(L, A1, A2, A3, A4, A5, A6, A7, A8) -> dtrace:pn(L, A1, A2, A3, A4, A5, A6, A7, A8).

put_tag(Data) -> dtrace:put_tag(Data).
get_tag() -> dtrace:get_tag().
get_tag_data() -> dtrace:get_tag_data().
spread_tag(Spread) -> dtrace:spread_tag(Spread).
restore_tag(State) -> dtrace:restore_tag(State).
