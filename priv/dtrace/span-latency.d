#!/usr/sbin/dtrace -qs
/*
 * Latency of spans (dtrace:span/2, span_begin/1 + span_end/1,2), per span
 * kind, every slow span with its user tag, and failed spans apart: the D
 * twin of span-latency.bt.
 *
 * span-end carries everything: arg0 pid, arg1 user tag (NULL: none),
 * arg2 span id, arg3 parent span id (0: none), arg4 kind, arg5 duration
 * in nanoseconds, arg6 outcome ("ok", or "error", "exit", "throw": the
 * span raised).
 *
 * Usage (root), Linux (the library's SDT notes, provider erlang<PID>):
 *   priv/bin/dtrace-d -p <beam OS pid> -s priv/dtrace/span-latency.d
 * DTrace with the provider registered through DOF (illumos, FreeBSD,
 * macOS): dtrace -Z -s priv/dtrace/span-latency.d
 * The first 10 spans over 10 ms are printed as they end (all are counted
 * in @slow_spans), and the first 10 failed spans; Ctrl-C prints the
 * counts (failed spans by kind and outcome) and histograms.
 * A span with no user tag (a function span, dtrace:function_spans/1, in a
 * process that set none) names its process instead (dtrace_process__name:
 * registered name, label, RabbitMQ's process_name, initial call;
 * docs/reference.md), as "pid <0.90.0> (my_server)"; () is a process the
 * node has not named yet (it does within 100 ms of a spawn).
 */

#pragma D option quiet

BEGIN
{
    printf("Tracing dtrace spans (span-end)... Ctrl-C to end.\n");
}

/* Each process's name (dtrace_process__name), per node. */
erlang*:::dtrace_process-name
{
    name[pid, copyinstr(arg0)] = copyinstr(arg1);
}

erlang*:::span-end
{
    this->kind = copyinstr(arg4);
    @spans[this->kind] = count();
    @latency_us[this->kind] = quantize(arg5 / 1000);
}

erlang*:::span-end
/arg5 / 1000 > 10000/
{
    @slow_spans[copyinstr(arg4)] = count();
    printed++;
}

erlang*:::span-end
/arg5 / 1000 > 10000 && printed <= 10 && arg1 != NULL/
{
    printf("slow span: %s, %d us, tag '%s', pid %s\n", copyinstr(arg4), arg5 / 1000, copyinstr(arg1),
           copyinstr(arg0));
}

erlang*:::span-end
/arg5 / 1000 > 10000 && printed <= 10 && arg1 == NULL/
{
    this->p = copyinstr(arg0);
    this->name = name[pid, this->p];
    printf("slow span: %s, %d us, pid %s (%s)\n", copyinstr(arg4), arg5 / 1000, this->p,
           this->name != NULL ? this->name : "");
}

erlang*:::span-end
/copyinstr(arg6) != "ok"/
{
    @failed_spans[copyinstr(arg4), copyinstr(arg6)] = count();
    failed++;
}

erlang*:::span-end
/copyinstr(arg6) != "ok" && failed <= 10 && arg1 != NULL/
{
    printf("failed span: %s (%s), %d us, tag '%s', pid %s\n", copyinstr(arg4), copyinstr(arg6),
           arg5 / 1000, copyinstr(arg1), copyinstr(arg0));
}

erlang*:::span-end
/copyinstr(arg6) != "ok" && failed <= 10 && arg1 == NULL/
{
    this->p = copyinstr(arg0);
    this->name = name[pid, this->p];
    printf("failed span: %s (%s), %d us, pid %s (%s)\n", copyinstr(arg4), copyinstr(arg6),
           arg5 / 1000, this->p, this->name != NULL ? this->name : "");
}

END
{
    printf("\nSpans, slow spans (> 10 ms) and latency histograms (us), per kind:\n");
    printa("spans %s: %@d\n", @spans);
    printa("slow spans %s: %@d\n", @slow_spans);
    printa("failed spans %s %s: %@d\n", @failed_spans);
    printa("latency (us) %s:%@d\n", @latency_us);
}
