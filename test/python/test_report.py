"""The recorder's report on hand-made snapshots: report_model's items
(spans across nodes, file operations, probes, the recorder's markers, one
event in two overlapping snapshots), report_triggers' LTTng filters, and
the text and SVG an operator reads (recorder_report, report_svg)."""

import argparse
import json
import re
from pathlib import Path
from typing import Any

import pytest

from dtrace_tools import recorder_report
from dtrace_tools.report_model import Item, build, collapse, describe, failed
from dtrace_tools.report_read import Snapshot
from dtrace_tools.report_svg import svg
from dtrace_tools.report_triggers import Filter, Literal, Unsupported, trigger_events

MS = 1_000_000
P = "org_erlang_dtrace:"


Event = tuple[float, str, dict[str, Any]]


def snapshot(tmp_path: Path, name: str, index: int, events: list[Event],
             meta: dict[str, Any]) -> Snapshot:
    """A snapshot as report_read leaves it: events (ms, name, fields) in order."""
    d = tmp_path / name
    d.mkdir()
    if meta:
        (d / "dtrace-recorder.json").write_text(json.dumps(meta))
    s = Snapshot(str(d), index)
    s.events = [(int(ms * MS), seq, P + ev if ":" not in ev else ev, f) for seq, (ms, ev, f) in enumerate(events)]
    s.hostname, s.vpid = "host", 4242
    return s


def cluster(tmp_path: Path) -> list[Snapshot]:
    a_meta = {"node": "a@h", "source": "trigger", "reason": "slow", "time_ms": 0, "os_pid": "4242",
              "names": {"<0.90.0>": "worker"},
              "triggers": [{"event": P + "user_trace_n", "filter": 'label == 900 && i2 > 250000 && s1 == "req*"',
                            "armed_at_ns": 2 * MS}]}
    a: list[Event] = [
        (0, "span_begin", {"proc": "<0.90.0>", "span_id": 1, "parent_id": 0, "kind": "request", "user_tag": "req-1"}),
        (1, "user_trace_n", {"proc": "<0.90.0>", "label": 900, "i2": 300000, "s1": "req-0", "user_tag": "req-1"}),
        (2, "span_begin", {"proc": "<0.90.0>", "span_id": 2, "parent_id": 1, "kind": "rpc", "user_tag": "req-1"}),
        (10, "span_vm_scheduled", {"proc": "<0.90.0>", "type": "out", "mfa": "timer:sleep/1"}),
        (40, "span_vm_scheduled", {"proc": "<0.90.0>", "type": "in", "mfa": "timer:sleep/1"}),
        (45, "efile_drv_entry", {"thread_id": 1, "tag": 7, "command": 4, "user_tag": "req-1", "port": "#Port<0.5>",
                                 "s1": "/var/log/x", "i1": 3, "i3": 100}),
        (50, "efile_drv_return", {"thread_id": 1, "tag": 7, "success": 1, "errnum": 0, "user_tag": "req-1"}),
        (51, "user_trace_i4s4", {"proc": "<0.90.0>", "i1": 1, "user_tag": "req-1"}),
        (52, "user_trace_i4s4", {"proc": "<0.90.0>", "i1": 2, "user_tag": "req-1"}),
        (60, "span_end", {"proc": "<0.90.0>", "span_id": 1, "duration_ns": 60 * MS, "parent_id": 0,
                          "kind": "request", "user_tag": "req-1", "outcome": "ok"}),
        (61, "user_trace_n", {"proc": "<0.90.0>", "label": 900, "i2": 300000, "s1": "req-1", "user_tag": "req-1"}),
        (80, "span_slow", {"proc": "<0.91.0>", "span_id": 0, "parent_id": 0, "kind": "request",
                           "duration_ns": 20 * MS, "user_tag": "req-2", "outcome": "error"})]
    # The same node's next snapshot overlaps the first: its first event is in both.
    a2: list[Event] = [a[-1], (90, "user_trace_s1", {"proc": "<0.92.0>", "message": "hello", "user_tag": None})]
    # Another node, without a sidecar: the rpc span ended there.
    b: list[Event] = [(70, "span_end", {"proc": "<0.70.0>", "span_id": 2, "duration_ns": 68 * MS, "parent_id": 1,
                                        "kind": "rpc", "user_tag": "req-1", "outcome": "exit"})]
    return [snapshot(tmp_path, "a", 0, a, a_meta), snapshot(tmp_path, "a2", 1, a2, {"node": "a@h"}),
            snapshot(tmp_path, "b", 2, b, {})]


def by(items: list[Item], what: str) -> list[Item]:
    return [i for i in items if i.what == what]


def test_items_merge_the_nodes_events(tmp_path: Path) -> None:
    items, counts = build(cluster(tmp_path))
    assert counts == {"a@h": 13, "host/4242": 1}
    spans = by(items, "span")
    assert [(i.node, i.kind, i.proc, i.duration, failed(i)) for i in spans] == [
        ("a@h", "request", "<0.90.0> (worker)", 60 * MS, None),
        ("a@h", "rpc", "<0.90.0> (worker)", 68 * MS, "exit"),
        ("a@h", "request", "<0.91.0>", 20 * MS, "error")]
    assert [describe(i) for i in spans] == ["span request (id 1)", "span   rpc (id 2) FAILED: exit",
                                            "span request (span_slow) FAILED: error"]
    [f] = by(items, "file")
    assert describe(f) == "file WRITE /var/log/x fd=3 100 B ok"
    assert (f.tag, f.duration) == ("req-1", 5 * MS)
    probes = by(items, "probe")
    assert [p.text for p in probes] == ['probe n900 i2=300000 s1="req-0"', "probe p i1=1", "probe p i1=2",
                                        'probe n900 i2=300000 s1="req-1"', 'probe s1 "hello"']
    assert [(first.text, n) for first, n, _last in collapse(probes)] == [
        ('probe n900 i2=300000 s1="req-0"', 1), ("probe p i1=1", 2), ('probe n900 i2=300000 s1="req-1"', 1),
        ('probe s1 "hello"', 1)]
    # The breakdown, by why's rules, goes with its span.
    why = spans[0].why
    assert why is not None and why.cause()[1] == "scheduled out in timer:sleep/1"


def test_a_span_whose_begin_was_overwritten(tmp_path: Path) -> None:
    s = snapshot(tmp_path, "s", 0, [(50, "span_end", {"proc": "<0.1.0>", "span_id": 9, "duration_ns": 30 * MS,
                                                      "kind": "request", "user_tag": "t"})], {"node": "n"})
    [i] = build([s])[0]
    assert (i.start, i.end, describe(i)) == (20 * MS, 50 * MS, "span request (id 9) [begin overwritten]")


def test_the_recorders_marker(tmp_path: Path) -> None:
    s = snapshot(tmp_path, "m", 0, [(5, "user_trace_n", {"proc": "<0.1.0>", "label": 949, "s1": "dtrace_recorder",
                                                         "i1": 17, "s2": "slow request", "s3": "a@h"})],
                 {"node": "n", "source": "asked", "mark_id": 17})
    [i] = build([s])[0]
    assert (i.what, i.text) == ("mark", 'recorder: "slow request" (asked on a@h)')
    [(_s, ts, _f, text)] = trigger_events([s])
    assert (ts, text) == (5 * MS, 'recorder marker: "slow request"')


def test_the_trigger_is_the_first_matching_event_after_it_was_armed(tmp_path: Path) -> None:
    trig = trigger_events(cluster(tmp_path))
    assert [(s.node, ts, text) for s, ts, _f, text in trig] == [
        ("a@h", 61 * MS, 'user_trace_n when label == 900 && i2 > 250000 && s1 == "req*"'),
        ("a@h", None, None), ("host/4242", None, None)]


@pytest.mark.parametrize("text, fields, vpid, want", [
    ("i2 > 250000", {"i2": 250001}, None, True),
    ("i2 > 250000", {"i2": 250000}, None, False),
    ("(i1 + 1) * 2 == 8 || i2 != 0", {"i1": 3, "i2": 0}, None, True),
    ("!(i1 & 4) && i1 >> 1 == 1 && -i1 < 0 && ~0 == -1", {"i1": 3}, None, True),
    ("i1 / 0 == 0 && i1 % 0 == 0 && 0x10 == 16 && 1.5 > 1", {"i1": 3}, None, True),
    ('s1 == "req-*"', {"s1": "req-42"}, None, True),
    ('s1 == "req-\\\\*"', {"s1": "req-42"}, None, False),
    ('s1 != "x"', {"s1": None}, None, True),
    ("$ctx.vpid == 4242", {}, 4242, True),
    ("", {}, None, True),
])
def test_lttng_filters(text: str, fields: dict[str, Any], vpid: Any, want: bool) -> None:
    assert Filter(text, vpid).matches(fields) is want


@pytest.mark.parametrize("text, fields", [("nosuch == 1", {}), ("$ctx.procname == 1", {}), ("(i1", {"i1": 1}),
                                          ("i1 i1", {"i1": 1}), ('s1 * "a"', {"s1": "b"})])
def test_what_a_filter_cannot_evaluate(text: str, fields: dict[str, Any]) -> None:
    with pytest.raises(Unsupported):
        Filter(text, None).matches(fields)
    with pytest.raises(Unsupported):
        Filter("i1 @ 2", None)


def test_a_literal_star_matches_any_run() -> None:
    assert Literal("a*c").regex.fullmatch("abbbc")
    assert not Literal("a\\*c").regex.fullmatch("abc")


def args(**kw: Any) -> argparse.Namespace:
    base: dict[str, Any] = {"tag": [], "tags": "10", "max_lines": 200, "slow": 10.0, "top": 10}
    base.update(kw)
    return argparse.Namespace(**base)


def test_the_report_text(tmp_path: Path) -> None:
    snaps = cluster(tmp_path)
    items, counts = build(snaps)
    out, shown, ref, trig = recorder_report.report(snaps, items, counts, args())
    text = "\n".join(out)
    assert out[0].startswith("dtrace flight recorder: 3 snapshot(s), 2 node(s), 15 events, ")
    assert '  a@h                              12 events  trigger, taken 00:00:00 UTC: "slow"' in out
    assert "  host/4242                         1 events  (no sidecar) " in out
    assert ref == 61 * MS
    assert shown == ["req-1", "req-2"]
    assert "Tag \"req-1\": 2 spans, 1 file operations, 4 other events, on a@h" in out
    # Two probes in a row: one line.
    assert any(re.search(r"probe p i1=1 +x2, the last at -9\.000 ms$", line) for line in out)
    why = text[text.index("Why the slow spans were slow"):text.index("Slowest operations")]
    assert "cause: scheduled out in timer:sleep/1, 30.00 ms" in why
    # Without kernel events: the VM's view, and how to get more.
    assert why.splitlines()[1].startswith("  (no kernel events in the snapshots: \"on CPU\" is the VM's view")
    assert "  a@h" in why.splitlines()[2]
    assert "Failed spans (the span raised: error, exit or throw; slow or not)\n  1 x rpc (exit)\n" \
           "  1 x request (error)" in text
    _, shown, _, _ = recorder_report.report(snaps, items, counts, args(tags="all"))
    assert shown == ["req-1", "req-2", None]


def test_the_report_without_span_vm_events_says_how_to_get_them(tmp_path: Path) -> None:
    s = snapshot(tmp_path, "s", 0, [(50, "span_slow", {"proc": "<0.1.0>", "span_id": 0, "duration_ns": 30 * MS,
                                                       "kind": "request", "user_tag": "t", "outcome": "ok"})],
                 {"node": "n"})
    items, counts = build([s])
    out, _, _, _ = recorder_report.report([s], items, counts, args())
    i = out.index("Why the slow spans were slow (spans of 10 ms or more; rules: docs/operators.md, "
                  "\"Why was it slow\")")
    assert "events => detail" in out[i + 1]
    assert out[i + 2] == '  n <0.1.0> request  30.000 ms, tag "t"  span_slow'


def test_the_svg(tmp_path: Path) -> None:
    snaps = cluster(tmp_path)
    items, counts = build(snaps)
    _, shown, ref, trig = recorder_report.report(snaps, items, counts, args())
    path = tmp_path / "r.svg"
    svg(str(path), items, shown, ref, trig, recorder_report.trigger_tag_list(trig))
    text = path.read_text()
    assert text.startswith('<svg xmlns="http://www.w3.org/2000/svg"')
    assert "trigger (a@h)" in text
    assert "<title>span request (id 1) | tag req-1 | a@h &lt;0.90.0&gt; (worker) | at -61.000 ms | 60.000 ms" \
           "</title>" in text
    assert text.rstrip().endswith("</svg>")


def test_kernel_events_split_on_cpu(tmp_path: Path) -> None:
    """A snapshot with LTTng's kernel events (report_kernel): a span's
    thread preempted, then in a write system call; its user-space events
    carry the thread (vtid)."""
    span = {"proc": "<0.90.0>", "span_id": 1, "parent_id": 0, "kind": "request", "user_tag": "t", "_vtid": 77}
    s = snapshot(tmp_path, "k", 0, [
        (0, "span_begin", span),
        (10, "sched_switch", {"prev_tid": 77, "prev_state": 0, "next_tid": 4242, "next_comm": "yes",
                              "_tid": 77}),
        (60, "sched_switch", {"prev_tid": 4242, "prev_state": 0, "next_tid": 77, "next_comm": "1_scheduler",
                              "_tid": 4242}),
        (70, "syscall_entry_write", {"fd": 1, "_tid": 77}),
        (80, "syscall_exit_write", {"ret": 1, "_tid": 77}),
        (100, "span_end", dict(span, duration_ns=100 * MS, outcome="ok"))], {"node": "k@h"})
    # The kernel's events have no provider.
    s.events = [(ts, seq, name[len(P):] if name[len(P):].startswith(("sched_", "syscall_")) else name, f)
                for ts, seq, name, f in s.events]
    items, counts = build([s])
    [b] = [i.why for i in items if i.what == "span" and i.why is not None]
    assert b.cause() == (50 * MS, "preempted by yes (tid 4242)")
    assert {k: v // MS for k, v in b.os.components.items()} == {
        ("user", None): 40, ("preempted", "yes (tid 4242)"): 50, ("kernel", "write"): 10}
    out, _, _, _ = recorder_report.report([s], items, counts, args())
    assert not any("no kernel events" in line for line in out)
