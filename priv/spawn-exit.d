#!/usr/sbin/dtrace -qs
/*
 * Processes as they are spawned and exit, in the lines of OTP's
 * examples/spawn-exit.d and of spawn-exit.bt:
 *   pid <0.90.0> mfa erlang:apply/2
 *   pid <0.90.0> reason normal
 * (OTP's exit_signal probes are not fed on a stock VM, so they are left
 * out here.)
 *
 * Usage (root), on a node running the dtrace application (automatic mode
 * sets the `procs' trace flag while this runs), Linux:
 *   priv/dtrace-d -p <beam OS pid> -s priv/spawn-exit.d
 * DTrace with the provider registered through DOF: dtrace -Z -s spawn-exit.d
 */

#pragma D option quiet

erlang*:::process-spawn
{
    printf("pid %s mfa %s\n", copyinstr(arg0), copyinstr(arg1));
}

erlang*:::process-exit
{
    printf("pid %s reason %s\n", copyinstr(arg0), copyinstr(arg1));
}
