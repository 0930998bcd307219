/* warrend's on-demand loading: the config's "lazy" object into the
 * warren-lazyfs client the store uses, a poller that turns lazyfs's events
 * (fetch failures, commits, verification failures) into node-level image
 * events and log lines, and the mount keeper (lazy_keep.c): warrend holds
 * lazyfs's FUSE connection, so that a lazyfs that dies is replaced under
 * the same mounts. */
#include "daemon/images.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "daemon/db.h"
#include "daemon/jsonutil.h"
#include "image/lazy.h"

static struct wr_lazy *g_lazy;
static pthread_t g_poller;
static bool g_poller_on;
static pthread_mutex_t g_plock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_pcond = PTHREAD_COND_INITIALIZER;
static bool g_stop;

static int path_key(json_t *x, const char *k, const char **out, wr_err *err)
{
	char field[64];
	snprintf(field, sizeof(field), "lazy.%s", k);
	if (wrd_j_str(x, field, 4095, false, out, err) < 0)
		return -EINVAL;
	if ((*out)[0] != '/')
		return wr_err_field(err, field, "%s: must be an absolute path", field);
	return 0;
}

/* The "lazy" object into o (strings point into v). Every error names the
 * key ("lazy.chunk_size"). */
static int parse(json_t *v, struct wr_lazy_opts *o, wr_err *err)
{
	if (v == NULL)
		return 0;
	if (!json_is_object(v))
		return wr_err_field(err, "lazy", "lazy: must be an object");
	const char *k;
	json_t *x;
	json_object_foreach(v, k, x)
	{
		char field[64];
		snprintf(field, sizeof(field), "lazy.%s", k);
		int64_t n = 0;
		int r;
		if (strcmp(k, "chunk_size") == 0) {
			uint64_t sz = 0;
			if (json_is_integer(x) && json_integer_value(x) > 0)
				sz = (uint64_t)json_integer_value(x);
			else if (json_is_string(x))
				(void)wr_parse_size(json_string_value(x), &sz);
			if (sz < (64u << 10) || sz > (64u << 20) || (sz & (sz - 1)) != 0)
				return wr_err_field(err, field,
						    "%s: a power of two from 64K to 64M (bytes or "
						    "a size like \"1M\"), so whole 64 KiB pieces "
						    "of the chunk index",
						    field);
			o->chunk_size = (uint32_t)sz;
			r = 0;
		} else if (strcmp(k, "fetch_all") == 0) {
			r = wrd_j_bool(x, field, &o->fetch_all, err);
		} else if (strcmp(k, "insecure") == 0) {
			r = wrd_j_bool(x, field, &o->insecure, err);
		} else if (strcmp(k, "prefetch_threads") == 0) {
			r = wrd_j_int(x, field, 1, 64, &n, err);
			o->prefetch_threads = (unsigned)n;
		} else if (strcmp(k, "max_threads") == 0) {
			r = wrd_j_int(x, field, 2, 1024, &n, err);
			o->max_threads = (unsigned)n;
		} else if (strcmp(k, "connect_timeout_ms") == 0) {
			r = wrd_j_int(x, field, 100, 600000, &n, err);
			o->connect_timeout_ms = (unsigned)n;
		} else if (strcmp(k, "range_timeout_ms") == 0) {
			r = wrd_j_int(x, field, 100, 3600000, &n, err);
			o->range_timeout_ms = (unsigned)n;
		} else if (strcmp(k, "retries") == 0) {
			r = wrd_j_int(x, field, 0, 100, &n, err);
			o->retries = (unsigned)n;
		} else if (strcmp(k, "auth_file") == 0) {
			r = path_key(x, k, &o->auth_file, err);
		} else if (strcmp(k, "ca_file") == 0) {
			r = path_key(x, k, &o->ca_file, err);
		} else if (strcmp(k, "lazyfs") == 0) {
			r = path_key(x, k, &o->lazyfs_path, err);
		} else {
			r = wr_err_field(err, field, "%s: unknown key", field);
		}
		if (r < 0)
			return -EINVAL;
	}
	/* Credentials are read by lazyfs (as root): a file others can read
	 * or that is missing is a config error now, not a failed fetch later. */
	if (o->auth_file && access(o->auth_file, R_OK) < 0)
		return wr_err_field(err, "lazy.auth_file", "lazy.auth_file: %s: %s", o->auth_file,
				    strerror(errno));
	if (o->ca_file && access(o->ca_file, R_OK) < 0)
		return wr_err_field(err, "lazy.ca_file", "lazy.ca_file: %s: %s", o->ca_file,
				    strerror(errno));
	return 0;
}

int wrd_images_check_lazy(json_t *v, wr_err *err)
{
	struct wr_lazy_opts o = {0};
	return parse(v, &o, err);
}

int wrd_images_lazy_attach(const struct wrd_config *cfg, struct wr_image_store_opts *so,
			   wr_err *err)
{
	if (g_lazy == NULL) {
		json_t *conf = cfg->lazy ? json_loads(cfg->lazy, 0, NULL) : NULL;
		struct wr_lazy_opts lo = {.store_dir = so->dir, .run_dir = cfg->run_dir};
		int r = parse(conf, &lo, err);
		if (r == 0)
			r = wr_lazy_open(&lo, &g_lazy, err);
		json_decref(conf);
		if (r < 0)
			return wr_err_wrap(err, "on-demand image loading");
	}
	so->lazy = &wr_lazy_image_ops;
	so->lazy_ctx = g_lazy;
	return 0;
}

/* ---- events ------------------------------------------------------------- */

struct poll_state {
	int pid; /* the lazyfs supervisor whose events since counts */
	uint64_t since;
};

static void on_event(void *ctx, uint64_t seq, int64_t time, const char *type, const char *digest,
		     const char *msg)
{
	struct poll_state *ps = ctx;
	wrd_images_event(type, json_pack("{s:s, s:s, s:I, s:s, s:i, s:I}", "source", "lazyfs",
					 "digest", digest, "time", (json_int_t)time, "message", msg,
					 "lazyfs_pid", ps->pid, "lazyfs_seq", (json_int_t)seq));
	bool bad = strcmp(type, "complete") != 0;
	wr_log(bad ? WR_LOG_WARN : WR_LOG_INFO, "lazyfs %s %s: %s", type, digest, msg);
}

/* Where a restarted warrend resumes: the newest lazyfs event it stored for
 * this lazyfs process, so no event is recorded twice and none is lost. */
static uint64_t stored_since(int pid)
{
	int64_t last = wrd_db_last_event_seq(WRD_IMAGES_EVENTS_ID);
	json_t *a = json_array();
	uint64_t since = 0;
	_cleanup_err_ wr_err err = NULL;
	if (wrd_db_events(WRD_IMAGES_EVENTS_ID, last > 1000 ? last - 1000 : 0, 1000, a, &err) ==
	    0) {
		size_t i;
		json_t *e;
		json_array_foreach(a, i, e)
		{
			json_t *d = json_object_get(e, "detail");
			if (json_integer_value(json_object_get(d, "lazyfs_pid")) != pid)
				continue;
			uint64_t s = (uint64_t)json_integer_value(json_object_get(d, "lazyfs_seq"));
			if (s > since)
				since = s;
		}
	}
	json_decref(a);
	return since;
}

static void poll_once(struct poll_state *ps)
{
	int pid = wr_lazy_pid(g_lazy);
	if (pid <= 0)
		return;
	if (pid != ps->pid) {
		ps->pid = pid;
		ps->since = stored_since(pid);
	}
	_cleanup_err_ wr_err err = NULL;
	int64_t last = wr_lazy_events(g_lazy, ps->since, on_event, ps, &err);
	if (last >= 0)
		ps->since = (uint64_t)last;
}

static void *poller_main(void *arg)
{
	(void)arg;
	struct poll_state ps = {0};
	pthread_mutex_lock(&g_plock);
	while (!g_stop) {
		pthread_mutex_unlock(&g_plock);
		poll_once(&ps);
		pthread_mutex_lock(&g_plock);
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 500 * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		if (!g_stop)
			pthread_cond_timedwait(&g_pcond, &g_plock, &ts);
	}
	pthread_mutex_unlock(&g_plock);
	poll_once(&ps); /* what happened up to the stop */
	return NULL;
}

/* The keeper's transitions: "lazyfs_died" and "lazyfs_lost" are warnings. */
static void on_keep(void *ctx, const char *type, const char *msg)
{
	(void)ctx;
	wrd_images_event(type, json_pack("{s:s, s:s}", "source", "lazyfs-keeper", "message", msg));
	bool info = strcmp(type, "lazyfs_restarted") == 0;
	wr_log(info ? WR_LOG_INFO : WR_LOG_WARN, "%s: %s", type, msg);
}

int wrd_images_lazy_start(wr_err *err)
{
	if (g_lazy == NULL || g_poller_on)
		return 0;
	if (wr_lazy_keep_start(g_lazy, on_keep, NULL, err) < 0)
		return wr_err_wrap(err, "lazy images");
	g_stop = false;
	int e = pthread_create(&g_poller, NULL, poller_main, NULL);
	if (e != 0)
		return wr_err_set(err, e, "lazyfs event poller: %s", strerror(e));
	g_poller_on = true;
	return 0;
}

void wrd_images_lazy_stop(void)
{
	if (!g_poller_on)
		return;
	pthread_mutex_lock(&g_plock);
	g_stop = true;
	pthread_cond_signal(&g_pcond);
	pthread_mutex_unlock(&g_plock);
	pthread_join(g_poller, NULL);
	g_poller_on = false;
	wr_lazy_keep_stop(g_lazy); /* lazyfs keeps serving the mounts */
}
