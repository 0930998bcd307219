/* libwarren: commands in a sandbox, foreground (whole or streamed as
 * NDJSON) and background (start, wait, stream, stdin, kill). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_internal.h"
#include "common/cleanup.h"

/* Long polls of the wait route when the caller waits without bound. */
#define WC_WAIT_SLICE 30.0

static int build_exec(struct wc_call *c, const warren_exec_opts *o, bool background, bool stream,
		      json_t **out)
{
	_cleanup_json_ json_t *j = json_object();
	if (j == NULL)
		return wc_fail(c, "internal", ENOMEM, "out of memory");
	if (o == NULL || (o->argv == NULL && o->shell == NULL))
		return wc_fail_field(c, "cmd", "cmd: no command given (argv or shell)");
	if (o->argv) {
		json_t *argv = json_array();
		json_object_set_new(j, "cmd", argv);
		if (o->argv[0] == NULL)
			return wc_fail_field(c, "cmd", "cmd: argv is empty");
		for (size_t i = 0; o->argv[i]; i++)
			if (json_array_append_new(argv, json_string(o->argv[i])) < 0)
				return wc_fail_field(c, "cmd", "cmd: argument %zu is not UTF-8", i);
	} else if (json_object_set_new(j, "cmd", json_string(o->shell)) < 0) {
		return wc_fail_field(c, "cmd", "cmd: not UTF-8");
	}
	if (o->n_env) {
		json_t *env;
		if (wc_kv_object(c, "env", o->env, o->n_env, &env) < 0)
			return -EINVAL;
		json_object_set_new(j, "env", env);
	}
	if (o->cwd && json_object_set_new(j, "cwd", json_string(o->cwd)) < 0)
		return wc_fail_field(c, "cwd", "cwd: not UTF-8");
	if (o->user_set)
		json_object_set_new(j, "user", json_integer(o->user));
	if (o->stdin_data) {
		if (memchr(o->stdin_data, 0, o->stdin_len))
			return wc_fail_field(c, "stdin", "stdin: contains a NUL byte");
		if (json_object_set_new(j, "stdin", json_stringn(o->stdin_data, o->stdin_len)) < 0)
			return wc_fail_field(c, "stdin", "stdin: not UTF-8 text");
	}
	if (o->timeout < 0)
		return wc_fail_field(c, "timeout", "timeout: must not be negative");
	if (o->timeout > 0)
		json_object_set_new(j, "timeout", json_real(o->timeout));
	if (o->output_cap)
		json_object_set_new(j, "output_cap", json_integer(o->output_cap));
	if (o->binary)
		json_object_set_new(j, "encoding", json_string("base64"));
	if (background)
		json_object_set_new(j, "background", json_true());
	if (stream)
		json_object_set_new(j, "stream", json_true());
	*out = steal_ptr(&j);
	return 0;
}

struct stream_ctx {
	warren_output_cb cb;
	void *ctx;
	bool base64;
	warren_exec_result *res;
};

static int on_stream_line(void *ud, json_t *o, struct wc_call *c)
{
	struct stream_ctx *s = ud;
	const char *type = json_string_value(json_object_get(o, "type"));
	if (type == NULL)
		return wc_fail(c, "protocol", EPROTO, "stream line without a type");
	if (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0) {
		json_t *d = json_object_get(o, "data");
		if (!json_is_string(d))
			return wc_fail(c, "protocol", EPROTO, "%s line without data", type);
		const char *data = json_string_value(d);
		size_t len = json_string_length(d);
		_cleanup_free_ char *raw = NULL;
		if (s->base64) {
			if (wc_b64_decode(data, len, &raw, &len) < 0)
				return wc_fail(c, "protocol", EPROTO, "%s data is not base64",
					       type);
			data = raw;
		}
		int stream = type[3] == 'o' ? WARREN_STDOUT : WARREN_STDERR;
		if (s->cb && len && s->cb(s->ctx, stream, data, len) != 0)
			return wc_fail(c, "cancelled", ECANCELED,
				       "output callback stopped the stream");
		return 0;
	}
	if (strcmp(type, "exit") == 0) {
		warren_exec_result_free(s->res);
		s->res = NULL;
		return wc_parse_result(c, o, s->base64, &s->res);
	}
	if (strcmp(type, "error") == 0) {
		_cleanup_free_ char *body = json_dumps(o, JSON_COMPACT);
		int r = wc_api_error(c, 500, body, body ? strlen(body) : 0);
		c->http_status = 0;
		return r;
	}
	return 0; /* a line type of a later API version */
}

static int run_stream(struct wc_call *c, const char *method, const char *path, json_t *body,
		      struct stream_ctx *s)
{
	struct wc_req rq = WC_REQ_INIT(method, path);
	rq.body = body;
	rq.long_running = true;
	rq.on_line = on_stream_line;
	rq.line_ctx = s;
	int r = wc_do(c, &rq, NULL);
	if (r < 0)
		return r;
	if (s->res == NULL)
		return wc_fail(c, "protocol", EPROTO,
			       "the output stream ended without an exit line");
	return 0;
}

int warren_sandbox_exec(warren_sandbox *sb, const warren_exec_opts *opts, warren_exec_result **out,
			warren_error **errp)
{
	struct wc_call c = {.client = sb->client};
	_cleanup_json_ json_t *req = NULL, *ans = NULL;
	_cleanup_free_ char *path = wc_fmt("/v1/sandboxes/%s/commands", sb->id);
	bool stream = opts && opts->on_output;
	*out = NULL;
	int r = build_exec(&c, opts, false, stream, &req);
	if (r >= 0 && stream) {
		struct stream_ctx s = {
		    .cb = opts->on_output, .ctx = opts->ctx, .base64 = opts->binary};
		r = run_stream(&c, "POST", path, req, &s);
		if (r >= 0)
			*out = s.res;
		else
			warren_exec_result_free(s.res);
	} else if (r >= 0) {
		struct wc_req rq = WC_REQ_INIT("POST", path);
		struct wc_buf b = {0};
		rq.body = req;
		rq.long_running = true;
		r = wc_do(&c, &rq, &b);
		json_error_t jerr;
		if (r >= 0 && (ans = json_loadb(b.p ? b.p : "", b.len, 0, &jerr)) == NULL)
			r = wc_fail(&c, "protocol", EPROTO, "answer is not JSON: %s", jerr.text);
		wc_buf_free(&b);
		if (r >= 0)
			r = wc_parse_result(&c, ans, opts->binary, out);
	}
	return wc_finish(&c, r < 0 ? r : 0, errp, "exec in sandbox %s", sb->id);
}

static int new_command(struct wc_call *c, warren_sandbox *sb, const char *id, warren_command **out)
{
	warren_command *cmd = calloc(1, sizeof(*cmd));
	if (cmd == NULL || (cmd->id = strdup(id)) == NULL) {
		free(cmd);
		return wc_fail(c, "internal", ENOMEM, "out of memory");
	}
	cmd->sb = sb;
	*out = cmd;
	return 0;
}

int warren_command_start(warren_sandbox *sb, const warren_exec_opts *opts, warren_command **out,
			 warren_error **errp)
{
	struct wc_call c = {.client = sb->client};
	_cleanup_json_ json_t *req = NULL, *ans = NULL;
	_cleanup_free_ char *path = wc_fmt("/v1/sandboxes/%s/commands", sb->id);
	*out = NULL;
	int r = build_exec(&c, opts, true, false, &req);
	if (r >= 0)
		r = wc_json(&c, "POST", path, req, &ans);
	const char *id = json_string_value(json_object_get(ans, "id"));
	if (r >= 0 && id == NULL)
		r = wc_fail(&c, "protocol", EPROTO, "answer has no command id");
	if (r >= 0)
		r = new_command(&c, sb, id, out);
	if (r >= 0)
		(*out)->binary = opts->binary;
	return wc_finish(&c, r < 0 ? r : 0, errp, "start command in sandbox %s", sb->id);
}

int warren_command_open(warren_sandbox *sb, const char *id, warren_command **out,
			warren_error **errp)
{
	struct wc_call c = {.client = sb->client};
	*out = NULL;
	int r = wc_check_id(&c, "command", id);
	if (r >= 0)
		r = new_command(&c, sb, id, out);
	return wc_finish(&c, r < 0 ? r : 0, errp, "command");
}

const char *warren_command_id(const warren_command *cmd)
{
	return cmd ? cmd->id : NULL;
}

void warren_command_free(warren_command *cmd)
{
	if (cmd == NULL)
		return;
	free(cmd->id);
	free(cmd);
}

/* 1 with *out when the command object says it ended, 0 when running. */
static int command_result(struct wc_call *c, json_t *o, bool base64, warren_exec_result **out)
{
	const char *state = json_string_value(json_object_get(o, "state"));
	if (!json_is_object(o))
		return wc_fail(c, "protocol", EPROTO, "answer is not a command");
	if (state && strcmp(state, "running") == 0)
		return 0;
	const char *failed = json_string_value(json_object_get(o, "error"));
	if (failed)
		return wc_fail(c, "internal", EIO, "%s", failed);
	json_t *res = json_object_get(o, "result");
	int r = wc_parse_result(c, json_is_object(res) ? res : o, base64, out);
	return r < 0 ? r : 1;
}

int warren_command_wait(warren_command *cmd, double timeout, warren_exec_result **out,
			warren_error **errp)
{
	warren_sandbox *sb = cmd->sb;
	struct wc_call c = {.client = sb->client};
	bool forever = timeout <= 0;
	int r;
	*out = NULL;
	do {
		double slice = forever || timeout > WC_WAIT_SLICE ? WC_WAIT_SLICE : timeout;
		_cleanup_free_ char *path = wc_fmt("/v1/sandboxes/%s/commands/%s/wait?timeout=%.3f",
						   sb->id, cmd->id, slice);
		_cleanup_json_ json_t *ans = NULL;
		struct wc_req rq = WC_REQ_INIT("GET", path);
		struct wc_buf b = {0};
		rq.long_running = true;
		r = wc_do(&c, &rq, &b);
		json_error_t jerr;
		if (r >= 0 && (ans = json_loadb(b.p ? b.p : "", b.len, 0, &jerr)) == NULL)
			r = wc_fail(&c, "protocol", EPROTO, "answer is not JSON: %s", jerr.text);
		wc_buf_free(&b);
		if (r >= 0)
			r = command_result(&c, ans, cmd->binary, out);
		if (!forever)
			timeout -= slice;
	} while (r == 0 && (forever || timeout > 0));
	return wc_finish(&c, r, errp, "wait for command %s", cmd->id);
}

int warren_command_stream(warren_command *cmd, warren_output_cb cb, void *ctx,
			  warren_exec_result **out, warren_error **errp)
{
	warren_sandbox *sb = cmd->sb;
	struct wc_call c = {.client = sb->client};
	_cleanup_free_ char *path = wc_fmt("/v1/sandboxes/%s/commands/%s/stream", sb->id, cmd->id);
	struct stream_ctx s = {.cb = cb, .ctx = ctx, .base64 = cmd->binary};
	*out = NULL;
	int r = run_stream(&c, "GET", path, NULL, &s);
	if (r >= 0)
		*out = s.res;
	else
		warren_exec_result_free(s.res);
	return wc_finish(&c, r < 0 ? r : 0, errp, "stream command %s", cmd->id);
}

int warren_command_send_stdin(warren_command *cmd, const void *data, size_t len, bool eof,
			      warren_error **errp)
{
	warren_sandbox *sb = cmd->sb;
	struct wc_call c = {.client = sb->client};
	_cleanup_free_ char *path = wc_fmt("/v1/sandboxes/%s/commands/%s/stdin", sb->id, cmd->id);
	_cleanup_json_ json_t *req = json_object();
	int r = 0;
	if (len && (data == NULL || memchr(data, 0, len)))
		r = wc_fail_field(&c, "data", "data: contains a NUL byte");
	else if (json_object_set_new(req, "data", json_stringn(data ? data : "", len)) < 0)
		r = wc_fail_field(&c, "data", "data: not UTF-8 text");
	if (r >= 0) {
		json_object_set_new(req, "eof", json_boolean(eof));
		r = wc_json(&c, "POST", path, req, NULL);
	}
	return wc_finish(&c, r < 0 ? r : 0, errp, "stdin of command %s", cmd->id);
}

int warren_command_kill(warren_command *cmd, warren_error **errp)
{
	warren_sandbox *sb = cmd->sb;
	struct wc_call c = {.client = sb->client};
	_cleanup_free_ char *path = wc_fmt("/v1/sandboxes/%s/commands/%s", sb->id, cmd->id);
	int r = wc_json(&c, "DELETE", path, NULL, NULL);
	return wc_finish(&c, r < 0 ? r : 0, errp, "kill command %s", cmd->id);
}
