/* A small rtnetlink client: the few link, address and route requests the
 * network pool needs, sent on a NETLINK_ROUTE socket (bubblewrap's
 * network.c does the same). No shelling out to ip(8) on any path.
 *
 * A socket is bound to the network namespace of the thread that opened it:
 * open one per namespace. Every request waits for the kernel's ack. */
#ifndef WARREN_ISOLATE_RTNL_H
#define WARREN_ISOLATE_RTNL_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

struct wr_rtnl {
	int fd;
	uint32_t seq;
};

int wr_rtnl_open(struct wr_rtnl *nl, wr_err *err);
void wr_rtnl_close(struct wr_rtnl *nl);

/* ifindex of name in the socket's namespace, or -ENODEV. */
int wr_rtnl_ifindex(struct wr_rtnl *nl, const char *name, wr_err *err);
/* A bridge named name (EEXIST when a link of that name exists). */
int wr_rtnl_bridge_add(struct wr_rtnl *nl, const char *name, wr_err *err);
/* Kind of the link (e.g. "bridge", "veth") into kind; -ENODEV if absent. */
int wr_rtnl_link_kind(struct wr_rtnl *nl, const char *name, char *kind, size_t cap, wr_err *err);
/* A veth pair: name here, peer named peer in the namespace peer_netns_fd. */
int wr_rtnl_veth_add(struct wr_rtnl *nl, const char *name, const char *peer, int peer_netns_fd,
		     wr_err *err);
/* Set up/down and, when master > 0, enslave to master. */
int wr_rtnl_link_set(struct wr_rtnl *nl, int ifindex, bool up, int master, wr_err *err);
/* Set the link's MAC address. */
int wr_rtnl_link_set_mac(struct wr_rtnl *nl, int ifindex, const uint8_t mac[6], wr_err *err);
/* Bridge port flag "isolated": isolated ports never talk to each other. */
int wr_rtnl_brport_isolate(struct wr_rtnl *nl, int ifindex, wr_err *err);
/* Delete a link (a veth takes its peer with it); -ENODEV when absent. */
int wr_rtnl_link_del(struct wr_rtnl *nl, const char *name, wr_err *err);
/* IPv4 address addr/plen on ifindex. */
int wr_rtnl_addr_add(struct wr_rtnl *nl, int ifindex, struct in_addr addr, int plen, wr_err *err);
/* Default IPv4 route via gw on ifindex. */
int wr_rtnl_route_default(struct wr_rtnl *nl, int ifindex, struct in_addr gw, wr_err *err);
/* IPv4 route to dst/plen via gw on ifindex. */
int wr_rtnl_route_add(struct wr_rtnl *nl, int ifindex, struct in_addr dst, int plen,
		      struct in_addr gw, wr_err *err);

/* Names of the links enslaved to master (ifindex): calls cb for each. */
int wr_rtnl_each_port(struct wr_rtnl *nl, int master, void (*cb)(const char *name, void *ctx),
		      void *ctx, wr_err *err);
/* ifindex of the first interface of an IPv4 default route, or -ENOENT. */
int wr_rtnl_default_oif(struct wr_rtnl *nl, wr_err *err);

#endif
