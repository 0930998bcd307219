/* The guest NIC of both VM tiers (see qemu_net.h). */
#include "tiers/qemu_net.h"

#include <errno.h>
#include <jansson.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "isolate/cgroup.h"
#include "tiers/qemu_proc.h"
#include "tiers/qmp.h"
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

/* One HMP command; its output is empty on success, else QEMU's message. */
static int hmp(struct wr_qmp *qmp, const char *line, char *out, size_t outlen, wr_err *err)
{
	json_t *args = json_pack("{s:s}", "command-line", line);
	json_t *ret = NULL;
	int r = args ? wr_qmp_cmd(qmp, "human-monitor-command", args, 10000, &ret, err)
		     : wr_err_set(err, ENOMEM, "out of memory");
	json_decref(args);
	const char *s = json_string_value(ret);
	snprintf(out, outlen, "%s", s ? s : "");
	json_decref(ret);
	return r;
}

int wr_qemu_net_hostfwd(struct wr_qmp *qmp, pthread_mutex_t *lock, const char *addr, unsigned port,
			bool add, wr_err *err)
{
	if (qmp == NULL)
		return wr_err_set(err, EIO, "qemu: no monitor");
	char rm[128], ad[160], out[256];
	snprintf(rm, sizeof(rm), "hostfwd_remove net0 tcp:%s:%u", addr, port);
	snprintf(ad, sizeof(ad), "hostfwd_add net0 tcp:%s:%u-%s:%u", addr, port, WR_QEMU_NET_GUEST,
		 port);
	pthread_mutex_lock(lock);
	/* a rule of a previous daemon's publish, or none ("host forwarding
	 * rule for ... not found"): either way the slot is free after */
	int r = hmp(qmp, rm, out, sizeof(out), err);
	if (r == 0 && add) {
		r = hmp(qmp, ad, out, sizeof(out), err);
		if (r == 0 && out[0]) {
			out[strcspn(out, "\r\n")] = '\0';
			r = wr_err_set(err, EADDRINUSE, "guest port %u: %s", port, out);
		}
	}
	pthread_mutex_unlock(lock);
	return r;
}
