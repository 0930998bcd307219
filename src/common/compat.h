/* Kernel interfaces newer than Debian 12's headers (linux-libc-dev 6.1).
 * Every constant here is guarded so a newer header wins. Include this after
 * the system headers it extends. */
#ifndef WARREN_COMMON_COMPAT_H
#define WARREN_COMMON_COMPAT_H

#include <linux/landlock.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <linux/sched.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

/* ---- Landlock ABI 4-7 ---------------------------------------------------- */
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14) /* ABI 3 */
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15) /* ABI 5 */
#endif
#ifndef LANDLOCK_ACCESS_NET_BIND_TCP
#define LANDLOCK_ACCESS_NET_BIND_TCP (1ULL << 0) /* ABI 4 */
#define LANDLOCK_ACCESS_NET_CONNECT_TCP (1ULL << 1)
#endif
#ifndef LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
#define LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0) /* ABI 6 */
#define LANDLOCK_SCOPE_SIGNAL (1ULL << 1)
#endif
#ifndef LANDLOCK_RESTRICT_SELF_LOG_SAME_EXEC_OFF
#define LANDLOCK_RESTRICT_SELF_LOG_SAME_EXEC_OFF (1U << 0) /* ABI 7 */
#define LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON (1U << 1)
#define LANDLOCK_RESTRICT_SELF_LOG_SUBDOMAINS_OFF (1U << 2)
#endif
/* Landlock's audit records (ABI 7, linux/audit.h of 6.15+). */
#ifndef AUDIT_LANDLOCK_ACCESS
#define AUDIT_LANDLOCK_ACCESS 1423
#define AUDIT_LANDLOCK_DOMAIN 1424
#endif
#ifndef LANDLOCK_RULE_NET_PORT
#define LANDLOCK_RULE_NET_PORT 2
#endif

/* The ruleset attribute grew with the ABI; ours is the ABI 6+ layout. The
 * kernel takes the size we pass, so older kernels get a prefix of it. */
struct wr_landlock_ruleset_attr {
	uint64_t handled_access_fs;
	uint64_t handled_access_net; /* ABI 4 */
	uint64_t scoped;	     /* ABI 6 */
};
struct wr_landlock_net_port_attr {
	uint64_t allowed_access;
	uint64_t port;
};

/* ---- syscall numbers (x86_64) missing from older libcs ------------------ */
#ifndef __NR_clone3
#define __NR_clone3 435
#endif
#ifndef __NR_close_range
#define __NR_close_range 436
#endif
#ifndef __NR_openat2
#define __NR_openat2 437
#endif
#ifndef __NR_pidfd_open
#define __NR_pidfd_open 434
#endif
#ifndef __NR_pidfd_send_signal
#define __NR_pidfd_send_signal 424
#endif
#ifndef __NR_pidfd_getfd
#define __NR_pidfd_getfd 438
#endif
#ifndef __NR_open_tree
#define __NR_open_tree 428
#endif
#ifndef __NR_move_mount
#define __NR_move_mount 429
#endif
#ifndef __NR_fsopen
#define __NR_fsopen 430
#endif
#ifndef __NR_fsconfig
#define __NR_fsconfig 431
#endif
#ifndef __NR_fsmount
#define __NR_fsmount 432
#endif
#ifndef __NR_fspick
#define __NR_fspick 433
#endif
#ifndef __NR_mount_setattr
#define __NR_mount_setattr 442
#endif
#ifndef __NR_landlock_create_ruleset
#define __NR_landlock_create_ruleset 444
#define __NR_landlock_add_rule 445
#define __NR_landlock_restrict_self 446
#endif
#ifndef __NR_process_madvise
#define __NR_process_madvise 440
#endif
#ifndef __NR_memfd_secret
#define __NR_memfd_secret 447
#endif
#ifndef __NR_futex_waitv
#define __NR_futex_waitv 449
#endif
#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif
#ifndef __NR_fchmodat2
#define __NR_fchmodat2 452
#endif
#ifndef __NR_map_shadow_stack
#define __NR_map_shadow_stack 453
#endif
#ifndef __NR_mseal
#define __NR_mseal 462
#endif
#ifndef __NR_statmount
#define __NR_statmount 457
#define __NR_listmount 458
#endif
#ifndef __NR_lsm_get_self_attr
#define __NR_lsm_get_self_attr 459
#define __NR_lsm_set_self_attr 460
#define __NR_lsm_list_modules 461
#endif
#ifndef __NR_open_tree_attr
#define __NR_open_tree_attr 467
#endif

/* ---- clone3 / pidfd ----------------------------------------------------- */
#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif
#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif
#ifndef CLONE_CLEAR_SIGHAND
#define CLONE_CLEAR_SIGHAND 0x100000000ULL
#endif
struct wr_clone_args {
	uint64_t flags;
	uint64_t pidfd;
	uint64_t child_tid;
	uint64_t parent_tid;
	uint64_t exit_signal;
	uint64_t stack;
	uint64_t stack_size;
	uint64_t tls;
	uint64_t set_tid;
	uint64_t set_tid_size;
	uint64_t cgroup;
};
/* P_PIDFD is in glibc 2.36's idtype_t enum (sys/wait.h). */
/* PIDFD_GET_INFO (linux/pidfd.h of 6.13; the exit status since 6.15),
 * newer than our headers. */
struct wr_pidfd_info {
	uint64_t mask, cgroupid;
	uint32_t pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid;
	int32_t exit_code;
};
#define WR_PIDFD_GET_INFO _IOWR(0xFF, 11, struct wr_pidfd_info)
#define WR_PIDFD_INFO_PID (1ull << 0)
#define WR_PIDFD_INFO_EXIT (1ull << 3)
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
#ifndef CLOSE_RANGE_UNSHARE
#define CLOSE_RANGE_UNSHARE (1U << 1)
#endif

/* ---- mount API ---------------------------------------------------------- */
#ifndef MOUNT_ATTR_IDMAP
#define MOUNT_ATTR_IDMAP 0x00100000
#endif
#ifndef MOUNT_ATTR_NOSYMFOLLOW
#define MOUNT_ATTR_NOSYMFOLLOW 0x00200000
#endif
#ifndef MOUNT_ATTR_SIZE_VER0
#define MOUNT_ATTR_SIZE_VER0 32
#endif
#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef OPEN_TREE_CLOEXEC
#define OPEN_TREE_CLOEXEC O_CLOEXEC
#endif
#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif
#ifndef MOVE_MOUNT_T_EMPTY_PATH
#define MOVE_MOUNT_T_EMPTY_PATH 0x00000040
#endif
#ifndef FSMOUNT_CLOEXEC
#define FSMOUNT_CLOEXEC 0x00000001
#endif

/* ---- openat2 resolve flags --------------------------------------------- */
#ifndef RESOLVE_CACHED
#define RESOLVE_CACHED 0x20
#endif

/* ---- ioctls denied by the seccomp profile ------------------------------ */
/* FICLONE, FICLONERANGE, FIDEDUPERANGE, FIBMAP come from <linux/fs.h>. */
#ifndef XFS_IOC_SWAPEXT
/* _IOWR('X', 109, struct xfs_swapext); sizeof == 176 on x86_64 */
#define XFS_IOC_SWAPEXT 0xc0b0586dUL
#endif
#ifndef XFS_IOC_EXCHANGE_RANGE
/* _IOW('X', 129, struct xfs_exchange_range); sizeof == 40 */
#define XFS_IOC_EXCHANGE_RANGE 0x40285881UL
#endif

/* ---- FUSE protocol 7.40 (Linux 6.9): resend of pending requests --------- */
/* linux/fuse.h of 6.1 has protocol 7.38; fuse_notify_code is an enum there,
 * so these carry a WR_ prefix instead of a guard. A server writes a
 * fuse_out_header {len = 16, error = WR_FUSE_NOTIFY_RESEND, unique = 0} on
 * its /dev/fuse fd: the kernel puts every request that was read from the
 * connection but not answered back at the head of the queue, its unique
 * marked with WR_FUSE_UNIQUE_RESEND. Older kernels answer EINVAL. */
#define WR_FUSE_NOTIFY_RESEND 7
#define WR_FUSE_MINOR_RESEND 40
#define WR_FUSE_UNIQUE_RESEND (1ULL << 63)

/* ---- thin syscall wrappers glibc 2.36 lacks ----------------------------- */
static inline long wr_clone3(struct wr_clone_args *a)
{
	return syscall(__NR_clone3, a, sizeof(*a));
}
static inline int wr_pidfd_open(pid_t pid, unsigned int flags)
{
	return (int)syscall(__NR_pidfd_open, pid, flags);
}
static inline int wr_pidfd_send_signal(int pidfd, int sig, void *info, unsigned int flags)
{
	return (int)syscall(__NR_pidfd_send_signal, pidfd, sig, info, flags);
}
static inline int wr_openat2(int dirfd, const char *path, struct open_how *how)
{
	return (int)syscall(__NR_openat2, dirfd, path, how, sizeof(*how));
}
static inline int wr_close_range(unsigned int first, unsigned int last, unsigned int flags)
{
	return (int)syscall(__NR_close_range, first, last, flags);
}
static inline int wr_open_tree(int dfd, const char *path, unsigned int flags)
{
	return (int)syscall(__NR_open_tree, dfd, path, flags);
}
static inline int wr_move_mount(int from_dfd, const char *from, int to_dfd, const char *to,
				unsigned int flags)
{
	return (int)syscall(__NR_move_mount, from_dfd, from, to_dfd, to, flags);
}
static inline int wr_fsopen(const char *fs, unsigned int flags)
{
	return (int)syscall(__NR_fsopen, fs, flags);
}
static inline int wr_fsconfig(int fd, unsigned int cmd, const char *key, const void *val, int aux)
{
	return (int)syscall(__NR_fsconfig, fd, cmd, key, val, aux);
}
static inline int wr_fsmount(int fd, unsigned int flags, unsigned int attrs)
{
	return (int)syscall(__NR_fsmount, fd, flags, attrs);
}
static inline int wr_sys_mount_setattr(int dfd, const char *path, unsigned int flags,
				       struct mount_attr *attr)
{
	return (int)syscall(__NR_mount_setattr, dfd, path, flags, attr, sizeof(*attr));
}

#endif
