/* bench_net_connect N ROUNDS: connect() latency to a TCP listener in
 * another network namespace (veth), from processes in three cgroups, same
 * namespaces, interleaved rounds:
 *   plain     no program
 *   floor     programs on the same six hooks that allow at once (two
 *             instructions): what running cgroup hooks at all costs
 *   filtered  the network filter (allowlist, 16 rules, the match the most
 *             specific; a deny set like the daemon's)
 * then a profiling pass (BPF_ENABLE_STATS: the kernel's run_time_ns and
 * run_cnt of each program attached to the filtered cgroup), outside the
 * timed rounds since the statistics cost time themselves. Prints one JSON
 * line (bench/run_net_connect.sh writes bench/results/net.md). Everything
 * made here carries the pid in its name and is removed on exit. */
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

#include <bpf/bpf.h>
#include <linux/bpf.h>

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

/* The six hooks of the filter, with programs that return "allow" at once. */
static const struct {
	enum bpf_prog_type type;
	enum bpf_attach_type at;
} hooks[6] = {{BPF_PROG_TYPE_CGROUP_SOCK, BPF_CGROUP_INET_SOCK_CREATE},
	      {BPF_PROG_TYPE_CGROUP_SOCK_ADDR, BPF_CGROUP_INET4_CONNECT},
	      {BPF_PROG_TYPE_CGROUP_SOCK_ADDR, BPF_CGROUP_INET6_CONNECT},
	      {BPF_PROG_TYPE_CGROUP_SOCK_ADDR, BPF_CGROUP_UDP4_SENDMSG},
	      {BPF_PROG_TYPE_CGROUP_SOCK_ADDR, BPF_CGROUP_UDP6_SENDMSG},
	      {BPF_PROG_TYPE_CGROUP_SKB, BPF_CGROUP_INET_EGRESS}};

static int floor_attach(int cgfd, int *links)
{
	struct bpf_insn allow[2] = {
	    {.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 1},
	    {.code = BPF_JMP | BPF_EXIT}};
	for (int i = 0; i < 6; i++) {
		LIBBPF_OPTS(bpf_prog_load_opts, o, .expected_attach_type = hooks[i].at);
		int fd = bpf_prog_load(hooks[i].type, "wrnb_allow", "GPL", allow, 2, &o);
		if (fd < 0)
			return -1;
		links[i] = bpf_link_create(fd, cgfd, hooks[i].at, NULL);
		close(fd); /* the link holds the program */
		if (links[i] < 0)
			return -1;
	}
	return 0;
}

/* Average run time (ns) of the programs on cgfd's hooks, from the kernel's
 * statistics; the count of runs into cnt. */
static void prog_stats(int cgfd, double *avg, uint64_t *cnt)
{
	for (int i = 0; i < 6; i++) {
		__u32 ids[4], n = 4;
		avg[i] = 0;
		cnt[i] = 0;
		if (bpf_prog_query(cgfd, hooks[i].at, 0, NULL, ids, &n) < 0 || n == 0)
			continue;
		int fd = bpf_prog_get_fd_by_id(ids[0]);
		struct bpf_prog_info info;
		__u32 len = sizeof(info);
		memset(&info, 0, sizeof(info));
		if (fd >= 0 && bpf_obj_get_info_by_fd(fd, &info, &len) == 0 && info.run_cnt) {
			avg[i] = (double)info.run_time_ns / (double)info.run_cnt;
			cnt[i] = info.run_cnt;
		}
		if (fd >= 0)
			close(fd);
	}
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
	struct wr_cgroup *cg[3] = {0}, *leaf[3] = {0};
	int floor_links[6] = {-1, -1, -1, -1, -1, -1};
	struct wr_netfilter_att *att = NULL;
	/* shared with the forked clients, which write their latencies here */
	uint64_t *lat[3];
	for (int i = 0; i < 3; i++)
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
	const char *names[3] = {"plain", "floor", "filtered"};
	for (int i = 0; i < 3; i++)
		if (wr_cgroup_create(root, names[i], NULL, &cg[i], &err) < 0 ||
		    wr_cgroup_create_leaf(cg[i], "init", &leaf[i], &err) < 0)
			goto out;
	if (wr_netfilter_attach(nf, wr_cgroup_v2_fd(cg[2]), &p, &att, &err) < 0)
		goto out;
	if (floor_attach(wr_cgroup_v2_fd(cg[1]), floor_links) < 0) {
		perror("bench_net_connect: floor programs");
		goto out;
	}
	uint64_t warm[200];
	for (int m = 0; m < 3; m++)
		run(leaf[m], 200, warm);
	for (int r = 0; r < rounds; r++)
		for (int m = 0; m < 3; m++) {
			int mm = (m + r) % 3; /* rotate which goes first */
			if (run(leaf[mm], per, lat[mm] + r * per) < 0) {
				fprintf(stderr, "bench_net_connect: connect failed (%s)\n",
					names[mm]);
				goto out;
			}
		}
	/* the profile, untimed: 5000 connects with the statistics on */
	double avg[6] = {0}, favg[6] = {0};
	uint64_t cnt[6] = {0}, fcnt[6] = {0};
	int stats = bpf_enable_stats(BPF_STATS_RUN_TIME);
	if (stats >= 0) {
		uint64_t *prof =
		    mmap(NULL, 5000 * 8, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (prof != MAP_FAILED) {
			run(leaf[2], 5000, prof);
			run(leaf[1], 5000, prof);
			munmap(prof, 5000 * 8);
		}
		prog_stats(wr_cgroup_v2_fd(cg[2]), avg, cnt);
		prog_stats(wr_cgroup_v2_fd(cg[1]), favg, fcnt);
		close(stats);
	}
	double p50[3], mean[3], p99[3];
	for (int m = 0; m < 3; m++) {
		int tot = per * rounds;
		double sum = 0;
		for (int i = 0; i < tot; i++)
			sum += (double)lat[m][i];
		qsort(lat[m], tot, 8, cmp);
		p50[m] = (double)lat[m][tot / 2] / 1000.0;
		p99[m] = (double)lat[m][tot * 99 / 100] / 1000.0;
		mean[m] = sum / tot / 1000.0;
	}
	printf("{\"n\": %d, \"rounds\": %d", per * rounds, rounds);
	for (int m = 0; m < 3; m++)
		printf(", \"%s_p50_us\": %.3f, \"%s_mean_us\": %.3f, \"%s_p99_us\": %.3f", names[m],
		       p50[m], names[m], mean[m], names[m], p99[m]);
	printf(", \"overhead_p50\": %.4f, \"overhead_mean\": %.4f, \"floor_overhead_p50\": %.4f, "
	       "\"floor_overhead_mean\": %.4f, \"programs\": {",
	       p50[2] / p50[0] - 1, mean[2] / mean[0] - 1, p50[1] / p50[0] - 1,
	       mean[1] / mean[0] - 1);
	static const char *const hn[6] = {"sock_create", "connect4", "connect6",
					  "sendmsg4",	 "sendmsg6", "egress"};
	for (int i = 0; i < 6; i++)
		printf(
		    "%s\"%s\": {\"ns_per_run\": %.1f, \"runs\": %llu, \"floor_ns_per_run\": %.1f}",
		    i ? ", " : "", hn[i], avg[i], (unsigned long long)cnt[i], favg[i]);
	printf("}}\n");
	status = 0;
out:
	if (err)
		fprintf(stderr, "bench_net_connect: %s\n", err->msg);
	wr_netfilter_detach(nf, &att);
	for (int i = 0; i < 6; i++)
		if (floor_links[i] >= 0)
			close(floor_links[i]);
	for (int i = 0; i < 3; i++) {
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
