#include "isolate/rootfs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "isolate/mount.h"

/* crun's masked paths, plus the page-frame files whose reads crashed
 * kernels in DSec's fleet. Files are covered by an empty read-only regular file,
 * directories by an empty read-only directory (setup_dev). */
const char *const wr_rootfs_masked_paths[] = {
    "proc/acpi",	"proc/asound",	      "proc/interrupts",  "proc/kcore",
    "proc/keys",	"proc/latency_stats", "proc/timer_list",  "proc/timer_stats",
    "proc/sched_debug", "proc/scsi",	      "proc/kpagecgroup", "proc/kpageflags",
    "proc/kpagecount",	"proc/sysrq-trigger", "sys/firmware",	  "sys/devices/virtual/powercap",
    "sys/kernel/debug", "sys/kernel/tracing", "sys/fs/bpf",	  NULL,
};
const char *const wr_rootfs_readonly_paths[] = {
    "proc/bus", "proc/fs", "proc/irq", "proc/sys", NULL,
};

int wr_rootfs_lower_open(const char *image, wr_err *err)
{
	struct stat st;
	if (stat(image, &st) < 0)
		return wr_err_sys(err, "image %s", image);
	struct wr_cerr ce = {0};
	int fd;
	if (S_ISDIR(st.st_mode)) {
		fd = wr_mount_clone(AT_FDCWD, image, true, &ce);
	} else if (S_ISREG(st.st_mode)) {
		/* File-backed EROFS (no loop device). */
		fd = wr_mount_new("erofs", image, NULL, MOUNT_ATTR_RDONLY, &ce);
	} else {
		return wr_err_set(err, EINVAL, "image %s: not a directory or an EROFS file", image);
	}
	if (fd < 0)
		return wr_err_set(err, ce.errnum, "image %s: %s", image, ce.msg);
	if (wr_mount_setattr(fd, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID, 0, -1,
			     true, &ce) < 0) {
		close(fd);
		return wr_err_set(err, ce.errnum, "image %s: %s", image, ce.msg);
	}
	return fd;
}

int wr_rootfs_lower_for(int lower_fd, int userns_fd, wr_err *err)
{
	struct wr_cerr ce = {0};
	_cleanup_close_ int fd = wr_mount_clone(lower_fd, "", true, &ce);
	if (fd < 0)
		return wr_err_set(err, ce.errnum, "image: %s", ce.msg);
	if (wr_mount_setattr(fd, 0, 0, userns_fd, true, &ce) < 0)
		return wr_err_set(err, ce.errnum, "image: idmap: %s", ce.msg);
	return steal_fd(&fd);
}

static int ensure_dir(int dfd, const char *name, mode_t mode, struct wr_cerr *e)
{
	if (mkdirat(dfd, name, mode) < 0 && errno != EEXIST)
		return wr_cerr_sys(e, "mkdir /%s", name);
	return 0;
}

static int bind_dev(int devfd, const char *name, struct wr_cerr *e)
{
	char host[64];
	snprintf(host, sizeof(host), "/dev/%s", name);
	_cleanup_close_ int m = wr_mount_clone(AT_FDCWD, host, false, e);
	if (m < 0)
		return m;
	if (wr_mount_setattr(m, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, 0, -1, false, e) < 0)
		return -1;
	return wr_mount_attach(m, devfd, name, e);
}

static const char *const dev_nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};

/* Every superblock costs the kernel memory in every memory cgroup of the
 * node (a memcg-aware shrinker each: docs/ARCHITECTURE.md, "Mount table of
 * a container sandbox"), so /dev, /dev/shm and the masks have none of
 * their own: they are directories of devfs/ in the writable layer's tmpfs
 * (storage, beside upper/ and work/):
 *
 *   devfs/dev/    -> /dev, read-only: the mount points of the device binds,
 *                    pts/, shm/ and the symlinks
 *   devfs/shm/    -> /dev/shm, writable (1777): its files count against
 *                    the disk quota (size= and nr_inodes= of the tmpfs)
 *   devfs/mask/   -> an empty directory, cloned read-only over masked
 *                    directories
 *   devfs/maskf      an empty file, cloned read-only over masked files
 *
 * The sandbox reaches devfs/ only through these mounts (the tmpfs's root
 * is never attached, and overlay shows upper/ only), mask/ and maskf only
 * through read-only ones (a hard link or rename from /dev/shm would cross
 * mounts: EXDEV), so a mask stays empty. Every clone gets nosuid, noexec
 * and nodev (the tmpfs's own mount, which backs the overlay, has nodev
 * only).
 * Returns a read-only detached clone of devfs/ (the masks' source) in
 * *masks. */
static int setup_dev(int rootfd, int storage, int *masks, struct wr_cerr *e)
{
	const uint64_t attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC | MOUNT_ATTR_NODEV;
	if (ensure_dir(rootfd, "dev", 0755, e) < 0 || ensure_dir(storage, "devfs", 0755, e) < 0)
		return -1;
	_cleanup_close_ int t = openat(storage, "devfs", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (t < 0)
		return wr_cerr_sys(e, "open devfs");
	if (ensure_dir(t, "dev", 0755, e) < 0 || ensure_dir(t, "shm", 01777, e) < 0 ||
	    ensure_dir(t, "mask", 0555, e) < 0)
		return -1;
	/* mkdir's mode passed through our umask */
	if (fchmodat(t, "shm", 01777, 0) < 0 || fchmodat(t, "mask", 0555, 0) < 0)
		return wr_cerr_sys(e, "/dev: modes");
	_cleanup_close_ int mf = openat(t, "maskf", O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0444);
	if (mf < 0)
		return wr_cerr_sys(e, "mask: create empty file");
	_cleanup_close_ int dev = openat(t, "dev", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dev < 0)
		return wr_cerr_sys(e, "open /dev");
	for (size_t i = 0; i < WR_ARRAY_SIZE(dev_nodes); i++) {
		int f = openat(dev, dev_nodes[i], O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0666);
		if (f < 0)
			return wr_cerr_sys(e, "create /dev/%s", dev_nodes[i]);
		close(f);
	}
	/* pts/: the sandbox's own devpts goes there before its first command
	 * runs (wr_rootfs_devpts), so ptmx dangles only while no command can
	 * see it. */
	if (ensure_dir(dev, "pts", 0755, e) < 0 || ensure_dir(dev, "shm", 0755, e) < 0)
		return -1;
	static const char *const links[][2] = {
	    {"pts/ptmx", "ptmx"},	   {"/proc/self/fd", "fd"},
	    {"/proc/self/fd/0", "stdin"},  {"/proc/self/fd/1", "stdout"},
	    {"/proc/self/fd/2", "stderr"},
	};
	for (size_t i = 0; i < WR_ARRAY_SIZE(links); i++)
		if (symlinkat(links[i][0], dev, links[i][1]) < 0)
			return wr_cerr_sys(e, "symlink /dev/%s", links[i][1]);

	/* nodev on /dev itself: the device binds on it are mounts of their
	 * own, with their own flags. */
	_cleanup_close_ int dm = wr_mount_clone(t, "dev", false, e);
	if (dm < 0 || wr_mount_setattr(dm, attrs, 0, -1, false, e) < 0 ||
	    wr_mount_attach(dm, rootfd, "dev", e) < 0)
		return -1;
	_cleanup_close_ int devfd =
	    openat(rootfd, "dev", O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (devfd < 0)
		return wr_cerr_sys(e, "open /dev");
	for (size_t i = 0; i < WR_ARRAY_SIZE(dev_nodes); i++)
		if (bind_dev(devfd, dev_nodes[i], e) < 0)
			return -1;
	_cleanup_close_ int shm = wr_mount_clone(t, "shm", false, e);
	if (shm < 0 || wr_mount_setattr(shm, attrs, 0, -1, false, e) < 0 ||
	    wr_mount_attach(shm, devfd, "shm", e) < 0)
		return -1;
	/* Seal /dev (this mount only: /dev/shm stays writable): nothing can
	 * be created in it by the sandbox. */
	if (wr_mount_setattr(devfd, MOUNT_ATTR_RDONLY, 0, -1, false, e) < 0)
		return -1;
	_cleanup_close_ int ro = wr_mount_clone(t, "", false, e);
	if (ro < 0 || wr_mount_setattr(ro, MOUNT_ATTR_RDONLY | attrs, 0, -1, false, e) < 0)
		return -1;
	*masks = steal_fd(&ro);
	return 0;
}

/* Which of the masked and read-only paths mask_paths covers: /proc's are
 * only there once a proc is mounted. */
enum mask_set { MASK_ALL, MASK_BUT_PROC, MASK_PROC };

static bool mask_wanted(const char *p, enum mask_set set)
{
	bool in_proc = strncmp(p, "proc/", 5) == 0;
	return set == MASK_ALL || (set == MASK_PROC) == in_proc;
}

/* masks: the read-only clone of devfs/ (setup_dev). */
static int mask_paths(int rootfd, int masks, enum mask_set set, struct wr_cerr *e)
{
	for (size_t i = 0; wr_rootfs_masked_paths[i]; i++) {
		const char *p = wr_rootfs_masked_paths[i];
		if (!mask_wanted(p, set))
			continue;
		struct stat st;
		if (fstatat(rootfd, p, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno == ENOENT)
				continue;
			return wr_cerr_sys(e, "mask /%s", p);
		}
		/* A clone of an empty read-only directory or file: two syscalls
		 * and no new superblock per mask. */
		_cleanup_close_ int m =
		    wr_mount_clone(masks, S_ISDIR(st.st_mode) ? "mask" : "maskf", false, e);
		if (m < 0)
			return -1;
		if (wr_mount_attach(m, rootfd, p, e) < 0)
			return -1;
	}
	for (size_t i = 0; wr_rootfs_readonly_paths[i]; i++) {
		const char *p = wr_rootfs_readonly_paths[i];
		struct stat st;
		if (!mask_wanted(p, set) || fstatat(rootfd, p, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (wr_mount_make_readonly(rootfd, p, e) < 0)
			return -1;
	}
	return 0;
}

int wr_rootfs_proc_state(int rootfd)
{
	struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
			       .resolve =
				   RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
	_cleanup_close_ int dir = wr_openat2(rootfd, "proc", &how);
	struct statfs sf;
	if (dir < 0 || fstatfs(dir, &sf) < 0)
		return -errno;
	if (sf.f_type != PROC_SUPER_MAGIC)
		return WR_PROC_NONE;
	/* proc/sys read-only is mask_paths' last step (the read-only list
	 * ends with it), so it says every mask before it went on. */
	_cleanup_close_ int sys = wr_openat2(dir, "sys", &how);
	struct statvfs sv;
	if (sys >= 0 && fstatvfs(sys, &sv) == 0 && (sv.f_flag & ST_RDONLY))
		return WR_PROC_DONE;
	return WR_PROC_PARTIAL;
}

int wr_rootfs_proc(int proc, int masks, struct wr_cerr *e)
{
	struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
			       .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
	_cleanup_close_ int root = wr_openat2(AT_FDCWD, "/", &how);
	if (root < 0)
		return wr_cerr_sys(e, "proc: open /");
	int st = wr_rootfs_proc_state(root);
	if (st < 0)
		return wr_cerr_set(e, -st, "proc: /proc");
	if (st == WR_PROC_DONE)
		return 0; /* mounted by an earlier process of ours (a restart), or
			     by the create of a sandbox made before /proc waited */
	/* A proc without all its masks (a helper that died between the
	 * attach and the last mask) never serves a command: detached, and
	 * made again. */
	if (st == WR_PROC_PARTIAL && umount2("/proc", MNT_DETACH | UMOUNT_NOFOLLOW) < 0)
		return wr_cerr_sys(e, "proc: detach an unmasked /proc");
	_cleanup_close_ int dir = wr_openat2(root, "proc", &how);
	if (dir < 0)
		return wr_cerr_sys(e, "proc: open /proc");
	struct statfs sf;
	if (fstatfs(dir, &sf) < 0)
		return wr_cerr_sys(e, "proc: statfs /proc");
	if (sf.f_type != OVERLAYFS_SUPER_MAGIC)
		return wr_cerr_set(e, EXDEV, "proc: /proc is not on the sandbox's root");
	if (wr_move_mount(proc, "", dir, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
		return wr_cerr_sys(e, "proc: attach on /proc");
	/* Invariant: the masks go on over the proc just attached, before any
	 * command can see it (the caller runs before the first command, and
	 * holds back every command until it is done); a proc whose masks
	 * failed is detached at once (and one left by a helper that died is,
	 * by the next). */
	if (mask_paths(root, masks, MASK_PROC, e) < 0) {
		umount2("/proc", MNT_DETACH | UMOUNT_NOFOLLOW);
		return -1;
	}
	return 0;
}

int wr_rootfs_devpts(struct wr_cerr *e)
{
	struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
			       .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
	_cleanup_close_ int pts = wr_openat2(AT_FDCWD, "/dev/pts", &how);
	if (pts < 0)
		return wr_cerr_sys(e, "devpts: open /dev/pts");
	struct statfs sf;
	if (fstatfs(pts, &sf) < 0)
		return wr_cerr_sys(e, "devpts: statfs /dev/pts");
	if (sf.f_type == DEVPTS_SUPER_MAGIC)
		return 0; /* mounted by an earlier process of ours (a restart) */
	if (sf.f_type != TMPFS_MAGIC)
		return wr_cerr_set(e, EXDEV, "devpts: /dev/pts is not on the sandbox's /dev");
	/* A devpts instance of the sandbox's own: its ptys only, owned by its
	 * user namespace (we joined it: gid 5, "tty" in Debian-like images, is
	 * its gid 5). */
	static const char *const pts_opts[] = {"newinstance", "ptmxmode=0666", "mode=0620", "gid=5",
					       NULL};
	_cleanup_close_ int m =
	    wr_mount_new("devpts", "devpts", pts_opts, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, e);
	if (m < 0)
		return -1;
	if (wr_move_mount(m, "", pts, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
		return wr_cerr_sys(e, "devpts: attach on /dev/pts");
	return 0;
}

int wr_rootfs_setup(const struct wr_rootfs_spec *s, const int *lower_fds, size_t n_lower,
		    struct wr_cerr *e)
{
	if (n_lower == 0 || n_lower > WR_ROOTFS_MAX_LOWER)
		return wr_cerr_set(e, EINVAL, "%zu image layers", n_lower);
	/* Nothing we mount from here on may propagate back to the host. */
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return wr_cerr_sys(e, "make / private");

	/* Overlayfs clones its lower layers, which it may only do for mounts in
	 * the caller's own mount namespace; the layers arrive as detached trees
	 * made by the host, so attach them first, each stacked on the last at
	 * the mountpoint. The overlay is then stacked on top of them all, and
	 * they stay hidden under it. */
	for (size_t i = 0; i < n_lower; i++)
		if (wr_move_mount(lower_fds[i], "", s->mountpoint_fd, "",
				  MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0)
			return wr_cerr_sys(e, "attach image layer %zu", i);
	/* each lower_fds[i] now names its attached layer's root; the last one
	 * is the top of the stack */
	int lower = lower_fds[n_lower - 1];
	_cleanup_close_ int oldroot = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (oldroot < 0)
		return wr_cerr_sys(e, "open /");

	/* The writable layer: a tmpfs with a hard size and inode count, so a
	 * disk fill gets ENOSPC at the quota and nothing outside fills up. */
	char sz[48], ino[48];
	snprintf(sz, sizeof(sz), "size=%llu", (unsigned long long)s->disk_bytes);
	snprintf(ino, sizeof(ino), "nr_inodes=%llu", (unsigned long long)s->disk_inodes);
	const char *st_opts[] = {sz, ino, "mode=0755", NULL};
	_cleanup_close_ int storage = wr_mount_new("tmpfs", "warren", st_opts, MOUNT_ATTR_NODEV, e);
	if (storage < 0)
		return wr_cerr_set(e, e->errnum, "writable layer: %s", e->msg);
	if (ensure_dir(storage, "upper", 0755, e) < 0 || ensure_dir(storage, "work", 0755, e) < 0)
		return -1;
	_cleanup_close_ int upper = openat(storage, "upper", O_PATH | O_DIRECTORY | O_CLOEXEC);
	_cleanup_close_ int work = openat(storage, "work", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (upper < 0 || work < 0)
		return wr_cerr_sys(e, "open upper/work");
	if (s->upper_out) {
		/* A mount of upper/ alone, not of the tmpfs: ".." from it stays
		 * in upper/, so PID 1's fd (the host reads the sandbox's changes
		 * through it) leads nowhere else should a process of the
		 * sandbox reach it: the tmpfs also holds work/ and devfs/ (the
		 * masks' source, /dev and /dev/shm). */
		_cleanup_close_ int uc = wr_mount_clone(storage, "upper", false, e);
		if (uc < 0 ||
		    wr_mount_setattr(uc, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC | MOUNT_ATTR_NODEV,
				     0, -1, false, e) < 0)
			return -1;
		if ((*s->upper_out = fcntl(uc, F_DUPFD_CLOEXEC, 3)) < 0)
			return wr_cerr_sys(e, "keep upper");
	}

	_cleanup_close_ int ovl = wr_fsopen("overlay", FSOPEN_CLOEXEC);
	if (ovl < 0)
		return wr_cerr_sys(e, "fsopen overlay");
	/* Overlay records each layer's path as the caller sees it, and shows it
	 * in the sandbox's /proc/self/mountinfo: look at each layer from a
	 * chroot into it, so it is recorded as "/" and no host path (such as our
	 * run directory) is revealed. lowerdir+ takes the top-most layer first,
	 * so the layers go in from the last to the base. */
	for (size_t i = n_lower; i-- > 0;) {
		if (fchdir(lower_fds[i]) < 0 || chroot(".") < 0)
			return wr_cerr_sys(e, "enter image layer %zu", i);
		int lr = wr_fsconfig(ovl, FSCONFIG_SET_FD, "lowerdir+", NULL, lower_fds[i]);
		int lerr = errno;
		if (fchdir(oldroot) < 0 || chroot(".") < 0)
			return wr_cerr_sys(e, "leave image layer %zu", i);
		errno = lerr;
		if (lr < 0)
			return wr_cerr_sys(e, "overlay lower layer %zu", i);
	}
	if (wr_fsconfig(ovl, FSCONFIG_SET_STRING, "source", "warren", 0) < 0 ||
	    wr_fsconfig(ovl, FSCONFIG_SET_FD, "upperdir", NULL, upper) < 0 ||
	    wr_fsconfig(ovl, FSCONFIG_SET_FD, "workdir", NULL, work) < 0 ||
	    /* trusted.* xattrs need init-namespace privilege */
	    wr_fsconfig(ovl, FSCONFIG_SET_FLAG, "userxattr", NULL, 0) < 0 ||
	    wr_fsconfig(ovl, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
		return wr_cerr_sys(e, "overlay");
	_cleanup_close_ int root = wr_fsmount(ovl, FSMOUNT_CLOEXEC, MOUNT_ATTR_NODEV);
	if (root < 0)
		return wr_cerr_sys(e, "fsmount overlay");
	/* Stack the overlay on the lower's root; the fsmount fd then names the
	 * new root. */
	if (wr_move_mount(root, "", lower, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) <
	    0)
		return wr_cerr_sys(e, "attach overlay");
	int rootfd = root;

	if (ensure_dir(rootfd, "proc", 0555, e) < 0 || ensure_dir(rootfd, "sys", 0555, e) < 0 ||
	    ensure_dir(rootfd, "tmp", 01777, e) < 0)
		return -1;

	/* /proc of the sandbox's PID namespace (we are its PID 1), unless it
	 * waits for the first command (wr_rootfs_proc). */
	if (!s->proc_later) {
		_cleanup_close_ int proc =
		    wr_mount_new("proc", "proc", NULL, WR_ROOTFS_PROC_ATTRS, e);
		if (proc < 0 || wr_mount_attach(proc, rootfd, "proc", e) < 0)
			return -1;
	}
	/* /sys: a detached read-only sysfs of a network namespace: the
	 * sandbox's pool namespace (networked) or the tier's one shared
	 * offline namespace (container.c), so no sysfs superblock of its own;
	 * else one of our own namespace. */
	_cleanup_close_ int sys = s->use_sysfs_fd
				      ? s->sysfs_fd
				      : wr_mount_new("sysfs", "sysfs", NULL,
						     MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID |
							 MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
						     e);
	if (sys < 0 || wr_mount_attach(sys, rootfd, "sys", e) < 0)
		return -1;
	_cleanup_close_ int masks = -1;
	if (setup_dev(rootfd, storage, &masks, e) < 0)
		return -1;
	/* Invariant: masks go on after /proc, /sys and /dev exist. /proc's
	 * wait with it (wr_rootfs_proc): the read-only devfs/ clone they
	 * come from is kept for them. */
	if (mask_paths(rootfd, masks, s->proc_later ? MASK_BUT_PROC : MASK_ALL, e) < 0)
		return -1;
	if (s->masks_out && (*s->masks_out = fcntl(masks, F_DUPFD_CLOEXEC, 3)) < 0)
		return wr_cerr_sys(e, "keep the masks' source");

	/* pivot_root(".", "."): the old root ends up stacked under the new one
	 * and is detached right away; nothing of the host stays reachable. */
	if (fchdir(rootfd) < 0)
		return wr_cerr_sys(e, "chdir new root");
	if (syscall(SYS_pivot_root, ".", ".") < 0)
		return wr_cerr_sys(e, "pivot_root");
	if (umount2(".", MNT_DETACH) < 0)
		return wr_cerr_sys(e, "detach old root");
	if (chdir("/") < 0)
		return wr_cerr_sys(e, "chdir /");
	return 0;
}
