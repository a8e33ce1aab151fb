/* The loopback ceiling of the relay benchmark: a minimal epoll echo server and a client that
 * keeps `window` messages of `size` bytes in flight on each of `connections` TCP connections.
 * No framing, no parsing, no allocation: what one core can move through the kernel's loopback.
 *
 *   loopback server PORT
 *   loopback client PORT CONNECTIONS WINDOW MESSAGES [SIZE]
 *   loopback paced PORT CONNECTIONS RATE MESSAGES [SIZE] [IDLE]
 *
 * The client prints one JSON line: {"round_trips_per_second": N, "messages": M, "seconds": S}.
 * The paced client is the latency section's reference: it first opens IDLE connections that
 * stay silent (as many as the relay's idle connections), then sends RATE messages a second
 * round robin over CONNECTIONS, each starting with its send time, and measures each echo's
 * round trip: {"rate": R, "messages": M, "seconds": S, "p50_us": …, "p99_us": …, "p999_us": …}.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what) {
    perror(what);
    exit(1);
}

static struct sockaddr_in loopback(int port) {
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return address;
}

static int serve(int port) {
    int listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in address = loopback(port);
    if (bind(listener, (struct sockaddr *)&address, sizeof address) < 0) die("bind");
    if (listen(listener, 1024) < 0) die("listen");
    int poller = epoll_create1(0);
    struct epoll_event event = {.events = EPOLLIN, .data.fd = listener};
    epoll_ctl(poller, EPOLL_CTL_ADD, listener, &event);
    printf("listening\n");
    fflush(stdout);
    static char buffer[65536];
    struct epoll_event ready[256];
    for (;;) {
        int count = epoll_wait(poller, ready, 256, -1);
        for (int i = 0; i < count; i++) {
            int fd = ready[i].data.fd;
            if (fd == listener) {
                int client;
                while ((client = accept4(listener, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    struct epoll_event add = {.events = EPOLLIN, .data.fd = client};
                    epoll_ctl(poller, EPOLL_CTL_ADD, client, &add);
                }
                continue;
            }
            ssize_t got = read(fd, buffer, sizeof buffer);
            if (got <= 0) {
                if (got < 0 && errno == EAGAIN) continue;
                close(fd);
                continue;
            }
            /* Echo everything; the client never has more than its window in flight, far below
             * the socket buffer, so a short write does not happen in this benchmark. */
            if (write(fd, buffer, (size_t)got) != got) die("short write");
        }
    }
    return 0;
}

static double now(void) {
    struct timespec time;
    clock_gettime(CLOCK_MONOTONIC, &time);
    return (double)time.tv_sec + (double)time.tv_nsec / 1e9;
}

static int client(int port, int connections, int window, long messages, int size) {
    int poller = epoll_create1(0);
    long *pending = calloc((size_t)connections, sizeof(long)); /* bytes received, not yet a whole message */
    int *fds = calloc((size_t)connections, sizeof(int));
    char *message = malloc((size_t)size * (size_t)window);
    memset(message, 'a', (size_t)size * (size_t)window);
    int one = 1;
    for (int i = 0; i < connections; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in address = loopback(port);
        if (connect(fd, (struct sockaddr *)&address, sizeof address) < 0) die("connect");
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        fds[i] = fd;
        struct epoll_event add = {.events = EPOLLIN, .data.u32 = (unsigned)i};
        epoll_ctl(poller, EPOLL_CTL_ADD, fd, &add);
    }
    double started = now();
    for (int i = 0; i < connections; i++)
        for (int k = 0; k < window; k++)
            if (write(fds[i], message, (size_t)size) != size) die("write");
    long received = 0;
    static char buffer[65536];
    struct epoll_event ready[256];
    while (received < messages) {
        int count = epoll_wait(poller, ready, 256, -1);
        for (int r = 0; r < count; r++) {
            int i = (int)ready[r].data.u32;
            ssize_t got = read(fds[i], buffer, sizeof buffer);
            if (got <= 0) die("read");
            pending[i] += got;
            long whole = pending[i] / size;
            pending[i] %= size;
            received += whole;
            /* One new message for each one that came back. */
            if (whole > 0 && write(fds[i], message, (size_t)(whole * size)) != whole * size) die("write");
        }
    }
    double seconds = now() - started;
    printf("{\"round_trips_per_second\": %.0f, \"messages\": %ld, \"seconds\": %.3f}\n", (double)received / seconds, received, seconds);
    return 0;
}

static uint64_t now_micros(void) {
    struct timespec time;
    clock_gettime(CLOCK_MONOTONIC, &time);
    return (uint64_t)time.tv_sec * 1000000u + (uint64_t)time.tv_nsec / 1000u;
}

static int connect_loopback(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in address = loopback(port);
    if (fd < 0) die("socket (raise the descriptor limit)");
    if (connect(fd, (struct sockaddr *)&address, sizeof address) < 0) die("connect");
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static int by_value(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static int paced(int port, int connections, int rate, long messages, int size, int idle) {
    struct rlimit limit;
    getrlimit(RLIMIT_NOFILE, &limit);
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
    for (int i = 0; i < idle; i++) connect_loopback(port);
    int poller = epoll_create1(0);
    int *fds = calloc((size_t)connections, sizeof(int));
    char *partial = calloc((size_t)connections, (size_t)size); /* a message's bytes so far */
    int *have = calloc((size_t)connections, sizeof(int));
    uint32_t *latencies = malloc(sizeof(uint32_t) * (size_t)messages);
    for (int i = 0; i < connections; i++) {
        fds[i] = connect_loopback(port);
        struct epoll_event add = {.events = EPOLLIN, .data.u32 = (unsigned)i};
        epoll_ctl(poller, EPOLL_CTL_ADD, fds[i], &add);
    }
    int timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    struct itimerspec every = {.it_interval = {0, 100000}, .it_value = {0, 100000}};
    timerfd_settime(timer, 0, &every, NULL);
    struct epoll_event tick = {.events = EPOLLIN, .data.u32 = UINT32_MAX};
    epoll_ctl(poller, EPOLL_CTL_ADD, timer, &tick);
    char *message = malloc((size_t)size);
    long sent = 0, received = 0;
    double started = now();
    static char buffer[65536];
    struct epoll_event ready[256];
    while (received < messages) {
        int count = epoll_wait(poller, ready, 256, -1);
        for (int r = 0; r < count; r++) {
            if (ready[r].data.u32 == UINT32_MAX) {
                uint64_t expirations;
                if (read(timer, &expirations, sizeof expirations) < 0) {}
                long due = (long)((now() - started) * rate);
                if (due > messages) due = messages;
                for (; sent < due; sent++) {
                    memset(message, 'a', (size_t)size);
                    int digits = snprintf(message, 32, "%llu", (unsigned long long)now_micros());
                    message[digits] = 'a';
                    if (write(fds[sent % connections], message, (size_t)size) != size) die("write");
                }
                continue;
            }
            int i = (int)ready[r].data.u32;
            ssize_t got = read(fds[i], buffer, sizeof buffer);
            if (got <= 0) die("read");
            for (ssize_t at = 0; at < got;) {
                int take = size - have[i] < got - at ? size - have[i] : (int)(got - at);
                memcpy(partial + (size_t)i * (size_t)size + have[i], buffer + at, (size_t)take);
                have[i] += take, at += take;
                if (have[i] == size) {
                    have[i] = 0;
                    uint64_t stamp = strtoull(partial + (size_t)i * (size_t)size, NULL, 10);
                    latencies[received++] = (uint32_t)(now_micros() - stamp);
                }
            }
        }
    }
    double seconds = now() - started;
    qsort(latencies, (size_t)received, sizeof(uint32_t), by_value);
    printf("{\"rate\": %d, \"messages\": %ld, \"seconds\": %.3f, \"p50_us\": %u, \"p99_us\": %u, \"p999_us\": %u}\n", rate, received, seconds,
           latencies[(long)(received * 0.5)], latencies[(long)(received * 0.99)], latencies[(long)(received * 0.999)]);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[1], "server") == 0) return serve(atoi(argv[2]));
    if (argc >= 6 && strcmp(argv[1], "client") == 0)
        return client(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atol(argv[5]), argc >= 7 ? atoi(argv[6]) : 300);
    if (argc >= 6 && strcmp(argv[1], "paced") == 0)
        return paced(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atol(argv[5]), argc >= 7 ? atoi(argv[6]) : 300,
                     argc >= 8 ? atoi(argv[7]) : 0);
    fprintf(stderr, "usage: loopback server PORT | loopback client PORT CONNECTIONS WINDOW MESSAGES [SIZE]"
                    " | loopback paced PORT CONNECTIONS RATE MESSAGES [SIZE] [IDLE]\n");
    return 2;
}
