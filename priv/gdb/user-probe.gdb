# Prints every dtrace:p/N event with all ten arguments, like OTP's
# examples/user-probe.d (gdb reads the strings s1..s4 that bpftrace < 0.24
# cannot). NULL strings print as ''. Each event stops the traced thread
# for a moment: use it for debugging, not on a busy production node.
#
# Usage (root): gdb -q -batch -x user-probe.gdb -p <beam OS pid>
# Ctrl-C detaches and leaves.
#
# The events print from a Python breakpoint that lets the thread go on,
# and the loop below resumes after any other stop: with `commands ...
# continue` instead, gdb 18 at times stopped without running them while
# schedulers hit the probe at once, and -batch then detached silently.
set pagination off
set confirm off
set print thread-events off
python
import gdb


def arg(n):
    return int(gdb.parse_and_eval("$_probe_arg" + str(n)))


def text(n):
    if arg(n) == 0:
        return None
    return gdb.parse_and_eval("(char *) $_probe_arg" + str(n)).string(errors="backslashreplace")


class UserProbe(gdb.Breakpoint):
    def stop(self):
        words = [w for w in (text(0), text(1)) if w is not None]
        words += [str(arg(k)) for k in range(2, 6)]
        words += ["'%s'" % (text(k) or "") for k in range(6, 10)]
        gdb.write(" ".join(words) + "\n")
        gdb.flush()
        return False


def interrupted(event):
    return isinstance(event, gdb.SignalEvent) and event.stop_signal == "SIGINT"


stops = []
gdb.events.stop.connect(stops.append)
UserProbe("-probe-stap erlang:user_trace__i4s4").silent = True
try:
    while not any(interrupted(e) for e in stops[-1:]):
        gdb.execute("continue")
except gdb.error as e:
    gdb.write("%s\n" % e)
end
quit
