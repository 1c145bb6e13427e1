defmodule DTrace.Provider do
  @moduledoc """
  Run-time providers: an application names its own provider and probes
  while the node runs, and bpftrace, perf, gdb and SystemTap see them like
  probes compiled into a library.

      iex> require DTrace.Provider
      iex> {:ok, p} = DTrace.Provider.new(:doc_app, request__start: [:int, :string], request__done: [:int])
      iex> DTrace.Provider.fire(p, :request__start, [42, "GET /"])
      false
      iex> DTrace.Provider.delete(p)
      :ok

  A thin layer over the Erlang module `:dtrace_provider`, which is
  canonical: its documentation gives the file layout, the conversion
  rules, the limits and every error. `new/2` writes an ELF object with one
  SDT probe per name into the node's private directory and loads it;
  `path/1` names the file for tracer commands:

      # bpftrace -p PID -e 'usdt:PATH:doc_app:request__start { printf("%ld %s\\n", arg0, str(arg1)); }'

  Probe arguments are `:int` (signed 64-bit; anything else is passed as 0)
  and `:string` (a binary or iolist of at most 1024 bytes; anything else is
  passed as NULL), at most 12 per probe.

  `fire/3` and `fire/2` are macros: the arguments are evaluated only while
  a tracer listens on the probe, like `DTrace.lazy/1`.
  """

  @typedoc "A provider handle."
  @type t :: :dtrace_provider.provider()
  @typedoc "A probe handle, from `probe/2`."
  @type probe :: :dtrace_provider.probe()
  @typedoc "Why `new/2` failed (see `:dtrace_provider.new/2`)."
  @type reason :: :dtrace_provider.reason()

  @doc """
  Defines `provider` (an atom or a string) with `probes`, a keyword list or
  list of `{name, types}`, `types` a list of `:int` and `:string`.
  Returns `{:ok, provider}` or `{:error, reason}`, e.g.
  `{:error, {:invalid_provider_name, "a/b"}}` or
  `{:error, {:already_defined, :my_app}}`.
  """
  @spec new(atom() | String.t() | charlist(), [{atom(), [:int | :string]}]) ::
          {:ok, t()} | {:error, reason()}
  defdelegate new(provider, probes), to: :dtrace_provider

  @doc """
  Fires probe `probe` of `provider` with the list `args`, evaluated only
  while a tracer listens on the probe (then `true`); otherwise `false`,
  with `args` not evaluated. Raises `ArgumentError` (Erlang's `badarg`) for
  a bad handle or probe name, and for a wrong number of arguments whether
  or not anyone listens, as `:dtrace_provider.fire/3` does (the count of a
  literal list is checked without evaluating it); on a deleted provider,
  `false`.

      iex> require DTrace.Provider
      iex> {:ok, p} = DTrace.Provider.new(:doc_lazy, work: [:string])
      iex> DTrace.Provider.fire(p, :work, [raise("never evaluated while disabled")])
      false
      iex> DTrace.Provider.delete(p)
      :ok
  """
  defmacro fire(provider, probe, args) do
    case literal_length(args) do
      nil ->
        # Not a literal list: its terms are computed anyway, so fire/3
        # checks everything at once.
        quote do
          :dtrace_provider.fire(unquote(provider), unquote(probe), unquote(args))
        end

      count ->
        quote do
          provider = unquote(provider)
          probe = unquote(probe)

          if :dtrace_provider.is_enabled(provider, probe, unquote(count)),
            do: :dtrace_provider.fire(provider, probe, unquote(args)),
            else: false
        end
    end
  end

  @doc """
  Fires the probe of probe handle `probe` (from `probe/2`) with `args`,
  evaluated only while a tracer listens; as `fire/3`.
  """
  defmacro fire(probe, args) do
    case literal_length(args) do
      nil ->
        quote do
          :dtrace_provider.fire(unquote(probe), unquote(args))
        end

      count ->
        quote do
          probe = unquote(probe)

          if :dtrace_provider.is_enabled(probe, unquote(count)),
            do: :dtrace_provider.fire(probe, unquote(args)),
            else: false
        end
    end
  end

  # The number of terms of a literal list (`[a, b]`), known at compile
  # time; nil for anything else (a variable, a call, `[a | rest]`).
  defp literal_length(args) when is_list(args) do
    if Enum.any?(args, &match?({:|, _, [_, _]}, &1)), do: nil, else: length(args)
  end

  defp literal_length(_args), do: nil

  @doc "`true` while a tracer listens on probe `probe` of `provider`: one semaphore read."
  @spec enabled?(t(), atom()) :: boolean()
  def enabled?(provider, probe), do: :dtrace_provider.is_enabled(provider, probe)

  @doc "`true` while a tracer listens on the probe of a probe handle."
  @spec enabled?(probe()) :: boolean()
  def enabled?(probe), do: :dtrace_provider.is_enabled(probe)

  @doc "The probe handle of probe `name` of `provider`, for `fire/2` and `enabled?/1`."
  @spec probe(t(), atom()) :: probe()
  defdelegate probe(provider, name), to: :dtrace_provider

  @doc "The path of the provider's object file, for tracer commands (`usdt:PATH:provider:probe`)."
  @spec path(t() | probe()) :: binary()
  defdelegate path(handle), to: :dtrace_provider

  @doc """
  Deletes the provider: its calls return `false` from now on, its file is
  removed and its name can be defined again. Returns `:ok`.
  """
  @spec delete(t() | probe()) :: :ok
  defdelegate delete(handle), to: :dtrace_provider
end
