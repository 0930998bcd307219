/* Background commands across a daemon restart.
 *
 * A background command's record (id, argv, start time, host and in-sandbox
 * pid, the process's start time in clock ticks) is written to SQLite once
 * it runs, before its 201; its result when it ends. The next start loads
 * the records of every adopted sandbox: a finished one is listed with its
 * result; a running one is verified (the pid still names the same process,
 * by start time, and it lives in the sandbox's cgroup), reopened as a pidfd
 * and watched by the monitor. It is not our child (its sandbox's PID 1 is
 * its parent, or on kernels before 6.15 the previous process was), so its
 * exit code comes from the pidfd (wr_pidfd_exit_status: PIDFD_GET_INFO,
 * kernel 6.15+; the kernel keeps it for a pidfd opened before the exit).
 * When it cannot be known (it ended while no daemon ran, or the kernel is
 * older) the result says so: "exit_code": null, "reason":
 * "daemon_restarted". Output after a restart is not available:
 * it went to pipes of the previous process ("output_available": false). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "common/log.h"
#include "common/util.h"
#include "daemon/cmd_internal.h"
#include "daemon/commands.h"
#include "daemon/http.h"
#include "daemon/jsonutil.h"

#define START_WAIT_MS 10000

/* ---- /proc ---------------------------------------------------------------- */

static pid_t pidfd_pid(int pidfd)
{
	char path[64];
	_cleanup_free_ char *buf = NULL;
	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", pidfd);
	if (wr_read_file_at(AT_FDCWD, path, &buf, 65536, NULL) < 0)
		return 0;
	const char *p = strstr(buf, "\nPid:");
	return p ? (pid_t)strtol(p + 5, NULL, 10) : 0;
}

/* /proc/<pid>/stat's state, start time and a zombie's wait status
 * (wr_proc_stat_at). 0 when there is no such process. */
static uint64_t stat_of(pid_t pid, char *state, int *status)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	return wr_proc_stat_at(AT_FDCWD, path, state, status);
}

static uint64_t start_ticks(pid_t pid)
{
	return stat_of(pid, NULL, NULL);
}

/* The cgroup v2 leaf of pid (its "0::" line), which must lie in the
 * sandbox's cgroup; its cgroup.kill path in *kill (NULL when the unified
 * hierarchy is not mounted). false when pid is not in the sandbox. */
static bool pid_in_sandbox(pid_t pid, const char *sbid, char **kill)
{
	char path[64], needle[32];
	_cleanup_free_ char *cg = NULL, *mi = NULL;
	*kill = NULL;
	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	if (wr_read_file_at(AT_FDCWD, path, &cg, 65536, NULL) < 0)
		return false;
	snprintf(needle, sizeof(needle), "/%s/", sbid);
	if (strstr(cg, needle) == NULL)
		return false;
	const char *l = strncmp(cg, "0::", 3) == 0 ? cg : strstr(cg, "\n0::");
	if (l == NULL || wr_read_file_at(AT_FDCWD, "/proc/self/mountinfo", &mi, 1 << 20, NULL) < 0)
		return true;
	l += *l == '\n' ? 4 : 3;
	size_t ll = strcspn(l, "\n");
	/* "id parent maj:min root mountpoint opts ... - cgroup2 src opts" */
	char *sv = NULL; /* strtok_r: other threads tokenise too */
	for (char *line = strtok_r(mi, "\n", &sv); line; line = strtok_r(NULL, "\n", &sv)) {
		char mnt[512];
		const char *sep = strstr(line, " - cgroup2 ");
		if (sep == NULL || sscanf(line, "%*s %*s %*s %*s %511s", mnt) != 1)
			continue;
		if (asprintf(kill, "%s%.*s/cgroup.kill", mnt, (int)ll, l) < 0)
			*kill = NULL;
		break;
	}
	return true;
}

/* ---- the record ------------------------------------------------------------ */

static void row_of(struct wrd_cmd *c, struct wrd_cmd_row *row, char *cmd, char *result)
{
	*row = (struct wrd_cmd_row){
	    .sandbox_id = c->sbid,
	    .id = c->id,
	    .seq = strtoull(c->id + 1, NULL, 10),
	    .cmd = cmd,
	    .started_ms = c->started_ms,
	    .result = result,
	};
}

bool wrd_cmd_persist_start(struct wrd_cmd *c)
{
	snprintf(c->sbid, sizeof(c->sbid), "%s", c->sb->rec.id);
	c->started_ms = wrd_now_ms();
	/* Until it runs (its pid is known) or ended already; the tier says
	 * -ESRCH both before and after, done tells them apart. */
	int pidfd = -1;
	uint64_t deadline = wr_now_ns() + START_WAIT_MS * 1000000ull;
	for (useconds_t nap = 100;; nap = nap < 5000 ? nap * 2 : nap) {
		pidfd = wrd_cmd_pidfd(c);
		pthread_mutex_lock(&c->lock);
		bool done = c->done;
		pthread_mutex_unlock(&c->lock);
		if (pidfd >= 0 || done || wr_now_ns() > deadline)
			break;
		usleep(nap);
	}
	_cleanup_free_ char *cmd = json_dumps(c->cmd, JSON_COMPACT | JSON_ENCODE_ANY);
	struct wrd_cmd_row row;
	row_of(c, &row, cmd, NULL);
	if (pidfd >= 0) {
		row.host_pid = pidfd_pid(pidfd);
		row.start_ticks = row.host_pid > 0 ? start_ticks(row.host_pid) : 0;
		row.ns_pid = wrd_cmd_ns_pid(c);
		close(pidfd);
	}
	_cleanup_err_ wr_err err = NULL;
	if (cmd == NULL || wrd_db_cmd_insert(&row, &err) < 0) {
		wr_warn("command %s/%s: not recorded: %s", c->sbid, c->id,
			err ? err->msg : "out of memory");
		return false;
	}
	pthread_mutex_lock(&c->lock);
	c->persisted = true;
	bool done = c->done;
	pthread_mutex_unlock(&c->lock);
	if (done) /* it ended before the record was written */
		wrd_cmd_persist_finish(c);
	return true;
}

void wrd_cmd_persist_finish(struct wrd_cmd *c)
{
	pthread_mutex_lock(&c->lock);
	if (!c->persisted || !c->done) {
		pthread_mutex_unlock(&c->lock);
		return;
	}
	json_t *o = c->adopted ? json_object() : wrd_cmd_json(c, false);
	if (c->adopted) {
		json_t *f = wrd_cmd_adopted_result(c);
		json_object_update(o, f);
		json_decref(f);
	} else if (!c->error) {
		wrd_result_fields(o, &c->res);
	}
	pthread_mutex_unlock(&c->lock);
	json_object_del(o, "id");
	json_object_del(o, "cmd");
	json_object_del(o, "state");
	json_object_del(o, "background");
	_cleanup_free_ char *res = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9));
	json_decref(o);
	struct wrd_cmd_row row;
	row_of(c, &row, (char *)"", res);
	_cleanup_err_ wr_err err = NULL;
	if (res && wrd_db_cmd_finish(&row, &err) < 0)
		wr_warn("command %s/%s: result not recorded: %s", c->sbid, c->id, err->msg);
}

/* ---- adoption --------------------------------------------------------------- */

json_t *wrd_cmd_adopted_result(struct wrd_cmd *c)
{
	if (c->final)
		return json_incref(c->final);
	json_t *o = json_object();
	json_object_set_new(o, "exit_code", json_null());
	json_object_set_new(o, "reason", json_string("daemon_restarted"));
	return o;
}

/* A zombie's wait status, read while it is still the process we knew. */
static bool zombie_status(pid_t pid, uint64_t ticks, int *st)
{
	char state = 0;
	return pid > 0 && ticks && stat_of(pid, &state, st) == ticks && state == 'Z';
}

/* Its end: from the zombie while nobody reaped it (whoever inherited it
 * from the previous daemon reaps it, maybe late), else as the kernel kept
 * it for our pidfd (recorded at the reaping), if it did. */
static json_t *exit_fields(struct wrd_cmd *c)
{
	json_t *o = json_object();
	int st = 0;
	if (zombie_status(c->adopt_pid, c->adopt_ticks, &st)) {
		/* st as waitpid reports it */
	} else if (c->adopt_pidfd < 0 || (st = wr_pidfd_exit_status(c->adopt_pidfd)) < 0) {
		json_object_set_new(o, "exit_code", json_null());
		json_object_set_new(o, "reason", json_string("daemon_restarted"));
		return o;
	}
	if (WIFSIGNALED(st)) {
		int sig = WTERMSIG(st);
		json_object_set_new(o, "exit_code", json_integer(128 + sig));
		json_object_set_new(o, "signal", json_integer(sig));
		json_object_set_new(
		    o, "reason",
		    json_string(c->kill_requested && sig == SIGKILL ? "killed" : "signaled"));
	} else {
		json_object_set_new(o, "exit_code", json_integer(WEXITSTATUS(st)));
		json_object_set_new(o, "signal", json_integer(0));
		json_object_set_new(o, "reason", json_string("exited"));
	}
	return o;
}

/* On a pool thread: the kernel records the exit for our pidfd only once
 * the process is reaped, by whoever inherited it from the previous daemon
 * (normally at once): look again for up to a second. */
static void exit_job(void *arg)
{
	struct wrd_cmd *c = arg;
	json_t *f = NULL;
	for (useconds_t nap = 1000; nap < 1000000; nap *= 2) {
		f = exit_fields(c);
		if (!json_is_null(json_object_get(f, "exit_code")))
			break;
		json_decref(f);
		f = NULL;
		usleep(nap);
	}
	if (f == NULL)
		f = exit_fields(c);
	pthread_mutex_lock(&c->lock);
	if (!c->done) {
		c->final = f;
		f = NULL;
		c->done = true;
		pthread_cond_broadcast(&c->cv);
	}
	pthread_mutex_unlock(&c->lock);
	json_decref(f);
	wrd_cmd_persist_finish(c);
	wrd_cmd_put(c);
}

void wrd_cmd_adopted_exit(struct wrd_cmd *c)
{
	atomic_fetch_add(&c->refs, 1); /* the job's */
	if (wrd_pool_submit(exit_job, c) < 0)
		exit_job(c);
}

int wrd_cmd_adopted_kill(struct wrd_cmd *c)
{
	if (c->adopt_kill) {
		int fd = open(c->adopt_kill, O_WRONLY | O_CLOEXEC);
		if (fd >= 0) {
			ssize_t n = write(fd, "1", 1);
			close(fd);
			if (n == 1)
				return 0;
		}
	}
	/* no leaf to kill: the command itself */
	if (c->adopt_pidfd >= 0 && wr_pidfd_send_signal(c->adopt_pidfd, SIGKILL, NULL, 0) == 0)
		return 0;
	return -ESRCH;
}

int wrd_cmd_adopted_pidfd(struct wrd_cmd *c)
{
	pthread_mutex_lock(&c->lock);
	int fd = !c->done && c->adopt_pidfd >= 0 ? fcntl(c->adopt_pidfd, F_DUPFD_CLOEXEC, 0) : -1;
	pthread_mutex_unlock(&c->lock);
	return fd >= 0 ? fd : -ESRCH;
}

static int adopt_one(const struct wrd_cmd_row *row, void *ctx)
{
	struct wrd_sbx *sb = ctx;
	struct wrd_cmd *c = wrd_cmd_new();
	if (c == NULL)
		return -ENOMEM;
	snprintf(c->id, sizeof(c->id), "%s", row->id);
	snprintf(c->sbid, sizeof(c->sbid), "%s", sb->rec.id);
	c->cmd = json_loads(row->cmd, JSON_DECODE_ANY, NULL);
	if (c->cmd == NULL)
		c->cmd = json_string(row->cmd);
	c->background = true;
	c->adopted = true;
	c->persisted = true;
	c->started_ms = row->started_ms;
	c->adopt_pidfd = -1;
	c->adopt_pid = row->host_pid;
	c->adopt_ns_pid = row->ns_pid;
	bool watch = false;
	if (row->result) {
		c->final = json_loads(row->result, 0, NULL);
		c->done = true;
	} else {
		int fd = row->host_pid > 0 ? wr_pidfd_open(row->host_pid, 0) : -1;
		c->adopt_ticks = row->start_ticks;
		char state = 0;
		/* Invariant: checked after the pidfd is open, so the pid cannot
		 * be recycled between the check and our use of it. */
		if (fd >= 0 && row->start_ticks &&
		    stat_of(row->host_pid, &state, NULL) == row->start_ticks && state != 'Z' &&
		    pid_in_sandbox(row->host_pid, sb->rec.id, &c->adopt_kill)) {
			fcntl(fd, F_SETFD, FD_CLOEXEC);
			c->adopt_pidfd = fd;
			watch = true;
		} else {
			if (fd >= 0)
				close(fd);
			/* it ended while no daemon ran: known while it is a zombie
			 * of the same start time, else unknowable */
			c->final = exit_fields(c);
			c->done = true;
		}
	}
	pthread_mutex_lock(&sb->lock);
	atomic_fetch_add(&c->refs, 1); /* the list's */
	struct wrd_cmd **pp = &sb->cmds;
	while (*pp)
		pp = &(*pp)->next;
	*pp = c;
	sb->n_cmds++;
	if (row->seq > sb->next_cmd)
		sb->next_cmd = (unsigned)row->seq;
	pthread_mutex_unlock(&sb->lock);
	if (watch)
		wrd_monitor_watch_cmd(c);
	else if (!row->result)
		wrd_cmd_persist_finish(c);
	wrd_cmd_put(c);
	return 0;
}

int wrd_cmds_adopt(struct wrd_sbx *sb, wr_err *err)
{
	return wrd_db_cmd_each(sb->rec.id, WRD_MAX_CMD_RECORDS, adopt_one, sb, err);
}
