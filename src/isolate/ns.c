#include "isolate/ns.h"

#include <errno.h>
#include <signal.h>
#include <string.h>

#include "common/compat.h"

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
