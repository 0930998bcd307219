/* The network filter's rules (netfilter.h): parsing, formatting and
 * validation, with no BPF (split from netfilter.c). */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "isolate/bpf/netfilter_abi.h"
#include "isolate/netfilter.h"
#include "isolate/netfilter_internal.h"

/* ---- rules: parsing, formatting, validation ------------------------------ */

int wr_net_rule_parse_cidr(const char *s, struct wr_net_rule *r, const char *field, wr_err *err)
{
	char buf[64];
	if (!s || !*s || strlen(s) >= sizeof(buf))
		return wr_err_field(err, field, "%s: must be an IPv4 or IPv6 address or CIDR",
				    field);
	strcpy(buf, s);
	char *slash = strchr(buf, '/');
	if (slash)
		*slash = '\0';
	memset(r->addr, 0, sizeof(r->addr));
	if (inet_pton(AF_INET, buf, r->addr) == 1)
		r->family = 4;
	else if (inet_pton(AF_INET6, buf, r->addr) == 1)
		r->family = 6;
	else
		return wr_err_field(err, field, "%s: \"%s\" is not an IPv4 or IPv6 address", field,
				    buf);
	int max = r->family == 4 ? 32 : 128;
	int prefix = max;
	if (slash) {
		char *end;
		const char *p = slash + 1;
		if (*p < '0' || *p > '9')
			return wr_err_field(err, field, "%s: prefix length must be 0..%d", field,
					    max);
		long v = strtol(p, &end, 10);
		if (*end || v < 0 || v > max || (p[0] == '0' && p[1]))
			return wr_err_field(err, field, "%s: prefix length must be 0..%d", field,
					    max);
		prefix = (int)v;
	}
	for (int b = prefix; b < max; b++)
		if (r->addr[b / 8] & (0x80 >> (b % 8)))
			return wr_err_field(err, field,
					    "%s: host bits set after /%d (did you mean the network "
					    "address?)",
					    field, prefix);
	r->prefix = (uint8_t)prefix;
	return 0;
}

static int parse_port(const char *p, const char *end, uint16_t *out)
{
	if (p == end || end - p > 5)
		return -1;
	unsigned v = 0;
	for (; p < end; p++) {
		if (*p < '0' || *p > '9')
			return -1;
		v = v * 10 + (unsigned)(*p - '0');
	}
	if (v > 65535)
		return -1;
	*out = (uint16_t)v;
	return 0;
}

int wr_net_rule_parse_ports(const char *s, struct wr_net_rule *r, const char *field, wr_err *err)
{
	if (!s || !*s || strcmp(s, "*") == 0) {
		r->port_lo = 0;
		r->port_hi = 65535;
		return 0;
	}
	const char *dash = strchr(s, '-');
	const char *end = s + strlen(s);
	uint16_t lo, hi;
	if (parse_port(s, dash ? dash : end, &lo) < 0 ||
	    (dash && parse_port(dash + 1, end, &hi) < 0))
		return wr_err_field(err, field,
				    "%s: must be a port (0-65535) or a range \"lo-hi\", got \"%s\"",
				    field, s);
	if (!dash)
		hi = lo;
	if (lo > hi)
		return wr_err_field(err, field, "%s: range %u-%u is empty", field, lo, hi);
	r->port_lo = lo;
	r->port_hi = hi;
	return 0;
}

int wr_net_rule_parse_proto(const char *s, struct wr_net_rule *r, const char *field, wr_err *err)
{
	if (!s || !*s || strcmp(s, "any") == 0)
		r->proto = WR_NET_ANY;
	else if (strcmp(s, "tcp") == 0)
		r->proto = WR_NET_TCP;
	else if (strcmp(s, "udp") == 0)
		r->proto = WR_NET_UDP;
	else if (strcmp(s, "icmp") == 0)
		r->proto = WR_NET_ICMP;
	else
		return wr_err_field(err, field, "%s: must be tcp, udp, icmp or any, got \"%s\"",
				    field, s);
	return 0;
}

void wr_net_rule_format_cidr(const struct wr_net_rule *r, char *buf, size_t n)
{
	char a[INET6_ADDRSTRLEN];
	inet_ntop(r->family == 4 ? AF_INET : AF_INET6, r->addr, a, sizeof(a));
	snprintf(buf, n, "%s/%u", a, r->prefix);
}

void wr_net_rule_format_ports(const struct wr_net_rule *r, char *buf, size_t n)
{
	if (r->port_lo == 0 && r->port_hi == 65535)
		snprintf(buf, n, "%s", "");
	else if (r->port_lo == r->port_hi)
		snprintf(buf, n, "%u", r->port_lo);
	else
		snprintf(buf, n, "%u-%u", r->port_lo, r->port_hi);
}

const char *wr_net_proto_name(uint8_t proto)
{
	switch (proto) {
	case WR_NET_TCP: return "tcp";
	case WR_NET_UDP: return "udp";
	case WR_NET_ICMP: return "icmp";
	case WR_NET_ANY: return "any";
	default: return "other";
	}
}

const char *wr_net_mode_name(enum wr_net_mode m)
{
	return m == WR_NET_OPEN ? "open" : m == WR_NET_ALLOWLIST ? "allowlist" : "none";
}

int wr_net_mode_parse(const char *s, enum wr_net_mode *m)
{
	if (strcmp(s, "none") == 0)
		*m = WR_NET_NONE;
	else if (strcmp(s, "allowlist") == 0)
		*m = WR_NET_ALLOWLIST;
	else if (strcmp(s, "open") == 0)
		*m = WR_NET_OPEN;
	else
		return -EINVAL;
	return 0;
}

bool wr_net_rule_equal(const struct wr_net_rule *a, const struct wr_net_rule *b)
{
	return a->family == b->family && a->prefix == b->prefix &&
	       memcmp(a->addr, b->addr, 16) == 0 && a->port_lo == b->port_lo &&
	       a->port_hi == b->port_hi && a->proto == b->proto;
}

static bool contains(const struct wr_net_rule *outer, const struct wr_net_rule *inner)
{
	if (outer->family != inner->family || outer->prefix > inner->prefix)
		return false;
	for (int b = 0; b < outer->prefix; b++) {
		uint8_t m = 0x80 >> (b % 8);
		if ((outer->addr[b / 8] & m) != (inner->addr[b / 8] & m))
			return false;
	}
	return true;
}

/* The port rules a trie entry for rules[i]'s prefix carries: those of every
 * rule whose prefix contains it (its own included), without duplicates. */
int wr_nf_entry_rules(const struct wr_net_rule *rules, size_t n, size_t i, struct nf_port_rule *out)
{
	int k = 0;
	for (size_t j = 0; j < n; j++) {
		if (!contains(&rules[j], &rules[i]))
			continue;
		struct nf_port_rule pr = {
		    .lo = rules[j].port_lo, .hi = rules[j].port_hi, .proto = rules[j].proto};
		bool dup = false;
		for (int m = 0; m < k && !dup; m++)
			dup = out[m].lo == pr.lo && out[m].hi == pr.hi && out[m].proto == pr.proto;
		if (dup)
			continue;
		if (k == NF_PORT_RULES)
			return -1;
		out[k++] = pr;
	}
	return k;
}

int wr_nf_rules_validate(const struct wr_net_rule *rules, size_t n, const char *what, wr_err *err)
{
	if (n > WR_NET_MAX_RULES)
		return wr_err_field(err, what, "%s: at most %d rules", what, WR_NET_MAX_RULES);
	for (size_t i = 0; i < n; i++) {
		const struct wr_net_rule *r = &rules[i];
		if ((r->family != 4 && r->family != 6) || r->prefix > (r->family == 4 ? 32 : 128) ||
		    r->port_lo > r->port_hi ||
		    (r->proto != WR_NET_ANY && r->proto != WR_NET_TCP && r->proto != WR_NET_UDP &&
		     r->proto != WR_NET_ICMP))
			return wr_err_field(err, what, "%s[%zu]: malformed rule", what, i);
		struct nf_port_rule tmp[NF_PORT_RULES];
		if (wr_nf_entry_rules(rules, n, i, tmp) < 0) {
			char c[64];
			wr_net_rule_format_cidr(r, c, sizeof(c));
			return wr_err_field(
			    err, what,
			    "%s[%zu]: addresses in %s match more than %d port rules "
			    "(theirs and those of enclosing prefixes)",
			    what, i, c, NF_PORT_RULES);
		}
	}
	return 0;
}

int wr_net_policy_validate(const struct wr_net_policy *p, wr_err *err)
{
	if (p->mode != WR_NET_NONE && p->mode != WR_NET_ALLOWLIST && p->mode != WR_NET_OPEN)
		return wr_err_field(err, "mode", "mode: must be none, allowlist or open");
	return wr_nf_rules_validate(p->allow, p->n_allow, "allow", err);
}
