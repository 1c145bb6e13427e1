# Prints every efile_drv__* event with all its arguments (NULL strings as
# NULL), one "EVENT" line each. user_trace__n1 is a readiness probe the
# traced node polls until it returns true; user_trace__n950 makes gdb detach.
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
break -probe-stap erlang:efile_drv__entry
commands
  silent
  printf "EVENT entry op=%ld,%ld utag=", $_probe_arg0, $_probe_arg1
  dtrace_str $_probe_arg2
  printf " cmd=%ld s1=", $_probe_arg3
  dtrace_str $_probe_arg4
  printf " s2="
  dtrace_str $_probe_arg5
  printf " ints=%ld,%ld,%ld,%ld port=", $_probe_arg6, $_probe_arg7, $_probe_arg8, $_probe_arg9
  dtrace_str $_probe_arg10
  printf "\n"
  continue
end
break -probe-stap erlang:efile_drv__int_entry
commands
  silent
  printf "EVENT int_entry op=%ld,%ld cmd=%ld\n", $_probe_arg0, $_probe_arg1, $_probe_arg2
  continue
end
break -probe-stap erlang:efile_drv__int_return
commands
  silent
  printf "EVENT int_return op=%ld,%ld cmd=%ld\n", $_probe_arg0, $_probe_arg1, $_probe_arg2
  continue
end
break -probe-stap erlang:efile_drv__return
commands
  silent
  printf "EVENT return op=%ld,%ld utag=", $_probe_arg0, $_probe_arg1
  dtrace_str $_probe_arg2
  printf " cmd=%ld success=%ld errno=%ld\n", $_probe_arg3, $_probe_arg4, $_probe_arg5
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
