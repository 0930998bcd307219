/* Leases (see lease.h for the state machine and its rules). */
#include "daemon/lease.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "daemon/http.h"
#include "daemon/jsonutil.h"
#include "daemon/manager.h"
#include "daemon/snapshot.h"

enum lstate { L_ACTIVE, L_SUSPENDED, L_EXPIRED, L_RELEASED };
static const char *const lstate_names[] = {"active", "suspended", "expired", "released"};

struct lease {
	char *tenant;
	char id[WRD_LEASE_ID_MAX + 1];
	int64_t grace_ms, expire_ms;
	char on_expire[16];
	bool keep_memory; /* false: its sandboxes are paused to disk */
	enum lstate state;
	char reason[16]; /* suspended: "heartbeat" or "request" */
	char action[16]; /* ended: "kill", "pause", "snapshot", "keep" */
	int64_t created_ms, ended_ms, suspended_ms;
	int64_t last_hb_ms; /* in memory only (lease.h) */
	/* making the sandboxes follow: gen counts transitions, done_gen the
	 * last one applied; one job at a time per lease */
	uint64_t gen, done_gen;
	bool applying;
	struct lease *next;
};

static struct lease *g_leases;
static pthread_mutex_t g_llock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_lcv = PTHREAD_COND_INITIALIZER;

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS leases ("
    " tenant TEXT NOT NULL, id TEXT NOT NULL, grace_ms INTEGER NOT NULL,"
    " expire_ms INTEGER NOT NULL, on_expire TEXT NOT NULL, state TEXT NOT NULL,"
    " reason TEXT NOT NULL DEFAULT '', action TEXT NOT NULL DEFAULT '',"
    " created_ms INTEGER NOT NULL, ended_ms INTEGER NOT NULL DEFAULT 0,"
    " suspended_ms INTEGER NOT NULL DEFAULT 0, keep_memory INTEGER NOT NULL DEFAULT 1,"
    " PRIMARY KEY (tenant, id)) WITHOUT ROWID;";

bool wrd_lease_id_ok(const char *id)
{
	size_t n = strlen(id);
	if (n < 1 || n > WRD_LEASE_ID_MAX)
		return false;
	for (; *id; id++)
		if (!((*id >= 'a' && *id <= 'z') || (*id >= 'A' && *id <= 'Z') ||
		      (*id >= '0' && *id <= '9') || *id == '_' || *id == '.' || *id == '-'))
			return false;
	return true;
}

static struct lease *find(const char *tenant, const char *id)
{
	for (struct lease *l = g_leases; l; l = l->next)
		if (strcmp(l->id, id) == 0 && strcmp(l->tenant, tenant) == 0)
			return l;
	return NULL;
}

/* ---- durable state ------------------------------------------------------ */

static void bind_lease(sqlite3_stmt *st, const void *ctx)
{
	const struct lease *l = ctx;
	sqlite3_bind_text(st, 1, l->tenant, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, l->id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 3, l->grace_ms);
	sqlite3_bind_int64(st, 4, l->expire_ms);
	sqlite3_bind_text(st, 5, l->on_expire, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 6, lstate_names[l->state], -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 7, l->reason, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 8, l->action, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 9, l->created_ms);
	sqlite3_bind_int64(st, 10, l->ended_ms);
	sqlite3_bind_int64(st, 11, l->suspended_ms);
	sqlite3_bind_int(st, 12, l->keep_memory ? 1 : 0);
}

/* The whole row, written before any answer or action depends on it. */
static int save(const struct lease *l, wr_err *err)
{
	return wrd_db_write(
	    "INSERT OR REPLACE INTO leases (tenant, id, grace_ms, expire_ms,"
	    " on_expire, state, reason, action, created_ms, ended_ms, suspended_ms,"
	    " keep_memory) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
	    "save lease", bind_lease, l, err);
}

static void col(sqlite3_stmt *st, int i, char *buf, size_t n)
{
	const unsigned char *s = sqlite3_column_text(st, i);
	snprintf(buf, n, "%s", s ? (const char *)s : "");
}

static int load_row(sqlite3_stmt *st, void *ctx)
{
	int64_t now = *(int64_t *)ctx;
	struct lease *l = calloc(1, sizeof(*l));
	const unsigned char *t = sqlite3_column_text(st, 0);
	if (l == NULL || (l->tenant = strdup(t ? (const char *)t : "")) == NULL) {
		free(l);
		return -ENOMEM;
	}
	col(st, 1, l->id, sizeof(l->id));
	l->grace_ms = sqlite3_column_int64(st, 2);
	l->expire_ms = sqlite3_column_int64(st, 3);
	col(st, 4, l->on_expire, sizeof(l->on_expire));
	char s[16];
	col(st, 5, s, sizeof(s));
	l->state = L_RELEASED;
	for (int i = 0; i < 4; i++)
		if (strcmp(s, lstate_names[i]) == 0)
			l->state = (enum lstate)i;
	col(st, 6, l->reason, sizeof(l->reason));
	col(st, 7, l->action, sizeof(l->action));
	l->created_ms = sqlite3_column_int64(st, 8);
	l->ended_ms = sqlite3_column_int64(st, 9);
	l->suspended_ms = sqlite3_column_int64(st, 10);
	l->keep_memory = sqlite3_column_int(st, 11) != 0;
	/* downtime is not missed heartbeats: counted from this start */
	l->last_hb_ms = now;
	l->gen = 1; /* make the sandboxes match once the pool runs */
	l->next = g_leases;
	g_leases = l;
	return 0;
}

int wrd_leases_load(wr_err *err)
{
	if (wrd_db_exec(schema, err) < 0)
		return wr_err_wrap(err, "leases");
	/* a database made before keep_memory gets it (its leases keep it) */
	_cleanup_err_ wr_err aerr = NULL;
	if (wrd_db_exec("ALTER TABLE leases ADD COLUMN keep_memory INTEGER NOT NULL DEFAULT 1",
			&aerr) < 0 &&
	    !strstr(aerr->msg, "duplicate column"))
		return wr_err_set(err, wr_err_code(aerr), "leases: %s", aerr->msg);
	int64_t now = wrd_now_ms();
	pthread_mutex_lock(&g_llock);
	int r = wrd_db_read("SELECT tenant, id, grace_ms, expire_ms, on_expire, state, reason,"
			    " action, created_ms, ended_ms, suspended_ms, keep_memory FROM leases",
			    "load leases", NULL, NULL, load_row, &now, err);
	pthread_mutex_unlock(&g_llock);
	if (r == -ENOMEM)
		return wr_err_set(err, ENOMEM, "load leases: out of memory");
	return r < 0 ? wr_err_wrap(err, "leases") : 0;
}

/* ---- making the sandboxes follow ---------------------------------------- */

/* What the lease's state asks of its sandboxes. */
enum want { W_RESUME, W_PAUSE, W_KILL, W_SNAPSHOT, W_NONE };

static enum want want_of(const struct lease *l)
{
	switch (l->state) {
	case L_ACTIVE: return W_RESUME;
	case L_SUSPENDED: return W_PAUSE;
	case L_EXPIRED:
	case L_RELEASED:
		if (strcmp(l->action, "kill") == 0)
			return W_KILL;
		if (strcmp(l->action, "pause") == 0)
			return W_PAUSE;
		if (strcmp(l->action, "snapshot") == 0)
			return W_SNAPSHOT;
		return W_RESUME; /* keep: resumed, then on their own */
	}
	return W_NONE;
}

/* A sandbox paused for its lease: in memory, or to disk (keep_memory
 * false) where its tier and state allow (not while a call runs on it, nor
 * a container without a working CRIU): else in memory, and an event says
 * why. */
static int lease_pause(struct wrd_sbx *sb, const char *id, bool keep_memory, wr_err *err)
{
	if (keep_memory)
		return wrd_mgr_pause(sb, "lease", err);
	_cleanup_err_ wr_err derr = NULL;
	if (wrd_mgr_suspend(sb, "lease", &derr) == 0)
		return 0;
	int r = wrd_mgr_pause(sb, "lease", err);
	if (r == 0) {
		json_t *d = json_object();
		json_object_set_new(d, "lease", json_string(id));
		json_object_set_new(d, "reason", json_string(derr->msg));
		wrd_sbx_event(sb, "memory_kept", d);
	}
	return r;
}

static void apply(const char *tenant, const char *id, enum want w, bool keep_memory)
{
	size_t n;
	struct wrd_sbx **v = wrd_table_snapshot(&n);
	for (size_t i = 0; v && i < n; i++) {
		struct wrd_sbx *sb = v[i];
		if (strcmp(sb->rec.tenant, tenant) == 0 && strcmp(wrd_sbx_lease(sb), id) == 0) {
			_cleanup_err_ wr_err err = NULL;
			int r = 0;
			if (w == W_PAUSE) {
				r = lease_pause(sb, id, keep_memory, &err);
			} else if (w == W_RESUME) {
				r = wrd_mgr_resume(sb, "lease", "lease", &err);
			} else if (w == W_SNAPSHOT) {
				/* snapshot, then kill; a failed snapshot keeps the
				 * sandbox (paused): its state is never lost */
				char ref[128];
				wrd_snapshot_name(sb, "lease", ref, sizeof(ref));
				struct wr_image *img = NULL;
				r = wrd_mgr_pause(sb, "lease", &err);
				if (r == 0)
					r = wrd_snapshot_take(sb, ref, false, &img, &err);
				if (r == 0) {
					json_t *d = json_object();
					json_object_set_new(d, "reason", json_string("lease"));
					json_object_set_new(d, "lease", json_string(id));
					json_object_set_new(d, "snapshot", json_string(ref));
					json_object_set_new(d, "digest", json_string(img->digest));
					r = wrd_mgr_kill(sb, WRD_KILLED, d, NULL, NULL, &err);
				}
				wr_image_free(&img);
			} else if (w == W_KILL) {
				json_t *d = json_object();
				json_object_set_new(d, "reason", json_string("lease"));
				json_object_set_new(d, "lease", json_string(id));
				r = wrd_mgr_kill(sb, WRD_KILLED, d, NULL, NULL, &err);
			}
			if (r < 0 && err->errnum != ESRCH)
				wr_warn("lease %s: %s", id, err->msg);
		}
		wrd_mgr_put(sb);
	}
	free(v);
}

static void apply_job(void *arg)
{
	struct lease *l = arg;
	pthread_mutex_lock(&g_llock);
	while (l->done_gen < l->gen) {
		uint64_t g = l->gen;
		enum want w = want_of(l);
		bool keep = l->keep_memory;
		pthread_mutex_unlock(&g_llock);
		apply(l->tenant, l->id, w, keep);
		pthread_mutex_lock(&g_llock);
		l->done_gen = g;
		pthread_cond_broadcast(&g_lcv);
	}
	l->applying = false;
	pthread_mutex_unlock(&g_llock);
}

/* g_llock held. A new transition: queue the job unless one runs (it
 * picks the new generation up); a failed submit is retried by the tick. */
static void kick(struct lease *l)
{
	if (l->applying || l->done_gen >= l->gen)
		return;
	l->applying = true;
	if (wrd_pool_submit(apply_job, l) < 0)
		l->applying = false;
}

static void transition(struct lease *l)
{
	l->gen++;
	kick(l);
}

/* g_llock held: wait (bounded) until the sandboxes follow. */
static void wait_applied(struct lease *l)
{
	uint64_t g = l->gen;
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += 120;
	while (l->done_gen < g)
		if (pthread_cond_timedwait(&g_lcv, &g_llock, &dl) != 0)
			break;
}

/* ---- deadlines ---------------------------------------------------------- */

static void end_lease(struct lease *l, enum lstate st, const char *action, int64_t now)
{
	l->state = st;
	snprintf(l->action, sizeof(l->action), "%s", action);
	l->ended_ms = now;
}

int64_t wrd_leases_tick(int64_t now, int64_t cap)
{
	int64_t next = cap;
	pthread_mutex_lock(&g_llock);
	for (struct lease *l = g_leases; l; l = l->next) {
		kick(l); /* a submit that failed before */
		if (l->state != L_ACTIVE && l->state != L_SUSPENDED)
			continue;
		int64_t exp = l->last_hb_ms + l->expire_ms;
		int64_t sus = l->state == L_ACTIVE ? l->last_hb_ms + l->grace_ms : INT64_MAX;
		struct lease old = *l;
		if (now >= exp) {
			end_lease(l, L_EXPIRED, l->on_expire, now);
		} else if (now >= sus) {
			l->state = L_SUSPENDED;
			snprintf(l->reason, sizeof(l->reason), "heartbeat");
			l->suspended_ms = now;
		} else {
			int64_t t = (exp < sus ? exp : sus) - now;
			if (t < next)
				next = t;
			continue;
		}
		_cleanup_err_ wr_err err = NULL;
		if (save(l, &err) < 0) {
			/* not durable: not done; tried again at the next tick */
			struct lease *nx = l->next;
			*l = old;
			l->next = nx;
			wr_warn("lease %s: %s", l->id, err->msg);
			continue;
		}
		wr_info("lease %s (tenant %s): %s%s%s", l->id, l->tenant, lstate_names[l->state],
			l->state == L_EXPIRED ? ", sandboxes: " : "",
			l->state == L_EXPIRED ? l->action : " (no heartbeat)");
		transition(l);
	}
	pthread_mutex_unlock(&g_llock);
	return next;
}

/* ---- the API's calls ---------------------------------------------------- */

static json_t *time_or_null(int64_t ms)
{
	return ms > 0 ? wrd_j_time(ms) : json_null();
}

/* g_llock held. */
static json_t *lease_json(const struct lease *l)
{
	json_t *o = json_object();
	bool live = l->state == L_ACTIVE || l->state == L_SUSPENDED;
	json_object_set_new(o, "id", json_string(l->id));
	json_object_set_new(o, "state", json_string(lstate_names[l->state]));
	json_object_set_new(o, "suspend_reason",
			    l->state == L_SUSPENDED ? json_string(l->reason) : json_null());
	json_object_set_new(o, "grace_s", json_real((double)l->grace_ms / 1000.0));
	json_object_set_new(o, "expire_s", json_real((double)l->expire_ms / 1000.0));
	json_object_set_new(o, "on_expire", json_string(l->on_expire));
	json_object_set_new(o, "keep_memory", json_boolean(l->keep_memory));
	json_object_set_new(o, "created_at", wrd_j_time(l->created_ms));
	json_object_set_new(o, "last_heartbeat_at", time_or_null(live ? l->last_hb_ms : 0));
	json_object_set_new(o, "suspended_at",
			    time_or_null(l->state == L_SUSPENDED ? l->suspended_ms : 0));
	json_object_set_new(o, "suspends_at",
			    time_or_null(l->state == L_ACTIVE ? l->last_hb_ms + l->grace_ms : 0));
	json_object_set_new(o, "expires_at", time_or_null(live ? l->last_hb_ms + l->expire_ms : 0));
	json_object_set_new(o, "ended_at", time_or_null(live ? 0 : l->ended_ms));
	json_object_set_new(o, "ended_action", live ? json_null() : json_string(l->action));
	size_t n, k = 0;
	struct wrd_sbx **v = wrd_table_snapshot(&n);
	for (size_t i = 0; v && i < n; i++) {
		if (strcmp(v[i]->rec.tenant, l->tenant) == 0 &&
		    strcmp(wrd_sbx_lease(v[i]), l->id) == 0)
			k++;
		wrd_mgr_put(v[i]);
	}
	free(v);
	json_object_set_new(o, "sandboxes", json_integer((json_int_t)k));
	return o;
}

static int not_found(const char *id, wr_err *err)
{
	return wr_err_set(err, ENOENT, "lease %s not found", id);
}

static int ended(const struct lease *l, wr_err *err)
{
	return wr_err_set(err, ESRCH, "lease %s is %s", l->id, lstate_names[l->state]);
}

int wrd_lease_check(const char *tenant, const char *id, wr_err *err)
{
	pthread_mutex_lock(&g_llock);
	struct lease *l = find(tenant, id);
	int r = 0, e = 0;
	if (l == NULL) {
		r = wr_err_field(err, "lease",
				 "lease: %s not found (create it first: POST /v1/leases)", id);
		e = ENOENT;
	} else if (l->state != L_ACTIVE) {
		r = wr_err_field(err, "lease", "lease: %s is %s", id, lstate_names[l->state]);
		e = ESRCH;
	}
	if (r < 0 && err && *err)
		(*err)->errnum = e;
	pthread_mutex_unlock(&g_llock);
	return r;
}

void wrd_lease_created(struct wrd_sbx *sb)
{
	const char *id = wrd_sbx_lease(sb);
	if (*id == 0)
		return;
	pthread_mutex_lock(&g_llock);
	struct lease *l = find(sb->rec.tenant, id);
	enum want w = l ? want_of(l) : W_NONE;
	bool keep = l ? l->keep_memory : true;
	pthread_mutex_unlock(&g_llock);
	_cleanup_err_ wr_err err = NULL;
	int r = 0;
	if (w == W_PAUSE) {
		r = lease_pause(sb, id, keep, &err);
	} else if (w == W_KILL) {
		/* released or expired (kill) between the check and now */
		json_t *d = json_object();
		json_object_set_new(d, "reason", json_string("lease"));
		json_object_set_new(d, "lease", json_string(id));
		r = wrd_mgr_kill(sb, WRD_KILLED, d, NULL, NULL, &err);
	}
	if (r < 0 && err->errnum != ESRCH)
		wr_warn("lease %s: %s", id, err->msg);
}

int wrd_lease_create(const char *tenant, const struct wrd_lease_opts *o, json_t **out, wr_err *err)
{
	char gen[WRD_LEASE_ID_MAX + 1];
	const char *id = o->id;
	if (id == NULL) {
		char rnd[17];
		if (wr_random_id(rnd) < 0)
			return wr_err_set(err, EIO, "no randomness for an id");
		snprintf(gen, sizeof(gen), "lease-%s", rnd);
		id = gen;
	}
	pthread_mutex_lock(&g_llock);
	struct lease *l = find(tenant, id);
	int r = 0;
	if (l && (l->state == L_ACTIVE || l->state == L_SUSPENDED)) {
		r = wr_err_field(err, "id", "id: lease %s exists and is %s", id,
				 lstate_names[l->state]);
		if (err && *err)
			(*err)->errnum = EEXIST;
		goto out;
	}
	struct lease nl = {0};
	nl.tenant = l ? l->tenant : strdup(tenant);
	if (nl.tenant == NULL) {
		r = wr_err_set(err, ENOMEM, "out of memory");
		goto out;
	}
	snprintf(nl.id, sizeof(nl.id), "%s", id);
	nl.grace_ms = o->grace_ms;
	nl.expire_ms = o->expire_ms;
	snprintf(nl.on_expire, sizeof(nl.on_expire), "%s", o->on_expire);
	nl.keep_memory = o->keep_memory;
	nl.state = L_ACTIVE;
	nl.created_ms = nl.last_hb_ms = wrd_now_ms();
	if ((r = save(&nl, err)) < 0) {
		if (l == NULL)
			free(nl.tenant);
		goto out;
	}
	if (l == NULL) {
		/* an ended lease of that id is replaced in place (its
		 * sandboxes are gone or on their own) */
		if ((l = calloc(1, sizeof(*l))) == NULL) {
			free(nl.tenant);
			r = wr_err_set(err, ENOMEM, "out of memory");
			goto out;
		}
		l->next = g_leases;
		g_leases = l;
	}
	struct lease *next = l->next;
	uint64_t gen_no = l->gen, done = l->done_gen;
	bool applying = l->applying;
	*l = nl;
	l->next = next;
	l->gen = gen_no;
	l->done_gen = done;
	l->applying = applying;
	*out = lease_json(l);
out:
	pthread_mutex_unlock(&g_llock);
	return r;
}

int wrd_lease_get(const char *tenant, const char *id, json_t **out, wr_err *err)
{
	pthread_mutex_lock(&g_llock);
	struct lease *l = find(tenant, id);
	int r = l ? 0 : not_found(id, err);
	if (l)
		*out = lease_json(l);
	pthread_mutex_unlock(&g_llock);
	return r;
}

int wrd_lease_list(const char *tenant, json_t **out, wr_err *err)
{
	(void)err;
	json_t *arr = json_array();
	pthread_mutex_lock(&g_llock);
	for (struct lease *l = g_leases; l; l = l->next)
		if (strcmp(l->tenant, tenant) == 0)
			json_array_append_new(arr, lease_json(l));
	pthread_mutex_unlock(&g_llock);
	*out = json_object();
	json_object_set_new(*out, "leases", arr);
	return 0;
}

enum op { OP_HEARTBEAT, OP_SUSPEND, OP_RESUME, OP_RELEASE_KILL, OP_RELEASE_KEEP };

static int change(const char *tenant, const char *id, enum op op, json_t **out, wr_err *err)
{
	pthread_mutex_lock(&g_llock);
	struct lease *l = find(tenant, id);
	int r = 0;
	if (l == NULL) {
		r = not_found(id, err);
		goto out;
	}
	if (l->state != L_ACTIVE && l->state != L_SUSPENDED) {
		r = ended(l, err);
		goto out;
	}
	int64_t now = wrd_now_ms();
	struct lease old = *l;
	bool moved = true;
	switch (op) {
	case OP_HEARTBEAT:
		/* an explicit suspend stays until resume: a heartbeat only
		 * keeps the lease from expiring */
		moved = l->state == L_SUSPENDED && strcmp(l->reason, "heartbeat") == 0;
		break;
	case OP_SUSPEND:
		moved = !(l->state == L_SUSPENDED && strcmp(l->reason, "request") == 0);
		if (moved) {
			if (l->state != L_SUSPENDED)
				l->suspended_ms = now;
			l->state = L_SUSPENDED;
			snprintf(l->reason, sizeof(l->reason), "request");
		}
		break;
	case OP_RESUME: moved = l->state == L_SUSPENDED; break;
	case OP_RELEASE_KILL: end_lease(l, L_RELEASED, "kill", now); break;
	case OP_RELEASE_KEEP: end_lease(l, L_RELEASED, "keep", now); break;
	}
	if (op != OP_SUSPEND && l->state == L_SUSPENDED && moved) {
		l->state = L_ACTIVE;
		l->reason[0] = 0;
		l->suspended_ms = 0;
	}
	if (moved && (r = save(l, err)) < 0) {
		struct lease *nx = l->next;
		*l = old;
		l->next = nx;
		goto out;
	}
	if (op != OP_SUSPEND)
		l->last_hb_ms = now;
	if (moved) {
		transition(l);
		/* a heartbeat answers at once; the explicit calls once their
		 * sandboxes follow */
		if (op != OP_HEARTBEAT)
			wait_applied(l);
	}
	*out = lease_json(l);
out:
	pthread_mutex_unlock(&g_llock);
	return r;
}

int wrd_lease_heartbeat(const char *tenant, const char *id, json_t **out, wr_err *err)
{
	return change(tenant, id, OP_HEARTBEAT, out, err);
}

int wrd_lease_suspend(const char *tenant, const char *id, json_t **out, wr_err *err)
{
	return change(tenant, id, OP_SUSPEND, out, err);
}

int wrd_lease_resume(const char *tenant, const char *id, json_t **out, wr_err *err)
{
	return change(tenant, id, OP_RESUME, out, err);
}

int wrd_lease_release(const char *tenant, const char *id, bool keep, json_t **out, wr_err *err)
{
	return change(tenant, id, keep ? OP_RELEASE_KEEP : OP_RELEASE_KILL, out, err);
}

void wrd_leases_metrics(FILE *f)
{
	unsigned long long n[4] = {0};
	pthread_mutex_lock(&g_llock);
	for (struct lease *l = g_leases; l; l = l->next)
		n[l->state]++;
	pthread_mutex_unlock(&g_llock);
	fprintf(f, "# HELP warren_leases Leases by state.\n# TYPE warren_leases gauge\n");
	for (int i = 0; i < 4; i++)
		fprintf(f, "warren_leases{state=\"%s\"} %llu\n", lstate_names[i], n[i]);
}
