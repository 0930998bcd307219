/* Lifetimes and liveness: one monitor thread watches every sandbox's PID 1
 * (pidfd in an epoll set) and its lifetime and idle deadlines, and hands
 * expirations and deaths to the worker pool as kills. Also the recovery
 * that runs once at start. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "common/log.h"
#include "daemon/cmd_internal.h"
#include "daemon/commands.h"
#include "daemon/http.h"
#include "daemon/jsonutil.h"
#include "daemon/lease.h"
#include "daemon/manager.h"
#include "daemon/netpolicy.h"
#include "tiers/container.h"
#include "tiers/microvm.h"
#include "tiers/vm.h"
#include "tiers/vm_tier.h"

static int g_ep = -1, g_wake = -1;
static pthread_t g_thread;
static atomic_bool g_stop;
static bool g_running;

void wrd_monitor_watch(struct wrd_sbx *sb)
{
	if (sb->pidfd < 0 || g_ep < 0)
		return;
	atomic_fetch_add(&sb->refs, 1); /* the epoll set's */
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = sb};
	if (epoll_ctl(g_ep, EPOLL_CTL_ADD, sb->pidfd, &ev) < 0)
		wrd_mgr_put(sb);
}

/* Adopted commands share the epoll set, their pointers tagged with bit 0
 * (a struct pointer's is always clear). */
void wrd_monitor_watch_cmd(struct wrd_cmd *c)
{
	if (c->adopt_pidfd < 0 || g_ep < 0)
		return;
	atomic_fetch_add(&c->refs, 1); /* the epoll set's */
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)(uintptr_t)c | 1};
	if (epoll_ctl(g_ep, EPOLL_CTL_ADD, c->adopt_pidfd, &ev) < 0)
		wrd_cmd_put(c);
}

void wrd_monitor_forget(struct wrd_sbx *sb)
{
	if (sb->pidfd < 0 || g_ep < 0)
		return;
	if (epoll_ctl(g_ep, EPOLL_CTL_DEL, sb->pidfd, NULL) == 0)
		wrd_mgr_put(sb);
}

void wrd_monitor_poke(void)
{
	uint64_t one = 1;
	if (g_wake >= 0 && write(g_wake, &one, sizeof(one)) < 0)
		return;
}

struct reap {
	struct wrd_sbx *sb;
	enum wrd_state why;
	json_t *detail;
};

static void reap_job(void *arg)
{
	struct reap *rp = arg;
	_cleanup_err_ wr_err err = NULL;
	if (wrd_mgr_kill(rp->sb, rp->why, rp->detail, NULL, NULL, &err) < 0 && err->errnum != ESRCH)
		wr_warn("%s", err->msg);
	wrd_mgr_put(rp->sb);
	free(rp);
}

/* Queue a kill once; takes a reference. */
static void reap(struct wrd_sbx *sb, enum wrd_state why, json_t *detail)
{
	pthread_mutex_lock(&sb->lock);
	bool go = (sb->state == WRD_RUNNING || sb->state == WRD_PAUSED) && !sb->reaping;
	if (go)
		sb->reaping = true;
	pthread_mutex_unlock(&sb->lock);
	struct reap *rp = go ? calloc(1, sizeof(*rp)) : NULL;
	if (rp == NULL) {
		json_decref(detail);
		return;
	}
	atomic_fetch_add(&sb->refs, 1);
	rp->sb = sb;
	rp->why = why;
	rp->detail = detail;
	if (wrd_pool_submit(reap_job, rp) < 0) {
		pthread_mutex_lock(&sb->lock);
		sb->reaping = false;
		pthread_mutex_unlock(&sb->lock);
		json_decref(detail);
		wrd_mgr_put(sb);
		free(rp);
	}
}

/* Check every deadline; returns ms until the next one (capped). */
static int64_t scan(void)
{
	size_t n;
	struct wrd_sbx **v = wrd_table_snapshot(&n);
	int64_t now = wrd_now_ms(), next = 1000;
	for (size_t i = 0; v && i < n; i++) {
		struct wrd_sbx *sb = v[i];
		pthread_mutex_lock(&sb->lock);
		/* paused sandboxes have no deadline: their clock stands still */
		bool running =
		    sb->state == WRD_RUNNING && !sb->reaping && !sb->transition && !sb->life_queued;
		int64_t exp = sb->rec.expires_ms;
		int64_t idle_at = sb->idle_timeout_ms > 0 && sb->busy == 0 && sb->watchers == 0
				      ? sb->last_active_ms + sb->idle_timeout_ms
				      : INT64_MAX;
		if (idle_at != INT64_MAX && sb->cpu_probe_ms > idle_at)
			idle_at = sb->cpu_probe_ms; /* measuring its CPU use */
		pthread_mutex_unlock(&sb->lock);
		if (running) {
			/* lifecycle.c: on_timeout/on_idle "pause", or CPU use */
			if (now >= exp && wrd_life_timeout_due(sb, now)) {
				next = 10;
			} else if (now < exp && now >= idle_at && wrd_life_idle_due(sb, now)) {
				next = 10;
			} else if (now >= exp) {
				json_t *d = json_object();
				json_object_set_new(d, "reason", json_string("lifetime"));
				reap(sb, WRD_TIMED_OUT, d);
			} else if (now >= idle_at) {
				json_t *d = json_object();
				json_object_set_new(d, "reason", json_string("idle"));
				reap(sb, WRD_TIMED_OUT, d);
			} else {
				int64_t t = (exp < idle_at ? exp : idle_at) - now;
				if (t < next)
					next = t;
			}
		}
		wrd_mgr_put(sb);
	}
	free(v);
	next = wrd_leases_tick(now, next); /* lease.c: heartbeats, expiry */
	return next < 10 ? 10 : next;
}

static void *monitor_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "wrd-monitor");
	struct epoll_event evs[64];
	int64_t timeout = 0;
	while (!atomic_load(&g_stop)) {
		int n = epoll_wait(g_ep, evs, 64, (int)timeout);
		for (int i = 0; i < n; i++) {
			if (evs[i].data.ptr == NULL) {
				uint64_t v;
				if (read(g_wake, &v, sizeof(v)) < 0)
					continue;
				continue;
			}
			if (evs[i].data.u64 & 1) {
				/* an adopted command exited */
				struct wrd_cmd *c =
				    (struct wrd_cmd *)(uintptr_t)(evs[i].data.u64 & ~1ull);
				epoll_ctl(g_ep, EPOLL_CTL_DEL, c->adopt_pidfd, NULL);
				wrd_cmd_adopted_exit(c);
				wrd_cmd_put(c);
				continue;
			}
			struct wrd_sbx *sb = evs[i].data.ptr;
			/* PID 1 exited and nobody asked: the sandbox failed */
			atomic_fetch_add(&sb->refs, 1);
			wrd_monitor_forget(sb);
			json_t *d = json_object();
			json_object_set_new(d, "reason", json_string("the sandbox's PID 1 exited"));
			reap(sb, WRD_FAILED, d);
			wrd_mgr_put(sb);
		}
		timeout = scan();
	}
	return NULL;
}

int wrd_mgr_start_monitor(wr_err *err)
{
	g_ep = epoll_create1(EPOLL_CLOEXEC);
	g_wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
	if (g_ep < 0 || g_wake < 0 || epoll_ctl(g_ep, EPOLL_CTL_ADD, g_wake, &ev) < 0)
		return wr_err_sys(err, "monitor epoll");
	size_t n;
	struct wrd_sbx **v = wrd_table_snapshot(&n);
	for (size_t i = 0; v && i < n; i++) {
		wrd_monitor_watch(v[i]);
		/* and the running commands recovery adopted */
		pthread_mutex_lock(&v[i]->lock);
		for (struct wrd_cmd *c = v[i]->cmds; c; c = c->next)
			if (c->adopted && !c->done)
				wrd_monitor_watch_cmd(c);
		pthread_mutex_unlock(&v[i]->lock);
		wrd_mgr_put(v[i]);
	}
	free(v);
	if (pthread_create(&g_thread, NULL, monitor_main, NULL) != 0)
		return wr_err_set(err, EAGAIN, "start monitor thread");
	g_running = true;
	return 0;
}

void wrd_mgr_stop_monitor(void)
{
	if (!g_running)
		return;
	atomic_store(&g_stop, true);
	wrd_monitor_poke();
	pthread_join(g_thread, NULL);
	g_running = false;
}

/* ---- recovery ----------------------------------------------------------- */

struct recover_stats {
	unsigned adopted, failed, cleaned;
};

static int recover_one(struct wrd_record *rec, void *ctx)
{
	struct recover_stats *st = ctx;
	_cleanup_err_ wr_err err = NULL;
	if (rec->state == WRD_CREATING) {
		/* never acknowledged: the sweep below removes what it left */
		if (wrd_db_delete(rec->id, &err) < 0)
			wr_warn("recover %s: %s", rec->id, err->msg);
		st->cleaned++;
		return 0;
	}
	struct wrd_sbx *sb = wrd_sbx_new(rec);
	if (sb == NULL)
		return -ENOMEM;
	sb->ev_seq = (uint64_t)wrd_db_last_event_seq(rec->id);
	struct wr_sandbox_spec spec;
	_cleanup_free_ struct wr_env_kv *env = NULL;
	int r = -1;
	bool container = sb->ops && strcmp(sb->ops->name, "container") == 0;
	/* init_pid 0 with a paused record: suspended to disk (no process;
	 * lifecycle_suspend.c), found again by the tier's adopt */
	bool disk = sb->ops && sb->ops->suspend && rec->state == WRD_PAUSED && rec->init_pid == 0;
	if (sb->ops && (container || sb->ops->adopt) && (rec->init_pid > 0 || disk) &&
	    wrd_spec_from_record(&sb->rec, &spec, &env, &err) == 0)
		r = container ? wr_container_adopt(&spec, rec->init_pid, &sb->tsb, &err)
			      : sb->ops->adopt(&spec, rec->init_pid, &sb->tsb, &err);
	else if (err == NULL)
		wr_err_set(&err, EINVAL, "no PID 1 recorded");
	/* Its finished commands' OOM kills, which their removed leaves took
	 * with them: the recorded ones, and the leaves a crash left. A
	 * failure costs the counts, not the sandbox. */
	if (r == 0 && container) {
		struct wr_cgroup_stats kept = {0};
		_cleanup_err_ wr_err kerr = NULL;
		if (wrd_db_leaf_sums(rec->id, &kept.oom_kills, &kept.pids_max_hits, &kerr) < 0 ||
		    wr_container_adopt_counts(sb->tsb, &kept, &kerr) < 0)
			wr_warn("sandbox %s: counters of its commands: %s", rec->id, kerr->msg);
	}
	/* Its network filter again before it is served (the links died with
	 * the previous daemon); a sandbox whose policy cannot be enforced is
	 * not kept. */
	if (r == 0 && (container || sb->ops->cgroup_v2_fd) &&
	    (r = wrd_nf_attach(sb, wrd_sbx_cgroup_v2_fd(sb), &err)) < 0) {
		_cleanup_err_ wr_err kerr = NULL;
		sb->ops->kill(sb->tsb, &kerr);
		sb->ops->destroy(&sb->tsb, &kerr);
	}
	if (r < 0) {
		wr_warn("sandbox %s could not be adopted: %s", rec->id, err ? err->msg : "?");
		_cleanup_err_ wr_err e2 = NULL;
		if (wrd_db_set_state(rec->id, WRD_FAILED, &e2) < 0)
			wr_warn("recover %s: %s", rec->id, e2->msg);
		json_t *d = json_object();
		json_object_set_new(d, "reason", json_string(err ? err->msg : "adoption failed"));
		wrd_sbx_event(sb, "failed", d);
		wrd_mgr_put(sb);
		st->failed++;
		return 0;
	}
	sb->pidfd = wr_pidfd_open(rec->init_pid, 0);
	/* running or paused, as recorded; the freezer made to match */
	sb->state = sb->rec.state = rec->state == WRD_PAUSED ? WRD_PAUSED : WRD_RUNNING;
	_cleanup_err_ wr_err lerr = NULL;
	if (wrd_life_reconcile(sb, &lerr) < 0)
		wr_warn("sandbox %s: freezer: %s", rec->id, lerr->msg);
	wrd_table_insert(sb);
	_cleanup_err_ wr_err cerr = NULL;
	if (wrd_cmds_adopt(sb, &cerr) < 0)
		wr_warn("sandbox %s: its commands could not be loaded: %s", rec->id, cerr->msg);
	json_t *d = json_object();
	json_object_set_new(d, "init_pid", json_integer(rec->init_pid));
	wrd_sbx_event(sb, "adopted", d);
	wrd_mgr_put(sb);
	st->adopted++;
	return 0;
}

static bool keep_live(const char *id, void *ctx)
{
	(void)ctx;
	/* a VM's QEMU has the cgroup vm-<id> (tiers/qemu_proc.c) */
	if (strncmp(id, "vm-", 3) == 0 && wrd_table_has(id + 3))
		return true;
	return wrd_table_has(id);
}

int wrd_mgr_recover(wr_err *err)
{
	struct recover_stats st = {0};
	if (wrd_db_each_active(recover_one, &st, err) < 0)
		return wr_err_wrap(err, "recover sandboxes");
	/* leases after the sandboxes: each is then made to match them */
	if (wrd_leases_load(err) < 0)
		return wr_err_wrap(err, "recover");
	int swept = wr_container_sweep(keep_live, NULL, err);
	if (swept < 0)
		return wr_err_wrap(err, "sweep leftovers");
	/* VMs no record adopted: their QEMU (which outlives a daemon), its
	 * cgroup, jail and files */
	if (wr_tier_lookup("microvm"))
		swept += (int)wr_microvm_sweep(keep_live, NULL);
	if (wr_tier_lookup("vm"))
		swept += (int)wr_fullvm_sweep(keep_live, NULL) +
			 (int)wr_vm_tier_sweep_saved(keep_live, NULL);
	if (st.adopted || st.failed || st.cleaned || swept)
		wr_info("recovered: %u adopted, %u failed, %u half-created cleaned, %d leftovers "
			"swept",
			st.adopted, st.failed, st.cleaned, swept);
	return 0;
}
