#define _GNU_SOURCE
#include <string.h>
#include <stddef.h>
#include <malloc.h>
#include <signal.h>
#include <spawn.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include "CShims.h"

CURLcode sb_curl_easy_setopt_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}

CURLcode sb_curl_easy_setopt_pointer(CURL *handle, CURLoption option, const void *value) {
    return curl_easy_setopt(handle, option, value);
}

CURLcode sb_curl_easy_setopt_off(CURL *handle, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(handle, option, value);
}

CURLcode sb_curl_easy_setopt_write_function(CURL *handle,
    size_t (*fn)(char *ptr, size_t size, size_t nmemb, void *userdata)) {
    return curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, fn);
}

CURLcode sb_curl_easy_setopt_header_function(CURL *handle,
    size_t (*fn)(char *ptr, size_t size, size_t nmemb, void *userdata)) {
    return curl_easy_setopt(handle, CURLOPT_HEADERFUNCTION, fn);
}

CURLMcode sb_curl_multi_setopt_long(CURLM *handle, CURLMoption option, long value) {
    return curl_multi_setopt(handle, option, value);
}

CURLcode sb_curl_easy_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    return curl_easy_getinfo(handle, info, value);
}

CURLcode sb_curl_easy_getinfo_pointer(CURL *handle, CURLINFO info, void **value) {
    return curl_easy_getinfo(handle, info, value);
}

int sb_sqlite3_bind_text_transient(sqlite3_stmt *stmt, int index, const char *text, int length) {
    return sqlite3_bind_text(stmt, index, text, length, SQLITE_TRANSIENT);
}

int sb_sqlite3_bind_blob_transient(sqlite3_stmt *stmt, int index, const void *data, int length) {
    return sqlite3_bind_blob(stmt, index, data, length, SQLITE_TRANSIENT);
}

static size_t sb_curl_body_read(char *buffer, size_t size, size_t count, void *user) {
    sb_curl_body *body = user;
    size_t room = size * count;
    size_t left = body->length - body->offset;
    size_t n = left < room ? left : room;
    memcpy(buffer, body->data + body->offset, n);
    body->offset += n;
    return n;
}

void sb_curl_goaways_init(sb_curl_goaways *goaways) {
    for (int i = 0; i < SB_CURL_GOAWAY_SLOTS; i++) {
        goaways->connection[i] = -1;
        goaways->last_stream[i] = -1;
    }
    goaways->next = 0;
}

/* Whether `stream` on `connection` is above the last stream id of a GOAWAY received on it. */
static int sb_curl_above_goaway(const sb_curl_goaways *goaways, long connection, long stream) {
    if (connection < 0 || stream <= 0) return 0;
    for (int i = 0; i < SB_CURL_GOAWAY_SLOTS; i++) {
        if (goaways->connection[i] == connection && stream > goaways->last_stream[i]) return 1;
    }
    return 0;
}

int sb_curl_body_refused_unprocessed(const sb_curl_body *body) {
    return sb_curl_above_goaway(body->goaways, body->connection, body->stream);
}

static int sb_curl_body_seek(void *user, curl_off_t offset, int origin) {
    sb_curl_body *body = user;
    /* The rewind comes after libcurl has moved the request to its new connection: judge by the
     * connection and stream it was on when that one ended. */
    int refused_unprocessed = sb_curl_above_goaway(body->goaways, body->ended_connection, body->ended_stream);
    if (!refused_unprocessed || origin != SEEK_SET || offset != 0) {
        body->refused_rewind = 1;
        return CURL_SEEKFUNC_FAIL;
    }
    body->offset = 0;
    return CURL_SEEKFUNC_OK;
}

/* The number after `marker` in `text` (not NUL-terminated), or -1. */
static long sb_number_after(const char *text, size_t size, const char *marker) {
    size_t length = strlen(marker);
    for (size_t i = 0; i + length <= size; i++) {
        if (memcmp(text + i, marker, length) != 0) continue;
        size_t j = i + length;
        if (j >= size || text[j] < '0' || text[j] > '9') return -1;
        long value = 0;
        while (j < size && text[j] >= '0' && text[j] <= '9' && value < 100000000000L) value = value * 10 + (text[j++] - '0');
        return value;
    }
    return -1;
}

static int sb_starts_with(const char *text, size_t size, const char *prefix) {
    size_t length = strlen(prefix);
    return size >= length && memcmp(text, prefix, length) == 0;
}

static int sb_curl_body_debug(CURL *handle, curl_infotype type, char *text, size_t size, void *user) {
    (void)handle;
    if (type != CURLINFO_TEXT) return 0;
    sb_curl_body *body = user;
    long number;
    if (sb_starts_with(text, size, "Connected to ")) {
        /* "Connected to HOST (ADDRESS) port P (#N)" */
        body->connection = sb_number_after(text, size, "(#");
        body->stream = -1;
    } else if (sb_starts_with(text, size, "Re-using existing connection #")) {
        body->connection = sb_number_after(text, size, "connection #");
        body->stream = -1;
    } else if (sb_starts_with(text, size, "Using Stream ID: ")) {
        body->stream = sb_number_after(text, size, "Stream ID: ");
    } else if (sb_starts_with(text, size, "Connection died")) {
        body->ended_connection = body->connection;
        body->ended_stream = body->stream;
    } else if ((number = sb_number_after(text, size, "GOAWAY, error=")) >= 0 && body->connection >= 0) {
        long last = sb_number_after(text, size, "last_stream=");
        if (last >= 0) {
            sb_curl_goaways *goaways = body->goaways;
            goaways->connection[goaways->next] = body->connection;
            goaways->last_stream[goaways->next] = last;
            goaways->next = (goaways->next + 1) % SB_CURL_GOAWAY_SLOTS;
        }
    }
    return 0;
}

CURLcode sb_curl_easy_set_body(CURL *handle, sb_curl_body *body) {
    CURLcode result = curl_easy_setopt(handle, CURLOPT_READFUNCTION, sb_curl_body_read);
    if (result == CURLE_OK) result = curl_easy_setopt(handle, CURLOPT_READDATA, body);
    if (result == CURLE_OK) result = curl_easy_setopt(handle, CURLOPT_SEEKFUNCTION, sb_curl_body_seek);
    if (result == CURLE_OK) result = curl_easy_setopt(handle, CURLOPT_SEEKDATA, body);
    if (result == CURLE_OK) result = curl_easy_setopt(handle, CURLOPT_DEBUGFUNCTION, sb_curl_body_debug);
    if (result == CURLE_OK) result = curl_easy_setopt(handle, CURLOPT_DEBUGDATA, body);
    if (result == CURLE_OK) result = curl_easy_setopt(handle, CURLOPT_VERBOSE, 1L);
    if (result == CURLE_OK) result = curl_easy_setopt(handle, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body->length);
    return result;
}

long long sb_tcp_bytes_received(int fd) {
    struct tcp_info info;
    socklen_t length = sizeof(info);
    memset(&info, 0, sizeof(info));
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) != 0) return -1;
    if (length < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof(info.tcpi_bytes_received)) return -1;
    return (long long)info.tcpi_bytes_received;
}

int sb_accept_nonblocking(int fd) {
    return accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
}


int sb_spawn(const char *path, char *const argv[], char *const envp[], int in, int out, int err, int *pid) {
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    int status = posix_spawn_file_actions_init(&actions);
    if (status != 0) return status;
    if (status == 0 && in >= 0) status = posix_spawn_file_actions_adddup2(&actions, in, 0);
    if (status == 0 && out >= 0) status = posix_spawn_file_actions_adddup2(&actions, out, 1);
    if (status == 0 && err >= 0) status = posix_spawn_file_actions_adddup2(&actions, err, 2);
    if (status == 0) status = posix_spawn_file_actions_addclosefrom_np(&actions, 3);
    if (status == 0) status = posix_spawnattr_init(&attributes);
    if (status != 0) {
        posix_spawn_file_actions_destroy(&actions);
        return status;
    }
    sigset_t all, none;
    sigfillset(&all);
    sigemptyset(&none);
    posix_spawnattr_setsigdefault(&attributes, &all);
    posix_spawnattr_setsigmask(&attributes, &none);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
    pid_t child = 0;
    status = posix_spawn(&child, path, &actions, &attributes, argv, envp);
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
    if (status == 0) *pid = child;
    return status;
}
