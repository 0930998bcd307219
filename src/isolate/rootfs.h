/* The sandbox root filesystem.
 *
 *   parent half  wr_rootfs_lower_open(): the image as a detached read-only
 *                mount (an EROFS file mounted file-backed, or a directory
 *                cloned with open_tree), cached per image by the caller.
 *                wr_rootfs_lower_for(): a per-sandbox clone of it, idmapped
 *                to the sandbox's user namespace so the image's root-owned
 *                files belong to root inside without chowning anything.
 *   child half   wr_rootfs_setup(): in the sandbox's fresh mount namespace,
 *                as root of its user namespace: overlay(lower layers, base
 *                first; tmpfs upper
 *                with a hard size and inode limit), /proc with masked and
 *                read-only paths (or, proc_later, none yet), a given
 *                read-only /sys, a minimal /dev and
 *                /dev/shm (directories of the upper's tmpfs, which also
 *                serve the masks: no superblock of their own), then
 *                pivot_root.
 *   later        wr_rootfs_proc() and wr_rootfs_devpts(): the sandbox's
 *                /proc (proc_later) and devpts, before its first command
 *                (tiers/container_mounts.c).
 * The mount table and why each superblock exists: docs/ARCHITECTURE.md.
 */
#ifndef WARREN_ISOLATE_ROOTFS_H
#define WARREN_ISOLATE_ROOTFS_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

/* Parent half: open an image (directory or EROFS file) as a detached,
 * read-only mount fd. */
int wr_rootfs_lower_open(const char *image, wr_err *err);
/* Parent half: a clone of lower idmapped into the user namespace userns_fd. */
int wr_rootfs_lower_for(int lower_fd, int userns_fd, wr_err *err);

struct wr_rootfs_spec {
	/* O_PATH fd of an empty directory used as the mount target, opened in
	 * the child's own mount namespace (see container.c for why early). */
	int mountpoint_fd;
	uint64_t disk_bytes;  /* tmpfs upper size= (/dev/shm included) */
	uint64_t disk_inodes; /* tmpfs upper nr_inodes= */
	/* A detached read-only sysfs mount, attached as /sys (consumed): of
	 * the joined pool namespace (networked sandboxes: the child could not
	 * mount sysfs for a namespace its user namespace does not own), or a
	 * clone of the tier's shared offline one (a sysfs superblock per
	 * sandbox would cost memory in every memory cgroup of the node).
	 * use_sysfs_fd false: a new sysfs of the child's own namespace (the
	 * function tier's zygotes, one per pool). */
	bool use_sysfs_fd;
	int sysfs_fd;
	/* When not NULL: receives an O_PATH, close-on-exec fd of the writable
	 * layer's upper directory (the caller keeps it in PID 1 so the host can
	 * read the sandbox's changes for a snapshot). */
	int *upper_out;
	/* true: /proc stays an empty directory and its masks wait too: the
	 * first command's helper mounts them (wr_rootfs_proc). A proc
	 * superblock costs memory in every memory cgroup of the node, and a
	 * sandbox that never runs a command needs none. masks_out (not NULL
	 * then) receives a close-on-exec fd of the read-only devfs/ clone the
	 * masks come from, for the caller to keep in PID 1. */
	bool proc_later;
	int *masks_out;
};

/* The mount attributes of a sandbox's /proc. */
#define WR_ROOTFS_PROC_ATTRS (MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC)

#define WR_ROOTFS_MAX_LOWER 16

/* Child half. lower_fds: n_lower (1..WR_ROOTFS_MAX_LOWER) layers from
 * wr_rootfs_lower_for (received over a socket), base first: a later layer
 * shadows the earlier ones, and its whiteouts hide their files. Consumed
 * (they become the attached layers). On return the caller's root and cwd
 * are the new root. */
int wr_rootfs_setup(const struct wr_rootfs_spec *spec, const int *lower_fds, size_t n_lower,
		    struct wr_cerr *e);

/* Run in a sandbox's user and mount namespaces (a helper that joined
 * them, whose root is the sandbox's): mount the sandbox's own devpts
 * instance on /dev/pts unless one is there. Children's rules: no
 * allocation. */
int wr_rootfs_devpts(struct wr_cerr *e);

/* Run in a sandbox's mount namespace (a helper that joined it, whose root
 * is the sandbox's): attach proc (a detached proc mount of the sandbox's
 * PID namespace, consumed) on /proc, then the masks and read-only paths
 * under /proc, cloned from masks (what masks_out gave), unless a proc is
 * already there. Children's rules: no allocation. */
int wr_rootfs_proc(int proc, int masks, struct wr_cerr *e);

/* What is on /proc of the sandbox root rootfd (an O_PATH fd; resolved in
 * it, no symlink followed): the empty directory (proc_later), a proc with
 * all its masks, or a proc without (its helper died half-way); negative
 * errno on failure. */
enum { WR_PROC_NONE, WR_PROC_DONE, WR_PROC_PARTIAL };
int wr_rootfs_proc_state(int rootfd);

/* The /proc and /sys paths hidden or made read-only (tests, docs). */
extern const char *const wr_rootfs_masked_paths[];
extern const char *const wr_rootfs_readonly_paths[];

#endif
