/* Internals shared by warren-lazyfs and the lazy client (not installed).
 *
 * Chunk cache layout, one directory per blob:
 *   <store>/chunks/.lock          flock LOCK_EX held by the running lazyfs
 *                                 supervisor, or by a client trimming the
 *                                 cache while lazyfs does not run
 *   <store>/chunks/<hex>/meta.json {"digest","size","reference","chunk_size",
 *                                  "complete","verified"} (written by rename)
 *   <store>/chunks/<hex>/index    the blob's chunk index (lazy_index.h), put
 *                                 there by the pull before the record exists
 *   <store>/chunks/<hex>/data     sparse file of the blob's size
 *   <store>/chunks/<hex>/bitmap   one byte per chunk: 1 = data holds it
 *   <store>/chunks/<hex>/atime    u32 per chunk: last use (unix seconds)
 *   <store>/chunks/<hex>/pattern  chunk indices (u32 LE) in first-touch
 *                                 order of the last starts (prefetch list)
 *   <store>/chunks/<hex>/opens    u32: files open (mounts) across worker
 *                                 restarts
 *
 * Write ordering: a chunk's bytes are written and fdatasync'd before its
 * bitmap byte becomes 1 (a fetched chunk is served at once, state DIRTY;
 * wrl_blob_flush, every few hundred ms, syncs the data once for all dirty
 * chunks and then sets their bytes); eviction sets the byte to 0 before
 * punching the hole. So a crash never leaves a bitmap byte claiming bytes that are not
 * on disk. Once a blob is complete, verified and committed to the store,
 * meta.json says "complete": true and data/bitmap/atime are removed: reads
 * then come from the store's blob.
 *
 * Verification: every chunk whose state is PRESENT or DIRTY was checked
 * piece by piece against the index before its bytes were written to data
 * (lazyfs.c, ensure_chunk), so the cache holds only verified bytes and a
 * read of a cached chunk needs no check. meta.json's "verified" says the
 * bitmap obeys that rule; a cache from before chunk indexes ("verified"
 * absent) has its chunks dropped when loaded. Without an index nothing is
 * fetched (a blob with none is not registered at all).
 */
#ifndef WARREN_IMAGE_LAZY_INTERNAL_H
#define WARREN_IMAGE_LAZY_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "image/lazy_index.h"

#define WRL_ABSENT 0
#define WRL_PRESENT 1
#define WRL_FETCHING 2
#define WRL_DIRTY 3 /* fetched, served; its bitmap byte not durable yet */
#define WRL_HAVE(s) ((s) == WRL_PRESENT || (s) == WRL_DIRTY)

#define WRL_PATTERN_MAX 65536u /* chunk indices kept in a pattern file */

struct wrl_blob {
	char hex[65];
	char digest[72];
	uint64_t size;
	uint32_t chunk_size, nchunks;
	char *reference; /* "host/repo@digest" */
	int dirfd;	 /* <store>/chunks/<hex> */
	int datafd;	 /* data, or the store's blob once committed */
	int bitmapfd;
	uint8_t *state; /* per chunk: WRL_ABSENT / PRESENT / FETCHING / DIRTY */
	uint32_t ndirty;
	uint32_t *atime; /* per chunk, mmap of the atime file (NULL when complete) */
	uint32_t present;
	bool complete;		/* every byte local and verified */
	bool verified;		/* every present chunk was checked against index */
	struct wrl_index index; /* sums == NULL: none (nothing can be fetched);
				 * set at most once, never freed while served */
	bool committing;	/* verification running */
	bool prefetching;
	int opens;
	/* first-touch order of the current start (session) */
	uint8_t *touched;
	uint32_t *order, norder, saved_norder;
	int64_t session_start;
	/* counters */
	uint64_t bytes_fetched, fetches, fetch_errors, verify_errors, reads, read_bytes;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct wrl_blob *next;
};

/* The digest's hex (64 lowercase) from "sha256:<hex>", or -EINVAL. */
int wrl_digest_hex(const char *digest, char hex[65], wr_err *err);
/* <store>/chunks, created (0700) when missing. */
int wrl_chunks_open(const char *store_dir, wr_err *err);
/* flock the chunk lock: LOCK_EX | (nonblock ? LOCK_NB : 0). Returns the fd. */
int wrl_chunks_lock(int chunksfd, bool nonblock, wr_err *err);

/* Create the cache of one blob (an empty bitmap). Its directory must hold
 * the chunk index the pull saved (-ENOENT otherwise); the chunk size is
 * raised to the index's grain when smaller, so that every fetch is whole
 * pieces. */
int wrl_blob_create(int chunksfd, const char *digest, uint64_t size, const char *reference,
		    uint32_t chunk_size, struct wrl_blob **out, wr_err *err);
/* Attach <dir>/index to a blob that has none yet (the image was pulled again
 * after lazyfs loaded it). Caller holds b->lock. */
int wrl_blob_attach_index(struct wrl_blob *b, wr_err *err);
/* Load <chunks>/<hex>. A complete blob is read from the store's
 * <store_dir>/blobs/sha256/<hex> (or its own data when it has no record). */
int wrl_blob_load(int chunksfd, const char *store_dir, const char *hex, struct wrl_blob **out,
		  wr_err *err);
void wrl_blob_free(struct wrl_blob *b);

/* Make the DIRTY chunks durable: one fdatasync of the data, then their
 * bitmap bytes; they become PRESENT. Caller holds b->lock. */
int wrl_blob_flush(struct wrl_blob *b, wr_err *err);
/* Drop chunk idx (bitmap byte first, then the hole). */
int wrl_blob_evict_chunk(struct wrl_blob *b, uint32_t idx);
/* Logical bytes of the present chunks. */
uint64_t wrl_blob_cache_bytes(const struct wrl_blob *b);
static inline uint32_t wrl_chunk_len(const struct wrl_blob *b, uint32_t idx)
{
	uint64_t off = (uint64_t)idx * b->chunk_size;
	uint64_t left = b->size - off;
	return left < b->chunk_size ? (uint32_t)left : b->chunk_size;
}

/* Every byte is local and verified: switch to store_blob_path (when not
 * NULL: the store has it, data/bitmap/atime go) or keep data, and write
 * meta with "complete": true. */
int wrl_blob_set_complete(struct wrl_blob *b, const char *store_blob_path, wr_err *err);
/* sha256 of datafd's first size bytes equals b->digest? 0 / -EBADMSG. */
int wrl_blob_verify(struct wrl_blob *b, wr_err *err);

/* Access patterns: load the saved indices (malloc'd, *n of them); save the
 * current session's order merged in front of the saved one. */
int wrl_pattern_load(struct wrl_blob *b, uint32_t **out, uint32_t *n);
int wrl_pattern_save(struct wrl_blob *b, wr_err *err);
/* The persistent open count (see the layout above). */
void wrl_opens_store(struct wrl_blob *b);

/* Remove <chunks>/<hex> entirely. */
int wrl_blob_remove(int chunksfd, const char *hex, wr_err *err);

/* LRU trim over loaded blobs: evict least recently used present chunks of
 * blobs that are not (open and incomplete) until want bytes are freed.
 * Takes each blob's lock. Complete blobs kept only as local data (no store
 * record) count as whole. */
int wrl_trim(struct wrl_blob **blobs, size_t n, uint64_t want, uint64_t *freed);

/* Load every blob directory (for the offline client path and lazyfs start).
 * *out is a malloc'd array of *n blobs. Broken directories are skipped. */
int wrl_load_all(int chunksfd, const char *store_dir, struct wrl_blob ***out, size_t *n,
		 wr_err *err);

#endif
