/* Pause and resume of sandboxes (the tier's freezer), auto-resume, the
 * idle and lifetime policies, and the freezer's reconciliation after a
 * restart. The state machine is drawn in manager.h.
 *
 * Write ordering (crash safety): a pause freezes first and commits
 * "paused" second; a resume thaws first and commits "running" second. A
 * crash between the two leaves a record in the old state whose kernel side
 * may already be in the new one; recovery (wrd_life_reconcile) makes the
 * kernel match the record, so the sandbox comes back in its old state,
 * running or paused-and-resumable, never half of each. The answer to the
 * client comes only after the commit. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "daemon/http.h"
#include "daemon/jsonutil.h"
#include "daemon/harvest.h"
#include "daemon/manager.h"

/* Without a previous sample, CPU use is measured over this window (or a
 * quarter of the idle timeout when that is shorter) before deciding. */
#define IDLE_PROBE_MS 1000

const char *wrd_sbx_lease(const struct wrd_sbx *sb)
{
	const char *l = json_string_value(json_object_get(sb->rec.spec, "lease"));
	return l ? l : "";
}

void wrd_sbx_wait_transition(struct wrd_sbx *sb)
{
	while (sb->transition)
		pthread_cond_wait(&sb->cv, &sb->lock);
}

static void end_transition(struct wrd_sbx *sb)
{
	sb->transition = false;
	pthread_cond_broadcast(&sb->cv);
}

int wrd_mgr_pause(struct wrd_sbx *sb, const char *reason, wr_err *err)
{
	if (sb->ops->freeze == NULL)
		return wr_err_set(err, EOPNOTSUPP, "the %s tier cannot pause sandboxes",
				  sb->ops->name);
	pthread_mutex_lock(&sb->lock);
	wrd_sbx_wait_transition(sb);
	if (sb->state == WRD_PAUSED) {
		pthread_mutex_unlock(&sb->lock);
		return 0;
	}
	if (sb->state != WRD_RUNNING || sb->reaping) {
		enum wrd_state st = sb->state;
		pthread_mutex_unlock(&sb->lock);
		return wr_err_set(err, ESRCH, "sandbox %s is %s", sb->rec.id,
				  st == WRD_RUNNING ? "being ended" : wrd_state_name(st));
	}
	bool idle = strcmp(reason, "idle") == 0;
	if (idle && sb->busy > 0) {
		pthread_mutex_unlock(&sb->lock);
		return wr_err_set(err, EBUSY, "sandbox %s became active", sb->rec.id);
	}
	sb->transition = true;
	int64_t now = wrd_now_ms();
	/* the lifetime left; at the lifetime's end (on_timeout=pause) none:
	 * the resume then gives a fresh one */
	int64_t left = strcmp(reason, "timeout") == 0 ? 0 : sb->rec.expires_ms - now;
	if (left < 0)
		left = 0;
	pthread_mutex_unlock(&sb->lock);

	int r = sb->ops->freeze(sb->tsb, true, err);
	if (r == 0 && wrd_db_set_paused(sb->rec.id, now, left, reason, err) < 0) {
		/* not recorded: undo, the sandbox stays running */
		_cleanup_err_ wr_err e2 = NULL;
		if (sb->ops->freeze(sb->tsb, false, &e2) < 0)
			wr_warn("sandbox %s: %s", sb->rec.id, e2->msg);
		r = -1;
	} else if (r < 0) {
		_cleanup_err_ wr_err e2 = NULL;
		sb->ops->freeze(sb->tsb, false, &e2);
	}
	pthread_mutex_lock(&sb->lock);
	if (r == 0) {
		sb->state = sb->rec.state = WRD_PAUSED;
		sb->rec.paused_ms = now;
		sb->rec.remaining_ms = left;
		snprintf(sb->rec.pause_reason, sizeof(sb->rec.pause_reason), "%s", reason);
	}
	end_transition(sb);
	pthread_mutex_unlock(&sb->lock);
	if (r < 0)
		return wr_err_wrap(err, "pause sandbox %s", sb->rec.id);
	json_t *d = json_object();
	json_object_set_new(d, "reason", json_string(reason));
	json_object_set_new(d, "timeout_remaining", json_real((double)left / 1000.0));
	wrd_sbx_event(sb, "paused", d);
	wrd_life_count(true, reason);
	wrd_monitor_poke();
	return 0;
}

int wrd_mgr_resume(struct wrd_sbx *sb, const char *why, const char *only_reason, wr_err *err)
{
	if (sb->ops->freeze == NULL)
		return wr_err_set(err, EOPNOTSUPP, "the %s tier cannot pause sandboxes",
				  sb->ops->name);
	pthread_mutex_lock(&sb->lock);
	wrd_sbx_wait_transition(sb);
	if (sb->state == WRD_RUNNING) {
		pthread_mutex_unlock(&sb->lock);
		return 0;
	}
	if (sb->state != WRD_PAUSED || sb->reaping) {
		enum wrd_state st = sb->state;
		pthread_mutex_unlock(&sb->lock);
		return wr_err_set(err, ESRCH, "sandbox %s is %s", sb->rec.id,
				  st == WRD_PAUSED ? "being ended" : wrd_state_name(st));
	}
	if (only_reason && strcmp(sb->rec.pause_reason, only_reason) != 0) {
		pthread_mutex_unlock(&sb->lock);
		return 0;
	}
	sb->transition = true;
	bool disk = wrd_sbx_suspended(sb);
	int64_t left = sb->rec.remaining_ms;
	if (left <= 0) /* paused at its lifetime's end: a fresh lifetime */
		left = json_integer_value(json_object_get(sb->rec.spec, "timeout")) * 1000;
	char was[16];
	memcpy(was, sb->rec.pause_reason, sizeof(was));
	int64_t paused_for = wrd_now_ms() - sb->rec.paused_ms;
	pthread_mutex_unlock(&sb->lock);

	/* suspended to disk (lifecycle_suspend.c): a new process from the
	 * saved state, committed with its pid */
	int64_t now = wrd_now_ms();
	int r =
	    disk ? wrd_life_resume_disk(sb, left, &now, err) : sb->ops->freeze(sb->tsb, false, err);
	if (!disk)
		now = wrd_now_ms();
	if (r == 0 && !disk && wrd_db_set_resumed(sb->rec.id, now + left, err) < 0) {
		/* not recorded: back to paused, as the record says */
		_cleanup_err_ wr_err e2 = NULL;
		if (sb->ops->freeze(sb->tsb, true, &e2) < 0)
			wr_warn("sandbox %s: %s", sb->rec.id, e2->msg);
		r = -1;
	}
	pthread_mutex_lock(&sb->lock);
	if (r == 0) {
		sb->state = sb->rec.state = WRD_RUNNING;
		sb->rec.expires_ms = now + left;
		sb->rec.paused_ms = sb->rec.remaining_ms = 0;
		sb->rec.pause_reason[0] = 0;
		sb->last_active_ms = now;
		sb->cpu_sample_ms = sb->cpu_probe_ms = 0;
	}
	end_transition(sb);
	pthread_mutex_unlock(&sb->lock);
	if (r < 0)
		return wr_err_wrap(err, "resume sandbox %s", sb->rec.id);
	json_t *d = json_object();
	json_object_set_new(d, "reason", json_string(why));
	json_object_set_new(d, "paused_reason", json_string(was));
	json_object_set_new(d, "paused_s", json_real((double)paused_for / 1000.0));
	wrd_sbx_event(sb, "resumed", d);
	wrd_life_count(false, why);
	wrd_monitor_poke();
	return 0;
}

void wrd_sbx_watch(struct wrd_sbx *sb, bool on)
{
	if (on) {
		_cleanup_err_ wr_err err = NULL;
		if (wrd_mgr_resume(sb, "auto", NULL, &err) < 0 && err->errnum != ESRCH)
			wr_warn("%s", err->msg);
	}
	pthread_mutex_lock(&sb->lock);
	sb->watchers += on ? 1 : -1;
	sb->last_active_ms = wrd_now_ms();
	pthread_mutex_unlock(&sb->lock);
}

int wrd_sbx_begin_resume(struct wrd_sbx *sb, wr_err *err)
{
	for (int tries = 0;; tries++) {
		pthread_mutex_lock(&sb->lock);
		wrd_sbx_wait_transition(sb);
		enum wrd_state st = sb->state;
		if (st == WRD_RUNNING && !sb->reaping) {
			sb->busy++;
			sb->last_active_ms = wrd_now_ms();
			pthread_mutex_unlock(&sb->lock);
			wrd_harvest_wake(sb); /* an idle one gets its weight back first */
			return 0;
		}
		pthread_mutex_unlock(&sb->lock);
		/* paused again between our resume and this begin (a lease
		 * suspended, a request paused it): resume again, a few times */
		if (st != WRD_PAUSED || tries >= 3)
			return wr_err_set(err, ESRCH, "sandbox %s is %s", sb->rec.id,
					  wrd_state_name(st));
		if (wrd_mgr_resume(sb, "auto", NULL, err) < 0)
			return -1;
	}
}

/* ---- idle and lifetime policies (called by the monitor) ------------------ */

struct life_job {
	struct wrd_sbx *sb;
	const char *reason; /* "idle" or "timeout" */
};

static void life_job(void *arg)
{
	struct life_job *j = arg;
	_cleanup_err_ wr_err err = NULL;
	if (wrd_mgr_pause(j->sb, j->reason, &err) < 0 && err->errnum != ESRCH &&
	    err->errnum != EBUSY)
		wr_warn("%s", err->msg);
	pthread_mutex_lock(&j->sb->lock);
	j->sb->life_queued = false;
	pthread_mutex_unlock(&j->sb->lock);
	wrd_mgr_put(j->sb);
	free(j);
}

static bool queue_pause(struct wrd_sbx *sb, const char *reason)
{
	pthread_mutex_lock(&sb->lock);
	bool go = sb->state == WRD_RUNNING && !sb->reaping && !sb->life_queued;
	if (go)
		sb->life_queued = true;
	pthread_mutex_unlock(&sb->lock);
	if (!go)
		return true; /* queued already, or ending */
	struct life_job *j = calloc(1, sizeof(*j));
	if (j == NULL)
		goto undo;
	atomic_fetch_add(&sb->refs, 1);
	j->sb = sb;
	j->reason = reason;
	if (wrd_pool_submit(life_job, j) == 0)
		return true;
	wrd_mgr_put(sb);
	free(j);
undo:
	pthread_mutex_lock(&sb->lock);
	sb->life_queued = false;
	pthread_mutex_unlock(&sb->lock);
	return true; /* tried again at the next scan */
}

static bool policy_pause(const struct wrd_sbx *sb, const char *key, const char *dflt)
{
	const char *p = json_string_value(json_object_get(sb->rec.spec, key));
	return strcmp(p ? p : dflt, "pause") == 0 && sb->ops->freeze != NULL;
}

bool wrd_life_idle_due(struct wrd_sbx *sb, int64_t now)
{
	/* CPU use counts as activity: compare the sandbox's CPU time with
	 * the previous sample; without one, take it and decide after a short
	 * probe window. */
	if (sb->ops->usage) {
		/* busy keeps the tier handle from a concurrent kill's destroy */
		pthread_mutex_lock(&sb->lock);
		bool live = sb->state == WRD_RUNNING && !sb->reaping && !sb->transition;
		if (live)
			sb->busy++;
		pthread_mutex_unlock(&sb->lock);
		if (!live)
			return true;
		struct wr_cgroup_stats st;
		_cleanup_err_ wr_err err = NULL;
		int ur = sb->ops->usage(sb->tsb, &st, &err);
		pthread_mutex_lock(&sb->lock);
		if (--sb->busy == 0)
			pthread_cond_broadcast(&sb->cv);
		pthread_mutex_unlock(&sb->lock);
		if (ur == 0) {
			pthread_mutex_lock(&sb->lock);
			int64_t at = sb->cpu_sample_ms;
			uint64_t prev = sb->cpu_sample_ns;
			sb->cpu_sample_ns = st.cpu_usage_ns;
			sb->cpu_sample_ms = now;
			bool busy_cpu = false, probe = at == 0;
			if (probe) {
				int64_t w = sb->idle_timeout_ms / 4;
				sb->cpu_probe_ms = now + (w < IDLE_PROBE_MS ? w : IDLE_PROBE_MS);
			} else if (now > at) {
				uint64_t used = st.cpu_usage_ns - prev;
				uint64_t window_ns = (uint64_t)(now - at) * 1000000ull;
				/* the harvester's threshold: a VM's QEMU uses
				 * some CPU while its guest idles */
				busy_cpu =
				    (double)used > (double)window_ns * wrd_harvest_idle_cpu(sb);
				if (busy_cpu)
					sb->last_active_ms = now;
			}
			pthread_mutex_unlock(&sb->lock);
			if (probe || busy_cpu)
				return true;
		}
	}
	if (policy_pause(sb, "on_idle", "kill"))
		return queue_pause(sb, "idle");
	return false; /* the monitor kills it (timed_out, reason idle) */
}

bool wrd_life_timeout_due(struct wrd_sbx *sb, int64_t now)
{
	(void)now;
	if (policy_pause(sb, "on_timeout", "kill"))
		return queue_pause(sb, "timeout");
	return false;
}

/* ---- recovery ----------------------------------------------------------- */

int wrd_life_reconcile(struct wrd_sbx *sb, wr_err *err)
{
	if (sb->ops->frozen == NULL || sb->ops->freeze == NULL)
		return 0;
	int f = sb->ops->frozen(sb->tsb, err);
	if (f < 0)
		return -1;
	bool want = sb->rec.state == WRD_PAUSED;
	if ((f == 1) == want && !want)
		return 0;
	/* Paused: freeze again even when asked already, which also waits for
	 * a freeze that a crash cut short to complete. Running but frozen: a
	 * pause the crash cut before its commit (never answered): thaw. */
	if (sb->ops->freeze(sb->tsb, want, err) < 0)
		return -1;
	if ((f == 1) != want)
		wr_info("sandbox %s: %s after an interrupted %s", sb->rec.id,
			want ? "paused again" : "resumed", want ? "resume" : "pause");
	return 0;
}
