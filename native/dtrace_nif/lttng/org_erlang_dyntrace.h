/*
 * OTP's LTTng-UST tracepoints for the VM's own events, provider
 * org_erlang_dyntrace: the 18 events, field names and types of OTP's
 * LTTng build (runtime_tools, dyntrace_lttng.h; the "LTTng and Erlang/OTP"
 * user guide), so that OTP's documented sessions work unchanged:
 *   lttng enable-event -u 'org_erlang_dyntrace:*'
 * Strings are pids, ports and mfas as text (<0.84.0>, #Port<0.5>, m:f/a)
 * and terms as ~p text, at most 255 bytes.
 *
 * Included by lttng/shim.c (the call sites, in the NIF) and
 * lttng/provider.c (the probes, in libdtrace_lttng_tp.so).
 */
#undef TRACEPOINT_PROVIDER
#define TRACEPOINT_PROVIDER org_erlang_dyntrace

#undef TRACEPOINT_INCLUDE
#define TRACEPOINT_INCLUDE "org_erlang_dyntrace.h"

#if !defined(DTRACE_ORG_ERLANG_DYNTRACE_H) || defined(TRACEPOINT_HEADER_MULTI_READ)
#define DTRACE_ORG_ERLANG_DYNTRACE_H

#include <lttng/tracepoint.h>

/* procs */
TRACEPOINT_EVENT(org_erlang_dyntrace, process_spawn,
    TP_ARGS(const char *, p, const char *, parent, const char *, mfa),
    TP_FIELDS(ctf_string(pid, p) ctf_string(parent, parent) ctf_string(entry, mfa)))

TRACEPOINT_EVENT(org_erlang_dyntrace, process_link,
    TP_ARGS(const char *, from, const char *, to, const char *, type),
    TP_FIELDS(ctf_string(from, from) ctf_string(to, to) ctf_string(type, type)))

TRACEPOINT_EVENT(org_erlang_dyntrace, process_exit,
    TP_ARGS(const char *, p, const char *, reason),
    TP_FIELDS(ctf_string(pid, p) ctf_string(reason, reason)))

TRACEPOINT_EVENT(org_erlang_dyntrace, process_register,
    TP_ARGS(const char *, p, const char *, name, const char *, type),
    TP_FIELDS(ctf_string(pid, p) ctf_string(name, name) ctf_string(type, type)))

/* running */
TRACEPOINT_EVENT(org_erlang_dyntrace, process_scheduled,
    TP_ARGS(const char *, p, const char *, mfa, const char *, type),
    TP_FIELDS(ctf_string(pid, p) ctf_string(entry, mfa) ctf_string(type, type)))

/* ports */
TRACEPOINT_EVENT(org_erlang_dyntrace, port_open,
    TP_ARGS(const char *, p, const char *, driver, const char *, port),
    TP_FIELDS(ctf_string(pid, p) ctf_string(driver, driver) ctf_string(port, port)))

TRACEPOINT_EVENT(org_erlang_dyntrace, port_exit,
    TP_ARGS(const char *, port, const char *, reason),
    TP_FIELDS(ctf_string(port, port) ctf_string(reason, reason)))

TRACEPOINT_EVENT(org_erlang_dyntrace, port_link,
    TP_ARGS(const char *, from, const char *, to, const char *, type),
    TP_FIELDS(ctf_string(from, from) ctf_string(to, to) ctf_string(type, type)))

/* running_ports */
TRACEPOINT_EVENT(org_erlang_dyntrace, port_scheduled,
    TP_ARGS(const char *, p, const char *, op, const char *, type),
    TP_FIELDS(ctf_string(pid, p) ctf_string(entry, op) ctf_string(type, type)))

/* call */
TRACEPOINT_EVENT(org_erlang_dyntrace, function_call,
    TP_ARGS(const char *, p, const char *, mfa, unsigned int, depth),
    TP_FIELDS(ctf_string(pid, p) ctf_string(entry, mfa) ctf_integer(unsigned int, depth, depth)))

TRACEPOINT_EVENT(org_erlang_dyntrace, function_return,
    TP_ARGS(const char *, p, const char *, mfa, unsigned int, depth),
    TP_FIELDS(ctf_string(pid, p) ctf_string(entry, mfa) ctf_integer(unsigned int, depth, depth)))

TRACEPOINT_EVENT(org_erlang_dyntrace, function_exception,
    TP_ARGS(const char *, p, const char *, mfa, const char *, type),
    TP_FIELDS(ctf_string(pid, p) ctf_string(entry, mfa) ctf_string(class, type)))

/* send, 'receive' */
TRACEPOINT_EVENT(org_erlang_dyntrace, message_send,
    TP_ARGS(const char *, sender, const char *, receiver, const char *, msg),
    TP_FIELDS(ctf_string(from, sender) ctf_string(to, receiver) ctf_string(message, msg)))

TRACEPOINT_EVENT(org_erlang_dyntrace, message_receive,
    TP_ARGS(const char *, receiver, const char *, msg),
    TP_FIELDS(ctf_string(to, receiver) ctf_string(message, msg)))

/* garbage_collection: need/reclaimed, heap and old heap, in words */
TRACEPOINT_EVENT(org_erlang_dyntrace, gc_minor_start,
    TP_ARGS(const char *, p, unsigned long, need, unsigned long, nh, unsigned long, oh),
    TP_FIELDS(ctf_string(pid, p) ctf_integer(unsigned long, need, need)
              ctf_integer(unsigned long, heap, nh) ctf_integer(unsigned long, old_heap, oh)))

TRACEPOINT_EVENT(org_erlang_dyntrace, gc_minor_end,
    TP_ARGS(const char *, p, unsigned long, reclaimed, unsigned long, nh, unsigned long, oh),
    TP_FIELDS(ctf_string(pid, p) ctf_integer(unsigned long, reclaimed, reclaimed)
              ctf_integer(unsigned long, heap, nh) ctf_integer(unsigned long, old_heap, oh)))

TRACEPOINT_EVENT(org_erlang_dyntrace, gc_major_start,
    TP_ARGS(const char *, p, unsigned long, need, unsigned long, nh, unsigned long, oh),
    TP_FIELDS(ctf_string(pid, p) ctf_integer(unsigned long, need, need)
              ctf_integer(unsigned long, heap, nh) ctf_integer(unsigned long, old_heap, oh)))

TRACEPOINT_EVENT(org_erlang_dyntrace, gc_major_end,
    TP_ARGS(const char *, p, unsigned long, reclaimed, unsigned long, nh, unsigned long, oh),
    TP_FIELDS(ctf_string(pid, p) ctf_integer(unsigned long, reclaimed, reclaimed)
              ctf_integer(unsigned long, heap, nh) ctf_integer(unsigned long, old_heap, oh)))

#endif /* DTRACE_ORG_ERLANG_DYNTRACE_H */

#include <lttng/tracepoint-event.h>
