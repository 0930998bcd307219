#include "isolate/netns.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sched.h>
#include <net/if.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/cleanup.h"

int wr_netns_loopback_up(struct wr_cerr *e)
{
	_cleanup_close_ int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return wr_cerr_sys(e, "loopback: socket");
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	strcpy(ifr.ifr_name, "lo");
	if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
		return wr_cerr_sys(e, "loopback: get flags");
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
		return wr_cerr_sys(e, "loopback: up");
	return 0;
}

int wr_netns_new(struct wr_cerr *e)
{
	if (unshare(CLONE_NEWNET) < 0)
		return wr_cerr_sys(e, "network namespace");
	return wr_netns_loopback_up(e);
}

int wr_netns_allow_ping(struct wr_cerr *e)
{
	/* This thread's network namespace decides which sysctl this is; the
	 * gids are those of its user namespace (mapped by now: the caller's
	 * invariant), one id-map slot's worth. */
	static const char range[] = "0 65535";
	int fd = open("/proc/sys/net/ipv4/ping_group_range", O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : wr_cerr_sys(e, "open ping_group_range");
	ssize_t w = write(fd, range, sizeof(range) - 1);
	int saved = errno;
	close(fd);
	/* EINVAL: a user namespace mapping fewer ids; the kernel's default
	 * (no ping sockets, refused unrecorded) stays */
	if (w != (ssize_t)sizeof(range) - 1 && saved != EINVAL) {
		errno = saved;
		return wr_cerr_sys(e, "write ping_group_range");
	}
	return 0;
}

int wr_netns_write_etc(const char *path, const char *data, struct wr_cerr *e)
{
	if (mkdir("/etc", 0755) < 0 && errno != EEXIST)
		return wr_cerr_sys(e, "mkdir /etc");
	if (unlink(path) < 0 && errno != ENOENT)
		return wr_cerr_sys(e, "replace %s", path);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0)
		return wr_cerr_sys(e, "create %s", path);
	size_t n = strlen(data);
	ssize_t w = write(fd, data, n);
	close(fd);
	if (w != (ssize_t)n)
		return wr_cerr_sys(e, "write %s", path);
	return 0;
}

int wr_netns_enter(int fd, int *saved, wr_err *err)
{
	*saved = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (*saved < 0)
		return wr_err_sys(err, "open our network namespace");
	if (setns(fd, CLONE_NEWNET) < 0) {
		int r = wr_err_sys(err, "enter the sandbox's network namespace");
		close(*saved);
		*saved = -1;
		return r;
	}
	return 0;
}

void wr_netns_leave(int *saved)
{
	if (*saved < 0)
		return;
	if (setns(*saved, CLONE_NEWNET) < 0)
		abort();
	close(*saved);
	*saved = -1;
}
