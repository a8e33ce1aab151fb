/* The load generator of make bench's relay, latency and idle sections: WebSocket clients on
 * one epoll loop, written in C so that the generator is not what saturates (the Swift one
 * topped out near 47,000 signals/s, below the server). Masked frames, as a browser sends them.
 *
 *   wsload relay --port P [--receiver-port P2] --key K --secret S
 *                [--pairs 50] [--window 20] [--messages 200000] [--rate R] [--refill-on-delivery]
 *
 * Pairs of users: each receiver joins a room of its own, then its sender joins it and sends
 * `signal`s of a 200-byte candidate to the receiver. Without --rate each sender keeps `window`
 * signals unanswered (one more for each `ok`), or with --refill-on-delivery `window` signals
 * undelivered (one more for each its receiver gets: across the nodes of a cluster the `ok`
 * comes before the signal has crossed, so only delivery bounds what is queued between them);
 * with --rate the signals go out paced, over all
 * pairs, each stamped with its send time, and the receivers measure the delay. The receivers
 * connect to P2 when given (another node of a cluster: every signal crosses between nodes).
 * Prints {"messages_per_second", "delivered", "seconds", "pairs"[, "rate", "p50_us", "p99_us",
 * "p999_us"]}.
 *
 *   wsload idle --port P --key K --secret S [--connections 10000] [--parallel 64] [--hold 30]
 *
 * Opens `connections` authenticated WebSockets (`parallel` handshakes at a time), prints
 * {"phase": "connected", "connections", "seconds", "connects_per_second"}, then holds them
 * `hold` seconds answering the server's pings and prints {"phase": "held", "connections",
 * "closed_while_held", "pings_answered", "hold_seconds"}.
 *
 * Tokens are HS256 JWTs signed here with the app's secret (OpenSSL's HMAC), as an app's
 * backend would sign them.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

enum role { IDLE, SENDER, RECEIVER };
enum state { CONNECTING, UPGRADING, OPEN, CLOSED, WAITING_RETRY };

typedef struct {
    int fd, index, port, attempts;
    enum role role;
    enum state state;
    double retry_at;
    unsigned char *rx;
    size_t rx_len, rx_cap;
    unsigned char *tx; /* what the socket did not take */
    size_t tx_len, tx_cap;
    int sent, flushing, blocked;
    char *frame; /* throughput mode: the whole signal; paced mode: up to the candidate */
    size_t frame_len;
} conn_t;

static int poller;
static conn_t *conns;
static int conn_count;
static const char *api_key, *secret;
static long opened, closed_count, pings_answered;
static int handshakes_in_flight, retries_waiting;
static unsigned run_id;

static void die(const char *what) {
    perror(what);
    exit(1);
}

static void fail(const char *message, const char *detail) {
    fprintf(stderr, "wsload: %s%s%.300s\n", message, detail ? ": " : "", detail ? detail : "");
    exit(2);
}

static double now(void) {
    struct timespec time;
    clock_gettime(CLOCK_MONOTONIC, &time);
    return (double)time.tv_sec + (double)time.tv_nsec / 1e9;
}

static uint64_t now_micros(void) {
    struct timespec time;
    clock_gettime(CLOCK_MONOTONIC, &time);
    return (uint64_t)time.tv_sec * 1000000u + (uint64_t)time.tv_nsec / 1000u;
}

static void *grow(void *buffer, size_t *capacity, size_t needed) {
    if (needed <= *capacity) return buffer;
    size_t size = *capacity ? *capacity : 512;
    while (size < needed) size *= 2;
    void *bigger = realloc(buffer, size);
    if (!bigger) die("realloc");
    *capacity = size;
    return bigger;
}

/* ---- Tokens ---- */

static size_t base64url(const unsigned char *in, size_t length, char *out) {
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t o = 0, i = 0;
    for (; i + 2 < length; i += 3) {
        unsigned v = (unsigned)in[i] << 16 | (unsigned)in[i + 1] << 8 | in[i + 2];
        out[o++] = alphabet[v >> 18 & 63], out[o++] = alphabet[v >> 12 & 63];
        out[o++] = alphabet[v >> 6 & 63], out[o++] = alphabet[v & 63];
    }
    if (i + 1 == length) {
        unsigned v = (unsigned)in[i] << 16;
        out[o++] = alphabet[v >> 18 & 63], out[o++] = alphabet[v >> 12 & 63];
    } else if (i + 2 == length) {
        unsigned v = (unsigned)in[i] << 16 | (unsigned)in[i + 1] << 8;
        out[o++] = alphabet[v >> 18 & 63], out[o++] = alphabet[v >> 12 & 63], out[o++] = alphabet[v >> 6 & 63];
    }
    out[o] = 0;
    return o;
}

/* An hour's token for `identity` with `grants` (a JSON object). */
static void token(const char *identity, const char *grants, char *out) {
    char payload[512];
    long issued = (long)time(NULL);
    int length = snprintf(payload, sizeof payload, "{\"exp\":%ld,\"grants\":%s,\"iat\":%ld,\"iss\":\"%s\",\"nbf\":%ld,\"sub\":\"%s\"}",
                          issued + 3600, grants, issued, api_key, issued, identity);
    size_t o = base64url((const unsigned char *)"{\"alg\":\"HS256\",\"typ\":\"JWT\"}", 27, out);
    out[o++] = '.';
    o += base64url((const unsigned char *)payload, (size_t)length, out + o);
    unsigned char mac[32];
    unsigned mac_length = 0;
    HMAC(EVP_sha256(), secret, (int)strlen(secret), (const unsigned char *)out, o, mac, &mac_length);
    out[o++] = '.';
    base64url(mac, mac_length, out + o);
}

/* ---- Sockets and frames ---- */

static void watch(conn_t *c, uint32_t events, int op) {
    struct epoll_event event = {.events = events, .data.u32 = (uint32_t)c->index};
    if (epoll_ctl(poller, op, c->fd, &event) < 0) die("epoll_ctl");
}

static void start_connect(conn_t *c) {
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (c->fd < 0) die("socket (raise the descriptor limit)");
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((unsigned short)c->port)};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(c->fd, (struct sockaddr *)&address, sizeof address) < 0 && errno != EINPROGRESS) die("connect");
    c->state = CONNECTING;
    c->rx_len = c->tx_len = 0;
    handshakes_in_flight++;
    watch(c, EPOLLOUT, EPOLL_CTL_ADD);
}

/* Queues `length` bytes; `flush` writes each connection's queue once per turn of the loop, so
 * that the signals a burst of replies calls for go out in one write, as a real client's would
 * (a write per frame on loopback costs the generator more than the server spends on it). */
static int *dirty;
static int dirty_count;

static void send_bytes(conn_t *c, const unsigned char *bytes, size_t length) {
    if (c->state == CLOSED) return;
    if (c->tx_len == 0 && !c->flushing) {
        c->flushing = 1;
        dirty[dirty_count++] = c->index;
    }
    c->tx = grow(c->tx, &c->tx_cap, c->tx_len + length);
    memcpy(c->tx + c->tx_len, bytes, length);
    c->tx_len += length;
}

/* Writes what `c` queued; what the socket does not take waits for EPOLLOUT. */
static void write_queued(conn_t *c) {
    ssize_t wrote = write(c->fd, c->tx, c->tx_len);
    if (wrote < 0) {
        if (errno != EAGAIN) fail("write failed", strerror(errno));
        wrote = 0;
    }
    memmove(c->tx, c->tx + wrote, c->tx_len - (size_t)wrote);
    c->tx_len -= (size_t)wrote;
    if (c->tx_len > 0 && !c->blocked) watch(c, EPOLLIN | EPOLLOUT, EPOLL_CTL_MOD), c->blocked = 1;
    if (c->tx_len == 0 && c->blocked) watch(c, EPOLLIN, EPOLL_CTL_MOD), c->blocked = 0;
}

static void flush(void) {
    for (int i = 0; i < dirty_count; i++) {
        conn_t *c = &conns[dirty[i]];
        c->flushing = 0;
        if (c->state == OPEN && !c->blocked && c->tx_len) write_queued(c);
    }
    dirty_count = 0;
}

static uint32_t mask_state = 0x9e3779b9u;

/* One masked frame (client to server) with `opcode`. */
static void send_frame(conn_t *c, int opcode, const char *payload, size_t length) {
    unsigned char buffer[8192];
    unsigned char *frame = length + 14 <= sizeof buffer ? buffer : malloc(length + 14);
    size_t h = 0;
    frame[h++] = (unsigned char)(0x80 | opcode);
    if (length < 126) {
        frame[h++] = (unsigned char)(0x80 | length);
    } else if (length < 65536) {
        frame[h++] = 0x80 | 126, frame[h++] = (unsigned char)(length >> 8), frame[h++] = (unsigned char)length;
    } else {
        frame[h++] = 0x80 | 127;
        for (int shift = 56; shift >= 0; shift -= 8) frame[h++] = (unsigned char)((uint64_t)length >> shift);
    }
    mask_state ^= mask_state << 13, mask_state ^= mask_state >> 17, mask_state ^= mask_state << 5;
    unsigned char mask[4];
    memcpy(mask, &mask_state, 4);
    memcpy(frame + h, mask, 4);
    h += 4;
    for (size_t i = 0; i < length; i++) frame[h + i] = (unsigned char)payload[i] ^ mask[i & 3];
    send_bytes(c, frame, h + length);
    if (frame != buffer) free(frame);
}

static void send_text(conn_t *c, const char *text) { send_frame(c, 1, text, strlen(text)); }

static void close_conn(conn_t *c) {
    if (c->state == CLOSED) return;
    if (c->state == OPEN) closed_count++;
    c->state = CLOSED;
    close(c->fd);
}

/* ---- The relay ---- */

static int pairs = 50, window = 20, rate = 0, refill_on_delivery = 0;
static long total_messages = 200000, per_pair;
static long delivered, paced_sent;
static int joined, senders_ready;
static double started;
static uint32_t *latencies;
static long latency_count;
static char room_prefix[64];
static const char candidate_marker[] = "\"candidate\":\"";

static int has_prefix(const unsigned char *text, size_t length, const char *prefix) {
    size_t n = strlen(prefix);
    return length >= n && memcmp(text, prefix, n) == 0;
}

static void send_signal(conn_t *c) {
    send_frame(c, 1, c->frame, c->frame_len);
    c->sent++;
}

static void start_senders(void) {
    started = now();
    for (int i = 0; i < pairs; i++) {
        char join[160];
        snprintf(join, sizeof join, "{\"type\":\"room.join\",\"id\":0,\"data\":{\"room\":\"%s%d\"}}", room_prefix, i);
        send_text(&conns[2 * i], join);
    }
}

/* Paced mode: the signals the rate says are due, round robin over the pairs, each with its
 * send time in digits at the start of the candidate, padded to 200 bytes. */
static void pace(void) {
    long total = per_pair * pairs;
    long due = (long)((now() - started) * rate);
    if (due > total) due = total;
    char frame[1024];
    while (paced_sent < due) {
        conn_t *sender = &conns[2 * (paced_sent % pairs)];
        memcpy(frame, sender->frame, sender->frame_len);
        size_t o = sender->frame_len;
        int digits = snprintf(frame + o, 32, "%llu", (unsigned long long)now_micros());
        memset(frame + o + digits, 'a', (size_t)(200 - digits));
        o += 200;
        memcpy(frame + o, "\"}}}", 4);
        send_frame(sender, 1, frame, o + 4);
        paced_sent++;
    }
}

static void sender_text(conn_t *c, const unsigned char *text, size_t length) {
    if (has_prefix(text, length, "{\"type\":\"ok\",\"id\":1")) {
        if (!rate && !refill_on_delivery && c->sent < per_pair) send_signal(c);
    } else if (has_prefix(text, length, "{\"type\":\"ok\",\"id\":0")) {
        const char *peers = memmem(text, length, "\"peers\":[", 9);
        const char *found = peers ? memmem(peers, length - (size_t)(peers - (const char *)text), "\"peer_id\":\"", 11) : NULL;
        if (!found) fail("no peer in the join reply", strndup((const char *)text, length));
        found += 11;
        const char *end = memchr(found, '"', length - (size_t)(found - (const char *)text));
        char frame[1024];
        int room = c->index / 2;
        int n = snprintf(frame, sizeof frame,
                         "{\"type\":\"signal\",\"id\":1,\"data\":{\"room\":\"%s%d\",\"to\":\"%.*s\",\"signal\":{\"type\":\"candidate\",\"candidate\":\"",
                         room_prefix, room, (int)(end - found), found);
        if (rate) {
            c->frame = strndup(frame, (size_t)n);
            c->frame_len = (size_t)n;
            if (++senders_ready == pairs) started = now();
            return;
        }
        memset(frame + n, 'a', 200);
        memcpy(frame + n + 200, "\"}}}", 4);
        c->frame = strndup(frame, (size_t)n + 204);
        c->frame_len = (size_t)n + 204;
        while (c->sent < window && c->sent < per_pair) send_signal(c);
    } else if (memmem(text, length, "\"type\":\"error\"", 14)) {
        fail("sender error", strndup((const char *)text, length));
    }
}

static void receiver_text(conn_t *c, const unsigned char *text, size_t length) {
    if (has_prefix(text, length, "{\"type\":\"signal\"")) {
        delivered++;
        conn_t *sender = &conns[c->index - 1];
        if (refill_on_delivery && !rate && sender->frame && sender->sent < per_pair) send_signal(sender);
        if (rate) {
            const char *at = memmem(text, length, candidate_marker, sizeof candidate_marker - 1);
            if (at) {
                uint64_t stamp = strtoull(at + sizeof candidate_marker - 1, NULL, 10);
                if (latency_count < per_pair * pairs) latencies[latency_count++] = (uint32_t)(now_micros() - stamp);
            }
        }
    } else if (has_prefix(text, length, "{\"type\":\"ok\",\"id\":1")) {
        if (++joined == pairs) start_senders();
    } else if (memmem(text, length, "\"type\":\"error\"", 14)) {
        fail("receiver error", strndup((const char *)text, length));
    }
}

/* ---- Reading ---- */

static void on_frame(conn_t *c, int opcode, const unsigned char *payload, size_t length) {
    if (opcode == 9) {
        send_frame(c, 10, (const char *)payload, length);
        pings_answered++;
    } else if (opcode == 8) {
        close_conn(c);
    } else if (opcode == 1) {
        if (c->role == SENDER) sender_text(c, payload, length);
        else if (c->role == RECEIVER) receiver_text(c, payload, length);
    }
}

static void schedule_retry(conn_t *c, const char *why) {
    close(c->fd);
    handshakes_in_flight--;
    if (++c->attempts >= 10) fail("cannot connect", why);
    c->state = WAITING_RETRY;
    c->retry_at = now() + 1.0;
    retries_waiting++;
}

static void on_open(conn_t *c) {
    c->state = OPEN;
    opened++;
    handshakes_in_flight--;
}

static void read_ready(conn_t *c) {
    for (;;) {
        c->rx = grow(c->rx, &c->rx_cap, c->rx_len + 4096);
        ssize_t got = read(c->fd, c->rx + c->rx_len, c->rx_cap - c->rx_len);
        if (got < 0 && errno == EAGAIN) break;
        if (got <= 0) {
            if (c->state == UPGRADING) return schedule_retry(c, "closed during the handshake");
            return close_conn(c);
        }
        c->rx_len += (size_t)got;
        if ((size_t)got < c->rx_cap - (c->rx_len - (size_t)got)) break;
    }
    size_t at = 0;
    if (c->state == UPGRADING) {
        unsigned char *end = memmem(c->rx, c->rx_len, "\r\n\r\n", 4);
        if (!end) return;
        if (c->rx_len < 12 || memcmp(c->rx + 9, "101", 3) != 0) {
            char status[64];
            snprintf(status, sizeof status, "%.*s", (int)(memchr(c->rx, '\r', c->rx_len) - (void *)c->rx), c->rx);
            return schedule_retry(c, status);
        }
        on_open(c);
        at = (size_t)(end - c->rx) + 4;
    }
    while (c->state == OPEN && c->rx_len - at >= 2) {
        unsigned char *f = c->rx + at;
        size_t available = c->rx_len - at, header = 2;
        uint64_t length = f[1] & 0x7f;
        if (length == 126) {
            if (available < 4) break;
            length = (uint64_t)f[2] << 8 | f[3], header = 4;
        } else if (length == 127) {
            if (available < 10) break;
            length = 0;
            for (int i = 2; i < 10; i++) length = length << 8 | f[i];
            header = 10;
        }
        if (available < header + length) break;
        on_frame(c, f[0] & 0x0f, f + header, (size_t)length);
        at += header + (size_t)length;
    }
    if (c->state == CLOSED) return;
    memmove(c->rx, c->rx + at, c->rx_len - at);
    c->rx_len -= at;
}

static void write_ready(conn_t *c) {
    if (c->state == CONNECTING) {
        int error = 0;
        socklen_t size = sizeof error;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &error, &size);
        if (error) return schedule_retry(c, strerror(error));  /* refused: try again in a second */
        char identity[64], jwt[1024], request[1600];
        const char *grants = "{}";
        if (c->role == IDLE) {
            snprintf(identity, sizeof identity, "idle-%u-%d", run_id, c->index);
        } else {
            snprintf(identity, sizeof identity, "%c%u-%d", c->role == SENDER ? 's' : 'r', run_id, c->index / 2);
            grants = "{\"room\":\"*\",\"roomJoin\":true}";
        }
        token(identity, grants, jwt);
        int n = snprintf(request, sizeof request,
                         "GET /v1/ws?access_token=%s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                         "Sec-WebSocket-Key: c3dpdGNoYm9hcmQtbG9hZA==\r\nSec-WebSocket-Version: 13\r\n\r\n",
                         jwt, c->port);
        c->state = UPGRADING;
        watch(c, EPOLLIN, EPOLL_CTL_MOD);
        if (write(c->fd, request, (size_t)n) != n) fail("handshake write", strerror(errno));
        return;
    }
    write_queued(c);
}

/* One turn of the loop: waits at most `timeout_ms` and handles what is ready. */
static void turn(int timeout_ms, int timer_fd) {
    struct epoll_event ready[512];
    int count = epoll_wait(poller, ready, 512, timeout_ms);
    if (count < 0 && errno != EINTR) die("epoll_wait");
    for (int r = 0; r < count; r++) {
        if (ready[r].data.u32 == UINT32_MAX) {
            uint64_t expirations;
            if (read(timer_fd, &expirations, sizeof expirations) < 0) {}
            if (rate && senders_ready == pairs) pace();
            continue;
        }
        conn_t *c = &conns[ready[r].data.u32];
        if (c->state == CLOSED || c->state == WAITING_RETRY) continue;
        if (ready[r].events & EPOLLOUT) write_ready(c);
        if (c->state != CLOSED && c->state != CONNECTING && (ready[r].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) read_ready(c);
    }
    flush();
    if (!retries_waiting) return;
    double t = now();
    for (int i = 0; i < conn_count; i++)
        if (conns[i].state == WAITING_RETRY && conns[i].retry_at <= t) retries_waiting--, start_connect(&conns[i]);
}

static const char *option(int argc, char **argv, const char *name, const char *fallback) {
    for (int i = 2; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0) return argv[i + 1];
    return fallback;
}

static void raise_descriptor_limit(void) {
    struct rlimit limit;
    getrlimit(RLIMIT_NOFILE, &limit);
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
}

static int compare(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static int relay(int port, int receiver_port) {
    per_pair = total_messages / pairs;
    conn_count = 2 * pairs;
    conns = calloc((size_t)conn_count, sizeof(conn_t));
    dirty = calloc((size_t)conn_count, sizeof(int));
    snprintf(room_prefix, sizeof room_prefix, "bench-%u-", run_id);
    for (int i = 0; i < conn_count; i++) {
        conns[i] = (conn_t){.index = i, .role = i % 2 ? RECEIVER : SENDER, .port = i % 2 ? receiver_port : port};
        start_connect(&conns[i]);
    }
    while (opened < conn_count) turn(100, -1);
    int timer_fd = -1;
    if (rate) {
        latencies = malloc(sizeof(uint32_t) * (size_t)(per_pair * pairs));
        timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
        struct itimerspec every = {.it_interval = {0, 100000}, .it_value = {0, 100000}};
        timerfd_settime(timer_fd, 0, &every, NULL);
        struct epoll_event event = {.events = EPOLLIN, .data.u32 = UINT32_MAX};
        epoll_ctl(poller, EPOLL_CTL_ADD, timer_fd, &event);
    }
    for (int i = 0; i < pairs; i++) {
        char join[160];
        snprintf(join, sizeof join, "{\"type\":\"room.join\",\"id\":1,\"data\":{\"room\":\"%s%d\"}}", room_prefix, i);
        send_text(&conns[2 * i + 1], join);
    }
    long total = per_pair * pairs, last_delivered = -1;
    double last_progress = now();
    while (delivered < total) {
        turn(100, timer_fd);
        if (closed_count) fail("a connection closed during the run", NULL);
        if (delivered != last_delivered) last_delivered = delivered, last_progress = now();
        if (now() - last_progress > 15) {
            char counts[200];
            snprintf(counts, sizeof counts, "%d of %d rooms joined, %d of %d senders in, %ld sent, %ld of %ld delivered", joined, pairs,
                     senders_ready, pairs, rate ? paced_sent : total, delivered, total);
            fail("nothing delivered for 15 s", counts);
        }
    }
    double seconds = now() - started;
    printf("{\"messages_per_second\": %.0f, \"delivered\": %ld, \"seconds\": %.3f, \"pairs\": %d, \"generator\": \"c\"",
           (double)delivered / seconds, delivered, seconds, pairs);
    if (rate) {
        qsort(latencies, (size_t)latency_count, sizeof(uint32_t), compare);
#define PERCENTILE(p) (latency_count ? latencies[(long)((double)latency_count * (p)) < latency_count ? (long)((double)latency_count * (p)) : latency_count - 1] : 0)
        printf(", \"rate\": %d, \"p50_us\": %u, \"p99_us\": %u, \"p999_us\": %u", rate, PERCENTILE(0.5), PERCENTILE(0.99), PERCENTILE(0.999));
    }
    printf("}\n");
    return 0;
}

static int idle(int port, int count, int parallel, int hold) {
    raise_descriptor_limit();
    conn_count = count;
    conns = calloc((size_t)count, sizeof(conn_t));
    dirty = calloc((size_t)count, sizeof(int));
    double begin = now();
    int next = 0;
    while (opened < count) {
        while (next < count && handshakes_in_flight < parallel) {
            conns[next] = (conn_t){.index = next, .role = IDLE, .port = port};
            start_connect(&conns[next++]);
        }
        turn(100, -1);
        if (closed_count) fail("a connection closed while connecting", NULL);
    }
    double seconds = now() - begin;
    printf("{\"phase\": \"connected\", \"connections\": %d, \"seconds\": %.3f, \"connects_per_second\": %.0f}\n", count, seconds,
           count / seconds);
    fflush(stdout);
    /* What the idle connections were sent (a welcome each) stays in their buffers no longer. */
    for (int i = 0; i < count; i++) {
        free(conns[i].rx);
        conns[i].rx = NULL, conns[i].rx_cap = 0;
    }
    double until = now() + hold;
    while (now() < until) turn(200, -1);
    printf("{\"phase\": \"held\", \"connections\": %d, \"closed_while_held\": %ld, \"pings_answered\": %ld, \"hold_seconds\": %d}\n", count,
           closed_count, pings_answered, hold);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) goto usage;
    api_key = option(argc, argv, "--key", NULL);
    secret = option(argc, argv, "--secret", NULL);
    int port = atoi(option(argc, argv, "--port", "0"));
    if (!api_key || !secret || !port) goto usage;
    poller = epoll_create1(0);
    struct timespec seed;
    clock_gettime(CLOCK_REALTIME, &seed);
    run_id = (unsigned)(seed.tv_nsec ^ seed.tv_sec ^ getpid());
    mask_state ^= run_id | 1;
    if (strcmp(argv[1], "relay") == 0) {
        pairs = atoi(option(argc, argv, "--pairs", "50"));
        window = atoi(option(argc, argv, "--window", "20"));
        total_messages = atol(option(argc, argv, "--messages", "200000"));
        rate = atoi(option(argc, argv, "--rate", "0"));
        for (int i = 2; i < argc; i++) refill_on_delivery |= strcmp(argv[i], "--refill-on-delivery") == 0;
        return relay(port, atoi(option(argc, argv, "--receiver-port", option(argc, argv, "--port", "0"))));
    }
    if (strcmp(argv[1], "idle") == 0)
        return idle(port, atoi(option(argc, argv, "--connections", "10000")), atoi(option(argc, argv, "--parallel", "64")),
                    atoi(option(argc, argv, "--hold", "30")));
usage:
    fprintf(stderr, "usage: wsload relay|idle --port P --key K --secret S [options] (see the comment at the top of bench/wsload.c)\n");
    return 2;
}
