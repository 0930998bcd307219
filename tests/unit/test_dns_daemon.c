/* warrend's DNS glue (src/daemon/dns.c) on loopback: the address table,
 * policies built from domains and services (tags), the allow hook, refusals
 * as sandbox events. The sandbox manager is replaced by the three functions
 * the glue calls; the upstream is a responder thread of this test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <ldns/ldns.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/audit.h"
#include "daemon/dns.h"
#include "daemon/manager.h"

/* ---- the manager, as the glue sees it -------------------------------------- */
static struct wrd_sbx g_sb;
static char g_ev_type[64];
static json_t *g_ev_detail;
static int g_events;

int wrd_mgr_get(const char *tenant, const char *id, struct wrd_sbx **out)
{
	if (strcmp(tenant, "team") != 0 || strcmp(id, "s1") != 0)
		return -2;
	*out = &g_sb;
	return 0;
}

void wrd_mgr_put(struct wrd_sbx *sb)
{
	(void)sb;
}

void wrd_sbx_event(struct wrd_sbx *sb, const char *type, json_t *detail)
{
	(void)sb;
	snprintf(g_ev_type, sizeof(g_ev_type), "%s", type);
	json_decref(g_ev_detail);
	g_ev_detail = detail;
	g_events++;
}

/* ---- the refusal audit's dns layer ---------------------------------------- */
static char g_audit_name[256], g_audit_tenant[64];
static int g_audits;

void wr_audit_net(enum wr_audit_layer layer, const char *sandbox_id, const char *tenant,
		  const char *action, const char *ip, unsigned port, const char *proto,
		  const char *name, const char *reason, uint64_t count, int64_t time_ms)
{
	(void)ip, (void)port, (void)proto, (void)reason, (void)time_ms;
	if (layer != WR_AUDIT_DNS || strcmp(sandbox_id, "s1") != 0 || strcmp(action, "resolve") ||
	    count != 1)
		return;
	snprintf(g_audit_name, sizeof(g_audit_name), "%s", name ? name : "");
	snprintf(g_audit_tenant, sizeof(g_audit_tenant), "%s", tenant);
	g_audits++;
}

/* ---- allow hook ------------------------------------------------------------ */
static uint32_t g_allow_ttl, g_allow_addr;
static size_t g_allow_nports;
static uint16_t g_allow_port;
static int g_allows;

static int allow(void *ctx, struct wrd_sbx *sb, int family, const void *addr, uint32_t ttl,
		 const struct wr_svc_ports *ports, size_t n)
{
	(void)ctx;
	assert_ptr_equal(sb, &g_sb);
	assert_int_equal(family, AF_INET);
	memcpy(&g_allow_addr, addr, 4);
	g_allow_ttl = ttl;
	g_allow_nports = n;
	g_allow_port = n ? ports[0].lo : 0;
	g_allows++;
	return 0;
}

/* ---- upstream: every A question gets 192.0.2.1, TTL 10 ---------------------- */
static int g_up = -1;
static volatile int g_up_stop;

static void *upstream(void *arg)
{
	(void)arg;
	while (!g_up_stop) {
		struct pollfd p = {.fd = g_up, .events = POLLIN};
		if (poll(&p, 1, 100) <= 0)
			continue;
		uint8_t b[2048];
		struct sockaddr_in src;
		socklen_t sl = sizeof(src);
		ssize_t n = recvfrom(g_up, b, sizeof(b), 0, (struct sockaddr *)&src, &sl);
		ldns_pkt *q = NULL;
		if (n <= 0 || ldns_wire2pkt(&q, b, (size_t)n) != LDNS_STATUS_OK)
			continue;
		ldns_rr *qr = ldns_rr_list_rr(ldns_pkt_question(q), 0);
		char *name = ldns_rdf2str(ldns_rr_owner(qr)), line[600];
		ldns_pkt_set_qr(q, true);
		snprintf(line, sizeof(line), "%s 10 IN A 192.0.2.1", name);
		ldns_rr *rr = NULL;
		if (ldns_rr_new_frm_str(&rr, line, 0, NULL, NULL) == LDNS_STATUS_OK)
			ldns_pkt_push_rr(q, LDNS_SECTION_ANSWER, rr);
		free(name);
		uint8_t *w;
		size_t wl;
		if (ldns_pkt2wire(&w, q, &wl) == LDNS_STATUS_OK) {
			(void)sendto(g_up, w, wl, 0, (struct sockaddr *)&src, sl);
			free(w);
		}
		ldns_pkt_free(q);
	}
	return NULL;
}

static int bound_udp(const char *ip, uint16_t *port)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET};
	inet_pton(AF_INET, ip, &a.sin_addr);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	socklen_t l = sizeof(a);
	getsockname(fd, (struct sockaddr *)&a, &l);
	*port = ntohs(a.sin_port);
	return fd;
}

static uint16_t g_fwd_port;

/* rcode of the answer to `name` A asked from src; -1 when none came. */
static int ask(const char *src, const char *name)
{
	uint16_t p;
	int fd = bound_udp(src, &p);
	ldns_pkt *q = NULL;
	assert_int_equal(
	    ldns_pkt_query_new_frm_str(&q, name, LDNS_RR_TYPE_A, LDNS_RR_CLASS_IN, LDNS_RD),
	    LDNS_STATUS_OK);
	uint8_t *w;
	size_t wl;
	assert_int_equal(ldns_pkt2wire(&w, q, &wl), LDNS_STATUS_OK);
	ldns_pkt_free(q);
	struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(g_fwd_port)};
	inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
	assert_int_equal(sendto(fd, w, wl, 0, (struct sockaddr *)&to, sizeof(to)), (ssize_t)wl);
	free(w);
	struct pollfd pf = {.fd = fd, .events = POLLIN};
	int rc = -1;
	uint8_t b[2048];
	if (poll(&pf, 1, 3000) == 1) {
		ssize_t n = recv(fd, b, sizeof(b), 0);
		if (n >= 4)
			rc = b[3] & 0xf;
	}
	close(fd);
	return rc;
}

static void test_glue(void **st)
{
	(void)st;
	uint16_t up_port;
	g_up = bound_udp("127.0.0.1", &up_port);
	int probe = bound_udp("127.0.0.1", &g_fwd_port); /* a free port for the forwarder */
	close(probe);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, upstream, NULL), 0);

	char net[512];
	snprintf(net, sizeof(net),
		 "{\"services_file\": \"%s/deploy/services.json\", \"dns\": {\"listen\": "
		 "[\"127.0.0.1:%u\"], \"upstreams\": [\"127.0.0.1:%u\"], \"timeout_ms\": 500}}",
		 WARREN_SRC_ROOT, g_fwd_port, up_port);
	json_t *j = json_loads(net, 0, NULL);
	wr_err err = NULL;
	assert_int_equal(wrd_dns_check_config(j, &err), 0);
	json_decref(j);
	struct wrd_config cfg = {.network = net};
	wrd_dns_set_allow_hook(allow, NULL);
	if (wrd_dns_start(&cfg, &err) < 0)
		fail_msg("%s", err->msg);
	assert_non_null(wrd_dns_services());

	/* policy: one domain (tag 0) and the pypi service (tag 1) */
	const char *domains[] = {"example.org"}, *services[] = {"pypi"};
	struct wr_dns_names *names = NULL;
	assert_int_equal(wrd_dns_policy_names(domains, 1, services, 1, false, &names, &err), 0);
	struct sockaddr_in a = {.sin_family = AF_INET};
	inet_pton(AF_INET, "127.0.0.2", &a.sin_addr);
	/* the policy before the address: either order works */
	assert_int_equal(wrd_dns_set_names("team", "s1", names, &err), 0);
	assert_int_equal(wrd_dns_register("team", "s1", (struct sockaddr *)&a, &err), 0);

	assert_int_equal(ask("127.0.0.2", "files.pythonhosted.org"), LDNS_RCODE_NOERROR);
	assert_int_equal(g_allows, 1);
	assert_int_equal(g_allow_nports, 1); /* pypi: 443/tcp */
	assert_int_equal(g_allow_port, 443);
	assert_int_equal(g_allow_ttl, 30); /* 10 clamped up to ttl_min */
	assert_int_equal(g_allow_addr, htonl(0xc0000201));
	assert_int_equal(ask("127.0.0.2", "Example.ORG"), LDNS_RCODE_NOERROR);
	assert_int_equal(g_allow_nports, 0); /* a policy domain: the filter's rule */

	assert_int_equal(ask("127.0.0.2", "leak.attacker.example"), LDNS_RCODE_NXDOMAIN);
	assert_int_equal(g_events, 1);
	assert_string_equal(g_ev_type, "network_refused");
	assert_string_equal(json_string_value(json_object_get(g_ev_detail, "layer")), "dns");
	assert_string_equal(json_string_value(json_object_get(g_ev_detail, "name")),
			    "leak.attacker.example");
	assert_int_equal(json_integer_value(json_object_get(g_ev_detail, "total")), 1);
	assert_int_equal(g_audits, 1); /* and the audit event, with its tenant */
	assert_string_equal(g_audit_name, "leak.attacker.example");
	assert_string_equal(g_audit_tenant, "team");
	struct wr_dns_stats stt;
	wrd_dns_stats("s1", &stt);
	assert_int_equal(stt.refused, 1);
	assert_int_equal(stt.allowed_addrs, 2);

	assert_int_equal(ask("127.0.0.3", "example.org"), LDNS_RCODE_REFUSED); /* nobody's */
	wrd_dns_unregister("s1");
	assert_int_equal(ask("127.0.0.2", "example.org"), LDNS_RCODE_REFUSED);

	/* policy errors name the field */
	const char *bad_d[] = {"ok.org", "bad..org"}, *bad_s[] = {"pypi", "pipy"};
	assert_true(wrd_dns_policy_names(bad_d, 2, NULL, 0, false, &names, &err) < 0);
	assert_string_equal(err->field, "domains[1]");
	wr_err_free(&err);
	assert_true(wrd_dns_policy_names(NULL, 0, bad_s, 2, false, &names, &err) < 0);
	assert_string_equal(err->field, "services[1]");
	wr_err_free(&err);
	assert_int_equal(wrd_dns_policy_names(NULL, 0, NULL, 0, true, &names, &err), 0);
	uint32_t tags[WR_DNS_MAX_TAGS];
	assert_int_equal(wr_dns_names_match(names, "anything.example", tags), 1);
	wr_dns_names_unref(names);

	wrd_dns_stop();
	g_up_stop = 1;
	pthread_join(th, NULL);
	close(g_up);
	json_decref(g_ev_detail);
}

int main(void)
{
	const struct CMUnitTest tests[] = {cmocka_unit_test(test_glue)};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
