"""why: why was a span slow. The rules, written once, shared by
dtrace-slow-spans (slow_spans: events from bpftrace, live) and
dtrace-recorder-report (events from a flight-recorder snapshot, in its
model, report_model).

Feed it the events of one node or several in time order (`feed`); each
span end returns a Breakdown of that span. The events (`kind`, then the
fields), nanoseconds on one clock:

    span_begin  pid span_id parent_id kind tag
    span_end    pid span_id duration_ns [info [outcome]]
    out         pid mfa [tid]       the process is scheduled out in mfa (on OS thread tid)
    hibernate   pid mfa [tid]       ... to hibernate
    in          pid mfa [tid]       ... and in again, to run mfa (on thread tid)
    gc_start    pid                 a collection (minor or major) starts
    gc_end      pid
    queued      pid                 a message was queued to pid
    send        sender receiver
    call        pid mfa             function probes (dtrace:function_probes/1)
    return      pid mfa
    file_start  key command user_tag  dtrace_file's operation `key' starts
    file_end    key

and the OS threads' events of why_os (thread, k_off, k_block, k_short,
k_sample, k_waited, k_sys, tracer).

The rules (this docstring is where they are written; docs/operators.md,
"Why was it slow", shows them at work), over the span's own
process from its begin to its end:

  - GC: the time between a collection's start and end, and the
    scheduled-out time that is the collection's: an interval a collection
    falls in, and the two around a collection the process came into
    straight from being out and left straight into being out again, in
    the same function (the one that asked for the collection), and its
    time on the scheduler between them when the collection took at least
    half of it. A large heap's collection runs on a dirty CPU scheduler:
    the process is scheduled out to move there (waiting for a free one)
    and again to come back, and runs there for the collection only,
    before its start event and after its end (a 32 MB heap's, under
    load: up to 2.7 ms after its end, seen on OTP 25): all of it is what
    the collection cost the request. A process that ran code of its own
    around a minor collection between two yields ran far longer than the
    collection: that time stays on CPU. With the kernel's events, a
    collection on the process's own thread leaves out the waits of that
    thread, runnable, off the CPU (preempted, throttled:
    why_os.Threads.waits): the OS's to name.
  - scheduled out: the time between `out' (or `hibernate') and the next
    `in', other than the above. Each such interval is put under the function the
    process was scheduled in to run again, which is where it waited:
    `timer:sleep/1', `gen:do_call/4' (a gen_server call), and so on. The
    process that sent the last message to it while it was out is named
    as the one that woke it ("woken by"), and the one it last sent a
    message to before it went out as the one it waited on ("waiting on"):
    for a gen_server call, the server (its reply goes to an alias, which
    names no process: the waker is then not known).
  - file I/O: dtrace_file operations under the span's user tag, inside
    the span. Where they overlap the process's scheduled-out time, that
    time is file I/O, not scheduled out (file operations run on dirty
    I/O schedulers; a process does not run while it waits for one).
  - on CPU: the rest (the duration less GC, scheduled out and file I/O),
    split by what the kernel did with the process's OS thread meanwhile
    (why_os's rules: on CPU in user space, in the kernel, preempted,
    throttled, blocked, on a dirty scheduler), where the tracer gave the
    kernel's events; why_os also takes from scheduled out the time the
    process waited for its thread to get a CPU back.
  - messages received: `queued' events to the process.
  - slowest calls: call-to-return times of the functions the operator
    gave to dtrace:function_probes/1, when any.
  - the cause: the largest of on CPU (or each of its OS components), GC,
    file I/O and each function scheduled out in.

Limits: the process is taken to be on CPU at the span's begin (it is:
it is running span_begin). Events the tracer lost or the recorder's
ring buffer overwrote make a breakdown short: `complete' says whether
the span's begin was seen. Per process, at most MAX_EVENTS events are
kept for an open span; past that the span is marked truncated.
"""

import bisect
import json
from typing import Any, Callable, Optional

from dtrace_tools import why_os

# A process's pid text, "<0.90.0>" (None: a snapshot's event without one).
Pid = Optional[str]
# An interval (start, end) in ns.
Interval = tuple[int, int]

MAX_EVENTS = 200_000
# Intervals of each kind a breakdown keeps for a trace file (the totals
# above count them all).
MAX_DETAIL = 10_000
# file operations kept for spans that end later, in ns
FILE_KEEP_NS = 600 * 1_000_000_000

# The events why_os reads.
OS_KINDS = ("thread", "k_off", "k_block", "k_short", "k_sample", "k_waited", "k_sys", "tracer")

# OTP's efile_drv command numbers (dtrace_file's module documentation).
COMMANDS = {1: "OPEN", 2: "READ", 3: "LSEEK", 4: "WRITE", 5: "FSTAT", 6: "PWD", 7: "READDIR",
            8: "CHDIR", 9: "FSYNC", 10: "MKDIR", 11: "DELETE", 12: "RENAME", 13: "RMDIR",
            14: "TRUNCATE", 15: "READ_FILE", 16: "WRITE_INFO", 19: "LSTAT", 20: "READLINK",
            21: "LINK", 22: "SYMLINK", 23: "CLOSE", 24: "PWRITEV", 25: "PREADV", 29: "READ_LINE",
            30: "FDATASYNC", 31: "FADVISE"}


class Breakdown:
    """Where one span's time went (all times in ns)."""

    def __init__(self, node: str, pid: Pid, span_id: Optional[int], parent_id: Optional[int],
                 kind: Optional[str], tag: Optional[str], begin: int, end: int, complete: bool,
                 truncated: bool, outcome: str = "ok") -> None:
        self.node, self.pid, self.span_id, self.parent_id = node, pid, span_id, parent_id
        self.outcome = outcome  # "ok", or "error", "exit", "throw": the span raised
        self.kind, self.tag, self.begin, self.end = kind, tag, begin, end
        self.complete, self.truncated = complete, truncated
        self.duration = end - begin
        # The events counted run to the span's end event (the duration,
        # measured in Erlang between the two, is a little shorter).
        self.window_end = end
        self.gc = 0
        self.gcs = 0
        self.scheduled_out = 0
        self.out_in: dict[str, int] = {}        # mfa -> ns
        self.woken_by: dict[str, Pid] = {}      # mfa -> pid of the last waker
        self.waiting_on: dict[str, Pid] = {}    # mfa -> what it last sent a message to before
        self.file_io = 0
        self.file_ops: dict[str, list[int]] = {}  # command -> [count, ns]
        self.messages = 0
        self.calls: list[tuple[int, str]] = []   # [(ns, mfa)], slowest first
        self.on_cpu = 0
        # [(start, end, "out" | "gc", mfa)], for a timeline
        self.intervals: list[tuple[int, int, str, Optional[str]]] = []
        # For a trace file (timeline), each at most MAX_DETAIL:
        # [(start, end, mfa, woken_by, waiting_on)], scheduled out
        self.outs: list[tuple[int, int, str, Pid, Pid]] = []
        self.file_intervals: list[tuple[int, int, str]] = []  # [(start, end, command)], inside the span
        self.sends: list[tuple[int, Pid, Pid]] = []  # [(ts, sender, receiver)], to or from the process
        self.call_intervals: list[tuple[int, int, str]] = []  # [(start, end, mfa)], function probes' calls
        self.names: dict[Pid, str] = {}  # pid -> its name (dtrace_process__name), where known
        # The OS side of on CPU (why_os): components, and their slices for a
        # timeline (at most MAX_DETAIL).
        self.os = why_os.Split()
        # Inside the tracer's own attach or detach window (why_os), and
        # events lost about then (the live tool says).
        self.attaching = False
        self.detaching = False
        self.lossy = False

    def named(self, pid: Pid) -> Pid:
        """A pid with its name, where the node named it: `<0.1.0> (name)`."""
        name = self.names.get(pid)
        return "%s (%s)" % (pid, name) if name else pid

    def _who(self, mfa: str) -> str:
        text = ""
        if mfa in self.waiting_on:
            text += ", waiting on %s" % self.named(self.waiting_on[mfa])
        if mfa in self.woken_by:
            text += ", woken by %s" % self.named(self.woken_by[mfa])
        return text

    def split(self) -> bool:
        """Whether on CPU is split (kernel events, or a dirty scheduler)."""
        return self.os.kernel or any(c != "cpu" for c, _l in self.os.components)

    def os_parts(self) -> list[tuple[int, str, str, Optional[str]]]:
        """The OS components, largest first: (ns, text, category, label)."""
        return sorted([(ns, component_text(c, lab, self.os.kernel), c, lab)
                       for (c, lab), ns in self.os.components.items() if ns > 0], key=lambda p: -p[0])

    def causes(self) -> list[tuple[int, str]]:
        """Every component, largest first: (ns, text)."""
        if self.split():
            parts = [(ns, text) for ns, text, _c, _l in self.os_parts()] or [(0, "on CPU")]
            parts.append((self.gc, "GC"))
        else:
            parts = [(self.on_cpu, "on CPU"), (self.gc, "GC")]
        if self.file_io:
            ops = ", ".join("%s x%d" % (c, n) for c, (n, _) in sorted(self.file_ops.items(), key=lambda kv: -kv[1][1]))
            parts.append((self.file_io, "file I/O (%s)" % ops))
        for mfa, ns in self.out_in.items():
            text = "scheduled out in %s" % mfa + self._who(mfa)
            parts.append((ns, text))
        return sorted(parts, key=lambda p: -p[0])

    def cause(self) -> tuple[int, str]:
        if not self.complete:
            if self.attaching:
                return 0, "the tracer attaching its probes (the span began before its events)"
            if self.detaching:
                # bpftrace detaches probe by probe: span__begin may go first.
                return 0, "the tracer detaching its probes (the span's begin unseen)"
            return 0, "unknown: the span began before the events do"
        ns, text = self.causes()[0]
        return ns, text

    def as_json(self) -> dict[str, Any]:
        return {"node": self.node, "pid": self.pid, "name": self.names.get(self.pid), "span_id": self.span_id,
                "parent_id": self.parent_id,
                "kind": self.kind, "tag": self.tag, "begin_ns": self.begin, "duration_ns": self.duration,
                "on_cpu_ns": self.on_cpu, "gc_ns": self.gc, "gcs": self.gcs,
                "scheduled_out_ns": self.scheduled_out,
                "scheduled_out_in": [{"mfa": m, "ns": ns, "woken_by": self.woken_by.get(m),
                                      "waiting_on": self.waiting_on.get(m)}
                                     for m, ns in sorted(self.out_in.items(), key=lambda kv: -kv[1])],
                "file_io_ns": self.file_io,
                "file_ops": {c: {"count": n, "ns": ns} for c, (n, ns) in self.file_ops.items()},
                "messages_received": self.messages,
                "slowest_calls": [{"mfa": m, "ns": ns} for ns, m in self.calls],
                "os": [{"category": c, "label": lab, "text": text, "ns": ns} for ns, text, c, lab in self.os_parts()],
                "kernel_events": self.os.kernel, "page_faults": self.os.faults,
                "cause": self.cause()[1], "cause_ns": self.cause()[0],
                "complete": self.complete, "truncated": self.truncated, "outcome": self.outcome}

    def lines(self, clock: Callable[[int], str], top: int = 5) -> list[str]:
        """The breakdown as text lines; clock(ns) gives the time of day."""
        def ms(ns: int) -> str:
            return "%.2f ms" % (ns / 1e6)
        cause_ns, cause = self.cause()
        share = 100.0 * cause_ns / self.duration if self.duration else 0.0
        out = ["%s slow span: %s %s, tag %s, pid %s (span %s)" % (
            clock(self.begin), self.kind, ms(self.duration),
            json.dumps(self.tag) if self.tag is not None else "(none)", self.named(self.pid), self.span_id)
            + (" FAILED: %s" % self.outcome if self.outcome != "ok" else "")]
        if not self.complete:
            # The tracer started (or the ring buffer begins) inside it.
            out.append("    cause: %s" % cause)
            return out
        out.append("    cause: %s, %s (%.0f%%)" % (cause, ms(cause_ns), share))
        if self.split():
            out += self._os_lines(ms)
        else:
            out.append("    on CPU             %12s" % ms(self.on_cpu))
        out.append("    GC                 %12s  (%d collections)" % (ms(self.gc), self.gcs))
        out.append("    scheduled out      %12s" % ms(self.scheduled_out))
        for mfa, ns in sorted(self.out_in.items(), key=lambda kv: -kv[1])[:top]:
            out.append("        %-40s %12s%s" % (mfa, ms(ns), self._who(mfa)))
        if len(self.out_in) > top:
            out.append("        ... %d more functions" % (len(self.out_in) - top))
        if self.file_ops:
            ops = ", ".join("%s x%d %s" % (c, n, ms(ns)) for c, (n, ns)
                            in sorted(self.file_ops.items(), key=lambda kv: -kv[1][1]))
            out.append("    file I/O (tag)     %12s  (%s)" % (ms(self.file_io), ops))
        else:
            out.append("    file I/O (tag)     %12s" % "none")
        out.append("    messages received  %12d" % self.messages)
        if self.calls:
            out.append("    slowest calls      %s" % ", ".join("%s %s" % (m, ms(ns)) for ns, m in self.calls[:top]))
        if self.truncated:
            out.append("    (more than %d events in the span: the breakdown covers the first ones)" % MAX_EVENTS)
        if self.lossy:
            out.append("    (the tracer lost events about then: this breakdown may be short)")
        return out

    def _os_lines(self, ms: Callable[[int], str]) -> list[str]:
        """on CPU split: a line per category (on CPU (user) always, the
        others when they took time), its labels after it."""
        by: dict[str, list[tuple[int, Optional[str]]]] = {}
        for (c, lab), ns in self.os.components.items():
            if ns > 0:
                by.setdefault(c, []).append((ns, lab))
        out = []
        for cat in why_os.CATEGORIES:
            parts = sorted(by.get(cat, []), key=lambda p: -p[0])
            total = sum(ns for ns, _l in parts)
            if total < 10_000 and not (cat == "user" and self.os.kernel):
                continue
            head = "    %-19s%12s" % (CATEGORY_TEXT[cat] if cat != "cpu" or not self.os.kernel
                                      else "on CPU (no sample)", ms(total))
            details = [("%s %s" % (lab, ms(ns))) for ns, lab in parts[:3] if lab]
            if cat == "kernel" and self.os.faults:
                details.append("%d page faults" % self.os.faults)
            if len(parts) > 3:
                details.append("%d more" % (len(parts) - 3))
            out.append(head + ("  (%s)" % ", ".join(details) if details else ""))
        return out


# How each OS category reads: its line in the breakdown.
CATEGORY_TEXT = {"user": "on CPU (user)", "kernel": "in the kernel", "preempted": "preempted",
                 "throttled": "throttled", "blocked": "blocked", "dirty": "dirty scheduler",
                 "tracer": "the tracer", "cpu": "on CPU"}


def component_text(cat: str, label: Optional[str], kernel: bool = True) -> str:
    """An OS component as a cause reads: `preempted by yes (pid 4242)'."""
    if cat == "user":
        return "on CPU (user)"
    if cat == "cpu":
        return "on CPU (no sample)" if kernel else "on CPU"
    if cat == "kernel":
        return "in the kernel: %s" % label
    if cat == "preempted":
        return "preempted by %s" % label
    if cat == "throttled":
        return "throttled by the CPU quota of cgroup %s" % label if label else "throttled by a CPU quota"
    if cat == "blocked":
        return "blocked in the kernel: %s" % label
    if cat == "dirty":
        return "on a %s" % label
    return str(label)


# An open span: (begin ts, parent, kind, tag).
OpenSpan = tuple[int, Optional[int], Optional[str], Optional[str]]
# A logged event: (ts, kind, argument): the mfa, (sender, receiver) or None.
LogEntry = tuple[int, str, Any]
# A finished file operation: (node, start, end, command, tag).
FileOp = tuple[str, int, int, str, str]


class _Proc:
    __slots__ = ("open", "log", "truncated")

    def __init__(self) -> None:
        self.open: dict[Optional[int], OpenSpan] = {}  # span_id -> (begin ts, parent, kind, tag)
        self.log: list[LogEntry] = []  # [(ts, kind, arg)] since the outermost open span began
        self.truncated = False


class Why:
    """The rules over a stream of events in time order."""

    def __init__(self) -> None:
        self.procs: dict[tuple[str, Pid], _Proc] = {}
        # (node, key) -> [start, end, command, tag]
        self.files: dict[tuple[str, Any], tuple[int, str, Optional[str]]] = {}
        self.done_files: list[FileOp] = []
        self.names: dict[Pid, str] = {}  # pid -> name, from dtrace_process__name (one node)
        self.threads = why_os.Threads()

    def feed(self, node: str, ts: int, kind: str, *f: Any) -> Optional[Breakdown]:
        """One event; returns a Breakdown at a span end, else None."""
        if kind == "span_begin":
            pid, span_id, parent, skind, tag = f
            p = self.procs.get((node, pid))
            if p is None:
                p = self.procs[(node, pid)] = _Proc()
            p.open[span_id] = (ts, parent, skind, tag)
            return None
        if kind == "span_end":
            pid, span_id, duration = f[:3]
            info = f[3] if len(f) > 3 else None
            outcome = f[4] if len(f) > 4 and f[4] else "ok"
            return self._end(node, ts, pid, span_id, duration, info, outcome)
        if kind in ("file_start", "file_end"):
            self._file(node, ts, kind, f)
            return None
        if kind in OS_KINDS:
            self.threads.feed(node, ts, kind, f)
            return None
        if kind in ("in", "out", "hibernate"):
            p = self.procs.get((node, f[0]))
            if p is not None and p.open:
                self._log(p, ts, kind, (f[1], f[2] if len(f) > 2 else None))
            return None
        if kind == "send":
            sender, receiver = f
            for who in {sender, receiver}:
                p = self.procs.get((node, who))
                if p is not None and p.open:
                    self._log(p, ts, "send", (sender, receiver))
            return None
        p = self.procs.get((node, f[0]))
        if p is not None and p.open:
            self._log(p, ts, kind, f[1] if len(f) > 1 else None)
        return None

    @staticmethod
    def _log(p: _Proc, ts: int, kind: str, arg: Any) -> None:
        if len(p.log) < MAX_EVENTS:
            p.log.append((ts, kind, arg))
        else:
            p.truncated = True

    def _file(self, node: str, ts: int, kind: str, f: tuple[Any, ...]) -> None:
        if kind == "file_start":
            key, command, tag = f
            self.files[(node, key)] = (ts, COMMANDS.get(command, "CMD%s" % command), tag)
        else:
            op = self.files.pop((node, f[0]), None)
            if op is not None and op[2] is not None:
                self.done_files.append((node, op[0], ts, op[1], op[2]))
                if len(self.done_files) > 4096:
                    horizon = ts - FILE_KEEP_NS
                    self.done_files = [d for d in self.done_files if d[2] >= horizon]

    def _end(self, node: str, ts: int, pid: Pid, span_id: Optional[int], duration: int,
             info: Optional[tuple[Optional[int], Optional[str], Optional[str]]],
             outcome: str = "ok") -> Breakdown:
        p = self.procs.get((node, pid))
        opened = p.open.pop(span_id, None) if p is not None else None
        if opened is not None:
            begin, parent, skind, tag = opened
            complete = True
        else:
            # The begin was not seen (the tracer started later, or the ring
            # buffer overwrote it): the end says when it began.
            begin = ts - duration
            parent, skind, tag = info if info is not None else (0, "?", None)
            complete = False
        b = Breakdown(node, pid, span_id, parent, skind, tag, begin, begin + duration, complete,
                      p.truncated if p is not None else False, outcome)
        b.attaching = self.threads.inside(node, "attach", begin, ts)
        b.detaching = self.threads.inside(node, "detach", begin, ts)
        b.names = self.names
        b.window_end = max(ts, begin + duration)
        log = p.log if p is not None else []
        self._compute(b, log, node)
        if p is not None and not p.open:
            del self.procs[(node, pid)]
        elif p is not None:
            # Keep what open spans still need: events since the oldest.
            oldest = min(o[0] for o in p.open.values())
            p.log = [e for e in p.log if e[0] >= oldest]
        opened_at = [o[0] for (n, _p), q in self.procs.items() if n == node for o in q.open.values()]
        self.threads.prune(node, min(opened_at, default=ts) - why_os.LONGEST_WAIT_NS)
        return b

    def _compute(self, b: Breakdown, log: list[LogEntry], node: str) -> None:
        lo, hi = b.begin, b.window_end
        gcs: list[Interval] = []
        outs: list[tuple[int, int, str, Pid, Pid]] = []
        gc_outs: list[Interval] = []  # scheduled-out intervals that are a collection's
        gc_ins: list[Interval] = []  # time on a dirty scheduler that is a collection's
        gc_start: Optional[int] = None
        prev: Optional[str] = None  # the previous scheduling or GC event
        out_after_gc = False
        closed_out = False      # the last `in' closed an interval of outs
        # that interval, when a collection followed it
        before: Optional[tuple[int, int, str, Pid, Pid]] = None
        out_start: Optional[int] = None
        waker: Pid = None
        sent_to: Pid = None
        waiting_on: Pid = None
        calls: dict[str, list[int]] = {}
        # The process's in intervals (start, end, OS thread), and per out
        # interval the thread it came in on and its last message's time.
        ins: list[tuple[int, int, Optional[int]]] = []
        in_since: Optional[int] = lo
        in_tid: Optional[int] = None
        queued: Optional[int] = None
        out_tid: Optional[int] = None
        out_ctx: dict[tuple[int, int], tuple[Optional[int], Optional[int], Optional[int]]] = {}
        for ts, kind, arg in log:
            if ts < lo or ts > hi:
                continue
            tid: Optional[int] = None
            if kind in ("out", "hibernate", "in"):
                arg, tid = arg
            if kind in ("out", "hibernate") and in_since is not None:
                ins.append((in_since, ts, in_tid if in_tid is not None else tid))
                in_since, in_tid, out_tid = None, None, tid
            elif kind == "in":
                if in_since is None:
                    if out_start is not None:
                        out_ctx[(out_start, ts)] = (tid, queued, out_tid)
                    in_since = ts
                in_tid = tid if tid is not None else in_tid
                queued = None
            if kind == "gc_start":
                gc_start = ts
                # Back from being out straight into a collection: that
                # interval is the collection's if the process also goes
                # out straight from its end (a dirty scheduler's GC).
                before = outs[-1] if prev == "in" and closed_out else None
            elif kind == "gc_end":
                if gc_start is not None:
                    gcs.append((gc_start, ts))
                    gc_start = None
            elif kind in ("out", "hibernate"):
                if out_start is None:
                    out_start, waker, waiting_on = ts, None, sent_to
                    out_after_gc = (prev == "gc_end" and before is not None and bool(outs)
                                    and outs[-1] is before and arg == before[2])
                    if out_after_gc:
                        # The wait to go there, and the time there when
                        # the collection took most of it (see the rules).
                        moved = outs.pop()
                        gc_outs.append(moved[:2])
                        if gcs and 2 * (gcs[-1][1] - gcs[-1][0]) >= ts - moved[1]:
                            gc_ins.append((moved[1], ts))
            elif kind == "in":
                closed_out = False
                if out_start is not None:
                    if out_after_gc:
                        gc_outs.append((out_start, ts))
                    else:
                        outs.append((out_start, ts, arg, waker, waiting_on))
                        closed_out = True
                out_start, waker, sent_to, out_after_gc = None, None, None, False
            elif kind == "send":
                sender, receiver = arg
                if len(b.sends) < MAX_DETAIL:
                    b.sends.append((ts, sender, receiver))
                if receiver == b.pid and out_start is not None:
                    waker = sender
                elif sender == b.pid:
                    sent_to = receiver
            elif kind == "queued":
                b.messages += 1
                if out_start is not None:
                    queued = ts
            elif kind == "call":
                calls.setdefault(arg, []).append(ts)
            elif kind == "return":
                starts = calls.get(arg)
                if starts:
                    start = starts.pop()
                    b.calls.append((ts - start, arg))
                    if len(b.call_intervals) < MAX_DETAIL:
                        b.call_intervals.append((start, ts, arg))
            if kind in ("gc_start", "gc_end", "out", "hibernate", "in"):
                prev = kind
        if in_since is not None:
            ins.append((in_since, b.end, in_tid))
        if gc_start is not None:
            gcs.append((gc_start, hi))
        if out_start is not None:
            outs.append((out_start, hi, "(still out at the end)", waker, waiting_on))
        # A collection inside a scheduled-out interval ran on a dirty
        # scheduler: the whole interval is GC (the rules above).
        gc_outs += [(s, e) for s, e, _m, _w, _o in outs if _overlap(s, e, gcs) > 0]
        outs = [o for o in outs if _overlap(o[0], o[1], gcs) == 0]
        collections = len(gcs)
        gcs = [(s, e) for s, e in _merge(gcs + gc_ins)]
        # A collection inside the tracer's own attach or detach is the OS's
        # to name (why_os): it allocates, and the tracer writing its probes
        # holds the lock page faults take.
        windows = self.threads.windows(node)
        if windows:
            gcs = [x for s, e in gcs for x in why_os.outside(s, e, windows)]
        # A collection on the process's thread taken off the CPU (why_os):
        # the waits are the OS's (test-trixie: 948 ms preempted by a
        # real-time task read as GC).
        gcs = [x for s, e in gcs for x in why_os.outside(s, e, self.threads.waits(node, _tid_at(ins, s), s, e))]
        gcs = gcs + gc_outs
        b.intervals = sorted([(s, e, "gc", None) for s, e in gcs]
                             + [(s, e, "out", m) for s, e, m, _w, _o in outs])
        b.outs = outs[:MAX_DETAIL]
        files = [(max(s, lo), min(e, hi), c) for (n, s, e, c, t) in self.done_files
                 if n == node and t == b.tag and b.tag is not None and s < hi and e > lo]
        b.file_intervals = files[:MAX_DETAIL]
        b.gc = _union(gcs)
        b.gcs = collections
        for s, e, c in files:
            ent = b.file_ops.setdefault(c, [0, 0])
            ent[0] += 1
            ent[1] += e - s
        file_spans = [(s, e) for s, e, _c in files]
        b.os = self.threads.split(node, ins, gcs + file_spans,
                                  [(s, e) + _ctx(out_ctx.get((s, e), (None, None, None)), m)
                                   for s, e, m, _w, _o in outs])
        # The waits for the thread (why_os): not scheduled out, but theirs.
        taken = [(max(x, lo), min(y, hi), c, lab) for x, y, c, lab in b.os.out_taken]
        taken = [(x2, y2, c, lab) for x, y, c, lab in taken for x2, y2 in why_os.outside(x, y, gcs + file_spans)]
        for x, y, c, lab in taken:
            b.os.add(x, y, c, lab)
        b.os.slices.sort()
        del b.os.slices[MAX_DETAIL:]
        taken_iv = [(x, y) for x, y, _c, _l in taken]
        for s, e, mfa, w, on in outs:
            ns = (e - s) - _overlap(s, e, gcs)
            ns -= _overlap(s, e, file_spans) - _overlap3(s, e, file_spans, gcs)
            ns -= _overlap(s, e, taken_iv)
            if ns <= 0:
                continue
            b.scheduled_out += ns
            b.out_in[mfa] = b.out_in.get(mfa, 0) + ns
            if w is not None:
                b.woken_by[mfa] = w
            if on is not None:
                b.waiting_on[mfa] = on
        b.file_io = _union(file_spans) - _overlap_sets(file_spans, gcs)
        b.on_cpu = max(0, b.duration - b.gc - b.scheduled_out - b.file_io - _union(taken_iv))
        b.calls.sort(key=lambda c: -c[0])


def _tid_at(ins: list[tuple[int, int, Optional[int]]], ts: int) -> Optional[int]:
    """The thread of the in interval (start, end, tid; in time order) that
    holds ts: a bisection, as a span can have thousands of each."""
    k = bisect.bisect_right(ins, ts, key=lambda x: x[0]) - 1
    return ins[k][2] if k >= 0 and ts <= ins[k][1] else None


def _merge(iv: list[Interval]) -> list[list[int]]:
    out: list[list[int]] = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def _union(iv: list[Interval]) -> int:
    return sum(e - s for s, e in _merge(iv))


def _ctx(ctx: tuple[Optional[int], Optional[int], Optional[int]], mfa: str
         ) -> tuple[Optional[int], Optional[int], Optional[int]]:
    """An out interval's (thread in, last message, thread out) for why_os:
    asleep in a known receive with no message (why_os.WAITS), the thread
    out is left unknown, so that no wait of its thread is taken."""
    tid, woke, _out = ctx
    return (tid, woke, None) if woke is None and mfa in why_os.WAITS else ctx


def _overlap(s: int, e: int, iv: list[Interval]) -> int:
    """Length of [s, e] covered by the intervals iv."""
    return sum(max(0, min(e, b) - max(s, a)) for a, b in _merge(iv))


def _overlap3(s: int, e: int, iv1: list[Interval], iv2: list[Interval]) -> int:
    """Length of [s, e] covered by both iv1 and iv2."""
    return sum(_overlap(max(s, a), min(e, b), iv2) for a, b in _merge(iv1) if min(e, b) > max(s, a))


def _overlap_sets(iv1: list[Interval], iv2: list[Interval]) -> int:
    return sum(_overlap(a, b, iv2) for a, b in _merge(iv1))
