#!/bin/sh
# Inside a guest (scripts/guest.sh), as the suites that boot one run it:
# Common Test suites with the guest's own OTP and tracers.
#   sh test/guests/ct.sh LIBDIR TESTDIR LOGDIR SUITE...
# LIBDIR: the rebar3 lib directory holding dtrace (its ebin and priv, as
# built on the host); TESTDIR: the test directory rebar3 compiled on the
# host (Debian's common_test package has no include files to compile a
# suite with here; OTP 25's beams load on 27); LOGDIR: where Common Test
# writes its logs (shared with the host); SUITE...: the suites, run in one
# ct:run_test/1. Variables the suites read (DTRACE_TEST_OTP_EXAMPLES...)
# are passed with env(1) before this script. DTRACE_TEST_GUEST=1 tells
# the suites they run in a guest. Prints "guest ct: Result"
# (ct:run_test/1's) and exits 0 when every case passed and none was skipped.
# The suites' timetraps are multiplied by dtrace_test_tracer:slowdown/0
# (4 in a guest, times DTRACE_TEST_SLOWDOWN when the host passes it), as
# their waits are.
set -eu
lib=$1 tests=$2 logdir=$3
shift 3
export DTRACE_TEST_GUEST=1
# CI=true, as on the host: a tracer that cannot run fails, never skips.
export CI=true
cd /tmp
# shellcheck disable=SC2016 # Erlang code
exec erl -noshell -pa "$lib"/dtrace/ebin -pa "$tests" -eval '
    [Dir, Logs] = [os:getenv(V) || V <- ["CT_DIR", "CT_LOGS"]],
    Suites = [list_to_atom(S) || S <- string:lexemes(os:getenv("CT_SUITES"), " ")],
    Slowdown = dtrace_test_tracer:slowdown(),
    io:format("guest: the waits and timetraps of the suites times ~p~n", [Slowdown]),
    R = ct:run_test([{dir, Dir}, {suite, Suites}, {logdir, Logs}, {auto_compile, false},
                     {multiply_timetraps, ceil(Slowdown)}]),
    io:format("guest ct: ~p~n", [R]),
    halt(case R of {Ok, 0, {0, 0}} when Ok > 0 -> 0; _ -> 1 end).' \
    -env CT_DIR "$tests" -env CT_LOGS "$logdir" -env CT_SUITES "$*"
