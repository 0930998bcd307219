/* User-namespace id ranges: root inside a sandbox is a host uid/gid range
 * of its own.
 *
 * Ranges are slots of WR_IDMAP_SIZE ids starting at a configured base. A
 * slot is allocated by creating <state_dir>/idmap/<slot> with O_EXCL, which
 * is atomic across processes and survives a restart; the file names the
 * owner (sandbox id). Two live sandboxes therefore never share a range.
 * Slots whose owner is gone are reclaimed by wr_idmap_reclaim(). */
#ifndef WARREN_ISOLATE_IDMAP_H
#define WARREN_ISOLATE_IDMAP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

#define WR_IDMAP_SIZE 65536u
#define WR_IDMAP_BASE 0x10000000u /* 268435456: far above distro subuid ranges */
#define WR_IDMAP_SLOTS 16384u	  /* up to 0x50000000, below INT32_MAX */

struct wr_idmap {
	uint32_t slot;
	uid_t base; /* host id of uid/gid 0 inside */
	uint32_t count;
};

/* Allocate a free slot for owner (a sandbox id). */
int wr_idmap_alloc(const char *state_dir, const char *owner, struct wr_idmap *out, wr_err *err);
/* Release a slot (idempotent). */
int wr_idmap_free(const char *state_dir, const struct wr_idmap *m, wr_err *err);
/* Look up the slot an owner holds (restart adoption). ENOENT if none. */
int wr_idmap_find(const char *state_dir, const char *owner, struct wr_idmap *out, wr_err *err);
/* Free every slot whose owner alive() says is gone. Returns how many. */
int wr_idmap_reclaim(const char *state_dir, bool (*alive)(const char *owner, void *ctx), void *ctx,
		     wr_err *err);
/* Write uid_map and gid_map ("0 base count") of a process in a fresh user
 * namespace. setgroups stays "allow": the map is written by host root and
 * covers the whole range, so setgroups cannot drop a group to gain access. */
int wr_idmap_write(pid_t pid, const struct wr_idmap *m, wr_err *err);

#endif
