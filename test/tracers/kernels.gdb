# dtrace_kernels_SUITE: a user probe with its tag (i4s4, ten arguments), a
# VM probe (process__spawn) and the run-time provider kprov's probe `all'
# (eight arguments), each event one "EVENT ..." line in the format the
# suite's other tracers print. The provider is defined before gdb starts
# (gdb finds run-time probes in the objects the process has loaded).
# erlang:user_trace__n1 is the readiness probe, erlang:user_trace__n950
# makes gdb detach (dtrace_test_tracer:gdb_events/3's protocol). gdb
# raises the probes' semaphores as it inserts the breakpoints. No string
# literal is passed to a user-defined command (see i4s4.gdb).
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
break -probe-stap erlang:user_trace__i4s4
commands
  silent
  printf "EVENT I4S4 "
  dtrace_str $_probe_arg0
  printf " "
  dtrace_str $_probe_arg1
  printf " %ld %ld %ld %ld ", $_probe_arg2, $_probe_arg3, $_probe_arg4, $_probe_arg5
  dtrace_str $_probe_arg6
  printf " "
  dtrace_str $_probe_arg7
  printf " "
  dtrace_str $_probe_arg8
  printf " "
  dtrace_str $_probe_arg9
  printf "\n"
  continue
end
break -probe-stap erlang:process__spawn
commands
  silent
  printf "EVENT SPAWN "
  dtrace_str $_probe_arg0
  printf " "
  dtrace_str $_probe_arg1
  printf "\n"
  continue
end
break -probe-stap kprov:all
commands
  silent
  printf "EVENT PROV %ld ", $_probe_arg0
  dtrace_str $_probe_arg1
  printf " %ld ", $_probe_arg2
  dtrace_str $_probe_arg3
  printf " %ld ", $_probe_arg4
  dtrace_str $_probe_arg5
  printf " "
  dtrace_str $_probe_arg6
  printf " %ld\n", $_probe_arg7
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
