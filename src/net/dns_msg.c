/* DNS messages of the forwarder, parsed and built with ldns. The only bytes
 * read by hand are the fixed 12-byte header (to drop responses and to
 * answer FORMERR), always after a length check. */
#include "net/dns_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static bool label_byte(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Wire-form name -> dotted lower-case name; matchable only when every byte
 * of every label is a label character (a '.' inside a label must never
 * look like a label boundary). */
static void name_of(const ldns_rdf *dn, struct wr_dnsm_query *q)
{
	const uint8_t *d = ldns_rdf_data(dn);
	size_t n = ldns_rdf_size(dn), i = 0, o = 0;
	q->matchable = true;
	while (i < n && d[i] != 0) {
		size_t l = d[i++];
		if (l > 63 || i + l > n || o + l + 1 >= sizeof(q->name)) {
			q->matchable = false;
			break;
		}
		if (o > 0)
			q->name[o++] = '.';
		for (size_t k = 0; k < l; k++) {
			unsigned char c = d[i + k];
			if (c >= 'A' && c <= 'Z')
				c += 32;
			if (!label_byte(c))
				q->matchable = false;
			q->name[o++] = (char)c;
		}
		i += l;
	}
	q->name[o] = 0;
	char *s = ldns_rdf2str(dn);
	if (s == NULL) {
		snprintf(q->shown, sizeof(q->shown), "?");
		return;
	}
	size_t sl = strlen(s);
	if (sl > 1 && s[sl - 1] == '.')
		s[--sl] = 0;
	for (size_t k = 0; k < sl; k++)
		if (s[k] >= 'A' && s[k] <= 'Z')
			s[k] += 32;
	snprintf(q->shown, sizeof(q->shown), "%s", s);
	free(s);
}

int wr_dnsm_parse_query(const uint8_t *buf, size_t len, struct wr_dnsm_query *q)
{
	memset(q, 0, sizeof(*q));
	if (len < 12 || (buf[2] & 0x80)) /* no header, or QR: a response */
		return -EINVAL;
	q->id = (uint16_t)(buf[0] << 8 | buf[1]);
	ldns_pkt *p = NULL;
	if (ldns_wire2pkt(&p, buf, len) != LDNS_STATUS_OK)
		return -EBADMSG;
	q->pkt = p;
	q->opcode = (uint8_t)ldns_pkt_get_opcode(p);
	if (ldns_pkt_get_opcode(p) != LDNS_PACKET_QUERY || ldns_pkt_qdcount(p) != 1 ||
	    ldns_rr_list_rr_count(ldns_pkt_question(p)) != 1)
		return -EBADMSG;
	ldns_rr *qr = ldns_rr_list_rr(ldns_pkt_question(p), 0);
	q->qtype = (uint16_t)ldns_rr_get_type(qr);
	q->qclass = (uint16_t)ldns_rr_get_class(qr);
	q->rd = ldns_pkt_rd(p);
	q->edns = ldns_pkt_edns(p) || ldns_pkt_edns_udp_size(p) > 0;
	q->udp_max = 512;
	if (q->edns && ldns_pkt_edns_udp_size(p) > 512)
		q->udp_max = ldns_pkt_edns_udp_size(p) > 4096 ? 4096 : ldns_pkt_edns_udp_size(p);
	name_of(ldns_rr_owner(qr), q);
	return 0;
}

void wr_dnsm_query_free(struct wr_dnsm_query *q)
{
	if (q->pkt != NULL)
		ldns_pkt_free(q->pkt);
	q->pkt = NULL;
}

void wr_dnsm_formerr(const uint8_t *buf, uint8_t out[12])
{
	memset(out, 0, 12);
	out[0] = buf[0];
	out[1] = buf[1];
	out[2] = (uint8_t)(0x80 | (buf[2] & 0x78)); /* QR, the query's opcode */
	out[3] = LDNS_RCODE_FORMERR;
}

static const ldns_rdf *qname(const struct wr_dnsm_query *q)
{
	return ldns_rr_owner(ldns_rr_list_rr(ldns_pkt_question(q->pkt), 0));
}

int wr_dnsm_upstream_query(const struct wr_dnsm_query *q, uint16_t id, uint8_t **wire, size_t *len)
{
	ldns_rdf *n = ldns_rdf_clone(qname(q));
	if (n == NULL)
		return -ENOMEM;
	ldns_pkt *p = ldns_pkt_query_new(n, (ldns_rr_type)q->qtype, LDNS_RR_CLASS_IN, LDNS_RD);
	if (p == NULL)
		return -ENOMEM;
	ldns_pkt_set_id(p, id);
	ldns_pkt_set_edns_udp_size(p, 1232);
	int r = ldns_pkt2wire(wire, p, len) == LDNS_STATUS_OK ? 0 : -ENOMEM;
	ldns_pkt_free(p);
	return r;
}

static uint32_t clamp(uint32_t t, unsigned lo, unsigned hi)
{
	return t < lo ? lo : t > hi ? hi : t;
}

static int push_clone(ldns_rr_list *l, const ldns_rr *rr, unsigned lo, unsigned hi)
{
	ldns_rr *c = ldns_rr_clone(rr);
	if (c == NULL)
		return -ENOMEM;
	ldns_rr_set_ttl(c, clamp(ldns_rr_ttl(c), lo, hi));
	if (!ldns_rr_list_push_rr(l, c)) {
		ldns_rr_free(c);
		return -ENOMEM;
	}
	return 0;
}

int wr_dnsm_parse_answer(const uint8_t *buf, size_t len, uint16_t id, const struct wr_dnsm_query *q,
			 unsigned ttl_min, unsigned ttl_max, struct wr_dnsm_answer *a)
{
	memset(a, 0, sizeof(*a));
	ldns_pkt *p = NULL;
	if (len < 12 || ldns_wire2pkt(&p, buf, len) != LDNS_STATUS_OK)
		return -EINVAL;
	int r = -EINVAL;
	ldns_rr_list *ql = ldns_pkt_question(p);
	if (ldns_pkt_id(p) != id || !ldns_pkt_qr(p) || ldns_rr_list_rr_count(ql) != 1)
		goto out;
	ldns_rr *qr = ldns_rr_list_rr(ql, 0);
	if (ldns_rr_get_type(qr) != (ldns_rr_type)q->qtype ||
	    ldns_rr_get_class(qr) != LDNS_RR_CLASS_IN ||
	    ldns_dname_compare(ldns_rr_owner(qr), qname(q)) != 0)
		goto out;
	a->rcode = (uint8_t)ldns_pkt_get_rcode(p);
	a->tc = ldns_pkt_tc(p);
	if ((a->chain = ldns_rr_list_new()) == NULL) {
		r = -ENOMEM;
		goto out;
	}
	/* Follow the CNAME chain from the question's name. */
	const ldns_rdf *cur = qname(q);
	ldns_rr_list *an = ldns_pkt_answer(p);
	size_t nan = ldns_rr_list_rr_count(an);
	for (int hop = 0; hop < WR_DNSM_MAX_CHAIN; hop++) {
		const ldns_rr *next = NULL;
		for (size_t i = 0; i < nan && next == NULL; i++) {
			const ldns_rr *rr = ldns_rr_list_rr(an, i);
			if (ldns_rr_get_type(rr) == LDNS_RR_TYPE_CNAME &&
			    ldns_rr_get_class(rr) == LDNS_RR_CLASS_IN &&
			    ldns_rr_rd_count(rr) == 1 &&
			    ldns_dname_compare(ldns_rr_owner(rr), cur) == 0)
				next = rr;
		}
		if (next == NULL)
			break;
		if ((r = push_clone(a->chain, next, ttl_min, ttl_max)) < 0)
			goto out;
		cur = ldns_rr_rdf(next, 0);
	}
	for (size_t i = 0; i < nan; i++) {
		const ldns_rr *rr = ldns_rr_list_rr(an, i);
		ldns_rr_type t = ldns_rr_get_type(rr);
		if (t != (ldns_rr_type)q->qtype ||
		    (t != LDNS_RR_TYPE_A && t != LDNS_RR_TYPE_AAAA) ||
		    ldns_rr_get_class(rr) != LDNS_RR_CLASS_IN || ldns_rr_rd_count(rr) != 1 ||
		    ldns_dname_compare(ldns_rr_owner(rr), cur) != 0)
			continue;
		const ldns_rdf *d = ldns_rr_rdf(rr, 0);
		size_t want = t == LDNS_RR_TYPE_A ? 4 : 16;
		if (ldns_rdf_size(d) != want || a->n_addrs == WR_DNSM_MAX_ADDRS)
			continue;
		struct wr_dnsm_addr *x = &a->addrs[a->n_addrs++];
		x->family = t == LDNS_RR_TYPE_A ? AF_INET : AF_INET6;
		memcpy(x->addr, ldns_rdf_data(d), want);
		x->ttl = clamp(ldns_rr_ttl(rr), ttl_min, ttl_max);
		if ((r = push_clone(a->chain, rr, ttl_min, ttl_max)) < 0)
			goto out;
	}
	if (a->n_addrs == 0) { /* negative answer: keep the SOA for caching */
		ldns_rr_list *au = ldns_pkt_authority(p);
		for (size_t i = 0; i < ldns_rr_list_rr_count(au); i++) {
			const ldns_rr *rr = ldns_rr_list_rr(au, i);
			if (ldns_rr_get_type(rr) == LDNS_RR_TYPE_SOA) {
				if ((a->soa = ldns_rr_clone(rr)) == NULL) {
					r = -ENOMEM;
					goto out;
				}
				ldns_rr_set_ttl(a->soa, clamp(ldns_rr_ttl(rr), 0, ttl_max));
				break;
			}
		}
	}
	r = 0;
out:
	ldns_pkt_free(p);
	if (r < 0)
		wr_dnsm_answer_free(a);
	return r;
}

void wr_dnsm_answer_free(struct wr_dnsm_answer *a)
{
	if (a->chain != NULL)
		ldns_rr_list_deep_free(a->chain);
	if (a->soa != NULL)
		ldns_rr_free(a->soa);
	a->chain = NULL;
	a->soa = NULL;
}

static int build(const struct wr_dnsm_query *q, uint8_t rcode, const struct wr_dnsm_answer *a,
		 bool tc, uint8_t **wire, size_t *len)
{
	ldns_pkt *p = ldns_pkt_new();
	if (p == NULL)
		return -ENOMEM;
	int r = -ENOMEM;
	ldns_pkt_set_id(p, q->id);
	ldns_pkt_set_qr(p, true);
	ldns_pkt_set_opcode(p, LDNS_PACKET_QUERY);
	ldns_pkt_set_rd(p, q->rd);
	ldns_pkt_set_ra(p, true);
	ldns_pkt_set_tc(p, tc);
	ldns_pkt_set_rcode(p, rcode);
	ldns_rr *qc = ldns_rr_clone(ldns_rr_list_rr(ldns_pkt_question(q->pkt), 0));
	if (qc == NULL || !ldns_pkt_push_rr(p, LDNS_SECTION_QUESTION, qc)) {
		if (qc != NULL)
			ldns_rr_free(qc);
		goto out;
	}
	if (a != NULL && !tc) {
		for (size_t i = 0; a->chain != NULL && i < ldns_rr_list_rr_count(a->chain); i++) {
			ldns_rr *c = ldns_rr_clone(ldns_rr_list_rr(a->chain, i));
			if (c == NULL || !ldns_pkt_push_rr(p, LDNS_SECTION_ANSWER, c)) {
				if (c != NULL)
					ldns_rr_free(c);
				goto out;
			}
		}
		if (a->soa != NULL) {
			ldns_rr *c = ldns_rr_clone(a->soa);
			if (c == NULL || !ldns_pkt_push_rr(p, LDNS_SECTION_AUTHORITY, c)) {
				if (c != NULL)
					ldns_rr_free(c);
				goto out;
			}
		}
	}
	if (q->edns)
		ldns_pkt_set_edns_udp_size(p, 1232);
	if (ldns_pkt2wire(wire, p, len) == LDNS_STATUS_OK)
		r = 0;
out:
	ldns_pkt_free(p);
	return r;
}

int wr_dnsm_reply(const struct wr_dnsm_query *q, uint8_t rcode, const struct wr_dnsm_answer *a,
		  bool udp, uint8_t **wire, size_t *len)
{
	int r = build(q, rcode, a, false, wire, len);
	if (r < 0 || !udp || *len <= q->udp_max)
		return r;
	free(*wire);
	*wire = NULL;
	return build(q, rcode, a, true, wire, len);
}
