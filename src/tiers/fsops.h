/* File operations on a sandbox's filesystem from the host, race-free.
 *
 * Every path is resolved beneath fs->root_fd with
 * openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV):
 * "..", absolute paths and symlinks (even ones swapped in mid-operation)
 * all stay inside the root, magic links (/proc/x/fd/y, /proc/self/root) are
 * refused, and the walk never leaves the root filesystem (so /proc, /sys and
 * /dev of the sandbox, which are the kernel's, are out of reach of the host
 * process doing the work). Multi-step operations hold directory fds and use
 * *at() calls with single path components, never re-resolving a path.
 * Only regular files are read (FIFOs, devices, sockets: EINVAL naming the
 * type; a directory: EISDIR): the path is opened O_PATH, checked, and that
 * inode reopened O_NONBLOCK through /proc/thread-self/fd, so nothing can
 * block the host or run a device's open. Files and dirs created get
 * fs->uid/gid (host ids of the sandbox's user) so the sandbox owns what the
 * API wrote.
 *
 * Paths: relative ones are relative to the root, "/" and "." are the root,
 * "" is EINVAL, more than PATH_MAX - 1 bytes or a component longer than
 * NAME_MAX is ENAMETOOLONG. Operations on a last component (write, mkdir,
 * remove, rename) refuse one that is "." or ".." (EINVAL). A symlink in the
 * middle of a path is followed inside the root (a symlink to /etc/shadow
 * means <root>/etc/shadow); so is a final one for read and list; the other
 * operations act on the final symlink itself.
 *
 * Errors: "<op> <path as given>: <reason>" with errno in err->errnum
 * (ENOENT, EISDIR, ENOTDIR, EEXIST, ENOSPC, EXDEV for a mount, ELOOP for a
 * magic link, ...). Messages never contain host paths.
 */
#ifndef WARREN_TIERS_FSOPS_H
#define WARREN_TIERS_FSOPS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "common/error.h"

struct wr_fs_remote;

struct wr_fs {
	int root_fd;   /* O_PATH|O_DIRECTORY fd of the sandbox root (borrowed) */
	uid_t id_base; /* host uid/gid that is 0 inside (ids are reported minus this) */
	uid_t uid;     /* host uid that new files get */
	gid_t gid;
	/* A tier whose files live where the host cannot open them (a VM's
	 * guest) sets remote (root_fd -1): every wr_fs_* call below is then
	 * remote->op(remote_ctx, ...), which keeps the same rules, messages
	 * and errnos. NULL for a local root. */
	const struct wr_fs_remote *remote;
	void *remote_ctx;
};

enum wr_fs_type { WR_FS_FILE, WR_FS_DIR, WR_FS_SYMLINK, WR_FS_OTHER };

struct wr_fs_stat {
	enum wr_fs_type type;
	uint64_t size;
	mode_t mode; /* permission bits only */
	uid_t uid;   /* as seen inside the sandbox (host id - fs->id_base) */
	gid_t gid;
	int64_t mtime_ns;
	char *symlink_target; /* for symlinks: malloc'd target text */
};
void wr_fs_stat_free(struct wr_fs_stat *st);

/* Read up to max bytes of a regular file; *truncated set when larger.
 * *data is malloc'd and NUL-terminated (*len excludes the NUL).
 * Stream variant: copies up to max bytes to out_fd in 64 KiB chunks,
 * *written counting them; returns 0 when that was the whole file, 1 when
 * the file is larger than max (output truncated). */
int wr_fs_read(const struct wr_fs *fs, const char *path, uint64_t max, char **data, size_t *len,
	       bool *truncated, wr_err *err);
int wr_fs_read_to_fd(const struct wr_fs *fs, const char *path, int out_fd, uint64_t max,
		     uint64_t *written, wr_err *err);
/* Atomic replace: write a temp file ".<name>.wr-tmp-XXXXXX" in the same
 * directory, fsync-free rename over the target; on any failure (ENOSPC
 * included) the temp file is removed and the target left as it was.
 * mode applies to a new file; an existing regular file keeps its mode minus
 * the set-id bits. A symlink at the target name is replaced by the new file,
 * never written through; a directory there is EISDIR. Parents are created
 * (mode 0755, owned by fs->uid/gid) when `parents`. The fd variant reads
 * in_fd to EOF in 64 KiB chunks: more than max bytes is EFBIG, nothing
 * replaced. */
int wr_fs_write(const struct wr_fs *fs, const char *path, const void *data, size_t len, mode_t mode,
		bool parents, wr_err *err);
int wr_fs_write_from_fd(const struct wr_fs *fs, const char *path, int in_fd, uint64_t max,
			mode_t mode, bool parents, wr_err *err);

/* Entries of a directory, recursing `depth` levels (1 = just this dir,
 * at most WR_FS_LIST_MAX_DEPTH, else EINVAL). Never follows a symlink or
 * enters another mount below `path` (a mount point is listed, not entered).
 * Callback gets the path relative to `path` ('/'-joined) and its lstat,
 * both valid only during the call; return non-zero to stop: wr_fs_list
 * returns that value (a negative one as an error with that errno). More than
 * WR_FS_LIST_MAX_ENTRIES entries: E2BIG. */
#define WR_FS_LIST_MAX_DEPTH 64
#define WR_FS_LIST_MAX_ENTRIES 100000
typedef int (*wr_fs_list_cb)(void *ctx, const char *relpath, const struct wr_fs_stat *st);
int wr_fs_list(const struct wr_fs *fs, const char *path, int depth, wr_fs_list_cb cb, void *ctx,
	       wr_err *err);

/* lstat semantics (a symlink is reported as a symlink). ENOENT when absent,
 * EXDEV for a mount point. Ids outside the sandbox's range read 65534.
 * exists: false on ENOENT or ENOTDIR, other errors are returned. */
int wr_fs_stat(const struct wr_fs *fs, const char *path, struct wr_fs_stat *st, wr_err *err);
int wr_fs_exists(const struct wr_fs *fs, const char *path, bool *exists, wr_err *err);
/* The new dir gets fs->uid/gid and exactly `mode` (no umask); missing
 * parents, with `parents`, get mode 0755 (as mkdir -p -m does) and the same
 * owner; a dangling symlink on the way is not created through (ENOENT). An
 * existing name is EEXIST, or success with `parents` when it is a dir. */
int wr_fs_mkdir(const struct wr_fs *fs, const char *path, mode_t mode, bool parents, wr_err *err);
/* Remove a file, symlink or (recursive) directory. Never follows symlinks
 * or enters a mount (EXDEV); the root is refused (EBUSY). Trees nested more
 * than WR_FS_REMOVE_MAX_DEPTH levels: ELOOP. */
#define WR_FS_REMOVE_MAX_DEPTH 256
int wr_fs_remove(const struct wr_fs *fs, const char *path, bool recursive, wr_err *err);
/* Both parents resolved inside the root; replaces `to` like rename(2).
 * Renaming the root, or onto it: EBUSY. */
int wr_fs_rename(const struct wr_fs *fs, const char *from, const char *to, wr_err *err);

/* A symlink at path (replacing a non-directory there) with this target
 * text, parents created; the tar upload's symlinks on a remote root (a
 * local root: EOPNOTSUPP, the caller makes it itself). */
int wr_fs_symlink(const struct wr_fs *fs, const char *path, const char *target, wr_err *err);

struct wr_fs_remote {
	int (*stat)(void *ctx, const char *path, struct wr_fs_stat *st, wr_err *err);
	int (*exists)(void *ctx, const char *path, bool *exists, wr_err *err);
	int (*read)(void *ctx, const char *path, uint64_t max, char **data, size_t *len,
		    bool *truncated, wr_err *err);
	int (*read_to_fd)(void *ctx, const char *path, int out_fd, uint64_t max, uint64_t *written,
			  wr_err *err);
	int (*write)(void *ctx, const char *path, const void *data, size_t len, mode_t mode,
		     bool parents, wr_err *err);
	int (*write_from_fd)(void *ctx, const char *path, int in_fd, uint64_t max, mode_t mode,
			     bool parents, wr_err *err);
	int (*list)(void *ctx, const char *path, int depth, wr_fs_list_cb cb, void *cbctx,
		    wr_err *err);
	int (*mkdir)(void *ctx, const char *path, mode_t mode, bool parents, wr_err *err);
	int (*remove)(void *ctx, const char *path, bool recursive, wr_err *err);
	int (*rename)(void *ctx, const char *from, const char *to, wr_err *err);
	int (*symlink)(void *ctx, const char *path, const char *target, wr_err *err);
};

#endif
