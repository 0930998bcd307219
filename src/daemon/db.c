#include "daemon/db.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/cleanup.h"
#include "daemon/jsonutil.h"

static const char *const state_names[WRD_NSTATES] = {"creating",  "running", "killed",
						     "timed_out", "failed",  "paused"};

const char *wrd_state_name(enum wrd_state s)
{
	return s < WRD_NSTATES ? state_names[s] : "unknown";
}

int wrd_state_parse(const char *s)
{
	for (int i = 0; i < WRD_NSTATES; i++)
		if (s && strcmp(s, state_names[i]) == 0)
			return i;
	return -1;
}

void wrd_record_clear(struct wrd_record *r)
{
	free(r->tenant);
	free(r->tier);
	free(r->image);
	free(r->image_path);
	json_decref(r->spec);
	memset(r, 0, sizeof(*r));
}

json_t *wrd_record_json(const struct wrd_record *r)
{
	json_t *o = json_object();
	json_t *s = r->spec;
	json_object_set_new(o, "id", json_string(r->id));
	json_object_set_new(o, "tier", json_string(r->tier));
	json_object_set_new(o, "image", json_string(r->image));
	json_object_set_new(o, "state", json_string(wrd_state_name(r->state)));
	json_object_set_new(o, "created_at", wrd_j_time(r->created_ms));
	if (r->state == WRD_PAUSED) {
		/* the lifetime clock stands still: no deadline, the time left */
		json_object_set_new(o, "expires_at", json_null());
		json_object_set_new(o, "paused_at", wrd_j_time(r->paused_ms));
		json_object_set_new(o, "pause_reason", json_string(r->pause_reason));
		json_object_set_new(o, "timeout_remaining",
				    json_real((double)r->remaining_ms / 1000.0));
	} else {
		json_object_set_new(o, "expires_at", wrd_j_time(r->expires_ms));
	}
	static const char *const copy[] = {"cpu",	   "memory_mb", "disk_mb",    "pids",
					   "user",	   "workdir",	"labels",     "timeout",
					   "idle_timeout", "on_idle",	"on_timeout", "lease",
					   "network",	   "cpu_max",	"firmware"};
	for (size_t i = 0; i < WR_ARRAY_SIZE(copy); i++) {
		json_t *v = json_object_get(s, copy[i]);
		if (v)
			json_object_set(o, copy[i], v);
	}
	/* records made before the lifecycle work: their behaviour then */
	if (json_object_get(s, "on_idle") == NULL)
		json_object_set_new(o, "on_idle", json_string("kill"));
	if (json_object_get(s, "lease") == NULL)
		json_object_set_new(o, "lease", json_null());
	return o;
}

/* ---- connections -------------------------------------------------------- */

static sqlite3 *g_w; /* the writer */
static pthread_mutex_t g_wlock = PTHREAD_MUTEX_INITIALIZER;
static char *g_path;

#define RPOOL 16
static sqlite3 *g_rpool[RPOOL];
static int g_rfree;
static pthread_mutex_t g_rlock = PTHREAD_MUTEX_INITIALIZER;

static int db_fail(sqlite3 *db, wr_err *err, const char *what)
{
	int code = sqlite3_extended_errcode(db);
	int e = code == SQLITE_FULL ? ENOSPC : (code & 0xff) == SQLITE_BUSY ? EBUSY : EIO;
	return wr_err_set(err, e, "database: %s: %s", what, sqlite3_errmsg(db));
}

int wrd_db_fail(sqlite3 *db, wr_err *err, const char *what)
{
	return db_fail(db, err, what);
}

static int exec_sql(sqlite3 *db, const char *sql, wr_err *err)
{
	char *msg = NULL;
	if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
		int r = wr_err_set(err, EIO, "database: %s: %s", sql, msg ? msg : "?");
		sqlite3_free(msg);
		return r;
	}
	return 0;
}

static int open_conn(const char *path, bool writer, sqlite3 **out, wr_err *err)
{
	sqlite3 *db = NULL;
	int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (writer ? SQLITE_OPEN_CREATE : 0);
	if (sqlite3_open_v2(path, &db, flags, NULL) != SQLITE_OK) {
		int r = wr_err_set(err, EIO, "database %s: %s", path,
				   db ? sqlite3_errmsg(db) : "out of memory");
		sqlite3_close(db);
		return r;
	}
	sqlite3_busy_timeout(db, 10000);
	sqlite3_extended_result_codes(db, 1);
	if (exec_sql(db, "PRAGMA journal_mode=WAL", err) < 0 ||
	    /* WAL + NORMAL: a committed transaction survives a crash of
	     * warrend (it is in the WAL, in the page cache) and is lost only
	     * if the host itself goes down, which ends every sandbox anyway.
	     * FULL would add an fdatasync to every create and kill. */
	    exec_sql(db, "PRAGMA synchronous=NORMAL", err) < 0 ||
	    exec_sql(db, "PRAGMA foreign_keys=OFF", err) < 0 ||
	    (!writer && exec_sql(db, "PRAGMA query_only=1", err) < 0)) {
		sqlite3_close(db);
		return wr_err_wrap(err, "database %s", path);
	}
	*out = db;
	return 0;
}

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS sandboxes ("
    " id TEXT PRIMARY KEY, tenant TEXT NOT NULL, tier TEXT NOT NULL,"
    " image TEXT NOT NULL, image_path TEXT NOT NULL, state TEXT NOT NULL,"
    " created_ms INTEGER NOT NULL, expires_ms INTEGER NOT NULL,"
    " ended_ms INTEGER, init_pid INTEGER NOT NULL DEFAULT 0, spec TEXT NOT NULL);"
    "CREATE INDEX IF NOT EXISTS sandboxes_list ON sandboxes(tenant, created_ms, id);"
    "CREATE INDEX IF NOT EXISTS sandboxes_state ON sandboxes(state);"
    "CREATE TABLE IF NOT EXISTS commands ("
    " sandbox_id TEXT NOT NULL, id TEXT NOT NULL, seq INTEGER NOT NULL, cmd TEXT NOT NULL,"
    " started_ms INTEGER NOT NULL, host_pid INTEGER NOT NULL, ns_pid INTEGER NOT NULL,"
    " start_ticks INTEGER NOT NULL, result TEXT, PRIMARY KEY (sandbox_id, id))"
    " WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS events ("
    " sandbox_id TEXT NOT NULL, seq INTEGER NOT NULL, time_ms INTEGER NOT NULL,"
    " type TEXT NOT NULL, detail TEXT NOT NULL, PRIMARY KEY (sandbox_id, seq))"
    " WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS leaf_counts ("
    " sandbox_id TEXT NOT NULL, leaf TEXT NOT NULL, oom_kills INTEGER NOT NULL,"
    " pids_max_hits INTEGER NOT NULL, PRIMARY KEY (sandbox_id, leaf)) WITHOUT ROWID;";

/* Columns added by the lifecycle work (pause/resume) to databases made
 * before it; a new database gets them here too. */
static int migrate_lifecycle(wr_err *err)
{
	static const char *const cols[] = {"paused_ms INTEGER NOT NULL DEFAULT 0",
					   "remaining_ms INTEGER NOT NULL DEFAULT 0",
					   "pause_reason TEXT NOT NULL DEFAULT ''"};
	for (size_t i = 0; i < WR_ARRAY_SIZE(cols); i++) {
		char sql[160];
		snprintf(sql, sizeof(sql), "ALTER TABLE sandboxes ADD COLUMN %s", cols[i]);
		char *msg = NULL;
		int rc = sqlite3_exec(g_w, sql, NULL, NULL, &msg);
		bool dup = rc != SQLITE_OK && msg && strstr(msg, "duplicate column");
		if (rc != SQLITE_OK && !dup) {
			int r = wr_err_set(err, EIO, "database: %s: %s", sql, msg ? msg : "?");
			sqlite3_free(msg);
			return r;
		}
		sqlite3_free(msg);
	}
	return 0;
}

static void *flusher_main(void *arg);
static pthread_t g_flusher;
static bool g_flusher_running;
static sqlite3 *g_ck; /* the flusher's: checkpoints */
static bool g_ck_wanted;
static pthread_mutex_t g_evlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_evcond = PTHREAD_COND_INITIALIZER;

/* Checkpoints run on the flusher thread, never in a request: SQLite's
 * automatic one runs in the commit that crosses the threshold and syncs
 * the WAL and the database file there (fsync on the API's path). Runs on
 * the writer's thread after each commit, g_wlock held. */
#define CKPT_PAGES 1000
static int wal_hook(void *ctx, sqlite3 *db, const char *name, int pages)
{
	(void)ctx;
	(void)db;
	(void)name;
	if (pages >= CKPT_PAGES) {
		pthread_mutex_lock(&g_evlock);
		g_ck_wanted = true;
		pthread_cond_signal(&g_evcond);
		pthread_mutex_unlock(&g_evlock);
	}
	return SQLITE_OK;
}

int wrd_db_open(const char *path, wr_err *err)
{
	if ((g_path = strdup(path)) == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	if (open_conn(path, true, &g_w, err) < 0)
		return -1;
	if (exec_sql(g_w, schema, err) < 0 || migrate_lifecycle(err) < 0)
		return wr_err_wrap(err, "database %s: schema", path);
	if (exec_sql(g_w, "PRAGMA wal_autocheckpoint=0", err) < 0 ||
	    open_conn(path, true, &g_ck, err) < 0)
		return wr_err_wrap(err, "database %s", path);
	sqlite3_wal_hook(g_w, wal_hook, NULL);
	if (pthread_create(&g_flusher, NULL, flusher_main, NULL) != 0)
		return wr_err_set(err, EAGAIN, "database: start event flusher");
	g_flusher_running = true;
	return 0;
}

static sqlite3 *reader_get(wr_err *err)
{
	pthread_mutex_lock(&g_rlock);
	if (g_rfree > 0) {
		sqlite3 *db = g_rpool[--g_rfree];
		pthread_mutex_unlock(&g_rlock);
		return db;
	}
	pthread_mutex_unlock(&g_rlock);
	sqlite3 *db = NULL;
	if (open_conn(g_path, false, &db, err) < 0)
		return NULL;
	return db;
}

static void reader_put(sqlite3 *db)
{
	pthread_mutex_lock(&g_rlock);
	if (g_rfree < RPOOL) {
		g_rpool[g_rfree++] = db;
		db = NULL;
	}
	pthread_mutex_unlock(&g_rlock);
	if (db)
		sqlite3_close(db);
}

/* ---- sandbox records ---------------------------------------------------- */

/* The writer's statements, prepared once (each SQL text is a literal:
 * the pointer is the key). Under g_wlock. */
#define NSTMT 32
static struct {
	const char *sql;
	sqlite3_stmt *st;
} g_stmts[NSTMT];

static sqlite3_stmt *writer_stmt(const char *sql)
{
	int i = 0;
	for (; i < NSTMT && g_stmts[i].sql; i++)
		if (g_stmts[i].sql == sql)
			return g_stmts[i].st;
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v3(g_w, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) != SQLITE_OK)
		return NULL;
	if (i < NSTMT) {
		g_stmts[i].sql = sql;
		g_stmts[i].st = st;
	}
	return st;
}

static void writer_stmt_done(sqlite3_stmt *st)
{
	for (int i = 0; i < NSTMT && g_stmts[i].sql; i++)
		if (g_stmts[i].st == st) {
			sqlite3_reset(st);
			sqlite3_clear_bindings(st);
			return;
		}
	sqlite3_finalize(st); /* the cache was full */
}

static int write_stmt(const char *sql, const char *what, wr_err *err,
		      void (*bind)(sqlite3_stmt *st, const void *ctx), const void *ctx,
		      bool must_change)
{
	pthread_mutex_lock(&g_wlock);
	int r = 0;
	sqlite3_stmt *st = writer_stmt(sql);
	if (st == NULL) {
		r = db_fail(g_w, err, what);
		goto out;
	}
	bind(st, ctx);
	if (sqlite3_step(st) != SQLITE_DONE) {
		r = db_fail(g_w, err, what);
		goto out;
	}
	if (must_change && sqlite3_changes(g_w) == 0)
		r = wr_err_set(err, ENOENT, "database: %s: no such sandbox", what);
out:
	if (st)
		writer_stmt_done(st);
	pthread_mutex_unlock(&g_wlock);
	return r;
}

static void bind_insert(sqlite3_stmt *st, const void *ctx)
{
	const struct wrd_record *r = ctx;
	char *spec = json_dumps(r->spec, JSON_COMPACT);
	sqlite3_bind_text(st, 1, r->id, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 2, r->tenant, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 3, r->tier, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 4, r->image, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 5, r->image_path, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 6, wrd_state_name(r->state), -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 7, r->created_ms);
	sqlite3_bind_int64(st, 8, r->expires_ms);
	sqlite3_bind_int64(st, 9, r->init_pid);
	if (spec)
		sqlite3_bind_text(st, 10, spec, -1, SQLITE_TRANSIENT);
	free(spec);
}

int wrd_db_insert(const struct wrd_record *r, wr_err *err)
{
	return write_stmt("INSERT INTO sandboxes (id, tenant, tier, image, image_path, state,"
			  " created_ms, expires_ms, init_pid, spec)"
			  " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
			  "insert sandbox", err, bind_insert, r, false);
}

struct upd {
	const char *id;
	const char *text;
	int64_t a, b;
};

static void bind_upd(sqlite3_stmt *st, const void *ctx)
{
	const struct upd *u = ctx;
	sqlite3_bind_text(st, 1, u->id, -1, SQLITE_STATIC);
	if (u->text)
		sqlite3_bind_text(st, 2, u->text, -1, SQLITE_STATIC);
	else
		sqlite3_bind_int64(st, 2, u->a);
	sqlite3_bind_int64(st, 3, u->b);
}

int wrd_db_set_state(const char *id, enum wrd_state st, wr_err *err)
{
	struct upd u = {.id = id, .text = wrd_state_name(st), .b = wrd_now_ms()};
	return write_stmt("UPDATE sandboxes SET state = ?2, ended_ms = ?3 WHERE id = ?1",
			  "update sandbox state", err, bind_upd, &u, true);
}

int wrd_db_set_expires(const char *id, int64_t expires_ms, wr_err *err)
{
	struct upd u = {.id = id, .a = expires_ms};
	return write_stmt("UPDATE sandboxes SET expires_ms = ?2 WHERE id = ?1",
			  "update sandbox expiry", err, bind_upd, &u, true);
}

struct pause_upd {
	const char *id, *reason;
	int64_t paused_ms, remaining_ms;
};

static void bind_pause(sqlite3_stmt *st, const void *ctx)
{
	const struct pause_upd *u = ctx;
	sqlite3_bind_text(st, 1, u->id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, u->paused_ms);
	sqlite3_bind_int64(st, 3, u->remaining_ms);
	sqlite3_bind_text(st, 4, u->reason, -1, SQLITE_STATIC);
}

int wrd_db_set_paused(const char *id, int64_t paused_ms, int64_t remaining_ms, const char *reason,
		      wr_err *err)
{
	struct pause_upd u = {id, reason, paused_ms, remaining_ms};
	return write_stmt(
	    "UPDATE sandboxes SET state = 'paused', paused_ms = ?2, remaining_ms = ?3,"
	    " pause_reason = ?4 WHERE id = ?1",
	    "pause sandbox", err, bind_pause, &u, true);
}

int wrd_db_set_resumed(const char *id, int64_t expires_ms, wr_err *err)
{
	struct upd u = {.id = id, .a = expires_ms};
	return write_stmt("UPDATE sandboxes SET state = 'running', expires_ms = ?2, paused_ms = 0,"
			  " remaining_ms = 0, pause_reason = '' WHERE id = ?1",
			  "resume sandbox", err, bind_upd, &u, true);
}

int wrd_db_set_remaining(const char *id, int64_t remaining_ms, wr_err *err)
{
	struct upd u = {.id = id, .a = remaining_ms};
	return write_stmt("UPDATE sandboxes SET remaining_ms = ?2 WHERE id = ?1",
			  "update sandbox lifetime", err, bind_upd, &u, true);
}

/* The network policy in the record's spec (PATCH .../network). */
struct upd_net {
	const char *id, *json;
};
static void bind_net(sqlite3_stmt *st, const void *ctx)
{
	const struct upd_net *u = ctx;
	sqlite3_bind_text(st, 1, u->id, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, u->json, -1, SQLITE_STATIC);
}

int wrd_db_set_network(const char *id, const char *policy_json, wr_err *err)
{
	struct upd_net u = {.id = id, .json = policy_json};
	return write_stmt("UPDATE sandboxes SET spec = json_set(spec, '$.network', json(?2)) "
			  "WHERE id = ?1",
			  "update sandbox network", err, bind_net, &u, true);
}

static void bind_id(sqlite3_stmt *st, const void *ctx)
{
	sqlite3_bind_text(st, 1, ctx, -1, SQLITE_STATIC);
}

int wrd_db_delete(const char *id, wr_err *err)
{
	int r = write_stmt("DELETE FROM sandboxes WHERE id = ?1", "delete sandbox", err, bind_id,
			   id, false);
	if (r == 0)
		r = write_stmt("DELETE FROM events WHERE sandbox_id = ?1", "delete events", err,
			       bind_id, id, false);
	if (r == 0)
		r = write_stmt("DELETE FROM commands WHERE sandbox_id = ?1", "delete commands", err,
			       bind_id, id, false);
	if (r == 0)
		r = write_stmt("DELETE FROM leaf_counts WHERE sandbox_id = ?1",
			       "delete leaf counts", err, bind_id, id, false);
	return r;
}

#define COLS                                                                                       \
	"id, tenant, tier, image, image_path, state, created_ms, expires_ms, init_pid, spec,"      \
	" paused_ms, remaining_ms, pause_reason"

static char *col_dup(sqlite3_stmt *st, int i)
{
	const unsigned char *s = sqlite3_column_text(st, i);
	return strdup(s ? (const char *)s : "");
}

static int row_record(sqlite3_stmt *st, struct wrd_record *r)
{
	memset(r, 0, sizeof(*r));
	const unsigned char *id = sqlite3_column_text(st, 0);
	snprintf(r->id, sizeof(r->id), "%s", id ? (const char *)id : "");
	r->tenant = col_dup(st, 1);
	r->tier = col_dup(st, 2);
	r->image = col_dup(st, 3);
	r->image_path = col_dup(st, 4);
	const unsigned char *state = sqlite3_column_text(st, 5);
	int s = wrd_state_parse((const char *)state);
	r->state = s < 0 ? WRD_FAILED : (enum wrd_state)s;
	r->created_ms = sqlite3_column_int64(st, 6);
	r->expires_ms = sqlite3_column_int64(st, 7);
	r->init_pid = (pid_t)sqlite3_column_int64(st, 8);
	const unsigned char *spec = sqlite3_column_text(st, 9);
	r->spec = spec ? json_loads((const char *)spec, 0, NULL) : NULL;
	r->paused_ms = sqlite3_column_int64(st, 10);
	r->remaining_ms = sqlite3_column_int64(st, 11);
	const unsigned char *why = sqlite3_column_text(st, 12);
	snprintf(r->pause_reason, sizeof(r->pause_reason), "%s", why ? (const char *)why : "");
	if (!r->tenant || !r->tier || !r->image || !r->image_path || !r->spec) {
		wrd_record_clear(r);
		return -ENOMEM;
	}
	return 0;
}

int wrd_db_get(const char *id, struct wrd_record *out, wr_err *err)
{
	sqlite3 *db = reader_get(err);
	if (db == NULL)
		return -EIO;
	sqlite3_stmt *st = NULL;
	int r;
	if (sqlite3_prepare_v2(db, "SELECT " COLS " FROM sandboxes WHERE id = ?1", -1, &st, NULL) !=
	    SQLITE_OK) {
		r = db_fail(db, err, "get sandbox");
		goto out;
	}
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	int rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		r = row_record(st, out);
		if (r < 0)
			wr_err_set(err, -r, "database: get sandbox: bad record");
	} else if (rc == SQLITE_DONE) {
		r = wr_err_set(err, ENOENT, "sandbox %s not found", id);
	} else {
		r = db_fail(db, err, "get sandbox");
	}
out:
	sqlite3_finalize(st);
	reader_put(db);
	return r;
}

int wrd_db_list(const struct wrd_list_query *q, json_t *out, bool *more, int64_t *last_ms,
		char last_id[17], wr_err *err)
{
	char sql[4096];
	int n = snprintf(sql, sizeof(sql),
			 "SELECT " COLS " FROM sandboxes WHERE tenant = ?1"
			 " AND (?2 IS NULL OR state = ?2)"
			 " AND (created_ms > ?3 OR (created_ms = ?3 AND id > ?4))");
	for (size_t i = 0; i < q->n_labels && n < (int)sizeof(sql) - 128; i++)
		n += snprintf(sql + n, sizeof(sql) - (size_t)n,
			      " AND json_extract(spec, ?%zu) IS ?%zu", 6 + 2 * i, 7 + 2 * i);
	snprintf(sql + n, sizeof(sql) - (size_t)n, " ORDER BY created_ms, id LIMIT ?5");
	sqlite3 *db = reader_get(err);
	if (db == NULL)
		return -EIO;
	sqlite3_stmt *st = NULL;
	int r = 0;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
		r = db_fail(db, err, "list sandboxes");
		goto out;
	}
	sqlite3_bind_text(st, 1, q->tenant, -1, SQLITE_STATIC);
	if (q->state >= 0)
		sqlite3_bind_text(st, 2, wrd_state_name((enum wrd_state)q->state), -1,
				  SQLITE_STATIC);
	sqlite3_bind_int64(st, 3, q->after_ms);
	sqlite3_bind_text(st, 4, q->after_id ? q->after_id : "", -1, SQLITE_STATIC);
	sqlite3_bind_int(st, 5, q->limit + 1);
	char paths[64][80];
	for (size_t i = 0; i < q->n_labels && i < 64; i++) {
		/* keys are [A-Za-z0-9_.-]: safe inside a quoted JSON path */
		snprintf(paths[i], sizeof(paths[i]), "$.labels.\"%s\"", q->label_keys[i]);
		sqlite3_bind_text(st, (int)(6 + 2 * i), paths[i], -1, SQLITE_STATIC);
		sqlite3_bind_text(st, (int)(7 + 2 * i), q->label_values[i], -1, SQLITE_STATIC);
	}
	*more = false;
	int count = 0, rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (count == q->limit) {
			*more = true;
			break;
		}
		struct wrd_record rec;
		if (row_record(st, &rec) < 0) {
			r = wr_err_set(err, ENOMEM, "list sandboxes: out of memory");
			goto out;
		}
		json_array_append_new(out, wrd_record_json(&rec));
		*last_ms = rec.created_ms;
		memcpy(last_id, rec.id, 17);
		wrd_record_clear(&rec);
		count++;
	}
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		r = db_fail(db, err, "list sandboxes");
out:
	sqlite3_finalize(st);
	reader_put(db);
	return r;
}

int wrd_db_each_active(int (*cb)(struct wrd_record *r, void *ctx), void *ctx, wr_err *err)
{
	/* Collected first: callbacks write to the database. */
	pthread_mutex_lock(&g_wlock);
	sqlite3_stmt *st = NULL;
	int r = 0;
	size_t n = 0, cap = 0;
	struct wrd_record *recs = NULL;
	if (sqlite3_prepare_v2(g_w,
			       "SELECT " COLS " FROM sandboxes WHERE state IN ('creating', "
			       "'running', 'paused') ORDER BY created_ms, id",
			       -1, &st, NULL) != SQLITE_OK) {
		r = db_fail(g_w, err, "load sandboxes");
		goto out;
	}
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			struct wrd_record *nr = realloc(recs, cap * sizeof(*recs));
			if (nr == NULL) {
				r = wr_err_set(err, ENOMEM, "load sandboxes: out of memory");
				goto out;
			}
			recs = nr;
		}
		if (row_record(st, &recs[n]) < 0) {
			r = wr_err_set(err, ENOMEM, "load sandboxes: out of memory");
			goto out;
		}
		n++;
	}
	if (rc != SQLITE_DONE)
		r = db_fail(g_w, err, "load sandboxes");
out:
	sqlite3_finalize(st);
	pthread_mutex_unlock(&g_wlock);
	for (size_t i = 0; i < n; i++) {
		if (r == 0)
			r = cb(&recs[i], ctx);
		wrd_record_clear(&recs[i]);
	}
	free(recs);
	return r;
}

int wrd_db_count_states(void (*cb)(const char *tier, const char *state, int64_t n, void *ctx),
			void *ctx, wr_err *err)
{
	sqlite3 *db = reader_get(err);
	if (db == NULL)
		return -EIO;
	sqlite3_stmt *st = NULL;
	int r = 0;
	if (sqlite3_prepare_v2(db,
			       "SELECT tier, state, COUNT(*) FROM sandboxes GROUP BY tier, state",
			       -1, &st, NULL) != SQLITE_OK) {
		r = db_fail(db, err, "count sandboxes");
		goto out;
	}
	while (sqlite3_step(st) == SQLITE_ROW)
		cb((const char *)sqlite3_column_text(st, 0),
		   (const char *)sqlite3_column_text(st, 1), sqlite3_column_int64(st, 2), ctx);
out:
	sqlite3_finalize(st);
	reader_put(db);
	return r;
}

/* ---- events ------------------------------------------------------------- */

struct ev {
	char sandbox_id[17];
	uint64_t seq;
	int64_t time_ms;
	char type[24];
	char *detail;
	struct ev *next;
};
static struct ev *g_evq, **g_evtail = &g_evq;
static bool g_evstop;

void wrd_db_event(const char *sandbox_id, uint64_t seq, const char *type, json_t *detail)
{
	struct ev *e = calloc(1, sizeof(*e));
	if (e == NULL) {
		json_decref(detail);
		return;
	}
	snprintf(e->sandbox_id, sizeof(e->sandbox_id), "%s", sandbox_id);
	snprintf(e->type, sizeof(e->type), "%s", type);
	e->seq = seq;
	e->time_ms = wrd_now_ms();
	e->detail =
	    detail ? json_dumps(detail, JSON_COMPACT | JSON_REAL_PRECISION(9)) : strdup("{}");
	json_decref(detail);
	pthread_mutex_lock(&g_evlock);
	bool first = g_evq == NULL; /* later ones wait for the same commit */
	*g_evtail = e;
	g_evtail = &e->next;
	if (first)
		pthread_cond_signal(&g_evcond);
	pthread_mutex_unlock(&g_evlock);
}

#define EV_GATHER_MS 20

static const char ev_insert_sql[] = "INSERT OR REPLACE INTO events (sandbox_id, seq, time_ms, "
				    "type, detail) VALUES (?1, ?2, ?3, ?4, ?5)";

/* Caller holds g_wlock: draining under it keeps commits in queue order. */
static int flush_locked(wr_err *err)
{
	pthread_mutex_lock(&g_evlock);
	struct ev *list = g_evq;
	g_evq = NULL;
	g_evtail = &g_evq;
	pthread_mutex_unlock(&g_evlock);
	if (list == NULL)
		return 0;
	int r = exec_sql(g_w, "BEGIN", err);
	sqlite3_stmt *st = NULL;
	if (r == 0 && (st = writer_stmt(ev_insert_sql)) == NULL)
		r = db_fail(g_w, err, "insert event");
	for (struct ev *e = list; e;) {
		if (r == 0) {
			sqlite3_reset(st);
			sqlite3_bind_text(st, 1, e->sandbox_id, -1, SQLITE_STATIC);
			sqlite3_bind_int64(st, 2, (sqlite3_int64)e->seq);
			sqlite3_bind_int64(st, 3, e->time_ms);
			sqlite3_bind_text(st, 4, e->type, -1, SQLITE_STATIC);
			sqlite3_bind_text(st, 5, e->detail ? e->detail : "{}", -1, SQLITE_STATIC);
			if (sqlite3_step(st) != SQLITE_DONE)
				r = db_fail(g_w, err, "insert event");
		}
		struct ev *next = e->next;
		free(e->detail);
		free(e);
		e = next;
	}
	if (st)
		writer_stmt_done(st);
	if (r == 0)
		r = exec_sql(g_w, "COMMIT", err);
	else
		exec_sql(g_w, "ROLLBACK", NULL);
	return r;
}

int wrd_db_flush_events(wr_err *err)
{
	pthread_mutex_lock(&g_wlock);
	int r = flush_locked(err);
	pthread_mutex_unlock(&g_wlock);
	return r;
}

static void *flusher_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "wrd-events");
	for (;;) {
		pthread_mutex_lock(&g_evlock);
		while (g_evq == NULL && !g_evstop && !g_ck_wanted)
			pthread_cond_wait(&g_evcond, &g_evlock);
		/* Gather for a moment: a sandbox's events come a few ms apart
		 * (created, command_started, command_finished, killed) and each
		 * commit costs as much as many rows. Readers flush first, so
		 * nobody waits for this; a crash loses at most these ms. */
		if (g_evq && !g_evstop) {
			struct timespec dl;
			clock_gettime(CLOCK_REALTIME, &dl);
			dl.tv_nsec += EV_GATHER_MS * 1000000L;
			if (dl.tv_nsec >= 1000000000L) {
				dl.tv_sec++;
				dl.tv_nsec -= 1000000000L;
			}
			while (!g_evstop && pthread_cond_timedwait(&g_evcond, &g_evlock, &dl) == 0)
				;
		}
		bool stop = g_evstop, ck = g_ck_wanted;
		g_ck_wanted = false;
		pthread_mutex_unlock(&g_evlock);
		_cleanup_err_ wr_err err = NULL;
		wrd_db_flush_events(&err);
		/* PASSIVE: never waits for readers or the writer; what it could
		 * not copy now goes with the next one. */
		if (ck)
			sqlite3_wal_checkpoint_v2(g_ck, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL,
						  NULL);
		if (stop)
			return NULL;
	}
}

int wrd_db_events(const char *sandbox_id, int64_t since, int limit, json_t *out, wr_err *err)
{
	if (wrd_db_flush_events(err) < 0)
		return -EIO;
	sqlite3 *db = reader_get(err);
	if (db == NULL)
		return -EIO;
	sqlite3_stmt *st = NULL;
	int r = 0;
	if (sqlite3_prepare_v2(
		db,
		"SELECT seq, time_ms, type, detail FROM events WHERE sandbox_id = ?1 "
		"AND seq > ?2 ORDER BY seq LIMIT ?3",
		-1, &st, NULL) != SQLITE_OK) {
		r = db_fail(db, err, "list events");
		goto out;
	}
	sqlite3_bind_text(st, 1, sandbox_id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, since);
	sqlite3_bind_int(st, 3, limit);
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		json_t *e = json_object();
		json_object_set_new(e, "seq", json_integer(sqlite3_column_int64(st, 0)));
		json_object_set_new(e, "time", wrd_j_time(sqlite3_column_int64(st, 1)));
		json_object_set_new(e, "type",
				    json_string((const char *)sqlite3_column_text(st, 2)));
		const char *d = (const char *)sqlite3_column_text(st, 3);
		json_t *dj = d ? json_loads(d, 0, NULL) : NULL;
		json_object_set_new(e, "detail", dj ? dj : json_object());
		json_array_append_new(out, e);
	}
	if (rc != SQLITE_DONE)
		r = db_fail(db, err, "list events");
out:
	sqlite3_finalize(st);
	reader_put(db);
	return r;
}

int64_t wrd_db_last_event_seq(const char *sandbox_id)
{
	wr_err err = NULL;
	wrd_db_flush_events(&err);
	wr_err_free(&err);
	sqlite3 *db = reader_get(&err);
	wr_err_free(&err);
	if (db == NULL)
		return 0;
	sqlite3_stmt *st = NULL;
	int64_t seq = 0;
	if (sqlite3_prepare_v2(db, "SELECT MAX(seq) FROM events WHERE sandbox_id = ?1", -1, &st,
			       NULL) == SQLITE_OK) {
		sqlite3_bind_text(st, 1, sandbox_id, -1, SQLITE_STATIC);
		if (sqlite3_step(st) == SQLITE_ROW)
			seq = sqlite3_column_int64(st, 0);
	}
	sqlite3_finalize(st);
	reader_put(db);
	return seq;
}

/* ---- other modules' tables ---------------------------------------------- */

int wrd_db_exec(const char *sql, wr_err *err)
{
	pthread_mutex_lock(&g_wlock);
	int r = exec_sql(g_w, sql, err);
	pthread_mutex_unlock(&g_wlock);
	return r;
}

static void bind_none(sqlite3_stmt *st, const void *ctx)
{
	(void)st;
	(void)ctx;
}

int wrd_db_write(const char *sql, const char *what, void (*bind)(sqlite3_stmt *st, const void *ctx),
		 const void *ctx, wr_err *err)
{
	return write_stmt(sql, what, err, bind ? bind : bind_none, ctx, false);
}

int wrd_db_read(const char *sql, const char *what, void (*bind)(sqlite3_stmt *st, const void *ctx),
		const void *bctx, int (*row)(sqlite3_stmt *st, void *ctx), void *rctx, wr_err *err)
{
	sqlite3 *db = reader_get(err);
	if (db == NULL)
		return -EIO;
	sqlite3_stmt *st = NULL;
	int r = 0, rc = SQLITE_DONE;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
		r = db_fail(db, err, what);
		goto out;
	}
	if (bind)
		bind(st, bctx);
	while (r == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW)
		if (row)
			r = row(st, rctx);
	if (r == 0 && rc != SQLITE_DONE)
		r = db_fail(db, err, what);
out:
	sqlite3_finalize(st);
	reader_put(db);
	return r;
}

/* ---- the audit store's batches (audit_store.c) ---------------------------- */

int wrd_db_with_writer(int (*fn)(sqlite3 *db, void *ctx), void *ctx)
{
	pthread_mutex_lock(&g_wlock);
	int r = g_w ? fn(g_w, ctx) : -EIO;
	pthread_mutex_unlock(&g_wlock);
	return r;
}

int wrd_db_with_reader(int (*fn)(sqlite3 *db, void *ctx), void *ctx, wr_err *err)
{
	sqlite3 *db = reader_get(err);
	if (db == NULL)
		return -EIO;
	int r = fn(db, ctx);
	reader_put(db);
	return r;
}

void wrd_db_close(void)
{
	if (g_flusher_running) {
		pthread_mutex_lock(&g_evlock);
		g_evstop = true;
		pthread_cond_signal(&g_evcond);
		pthread_mutex_unlock(&g_evlock);
		pthread_join(g_flusher, NULL);
		g_flusher_running = false;
	}
	for (int i = 0; i < g_rfree; i++)
		sqlite3_close(g_rpool[i]);
	g_rfree = 0;
	for (int i = 0; i < NSTMT; i++) {
		sqlite3_finalize(g_stmts[i].st);
		g_stmts[i].sql = NULL;
		g_stmts[i].st = NULL;
	}
	if (g_ck)
		sqlite3_close(g_ck);
	g_ck = NULL;
	if (g_w)
		sqlite3_close(g_w);
	g_w = NULL;
	free(g_path);
	g_path = NULL;
}
