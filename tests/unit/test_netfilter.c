/* Network filter tests (src/isolate/netfilter.c + bpf/netfilter.bpf.c), as
 * root on real cgroups and network namespaces made here: an "internet" of
 * one server namespace (10.251.<k>.1 and .3, fd51:<k>::1, listeners on
 * several ports) joined by a veth pair to a client namespace (.2). Client
 * work runs in a forked child that joins a leaf of an attached sandbox-like
 * cgroup and enters the client namespace. Everything made here carries the
 * test's pid in its name and is removed by the group teardown, also after
 * a failure. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_packet.h>
#include <netinet/in.h>
#include <netinet/ip_icmp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "isolate/cgroup.h"
#include "isolate/netfilter.h"

#define NEV 4096

static struct {
	char base[64];
	char ns_s[64], ns_c[64];
	int k; /* subnet byte */
	struct wr_cgroup_root *root;
	struct wr_netfilter *nf;
	struct wr_net_refusal ev[NEV];
	int nev;
	uint64_t ev_count;
	bool nets;
	pid_t server;
} G;

static void on_refusal(const struct wr_net_refusal *r, void *ctx)
{
	(void)ctx;
	if (G.nev < NEV)
		G.ev[G.nev++] = *r;
	G.ev_count += r->count;
}

static void drain_events(void)
{
	wr_err err = NULL;
	struct pollfd p = {.fd = wr_netfilter_event_fd(G.nf), .events = POLLIN};
	while (poll(&p, 1, 50) > 0)
		if (wr_netfilter_consume(G.nf, &err) <= 0)
			break;
	wr_err_free(&err);
}

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	return system(cmd);
}

static int enter_ns(const char *name)
{
	char p[128];
	snprintf(p, sizeof(p), "/run/netns/%s", name);
	_cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || setns(fd, CLONE_NEWNET) < 0)
		return -errno;
	return 0;
}

/* The server: listeners on every address of its namespace. */
static void serve(void)
{
	if (enter_ns(G.ns_s) < 0)
		_exit(1);
	int ports[] = {8080, 8081, 9000};
	int echo = -1;
	for (size_t i = 0; i < sizeof(ports) / sizeof(ports[0]); i++) {
		int s = socket(AF_INET6, SOCK_STREAM, 0);
		int off = 0, on = 1;
		setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
		setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
		struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons(ports[i])};
		if (bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(s, 4096) < 0)
			_exit(1);
		if (ports[i] == 9000)
			echo = s;
	}
	int u = socket(AF_INET6, SOCK_DGRAM, 0);
	struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons(5353)};
	bind(u, (struct sockaddr *)&a, sizeof(a));
	/* 9000 echoes, one connection at a time */
	for (;;) {
		int c = accept(echo, NULL, NULL);
		if (c < 0)
			continue;
		char buf[256];
		ssize_t n;
		while ((n = read(c, buf, sizeof(buf))) > 0)
			if (write(c, buf, (size_t)n) != n)
				break;
		close(c);
	}
}

static int group_setup(void **state)
{
	(void)state;
	wr_err err = NULL;
	G.k = 100 + getpid() % 100;
	snprintf(G.base, sizeof(G.base), "wrnf-test-%d", getpid());
	snprintf(G.ns_s, sizeof(G.ns_s), "wrnf%d-s", getpid());
	snprintf(G.ns_c, sizeof(G.ns_c), "wrnf%d-c", getpid());
	if (wr_cgroup_root_open(G.base, &G.root, &err) < 0) {
		fprintf(stderr, "cgroup root: %s\n", err->msg);
		return -1;
	}
	struct wr_netfilter_opts o = {
	    .event_burst = 16, .events_per_sec = 10, .on_refusal = on_refusal};
	if (wr_netfilter_load(&o, &G.nf, &err) < 0) {
		fprintf(stderr, "load: %s\n", err->msg);
		return -1;
	}
	G.nets = true;
	if (sh("ip netns add %s && ip netns add %s && "
	       "ip link add wrnf%ds netns %s type veth peer name wrnf%dc netns %s && "
	       "ip -n %s addr add 10.251.%d.1/24 dev wrnf%ds && "
	       "ip -n %s addr add 10.251.%d.3/24 dev wrnf%ds && "
	       "ip -n %s addr add fd51:%d::1/64 dev wrnf%ds nodad && "
	       "ip -n %s addr add 10.251.%d.2/24 dev wrnf%dc && "
	       "ip -n %s addr add fd51:%d::2/64 dev wrnf%dc nodad && "
	       "ip -n %s link set wrnf%ds up && ip -n %s link set lo up && "
	       "ip -n %s link set wrnf%dc up && ip -n %s link set lo up && "
	       "ip netns exec %s sysctl -qw net.ipv4.ping_group_range='0 2147483647'",
	       G.ns_s, G.ns_c, getpid(), G.ns_s, getpid(), G.ns_c, G.ns_s, G.k, getpid(), G.ns_s,
	       G.k, getpid(), G.ns_s, G.k, getpid(), G.ns_c, G.k, getpid(), G.ns_c, G.k, getpid(),
	       G.ns_s, getpid(), G.ns_s, G.ns_c, getpid(), G.ns_c, G.ns_c) != 0)
		return -1;
	G.server = fork();
	if (G.server == 0)
		serve();
	usleep(200000);
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	wr_err err = NULL;
	if (G.server > 0) {
		kill(G.server, SIGKILL);
		waitpid(G.server, NULL, 0);
	}
	if (G.nets)
		sh("ip netns del %s 2>/dev/null; ip netns del %s 2>/dev/null", G.ns_s, G.ns_c);
	wr_netfilter_free(G.nf);
	if (G.root && wr_cgroup_root_remove(&G.root, &err) < 0)
		fprintf(stderr, "cgroup teardown: %s\n", err->msg);
	wr_err_free(&err);
	return 0;
}

/* A sandbox-like cgroup with the filter attached, and its leaf "init". */
struct box {
	struct wr_cgroup *cg, *leaf;
	struct wr_netfilter_att *att;
};

static void box_open(struct box *b, const char *name, const struct wr_net_policy *p)
{
	wr_err err = NULL;
	if (wr_cgroup_create(G.root, name, NULL, &b->cg, &err) < 0 ||
	    wr_cgroup_create_leaf(b->cg, "init", &b->leaf, &err) < 0 ||
	    wr_netfilter_attach(G.nf, wr_cgroup_v2_fd(b->cg), p, &b->att, &err) < 0)
		fail_msg("box %s: %s", name, err->msg);
}

static void box_close(struct box *b)
{
	wr_err err = NULL;
	wr_netfilter_detach(G.nf, &b->att);
	wr_cgroup_close(b->leaf);
	if (wr_cgroup_destroy(&b->cg, &err) < 0)
		fail_msg("destroy: %s", err->msg);
}

/* One operation in the client namespace from inside the box. */
enum op { TCP, UDP_SENDTO, UDP_CONNECTED, PING, RAW, PACKET, SCAN };
struct req {
	enum op op;
	char addr[64];
	int port;
};

static int addr_of(const struct req *q, struct sockaddr_storage *ss, socklen_t *len)
{
	memset(ss, 0, sizeof(*ss));
	struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, q->addr, &a4->sin_addr) == 1) {
		a4->sin_family = AF_INET;
		a4->sin_port = htons(q->port);
		*len = sizeof(*a4);
		return AF_INET;
	}
	inet_pton(AF_INET6, q->addr, &a6->sin6_addr);
	a6->sin6_family = AF_INET6;
	a6->sin6_port = htons(q->port);
	*len = sizeof(*a6);
	return AF_INET6;
}

/* Returns 0 or the errno of the operation. */
static int client_op(const struct req *q)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fam = addr_of(q, &ss, &len);
	int s, r = 0;
	switch (q->op) {
	case TCP:
		s = socket(fam, SOCK_STREAM, 0);
		r = connect(s, (struct sockaddr *)&ss, len) < 0 ? errno : 0;
		close(s);
		return r;
	case UDP_SENDTO:
		s = socket(fam, SOCK_DGRAM, 0);
		r = sendto(s, "x", 1, 0, (struct sockaddr *)&ss, len) < 0 ? errno : 0;
		close(s);
		return r;
	case UDP_CONNECTED:
		s = socket(fam, SOCK_DGRAM, 0);
		if (connect(s, (struct sockaddr *)&ss, len) < 0)
			r = errno;
		else
			r = send(s, "x", 1, 0) < 0 ? errno : 0;
		close(s);
		return r;
	case PING: {
		s = socket(fam, SOCK_DGRAM, fam == AF_INET ? IPPROTO_ICMP : IPPROTO_ICMPV6);
		if (s < 0)
			return errno;
		struct icmphdr h = {.type = fam == AF_INET ? ICMP_ECHO : 128};
		r = sendto(s, &h, sizeof(h), 0, (struct sockaddr *)&ss, len) < 0 ? errno : 0;
		close(s);
		return r;
	}
	case RAW:
		s = socket(fam, SOCK_RAW, fam == AF_INET ? IPPROTO_ICMP : IPPROTO_ICMPV6);
		if (s < 0)
			return errno;
		close(s);
		return 0;
	case PACKET:
		s = socket(AF_PACKET, SOCK_RAW, htons(0x0003));
		if (s < 0)
			return errno;
		close(s);
		return 0;
	case SCAN:
		/* every port: returns how many were refused with EPERM */
		for (int p = 1; p <= 65535; p++) {
			struct req one = *q;
			one.port = p;
			addr_of(&one, &ss, &len);
			s = socket(fam, SOCK_STREAM, 0);
			if (connect(s, (struct sockaddr *)&ss, len) < 0 && errno == EPERM)
				r++;
			close(s);
		}
		return r;
	}
	return -1;
}

static int in_box(struct box *b, enum op op, const char *addr, int port)
{
	struct req q = {.op = op, .port = port};
	snprintf(q.addr, sizeof(q.addr), "%s", addr);
	int *res =
	    mmap(NULL, sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(res != MAP_FAILED);
	*res = -1;
	pid_t pid = fork();
	if (pid == 0) {
		wr_err err = NULL;
		if (wr_cgroup_attach(b->leaf, 0, false, &err) < 0 || enter_ns(G.ns_c) < 0)
			_exit(1);
		*res = client_op(&q);
		_exit(0);
	}
	int st;
	waitpid(pid, &st, 0);
	int r = *res;
	munmap(res, sizeof(int));
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	return r;
}

static void rule(struct wr_net_rule *r, const char *cidr, const char *ports, const char *proto)
{
	wr_err err = NULL;
	memset(r, 0, sizeof(*r));
	if (wr_net_rule_parse_cidr(cidr, r, "cidr", &err) < 0 ||
	    wr_net_rule_parse_ports(ports, r, "ports", &err) < 0 ||
	    wr_net_rule_parse_proto(proto, r, "proto", &err) < 0)
		fail_msg("rule: %s", err->msg);
}

static char A1[32], A3[32], A6[64], SNET[32];

static void addrs(void)
{
	snprintf(A1, sizeof(A1), "10.251.%d.1", G.k);
	snprintf(A3, sizeof(A3), "10.251.%d.3", G.k);
	snprintf(A6, sizeof(A6), "fd51:%d::1", G.k);
	snprintf(SNET, sizeof(SNET), "10.251.%d.1/32", G.k);
}

static void test_parse(void **state)
{
	(void)state;
	wr_err err = NULL;
	struct wr_net_rule r;
	assert_int_equal(wr_net_rule_parse_cidr("10.1.2.0/24", &r, "f", &err), 0);
	assert_int_equal(r.family, 4);
	assert_int_equal(r.prefix, 24);
	assert_true(wr_net_rule_parse_cidr("10.1.2.1/24", &r, "network.allow[2].cidr", &err) < 0);
	assert_string_equal(err->field, "network.allow[2].cidr");
	assert_non_null(strstr(err->msg, "host bits"));
	wr_err_free(&err);
	assert_true(wr_net_rule_parse_cidr("10.1.2.0/33", &r, "f", &err) < 0);
	wr_err_free(&err);
	assert_true(wr_net_rule_parse_cidr("pypi.org", &r, "f", &err) < 0);
	wr_err_free(&err);
	assert_int_equal(wr_net_rule_parse_cidr("2001:db8::/32", &r, "f", &err), 0);
	assert_int_equal(r.family, 6);
	assert_int_equal(wr_net_rule_parse_ports("8000-8100", &r, "f", &err), 0);
	assert_int_equal(r.port_lo, 8000);
	assert_int_equal(r.port_hi, 8100);
	assert_true(wr_net_rule_parse_ports("90-80", &r, "f", &err) < 0);
	wr_err_free(&err);
	assert_true(wr_net_rule_parse_ports("65536", &r, "f", &err) < 0);
	wr_err_free(&err);
	assert_true(wr_net_rule_parse_ports("8o", &r, "f", &err) < 0);
	wr_err_free(&err);
	assert_true(wr_net_rule_parse_proto("sctp", &r, "f", &err) < 0);
	wr_err_free(&err);
	char buf[64];
	rule(&r, "10.0.0.0/8", "80", "tcp");
	wr_net_rule_format_cidr(&r, buf, sizeof(buf));
	assert_string_equal(buf, "10.0.0.0/8");
	/* one address under 17 rules of enclosing prefixes: refused */
	struct wr_net_rule many[17];
	for (int i = 0; i < 17; i++) {
		char p[8];
		snprintf(p, sizeof(p), "%d", 1000 + i);
		rule(&many[i], i % 2 ? "10.0.0.0/8" : "10.1.0.0/16", p, "tcp");
	}
	struct wr_net_policy pol = {.mode = WR_NET_ALLOWLIST, .allow = many, .n_allow = 17};
	assert_true(wr_net_policy_validate(&pol, &err) < 0);
	wr_err_free(&err);
	pol.n_allow = 16;
	assert_int_equal(wr_net_policy_validate(&pol, &err), 0);
}

static int count_events(const char *hook, uint16_t port)
{
	int n = 0;
	for (int i = 0; i < G.nev; i++)
		if (strcmp(G.ev[i].hook, hook) == 0 && (!port || G.ev[i].port == port))
			n++;
	return n;
}

static void test_allowlist(void **state)
{
	(void)state;
	addrs();
	struct wr_net_rule r[2];
	rule(&r[0], SNET, "8080", "tcp");
	rule(&r[1], "10.99.0.0/16", "", "any");
	struct wr_net_policy p = {.mode = WR_NET_ALLOWLIST, .allow = r, .n_allow = 2};
	struct box b;
	box_open(&b, "allow", &p);
	G.nev = 0;
	assert_int_equal(in_box(&b, TCP, A1, 8080), 0);
	assert_int_equal(in_box(&b, TCP, A1, 8081), EPERM);
	assert_int_equal(in_box(&b, TCP, A3, 8080), EPERM);
	assert_int_equal(in_box(&b, TCP, A6, 8080), EPERM);
	assert_int_equal(in_box(&b, UDP_SENDTO, A1, 5353), EPERM);
	assert_int_equal(in_box(&b, UDP_CONNECTED, A1, 5353), EPERM);
	assert_int_equal(in_box(&b, UDP_SENDTO, A6, 5353), EPERM);
	assert_int_equal(in_box(&b, PING, A1, 0), EPERM);
	/* an ICMPv6 ping socket is refused itself (sock_create: its sends
	 * could not be refused with an errno, ipv6/ping.c drops the egress
	 * verdict), with an ICMPv6 sock_create event below */
	assert_int_equal(in_box(&b, PING, A6, 0), EPERM);
	assert_int_equal(in_box(&b, RAW, A1, 0), EPERM);
	assert_int_equal(in_box(&b, RAW, A6, 0), EPERM);
	/* AF_PACKET never reaches the cgroup hooks (the kernel runs
	 * sock_create only for inet sockets): sandboxes are refused it by the
	 * capability set (no CAP_NET_RAW), tested end to end. */
	/* loopback is always allowed: nothing listens, so refused by TCP */
	assert_int_equal(in_box(&b, TCP, "127.0.0.1", 1), ECONNREFUSED);
	assert_int_equal(in_box(&b, TCP, "::1", 1), ECONNREFUSED);
	drain_events();
	assert_int_equal(count_events("connect4", 8081), 1);
	assert_int_equal(count_events("connect6", 8080), 1);
	assert_int_equal(count_events("sendmsg4", 5353), 1);
	assert_int_equal(count_events("sendmsg6", 5353), 1);
	assert_true(count_events("sock_create", 0) >= 2);
	/* ping sockets: IPv4 at the skb layer, IPv6 at socket() */
	int e4 = 0, e6 = 0;
	for (int i = 0; i < G.nev; i++) {
		if (G.ev[i].proto != WR_NET_ICMP)
			continue;
		e4 += strcmp(G.ev[i].hook, "egress") == 0 && G.ev[i].family == 4;
		e6 += strcmp(G.ev[i].hook, "sock_create") == 0 && G.ev[i].family == 6;
	}
	assert_true(e4 >= 1 && e6 >= 1);
	for (int i = 0; i < G.nev; i++) {
		assert_string_equal(G.ev[i].layer, "bpf-net");
		assert_int_equal(G.ev[i].cgroup_id, wr_netfilter_att_cgid(b.att));
		assert_true(G.ev[i].time_ns > 1700000000ll * 1000000000ll);
	}
	box_close(&b);
}

/* More rules than the cgroup's local storage holds: the trie in the sbx
 * map (a flat policy has none); updates switch between the two both ways,
 * and a second attach to the same cgroup is refused in both forms. */
static void test_policies_past_the_local_storage(void **state)
{
	(void)state;
	addrs();
	wr_err err = NULL;
	struct wr_net_rule r[20];
	for (int i = 0; i < 19; i++) {
		char a[32];
		snprintf(a, sizeof(a), "10.98.%d.1", i);
		rule(&r[i], a, "80", "tcp");
	}
	rule(&r[19], A1, "8080", "tcp");
	struct wr_net_policy big = {.mode = WR_NET_ALLOWLIST, .allow = r, .n_allow = 20};
	struct wr_net_rule one;
	rule(&one, A1, "8081", "tcp");
	struct wr_net_policy flat = {.mode = WR_NET_ALLOWLIST, .allow = &one, .n_allow = 1};
	struct box b;
	box_open(&b, "trie", &big);
	struct wr_netfilter_att *again = NULL;
	assert_true(wr_netfilter_attach(G.nf, wr_cgroup_v2_fd(b.cg), &big, &again, &err) < 0);
	assert_int_equal(wr_err_code(err), EEXIST);
	wr_err_free(&err);
	assert_int_equal(in_box(&b, TCP, A1, 8080), 0);
	assert_int_equal(in_box(&b, TCP, A1, 8081), EPERM);
	assert_int_equal(wr_netfilter_update(G.nf, b.att, &flat, &err), 0);
	assert_int_equal(in_box(&b, TCP, A1, 8081), 0);
	assert_int_equal(in_box(&b, TCP, A1, 8080), EPERM);
	assert_int_equal(wr_netfilter_update(G.nf, b.att, &big, &err), 0);
	assert_int_equal(in_box(&b, TCP, A1, 8080), 0);
	assert_int_equal(in_box(&b, TCP, A1, 8081), EPERM);
	box_close(&b);
	box_open(&b, "flat", &flat);
	assert_true(wr_netfilter_attach(G.nf, wr_cgroup_v2_fd(b.cg), &flat, &again, &err) < 0);
	assert_int_equal(wr_err_code(err), EEXIST);
	wr_err_free(&err);
	assert_null(again);
	assert_int_equal(in_box(&b, TCP, A1, 8081), 0);
	assert_int_equal(in_box(&b, TCP, A1, 8080), EPERM);
	box_close(&b);
}

static void test_none_and_open(void **state)
{
	(void)state;
	addrs();
	wr_err err = NULL;
	struct wr_net_policy p = {.mode = WR_NET_NONE};
	struct box b;
	box_open(&b, "modes", &p);
	assert_int_equal(in_box(&b, TCP, A1, 8080), EPERM);
	assert_int_equal(in_box(&b, TCP, "127.0.0.1", 1), ECONNREFUSED);
	/* open: everything but the deny set */
	struct wr_net_rule deny[2];
	rule(&deny[0], A3, "", "any");
	rule(&deny[1], "169.254.0.0/16", "", "any");
	assert_int_equal(wr_netfilter_set_deny(G.nf, deny, 2, &err), 0);
	p.mode = WR_NET_OPEN;
	assert_int_equal(wr_netfilter_update(G.nf, b.att, &p, &err), 0);
	assert_int_equal(in_box(&b, TCP, A1, 8081), 0);
	assert_int_equal(in_box(&b, TCP, A6, 8080), 0);
	assert_int_equal(in_box(&b, UDP_SENDTO, A1, 5353), 0);
	assert_int_equal(in_box(&b, PING, A1, 0), 0);
	assert_int_equal(in_box(&b, TCP, A3, 8080), EPERM);
	assert_int_equal(in_box(&b, UDP_SENDTO, "169.254.169.254", 80), EPERM);
	assert_int_equal(in_box(&b, PING, A3, 0), EPERM);
	/* the sandbox's DNS gateway is reachable on 53 only, deny set or not */
	struct wr_net_rule subnet;
	char net[32];
	snprintf(net, sizeof(net), "10.251.%d.0/24", G.k);
	rule(&subnet, net, "", "any");
	assert_int_equal(wr_netfilter_set_deny(G.nf, &subnet, 1, &err), 0);
	p.mode = WR_NET_ALLOWLIST;
	p.has_gw4 = true;
	inet_pton(AF_INET, A1, p.gw4);
	assert_int_equal(wr_netfilter_update(G.nf, b.att, &p, &err), 0);
	assert_int_equal(in_box(&b, UDP_SENDTO, A1, 53), 0);
	assert_int_equal(in_box(&b, UDP_SENDTO, A3, 53), EPERM);
	assert_int_equal(in_box(&b, TCP, A1, 8080), EPERM);
	/* a deny prefix wider than /16, then none: the set follows each change */
	struct wr_net_rule wide;
	rule(&wide, "10.0.0.0/8", "8080", "tcp");
	assert_int_equal(wr_netfilter_set_deny(G.nf, &wide, 1, &err), 0);
	p.mode = WR_NET_OPEN;
	assert_int_equal(wr_netfilter_update(G.nf, b.att, &p, &err), 0);
	assert_int_equal(in_box(&b, TCP, A3, 8080), EPERM);
	assert_int_equal(in_box(&b, TCP, A3, 8081), 0);
	/* open: DNS and DNS-over-TLS to any resolver but its own gateway */
	assert_int_equal(in_box(&b, UDP_SENDTO, A3, 53), EPERM);
	assert_int_equal(in_box(&b, TCP, A3, 53), EPERM);
	assert_int_equal(in_box(&b, TCP, A3, 853), EPERM);
	assert_int_equal(in_box(&b, UDP_SENDTO, A3, 5353), 0);
	assert_int_equal(in_box(&b, UDP_SENDTO, A1, 53), 0);
	assert_int_equal(wr_netfilter_set_deny(G.nf, NULL, 0, &err), 0);
	assert_int_equal(in_box(&b, TCP, A3, 8080), 0);
	box_close(&b);
}

static void test_update_and_dyn(void **state)
{
	(void)state;
	addrs();
	wr_err err = NULL;
	struct wr_net_rule r[2];
	rule(&r[0], SNET, "8080", "tcp");
	rule(&r[1], SNET, "8081", "tcp");
	struct wr_net_policy p = {.mode = WR_NET_ALLOWLIST, .allow = r, .n_allow = 1};
	struct box b;
	box_open(&b, "upd", &p);
	assert_int_equal(in_box(&b, TCP, A1, 8081), EPERM);
	p.n_allow = 2;
	assert_int_equal(wr_netfilter_update(G.nf, b.att, &p, &err), 0);
	assert_int_equal(in_box(&b, TCP, A1, 8081), 0);
	assert_int_equal(in_box(&b, TCP, A1, 8080), 0);
	/* an address learned from DNS, for a while */
	struct wr_net_rule port;
	rule(&port, "0.0.0.0/0", "9000", "tcp");
	uint8_t a3[4];
	inet_pton(AF_INET, A3, a3);
	assert_int_equal(in_box(&b, TCP, A3, 9000), EPERM);
	assert_int_equal(
	    wr_netfilter_allow_addr(G.nf, wr_netfilter_att_cgid(b.att), 4, a3, &port, 1, 60, &err),
	    0);
	assert_int_equal(in_box(&b, TCP, A3, 9000), 0);
	assert_int_equal(in_box(&b, TCP, A3, 8080), EPERM);
	assert_int_equal(wr_netfilter_expire(G.nf), 0); /* not expired yet */
	/* a TTL of 1 s: refused once it has passed, then swept */
	port.port_lo = port.port_hi = 8081;
	uint8_t a1[4];
	inet_pton(AF_INET, A1, a1);
	assert_int_equal(
	    wr_netfilter_allow_addr(G.nf, wr_netfilter_att_cgid(b.att), 4, a1, &port, 1, 1, &err),
	    0);
	p.n_allow = 1; /* A1:8081 only through the learned address now */
	assert_int_equal(wr_netfilter_update(G.nf, b.att, &p, &err), 0);
	assert_int_equal(in_box(&b, TCP, A1, 8081), 0);
	usleep(1100000);
	assert_int_equal(in_box(&b, TCP, A1, 8081), EPERM);
	assert_int_equal(wr_netfilter_expire(G.nf), 1);
	/* then none: new connections refused */
	p.mode = WR_NET_NONE;
	assert_int_equal(wr_netfilter_update(G.nf, b.att, &p, &err), 0);
	assert_int_equal(in_box(&b, TCP, A1, 8080), EPERM);
	assert_int_equal(in_box(&b, TCP, A3, 9000), EPERM);
	box_close(&b);
}

/* A TCP connection and a connected UDP socket opened under policy p, then
 * used again after the switch to q: res[0] the TCP echo (0 or errno),
 * res[1] the UDP send (0 or errno). */
static void established(struct box *b, const struct wr_net_policy *q, int *res)
{
	wr_err err = NULL;
	int *shared =
	    mmap(NULL, 2 * sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int ready[2], go[2];
	assert_int_equal(pipe(ready), 0);
	assert_int_equal(pipe(go), 0);
	pid_t pid = fork();
	if (pid == 0) {
		if (wr_cgroup_attach(b->leaf, 0, false, &err) < 0 || enter_ns(G.ns_c) < 0)
			_exit(1);
		struct sockaddr_in t = {.sin_family = AF_INET, .sin_port = htons(9000)};
		struct sockaddr_in u = {.sin_family = AF_INET, .sin_port = htons(5353)};
		inet_pton(AF_INET, A1, &t.sin_addr);
		inet_pton(AF_INET, A1, &u.sin_addr);
		int ts = socket(AF_INET, SOCK_STREAM, 0), us = socket(AF_INET, SOCK_DGRAM, 0);
		if (connect(ts, (struct sockaddr *)&t, sizeof(t)) < 0 ||
		    connect(us, (struct sockaddr *)&u, sizeof(u)) < 0)
			_exit(2);
		char c = 0;
		if (write(ready[1], "r", 1) != 1 || read(go[0], &c, 1) != 1)
			_exit(3);
		struct timeval tv = {2, 0};
		setsockopt(ts, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		char buf[8];
		shared[0] = write(ts, "ping", 4) != 4	      ? errno
			    : read(ts, buf, sizeof(buf)) == 4 ? 0
							      : (errno ? errno : EIO);
		shared[1] = send(us, "x", 1, 0) < 0 ? errno : 0;
		_exit(0);
	}
	char c;
	assert_int_equal(read(ready[0], &c, 1), 1);
	assert_int_equal(wr_netfilter_update(G.nf, b->att, q, &err), 0);
	assert_int_equal(write(go[1], "g", 1), 1);
	int st;
	waitpid(pid, &st, 0);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	res[0] = shared[0];
	res[1] = shared[1];
	munmap(shared, 2 * sizeof(int));
	close(ready[0]);
	close(ready[1]);
	close(go[0]);
	close(go[1]);
}

static void test_open_connections(void **state)
{
	(void)state;
	addrs();
	struct wr_net_policy open = {.mode = WR_NET_OPEN};
	struct wr_net_policy none = {.mode = WR_NET_NONE};
	struct box b;
	box_open(&b, "est", &open);
	int res[2];
	/* documented: established TCP survives, datagrams are checked each */
	established(&b, &none, res);
	assert_int_equal(res[0], 0);
	assert_int_equal(res[1], EPERM);
	assert_int_equal(in_box(&b, TCP, A1, 9000), EPERM);
	/* a policy that cuts established connections too */
	struct wr_net_policy cut = {.mode = WR_NET_NONE, .cut_established = true};
	wr_err err = NULL;
	assert_int_equal(wr_netfilter_update(G.nf, b.att, &open, &err), 0);
	established(&b, &cut, res);
	assert_int_not_equal(res[0], 0); /* the segments are dropped: EPERM or a timeout */
	assert_int_equal(res[1], EPERM);
	box_close(&b);
}

static void test_port_scan(void **state)
{
	(void)state;
	addrs();
	wr_err err = NULL;
	struct wr_net_policy p = {.mode = WR_NET_ALLOWLIST};
	struct box b;
	box_open(&b, "scan", &p);
	drain_events();
	G.nev = 0;
	G.ev_count = 0;
	uint64_t t0 = wr_now_ns();
	assert_int_equal(in_box(&b, SCAN, A1, 0), 65535);
	double secs = (double)(wr_now_ns() - t0) / 1e9;
	drain_events();
	struct wr_net_counters c;
	assert_int_equal(wr_netfilter_counters(G.nf, wr_netfilter_att_cgid(b.att), &c, &err), 0);
	assert_int_equal(c.refused, 65535);
	/* every refusal is in an event's count or still pending */
	assert_int_equal(G.ev_count + c.suppressed, 65535);
	/* bounded: the burst, then 10 a second */
	assert_true(G.nev <= 16 + (int)(secs * 10) + 2);
	print_message("scan: %.2f s, %d events, %llu suppressed\n", secs, G.nev,
		      (unsigned long long)c.suppressed);
	box_close(&b);
}

/* Links of BPF programs on these cgroups, found as bpftool link does. */
static int links_on(const uint64_t *ids, int n)
{
	uint32_t id = 0;
	int count = 0;
	while (bpf_link_get_next_id(id, &id) == 0) {
		_cleanup_close_ int fd = bpf_link_get_fd_by_id(id);
		if (fd < 0)
			continue;
		struct bpf_link_info info;
		uint32_t len = sizeof(info);
		memset(&info, 0, sizeof(info));
		if (bpf_obj_get_info_by_fd(fd, &info, &len) < 0 ||
		    info.type != BPF_LINK_TYPE_CGROUP)
			continue;
		for (int i = 0; i < n; i++)
			if (info.cgroup.cgroup_id == ids[i])
				count++;
	}
	return count;
}

static void test_many(void **state)
{
	(void)state;
	enum { N = 500 };
	struct box *b = calloc(N, sizeof(*b));
	uint64_t *ids = calloc(N, sizeof(*ids));
	struct wr_net_rule r;
	rule(&r, "10.0.0.0/8", "443", "tcp");
	struct wr_net_policy p = {.mode = WR_NET_ALLOWLIST, .allow = &r, .n_allow = 1};
	wr_err err = NULL;
	for (int i = 0; i < N; i++) {
		char name[32];
		snprintf(name, sizeof(name), "m%d", i);
		if (wr_cgroup_create(G.root, name, NULL, &b[i].cg, &err) < 0 ||
		    wr_netfilter_attach(G.nf, wr_cgroup_v2_fd(b[i].cg), &p, &b[i].att, &err) < 0)
			fail_msg("box %d: %s", i, err->msg);
		ids[i] = wr_netfilter_att_cgid(b[i].att);
	}
	assert_int_equal(links_on(ids, N), N * 6);
	for (int i = 0; i < N; i++) {
		wr_netfilter_detach(G.nf, &b[i].att);
		assert_null(b[i].att);
	}
	assert_int_equal(links_on(ids, N), 0);
	for (int i = 0; i < N; i++)
		if (wr_cgroup_destroy(&b[i].cg, &err) < 0)
			fail_msg("destroy: %s", err->msg);
	free(b);
	free(ids);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parse),
	    cmocka_unit_test(test_allowlist),
	    cmocka_unit_test(test_none_and_open),
	    cmocka_unit_test(test_policies_past_the_local_storage),
	    cmocka_unit_test(test_update_and_dyn),
	    cmocka_unit_test(test_open_connections),
	    cmocka_unit_test(test_port_scan),
	    cmocka_unit_test(test_many),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
