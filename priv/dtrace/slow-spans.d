#!/usr/sbin/dtrace -qs
/*
 * The events behind "why was this span slow": the D twin of
 * slow-spans.bt, for priv/bin/dtrace-slow-spans --tracer dtrace, which runs it
 * and prints the breakdown (docs/operators.md, "Why was it slow"). Alone
 * it prints one line per event, tab-separated, in slow-spans.bt's format
 * (T gives the wall clock as nanoseconds since the epoch here).
 *
 * Only events of processes inside a span (and sends from and to them, and
 * file operations under a user tag) are printed. Every argument read is
 * within arg0..arg5.
 *
 * Usage (root): priv/bin/dtrace-slow-spans --tracer dtrace -p <beam OS pid>
 *   or, raw: priv/bin/dtrace-d -p <beam OS pid> -qs priv/dtrace/slow-spans.d
 */

#pragma D option quiet
#pragma D option switchrate=10hz
#pragma D option bufsize=16m

BEGIN
{
    printf("T\t%d\t%d\n", timestamp, walltimestamp);
}

erlang*:::dtrace_process-name
{
    printf("N\t%d\t%s\t%s\n", timestamp, copyinstr(arg0), copyinstr(arg1));
}

erlang*:::span-begin
{
    this->p = copyinstr(arg0);
    printf("B\t%d\t%s\t%d\t%d\t%s\t%s\n", timestamp, this->p, arg2, arg3,
        arg4 ? copyinstr(arg4) : "", arg1 ? copyinstr(arg1) : "");
    depth[this->p]++;
}

erlang*:::span-end
{
    this->p = copyinstr(arg0);
    printf("E\t%d\t%s\t%d\t%d\t%s\t%s\t%s\n", timestamp, this->p, arg2, arg5,
        arg6 ? copyinstr(arg6) : "ok", arg4 ? copyinstr(arg4) : "", arg1 ? copyinstr(arg1) : "");
    depth[this->p] = depth[this->p] > 1 ? depth[this->p] - 1 : 0;
}

erlang*:::span-vm_scheduled
/depth[copyinstr(arg0)]/
{
    printf("S\t%d\t%s\t%s\t%s\n", timestamp, copyinstr(arg0), copyinstr(arg2), copyinstr(arg1));
}

erlang*:::span-vm_gc
/depth[copyinstr(arg0)]/
{
    printf("G\t%d\t%s\t%s\n", timestamp, copyinstr(arg0), copyinstr(arg1));
}

erlang*:::span-vm_receive
/depth[copyinstr(arg0)]/
{
    printf("Q\t%d\t%s\n", timestamp, copyinstr(arg0));
}

erlang*:::span-vm_send
/depth[copyinstr(arg0)] || depth[copyinstr(arg1)]/
{
    printf("M\t%d\t%s\t%s\n", timestamp, copyinstr(arg0), copyinstr(arg1));
}

erlang*:::local-function-entry,
erlang*:::global-function-entry
/depth[copyinstr(arg0)]/
{
    printf("C\t%d\t%s\t%s\n", timestamp, copyinstr(arg0), copyinstr(arg1));
}

erlang*:::function-return
/depth[copyinstr(arg0)]/
{
    printf("R\t%d\t%s\t%s\n", timestamp, copyinstr(arg0), copyinstr(arg1));
}

erlang*:::efile_drv-entry
/arg2/
{
    printf("F\t%d\t%d\t%d\t%d\t%s\n", timestamp, arg0, arg1, arg3, copyinstr(arg2));
}

erlang*:::efile_drv-return
/arg2/
{
    printf("f\t%d\t%d\t%d\n", timestamp, arg0, arg1);
}
