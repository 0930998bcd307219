/* bench_net N ROUNDS IMAGE: "create a sandbox + exec /bin/true + destroy it"
 * with the container tier, offline (a private network namespace made by the
 * sandbox's PID 1, as ever) next to networked (a namespace from the pool:
 * bridge, veth, address and route made beforehand by the pool's refill
 * thread; returned to its rate-limited teardown after the destroy).
 *
 * The process first moves into a network namespace of its own, so the
 * pool's bridge and veths live and die with it. Modes alternate in ROUNDS
 * rounds of N / ROUNDS cycles each, so drift on a shared machine hits both
 * alike; the pool's background work (refill, teardown) runs during the
 * timed cycles, as it does in the daemon. Prints one JSON object: p50, p90,
 * mean per mode (ms), and the ratio of the p50s.
 *
 * Environment as bench_spawn: WARREN_INIT, WARREN_STATE_DIR, WARREN_RUN_DIR,
 * WARREN_CGROUP_BASE. BENCH_NET_POOL: pool size (default 32). */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "isolate/netpool.h"
#include "isolate/rtnl.h"
#include "tiers/container.h"

static struct wr_netpool *g_pool;

static int cycle(const char *image, bool net, uint64_t *ns)
{
	static const char *const argv[] = {"/bin/true", NULL};
	struct wr_sandbox_spec spec = {.image = image};
	struct wr_exec_spec xs = {.argv = argv, .user = -1, .group = -1, .stdin_fd = -1};
	struct wr_exec_result res = {0};
	struct wr_sandbox *sb = NULL;
	struct wr_netns_lease *l = NULL;
	struct wr_sandbox_net tn;
	wr_err err = NULL;
	uint64_t t0 = wr_now_ns();
	int rc = 0;
	if (net) {
		rc = wr_netpool_take(g_pool, &l, &err);
		if (rc == 0) {
			tn = (struct wr_sandbox_net){.netns_fd = l->netns_fd,
						     .sysfs_fd = l->sysfs_fd,
						     .resolv_conf = "nameserver 10.202.0.1\n",
						     .hosts = "127.0.0.1\tlocalhost\n"};
			spec.net = &tn;
		}
	}
	if (rc == 0)
		rc = wr_container_create(&spec, &sb, &err);
	if (rc == 0) {
		rc = wr_container_exec(sb, &xs, &res, &err);
		if (rc == 0 && (res.reason != WR_EXIT_EXITED || res.exit_code != 0)) {
			fprintf(stderr, "bench_net: /bin/true: %s %d\n",
				wr_exit_reason_name(res.reason), res.exit_code);
			rc = -1;
		}
		wr_exec_result_free(&res);
		if (wr_container_destroy(&sb, rc < 0 ? NULL : &err) < 0)
			rc = -1;
	}
	if (l)
		wr_netpool_release(g_pool, l);
	*ns = wr_now_ns() - t0;
	if (rc < 0)
		fprintf(stderr, "bench_net: %s\n", err && err->msg ? err->msg : "cycle failed");
	wr_err_free(&err);
	return rc;
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void stats(const char *name, uint64_t *v, size_t n, double *p50)
{
	qsort(v, n, sizeof(*v), cmp);
	double sum = 0;
	for (size_t i = 0; i < n; i++)
		sum += (double)v[i];
	*p50 = (double)v[n / 2] / 1e6;
	printf("  \"%s\": {\"n\": %zu, \"p50_ms\": %.3f, \"p90_ms\": %.3f, \"mean_ms\": %.3f},\n",
	       name, n, *p50, (double)v[n * 9 / 10] / 1e6, sum / (double)n / 1e6);
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: bench_net N ROUNDS IMAGE\n");
		return 2;
	}
	size_t n = (size_t)atol(argv[1]), rounds = (size_t)atol(argv[2]);
	const char *image = argv[3];
	if (n < 2 || rounds < 1 || rounds > n) {
		fprintf(stderr, "bench_net: bad N or ROUNDS\n");
		return 2;
	}
	if (unshare(CLONE_NEWNET) < 0) {
		perror("bench_net: unshare");
		return 3;
	}
	wr_err err = NULL;
	struct wr_rtnl nl;
	if (wr_rtnl_open(&nl, &err) < 0 || wr_rtnl_link_set(&nl, 1, true, 0, &err) < 0) {
		fprintf(stderr, "bench_net: lo: %s\n", err->msg);
		return 3;
	}
	wr_rtnl_close(&nl);
	struct wr_container_config cfg = {
	    .state_dir = getenv("WARREN_STATE_DIR"),
	    .run_dir = getenv("WARREN_RUN_DIR"),
	    .init_path = getenv("WARREN_INIT"),
	    .cgroup_base = getenv("WARREN_CGROUP_BASE"),
	};
	const char *ps = getenv("BENCH_NET_POOL");
	struct wr_netpool_config pc = {.bridge = "wrbench0",
				       .range = "10.202.0.0/16",
				       .size = ps ? (unsigned)atoi(ps) : 32,
				       .teardown_per_sec = 200};
	if (wr_container_init(&cfg, &err) < 0 ||
	    wr_netpool_start(&pc, NULL, 0, &g_pool, &err) < 0) {
		fprintf(stderr, "bench_net: %s\n", err->msg);
		return 3;
	}
	/* a full pool before timing, as a daemon that has been up a while */
	struct wr_netpool_stats st;
	for (int i = 0; i < 3000; i++) {
		wr_netpool_stats(g_pool, &st);
		if (st.ready >= pc.size)
			break;
		usleep(1000);
	}
	uint64_t *off = calloc(n, sizeof(*off)), *on = calloc(n, sizeof(*on));
	size_t no = 0, nn = 0, per = n / rounds;
	int rc = 0;
	uint64_t ns;
	/* warm-up: caches of the image, seccomp, stacks */
	for (int i = 0; i < 3 && rc == 0; i++)
		rc = cycle(image, false, &ns) | cycle(image, true, &ns);
	for (size_t r = 0; r < rounds && rc == 0; r++) {
		bool first_net = r % 2;
		for (int m = 0; m < 2 && rc == 0; m++) {
			bool net = m == 0 ? first_net : !first_net;
			size_t k = r == rounds - 1 ? n - r * per : per;
			for (size_t i = 0; i < k && rc == 0; i++) {
				rc = cycle(image, net, &ns);
				if (net)
					on[nn++] = ns;
				else
					off[no++] = ns;
			}
		}
	}
	wr_netpool_stats(g_pool, &st);
	wr_netpool_stop(&g_pool, true);
	if (rc < 0)
		return 1;
	double p_off, p_on;
	printf("{\n");
	stats("offline", off, no, &p_off);
	stats("networked", on, nn, &p_on);
	printf("  \"pool_size\": %u, \"pool_waits\": %llu, \"ratio_p50\": %.3f\n}\n", pc.size,
	       (unsigned long long)st.waited, p_on / p_off);
	free(off);
	free(on);
	return 0;
}
