# Prints every user_trace__i4s4 and user_trace__n0 event with all ten
# arguments (NULL strings as NULL), in gdb_events/3's protocol
# (test/support/gdb_probe_events.py, sourced first).
set pagination off
set confirm off
set print thread-events off
python
def user_event(name):
    return lambda: ("EVENT %s pid=%s tag=%s ints=%d,%d,%d,%d s1=%s s2=%s s3=%s s4=%s"
                    % (name, text(0), text(1), arg(2), arg(3), arg(4), arg(5),
                       text(6), text(7), text(8), text(9)))


Probe("erlang:user_trace__i4s4", user_event("i4s4"))
Probe("erlang:user_trace__n0", user_event("n0"))
run()
end
quit
