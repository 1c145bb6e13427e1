/*
 * The uprobe floor inside the node: a NIF library whose one NIF, hit/0,
 * calls the bare site of floor_site.c (compiled into the same library),
 * for the tracer module-less module dtrace_floor_site_nop1 or _nop5
 * (floor_site_nif.erl, compiled with FLOOR_MODULE). A probe of the
 * library is hit by a scheduler thread of a VM, whose address space (and
 * so the kernel's lookup of the uprobe on each hit) is larger than a small
 * C program's: the trap measured here, hit/0 under bpftrace minus hit/0
 * with the semaphore down, is the floor the library's enabled probes are
 * compared with.
 *
 *   cc -Wall -Wextra -O2 -fPIC -shared -I<erts include> \
 *      -DFLOOR_MODULE=dtrace_floor_site_nop1 floor_site_nif.c floor_site.c \
 *      -o dtrace_floor_site_nop1.so
 */
#include <stdint.h>
#include <erl_nif.h>

#ifndef FLOOR_MODULE
#error "FLOOR_MODULE names the Erlang module"
#endif

/* floor_site.c */
int dtrace_floor_fire(const char *proc, const char *tag, int64_t i1, int64_t i2, int64_t i3,
                      int64_t i4, const char *s1, const char *s2, const char *s3, const char *s4);

static ERL_NIF_TERM atom_true;
static ERL_NIF_TERM atom_false;

/* hit() -> boolean(): fires the site with constant arguments of the
 * shape of a dtrace:p/4 call if a tracer listens (true), else false. */
static ERL_NIF_TERM hit(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)env; (void)argc; (void)argv;
    return dtrace_floor_fire("<0.84.0>", "", 1, 2, 0, 0, "ab", "cd", NULL, NULL) ? atom_true : atom_false;
}

/* A buffer the cache-thrashing variant touches between hits. */
#define TOUCH_MAX (8 << 20)
static volatile unsigned char touch_buf[TOUCH_MAX];

/* hit_touching(Bytes) -> boolean(): touches (writes) one byte of every
 * 64-byte line of the first Bytes bytes of touch_buf, then hits the site
 * as hit/0. The trap of a site hit in a tight loop finds the kernel's
 * uprobe path, bpftrace's program and their data in the caches; hit
 * after touching, it finds them as a site hit between other work does
 * (BENCHMARKS.md, "Floors apart and together"). */
static ERL_NIF_TERM hit_touching(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    unsigned long bytes;
    (void)argc;
    if (!enif_get_ulong(env, argv[0], &bytes) || bytes > TOUCH_MAX)
        return enif_make_badarg(env);
    for (unsigned long i = 0; i < bytes; i += 64)
        touch_buf[i]++;
    return dtrace_floor_fire("<0.84.0>", "", 1, 2, 0, 0, "ab", "cd", NULL, NULL) ? atom_true : atom_false;
}

static int load(ErlNifEnv *env, void **priv, ERL_NIF_TERM info)
{
    (void)priv; (void)info;
    atom_true = enif_make_atom(env, "true");
    atom_false = enif_make_atom(env, "false");
    return 0;
}

static ErlNifFunc funcs[] = {
    {"hit", 0, hit, 0},
    {"hit_touching", 1, hit_touching, 0},
};

/* ERL_NIF_INIT stringizes its first argument: one more macro level so
 * that FLOOR_MODULE is expanded to the module's name first. */
#define FLOOR_NIF_INIT(MODULE) ERL_NIF_INIT(MODULE, funcs, load, NULL, NULL, NULL)
FLOOR_NIF_INIT(FLOOR_MODULE)
