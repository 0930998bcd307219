/* warren-lazyfs worker: the FUSE file system (libfuse3 low-level API) that
 * serves registered remote blobs as read-only files, fetching the chunks a
 * read touches by HTTP Range into the chunk cache (lazy_cache.c), with
 * prefetch of recorded access patterns and whole-blob verification and
 * commit to the store. Process model: lazyfs.h. */
#define FUSE_USE_VERSION 312
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <fuse3/fuse_lowlevel.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "common/util.h"
#include "image/lazyfs.h"

#define INO_ROOT 1
#define INO_DIR 2
#define ATTR_TIMEOUT 3600.0

static fuse_ino_t blob_ino(const char *hex)
{
	uint64_t v = 0;
	for (int i = 0; i < 16; i++) {
		char c = hex[i];
		v = (v << 4) | (uint64_t)(c <= '9' ? c - '0' : c - 'a' + 10);
	}
	/* Top bit set: never 0, INO_ROOT or INO_DIR; stable across restarts. */
	return (fuse_ino_t)((v >> 1) | (1ull << 63));
}

struct wrl_blob *lazyfs_find(struct lazyfs *fs, const char *hex)
{
	pthread_mutex_lock(&fs->lock);
	struct wrl_blob *b = fs->blobs;
	while (b && strcmp(b->hex, hex) != 0)
		b = b->next;
	pthread_mutex_unlock(&fs->lock);
	return b;
}

static struct wrl_blob *find_ino(struct lazyfs *fs, fuse_ino_t ino)
{
	pthread_mutex_lock(&fs->lock);
	struct wrl_blob *b = fs->blobs;
	while (b && blob_ino(b->hex) != ino)
		b = b->next;
	pthread_mutex_unlock(&fs->lock);
	return b;
}

static struct wr_registry *registry_for(struct lazyfs *fs, const char *host, wr_err *err)
{
	pthread_mutex_lock(&fs->lock);
	struct lazyfs_reg *r = fs->regs;
	while (r && strcmp(r->host, host) != 0)
		r = r->next;
	if (r == NULL) {
		r = calloc(1, sizeof(*r));
		if (r == NULL || (r->host = strdup(host)) == NULL) {
			free(r);
			pthread_mutex_unlock(&fs->lock);
			wr_err_set(err, ENOMEM, "out of memory");
			return NULL;
		}
		if (wr_registry_open(host, &fs->cfg.reg, &r->reg, err) < 0) {
			free(r->host);
			free(r);
			pthread_mutex_unlock(&fs->lock);
			return NULL;
		}
		r->next = fs->regs;
		fs->regs = r;
	}
	pthread_mutex_unlock(&fs->lock);
	return r->reg;
}

/* ---- verification and commit ------------------------------------------- */

struct commit_arg {
	struct lazyfs *fs;
	struct wrl_blob *b;
};

static void *commit_run(void *arg)
{
	struct commit_arg *ca = arg;
	struct lazyfs *fs = ca->fs;
	struct wrl_blob *b = ca->b;
	free(ca);
	wr_err err = NULL;
	if (wrl_blob_verify(b, &err) < 0) {
		/* Some chunk is wrong and a range cannot tell which: drop them
		 * all, the next reads fetch again. */
		lazyfs_event(fs, "verify_failed", b->digest, "%s; chunks dropped", err->msg);
		wr_err_free(&err);
		pthread_mutex_lock(&b->lock);
		for (uint32_t i = 0; i < b->nchunks; i++)
			if (WRL_HAVE(b->state[i]) && wrl_blob_evict_chunk(b, i) == 0) {
				b->state[i] = WRL_ABSENT;
				b->present--;
			}
		b->ndirty = 0;
		b->committing = false;
		pthread_mutex_unlock(&b->lock);
		return NULL;
	}
	_cleanup_free_ char *path = NULL;
	bool recorded = false;
	if (fs->store) {
		int r = wr_image_blob_commit(fs->store, b->digest, b->datafd, &err);
		if (r == 0 && wr_image_blob_path(fs->store, b->digest, &path, &err) == 0) {
			recorded = true;
		} else if (r == -ENOENT) {
			wr_err_free(&err); /* served without a store record */
		} else {
			lazyfs_event(fs, "commit_failed", b->digest, "%s; keeping the chunk cache",
				     err ? err->msg : "error");
			wr_err_free(&err);
		}
	}
	pthread_mutex_lock(&b->lock);
	int r = wrl_blob_flush(b, &err);
	if (r == 0)
		r = wrl_blob_set_complete(b, recorded ? path : NULL, &err);
	b->committing = false;
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&b->lock);
	if (r < 0) {
		lazyfs_event(fs, "commit_failed", b->digest, "%s", err->msg);
		wr_err_free(&err);
	} else {
		lazyfs_event(fs, "complete", b->digest,
			     "all %" PRIu32 " chunks local and verified%s", b->nchunks,
			     recorded ? "; committed to the store" : "");
	}
	return NULL;
}

/* Caller holds b->lock. */
static void maybe_commit(struct lazyfs *fs, struct wrl_blob *b)
{
	if (b->complete || b->committing || b->present != b->nchunks)
		return;
	struct commit_arg *ca = malloc(sizeof(*ca));
	if (ca == NULL)
		return;
	*ca = (struct commit_arg){fs, b};
	pthread_t t;
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	b->committing = true;
	if (pthread_create(&t, &at, commit_run, ca) != 0) {
		b->committing = false;
		free(ca);
	}
	pthread_attr_destroy(&at);
}

/* ---- fetching ---------------------------------------------------------- */

/* Make chunk idx local. Concurrent callers for one chunk fetch it once: the
 * first marks it FETCHING, the others wait on the blob's condition variable
 * (bounded: a fetch is bounded by the registry's range timeout). */
static int ensure_chunk(struct lazyfs *fs, struct wrl_blob *b, uint32_t idx, bool prefetch,
			bool *corrupt, wr_err *err)
{
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec +=
	    (fs->cfg.reg.range_timeout_ms ? fs->cfg.reg.range_timeout_ms : 30000) / 1000 + 10;
	bool waited = false;
	pthread_mutex_lock(&b->lock);
	for (;;) {
		if (b->complete || WRL_HAVE(b->state[idx])) {
			pthread_mutex_unlock(&b->lock);
			return 0;
		}
		if (b->state[idx] != WRL_FETCHING)
			break;
		if (!waited && !prefetch)
			atomic_fetch_add(&fs->dedup_waits, 1);
		waited = true;
		if (pthread_cond_timedwait(&b->cond, &b->lock, &dl) == ETIMEDOUT) {
			pthread_mutex_unlock(&b->lock);
			return wr_err_set(err, ETIMEDOUT, "chunk %" PRIu32 ": fetch still running",
					  idx);
		}
	}
	b->state[idx] = WRL_FETCHING;
	int datafd = dup(b->datafd);
	/* Set once, before any fetch, never freed while served. */
	const struct wrl_index *ix = b->index.sums ? &b->index : NULL;
	pthread_mutex_unlock(&b->lock);

	uint64_t off = (uint64_t)idx * b->chunk_size;
	uint32_t len = wrl_chunk_len(b, idx);
	struct wr_registry_ref ref = {0};
	_cleanup_free_ char *buf = malloc(len);
	size_t got = 0;
	int r;
	if (datafd < 0)
		r = wr_err_sys(err, "dup");
	else if (buf == NULL)
		r = wr_err_set(err, ENOMEM, "out of memory");
	else if ((r = wr_registry_ref_parse(b->reference, &ref, err)) == 0) {
		struct wr_registry *reg = registry_for(fs, ref.host, err);
		if (reg == NULL)
			r = -1;
		else
			r = wr_registry_blob_range(reg, ref.repo, b->digest, off, len, buf, &got,
						   err);
	}
	if (r == 0 && got != len)
		r = wr_err_set(err, EBADMSG, "short range: %zu of %" PRIu32 " bytes", got, len);
	/* Verified before it is written or served (lazy_internal.h): a chunk
	 * in the cache holds only bytes the index vouches for, and a bad one
	 * is not kept, so the next read fetches it again. */
	bool bad = false;
	uint64_t bad_off = 0;
	if (r == 0 && ix == NULL)
		r = wr_err_set(err, ENOENT, "no chunk index: nothing is fetched unverified");
	else if (r == 0 && (r = wrl_index_check(ix, off, buf, len, &bad_off, err)) == -EBADMSG)
		bad = true;
	if (r == 0 && pwrite(datafd, buf, len, (off_t)off) != (ssize_t)len)
		r = wr_err_sys(err, "chunk cache %s: write", b->hex);
	wr_registry_ref_free(&ref);
	if (datafd >= 0)
		close(datafd);

	pthread_mutex_lock(&b->lock);
	if (r == 0) {
		/* Served from now on; durable with the next flush. */
		b->state[idx] = WRL_DIRTY;
		b->ndirty++;
		b->present++;
		b->fetches++;
		b->bytes_fetched += len;
		maybe_commit(fs, b);
	} else {
		b->state[idx] = WRL_ABSENT;
		b->fetch_errors++;
		if (bad)
			b->verify_errors++;
	}
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&b->lock);
	if (r == 0) {
		atomic_fetch_add(&fs->fetches, 1);
		atomic_fetch_add(&fs->bytes_fetched, len);
		if (prefetch)
			atomic_fetch_add(&fs->prefetched, 1);
		return 0;
	}
	atomic_fetch_add(&fs->fetch_errors, 1);
	wr_err_wrap(err, "chunk %" PRIu32, idx);
	if (bad) {
		atomic_fetch_add(&fs->verify_errors, 1);
		lazyfs_event(fs, "chunk_verify_failed", b->digest, "%s, from %s; not cached, %s",
			     (*err)->msg, b->reference,
			     prefetch ? "a read fetches it again"
				      : "reader gets EIO, the next read fetches it again");
		if (corrupt)
			*corrupt = true;
	}
	return r;
}

/* ---- prefetch ---------------------------------------------------------- */

struct prefetch {
	struct lazyfs *fs;
	struct wrl_blob *b;
	uint32_t *list, n;
	atomic_uint next;
	atomic_int alive, errors;
};

static void *prefetch_run(void *arg)
{
	struct prefetch *p = arg;
	struct wrl_blob *b = p->b;
	for (;;) {
		uint32_t i = atomic_fetch_add(&p->next, 1);
		if (i >= p->n || atomic_load(&p->errors) >= 3)
			break;
		wr_err err = NULL;
		if (ensure_chunk(p->fs, b, p->list[i], true, NULL, &err) < 0) {
			/* Three failures in a row stop the fetchers: the
			 * registry is down; reads retry on their own. */
			if (atomic_fetch_add(&p->errors, 1) == 2)
				lazyfs_event(p->fs, "prefetch_stopped", b->digest, "%s", err->msg);
			wr_err_free(&err);
		} else {
			atomic_store(&p->errors, 0);
		}
	}
	if (atomic_fetch_sub(&p->alive, 1) == 1) {
		pthread_mutex_lock(&b->lock);
		b->prefetching = false;
		pthread_mutex_unlock(&b->lock);
		free(p->list);
		free(p);
	}
	return NULL;
}

/* Sequential reads: a read in the second half of a chunk whose successor
 * is absent fetches chunks ahead in the background (see op_read), so a
 * large file is read with several fetches in flight. At most 8 at a time. */
struct readahead {
	struct lazyfs *fs;
	struct wrl_blob *b;
	uint32_t idx;
};

static void *readahead_run(void *arg)
{
	struct readahead ra = *(struct readahead *)arg;
	free(arg);
	wr_err err = NULL;
	if (ensure_chunk(ra.fs, ra.b, ra.idx, true, NULL, &err) < 0)
		wr_err_free(&err); /* the reader that needs it reports */
	atomic_fetch_sub(&ra.fs->readaheads, 1);
	return NULL;
}

static void read_ahead(struct lazyfs *fs, struct wrl_blob *b, uint32_t idx)
{
	if (atomic_fetch_add(&fs->readaheads, 1) >= 8) {
		atomic_fetch_sub(&fs->readaheads, 1);
		return;
	}
	struct readahead *ra = malloc(sizeof(*ra));
	pthread_t t;
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	if (ra)
		*ra = (struct readahead){fs, b, idx};
	if (ra == NULL || pthread_create(&t, &at, readahead_run, ra) != 0) {
		free(ra);
		atomic_fetch_sub(&fs->readaheads, 1);
	}
	pthread_attr_destroy(&at);
}

/* A new start of the blob: fetch what earlier starts read, then (fetch_all)
 * the rest. Caller holds b->lock. */
static void prefetch_start(struct lazyfs *fs, struct wrl_blob *b)
{
	if (b->complete || b->prefetching)
		return;
	uint32_t *pat = NULL, npat = 0;
	wrl_pattern_load(b, &pat, &npat);
	size_t cap = (size_t)npat + (fs->cfg.fetch_all ? b->nchunks : 0);
	uint32_t *list = cap ? malloc(cap * sizeof(uint32_t)) : NULL;
	uint32_t n = 0;
	if (list == NULL) {
		free(pat);
		return;
	}
	uint8_t *seen = calloc(b->nchunks, 1);
	if (seen == NULL) {
		free(pat);
		free(list);
		return;
	}
	for (uint32_t i = 0; i < npat; i++)
		if (!seen[pat[i]] && b->state[pat[i]] == WRL_ABSENT) {
			seen[pat[i]] = 1;
			list[n++] = pat[i];
		}
	if (fs->cfg.fetch_all)
		for (uint32_t i = 0; i < b->nchunks; i++)
			if (!seen[i] && b->state[i] == WRL_ABSENT)
				list[n++] = i;
	free(seen);
	free(pat);
	unsigned nt = fs->cfg.prefetch_threads ? fs->cfg.prefetch_threads : 4;
	struct prefetch *p = calloc(1, sizeof(*p));
	if (n == 0 || p == NULL) {
		free(list);
		free(p);
		return;
	}
	*p = (struct prefetch){.fs = fs, .b = b, .list = list, .n = n};
	if (nt > n)
		nt = n;
	atomic_store(&p->alive, (int)nt);
	b->prefetching = true;
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	unsigned started = 0;
	for (unsigned i = 0; i < nt; i++) {
		pthread_t t;
		if (pthread_create(&t, &at, prefetch_run, p) == 0)
			started++;
	}
	pthread_attr_destroy(&at);
	if (started < nt &&
	    atomic_fetch_sub(&p->alive, (int)(nt - started)) == (int)(nt - started)) {
		b->prefetching = false;
		free(list);
		free(p);
	}
}

/* ---- registration ------------------------------------------------------ */

int lazyfs_register(struct lazyfs *fs, const char *digest, uint64_t size, const char *reference,
		    struct wrl_blob **out, wr_err *err)
{
	char hex[65];
	if (wrl_digest_hex(digest, hex, err) < 0)
		return -EINVAL;
	struct wr_registry_ref ref = {0};
	if (reference == NULL || wr_registry_ref_parse(reference, &ref, err) < 0)
		return reference ? wr_err_wrap(err, "reference")
				 : wr_err_field(err, "reference", "reference: required");
	wr_registry_ref_free(&ref);
	pthread_mutex_lock(&fs->lock);
	struct wrl_blob *b = fs->blobs;
	while (b && strcmp(b->hex, hex) != 0)
		b = b->next;
	int r = 0;
	if (b == NULL) {
		r = wrl_blob_load(fs->chunksfd, fs->cfg.store_dir, hex, &b, NULL);
		if (r < 0)
			r = wrl_blob_create(fs->chunksfd, digest, size, reference,
					    fs->cfg.chunk_size, &b, err);
		if (r == 0) {
			b->next = fs->blobs;
			fs->blobs = b;
		}
	}
	if (r == 0 && b->size != size)
		r = wr_err_field(err, "size", "blob %s: size %" PRIu64 ", registered as %" PRIu64,
				 digest, size, b->size);
	if (r == 0) {
		/* Loaded without an index (a cache older than indexes), pulled
		 * again since: its index is there now. */
		pthread_mutex_lock(&b->lock);
		if (!b->complete && b->index.sums == NULL && wrl_blob_attach_index(b, err) < 0)
			r = wr_err_wrap(err, "blob %s: no usable chunk index", digest);
		pthread_mutex_unlock(&b->lock);
	}
	pthread_mutex_unlock(&fs->lock);
	if (r < 0)
		return r;
	*out = b;
	return 0;
}

int lazyfs_forget(struct lazyfs *fs, const char *digest, wr_err *err)
{
	char hex[65];
	if (wrl_digest_hex(digest, hex, err) < 0)
		return -EINVAL;
	pthread_mutex_lock(&fs->lock);
	struct wrl_blob **pp = &fs->blobs;
	while (*pp && strcmp((*pp)->hex, hex) != 0)
		pp = &(*pp)->next;
	struct wrl_blob *b = *pp;
	if (b && b->opens > 0) {
		pthread_mutex_unlock(&fs->lock);
		return wr_err_set(err, EBUSY, "blob %s: mounted", digest);
	}
	if (b)
		*pp = b->next; /* the struct is kept: a reader may still hold it */
	int r = wrl_blob_remove(fs->chunksfd, hex, err);
	pthread_mutex_unlock(&fs->lock);
	return r;
}

/* ---- FUSE operations --------------------------------------------------- */

static struct lazyfs *fs_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static void fill_attr(struct stat *st, fuse_ino_t ino, const struct wrl_blob *b)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	if (b == NULL) {
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
	} else {
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		st->st_size = (off_t)b->size;
		st->st_blocks = (blkcnt_t)((b->size + 511) / 512);
	}
	st->st_blksize = 4096;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct lazyfs *fs = fs_of(req);
	struct fuse_entry_param e = {.attr_timeout = ATTR_TIMEOUT, .entry_timeout = ATTR_TIMEOUT};
	if (parent == INO_ROOT && strcmp(name, "sha256") == 0) {
		e.ino = INO_DIR;
		fill_attr(&e.attr, INO_DIR, NULL);
		fuse_reply_entry(req, &e);
		return;
	}
	struct wrl_blob *b = parent == INO_DIR && strlen(name) == 64 ? lazyfs_find(fs, name) : NULL;
	if (b == NULL) {
		/* Not cached negatively: a blob may be registered next. */
		e.entry_timeout = 0;
		e.ino = 0;
		fuse_reply_entry(req, &e);
		return;
	}
	e.ino = blob_ino(b->hex);
	fill_attr(&e.attr, e.ino, b);
	fuse_reply_entry(req, &e);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)fi;
	struct stat st;
	if (ino == INO_ROOT || ino == INO_DIR) {
		fill_attr(&st, ino, NULL);
		fuse_reply_attr(req, &st, ATTR_TIMEOUT);
		return;
	}
	struct wrl_blob *b = find_ino(fs_of(req), ino);
	if (b == NULL) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	fill_attr(&st, ino, b);
	fuse_reply_attr(req, &st, ATTR_TIMEOUT);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	(void)fi;
	struct lazyfs *fs = fs_of(req);
	if (ino != INO_ROOT && ino != INO_DIR) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	_cleanup_free_ char *buf = malloc(size);
	if (buf == NULL) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	size_t used = 0;
	off_t i = 0;
	struct stat st = {0};
#define ADD(nm, in, mode)                                                                          \
	do {                                                                                       \
		if (i++ >= off) {                                                                  \
			st.st_ino = (in);                                                          \
			st.st_mode = (mode);                                                       \
			size_t need =                                                              \
			    fuse_add_direntry(req, buf + used, size - used, (nm), &st, i);         \
			if (need > size - used)                                                    \
				goto out;                                                          \
			used += need;                                                              \
		}                                                                                  \
	} while (0)
	ADD(".", ino, S_IFDIR);
	ADD("..", INO_ROOT, S_IFDIR);
	if (ino == INO_ROOT) {
		ADD("sha256", INO_DIR, S_IFDIR);
	} else {
		pthread_mutex_lock(&fs->lock);
		for (struct wrl_blob *b = fs->blobs; b; b = b->next) {
			if (i++ < off)
				continue;
			st.st_ino = blob_ino(b->hex);
			st.st_mode = S_IFREG;
			size_t need =
			    fuse_add_direntry(req, buf + used, size - used, b->hex, &st, i);
			if (need > size - used)
				break;
			used += need;
		}
		pthread_mutex_unlock(&fs->lock);
	}
#undef ADD
out:
	fuse_reply_buf(req, buf, used);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct lazyfs *fs = fs_of(req);
	if (ino == INO_ROOT || ino == INO_DIR) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if ((fi->flags & O_ACCMODE) != O_RDONLY) {
		fuse_reply_err(req, EROFS);
		return;
	}
	struct wrl_blob *b = find_ino(fs, ino);
	if (b == NULL) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	fi->direct_io = !fs->cfg.page_cache;
	fi->keep_cache = fs->cfg.page_cache;
	fi->fh = 0;
	pthread_mutex_lock(&b->lock);
	if (b->opens++ <= 0) {
		/* A new start (a mount of this blob): record its first
		 * touches, prefetch what the last starts read. */
		b->opens = 1;
		memset(b->touched, 0, b->nchunks);
		b->norder = b->saved_norder = 0;
		b->session_start = time(NULL);
		prefetch_start(fs, b);
	}
	wrl_opens_store(b);
	pthread_mutex_unlock(&b->lock);
	fuse_reply_open(req, fi);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)fi;
	struct lazyfs *fs = fs_of(req);
	struct wrl_blob *b = find_ino(fs, ino);
	if (b) {
		pthread_mutex_lock(&b->lock);
		if (b->opens > 0)
			b->opens--;
		wrl_opens_store(b);
		if (b->norder != b->saved_norder)
			wrl_pattern_save(b, NULL);
		pthread_mutex_unlock(&b->lock);
	}
	fuse_reply_err(req, 0);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	(void)fi;
	struct lazyfs *fs = fs_of(req);
	struct wrl_blob *b = find_ino(fs, ino);
	if (b == NULL) {
		fuse_reply_err(req, EIO);
		return;
	}
	if (off < 0 || (uint64_t)off >= b->size || size == 0) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	if ((uint64_t)off + size > b->size)
		size = (size_t)(b->size - (uint64_t)off);
	uint32_t first = (uint32_t)((uint64_t)off / b->chunk_size);
	uint32_t last = (uint32_t)(((uint64_t)off + size - 1) / b->chunk_size);
	for (uint32_t i = first; i <= last; i++) {
		wr_err err = NULL;
		bool corrupt = false;
		if (ensure_chunk(fs, b, i, false, &corrupt, &err) < 0) {
			if (!corrupt) /* else ensure_chunk reported it */
				lazyfs_event(fs, "fetch_failed", b->digest, "%s (reader gets EIO)",
					     err->msg);
			wr_err_free(&err);
			fuse_reply_err(req, EIO);
			return;
		}
	}
	int64_t now = time(NULL);
	pthread_mutex_lock(&b->lock);
	for (uint32_t i = first; i <= last; i++) {
		if (b->atime && b->atime[i] != (uint32_t)now)
			b->atime[i] = (uint32_t)now;
		if (b->session_start && now - b->session_start <= fs->cfg.pattern_window_s &&
		    !b->touched[i]) {
			b->touched[i] = 1;
			b->order[b->norder++] = i;
		}
	}
	if (b->norder - b->saved_norder >= 64)
		wrl_pattern_save(b, NULL);
	b->reads++;
	b->read_bytes += size;
	int fd = dup(b->datafd);
	/* Sequential reading (the chunks before this one are here too): the
	 * further it went, the more chunks are fetched ahead, up to 8. */
	uint64_t end = (uint64_t)off + size;
	uint32_t ahead = 0;
	if (!b->complete && last + 1 < b->nchunks &&
	    end - (uint64_t)last * b->chunk_size >= b->chunk_size / 2)
		while (ahead < 8 && ahead < last && WRL_HAVE(b->state[last - 1 - ahead]))
			ahead++;
	uint32_t from = last + 1;
	while (ahead && from < b->nchunks && b->state[from] != WRL_ABSENT) {
		from++;
		ahead--;
	}
	pthread_mutex_unlock(&b->lock);
	for (uint32_t i = from; i < from + ahead && i < b->nchunks; i++)
		read_ahead(fs, b, i);
	atomic_fetch_add(&fs->reads, 1);
	atomic_fetch_add(&fs->read_bytes, size);
	/* Every chunk read here is PRESENT or DIRTY, hence verified before it
	 * was written (ensure_chunk), or the blob is complete and was verified
	 * whole: no check on this path. */
	_cleanup_free_ char *buf = malloc(size);
	ssize_t n = fd >= 0 && buf ? pread(fd, buf, size, off) : -1;
	int e = errno;
	if (fd >= 0)
		close(fd);
	if (n < 0)
		fuse_reply_err(req, buf ? e : ENOMEM);
	else
		fuse_reply_buf(req, buf, (size_t)n);
}

void lazyfs_conn_init(struct lazyfs_cfg *cfg, void *c)
{
	struct fuse_conn_info *conn = c;
	(void)cfg;
	/* Reads of different chunks run in parallel. */
	if (conn->capable & FUSE_CAP_ASYNC_READ)
		conn->want |= FUSE_CAP_ASYNC_READ;
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	struct lazyfs *fs = userdata;
	lazyfs_conn_init(&fs->cfg, conn);
}

static const struct fuse_lowlevel_ops worker_ops = {
    .init = op_init,
    .lookup = op_lookup,
    .getattr = op_getattr,
    .readdir = op_readdir,
    .open = op_open,
    .release = op_release,
    .read = op_read,
};

/* ---- the worker process ------------------------------------------------- */

/* Make fetched chunks durable in batches (lazy_internal.h): one fdatasync
 * per blob and period instead of one per chunk on the read path. */
static void flush_all(struct lazyfs *fs)
{
	pthread_mutex_lock(&fs->lock);
	size_t n = 0;
	for (struct wrl_blob *b = fs->blobs; b; b = b->next)
		n++;
	struct wrl_blob **v = calloc(n ? n : 1, sizeof(*v));
	n = 0;
	for (struct wrl_blob *b = fs->blobs; v && b; b = b->next)
		v[n++] = b;
	pthread_mutex_unlock(&fs->lock);
	for (size_t i = 0; v && i < n; i++) {
		wr_err err = NULL;
		pthread_mutex_lock(&v[i]->lock);
		int r = wrl_blob_flush(v[i], &err);
		pthread_mutex_unlock(&v[i]->lock);
		if (r < 0) {
			lazyfs_event(fs, "flush_failed", v[i]->digest, "%s", err->msg);
			wr_err_free(&err);
		}
	}
	free(v);
}

static void *flusher_run(void *arg)
{
	for (;;) {
		struct timespec ts = {0, 300 * 1000 * 1000};
		nanosleep(&ts, NULL);
		flush_all(arg);
	}
	return NULL;
}

static int load_blobs(struct lazyfs *fs, bool fresh, wr_err *err)
{
	struct wrl_blob **v = NULL;
	size_t n = 0;
	if (wrl_load_all(fs->chunksfd, fs->cfg.store_dir, &v, &n, err) < 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		/* A fresh mount: no file of it is open, whatever an earlier
		 * mount's counters say. */
		if (fresh && v[i]->opens) {
			v[i]->opens = 0;
			wrl_opens_store(v[i]);
		}
		v[i]->next = fs->blobs;
		fs->blobs = v[i];
		/* Every chunk here but not committed: an earlier worker died
		 * while verifying. Mounted and incomplete: what it was
		 * fetching in the background goes on. */
		pthread_mutex_lock(&v[i]->lock);
		maybe_commit(fs, v[i]);
		if (v[i]->opens > 0)
			prefetch_start(fs, v[i]);
		pthread_mutex_unlock(&v[i]->lock);
	}
	free(v);
	return 0;
}

/* Queue again every request of this connection that was read but not
 * answered (a dead worker's): lazyfs.h, resend mode. */
static int send_resend(int fd)
{
	struct fuse_out_header oh = {
	    .len = sizeof(oh), .error = WR_FUSE_NOTIFY_RESEND, .unique = 0};
	ssize_t n = write(fd, &oh, sizeof(oh));
	return n == (ssize_t)sizeof(oh) ? 0 : -1;
}

int lazyfs_worker_run(struct lazyfs_cfg *cfg, int master_fd, uint64_t dev, const void *init,
		      size_t init_len, int listenfd, int readyfd, bool fresh, uint64_t starts)
{
	/* The supervisor's death ends this worker: the next lazyfs serves
	 * (resend mode) or the mount ends. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	static struct lazyfs fs; /* lives as long as the process */
	fs.cfg = *cfg;
	fs.chunksfd = -1;
	fs.master_fd = master_fd;
	fs.dev = dev;
	fs.worker_starts = starts;
	pthread_mutex_init(&fs.lock, NULL);
	wr_err err = NULL;
	if (asprintf(&fs.mnt, "%s/lazyfs/mnt", cfg->run_dir) < 0)
		return 1;
	/* Before the blobs: loading may start a commit. */
	struct wr_image_store_opts so = {.dir = cfg->store_dir};
	if (wr_image_store_open(&so, &fs.store, &err) < 0) {
		/* Blobs are still served and verified; they are just not
		 * committed to the store. */
		lazyfs_event(&fs, "store_unavailable", "", "%s", err->msg);
		wr_err_free(&err);
	}
	if ((fs.chunksfd = wrl_chunks_open(cfg->store_dir, &err)) < 0 ||
	    load_blobs(&fs, fresh, &err) < 0) {
		fprintf(stderr, "warren-lazyfs: worker: %s\n", err->msg);
		return 1;
	}
	/* Resend mode reads on the master itself (a request read there
	 * outlives us); otherwise on a clone, whose requests the kernel ends
	 * when we die. */
	int sfd = cfg->resend ? dup(master_fd) : open("/dev/fuse", O_RDWR | O_CLOEXEC);
	uint32_t mfd = (uint32_t)master_fd;
	if (sfd < 0 || (!cfg->resend && ioctl(sfd, FUSE_DEV_IOC_CLONE, &mfd) < 0)) {
		fprintf(stderr, "warren-lazyfs: worker: %s /dev/fuse: %m\n",
			cfg->resend ? "dup" : "clone");
		return 1;
	}
	fcntl(sfd, F_SETFD, FD_CLOEXEC);
	char *argv[] = {"warren-lazyfs", NULL};
	struct fuse_args args = FUSE_ARGS_INIT(1, argv);
	struct fuse_session *se = fuse_session_new(&args, &worker_ops, sizeof(worker_ops), &fs);
	char mp[32];
	snprintf(mp, sizeof(mp), "/dev/fd/%d", sfd);
	if (se == NULL || fuse_session_mount(se, mp) != 0) {
		fprintf(stderr, "warren-lazyfs: worker: fuse session failed\n");
		return 1;
	}
	/* Replay the FUSE_INIT the supervisor answered: libfuse serves no
	 * request before it saw one. The kernel does not know that request
	 * any more, so the reply is dropped (ENOENT, which libfuse ignores). */
	struct fuse_buf fb = {.mem = malloc(init_len), .size = init_len};
	if (fb.mem == NULL)
		return 1;
	memcpy(fb.mem, init, init_len);
	fuse_session_process_buf(se, &fb);
	free(fb.mem);
	pthread_t ft;
	if (pthread_create(&ft, NULL, flusher_run, &fs) == 0)
		pthread_detach(ft);
	if (fuse_set_signal_handlers(se) != 0 || lazyfs_ctl_start(&fs, listenfd, &err) < 0) {
		fprintf(stderr, "warren-lazyfs: worker: %s\n", err ? err->msg : "signal handlers");
		return 1;
	}
	if (cfg->resend && (!fresh || cfg->adopted)) {
		/* Before we read anything: what an earlier worker or lazyfs
		 * had read and not answered comes first again. */
		if (send_resend(master_fd) < 0) {
			fprintf(stderr, "warren-lazyfs: worker: resend pending requests: %m\n");
			lazyfs_event(&fs, "resend_failed", "",
				     "the kernel refused FUSE_NOTIFY_RESEND (%s): the mount ends, "
				     "its readers get EIO",
				     strerror(errno));
			return LAZYFS_EXIT_NORESEND;
		}
		lazyfs_event(&fs, cfg->adopted && starts == 1 ? "adopted" : "resumed", "",
			     "worker %" PRIu64 " serves the mount%s; requests left unanswered "
			     "were queued again",
			     starts, cfg->adopted && starts == 1 ? " of a lazyfs that died" : "");
	}
	if (readyfd >= 0) {
		char ok = 'R';
		if (write(readyfd, &ok, 1) < 0) {
			/* the supervisor notices our state by waitpid anyway */
		}
		close(readyfd);
	}
	struct fuse_loop_config *lc = fuse_loop_cfg_create();
	fuse_loop_cfg_set_clone_fd(lc, cfg->resend ? 0 : 1);
	fuse_loop_cfg_set_max_threads(lc, cfg->max_threads ? cfg->max_threads : 64);
	fuse_loop_cfg_set_idle_threads(lc, 8);
	int r = fuse_session_loop_mt(se, lc);
	fuse_loop_cfg_destroy(lc);
	/* Stopping: keep what was fetched and what the current starts
	 * recorded. */
	flush_all(&fs);
	pthread_mutex_lock(&fs.lock);
	for (struct wrl_blob *b = fs.blobs; b; b = b->next) {
		pthread_mutex_lock(&b->lock);
		if (b->norder != b->saved_norder)
			wrl_pattern_save(b, NULL);
		pthread_mutex_unlock(&b->lock);
	}
	pthread_mutex_unlock(&fs.lock);
	fuse_remove_signal_handlers(se);
	return r == 0 ? 0 : 1;
}
