/* How much of its core this machine takes from a running program: spins for SECONDS reading the
 * monotonic clock and counts the gaps between two reads, each a time the program was not on its
 * core (preempted by another process, an interrupt, or the hypervisor). Run one per core, pinned.
 *
 *   stall_probe SECONDS LABEL CORE
 *
 * Prints one JSON line: the gaps of 1 ms and more and of 10 ms and more, the longest, and
 * the time lost to gaps of 1 ms and more, in milliseconds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: stall_probe SECONDS LABEL CORE\n");
        return 2;
    }
    double seconds = atof(argv[1]);
    double start = now(), last = start, longest = 0, lost = 0;
    long over1 = 0, over10 = 0;
    for (;;) {
        double t = now(), gap = t - last;
        last = t;
        if (gap >= 0.001) {
            over1++;
            lost += gap;
            if (gap >= 0.010) over10++;
            if (gap > longest) longest = gap;
        }
        if (t - start >= seconds) break;
    }
    printf("{\"label\": \"%s\", \"core\": %s, \"seconds\": %.1f, \"gaps_1ms\": %ld, \"gaps_10ms\": %ld, "
           "\"longest_ms\": %.1f, \"lost_ms\": %.1f}\n",
           argv[2], argv[3], seconds, over1, over10, longest * 1000, lost * 1000);
    return 0;
}
