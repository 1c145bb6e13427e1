#!/usr/sbin/dtrace -qs
/*
 * Processes as they are spawned and exit, in the lines of OTP's
 * examples/spawn-exit.d and of spawn-exit.bt:
 *   pid <0.90.0> mfa erlang:apply/2
 *   pid <0.90.0> (my_worker) reason normal
 * An exit names the process (dtrace_process__name: registered name,
 * label, RabbitMQ's process_name, initial call; docs/reference.md) where
 * the node named it, which it does within 100 ms of its spawn: a spawn,
 * or the exit of a process younger than that, has none.
 * (OTP's exit_signal probes are not fed on a stock VM, so they are left
 * out here.)
 *
 * Usage (root), on a node running the dtrace application (automatic mode
 * sets the `procs' trace flag while this runs), Linux:
 *   priv/bin/dtrace-d -p <beam OS pid> -s priv/dtrace/spawn-exit.d
 * DTrace with the provider registered through DOF: dtrace -Z -s spawn-exit.d
 */

#pragma D option quiet

/* Each process's name (dtrace_process__name), per node. */
erlang*:::dtrace_process-name
{
    name[pid, copyinstr(arg0)] = copyinstr(arg1);
}

erlang*:::process-spawn
{
    printf("pid %s mfa %s\n", copyinstr(arg0), copyinstr(arg1));
}

erlang*:::process-exit
{
    this->p = copyinstr(arg0);
    this->name = name[pid, this->p];
    printf("pid %s (%s) reason %s\n", this->p, this->name != NULL ? this->name : "", copyinstr(arg1));
    name[pid, this->p] = 0;
}
