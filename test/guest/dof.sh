#!/bin/sh
# The library's user probes under Oracle's DTrace in the trixie-dtrace guest
# (OTP 27.3.4.1): a `dtrace -Z -n 'erlang*:::user_trace-i4s4'` started before
# the node, naming no pid, must print what `dtrace:p(1, 2, "a", "b")` passes.
# DTrace finds probes named that way only when the library hands DOF to
# /dev/dtrace/helper (dtprobed); the stapsdt notes alone need `-p PID`, which
# is listed too, as information.
#   test/guest/dof.sh             on the host, as root: rebar3 compile, then
#                                 the guest
# The build is taken from ${REBAR_BASE_DIR:-_build}/default/lib; OTP 25's
# beams load on 27. Exits 0 when DTrace printed the probe's arguments.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)

if [ "${1:-}" != --in-guest ]; then
    cd "$top"
    ${REBAR3:-rebar3} compile >&2
    lib=${REBAR_BASE_DIR:-$top/_build}/default/lib
    case $lib in /*) ;; *) lib=$top/$lib ;; esac
    [ -f "$lib/dtrace/priv/dtrace_nif.so" ] || { echo "dof: no $lib/dtrace/priv/dtrace_nif.so" >&2; exit 2; }
    exec scripts/guest.sh run trixie-dtrace -- sh test/guest/dof.sh --in-guest "$lib"
fi
lib=$2

now() { date +%s%N; }
ms() { echo $((($(now) - $1) / 1000000)); }
# wait_for FILE PATTERN SECONDS: until a line of FILE matches PATTERN.
# A deadline in seconds of the clock: under TCG each round costs much more
# than its sleep.
wait_for() {
    end=$(($(date +%s) + $3))
    until grep -q -- "$2" "$1" 2>/dev/null; do
        [ "$(date +%s)" -le $end ] || return 1
        sleep 0.1
    done
}
log=/tmp/dof.dtrace
node=/tmp/dof.node
t0=$(now)
dtrace -Z -q -n 'BEGIN { printf("ready\n"); }' \
    -n 'erlang*:::user_trace-i4s4 { printf("%d %s\n", arg2, copyinstr(arg6)); }' >$log 2>&1 &
tracer=$!
if ! wait_for $log '^ready' 120; then
    echo "dof: DTrace did not start in 120 s:"
    cat $log
    exit 1
fi
echo "dof: dtrace ready in $(ms "$t0") ms"

# The node: its OS pid first, then dtrace:p/4 every 100 ms until killed;
# the first `true` (a tracer enabled the probe) is reported.
t0=$(now)
# shellcheck disable=SC2016 # Erlang code
erl -noshell -pa "$lib"/*/ebin -eval '
    io:format("pid ~s~n", [os:getpid()]),
    io:format("available ~p~n", [dtrace:available()]),
    Loop = fun Loop(Seen) ->
                   R = dtrace:p(1, 2, "a", "b"),
                   R andalso not Seen andalso io:format("enabled~n"),
                   timer:sleep(100),
                   Loop(Seen orelse R)
           end,
    Loop(false).' >$node 2>&1 &
erl=$!
wait_for $node '^available' 60 || { echo "dof: the node did not start:"; cat $node; exit 1; }
pid=$(sed -n 's/^pid //p' $node)
echo "dof: node $pid up in $(ms "$t0") ms, $(grep '^available' $node)"

seen=0
wait_for $log '^1 a$' 30 && seen=1
echo "dof: the node said:"
sed 's/^/    /' $node
echo "dof: dtrace -Z 'erlang*:::user_trace-i4s4' printed:"
sed 's/^/    /' $log
t0=$(now)
kill "$tracer" 2>/dev/null || :
wait "$tracer" 2>/dev/null || :
echo "dof: dtrace stopped in $(ms "$t0") ms"
t0=$(now)
# Information: the stapsdt notes through DTrace's stapsdt provider (pid
# needed).
echo "dof: for comparison, dtrace -l -p $pid -n 'erlang\$target:::user_trace-i4s4':"
# shellcheck disable=SC2016 # $target is DTrace's
dtrace -l -p "$pid" -n 'erlang$target:::user_trace-i4s4' 2>&1 | sed 's/^/    /'
echo "dof: listed in $(ms "$t0") ms"
kill "$erl" 2>/dev/null || :
if [ $seen = 1 ]; then
    echo "dof: ok"
else
    echo "dof: FAIL: DTrace saw no user_trace-i4s4 of the node without its pid (no DOF registered)"
    exit 1
fi
