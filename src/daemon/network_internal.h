/* Shared by network.c and network_ports.c. */
#ifndef WARREN_DAEMON_NETWORK_INTERNAL_H
#define WARREN_DAEMON_NETWORK_INTERNAL_H

#include <jansson.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "isolate/netpool.h"
#include "isolate/netpool_nft.h"
#include "tiers/tier.h"

struct wrd_netcfg {
	bool enable;
	const char *bridge, *range, *table, *uplink, *veth_prefix;
	unsigned pool_size, low_water, teardown_per_sec;
};

struct wrd_netstate {
	struct wrd_netcfg cfg;
	json_t *cfg_json; /* owns cfg's strings */
	struct wr_netpool *pool;
	char uplink[IF_NAMESIZE];
	char *ports_dir; /* <run_dir>/ports: Unix sockets of published ports */
};
extern struct wrd_netstate wrd_netst;

struct wrd_port; /* one published port (network_ports.c) */

/* A networked sandbox's share: its lease, what its /etc gets, and its
 * published ports (under lock). */
struct wrd_net {
	struct wr_netns_lease *lease; /* NULL: adopted without a known veth */
	struct in_addr addr;
	struct wr_sandbox_net tnet;
	char resolv[64];
	char hosts[256];
	pthread_mutex_t lock;
	struct wrd_port *ports;
	bool dead; /* released: no new ports */
	/* adopted suspended (no process): its namespace and veth died with
	 * the previous daemon; wrd_net_resume takes a new one */
	bool stale;
};

/* Unpublish every port of n (sandbox gone). */
void wrd_ports_remove_all(struct wrd_net *n);
/* Shutdown: every port of every sandbox. */
void wrd_ports_stop_all(void);

#endif
