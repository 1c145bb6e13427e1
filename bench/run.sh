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
# Two schedulers, bound, so the throughput rows mean "one per core".
exec erl -noshell +S 2:2 +sbt db -pa _build/default/lib/dtrace/ebin -pa "$work" \
    -eval "dtrace_bench:main([\"BENCHMARKS.md\", \"$bare\"])."
