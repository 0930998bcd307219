/* The microVM tier's files API: struct wr_fs_remote over the agent channel
 * (the guest's warren-agent runs fsops beneath the guest's root; see
 * src/agent/guest/files.c). Same semantics, messages and errnos as a
 * container's files; what the guest answers is checked (sizes bounded,
 * types and ranges validated) before anyone sees it. */
#ifndef WARREN_TIERS_MICROVM_FILES_H
#define WARREN_TIERS_MICROVM_FILES_H

#include <sys/types.h>

#include "tiers/fsops.h"

struct wr_vm;

/* What a view needs; lives as long as the sandbox (the ops borrow it). */
struct wr_vm_fsctx {
	struct wr_vm *vm;
	uid_t uid; /* the sandbox user: what the API creates belongs to it */
	gid_t gid;
};

/* A files view of the guest's root for fsops callers (root_fd -1). */
void wr_vm_fs_view(struct wr_vm_fsctx *ctx, struct wr_fs *out);

/* How long a file request may go without a frame from the guest. */
#define WR_VM_FS_IDLE_MS 60000

#endif
