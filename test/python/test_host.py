"""host's names (its docstring), read under a directory made to look like
a host: tasks by their process, a throttled thread's cgroup with its CPU
quota (cgroup v1 and v2), and the kernel's events."""

from pathlib import Path

from dtrace_tools import host


def write(root: Path, path: str, text: str) -> None:
    p = root / path
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def test_a_task_by_its_process(tmp_path: Path) -> None:
    write(tmp_path, "proc/4242/status", "Name:\tyes\nTgid:\t4242\n")
    write(tmp_path, "proc/77/status", "Name:\topt cgu.1\nTgid:\t70\n")
    h = host.Host(str(tmp_path), own=(70,))
    assert h.task(4242, "yes") == "yes (pid 4242)"
    assert h.task(77, "opt cgu.1") == "opt cgu.1 (thread 77 of pid 70)"
    assert h.task(0, "swapper/0") == "idle"
    # Gone: its tid stands for its pid.
    assert h.task(99, "sh") == "sh (pid 99)"
    assert h.own(77) and not h.own(4242)


def test_cgroup_v1_quota_up_the_tree(tmp_path: Path) -> None:
    write(tmp_path, "proc/self/mountinfo",
          "30 25 0:26 / /sys/fs/cgroup/cpu rw,relatime shared:9 - cgroup cgroup rw,cpu\n")
    write(tmp_path, "proc/10/task/11/cgroup", "4:memory:/x\n1:cpu:/batch/job-1\n0::/\n")
    write(tmp_path, "sys/fs/cgroup/cpu/batch/job-1/cpu.cfs_quota_us", "-1\n")
    write(tmp_path, "sys/fs/cgroup/cpu/batch/job-1/cpu.cfs_period_us", "100000\n")
    write(tmp_path, "sys/fs/cgroup/cpu/batch/cpu.cfs_quota_us", "25000\n")
    write(tmp_path, "sys/fs/cgroup/cpu/batch/cpu.cfs_period_us", "100000\n")
    assert host.Host(str(tmp_path)).cgroup(10, 11) == "/batch (v1 cpu: 25.0 ms every 100.0 ms)"


def test_cgroup_v2_cpu_max_and_none(tmp_path: Path) -> None:
    write(tmp_path, "proc/self/mountinfo", "31 25 0:27 / /sys/fs/cgroup rw shared:10 - cgroup2 cgroup2 rw\n")
    write(tmp_path, "proc/10/task/11/cgroup", "0::/app.slice\n")
    write(tmp_path, "sys/fs/cgroup/app.slice/cpu.max", "50000 100000\n")
    write(tmp_path, "proc/10/task/12/cgroup", "0::/free.slice\n")
    write(tmp_path, "sys/fs/cgroup/free.slice/cpu.max", "max 100000\n")
    h = host.Host(str(tmp_path))
    assert h.cgroup(10, 11) == "/app.slice (v2 cpu.max: 50.0 ms every 100.0 ms)"
    # No quota up its tree: its own cgroup.
    assert h.cgroup(10, 12) == "/free.slice"
    assert h.cgroup(10, 13) is None


def test_the_kernels_events(tmp_path: Path) -> None:
    (tmp_path / "sys/kernel/tracing/events/sched/sched_switch").mkdir(parents=True)
    h = host.Host(str(tmp_path))
    assert h.has_event("sched", "sched_switch")
    assert not h.has_event("exceptions", "page_fault_user")
