/* cgroups: the lean reads and writes of a live cgroup (cgroup.h): what CPU
 * harvesting needs (its CPU time alone, one file, read every sampling tick
 * for every sandbox, and its CPU share: weight and SCHED_IDLE-like
 * treatment through cpu.idle where the kernel has the file), and the
 * usage a function call reports (wr_cgroup_stats_call: CPU time and peak
 * memory, the OOM count only when asked; wr_cgroup_leaf_recycle readies a
 * call's leaf for the next call), and the counters a command's
 * leaf keeps for itself alone, read before it is removed. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "isolate/cgroup_internal.h"

int wr_cgroup_cpu_ns(struct wr_cgroup *cg, uint64_t *ns, wr_err *err)
{
	uint64_t v = 0;
	int r;
	if (cg->v2_fd >= 0) {
		/* v2, and hybrid: the unified hierarchy's core cpu.stat */
		r = wr_cg_read_key(cg->v2_fd, "cpu.stat", "usage_usec", &v);
		v *= 1000;
	} else {
		int fd = wr_cgroup_ctrl_fd(cg, WR_CG_CPUACCT);
		r = fd < 0 ? -EOPNOTSUPP : wr_cg_read_u64(fd, "cpuacct.usage", &v);
	}
	if (r < 0)
		return wr_err_set(err, -r, "cgroup %s: read its CPU time: %s", cg->rel,
				  strerror(-r));
	*ns = v > cg->base_cpu_ns ? v - cg->base_cpu_ns : 0;
	return 0;
}

static int opt_read(int r)
{
	return r == -ENOENT || r == -ENODEV ? 0 : r;
}

/* A leaf's memory directory: the v1 memory hierarchy (hybrid too), else
 * v2 with memory delegated; -1 without a memory controller. */
static int leaf_mem_fd(const struct wr_cgroup *cg)
{
	int mfd = wr_cgroup_ctrl_fd(cg, WR_CG_MEMORY);
	if (mfd < 0 && cg->root->mode == WR_CG_V2 && (cg->root->v2_ctrls & WR_CG2_MEMORY))
		mfd = cg->v2_fd;
	return mfd;
}

/* A leaf's own OOM kills: v1 counts one in the victim's own cgroup only,
 * v2's memory.events.local likewise (memory.events where a kernel has no
 * .local); a leaf has no other. *file names what was read. */
static int leaf_oom_kills(int mfd, bool v2, uint64_t *out, const char **file)
{
	*file = v2 ? "memory.events.local" : "memory.oom_control";
	int r = wr_cg_read_key(mfd, *file, "oom_kill", out);
	if (r == -ENOENT && v2) {
		*file = "memory.events";
		r = wr_cg_read_key(mfd, *file, "oom_kill", out);
	}
	return opt_read(r);
}

int wr_cgroup_stats_call(struct wr_cgroup *cg, bool oom, struct wr_cgroup_stats *st, wr_err *err)
{
	if (!cg->leaf)
		return wr_cgroup_stats(cg, st, err);
	memset(st, 0, sizeof(*st));
	bool v2 = cg->root->mode == WR_CG_V2;
	int r = 0;
	const char *file = "cpu.stat";
	if (cg->v2_fd >= 0) {
		uint64_t usec = 0;
		r = opt_read(wr_cg_read_key(cg->v2_fd, file, "usage_usec", &usec));
		st->cpu_usage_ns = usec * 1000;
	} else {
		int fd = wr_cgroup_ctrl_fd(cg, WR_CG_CPUACCT);
		file = "cpuacct.usage";
		if (fd >= 0)
			r = opt_read(wr_cg_read_u64(fd, file, &st->cpu_usage_ns));
	}
	int mfd = leaf_mem_fd(cg);
	if (r == 0 && cg->peak_fd >= 0) {
		/* recycled on v2: the peak since the reset through this file */
		char buf[32];
		ssize_t n = pread(cg->peak_fd, buf, sizeof(buf) - 1, 0);
		file = "memory.peak";
		if (n < 0)
			r = -errno;
		else {
			buf[n] = 0;
			st->memory_peak = strtoull(buf, NULL, 10);
		}
	} else if (r == 0 && mfd >= 0) {
		file = v2 ? "memory.peak" : "memory.max_usage_in_bytes";
		r = opt_read(wr_cg_read_u64(mfd, file, &st->memory_peak));
	}
	if (r == 0 && mfd >= 0 && oom)
		r = leaf_oom_kills(mfd, v2, &st->oom_kills, &file);
	if (r < 0)
		return wr_err_set(err, -r, "cgroup %s: read %s: %s", cg->rel, file, strerror(-r));
	st->cpu_usage_ns =
	    st->cpu_usage_ns > cg->base_cpu_ns ? st->cpu_usage_ns - cg->base_cpu_ns : 0;
	st->oom_kills = st->oom_kills > cg->base_oom_kills ? st->oom_kills - cg->base_oom_kills : 0;
	return 0;
}

int wr_cgroup_leaf_recycle(struct wr_cgroup *cg, uint64_t max_left, wr_err *err)
{
	if (!cg->leaf)
		return wr_err_set(err, EINVAL, "cgroup %s: only a leaf is recycled", cg->rel);
	int n = wr_cgroup_nprocs(cg, err);
	if (n != 0)
		return n < 0 ? n : 0;
	/* Pure v1 kills through the freezer (wr_cgroup_kill): a thaw that
	 * failed there would freeze the next call for good. */
	if (cg->v2_fd < 0 && wr_cgroup_ctrl_fd(cg, WR_CG_FREEZER) >= 0 &&
	    wr_cgroup_frozen(cg, NULL) != 0)
		return 0;
	bool v2 = cg->root->mode == WR_CG_V2;
	int mfd = leaf_mem_fd(cg);
	int r = 0;
	const char *file = "";
	if (mfd >= 0) {
		/* What the next call could not get back: anonymous memory and
		 * tmpfs pages (no swap: not reclaimable). Not memory.current or
		 * usage_in_bytes, which also hold page cache (reclaimed under
		 * the next call's limit) and the per-CPU charge caches (up to
		 * 256 KiB per CPU, drained when a limit needs them). */
		char buf[8192];
		uint64_t anon = 0, shmem = 0;
		file = "memory.stat";
		ssize_t len = wr_cg_read(mfd, file, buf, sizeof(buf));
		if (len < 0) {
			r = (int)len;
			goto fail;
		}
		if (wr_cg_key_u64(buf, v2 ? "anon" : "rss", &anon) < 0 ||
		    wr_cg_key_u64(buf, "shmem", &shmem) < 0) {
			r = -EPROTO;
			goto fail;
		}
		if (anon + shmem > max_left)
			return 0;
		if (!v2) {
			/* v1: a write resets the watermark to the usage now */
			file = "memory.max_usage_in_bytes";
			if ((r = wr_cg_try_write(mfd, file, "0")) < 0)
				goto fail;
		} else {
			/* v2 (6.12+): a write resets the peak seen through the
			 * same open file, which the leaf keeps; older kernels'
			 * file is read-only: not recycled. */
			int fd = cg->peak_fd >= 0 ? cg->peak_fd
						  : openat(mfd, "memory.peak", O_RDWR | O_CLOEXEC);
			if (fd < 0)
				return 0;
			cg->peak_fd = fd;
			if (write(fd, "reset", 5) != 5) {
				wr_closep(&cg->peak_fd);
				return 0;
			}
		}
	}
	/* The bases last: the old ones are still subtracted until here. A
	 * v1 host without cpuacct has no CPU time at all: base 0. */
	uint64_t cpu = 0;
	cg->base_cpu_ns = 0;
	bool have_cpu = cg->v2_fd >= 0 || wr_cgroup_ctrl_fd(cg, WR_CG_CPUACCT) >= 0;
	if (have_cpu && wr_cgroup_cpu_ns(cg, &cpu, err) < 0)
		return -1;
	cg->base_cpu_ns = cpu;
	uint64_t oom = 0;
	if (mfd >= 0 && (r = leaf_oom_kills(mfd, v2, &oom, &file)) < 0)
		goto fail;
	cg->base_oom_kills = oom;
	return 1;
fail:
	return wr_err_set(err, -r, "cgroup %s: recycle: %s: %s", cg->rel, file, strerror(-r));
}

int wr_cgroup_cpu_share(struct wr_cgroup *cg, uint64_t weight, bool idle, wr_err *err)
{
	bool v2 = cg->root->mode == WR_CG_V2;
	int fd = v2 ? cg->v2_fd : wr_cgroup_ctrl_fd(cg, WR_CG_CPU);
	if (fd < 0 || (v2 && !(cg->root->v2_ctrls & WR_CG2_CPU)))
		return wr_err_set(err, EOPNOTSUPP, "cgroup %s: no cpu controller", cg->rel);
	if (weight > 10000)
		weight = 10000;
	char v[32];
	const char *file = v2 ? "cpu.weight" : "cpu.shares";
	if (v2)
		snprintf(v, sizeof(v), "%llu", (unsigned long long)(weight ? weight : 1));
	else if (weight == 0)
		snprintf(v, sizeof(v), "2"); /* the lowest v1 takes */
	else {
		/* v2 weight 100 is v1 shares 1024 */
		uint64_t shares = weight * 1024 / 100;
		snprintf(v, sizeof(v), "%llu", (unsigned long long)(shares < 2 ? 2 : shares));
	}
	/* The kernel refuses a weight (EINVAL) while the group is idle, so
	 * idle goes off before the weight is written and on after it. */
	int r;
	if (!idle && (r = wr_cg_try_write(fd, "cpu.idle", "0")) < 0 && r != -ENOENT)
		return wr_err_set(err, -r, "cgroup %s: write cpu.idle=0: %s", cg->rel,
				  strerror(-r));
	r = wr_cg_try_write(fd, file, v);
	/* already idle (asked again): its weight is the idle one anyway */
	if (r < 0 && !(idle && r == -EINVAL))
		return wr_err_set(err, -r, "cgroup %s: write %s=%s: %s", cg->rel, file, v,
				  strerror(-r));
	if (!idle)
		return 0;
	r = wr_cg_try_write(fd, "cpu.idle", "1");
	if (r == -ENOENT)
		return 0; /* a kernel before 5.15: the lowest weight alone */
	if (r < 0)
		return wr_err_set(err, -r, "cgroup %s: write cpu.idle=1: %s", cg->rel,
				  strerror(-r));
	return 1;
}

int wr_cg_leaf_counts(struct wr_cgroup *leaf, struct wr_cgroup_stats *c, uint64_t *id)
{
	memset(c, 0, sizeof(*c));
	bool v2 = leaf->root->mode == WR_CG_V2;
	/* The memory counters live in the v1 memory hierarchy (hybrid too),
	 * else in v2; the cgroup id is that directory's. */
	int mfd = v2 ? leaf->v2_fd : wr_cgroup_ctrl_fd(leaf, WR_CG_MEMORY);
	struct stat sb;
	if (mfd < 0 || fstat(mfd, &sb) < 0)
		return mfd < 0 ? -ENOENT : -errno;
	*id = (uint64_t)sb.st_ino;
	int r = 0;
	if (!v2 || (leaf->root->v2_ctrls & WR_CG2_MEMORY)) {
		/* The files wr_cgroup_stats sums over a subtree. A v2 kernel
		 * without memory.events.local (before 5.2, which cannot run
		 * warren: no CLONE_INTO_CGROUP) would count upwards: 0 here. */
		r = wr_cg_read_key(mfd, v2 ? "memory.events.local" : "memory.oom_control",
				   "oom_kill", &c->oom_kills);
		if (r < 0 && r != -ENOENT && r != -ENODEV)
			return r;
	}
	/* pids.events where the leaf has pids of its own (v2; a v1 command
	 * leaf joins its parent's pids cgroup, which counts its forks) */
	int pfd = v2 ? ((leaf->root->v2_ctrls & WR_CG2_PIDS) ? leaf->v2_fd : -1)
		     : wr_cgroup_ctrl_fd(leaf, WR_CG_PIDS);
	if (pfd >= 0) {
		r = wr_cg_read_key(pfd, "pids.events", "max", &c->pids_max_hits);
		if (r < 0 && r != -ENOENT && r != -ENODEV)
			return r;
		if (c->pids_max_hits == UINT64_MAX)
			c->pids_max_hits = 0;
	}
	return 0;
}
