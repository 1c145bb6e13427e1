#!/bin/sh
# `make test-repeat N=5`: runs the Common Test suites (those that attach
# real tracers, and the others) N times in a row, each run from the same
# build, and reports every failed case with its run, suite and reason. For
# finding flaky cases: each case must pass every time. Exits non-zero if
# any run failed. SUITES="dtrace_vm_SUITE dtrace_lttng_SUITE" narrows it.
set -u
cd "$(dirname "$0")/.."
n=${N:-5}
suites=${SUITES:-}
out=$(mktemp -d)
failed=0
i=1
while [ "$i" -le "$n" ]; do
    args=
    if [ -n "$suites" ]; then
        args="--suite $(echo "$suites" | sed 's/ /,/g')"
    fi
    # shellcheck disable=SC2086 # args is meant to split
    CI=${CI:-true} sh scripts/ct.sh $args > "$out/run$i.log" 2>&1
    status=$?
    summary=$(grep '^ct: ' "$out/run$i.log" | tail -1)
    echo "run $i/$n: ${summary:-no summary} (exit $status)"
    if [ "$status" -ne 0 ]; then
        failed=$((failed + 1))
        # CT prints "%%% SUITE ==> case: FAILED" and then the reason.
        sed 's/\x1b\[[0-9;]*m//g' "$out/run$i.log" |
            awk -v run="$i" '/==> [a-z_0-9]+: FAILED/ { split($2, s, " "); c = $4; sub(":", "", c);
                               printf("  run %s: %s %s\n", run, $2, c); getline; getline; print "    " $0 }'
    fi
    i=$((i + 1))
done
echo "test-repeat: $((n - failed)) of $n runs passed; logs in $out"
[ "$failed" -eq 0 ]
