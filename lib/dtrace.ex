defmodule DTrace do
  @moduledoc """
  Dynamic-trace user probes for any stock BEAM, from Elixir.

  A thin layer over the Erlang module `:dtrace`, which is canonical: OTP's
  `dyntrace` API (same arguments, same return values) backed by a NIF with
  its own USDT/SDT probes, provider `erlang`. While no tracer listens, a
  probe call reads one semaphore and returns `false`; with one attached
  (bpftrace, perf, gdb, SystemTap) or an LTTng session recording its event
  (provider `org_erlang_dtrace`), it fires and returns `true`.

      iex> DTrace.available?()
      true
      iex> DTrace.p(42, "nobody listening")
      false

  Arguments: up to four integers (64-bit; anything else is passed as 0),
  then up to four strings (binaries or iolists within the limits of
  `:dtrace`'s module doc; anything else is passed as NULL). Probe functions return `true` (fired),
  `false` (not enabled), and `pn/1..9` also `:badarg` (a label that is not
  an integer in 0..1023) or `:error` (951..1023). They never raise, except
  `FunctionClauseError` from `p/5..8` and `pn/6..9` when a string comes
  before an integer, as in OTP.

  For arguments that are costly to compute, `lazy/1` evaluates them only
  while a tracer listens.
  """

  @typedoc "An integer (i1..i4) or a binary/iolist (s1..s4)."
  @type probe_arg :: integer() | iodata()
  @typedoc "Labels 0..950 name `user_trace__n0` .. `user_trace__n950`."
  @type label :: 0..1023
  @typedoc "`true` fired; `false` not enabled; `:badarg`/`:error` see `pn/1`."
  @type result :: boolean() | :badarg | :error
  @typedoc "What `spread_tag/1` returns and `restore_tag/1` takes."
  @type tag_state :: {non_neg_integer(), binary() | []}

  @doc "`true` when probes can fire: the NIF is loaded with SDT probes or its LTTng sink."
  @spec available?() :: boolean()
  def available?, do: :dtrace.available()

  @doc """
  The sinks probes fire in and whether each works here: `:sdt` (USDT/SDT
  notes, `true` on Linux x86_64 and aarch64), `:lttng` (`true`, or
  `{false, why}` with the reason as a binary) and `:dof` (DTrace's own
  registration through its helper device, so that `erlang*:::` sees every
  node: `true`, or `{false, why}`). See `:dtrace.sinks/0`.
  """
  @spec sinks() :: %{sdt: boolean(), lttng: true | {false, binary()}, dof: true | {false, binary()}}
  def sinks, do: :dtrace.sinks()

  @doc """
  `true` while a tracer listens on `user_trace__i4s4` (the probe of `p/0..8`),
  or, given a label, on `user_trace__n<label>`. One semaphore read.

      iex> DTrace.enabled?()
      false
      iex> DTrace.enabled?(7)
      false
  """
  @spec enabled?() :: boolean()
  def enabled?, do: :dtrace.is_enabled()
  @spec enabled?(term()) :: boolean()
  def enabled?(label), do: :dtrace.is_enabled(label)

  @doc """
  Fires `user_trace__i4s4` with the caller's pid and user tag and up to eight
  arguments: leading integers fill i1..i4, the rest fill s1..s4 (OTP's
  `dyntrace:p/N` routing). Returns `true` when fired, `false` when no tracer
  listens.

      iex> DTrace.p()
      false
      iex> DTrace.p(1, 2, "get", "user:42")
      false
  """
  @spec p() :: result()
  def p, do: :dtrace.p()
  @spec p(probe_arg()) :: result()
  def p(a1), do: :dtrace.p(a1)
  @spec p(probe_arg(), probe_arg()) :: result()
  def p(a1, a2), do: :dtrace.p(a1, a2)
  @spec p(probe_arg(), probe_arg(), probe_arg()) :: result()
  def p(a1, a2, a3), do: :dtrace.p(a1, a2, a3)
  @spec p(probe_arg(), probe_arg(), probe_arg(), probe_arg()) :: result()
  def p(a1, a2, a3, a4), do: :dtrace.p(a1, a2, a3, a4)
  @spec p(probe_arg(), probe_arg(), probe_arg(), probe_arg(), probe_arg()) :: result()
  def p(a1, a2, a3, a4, a5), do: :dtrace.p(a1, a2, a3, a4, a5)
  @spec p(probe_arg(), probe_arg(), probe_arg(), probe_arg(), probe_arg(), probe_arg()) ::
          result()
  def p(a1, a2, a3, a4, a5, a6), do: :dtrace.p(a1, a2, a3, a4, a5, a6)
  @spec p(probe_arg(), probe_arg(), probe_arg(), probe_arg(), probe_arg(), probe_arg(),
          probe_arg()) :: result()
  def p(a1, a2, a3, a4, a5, a6, a7), do: :dtrace.p(a1, a2, a3, a4, a5, a6, a7)
  @spec p(integer(), integer(), integer(), integer(), probe_arg(), probe_arg(), probe_arg(),
          probe_arg()) :: result()
  def p(a1, a2, a3, a4, a5, a6, a7, a8), do: :dtrace.p(a1, a2, a3, a4, a5, a6, a7, a8)

  @doc """
  Fires `user_trace__n<label>` with the same argument layout as `p/0..8`.
  Returns `:badarg` for a label that is not an integer in 0..1023 and
  `:error` for 951..1023, whatever the probe's state; otherwise `true` or
  `false`.

      iex> DTrace.pn(3, 10, "begin")
      false
      iex> DTrace.pn(1000)
      :error
  """
  @spec pn(label()) :: result()
  def pn(label), do: :dtrace.pn(label)
  @spec pn(label(), probe_arg()) :: result()
  def pn(label, a1), do: :dtrace.pn(label, a1)
  @spec pn(label(), probe_arg(), probe_arg()) :: result()
  def pn(label, a1, a2), do: :dtrace.pn(label, a1, a2)
  @spec pn(label(), probe_arg(), probe_arg(), probe_arg()) :: result()
  def pn(label, a1, a2, a3), do: :dtrace.pn(label, a1, a2, a3)
  @spec pn(label(), probe_arg(), probe_arg(), probe_arg(), probe_arg()) :: result()
  def pn(label, a1, a2, a3, a4), do: :dtrace.pn(label, a1, a2, a3, a4)
  @spec pn(label(), probe_arg(), probe_arg(), probe_arg(), probe_arg(), probe_arg()) :: result()
  def pn(label, a1, a2, a3, a4, a5), do: :dtrace.pn(label, a1, a2, a3, a4, a5)
  @spec pn(label(), probe_arg(), probe_arg(), probe_arg(), probe_arg(), probe_arg(),
           probe_arg()) :: result()
  def pn(label, a1, a2, a3, a4, a5, a6), do: :dtrace.pn(label, a1, a2, a3, a4, a5, a6)
  @spec pn(label(), probe_arg(), probe_arg(), probe_arg(), probe_arg(), probe_arg(),
           probe_arg(), probe_arg()) :: result()
  def pn(label, a1, a2, a3, a4, a5, a6, a7), do: :dtrace.pn(label, a1, a2, a3, a4, a5, a6, a7)
  @spec pn(label(), integer(), integer(), integer(), integer(), probe_arg(), probe_arg(),
           probe_arg(), probe_arg()) :: result()
  def pn(label, a1, a2, a3, a4, a5, a6, a7, a8),
    do: :dtrace.pn(label, a1, a2, a3, a4, a5, a6, a7, a8)

  @doc """
  Fires a probe only while a tracer listens on it, and only then evaluates
  the arguments: costly arguments cost nothing the rest of the time.

  Takes a call to `p/0..8` or `pn/1..9`, written `p(...)` or
  `DTrace.p(...)`. For `pn`, the label is evaluated first (it names the
  probe to check). Returns what the call returns, or `false` without
  evaluating anything. Anything else raises `ArgumentError` at compile
  time, naming the forms it takes.

      iex> require DTrace
      iex> costly = fn -> send(self(), :evaluated); "costly" end
      iex> DTrace.lazy(p(1, costly.()))
      false
      iex> DTrace.lazy(pn(7, 1, costly.()))
      false
      iex> DTrace.lazy(DTrace.p(2, costly.()))
      false
      iex> Process.info(self(), :message_queue_len)
      {:message_queue_len, 0}
  """
  defmacro lazy({:p, _, args} = call) when is_list(args) and length(args) <= 8 do
    lazy_p(call)
  end

  defmacro lazy({:pn, meta, [label | args]}) when length(args) <= 8 do
    lazy_pn(meta, label, args)
  end

  # The natural DTrace.p(...) / DTrace.pn(...) (or :dtrace.p/pn) too.
  defmacro lazy({{:., _, [module, name]}, meta, args} = call)
           when name in [:p, :pn] and is_list(args) do
    case Macro.expand(module, __CALLER__) do
      m when m in [DTrace, :dtrace] ->
        case {name, args} do
          {:p, _} when length(args) <= 8 -> lazy_p({:p, meta, args})
          {:pn, [label | rest]} when length(rest) <= 8 -> lazy_pn(meta, label, rest)
          _ -> lazy_error(call)
        end

      _ ->
        lazy_error(call)
    end
  end

  defmacro lazy(other) do
    lazy_error(other)
  end

  defp lazy_p(call) do
    quote do
      if DTrace.enabled?(), do: DTrace.unquote(call), else: false
    end
  end

  defp lazy_pn(meta, label, args) do
    var = Macro.unique_var(:label, __MODULE__)

    quote do
      unquote(var) = unquote(label)

      if DTrace.enabled?(unquote(var)),
        do: DTrace.unquote({:pn, meta, [var | args]}),
        else: DTrace.pn(unquote(var))
    end
  end

  defp lazy_error(other) do
    raise ArgumentError,
          "DTrace.lazy/1 takes a call to p/0..8 or pn/1..9, written p(...) or DTrace.p(...), " <>
            "got: #{Macro.to_string(other)}"
  end

  @typedoc "What a span is: an atom (passed as its name) or a binary/iolist."
  @type span_kind :: atom() | iodata()

  @doc """
  Runs `fun` as a span of `kind` and returns its result (or raises what it
  raises). While no tracer listens on `span__begin`/`span__end`/`span__slow`
  this costs one disabled probe and `fun` runs untouched; otherwise
  `span__begin` fires before it and `span__end`, with the duration in
  nanoseconds and the outcome (`"ok"`, or `"error"`, `"exit"`, `"throw"`
  when `fun` raised, exited or threw), after it, and `span__slow` if the
  span lasted the slow-span threshold (`slow_span_threshold/0`). Spans nest
  within a process. See `:dtrace.span/2`.

      iex> DTrace.span(:db_query, fn -> 1 + 1 end)
      2
  """
  @spec span(span_kind(), (-> result)) :: result when result: var
  def span(kind, fun), do: :dtrace.span(kind, fun)

  @doc """
  Begins a span that `span_end/1` ends, in this process or another: for
  work that crosses processes. See `:dtrace.span_begin/1`.

      iex> span = DTrace.span_begin("http GET")
      iex> DTrace.span_end(span)
      false
  """
  @spec span_begin(span_kind()) :: :dtrace.span()
  def span_begin(kind), do: :dtrace.span_begin(kind)

  @doc "Ends a span `span_begin/1` returned, as `:ok`; `true` when `span__end` fired."
  @spec span_end(:dtrace.span()) :: boolean()
  def span_end(span), do: :dtrace.span_end(span)

  @doc """
  Ends a span `span_begin/1` returned, saying how it ended: `:ok`, or
  `:error`, `:exit` or `:throw` for work that failed (`span__end`'s
  `outcome`). `true` when `span__end` fired; raises `ArgumentError` for
  another outcome. See `:dtrace.span_end/2`.

      iex> span = DTrace.span_begin("http GET")
      iex> DTrace.span_end(span, :error)
      false
  """
  @spec span_end(:dtrace.span(), :dtrace.span_outcome()) :: boolean()
  def span_end(span, outcome), do: :dtrace.span_end(span, outcome)

  @doc """
  The node's slow-span threshold in microseconds (default 1000): `span__slow`
  fires for spans at least this long. See `:dtrace.slow_span_threshold/0`.
  """
  @spec slow_span_threshold() :: pos_integer()
  def slow_span_threshold, do: :dtrace.slow_span_threshold()

  @doc """
  Sets the node's slow-span threshold in microseconds and returns the
  previous one; raises `ArgumentError` unless a positive integer.
  """
  @spec slow_span_threshold(pos_integer()) :: pos_integer()
  def slow_span_threshold(us), do: :dtrace.slow_span_threshold(us)

  @doc """
  Sets the calling process's user tag (chardata), which every probe it fires
  passes as `user_tag`; `nil` or `:undefined` clears it. Returns the previous
  tag or `:undefined`. Raises `ArgumentError` for data that is not chardata.

      iex> DTrace.put_tag("req-42")
      :undefined
      iex> DTrace.get_tag()
      "req-42"
      iex> DTrace.put_tag(nil)
      "req-42"
  """
  @spec put_tag(nil | :undefined | IO.chardata()) :: binary() | :undefined
  def put_tag(nil), do: :dtrace.put_tag(:undefined)
  def put_tag(data), do: :dtrace.put_tag(data)

  @doc "The calling process's own user tag, or `:undefined`."
  @spec get_tag() :: binary() | :undefined
  def get_tag, do: :dtrace.get_tag()

  @doc "The own tag, else one received through spreading, else `:undefined`."
  @spec get_tag_data() :: binary() | :undefined
  def get_tag_data, do: :dtrace.get_tag_data()

  @doc "Turns spreading of the tag on or off; returns the previous state (see `:dtrace`)."
  @spec spread_tag(boolean()) :: tag_state()
  def spread_tag(spread), do: :dtrace.spread_tag(spread)

  @doc "Restores a state returned by `spread_tag/1`, also in another process; returns `true`."
  @spec restore_tag(true | tag_state()) :: true
  def restore_tag(state), do: :dtrace.restore_tag(state)

  @doc """
  Fires `user_trace__s1` with `message` (any iodata of at most 1024 bytes)
  while a tracer listens: `true`; `false` otherwise; `:badarg` when enabled
  and `message` is not such an iolist. See `:dtrace.user_trace_s1/1`.
  """
  @spec user_trace_s1(iodata()) :: boolean() | :badarg
  def user_trace_s1(message), do: :dtrace.user_trace_s1(message)

  @doc """
  The status of the VM's own probes: mode, trace flags wanted and set, how
  they trace (`tracing: :session` on OTP 27+, `:legacy` before), processes
  traced and skipped, function patterns. `{:error, :not_started}` when the
  `:dtrace` application is not running. See `:dtrace.vm_probes/0` and
  docs/vm-probes.md.
  """
  @spec vm_probes() :: :dtrace.vm_status() | {:error, :not_started}
  def vm_probes, do: :dtrace.vm_probes()

  @doc """
  Switches automatic mode on (`:auto`: trace flags follow the tracers) or
  off (`:manual`: the flags it set are removed). `:ok`, or
  `{:error, :not_started}`.
  """
  @spec vm_probes(:auto | :manual) :: :ok | {:error, :not_started}
  def vm_probes(mode), do: :dtrace.vm_probes(mode)

  @doc """
  Sets the functions whose calls fire the function probes, as
  `{module, function, arity}` (`:_` allowed for function and arity) or
  `{module, function, arity, :local}`; `[]` clears them. Their call-trace
  patterns are set only while a tracer listens. `:ok` or `{:error, reason}`.
  See `:dtrace.function_probes/1`.
  """
  @spec function_probes([:dtrace.function_pattern()]) :: :ok | {:error, term()}
  def function_probes(patterns), do: :dtrace.function_probes(patterns)

  @doc """
  Makes each outermost call of these functions (`{module, function, arity}`,
  exactly, at most 64; `[]` clears them) a span of kind `"Elixir.Mod:fun/arity"`,
  for code that never calls `span/2`. `:ok` or `{:error, reason}`. See
  `:dtrace.function_spans/1` (costs, bounds, what not to name).
  """
  @spec function_spans([mfa()]) :: :ok | {:error, term()}
  def function_spans(functions), do: :dtrace.function_spans(functions)

  @doc """
  "Why is my probe silent?", from inside the node: prints one line per check
  (`ok`, `info`, `warn`, `FAIL`, with each failure's fix) and returns `:ok` or
  `{:error, checks}`. See `:dtrace.doctor/0`; the host's side is
  `priv/bin/dtrace-doctor PID`.
  """
  @spec doctor() :: :ok | {:error, [atom()]}
  defdelegate doctor(), to: :dtrace

  @doc "The findings of `doctor/0` without printing them (`opts`: `%{}`)."
  @spec doctor(map()) :: [map()]
  defdelegate doctor(opts), to: :dtrace
end
