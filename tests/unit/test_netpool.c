/* Network pool tests. The whole process first moves into a network
 * namespace of its own: the bridge, the veths and the pool's namespaces all
 * live (and die) with it, so nothing is left on the host even when a test
 * fails, and no other test or daemon on the machine is touched. Traffic
 * only between namespaces made here. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "isolate/netpool.h"
#include "isolate/netpool_nft.h"
#include "isolate/rtnl.h"

static char g_bridge[IF_NAMESIZE];

static void count_port(const char *name, void *ctx)
{
	(void)name;
	(*(int *)ctx)++;
}

static int bridge_ports(void)
{
	struct wr_rtnl nl;
	_cleanup_err_ wr_err err = NULL;
	assert_int_equal(wr_rtnl_open(&nl, &err), 0);
	int idx = wr_rtnl_ifindex(&nl, g_bridge, NULL);
	int n = 0;
	if (idx > 0)
		assert_int_equal(wr_rtnl_each_port(&nl, idx, count_port, &n, &err), 0);
	wr_rtnl_close(&nl);
	return idx > 0 ? n : -1;
}

static void wait_ready(struct wr_netpool *p, unsigned n)
{
	struct wr_netpool_stats st;
	for (int i = 0; i < 1000; i++) {
		wr_netpool_stats(p, &st);
		if (st.ready >= n)
			return;
		usleep(10000);
	}
	fail_msg("pool has %u ready, want %u", st.ready, n);
}

static struct wr_netpool *start(unsigned size, unsigned rate)
{
	struct wr_netpool_config c = {
	    .bridge = g_bridge, .range = "10.99.0.0/24", .size = size, .teardown_per_sec = rate};
	struct wr_netpool *p = NULL;
	_cleanup_err_ wr_err err = NULL;
	if (wr_netpool_start(&c, NULL, 0, &p, &err) < 0)
		fail_msg("start: %s", err->msg);
	return p;
}

/* In a child inside l's namespace: connect to addr:port (1 s at most),
 * send "ping", expect "pong". Exit status 0 when that worked. */
static int probe_ns(int nsfd, const char *addr, int port)
{
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (nsfd >= 0 && setns(nsfd, CLONE_NEWNET) < 0)
			_exit(10);
		int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
		inet_pton(AF_INET, addr, &sa.sin_addr);
		if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS)
			_exit(11);
		struct pollfd pf = {.fd = s, .events = POLLOUT};
		if (poll(&pf, 1, 1000) != 1)
			_exit(12);
		int e = 0;
		socklen_t el = sizeof(e);
		getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &el);
		if (e)
			_exit(13);
		_exit(write(s, "ping", 4) == 4 ? 0 : 14);
	}
	int st;
	waitpid(pid, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 99;
}

static int probe_from(const struct wr_netns_lease *l, const char *addr, int port)
{
	return probe_ns(l->netns_fd, addr, port);
}

static int listen_on(const char *addr, int *port)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET};
	inet_pton(AF_INET, addr, &sa.sin_addr);
	assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(s, 8), 0);
	socklen_t l = sizeof(sa);
	getsockname(s, (struct sockaddr *)&sa, &l);
	*port = ntohs(sa.sin_port);
	return s;
}

static void test_fill_take_release(void **state)
{
	(void)state;
	struct wr_netpool *p = start(4, 0);
	wait_ready(p, 4);
	assert_int_equal(bridge_ports(), 4);
	struct wr_netns_lease *a, *b, *c;
	_cleanup_err_ wr_err err = NULL;
	assert_int_equal(wr_netpool_take(p, &a, &err), 0);
	assert_int_equal(wr_netpool_take(p, &b, &err), 0);
	/* at the watermark (size / 2 = 2 ready): no refill yet */
	usleep(100000);
	struct wr_netpool_stats st;
	wr_netpool_stats(p, &st);
	assert_int_equal(st.ready, 2);
	assert_int_equal(wr_netpool_take(p, &c, &err), 0);
	assert_true(a->netns_fd >= 0 && a->sysfs_fd >= 0);
	assert_int_not_equal(a->addr.s_addr, b->addr.s_addr);
	char ip[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &a->addr, ip, sizeof(ip));
	assert_memory_equal(ip, "10.99.0.", 8);
	/* below it: the refill thread tops the pool up again */
	wait_ready(p, 4);
	assert_int_equal(bridge_ports(), 7);

	/* the host (bridge address) is reachable from a pool namespace */
	int port;
	int ls = listen_on("10.99.0.1", &port);
	assert_int_equal(probe_from(a, "10.99.0.1", port), 0);
	close(ls);
	/* another pool namespace is not (isolated bridge ports) */
	int pp[2];
	assert_int_equal(pipe(pp), 0);
	pid_t srv = fork();
	if (srv == 0) {
		close(pp[0]);
		if (setns(b->netns_fd, CLONE_NEWNET) < 0)
			_exit(1);
		char bip[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, &b->addr, bip, sizeof(bip));
		int bport, s = listen_on(bip, &bport);
		if (write(pp[1], &bport, sizeof(bport)) != sizeof(bport))
			_exit(1);
		pause();
		close(s);
		_exit(0);
	}
	close(pp[1]);
	int bport = 0;
	assert_int_equal(read(pp[0], &bport, sizeof(bport)), sizeof(bport));
	close(pp[0]);
	char bip[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &b->addr, bip, sizeof(bip));
	assert_int_not_equal(probe_from(a, bip, bport), 0);
	/* and b's own namespace reaches its own server: the probe works */
	assert_int_equal(probe_from(b, bip, bport), 0);
	kill(srv, SIGKILL);
	waitpid(srv, NULL, 0);

	wr_netpool_release(p, a);
	wr_netpool_release(p, b);
	wr_netpool_release(p, c);
	wr_netpool_drain(p);
	assert_int_equal(bridge_ports(), 4);
	wr_netpool_stats(p, &st);
	assert_int_equal(st.destroyed, 3);
	assert_int_equal(st.leased, 0);
	wr_netpool_stop(&p, true);
	assert_int_equal(bridge_ports(), -1);
}

static void test_rate_limited_teardown(void **state)
{
	(void)state;
	struct wr_netpool *p = start(0, 50);
	struct wr_netns_lease *l[20];
	_cleanup_err_ wr_err err = NULL;
	/* size 0: every take makes one on demand */
	for (int i = 0; i < 20; i++)
		assert_int_equal(wr_netpool_take(p, &l[i], &err), 0);
	assert_int_equal(bridge_ports(), 20);
	uint64_t t0 = wr_now_ns();
	for (int i = 0; i < 20; i++)
		wr_netpool_release(p, l[i]);
	/* a take during the teardown burst is not held up by it */
	struct wr_netns_lease *x;
	uint64_t t1 = wr_now_ns();
	assert_int_equal(wr_netpool_take(p, &x, &err), 0);
	uint64_t take_ms = (wr_now_ns() - t1) / 1000000;
	wr_netpool_release(p, x);
	wr_netpool_drain(p);
	uint64_t ms = (wr_now_ns() - t0) / 1000000;
	/* 21 at 50/s with a burst of 6: at least (21 - 6) / 50 s */
	assert_true(ms >= 280);
	assert_true(take_ms < ms);
	assert_int_equal(bridge_ports(), 0);
	wr_netpool_stop(&p, true);
}

static void test_sweep_and_adopt(void **state)
{
	(void)state;
	struct wr_netpool *p = start(2, 0);
	wait_ready(p, 2);
	struct wr_netns_lease *a;
	_cleanup_err_ wr_err err = NULL;
	assert_int_equal(wr_netpool_take(p, &a, &err), 0);
	struct wr_netns_lease kept = *a;
	/* a "crash": the pool goes away without tearing a down, and its
	 * namespace stays alive (a sandbox would hold it) */
	int keep_fd = dup(a->netns_fd);
	wr_netpool_stop(&p, false);
	close(a->netns_fd);
	close(a->sysfs_fd);
	free(a);
	/* the ready ones went down with the pool; a's veth remains */
	assert_int_equal(bridge_ports(), 1);
	/* a stray port of the bridge (a previous run's) */
	struct wr_rtnl nl;
	assert_int_equal(wr_rtnl_open(&nl, &err), 0);
	int ns = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	assert_int_equal(wr_rtnl_veth_add(&nl, "wrvstray0", "wrvstray1", ns, &err), 0);
	close(ns);
	int idx = wr_rtnl_ifindex(&nl, "wrvstray0", &err);
	int br = wr_rtnl_ifindex(&nl, g_bridge, &err);
	assert_int_equal(wr_rtnl_link_set(&nl, idx, true, br, &err), 0);
	wr_rtnl_close(&nl);
	assert_int_equal(bridge_ports(), 2);

	struct wr_netpool_config c = {.bridge = g_bridge, .range = "10.99.0.0/24", .size = 1};
	assert_int_equal(wr_netpool_start(&c, &kept, 1, &p, &err), 0);
	wait_ready(p, 1);
	/* the stray is gone, the adopted one kept, one new ready */
	assert_int_equal(bridge_ports(), 2);
	struct wr_netns_lease *n;
	assert_int_equal(wr_netpool_take(p, &n, &err), 0);
	assert_int_not_equal(n->addr.s_addr, kept.addr.s_addr);
	struct wr_netns_lease *ad = wr_netpool_adopted(p, kept.addr);
	assert_non_null(ad);
	assert_string_equal(ad->veth, kept.veth);
	wr_netpool_release(p, ad);
	wr_netpool_release(p, n);
	wr_netpool_drain(p);
	wr_netpool_stop(&p, true);
	close(keep_fd);
	assert_int_equal(bridge_ports(), -1);
}

/* A server in namespace nsfd on addr:port (0: any port) that writes the
 * peer address of each connection it accepts to a pipe. */
struct srv {
	pid_t pid;
	int port;
	int rfd;
};

static void serve_in(int nsfd, const char *addr, int port, struct srv *s)
{
	int pp[2];
	assert_int_equal(pipe(pp), 0);
	s->pid = fork();
	assert_true(s->pid >= 0);
	if (s->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* a failed test leaves none */
		close(pp[0]);
		if (nsfd >= 0 && setns(nsfd, CLONE_NEWNET) < 0)
			_exit(1);
		int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
		inet_pton(AF_INET, addr, &sa.sin_addr);
		if (bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(l, 8) < 0)
			_exit(1);
		socklen_t sl = sizeof(sa);
		getsockname(l, (struct sockaddr *)&sa, &sl);
		int p = ntohs(sa.sin_port);
		if (write(pp[1], &p, sizeof(p)) != sizeof(p))
			_exit(1);
		for (;;) {
			struct sockaddr_in peer;
			socklen_t pl = sizeof(peer);
			int c = accept(l, (struct sockaddr *)&peer, &pl);
			if (c < 0)
				continue;
			char ip[16] = {0};
			inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof(ip));
			if (write(pp[1], ip, sizeof(ip)) != sizeof(ip))
				_exit(1);
			close(c);
		}
	}
	close(pp[1]);
	s->rfd = pp[0];
	assert_int_equal(read(s->rfd, &s->port, sizeof(s->port)), sizeof(s->port));
}

static void srv_peer(struct srv *s, char ip[16])
{
	struct pollfd pf = {.fd = s->rfd, .events = POLLIN};
	assert_int_equal(poll(&pf, 1, 2000), 1);
	assert_int_equal(read(s->rfd, ip, 16), 16);
}

static void srv_stop(struct srv *s)
{
	kill(s->pid, SIGKILL);
	waitpid(s->pid, NULL, 0);
	close(s->rfd);
}

static struct in_addr ip4(const char *s)
{
	struct in_addr a;
	inet_pton(AF_INET, s, &a);
	return a;
}

/* The "internet": a namespace of its own at 198.18.0.2 (and the metadata
 * address 169.254.169.254), behind an uplink veth of ours at 198.18.0.1. */
static int make_internet(const char *uplink, wr_err *err)
{
	int host = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	assert_true(host >= 0);
	assert_int_equal(unshare(CLONE_NEWNET), 0);
	int inet = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	struct wr_rtnl nl;
	assert_int_equal(wr_rtnl_open(&nl, err), 0);
	assert_int_equal(wr_rtnl_link_set(&nl, 1, true, 0, err), 0);
	assert_int_equal(wr_rtnl_veth_add(&nl, "inet0", uplink, host, err), 0);
	int idx = wr_rtnl_ifindex(&nl, "inet0", err);
	assert_int_equal(wr_rtnl_addr_add(&nl, idx, ip4("198.18.0.2"), 24, err), 0);
	assert_int_equal(wr_rtnl_addr_add(&nl, 1, ip4("169.254.169.254"), 32, err), 0);
	assert_int_equal(wr_rtnl_link_set(&nl, idx, true, 0, err), 0);
	wr_rtnl_close(&nl);
	assert_int_equal(setns(host, CLONE_NEWNET), 0);
	close(host);
	assert_int_equal(wr_rtnl_open(&nl, err), 0);
	idx = wr_rtnl_ifindex(&nl, uplink, err);
	assert_int_equal(wr_rtnl_addr_add(&nl, idx, ip4("198.18.0.1"), 24, err), 0);
	assert_int_equal(wr_rtnl_link_set(&nl, idx, true, 0, err), 0);
	assert_int_equal(wr_rtnl_route_default(&nl, idx, ip4("198.18.0.2"), err), 0);
	wr_rtnl_close(&nl);
	return inet;
}

static void test_nat_protection_expose(void **state)
{
	(void)state;
	_cleanup_err_ wr_err err = NULL;
	char uplink[IF_NAMESIZE], table[32];
	snprintf(uplink, sizeof(uplink), "wrtu%d", (int)getpid() % 100000);
	snprintf(table, sizeof(table), "warren-test-%d", (int)getpid());
	int inet = make_internet(uplink, &err);
	struct wr_netpool *p = start(2, 0);
	struct wr_netfw_config fc = {.table = table,
				     .bridge = g_bridge,
				     .net = wr_netpool_network(p),
				     .plen = wr_netpool_prefix(p),
				     .gw = wr_netpool_gateway(p),
				     .uplink = uplink};
	if (wr_netfw_setup(&fc, &err) < 0)
		fail_msg("%s", err->msg);
	/* again: an atomic replace, no error */
	assert_int_equal(wr_netfw_setup(&fc, &err), 0);
	assert_int_equal(wr_netfw_forwarding_enable(g_bridge, uplink, &err), 0);
	struct wr_netns_lease *a, *b;
	assert_int_equal(wr_netpool_take(p, &a, &err), 0);
	assert_int_equal(wr_netpool_take(p, &b, &err), 0);

	/* out to the internet, masqueraded to the uplink's address */
	struct srv web;
	serve_in(inet, "0.0.0.0", 0, &web);
	assert_int_equal(probe_from(a, "198.18.0.2", web.port), 0);
	char peer[16];
	srv_peer(&web, peer);
	assert_string_equal(peer, "198.18.0.1");
	/* never the metadata address, another sandbox (routed through the
	 * host), nor the host itself: its uplink address or the bridge's */
	assert_int_not_equal(probe_from(a, "169.254.169.254", web.port), 0);
	char bip[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &b->addr, bip, sizeof(bip));
	struct srv sb;
	serve_in(b->netns_fd, bip, 0, &sb);
	assert_int_not_equal(probe_from(a, bip, sb.port), 0);
	struct srv hostsrv, dns;
	serve_in(-1, "0.0.0.0", 0, &hostsrv);
	assert_int_not_equal(probe_from(a, "198.18.0.1", hostsrv.port), 0);
	assert_int_not_equal(probe_from(a, "10.99.0.1", hostsrv.port), 0);
	assert_int_equal(probe_ns(-1, "10.99.0.1", hostsrv.port), 0); /* it listens */
	srv_peer(&hostsrv, peer);
	/* but DNS on the bridge address is let through (the forwarder's) */
	serve_in(-1, "10.99.0.1", 53, &dns);
	assert_int_equal(probe_from(a, "10.99.0.1", 53), 0);
	srv_peer(&dns, peer);
	srv_stop(&dns);
	srv_stop(&hostsrv);

	/* published: b's server on 198.18.0.1:18080, from the internet and
	 * from the host's own processes; gone once removed */
	assert_int_equal(
	    wr_netfw_expose_add(table, ip4("198.18.0.1"), 18080, b->addr, (uint16_t)sb.port, &err),
	    0);
	assert_int_equal(probe_ns(inet, "198.18.0.1", 18080), 0);
	srv_peer(&sb, peer);
	assert_string_equal(peer, "198.18.0.2");
	assert_int_equal(probe_ns(-1, "198.18.0.1", 18080), 0);
	srv_peer(&sb, peer);
	/* a sandbox cannot use a published port to reach another one */
	assert_int_not_equal(probe_from(a, "198.18.0.1", 18080), 0);
	assert_int_equal(wr_netfw_expose_del(table, ip4("198.18.0.1"), 18080, &err), 0);
	assert_int_not_equal(probe_ns(inet, "198.18.0.1", 18080), 0);
	srv_stop(&sb);
	srv_stop(&web);

	assert_int_equal(wr_netfw_remove(table, &err), 0);
	assert_int_equal(wr_netfw_remove(table, &err), 0); /* absent: fine */
	/* without the table, the host is reachable again: the rules did it */
	serve_in(-1, "0.0.0.0", 0, &hostsrv);
	assert_int_equal(probe_from(a, "10.99.0.1", hostsrv.port), 0);
	srv_stop(&hostsrv);
	wr_netfw_forwarding_restore();
	wr_netpool_release(p, a);
	wr_netpool_release(p, b);
	wr_netpool_stop(&p, true);
	close(inet);
	struct wr_rtnl nl;
	assert_int_equal(wr_rtnl_open(&nl, &err), 0);
	wr_rtnl_link_del(&nl, uplink, NULL);
	wr_rtnl_close(&nl);
}

static void test_range_full(void **state)
{
	(void)state;
	struct wr_netpool_config c = {.bridge = g_bridge, .range = "10.98.0.0/28", .size = 0};
	struct wr_netpool *p = NULL;
	_cleanup_err_ wr_err err = NULL;
	assert_int_equal(wr_netpool_start(&c, NULL, 0, &p, &err), 0);
	/* /28: 16 addresses but the network, the bridge and the broadcast */
	struct wr_netns_lease *l[13];
	for (int i = 0; i < 13; i++)
		assert_int_equal(wr_netpool_take(p, &l[i], &err), 0);
	struct wr_netns_lease *x = NULL;
	uint64_t t0 = wr_now_ns();
	assert_true(wr_netpool_take(p, &x, &err) < 0);
	assert_true(wr_now_ns() - t0 < 5000000000ull); /* fails fast, not after 10 s */
	assert_non_null(strstr(err->msg, "full"));
	wr_err_free(&err);
	/* one returned: its address comes back once its veth is gone */
	wr_netpool_release(p, l[0]);
	wr_netpool_drain(p);
	assert_int_equal(wr_netpool_take(p, &l[0], &err), 0);
	for (int i = 0; i < 13; i++)
		wr_netpool_release(p, l[i]);
	wr_netpool_stop(&p, true);
}

static void test_bad_config(void **state)
{
	(void)state;
	struct in_addr net;
	int plen;
	_cleanup_err_ wr_err e1 = NULL, e2 = NULL, e3 = NULL, e4 = NULL;
	assert_true(wr_netpool_parse_range("10.200.0.0/16", &net, &plen, &e1) == 0 && plen == 16);
	assert_true(wr_netpool_parse_range("10.200.0.1/16", &net, &plen, &e2) < 0);
	assert_string_equal(e2->field, "range");
	assert_true(wr_netpool_parse_range("10.200.0.0/30", &net, &plen, &e3) < 0);
	assert_true(wr_netpool_parse_range("nonsense", &net, &plen, &e4) < 0);
	struct wr_netpool_config c = {.bridge = "this-name-is-far-too-long"};
	struct wr_netpool *p = NULL;
	_cleanup_err_ wr_err e5 = NULL;
	assert_true(wr_netpool_start(&c, NULL, 0, &p, &e5) < 0);
	assert_string_equal(e5->field, "bridge");
}

int main(void)
{
	if (geteuid() != 0) {
		fprintf(stderr, "netpool tests need root\n");
		return 77;
	}
	/* everything below lives in this namespace and dies with us */
	if (unshare(CLONE_NEWNET) < 0) {
		perror("unshare");
		return 1;
	}
	struct wr_rtnl nl;
	_cleanup_err_ wr_err err = NULL;
	if (wr_rtnl_open(&nl, &err) < 0 || wr_rtnl_link_set(&nl, 1, true, 0, &err) < 0) {
		fprintf(stderr, "lo: %s\n", err->msg);
		return 1;
	}
	wr_rtnl_close(&nl);
	snprintf(g_bridge, sizeof(g_bridge), "wrtb%d", (int)getpid() % 100000);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_bad_config),
	    cmocka_unit_test(test_fill_take_release),
	    cmocka_unit_test(test_rate_limited_teardown),
	    cmocka_unit_test(test_sweep_and_adopt),
	    cmocka_unit_test(test_nat_protection_expose),
	    cmocka_unit_test(test_range_full),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
