#!/bin/sh
# `make soak`: 10 million calls of the any-term property, disabled and (as
# root, with bpftrace) enabled. SOAK_CALLS overrides the count.
set -eu
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
erlc -o "$work" test/no_root/dtrace_props.erl test/support/dtrace_test_workload.erl test/support/dtrace_test_tracer.erl test/support/dtrace_test_peer.erl test/support/dtrace_test_catalogue.erl test/no_root/dtrace_soak.erl
exec erl -noshell +P 1000000 -pa _build/default/lib/dtrace/ebin -pa "$work" \
    -eval "dtrace_soak:main([\"${SOAK_CALLS:-10000000}\"])."
