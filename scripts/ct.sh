#!/bin/sh
# Runs the Common Test suites (rebar3 ct, arguments passed on) and ends with
# one plain summary line, "ct: N passed, N failed, N skipped", from CT's own
# closing line. Exits with rebar3's status. The suites are grouped by what
# they need: test/no_root (make check), test/root (root and real tracers),
# test/guests (QEMU guests, make test-kernels). In `--suite A,B', a bare
# suite name (dtrace_vm_SUITE) is found in its group.
#   sh scripts/ct.sh [--suite NAME,...] [--dir test/GROUP,...] [--case ...]
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
# --suite's bare names made paths (rebar3 ct needs them).
n=$#
i=0
while [ "$i" -lt "$n" ]; do
    a=$1
    shift
    i=$((i + 1))
    if [ "$a" = --suite ] && [ "$i" -lt "$n" ]; then
        paths=
        for s in $(echo "$1" | tr ',' ' '); do
            case $s in
                */*) p=$s ;;
                *) p=$(cd "$top" && find test -name "${s%.erl}.erl" | sed 's/\.erl$//' | head -1)
                   [ -n "$p" ] || { echo "ct: no suite $s under test/" >&2; exit 2; } ;;
            esac
            paths="$paths${paths:+,}$p"
        done
        shift
        i=$((i + 1))
        set -- "$@" --suite "$paths"
    else
        set -- "$@" "$a"
    fi
done
# The test artefacts the suites use, built here rather than inside a case:
# the test-hooks library, then what is cached (guest roots, sid's DTrace,
# OTP's source), so that no case's deadline includes a build.
"$(dirname "$0")/test-hooks-build.sh" || exit 1
"$(dirname "$0")/test-caches.sh" "$@"
log=$(mktemp)
trap 'rm -f "$log" "$log.start"' EXIT
touch "$log.start"
# A slow host (DTRACE_TEST_SLOWDOWN=N, CONTRIBUTING.md): the timetraps N
# times as long, as the suites' waits are (dtrace_test_tracer:ceiling/1).
mult=
case ${DTRACE_TEST_SLOWDOWN:-} in
    '' | 1) ;;
    *) mult="--multiply_timetraps $(awk -v n="$DTRACE_TEST_SLOWDOWN" 'BEGIN { m = int(n); if (m < n) m++; print m }')" ;;
esac
# shellcheck disable=SC2086 # $mult is an option and its value
{ ${REBAR3:-rebar3} ct $mult "$@"; echo $? > "$log.status"; } 2>&1 | tee "$log"
status=$(cat "$log.status"); rm -f "$log.status"
# CT prints e.g. "All 15 tests passed." or
# "Failed 1 tests. Passed 13 tests. Skipped 1 (1, 0) tests."
line=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E '^(All [0-9]+ tests passed|Failed [0-9]+ tests|Passed [0-9]+ tests|.*Skipped [0-9]+)' | tail -1)
num() { printf '%s\n' "$line" | sed -n "s/.*$1 \([0-9][0-9]*\).*/\1/p" | head -1; }
passed=$(num Passed); failed=$(num Failed); skipped=$(num Skipped)
case "$line" in "All "*) passed=$(printf '%s\n' "$line" | sed 's/All \([0-9]*\).*/\1/') ;; esac
# Each failed case and the start of its reason, from this run's suite.log
# files, so that a log's tail (CI keeps only that) names what failed.
if [ "${failed:-0}" != 0 ]; then
    find "${REBAR_BASE_DIR:-_build}/test/logs" -name suite.log -newer "$log.start" 2>/dev/null |
        xargs -r awk '/^=case/ { c = $2 }
                      /^=result/ { f = ($2 ~ /^failed/); n = 0 }
                      /^=result/ && f { print "FAILED " c ": " substr($0, 16, 600) }
                      !/^=/ && f && n++ < 12 { print "    " substr($0, 1, 300) }
                      /^=/ && !/^=result/ { f = 0 }'
fi
echo "ct: ${passed:-0} passed, ${failed:-0} failed, ${skipped:-0} skipped"
exit "$status"
