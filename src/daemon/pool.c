/* The threads handlers run on (see http.h, enum wrd_class).
 *
 * Lanes: fixed sets of workers, made at start, each with a FIFO. The pool
 * lane (`workers` threads) runs kills, reads, file calls and the monitor's
 * reaps; the create lane (as many) runs creates, which mostly wait for a
 * free spawner: sharing one FIFO, 64 concurrent creates held every worker
 * and a kill queued behind them for most of a second.
 *
 * Long jobs run on a pool of up to max_commands threads that grows on
 * demand: a few are made at start, another when a job finds none idle.
 * Threads may be created while sandboxes are being cloned: the tier's code
 * between clone and exec calls set*id only as raw syscalls (glibc's
 * wrappers would wait for every thread, a half-created one included).
 * Fewer idle threads also make each clone of this process cheaper. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "daemon/http.h"
#include "daemon/http_internal.h"

struct job {
	void (*fn)(void *arg);
	void *arg;
	struct job *next;
};

struct lane {
	const char *name; /* the threads' name, for top and perf */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct job *head, **tail;
	bool stop;
	pthread_t *threads;
	unsigned n;
};
static struct lane g_lanes[WRD_NLANES] = {
    [WRD_LANE_POOL] = {.name = "wrd-pool",
		       .lock = PTHREAD_MUTEX_INITIALIZER,
		       .cond = PTHREAD_COND_INITIALIZER},
    [WRD_LANE_CREATE] = {.name = "wrd-create",
			 .lock = PTHREAD_MUTEX_INITIALIZER,
			 .cond = PTHREAD_COND_INITIALIZER},
};

static void *lane_main(void *arg)
{
	struct lane *l = arg;
	pthread_setname_np(pthread_self(), l->name);
	for (;;) {
		pthread_mutex_lock(&l->lock);
		while (l->head == NULL && !l->stop)
			pthread_cond_wait(&l->cond, &l->lock);
		struct job *j = l->head;
		if (j == NULL) {
			pthread_mutex_unlock(&l->lock);
			return NULL;
		}
		l->head = j->next;
		if (l->head == NULL)
			l->tail = &l->head;
		pthread_mutex_unlock(&l->lock);
		j->fn(j->arg);
		free(j);
	}
}

int wrd_lane_submit(enum wrd_lane lane, void (*fn)(void *arg), void *arg)
{
	struct lane *l = &g_lanes[lane];
	struct job *j = calloc(1, sizeof(*j));
	if (j == NULL)
		return -ENOMEM;
	j->fn = fn;
	j->arg = arg;
	pthread_mutex_lock(&l->lock);
	if (l->tail == NULL) {
		/* before wrd_pool_start (the monitor runs first): try later */
		pthread_mutex_unlock(&l->lock);
		free(j);
		return -EAGAIN;
	}
	*l->tail = j;
	l->tail = &j->next;
	pthread_cond_signal(&l->cond);
	pthread_mutex_unlock(&l->lock);
	return 0;
}

int wrd_pool_submit(void (*fn)(void *arg), void *arg)
{
	return wrd_lane_submit(WRD_LANE_POOL, fn, arg);
}

/* ---- long jobs ------------------------------------------------------------ */

static atomic_uint g_long_threads;
static pthread_mutex_t g_llock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_lcond = PTHREAD_COND_INITIALIZER;
static struct job *g_lhead, **g_ltail = &g_lhead;
static pthread_t *g_long;
static unsigned g_nlong;			/* the cap: max_commands */
static unsigned g_lcreated, g_lidle, g_lqueued; /* under g_llock */
#define LONG_INITIAL 8

bool wrd_long_reserve(void)
{
	unsigned cur = atomic_load(&g_long_threads);
	do {
		if (cur >= g_nlong)
			return false;
	} while (!atomic_compare_exchange_weak(&g_long_threads, &cur, cur + 1));
	return true;
}

static void *long_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "wrd-long");
	for (;;) {
		pthread_mutex_lock(&g_llock);
		g_lidle++;
		while (g_lhead == NULL)
			pthread_cond_wait(&g_lcond, &g_llock);
		g_lidle--;
		g_lqueued--;
		struct job *j = g_lhead;
		g_lhead = j->next;
		if (g_lhead == NULL)
			g_ltail = &g_lhead;
		pthread_mutex_unlock(&g_llock);
		j->fn(j->arg);
		free(j);
		atomic_fetch_sub(&g_long_threads, 1);
	}
	return NULL;
}

/* The slot is already reserved, so an idle thread exists or will. */
int wrd_long_start(void (*fn)(void *arg), void *arg)
{
	struct job *j = calloc(1, sizeof(*j));
	if (j == NULL) {
		atomic_fetch_sub(&g_long_threads, 1);
		return -ENOMEM;
	}
	j->fn = fn;
	j->arg = arg;
	pthread_mutex_lock(&g_llock);
	*g_ltail = j;
	g_ltail = &j->next;
	g_lqueued++;
	/* Invariant: a queued job always has a thread to come: jobs queued
	 * never outnumber idle threads while the cap allows more (and
	 * wrd_long_reserve keeps running + queued jobs within the cap). */
	if (g_lqueued > g_lidle && g_lcreated < g_nlong) {
		pthread_attr_t attr;
		pthread_attr_init(&attr);
		pthread_attr_setstacksize(&attr, 2 << 20);
		/* On failure the job still runs when a thread frees up. */
		if (pthread_create(&g_long[g_lcreated], &attr, long_main, NULL) == 0)
			g_lcreated++;
		pthread_attr_destroy(&attr);
	}
	pthread_cond_signal(&g_lcond);
	pthread_mutex_unlock(&g_llock);
	return 0;
}

int wrd_spawn_long(void (*fn)(void *arg), void *arg)
{
	if (!wrd_long_reserve())
		return -EAGAIN;
	return wrd_long_start(fn, arg);
}

/* ---- start and stop ------------------------------------------------------- */

int wrd_pool_start(const struct wrd_config *cfg, wr_err *err)
{
	for (int i = 0; i < WRD_NLANES; i++) {
		struct lane *l = &g_lanes[i];
		pthread_mutex_lock(&l->lock);
		l->tail = &l->head;
		pthread_mutex_unlock(&l->lock);
		l->n = cfg->workers;
		if ((l->threads = calloc(l->n, sizeof(*l->threads))) == NULL)
			return wr_err_set(err, ENOMEM, "out of memory");
		for (unsigned k = 0; k < l->n; k++)
			if (pthread_create(&l->threads[k], NULL, lane_main, l) != 0)
				return wr_err_set(err, EAGAIN, "start worker thread");
	}
	g_long = calloc(cfg->max_commands, sizeof(*g_long));
	if (g_long == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 2 << 20);
	g_nlong = cfg->max_commands;
	unsigned initial = g_nlong < LONG_INITIAL ? g_nlong : LONG_INITIAL;
	for (g_lcreated = 0; g_lcreated < initial; g_lcreated++)
		if (pthread_create(&g_long[g_lcreated], &attr, long_main, NULL) != 0) {
			pthread_attr_destroy(&attr);
			return wr_err_set(err, EAGAIN, "start command thread %u", g_lcreated);
		}
	pthread_attr_destroy(&attr);
	return 0;
}

/* The lanes' threads end once their queues are empty (long threads are
 * left to the process's exit). */
void wrd_pool_stop(void)
{
	for (int i = 0; i < WRD_NLANES; i++) {
		struct lane *l = &g_lanes[i];
		pthread_mutex_lock(&l->lock);
		l->stop = true;
		pthread_cond_broadcast(&l->cond);
		pthread_mutex_unlock(&l->lock);
		for (unsigned k = 0; l->threads && k < l->n; k++)
			pthread_join(l->threads[k], NULL);
		free(l->threads);
		l->threads = NULL;
	}
}
