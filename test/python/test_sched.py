"""dtrace-sched over sched.bt's output (its docstring): each group's
shares of its threads' time, by whom the host took it, and the verdict."""

from pathlib import Path

import pytest

from dtrace_tools import sched

# Two normal schedulers (11, 12), a dirty CPU scheduler (13), over 1 s:
# 11 ran 400 ms (300 user, 100 in page faults), was preempted 400 ms by
# yes (300) and rustc (100), and idle in futex 200 ms; 12 was throttled
# 100 ms and blocked in nanosleep 50 ms; 13 was never seen (idle).
OUTPUT = """Attaching 7 probes...
T\t1000000000\t2026-11-28 12:00:00.000000
I\t2000000000
@us[11]: 300
@ks[11,
        clear_page_erms+7
        handle_mm_fault+300
        exc_page_fault+120
]: 100
@pre[11]: 400000000
@thr[12]: 100000000

@blk[11,
        __schedule+1576
        futex_wait+154
        __x64_sys_futex+301
]: 200000000
@blk[12,
        __schedule+1576
        do_nanosleep+100
        __x64_sys_clock_nanosleep+200
]: 50000000
@took[11, yes]: 300000000
@took[11, rustc, the second]: 100000000
@pf[11]: 5000
@comm[11]: 1_scheduler
@comm[12]: 2_scheduler
@comm[13]: 1_dirty_cpu_sch
J
"""


def test_the_groups_shares_and_the_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "sched.out"
    f.write_text(OUTPUT)
    assert sched.main(["--events", str(f)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "12:00:00.000000 to 12:00:01.000000 (1.00 s): share of each group's time"
    assert out[2] == "  normal schedulers (2)        15.0%    5.0%     20.0%      5.0%    2.5%    52%"
    assert out[3] == "  dirty CPU schedulers (1)      0.0%    0.0%      0.0%      0.0%    0.0%   100%"
    assert "  normal schedulers preempted by: yes 15.0%, rustc, the second 5.0%" in out
    assert "  normal schedulers in the kernel: page faults 5.0%" in out
    assert "  normal schedulers blocked: clock_nanosleep 2.5%" in out
    assert "  normal schedulers' page faults: 5000" in out
    assert out[-2] == ("  verdict: the host: it took 25% of the normal schedulers' time (preempted 20% by yes 15.0%, "
                       "rustc, the second 5.0%, throttled 5%); they ran 20%")


def test_json_and_a_quiet_host(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "sched.out"
    f.write_text("T\t0\t2026-11-28 12:00:00.000000\nI\t1000000000\n@us[11]: 900\n@comm[11]: 1_scheduler\nJ\n")
    assert sched.main(["--events", str(f), "--json"]) == 0
    import json
    j = json.loads(capsys.readouterr().out)
    assert j["groups"]["normal schedulers"]["threads"] == 1
    assert j["verdict"].startswith("verdict: the BEAM: the host took 0.0% of the normal schedulers' time; they ran 90%")


def test_groups() -> None:
    # OTP 29 names them erts_sched_N, erts_dcpus_N, erts_dios_N.
    assert [sched.group_of(c) for c in ("erts_sched_1", "erts_dcpus_2", "erts_dios_3", "erts_aux_1")] == [
        "normal schedulers", "dirty CPU schedulers", "dirty I/O schedulers", "other threads"]
    assert [sched.group_of(c) for c in ("1_scheduler", "12_scheduler", "2_dirty_cpu_sch", "10_dirty_io_sch",
                                        "1_aux", "beam.smp")] == [
        "normal schedulers", "normal schedulers", "dirty CPU schedulers", "dirty I/O schedulers",
        "other threads", "other threads"]
