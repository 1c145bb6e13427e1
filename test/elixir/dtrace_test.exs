defmodule DTraceTest do
  use ExUnit.Case, async: true
  require DTrace

  doctest DTrace
  doctest DTrace.File

  test "the Elixir API returns what the Erlang API returns" do
    assert DTrace.available?() == :dtrace.available()
    assert DTrace.sinks() == :dtrace.sinks()
    assert %{sdt: true} = DTrace.sinks()
    assert DTrace.p(1, 2, "a", "b") == false
    assert DTrace.pn(5, 1, "a") == false
    assert DTrace.pn(:not_a_label) == :badarg
    assert DTrace.pn(951) == :error
    assert_raise FunctionClauseError, fn -> DTrace.p("a", 1, 2, 3, 4) end
  end

  test "slow_span_threshold/1 sets the node's threshold (microseconds) and returns the previous one" do
    old = DTrace.slow_span_threshold()

    try do
      assert DTrace.slow_span_threshold(2500) == old
      assert DTrace.slow_span_threshold() == 2500
      assert_raise ArgumentError, fn -> DTrace.slow_span_threshold(0) end
      assert_raise ArgumentError, fn -> DTrace.slow_span_threshold(1.5) end
      assert DTrace.slow_span_threshold() == 2500
    after
      DTrace.slow_span_threshold(old)
    end
  end

  test "lazy/1 evaluates nothing while the probe is disabled" do
    me = self()
    costly = fn ->
      send(me, :evaluated)
      "costly"
    end
    assert DTrace.lazy(p(1, costly.())) == false
    assert DTrace.lazy(p(costly.(), costly.(), costly.(), costly.())) == false
    assert DTrace.lazy(pn(3, 1, costly.())) == false
    refute_received :evaluated
  end

  test "lazy/1 evaluates a pn label once, and keeps pn's label checks" do
    me = self()
    label = fn l ->
      send(me, {:label, l})
      l
    end
    assert DTrace.lazy(pn(label.(2000), 1)) == :badarg
    assert DTrace.lazy(pn(label.(990), 1)) == :error
    assert_received {:label, 2000}
    assert_received {:label, 990}
    refute_received {:label, _}
  end

  test "tags are per process" do
    assert DTrace.put_tag(["ab", ?c]) == :undefined
    assert DTrace.get_tag() == "abc"
    task = Task.async(fn -> DTrace.get_tag() end)
    assert Task.await(task) == :undefined
    assert DTrace.put_tag(nil) == "abc"
    assert_raise ArgumentError, fn -> DTrace.put_tag(self()) end
  end

  test "lazy/1 only takes p and pn calls" do
    assert_raise ArgumentError, ~r/takes a call to p.*written p\(\.\.\.\) or DTrace\.p/, fn ->
      Code.eval_string("require DTrace; DTrace.lazy(IO.puts(1))")
    end

    assert_raise ArgumentError, ~r/got: Enum.p\(1\)/, fn ->
      Code.eval_string("require DTrace; DTrace.lazy(Enum.p(1))")
    end
  end

  test "lazy/1 takes DTrace.p(...) and DTrace.pn(...) as written, and :dtrace's too" do
    me = self()
    costly = fn ->
      send(me, :evaluated)
      "costly"
    end
    assert DTrace.lazy(DTrace.p(1, costly.())) == false
    assert DTrace.lazy(DTrace.pn(3, 1, costly.())) == false
    assert DTrace.lazy(:dtrace.p(costly.())) == false
    assert DTrace.lazy(DTrace.pn(2000, costly.())) == :badarg
    refute_received :evaluated
  end

  test "DTrace.File returns what :file returns" do
    dir = Path.join(System.tmp_dir!(), "dtrace_file_ex_#{System.unique_integer([:positive])}")
    on_exit(fn -> File.rm_rf(dir) end)
    assert DTrace.File.make_dir(dir) == :ok
    assert DTrace.File.make_dir(dir) == {:error, :eexist}
    assert :file.make_dir(dir) == {:error, :eexist}
    path = Path.join(dir, "f")
    assert DTrace.File.write_file(path, ["ab", "c"]) == :ok
    assert DTrace.File.read_file(path) == {:ok, "abc"}
    {:ok, fd} = DTrace.File.open(path, [:read, :raw, :binary])
    assert DTrace.File.pread(fd, 1, 2) == {:ok, "bc"}
    assert DTrace.File.position(fd, :eof) == {:ok, 3}
    assert DTrace.File.close(fd) == :ok
    assert DTrace.File.rename(Path.join(dir, "missing"), path) == {:error, :enoent}
    assert DTrace.File.list_dir(dir) == {:ok, [~c"f"]}
  end
end
