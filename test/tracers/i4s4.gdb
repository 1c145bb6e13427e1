# Prints every user_trace__i4s4 and user_trace__n0 event with all ten
# arguments (NULL strings as NULL). user_trace__n1 is a readiness probe the
# traced node polls until it returns true; user_trace__n950 makes gdb detach.
# No string literal is passed to a user-defined command: gdb would copy it
# into the inferior with an inferior call (malloc), which fails on some
# kernels ("Couldn't write extended state status: Bad address").
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
define dtrace_event
  printf " pid="
  dtrace_str $_probe_arg0
  printf " tag="
  dtrace_str $_probe_arg1
  printf " ints=%ld,%ld,%ld,%ld s1=", $_probe_arg2, $_probe_arg3, $_probe_arg4, $_probe_arg5
  dtrace_str $_probe_arg6
  printf " s2="
  dtrace_str $_probe_arg7
  printf " s3="
  dtrace_str $_probe_arg8
  printf " s4="
  dtrace_str $_probe_arg9
  printf "\n"
end
break -probe-stap erlang:user_trace__i4s4
commands
  silent
  printf "EVENT i4s4"
  dtrace_event
  continue
end
break -probe-stap erlang:user_trace__n0
commands
  silent
  printf "EVENT n0"
  dtrace_event
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
