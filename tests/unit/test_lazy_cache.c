/* Unit tests of the lazy chunk cache (src/image/lazy_cache.c): layout,
 * write ordering across a crash, LRU trim rules, pattern merging,
 * verification, the chunk index and digest parsing; and the kernel fact
 * lazyfs's restarts rest on (FUSE_NOTIFY_RESEND, src/image/lazyfs.h). */
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "common/cleanup.h"
#include "common/compat.h"
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

/* An index of buf whose header names digest (built by hand: the format of
 * lazy_index.h, little-endian). */
static uint8_t *make_index(const char *buf, size_t n, const char *digest, size_t *len)
{
	uint32_t g = WRL_INDEX_GRAIN, np = (uint32_t)((n + g - 1) / g);
	*len = WRL_INDEX_HDR + 32 * (size_t)np;
	uint8_t *ix = calloc(1, *len);
	assert_non_null(ix);
	memcpy(ix, "WRNCHIDX", 8);
	ix[8] = 1;
	memcpy(ix + 12, &g, 4);
	uint64_t sz = n;
	memcpy(ix + 16, &sz, 8);
	for (int i = 0; i < 32; i++) {
		unsigned v;
		assert_int_equal(sscanf(digest + 7 + 2 * i, "%2x", &v), 1);
		ix[24 + i] = (uint8_t)v;
	}
	for (uint32_t i = 0; i < np; i++) {
		size_t off = (size_t)i * g, pl = n - off < g ? n - off : g;
		EVP_Digest(buf + off, pl, ix + WRL_INDEX_HDR + 32 * i, NULL, EVP_sha256(), NULL);
	}
	return ix;
}

/* What a lazy pull does before a blob is registered: save its index. */
static void save_index(const char *buf, size_t n, const char *digest)
{
	size_t len;
	_cleanup_free_ uint8_t *ix = make_index(buf, n, digest, &len);
	assert_int_equal(wrl_index_save(g_dir, digest + 7, ix, len, NULL), 0);
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
	wr_err nerr = NULL;
	assert_int_equal(wrl_blob_create(g_chunks, digest, n, "h:1/r@x", CS, &b, &nerr), -ENOENT);
	assert_non_null(strstr(nerr->msg, "no chunk index"));
	wr_err_free(&nerr);
	save_index(buf, n, digest);
	assert_int_equal(wrl_blob_create(g_chunks, digest, n, "h:1/r@x", CS, &b, NULL), 0);
	assert_true(b->verified && b->index.n == 6);
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
	save_index(buf, n, d1);
	save_index(buf, n, d2);
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
	save_index(buf, n, d);
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

/* lazy_index.c: what a push builds equals the format; parse refuses any
 * header that does not name the blob; check finds the bad piece. */
static void test_chunk_index(void **state)
{
	(void)state;
	size_t n = 3 * WRL_INDEX_GRAIN + 100;
	_cleanup_free_ char *buf = malloc(n);
	char d[72];
	content(buf, n, d);
	size_t len;
	_cleanup_free_ uint8_t *want = make_index(buf, n, d, &len);
	assert_int_equal(len, 56 + 4 * 32);
	int fd = memfd_create("blob", 0);
	assert_int_equal(write(fd, buf, n), (ssize_t)n);
	_cleanup_free_ uint8_t *ix = NULL;
	size_t got = 0;
	assert_int_equal(wrl_index_build(fd, n, WRL_INDEX_GRAIN, d, &ix, &got, NULL), 0);
	assert_int_equal(got, len);
	assert_memory_equal(ix, want, len);
	/* the bytes are not the named blob: no index */
	char other[72];
	strcpy(other, d);
	other[70] = other[70] == '0' ? '1' : '0';
	uint8_t *none = NULL;
	wr_err err = NULL;
	assert_int_equal(wrl_index_build(fd, n, WRL_INDEX_GRAIN, other, &none, &got, &err),
			 -EBADMSG);
	wr_err_free(&err);
	close(fd);

	struct wrl_index x;
	assert_int_equal(wrl_index_parse(ix, len, d, n, &x, NULL), 0);
	assert_int_equal(x.grain, WRL_INDEX_GRAIN);
	assert_int_equal(x.n, 4);
	uint64_t bad = 0;
	/* whole pieces, and the short last one */
	assert_int_equal(wrl_index_check(&x, 0, buf, 2 * WRL_INDEX_GRAIN, &bad, NULL), 0);
	assert_int_equal(wrl_index_check(&x, 2 * WRL_INDEX_GRAIN, buf + 2 * WRL_INDEX_GRAIN,
					 n - 2 * WRL_INDEX_GRAIN, &bad, NULL),
			 0);
	buf[WRL_INDEX_GRAIN + 5] ^= 1;
	assert_int_equal(wrl_index_check(&x, 0, buf, 2 * WRL_INDEX_GRAIN, &bad, &err), -EBADMSG);
	assert_int_equal(bad, WRL_INDEX_GRAIN);
	assert_non_null(strstr(err->msg, "piece 1"));
	wr_err_free(&err);
	/* a range that is not whole pieces is a caller's error */
	assert_int_equal(wrl_index_check(&x, 100, buf, 200, &bad, &err), -EINVAL);
	wr_err_free(&err);
	wrl_index_free(&x);

	/* another blob, another size, a cut or padded index, a bad magic */
	assert_int_equal(wrl_index_parse(ix, len, other, n, &x, &err), -EBADMSG);
	wr_err_free(&err);
	assert_int_equal(wrl_index_parse(ix, len, d, n + 1, &x, &err), -EBADMSG);
	wr_err_free(&err);
	assert_int_equal(wrl_index_parse(ix, len - 1, d, n, &x, &err), -EBADMSG);
	wr_err_free(&err);
	_cleanup_free_ uint8_t *pad = calloc(1, len + 32);
	memcpy(pad, ix, len);
	assert_int_equal(wrl_index_parse(pad, len + 32, d, n, &x, &err), -EBADMSG);
	wr_err_free(&err);
	ix[0] = 'X';
	assert_int_equal(wrl_index_parse(ix, len, d, n, &x, &err), -EBADMSG);
	wr_err_free(&err);
	ix[0] = 'W';
	ix[13] = 0x11; /* grain not a power of two */
	assert_int_equal(wrl_index_parse(ix, len, d, n, &x, &err), -EBADMSG);
	wr_err_free(&err);
}

/* A cache from before chunk indexes ("verified" absent in meta.json) loses
 * its chunks at load: nobody checked them. */
static void test_unverified_cache_is_dropped(void **state)
{
	(void)state;
	size_t n = 4 * CS;
	_cleanup_free_ char *buf = malloc(n);
	char d[72];
	content(buf, n, d);
	save_index(buf, n, d);
	struct wrl_blob *b = NULL;
	assert_int_equal(wrl_blob_create(g_chunks, d, n, "h/r@x", CS, &b, NULL), 0);
	put_chunk(b, buf, 0);
	put_chunk(b, buf, 2);
	assert_int_equal(wrl_blob_flush(b, NULL), 0);
	char hex[65];
	memcpy(hex, b->hex, 65);
	struct wrl_blob *again = NULL;
	assert_int_equal(wrl_blob_load(g_chunks, g_dir, hex, &again, NULL), 0);
	assert_int_equal(again->present, 2); /* verified: kept */
	wrl_blob_free(again);
	/* the meta.json of an older warren */
	b->verified = false;
	b->complete = false;
	assert_int_equal(wrl_blob_flush(b, NULL), 0);
	char meta[512];
	snprintf(meta, sizeof(meta),
		 "{\"digest\":\"%s\",\"size\":%zu,\"reference\":\"h/r@x\",\"chunk_size\":%u,"
		 "\"complete\":false}",
		 d, n, CS);
	int mfd = openat(b->dirfd, "meta.json", O_WRONLY | O_TRUNC);
	assert_true(mfd >= 0);
	assert_int_equal(write(mfd, meta, strlen(meta)), (ssize_t)strlen(meta));
	close(mfd);
	assert_int_equal(wrl_blob_load(g_chunks, g_dir, hex, &again, NULL), 0);
	assert_int_equal(again->present, 0);
	assert_true(again->verified); /* the index is there: from now on */
	assert_int_equal(bitmap_byte(again, 0), WRL_ABSENT);
	wrl_blob_free(again);
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

/* ---- FUSE resend (a raw connection, no libfuse) ------------------------- */

static uint8_t g_fbuf[1 << 17]; /* a /dev/fuse read wants >= 8 KiB + max_write */

struct stat_arg {
	char path[96];
	int rc, err;
};

static void *do_stat(void *a)
{
	struct stat_arg *s = a;
	struct stat st;
	s->rc = stat(s->path, &st);
	s->err = errno;
	return NULL;
}

static void reply(int fd, uint64_t unique, int error, const void *body, size_t len)
{
	uint8_t out[256];
	struct fuse_out_header oh = {
	    .len = (uint32_t)(sizeof(oh) + len), .error = error, .unique = unique};
	memcpy(out, &oh, sizeof(oh));
	if (len)
		memcpy(out + sizeof(oh), body, len);
	assert_int_equal(write(fd, out, oh.len), (ssize_t)oh.len);
}

/* Read requests until one with opcode `want`, answering the root's GETATTR
 * (a directory) on the way. Returns its header (in g_fbuf). */
static struct fuse_in_header *next_request(int fd, uint32_t want)
{
	for (;;) {
		ssize_t n = read(fd, g_fbuf, sizeof(g_fbuf));
		assert_true(n >= (ssize_t)sizeof(struct fuse_in_header));
		struct fuse_in_header *ih = (void *)g_fbuf;
		if (ih->opcode == want)
			return ih;
		assert_int_equal(ih->opcode, FUSE_GETATTR);
		struct fuse_attr_out ao = {.attr_valid = 60};
		ao.attr.ino = 1;
		ao.attr.mode = S_IFDIR | 0755;
		ao.attr.nlink = 2;
		reply(fd, ih->unique, 0, &ao, sizeof(ao));
	}
}

/* What lazyfs's takeover rests on: a request read through one fd of a
 * connection and never answered stays queued in the kernel while another fd
 * of the same open file lives (it is not answered nor failed by itself); a
 * FUSE_NOTIFY_RESEND written on the connection (Linux 6.9+, protocol 7.40)
 * delivers it again, its unique marked with bit 63, and the answer to that
 * copy completes the waiting reader. */
static void test_fuse_resend_requeues_an_unanswered_request(void **state)
{
	(void)state;
	if (geteuid() != 0 || access("/dev/fuse", R_OK | W_OK) < 0)
		skip();
	char mnt[64] = "/tmp/wr-lazy-resend.";
	memset(mnt + strlen(mnt), 'X', 6); /* mkdtemp's template */
	assert_non_null(mkdtemp(mnt));
	int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	assert_true(fd >= 0);
	char opts[128];
	snprintf(opts, sizeof(opts), "fd=%d,rootmode=40000,user_id=0,group_id=0", fd);
	if (mount("wr-resend-test", mnt, "fuse.wr-resend-test", MS_RDONLY | MS_NOSUID | MS_NODEV,
		  opts) < 0) {
		close(fd);
		rmdir(mnt);
		skip();
	}
	struct fuse_in_header *ih = next_request(fd, FUSE_INIT);
	struct fuse_init_in *ii = (void *)(ih + 1);
	uint32_t kminor = ii->minor;
	struct fuse_init_out io = {.major = 7, .minor = 38, .max_write = 4096};
	reply(fd, ih->unique, 0, &io, sizeof(io));
	struct stat_arg sa = {.rc = 0};
	snprintf(sa.path, sizeof(sa.path), "%s/x", mnt);
	pthread_t t;
	bool resent = false;
	if (kminor >= WR_FUSE_MINOR_RESEND) {
		assert_int_equal(pthread_create(&t, NULL, do_stat, &sa), 0);
		/* The server that will die: it reads the LOOKUP on a dup. */
		int dying = dup(fd);
		ih = next_request(dying, FUSE_LOOKUP);
		uint64_t unique = ih->unique;
		close(dying);
		/* Not answered, not failed: still queued, nothing new to read. */
		struct pollfd p = {.fd = fd, .events = POLLIN};
		assert_int_equal(poll(&p, 1, 200), 0);
		struct fuse_out_header rs = {
		    .len = sizeof(rs), .error = WR_FUSE_NOTIFY_RESEND, .unique = 0};
		assert_int_equal(write(fd, &rs, sizeof(rs)), (ssize_t)sizeof(rs));
		ih = next_request(fd, FUSE_LOOKUP);
		assert_true(ih->unique == (unique | WR_FUSE_UNIQUE_RESEND));
		assert_string_equal((const char *)(ih + 1), "x");
		reply(fd, ih->unique, -ENOENT, NULL, 0);
		assert_int_equal(pthread_join(t, NULL), 0);
		assert_int_equal(sa.rc, -1);
		assert_int_equal(sa.err, ENOENT);
		resent = true;
	} else {
		/* An older kernel refuses the notification. */
		struct fuse_out_header rs = {
		    .len = sizeof(rs), .error = WR_FUSE_NOTIFY_RESEND, .unique = 0};
		assert_int_equal(write(fd, &rs, sizeof(rs)), -1);
		assert_int_equal(errno, EINVAL);
	}
	assert_int_equal(umount2(mnt, MNT_DETACH), 0);
	close(fd);
	rmdir(mnt);
	if (!resent)
		skip(); /* the resend itself needs Linux 6.9+ */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_create_layout_and_flush_ordering, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_trim_lru_spares_open_blobs, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_pattern_merges_new_start_first, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_chunk_index, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_unverified_cache_is_dropped, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_bad_input, setup, teardown),
	    cmocka_unit_test(test_fuse_resend_requeues_an_unanswered_request),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
