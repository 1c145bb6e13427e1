"""why_os: the OS side of why's breakdown. While the VM counts a process
as running ("on CPU"), its scheduler thread may be off the CPU: preempted
by another task, throttled by a CPU quota, asleep in a system call or a
page fault; or on the CPU but in the kernel. why's rules give the VM's
view; these split it by what the kernel did with the thread meanwhile
(sched_switch, a profile's samples, page faults), and take back from
"scheduled out" the time the process waited runnable because the thread
that ran it next was off the CPU.

The kernel's events (kind, then the fields), per OS thread (tid), on the
clock of why's events, each at the moment it ends:

    thread     tid comm                  the thread's name: N_scheduler, N_dirty_cpu_sch, ...
    k_off      tid how off cpu task cgroup
                                         back on the CPU after `off' ns runnable; how:
                                         "preempted", or "throttled" (its cgroup, or one above
                                         it, out of CPU quota: `cgroup' names it, or None);
                                         task: the one that ran longest on its CPU in one go
                                         meanwhile, a Task
    k_block    tid off state faults stack code
                                         back after `off' ns asleep: the kernel's task state,
                                         stack its kernel frames, innermost first; code the
                                         native code it blocked in (native.nif_frame) or None
    k_short    tid preempted throttled blocked task cgroup
                                         the shorter waits (ns) summed since the last k_off,
                                         k_block or k_short, at the process's scheduling out
                                         or its span's end; task took the last short one
    k_sample   tid where faults stack    a profile sample of it: where "u" (user) or "k" (kernel)
    k_sys      tid start name            a system call from start to now (a trace with the
                                         kernel's syscall events: the recorder's report); time
                                         on the CPU outside them is then user time
    k_waited   tid off throttled cpu task cgroup
                                         a thread that ran no span's process is back after
                                         waiting `off' ns runnable
    tracer     what start end            the tracer's own "attach" or "detach", start to end

Only threads a span's process runs on have k_off, k_block, k_short and
k_sample events (the tracer filters them in the kernel); faults is the
thread's running count of page faults while one did.

The rules (docs/operators.md, "Why was it slow", shows them at work), over
the time a span's process was in (the VM's "on CPU"), outside its GC and
file I/O (why's, which come first):

  - on a dirty scheduler thread (its name says so): that component, named
    by the thread;
  - on a normal scheduler thread, from the thread's switches: off the CPU
    runnable, `preempted by' the task that ran longest on its CPU in one
    go meanwhile, or `throttled' (the cgroup named); off the CPU asleep,
    `blocked' (the system call, or `page fault', read from the kernel
    stack, and the native code it blocked in where the live tool read it);
    the shorter waits, summed by the tracer, at the end of the stretch on
    the CPU they were in;
  - on the CPU: `on CPU (user)' or `in the kernel' (the system call, `page
    faults', or `interrupts'), each stretch as the profile's nearest sample
    of the thread says (samples about 1 ms apart);
  - the tracer's own cost is named as such (category `tracer'): a sample
    in the kernel's uprobe handling (`the tracer's probes'), time the
    tracer's own processes took the CPU (the live tool knows them), and a
    stretch not sampled, in the kernel or blocked inside the tracer's own
    attach or detach window (`the tracer attaching its probes', or
    detaching: the kernel writes each probe into the node's code holding
    the lock its page faults take, and the node's threads wait meanwhile;
    a collection there is such a stretch too, as it allocates; the
    kernel's events stop first at a detach, so what the thread did then
    is not seen);
  - scheduled out, runnable: a process scheduled in on a thread that was
    waiting runnable (preempted, throttled) after the process's last
    message came waited for that thread: that part of the wait is taken
    from scheduled out and counted as preempted (by the task that ran
    longest) or throttled. Without a message (a timer, a yield) when the
    process became runnable is not known: the waits of the thread it went
    out on (its run queue's, whichever thread came to take it) are taken
    only when together they span the interval but for at most
    max(SPAN_NS, COVER_SLACK of it) (the process yielded, and the
    thread, not the VM, kept it from running; the rest stays scheduled
    out).
  - a stretch on the CPU that no sample reached (none within
    SAMPLE_REACH_NS) stays `on CPU (no sample)': on a virtual machine,
    most often the hypervisor running another guest on that CPU (steal
    time, which no guest event shows), or the tracer lost the events.

Without kernel events (the OS part off, DTrace, SystemTap, a snapshot
without LTTng's kernel tracer) the VM's view stays, `on CPU'.

Bounds: per thread at most MAX_EVENTS events are kept, and none older than
the oldest open span's begin.
"""

import bisect
import re
from typing import Any, Callable, Optional

MAX_EVENTS = 200_000
# Waits span a scheduled-out interval if they leave at most this much of
# it, or COVER_SLACK of it, uncovered (_covers): a thread starved by a
# real-time task gets the CPU back in short windows (the kernel's fair
# server, 50 ms a second), and the VM's own threads run first in them.
SPAN_NS = 500_000
COVER_SLACK = 0.1
# Functions a process waits in, in a receive, that no message may end (a
# timeout): out in one of these with no message, the process was asleep,
# not yielded, and its thread taken by another task meanwhile did not
# delay it (test-sid: a 40 ms timer:sleep/1 read as "preempted by cc1").
# Elsewhere a wait with no message is taken as a yield's: the VM's events
# do not say whether the process could run, so this is a heuristic.
WAITS = frozenset(["timer:sleep/1", "gen:do_call/4", "gen_server:loop/7", "gen_statem:loop_receive/3",
                   "gen_event:fetch_msg/6", "proc_lib:sync_start/2", "erlang:hibernate/3",
                   "erlang:hibernate/0", "gen_server:loop/8", "gen:wait_resp_mon/3"])
# Events kept back, before the oldest open span's begin.
LONGEST_WAIT_NS = 1_000_000_000

# A task on the host: (tid, comm).
Task = tuple[int, str]
# A component: (category, label); categories in CATEGORIES.
Component = tuple[str, Optional[str]]
# A stretch of a span's time: (start, end, category, label).
Slice = tuple[int, int, str, Optional[str]]
# A thread's kernel event: (ts, kind, fields).
KEvent = tuple[int, str, tuple[Any, ...]]

CATEGORIES = ("user", "kernel", "preempted", "throttled", "blocked", "dirty", "tracer", "cpu")

SYSCALL = re.compile(r"^(?:__(?:x64|ia32|x32|arm64|riscv|s390x)_sys|__do_sys|__se_sys|ksys)_(\w+?)(?:\.\S*)?$")
# Frames of an interrupt, and the inner frames of common system calls.
IRQ = re.compile(r"^(?:asm_sysvec_\w+|asm_common_interrupt|__irq_exit_rcu|irq_exit_rcu|handle_softirqs|"
                 r"__do_softirq|sysvec_\w+|common_interrupt)$")
INNER_CALL = re.compile(r"^(?:ksys|do_sys|__sys)_(\w+?)(?:\.\S*)?$")
FAULT = ("exc_page_fault", "asm_exc_page_fault", "do_user_addr_fault", "handle_mm_fault", "do_page_fault",
         "do_mem_abort", "el0_da", "el1_da")
# The kernel's uprobe handling: a tracer's probe firing.
UPROBE = ("uprobe_notify_resume", "handle_swbp", "uprobe_dispatcher", "handler_chain", "__uprobe_perf_func",
          "arch_uprobe_exception_notify", "uprobe_pre_sstep_notifier")
# A sample's innermost frame when it lands on a switch (_kernel_sample).
SWITCHING = ("__schedule", "schedule", "finish_task_switch", "finish_task_switch.isra.0", "__cond_resched",
             "preempt_schedule_irq", "preempt_schedule", "preempt_schedule_common", "context_switch")
# A k_short comes this long after the end of the in interval it sums.
SHORT_SLACK_NS = 1_000_000
# A stretch on the CPU this far from any sample of its thread is not split.
SAMPLE_REACH_NS = 1_500_000
# Frames that say nothing of why a thread sleeps.
GENERIC = re.compile(r"^(?:__schedule|schedule\w*|preempt_schedule\w*|__cond_resched|io_schedule\w*|"
                     r"do_task_dead|\w*_slowpath|rwsem_\w+|__mutex_lock\w*|mutex_lock\w*|down_\w+|"
                     r"__x64_sys_\w+|x64_sys_call|do_syscall_64|entry_SYSCALL\w*|\w*wait_for_common\w*|"
                     r"bit_wait\w*|out_of_line_wait_on_bit\w*|__wait_on_bit\w*|folio_wait\w*)$")


def frame_name(frame: str) -> str:
    """`do_nanosleep+38' -> `do_nanosleep'."""
    name = frame.strip().split("+", 1)[0]
    return name.split(" ", 1)[0]


def kernel_where(stack: list[str]) -> str:
    """What a kernel stack (innermost frame first) was doing: a system
    call's name, `page fault' (one inside a system call counts as the
    call), `interrupts'; from a stack cut short (by_path's samples), the
    call named by an inner frame (`ksys_write' -> `write'), else
    `kernel'."""
    names = [frame_name(f) for f in stack]
    for n in names:
        m = SYSCALL.match(n)
        if m:
            return m.group(1)
    if any(n in FAULT for n in names):
        return "page fault"
    if any(IRQ.match(n) for n in names):
        return "interrupts"
    for n in names:
        m = INNER_CALL.match(n)
        if m:
            return m.group(1)
    return "kernel"


def blocked_on(stack: list[str]) -> str:
    """Why a thread sleeps, from its kernel stack: `nanosleep', `page fault
    (mmap lock)', `futex', with the kernel function it waits in where that
    says more (`read: pipe_read')."""
    where = kernel_where(stack)
    names = [frame_name(f) for f in stack]
    lock = any(n.startswith("rwsem_down") or n.startswith("down_read") or n.startswith("down_write")
               for n in names) and any("mmap" in n or "lock_mm" in n or "find_vma" in n for n in names)
    if where == "page fault":
        return "page fault (mmap lock)" if lock else "page fault"
    if where in ("interrupts", "kernel"):
        first = next((n for n in names if not GENERIC.match(n)), names[0] if names else "?")
        return "in the kernel (%s)" % first
    if lock:
        return "%s (mmap lock)" % where
    return where


def dirty_kind(comm: Optional[str]) -> Optional[str]:
    """`dirty CPU scheduler' for a thread named N_dirty_cpu_sch (OTP 29:
    erts_dcpus_N), `dirty I/O scheduler' for N_dirty_io_sche(duler)
    (erts_dios_N), else None."""
    if comm is None:
        return None
    if "_dirty_cpu" in comm or comm.startswith("erts_dcpus_"):
        return "dirty CPU scheduler"
    if "_dirty_io" in comm or comm.startswith("erts_dios_"):
        return "dirty I/O scheduler"
    return None


def task_text(task: Task) -> str:
    tid, comm = task
    return "idle" if tid == 0 else "%s (tid %d)" % (comm, tid)


class Split:
    """The OS side of one span: components and their slices."""

    def __init__(self) -> None:
        self.components: dict[Component, int] = {}
        self.slices: list[Slice] = []
        self.faults = 0
        # Whether kernel events split the time (else the VM's "on CPU").
        self.kernel = False
        # The part of "scheduled out" that was the thread's wait, per
        # out interval: [(start, end, category, label)].
        self.out_taken: list[Slice] = []

    def add(self, s: int, e: int, cat: str, label: Optional[str]) -> None:
        if e <= s:
            return
        key = (cat, label)
        self.components[key] = self.components.get(key, 0) + (e - s)
        if self.slices and self.slices[-1][1] == s and self.slices[-1][2:] == (cat, label):
            self.slices[-1] = (self.slices[-1][0], e, cat, label)
        else:
            self.slices.append((s, e, cat, label))


class Threads:
    """The kernel's events of one tracer's nodes, per thread, as they come
    (in time order); split() reads them at a span's end."""

    def __init__(self) -> None:
        self.log: dict[tuple[str, int], list[KEvent]] = {}
        self.comms: dict[tuple[str, int], str] = {}
        self.tracer: list[tuple[str, str, int, int]] = []  # (node, what, start, end)
        self.kernel: set[str] = set()  # nodes with kernel events
        self.exact: set[str] = set()  # nodes whose system calls are events (k_sys), not samples
        # How a task reads: the live tool names its process (slow_spans).
        self.task_name: Callable[[Task], str] = task_text
        # Whether a task is the tracer's own (bpftrace, the tool): its
        # time is the tracer's, not another task's.
        self.own: Callable[[Task], bool] = lambda task: False

    def feed(self, node: str, ts: int, kind: str, f: tuple[Any, ...]) -> None:
        if kind == "thread":
            self.comms[(node, f[0])] = f[1]
            return
        if kind == "tracer":
            self.tracer.append((node, f[0], f[1], f[2]))
            return
        self.kernel.add(node)
        if kind == "k_sys":
            self.exact.add(node)
        log = self.log.setdefault((node, f[0]), [])
        if len(log) < MAX_EVENTS:
            log.append((ts, kind, f[1:]))

    def window(self, node: str, what: str, start: int, end: int) -> None:
        """The tracer's own attach or detach, from start to end; a window
        of the same node, what and start is replaced (its end now known)."""
        self.tracer = [w for w in self.tracer if w[:3] != (node, what, start)] + [(node, what, start, end)]

    def windows(self, node: str) -> list[tuple[int, int]]:
        """The tracer's own attach and detach windows on node."""
        return [(a, b) for n, _w, a, b in self.tracer if n == node]

    def inside(self, node: str, what: str, s: int, e: int) -> bool:
        """Whether [s, e] overlaps one of the tracer's windows."""
        return any(n == node and w == what and a < e and b > s for n, w, a, b in self.tracer)

    def prune(self, node: str, horizon: int) -> None:
        """Drops the node's events before horizon (no open span needs them)."""
        for key in [k for k in self.log if k[0] == node]:
            log = [e for e in self.log[key] if e[0] >= horizon]
            if log:
                self.log[key] = log
            else:
                del self.log[key]

    # -- A span's time ----------------------------------------------------

    def split(self, node: str, ins: list[tuple[int, int, Optional[int]]], excl: list[tuple[int, int]],
              outs: list[tuple[int, int, Optional[int], Optional[int], Optional[int]]]) -> Split:
        """ins: the process's in intervals (start, end, tid); excl: its GC
        and file I/O, counted already; outs: its scheduled-out intervals
        (start, end, tid it came in on, its last message's ts or None, tid
        it went out on)."""
        sp = Split()
        sp.kernel = node in self.kernel
        cut = _Cutter(excl)
        faults: list[int] = []
        # Each in interval's stretches, the thread's samples pooled over
        # the span: a stretch on the CPU takes its nearest sample's word.
        stretches: list[tuple[Optional[int], Slice]] = []
        samples: dict[int, list[tuple[int, str, Optional[str]]]] = {}
        shorts = self._shorts(node, ins)
        for k, (s, e, tid) in enumerate(ins):
            if e <= s:
                continue
            comm = self.comms.get((node, tid)) if tid is not None else None
            dirty = dirty_kind(comm)
            if dirty is not None:
                stretches.append((tid, (s, e, "dirty", "%s (%s)" % (dirty, comm))))
            elif not sp.kernel or tid is None:
                stretches.append((tid, (s, e, "cpu", None)))
            else:
                stretches += [(tid, x) for x in self._thread(node, tid, s, e, faults, samples.setdefault(tid, []),
                                                             shorts.get(k, []))]
        for tid, (a, b, cat, label) in stretches:
            parts = _classify(a, b, samples.get(tid, [])) if cat == "on" and tid is not None else [(a, b, cat, label)]
            for a1, b1, cat1, label1 in parts:
                for x, y in cut.outside(a1, b1):
                    for piece in self._tracer(node, x, y, cat1, label1):
                        sp.add(*piece)
        if sp.kernel:
            for o, i, tid, woke, out_tid in outs:
                if tid is not None:
                    for a, b, cat, label in self._waited(node, tid, o, i, woke, out_tid):
                        sp.out_taken.append((a, b, cat, label))
        sp.faults = max(faults) - min(faults) if faults else 0
        return sp

    def _shorts(self, node: str, ins: list[tuple[int, int, Optional[int]]]) -> dict[int, list[KEvent]]:
        """Each k_short event of the in intervals' threads, by the index of
        the interval it closes: the last of the thread's to begin before it
        (it comes just after the interval's end, at the scheduling out)."""
        out: dict[int, list[KEvent]] = {}
        by_tid: dict[int, list[tuple[int, int]]] = {}
        for k, (s, _e, tid) in enumerate(ins):
            if tid is not None:
                by_tid.setdefault(tid, []).append((s, k))
        for tid, starts in by_tid.items():
            lo, hi = starts[0][0], max(ins[k][1] for _s, k in starts) + SHORT_SLACK_NS
            for ev in self._events(node, tid, lo, hi):
                if ev[1] != "k_short":
                    continue
                j = bisect.bisect_right(starts, ev[0], key=lambda x: x[0]) - 1
                if j >= 0 and ev[0] <= ins[starts[j][1]][1] + SHORT_SLACK_NS:
                    out.setdefault(starts[j][1], []).append(ev)
        return out

    def _tracer(self, node: str, s: int, e: int, cat: str, label: Optional[str]) -> list[Slice]:
        """A stretch, its parts inside the tracer's own windows relabelled
        (but for time another task or a quota took)."""
        hits = [(max(s, a), min(e, b), w) for n, w, a, b in self.tracer if n == node and a < e and b > s]
        if not hits or cat not in ("cpu", "kernel", "blocked"):
            return [(s, e, cat, label)]
        pieces: list[Slice] = []
        at = s
        for a, b, w in sorted(hits):
            if a > at:
                pieces.append((at, a, cat, label))
            if b > max(a, at):
                pieces.append((max(a, at), b, "tracer",
                               "the tracer %s its probes" % ("attaching" if w == "attach" else "detaching")))
            at = max(at, b)
        if at < e:
            pieces.append((at, e, cat, label))
        return pieces

    def _thread(self, node: str, tid: int, s: int, e: int, faults: list[int],
                samples: list[tuple[int, str, Optional[str]]], short: list[KEvent]) -> list[Slice]:
        """What thread tid did from s to e (it was running then, at s):
        stretches off the CPU, and `on' ones for _classify; its samples
        go to samples, its fault counts to faults; short: its k_short
        events of this interval."""
        offs: list[Slice] = []
        calls: list[Slice] = []
        # A switch that ends a wait inside [s, e] may be read a little after
        # e (the span's end event comes after its measured end).
        for ts, kind, f in self._events(node, tid, s, e + SHORT_SLACK_NS):
            if kind == "k_sample":
                where, count, stack = f
                faults.append(count)
                if where == "u":
                    samples.append((ts, "user", None))
                else:
                    cl = _kernel_sample(stack)
                    if cl is not None:
                        samples.append((ts, cl[0], cl[1]))
            elif kind == "k_off":
                how, off, _cpu, task, where = f
                cat, lab = ("throttled", where) if how == "throttled" else self._taker(task)
                offs.append((max(s, ts - int(off)), min(e, ts), cat, lab))
            elif kind == "k_block":
                off, _state, count, stack, code = f
                faults.append(count)
                offs.append((max(s, ts - off), min(e, ts), "blocked",
                             blocked_on(stack) + (" in %s" % code if code else "")))
            elif kind == "k_sys":
                start, name = f
                calls.append((max(s, start), min(e, ts), "kernel", name))
        offs = [x for x in offs if x[1] > x[0]]
        # The short waits, at the end of the last stretch on the CPU.
        tail: list[Slice] = []
        end = e
        for _ts, _kind, (pre, thr, blk, task, where) in short:
            for ns, cat, label in ((pre, "preempted", None), (thr, "throttled", where),
                                   (blk, "blocked", "short sleeps")):
                if ns > 0:
                    c, lab = self._taker(task) if cat == "preempted" else (cat, label)
                    tail.append((end - ns, end, c, lab))
                    end -= ns
        parts: list[Slice] = []
        at = s
        for a, b, cat, label in sorted(offs):
            if a > at:
                parts += _in_calls(at, a, calls, node in self.exact)
            parts.append((max(a, at), b, cat, label))
            at = max(at, b)
        if at < end:
            parts += _in_calls(at, end, calls, node in self.exact)
        # The tail taken from the last stretch on the CPU, not from waits.
        lo = max(at, end)
        return parts + [(max(a, lo), b, c, lab) for a, b, c, lab in sorted(tail) if b > max(a, lo)]

    def _events(self, node: str, tid: int, s: int, e: int) -> list[KEvent]:
        """Thread tid's events from s to e."""
        log = self.log.get((node, tid), [])
        return log[bisect.bisect_left(log, s, key=lambda ev: ev[0]):bisect.bisect_right(log, e, key=lambda ev: ev[0])]

    def waits(self, node: str, tid: Optional[int], s: int, e: int) -> list[tuple[int, int]]:
        """Thread tid's waits off the CPU, runnable (preempted,
        throttled), within [s, e]; none for an unknown thread."""
        if tid is None:
            return []
        out: list[tuple[int, int]] = []
        for ts, kind, f in self._events(node, tid, s, e):
            if kind == "k_off":
                a, b = max(s, ts - int(f[1])), min(e, ts)
                if b > a:
                    out.append((a, b))
        return out

    def _taker(self, task: Task) -> tuple[str, Optional[str]]:
        """(category, label) of time a task took a thread's CPU."""
        if self.own(task):
            return "tracer", "the tracer's own work: %s" % self.task_name(task)
        return "preempted", self.task_name(task)

    def _waited(self, node: str, tid: int, o: int, i: int, woke: Optional[int],
                out_tid: Optional[int]) -> list[Slice]:
        """The part of the out interval [o, i] the process waited, off the
        CPU runnable, for thread tid (it came in on) or, with no message,
        for out_tid (it went out on) to come back (the rules)."""
        if woke is None:
            if out_tid is None:
                return []
            tid = out_tid
        lo = woke if woke is not None else o
        out: list[Slice] = []
        held: list[Slice] = []  # with no message: the waits, to be judged together
        for ts, kind, f in self._events(node, tid, o, i):
            if kind == "k_waited":
                off, throttled, _cpu, task, where = f
                label = ("throttled", where) if throttled else self._taker(task)
            elif kind == "k_off":
                how, off, _cpu, task, where = f
                label = ("throttled", where) if how == "throttled" else self._taker(task)
            else:
                continue
            a, b = ts - int(off), ts
            if woke is None:
                if b > o and a < i:
                    held.append((max(a, o), min(b, i), label[0], label[1]))
                continue
            if b > lo and a < i:
                out.append((max(a, lo), min(b, i), label[0], label[1]))
        if held and _covers(held, o, i):
            # No message: the waits are taken when together they span the
            # interval (the process yielded; a quota or another task, not
            # the VM, held it; a preemption can split a throttled wait). The
            # caller leaves out the intervals of a process asleep in a known
            # receive (WAITS), which sends no message either.
            out += held
        return out


def _covers(waits: list[Slice], o: int, i: int) -> bool:
    """Whether the waits cover [o, i] but for at most max(SPAN_NS,
    COVER_SLACK of it) in all (gaps at its ends too)."""
    at, gaps = o, 0
    for a, b, _c, _l in sorted(waits):
        gaps += max(0, a - at)
        at = max(at, b)
    gaps += max(0, i - at)
    return gaps <= max(SPAN_NS, COVER_SLACK * (i - o))


def _in_calls(s: int, e: int, calls: list[Slice], exact: bool) -> list[Slice]:
    """[s, e] on the CPU: inside the system calls it made, in the kernel;
    the rest user time where calls are events (exact), else `on' (for
    the samples to say)."""
    out: list[Slice] = []
    at = s
    for a, b, cat, label in sorted(calls):
        a, b = max(a, s), min(b, e)
        if b <= max(a, at):
            continue
        if a > at:
            out.append((at, a, "user" if exact else "on", None))
        out.append((max(a, at), b, cat, label))
        at = b
    if at < e:
        out.append((at, e, "user" if exact else "on", None))
    return out


def _kernel_sample(stack: list[str]) -> Optional[tuple[str, str]]:
    """(category, label) of a sample in the kernel: the tracer's own uprobe
    traps, else in the kernel (page faults, a system call, interrupts);
    None for one taken as the thread is switched in or out (the profile's
    interrupt waits while the switch keeps interrupts off, and lands
    there: such samples tell nothing of where time went)."""
    if not stack or frame_name(stack[0]) in SWITCHING:
        return None
    if any(frame_name(f) in UPROBE for f in stack):
        return "tracer", "the tracer's probes (uprobe traps)"
    where = kernel_where(stack)
    return "kernel", "page faults" if where == "page fault" else where


def _classify(s: int, e: int, samples: list[tuple[int, str, Optional[str]]]) -> list[Slice]:
    """[s, e] on the CPU, each moment as its nearest sample says; with no
    sample of the thread in its in interval, `cpu' (not split)."""
    if not samples:
        return [(s, e, "cpu", None)]
    # Sample j owns the moments nearer to it than to its neighbours, up to
    # SAMPLE_REACH_NS away.
    bounds = [(a[0] + b[0]) // 2 for a, b in zip(samples, samples[1:])]
    out: list[Slice] = []
    at, j = s, bisect.bisect_right(bounds, s)
    while at < e:
        nxt = min(e, bounds[j]) if j < len(bounds) else e
        t, cat, label = samples[j]
        lo, hi = max(at, t - SAMPLE_REACH_NS), min(nxt, t + SAMPLE_REACH_NS)
        if lo >= hi:
            out.append((at, nxt, "cpu", None))
        else:
            out += [(at, lo, "cpu", None), (lo, hi, cat, label), (hi, nxt, "cpu", None)]
        at, j = nxt, j + 1
    return [x for x in out if x[1] > x[0]]


def outside(s: int, e: int, iv: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of [s, e] outside the intervals iv."""
    return _Cutter(iv).outside(s, e)


class _Cutter:
    """The parts of [s, e] outside a set of intervals (GC, file I/O)."""

    def __init__(self, iv: list[tuple[int, int]]) -> None:
        merged: list[list[int]] = []
        for a, b in sorted(iv):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            elif b > a:
                merged.append([a, b])
        self.iv = merged

    def outside(self, s: int, e: int) -> list[tuple[int, int]]:
        out, at = [], s
        for a, b in self.iv:
            if b <= at or a >= e:
                continue
            if a > at:
                out.append((at, a))
            at = max(at, b)
        if at < e:
            out.append((at, e))
        return out
