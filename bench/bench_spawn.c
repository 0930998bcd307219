/* bench_spawn: time "start something that runs /bin/true, and tear it down".
 *
 *   bench_spawn MODE N PARALLEL IMAGE [-- COMMAND ARG...]
 *
 * MODE
 *   bare      fork + execve("/bin/true") + waitpid on the host (the baseline)
 *   bare-img  the same with IMAGE/bin/true (the image's static busybox)
 *   warren    in-process: wr_container_init once, then per iteration
 *             wr_container_create(IMAGE) + wr_container_exec("/bin/true") +
 *             wr_container_destroy
 *   cmd       fork + execve(COMMAND...) + waitpid; every "{i}" in an argument
 *             becomes a number unique to the iteration (container ids)
 * N         timed iterations in total (warm-up iterations come on top)
 * PARALLEL  workers running at once, each doing its share of N; processes for
 *           the forking modes, threads for warren (the API is in-process)
 * IMAGE     rootfs directory or EROFS file (warren), rootfs (bare-img), or
 *           anything (bare, cmd)
 *
 * Environment: BENCH_WARMUP (iterations per worker, default 5); BENCH_RAW=FILE
 * appends every timed sample to FILE, one line each: "total_ns" (warren:
 * "total_ns create_ns exec_ns destroy_ns"); for warren, WARREN_INIT,
 * WARREN_STATE_DIR, WARREN_RUN_DIR, WARREN_CGROUP_BASE (wr_container_config).
 *
 * Prints one JSON object on stdout: mode, n, parallel, warmup, p50_us,
 * p99_us, mean_us, min_us, max_us, per_sec (timed iterations / wall time of
 * the timed phase), elapsed_s; warren adds create/exec/destroy p50s.
 * Exit status: 0 ok, 1 an iteration failed, 2 usage, 3 warren unavailable.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "tiers/container.h"

extern char **environ;

enum mode { MODE_BARE, MODE_BARE_IMG, MODE_WARREN, MODE_CMD };
enum phase { PH_TOTAL, PH_CREATE, PH_EXEC, PH_DESTROY, PH_MAX };

/* Lives in a MAP_SHARED mapping so that worker processes can fill it. */
struct shared {
	pthread_barrier_t start;
	unsigned long counter; /* for "{i}" */
	int failed;
	uint64_t samples[]; /* PH_MAX * n */
};

struct bench {
	enum mode mode;
	const char *mode_name;
	long n, parallel, warmup;
	const char *image;
	char *exe;	   /* what the forking modes execve */
	char **argv;	   /* its argv; "{i}" templates expanded per iteration */
	char **templates;  /* cmd mode: the original argv (NULL-terminated) */
	struct shared *sh; /* samples[PH_MAX][n] */
};

struct worker {
	struct bench *b;
	long first, count; /* timed sample slots [first, first + count) */
	pthread_t thread;
	pid_t pid;
};

static volatile sig_atomic_t stop_requested;
static pid_t main_pid;
static struct worker *workers; /* for on_stop in the parent */
static long n_workers;

static void on_stop(int sig)
{
	stop_requested = sig;
	/* A signal to the parent alone (kill PID) reaches the worker
	 * processes too; each finishes its iteration and stops. */
	if (getpid() == main_pid && workers)
		for (long i = 0; i < n_workers; i++)
			if (workers[i].pid > 0)
				kill(workers[i].pid, sig);
}

/* After a clean stop, die of the signal that asked for it, so that a shell
 * waiting on us (bash's "wait and cooperative exit") stops too. */
static void reraise_stop(void)
{
	int sig = stop_requested;

	signal(sig, SIG_DFL);
	kill(getpid(), sig);
	_exit(128 + sig);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *fmt, const char *arg)
{
	fprintf(stderr, "bench_spawn: ");
	fprintf(stderr, fmt, arg);
	fputc('\n', stderr);
	exit(2);
}

static long parse_long(const char *s, const char *what)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < 0)
		die("bad %s", what);
	return v;
}

/* Resolve a command name along PATH once, so the timed loop does not
 * search PATH on every iteration (execvp would). */
static char *resolve(const char *name)
{
	const char *path = getenv("PATH");
	char buf[PATH_MAX];

	if (strchr(name, '/'))
		return strdup(name);
	if (!path)
		path = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
	while (*path) {
		size_t len = strcspn(path, ":");

		if (len &&
		    (size_t)snprintf(buf, sizeof(buf), "%.*s/%s", (int)len, path, name) <
			sizeof(buf) &&
		    access(buf, X_OK) == 0)
			return strdup(buf);
		path += len;
		if (*path == ':')
			path++;
	}
	return NULL;
}

/* cmd mode: rebuild the argv with every "{i}" replaced by @id. */
static void expand_argv(struct bench *b, unsigned long id)
{
	char num[32];

	snprintf(num, sizeof(num), "%lu", id);
	for (size_t i = 0; b->templates[i]; i++) {
		const char *t = b->templates[i];
		const char *at = strstr(t, "{i}");

		free(b->argv[i]);
		if (!at) {
			b->argv[i] = strdup(t);
		} else if (asprintf(&b->argv[i], "%.*s%s%s", (int)(at - t), t, num, at + 3) < 0) {
			b->argv[i] = NULL;
		}
		if (!b->argv[i]) {
			perror("bench_spawn: expand argv");
			exit(1);
		}
	}
}

/* fork + execve + waitpid; the worker already put /dev/null on fds 0, 1. */
static int spawn_once(struct bench *b)
{
	int status;
	pid_t pid;

	pid = fork();
	if (pid < 0) {
		perror("bench_spawn: fork");
		return -1;
	}
	if (pid == 0) {
		execve(b->exe, b->argv, environ);
		_exit(127);
	}
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR) {
			perror("bench_spawn: waitpid");
			return -1;
		}
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "bench_spawn: %s: %s %d\n", b->exe,
			WIFEXITED(status) ? "exit status" : "signal",
			WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
		return -1;
	}
	return 0;
}

static int warren_once(struct bench *b, uint64_t ph[PH_MAX])
{
	static const char *const argv[] = {"/bin/true", NULL};
	struct wr_sandbox_spec spec = {.image = b->image};
	struct wr_exec_spec xs = {
	    .argv = argv,
	    .user = -1,
	    .group = -1,
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
		fprintf(stderr, "bench_spawn: warren create: %s\n",
			err && err->msg ? err->msg : "failed");
		wr_err_free(&err);
		return -1;
	}
	rc = wr_container_exec(sb, &xs, &res, &err);
	t2 = now_ns();
	if (rc < 0) {
		fprintf(stderr, "bench_spawn: warren exec: %s\n",
			err && err->msg ? err->msg : "failed");
		wr_err_free(&err);
	} else if (res.reason != WR_EXIT_EXITED || res.exit_code != 0) {
		fprintf(stderr, "bench_spawn: warren exec: /bin/true: %s, code %d\n",
			wr_exit_reason_name(res.reason), res.exit_code);
		rc = -1;
	}
	wr_exec_result_free(&res);
	if (wr_container_destroy(&sb, &err) < 0) {
		fprintf(stderr, "bench_spawn: warren destroy: %s\n",
			err && err->msg ? err->msg : "failed");
		wr_err_free(&err);
		rc = -1;
	}
	t3 = now_ns();
	ph[PH_TOTAL] = t3 - t0;
	ph[PH_CREATE] = t1 - t0;
	ph[PH_EXEC] = t2 - t1;
	ph[PH_DESTROY] = t3 - t2;
	return rc < 0 ? -1 : 0;
}

static int iterate(struct bench *b, uint64_t ph[PH_MAX])
{
	uint64_t t0;
	int rc;

	if (b->mode == MODE_WARREN)
		return warren_once(b, ph);
	if (b->mode == MODE_CMD)
		expand_argv(b, __atomic_fetch_add(&b->sh->counter, 1, __ATOMIC_RELAXED));
	t0 = now_ns();
	rc = spawn_once(b);
	ph[PH_TOTAL] = now_ns() - t0;
	return rc;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct bench *b = w->b;
	uint64_t ph[PH_MAX] = {0};
	bool ok = true;

	if (b->mode != MODE_WARREN) {
		/* A worker process of its own: give the commands /dev/null as
		 * stdin and stdout (stderr is kept so a failing runtime can say
		 * why), once, outside the timed loop. */
		int fd = open("/dev/null", O_RDWR | O_CLOEXEC);

		if (fd < 0 || dup2(fd, 0) < 0 || dup2(fd, 1) < 0)
			ok = false;
		if (fd >= 0)
			close(fd);
	}
	for (long i = 0; i < b->warmup && ok && !stop_requested; i++)
		ok = iterate(b, ph) == 0;
	if (!ok)
		__atomic_store_n(&b->sh->failed, 1, __ATOMIC_RELAXED);
	/* Everyone warms up, then the timed phase starts for all at once. */
	pthread_barrier_wait(&b->sh->start);
	for (long i = 0; i < w->count && ok; i++) {
		if (stop_requested || __atomic_load_n(&b->sh->failed, __ATOMIC_RELAXED)) {
			ok = false;
			break;
		}
		if (iterate(b, ph) < 0) {
			ok = false;
			break;
		}
		for (int p = 0; p < PH_MAX; p++)
			b->sh->samples[(size_t)p * b->n + w->first + i] = ph[p];
	}
	if (!ok)
		__atomic_store_n(&b->sh->failed, 1, __ATOMIC_RELAXED);
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted @v. */
static double pct_us(const uint64_t *v, long n, double p)
{
	long rank = (long)((p / 100.0) * n + 0.999999);

	if (rank < 1)
		rank = 1;
	if (rank > n)
		rank = n;
	return v[rank - 1] / 1000.0;
}

static int write_raw(const struct bench *b, const char *path)
{
	FILE *f = fopen(path, "ae");

	if (!f) {
		perror("bench_spawn: BENCH_RAW");
		return -1;
	}
	for (long i = 0; i < b->n; i++) {
		int nph = b->mode == MODE_WARREN ? PH_MAX : 1;

		for (int p = 0; p < nph; p++)
			fprintf(f, "%s%" PRIu64, p ? " " : "",
				b->sh->samples[(size_t)p * b->n + i]);
		fputc('\n', f);
	}
	if (fclose(f) != 0) {
		perror("bench_spawn: BENCH_RAW");
		return -1;
	}
	return 0;
}

static int setup_warren(void)
{
	struct wr_container_config cfg = {
	    .state_dir = getenv("WARREN_STATE_DIR"),
	    .run_dir = getenv("WARREN_RUN_DIR"),
	    .init_path = getenv("WARREN_INIT"),
	    .cgroup_base = getenv("WARREN_CGROUP_BASE"),
	};
	wr_err err = NULL;

	if (wr_container_init(&cfg, &err) < 0) {
		fprintf(stderr, "bench_spawn: warren init: %s\n",
			err && err->msg ? err->msg : "failed");
		wr_err_free(&err);
		return -1;
	}
	return 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: bench_spawn bare|bare-img|warren|cmd N PARALLEL IMAGE "
			"[-- COMMAND ARG...]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct bench b = {0};
	struct worker *ws;
	struct sigaction sa = {0};
	pthread_barrierattr_t ba;
	uint64_t t_start, t_end, sum = 0;
	size_t shsize;

	if (argc < 5)
		usage();
	b.mode_name = argv[1];
	if (!strcmp(argv[1], "bare"))
		b.mode = MODE_BARE;
	else if (!strcmp(argv[1], "bare-img"))
		b.mode = MODE_BARE_IMG;
	else if (!strcmp(argv[1], "warren"))
		b.mode = MODE_WARREN;
	else if (!strcmp(argv[1], "cmd"))
		b.mode = MODE_CMD;
	else
		usage();
	b.n = parse_long(argv[2], "N");
	b.parallel = parse_long(argv[3], "PARALLEL");
	b.image = argv[4];
	b.warmup = getenv("BENCH_WARMUP") ? parse_long(getenv("BENCH_WARMUP"), "BENCH_WARMUP") : 5;
	if (b.n < 1 || b.parallel < 1 || b.parallel > b.n)
		die("need N >= PARALLEL >= 1%s", "");

	switch (b.mode) {
	case MODE_BARE:
	case MODE_BARE_IMG: {
		static char *true_argv[] = {"true", NULL};

		if (argc != 5)
			usage();
		if (b.mode == MODE_BARE)
			b.exe = strdup("/bin/true");
		else if (asprintf(&b.exe, "%s/bin/true", b.image) < 0)
			b.exe = NULL;
		if (!b.exe)
			die("out of memory%s", "");
		if (access(b.exe, X_OK) < 0)
			die("%s is not executable", b.exe);
		b.argv = true_argv;
		break;
	}
	case MODE_CMD: {
		size_t n;

		if (argc < 7 || strcmp(argv[5], "--"))
			usage();
		b.templates = &argv[6];
		n = (size_t)(argc - 6);
		b.argv = calloc(n + 1, sizeof(*b.argv));
		b.exe = resolve(argv[6]);
		if (!b.argv || !b.exe)
			die("%s: not found", argv[6]);
		break;
	}
	case MODE_WARREN:
		if (argc != 5)
			usage();
		if (setup_warren() < 0)
			return 3;
		break;
	}

	/* Stop cleanly (finishing the current iteration, so nothing is left
	 * behind) on INT/TERM. SA_RESTART keeps waits going meanwhile. */
	sa.sa_handler = on_stop;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);

	shsize = sizeof(struct shared) + sizeof(uint64_t) * PH_MAX * (size_t)b.n;
	b.sh = mmap(NULL, shsize, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (b.sh == MAP_FAILED) {
		perror("bench_spawn: mmap");
		return 1;
	}
	pthread_barrierattr_init(&ba);
	pthread_barrierattr_setpshared(&ba, PTHREAD_PROCESS_SHARED);
	/* +1: the parent takes the start time when the workers are released. */
	pthread_barrier_init(&b.sh->start, &ba, (unsigned)b.parallel + 1);

	ws = calloc((size_t)b.parallel, sizeof(*ws));
	if (!ws)
		return 1;
	main_pid = getpid();
	n_workers = b.parallel;
	workers = ws;
	for (long w = 0, first = 0; w < b.parallel; w++) {
		ws[w].b = &b;
		ws[w].first = first;
		ws[w].count = b.n / b.parallel + (w < b.n % b.parallel);
		first += ws[w].count;
		if (b.mode == MODE_WARREN) {
			errno = pthread_create(&ws[w].thread, NULL, worker_main, &ws[w]);
			if (errno) {
				perror("bench_spawn: pthread_create");
				return 1;
			}
			continue;
		}
		/* The forking modes use worker processes: two threads of one
		 * process forking at once would serialize on its mm. */
		ws[w].pid = fork();
		if (ws[w].pid < 0) {
			perror("bench_spawn: fork");
			return 1;
		}
		if (ws[w].pid == 0) {
			worker_main(&ws[w]);
			if (stop_requested)
				reraise_stop();
			_exit(0);
		}
	}
	pthread_barrier_wait(&b.sh->start);
	t_start = now_ns();
	for (long w = 0; w < b.parallel; w++) {
		if (b.mode == MODE_WARREN) {
			pthread_join(ws[w].thread, NULL);
			continue;
		}
		while (waitpid(ws[w].pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	t_end = now_ns();

	if (stop_requested) {
		fprintf(stderr, "bench_spawn: %s: interrupted\n", b.mode_name);
		reraise_stop();
	}
	if (b.sh->failed) {
		fprintf(stderr, "bench_spawn: %s: an iteration failed\n", b.mode_name);
		return 1;
	}

	if (getenv("BENCH_RAW") && write_raw(&b, getenv("BENCH_RAW")) < 0)
		return 1;
	for (int p = 0; p < PH_MAX; p++)
		qsort(&b.sh->samples[(size_t)p * b.n], (size_t)b.n, sizeof(uint64_t), cmp_u64);
	for (long i = 0; i < b.n; i++)
		sum += b.sh->samples[i];

	printf("{\"mode\": \"%s\", \"n\": %ld, \"parallel\": %ld, \"warmup\": %ld, "
	       "\"p50_us\": %.1f, \"p99_us\": %.1f, \"mean_us\": %.1f, \"min_us\": %.1f, "
	       "\"max_us\": %.1f, \"per_sec\": %.1f, \"elapsed_s\": %.3f",
	       b.mode_name, b.n, b.parallel, b.warmup, pct_us(b.sh->samples, b.n, 50),
	       pct_us(b.sh->samples, b.n, 99), sum / 1000.0 / b.n, b.sh->samples[0] / 1000.0,
	       b.sh->samples[b.n - 1] / 1000.0, b.n * 1e9 / (double)(t_end - t_start),
	       (t_end - t_start) / 1e9);
	if (b.mode == MODE_WARREN)
		printf(", \"create_p50_us\": %.1f, \"exec_p50_us\": %.1f, \"destroy_p50_us\": %.1f",
		       pct_us(&b.sh->samples[PH_CREATE * b.n], b.n, 50),
		       pct_us(&b.sh->samples[PH_EXEC * b.n], b.n, 50),
		       pct_us(&b.sh->samples[PH_DESTROY * b.n], b.n, 50));
	printf("}\n");
	return 0;
}
