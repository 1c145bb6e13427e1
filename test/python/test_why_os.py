"""why_os's rules (its docstring) on hand-made event streams: what the
kernel did with a span's scheduler thread, as the breakdown prints it,
and what a timeline and a flame graph show of it."""

from typing import Any

from dtrace_tools import why_os
from dtrace_tools.timeline import Timeline, segments
from dtrace_tools.why import Breakdown, Why

MS = 1_000_000
PID = "<0.90.0>"
TID = 77
SWITCH = ["__schedule+1576", "schedule+35", "irqentry_exit_to_user_mode+287"]
FAULT = ["clear_page_erms+7", "handle_mm_fault+300", "do_user_addr_fault+500", "exc_page_fault+120",
         "asm_exc_page_fault+38"]
SLEEP = ["__schedule+1576", "schedule+35", "do_nanosleep+100", "hrtimer_nanosleep+150",
         "__x64_sys_clock_nanosleep+200", "do_syscall_64+113", "entry_SYSCALL_64_after_hwframe+118"]
UPROBE = ["perf_event_output+208", "bpf_prog_1_span__end+850", "uprobe_dispatcher+460",
          "uprobe_notify_resume+426", "asm_exc_int3+53"]


def span(events: list[tuple[Any, ...]], end_ms: float = 100, why: Any = None) -> Breakdown:
    """One span of PID on thread TID (a normal scheduler) from 0 to end_ms,
    around the events (ms, kind, *fields)."""
    w = why or Why()
    out = []
    stream = ([(0, "thread", TID, "1_scheduler"), (0, "span_begin", PID, 1, 0, "request", "t"),
               (0, "in", PID, "-", TID)] + events + [(end_ms, "span_end", PID, 1, int(end_ms * MS), None, "ok")])
    for ms, kind, *fields in sorted(stream, key=lambda e: float(e[0])):
        b = w.feed("n", int(ms * MS), kind, *fields)
        if b is not None:
            out.append(b)
    [b] = out
    return b


def samples(frm: float, to: float, where: str = "u", stack: Any = None) -> list[tuple[Any, ...]]:
    """A sample every ms from frm to to (exclusive)."""
    return [(t + 0.5, "k_sample", TID, where, 0, stack or []) for t in range(int(frm), int(to))]


def components(b: Breakdown) -> dict[str, float]:
    return {why_os_text(c, lab): round(ns / MS, 3) for (c, lab), ns in b.os.components.items()}


def why_os_text(cat: str, label: Any) -> str:
    from dtrace_tools.why import component_text
    return component_text(cat, label)


def test_without_kernel_events_on_cpu_stays_the_vms() -> None:
    b = span([])
    assert b.cause() == (100 * MS, "on CPU")
    assert "    on CPU                100.00 ms" in b.lines(lambda ns: "T")


def test_a_pure_cpu_loop_is_on_cpu_in_user_space() -> None:
    b = span(samples(0, 100))
    assert b.cause() == (100 * MS, "on CPU (user)")
    assert "    on CPU (user)         100.00 ms" in b.lines(lambda ns: "T")


def test_preempted_by_the_task_that_took_the_cpu() -> None:
    b = span(samples(0, 30) + samples(90, 100)
             + [(90, "k_off", TID, "preempted", 60 * MS, 0, (4242, "yes"), None)])
    assert b.cause() == (60 * MS, "preempted by yes (tid 4242)")
    assert components(b) == {"on CPU (user)": 40.0, "preempted by yes (tid 4242)": 60.0}
    assert "    preempted              60.00 ms  (yes (tid 4242) 60.00 ms)" in b.lines(lambda ns: "T")


def test_throttled_names_the_cgroup() -> None:
    b = span(samples(0, 20) + [(100, "k_off", TID, "throttled", 80 * MS, 0, (0, "swapper/0"),
                                "/batch (v1 cpu: 10.0 ms every 100.0 ms)")])
    assert b.cause() == (80 * MS, "throttled by the CPU quota of cgroup /batch (v1 cpu: 10.0 ms every 100.0 ms)")


def test_blocked_names_the_system_call_and_the_code() -> None:
    b = span(samples(0, 10) + [(90, "k_block", TID, 80 * MS, 1, 0, SLEEP, "my_nif::sleepy (my_nif.so)")])
    assert b.cause() == (80 * MS, "blocked in the kernel: clock_nanosleep in my_nif::sleepy (my_nif.so)")


def test_kernel_time_page_faults_and_the_tracers_uprobes() -> None:
    b = span(samples(0, 20) + samples(20, 80, "k", FAULT) + samples(80, 90, "k", UPROBE)
             # A sample landing on a switch says nothing: its neighbours decide.
             + samples(90, 100) + [(95.6, "k_sample", TID, "k", 0, SWITCH)]
             + [(50, "k_sample", TID, "u", 100, []), (60, "k_sample", TID, "k", 7000, FAULT)])
    c = components(b)
    assert b.cause()[1] == "in the kernel: page faults"
    assert 55 < c["in the kernel: page faults"] < 65
    assert 8 < c["the tracer's probes (uprobe traps)"] < 12
    assert b.os.faults == 7000
    assert "page faults" in [line for line in b.lines(lambda ns: "T") if line.startswith("    in the kernel")][0]


def test_a_dirty_scheduler_is_its_own_component() -> None:
    b = span([(0, "thread", 78, "1_dirty_cpu_sch"), (10, "out", PID, "m:nif/0", TID), (11, "in", PID, "m:nif/0", 78),
              (71, "out", PID, "m:nif/0", 78), (72, "in", PID, "m:nif/0", TID)])
    assert b.cause() == (60 * MS, "on a dirty CPU scheduler (1_dirty_cpu_sch)")


def test_short_waits_come_summed_at_the_end_of_their_stretch() -> None:
    b = span(samples(0, 50) + [(50, "out", PID, "m:f/0", TID),
                               (50.001, "k_short", TID, 5 * MS, 0, 2 * MS, (11, "bpftrace"), None),
                               (50.1, "in", PID, "m:f/0", TID)] + samples(51, 100))
    c = components(b)
    assert c["preempted by bpftrace (tid 11)"] == 5.0
    assert c["blocked in the kernel: short sleeps"] == 2.0
    # At the end of the stretch (43 to 50 ms).
    assert b.os.slices[:3] == [(0, 43 * MS, "user", None), (43 * MS, 45 * MS, "blocked", "short sleeps"),
                               (45 * MS, 50 * MS, "preempted", "bpftrace (tid 11)")]


def test_the_tracers_own_processes_and_windows() -> None:
    w = Why()
    w.threads.own = lambda task: task[0] == 11
    w.threads.window("n", "detach", 70 * MS, 200 * MS)
    b = span(samples(0, 30) + [(40, "k_off", TID, "preempted", 10 * MS, 0, (11, "bpftrace"), None),
                               (45, "gc_start", PID), (75, "gc_end", PID)], why=w)
    c = components(b)
    assert c["the tracer's own work: bpftrace (tid 11)"] == 10.0
    # Not sampled in the window (the kernel's events stop there), and the
    # collection's part there: the tracer detaching.
    assert c["the tracer detaching its probes"] == 30.0
    assert b.gc == 25 * MS


def test_a_collection_taken_off_the_cpu_is_the_oss() -> None:
    # The thread preempted 60 of a collection's 70 ms: preempted; the
    # collection keeps the rest.
    b = span(samples(0, 20) + samples(80, 100) + [
        (20, "gc_start", PID), (85, "k_off", TID, "preempted", 60 * MS, 0, (4242, "yes"), None),
        (90, "gc_end", PID)])
    assert b.cause() == (60 * MS, "preempted by yes (tid 4242)")
    assert b.gc == 10 * MS
    assert b.gcs == 1


def test_a_span_begun_while_the_tracer_attached() -> None:
    w = Why()
    w.threads.window("n", "attach", 0, 50 * MS)
    w.feed("n", 0, "thread", TID, "1_scheduler")
    b = w.feed("n", 60 * MS, "span_end", PID, 1, 40 * MS, (0, "request", "t"), "ok")
    assert b is not None and not b.complete
    assert b.cause()[1] == "the tracer attaching its probes (the span began before its events)"


def test_a_span_whose_begin_the_detach_took() -> None:
    # bpftrace detaching probe by probe: span__begin gone, span__end not yet.
    w = Why()
    w.threads.window("n", "detach", 100 * MS, 300 * MS)
    w.feed("n", 0, "thread", TID, "1_scheduler")
    b = w.feed("n", 160 * MS, "span_end", PID, 1, 8 * MS, (0, "loop", "loop"), "ok")
    assert b is not None and not b.complete
    assert b.cause()[1] == "the tracer detaching its probes (the span's begin unseen)"


def test_a_span_begun_before_the_tracer_is_unknown() -> None:
    w = Why()
    w.feed("n", 0, "thread", TID, "1_scheduler")
    b = w.feed("n", 60 * MS, "span_end", PID, 1, 40 * MS, (0, "request", "t"), "ok")
    assert b is not None and not b.complete
    assert b.cause()[1] == "unknown: the span began before the events do"


def test_a_wait_for_the_thread_is_taken_from_scheduled_out() -> None:
    # Out in a receive; the message comes at 40 ms, but the thread it is
    # scheduled in on was preempted from 30 to 70 ms.
    b = span(samples(0, 10) + samples(70, 100) + [
        (10, "out", PID, "gen:do_call/4", TID),
        (40, "queued", PID),
        (70, "k_waited", TID, 40 * MS, False, 0, (4242, "yes"), None),
        (70.01, "in", PID, "gen:do_call/4", TID)])
    assert components(b)["preempted by yes (tid 4242)"] == 30.0
    assert round(b.out_in["gen:do_call/4"] / MS, 2) == 30.01


def test_timeline_and_flame_graph_show_the_same() -> None:
    b = span(samples(0, 30) + samples(90, 100)
             + [(90, "k_off", TID, "preempted", 60 * MS, 0, (4242, "yes"), None)])
    names = [(s / MS, e / MS, cat) for s, e, cat, _l, _a in segments(b)]
    assert names == [(0, 30, "os:user"), (30, 90, "os:preempted"), (90, 100, "os:user")]
    tl = Timeline()
    tl.add(b)
    assert tl.folded() == {"request;on CPU (user)": 40 * MS, "request;preempted;yes (tid 4242)": 60 * MS}
    tracks, _ = tl.model()
    assert [x[3] for x in tracks[("n", PID)]] == ["request", "on CPU (user)", "preempted by yes (tid 4242)",
                                                  "on CPU (user)"]


def test_kernel_stacks_read() -> None:
    assert why_os.kernel_where(SLEEP) == "clock_nanosleep"
    assert why_os.kernel_where(FAULT) == "page fault"
    assert why_os.kernel_where(["__irq_exit_rcu+1", "sysvec_apic_timer_interrupt+2"]) == "interrupts"
    # Cut short (bpftrace 0.23 and later's samples): an inner frame names the call.
    assert why_os.kernel_where(["pipe_write+1", "vfs_write+2", "ksys_write+3"]) == "write"
    assert why_os.kernel_where(["memcpy+1"]) == "kernel"
    assert why_os.blocked_on(["__schedule+1", "rwsem_down_read_slowpath+2", "lock_mm_and_find_vma+3",
                              "do_user_addr_fault+4", "exc_page_fault+5"]) == "page fault (mmap lock)"
    assert why_os.blocked_on(["__schedule+1", "schedule+2", "pipe_read+3"]) == "in the kernel (pipe_read)"
    assert why_os.dirty_kind("10_dirty_io_sch") == "dirty I/O scheduler"
    assert why_os.dirty_kind("2_scheduler") is None


def test_a_yield_held_by_the_thread_is_the_threads() -> None:
    # Out without a message, the thread throttled from just after to just
    # before it came back: throttled. A sleep with a wait at its end only
    # keeps its time.
    b = span(samples(0, 10) + samples(90, 100) + [
        (10, "out", PID, "m:loop/1", TID),
        (89.9, "k_off", TID, "throttled", 79_800_000, 0, (0, "swapper/0"), "/q (v1 cpu: 10.0 ms every 100.0 ms)"),
        (90, "in", PID, "m:loop/1", TID)])
    assert b.cause() == (79_800_000, "throttled by the CPU quota of cgroup /q (v1 cpu: 10.0 ms every 100.0 ms)")
    # The same wait split by a preemption: taken whole, each part its own.
    b = span(samples(0, 10) + samples(90, 100) + [
        (10, "out", PID, "m:loop/1", TID),
        (60, "k_off", TID, "throttled", 49_900_000, 0, (0, "swapper/0"), "/q (v1 cpu: 10.0 ms every 100.0 ms)"),
        (89.9, "k_off", TID, "preempted", 29_900_000, 0, (4242, "yes"), None),
        (90, "in", PID, "m:loop/1", TID)])
    c = components(b)
    assert c["throttled by the CPU quota of cgroup /q (v1 cpu: 10.0 ms every 100.0 ms)"] == 49.9
    assert c["preempted by yes (tid 4242)"] == 29.9
    b = span(samples(0, 10) + samples(90, 100) + [
        (10, "out", PID, "timer:sleep/1", TID),
        (89.9, "k_off", TID, "preempted", 5 * MS, 0, (4242, "yes"), None),
        (90, "in", PID, "timer:sleep/1", TID)])
    assert b.cause() == (80 * MS, "scheduled out in timer:sleep/1")
    # A yield in a CPU loop with its thread preempted all along: preempted.
    b = span(samples(0, 10) + samples(90, 100) + [
        (10, "out", PID, "m:spin/2", TID),
        (89.9, "k_off", TID, "preempted", 79_800_000, 0, (4242, "yes"), None),
        (90, "in", PID, "m:spin/2", TID)])
    assert b.cause() == (79_800_000, "preempted by yes (tid 4242)")
    # Its thread preempted all along but for a window it spent on other
    # work (a real-time task leaves the fair server's windows): the waits
    # are the thread's, the window stays scheduled out.
    b = span(samples(0, 10) + samples(90, 100) + [
        (10, "out", PID, "m:spin/2", TID),
        (50, "k_off", TID, "preempted", 40 * MS, 0, (4242, "yes"), None),
        (89.9, "k_off", TID, "preempted", 35_900_000, 0, (4242, "yes"), None),
        (90, "in", PID, "m:spin/2", TID)])
    assert b.cause() == (75_900_000, "preempted by yes (tid 4242)")
    assert "    scheduled out           4.10 ms" in b.lines(lambda ns: "T")
    # Taken by another thread once it ran: the wait is still the thread's
    # it went out on (its run queue).
    b = span(samples(0, 10) + samples(90, 100) + [
        (0, "thread", TID + 1, "2_scheduler"),
        (10, "out", PID, "m:spin/2", TID),
        (89.9, "k_off", TID, "preempted", 79_800_000, 0, (4242, "yes"), None),
        (89.95, "in", PID, "m:spin/2", TID + 1)])
    assert b.cause() == (79_800_000, "preempted by yes (tid 4242)")
    # Half the interval uncovered: the VM's, scheduled out.
    b = span(samples(0, 10) + samples(90, 100) + [
        (10, "out", PID, "m:spin/2", TID),
        (89.9, "k_off", TID, "preempted", 40 * MS, 0, (4242, "yes"), None),
        (90, "in", PID, "m:spin/2", TID)])
    assert b.cause() == (80 * MS, "scheduled out in m:spin/2")
    # A sleep (a known receive, why_os.WAITS) with its thread preempted all
    # along: no message says when it could run again; the sleep keeps it.
    b = span(samples(0, 10) + samples(90, 100) + [
        (10, "out", PID, "timer:sleep/1", TID),
        (89.9, "k_off", TID, "preempted", 79_800_000, 0, (4242, "cc1"), None),
        (90, "in", PID, "timer:sleep/1", TID)])
    assert b.cause() == (80 * MS, "scheduled out in timer:sleep/1")
