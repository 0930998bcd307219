/* The DNS forwarder that sandboxes use as their only resolver (issue 6).
 *
 * warrend runs one forwarder listening on UDP and TCP port 53 of the bridge
 * address. For each query it
 *   1. identifies the asking sandbox by the source address (hooks.who),
 *   2. matches the question's name against that sandbox's allowed names
 *      (hooks.names: a wr_dns_names set, see below),
 *   3. forwards an allowed A/AAAA/CNAME question to the upstream resolvers
 *      (UDP; TCP when the UDP answer is truncated), with a timeout,
 *   4. hands every address at the end of the CNAME chain that started at
 *      the question's name to hooks.allow_ip (TTL clamped to
 *      [ttl_min, ttl_max]) BEFORE the answer is sent, so the connect that
 *      follows is already allowed, and
 *   5. answers with the question, that chain (TTLs rewritten to the clamped
 *      values, so the sandbox never caches an address longer than the
 *      filter allows it) and, for negative answers, the SOA.
 * Any other question gets NXDOMAIN and a refusal (hooks.refused), rate
 * limited per sandbox with exact counts kept (wr_dns_sandbox_stats).
 *
 * What gets which answer (docs/NETWORK-SERVICES.md has the reasons):
 *   unknown source address                  REFUSED, no event
 *   malformed / not a query / QDCOUNT != 1  FORMERR (or dropped when even
 *                                           the header is unreadable)
 *   name not allowed (any type)             NXDOMAIN + refusal event
 *   allowed name, A / AAAA / CNAME          forwarded
 *   allowed name, HTTPS / SVCB              NOERROR without answers (clients
 *                                           fall back to A/AAAA; address
 *                                           hints would bypass allow_ip)
 *   allowed name, any other type or class   NOERROR without answers + event
 *   upstream timeout / error, allow_ip fail SERVFAIL
 *   sandbox over its in-flight bound        SERVFAIL (counted)
 *
 * Threads: one event thread (UDP socket, TCP listener, timers) and a fixed
 * pool of workers that talk to the upstreams (a sandbox holds at most
 * max_inflight < workers of them); a TCP client connection is served by a
 * thread of its own for its lifetime (bounded by max_tcp overall and
 * max_tcp_per_sandbox each). Every hook may
 * be called from any of these threads at once: hooks must be thread-safe
 * and must not block for long (they run on the answer path).
 *
 * DNS messages are parsed and built with ldns (libldns, Debian libldns-dev):
 * bounds-checked wire parsing with compression-pointer limits, so this file
 * and dns_msg.c never walk untrusted wire data by hand except for the fixed
 * 12-byte header checks done before ldns sees a packet. */
#ifndef WARREN_NET_DNS_H
#define WARREN_NET_DNS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "common/error.h"

/* ---- allowed names ------------------------------------------------------
 * An immutable, reference-counted set of name patterns. Its owner (the
 * sandbox's network policy) builds a new set on every policy change and
 * swaps it in; the forwarder holds a reference only while it answers one
 * query, so a change applies to the next query.
 *
 * Patterns (validated by wr_dns_names_new; errors name the pattern):
 *   "pypi.org"      exactly that name
 *   "*.pypi.org"    any name strictly below pypi.org (files.pypi.org,
 *                   a.b.pypi.org), NOT pypi.org itself: list both to get both
 *   "*"             every name (for mode "open")
 * Names are compared case-insensitively (ASCII only), a trailing dot is
 * ignored, internationalised names must be given in their ACE form
 * ("xn--...") and are compared as bytes. Labels: 1..63 bytes of letters,
 * digits, '-' and '_'; whole name at most 253 bytes. "*" may only be the
 * whole first label.
 *
 * Each pattern carries a tag, passed back to allow_ip for the addresses it
 * allowed: the policy's own meaning (e.g. 0 = the policy's "domains", 1+n
 * = service n, whose port set applies). A name matching several patterns
 * yields every distinct tag. */
struct wr_dns_names;

struct wr_dns_pattern {
	const char *name;
	uint32_t tag;
};

#define WR_DNS_MAX_TAGS 8

int wr_dns_names_new(const struct wr_dns_pattern *p, size_t n, struct wr_dns_names **out,
		     wr_err *err);
struct wr_dns_names *wr_dns_names_ref(struct wr_dns_names *s);
void wr_dns_names_unref(struct wr_dns_names *s);
/* Distinct tags of the patterns matching `name` (any case, optional
 * trailing dot), at most WR_DNS_MAX_TAGS: returns their count, 0 when the
 * name is not allowed. */
size_t wr_dns_names_match(const struct wr_dns_names *s, const char *name,
			  uint32_t tags[WR_DNS_MAX_TAGS]);
/* Check one pattern; writes its normalised form (lower case, no trailing
 * dot) to out (>= 256 bytes). -EINVAL with a message saying why. */
int wr_dns_pattern_check(const char *pattern, char out[256], wr_err *err);

/* ---- the forwarder --------------------------------------------------------- */
struct wr_dns_refusal {
	const char *sandbox_id;
	const char *name; /* presentation form, lower case, no trailing dot;
			     NULL for a summary of suppressed refusals */
	uint16_t qtype;
	int64_t time_ms;     /* wall clock */
	const char *layer;   /* "dns" */
	const char *reason;  /* "name" (not allowed), "qtype" (type refused) */
	uint64_t suppressed; /* refusals not reported since the last event */
	uint64_t total;	     /* refusals of this sandbox so far (exact) */
};

struct wr_dns_hooks {
	void *ctx;
	/* Sandbox id (NUL-terminated, < len) of a source address; negative
	 * when no sandbox has it. */
	int (*who)(void *ctx, const struct sockaddr *src, char *sandbox_id, size_t len);
	/* The sandbox's allowed names, referenced (the forwarder unrefs it);
	 * NULL = no names allowed. */
	struct wr_dns_names *(*names)(void *ctx, const char *sandbox_id);
	/* Allow connections from the sandbox to addr (4 or 16 bytes, family
	 * AF_INET/AF_INET6) for ttl seconds, under the policy rule `tag`.
	 * Negative: the answer becomes SERVFAIL. */
	int (*allow_ip)(void *ctx, const char *sandbox_id, int family, const void *addr,
			uint32_t ttl, uint32_t tag);
	/* A refused query (or a summary, name == NULL); may be NULL. */
	void (*refused)(void *ctx, const struct wr_dns_refusal *ev);
};

#define WR_DNS_MAX_LISTEN 4
#define WR_DNS_MAX_UPSTREAMS 4

struct wr_dns_config {
	/* Addresses to listen on (UDP and TCP); port in each (53). */
	struct sockaddr_storage listen[WR_DNS_MAX_LISTEN];
	size_t n_listen;
	/* Upstream resolvers, tried in order; port in each. */
	struct sockaddr_storage upstream[WR_DNS_MAX_UPSTREAMS];
	size_t n_upstreams;
	unsigned timeout_ms;	      /* per upstream attempt (1500) */
	unsigned ttl_min, ttl_max;    /* clamp of answer TTLs, seconds (30, 3600) */
	unsigned workers;	      /* upstream worker threads (16) */
	unsigned max_inflight;	      /* per sandbox, UDP + TCP, < workers (8) */
	unsigned max_queue;	      /* queued UDP queries, all sandboxes (1024) */
	unsigned max_tcp;	      /* concurrent TCP client connections (64) */
	unsigned max_tcp_per_sandbox; /* of which one sandbox's (4) */
	unsigned tcp_idle_ms;	      /* idle TCP client connection closed (10000) */
	unsigned event_burst;	      /* refusal events per sandbox at once (20) */
	unsigned event_per_min;	      /* then this many a minute (60) */
	unsigned max_sandboxes;	      /* per-sandbox counters kept (65536) */
};

/* Defaults (listen and upstreams empty). */
void wr_dns_config_init(struct wr_dns_config *c);
/* Parse "1.2.3.4", "1.2.3.4:5353", "::1", "[::1]:5353" (default port 53). */
int wr_dns_parse_addr(const char *s, struct sockaddr_storage *out, wr_err *err);
/* The nameservers of a resolv.conf file (at most max). */
int wr_dns_resolv_conf(const char *path, struct sockaddr_storage *out, size_t max, size_t *n,
		       wr_err *err);

struct wr_dns;

/* Bind the sockets and start the threads. The hooks are copied. */
int wr_dns_start(const struct wr_dns_config *c, const struct wr_dns_hooks *h, struct wr_dns **out,
		 wr_err *err);
/* Stop the threads, close the sockets, free everything. NULL is a no-op. */
void wr_dns_stop(struct wr_dns *d);

struct wr_dns_stats {
	uint64_t queries, forwarded, allowed_addrs, refused, events, suppressed, servfail;
	uint64_t overload; /* answered SERVFAIL: in-flight or queue bound */
};
/* Counters of one sandbox (zeros when it never asked), or of the whole
 * forwarder when sandbox_id is NULL. */
void wr_dns_sandbox_stats(struct wr_dns *d, const char *sandbox_id, struct wr_dns_stats *out);
/* Drop a destroyed sandbox's counters (its pending suppressed count is
 * reported first as a summary event). */
void wr_dns_forget(struct wr_dns *d, const char *sandbox_id);

#endif
