#include <hiredis/hiredis.h>
#include <hiredis/async.h>
#include <hiredis/adapters/libev.h>
#include <sys/time.h>

/* Attaches an asynchronous connection to the event loop's libev loop (the adapter's function is
   static in its header). Called on the loop's thread. */
static inline int sb_redis_attach(redisAsyncContext *context, void *loop) {
    return redisLibevAttach((struct ev_loop *)loop, context);
}

static inline const char *sb_redis_error(const redisAsyncContext *context) {
    return context->errstr;
}

static inline int sb_redis_failed(const redisAsyncContext *context) { return context->err != 0; }

/* The data set on a connection, handed to its connect and disconnect callbacks. */
static inline void sb_redis_set_data(redisAsyncContext *context, void *data) { context->data = data; }
static inline void *sb_redis_data(const redisAsyncContext *context) { return context->data; }

/* Appends a command whose reply Redis is told to leave out (`CLIENT REPLY SKIP` before it, which
   has no reply either): no callback waits for it, so the replies of the connection's other
   commands still meet theirs in order. Only where Redis takes `CLIENT REPLY`: hiredis aborts
   on a reply no callback waits for. Written with the connection's next write. */
static inline int sb_redis_append_skipping_reply(redisAsyncContext *context, int argc, const char **argv, const size_t *lengths) {
    static const char skip[] = "*3\r\n$6\r\nCLIENT\r\n$5\r\nREPLY\r\n$4\r\nSKIP\r\n";
    redisContext *c = &context->c;
    if (c->flags & (REDIS_DISCONNECTING | REDIS_FREEING)) return REDIS_ERR;
    if (redisAppendFormattedCommand(c, skip, sizeof skip - 1) != REDIS_OK) return REDIS_ERR;
    return redisAppendCommandArgv(c, argc, argv, lengths);
}

static inline redisContext *sb_redis_connect_blocking(const char *host, int port, long milliseconds) {
    struct timeval timeout = { milliseconds / 1000, (milliseconds % 1000) * 1000 };
    redisContext *context = redisConnectWithTimeout(host, port, timeout);
    if (context != NULL && context->err == 0) redisSetTimeout(context, timeout);
    return context;
}

static inline const char *sb_redis_blocking_error(const redisContext *context) { return context->errstr; }
static inline int sb_redis_blocking_failed(const redisContext *context) { return context->err != 0; }

static const int sb_redis_reply_string = REDIS_REPLY_STRING;
static const int sb_redis_reply_array = REDIS_REPLY_ARRAY;
static const int sb_redis_reply_integer = REDIS_REPLY_INTEGER;
static const int sb_redis_reply_nil = REDIS_REPLY_NIL;
static const int sb_redis_reply_status = REDIS_REPLY_STATUS;
static const int sb_redis_reply_error = REDIS_REPLY_ERROR;
