#!/bin/sh
# `make demo-recorder`: the flight recorder catches the rare slow put, with
# nobody watching (examples/dtrace_recorder_demo.erl; docs/recorder.md).
#
# Two nodes run the demo's key-value store: the workers on a "front" node,
# the log writer (with its occasional 16 MB merge and fdatasync) on a "disk"
# node. Each has a flight recorder: an LTTng snapshot session keeping its
# node's last events in memory. A put over 10 ms fires the front node's
# trigger (LTTng writes the snapshot, no Erlang code involved), and the
# put asks the cluster for a snapshot too (dtrace_recorder:trigger_cluster/1),
# so the disk node writes its own. The report merges both: the slow put's
# span, and the file I/O it waited for on the other node, in time order,
# from the seconds before. About 40 seconds.
#
# Needs lttng-tools, liblttng-ust and python3-bt2 (make installs them on
# Debian/Ubuntu). Runs as root or as any user: without a session daemon for
# this user, it starts one (lttng-sessiond --daemonize) and says so.
set -eu
cd "$(dirname "$0")/.."
run_s=${DEMO_SECONDS:-20}
ebin=_build/default/lib/dtrace/ebin
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for c in lttng lttng-sessiond; do
    command -v "$c" >/dev/null 2>&1 || { echo "$c is not installed (apt-get install lttng-tools)" >&2; exit 1; }
done
/usr/bin/python3 -c 'import bt2' 2>/dev/null ||
    { echo "python3-bt2 is not installed (apt-get install python3-bt2): the report needs it" >&2; exit 1; }
sink=$(erl -noshell -pa "$ebin" -eval 'io:format("~p", [maps:get(lttng, dtrace:sinks())]), halt().')
[ "$sink" = true ] || { echo "the library's LTTng sink is not loaded here: $sink" >&2; exit 1; }
if ! lttng list >/dev/null 2>&1; then
    echo "== No LTTng session daemon for $(id -un): starting one (lttng-sessiond --daemonize)"
    lttng-sessiond --daemonize
fi
erlc -o "$work" examples/dtrace_recorder_demo.erl

echo "== The flight recorder on two nodes, ${run_s} s of a key-value workload"
echo "   dtrace_recorder:start(#{triggers => [{event, <<\"org_erlang_dtrace:span_slow\">>,"
echo "                                          <<\"kind == \\\"put\\\" && duration_ns > 10000000\">>}],"
echo "                           events => detail, buffer => {8, 1 bsl 20}, min_interval_ms => 5000,"
echo "                           max_snapshots => 3})"
echo
out=${DEMO_OUT:-${TMPDIR:-/tmp}/dtrace-recorder-demo}
rm -rf "$out"; mkdir -p "$out"
erl -noshell -sname "dtrace_recdemo_$$" -pa "$ebin" -pa "$work" \
    -eval "dtrace_recorder_demo:run($run_s, \"$out/recorder\"), halt()."
echo
echo "   Open $out/timeline.svg in a browser: a lane per node and process, the spans and"
echo "   file operations as bars by tag, the trigger in red. The snapshots stay in $out/recorder"
echo "   (DEMO_OUT=DIR to put them elsewhere); the report script reads them again:"
echo "   priv/bin/dtrace-recorder-report --tags 5 $out/recorder/*/t*-*"
