/* The container tier after a daemon restart: a sandbox a previous process
 * created found again by its record (adoption, also of a sandbox suspended
 * to disk), a handle given up without touching the sandbox (release), and
 * what no record names removed (sweep). Split from container.c. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "common/util.h"
#include "isolate/caps.h"
#include "tiers/container.h"
#include "tiers/container_ckpt.h"
#include "tiers/container_internal.h"

/* ---- adoption after a restart -------------------------------------------- */

static int adopt(const struct wr_sandbox_spec *in, pid_t init_pid, int64_t slot,
		 struct wr_sandbox **out, wr_err *err);

/* True when /proc/<pid>/cgroup places pid in .../<id>/init (pure v2) or
 * .../<id> (v1, hybrid) in some hierarchy: that is how we know a recorded pid
 * is still our PID 1 and not a recycled pid. */
static bool pid_is_init_of(pid_t pid, const char *id)
{
	char path[64], suffix[96];
	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	snprintf(suffix, sizeof(suffix),
		 wr_cgroup_root_mode(wr_cg_globals.cgroot) == WR_CG_V2 ? "/%s/init" : "/%s", id);
	_cleanup_free_ char *buf = NULL;
	if (wr_read_file_at(AT_FDCWD, path, &buf, 65536, NULL) < 0)
		return false;
	size_t sl = strlen(suffix);
	char *sv = NULL; /* strtok_r: other threads tokenise too */
	for (char *line = strtok_r(buf, "\n", &sv); line; line = strtok_r(NULL, "\n", &sv)) {
		size_t l = strlen(line);
		if (l >= sl && strcmp(line + l - sl, suffix) == 0)
			return true;
	}
	return false;
}

int wr_container_adopt(const struct wr_sandbox_spec *in, pid_t init_pid, struct wr_sandbox **out,
		       wr_err *err)
{
	wr_ckpt_wait_dumps(init_pid);
	return adopt(in, init_pid, -1, out, err);
}

int wr_container_adopt_known(const struct wr_sandbox_spec *in, pid_t init_pid, uint32_t slot,
			     struct wr_sandbox **out, wr_err *err)
{
	return adopt(in, init_pid, (int64_t)slot, out, err);
}

void wr_container_release(struct wr_sandbox **psb)
{
	struct wr_sandbox *sb = *psb;
	if (sb == NULL)
		return;
	*psb = NULL;
	close(sb->init_pidfd);
	if (sb->root_fd >= 0)
		close(sb->root_fd);
	if (sb->init_cg)
		wr_cgroup_close(sb->init_cg);
	wr_cgroup_close(sb->cg);
	wr_container_sandbox_free(sb);
}

/* slot < 0: look the uid range up by owner (a restart); else it is known
 * (a spawner just made the sandbox). */
static int adopt(const struct wr_sandbox_spec *in, pid_t init_pid, int64_t slot,
		 struct wr_sandbox **out, wr_err *err)
{
	struct wr_container_globals *g = &wr_cg_globals;
	if (!g->ready)
		return wr_err_set(err, EINVAL, "container tier not initialised");
	if (in->id == NULL)
		return wr_err_field(err, "id", "adoption needs the sandbox id");
	struct wr_sandbox_spec spec;
	struct wr_sandbox_spec tmp = *in;
	/* The image is not reopened (the rootfs is live): its layers may be
	 * gone or changed, and nothing here depends on them. */
	tmp.layers = NULL;
	tmp.n_layers = 0;
	if (tmp.image == NULL)
		tmp.image = "adopted";
	if (wr_container_normalize(&tmp, &spec, err) < 0)
		return wr_err_wrap(err, "adopt %s", in->id);
	struct wr_sandbox *sb = wr_container_sandbox_alloc();
	if (sb == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	sb->init_pid = init_pid;
	snprintf(sb->id, sizeof(sb->id), "%s", spec.id);
	sb->user = spec.user;
	sb->group = spec.group;
	sb->caps = wr_capset_mask(spec.capset);
	wr_rlimits_default(&sb->rlimits);
	sb->rlimits.nofile = spec.nofile;
	/* Commands numbered from a fresh range: leaves of the previous
	 * process's commands may still exist. */
	atomic_store(&sb->cmd_seq, (unsigned)(wr_now_ns() / 1000000) % 1000000000u);
	int r;
	if ((sb->workdir = strdup(spec.workdir)) == NULL) {
		r = wr_err_set(err, ENOMEM, "out of memory");
		goto fail;
	}
	if ((r = wr_container_copy_env(sb, &spec, err)) < 0)
		goto fail;
	/* pid 0: suspended to disk (container_ckpt.c), no process; its
	 * checkpoint is found again */
	if (init_pid == 0 && !wr_container_ckpt_exists(sb->id)) {
		r = wr_err_set(err, ENOENT, "its checkpoint is gone");
		goto fail;
	}
	sb->init_pidfd = init_pid > 0 ? wr_pidfd_open(init_pid, 0) : -1;
	if (init_pid > 0 && sb->init_pidfd < 0) {
		r = wr_err_sys(err, "PID 1 (%d) is gone", (int)init_pid);
		goto fail;
	}
	/* Invariant: checked after the pidfd is open, so the pid cannot be
	 * recycled between the check and our use of it. */
	if (init_pid > 0 && !pid_is_init_of(init_pid, sb->id)) {
		r = wr_err_set(err, ESRCH, "pid %d is not PID 1 of sandbox %s", (int)init_pid,
			       sb->id);
		goto fail;
	}
	if (slot >= 0) {
		sb->idmap.slot = (uint32_t)slot;
		sb->idmap.base = WR_IDMAP_BASE + (uint32_t)slot * WR_IDMAP_SIZE;
		sb->idmap.count = WR_IDMAP_SIZE;
	} else if ((r = wr_idmap_find(g->state_dir, sb->id, &sb->idmap, err)) < 0) {
		goto fail;
	}
	if ((r = wr_cgroup_open(g->cgroot, sb->id, &sb->cg, err)) < 0)
		goto fail;
	if (init_pid == 0) {
		/* a restore a crash cut short left processes: they go (the
		 * checkpoint is intact: they were stopped) */
		if (wr_cgroup_nprocs(sb->cg, NULL) > 0)
			wr_cgroup_kill(sb->cg, NULL);
		sb->root_fd = wr_container_ckpt_root(sb->id);
	} else {
		char path[64];
		snprintf(path, sizeof(path), "/proc/%d/root", (int)init_pid);
		sb->root_fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	}
	if (sb->root_fd < 0) {
		r = wr_err_sys(err, "open sandbox root");
		goto fail;
	}
	if (init_pid > 0 && wr_container_ckpt_exists(sb->id)) {
		/* Running, with a checkpoint left: a pause to disk cut before
		 * its commit (the tree frozen, which the daemon's reconcile
		 * thaws), or a resume cut after it (the restored tasks still
		 * stopped): they continue; the checkpoint goes. */
		wr_container_ckpt_continue(sb, NULL);
	}
	if (init_pid > 0)
		wr_container_ckpt_done(sb->id);
	sb->adopted = true;
	*out = sb;
	return 0;
fail:
	wr_err_wrap(err, "adopt %s", in->id);
	if (sb->cg)
		wr_cgroup_close(sb->cg);
	if (sb->init_pidfd >= 0)
		close(sb->init_pidfd);
	wr_container_sandbox_free(sb);
	return r < 0 ? r : -EIO;
}

struct sweep_ctx {
	bool (*keep)(const char *id, void *ctx);
	void *ctx;
};

static bool sweep_keep(const char *id, void *ctx)
{
	struct sweep_ctx *c = ctx;
	return c->keep(id, c->ctx);
}

int wr_container_sweep(bool (*keep)(const char *id, void *ctx), void *ctx, wr_err *err)
{
	struct wr_container_globals *g = &wr_cg_globals;
	if (!g->ready)
		return wr_err_set(err, EINVAL, "container tier not initialised");
	struct sweep_ctx c = {keep, ctx};
	int n = wr_cgroup_sweep(g->cgroot, sweep_keep, &c, err);
	if (n < 0)
		return wr_err_wrap(err, "sweep cgroups");
	wr_container_ckpt_sweep(sweep_keep, &c);
	int m = wr_idmap_reclaim(g->state_dir, sweep_keep, &c, err);
	if (m < 0)
		return wr_err_wrap(err, "sweep uid ranges");
	return n + m;
}
