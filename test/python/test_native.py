"""native (its docstring): the names of the code a thread blocks in, from
its stack's return addresses and the objects' ELF symbols."""

import os
import sys

from dtrace_tools import native


def test_demangle() -> None:
    assert native.demangle("_ZN10dtrace_nif10test_hooks10test_block17h0123456789abcdefE") == \
        "dtrace_nif::test_hooks::test_block"
    assert native.demangle("_ZN100_$LT$object..write..util..CountingBuffer$LT$W$GT$$u20$as$u20$object..write.."
                           "util..WritableBuffer$GT$11write_bytes17h42bd5e9f771bdd57E") == \
        "<object::write::util::CountingBuffer<W> as object::write::util::WritableBuffer>::write_bytes"
    assert native.demangle("_Z17beam_jit_call_nifP7process") == "beam_jit_call_nif"
    assert native.demangle("enif_make_atom") == "enif_make_atom"


def test_the_nif_frame_is_the_innermost_outside_libc_and_runtimes() -> None:
    frames: list[native.Frame] = [
        (0, "#230", None),
        (1, "/usr/lib/x86_64-linux-gnu/libc.so.6", "clock_nanosleep"),
        (2, "/opt/app/priv/my_nif.so", "_RNvNtNtCsjrHSEGnQ3l9_3std6thread9functions5sleep"),
        (3, "/opt/app/priv/my_nif.so", "my_nif::sleepy"),
        (4, "/usr/lib/erlang/erts-13.1.5/bin/beam.smp", "beam_jit_call_nif")]
    assert native.nif_frame(frames) == "my_nif::sleepy (my_nif.so)"
    assert native.nif_frame(frames[:2] + frames[4:]) == "the VM's beam_jit_call_nif"
    # A stale beam.smp word inner to the NIF's frames: the NIF is named.
    stale: native.Frame = (1, "/usr/lib/erlang/erts-15.2.7/bin/beam.smp", None)
    assert native.nif_frame(frames[:2] + [stale] + frames[2:]) == "my_nif::sleepy (my_nif.so)"
    assert native.same_call(frames, "clock_nanosleep")
    assert native.same_call(frames, "read") is native.ARM


def test_symbols_of_a_real_object() -> None:
    """This Python's own libc: the address of a function it exports is named."""
    maps = native._maps("/proc/self/maps")
    libc = [m for m in maps if "libc.so" in os.path.basename(m[3])]
    if not libc:
        return
    import ctypes
    addr = ctypes.cast(ctypes.CDLL(libc[0][3]).getpid, ctypes.c_void_p).value or 0
    r = native.Reader()
    _a, path, sym = r._frame(addr, maps)
    assert "libc.so" in path
    assert sym is not None and "getpid" in sym, sym
    assert sys.platform == "linux"


def test_a_sleeping_threads_frames() -> None:
    """A thread of this process asleep in the kernel: its frames go from
    the C library's sleep up through Python's own code."""
    import threading
    import time
    t = threading.Thread(target=time.sleep, args=(3,), daemon=True)
    t.start()
    time.sleep(0.2)
    assert t.native_id is not None
    frames = native.Reader().frames(os.getpid(), t.native_id)
    assert frames is not None
    objs = [os.path.basename(p) for _a, p, _s in frames]
    assert any(o.startswith("libc") for o in objs), objs
    code = native.nif_frame(frames)
    assert code is not None and "python" in code, frames
