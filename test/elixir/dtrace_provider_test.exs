defmodule DTrace.ProviderTest do
  # Provider names are per node: each test uses names of its own.
  use ExUnit.Case, async: true
  require DTrace.Provider

  doctest DTrace.Provider

  test "the Elixir API returns what the Erlang API returns" do
    {:ok, p} = DTrace.Provider.new("ex_api", request__start: [:int, :string], done: [])
    assert is_binary(DTrace.Provider.path(p))
    assert DTrace.Provider.path(p) == :dtrace_provider.path(p)
    assert DTrace.Provider.enabled?(p, :request__start) == false
    probe = DTrace.Provider.probe(p, :done)
    assert DTrace.Provider.enabled?(probe) == false
    assert DTrace.Provider.new(:ex_api, x: []) == {:error, {:already_defined, :ex_api}}
    assert DTrace.Provider.new("a/b", x: []) == {:error, {:invalid_provider_name, "a/b"}}
    assert DTrace.Provider.new(:ex_bad, x: [:float]) == {:error, {:invalid_arg_type, :x, :float}}
    assert_raise ArgumentError, fn -> DTrace.Provider.enabled?(p, :nope) end
    assert DTrace.Provider.delete(probe) == :ok
    refute File.exists?(DTrace.Provider.path(p))
    assert DTrace.Provider.enabled?(p, :nope) == false
  end

  test "fire/3 and fire/2 evaluate nothing while the probe is disabled" do
    me = self()
    costly = fn ->
      send(me, :evaluated)
      "costly"
    end
    {:ok, p} = DTrace.Provider.new(:ex_lazy, work: [:int, :string])
    assert DTrace.Provider.fire(p, :work, [1, costly.()]) == false
    assert DTrace.Provider.fire(DTrace.Provider.probe(p, :work), [1, costly.()]) == false
    refute_received :evaluated
    # The handle and the probe name are still checked.
    assert_raise ArgumentError, fn -> DTrace.Provider.fire(p, :nope, [costly.()]) end
    assert_raise ArgumentError, fn -> DTrace.Provider.fire(make_ref(), [costly.()]) end
    refute_received :evaluated
    DTrace.Provider.delete(p)
    assert DTrace.Provider.fire(p, :work, [costly.()]) == false
  end

  test "fire/3 and fire/2 check the argument count while disabled, evaluating nothing" do
    me = self()
    costly = fn ->
      send(me, :evaluated)
      "costly"
    end
    {:ok, p} = DTrace.Provider.new(:ex_count, work: [:int, :string])
    probe = DTrace.Provider.probe(p, :work)
    assert_raise ArgumentError, fn -> DTrace.Provider.fire(p, :work, [costly.()]) end
    assert_raise ArgumentError, fn -> DTrace.Provider.fire(p, :work, [1, 2, costly.()]) end
    assert_raise ArgumentError, fn -> DTrace.Provider.fire(probe, [costly.()]) end
    refute_received :evaluated
    # A list that is not literal is computed anyway: checked by fire itself.
    args = [1]
    assert_raise ArgumentError, fn -> DTrace.Provider.fire(p, :work, args) end
    assert_raise ArgumentError, fn -> DTrace.Provider.fire(p, :work, [1 | [2, 3]]) end
    assert DTrace.Provider.fire(p, :work, [1 | ["a"]]) == false
    DTrace.Provider.delete(p)
    assert DTrace.Provider.fire(p, :work, [costly.()]) == false
  end

  test "fire/3 evaluates its handle and probe name once" do
    me = self()
    {:ok, p} = DTrace.Provider.new(:ex_once, work: [])
    handle = fn ->
      send(me, :handle)
      p
    end
    name = fn ->
      send(me, :name)
      :work
    end
    assert DTrace.Provider.fire(handle.(), name.(), []) == false
    assert_received :handle
    assert_received :name
    refute_received :handle
    refute_received :name
    DTrace.Provider.delete(p)
  end
end
