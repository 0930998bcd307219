/* The sandbox manager: the in-memory table of live sandboxes, their state
 * machine, lifetimes, and recovery after a restart.
 *
 *   creating --tier create ok--> running --DELETE--------> killed
 *      |                         ^  |------lifetime/idle--> timed_out
 *      `--tier create failed:    |  `------PID 1 died-----> failed
 *         record deleted         |  |
 *                   resume, any  |  | pause (request, idle, lease,
 *                   call needing |  v  lifetime with on_timeout=pause)
 *                   it running  paused --DELETE / PID 1 died--> killed/failed
 *
 * Lifecycle (lifecycle.c): pause freezes the sandbox's cgroup and then
 * commits state=paused with the lifetime left (its clock stops); resume
 * thaws and then commits running with a new expiry. A pause or resume in
 * flight is `transition`: begin, kill and other transitions wait for it
 * (bounded by the freezer's 5 s). Recovery makes the kernel match the
 * record (a crash between the two steps leaves the old state).
 *
 * Locking: the table has one rwlock held only for lookups/inserts/removals
 * (never across kernel work). Each sandbox has its own mutex for its state,
 * `busy` count (tier operations in flight) and command list, also never
 * held across kernel work. A reference (refs) keeps the struct alive; the
 * tier handle lives until the last operation ends after a kill: kill
 * marks the state, kills the processes, waits for busy == 0, destroys.
 * Nothing global is held across create, exec or destroy. */
#ifndef WARREN_DAEMON_MANAGER_H
#define WARREN_DAEMON_MANAGER_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/error.h"
#include "daemon/harvest.h"
#include "daemon/config.h"
#include "daemon/db.h"
#include "tiers/tier.h"

struct wrd_cmd;
struct wrd_nf;

struct wrd_sbx {
	struct wrd_record rec; /* immutable after create except state/expires */
	pthread_mutex_t lock;
	pthread_cond_t cv; /* busy reached 0 */
	atomic_int refs;
	enum wrd_state state;
	int busy;
	bool reaping;	  /* a timeout/failure kill is queued */
	bool transition;  /* a pause or resume is in flight (waiters: cv) */
	bool life_queued; /* an idle/timeout pause is queued */
	int watchers;	  /* waits and streams on its commands: not idle */
	/* idle detection by CPU use (lifecycle.c): the last sample of the
	 * sandbox's CPU time and when it was taken (0: none yet) */
	uint64_t cpu_sample_ns;
	int64_t cpu_sample_ms, cpu_probe_ms;
	struct wr_sandbox *tsb;
	const struct wr_tier_ops *ops;
	int pidfd; /* PID 1, watched by the monitor */
	int64_t idle_timeout_ms;
	int64_t last_active_ms;
	uint64_t disk_bytes;
	uint64_t ev_seq;
	struct wrd_net *net; /* networked: lease, ports (network.c); NULL offline */
	/* commands (commands.c), under lock */
	struct wrd_cmd *cmds;
	unsigned n_cmds, next_cmd;
	struct wrd_nf *nf; /* network policy and eBPF filter (netenforce.c) */
	struct wrd_hv hv;  /* CPU harvesting (harvest.c) */
	struct wrd_sbx *hnext;
};

int wrd_mgr_init(const struct wrd_config *cfg, wr_err *err);
/* Daemon start: adopt running records, clean creating ones, sweep every
 * cgroup and uid range that no live record owns. */
int wrd_mgr_recover(wr_err *err);
int wrd_mgr_start_monitor(wr_err *err);
void wrd_mgr_stop_monitor(void);

/* Look up a sandbox of `tenant` (another tenant's is ENOENT). Only live
 * sandboxes are in memory; *out is referenced. */
int wrd_mgr_get(const char *tenant, const char *id, struct wrd_sbx **out);
void wrd_mgr_put(struct wrd_sbx *sb);
size_t wrd_mgr_live(void);
/* Disk quota of a running sandbox of tenant, 0 if none (upload bound). */
uint64_t wrd_mgr_upload_limit(const char *tenant, const char *id);

/* Start/end a tier operation on a running sandbox: -ESRCH if it is not
 * running. Counts as API activity for the idle timeout. */
int wrd_sbx_begin(struct wrd_sbx *sb);
void wrd_sbx_end(struct wrd_sbx *sb);
/* Append a lifecycle event (detail is stolen). */
void wrd_sbx_event(struct wrd_sbx *sb, const char *type, json_t *detail);

/* The sandbox's cgroup in the v2 hierarchy, where its network filter
 * attaches (any tier: the container's, a VM tier's QEMU), or -1. */
int wrd_sbx_cgroup_v2_fd(struct wrd_sbx *sb);
/* rec: id empty (assigned here), tenant, tier, image, image_path, spec
 * normalised; created/expires set here. On success *out is referenced
 * and running. Errors: EAGAIN (node full), EINVAL with field, others. */
int wrd_mgr_create(struct wrd_record *rec, struct wrd_sbx **out, wr_err *err);
/* Move a running sandbox to `why` (killed, timed_out, failed), kill and
 * release everything. -ESRCH when it was not running. dead (may be NULL)
 * is called once the new state is durable and every process of the
 * sandbox is gone (or after 5 s of waiting for that), before the
 * resources are released: the API answers there. */
int wrd_mgr_kill(struct wrd_sbx *sb, enum wrd_state why, json_t *detail, void (*dead)(void *ctx),
		 void *ctx, wr_err *err);
int wrd_mgr_set_timeout(struct wrd_sbx *sb, int64_t seconds, wr_err *err);

/* ---- lifecycle (lifecycle.c) --------------------------------------------- */
/* running -> paused. reason: "request", "idle", "lease", "timeout". A
 * paused sandbox: 0, nothing done. Not live: -ESRCH. "idle" gives up
 * (-EBUSY) when an operation started meanwhile. */
int wrd_mgr_pause(struct wrd_sbx *sb, const char *reason, wr_err *err);
/* paused -> running. why: "request", "auto", "lease". A running sandbox:
 * 0, nothing done. only_reason (may be NULL): resume only a sandbox paused
 * for that reason (a lease resumes what it paused, no more). */
int wrd_mgr_resume(struct wrd_sbx *sb, const char *why, const char *only_reason, wr_err *err);
/* keep_memory=false (lifecycle_suspend.c): running or paused -> paused with
 * the state on disk and no process (VM tiers); a resume restores it.
 * Containers: EINVAL naming keep_memory. Operations in flight: ESRCH. */
int wrd_mgr_suspend(struct wrd_sbx *sb, const char *reason, wr_err *err);
/* Paused with its state on disk (tier op suspend, init_pid 0). */
bool wrd_sbx_suspended(const struct wrd_sbx *sb);
/* wrd_mgr_resume's part for a suspended sandbox, inside its transition. */
int wrd_life_resume_disk(struct wrd_sbx *sb, int64_t left, int64_t *now, wr_err *err);
/* A client waits on (or streams) a command that still runs: on resumes a
 * paused sandbox and holds idleness off until the matching off. */
void wrd_sbx_watch(struct wrd_sbx *sb, bool on);
/* wrd_sbx_begin, resuming a paused sandbox first (E2B's connect). */
int wrd_sbx_begin_resume(struct wrd_sbx *sb, wr_err *err);
/* Wait until no pause or resume is in flight; sb->lock held. */
void wrd_sbx_wait_transition(struct wrd_sbx *sb);
/* Monitor: the idle and lifetime policy of one running sandbox whose
 * deadline passed (lifecycle.c decides pause, kill or not yet). Returns
 * true when it handled it (queued a pause, or pushed the deadline). */
bool wrd_life_idle_due(struct wrd_sbx *sb, int64_t now);
bool wrd_life_timeout_due(struct wrd_sbx *sb, int64_t now);
/* Recovery: make the kernel's freezer match the record's state. */
int wrd_life_reconcile(struct wrd_sbx *sb, wr_err *err);
/* lifecycle_usage.c: counters of pauses/resumes by reason; the usage of a
 * live sandbox of tenant added to obj as "usage" (nothing when not live);
 * the lifecycle's /metrics (per-sandbox requested vs used, PSI, leases). */
void wrd_life_count(bool pause, const char *reason);
void wrd_life_usage_json(const char *tenant, const char *id, json_t *obj);
void wrd_life_metrics(FILE *f);
/* The lease a sandbox was created under ("" for none). */
const char *wrd_sbx_lease(const struct wrd_sbx *sb);

/* ---- shared by manager.c and monitor.c ---------------------------------- */
/* The create spec a record describes (env points into rec->spec). */
int wrd_spec_from_record(const struct wrd_record *rec, struct wr_sandbox_spec *spec,
			 struct wr_env_kv **env, wr_err *err);
struct wrd_sbx *wrd_sbx_new(const struct wrd_record *rec);
void wrd_table_insert(struct wrd_sbx *sb);
bool wrd_table_has(const char *id);
/* Referenced snapshot of every sandbox in the table (free the array and
 * put each). */
struct wrd_sbx **wrd_table_snapshot(size_t *n);
/* Monitor: watch PID 1 of a running sandbox / stop watching (the latter
 * only on the monitor thread, which owns the epoll set's references). */
void wrd_monitor_watch(struct wrd_sbx *sb);
void wrd_monitor_forget(struct wrd_sbx *sb);
void wrd_monitor_poke(void);
extern const struct wrd_config *wrd_mgr_cfg;

#endif
