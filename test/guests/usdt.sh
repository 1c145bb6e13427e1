#!/bin/sh
# DOF USDT end to end in the trixie-dtrace guest: a C program built with
# sid's `dtrace -h` and `dtrace -G` (in a chroot of the trixie-build root,
# into _build/guest-usdt) registers its probes with dtprobed through
# /dev/dtrace/helper when it starts; a `dtrace -Z -n 'myprov*:::myprobe'`
# started before it, naming no pid, must see them fire.
#   test/guests/usdt.sh             on the host, as root
# Exits 0 when DTrace printed the program's probes with their arguments.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
src=test/guests/usdt
out=_build/guest-usdt

if [ "${1:-}" != --in-guest ]; then
    cd "$top"
    mkdir -p "$out"
    # dtrace -h/-G compile only, but load DTrace's D library first; on the
    # host's kernel its io.d cannot resolve a kernel symbol: -xnolibs.
    scripts/guest.sh chroot trixie-build -- sh -eu -c "
        cd $out
        dtrace -xnolibs -h -s ../../$src/prov.d -o prov.h
        gcc -O2 -I. -I/usr/lib/x86_64-linux-gnu/dtrace/include -c ../../$src/prog.c -o prog.o
        dtrace -xnolibs -G -s ../../$src/prov.d prog.o -o prov.o
        gcc -o prog prog.o prov.o"
    exec scripts/guest.sh run trixie-dtrace -- sh test/guests/usdt.sh --in-guest
fi

now() { date +%s%N; }
ms() { echo $((($(now) - $1) / 1000000)); }
# wait_for FILE PATTERN SECONDS: until a line of FILE matches PATTERN.
# A deadline in seconds of the clock: under TCG each round costs much more
# than its sleep.
wait_for() {
    end=$(($(date +%s) + $3))
    until grep -q -- "$2" "$1" 2>/dev/null; do
        if [ "$(date +%s)" -gt $end ]; then
            echo "usdt: no \"$2\" in $3 s; DTrace printed:"
            cat "$1"
            return 1
        fi
        sleep 0.1
    done
}
log=/tmp/usdt.dtrace
t0=$(now)
dtrace -Z -q -n 'BEGIN { printf("ready\n"); }' \
    -n 'myprov*:::myprobe { printf("fired %s %d %s\n", probeprov, arg0, copyinstr(arg1)); }' >$log 2>&1 &
tracer=$!
wait_for $log '^ready' 120 || exit 1
echo "usdt: dtrace ready in $(ms "$t0") ms"
t0=$(now)
$out/prog 600 &
prog=$!
ok=0
wait_for $log '^fired myprov[0-9]* [0-9]* tick ' 60 && ok=1
echo "usdt: first probe seen $(ms "$t0") ms after the program started"
[ $ok = 1 ] && sleep 1
kill $prog $tracer 2>/dev/null
wait $tracer 2>/dev/null
echo "usdt: program pid $prog; DTrace printed:"
head -n 20 $log
grep -q "^fired myprov$prog [0-9]* tick [0-9]*\$" $log || { echo "usdt: FAIL"; exit 1; }
echo "usdt: ok"
