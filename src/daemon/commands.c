#include "daemon/audit.h"
#include "daemon/commands.h"
#include "daemon/cmd_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "common/log.h"
#include "common/util.h"
#include "daemon/api.h"
#include "daemon/jsonutil.h"
#include "daemon/metrics.h"

#define MAX_ARGV 4096

void wrd_cmd_put(struct wrd_cmd *c)
{
	if (c == NULL || atomic_fetch_sub(&c->refs, 1) != 1)
		return;
	json_decref(c->cmd);
	free(c->error);
	free(c->chunks);
	free(c->data);
	if (c->stdin_w >= 0)
		close(c->stdin_w);
	if (c->stdin_r >= 0)
		close(c->stdin_r);
	if (c->argv)
		for (size_t i = 0; c->argv[i]; i++)
			free(c->argv[i]);
	free(c->argv);
	for (size_t i = 0; i < c->n_env; i++) {
		free((char *)c->env[i].key);
		free((char *)c->env[i].value);
	}
	free(c->env);
	free(c->cwd);
	if (c->adopt_pidfd >= 0)
		close(c->adopt_pidfd);
	free(c->adopt_kill);
	json_decref(c->final);
	pthread_mutex_destroy(&c->lock);
	wr_exec_ctl_destroy(&c->ctl);
	pthread_cond_destroy(&c->cv);
	free(c);
}

/* ---- JSON forms --------------------------------------------------------- */

void wrd_result_fields(json_t *o, const struct wr_exec_result *res)
{
	json_object_set_new(o, "exit_code", json_integer(res->exit_code));
	json_object_set_new(o, "signal", json_integer(res->signal));
	json_object_set_new(o, "reason", json_string(wr_exit_reason_name(res->reason)));
	json_object_set_new(o, "stdout_truncated", json_boolean(res->out_truncated));
	json_object_set_new(o, "stderr_truncated", json_boolean(res->err_truncated));
	json_object_set_new(o, "duration_ms", json_real((double)res->duration_ns / 1e6));
	json_object_set_new(o, "cpu_ms", json_real((double)res->cpu_ns / 1e6));
	json_object_set_new(o, "memory_peak_bytes", json_integer((json_int_t)res->memory_peak));
}

/* Output of one stream from the log (caller holds c->lock). */
json_t *wrd_cmd_output(struct wrd_cmd *c, int stream)
{
	size_t n = 0;
	for (size_t i = 0; i < c->nchunks; i++)
		if (c->chunks[i].stream == stream)
			n += c->chunks[i].len;
	char *buf = malloc(n + 1);
	if (buf == NULL)
		return json_string("");
	size_t o = 0;
	for (size_t i = 0; i < c->nchunks; i++)
		if (c->chunks[i].stream == stream) {
			memcpy(buf + o, c->data + c->chunks[i].off, c->chunks[i].len);
			o += c->chunks[i].len;
		}
	json_t *j = wrd_j_output(buf, n, c->base64);
	free(buf);
	return j ? j : json_string("");
}

/* caller holds c->lock */
json_t *wrd_cmd_json(struct wrd_cmd *c, bool full)
{
	json_t *o = json_object();
	json_object_set_new(o, "id", json_string(c->id));
	json_object_set(o, "cmd", c->cmd);
	json_object_set_new(o, "state", json_string(c->done ? "finished" : "running"));
	json_object_set_new(o, "background", json_boolean(c->background));
	if (c->adopted)
		json_object_set_new(o, "output_available", json_false());
	if (!c->done) {
		json_object_set_new(o, "exit_code", json_null());
		json_object_set_new(o, "reason", json_null());
		if (full)
			json_object_set_new(o, "pid", json_integer(wrd_cmd_ns_pid(c)));
		return o;
	}
	if (c->adopted) {
		json_t *f = wrd_cmd_adopted_result(c);
		if (!full) {
			json_object_set(o, "exit_code", json_object_get(f, "exit_code"));
			json_object_set(o, "reason", json_object_get(f, "reason"));
		} else {
			json_object_update(o, f);
			json_object_set_new(o, "stdout", json_string(""));
			json_object_set_new(o, "stderr", json_string(""));
		}
		json_decref(f);
		return o;
	}
	if (c->error) {
		json_object_set_new(o, "exit_code", json_null());
		json_object_set_new(o, "reason", json_string("error"));
		json_object_set_new(o, "error", json_string(c->error));
		return o;
	}
	if (!full) {
		json_object_set_new(o, "exit_code", json_integer(c->res.exit_code));
		json_object_set_new(o, "reason", json_string(wr_exit_reason_name(c->res.reason)));
		return o;
	}
	wrd_result_fields(o, &c->res);
	json_object_set_new(o, "stdout", wrd_cmd_output(c, 1));
	json_object_set_new(o, "stderr", wrd_cmd_output(c, 2));
	return o;
}

/* ---- NDJSON writer ------------------------------------------------------ */

static void nd_line(struct ndjson *o, json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
	json_decref(j);
	if (s == NULL || o->broken) {
		free(s);
		return;
	}
	size_t n = strlen(s);
	s[n] = '\n'; /* replaces the NUL: one write per line */
	if (wr_write_all(o->fd, s, n + 1) < 0)
		o->broken = true;
	free(s);
}

void wrd_nd_data(struct ndjson *o, int stream, const char *buf, size_t len, bool final)
{
	json_t *data;
	if (o->base64) {
		if (len == 0)
			return;
		data = wrd_j_output(buf, len, true);
	} else {
		/* keep a multi-byte character split across chunks whole */
		size_t cl = o->carry_len[stream];
		char *tmp = malloc(cl + len + 1);
		if (tmp == NULL)
			return;
		memcpy(tmp, o->carry[stream], cl);
		memcpy(tmp + cl, buf, len);
		size_t n = cl + len;
		size_t tail = final ? 0 : wrd_utf8_tail(tmp, n);
		memcpy(o->carry[stream], tmp + n - tail, tail);
		o->carry_len[stream] = tail;
		if (n - tail == 0) {
			free(tmp);
			return;
		}
		data = wrd_j_output(tmp, n - tail, false);
		free(tmp);
	}
	json_t *j = json_object();
	json_object_set_new(j, "type", json_string(stream == 1 ? "stdout" : "stderr"));
	json_object_set_new(j, "data", data);
	nd_line(o, j);
}

void wrd_nd_exit(struct ndjson *o, const struct wr_exec_result *res, const char *error)
{
	for (int s = 1; s <= 2; s++)
		if (o->carry_len[s])
			wrd_nd_data(o, s, "", 0, true);
	json_t *j = json_object();
	if (error) {
		json_object_set_new(j, "type", json_string("error"));
		json_t *e = json_object();
		json_object_set_new(e, "code", json_string("internal"));
		json_object_set_new(e, "message", json_string(error));
		json_object_set_new(j, "error", e);
	} else {
		json_object_set_new(j, "type", json_string("exit"));
		wrd_result_fields(j, res);
	}
	nd_line(o, j);
}

void wrd_nd_exit_json(struct ndjson *o, json_t *fields)
{
	json_t *j = json_object();
	json_object_set_new(j, "type", json_string("exit"));
	json_object_update(j, fields);
	nd_line(o, j);
}

/* ---- a running command, through the tier's control ------------------- */

pid_t wrd_cmd_ns_pid(struct wrd_cmd *c)
{
	if (c->adopted)
		return c->done ? 0 : c->adopt_ns_pid;
	return wr_exec_ctl_ns_pid(&c->ctl);
}

/* The tier kills the command's leaf cgroup (v2 cgroup.kill, or freeze and
 * kill on pure v1); a kill before the command starts means it never runs. */
int wrd_cmd_kill_tree(struct wrd_cmd *c)
{
	if (c->adopted)
		return wrd_cmd_adopted_kill(c);
	return wr_exec_ctl_kill(&c->ctl);
}

int wrd_cmd_pidfd(struct wrd_cmd *c)
{
	if (c->adopted)
		return wrd_cmd_adopted_pidfd(c);
	return wr_exec_ctl_pidfd(&c->ctl);
}

/* ---- running ------------------------------------------------------------ */

static int log_output_cb(void *ctx, int stream, const char *buf, size_t len)
{
	struct wrd_cmd *c = ctx;
	pthread_mutex_lock(&c->lock);
	int r = 0;
	if (c->nchunks == c->chunks_cap) {
		size_t nc = c->chunks_cap ? c->chunks_cap * 2 : 64;
		struct chunk *n = realloc(c->chunks, nc * sizeof(*n));
		if (n == NULL) {
			r = 1;
			goto out;
		}
		c->chunks = n;
		c->chunks_cap = nc;
	}
	if (c->data_len + len > c->data_cap) {
		size_t nc = c->data_cap ? c->data_cap : 65536;
		while (nc < c->data_len + len)
			nc *= 2;
		char *n = realloc(c->data, nc);
		if (n == NULL) {
			r = 1;
			goto out;
		}
		c->data = n;
		c->data_cap = nc;
	}
	memcpy(c->data + c->data_len, buf, len);
	c->chunks[c->nchunks++] = (struct chunk){.stream = stream, .off = c->data_len, .len = len};
	c->data_len += len;
	pthread_cond_broadcast(&c->cv);
out:
	pthread_mutex_unlock(&c->lock);
	return r;
}

static int stream_output_cb(void *ctx, int stream, const char *buf, size_t len)
{
	struct ndjson *o = ctx;
	wrd_nd_data(o, stream, buf, len, false);
	return o->broken ? 1 : 0;
}

/* Run the command on this thread; record the result; end the sandbox
 * operation begun by the request. Foreground results are answered here. */
void wrd_cmd_execute(struct wrd_cmd *c, struct ndjson *nd)
{
	struct wrd_sbx *sb = c->sb;
	struct wr_exec_spec spec = {
	    .argv = (const char *const *)c->argv,
	    .env = c->env,
	    .n_env = c->n_env,
	    .cwd = c->cwd,
	    .user = c->user,
	    .group = -1,
	    .timeout_ms = c->timeout_ms,
	    .output_cap = c->output_cap,
	    .stdin_fd = c->stdin_r,
	    .pty = c->pty,
	    .pty_rows = c->rows,
	    .pty_cols = c->cols,
	    .on_pty = c->on_pty,
	    .ctl = &c->ctl,
	};
	if (c->pty) {
		spec.ctx = c->pty_ctx;
	} else if (nd) {
		spec.on_output = stream_output_cb;
		spec.ctx = nd;
	} else if (c->background) {
		spec.on_output = log_output_cb;
		spec.ctx = c;
	}
	pthread_mutex_lock(&c->lock);
	c->tid = gettid();
	pthread_mutex_unlock(&c->lock);
	struct wr_exec_result res;
	_cleanup_err_ wr_err err = NULL;
	int r = sb->ops->exec(sb->tsb, &spec, &res, &err);
	if (c->stdin_r >= 0) {
		close(c->stdin_r);
		c->stdin_r = -1;
	}
	if (r == 0 && !nd && !c->background) {
		/* buffered: move the tier's buffers into the log */
		if (res.out_len)
			log_output_cb(c, 1, res.out, res.out_len);
		if (res.err_len)
			log_output_cb(c, 2, res.err, res.err_len);
		wr_exec_result_free(&res);
	}
	pthread_mutex_lock(&c->lock);
	if (r == 0 && c->kill_requested && res.reason == WR_EXIT_SIGNALED && res.signal == SIGKILL)
		res.reason = WR_EXIT_KILLED; /* DELETE .../commands/{cid} */
	if (r == 0)
		c->res = res;
	else
		c->error = strdup(err && err->msg ? err->msg : "exec failed");
	c->done = true;
	if (c->stdin_w >= 0) {
		close(c->stdin_w);
		c->stdin_w = -1;
	}
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->lock);
	if (nd)
		wrd_nd_exit(nd, &res, r == 0 ? NULL : c->error);
	json_t *d = json_object();
	json_object_set_new(d, "id", json_string(c->id));
	if (r == 0) {
		json_object_set_new(d, "exit_code", json_integer(res.exit_code));
		json_object_set_new(d, "reason", json_string(wr_exit_reason_name(res.reason)));
		json_object_set_new(d, "duration_ms", json_real((double)res.duration_ns / 1e6));
		wrd_metrics_command((double)res.duration_ns / 1e9);
	} else {
		json_object_set_new(d, "error", json_string(c->error ? c->error : "exec failed"));
	}
	wrd_sbx_event(sb, "command_finished", d);
	if (r == 0)
		wrd_audit_command(sb->rec.id, sb->rec.tenant, c->id, &res);
	wrd_cmd_persist_finish(c);
	if (c->req) {
		if (r < 0) {
			wrd_reply_err(c->req, err);
		} else {
			pthread_mutex_lock(&c->lock);
			json_t *o = json_object();
			wrd_result_fields(o, &c->res);
			json_object_set_new(o, "stdout", wrd_cmd_output(c, 1));
			json_object_set_new(o, "stderr", wrd_cmd_output(c, 2));
			pthread_mutex_unlock(&c->lock);
			wrd_reply_json(c->req, 200, o);
		}
	}
}

static void bg_runner(void *arg)
{
	struct wrd_cmd *c = arg;
	struct wrd_sbx *sb = c->sb;
	wrd_cmd_execute(c, NULL);
	wrd_api_done(sb, true);
	wrd_cmd_put(c);
}

/* ---- request parsing ---------------------------------------------------- */

static int parse_argv(struct wrd_req *r, json_t *v, struct wrd_cmd *c)
{
	if (json_is_string(v)) {
		const char *s;
		_cleanup_err_ wr_err err = NULL;
		if (wrd_j_str(v, "cmd", 1 << 20, false, &s, &err) < 0)
			goto bad;
		c->argv = calloc(4, sizeof(char *));
		if (c->argv == NULL || !(c->argv[0] = strdup("sh")) ||
		    !(c->argv[1] = strdup("-c")) || !(c->argv[2] = strdup(s)))
			goto oom;
		return 0;
	}
	if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > MAX_ARGV)
		goto bad;
	c->argv = calloc(json_array_size(v) + 1, sizeof(char *));
	if (c->argv == NULL)
		goto oom;
	size_t i;
	json_t *a;
	json_array_foreach(v, i, a)
	{
		_cleanup_err_ wr_err err = NULL;
		const char *s;
		if (wrd_j_str(a, "cmd", 1 << 20, i > 0, &s, &err) < 0)
			goto bad;
		if ((c->argv[i] = strdup(s)) == NULL)
			goto oom;
	}
	return 0;
bad:
	wrd_reply_error(r, "invalid_argument", "cmd",
			"cmd: must be a non-empty array of strings (at most %d) or a shell "
			"command string, without NUL",
			MAX_ARGV);
	return -1;
oom:
	wrd_reply_error(r, "internal", NULL, "out of memory");
	return -1;
}

static const char *const run_keys[] = {"cmd",	 "env",	     "cwd",	   "user",
				       "stdin",	 "timeout",  "output_cap", "background",
				       "stream", "encoding", NULL};

/* Fill c from the body; also returns the stdin text. */
static int parse_run(struct wrd_req *r, struct wrd_cmd *c, const char **stdin_data,
		     size_t *stdin_len)
{
	json_t *b = r->json;
	_cleanup_err_ wr_err err = NULL;
	if (b == NULL) {
		wrd_reply_error(r, "invalid_argument", "cmd", "cmd: is required");
		return -1;
	}
	if (wrd_api_known_keys(r, b, run_keys) < 0)
		return -1;
	json_t *v = json_object_get(b, "cmd");
	if (v == NULL) {
		wrd_reply_error(r, "invalid_argument", "cmd", "cmd: is required");
		return -1;
	}
	if (parse_argv(r, v, c) < 0)
		return -1;
	c->cmd = json_incref(v);
	if ((v = json_object_get(b, "env"))) {
		if (wrd_api_env(r, v, "env") < 0)
			return -1;
		c->env = calloc(json_object_size(v) + 1, sizeof(*c->env));
		const char *k;
		json_t *ev;
		json_object_foreach(v, k, ev)
		{
			c->env[c->n_env].key = strdup(k);
			c->env[c->n_env].value = strdup(json_string_value(ev));
			c->n_env++;
		}
	}
	const char *s;
	if ((v = json_object_get(b, "cwd"))) {
		if (wrd_j_str(v, "cwd", 4095, false, &s, &err) < 0)
			goto bad;
		c->cwd = strdup(s);
	}
	int64_t x;
	c->user = -1;
	if ((v = json_object_get(b, "user"))) {
		if (wrd_j_int(v, "user", 0, 65535, &x, &err) < 0)
			goto bad;
		c->user = (int)x;
	}
	if ((v = json_object_get(b, "stdin"))) {
		if (wrd_j_str(v, "stdin", WRD_JSON_MAX, true, &s, &err) < 0)
			goto bad;
		*stdin_data = s;
		*stdin_len = json_string_length(v);
	}
	if ((v = json_object_get(b, "timeout"))) {
		double t;
		if (!json_is_number(v) || (t = json_number_value(v)) <= 0 || t > 2592000) {
			wrd_reply_error(r, "invalid_argument", "timeout",
					"timeout: must be a number of seconds > 0 and <= 2592000");
			return -1;
		}
		c->timeout_ms = (uint64_t)(t * 1000.0 + 0.999);
		if (c->timeout_ms == 0)
			c->timeout_ms = 1;
	}
	if ((v = json_object_get(b, "output_cap"))) {
		if (wrd_j_int(v, "output_cap", 1, 256ll << 20, &x, &err) < 0)
			goto bad;
		c->output_cap = (uint64_t)x;
	}
	bool flag;
	if ((v = json_object_get(b, "background"))) {
		if (wrd_j_bool(v, "background", &flag, &err) < 0)
			goto bad;
		c->background = flag;
	}
	if ((v = json_object_get(b, "stream"))) {
		if (wrd_j_bool(v, "stream", &flag, &err) < 0)
			goto bad;
		c->stream = flag;
	}
	if (c->stream && c->background) {
		wrd_reply_error(r, "invalid_argument", "stream",
				"stream: a background command is streamed with GET "
				".../commands/{cid}/stream");
		return -1;
	}
	if ((v = json_object_get(b, "encoding"))) {
		if (wrd_j_str(v, "encoding", 16, false, &s, &err) < 0)
			goto bad;
		if (strcmp(s, "base64") == 0)
			c->base64 = true;
		else if (strcmp(s, "utf-8") != 0) {
			wrd_reply_error(r, "invalid_argument", "encoding",
					"encoding: must be \"utf-8\" or \"base64\"");
			return -1;
		}
	}
	return 0;
bad:
	wrd_reply_err(r, err);
	return -1;
}

static int stdin_pipe(struct wrd_req *r, struct wrd_cmd *c, const char *data, size_t len)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0) {
		wrd_reply_error(r, "internal", NULL, "stdin pipe: %s", strerror(errno));
		return -1;
	}
	c->stdin_r = p[0];
	c->stdin_w = p[1];
	if (len) {
		/* the pipe holds the whole initial text (<= 1 MiB) so this never
		 * waits for the command to read it */
		if (fcntl(p[1], F_SETPIPE_SZ, (int)(len < 4096 ? 4096 : len)) < 0 ||
		    wr_write_all(p[1], data, len) < 0) {
			wrd_reply_error(r, "internal", NULL, "stdin pipe: %s", strerror(errno));
			return -1;
		}
	}
	if (!c->background) {
		close(c->stdin_w);
		c->stdin_w = -1;
	}
	return 0;
}

/* Add c to sb's list under a fresh id; drop the oldest finished records past
 * the limit. */
void wrd_cmd_register(struct wrd_sbx *sb, struct wrd_cmd *c)
{
	struct wrd_cmd *drop = NULL;
	pthread_mutex_lock(&sb->lock);
	snprintf(c->id, sizeof(c->id), "c%u", ++sb->next_cmd);
	atomic_fetch_add(&c->refs, 1); /* the list's */
	struct wrd_cmd **pp = &sb->cmds;
	while (*pp)
		pp = &(*pp)->next;
	*pp = c;
	sb->n_cmds++;
	if (sb->n_cmds > WRD_MAX_CMD_RECORDS) {
		for (pp = &sb->cmds; *pp; pp = &(*pp)->next) {
			pthread_mutex_lock(&(*pp)->lock);
			bool done = (*pp)->done;
			pthread_mutex_unlock(&(*pp)->lock);
			if (done) {
				drop = *pp;
				*pp = drop->next;
				sb->n_cmds--;
				break;
			}
		}
	}
	pthread_mutex_unlock(&sb->lock);
	wrd_cmd_put(drop);
}

struct wrd_cmd *wrd_cmd_new(void)
{
	struct wrd_cmd *c = calloc(1, sizeof(*c));
	if (c == NULL)
		return NULL;
	atomic_init(&c->refs, 1);
	pthread_mutex_init(&c->lock, NULL);
	wr_exec_ctl_init(&c->ctl);
	pthread_cond_init(&c->cv, NULL);
	c->stdin_r = c->stdin_w = -1;
	c->adopt_pidfd = -1;
	c->user = -1;
	return c;
}

void wrd_api_cmd_run(struct wrd_req *r)
{
	struct wrd_cmd *c = wrd_cmd_new();
	if (c == NULL) {
		wrd_reply_error(r, "internal", NULL, "out of memory");
		return;
	}
	const char *stdin_data = NULL;
	size_t stdin_len = 0;
	if (parse_run(r, c, &stdin_data, &stdin_len) < 0) {
		wrd_cmd_put(c);
		return;
	}
	struct wrd_sbx *sb = wrd_api_sandbox(r, true);
	if (sb == NULL) {
		wrd_cmd_put(c);
		return;
	}
	c->sb = sb;
	if ((stdin_data || c->background) && stdin_pipe(r, c, stdin_data, stdin_len) < 0) {
		wrd_api_done(sb, true);
		wrd_cmd_put(c);
		return;
	}
	wrd_cmd_register(sb, c);
	json_t *d = json_object();
	json_object_set_new(d, "id", json_string(c->id));
	json_object_set(d, "cmd", c->cmd);
	json_object_set_new(d, "background", json_boolean(c->background));
	wrd_sbx_event(sb, "command_started", d);

	if (c->background) {
		atomic_fetch_add(&c->refs, 1); /* the runner's */
		if (wrd_spawn_long(bg_runner, c) < 0) {
			pthread_mutex_lock(&c->lock);
			c->done = true;
			c->error = strdup("too many commands in flight");
			pthread_mutex_unlock(&c->lock);
			wrd_reply_error(r, "resource_exhausted", NULL,
					"too many commands in flight (max_commands %u)",
					wrd_mgr_cfg->max_commands);
			wrd_api_done(sb, true);
			wrd_cmd_put(c);
			wrd_cmd_put(c);
			return;
		}
		/* Durable before the answer, like a sandbox's record: a restart
		 * still lists it (cmd_adopt.c). */
		wrd_cmd_persist_start(c);
		pthread_mutex_lock(&c->lock);
		bool done = c->done;
		pthread_mutex_unlock(&c->lock);
		json_t *o = json_object();
		json_object_set_new(o, "id", json_string(c->id));
		json_object_set_new(o, "pid", json_integer(done ? 0 : wrd_cmd_ns_pid(c)));
		json_object_set_new(o, "state", json_string(done ? "finished" : "running"));
		wrd_reply_json(r, 201, o);
		wrd_cmd_put(c);
		return;
	}
	if (c->stream) {
		struct ndjson nd = {.base64 = c->base64};
		nd.fd = wrd_reply_stream(r, 200, "application/x-ndjson");
		if (nd.fd < 0) {
			wrd_api_done(sb, true);
			wrd_cmd_put(c);
			return;
		}
		wrd_cmd_execute(c, &nd);
		close(nd.fd);
	} else {
		c->req = r;
		wrd_cmd_execute(c, NULL);
		c->req = NULL;
	}
	wrd_api_done(sb, true);
	wrd_cmd_put(c);
}

void wrd_cmds_abort(struct wrd_sbx *sb)
{
	pthread_mutex_lock(&sb->lock);
	for (struct wrd_cmd *c = sb->cmds; c; c = c->next) {
		pthread_mutex_lock(&c->lock);
		if (c->stdin_w >= 0) {
			close(c->stdin_w);
			c->stdin_w = -1;
		}
		pthread_mutex_unlock(&c->lock);
	}
	pthread_mutex_unlock(&sb->lock);
}

void wrd_cmds_free(struct wrd_sbx *sb)
{
	struct wrd_cmd *c = sb->cmds;
	sb->cmds = NULL;
	while (c) {
		struct wrd_cmd *next = c->next;
		wrd_cmd_put(c);
		c = next;
	}
}
