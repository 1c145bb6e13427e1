# A thin shim so that mix projects can depend on dtrace (`path:`, `git:`,
# or Hex once it is published) without rebar3. Erlang is canonical: the version, description and
# application settings come from src/dtrace.app.src, and the NIF is built by
# native/build-nif.sh, the script rebar3's pre_hooks run.

defmodule Mix.Tasks.Compile.DtraceNif do
  @moduledoc """
  Builds dtrace's NIF with cargo into `priv/dtrace_nif.so`, or installs the
  precompiled one (no cargo, or `DTRACE_NIF_PRECOMPILED=1`): native/build-nif.sh.
  """
  @shortdoc "Builds dtrace's NIF (cargo, or precompiled) into priv/"
  use Mix.Task.Compiler

  @impl Mix.Task.Compiler
  def run(_args) do
    script = Path.join(__DIR__, "native/build-nif.sh")

    case System.cmd("sh", [script, "release"], stderr_to_stdout: true) do
      {_, 0} ->
        # priv/ was written after mix laid out _build: link or copy it now,
        # or a fresh git dependency has no _build/.../dtrace/priv.
        Mix.Project.build_structure()
        {:ok, []}

      {output, status} ->
        Mix.shell().error(output)
        Mix.raise("dtrace: building the NIF failed (exit #{status}); see above")
    end
  end
end

defmodule DTrace.MixProject do
  use Mix.Project

  {:ok, [{:application, :dtrace, app}]} = :file.consult(Path.join(__DIR__, "src/dtrace.app.src"))
  @app app

  def project do
    [
      app: :dtrace,
      version: to_string(@app[:vsn]),
      description: to_string(@app[:description]),
      elixir: "~> 1.14",
      compilers: [:dtrace_nif | Mix.compilers()],
      erlc_paths: ["src"],
      elixirc_paths: ["lib"],
      test_paths: ["test/elixir"],
      deps: [],
      package: package()
    ]
  end

  # The Hex package (CONTRIBUTING.md, "Publishing"; test/elixir/package_test.exs
  # lists what it holds): the sources of every part, so that `mix` and rebar3
  # build it, cargo's configuration, and the checksum file of the precompiled
  # objects (native/precompiled.escript), without which a build with no Rust
  # refuses every archive. Licenses and links are src/dtrace.app.src's.
  defp package do
    [
      licenses: @app[:licenses],
      links: Map.new(@app[:links], fn {name, url} -> {to_string(name), to_string(url)} end),
      build_tools: ["rebar3", "mix"],
      files: ~w(checksum-dtrace_nif.exs compat lib native src .cargo Cargo.toml Cargo.lock
                priv/bin/dtrace-* priv/erlang/*.escript priv/bpftrace/*.bt priv/dtrace/*.d priv/systemtap/*.stp priv/gdb/*.gdb
                priv/python/dtrace_tools/*.py docs
                mix.exs rebar.config README.md CHANGELOG.md LICENSE)
    ]
  end

  def application do
    {mod, mod_args} = @app[:mod]
    [mod: {mod, mod_args}, env: @app[:env], registered: @app[:registered]]
  end
end
