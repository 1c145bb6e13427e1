#!/bin/sh
# Runs the Common Test suites (rebar3 ct, arguments passed on) and ends with
# one plain summary line, "ct: N passed, N failed, N skipped", from CT's own
# closing line. Exits with rebar3's status.
set -u
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
