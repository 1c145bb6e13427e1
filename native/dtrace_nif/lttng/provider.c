/*
 * The LTTng-UST tracepoint provider package of dtrace_nif,
 * libdtrace_lttng_tp.so: the probes of every provider of probes.d,
 * org_erlang_dyntrace (OTP's VM events) and org_erlang_dtrace (the user,
 * span and file probes), whose headers build.rs generates.
 * Built by build.rs and linked with -llttng-ust; the NIF loads it with
 * dlopen (lttng/shim.c), so only this file needs liblttng-ust.
 */
#define TRACEPOINT_CREATE_PROBES

#include "dtrace_lttng_providers.h"
