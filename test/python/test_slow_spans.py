"""dtrace-slow-spans over recorded slow-spans.bt output
(fixtures/slow-spans.txt; record-slow-spans.sh says what the node ran):
what an operator sees for each planted slow request, and the files asked
for. Pids differ between recordings; the tests read tags and causes."""

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dtrace_tools import host, slow_spans
from dtrace_tools.slow_spans import Clock, parse

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "slow-spans.txt")
PLANTED = ["--tag", "req-2", "--tag", "req-4", "--tag", "req-6", "--tag", "req-8", "--tag", "nested"]


def replay(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = slow_spans.main(["--events", FIXTURE, "--threshold", "5", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def blocks(out: str) -> dict[str, list[str]]:
    """Each breakdown printed, by "TAG KIND"."""
    found = {}
    for block in out.split("\n\n"):
        lines = block.splitlines()
        m = re.match(r'\S+ slow span: (\S+) [0-9.]+ ms, tag "([^"]*)"', lines[0]) if lines else None
        if m:
            found["%s %s" % (m.group(2), m.group(1))] = lines
    return found


def test_each_planted_request_is_broken_down_by_its_cause(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = replay(capsys, *PLANTED)
    assert rc == 0
    b = blocks(out)
    assert sorted(b) == ["nested db_query", "nested request", "req-2 request", "req-4 request",
                         "req-6 request", "req-8 request"]
    assert b["req-2 request"][0].endswith(" FAILED: throw")
    assert b["req-2 request"][1].startswith("    cause: scheduled out in timer:sleep/1, ")
    assert b["req-4 request"][1].startswith("    cause: GC, ")
    assert re.match(r"    cause: scheduled out in gen:do_call/4, waiting on <0\.\d+\.0> "
                    r"\(dtrace_test_service:server_loop/0\), ", b["req-6 request"][1])
    assert b["req-8 request"][1].startswith("    cause: file I/O (WRITE x1, FDATASYNC x1, ")
    assert b["nested db_query"][1].startswith("    cause: scheduled out in timer:sleep/1, ")
    # A span's kind, tag and process name, as the node named the process.
    assert re.search(r'slow span: request [0-9.]+ ms, tag "req-4", pid <0\.\d+\.0> \(erlang:apply/2\) \(span \d+\)$',
                     b["req-4 request"][0])


def test_the_summary_names_the_slowest_with_their_causes(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = replay(capsys, *PLANTED, "--top", "2")
    lines = out.splitlines()
    summary = lines[[k for k, line in enumerate(lines) if " spans ended, " in line][0]:]
    assert re.match(r"\d+ spans ended, 6 over 5 ms\.$", summary[0])
    assert summary[1] == "The 2 slowest, with their causes:"
    assert len(summary) == 4
    assert 'tag "req-8"' in summary[2] and "file I/O (WRITE x1" in summary[2]


def test_the_threshold_and_the_pid_filter(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = replay(capsys, "--threshold", "60")
    assert list(blocks(out)) == ["req-8 request"]
    _, out, _ = replay(capsys, "--pid", "<0.0.0>")
    assert blocks(out) == {}
    assert re.search(r"\d+ spans ended, 0 over 5 ms\.", out)


def test_json_is_one_object_per_slow_span(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = replay(capsys, *PLANTED, "--json")
    spans = [json.loads(line) for line in out.splitlines()]
    by_tag = {(s["tag"], s["kind"]): s for s in spans}
    assert len(spans) == 6
    assert by_tag[("req-2", "request")]["outcome"] == "throw"
    assert by_tag[("req-4", "request")]["gcs"] >= 1
    assert by_tag[("req-8", "request")]["file_ops"]["FDATASYNC"]["count"] == 1
    nested = by_tag[("nested", "db_query")]
    assert nested["parent_id"] == by_tag[("nested", "request")]["span_id"]


def test_trace_and_folded_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    trace, folded = tmp_path / "t.json", tmp_path / "t.folded"
    rc, _, err = replay(capsys, *PLANTED, "--trace", str(trace), "--folded", str(folded))
    assert rc == 0
    assert "Trace (Chrome JSON, 5 processes, " in err
    assert "Flame graph (folded stacks, " in err
    events = json.loads(trace.read_text())["traceEvents"]
    spans = {(e["args"]["tag"], e["name"]) for e in events if e.get("cat") == "span"}
    assert spans == {("req-2", "request [throw]"), ("req-4", "request"), ("req-6", "request"),
                     ("req-8", "request"), ("nested", "request"), ("nested", "db_query")}
    stacks = dict(line.rsplit(" ", 1) for line in folded.read_text().splitlines())
    assert int(stacks["request;GC"]) > 20_000
    assert int(stacks["db_query;scheduled out;timer:sleep/1"]) > 20_000
    # req-2's 40 ms and the nested request's own 15, not its db_query's 20.
    assert 54_000 < int(stacks["request;scheduled out;timer:sleep/1"]) < 70_000
    assert any(k.startswith("request;file I/O;") for k in stacks)


def test_a_file_not_written_is_exit_status_5(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out, err = replay(capsys, "--folded", str(tmp_path / "no" / "such" / "dir.folded"))
    assert rc == 5
    assert "slowest, with their causes" in out
    assert "dtrace-slow-spans: %s not written: " % (tmp_path / "no" / "such" / "dir.folded") in err


def test_perfetto_missing_says_how_to_run_with_it(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # As where perfetto is not installed: its import fails.
    no_module: Any = None
    monkeypatch.setitem(sys.modules, "perfetto", no_module)
    rc, _, err = replay(capsys, "--trace", str(tmp_path / "t.pftrace"))
    assert rc == 5
    assert "needs the perfetto Python package" in err
    assert "DTRACE_PYTHON=DIR/bin/python" in err
    assert "name the file *.json" in err


def test_arguments() -> None:
    with pytest.raises(SystemExit) as e:
        slow_spans.main(["--node", "n@h"])
    assert e.value.code == 2
    with pytest.raises(SystemExit):
        slow_spans.main(["-p", "1", "--function", "m:f/1"])


def test_parse_reads_each_kind_of_line() -> None:
    assert parse("B\t10\t<0.1.0>\t5\t0\trequest\treq-1\n") == (10, "span_begin", ("<0.1.0>", 5, 0, "request", "req-1"))
    assert parse("E\t20\t<0.1.0>\t5\t10\terror\trequest\treq-1") == (
        20, "span_end", ("<0.1.0>", 5, 10, (0, "request", "req-1"), "error"))
    # Saved before span outcomes: seven fields.
    assert parse("E\t20\t<0.1.0>\t5\t10\trequest\treq-1") == (
        20, "span_end", ("<0.1.0>", 5, 10, (0, "request", "req-1"), "ok"))
    # Saved before the thread was printed: no tid.
    assert parse("S\t1\t<0.1.0>\tin_exiting\tm:f/1") == (1, "in", ("<0.1.0>", "m:f/1", None))
    assert parse("S\t1\t<0.1.0>\tout\tm:f/1\t77") == (1, "out", ("<0.1.0>", "m:f/1", 77))
    assert parse("W\t1\t77\t1_scheduler") == (1, "thread", (77, "1_scheduler"))
    assert parse("O\t9\t77\tpreempted\t500000\t0\t42\tyes") == (
        9, "k_off", (77, "preempted", 500000, 0, (42, "yes"), None))
    assert parse("O\t9\t77\tblocked\t500000\t1\t3\t") == (9, "k_block", (77, 500000, 1, 3, [], None))
    assert parse("Z\t9\t77\t10\t20\t30\t42\tyes") == (9, "k_short", (77, 10, 20, 30, (42, "yes"), None))
    assert parse("P\t9\t77\tu\t3") == (9, "k_sample", (77, "u", 3, []))
    assert parse("R\t9\t77\t200000\t1\t0\t42\tyes") == (9, "k_waited", (77, 200000, True, 0, (42, "yes"), None))
    assert parse("b\t9\t77") == (9, "blocking", (77,))
    assert parse("G\t1\t<0.1.0>\tgc_major_start") == (1, "gc_start", ("<0.1.0>",))
    assert parse("F\t1\t2\t3\t4\treq-1") == (1, "file_start", ((2, 3), 4, "req-1"))
    assert parse("N\t1\t<0.1.0>\tmy\tname") == (1, "name", ("<0.1.0>", "my\tname"))
    for bad in ["Attaching 14 probes...", "", "B\tx\t<0.1.0>", "S\t1", "Z\t1\t2"]:
        assert parse(bad) is None


def test_clock() -> None:
    c = Clock()
    assert c(1_500_000_000) == "1.500000"
    c.set(1_000_000_000, "2026-11-28 22:39:46.353891")
    assert c(1_500_000_000) == "22:39:46.853891"
    c.set(0, "1700000000000000000")
    assert c(0).count(":") == 2
    c.set(0, "garbage")
    assert c(2_000_000_000) == "2.000000"


def test_a_process_without_the_library() -> None:
    assert slow_spans.mapped_library(os.getpid()) is None


def test_a_live_tracer_its_stderr_read(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """bpftrace 0.24 and later say "Attached N probes" and "Lost N events"
    on stderr: the attach line is dropped, the loss counted, and any other
    line of the tracer's own passed on to ours."""
    fake = tmp_path / "bpftrace"
    fake.write_text("#!/bin/sh\n"
                    "[ \"$1\" = --version ] && { echo 'bpftrace v0.27.1'; exit 0; }\n"
                    "echo 'Attached 12 probes' >&2\n"
                    "echo 'WARNING: a warning of its own' >&2\n"
                    "cat '%s'\n"
                    "echo 'Lost 7 events' >&2\n" % FIXTURE)
    fake.chmod(0o755)
    monkeypatch.setenv("BPFTRACE", str(fake))
    rc = slow_spans.main(["-p", str(os.getpid()), "--threshold", "5", *PLANTED])
    out, err = capsys.readouterr()
    assert rc == 0
    assert "req-2" in out
    assert "bpftrace lost 7 events" in out
    assert "WARNING: a warning of its own" in err
    assert "Attached" not in out + err


def test_the_program_its_kernel_part_and_by_path() -> None:
    """slow-spans.bt as dtrace-slow-spans runs it: with or without its kernel
    part; for bpftrace 0.23 and later, USDT probes named by the library's
    path and filtered to the node ($1), as -p would filter every probe."""
    full = slow_spans.program(True, True)
    assert "tracepoint:sched:sched_switch" in full and "@pf[tid]" in full
    assert "profile:hz:997" not in slow_spans.program(False, True)
    assert "page_fault_user" not in slow_spans.program(True, False)
    assert "@pf[" not in slow_spans.program(True, False)
    text = slow_spans.by_path(full, "/proc/9/root/lib/dtrace_nif.so")
    assert "usdt::" not in text
    assert "usdt:/proc/9/root/lib/dtrace_nif.so:erlang:span__begin\n/pid == $1/\n{" in text
    assert ("usdt:/proc/9/root/lib/dtrace_nif.so:erlang:span__vm_gc\n/pid == $1 && (@depth[str(arg0)])/\n{"
            in text)
    # Every kernel stack cut (bpftrace 0.27's abort on deeper ones).
    assert re.findall(r"kstack\b(?!\()", text) == []
    assert "kstack(%d)" % slow_spans.SAMPLE_FRAMES in text


def test_a_signal_stops_the_tracer_once_first() -> None:
    # A stand-in tracer that SIGINT ends; SIGTERM to the tool forwards it.
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)}
    proc = subprocess.Popen(["sleep", "60"])
    firsts: list[int] = []
    try:
        slow_spans.stop_tracer_on_signals(proc, lambda: firsts.append(1), alarm=True)
        os.kill(os.getpid(), signal.SIGTERM)
        assert proc.wait(timeout=10) == -signal.SIGINT
        os.kill(os.getpid(), signal.SIGALRM)
        assert firsts == [1]
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        if proc.poll() is None:
            proc.kill()


def test_the_tracers_own_lines() -> None:
    assert slow_spans.tracer_says("Attaching 12 probes...")
    assert slow_spans.tracer_says("Attached 12 probes")
    assert slow_spans.tracer_says("ERROR: failed to look up stack id: 0 stack length: 0 (pid -1): -2")
    assert not slow_spans.tracer_says("ERROR: Could not resolve symbol")
    assert not slow_spans.tracer_says("S\t1\tspan\tin\t-\t7")


def test_the_events_a_tracer_says_it_lost() -> None:
    assert slow_spans.lost_events("Lost 7 events") == 7
    assert slow_spans.lost_events("dtrace: 3 drops on CPU 1") == 3
    assert slow_spans.lost_events("dtrace: 1 drop on CPU 0") == 1
    assert slow_spans.lost_events("dtrace: 2 dynamic variable drops") == 2
    assert slow_spans.lost_events("dtrace: failed to compile script") is None
    assert slow_spans.lost_events("S\t1\tspan\tin\t-\t7") is None


def test_dtrace_drops_are_counted_as_lost(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    events = tmp_path / "events.txt"
    with open(FIXTURE, encoding="utf-8") as f:
        lines = f.read().splitlines()
    half = len(lines) // 2
    events.write_text("\n".join(lines[:half] + ["dtrace: 3 drops on CPU 1", "dtrace: 2 dynamic variable drops"]
                                + lines[half:]) + "\n")
    rc = slow_spans.main(["--events", str(events), "--threshold", "5", "--tracer", "dtrace"])
    out, _err = capsys.readouterr()
    assert rc == 0
    assert "; DTrace lost 5 events: some breakdowns are short" in out


def test_bpftrace_0_27_is_refused_the_kernel_part_unless_forced() -> None:
    assert slow_spans.os_part_refused((0, 27), False) is not None
    assert "--os" in (slow_spans.os_part_refused((0, 27), False) or "")
    assert slow_spans.os_part_refused((0, 27), True) is None
    assert slow_spans.os_part_refused((0, 23), False) is None
    assert slow_spans.os_part_refused((0, 17), False) is None


@pytest.mark.parametrize("forced", [False, True])
def test_bpftrace_0_27_runs_the_vms_view_unless_os(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch, forced: bool) -> None:
    """With bpftrace 0.27 the program has no kernel part and the user is
    told why, unless --os; the spans print either way."""
    seen = tmp_path / "args"
    fake = tmp_path / "bpftrace"
    fake.write_text("#!/bin/sh\n"
                    "[ \"$1\" = --version ] && { echo 'bpftrace v0.27.1'; exit 0; }\n"
                    "printf '%%s\\n' \"$@\" > '%s'\n"
                    "cat '%s'\n" % (seen, FIXTURE))
    fake.chmod(0o755)
    monkeypatch.setenv("BPFTRACE", str(fake))
    monkeypatch.setattr(host.Host, "has_event", lambda self, category, name="": True)
    rc = slow_spans.main(["-p", str(os.getpid()), "--threshold", "5", *(["--os"] if forced else []), *PLANTED])
    out, err = capsys.readouterr()
    assert rc == 0
    assert "req-2" in out
    program = seen.read_text()
    assert ("tracepoint:sched:sched_switch" in program) == forced
    assert ("aborts (std::bad_alloc) under the kernel part" in err) != forced
