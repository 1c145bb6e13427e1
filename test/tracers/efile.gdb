# Prints every efile_drv__* event with all its arguments (NULL strings as
# NULL), one "EVENT" line each. user_trace__n1 is a readiness probe the
# traced node polls until it returns true; user_trace__n950 makes gdb detach.
#
# The events print from Python breakpoints whose stop() answers "do not
# stop", and the script's own loop resumes after any other stop: gdb 18
# (Debian sid) at times reported a stop without running the hit
# breakpoint's commands while dirty I/O schedulers hit the probes at once,
# and a script whose breakpoint commands say `continue` then ends, and
# -batch detaches, mid-workload.
set pagination off
set confirm off
set print thread-events off
python
import gdb


def arg(n):
    return int(gdb.parse_and_eval("$_probe_arg%d" % n))


def text(n):
    if arg(n) == 0:
        return "NULL"
    value = gdb.parse_and_eval("(char *) $_probe_arg%d" % n)
    return value.string(errors="backslashreplace")


def entry():
    return ("EVENT entry op=%d,%d utag=%s cmd=%d s1=%s s2=%s ints=%d,%d,%d,%d port=%s"
            % (arg(0), arg(1), text(2), arg(3), text(4), text(5),
               arg(6), arg(7), arg(8), arg(9), text(10)))


def int_entry():
    return "EVENT int_entry op=%d,%d cmd=%d" % (arg(0), arg(1), arg(2))


def int_return():
    return "EVENT int_return op=%d,%d cmd=%d" % (arg(0), arg(1), arg(2))


def ret():
    return ("EVENT return op=%d,%d utag=%s cmd=%d success=%d errno=%d"
            % (arg(0), arg(1), text(2), arg(3), arg(4), arg(5)))


class Probe(gdb.Breakpoint):
    """Prints Line() at each hit and lets the thread go on."""

    def __init__(self, probe, line):
        super().__init__("-probe-stap erlang:" + probe)
        self.silent = True
        self.line = line

    def stop(self):
        if self.line is not None:
            gdb.write(self.line() + "\n")
            gdb.flush()
        return False


class Done(gdb.Breakpoint):
    """user_trace__n950: the one stop that ends the loop."""

    hit = False

    def __init__(self):
        super().__init__("-probe-stap erlang:user_trace__n950")
        self.silent = True

    def stop(self):
        Done.hit = True
        return True


Probe("efile_drv__entry", entry)
Probe("efile_drv__int_entry", int_entry)
Probe("efile_drv__int_return", int_return)
Probe("efile_drv__return", ret)
Probe("user_trace__n1", None)
Done()
gdb.write("READY\n")
gdb.flush()
while not Done.hit:
    try:
        gdb.execute("continue")
    except gdb.error as e:
        gdb.write("gdb: %s\n" % e)
        break
if Done.hit:
    gdb.write("DONE\n")
    gdb.flush()
    gdb.execute("detach")
end
quit
