/* The container tier: the mounts made outside a create's rootfs set-up
 * (isolate/rootfs.c): the offline sandboxes' shared sysfs, and a sandbox's
 * devpts, mounted before its first command.
 *
 * Every superblock costs memory in every memory cgroup of the node (a
 * memcg-aware shrinker each, docs/ARCHITECTURE.md "Mount table of a
 * container sandbox"), and a sandbox that never runs a command needs no
 * terminals: PID 1 (warren-init) runs nothing. So the create leaves
 * /dev/pts an empty directory, and the first command (or terminal) of the
 * sandbox mounts its devpts instance there first. Every process that could
 * open /dev/ptmx is a command, so every one of them sees the same /dev as
 * when the create mounted it.
 *
 *   P  lock -> clone(CLONE_VM | CLONE_VFORK) H on a spawn stack
 *   H  setns(pidfd of PID 1: user + mount) -> uid 0 there -> wr_rootfs_devpts: the
 *      devpts instance is owned by the sandbox's user namespace (made
 *      after joining it), as one made by PID 1 itself -> _exit
 *   P  done: the flag is set, later calls return at once.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

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

struct devpts_args {
	int init_pidfd;
	struct wr_cerr e;
};

/* H runs on a stack ASan does not know (as exec.c's helper). */
static __attribute__((no_sanitize_address)) int devpts_main(void *arg)
{
	struct devpts_args *a = arg;
	/* one atomic setns: the mount namespace's owner is the user
	 * namespace we join, where we have every capability */
	if (setns(a->init_pidfd, CLONE_NEWUSER | CLONE_NEWNS) < 0) {
		wr_cerr_sys(&a->e, "devpts: join the sandbox");
		_exit(1);
	}
	/* devpts makes its ptmx node with our fsuid/fsgid: be the sandbox's
	 * root, as PID 1 was. Raw syscalls: glibc's wrappers would signal the
	 * parent's threads (setxid broadcast). Host uid 0 is not root of the
	 * namespace, so the change keeps our capabilities in it. */
	if (syscall(SYS_setresgid, 0, 0, 0) < 0 || syscall(SYS_setresuid, 0, 0, 0) < 0) {
		wr_cerr_sys(&a->e, "devpts: become root of the user namespace");
		_exit(1);
	}
	_exit(wr_rootfs_devpts(&a->e) < 0 ? 1 : 0);
}

int wr_container_devpts(struct wr_sandbox *sb, wr_err *err)
{
	if (atomic_load(&sb->devpts))
		return 0;
	pthread_mutex_lock(&sb->devpts_lock);
	int r = 0;
	char *stack = NULL;
	if (atomic_load(&sb->devpts))
		goto out;
	stack = wr_spawn_stack_get();
	if (stack == NULL) {
		r = wr_err_sys(err, "devpts: stack");
		goto out;
	}
	struct devpts_args a = {.init_pidfd = sb->init_pidfd};
	/* CLONE_VFORK: we resume once H has exited; it writes only a. */
	pid_t pid =
	    clone(devpts_main, stack + WR_SPAWN_STACK, CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
	if (pid < 0) {
		r = wr_err_sys(err, "devpts: start helper");
		goto out;
	}
	int st;
	while (waitpid(pid, &st, __WALL) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		r = wr_err_set(err, a.e.errnum ? a.e.errnum : EIO, "%s",
			       a.e.msg[0] ? a.e.msg : "devpts: helper failed");
		goto out;
	}
	atomic_store(&sb->devpts, true);
out:
	wr_spawn_stack_put(stack);
	pthread_mutex_unlock(&sb->devpts_lock);
	return r;
}
