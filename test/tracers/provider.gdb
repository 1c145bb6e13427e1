# Prints every event of run-time probe gdbprov:all with its twelve
# arguments (NULL strings as NULL), in gdb_events/3's protocol
# (test/support/gdb_probe_events.py, sourced first). The provider is
# defined before gdb starts: gdb finds run-time probes in the objects the
# process has loaded.
set pagination off
set confirm off
set print thread-events off
python
Probe("gdbprov:all",
      lambda: "EVENT all argc=%d %d %s %d %s %d %s %s %d %s %d %s %d"
      % (argc(), arg(0), text(1), arg(2), text(3), arg(4), text(5), text(6), arg(7), text(8), arg(9),
         text(10), arg(11)))
run()
end
quit
