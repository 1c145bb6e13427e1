/*
 * A port driver with a call callback, for the tests of driver__call: no
 * driver OTP ships has one, so erlang:port_call/3 reaches none of them.
 * erlang:port_call(Port, Command, Data) answers {Command, Data} (Data as the
 * VM encoded it, external term format, echoed back decoded).
 * Built by dtrace_vm_sources_SUITE with the VM's erl_driver.h.
 */
#include <string.h>
#include <erl_driver.h>

static ErlDrvData call_start(ErlDrvPort port, char *command)
{
    (void)command;
    return (ErlDrvData)port;
}

static void call_stop(ErlDrvData data)
{
    (void)data;
}

/* The reply is the request's encoded term as it came: port_call/3 then
 * returns Data. */
static ErlDrvSSizeT call_call(ErlDrvData data, unsigned int command, char *buf, ErlDrvSizeT len,
                              char **rbuf, ErlDrvSizeT rlen, unsigned int *flags)
{
    (void)data;
    (void)command;
    (void)flags;
    if (len > rlen) {
        *rbuf = driver_alloc(len);
        if (*rbuf == NULL)
            return -1;
    }
    memcpy(*rbuf, buf, len);
    return (ErlDrvSSizeT)len;
}

static ErlDrvEntry call_driver_entry = {
    .start = call_start,
    .stop = call_stop,
    .driver_name = "dtrace_call_drv",
    .call = call_call,
    .extended_marker = ERL_DRV_EXTENDED_MARKER,
    .major_version = ERL_DRV_EXTENDED_MAJOR_VERSION,
    .minor_version = ERL_DRV_EXTENDED_MINOR_VERSION,
};

DRIVER_INIT(dtrace_call_drv)
{
    return &call_driver_entry;
}
