/* libwarren: pause and resume of a sandbox, and leases. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_internal.h"
#include "common/cleanup.h"

/* ---- pause, resume ------------------------------------------------------ */

static int sandbox_call(warren_sandbox *sb, const char *op, json_t *req, warren_sandbox_info **out,
			warren_error **errp)
{
	struct wc_call c = {.client = sb->client};
	_cleanup_json_ json_t *ans = NULL;
	_cleanup_free_ char *path = wc_fmt("/v1/sandboxes/%s/%s", sb->id, op);
	warren_sandbox_info *info = NULL;
	if (out)
		*out = NULL;
	int r = path ? wc_json(&c, "POST", path, req, &ans)
		     : wc_fail(&c, "internal", ENOMEM, "out of memory");
	if (r >= 0 && out && (r = wc_parse_info(&c, ans, &info)) >= 0)
		*out = info;
	return wc_finish(&c, r < 0 ? r : 0, errp, "%s sandbox %s", op, sb->id);
}

int warren_sandbox_pause(warren_sandbox *sb, warren_sandbox_info **out, warren_error **errp)
{
	return sandbox_call(sb, "pause", NULL, out, errp);
}

int warren_sandbox_pause_to_disk(warren_sandbox *sb, warren_sandbox_info **out, warren_error **errp)
{
	_cleanup_json_ json_t *req = json_pack("{sb}", "keep_memory", 0);
	return sandbox_call(sb, "pause", req, out, errp);
}

int warren_sandbox_resume(warren_sandbox *sb, int64_t timeout, warren_sandbox_info **out,
			  warren_error **errp)
{
	_cleanup_json_ json_t *req =
	    timeout > 0 ? json_pack("{sI}", "timeout", (json_int_t)timeout) : NULL;
	return sandbox_call(sb, "resume", req, out, errp);
}

/* ---- snapshot, fork ----------------------------------------------------- */

int warren_sandbox_snapshot(warren_sandbox *sb, const char *name, warren_image **out,
			    warren_error **errp)
{
	return warren_sandbox_snapshot_with(sb, name, 0, out, errp);
}

int warren_sandbox_snapshot_with(warren_sandbox *sb, const char *name, unsigned flags,
				 warren_image **out, warren_error **errp)
{
	struct wc_call c = {.client = sb->client};
	_cleanup_json_ json_t *ans = NULL;
	_cleanup_json_ json_t *req = name ? json_pack("{ss}", "name", name) : json_object();
	if (out)
		*out = NULL;
	if (req && (flags & WARREN_SNAPSHOT_PROCESSES))
		json_object_set_new(req, "processes", json_true());
	if (flags & ~WARREN_SNAPSHOT_PROCESSES)
		return wc_finish(&c,
				 wc_fail_field(&c, "flags", "flags: unknown bits %#x",
					       flags & ~WARREN_SNAPSHOT_PROCESSES),
				 errp, "snapshot sandbox %s", sb->id);
	_cleanup_free_ char *path = wc_fmt("/v1/sandboxes/%s/snapshot", sb->id);
	if (out)
		*out = NULL;
	int r = path && req ? wc_json(&c, "POST", path, req, &ans)
			    : wc_fail(&c, "internal", ENOMEM, "out of memory");
	if (r >= 0)
		r = wc_image_out(&c, ans, out);
	return wc_finish(&c, r < 0 ? r : 0, errp, "snapshot sandbox %s", sb->id);
}

int warren_sandbox_fork(warren_sandbox *sb, int count, const char *overrides_json, char ***ids,
			char **json, warren_error **errp)
{
	struct wc_call c = {.client = sb->client};
	_cleanup_json_ json_t *ans = NULL;
	_cleanup_json_ json_t *req = NULL;
	if (ids)
		*ids = NULL;
	if (json)
		*json = NULL;
	int r = 0;
	if (overrides_json) {
		json_error_t je;
		req = json_loads(overrides_json, 0, &je);
		if (!json_is_object(req))
			r = wc_fail(&c, "invalid_argument", EINVAL,
				    "fork overrides: not a JSON object");
	} else {
		req = json_object();
	}
	_cleanup_free_ char *path = wc_fmt("/v1/sandboxes/%s/fork", sb->id);
	if (r == 0 && (req == NULL || path == NULL))
		r = wc_fail(&c, "internal", ENOMEM, "out of memory");
	if (r == 0) {
		json_object_set_new(req, "count", json_integer(count));
		r = wc_json(&c, "POST", path, req, &ans);
	}
	json_t *list = r >= 0 ? json_object_get(ans, "sandboxes") : NULL;
	if (r >= 0 && !json_is_array(list))
		r = wc_fail(&c, "protocol", EPROTO, "answer has no sandboxes");
	if (r >= 0 && ids) {
		size_t n = json_array_size(list);
		char **v = calloc(n + 1, sizeof(char *));
		for (size_t i = 0; v && i < n; i++)
			v[i] = wc_jstr(json_array_get(list, i), "id");
		if (v == NULL)
			r = wc_fail(&c, "internal", ENOMEM, "out of memory");
		*ids = v;
	}
	if (r >= 0 && json)
		*json = json_dumps(ans, JSON_COMPACT | JSON_PRESERVE_ORDER);
	return wc_finish(&c, r < 0 ? r : 0, errp, "fork sandbox %s", sb->id);
}

/* ---- leases ------------------------------------------------------------- */

void warren_lease_info_free(warren_lease_info *l)
{
	if (l == NULL)
		return;
	free(l->id);
	free(l->state);
	free(l->suspend_reason);
	free(l->on_expire);
	free(l->created_at);
	free(l->last_heartbeat_at);
	free(l->suspends_at);
	free(l->expires_at);
	free(l->ended_at);
	free(l->ended_action);
	free(l->json);
	free(l);
}

static int parse_lease(struct wc_call *c, json_t *o, warren_lease_info **out)
{
	if (!json_is_object(o) || !json_is_string(json_object_get(o, "id")))
		return wc_fail(c, "protocol", EPROTO, "answer is not a lease object");
	warren_lease_info *l = calloc(1, sizeof(*l));
	if (l == NULL)
		return wc_fail(c, "internal", ENOMEM, "out of memory");
	l->id = wc_jstr(o, "id");
	l->state = wc_jstr(o, "state");
	l->suspend_reason = wc_jstr(o, "suspend_reason");
	l->grace_s = wc_jnum(o, "grace_s", 0);
	l->expire_s = wc_jnum(o, "expire_s", 0);
	l->on_expire = wc_jstr(o, "on_expire");
	l->created_at = wc_jstr(o, "created_at");
	l->last_heartbeat_at = wc_jstr(o, "last_heartbeat_at");
	l->suspends_at = wc_jstr(o, "suspends_at");
	l->expires_at = wc_jstr(o, "expires_at");
	l->ended_at = wc_jstr(o, "ended_at");
	l->ended_action = wc_jstr(o, "ended_action");
	l->sandboxes = wc_jint(o, "sandboxes", 0);
	l->json = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	if (l->state == NULL)
		l->state = strdup("unknown");
	*out = l;
	return 0;
}

static int check_lease_id(struct wc_call *c, const char *id)
{
	if (id == NULL || *id == 0 || strlen(id) > 63)
		return wc_fail_field(c, "id", "id: 1 to 63 of [A-Za-z0-9_.-]");
	for (const char *p = id; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' || *p == '.'))
			return wc_fail_field(c, "id", "id: '%s' is not a valid lease id", id);
	return 0;
}

static int lease_call(warren_client *cl, const char *method, const char *path, json_t *req,
		      warren_lease_info **out, struct wc_call *c)
{
	_cleanup_json_ json_t *ans = NULL;
	warren_lease_info *l = NULL;
	if (out)
		*out = NULL;
	(void)cl;
	int r = path ? wc_json(c, method, path, req, &ans)
		     : wc_fail(c, "internal", ENOMEM, "out of memory");
	if (r >= 0 && out && (r = parse_lease(c, ans, &l)) >= 0)
		*out = l;
	return r < 0 ? r : 0;
}

int warren_lease_create(warren_client *cl, const warren_lease_opts *o, warren_lease_info **out,
			warren_error **errp)
{
	struct wc_call c = {.client = cl};
	_cleanup_json_ json_t *req = json_object();
	int r = 0;
	if (o && o->id && check_lease_id(&c, o->id) < 0)
		r = -EINVAL;
	if (r == 0 && o) {
		if (o->id)
			json_object_set_new(req, "id", json_string(o->id));
		if (o->grace_s > 0)
			json_object_set_new(req, "grace_s", json_real(o->grace_s));
		if (o->expire_s > 0)
			json_object_set_new(req, "expire_s", json_real(o->expire_s));
		if (o->on_expire &&
		    json_object_set_new(req, "on_expire", json_string(o->on_expire)) < 0)
			r = wc_fail_field(&c, "on_expire", "on_expire: not valid UTF-8");
		if (o->version >= 2 && o->to_disk)
			json_object_set_new(req, "keep_memory", json_false());
	}
	if (r == 0)
		r = lease_call(cl, "POST", "/v1/leases", req, out, &c);
	return wc_finish(&c, r, errp, "create lease");
}

static int lease_op(warren_client *cl, const char *id, const char *op, json_t *req,
		    warren_lease_info **out, warren_error **errp)
{
	struct wc_call c = {.client = cl};
	int r = check_lease_id(&c, id);
	if (r == 0) {
		_cleanup_free_ char *path =
		    op ? wc_fmt("/v1/leases/%s/%s", id, op) : wc_fmt("/v1/leases/%s", id);
		r = lease_call(cl, op ? "POST" : "GET", path, req, out, &c);
	}
	return wc_finish(&c, r, errp, "%s lease %s", op ? op : "get", id ? id : "(null)");
}

int warren_lease_get(warren_client *cl, const char *id, warren_lease_info **out,
		     warren_error **errp)
{
	return lease_op(cl, id, NULL, NULL, out, errp);
}

int warren_lease_heartbeat(warren_client *cl, const char *id, warren_lease_info **out,
			   warren_error **errp)
{
	return lease_op(cl, id, "heartbeat", NULL, out, errp);
}

int warren_lease_suspend(warren_client *cl, const char *id, warren_lease_info **out,
			 warren_error **errp)
{
	return lease_op(cl, id, "suspend", NULL, out, errp);
}

int warren_lease_resume(warren_client *cl, const char *id, warren_lease_info **out,
			warren_error **errp)
{
	return lease_op(cl, id, "resume", NULL, out, errp);
}

int warren_lease_release(warren_client *cl, const char *id, bool keep, warren_lease_info **out,
			 warren_error **errp)
{
	_cleanup_json_ json_t *req = json_pack("{ss}", "sandboxes", keep ? "keep" : "kill");
	return lease_op(cl, id, "release", req, out, errp);
}

int warren_lease_list(warren_client *cl, warren_lease_cb cb, void *ctx, warren_error **errp)
{
	struct wc_call c = {.client = cl};
	_cleanup_json_ json_t *ans = NULL;
	int r = wc_json(&c, "GET", "/v1/leases", NULL, &ans);
	json_t *arr = json_object_get(ans, "leases");
	if (r >= 0 && !json_is_array(arr))
		r = wc_fail(&c, "protocol", EPROTO, "answer has no leases array");
	size_t i;
	json_t *o;
	if (r >= 0) {
		r = 0;
		json_array_foreach(arr, i, o)
		{
			warren_lease_info *l = NULL;
			if ((r = parse_lease(&c, o, &l)) < 0)
				break;
			r = cb ? cb(ctx, l) : 0;
			warren_lease_info_free(l);
			if (r != 0)
				break;
		}
	}
	if (r < 0 && c.err == NULL)
		r = wc_fail(&c, "cancelled", ECANCELED, "stopped by the callback (%d)", r);
	return wc_finish(&c, r, errp, "list leases");
}
