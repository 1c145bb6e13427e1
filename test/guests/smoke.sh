#!/bin/sh
# Inside the trixie-dtrace guest: what the DTrace tests rely on, each step
# timed. Exits non-zero at the first step that fails.
#   scripts/guest.sh run trixie-dtrace -- sh test/guests/smoke.sh
set -u
now() { date +%s%N; }
# step NAME COMMAND...: runs COMMAND, prints its output, its status and time.
step() {
    name=$1
    shift
    t0=$(now)
    out=$("$@" 2>&1)
    rc=$?
    ms=$((($(now) - t0) / 1000000))
    printf '%s\n' "$out" | sed 's/^/    /'
    if [ $rc -ne 0 ]; then
        echo "smoke: FAIL $name (exit $rc, $ms ms)"
        exit 1
    fi
    echo "smoke: ok $name ($ms ms)"
}
# check NAME PATTERN COMMAND...: step, and COMMAND's output matches PATTERN.
check() {
    name=$1 pattern=$2
    shift 2
    step "$name" "$@"
    printf '%s\n' "$out" | grep -q -- "$pattern" || { echo "smoke: FAIL $name: no line matches $pattern"; exit 1; }
}

echo "smoke: kernel $(uname -r), dtrace $(dtrace -V 2>&1)"
check "cuse loaded" '^cuse ' lsmod
check "dtprobed's helper device" '^c' ls -l /dev/dtrace/helper
check "dtrace BEGIN" 'hello' dtrace -q -n 'BEGIN { printf("hello\n"); exit(0) }'
check "dtrace -l syscall::read:entry" 'syscall *vmlinux *read *entry' dtrace -l -n 'syscall::read:entry'
check "erl is OTP 27" '^27$' erl -noshell -eval 'io:format("~s~n", [erlang:system_info(otp_release)]), halt().'
echo "smoke: all ok"
