#include "isolate/netns.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sched.h>
#include <arpa/inet.h>
#include <netinet/in.h>
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

/* ---- recycling a call's network namespace (function tier) ---------------- */

/* One number after `key` in a /proc/self/net/sockstat* line starting with
 * `line`; -1 when absent. */
static long sockstat_field(const char *buf, const char *line, const char *key)
{
	size_t ll = strlen(line);
	for (const char *p = buf; *p;) {
		const char *eol = strchr(p, '\n');
		if (strncmp(p, line, ll) == 0) {
			const char *k = strstr(p + ll, key);
			if (k == NULL || (eol && k > eol))
				return -1;
			return strtol(k + strlen(key), NULL, 10);
		}
		if (eol == NULL)
			break;
		p = eol + 1;
	}
	return -1;
}

static int read_small(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = 0;
	return 0;
}

int wr_netns_reusable(struct wr_cerr *e)
{
	/* Invariant: read before we open a socket here ourselves; "sockets:
	 * used" is this namespace's count of every socket of every family
	 * (TCP, UDP, raw, Unix bound or not, abstract or not, netlink, packet,
	 * an orphaned TCP socket still closing), "tw" its TIME_WAIT sockets and
	 * FRAG/FRAG6 its queued IP fragments: all three 0 leaves no socket and
	 * no datagram part for a later call to see. The kernel's own sockets
	 * of the namespace are not counted (they exist in a fresh one too). */
	char buf[1024];
	if (read_small("/proc/self/net/sockstat", buf, sizeof(buf)) < 0)
		return wr_cerr_sys(e, "read sockstat");
	long used = sockstat_field(buf, "sockets:", " used ");
	long tw = sockstat_field(buf, "TCP:", " tw ");
	long frag = sockstat_field(buf, "FRAG:", " inuse ");
	if (used != 0 || tw != 0 || frag != 0)
		return wr_cerr_set(e, EBUSY, "sockets left: used %ld, time-wait %ld, fragments %ld",
				   used, tw, frag);
	if (read_small("/proc/self/net/sockstat6", buf, sizeof(buf)) == 0 &&
	    sockstat_field(buf, "FRAG6:", " inuse ") != 0)
		return wr_cerr_set(e, EBUSY, "IPv6 fragments left");
	/* lo as a fresh namespace has it: the only link, up, 127.0.0.1/8 and
	 * (with IPv6) ::1/128, nothing else. From procfs and the ioctls of a
	 * UDP socket, which is freed at its close: a netlink socket would be
	 * counted above until an RCU grace period after its close (tens of
	 * ms here), failing the next slot's check for nothing. */
	if (read_small("/proc/self/net/dev", buf, sizeof(buf)) < 0)
		return wr_cerr_sys(e, "read net/dev");
	int lines = 0;
	for (const char *p = buf; (p = strchr(p, '\n')) != NULL; p++)
		lines++;
	/* two header lines, then one per link */
	if (lines != 3 || strstr(buf, " lo:") == NULL)
		return wr_cerr_set(e, EEXIST, "links other than lo");
	if (read_small("/proc/self/net/if_inet6", buf, sizeof(buf)) == 0 && buf[0] &&
	    strcmp(buf, "00000000000000000000000000000001 01 80 10 80       lo\n") != 0)
		return wr_cerr_set(e, EEXIST, "lo's IPv6 addresses changed");
	_cleanup_close_ int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return wr_cerr_sys(e, "loopback: socket");
	struct ifreq ifr[2];
	struct ifconf ifc = {.ifc_len = sizeof(ifr), .ifc_req = ifr};
	memset(ifr, 0, sizeof(ifr));
	if (ioctl(s, SIOCGIFCONF, &ifc) < 0)
		return wr_cerr_sys(e, "loopback: addresses");
	struct sockaddr_in *sin = (struct sockaddr_in *)&ifr[0].ifr_addr;
	if (ifc.ifc_len != (int)sizeof(ifr[0]) || strcmp(ifr[0].ifr_name, "lo") != 0 ||
	    sin->sin_family != AF_INET || sin->sin_addr.s_addr != htonl(INADDR_LOOPBACK))
		return wr_cerr_set(e, EEXIST, "lo's IPv4 addresses changed");
	if (ioctl(s, SIOCGIFNETMASK, &ifr[0]) < 0)
		return wr_cerr_sys(e, "loopback: netmask");
	sin = (struct sockaddr_in *)&ifr[0].ifr_netmask;
	if (sin->sin_addr.s_addr != htonl(0xff000000u))
		return wr_cerr_set(e, EEXIST, "lo's IPv4 address changed");
	if (ioctl(s, SIOCGIFFLAGS, &ifr[0]) < 0)
		return wr_cerr_sys(e, "loopback: get flags");
	if ((ifr[0].ifr_flags & (IFF_UP | IFF_LOOPBACK)) != (IFF_UP | IFF_LOOPBACK))
		return wr_cerr_set(e, EEXIST, "lo is down");
	return 0;
}
