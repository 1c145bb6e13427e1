"""timeline's model and files (its docstring): spans as slices nested on
their process's track, the causes inside them, messages as flows, the
bounds, and the folded stacks, as a viewer shows them."""

import json
from pathlib import Path
from typing import Any, Optional

import pytest

from dtrace_tools import timeline
from dtrace_tools.timeline import Timeline, segments
from dtrace_tools.why import Breakdown, Why

MS = 1_000_000


def breakdown(events: list[tuple[Any, ...]], node: str = "n1") -> list[Breakdown]:
    """why's breakdowns of (ms, kind, *fields) events."""
    w = Why()
    w.names["<0.66.0>"] = "db"
    out = []
    for ms, kind, *fields in events:
        b = w.feed(node, int(ms * MS), kind, *fields)
        if b is not None:
            out.append(b)
    return out


def request(pid: str, begin: float, end: float, events: list[tuple[Any, ...]], span_id: int = 1,
            tag: Optional[str] = "t", outcome: str = "ok") -> list[tuple[Any, ...]]:
    return ([(begin, "span_begin", pid, span_id, 0, "request", tag)] + events
            + [(end, "span_end", pid, span_id, int((end - begin) * MS), None, outcome)])


def slices(tl: Timeline, pid: str, node: str = "n1") -> list[tuple[float, float, int, str]]:
    tracks, _ = tl.model()
    return [(s / MS, e / MS, d, name) for s, e, d, name, _a, _sp in tracks[(node, pid)]]


def test_a_span_and_where_its_time_went() -> None:
    [b] = breakdown(request("<0.90.0>", 0, 100, [
        (10, "out", "<0.90.0>", "timer:sleep/1"), (40, "in", "<0.90.0>", "timer:sleep/1"),
        (50, "gc_start", "<0.90.0>"), (60, "gc_end", "<0.90.0>"),
        (70, "file_start", (1, 1), 4, "t"), (71, "out", "<0.90.0>", "prim_file:write/2"),
        (90, "in", "<0.90.0>", "prim_file:write/2"), (90, "file_end", (1, 1))]))
    tl = Timeline()
    tl.add(b)
    assert slices(tl, "<0.90.0>") == [
        (0, 100, 0, "request"), (0, 10, 1, "on CPU"), (10, 40, 1, "scheduled out in timer:sleep/1"),
        (40, 50, 1, "on CPU"), (50, 60, 1, "GC"), (60, 70, 1, "on CPU"), (70, 90, 1, "file I/O WRITE"),
        (90, 100, 1, "on CPU")]
    tracks, _ = tl.model()
    span_args = tracks[("n1", "<0.90.0>")][0][4]
    assert span_args == {"tag": "t", "outcome": "ok", "span_id": 1, "parent_id": 0, "duration_ms": 100.0,
                         "cause": "on CPU"}


def test_gc_wins_over_file_io_which_wins_over_scheduled_out() -> None:
    [b] = breakdown(request("<0.90.0>", 0, 30, [
        (5, "file_start", (1, 1), 4, "t"), (6, "out", "<0.90.0>", "m:f/0"), (15, "in", "<0.90.0>", "m:f/0"),
        (16, "gc_start", "<0.90.0>"), (18, "gc_end", "<0.90.0>"), (20, "file_end", (1, 1)),
        # Out in another function: not a dirty scheduler's GC (why's rules).
        (21, "out", "<0.90.0>", "m:g/0"), (25, "in", "<0.90.0>", "m:g/0")]))
    names = [(s / MS, e / MS, cat) for s, e, cat, _l, _a in segments(b)]
    assert names == [(0, 5, "cpu"), (5, 16, "file"), (16, 18, "gc"), (18, 20, "file"), (20, 21, "cpu"),
                     (21, 25, "out"), (25, 30, "cpu")]


def test_nested_spans_nest_and_a_child_is_clipped_to_its_parent() -> None:
    events = [(0, "span_begin", "<0.90.0>", 1, 0, "request", "t"),
              (10, "span_begin", "<0.90.0>", 2, 1, "db_query", "t"),
              (12, "out", "<0.90.0>", "timer:sleep/1"), (30, "in", "<0.90.0>", "timer:sleep/1"),
              # The child ends after its parent (its end measured late).
              (50, "span_end", "<0.90.0>", 1, 50 * MS, None, "ok"),
              (52, "span_end", "<0.90.0>", 2, 42 * MS, None, "error")]
    tl = Timeline()
    for b in breakdown(events):
        tl.add(b)
    got = slices(tl, "<0.90.0>")
    assert (0, 50, 0, "request") in got
    assert (10, 50, 1, "db_query [error]") in got
    assert (12, 30, 2, "scheduled out in timer:sleep/1") in got
    # The parent's own slices are outside its child.
    assert [s for s in got if s[2] == 1 and s[3] != "db_query [error]"] == [(0, 10, 1, "on CPU")]


def test_messages_between_two_tracks_are_flows(tmp_path: Path) -> None:
    tl = Timeline()
    for b in breakdown(request("<0.90.0>", 0, 20, [(5, "send", "<0.90.0>", "<0.66.0>"),
                                                   (6, "send", "<0.90.0>", "<0.77.0>")])
                       + request("<0.66.0>", 1, 21, [], span_id=2)):
        tl.add(b)
    _, flows = tl.model()
    # To <0.77.0>, which has no track: no flow.
    assert flows == [(5 * MS, ("n1", "<0.90.0>"), ("n1", "<0.66.0>"))]
    path = tmp_path / "t.json"
    assert tl.write(str(path)) == "Trace (Chrome JSON, 2 processes, 9 events): %s" % path
    doc = json.loads(path.read_text())
    ev = doc["traceEvents"]
    assert [e["args"]["name"] for e in ev if e["ph"] == "M"] == ["n1", "<0.90.0>", "<0.66.0> (db)"]
    assert [(e["ph"], e["ts"]) for e in ev if e["cat" if "cat" in e else "ph"] == "message"] == [
        ("s", 5000.0), ("f", 5000.0)]
    assert doc["otherData"] == {"source": "dtrace", "origin_ns": 0, "spans_left_out": 0}


def test_a_failed_span_is_coloured_and_the_names_are_per_node(tmp_path: Path) -> None:
    a = breakdown(request("<0.90.0>", 0, 10, [], outcome="exit"), node="a@h")
    b = breakdown(request("<0.90.0>", 0, 10, []), node="b@h")
    tl = Timeline(names={("a@h", "<0.90.0>"): "worker"})
    for x in a + b:
        tl.add(x)
    path = tmp_path / "t.json"
    tl.write_json(str(path))
    ev = json.loads(path.read_text())["traceEvents"]
    assert [(e["name"], e["args"]["name"]) for e in ev if e["ph"] == "M"] == [
        ("process_name", "a@h"), ("process_name", "b@h"), ("thread_name", "<0.90.0> (worker)"),
        ("thread_name", "<0.90.0>")]
    assert [e.get("cname") for e in ev if e.get("cat") == "span"] == ["terrible", None]


def test_the_slowest_spans_are_kept(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(timeline, "TRIM_SLACK", 2)
    tl = Timeline(max_spans=3)
    for k in range(10):
        for b in breakdown(request("<0.%d.0>" % k, 0, 10 + k, [], span_id=k)):
            tl.add(b)
    tracks, _ = tl.model()
    assert sorted(str(pid) for _n, pid in tracks) == ["<0.7.0>", "<0.8.0>", "<0.9.0>"]
    path = tmp_path / "t.json"
    tl.write_json(str(path))
    assert json.loads(path.read_text())["otherData"]["spans_left_out"] == 7
    # The folded stacks count every span added.
    assert tl.folded() == {"request;on CPU": sum(10 + k for k in range(10)) * MS}


def test_a_span_past_max_slices_keeps_its_longest(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timeline, "MAX_SLICES", 3)
    events: list[tuple[Any, ...]] = []
    for k in range(5):
        events += [(10 * k + 1, "out", "<0.90.0>", "m:f/0"), (10 * k + 2 + k, "in", "<0.90.0>", "m:f/0")]
    tl = Timeline()
    for b in breakdown(request("<0.90.0>", 0, 50, events)):
        tl.add(b)
    tracks, _ = tl.model()
    span, *inner = tracks[("n1", "<0.90.0>")]
    assert span[4]["slices_left_out"] == len(segments(tl.spans[0])) - 3
    assert len(inner) == 3


def test_folded_stacks_leave_slow_children_to_their_own_kind(tmp_path: Path) -> None:
    events = [(0, "span_begin", "<0.90.0>", 1, 0, "request", "t"),
              (10, "span_begin", "<0.90.0>", 2, 1, "db_query", "t"),
              (12, "out", "<0.90.0>", "timer:sleep/1"), (30, "in", "<0.90.0>", "timer:sleep/1"),
              (30, "span_end", "<0.90.0>", 2, 20 * MS, None, "ok"),
              (40, "call", "<0.90.0>", "m:g/0"), (45, "return", "<0.90.0>", "m:g/0"),
              (50, "span_end", "<0.90.0>", 1, 50 * MS, None, "ok")]
    tl = Timeline()
    for b in breakdown(events):
        tl.add(b)
    path = tmp_path / "f.folded"
    assert tl.write_folded(str(path)) == "Flame graph (folded stacks, 4 stacks, microseconds): %s" % path
    assert path.read_text().splitlines() == [
        "db_query;on CPU 2000", "db_query;scheduled out;timer:sleep/1 18000",
        "request;on CPU 25000", "request;on CPU;m:g/0 5000"]


def test_a_span_begun_before_the_events_is_unknown() -> None:
    [b] = breakdown([(30, "span_end", "<0.90.0>", 1, 20 * MS, (0, "request", "t"), "ok")])
    tl = Timeline()
    tl.add(b)
    assert slices(tl, "<0.90.0>") == [(10, 30, 0, "request"), (10, 30, 1, "unknown (began before the events)")]
    assert tl.folded() == {"request;unknown": 20 * MS}
