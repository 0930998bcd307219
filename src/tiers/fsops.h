/* File operations on a sandbox's filesystem from the host, race-free.
 *
 * Every path is resolved beneath ctx->root_fd with
 * openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV):
 * "..", absolute paths and symlinks (even ones swapped in mid-operation)
 * all stay inside the root, magic links (/proc/x/fd/y, /proc/self/root) are
 * refused, and the walk never leaves the root filesystem (so /proc, /sys and
 * /dev of the sandbox, which are the kernel's, are out of reach of the host
 * process doing the work). Multi-step operations hold directory fds and use
 * *at() calls with single path components, never re-resolving a path.
 * Only regular files are read or written (FIFOs, devices, sockets: EINVAL
 * naming the type), opened O_NONBLOCK|O_NOFOLLOW so nothing can block the
 * host. Files and dirs created get ctx->uid/gid (host ids of the sandbox's
 * user) so the sandbox owns what the API wrote.
 */
#ifndef WARREN_TIERS_FSOPS_H
#define WARREN_TIERS_FSOPS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "common/error.h"

struct wr_fs {
	int root_fd; /* O_PATH|O_DIRECTORY fd of the sandbox root (borrowed) */
	uid_t id_base; /* host uid/gid that is 0 inside (ids are reported minus this) */
	uid_t uid;     /* host uid that new files get */
	gid_t gid;
};

enum wr_fs_type { WR_FS_FILE, WR_FS_DIR, WR_FS_SYMLINK, WR_FS_OTHER };

struct wr_fs_stat {
	enum wr_fs_type type;
	uint64_t size;
	mode_t mode; /* permission bits only */
	uid_t uid;   /* as seen inside the sandbox (host id - ctx uid base) */
	gid_t gid;
	int64_t mtime_ns;
	char *symlink_target; /* for symlinks: malloc'd target text */
};
void wr_fs_stat_free(struct wr_fs_stat *st);

/* Read up to max bytes of a regular file; *truncated set when larger.
 * Stream variant: writes the content to out_fd. */
int wr_fs_read(const struct wr_fs *fs, const char *path, uint64_t max, char **data, size_t *len,
	       bool *truncated, wr_err *err);
int wr_fs_read_to_fd(const struct wr_fs *fs, const char *path, int out_fd, uint64_t max,
		     uint64_t *written, wr_err *err);
/* Atomic replace: write a temp file in the same directory, fsync-free
 * rename over the target. mode applies to a new file; an existing file
 * keeps its mode. Parents are created when `parents`. */
int wr_fs_write(const struct wr_fs *fs, const char *path, const void *data, size_t len,
		mode_t mode, bool parents, wr_err *err);
int wr_fs_write_from_fd(const struct wr_fs *fs, const char *path, int in_fd, uint64_t max,
			mode_t mode, bool parents, wr_err *err);

/* Entries of a directory, recursing `depth` levels (1 = just this dir).
 * Callback gets the path relative to `path` and its lstat; return non-zero
 * to stop. */
typedef int (*wr_fs_list_cb)(void *ctx, const char *relpath, const struct wr_fs_stat *st);
int wr_fs_list(const struct wr_fs *fs, const char *path, int depth, wr_fs_list_cb cb,
	       void *ctx, wr_err *err);

/* lstat semantics (a symlink is reported as a symlink). ENOENT when absent. */
int wr_fs_stat(const struct wr_fs *fs, const char *path, struct wr_fs_stat *st, wr_err *err);
int wr_fs_exists(const struct wr_fs *fs, const char *path, bool *exists, wr_err *err);
int wr_fs_mkdir(const struct wr_fs *fs, const char *path, mode_t mode, bool parents,
		wr_err *err);
/* Remove a file, symlink or (recursive) directory. Never follows symlinks. */
int wr_fs_remove(const struct wr_fs *fs, const char *path, bool recursive, wr_err *err);
int wr_fs_rename(const struct wr_fs *fs, const char *from, const char *to, wr_err *err);

#endif
