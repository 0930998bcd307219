/* The guest NIC of both VM tiers (see qemu_net.h). */
#include "tiers/qemu_net.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "isolate/cgroup.h"
#include "tiers/qemu_proc.h"
#include "tiers/tier.h"

int wr_qemu_net_args(const char *device, char *netdev, size_t netdev_len, char *dev, size_t dev_len,
		     wr_err *err)
{
	/* restrict=off: the guest reaches what the filter lets QEMU reach;
	 * ipv6=off: sandboxes get no IPv6; no tftp, smb or hostfwd */
	int a = snprintf(netdev, netdev_len,
			 "user,id=net0,ipv4=on,ipv6=off,restrict=off,net=10.0.2.0/%d,host=%s,"
			 "dns=%s,dhcpstart=%s",
			 WR_QEMU_NET_PLEN, WR_QEMU_NET_GW, WR_QEMU_NET_DNS, WR_QEMU_NET_GUEST);
	int b = snprintf(dev, dev_len, "%s,netdev=net0,mac=52:54:00:12:34:56", device);
	if (a < 0 || (size_t)a >= netdev_len || b < 0 || (size_t)b >= dev_len)
		return wr_err_set(err, ENAMETOOLONG, "qemu: NIC arguments too long");
	return 0;
}

int wr_qemu_net_resolv(const struct wr_qemu_net *net, const char *dir, char *path, size_t path_len,
		       struct wr_qemu_file *f, wr_err *err)
{
	if (net == NULL || net->resolv_conf == NULL)
		return 0;
	int n = snprintf(path, path_len, "%s/resolv.conf", dir);
	if (n < 0 || (size_t)n >= path_len)
		return wr_err_set(err, ENAMETOOLONG, "qemu: %s: name too long", dir);
	/* QEMU's uid reads it through the bind (the VM's directory is 0700:
	 * only the file's own mode counts there) */
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0)
		return wr_err_sys(err, "qemu: %s", path);
	size_t len = strlen(net->resolv_conf);
	ssize_t w = write(fd, net->resolv_conf, len);
	int e = errno;
	if (fchmod(fd, 0644) < 0)
		w = -1;
	close(fd);
	if (w != (ssize_t)len) {
		errno = w < 0 ? e : EIO;
		return wr_err_sys(err, "qemu: write %s", path);
	}
	*f = (struct wr_qemu_file){.src = path, .fd = -1, .name = "etc/resolv.conf", .rw = false};
	return 1;
}

int wr_qemu_net_fd1(const struct wr_qemu_net *net)
{
	return net && net->netns_fd >= 0 ? net->netns_fd + 1 : 0;
}

const char *wr_qemu_net_cmdline(void)
{
	return "warren.ip=" WR_QEMU_NET_GUEST "/24 warren.gw=" WR_QEMU_NET_GW
	       " warren.dns=" WR_QEMU_NET_DNS;
}

int wr_qemu_cgroup_v2_fd(const struct wr_qemu *q)
{
	return q && q->cg ? wr_cgroup_v2_fd(q->cg) : -1;
}

const struct wr_qemu_net *wr_qemu_net_of(const struct wr_sandbox_spec *spec,
					 struct wr_qemu_net *buf)
{
	if (spec->net == NULL)
		return NULL;
	*buf = (struct wr_qemu_net){.netns_fd = spec->net->netns_fd,
				    .resolv_conf = spec->net->resolv_conf};
	return buf;
}
