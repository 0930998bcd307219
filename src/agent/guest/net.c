/* The guest's network: loopback always; eth0 only when the host gave the
 * VM a NIC and said how to address it on the kernel command line
 * (warren.ip=A/PLEN warren.gw=G warren.dns=D, from src/tiers/qemu_net.c:
 * QEMU's user-mode network, private to the VM). Static, over rtnetlink (no
 * DHCP client in the initramfs, and nothing to ask: slirp's addresses are
 * fixed). Runs after the switch to the sandbox's root, so /etc/resolv.conf
 * and /etc/hosts are written into its writable layer. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/guest/agent.h"
#include "isolate/rtnl.h"

/* Replaces whatever the image had at path (a file or a symlink, e.g. into
 * a resolver's run directory) with content. */
static int put_file(const char *path, const char *content)
{
	char tmp[64];
	snprintf(tmp, sizeof(tmp), "%s.warren-tmp", path);
	unlink(tmp);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	size_t len = strlen(content);
	ssize_t w = write(fd, content, len);
	close(fd);
	if (w != (ssize_t)len || rename(tmp, path) < 0) {
		int e = w != (ssize_t)len ? EIO : errno;
		unlink(tmp);
		return -e;
	}
	return 0;
}

static int wait_link(struct wr_rtnl *nl, const char *name, int ms)
{
	for (int i = 0; i < ms / 5; i++) {
		wr_err err = NULL;
		int idx = wr_rtnl_ifindex(nl, name, &err);
		wr_err_free(&err);
		if (idx > 0)
			return idx;
		struct timespec ts = {0, 5 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	return -ENODEV;
}

int ga_net_up(char *msg, size_t msglen)
{
	struct wr_rtnl nl;
	wr_err err = NULL;
	if (wr_rtnl_open(&nl, &err) < 0) {
		snprintf(msg, msglen, "network: %s", err->msg);
		wr_err_free(&err);
		return -EIO;
	}
	int r = 0, lo = wr_rtnl_ifindex(&nl, "lo", &err);
	if (lo <= 0 || wr_rtnl_link_set(&nl, lo, true, 0, &err) < 0) {
		snprintf(msg, msglen, "network: loopback: %s", err ? err->msg : "none");
		r = -EIO;
		goto out;
	}
	char ip[64], gw[64], dns[64];
	if (!ga_cmdline_get("warren.ip", ip, sizeof(ip)))
		goto out; /* no NIC: loopback only */
	if (!ga_cmdline_get("warren.gw", gw, sizeof(gw)) ||
	    !ga_cmdline_get("warren.dns", dns, sizeof(dns))) {
		snprintf(msg, msglen, "network: warren.ip without warren.gw and warren.dns");
		r = -EINVAL;
		goto out;
	}
	char *slash = strchr(ip, '/');
	int plen = slash ? atoi(slash + 1) : 32;
	if (slash)
		*slash = '\0';
	struct in_addr a, g, d;
	if (inet_pton(AF_INET, ip, &a) != 1 || inet_pton(AF_INET, gw, &g) != 1 ||
	    inet_pton(AF_INET, dns, &d) != 1 || plen < 1 || plen > 32) {
		snprintf(msg, msglen, "network: bad warren.ip/gw/dns");
		r = -EINVAL;
		goto out;
	}
	/* virtio-net's module was loaded with the others; its probe may
	 * finish after finit_module returned */
	int eth = wait_link(&nl, "eth0", 5000);
	if (eth <= 0) {
		snprintf(msg, msglen, "network: no eth0 appeared (virtio_net missing?)");
		r = -ENODEV;
		goto out;
	}
	if (wr_rtnl_addr_add(&nl, eth, a, plen, &err) < 0 ||
	    wr_rtnl_link_set(&nl, eth, true, 0, &err) < 0 ||
	    wr_rtnl_route_default(&nl, eth, g, &err) < 0) {
		snprintf(msg, msglen, "network: eth0: %s", err->msg);
		r = -EIO;
		goto out;
	}
	char buf[256], host[65] = "localhost";
	gethostname(host, sizeof(host) - 1);
	snprintf(buf, sizeof(buf), "nameserver %s\n", dns);
	int w = put_file("/etc/resolv.conf", buf);
	snprintf(buf, sizeof(buf),
		 "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n%s\t%s\n", ip,
		 host);
	if (w == 0)
		w = put_file("/etc/hosts", buf);
	if (w < 0) {
		snprintf(msg, msglen, "network: /etc: %s", strerror(-w));
		r = w;
	}
out:
	wr_err_free(&err);
	wr_rtnl_close(&nl);
	return r;
}
