/* libwarren: function calls (POST /v1/functions/call and
 * /v1/functions/batch). */
#include <errno.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_internal.h"
#include "common/cleanup.h"

static int add_files(struct wc_call *c, json_t *j, const warren_call_opts *o)
{
	json_t *files = json_array();
	if (files == NULL || json_object_set_new(j, "files", files) < 0)
		return wc_fail(c, "internal", ENOMEM, "out of memory");
	for (size_t i = 0; i < o->n_files; i++) {
		const warren_call_file *f = &o->files[i];
		if (f->path == NULL || (f->len && f->data == NULL))
			return wc_fail_field(c, "files", "files[%zu]: path and data are required",
					     i);
		json_t *e = json_pack("{s:s}", "path", f->path);
		if (e == NULL || json_array_append_new(files, e) < 0)
			return wc_fail_field(c, "files", "files[%zu].path: not UTF-8", i);
		const char *d = f->len ? f->data : "";
		json_t *text = memchr(d, 0, f->len) ? NULL : json_stringn(d, f->len);
		if (text) {
			json_object_set_new(e, "content", text);
		} else {
			/* Bytes that are not text travel base64-encoded. */
			_cleanup_free_ char *b = malloc((f->len + 2) / 3 * 4 + 1);
			if (b == NULL)
				return wc_fail(c, "internal", ENOMEM, "out of memory");
			int n = EVP_EncodeBlock((unsigned char *)b, (const unsigned char *)d,
						(int)f->len);
			json_object_set_new(e, "content", json_stringn(b, (size_t)n));
			json_object_set_new(e, "encoding", json_string("base64"));
		}
		if (f->mode)
			json_object_set_new(e, "mode", json_integer(f->mode));
	}
	return 0;
}

static int build_call(struct wc_call *c, const warren_call_opts *o, json_t **out)
{
	_cleanup_json_ json_t *j = json_object();
	if (j == NULL)
		return wc_fail(c, "internal", ENOMEM, "out of memory");
	if (o == NULL || o->image == NULL || *o->image == 0)
		return wc_fail_field(c, "image", "image: is required");
	json_object_set_new(j, "image", json_string(o->image));
	if (o->argv) {
		if (o->argv[0] == NULL)
			return wc_fail_field(c, "argv", "argv: is empty");
		json_t *argv = json_array();
		json_object_set_new(j, "argv", argv);
		for (size_t i = 0; o->argv[i]; i++)
			if (json_array_append_new(argv, json_string(o->argv[i])) < 0)
				return wc_fail_field(c, "argv", "argv[%zu]: not UTF-8", i);
	}
	if (o->language && json_object_set_new(j, "language", json_string(o->language)) < 0)
		return wc_fail_field(c, "language", "language: not UTF-8");
	if (o->code && json_object_set_new(j, "code", json_string(o->code)) < 0)
		return wc_fail_field(c, "code", "code: not UTF-8");
	if (o->argv == NULL && o->code == NULL)
		return wc_fail_field(c, "argv",
				     "argv: no command given (argv, or code and language)");
	if (o->n_env) {
		json_t *env;
		if (wc_kv_object(c, "env", o->env, o->n_env, &env) < 0)
			return -EINVAL;
		json_object_set_new(j, "env", env);
	}
	if (o->stdin_data) {
		if (memchr(o->stdin_data, 0, o->stdin_len))
			return wc_fail_field(c, "stdin", "stdin: contains a NUL byte");
		if (json_object_set_new(j, "stdin", json_stringn(o->stdin_data, o->stdin_len)) < 0)
			return wc_fail_field(c, "stdin", "stdin: not UTF-8 text");
	}
	if (o->n_files && add_files(c, j, o) < 0)
		return -EINVAL;
	if (o->timeout < 0 || o->cpu_time < 0)
		return wc_fail_field(c, o->timeout < 0 ? "timeout" : "cpu_time",
				     "%s: must not be negative",
				     o->timeout < 0 ? "timeout" : "cpu_time");
	if (o->timeout > 0)
		json_object_set_new(j, "timeout", json_real(o->timeout));
	if (o->cpu_time > 0)
		json_object_set_new(j, "cpu_time", json_real(o->cpu_time));
	if (o->memory_mb)
		json_object_set_new(j, "memory_mb", json_integer(o->memory_mb));
	if (o->pids)
		json_object_set_new(j, "pids", json_integer(o->pids));
	if (o->output_cap)
		json_object_set_new(j, "output_cap", json_integer(o->output_cap));
	if (o->binary)
		json_object_set_new(j, "encoding", json_string("base64"));
	*out = steal_ptr(&j);
	return 0;
}

static int post(struct wc_call *c, const char *path, json_t *body, json_t **ans)
{
	struct wc_req rq = WC_REQ_INIT("POST", path);
	rq.body = body;
	rq.long_running = true; /* the calls' timeouts bound it */
	struct wc_buf b = {0};
	int r = wc_do(c, &rq, &b);
	if (r >= 0) {
		json_error_t jerr;
		*ans = b.len ? json_loadb(b.p, b.len, 0, &jerr) : NULL;
		if (*ans == NULL)
			r = wc_fail(c, "protocol", EPROTO, "answer is not JSON");
	}
	wc_buf_free(&b);
	return r;
}

int warren_function_call(warren_client *client, const warren_call_opts *opts,
			 warren_exec_result **out, warren_error **errp)
{
	struct wc_call c = {.client = client};
	_cleanup_json_ json_t *req = NULL, *ans = NULL;
	*out = NULL;
	int r = build_call(&c, opts, &req);
	if (r >= 0)
		r = post(&c, "/v1/functions/call", req, &ans);
	if (r >= 0)
		r = wc_parse_result(&c, ans, opts->binary, out);
	return wc_finish(&c, r, errp, "call");
}

static long code_status(const char *code)
{
	if (code && strcmp(code, "unavailable") == 0)
		return 503;
	if (code && strcmp(code, "invalid_argument") == 0)
		return 400;
	return 500;
}

int warren_function_call_batch(warren_client *client, const warren_call_opts *calls, size_t n,
			       unsigned parallel, warren_exec_result **results, warren_error **errs,
			       warren_error **errp)
{
	struct wc_call c = {.client = client};
	_cleanup_json_ json_t *req = json_object(), *ans = NULL;
	json_t *arr = json_array();
	for (size_t i = 0; i < n; i++) {
		results[i] = NULL;
		if (errs)
			errs[i] = NULL;
	}
	int r = 0;
	if (req == NULL || arr == NULL || json_object_set_new(req, "calls", arr) < 0)
		r = wc_fail(&c, "internal", ENOMEM, "out of memory");
	if (r >= 0 && (n == 0 || calls == NULL))
		r = wc_fail_field(&c, "calls", "calls: at least one call");
	for (size_t i = 0; r >= 0 && i < n; i++) {
		json_t *one;
		if ((r = build_call(&c, &calls[i], &one)) < 0) {
			wr_err_wrap(&c.err, "calls[%zu]", i);
			break;
		}
		json_array_append_new(arr, one);
	}
	if (r >= 0 && parallel)
		json_object_set_new(req, "parallel", json_integer(parallel));
	if (r >= 0)
		r = post(&c, "/v1/functions/batch", req, &ans);
	json_t *res = r >= 0 ? json_object_get(ans, "results") : NULL;
	if (r >= 0 && (!json_is_array(res) || json_array_size(res) != n))
		r = wc_fail(&c, "protocol", EPROTO, "batch answer has no result per call");
	for (size_t i = 0; r >= 0 && i < n; i++) {
		json_t *o = json_array_get(res, i), *e = json_object_get(o, "error");
		if (e) {
			if (errs == NULL)
				continue;
			struct wc_call ec = {.client = client};
			_cleanup_free_ char *body = json_dumps(o, JSON_COMPACT);
			const char *code = json_string_value(json_object_get(e, "code"));
			int er =
			    wc_api_error(&ec, code_status(code), body, body ? strlen(body) : 0);
			wc_finish(&ec, er, &errs[i], "calls[%zu]", i);
			continue;
		}
		r = wc_parse_result(&c, o, calls[i].binary, &results[i]);
	}
	if (r < 0) {
		for (size_t i = 0; i < n; i++) {
			warren_exec_result_free(results[i]);
			results[i] = NULL;
			if (errs) {
				warren_error_free(errs[i]);
				errs[i] = NULL;
			}
		}
	}
	return wc_finish(&c, r, errp, "batch");
}
