/* bench_microvm: the microVM tier's numbers (issue 9), in-process.
 *
 *   bench_microvm KERNEL INITRD IMAGE.erofs
 *
 * Environment: BENCH_MVM_COLD (cold boots, default 3), BENCH_MVM_RESTORE
 * (sequential restores, default 10), BENCH_MVM_IDLE (idle VMs measured for
 * memory, default 3), BENCH_MVM_PAR_N (create+exec+destroy per worker at
 * concurrency 2, default 8), WARREN_STATE_DIR, WARREN_RUN_DIR and
 * BENCH_MVM_TEMPLATES (a tmpfs directory) for the tier's files.
 *
 * Measures
 *   cold_ms      create (cold boot) + first exec of `true`
 *   build_ms     the first create with templates on: boot, snapshot,
 *                publish, then restore + first exec
 *   restore_ms   create (restore from the template) + first exec of `true`
 *   rss/pss_kib  of each idle QEMU (smaps_rollup), restored and cold, after
 *                the guests settled for 2 s
 *   par2_per_sec creates (restore + exec `true` + destroy) per second with
 *                two workers
 * Each worker is a thread that lives as long as its VMs (QEMU gets
 * PDEATHSIG from the thread that forked it, as in warrend's create lanes).
 * Prints one JSON object on stdout. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tiers/microvm.h"

static const char *g_image;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static unsigned env_n(const char *k, unsigned def)
{
	const char *v = getenv(k);
	return v && atoi(v) > 0 ? (unsigned)atoi(v) : def;
}

static void die(const char *what, wr_err err)
{
	fprintf(stderr, "bench_microvm: %s: %s\n", what, err && err->msg ? err->msg : "?");
	exit(1);
}

static struct wr_vm *make(bool cold, const char *id)
{
	struct wr_vm_spec spec = {.image = g_image,
				  .memory_bytes = 256ull << 20,
				  .disk_bytes = 256ull << 20,
				  .cold = cold,
				  .id = id};
	struct wr_vm *vm = NULL;
	wr_err err = NULL;
	if (wr_vm_create(&spec, &vm, &err) < 0)
		die("create", err);
	if (!cold && !wr_vm_restored(vm))
		fprintf(stderr, "bench_microvm: not restored: %s\n", wr_vm_template_note(vm));
	return vm;
}

static void run_true(struct wr_vm *vm)
{
	const char *argv[] = {"true", NULL};
	struct wr_exec_spec ex = {
	    .argv = argv, .user = -1, .group = -1, .timeout_ms = 60000, .stdin_fd = -1};
	struct wr_exec_result res;
	wr_err err = NULL;
	if (wr_vm_exec(vm, &ex, &res, &err) < 0)
		die("exec", err);
	if (res.exit_code != 0)
		fprintf(stderr, "bench_microvm: true exited %d\n", res.exit_code);
	wr_exec_result_free(&res);
}

/* create + first exec, in ms */
static double timed(bool cold, const char *id, struct wr_vm **keep)
{
	uint64_t t = now_ns();
	struct wr_vm *vm = make(cold, id);
	run_true(vm);
	double ms = (double)(now_ns() - t) / 1e6;
	if (keep)
		*keep = vm;
	else
		wr_vm_destroy(&vm, NULL);
	return ms;
}

static void smaps(pid_t pid, long *rss, long *pss)
{
	char p[64], line[256];
	snprintf(p, sizeof(p), "/proc/%d/smaps_rollup", (int)pid);
	FILE *f = fopen(p, "re");
	*rss = *pss = -1;
	while (f && fgets(line, sizeof(line), f)) {
		sscanf(line, "Rss: %ld kB", rss);
		sscanf(line, "Pss: %ld kB", pss);
	}
	if (f)
		fclose(f);
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void series(const char *name, double *v, unsigned n, bool last)
{
	qsort(v, n, sizeof(*v), cmp);
	double sum = 0;
	for (unsigned i = 0; i < n; i++)
		sum += v[i];
	printf("  \"%s\": {\"n\": %u, \"p50\": %.1f, \"min\": %.1f, \"max\": %.1f, "
	       "\"mean\": %.1f}%s\n",
	       name, n, v[n / 2], v[0], v[n - 1], sum / n, last ? "" : ",");
}

/* Keeps n idle VMs (restored or cold) alive on this thread, measures
 * their QEMUs, then destroys them. */
struct idle {
	bool cold;
	unsigned n;
	double rss, pss; /* KiB, means */
};

static void *idle_main(void *arg)
{
	struct idle *m = arg;
	struct wr_vm *vms[16];
	for (unsigned i = 0; i < m->n; i++) {
		char id[32];
		snprintf(id, sizeof(id), "bench-idle-%s-%u", m->cold ? "c" : "r", i);
		vms[i] = make(m->cold, id);
		run_true(vms[i]);
	}
	sleep(2);
	for (unsigned i = 0; i < m->n; i++) {
		long rss, pss;
		smaps(wr_vm_qemu_pid(vms[i]), &rss, &pss);
		m->rss += (double)rss / m->n;
		m->pss += (double)pss / m->n;
	}
	for (unsigned i = 0; i < m->n; i++)
		wr_vm_destroy(&vms[i], NULL);
	return NULL;
}

struct worker {
	unsigned n, k;
};

static void *par_main(void *arg)
{
	struct worker *w = arg;
	for (unsigned i = 0; i < w->n; i++) {
		char id[32];
		snprintf(id, sizeof(id), "bench-par-%u-%u", w->k, i);
		struct wr_vm *vm = make(false, id);
		run_true(vm);
		wr_vm_destroy(&vm, NULL);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: bench_microvm KERNEL INITRD IMAGE.erofs\n");
		return 2;
	}
	g_image = argv[3];
	struct wr_microvm_config cfg = {.kernel = argv[1],
					.initrd = argv[2],
					.state_dir = getenv("WARREN_STATE_DIR"),
					.run_dir = getenv("WARREN_RUN_DIR"),
					.template_dir = getenv("BENCH_MVM_TEMPLATES")};
	wr_err err = NULL;
	if (wr_microvm_init(&cfg, &err) < 0)
		die("init", err);
	unsigned ncold = env_n("BENCH_MVM_COLD", 3), nrest = env_n("BENCH_MVM_RESTORE", 10),
		 nidle = env_n("BENCH_MVM_IDLE", 3), npar = env_n("BENCH_MVM_PAR_N", 8);
	if (nidle > 16)
		nidle = 16;
	double cold[64], rest[256];
	if (ncold > 64)
		ncold = 64;
	if (nrest > 256)
		nrest = 256;
	for (unsigned i = 0; i < ncold; i++) {
		char id[32];
		snprintf(id, sizeof(id), "bench-cold-%u", i);
		cold[i] = timed(true, id, NULL);
		fprintf(stderr, "bench_microvm: cold boot + exec %.0f ms\n", cold[i]);
	}
	double build = timed(false, "bench-build", NULL);
	fprintf(stderr, "bench_microvm: template made + restore + exec %.0f ms\n", build);
	for (unsigned i = 0; i < nrest; i++) {
		char id[32];
		snprintf(id, sizeof(id), "bench-restore-%u", i);
		rest[i] = timed(false, id, NULL);
		fprintf(stderr, "bench_microvm: restore + exec %.0f ms\n", rest[i]);
	}
	struct idle ir = {.cold = false, .n = nidle}, ic = {.cold = true, .n = 1};
	pthread_t t[2];
	pthread_create(&t[0], NULL, idle_main, &ir);
	pthread_join(t[0], NULL);
	pthread_create(&t[0], NULL, idle_main, &ic);
	pthread_join(t[0], NULL);
	struct worker w[2] = {{npar, 0}, {npar, 1}};
	uint64_t t0 = now_ns();
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, par_main, &w[i]);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	double wall = (double)(now_ns() - t0) / 1e9;
	printf("{\n  \"accel\": \"%s\",\n", wr_microvm_accel());
	series("cold_ms", cold, ncold, false);
	printf("  \"build_ms\": %.1f,\n", build);
	series("restore_ms", rest, nrest, false);
	printf("  \"idle_restored\": {\"n\": %u, \"rss_kib\": %.0f, \"pss_kib\": %.0f},\n", nidle,
	       ir.rss, ir.pss);
	printf("  \"idle_cold\": {\"n\": 1, \"rss_kib\": %.0f, \"pss_kib\": %.0f},\n", ic.rss,
	       ic.pss);
	printf("  \"par2\": {\"n\": %u, \"wall_s\": %.2f, \"per_sec\": %.2f}\n}\n", 2 * npar, wall,
	       2 * npar / wall);
	return 0;
}
