/* Unit tests of the DNS forwarder's pure parts: name sets, DNS messages
 * (malformed input, run under ASan/UBSan), the services file. The
 * forwarder itself runs in tests/integration/test_dns.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <netinet/in.h>

#include "net/dns.h"
#include "net/dns_internal.h"
#include "net/services.h"

static struct wr_dns_names *mk(const char *const *names, size_t n)
{
	struct wr_dns_pattern p[16];
	for (size_t i = 0; i < n; i++)
		p[i] = (struct wr_dns_pattern){.name = names[i], .tag = (uint32_t)i};
	struct wr_dns_names *s = NULL;
	wr_err err = NULL;
	assert_int_equal(wr_dns_names_new(p, n, &s, &err), 0);
	return s;
}

static size_t m(struct wr_dns_names *s, const char *name)
{
	uint32_t tags[WR_DNS_MAX_TAGS];
	return wr_dns_names_match(s, name, tags);
}

static void test_match(void **st)
{
	(void)st;
	const char *n[] = {"pypi.org", "*.pythonhosted.org", "Files.Example.COM.",
			   "xn--bcher-kva.de"};
	struct wr_dns_names *s = mk(n, 4);
	assert_int_equal(m(s, "pypi.org"), 1);
	assert_int_equal(m(s, "PYPI.ORG."), 1);
	assert_int_equal(m(s, "a.pypi.org"), 0);
	assert_int_equal(m(s, "xpypi.org"), 0);
	assert_int_equal(m(s, "pythonhosted.org"), 0); /* apex not in "*." */
	assert_int_equal(m(s, "files.pythonhosted.org"), 1);
	assert_int_equal(m(s, "a.b.c.pythonhosted.org"), 1);
	assert_int_equal(m(s, "files.example.com"), 1);
	assert_int_equal(m(s, "xn--bcher-kva.de"), 1);
	assert_int_equal(m(s, "org"), 0);
	assert_int_equal(m(s, ""), 0);
	assert_int_equal(m(s, "."), 0);
	assert_int_equal(m(NULL, "pypi.org"), 0);
	wr_dns_names_unref(s);
}

static void test_match_tags_and_any(void **st)
{
	(void)st;
	struct wr_dns_pattern p[] = {
	    {"github.com", 0}, {"github.com", 3}, {"*.github.com", 5}, {"*.com", 7}};
	struct wr_dns_names *s = NULL;
	wr_err err = NULL;
	assert_int_equal(wr_dns_names_new(p, 4, &s, &err), 0);
	uint32_t t[WR_DNS_MAX_TAGS];
	assert_int_equal(wr_dns_names_match(s, "github.com", t), 3); /* 0, 3, *.com=7 */
	assert_int_equal(wr_dns_names_match(s, "codeload.github.com", t), 2);
	wr_dns_names_unref(s);
	struct wr_dns_pattern any[] = {{"*", 9}};
	assert_int_equal(wr_dns_names_new(any, 1, &s, &err), 0);
	assert_int_equal(wr_dns_names_match(s, "anything.example", t), 1);
	assert_int_equal(t[0], 9);
	wr_dns_names_unref(s);
}

static void test_pattern_errors(void **st)
{
	(void)st;
	const char *bad[] = {"",	".",	     "a..b",	  "*pypi.org",
			     "a.*.org", "py pi.org", "pypi.org/", "caf\xc3\xa9.fr",
			     "**.org",	"\x01.org",  "a.org.."};
	char norm[256];
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		wr_err err = NULL;
		assert_true(wr_dns_pattern_check(bad[i], norm, &err) < 0);
		assert_non_null(err);
		wr_err_free(&err);
	}
	char lab[70], longname[300];
	memset(lab, 'a', 64);
	lab[64] = 0;
	wr_err err = NULL;
	assert_true(wr_dns_pattern_check(lab, norm, &err) < 0);
	assert_non_null(strstr(err->msg, "63"));
	wr_err_free(&err);
	for (size_t i = 0; i < 254; i++)
		longname[i] = (i % 10 == 9) ? '.' : 'a';
	longname[254] = 0;
	assert_true(wr_dns_pattern_check(longname, norm, &err) < 0);
	wr_err_free(&err);
	assert_int_equal(wr_dns_pattern_check("*.PyPI.org.", norm, &err), 0);
	assert_string_equal(norm, "*.pypi.org");
	/* the set names the pattern at fault */
	struct wr_dns_pattern p[] = {{"ok.org", 0}, {"bad..org", 0}};
	struct wr_dns_names *s = NULL;
	assert_true(wr_dns_names_new(p, 2, &s, &err) < 0);
	assert_non_null(strstr(err->msg, "bad..org"));
	wr_err_free(&err);
}

/* ---- messages ----------------------------------------------------------- */
static size_t query(uint8_t *b, const char *name, uint16_t qtype)
{
	ldns_pkt *p = NULL;
	assert_int_equal(ldns_pkt_query_new_frm_str(&p, name, qtype, LDNS_RR_CLASS_IN, LDNS_RD),
			 LDNS_STATUS_OK);
	ldns_pkt_set_id(p, 0x1234);
	uint8_t *w;
	size_t n;
	assert_int_equal(ldns_pkt2wire(&w, p, &n), LDNS_STATUS_OK);
	memcpy(b, w, n);
	free(w);
	ldns_pkt_free(p);
	return n;
}

static void test_parse_query(void **st)
{
	(void)st;
	uint8_t b[512];
	size_t n = query(b, "Files.PyPI.org.", LDNS_RR_TYPE_AAAA);
	struct wr_dnsm_query q;
	assert_int_equal(wr_dnsm_parse_query(b, n, &q), 0);
	assert_int_equal(q.id, 0x1234);
	assert_int_equal(q.qtype, LDNS_RR_TYPE_AAAA);
	assert_true(q.matchable);
	assert_string_equal(q.name, "files.pypi.org");
	assert_string_equal(q.shown, "files.pypi.org");
	assert_int_equal(q.udp_max, 512);
	wr_dnsm_query_free(&q);
	/* a label holding a '.' must not look like two labels */
	uint8_t hdr[12] = {0x12, 0x34, 0x01, 0, 0, 1, 0, 0, 0, 0, 0, 0};
	uint8_t w[64];
	memcpy(w, hdr, 12);
	const uint8_t nm[] = {8, 'e', 'v', 'i', 'l', '.', 'o', 'r', 'g',
			      3, 'c', 'o', 'm', 0,   0,	  1,   0,   1};
	memcpy(w + 12, nm, sizeof(nm));
	assert_int_equal(wr_dnsm_parse_query(w, 12 + sizeof(nm), &q), 0);
	assert_false(q.matchable);
	assert_non_null(strstr(q.shown, "\\."));
	wr_dnsm_query_free(&q);
}

static void test_malformed_queries(void **st)
{
	(void)st;
	uint8_t b[600];
	size_t n = query(b, "pypi.org", LDNS_RR_TYPE_A);
	struct wr_dnsm_query q;
	/* every truncation */
	for (size_t k = 0; k < n; k++) {
		int r = wr_dnsm_parse_query(b, k, &q);
		assert_true(r < 0);
		wr_dnsm_query_free(&q);
	}
	/* compression pointer to itself, forward pointer, oversized label */
	uint8_t loop[] = {0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1};
	assert_int_equal(wr_dnsm_parse_query(loop, sizeof(loop), &q), -EBADMSG);
	wr_dnsm_query_free(&q);
	uint8_t fwd[] = {0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 200, 0, 1, 0, 1};
	assert_int_equal(wr_dnsm_parse_query(fwd, sizeof(fwd), &q), -EBADMSG);
	wr_dnsm_query_free(&q);
	uint8_t big[12 + 1 + 64 + 5] = {0, 1, 1, 0, 0, 1};
	big[12] = 64;
	memset(big + 13, 'a', 64);
	assert_true(wr_dnsm_parse_query(big, sizeof(big), &q) < 0);
	wr_dnsm_query_free(&q);
	/* a response is dropped, not answered */
	uint8_t resp[600];
	memcpy(resp, b, n);
	resp[2] |= 0x80;
	assert_int_equal(wr_dnsm_parse_query(resp, n, &q), -EINVAL);
	/* random mutations never crash (ASan/UBSan watch) */
	srand(6);
	for (int i = 0; i < 20000; i++) {
		uint8_t m[600];
		size_t len = n;
		memcpy(m, b, n);
		for (int k = rand() % 8; k >= 0; k--)
			m[rand() % n] = (uint8_t)rand();
		if (rand() % 3 == 0)
			len = (size_t)rand() % (n + 1);
		if (wr_dnsm_parse_query(m, len, &q) == 0) {
			uint8_t *w = NULL;
			size_t wl;
			assert_int_equal(wr_dnsm_reply(&q, 3, NULL, true, &w, &wl), 0);
			free(w);
		}
		wr_dnsm_query_free(&q);
	}
	uint8_t fe[12];
	wr_dnsm_formerr(b, fe);
	assert_int_equal(fe[3] & 0xf, LDNS_RCODE_FORMERR);
	assert_true(fe[2] & 0x80);
}

/* An upstream answer: CNAME chain plus unrelated records. */
static size_t upstream(uint8_t *out, uint16_t id, const char *const *rrs, size_t nrr)
{
	ldns_pkt *p = NULL;
	assert_int_equal(
	    ldns_pkt_query_new_frm_str(&p, "alias.pypi.org.", LDNS_RR_TYPE_A, LDNS_RR_CLASS_IN, 0),
	    LDNS_STATUS_OK);
	ldns_pkt_set_id(p, id);
	ldns_pkt_set_qr(p, true);
	for (size_t i = 0; i < nrr; i++) {
		ldns_rr *rr = NULL;
		assert_int_equal(ldns_rr_new_frm_str(&rr, rrs[i], 0, NULL, NULL), LDNS_STATUS_OK);
		ldns_pkt_push_rr(p, LDNS_SECTION_ANSWER, rr);
	}
	uint8_t *w;
	size_t n;
	assert_int_equal(ldns_pkt2wire(&w, p, &n), LDNS_STATUS_OK);
	memcpy(out, w, n);
	free(w);
	ldns_pkt_free(p);
	return n;
}

static void test_answer_chain(void **st)
{
	(void)st;
	uint8_t qb[512], ab[4096];
	size_t qn = query(qb, "alias.pypi.org", LDNS_RR_TYPE_A);
	struct wr_dnsm_query q;
	assert_int_equal(wr_dnsm_parse_query(qb, qn, &q), 0);
	const char *rrs[] = {
	    "alias.pypi.org. 100 IN CNAME mid.example.", "mid.example. 5 IN CNAME end.example.",
	    "end.example. 99999 IN A 192.0.2.1",	 "end.example. 50 IN A 192.0.2.2",
	    "other.example. 50 IN A 198.51.100.7", /* not on the chain: dropped */
	    "mid.example. 50 IN A 198.51.100.8",   /* not the end of the chain */
	};
	size_t an = upstream(ab, 77, rrs, 6);
	struct wr_dnsm_answer a;
	assert_int_equal(wr_dnsm_parse_answer(ab, an, 78, &q, 30, 3600, &a), -EINVAL); /* id */
	assert_int_equal(wr_dnsm_parse_answer(ab, an, 77, &q, 30, 3600, &a), 0);
	assert_int_equal(a.n_addrs, 2);
	assert_int_equal(a.addrs[0].ttl, 3600);
	assert_int_equal(a.addrs[1].ttl, 50);
	assert_int_equal(ldns_rr_list_rr_count(a.chain), 4);
	assert_int_equal(ldns_rr_ttl(ldns_rr_list_rr(a.chain, 1)), 30);
	uint8_t *w = NULL;
	size_t wl;
	assert_int_equal(wr_dnsm_reply(&q, 0, &a, true, &w, &wl), 0);
	ldns_pkt *rp = NULL;
	assert_int_equal(ldns_wire2pkt(&rp, w, wl), LDNS_STATUS_OK);
	assert_int_equal(ldns_pkt_ancount(rp), 4);
	assert_int_equal(ldns_pkt_id(rp), 0x1234);
	ldns_pkt_free(rp);
	free(w);
	wr_dnsm_answer_free(&a);
	/* a CNAME loop stops after WR_DNSM_MAX_CHAIN hops */
	const char *loop[] = {"alias.pypi.org. 100 IN CNAME x.example.",
			      "x.example. 100 IN CNAME alias.pypi.org."};
	an = upstream(ab, 5, loop, 2);
	assert_int_equal(wr_dnsm_parse_answer(ab, an, 5, &q, 30, 3600, &a), 0);
	assert_int_equal(a.n_addrs, 0);
	wr_dnsm_answer_free(&a);
	/* mutated answers never crash */
	an = upstream(ab, 9, rrs, 6);
	srand(7);
	for (int i = 0; i < 20000; i++) {
		uint8_t mb[4096];
		memcpy(mb, ab, an);
		for (int k = rand() % 6; k >= 0; k--)
			mb[rand() % an] = (uint8_t)rand();
		size_t len = rand() % 4 == 0 ? (size_t)rand() % an : an;
		if (wr_dnsm_parse_answer(mb, len, 9, &q, 30, 3600, &a) == 0) {
			assert_int_equal(wr_dnsm_reply(&q, a.rcode, &a, false, &w, &wl), 0);
			free(w);
			wr_dnsm_answer_free(&a);
		}
	}
	wr_dnsm_query_free(&q);
}

static void test_truncation(void **st)
{
	(void)st;
	uint8_t qb[512];
	size_t qn = query(qb, "alias.pypi.org", LDNS_RR_TYPE_A);
	struct wr_dnsm_query q;
	assert_int_equal(wr_dnsm_parse_query(qb, qn, &q), 0);
	struct wr_dnsm_answer a = {.chain = ldns_rr_list_new()};
	for (int i = 0; i < 60; i++) {
		char s[128];
		ldns_rr *rr = NULL;
		snprintf(s, sizeof(s), "alias.pypi.org. 60 IN A 192.0.2.%d", i);
		assert_int_equal(ldns_rr_new_frm_str(&rr, s, 0, NULL, NULL), LDNS_STATUS_OK);
		ldns_rr_list_push_rr(a.chain, rr);
	}
	uint8_t *w = NULL;
	size_t wl;
	assert_int_equal(wr_dnsm_reply(&q, 0, &a, true, &w, &wl), 0);
	assert_true(wl <= 512);
	assert_true(w[2] & 0x02); /* TC */
	free(w);
	assert_int_equal(wr_dnsm_reply(&q, 0, &a, false, &w, &wl), 0);
	assert_true(wl > 512);
	assert_false(w[2] & 0x02);
	free(w);
	wr_dnsm_answer_free(&a);
	wr_dnsm_query_free(&q);
}

/* ---- services ------------------------------------------------------------- */
static void expect_field(const char *text, const char *field)
{
	struct wr_services *s = NULL;
	wr_err err = NULL;
	assert_true(wr_services_parse(text, &s, &err) < 0);
	assert_non_null(err);
	if (err->field == NULL || strcmp(err->field, field) != 0)
		fail_msg("field %s, want %s (%s)", err->field ? err->field : "(none)", field,
			 err->msg);
	wr_err_free(&err);
}

static void test_services_errors(void **st)
{
	(void)st;
	expect_field("{\"version\":2,\"services\":{}}", "version");
	expect_field("{\"version\":1,\"services\":[]}", "services");
	expect_field("{\"version\":1,\"services\":{\"Bad Name\":{}}}", "services");
	expect_field("{\"version\":1,\"services\":{\"a\":{\"domains\":[\"x.org\"]}}}",
		     "services.a");
	expect_field("{\"version\":1,\"services\":{\"a\":{\"domains\":[\"x.org\"],"
		     "\"ports\":[\"443\"],\"extra\":1}}}",
		     "services.a");
	expect_field("{\"version\":1,\"services\":{\"a\":{\"domains\":[],\"ports\":[\"443\"]}}}",
		     "services.a.domains");
	expect_field("{\"version\":1,\"services\":{\"a\":{\"domains\":[\"x.org\",\"b..org\"],"
		     "\"ports\":[\"443\"]}}}",
		     "services.a.domains[1]");
	expect_field("{\"version\":1,\"services\":{\"a\":{\"domains\":[\"*\"],"
		     "\"ports\":[\"443\"]}}}",
		     "services.a.domains[0]");
	expect_field("{\"version\":1,\"services\":{\"a\":{\"domains\":[\"x.org\"],"
		     "\"ports\":[\"443/tcp\",\"70000\"]}}}",
		     "services.a.ports[1]");
	expect_field("{\"version\":1,\"services\":{\"a\":{\"domains\":[\"x.org\"],"
		     "\"ports\":[\"90-80\"]}}}",
		     "services.a.ports[0]");
	expect_field("{\"version\":1,\"services\":{\"a\":{\"domains\":[\"x.org\"],"
		     "\"ports\":[\"443/sctp\"]}}}",
		     "services.a.ports[0]");
	expect_field("{\"version\":1,\"services\":{\"a\":{\"description\":5,"
		     "\"domains\":[\"x.org\"],\"ports\":[\"443\"]}}}",
		     "services.a.description");
}

static void test_services_file(void **st)
{
	(void)st;
	struct wr_services *s = NULL;
	wr_err err = NULL;
	if (wr_services_load(WARREN_SRC_ROOT "/deploy/services.json", &s, &err) < 0)
		fail_msg("%s", err->msg);
	const char *want[] = {"pypi", "npm", "debian", "github", "huggingface", "crates"};
	for (size_t i = 0; i < 6; i++)
		assert_non_null(wr_services_find(s, want[i]));
	const struct wr_service *d = wr_services_find(s, "debian");
	assert_int_equal(d->n_ports, 2);
	assert_int_equal(d->ports[0].lo, 80);
	assert_int_equal(d->ports[0].proto, IPPROTO_TCP);
	const char *names[] = {"pypi", "github"};
	struct wr_svc_expansion x;
	assert_int_equal(wr_services_expand(s, names, 2, &x, &err), 0);
	assert_int_equal(x.n_domains, 5);
	assert_string_equal(x.domains[0], "pypi.org");
	assert_int_equal(x.service_of[4], 1);
	wr_services_expansion_free(&x);
	const char *unknown[] = {"pypi", "nope"};
	assert_true(wr_services_expand(s, unknown, 2, &x, &err) < 0);
	assert_string_equal(err->field, "services[1]");
	wr_err_free(&err);
	wr_services_free(s);
	struct wr_svc_ports p;
	assert_int_equal(wr_svc_parse_ports("8000-8100/udp", &p, &err), 0);
	assert_int_equal(p.lo, 8000);
	assert_int_equal(p.hi, 8100);
	assert_int_equal(p.proto, IPPROTO_UDP);
}

static void test_addrs(void **st)
{
	(void)st;
	struct sockaddr_storage a;
	wr_err err = NULL;
	assert_int_equal(wr_dns_parse_addr("10.200.0.1", &a, &err), 0);
	assert_int_equal(ntohs(((struct sockaddr_in *)&a)->sin_port), 53);
	assert_int_equal(wr_dns_parse_addr("[fd00::1]:5353", &a, &err), 0);
	assert_int_equal(a.ss_family, AF_INET6);
	assert_int_equal(ntohs(((struct sockaddr_in6 *)&a)->sin6_port), 5353);
	assert_int_equal(wr_dns_parse_addr("fd00::1", &a, &err), 0);
	const char *bad[] = {"", "1.2.3.4:0", "1.2.3.4:x", "[::1", "host.example", "1.2.3.4:70000"};
	for (size_t i = 0; i < 6; i++) {
		assert_true(wr_dns_parse_addr(bad[i], &a, &err) < 0);
		wr_err_free(&err);
	}
	char path[64] = "/tmp/wr-resolv-";
	size_t pl = strlen(path);
	memset(path + pl, 'X', 6); /* mkstemp's template */
	path[pl + 6] = 0;
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	const char txt[] = "# c\nsearch x\nnameserver 192.0.2.53\nnameserver fe80::1%eth0\n"
			   "nameserver 2001:db8::53\noptions edns0\n";
	assert_int_equal(write(fd, txt, sizeof(txt) - 1), (ssize_t)sizeof(txt) - 1);
	close(fd);
	struct sockaddr_storage v[4];
	size_t n;
	assert_int_equal(wr_dns_resolv_conf(path, v, 4, &n, &err), 0);
	unlink(path);
	assert_int_equal(n, 2);
	assert_int_equal(v[1].ss_family, AF_INET6);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_match),
	    cmocka_unit_test(test_match_tags_and_any),
	    cmocka_unit_test(test_pattern_errors),
	    cmocka_unit_test(test_parse_query),
	    cmocka_unit_test(test_malformed_queries),
	    cmocka_unit_test(test_answer_chain),
	    cmocka_unit_test(test_truncation),
	    cmocka_unit_test(test_services_errors),
	    cmocka_unit_test(test_services_file),
	    cmocka_unit_test(test_addrs),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
