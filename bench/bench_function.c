/* bench_function: time function-tier calls through the library API.
 *
 *   bench_function MODE N PARALLEL IMAGE
 *
 * MODE
 *   true     a native pool on IMAGE; each call runs argv ["/bin/true"]
 *   python   a Python pool on IMAGE (python3 inside); each call runs
 *            print(sum(range(1000))) and must print 499500
 * N         timed calls in total (warm-up calls come on top)
 * PARALLEL  threads calling at once, each doing its share of N, on one pool
 *
 * Environment: BENCH_WARMUP (calls per thread, default 5); BENCH_RAW=FILE
 * appends every timed sample (ns) to FILE, one per line; BENCH_GAP_MS: an
 * untimed pause before each timed call (the pool refills meanwhile, so what
 * is timed is a call on a full pool, not the pool's sustained rate);
 * WARREN_INIT,
 * WARREN_ZYGOTE, WARREN_STATE_DIR, WARREN_RUN_DIR, WARREN_CGROUP_BASE.
 *
 * Prints one JSON object on stdout: mode, n, parallel, warmup, p50_us,
 * p99_us, mean_us, min_us, max_us, per_sec (timed calls / wall time of the
 * timed phase), elapsed_s. The pool is made (and its zygote started) before
 * the timed phase: what is timed is a call on a warm pool.
 * Exit status: 0 ok, 1 a call failed or gave a wrong result, 2 usage,
 * 3 warren unavailable.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "common/error.h"
#include "common/util.h"
#include "tiers/container.h"
#include "tiers/function.h"

struct bench {
	struct wr_function_pool *pool;
	bool python;
	long n, par, warmup, gap_ms;
	uint64_t *samples;
	long next;
	int failed;
	pthread_mutex_t lock;
	pthread_barrier_t start, timed;
};

static int one_call(struct bench *b)
{
	static const char *const argv[] = {"/bin/true", NULL};
	struct wr_call_spec s = {0};
	if (b->python)
		s.code = "print(sum(range(1000)))";
	else
		s.argv = argv;
	struct wr_call_result r;
	wr_err err = NULL;
	if (wr_function_call(b->pool, &s, &r, &err) < 0) {
		fprintf(stderr, "bench_function: call: %s\n", err->msg);
		wr_err_free(&err);
		return -1;
	}
	int ok = r.reason == WR_EXIT_EXITED && r.exit_code == 0 &&
		 (!b->python || strcmp(r.out, "499500\n") == 0);
	if (!ok)
		fprintf(stderr, "bench_function: call ended %s, code %d, out %.80s, err %.200s\n",
			wr_exit_reason_name(r.reason), r.exit_code, r.out, r.err);
	wr_call_result_free(&r);
	return ok ? 0 : -1;
}

static void *worker(void *arg)
{
	struct bench *b = arg;
	for (long i = 0; i < b->warmup; i++)
		if (one_call(b) < 0) {
			pthread_mutex_lock(&b->lock);
			b->failed = 1;
			pthread_mutex_unlock(&b->lock);
		}
	pthread_barrier_wait(&b->start);
	for (;;) {
		pthread_mutex_lock(&b->lock);
		long i = b->next++;
		pthread_mutex_unlock(&b->lock);
		if (i >= b->n)
			break;
		if (b->gap_ms > 0) {
			struct timespec ts = {.tv_sec = b->gap_ms / 1000,
					      .tv_nsec = (b->gap_ms % 1000) * 1000000L};
			nanosleep(&ts, NULL);
		}
		uint64_t t0 = wr_now_ns();
		int r = one_call(b);
		b->samples[i] = wr_now_ns() - t0;
		if (r < 0) {
			pthread_mutex_lock(&b->lock);
			b->failed = 1;
			pthread_mutex_unlock(&b->lock);
		}
	}
	pthread_barrier_wait(&b->timed);
	return NULL;
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static double pct(const uint64_t *v, long n, int p)
{
	long rank = (p * n + 99) / 100;
	if (rank < 1)
		rank = 1;
	if (rank > n)
		rank = n;
	return (double)v[rank - 1] / 1e3;
}

int main(int argc, char **argv)
{
	if (argc != 5 || (strcmp(argv[1], "true") && strcmp(argv[1], "python"))) {
		fprintf(stderr, "usage: bench_function true|python N PARALLEL IMAGE\n");
		return 2;
	}
	struct bench b = {.python = strcmp(argv[1], "python") == 0,
			  .n = atol(argv[2]),
			  .par = atol(argv[3]),
			  .warmup = getenv("BENCH_WARMUP") ? atol(getenv("BENCH_WARMUP")) : 5,
			  .gap_ms = getenv("BENCH_GAP_MS") ? atol(getenv("BENCH_GAP_MS")) : 0};
	if (b.n < 1 || b.par < 1 || b.par > 64 || b.warmup < 0) {
		fprintf(stderr, "bench_function: bad N or PARALLEL\n");
		return 2;
	}
	struct wr_container_config cc = {.state_dir = getenv("WARREN_STATE_DIR"),
					 .run_dir = getenv("WARREN_RUN_DIR"),
					 .init_path = getenv("WARREN_INIT"),
					 .cgroup_base = getenv("WARREN_CGROUP_BASE")};
	struct wr_function_config fc = {.zygote_path = getenv("WARREN_ZYGOTE"),
					.spare_slots = (unsigned)b.par + 1};
	wr_err err = NULL;
	if (wr_container_init(&cc, &err) < 0 || wr_function_init(&fc, &err) < 0) {
		fprintf(stderr, "bench_function: init: %s\n", err->msg);
		return 3;
	}
	struct wr_function_pool_spec ps = {
	    .image = argv[4], .language = b.python ? "python" : NULL, .tenant = "bench"};
	if (wr_function_pool_create(&ps, &b.pool, &err) < 0) {
		fprintf(stderr, "bench_function: pool: %s\n", err->msg);
		return 3;
	}
	b.samples = calloc((size_t)b.n, sizeof(uint64_t));
	pthread_mutex_init(&b.lock, NULL);
	pthread_barrier_init(&b.start, NULL, (unsigned)b.par + 1);
	pthread_barrier_init(&b.timed, NULL, (unsigned)b.par + 1);
	pthread_t th[64];
	for (long i = 0; i < b.par; i++)
		pthread_create(&th[i], NULL, worker, &b);
	struct rusage ru0, ru1;
	getrusage(RUSAGE_SELF, &ru0);
	pthread_barrier_wait(&b.start);
	uint64_t t0 = wr_now_ns();
	pthread_barrier_wait(&b.timed);
	double elapsed = (double)(wr_now_ns() - t0) / 1e9;
	for (long i = 0; i < b.par; i++)
		pthread_join(th[i], NULL);
	getrusage(RUSAGE_SELF, &ru1);
	uint64_t leaves_made = 0, leaves_reused = 0;
	wr_function_pool_leaf_counts(b.pool, &leaves_made, &leaves_reused);
	wr_function_pool_destroy(&b.pool, NULL);
	if (getenv("WARREN_FN_PHASES")) {
		/* Warm-up calls included: per call means, to stderr. */
		struct wr_fn_phases ph;
		wr_function_phases(&ph);
		fprintf(stderr, "phases (us per call, %" PRIu64 " calls, %" PRIu64 " unprepared):",
			ph.calls, ph.unprepared);
		for (int i = 0; i < WR_FN_NPHASES && ph.calls; i++)
			fprintf(stderr, " %s %.0f", wr_function_phase_name(i),
				(double)ph.ns[i] / 1e3 / (double)ph.calls);
		/* This process's CPU time (calls and refill thread) over the
		 * timed calls; warm-up calls ran before ru0. */
		double host = (double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec +
				       ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) *
				  1e6 +
			      (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec +
				       ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec);
		fprintf(stderr,
			" host_cpu_timed %.0f leaves_made %" PRIu64 " leaves_reused %" PRIu64 "\n",
			host / (double)b.n, leaves_made, leaves_reused);
	}
	if (b.failed) {
		fprintf(stderr, "bench_function: %s: a call failed\n", argv[1]);
		return 1;
	}
	const char *raw = getenv("BENCH_RAW");
	if (raw) {
		FILE *f = fopen(raw, "a");
		if (f == NULL) {
			perror("bench_function: BENCH_RAW");
			return 1;
		}
		for (long i = 0; i < b.n; i++)
			fprintf(f, "%" PRIu64 "\n", b.samples[i]);
		fclose(f);
	}
	qsort(b.samples, (size_t)b.n, sizeof(uint64_t), cmp);
	double sum = 0;
	for (long i = 0; i < b.n; i++)
		sum += (double)b.samples[i];
	printf("{\"mode\": \"fn-%s\", \"n\": %ld, \"parallel\": %ld, \"warmup\": %ld, "
	       "\"p50_us\": %.1f, \"p99_us\": %.1f, \"mean_us\": %.1f, \"min_us\": %.1f, "
	       "\"max_us\": %.1f, \"per_sec\": %.1f, \"elapsed_s\": %.3f}\n",
	       argv[1], b.n, b.par, b.warmup, pct(b.samples, b.n, 50), pct(b.samples, b.n, 99),
	       sum / (double)b.n / 1e3, (double)b.samples[0] / 1e3,
	       (double)b.samples[b.n - 1] / 1e3, (double)b.n / elapsed, elapsed);
	free(b.samples);
	return 0;
}
