/* How much of its core this machine takes from a running program: spins for SECONDS reading the
 * monotonic clock and counts the gaps between two reads, each a time the program was not on its
 * core (preempted by another process, an interrupt, or the hypervisor). Run one per core, pinned.
 *
 *   stall_probe SECONDS LABEL CORE [SLICE_MS]
 *
 * With SLICE_MS, it spins in slices of that length with a 100 ms sleep between them, which is
 * not counted: run at real-time priority (`chrt -f`), a probe that never sleeps would meet the
 * kernel's real-time throttle (50 ms of each second by default) and count it; in slices of
 * 500 ms it never does, so what it still finds is taken by interrupts or the hypervisor, which
 * no priority outranks.
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
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: stall_probe SECONDS LABEL CORE [SLICE_MS]\n");
        return 2;
    }
    double seconds = atof(argv[1]);
    double slice = argc == 5 ? atof(argv[4]) / 1000 : seconds;
    const struct timespec pause = {.tv_sec = 0, .tv_nsec = 100 * 1000 * 1000};
    double spun = 0, longest = 0, lost = 0;
    long over1 = 0, over10 = 0;
    while (spun < seconds) {
        double start = now(), last = start, length = slice < seconds - spun ? slice : seconds - spun;
        for (;;) {
            double t = now(), gap = t - last;
            last = t;
            if (gap >= 0.001) {
                over1++;
                lost += gap;
                if (gap >= 0.010) over10++;
                if (gap > longest) longest = gap;
            }
            if (t - start >= length) break;
        }
        spun += last - start;
        if (spun < seconds) nanosleep(&pause, NULL);
    }
    printf("{\"label\": \"%s\", \"core\": %s, \"seconds\": %.1f, \"gaps_1ms\": %ld, \"gaps_10ms\": %ld, "
           "\"longest_ms\": %.1f, \"lost_ms\": %.1f}\n",
           argv[2], argv[3], seconds, over1, over10, longest * 1000, lost * 1000);
    return 0;
}
