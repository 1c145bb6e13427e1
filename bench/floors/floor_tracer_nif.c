/*
 * The erl_tracer floor: the NIF library of the tracer module
 * dtrace_floor_tracer (dtrace_floor_tracer.erl), the cheapest tracer a
 * library can give erlang:trace/3 ({tracer, Module, State}, OTP's
 * erl_tracer behaviour). What a traced event costs with it is what the VM
 * charges for tracing an event through a tracer module, whatever that
 * tracer does:
 * - enabled/3 (TraceTag, TracerState, Tracee) answers `trace' for every
 *   tag, trace_status included (`remove' there would drop the tracer);
 * - trace/5 (Tag, TracerState, Tracee, TraceTerm, Opts) does nothing and
 *   returns `ok'.
 * No optional enabled_<tag>/3 or trace_<tag>/5 callbacks: the VM then
 * calls these two for every event, as erl_tracer documents.
 *
 *   cc -Wall -Wextra -O2 -fPIC -shared -I<erts include> floor_tracer_nif.c \
 *      -o dtrace_floor_tracer.so
 */
#include <stdint.h>
#include <erl_nif.h>

/*
 * Built three ways, one tracer module each (FLOOR_MODULE; the module
 * source is dtrace_floor_tracer.erl, compiled with the same name):
 * - dtrace_floor_tracer: trace/5 does nothing (the erl_tracer floor);
 * - dtrace_floor_tracer_sdt (-DFLOOR_SINK_SDT, with floor_site.c):
 *   trace/5 fires the bare SDT site of floor_site.c, with constant
 *   arguments, when a tracer listens: the erl_tracer floor plus the uprobe
 *   floor, paid in the same ping-pong as the library's message__send;
 * - dtrace_floor_tracer_lttng (-DFLOOR_SINK_LTTNG, with floor_tp.c and
 *   -llttng-ust): trace/5 records dtrace_floor:message_send (OTP's
 *   layout, constant texts) when a session enables it: the erl_tracer
 *   floor plus the LTTng floor, the same way.
 */
#ifndef FLOOR_MODULE
#define FLOOR_MODULE dtrace_floor_tracer
#endif

#if defined(FLOOR_SINK_SDT)
/* floor_site.c */
int dtrace_floor_enabled(void);
int dtrace_floor_fire(const char *proc, const char *tag, int64_t i1, int64_t i2, int64_t i3,
                      int64_t i4, const char *s1, const char *s2, const char *s3, const char *s4);
#elif defined(FLOOR_SINK_LTTNG)
/* This object defines the tracepoints of floor_tp.h (their state and the
 * registration of its call sites). */
#define LTTNG_UST_TRACEPOINT_DEFINE
#include "floor_tp.h"
#endif

static ERL_NIF_TERM atom_trace;
static ERL_NIF_TERM atom_ok;
static ERL_NIF_TERM atom_true;
static ERL_NIF_TERM atom_false;

/* sink_enabled() -> boolean(): does the sink listen (the site's semaphore
 * raised, the LTTng event enabled)? false for the variant without one. */
static ERL_NIF_TERM sink_enabled(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)env; (void)argc; (void)argv;
#if defined(FLOOR_SINK_SDT)
    return dtrace_floor_enabled() ? atom_true : atom_false;
#elif defined(FLOOR_SINK_LTTNG)
    return lttng_ust_tracepoint_enabled(dtrace_floor, message_send) ? atom_true : atom_false;
#else
    return atom_false;
#endif
}

static ERL_NIF_TERM enabled(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)env; (void)argc; (void)argv;
    return atom_trace;
}

static ERL_NIF_TERM trace(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)env; (void)argc; (void)argv;
#if defined(FLOOR_SINK_SDT)
    /* The arguments of message__send: sender, receiver, size, -1 x 3. */
    (void)dtrace_floor_fire("<0.84.0>", "<0.85.0>", 3, -1, -1, -1, NULL, NULL, NULL, NULL);
#elif defined(FLOOR_SINK_LTTNG)
    if (lttng_ust_tracepoint_enabled(dtrace_floor, message_send)) {
        struct dtrace_floor_message_send a = {"<0.84.0>", "<0.85.0>", "ping"};
        lttng_ust_do_tracepoint(dtrace_floor, message_send, &a);
    }
#endif
    return atom_ok;
}

/* Atoms live for ever: making them once at load is enough. */
static int load(ErlNifEnv *env, void **priv, ERL_NIF_TERM info)
{
    (void)priv; (void)info;
    atom_trace = enif_make_atom(env, "trace");
    atom_ok = enif_make_atom(env, "ok");
    atom_true = enif_make_atom(env, "true");
    atom_false = enif_make_atom(env, "false");
    return 0;
}

/* A reload of the module (new code over old) keeps the same library. */
static int upgrade(ErlNifEnv *env, void **priv, void **old_priv, ERL_NIF_TERM info)
{
    (void)old_priv;
    return load(env, priv, info);
}

static ErlNifFunc funcs[] = {
    {"enabled", 3, enabled, 0},
    {"trace", 5, trace, 0},
    {"sink_enabled", 0, sink_enabled, 0},
};

/* ERL_NIF_INIT stringizes its first argument: one more macro level so
 * that FLOOR_MODULE is expanded to the module's name first. */
#define FLOOR_NIF_INIT(MODULE) ERL_NIF_INIT(MODULE, funcs, load, NULL, upgrade, NULL)
FLOOR_NIF_INIT(FLOOR_MODULE)
