/*
 * The uprobe floor's probe site: one bare sys/sdt.h site, provider
 * `dtrace_floor', probe `hit', built by bench/dtrace_floors.erl into a
 * shared library (a NIF's sites are in a .so) or into the driver itself:
 *
 *   cc -Wall -Wextra -O2 -fPIC -shared floor_site.c -o libdtrace_floor_nop1.so
 *   cc ... '-DFLOOR_SITE=.byte 0x0f;.byte 0x1f;.byte 0x44;.byte 0x00;.byte 0x00' \
 *       ...                                           -o libdtrace_floor_nop5.so
 *
 * FLOOR_SITE, the site's instruction as assembler text, one `.byte' per
 * byte separated by `;' (see below), is how the bench builds each site
 * form from its bytes: the 1-byte nop, the library's (the catalogue's
 * `Arch::site': `nop; nop10'), the 5-byte nop.
 *
 * Its note has the argument count and kinds of the library's
 * erlang:user_trace__i4s4 (readelf -n of priv/dtrace_nif.so):
 *   8@%rdi 8@%rsi -8@%rdx -8@%rcx -8@%r8 -8@%r9 8@%r10 8@%r11 8@%r12 8@%r13
 * i.e. two strings, four int64, four strings, each in the same register,
 * so that a tracer reads the same note and fetches the same arguments.
 *
 * Nothing here is copied from sys/sdt.h; these are the facts of
 * systemtap-sdt-dev 4.8's <sys/sdt.h> it relies on:
 * - with _SDT_HAS_SEMAPHORES defined, the note's semaphore field is the
 *   address of `PROVIDER_NAME_semaphore', which the program must define
 *   (STAP_PROBEn only references it). Tracers increment it while they
 *   listen; the kernel does it itself (uprobe ref_ctr_offset, a file
 *   offset), so it must live in a file-backed writable section: `.probes',
 *   the section `dtrace -G' uses.
 * - the site's instruction is the macro _SDT_NOP, defined with a plain
 *   #define (no #ifndef: defining it before the include would be
 *   overwritten), and only expanded where STAP_PROBEn is used. So it can be
 *   redefined after the include. The replacement must contain no comma
 *   (the note macros pass it through a one-argument stringizing macro) and
 *   no bare `%' (it ends up in an extended asm template), which rules out
 *   `.byte 0x0f, 0x1f, ...' and `nopl 0x0(%rax,%rax,1)'; `;' separates
 *   statements in GNU as on x86, so `.byte 0x0f;.byte 0x1f;...' works.
 *   The bench checks each built site's bytes with objdump.
 * - each argument's location is chosen by the compiler under the
 *   constraint "nor" (STAP_SDT_ARG_CONSTRAINT); a local register variable
 *   is neither a constant nor in memory, so it is put in its register, and
 *   the note names that register.
 */
#include <stdint.h>

#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

/* The provider: dtrace_floor unless FLOOR_PROVIDER says otherwise. Each
 * object loaded into one node needs a provider of its own: bpftrace 0.17,
 * attached with -p, fails on a provider:probe that two of the process's
 * objects define ("Could not resolve symbol"). */
#ifndef FLOOR_PROVIDER
#define FLOOR_PROVIDER dtrace_floor
#endif
#define FLOOR_PASTE2(a, b) a##b
#define FLOOR_PASTE(a, b) FLOOR_PASTE2(a, b)
#define FLOOR_SEMAPHORE FLOOR_PASTE(FLOOR_PROVIDER, _hit_semaphore)

#ifdef FLOOR_SITE
/* The site form (see the top of this file). Kernel 6.18 optimizes a
 * uprobe on a 5-byte nop (it rewrites the nop into a call after the first
 * hit instead of trapping on an int3); the 1-byte `nop', and the library's
 * `nop; nop10' probed on its `nop', always trap. */
#undef _SDT_NOP
#define _SDT_NOP FLOOR_SITE
#endif

/* The semaphore (see above). Hidden: the site reads its own copy, PC
 * relative, as the library's Rust statics are read. */
__attribute__((section(".probes"), visibility("hidden")))
unsigned short FLOOR_SEMAPHORE = 0;

/* Is a tracer listening? For the driver's wait. Not inlined into the
 * driver: it is in another object (and, for the .so builds, reached
 * through dlsym). */
__attribute__((noinline, visibility("default")))
int dtrace_floor_enabled(void)
{
    return __atomic_load_n(&FLOOR_SEMAPHORE, __ATOMIC_RELAXED) != 0;
}

/* Adds delta to the semaphore, as a tracer does, for the driver's `raised'
 * runs: the site then runs whether a tracer listens or not (a uprobe
 * defined by hand, which raises no semaphore, sees every call). */
__attribute__((noinline, visibility("default")))
void dtrace_floor_semaphore_add(int delta)
{
    __atomic_fetch_add(&FLOOR_SEMAPHORE, (unsigned short)delta, __ATOMIC_RELAXED);
}

/*
 * What an enabled probe costs whatever library fires it: a call into the
 * library, the semaphore check, the arguments in their registers, the site.
 * Returns 1 if it fired (the semaphore was raised), 0 otherwise, as the
 * library's NIFs check the semaphore before anything else.
 */
__attribute__((noinline, visibility("default")))
int dtrace_floor_fire(const char *proc, const char *tag, int64_t i1, int64_t i2, int64_t i3,
                      int64_t i4, const char *s1, const char *s2, const char *s3, const char *s4)
{
    if (__builtin_expect(__atomic_load_n(&FLOOR_SEMAPHORE, __ATOMIC_RELAXED) == 0, 1))
        return 0;
    /* The library's registers (see the top of this file). */
    register const char *a1 __asm__("rdi") = proc;
    register const char *a2 __asm__("rsi") = tag;
    register int64_t a3 __asm__("rdx") = i1;
    register int64_t a4 __asm__("rcx") = i2;
    register int64_t a5 __asm__("r8") = i3;
    register int64_t a6 __asm__("r9") = i4;
    register const char *a7 __asm__("r10") = s1;
    register const char *a8 __asm__("r11") = s2;
    register const char *a9 __asm__("r12") = s3;
    register const char *a10 __asm__("r13") = s4;
    STAP_PROBE10(FLOOR_PROVIDER, hit, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10);
    return 1;
}
