/* qemu-guest-agent client (see qga.h). The guest is untrusted: lines are
 * bounded, base64 is decoded with length checks, and every wait has a
 * deadline. */
#include "tiers/qga.h"

#include <errno.h>
#include <openssl/evp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"

#define QGA_LINE_MAX (48u << 20) /* a 16 MiB output in base64, with room */
#define QGA_DEFAULT_CAP (16u << 20)

struct wr_qga {
	int fd;
	char *buf;
	size_t have, cap;
	bool synced;
	unsigned long sync_id;
};

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int wr_qga_new(int fd, struct wr_qga **out, wr_err *err)
{
	struct wr_qga *q = calloc(1, sizeof(*q));
	if (q == NULL) {
		close(fd);
		return wr_err_set(err, ENOMEM, "out of memory");
	}
	q->fd = fd;
	q->sync_id = (unsigned long)now_ms() & 0xfffffff;
	*out = q;
	return 0;
}

void wr_qga_free(struct wr_qga **q)
{
	if (*q == NULL)
		return;
	close((*q)->fd);
	free((*q)->buf);
	free(*q);
	*q = NULL;
}

static int fill(struct wr_qga *q, int64_t deadline, wr_err *err)
{
	if (q->have == q->cap) {
		if (q->cap >= QGA_LINE_MAX)
			return wr_err_set(err, EPROTO, "guest agent: message over %u bytes",
					  QGA_LINE_MAX);
		size_t cap = q->cap ? q->cap * 2 : 65536;
		char *b = realloc(q->buf, cap);
		if (b == NULL)
			return wr_err_set(err, ENOMEM, "out of memory");
		q->buf = b;
		q->cap = cap;
	}
	int left = (int)(deadline - now_ms());
	if (left <= 0)
		return wr_err_set(err, ETIMEDOUT, "guest agent: no answer");
	struct pollfd p = {.fd = q->fd, .events = POLLIN};
	int r = poll(&p, 1, left);
	if (r < 0)
		return errno == EINTR ? 0 : wr_err_sys(err, "guest agent: poll");
	if (r == 0)
		return wr_err_set(err, ETIMEDOUT, "guest agent: no answer");
	ssize_t n = read(q->fd, q->buf + q->have, q->cap - q->have);
	if (n == 0)
		return wr_err_set(err, EPIPE, "guest agent: the VM closed its channel");
	if (n < 0)
		return errno == EINTR || errno == EAGAIN ? 0 : wr_err_sys(err, "guest agent: read");
	q->have += (size_t)n;
	return 0;
}

/* The next JSON object line; 0xFF bytes (sync delimiters) are skipped. */
static int read_msg(struct wr_qga *q, int64_t deadline, json_t **out, wr_err *err)
{
	for (;;) {
		size_t skip = 0;
		while (skip < q->have && (unsigned char)q->buf[skip] == 0xff)
			skip++;
		if (skip) {
			memmove(q->buf, q->buf + skip, q->have - skip);
			q->have -= skip;
		}
		char *nl = q->have ? memchr(q->buf, '\n', q->have) : NULL;
		if (nl) {
			size_t len = (size_t)(nl - q->buf);
			json_error_t je;
			json_t *j = json_loadb(q->buf, len, 0, &je);
			memmove(q->buf, nl + 1, q->have - len - 1);
			q->have -= len + 1;
			if (!json_is_object(j)) {
				json_decref(j);
				return wr_err_set(err, EPROTO, "guest agent: malformed message");
			}
			*out = j;
			return 0;
		}
		if (fill(q, deadline, err) < 0)
			return -1;
	}
}

static int send_json(struct wr_qga *q, json_t *j, wr_err *err)
{
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (s == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	size_t n = strlen(s);
	s[n] = '\n';
	ssize_t w = wr_write_all(q->fd, s, n + 1);
	free(s);
	return w < 0 ? wr_err_sys(err, "guest agent: write") : 0;
}

int wr_qga_sync(struct wr_qga *q, int timeout_ms, wr_err *err)
{
	int64_t deadline = now_ms() + timeout_ms;
	for (;;) {
		unsigned long id = ++q->sync_id;
		if (send_json(q,
			      json_pack("{s:s, s:{s:I}}", "execute", "guest-sync-delimited",
					"arguments", "id", (json_int_t)id),
			      err) < 0)
			return -1;
		/* answers to earlier syncs and late answers are dropped until ours
		 * comes; an agent still starting answers nothing: ask again */
		int64_t step = now_ms() + 1000;
		for (;;) {
			json_t *m = NULL;
			wr_err e = NULL;
			int r = read_msg(q, step < deadline ? step : deadline, &m, &e);
			if (r < 0) {
				int code = wr_err_code(e);
				if (code == ETIMEDOUT && now_ms() < deadline) {
					wr_err_free(&e);
					break;
				}
				*err = e;
				return wr_err_wrap(err, "guest agent not ready");
			}
			json_t *ret = json_object_get(m, "return");
			bool ours =
			    json_is_integer(ret) && (unsigned long)json_integer_value(ret) == id;
			json_decref(m);
			if (ours) {
				q->synced = true;
				return 0;
			}
		}
	}
}

int wr_qga_cmd(struct wr_qga *q, const char *cmd, json_t *args, int timeout_ms, json_t **ret,
	       wr_err *err)
{
	if (!q->synced && wr_qga_sync(q, timeout_ms, err) < 0)
		return -1;
	json_t *req = json_pack("{s:s}", "execute", cmd);
	if (req && args)
		json_object_set(req, "arguments", args);
	if (send_json(q, req, err) < 0)
		return wr_err_wrap(err, "%s", cmd);
	json_t *m = NULL;
	if (read_msg(q, now_ms() + timeout_ms, &m, err) < 0) {
		q->synced = false; /* a late answer may come: resync next time */
		return wr_err_wrap(err, "%s", cmd);
	}
	json_t *e = json_object_get(m, "error");
	int r = 0;
	if (e)
		r = wr_err_set(err, EIO, "%s: %s: %s", cmd,
			       json_string_value(json_object_get(e, "class")) ?: "?",
			       json_string_value(json_object_get(e, "desc")) ?: "?");
	else if (!json_object_get(m, "return"))
		r = wr_err_set(err, EPROTO, "%s: answer without a return", cmd);
	else if (ret)
		*ret = json_incref(json_object_get(m, "return"));
	json_decref(m);
	return r;
}

/* wr_qga_cmd that consumes args (for json_pack in the call). */
static int cmd_take(struct wr_qga *q, const char *cmd, json_t *args, int timeout_ms, json_t **ret,
		    wr_err *err)
{
	int r = wr_qga_cmd(q, cmd, args, timeout_ms, ret, err);
	json_decref(args);
	return r;
}

/* ---- base64 -------------------------------------------------------------- */

static char *b64_encode(const char *data, size_t len)
{
	char *out = malloc(4 * ((len + 2) / 3) + 1);
	if (out)
		EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)data, (int)len);
	return out;
}

/* Decodes up to cap bytes into *buf (appended); *trunc when more came. */
static int b64_decode_append(const char *s, struct wr_buf *b, size_t cap, bool *trunc)
{
	size_t len = strlen(s);
	if (len % 4)
		return -EBADMSG;
	unsigned char *tmp = malloc(len / 4 * 3 + 1);
	if (tmp == NULL)
		return -ENOMEM;
	int n = len ? EVP_DecodeBlock(tmp, (const unsigned char *)s, (int)len) : 0;
	if (n < 0) {
		free(tmp);
		return -EBADMSG;
	}
	/* EVP_DecodeBlock counts the padding as zero bytes */
	if (len && s[len - 1] == '=')
		n--;
	if (len > 1 && s[len - 2] == '=')
		n--;
	size_t take = (size_t)n;
	if (b->len + take > cap) {
		take = cap > b->len ? cap - b->len : 0;
		*trunc = true;
	}
	int r = take ? wr_buf_append(b, tmp, take) : 0;
	free(tmp);
	return r;
}

/* ---- exec ------------------------------------------------------------------ */

void wr_qga_result_free(struct wr_qga_result *r)
{
	free(r->out);
	free(r->err);
	r->out = r->err = NULL;
}

int wr_qga_run(struct wr_qga *q, const struct wr_qga_exec *x, struct wr_qga_result *res,
	       wr_err *err)
{
	memset(res, 0, sizeof(*res));
	if (x->argv == NULL || x->argv[0] == NULL)
		return wr_err_field(err, "cmd", "the command is empty");
	json_t *args =
	    json_pack("{s:s, s:[], s:b}", "path", x->argv[0], "arg", "capture-output", 1);
	for (size_t i = 1; x->argv[i]; i++)
		json_array_append_new(json_object_get(args, "arg"), json_string(x->argv[i]));
	if (x->env) {
		json_t *env = json_array();
		for (size_t i = 0; x->env[i]; i++)
			json_array_append_new(env, json_string(x->env[i]));
		json_object_set_new(args, "env", env);
	}
	if (x->input && x->input_len) {
		char *in = b64_encode(x->input, x->input_len);
		json_object_set_new(args, "input-data", json_string(in ? in : ""));
		free(in);
	}
	json_t *ret = NULL;
	if (cmd_take(q, "guest-exec", args, 30000, &ret, err) < 0)
		return -1;
	json_int_t pid = json_integer_value(json_object_get(ret, "pid"));
	json_decref(ret);
	if (pid <= 0)
		return wr_err_set(err, EPROTO, "guest-exec: no pid in the answer");
	int64_t start = now_ms(), deadline = x->timeout_ms ? start + (int64_t)x->timeout_ms : 0;
	size_t cap = x->output_cap ? x->output_cap : QGA_DEFAULT_CAP;
	int delay = 5;
	for (;;) {
		json_t *st = NULL;
		if (cmd_take(q, "guest-exec-status", json_pack("{s:I}", "pid", pid), 30000, &st,
			     err) < 0)
			return -1;
		if (json_is_true(json_object_get(st, "exited"))) {
			struct wr_buf out = {0}, errb = {0};
			const char *o = json_string_value(json_object_get(st, "out-data"));
			const char *e = json_string_value(json_object_get(st, "err-data"));
			int r = 0;
			if ((o && (r = b64_decode_append(o, &out, cap, &res->out_truncated)) < 0) ||
			    (e &&
			     (r = b64_decode_append(e, &errb, cap, &res->err_truncated)) < 0) ||
			    (r = wr_buf_append(&out, "", 1)) < 0 ||
			    (r = wr_buf_append(&errb, "", 1)) < 0) {
				json_decref(st);
				free(out.p);
				free(errb.p);
				return wr_err_set(err, -r, "guest-exec-status: bad output data");
			}
			res->out_truncated |= json_is_true(json_object_get(st, "out-truncated"));
			res->err_truncated |= json_is_true(json_object_get(st, "err-truncated"));
			res->out = out.p;
			res->out_len = out.len - 1;
			res->err = errb.p;
			res->err_len = errb.len - 1;
			res->exited = true;
			res->exit_code = (int)json_integer_value(json_object_get(st, "exitcode"));
			res->signal = (int)json_integer_value(json_object_get(st, "signal"));
			json_decref(st);
			return 0;
		}
		json_decref(st);
		if (deadline && now_ms() >= deadline && !res->timed_out) {
			/* the protocol has no kill: the guest's kill(1) does it */
			char ps[32];
			snprintf(ps, sizeof(ps), "%lld", (long long)pid);
			json_t *kargs =
			    json_pack("{s:s, s:[s, s]}", "path", "/bin/kill", "arg", "-KILL", ps);
			json_t *kr = NULL;
			wr_err ke = NULL;
			if (cmd_take(q, "guest-exec", kargs, 30000, &kr, &ke) < 0)
				wr_err_free(&ke);
			json_decref(kr);
			res->timed_out = true;
		}
		struct timespec ts = {0, (long)delay * 1000000};
		nanosleep(&ts, NULL);
		if (delay < 100)
			delay *= 2;
	}
}

/* ---- files ------------------------------------------------------------------ */

static int file_open(struct wr_qga *q, const char *path, const char *mode, json_int_t *h,
		     wr_err *err)
{
	json_t *ret = NULL;
	if (cmd_take(q, "guest-file-open", json_pack("{s:s, s:s}", "path", path, "mode", mode),
		     30000, &ret, err) < 0)
		return -1;
	*h = json_integer_value(ret);
	json_decref(ret);
	return 0;
}

static void file_close(struct wr_qga *q, json_int_t h)
{
	wr_err e = NULL;
	if (cmd_take(q, "guest-file-close", json_pack("{s:I}", "handle", h), 30000, NULL, &e) < 0)
		wr_err_free(&e);
}

int wr_qga_read_file(struct wr_qga *q, const char *path, size_t max, char **data, size_t *len,
		     wr_err *err)
{
	json_int_t h;
	if (file_open(q, path, "r", &h, err) < 0)
		return -1;
	struct wr_buf b = {0};
	bool trunc = false;
	int r = 0;
	for (;;) {
		json_t *ret = NULL;
		if ((r = cmd_take(q, "guest-file-read",
				  json_pack("{s:I, s:I}", "handle", h, "count", (json_int_t)65536),
				  30000, &ret, err)) < 0)
			break;
		const char *s = json_string_value(json_object_get(ret, "buf-b64"));
		bool eof = json_is_true(json_object_get(ret, "eof"));
		if (s && (r = b64_decode_append(s, &b, max, &trunc)) < 0) {
			json_decref(ret);
			r = wr_err_set(err, -r, "guest-file-read: bad data");
			break;
		}
		json_decref(ret);
		if (trunc) {
			r = wr_err_set(err, EFBIG, "%s: over %zu bytes", path, max);
			break;
		}
		if (eof)
			break;
	}
	file_close(q, h);
	if (r == 0 && wr_buf_append(&b, "", 1) < 0)
		r = wr_err_set(err, ENOMEM, "out of memory");
	if (r < 0) {
		free(b.p);
		return r;
	}
	*data = b.p;
	*len = b.len - 1;
	return 0;
}

int wr_qga_write_file(struct wr_qga *q, const char *path, const char *data, size_t len, wr_err *err)
{
	json_int_t h;
	if (file_open(q, path, "w", &h, err) < 0)
		return -1;
	int r = 0;
	for (size_t off = 0; off < len || (off == 0 && len == 0);) {
		size_t n = len - off > 49152 ? 49152 : len - off;
		char *s = b64_encode(data + off, n);
		if (s == NULL) {
			r = wr_err_set(err, ENOMEM, "out of memory");
			break;
		}
		r = cmd_take(q, "guest-file-write",
			     json_pack("{s:I, s:s}", "handle", h, "buf-b64", s), 30000, NULL, err);
		free(s);
		if (r < 0 || len == 0)
			break;
		off += n;
	}
	file_close(q, h);
	return r;
}

char *wr_qga_b64(const void *data, size_t len)
{
	return b64_encode(data, len);
}

int wr_qga_unb64(const char *s, struct wr_buf *b, size_t cap, bool *trunc)
{
	return b64_decode_append(s, b, cap, trunc);
}
