/*
 * The LTTng-UST tracepoint provider package of dtrace_nif,
 * libdtrace_lttng_tp.so: the probes of both providers, org_erlang_dyntrace
 * (OTP's VM events) and org_erlang_dtrace (the user and file probes).
 * Built by build.rs and linked with -llttng-ust; the NIF loads it with
 * dlopen (lttng/shim.c), so only this file needs liblttng-ust.
 */
#define TRACEPOINT_CREATE_PROBES

#include "org_erlang_dyntrace.h"
#include "org_erlang_dtrace.h"
