%%% @doc Dynamic-trace user probes for any stock BEAM.
%%%
%%% This module is OTP's `dyntrace' user-probe API (same functions, same
%%% arguments, same return values) backed by a NIF that carries its own
%%% USDT/SDT probes, provider `erlang'. OTP's own `dyntrace' only fires on a
%%% VM built with `--with-dynamic-trace', which no common distribution ships;
%%% this one fires on every VM, and bpftrace, perf, gdb and SystemTap see the
%%% probes in `priv/dtrace_nif.so'.
%%%
%%% == Safe in production ==
%%% A probe call with no tracer listening reads one semaphore in the NIF and
%%% returns `false': it does not look at its arguments, allocates nothing and
%%% sends nothing anywhere. Leave the calls in hot code.
%%% ```
%%% 1> dtrace:available().
%%% true
%%% 2> dtrace:put_tag(<<"req-42">>).
%%% undefined
%%% 3> dtrace:p(7, 8, "one", "four").      % nobody listening
%%% false
%%% '''
%%% Now, as root, attach a tracer to the node's OS process with the script
%%% shipped in `priv/' (docs/tracers.md has the other tracers):
%%% ```
%%% # priv/bin/dtrace-bpftrace -p 5821 priv/bpftrace/user-probe.bt
%%% Attaching 1 probe...
%%% <0.9.0> req-42 7 8 0 0 'one' 'four' '' ''
%%% '''
%%% The same call now returns `true', and the tracer prints pid, tag,
%%% i1..i4 and s1..s4. The count of `true' returns is the
%%% count of events the tracer received. Check for a listener before
%%% computing costly arguments with {@link is_enabled/0}.
%%%
%%% == Limits ==
%%% <ul>
%%% <li>Strings are at most 1024 bytes; a longer one, or one that is not an
%%%   iolist, reaches the tracer as NULL (never truncated). The NIF stops
%%%   reading an iolist as soon as it knows it is too long, after 4096
%%%   terms, or below 256 levels of nesting.</li>
%%% <li>Integers are signed 64-bit; a bignum reaches the tracer as 0.</li>
%%% <li>bpftrace older than 0.24 reads `arg0'..`arg5' only (pid, tag and
%%%   i1..i4 here): use `priv/bin/dtrace-bpftrace' (docs/tracers.md, "Arguments
%%%   past arg5").</li>
%%% <li>Tags are per process, kept in the process dictionary
%%%   (key <code>'$dtrace_tag'</code>); spread tags travel in the
%%%   sequential-trace token (see {@link spread_tag/1}).</li>
%%% </ul>
%%%
%%% Everything here is copied from OTP's `dyntrace' (runtime_tools,
%%% `dyntrace.erl' and `c_src/dyntrace.c'), except where a function's doc
%%% says otherwise.
%%% @end
-module(dtrace).

-export([available/0, sinks/0, is_enabled/0, is_enabled/1,
         user_trace_s1/1,
         p/0, p/1, p/2, p/3, p/4, p/5, p/6, p/7, p/8,
         pn/1, pn/2, pn/3, pn/4, pn/5, pn/6, pn/7, pn/8, pn/9]).
-export([put_tag/1, get_tag/0, get_tag_data/0, spread_tag/1, restore_tag/1]).
-export([user_trace_i4s4/9]).
-export([span/2, span_begin/1, span_end/1, span_end/2, slow_span_threshold/0, slow_span_threshold/1]).
%% The VM's own probes.
-export([vm_probes/0, vm_probes/1, function_probes/1, function_spans/1]).
-export([doctor/0, doctor/1]).

-include("dtrace_tag.hrl").

-type probe_arg() :: integer() | iodata().
%% An integer (for i1..i4) or an iolist/binary (for s1..s4).
-type n_probe_label() :: 0..1023.
%% Labels 0..950 have a probe, `user_trace__n<Label>'.
-type integer_maybe() :: integer() | atom().
%% Any atom means "absent" (0).
-type iolist_maybe() :: iodata() | atom().
%% Any atom means "absent" (NULL).
-type probe_result() :: boolean().
%% `false': not enabled (no tracer), or the NIF is not loaded.
%% `true': fired.
-type pn_result() :: boolean() | error | badarg.
%% As {@link probe_result()}, and for a bad label (checked before anything
%% else): `badarg' when it is not an integer in 0..1023, `error' for
%% 951..1023.
-type tag_state() :: {Flags :: 0 | 1, Tag :: binary() | []}.
%% What {@link spread_tag/1} returns and {@link restore_tag/1} takes.

-type span_kind() :: atom() | iodata().
%% What a span is: `db_query', `<<"http GET">>'. An atom is passed as its
%% name; an iolist of at most 1024 bytes as is; anything else as NULL.
-type span() :: dtrace_span:span().
%% What {@link span_begin/1} returns and {@link span_end/1} takes.
-type span_outcome() :: ok | error | exit | throw.
%% How a span ended, `span__end''s `outcome' argument (as a string): `ok',
%% or the class of the exception it raised.

-type vm_status() ::
        #{mode := auto | manual,
          poll_ms := pos_integer(),
          tracing := session | legacy,
          listening := [binary()],
          wanted_flags := #{processes := [atom()], ports := [atom()]},
          flags := #{processes := [atom()], ports := [atom()]},
          new_processes := ours | free | {taken, term()},
          spawn_meta := on | off | {taken, term()},
          exit_meta := on | off | {taken, term()},
          node_monitor := on | off,
          system_monitor := on | off | {taken, pid() | port()},
          send_code := on | off | {taken, term()},
          traced := non_neg_integer(),
          skipped := non_neg_integer(),
          gc_held_back := #{processes := non_neg_integer(), new_processes := boolean()},
          function_patterns := [function_pattern()],
          function_patterns_set := boolean(),
          function_spans := [mfa()],
          function_spans_set := boolean()}.
%% What {@link vm_probes/0} returns; see there.
-type function_pattern() :: {module(), atom() | '_', arity() | '_'}
                          | {module(), atom() | '_', arity() | '_', global | local}.
%% A pattern of {@link function_probes/1}.
-type function_probes_error() :: {bad_pattern, term()} | {all_modules, term()}
                               | {not_a_list, term()} | not_started.
%% Why {@link function_probes/1} refused its patterns.
-type function_spans_error() :: {bad_function, term()} | {too_many, pos_integer()}
                              | {not_a_list, term()} | not_started.
%% Why {@link function_spans/1} refused its functions.

-export_type([probe_arg/0, n_probe_label/0, probe_result/0, pn_result/0, tag_state/0, span_kind/0,
              span/0, span_outcome/0, vm_status/0, function_pattern/0]).

%%%===================================================================
%%% Status and the raw probes
%%%===================================================================

%% @doc `true' when probes can fire: the NIF is loaded on a platform with
%% SDT probes (Linux), or its LTTng-UST sink loaded ({@link sinks/0} says
%% which). `false' otherwise.
-spec available() -> boolean().
available() ->
    dtrace_nif:available().

%% @doc The sinks the probes fire in, and whether each works here:
%% <ul>
%% <li>`sdt': USDT/SDT notes, for bpftrace, perf, gdb, SystemTap and
%% DTrace's stapsdt provider (`dtrace -p PID', provider `erlang$target'):
%% `true' on Linux x86_64 and aarch64.</li>
%% <li>`lttng': LTTng-UST: `true' when the library was built with it and
%% `priv/libdtrace_lttng_tp.so' and the system's liblttng-ust loaded, else
%% `{false, Why}'.</li>
%% <li>`dof': DTrace's own registration, through which `erlang*:::' finds
%% every node, including nodes started after DTrace: `true' when the
%% catalogue was handed as DOF to DTrace's helper device
%% (`/dev/dtrace/helper': Linux with `dtprobed', illumos, FreeBSD) and the
%% kernel lets DTrace's is-enabled probes work; else `{false, Why}': no
%% helper device, the device refused the DOF, or kernel lockdown
%% (docs/tracers.md, "When DOF is not registered").</li>
%% </ul>
%% `Why' is a binary. {@link available/0} is `true' when `sdt' or `lttng'
%% works. Not in OTP's dyntrace (an extension). Without the NIF every sink
%% is `false' or `{false, <<"NIF not loaded">>}'.
-spec sinks() -> #{sdt := boolean(), lttng := true | {false, binary()}, dof := true | {false, binary()}}.
sinks() ->
    dtrace_nif:sinks().

%% @doc `true' while a tracer listens on `user_trace__i4s4', the probe of
%% {@link p/0}..{@link p/8}: one semaphore read, nothing else. For
%% arguments that are costly to compute:
%% ```
%% case dtrace:is_enabled() of
%%     true -> dtrace:p(Id, describe(State));
%%     false -> false
%% end
%% '''
%% Not in OTP's dyntrace (an extension). `false' when the NIF is not loaded.
-spec is_enabled() -> boolean().
is_enabled() ->
    dtrace_nif:is_enabled().

%% @doc `true' while a tracer listens on `user_trace__n<Label>', the probe
%% of `pn(Label, ...)'. `false' for anything that names no probe (not an
%% integer in 0..950). Not in OTP's dyntrace (an extension).
-spec is_enabled(Label :: term()) -> boolean().
is_enabled(Label) ->
    dtrace_nif:is_enabled(Label).

%% @doc Fires `user_trace__s1(char *message)' with `Message' (an iolist or
%% binary of at most 1024 bytes).
%%
%% Returns `false' when no tracer listens (the argument is not looked at),
%% `true' when fired, and `badarg' when a tracer listens and `Message' is
%% not an iolist of at most 1024 bytes (nothing fires). Deprecated in OTP
%% in favour of {@link p/1}; kept for compatibility.
-spec user_trace_s1(Message :: iodata()) -> boolean() | badarg.
user_trace_s1(Message) ->
    dtrace_nif:user_trace_s1(Message).

%% @doc The raw form behind {@link p/8}: fires `user_trace__i4s4' with the
%% caller's pid, `UserTag' and the arguments as given, without routing.
%%
%% `UserTag' and `S1'..`S4' are iolists of at most 1024 bytes, passed as
%% NULL otherwise (any atom means absent); `I1'..`I4' are integers, passed
%% as 0 unless they fit a signed 64-bit word. Returns `false' (not enabled)
%% or `true' (fired).
-spec user_trace_i4s4(UserTag :: iolist_maybe(), I1 :: integer_maybe(), I2 :: integer_maybe(),
                      I3 :: integer_maybe(), I4 :: integer_maybe(), S1 :: iolist_maybe(),
                      S2 :: iolist_maybe(), S3 :: iolist_maybe(), S4 :: iolist_maybe()) ->
          probe_result().
user_trace_i4s4(UserTag, I1, I2, I3, I4, S1, S2, S3, S4) ->
    dtrace_nif:user_trace_i4s4(UserTag, I1, I2, I3, I4, S1, S2, S3, S4).

%% The NIFs behind p/N and pn/N take the user tag last: the routing clauses
%% pass their arguments in the registers they arrived in (a leading tag
%% would rotate them: BEAM `swap's, about 4 ns each on OTP 25's JIT).

%%%===================================================================
%%% The VM's own probes
%%%===================================================================

%% @doc The status of the VM probes (`process__spawn', `message__send',
%% ...; see docs/vm-probes.md and {@link dtrace_vm}): a map with
%% <ul>
%% <li>`mode': `auto' (trace flags follow the tracers) or `manual';</li>
%% <li>`poll_ms': how often the semaphores are read, in milliseconds;</li>
%% <li>`tracing': how the probes trace: `session' (OTP 27 and later: in
%%   trace sessions of their own, `dtrace_auto' and `dtrace_spawn_meta',
%%   beside any other tracing of the same processes) or `legacy' (OTP 25
%%   and 26: as the one tracer a process may have, so processes another
%%   tracer traces are skipped; see docs/vm-probes.md);</li>
%% <li>`listening': the note names (binaries) of every probe of the library
%%   a tracer listens on now;</li>
%% <li>`wanted_flags' and `flags': `#{processes => [Flag], ports => [Flag]}',
%%   the trace flags those tracers need, and the ones set now;</li>
%% <li>`new_processes': `ours' (new processes get the flags), `free' (no
%%   flags wanted) or `{taken, Tracer}' (another tracer is the default
%%   tracer of new processes: they are left to it);</li>
%% <li>`spawn_meta': `on' while `process__spawn' is fed by meta tracing of
%%   the spawn BIFs, `off', or `{taken, Tracer}' (another tracer has a meta
%%   pattern on one of them: left alone);</li>
%% <li>`exit_meta': `on' while `process__exit_signal' is fed by meta
%%   tracing of `erlang:exit/2', `off', or `{taken, Tracer}' (another
%%   tracer has a meta pattern on it: left alone);</li>
%% <li>`send_code': `on' while `dtrace_message__send_code' has the send
%%   match spec that gives each send its sender's process dump, `off', or
%%   (OTP 25, 26, where that match spec is the node's) `{taken, Why}':
%%   another tracer traces sends, or set its own send match spec;</li>
%% <li>`node_monitor': `on' while `dist__monitor' is fed by a
%%   `net_kernel:monitor_nodes/2' subscription, else `off';</li>
%% <li>`system_monitor': `on' while `port__busy' and `dist__port_busy' are
%%   fed by the node's system monitor (`erlang:system_monitor/2', one per
%%   node), `off', or `{taken, Owner}': another process holds it, so those
%%   two probes are not fed; an operator's system monitor is never
%%   replaced;</li>
%% <li>`traced': processes traced by the automatic mode now; `skipped':
%%   processes another tracer (dbg, recon, ...) traces, left alone;</li>
%% <li>`gc_held_back': `#{processes => N, new_processes => Bool}': the
%%   processes (and whether new ones) automatic mode leaves untraced for
%%   GC, their GC probes silent, as another session traces them for it
%%   (OTP 27.0 to 29.1.1; docs/vm-probes.md, "Operators' tracing");</li>
%% <li>`function_patterns': what {@link function_probes/1} was given, and
%%   `function_patterns_set': whether their call-trace patterns (or the
%%   function spans') are set now;</li>
%% <li>`function_spans': what {@link function_spans/1} was given, and
%%   `function_spans_set': whether their patterns are set now.</li>
%% </ul>
%% Returns `{error, not_started}' when the `dtrace' application is not
%% running (automatic mode lives in it). Counting the traced processes
%% reads every process's tracer: a call costs about a microsecond per
%% process.
-spec vm_probes() -> vm_status() | {error, not_started}.
vm_probes() ->
    dtrace_vm:status().

%% @doc Switches automatic mode on (`auto') or off (`manual'). In manual
%% mode dtrace sets no trace flag (the ones it set are removed); trace
%% processes yourself with the library's tracer module, {@link
%% dtrace_tracer}, as OTP's LTTng build documents for `dyntrace' (which
%% works too):
%% ```
%% erlang:trace(Pid, true, [procs, {tracer, dtrace_tracer, []}])
%% '''
%% and the VM probes fire for those processes while a tracer listens.
%% Function probes follow {@link function_probes/1} in both modes. The
%% application environment `{dtrace, [{vm_probes, manual}]}' starts in
%% manual mode; this function sets it. Returns `ok', or `{error, not_started}'; raises `badarg'
%% for any other `Mode'.
-spec vm_probes(Mode) -> ok | {error, not_started} when Mode :: auto | manual.
vm_probes(Mode) when Mode =:= auto; Mode =:= manual ->
    dtrace_vm:set_mode(Mode);
vm_probes(Other) ->
    erlang:error(badarg, [Other]).

%% @doc Sets the functions whose calls and returns fire the function
%% probes, replacing the previous set; `[]' clears it. Each pattern is
%% `{Module, Function, Arity}' (`Function' and `Arity' may be the atom
%% `_', as in `erlang:trace_pattern/3'): calls of it from other modules
%% fire `global__function__entry'; or `{Module, Function, Arity, local}':
%% every call fires `local__function__entry' (erl_tracer does not say
%% whether a call was local). Returns and exceptions fire
%% `function__return'; a BIF fires `bif__entry' and `bif__return', a NIF
%% (`Module:module_info(nifs)') `nif__entry' and `nif__return' (OTP's JIT
%% fires those for dirty NIFs only; here every traced call). A preloaded
%% module's NIFs (`prim_file') cannot be call-traced: nothing fires.
%%
%% The call-trace patterns (`erlang:trace_pattern/3', with an
%% `exception_trace' match spec) are set only while a tracer listens to a
%% function probe, and removed when it leaves; the modules must be loaded
%% then. Trace patterns are shared by every tracer of the node: a pattern
%% set here replaces one an operator set on the same function. A module
%% `_' (every function of the node) is refused.
%%
%% The patterns are kept in the application environment (`function_probes'),
%% where `sys.config' may also set them.
%%
%% Returns `ok', `{error, {bad_pattern, P}}', `{error, {all_modules, P}}',
%% `{error, {not_a_list, Patterns}}' or `{error, not_started}'.
-spec function_probes(Patterns :: [function_pattern()]) -> ok | {error, function_probes_error()}.
function_probes(Patterns) ->
    dtrace_vm:function_probes(Patterns).

%% @doc Makes each outermost call of these functions a span, for code
%% that never calls {@link span/2}: "why was it slow" on a node as it
%% is. Replaces the previous set; `[]' clears it. Each function is
%% `{Module, Function, Arity}', exactly (no `_'), at most 64.
%%
%% A call is a span of kind `"Module:Function/Arity"' (as the VM probes
%% write an mfa), with no user tag (the tracer cannot read the process's
%% dictionary), from the call until it returns (outcome `ok') or an
%% exception leaves it (the class). A call of a function already open in
%% the same process (recursion) is part of that span; a call of another of
%% these functions inside it is a span of its own, nested. The span probes
%% fire as for {@link span/2}: `span__begin', `span__end', and
%% `span__slow' when the call lasted the slow-span threshold (so
%% priv/bpftrace/span-latency.bt, priv/bin/dtrace-slow-spans and the flight recorder
%% work on them). Span ids of function spans have bit 62 set.
%%
%% Only while a tracer listens to a span probe: automatic mode sets
%% call-trace patterns (`exception_trace', local calls included) on
%% these functions, and the `call' flag on every process it traces (as
%% for {@link function_probes/1}, in its own session on OTP 27: an
%% operator's patterns and flags stay theirs; on OTP 25 and 26 the trace
%% patterns are the node's). While a `span__vm_*' probe listens too, it
%% also sets their flags on every process it traces, and the NIF fires
%% them only for a process inside a function span. All of it is removed
%% within one poll of the last listener leaving. Each traced call costs
%% two trace events (BENCHMARKS.md, "Any running node"; bench/attach_bench.erl).
%%
%% Do not name a function that never returns, such as a server's loop
%% (`gen_server:loop/7'): with `exception_trace' each of its tail calls
%% keeps a frame, so the process's stack grows while the pattern is set
%% (as with `dbg''s `return_trace'). Name the callbacks (`handle_call/3').
%% Bounded: at most 16384 processes with an open span and 8 nested
%% function spans per process; past that no new span begins.
%%
%% The functions are kept in the application environment
%% (`function_spans'), where `sys.config' may also set them. Returns
%% `ok', `{error, {bad_function, F}}', `{error, {too_many, N}}',
%% `{error, {not_a_list, Functions}}' or `{error, not_started}'.
-spec function_spans(Functions :: [mfa()]) -> ok | {error, function_spans_error()}.
function_spans(Functions) ->
    dtrace_vm:function_spans(Functions).

%% @doc "Why is my probe silent?", from inside the node: prints one line per
%% check (`ok', `info', `warn', `FAIL', with the fix of each failure) and
%% returns `ok', or `{error, Checks}' naming the checks that failed. The
%% checks: the library loaded and still the file on disk under its path
%% (a build copied over a running node), the sinks (SDT, LTTng, DOF, each
%% with why not), the OS pid and its pid namespace, automatic mode, the
%% probes a tracer listens to now. The host's side (privileges, kernel,
%% tracer versions): priv/bin/dtrace-doctor PID, as root.
-spec doctor() -> ok | {error, Failed :: [atom(), ...]}.
doctor() ->
    dtrace_doctor:run().

%% @doc As {@link doctor/0} without printing: the findings, each
%% `#{level := ok | info | warn | fail, check := atom(), text := binary(),
%% fix => binary()}', in order (`Opts': `#{}', for later options).
-spec doctor(Opts :: #{}) -> [dtrace_doctor:finding()].
doctor(Opts) when is_map(Opts) ->
    dtrace_doctor:findings().

%%%===================================================================
%%% p/0..8: fire user_trace__i4s4
%%%===================================================================

%% @doc Fires `user_trace__i4s4' with no arguments: i1..i4 are 0 and s1..s4
%% NULL. `pid' is the caller's, `user_tag' the caller's tag or NULL.
%% Returns `false' (no tracer listening) or `true' (fired).
-spec p() -> probe_result().
p() ->
    ?FIRE_I4S4(undef, undef, undef, undef, undef, undef, undef, undef).

%% @doc Fires `user_trace__i4s4' with one argument: an integer fills i1,
%% anything else fills s1 (NULL unless an iolist of at most 1024 bytes).
%% Returns `false' or `true', as {@link p/0}.
-spec p(Arg1 :: probe_arg()) -> probe_result().
p(I1) when is_integer(I1) ->
    ?FIRE_I4S4(I1, undef, undef, undef, undef, undef, undef, undef);
p(S1) ->
    ?FIRE_I4S4(undef, undef, undef, undef, S1, undef, undef, undef).

%% @doc Fires `user_trace__i4s4': leading integers fill i1, i2; the rest
%% fill s1, s2 in order. As in OTP, the last clause takes anything, so
%% `p("x", 1)' passes s1 = "x" and s2 = NULL (`1' is not an iolist).
%% Returns `false' or `true', as {@link p/0}.
-spec p(Arg1 :: probe_arg(), Arg2 :: probe_arg()) -> probe_result().
p(I1, I2) when is_integer(I1), is_integer(I2) ->
    ?FIRE_I4S4(I1, I2, undef, undef, undef, undef, undef, undef);
p(I1, S1) when is_integer(I1) ->
    ?FIRE_I4S4(I1, undef, undef, undef, S1, undef, undef, undef);
p(S1, S2) ->
    ?FIRE_I4S4(undef, undef, undef, undef, S1, S2, undef, undef).

%% @doc Fires `user_trace__i4s4' with three arguments, routed as in
%% {@link p/2}. Returns `false' or `true'.
-spec p(Arg1 :: probe_arg(), Arg2 :: probe_arg(), Arg3 :: probe_arg()) -> probe_result().
p(I1, I2, I3) when is_integer(I1), is_integer(I2), is_integer(I3) ->
    ?FIRE_I4S4(I1, I2, I3, undef, undef, undef, undef, undef);
p(I1, I2, S1) when is_integer(I1), is_integer(I2) ->
    ?FIRE_I4S4(I1, I2, undef, undef, S1, undef, undef, undef);
p(I1, S1, S2) when is_integer(I1) ->
    ?FIRE_I4S4(I1, undef, undef, undef, S1, S2, undef, undef);
p(S1, S2, S3) ->
    ?FIRE_I4S4(undef, undef, undef, undef, S1, S2, S3, undef).

%% @doc Fires `user_trace__i4s4' with four arguments, routed as in
%% {@link p/2}. Returns `false' or `true'.
-spec p(Arg1 :: probe_arg(), Arg2 :: probe_arg(), Arg3 :: probe_arg(), Arg4 :: probe_arg()) ->
          probe_result().
p(I1, I2, I3, I4) when is_integer(I1), is_integer(I2), is_integer(I3), is_integer(I4) ->
    ?FIRE_I4S4(I1, I2, I3, I4, undef, undef, undef, undef);
p(I1, I2, I3, S1) when is_integer(I1), is_integer(I2), is_integer(I3) ->
    ?FIRE_I4S4(I1, I2, I3, undef, S1, undef, undef, undef);
p(I1, I2, S1, S2) when is_integer(I1), is_integer(I2) ->
    ?FIRE_I4S4(I1, I2, undef, undef, S1, S2, undef, undef);
p(I1, S1, S2, S3) when is_integer(I1) ->
    ?FIRE_I4S4(I1, undef, undef, undef, S1, S2, S3, undef);
p(S1, S2, S3, S4) ->
    ?FIRE_I4S4(undef, undef, undef, undef, S1, S2, S3, S4).

%% @doc Fires `user_trace__i4s4' with five arguments. From five arguments
%% on, the integers must come first (at most four of them, then strings):
%% any other order raises `function_clause', as in OTP.
%% Returns `false' or `true'.
-spec p(Arg1 :: probe_arg(), Arg2 :: probe_arg(), Arg3 :: probe_arg(), Arg4 :: probe_arg(),
        Arg5 :: probe_arg()) ->
          probe_result().
p(I1, I2, I3, I4, S1) when is_integer(I1), is_integer(I2), is_integer(I3), is_integer(I4) ->
    ?FIRE_I4S4(I1, I2, I3, I4, S1, undef, undef, undef);
p(I1, I2, I3, S1, S2) when is_integer(I1), is_integer(I2), is_integer(I3) ->
    ?FIRE_I4S4(I1, I2, I3, undef, S1, S2, undef, undef);
p(I1, I2, S1, S2, S3) when is_integer(I1), is_integer(I2) ->
    ?FIRE_I4S4(I1, I2, undef, undef, S1, S2, S3, undef);
p(I1, S1, S2, S3, S4) when is_integer(I1) ->
    ?FIRE_I4S4(I1, undef, undef, undef, S1, S2, S3, S4).

%% @doc Fires `user_trace__i4s4' with six arguments, integers first (see
%% {@link p/5}). Returns `false' or `true'.
-spec p(Arg1 :: probe_arg(), Arg2 :: probe_arg(), Arg3 :: probe_arg(), Arg4 :: probe_arg(),
        Arg5 :: probe_arg(), Arg6 :: probe_arg()) ->
          probe_result().
p(I1, I2, I3, I4, S1, S2) when is_integer(I1), is_integer(I2), is_integer(I3), is_integer(I4) ->
    ?FIRE_I4S4(I1, I2, I3, I4, S1, S2, undef, undef);
p(I1, I2, I3, S1, S2, S3) when is_integer(I1), is_integer(I2), is_integer(I3) ->
    ?FIRE_I4S4(I1, I2, I3, undef, S1, S2, S3, undef);
p(I1, I2, S1, S2, S3, S4) when is_integer(I1), is_integer(I2) ->
    ?FIRE_I4S4(I1, I2, undef, undef, S1, S2, S3, S4).

%% @doc Fires `user_trace__i4s4' with seven arguments, integers first (see
%% {@link p/5}). Returns `false' or `true'.
-spec p(Arg1 :: probe_arg(), Arg2 :: probe_arg(), Arg3 :: probe_arg(), Arg4 :: probe_arg(),
        Arg5 :: probe_arg(), Arg6 :: probe_arg(), Arg7 :: probe_arg()) ->
          probe_result().
p(I1, I2, I3, I4, S1, S2, S3) when is_integer(I1), is_integer(I2), is_integer(I3), is_integer(I4) ->
    ?FIRE_I4S4(I1, I2, I3, I4, S1, S2, S3, undef);
p(I1, I2, I3, S1, S2, S3, S4) when is_integer(I1), is_integer(I2), is_integer(I3) ->
    ?FIRE_I4S4(I1, I2, I3, undef, S1, S2, S3, S4).

%% @doc Fires `user_trace__i4s4' with all eight arguments: four integers,
%% then four strings. Returns `false' or `true'.
-spec p(Arg1 :: integer(), Arg2 :: integer(), Arg3 :: integer(), Arg4 :: integer(),
        Arg5 :: probe_arg(), Arg6 :: probe_arg(), Arg7 :: probe_arg(), Arg8 :: probe_arg()) ->
          probe_result().
p(I1, I2, I3, I4, S1, S2, S3, S4) when is_integer(I1), is_integer(I2), is_integer(I3), is_integer(I4) ->
    ?FIRE_I4S4(I1, I2, I3, I4, S1, S2, S3, S4).

%%%===================================================================
%%% pn/1..9: fire user_trace__n<Label>
%%%===================================================================

%% @doc Fires `user_trace__n<Label>' with no arguments; the argument layout
%% is `user_trace__i4s4''s. `Label' in 0..950 names a probe.
%%
%% Returns `badarg' when `Label' is not an integer in 0..1023 and `error'
%% for 951..1023 (both checked before the enabled check, as in OTP);
%% otherwise `false' (not enabled) or `true' (fired).
-spec pn(Label :: n_probe_label()) -> pn_result().
pn(Label) ->
    ?FIRE_N(Label, undef, undef, undef, undef, undef, undef, undef, undef).

%% @doc `pn' with one argument, routed as in {@link p/1}; results as
%% {@link pn/1}.
-spec pn(Label :: n_probe_label(), Arg1 :: probe_arg()) -> pn_result().
pn(Label, I1) when is_integer(I1) ->
    ?FIRE_N(Label, I1, undef, undef, undef, undef, undef, undef, undef);
pn(Label, S1) ->
    ?FIRE_N(Label, undef, undef, undef, undef, S1, undef, undef, undef).

%% @doc `pn' with two arguments, routed as in {@link p/2}; results as
%% {@link pn/1}.
-spec pn(Label :: n_probe_label(), Arg1 :: probe_arg(), Arg2 :: probe_arg()) -> pn_result().
pn(Label, I1, I2) when is_integer(I1), is_integer(I2) ->
    ?FIRE_N(Label, I1, I2, undef, undef, undef, undef, undef, undef);
pn(Label, I1, S1) when is_integer(I1) ->
    ?FIRE_N(Label, I1, undef, undef, undef, S1, undef, undef, undef);
pn(Label, S1, S2) ->
    ?FIRE_N(Label, undef, undef, undef, undef, S1, S2, undef, undef).

%% @doc `pn' with three arguments, routed as in {@link p/3}; results as
%% {@link pn/1}.
-spec pn(Label :: n_probe_label(), Arg1 :: probe_arg(), Arg2 :: probe_arg(), Arg3 :: probe_arg()) ->
          pn_result().
pn(Label, I1, I2, I3) when is_integer(I1), is_integer(I2), is_integer(I3) ->
    ?FIRE_N(Label, I1, I2, I3, undef, undef, undef, undef, undef);
pn(Label, I1, I2, S1) when is_integer(I1), is_integer(I2) ->
    ?FIRE_N(Label, I1, I2, undef, undef, S1, undef, undef, undef);
pn(Label, I1, S1, S2) when is_integer(I1) ->
    ?FIRE_N(Label, I1, undef, undef, undef, S1, S2, undef, undef);
pn(Label, S1, S2, S3) ->
    ?FIRE_N(Label, undef, undef, undef, undef, S1, S2, S3, undef).

%% @doc `pn' with four arguments, routed as in {@link p/4}; results as
%% {@link pn/1}.
-spec pn(Label :: n_probe_label(), Arg1 :: probe_arg(), Arg2 :: probe_arg(),
         Arg3 :: probe_arg(), Arg4 :: probe_arg()) ->
          pn_result().
pn(Label, I1, I2, I3, I4) when is_integer(I1), is_integer(I2), is_integer(I3), is_integer(I4) ->
    ?FIRE_N(Label, I1, I2, I3, I4, undef, undef, undef, undef);
pn(Label, I1, I2, I3, S1) when is_integer(I1), is_integer(I2), is_integer(I3) ->
    ?FIRE_N(Label, I1, I2, I3, undef, S1, undef, undef, undef);
pn(Label, I1, I2, S1, S2) when is_integer(I1), is_integer(I2) ->
    ?FIRE_N(Label, I1, I2, undef, undef, S1, S2, undef, undef);
pn(Label, I1, S1, S2, S3) when is_integer(I1) ->
    ?FIRE_N(Label, I1, undef, undef, undef, S1, S2, S3, undef);
pn(Label, S1, S2, S3, S4) ->
    ?FIRE_N(Label, undef, undef, undef, undef, S1, S2, S3, S4).

%% @doc `pn' with five arguments, integers first (see {@link p/5});
%% results as {@link pn/1}.
-spec pn(Label :: n_probe_label(), Arg1 :: probe_arg(), Arg2 :: probe_arg(),
         Arg3 :: probe_arg(), Arg4 :: probe_arg(), Arg5 :: probe_arg()) ->
          pn_result().
pn(Label, I1, I2, I3, I4, S1) when is_integer(I1), is_integer(I2), is_integer(I3), is_integer(I4) ->
    ?FIRE_N(Label, I1, I2, I3, I4, S1, undef, undef, undef);
pn(Label, I1, I2, I3, S1, S2) when is_integer(I1), is_integer(I2), is_integer(I3) ->
    ?FIRE_N(Label, I1, I2, I3, undef, S1, S2, undef, undef);
pn(Label, I1, I2, S1, S2, S3) when is_integer(I1), is_integer(I2) ->
    ?FIRE_N(Label, I1, I2, undef, undef, S1, S2, S3, undef);
pn(Label, I1, S1, S2, S3, S4) when is_integer(I1) ->
    ?FIRE_N(Label, I1, undef, undef, undef, S1, S2, S3, S4).

%% @doc `pn' with six arguments, integers first (see {@link p/5});
%% results as {@link pn/1}.
-spec pn(Label :: n_probe_label(), Arg1 :: probe_arg(), Arg2 :: probe_arg(),
         Arg3 :: probe_arg(), Arg4 :: probe_arg(), Arg5 :: probe_arg(), Arg6 :: probe_arg()) ->
          pn_result().
pn(Label, I1, I2, I3, I4, S1, S2) when is_integer(I1), is_integer(I2), is_integer(I3), is_integer(I4) ->
    ?FIRE_N(Label, I1, I2, I3, I4, S1, S2, undef, undef);
pn(Label, I1, I2, I3, S1, S2, S3) when is_integer(I1), is_integer(I2), is_integer(I3) ->
    ?FIRE_N(Label, I1, I2, I3, undef, S1, S2, S3, undef);
pn(Label, I1, I2, S1, S2, S3, S4) when is_integer(I1), is_integer(I2) ->
    ?FIRE_N(Label, I1, I2, undef, undef, S1, S2, S3, S4).

%% @doc `pn' with seven arguments, integers first (see {@link p/5});
%% results as {@link pn/1}.
-spec pn(Label :: n_probe_label(), Arg1 :: probe_arg(), Arg2 :: probe_arg(),
         Arg3 :: probe_arg(), Arg4 :: probe_arg(), Arg5 :: probe_arg(), Arg6 :: probe_arg(),
         Arg7 :: probe_arg()) ->
          pn_result().
pn(Label, I1, I2, I3, I4, S1, S2, S3) when is_integer(I1), is_integer(I2), is_integer(I3), is_integer(I4) ->
    ?FIRE_N(Label, I1, I2, I3, I4, S1, S2, S3, undef);
pn(Label, I1, I2, I3, S1, S2, S3, S4) when is_integer(I1), is_integer(I2), is_integer(I3) ->
    ?FIRE_N(Label, I1, I2, I3, undef, S1, S2, S3, S4).

%% @doc `pn' with all eight arguments: four integers, then four strings;
%% results as {@link pn/1}.
-spec pn(Label :: n_probe_label(), Arg1 :: integer(), Arg2 :: integer(), Arg3 :: integer(),
         Arg4 :: integer(), Arg5 :: probe_arg(), Arg6 :: probe_arg(), Arg7 :: probe_arg(),
         Arg8 :: probe_arg()) ->
          pn_result().
pn(Label, I1, I2, I3, I4, S1, S2, S3, S4) when is_integer(I1), is_integer(I2), is_integer(I3), is_integer(I4) ->
    ?FIRE_N(Label, I1, I2, I3, I4, S1, S2, S3, S4).

%%%===================================================================
%%% Spans: span__begin / span__end
%%%===================================================================
%%% A span is a piece of work: a kind, an id unique on the node, the id
%%% of the span it runs inside (0: none) and, at its end, its duration.
%%% `span__begin(proc, user_tag, span_id, parent_id, kind)' fires when it
%%% starts and `span__end(proc, user_tag, span_id, parent_id, kind,
%%% duration_ns, outcome)' when it ends, `outcome' saying how: "ok", or
%%% "error", "exit" or "throw" when the span raised (telemetry's span
%%% `exception' event, as a probe argument); both are also the LTTng events
%%% `org_erlang_dtrace:span_begin' and `span_end'. Not in OTP's dyntrace
%%% (an extension); every argument is in arg0..arg6, so any bpftrace reads
%%% them (priv/bpftrace/span-latency.bt).
%%%
%%% `span__slow' (LTTng `org_erlang_dtrace:span_slow') has `span__end''s
%%% arguments and fires at a span's end only when it lasted at least the
%%% node's slow-span threshold ({@link slow_span_threshold/0}, 1 ms unless
%%% set, in the application environment `slow_span_us' or with
%%% {@link slow_span_threshold/1}). While it is the only span probe
%%% listened to (the flight recorder's default events), a span fires
%%% nothing below the threshold and costs two clock reads (about 60 ns,
%%% BENCHMARKS.md), the ids are not assigned (0) and spans are not nested:
%%% JFR's way of staying on, where a duration event below its threshold is
%%% never written.

%% @doc Runs `Fun()' as a span of `Kind' and returns what it returns (or
%% raises what it raises, with its stack trace). While no tracer listens
%% on `span__begin', `span__end' or `span__slow' this costs one disabled
%% probe: `Fun' runs untouched, with no clock read. While one listens on
%% `span__begin' or `span__end', `span__begin' fires before `Fun' runs and
%% `span__end', with the duration in nanoseconds (monotonic clock), after
%% it returns (outcome "ok") or raises (outcome "error", "exit" or "throw",
%% the exception's class); `span__slow' too if it listens and the span
%% lasted the threshold. While only `span__slow' listens, the span fires it if it
%% lasted the threshold and nothing otherwise (see above). Spans nest: a span started inside `Fun' in the
%% same process names this one as its parent. The user tag passed is the
%% caller's ({@link get_tag_data/0}) when the span begins. While a tracer
%% listens to a `span__vm_*' probe ("why was it slow":
%% priv/bin/dtrace-slow-spans, the flight recorder), the outermost span's
%% process is traced for the span's time (scheduling, GC, messages; the
%% cost: docs/operators.md, "What it costs the node").
%% ```
%% dtrace:span(db_query, fun() -> db:query(Sql) end)
%% '''
-spec span(Kind, Fun) -> Result when
      Kind :: span_kind(), Fun :: fun(() -> Result), Result :: term().
span(Kind, Fun) when is_function(Fun, 0) ->
    %% The disabled path here, as before the spans had a module: one NIF
    %% call, then Fun.
    case dtrace_nif:span_enabled() of
        false -> Fun();
        Enabled -> dtrace_span:span(Kind, Fun, Enabled)
    end.

%% @doc Begins a span of `Kind' that another call (in this process or
%% another, or another node) ends with {@link span_end/1}: for work that
%% crosses processes. Fires `span__begin' if a tracer listens and returns
%% the span; while nobody listens it returns a span that `span_end/1'
%% ignores, at the cost of one disabled probe. Its parent is the span/2
%% running in the caller, if any; it does not become the parent of later
%% spans.
-spec span_begin(Kind :: span_kind()) -> span().
span_begin(Kind) ->
    dtrace_span:span_begin(Kind).

%% @doc Ends a span {@link span_begin/1} returned, as having succeeded:
%% `span_end(Span, ok)'.
-spec span_end(Span :: span()) -> boolean().
span_end(Span) ->
    span_end(Span, ok).

%% @doc Ends a span {@link span_begin/1} returned, saying how it ended:
%% `ok', or `error', `exit' or `throw' for work that failed (the classes
%% of Erlang's exceptions, as {@link span/2} reports a fun that raised).
%% Fires `span__end' with the span's id, parent, kind and user tag (those
%% of its beginning), the calling process, the nanoseconds since it began
%% and the outcome as a string, and `span__slow' with the same if it
%% listens and they are at least the slow-span threshold. Returns `true'
%% when `span__end' fired (or, for a span begun while only `span__slow'
%% listened, `span__slow'), `false' when nobody listens or the span began
%% while nobody listened. Raises `badarg' for anything that is not a span
%% or an outcome.
-spec span_end(Span :: span(), Outcome :: span_outcome()) -> boolean().
span_end(Span, Outcome) when Outcome =:= ok; Outcome =:= error; Outcome =:= exit; Outcome =:= throw ->
    case dtrace_span:span_end(Span, Outcome) of
        badarg -> erlang:error(badarg, [Span, Outcome]);
        Fired -> Fired
    end;
span_end(Span, Outcome) ->
    erlang:error(badarg, [Span, Outcome]).

%% @doc The node's slow-span threshold in microseconds: `span__slow' fires
%% for spans at least this long. 1000 (1 ms) unless the application
%% environment `slow_span_us' or {@link slow_span_threshold/1} set it.
-spec slow_span_threshold() -> Microseconds :: pos_integer().
slow_span_threshold() ->
    dtrace_span:slow_span_threshold().

%% @doc Sets the node's slow-span threshold to `Microseconds' (a positive
%% integer, else `badarg') and returns the previous one. Node-wide: every
%% tracer of `span__slow' (and every flight recorder, whose default events
%% include it) sees spans at least this long.
-spec slow_span_threshold(Microseconds :: pos_integer()) -> Previous :: pos_integer().
slow_span_threshold(Us) when is_integer(Us), Us >= 1, Us =< 1 bsl 40 ->
    dtrace_span:set_slow_span_threshold(Us);
slow_span_threshold(Us) ->
    erlang:error(badarg, [Us]).

%%%===================================================================
%%% User tags
%%%===================================================================
%%% A process's own tag (put_tag/1) lives in its process dictionary; a
%%% spread tag travels in its sequential-trace token (dtrace_tag).

%% @doc Sets the calling process's own user tag, which every probe it
%% fires passes as `user_tag'. `Data' is chardata, converted with
%% `unicode:characters_to_binary/1' as in OTP; `undefined' clears the tag
%% (OTP's spec allows it; OTP's implementation raises). While spreading is
%% on (see {@link spread_tag/1}) the new tag is the one spread.
%%
%% Returns the previous own tag (a binary) or `undefined'. Raises `badarg'
%% if `Data' is not valid chardata. A tag over 1024 bytes is kept but
%% reaches tracers as NULL.
-spec put_tag(undefined | unicode:chardata()) -> binary() | undefined.
put_tag(Data) ->
    dtrace_tag:put_tag(Data).

%% @doc The calling process's own user tag, or `undefined'. A new process
%% has none; a tag adopted through spreading is not its own.
-spec get_tag() -> binary() | undefined.
get_tag() ->
    dtrace_tag:get_tag().

%% @doc The process's own tag if it has one, otherwise the tag it adopted
%% from the last message it received (see {@link spread_tag/1}),
%% otherwise `undefined'. This is the tag its probes pass.
-spec get_tag_data() -> binary() | undefined.
get_tag_data() ->
    dtrace_tag:get_tag_data().

%% @doc Turns spreading of the caller's tag on (`true') or off (`false').
%%
%% While on, the messages the process sends carry its own tag; a receiver
%% without a tag of its own adopts it ({@link get_tag_data/0} returns it and
%% its probes pass it), and spreads it further with the messages it sends,
%% to processes and nodes alike. A process that receives a message without
%% a tag drops an adopted tag but keeps its own. A process spawned by a
%% spreading one starts with the tag adopted.
%%
%% Returns the previous state, for {@link restore_tag/1}: `{Flags, Tag}',
%% `Flags' 1 while spreading and 0 otherwise, `Tag' the tag the process's
%% probes passed ({@link get_tag_data/0}) or `[]'. Raises `badarg' for
%% anything but a boolean.
%%
%% Spreading uses the process's sequential-trace token (as OTP's
%% dynamic-trace build did); see docs/instrumenting.md for how this meets an
%% application's own use of `seq_trace'.
-spec spread_tag(Spread :: boolean()) -> tag_state().
spread_tag(Spread) ->
    dtrace_tag:spread_tag(Spread).

%% @doc Restores a state returned by {@link spread_tag/1}, in this or
%% another process: the tag becomes the process's own tag (none for `[]'),
%% and spreading is on or off as it was. `true' is accepted and changes
%% nothing, as in OTP. Returns `true'; raises `badarg' for a bad state.
-spec restore_tag(State :: true | {Flags :: non_neg_integer(), Tag :: binary() | []}) -> true.
restore_tag(State) ->
    dtrace_tag:restore_tag(State).