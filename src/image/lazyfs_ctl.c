/* warren-lazyfs control socket: newline-delimited JSON requests on
 * <run>/lazyfs/ctl.sock (mode 0600; the listening socket belongs to the
 * supervisor, so it stays bound while a worker restarts), one answer line
 * per request:
 *   {"op":"ping"}                                   {"pid":N,"worker":N,"worker_starts":N}
 *   {"op":"register","digest":D,"size":N,"reference":R}   {"path":P,"verified":true}
 *   {"op":"stats"[,"digest":D]}                     counters (lazy.h)
 *   {"op":"events","since":N}                       {"events":[...],"last":N}
 *   {"op":"cache_bytes"}                            {"bytes":N}
 *   {"op":"trim","want":N}                          {"freed":N}
 *   {"op":"forget","digest":D}                      {}
 *   {"op":"fuse_fd"}                                {"pid":N,"dev":N} + the fd
 * fuse_fd hands a dup of the /dev/fuse connection over (SCM_RIGHTS, with
 * the answer's first byte) to warrend's mount keeper (lazyfs.h); only in
 * resend mode, where a new lazyfs can take the mount over (else ENOTSUP).
 * Errors: {"error":{"errno":N,"message":M}}. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "image/lazyfs.h"

void lazyfs_event(struct lazyfs *fs, const char *type, const char *digest, const char *fmt, ...)
{
	char msg[320];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	int64_t now = time(NULL);
	pthread_mutex_lock(&fs->lock);
	/* A dead registry makes every read fail: one event per blob and type
	 * per second is enough to tell. */
	for (uint64_t s = fs->ev_seq; s > 0 && s + LAZYFS_EVENTS > fs->ev_seq; s--) {
		struct lazyfs_event *p = &fs->ev[s % LAZYFS_EVENTS];
		if (p->time < now)
			break;
		if (strcmp(p->type, type) == 0 && strcmp(p->digest, digest) == 0) {
			pthread_mutex_unlock(&fs->lock);
			return;
		}
	}
	struct lazyfs_event *e = &fs->ev[++fs->ev_seq % LAZYFS_EVENTS];
	e->seq = fs->ev_seq;
	e->time = now;
	snprintf(e->type, sizeof(e->type), "%s", type);
	snprintf(e->digest, sizeof(e->digest), "%s", digest);
	snprintf(e->msg, sizeof(e->msg), "%s", msg);
	pthread_mutex_unlock(&fs->lock);
	fprintf(stderr, "warren-lazyfs: %s %s: %s\n", type, digest, msg);
}

static json_t *error_json(wr_err err)
{
	return json_pack("{s:{s:i, s:s}}", "error", "errno", err ? err->errnum : EIO, "message",
			 err && err->msg ? err->msg : "error");
}

static json_t *blob_stats(struct wrl_blob *b)
{
	pthread_mutex_lock(&b->lock);
	json_t *j = json_pack(
	    "{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:i, s:b}", "digest",
	    b->digest, "size", (json_int_t)b->size, "chunks", (json_int_t)b->nchunks, "present",
	    (json_int_t)b->present, "bytes_fetched", (json_int_t)b->bytes_fetched, "fetches",
	    (json_int_t)b->fetches, "fetch_errors", (json_int_t)b->fetch_errors, "verify_errors",
	    (json_int_t)b->verify_errors, "reads", (json_int_t)b->reads, "cache_bytes",
	    (json_int_t)wrl_blob_cache_bytes(b), "complete", b->complete, "opens", b->opens,
	    "chunk_index", b->index.sums != NULL);
	pthread_mutex_unlock(&b->lock);
	return j;
}

/* A snapshot of the blob list (structs are never freed while running). */
static struct wrl_blob **snapshot(struct lazyfs *fs, size_t *n)
{
	pthread_mutex_lock(&fs->lock);
	size_t cnt = 0;
	for (struct wrl_blob *b = fs->blobs; b; b = b->next)
		cnt++;
	struct wrl_blob **v = calloc(cnt ? cnt : 1, sizeof(*v));
	size_t k = 0;
	if (v)
		for (struct wrl_blob *b = fs->blobs; b; b = b->next)
			v[k++] = b;
	pthread_mutex_unlock(&fs->lock);
	*n = k;
	return v;
}

static json_t *do_stats(struct lazyfs *fs, const char *digest, wr_err *err)
{
	if (digest) {
		char hex[65];
		if (wrl_digest_hex(digest, hex, err) < 0)
			return NULL;
		struct wrl_blob *b = lazyfs_find(fs, hex);
		if (b == NULL) {
			wr_err_set(err, ENOENT, "blob %s: not registered", digest);
			return NULL;
		}
		return blob_stats(b);
	}
	size_t n;
	_cleanup_free_ struct wrl_blob **v = snapshot(fs, &n);
	uint64_t cache = 0;
	json_t *blobs = json_array();
	for (size_t i = 0; v && i < n; i++) {
		json_t *s = blob_stats(v[i]);
		cache += (uint64_t)json_integer_value(json_object_get(s, "cache_bytes"));
		json_array_append_new(blobs, s);
	}
	return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o}", "bytes_fetched",
			 (json_int_t)atomic_load(&fs->bytes_fetched), "fetches",
			 (json_int_t)atomic_load(&fs->fetches), "fetch_errors",
			 (json_int_t)atomic_load(&fs->fetch_errors), "verify_errors",
			 (json_int_t)atomic_load(&fs->verify_errors), "dedup_waits",
			 (json_int_t)atomic_load(&fs->dedup_waits), "prefetched",
			 (json_int_t)atomic_load(&fs->prefetched), "reads",
			 (json_int_t)atomic_load(&fs->reads), "read_bytes",
			 (json_int_t)atomic_load(&fs->read_bytes), "cache_bytes", (json_int_t)cache,
			 "worker_starts", (json_int_t)fs->worker_starts, "blobs", blobs);
}

static json_t *do_events(struct lazyfs *fs, uint64_t since)
{
	json_t *a = json_array();
	pthread_mutex_lock(&fs->lock);
	uint64_t first = fs->ev_seq >= LAZYFS_EVENTS ? fs->ev_seq - LAZYFS_EVENTS + 1 : 1;
	if (since + 1 > first)
		first = since + 1;
	for (uint64_t s = first; s <= fs->ev_seq; s++) {
		struct lazyfs_event *e = &fs->ev[s % LAZYFS_EVENTS];
		json_array_append_new(a, json_pack("{s:I, s:I, s:s, s:s, s:s}", "seq",
						   (json_int_t)e->seq, "time", (json_int_t)e->time,
						   "type", e->type, "digest", e->digest, "message",
						   e->msg));
	}
	uint64_t last = fs->ev_seq > since ? fs->ev_seq : since;
	pthread_mutex_unlock(&fs->lock);
	return json_pack("{s:o, s:I}", "events", a, "last", (json_int_t)last);
}

static json_t *handle(struct lazyfs *fs, json_t *req, int *pass, wr_err *err)
{
	const char *op = NULL, *digest = NULL, *reference = NULL;
	json_int_t size = 0, since = 0, want = 0;
	json_error_t je;
	if (json_unpack_ex(req, &je, 0, "{s:s, s?s, s?s, s?I, s?I, s?I}", "op", &op, "digest",
			   &digest, "reference", &reference, "size", &size, "since", &since, "want",
			   &want) < 0) {
		wr_err_set(err, EINVAL, "request: %s", je.text);
		return NULL;
	}
	if (strcmp(op, "ping") == 0)
		return json_pack("{s:i, s:i, s:I}", "pid", (int)getppid(), "worker", (int)getpid(),
				 "worker_starts", (json_int_t)fs->worker_starts);
	if (strcmp(op, "register") == 0) {
		struct wrl_blob *b;
		if (size <= 0) {
			wr_err_field(err, "size", "size: must be > 0");
			return NULL;
		}
		if (lazyfs_register(fs, digest, (uint64_t)size, reference, &b, err) < 0)
			return NULL;
		_cleanup_free_ char *path = NULL;
		if (asprintf(&path, "%s/sha256/%s", fs->mnt, b->hex) < 0)
			return NULL;
		/* "verified": this lazyfs checks every fetched range against
		 * the blob's chunk index (the client refuses one that does not
		 * say so: a lazyfs older than indexes, still running). */
		return json_pack("{s:s, s:b}", "path", path, "verified", 1);
	}
	if (strcmp(op, "fuse_fd") == 0) {
		if (!fs->cfg.resend) {
			wr_err_set(err, ENOTSUP,
				   "this kernel cannot resend pending FUSE requests: the mount "
				   "cannot be taken over");
			return NULL;
		}
		*pass = fs->master_fd;
		return json_pack("{s:i, s:I}", "pid", (int)getppid(), "dev", (json_int_t)fs->dev);
	}
	if (strcmp(op, "stats") == 0)
		return do_stats(fs, digest, err);
	if (strcmp(op, "events") == 0)
		return do_events(fs, since > 0 ? (uint64_t)since : 0);
	if (strcmp(op, "cache_bytes") == 0 || strcmp(op, "trim") == 0) {
		size_t n;
		_cleanup_free_ struct wrl_blob **v = snapshot(fs, &n);
		if (v == NULL)
			return NULL;
		if (op[0] == 't') {
			uint64_t freed = 0;
			int r = wrl_trim(v, n, want > 0 ? (uint64_t)want : 0, &freed);
			if (r < 0) {
				errno = -r;
				wr_err_sys(err, "trim");
				return NULL;
			}
			return json_pack("{s:I}", "freed", (json_int_t)freed);
		}
		uint64_t bytes = 0;
		for (size_t i = 0; i < n; i++) {
			pthread_mutex_lock(&v[i]->lock);
			bytes += wrl_blob_cache_bytes(v[i]);
			pthread_mutex_unlock(&v[i]->lock);
		}
		return json_pack("{s:I}", "bytes", (json_int_t)bytes);
	}
	if (strcmp(op, "forget") == 0) {
		if (lazyfs_forget(fs, digest, err) < 0)
			return NULL;
		return json_object();
	}
	wr_err_field(err, "op", "op %s: unknown", op);
	return NULL;
}

/* One byte (a space, which the JSON reader skips) carrying fd. */
static int send_fd(int sock, int fd)
{
	char byte = ' ';
	struct iovec iov = {.iov_base = &byte, .iov_len = 1};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	memset(&u, 0, sizeof(u));
	struct msghdr mh = {.msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = u.buf,
			    .msg_controllen = sizeof(u.buf)};
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	ssize_t n;
	while ((n = sendmsg(sock, &mh, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	return n == 1 ? 0 : -1;
}

static void *conn_run(void *arg)
{
	struct lazyfs *fs = ((void **)arg)[0];
	int fd = (int)(intptr_t)((void **)arg)[1];
	free(arg);
	FILE *in = fdopen(fd, "r");
	if (in == NULL) {
		close(fd);
		return NULL;
	}
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	while ((n = getline(&line, &cap, in)) > 0) {
		if (n > 1 << 16)
			break;
		wr_err err = NULL;
		json_error_t je;
		json_t *req = json_loads(line, 0, &je);
		int pass = -1;
		json_t *res = req ? handle(fs, req, &pass, &err) : NULL;
		if (req == NULL)
			wr_err_set(&err, EINVAL, "request: %s", je.text);
		if (res == NULL)
			res = error_json(err);
		wr_err_free(&err);
		json_decref(req);
		char *s = json_dumps(res, JSON_COMPACT);
		json_decref(res);
		bool ok = s && (pass < 0 || send_fd(fd, pass) == 0) &&
			  wr_write_all(fd, s, strlen(s)) >= 0 && wr_write_all(fd, "\n", 1) >= 0;
		free(s);
		if (!ok)
			break;
	}
	free(line);
	fclose(in);
	return NULL;
}

static void *accept_run(void *arg)
{
	struct lazyfs *fs = ((void **)arg)[0];
	int lfd = (int)(intptr_t)((void **)arg)[1];
	free(arg);
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	for (;;) {
		int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE)
				continue;
			break;
		}
		void **a = malloc(2 * sizeof(void *));
		pthread_t t;
		if (a == NULL) {
			close(c);
			continue;
		}
		a[0] = fs;
		a[1] = (void *)(intptr_t)c;
		if (pthread_create(&t, &at, conn_run, a) != 0) {
			free(a);
			close(c);
		}
	}
	pthread_attr_destroy(&at);
	return NULL;
}

int lazyfs_ctl_start(struct lazyfs *fs, int listenfd, wr_err *err)
{
	void **a = malloc(2 * sizeof(void *));
	if (a == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	a[0] = fs;
	a[1] = (void *)(intptr_t)listenfd;
	pthread_t t;
	int r = pthread_create(&t, NULL, accept_run, a);
	if (r != 0) {
		free(a);
		errno = r;
		return wr_err_sys(err, "control thread");
	}
	pthread_detach(t);
	return 0;
}
