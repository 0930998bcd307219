/* cgroups, v2 backend: controller delegation, limits and stats of the
 * unified hierarchy, plus the core interface files (cgroup.kill,
 * cgroup.freeze, cgroup.events, cgroup.procs) that a hybrid root also uses
 * through its controller-less unified hierarchy. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "isolate/cgroup_internal.h"

#define FREEZE_TIMEOUT_MS 5000
#define KILL_TIMEOUT_MS 2000

static const struct {
	unsigned bit;
	const char *name;
} v2_ctrls[] = {
    {WR_CG2_MEMORY, "memory"},
    {WR_CG2_PIDS, "pids"},
    {WR_CG2_CPU, "cpu"},
    {WR_CG2_IO, "io"},
};

static unsigned parse_ctrls(const char *buf)
{
	unsigned mask = 0;
	for (const char *p = buf; *p;) {
		size_t n = strcspn(p, " \n");
		for (size_t i = 0; i < WR_ARRAY_SIZE(v2_ctrls); i++)
			if (strlen(v2_ctrls[i].name) == n && memcmp(p, v2_ctrls[i].name, n) == 0)
				mask |= v2_ctrls[i].bit;
		p += n;
		p += strspn(p, " \n");
	}
	return mask;
}

static void format_ctrls(unsigned mask, char *out, size_t size)
{
	size_t len = 0;
	out[0] = 0;
	for (size_t i = 0; i < WR_ARRAY_SIZE(v2_ctrls); i++)
		if (mask & v2_ctrls[i].bit)
			len += (size_t)snprintf(out + len, size - len, "%s+%s", len ? " " : "",
						v2_ctrls[i].name);
}

int wr_cg_v2_delegate(int dfd, const char *path, unsigned want, unsigned *enabled, wr_err *err)
{
	char buf[512];
	ssize_t n = wr_cg_read(dfd, "cgroup.controllers", buf, sizeof(buf));
	if (n < 0)
		return wr_err_set(err, (int)-n, "cgroup v2: read %s/cgroup.controllers: %s", path,
				  strerror((int)-n));
	unsigned avail = parse_ctrls(buf);
	n = wr_cg_read(dfd, "cgroup.subtree_control", buf, sizeof(buf));
	if (n < 0)
		return wr_err_set(err, (int)-n, "cgroup v2: read %s/cgroup.subtree_control: %s",
				  path, strerror((int)-n));
	unsigned cur = parse_ctrls(buf);
	unsigned need = want & avail & ~cur;
	if (need) {
		char ctl[64];
		format_ctrls(need, ctl, sizeof(ctl));
		int r = wr_cg_try_write(dfd, "cgroup.subtree_control", ctl);
		if (r == -EBUSY && wr_cg_for_each_pid(dfd, "cgroup.procs", NULL, NULL) > 0)
			return wr_err_set(
			    err, EBUSY,
			    "cgroup v2: write %s/cgroup.subtree_control=%s: %s: the cgroup "
			    "holds processes (this one among them) and cgroup v2 lets a "
			    "cgroup other than the root hand controllers to its children "
			    "only while it holds none. warren does not move its caller: run "
			    "warrend in a delegated cgroup of its own with the daemon in a "
			    "leaf of it (systemd: Delegate=yes and DelegateSubgroup=daemon) "
			    "and use the cgroup base \"../warren\", which puts the sandboxes "
			    "beside that leaf",
			    path, ctl, strerror(EBUSY));
		if (r < 0)
			return wr_err_set(err, -r,
					  "cgroup v2: write %s/cgroup.subtree_control=%s: %s", path,
					  ctl, strerror(-r));
	}
	*enabled = (cur | need) & want;
	return 0;
}

static int need_ctrl(const struct wr_cgroup *cg, unsigned bit, const char *name, wr_err *err)
{
	if (cg->root->v2_ctrls & bit)
		return 0;
	return wr_err_set(err, EOPNOTSUPP,
			  "cgroup v2: the %s controller is not enabled in %s (not delegated)", name,
			  cg->root->v2_path);
}

int wr_cg_v2_set_limits(struct wr_cgroup *cg, const struct wr_cgroup_limits *in, wr_err *err)
{
	int fd = cg->v2_fd;
	struct wr_cgroup_limits l = *in;
	const struct wr_cgroup_limits *lim = &l;
	unsigned have = cg->root->v2_ctrls;
	if (cg->root->v2_emulated) { /* tests: see wr_cgroup_root */
		if (!(have & WR_CG2_MEMORY))
			l.memory_bytes = WR_CG_UNSET;
		if (!(have & WR_CG2_PIDS))
			l.pids = WR_CG_UNSET;
		if (!(have & WR_CG2_CPU))
			l.cpu_weight = l.cpu_quota_us = l.cpu_period_us = WR_CG_UNSET;
	}
	char v[64];
	if (lim->memory_bytes != WR_CG_UNSET) {
		if (need_ctrl(cg, WR_CG2_MEMORY, "memory", err) < 0)
			return -EOPNOTSUPP;
		snprintf(v, sizeof(v), "%llu", (unsigned long long)lim->memory_bytes);
		int rw = wr_cg_write(fd, "v2", "memory.max", v, err);
		if (rw < 0)
			return rw;
		/* No swap escape. Without swap accounting there is no file,
		 * and no swap charged to the cgroup either. */
		int r = wr_cg_try_write(fd, "memory.swap.max", "0");
		if (r < 0 && r != -ENOENT)
			return wr_err_set(err, -r, "cgroup v2: write memory.swap.max=0: %s",
					  strerror(-r));
	}
	if (lim->pids != WR_CG_UNSET) {
		if (need_ctrl(cg, WR_CG2_PIDS, "pids", err) < 0)
			return -EOPNOTSUPP;
		snprintf(v, sizeof(v), "%llu", (unsigned long long)lim->pids);
		int rw = wr_cg_write(fd, "v2", "pids.max", v, err);
		if (rw < 0)
			return rw;
	}
	if (lim->cpu_weight != WR_CG_UNSET) {
		if (need_ctrl(cg, WR_CG2_CPU, "cpu", err) < 0)
			return -EOPNOTSUPP;
		snprintf(v, sizeof(v), "%llu", (unsigned long long)lim->cpu_weight);
		int rw = wr_cg_write(fd, "v2", "cpu.weight", v, err);
		if (rw < 0)
			return rw;
	}
	if (lim->cpu_quota_us != WR_CG_UNSET || lim->cpu_period_us != WR_CG_UNSET) {
		if (need_ctrl(cg, WR_CG2_CPU, "cpu", err) < 0)
			return -EOPNOTSUPP;
		unsigned long long period =
		    lim->cpu_period_us != WR_CG_UNSET ? lim->cpu_period_us : 100000;
		if (lim->cpu_quota_us != WR_CG_UNSET)
			snprintf(v, sizeof(v), "%llu %llu", (unsigned long long)lim->cpu_quota_us,
				 period);
		else
			snprintf(v, sizeof(v), "max %llu", period);
		int rw = wr_cg_write(fd, "v2", "cpu.max", v, err);
		if (rw < 0)
			return rw;
	}
	if (lim->io_weight != WR_CG_UNSET && (cg->root->v2_ctrls & WR_CG2_IO)) {
		/* Best effort: io.weight needs a weight-aware IO scheduler or
		 * io.cost; a sandbox is never refused for io. */
		snprintf(v, sizeof(v), "default %llu", (unsigned long long)lim->io_weight);
		wr_cg_try_write(fd, "io.weight", v);
	}
	return 0;
}

int wr_cg_v2_wait_event(int dfd, const char *key, uint64_t want, unsigned timeout_ms)
{
	_cleanup_close_ int fd = openat(dfd, "cgroup.events", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	uint64_t deadline = wr_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	uint64_t step_ns = 50000; /* growing: 50 us .. 10 ms */
	for (;;) {
		char buf[256];
		ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
		if (n < 0 && errno != EINTR)
			return -errno;
		if (n >= 0) {
			buf[n] = 0;
			uint64_t v;
			int r = wr_cg_key_u64(buf, key, &v);
			if (r < 0)
				return r;
			if (v == want)
				return 0;
		}
		uint64_t now = wr_now_ns();
		if (now >= deadline)
			return -ETIMEDOUT;
		/* kernfs signals a change of cgroup.events with POLLPRI, but at
		 * most once per 10 ms per cgroup (CGROUP_FILE_NOTIFY_MIN_INTV): a
		 * freeze right after a thaw would wait that long for its
		 * notification. So the wait is also capped, short at first and
		 * growing, which also covers a change between read and poll. */
		uint64_t left = deadline - now, wait = left < step_ns ? left : step_ns;
		struct timespec ts = {(time_t)(wait / 1000000000ull), (long)(wait % 1000000000ull)};
		struct pollfd pfd = {.fd = fd, .events = POLLPRI};
		if (ppoll(&pfd, 1, &ts, NULL) < 0 && errno != EINTR)
			return -errno;
		if (step_ns < 10000000)
			step_ns *= 2;
	}
}

struct killctx {
	int n;
};

static int sigkill_pid(pid_t pid, void *ctx)
{
	struct killctx *k = ctx;
	if (kill(pid, SIGKILL) == 0 || errno == ESRCH)
		k->n++;
	return 0;
}

static int sigkill_dir(int dfd, void *ctx)
{
	int r = wr_cg_for_each_pid(dfd, "cgroup.procs", sigkill_pid, ctx);
	return r == -ENOENT || r == -ENODEV ? 0 : r < 0 ? r : 0;
}

/* Kernels before 5.14 have no cgroup.kill: freeze, SIGKILL every process,
 * thaw, let them exit; again only if something is still there. */
static int v2_kill_frozen(struct wr_cgroup *cg, wr_err *err)
{
	uint64_t deadline = wr_now_ns() + KILL_TIMEOUT_MS * 1000000ull;
	for (;;) {
		int r = wr_cg_try_write(cg->v2_fd, "cgroup.freeze", "1");
		if (r < 0)
			return wr_err_set(err, -r, "cgroup v2: write cgroup.freeze=1: %s",
					  strerror(-r));
		wr_cg_v2_wait_event(cg->v2_fd, "frozen", 1, 500);
		struct killctx k = {0};
		r = wr_cg_walk(cg->v2_fd, sigkill_dir, &k);
		int t = wr_cg_try_write(cg->v2_fd, "cgroup.freeze", "0");
		if (r < 0)
			return wr_err_set(err, -r, "cgroup v2: list processes: %s", strerror(-r));
		if (t < 0)
			return wr_err_set(err, -t, "cgroup v2: write cgroup.freeze=0: %s",
					  strerror(-t));
		if (k.n == 0 || wr_cg_v2_wait_event(cg->v2_fd, "populated", 0, 250) == 0)
			return 0;
		if (wr_now_ns() > deadline)
			return wr_err_set(err, ETIMEDOUT,
					  "cgroup v2: processes survive SIGKILL after %d ms",
					  KILL_TIMEOUT_MS);
	}
}

int wr_cg_v2_kill(struct wr_cgroup *cg, wr_err *err)
{
	int r = wr_cg_try_write(cg->v2_fd, "cgroup.kill", "1");
	if (r == -ENOENT && faccessat(cg->v2_fd, "cgroup.freeze", F_OK, 0) == 0)
		return v2_kill_frozen(cg, err); /* before 5.14 */
	if (r < 0)
		return wr_err_set(err, -r, "cgroup v2: write cgroup.kill=1: %s", strerror(-r));
	return 0;
}

int wr_cg_v2_freeze(struct wr_cgroup *cg, bool frozen, wr_err *err)
{
	const char *v = frozen ? "1" : "0";
	int rw = wr_cg_write(cg->v2_fd, "v2", "cgroup.freeze", v, err);
	if (rw < 0)
		return rw;
	int r = wr_cg_v2_wait_event(cg->v2_fd, "frozen", frozen ? 1 : 0, FREEZE_TIMEOUT_MS);
	if (r == -ETIMEDOUT)
		return wr_err_set(err, ETIMEDOUT,
				  "cgroup v2: cgroup.events did not show frozen %d within %d ms",
				  frozen ? 1 : 0, FREEZE_TIMEOUT_MS);
	if (r < 0)
		return wr_err_set(err, -r, "cgroup v2: read cgroup.events: %s", strerror(-r));
	return 0;
}

int wr_cg_v2_frozen(struct wr_cgroup *cg, wr_err *err)
{
	/* cgroup.freeze is what was asked; cgroup.events "frozen" only says
	 * whether it is complete */
	uint64_t v;
	int r = wr_cg_read_u64(cg->v2_fd, "cgroup.freeze", &v);
	if (r < 0)
		return wr_err_set(err, -r, "cgroup v2: read cgroup.freeze: %s", strerror(-r));
	return v != 0;
}

static int count_dir(int dfd, void *ctx)
{
	int *total = ctx;
	int r = wr_cg_for_each_pid(dfd, "cgroup.procs", NULL, NULL);
	if (r == -ENOENT || r == -ENODEV)
		return 0;
	if (r < 0)
		return r;
	*total += r;
	return 0;
}

int wr_cg_v2_nprocs(struct wr_cgroup *cg, wr_err *err)
{
	uint64_t populated;
	int r = wr_cg_read_key(cg->v2_fd, "cgroup.events", "populated", &populated);
	if (r < 0)
		return wr_err_set(err, -r, "cgroup v2: read cgroup.events: %s", strerror(-r));
	if (populated == 0)
		return 0;
	int total = 0;
	r = wr_cg_walk_cg(cg, cg->v2_fd, count_dir, &total);
	if (r < 0)
		return wr_err_set(err, -r, "cgroup v2: read cgroup.procs: %s", strerror(-r));
	return total;
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

/* Sum "key N" of file over dfd's subtree; 0 when there is no such file. */
static int sum_subtree(const struct wr_cgroup *cg, int dfd, const char *file, const char *key,
		       uint64_t *out)
{
	struct sumctx s = {.file = file, .key = key};
	int r = wr_cg_walk_cg(cg, dfd, sum_dir, &s);
	*out = s.sum;
	return r;
}

static bool has_file(int dfd, const char *file)
{
	return faccessat(dfd, file, F_OK, 0) == 0;
}

static int stat_err(wr_err *err, const char *file, int r)
{
	return wr_err_set(err, -r, "cgroup v2: read %s: %s", file, strerror(-r));
}

/* A missing file means the controller is not enabled here: the stat is 0. */
#define READ_OPT(call, file)                                                                       \
	do {                                                                                       \
		int r_ = (call);                                                                   \
		if (r_ < 0 && r_ != -ENOENT && r_ != -ENODEV)                                      \
			return stat_err(err, (file), r_);                                          \
	} while (0)

int wr_cg_v2_stats(struct wr_cgroup *cg, struct wr_cgroup_stats *st, wr_err *err)
{
	int fd = cg->v2_fd;
	uint64_t usec = 0;
	READ_OPT(wr_cg_read_key(fd, "cpu.stat", "usage_usec", &usec), "cpu.stat");
	st->cpu_usage_ns = usec * 1000;
	READ_OPT(wr_cg_read_u64(fd, "memory.current", &st->memory_current), "memory.current");
	READ_OPT(wr_cg_read_u64(fd, "memory.peak", &st->memory_peak), "memory.peak");
	/* memory.events.local counts the OOM victims of one cgroup whatever
	 * the mount options make memory.events show: its sum over the subtree
	 * is the total. Kernels without it count memory.events upwards. */
	if (has_file(fd, "memory.events.local"))
		READ_OPT(sum_subtree(cg, fd, "memory.events.local", "oom_kill", &st->oom_kills),
			 "memory.events.local");
	else
		READ_OPT(wr_cg_read_key(fd, "memory.events", "oom_kill", &st->oom_kills),
			 "memory.events");
	READ_OPT(wr_cg_read_u64(fd, "pids.current", &st->pids_current), "pids.current");
	/* pids.events "max" counts a refused fork in the forking cgroup
	 * (before 6.12, or with pids_localevents) or, since, in the cgroup
	 * whose pids.max refused it and upwards. Only the sandbox cgroup has
	 * a pids.max, so the sum over the subtree counts each once either way. */
	READ_OPT(sum_subtree(cg, fd, "pids.events", "max", &st->pids_max_hits), "pids.events");
	return 0;
}
