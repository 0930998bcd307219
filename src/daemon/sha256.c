#include "daemon/sha256.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <errno.h>
#include <string.h>

void wrd_sha256(const void *data, size_t len, uint8_t out[32])
{
	/* OpenSSL's one-shot digest; the daemon already links libcrypto
	 * through libcurl, so this costs no new dependency. */
	SHA256(data, len, out);
}

bool wrd_digest_equal(const uint8_t a[32], const uint8_t b[32])
{
	return CRYPTO_memcmp(a, b, 32) == 0;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int wrd_hex_digest(const char *hex, uint8_t out[32])
{
	if (hex == NULL || strlen(hex) != 64)
		return -EINVAL;
	for (int i = 0; i < 32; i++) {
		int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -EINVAL;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}
