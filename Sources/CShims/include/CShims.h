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
CURLMcode sb_curl_multi_setopt_long(CURLM *handle, CURLMoption option, long value);
CURLcode sb_curl_easy_getinfo_long(CURL *handle, CURLINFO info, long *value);
CURLcode sb_curl_easy_getinfo_pointer(CURL *handle, CURLINFO info, void **value);

/* libFuzzer's driver, for the fuzzing harness's own main (only linked in `make fuzz` builds). */
int LLVMFuzzerRunDriver(int *argc, char ***argv, int (*callback)(const uint8_t *data, size_t size));

/* SQLITE_TRANSIENT is a cast macro. */
int sb_sqlite3_bind_text_transient(sqlite3_stmt *stmt, int index, const char *text, int length);
int sb_sqlite3_bind_blob_transient(sqlite3_stmt *stmt, int index, const void *data, int length);

#endif
