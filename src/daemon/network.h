/* warrend's network plumbing (issue 6): the pool of network namespaces,
 * warren's nftables table and published ports, wired into the manager.
 * See docs/ARCHITECTURE.md "Network plumbing".
 *
 * Config, the "network" object (all keys optional):
 *   enable           false: every sandbox is offline (mode "none" only)
 *   bridge           "warren0"
 *   range            "10.200.0.0/16": the bridge has the first address
 *   table            "warren": our nftables table (family inet)
 *   uplink           "auto": the interface of the IPv4 default route at
 *                    start ("" or none found: any interface but the bridge)
 *   pool_size        32 namespaces kept ready
 *   pool_low_water   pool_size / 2: refill when fewer are ready
 *   teardown_per_sec 200
 *   veth_prefix      "wrv" */
#ifndef WARREN_DAEMON_NETWORK_H
#define WARREN_DAEMON_NETWORK_H

#include <jansson.h>
#include <stdbool.h>

#include "common/error.h"
#include "daemon/config.h"
#include "daemon/http.h"
#include "tiers/tier.h"

struct wrd_sbx;
struct wrd_net; /* a networked sandbox's lease and published ports */

/* Config validation (config.c): errors name "network.<key>". */
int wrd_net_check_config(json_t *v, wr_err *err);
/* After the manager's recovery: bridge, pool (adopting the live networked
 * sandboxes' addresses), table, forwarding. Nothing when disabled. */
int wrd_net_start(const struct wrd_config *cfg, wr_err *err);
/* Clean shutdown: published ports and the unused namespaces go; the
 * bridge, table and forwarding too unless networked sandboxes still run
 * (they outlive the daemon; the next start adopts them). */
void wrd_net_stop(void);
bool wrd_net_enabled(void);

/* Create request: the "network" field of body into spec (replies 400
 * itself and returns -1 on bad input). Until the policy branch brings its
 * full parser, only {"mode": "none"|"allowlist"|"open"} is read here. */
int wrd_net_request(struct wrd_req *r, json_t *body, json_t *spec);

/* Manager hooks. prepare: a networked spec gets a pool namespace (spec->net
 * points into sb->net) and its address goes into sb->rec.spec "network";
 * created: the create succeeded (our fds of the namespace are dropped);
 * release: the sandbox is gone: its ports are unpublished and its
 * namespace goes to teardown (idempotent). */
int wrd_net_prepare(struct wrd_sbx *sb, struct wr_sandbox_spec *spec, wr_err *err);
void wrd_net_created(struct wrd_sbx *sb);
void wrd_net_release(struct wrd_sbx *sb);
/* Before a suspended sandbox's process starts again (resume from disk):
 * when its namespace died with a previous daemon, a new one from the pool
 * for the tier (op set_net), its address and veth in the record, the DNS
 * forwarder told; 0 and nothing done otherwise. */
int wrd_net_resume(struct wrd_sbx *sb, wr_err *err);
/* The sandbox's struct goes (last reference): release if not yet, free. */
void wrd_net_free(struct wrd_sbx *sb);

/* Routes: /v1/sandboxes/{id}/ports and /v1/sandboxes/{id}/ports/{cid}. */
void wrd_api_ports_add(struct wrd_req *r);
void wrd_api_ports_list(struct wrd_req *r);
void wrd_api_ports_del(struct wrd_req *r);

#endif
