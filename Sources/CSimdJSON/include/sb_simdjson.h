// The relay's reader of `signal` requests, over simdjson (libsimdjson-dev): a C face for
// Swift. simdjson validates a whole message in a fraction of a microsecond, where jansson's
// byte-at-a-time lexer takes ~9 µs for a 300-byte signal (BENCHMARKS.md, relay).
#ifndef SB_SIMDJSON_H
#define SB_SIMDJSON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sb_signal_reader sb_signal_reader;

/// The fields of a signal request. The strings point into the reader's buffers and stay valid
/// until its next read.
typedef struct {
    /// 1: `id` is the string `id_text`; 2: `id` is the integer `id_int`.
    int id_kind;
    const char *id_text;
    size_t id_length;
    int64_t id_int;
    const char *room;
    size_t room_length;
    const char *to;
    size_t to_length;
} sb_signal_fields;

sb_signal_reader *sb_signal_reader_new(void);
void sb_signal_reader_free(sb_signal_reader *reader);

/// Reads `text` as a WebSocket request. 1: valid JSON and a signal request (an object whose
/// last `type` is "signal", whose last `id` is a string or a 64-bit integer, and whose last
/// `data` is an object with string `room` and `to` and a `signal`), `fields` filled. 0: valid
/// JSON, but not such a request. -1: simdjson does not accept the text (not JSON, or beyond
/// what it holds, such as an integer past 64 bits): the caller's general parser decides.
int sb_signal_reader_read(sb_signal_reader *reader, const char *text, size_t length, sb_signal_fields *fields);

/// The fields of a signal another node of a cluster passed on: `{"k": "tell", "op": "sig",
/// "from", "app", "room", "peer", "to", "signal"}`. The strings point into the reader's
/// buffers and stay valid until its next read.
typedef struct {
    const char *from;
    size_t from_length;
    const char *app;
    size_t app_length;
    const char *room;
    size_t room_length;
    const char *peer;
    size_t peer_length;
    const char *to;
    size_t to_length;
} sb_node_signal_fields;

/// Reads `text` as a signal passed on by another node. 1: such a message (`k` "tell", `op`
/// "sig", the five strings and a `signal`), `fields` filled. 0: valid JSON, but not such a
/// message. -1: simdjson does not accept the text.
int sb_node_signal_read(sb_signal_reader *reader, const char *text, size_t length, sb_node_signal_fields *fields);

#ifdef __cplusplus
}
#endif

#endif
