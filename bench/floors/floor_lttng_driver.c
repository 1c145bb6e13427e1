/*
 * The LTTng floor's driver (bench/dtrace_floors.erl): records N events of
 * provider dtrace_floor (floor_tp.h, floor_tp.c) and prints the time per
 * event.
 *
 *   floor_lttng_driver message_send|i4s4 N wait|nowait
 *
 * Built with floor_tp.c and -llttng-ust: liblttng-ust's constructor
 * registers the process with the session daemon at start (up to
 * LTTNG_UST_REGISTER_TIMEOUT, 3 s by default), and the daemon enables the
 * events of sessions that record them. Prints `pid <PID>'. With `wait',
 * polls the event's state until a session enables it (60 s at most:
 * exit 2); with `nowait', the event must be disabled (exit 3 if not):
 * that run is the same loop without a session. Then a warm-up of N/10
 * events, N events timed with CLOCK_MONOTONIC, and prints
 *   recorded <number of the N events that were enabled when fired>
 *   event_ns <ns per event>
 *
 * Each event is fired as the library fires its own: its enable state read
 * first (lttng_ust_tracepoint_enabled: one load of the tracepoint's
 * `state', as src/lttng.rs does), then a call to a function of another
 * object holding the tracepoint call with the fields in a struct (as
 * lttng/shim.c's call sites). The values are the library's: pid texts,
 * "ping"; for i4s4 the caller's pid, an empty tag, ints, "ab", "cd" and
 * two absent strings (NULL, as native/dtrace_nif/src/user.rs passes).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* LTTNG_UST_TRACEPOINT_DEFINE: this object defines the tracepoints (their
 * state and the registration of this executable's call sites). */
#define LTTNG_UST_TRACEPOINT_DEFINE
#include "floor_tp.h"

/* The call sites. noinline: a call, as from the NIF into its shim. */
__attribute__((noinline)) static void fire_message_send(const struct dtrace_floor_message_send *a)
{
    lttng_ust_tracepoint(dtrace_floor, message_send, a);
}

__attribute__((noinline)) static void fire_i4s4(const struct dtrace_floor_i4s4 *a)
{
    lttng_ust_tracepoint(dtrace_floor, user_trace_i4s4, a);
}

/* One event, as the library does it: check, then fire. 1 if recorded. */
static int one_message_send(long i)
{
    (void)i;
    if (!lttng_ust_tracepoint_enabled(dtrace_floor, message_send))
        return 0;
    struct dtrace_floor_message_send a = {"<0.84.0>", "<0.85.0>", "ping"};
    fire_message_send(&a);
    return 1;
}

static int one_i4s4(long i)
{
    if (!lttng_ust_tracepoint_enabled(dtrace_floor, user_trace_i4s4))
        return 0;
    struct dtrace_floor_i4s4 a = {"<0.84.0>", "", i, 2, 3, 4, "ab", "cd", NULL, NULL};
    fire_i4s4(&a);
    return 1;
}

static int is_enabled(int i4s4)
{
    return i4s4 ? lttng_ust_tracepoint_enabled(dtrace_floor, user_trace_i4s4)
                : lttng_ust_tracepoint_enabled(dtrace_floor, message_send);
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc != 4 || (strcmp(argv[1], "message_send") != 0 && strcmp(argv[1], "i4s4") != 0)
        || (strcmp(argv[3], "wait") != 0 && strcmp(argv[3], "nowait") != 0)) {
        fprintf(stderr, "usage: %s message_send|i4s4 N wait|nowait\n", argv[0]);
        return 1;
    }
    int i4s4 = strcmp(argv[1], "i4s4") == 0;
    long n = strtol(argv[2], NULL, 10);
    if (n <= 0) {
        fprintf(stderr, "bad N: %s\n", argv[2]);
        return 1;
    }
    int (*one)(long) = i4s4 ? one_i4s4 : one_message_send;
    printf("pid %ld\n", (long)getpid());
    fflush(stdout);

    if (strcmp(argv[3], "wait") == 0) {
        const struct timespec ms = {0, 1000000};
        double deadline = now_ns() + 60e9;
        while (!is_enabled(i4s4)) {
            if (now_ns() > deadline) {
                fprintf(stderr, "no session enabled the event within 60 s\n");
                return 2;
            }
            nanosleep(&ms, NULL);
        }
    } else if (is_enabled(i4s4)) {
        fprintf(stderr, "the event is enabled: a session records it\n");
        return 3;
    }

    long recorded = 0;
    for (long i = 0; i < n / 10; i++)
        one(i);
    double t0 = now_ns();
    for (long i = 0; i < n; i++)
        recorded += one(i);
    double t1 = now_ns();
    printf("recorded %ld\nevent_ns %.2f\n", recorded, (t1 - t0) / (double)n);
    fflush(stdout);
    return 0;
}
