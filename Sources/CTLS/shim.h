#include <openssl/ssl.h>
#include <openssl/err.h>
