"""report_kernel: a flight-recorder snapshot's kernel events, where it
holds them, as why_os's, so that the report splits "on CPU" as
dtrace-slow-spans does (why_os's rules).

They come from LTTng's kernel tracer (lttng-modules, a kernel module: a
session's kernel channel needs it, and root's session daemon), recorded
in the same session as the node's user-space events:

  - `sched_switch' (prev_tid, prev_state, next_tid, next_comm): a span's
    thread off the CPU runnable (preempted: by the task that took it) or
    asleep (blocked);
  - `syscall_entry_NAME' and `syscall_exit_NAME' (`lttng enable-event -k
    --syscall -a'): time in the kernel by system call, and the call a
    thread slept in;
  - `x86_exceptions_page_fault_user' (and `_kernel'): page faults counted.

and the user-space events carry the thread that fired them: the `vtid'
context (`lttng add-context -u -t vtid'). The recorder's own session
records none of these (it runs without kernel modules, as most hosts
must); a session of one's own that adds them, snapshotted with `lttng
snapshot record', gives them to the report. Without them the report says
so, and "on CPU" is the VM's view. Throttling is not told from
preemption here (no event says the cgroup ran out of quota), nor are
samples of user time taken: on CPU outside system calls reads as user.
"""

from typing import Any, Optional

# A why event: (ts, kind, fields).
WhyEvent = tuple[int, str, tuple[Any, ...]]

FAULTS = ("x86_exceptions_page_fault_user", "x86_exceptions_page_fault_kernel")


def is_kernel(name: str) -> bool:
    return (name == "sched_switch" or name.startswith("syscall_entry_") or name.startswith("syscall_exit_")
            or name in FAULTS)


class Kernel:
    """Per node: the threads' state from the kernel events fed in time
    order; the why events they make (`feed' returns them)."""

    def __init__(self) -> None:
        self.off: dict[int, tuple[int, bool, tuple[int, str], Optional[str]]] = {}  # tid -> (since, asleep, taker, in)
        self.syscall: dict[int, tuple[int, str]] = {}  # tid -> (since, name)
        self.faults: dict[int, int] = {}
        self.seen = False

    def feed(self, ts: int, name: str, f: dict[str, Any], tid: Optional[int]) -> list[WhyEvent]:
        """One kernel event (tid: the thread it ran on, where the snapshot
        says: a kernel channel's tid context; else None)."""
        self.seen = True
        out: list[WhyEvent] = []
        if name == "sched_switch":
            prev, nxt = f.get("prev_tid"), f.get("next_tid")
            if isinstance(prev, int):
                asleep = (int(f.get("prev_state") or 0) & 0xFF) != 0
                sc = self.syscall.get(prev)
                self.off[prev] = (ts, asleep, (int(nxt or 0), str(f.get("next_comm") or "?")),
                                  sc[1] if sc else None)
            if isinstance(nxt, int) and nxt in self.off:
                since, asleep, taker, call = self.off.pop(nxt)
                if asleep:
                    stack = ["__x64_sys_%s+0" % call] if call else []
                    out.append((ts, "k_block", (nxt, ts - since, 1, self.faults.get(nxt, 0), stack, None)))
                else:
                    out.append((ts, "k_off", (nxt, "preempted", ts - since, -1, taker, None)))
        elif name.startswith("syscall_entry_") and tid is not None:
            self.syscall[tid] = (ts, name[len("syscall_entry_"):])
        elif name.startswith("syscall_exit_") and tid is not None:
            start = self.syscall.pop(tid, None)
            if start is not None:
                out.append((ts, "k_sys", (tid, start[0], start[1])))
        elif name in FAULTS and tid is not None:
            self.faults[tid] = self.faults.get(tid, 0) + 1
        return out


def note(kernel_seen: bool) -> Optional[str]:
    """The report's line on what its breakdowns' "on CPU" is."""
    if kernel_seen:
        return None
    return ("(no kernel events in the snapshots: \"on CPU\" is the VM's view and may hold time the scheduler "
            "thread was preempted, throttled, blocked or in the kernel; LTTng's kernel tracer records them: "
            "report_kernel's docstring says how)")
