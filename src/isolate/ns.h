/* Namespaces: the set a container sandbox gets, process creation into them
 * and joining them. */
#ifndef WARREN_ISOLATE_NS_H
#define WARREN_ISOLATE_NS_H

#include <sched.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

/* Created together by wr_ns_spawn for a sandbox's PID 1. The cgroup namespace
 * is unshared by the child itself once it has joined its cgroups, so that
 * its cgroup root is its own. */
#define WR_NS_SANDBOX                                                                              \
	(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET)

/* clone(CLONE_VM | CLONE_PIDFD | flags): fn(arg) runs in a child that
 * shares this process's memory (no page tables copied, nothing to tear
 * down at its exec) on the stack below stack_top, concurrently with the
 * caller. Returns the child's pid (*pidfd set). The caller keeps the memory
 * fn uses, stack included, alive until the child has exec'd or died, and
 * fn never allocates and never returns (it execs or _exits). */
pid_t wr_ns_spawn(uint64_t flags, int (*fn)(void *), void *arg, void *stack_top, int *pidfd,
		  wr_err *err);

/* Child half: join every sandbox namespace of the process behind pidfd in
 * one atomic setns (user, mount, pid for children, ipc, uts, net). */
int wr_ns_join(int pidfd, struct wr_cerr *e);

#endif
