"""dtrace_trace_check.py FILE: what a trace file or folded stacks that
priv/python/dtrace_tools/timeline.py wrote hold, read back independently of the writer,
as tab-separated lines for the suites (dtrace_test_why:check_files/4):

    TRACK   node  track-name
    SPAN    track-name  span-name  tag  outcome  cause  cause-ms
    FLOWS   n
    BADNEST track  name             (a slice that overlaps its parent: viewers drop it)
    BADFLOW id                      (a flow end with no slice around it)
    FOLDED    kind  cause  ms          (folded stacks: per span kind and cause)
    HEAVIEST  kind  cause  ms          (... and the heaviest cause of each kind)

FILE.json is read as Chrome's Trace Event JSON, FILE.folded as folded
stacks, anything else as Perfetto's protobuf with the `perfetto` package's
protos (run it with a Python that has them). A span's cause is the
heaviest group of the slices directly inside it, grouped as the text
breakdown names causes: `on CPU`, `on CPU (user)`, `GC`, `file I/O`, and
`scheduled out in FUNCTION` per function; the OS's (`preempted by TASK`,
`in the kernel: page faults`, ...) by their names. In the folded stacks
the OS's causes are grouped by their category (`preempted`, `in the
kernel`, ...), as the text breakdown's lines are.
"""

import json
import sys


# The OS's categories: the folded stacks' frame after the span's kind, as
# the breakdown's line names them (why.CATEGORY_TEXT).
OS_FRAMES = ("on CPU (user)", "on CPU (no sample)", "in the kernel", "preempted", "throttled", "blocked",
             "dirty scheduler", "the tracer")


def group(name):
    for os_cpu in ("on CPU (user)", "on CPU (no sample)"):
        if name.startswith(os_cpu):
            return os_cpu
    if name.startswith("on CPU"):
        return "on CPU"
    if name.startswith("file I/O"):
        return "file I/O"
    return name


def spans_and_causes(tracks):
    """tracks: {track: [(begin, end, name, args, is_span)]}; yields SPAN lines."""
    for track, slices in sorted(tracks.items()):
        spans = [s for s in slices if s[4]]
        for s in slices:
            if s[4]:
                continue
            mid = (s[0] + s[1]) / 2.0
            inside = [p for p in spans if p[0] <= mid <= p[1]]
            if not inside:
                continue
            owner = max(inside, key=lambda p: p[0])
            sums = owner[3].setdefault("_causes", {})
            sums[group(s[2])] = sums.get(group(s[2]), 0) + (s[1] - s[0])
        for b, e, name, args, _sp in spans:
            sums = args.get("_causes", {})
            cause, ns = max(sums.items(), key=lambda kv: kv[1]) if sums else ("", 0)
            print("SPAN\t%s\t%s\t%s\t%s\t%s\t%.3f" % (track, name, args.get("tag"), args.get("outcome"),
                                                      cause, ns / 1e6))


def nesting(tracks):
    """Each track's slices must nest: one that begins inside another ends
    inside it too (Perfetto drops one that does not)."""
    for track, slices in sorted(tracks.items()):
        stack = []
        for b, e, name, *_ in sorted(slices, key=lambda x: (x[0], -x[1])):
            while stack and stack[-1] <= b:
                stack.pop()
            if stack and e > stack[-1]:
                print("BADNEST\t%s\t%s" % (track, name))
            stack.append(e)


def read_json(path):
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    procs, threads, tracks, flows = {}, {}, {}, 0
    for e in doc["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            procs[e["pid"]] = e["args"]["name"]
        elif e.get("ph") == "M" and e.get("name") == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
    for (pid, tid), name in sorted(threads.items()):
        print("TRACK\t%s\t%s" % (procs.get(pid), name))
    ends = []
    for e in doc["traceEvents"]:
        if e.get("ph") == "X":
            track = threads[(e["pid"], e["tid"])]
            # As Perfetto's JSON importer reads them: integer nanoseconds.
            b = round(e["ts"] * 1000.0)
            tracks.setdefault(track, []).append((b, b + round(e["dur"] * 1000.0), e["name"],
                                                 dict(e.get("args", {})), e.get("cat") == "span"))
        elif e.get("ph") == "s":
            flows += 1
        if e.get("ph") in ("s", "f"):
            ends.append((threads[(e["pid"], e["tid"])], round(e["ts"] * 1000.0), e["id"]))
    nesting(tracks)
    for track, ts, fid in ends:
        if not any(b <= ts < e for b, e, *_ in tracks.get(track, [])):
            print("BADFLOW\t%s" % fid)
    spans_and_causes(tracks)
    print("FLOWS\t%d" % flows)


def read_perfetto(path):
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent
    t = Trace()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    names, procs, parent = {}, {}, {}
    for p in t.packet:
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            if d.HasField("process"):
                procs[d.uuid] = d.process.process_name
            if d.HasField("thread"):
                names[d.uuid] = d.thread.thread_name
                parent[d.uuid] = d.parent_uuid
    for uuid, name in sorted(names.items()):
        print("TRACK\t%s\t%s" % (procs.get(parent.get(uuid)), name))
    open_, tracks, flows = {}, {}, 0
    for p in t.packet:
        if not p.HasField("track_event"):
            continue
        te = p.track_event
        track = names.get(te.track_uuid, str(te.track_uuid))
        if te.type == TrackEvent.TYPE_SLICE_BEGIN:
            args = {}
            for a in te.debug_annotations:
                kind = a.WhichOneof("value")
                args[a.name] = getattr(a, kind) if kind else None
            open_.setdefault(track, []).append((p.timestamp, te.name, args))
        elif te.type == TrackEvent.TYPE_SLICE_END:
            b, name, args = open_[track].pop()
            tracks.setdefault(track, []).append((b, p.timestamp, name, args, "span_id" in args))
        flows += len(te.flow_ids)
    if any(open_.values()):
        sys.exit("slices never ended: %r" % {k: v for k, v in open_.items() if v})
    spans_and_causes(tracks)
    print("FLOWS\t%d" % flows)


def read_folded(path):
    by_kind = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            stack, _, weight = line.rstrip("\n").rpartition(" ")
            frames = stack.split(";")
            # The span's kind, then the cause.
            for k, fr in enumerate(frames):
                if k > 0 and fr in ("on CPU", "GC", "file I/O", "scheduled out", "unknown") + OS_FRAMES:
                    kind, cause = frames[k - 1], fr
                    if fr == "scheduled out" and k + 1 < len(frames):
                        cause = "scheduled out in %s" % frames[k + 1]
                    sums = by_kind.setdefault(kind, {})
                    sums[cause] = sums.get(cause, 0) + int(weight)
                    break
    for kind, sums in sorted(by_kind.items()):
        for cause, us in sorted(sums.items()):
            print("FOLDED\t%s\t%s\t%.3f" % (kind, cause, us / 1e3))
        cause, us = max(sums.items(), key=lambda kv: kv[1])
        print("HEAVIEST\t%s\t%s\t%.3f" % (kind, cause, us / 1e3))


def main(path):
    if path.endswith(".json"):
        read_json(path)
    elif path.endswith(".folded"):
        read_folded(path)
    else:
        read_perfetto(path)


if __name__ == "__main__":
    main(sys.argv[1])
