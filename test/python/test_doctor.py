"""dtrace-doctor's checks on what they read (/proc, readelf), as the lines
an operator reads: each `FAIL' with its fix."""

import os

import pytest

from dtrace_tools import doctor

READELF = """
Displaying notes found in: .note.stapsdt
  Owner                Data size 	Description
  stapsdt              0x00000046	NT_STAPSDT (SystemTap probe descriptors)
    Provider: erlang
    Name: user_trace__i4s4
    Location: 0x0000000000012340, Base: 0x0000000000000000, Semaphore: 0x0000000000056780
    Arguments: 8@%rdi 8@%rsi
  stapsdt              0x00000040	NT_STAPSDT (SystemTap probe descriptors)
    Provider: erlang
    Name: span__begin
    Location: 0x0000000000012350, Base: 0x0000000000000000, Semaphore: 0x0000000000056782
"""

MAPS = """55d0c0000000-55d0c0001000 r--p 00000000 08:01 100 /usr/lib/erlang/erts-13.1.5/bin/beam.smp
7f0000000000-7f0000010000 r--p 00000000 08:01 4242 /opt/app/lib/dtrace-0.1.0/priv/dtrace_nif.so
7f0000010000-7f0000090000 r-xp 00010000 08:01 4242 /opt/app/lib/dtrace-0.1.0/priv/dtrace_nif.so
7f00000a0000-7f00000b0000 rw-p 00090000 08:01 77 /tmp/old/dtrace_nif.so (deleted)
"""


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "out_lines", [])
    monkeypatch.setattr(doctor, "failed", False)


def test_the_notes_readelf_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "note_text", lambda pid, maps: READELF)
    assert doctor.notes(1, []) == [("erlang", "user_trace__i4s4", 0x12340, 0x56780),
                                   ("erlang", "span__begin", 0x12350, 0x56782)]


def test_the_library_as_the_process_maps_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "read", lambda path, default=None: MAPS)
    maps = doctor.mapped_library(1)
    assert maps is not None
    assert [(m[2], m[3], m[4], m[5]) for m in maps] == [
        (0, 4242, "/opt/app/lib/dtrace-0.1.0/priv/dtrace_nif.so", False),
        (0x10000, 4242, "/opt/app/lib/dtrace-0.1.0/priv/dtrace_nif.so", False),
        (0x90000, 77, "/tmp/old/dtrace_nif.so", True)]
    assert doctor.load_base(maps) == 0x7f0000000000


def test_a_process_that_is_no_beam(capsys: pytest.CaptureFixture[str]) -> None:
    assert not doctor.check_process(os.getpid())
    out = capsys.readouterr().out
    assert out.startswith("FAIL process     process %d is " % os.getpid())
    assert "not a BEAM (beam.smp)\n                 fix: ps -ww -o pid,args -C beam.smp lists the nodes\n" in out
    assert doctor.failed


def test_a_node_without_the_library(capsys: pytest.CaptureFixture[str]) -> None:
    assert doctor.check_library(os.getpid()) is None
    out = capsys.readouterr().out
    assert out.startswith("FAIL library     the node has not loaded dtrace_nif.so")
    assert "fix: start the dtrace application" in out


def test_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert doctor.main([]) == 2
    assert doctor.main(["not-a-pid"]) == 2
    assert capsys.readouterr().err == "usage: dtrace-doctor PID\n" * 2
