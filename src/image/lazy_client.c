/* The lazy client: starts and finds warren-lazyfs, talks to its control
 * socket (protocol in lazyfs_ctl.c), and works on the chunk cache directly
 * while lazyfs does not run. See lazy.h. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "image/lazy.h"
#include "image/lazy_client.h"
#include "image/lazy_internal.h"

#ifndef WARREN_LIBEXECDIR
#define WARREN_LIBEXECDIR "/usr/local/libexec/warren"
#endif

extern char **environ;

int wr_lazy_open(const struct wr_lazy_opts *o, struct wr_lazy **out, wr_err *err)
{
	if (o == NULL || o->store_dir == NULL || o->store_dir[0] != '/')
		return wr_err_field(err, "store_dir", "store_dir: an absolute path is required");
	if (o->run_dir == NULL || o->run_dir[0] != '/')
		return wr_err_field(err, "run_dir", "run_dir: an absolute path is required");
	uint32_t cs = o->chunk_size ? o->chunk_size : WR_LAZY_CHUNK_DEFAULT;
	if (cs < (64u << 10) || cs > (64u << 20) || (cs & (cs - 1)) != 0 ||
	    cs % WRL_INDEX_GRAIN != 0)
		return wr_err_field(err, "chunk_size",
				    "chunk_size: must be a power of two in 64KiB..64MiB (whole "
				    "64 KiB pieces of the chunk index)");
	struct wr_lazy *l = calloc(1, sizeof(*l));
	if (l == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	l->o = *o;
	l->o.chunk_size = cs;
	const char *bin = o->lazyfs_path ? o->lazyfs_path : getenv("WARREN_LAZYFS");
	char self[4096];
	ssize_t n;
	if (bin == NULL && access(WARREN_LIBEXECDIR "/warren-lazyfs", X_OK) < 0 &&
	    (n = readlink("/proc/self/exe", self, sizeof(self) - 32)) > 0) {
		/* A build tree: warrend and warren-lazyfs side by side. */
		self[n] = '\0';
		char *slash = strrchr(self, '/');
		if (slash) {
			strcpy(slash + 1, "warren-lazyfs");
			if (access(self, X_OK) == 0)
				bin = self;
		}
	}
	bool ok =
	    (l->store_dir = strdup(o->store_dir)) && (l->run_dir = strdup(o->run_dir)) &&
	    asprintf(&l->lazyfs_path, "%s", bin ? bin : WARREN_LIBEXECDIR "/warren-lazyfs") > 0 &&
	    asprintf(&l->dir, "%s/lazyfs", o->run_dir) > 0 &&
	    asprintf(&l->sock, "%s/lazyfs/ctl.sock", o->run_dir) > 0 &&
	    asprintf(&l->pidfile, "%s/lazyfs/pid", o->run_dir) > 0 &&
	    (!o->auth_file || (l->auth_file = strdup(o->auth_file))) &&
	    (!o->ca_file || (l->ca_file = strdup(o->ca_file))) &&
	    (!o->log_path || (l->log_path = strdup(o->log_path)));
	pthread_mutex_init(&l->lock, NULL);
	if (!ok) {
		wr_lazy_close(&l);
		return wr_err_set(err, ENOMEM, "out of memory");
	}
	*out = l;
	return 0;
}

void wr_lazy_close(struct wr_lazy **lp)
{
	struct wr_lazy *l = *lp;
	if (l == NULL)
		return;
	wrl_keep_free(l);
	free(l->store_dir);
	free(l->run_dir);
	free(l->lazyfs_path);
	free(l->auth_file);
	free(l->ca_file);
	free(l->log_path);
	free(l->dir);
	free(l->sock);
	free(l->pidfile);
	pthread_mutex_destroy(&l->lock);
	free(l);
	*lp = NULL;
}

/* ---- the control socket ------------------------------------------------ */

static int ctl_connect(struct wr_lazy *l, wr_err *err)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	if (strlen(l->sock) >= sizeof(a.sun_path))
		return wr_err_set(err, ENAMETOOLONG, "lazyfs socket %s: path too long", l->sock);
	strcpy(a.sun_path, l->sock);
	_cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return wr_err_sys(err, "lazyfs socket");
	/* Answers are quick (a trim of a large cache is the slowest); a
	 * worker restarting answers within its start. */
	struct timeval tv = {.tv_sec = 120};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int e = errno == ENOENT ? ECONNREFUSED : errno;
		return wr_err_set(err, e, "lazyfs is not running (%s: %s)", l->sock,
				  strerror(errno));
	}
	return steal_fd(&fd);
}

/* One read of the answer; a passed fd lands in *fd (else closed). */
static ssize_t recv_some(int sock, char *buf, size_t len, int *fd)
{
	struct iovec iov = {.iov_base = buf, .iov_len = len};
	union {
		char b[CMSG_SPACE(sizeof(int) * 4)];
		struct cmsghdr align;
	} u;
	struct msghdr mh = {
	    .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof(u.b)};
	ssize_t n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	if (n < 0)
		return n;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int got;
			memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (fd && *fd < 0)
				*fd = got;
			else
				close(got);
		}
	}
	return n;
}

int wrl_request(struct wr_lazy *l, json_t *req, json_t **res, int *pfd, wr_err *err)
{
	_cleanup_free_ char *s = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	if (pfd)
		*pfd = -1;
	if (s == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	_cleanup_close_ int fd = ctl_connect(l, err);
	if (fd < 0)
		return fd;
	if (wr_write_all(fd, s, strlen(s)) < 0 || wr_write_all(fd, "\n", 1) < 0)
		return wr_err_sys(err, "lazyfs: send");
	size_t cap = 1 << 16, len = 0;
	_cleanup_free_ char *buf = malloc(cap);
	_cleanup_close_ int got = -1;
	if (buf == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	for (;;) {
		if (len + 1 >= cap) {
			char *nb = cap < (64u << 20) ? realloc(buf, cap * 2) : NULL;
			if (nb == NULL)
				return wr_err_set(err, EFBIG, "lazyfs: answer too large");
			buf = nb;
			cap *= 2;
		}
		ssize_t n = recv_some(fd, buf + len, cap - len - 1, &got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return wr_err_sys(err, "lazyfs: receive");
		if (n == 0)
			return wr_err_set(err, ECONNRESET, "lazyfs: closed without an answer");
		len += (size_t)n;
		if (buf[len - 1] == '\n')
			break;
	}
	buf[len] = '\0';
	json_error_t je;
	json_t *j = json_loads(buf, 0, &je);
	if (j == NULL)
		return wr_err_set(err, EBADMSG, "lazyfs: bad answer: %s", je.text);
	json_t *e = json_object_get(j, "error");
	if (e) {
		int code = (int)json_integer_value(json_object_get(e, "errno"));
		const char *m = json_string_value(json_object_get(e, "message"));
		int r = wr_err_set(err, code > 0 ? code : EIO, "lazyfs: %s", m ? m : "error");
		json_decref(j);
		return r;
	}
	*res = j;
	if (pfd)
		*pfd = steal_fd(&got);
	return 0;
}

static int request(struct wr_lazy *l, json_t *req, json_t **res, wr_err *err)
{
	return wrl_request(l, req, res, NULL, err);
}

/* ---- starting and stopping ---------------------------------------------- */

static int ping(struct wr_lazy *l, wr_err *err)
{
	json_t *res = NULL;
	int r = request(l, json_pack("{s:s}", "op", "ping"), &res, err);
	int pid = res ? (int)json_integer_value(json_object_get(res, "pid")) : 0;
	json_decref(res);
	return r < 0 ? r : pid;
}

/* 0: it serves; 3: another lazyfs (or an offline trim, or the workers of
 * a lazyfs that just died) holds the chunk lock; 4: adopt_fd cannot be
 * taken over (the kernel cannot resend, lazyfs.h). */
static int spawn_lazyfs(struct wr_lazy *l, int adopt_fd, wr_err *err)
{
	char cs[24], pt[24], mt[24], ct[24], rt[24], rr[24];
	snprintf(cs, sizeof(cs), "%" PRIu32, l->o.chunk_size);
	const char *argv[40];
	int n = 0;
	argv[n++] = l->lazyfs_path;
	argv[n++] = "--daemon";
	argv[n++] = "--store";
	argv[n++] = l->store_dir;
	argv[n++] = "--run";
	argv[n++] = l->run_dir;
	argv[n++] = "--chunk-size";
	argv[n++] = cs;
	if (l->o.fetch_all)
		argv[n++] = "--fetch-all";
	if (l->o.prefetch_threads) {
		snprintf(pt, sizeof(pt), "%u", l->o.prefetch_threads);
		argv[n++] = "--prefetch-threads";
		argv[n++] = pt;
	}
	if (l->o.max_threads) {
		snprintf(mt, sizeof(mt), "%u", l->o.max_threads);
		argv[n++] = "--max-threads";
		argv[n++] = mt;
	}
	if (l->o.insecure)
		argv[n++] = "--insecure";
	if (l->auth_file) {
		argv[n++] = "--auth-file";
		argv[n++] = l->auth_file;
	}
	if (l->ca_file) {
		argv[n++] = "--ca-file";
		argv[n++] = l->ca_file;
	}
	if (l->o.connect_timeout_ms) {
		snprintf(ct, sizeof(ct), "%u", l->o.connect_timeout_ms);
		argv[n++] = "--connect-timeout-ms";
		argv[n++] = ct;
	}
	if (l->o.range_timeout_ms) {
		snprintf(rt, sizeof(rt), "%u", l->o.range_timeout_ms);
		argv[n++] = "--range-timeout-ms";
		argv[n++] = rt;
	}
	if (l->o.retries) {
		snprintf(rr, sizeof(rr), "%u", l->o.retries);
		argv[n++] = "--retries";
		argv[n++] = rr;
	}
	if (l->log_path) {
		argv[n++] = "--log";
		argv[n++] = l->log_path;
	}
	/* The connection goes to fd 3 of the child; from a copy above 3, so
	 * that the dup2 always clears close-on-exec. */
	_cleanup_close_ int afd = adopt_fd >= 0 ? fcntl(adopt_fd, F_DUPFD_CLOEXEC, 10) : -1;
	if (adopt_fd >= 0 && afd < 0)
		return wr_err_sys(err, "lazyfs: dup the FUSE connection");
	if (afd >= 0) {
		argv[n++] = "--adopt-fd";
		argv[n++] = "3";
	}
	argv[n] = NULL;
	_cleanup_close_ int errfd = open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	if (errfd >= 0)
		posix_spawn_file_actions_adddup2(&fa, errfd, 2);
	if (afd >= 0)
		posix_spawn_file_actions_adddup2(&fa, afd, 3);
	/* Default dispositions and an empty mask, whatever the caller (a
	 * daemon reading signals through signalfd) has. */
	posix_spawnattr_t sa;
	posix_spawnattr_init(&sa);
	sigset_t none, all;
	sigemptyset(&none);
	sigfillset(&all);
	posix_spawnattr_setsigmask(&sa, &none);
	posix_spawnattr_setsigdefault(&sa, &all);
	posix_spawnattr_setflags(&sa, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	pid_t pid;
	int r = posix_spawn(&pid, l->lazyfs_path, &fa, &sa, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&sa);
	if (r != 0) {
		errno = r;
		return wr_err_sys(err, "start %s", l->lazyfs_path);
	}
	/* --daemon returns once it serves: the supervisor lives on in its own
	 * session, not as our child. */
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 3))
		return WEXITSTATUS(st);
	if (afd >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 4)
		return 4;
	char msg[512] = "";
	if (errfd >= 0) {
		ssize_t k = pread(errfd, msg, sizeof(msg) - 1, 0);
		msg[k > 0 ? k : 0] = '\0';
		msg[strcspn(msg, "\n")] = '\0';
	}
	return wr_err_set(err, EIO, "start %s: %s", l->lazyfs_path,
			  msg[0] ? msg : "failed without a message");
}

int wr_lazy_ensure(struct wr_lazy *l, wr_err *err)
{
	if (ping(l, NULL) > 0)
		return 0;
	pthread_mutex_lock(&l->lock);
	int r = wr_mkdir_p(l->dir, 0700, err);
	_cleanup_close_ int lk = -1;
	if (r == 0) {
		_cleanup_free_ char *p = NULL;
		if (asprintf(&p, "%s/start.lock", l->dir) < 0)
			r = wr_err_set(err, ENOMEM, "out of memory");
		else if ((lk = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0 ||
			 flock(lk, LOCK_EX) < 0)
			r = wr_err_sys(err, "lazyfs start lock");
	}
	/* Another process may have started it while we waited for the lock;
	 * a status of 3 means a lazyfs (or an offline trim) held the chunk
	 * lock: wait for it to answer. With the keeper's connection, the new
	 * lazyfs takes over the mounts of the one that died (its workers
	 * still hold the chunk lock for a moment: ask again soon). */
	for (int i = 0; r == 0 && i < 100; i++) {
		if (ping(l, NULL) > 0)
			break;
		_cleanup_close_ int afd = wrl_keep_dup(l);
		if (i == 0 || i % (afd >= 0 ? 2 : 20) == 0) {
			wr_err se = NULL;
			int s = spawn_lazyfs(l, afd, &se);
			if (afd >= 0 && (s < 0 || s == 4)) {
				/* Not adoptable: end that connection (its readers
				 * get EIO) before a fresh mount replaces it. */
				wrl_keep_drop(l, s == 4 ? "the kernel cannot resend pending "
							  "FUSE requests"
							: se->msg);
				wr_err_free(&se);
				i = -1;
				continue;
			}
			if (s < 0) {
				r = wr_err_set(err, wr_err_code(se), "%s", se->msg);
				wr_err_free(&se);
				break;
			}
			if (s == 0)
				continue;
		}
		usleep(50000);
	}
	if (r == 0 && ping(l, err) <= 0)
		r = wr_err_wrap(err, "lazyfs did not come up");
	pthread_mutex_unlock(&l->lock);
	if (r == 0)
		wrl_keep_attach(l);
	return r < 0 ? r : 0;
}

int wr_lazy_pid(struct wr_lazy *l)
{
	int pid = ping(l, NULL);
	return pid > 0 ? pid : 0;
}

/* Running (an exited process its parent has not reaped yet is not). */
static bool alive(int pid)
{
	char p[64], buf[256];
	snprintf(p, sizeof(p), "/proc/%d/stat", pid);
	_cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	if (n <= 0)
		return false;
	buf[n] = '\0';
	const char *e = strrchr(buf, ')');
	return e && e[1] == ' ' && e[2] != 'Z' && e[2] != 'X';
}

int wr_lazy_stop(struct wr_lazy *l, unsigned timeout_ms, wr_err *err)
{
	int pid = wr_lazy_pid(l);
	if (pid <= 0)
		return 0;
	if (kill(pid, SIGTERM) < 0)
		return errno == ESRCH ? 0 : wr_err_sys(err, "stop lazyfs %d", pid);
	uint64_t until = wr_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	while (alive(pid) && wr_now_ns() < until)
		usleep(20000);
	if (alive(pid)) {
		kill(pid, SIGKILL);
		return wr_err_set(err, ETIMEDOUT, "lazyfs %d did not stop in %u ms; killed", pid,
				  timeout_ms);
	}
	return 0;
}

/* ---- requests ------------------------------------------------------------ */

int wr_lazy_register(struct wr_lazy *l, const char *digest, uint64_t size, const char *reference,
		     char **path, wr_err *err)
{
	if (wr_lazy_ensure(l, err) < 0)
		return -1;
	json_t *res = NULL;
	int r =
	    request(l,
		    json_pack("{s:s, s:s, s:I, s:s}", "op", "register", "digest", digest, "size",
			      (json_int_t)size, "reference", reference ? reference : ""),
		    &res, err);
	if (r < 0)
		return wr_err_wrap(err, "lazy image %s", digest);
	if (!json_is_true(json_object_get(res, "verified"))) {
		/* A lazyfs started by a warren without chunk indexes outlived
		 * the upgrade: it would serve ranges unchecked. */
		json_decref(res);
		return wr_err_set(
		    err, EPROTO,
		    "lazy image %s: the running warren-lazyfs (pid %d) does not verify "
		    "chunks; stop it (wr_lazy_stop; its mounts end) so that the next "
		    "start runs this version",
		    digest, wr_lazy_pid(l));
	}
	const char *p = json_string_value(json_object_get(res, "path"));
	*path = p ? strdup(p) : NULL;
	json_decref(res);
	return *path ? 0 : wr_err_set(err, ENOMEM, "out of memory");
}

static uint64_t u64(json_t *o, const char *k)
{
	json_int_t v = json_integer_value(json_object_get(o, k));
	return v > 0 ? (uint64_t)v : 0;
}

int wr_lazy_stats(struct wr_lazy *l, const char *digest, struct wr_lazy_stats *out, wr_err *err)
{
	memset(out, 0, sizeof(*out));
	json_t *req = digest ? json_pack("{s:s, s:s}", "op", "stats", "digest", digest)
			     : json_pack("{s:s}", "op", "stats");
	json_t *res = NULL;
	if (request(l, req, &res, err) < 0)
		return -1;
	out->bytes_fetched = u64(res, "bytes_fetched");
	out->fetches = u64(res, "fetches");
	out->fetch_errors = u64(res, "fetch_errors");
	out->verify_errors = u64(res, "verify_errors");
	out->dedup_waits = u64(res, "dedup_waits");
	out->prefetched = u64(res, "prefetched");
	out->reads = u64(res, "reads");
	out->read_bytes = u64(res, "read_bytes");
	out->cache_bytes = u64(res, "cache_bytes");
	out->worker_starts = u64(res, "worker_starts");
	out->blobs = (unsigned)json_array_size(json_object_get(res, "blobs"));
	json_decref(res);
	return 0;
}

int64_t wr_lazy_events(struct wr_lazy *l, uint64_t since, wr_lazy_event_cb cb, void *ctx,
		       wr_err *err)
{
	json_t *res = NULL;
	if (request(l, json_pack("{s:s, s:I}", "op", "events", "since", (json_int_t)since), &res,
		    err) < 0)
		return -1;
	size_t i;
	json_t *e;
	json_array_foreach(json_object_get(res, "events"), i, e)
	{
		const char *t = json_string_value(json_object_get(e, "type"));
		const char *d = json_string_value(json_object_get(e, "digest"));
		const char *m = json_string_value(json_object_get(e, "message"));
		if (cb)
			cb(ctx, u64(e, "seq"), (int64_t)u64(e, "time"), t ? t : "", d ? d : "",
			   m ? m : "");
	}
	int64_t last = (int64_t)u64(res, "last");
	json_decref(res);
	return last;
}

/* ---- the cache, with or without lazyfs ------------------------------------ */

/* Run fn on the cache files directly when lazyfs does not run: holding
 * the chunk lock keeps a lazyfs from starting meanwhile. Returns 1 when
 * lazyfs runs (ask it instead). */
static int offline(struct wr_lazy *l, int (*fn)(struct wr_lazy *, int, void *, wr_err *), void *arg,
		   wr_err *err)
{
	_cleanup_close_ int cfd = wrl_chunks_open(l->store_dir, err);
	if (cfd < 0)
		return cfd;
	wr_err le = NULL;
	_cleanup_close_ int lk = wrl_chunks_lock(cfd, true, &le);
	if (lk < 0) {
		int code = wr_err_code(le);
		wr_err_free(&le);
		if (code == EWOULDBLOCK)
			return 1;
		return wr_err_set(err, code, "chunk cache lock");
	}
	return fn(l, cfd, arg, err);
}

static void free_all(struct wrl_blob **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		wrl_blob_free(v[i]);
	free(v);
}

static int off_bytes(struct wr_lazy *l, int cfd, void *arg, wr_err *err)
{
	struct wrl_blob **v;
	size_t n;
	if (wrl_load_all(cfd, l->store_dir, &v, &n, err) < 0)
		return -1;
	uint64_t sum = 0;
	for (size_t i = 0; i < n; i++)
		sum += wrl_blob_cache_bytes(v[i]);
	free_all(v, n);
	*(uint64_t *)arg = sum;
	return 0;
}

struct trim_arg {
	uint64_t want, freed;
};

static int off_trim(struct wr_lazy *l, int cfd, void *arg, wr_err *err)
{
	struct trim_arg *t = arg;
	struct wrl_blob **v;
	size_t n;
	if (wrl_load_all(cfd, l->store_dir, &v, &n, err) < 0)
		return -1;
	/* lazyfs does not run: nothing is mounted through it. */
	for (size_t i = 0; i < n; i++)
		v[i]->opens = 0;
	int r = wrl_trim(v, n, t->want, &t->freed);
	free_all(v, n);
	if (r < 0) {
		errno = -r;
		return wr_err_sys(err, "trim chunk cache");
	}
	return 0;
}

static int off_forget(struct wr_lazy *l, int cfd, void *arg, wr_err *err)
{
	(void)l;
	return wrl_blob_remove(cfd, arg, err);
}

uint64_t wr_lazy_cache_bytes(struct wr_lazy *l)
{
	for (int i = 0; i < 3; i++) {
		json_t *res = NULL;
		if (request(l, json_pack("{s:s}", "op", "cache_bytes"), &res, NULL) == 0) {
			uint64_t b = u64(res, "bytes");
			json_decref(res);
			return b;
		}
		uint64_t sum = 0;
		int r = offline(l, off_bytes, &sum, NULL);
		if (r == 0)
			return sum;
		if (r < 0)
			return 0;
	}
	return 0;
}

int wr_lazy_cache_trim(struct wr_lazy *l, uint64_t want, uint64_t *freed, wr_err *err)
{
	*freed = 0;
	for (int i = 0; i < 3; i++) {
		json_t *res = NULL;
		wr_err le = NULL;
		if (request(l, json_pack("{s:s, s:I}", "op", "trim", "want", (json_int_t)want),
			    &res, &le) == 0) {
			*freed = u64(res, "freed");
			json_decref(res);
			return 0;
		}
		if (wr_err_code(le) != ECONNREFUSED) {
			*err = le;
			return wr_err_wrap(err, "trim chunk cache");
		}
		wr_err_free(&le);
		struct trim_arg t = {.want = want};
		int r = offline(l, off_trim, &t, err);
		if (r <= 0) {
			*freed = t.freed;
			return r;
		}
	}
	return wr_err_set(err, EAGAIN, "trim chunk cache: lazyfs is starting");
}

int wr_lazy_forget(struct wr_lazy *l, const char *digest, wr_err *err)
{
	char hex[65];
	if (wrl_digest_hex(digest, hex, err) < 0)
		return -EINVAL;
	for (int i = 0; i < 3; i++) {
		json_t *res = NULL;
		wr_err le = NULL;
		if (request(l, json_pack("{s:s, s:s}", "op", "forget", "digest", digest), &res,
			    &le) == 0) {
			json_decref(res);
			return 0;
		}
		if (wr_err_code(le) != ECONNREFUSED) {
			*err = le;
			return -1;
		}
		wr_err_free(&le);
		int r = offline(l, off_forget, hex, err);
		if (r <= 0)
			return r;
	}
	return wr_err_set(err, EAGAIN, "forget %s: lazyfs is starting", digest);
}

/* ---- the store's hooks ---------------------------------------------------- */

static uint64_t ops_cache_bytes(void *ctx)
{
	return wr_lazy_cache_bytes(ctx);
}

static int ops_cache_trim(void *ctx, uint64_t want, uint64_t *freed, wr_err *err)
{
	return wr_lazy_cache_trim(ctx, want, freed, err);
}

static void ops_forget(void *ctx, const char *digest)
{
	wr_err err = NULL;
	wr_lazy_forget(ctx, digest, &err);
	wr_err_free(&err);
}

static int ops_open_remote(void *ctx, const struct wr_image *img, char **path, wr_err *err)
{
	const char *digest = img->remote.blob_digest ? img->remote.blob_digest : img->digest;
	uint64_t size = img->remote.size ? img->remote.size : img->size;
	if (img->remote.reference == NULL)
		return wr_err_set(err, ENOENT, "image %s: not local and no registry reference",
				  img->digest);
	return wr_lazy_register(ctx, digest, size, img->remote.reference, path, err);
}

const struct wr_image_lazy_ops wr_lazy_image_ops = {
    .cache_bytes = ops_cache_bytes,
    .cache_trim = ops_cache_trim,
    .forget = ops_forget,
    .open_remote = ops_open_remote,
};

static struct wr_lazy *g_attached; /* warrend's, for the process's life */

int wr_lazy_attach(struct wr_image_store_opts *so, const char *run_dir, wr_err *err)
{
	if (g_attached == NULL) {
		struct wr_lazy_opts lo = {.store_dir = so->dir, .run_dir = run_dir};
		/* Tuning knobs until the daemon's config carries them. */
		const char *cs = getenv("WARREN_LAZY_CHUNK_SIZE");
		uint64_t v;
		if (cs && wr_parse_size(cs, &v) == 0 && v <= (64u << 20))
			lo.chunk_size = (uint32_t)v;
		lo.fetch_all = getenv("WARREN_LAZY_FETCH_ALL") != NULL;
		if (wr_lazy_open(&lo, &g_attached, err) < 0)
			return wr_err_wrap(err, "on-demand image loading");
	}
	so->lazy = &wr_lazy_image_ops;
	so->lazy_ctx = g_attached;
	return 0;
}
