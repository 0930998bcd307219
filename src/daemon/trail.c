/* The file-access trail: an opt-in record of a sandbox's opens, reads,
 * writes and execs of files beneath its root, for forensics ("what did the
 * agent read before it answered?"). Off by default; a sandbox asks for it
 * at create ("file_trail", validated by wrd_trail_parse). Its entries are
 * audit events of layer "file" (denied: false): merged, rate limited,
 * retained and queried like every other (GET /v1/events?layer=file).
 *
 * Mechanism: one fanotify group per trailed sandbox (FAN_CLASS_NOTIF, fd
 * events) with a MOUNT mark on the sandbox's root mount, reached as
 * /proc/<PID 1>/root. Why a mount mark in fd mode and not
 * FAN_REPORT_DFID_NAME: the root is an overlay whose file handles cannot
 * be decoded back to a path (no nfs_export), so a DFID event would name a
 * directory by a handle nobody can open; an event fd's path, as the kernel
 * prints it (/proc/self/fd/N), is the path from the sandbox's root
 * mount, which is the sandbox's own "/" (it is the root of the sandbox's
 * mount namespace, reachable from nowhere on the host). A filesystem mark
 * would be the same superblock (one overlay per sandbox) but needs
 * FID reporting for overlayfs; the mount mark also leaves out /proc, /sys
 * and /dev. Costs: docs/API-EVENTS.md (bench/bench_trail.py).
 *
 * Events: FAN_OPEN ("open"), FAN_ACCESS ("read"), FAN_MODIFY ("write"),
 * FAN_OPEN_EXEC ("exec"). The kernel merges identical queued events; the
 * reader merges runs of identical ones within a read; the audit sink merges
 * repeats within its window and rate limits each sandbox. The group's
 * queue is bounded (the kernel's 16384): an overflow is one "overflow"
 * event, never a stall of the sandbox (notification groups never block).
 *
 * Threads: one reader (epoll over every trail's fd). The list and the
 * reading are under one mutex, so a sandbox's end drains what its group
 * still holds before the group is closed (nothing written right before a
 * kill is lost). */
#include "daemon/trail.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/fanotify.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "daemon/audit.h"
#include "daemon/manager.h"

/* ---- the create field --------------------------------------------------- */

static const struct {
	const char *name;
	uint64_t mask;
} g_kinds[] = {
    {"open", FAN_OPEN},
    {"read", FAN_ACCESS},
    {"write", FAN_MODIFY},
    {"exec", FAN_OPEN_EXEC},
};
#define NKINDS (sizeof(g_kinds) / sizeof(g_kinds[0]))

int wrd_trail_parse(json_t *v, const char *tier, json_t **out, wr_err *err)
{
	*out = NULL;
	if (v == NULL || json_is_null(v) || json_is_false(v))
		return 0;
	json_t *events = NULL;
	if (json_is_object(v)) {
		const char *k;
		json_t *x;
		json_object_foreach(v, k, x)
		{
			if (strcmp(k, "events") != 0)
				return wr_err_field(
				    err, "file_trail",
				    "file_trail.%s: unknown field (only \"events\")", k);
		}
		events = json_object_get(v, "events");
		if (events && (!json_is_array(events) || json_array_size(events) == 0))
			return wr_err_field(err, "file_trail.events",
					    "file_trail.events: a non-empty array of \"open\", "
					    "\"read\", \"write\", \"exec\"");
	} else if (!json_is_true(v)) {
		return wr_err_field(err, "file_trail",
				    "file_trail: true, false or {\"events\": [...]}");
	}
	if (wr_audit_global == NULL)
		return wr_err_field(err, "file_trail",
				    "file_trail: this node's refusal audit is off (config "
				    "audit.enabled), which records the trail");
	if (tier && strcmp(tier, "container") != 0)
		return wr_err_field(err, "file_trail",
				    "file_trail: only the container tier has a file-access trail");
	json_t *list = json_array();
	for (size_t k = 0; k < NKINDS; k++) {
		bool want = events == NULL;
		size_t i;
		json_t *e;
		json_array_foreach(events, i, e)
		{
			if (!json_is_string(e)) {
				json_decref(list);
				return wr_err_field(err, "file_trail.events",
						    "file_trail.events[%zu]: must be a string", i);
			}
			want = want || strcmp(json_string_value(e), g_kinds[k].name) == 0;
		}
		if (want)
			json_array_append_new(list, json_string(g_kinds[k].name));
	}
	size_t i;
	json_t *e;
	json_array_foreach(events, i, e)
	{
		size_t k = 0;
		while (k < NKINDS && strcmp(json_string_value(e), g_kinds[k].name) != 0)
			k++;
		if (k == NKINDS) {
			json_decref(list);
			return wr_err_field(err, "file_trail.events",
					    "file_trail.events[%zu]: '%s' is not one of \"open\", "
					    "\"read\", \"write\", \"exec\"",
					    i, json_string_value(e));
		}
	}
	*out = json_pack("{s:o}", "events", list);
	return 0;
}

/* ---- trails ------------------------------------------------------------- */

struct trail {
	char id[40];
	int fd;
	uint64_t lost; /* overflows */
	struct trail *next;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct trail *g_trails;
static int g_epfd = -1;
static int g_stop[2] = {-1, -1};
static pthread_t g_thread;
static bool g_running;

/* Per-pid facts, read once per process (a flood comes from one). */
static struct {
	pid_t host, ns;
	char comm[20];
	int64_t at;
} g_procs[32];
static unsigned g_procnext;

static int64_t mono_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static unsigned proc_of(pid_t host, int64_t now)
{
	for (unsigned i = 0; i < 32; i++)
		if (g_procs[i].host == host && now - g_procs[i].at < 1000000000LL)
			return i;
	unsigned i = g_procnext++ % 32;
	g_procs[i].host = host;
	g_procs[i].ns = 0;
	g_procs[i].comm[0] = 0;
	g_procs[i].at = now;
	char path[64], buf[2048];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)host);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t r = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	if (r > 0) {
		buf[r] = 0;
		char *l = strncmp(buf, "Name:\t", 6) == 0 ? buf + 6 : NULL;
		if (l)
			snprintf(g_procs[i].comm, sizeof(g_procs[i].comm), "%.*s",
				 (int)strcspn(l, "\n"), l);
		char *ns = strstr(buf, "\nNSpid:");
		if (ns) {
			ns += 7;
			char *end = strchr(ns, '\n');
			if (end)
				*end = 0;
			char *last = strrchr(ns, '\t');
			g_procs[i].ns = (pid_t)atoi(last ? last + 1 : ns);
		}
	}
	return i;
}

static void emit(const struct trail *t, const char *action, const char *path, pid_t pid,
		 uint64_t count, int64_t now)
{
	unsigned p = proc_of(pid, now);
	json_t *what = json_pack("{s:s, s:s}", "access", action, "path", path);
	struct wr_audit_event ev = {.sandbox_id = t->id,
				    .layer = WR_AUDIT_FILE,
				    .denied = false,
				    .action = action,
				    .subject = path,
				    .what = what,
				    .pid = g_procs[p].ns,
				    .host_pid = pid,
				    .comm = g_procs[p].comm,
				    .count = count,
				    .severity = WR_AUDIT_SEV_INFO};
	wr_audit_emit(wr_audit_global, &ev);
	json_decref(what);
}

/* One run of identical events (same process, access and path). */
struct pending {
	uint64_t mask;
	pid_t pid;
	uint64_t n;
	char path[PATH_MAX];
};

static void flush_pending(const struct trail *t, struct pending *p, int64_t now)
{
	if (p->n == 0)
		return;
	for (size_t k = 0; k < NKINDS; k++)
		if (p->mask & g_kinds[k].mask)
			emit(t, g_kinds[k].name, p->path, p->pid, p->n, now);
	p->n = 0;
}

/* Read everything the group holds now (g_lock held). */
static void drain(struct trail *t)
{
	static char buf[64 * 1024] __attribute__((aligned(8)));
	static struct pending pend;
	pid_t self = getpid();
	for (;;) {
		ssize_t n = read(t->fd, buf, sizeof(buf));
		if (n <= 0)
			break;
		int64_t now = mono_ns();
		pend.n = 0;
		const struct fanotify_event_metadata *m = (const void *)buf;
		for (; FAN_EVENT_OK(m, n); m = FAN_EVENT_NEXT(m, n)) {
			if (m->vers != FANOTIFY_METADATA_VERSION)
				break;
			if (m->mask & FAN_Q_OVERFLOW) {
				flush_pending(t, &pend, now);
				t->lost++;
				json_t *what = json_pack("{s:I}", "overflows", (json_int_t)t->lost);
				struct wr_audit_event ev = {.sandbox_id = t->id,
							    .layer = WR_AUDIT_FILE,
							    .action = "overflow",
							    .what = what,
							    .severity = WR_AUDIT_SEV_LOW};
				wr_audit_emit(wr_audit_global, &ev);
				json_decref(what);
				continue;
			}
			if (m->fd < 0)
				continue;
			char lk[64], path[PATH_MAX];
			snprintf(lk, sizeof(lk), "/proc/self/fd/%d", m->fd);
			ssize_t l = readlink(lk, path, sizeof(path) - 1);
			close(m->fd);
			/* warrend's own work in the root (the files API) is not
			 * the sandbox's */
			if (l <= 0 || m->pid == self)
				continue;
			path[l] = 0;
			uint64_t mask =
			    m->mask & (FAN_OPEN | FAN_ACCESS | FAN_MODIFY | FAN_OPEN_EXEC);
			if (pend.n && pend.mask == mask && pend.pid == m->pid &&
			    strcmp(pend.path, path) == 0) {
				pend.n++;
				continue;
			}
			flush_pending(t, &pend, now);
			pend.mask = mask;
			pend.pid = m->pid;
			pend.n = 1;
			memcpy(pend.path, path, (size_t)l + 1);
		}
		flush_pending(t, &pend, now);
	}
}

static void *reader_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "wrd-trail");
	struct epoll_event evs[16];
	for (;;) {
		int n = epoll_wait(g_epfd, evs, 16, -1);
		if (n < 0 && errno != EINTR)
			break;
		bool stop = false;
		pthread_mutex_lock(&g_lock);
		for (int i = 0; i < n; i++) {
			if (evs[i].data.ptr == NULL) {
				stop = true;
				continue;
			}
			/* a trail still in the list (one stopped meanwhile is not) */
			for (struct trail *t = g_trails; t; t = t->next)
				if (t == evs[i].data.ptr)
					drain(t);
		}
		pthread_mutex_unlock(&g_lock);
		if (stop)
			break;
	}
	return NULL;
}

static int start_reader(wr_err *err)
{
	if (g_running)
		return 0;
	if ((g_epfd = epoll_create1(EPOLL_CLOEXEC)) < 0)
		return wr_err_sys(err, "file trail: epoll");
	if (pipe2(g_stop, O_CLOEXEC) < 0)
		return wr_err_sys(err, "file trail: pipe");
	struct epoll_event e = {.events = EPOLLIN, .data.ptr = NULL};
	if (epoll_ctl(g_epfd, EPOLL_CTL_ADD, g_stop[0], &e) < 0)
		return wr_err_sys(err, "file trail: epoll add");
	if (pthread_create(&g_thread, NULL, reader_main, NULL) != 0)
		return wr_err_set(err, EAGAIN, "file trail: start reader thread");
	g_running = true;
	return 0;
}

static uint64_t mask_of(const json_t *spec)
{
	uint64_t mask = 0;
	size_t i;
	json_t *e;
	json_array_foreach(json_object_get(json_object_get(spec, "file_trail"), "events"), i, e)
	{
		for (size_t k = 0; k < NKINDS; k++)
			if (json_is_string(e) && strcmp(json_string_value(e), g_kinds[k].name) == 0)
				mask |= g_kinds[k].mask;
	}
	return mask;
}

int wrd_trail_start(struct wrd_sbx *sb, wr_err *err)
{
	uint64_t mask = mask_of(sb->rec.spec);
	if (mask == 0 || sb->rec.init_pid <= 0)
		return 0; /* not asked for */
	pthread_mutex_lock(&g_lock);
	int r = 0;
	struct trail *t = g_trails;
	while (t && strcmp(t->id, sb->rec.id) != 0)
		t = t->next;
	if (t)
		goto out; /* already (adopted sandboxes are started by the poller) */
	if ((r = start_reader(err)) < 0)
		goto out;
	t = calloc(1, sizeof(*t));
	if (t == NULL) {
		r = wr_err_set(err, ENOMEM, "out of memory");
		goto out;
	}
	snprintf(t->id, sizeof(t->id), "%s", sb->rec.id);
	/* The event fds are only read for their path (readlink), never
	 * read from or executed: O_RDONLY is what fanotify opens with. */
	t->fd = fanotify_init(FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK,
			      O_RDONLY | O_LARGEFILE | O_CLOEXEC | O_NOATIME);
	char root[64];
	snprintf(root, sizeof(root), "/proc/%d/root", (int)sb->rec.init_pid);
	if (t->fd < 0) {
		r = wr_err_sys(err, "file trail of %s: fanotify_init", sb->rec.id);
	} else if (fanotify_mark(t->fd, FAN_MARK_ADD | FAN_MARK_MOUNT, mask, AT_FDCWD, root) < 0) {
		r = wr_err_sys(err, "file trail of %s: mark its root mount", sb->rec.id);
	} else {
		struct epoll_event e = {.events = EPOLLIN, .data.ptr = t};
		if (epoll_ctl(g_epfd, EPOLL_CTL_ADD, t->fd, &e) < 0)
			r = wr_err_sys(err, "file trail of %s: epoll add", sb->rec.id);
	}
	if (r < 0) {
		if (t->fd >= 0)
			close(t->fd);
		free(t);
		goto out;
	}
	t->next = g_trails;
	g_trails = t;
out:
	pthread_mutex_unlock(&g_lock);
	return r;
}

void wrd_trail_stop(const char *id)
{
	pthread_mutex_lock(&g_lock);
	for (struct trail **pp = &g_trails; *pp; pp = &(*pp)->next) {
		struct trail *t = *pp;
		if (strcmp(t->id, id) != 0)
			continue;
		drain(t); /* what it did right before the end */
		epoll_ctl(g_epfd, EPOLL_CTL_DEL, t->fd, NULL);
		close(t->fd);
		*pp = t->next;
		free(t);
		break;
	}
	pthread_mutex_unlock(&g_lock);
}

bool wrd_trail_active(const char *id)
{
	pthread_mutex_lock(&g_lock);
	struct trail *t = g_trails;
	while (t && strcmp(t->id, id) != 0)
		t = t->next;
	pthread_mutex_unlock(&g_lock);
	return t != NULL;
}

void wrd_trail_shutdown(void)
{
	if (g_running) {
		char c = 1;
		if (write(g_stop[1], &c, 1) < 0) {
			/* a pipe we hold both ends of */
		}
		pthread_join(g_thread, NULL);
		g_running = false;
	}
	pthread_mutex_lock(&g_lock);
	while (g_trails) {
		struct trail *t = g_trails;
		g_trails = t->next;
		close(t->fd);
		free(t);
	}
	pthread_mutex_unlock(&g_lock);
	for (int i = 0; i < 2; i++)
		if (g_stop[i] >= 0) {
			close(g_stop[i]);
			g_stop[i] = -1;
		}
	if (g_epfd >= 0)
		close(g_epfd);
	g_epfd = -1;
}
