/* File operations: what fsops.c (resolution, stat, read, write, the public
 * entry points) and fsops_tree.c (list, mkdir, remove, rename) share. Not
 * part of the public API: see fsops.h for the rules every operation keeps. */
#ifndef WARREN_TIERS_FSOPS_INTERNAL_H
#define WARREN_TIERS_FSOPS_INTERNAL_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "common/error.h"
#include "tiers/fsops.h"

/* A caller path, resolved from the root. */
#define WALK_ROOT (RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)
/* One component inside a directory we hold: no symlink, no mount. */
#define WALK_ONE (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV)

/* Caller paths appear in messages, cut at SHOWN bytes. */
#define SHOWN 256
#define PFMT "%.*s%s"
#define PARG(p) SHOWN, fsi_shown(p), fsi_ellipsis(p)

/* A path cut into the directory that holds its last component and that
 * component. */
struct split {
	char buf[PATH_MAX];
	const char *parent;
	const char *base;
	bool is_root;	     /* "/", ".", "/./": the root itself */
	bool trailing_slash; /* "a/b/" */
};

/* ---- fsops.c: messages, resolution, stat (each documented where defined) */

const char *fsi_shown(const char *p);
const char *fsi_ellipsis(const char *p);
int fsi_sys_err(wr_err *err, int errnum);
int fsi_resolve(int dirfd, const char *path, int flags, mode_t mode, uint64_t how_resolve);
int fsi_open_in_root(const struct wr_fs *fs, const char *path, int flags, wr_err *err);
int fsi_check_fs(const struct wr_fs *fs, wr_err *err);
int fsi_check_path(const char *path, wr_err *err);
int fsi_split_path(const char *path, struct split *sp, wr_err *err);
int fsi_adopt_dir(const struct wr_fs *fs, int pfd, const char *name, mode_t mode, wr_err *err);
int fsi_open_parent(const struct wr_fs *fs, const struct split *sp, bool parents, wr_err *err);
void fsi_fill_stat(const struct wr_fs *fs, const struct stat *st, struct wr_fs_stat *out);
char *fsi_read_link(int dirfd, const char *name);

/* ---- fsops_tree.c: the operations, run by fsops.c under the sandbox
 * user's fs ids -------------------------------------------------------- */

int fsi_list_unguarded(const struct wr_fs *fs, const char *path, int depth, wr_fs_list_cb cb,
		       void *ctx, wr_err *err);
int fsi_mkdir_unguarded(const struct wr_fs *fs, const char *path, mode_t mode, bool parents,
			wr_err *err);
int fsi_remove_unguarded(const struct wr_fs *fs, const char *path, bool recursive, wr_err *err);
int fsi_rename_unguarded(const struct wr_fs *fs, const char *from, const char *to, wr_err *err);

#endif
