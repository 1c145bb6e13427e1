"""why's rules (its docstring) on hand-made event streams: what each
breakdown says a span's time went to, as dtrace-slow-spans and the
recorder's report print it."""

from typing import Any, Optional

import pytest

from dtrace_tools import why
from dtrace_tools.why import Breakdown, Why

MS = 1_000_000
PID = "<0.90.0>"


def run(events: list[tuple[Any, ...]], node: str = "n") -> list[Breakdown]:
    """Feeds (ms, kind, *fields) in order; the breakdowns, as spans end."""
    w = Why()
    out = []
    for ms, kind, *fields in events:
        b = w.feed(node, int(ms * MS), kind, *fields)
        if b is not None:
            out.append(b)
    return out


def span(events: list[tuple[Any, ...]], end_ms: float = 100, tag: Optional[str] = "req-1",
         outcome: str = "ok") -> Breakdown:
    """One span of PID from 0 to end_ms around the events."""
    [b] = run([(0, "span_begin", PID, 1, 0, "request", tag)] + events
              + [(end_ms, "span_end", PID, 1, int(end_ms * MS), None, outcome)])
    return b


def text(b: Breakdown) -> str:
    return "\n".join(b.lines(lambda ns: "T"))


def test_a_sleep_is_scheduled_out_in_its_function() -> None:
    b = span([(10, "out", PID, "timer:sleep/1"), (70, "in", PID, "timer:sleep/1")])
    assert b.cause() == (60 * MS, "scheduled out in timer:sleep/1")
    assert b.on_cpu == 40 * MS
    assert b.scheduled_out == 60 * MS
    lines = b.lines(lambda ns: "12:00:00.000000")
    assert lines[0] == '12:00:00.000000 slow span: request 100.00 ms, tag "req-1", pid <0.90.0> (span 1)'
    assert lines[1] == "    cause: scheduled out in timer:sleep/1, 60.00 ms (60%)"
    assert "        timer:sleep/1                                60.00 ms" in lines


def test_a_call_names_the_server_it_waited_on_and_who_woke_it() -> None:
    b = span([(10, "send", PID, "<0.66.0>"), (11, "out", PID, "gen:do_call/4"),
              (50, "send", "<0.66.0>", PID), (51, "queued", PID), (52, "in", PID, "gen:do_call/4")], end_ms=60)
    b.names = {"<0.66.0>": "file_server_2"}
    assert b.cause() == (41 * MS, "scheduled out in gen:do_call/4, waiting on <0.66.0> (file_server_2), "
                                  "woken by <0.66.0> (file_server_2)")
    assert b.messages == 1
    assert b.sends == [(10 * MS, PID, "<0.66.0>"), (50 * MS, "<0.66.0>", PID)]


def test_a_collection_is_gc_and_so_is_waiting_for_a_dirty_scheduler() -> None:
    # Out to a dirty scheduler, the collection there, out again to come back:
    # all of it is the collection's.
    b = span([(10, "out", PID, "erlang:garbage_collect/0"), (12, "in", PID, "erlang:garbage_collect/0"),
              (12, "gc_start", PID), (40, "gc_end", PID),
              (40, "out", PID, "erlang:garbage_collect/0"), (45, "in", PID, "erlang:garbage_collect/0")], end_ms=50)
    assert b.gc == 35 * MS
    assert b.gcs == 1
    assert b.scheduled_out == 0
    assert b.cause()[1] == "GC"
    assert "    GC                     35.00 ms  (1 collections)" in text(b).splitlines()


def test_the_time_on_the_dirty_scheduler_around_the_collection_is_gc() -> None:
    # The dirty scheduler took 1 ms to start the collection and 3 ms after
    # its end (freeing the old heap, or its thread kept off the CPU): the
    # collection's, not on CPU (sid: 3.6 ms of a 27 ms collection read as
    # on CPU).
    b = span([(10, "out", PID, "erlang:garbage_collect/0"), (12, "in", PID, "erlang:garbage_collect/0"),
              (13, "gc_start", PID), (40, "gc_end", PID),
              (43, "out", PID, "erlang:garbage_collect/0"), (45, "in", PID, "erlang:garbage_collect/0")], end_ms=50)
    assert (b.gc, b.gcs, b.scheduled_out, b.on_cpu) == (35 * MS, 1, 0, 15 * MS)
    # The timeline's slices: the wait to go, the time there, the wait back.
    assert [iv[:3] for iv in b.intervals] == [(10 * MS, 12 * MS, "gc"), (12 * MS, 43 * MS, "gc"),
                                              (43 * MS, 45 * MS, "gc")]


def test_a_loop_running_around_a_minor_collection_stays_on_cpu() -> None:
    # Yields, a minor collection 0.1 ms long while it runs its own code
    # for 3 ms, then yields again in the same function: the running time
    # is not the collection's.
    b = span([(10, "out", PID, "m:loop/1"), (10.5, "in", PID, "m:loop/1"),
              (11, "gc_start", PID), (11.1, "gc_end", PID),
              (13.5, "out", PID, "m:loop/1"), (14, "in", PID, "m:loop/1")], end_ms=20)
    assert b.gcs == 1
    assert b.gc == pytest.approx(1.1 * MS)
    assert b.on_cpu == pytest.approx(18.9 * MS)


def test_a_collection_inside_a_scheduled_out_interval_makes_it_gc() -> None:
    b = span([(10, "out", PID, "m:f/1"), (20, "gc_start", PID), (30, "gc_end", PID), (50, "in", PID, "m:f/1")])
    assert (b.gc, b.scheduled_out, b.on_cpu) == (40 * MS, 0, 60 * MS)


def test_file_io_under_the_tag_replaces_scheduled_out_time() -> None:
    b = span([(10, "file_start", (1, 7), 4, "req-1"), (11, "out", PID, "prim_file:write/2"),
              (41, "in", PID, "prim_file:write/2"), (42, "file_end", (1, 7)),
              # Another request's write, at the same time: not this span's.
              (12, "file_start", (2, 8), 4, "req-2"), (30, "file_end", (2, 8))], end_ms=45)
    assert b.file_io == 32 * MS
    assert b.file_ops == {"WRITE": [1, 32 * MS]}
    assert b.scheduled_out == 0
    assert b.cause() == (32 * MS, "file I/O (WRITE x1)")
    assert "    file I/O (tag)         32.00 ms  (WRITE x1 32.00 ms)" in text(b).splitlines()


def test_an_untagged_span_counts_no_file_io() -> None:
    b = span([(10, "file_start", (1, 7), 9, None), (30, "file_end", (1, 7))], tag=None)
    assert (b.file_io, b.file_ops) == (0, {})
    assert 'tag (none)' in text(b)
    assert "    file I/O (tag)             none" in text(b).splitlines()


def test_an_unknown_efile_command_is_named_by_its_number() -> None:
    b = span([(10, "file_start", (1, 7), 99, "req-1"), (20, "file_end", (1, 7))])
    assert b.file_ops == {"CMD99": [1, 10 * MS]}


def test_events_of_other_processes_and_outside_the_span_are_left_out() -> None:
    [b] = run([(0, "out", PID, "before:f/0"), (1, "in", PID, "before:f/0"),
               (5, "span_begin", PID, 1, 0, "request", "t"),
               (10, "out", "<0.91.0>", "other:f/0"), (20, "in", "<0.91.0>", "other:f/0"),
               (25, "span_end", PID, 1, 20 * MS, None, "ok"),
               (30, "out", PID, "after:f/0")])
    assert (b.begin, b.end, b.scheduled_out, b.on_cpu) == (5 * MS, 25 * MS, 0, 20 * MS)


def test_still_out_at_the_end() -> None:
    b = span([(80, "out", PID, "m:f/1")])
    assert b.out_in == {"(still out at the end)": 20 * MS}


def test_the_slowest_calls_of_function_probes() -> None:
    b = span([(10, "call", PID, "m:slow/1"), (40, "return", PID, "m:slow/1"),
              (50, "call", PID, "m:quick/0"), (51, "return", PID, "m:quick/0")])
    assert b.calls == [(30 * MS, "m:slow/1"), (1 * MS, "m:quick/0")]
    assert "    slowest calls      m:slow/1 30.00 ms, m:quick/0 1.00 ms" in text(b)


def test_a_failed_span_says_how_it_raised() -> None:
    b = span([], outcome="throw")
    assert b.lines(lambda ns: "T")[0].endswith(" FAILED: throw")
    assert b.as_json()["outcome"] == "throw"


def test_a_span_whose_begin_was_missed_has_an_unknown_cause() -> None:
    [b] = run([(50, "out", PID, "m:f/1"),
               (100, "span_end", PID, 1, 80 * MS, (0, "request", "req-9"), "ok")])
    assert not b.complete
    assert (b.begin, b.kind, b.tag) == (20 * MS, "request", "req-9")
    assert b.lines(lambda ns: "T") == ['T slow span: request 80.00 ms, tag "req-9", pid <0.90.0> (span 1)',
                                       "    cause: unknown: the span began before the events do"]
    # Saved output of slow-spans.bt before outcomes: no info, no outcome.
    [old] = run([(100, "span_end", PID, 2, 10 * MS)])
    assert (old.kind, old.tag, old.outcome) == ("?", None, "ok")


def test_nested_spans_each_get_their_breakdown_and_the_log_is_kept_for_the_outer() -> None:
    bs = run([(0, "span_begin", PID, 1, 0, "request", "t"),
              (10, "span_begin", PID, 2, 1, "db_query", "t"),
              (12, "out", PID, "timer:sleep/1"), (30, "in", PID, "timer:sleep/1"),
              (31, "span_end", PID, 2, 21 * MS, None, "ok"),
              (40, "out", PID, "gen:do_call/4"), (50, "in", PID, "gen:do_call/4"),
              (60, "span_end", PID, 1, 60 * MS, None, "ok")])
    assert [(b.kind, b.parent_id, b.out_in) for b in bs] == [
        ("db_query", 1, {"timer:sleep/1": 18 * MS}),
        ("request", 0, {"timer:sleep/1": 18 * MS, "gen:do_call/4": 10 * MS})]


def test_a_span_past_max_events_is_truncated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(why, "MAX_EVENTS", 4)
    b = span([(k, "queued", PID) for k in range(1, 10)])
    assert b.truncated
    assert b.messages == 4
    assert text(b).endswith("    (more than 4 events in the span: the breakdown covers the first ones)")


def test_more_functions_than_shown() -> None:
    events: list[tuple[Any, ...]] = []
    for k in range(7):
        events += [(10 * k + 1, "out", PID, "m:f%d/0" % k), (10 * k + 2 + k, "in", PID, "m:f%d/0" % k)]
    lines = span(events).lines(lambda ns: "T", top=5)
    assert "        ... 2 more functions" in lines
    assert [line.split()[0] for line in lines if line.startswith("        m:")] == [
        "m:f6/0", "m:f5/0", "m:f4/0", "m:f3/0", "m:f2/0"]


def test_as_json() -> None:
    b = span([(10, "out", PID, "timer:sleep/1"), (70, "in", PID, "timer:sleep/1")])
    j = b.as_json()
    assert j["cause"] == "scheduled out in timer:sleep/1"
    assert j["scheduled_out_in"] == [{"mfa": "timer:sleep/1", "ns": 60 * MS, "woken_by": None, "waiting_on": None}]
    assert (j["duration_ns"], j["on_cpu_ns"], j["complete"]) == (100 * MS, 40 * MS, True)
