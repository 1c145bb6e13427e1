# Prints every efile_drv__* event with all its arguments (NULL strings as
# NULL), one "EVENT" line each, in gdb_events/3's protocol
# (test/support/gdb_probe_events.py, sourced first).
set pagination off
set confirm off
set print thread-events off
python
Probe("erlang:efile_drv__entry",
      lambda: "EVENT entry op=%d,%d utag=%s cmd=%d s1=%s s2=%s ints=%d,%d,%d,%d port=%s"
      % (arg(0), arg(1), text(2), arg(3), text(4), text(5), arg(6), arg(7), arg(8), arg(9), text(10)))
Probe("erlang:efile_drv__int_entry", lambda: "EVENT int_entry op=%d,%d cmd=%d" % (arg(0), arg(1), arg(2)))
Probe("erlang:efile_drv__int_return", lambda: "EVENT int_return op=%d,%d cmd=%d" % (arg(0), arg(1), arg(2)))
Probe("erlang:efile_drv__return",
      lambda: "EVENT return op=%d,%d utag=%s cmd=%d success=%d errno=%d"
      % (arg(0), arg(1), text(2), arg(3), arg(4), arg(5)))
run()
end
quit
