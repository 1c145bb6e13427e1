/*
 * The LTTng floor's tracepoint provider `dtrace_floor' (lttng-ust 2.13):
 * two events with exactly the fields of the library's events, so that a
 * session records the same bytes per event:
 * - message_send: OTP's org_erlang_dyntrace:message_send (from, to,
 *   message: three strings);
 * - user_trace_i4s4: the library's org_erlang_dtrace:user_trace_i4s4
 *   (proc, user_tag, i1..i4 as int64_t, s1..s4).
 * Like the library's generated headers, each event takes its fields as one
 * struct. LTTNG_UST_TRACEPOINT_EVENT and lttng_ust_field_* are lttng-ust
 * 2.13's names for TRACEPOINT_EVENT and ctf_* (ust-api-compat.h maps the
 * old names onto these): the same layouts. A NULL string is recorded as
 * "(null)" (ust-tracepoint-event.h, LTTNG_UST__NULL_STRING); the library
 * passes NULL for an absent string.
 *
 * The usual provider-header shape (tracepoint.h's comment): the provider
 * and include macros, then the events under a guard that
 * LTTNG_UST_TRACEPOINT_HEADER_MULTI_READ reopens, since
 * <lttng/tracepoint-event.h> includes this header again (by the name in
 * LTTNG_UST_TRACEPOINT_INCLUDE, found through -I) to generate the probes.
 */
#undef LTTNG_UST_TRACEPOINT_PROVIDER
/* The provider's name: dtrace_floor, or FLOOR_TP (dtrace_floor_text for
 * the tracer module of -DFLOOR_TEXT, loaded in the same node as the one
 * without: two libraries must not register one provider twice). */
#ifndef FLOOR_TP
#define FLOOR_TP dtrace_floor
#endif
#define LTTNG_UST_TRACEPOINT_PROVIDER FLOOR_TP
#undef LTTNG_UST_TRACEPOINT_INCLUDE
#define LTTNG_UST_TRACEPOINT_INCLUDE "floor_tp.h"

/* The argument structs: once only, outside the multi-read part. */
#ifndef DTRACE_FLOOR_TP_ARGS
#define DTRACE_FLOOR_TP_ARGS
#include <stdint.h>

struct dtrace_floor_message_send {
    const char *from;
    const char *to;
    const char *message;
};

struct dtrace_floor_i4s4 {
    const char *proc;
    const char *user_tag;
    int64_t i1, i2, i3, i4;
    const char *s1, *s2, *s3, *s4;
};
#endif

#if !defined(DTRACE_FLOOR_TP_H) || defined(LTTNG_UST_TRACEPOINT_HEADER_MULTI_READ)
#define DTRACE_FLOOR_TP_H

#include <lttng/tracepoint.h>

LTTNG_UST_TRACEPOINT_EVENT(FLOOR_TP, message_send,
    LTTNG_UST_TP_ARGS(const struct dtrace_floor_message_send *, a),
    LTTNG_UST_TP_FIELDS(
        lttng_ust_field_string(from, a->from)
        lttng_ust_field_string(to, a->to)
        lttng_ust_field_string(message, a->message)))

LTTNG_UST_TRACEPOINT_EVENT(FLOOR_TP, user_trace_i4s4,
    LTTNG_UST_TP_ARGS(const struct dtrace_floor_i4s4 *, a),
    LTTNG_UST_TP_FIELDS(
        lttng_ust_field_string(proc, a->proc)
        lttng_ust_field_string(user_tag, a->user_tag)
        lttng_ust_field_integer(int64_t, i1, a->i1)
        lttng_ust_field_integer(int64_t, i2, a->i2)
        lttng_ust_field_integer(int64_t, i3, a->i3)
        lttng_ust_field_integer(int64_t, i4, a->i4)
        lttng_ust_field_string(s1, a->s1)
        lttng_ust_field_string(s2, a->s2)
        lttng_ust_field_string(s3, a->s3)
        lttng_ust_field_string(s4, a->s4)))

#endif /* DTRACE_FLOOR_TP_H */

#include <lttng/tracepoint-event.h>
