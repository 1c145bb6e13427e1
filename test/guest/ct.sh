#!/bin/sh
# Inside the trixie-dtrace guest (scripts/guest.sh), as dtrace_dtrace_SUITE's
# case dof_in_guest runs it: that suite's dof group, with the guest's OTP
# (27), its DTrace (sid's 2.0.7) and dtprobed serving /dev/dtrace/helper.
#   sh test/guest/ct.sh LIBDIR TESTDIR EXAMPLES LOGDIR
# LIBDIR: the rebar3 lib directory holding dtrace (its ebin and priv, as
# built on the host); TESTDIR: the test directory rebar3 compiled on the
# host (Debian's common_test package has no include files to compile a
# suite with here; OTP 25's beams load on 27); EXAMPLES: OTP's
# lib/runtime_tools/examples, extracted by the host; LOGDIR: where Common
# Test writes its logs (shared with the host). Prints "guest ct: Result"
# (ct:run_test/1's) and exits 0 when every case passed and none was skipped.
set -eu
lib=$1 tests=$2 examples=$3 logdir=$4
export DTRACE_TEST_GUEST=1 DTRACE_TEST_OTP_EXAMPLES="$examples"
# CI=true, as on the host: a DTrace that cannot run fails, never skips.
export CI=true
cd /tmp
# shellcheck disable=SC2016 # Erlang code
exec erl -noshell -pa "$lib"/dtrace/ebin -pa "$tests" -eval '
    [Dir, Logs] = [os:getenv(V) || V <- ["CT_DIR", "CT_LOGS"]],
    R = ct:run_test([{dir, Dir}, {suite, dtrace_dtrace_SUITE}, {logdir, Logs}, {auto_compile, false}]),
    io:format("guest ct: ~p~n", [R]),
    halt(case R of {Ok, 0, {0, 0}} when Ok > 0 -> 0; _ -> 1 end).' \
    -env CT_DIR "$tests" -env CT_LOGS "$logdir"
