"""dtrace-slow-spans (priv/bin): why was a span slow, live, on one node.

    dtrace-slow-spans -p PID [--threshold MS] [--top N] [--pid ERLPID]
                      [--tag TAG] [--duration S] [--json]
                      [--trace FILE] [--folded FILE] [--no-os | --os]
                      [--tracer bpftrace|dtrace|stap] [--stap-module KO]
    dtrace-slow-spans --node NODE [--cookie-file F | --cookie C]
                      --function M:F/A [--function ...] [...]
    dtrace-slow-spans --events FILE [...]     (saved output of slow-spans.bt/.d/.stp)

Runs bpftrace with priv/bpftrace/slow-spans.bt (or, with --tracer dtrace,
Oracle's DTrace with its twin priv/dtrace/slow-spans.d through
priv/bin/dtrace-d; with --tracer stap, SystemTap with
priv/systemtap/slow-spans.stp and the library's path as the node mapped
it; with --stap-module, staprun with a module compiled from slow-spans.stp
elsewhere, e.g. `stap -p4 -r KERNEL -m spans priv/systemtap/slow-spans.stp
/path/to/dtrace_nif.so') on the node with OS pid PID (root), and for every
span that takes longer than the threshold (default 10 ms) prints, as it
ends, its kind, tag and process, and where its time went:
on CPU, GC, scheduled out (by the function it waited in, and who woke it),
file I/O under its tag, messages received, and the slowest calls when
function probes are on. The rules are why's, the same as the flight
recorder's report. With bpftrace, the kernel's events of the node's
threads split on CPU (why_os's rules): in user space, in the kernel,
preempted by a named task, throttled by a named cgroup, blocked in a
system call (the native code it blocked in is read from the thread's
stack while it sleeps: native), on a dirty scheduler, the tracer's own
cost; --no-os leaves them out (the script's `os' part: program), as does
bpftrace 0.27 unless --os (OS_PART_ABORTS). The
tool knows when its tracer attaches (from its start to the first event)
and detaches (from its SIGINT to the tracer's exit), which stalls the
node: the summary names both windows, and spans slowed inside them say
so.
At the end (Ctrl-C, or --duration) it prints the N slowest spans (--top,
default 10) with their causes, and writes the files asked for: --trace FILE,
the slow spans as a timeline (FILE.json: Chrome's Trace Event JSON, for
speedscope and chrome://tracing; any other name: Perfetto's protobuf, which
needs the perfetto Python package in the tool's Python: dtrace_tools' doc;
both open in ui.perfetto.dev), and
--folded FILE, a flame graph of where they spent their time (folded
stacks, for flamegraph.pl, inferno and speedscope). What they hold and
their bounds: timeline's docstring.

While it runs, each outermost span's process is traced for the span's time
(dtrace:span/2 sets and removes its trace flags: about 2 us more per span);
no other process is. Events the tracer lost (bpftrace says "Lost N events", DTrace
"dtrace: N drops on CPU M") leave breakdowns short; the summary says how many were lost.

For code with no spans: --node (the node's name, on this host) with
--function (repeatable; Erlang's M:F/A or Elixir's Mod.fun/arity) runs
priv/bin/dtrace-attach NODE --function ... first (attaching the library if the
node has none: its --cookie, --cookie-file), traces the OS pid it names,
and at the end turns the function spans off again (dtrace-attach NODE
--function none; a library it attached stays: dtrace-attach --detach).

Environment: BPFTRACE, the bpftrace to run (default: bpftrace on PATH);
DTRACE, the dtrace priv/bin/dtrace-d runs (on Debian 12: scripts/dtrace-sid.sh);
STAP and STAPRUN, SystemTap's programs (default: on PATH);
BPFTRACE_PERF_RB_PAGES, bpftrace's output buffer before 0.25, per CPU
(default here 1024 pages, 4 MiB: a span prints several lines; 0.25 and
later size one larger buffer themselves).
Exit status: 0 done, 2 bad arguments, 3 the tracer failed to start, 4 the
tracer died while tracing (a signal; what it printed was read), 5 a
--trace or --folded file could not be written (the breakdowns were printed).
"""

import argparse
import datetime
import functools
import heapq
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from types import FrameType
from typing import Any, Callable, Optional, TextIO

from dtrace_tools import host, native, priv
from dtrace_tools import timeline as timelines
from dtrace_tools import why as why_rules
from dtrace_tools import why_os

# bpftrace reads each CPU's buffer in turn: lines come out of time order by
# up to a read interval. Events are put back in order in a window this wide.
REORDER_NS = 500_000_000


class Clock:
    def __init__(self) -> None:
        self.base_ns: Optional[int] = None
        self.base_wall: Optional[datetime.datetime] = None

    def set(self, ns: int, wall: str) -> None:
        """bpftrace gives the wall clock as text, DTrace as nanoseconds since
        the epoch."""
        self.base_ns = ns
        try:
            if wall.isdigit():
                self.base_wall = datetime.datetime.fromtimestamp(int(wall) / 1e9)
            else:
                self.base_wall = datetime.datetime.strptime(wall, "%Y-%m-%d %H:%M:%S.%f")
        except (ValueError, OverflowError):
            self.base_wall = None

    def __call__(self, ns: int) -> str:
        if self.base_ns is None or self.base_wall is None:
            return "%.6f" % (ns / 1e9)
        t = self.base_wall + datetime.timedelta(microseconds=(ns - self.base_ns) // 1000)
        return t.strftime("%H:%M:%S.%f")


# A profile sample's kernel frames, by path (by_path).
SAMPLE_FRAMES = 9
# The first bpftrace whose -p filters every probe to the process (by_path).
PID_FILTERS_ALL = (0, 23)
# bpftrace 0.27 (Debian sid's 0.27.1) aborts under the kernel part within
# seconds, in about one run of three on a node of steady spans: a
# std::bad_alloc thrown while it formats an event from its ring buffer
# (seen under gdb's `catch throw`; upstream's bug, trigger not found). The
# kernel part is then left out unless --os asks for it.
OS_PART_ABORTS = [(0, 27)]
# A sleeping thread's stack is read at most this often (native).
READS_PER_S = 100
# The end of a window that has not ended yet.
FOREVER = 1 << 62

# An event: (ts, kind, fields), the fields as why.Why.feed takes them.
Event = tuple[int, str, tuple[Any, ...]]


def parse(line: str) -> Optional[Event]:
    """A line of slow-spans.bt as (ts, kind, fields), or None. A kernel
    stack that follows a line (K blocked, P k) is not in it: the fields end
    with an empty list, which Run fills from the lines after it."""
    parts = line.rstrip("\n").split("\t")
    if len(parts) < 3 or len(parts[0]) != 1:
        return None
    k = parts[0]
    try:
        ts = int(parts[1])
        if k == "B":
            return ts, "span_begin", (parts[2], int(parts[3]), int(parts[4]), parts[5], "\t".join(parts[6:]) or None)
        if k == "E":
            # ts pid span_id duration outcome kind tag (events saved by a
            # slow-spans script before span outcomes have no outcome).
            if len(parts) >= 8:
                outcome, rest = parts[5] or "ok", parts[6:]
            else:
                outcome, rest = "ok", parts[5:]
            info: Optional[tuple[int, str, Optional[str]]] = (0, rest[0], "\t".join(rest[1:]) or None) if rest else None
            return ts, "span_end", (parts[2], int(parts[3]), int(parts[4]), info, outcome)
        if k == "S":
            tid = int(parts[5]) if len(parts) > 5 else None
            if parts[3].startswith("in"):
                return ts, "in", (parts[2], parts[4], tid)
            return ts, "out", (parts[2], parts[4], tid)
        if k == "W":
            return ts, "thread", (int(parts[2]), "\t".join(parts[3:]))
        if k == "O":
            if parts[3] == "blocked":
                return ts, "k_block", (int(parts[2]), int(parts[4]), int(parts[5]), int(parts[6]), [], None)
            return ts, "k_off", (int(parts[2]), parts[3], int(parts[4]), int(parts[5]),
                                 (int(parts[6]), "\t".join(parts[7:])), None)
        if k == "b":
            return ts, "blocking", (int(parts[2]),)
        if k == "Z":
            return ts, "k_short", (int(parts[2]), int(parts[3]), int(parts[4]), int(parts[5]),
                                   (int(parts[6]), "\t".join(parts[7:])), None)
        if k == "P":
            return ts, "k_sample", (int(parts[2]), parts[3], int(parts[4]), [])
        if k == "R":
            return ts, "k_waited", (int(parts[2]), int(parts[3]), int(parts[4]) != 0, int(parts[5]),
                                    (int(parts[6]), "\t".join(parts[7:])), None)
        if k == "G":
            return ts, ("gc_start" if parts[3].endswith("_start") else "gc_end"), (parts[2],)
        if k == "Q":
            return ts, "queued", (parts[2],)
        if k == "M":
            return ts, "send", (parts[2], parts[3])
        if k == "C":
            return ts, "call", (parts[2], parts[3])
        if k == "R":
            return ts, "return", (parts[2], parts[3])
        if k == "F":
            return ts, "file_start", ((int(parts[2]), int(parts[3])), int(parts[4]), "\t".join(parts[5:]))
        if k == "f":
            return ts, "file_end", ((int(parts[2]), int(parts[3])),)
        if k == "T":
            return ts, "clock", (parts[2],)
        if k == "N":
            return ts, "name", (parts[2], "\t".join(parts[3:]))
    except (ValueError, IndexError):
        return None
    return None


LIB = "dtrace_nif.so"


def bpftrace_version(tool: str) -> tuple[int, int]:
    """(major, minor) that `tool --version` prints, or (0, 0)."""
    try:
        out = subprocess.run([tool, "--version"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             timeout=30).stdout.decode("utf-8", "replace")
    except (OSError, subprocess.TimeoutExpired):
        return (0, 0)
    m = re.search(r"v?(\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def os_part_refused(version: tuple[int, int], forced: bool) -> Optional[str]:
    """Why the kernel part is left out with this bpftrace version, or None
    to run it: bpftrace 0.27 aborts under it (OS_PART_ABORTS) unless
    forced (--os)."""
    if forced or version not in OS_PART_ABORTS:
        return None
    return ("bpftrace %d.%d aborts (std::bad_alloc) under the kernel part: the VM's view only "
            "(--os runs it anyway)" % version)


def tracer_says(line: str) -> bool:
    """Is `line` the tracer's own, not an event? bpftrace's attach line
    ("Attaching N probes..." on stdout before 0.24, "Attached N probes" on
    stderr after), and its "failed to look up stack id" (a kernel stack
    the kernel's stack map no longer held when printed, under a flood of
    events: that event's stack prints empty, which why_os reads as
    'kernel'), which are dropped; anything else goes to our stderr."""
    return (line.startswith("Attaching ") or line.startswith("Attached ")
            or line.startswith("ERROR: failed to look up stack id"))


# The tracers' names as the summary gives them (--tracer's values).
TRACERS = {"bpftrace": "bpftrace", "dtrace": "DTrace", "stap": "SystemTap"}

# DTrace's drop lines: "dtrace: 3 drops on CPU 1" (its principal buffer
# full) and "dtrace: 2 dynamic variable drops" (slow-spans.d's span depth
# not kept: a span's events not printed), libdtrace's dt_handle.c.
DTRACE_DROPS = re.compile(r"dtrace: (\d+) (?:dynamic variable |aggregation )?drops?\b")


def lost_events(line: str) -> Optional[int]:
    """How many events the tracer says `line` lost (bpftrace's "Lost N
    events", DTrace's drops), or None for any other line."""
    if line.startswith("Lost ") and "events" in line:
        try:
            return int(line.split()[1])
        except (ValueError, IndexError):
            return 0
    m = DTRACE_DROPS.match(line)
    return int(m.group(1)) if m else None


def mapped_library(os_pid: int) -> Optional[str]:
    """The path of the dtrace_nif.so that os_pid maps (as the host sees it:
    through /proc/PID/root when the node is in a container), or None."""
    try:
        with open("/proc/%d/maps" % os_pid, encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.split(None, 5)
                if len(fields) == 6 and os.path.basename(fields[5].rstrip("\n")) == LIB:
                    path = fields[5].rstrip("\n")
                    inside = "/proc/%d/root%s" % (os_pid, path)
                    return path if os.path.exists(path) and os.path.samefile(path, inside) else inside
    except OSError:
        return None
    return None


def program(os_part: bool, faults: bool) -> str:
    """slow-spans.bt's text for bpftrace: without its kernel part (between
    its `os' marks) when os_part is false, without the page-fault probes
    (their `faults' marks; the fault count then reads 0) when faults is."""
    with open(priv("bpftrace", "slow-spans.bt"), encoding="utf-8") as f:
        text = f.read()
    # The #! line emptied: -e takes the text, whose line numbers bpftrace's
    # messages keep.
    if text.startswith("#!"):
        text = text[text.index("\n"):]
    if not os_part:
        text = strip_marked(text, "os")
    if not os_part or not faults:
        text = re.sub(r"@pf\[[^\]]*\]", "0", strip_marked(text, "faults"))
    return text


def by_path(text: str, lib: str) -> str:
    """The program with its USDT probes named by the library's path and
    filtered to the node ($1), for a bpftrace that runs without -p: from
    0.23, -p filters every probe to the one process (tracepoints, then,
    see only its switches out; the profile samples its main thread only),
    which the kernel part cannot have."""
    text = text.replace("usdt::erlang:", "usdt:%s:erlang:" % lib)
    # bpftrace 0.27 aborts (std::bad_alloc) printing a kernel stack of more
    # than about 10 frames taken by the profile inside a uprobe's BPF
    # program: the samples' stacks are cut to 9 (why_os reads them so),
    # and so are the blocked threads' (it aborted so in test-sid's
    # automatic mode; the system call is among the 9 inner frames).
    text = text.replace("@pf[tid], kstack);", "@pf[tid], kstack(%d));" % SAMPLE_FRAMES)
    text = text.replace("@bstack[tid] = kstack;", "@bstack[tid] = kstack(%d);" % SAMPLE_FRAMES)

    def filtered(m: "re.Match[str]") -> str:
        pred = m.group(2)
        return "%s/pid == $1%s/\n{" % (m.group(1), " && (%s)" % pred if pred else "")
    return re.sub(r"((?:^usdt:[^\n]*\n)+)(?:/(.*)/\n)?\{", filtered, text, flags=re.M)


def stop_tracer_on_signals(proc: "subprocess.Popen[Any]", first: Optional[Callable[[], None]] = None,
                           alarm: bool = False) -> None:
    """SIGINT and SIGTERM (and SIGALRM, with alarm) stop the tracer proc:
    each sends it SIGINT, which makes it detach, print and exit; first runs
    at the first of them."""
    fired = [False]

    def on_signal(_sig: int, _frm: Optional[FrameType]) -> None:
        if not fired[0]:
            fired[0] = True
            if first is not None:
                first()
        try:
            proc.send_signal(signal.SIGINT)
        except OSError:
            pass
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    if alarm:
        signal.signal(signal.SIGALRM, on_signal)


def strip_marked(text: str, mark: str) -> str:
    """text without each part from `/* MARK: */' to `/* :MARK */'."""
    return re.sub(r"/\* %s: \*/.*?/\* :%s \*/" % (mark, mark), "", text, flags=re.S)


def _own(live: host.Host, task: why_os.Task) -> bool:
    return live.own(task[0])


class Run:
    def __init__(self, args: argparse.Namespace, out: TextIO, live: Optional[host.Host] = None) -> None:
        self.args, self.out = args, out
        self.why = why_rules.Why()
        # A live run names tasks and cgroups from the host as their events
        # come (the task may be gone by the span's end).
        self.host = live
        if live is not None:
            self.why.threads.task_name = lambda t: t[1]
            self.why.threads.own = functools.partial(_own, live)
        self.lost_at: list[int] = []
        # tid -> the native frames a span's thread went to sleep in.
        self.blocking: dict[int, Optional[list[native.Frame]]] = {}
        self.read_at = 0.0
        # An event whose kernel stack is still coming.
        self.stacked: Optional[Event] = None
        self.native = native.Reader()
        self.clock = Clock()
        self.heap: list[tuple[int, int, str, tuple[Any, ...]]] = []
        self.seq, self.newest = 0, 0
        self.slow: list[why_rules.Breakdown] = []
        self.spans, self.lost = 0, 0
        self.slow_count = 0
        self.skew: Optional[int] = None
        self.timeline = timelines.Timeline() if (args.trace or args.folded) else None

    def line(self, line: str) -> None:
        if self.stacked is not None:
            # A kernel stack's frames, then an empty line: the event it
            # follows is complete.
            if line.strip() and line[:1] in (" ", "\t"):
                self.stacked[2][-2 if self.stacked[1] == "k_block" else 3].append(line.strip())
                return
            self.push(*self.stacked)
            self.stacked = None
            if not line.strip():
                return
        lost = lost_events(line)
        if lost is not None:
            self.lost += lost
            # Lost about the newest event read (the tracer reads its
            # buffers in turn: within the reorder window of it).
            self.lost_at.append(self.newest)
            del self.lost_at[:-1000]
            return
        ev = parse(line)
        if ev is None:
            return
        ts, kind, f = ev
        if kind == "name":
            self.why.names[f[0]] = f[1]
            return
        if kind == "blocking":
            # A span's thread went to sleep: read what it sleeps in now
            # (at most READS_PER_S times a second).
            now = time.monotonic()
            if self.host is not None and now - self.read_at >= 1.0 / READS_PER_S:
                self.read_at = now
                self.blocking[f[0]] = self.native.frames(self.args.os_pid, f[0])
            return
        if kind == "clock":
            self.clock.set(ts, f[0])
            # The tracer's clock against ours, for draining while idle.
            self.skew = ts - time.monotonic_ns()
            return
        if kind in ("k_block", "k_sample") and line.rstrip("\n").endswith("\t"):
            self.stacked = ev
            return
        self.push(ts, kind, f)

    def finish(self) -> None:
        """The input ended: an event waiting for its stack goes in as it is."""
        if self.stacked is not None:
            self.push(*self.stacked)
            self.stacked = None

    def push(self, ts: int, kind: str, f: tuple[Any, ...]) -> None:
        if self.host is not None:
            f = self.named(kind, f)
        heapq.heappush(self.heap, (ts, self.seq, kind, f))
        self.seq += 1
        self.newest = max(self.newest, ts)
        self.drain(self.newest - REORDER_NS)

    def named(self, kind: str, f: tuple[Any, ...]) -> tuple[Any, ...]:
        """A kernel event with its task named from the host now, and a
        throttled thread's cgroup read (both remembered)."""
        assert self.host is not None
        if kind in ("k_off", "k_waited", "k_short"):
            # The task named; a throttled thread's cgroup read now (it may
            # move by the span's end).
            (tid, comm) = f[-2]
            throttled = f[1] == "throttled" if kind == "k_off" else bool(f[2])
            where = self.host.cgroup(self.args.os_pid, f[0]) if throttled else None
            return f[:-2] + ((tid, self.host.task(tid, comm)), where)
        if kind == "k_block":
            # The code it slept in, read when it went to sleep (its frames
            # are taken when the system call it was in is this one).
            frames = self.blocking.pop(f[0], None)
            code = native.nif_frame(frames) if frames and native.same_call(frames, why_os.kernel_where(f[4])) else None
            return f[:5] + (code,)
        return f

    def window(self, what: str, start: int, end: int) -> None:
        """The tracer's own attach or detach, from start to end (why_os)."""
        self.why.threads.window("node", what, start, end)

    def drain(self, upto: Optional[int] = None) -> None:
        while self.heap and (upto is None or self.heap[0][0] <= upto):
            ts, _s, kind, f = heapq.heappop(self.heap)
            b = self.why.feed("node", ts, kind, *f)
            if b is not None:
                self.spans += 1
                self.span(b)

    def wanted(self, b: why_rules.Breakdown) -> bool:
        a = self.args
        return bool(b.duration >= a.threshold * 1_000_000
                    and (not a.pid or b.pid in a.pid)
                    and (not a.tag or b.tag in a.tag))

    def span(self, b: why_rules.Breakdown) -> None:
        if not self.wanted(b):
            return
        b.lossy = any(b.begin - 2 * REORDER_NS <= t <= b.window_end + 2 * REORDER_NS for t in self.lost_at)
        self.slow.append(b)
        self.slow_count += 1
        if len(self.slow) > 2 * self.args.top + 1000:
            # The summary needs the slowest --top only.
            self.slow = sorted(self.slow, key=lambda b: -b.duration)[:self.args.top]
        if self.timeline is not None:
            self.timeline.add(b)
        if self.args.json:
            self.out.write(json.dumps(b.as_json()) + "\n")
        else:
            self.out.write("\n".join(b.lines(self.clock)) + "\n\n")
        self.out.flush()

    def files(self) -> int:
        """Writes --trace and --folded; returns 0, or 5 when one failed."""
        rc = 0
        if self.timeline is None:
            return 0
        writes: list[tuple[str, Callable[[str], str]]] = [(path, self.timeline.write) for path in self.args.trace]
        if self.args.folded:
            writes.append((self.args.folded, self.timeline.write_folded))
        for path, write in writes:
            try:
                sys.stderr.write(write(path) + "\n")
            except (OSError, timelines.TraceError) as e:
                sys.stderr.write("dtrace-slow-spans: %s not written: %s\n" % (path, e))
                rc = 5
        return rc

    def summary(self) -> None:
        if self.args.json:
            return
        w = self.out.write
        w("%d spans ended, %d over %g ms%s.\n" % (
            self.spans, self.slow_count, self.args.threshold,
            "; %s lost %d events: some breakdowns are short" % (TRACERS.get(self.args.tracer, self.args.tracer),
                                                                self.lost) if self.lost else ""))
        windows = sorted((a, b, what) for _n, what, a, b in self.why.threads.tracer)
        if windows:
            w("The tracer %s; the node may stall then, and spans then say so.\n" % ", ".join(
                "%s its probes from %s to %s" % ("attached" if what == "attach" else "detached",
                                                 self.clock(a), self.clock(b)) for a, b, what in windows))
        if self.slow:
            w("The %d slowest, with their causes:\n" % min(self.args.top, len(self.slow)))
            for b in sorted(self.slow, key=lambda b: -b.duration)[:self.args.top]:
                ns, cause = b.cause()
                w("  %10.2f ms  %-16s tag %-24s %-14s %s%s\n" % (
                    b.duration / 1e6, b.kind, json.dumps(b.tag) if b.tag is not None else "(none)",
                    b.named(b.pid), cause, " (%.2f ms)" % (ns / 1e6) if b.complete else ""))
        self.out.flush()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="dtrace-slow-spans",
                                description="Why was a span slow: a breakdown of every slow span, live")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("-p", dest="os_pid", type=int, help="OS pid of the BEAM node (beam.smp)")
    src.add_argument("--events", help="read slow-spans.bt's output from this file (- for stdin)")
    src.add_argument("--node", help="the node's name (with --function): reached through dtrace-attach")
    p.add_argument("--function", action="append", default=[],
                   help="with --node: spans of each outermost call of this function (repeatable)")
    p.add_argument("--cookie", help="with --node: the node's cookie (prefer --cookie-file)")
    p.add_argument("--cookie-file", help="with --node: a file whose first line is the node's cookie")
    p.add_argument("--threshold", type=float, default=10.0, help="slow means at least this many ms (default 10)")
    p.add_argument("--top", type=int, default=10, help="slowest spans in the summary (default 10)")
    p.add_argument("--pid", action="append", default=[], help="only spans of this Erlang pid (repeatable)")
    p.add_argument("--tag", action="append", default=[], help="only spans with this user tag (repeatable)")
    p.add_argument("--duration", type=float, help="stop after this many seconds")
    p.add_argument("--json", action="store_true", help="one JSON object per slow span, no summary")
    p.add_argument("--trace", metavar="FILE", action="append", default=[],
                   help="at the end, write the slow spans as a trace: FILE.json Chrome's JSON, "
                   "else Perfetto's protobuf (repeatable)")
    p.add_argument("--folded", metavar="FILE", help="at the end, write a flame graph's folded stacks")
    p.add_argument("--tracer", choices=["bpftrace", "dtrace", "stap"], default="bpftrace",
                   help="bpftrace (slow-spans.bt, default), DTrace (slow-spans.d through dtrace-d) "
                   "or SystemTap (slow-spans.stp)")
    p.add_argument("--stap-module", metavar="KO",
                   help="run this module, compiled from slow-spans.stp, with staprun (implies --tracer stap)")
    os_arg = p.add_mutually_exclusive_group()
    os_arg.add_argument("--no-os", action="store_true",
                        help="bpftrace: leave the kernel's events out (the VM's view only: on CPU not split)")
    os_arg.add_argument("--os", action="store_true",
                        help="bpftrace: the kernel's events even with a bpftrace that aborts under them (0.27)")
    args = p.parse_args(argv)
    if args.stap_module:
        args.tracer = "stap"
    if args.node:
        if not args.function:
            p.error("--node needs --function")
        attach = [priv("bin", "dtrace-attach"), args.node]
        if args.cookie_file:
            attach += ["--cookie-file", args.cookie_file]
        elif args.cookie:
            attach += ["--cookie", args.cookie]
        out = subprocess.run(attach + [a for f in args.function for a in ("--function", f)],
                             stdout=subprocess.PIPE, universal_newlines=True)
        sys.stderr.write(out.stdout)
        pids = [line.split("OS pid ")[1].split(")")[0].split(",")[0]
                for line in out.stdout.splitlines() if "OS pid " in line]
        if out.returncode != 0:
            return 3
        if not pids:
            # The node had the library already: dtrace-attach printed the
            # functions only; ask it for the pid.
            st = subprocess.run(attach + ["--status"], stdout=subprocess.PIPE, universal_newlines=True)
            pids = [line.split("OS pid ")[1].split(")")[0] for line in st.stdout.splitlines() if "OS pid " in line]
        if not pids:
            sys.stderr.write("dtrace-slow-spans: dtrace-attach did not name %s's OS pid\n" % args.node)
            return 3
        args.os_pid = int(pids[0])
        try:
            return trace(args)
        finally:
            subprocess.run(attach + ["--function", "none"], stdout=subprocess.DEVNULL)
    elif args.function:
        p.error("--function needs --node")
    return trace(args)


def trace(args: argparse.Namespace) -> int:
    if args.events:
        run = Run(args, sys.stdout)
        if args.events == "-":
            for line in sys.stdin:
                run.line(line)
        else:
            with open(args.events, encoding="utf-8", errors="replace") as f:
                for line in f:
                    run.line(line)
        run.finish()
        run.drain()
        run.summary()
        return run.files()
    live = host.Host()
    run = Run(args, sys.stdout, live)
    version = (0, 0)  # bpftrace's
    if args.tracer == "bpftrace":
        # Through priv/bin/dtrace-bpftrace, which runs $BPFTRACE (or bpftrace)
        # and, before bpftrace 0.24, reads span__end's outcome (arg6); the
        # node's OS pid is the program's $1, for its kernel part. The program
        # is a shipped script's text: --no-warnings, as dtrace-bpftrace gives a
        # shipped script run by path (its header says why).
        tool = os.environ.get("BPFTRACE", "bpftrace")
        os_part = not args.no_os and live.has_event("sched", "sched_switch")
        if not args.no_os and not os_part:
            sys.stderr.write("dtrace-slow-spans: no sched:sched_switch tracepoint (is tracefs mounted? "
                             "mount -t tracefs nodev /sys/kernel/tracing): the VM's view only\n")
        version = bpftrace_version(tool)
        refused = os_part_refused(version, args.os) if os_part else None
        if refused is not None:
            sys.stderr.write("dtrace-slow-spans: %s\n" % refused)
            os_part = False
        text = program(os_part, live.has_event("exceptions", "page_fault_user"))
        lib = mapped_library(args.os_pid) if os_part and version >= PID_FILTERS_ALL else None
        if lib is not None:
            cmd = [priv("bin", "dtrace-bpftrace"), "--no-warnings", "-e", by_path(text, lib), str(args.os_pid)]
        else:
            cmd = [priv("bin", "dtrace-bpftrace"), "--no-warnings", "-p", str(args.os_pid), "-e", text,
                   str(args.os_pid)]
    elif args.tracer == "dtrace":
        tool = os.environ.get("DTRACE", "dtrace")
        cmd = [priv("bin", "dtrace-d"), "-p", str(args.os_pid), "-q", "-s", priv("dtrace", "slow-spans.d")]
    elif args.stap_module:
        tool = os.environ.get("STAPRUN", "staprun")
        cmd = [tool, "-x", str(args.os_pid), args.stap_module]
    else:
        lib = mapped_library(args.os_pid)
        if lib is None:
            sys.stderr.write("dtrace-slow-spans: OS pid %d has no %s mapped (priv/bin/dtrace-doctor %d says why)\n"
                             % (args.os_pid, LIB, args.os_pid))
            return 3
        tool = os.environ.get("STAP", "stap")
        cmd = [tool, "-x", str(args.os_pid), priv("systemtap", "slow-spans.stp"), lib]
    # A span prints several lines: a larger output buffer than bpftrace's
    # default before 0.25 (64 pages per CPU) loses fewer of them on a busy
    # node; from 0.25 the variable sizes one buffer, smaller than its default.
    env = dict(os.environ)
    if args.tracer == "bpftrace" and version < (0, 25):
        env.setdefault("BPFTRACE_PERF_RB_PAGES", "1024")
    attaching = time.monotonic_ns()
    try:
        # SIGINT at its default in the tracer: ignored on entry here (a
        # job started in the background by a non-interactive shell), it
        # would stay ignored in DTrace, which then never stops on the
        # SIGINT this script sends it.
        # The tracer's stderr too: bpftrace 0.24 and later say "Lost N
        # events" there, which the summary counts.
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True, env=env,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    except OSError as e:
        sys.stderr.write("dtrace-slow-spans: cannot run %s: %s\n" % (tool, e))
        return 3
    live.own_pids |= {os.getpid(), proc.pid}
    stop: dict[str, Optional[int]] = {"at": None}

    def detaching() -> None:
        # The tracer detaches from here to its exit (bpftrace's clock is
        # CLOCK_MONOTONIC, as time.monotonic_ns()).
        at = stop["at"] = time.monotonic_ns()
        run.window("detach", at, FOREVER)
    stop_tracer_on_signals(proc, detaching, bool(args.duration))
    if args.duration:
        signal.setitimer(signal.ITIMER_REAL, args.duration)
    started = False
    # An event older than the reorder window is final even when no later
    # line comes (an idle node), so it is drained on a timer too, on the
    # tracer's clock (its first line, T, gives it against ours).
    assert proc.stdout is not None
    fd, buf = proc.stdout.fileno(), b""
    while True:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for raw in lines:
                line = raw.decode("utf-8", "replace")
                if tracer_says(line):
                    continue
                if run.stacked is not None or not line.strip():
                    run.line(line)
                    continue
                if line.startswith("@"):
                    # bpftrace printing a map its END cleared, filled again
                    # by probes not yet detached.
                    continue
                if parse(line) is None and lost_events(line) is None:
                    sys.stderr.write(line + "\n")
                    continue
                if line.startswith("T\t") and not started:
                    started = True
                    ev = parse(line)
                    if ev is not None:
                        run.window("attach", attaching, ev[0])
                    sys.stderr.write("Tracing spans of OS pid %d with %s, slow >= %g ms... Ctrl-C to end.\n"
                                     % (args.os_pid, args.tracer, args.threshold))
                run.line(line)
        if run.skew is not None:
            run.drain(time.monotonic_ns() + run.skew - REORDER_NS)
    if buf:
        run.line(buf.decode("utf-8", "replace"))
    proc.stdout.close()
    rc = proc.wait()
    run.finish()
    if stop["at"] is not None:
        run.window("detach", stop["at"], time.monotonic_ns())
    run.drain()
    run.summary()
    if not started and rc != 0:
        sys.stderr.write("dtrace-slow-spans: %s exited with status %d before tracing\n" % (args.tracer, rc))
        return 3
    if rc < 0 and stop["at"] is None:
        # Killed by a signal nobody here sent (bpftrace 0.27 aborts,
        # std::bad_alloc, under the kernel part run with --os): what it
        # printed is all there is, and the user is told.
        sys.stderr.write("dtrace-slow-spans: %s died (signal %d) while tracing; the spans above are those it printed\n"
                         "(--no-os runs it without the kernel part)\n"
                         % (args.tracer, -rc))
        run.files()
        return 4
    return run.files()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
