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
