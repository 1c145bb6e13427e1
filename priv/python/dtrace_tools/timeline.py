"""timeline: slow spans as a trace file a viewer opens, and as a flame
graph. Shared by dtrace-slow-spans and dtrace-recorder-report (their
--trace FILE and --folded FILE); the breakdowns are why's.

What a trace file holds (one model, two formats):

  - one process per node (its name), one track per Erlang process, named
    `<0.90.0> (my_server)` where the node named it (the pid alone otherwise);
  - each slow span a slice named by its kind, args: tag, outcome, span id,
    parent id, duration, the breakdown's cause; a failed span's name ends
    in ` [error]` (or exit, throw). Spans nest as they nest in time on the
    process; a child span that was not slow is not in the file;
  - inside each span, slices for where its time went, by the breakdown's
    rules (GC before file I/O before the OS's before scheduled out; the
    rest on CPU): `on CPU`, `GC`, `file I/O READ` (the command, under the
    span's tag), `scheduled out in gen:do_call/4` with args `waiting on`
    and `woken by`; with the kernel's events, on CPU's parts as why_os
    names them (`on CPU (user)`, `in the kernel: page faults`, `preempted
    by yes (pid 4242)`, ...);
  - messages sent between two processes that both have a track, as flows
    from the sender's track to the receiver's at the time of the send.

FILE.json is Chrome's Trace Event Format (JSON object form: chrome://tracing,
speedscope, ui.perfetto.dev); any other name is Perfetto's protobuf trace
(TrackEvent packets), written with the `perfetto` Python package's
TraceProtoBuilder and protos (not a Debian package: where the tool's
Python finds it, dtrace_tools' doc says), for ui.perfetto.dev and
trace_processor. Times are the events' nanoseconds on the node's clock
(a cluster's report: one clock, as it merges them).

The folded stacks (flamegraph.pl, inferno, speedscope): one line per
stack, `span kind;cause;function weight`, weight in microseconds, summed
over every slow span, each counting its time outside the slow spans
nested in it (those count under their own kind); the causes are `on CPU`
(then the innermost call function_probes saw, when any), `GC`, `file I/O`
(then the command) and `scheduled out` (then the function it waited in);
with the kernel's events, on CPU's parts: `on CPU (user)` (then the
call), and `in the kernel`, `preempted`, `throttled`, `blocked`, `dirty
scheduler`, `the tracer`, each then its label.

Bounds: the slowest spans are kept, up to MAX_SPANS spans (memory: at
most MAX_SPANS + TRIM_SLACK breakdowns of MAX_DETAIL intervals of each
kind) and MAX_EVENTS events in all, the slowest spans first (the JSON is
then about 30 MB at most; otherData.spans_left_out says how many did not
fit); a span's inner slices past MAX_SLICES are left out, the shortest
first (its args say how many). The folded stacks count every slow span.
"""

import bisect
import json
import sys
from typing import Any, Iterable, Optional, Sequence

from dtrace_tools import python_hint
from dtrace_tools.why import CATEGORY_TEXT, Breakdown, Pid, component_text

MAX_SPANS = 5_000
MAX_EVENTS = 200_000
MAX_SLICES = 2_000
# Intervals of each kind a kept span holds (its breakdown's totals count
# them all), and how far past MAX_SPANS the kept spans grow before the
# slowest MAX_SPANS are chosen again.
MAX_DETAIL = 500
TRIM_SLACK = 500
# The folded stacks exclude a span's slow children, found among the last
# RECENT slow spans of its process, for the last RECENT_PROCS processes.
RECENT = 64
RECENT_PROCS = 10_000

# Which cause a moment belongs to when several intervals cover it: the
# breakdown's rules (why, why_os).
ORDER = ("gc", "file", "os", "out")

# A track: (node, pid).
Key = tuple[str, Pid]
# A slice of a track: (begin, end, depth, name, args, is_span).
Slice = tuple[int, int, int, str, dict[str, Any], bool]
# A message between two tracks: (ts, sender's, receiver's).
Flow = tuple[int, Key, Key]
# Where a span's time went over (start, end): (start, end, cause, label, args).
Segment = tuple[int, int, str, Optional[str], dict[str, Any]]
# An interval a _Cover finds: (start, end, label, extra).
Covered = tuple[int, int, Any, Any]
# A track's event: (ts, "B"|"E"|"I", name, args, flow ids, terminating flow ids).
TrackEvent = tuple[int, str, Optional[str], Optional[dict[str, Any]], list[int], list[int]]


class Timeline:
    """Breakdowns collected for one file; add() each slow span's."""

    def __init__(self, max_spans: int = MAX_SPANS, names: Optional[dict[Key, str]] = None) -> None:
        """names: {(node, pid): name}, the processes' names per node (a
        cluster's pids repeat across nodes); without it, each breakdown's
        names (one node's)."""
        self.spans: list[Breakdown] = []
        self.names: dict[Key, str] = dict(names) if names is not None else {}
        self.own_names = names is None
        self.max_spans = max_spans
        self.left_out = 0
        self.over_budget = 0
        self.stacks: dict[str, int] = {}  # folded stack -> ns, over every span added
        # (node, pid) -> [(begin, end)] of its last spans
        self.recent: dict[Key, list[tuple[int, int]]] = {}

    def _fold(self, b: Breakdown) -> None:
        """Adds b's time, outside the slow spans nested in it, to the
        folded stacks: as it is added, so that they count every span."""
        key = (b.node, b.pid)
        recent = self.recent.pop(key, [])
        end = span_end(b)
        children = [(s, min(e, end)) for s, e in recent if b.begin <= s < end]
        for s, e, cat, label, _x in segments(b, children):
            frames = [str(b.kind)] + folded_frames(cat, label)
            stack = ";".join(f.replace(";", ":").replace("\n", " ") for f in frames)
            self.stacks[stack] = self.stacks.get(stack, 0) + (e - s)
        recent.append((b.begin, end))
        # Re-inserted last: the processes seen longest ago go first.
        self.recent[key] = recent[-RECENT:]
        while len(self.recent) > RECENT_PROCS:
            del self.recent[next(iter(self.recent))]

    def add(self, b: Breakdown) -> None:
        self._fold(b)
        _shrink(b)
        self.spans.append(b)
        if self.own_names:
            for pid, name in (b.names or {}).items():
                self.names.setdefault((b.node, pid), name)
        if len(self.spans) > self.max_spans + TRIM_SLACK:
            self._trim()

    def _trim(self) -> None:
        self.spans.sort(key=lambda b: -b.duration)
        self.left_out += len(self.spans[self.max_spans:])
        del self.spans[self.max_spans:]

    # -- The model ---------------------------------------------------------

    def model(self) -> tuple[dict[Key, list[Slice]], list[Flow]]:
        """(tracks, flows): tracks maps (node, pid) to its slices, each
        (begin, end, depth, name, args, is_span), in time order, nested by depth;
        flows are (ts, (node, sender), (node, receiver))."""
        self._trim()
        # The budget goes to the slowest spans first, whole.
        budget, chosen = MAX_EVENTS, []
        for b in self.spans:
            cost = 1 + min(MAX_SLICES, _leaf_estimate(b))
            if cost > budget:
                break
            budget -= cost
            chosen.append(b)
        self.over_budget = len(self.spans) - len(chosen)
        by_proc: dict[Key, list[Breakdown]] = {}
        for b in chosen:
            by_proc.setdefault((b.node, b.pid), []).append(b)
        tracks: dict[Key, list[Slice]] = {}
        for key, spans in sorted(by_proc.items(), key=lambda kv: -max(b.duration for b in kv[1])):
            slices: list[Slice] = []
            for b, depth, hi, children in _nest(spans):
                leaves = segments(b, children, hi)
                kept = _keep(leaves, MAX_SLICES)
                args: dict[str, Any] = {"tag": b.tag, "outcome": b.outcome, "span_id": b.span_id,
                                        "parent_id": b.parent_id, "duration_ms": round(b.duration / 1e6, 3),
                                        "cause": b.cause()[1]}
                if len(kept) < len(leaves):
                    args["slices_left_out"] = len(leaves) - len(kept)
                name = str(b.kind) if b.outcome == "ok" else "%s [%s]" % (b.kind, b.outcome)
                slices.append((b.begin, hi, depth, name, args, True))
                for s, e, cat, label, extra in kept:
                    slices.append((s, e, depth + 1, slice_name(cat, label), extra, False))
            slices.sort(key=lambda x: (x[0], x[2]))
            tracks[key] = slices
        flows: list[Flow] = []
        seen: set[Flow] = set()
        for b in self.spans:
            for ts, sender, receiver in b.sends:
                f = (ts, (b.node, sender), (b.node, receiver))
                if f not in seen and f[1] in tracks and f[2] in tracks and sender != receiver:
                    seen.add(f)
                    flows.append(f)
        flows.sort(key=_flow_order)
        return tracks, flows[:MAX_EVENTS // 10]

    def track_name(self, key: Key) -> str:
        node, pid = key
        name = self.names.get(key)
        return "%s (%s)" % (pid, name) if name else str(pid)

    # -- Writers -----------------------------------------------------------

    def write(self, path: str) -> str:
        """Chrome JSON for *.json, else Perfetto's protobuf; returns a line
        saying what was written."""
        if path.endswith(".json"):
            return self.write_json(path)
        return self.write_perfetto(path)

    def write_json(self, path: str) -> str:
        tracks, flows = self.model()
        # Times from the first event, in microseconds with nanosecond
        # decimals: epoch nanoseconds as float microseconds lose their last
        # digits, and slices that touch would then overlap (viewers drop
        # a slice that overlaps its parent).
        origin = min([x[0] for sl in tracks.values() for x in sl] + [f[0] for f in flows] or [0])

        def us(t: int) -> float:
            return round((t - origin) / 1000.0, 3)
        covers = {k: _Cover([(x[0], x[1], None, None) for x in sl]) for k, sl in tracks.items()}
        flows = [f for f in flows if covers[f[1]].at(f[0]) and covers[f[2]].at(f[0])]
        nodes = _numbered(sorted({n for n, _p in tracks}))
        tids = _numbered(sorted(tracks, key=_key_order), start=1)
        ev: list[dict[str, Any]] = []
        for node, pid_no in nodes.items():
            ev.append({"ph": "M", "name": "process_name", "pid": pid_no, "tid": 0, "args": {"name": str(node)}})
        for key, slices in tracks.items():
            pid_no, tid = nodes[key[0]], tids[key]
            ev.append({"ph": "M", "name": "thread_name", "pid": pid_no, "tid": tid,
                       "args": {"name": self.track_name(key)}})
            for s, e, _depth, name, args, is_span in slices:
                x = {"ph": "X", "name": name, "cat": "span" if is_span else "cause",
                     "pid": pid_no, "tid": tid, "ts": us(s), "dur": max(0.0, round(us(e) - us(s), 3)),
                     "args": {k: v for k, v in args.items() if v is not None}}
                if args.get("outcome") not in (None, "ok"):
                    x["cname"] = "terrible"
                ev.append(x)
        for k, (ts, src, dst) in enumerate(flows):
            ev.append({"ph": "s", "id": k + 1, "name": "message", "cat": "message",
                       "pid": nodes[src[0]], "tid": tids[src], "ts": us(ts)})
            ev.append({"ph": "f", "bp": "e", "id": k + 1, "name": "message", "cat": "message",
                       "pid": nodes[dst[0]], "tid": tids[dst], "ts": us(ts)})
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"traceEvents": ev, "displayTimeUnit": "ms",
                       "otherData": {"source": "dtrace", "origin_ns": origin,
                                     "spans_left_out": self.left_out + self.over_budget}}, f)
        return "Trace (Chrome JSON, %d processes, %d events): %s" % (len(tracks), len(ev), path)

    def write_perfetto(self, path: str) -> str:
        try:
            from perfetto.trace_builder.proto_builder import TraceProtoBuilder
            from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent
        except ImportError as e:
            raise TraceError("writing Perfetto's protobuf needs the perfetto Python package, which %s "
                             "cannot import (%s): %s; or name the file *.json for Chrome's JSON, which "
                             "Perfetto opens too" % (sys.executable, e, python_hint("perfetto")))
        tracks, flows = self.model()
        builder = TraceProtoBuilder()
        seq = 1
        nodes = _numbered(sorted({n for n, _p in tracks}), start=1)
        node_uuid = {}
        for node, no in nodes.items():
            p = builder.add_packet()
            p.track_descriptor.uuid = no
            p.track_descriptor.process.pid = no
            p.track_descriptor.process.process_name = str(node)
            node_uuid[node] = no
        uuids = _numbered(sorted(tracks, key=_key_order), start=1000)
        for key, uuid in uuids.items():
            p = builder.add_packet()
            p.track_descriptor.uuid = uuid
            p.track_descriptor.parent_uuid = node_uuid[key[0]]
            p.track_descriptor.thread.pid = nodes[key[0]]
            p.track_descriptor.thread.tid = uuid
            p.track_descriptor.thread.thread_name = self.track_name(key)
        flow_out: dict[Key, list[tuple[int, int]]] = {}
        flow_in: dict[Key, list[tuple[int, int]]] = {}
        for k, (ts, src, dst) in enumerate(flows):
            flow_out.setdefault(src, []).append((ts, k + 1))
            flow_in.setdefault(dst, []).append((ts, k + 1))
        events = []
        for key, slices in tracks.items():
            for ts, typ, name, args, fo, fi in _track_events(slices, flow_out.get(key, []), flow_in.get(key, [])):
                events.append((ts, uuids[key], typ, name, args, fo, fi))
        events.sort(key=lambda e: e[0])
        kinds = {"B": TrackEvent.TYPE_SLICE_BEGIN, "E": TrackEvent.TYPE_SLICE_END, "I": TrackEvent.TYPE_INSTANT}
        for ts, uuid, typ, name, args, fo, fi in events:
            p = builder.add_packet()
            p.timestamp = ts
            p.trusted_packet_sequence_id = seq
            te = p.track_event
            te.type = kinds[typ]
            te.track_uuid = uuid
            if typ != "E":
                te.name = name
                for arg, v in sorted((args or {}).items()):
                    if v is None:
                        continue
                    a = te.debug_annotations.add()
                    a.name = arg
                    if isinstance(v, bool):
                        a.bool_value = v
                    elif isinstance(v, int):
                        a.int_value = v
                    elif isinstance(v, float):
                        a.double_value = v
                    else:
                        a.string_value = str(v)
            te.flow_ids.extend(fo)
            te.terminating_flow_ids.extend(fi)
        with open(path, "wb") as f:
            f.write(builder.serialize())
        return "Trace (Perfetto protobuf, %d processes, %d events): %s" % (len(tracks), len(events), path)

    def folded(self) -> dict[str, int]:
        """{stack: ns} over every slow span added (not only those in the trace)."""
        return dict(self.stacks)

    def write_folded(self, path: str) -> str:
        stacks = self.folded()
        with open(path, "w", encoding="utf-8") as f:
            for stack, ns in sorted(stacks.items()):
                us = ns // 1000
                if us > 0:
                    f.write("%s %d\n" % (stack, us))
        return "Flame graph (folded stacks, %d stacks, microseconds): %s" % (len(stacks), path)


class TraceError(Exception):
    pass


def _key_order(key: Key) -> tuple[str, str]:
    """Tracks in order of node, then pid (the text: one node's pids are all
    texts)."""
    return key[0], str(key[1])


def _flow_order(f: Flow) -> tuple[int, tuple[str, str], tuple[str, str]]:
    return f[0], _key_order(f[1]), _key_order(f[2])


# -- Segments: where a span's time went, moment by moment ---------------------

def segments(b: Breakdown, children: Sequence[tuple[int, int]] = (), hi: Optional[int] = None) -> list[Segment]:
    """[(start, end, cause, label, args)] covering the span's time (to hi,
    where a parent ends it) outside its children's (begin, end), in order;
    cause is "gc", "file", "out", "cpu", or "unknown" for a span whose
    begin the events miss (the breakdown says so too)."""
    lo, hi = b.begin, (span_end(b) if hi is None else hi)
    if hi <= lo:
        return []
    if not b.complete:
        return [(lo, hi, "unknown", None, {})]
    gc: list[Covered] = [(max(s, lo), min(e, hi), None, None) for s, e, kind, _m in b.intervals if kind == "gc"]
    files: list[Covered] = [(max(s, lo), min(e, hi), c, None) for s, e, c in b.file_intervals]
    outs: list[Covered] = [(max(s, lo), min(e, hi), m, (w, on)) for s, e, m, w, on in b.outs]
    calls: list[Covered] = [(max(s, lo), min(e, hi), m, None) for s, e, m in b.call_intervals]
    # The OS's stretches (why_os), but for on CPU unsplit: that is the rest.
    oss: list[Covered] = [(max(s, lo), min(e, hi), c, lab) for s, e, c, lab in b.os.slices if c != "cpu"]
    cover = {"gc": _Cover(gc), "file": _Cover(files), "os": _Cover(oss), "out": _Cover(outs)}
    call_cover = _Cover(calls)
    kids = _Cover([(max(cb, lo), min(ce, hi), None, None) for cb, ce in children])
    cut_set = {lo, hi}
    for iv in (gc, files, oss, outs, calls, kids.iv):
        for s, e, _l, _x in iv:
            if lo <= s <= hi:
                cut_set.add(s)
            if lo <= e <= hi:
                cut_set.add(e)
    cuts = sorted(cut_set)
    out: list[list[Any]] = []
    for s, e in zip(cuts, cuts[1:]):
        if e <= s:
            continue
        mid = (s + e) // 2
        if kids.at(mid) is not None:
            continue
        cat, label, extra = "cpu", None, None
        for c in ORDER:
            hit = cover[c].at(mid)
            if hit is not None:
                cat, label, extra = c, hit[2], hit[3]
                break
        if cat == "os":
            # (category, label) of why_os; on CPU in user space keeps the call.
            cat, label, extra = "os:%s" % label, extra, None
            if cat == "os:user":
                hit = call_cover.at(mid)
                extra = hit[2] if hit is not None else None
        if cat == "cpu":
            hit = call_cover.at(mid)
            label = hit[2] if hit is not None else None
            if b.os.kernel:
                # Kernel events, but no sample here (why_os).
                cat, label, extra = "os:cpu", None, label
        if out and out[-1][1] == s and out[-1][2] == cat and out[-1][3] == label and out[-1][5] == extra:
            out[-1][1] = e
        else:
            out.append([s, e, cat, label, None, extra])
    result: list[Segment] = []
    for s, e, cat, label, _n, extra in out:
        args: dict[str, Any] = {}
        if cat == "out" and extra is not None:
            w, on = extra
            args = {"function": label, "waiting on": b.named(on) if on else None,
                    "woken by": b.named(w) if w else None}
        elif cat == "file":
            args = {"command": label, "tag": b.tag}
        elif cat == "cpu" and label:
            args = {"call": label}
        elif cat.startswith("os:"):
            args = {"call": extra} if extra else {}
            cat, label = cat, label if cat not in ("os:user", "os:cpu") else extra
        result.append((s, e, cat, label, args))
    return result


def span_end(b: Breakdown) -> int:
    """Where a span's slice ends: at its end event, which the breakdown's
    rules count to (its measured duration, in the args, can end a little
    before: a GC or a wait between the measure and the probe)."""
    return max(b.end, b.window_end)


def slice_name(cat: str, label: Optional[str]) -> str:
    if cat in ("os:user", "os:cpu"):
        return component_text(cat[3:], None) + (" in %s" % label if label else "")
    if cat.startswith("os:"):
        return component_text(cat[3:], label)
    if cat == "unknown":
        return "unknown (began before the events)"
    if cat == "gc":
        return "GC"
    if cat == "file":
        return "file I/O %s" % label
    if cat == "out":
        return "scheduled out in %s" % label
    return "on CPU" + (" in %s" % label if label else "")


def folded_frames(cat: str, label: Optional[str]) -> list[str]:
    if cat in ("os:user", "os:cpu"):
        return [component_text(cat[3:], None)] + ([label] if label else [])
    if cat.startswith("os:"):
        return [CATEGORY_TEXT[cat[3:]], str(label)]
    if cat == "unknown":
        return ["unknown"]
    if cat == "gc":
        return ["GC"]
    if cat == "file":
        return ["file I/O", str(label)]
    if cat == "out":
        return ["scheduled out", str(label)]
    return ["on CPU"] + ([label] if label else [])


class _Cover:
    """Which of the intervals (start, end, label, extra) covers a moment:
    the one that began last among those covering it."""

    def __init__(self, iv: Iterable[Covered]) -> None:
        self.iv = sorted((x for x in iv if x[1] > x[0]), key=lambda x: (x[0], -x[1]))
        self.starts = [x[0] for x in self.iv]

    def at(self, t: int) -> Optional[Covered]:
        k = bisect.bisect_right(self.starts, t)
        # The last few that began before t; intervals of one kind rarely
        # overlap, so a short look back finds the cover.
        for j in range(k - 1, max(-1, k - 65), -1):
            s, e = self.iv[j][0], self.iv[j][1]
            if s <= t < e:
                return self.iv[j]
        return None


def _nest(spans: list[Breakdown]) -> list[tuple[Breakdown, int, int, list[tuple[int, int]]]]:
    """Each span of one process as (span, depth, end, children): a span
    that begins inside another is its child, its end clipped to the
    parent's (a child measured to end a little after its parent still
    nests); children are the direct children's (begin, end)."""
    spans = sorted(spans, key=lambda b: (b.begin, -span_end(b)))
    stack: list[tuple[Breakdown, int, int]] = []
    out: list[tuple[Breakdown, int, int]] = []
    children: dict[int, list[tuple[int, int]]] = {}
    for b in spans:
        while stack and not (stack[-1][1] <= b.begin < stack[-1][2]):
            stack.pop()
        hi = min(span_end(b), stack[-1][2]) if stack else span_end(b)
        if stack:
            children.setdefault(id(stack[-1][0]), []).append((b.begin, hi))
        out.append((b, len(stack), hi))
        stack.append((b, b.begin, hi))
    return [(b, d, hi, children.get(id(b), [])) for b, d, hi in out]


def _shrink(b: Breakdown) -> None:
    """What a kept breakdown holds beyond the trace's needs is dropped:
    memory stays bounded over a long run."""
    b.calls = b.calls[:10]
    b.intervals = b.intervals[:MAX_DETAIL]
    b.outs = b.outs[:MAX_DETAIL]
    b.file_intervals = b.file_intervals[:MAX_DETAIL]
    b.call_intervals = b.call_intervals[:MAX_DETAIL]
    b.sends = b.sends[:MAX_DETAIL]


def _leaf_estimate(b: Breakdown) -> int:
    return 2 * (len(b.intervals) + len(b.file_intervals) + len(b.call_intervals)) + 1


def _keep(leaves: list[Segment], most: int) -> list[Segment]:
    if len(leaves) <= most:
        return leaves
    keep = set(sorted(range(len(leaves)), key=lambda k: -(leaves[k][1] - leaves[k][0]))[:most])
    return [x for k, x in enumerate(leaves) if k in keep]


def _numbered(keys: Iterable[Any], start: int = 1) -> dict[Any, int]:
    return {k: n for n, k in enumerate(keys, start)}


def _track_events(slices: list[Slice], flows_out: list[tuple[int, int]],
                  flows_in: list[tuple[int, int]]) -> list[TrackEvent]:
    """One track's slices as begin/end events in order, with the flows'
    ends as instants: [(ts, "B"|"E"|"I", name, args, flow_ids, terminating)]."""
    ev: list[TrackEvent] = []
    open_: list[tuple[int, int]] = []
    for s, e, depth, name, args, _span in slices:
        if e <= s:
            continue
        while open_ and open_[-1][0] <= s:
            end, _d = open_.pop()
            ev.append((end, "E", None, None, [], []))
        # Clip to the enclosing slice so that slices nest.
        if open_ and e > open_[-1][0]:
            e = open_[-1][0]
        ev.append((s, "B", name, args, [], []))
        open_.append((e, depth))
    while open_:
        end, _d = open_.pop()
        ev.append((end, "E", None, None, [], []))
    for ts, fid in flows_out:
        ev.append((ts, "I", "message sent", {}, [fid], []))
    for ts, fid in flows_in:
        ev.append((ts, "I", "message received", {}, [], [fid]))
    ev.sort(key=lambda x: (x[0], 0 if x[1] == "E" else 1))
    return ev
