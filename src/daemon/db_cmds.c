/* A sandbox's commands in the metadata database, through db.c's writer and
 * readers: the records of background commands (the commands table, which
 * an adopting daemon reads back) and the counters of removed command
 * leaves (leaf_counts, db.h wrd_db_leaf_keep). A leaf_counts row is
 * written only for a leaf that counted something (an OOM kill, a refused
 * fork), so most commands cost no write there. */
#include <errno.h>
#include <sqlite3.h>

#include "daemon/db.h"

/* ---- background commands ------------------------------------------------ */

static void bind_cmd(sqlite3_stmt *st, const void *ctx)
{
	const struct wrd_cmd_row *c = ctx;
	sqlite3_bind_text(st, 1, c->sandbox_id, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, c->id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 3, (sqlite3_int64)c->seq);
	sqlite3_bind_text(st, 4, c->cmd, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 5, c->started_ms);
	sqlite3_bind_int64(st, 6, c->host_pid);
	sqlite3_bind_int64(st, 7, c->ns_pid);
	sqlite3_bind_int64(st, 8, (sqlite3_int64)c->start_ticks);
	if (c->result)
		sqlite3_bind_text(st, 9, c->result, -1, SQLITE_STATIC);
}

int wrd_db_cmd_insert(const struct wrd_cmd_row *c, wr_err *err)
{
	return wrd_db_write("INSERT OR REPLACE INTO commands (sandbox_id, id, seq, cmd, started_ms,"
			    " host_pid, ns_pid, start_ticks, result)"
			    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
			    "insert command", bind_cmd, c, err);
}

int wrd_db_cmd_finish(const struct wrd_cmd_row *c, wr_err *err)
{
	/* ?3..?8 are bound but unused: ?9 makes them valid indexes */
	return wrd_db_write("UPDATE commands SET result = ?9 WHERE sandbox_id = ?1 AND id = ?2",
			    "finish command", bind_cmd, c, err);
}

struct cmd_each {
	const char *sandbox_id;
	unsigned max;
	int (*cb)(const struct wrd_cmd_row *c, void *ctx);
	void *ctx;
};

static void bind_each(sqlite3_stmt *st, const void *ctx)
{
	const struct cmd_each *e = ctx;
	sqlite3_bind_text(st, 1, e->sandbox_id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, e->max);
}

static int cmd_row(sqlite3_stmt *st, void *ctx)
{
	struct cmd_each *e = ctx;
	struct wrd_cmd_row c = {
	    .sandbox_id = e->sandbox_id,
	    .id = (const char *)sqlite3_column_text(st, 0),
	    .seq = (uint64_t)sqlite3_column_int64(st, 1),
	    .cmd = (const char *)sqlite3_column_text(st, 2),
	    .started_ms = sqlite3_column_int64(st, 3),
	    .host_pid = (pid_t)sqlite3_column_int64(st, 4),
	    .ns_pid = (pid_t)sqlite3_column_int64(st, 5),
	    .start_ticks = (uint64_t)sqlite3_column_int64(st, 6),
	    .result = (const char *)sqlite3_column_text(st, 7),
	};
	return c.id && c.cmd ? e->cb(&c, e->ctx) : 0;
}

int wrd_db_cmd_each(const char *sandbox_id, unsigned max,
		    int (*cb)(const struct wrd_cmd_row *c, void *ctx), void *ctx, wr_err *err)
{
	struct cmd_each e = {sandbox_id, max, cb, ctx};
	/* the newest `max`, handed over oldest first */
	return wrd_db_read("SELECT id, seq, cmd, started_ms, host_pid, ns_pid, start_ticks, "
			   "result FROM (SELECT * FROM commands WHERE sandbox_id = ?1 "
			   "ORDER BY seq DESC LIMIT ?2) ORDER BY seq",
			   "load commands", bind_each, &e, cmd_row, &e, err);
}

/* ---- counters of removed command leaves --------------------------------- */

struct leaf_row {
	const char *sandbox_id, *leaf;
	uint64_t oom_kills, pids_max_hits;
	wr_err *err;
};

static int keep_row(sqlite3 *db, void *ctx)
{
	struct leaf_row *k = ctx;
	/* IGNORE: a leaf recorded before (a crash came before its rmdir)
	 * keeps its row; the kernel's counters of an empty leaf no longer
	 * change, so the values are the same anyway. */
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db,
			       "INSERT OR IGNORE INTO leaf_counts"
			       " (sandbox_id, leaf, oom_kills, pids_max_hits)"
			       " VALUES (?1, ?2, ?3, ?4)",
			       -1, &st, NULL) != SQLITE_OK)
		return wrd_db_fail(db, k->err, "record leaf counts");
	sqlite3_bind_text(st, 1, k->sandbox_id, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, k->leaf, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 3, (sqlite3_int64)k->oom_kills);
	sqlite3_bind_int64(st, 4, (sqlite3_int64)k->pids_max_hits);
	int r = sqlite3_step(st) != SQLITE_DONE ? wrd_db_fail(db, k->err, "record leaf counts")
		: sqlite3_changes(db) > 0	? 1
						: 0;
	sqlite3_finalize(st);
	return r;
}

int wrd_db_leaf_keep(const char *sandbox_id, const char *leaf, uint64_t oom_kills,
		     uint64_t pids_max_hits, wr_err *err)
{
	struct leaf_row k = {sandbox_id, leaf, oom_kills, pids_max_hits, err};
	int r = wrd_db_with_writer(keep_row, &k);
	return r == -EIO && err && *err == NULL
		   ? wr_err_set(err, EIO, "database: record leaf counts: not open")
		   : r;
}

static void bind_sandbox(sqlite3_stmt *st, const void *ctx)
{
	sqlite3_bind_text(st, 1, ctx, -1, SQLITE_STATIC);
}

struct leaf_sums {
	uint64_t oom, pmax;
};

static int leaf_sums_row(sqlite3_stmt *st, void *ctx)
{
	struct leaf_sums *s = ctx;
	s->oom = (uint64_t)sqlite3_column_int64(st, 0);
	s->pmax = (uint64_t)sqlite3_column_int64(st, 1);
	return 0;
}

int wrd_db_leaf_sums(const char *sandbox_id, uint64_t *oom_kills, uint64_t *pids_max_hits,
		     wr_err *err)
{
	struct leaf_sums s = {0};
	int r = wrd_db_read("SELECT COALESCE(SUM(oom_kills), 0), COALESCE(SUM(pids_max_hits), 0)"
			    " FROM leaf_counts WHERE sandbox_id = ?1",
			    "load leaf counts", bind_sandbox, sandbox_id, leaf_sums_row, &s, err);
	*oom_kills = s.oom;
	*pids_max_hits = s.pmax;
	return r;
}
