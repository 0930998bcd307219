/* The audit netlink socket, made in the initial network namespace.
 *
 * The kernel multicasts its audit records (AUDIT_NLGRP_READLOG) only to
 * netlink sockets of the initial network namespace (kernel/audit.c,
 * audit_log_multicast: audit_get_sk(&init_net)). A warrend started inside
 * another network namespace (a test's "host" namespace, `ip netns exec`,
 * a container with its own network) would bind a socket that never
 * receives one: no seccomp and no Landlock event, silently. A socket keeps
 * the namespace it was made in, so the calling thread enters the initial
 * namespace just for socket() and returns at once (network namespaces are
 * per thread; the daemon's other threads are unaffected).
 *
 * Which namespace is the initial one:
 *   - audit.init_netns, when configured: a path to it (a bind mount made
 *     from the initial namespace, /proc/<pid>/ns/net of a process in it);
 *   - ours, when its inode is NET_NS_INIT_INO: since Linux 6.18 the initial
 *     namespaces have fixed inode numbers below the dynamic range
 *     (0xf0000000 and up), so no other namespace can have it;
 *   - /proc/1/ns/net (what an older kernel leaves as the only way; some
 *     hosts refuse it, e.g. a Landlock domain scoped below PID 1);
 *   - the nearest ancestor process whose namespace has NET_NS_INIT_INO
 *     (the shell or service manager that started warrend with nsenter).
 * None of these on a kernel with fixed inodes, where ours is not the
 * initial one: an error naming audit.init_netns, never a silent reader.
 * On an older kernel without /proc/1 the daemon cannot tell and keeps its
 * own namespace (as before). */
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "daemon/audit_internal.h"

#ifndef NS_GET_NSTYPE
#define NS_GET_NSTYPE _IO(0xb7, 0x3)
#endif
#define NET_NS_INIT_INO_ 0xEFFFFFF9U

/* Linux 6.18 and later give the initial network namespace NET_NS_INIT_INO. */
static bool fixed_init_ino(void)
{
	struct utsname u;
	unsigned maj = 0, min = 0;
	if (uname(&u) < 0 || sscanf(u.release, "%u.%u", &maj, &min) != 2)
		return false;
	return maj > 6 || (maj == 6 && min >= 18);
}

static pid_t ppid_of(pid_t pid)
{
	char path[48], line[128];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	_cleanup_fclose_ FILE *f = fopen(path, "re");
	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "PPid:", 5) == 0)
			return (pid_t)strtol(line + 5, NULL, 10);
	return -1;
}

/* An fd of the initial network namespace found without configuration, or
 * -1 (errno_out: why /proc/1/ns/net could not be opened). */
static int find_initial(int *errno_out)
{
	int fd = open("/proc/1/ns/net", O_RDONLY | O_CLOEXEC);
	if (fd >= 0)
		return fd;
	*errno_out = errno;
	pid_t pid = getppid();
	for (int depth = 0; pid > 1 && depth < 64; depth++) {
		char path[48];
		struct stat st;
		snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd >= 0 && fstat(fd, &st) == 0 && st.st_ino == NET_NS_INIT_INO_)
			return fd;
		if (fd >= 0)
			close(fd);
		pid = ppid_of(pid);
	}
	return -1;
}

/* socket() on this thread inside ns, then back to own. */
static int socket_in(int ns, int own, int protocol, wr_err *err)
{
	if (setns(ns, CLONE_NEWNET) < 0)
		return wr_err_sys(err, "enter the initial network namespace for the audit socket");
	int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, protocol);
	int saved = errno;
	/* Invariant: this thread is back in the daemon's namespace before it
	 * does anything else; it cannot work (nor report) from another. */
	if (setns(own, CLONE_NEWNET) < 0)
		abort();
	if (s < 0) {
		errno = saved;
		return wr_err_sys(err, "audit netlink socket (initial network namespace)");
	}
	return s;
}

int wra_audit_socket(const char *init_netns, wr_err *err)
{
	_cleanup_close_ int own = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	struct stat so, si;
	if (own < 0 || fstat(own, &so) < 0)
		return wr_err_sys(err, "audit: own network namespace");
	_cleanup_close_ int init = -1;
	if (init_netns && *init_netns) {
		init = open(init_netns, O_RDONLY | O_CLOEXEC);
		if (init < 0)
			return wr_err_sys(err, "audit.init_netns: open %s", init_netns);
		if (ioctl(init, NS_GET_NSTYPE) != CLONE_NEWNET)
			return wr_err_field(err, "audit.init_netns",
					    "audit.init_netns: %s is not a network namespace",
					    init_netns);
	} else if (so.st_ino != NET_NS_INIT_INO_) {
		int why = 0;
		init = find_initial(&why);
		if (init < 0 && fixed_init_ino())
			return wr_err_set(
			    err, EXDEV,
			    "warrend runs in a network namespace other than the initial one "
			    "(net:[%lu]), where the kernel sends no audit records (no seccomp or "
			    "Landlock events), and cannot open the initial one (/proc/1/ns/net: "
			    "%s; "
			    "no ancestor process in it): set audit.init_netns to its path",
			    (unsigned long)so.st_ino, strerror(why));
	}
	if (init >= 0 && fstat(init, &si) == 0 &&
	    (si.st_ino != so.st_ino || si.st_dev != so.st_dev))
		return socket_in(init, own, NETLINK_AUDIT, err);
	int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_AUDIT);
	if (s < 0)
		return wr_err_sys(err, "audit netlink socket");
	return s;
}
