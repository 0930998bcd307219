/* warren-agent, files half: FS requests in, FS_DATA / FS_LIST / FS_DONE
 * frames out (protocol: src/common/frame.h).
 *
 * The work is fsops itself (src/tiers/fsops.c, linked into the agent):
 * every path is resolved beneath the guest's root with openat2
 * RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV, so "..",
 * absolute symlinks and links swapped in mid-operation stay inside the
 * root, and /proc, /sys, /dev (other mounts) are out of reach, exactly as
 * for a container's files from the host. The same code gives the same
 * semantics, messages and errnos on every tier. Files the API creates get
 * the sandbox user's ids (fsuid/fsgid per thread, as on the host).
 *
 * Each request runs on a thread of its own (a read of a slow disk or a
 * deep list must not stall commands); the main loop moves file bytes
 * between the channel and the thread through a pipe, and sends FS_DONE
 * once the thread is finished and a read's bytes are all out. The thread
 * itself sends only FS_LIST batches (ga_send serialises writers).
 *
 * Ordering invariant: a read's FS_DONE goes out only after its data pipe
 * reached EOF (the thread closes its end before it reports done), so the
 * host sees every byte before the result. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <linux/openat2.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "agent/guest/agent.h"
#include "common/frame.h"
#include "common/util.h"
#include "tiers/fsops.h"

#define MAX_FSOPS 32
#define LIST_BATCH (256u << 10) /* bytes of JSON per FS_LIST frame, about */

enum fs_kind { K_OTHER, K_READ, K_WRITE };

struct fsop {
	uint32_t id;
	json_t *req;
	enum fs_kind kind;
	int data_r, data_w; /* read: thread → main; write: main → thread */
	int done_r, done_w; /* the thread's one byte: finished */
	bool data_eof, done;
	bool dropping; /* write: the thread stopped taking data */
	pthread_t th;
	struct wr_fs fs;
	json_t *result;	  /* set by the thread before done_w */
	json_t *batch;	  /* list entries not yet sent */
	size_t batch_len; /* their JSON size, about */
};

static struct fsop *g_ops[MAX_FSOPS];
static int g_root = -1;

static void closefd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static json_t *err_result(wr_err err)
{
	json_t *j = json_pack("{s:i, s:s}", "errno", err && err->errnum ? err->errnum : EIO,
			      "message", err && err->msg ? err->msg : "failed");
	if (j && err && err->field)
		json_object_set_new(j, "field", json_string(err->field));
	return j;
}

static const char *type_name(enum wr_fs_type t)
{
	switch (t) {
	case WR_FS_FILE: return "file";
	case WR_FS_DIR: return "dir";
	case WR_FS_SYMLINK: return "symlink";
	default: return "other";
	}
}

/* The host's microvm_files.c reads exactly these keys. */
static json_t *stat_json(const struct wr_fs_stat *st)
{
	json_t *j = json_pack("{s:s, s:I, s:i, s:I, s:I, s:I}", "type", type_name(st->type), "size",
			      (json_int_t)st->size, "mode", (int)(st->mode & 07777), "uid",
			      (json_int_t)st->uid, "gid", (json_int_t)st->gid, "mtime_ns",
			      (json_int_t)st->mtime_ns);
	if (j && st->type == WR_FS_SYMLINK && st->symlink_target)
		json_object_set_new(j, "target", json_string(st->symlink_target));
	return j;
}

static void flush_batch(struct fsop *o)
{
	if (o->batch == NULL || json_array_size(o->batch) == 0)
		return;
	char *s = json_dumps(o->batch, JSON_COMPACT);
	if (s && strlen(s) <= WR_FRAME_MAX)
		ga_send(WR_FRAME_FS_LIST, o->id, s, (uint32_t)strlen(s));
	free(s);
	json_array_clear(o->batch);
	o->batch_len = 0;
}

static int list_cb(void *ctx, const char *rel, const struct wr_fs_stat *st)
{
	struct fsop *o = ctx;
	json_t *e = stat_json(st);
	if (e == NULL)
		return -ENOMEM;
	json_object_set_new(e, "path", json_string(rel));
	json_array_append_new(o->batch, e);
	o->batch_len += strlen(rel) + 128 + (st->symlink_target ? strlen(st->symlink_target) : 0);
	if (o->batch_len >= LIST_BATCH)
		flush_batch(o);
	return 0;
}

static const char *jstr(json_t *req, const char *k)
{
	return json_string_value(json_object_get(req, k));
}

/* A symlink at path, as the tar upload makes one from the host on a
 * container: parents made by fsops, the parent resolved inside the root
 * like fsops does it, the link made with one *at() call in it, with the
 * sandbox user's fs ids. */
static int fs_symlink(const struct wr_fs *fs, const char *path, const char *target, wr_err *err)
{
	char parent[PATH_MAX];
	if (strlen(path) >= sizeof(parent) || *target == 0 || strlen(target) >= PATH_MAX)
		return wr_err_set(err, ENAMETOOLONG, "symlink %.256s: path or target too long",
				  path);
	snprintf(parent, sizeof(parent), "%s", path);
	char *slash = strrchr(parent, '/');
	const char *name = slash ? path + (slash - parent) + 1 : path;
	if (slash == NULL)
		snprintf(parent, sizeof(parent), "/");
	else if (slash == parent)
		parent[1] = 0;
	else
		*slash = 0;
	if (*name == 0 || !strcmp(name, ".") || !strcmp(name, ".."))
		return wr_err_set(err, EINVAL, "symlink %.256s: not a name", path);
	if (wr_fs_mkdir(fs, parent, 0755, true, err) < 0)
		return -1;
	struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
			       .resolve =
				   RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV};
	int pfd = (int)syscall(SYS_openat2, fs->root_fd, parent, &how, sizeof(how));
	if (pfd < 0)
		return wr_err_sys(err, "symlink %.256s", path);
	struct wr_fscred c;
	wr_fscred_enter(fs->uid, fs->gid, &c);
	int r = 0;
	if (unlinkat(pfd, name, 0) < 0 && errno != ENOENT)
		r = wr_err_sys(err, "symlink %.256s: replace", path);
	else if (symlinkat(target, pfd, name) < 0)
		r = wr_err_sys(err, "symlink %.256s", path);
	wr_fscred_leave(&c);
	close(pfd);
	return r;
}

static void *worker(void *arg)
{
	struct fsop *o = arg;
	json_t *req = o->req;
	const char *op = jstr(req, "op"), *path = jstr(req, "path");
	mode_t mode = (mode_t)json_integer_value(json_object_get(req, "mode")) & 07777;
	bool parents = json_is_true(json_object_get(req, "parents"));
	json_int_t mx = json_integer_value(json_object_get(req, "max"));
	uint64_t max = mx > 0 ? (uint64_t)mx : 0;
	wr_err err = NULL;
	json_t *res = NULL;
	int r = -1;
	if (op == NULL) {
		r = wr_err_set(&err, EINVAL, "files: no op");
	} else if (!strcmp(op, "stat")) {
		struct wr_fs_stat st = {0};
		if ((r = wr_fs_stat(&o->fs, path, &st, &err)) == 0)
			res = json_pack("{s:b, s:o}", "ok", 1, "stat", stat_json(&st));
		wr_fs_stat_free(&st);
	} else if (!strcmp(op, "exists")) {
		bool ex = false;
		if ((r = wr_fs_exists(&o->fs, path, &ex, &err)) == 0)
			res = json_pack("{s:b, s:b}", "ok", 1, "exists", ex);
	} else if (!strcmp(op, "read")) {
		uint64_t written = 0;
		r = wr_fs_read_to_fd(&o->fs, path, o->data_w, max, &written, &err);
		if (r >= 0)
			res = json_pack("{s:b, s:I, s:b}", "ok", 1, "written", (json_int_t)written,
					"truncated", r == 1);
	} else if (!strcmp(op, "write")) {
		r = wr_fs_write_from_fd(&o->fs, path, o->data_r, max, mode, parents, &err);
	} else if (!strcmp(op, "list")) {
		o->batch = json_array();
		int depth = (int)json_integer_value(json_object_get(req, "depth"));
		r = wr_fs_list(&o->fs, path, depth, list_cb, o, &err);
		if (r >= 0)
			flush_batch(o);
		json_decref(o->batch);
		o->batch = NULL;
	} else if (!strcmp(op, "mkdir")) {
		r = wr_fs_mkdir(&o->fs, path, mode, parents, &err);
	} else if (!strcmp(op, "remove")) {
		r = wr_fs_remove(&o->fs, path, json_is_true(json_object_get(req, "recursive")),
				 &err);
	} else if (!strcmp(op, "rename")) {
		r = wr_fs_rename(&o->fs, jstr(req, "from"), jstr(req, "to"), &err);
	} else if (!strcmp(op, "symlink")) {
		r = fs_symlink(&o->fs, path, jstr(req, "target"), &err);
	} else {
		r = wr_err_set(&err, EINVAL, "files: unknown op");
	}
	if (r < 0)
		res = err_result(err);
	else if (res == NULL)
		res = json_pack("{s:b}", "ok", 1);
	wr_err_free(&err);
	/* the pipe's end first: a read's data reaches EOF before done (a
	 * write's socket stays open until finish: the main loop may still
	 * use its number for an abort) */
	if (o->kind == K_READ)
		closefd(&o->data_w);
	o->result = res;
	if (write(o->done_w, "x", 1) < 0) {
		/* a fresh pipe with room: cannot fail */
	}
	return NULL;
}

static struct fsop *find(uint32_t id)
{
	for (int i = 0; i < MAX_FSOPS; i++)
		if (g_ops[i] && g_ops[i]->id == id)
			return g_ops[i];
	return NULL;
}

static void send_result(uint32_t id, json_t *j)
{
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	if (s == NULL)
		s = strdup("{\"errno\":12,\"message\":\"files: out of memory\"}");
	if (s)
		ga_send(WR_FRAME_FS_DONE, id, s, (uint32_t)strlen(s));
	free(s);
}

static void send_errno(uint32_t id, int e, const char *msg)
{
	json_t *j = json_pack("{s:i, s:s}", "errno", e, "message", msg);
	send_result(id, j);
	json_decref(j);
}

static bool valid_request(json_t *req)
{
	static const char *const strs[] = {"op", "path", "from", "to", "target", NULL};
	if (!json_is_object(req) || !json_is_string(json_object_get(req, "op")))
		return false;
	for (int i = 0; strs[i]; i++) {
		json_t *v = json_object_get(req, strs[i]);
		if (v && !json_is_string(v))
			return false;
	}
	const char *op = jstr(req, "op");
	if (!strcmp(op, "rename"))
		return jstr(req, "from") && jstr(req, "to");
	if (!strcmp(op, "symlink") && jstr(req, "target") == NULL)
		return false;
	return jstr(req, "path") != NULL;
}

void ga_fs_request(uint32_t id, const uint8_t *p, uint32_t len)
{
	if (g_root < 0) {
		signal(SIGPIPE, SIG_IGN); /* a write's thread may stop reading early */
		g_root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	}
	json_error_t je;
	json_t *req = json_loadb((const char *)p, len, 0, &je);
	int slot = -1;
	for (int i = 0; i < MAX_FSOPS && slot < 0; i++)
		if (g_ops[i] == NULL)
			slot = i;
	if (!valid_request(req)) {
		send_errno(id, EINVAL, "files: malformed request");
		json_decref(req);
		return;
	}
	if (id == 0 || find(id) || slot < 0 || g_root < 0) {
		send_errno(id, slot < 0 ? EAGAIN : EINVAL,
			   slot < 0 ? "files: too many requests at once"
				    : "files: bad or duplicate id");
		json_decref(req);
		return;
	}
	struct fsop *o = calloc(1, sizeof(*o));
	if (o == NULL) {
		send_errno(id, ENOMEM, "files: out of memory");
		json_decref(req);
		return;
	}
	o->id = id;
	o->req = req;
	o->data_r = o->data_w = o->done_r = o->done_w = -1;
	const char *op = jstr(req, "op");
	o->kind = !strcmp(op, "read") ? K_READ : !strcmp(op, "write") ? K_WRITE : K_OTHER;
	json_int_t uid = json_integer_value(json_object_get(req, "uid"));
	json_int_t gid = json_integer_value(json_object_get(req, "gid"));
	o->fs = (struct wr_fs){.root_fd = g_root,
			       .id_base = 0,
			       .uid = uid > 0 ? (uid_t)uid : 0,
			       .gid = gid > 0 ? (gid_t)gid : 0};
	/* a write's bytes go through a socketpair: an abort can then fail the
	 * thread's read (ECONNRESET) instead of ending it (EOF would commit a
	 * partial file) */
	int pd[2] = {-1, -1}, pn[2] = {-1, -1};
	if (pipe2(pn, O_CLOEXEC) < 0 || (o->kind == K_READ && pipe2(pd, O_CLOEXEC) < 0) ||
	    (o->kind == K_WRITE && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pd) < 0)) {
		closefd(&pn[0]);
		closefd(&pn[1]);
		json_decref(req);
		free(o);
		send_errno(id, EMFILE, "files: out of resources");
		return;
	}
	o->done_r = pn[0];
	o->done_w = pn[1];
	o->data_r = pd[0];
	o->data_w = pd[1];
	o->data_eof = o->kind != K_READ;
	if (o->kind == K_READ)
		fcntl(o->data_r, F_SETFL, O_NONBLOCK);
	if (o->kind == K_WRITE)
		fcntl(o->data_w, F_SETFL, O_NONBLOCK);
	if (pthread_create(&o->th, NULL, worker, o) != 0) {
		closefd(&o->done_r);
		closefd(&o->done_w);
		closefd(&o->data_r);
		closefd(&o->data_w);
		json_decref(req);
		free(o);
		send_errno(id, EAGAIN, "files: no thread");
		return;
	}
	g_ops[slot] = o;
}

/* Host → guest bytes of a write; empty: the end. The main loop waits
 * while the thread drains the socket into the file (as fast as the disk
 * takes it), and drops the bytes once the thread has finished (an error:
 * its answer says which). */
void ga_fs_data(uint32_t id, const uint8_t *p, uint32_t len)
{
	struct fsop *o = find(id);
	if (o == NULL || o->kind != K_WRITE || o->data_w < 0)
		return; /* finished or failed: late data is dropped */
	if (len == 0) {
		closefd(&o->data_w);
		return;
	}
	while (len > 0 && !o->dropping) {
		ssize_t n = send(o->data_w, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			struct pollfd pf[2] = {{.fd = o->data_w, .events = POLLOUT},
					       {.fd = o->done_r, .events = POLLIN}};
			if (poll(pf, 2, -1) > 0 && pf[1].revents)
				o->dropping = true; /* done meanwhile */
			continue;
		}
		if (n < 0) {
			o->dropping = true;
			break;
		}
		p += n;
		len -= (uint32_t)n;
	}
}

/* The host gave up on a write (its input failed): the thread's next read
 * fails, so fsops removes its temp file and leaves the target as it was.
 * A byte into our own end's receive queue makes the close a reset. */
void ga_fs_abort(uint32_t id)
{
	struct fsop *o = find(id);
	if (o == NULL || o->kind != K_WRITE || o->data_w < 0)
		return;
	if (send(o->data_r, "x", 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
		/* the thread is finished: nothing left to fail */
	}
	closefd(&o->data_w);
}

static void finish(int slot)
{
	struct fsop *o = g_ops[slot];
	pthread_join(o->th, NULL);
	send_result(o->id, o->result);
	json_decref(o->result);
	json_decref(o->req);
	closefd(&o->data_r);
	closefd(&o->data_w);
	closefd(&o->done_r);
	closefd(&o->done_w);
	free(o);
	g_ops[slot] = NULL;
}

int ga_fs_poll_add(struct pollfd *pf, int n)
{
	for (int i = 0; i < MAX_FSOPS; i++) {
		struct fsop *o = g_ops[i];
		if (o == NULL)
			continue;
		pf[n++] = (struct pollfd){.fd = o->done ? -1 : o->done_r, .events = POLLIN};
		pf[n++] = (struct pollfd){.fd = o->data_eof ? -1 : o->data_r, .events = POLLIN};
	}
	return n;
}

void ga_fs_poll_handle(const struct pollfd *pf, int n)
{
	static char buf[65536];
	int k = 0;
	for (int i = 0; i < MAX_FSOPS && k + 1 < n; i++) {
		struct fsop *o = g_ops[i];
		if (o == NULL)
			continue;
		const struct pollfd *d = &pf[k], *dp = &pf[k + 1];
		k += 2;
		if (dp->fd >= 0 && dp->revents) {
			ssize_t r = read(o->data_r, buf, sizeof(buf));
			if (r > 0)
				ga_send(WR_FRAME_FS_DATA, o->id, buf, (uint32_t)r);
			else if (r == 0 || (errno != EAGAIN && errno != EINTR))
				o->data_eof = true;
		}
		if (d->fd >= 0 && d->revents) {
			char c;
			if (read(o->done_r, &c, 1) == 1)
				o->done = true;
		}
		if (o->done && !o->data_eof) {
			/* the thread closed its end: drain what is left now */
			ssize_t r;
			while ((r = read(o->data_r, buf, sizeof(buf))) > 0)
				ga_send(WR_FRAME_FS_DATA, o->id, buf, (uint32_t)r);
			o->data_eof = true;
		}
		if (o->done && o->data_eof)
			finish(i);
	}
}

int ga_fs_max_fds(void)
{
	return 2 * MAX_FSOPS;
}
