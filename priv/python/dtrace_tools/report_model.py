"""report_model: the snapshots' events merged by time into the items
dtrace-recorder-report shows: spans, file operations, probe events and the
recorder's markers, on their nodes and processes, each span with its
breakdown (why's rules, the same as dtrace-slow-spans'); and how an item
reads.
"""

import datetime
import heapq
import json
from typing import TYPE_CHECKING, Any, Iterable, Optional

from dtrace_tools import report_kernel
from dtrace_tools import why as why_rules  # the breakdown rules, shared with dtrace-slow-spans

if TYPE_CHECKING:
    from dtrace_tools.report_read import Snapshot

PROVIDER = "org_erlang_dtrace:"
MARK_LABEL = 949

COMMANDS = why_rules.COMMANDS

# An event's payload: field name -> value (int, str, float or None).
Fields = dict[str, Any]


class Item:
    """A span, a file operation or a point event, on one node."""

    def __init__(self, what: str, node: str, start: int, proc: Optional[str] = None,
                 tag: Optional[str] = None) -> None:
        self.what = what          # "span", "file", "probe", "mark", "vm"
        self.node = node
        self.start = start
        self.end: Optional[int] = None
        self.proc = proc
        self.tag = tag
        self.text = ""
        self.depth = 0
        self.open = False
        # Spans:
        self.kind: Optional[str] = None
        self.span_id: Optional[int] = None
        self.parent_id: Optional[int] = None
        self.outcome = "ok"
        self.slow_only = False    # only span_slow seen
        self.begin_lost = False   # the begin was overwritten
        self.why: Optional[why_rules.Breakdown] = None
        # File operations:
        self.command = ""
        self.fields: Fields = {}
        self.success: Any = None
        self.errnum: Any = None
        # The recorder's markers:
        self.mark_id: Any = None
        self.reason: Optional[str] = None
        self.origin: Optional[str] = None

    @property
    def duration(self) -> Optional[int]:
        return None if self.end is None else self.end - self.start


def short(name: str) -> str:
    return name[len(PROVIDER):] if name.startswith(PROVIDER) else name


def fmt_fields(fields: Fields, keys: Iterable[str]) -> str:
    out = []
    for k in keys:
        v = fields.get(k)
        if v is None or v == 0 and k.startswith("i"):
            continue
        out.append('%s=%s' % (k, json.dumps(v) if isinstance(v, str) else v))
    return " ".join(out)


def why_event(ev: str, f: Fields) -> Optional[tuple[str, tuple[Any, ...]]]:
    """An event of the snapshot as why's (kind, fields), or None."""
    if ev == "span_begin":
        return "span_begin", (f.get("proc"), f.get("span_id"), f.get("parent_id"), f.get("kind"), f.get("user_tag"))
    if ev == "span_end":
        return "span_end", (f.get("proc"), f.get("span_id"), f.get("duration_ns") or 0,
                            (f.get("parent_id"), f.get("kind"), f.get("user_tag")), f.get("outcome") or "ok")
    if ev == "span_vm_scheduled":
        if (f.get("type") or "").startswith("in"):
            return "in", (f.get("proc"), f.get("mfa"), f.get("_vtid"))
        return "out", (f.get("proc"), f.get("mfa"), f.get("_vtid"))
    if ev == "span_vm_gc":
        return ("gc_start" if (f.get("type") or "").endswith("_start") else "gc_end"), (f.get("proc"),)
    if ev == "span_vm_send":
        return "send", (f.get("proc"), f.get("receiver"))
    if ev == "span_vm_receive":
        return "queued", (f.get("proc"),)
    if ev == "efile_drv_entry":
        return "file_start", ((f.get("thread_id"), f.get("tag")), f.get("command"), f.get("user_tag"))
    if ev == "efile_drv_return":
        return "file_end", ((f.get("thread_id"), f.get("tag")),)
    if ev == "org_erlang_dyntrace:function_call":
        return "call", (f.get("pid"), f.get("entry"))
    if ev == "org_erlang_dyntrace:function_return":
        return "return", (f.get("pid"), f.get("entry"))
    return None


# Whether the last build's snapshots held kernel events (report_kernel).
kernel_seen = [False]


def build(snapshots: list["Snapshot"]) -> tuple[list[Item], dict[str, int]]:
    """Merges the snapshots' events by time and pairs them into items;
    every span's breakdown (why) goes with it (`why`), split by the
    kernel's events where the snapshots hold them (report_kernel; they
    are not items); kernel_seen[0] says whether they did."""
    streams = [[(e[0], s.index, e[1], e[2], e[3]) for e in s.events] for s in snapshots]
    items: list[Item] = []
    spans: dict[tuple[str, Any], Item] = {}
    files: dict[tuple[str, Any, Any], Item] = {}
    counts: dict[str, int] = {}
    ended: set[tuple[str, Any]] = set()
    why, breakdowns = why_rules.Why(), {}
    # Each node's process names at its snapshots (the sidecar's "names",
    # written by the recorder): processes read "<0.90.0> (my_server)".
    names: dict[tuple[str, Optional[str]], str] = {}
    for s in snapshots:
        for pid, name in (s.meta.get("names") or {}).items():
            names[(s.node, pid)] = name
            why.names[pid] = name

    def label(node: str, pid: Optional[str]) -> Optional[str]:
        name = names.get((node, pid))
        return "%s (%s)" % (pid, name) if pid and name else pid

    cur_ts: Optional[int] = None
    cur_keys: set[tuple[str, str, tuple[tuple[str, Any], ...]]] = set()
    kernels: dict[str, report_kernel.Kernel] = {}
    for ts, si, _seq, name, f in heapq.merge(*streams):
        snap = snapshots[si]
        node = snap.node
        # Snapshots of one node overlap (a snapshot does not clear the
        # buffers): an event in two of them is counted once.
        key = (node, name, tuple(sorted(f.items())))
        if ts != cur_ts:
            cur_ts, cur_keys = ts, {key}
        elif key in cur_keys:
            continue
        else:
            cur_keys.add(key)
        ev = short(name)
        counts[node] = counts.get(node, 0) + 1
        if report_kernel.is_kernel(name):
            k = kernels.setdefault(node, report_kernel.Kernel())
            for kts, kind, fields in k.feed(ts, name, f, f.get("_tid")):
                why.feed(node, kts, kind, *fields)
            continue
        we = why_event(ev, f)
        if we is not None:
            b = why.feed(node, ts, we[0], *we[1])
            if b is not None:
                breakdowns[(node, b.span_id)] = b
            if ev == "span_begin" and f.get("_vtid") is not None:
                # The thread the span begins on (slow-spans.bt's S line).
                why.feed(node, ts, "in", f.get("proc"), "-", f.get("_vtid"))
        if ev == "span_begin":
            it = Item("span", node, ts, label(node, f.get("proc")), f.get("user_tag"))
            it.kind, it.span_id, it.parent_id = f.get("kind"), f.get("span_id"), f.get("parent_id")
            it.open = True
            spans[(node, it.span_id)] = it
            items.append(it)
        elif ev == "span_end":
            found = spans.pop((node, f.get("span_id")), None)
            if found is None:
                # Ended on another node than the one it began on (the span
                # travelled in a message): the same id and kind, open there.
                cands = [k for k, v in spans.items()
                         if k[1] == f.get("span_id") and v.kind == f.get("kind")]
                if len(cands) == 1:
                    found = spans.pop(cands[0])
            if found is None:
                # The begin was overwritten in the ring buffer: the end says
                # when it began.
                found = Item("span", node, ts - (f.get("duration_ns") or 0), label(node, f.get("proc")),
                             f.get("user_tag"))
                found.kind, found.span_id, found.parent_id = f.get("kind"), f.get("span_id"), f.get("parent_id")
                found.begin_lost = True
                items.append(found)
            it = found
            it.end = ts if f.get("duration_ns") is None else it.start + f["duration_ns"]
            it.open = False
            # How it ended; traces of the library before span outcomes
            # have no field: those spans read as ok.
            it.outcome = f.get("outcome") or "ok"
            ended.add((node, f.get("span_id")))
            if it.tag is None:
                it.tag = f.get("user_tag")
        elif ev == "span_slow":
            # Fired right after span_end when both are recorded (the same
            # span, already an item); alone (the recorder's default events)
            # it is the whole span, its ids 0 unless span_begin listened.
            if f.get("span_id") and (node, f.get("span_id")) in ended:
                continue
            it = Item("span", node, ts - (f.get("duration_ns") or 0), label(node, f.get("proc")),
                      f.get("user_tag"))
            it.kind, it.span_id, it.parent_id = f.get("kind"), f.get("span_id"), f.get("parent_id")
            it.slow_only = True
            it.outcome = f.get("outcome") or "ok"
            it.end = ts
            it.open = False
            items.append(it)
        elif ev == "efile_drv_entry":
            it = Item("file", node, ts, f.get("port"), f.get("user_tag"))
            command: Any = f.get("command")
            it.command = COMMANDS.get(command, "CMD%s" % command)
            it.fields = f
            it.open = True
            files[(node, f.get("thread_id"), f.get("tag"))] = it
            items.append(it)
        elif ev == "efile_drv_return":
            op = files.pop((node, f.get("thread_id"), f.get("tag")), None)
            if op is not None:
                op.end = ts
                op.open = False
                op.success, op.errnum = f.get("success"), f.get("errnum")
                if op.tag is None:
                    op.tag = f.get("user_tag")
        elif ev in ("efile_drv_int_entry", "efile_drv_int_return"):
            pass
        elif ev == "user_trace_n" and f.get("label") == MARK_LABEL and f.get("s1") == "dtrace_recorder":
            it = Item("mark", node, ts, label(node, f.get("proc")), f.get("user_tag"))
            it.mark_id, it.reason, it.origin = f.get("i1"), f.get("s2"), f.get("s3")
            it.text = "recorder: %s (asked on %s)" % (json.dumps(it.reason or ""), it.origin or "?")
            it.end = ts
            items.append(it)
        elif ev in ("user_trace_n", "user_trace_i4s4", "user_trace_s1"):
            it = Item("probe", node, ts, label(node, f.get("proc")), f.get("user_tag"))
            if ev == "user_trace_n":
                it.text = "probe n%s %s" % (f.get("label"),
                                            fmt_fields(f, ["i1", "i2", "i3", "i4", "s1", "s2", "s3", "s4"]))
            elif ev == "user_trace_i4s4":
                it.text = "probe p %s" % fmt_fields(f, ["i1", "i2", "i3", "i4", "s1", "s2", "s3", "s4"])
            else:
                it.text = "probe s1 %s" % json.dumps(f.get("message") or "")
            it.end = ts
            items.append(it)
        # VM events carry no user tag: counted in the header, not listed.
    # Nesting of spans: depth from the parent chain on the same node.
    by_id = {(i.node, i.span_id): i for i in items if i.what == "span"}
    for bkey, b in breakdowns.items():
        if bkey in by_id:
            by_id[bkey].why = b
    for i in items:
        if i.what == "span":
            d, p, seen = 0, i.parent_id, set()
            while p and (i.node, p) in by_id and p not in seen and d < 32:
                seen.add(p)
                d += 1
                p = by_id[(i.node, p)].parent_id
            i.depth = d
    kernel_seen[0] = any(k.seen for k in kernels.values())
    return items, counts


def failed(i: Item) -> Optional[str]:
    """The outcome of a span that raised ("error", "exit", "throw"), else None."""
    return i.outcome if i.what == "span" and i.outcome != "ok" else None


def describe(i: Item) -> str:
    if i.what == "span":
        if i.slow_only and not i.span_id:
            s = "span %s%s (span_slow)" % ("  " * i.depth, i.kind)
        else:
            s = "span %s%s (id %s)" % ("  " * i.depth, i.kind, i.span_id)
        if failed(i):
            s += " FAILED: %s" % failed(i)
        if i.begin_lost:
            s += " [begin overwritten]"
        return s
    if i.what == "file":
        f = i.fields
        parts = ["file", i.command]
        if f.get("s1"):
            parts.append(f["s1"])
        if f.get("s2"):
            parts.append("-> " + f["s2"])
        if i.command == "OPEN":
            parts.append("flags=%s" % f.get("i1"))
        elif f.get("i1") not in (None, 0, -1):
            parts.append("fd=%s" % f["i1"])
        if f.get("i3"):
            parts.append("%s B" % f["i3"])
        if not i.open:
            parts.append("ok" if i.success else "error errno=%s" % i.errnum)
        return " ".join(parts)
    return i.text


def collapse(rows: list[Item]) -> list[tuple[Item, int, Item]]:
    """Rows as (item, count, last item): a run of probe events of one
    probe (same label) from one process on one node is one line."""
    out: list[tuple[Item, int, Item]] = []
    for i in rows:
        if out and i.what == "probe":
            first, n, last = out[-1]
            if (first.what == "probe" and first.node == i.node and first.proc == i.proc
                    and first.text.split(" ")[1] == i.text.split(" ")[1]):
                out[-1] = (first, n + 1, i)
                continue
        out.append((i, 1, i))
    return out


def ms(ns: int) -> float:
    return ns / 1e6


def clock(ns: int) -> str:
    t = datetime.datetime.fromtimestamp(ns // 1_000_000_000, datetime.timezone.utc)
    return "%s.%06d" % (t.strftime("%H:%M:%S"), (ns % 1_000_000_000) // 1000)
