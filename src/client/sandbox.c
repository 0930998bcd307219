/* libwarren: sandboxes (create, connect, info, list, kill, timeout), events
 * and health. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_internal.h"
#include "common/cleanup.h"

/* Takes ownership of *info. */
static int new_handle(struct wc_call *c, warren_client *cl, warren_sandbox_info **info,
		      warren_sandbox **out)
{
	warren_sandbox *sb = calloc(1, sizeof(*sb));
	if (sb == NULL || (sb->id = strdup((*info)->id)) == NULL) {
		free(sb);
		return wc_fail(c, "internal", ENOMEM, "out of memory");
	}
	sb->client = cl;
	sb->info = steal_ptr(info);
	*out = sb;
	return 0;
}

static int set_int(json_t *o, const char *key, int64_t v)
{
	return json_object_set_new(o, key, json_integer(v));
}

static int set_str(struct wc_call *c, json_t *o, const char *key, const char *v)
{
	if (json_object_set_new(o, key, json_string(v)) < 0)
		return wc_fail_field(c, key, "%s: not valid UTF-8", key);
	return 0;
}

/* Version 2's fields: layers, pull, registry_auth. */
static int build_create_v2(struct wc_call *c, const warren_sandbox_opts *o, json_t *j)
{
	if (o->n_layers) {
		if (o->layers == NULL || o->n_layers > 16)
			return wc_fail_field(c, "layers", "layers: 1 to 16 image references");
		json_t *a = json_array();
		json_object_set_new(j, "layers", a);
		for (size_t i = 0; i < o->n_layers; i++) {
			if (o->layers[i] == NULL || o->layers[i][0] == 0)
				return wc_fail_field(c, "layers", "layers[%zu]: must not be empty",
						     i);
			json_t *s = json_string(o->layers[i]);
			if (s == NULL)
				return wc_fail_field(c, "layers", "layers[%zu]: must be UTF-8", i);
			json_array_append_new(a, s);
		}
	}
	if (o->pull && set_str(c, j, "pull", o->pull) < 0)
		return -EINVAL;
	const warren_registry_auth *a = o->registry_auth;
	if (a && (a->username || a->password || a->token)) {
		if ((a->username != NULL) != (a->password != NULL))
			return wc_fail_field(c, "registry_auth",
					     "registry_auth: username and password go together");
		if (a->token && a->username)
			return wc_fail_field(c, "registry_auth",
					     "registry_auth: give a username and password or a "
					     "token");
		json_t *ra = json_object();
		json_object_set_new(j, "registry_auth", ra);
		if ((a->token && set_str(c, ra, "token", a->token) < 0) ||
		    (a->username && (set_str(c, ra, "username", a->username) < 0 ||
				     set_str(c, ra, "password", a->password) < 0)))
			return -EINVAL;
	}
	return 0;
}

static int build_create(struct wc_call *c, const warren_sandbox_opts *o, json_t **out)
{
	_cleanup_json_ json_t *j = json_object();
	if (j == NULL)
		return wc_fail(c, "internal", ENOMEM, "out of memory");
	if (o->image == NULL || *o->image == 0)
		return wc_fail_field(c, "image", "image: is required");
	if (set_str(c, j, "image", o->image) < 0)
		return -EINVAL;
	if (o->tier && set_str(c, j, "tier", o->tier) < 0)
		return -EINVAL;
	if (o->cpu > 0)
		json_object_set_new(j, "cpu", json_real(o->cpu));
	else if (o->cpu < 0)
		return wc_fail_field(c, "cpu", "cpu: must not be negative");
	if (o->memory_mb)
		set_int(j, "memory_mb", o->memory_mb);
	if (o->disk_mb)
		set_int(j, "disk_mb", o->disk_mb);
	if (o->pids)
		set_int(j, "pids", o->pids);
	if (o->n_env) {
		json_t *env;
		if (wc_kv_object(c, "env", o->env, o->n_env, &env) < 0)
			return -EINVAL;
		json_object_set_new(j, "env", env);
	}
	if (o->workdir && set_str(c, j, "workdir", o->workdir) < 0)
		return -EINVAL;
	if (o->user_set)
		set_int(j, "user", o->user);
	if (o->n_labels) {
		json_t *labels;
		if (wc_kv_object(c, "labels", o->labels, o->n_labels, &labels) < 0)
			return -EINVAL;
		json_object_set_new(j, "labels", labels);
	}
	if (o->timeout)
		set_int(j, "timeout", o->timeout);
	if (o->idle_timeout)
		set_int(j, "idle_timeout", o->idle_timeout);
	if (o->on_timeout && set_str(c, j, "on_timeout", o->on_timeout) < 0)
		return -EINVAL;
	if (o->version >= 2 && build_create_v2(c, o, j) < 0)
		return -EINVAL;
	if (o->version >= 3 && ((o->on_idle && set_str(c, j, "on_idle", o->on_idle) < 0) ||
				(o->lease && set_str(c, j, "lease", o->lease) < 0)))
		return -EINVAL;
	if (o->version >= 4 && o->network_json) {
		json_t *n = json_loads(o->network_json, JSON_REJECT_DUPLICATES, NULL);
		if (!json_is_object(n)) {
			json_decref(n);
			return wc_fail_field(c, "network", "network: must be a JSON object");
		}
		json_object_set_new(j, "network", n);
	}
	if (o->version >= 5 && o->cpu_max > 0)
		json_object_set_new(j, "cpu_max", json_real(o->cpu_max));
	else if (o->version >= 5 && o->cpu_max < 0)
		return wc_fail_field(c, "cpu_max", "cpu_max: must not be negative");
	if (o->version >= 6 && o->processes != 0)
		json_object_set_new(j, "processes", json_boolean(o->processes > 0));
	*out = steal_ptr(&j);
	return 0;
}

int warren_sandbox_create(warren_client *cl, const warren_sandbox_opts *opts, warren_sandbox **out,
			  warren_error **errp)
{
	struct wc_call c = {.client = cl};
	_cleanup_json_ json_t *req = NULL, *ans = NULL;
	warren_sandbox_info *info = NULL;
	*out = NULL;
	int r =
	    opts ? build_create(&c, opts, &req) : wc_fail_field(&c, "image", "image: is required");
	if (r >= 0)
		r = wc_json(&c, "POST", "/v1/sandboxes", req, &ans);
	if (r >= 0)
		r = wc_parse_info(&c, ans, &info);
	if (r >= 0)
		r = new_handle(&c, cl, &info, out);
	warren_sandbox_info_free(info);
	return wc_finish(&c, r < 0 ? r : 0, errp, "create sandbox");
}

static int get_info(struct wc_call *c, const char *id, warren_sandbox_info **out)
{
	_cleanup_json_ json_t *ans = NULL;
	if (wc_check_id(c, "id", id) < 0)
		return -EINVAL;
	_cleanup_free_ char *path = wc_fmt("/v1/sandboxes/%s", id);
	int r = wc_json(c, "GET", path, NULL, &ans);
	if (r < 0)
		return r;
	return wc_parse_info(c, ans, out);
}

int warren_sandbox_connect(warren_client *cl, const char *id, warren_sandbox **out,
			   warren_error **errp)
{
	struct wc_call c = {.client = cl};
	warren_sandbox_info *info = NULL;
	*out = NULL;
	int r = get_info(&c, id, &info);
	if (r >= 0)
		r = new_handle(&c, cl, &info, out);
	warren_sandbox_info_free(info);
	return wc_finish(&c, r < 0 ? r : 0, errp, "sandbox %s", id ? id : "(null)");
}

void warren_sandbox_free(warren_sandbox *sb)
{
	if (sb == NULL)
		return;
	free(sb->id);
	warren_sandbox_info_free(sb->info);
	free(sb);
}

const char *warren_sandbox_id(const warren_sandbox *sb)
{
	return sb ? sb->id : NULL;
}

const warren_sandbox_info *warren_sandbox_last_info(const warren_sandbox *sb)
{
	return sb ? sb->info : NULL;
}

int warren_sandbox_get_info(warren_sandbox *sb, warren_sandbox_info **out, warren_error **errp)
{
	struct wc_call c = {.client = sb->client};
	*out = NULL;
	int r = get_info(&c, sb->id, out);
	return wc_finish(&c, r < 0 ? r : 0, errp, "sandbox %s", sb->id);
}

int warren_sandbox_kill(warren_sandbox *sb, warren_error **errp)
{
	struct wc_call c = {.client = sb->client};
	_cleanup_free_ char *path = wc_fmt("/v1/sandboxes/%s", sb->id);
	int r = wc_json(&c, "DELETE", path, NULL, NULL);
	return wc_finish(&c, r < 0 ? r : 0, errp, "kill sandbox %s", sb->id);
}

int warren_sandbox_set_timeout(warren_sandbox *sb, int64_t seconds, warren_sandbox_info **out,
			       warren_error **errp)
{
	struct wc_call c = {.client = sb->client};
	_cleanup_json_ json_t *req = json_pack("{sI}", "timeout", (json_int_t)seconds);
	_cleanup_json_ json_t *ans = NULL;
	_cleanup_free_ char *path = wc_fmt("/v1/sandboxes/%s/timeout", sb->id);
	warren_sandbox_info *info = NULL;
	if (out)
		*out = NULL;
	int r = wc_json(&c, "POST", path, req, &ans);
	if (r >= 0 && out)
		r = wc_parse_info(&c, ans, &info);
	if (r >= 0 && out)
		*out = info;
	return wc_finish(&c, r < 0 ? r : 0, errp, "set timeout of sandbox %s", sb->id);
}

/* ---- network policy ------------------------------------------------------ */

static int network_call(warren_sandbox *sb, const char *method, const char *patch_json,
			char **json_out, warren_error **errp)
{
	struct wc_call c = {.client = sb->client};
	_cleanup_json_ json_t *req = NULL, *ans = NULL;
	_cleanup_free_ char *path = wc_fmt("/v1/sandboxes/%s/network", sb->id);
	int r = 0;
	if (json_out)
		*json_out = NULL;
	if (patch_json) {
		req = json_loads(patch_json, JSON_REJECT_DUPLICATES, NULL);
		if (!json_is_object(req))
			r = wc_fail_field(&c, "body", "network patch: must be a JSON object");
	}
	if (r == 0)
		r = wc_json(&c, method, path, req, &ans);
	if (r >= 0 && json_out && !(*json_out = json_dumps(ans, JSON_COMPACT)))
		r = wc_fail(&c, "internal", ENOMEM, "out of memory");
	return wc_finish(&c, r < 0 ? r : 0, errp, "network of sandbox %s", sb->id);
}

int warren_sandbox_network_get(warren_sandbox *sb, char **json_out, warren_error **errp)
{
	return network_call(sb, "GET", NULL, json_out, errp);
}

int warren_sandbox_network_patch(warren_sandbox *sb, const char *patch_json, char **json_out,
				 warren_error **errp)
{
	if (patch_json == NULL) {
		struct wc_call c = {.client = sb->client};
		int r = wc_fail_field(&c, "body", "network patch: is required");
		return wc_finish(&c, r, errp, "network of sandbox %s", sb->id);
	}
	return network_call(sb, "PATCH", patch_json, json_out, errp);
}

/* The query of one list page. */
static char *list_path(const warren_list_opts *o, const char *token)
{
	struct wc_buf b = {0};
	int r = wc_buf_add(&b, "/v1/sandboxes?", 14);
	char *v;
	if (o && o->state && (v = wc_esc(o->state))) {
		r |= wc_buf_add(&b, "state=", 6);
		r |= wc_buf_add(&b, v, strlen(v));
		r |= wc_buf_add(&b, "&", 1);
		free(v);
	}
	for (size_t i = 0; o && i < o->n_labels; i++) {
		_cleanup_free_ char *kv = wc_fmt("%s=%s", o->labels[i].key, o->labels[i].value);
		if (kv && (v = wc_esc(kv))) {
			r |= wc_buf_add(&b, "label=", 6);
			r |= wc_buf_add(&b, v, strlen(v));
			r |= wc_buf_add(&b, "&", 1);
			free(v);
		} else {
			r = -ENOMEM;
		}
	}
	if (o && o->page_size > 0) {
		_cleanup_free_ char *lim = wc_fmt("limit=%d&", o->page_size);
		r |= lim ? wc_buf_add(&b, lim, strlen(lim)) : -ENOMEM;
	}
	if (token && (v = wc_esc(token))) {
		r |= wc_buf_add(&b, "page_token=", 11);
		r |= wc_buf_add(&b, v, strlen(v));
		free(v);
	}
	if (r < 0) {
		wc_buf_free(&b);
		return NULL;
	}
	if (b.p[b.len - 1] == '&' || b.p[b.len - 1] == '?')
		b.p[--b.len] = 0;
	return b.p;
}

int warren_sandbox_list(warren_client *cl, const warren_list_opts *opts, warren_sandbox_cb cb,
			void *ctx, warren_error **errp)
{
	struct wc_call c = {.client = cl};
	_cleanup_free_ char *token = NULL;
	int r = 0;
	for (size_t i = 0; opts && i < opts->n_labels; i++)
		if (opts->labels[i].key == NULL || opts->labels[i].value == NULL)
			return wc_finish(
			    &c, wc_fail_field(&c, "labels", "labels: entry %zu is empty", i), errp,
			    "list sandboxes");
	do {
		_cleanup_free_ char *path = list_path(opts, token);
		_cleanup_json_ json_t *ans = NULL;
		r = wc_json(&c, "GET", path, NULL, &ans);
		if (r < 0)
			break;
		json_t *arr = json_object_get(ans, "sandboxes");
		if (!json_is_array(arr)) {
			r = wc_fail(&c, "protocol", EPROTO, "answer has no sandboxes array");
			break;
		}
		size_t i;
		json_t *o;
		r = 0;
		json_array_foreach(arr, i, o)
		{
			warren_sandbox_info *info = NULL;
			r = wc_parse_info(&c, o, &info);
			if (r < 0)
				break;
			r = cb ? cb(ctx, info) : 0;
			warren_sandbox_info_free(info);
			if (r != 0)
				break;
		}
		if (r != 0)
			break;
		free(token);
		token = wc_jstr(ans, "next_page_token");
		if (token && *token == 0) {
			free(token);
			token = NULL;
		}
	} while (token);
	if (r < 0 && c.err == NULL)
		r = wc_fail(&c, "cancelled", ECANCELED, "stopped by the callback (%d)", r);
	return wc_finish(&c, r, errp, "list sandboxes");
}

void warren_health_free(warren_health *h)
{
	if (h == NULL)
		return;
	free(h->status);
	free(h->version);
	free(h->json);
	free(h);
}

int warren_health_get(warren_client *cl, warren_health **out, warren_error **errp)
{
	struct wc_call c = {.client = cl};
	_cleanup_json_ json_t *ans = NULL;
	*out = NULL;
	int r = wc_json(&c, "GET", "/v1/health", NULL, &ans);
	if (r >= 0 && !json_is_string(json_object_get(ans, "status")))
		r = wc_fail(&c, "protocol", EPROTO, "answer has no status");
	if (r >= 0) {
		warren_health *h = calloc(1, sizeof(*h));
		if (h == NULL) {
			r = wc_fail(&c, "internal", ENOMEM, "out of memory");
		} else {
			h->status = wc_jstr(ans, "status");
			h->version = wc_jstr(ans, "version");
			h->sandboxes = wc_jint(ans, "sandboxes", 0);
			h->json = json_dumps(ans, JSON_COMPACT | JSON_PRESERVE_ORDER);
			*out = h;
		}
	}
	return wc_finish(&c, r < 0 ? r : 0, errp, "health");
}

void warren_event_list_free(warren_event_list *l)
{
	if (l == NULL)
		return;
	for (size_t i = 0; i < l->count; i++) {
		free(l->events[i].time);
		free(l->events[i].type);
		free(l->events[i].detail_json);
		free(l->events[i].json);
	}
	free(l->events);
	free(l);
}

int warren_sandbox_events(warren_sandbox *sb, int64_t since, int limit, warren_event_list **out,
			  warren_error **errp)
{
	struct wc_call c = {.client = sb->client};
	_cleanup_json_ json_t *ans = NULL;
	_cleanup_free_ char *path =
	    limit > 0 ? wc_fmt("/v1/sandboxes/%s/events?since=%lld&limit=%d", sb->id,
			       (long long)since, limit)
		      : wc_fmt("/v1/sandboxes/%s/events?since=%lld", sb->id, (long long)since);
	*out = NULL;
	int r = wc_json(&c, "GET", path, NULL, &ans);
	json_t *arr = json_object_get(ans, "events");
	if (r >= 0 && !json_is_array(arr))
		r = wc_fail(&c, "protocol", EPROTO, "answer has no events array");
	warren_event_list *l = NULL;
	if (r >= 0) {
		l = calloc(1, sizeof(*l));
		size_t n = json_array_size(arr);
		if (l)
			l->events = calloc(n ? n : 1, sizeof(*l->events));
		if (l == NULL || l->events == NULL) {
			free(l);
			l = NULL;
			r = wc_fail(&c, "internal", ENOMEM, "out of memory");
		}
	}
	if (l) {
		size_t i;
		json_t *o;
		json_array_foreach(arr, i, o)
		{
			warren_event *e = &l->events[l->count++];
			e->seq = wc_jint(o, "seq", 0);
			e->time = wc_jstr(o, "time");
			e->type = wc_jstr(o, "type");
			json_t *d = json_object_get(o, "detail");
			e->detail_json =
			    d ? json_dumps(d, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY)
			      : strdup("{}");
			e->json = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
		}
		*out = l;
	}
	return wc_finish(&c, r < 0 ? r : 0, errp, "events of sandbox %s", sb->id);
}
