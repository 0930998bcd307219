/* Pause with keep_memory=false (tier op suspend, tiers/tier.h): the VM
 * tiers' VM state goes to a file on disk and its QEMU ends, freeing its
 * memory; resume starts a new QEMU from the file. A container's processes
 * are checkpointed with CRIU and end; resume restores them
 * (tiers/container_ckpt.c), where CRIU works (checkpoint.c; else 400 with
 * the reason). The steps below say "VM" and "QEMU"; for a container read
 * "its process tree" and "PID 1".
 *
 * A suspended sandbox is recorded paused with init_pid 0 (no process).
 *
 * Write ordering (crash safety), pause: the tier saves the state (VM
 * stopped, state and disk in a directory published by rename, fsync'd),
 * then the record is committed (paused, init_pid 0), then the monitor's
 * watch of QEMU is dropped and QEMU ends. A crash before the commit leaves
 * a running record and a stopped QEMU, which recovery adopts and runs
 * again (wrd_life_reconcile), discarding the saved directory (the tier's
 * adopt); a crash after it leaves a suspended record, whose adoption kills
 * any QEMU left and finds the saved state. Resume: the tier loads the
 * state into a new QEMU that stays stopped, then the record is committed
 * (running, the new pid), then the watch, then the guest runs and the
 * saved directory goes. A crash before that commit leaves a suspended
 * record, the saved state untouched (the new QEMU never ran: the guest
 * wrote nothing) and a QEMU the adoption kills; after it, a running
 * record whose stopped QEMU recovery adopts and runs. */
#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "common/log.h"
#include "common/util.h"
#include "daemon/checkpoint.h"
#include "daemon/db.h"
#include "daemon/jsonutil.h"
#include "daemon/manager.h"
#include "daemon/netpolicy.h"
#include "daemon/network.h"

/* How long a pause to disk waits for the sandbox's calls in flight. */
#define BUSY_WAIT_S 2

bool wrd_sbx_suspended(const struct wrd_sbx *sb)
{
	return sb->ops->suspend && sb->state == WRD_PAUSED && sb->rec.init_pid == 0;
}

struct susp_upd {
	const char *id, *reason;
	int64_t paused_ms, remaining_ms;
};

static void bind_susp(sqlite3_stmt *st, const void *ctx)
{
	const struct susp_upd *u = ctx;
	sqlite3_bind_text(st, 1, u->id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, u->paused_ms);
	sqlite3_bind_int64(st, 3, u->remaining_ms);
	sqlite3_bind_text(st, 4, u->reason, -1, SQLITE_STATIC);
}

struct run_upd {
	const char *id;
	int64_t expires_ms, pid;
};

static void bind_run(sqlite3_stmt *st, const void *ctx)
{
	const struct run_upd *u = ctx;
	sqlite3_bind_text(st, 1, u->id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, u->expires_ms);
	sqlite3_bind_int64(st, 3, u->pid);
}

static void end_transition(struct wrd_sbx *sb)
{
	sb->transition = false;
	pthread_cond_broadcast(&sb->cv);
}

int wrd_mgr_suspend(struct wrd_sbx *sb, const char *reason, wr_err *err)
{
	const char *no_criu = NULL;
	if (strcmp(sb->ops->name, "container") == 0 && !wrd_ckpt_available(&no_criu))
		return wr_err_field(
		    err, "keep_memory",
		    "keep_memory: false (checkpoint to disk) needs CRIU, "
		    "unusable on this node: %s; a paused container keeps its memory",
		    no_criu);
	if (sb->ops->suspend == NULL)
		return wr_err_field(err, "keep_memory",
				    "keep_memory: false (memory to disk) is not offered by the %s "
				    "tier; a paused %s sandbox keeps its memory",
				    sb->ops->name, sb->ops->name);
	/* Short holds of the sandbox (the harvest sampler, a usage read) end
	 * within milliseconds: waited for, bounded, before the calls still in
	 * flight then refuse the pause (a command, a transfer, a terminal). */
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl); /* sb->cv's clock */
	dl.tv_sec += BUSY_WAIT_S;
	pthread_mutex_lock(&sb->lock);
again:
	wrd_sbx_wait_transition(sb);
	if (wrd_sbx_suspended(sb)) {
		pthread_mutex_unlock(&sb->lock);
		return 0;
	}
	if ((sb->state != WRD_RUNNING && sb->state != WRD_PAUSED) || sb->reaping) {
		enum wrd_state st = sb->state;
		pthread_mutex_unlock(&sb->lock);
		return wr_err_set(err, ESRCH, "sandbox %s is %s", sb->rec.id,
				  st == WRD_RUNNING || st == WRD_PAUSED ? "being ended"
									: wrd_state_name(st));
	}
	if (sb->busy > 0 && pthread_cond_timedwait(&sb->cv, &sb->lock, &dl) != ETIMEDOUT)
		goto again;
	if (sb->busy > 0) {
		pthread_mutex_unlock(&sb->lock);
		return wr_err_set(err, ESRCH,
				  "sandbox %s has operations in flight (a command, a file "
				  "transfer, a terminal): its state goes to disk only when none "
				  "runs",
				  sb->rec.id);
	}
	/* already paused in memory: it stays paused, now on disk */
	bool was_paused = sb->state == WRD_PAUSED;
	sb->transition = true;
	int64_t now = wrd_now_ms();
	int64_t paused_ms = was_paused ? sb->rec.paused_ms : now;
	int64_t left = was_paused			? sb->rec.remaining_ms
		       : strcmp(reason, "timeout") == 0 ? 0
							: sb->rec.expires_ms - now;
	if (left < 0)
		left = 0;
	char why[16];
	snprintf(why, sizeof(why), "%s", was_paused ? sb->rec.pause_reason : reason);
	pthread_mutex_unlock(&sb->lock);

	uint64_t t0 = wr_now_ns();
	int r = sb->ops->suspend(sb->tsb, WR_SUSPEND_SAVE, err);
	uint64_t saved_ns = wr_now_ns() - t0;
	struct susp_upd u = {sb->rec.id, why, paused_ms, left};
	if (r == 0 &&
	    wrd_db_write("UPDATE sandboxes SET state = 'paused', paused_ms = ?2, remaining_ms = ?3,"
			 " pause_reason = ?4, init_pid = 0 WHERE id = ?1",
			 "suspend sandbox", bind_susp, &u, err) < 0) {
		/* not recorded: the VM stays as it was */
		_cleanup_err_ wr_err e2 = NULL;
		if (sb->ops->suspend(sb->tsb, WR_SUSPEND_UNDO, &e2) < 0 ||
		    (was_paused && sb->ops->freeze(sb->tsb, true, &e2) < 0))
			wr_warn("sandbox %s: %s", sb->rec.id, e2->msg);
		r = -1;
	}
	if (r == 0) {
		/* the watch goes before QEMU does: its end is no failure */
		if (sb->pidfd >= 0) {
			wrd_monitor_forget(sb);
			close(sb->pidfd);
			sb->pidfd = -1;
		}
		/* its filter's links before its cgroup goes (the VM is stopped);
		 * the policy stays for the resume */
		wrd_nf_suspend(sb);
		_cleanup_err_ wr_err e2 = NULL;
		if (sb->ops->suspend(sb->tsb, WR_SUSPEND_END, &e2) < 0)
			wr_warn("sandbox %s: suspend: %s", sb->rec.id, e2->msg);
	}
	pthread_mutex_lock(&sb->lock);
	if (r == 0) {
		sb->state = sb->rec.state = WRD_PAUSED;
		sb->rec.paused_ms = paused_ms;
		sb->rec.remaining_ms = left;
		sb->rec.init_pid = 0;
		snprintf(sb->rec.pause_reason, sizeof(sb->rec.pause_reason), "%s", why);
	}
	end_transition(sb);
	pthread_mutex_unlock(&sb->lock);
	if (r < 0)
		return wr_err_wrap(err, "pause sandbox %s to disk", sb->rec.id);
	json_t *d = json_object();
	json_object_set_new(d, "reason", json_string(why));
	json_object_set_new(d, "keep_memory", json_false());
	json_object_set_new(d, "save_s", json_real((double)saved_ns / 1e9));
	json_object_set_new(d, "timeout_remaining", json_real((double)left / 1000.0));
	wrd_sbx_event(sb, "paused", d);
	if (!was_paused)
		wrd_life_count(true, reason);
	wrd_monitor_poke();
	return 0;
}

int wrd_life_resume_disk(struct wrd_sbx *sb, int64_t left, int64_t *now_out, wr_err *err)
{
	uint64_t t0 = wr_now_ns();
	/* a namespace again when the previous daemon's died with it (the
	 * sandbox was suspended across a restart: network.c) */
	int r = wrd_net_resume(sb, err);
	if (r == 0)
		r = sb->ops->suspend(sb->tsb, WR_SUSPEND_LOAD, err);
	if (r < 0)
		return -1;
	/* Ordering: the filter on the new QEMU's cgroup after the load (QEMU
	 * stopped, its guest never ran) and before the guest runs; a policy
	 * that cannot be attached leaves it suspended. */
	if (wrd_nf_resume(sb, wrd_sbx_cgroup_v2_fd(sb), err) < 0) {
		_cleanup_err_ wr_err e2 = NULL;
		if (sb->ops->suspend(sb->tsb, WR_SUSPEND_UNLOAD, &e2) < 0)
			wr_warn("sandbox %s: %s", sb->rec.id, e2->msg);
		return -1;
	}
	pid_t pid = sb->ops->main_pid ? sb->ops->main_pid(sb->tsb) : 0;
	int64_t now = wrd_now_ms();
	struct run_upd u = {sb->rec.id, now + left, pid};
	if (wrd_db_write("UPDATE sandboxes SET state = 'running', expires_ms = ?2, paused_ms = 0,"
			 " remaining_ms = 0, pause_reason = '', init_pid = ?3 WHERE id = ?1",
			 "resume sandbox", bind_run, &u, err) < 0) {
		wrd_nf_suspend(sb);
		_cleanup_err_ wr_err e2 = NULL;
		if (sb->ops->suspend(sb->tsb, WR_SUSPEND_UNLOAD, &e2) < 0)
			wr_warn("sandbox %s: %s", sb->rec.id, e2->msg);
		return -1;
	}
	sb->rec.init_pid = pid;
	sb->pidfd = wr_pidfd_open(pid, 0);
	wrd_monitor_watch(sb);
	*now_out = now;
	/* recorded running: the guest runs now (a failure here leaves a
	 * running sandbox whose QEMU the monitor watches) */
	_cleanup_err_ wr_err rerr = NULL;
	if (sb->ops->suspend(sb->tsb, WR_SUSPEND_RUN, &rerr) < 0)
		wr_warn("sandbox %s: resumed from disk: %s", sb->rec.id, rerr->msg);
	json_t *d = json_object();
	json_object_set_new(d, "restore_s", json_real((double)(wr_now_ns() - t0) / 1e9));
	json_object_set_new(d, "init_pid", json_integer(pid));
	wrd_sbx_event(sb, "restored", d);
	return 0;
}
