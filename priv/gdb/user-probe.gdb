# Prints every dtrace:p/N event with all ten arguments, like OTP's
# examples/user-probe.d (gdb reads the strings s1..s4 that bpftrace < 0.24
# cannot). NULL strings print as ''. Each event stops the traced thread
# for a moment: use it for debugging, not on a busy production node.
#
# Usage (root): gdb -q -batch -x user-probe.gdb -p <beam OS pid>
# (Ctrl-C, then `detach` and `quit`, to leave.)
set pagination off
set confirm off
set print elements 0
define dtrace_str
  if $arg0 != 0
    printf "'%s'", (char *) $arg0
  else
    printf "''"
  end
end
break -probe-stap erlang:user_trace__i4s4
commands
  silent
  if $_probe_arg0 != 0
    printf "%s ", (char *) $_probe_arg0
  end
  if $_probe_arg1 != 0
    printf "%s ", (char *) $_probe_arg1
  end
  printf "%ld %ld %ld %ld ", $_probe_arg2, $_probe_arg3, $_probe_arg4, $_probe_arg5
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
continue
