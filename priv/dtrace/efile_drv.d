#!/usr/sbin/dtrace -qs
/*
 * D equivalent of OTP's runtime_tools/examples/efile_drv.d for the file
 * I/O probes of dtrace_file: one line per probe, in the format OTP's
 * script printed, and on exit a latency distribution (microseconds, entry
 * to return) per user tag.
 *
 * Usage (root), Linux (the library's SDT notes, provider erlang<PID>):
 *   priv/bin/dtrace-d -p <beam OS pid> -qs priv/dtrace/efile_drv.d
 * DTrace with the provider registered through DOF (illumos, FreeBSD,
 * macOS): dtrace -Z -qs efile_drv.d
 *
 * Probe arguments (provider erlang; DTrace spells __ as -):
 *   efile_drv-entry:      thread_id, tag, user_tag, command, s1, s2,
 *                         i1, i2, i3, i4, port (args[10])
 *   efile_drv-int_entry:  thread_id, tag, command
 *   efile_drv-int_return: thread_id, tag, command
 *   efile_drv-return:     thread_id, tag, user_tag, command, success, errno
 * {thread_id, tag} names one operation.
 *
 * The port (args[10]) is past what DTrace 2.0.7 reads of a stapsdt probe
 * (arg0..arg9); priv/bin/dtrace-d reads it from its register instead. This is
 * the D script for dtrace_file's I/O: it answers efile.bt's questions (each
 * operation with its user tag, latency per tag) in the lines of OTP's own
 * efile_drv.d.
 */

#pragma D option quiet

BEGIN
{
    /* efile-commands:begin */
    cmd[1] = "OPEN"; cmd[2] = "READ"; cmd[3] = "LSEEK"; cmd[4] = "WRITE";
    cmd[5] = "FSTAT"; cmd[6] = "PWD"; cmd[7] = "READDIR"; cmd[8] = "CHDIR";
    cmd[9] = "FSYNC"; cmd[10] = "MKDIR"; cmd[11] = "DELETE"; cmd[12] = "RENAME";
    cmd[13] = "RMDIR"; cmd[14] = "TRUNCATE"; cmd[15] = "READ_FILE"; cmd[16] = "WRITE_INFO";
    cmd[19] = "LSTAT"; cmd[20] = "READLINK"; cmd[21] = "LINK"; cmd[22] = "SYMLINK";
    cmd[23] = "CLOSE"; cmd[24] = "PWRITEV"; cmd[25] = "PREADV"; cmd[29] = "READ_LINE";
    cmd[30] = "FDATASYNC"; cmd[31] = "FADVISE";
/* efile-commands:end */
}

erlang*:::efile_drv-entry
{
    start[pid, arg0, arg1] = timestamp;
    printf("efile_drv enter tag={%d,%d} %s%s | %s (%d) | args: %s %s , %d %d (port %s)\n",
           arg0, arg1,
           arg2 != NULL ? "user tag " : "", arg2 != NULL ? copyinstr(arg2) : "",
           cmd[arg3], arg3,
           arg4 != NULL ? copyinstr(arg4) : "", arg5 != NULL ? copyinstr(arg5) : "",
           arg6, arg7,
           args[10] != NULL ? copyinstr((uintptr_t) args[10]) : "?");
}

erlang*:::efile_drv-int_entry,
erlang*:::efile_drv-int_return
{
    printf("async I/O worker tag={%d,%d} | %s (%d) | %s\n",
           arg0, arg1, cmd[arg2], arg2, probename);
}

erlang*:::efile_drv-return
/arg4 == 0/
{
    printf("efile_drv return tag={%d,%d} %s%s | %s (%d) | errno %d\n",
           arg0, arg1,
           arg2 != NULL ? "user tag " : "", arg2 != NULL ? copyinstr(arg2) : "",
           cmd[arg3], arg3, arg5);
}

erlang*:::efile_drv-return
/arg4 != 0/
{
    printf("efile_drv return tag={%d,%d} %s%s | %s (%d) ok\n",
           arg0, arg1,
           arg2 != NULL ? "user tag " : "", arg2 != NULL ? copyinstr(arg2) : "",
           cmd[arg3], arg3);
}

erlang*:::efile_drv-return
/start[pid, arg0, arg1]/
{
    @latency_us[arg2 != NULL ? copyinstr(arg2) : "(no tag)"] =
        quantize((timestamp - start[pid, arg0, arg1]) / 1000);
    start[pid, arg0, arg1] = 0;
}

END
{
    printf("\nLatency (us) of file operations, per user tag:\n");
    printa(@latency_us);
}
