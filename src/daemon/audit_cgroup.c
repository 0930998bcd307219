/* cgroup-limit events: OOM kills and pids.max hits, from the counters the
 * kernel keeps per cgroup, polled for every live sandbox.
 *
 *   memory  v2 / unified: memory.events "oom_kill"; v1: memory.oom_control
 *           "oom_kill" (both count the cgroup's whole subtree, so the
 *           commands' leaves are included)
 *   pids    pids.events "max": forks refused at pids.max (v1 and v2)
 *
 * The sandbox's cgroups are found from its PID 1 (/proc/<pid>/cgroup, read
 * once per sandbox; a pure-v2 PID 1 sits in the leaf "init"). The first
 * reading is the baseline (a restarted daemon does not report old kills
 * again); each later increase is one event whose count is the increase.
 * Polling (default 1 s) rather than inotify on the events files: one
 * thread, bounded work per sandbox, and no watch descriptors to leak. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "daemon/audit_internal.h"
#include "daemon/jsonutil.h"
#include "daemon/manager.h"
#include "daemon/trail.h"
#include "tiers/container.h"

struct cg_watch {
	char id[17];
	char *mem_file;	 /* memory.events (v2: counts the commands' leaves too) */
	char *pids_file; /* pids.events */
	long long oom, pmax;
	bool seen;
	bool mem_v1;
	bool live;  /* in this round's snapshot */
	bool ended; /* its last reading was taken (wrd_audit_sandbox_end) */
	bool trail_checked;
	struct cg_watch *next;
};

static struct cg_watch *g_watches;
static pthread_t g_thread;
static bool g_running;
static int g_stop[2] = {-1, -1};
static unsigned g_interval;
static int64_t g_start_ms;

static long long counter(const char *file, const char *key)
{
	if (file == NULL)
		return -1;
	_cleanup_close_ int fd = open(file, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	char buf[1024];
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	size_t kl = strlen(key);
	for (char *l = buf; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (strncmp(l, key, kl) == 0 && l[kl] == ' ')
			return atoll(l + kl + 1);
	return -1;
}

static char *join(const char *a, const char *b, const char *c)
{
	char *s = NULL;
	return asprintf(&s, "%s%s/%s", a, b, c) < 0 ? NULL : s;
}

static bool exists(const char *p)
{
	struct stat st;
	return p && stat(p, &st) == 0;
}

/* Paths of the counters from PID 1's /proc/<pid>/cgroup. */
static void locate(struct cg_watch *w, pid_t pid)
{
	char path[64], buf[4096];
	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	if (n <= 0)
		return;
	buf[n] = 0;
	bool unified = exists("/sys/fs/cgroup/unified");
	char *sv = NULL; /* strtok_r: other threads tokenise too */
	for (char *l = strtok_r(buf, "\n", &sv); l; l = strtok_r(NULL, "\n", &sv)) {
		char *c1 = strchr(l, ':');
		char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (c2 == NULL)
			continue;
		*c2 = 0;
		const char *ctrl = c1 + 1;
		char *cg = c2 + 1;
		size_t cl = strlen(cg);
		if (cl >= 5 && strcmp(cg + cl - 5, "/init") == 0)
			cg[cl - 5] = 0;
		if (*ctrl == 0) { /* the unified hierarchy */
			const char *root = unified ? "/sys/fs/cgroup/unified" : "/sys/fs/cgroup";
			char *m = join(root, cg, "memory.events");
			char *p = join(root, cg, "pids.events");
			if (exists(m) && w->mem_file == NULL)
				w->mem_file = m;
			else
				free(m);
			if (exists(p) && w->pids_file == NULL)
				w->pids_file = p;
			else
				free(p);
		} else if (strcmp(ctrl, "memory") == 0) {
			/* v1: oom_control's oom_kill counts this cgroup only, not
			 * the commands' leaves (memcg_memory_event stops at the
			 * first level on v1): commands report their OOM kills
			 * instead (wrd_audit_command). */
			w->mem_v1 = true;
		} else if (strcmp(ctrl, "pids") == 0) {
			free(w->pids_file);
			w->pids_file = join("/sys/fs/cgroup/pids", cg, "pids.events");
		}
	}
}

static void emit(const char *id, const char *action, const char *limit, long long delta,
		 long long total)
{
	json_t *what = json_pack("{s:s, s:I}", "limit", limit, "total", (json_int_t)total);
	struct wr_audit_event ev = {.sandbox_id = id,
				    .layer = WR_AUDIT_CGROUP_LIMIT,
				    .denied = true,
				    .action = action,
				    .what = what,
				    .count = (uint64_t)delta,
				    .severity = WR_AUDIT_SEV_LOW};
	wr_audit_emit(wr_audit_global, &ev);
	json_decref(what);
}

/* The watch list: the poller changes it, commands read it (is this
 * sandbox's memory counted by the poller?). A poll round holds the lock:
 * a few small reads per sandbox. */
static pthread_mutex_t g_watch_lock = PTHREAD_MUTEX_INITIALIZER;

static bool memory_polled(const char *id)
{
	pthread_mutex_lock(&g_watch_lock);
	bool polled = false;
	for (struct cg_watch *w = g_watches; w && !polled; w = w->next)
		polled = strcmp(w->id, id) == 0 && w->mem_file != NULL;
	pthread_mutex_unlock(&g_watch_lock);
	return polled;
}

void wrd_audit_command(const char *sandbox_id, const char *tenant, const char *cmd_id,
		       const struct wr_exec_result *res)
{
	if (wr_audit_global == NULL)
		return;
	static const char *const streams[2] = {"stdout", "stderr"};
	bool cut[2] = {res->out_truncated, res->err_truncated};
	for (int i = 0; i < 2; i++) {
		if (!cut[i])
			continue;
		json_t *what = json_pack("{s:s, s:s, s:s}", "limit", "output_cap", "stream",
					 streams[i], "command", cmd_id);
		struct wr_audit_event ev = {.sandbox_id = sandbox_id,
					    .tenant = tenant,
					    .layer = WR_AUDIT_CGROUP_LIMIT,
					    .denied = true,
					    .action = "output_cap",
					    .subject = streams[i],
					    .what = what,
					    .severity = WR_AUDIT_SEV_INFO};
		wr_audit_emit(wr_audit_global, &ev);
		json_decref(what);
	}
	if (res->reason == WR_EXIT_OOM && !memory_polled(sandbox_id)) {
		json_t *what = json_pack("{s:s, s:s}", "limit", "memory", "command", cmd_id);
		struct wr_audit_event ev = {.sandbox_id = sandbox_id,
					    .tenant = tenant,
					    .layer = WR_AUDIT_CGROUP_LIMIT,
					    .denied = true,
					    .action = "oom_kill",
					    .what = what,
					    .severity = WR_AUDIT_SEV_LOW};
		wr_audit_emit(wr_audit_global, &ev);
		json_decref(what);
	}
}

static void poll_once(void)
{
	size_t n = 0;
	struct wrd_sbx **all = wrd_table_snapshot(&n);
	pthread_mutex_lock(&g_watch_lock);
	for (struct cg_watch *w = g_watches; w; w = w->next)
		w->live = false;
	for (size_t i = 0; all && i < n; i++) {
		struct wrd_sbx *sb = all[i];
		struct cg_watch *w = g_watches;
		while (w && strcmp(w->id, sb->rec.id) != 0)
			w = w->next;
		/* only containers' handles are struct wr_sandbox; VMs' are not */
		if (w == NULL && sb->tsb && sb->ops && strcmp(sb->ops->name, "container") == 0 &&
		    (w = calloc(1, sizeof(*w))) != NULL) {
			snprintf(w->id, sizeof(w->id), "%s", sb->rec.id);
			/* Created since we started: its counters began at 0, and
			 * whatever they show is new. Adopted after a restart:
			 * what they show now was reported by our predecessor. */
			w->seen = sb->rec.created_ms >= g_start_ms;
			/* the tier's main process (a microVM's is QEMU, in
			 * its own cgroup), not a container's init */
			locate(w, sb->ops->main_pid ? sb->ops->main_pid(sb->tsb)
						    : wr_sandbox_init_pid(sb->tsb));
			w->next = g_watches;
			g_watches = w;
		}
		if (w)
			w->live = true;
		if (w && !w->ended && w->trail_checked == false) {
			/* a trail the sandbox asked for at create, also after a
			 * restart (adoption) */
			_cleanup_err_ wr_err terr = NULL;
			if (wrd_trail_start(sb, &terr) < 0)
				wr_warn("sandbox %s: %s", sb->rec.id, terr->msg);
			w->trail_checked = true;
		}
		if (w && !w->ended) {
			long long oom = counter(w->mem_file, "oom_kill");
			long long pmax = counter(w->pids_file, "max");
			if (w->seen && oom > w->oom)
				emit(w->id, "oom_kill", "memory", oom - w->oom, oom);
			if (w->seen && pmax > w->pmax)
				emit(w->id, "pids.max", "pids", pmax - w->pmax, pmax);
			if (oom >= 0)
				w->oom = oom;
			if (pmax >= 0)
				w->pmax = pmax;
			w->seen = true;
		}
		wrd_mgr_put(sb);
	}
	free(all);
	for (struct cg_watch **pp = &g_watches; *pp;) {
		struct cg_watch *w = *pp;
		if (!w->live) {
			*pp = w->next;
			free(w->mem_file);
			free(w->pids_file);
			free(w);
		} else {
			pp = &w->next;
		}
	}
	pthread_mutex_unlock(&g_watch_lock);
}

/* Ordering: called after the tier's kill (no process left to fork or
 * allocate) and before its destroy (the counters' files still exist). The
 * watch stays, marked ended, until the sandbox leaves the table, so that a
 * poll in between neither reads it again nor makes a new watch whose
 * first reading would report the totals a second time. */
void wrd_audit_sandbox_end(struct wrd_sbx *sb)
{
	if (sb == NULL)
		return;
	if (wr_audit_global == NULL || sb->tsb == NULL || sb->ops == NULL ||
	    strcmp(sb->ops->name, "container") != 0) {
		wrd_trail_stop(sb->rec.id);
		return;
	}
	pthread_mutex_lock(&g_watch_lock);
	struct cg_watch *w = g_watches;
	while (w && strcmp(w->id, sb->rec.id) != 0)
		w = w->next;
	if (w == NULL && (w = calloc(1, sizeof(*w))) != NULL) {
		/* Younger than one poll: never read. Its counters began at 0
		 * unless it was adopted (then our predecessor read them). The
		 * files come from the tier's usage (PID 1 is gone): pids only,
		 * since without a watch its commands reported their own OOM
		 * kills (wrd_audit_command). */
		snprintf(w->id, sizeof(w->id), "%s", sb->rec.id);
		w->live = true;
		w->next = g_watches;
		g_watches = w;
		struct wr_cgroup_stats st;
		_cleanup_err_ wr_err err = NULL;
		if (sb->rec.created_ms >= g_start_ms && sb->ops->usage &&
		    sb->ops->usage(sb->tsb, &st, &err) == 0 && st.pids_max_hits > 0)
			emit(w->id, "pids.max", "pids", (long long)st.pids_max_hits,
			     (long long)st.pids_max_hits);
	} else if (w && !w->ended && w->seen) {
		long long oom = counter(w->mem_file, "oom_kill");
		long long pmax = counter(w->pids_file, "max");
		if (oom > w->oom)
			emit(w->id, "oom_kill", "memory", oom - w->oom, oom);
		if (pmax > w->pmax)
			emit(w->id, "pids.max", "pids", pmax - w->pmax, pmax);
	}
	if (w)
		w->ended = true;
	/* Under the watch lock, after ended is set: a poll cannot start the
	 * trail again. What it did up to the kill is drained, then no more. */
	wrd_trail_stop(sb->rec.id);
	pthread_mutex_unlock(&g_watch_lock);
}

void wrd_audit_sandbox_start(struct wrd_sbx *sb)
{
	_cleanup_err_ wr_err err = NULL;
	if (sb && wr_audit_global && wrd_trail_start(sb, &err) < 0)
		wr_warn("sandbox %s: %s", sb->rec.id, err->msg);
}

static void *poller_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "wrd-auditcg");
	for (;;) {
		struct pollfd p = {.fd = g_stop[0], .events = POLLIN};
		if (poll(&p, 1, (int)g_interval) != 0)
			break;
		poll_once();
	}
	return NULL;
}

int wra_cgroup_start(unsigned interval_ms, wr_err *err)
{
	g_interval = interval_ms;
	g_start_ms = wrd_now_ms();
	if (pipe2(g_stop, O_CLOEXEC) < 0)
		return wr_err_sys(err, "cgroup limits: pipe");
	if (pthread_create(&g_thread, NULL, poller_main, NULL) != 0)
		return wr_err_set(err, EAGAIN, "cgroup limits: start poller thread");
	g_running = true;
	return 0;
}

void wra_cgroup_stop(void)
{
	if (g_running) {
		char c = 1;
		if (write(g_stop[1], &c, 1) < 0) {
			/* cannot happen with a pipe we hold both ends of */
		}
		pthread_join(g_thread, NULL);
		g_running = false;
	}
	for (int i = 0; i < 2; i++)
		if (g_stop[i] >= 0) {
			close(g_stop[i]);
			g_stop[i] = -1;
		}
	while (g_watches) {
		struct cg_watch *w = g_watches;
		g_watches = w->next;
		free(w->mem_file);
		free(w->pids_file);
		free(w);
	}
}
