/* The audit store: one table in the daemon's database.
 *
 *   audit_events  one row per aggregate (audit_core.c): id assigned in
 *                 memory (MAX(id)+1 at start), rev = the write that last
 *                 changed it (followers read rev > theirs), first_ns and
 *                 last_ns, count
 *
 * Rows are written by the sink's writer thread only, in one transaction
 * per batch, through db.c's writer connection (wrd_db_with_writer): an
 * audit batch waits behind a sandbox record, never beside it. Readers use
 * the reader pool (WAL: they never wait for the writer). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "daemon/audit_internal.h"
#include "daemon/db.h"
#include "daemon/jsonutil.h"

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS audit_events ("
    " id INTEGER PRIMARY KEY, rev INTEGER NOT NULL, sandbox_id TEXT NOT NULL,"
    " tenant TEXT NOT NULL, layer TEXT NOT NULL, denied INTEGER NOT NULL,"
    " action TEXT NOT NULL, subject TEXT, what TEXT NOT NULL, pid INTEGER NOT NULL,"
    " host_pid INTEGER NOT NULL, comm TEXT, exe TEXT, first_ns INTEGER NOT NULL,"
    " last_ns INTEGER NOT NULL, count INTEGER NOT NULL, severity TEXT NOT NULL,"
    " rule TEXT, suppressed INTEGER NOT NULL);"
    "CREATE INDEX IF NOT EXISTS audit_events_rev ON audit_events(rev);"
    "CREATE INDEX IF NOT EXISTS audit_events_sandbox ON audit_events(sandbox_id, id);"
    "CREATE INDEX IF NOT EXISTS audit_events_tenant ON audit_events(tenant, id);"
    "CREATE INDEX IF NOT EXISTS audit_events_last ON audit_events(last_ns);";

static uint64_t g_rev; /* writer thread only, after init */
static _Atomic uint64_t g_max_rev;

struct init_ctx {
	int64_t max_id;
	uint64_t max_rev;
	char msg[256];
};

static int init_fn(sqlite3 *db, void *arg)
{
	struct init_ctx *c = arg;
	char *m = NULL;
	if (sqlite3_exec(db, schema, NULL, NULL, &m) != SQLITE_OK) {
		snprintf(c->msg, sizeof(c->msg), "%s", m ? m : sqlite3_errmsg(db));
		sqlite3_free(m);
		return -EIO;
	}
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, "SELECT MAX(id), MAX(rev) FROM audit_events", -1, &st, NULL) !=
	    SQLITE_OK) {
		snprintf(c->msg, sizeof(c->msg), "%s", sqlite3_errmsg(db));
		return -EIO;
	}
	if (sqlite3_step(st) == SQLITE_ROW) {
		c->max_id = sqlite3_column_int64(st, 0);
		c->max_rev = (uint64_t)sqlite3_column_int64(st, 1);
	}
	sqlite3_finalize(st);
	return 0;
}

int wra_store_init(int64_t *next_id, wr_err *err)
{
	struct init_ctx c = {0};
	if (wrd_db_with_writer(init_fn, &c) < 0)
		return wr_err_set(err, EIO, "audit store: %s", c.msg);
	g_rev = c.max_rev;
	g_max_rev = c.max_rev;
	*next_id = c.max_id + 1;
	return 0;
}

uint64_t wra_store_max_rev(void)
{
	return g_max_rev;
}

/* ---- tenants of sandboxes (cached) -------------------------------------- */

#define TCACHE 256
static struct {
	char id[17];
	char tenant[64];
} g_tcache[TCACHE];
static unsigned g_tnext;

static const char *tenant_of(const char *sandbox)
{
	if (sandbox == NULL || *sandbox == 0)
		return "";
	for (unsigned i = 0; i < TCACHE; i++)
		if (strcmp(g_tcache[i].id, sandbox) == 0)
			return g_tcache[i].tenant;
	struct wrd_record rec;
	wr_err err = NULL;
	if (strlen(sandbox) >= sizeof(g_tcache[0].id) || wrd_db_get(sandbox, &rec, &err) < 0) {
		wr_err_free(&err);
		return "";
	}
	unsigned i = g_tnext++ % TCACHE;
	snprintf(g_tcache[i].id, sizeof(g_tcache[i].id), "%s", sandbox);
	snprintf(g_tcache[i].tenant, sizeof(g_tcache[i].tenant), "%s", rec.tenant);
	wrd_record_clear(&rec);
	return g_tcache[i].tenant;
}

/* ---- writes ------------------------------------------------------------- */

static const char upsert_sql[] =
    "INSERT INTO audit_events (id, rev, sandbox_id, tenant, layer, denied, action, subject,"
    " what, pid, host_pid, comm, exe, first_ns, last_ns, count, severity, rule, suppressed)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,"
    " ?19) ON CONFLICT(id) DO UPDATE SET rev = excluded.rev, last_ns = excluded.last_ns,"
    " count = excluded.count, severity = excluded.severity, rule = excluded.rule";

struct write_ctx {
	struct wra_snap *rows;
	size_t n;
	const char **tenants;
	char msg[256];
};

static void bind_text(sqlite3_stmt *st, int i, const char *s)
{
	if (s)
		sqlite3_bind_text(st, i, s, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(st, i);
}

static int write_fn(sqlite3 *db, void *arg)
{
	struct write_ctx *c = arg;
	sqlite3_stmt *st = NULL;
	int r = 0;
	if (sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(db, upsert_sql, -1, &st, NULL) != SQLITE_OK) {
		snprintf(c->msg, sizeof(c->msg), "%s", sqlite3_errmsg(db));
		sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
		return -EIO;
	}
	uint64_t rev = g_rev;
	for (size_t i = 0; i < c->n && r == 0; i++) {
		struct wra_snap *s = &c->rows[i];
		sqlite3_reset(st);
		sqlite3_bind_int64(st, 1, s->id);
		sqlite3_bind_int64(st, 2, (sqlite3_int64)++rev);
		sqlite3_bind_text(st, 3, s->sandbox ? s->sandbox : "", -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 4, c->tenants[i], -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 5, wr_audit_layer_name(s->layer), -1, SQLITE_STATIC);
		sqlite3_bind_int(st, 6, s->denied);
		sqlite3_bind_text(st, 7, s->action ? s->action : "", -1, SQLITE_STATIC);
		bind_text(st, 8, s->subject);
		sqlite3_bind_text(st, 9, s->what ? s->what : "{}", -1, SQLITE_STATIC);
		sqlite3_bind_int(st, 10, s->pid);
		sqlite3_bind_int(st, 11, s->host_pid);
		bind_text(st, 12, s->comm);
		bind_text(st, 13, s->exe);
		sqlite3_bind_int64(st, 14, s->first_ns);
		sqlite3_bind_int64(st, 15, s->last_ns);
		sqlite3_bind_int64(st, 16, (sqlite3_int64)s->count);
		sqlite3_bind_text(st, 17, wr_audit_severity_name(s->severity), -1, SQLITE_STATIC);
		bind_text(st, 18, s->rule);
		sqlite3_bind_int(st, 19, s->suppressed);
		if (sqlite3_step(st) != SQLITE_DONE) {
			snprintf(c->msg, sizeof(c->msg), "%s", sqlite3_errmsg(db));
			r = -EIO;
		}
	}
	sqlite3_finalize(st);
	if (r == 0 && sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
		snprintf(c->msg, sizeof(c->msg), "%s", sqlite3_errmsg(db));
		r = -EIO;
	}
	if (r < 0) {
		sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
		return r;
	}
	g_rev = rev;
	g_max_rev = rev;
	return 0;
}

int wra_store_write(struct wra_snap *rows, size_t n, uint64_t *rev, wr_err *err)
{
	if (n == 0)
		return 0;
	/* Tenants first, outside the writer lock (a reader lookup each, cached). */
	_cleanup_free_ const char **tenants = calloc(n, sizeof(char *));
	if (tenants == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		tenants[i] = rows[i].tenant ? rows[i].tenant : tenant_of(rows[i].sandbox);
	struct write_ctx c = {.rows = rows, .n = n, .tenants = tenants};
	if (wrd_db_with_writer(write_fn, &c) < 0)
		return wr_err_set(err, EIO, "audit store: write: %s", c.msg);
	*rev = g_rev;
	return 0;
}

/* ---- retention ---------------------------------------------------------- */

struct retain_ctx {
	int64_t min_ns, per_sandbox, max_rows;
	int64_t deleted;
};

static int retain_fn(sqlite3 *db, void *arg)
{
	struct retain_ctx *c = arg;
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, "DELETE FROM audit_events WHERE last_ns < ?1", -1, &st, NULL) ==
	    SQLITE_OK) {
		sqlite3_bind_int64(st, 1, c->min_ns);
		if (sqlite3_step(st) == SQLITE_DONE)
			c->deleted += sqlite3_changes(db);
	}
	sqlite3_finalize(st);
	/* Per sandbox: keep its newest per_sandbox rows. */
	st = NULL;
	if (sqlite3_prepare_v2(
		db,
		"DELETE FROM audit_events WHERE id IN (SELECT id FROM (SELECT id, ROW_NUMBER()"
		" OVER (PARTITION BY sandbox_id ORDER BY id DESC) AS n FROM audit_events"
		" WHERE sandbox_id IN (SELECT sandbox_id FROM audit_events GROUP BY sandbox_id"
		" HAVING COUNT(*) > ?1)) WHERE n > ?1)",
		-1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, c->per_sandbox);
		if (sqlite3_step(st) == SQLITE_DONE)
			c->deleted += sqlite3_changes(db);
	}
	sqlite3_finalize(st);
	st = NULL;
	if (sqlite3_prepare_v2(db,
			       "DELETE FROM audit_events WHERE id <= (SELECT id FROM audit_events"
			       " ORDER BY id DESC LIMIT 1 OFFSET ?1)",
			       -1, &st, NULL) == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, c->max_rows);
		if (sqlite3_step(st) == SQLITE_DONE)
			c->deleted += sqlite3_changes(db);
	}
	sqlite3_finalize(st);
	return 0;
}

int64_t wra_store_retain(int64_t max_age_s, int64_t max_per_sandbox, int64_t max_rows,
			 int64_t now_ns, wr_err *err)
{
	(void)err;
	struct retain_ctx c = {.min_ns = now_ns - max_age_s * 1000000000LL,
			       .per_sandbox = max_per_sandbox,
			       .max_rows = max_rows};
	wrd_db_with_writer(retain_fn, &c);
	return c.deleted;
}

/* ---- queries ------------------------------------------------------------ */

static void fmt_dur(char *buf, size_t n, int64_t ns)
{
	double s = (double)ns / 1e9;
	if (s < 1)
		snprintf(buf, n, "%.0f ms", s * 1000);
	else if (s < 120)
		snprintf(buf, n, "%.1f s", s);
	else if (s < 7200)
		snprintf(buf, n, "%.1f min", s / 60);
	else
		snprintf(buf, n, "%.1f h", s / 3600);
}

char *wra_summary(const char *layer, const char *action, const char *subject, bool denied,
		  bool suppressed, uint64_t count, int64_t first_ns, int64_t last_ns)
{
	char dur[32], times[96] = "";
	fmt_dur(dur, sizeof(dur), last_ns - first_ns);
	if (count > 1)
		snprintf(times, sizeof(times), " %" PRIu64 " times in %s", count, dur);
	char *s = NULL;
	int r;
	if (suppressed)
		r = asprintf(&s, "%" PRIu64 " further %s events in %s (rate limited: not itemised)",
			     count, layer, dur);
	else
		r = asprintf(&s, "%s%s%s %s%s", action, subject ? " " : "", subject ? subject : "",
			     denied ? "refused" : "seen", times);
	return r < 0 ? NULL : s;
}

static json_t *j_ns_time(int64_t ns)
{
	return wrd_j_time(ns / 1000000);
}

static json_t *row_json(sqlite3_stmt *st)
{
	json_t *e = json_object();
	int64_t first = sqlite3_column_int64(st, 13), last = sqlite3_column_int64(st, 14);
	uint64_t count = (uint64_t)sqlite3_column_int64(st, 15);
	const char *layer = (const char *)sqlite3_column_text(st, 4);
	const char *action = (const char *)sqlite3_column_text(st, 6);
	const char *subject = (const char *)sqlite3_column_text(st, 7);
	bool denied = sqlite3_column_int(st, 5), supp = sqlite3_column_int(st, 18);
	json_object_set_new(e, "id", json_integer(sqlite3_column_int64(st, 0)));
	json_object_set_new(e, "rev", json_integer(sqlite3_column_int64(st, 1)));
	json_object_set_new(e, "sandbox", json_string((const char *)sqlite3_column_text(st, 2)));
	json_object_set_new(e, "tenant", json_string((const char *)sqlite3_column_text(st, 3)));
	json_object_set_new(e, "layer", json_string(layer));
	json_object_set_new(e, "denied", json_boolean(denied));
	json_object_set_new(e, "action", json_string(action));
	json_object_set_new(e, "subject", subject ? json_string(subject) : json_null());
	const char *w = (const char *)sqlite3_column_text(st, 8);
	json_t *wj = w ? json_loads(w, 0, NULL) : NULL;
	json_object_set_new(e, "what", wj ? wj : json_object());
	json_t *p = json_object();
	json_object_set_new(p, "pid", json_integer(sqlite3_column_int(st, 9)));
	json_object_set_new(p, "host_pid", json_integer(sqlite3_column_int(st, 10)));
	const char *comm = (const char *)sqlite3_column_text(st, 11);
	const char *exe = (const char *)sqlite3_column_text(st, 12);
	json_object_set_new(p, "comm", comm ? json_string(comm) : json_null());
	json_object_set_new(p, "exe", exe ? json_string(exe) : json_null());
	json_object_set_new(e, "process", p);
	json_object_set_new(e, "time", j_ns_time(first));
	json_object_set_new(e, "time_ns", json_integer(first));
	json_object_set_new(e, "last_time", j_ns_time(last));
	json_object_set_new(e, "last_ns", json_integer(last));
	json_object_set_new(e, "count", json_integer((json_int_t)count));
	json_object_set_new(e, "severity", json_string((const char *)sqlite3_column_text(st, 16)));
	const char *rule = (const char *)sqlite3_column_text(st, 17);
	json_object_set_new(e, "rule", rule ? json_string(rule) : json_null());
	json_object_set_new(e, "suppressed", json_boolean(supp));
	char *sum = wra_summary(layer, action, subject, denied, supp, count, first, last);
	json_object_set_new(e, "summary", json_string(sum ? sum : ""));
	free(sum);
	return e;
}

struct query_ctx {
	const struct wra_query *q;
	json_t *out;
	int64_t last_id;
	uint64_t last_rev;
	char msg[256];
};

static int query_fn(sqlite3 *db, void *arg)
{
	struct query_ctx *c = arg;
	const struct wra_query *q = c->q;
	char sql[1536];
	size_t o = 0;
	o += (size_t)snprintf(sql + o, sizeof(sql) - o,
			      "SELECT id, rev, sandbox_id, tenant, layer, denied, action, subject,"
			      " what, pid, host_pid, comm, exe, first_ns, last_ns, count, severity,"
			      " rule, suppressed FROM audit_events WHERE 1");
	if (q->sandbox)
		o += (size_t)snprintf(sql + o, sizeof(sql) - o, " AND sandbox_id = ?1");
	if (q->tenant)
		o += (size_t)snprintf(sql + o, sizeof(sql) - o, " AND tenant = ?2");
	if (q->layers) {
		o += (size_t)snprintf(sql + o, sizeof(sql) - o, " AND layer IN (");
		bool first = true;
		for (int l = 0; l < WR_AUDIT_NLAYERS; l++)
			if (q->layers & (1u << l)) {
				o += (size_t)snprintf(sql + o, sizeof(sql) - o, "%s'%s'",
						      first ? "" : ",", wr_audit_layer_name(l));
				first = false;
			}
		o += (size_t)snprintf(sql + o, sizeof(sql) - o, ")");
	}
	if (q->denied >= 0)
		o += (size_t)snprintf(sql + o, sizeof(sql) - o, " AND denied = %d", q->denied);
	if (q->flagged)
		o += (size_t)snprintf(sql + o, sizeof(sql) - o, " AND rule IS NOT NULL");
	if (q->since_ns > 0)
		o += (size_t)snprintf(sql + o, sizeof(sql) - o, " AND last_ns >= ?3");
	if (q->by_rev)
		o += (size_t)snprintf(sql + o, sizeof(sql) - o,
				      " AND rev > ?4 ORDER BY rev LIMIT ?6");
	else if (q->after_id > 0)
		o +=
		    (size_t)snprintf(sql + o, sizeof(sql) - o, " AND id > ?5 ORDER BY id LIMIT ?6");
	else
		o += (size_t)snprintf(sql + o, sizeof(sql) - o, " ORDER BY id DESC LIMIT ?6");
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
		snprintf(c->msg, sizeof(c->msg), "%s", sqlite3_errmsg(db));
		return -EIO;
	}
	if (q->sandbox)
		sqlite3_bind_text(st, 1, q->sandbox, -1, SQLITE_STATIC);
	if (q->tenant)
		sqlite3_bind_text(st, 2, q->tenant, -1, SQLITE_STATIC);
	if (q->since_ns > 0)
		sqlite3_bind_int64(st, 3, q->since_ns);
	if (q->by_rev)
		sqlite3_bind_int64(st, 4, (sqlite3_int64)q->after_rev);
	else if (q->after_id > 0)
		sqlite3_bind_int64(st, 5, q->after_id);
	sqlite3_bind_int(st, 6, q->limit);
	json_t *rows = json_array();
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t id = sqlite3_column_int64(st, 0);
		uint64_t rev = (uint64_t)sqlite3_column_int64(st, 1);
		if (id > c->last_id)
			c->last_id = id;
		if (rev > c->last_rev)
			c->last_rev = rev;
		json_array_append_new(rows, row_json(st));
	}
	int r = 0;
	if (rc != SQLITE_DONE) {
		snprintf(c->msg, sizeof(c->msg), "%s", sqlite3_errmsg(db));
		r = -EIO;
	}
	sqlite3_finalize(st);
	/* The newest `limit` were read newest first: hand them out oldest first. */
	bool desc = !q->by_rev && q->after_id <= 0;
	size_t n = json_array_size(rows);
	for (size_t i = 0; i < n; i++)
		json_array_append(c->out, json_array_get(rows, desc ? n - 1 - i : i));
	json_decref(rows);
	return r;
}

int wra_store_query(const struct wra_query *q, json_t *out, int64_t *last_id, uint64_t *last_rev,
		    wr_err *err)
{
	struct query_ctx c = {.q = q, .out = out, .last_id = *last_id, .last_rev = *last_rev};
	int r = wrd_db_with_reader(query_fn, &c, err);
	if (r < 0) {
		if (*err == NULL)
			wr_err_set(err, EIO, "audit store: query: %s", c.msg);
		return -EIO;
	}
	*last_id = c.last_id;
	*last_rev = c.last_rev;
	return 0;
}
