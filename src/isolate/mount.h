/* Mount helpers on the new mount API (fsopen/fsmount/open_tree/move_mount/
 * mount_setattr): detached, fd-relative, no path re-resolution.
 * All are child-half safe (no allocation) and report into wr_cerr. */
#ifndef WARREN_ISOLATE_MOUNT_H
#define WARREN_ISOLATE_MOUNT_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

/* A new filesystem instance as a detached mount. opts is a NULL-terminated
 * list of "key=value" strings or bare "flag" strings. attrs are
 * MOUNT_ATTR_* flags for the mount (RDONLY, NOSUID, NODEV, NOEXEC). */
int wr_mount_new(const char *fstype, const char *source, const char *const *opts,
		 unsigned int attrs, struct wr_cerr *e);
/* A detached copy of the mount at dfd/path (recursive when rec). */
int wr_mount_clone(int dfd, const char *path, bool rec, struct wr_cerr *e);
/* Change attributes of a detached or attached mount; userns_fd >= 0 adds an
 * idmapping (detached, never-attached mounts only). */
int wr_mount_setattr(int mfd, uint64_t set, uint64_t clr, int userns_fd, bool rec,
		     struct wr_cerr *e);
/* Attach the detached mount mfd at dfd/path. */
int wr_mount_attach(int mfd, int dfd, const char *path, struct wr_cerr *e);
/* Bind a fresh read-only copy of dfd/path over itself. */
int wr_mount_make_readonly(int dfd, const char *path, struct wr_cerr *e);

#endif
