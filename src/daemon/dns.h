/* warrend's DNS forwarder and named services (issue 6): configuration
 * (`network.dns`, `network.services_file`), start/stop, and the narrow
 * interfaces the rest of the network work plugs into:
 *
 *   plumbing (netns pool)  wrd_dns_register when a sandbox gets a pooled
 *                          netns (its address(es)); nothing else happens per
 *                          sandbox at create.
 *   policy (eBPF filter)   wrd_dns_policy_names + wrd_dns_set_names when a
 *                          policy is attached and on every change (PATCH);
 *                          wrd_dns_set_allow_hook once before start: the
 *                          filter's "allow this address on these ports for
 *                          ttl seconds". Until a hook is set, allowed names
 *                          get SERVFAIL: an answer is never given that the
 *                          filter would refuse to connect to.
 *   destroy                wrd_dns_unregister (idempotent: plumbing and
 *                          filter may both call it).
 *   services               wrd_dns_services() / wrd_dns_expand_services for
 *                          a policy's "services" (also their port rules).
 * register and set_names may come in either order.
 *
 * Refused queries become the sandbox's "network_refused" events (layer
 * "dns"), rate limited per sandbox with exact counts in each event. */
#ifndef WARREN_DAEMON_DNS_H
#define WARREN_DAEMON_DNS_H

#include <jansson.h>
#include <stdbool.h>
#include <sys/socket.h>

#include "common/error.h"
#include "daemon/config.h"
#include "net/dns.h"
#include "net/services.h"

/* config.c: check the "network" object's keys this module owns ("dns",
 * "services_file"); other keys belong to the plumbing and the filter. */
int wrd_dns_check_config(json_t *network, wr_err *err);

/* main.c: load the services file, start the forwarder when network.dns is
 * present and not {"enabled": false}. A no-op without a network config. */
int wrd_dns_start(const struct wrd_config *cfg, wr_err *err);
void wrd_dns_stop(void);

struct wrd_sbx;
/* Allow the sandbox to connect to addr (family AF_INET/AF_INET6) for ttl
 * seconds (already clamped). ports: the named service's port rules when
 * the name was allowed by a service (at most 4), or NULL/0 when it was
 * allowed by the policy's own "domains" (the filter's rule for those). */
typedef int (*wrd_dns_allow_fn)(void *ctx, struct wrd_sbx *sb, int family, const void *addr,
				uint32_t ttl, const struct wr_svc_ports *ports, size_t n_ports);
/* Before wrd_dns_start. */
void wrd_dns_set_allow_hook(wrd_dns_allow_fn fn, void *ctx);
/* Before wrd_dns_start: the bridge's address (the netns pool's gateway),
 * listened on when network.dns.listen is not configured (port 53). Without
 * it the default is 10.200.0.1, the pool's default bridge address. */
void wrd_dns_set_gateway(const struct sockaddr *gw);

int wrd_dns_register(const char *tenant, const char *sandbox_id, const struct sockaddr *addr,
		     wr_err *err);
/* Forget the sandbox: addresses, names, counters (its last suppressed
 * refusals are reported first). */
void wrd_dns_unregister(const char *sandbox_id);
/* Replace the sandbox's allowed names (steals the reference; NULL: none).
 * Applies to the next query. -ENOMEM only. */
int wrd_dns_set_names(const char *tenant, const char *sandbox_id, struct wr_dns_names *names,
		      wr_err *err);
/* The allowed names of a policy: its domains (tag 0) and the domains of
 * its services (tag 1 + the service's index in wrd_dns_services(), which
 * is how the allow hook gets that service's ports); open = every name
 * (tag 0). Errors name the field ("domains[2]", "services[0]"). */
int wrd_dns_policy_names(const char *const *domains, size_t n_domains, const char *const *services,
			 size_t n_services, bool open, struct wr_dns_names **out, wr_err *err);

/* The loaded services (NULL before start or without a file). */
const struct wr_services *wrd_dns_services(void);
int wrd_dns_expand_services(const char *const *names, size_t n, struct wr_svc_expansion *out,
			    wr_err *err);

/* Counters of one sandbox (zeros when the forwarder does not run). */
void wrd_dns_stats(const char *sandbox_id, struct wr_dns_stats *out);

#endif
