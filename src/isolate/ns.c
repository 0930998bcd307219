#include "isolate/ns.h"

#include <errno.h>
#include <signal.h>
#include <string.h>

#include "common/compat.h"

pid_t wr_ns_clone(uint64_t flags, int cgroup_fd, int *pidfd, wr_err *err)
{
	struct wr_clone_args a;
	memset(&a, 0, sizeof(a));
	a.flags = flags | CLONE_PIDFD;
	a.pidfd = (uint64_t)(uintptr_t)pidfd;
	a.exit_signal = SIGCHLD;
	if (cgroup_fd >= 0) {
		a.flags |= CLONE_INTO_CGROUP;
		a.cgroup = (uint64_t)cgroup_fd;
	}
	long pid = wr_clone3(&a);
	if (pid < 0)
		return wr_err_sys(err, "clone3");
	return (pid_t)pid;
}

pid_t wr_ns_spawn(uint64_t flags, int (*fn)(void *), void *arg, void *stack_top, int *pidfd,
		  wr_err *err)
{
	/* glibc's clone stores the pidfd where a parent tid would go. */
	int pid = clone(fn, stack_top, (int)flags | CLONE_VM | CLONE_PIDFD | SIGCHLD, arg, pidfd);
	if (pid < 0)
		return wr_err_sys(err, "clone");
	return (pid_t)pid;
}

int wr_ns_join(int pidfd, struct wr_cerr *e)
{
	if (setns(pidfd, WR_NS_SANDBOX) < 0)
		return wr_cerr_sys(e, "join sandbox namespaces");
	return 0;
}
