"""gdb's side of dtrace_test_tracer:gdb_events/3, sourced (gdb -x) before
a test/tracers/*.gdb script that names its probes with Probe and ends with
run().

The protocol: "READY" once the breakpoints are in; one "EVENT ..." line per
hit of a Probe; erlang:user_trace__n1 is the readiness probe the traced
node polls until it returns true (its semaphore raised); at
erlang:user_trace__n950, "DONE", then gdb detaches.

Events print from Python breakpoints whose stop() answers "do not stop",
and run() resumes after any other stop. With `commands ... continue`, gdb
18 (Debian sid) at times reported a stop without running the hit
breakpoint's commands (scheduler threads hitting probes at once): the
script then ended, and -batch detached mid-workload. Strings are read with
Value.string(), not by passing literals to user-defined commands, which
gdb copies into the inferior with an inferior call (malloc) that fails on
some kernels.
"""
from typing import Callable, Optional

import gdb


def arg(n: int) -> int:
    """The hit probe's argument n, as an integer."""
    return int(gdb.parse_and_eval("$_probe_arg" + str(n)))


def argc() -> int:
    """The hit probe's argument count."""
    return int(gdb.parse_and_eval("$_probe_argc"))


def text(n: int) -> str:
    """The hit probe's argument n as a C string, NULL when a null pointer."""
    if arg(n) == 0:
        return "NULL"
    return str(gdb.parse_and_eval("(char *) $_probe_arg" + str(n)).string(errors="backslashreplace"))


class Probe(gdb.Breakpoint):  # type: ignore[misc]
    """A breakpoint on SDT probe `provider:name` that prints line() at
    each hit (nothing when line is None) and lets the thread go on."""

    def __init__(self, probe: str, line: Optional[Callable[[], str]]) -> None:
        super().__init__("-probe-stap " + probe)
        self.silent = True
        self.line = line

    def stop(self) -> bool:
        if self.line is not None:
            gdb.write(self.line() + "\n")
            gdb.flush()
        return False


class Done(gdb.Breakpoint):  # type: ignore[misc]
    """erlang:user_trace__n950: the one stop that ends run()."""

    hit = False

    def __init__(self) -> None:
        super().__init__("-probe-stap erlang:user_trace__n950")
        self.silent = True

    def stop(self) -> bool:
        Done.hit = True
        return True


def run() -> None:
    """The readiness and end probes, "READY", the events until
    user_trace__n950 ("DONE", then detach) or an error (the process
    gone: no DONE, which the harness reports)."""
    Probe("erlang:user_trace__n1", None)
    Done()
    gdb.write("READY\n")
    gdb.flush()
    while not Done.hit:
        try:
            gdb.execute("continue")
        except gdb.error as e:
            gdb.write("gdb: %s\n" % e)
            return
    gdb.write("DONE\n")
    gdb.flush()
    gdb.execute("detach")
