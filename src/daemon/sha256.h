/* SHA-256 of API tokens (OpenSSL's libcrypto): the daemon stores only the
 * digest of each bearer token and compares digests in constant time. */
#ifndef WARREN_DAEMON_SHA256_H
#define WARREN_DAEMON_SHA256_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

void wrd_sha256(const void *data, size_t len, uint8_t out[32]);
/* Constant-time equality of two digests. */
bool wrd_digest_equal(const uint8_t a[32], const uint8_t b[32]);
/* 64 hex chars (either case) -> digest. */
int wrd_hex_digest(const char *hex, uint8_t out[32]);

#endif
