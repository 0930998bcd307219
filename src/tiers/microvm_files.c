/* The microVM tier's files API over the agent channel (microvm_files.h).
 *
 * A request is one FS frame (JSON) with an id from the VM's command id
 * space; a write follows it with FS_DATA frames and an empty one (the end);
 * the guest answers with FS_DATA (a read's bytes) or FS_LIST (batches of a
 * list's entries) and a last FS_DONE. The reader thread (microvm_chan.c)
 * hands these frames to wr_vm_fs_frame under vm->lock; the caller's thread
 * waits on vm->cond, as exec does.
 *
 * Trust: the guest may lie. A read's bytes beyond what was asked, list
 * entries beyond WR_FS_LIST_MAX_ENTRIES, a result that is not the shape
 * asked for (unknown type, negative size, mode over 07777, errno out of
 * range, over-long strings) fail the request with EIO; memory held for a
 * request is bounded (READ_BUF of data waiting for a slow consumer, then
 * the reader waits for it at most STALL_MS before it drops the request);
 * a guest that stops answering fails it after WR_VM_FS_IDLE_MS. Never a
 * crash, never an unbounded allocation. */
#include "tiers/microvm_files.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/frame.h"
#include "common/util.h"
#include "tiers/microvm_internal.h"

#define READ_BUF (4u << 20)
#define STALL_MS 30000
#define CHUNK (64u << 10)
#define MSG_MAX 1024

struct vm_fsop {
	uint32_t id;
	struct vm_fsop *next;
	bool done, bad, cancelled;
	bool to_fd;	   /* a read's bytes go on as they come (else: kept, up to max) */
	bool reader_waits; /* the reader thread waits for room (the op must live) */
	char bad_msg[160];
	json_t *result;
	uint64_t last_ns; /* the last frame for it */
	/* read */
	uint64_t max, got;
	struct wr_buf data;
	/* list */
	json_t *entries;
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void fail_op(struct vm_fsop *o, const char *msg)
{
	if (!o->bad) {
		o->bad = true;
		snprintf(o->bad_msg, sizeof(o->bad_msg), "%s", msg);
	}
}

/* Called by the reader thread with vm->lock held. */
void wr_vm_fs_frame(struct wr_vm *vm, const struct wr_frame *f)
{
	struct vm_fsop *o = vm->fsops;
	while (o && o->id != f->id)
		o = o->next;
	if (o == NULL || o->done)
		return; /* a request the host gave up on, or the guest's invention */
	o->last_ns = now_ns();
	switch (f->type) {
	case WR_FRAME_FS_DATA:
		if (o->cancelled || o->bad)
			return;
		if (f->len > o->max - o->got) {
			fail_op(o, "the guest sent more bytes than asked for");
			return;
		}
		/* a consumer slower than the guest: wait for it, bounded */
		uint64_t until = now_ns() + STALL_MS * 1000000ull;
		o->reader_waits = true;
		while (o->to_fd && o->data.len + f->len > READ_BUF && !o->cancelled && !o->done) {
			struct timespec ts = {.tv_sec = (time_t)(until / 1000000000ull),
					      .tv_nsec = (long)(until % 1000000000ull)};
			if (pthread_cond_timedwait(&vm->cond, &vm->lock, &ts) == ETIMEDOUT) {
				o->cancelled = true;
				fail_op(o, "the reader of the file stalled");
			}
		}
		o->reader_waits = false;
		pthread_cond_broadcast(&vm->cond); /* the op's owner may wait for this */
		if (o->cancelled)
			return;
		if (wr_buf_append(&o->data, f->payload, f->len) < 0) {
			fail_op(o, "out of memory");
			return;
		}
		o->got += f->len;
		pthread_cond_broadcast(&vm->cond);
		return;
	case WR_FRAME_FS_LIST: {
		if (o->entries == NULL || o->bad)
			return fail_op(o, "a list batch for a request that is no list");
		json_error_t je;
		json_t *a = json_loadb((const char *)f->payload, f->len, 0, &je);
		bool arr = json_is_array(a);
		if (!arr ||
		    json_array_size(o->entries) + json_array_size(a) > WR_FS_LIST_MAX_ENTRIES) {
			json_decref(a);
			return fail_op(o, arr ? "more list entries than allowed"
					      : "a malformed list batch");
		}
		json_array_extend(o->entries, a);
		json_decref(a);
		return;
	}
	case WR_FRAME_FS_DONE: {
		json_error_t je;
		json_t *j = json_loadb((const char *)f->payload, f->len, 0, &je);
		if (!json_is_object(j)) {
			json_decref(j);
			fail_op(o, "a malformed result");
		} else {
			o->result = j;
		}
		o->done = true;
		pthread_cond_broadcast(&vm->cond);
		return;
	}
	default: return;
	}
}

/* ---- checking what the guest says -------------------------------------- */

static int bad_answer(wr_err *err, const char *what)
{
	return wr_err_set(err, EIO, "microvm: files: the guest's answer is malformed (%s)", what);
}

static bool int_in(json_t *v, json_int_t lo, json_int_t hi)
{
	return json_is_integer(v) && json_integer_value(v) >= lo && json_integer_value(v) <= hi;
}

static int parse_stat(json_t *j, struct wr_fs_stat *st, wr_err *err)
{
	memset(st, 0, sizeof(*st));
	const char *t = json_string_value(json_object_get(j, "type"));
	json_t *target = json_object_get(j, "target");
	if (!json_is_object(j) || t == NULL)
		return bad_answer(err, "stat");
	if (!strcmp(t, "file"))
		st->type = WR_FS_FILE;
	else if (!strcmp(t, "dir"))
		st->type = WR_FS_DIR;
	else if (!strcmp(t, "symlink"))
		st->type = WR_FS_SYMLINK;
	else if (!strcmp(t, "other"))
		st->type = WR_FS_OTHER;
	else
		return bad_answer(err, "file type");
	if (!int_in(json_object_get(j, "size"), 0, INT64_MAX) ||
	    !int_in(json_object_get(j, "mode"), 0, 07777) ||
	    !int_in(json_object_get(j, "uid"), 0, UINT32_MAX) ||
	    !int_in(json_object_get(j, "gid"), 0, UINT32_MAX) ||
	    !json_is_integer(json_object_get(j, "mtime_ns")) ||
	    (target && (!json_is_string(target) || json_string_length(target) >= PATH_MAX)))
		return bad_answer(err, "stat fields");
	st->size = (uint64_t)json_integer_value(json_object_get(j, "size"));
	st->mode = (mode_t)json_integer_value(json_object_get(j, "mode"));
	st->uid = (uid_t)json_integer_value(json_object_get(j, "uid"));
	st->gid = (gid_t)json_integer_value(json_object_get(j, "gid"));
	st->mtime_ns = (int64_t)json_integer_value(json_object_get(j, "mtime_ns"));
	if (st->type == WR_FS_SYMLINK) {
		st->symlink_target = strdup(target ? json_string_value(target) : "");
		if (st->symlink_target == NULL)
			return wr_err_set(err, ENOMEM, "out of memory");
	}
	return 0;
}

/* FS_DONE's object: ok, or the guest's fsops error as it was (errno and
 * message, the field when there was one). */
static int check_result(json_t *res, wr_err *err)
{
	if (json_is_true(json_object_get(res, "ok")))
		return 0;
	json_t *e = json_object_get(res, "errno"), *m = json_object_get(res, "message");
	json_t *fl = json_object_get(res, "field");
	if (!int_in(e, 1, 4095) || !json_is_string(m) || json_string_length(m) > MSG_MAX ||
	    (fl && (!json_is_string(fl) || json_string_length(fl) > 64)))
		return bad_answer(err, "error");
	wr_err_set(err, (int)json_integer_value(e), "%s", json_string_value(m));
	if (fl && *err && (*err)->field == NULL)
		(*err)->field = strdup(json_string_value(fl));
	return -1;
}

/* ---- one request ---------------------------------------------------------- */

struct call {
	json_t *req; /* taken */
	/* write: data from memory or from in_fd, at most in_max + 1 bytes go
	 * (the guest's fsops answers EFBIG past in_max) */
	const char *in_data;
	size_t in_len;
	int in_fd;
	uint64_t in_max;
	/* read: the bytes go to out_fd, or stay in the op's buffer */
	bool read;
	int out_fd;
	uint64_t out_max;
	bool list;
};

static void unlink_op(struct wr_vm *vm, struct vm_fsop *o)
{
	for (struct vm_fsop **pp = &vm->fsops; *pp; pp = &(*pp)->next)
		if (*pp == o) {
			*pp = o->next;
			break;
		}
}

static int send_data(struct wr_vm *vm, uint32_t id, const void *p, uint32_t len)
{
	pthread_mutex_lock(&vm->write_lock);
	int r = wr_frame_write(vm->agent, WR_FRAME_FS_DATA, id, p, len);
	pthread_mutex_unlock(&vm->write_lock);
	return r;
}

/* Sends a write's data: false when the guest answered meanwhile (an
 * error) or the channel failed. */
static int pump_in(struct wr_vm *vm, struct vm_fsop *o, const struct call *c)
{
	uint64_t sent = 0, limit = c->in_max == UINT64_MAX ? UINT64_MAX : c->in_max + 1;
	static const size_t chunk = CHUNK;
	char *buf = c->in_fd >= 0 ? malloc(chunk) : NULL;
	if (c->in_fd >= 0 && buf == NULL)
		return -ENOMEM;
	int r = 0;
	while (sent < limit) {
		pthread_mutex_lock(&vm->lock);
		bool stop = o->done || vm->broken;
		pthread_mutex_unlock(&vm->lock);
		if (stop)
			break;
		size_t want = limit - sent < chunk ? (size_t)(limit - sent) : chunk;
		ssize_t n;
		if (c->in_fd >= 0) {
			n = read(c->in_fd, buf, want);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0) {
				/* an end frame would commit what came so far: a KILL
				 * makes the guest drop the write instead */
				r = -errno;
				pthread_mutex_lock(&vm->write_lock);
				wr_frame_write(vm->agent, WR_FRAME_KILL, o->id, NULL, 0);
				pthread_mutex_unlock(&vm->write_lock);
				free(buf);
				return r;
			}
		} else {
			n = (ssize_t)(c->in_len - sent < want ? c->in_len - sent : want);
		}
		if (n == 0)
			break;
		r = send_data(vm, o->id, c->in_fd >= 0 ? buf : c->in_data + sent, (uint32_t)n);
		if (r < 0)
			break;
		sent += (uint64_t)n;
	}
	free(buf);
	if (r == 0)
		r = send_data(vm, o->id, NULL, 0);
	return r;
}

/* Runs the request; *res gets FS_DONE's object (the caller decrefs),
 * *data a read's bytes when out_fd < 0, entries a list's. */
static int fs_call(struct wr_vm *vm, struct call *c, json_t **res, struct wr_buf *data,
		   json_t **entries, bool *out_failed, wr_err *err)
{
	struct vm_fsop o = {.max = c->out_max, .to_fd = c->read && c->out_fd >= 0};
	char *s = json_dumps(c->req, JSON_COMPACT);
	json_decref(c->req);
	if (s == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	if (strlen(s) > WR_FRAME_MAX) {
		free(s);
		return wr_err_set(err, ENAMETOOLONG, "microvm: files: request too long");
	}
	if (c->list && (o.entries = json_array()) == NULL) {
		free(s);
		return wr_err_set(err, ENOMEM, "out of memory");
	}
	pthread_mutex_lock(&vm->lock);
	if (vm->broken) {
		int r = wr_err_set(err, EIO, "microvm: %s", vm->broken_msg);
		pthread_mutex_unlock(&vm->lock);
		free(s);
		json_decref(o.entries);
		return r;
	}
	o.id = ++vm->next_id ? vm->next_id : ++vm->next_id;
	o.last_ns = now_ns();
	o.next = vm->fsops;
	vm->fsops = &o;
	pthread_mutex_unlock(&vm->lock);

	pthread_mutex_lock(&vm->write_lock);
	int r = wr_frame_write(vm->agent, WR_FRAME_FS, o.id, s, (uint32_t)strlen(s));
	pthread_mutex_unlock(&vm->write_lock);
	free(s);
	if (r == 0 && (c->in_fd >= 0 || c->in_data))
		r = pump_in(vm, &o, c);

	pthread_mutex_lock(&vm->lock);
	bool idle = false;
	while (r == 0 && !vm->broken && !idle && (!o.done || (o.to_fd && o.data.len))) {
		if (o.data.len && o.to_fd) {
			/* hand the bytes on outside the lock: the reader thread may
			 * append meanwhile, into a buffer of its own */
			struct wr_buf b = o.data;
			o.data = (struct wr_buf){0};
			pthread_cond_broadcast(&vm->cond);
			pthread_mutex_unlock(&vm->lock);
			if (!*out_failed && wr_write_all(c->out_fd, b.p, b.len) < 0)
				*out_failed = true; /* the client went: read to the end */
			free(b.p);
			pthread_mutex_lock(&vm->lock);
			continue;
		}
		if (o.done)
			break;
		uint64_t wake = o.last_ns + WR_VM_FS_IDLE_MS * 1000000ull;
		if (now_ns() >= wake) {
			idle = true;
			break;
		}
		struct timespec ts = {.tv_sec = (time_t)(wake / 1000000000ull),
				      .tv_nsec = (long)(wake % 1000000000ull)};
		pthread_cond_timedwait(&vm->cond, &vm->lock, &ts);
	}
	o.cancelled = true; /* a reader thread waiting for room stops now */
	pthread_cond_broadcast(&vm->cond);
	/* o lives on this stack: not before the reader thread is out of it */
	while (o.reader_waits)
		pthread_cond_wait(&vm->cond, &vm->lock);
	unlink_op(vm, &o);
	bool broken = vm->broken && !o.done;
	char msg[256];
	snprintf(msg, sizeof(msg), "%s", vm->broken_msg);
	pthread_mutex_unlock(&vm->lock);

	if (r < 0) {
		errno = -r;
		r = wr_err_sys(err, "microvm: files: send");
	} else if (broken) {
		r = wr_err_set(err, EIO, "microvm: %s", msg);
	} else if (idle) {
		r = wr_err_set(err, ETIMEDOUT, "microvm: files: no answer from the guest in %u s",
			       WR_VM_FS_IDLE_MS / 1000);
	} else if (o.bad) {
		r = wr_err_set(err, EIO, "microvm: files: %s", o.bad_msg);
	} else if (o.result == NULL) {
		r = bad_answer(err, "no result");
	}
	if (r < 0) {
		json_decref(o.result);
		json_decref(o.entries);
		free(o.data.p);
		return r;
	}
	*res = o.result;
	if (data)
		*data = o.data;
	else
		free(o.data.p);
	if (entries)
		*entries = o.entries;
	else
		json_decref(o.entries);
	return 0;
}

static json_t *request(const struct wr_vm_fsctx *x, const char *op, const char *path)
{
	return json_pack("{s:s, s:s, s:I, s:I}", "op", op, "path", path ? path : "", "uid",
			 (json_int_t)x->uid, "gid", (json_int_t)x->gid);
}

/* A request that answers only ok or an error. */
static int simple(const struct wr_vm_fsctx *x, json_t *req, json_t **res, wr_err *err)
{
	if (req == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	struct call c = {.req = req, .in_fd = -1, .out_fd = -1};
	bool of = false;
	json_t *r = NULL;
	if (fs_call(x->vm, &c, &r, NULL, NULL, &of, err) < 0)
		return -1;
	if (check_result(r, err) < 0) {
		json_decref(r);
		return -1;
	}
	if (res)
		*res = r;
	else
		json_decref(r);
	return 0;
}

/* ---- the remote ops ------------------------------------------------------- */

static int r_stat(void *ctx, const char *path, struct wr_fs_stat *st, wr_err *err)
{
	json_t *res = NULL;
	if (simple(ctx, request(ctx, "stat", path), &res, err) < 0)
		return -1;
	int r = parse_stat(json_object_get(res, "stat"), st, err);
	json_decref(res);
	return r;
}

static int r_exists(void *ctx, const char *path, bool *exists, wr_err *err)
{
	json_t *res = NULL;
	if (simple(ctx, request(ctx, "exists", path), &res, err) < 0)
		return -1;
	json_t *e = json_object_get(res, "exists");
	int r = json_is_boolean(e) ? 0 : bad_answer(err, "exists");
	*exists = json_is_true(e);
	json_decref(res);
	return r;
}

static int do_read(struct wr_vm_fsctx *x, const char *path, uint64_t max, int out_fd,
		   struct wr_buf *data, uint64_t *written, bool *truncated, wr_err *err)
{
	json_t *req = request(x, "read", path);
	if (req == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	uint64_t m = max > INT64_MAX ? INT64_MAX : max;
	json_object_set_new(req, "max", json_integer((json_int_t)m));
	struct call c = {.req = req, .in_fd = -1, .read = true, .out_fd = out_fd, .out_max = m};
	bool of = false;
	json_t *res = NULL;
	if (fs_call(x->vm, &c, &res, data, NULL, &of, err) < 0)
		return -1;
	int r = check_result(res, err);
	json_t *w = json_object_get(res, "written"), *t = json_object_get(res, "truncated");
	if (r == 0 && (!int_in(w, 0, (json_int_t)m) || !json_is_boolean(t)))
		r = bad_answer(err, "read");
	if (r == 0) {
		*written = (uint64_t)json_integer_value(w);
		*truncated = json_is_true(t);
	}
	json_decref(res);
	return r < 0 ? r : *truncated ? 1 : 0;
}

static int r_read(void *ctx, const char *path, uint64_t max, char **data, size_t *len,
		  bool *truncated, wr_err *err)
{
	struct wr_buf b = {0};
	uint64_t written = 0;
	int r = do_read(ctx, path, max, -1, &b, &written, truncated, err);
	if (r >= 0 && (written != b.len || wr_buf_append(&b, "", 1) < 0))
		r = written != b.len ? bad_answer(err, "read size")
				     : wr_err_set(err, ENOMEM, "out of memory");
	if (r < 0) {
		free(b.p);
		return -1;
	}
	*data = b.p;
	*len = b.len - 1;
	return 0;
}

static int r_read_to_fd(void *ctx, const char *path, int out_fd, uint64_t max, uint64_t *written,
			wr_err *err)
{
	bool truncated = false;
	return do_read(ctx, path, max, out_fd, NULL, written, &truncated, err);
}

static json_t *write_req(void *ctx, const char *path, mode_t mode, bool parents, uint64_t max)
{
	json_t *req = request(ctx, "write", path);
	if (req) {
		json_object_set_new(req, "mode", json_integer(mode & 07777));
		json_object_set_new(req, "parents", json_boolean(parents));
		json_object_set_new(
		    req, "max",
		    json_integer((json_int_t)(max > INT64_MAX - 1 ? INT64_MAX - 1 : max)));
	}
	return req;
}

static int do_write(struct wr_vm_fsctx *x, struct call *c, wr_err *err)
{
	if (c->req == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	bool of = false;
	json_t *res = NULL;
	if (fs_call(x->vm, c, &res, NULL, NULL, &of, err) < 0)
		return -1;
	int r = check_result(res, err);
	json_decref(res);
	return r;
}

static int r_write(void *ctx, const char *path, const void *data, size_t len, mode_t mode,
		   bool parents, wr_err *err)
{
	struct call c = {.req = write_req(ctx, path, mode, parents, len),
			 .in_data = data ? data : "",
			 .in_len = len,
			 .in_fd = -1,
			 .in_max = len,
			 .out_fd = -1};
	return do_write(ctx, &c, err);
}

static int r_write_from_fd(void *ctx, const char *path, int in_fd, uint64_t max, mode_t mode,
			   bool parents, wr_err *err)
{
	if (in_fd < 0)
		return wr_err_set(err, EBADF, "write %.256s: no input", path);
	struct call c = {.req = write_req(ctx, path, mode, parents, max),
			 .in_fd = in_fd,
			 .in_max = max > INT64_MAX - 1 ? INT64_MAX - 1 : max,
			 .out_fd = -1};
	return do_write(ctx, &c, err);
}

static int r_list(void *ctx, const char *path, int depth, wr_fs_list_cb cb, void *cbctx,
		  wr_err *err)
{
	struct wr_vm_fsctx *x = ctx;
	if (depth < 1 || depth > WR_FS_LIST_MAX_DEPTH)
		return wr_err_set(err, EINVAL, "list %.256s: depth must be 1 to %d", path,
				  WR_FS_LIST_MAX_DEPTH);
	json_t *req = request(x, "list", path);
	if (req == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	json_object_set_new(req, "depth", json_integer(depth));
	struct call c = {.req = req, .in_fd = -1, .out_fd = -1, .list = true};
	bool of = false;
	json_t *res = NULL, *entries = NULL;
	if (fs_call(x->vm, &c, &res, NULL, &entries, &of, err) < 0)
		return -1;
	int r = check_result(res, err);
	json_decref(res);
	size_t i;
	json_t *e;
	json_array_foreach(entries, i, e)
	{
		if (r != 0)
			break;
		json_t *p = json_object_get(e, "path");
		if (!json_is_string(p) || json_string_length(p) == 0 ||
		    json_string_length(p) >= PATH_MAX ||
		    strlen(json_string_value(p)) != json_string_length(p)) {
			r = bad_answer(err, "list entry");
			break;
		}
		struct wr_fs_stat st;
		if (parse_stat(e, &st, err) < 0) {
			r = -1;
			break;
		}
		r = cb(cbctx, json_string_value(p), &st);
		wr_fs_stat_free(&st);
		if (r < 0)
			r = wr_err_set(err, -r, "list %.256s", path);
	}
	json_decref(entries);
	return r;
}

static int r_mkdir(void *ctx, const char *path, mode_t mode, bool parents, wr_err *err)
{
	json_t *req = request(ctx, "mkdir", path);
	if (req) {
		json_object_set_new(req, "mode", json_integer(mode & 07777));
		json_object_set_new(req, "parents", json_boolean(parents));
	}
	return simple(ctx, req, NULL, err);
}

static int r_remove(void *ctx, const char *path, bool recursive, wr_err *err)
{
	json_t *req = request(ctx, "remove", path);
	if (req)
		json_object_set_new(req, "recursive", json_boolean(recursive));
	return simple(ctx, req, NULL, err);
}

static int r_rename(void *ctx, const char *from, const char *to, wr_err *err)
{
	struct wr_vm_fsctx *x = ctx;
	json_t *req = json_pack("{s:s, s:s, s:s, s:I, s:I}", "op", "rename", "from", from, "to", to,
				"uid", (json_int_t)x->uid, "gid", (json_int_t)x->gid);
	return simple(ctx, req, NULL, err);
}

static int r_symlink(void *ctx, const char *path, const char *target, wr_err *err)
{
	json_t *req = request(ctx, "symlink", path);
	if (req)
		json_object_set_new(req, "target", json_string(target));
	return simple(ctx, req, NULL, err);
}

static const struct wr_fs_remote g_remote = {
    .stat = r_stat,
    .exists = r_exists,
    .read = r_read,
    .read_to_fd = r_read_to_fd,
    .write = r_write,
    .write_from_fd = r_write_from_fd,
    .list = r_list,
    .mkdir = r_mkdir,
    .remove = r_remove,
    .rename = r_rename,
    .symlink = r_symlink,
};

void wr_vm_fs_view(struct wr_vm_fsctx *ctx, struct wr_fs *out)
{
	*out = (struct wr_fs){.root_fd = -1, .remote = &g_remote, .remote_ctx = ctx};
}
