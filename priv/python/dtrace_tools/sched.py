"""dtrace-sched (priv/bin): is it the host or the BEAM? Over a window, how
much of each of a node's OS threads' time the kernel took away, and by
whom.

    dtrace-sched -p PID [--duration S] [--interval S] [--json]
    dtrace-sched --events FILE [--json]      (saved output of sched.bt)

Runs bpftrace with priv/bpftrace/sched.bt on the node with OS pid PID
(root; any BEAM: no probe of the library is used) and at the end of each
--interval (default: the whole --duration, default 10 s; or Ctrl-C) prints,
for the node's threads grouped as the VM names them (normal schedulers,
dirty CPU and dirty I/O schedulers, the rest), the share of their time:

  - running, in user space and in the kernel (a 997 Hz profile's samples:
    page faults, each system call, the tracer's uprobes, interrupts);
  - waiting for a CPU: preempted (and by which tasks: their command
    names), throttled by a CPU quota (the cgroup named, with its quota);
  - blocked: asleep in the kernel other than waiting for work (the system
    call or page fault, from the kernel stack);
  - idle: asleep waiting for work (futex, epoll_wait, poll, select, and
    threads not seen to run at all);

the steal time of the host's CPUs (the hypervisor running another guest:
/proc/stat), the node's cgroup throttling counters (cgroup v1's cpu.stat
nr_throttled and throttled_time, v2's nr_throttled and throttled_usec),
and a verdict: the host's share of the normal schedulers' time
(preempted, throttled) against what the VM itself did with it.
HOST_SHARE (5%) or more reads "the host"; less, "the BEAM".

Why a tool of its own rather than a mode of dtrace-slow-spans:
ARCHITECTURE.md, "dtrace-sched".

Environment: BPFTRACE, the bpftrace to run (default: bpftrace on PATH).
Exit status: 0 done, 2 bad arguments, 3 the tracer failed to start.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
from typing import Any, Callable, Optional, TextIO

from dtrace_tools import host as hosts
from dtrace_tools import priv, slow_spans
from dtrace_tools import why_os

HOST_SHARE = 0.05
SAMPLE_NS = 1_000_000_000 // 997
# Sleeps that are a thread waiting for work (the schedulers', pollers',
# pools'), not blocking in what it runs.
IDLE = ("futex", "epoll_wait", "epoll_pwait", "epoll_pwait2", "poll", "ppoll", "select", "pselect6")
GROUPS = ("normal schedulers", "dirty CPU schedulers", "dirty I/O schedulers", "other threads")


def group_of(comm: str) -> str:
    """A thread's group by its name: N_scheduler (OTP 29: erts_sched_N),
    dirty_kind's, or the rest."""
    if re.match(r"^(?:\d+_scheduler|erts_sched_\d+)$", comm):
        return GROUPS[0]
    kind = why_os.dirty_kind(comm)
    if kind == "dirty CPU scheduler":
        return GROUPS[1]
    if kind == "dirty I/O scheduler":
        return GROUPS[2]
    return GROUPS[3]


MAP_LINE = re.compile(r"^@(\w+)\[(.*)\]: (.*)$")


class Interval:
    """One interval's maps, as sched.bt prints them."""

    def __init__(self) -> None:
        self.maps: dict[str, list[tuple[list[str], list[str], str]]] = {}  # name -> [(keys, stack, value)]

    def add(self, name: str, keys: list[str], stack: list[str], value: str) -> None:
        self.maps.setdefault(name, []).append((keys, stack, value))

    def num(self, name: str) -> dict[int, int]:
        return {int(k[0]): int(v) for k, _s, v in self.maps.get(name, []) if k and k[0].isdigit()}

    def stacked(self, name: str) -> list[tuple[int, list[str], int]]:
        return [(int(k[0]), s, int(v)) for k, s, v in self.maps.get(name, []) if k and k[0].isdigit()]

    def keyed(self, name: str) -> list[tuple[int, str, str]]:
        return [(int(k[0]), ", ".join(k[1:]), v) for k, _s, v in self.maps.get(name, []) if k and k[0].isdigit()]


class Reader:
    """sched.bt's output, line by line: the T line, and each interval."""

    def __init__(self) -> None:
        self.start: Optional[int] = None
        self.wall: Optional[str] = None
        self.last: Optional[int] = None
        self.cur: Optional[Interval] = None
        self.at: Optional[int] = None
        self.pending: Optional[tuple[str, list[str], list[str]]] = None  # a map entry with a stack
        self.clock = slow_spans.Clock()

    def line(self, line: str) -> Optional[tuple[int, int, Interval]]:
        """Feeds a line; returns an interval when its J line comes."""
        line = line.rstrip("\n")
        if self.pending is not None:
            name, keys, stack = self.pending
            m = re.match(r"^\]: (.*)$", line)
            if m:
                assert self.cur is not None
                self.cur.add(name, keys, stack, m.group(1))
                self.pending = None
            elif line.strip():
                stack.append(line.strip())
            return None
        if line.startswith("T\t"):
            parts = line.split("\t")
            self.start = self.last = int(parts[1])
            self.wall = parts[2] if len(parts) > 2 else None
            if self.wall is not None:
                self.clock.set(self.start, self.wall)
            return None
        if line.startswith("I\t"):
            self.cur, self.at = Interval(), int(line.split("\t")[1])
            return None
        if line == "J" and self.cur is not None and self.at is not None:
            frm = self.last if self.last is not None else self.at
            got = (frm, self.at, self.cur)
            self.last, self.cur = self.at, None
            return got
        if self.cur is None:
            return None
        m = re.match(r"^@(\w+)\[(.*),\s*$", line)
        if m:
            self.pending = (m.group(1), [k.strip() for k in m.group(2).split(",")], [])
            return None
        m = MAP_LINE.match(line)
        if m:
            keys = [k.strip() for k in m.group(2).split(",")]
            # A command may hold ", ": the tid first, the rest the name.
            self.cur.add(m.group(1), [keys[0], ", ".join(keys[1:])] if len(keys) > 1 else keys, [], m.group(3))
        return None


class Table:
    """One interval's shares, per group of threads."""

    def __init__(self, frm: int, to: int, iv: Interval, threads: dict[int, str],
                 throttled_in: Optional[str] = None, steal: Optional[float] = None,
                 cgroup_stat: Optional[str] = None) -> None:
        self.frm, self.to = frm, to
        window = max(1, to - frm)
        comms = dict(threads)
        for k, _s, v in iv.maps.get("comm", []):
            if k and k[0].isdigit():
                comms[int(k[0])] = v
        self.comms = comms
        self.rows: dict[str, dict[str, float]] = {g: {} for g in GROUPS}
        self.counts: dict[str, int] = {g: 0 for g in GROUPS}
        self.kernel: dict[str, dict[str, float]] = {g: {} for g in GROUPS}
        self.blocked: dict[str, dict[str, float]] = {g: {} for g in GROUPS}
        self.took: dict[str, dict[str, float]] = {g: {} for g in GROUPS}
        self.faults: dict[str, int] = {g: 0 for g in GROUPS}
        self.throttled_in, self.steal, self.cgroup_stat = throttled_in, steal, cgroup_stat
        us, pre, thr, pf = iv.num("us"), iv.num("pre"), iv.num("thr"), iv.num("pf")
        ks, blk = iv.stacked("ks"), iv.stacked("blk")
        tids = set(comms) | set(us) | set(pre) | set(thr) | {t for t, _s, _v in ks + blk}
        for tid in tids:
            g = group_of(comms.get(tid, "?"))
            self.counts[g] += 1
            row = self.rows[g]
            user = us.get(tid, 0) * SAMPLE_NS
            kern = 0
            for t, stack, n in ks:
                if t != tid:
                    continue
                label = _kernel(stack)
                kern += n * SAMPLE_NS
                self.kernel[g][label] = self.kernel[g].get(label, 0) + n * SAMPLE_NS
            idle = blocked = 0
            for t, stack, ns in blk:
                if t != tid:
                    continue
                where = why_os.kernel_where(stack)
                if where in IDLE:
                    idle += ns
                else:
                    what = why_os.blocked_on(stack)
                    blocked += ns
                    self.blocked[g][what] = self.blocked[g].get(what, 0) + ns
            seen = user + kern + pre.get(tid, 0) + thr.get(tid, 0) + idle + blocked
            # Not seen (asleep all along, or at the window's edges): idle.
            idle += max(0, window - seen)
            for key, ns in (("user", user), ("kernel", kern), ("preempted", pre.get(tid, 0)),
                            ("throttled", thr.get(tid, 0)), ("blocked", blocked), ("idle", idle)):
                row[key] = row.get(key, 0) + ns
            self.faults[g] += pf.get(tid, 0)
        for tid, comm, v in iv.keyed("took"):
            g = group_of(comms.get(tid, "?"))
            self.took[g][comm] = self.took[g].get(comm, 0) + int(v)
        self.window = window

    def share(self, g: str, key: str) -> float:
        total = self.window * max(1, self.counts[g])
        return self.rows[g].get(key, 0) / total

    def verdict(self) -> str:
        g = GROUPS[0]
        host = self.share(g, "preempted") + self.share(g, "throttled")
        run = self.share(g, "user") + self.share(g, "kernel")
        top = ", ".join(_top(self.took[g], 3, self.window * max(1, self.counts[g])))
        if not self.counts[g]:
            return "verdict: no normal scheduler seen"
        if host >= HOST_SHARE:
            return ("verdict: the host: it took %.0f%% of the normal schedulers' time (preempted %.0f%%%s, "
                    "throttled %.0f%%); they ran %.0f%%"
                    % (100 * host, 100 * self.share(g, "preempted"), " by " + top if top else "",
                       100 * self.share(g, "throttled"), 100 * run))
        return ("verdict: the BEAM: the host took %.1f%% of the normal schedulers' time; they ran %.0f%% "
                "(in the kernel %.0f%%), were blocked %.1f%%, idle %.0f%%"
                % (100 * host, 100 * run, 100 * self.share(g, "kernel"), 100 * self.share(g, "blocked"),
                   100 * self.share(g, "idle")))

    def lines(self, clock: Callable[[int], str]) -> list[str]:
        out = ["%s to %s (%.2f s): share of each group's time" % (clock(self.frm), clock(self.to), self.window / 1e9),
               "  %-26s %7s %7s %9s %9s %7s %6s" % ("threads", "user", "kernel", "preempted", "throttled",
                                                    "blocked", "idle")]
        for g in GROUPS:
            if not self.counts[g]:
                continue
            keys = ("user", "kernel", "preempted", "throttled", "blocked", "idle")
            u, k, p, t, b, i = (100 * self.share(g, x) for x in keys)
            out.append("  %-26s %6.1f%% %6.1f%% %8.1f%% %8.1f%% %6.1f%% %5.0f%%"
                       % ("%s (%d)" % (g, self.counts[g]), u, k, p, t, b, i))
        g = GROUPS[0]
        total = self.window * max(1, self.counts[g])
        for title, parts in (("preempted by", self.took[g]), ("in the kernel", self.kernel[g]),
                             ("blocked", self.blocked[g])):
            top = _top(parts, 4, total)
            if top:
                out.append("  normal schedulers %s: %s" % (title, ", ".join(top)))
        if self.faults[g]:
            out.append("  normal schedulers' page faults: %d" % self.faults[g])
        if self.throttled_in:
            out.append("  throttled in: %s" % self.throttled_in)
        if self.cgroup_stat:
            out.append("  the node's cgroup: %s" % self.cgroup_stat)
        if self.steal is not None:
            out.append("  the host's CPUs: steal (the hypervisor running others) %.1f%%" % (100 * self.steal))
        out.append("  " + self.verdict())
        return out

    def as_json(self) -> dict[str, Any]:
        return {"from_ns": self.frm, "to_ns": self.to,
                "groups": {g: {"threads": self.counts[g],
                               "shares": {k: self.share(g, k) for k in
                                          ("user", "kernel", "preempted", "throttled", "blocked", "idle")},
                               "preempted_by_ns": self.took[g], "kernel_ns": self.kernel[g],
                               "blocked_ns": self.blocked[g], "page_faults": self.faults[g]}
                           for g in GROUPS if self.counts[g]},
                "steal": self.steal, "cgroup": self.cgroup_stat, "throttled_in": self.throttled_in,
                "verdict": self.verdict()}


def _kernel(stack: list[str]) -> str:
    """What a kernel sample was doing (why_os's words)."""
    if any(why_os.frame_name(f) in why_os.UPROBE for f in stack):
        return "the tracer's uprobes"
    if stack and why_os.frame_name(stack[0]) in why_os.SWITCHING:
        return "switching tasks"
    where = why_os.kernel_where(stack)
    return "page faults" if where == "page fault" else where


def _top(parts: dict[str, float], n: int, total: float) -> list[str]:
    best = sorted(parts.items(), key=lambda kv: -kv[1])
    return ["%s %.1f%%" % (k, 100 * v / total) for k, v in best[:n] if v / total >= 0.0005]


def steal_ticks(root: str = "/") -> Optional[tuple[int, int]]:
    """(steal, total) jiffies of all CPUs, from /proc/stat."""
    try:
        with open(os.path.join(root, "proc", "stat"), encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    values = [int(x) for x in fields[1:]]
    return values[7], sum(values[:8])


def cgroup_stat(h: hosts.Host, pid: int) -> Optional[tuple[str, int, int]]:
    """(cgroup path, nr_throttled, throttled ns) of pid's cpu cgroup."""
    text = hosts._read(h.path("proc", str(pid), "cgroup")) or ""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        v1 = "cpu" in parts[1].split(",")
        if not v1 and parts[1] != "":
            continue
        mount = h.mount("cgroup", "cpu") if v1 else h.mount("cgroup2")
        if mount is None:
            continue
        stat = hosts._read(os.path.join(mount, parts[2].lstrip("/"), "cpu.stat"))
        if stat is None:
            continue
        kv = dict((ln.split() + [""])[:2] for ln in stat.splitlines() if ln.strip())
        if "nr_throttled" in kv:
            ns = int(kv["throttled_time"]) if "throttled_time" in kv else int(kv.get("throttled_usec", "0")) * 1000
            return parts[2], int(kv["nr_throttled"]), ns
    return None


def run(args: argparse.Namespace, out: TextIO) -> int:
    h = hosts.Host()
    reader = Reader()
    tables: list[Table] = []
    threads: dict[int, str] = {}
    # The host's steal and the node's cgroup counters at the last table.
    steal0: Optional[tuple[int, int]] = None
    cg0: Optional[tuple[str, int, int]] = None

    clock = reader.clock

    def emit(frm: int, to: int, iv: Interval, live: bool) -> None:
        nonlocal steal0, cg0
        steal = cg_text = None
        if live:
            now = steal_ticks()
            if now and steal0 and now[1] > steal0[1]:
                steal = (now[0] - steal0[0]) / (now[1] - steal0[1])
            steal0 = now
            cg = cgroup_stat(h, args.os_pid)
            if cg and cg0 and cg[0] == cg0[0]:
                cg_text = "%s throttled %d times, %.1f ms" % (cg[0], cg[1] - cg0[1], (cg[2] - cg0[2]) / 1e6)
            cg0 = cg
        throttled_in = h.cgroup(args.os_pid, args.os_pid) if live and iv.num("thr") else None
        t = Table(frm, to, iv, threads, throttled_in, steal, cg_text)
        tables.append(t)
        if args.json:
            out.write(json.dumps(t.as_json()) + "\n")
        else:
            out.write("\n".join(t.lines(clock)) + "\n\n")
        out.flush()

    if args.events:
        with (sys.stdin if args.events == "-" else open(args.events, encoding="utf-8", errors="replace")) as f:
            for line in f:
                got = reader.line(line)
                if got:
                    emit(*got, live=False)
        return 0
    threads = _threads(h, args.os_pid)
    if not threads:
        sys.stderr.write("dtrace-sched: no process %d\n" % args.os_pid)
        return 3
    tool = os.environ.get("BPFTRACE", "bpftrace")
    with open(priv("bpftrace", "sched.bt"), encoding="utf-8") as f:
        text = f.read()
    if not h.has_event("exceptions", "page_fault_user"):
        text = re.sub(r"/\* faults: \*/.*?/\* :faults \*/", "", text, flags=re.S)
    # Without --interval, one table at the end (bpftrace's END prints it).
    interval = args.interval or 1_000_000
    # Through priv/bin/dtrace-bpftrace (which runs $BPFTRACE or bpftrace),
    # with --no-warnings as for every shipped script (its header says why).
    cmd = [priv("bin", "dtrace-bpftrace"), "--no-warnings", "-e",
           text[text.index("\n"):] if text.startswith("#!") else text,
           str(args.os_pid), str(max(1, int(round(interval))))]
    steal0, cg0 = steal_ticks(), cgroup_stat(h, args.os_pid)
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                                start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    except OSError as e:
        sys.stderr.write("dtrace-sched: cannot run %s: %s\n" % (tool, e))
        return 3

    slow_spans.stop_tracer_on_signals(proc, alarm=bool(args.duration))
    assert proc.stdout is not None
    started = False
    for line in proc.stdout:
        if line.startswith("T\t") and not started:
            started = True
            if args.duration:
                # From the attach on: bpftrace prints the last maps at its end.
                signal.setitimer(signal.ITIMER_REAL, args.duration)
            sys.stderr.write("Watching the threads of OS pid %d for %s... Ctrl-C to end.\n"
                             % (args.os_pid, "%g s" % args.duration if args.duration else "ever"))
        if line.startswith(("Attaching ", "Attached ")):
            continue
        got = reader.line(line)
        if got:
            threads.update(_threads(h, args.os_pid))
            emit(*got, live=True)
        elif reader.cur is None and reader.pending is None and not line.startswith(("T\t", "J", "@")) \
                and line.strip():
            sys.stderr.write(line)
    rc = proc.wait()
    if not started and rc != 0:
        sys.stderr.write("dtrace-sched: bpftrace exited with status %d before tracing\n" % rc)
        return 3
    return 0


def _threads(h: hosts.Host, pid: int) -> dict[int, str]:
    """The node's threads now: tid -> command."""
    out: dict[int, str] = {}
    try:
        tids = os.listdir(h.path("proc", str(pid), "task"))
    except OSError:
        return out
    for t in tids:
        comm = hosts._read(h.path("proc", str(pid), "task", t, "comm"))
        if comm is not None and t.isdigit():
            out[int(t)] = comm.strip()
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="dtrace-sched",
                                description="Is it the host or the BEAM? What the kernel did with a node's threads")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("-p", dest="os_pid", type=int, help="OS pid of the BEAM node (beam.smp)")
    src.add_argument("--events", help="read sched.bt's output from this file (- for stdin)")
    p.add_argument("--duration", type=float, help="stop after this many seconds (default: 10, or Ctrl-C)")
    p.add_argument("--interval", type=float, help="a table every this many seconds (default: one at the end)")
    p.add_argument("--json", action="store_true", help="one JSON object per interval")
    args = p.parse_args(argv)
    if args.os_pid and args.duration is None and args.interval is None:
        args.duration = 10.0
    return run(args, sys.stdout)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
