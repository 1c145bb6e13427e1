/*
 * The LTTng-UST call sites of dtrace_nif, compiled into the NIF (a static
 * library built by build.rs with the cc crate). The tracepoint definitions
 * are here (TRACEPOINT_DEFINE); the probes are in the provider package
 * libdtrace_lttng_tp.so (provider.c), which this code loads with dlopen
 * (TRACEPOINT_PROBE_DYNAMIC_LINKAGE): the NIF does not depend on
 * liblttng-ust, and where it is missing every tracepoint stays disabled.
 *
 * Rust reads each tracepoint's enable state directly (src/lttng.rs mirrors
 * the start of struct lttng_ust_tracepoint, checked below) and calls the
 * dtrace_lttng_* functions with arguments already converted.
 */
#define TRACEPOINT_DEFINE
#define TRACEPOINT_PROBE_DYNAMIC_LINKAGE

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>

#include "org_erlang_dyntrace.h"
#include "org_erlang_dtrace.h"

/* src/lttng.rs reads `state' at this offset (the ABI of liblttng-ust.so.1,
 * which only adds fields at the end). */
_Static_assert(offsetof(struct lttng_ust_tracepoint, struct_size) == 0, "lttng_ust_tracepoint layout");
_Static_assert(offsetof(struct lttng_ust_tracepoint, state) == 3 * sizeof(void *), "lttng_ust_tracepoint layout");
_Static_assert(sizeof(((struct lttng_ust_tracepoint *)0)->state) == 4, "lttng_ust_tracepoint layout");

/*
 * Loads the provider package: the one already in the process if any
 * (dlopen of its soname, RTLD_NOLOAD: a second copy would record every
 * event twice), else `path'. Never unloaded (RTLD_NODELETE: LTTng-UST
 * does not support unloading a provider in use). Returns 1, or 0 with the
 * reason in `err'.
 */
int dtrace_lttng_load(const char *path, char *err, size_t err_len)
{
    /* rustc links the NIF with --gc-sections, and the only references to
     * the section of tracepoint pointers are weak __start_/__stop_
     * symbols, which do not keep it: without this, no tracepoint of the
     * NIF is registered and none can ever be enabled. */
    __asm__ volatile("" : : "r"(&lttng_ust_tracepoint_ptr_org_erlang_dyntrace___process_spawn));
    void *handle = dlopen("libdtrace_lttng_tp.so", RTLD_NOW | RTLD_NOLOAD);
    if (handle == NULL)
        handle = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (handle == NULL) {
        const char *why = dlerror();
        snprintf(err, err_len, "%s", why != NULL ? why : "dlopen failed");
        return 0;
    }
    return 1;
}

/* Did the tracepoint registry (liblttng-ust-tracepoint.so.1) load? */
int dtrace_lttng_runtime_present(void)
{
    return lttng_ust_tracepoint_dlopen_ptr != NULL
        && lttng_ust_tracepoint_dlopen_ptr->liblttngust_handle != NULL;
}

/* OTP's org_erlang_dyntrace events. */
void dtrace_lttng_process_spawn(const char *p, const char *parent, const char *mfa)
{ tracepoint(org_erlang_dyntrace, process_spawn, p, parent, mfa); }
void dtrace_lttng_process_link(const char *from, const char *to, const char *type)
{ tracepoint(org_erlang_dyntrace, process_link, from, to, type); }
void dtrace_lttng_process_exit(const char *p, const char *reason)
{ tracepoint(org_erlang_dyntrace, process_exit, p, reason); }
void dtrace_lttng_process_register(const char *p, const char *name, const char *type)
{ tracepoint(org_erlang_dyntrace, process_register, p, name, type); }
void dtrace_lttng_process_scheduled(const char *p, const char *mfa, const char *type)
{ tracepoint(org_erlang_dyntrace, process_scheduled, p, mfa, type); }
void dtrace_lttng_port_open(const char *p, const char *driver, const char *port)
{ tracepoint(org_erlang_dyntrace, port_open, p, driver, port); }
void dtrace_lttng_port_exit(const char *port, const char *reason)
{ tracepoint(org_erlang_dyntrace, port_exit, port, reason); }
void dtrace_lttng_port_link(const char *from, const char *to, const char *type)
{ tracepoint(org_erlang_dyntrace, port_link, from, to, type); }
void dtrace_lttng_port_scheduled(const char *p, const char *op, const char *type)
{ tracepoint(org_erlang_dyntrace, port_scheduled, p, op, type); }
void dtrace_lttng_function_call(const char *p, const char *mfa, unsigned int depth)
{ tracepoint(org_erlang_dyntrace, function_call, p, mfa, depth); }
void dtrace_lttng_function_return(const char *p, const char *mfa, unsigned int depth)
{ tracepoint(org_erlang_dyntrace, function_return, p, mfa, depth); }
void dtrace_lttng_function_exception(const char *p, const char *mfa, const char *type)
{ tracepoint(org_erlang_dyntrace, function_exception, p, mfa, type); }
void dtrace_lttng_message_send(const char *from, const char *to, const char *msg)
{ tracepoint(org_erlang_dyntrace, message_send, from, to, msg); }
void dtrace_lttng_message_receive(const char *to, const char *msg)
{ tracepoint(org_erlang_dyntrace, message_receive, to, msg); }
void dtrace_lttng_gc_minor_start(const char *p, unsigned long need, unsigned long heap, unsigned long old_heap)
{ tracepoint(org_erlang_dyntrace, gc_minor_start, p, need, heap, old_heap); }
void dtrace_lttng_gc_minor_end(const char *p, unsigned long reclaimed, unsigned long heap, unsigned long old_heap)
{ tracepoint(org_erlang_dyntrace, gc_minor_end, p, reclaimed, heap, old_heap); }
void dtrace_lttng_gc_major_start(const char *p, unsigned long need, unsigned long heap, unsigned long old_heap)
{ tracepoint(org_erlang_dyntrace, gc_major_start, p, need, heap, old_heap); }
void dtrace_lttng_gc_major_end(const char *p, unsigned long reclaimed, unsigned long heap, unsigned long old_heap)
{ tracepoint(org_erlang_dyntrace, gc_major_end, p, reclaimed, heap, old_heap); }

/* The org_erlang_dtrace events, generated from probes.d by build.rs. */
#include "org_erlang_dtrace_shim.inc"
