/* The guest NIC of both VM tiers (microvm.c, vm.c): user-mode networking
 * (QEMU's libslirp) inside the sandbox's network namespace and cgroup.
 *
 *   guest eth0 10.0.2.15/24 ──virtio-net──► slirp (in QEMU) ──► host sockets of
 *   gateway 10.0.2.2, DNS 10.0.2.3          QEMU's own uid, in the sandbox's pooled
 *                                           network namespace and QEMU's cgroup
 *                                           vm-<id>: the network filter's
 *                                           connect4/6, sendmsg4/6, sock_create and
 *                                           egress hooks decide each of them
 *
 * Every connection the guest makes becomes a connect() or sendto() of QEMU
 * in the cgroup where warrend attaches the sandbox's filter, so the
 * container tier's enforcement (allowlist, deny set, DNS-learned addresses,
 * refusal events) applies unchanged; a refused connect() reaches the guest
 * as an ICMP unreachable (slirp's answer to a failed connect). The guest's
 * DNS server 10.0.2.3 is slirp's alias for the first nameserver of QEMU's
 * /etc/resolv.conf, a file bound into its jail naming the sandbox's gateway,
 * where warrend's forwarder answers for the sandbox (its source address is
 * the sandbox's own, the namespace's eth0). slirp's other alias addresses
 * lead to the namespace's loopback, where nothing listens. No IPv6 (sandboxes
 * get none). A sandbox in mode none gets no NIC at all. */
#ifndef WARREN_TIERS_QEMU_NET_H
#define WARREN_TIERS_QEMU_NET_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"

struct wr_qemu;
struct wr_qemu_file;

/* The guest's side: one /24 per VM, private to its slirp. */
#define WR_QEMU_NET_GUEST "10.0.2.15"
#define WR_QEMU_NET_PLEN 24
#define WR_QEMU_NET_GW "10.0.2.2"
#define WR_QEMU_NET_DNS "10.0.2.3"

/* A guest NIC. */
struct wr_qemu_net {
	/* the sandbox's network namespace (QEMU is born in it); -1: an empty
	 * one of QEMU's own (a template's VM: its NIC exists, nothing is
	 * reachable) */
	int netns_fd;
	/* QEMU's /etc/resolv.conf ("nameserver <gateway>\n"): where slirp
	 * forwards the guest's DNS; NULL: none (DNS then goes to loopback) */
	const char *resolv_conf;
};

/* The -netdev and -device values of the NIC (device: the virtio-net
 * model, "virtio-net-device" on microvm, "virtio-net-pci" on q35). */
int wr_qemu_net_args(const char *device, char *netdev, size_t netdev_len, char *dev, size_t dev_len,
		     wr_err *err);
/* When net has a resolv_conf: writes it to <dir>/resolv.conf (0644) and
 * fills *f to bind it at /etc/resolv.conf in the jail; returns 1. 0 when
 * there is nothing to bind. path (at least 600 bytes) holds the file's
 * name for *f. */
int wr_qemu_net_resolv(const struct wr_qemu_net *net, const char *dir, char *path, size_t path_len,
		       struct wr_qemu_file *f, wr_err *err);
/* fd + 1 of net's namespace for wr_qemu_spawn's netns_fd1 (0: QEMU's own). */
int wr_qemu_net_fd1(const struct wr_qemu_net *net);
/* The kernel command line words that tell warren-agent to bring eth0 up
 * with the addresses above. */
const char *wr_qemu_net_cmdline(void);
/* The NIC of a sandbox spec (tier.h): its pooled namespace and the
 * resolver line warrend wrote for it, in *buf; NULL for an offline
 * sandbox (no NIC). */
struct wr_sandbox_spec;
const struct wr_qemu_net *wr_qemu_net_of(const struct wr_sandbox_spec *spec,
					 struct wr_qemu_net *buf);
/* A published port of the sandbox (warrend's relay or DNAT reaches
 * addr:port in the sandbox's namespace): slirp listens there and forwards
 * each connection to the guest's port (hostfwd_add/remove over QMP's
 * human-monitor-command, under lock). Adding first removes a rule a
 * previous daemon left (ports do not outlive a restart). */
struct wr_qmp;
int wr_qemu_net_hostfwd(struct wr_qmp *qmp, pthread_mutex_t *lock, const char *addr, unsigned port,
			bool add, wr_err *err);
/* QEMU's cgroup (vm-<id>) in the v2 hierarchy, where warrend attaches the
 * sandbox's network filter; -1 when it has none. */
int wr_qemu_cgroup_v2_fd(const struct wr_qemu *q);

#endif
