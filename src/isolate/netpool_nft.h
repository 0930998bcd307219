/* warren's nftables table: NAT from the sandbox range to the uplink, the
 * host's protection from sandboxes, and published ports. One table of our
 * own (family inet, default name "warren"), replaced atomically at daemon
 * start and deleted at a clean shutdown; no other table is ever read or
 * changed. Rules are per range, never per sandbox: a create or destroy
 * touches no rule. Published ports are elements of a map, added and
 * removed on request (libnftables, one transaction each).
 *
 * What the table enforces, for packets coming in on the bridge:
 *   - to the host itself (any of its addresses, every port, the daemon's
 *     TCP port included): dropped, except DNS (udp/tcp 53) to the bridge
 *     address (the DNS forwarder) and replies on connections the host made;
 *   - forwarded: dropped to the range itself (another sandbox, also when
 *     routed back through the host), to link-local (169.254.0.0/16, where
 *     the cloud metadata services live), loopback, multicast and broadcast
 *     addresses, and from a source outside the range (spoofing); any IPv6;
 *   - forwarded into the bridge: only replies and published ports (DNAT).
 * Sandbox-to-sandbox traffic on the bridge itself never reaches these
 * hooks: bridge ports are "isolated" (netpool.c) for that. */
#ifndef WARREN_ISOLATE_NETPOOL_NFT_H
#define WARREN_ISOLATE_NETPOOL_NFT_H

#include <netinet/in.h>
#include <stdint.h>

#include "common/error.h"

struct wr_netfw_config {
	const char *table;  /* "warren" */
	const char *bridge; /* the pool's bridge */
	struct in_addr net; /* the range */
	int plen;
	struct in_addr gw;  /* the bridge's address */
	const char *uplink; /* masquerade only out of it; NULL or "": any but the bridge */
};

/* Create (or atomically replace) our table. */
int wr_netfw_setup(const struct wr_netfw_config *cfg, wr_err *err);
/* Delete our table; 0 when it did not exist. */
int wr_netfw_remove(const char *table, wr_err *err);

/* Publish sandbox addr:port (TCP) on host:host_port (DNAT, for every
 * client that reaches host, the host's own processes included). */
int wr_netfw_expose_add(const char *table, struct in_addr host, uint16_t host_port,
			struct in_addr addr, uint16_t port, wr_err *err);
int wr_netfw_expose_del(const char *table, struct in_addr host, uint16_t host_port, wr_err *err);

/* IPv4 forwarding on the bridge and the uplink (or, uplink NULL, on every
 * interface: net.ipv4.ip_forward). The previous values are kept for
 * wr_netfw_forwarding_restore. */
int wr_netfw_forwarding_enable(const char *bridge, const char *uplink, wr_err *err);
void wr_netfw_forwarding_restore(void);

#endif
