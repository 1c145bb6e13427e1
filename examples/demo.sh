#!/bin/sh
# `make demo`: the probes on a stock VM, seen by a real tracer.
#
# A small key-value workload (examples/dtrace_demo.erl) wraps every get and
# put in begin/end probes, and a log-writer process appends each put to disk
# through dtrace_file, carrying the put's tag (spread with the request).
# About one put in 400 waits for a merge of the log (8 MB written and synced):
# the 99th-percentile spike from the seeds. bpftrace, attached with
# priv/span-latency.bt, shows the latency histogram per operation and names
# each slow request by its user tag; a second bpftrace with priv/efile.bt
# shows the slow file operations and the requests they were done for.
# Last, a node defines a provider of its own at run time (dtrace_provider)
# and bpftrace lists and reads its probes. Ends by itself in about 35 seconds.
set -eu
cd "$(dirname "$0")/.."
run_s=${DEMO_SECONDS:-20}
ebin=_build/default/lib/dtrace/ebin
so=$(cd _build/default/lib/dtrace/priv && pwd -P)/dtrace_nif.so
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
erlc -o "$work" examples/dtrace_demo.erl

echo "== 1. The probes, in $so"
echo "   $(readelf -n "$so" | grep -c 'Provider: erlang') SDT probes of provider 'erlang', for example:"
readelf -n "$so" | grep -A2 -E 'Name: user_trace__(i4s4|n1)$' | sed 's/^ */     /'
echo

echo "== 2. No tracer attached: each probe call returns false, at the cost of a semaphore read"
erl -noshell -pa "$ebin" -eval '
    io:format("   dtrace:available()            -> ~p~n", [dtrace:available()]),
    io:format("   dtrace:put_tag(\"req-1\")       -> ~p~n", [dtrace:put_tag("req-1")]),
    io:format("   dtrace:p(1, 2, \"hello\")       -> ~p~n", [dtrace:p(1, 2, "hello")]),
    io:format("   dtrace:pn(1, 1, 42)           -> ~p~n", [dtrace:pn(1, 1, 42)]),
    halt().'
echo

why_not=
if ! command -v bpftrace >/dev/null 2>&1; then
    why_not="bpftrace is not installed (apt-get install bpftrace)"
elif [ "$(id -u)" -ne 0 ]; then
    why_not="attaching a tracer needs root (or CAP_BPF and CAP_PERFMON); run: sudo make demo"
fi

if [ -n "$why_not" ]; then
    echo "== 3. No tracer can attach here: $why_not."
    echo "   The workload runs anyway; every probe call returns false:"
    erl -noshell -pa "$ebin" -pa "$work" -eval 'dtrace_demo:run(3), halt().' | sed 's/^/   /'
    exit 0
fi

echo "== 3. A key-value workload for ${run_s}s, traced by bpftrace with priv/span-latency.bt"
erl -noshell -pa "$ebin" -pa "$work" -eval "dtrace_demo:run($run_s), halt()." > "$work/workload.log" 2>&1 &
node=$!
# bpftrace -p finds the probes in the libraries the process has mapped.
i=0
until grep -q dtrace_nif.so "/proc/$node/maps" 2>/dev/null; do
    i=$((i + 1)); [ $i -gt 100 ] && { echo "the node did not load the NIF" >&2; exit 1; }
    sleep 0.1
done
echo "   node OS pid $node; attaching: bpftrace -p $node priv/span-latency.bt"
echo "   (and, for step 4, bpftrace -p $node priv/efile.bt)"
echo "   span kinds: 1 = get, 2 = put; the user tag names the request"
echo
timeout -s INT $((run_s - 4)) bpftrace -p "$node" priv/efile.bt > "$work/efile.out" 2>&1 &
efile=$!
timeout -s INT $((run_s - 4)) bpftrace -p "$node" priv/span-latency.bt 2>&1 \
    | grep -v -e RLIMIT_MEMLOCK -e 'failed to detach' -e uprobe_events | sed 's/^/   /' || true
wait "$efile" || true
wait "$node"
echo
sed 's/^/   /' "$work/workload.log"
echo "   (true: a tracer listened and got the event; false: nobody listened, before"
echo "    bpftrace attached and after it left.)"
echo

echo "== 4. The file I/O behind the slow requests, from priv/efile.bt"
echo "   $(grep -c ' ok in ' "$work/efile.out" || true) file operations traced, each with the tag of the put it was done for"
echo "   (the log writer is another process: the tag came with the request). Over 5 ms:"
awk '/^efile .* in [0-9]+ us$/ && $(NF-1) > 5000 { print "   " $0 }' "$work/efile.out" | head -24
echo "   (efile.bt also prints every operation as it starts and ends, and a latency"
echo "    histogram per tag on exit: here one per request, so left out.)"
echo

echo "== 5. A provider of the application's own, defined at run time (dtrace_provider)"
echo "   {ok, P} = dtrace_provider:new(demo_app, [{request__start, [int, string]}, {request__done, [int, int]}])"
erl -noshell -pa "$ebin" -eval '
    {ok, P} = dtrace_provider:new(demo_app, [{request__start, [int, string]}, {request__done, [int, int]}]),
    io:format("~s ~s~n", [os:getpid(), dtrace_provider:path(P)]),
    Loop = fun Loop(N, Trues) when N > 600 -> io:format("trues ~b~n", [Trues]);
               Loop(N, Trues) ->
                   Path = lists:nth(1 + N rem 3, ["/", "/users", "/orders"]),
                   A = dtrace_provider:fire(P, request__start, [N, ["GET ", Path]]),
                   timer:sleep(5),
                   B = dtrace_provider:fire(P, request__done, [N, 200]),
                   Loop(N + 1, Trues + length([x || true <- [A, B]]))
           end,
    Loop(1, 0), halt().' > "$work/provider.log" 2>&1 &
node=$!
i=0
until [ -s "$work/provider.log" ]; do
    i=$((i + 1)); [ $i -gt 100 ] && { echo "the node did not define its provider" >&2; exit 1; }
    sleep 0.1
done
read -r pid so < "$work/provider.log"
echo "   node OS pid $pid; the provider is the file $so:"
readelf -n "$so" | grep -E 'Name:|Arguments:' | sed 's/^ */     /'
echo "   bpftrace -p $pid -l 'usdt:*:demo_app:*'"
bpftrace -p "$pid" -l 'usdt:*:demo_app:*' 2>/dev/null | sed 's/^/     /'
echo "   bpftrace -p $pid -e 'usdt:$so:demo_app:request__start { printf(\"%ld %s\\\\n\", arg0, str(arg1)); }'  (for 1 s)"
timeout -s INT 1 bpftrace -p "$pid" -e "usdt:$so:demo_app:request__start { printf(\"%ld %s\\n\", arg0, str(arg1)); }" \
    > "$work/provider.out" 2>&1 || true
grep -v -e RLIMIT_MEMLOCK -e 'failed to detach' -e uprobe_events "$work/provider.out" | head -6 | sed 's/^/     /'
echo "     ..."
wait "$node"
echo "   bpftrace printed $(grep -c ' GET ' "$work/provider.out" || true) events; the node's fire calls returned true" \
     "$(sed -n 's/^trues //p' "$work/provider.log") times (false before bpftrace attached and after it left)."
echo "   At exit the node removed its provider's file: $(test -e "$so" && echo 'still there (unexpected)' || echo 'gone')."
