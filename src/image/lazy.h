/* warren on-demand image loading: the client of warren-lazyfs.
 *
 * warren-lazyfs (src/image/lazyfs*.c) is a long-lived FUSE daemon, one per
 * store directory, that exposes each registered remote EROFS blob as a
 * read-only regular file <run>/lazyfs/mnt/sha256/<hex> of the blob's size.
 * Reads fetch the chunks they touch with HTTP Range requests
 * (wr_registry_blob_range) into a chunk cache under <store>/chunks/<hex>/,
 * so a sandbox mounts the image (file-backed EROFS over that file) and
 * starts before the blob is on disk. Each fetched range is checked against
 * the blob's chunk index (lazy_index.h, saved by the lazy pull) before it
 * is cached or served; a blob without one is not served. When the last chunk arrives the whole
 * blob is verified against its digest and committed to the store
 * (wr_image_blob_commit): later acquires get the local blob.
 *
 * This module starts lazyfs on demand (it survives the caller: warrend can
 * restart without breaking mounted images; with the mount keeper below,
 * lazyfs can die and be replaced without breaking them either), finds it again through its
 * control socket <run>/lazyfs/ctl.sock, registers blobs, reads counters and
 * events, and sizes and trims the chunk cache for the store's gc. It plugs
 * into the store through wr_lazy_image_ops (image.h's struct
 * wr_image_lazy_ops, ctx = the struct wr_lazy *).
 *
 * Errors follow src/common/error.h. Thread-safe: one struct wr_lazy may be
 * used from many threads.
 */
#ifndef WARREN_IMAGE_LAZY_H
#define WARREN_IMAGE_LAZY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "image/image.h"

#define WR_LAZY_CHUNK_DEFAULT (512u << 10)

struct wr_lazy_opts {
	const char *store_dir;	   /* required: the image store directory */
	const char *run_dir;	   /* required: lazyfs uses <run_dir>/lazyfs/ */
	const char *lazyfs_path;   /* the binary; NULL = $WARREN_LAZYFS, else libexecdir */
	uint32_t chunk_size;	   /* bytes, power of two, 64 KiB..64 MiB; 0 = 512 KiB */
	bool fetch_all;		   /* after the prefetch, fetch the rest in the background */
	unsigned prefetch_threads; /* background fetchers per blob; 0 = 4 */
	unsigned max_threads;	   /* FUSE worker threads; 0 = 64 */
	/* Registry client settings lazyfs uses (registry.h). */
	bool insecure;
	const char *auth_file;
	const char *ca_file;
	unsigned connect_timeout_ms; /* 0 = 5000 */
	unsigned range_timeout_ms;   /* one chunk fetch in all; 0 = 30000 */
	unsigned retries;	     /* 0 = the registry default */
	const char *log_path;	     /* lazyfs's stderr; NULL = <run_dir>/lazyfs/lazyfs.log */
};

struct wr_lazy;

/* No process is started here. opts' strings are copied. */
int wr_lazy_open(const struct wr_lazy_opts *opts, struct wr_lazy **out, wr_err *err);
/* Never stops lazyfs: mounted images keep working. */
void wr_lazy_close(struct wr_lazy **l);

/* Start lazyfs unless it runs (found by its control socket); returns when
 * it answers. Concurrent callers (threads or processes) start one. */
int wr_lazy_ensure(struct wr_lazy *l, wr_err *err);
/* Stop lazyfs (SIGTERM to its supervisor, wait up to timeout_ms): mounts of
 * its files then fail with EIO. 0 also when it was not running. */
int wr_lazy_stop(struct wr_lazy *l, unsigned timeout_ms, wr_err *err);
/* pid of the running lazyfs supervisor, 0 when none. */
int wr_lazy_pid(struct wr_lazy *l);

/* Make sure lazyfs runs and serves blob `digest` (size bytes) of the
 * registry reference `reference` ("host/repo@sha256:..." or with a tag);
 * *path (malloc'd) is the file to mount. */
int wr_lazy_register(struct wr_lazy *l, const char *digest, uint64_t size, const char *reference,
		     char **path, wr_err *err);

struct wr_lazy_stats {
	uint64_t bytes_fetched;	    /* from registries, since lazyfs started */
	uint64_t fetches;	    /* chunk fetches (Range requests that succeeded) */
	uint64_t fetch_errors;	    /* chunk fetches that failed (verification included) */
	uint64_t verify_errors;	    /* fetched ranges that did not match the chunk index */
	uint64_t dedup_waits;	    /* reads that waited for a fetch already running */
	uint64_t prefetched;	    /* chunks fetched by the background fetchers */
	uint64_t reads, read_bytes; /* FUSE reads served */
	uint64_t cache_bytes;	    /* chunk cache on disk (logical) */
	uint64_t worker_starts;	    /* 1 + restarts of the worker */
	unsigned blobs;
};
/* Counters of the running lazyfs (-ECONNREFUSED when it does not run). For
 * one blob when digest is not NULL (bytes_fetched, fetches, cache_bytes,
 * reads of that blob only). */
int wr_lazy_stats(struct wr_lazy *l, const char *digest, struct wr_lazy_stats *out, wr_err *err);

/* Events (fetch errors, commits, verification failures), oldest first:
 * cb is called for each event with a sequence number > since; returns the
 * last sequence number seen (>= since), negative on error. */
typedef void (*wr_lazy_event_cb)(void *ctx, uint64_t seq, int64_t time, const char *type,
				 const char *digest, const char *msg);
int64_t wr_lazy_events(struct wr_lazy *l, uint64_t since, wr_lazy_event_cb cb, void *ctx,
		       wr_err *err);

/* Chunk cache size and eviction (also when lazyfs does not run: then the
 * files are read and trimmed directly under the store's chunk lock). Trim
 * evicts least recently used chunks first and never touches a blob that is
 * open (mounted) while incomplete. */
uint64_t wr_lazy_cache_bytes(struct wr_lazy *l);
int wr_lazy_cache_trim(struct wr_lazy *l, uint64_t want, uint64_t *freed, wr_err *err);
/* Drop everything cached for digest (the image was removed). */
int wr_lazy_forget(struct wr_lazy *l, const char *digest, wr_err *err);

/* The mount keeper (lazy_keep.c; warrend runs one, process model in
 * lazyfs.h): a thread that holds a dup of lazyfs's /dev/fuse connection
 * and watches its supervisor. When lazyfs dies, the keeper starts another
 * on the same connection (the mounts keep working; reads that were waiting
 * get their bytes); a restarted keeper fetches the connection from the
 * running lazyfs. An upgrade: SIGUSR1 to the lazyfs supervisor makes it
 * stop without unmounting, and the keeper starts the binary now installed
 * on the same mounts. cb reports each transition (type "lazyfs_died",
 * "lazyfs_handover", "lazyfs_restarted", "lazyfs_lost", "lazyfs_stopped";
 * from the keeper's thread or a wr_lazy_ensure caller). Stopping the keeper
 * (or wr_lazy_close) leaves lazyfs running. */
typedef void (*wr_lazy_keep_cb)(void *ctx, const char *type, const char *msg);
int wr_lazy_keep_start(struct wr_lazy *l, wr_lazy_keep_cb cb, void *ctx, wr_err *err);
void wr_lazy_keep_stop(struct wr_lazy *l);
/* pid of the lazyfs whose connection the keeper holds, 0 when none. */
int wr_lazy_keep_held(struct wr_lazy *l);

/* The store's hooks (image.h); ctx is a struct wr_lazy *. */
extern const struct wr_image_lazy_ops wr_lazy_image_ops;

/* warrend's hook (src/daemon/images.c, wrd_images_open): plug on-demand
 * loading into the store options it is about to open (so->dir set): a
 * client for so->dir with lazyfs under run_dir, defaults otherwise. The
 * client lives as long as the process. lazyfs is only started by the first
 * acquire of an incomplete image. */
int wr_lazy_attach(struct wr_image_store_opts *so, const char *run_dir, wr_err *err);

#endif
