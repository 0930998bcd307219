/* libwarren: decoding API v1 objects into the public structures. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_internal.h"
#include "common/cleanup.h"

char *wc_jstr(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));
	return s ? strdup(s) : NULL;
}

int64_t wc_jint(json_t *o, const char *key, int64_t dflt)
{
	json_t *v = json_object_get(o, key);
	if (json_is_integer(v))
		return (int64_t)json_integer_value(v);
	if (json_is_real(v))
		return (int64_t)json_real_value(v);
	return dflt;
}

double wc_jnum(json_t *o, const char *key, double dflt)
{
	json_t *v = json_object_get(o, key);
	return json_is_number(v) ? json_number_value(v) : dflt;
}

bool wc_jbool(json_t *o, const char *key)
{
	return json_is_true(json_object_get(o, key));
}

static char *dump(json_t *o)
{
	return o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
}

int wc_kv_object(struct wc_call *c, const char *field, const warren_kv *kv, size_t n, json_t **out)
{
	json_t *o = json_object();
	if (o == NULL)
		return wc_fail(c, "internal", ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		if (kv[i].key == NULL || kv[i].value == NULL || kv[i].key[0] == 0) {
			json_decref(o);
			return wc_fail_field(c, field, "%s: entry %zu has no key or value", field,
					     i);
		}
		if (json_object_set_new(o, kv[i].key, json_string(kv[i].value)) < 0) {
			json_decref(o);
			return wc_fail_field(c, field, "%s: '%s' is not valid UTF-8", field,
					     kv[i].key);
		}
	}
	*out = o;
	return 0;
}

void warren_sandbox_info_free(warren_sandbox_info *info)
{
	if (info == NULL)
		return;
	free(info->id);
	free(info->tier);
	free(info->image);
	free(info->state);
	free(info->created_at);
	free(info->expires_at);
	free(info->workdir);
	for (size_t i = 0; i < info->n_labels; i++) {
		free((char *)info->labels[i].key);
		free((char *)info->labels[i].value);
	}
	free(info->labels);
	free(info->on_timeout);
	free(info->on_idle);
	free(info->lease);
	free(info->pause_reason);
	free(info->harvest_state);
	free(info->json);
	free(info);
}

int wc_parse_info(struct wc_call *c, json_t *o, warren_sandbox_info **out)
{
	if (!json_is_object(o) || !json_is_string(json_object_get(o, "id")))
		return wc_fail(c, "protocol", EPROTO, "answer is not a sandbox object");
	warren_sandbox_info *in = calloc(1, sizeof(*in));
	if (in == NULL)
		return wc_fail(c, "internal", ENOMEM, "out of memory");
	in->id = wc_jstr(o, "id");
	in->tier = wc_jstr(o, "tier");
	in->image = wc_jstr(o, "image");
	in->state = wc_jstr(o, "state");
	in->created_at = wc_jstr(o, "created_at");
	in->expires_at = wc_jstr(o, "expires_at");
	in->cpu = wc_jnum(o, "cpu", 0);
	in->cpu_max = wc_jnum(o, "cpu_max", 0);
	in->memory_mb = wc_jint(o, "memory_mb", 0);
	in->disk_mb = wc_jint(o, "disk_mb", 0);
	in->pids = wc_jint(o, "pids", 0);
	in->user = wc_jint(o, "user", 0);
	in->workdir = wc_jstr(o, "workdir");
	in->idle_timeout = wc_jint(o, "idle_timeout", 0);
	in->on_timeout = wc_jstr(o, "on_timeout");
	in->on_idle = wc_jstr(o, "on_idle");
	in->lease = wc_jstr(o, "lease");
	in->pause_reason = wc_jstr(o, "pause_reason");
	in->timeout_remaining = wc_jnum(o, "timeout_remaining", 0);
	json_t *u = json_object_get(o, "usage");
	if (json_is_object(u)) {
		in->has_usage = true;
		in->usage_cpu_s = wc_jnum(u, "cpu_s", 0);
		in->usage_memory_bytes = wc_jint(u, "memory_bytes", 0);
		in->usage_memory_peak_bytes = wc_jint(u, "memory_peak_bytes", 0);
		in->usage_pids = wc_jint(u, "pids", 0);
		in->usage_cpu_cores = wc_jnum(u, "cpu_cores", 0);
		json_t *h = json_object_get(u, "harvest");
		if (json_is_object(h)) {
			in->harvest_state = wc_jstr(h, "state");
			in->harvest_cpu_weight = wc_jint(h, "cpu_weight", 0);
		}
	}
	in->json = dump(o);
	json_t *labels = json_object_get(o, "labels");
	size_t n = json_is_object(labels) ? json_object_size(labels) : 0;
	if (n) {
		in->labels = calloc(n, sizeof(*in->labels));
		if (in->labels == NULL) {
			warren_sandbox_info_free(in);
			return wc_fail(c, "internal", ENOMEM, "out of memory");
		}
		const char *k;
		json_t *v;
		json_object_foreach(labels, k, v)
		{
			if (!json_is_string(v))
				continue;
			in->labels[in->n_labels].key = strdup(k);
			in->labels[in->n_labels].value = strdup(json_string_value(v));
			in->n_labels++;
		}
	}
	if (in->state == NULL)
		in->state = strdup("unknown");
	*out = in;
	return 0;
}

void warren_exec_result_free(warren_exec_result *res)
{
	if (res == NULL)
		return;
	free(res->reason);
	free(res->stdout_data);
	free(res->stderr_data);
	free(res->json);
	free(res);
}

static const char b64_alpha[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int wc_b64_decode(const char *in, size_t inlen, char **out, size_t *outlen)
{
	char *buf = malloc(inlen / 4 * 3 + 4), *o = buf;
	unsigned int acc = 0;
	int bits = 0;
	if (buf == NULL)
		return -ENOMEM;
	for (size_t i = 0; i < inlen; i++) {
		char ch = in[i];
		if (ch == '=' || ch == '\n' || ch == '\r')
			continue;
		const char *p = ch ? strchr(b64_alpha, ch) : NULL;
		if (p == NULL) {
			free(buf);
			return -EINVAL;
		}
		acc = (acc << 6) | (unsigned int)(p - b64_alpha);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			*o++ = (char)((acc >> bits) & 0xff);
		}
	}
	*o = 0;
	*out = buf;
	*outlen = (size_t)(o - buf);
	return 0;
}

static int get_output(struct wc_call *c, json_t *o, const char *key, bool base64, char **data,
		      size_t *len)
{
	json_t *v = json_object_get(o, key);
	*data = NULL;
	*len = 0;
	if (v == NULL || json_is_null(v))
		return 0;
	if (!json_is_string(v))
		return wc_fail(c, "protocol", EPROTO, "%s: not a string", key);
	const char *s = json_string_value(v);
	size_t n = json_string_length(v);
	if (base64) {
		if (wc_b64_decode(s, n, data, len) < 0)
			return wc_fail(c, "protocol", EPROTO, "%s: not base64", key);
		return 0;
	}
	*data = malloc(n + 1);
	if (*data == NULL)
		return wc_fail(c, "internal", ENOMEM, "out of memory");
	memcpy(*data, s, n);
	(*data)[n] = 0;
	*len = n;
	return 0;
}

int wc_parse_result(struct wc_call *c, json_t *o, bool base64, warren_exec_result **out)
{
	if (!json_is_object(o) || !json_is_integer(json_object_get(o, "exit_code")))
		return wc_fail(c, "protocol", EPROTO, "answer is not a command result");
	warren_exec_result *res = calloc(1, sizeof(*res));
	if (res == NULL)
		return wc_fail(c, "internal", ENOMEM, "out of memory");
	res->exit_code = (int)wc_jint(o, "exit_code", 0);
	res->signal = (int)wc_jint(o, "signal", 0);
	res->reason = wc_jstr(o, "reason");
	res->stdout_truncated = wc_jbool(o, "stdout_truncated");
	res->stderr_truncated = wc_jbool(o, "stderr_truncated");
	res->duration_ms = wc_jnum(o, "duration_ms", 0);
	res->cpu_ms = wc_jnum(o, "cpu_ms", 0);
	res->memory_peak_bytes = wc_jint(o, "memory_peak_bytes", 0);
	res->json = dump(o);
	if (res->reason == NULL)
		res->reason = strdup("exited");
	if (get_output(c, o, "stdout", base64, &res->stdout_data, &res->stdout_len) < 0 ||
	    get_output(c, o, "stderr", base64, &res->stderr_data, &res->stderr_len) < 0) {
		warren_exec_result_free(res);
		return -EPROTO;
	}
	*out = res;
	return 0;
}

void wc_entry_clear(warren_file_entry *e)
{
	free(e->path);
	free(e->name);
	free(e->mtime);
	free(e->target);
	free(e->json);
	memset(e, 0, sizeof(*e));
}

void warren_file_entry_free(warren_file_entry *e)
{
	if (e == NULL)
		return;
	wc_entry_clear(e);
	free(e);
}

void warren_file_list_free(warren_file_list *l)
{
	if (l == NULL)
		return;
	for (size_t i = 0; i < l->count; i++)
		wc_entry_clear(&l->entries[i]);
	free(l->entries);
	free(l);
}

int wc_parse_entry(struct wc_call *c, json_t *o, warren_file_entry *e)
{
	memset(e, 0, sizeof(*e));
	if (!json_is_object(o) || !json_is_string(json_object_get(o, "path")))
		return wc_fail(c, "protocol", EPROTO, "answer is not a file entry");
	e->path = wc_jstr(o, "path");
	e->name = wc_jstr(o, "name");
	const char *type = json_string_value(json_object_get(o, "type"));
	if (type && strcmp(type, "file") == 0)
		e->type = WARREN_FILE_REGULAR;
	else if (type && strcmp(type, "dir") == 0)
		e->type = WARREN_FILE_DIR;
	else if (type && strcmp(type, "symlink") == 0)
		e->type = WARREN_FILE_SYMLINK;
	else
		e->type = WARREN_FILE_OTHER;
	e->size = wc_jint(o, "size", 0);
	json_t *mode = json_object_get(o, "mode");
	if (json_is_string(mode))
		e->mode = (unsigned int)strtoul(json_string_value(mode), NULL, 8) & 07777;
	else if (json_is_integer(mode))
		e->mode = (unsigned int)json_integer_value(mode) & 07777;
	e->uid = wc_jint(o, "uid", 0);
	e->gid = wc_jint(o, "gid", 0);
	json_t *mtime = json_object_get(o, "mtime");
	if (json_is_string(mtime))
		e->mtime = strdup(json_string_value(mtime));
	else if (json_is_number(mtime))
		e->mtime = wc_fmt("%.0f", json_number_value(mtime));
	e->target = wc_jstr(o, "target");
	e->json = dump(o);
	if (e->name == NULL) {
		const char *slash = strrchr(e->path, '/');
		e->name = strdup(slash && slash[1] ? slash + 1 : e->path);
	}
	return 0;
}
