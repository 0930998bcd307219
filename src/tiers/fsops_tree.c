/* File operations on a sandbox's filesystem, the directory-tree walkers:
 * list (recursive, bounded), mkdir, remove (recursive, bounded) and rename.
 * Each works on directory fds it holds and single components opened with
 * WALK_ONE, never following a symlink or entering another mount; paths are
 * resolved with the helpers of fsops.c (fsops_internal.h). The public
 * wr_fs_list/mkdir/remove/rename in fsops.c call these under the sandbox
 * user's fs ids. */
#include "tiers/fsops.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "tiers/fsops_internal.h"

/* ---- list ------------------------------------------------------------------ */

struct list_walk {
	const struct wr_fs *fs;
	wr_fs_list_cb cb;
	void *ctx;
	char *rel; /* path of the current entry relative to the listed dir */
	unsigned long count;
};

#define REL_CAP ((size_t)WR_FS_LIST_MAX_DEPTH * (NAME_MAX + 1) + 1)

static int list_sub(struct list_walk *w, int dfd, const char *name, dev_t dev, size_t rellen,
		    int depth, wr_err *err);

/* dfd: the directory (held, never re-resolved); dev: the filesystem the
 * walk stays on. Returns 0 to go on, the callback's non-zero value to
 * stop, or a negative error. */
static int list_dir(struct list_walk *w, int dfd, dev_t dev, size_t rellen, int depth, wr_err *err)
{
	int dup_fd = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
	if (dup_fd < 0)
		return fsi_sys_err(err, errno);
	_cleanup_closedir_ DIR *d = fdopendir(dup_fd);
	if (d == NULL) {
		int e = errno;
		close(dup_fd);
		return fsi_sys_err(err, e);
	}
	for (;;) {
		errno = 0;
		struct dirent *de = readdir(d);
		if (de == NULL) {
			if (errno != 0)
				return fsi_sys_err(err, errno);
			return 0;
		}
		const char *name = de->d_name;
		if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
			continue;
		struct stat st;
		if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT) /* removed since readdir */
				continue;
			return fsi_sys_err(err, errno);
		}
		if (++w->count > WR_FS_LIST_MAX_ENTRIES)
			return wr_err_set(err, E2BIG, "more than %d entries",
					  WR_FS_LIST_MAX_ENTRIES);

		size_t nlen = strlen(name);
		size_t newlen = rellen + (rellen ? 1 : 0) + nlen;
		if (newlen >= REL_CAP)
			return wr_err_set(err, ENAMETOOLONG, "relative path too long");
		if (rellen)
			w->rel[rellen] = '/';
		memcpy(w->rel + newlen - nlen, name, nlen + 1);

		struct wr_fs_stat fst;
		fsi_fill_stat(w->fs, &st, &fst);
		if (S_ISLNK(st.st_mode)) {
			fst.symlink_target = fsi_read_link(dfd, name);
			if (fst.symlink_target == NULL) {
				if (errno != ENOENT && errno != EINVAL)
					return fsi_sys_err(err, errno);
				/* replaced since the stat: report no target */
				fst.symlink_target = strdup("");
				if (fst.symlink_target == NULL)
					return fsi_sys_err(err, ENOMEM);
			}
		}
		int r = w->cb(w->ctx, w->rel, &fst);
		wr_fs_stat_free(&fst);
		if (r == 0 && depth > 1 && S_ISDIR(st.st_mode) && st.st_dev == dev)
			r = list_sub(w, dfd, name, dev, newlen, depth - 1, err);
		if (r != 0)
			return r;
	}
}

/* Descend into directory entry `name` of dfd, never following a symlink or
 * entering a mount, even one swapped in since the entry was looked at. */
static int list_sub(struct list_walk *w, int dfd, const char *name, dev_t dev, size_t rellen,
		    int depth, wr_err *err)
{
	_cleanup_close_ int sub =
	    fsi_resolve(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0, WALK_ONE);
	if (sub < 0) {
		/* gone, or swapped for a symlink, file or mount: skip */
		if (sub == -ENOENT || sub == -ENOTDIR || sub == -ELOOP || sub == -EXDEV)
			return 0;
		return wr_err_set(err, -sub, "%s: %s", w->rel, strerror(-sub));
	}
	struct stat st;
	if (fstat(sub, &st) < 0)
		return fsi_sys_err(err, errno);
	if (st.st_dev != dev)
		return 0;
	return list_dir(w, sub, dev, rellen, depth, err);
}

int fsi_list_unguarded(const struct wr_fs *fs, const char *path, int depth, wr_fs_list_cb cb,
		       void *ctx, wr_err *err)
{
	int r = fsi_check_fs(fs, err);
	if (r == 0)
		r = fsi_check_path(path, err);
	if (r == 0 && (depth < 1 || depth > WR_FS_LIST_MAX_DEPTH))
		r = wr_err_set(err, EINVAL, "depth %d out of range 1..%d", depth,
			       WR_FS_LIST_MAX_DEPTH);
	if (r == 0 && cb == NULL)
		r = wr_err_set(err, EINVAL, "no callback");
	if (r < 0)
		return wr_err_wrap(err, "list " PFMT, PARG(path));

	_cleanup_close_ int dfd = fsi_open_in_root(fs, path, O_RDONLY | O_DIRECTORY, err);
	if (dfd < 0)
		return wr_err_wrap(err, "list " PFMT, PARG(path));
	struct stat st;
	if (fstat(dfd, &st) < 0)
		return wr_err_sys(err, "list " PFMT, PARG(path));
	_cleanup_free_ char *rel = malloc(REL_CAP);
	if (rel == NULL)
		return wr_err_set(err, ENOMEM, "list " PFMT ": out of memory", PARG(path));
	rel[0] = '\0';
	struct list_walk w = {.fs = fs, .cb = cb, .ctx = ctx, .rel = rel};
	r = list_dir(&w, dfd, st.st_dev, 0, depth, err);
	if (r < 0 && (err == NULL || *err == NULL))
		wr_err_set(err, -r, "stopped by callback: %s", strerror(-r));
	if (r < 0)
		return wr_err_wrap(err, "list " PFMT, PARG(path));
	return r;
}

/* ---- mkdir ----------------------------------------------------------------- */

int fsi_mkdir_unguarded(const struct wr_fs *fs, const char *path, mode_t mode, bool parents,
			wr_err *err)
{
	int r = fsi_check_fs(fs, err);
	_cleanup_free_ struct split *sp = malloc(sizeof(*sp));
	if (r == 0 && sp == NULL)
		r = fsi_sys_err(err, ENOMEM);
	if (r == 0)
		r = fsi_split_path(path, sp, err);
	if (r == 0 && sp->is_root && !parents)
		r = fsi_sys_err(err, EEXIST);
	if (r < 0)
		return wr_err_wrap(err, "mkdir " PFMT, PARG(path));
	if (sp->is_root)
		return 0;

	_cleanup_close_ int pfd = fsi_open_parent(fs, sp, parents, err);
	if (pfd < 0)
		return wr_err_wrap(err, "mkdir " PFMT, PARG(path));
	if (mkdirat(pfd, sp->base, 0700) < 0) {
		struct stat st;
		if (errno == EEXIST && parents &&
		    fstatat(pfd, sp->base, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
			return 0;
		return wr_err_sys(err, "mkdir " PFMT, PARG(path));
	}
	_cleanup_close_ int fd = fsi_adopt_dir(fs, pfd, sp->base, mode, err);
	if (fd < 0)
		return wr_err_wrap(err, "mkdir " PFMT, PARG(path));
	return 0;
}

/* ---- remove ---------------------------------------------------------------- */

struct rm_walk {
	char *rel; /* caller path of the entry being removed, for messages */
};

#define RM_REL_CAP ((size_t)PATH_MAX + (size_t)WR_FS_REMOVE_MAX_DEPTH * (NAME_MAX + 1) + 1)
#define RM_PASSES 4

static int rm_tree(struct rm_walk *w, int pfd, const char *name, size_t rellen, int level,
		   wr_err *err);

/* Remove everything in dfd. */
static int rm_contents(struct rm_walk *w, int dfd, size_t rellen, int level, wr_err *err)
{
	int dup_fd = fcntl(dfd, F_DUPFD_CLOEXEC, 0);
	if (dup_fd < 0)
		return fsi_sys_err(err, errno);
	_cleanup_closedir_ DIR *d = fdopendir(dup_fd);
	if (d == NULL) {
		int e = errno;
		close(dup_fd);
		return fsi_sys_err(err, e);
	}
	for (;;) {
		errno = 0;
		struct dirent *de = readdir(d);
		if (de == NULL)
			return errno ? fsi_sys_err(err, errno) : 0;
		const char *name = de->d_name;
		if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
			continue;
		size_t nlen = strlen(name);
		if (rellen + 1 + nlen >= RM_REL_CAP)
			return wr_err_set(err, ENAMETOOLONG, "path too long");
		w->rel[rellen] = '/';
		memcpy(w->rel + rellen + 1, name, nlen + 1);
		/* unlink never follows; a directory answers EISDIR */
		if (unlinkat(dfd, name, 0) == 0 || errno == ENOENT)
			continue;
		if (errno != EISDIR)
			return wr_err_set(err, errno, "%s: %s", w->rel, strerror(errno));
		int r = rm_tree(w, dfd, name, rellen + 1 + nlen, level + 1, err);
		if (r < 0)
			return r;
	}
}

/* Remove directory `name` of pfd and everything in it, without following
 * symlinks or entering another mount. */
static int rm_tree(struct rm_walk *w, int pfd, const char *name, size_t rellen, int level,
		   wr_err *err)
{
	w->rel[rellen] = '\0';
	_cleanup_close_ int dfd =
	    fsi_resolve(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0, WALK_ONE);
	if (dfd == -ENOENT)
		return 0;
	if (dfd == -ENOTDIR || dfd == -ELOOP) {
		/* swapped for a file or symlink since: remove that entry */
		if (unlinkat(pfd, name, 0) == 0 || errno == ENOENT)
			return 0;
		return wr_err_set(err, errno, "%s: %s", w->rel, strerror(errno));
	}
	if (dfd == -EXDEV)
		return wr_err_set(err, EXDEV, "%s: is a mount point", w->rel);
	if (dfd < 0)
		return wr_err_set(err, -dfd, "%s: %s", w->rel, strerror(-dfd));
	if (level >= WR_FS_REMOVE_MAX_DEPTH)
		return wr_err_set(err, ELOOP, "%s: nested more than %d levels deep", w->rel,
				  WR_FS_REMOVE_MAX_DEPTH);

	/* the sandbox may keep adding entries: a few passes, then give up */
	for (int pass = 0; pass < RM_PASSES; pass++) {
		int r = rm_contents(w, dfd, rellen, level, err);
		w->rel[rellen] = '\0';
		if (r < 0)
			return r;
		if (unlinkat(pfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
			return 0;
		if (errno != ENOTEMPTY)
			return wr_err_set(err, errno, "%s: %s", w->rel, strerror(errno));
	}
	return wr_err_set(err, ENOTEMPTY, "%s: %s", w->rel, strerror(ENOTEMPTY));
}

int fsi_remove_unguarded(const struct wr_fs *fs, const char *path, bool recursive, wr_err *err)
{
	int r = fsi_check_fs(fs, err);
	_cleanup_free_ struct split *sp = malloc(sizeof(*sp));
	if (r == 0 && sp == NULL)
		r = fsi_sys_err(err, ENOMEM);
	if (r == 0)
		r = fsi_split_path(path, sp, err);
	if (r == 0 && sp->is_root)
		r = wr_err_set(err, EBUSY, "refusing to remove the root");
	if (r < 0)
		return wr_err_wrap(err, "remove " PFMT, PARG(path));

	_cleanup_close_ int pfd = fsi_open_in_root(fs, sp->parent, O_PATH | O_DIRECTORY, err);
	if (pfd < 0)
		return wr_err_wrap(err, "remove " PFMT, PARG(path));
	if (unlinkat(pfd, sp->base, 0) == 0)
		return 0;
	if (errno != EISDIR)
		return wr_err_sys(err, "remove " PFMT, PARG(path));
	if (!recursive) {
		if (unlinkat(pfd, sp->base, AT_REMOVEDIR) == 0)
			return 0;
		return wr_err_sys(err, "remove " PFMT, PARG(path));
	}

	_cleanup_free_ char *rel = malloc(RM_REL_CAP);
	if (rel == NULL)
		return wr_err_set(err, ENOMEM, "remove " PFMT ": out of memory", PARG(path));
	/* messages name entries by the caller's path, cut to fit */
	size_t plen = strnlen(path, SHOWN);
	memcpy(rel, path, plen);
	while (plen > 1 && rel[plen - 1] == '/')
		plen--;
	rel[plen] = '\0';
	struct rm_walk w = {.rel = rel};
	r = rm_tree(&w, pfd, sp->base, plen, 0, err);
	if (r < 0)
		return wr_err_wrap(err, "remove " PFMT, PARG(path));
	return 0;
}

/* ---- rename ---------------------------------------------------------------- */

int fsi_rename_unguarded(const struct wr_fs *fs, const char *from, const char *to, wr_err *err)
{
	int r = fsi_check_fs(fs, err);
	_cleanup_free_ struct split *a = malloc(sizeof(*a));
	_cleanup_free_ struct split *b = malloc(sizeof(*b));
	if (r == 0 && (a == NULL || b == NULL))
		r = fsi_sys_err(err, ENOMEM);
	if (r == 0)
		r = fsi_split_path(from, a, err);
	if (r == 0)
		r = fsi_split_path(to, b, err);
	if (r == 0 && (a->is_root || b->is_root))
		r = wr_err_set(err, EBUSY, "refusing to rename the root");
	if (r < 0)
		return wr_err_wrap(err, "rename " PFMT " to " PFMT, PARG(from), PARG(to));

	_cleanup_close_ int fpfd = fsi_open_in_root(fs, a->parent, O_PATH | O_DIRECTORY, err);
	if (fpfd < 0)
		return wr_err_wrap(err, "rename " PFMT " to " PFMT, PARG(from), PARG(to));
	_cleanup_close_ int tpfd = fsi_open_in_root(fs, b->parent, O_PATH | O_DIRECTORY, err);
	if (tpfd < 0)
		return wr_err_wrap(err, "rename " PFMT " to " PFMT, PARG(from), PARG(to));
	if (renameat2(fpfd, a->base, tpfd, b->base, 0) < 0)
		return wr_err_sys(err, "rename " PFMT " to " PFMT, PARG(from), PARG(to));
	return 0;
}
