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
 * With -DFLOOR_TEXT as well (dtrace_floor_tracer_sdt_text,
 * dtrace_floor_tracer_lttng_text), trace/5 first computes what OTP's
 * probe carries about the traced message, the cheapest way a NIF can:
 * - LTTng (message_send's `message' field): its text, written by the
 *   VM's own formatter, enif_snprintf's %T, into a 256-byte buffer (OTP's
 *   DTRACE_TERM_BUF_SIZE) with a precision of 64 (the bound the library
 *   gives %T);
 * - SDT (message__send's size argument): its size in words, through the
 *   NIF API (flat_size() below: the rules of the library's
 *   native/dtrace_nif/src/flat_size.rs, in C, with the same bounds),
 *   since erts' own size_object() is not in the NIF API.
 * The sender's and receiver's texts stay constants: a pid's text is the
 * same for the life of the node, so a library can cache it (the library
 * does; %T of both pids costs about 100 ns more per message here), and a
 * floor must be what any library pays at least.
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
/* One macro level more, so that FLOOR_TP is expanded before lttng-ust's
 * token pasting. */
#define FLOOR_TP_ENABLED(provider, name) lttng_ust_tracepoint_enabled(provider, name)
#define FLOOR_TP_DO(provider, name, ...) lttng_ust_do_tracepoint(provider, name, __VA_ARGS__)
#endif

static ERL_NIF_TERM atom_trace;
static ERL_NIF_TERM atom_ok;
static ERL_NIF_TERM atom_true;
static ERL_NIF_TERM atom_false;

#if defined(FLOOR_TEXT) && defined(FLOOR_SINK_SDT)
#define FLOOR_MAX_VISITS 10000
#define FLOOR_MAX_PENDING 512
/*
 * The flat size of term in words (erts_debug:flat_size/1 on a 64-bit VM),
 * or -1, through the NIF API only: immediates 0, a list cell 2, a tuple
 * 1 + arity, a float 2, a bignum of one digit 2, a heap binary (<= 64
 * bytes) 2 + ceil(bytes / 8), a larger one 6, a flatmap 4 + 2 x keys, a
 * remote pid 4, a reference 3; -1 for funs, larger integers, maps of more
 * than 32 keys, and past the bounds: 10,000 terms visited, 512 waiting
 * (here each boxed element of a tuple waits on its own, where the library
 * keeps one cursor per tuple; no message of the bench comes near). (The
 * OTP 27 size of a large binary, 8, does not change the work.)
 */
static long flat_size(ErlNifEnv *env, ERL_NIF_TERM term)
{
    ERL_NIF_TERM pending[FLOOR_MAX_PENDING];
    int n = 0, visits = 0;
    long size = 0;
    pending[n++] = term;
    while (n > 0) {
        ERL_NIF_TERM t = pending[--n], head, tail;
        const ERL_NIF_TERM *elems;
        int arity;
        size_t keys;
        ErlNifBinary bin;
        ErlNifPid pid;
        ErlNifSInt64 i64;
        ErlNifUInt64 u64;
        if (++visits > FLOOR_MAX_VISITS)
            return -1;
        if ((t & 3) == 3) /* an immediate: ERTS's primary tag 11 */
            continue;
        switch (enif_term_type(env, t)) {
        case ERL_NIF_TERM_TYPE_ATOM: case ERL_NIF_TERM_TYPE_PORT: break;
        case ERL_NIF_TERM_TYPE_INTEGER:
            if (enif_get_int64(env, t, &i64))
                size += (i64 >= -(1LL << 59) && i64 < (1LL << 59)) ? 0 : 2;
            else if (enif_get_uint64(env, t, &u64))
                size += 2;
            else
                return -1;
            break;
        case ERL_NIF_TERM_TYPE_FLOAT: size += 2; break;
        case ERL_NIF_TERM_TYPE_PID: size += enif_get_local_pid(env, t, &pid) ? 0 : 4; break;
        case ERL_NIF_TERM_TYPE_REFERENCE: size += 3; break;
        case ERL_NIF_TERM_TYPE_BITSTRING:
            if (!enif_inspect_binary(env, t, &bin)) return -1;
            size += bin.size <= 64 ? 2 + (long)((bin.size + 7) / 8) : 6;
            break;
        case ERL_NIF_TERM_TYPE_TUPLE:
            if (!enif_get_tuple(env, t, &arity, &elems)) return -1;
            if (arity > 0) {
                size += 1 + arity;
                for (int i = arity - 1; i >= 0; i--) {
                    if ((elems[i] & 3) == 3) continue;
                    if (n == FLOOR_MAX_PENDING) return -1;
                    pending[n++] = elems[i];
                }
            }
            break;
        case ERL_NIF_TERM_TYPE_LIST:
            while (enif_get_list_cell(env, t, &head, &tail)) {
                size += 2;
                if (++visits > FLOOR_MAX_VISITS) return -1;
                if ((head & 3) != 3) {
                    if (n == FLOOR_MAX_PENDING) return -1;
                    pending[n++] = head;
                }
                t = tail;
            }
            if (!enif_is_empty_list(env, t)) {
                if (n == FLOOR_MAX_PENDING) return -1;
                pending[n++] = t;
            }
            break;
        case ERL_NIF_TERM_TYPE_MAP: {
            ErlNifMapIterator it;
            ERL_NIF_TERM k, v;
            if (!enif_get_map_size(env, t, &keys) || keys > 32) return -1;
            if (keys == 0) { size += 3; break; }
            if (!enif_map_iterator_create(env, t, &it, ERL_NIF_MAP_ITERATOR_FIRST)) return -1;
            for (size_t i = 0; i < keys; i++) {
                if (!enif_map_iterator_get_pair(env, &it, &k, &v) || n + 2 > FLOOR_MAX_PENDING) {
                    enif_map_iterator_destroy(env, &it);
                    return -1;
                }
                pending[n++] = k;
                pending[n++] = v;
                enif_map_iterator_next(env, &it);
            }
            enif_map_iterator_destroy(env, &it);
            size += 4 + 2 * (long)keys;
            break;
        }
        default: return -1; /* funs */
        }
    }
    return size;
}
#endif

#if defined(FLOOR_TEXT) && defined(FLOOR_SINK_LTTNG)
#define FLOOR_TEXT_BYTES 256
#define FLOOR_TEXT_NODES 64
/* %T of term into buf (cut at FLOOR_TEXT_BYTES - 1 bytes, NUL-ended). */
static const char *text(char *buf, ERL_NIF_TERM term, int precision)
{
    if (enif_snprintf(buf, FLOOR_TEXT_BYTES, "%.*T", precision, term) < 0)
        buf[0] = '\0';
    return buf;
}
#endif

/* sink_enabled() -> boolean(): does the sink listen (the site's semaphore
 * raised, the LTTng event enabled)? false for the variant without one. */
static ERL_NIF_TERM sink_enabled(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)env; (void)argc; (void)argv;
#if defined(FLOOR_SINK_SDT)
    return dtrace_floor_enabled() ? atom_true : atom_false;
#elif defined(FLOOR_SINK_LTTNG)
    return FLOOR_TP_ENABLED(FLOOR_TP, message_send) ? atom_true : atom_false;
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
#if defined(FLOOR_TEXT)
    /* argv: Tag, TracerState, Tracee, TraceTerm (the message), Opts. */
#if defined(FLOOR_SINK_SDT)
    if (dtrace_floor_enabled())
        (void)dtrace_floor_fire("<0.84.0>", "<0.85.0>", flat_size(env, argv[3]), 0, 0, 0,
                                NULL, NULL, NULL, NULL);
#elif defined(FLOOR_SINK_LTTNG)
    if (FLOOR_TP_ENABLED(FLOOR_TP, message_send)) {
        char message[FLOOR_TEXT_BYTES];
        struct dtrace_floor_message_send a = {"<0.84.0>", "<0.85.0>",
                                              text(message, argv[3], FLOOR_TEXT_NODES)};
        FLOOR_TP_DO(FLOOR_TP, message_send, &a);
    }
#endif
#elif defined(FLOOR_SINK_SDT)
    /* The arguments of message__send: sender, receiver, size, -1 x 3. */
    (void)dtrace_floor_fire("<0.84.0>", "<0.85.0>", 3, -1, -1, -1, NULL, NULL, NULL, NULL);
#elif defined(FLOOR_SINK_LTTNG)
    if (FLOOR_TP_ENABLED(FLOOR_TP, message_send)) {
        struct dtrace_floor_message_send a = {"<0.84.0>", "<0.85.0>", "ping"};
        FLOOR_TP_DO(FLOOR_TP, message_send, &a);
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
