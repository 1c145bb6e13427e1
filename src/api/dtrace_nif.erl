%%% @private
%%% @doc The NIF boundary: every NIF of `priv/dtrace_nif.so', one section per
%%% probe family, in the order of the family's Rust file
%%% (`native/dtrace_nif/src/': `user.rs', `span.rs', `efile.rs', `vm/',
%%% `provider/nifs.rs'). Nothing else: the public modules (`dtrace',
%%% `dtrace_file', `dtrace_vm', `dtrace_provider') route arguments and call
%%% these. Each raw NIF's argument order is its Rust argument struct's
%%% (`nif_args!'), and the arity registered there is taken from it.
%%%
%%% The bodies below run only when the library is not loaded: each returns
%%% what OTP's `dyntrace' returns on a VM without dynamic trace (`false',
%%% nothing fired).
%%%
%%% == Which module owns which library, and which NIFs ==
%%% The one place that says it (ARCHITECTURE.md points
%%% here; each module's on_load loads its own with the local functions of
%%% `src/api/dtrace_libraries.hrl', which the three modules include):
%%% <table>
%%% <tr><th>module</th><th>library (`priv/')</th><th>its NIFs</th></tr>
%%% <tr><td>`dtrace_nif'</td><td>`dtrace_nif.so' (`native/dtrace_nif')</td>
%%%   <td>every function of `-nifs' below: registered in Rust with
%%%   `raw_nif!' or `#[rustler::nif]', collected as `rustler::Nif'
%%%   (entry.rs, `nif_init')</td></tr>
%%% <tr><td>`dtrace_tracer'</td><td>`tracer/dtrace_tracer.so' (`native/tracer_nif')</td>
%%%   <td>`enabled/3', `trace/5': erl_tracer's callbacks, so that
%%%   `{tracer, dtrace_tracer, State}' fires the VM probes; `dtrace_nif.so''s own
%%%   functions, registered with `raw_nif!(tracer ...)' as
%%%   `TracerCallback' and handed over by `dtrace_erl_tracer_nifs'
%%%   (entry.rs), so both modules share one set of semaphores</td></tr>
%%% <tr><td>`dyntrace' (`compat/')</td><td>`compat/dyntrace.so' (the same
%%%   object as `tracer/dtrace_tracer.so', another copy)</td><td>the same two
%%%   callbacks, for `{tracer, dyntrace, State}'</td></tr>
%%% </table>
%%% A NIF library belongs to one module, and erl_tracer calls a tracer
%%% module's callbacks only as NIFs of that module: hence the second
%%% library, which has no code of its own.
%%%
%%% == The user tag at this boundary ==
%%% Every NIF's tag argument is a {@link user_tag()}: a binary (this tag),
%%% `undefined' (no tag: NULL) or, for {@link i4s4/9} and
%%% {@link user_trace_n/10} only, `adopt' (the caller has no tag of its
%%% own: see dtrace_tag.hrl). `undef', OTP's absent probe argument, is never
%%% a tag.
%%% @end
-module(dtrace_nif).

-export([available/0, sinks/0, is_enabled/0, is_enabled/1, user_trace_s1/1,
         user_trace_i4s4/9, i4s4/9, user_trace_n/10]).
-export([span_enabled/0, span_begin/4, span_end/6, span_slow_end/1, span_slow/6,
         slow_span_threshold/0, set_slow_span_threshold/1, span_vm_flags/0, vm_mode/1]).
-export([efile_enabled/0, efile_entry/10, efile_return/6]).
-export([user_stack/3]).
-export([vm_listening/0, vm_flags/0, vm_call_probes/3, vm_function_spans/1, vm_port_name/3, vm_monitor_event/4,
         process_names/0, process_name/2]).
-export([provider_new/2, provider_fire/3, provider_fire/2, provider_is_enabled/2,
         provider_is_enabled/1, provider_is_enabled/3, provider_probe_is_enabled/2,
         provider_probe/2, provider_path/1, provider_delete/1]).
-export_type([user_tag/0]).
-ifdef(TEST). % the test hooks (their section below)
-export([test_panic/0, test_allocations/0, test_dof_force_active/0, test_block/1]).
-nifs([test_panic/0, test_allocations/0, test_dof_force_active/0, test_block/1]).
-endif.

-on_load(on_load/0).
-nifs([available/0, sinks/0, is_enabled/0, is_enabled/1, user_trace_s1/1,
       user_trace_i4s4/9, i4s4/9, user_trace_n/10,
       span_enabled/0, span_begin/4, span_end/6, span_slow_end/1, span_slow/6,
       slow_span_threshold/0, set_slow_span_threshold/1, span_vm_flags/0, vm_mode/1,
       efile_enabled/0, efile_entry/10, efile_return/6,
       user_stack/3, vm_listening/0, vm_flags/0, vm_call_probes/3, vm_function_spans/1, vm_port_name/3, vm_monitor_event/4,
       process_names/0, process_name/2, provider_new/2, provider_fire/3, provider_fire/2, provider_is_enabled/2,
       provider_is_enabled/1, provider_is_enabled/3, provider_probe_is_enabled/2,
       provider_probe/2, provider_path/1, provider_delete/1]).

-type user_tag() :: binary() | undefined | adopt.
%% The tag argument of a probe NIF (see the module doc): a binary, this
%% tag; `undefined', no tag; `adopt' (i4s4/9, user_trace_n/10), the caller
%% has none of its own and asks again with its adopted tag when answered
%% `adopt'.
-type integer_maybe() :: integer() | atom().
%% Any atom means "absent" (0).
-type iolist_maybe() :: iodata() | atom().
%% Any atom means "absent" (NULL).

-include("dtrace_libraries.hrl").

%%%===================================================================
%%% Loading
%%%===================================================================

on_load() ->
    Path = library_path(?DTRACE_NIF_LIBRARY),
    loaded(warning, "NIF not loaded, probes are disabled", Path, erlang:load_nif(Path, 0)).

%%%===================================================================
%%% User probes (user.rs): see dtrace
%%%===================================================================

-spec available() -> boolean().
available() ->
    stub(false).

-spec sinks() -> #{sdt := boolean(), lttng := true | {false, binary()}, dof := true | {false, binary()}}.
sinks() ->
    stub(#{sdt => false, lttng => {false, <<"NIF not loaded">>}, dof => {false, <<"NIF not loaded">>}}).

-spec is_enabled() -> boolean().
is_enabled() ->
    stub(false).

-spec is_enabled(Label :: term()) -> boolean().
is_enabled(_Label) ->
    stub(false).

-spec user_trace_s1(Message :: iodata()) -> boolean() | badarg.
user_trace_s1(_Message) ->
    stub(false).

-spec user_trace_i4s4(UserTag :: iolist_maybe(), I1 :: integer_maybe(), I2 :: integer_maybe(),
                      I3 :: integer_maybe(), I4 :: integer_maybe(), S1 :: iolist_maybe(),
                      S2 :: iolist_maybe(), S3 :: iolist_maybe(), S4 :: iolist_maybe()) ->
          boolean().
user_trace_i4s4(_UserTag, _I1, _I2, _I3, _I4, _S1, _S2, _S3, _S4) ->
    stub(false).

%% user_trace_i4s4/9 with the tag last (as p/N calls it); `adopt' when
%% enabled and the caller has no tag of its own (UserTag = adopt); `stack'
%% when it fired and dtrace_user__stack listens (p/N then calls
%% user_stack/3).
-spec i4s4(I1 :: integer_maybe(), I2 :: integer_maybe(), I3 :: integer_maybe(),
           I4 :: integer_maybe(), S1 :: iolist_maybe(), S2 :: iolist_maybe(),
           S3 :: iolist_maybe(), S4 :: iolist_maybe(), UserTag :: iolist_maybe()) ->
          boolean() | adopt | stack.
i4s4(_I1, _I2, _I3, _I4, _S1, _S2, _S3, _S4, _UserTag) ->
    stub(false).

%% Fires user_trace__n<Label>: badarg for a Label that is not an integer
%% in 0..1023 and error for 951..1023, both before the enabled check.
-spec user_trace_n(Label :: term(), I1 :: integer_maybe(), I2 :: integer_maybe(),
                   I3 :: integer_maybe(), I4 :: integer_maybe(), S1 :: iolist_maybe(),
                   S2 :: iolist_maybe(), S3 :: iolist_maybe(), S4 :: iolist_maybe(),
                   UserTag :: iolist_maybe()) ->
          boolean() | error | badarg | adopt | stack.
user_trace_n(_Label, _I1, _I2, _I3, _I4, _S1, _S2, _S3, _S4, _UserTag) ->
    stub(false).

%%%===================================================================
%%% Spans (span.rs): see dtrace:span/2
%%%===================================================================

%% true: span__begin or span__end listens (a full span); an integer: only
%% span__slow listens, and this is the begin time (CLOCK_MONOTONIC, ns) to
%% pass to span_slow_end/1; false: no span probe listens.
-spec span_enabled() -> boolean() | integer().
span_enabled() ->
    stub(false).

-spec span_begin(SpanId :: integer(), ParentId :: integer(), Kind :: iodata(),
                 UserTag :: binary() | undef) -> boolean().
span_begin(_SpanId, _ParentId, _Kind, _UserTag) ->
    stub(false).

%% Outcome: ok, or the class of the exception the span raised (span.rs
%% passes "error", "exit", "throw" for those atoms, "ok" for any other).
-spec span_end(SpanId :: integer(), ParentId :: integer(), Kind :: iodata(),
               DurationNs :: integer(), UserTag :: binary() | undef,
               Outcome :: dtrace:span_outcome()) -> boolean().
span_end(_SpanId, _ParentId, _Kind, _DurationNs, _UserTag, _Outcome) ->
    stub(false).

%% The nanoseconds since BeginNs (from span_enabled/0) if they are at least
%% the slow-span threshold and span__slow listens; false otherwise.
-spec span_slow_end(BeginNs :: integer()) -> false | non_neg_integer().
span_slow_end(_BeginNs) ->
    stub(false).

%% Fires span__slow (span__end's arguments) if a tracer listens.
-spec span_slow(SpanId :: integer(), ParentId :: integer(), Kind :: iodata() | atom(),
                DurationNs :: integer(), UserTag :: binary() | undef,
                Outcome :: dtrace:span_outcome()) -> boolean().
span_slow(_SpanId, _ParentId, _Kind, _DurationNs, _UserTag, _Outcome) ->
    stub(false).

-spec slow_span_threshold() -> pos_integer().
slow_span_threshold() ->
    stub(1000000).

%% Returns the previous threshold; badarg below 1.
-spec set_slow_span_threshold(Ns :: pos_integer()) -> pos_integer().
set_slow_span_threshold(_Ns) ->
    stub(1000000).

%% Fires dtrace_vm__mode ("manual" or "auto") if a tracer listens; badarg
%% for anything but a boolean.
-spec vm_mode(Manual :: boolean()) -> boolean().
vm_mode(_Manual) ->
    stub(false).

%% The trace flags the outermost span's process gets now (vm/mod.rs): those
%% of the feed rows on=spans whose span__vm_* probes listen.
-spec span_vm_flags() -> [atom()].
span_vm_flags() ->
    stub([]).

%%%===================================================================
%%% File I/O probes (efile.rs): see dtrace_file
%%%===================================================================

%% Is a tracer listening on any efile_drv__* probe?
-spec efile_enabled() -> boolean().
efile_enabled() ->
    stub(false).

%% Starts a file operation on scheduler ThreadId: fires efile_drv__entry and
%% efile_drv__int_entry (each if enabled) and returns the operation's
%% per-scheduler counter (the probes' `tag').
-spec efile_entry(ThreadId :: integer(), Command :: integer(), S1 :: iolist_maybe(),
                  S2 :: iolist_maybe(), I1 :: integer_maybe(), I2 :: integer_maybe(),
                  I3 :: integer_maybe(), I4 :: integer_maybe(), UserTag :: iolist_maybe(),
                  Device :: pid() | undefined) -> non_neg_integer().
efile_entry(_ThreadId, _Command, _S1, _S2, _I1, _I2, _I3, _I4, _UserTag, _Device) ->
    stub(0).

%% Ends operation {ThreadId, OpId}: fires efile_drv__int_return and
%% efile_drv__return (each if enabled). Reason is a POSIX atom when
%% Success is false.
-spec efile_return(ThreadId :: integer(), OpId :: integer(), Command :: integer(),
                   UserTag :: iolist_maybe(), Success :: boolean(), Reason :: term()) -> ok.
efile_return(_ThreadId, _OpId, _Command, _UserTag, _Success, _Reason) ->
    stub(ok).

%% Fires dtrace_user__stack (user.rs): Probe is the user probe's note name
%% (an atom), Stack the caller's stack as text (iodata), UserTag a binary
%% or undefined; false while nobody listens.
-spec user_stack(Probe :: atom(), Stack :: iodata(), UserTag :: binary() | undefined) -> boolean().
user_stack(_Probe, _Stack, _UserTag) ->
    stub(false).

%%%===================================================================
%%% VM probes (vm/): see dtrace_vm
%%%===================================================================

%% {ProcessFlags, PortFlags, Listened, Sources}: the trace flags automatic
%% mode sets now, the names of every probe and event with a listener, and
%% the sources without trace flags wanted now: spawn (the spawn BIFs' meta
%% patterns), node_monitor (a net_kernel:monitor_nodes/2 subscription),
%% system_monitor (the node's system monitor, if free).
-spec vm_listening() -> {[atom()], [atom()], [binary()], [spawn | node_monitor | system_monitor]}.
vm_listening() ->
    stub({[], [], [], []}).

%% {ProcessFlags, PortFlags}: every trace flag automatic mode may set
%% (the feed table's).
-spec vm_flags() -> {[atom()], [atom()]}.
vm_flags() ->
    stub({[], []}).

%% Keeps the name Port was opened with and the process it is connected to,
%% for port__command and port__exit (a port opened before its `open` event
%% could be traced); false when the table has no room for it.
-spec vm_port_name(Port :: port(), Name :: binary(), Owner :: pid()) -> boolean().
vm_port_name(_Port, _Name, _Owner) ->
    stub(false).

%% Fires the probes of the feed table's node_monitor or system_monitor rows
%% (Source) for one message dtrace_vm got: Tag is nodeup or nodedown
%% (Subject the node, Info {ThisNode, Type, Reason}), busy_port (Subject
%% the suspended pid, Info the port) or busy_dist_port (Info {Port,
%% RemoteNode | undefined, ThisNode}). true if a row listened.
-spec vm_monitor_event(Source :: node_monitor | system_monitor, Tag :: atom(), Subject :: term(),
                       Info :: term()) -> boolean().
vm_monitor_event(_Source, _Tag, _Subject, _Info) ->
    stub(false).

%% Which calls fire which function probes: Patterns are
%% {Module, Function | '_', Arity | '_', global | local}, Bifs and Nifs
%% {M, F, A} (their calls fire bif__entry, nif__entry).
-spec vm_call_probes(Patterns :: [tuple()], Bifs :: [mfa()], Nifs :: [mfa()]) -> ok.
vm_call_probes(_Patterns, _Bifs, _Nifs) ->
    stub(ok).

%% The functions whose outermost calls are spans (vm/function_spans.rs),
%% [{M, F, A}]; every open span is forgotten.
-spec vm_function_spans(Functions :: [mfa()]) -> ok.
vm_function_spans(_Functions) ->
    stub(ok).

%% false while no tracer listens to dtrace_process__name, else how many do
%% (vm/names.rs).
-spec process_names() -> false | pos_integer().
process_names() ->
    stub(false).

%% Fires dtrace_process__name(Pid, Name) if it listens.
-spec process_name(Pid :: pid(), Name :: binary()) -> boolean().
process_name(_Pid, _Name) ->
    stub(false).

%%%===================================================================
%%% Run-time providers (provider/nifs.rs): see dtrace_provider. Without the
%%% library no handle can exist: new/2 answers {error, unavailable} and
%%% the others raise what the NIF raises for a term that is not a handle.
%%%===================================================================

-spec provider_new(Provider :: term(), Probes :: term()) ->
          {ok, dtrace_provider:provider()} | {error, dtrace_provider:reason()}.
provider_new(_Provider, _Probes) ->
    stub({error, unavailable}).

-spec provider_fire(Provider :: dtrace_provider:provider(), ProbeName :: atom(), Args :: [term()]) ->
          boolean().
provider_fire(_Provider, _ProbeName, _Args) ->
    badarg().

-spec provider_fire(Probe :: dtrace_provider:probe(), Args :: [term()]) -> boolean().
provider_fire(_Probe, _Args) ->
    badarg().

-spec provider_is_enabled(Provider :: dtrace_provider:provider(), ProbeName :: atom()) -> boolean().
provider_is_enabled(_Provider, _ProbeName) ->
    badarg().

-spec provider_is_enabled(Provider :: dtrace_provider:provider(), ProbeName :: atom(),
                          ArgCount :: non_neg_integer()) -> boolean().
provider_is_enabled(_Provider, _ProbeName, _ArgCount) ->
    badarg().

-spec provider_probe_is_enabled(Probe :: dtrace_provider:probe(), ArgCount :: non_neg_integer()) -> boolean().
provider_probe_is_enabled(_Probe, _ArgCount) ->
    badarg().

-spec provider_is_enabled(Probe :: dtrace_provider:probe()) -> boolean().
provider_is_enabled(_Probe) ->
    badarg().

-spec provider_probe(Provider :: dtrace_provider:provider(), ProbeName :: atom()) ->
          dtrace_provider:probe().
provider_probe(_Provider, _ProbeName) ->
    badarg().

-spec provider_path(Handle :: dtrace_provider:provider() | dtrace_provider:probe()) -> binary().
provider_path(_Handle) ->
    badarg().

-spec provider_delete(Handle :: dtrace_provider:provider() | dtrace_provider:probe()) -> ok.
provider_delete(_Handle) ->
    badarg().

%%%===================================================================
%%% Test hooks: NIFs only in a library built with the cargo feature
%%% `test-hooks' (scripts/test-hooks-build.sh builds one, and this module
%%% with TEST defined: each NIF of a library needs its function here);
%%% elsewhere these stubs answer {error, no_test_hooks}. Compiled only with
%%% TEST (rebar3's test profile defines it), never in a production build.
%%%===================================================================

-ifdef(TEST).

%% Panics inside a NIF body: raises error:nif_panicked.
-spec test_panic() -> {error, no_test_hooks}.
test_panic() ->
    {error, no_test_hooks}.

%% The heap allocations made inside probe-path NIF bodies so far.
-spec test_allocations() -> non_neg_integer() | {error, no_test_hooks}.
test_allocations() ->
    stub({error, no_test_hooks}).

%% Every probe's check asks its DOF is-enabled site from now on, as once
%% the DOF is registered (make bench measures that check).
-spec test_dof_force_active() -> ok | {error, no_test_hooks}.
test_dof_force_active() ->
    stub({error, no_test_hooks}).

%% Sleeps Ms milliseconds in a system call, holding the normal scheduler
%% that runs it (a NIF that blocks, for "why was it slow").
-spec test_block(Ms :: 0..10000) -> ok | error | {error, no_test_hooks}.
test_block(_Ms) ->
    stub({error, no_test_hooks}).
-endif.

%%%===================================================================

stub(Default) ->
    ?NOT_LOADED(Default).

%% What a provider NIF's stub does: no handle exists without the library,
%% so it raises what the NIF raises for a term that is not a handle
%% (erlang:nif_error/1: see ?NOT_LOADED in dtrace_libraries.hrl).
badarg() ->
    erlang:nif_error(badarg).
