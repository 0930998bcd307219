/* The chunk index of an EROFS blob (format in lazy_index.h). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "image/lazy_index.h"

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

/* "sha256:<64 hex>" into 32 raw bytes. */
static int digest_raw(const char *digest, uint8_t out[32], wr_err *err)
{
	if (digest == NULL || strncmp(digest, "sha256:", 7) != 0 || strlen(digest) != 71)
		return wr_err_field(err, "digest", "digest %s: not sha256:<64 hex>",
				    digest ? digest : "(null)");
	for (int i = 0; i < 32; i++) {
		unsigned v;
		if (sscanf(digest + 7 + 2 * i, "%2x", &v) != 1)
			return wr_err_field(err, "digest", "digest %s: not sha256:<64 hex>",
					    digest);
		out[i] = (uint8_t)v;
	}
	return 0;
}

static bool grain_ok(uint32_t g)
{
	return g >= WRL_INDEX_GRAIN_MIN && g <= WRL_INDEX_GRAIN_MAX && (g & (g - 1)) == 0;
}

uint64_t wrl_index_len(uint64_t size, uint32_t g)
{
	return WRL_INDEX_HDR + 32 * ((size + g - 1) / g);
}

uint64_t wrl_index_max_len(uint64_t size)
{
	uint64_t n = wrl_index_len(size, WRL_INDEX_GRAIN_MIN);
	return n < WRL_INDEX_MAX_BYTES ? n : WRL_INDEX_MAX_BYTES;
}

int wrl_index_build(int fd, uint64_t size, uint32_t g, const char *blob_digest, uint8_t **out,
		    size_t *len, wr_err *err)
{
	*out = NULL;
	*len = 0;
	uint8_t want[32];
	if (digest_raw(blob_digest, want, err) < 0)
		return -EINVAL;
	if (!grain_ok(g) || size == 0)
		return wr_err_set(err, EINVAL, "chunk index: grain %" PRIu32 ", size %" PRIu64, g,
				  size);
	uint64_t n = (size + g - 1) / g;
	if (wrl_index_len(size, g) > WRL_INDEX_MAX_BYTES)
		return wr_err_set(err, EFBIG,
				  "chunk index: %" PRIu64 " pieces, more than %llu bytes of index",
				  n, WRL_INDEX_MAX_BYTES);
	size_t total = (size_t)wrl_index_len(size, g);
	_cleanup_free_ uint8_t *ix = malloc(total);
	_cleanup_free_ uint8_t *buf = malloc(g);
	if (ix == NULL || buf == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	memcpy(ix, WRL_INDEX_MAGIC, 8);
	put32(ix + 8, WRL_INDEX_VERSION);
	put32(ix + 12, g);
	put64(ix + 16, size);
	EVP_MD_CTX *whole = EVP_MD_CTX_new();
	if (whole == NULL || EVP_DigestInit_ex(whole, EVP_sha256(), NULL) != 1) {
		EVP_MD_CTX_free(whole);
		return wr_err_set(err, ENOMEM, "sha256");
	}
	int r = 0;
	for (uint64_t i = 0; i < n && r == 0; i++) {
		uint64_t off = i * g;
		size_t plen = size - off < g ? (size_t)(size - off) : g;
		size_t got = 0;
		while (got < plen) {
			ssize_t k = pread(fd, buf + got, plen - got, (off_t)(off + got));
			if (k < 0 && errno == EINTR)
				continue;
			if (k <= 0) {
				r = k < 0 ? wr_err_sys(err, "chunk index: read")
					  : wr_err_set(err, EBADMSG,
						       "chunk index: blob shorter "
						       "than %" PRIu64 " bytes",
						       size);
				break;
			}
			got += (size_t)k;
		}
		if (r == 0 && (EVP_DigestUpdate(whole, buf, plen) != 1 ||
			       EVP_Digest(buf, plen, ix + WRL_INDEX_HDR + 32 * i, NULL,
					  EVP_sha256(), NULL) != 1))
			r = wr_err_set(err, ENOMEM, "sha256");
	}
	uint8_t md[32];
	if (r == 0 && EVP_DigestFinal_ex(whole, md, NULL) != 1)
		r = wr_err_set(err, ENOMEM, "sha256");
	EVP_MD_CTX_free(whole);
	if (r < 0)
		return r;
	if (CRYPTO_memcmp(md, want, 32) != 0)
		return wr_err_set(err, EBADMSG, "chunk index: the blob's bytes do not hash to %s",
				  blob_digest);
	memcpy(ix + 24, md, 32);
	*out = steal_ptr(&ix);
	*len = total;
	return 0;
}

int wrl_index_parse(const void *buf, size_t len, const char *blob_digest, uint64_t size,
		    struct wrl_index *ix, wr_err *err)
{
	memset(ix, 0, sizeof(*ix));
	uint8_t want[32];
	if (digest_raw(blob_digest, want, err) < 0)
		return -EINVAL;
	const uint8_t *p = buf;
	if (len < WRL_INDEX_HDR || memcmp(p, WRL_INDEX_MAGIC, 8) != 0)
		return wr_err_set(err, EBADMSG, "chunk index: not a warren chunk index");
	if (get32(p + 8) != WRL_INDEX_VERSION)
		return wr_err_set(err, EBADMSG, "chunk index: version %" PRIu32 " (1 is known)",
				  get32(p + 8));
	uint32_t g = get32(p + 12);
	if (!grain_ok(g))
		return wr_err_set(err, EBADMSG,
				  "chunk index: grain %" PRIu32 " is not a power of two in "
				  "4KiB..64MiB",
				  g);
	if (get64(p + 16) != size)
		return wr_err_set(err, EBADMSG,
				  "chunk index: for a blob of %" PRIu64
				  " bytes, the layer has %" PRIu64,
				  get64(p + 16), size);
	if (CRYPTO_memcmp(p + 24, want, 32) != 0)
		return wr_err_set(err, EBADMSG, "chunk index: names another blob than %s",
				  blob_digest);
	if (len != wrl_index_len(size, g) || len > WRL_INDEX_MAX_BYTES)
		return wr_err_set(err, EBADMSG,
				  "chunk index: %zu bytes, %" PRIu64 " expected for grain %" PRIu32,
				  len, wrl_index_len(size, g), g);
	ix->grain = g;
	ix->size = size;
	ix->n = (uint32_t)((size + g - 1) / g);
	ix->sums = malloc((size_t)ix->n * 32);
	if (ix->sums == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	memcpy(ix->sums, p + WRL_INDEX_HDR, (size_t)ix->n * 32);
	return 0;
}

void wrl_index_free(struct wrl_index *ix)
{
	if (ix == NULL)
		return;
	free(ix->sums);
	ix->sums = NULL;
	ix->n = 0;
}

int wrl_index_check(const struct wrl_index *ix, uint64_t off, const void *buf, size_t len,
		    uint64_t *bad, wr_err *err)
{
	*bad = off;
	if (off % ix->grain != 0 || off + len > ix->size ||
	    (len % ix->grain != 0 && off + len != ix->size))
		return wr_err_set(err, EINVAL,
				  "verify: range %" PRIu64 "+%zu is not whole pieces of %" PRIu32,
				  off, len, ix->grain);
	const uint8_t *p = buf;
	for (size_t done = 0; done < len; done += ix->grain) {
		size_t plen = len - done < ix->grain ? len - done : ix->grain;
		uint64_t i = (off + done) / ix->grain;
		uint8_t md[32];
		if (EVP_Digest(p + done, plen, md, NULL, EVP_sha256(), NULL) != 1)
			return wr_err_set(err, ENOMEM, "sha256");
		if (CRYPTO_memcmp(md, ix->sums + 32 * i, 32) != 0) {
			*bad = off + done;
			return wr_err_set(err, EBADMSG,
					  "bytes %" PRIu64 "..%" PRIu64
					  " do not match the chunk index (piece %" PRIu64 ")",
					  off + done, off + done + plen, i);
		}
	}
	return 0;
}

int wrl_index_save(const char *store_dir, const char *hex, const void *buf, size_t len, wr_err *err)
{
	_cleanup_free_ char *dir = NULL;
	if (asprintf(&dir, "%s/chunks/%s", store_dir, hex) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	if (wr_mkdir_p(dir, 0700, err) < 0)
		return wr_err_wrap(err, "chunk index");
	_cleanup_close_ int dfd = open(dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return wr_err_sys(err, "chunk index: %s", dir);
	char tmp[64];
	snprintf(tmp, sizeof(tmp), "index.%d.tmp", (int)getpid());
	_cleanup_close_ int fd =
	    openat(dfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0 || wr_write_all(fd, buf, len) < 0 || fsync(fd) < 0) {
		int r = wr_err_sys(err, "chunk index: write %s/%s", dir, tmp);
		unlinkat(dfd, tmp, 0);
		return r;
	}
	/* Whole or absent: lazyfs reads it only under this name. */
	if (renameat(dfd, tmp, dfd, "index") < 0) {
		int r = wr_err_sys(err, "chunk index: rename in %s", dir);
		unlinkat(dfd, tmp, 0);
		return r;
	}
	return 0;
}

int wrl_index_load(int dirfd, const char *blob_digest, uint64_t size, struct wrl_index *ix,
		   wr_err *err)
{
	memset(ix, 0, sizeof(*ix));
	_cleanup_close_ int fd = openat(dirfd, "index", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	if (fd < 0 && errno == ENOENT)
		return -ENOENT;
	if (fd < 0 || fstat(fd, &st) < 0)
		return wr_err_sys(err, "chunk index of %s", blob_digest);
	if ((uint64_t)st.st_size > wrl_index_max_len(size))
		return wr_err_set(err, EBADMSG, "chunk index of %s: %jd bytes, too large",
				  blob_digest, (intmax_t)st.st_size);
	size_t len = (size_t)st.st_size;
	_cleanup_free_ uint8_t *buf = malloc(len ? len : 1);
	if (buf == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	if (pread(fd, buf, len, 0) != (ssize_t)len)
		return wr_err_sys(err, "chunk index of %s: read", blob_digest);
	return wrl_index_parse(buf, len, blob_digest, size, ix, err);
}
