defmodule DTrace.PackageTest do
  # What `mix hex.build` would put in the package, from mix.exs's package
  # files expanded as Hex expands them (each entry a wildcard; a directory
  # with everything under it, dot files too). Hex cannot be installed here
  # (hex.pm is unreachable), so this is its rule, not its code. The list is
  # written to _build/<env>/package_files.txt for review.
  use ExUnit.Case, async: true

  @app (
         {:ok, [{:application, :dtrace, app}]} = :file.consult("src/dtrace.app.src")
         app
       )

  defp package, do: Mix.Project.config()[:package]

  defp package_files do
    package()[:files]
    |> Enum.flat_map(&Path.wildcard(&1, match_dot: true))
    |> Enum.flat_map(fn path ->
      if File.dir?(path), do: Path.wildcard(Path.join(path, "**"), match_dot: true), else: [path]
    end)
    |> Enum.reject(&File.dir?/1)
    |> Enum.uniq()
    |> Enum.sort()
  end

  test "the package holds every part's sources and the checksum file, and no build product" do
    files = package_files()
    File.write!(Path.join(Mix.Project.build_path(), "package_files.txt"), Enum.map(files, &[&1, "\n"]))

    required =
      ~w(checksum-dtrace_nif.exs native/precompiled.escript native/build-nif.sh .cargo/config.toml
         Cargo.toml Cargo.lock native/dtrace_nif/Cargo.toml native/tracer_nif/Cargo.toml
         native/dtrace_catalogue/Cargo.toml native/dtrace_nif/probes.d native/dtrace_nif/build.rs
         native/dtrace_nif/src/lib.rs native/tracer_nif/src/lib.rs src/dtrace.app.src src/api/dtrace.erl
         compat/dyntrace.erl lib/dtrace.ex rebar.config mix.exs README.md CHANGELOG.md LICENSE
         priv/bin/dtrace-attach priv/erlang/dtrace-attach.escript priv/bin/dtrace-slow-spans
         priv/bpftrace/span-latency.bt
         priv/dtrace/span-latency.d priv/systemtap/span-latency.stp priv/gdb/user-probe.gdb
         priv/python/dtrace_tools/__init__.py)

    assert required -- files == []

    # Every tool, tracer script and Python module of priv/ (the tools run
    # their scripts and modules from there).
    priv =
      ~w(priv/bin/* priv/erlang/*.escript priv/bpftrace/*.bt priv/dtrace/*.d priv/systemtap/*.stp priv/gdb/*.gdb
         priv/python/dtrace_tools/*.py)
      |> Enum.flat_map(&Path.wildcard/1)

    assert length(priv) >= 40
    assert priv -- files == []

    # Every source of the crates is there (what cargo builds from).
    crates = Path.wildcard("native/*/{src,lttng}/**/*.{rs,c,h}")
    assert crates != []
    assert crates -- files == []

    build_products =
      Enum.filter(files, fn f ->
        f =~ ~r{(^|/)(target|_build|deps|__pycache__)/} or
          f =~ ~r{\.(so|dylib|beam|tar\.gz|tmp)$} or
          Path.basename(f) in ~w(precompiled.txt dtrace_probes.json dtrace_probes.eterm)
      end)

    assert build_products == []
  end

  test "the package's metadata is the application's" do
    config = Mix.Project.config()
    assert config[:version] == to_string(@app[:vsn])
    assert config[:description] == to_string(@app[:description])
    assert package()[:licenses] == @app[:licenses]

    assert package()[:links] ==
             Map.new(@app[:links], fn {k, v} -> {to_string(k), to_string(v)} end)

    assert package()[:build_tools] == ["rebar3", "mix"]
  end

  test "the checksum file lists the archives of every target, in rustler_precompiled's format" do
    text = File.read!("checksum-dtrace_nif.exs")
    {sums, []} = Code.eval_string(text)
    vsn = to_string(@app[:vsn])
    # The NIF version: the rustler feature the crate is built with.
    [_, major, minor] =
      Regex.run(~r/"nif_version_(\d+)_(\d+)"/, File.read!("native/dtrace_nif/Cargo.toml"))

    want =
      for name <- ~w(dtrace_nif tracer_nif dtrace_lttng_tp),
          target <- ~w(x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu),
          do: "lib#{name}-v#{vsn}-nif-#{major}.#{minor}-#{target}.so.tar.gz"

    assert Enum.sort(Map.keys(sums)) == Enum.sort(want)
    assert Enum.all?(Map.values(sums), &(&1 =~ ~r/^sha256:[0-9a-f]{64}$/))
  end
end
