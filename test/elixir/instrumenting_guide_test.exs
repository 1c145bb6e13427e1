defmodule DTrace.InstrumentingGuideTest do
  # Every `elixir` block of docs/instrumenting.md, run as written (no tracer
  # attached: the probes return false, as the blocks assert).
  use ExUnit.Case, async: false

  @guide Path.expand("../../docs/instrumenting.md", __DIR__)
  @external_resource @guide

  blocks =
    Regex.scan(~r/^```elixir\n(.*?)^```$/ms, File.read!(@guide), capture: :all_but_first)
    |> Enum.map(&hd/1)

  test "the guide has runnable blocks" do
    assert length(unquote(blocks)) >= 5
  end

  for {code, i} <- Enum.with_index(blocks, 1) do
    test "docs/instrumenting.md, block #{i}" do
      Code.eval_string(unquote(code), [], file: @guide)
    end
  end
end
