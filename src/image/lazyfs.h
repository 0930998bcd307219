/* warren-lazyfs internals: the supervisor (lazyfs_main.c), the FUSE worker
 * (lazyfs.c) and its control socket (lazyfs_ctl.c). Not installed.
 *
 * Process model (why two processes): the supervisor mounts the FUSE file
 * system, answers the kernel's FUSE_INIT and then only holds the /dev/fuse
 * fd (the "master") and the control socket's listening fd, and waits. The
 * worker serves every request. Inode numbers are derived from digests,
 * file handles are unused: the worker keeps no per-open state the kernel
 * knows about, so any later worker can serve the same mount.
 *
 * Resend mode (kernel FUSE protocol >= 7.40, Linux 6.9+; the minor is read
 * from the kernel's FUSE_INIT): the worker reads requests from the master
 * itself (a dup, no FUSE_DEV_IOC_CLONE). A request it read but did not
 * answer stays in the master's processing queue when it dies, because the
 * open file outlives it (the supervisor holds it, and warrend's mount keeper
 * holds a dup: lazy_keep.c). The next worker writes FUSE_NOTIFY_RESEND
 * (common/compat.h) before it serves: the kernel queues those requests
 * again and no reader hangs or fails. This also covers the supervisor's
 * death: the keeper starts a new lazyfs with --adopt-fd on its dup; the new
 * supervisor does not mount, it takes the FUSE_INIT bytes and the mount's
 * st_dev from <run>/lazyfs/conn (written at mount time), checks that the
 * same connection is still mounted at <run>/lazyfs/mnt, and starts a worker
 * on the same chunk cache (the blob list is rebuilt from <store>/chunks).
 * Ordering: a new lazyfs sends the resend only once it holds the chunk lock,
 * which the old supervisor's worker also held (inherited): so no process of
 * the old lazyfs can still read from the connection and leave a request
 * behind after the resend.
 *
 * Without resend (older kernels): the worker reads on fds cloned from the
 * master; when it dies the kernel ends the requests it had read with
 * ECONNABORTED (the reader gets an error, never a hang) and the supervisor
 * starts the next worker. A lazyfs is then not adoptable: --adopt-fd exits
 * with status 4 and the keeper closes its dup, which ends the connection
 * (EIO for every reader) instead of leaving requests nobody will answer.
 *
 * Each worker replays the recorded FUSE_INIT to its libfuse session (the
 * reply goes nowhere: the kernel no longer knows that request). A clean stop
 * (SIGTERM) unmounts and removes <run>/lazyfs/pid: a keeper seeing the
 * supervisor gone and the pid file too closes its dup, so the connection
 * ends (EIO for the readers) rather than waiting for a server.
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
	bool resend;		   /* resend mode (above) */
	bool adopted;		   /* this supervisor took over a mount (--adopt-fd) */
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
	char *mnt;     /* <run>/lazyfs/mnt */
	int master_fd; /* the connection (handed to the mount keeper) */
	uint64_t dev;  /* st_dev of the mount */
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
/* Exit status of a worker that could not resend (the supervisor then stops
 * and the connection ends: EIO, never a hang). */
#define LAZYFS_EXIT_NORESEND 5
int lazyfs_worker_run(struct lazyfs_cfg *cfg, int master_fd, uint64_t dev, const void *init,
		      size_t init_len, int listenfd, int readyfd, bool fresh, uint64_t starts);
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
