/*
 * The uprobe floor's driver (bench/dtrace_floors.erl): fires the bare site
 * of floor_site.c N times and prints the time per call.
 *
 *   floor_uprobe_driver LIB N wait|nowait|raised
 *   floor_uprobe_driver LIB MS stall
 *
 * LIB is a build of floor_site.c as a shared library, opened with dlopen:
 * a NIF's sites are in a .so, and a uprobe in a .so may cost what one in
 * the executable does not. LIB `-' uses the site linked into this
 * executable instead (built with -DFLOOR_SELF), for comparison.
 *
 * Prints `pid <PID>' once LIB is loaded: `bpftrace -p PID' resolves a
 * usdt probe of a library only in a process that has it mapped already.
 * Then, with `wait', polls the semaphore until a tracer raises it (60 s at
 * most: exit 2); with `nowait', the semaphore must be down (exit 3 if not):
 * that run is the same loop, disabled; with `raised', the driver raises the
 * semaphore itself (and lowers it at the end): the site runs on every call,
 * traced by whatever uprobe is on it (perf on a uprobe defined by hand,
 * which raises none) or by none. Then a warm-up of N/10 calls, N
 * calls timed with CLOCK_MONOTONIC, and prints
 *   fired <number of the N calls that fired>
 *   hit_ns <ns per call>
 * Each call goes through a function pointer to a function of another
 * object, so it is never inlined (a real NIF calls a function in a .so).
 *
 * With `stall': a request loop for MS milliseconds at most, or until 1 s
 * after a tracer left, each request about 1 us of work and a call of the
 * site (which fires while a tracer listens), for what attaching and
 * detaching a tracer costs a program (bench/stall_bench.erl). Prints
 *   ready                 (once it knows how long 1 us of work is)
 *   request_ns <mean ns per request>
 *   rise <ms from the start at which the loop saw the semaphore raised>
 *   fall <ms ... lowered>
 *   gap <ms from the start> <us between two requests>   (each over 20 us)
 */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int (*fire_fn)(const char *, const char *, int64_t, int64_t, int64_t, int64_t,
                       const char *, const char *, const char *, const char *);
typedef int (*enabled_fn)(void);
typedef void (*add_fn)(int);

/* About 1 us of work: k rounds of an LCG the compiler cannot drop. */
static volatile unsigned long sink;

static void spin(long k)
{
    unsigned long x = sink;
    for (long i = 0; i < k; i++)
        x = x * 6364136223846793005UL + 1442695040888963407UL;
    sink = x;
}

#ifdef FLOOR_SELF
/* floor_site.c, linked in. */
int dtrace_floor_fire(const char *, const char *, int64_t, int64_t, int64_t, int64_t,
                      const char *, const char *, const char *, const char *);
int dtrace_floor_enabled(void);
void dtrace_floor_semaphore_add(int);
#endif

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc != 4 || (strcmp(argv[3], "wait") != 0 && strcmp(argv[3], "nowait") != 0
                      && strcmp(argv[3], "raised") != 0 && strcmp(argv[3], "stall") != 0)) {
        fprintf(stderr, "usage: %s LIB|- N wait|nowait|raised, %s LIB|- MS stall\n", argv[0], argv[0]);
        return 1;
    }
    long n = strtol(argv[2], NULL, 10);
    if (n <= 0) {
        fprintf(stderr, "bad N: %s\n", argv[2]);
        return 1;
    }
    /* With a library, calls go through the pointers dlsym returns, as the
     * VM calls a NIF; with the linked-in site, they are direct calls. */
    fire_fn fire;
    enabled_fn enabled;
    add_fn add;
    if (strcmp(argv[1], "-") == 0) {
#ifdef FLOOR_SELF
        fire = dtrace_floor_fire;
        enabled = dtrace_floor_enabled;
        add = dtrace_floor_semaphore_add;
#else
        fprintf(stderr, "this driver has no site of its own: give a library\n");
        return 1;
#endif
    } else {
        void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
        if (lib == NULL) {
            fprintf(stderr, "dlopen: %s\n", dlerror());
            return 1;
        }
        /* POSIX's way of storing dlsym's void * into a function pointer. */
        *(void **)&fire = dlsym(lib, "dtrace_floor_fire");
        *(void **)&enabled = dlsym(lib, "dtrace_floor_enabled");
        *(void **)&add = dlsym(lib, "dtrace_floor_semaphore_add");
        if (fire == NULL || enabled == NULL || add == NULL) {
            fprintf(stderr, "dlsym: %s\n", dlerror());
            return 1;
        }
    }
    printf("pid %ld\n", (long)getpid());
    fflush(stdout);

    if (strcmp(argv[3], "stall") == 0) {
        /* k for 1 us of spin, from 100 ms of it. */
        long k = 1000;
        double c0 = now_ns();
        long rounds = 0;
        while (now_ns() - c0 < 100e6) {
            spin(k);
            rounds++;
        }
        k = (long)((double)k * 1000.0 / ((now_ns() - c0) / (double)rounds));
        if (k < 1)
            k = 1;
        printf("ready\n");
        fflush(stdout);
        static double gap_at[65536], gap_us[65536];
        long gaps = 0, requests = 0;
        int was = enabled();
        double start = now_ns(), end = start + (double)n * 1e6, prev = start, t = start;
        while (t < end) {
            spin(k);
            fire("<0.84.0>", "", requests, 2, 3, 4, "ab", "cd", NULL, NULL);
            requests++;
            t = now_ns();
            int on = enabled();
            if (on != was) {
                printf("%s %.3f\n", on ? "rise" : "fall", (t - start) / 1e6);
                was = on;
                if (!on && t + 1e9 < end)
                    end = t + 1e9;
            }
            if (t - prev > 20e3 && gaps < 65536) {
                gap_at[gaps] = (t - start) / 1e6;
                gap_us[gaps++] = (t - prev) / 1e3;
            }
            prev = t;
        }
        printf("request_ns %.1f\n", (t - start) / (double)requests);
        for (long i = 0; i < gaps; i++)
            printf("gap %.3f %.1f\n", gap_at[i], gap_us[i]);
        fflush(stdout);
        return 0;
    }

    if (strcmp(argv[3], "wait") == 0) {
        const struct timespec ms = {0, 1000000};
        double deadline = now_ns() + 60e9;
        while (!enabled()) {
            if (now_ns() > deadline) {
                fprintf(stderr, "no tracer raised the semaphore within 60 s\n");
                return 2;
            }
            nanosleep(&ms, NULL);
        }
    } else if (strcmp(argv[3], "raised") == 0) {
        add(1);
    } else if (enabled()) {
        fprintf(stderr, "the semaphore is raised: a tracer is attached\n");
        return 3;
    }

    /* The values the library's floor passes (a pid text, a tag, ints, two
     * short strings, two absent strings); i1 varies. */
    long fired = 0;
    for (long i = 0; i < n / 10; i++)
        fire("<0.84.0>", "", i, 2, 3, 4, "ab", "cd", NULL, NULL);
    double t0 = now_ns();
    for (long i = 0; i < n; i++)
        fired += fire("<0.84.0>", "", i, 2, 3, 4, "ab", "cd", NULL, NULL);
    double t1 = now_ns();
    if (strcmp(argv[3], "raised") == 0)
        add(-1);
    printf("fired %ld\nhit_ns %.2f\n", fired, (t1 - t0) / (double)n);
    fflush(stdout);
    return 0;
}
