"""dtrace-recorder-report (priv/bin): the report of one or more
flight-recorder snapshots.

    dtrace-recorder-report [--svg FILE | --no-svg] [--tags N|all] [--tag TAG]...
                           [--top N] [--max-lines N] [--slow MS]
                           [--trace FILE]... [--folded FILE] SNAPSHOT_DIR...

Reads LTTng snapshots written by dtrace_recorder (any number, of any nodes),
merges their events by time, and prints:

  - the snapshots (node, reason, events, discarded events);
  - the triggering event of each (the recorder's marker event for a snapshot
    asked for, the first event matching a trigger's filter after it was armed
    for a trigger's snapshot);
  - per user tag: the spans and file operations in time order, with their
    durations, the node and the process of each (and the user probes fired);
  - why each span of --slow ms or more (default 10) was slow: on CPU,
    scheduled out (by the function it waited in, and whom it waited on),
    GC, file I/O under its tag, messages received (why's rules, the same
    as dtrace-slow-spans');
  - the slowest operations;

and writes an SVG timeline (lanes per node and process, spans and file
operations as bars, the trigger marked) that a browser opens. With --trace
FILE it also writes the slow spans (--slow) of every node as one trace
(FILE.json: Chrome's Trace Event JSON; any other name: Perfetto's protobuf,
which needs the perfetto Python package), each node a process, each Erlang
process a track; with --folded FILE, a flame graph of where they spent
their time (folded stacks). What they hold and their bounds: timeline's
docstring.

Each snapshot's node, reason and triggers come from the dtrace-recorder.json
sidecar the recorder writes next to LTTng's files; without one (a snapshot
taken with the lttng CLI alone) the node is named after the trace's hostname
and the process id.

Why the babeltrace2 Python bindings (Debian: python3-bt2) and not the
babeltrace2 CLI: the bindings give each field with its type (no parsing of
the CLI's text, whose string escaping and layout are not an interface), and
each event's time as nanoseconds from the clock's origin, which is what merges
the snapshots of several nodes (several traces) into one order, on one host
or several; the CLI's muxer refuses traces whose clocks it cannot correlate.
The bindings are part of babeltrace2's own release, so they read what the
CLI reads.

Exit status: 0 done, 2 bad arguments, 3 python3-bt2 missing (report_read
says where it is looked for), 4 no trace
found in a path, 5 a --trace or --folded file could not be written (the
report was printed).
"""

import argparse
import datetime
import json
import os
import sys
from typing import Optional

# The report's parts: reading the snapshots (exits with status 3 without
# python3-bt2), the model, the triggers, the SVG; the timeline (--trace,
# --folded).
from dtrace_tools import report_kernel, report_model
from dtrace_tools import timeline as timelines
from dtrace_tools.report_model import PROVIDER, Item, build, clock, collapse, describe, failed, fmt_fields, ms
from dtrace_tools.report_read import NoTrace, Snapshot, need_bt2
from dtrace_tools.report_svg import svg
from dtrace_tools.report_triggers import Trigger, trigger_events
from dtrace_tools.why import Breakdown


# -- Text ------------------------------------------------------------------

def report(snapshots: list[Snapshot], items: list[Item], counts: dict[str, int],
           args: argparse.Namespace) -> tuple[list[str], list[Optional[str]], int, list[Trigger]]:
    out: list[str] = []
    w = out.append
    all_ts = [e[0] for s in snapshots for e in s.events]
    total = len(all_ts)
    if total:
        t0, t1 = min(all_ts), max(all_ts)
        w("dtrace flight recorder: %d snapshot(s), %d node(s), %d events, %s .. %s UTC (%.3f s)"
          % (len(snapshots), len({s.node for s in snapshots}), total, clock(t0), clock(t1), (t1 - t0) / 1e9))
    else:
        w("dtrace flight recorder: %d snapshot(s), no events" % len(snapshots))
    w("")
    w("Snapshots")
    for s in snapshots:
        m = s.meta
        when = ""
        if "time_ms" in m:
            when = datetime.datetime.fromtimestamp(m["time_ms"] / 1000, datetime.timezone.utc).strftime("%H:%M:%S")
        w("  %-28s %6d events%s  %s %s" % (
            s.node, len(s.events),
            " (%d discarded: overwritten while the snapshot was written)" % s.discarded if s.discarded else "",
            ("%s, taken %s UTC:" % (m.get("source", "?"), when)) if m else "(no sidecar)",
            json.dumps(m.get("reason", "")) if m else ""))
        w("    %s" % s.path)
    w("")

    trig = trigger_events(snapshots)
    ref: Optional[int] = None
    w("Triggering event")
    for s, ts, f, text in trig:
        if ts is None:
            w("  %-28s not found in the snapshot (overwritten, or no sidecar)" % s.node)
            continue
        if ref is None or ts < ref:
            ref = ts
        f = f or {}
        w("  %-28s %s UTC  %s  tag %s  %s" % (s.node, clock(ts), f.get("proc") or "", json.dumps(f.get("user_tag")),
                                              text))
        detail = fmt_fields(f, ["label", "i1", "i2", "i3", "i4", "s1", "s2", "s3", "s4", "kind", "duration_ns"])
        if detail:
            w("  %-28s   %s" % ("", detail))
    if ref is None:
        ref = min(all_ts) if all_ts else 0
        w("  (times below are relative to the first event)")
    else:
        w("  (times below are relative to the earliest triggering event, in ms)")
    w("")

    trigger_tags: list[Optional[str]] = []
    for _s, ts, f, _t in trig:
        if f and f.get("user_tag") and f["user_tag"] not in trigger_tags:
            trigger_tags.append(f["user_tag"])

    ops = [i for i in items if i.what in ("span", "file") and i.end is not None]
    slowest_by_tag: dict[Optional[str], int] = {}
    for i in ops:
        key = i.tag
        slowest_by_tag[key] = max(slowest_by_tag.get(key, 0), duration(i))
    by_tag: dict[Optional[str], list[Item]] = {}
    for i in items:
        by_tag.setdefault(i.tag, []).append(i)

    shown: list[Optional[str]]
    if args.tag:
        shown = list(dict.fromkeys(trigger_tags + args.tag))
    elif args.tags == "all":
        tagged: list[Optional[str]] = sorted((t for t in by_tag if t is not None), key=lambda t: by_tag[t][0].start)
        shown = list(dict.fromkeys(trigger_tags + tagged + ([None] if None in by_tag else [])))
    else:
        n = int(args.tags)
        # Untagged work is not a request: detailed only when asked for.
        rest: list[Optional[str]] = sorted((t for t in slowest_by_tag if t not in trigger_tags and t is not None),
                                           key=lambda t: -slowest_by_tag[t])
        shown = (trigger_tags + rest)[:max(n, len(trigger_tags))]

    for tag in shown:
        rows = sorted(by_tag.get(tag, []), key=lambda i: i.start)
        nodes = sorted({i.node for i in rows})
        w("Tag %s: %d spans, %d file operations, %d other events, on %s"
          % (json.dumps(tag) if tag is not None else "(untagged)",
             sum(1 for i in rows if i.what == "span"), sum(1 for i in rows if i.what == "file"),
             sum(1 for i in rows if i.what not in ("span", "file")), ", ".join(nodes) or "no node"))
        w("  %12s  %-24s %-12s %-52s %s" % ("at (ms)", "node", "process", "what", "duration"))
        lines = collapse(rows)
        for i, n, last in lines[:args.max_lines]:
            if i.duration is not None and i.what in ("span", "file"):
                dur = "%.3f ms" % ms(i.duration)
            elif i.open:
                dur = "still running at the snapshot"
            elif n > 1:
                dur = "x%d, the last at %+.3f ms" % (n, ms(last.start - ref))
            else:
                dur = ""
            w("  %+12.3f  %-24s %-12s %-52s %s" % (ms(i.start - ref), i.node, i.proc or "", describe(i), dur))
        if len(lines) > args.max_lines:
            w("  ... %d more lines (--max-lines)" % (len(lines) - args.max_lines))
        w("")
    others = len([t for t in by_tag if t not in shown])
    if others:
        w("%d other tag(s) not shown (--tags all, or --tag TAG; from Erlang: tags => all, or tags => [Tag])"
          % others)
        w("")

    slow = sorted((i for i in items if i.what == "span" and i.why is not None
                   and i.why.duration >= args.slow * 1_000_000), key=lambda i: -breakdown(i).duration)
    w("Why the slow spans were slow (spans of %g ms or more; rules: docs/operators.md, \"Why was it slow\")"
      % args.slow)
    vm = sum(1 for s in snapshots for e in s.events if e[2].startswith(PROVIDER + "span_vm_"))
    bare: list[Item] = []
    if not vm:
        w("  (no span_vm_* event in the snapshots: on CPU, scheduled out and GC are not told apart;"
          " record org_erlang_dtrace:span_vm_*: start the recorder with events => detail, which its"
          " default events leave out for their cost)")
        bare = sorted((i for i in items if i.what == "span" and i.duration is not None
                       and i.duration >= args.slow * 1_000_000), key=lambda i: -duration(i))
        for i in bare[:args.top]:
            w("  %s %s %s  %.3f ms, tag %s  %s%s" % (
                i.node, i.proc or "", i.kind, ms(duration(i)), json.dumps(i.tag or ""),
                "span_slow" if i.slow_only else "", "  FAILED: %s" % failed(i) if failed(i) else ""))
    if slow and report_model.kernel_seen[0] is False:
        w("  " + (report_kernel.note(False) or ""))
    for i in slow[:args.top]:
        block = breakdown(i).lines(clock)
        block[0] = "%s  %s" % (block[0], i.node)
        for line in block:
            w("  " + line)
    if not slow and not bare:
        w("  (none)")
    elif len(slow) > args.top:
        w("  ... %d more slow spans (--top)" % (len(slow) - args.top))
    w("")

    w("Slowest operations")
    for i in sorted(ops, key=lambda i: -duration(i))[:args.top]:
        w("  %10.3f ms  %-44s tag %-24s %-24s %-12s at %+.3f ms"
          % (ms(duration(i)), describe(i).replace("  ", ""), json.dumps(i.tag) if i.tag is not None else "(untagged)",
             i.node, i.proc or "", ms(i.start - ref)))
    if not ops:
        w("  (no span or file operation in the snapshots)")
    w("")
    fails = sorted((i for i in items if failed(i) and i.end is not None), key=lambda i: i.start)
    w("Failed spans (the span raised: error, exit or throw; slow or not)")
    by_kind: dict[tuple[Optional[str], Optional[str]], int] = {}
    for i in fails:
        by_kind[(i.kind, failed(i))] = by_kind.get((i.kind, failed(i)), 0) + 1
    for (kind, outcome), n in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        w("  %d x %s (%s)" % (n, kind, outcome))
    for i in fails[:args.top]:
        w("  %+12.3f ms  %s %s %s %s, %.3f ms, tag %s" % (
            ms(i.start - ref), i.node, i.proc or "", i.kind, failed(i), ms(duration(i)),
            json.dumps(i.tag) if i.tag is not None else "(untagged)"))
    if len(fails) > args.top:
        w("  ... %d more failed spans (--top)" % (len(fails) - args.top))
    if not fails:
        w("  (none)")
    w("")

    return out, shown, ref, trig


def duration(i: Item) -> int:
    """An ended item's duration (ns)."""
    assert i.duration is not None
    return i.duration


def breakdown(i: Item) -> Breakdown:
    """A span's breakdown, for one that has it."""
    assert i.why is not None
    return i.why


def trigger_tag_list(trig: list[Trigger]) -> list[str]:
    return [f["user_tag"] for _s, ts, f, _t in trig if f and f.get("user_tag")]


# -- Main ------------------------------------------------------------------

def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="dtrace-recorder-report", description="Report of dtrace flight-recorder snapshots")
    p.add_argument("paths", nargs="+", help="snapshot directories")
    p.add_argument("--svg", help="write the SVG timeline to this file")
    p.add_argument("--no-svg", action="store_true")
    p.add_argument("--tags", default="10", help="how many tags to detail (a number, or all)")
    p.add_argument("--tag", action="append", default=[], help="detail this tag (repeatable)")
    p.add_argument("--top", type=int, default=10, help="how many slowest operations")
    p.add_argument("--max-lines", type=int, default=200, help="lines per tag at most")
    p.add_argument("--slow", type=float, default=10.0,
                   help="break down spans of at least this many ms (default 10)")
    p.add_argument("--trace", metavar="FILE", action="append", default=[],
                   help="write the slow spans as a trace: FILE.json Chrome's JSON, else Perfetto's protobuf "
                   "(repeatable)")
    p.add_argument("--folded", metavar="FILE", help="write a flame graph's folded stacks of the slow spans")
    args = p.parse_args(argv)
    if args.tags != "all" and not args.tags.isdigit():
        p.error("--tags: a number or all")
    need_bt2()
    snapshots = []
    for k, path in enumerate(args.paths):
        s = Snapshot(path, k)
        try:
            s.read()
        except NoTrace as e:
            sys.stderr.write("dtrace-recorder-report: no LTTng trace in %s\n" % e)
            return 4
        snapshots.append(s)
    items, counts = build(snapshots)
    lines, shown, ref, trig = report(snapshots, items, counts, args)
    if not args.no_svg:
        target = args.svg or os.path.join(os.path.dirname(os.path.abspath(args.paths[0])), "report.svg")
        try:
            svg(target, items, shown, ref, trig, trigger_tag_list(trig))
            lines.append("Timeline (SVG): %s" % target)
        except OSError as e:
            lines.append("Timeline (SVG) not written: %s" % e)
    rc = 0
    if args.trace or args.folded:
        timeline = timelines.Timeline(names={(s.node, pid): name for s in snapshots
                                             for pid, name in (s.meta.get("names") or {}).items()})
        # In the order they ended, as a live run adds them (a span's slow
        # children before it).
        slow_spans = [b for i in items for b in [i.why if i.what == "span" else None]
                      if b is not None and b.duration >= args.slow * 1_000_000]
        for b in sorted(slow_spans, key=lambda b: (b.end, -b.begin)):
            timeline.add(b)
        writes = [(path, timeline.write) for path in args.trace]
        if args.folded:
            writes.append((args.folded, timeline.write_folded))
        for path, write in writes:
            try:
                lines.append(write(path))
            except (OSError, timelines.TraceError) as e:
                lines.append("%s not written: %s" % (path, e))
                rc = 5
    sys.stdout.write("\n".join(lines) + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
