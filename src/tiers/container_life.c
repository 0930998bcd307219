/* The container tier's part of the lifecycle: pause and resume (the
 * cgroup freezer on the sandbox cgroup, which holds PID 1 and every command
 * leaf), the freezer's state for recovery, and the sandbox's usage. */
#include <errno.h>
#include <stdatomic.h>

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
