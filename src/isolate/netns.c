#include "isolate/netns.h"

#include <errno.h>
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
