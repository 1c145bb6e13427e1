#!/bin/sh
# Builds the cached artefacts the Common Test suites use, before Common
# Test runs (scripts/ct.sh calls this with its own arguments), so that no
# case's deadline includes a build: the guest roots (scripts/guest.sh
# root), sid's DTrace (scripts/dtrace-sid.sh), OTP's source tarball
# (scripts/otp-source.sh) and Debian's RabbitMQ (scripts/rabbitmq.sh).
# Each is built once and then reused from its cache; this says how long
# each step took.
#   scripts/test-caches.sh [--suite SUITE[,SUITE...]]... [OTHER ARGS]
# Without --suite, what the suites of `make test` need; with
# DTRACE_TEST_KERNELS=1, also what the guests of make test-kernels need
# (dtrace_kernels_SUITE's roots, and trixie-dtrace for
# dtrace_dtrace_SUITE:dof_in_guest). Only as
# root (the suites that need these skip without it, or fail in CI, saying
# why). A failed build is reported and the suites go on: the case that
# needs it tries again and fails, naming it.
set -u
here=$(cd "$(dirname "$0")" && pwd)
[ "$(id -u)" -eq 0 ] || exit 0

suites=
while [ $# -gt 0 ]; do
    case $1 in
        --suite) [ $# -gt 1 ] || break; suites="$suites $(echo "$2" | tr ',' ' ')"; shift ;;
        --suite=*) suites="$suites $(echo "${1#--suite=}" | tr ',' ' ')" ;;
    esac
    shift
done
wants() {
    [ -z "$suites" ] && return 0
    for s in $suites; do
        [ "$(basename "$s" .erl)" = "$1" ] && return 0
    done
    return 1
}

steps=
if wants dtrace_dtrace_SUITE; then
    steps="$steps dtrace-sid otp-source"
    # dof_in_guest: run by make test-kernels only.
    [ "${DTRACE_TEST_KERNELS:-}" = 1 ] && steps="$steps root:trixie-dtrace"
fi
if wants dtrace_rabbitmq_SUITE; then
    steps="$steps rabbitmq"
fi
# The kit's: its image's root, sid's (RabbitMQ on OTP 29) and trixie's
# (the kit's OTP 27 beams). Not in the chroots of test-trixie and test-sid,
# where it is skipped.
if wants dtrace_kit_SUITE && [ "${DTRACE_TEST_CHROOT:-}" != 1 ]; then
    steps="$steps root:kit-trixie root:sid-userland root:trixie-userland"
fi
if [ "${DTRACE_TEST_KERNELS:-}" = 1 ] && wants dtrace_kernels_SUITE; then
    steps="$steps otp-source root:bookworm-kernel root:trixie-kernel"
fi

done_steps=
for step in $steps; do
    case " $done_steps " in *" $step "*) continue ;; esac
    done_steps="$done_steps $step"
    start=$(date +%s)
    case $step in
        dtrace-sid) "$here/dtrace-sid.sh" >/dev/null ;;
        # The suites read the source of the release they run on (OTP 29:
        # sid's), and the guests' (OTP 27: trixie's).
        otp-source) "$here/otp-source.sh" erlang >/dev/null &&
            if [ "$(erl -noshell -eval 'io:format("~s", [erlang:system_info(otp_release)]), halt().')" -ge 29 ]; then
                "$here/otp-source.sh" erlang sid >/dev/null 2>&1
            fi ;;
        rabbitmq) "$here/rabbitmq.sh" >/dev/null ;;
        root:*) "$here/guest.sh" root "${step#root:}" >/dev/null ;;
    esac
    status=$?
    if [ "$status" -eq 0 ]; then
        echo "test-caches: $step ready after $(($(date +%s) - start)) s"
    else
        echo "test-caches: $step failed (exit $status) after $(($(date +%s) - start)) s;" \
            "the cases that need it will fail, naming it" >&2
    fi
done
exit 0
