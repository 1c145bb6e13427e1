#!/bin/sh
# `make demo`: the probes on a stock VM, seen by a real tracer.
#
# A small key-value workload (examples/dtrace_demo.erl) runs every get and
# put as a span (dtrace:span_begin/1, span_end/1), and a log-writer process appends each put to disk
# through dtrace_file, carrying the put's tag (spread with the request).
# About one put in 400 waits for a merge of the log (8 MB written and synced):
# the 99th-percentile spike from the seeds. bpftrace, attached with
# priv/bpftrace/span-latency.bt, shows the latency histogram per operation, names
# each slow request by its user tag and the failed ones (a get of a key
# nobody wrote raises: outcome "error") apart; priv/bin/dtrace-slow-spans says why each
# was slow (where its process waited); a second bpftrace with priv/bpftrace/efile.bt
# shows the slow file operations and the requests they were done for; a
# third, with priv/bpftrace/message-latency.bt (a VM probe: the dtrace application
# sets the trace flags it needs while it runs), shows how long messages
# waited for their receiver, and that the log writer is where they wait.
# Then a node defines a provider of its own at run time (dtrace_provider)
# and bpftrace lists and reads its probes. Last, where LTTng is installed,
# a session records the same spans as LTTng-UST events (no uprobe) and the
# slow ones are read from the trace. Ends by itself in about 45 seconds.
set -eu
cd "$(dirname "$0")/.."
run_s=${DEMO_SECONDS:-20}
ebin=_build/default/lib/dtrace/ebin
so=$(cd _build/default/lib/dtrace/priv && pwd -P)/dtrace_nif.so
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# What step 4 writes for a viewer (kept after the demo): the slow spans as
# a timeline and as a flame graph.
out=${DEMO_OUT:-_build/demo}
mkdir -p "$out"
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

echo "== 3. A key-value workload for ${run_s}s, traced by bpftrace with priv/bpftrace/span-latency.bt"
erl -noshell -pa "$ebin" -pa "$work" -eval "dtrace_demo:run($run_s), halt()." > "$work/workload.log" 2>&1 &
node=$!
# bpftrace -p finds the probes in the libraries the process has mapped.
i=0
until grep -q dtrace_nif.so "/proc/$node/maps" 2>/dev/null; do
    i=$((i + 1)); [ $i -gt 100 ] && { echo "the node did not load the NIF" >&2; exit 1; }
    sleep 0.1
done
echo "   node OS pid $node; attaching: priv/bin/dtrace-bpftrace -p $node priv/bpftrace/span-latency.bt"
echo "   (and, for steps 4 to 6, priv/bin/dtrace-slow-spans -p $node, priv/bin/dtrace-bpftrace -p $node"
echo "    priv/bpftrace/efile.bt and priv/bpftrace/message-latency.bt)"
echo "   span kinds: get and put; the user tag names the request; a get of a key nobody"
echo "   wrote fails (not_found): its span ends with outcome \"error\", shown apart from slow ones"
echo
timeout -s INT $((run_s - 4)) priv/bin/dtrace-bpftrace -p "$node" priv/bpftrace/efile.bt > "$work/efile.out" 2>&1 &
efile=$!
timeout -s INT $((run_s - 4)) priv/bin/dtrace-bpftrace -p "$node" priv/bpftrace/message-latency.bt > "$work/latency.out" 2>&1 &
latency=$!
# Perfetto's protobuf too where the tool's Python has the perfetto package.
pftrace=
"${DTRACE_PYTHON:-python3}" -c 'import perfetto.trace_builder.proto_builder' 2>/dev/null &&
    pftrace="--trace $out/why.pftrace"
# shellcheck disable=SC2086
priv/bin/dtrace-slow-spans -p "$node" --duration $((run_s - 4)) --top 5 \
    --trace "$out/why.json" $pftrace --folded "$out/why.folded" > "$work/why.out" 2>&1 &
why=$!
# Every slow and every failed span prints as it ends: the first 8 of each
# here, all counted at the end. priv/bin/dtrace-bpftrace: the outcome is arg6,
# which bpftrace before 0.24 reads only through it, and no tracer warning.
timeout -s INT $((run_s - 4)) priv/bin/dtrace-bpftrace -p "$node" priv/bpftrace/span-latency.bt 2>&1 \
    | awk '/slow span:/ { if (++n > 8) next } /failed span:/ { if (++f > 8) next } { print "   " $0 }' || true
wait "$why" || true
wait "$efile" || true
wait "$latency" || true
wait "$node"
echo
sed 's/^/   /' "$work/workload.log"
echo "   (fired: a tracer listened and got the event; not: nobody listened, before"
echo "    bpftrace attached and after it left.)"
echo

echo "== 4. Why they were slow, from priv/bin/dtrace-slow-spans (each slow span's own process)"
awk '/slow span:/ { n++ } n == 1 { print "   " $0 } n > 1 { exit }' "$work/why.out"
sed -n '/spans ended/,$p' "$work/why.out" | sed 's/^/   /'
echo "   (on CPU, scheduled out by function and whom it waited on, GC, file I/O under the"
echo "    request's tag: docs/operators.md, \"Why was it slow\".)"
echo "   The same, to look at rather than read:"
echo "   - a timeline, one track per process, each slow span with where its time went:"
echo "     $out/why.json$( [ -n "$pftrace" ] && echo " (and why.pftrace)"): open it in https://ui.perfetto.dev"
echo "     (Open trace file) or chrome://tracing; speedscope reads it too;"
echo "   - a flame graph of where the slow spans spent their time: $out/why.folded,"
echo "     for https://www.speedscope.app (drop the file) or flamegraph.pl / inferno."
echo

echo "== 5. The file I/O behind the slow requests, from priv/bpftrace/efile.bt"
echo "   $(grep -c ' ok in ' "$work/efile.out" || true) file operations traced, each with the tag of the put it was done for"
echo "   (the log writer is another process: the tag came with the request). Over 5 ms:"
awk '/^efile .* in [0-9]+ us$/ && $(NF-1) > 5000 { print "   " $0 }' "$work/efile.out" | head -24
echo "   (efile.bt also prints every operation as it starts and ends, and a latency"
echo "    histogram per tag on exit: here one per request, so left out.)"
echo

echo "== 6. Where the slow puts waited, from priv/bpftrace/message-latency.bt (a VM probe)"
writer=$(sed -n 's/^log writer: //p' "$work/workload.log")
echo "   Time from each message's send to its receiver being scheduled, in us:"
awk '/^@wait_us:/ { p = 1; next } p && /^$/ { exit } p { print "   " $0 }' "$work/latency.out"
echo "   The longest waits, per receiver (the log writer is $writer):"
sed -n 's/^@max_wait_us\[\(.*\)\]: \([0-9]*\)$/\2 \1/p' "$work/latency.out" | sort -rn | head -5 |
    while read -r us pid; do
        if [ "$pid" = "$writer" ]; then who="  <- the log writer"; else who=; fi
        echo "     $pid waited up to $us us$who"
    done
echo "   Appends queue up at the one log writer while it merges: the put that triggered the"
echo "   merge is slow, and so are the ones behind it."
echo

echo "== 7. A provider of the application's own, defined at run time (dtrace_provider)"
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
     "$(sed -n 's/^trues //p' "$work/provider.log") times (false before bpftrace attached and after it left;"
echo "   a few more trues than events: calls while bpftrace was attaching or detaching its program, the semaphore up)."
echo "   At exit the node removed its provider's file: $(test -e "$so" && echo 'still there (unexpected)' || echo 'gone')."
echo

# 7. The same spans into LTTng-UST: no uprobe, no bpftrace.
lttng_sink=$(erl -noshell -pa "$ebin" -eval 'io:format("~p", [maps:get(lttng, dtrace:sinks())]), halt().')
if ! command -v lttng >/dev/null 2>&1 || ! command -v babeltrace2 >/dev/null 2>&1; then
    echo "== 7. LTTng: lttng-tools or babeltrace2 is not installed; step left out."
    exit 0
elif [ "$lttng_sink" != true ]; then
    echo "== 7. LTTng: the sink is not loaded here ($lttng_sink); step left out."
    exit 0
fi
pgrep -x lttng-sessiond >/dev/null || lttng-sessiond --daemonize
echo "== 8. The same spans recorded by an LTTng session (org_erlang_dtrace:span_end), 4 s"
echo "   lttng create dtrace_demo; lttng enable-event -u org_erlang_dtrace:span_end; lttng start"
lttng destroy dtrace_demo >/dev/null 2>&1 || true
lttng create dtrace_demo --output="$work/lttng" >/dev/null
lttng enable-event -u org_erlang_dtrace:span_end -s dtrace_demo >/dev/null
lttng start dtrace_demo >/dev/null
erl -noshell -pa "$ebin" -pa "$work" -eval 'dtrace_demo:run(4), halt().' > "$work/lttng-workload.log" 2>&1
lttng stop dtrace_demo >/dev/null
lttng destroy dtrace_demo >/dev/null
babeltrace2 --clock-seconds "$work/lttng" > "$work/lttng.txt"
echo "   $(wc -l < "$work/lttng.txt") events recorded; the first one, as babeltrace2 prints it:"
head -1 "$work/lttng.txt" | fold -w 96 | sed 's/^/     /'
echo "   Spans over 10 ms, from the trace (duration_ns is in the event):"
awk '{
        match($0, /user_tag = "[^"]*"/); tag = substr($0, RSTART + 12, RLENGTH - 13)
        match($0, /duration_ns = [0-9]+/); ns = substr($0, RSTART + 14, RLENGTH - 14)
        ms = ns / 1000000
        if (ms > 10) { n++; if (n <= 8) printf("     %-22s %6.1f ms\n", tag, ms) }
    } END { printf("   %d slow spans in all.\n", n) }' "$work/lttng.txt"
echo "   (an LTTng event costs a fraction of a uprobe: see BENCHMARKS.md)"
