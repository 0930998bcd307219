/* Durable state: SQLite in WAL mode, synchronous=NORMAL.
 *
 *   sandboxes  one row per sandbox ever created (records stay after kill);
 *              written synchronously before the API answers
 *   events     lifecycle events per sandbox, (sandbox_id, seq) dense from 1;
 *              queued in memory and committed in batches by a flusher
 *              thread (a crash may lose the last few ms of events, never a
 *              sandbox record); readers flush first so they see their own
 *
 * One writer connection behind a mutex; readers take a connection from a
 * small pool (WAL readers never wait for the writer). */
#ifndef WARREN_DAEMON_DB_H
#define WARREN_DAEMON_DB_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

/* paused: frozen (manager.c, lifecycle); its lifetime clock stops. */
enum wrd_state {
	WRD_CREATING,
	WRD_RUNNING,
	WRD_KILLED,
	WRD_TIMED_OUT,
	WRD_FAILED,
	WRD_PAUSED,
	WRD_NSTATES
};
const char *wrd_state_name(enum wrd_state s);
int wrd_state_parse(const char *s); /* -1 if unknown */

/* What the record holds: enough to answer the API and to rebuild the
 * create spec for adoption after a restart. */
struct wrd_record {
	char id[17];
	char *tenant;
	char *tier;
	char *image;	  /* as the client named it */
	char *image_path; /* what it resolved to at create time */
	enum wrd_state state;
	int64_t created_ms, expires_ms;
	pid_t init_pid;
	/* paused: since when, the lifetime left when it paused (the clock
	 * stops; expires_ms is then meaningless), and why ("request", "idle",
	 * "lease", "timeout"). Zero/empty while running. */
	int64_t paused_ms, remaining_ms;
	char pause_reason[16];
	/* cpu, memory_mb, disk_mb, pids, user, workdir, env, labels, timeout,
	 * idle_timeout, on_timeout: every field normalised (defaults filled) */
	json_t *spec;
};
void wrd_record_clear(struct wrd_record *r);
/* The API's sandbox object. */
json_t *wrd_record_json(const struct wrd_record *r);

int wrd_db_open(const char *path, wr_err *err);
void wrd_db_close(void);

int wrd_db_insert(const struct wrd_record *r, wr_err *err);
int wrd_db_set_state(const char *id, enum wrd_state st, wr_err *err);
int wrd_db_set_expires(const char *id, int64_t expires_ms, wr_err *err);
/* running -> paused (one commit: state, when, lifetime left, why) and
 * paused -> running (state and the new expiry). */
int wrd_db_set_paused(const char *id, int64_t paused_ms, int64_t remaining_ms, const char *reason,
		      wr_err *err);
int wrd_db_set_resumed(const char *id, int64_t expires_ms, wr_err *err);
/* A paused sandbox's lifetime left (set-timeout while paused). */
int wrd_db_set_remaining(const char *id, int64_t remaining_ms, wr_err *err);
int wrd_db_delete(const char *id, wr_err *err);
/* spec.network := policy_json (a JSON object), durable on return. */
int wrd_db_set_network(const char *id, const char *policy_json, wr_err *err);
/* ENOENT when there is no such record. */
int wrd_db_get(const char *id, struct wrd_record *out, wr_err *err);

struct wrd_list_query {
	const char *tenant;
	int state; /* -1 = any */
	const char *const *label_keys;
	const char *const *label_values;
	size_t n_labels;
	int64_t after_ms; /* page token: strictly after (after_ms, after_id) */
	const char *after_id;
	int limit;
};
/* Appends sandbox objects to `out`; *more says another page exists. */
int wrd_db_list(const struct wrd_list_query *q, json_t *out, bool *more, int64_t *last_ms,
		char last_id[17], wr_err *err);
/* Records in state creating, running or paused (daemon start). */
int wrd_db_each_active(int (*cb)(struct wrd_record *r, void *ctx), void *ctx, wr_err *err);
/* (tier, state, count) rows, for /metrics. */
int wrd_db_count_states(void (*cb)(const char *tier, const char *state, int64_t n, void *ctx),
			void *ctx, wr_err *err);

/* Background commands, so that a restart still knows them: written when
 * one has started (before its 201), and its result when it ends. */
struct wrd_cmd_row {
	const char *sandbox_id, *id;
	uint64_t seq;	 /* its number in the sandbox (c<seq>) */
	const char *cmd; /* JSON: as given */
	int64_t started_ms;
	pid_t host_pid, ns_pid;
	uint64_t start_ticks; /* /proc/<pid>/stat starttime: the pid is still it */
	const char *result;   /* JSON: the command object when finished, else NULL */
};
int wrd_db_cmd_insert(const struct wrd_cmd_row *c, wr_err *err);
int wrd_db_cmd_finish(const struct wrd_cmd_row *c, wr_err *err);
/* The newest `max` of a sandbox, oldest first. */
int wrd_db_cmd_each(const char *sandbox_id, unsigned max,
		    int (*cb)(const struct wrd_cmd_row *c, void *ctx), void *ctx, wr_err *err);

/* db_cmds.c: counters of a container sandbox's removed command leaves (OOM
 * kills, refused forks), one row per leaf (isolate/cgroup.h, retiring): written
 * before the leaf's rmdir, keyed by the leaf for good, so a retirement a
 * crash cut short and done again records once. 1: recorded now, 0: it
 * was already, negative on failure. Deleted with the sandbox's record. */
int wrd_db_leaf_keep(const char *sandbox_id, const char *leaf, uint64_t oom_kills,
		     uint64_t pids_max_hits, wr_err *err);
/* Their sums for a sandbox (adoption). */
int wrd_db_leaf_sums(const char *sandbox_id, uint64_t *oom_kills, uint64_t *pids_max_hits,
		     wr_err *err);

/* Events. seq comes from the caller (per sandbox, dense). detail is
 * stolen (may be NULL). */
void wrd_db_event(const char *sandbox_id, uint64_t seq, const char *type, json_t *detail);
int wrd_db_flush_events(wr_err *err);
int wrd_db_events(const char *sandbox_id, int64_t since, int limit, json_t *out, wr_err *err);
int64_t wrd_db_last_event_seq(const char *sandbox_id);

/* For modules with tables of their own (lease.c): statements on the
 * writer connection (serialised with every other write) and reads on a
 * reader connection. bind and row may be NULL. */
struct sqlite3_stmt;
int wrd_db_exec(const char *sql, wr_err *err);
int wrd_db_write(const char *sql, const char *what,
		 void (*bind)(struct sqlite3_stmt *st, const void *ctx), const void *ctx,
		 wr_err *err);
int wrd_db_read(const char *sql, const char *what,
		void (*bind)(struct sqlite3_stmt *st, const void *ctx), const void *bctx,
		int (*row)(struct sqlite3_stmt *st, void *ctx), void *rctx, wr_err *err);
/* The audit store (audit_store.c) keeps its tables in this database and
 * writes through the one writer connection, so its batches queue behind
 * (never beside) sandbox records: fn runs with the writer lock held. */
struct sqlite3;
int wrd_db_with_writer(int (*fn)(struct sqlite3 *db, void *ctx), void *ctx);
/* The error of a failed statement on db, as every db function reports it
 * (ENOSPC for a full disk, EBUSY, else EIO): negative. */
int wrd_db_fail(struct sqlite3 *db, wr_err *err, const char *what);
/* fn with a pooled reader connection; its return value is returned. */
int wrd_db_with_reader(int (*fn)(struct sqlite3 *db, void *ctx), void *ctx, wr_err *err);

#endif
