"""host: names the live tools read from the host, for the kernel's view of
a node's threads (why_os, sched): the process a task belongs to, a
thread's cgroup and the CPU quota that throttles it (cgroup v1's cpu
controller, or v2's cpu.max), and whether the kernel has the events the
tools attach to.

Every path is taken under `root' ("/" on a live host; the tests give a
directory made to look like one). Nothing here raises for a task that is
gone or a file that cannot be read: the names are then shorter.
"""

import os
import time
from typing import Callable, Optional

# Where tracefs is mounted, in the order tried.
TRACEFS = ("sys/kernel/tracing", "sys/kernel/debug/tracing")


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


class Host:
    def __init__(self, root: str = "/", own: tuple[int, ...] = ()) -> None:
        """own: the pids of the tracer's own processes (own())."""
        self.root = root
        self.own_pids = set(own)
        self._tasks: dict[tuple[int, str], str] = {}
        self._tgids: dict[int, int] = {}
        self._cgroups: dict[tuple[int, int], tuple[float, Optional[str]]] = {}

    def path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def has_event(self, category: str, name: str = "") -> bool:
        """Whether tracefs lists the kernel's tracepoint category:name (or
        the category alone)."""
        return any(os.path.isdir(self.path(t, "events", category, name)) for t in TRACEFS)

    def task(self, tid: int, comm: str) -> str:
        """`yes (pid 4242)': a task (a thread) by its command and its
        process's pid; `idle' for the idle task. Remembered by tid and
        command: ask while the task lives."""
        if tid == 0:
            return "idle"
        key = (tid, comm)
        if key not in self._tasks:
            tgid = self.tgid(tid)
            if tgid != tid:
                self._tasks[key] = "%s (thread %d of pid %d)" % (comm, tid, tgid)
            else:
                self._tasks[key] = "%s (pid %d)" % (comm, tid)
            if len(self._tasks) > 100_000:
                self._tasks.clear()
        return self._tasks[key]

    def tgid(self, tid: int) -> int:
        """The pid of the process of thread tid (tid itself when unknown)."""
        if tid not in self._tgids:
            status = _read(self.path("proc", str(tid), "status")) or ""
            tgid = next((line.split()[1] for line in status.splitlines() if line.startswith("Tgid:")), "")
            self._tgids[tid] = int(tgid) if tgid.isdigit() else tid
            if len(self._tgids) > 100_000:
                self._tgids.clear()
        return self._tgids[tid]

    def own(self, tid: int) -> bool:
        """Whether thread tid is one of the tracer's own processes'."""
        return tid != 0 and self.tgid(tid) in self.own_pids

    def cgroup(self, pid: int, tid: int) -> Optional[str]:
        """The cgroup of thread tid of process pid that sets its CPU quota,
        with the quota: `/batch (v1 cpu: 10.0 ms every 100.0 ms)';
        its own cgroup when none up its tree has one; None when unknown."""
        key = (pid, tid)
        now = time.monotonic()
        if key not in self._cgroups or now - self._cgroups[key][0] > 1.0:
            # Read again after a second: a thread may move.
            self._cgroups[key] = (now, self._quota(pid, tid))
            if len(self._cgroups) > 10_000:
                self._cgroups = {key: self._cgroups[key]}
        return self._cgroups[key][1]

    def _quota(self, pid: int, tid: int) -> Optional[str]:
        text = _read(self.path("proc", str(pid), "task", str(tid), "cgroup"))
        if text is None:
            return None
        v1: Optional[str] = None
        v2: Optional[str] = None
        for line in text.splitlines():
            parts = line.split(":", 2)
            if len(parts) != 3:
                continue
            _n, controllers, path = parts
            if controllers == "":
                v2 = path
            elif "cpu" in controllers.split(","):
                v1 = path
        if v1 is not None:
            mount = self.mount("cgroup", "cpu")
            found = mount and self._walk(mount, v1, _v1_quota)
            if found:
                return found
        if v2 is not None:
            mount = self.mount("cgroup2")
            found = mount and self._walk(mount, v2, _v2_quota)
            if found:
                return found
        return v1 if v1 is not None else v2

    def _walk(self, mount: str, path: str, quota: Callable[[str], Optional[str]]) -> Optional[str]:
        """The first cgroup from path up to the root with a quota."""
        at = path.rstrip("/") or "/"
        while True:
            q = quota(os.path.join(mount, at.lstrip("/")))
            if q is not None:
                return "%s (%s)" % (at, q)
            if at == "/":
                return None
            at = os.path.dirname(at) or "/"

    def mount(self, fstype: str, option: Optional[str] = None) -> Optional[str]:
        """Where a cgroup hierarchy is mounted (fstype cgroup with the
        controller `option', or cgroup2), under root."""
        text = _read(self.path("proc", "self", "mountinfo")) or ""
        for line in text.splitlines():
            left, _, right = line.partition(" - ")
            fields, rfields = left.split(), right.split()
            if len(fields) < 5 or len(rfields) < 3 or rfields[0] != fstype:
                continue
            if option is not None and option not in rfields[2].split(","):
                continue
            return self.path(fields[4].lstrip("/"))
        return None


def _ms(us: int) -> str:
    return "%.1f ms" % (us / 1000.0)


def _v1_quota(d: str) -> Optional[str]:
    quota = (_read(os.path.join(d, "cpu.cfs_quota_us")) or "").strip()
    period = (_read(os.path.join(d, "cpu.cfs_period_us")) or "").strip()
    if not quota.lstrip("-").isdigit() or int(quota) < 0 or not period.isdigit():
        return None
    return "v1 cpu: %s every %s" % (_ms(int(quota)), _ms(int(period)))


def _v2_quota(d: str) -> Optional[str]:
    fields = (_read(os.path.join(d, "cpu.max")) or "").split()
    if len(fields) != 2 or not fields[0].isdigit() or not fields[1].isdigit():
        return None
    return "v2 cpu.max: %s every %s" % (_ms(int(fields[0])), _ms(int(fields[1])))
