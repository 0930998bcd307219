/* libwarren: registry push and pull (POST /v1/images/pull,
 * POST /v1/images/{ref}/push). Credentials travel in the request body. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_internal.h"
#include "common/cleanup.h"

static int auth_json(struct wc_call *c, const warren_registry_auth *a, json_t *req)
{
	if (a->insecure)
		json_object_set_new(req, "insecure", json_true());
	if (a->token && (a->username || a->password))
		return wc_fail_field(c, "auth", "auth: give a username and password or a token");
	if ((a->username == NULL) != (a->password == NULL))
		return wc_fail_field(c, "auth", "auth: username and password go together");
	json_t *o = NULL;
	if (a->token)
		o = json_pack("{s:s}", "token", a->token);
	else if (a->username)
		o = json_pack("{s:s, s:s}", "username", a->username, "password", a->password);
	else
		return 0;
	if (o == NULL)
		return wc_fail_field(c, "auth", "auth: credentials must be UTF-8 text");
	json_object_set_new(req, "auth", o);
	return 0;
}

static int report(struct wc_call *c, json_t *o, char **out)
{
	if (out == NULL)
		return 0;
	if ((*out = json_dumps(o ? o : json_null(),
			       JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY)) == NULL)
		return wc_fail(c, "internal", ENOMEM, "out of memory");
	return 0;
}

int warren_image_pull(warren_client *cl, const warren_image_pull_opts *o, warren_image **out,
		      char **report_json, warren_error **errp)
{
	struct wc_call c = {.client = cl};
	_cleanup_json_ json_t *req = NULL, *ans = NULL;
	if (out)
		*out = NULL;
	if (report_json)
		*report_json = NULL;
	int r = 0;
	if (o == NULL || o->version != WARREN_IMAGE_PULL_OPTS_VERSION)
		r = wc_fail_field(&c, "opts", "opts: use WARREN_IMAGE_PULL_OPTS_INIT");
	else if (o->ref == NULL || o->ref[0] == 0)
		r = wc_fail_field(&c, "ref", "ref: the registry reference to pull is required");
	else if ((req = json_pack("{s:s, s:b}", "ref", o->ref, "lazy", o->lazy)) == NULL)
		r = wc_fail_field(&c, "ref", "ref: must be UTF-8 text");
	if (r == 0 && o->as && json_object_set_new(req, "as", json_string(o->as)) < 0)
		r = wc_fail_field(&c, "as", "as: must be UTF-8 text");
	if (r == 0 && o->platform &&
	    json_object_set_new(req, "platform", json_string(o->platform)) < 0)
		r = wc_fail_field(&c, "platform", "platform: must be UTF-8 text");
	if (r == 0)
		r = auth_json(&c, &o->auth, req);
	if (r == 0)
		r = wc_json(&c, "POST", "/v1/images/pull", req, &ans);
	if (r >= 0)
		r = report(&c, json_object_get(ans, "pull"), report_json);
	if (r >= 0)
		r = wc_image_out(&c, ans, out);
	if (r < 0 && report_json) {
		free(*report_json);
		*report_json = NULL;
	}
	return wc_finish(&c, r < 0 ? r : 0, errp, "pull %s", o && o->ref ? o->ref : "");
}

int warren_image_push(warren_client *cl, const char *ref, const warren_image_push_opts *o,
		      char **report_json, warren_error **errp)
{
	struct wc_call c = {.client = cl};
	_cleanup_json_ json_t *req = NULL, *ans = NULL;
	if (report_json)
		*report_json = NULL;
	_cleanup_free_ char *path = wc_image_path(&c, ref, "/push", NULL);
	int r = path ? 0 : -1;
	if (r == 0 && (o == NULL || o->version != WARREN_IMAGE_PUSH_OPTS_VERSION))
		r = wc_fail_field(&c, "opts", "opts: use WARREN_IMAGE_PUSH_OPTS_INIT");
	else if (r == 0 && (o->to == NULL || o->to[0] == 0))
		r = wc_fail_field(&c, "to", "to: the registry reference to push to is required");
	else if (r == 0 && (req = json_pack("{s:s}", "to", o->to)) == NULL)
		r = wc_fail_field(&c, "to", "to: must be UTF-8 text");
	if (r == 0 && o->chunk_size)
		json_object_set_new(req, "chunk_size", json_integer(o->chunk_size));
	if (r == 0)
		r = auth_json(&c, &o->auth, req);
	if (r == 0)
		r = wc_json(&c, "POST", path, req, &ans);
	if (r >= 0)
		r = report(&c, ans, report_json);
	return wc_finish(&c, r < 0 ? r : 0, errp, "push %s", ref ? ref : "");
}
