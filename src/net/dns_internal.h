/* Internals of the DNS forwarder shared by dns.c, dns_msg.c and the unit
 * tests: DNS messages through ldns. */
#ifndef WARREN_NET_DNS_INTERNAL_H
#define WARREN_NET_DNS_INTERNAL_H

#include <ldns/ldns.h>
#include <stdbool.h>
#include <stdint.h>

#define WR_DNSM_MAX_ADDRS 64
#define WR_DNSM_MAX_CHAIN 16

struct wr_dnsm_query {
	uint16_t id, qtype, qclass;
	uint8_t opcode;
	bool rd;
	bool edns;	  /* the client sent an OPT record */
	uint16_t udp_max; /* largest reply the client takes over UDP */
	bool matchable;	  /* every label is letters, digits, '-', '_' */
	char name[256];	  /* lower case, no trailing dot ("" for the root) */
	char shown[1100]; /* presentation form (escaped), for events */
	ldns_pkt *pkt;
};

/* Parse a query. 0: ok. -EBADMSG: not a valid query but the header is
 * readable (answer FORMERR with wr_dnsm_formerr); -EINVAL: drop silently
 * (shorter than a header, or a response). */
int wr_dnsm_parse_query(const uint8_t *buf, size_t len, struct wr_dnsm_query *q);
void wr_dnsm_query_free(struct wr_dnsm_query *q);
/* Header-only FORMERR for a malformed query (buf has >= 12 bytes). */
void wr_dnsm_formerr(const uint8_t *buf, uint8_t out[12]);

struct wr_dnsm_addr {
	int family;
	uint8_t addr[16];
	uint32_t ttl; /* clamped */
};

struct wr_dnsm_answer {
	uint8_t rcode;
	bool tc;
	ldns_rr_list *chain; /* what the sandbox gets: clones, TTLs clamped */
	ldns_rr *soa;	     /* negative answers: the authority's SOA, or NULL */
	struct wr_dnsm_addr addrs[WR_DNSM_MAX_ADDRS];
	size_t n_addrs;
};

/* The upstream query for q under a new id (EDNS, 1232 bytes, RD). */
int wr_dnsm_upstream_query(const struct wr_dnsm_query *q, uint16_t id, uint8_t **wire, size_t *len);
/* Parse an upstream answer to q sent under id. -EINVAL when it is not the
 * answer (bad packet, other id, other question): keep waiting. The chain
 * starts at q's name and follows at most WR_DNSM_MAX_CHAIN CNAMEs; only
 * addresses owned by its last name and of q's type are kept. */
int wr_dnsm_parse_answer(const uint8_t *buf, size_t len, uint16_t id, const struct wr_dnsm_query *q,
			 unsigned ttl_min, unsigned ttl_max, struct wr_dnsm_answer *a);
void wr_dnsm_answer_free(struct wr_dnsm_answer *a);
/* The reply to q: rcode, with a's chain and SOA when a is not NULL. Over
 * UDP a reply larger than the client takes becomes header + question with
 * TC set. *wire is malloc'd. */
int wr_dnsm_reply(const struct wr_dnsm_query *q, uint8_t rcode, const struct wr_dnsm_answer *a,
		  bool udp, uint8_t **wire, size_t *len);

#endif
