/* The container tier: the mounts made outside a create's rootfs set-up
 * (isolate/rootfs.c): the offline sandboxes' shared sysfs, and a sandbox's
 * /proc and devpts, mounted before its first command and given back while
 * it is idle.
 *
 * Every superblock costs memory in every memory cgroup of the node (a
 * memcg-aware shrinker each, docs/ARCHITECTURE.md "Mount table of a
 * container sandbox"), and a sandbox that runs no command needs neither a
 * /proc nor terminals: PID 1 (warren-init) runs nothing and reads no file.
 * So the create leaves /proc and /dev/pts empty directories, and the first
 * command (or terminal) of the sandbox mounts them first, /proc with its
 * masks. Every process that could look at them is a command, so every one
 * of them sees the same /proc and /dev as when the create mounted them.
 *
 *   P  lock -> what is missing, seen from here (wr_rootfs_proc_state, the
 *      type of /dev/pts): nothing -> done; /proc -> PID 1's masks' source
 *      (wr_container_init_fd) -> clone(CLONE_VM | CLONE_VFORK) H on a
 *      spawn stack
 *   H  setns(pidfd of PID 1: pid, for its children) -> clone(CLONE_VM |
 *      CLONE_VFORK) G on the lower half of the stack -> wait -> _exit
 *   G  (a process of the sandbox's PID namespace) a proc of it, made in
 *      our mount namespace -> setns(user + mount) -> uid 0 there ->
 *      wr_rootfs_proc: /proc and its masks (a proc found without them is
 *      detached and made again) -> wr_rootfs_devpts: the devpts instance
 *      is owned by the sandbox's user namespace (made after joining it), as
 *      one made by PID 1 itself -> _exit
 *   P  done: the flag is set, later calls return at once.
 *
 * Idle (wr_container_idle_release, from the harvest sampler): with PID 1
 * its only process and no command starting, U joins the sandbox's mount
 * namespace and detaches both; the flag goes down and the next command
 * mounts them again. The same lock serialises both directions.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <linux/magic.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "isolate/mount.h"
#include "isolate/netns.h"
#include "isolate/rootfs.h"
#include "tiers/container_internal.h"

/* The shared offline namespace and its sysfs (wr_container_globals). This
 * thread enters a new network namespace for the mount (sysfs shows the
 * mounting task's namespace) and comes back at once; the others of the
 * process are unaffected. */
int wr_container_offline_sysfs(struct wr_container_globals *g, wr_err *err)
{
	g->offline_netns = g->offline_sysfs = -1;
	int saved = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (saved < 0)
		return wr_err_sys(err, "offline sysfs: own network namespace");
	struct wr_cerr ce = {0};
	int r = wr_netns_new(&ce);
	if (r == 0 &&
	    (g->offline_netns = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC)) < 0)
		r = wr_cerr_sys(&ce, "open it");
	if (r == 0)
		r = g->offline_sysfs = wr_mount_new("sysfs", "sysfs", NULL,
						    MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID |
							MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
						    &ce);
	/* Invariant: back in our own namespace before anything else runs on
	 * this thread (wr_netns_leave aborts otherwise). */
	wr_netns_leave(&saved);
	if (r < 0) {
		if (g->offline_netns >= 0)
			close(g->offline_netns);
		g->offline_netns = g->offline_sysfs = -1;
		return wr_err_set(err, ce.errnum, "offline sysfs: %s", ce.msg);
	}
	return 0;
}

struct mounts_args {
	int init_pidfd;
	int masks;	   /* PID 1's masks' source (H and G borrow it); -1: /proc is there */
	bool release_proc; /* U: /proc goes too (it can come back: masks' source kept) */
	char *gstack;
	struct wr_cerr e;
};

/* H and G run on stacks ASan does not know (as exec.c's helper). */
#define HELPER_FN __attribute__((no_sanitize_address))

/* G: a child of H, so a process of the sandbox's PID namespace (which proc
 * takes its namespace from), still in our user and mount namespaces. */
static HELPER_FN int mounts_main(void *arg)
{
	struct mounts_args *a = arg;
	int proc = -1;
	/* Invariant: the proc is made before we join the sandbox's mount
	 * namespace. In a mount namespace owned by another user namespace
	 * than the host's, the kernel refuses a proc that would show more
	 * than one already fully visible there (mount_too_revealing), and
	 * the sandbox has none: its /proc is empty or masked. Made here, it
	 * is still the sandbox's own: a proc of its PID namespace, owned by
	 * its user namespace, attached in its mount namespace. */
	if (a->masks >= 0 &&
	    (proc = wr_mount_new("proc", "proc", NULL, WR_ROOTFS_PROC_ATTRS, &a->e)) < 0)
		_exit(1);
	/* one atomic setns: the mount namespace's owner is the user
	 * namespace we join, where we have every capability */
	if (setns(a->init_pidfd, CLONE_NEWUSER | CLONE_NEWNS) < 0) {
		wr_cerr_sys(&a->e, "join the sandbox");
		_exit(1);
	}
	/* devpts makes its ptmx node with our fsuid/fsgid: be the sandbox's
	 * root, as PID 1 was. Raw syscalls: glibc's wrappers would signal the
	 * parent's threads (setxid broadcast). Host uid 0 is not root of the
	 * namespace, so the change keeps our capabilities in it. */
	if (syscall(SYS_setresgid, 0, 0, 0) < 0 || syscall(SYS_setresuid, 0, 0, 0) < 0) {
		wr_cerr_sys(&a->e, "become root of the user namespace");
		_exit(1);
	}
	if (proc >= 0 && wr_rootfs_proc(proc, a->masks, &a->e) < 0)
		_exit(1);
	_exit(wr_rootfs_devpts(&a->e) < 0 ? 1 : 0);
}

/* H: joins the sandbox's PID namespace for its children only, and runs G
 * there. */
static HELPER_FN int helper_main(void *arg)
{
	struct mounts_args *a = arg;
	if (setns(a->init_pidfd, CLONE_NEWPID) < 0) {
		wr_cerr_sys(&a->e, "join the sandbox's PID namespace");
		_exit(1);
	}
	/* CLONE_VFORK: G runs on the lower half of our stack while we wait */
	pid_t g = clone(mounts_main, a->gstack, CLONE_VM | CLONE_VFORK | SIGCHLD, a);
	if (g < 0) {
		wr_cerr_sys(&a->e, "start the mount helper");
		_exit(1);
	}
	int st;
	while (waitpid(g, &st, __WALL) < 0 && errno == EINTR)
		;
	_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 1);
}

/* Runs fn (H or U) on a spawn stack (G, if fn starts one, on its lower
 * half) and waits for it: CLONE_VFORK, we resume once it has exited; the
 * helpers write only a. */
static int run_helper(struct wr_sandbox *sb, int (*fn)(void *), struct mounts_args *a,
		      const char *what, wr_err *err)
{
	char *stack = wr_spawn_stack_get();
	if (stack == NULL)
		return wr_err_sys(err, "%s: stack", what);
	a->gstack = stack + WR_SPAWN_STACK / 2;
	int r = 0;
	pid_t pid = clone(fn, stack + WR_SPAWN_STACK, CLONE_VM | CLONE_VFORK | SIGCHLD, a);
	if (pid < 0) {
		r = wr_err_sys(err, "%s: start helper", what);
	} else {
		int st;
		while (waitpid(pid, &st, __WALL) < 0 && errno == EINTR)
			;
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			r = wr_err_set(err, a->e.errnum ? a->e.errnum : EIO, "sandbox %s: %s: %s",
				       sb->id, what, a->e.msg[0] ? a->e.msg : "helper failed");
	}
	wr_spawn_stack_put(stack);
	return r;
}

/* Whether the sandbox's devpts is on /dev/pts: the directory as the
 * sandbox sees it, no symlink followed. */
static int pts_there(struct wr_sandbox *sb, wr_err *err)
{
	struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
			       .resolve =
				   RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
	_cleanup_close_ int d = wr_openat2(sb->root_fd, "dev/pts", &how);
	struct statfs sf;
	if (d < 0 || fstatfs(d, &sf) < 0)
		return wr_err_sys(err, "sandbox %s: /dev/pts", sb->id);
	return sf.f_type == DEVPTS_SUPER_MAGIC;
}

int wr_container_devpts(struct wr_sandbox *sb, wr_err *err)
{
	/* Invariant: the caller counted its command in sb->cmds before this
	 * load (wr_container_idle_release). */
	if (atomic_load(&sb->devpts))
		return 0;
	pthread_mutex_lock(&sb->devpts_lock);
	int r = 0;
	_cleanup_close_ int masks = -1;
	if (atomic_load(&sb->devpts))
		goto out;
	/* Looked at from here first: H and G run only when something is
	 * missing. G is a process of the sandbox's PID namespace, which the
	 * sandbox's root could stop or kill once G has joined its user
	 * namespace; when the flag is down with commands' processes alive
	 * (a daemon restart), both mounts are there and G never runs. */
	int ps = wr_rootfs_proc_state(sb->root_fd);
	if (ps < 0) {
		r = wr_err_set(err, -ps, "sandbox %s: /proc", sb->id);
		goto out;
	}
	int pts = pts_there(sb, err);
	if (pts < 0) {
		r = pts;
		goto out;
	}
	if (ps == WR_PROC_DONE && pts) {
		atomic_store(&sb->devpts, true);
		goto out;
	}
	if (ps != WR_PROC_DONE && (r = wr_container_init_fd(sb, true, &masks, err)) < 0)
		goto out;
	struct mounts_args a = {.init_pidfd = sb->init_pidfd, .masks = masks};
	if ((r = run_helper(sb, helper_main, &a, "mounts", err)) < 0)
		goto out;
	atomic_store(&sb->devpts, true);
	r = 0;
out:
	pthread_mutex_unlock(&sb->devpts_lock);
	return r;
}

/* U: joins the sandbox's mount namespace (as the host's root, who may) and
 * detaches /proc, with its masks, and /dev/pts. */
static HELPER_FN int release_main(void *arg)
{
	struct mounts_args *a = arg;
	if (setns(a->init_pidfd, CLONE_NEWNS) < 0) {
		wr_cerr_sys(&a->e, "join the sandbox's mount namespace");
		_exit(1);
	}
	/* MNT_DETACH takes the masks under /proc with it; UMOUNT_NOFOLLOW: a
	 * mount point, never a symlink's target. EINVAL: nothing mounted. */
	if (a->release_proc && umount2("/proc", MNT_DETACH | UMOUNT_NOFOLLOW) < 0 &&
	    errno != EINVAL) {
		wr_cerr_sys(&a->e, "unmount /proc");
		_exit(1);
	}
	if (umount2("/dev/pts", MNT_DETACH | UMOUNT_NOFOLLOW) < 0 && errno != EINVAL) {
		wr_cerr_sys(&a->e, "unmount /dev/pts");
		_exit(1);
	}
	_exit(0);
}

int wr_container_idle_release(struct wr_sandbox *sb, wr_err *err)
{
	/* killed, suspended to disk (no process), or restored from a
	 * checkpoint (keeps them: wr_container_ckpt_restored) */
	if (atomic_load(&sb->killed) || sb->init_pid == 0 || wr_container_ckpt_restored(sb->id))
		return 0;
	pthread_mutex_lock(&sb->devpts_lock);
	int r = 0;
	/* Invariant: the flag goes down before the commands are counted, and
	 * a command is counted before it loads the flag (wr_container_exec,
	 * then wr_container_devpts; all sequentially consistent). So either
	 * we see the command and leave, or it sees the flag down, waits for
	 * our lock and mounts both again. Processes left by earlier commands
	 * (a background job) are seen in the sandbox's cgroup. A flag found
	 * down (never ran a command, or a restart) means nothing we mounted:
	 * left as it is. */
	if (!atomic_exchange(&sb->devpts, false))
		goto out;
	int n = atomic_load(&sb->cmds) > 0 ? 2 : wr_cgroup_nprocs(sb->cg, err);
	if (n != 1) {
		atomic_store(&sb->devpts, true);
		r = n < 0 ? wr_err_wrap(err, "sandbox %s", sb->id) : 0;
		goto out;
	}
	/* A sandbox made before /proc waited for commands has no masks'
	 * source in PID 1: its /proc stays, or no command could run again. */
	int mfd = -1;
	struct mounts_args a = {.init_pidfd = sb->init_pidfd,
				.masks = -1,
				.release_proc = wr_container_init_fd(sb, true, &mfd, NULL) == 0};
	if (mfd >= 0)
		close(mfd);
	/* On failure the flag stays down: the next command checks and mounts
	 * what is missing. */
	if ((r = run_helper(sb, release_main, &a, "release", err)) < 0)
		goto out;
	r = 1;
out:
	pthread_mutex_unlock(&sb->devpts_lock);
	return r;
}
