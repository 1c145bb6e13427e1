# Prints every event of run-time probe gdbprov:all with its twelve
# arguments (NULL strings as NULL). erlang:user_trace__n1 is the readiness
# probe the traced node polls until it returns true; erlang:user_trace__n950
# makes gdb detach (dtrace_test_tracer:gdb_events/3's protocol). The provider
# is defined before gdb starts: gdb finds run-time probes in the objects
# the process has loaded. No string literal is passed to a user-defined
# command (see i4s4.gdb).
set pagination off
set confirm off
set print thread-events off
set print elements 0
define dtrace_str
  if $arg0 != 0
    printf "%s", (char *) $arg0
  else
    printf "NULL"
  end
end
break -probe-stap gdbprov:all
commands
  silent
  printf "EVENT all argc=%d %ld ", $_probe_argc, $_probe_arg0
  dtrace_str $_probe_arg1
  printf " %ld ", $_probe_arg2
  dtrace_str $_probe_arg3
  printf " %ld ", $_probe_arg4
  dtrace_str $_probe_arg5
  printf " "
  dtrace_str $_probe_arg6
  printf " %ld ", $_probe_arg7
  dtrace_str $_probe_arg8
  printf " %ld ", $_probe_arg9
  dtrace_str $_probe_arg10
  printf " %ld\n", $_probe_arg11
  continue
end
break -probe-stap erlang:user_trace__n1
commands
  silent
  continue
end
break -probe-stap erlang:user_trace__n950
commands
  silent
  printf "DONE\n"
  detach
  quit
end
printf "READY\n"
continue
