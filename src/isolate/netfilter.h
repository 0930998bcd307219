/* Per-sandbox network filter: eBPF programs on each sandbox's v2 cgroup
 * (src/isolate/bpf/netfilter.bpf.c) reading that sandbox's policy from
 * maps, and the reader of their refusal events.
 *
 * The programs are loaded once (wr_netfilter_load, one per daemon) and
 * attached per sandbox with bpf_link (BPF_LINK_CREATE on the cgroup, which
 * other programs on the same cgroup do not disturb: multi-attach). A
 * link's fd is the attachment: closing it detaches, so nothing outlives
 * wr_netfilter_detach or the filter itself.
 *
 * A policy is applied atomically: wr_netfilter_update builds the sandbox's
 * complete rule trie (header with the mode, then the rules) in a new map
 * and swaps the one element of the outer map that names it; a hook reads
 * header and rules through the same inner map, so it sees the old policy
 * or the new one, never a mix.
 *
 * Thread-safety: every call may be made from any thread once
 * wr_netfilter_load has returned; a wr_netfilter_att is used by one thread
 * at a time (the daemon holds the sandbox's lock). Library code: nothing
 * is logged, refusals go to the callback. */
#ifndef WARREN_ISOLATE_NETFILTER_H
#define WARREN_ISOLATE_NETFILTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

enum wr_net_mode { WR_NET_NONE = 0, WR_NET_ALLOWLIST = 1, WR_NET_OPEN = 2 };
enum wr_net_proto { WR_NET_ANY = 0, WR_NET_ICMP = 1, WR_NET_TCP = 6, WR_NET_UDP = 17 };

#define WR_NET_MAX_RULES 256

/* One allow (or deny-set) rule: a CIDR, a port range and a protocol. */
struct wr_net_rule {
	uint8_t family;		   /* 4 or 6 */
	uint8_t prefix;		   /* 0..32 or 0..128 */
	uint8_t addr[16];	   /* network order, host bits zero (v4: first 4 bytes) */
	uint16_t port_lo, port_hi; /* inclusive; 0-65535 = every port */
	uint8_t proto;		   /* enum wr_net_proto */
};

struct wr_net_policy {
	enum wr_net_mode mode;
	const struct wr_net_rule *allow; /* used in allowlist mode */
	size_t n_allow;
	bool allow_raw;	      /* SOCK_RAW sockets may be created (packets still filtered) */
	bool cut_established; /* re-check established TCP per packet (else it survives changes) */
	/* The sandbox's DNS forwarder address: port 53 there is allowed in
	 * allowlist and open modes, although the bridge subnet is denied. */
	bool has_gw4, has_gw6;
	uint8_t gw4[4], gw6[16];
	/* The sandbox's own address (in the bridge subnet, which the deny set
	 * holds): traffic to it stays in the sandbox's namespace. */
	bool has_self4;
	uint8_t self4[4];
};

/* Parse "10.1.2.0/24", "2001:db8::/32", "10.1.2.3" (a host) into r
 * (family, prefix, addr); host bits set are an error. `field` names the
 * input in the error. */
int wr_net_rule_parse_cidr(const char *s, struct wr_net_rule *r, const char *field, wr_err *err);
/* "80", "8000-8100", "" or "*" (every port). */
int wr_net_rule_parse_ports(const char *s, struct wr_net_rule *r, const char *field, wr_err *err);
/* "tcp", "udp", "icmp", "any". */
int wr_net_rule_parse_proto(const char *s, struct wr_net_rule *r, const char *field, wr_err *err);
/* "10.1.2.0/24" (prefix kept as given) into buf; "80", "8000-8100" or "" */
void wr_net_rule_format_cidr(const struct wr_net_rule *r, char *buf, size_t n);
void wr_net_rule_format_ports(const struct wr_net_rule *r, char *buf, size_t n);
const char *wr_net_proto_name(uint8_t proto);
const char *wr_net_mode_name(enum wr_net_mode m);
int wr_net_mode_parse(const char *s, enum wr_net_mode *m);
bool wr_net_rule_equal(const struct wr_net_rule *a, const struct wr_net_rule *b);
/* Checks ranges, rule count and that no address carries more port rules
 * (its own and its enclosing prefixes') than a trie entry holds. */
int wr_net_policy_validate(const struct wr_net_policy *p, wr_err *err);

/* A refused connect, send or socket, as reported to the callback. */
struct wr_net_refusal {
	uint64_t cgroup_id; /* the sandbox cgroup (wr_netfilter_att_cgid) */
	int64_t time_ns;    /* CLOCK_REALTIME of the (first) refusal */
	uint8_t family;	    /* 4, 6, or 0 (a socket creation) */
	uint8_t proto;	    /* IP protocol number, 0 unknown */
	uint16_t port;
	uint8_t addr[16];   /* v4: first 4 bytes */
	const char *layer;  /* always "bpf-net" */
	const char *hook;   /* connect4 connect6 sendmsg4 sendmsg6 egress sock_create */
	const char *reason; /* policy deny_set dns_resolver raw_socket no_policy */
	uint64_t count;	    /* refusals this report stands for (rate limit) */
};
typedef void (*wr_net_refusal_fn)(const struct wr_net_refusal *r, void *ctx);

struct wr_netfilter_opts {
	uint32_t event_burst;	 /* events per sandbox at once (default 32) */
	uint32_t events_per_sec; /* sustained events per sandbox (default 10) */
	wr_net_refusal_fn on_refusal;
	void *ctx;
};

struct wr_net_counters {
	uint64_t refused;    /* every refusal, exact */
	uint64_t suppressed; /* refusals no event has reported yet */
	uint64_t dropped;    /* events lost to a full ring buffer (counts kept) */
};

struct wr_netfilter;
struct wr_netfilter_att;

/* Load and verify the programs (needs CAP_BPF + CAP_NET_ADMIN, or root). */
int wr_netfilter_load(const struct wr_netfilter_opts *o, struct wr_netfilter **out, wr_err *err);
/* Detach everything still attached, close every map and program. */
void wr_netfilter_free(struct wr_netfilter *nf);

/* The node's deny set, in force in every mode (replaces the previous). */
int wr_netfilter_set_deny(struct wr_netfilter *nf, const struct wr_net_rule *rules, size_t n,
			  wr_err *err);

/* Attach to a cgroup of the v2 hierarchy (an O_DIRECTORY fd, not kept) with
 * policy p: maps first, then links, so no packet ever sees the programs
 * without a policy. Fails with EEXIST when that cgroup is attached. */
int wr_netfilter_attach(struct wr_netfilter *nf, int cgroup_fd, const struct wr_net_policy *p,
			struct wr_netfilter_att **out, wr_err *err);
/* Survive the caller's exit: links are pinned in a bpffs directory (pins
 * hold a link, and with it the programs and the maps they use, after its
 * fd is closed). Set once, before any attach; ENOTSUP when dir is not on a
 * bpf filesystem. */
int wr_netfilter_set_pin_dir(struct wr_netfilter *nf, const char *dir, wr_err *err);
/* wr_netfilter_attach, then (with a pin directory) pin the links as
 * <dir>/<pin_name>:<hook>: pins of an earlier process by that name are
 * replaced once the new links are attached, so a restarted daemon takes a
 * cgroup over without a moment unfiltered. pin_name: [A-Za-z0-9_-]{1,64}. */
int wr_netfilter_attach_pinned(struct wr_netfilter *nf, int cgroup_fd,
			       const struct wr_net_policy *p, const char *pin_name,
			       struct wr_netfilter_att **out, wr_err *err);
/* Remove pins whose name keep() does not recognise (an earlier daemon's
 * sandboxes that are gone). Returns how many files were removed. */
int wr_netfilter_sweep_pins(struct wr_netfilter *nf, bool (*keep)(const char *name, void *ctx),
			    void *ctx, wr_err *err);
int wr_netfilter_update(struct wr_netfilter *nf, struct wr_netfilter_att *att,
			const struct wr_net_policy *p, wr_err *err);
/* Links first (the programs leave the cgroup), then the sandbox's map
 * entries. *att is NULL afterwards. Counters may be read before. */
void wr_netfilter_detach(struct wr_netfilter *nf, struct wr_netfilter_att **att);
/* Detach this process's links but leave the pins (and the filter they
 * hold) in place: for a daemon that stops while its sandboxes run on. */
void wr_netfilter_detach_keep_pins(struct wr_netfilter *nf, struct wr_netfilter_att **att);
uint64_t wr_netfilter_att_cgid(const struct wr_netfilter_att *att);
int wr_netfilter_counters(struct wr_netfilter *nf, uint64_t cgid, struct wr_net_counters *c,
			  wr_err *err);

/* For the DNS forwarder: allow addr (family 4 or 6) on these port rules
 * (at most 4; port_lo/hi/proto used, family/prefix ignored) for ttl_s
 * seconds (0: until the sandbox is detached), in allowlist mode. */
int wr_netfilter_allow_addr(struct wr_netfilter *nf, uint64_t cgid, int family, const uint8_t *addr,
			    const struct wr_net_rule *ports, size_t n, uint32_t ttl_s, wr_err *err);

/* Remove addresses whose TTL has passed (the programs already ignore
 * them); returns how many. Call now and then (the daemon: every minute). */
int wr_netfilter_expire(struct wr_netfilter *nf);

/* Refusal events: an fd to poll for input, and the call that hands every
 * pending event to the callback (returns how many, or negative). */
int wr_netfilter_event_fd(const struct wr_netfilter *nf);
int wr_netfilter_consume(struct wr_netfilter *nf, wr_err *err);

#endif
