/* warren-lazyfs internals: the supervisor (lazyfs_main.c), the FUSE worker
 * (lazyfs.c) and its control socket (lazyfs_ctl.c). Not installed.
 *
 * Process model (why two processes): the supervisor mounts the FUSE file
 * system, answers the kernel's FUSE_INIT and then only holds the /dev/fuse
 * fd and the control socket's listening fd, and waits. The worker serves
 * every request on fds cloned from that one (FUSE_DEV_IOC_CLONE). When a
 * worker dies (crash, kill -9), the kernel ends the requests it had read
 * with an error (ECONNABORTED: the reader gets EIO, never a hang) and keeps
 * the connection, because the supervisor's fd is still open; the next
 * worker clones the fd again, replays the recorded FUSE_INIT to its libfuse
 * session (the reply goes nowhere) and serves the same mount. Inode numbers
 * are derived from digests, file handles are unused: the worker keeps no
 * per-open state the kernel knows about. Only the supervisor's death ends
 * the mount (EIO for every later read); a new lazyfs then mounts afresh.
 */
#ifndef WARREN_IMAGE_LAZYFS_H
#define WARREN_IMAGE_LAZYFS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "image/image.h"
#include "image/lazy_internal.h"
#include "image/registry.h"

struct lazyfs_cfg {
	const char *store_dir, *run_dir;
	uint32_t chunk_size;
	bool fetch_all;
	bool page_cache; /* FUSE page cache instead of direct_io */
	unsigned prefetch_threads, max_threads;
	unsigned pattern_window_s; /* record first touches this long after a mount */
	struct wr_registry_opts reg;
};

#define LAZYFS_EVENTS 256

struct lazyfs_event {
	uint64_t seq;
	int64_t time;
	char type[24];
	char digest[72];
	char msg[320];
};

struct lazyfs_reg {
	char *host;
	struct wr_registry *reg;
	struct lazyfs_reg *next;
};

struct lazyfs {
	struct lazyfs_cfg cfg;
	char *mnt; /* <run>/lazyfs/mnt */
	int chunksfd;
	struct wr_image_store *store; /* NULL when it could not be opened */
	pthread_mutex_t lock;	      /* blobs, regs, events */
	struct wrl_blob *blobs;
	struct lazyfs_reg *regs;
	struct lazyfs_event ev[LAZYFS_EVENTS];
	uint64_t ev_seq;
	uint64_t worker_starts;
	atomic_uint_fast64_t bytes_fetched, fetches, fetch_errors, verify_errors, dedup_waits,
	    prefetched, reads, read_bytes;
	atomic_int readaheads; /* background next-chunk fetches running */
};

/* lazyfs.c */
int lazyfs_worker_run(struct lazyfs_cfg *cfg, int master_fd, const void *init, size_t init_len,
		      int listenfd, int readyfd, bool fresh, uint64_t starts);
void lazyfs_conn_init(struct lazyfs_cfg *cfg, void *conn);
struct wrl_blob *lazyfs_find(struct lazyfs *fs, const char *hex);
/* Register (or find) a blob; *b borrowed from the list. */
int lazyfs_register(struct lazyfs *fs, const char *digest, uint64_t size, const char *reference,
		    struct wrl_blob **b, wr_err *err);
int lazyfs_forget(struct lazyfs *fs, const char *digest, wr_err *err);

/* lazyfs_ctl.c */
void lazyfs_event(struct lazyfs *fs, const char *type, const char *digest, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int lazyfs_ctl_start(struct lazyfs *fs, int listenfd, wr_err *err);

#endif
