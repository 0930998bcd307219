/* bench_api: the cost of the daemon's API around a sandbox's life cycle.
 *
 *   bench_api MODE CONCURRENCY N IMAGE
 *
 * One cycle is "create a sandbox, run `true` in it, get rid of it":
 *
 * MODE
 *   api   through libwarren against a running warrend (socket: WARREN_SOCKET,
 *         default /run/warren/warren.sock): warren_sandbox_create(IMAGE) +
 *         warren_sandbox_exec({"true"}) + warren_sandbox_kill
 *   lib   the same cycle in-process through src/tiers/container.h:
 *         wr_container_init once, then wr_container_create(IMAGE) +
 *         wr_container_exec({"true"}) + wr_container_destroy
 * CONCURRENCY  threads running cycles back to back, each doing its share of N
 * N            timed cycles in total (warm-up cycles come on top)
 * IMAGE        api: an image name the daemon knows (or a path on the node);
 *              lib: the rootfs directory or EROFS file
 *
 * Environment: BENCH_WARMUP (untimed cycles per thread, default 1);
 * BENCH_API_CLIENT "shared" (default: one warren_client for all threads, as
 * warren.h documents) or "thread" (a client of its own per thread);
 * BENCH_RAW=FILE appends one line per successful timed cycle:
 * "total_ns create_ns exec_ns destroy_ns"; lib: WARREN_INIT,
 * WARREN_STATE_DIR, WARREN_RUN_DIR, WARREN_CGROUP_BASE (wr_container_config).
 *
 * An error in any cycle (create, exec, a non-zero exit of `true`, kill) is
 * counted, printed on stderr (the first 20 in full), and the run goes on:
 * the JSON on stdout then says how many cycles failed and the first reason,
 * and the exit status is 1. A failed cycle is not a latency sample.
 *
 * Prints one JSON object: mode, client, concurrency, n, ok, errors,
 * warmup_errors, warmup, p50_us, p99_us, mean_us, min_us, max_us, per_sec
 * (successful timed cycles / wall time of the timed phase), elapsed_s,
 * create_p50_us, exec_p50_us, destroy_p50_us, first_error.
 * Exit status: 0 ok, 1 an error happened, 2 usage, 3 setup failed.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <warren/warren.h>

#include "common/error.h"
#include "tiers/container.h"

#define MAX_PRINTED_ERRORS 20

enum mode { MODE_API, MODE_LIB };
enum phase { PH_TOTAL, PH_CREATE, PH_EXEC, PH_DESTROY, PH_MAX };

struct bench {
	enum mode mode;
	const char *mode_name;
	long n, concurrency, warmup;
	const char *image;
	bool shared_client;
	warren_client *client; /* shared client (api, shared) */
	pthread_barrier_t ready, start;
	uint64_t *samples; /* PH_MAX * n; a failed cycle leaves a 0 total */
	long errors, warmup_errors;
	pthread_mutex_t err_lock;
	long printed;
	char *first_error;
};

struct worker {
	struct bench *b;
	long first, count; /* timed sample slots [first, first + count) */
	warren_client *client;
	pthread_t thread;
};

static volatile sig_atomic_t stop_requested;

static void on_stop(int sig)
{
	stop_requested = sig;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void usage(void)
{
	fprintf(stderr, "usage: bench_api api|lib CONCURRENCY N IMAGE\n");
	exit(2);
}

static long parse_long(const char *s, const char *what)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || end == s || v < 0) {
		fprintf(stderr, "bench_api: bad %s '%s'\n", what, s);
		exit(2);
	}
	return v;
}

/* Count one error, print it (the first few), remember the first. */
static void fail(struct bench *b, bool warm, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail(struct bench *b, bool warm, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/* One line: a command's stderr ends with a newline. */
	for (char *p = msg; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
	pthread_mutex_lock(&b->err_lock);
	if (warm)
		b->warmup_errors++;
	else
		b->errors++;
	if (b->first_error == NULL)
		b->first_error = strdup(msg);
	if (b->printed < MAX_PRINTED_ERRORS)
		fprintf(stderr, "bench_api: %s%s\n", warm ? "(warm-up) " : "", msg);
	else if (b->printed == MAX_PRINTED_ERRORS)
		fprintf(stderr, "bench_api: more errors; not printing them\n");
	b->printed++;
	pthread_mutex_unlock(&b->err_lock);
}

static void fail_api(struct bench *b, bool warm, const char *what, warren_error *err)
{
	fail(b, warm, "api %s: %s (HTTP %d): %s", what, err ? warren_error_code(err) : "?",
	     err ? warren_error_http_status(err) : 0, err ? warren_error_message(err) : "failed");
	warren_error_free(err);
}

static void fail_lib(struct bench *b, bool warm, const char *what, wr_err *err)
{
	fail(b, warm, "lib %s: %s", what, *err && (*err)->msg ? (*err)->msg : "failed");
	wr_err_free(err);
}

static const char *const true_argv[] = {"true", NULL};

/* A command's stderr for a message: without its final newline. */
static const char *chomp(char *s)
{
	size_t n;

	if (!s)
		return "";
	n = strlen(s);
	while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' '))
		s[--n] = 0;
	return s;
}

/* One cycle through libwarren. Returns 0, or -1 after fail(). */
static int api_once(struct bench *b, warren_client *cl, bool warm, uint64_t ph[PH_MAX])
{
	warren_sandbox_opts so = WARREN_SANDBOX_OPTS_INIT;
	warren_exec_opts xo = WARREN_EXEC_OPTS_INIT;
	warren_exec_result *res = NULL;
	warren_sandbox *sb = NULL;
	warren_error *err = NULL;
	uint64_t t0, t1, t2, t3;
	int rc;

	so.image = b->image;
	xo.argv = true_argv;
	xo.timeout = 60;
	t0 = now_ns();
	rc = warren_sandbox_create(cl, &so, &sb, &err);
	t1 = now_ns();
	if (rc < 0) {
		fail_api(b, warm, "create", err);
		return -1;
	}
	rc = warren_sandbox_exec(sb, &xo, &res, &err);
	t2 = now_ns();
	if (rc < 0) {
		fail_api(b, warm, "exec", err);
		err = NULL;
	} else if (res->exit_code != 0 || !res->reason || strcmp(res->reason, "exited")) {
		fail(b, warm, "api exec: true: %s, exit code %d, stderr '%.200s'",
		     res->reason ? res->reason : "?", res->exit_code, chomp(res->stderr_data));
		rc = -1;
	}
	warren_exec_result_free(res);
	if (warren_sandbox_kill(sb, &err) < 0) {
		fail_api(b, warm, "kill", err);
		rc = -1;
	}
	t3 = now_ns();
	warren_sandbox_free(sb);
	ph[PH_TOTAL] = t3 - t0;
	ph[PH_CREATE] = t1 - t0;
	ph[PH_EXEC] = t2 - t1;
	ph[PH_DESTROY] = t3 - t2;
	return rc < 0 ? -1 : 0;
}

/* The same cycle in-process. */
static int lib_once(struct bench *b, bool warm, uint64_t ph[PH_MAX])
{
	struct wr_sandbox_spec spec = {.image = b->image};
	struct wr_exec_spec xs = {
	    .argv = true_argv,
	    .user = -1,
	    .group = -1,
	    .timeout_ms = 60000,
	    .stdin_fd = -1,
	};
	struct wr_exec_result res = {0};
	struct wr_sandbox *sb = NULL;
	wr_err err = NULL;
	uint64_t t0, t1, t2, t3;
	int rc;

	t0 = now_ns();
	rc = wr_container_create(&spec, &sb, &err);
	t1 = now_ns();
	if (rc < 0) {
		fail_lib(b, warm, "create", &err);
		return -1;
	}
	rc = wr_container_exec(sb, &xs, &res, &err);
	t2 = now_ns();
	if (rc < 0) {
		fail_lib(b, warm, "exec", &err);
	} else if (res.reason != WR_EXIT_EXITED || res.exit_code != 0) {
		fail(b, warm, "lib exec: true: %s, exit code %d, stderr '%.200s'",
		     wr_exit_reason_name(res.reason), res.exit_code, chomp(res.err));
		rc = -1;
	}
	wr_exec_result_free(&res);
	if (wr_container_destroy(&sb, &err) < 0) {
		fail_lib(b, warm, "destroy", &err);
		rc = -1;
	}
	t3 = now_ns();
	ph[PH_TOTAL] = t3 - t0;
	ph[PH_CREATE] = t1 - t0;
	ph[PH_EXEC] = t2 - t1;
	ph[PH_DESTROY] = t3 - t2;
	return rc < 0 ? -1 : 0;
}

static int cycle(struct worker *w, bool warm, uint64_t ph[PH_MAX])
{
	if (w->b->mode == MODE_API)
		return api_once(w->b, w->client, warm, ph);
	return lib_once(w->b, warm, ph);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct bench *b = w->b;
	uint64_t ph[PH_MAX];

	/* Every thread exists before the first sandbox is cloned (a clone
	 * racing a half-made thread can hang glibc's set*id in the child),
	 * then all warm up, then the timed phase starts for all at once. */
	pthread_barrier_wait(&b->ready);
	for (long i = 0; i < b->warmup && !stop_requested; i++)
		cycle(w, true, ph);
	pthread_barrier_wait(&b->start);
	for (long i = 0; i < w->count && !stop_requested; i++) {
		if (cycle(w, false, ph) < 0)
			continue;
		for (int p = 0; p < PH_MAX; p++)
			b->samples[(size_t)p * b->n + w->first + i] = ph[p];
	}
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted @v (n >= 1), as bench_spawn does. */
static double pct_us(const uint64_t *v, long n, double p)
{
	long rank = (long)((p / 100.0) * n + 0.999999);

	if (rank < 1)
		rank = 1;
	if (rank > n)
		rank = n;
	return v[rank - 1] / 1000.0;
}

static void json_str(const char *s)
{
	if (s == NULL) {
		fputs("null", stdout);
		return;
	}
	putchar('"');
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			printf("\\%c", *p);
		else if (*p < 0x20)
			printf("\\u%04x", *p);
		else
			putchar(*p);
	}
	putchar('"');
}

static int setup_lib(void)
{
	struct wr_container_config cfg = {
	    .state_dir = getenv("WARREN_STATE_DIR"),
	    .run_dir = getenv("WARREN_RUN_DIR"),
	    .init_path = getenv("WARREN_INIT"),
	    .cgroup_base = getenv("WARREN_CGROUP_BASE"),
	};
	wr_err err = NULL;

	if (wr_container_init(&cfg, &err) < 0) {
		fprintf(stderr, "bench_api: lib init: %s\n", err && err->msg ? err->msg : "failed");
		wr_err_free(&err);
		return -1;
	}
	return 0;
}

static warren_client *new_client(void)
{
	warren_client_opts o = WARREN_CLIENT_OPTS_INIT;
	warren_error *err = NULL;
	warren_client *cl = NULL;

	o.socket_path = getenv("WARREN_SOCKET");
	/* Never hang the benchmark on a stuck daemon; creates and kills
	 * take milliseconds. exec has its own 60 s command timeout. */
	o.request_timeout_ms = 120000;
	if (warren_client_new(&o, &cl, &err) < 0) {
		fprintf(stderr, "bench_api: client: %s\n", warren_error_message(err));
		warren_error_free(err);
		return NULL;
	}
	return cl;
}

int main(int argc, char **argv)
{
	struct bench b = {0};
	struct worker *ws;
	struct sigaction sa = {0};
	const char *client_env = getenv("BENCH_API_CLIENT");
	const char *raw = getenv("BENCH_RAW");
	uint64_t t_start, t_end, sum = 0;
	long ok = 0;
	int status = 0;

	if (argc != 5)
		usage();
	b.mode_name = argv[1];
	if (!strcmp(argv[1], "api"))
		b.mode = MODE_API;
	else if (!strcmp(argv[1], "lib"))
		b.mode = MODE_LIB;
	else
		usage();
	b.concurrency = parse_long(argv[2], "CONCURRENCY");
	b.n = parse_long(argv[3], "N");
	b.image = argv[4];
	b.warmup = getenv("BENCH_WARMUP") ? parse_long(getenv("BENCH_WARMUP"), "BENCH_WARMUP") : 1;
	if (b.concurrency < 1 || b.n < b.concurrency) {
		fprintf(stderr, "bench_api: need N >= CONCURRENCY >= 1\n");
		return 2;
	}
	if (client_env && strcmp(client_env, "shared") && strcmp(client_env, "thread")) {
		fprintf(stderr, "bench_api: BENCH_API_CLIENT must be shared or thread\n");
		return 2;
	}
	b.shared_client = !client_env || !strcmp(client_env, "shared");
	pthread_mutex_init(&b.err_lock, NULL);
	b.samples = calloc((size_t)PH_MAX * (size_t)b.n, sizeof(uint64_t));
	ws = calloc((size_t)b.concurrency, sizeof(*ws));
	if (!b.samples || !ws) {
		fprintf(stderr, "bench_api: out of memory\n");
		return 3;
	}

	if (b.mode == MODE_LIB) {
		if (setup_lib() < 0)
			return 3;
	} else {
		for (long i = 0; i < b.concurrency; i++) {
			if (b.shared_client && i > 0) {
				ws[i].client = ws[0].client;
				continue;
			}
			ws[i].client = new_client();
			if (!ws[i].client)
				return 3;
		}
	}

	/* Stop cleanly at the end of the current cycle on INT/TERM/HUP, so
	 * every sandbox is killed through the path being measured. */
	sa.sa_handler = on_stop;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);

	/* +1: the main thread takes the start time when they are released. */
	pthread_barrier_init(&b.ready, NULL, (unsigned)b.concurrency + 1);
	pthread_barrier_init(&b.start, NULL, (unsigned)b.concurrency + 1);
	for (long i = 0, first = 0; i < b.concurrency; i++) {
		ws[i].b = &b;
		ws[i].first = first;
		ws[i].count = b.n / b.concurrency + (i < b.n % b.concurrency);
		first += ws[i].count;
		errno = pthread_create(&ws[i].thread, NULL, worker_main, &ws[i]);
		if (errno) {
			perror("bench_api: pthread_create");
			return 3;
		}
	}
	pthread_barrier_wait(&b.ready);
	pthread_barrier_wait(&b.start);
	t_start = now_ns();
	for (long i = 0; i < b.concurrency; i++)
		pthread_join(ws[i].thread, NULL);
	t_end = now_ns();

	if (b.mode == MODE_API)
		for (long i = 0; i < b.concurrency; i++)
			if (!b.shared_client || i == 0)
				warren_client_free(ws[i].client);

	if (stop_requested) {
		fprintf(stderr, "bench_api: %s: interrupted\n", b.mode_name);
		signal(stop_requested, SIG_DFL);
		kill(getpid(), stop_requested);
		return 128 + stop_requested;
	}

	/* Keep the successful cycles only (a failed one left a 0 total). */
	for (long i = 0; i < b.n; i++) {
		if (b.samples[i] == 0)
			continue;
		for (int p = 0; p < PH_MAX; p++)
			b.samples[(size_t)p * b.n + ok] = b.samples[(size_t)p * b.n + i];
		ok++;
	}
	if (raw && ok) {
		FILE *f = fopen(raw, "ae");

		if (!f) {
			perror("bench_api: BENCH_RAW");
			return 1;
		}
		for (long i = 0; i < ok; i++)
			fprintf(f, "%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n",
				b.samples[i], b.samples[(size_t)PH_CREATE * b.n + i],
				b.samples[(size_t)PH_EXEC * b.n + i],
				b.samples[(size_t)PH_DESTROY * b.n + i]);
		if (fclose(f) != 0) {
			perror("bench_api: BENCH_RAW");
			return 1;
		}
	}
	for (int p = 0; p < PH_MAX && ok; p++)
		qsort(&b.samples[(size_t)p * b.n], (size_t)ok, sizeof(uint64_t), cmp_u64);
	for (long i = 0; i < ok; i++)
		sum += b.samples[i];

	printf("{\"mode\": \"%s\", \"client\": %s, \"concurrency\": %ld, \"n\": %ld, "
	       "\"ok\": %ld, \"errors\": %ld, \"warmup_errors\": %ld, \"warmup\": %ld, "
	       "\"per_sec\": %.1f, \"elapsed_s\": %.3f",
	       b.mode_name,
	       b.mode == MODE_LIB ? "null" : (b.shared_client ? "\"shared\"" : "\"thread\""),
	       b.concurrency, b.n, ok, b.errors, b.warmup_errors, b.warmup,
	       ok * 1e9 / (double)(t_end - t_start), (t_end - t_start) / 1e9);
	if (ok)
		printf(", \"p50_us\": %.1f, \"p99_us\": %.1f, \"mean_us\": %.1f, "
		       "\"min_us\": %.1f, \"max_us\": %.1f, \"create_p50_us\": %.1f, "
		       "\"exec_p50_us\": %.1f, \"destroy_p50_us\": %.1f",
		       pct_us(b.samples, ok, 50), pct_us(b.samples, ok, 99), sum / 1000.0 / ok,
		       b.samples[0] / 1000.0, b.samples[ok - 1] / 1000.0,
		       pct_us(&b.samples[(size_t)PH_CREATE * b.n], ok, 50),
		       pct_us(&b.samples[(size_t)PH_EXEC * b.n], ok, 50),
		       pct_us(&b.samples[(size_t)PH_DESTROY * b.n], ok, 50));
	fputs(", \"first_error\": ", stdout);
	json_str(b.first_error);
	fputs("}\n", stdout);
	fflush(stdout);

	if (b.errors || b.warmup_errors) {
		fprintf(stderr,
			"bench_api: %s x%ld: %ld of %ld timed cycles failed (%ld in warm-up)\n",
			b.mode_name, b.concurrency, b.errors, b.n, b.warmup_errors);
		status = 1;
	}
	free(b.first_error);
	free(b.samples);
	free(ws);
	return status;
}
