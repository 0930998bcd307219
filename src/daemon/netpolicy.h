/* A sandbox's network policy in the daemon: the API's `network` object
 * (mode, allow rules, domains, named services), its validation and merge
 * (PATCH), and the glue to the eBPF filter (src/isolate/netfilter.h):
 * loaded once at start, attached per sandbox at create and adoption,
 * swapped atomically on PATCH, detached at destroy. Refusals from the
 * filter are kept per sandbox (counts and the last WRD_NET_LAST) for
 * GET /v1/sandboxes/{id}/network.
 *
 * The policy is stored in the sandbox record's spec ("network", normalised
 * by wrd_netpolicy_json), so a restart re-attaches it. */
#ifndef WARREN_DAEMON_NETPOLICY_H
#define WARREN_DAEMON_NETPOLICY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "isolate/netfilter.h"

#define WRD_NET_MAX_NAMES 256
#define WRD_NET_LAST 64

struct wrd_netpolicy {
	enum wr_net_mode mode;
	struct wr_net_rule *allow;
	size_t n_allow;
	char **domains; /* lower case; "*.example.org" matches below example.org */
	size_t n_domains;
	char **services; /* names of the node's services config (pypi, npm, ...) */
	size_t n_services;
	/* "established": false "keep" (established TCP outlives a change), true
	 * "cut" (its packets are checked against the policy like new ones) */
	bool cut_established;
};
void wrd_netpolicy_clear(struct wrd_netpolicy *p);
int wrd_netpolicy_copy(const struct wrd_netpolicy *src, struct wrd_netpolicy *dst);

/* The create body's `network` (NULL: the default, mode none). Errors name
 * the field: "network.allow[2].cidr". */
int wrd_netpolicy_parse(json_t *v, struct wrd_netpolicy *out, wr_err *err);
/* PATCH body onto cur: a field left out is left as it was; `mode`,
 * `allow`, `domains`, `services` replace; `allow_add`/`allow_remove`,
 * `domains_add`/`domains_remove`, `services_add`/`services_remove` edit
 * (removes first, then adds; removing what is not there is an error). */
int wrd_netpolicy_patch(const struct wrd_netpolicy *cur, json_t *patch, struct wrd_netpolicy *out,
			wr_err *err);
json_t *wrd_netpolicy_json(const struct wrd_netpolicy *p);
/* The names the DNS forwarder answers for p (for_mode: as its mode makes
 * them, NULL in mode none; else every domain and service, to validate).
 * Errors name "domains[i]" / "services[i]" (e.g. an unknown service). */
struct wr_dns_names;
int wrd_netpolicy_dns_names(const struct wrd_netpolicy *p, bool for_mode, struct wr_dns_names **out,
			    wr_err *err);

/* ---- the daemon's filter (netenforce.c) ------------------------------------ */

struct wrd_sbx;
struct wrd_nf; /* per sandbox: policy, attachment, refusals */

/* Load the programs, set the deny set (link-local, metadata addresses, this
 * host's addresses) and start the refusal reader thread. Failure leaves
 * the daemon without a filter: mode none still holds (a sandbox's own
 * netns has only loopback), other modes are refused at create. */
struct wrd_config;
int wrd_nf_init(const struct wrd_config *cfg, wr_err *err);
/* After the DNS forwarder started: give it the names of every sandbox
 * recovery attached (recovery runs before the services file is loaded). */
void wrd_nf_dns_sync(void);
/* After recovery: remove pinned links of sandboxes that are not live. */
void wrd_nf_sweep(void);
bool wrd_nf_enabled(void);
/* Add to the node's deny set (the bridge subnet of the network plumbing). */
int wrd_nf_deny_add(const char *cidr, wr_err *err);

/* From sb->rec.spec "network": attach to the sandbox's cgroup. Before the
 * sandbox runs any command (create) or before it is served (adoption). */
int wrd_nf_attach(struct wrd_sbx *sb, int cgroup_fd, wr_err *err);
/* A VM tier's pause to disk: its links go before its QEMU (and cgroup)
 * does; the policy stays, and so does a suspended sandbox's at adoption
 * (wrd_nf_attach with no cgroup). wrd_nf_resume attaches it to the new
 * QEMU's cgroup, before the guest runs. */
void wrd_nf_suspend(struct wrd_sbx *sb);
int wrd_nf_resume(struct wrd_sbx *sb, int cgroup_fd, wr_err *err);
/* Detach and free (destroy; also for a create that failed). */
void wrd_nf_detach(struct wrd_sbx *sb);
/* hookwarm.c: the filter (mode none) on an empty cgroup of the daemon's,
 * so the kernel's cgroup hooks stay on between sandboxes. 0 and *out NULL
 * without a filter. */
struct wr_netfilter_att;
int wrd_nf_attach_idle(int cgroup_fd, struct wr_netfilter_att **out, wr_err *err);
void wrd_nf_detach_idle(struct wr_netfilter_att **att);
/* Replace the policy (validated) atomically, durable first. */
int wrd_nf_update(struct wrd_sbx *sb, const struct wrd_netpolicy *p, wr_err *err);
/* PATCH: merge (wrd_netpolicy_patch) and apply, one at a time. */
int wrd_nf_patch(struct wrd_sbx *sb, json_t *patch, wr_err *err);
/* GET: policy, counters and the last refusals. */
json_t *wrd_nf_json(struct wrd_sbx *sb);
/* The policy now in force (deep copy; mode none when not attached): for
 * the DNS forwarder, which resolves domains and services. */
int wrd_nf_policy_of(struct wrd_sbx *sb, struct wrd_netpolicy *out);
/* For the DNS forwarder: allow an answer's address for its TTL. */
int wrd_nf_allow_resolved(struct wrd_sbx *sb, int family, const uint8_t *addr,
			  const struct wr_net_rule *ports, size_t n, uint32_t ttl_s, wr_err *err);
/* The DNS gateway address netdns listens on for this sandbox (port 53 is
 * allowed there in allowlist and open modes). Call before wrd_nf_attach. */
void wrd_nf_set_gateway(struct wrd_sbx *sb, const uint8_t *gw4, const uint8_t *gw6);

#endif
