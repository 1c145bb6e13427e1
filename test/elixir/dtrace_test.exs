defmodule DTraceTest do
  use ExUnit.Case, async: true
  require DTrace

  doctest DTrace

  test "the Elixir API returns what the Erlang API returns" do
    assert DTrace.available?() == :dtrace.available()
    assert DTrace.p(1, 2, "a", "b") == false
    assert DTrace.pn(5, 1, "a") == false
    assert DTrace.pn(:not_a_label) == :badarg
    assert DTrace.pn(951) == :error
    assert_raise FunctionClauseError, fn -> DTrace.p("a", 1, 2, 3, 4) end
  end

  test "lazy/1 evaluates nothing while the probe is disabled" do
    me = self()
    costly = fn -> send(me, :evaluated) && "costly" end
    assert DTrace.lazy(p(1, costly.())) == false
    assert DTrace.lazy(p(costly.(), costly.(), costly.(), costly.())) == false
    assert DTrace.lazy(pn(3, 1, costly.())) == false
    refute_received :evaluated
  end

  test "lazy/1 evaluates a pn label once, and keeps pn's label checks" do
    me = self()
    label = fn l -> send(me, {:label, l}) && l end
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
    assert_raise ArgumentError, ~r/takes a call to p/, fn ->
      Code.eval_string("require DTrace; DTrace.lazy(IO.puts(1))")
    end
  end
end
