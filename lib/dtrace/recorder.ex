defmodule DTrace.Recorder do
  @moduledoc """
  A flight recorder for the rare spike: an LTTng session in snapshot mode
  keeps this node's last probe events in memory (per-CPU ring buffers) and
  writes them to disk only when a trigger fires (a `DTrace.pn/N` call
  matching a filter, with no Erlang code on the path), when asked
  (`trigger/2`), or when any node asks the whole cluster
  (`trigger_cluster/1`). `report/1` reads snapshots of one or more nodes
  back, merged by time.

      {:ok, rec} = DTrace.Recorder.start(triggers: [{:pn, 900, "i2 > 20000"}])
      DTrace.pn(900, request_id, latency_us)   # a snapshot when latency_us > 20000
      [%{path: path} | _] = DTrace.Recorder.snapshots(rec)
      IO.puts(DTrace.Recorder.report([path]))

  A thin layer over the Erlang module `:dtrace_recorder`, which is
  canonical: its documentation gives every option with its default and
  bounds, the errors, and how failures are handled (docs/recorder.md has
  the recipe, the costs, and the same with the `lttng` CLI alone). Options
  may be given as a map or a keyword list; strings are binaries.
  """

  @typedoc "A recorder: its registered name (option `name`, default `:dtrace_recorder`) or pid."
  @type t :: :dtrace_recorder.recorder()
  @typedoc "A snapshot on disk: `path`, `time` (ms since the epoch), `reason`, `source`, `node`, `bytes`; with a relay, `relay` (`:sent` or `:relay_down`)."
  @type snapshot :: :dtrace_recorder.snapshot()

  @doc """
  Starts this node's recorder (and the `:dtrace` application) and returns
  once its LTTng session records: `{:ok, name}`. Options (all optional, a
  map or keyword list): `events` (`:default`, the user probes and the spans
  over the slow-span threshold, cheap enough to stay on; `:detail`, every
  span, file probe and span_vm_* event, `["org_erlang_dtrace:*"]`; or LTTng
  event patterns), `buffer` (`{sub_buffers, bytes}` per CPU,
  default `{4, 262144}`), `triggers` (`[{:pn, label, filter}]` or
  `[{:event, "provider:event", filter}]`), `max_snapshots` (default 10),
  `min_interval_ms` (default 60000), `dir`, `name`, `timeout_ms`,
  `check_ms`, `lttng`, `relay` (a relay daemon to send the snapshots to,
  `"net://HOST[:CTRL[:DATA]]"`; a snapshot it does not take goes to `dir`
  and says `relay: :relay_down`) and `relay_dir` (the relay's output as this
  node sees it). Errors: `{:error, {:badopt, key, value}}` for a bad
  option (nothing is created), or what `:dtrace_recorder.start/1` lists
  (`{:lttng_missing, hint}`, `{:no_session_daemon, hint}`, ...).
  """
  @spec start(map() | keyword()) :: {:ok, atom()} | {:error, term()}
  def start(opts \\ %{})

  def start(opts) when is_list(opts) do
    if Keyword.keyword?(opts) do
      :dtrace_recorder.start(Map.new(opts))
    else
      :dtrace_recorder.start(opts)
    end
  end

  def start(opts), do: :dtrace_recorder.start(opts)

  @doc """
  Stops recorder `recorder`: its LTTng session and triggers are removed;
  its snapshots stay on disk. `:ok` or `{:error, :not_found}`.
  """
  @spec stop(t()) :: :ok | {:error, :not_found}
  defdelegate stop(recorder), to: :dtrace_recorder

  @doc """
  Asks `recorder` for a snapshot now and returns at once (`:ok`, or
  `{:error, {:no_recorder, recorder}}`). `reason` (a string, or any term,
  printed) is recorded in the snapshot as an event fired by the caller, with
  its pid and user tag. Within `min_interval_ms` of the last snapshot no
  snapshot is taken.
  """
  @spec trigger(t(), term()) :: :ok | {:error, {:no_recorder, t()}}
  defdelegate trigger(recorder, reason), to: :dtrace_recorder

  @doc """
  As `trigger/2`, and waits at most `timeout` ms for the snapshot:
  `{:ok, snapshot}` or `{:error, reason}` (`{:rate_limited, ms_left}`,
  `{:not_recording, last_error}`, an lttng error, `:timeout`).
  """
  @spec trigger(t(), term(), timeout()) :: {:ok, snapshot()} | {:error, term()}
  defdelegate trigger(recorder, reason, timeout), to: :dtrace_recorder

  @doc """
  As `trigger/3`; with `force: true` the snapshot is taken even within
  `min_interval_ms` of the last one (no `{:rate_limited, ms}`).
  """
  @spec trigger(t(), term(), timeout(), keyword() | map()) :: {:ok, snapshot()} | {:error, term()}
  def trigger(recorder, reason, timeout, opts), do: :dtrace_recorder.trigger(recorder, reason, timeout, Map.new(opts))

  @doc """
  Every recorder on every connected node takes a snapshot (through the
  `:pg` scope `:dtrace_recorder_pg`, over Erlang distribution). Returns
  `:ok` at once, or `{:error, {:not_started, :dtrace}}`.
  """
  @spec trigger_cluster(term()) :: :ok | {:error, {:not_started, :dtrace}}
  defdelegate trigger_cluster(reason), to: :dtrace_recorder

  @doc "The snapshots of `recorder` on disk, oldest first (`[]` for no such recorder)."
  @spec snapshots(t()) :: [snapshot()]
  defdelegate snapshots(recorder), to: :dtrace_recorder

  @doc """
  The recorder's state: `phase` (`:setup`, `:running`, `:degraded`),
  `error`, `session`, `dir`, `triggers`, `snapshots`, `suppressed`,
  `failed`, `polls`; or `{:error, :not_found}`.
  """
  @spec status(t()) :: map() | {:error, :not_found}
  defdelegate status(recorder), to: :dtrace_recorder

  @doc """
  The report of snapshots `paths` (paths, or snapshot maps, of any nodes)
  as a string: the triggering events, per user tag its spans and file
  operations in time order with durations, node and process, the slowest
  operations, and the path of an SVG timeline. Options (map or keyword):
  `svg` (a file, or `false`), `tags` (a number, `:all`, or a list of tags),
  `top`, `max_lines`, `timeout_ms`, `python`. Needs babeltrace2's Python
  bindings (Debian: `python3-bt2`); `{:error, reason}` otherwise.
  """
  @spec report([Path.t() | snapshot()] | Path.t(), map() | keyword()) :: binary() | {:error, term()}
  def report(paths, opts \\ %{})
  def report(paths, opts) when is_list(opts), do: :dtrace_recorder.report(paths, Map.new(opts))
  def report(paths, opts), do: :dtrace_recorder.report(paths, opts)
end
