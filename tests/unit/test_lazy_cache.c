/* Unit tests of the lazy chunk cache (src/image/lazy_cache.c): layout,
 * write ordering across a crash, LRU trim rules, pattern merging,
 * verification and digest parsing. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "common/cleanup.h"
#include "image/lazy_internal.h"

#define CS (64u << 10)

static char g_dir[64];
static int g_chunks = -1;

static int setup(void **state)
{
	(void)state;
	strcpy(g_dir, "/tmp/wr-lazy-unit.");
	memset(g_dir + strlen(g_dir), 'X', 6); /* mkdtemp's template */
	assert_non_null(mkdtemp(g_dir));
	g_chunks = wrl_chunks_open(g_dir, NULL);
	assert_true(g_chunks >= 0);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	close(g_chunks);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
	assert_int_equal(system(cmd), 0);
	return 0;
}

/* Content of a 5.5-chunk blob and its digest. */
static void content(char *buf, size_t n, char digest[72])
{
	for (size_t i = 0; i < n; i++)
		buf[i] = (char)(i * 7 + i / 4096);
	unsigned char md[32];
	EVP_Digest(buf, n, md, NULL, EVP_sha256(), NULL);
	strcpy(digest, "sha256:");
	for (int i = 0; i < 32; i++)
		sprintf(digest + 7 + 2 * i, "%02x", md[i]);
}

/* What the worker does when a chunk arrives. */
static void put_chunk(struct wrl_blob *b, const char *buf, uint32_t idx)
{
	uint32_t len = wrl_chunk_len(b, idx);
	assert_int_equal(pwrite(b->datafd, buf + (size_t)idx * CS, len, (off_t)idx * CS), len);
	b->state[idx] = WRL_DIRTY;
	b->ndirty++;
	b->present++;
}

static uint8_t bitmap_byte(struct wrl_blob *b, uint32_t idx)
{
	uint8_t v = 9;
	assert_int_equal(pread(b->bitmapfd, &v, 1, idx), 1);
	return v;
}

static void test_create_layout_and_flush_ordering(void **state)
{
	(void)state;
	size_t n = 5 * CS + CS / 2;
	_cleanup_free_ char *buf = malloc(n);
	char digest[72];
	content(buf, n, digest);
	struct wrl_blob *b = NULL;
	assert_int_equal(wrl_blob_create(g_chunks, digest, n, "h:1/r@x", CS, &b, NULL), 0);
	assert_int_equal(b->nchunks, 6);
	assert_int_equal(wrl_chunk_len(b, 5), CS / 2);
	struct stat st;
	assert_int_equal(fstat(b->datafd, &st), 0);
	assert_int_equal(st.st_size, (off_t)n);
	assert_true(st.st_blocks == 0); /* sparse until chunks arrive */

	put_chunk(b, buf, 1);
	put_chunk(b, buf, 5);
	assert_int_equal(wrl_blob_cache_bytes(b), CS + CS / 2);
	/* Not flushed: the bitmap claims nothing; a crash here re-fetches. */
	assert_int_equal(bitmap_byte(b, 1), WRL_ABSENT);
	struct wrl_blob *again = NULL;
	assert_int_equal(wrl_blob_load(g_chunks, g_dir, b->hex, &again, NULL), 0);
	assert_int_equal(again->present, 0);
	wrl_blob_free(again);

	assert_int_equal(wrl_blob_flush(b, NULL), 0);
	assert_int_equal(b->ndirty, 0);
	assert_int_equal(b->state[1], WRL_PRESENT);
	assert_int_equal(bitmap_byte(b, 1), WRL_PRESENT);
	assert_int_equal(bitmap_byte(b, 5), WRL_PRESENT);
	assert_int_equal(bitmap_byte(b, 0), WRL_ABSENT);
	assert_int_equal(wrl_blob_load(g_chunks, g_dir, b->hex, &again, NULL), 0);
	assert_int_equal(again->present, 2);
	assert_int_equal(again->state[5], WRL_PRESENT);
	assert_string_equal(again->reference, "h:1/r@x");
	wrl_blob_free(again);

	/* Eviction: the byte goes first, then the bytes. */
	assert_int_equal(wrl_blob_evict_chunk(b, 1), 0);
	assert_int_equal(bitmap_byte(b, 1), WRL_ABSENT);
	char z[16] = {1};
	assert_int_equal(pread(b->datafd, z, sizeof(z), CS), sizeof(z));
	for (size_t i = 0; i < sizeof(z); i++)
		assert_int_equal(z[i], 0);

	/* Everything in, then verified against the digest. */
	for (uint32_t i = 0; i < b->nchunks; i++)
		put_chunk(b, buf, i);
	assert_int_equal(wrl_blob_verify(b, NULL), 0);
	buf[3] ^= 1;
	assert_int_equal(pwrite(b->datafd, buf, 16, 0), 16);
	wr_err err = NULL;
	assert_int_equal(wrl_blob_verify(b, &err), -EBADMSG);
	wr_err_free(&err);
	assert_int_equal(wrl_blob_remove(g_chunks, b->hex, NULL), 0);
	wrl_blob_free(b);
}

static void test_trim_lru_spares_open_blobs(void **state)
{
	(void)state;
	size_t n = 4 * CS;
	_cleanup_free_ char *buf = malloc(n);
	char d1[72], d2[72];
	content(buf, n, d1);
	strcpy(d2, d1);
	d2[7] = d2[7] == 'a' ? 'b' : 'a';
	struct wrl_blob *a = NULL, *b = NULL;
	assert_int_equal(wrl_blob_create(g_chunks, d1, n, "h/r@x", CS, &a, NULL), 0);
	assert_int_equal(wrl_blob_create(g_chunks, d2, n, "h/r@x", CS, &b, NULL), 0);
	for (uint32_t i = 0; i < 4; i++) {
		put_chunk(a, buf, i);
		put_chunk(b, buf, i);
		a->atime[i] = 100 + i;
		b->atime[i] = 50 + i; /* b's chunks are older */
	}
	struct wrl_blob *v[] = {a, b};
	uint64_t freed = 0;
	/* b is mounted and incomplete: only a's chunks may go, oldest first. */
	b->opens = 1;
	assert_int_equal(wrl_trim(v, 2, CS + 1, &freed), 0);
	assert_int_equal(freed, 2 * CS);
	assert_int_equal(a->state[0], WRL_ABSENT);
	assert_int_equal(a->state[1], WRL_ABSENT);
	assert_true(WRL_HAVE(a->state[2]));
	for (uint32_t i = 0; i < 4; i++)
		assert_true(WRL_HAVE(b->state[i]));
	/* Unmounted: b's (older) chunks go before a's newer ones. */
	b->opens = 0;
	assert_int_equal(wrl_trim(v, 2, CS, &freed), 0);
	assert_int_equal(freed, CS);
	assert_int_equal(b->state[0], WRL_ABSENT);
	assert_true(WRL_HAVE(a->state[2]));
	assert_int_equal(wrl_blob_cache_bytes(a) + wrl_blob_cache_bytes(b), 5 * CS);
	assert_int_equal(wrl_blob_remove(g_chunks, a->hex, NULL), 0);
	assert_int_equal(wrl_blob_remove(g_chunks, b->hex, NULL), 0);
	wrl_blob_free(a);
	wrl_blob_free(b);
}

static void test_pattern_merges_new_start_first(void **state)
{
	(void)state;
	size_t n = 8 * CS;
	_cleanup_free_ char *buf = malloc(n);
	char d[72];
	content(buf, n, d);
	struct wrl_blob *b = NULL;
	assert_int_equal(wrl_blob_create(g_chunks, d, n, "h/r@x", CS, &b, NULL), 0);
	uint32_t first[] = {5, 3, 7};
	for (int i = 0; i < 3; i++) {
		b->touched[first[i]] = 1;
		b->order[b->norder++] = first[i];
	}
	assert_int_equal(wrl_pattern_save(b, NULL), 0);
	/* The next start reads 3 then 1. */
	memset(b->touched, 0, b->nchunks);
	b->norder = 0;
	b->touched[3] = b->touched[1] = 1;
	b->order[b->norder++] = 3;
	b->order[b->norder++] = 1;
	assert_int_equal(wrl_pattern_save(b, NULL), 0);
	uint32_t *p = NULL, np = 0;
	assert_int_equal(wrl_pattern_load(b, &p, &np), 0);
	uint32_t want[] = {3, 1, 5, 7};
	assert_int_equal(np, 4);
	for (int i = 0; i < 4; i++)
		assert_int_equal(p[i], want[i]);
	free(p);
	/* The session's marks are left as they were. */
	assert_int_equal(b->touched[5], 0);
	assert_int_equal(b->touched[1], 1);
	assert_int_equal(wrl_blob_remove(g_chunks, b->hex, NULL), 0);
	wrl_blob_free(b);
}

static void test_bad_input(void **state)
{
	(void)state;
	char hex[65];
	wr_err err = NULL;
	assert_int_equal(wrl_digest_hex("sha256:abc", hex, &err), -EINVAL);
	assert_string_equal(err->field, "digest");
	wr_err_free(&err);
	assert_true(
	    wrl_digest_hex("sha256:../../../../etc/passwd000000000000000000000000000000000000", hex,
			   NULL) < 0);
	char d[72] = "sha256:";
	memset(d + 7, 'a', 64);
	d[71] = '\0';
	struct wrl_blob *b = NULL;
	assert_int_equal(wrl_blob_create(g_chunks, d, 100, "h/r@x", 1000, &b, &err), -EINVAL);
	assert_string_equal(err->field, "chunk_size");
	wr_err_free(&err);
	assert_int_equal(wrl_blob_create(g_chunks, d, 0, "h/r@x", CS, &b, &err), -EINVAL);
	wr_err_free(&err);
	/* A directory without meta.json (a crashed create) is swept by a load. */
	char path[128];
	snprintf(path, sizeof(path), "%s/chunks/%s", g_dir, d + 7);
	assert_int_equal(mkdir(path, 0700), 0);
	struct wrl_blob **v = NULL;
	size_t nv = 9;
	assert_int_equal(wrl_load_all(g_chunks, g_dir, &v, &nv, NULL), 0);
	assert_int_equal(nv, 0);
	free(v);
	assert_int_equal(access(path, F_OK), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_create_layout_and_flush_ordering, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_trim_lru_spares_open_blobs, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pattern_merges_new_start_first, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bad_input, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
