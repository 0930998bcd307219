/* The vm tier's files API: struct wr_fs_remote over the standard QEMU guest
 * agent (vm_files.c). A stock image runs no agent of warren's, so bytes go
 * through guest-file-open/read/write/close (base64, 48 KiB a call) and what
 * qemu-ga cannot do (stat, list, mkdir, rename, remove, symlink, chmod)
 * through guest-exec of a fixed argv of the guest's coreutils and findutils
 * (find -printf, mkdir, rmdir, rm, mv, ln, chmod); a path is only ever one
 * argv element after "--" (or dd's if=/of=), never part of a shell string.
 *
 * The sandbox's user applies: for root, bytes go through guest-file-*
 * (qemu-ga runs as root); for any other user every tool, and dd for the
 * bytes (its stdin or its captured output through guest-exec), runs as
 * that user (setpriv --reuid --regid --clear-groups, as commands do), so
 * the guest's kernel resolves each path and checks each permission as it
 * would for the sandbox's own processes; nothing opened as root is handed
 * to the user's side, and what the API makes is the user's.
 *
 * Semantics follow fsops.h where the guest can give them: the whole guest
 * is the sandbox (its kernel resolves "..", symlinks and absolute paths
 * from the guest's own root, there is no host path behind it); a target on
 * another filesystem than the guest's root (/proc, /sys, /dev, tmpfs
 * mounts) is EXDEV, as a mount point is for a container; only regular
 * files are read; writes replace atomically through a temp file in the
 * same directory; list never follows symlinks nor crosses mounts. Errors
 * carry the guest's errno (matched from the tools' messages: glibc's
 * strings on both sides) and "<op> <path>: <reason>" messages. */
#ifndef WARREN_TIERS_VM_FILES_H
#define WARREN_TIERS_VM_FILES_H

#include <sys/types.h>

#include "tiers/fsops.h"

struct wr_fullvm;

struct wr_fullvm_fsctx {
	struct wr_fullvm *vm;
	uid_t uid; /* the sandbox user: every operation runs as it */
	gid_t gid;
	long long root_dev; /* the guest root's device, 0 until asked */
};

void wr_fullvm_fs_view(struct wr_fullvm_fsctx *ctx, struct wr_fs *out);

#endif
