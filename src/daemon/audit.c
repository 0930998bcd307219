/* The audit sink: wr_audit_emit from any thread into the aggregate table
 * (audit_core.c) under one mutex; a writer thread moves dirty rows to
 * SQLite in batches (audit_store.c), applies retention, and wakes the
 * followers of the live stream. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/cleanup.h"
#include "daemon/audit_internal.h"
#include "daemon/config.h"
#include "daemon/jsonutil.h"
#include "daemon/trail.h"
#include "isolate/seccomp.h"

struct wr_audit {
	pthread_mutex_t lock;
	pthread_cond_t wake;   /* the writer: rows are dirty, or stop */
	pthread_cond_t commit; /* followers: a batch was committed */
	struct wra_core core;
	struct wra_rules rules;
	struct wr_audit_config cfg;
	uint64_t committed_rev;
	uint64_t flush_req, flush_done; /* flush tickets */
	bool stop;
	pthread_t writer;
	bool writer_running;
	uint64_t written, write_errors, kernel_lost;
};

struct wr_audit *wr_audit_global;

/* ---- emit ---------------------------------------------------------------- */

static int64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* ---- owners that are not sandboxes (function pools) ----------------------- */

#define NOWNERS 1024
static pthread_mutex_t g_owner_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	char owner[40];
	char tenant[130];
	uint64_t used;
} g_owners[NOWNERS];
static uint64_t g_owner_tick;

void wr_audit_owner(const char *owner, const char *tenant)
{
	if (owner == NULL || tenant == NULL || strlen(owner) >= sizeof(g_owners[0].owner) ||
	    strlen(tenant) >= sizeof(g_owners[0].tenant))
		return;
	pthread_mutex_lock(&g_owner_lock);
	unsigned slot = 0;
	for (unsigned i = 0; i < NOWNERS; i++) {
		if (strcmp(g_owners[i].owner, owner) == 0) {
			slot = i;
			break;
		}
		if (g_owners[i].used < g_owners[slot].used)
			slot = i; /* free (0) or least recently said */
	}
	snprintf(g_owners[slot].owner, sizeof(g_owners[slot].owner), "%s", owner);
	snprintf(g_owners[slot].tenant, sizeof(g_owners[slot].tenant), "%s", tenant);
	g_owners[slot].used = ++g_owner_tick;
	pthread_mutex_unlock(&g_owner_lock);
}

static bool owner_tenant(const char *owner, char *out, size_t n)
{
	bool found = false;
	pthread_mutex_lock(&g_owner_lock);
	for (unsigned i = 0; i < NOWNERS && !found; i++)
		if (g_owners[i].used && strcmp(g_owners[i].owner, owner) == 0) {
			snprintf(out, n, "%s", g_owners[i].tenant);
			found = true;
		}
	pthread_mutex_unlock(&g_owner_lock);
	return found;
}

void wr_audit_emit(struct wr_audit *a, const struct wr_audit_event *ev)
{
	if (a == NULL || ev == NULL)
		return;
	struct wr_audit_event owned;
	char tenant[130];
	if (ev->tenant == NULL && ev->sandbox_id && strncmp(ev->sandbox_id, "fn-", 3) == 0 &&
	    owner_tenant(ev->sandbox_id, tenant, sizeof(tenant))) {
		owned = *ev;
		owned.tenant = tenant;
		ev = &owned;
	}
	int64_t now = now_ns();
	pthread_mutex_lock(&a->lock);
	bool was_dirty = wra_core_dirty(&a->core);
	wra_core_feed(&a->core, ev, now);
	if (!was_dirty && wra_core_dirty(&a->core))
		pthread_cond_signal(&a->wake);
	pthread_mutex_unlock(&a->lock);
}

void wr_audit_note(enum wr_audit_layer layer, const char *sandbox_id, const char *tenant,
		   const char *action, const char *subject, json_t *what, bool denied)
{
	struct wr_audit_event ev = {.sandbox_id = sandbox_id,
				    .tenant = tenant,
				    .layer = layer,
				    .denied = denied,
				    .action = action,
				    .subject = subject,
				    .what = what};
	wr_audit_emit(wr_audit_global, &ev);
	json_decref(what);
}

void wr_audit_net(enum wr_audit_layer layer, const char *sandbox_id, const char *tenant,
		  const char *action, const char *ip, unsigned port, const char *proto,
		  const char *name, const char *reason, uint64_t count, int64_t time_ms)
{
	if (wr_audit_global == NULL)
		return;
	char subject[320];
	wra_net_subject(ip, port, proto, name, subject, sizeof(subject));
	json_t *what = json_object();
	if (ip && *ip)
		json_object_set_new(what, "ip", json_string(ip));
	if (port)
		json_object_set_new(what, "port", json_integer(port));
	if (proto && *proto)
		json_object_set_new(what, "proto", json_string(proto));
	if (name && *name)
		json_object_set_new(what, "name", json_string(name));
	if (reason && *reason)
		json_object_set_new(what, "reason", json_string(reason));
	struct wr_audit_event ev = {.sandbox_id = sandbox_id,
				    .tenant = tenant,
				    .time_ns = time_ms * 1000000LL,
				    .layer = layer,
				    .denied = true,
				    .action = action,
				    .subject = subject[0] ? subject : NULL,
				    .what = what,
				    .count = count};
	wr_audit_emit(wr_audit_global, &ev);
	json_decref(what);
}

void wr_audit_get_stats(struct wr_audit *a, struct wr_audit_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (a == NULL)
		return;
	pthread_mutex_lock(&a->lock);
	*out = a->core.stats;
	out->written = a->written;
	out->write_errors = a->write_errors;
	out->kernel_lost = a->kernel_lost;
	pthread_mutex_unlock(&a->lock);
}

void wr_audit_kernel_lost(uint64_t n)
{
	struct wr_audit *a = wr_audit_global;
	if (a == NULL)
		return;
	pthread_mutex_lock(&a->lock);
	a->kernel_lost += n;
	pthread_mutex_unlock(&a->lock);
}

static _Atomic bool g_followers_ended;

void wr_audit_end_followers(void)
{
	g_followers_ended = true;
	struct wr_audit *a = wr_audit_global;
	if (a) {
		pthread_mutex_lock(&a->lock);
		pthread_cond_broadcast(&a->commit);
		pthread_mutex_unlock(&a->lock);
	}
}

bool wr_audit_followers_ended(void)
{
	return g_followers_ended;
}

const struct wr_audit_config *wr_audit_cfg(void)
{
	return wr_audit_global ? &wr_audit_global->cfg : NULL;
}

/* ---- the writer ----------------------------------------------------------- */

/* Gather for a moment: events come in bursts and a commit costs as much as
 * many rows. Readers flush first, so nobody waits for this. */
#define GATHER_MS 50
#define BATCH 512

static void write_batch(struct wr_audit *a, struct wra_snap *buf)
{
	for (;;) {
		pthread_mutex_lock(&a->lock);
		size_t n = wra_core_take(&a->core, buf, BATCH, now_ns());
		pthread_mutex_unlock(&a->lock);
		if (n == 0)
			return;
		uint64_t rev = 0;
		_cleanup_err_ wr_err err = NULL;
		int r = wra_store_write(buf, n, &rev, &err);
		for (size_t i = 0; i < n; i++)
			wra_snap_clear(&buf[i]);
		pthread_mutex_lock(&a->lock);
		if (r < 0) {
			a->write_errors += n;
		} else {
			a->written += n;
			a->committed_rev = rev;
			pthread_cond_broadcast(&a->commit);
		}
		pthread_mutex_unlock(&a->lock);
		if (n < BATCH)
			return;
	}
}

static void *writer_main(void *arg)
{
	struct wr_audit *a = arg;
	pthread_setname_np(pthread_self(), "wrd-audit");
	struct wra_snap *buf = calloc(BATCH, sizeof(*buf));
	int64_t last_retain = 0;
	if (buf == NULL)
		return NULL;
	for (;;) {
		pthread_mutex_lock(&a->lock);
		struct timespec dl;
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += 1; /* rows whose window ends still need forgetting */
		while (!wra_core_dirty(&a->core) && !a->stop && a->flush_req == a->flush_done)
			if (pthread_cond_timedwait(&a->wake, &a->lock, &dl) != 0)
				break;
		if (wra_core_dirty(&a->core) && !a->stop && a->flush_req == a->flush_done) {
			clock_gettime(CLOCK_REALTIME, &dl);
			dl.tv_nsec += GATHER_MS * 1000000L;
			if (dl.tv_nsec >= 1000000000L) {
				dl.tv_sec++;
				dl.tv_nsec -= 1000000000L;
			}
			while (!a->stop && a->flush_req == a->flush_done &&
			       pthread_cond_timedwait(&a->wake, &a->lock, &dl) == 0)
				;
		}
		bool stop = a->stop;
		uint64_t ticket = a->flush_req;
		pthread_mutex_unlock(&a->lock);
		write_batch(a, buf);
		int64_t now = now_ns();
		if (now - last_retain > (int64_t)a->cfg.retention_check_s * 1000000000LL) {
			last_retain = now;
			wra_store_retain(a->cfg.retention_s, a->cfg.max_per_sandbox,
					 a->cfg.max_rows, now, NULL);
		}
		pthread_mutex_lock(&a->lock);
		a->flush_done = ticket;
		pthread_cond_broadcast(&a->commit);
		pthread_mutex_unlock(&a->lock);
		if (stop)
			break;
	}
	free(buf);
	return NULL;
}

void wr_audit_flush(void)
{
	struct wr_audit *a = wr_audit_global;
	if (a == NULL || !a->writer_running)
		return;
	pthread_mutex_lock(&a->lock);
	uint64_t ticket = ++a->flush_req;
	pthread_cond_signal(&a->wake);
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 5;
	while (a->flush_done < ticket && !a->stop)
		if (pthread_cond_timedwait(&a->commit, &a->lock, &dl) != 0)
			break;
	pthread_mutex_unlock(&a->lock);
}

uint64_t wr_audit_wait(uint64_t rev, int timeout_ms)
{
	struct wr_audit *a = wr_audit_global;
	if (a == NULL)
		return rev;
	pthread_mutex_lock(&a->lock);
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += timeout_ms / 1000;
	dl.tv_nsec += (timeout_ms % 1000) * 1000000L;
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	while (a->committed_rev <= rev && !a->stop && !g_followers_ended)
		if (pthread_cond_timedwait(&a->commit, &a->lock, &dl) != 0)
			break;
	uint64_t r = a->committed_rev;
	pthread_mutex_unlock(&a->lock);
	return r;
}

/* ---- start / stop ----------------------------------------------------------- */

static char g_kernel_unavailable[512];

const char *wr_audit_kernel_unavailable(void)
{
	return g_kernel_unavailable[0] ? g_kernel_unavailable : NULL;
}

static struct wr_audit g_audit = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
    .commit = PTHREAD_COND_INITIALIZER,
};

int wr_audit_start(const struct wrd_config *cfg, wr_err *err)
{
	struct wr_audit *a = &g_audit;
	json_t *obj = NULL;
	if (cfg->audit && (obj = json_loads(cfg->audit, 0, NULL)) == NULL)
		return wr_err_set(err, EINVAL, "audit: bad config text");
	int r = wr_audit_config_parse(obj, &a->cfg, err);
	json_decref(obj);
	if (r < 0)
		return r;
	const char *mode = a->cfg.kernel_audit ? a->cfg.kernel_audit : "auto";
	/* Without a reader the kernel's records would only cost. */
	wr_seccomp_set_log(a->cfg.enabled && strcmp(mode, "off") != 0);
	if (!a->cfg.enabled)
		return 0;
	if (a->cfg.rules_path && wra_rules_load(a->cfg.rules_path, &a->rules, err) < 0)
		return -EINVAL;
	int64_t next_id = 1;
	if (wra_store_init(&next_id, err) < 0)
		return -EIO;
	a->committed_rev = wra_store_max_rev();
	if (wra_core_init(&a->core, &a->cfg, &a->rules, next_id) < 0)
		return wr_err_set(err, ENOMEM, "audit: out of memory");
	if (pthread_create(&a->writer, NULL, writer_main, a) != 0)
		return wr_err_set(err, EAGAIN, "audit: start writer thread");
	a->writer_running = true;
	wr_audit_global = a;
	if (strcmp(mode, "off") != 0 &&
	    wra_kernel_start(cfg->state_dir, mode, a->cfg.ignore_clone3_enosys, a->cfg.init_netns,
			     err) < 0) {
		if (strcmp(mode, "auto") != 0)
			return wr_err_wrap(err, "audit");
		/* "auto" on a host without audit (CONFIG_AUDIT=n, no
		 * CAP_AUDIT_READ): the rest of the audit works; the caller
		 * warns with wr_audit_kernel_unavailable(). */
		snprintf(g_kernel_unavailable, sizeof(g_kernel_unavailable),
			 "kernel records unavailable (no seccomp or Landlock events): %s",
			 (*err)->msg);
		wr_err_free(err);
		wra_kernel_stop();
		wr_seccomp_set_log(false);
	}
	if (a->cfg.cgroup_poll_ms && wra_cgroup_start(a->cfg.cgroup_poll_ms, err) < 0)
		return wr_err_wrap(err, "audit");
	return 0;
}

void wr_audit_stop(void)
{
	struct wr_audit *a = &g_audit;
	wra_kernel_stop();
	wra_cgroup_stop();
	wrd_trail_shutdown();
	wr_audit_global = NULL; /* emitters from now on are ignored */
	if (a->writer_running) {
		pthread_mutex_lock(&a->lock);
		a->stop = true;
		pthread_cond_broadcast(&a->wake);
		pthread_cond_broadcast(&a->commit);
		pthread_mutex_unlock(&a->lock);
		pthread_join(a->writer, NULL);
		a->writer_running = false;
	}
	wr_audit_global = NULL;
	wra_core_free(&a->core);
	wra_rules_free(&a->rules);
	wr_audit_config_clear(&a->cfg);
}
