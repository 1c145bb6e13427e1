#!/bin/sh
# `make bench`: builds the NIF and the bare-probe floor program, then runs
# bench/dtrace_bench.erl, which prints a table, checks the budgets and
# writes BENCHMARKS.md. Exits non-zero if a budget is missed.
set -eu
cd "$(dirname "$0")/.."
cargo build --release --quiet --example bare_probe --features sites-only
target=${CARGO_TARGET_DIR:-target}
bare=$(cd "$target/release/examples" && pwd)/bare_probe
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
erlc -o "$work" bench/dtrace_bench.erl
# The same library without the LTTng sink (cargo feature off), laid out as
# an application directory, for the disabled-cost comparison.
cargo build --release --quiet -p dtrace_nif --no-default-features --target-dir "$target/no-lttng"
nolttng="$work/no-lttng/dtrace"
mkdir -p "$nolttng/ebin" "$nolttng/priv"
cp _build/default/lib/dtrace/ebin/* "$nolttng/ebin/"
cp "$target/no-lttng/release/libdtrace_nif.so" "$nolttng/priv/dtrace_nif.so"
# Two schedulers, bound, so the throughput rows mean "one per core".
exec erl -noshell +S 2:2 +sbt db -pa _build/default/lib/dtrace/ebin -pa "$work" \
    -eval "dtrace_bench:main([\"BENCHMARKS.md\", \"$bare\", \"$nolttng/ebin\"])."
