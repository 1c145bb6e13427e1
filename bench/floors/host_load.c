/*
 * A busy host's work, for bench/os_bench.erl: what the kernel's
 * scheduler and fault events cost every task on the host while a tracer
 * listens to them for one node.
 *
 *   host_load switches N   two processes pinned to one CPU ping-pong a byte
 *                          over pipes N times: prints ns per context switch
 *   host_load faults MB R  touches every page of MB fresh megabytes, R
 *                          times: prints ns per page fault
 *
 * Neither is the node: a tracer filtering on the node's threads rejects
 * their events, and what each still costs them is the floor (the kernel's
 * tracepoint and BPF dispatch) plus that filter.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
        perror("sched_setaffinity");
        exit(1);
    }
}

static int switches(long n)
{
    int ping[2], pong[2];
    char c = 'x';
    if (pipe(ping) != 0 || pipe(pong) != 0) {
        perror("pipe");
        return 1;
    }
    /* One CPU, the last: each round trip is two context switches. */
    pin((int)sysconf(_SC_NPROCESSORS_ONLN) - 1);
    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 1;
    }
    if (child == 0) {
        for (long i = 0; i < n; i++) {
            if (read(ping[0], &c, 1) != 1 || write(pong[1], &c, 1) != 1)
                _exit(1);
        }
        _exit(0);
    }
    long long t0 = now_ns();
    for (long i = 0; i < n; i++) {
        if (write(ping[1], &c, 1) != 1 || read(pong[0], &c, 1) != 1)
            return 1;
    }
    long long t1 = now_ns();
    waitpid(child, NULL, 0);
    printf("%.1f\n", (double)(t1 - t0) / (2.0 * (double)n));
    return 0;
}

static int faults(long mb, long rounds)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t size = (size_t)mb << 20;
    long long total = 0;
    long count = 0;
    for (long r = 0; r < rounds; r++) {
        char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            perror("mmap");
            return 1;
        }
        /* No transparent huge pages: one fault a page. */
        madvise(p, size, MADV_NOHUGEPAGE);
        long long t0 = now_ns();
        for (size_t off = 0; off < size; off += (size_t)page)
            p[off] = 1;
        total += now_ns() - t0;
        count += (long)(size / (size_t)page);
        munmap(p, size);
    }
    printf("%.1f\n", (double)total / (double)count);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "switches") == 0)
        return switches(atol(argv[2]));
    if (argc >= 4 && strcmp(argv[1], "faults") == 0)
        return faults(atol(argv[2]), atol(argv[3]));
    fprintf(stderr, "usage: host_load switches N | faults MB ROUNDS\n");
    return 2;
}
