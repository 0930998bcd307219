/* The chunk cache of warren-lazyfs: one directory per blob (layout and
 * write ordering in lazy_internal.h). Used by the lazyfs worker and, while
 * lazyfs does not run, by the client to size and trim the cache. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/falloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/evp.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "image/lazy_internal.h"

int wrl_digest_hex(const char *digest, char hex[65], wr_err *err)
{
	if (digest == NULL || strncmp(digest, "sha256:", 7) != 0 || strlen(digest) != 71)
		return wr_err_field(err, "digest", "digest %s: not sha256:<64 hex>",
				    digest ? digest : "(null)");
	for (int i = 0; i < 64; i++) {
		char c = digest[7 + i];
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return wr_err_field(err, "digest", "digest %s: not sha256:<64 hex>",
					    digest);
		hex[i] = c;
	}
	hex[64] = '\0';
	return 0;
}

int wrl_chunks_open(const char *store_dir, wr_err *err)
{
	_cleanup_free_ char *p = NULL;
	if (asprintf(&p, "%s/chunks", store_dir) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	if (wr_mkdir_p(p, 0700, err) < 0)
		return wr_err_wrap(err, "chunk cache");
	int fd = open(p, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return wr_err_sys(err, "chunk cache %s", p);
	return fd;
}

int wrl_chunks_lock(int chunksfd, bool nonblock, wr_err *err)
{
	_cleanup_close_ int fd = openat(chunksfd, ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return wr_err_sys(err, "chunk cache lock");
	int r;
	while ((r = flock(fd, LOCK_EX | (nonblock ? LOCK_NB : 0))) < 0 && errno == EINTR)
		;
	if (r < 0)
		return wr_err_sys(err, "chunk cache lock");
	return steal_fd(&fd);
}

static struct wrl_blob *blob_new(void)
{
	struct wrl_blob *b = calloc(1, sizeof(*b));
	if (b == NULL)
		return NULL;
	b->dirfd = b->datafd = b->bitmapfd = -1;
	pthread_mutex_init(&b->lock, NULL);
	pthread_cond_init(&b->cond, NULL);
	return b;
}

void wrl_blob_free(struct wrl_blob *b)
{
	if (b == NULL)
		return;
	if (b->atime)
		munmap(b->atime, (size_t)b->nchunks * sizeof(uint32_t));
	for (int *fd = &b->dirfd; fd <= &b->bitmapfd; fd++)
		if (*fd >= 0)
			close(*fd);
	free(b->state);
	free(b->touched);
	free(b->order);
	free(b->reference);
	wrl_index_free(&b->index);
	pthread_mutex_destroy(&b->lock);
	pthread_cond_destroy(&b->cond);
	free(b);
}

static int write_meta(struct wrl_blob *b, wr_err *err)
{
	json_t *j = json_pack("{s:s, s:I, s:s, s:I, s:b, s:b}", "digest", b->digest, "size",
			      (json_int_t)b->size, "reference", b->reference ? b->reference : "",
			      "chunk_size", (json_int_t)b->chunk_size, "complete", b->complete,
			      "verified", b->verified);
	if (j == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	_cleanup_free_ char *s = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	if (s == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	/* meta.json is replaced by rename: readers see the old or the new. */
	_cleanup_close_ int fd =
	    openat(b->dirfd, "meta.json.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || wr_write_all(fd, s, strlen(s)) < 0 || fsync(fd) < 0)
		return wr_err_sys(err, "chunk cache %s: meta", b->hex);
	if (renameat(b->dirfd, "meta.json.tmp", b->dirfd, "meta.json") < 0)
		return wr_err_sys(err, "chunk cache %s: meta", b->hex);
	return 0;
}

static int open_at(struct wrl_blob *b, const char *name, int flags, wr_err *err)
{
	int fd = openat(b->dirfd, name, flags | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return wr_err_sys(err, "chunk cache %s: %s", b->hex, name);
	return fd;
}

/* Open data, bitmap and atime of an incomplete blob and read its state. */
static int open_parts(struct wrl_blob *b, bool create, wr_err *err)
{
	int fl = O_RDWR | (create ? O_CREAT : 0);
	if ((b->datafd = open_at(b, "data", fl, err)) < 0 ||
	    (b->bitmapfd = open_at(b, "bitmap", fl, err)) < 0)
		return -1;
	_cleanup_close_ int afd = open_at(b, "atime", fl, err);
	if (afd < 0)
		return -1;
	size_t alen = (size_t)b->nchunks * sizeof(uint32_t);
	if (ftruncate(b->datafd, (off_t)b->size) < 0 || ftruncate(b->bitmapfd, b->nchunks) < 0 ||
	    ftruncate(afd, (off_t)alen) < 0)
		return wr_err_sys(err, "chunk cache %s: size", b->hex);
	b->atime = mmap(NULL, alen, PROT_READ | PROT_WRITE, MAP_SHARED, afd, 0);
	if (b->atime == MAP_FAILED) {
		b->atime = NULL;
		return wr_err_sys(err, "chunk cache %s: atime", b->hex);
	}
	b->state = calloc(b->nchunks, 1);
	if (b->state == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	if (pread(b->bitmapfd, b->state, b->nchunks, 0) != (ssize_t)b->nchunks)
		return wr_err_sys(err, "chunk cache %s: bitmap", b->hex);
	b->present = 0;
	for (uint32_t i = 0; i < b->nchunks; i++) {
		if (b->state[i] != WRL_PRESENT)
			b->state[i] = WRL_ABSENT;
		else
			b->present++;
	}
	return 0;
}

static int alloc_session(struct wrl_blob *b, wr_err *err)
{
	b->touched = calloc(b->nchunks ? b->nchunks : 1, 1);
	b->order = calloc(b->nchunks ? b->nchunks : 1, sizeof(uint32_t));
	if (b->touched == NULL || b->order == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	return 0;
}

static int check_chunk_size(uint32_t cs, wr_err *err)
{
	if (cs < (64u << 10) || cs > (64u << 20) || (cs & (cs - 1)) != 0)
		return wr_err_field(
		    err, "chunk_size",
		    "chunk_size %" PRIu32 ": must be a power of two in 64KiB..64MiB", cs);
	return 0;
}

int wrl_blob_create(int chunksfd, const char *digest, uint64_t size, const char *reference,
		    uint32_t chunk_size, struct wrl_blob **out, wr_err *err)
{
	char hex[65];
	if (wrl_digest_hex(digest, hex, err) < 0)
		return -EINVAL;
	if (check_chunk_size(chunk_size, err) < 0)
		return -EINVAL;
	if (size == 0)
		return wr_err_field(err, "size", "size: must be > 0");
	if (mkdirat(chunksfd, hex, 0700) < 0 && errno != EEXIST)
		return wr_err_sys(err, "chunk cache %s", hex);
	struct wrl_index ix;
	_cleanup_close_ int dfd =
	    openat(chunksfd, hex, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return wr_err_sys(err, "chunk cache %s", hex);
	int ir = wrl_index_load(dfd, digest, size, &ix, err);
	if (ir == -ENOENT)
		return wr_err_set(err, ENOENT,
				  "blob %s has no chunk index: lazyfs serves only bytes it can "
				  "verify (pull the image in full, or push it again with this "
				  "warren, which adds the index)",
				  digest);
	if (ir < 0)
		return ir;
	/* Every fetch must be whole pieces of the index: both are powers of
	 * two, so the larger of the two is a multiple of the smaller. */
	if (chunk_size < ix.grain)
		chunk_size = ix.grain;
	/* A directory without meta.json (the pull's index, or a crash before
	 * this create ended): whatever bitmap it has claims nothing. */
	unlinkat(dfd, "bitmap", 0);
	unlinkat(dfd, "atime", 0);
	struct wrl_blob *b = blob_new();
	if (b == NULL) {
		wrl_index_free(&ix);
		return wr_err_set(err, ENOMEM, "out of memory");
	}
	b->index = ix;
	b->verified = true;
	memcpy(b->hex, hex, sizeof(hex));
	snprintf(b->digest, sizeof(b->digest), "sha256:%s", hex);
	b->size = size;
	b->chunk_size = chunk_size;
	b->nchunks = (uint32_t)((size + chunk_size - 1) / chunk_size);
	b->reference = strdup(reference ? reference : "");
	b->dirfd = openat(chunksfd, hex, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (b->reference == NULL || b->dirfd < 0) {
		wrl_blob_free(b);
		return wr_err_sys(err, "chunk cache %s", hex);
	}
	/* Parts first, meta last: a directory without meta.json (and without
	 * an index) is a crash leftover that the next load removes. */
	if (open_parts(b, true, err) < 0 || alloc_session(b, err) < 0 || write_meta(b, err) < 0) {
		wrl_blob_free(b);
		return -1;
	}
	*out = b;
	return 0;
}

static int load_meta(int dirfd, const char *hex, struct wrl_blob *b, wr_err *err)
{
	_cleanup_free_ char *s = NULL;
	if (wr_read_file_at(dirfd, "meta.json", &s, 1 << 16, err) < 0)
		return -1;
	json_error_t je;
	json_t *j = json_loads(s, 0, &je);
	const char *digest = NULL, *ref = NULL;
	json_int_t size = 0, cs = 0;
	int complete = 0, verified = 0;
	if (j == NULL || json_unpack_ex(j, &je, 0, "{s:s, s:I, s:s, s:I, s:b, s?b}", "digest",
					&digest, "size", &size, "reference", &ref, "chunk_size",
					&cs, "complete", &complete, "verified", &verified) < 0) {
		json_decref(j);
		return wr_err_set(err, EBADMSG, "chunk cache %s: meta.json: %s", hex, je.text);
	}
	char h[65];
	int r = 0;
	if (wrl_digest_hex(digest, h, err) < 0 || strcmp(h, hex) != 0 || size <= 0 ||
	    check_chunk_size((uint32_t)cs, err) < 0) {
		wr_err_free(err);
		r = wr_err_set(err, EBADMSG, "chunk cache %s: meta.json: inconsistent", hex);
	} else {
		memcpy(b->hex, hex, 65);
		snprintf(b->digest, sizeof(b->digest), "%s", digest);
		b->size = (uint64_t)size;
		b->chunk_size = (uint32_t)cs;
		b->nchunks = (uint32_t)((b->size + b->chunk_size - 1) / b->chunk_size);
		b->complete = complete;
		b->verified = verified;
		b->reference = strdup(ref);
		if (b->reference == NULL)
			r = wr_err_set(err, ENOMEM, "out of memory");
	}
	json_decref(j);
	return r;
}

static int load_opens(struct wrl_blob *b)
{
	uint32_t opens = 0;
	_cleanup_close_ int fd = openat(b->dirfd, "opens", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd >= 0 && pread(fd, &opens, sizeof(opens), 0) == sizeof(opens))
		return (int)opens;
	return 0;
}

/* An incomplete blob's index (none is fine here: such a blob serves what
 * is verified in its cache and fetches nothing), and the rule of
 * lazy_internal.h: a cache not known to be verified loses its chunks. */
static int load_index(struct wrl_blob *b, wr_err *err)
{
	int r = wrl_index_load(b->dirfd, b->digest, b->size, &b->index, err);
	if (r < 0 && r != -ENOENT)
		return r;
	if (r == 0 && b->chunk_size % b->index.grain != 0)
		return wr_err_set(err, EBADMSG,
				  "chunk cache %s: chunks of %" PRIu32
				  " bytes are not whole pieces of its index (%" PRIu32 ")",
				  b->hex, b->chunk_size, b->index.grain);
	if (!b->verified) {
		for (uint32_t i = 0; i < b->nchunks; i++)
			if (b->state[i] == WRL_PRESENT && wrl_blob_evict_chunk(b, i) == 0) {
				b->state[i] = WRL_ABSENT;
				b->present--;
			}
		if (b->present)
			return wr_err_set(err, EIO, "chunk cache %s: cannot drop unverified chunks",
					  b->hex);
		if (r == 0) {
			b->verified = true;
			return write_meta(b, err);
		}
	}
	return 0;
}

int wrl_blob_attach_index(struct wrl_blob *b, wr_err *err)
{
	if (b->complete || b->index.sums)
		return 0;
	struct wrl_index ix;
	int r = wrl_index_load(b->dirfd, b->digest, b->size, &ix, err);
	if (r < 0)
		return r;
	if (b->chunk_size % ix.grain != 0) {
		wrl_index_free(&ix);
		return wr_err_set(err, EBADMSG,
				  "chunk cache %s: chunks of %" PRIu32
				  " bytes are not whole pieces of its index (%" PRIu32 ")",
				  b->hex, b->chunk_size, ix.grain);
	}
	/* Nothing is present: without an index nothing was fetched, and what
	 * an older cache held was dropped at load. */
	b->index = ix;
	b->verified = true;
	return write_meta(b, err);
}

int wrl_blob_load(int chunksfd, const char *store_dir, const char *hex, struct wrl_blob **out,
		  wr_err *err)
{
	struct wrl_blob *b = blob_new();
	if (b == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	b->dirfd = openat(chunksfd, hex, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (b->dirfd < 0) {
		int r = wr_err_sys(err, "chunk cache %s", hex);
		wrl_blob_free(b);
		return r;
	}
	if (load_meta(b->dirfd, hex, b, err) < 0)
		goto fail;
	if (b->complete) {
		/* Local data kept (no store record), else the store's blob. */
		b->datafd = openat(b->dirfd, "data", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (b->datafd < 0) {
			_cleanup_free_ char *p = NULL;
			if (asprintf(&p, "%s/blobs/sha256/%s", store_dir, hex) < 0) {
				wr_err_set(err, ENOMEM, "out of memory");
				goto fail;
			}
			b->datafd = open(p, O_RDONLY | O_CLOEXEC);
			if (b->datafd < 0) {
				wr_err_sys(err, "chunk cache %s: complete, but %s", hex, p);
				goto fail;
			}
		}
		b->present = b->nchunks;
		b->state = malloc(b->nchunks);
		if (b->state == NULL) {
			wr_err_set(err, ENOMEM, "out of memory");
			goto fail;
		}
		memset(b->state, WRL_PRESENT, b->nchunks);
	} else if (open_parts(b, false, err) < 0 || load_index(b, err) < 0) {
		goto fail;
	}
	if (alloc_session(b, err) < 0)
		goto fail;
	b->opens = load_opens(b);
	*out = b;
	return 0;
fail:
	wrl_blob_free(b);
	return -1;
}

int wrl_blob_flush(struct wrl_blob *b, wr_err *err)
{
	static const uint8_t one = WRL_PRESENT;
	if (b->ndirty == 0 || b->bitmapfd < 0)
		return 0;
	/* The bytes reach the disk before the bitmap says they are there. */
	if (fdatasync(b->datafd) < 0)
		return wr_err_sys(err, "chunk cache %s: sync", b->hex);
	for (uint32_t i = 0; i < b->nchunks && b->ndirty; i++) {
		if (b->state[i] != WRL_DIRTY)
			continue;
		if (pwrite(b->bitmapfd, &one, 1, i) != 1)
			return wr_err_sys(err, "chunk cache %s: bitmap", b->hex);
		b->state[i] = WRL_PRESENT;
		b->ndirty--;
	}
	b->ndirty = 0;
	return 0;
}

int wrl_blob_evict_chunk(struct wrl_blob *b, uint32_t idx)
{
	static const uint8_t zero = WRL_ABSENT;
	if (pwrite(b->bitmapfd, &zero, 1, idx) != 1)
		return -errno;
	/* The bitmap no longer claims the bytes; now they may go. */
	if (fallocate(b->datafd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		      (off_t)idx * b->chunk_size, wrl_chunk_len(b, idx)) < 0)
		return -errno;
	return 0;
}

uint64_t wrl_blob_cache_bytes(const struct wrl_blob *b)
{
	if (b->complete) {
		/* Counted only while the bytes are ours (no store record). */
		struct stat st;
		return fstatat(b->dirfd, "data", &st, AT_SYMLINK_NOFOLLOW) == 0 ? b->size : 0;
	}
	uint64_t n = 0;
	for (uint32_t i = 0; i < b->nchunks; i++)
		if (WRL_HAVE(b->state[i]))
			n += wrl_chunk_len(b, i);
	return n;
}

int wrl_blob_verify(struct wrl_blob *b, wr_err *err)
{
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	if (c == NULL || EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1) {
		EVP_MD_CTX_free(c);
		return wr_err_set(err, ENOMEM, "sha256");
	}
	size_t bufsz = 1 << 20;
	_cleanup_free_ char *buf = malloc(bufsz);
	int r = 0;
	uint64_t off = 0;
	while (buf && off < b->size) {
		size_t want = b->size - off < bufsz ? (size_t)(b->size - off) : bufsz;
		ssize_t n = pread(b->datafd, buf, want, (off_t)off);
		if (n <= 0) {
			r = n < 0 ? wr_err_sys(err, "verify %s", b->digest)
				  : wr_err_set(err, EBADMSG, "verify %s: short file", b->digest);
			break;
		}
		EVP_DigestUpdate(c, buf, (size_t)n);
		off += (uint64_t)n;
	}
	if (buf == NULL)
		r = wr_err_set(err, ENOMEM, "out of memory");
	unsigned char md[32];
	EVP_DigestFinal_ex(c, md, NULL);
	EVP_MD_CTX_free(c);
	if (r < 0)
		return r;
	char hex[65];
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	if (strcmp(hex, b->hex) != 0)
		return wr_err_set(err, EBADMSG, "verify %s: the chunks hash to sha256:%s",
				  b->digest, hex);
	return 0;
}

int wrl_blob_set_complete(struct wrl_blob *b, const char *store_blob_path, wr_err *err)
{
	if (store_blob_path) {
		int fd = open(store_blob_path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return wr_err_sys(err, "open %s", store_blob_path);
		/* Readers in flight hold no fd of their own: they read under
		 * the blob lock's view of datafd, so swap it under that lock
		 * (the caller holds it). */
		close(b->datafd);
		b->datafd = fd;
	}
	b->complete = true;
	if (write_meta(b, err) < 0)
		return -1;
	if (store_blob_path) {
		unlinkat(b->dirfd, "data", 0);
		unlinkat(b->dirfd, "bitmap", 0);
		unlinkat(b->dirfd, "atime", 0);
		if (b->bitmapfd >= 0)
			close(b->bitmapfd);
		b->bitmapfd = -1;
	}
	if (b->atime)
		munmap(b->atime, (size_t)b->nchunks * sizeof(uint32_t));
	b->atime = NULL;
	return 0;
}

int wrl_pattern_load(struct wrl_blob *b, uint32_t **out, uint32_t *n)
{
	*out = NULL;
	*n = 0;
	_cleanup_close_ int fd = openat(b->dirfd, "pattern", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || st.st_size <= 0)
		return 0;
	size_t cnt = (size_t)st.st_size / sizeof(uint32_t);
	if (cnt > WRL_PATTERN_MAX)
		cnt = WRL_PATTERN_MAX;
	uint32_t *v = malloc(cnt * sizeof(uint32_t));
	if (v == NULL)
		return -ENOMEM;
	ssize_t got = pread(fd, v, cnt * sizeof(uint32_t), 0);
	if (got < 0) {
		free(v);
		return -errno;
	}
	uint32_t k = 0;
	for (size_t i = 0; i < (size_t)got / sizeof(uint32_t); i++)
		if (v[i] < b->nchunks)
			v[k++] = v[i];
	*out = v;
	*n = k;
	return 0;
}

int wrl_pattern_save(struct wrl_blob *b, wr_err *err)
{
	/* The current start's order first, then what earlier starts read and
	 * this one did not (yet): a start that reads less keeps the rest. */
	_cleanup_free_ uint32_t *old = NULL;
	uint32_t nold = 0;
	wrl_pattern_load(b, &old, &nold);
	_cleanup_free_ uint32_t *v = malloc(((size_t)b->norder + nold + 1) * sizeof(uint32_t));
	if (v == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	uint32_t k = 0;
	for (uint32_t i = 0; i < b->norder && k < WRL_PATTERN_MAX; i++)
		v[k++] = b->order[i];
	for (uint32_t i = 0; i < nold && k < WRL_PATTERN_MAX; i++)
		if (!b->touched[old[i]]) {
			v[k++] = old[i];
			b->touched[old[i]] = 2; /* seen in the merge; cleared below */
		}
	for (uint32_t i = 0; i < nold; i++)
		if (b->touched[old[i]] == 2)
			b->touched[old[i]] = 0;
	_cleanup_close_ int fd =
	    openat(b->dirfd, "pattern.tmp", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || wr_write_all(fd, v, (size_t)k * sizeof(uint32_t)) < 0)
		return wr_err_sys(err, "chunk cache %s: pattern", b->hex);
	if (renameat(b->dirfd, "pattern.tmp", b->dirfd, "pattern") < 0)
		return wr_err_sys(err, "chunk cache %s: pattern", b->hex);
	b->saved_norder = b->norder;
	return 0;
}

void wrl_opens_store(struct wrl_blob *b)
{
	uint32_t v = b->opens > 0 ? (uint32_t)b->opens : 0;
	_cleanup_close_ int fd =
	    openat(b->dirfd, "opens", O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd >= 0 && pwrite(fd, &v, sizeof(v), 0) < 0)
		return;
}

static int rm_dir_at(int dfd, const char *name)
{
	_cleanup_close_ int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	DIR *d = fdopendir(fd);
	if (d == NULL)
		return -errno;
	fd = -1;
	struct dirent *e;
	while ((e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			unlinkat(dirfd(d), e->d_name, 0);
	closedir(d);
	return unlinkat(dfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT ? -errno : 0;
}

int wrl_blob_remove(int chunksfd, const char *hex, wr_err *err)
{
	int r = rm_dir_at(chunksfd, hex);
	if (r < 0) {
		errno = -r;
		return wr_err_sys(err, "chunk cache %s: remove", hex);
	}
	return 0;
}

struct cand {
	uint32_t atime;
	uint32_t idx;
	struct wrl_blob *b;
};

static int cand_cmp(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	if (x->atime != y->atime)
		return x->atime < y->atime ? -1 : 1;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

int wrl_trim(struct wrl_blob **blobs, size_t n, uint64_t want, uint64_t *freed)
{
	*freed = 0;
	size_t total = 0;
	for (size_t i = 0; i < n; i++) {
		pthread_mutex_lock(&blobs[i]->lock);
		if (!blobs[i]->complete)
			total += blobs[i]->present;
		pthread_mutex_unlock(&blobs[i]->lock);
	}
	struct cand *c = calloc(total ? total : 1, sizeof(*c));
	if (c == NULL)
		return -ENOMEM;
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		struct wrl_blob *b = blobs[i];
		pthread_mutex_lock(&b->lock);
		/* A mounted incomplete blob keeps every chunk: its sandboxes
		 * would fetch them again at once. */
		if (!b->complete && b->opens <= 0 && b->atime)
			for (uint32_t j = 0; j < b->nchunks && k < total; j++)
				if (WRL_HAVE(b->state[j]))
					c[k++] = (struct cand){b->atime[j], j, b};
		pthread_mutex_unlock(&b->lock);
	}
	qsort(c, k, sizeof(*c), cand_cmp);
	int r = 0;
	for (size_t i = 0; i < k && *freed < want; i++) {
		struct wrl_blob *b = c[i].b;
		pthread_mutex_lock(&b->lock);
		uint8_t st = b->state[c[i].idx];
		if (b->opens <= 0 && !b->complete && WRL_HAVE(st)) {
			r = wrl_blob_evict_chunk(b, c[i].idx);
			if (r == 0) {
				if (st == WRL_DIRTY)
					b->ndirty--;
				b->state[c[i].idx] = WRL_ABSENT;
				b->present--;
				*freed += wrl_chunk_len(b, c[i].idx);
			}
		}
		pthread_mutex_unlock(&b->lock);
		if (r < 0)
			break;
	}
	free(c);
	return r;
}

int wrl_load_all(int chunksfd, const char *store_dir, struct wrl_blob ***out, size_t *n,
		 wr_err *err)
{
	*out = NULL;
	*n = 0;
	int fd = openat(chunksfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return wr_err_sys(err, "chunk cache");
	DIR *d = fdopendir(fd);
	if (d == NULL) {
		close(fd);
		return wr_err_sys(err, "chunk cache");
	}
	struct wrl_blob **v = NULL;
	size_t cnt = 0, cap = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		char hex[65], dg[72];
		snprintf(dg, sizeof(dg), "sha256:%.64s", e->d_name);
		if (strlen(e->d_name) != 64 || wrl_digest_hex(dg, hex, NULL) < 0)
			continue;
		struct wrl_blob *b = NULL;
		wr_err le = NULL;
		if (wrl_blob_load(chunksfd, store_dir, hex, &b, &le) < 0) {
			/* No meta.json: a create that crashed before its end. */
			if (faccessat(chunksfd, hex, F_OK, 0) == 0) {
				_cleanup_free_ char *m = NULL;
				_cleanup_free_ char *ix = NULL;
				/* The pull's index waits there for the
				 * first register. */
				if (asprintf(&m, "%s/meta.json", hex) > 0 &&
				    asprintf(&ix, "%s/index", hex) > 0 &&
				    faccessat(chunksfd, m, F_OK, AT_SYMLINK_NOFOLLOW) < 0 &&
				    errno == ENOENT &&
				    faccessat(chunksfd, ix, F_OK, AT_SYMLINK_NOFOLLOW) < 0)
					rm_dir_at(chunksfd, hex);
			}
			wr_err_free(&le);
			continue;
		}
		if (cnt == cap) {
			cap = cap ? cap * 2 : 16;
			struct wrl_blob **nv = realloc(v, cap * sizeof(*v));
			if (nv == NULL) {
				wrl_blob_free(b);
				break;
			}
			v = nv;
		}
		v[cnt++] = b;
	}
	closedir(d);
	*out = v;
	*n = cnt;
	return 0;
}
