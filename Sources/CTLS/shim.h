#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/x509.h>
