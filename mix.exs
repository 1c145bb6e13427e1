# A thin shim so that mix projects can depend on dtrace (`path:` or `git:`)
# without hex or rebar3. Erlang is canonical: the version, description and
# application settings come from src/dtrace.app.src, and the NIF is built by
# native/build-nif.sh, the script rebar3's pre_hooks run.

defmodule Mix.Tasks.Compile.DtraceNif do
  @moduledoc "Builds dtrace's NIF with cargo into `priv/dtrace_nif.so`."
  @shortdoc "Builds dtrace's NIF (cargo) into priv/"
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
      package: [licenses: @app[:licenses], files: ~w(compat lib native priv/*.bt priv/*.gdb priv/*.d priv/*.stp priv/*.py priv/dtrace-*
                src Cargo.toml Cargo.lock mix.exs rebar.config README.md CHANGELOG.md)]
    ]
  end

  def application do
    {mod, mod_args} = @app[:mod]
    [mod: {mod, mod_args}, env: @app[:env], registered: @app[:registered]]
  end
end
