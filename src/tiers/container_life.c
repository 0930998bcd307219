/* The container tier's part of the lifecycle: pause and resume (the
 * cgroup freezer on the sandbox cgroup, which holds PID 1 and every command
 * leaf), the freezer's state for recovery, the sandbox's usage, and its
 * writable layer for snapshots. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tiers/container.h"
#include "tiers/container_internal.h"

int wr_container_freeze(struct wr_sandbox *sb, bool frozen, wr_err *err)
{
	if (atomic_load(&sb->killed))
		return wr_err_set(err, ESRCH, "sandbox %s was killed", sb->id);
	/* A paused sandbox's memory is the first reclaimed (best effort: a
	 * failure costs only that); on resume undone before the thaw. */
	wr_err ignored = NULL;
	if (!frozen)
		wr_cgroup_idle_memory(sb->cg, false, &ignored);
	if (wr_cgroup_freeze(sb->cg, frozen, err) < 0) {
		wr_err_free(&ignored);
		return wr_err_wrap(err, "%s sandbox %s", frozen ? "pause" : "resume", sb->id);
	}
	if (frozen)
		wr_cgroup_idle_memory(sb->cg, true, &ignored);
	wr_err_free(&ignored);
	return 0;
}

int wr_container_frozen(struct wr_sandbox *sb, wr_err *err)
{
	int r = wr_cgroup_frozen(sb->cg, err);
	return r < 0 ? wr_err_wrap(err, "sandbox %s", sb->id) : r;
}

int wr_container_usage(struct wr_sandbox *sb, struct wr_cgroup_stats *st, wr_err *err)
{
	if (wr_cgroup_stats(sb->cg, st, err) < 0)
		return wr_err_wrap(err, "usage of sandbox %s", sb->id);
	return 0;
}

int wr_container_cpu_time(struct wr_sandbox *sb, uint64_t *ns, wr_err *err)
{
	if (wr_cgroup_cpu_ns(sb->cg, ns, err) < 0)
		return wr_err_wrap(err, "sandbox %s", sb->id);
	return 0;
}

int wr_container_cpu_share(struct wr_sandbox *sb, uint64_t weight, bool idle, wr_err *err)
{
	if (atomic_load(&sb->killed))
		return wr_err_set(err, ESRCH, "sandbox %s was killed", sb->id);
	int r = wr_cgroup_cpu_share(sb->cg, weight, idle, err);
	return r < 0 ? wr_err_wrap(err, "sandbox %s", sb->id) : r;
}

int64_t wr_container_idle_memory(struct wr_sandbox *sb, bool idle, wr_err *err)
{
	if (atomic_load(&sb->killed))
		return wr_err_set(err, ESRCH, "sandbox %s was killed", sb->id);
	int64_t r = wr_cgroup_idle_memory(sb->cg, idle, err);
	return r < 0 ? wr_err_wrap(err, "sandbox %s", sb->id) : r;
}

/* PID 1 (warren-init) keeps two fds above 2 (container.c keeps them open
 * through its exec), both of mounts of the writable layer's tmpfs attached
 * nowhere, reachable from the host only through them; a restarted daemon
 * finds them the same way: the upper directory (writable) and the
 * read-only devfs/ clone /proc's masks come from. */
int wr_container_init_fd(struct wr_sandbox *sb, bool readonly, int *fd, wr_err *err)
{
	if (atomic_load(&sb->killed))
		return wr_err_set(err, ESRCH, "sandbox %s was killed", sb->id);
	/* restored from a checkpoint: the pinned upper (container_ckpt.c) */
	int pinned = readonly ? -1 : wr_container_ckpt_upper(sb);
	if (pinned >= 0) {
		*fd = pinned;
		return 0;
	}
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)sb->init_pid);
	DIR *d = opendir(path);
	if (d == NULL)
		return wr_err_sys(err, "sandbox %s: list PID 1's fds", sb->id);
	int found = -1;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		char *end;
		long n = strtol(e->d_name, &end, 10);
		if (*end || end == e->d_name || n <= 2)
			continue;
		char p[96];
		snprintf(p, sizeof(p), "/proc/%d/fd/%ld", (int)sb->init_pid, n);
		int f = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		struct statfs sf;
		if (f >= 0 && fstatfs(f, &sf) == 0 && sf.f_type == TMPFS_MAGIC &&
		    !(sf.f_flags & ST_RDONLY) == !readonly) {
			found = f;
			break;
		}
		if (f >= 0)
			close(f);
	}
	closedir(d);
	/* the pidfd still names PID 1: the fd read is its, not a recycled pid's */
	siginfo_t si = {0};
	if (found >= 0 &&
	    waitid(P_PIDFD, (id_t)sb->init_pidfd, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
	    si.si_pid != 0) {
		close(found);
		found = -1;
	}
	if (found < 0)
		return wr_err_set(err, EOPNOTSUPP,
				  "sandbox %s: its %s is not reachable (PID 1 gone, or the "
				  "sandbox predates %s)",
				  sb->id, readonly ? "masks' source" : "writable layer",
				  readonly ? "its /proc waiting for a command" : "snapshots");
	*fd = found;
	return 0;
}

int wr_container_upper(struct wr_sandbox *sb, int *fd, uid_t *id_base, wr_err *err)
{
	if (wr_container_init_fd(sb, false, fd, err) < 0)
		return -1;
	*id_base = sb->idmap.base;
	return 0;
}
