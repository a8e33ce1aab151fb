/* The loopback ceiling of the relay benchmark: a minimal epoll echo server and a client that
 * keeps `window` messages of `size` bytes in flight on each of `connections` TCP connections.
 * No framing, no parsing, no allocation: what one core can move through the kernel's loopback.
 *
 *   loopback server PORT
 *   loopback client PORT CONNECTIONS WINDOW MESSAGES [SIZE]
 *
 * The client prints one JSON line: {"round_trips_per_second": N, "messages": M, "seconds": S}.
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
#include <sys/socket.h>
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

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[1], "server") == 0) return serve(atoi(argv[2]));
    if (argc >= 6 && strcmp(argv[1], "client") == 0)
        return client(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atol(argv[5]), argc >= 7 ? atoi(argv[6]) : 300);
    fprintf(stderr, "usage: loopback server PORT | loopback client PORT CONNECTIONS WINDOW MESSAGES [SIZE]\n");
    return 2;
}
