/* bench_net_connect N ROUNDS: connect()+close() latency to a TCP listener
 * in another network namespace (veth), from a process in a cgroup with the
 * network filter attached (allowlist, 16 rules, the match the most
 * specific) against one in a cgroup without it; interleaved rounds, same
 * namespaces. Prints one JSON line (bench/run_net.sh writes
 * bench/results/net.md). Everything made here carries the pid in its name
 * and is removed on exit. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"
#include "isolate/cgroup.h"
#include "isolate/netfilter.h"

static char ns_s[64], ns_c[64], addr[32];

static int sh(const char *cmd)
{
	return system(cmd);
}

static int enter(const char *name)
{
	char p[128];
	snprintf(p, sizeof(p), "/run/netns/%s", name);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	int r = fd < 0 ? -1 : setns(fd, CLONE_NEWNET);
	if (fd >= 0)
		close(fd);
	return r;
}

static void *server(void *arg)
{
	(void)arg;
	if (enter(ns_s) < 0)
		return NULL;
	int s = socket(AF_INET, SOCK_STREAM, 0), on = 1;
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(8080)};
	bind(s, (struct sockaddr *)&a, sizeof(a));
	listen(s, 4096);
	for (;;) {
		int c = accept(s, NULL, NULL);
		if (c >= 0)
			close(c);
	}
	return NULL;
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* n connects from a child in cg's leaf; latencies (ns) into out. */
static int run(struct wr_cgroup *leaf, int n, uint64_t *out)
{
	pid_t pid = fork();
	if (pid == 0) {
		wr_err err = NULL;
		if (wr_cgroup_attach(leaf, 0, false, &err) < 0 || enter(ns_c) < 0)
			_exit(1);
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(8080)};
		inet_pton(AF_INET, addr, &a.sin_addr);
		for (int i = 0; i < n; i++) {
			int s = socket(AF_INET, SOCK_STREAM, 0);
			uint64_t t0 = wr_now_ns();
			int r = connect(s, (struct sockaddr *)&a, sizeof(a));
			out[i] = wr_now_ns() - t0;
			/* RST, no TIME_WAIT: the ephemeral ports never run short */
			struct linger lg = {1, 0};
			setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
			close(s);
			if (r < 0)
				_exit(2);
		}
		_exit(0);
	}
	int st;
	waitpid(pid, &st, 0);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 20000;
	int rounds = argc > 2 ? atoi(argv[2]) : 10;
	int per = n / rounds;
	int k = 100 + getpid() % 100;
	snprintf(ns_s, sizeof(ns_s), "wrnb%d-s", getpid());
	snprintf(ns_c, sizeof(ns_c), "wrnb%d-c", getpid());
	snprintf(addr, sizeof(addr), "10.252.%d.1", k);
	char cmd[1024], base[64];
	snprintf(cmd, sizeof(cmd),
		 "ip netns add %s && ip netns add %s && "
		 "ip link add wrnb%ds netns %s type veth peer name wrnb%dc netns %s && "
		 "ip -n %s addr add 10.252.%d.1/24 dev wrnb%ds && "
		 "ip -n %s addr add 10.252.%d.2/24 dev wrnb%dc && "
		 "ip -n %s link set wrnb%ds up && ip -n %s link set wrnb%dc up",
		 ns_s, ns_c, getpid(), ns_s, getpid(), ns_c, ns_s, k, getpid(), ns_c, k, getpid(),
		 ns_s, getpid(), ns_c, getpid());
	int status = 1;
	wr_err err = NULL;
	struct wr_cgroup_root *root = NULL;
	struct wr_netfilter *nf = NULL;
	struct wr_cgroup *cg[2] = {0}, *leaf[2] = {0};
	struct wr_netfilter_att *att = NULL;
	/* shared with the forked clients, which write their latencies here */
	uint64_t *lat[2];
	for (int i = 0; i < 2; i++)
		lat[i] = mmap(NULL, (size_t)n * 8, PROT_READ | PROT_WRITE,
			      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh(cmd) != 0)
		goto out;
	pthread_t th;
	pthread_create(&th, NULL, server, NULL);
	usleep(200000);
	snprintf(base, sizeof(base), "wrnb-%d", getpid());
	if (wr_cgroup_root_open(base, &root, &err) < 0 || wr_netfilter_load(NULL, &nf, &err) < 0)
		goto out;
	struct wr_net_rule rules[16];
	for (int i = 0; i < 16; i++) {
		char c[32];
		snprintf(c, sizeof(c), i == 15 ? "10.252.%d.0/24" : "10.%d.0.0/16",
			 i == 15 ? k : i);
		memset(&rules[i], 0, sizeof(rules[i]));
		wr_net_rule_parse_cidr(c, &rules[i], "cidr", &err);
		wr_net_rule_parse_ports(i == 15 ? "8000-8100" : "443", &rules[i], "ports", &err);
		rules[i].proto = WR_NET_TCP;
	}
	struct wr_net_policy p = {.mode = WR_NET_ALLOWLIST, .allow = rules, .n_allow = 16};
	/* a deny set like the daemon's: link-local, metadata, host addresses */
	static const char *const deny_cidrs[] = {
	    "169.254.0.0/16",  "fe80::/10",	"100.100.100.200/32", "fd00:ec2::254/128",
	    "192.168.1.10/32", "172.17.0.1/32", "10.88.0.0/16",	      "2001:db8:1::10/128"};
	struct wr_net_rule deny[8];
	for (int i = 0; i < 8; i++) {
		memset(&deny[i], 0, sizeof(deny[i]));
		wr_net_rule_parse_cidr(deny_cidrs[i], &deny[i], "deny", &err);
		deny[i].port_hi = 65535;
	}
	if (err || wr_netfilter_set_deny(nf, deny, 8, &err) < 0)
		goto out;
	const char *names[2] = {"plain", "filtered"};
	for (int i = 0; i < 2; i++)
		if (wr_cgroup_create(root, names[i], NULL, &cg[i], &err) < 0 ||
		    wr_cgroup_create_leaf(cg[i], "init", &leaf[i], &err) < 0)
			goto out;
	if (wr_netfilter_attach(nf, wr_cgroup_v2_fd(cg[1]), &p, &att, &err) < 0)
		goto out;
	uint64_t warm[200];
	run(leaf[0], 200, warm);
	run(leaf[1], 200, warm);
	for (int r = 0; r < rounds; r++)
		for (int m = 0; m < 2; m++) {
			int mm = (r % 2) ? 1 - m : m; /* alternate which goes first */
			if (run(leaf[mm], per, lat[mm] + r * per) < 0) {
				fprintf(stderr, "bench_net_connect: connect failed (%s)\n",
					names[mm]);
				goto out;
			}
		}
	double p50[2], mean[2], p99[2];
	for (int m = 0; m < 2; m++) {
		int tot = per * rounds;
		double sum = 0;
		for (int i = 0; i < tot; i++)
			sum += (double)lat[m][i];
		qsort(lat[m], tot, 8, cmp);
		p50[m] = (double)lat[m][tot / 2] / 1000.0;
		p99[m] = (double)lat[m][tot * 99 / 100] / 1000.0;
		mean[m] = sum / tot / 1000.0;
	}
	printf("{\"n\": %d, \"rounds\": %d, \"plain_p50_us\": %.2f, \"filtered_p50_us\": %.2f, "
	       "\"plain_mean_us\": %.2f, \"filtered_mean_us\": %.2f, \"plain_p99_us\": %.2f, "
	       "\"filtered_p99_us\": %.2f, \"overhead_p50\": %.4f, \"overhead_mean\": %.4f}\n",
	       per * rounds, rounds, p50[0], p50[1], mean[0], mean[1], p99[0], p99[1],
	       p50[1] / p50[0] - 1, mean[1] / mean[0] - 1);
	status = 0;
out:
	if (err)
		fprintf(stderr, "bench_net_connect: %s\n", err->msg);
	wr_netfilter_detach(nf, &att);
	for (int i = 0; i < 2; i++) {
		wr_cgroup_close(leaf[i]);
		if (cg[i])
			wr_cgroup_destroy(&cg[i], &err);
	}
	wr_netfilter_free(nf);
	if (root)
		wr_cgroup_root_remove(&root, &err);
	snprintf(cmd, sizeof(cmd), "ip netns del %s 2>/dev/null; ip netns del %s 2>/dev/null", ns_s,
		 ns_c);
	sh(cmd);
	return status;
}
