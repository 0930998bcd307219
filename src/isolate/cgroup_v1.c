/* cgroups, v1 backend: limits and stats on the per-controller hierarchies,
 * and freeze/kill through the v1 freezer for hosts without a unified
 * hierarchy. On hybrid hosts the front sends kill, freeze and process
 * counting to the v2 backend, which works on the controller-less unified
 * hierarchy. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "isolate/cgroup_internal.h"

#define FREEZE_TIMEOUT_MS 5000
#define KILL_TIMEOUT_MS 2000
#define KILL_FREEZE_WAIT_MS 500
#define KILL_DRAIN_MS 250

static int hier_of(const struct wr_cgroup *cg, enum wr_cg_ctrl c)
{
	return cg->root->ctrl_hier[c];
}

static const char *label_of(const struct wr_cgroup *cg, enum wr_cg_ctrl c)
{
	int h = hier_of(cg, c);
	return h >= 0 ? cg->root->hier[h].label : wr_cg_ctrl_name(c);
}

/* The fd of cg in controller c's hierarchy, or an EOPNOTSUPP error. */
static int need_fd(const struct wr_cgroup *cg, enum wr_cg_ctrl c, wr_err *err)
{
	int fd = wr_cgroup_ctrl_fd(cg, c);
	if (fd >= 0)
		return fd;
	return wr_err_set(err, EOPNOTSUPP, "cgroup: the v1 %s controller is not mounted",
			  wr_cg_ctrl_name(c));
}

static int write_err(wr_err *err, const char *label, const char *file, const char *v, int r)
{
	return wr_err_set(err, -r, "cgroup %s: write %s=%s: %s", label, file, v, strerror(-r));
}

/* memory.memsw.limit_in_bytes (memory + swap) must stay >= the memory
 * limit, so lowering writes the memory limit first and raising writes memsw
 * first. Which case applies shows as EINVAL from the memory limit write
 * (new limit above the current memsw), which is tried first. */
static int set_memory(const struct wr_cgroup *cg, int fd, uint64_t bytes, wr_err *err)
{
	const char *label = label_of(cg, WR_CG_MEMORY);
	const char *lim = "memory.limit_in_bytes", *sw = "memory.memsw.limit_in_bytes";
	char v[32];
	snprintf(v, sizeof(v), "%llu", (unsigned long long)bytes);
	bool sw_done = false;
	int r = wr_cg_try_write(fd, lim, v);
	if (r == -EINVAL) {
		int rs = wr_cg_try_write(fd, sw, v);
		if (rs < 0 && rs != -ENOENT)
			return write_err(err, label, sw, v, rs);
		sw_done = rs == 0;
		r = rs == 0 ? wr_cg_try_write(fd, lim, v) : r;
	}
	if (r < 0)
		return write_err(err, label, lim, v, r);
	if (!sw_done) {
		r = wr_cg_try_write(fd, sw, v);
		if (r < 0 && r != -ENOENT) /* ENOENT: no swap accounting */
			return write_err(err, label, sw, v, r);
	}
	/* Keep the cgroup out of swap where the kernel lets us say so (it
	 * matters most without swap accounting, where memsw is absent). */
	wr_cg_try_write(fd, "memory.swappiness", "0");
	return 0;
}

int wr_cg_v1_set_limits(struct wr_cgroup *cg, const struct wr_cgroup_limits *lim, wr_err *err)
{
	char v[64];
	int fd, r;
	if (lim->memory_bytes != WR_CG_UNSET) {
		if ((fd = need_fd(cg, WR_CG_MEMORY, err)) < 0)
			return fd;
		if ((r = set_memory(cg, fd, lim->memory_bytes, err)) < 0)
			return r;
	}
	if (lim->pids != WR_CG_UNSET) {
		if ((fd = need_fd(cg, WR_CG_PIDS, err)) < 0)
			return fd;
		snprintf(v, sizeof(v), "%llu", (unsigned long long)lim->pids);
		if ((r = wr_cg_write(fd, label_of(cg, WR_CG_PIDS), "pids.max", v, err)) < 0)
			return r;
	}
	if (lim->cpu_weight != WR_CG_UNSET) {
		if ((fd = need_fd(cg, WR_CG_CPU, err)) < 0)
			return fd;
		/* v2 weight 100 is v1 shares 1024; shares go down to 2 */
		uint64_t shares = lim->cpu_weight * 1024 / 100;
		snprintf(v, sizeof(v), "%llu", (unsigned long long)(shares < 2 ? 2 : shares));
		if ((r = wr_cg_write(fd, label_of(cg, WR_CG_CPU), "cpu.shares", v, err)) < 0)
			return r;
	}
	if (lim->cpu_quota_us != WR_CG_UNSET || lim->cpu_period_us != WR_CG_UNSET) {
		if ((fd = need_fd(cg, WR_CG_CPU, err)) < 0)
			return fd;
		if (lim->cpu_period_us != WR_CG_UNSET) {
			snprintf(v, sizeof(v), "%llu", (unsigned long long)lim->cpu_period_us);
			r = wr_cg_write(fd, label_of(cg, WR_CG_CPU), "cpu.cfs_period_us", v, err);
			if (r < 0)
				return r;
		}
		if (lim->cpu_quota_us != WR_CG_UNSET)
			snprintf(v, sizeof(v), "%llu", (unsigned long long)lim->cpu_quota_us);
		else
			snprintf(v, sizeof(v), "-1");
		if ((r = wr_cg_write(fd, label_of(cg, WR_CG_CPU), "cpu.cfs_quota_us", v, err)) < 0)
			return r;
	}
	fd = wr_cgroup_ctrl_fd(cg, WR_CG_BLKIO);
	if (lim->io_weight != WR_CG_UNSET && fd >= 0) {
		/* io.weight 1..10000 onto blkio.weight 10..1000 (CFQ) or
		 * blkio.bfq.weight (BFQ). Best effort: without a weight-aware
		 * scheduler the file is missing or refuses the value. */
		uint64_t w = 10 + (lim->io_weight - 1) * 990 / 9999;
		snprintf(v, sizeof(v), "%llu", (unsigned long long)w);
		if (wr_cg_try_write(fd, "blkio.weight", v) == -ENOENT)
			wr_cg_try_write(fd, "blkio.bfq.weight", v);
	}
	return 0;
}

/* ---- freezer ---------------------------------------------------------- */

/* Wait until freezer.state reads `want`; 0, -ETIMEDOUT or -errno. The v1
 * freezer has no notification: poll with a growing sleep. */
static int wait_state(int fd, const char *want, unsigned timeout_ms)
{
	uint64_t deadline = wr_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	unsigned delay = 100;
	for (;;) {
		char buf[32];
		ssize_t n = wr_cg_read(fd, "freezer.state", buf, sizeof(buf));
		if (n < 0)
			return (int)n;
		if (strncmp(buf, want, strlen(want)) == 0)
			return 0;
		if (wr_now_ns() >= deadline)
			return -ETIMEDOUT;
		wr_cg_sleep_us(delay);
		if (delay < 10000)
			delay *= 2;
	}
}

int wr_cg_v1_freeze(struct wr_cgroup *cg, bool frozen, wr_err *err)
{
	int fd = need_fd(cg, WR_CG_FREEZER, err);
	if (fd < 0)
		return fd;
	const char *label = label_of(cg, WR_CG_FREEZER);
	const char *v = frozen ? "FROZEN" : "THAWED";
	int r = wr_cg_write(fd, label, "freezer.state", v, err);
	if (r < 0)
		return r;
	r = wait_state(fd, v, FREEZE_TIMEOUT_MS);
	if (r == -ETIMEDOUT)
		return wr_err_set(err, ETIMEDOUT, "cgroup %s: freezer.state not %s after %d ms",
				  label, v, FREEZE_TIMEOUT_MS);
	if (r < 0)
		return wr_err_set(err, -r, "cgroup %s: read freezer.state: %s", label,
				  strerror(-r));
	return 0;
}

int wr_cg_v1_frozen(struct wr_cgroup *cg, wr_err *err)
{
	int fd = need_fd(cg, WR_CG_FREEZER, err);
	if (fd < 0)
		return fd;
	char buf[32];
	ssize_t n = wr_cg_read(fd, "freezer.state", buf, sizeof(buf));
	if (n < 0)
		return wr_err_set(err, (int)-n, "cgroup %s: read freezer.state: %s",
				  label_of(cg, WR_CG_FREEZER), strerror((int)-n));
	/* FREEZING: asked, not complete (a task was busy in the kernel) */
	return strncmp(buf, "THAWED", 6) == 0 ? 0 : 1;
}

/* ---- kill ------------------------------------------------------------- */

static int sigkill_pid(pid_t pid, void *ctx)
{
	int *n = ctx;
	if (kill(pid, SIGKILL) == 0)
		(*n)++;
	return 0;
}

/* Every task the freezer holds ("tasks": v1 moves single threads, so a
 * process may have only some threads here); kill() of any tid kills the
 * whole process. */
static int sigkill_dir(int dfd, void *ctx)
{
	int r = wr_cg_for_each_pid(dfd, "tasks", sigkill_pid, ctx);
	return r == -ENOENT || r == -ENODEV || r >= 0 ? 0 : r;
}

int wr_cg_v1_kill_listed(struct wr_cgroup *cg)
{
	int n = 0;
	for (int h = 0; h < cg->root->nhier; h++) {
		if (cg->fd[h] < 0)
			continue;
		int r = wr_cg_walk(cg->fd[h], sigkill_dir, &n);
		if (r < 0)
			return r;
	}
	return n;
}

struct countctx {
	const char *file; /* "cgroup.procs": processes; "tasks": threads */
	int total;
};

static int count_dir(int dfd, void *ctx)
{
	struct countctx *c = ctx;
	int r = wr_cg_for_each_pid(dfd, c->file, NULL, NULL);
	if (r == -ENOENT || r == -ENODEV)
		return 0;
	if (r < 0)
		return r;
	c->total += r;
	return 0;
}

/* Wait up to timeout_ms for the subtree of fd to list no task. */
static int wait_gone(int fd, unsigned timeout_ms)
{
	uint64_t deadline = wr_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	unsigned delay = 100;
	for (;;) {
		struct countctx c = {.file = "tasks"};
		int r = wr_cg_walk(fd, count_dir, &c);
		int n = c.total;
		if (r < 0)
			return r;
		if (n == 0)
			return 0;
		if (wr_now_ns() >= deadline)
			return -ETIMEDOUT;
		wr_cg_sleep_us(delay);
		if (delay < 10000)
			delay *= 2;
	}
}

/* Without cgroup.kill, a fork bomb could outrun signals sent one pid at a
 * time. Frozen, nothing forks: list, SIGKILL (pending until the thaw), thaw,
 * then let the killed tasks exit. Only if something is still listed after
 * that (a task the freezer could not catch in time) go round again; exiting
 * tasks never report FROZEN, so re-freezing at once would only wait. Without
 * a freezer hierarchy the same loop runs unfrozen, bounded by pids.max. */
int wr_cg_v1_kill(struct wr_cgroup *cg, wr_err *err)
{
	int fz = wr_cgroup_ctrl_fd(cg, WR_CG_FREEZER);
	int scan = fz >= 0 ? fz : wr_cgroup_ctrl_fd(cg, WR_CG_MEMORY);
	if (scan < 0)
		return wr_err_set(err, EOPNOTSUPP, "cgroup: no hierarchy to list processes in");
	const char *label = fz >= 0 ? label_of(cg, WR_CG_FREEZER) : label_of(cg, WR_CG_MEMORY);
	/* Freezing costs milliseconds (the kernel flips a static key when
	 * the first cgroup freezes and the last thaws): not for an empty
	 * cgroup, where nothing can fork either. */
	int r = wait_gone(scan, 0);
	if (r == 0)
		return 0;
	if (r != -ETIMEDOUT)
		return wr_err_set(err, -r, "cgroup %s: list tasks: %s", label, strerror(-r));
	uint64_t deadline = wr_now_ns() + KILL_TIMEOUT_MS * 1000000ull;
	for (;;) {
		if (fz >= 0) {
			r = wr_cg_try_write(fz, "freezer.state", "FROZEN");
			if (r < 0)
				return write_err(err, label, "freezer.state", "FROZEN", r);
			/* A task stuck in the kernel may keep it FREEZING: kill
			 * what is listed anyway. */
			wait_state(fz, "FROZEN", KILL_FREEZE_WAIT_MS);
		}
		int n = 0;
		r = wr_cg_walk(scan, sigkill_dir, &n);
		if (fz >= 0) {
			int t = wr_cg_try_write(fz, "freezer.state", "THAWED");
			if (t < 0 && r >= 0)
				return write_err(err, label, "freezer.state", "THAWED", t);
		}
		if (r < 0)
			return wr_err_set(err, -r, "cgroup %s: list tasks: %s", label,
					  strerror(-r));
		if (n == 0)
			return 0;
		r = wait_gone(scan, KILL_DRAIN_MS);
		if (r == 0)
			return 0;
		if (r != -ETIMEDOUT)
			return wr_err_set(err, -r, "cgroup %s: list tasks: %s", label,
					  strerror(-r));
		if (wr_now_ns() > deadline)
			return wr_err_set(err, ETIMEDOUT,
					  "cgroup %s: processes survive SIGKILL after %d ms", label,
					  KILL_TIMEOUT_MS);
	}
}

/* ---- counting and stats ----------------------------------------------- */

int wr_cg_v1_nprocs(struct wr_cgroup *cg, wr_err *err)
{
	int fd = need_fd(cg, WR_CG_MEMORY, err);
	if (fd < 0)
		return fd;
	struct countctx c = {.file = "cgroup.procs"};
	int r = wr_cg_walk_cg(cg, fd, count_dir, &c);
	if (r < 0)
		return wr_err_set(err, -r, "cgroup %s: read cgroup.procs: %s",
				  label_of(cg, WR_CG_MEMORY), strerror(-r));
	return c.total;
}

struct sumctx {
	const char *file;
	const char *key;
	uint64_t sum;
};

static int sum_dir(int dfd, void *ctx)
{
	struct sumctx *s = ctx;
	uint64_t v;
	int r = wr_cg_read_key(dfd, s->file, s->key, &v);
	if (r == 0 && v != UINT64_MAX)
		s->sum += v;
	return r == 0 || r == -ENOENT || r == -ENODEV ? 0 : r;
}

static int read_err(wr_err *err, const struct wr_cgroup *cg, enum wr_cg_ctrl c, const char *file,
		    int r)
{
	return wr_err_set(err, -r, "cgroup %s: read %s: %s", label_of(cg, c), file, strerror(-r));
}

/* A file a kernel does not have is no error. A function, not a macro: its
 * argument is a read, which a macro would repeat for every use. */
static inline int opt_file(int r)
{
	return r == -ENOENT || r == -ENODEV ? 0 : r;
}
#define OPT(r) opt_file(r)

int wr_cg_v1_stats(struct wr_cgroup *cg, struct wr_cgroup_stats *st, wr_err *err)
{
	int fd, r;
	if (cg->v2_fd >= 0) {
		/* the unified hierarchy keeps cpu time without a controller */
		uint64_t usec = 0;
		r = OPT(wr_cg_read_key(cg->v2_fd, "cpu.stat", "usage_usec", &usec));
		if (r < 0)
			return wr_err_set(err, -r, "cgroup v2: read cpu.stat: %s", strerror(-r));
		st->cpu_usage_ns = usec * 1000;
	} else if ((fd = wr_cgroup_ctrl_fd(cg, WR_CG_CPUACCT)) >= 0) {
		if ((r = OPT(wr_cg_read_u64(fd, "cpuacct.usage", &st->cpu_usage_ns))) < 0)
			return read_err(err, cg, WR_CG_CPUACCT, "cpuacct.usage", r);
	}
	if ((fd = wr_cgroup_ctrl_fd(cg, WR_CG_MEMORY)) >= 0) {
		if ((r = OPT(wr_cg_read_u64(fd, "memory.usage_in_bytes", &st->memory_current))) < 0)
			return read_err(err, cg, WR_CG_MEMORY, "memory.usage_in_bytes", r);
		if ((r = OPT(wr_cg_read_u64(fd, "memory.max_usage_in_bytes", &st->memory_peak))) <
		    0)
			return read_err(err, cg, WR_CG_MEMORY, "memory.max_usage_in_bytes", r);
		/* v1 counts an OOM kill only in the victim's own cgroup */
		struct sumctx s = {.file = "memory.oom_control", .key = "oom_kill"};
		if ((r = wr_cg_walk_cg(cg, fd, sum_dir, &s)) < 0)
			return read_err(err, cg, WR_CG_MEMORY, "memory.oom_control", r);
		st->oom_kills = s.sum;
	}
	if ((fd = wr_cgroup_ctrl_fd(cg, WR_CG_PIDS)) >= 0) {
		if ((r = OPT(wr_cg_read_u64(fd, "pids.current", &st->pids_current))) < 0)
			return read_err(err, cg, WR_CG_PIDS, "pids.current", r);
		/* and a refused fork only in the forking task's cgroup */
		struct sumctx s = {.file = "pids.events", .key = "max"};
		if ((r = wr_cg_walk_cg(cg, fd, sum_dir, &s)) < 0)
			return read_err(err, cg, WR_CG_PIDS, "pids.events", r);
		st->pids_max_hits = s.sum;
	}
	return 0;
}
