#!/usr/sbin/dtrace -qs
/*
 * How long messages wait: from message-send to the receiver being
 * scheduled (process-scheduled), as a histogram in microseconds, and the
 * longest wait per receiver on Ctrl-C: the D twin of message-latency.bt.
 * The time a request spends in a mailbox before its server runs is a
 * common cause of tail latency that neither the sender nor the server sees.
 *
 * A message is paired with the first scheduling of its receiver after
 * the send; later messages to a receiver that has not run yet keep the
 * first one's time (the oldest waiting message), like a queue head.
 * Sends are keyed by OS pid and receiver, should several nodes be traced.
 * Receivers are named (dtrace_process__name: registered name, label,
 * RabbitMQ's process_name, initial call; docs/reference.md) beside their
 * pids; a process the node has not named yet has an empty name.
 *
 * Usage (root), on a node running the dtrace application (automatic mode
 * sets the `send', `running' and `exiting' flags while this runs), Linux:
 *   priv/bin/dtrace-d -p <beam OS pid> -s priv/dtrace/message-latency.d
 * DTrace with the provider registered through DOF: dtrace -Z -s message-latency.d
 */

#pragma D option quiet

BEGIN
{
    printf("Tracing message send -> receiver scheduled... Ctrl-C to end.\n");
}

/* Each process's name (dtrace_process__name), per node. */
erlang*:::dtrace_process-name
{
    name[pid, copyinstr(arg0)] = copyinstr(arg1);
}

erlang*:::message-send
/!sent[pid, copyinstr(arg1)]/
{
    sent[pid, copyinstr(arg1)] = timestamp;
}

erlang*:::process-scheduled
/sent[pid, copyinstr(arg0)]/
{
    this->us = (timestamp - sent[pid, copyinstr(arg0)]) / 1000;
    @wait_us = quantize(this->us);
    this->p = copyinstr(arg0);
    this->name = name[pid, this->p];
    @max_wait_us[this->p, this->name != NULL ? this->name : ""] = max(this->us);
    sent[pid, copyinstr(arg0)] = 0;
}

END
{
    printf("\nSend to receiver scheduled (us), and the longest wait per receiver:\n");
    printa("wait (us):%@d\n", @wait_us);
    printa("longest wait %s (%s): %@d us\n", @max_wait_us);
}
