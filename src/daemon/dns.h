/* warrend's DNS forwarder and named services (issue 6): configuration
 * (`network.dns`, `network.services_file`), start/stop, and the narrow
 * interfaces the rest of the network work plugs into:
 *
 *   plumbing (netns pool)  wrd_dns_register / wrd_dns_unregister: the
 *                          sandbox's address(es) when it gets a netns from
 *                          the pool, and when it gives it back. Nothing
 *                          else happens per sandbox at create.
 *   policy (eBPF filter)   wrd_dns_policy_names + wrd_dns_set_names on every
 *                          policy change (create with a policy, PATCH);
 *                          wrd_dns_set_allow_hook once at start: the filter's
 *                          "allow this address for ttl seconds" map update.
 *                          Until a hook is set, allowed names get SERVFAIL:
 *                          an answer is never given that the filter would
 *                          refuse to connect to.
 *   services               wrd_dns_services() / wrd_dns_expand_services for
 *                          a policy's "services" (also their port rules).
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

typedef int (*wrd_dns_allow_fn)(void *ctx, const char *sandbox_id, int family, const void *addr,
				uint32_t ttl, uint32_t tag);
/* Before wrd_dns_start. */
void wrd_dns_set_allow_hook(wrd_dns_allow_fn fn, void *ctx);

int wrd_dns_register(const char *tenant, const char *sandbox_id, const struct sockaddr *addr,
		     wr_err *err);
void wrd_dns_unregister(const char *sandbox_id);
/* Replace a registered sandbox's allowed names (steals the reference;
 * NULL: none). Applies to the next query. */
void wrd_dns_set_names(const char *sandbox_id, struct wr_dns_names *names);
/* The allowed names of a policy: its domains (tag 0) and the domains of
 * its services (tag 1 + index in services); open = every name (tag 0).
 * Errors name the field ("domains[2]", "services[0]"). */
int wrd_dns_policy_names(const char *const *domains, size_t n_domains, const char *const *services,
			 size_t n_services, bool open, struct wr_dns_names **out, wr_err *err);

/* The loaded services (NULL before start or without a file). */
const struct wr_services *wrd_dns_services(void);
int wrd_dns_expand_services(const char *const *names, size_t n, struct wr_svc_expansion *out,
			    wr_err *err);

/* Counters of one sandbox (zeros when the forwarder does not run). */
void wrd_dns_stats(const char *sandbox_id, struct wr_dns_stats *out);

#endif
