#include <libwebsockets.h>

/* Macro expressions Swift cannot import. */
static const size_t sb_lws_pre = LWS_PRE;
static const uint64_t sb_lws_option_validate_utf8 = LWS_SERVER_OPTION_VALIDATE_UTF8;
static const uint64_t sb_lws_option_disable_ipv6 = LWS_SERVER_OPTION_DISABLE_IPV6;
static const uint64_t sb_lws_option_do_ssl_global_init = LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
static const uint64_t sb_lws_option_explicit_vhosts = LWS_SERVER_OPTION_EXPLICIT_VHOSTS;
static const int sb_lws_context_port_no_listen = CONTEXT_PORT_NO_LISTEN;
