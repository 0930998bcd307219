/* The network pool: networked sandboxes get a network namespace that was
 * made and wired up in the background, so a networked create costs what an
 * offline one does.
 *
 *   host netns:  bridge (e.g. warren0, 10.200.0.1/16, the range's first
 *                address) ── wrv<hex> (veth, bridge port, "isolated")
 *   pool netns:  eth0 (the veth's other end, 10.200.x.y/16, default route
 *                via the bridge address), lo up; IPv4 forwarding off, IPv6
 *                off on eth0 (lo keeps ::1); unprivileged ports from 0 and
 *                ICMP echo sockets for every group (the sandbox's root is
 *                not privileged in a namespace the host owns).
 *
 * Each entry is held as fds only (the namespace and a read-only sysfs
 * mount of it): nothing of it outlives this process but the veth pair of a
 * namespace a sandbox still runs in. A refill thread keeps `size` entries
 * ready, starting again whenever fewer than `low_water` are; a teardown
 * thread deletes the veth of a returned entry and drops its fds, at most
 * `teardown_per_sec` a second, so a burst of destroys never competes with
 * creates for the kernel's rtnl lock. An entry is never handed out twice:
 * a returned one is destroyed and its address is reused only once its veth
 * is gone.
 *
 * Threads: every function here may be called from any thread. The refill
 * thread is the only one that changes its own network namespace (unshare,
 * then setns back to the host's). */
#ifndef WARREN_ISOLATE_NETPOOL_H
#define WARREN_ISOLATE_NETPOOL_H

#include <net/if.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

struct wr_netpool_config {
	const char *bridge;	   /* "warren0" */
	const char *range;	   /* "10.200.0.0/16": prefix 8..28 */
	const char *veth_prefix;   /* "wrv": host veth names are <prefix><8 hex> */
	unsigned size;		   /* entries kept ready (32; 0 = make on demand) */
	unsigned low_water;	   /* refill when fewer are ready (size / 2) */
	unsigned teardown_per_sec; /* 200 */
};

/* One network namespace handed to a sandbox. */
struct wr_netns_lease {
	int netns_fd;		/* the namespace (-1 for an adopted one) */
	int sysfs_fd;		/* detached read-only sysfs of it (-1 adopted) */
	struct in_addr addr;	/* eth0's address */
	char veth[IF_NAMESIZE]; /* host end, a port of the bridge */
	struct wr_netns_lease *next;
};

struct wr_netpool;

/* Bring the bridge up (made if missing, reused if a bridge of that name
 * exists: a previous run's, whose sandboxes may still run), reserve the
 * addresses and veths of adopted sandboxes (`adopted`, n of them: only
 * addr and veth are read), delete every other port of the bridge (leftovers
 * of a crash), then start the threads. */
int wr_netpool_start(const struct wr_netpool_config *cfg, const struct wr_netns_lease *adopted,
		     size_t n, struct wr_netpool **out, wr_err *err);
/* Stop the threads, tear down the ready entries and the returned ones
 * (without rate limit), and delete the bridge when remove_bridge (only
 * when no leased entry remains). Frees pool. */
void wr_netpool_stop(struct wr_netpool **pool, bool remove_bridge);

/* A ready entry; waits for the refill thread when none is (up to 10 s). */
int wr_netpool_take(struct wr_netpool *p, struct wr_netns_lease **out, wr_err *err);
/* Return an entry (taken or adopted) for teardown. */
void wr_netpool_release(struct wr_netpool *p, struct wr_netns_lease *l);
/* An adopted sandbox's entry (from wr_netpool_start's list), by address;
 * NULL when unknown. Release it like a taken one. */
struct wr_netns_lease *wr_netpool_adopted(struct wr_netpool *p, struct in_addr addr);
/* Wait until every returned entry is torn down (tests, shutdown). */
void wr_netpool_drain(struct wr_netpool *p);

struct wr_netpool_stats {
	unsigned ready, leased, tearing_down;
	uint64_t made, destroyed, waited; /* waited: takes that found none ready */
};
void wr_netpool_stats(struct wr_netpool *p, struct wr_netpool_stats *st);

/* The bridge's address (the sandboxes' gateway and DNS), the prefix length
 * and the network address of the range. */
struct in_addr wr_netpool_gateway(const struct wr_netpool *p);
int wr_netpool_prefix(const struct wr_netpool *p);
struct in_addr wr_netpool_network(const struct wr_netpool *p);
const char *wr_netpool_bridge(const struct wr_netpool *p);

/* Parse "a.b.c.d/n" (n 8..28, host bits zero). Field "range" on error. */
int wr_netpool_parse_range(const char *s, struct in_addr *net, int *plen, wr_err *err);

#endif
