/* rlimits: per-process bounds that complement the cgroup limits.
 * Child half: raw setrlimit calls only, no allocation. */
#include <errno.h>
#include <stddef.h>
#include <sys/resource.h>

#include "isolate/rlimit.h"

void wr_rlimits_default(struct wr_rlimits *r)
{
	r->nofile = 1024;
	r->core = 0;
	r->fsize = WR_RLIM_UNSET;
	r->cpu_secs = WR_RLIM_UNSET;
	r->stack = WR_RLIM_UNSET;
}

static int set_both(int res, const char *name, uint64_t v, struct wr_cerr *e)
{
	struct rlimit rl = {.rlim_cur = (rlim_t)v, .rlim_max = (rlim_t)v};
	if (setrlimit(res, &rl) < 0)
		return wr_cerr_sys(e, "rlimit: set %s to %llu", name, (unsigned long long)v);
	return 0;
}

int wr_rlimits_apply(const struct wr_rlimits *r, struct wr_cerr *e)
{
	if (r == NULL)
		return wr_cerr_set(e, EINVAL, "rlimit: no limits");
	/* soft = hard everywhere: the sandbox cannot raise its own soft limit
	 * later. Raising a hard limit above the current one needs
	 * CAP_SYS_RESOURCE in the initial user namespace; without it the
	 * kernel says EPERM and we report it rather than silently keep less. */
	int rc = 0;
	if (r->nofile != WR_RLIM_UNSET)
		rc = set_both(RLIMIT_NOFILE, "NOFILE", r->nofile, e);
	/* Core dumps are off unless asked for: UNSET means 0 here. (A piped
	 * core_pattern ignores RLIMIT_CORE; that is the dumper's business.) */
	if (rc == 0)
		rc = set_both(RLIMIT_CORE, "CORE", r->core == WR_RLIM_UNSET ? 0 : r->core, e);
	if (rc == 0 && r->fsize != WR_RLIM_UNSET)
		rc = set_both(RLIMIT_FSIZE, "FSIZE", r->fsize, e);
	if (rc == 0 && r->cpu_secs != WR_RLIM_UNSET)
		rc = set_both(RLIMIT_CPU, "CPU", r->cpu_secs, e);
	if (rc == 0 && r->stack != WR_RLIM_UNSET)
		rc = set_both(RLIMIT_STACK, "STACK", r->stack, e);
	/* Always: no real-time scheduling. The kernel lets a task without
	 * CAP_SYS_NICE (in the initial user ns) pick SCHED_FIFO/RR up to this
	 * limit, and a daemon started with a non-zero one must not pass it on. */
	if (rc == 0)
		rc = set_both(RLIMIT_RTPRIO, "RTPRIO", 0, e);
	return rc;
}
