#include <libwebsockets.h>
#include <ev.h>

/* Macro expressions Swift cannot import. */
static const size_t sb_lws_pre = LWS_PRE;
static const uint64_t sb_lws_option_validate_utf8 = LWS_SERVER_OPTION_VALIDATE_UTF8;
static const uint64_t sb_lws_option_disable_ipv6 = LWS_SERVER_OPTION_DISABLE_IPV6;
static const uint64_t sb_lws_option_do_ssl_global_init = LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
static const uint64_t sb_lws_option_explicit_vhosts = LWS_SERVER_OPTION_EXPLICIT_VHOSTS;
static const uint64_t sb_lws_option_libev = LWS_SERVER_OPTION_LIBEV;
static const int sb_lws_context_port_no_listen = CONTEXT_PORT_NO_LISTEN;
/* A server vhost with no listening socket of its own: the owner listens and adopts. */
static const int sb_lws_context_port_no_listen_server = CONTEXT_PORT_NO_LISTEN_SERVER;

/* The event loop under a context: libev on epoll (libwebsockets' own loop is poll(), whose
   cost grows with every open connection). The loop's owner runs it one iteration at a time. */
static inline void *sb_ev_loop_new(void) {
    return ev_loop_new(EVBACKEND_EPOLL | EVFLAG_NOENV);
}
static inline void sb_ev_run_once(void *loop) { ev_run((struct ev_loop *)loop, EVRUN_ONCE); }
static inline void sb_ev_run_nowait(void *loop) { ev_run((struct ev_loop *)loop, EVRUN_NOWAIT); }
static inline void sb_ev_loop_destroy(void *loop) { ev_loop_destroy((struct ev_loop *)loop); }

/* Services a connection as if its socket had reported writeable, from the loop's own thread
   between iterations: libwebsockets writes what it owes first (buffered bytes, a pong, a close)
   and then calls the protocol's writeable callback, as on a real event, without asking epoll.
   Returns what lws_service_fd returns (1: the connection was closed). */
static inline int sb_lws_service_writeable(struct lws_context *context, struct lws *wsi) {
    struct lws_pollfd pfd;
    pfd.fd = lws_get_socket_fd(wsi);
    pfd.events = LWS_POLLOUT;
    pfd.revents = LWS_POLLOUT;
    return lws_service_fd(context, &pfd);
}

/* One timer on the loop for the owner's timer heap (libwebsockets' own timers are re-armed on
   libev only after I/O, so a deadline set from elsewhere could wait for the next event). */
typedef void (*sb_ev_timer_fn)(void *context);
struct sb_ev_timer {
    ev_timer watcher;
    sb_ev_timer_fn fn;
    void *context;
};
static void sb_ev_timer_fired(struct ev_loop *loop, ev_timer *watcher, int revents) {
    (void)loop; (void)revents;
    struct sb_ev_timer *timer = (struct sb_ev_timer *)watcher;
    timer->fn(timer->context);
}
static inline void *sb_ev_timer_new(sb_ev_timer_fn fn, void *context) {
    struct sb_ev_timer *timer = calloc(1, sizeof *timer);
    if (!timer) return NULL;
    ev_timer_init(&timer->watcher, sb_ev_timer_fired, 0, 0);
    timer->fn = fn;
    timer->context = context;
    return timer;
}
/* Fires once, `seconds` from now (the loop's clock is refreshed first). */
static inline void sb_ev_timer_arm(void *loop, void *timer, double seconds) {
    struct ev_loop *l = (struct ev_loop *)loop;
    struct sb_ev_timer *t = (struct sb_ev_timer *)timer;
    ev_timer_stop(l, &t->watcher);
    ev_now_update(l);
    ev_timer_set(&t->watcher, seconds, 0);
    ev_timer_start(l, &t->watcher);
}
static inline void sb_ev_timer_free(void *loop, void *timer) {
    ev_timer_stop((struct ev_loop *)loop, &((struct sb_ev_timer *)timer)->watcher);
    free(timer);
}

/* A readable watcher on a listening socket: the owner accepts, then hands each connection to
   libwebsockets (lws_adopt_socket_vhost). Stopped for a while when descriptors run out, so the
   loop does not spin on a socket it cannot accept from. */
typedef void (*sb_ev_io_fn)(void *context, int index);
struct sb_ev_io {
    ev_io watcher;
    sb_ev_io_fn fn;
    void *context;
    int index;
};
static void sb_ev_io_ready(struct ev_loop *loop, ev_io *watcher, int revents) {
    (void)loop; (void)revents;
    struct sb_ev_io *io = (struct sb_ev_io *)watcher;
    io->fn(io->context, io->index);
}
static inline void *sb_ev_io_new(int fd, sb_ev_io_fn fn, void *context, int index) {
    struct sb_ev_io *io = calloc(1, sizeof *io);
    if (!io) return NULL;
    ev_io_init(&io->watcher, sb_ev_io_ready, fd, EV_READ);
    io->fn = fn;
    io->context = context;
    io->index = index;
    return io;
}
static inline void sb_ev_io_start(void *loop, void *io) { ev_io_start((struct ev_loop *)loop, &((struct sb_ev_io *)io)->watcher); }
static inline void sb_ev_io_stop(void *loop, void *io) { ev_io_stop((struct ev_loop *)loop, &((struct sb_ev_io *)io)->watcher); }
static inline void sb_ev_io_free(void *loop, void *io) {
    ev_io_stop((struct ev_loop *)loop, &((struct sb_ev_io *)io)->watcher);
    free(io);
}
