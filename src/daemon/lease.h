/* Leases: a training job's hold on its sandboxes (lease.c).
 *
 *   active --no heartbeat for grace_s--> suspended (heartbeat) --heartbeat--> active
 *   active --suspend--> suspended (request) --resume--> active
 *   active/suspended --no heartbeat for expire_s--> expired (on_expire applied)
 *   active/suspended --release--> released (sandboxes killed, or kept)
 *
 * A lease belongs to a tenant; ids are per tenant. Its sandboxes are those
 * created with "lease": id. Suspension pauses them (reason "lease"); a
 * return to active resumes those it paused (not ones paused for another
 * reason). Expiry applies on_expire: "kill", "pause", or "snapshot" (each
 * sandbox is snapshotted as image "snapshot/<id>:lease", then killed; one
 * whose snapshot fails stays paused, nothing is lost). Definitions and transitions are durable
 * (SQLite, table leases); heartbeats are not: after a daemon start every live lease counts as
 * heartbeated at the start, so time the daemon was down is never counted
 * as missed heartbeats. Each transition then makes the lease's sandboxes
 * match its state, again at every start, so a crash in the middle of one
 * is finished by the next start. */
#ifndef WARREN_DAEMON_LEASE_H
#define WARREN_DAEMON_LEASE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/error.h"

struct wrd_sbx;

#define WRD_LEASE_ID_MAX 63

/* Load the leases (daemon start, after the sandboxes were recovered);
 * every one is made to match its sandboxes once the pool runs. */
int wrd_leases_load(wr_err *err);
/* Monitor: suspend and expire leases whose time came; returns ms until
 * the next deadline (capped at cap). */
int64_t wrd_leases_tick(int64_t now, int64_t cap);

/* The create's lease: it must exist for the tenant and be active (ENOENT
 * not found, ESRCH suspended or ended; the error names "lease"). */
int wrd_lease_check(const char *tenant, const char *id, wr_err *err);
/* After a create under a lease: pause the sandbox if the lease was
 * suspended in the meantime. */
void wrd_lease_created(struct wrd_sbx *sb);

struct wrd_lease_opts {
	const char *id; /* NULL: generated */
	int64_t grace_ms, expire_ms;
	const char *on_expire; /* "kill", "pause", "snapshot" */
	/* false: suspended, its sandboxes are paused to disk (memory freed)
	 * where they can be, else in memory */
	bool keep_memory;
};
/* The calls below fill *out (a lease object) on success. EEXIST: a live
 * lease of that id; ENOENT: no such lease; ESRCH: ended. */
int wrd_lease_create(const char *tenant, const struct wrd_lease_opts *o, json_t **out, wr_err *err);
int wrd_lease_get(const char *tenant, const char *id, json_t **out, wr_err *err);
int wrd_lease_list(const char *tenant, json_t **out, wr_err *err);
int wrd_lease_heartbeat(const char *tenant, const char *id, json_t **out, wr_err *err);
/* suspend, resume, release answer once the sandboxes follow (bounded). */
int wrd_lease_suspend(const char *tenant, const char *id, json_t **out, wr_err *err);
int wrd_lease_resume(const char *tenant, const char *id, json_t **out, wr_err *err);
/* keep: the sandboxes live on (resumed if the lease paused them), else
 * they are killed. */
int wrd_lease_release(const char *tenant, const char *id, bool keep, json_t **out, wr_err *err);

bool wrd_lease_id_ok(const char *id);
/* /metrics: warren_leases{state}. */
void wrd_leases_metrics(FILE *f);

#endif
