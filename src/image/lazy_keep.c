/* The mount keeper: a thread of a long-lived client (warrend) that holds a
 * dup of warren-lazyfs's /dev/fuse connection, so that the mounts of lazy
 * images outlive a lazyfs that dies (process model and ordering: lazyfs.h).
 *
 * Who holds the connection: the lazyfs supervisor (and its worker) and the
 * keeper. Either side may die, not both at once: a restarted warrend fetches
 * the connection again from the running lazyfs ("fuse_fd" on the control
 * socket, SCM_RIGHTS); a lazyfs that died is replaced by one started on the
 * keeper's dup (wr_lazy_ensure passes it with --adopt-fd), which queues the
 * unanswered requests again, so readers blocked meanwhile get their bytes.
 *
 * The keeper watches the supervisor through a pidfd. When it exits:
 *  - the pid file is gone or names another process: a clean stop
 *    (wr_lazy_stop, SIGTERM), which unmounted; the keeper closes its dup so
 *    the connection ends and readers get EIO instead of waiting;
 *  - else it died, or handed its mounts over for an upgrade (SIGUSR1: the
 *    pid file says "handover"): wr_lazy_ensure starts the next one (the
 *    binary now installed) on the dup; when that fails (or the kernel
 *    cannot resend) the dup is closed: EIO, an event.
 * Every transition is reported through the callback (warrend turns them
 * into image events). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "common/util.h"
#include "image/lazy.h"
#include "image/lazy_client.h"

struct wrl_keeper {
	pthread_mutex_t lock; /* everything below */
	int fd;		      /* the connection, -1 when none is held */
	uint64_t dev;	      /* st_dev of its mount */
	int pid, pidfd;	      /* the lazyfs supervisor it came from */
	int wake;	      /* eventfd: attach happened, or stop */
	bool stop;
	pthread_t thread;
	bool running;
	wr_lazy_keep_cb cb;
	void *ctx;
};

static void report(struct wrl_keeper *k, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void report(struct wrl_keeper *k, const char *type, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (k->cb)
		k->cb(k->ctx, type, msg);
}

static void poke(struct wrl_keeper *k)
{
	uint64_t one = 1;
	if (write(k->wake, &one, sizeof(one)) < 0) {
		/* the counter is full: the thread wakes anyway */
	}
}

int wrl_keep_dup(struct wr_lazy *l)
{
	struct wrl_keeper *k = l->keeper;
	if (k == NULL)
		return -1;
	pthread_mutex_lock(&k->lock);
	int fd = k->fd >= 0 ? fcntl(k->fd, F_DUPFD_CLOEXEC, 3) : -1;
	pthread_mutex_unlock(&k->lock);
	return fd;
}

/* Caller holds k->lock. */
static void drop_locked(struct wrl_keeper *k)
{
	if (k->fd >= 0)
		close(k->fd);
	k->fd = -1;
	k->dev = 0;
}

void wrl_keep_drop(struct wr_lazy *l, const char *why)
{
	struct wrl_keeper *k = l->keeper;
	if (k == NULL)
		return;
	pthread_mutex_lock(&k->lock);
	bool had = k->fd >= 0;
	drop_locked(k);
	pthread_mutex_unlock(&k->lock);
	if (had)
		report(k, "lazyfs_lost",
		       "the mounts of lazy images cannot be taken over (%s): reads through "
		       "them fail with EIO; new starts mount afresh",
		       why);
}

/* Fetch the connection and a pidfd of the running lazyfs. Caller holds
 * k->lock. 0 when held (or lazyfs does not run), -1 when that lazyfs exited
 * meanwhile. */
static int attach_locked(struct wr_lazy *l, struct wrl_keeper *k)
{
	json_t *res = NULL;
	int fd = -1;
	wr_err err = NULL;
	int r = wrl_request(l, json_pack("{s:s}", "op", "fuse_fd"), &res, &fd, &err);
	int code = r < 0 ? wr_err_code(err) : 0;
	wr_err_free(&err);
	int pid = 0;
	uint64_t dev = 0;
	if (r == 0) {
		pid = (int)json_integer_value(json_object_get(res, "pid"));
		dev = (uint64_t)json_integer_value(json_object_get(res, "dev"));
		json_decref(res);
	} else if (code == ENOTSUP) {
		/* Not adoptable (no resend): watch it all the same, its death
		 * ends its mounts and is worth an event. */
		if (wrl_request(l, json_pack("{s:s}", "op", "ping"), &res, NULL, NULL) == 0) {
			pid = (int)json_integer_value(json_object_get(res, "pid"));
			json_decref(res);
		}
	}
	if (pid <= 0) { /* not running */
		if (fd >= 0)
			close(fd);
		return 0;
	}
	int pidfd = wr_pidfd_open(pid, 0);
	if (pidfd < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	/* The same connection again (warrend kept it across a lazyfs
	 * restart), a new one (a fresh mount) or none: hold the newest. */
	drop_locked(k);
	k->fd = fd;
	k->dev = dev;
	if (k->pidfd >= 0)
		close(k->pidfd);
	k->pidfd = pidfd;
	k->pid = pid;
	return 0;
}

void wrl_keep_attach(struct wr_lazy *l)
{
	struct wrl_keeper *k = l->keeper;
	if (k == NULL)
		return;
	pthread_mutex_lock(&k->lock);
	attach_locked(l, k);
	pthread_mutex_unlock(&k->lock);
	poke(k);
}

/* The pid in <run>/lazyfs/pid; *handover: it stopped for an upgrade
 * (SIGUSR1), leaving its mounts to the next one. */
static int pidfile_pid(struct wr_lazy *l, bool *handover)
{
	char buf[64];
	_cleanup_close_ int fd = open(l->pidfile, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	if (handover)
		*handover = strstr(buf, "handover") != NULL;
	return atoi(buf);
}

/* The supervisor k->pid exited. */
static void on_exit_of(struct wr_lazy *l, struct wrl_keeper *k)
{
	pthread_mutex_lock(&k->lock);
	int pid = k->pid;
	bool held = k->fd >= 0;
	close(k->pidfd);
	k->pidfd = -1;
	k->pid = 0;
	bool handover = false;
	int now = pidfile_pid(l, &handover);
	if (now != pid && now > 0 && kill(now, 0) == 0) {
		/* Already replaced (an acquire's wr_lazy_ensure adopted the
		 * connection first): the next loop attaches to the new one. */
		pthread_mutex_unlock(&k->lock);
		return;
	}
	if (now != pid) {
		/* A clean stop (it unmounted): end the connection too. */
		drop_locked(k);
		pthread_mutex_unlock(&k->lock);
		if (held)
			report(k, "lazyfs_stopped",
			       "warren-lazyfs %d stopped: reads through mounted lazy images fail "
			       "with EIO",
			       pid);
		return;
	}
	pthread_mutex_unlock(&k->lock);
	if (!held) {
		report(k, "lazyfs_died",
		       "warren-lazyfs %d died; the mounts it served end (EIO): it did not hand "
		       "its connection over (a kernel without FUSE resend)",
		       pid);
		return;
	}
	if (handover)
		report(k, "lazyfs_handover",
		       "warren-lazyfs %d stopped for an upgrade; starting %s on the same mounts",
		       pid, l->lazyfs_path);
	else
		report(k, "lazyfs_died",
		       "warren-lazyfs %d died; starting another on the same mounts (their reads "
		       "wait)",
		       pid);
	_cleanup_err_ wr_err err = NULL;
	if (wr_lazy_ensure(l, &err) < 0) {
		wrl_keep_drop(l, err->msg);
		return;
	}
	pthread_mutex_lock(&k->lock);
	bool kept = k->fd >= 0;
	int next = k->pid;
	pthread_mutex_unlock(&k->lock);
	if (kept)
		report(k, "lazyfs_restarted",
		       "warren-lazyfs %d took over the mounts of %d; unanswered reads were queued "
		       "again",
		       next, pid);
}

static void *keep_run(void *arg)
{
	struct wr_lazy *l = arg;
	struct wrl_keeper *k = l->keeper;
	for (;;) {
		pthread_mutex_lock(&k->lock);
		if (k->stop) {
			pthread_mutex_unlock(&k->lock);
			break;
		}
		/* Not attached: a lazyfs may have been started by another
		 * process, or by this one before the keeper ran. */
		if (k->pidfd < 0 && attach_locked(l, k) < 0) {
			pthread_mutex_unlock(&k->lock);
			continue;
		}
		struct pollfd p[2] = {{.fd = k->wake, .events = POLLIN},
				      {.fd = k->pidfd, .events = POLLIN}};
		int n = k->pidfd >= 0 ? 2 : 1;
		pthread_mutex_unlock(&k->lock);
		int r = poll(p, (nfds_t)n, n == 2 ? -1 : 1000);
		if (r < 0 && errno != EINTR)
			usleep(100000);
		if (r > 0 && (p[0].revents & POLLIN)) {
			uint64_t v;
			if (read(k->wake, &v, sizeof(v)) < 0) {
				/* nonblocking: nothing to drain */
			}
		}
		if (r > 0 && n == 2 && p[1].revents)
			on_exit_of(l, k);
	}
	return NULL;
}

static void keeper_free(struct wrl_keeper *k)
{
	drop_locked(k);
	if (k->pidfd >= 0)
		close(k->pidfd);
	close(k->wake);
	pthread_mutex_destroy(&k->lock);
	free(k);
}

void wr_lazy_keep_stop(struct wr_lazy *l)
{
	struct wrl_keeper *k = l->keeper;
	if (k == NULL)
		return;
	pthread_mutex_lock(&k->lock);
	k->stop = true;
	pthread_mutex_unlock(&k->lock);
	poke(k);
	if (k->running)
		pthread_join(k->thread, NULL);
	l->keeper = NULL;
	/* lazyfs keeps serving: it holds the connection too. */
	keeper_free(k);
}

void wrl_keep_free(struct wr_lazy *l)
{
	wr_lazy_keep_stop(l);
}

int wr_lazy_keep_held(struct wr_lazy *l)
{
	struct wrl_keeper *k = l->keeper;
	if (k == NULL)
		return 0;
	pthread_mutex_lock(&k->lock);
	int pid = k->fd >= 0 ? k->pid : 0;
	pthread_mutex_unlock(&k->lock);
	return pid;
}

int wr_lazy_keep_start(struct wr_lazy *l, wr_lazy_keep_cb cb, void *ctx, wr_err *err)
{
	if (l->keeper)
		return 0;
	struct wrl_keeper *k = calloc(1, sizeof(*k));
	if (k == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	k->fd = k->pidfd = -1;
	k->cb = cb;
	k->ctx = ctx;
	pthread_mutex_init(&k->lock, NULL);
	k->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (k->wake < 0) {
		free(k);
		return wr_err_sys(err, "lazyfs mount keeper");
	}
	/* Attach before the thread runs: a warrend restarting holds the
	 * connection again by the time it serves. */
	l->keeper = k;
	pthread_mutex_lock(&k->lock);
	attach_locked(l, k);
	pthread_mutex_unlock(&k->lock);
	int e = pthread_create(&k->thread, NULL, keep_run, l);
	if (e != 0) {
		l->keeper = NULL;
		keeper_free(k);
		errno = e;
		return wr_err_sys(err, "lazyfs mount keeper");
	}
	k->running = true;
	return 0;
}
