#!/bin/sh
# `make bench`: builds the NIF without the LTTng sink for one comparison,
# compiles the bench modules, then runs bench/dtrace_bench.erl, which
# builds the floors (bench/floors/, C, with cc), prints every table, checks
# the budgets and writes BENCHMARKS.md. Exits non-zero if a budget is
# missed.
set -eu
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-target}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
erlc -o "$work" bench/dtrace_bench.erl bench/dtrace_bench_vm.erl bench/dtrace_bench_report.erl \
    bench/dtrace_floors.erl bench/dtrace_floors_build.erl bench/dtrace_floors_programs.erl \
    bench/recorder_bench.erl bench/message_bench.erl bench/always_on_bench.erl bench/attach_bench.erl \
    bench/os_bench.erl bench/stall_bench.erl
case "${1:-}" in
    messages)
        # make bench-messages: the realistic-message rows alone.
        mkdir -p "$work/floors"
        exec erl -noshell +S 2:2 +sbt db -pa _build/default/lib/dtrace/ebin -pa "$work" \
            -eval "message_bench:main([\"$work/floors\"])." ;;
    stall)
        # make bench-stall: attaching and detaching bpftrace, the pauses.
        mkdir -p "$work/floors"
        exec erl -noshell +S 2:2 +sbt db -pa _build/default/lib/dtrace/ebin -pa "$work" \
            -eval "stall_bench:main([\"$work/floors\"])." ;;
    attach)
        # make bench-attach: the function-span rows alone.
        exec erl -noshell +S 2:2 +sbt db -pa _build/default/lib/dtrace/ebin -pa "$work" \
            +sbwt none +sbwtdcpu none +sbwtdio none -eval "attach_bench:main([])." ;;
    os)
        # make bench-os: why was it slow down to the OS, alone.
        exec erl -noshell +S 2:2 -pa _build/default/lib/dtrace/ebin -pa "$work" \
            +sbwt none +sbwtdcpu none +sbwtdio none -eval "os_bench:main([])." ;;
    always_on)
        # make bench-always-on: the recorder always on, alone.
        exec erl -noshell +S 2:2 +sbt db -pa _build/default/lib/dtrace/ebin -pa "$work" \
            -eval "always_on_bench:main([])." ;;
esac
# The same library without the LTTng sink (cargo feature off), laid out as
# an application directory, for the disabled-cost comparison.
cargo build --release --quiet -p dtrace_nif --no-default-features --target-dir "$target/no-lttng"
nolttng="$work/no-lttng/dtrace"
mkdir -p "$nolttng/ebin" "$nolttng/priv"
cp _build/default/lib/dtrace/ebin/* "$nolttng/ebin/"
cp "$target/no-lttng/release/libdtrace_nif.so" "$nolttng/priv/dtrace_nif.so"
# The test-hooks build (scripts/test-hooks-build.sh), whose
# dtrace_nif:test_dof_force_active/0 makes every probe ask its DOF
# is-enabled site, for the disabled-cost row of a registered DOF.
sh scripts/test-hooks-build.sh
dof=${REBAR_BASE_DIR:-$PWD/_build}/test_hooks/dtrace/ebin
mkdir -p "$work/floors"
# The function-span rows first, in a VM of their own without scheduler
# busy-waiting (their CPU figures would count it), as make bench-attach.
erl -noshell +S 2:2 +sbt db -pa _build/default/lib/dtrace/ebin -pa "$work" \
    +sbwt none +sbwtdcpu none +sbwtdio none -eval "attach_bench:save(\"$work/attach.eterm\")."
# The OS rows the same way (bench/os_bench.erl).
erl -noshell +S 2:2 -pa _build/default/lib/dtrace/ebin -pa "$work" \
    +sbwt none +sbwtdcpu none +sbwtdio none -eval "os_bench:save(\"$work/os.eterm\")."
# Two schedulers, bound, so the throughput rows mean "one per core".
exec erl -noshell +S 2:2 +sbt db -pa _build/default/lib/dtrace/ebin -pa "$work" \
    -eval "dtrace_bench:main([\"BENCHMARKS.md\", \"$work/floors\", \"$nolttng/ebin\", \"$work/recorder.md\", \"$dof\", \"$work/attach.eterm\", \"$work/os.eterm\"])."
