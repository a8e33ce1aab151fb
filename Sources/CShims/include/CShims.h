#ifndef SWITCHBOARD_CSHIMS_H
#define SWITCHBOARD_CSHIMS_H

#include <curl/curl.h>
#include <sqlite3.h>
#include <stdint.h>

/* curl_easy_setopt / curl_multi_setopt / curl_easy_getinfo are variadic. */
CURLcode sb_curl_easy_setopt_long(CURL *handle, CURLoption option, long value);
CURLcode sb_curl_easy_setopt_pointer(CURL *handle, CURLoption option, const void *value);
CURLcode sb_curl_easy_setopt_off(CURL *handle, CURLoption option, curl_off_t value);
CURLcode sb_curl_easy_setopt_write_function(CURL *handle,
    size_t (*fn)(char *ptr, size_t size, size_t nmemb, void *userdata));
CURLcode sb_curl_easy_setopt_header_function(CURL *handle,
    size_t (*fn)(char *ptr, size_t size, size_t nmemb, void *userdata));
/* A request body libcurl reads, and may rewind to resend it only when that is safe.
 *
 * libcurl resends on its own any request on a reused connection that got no answer when the
 * connection ended ("Connection died, retrying a fresh connect"), although the server may have
 * processed it: for a push, a phone rung twice. It is safe only for a stream the server
 * refused unprocessed: one above the last stream id of a GOAWAY on its connection. libcurl
 * tells neither apart through its API, only in its verbose text, so the debug callback follows
 * each transfer's connection and stream id and each connection's GOAWAY, and the seek callback
 * allows the rewind only above the GOAWAY's last stream. Anything it cannot tell stays unsafe
 * (the request fails instead of going out twice).
 *
 * One `sb_curl_goaways` per multi handle; all callbacks run on the thread driving the multi. */
#define SB_CURL_GOAWAY_SLOTS 64
typedef struct {
    long connection[SB_CURL_GOAWAY_SLOTS];
    long last_stream[SB_CURL_GOAWAY_SLOTS];
    int next;
} sb_curl_goaways;

typedef struct {
    const uint8_t *data;
    size_t length;
    size_t offset;
    sb_curl_goaways *goaways;
    long connection; /* -1 until known */
    long stream;     /* -1 until known */
    long ended_connection; /* where it was when libcurl decided to resend it, or -1 */
    long ended_stream;
    int refused_rewind; /* a rewind was asked for and refused */
} sb_curl_body;

void sb_curl_goaways_init(sb_curl_goaways *goaways);
/* Sets the read, seek and debug callbacks (and CURLOPT_VERBOSE, which the debug callback needs)
 * and the body size; the body must outlive the transfer. */
CURLcode sb_curl_easy_set_body(CURL *handle, sb_curl_body *body);
/* Whether the stream the body was last on is above the last stream id of a GOAWAY on its
 * connection: the server did not process it (RFC 9113 6.8), so it may be sent again. libcurl
 * resends such a stream itself when it sees it refused; one it had queued but not yet written
 * when the GOAWAY came it fails instead. */
int sb_curl_body_refused_unprocessed(const sb_curl_body *body);
CURLMcode sb_curl_multi_setopt_long(CURLM *handle, CURLMoption option, long value);
CURLcode sb_curl_easy_getinfo_long(CURL *handle, CURLINFO info, long *value);
CURLcode sb_curl_easy_getinfo_pointer(CURL *handle, CURLINFO info, void **value);

/* accept4 (a GNU extension the C library module does not export): one connection from a
 * listening socket, non-blocking and close-on-exec, or -1 with errno. */
int sb_accept_nonblocking(int fd);

/* Bytes the kernel has received on a TCP socket (TCP_INFO tcpi_bytes_received), or -1. */
long long sb_tcp_bytes_received(int fd);

/* libFuzzer's driver, for the fuzzing harness's own main (only linked in `make fuzz` builds). */
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));

/* SQLITE_TRANSIENT is a cast macro. */
int sb_sqlite3_bind_text_transient(sqlite3_stmt *stmt, int index, const char *text, int length);
int sb_sqlite3_bind_blob_transient(sqlite3_stmt *stmt, int index, const void *data, int length);

/* Starts `path` with `argv` and `envp` (posix_spawn): `in`, `out`, `err` become its standard
   input, output and error (-1: inherited), every other descriptor is closed in the child, and
   its signals start at their defaults, unmasked. Returns 0 and the child's pid, or an errno. */
int sb_spawn(const char *path, char *const argv[], char *const envp[], int in, int out, int err, int *pid);

#endif
