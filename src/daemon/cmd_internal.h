/* Private to the commands module (commands.c runs commands, cmd_handles.c
 * serves the handles of running and finished ones). */
#ifndef WARREN_DAEMON_CMD_INTERNAL_H
#define WARREN_DAEMON_CMD_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "daemon/manager.h"
#include "tiers/tier.h"

#define WRD_MAX_CMD_RECORDS 256 /* finished commands remembered per sandbox */

struct chunk {
	int stream;
	size_t off, len;
};

struct wrd_cmd {
	char id[16];
	struct wrd_cmd *next; /* sb->cmds, oldest first */
	atomic_int refs;
	struct wrd_sbx *sb; /* referenced while the command runs */
	json_t *cmd;	    /* as given */
	bool background, base64;
	pthread_mutex_t lock;
	pthread_cond_t cv; /* output appended, or done */
	bool done;
	struct wr_exec_result res; /* out/err unused: output is in the log */
	char *error;		   /* the tier failed to run it */
	/* output log */
	struct chunk *chunks;
	size_t nchunks, chunks_cap;
	char *data;
	size_t data_len, data_cap;
	int stdin_w;
	pid_t tid; /* thread running the tier's exec */
	bool kill_requested;
	struct wr_exec_ctl ctl; /* kill / pidfd of the running command (the tier's) */
	/* the exec request */
	char **argv;
	struct wr_env_kv *env;
	size_t n_env;
	char *cwd;
	int user;
	uint64_t timeout_ms, output_cap;
	int stdin_r;
	bool stream;
	struct wrd_req *req; /* foreground: the request being answered */
	/* interactive (pty.c): the tier's on_pty runs the relay */
	bool pty;
	unsigned short rows, cols;
	void (*on_pty)(void *ctx, int master_fd);
	void *pty_ctx;
	/* a background command's durable record (cmd_adopt.c) */
	bool persisted;
	char sbid[17];
	int64_t started_ms;
	/* adopted after a daemon restart: not our child, its output went to
	 * the previous process; watched by the monitor through a pidfd */
	bool adopted;
	int adopt_pidfd;
	pid_t adopt_pid, adopt_ns_pid;
	uint64_t adopt_ticks;
	char *adopt_kill; /* cgroup.kill of its leaf, or NULL */
	json_t *final;	  /* adopted, finished: the result fields */
};

struct ndjson {
	int fd;
	bool base64;
	bool broken;
	char carry[3][4];
	size_t carry_len[3];
};

void wrd_cmd_put(struct wrd_cmd *c);
/* The API form; caller holds c->lock. full: with the result and output. */
json_t *wrd_cmd_json(struct wrd_cmd *c, bool full);
/* Output of one stream (1, 2) from the log; caller holds c->lock. */
json_t *wrd_cmd_output(struct wrd_cmd *c, int stream);
void wrd_result_fields(json_t *o, const struct wr_exec_result *res);
/* NDJSON lines: output chunks (a split UTF-8 character is carried to the
 * next chunk) and the final exit (or error) line. */
void wrd_nd_data(struct ndjson *o, int stream, const char *buf, size_t len, bool final);
void wrd_nd_exit(struct ndjson *o, const struct wr_exec_result *res, const char *error);
/* In-sandbox pid of a running command (0 if unknown); kill its tree (now,
 * or before it starts). Thread-safe. */
pid_t wrd_cmd_ns_pid(struct wrd_cmd *c);
int wrd_cmd_kill_tree(struct wrd_cmd *c);
/* A pidfd of the running command (-ESRCH before it runs and once it has
 * exited). Thread-safe. */
int wrd_cmd_pidfd(struct wrd_cmd *c);

/* cmd_adopt.c: persistence of background commands across restarts. */
/* Wait (bounded) until c runs or ended, then write its record; false if it
 * could not be written (the command runs, unremembered by a restart). */
bool wrd_cmd_persist_start(struct wrd_cmd *c);
/* c ended: record its result (a no-op unless persisted). */
void wrd_cmd_persist_finish(struct wrd_cmd *c);
/* The monitor saw an adopted command's pidfd readable: it exited. */
void wrd_cmd_adopted_exit(struct wrd_cmd *c);
/* The result fields of an adopted, finished command (caller holds c->lock):
 * a new reference. */
json_t *wrd_cmd_adopted_result(struct wrd_cmd *c);
int wrd_cmd_adopted_kill(struct wrd_cmd *c);
int wrd_cmd_adopted_pidfd(struct wrd_cmd *c);
void wrd_nd_exit_json(struct ndjson *o, json_t *fields);
/* monitor.c: watch an adopted command's pidfd (takes a reference). */
void wrd_monitor_watch_cmd(struct wrd_cmd *c);

/* A new command record (one reference), argv etc. filled by the caller. */
struct wrd_cmd *wrd_cmd_new(void);
/* Add c to sb's list under a fresh id (the list takes a reference). */
void wrd_cmd_register(struct wrd_sbx *sb, struct wrd_cmd *c);
/* Run c on this thread through the tier (the sandbox operation is begun by
 * the caller); record the result and the command_finished event. nd: NDJSON
 * output, or NULL (buffered, logged, or pty). */
void wrd_cmd_execute(struct wrd_cmd *c, struct ndjson *nd);

#endif
