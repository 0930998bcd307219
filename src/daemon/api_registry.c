/* /v1/images/pull and /v1/images/{ref}/push: parse, open a registry client
 * for the request, dispatch into src/image/distribute.c, shape the answer.
 *
 * Credentials come in the request's "auth" object, live in this request's
 * registry client only (wiped when it closes), and are never logged, stored
 * or passed to a sandbox. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "daemon/api.h"
#include "daemon/api_images.h"
#include "daemon/api_registry.h"
#include "daemon/images.h"
#include "daemon/jsonutil.h"
#include "daemon/manager.h"
#include "daemon/snapshot.h"
#include "image/distribute.h"

static void regp(struct wr_registry **r)
{
	wr_registry_close(*r);
}

/* {"username": "...", "password": "..."} | {"token": "..."} into o. */
static int parse_auth(json_t *auth, struct wr_registry_opts *o, wr_err *err)
{
	if (auth == NULL || json_is_null(auth))
		return 0;
	if (!json_is_object(auth))
		return wr_err_field(err, "auth", "auth: must be an object");
	const char *key;
	json_t *v;
	json_object_foreach(auth, key, v)
	{
		if (strcmp(key, "username") != 0 && strcmp(key, "password") != 0 &&
		    strcmp(key, "token") != 0)
			return wr_err_field(err, "auth",
					    "auth.%s: unknown key (username, password, "
					    "token)",
					    key);
	}
	if ((v = json_object_get(auth, "username")) &&
	    wrd_j_str(v, "auth.username", 255, false, &o->username, err) < 0)
		return -EINVAL;
	if ((v = json_object_get(auth, "password")) &&
	    wrd_j_str(v, "auth.password", 4096, true, &o->password, err) < 0)
		return -EINVAL;
	if ((v = json_object_get(auth, "token")) &&
	    wrd_j_str(v, "auth.token", 65536, false, &o->token, err) < 0)
		return -EINVAL;
	if ((o->username != NULL) != (o->password != NULL))
		return wr_err_field(err, "auth", "auth: username and password go together");
	if (o->token && o->username)
		return wr_err_field(err, "auth", "auth: give username/password or token, not both");
	return 0;
}

int wrd_registry_open_for(const char *remote_ref, json_t *auth, bool insecure,
			  struct wr_registry **out, wr_err *err)
{
	struct wr_registry_ref ref;
	if (wr_registry_ref_parse(remote_ref, &ref, err) < 0)
		return -EINVAL;
	struct wr_registry_opts o = {.insecure = insecure};
	int r = parse_auth(auth, &o, err);
	if (r == 0)
		r = wr_registry_open(ref.host, &o, out, err);
	wr_registry_ref_free(&ref);
	return r;
}

/* Registry and store errors as API errors: the caller's fault is a 4xx
 * naming the field; an unreachable or misbehaving registry is 503. */
static void reply_reg_err(struct wrd_req *r, wr_err err, const char *ref_field)
{
	int e = err ? err->errnum : EIO;
	const char *msg = err && err->msg ? err->msg : "registry error";
	const char *field = err && err->field ? err->field : NULL;
	switch (e) {
	case EINVAL: wrd_reply_error(r, "invalid_argument", field, "%s", msg); break;
	case EACCES:
	case EPERM:
		wrd_reply_error(r, "invalid_argument", field ? field : "auth", "%s", msg);
		break;
	case ENOENT: wrd_reply_error(r, "not_found", field ? field : ref_field, "%s", msg); break;
	case EBADMSG:
	case ENOTSUP:
	case E2BIG:
		wrd_reply_error(r, "invalid_argument", field ? field : ref_field, "%s", msg);
		break;
	case EBUSY:
	case EEXIST: wrd_reply_error(r, "conflict", field, "%s", msg); break;
	case EAGAIN: wrd_reply_error(r, "conflict", field ? field : ref_field, "%s", msg); break;
	case EFBIG:
	case ENOSPC:
	case EDQUOT: wrd_reply_error(r, "payload_too_large", field, "%s", msg); break;
	case ETIMEDOUT:
	case ECONNREFUSED:
	case ECONNRESET:
	case EHOSTUNREACH:
	case ENETUNREACH:
	case EIO: wrd_reply_error(r, "unavailable", NULL, "%s", msg); break;
	default: wrd_reply_err(r, err);
	}
}

/* Is `as` the store name a pull of `ref` at create would use? */
static bool names_ref(const char *as, const char *ref)
{
	_cleanup_free_ char *want = NULL;
	_cleanup_err_ wr_err err = NULL;
	if (wrd_images_remote_name(ref, &want, &err) < 0)
		return false;
	size_t n = strlen(as);
	return strcmp(as, want) == 0 ||
	       (strncmp(as, want, n) == 0 && strcmp(want + n, ":latest") == 0);
}

static bool store_ready(struct wrd_req *r)
{
	if (wrd_images() == NULL) {
		wrd_reply_error(r, "unavailable", NULL, "the image store is not open");
		return false;
	}
	return true;
}

void wrd_api_img_pull(struct wrd_req *r)
{
	static const char *const keys[] = {"ref",  "as",       "lazy", "platform",
					   "auth", "insecure", NULL};
	if (wrd_query_check(r, NULL) < 0 || !store_ready(r))
		return;
	_cleanup_err_ wr_err err = NULL;
	json_t *j = r->json, *v;
	const char *ref = NULL, *as = NULL, *platform = NULL;
	bool lazy = false, insecure = false;
	if (j == NULL || (v = json_object_get(j, "ref")) == NULL) {
		wrd_reply_error(r, "invalid_argument", "ref",
				"ref: the registry reference to pull is required");
		return;
	}
	if (wrd_api_known_keys(r, j, keys) < 0)
		return;
	if (wrd_j_str(v, "ref", 1024, false, &ref, &err) < 0 ||
	    ((v = json_object_get(j, "as")) && wrd_j_str(v, "as", 255, false, &as, &err) < 0) ||
	    ((v = json_object_get(j, "lazy")) && wrd_j_bool(v, "lazy", &lazy, &err) < 0) ||
	    ((v = json_object_get(j, "insecure")) &&
	     wrd_j_bool(v, "insecure", &insecure, &err) < 0) ||
	    ((v = json_object_get(j, "platform")) &&
	     wrd_j_str(v, "platform", 64, false, &platform, &err) < 0)) {
		wrd_reply_err(r, err);
		return;
	}
	_cleanup_(regp) struct wr_registry *reg = NULL;
	if (wrd_registry_open_for(ref, json_object_get(j, "auth"), insecure, &reg, &err) < 0) {
		if (err->field == NULL)
			err->field = strdup("ref");
		reply_reg_err(r, err, "ref");
		return;
	}
	_cleanup_free_ char *dflt = NULL;
	if (as == NULL) {
		if (wr_image_pull_default_name(ref, &dflt, &err) < 0) {
			reply_reg_err(r, err, "ref");
			return;
		}
		as = dflt;
	}
	struct wr_image *probe = NULL;
	if (wr_image_resolve(wrd_images(), as, &probe, &err) < 0 && wr_err_code(err) == EINVAL) {
		wrd_reply_error(r, "invalid_argument", "as", "as: %s", err->msg);
		return;
	}
	wr_err_free(&err);
	/* Pulls are every tenant's, but names are shared: a tenant that is no
	 * admin may add names, not move one to another image, nor take a
	 * registry reference's name for another reference (creates of that
	 * reference would then run its image). */
	bool admin = !r->tcp || wrd_config_is_admin(wrd_mgr_cfg, r->tenant);
	char had[WR_IMAGE_DIGEST_LEN + 1] = "";
	if (probe)
		snprintf(had, sizeof(had), "%s", probe->digest);
	wr_image_free(&probe);
	if (!admin && wr_registry_ref_is_remote(as) && !names_ref(as, ref)) {
		wrd_reply_error(r, "permission_denied", "as",
				"as: '%s' names another registry reference; only an admin may "
				"pull under it",
				as);
		return;
	}
	struct wr_image_pull_opts o = {.mode = lazy ? WR_IMAGE_PULL_LAZY : WR_IMAGE_PULL_FULL,
				       .platform = platform};
	struct wr_image_pull_result res;
	struct wr_image *img = NULL;
	/* a tenant's pull to an existing name goes unnamed first: the name
	 * is only kept when it already points at what was pulled */
	bool guard = !admin && had[0];
	if (wr_image_pull(wrd_images(), reg, ref, guard ? NULL : as, &o, &img, &res, &err) < 0) {
		reply_reg_err(r, err, "ref");
		return;
	}
	if (guard && strcmp(img->digest, had) != 0) {
		wrd_reply_error(r, "permission_denied", "as",
				"as: '%s' points at another image; moving it needs an admin (the "
				"pulled image %s is kept without a name until reclaimed)",
				as, img->digest);
		wr_image_free(&img);
		return;
	}
	if (guard) { /* the record as the name sees it */
		wr_image_free(&img);
		if (wr_image_resolve(wrd_images(), as, &img, &err) < 0) {
			reply_reg_err(r, err, "as");
			return;
		}
	}
	json_t *procs = NULL;
	if (wrd_images_pull_procs(reg, ref, img, guard ? NULL : as, &procs, &err) < 0) {
		wr_err_wrap(&err, "pulled %s as %s, but not", img->digest, as);
		wr_image_free(&img);
		reply_reg_err(r, err, "ref");
		return;
	}
	json_t *out = wrd_image_json(img);
	if (procs)
		json_object_set_new(out, "processes", procs);
	json_object_set_new(out, "pull",
			    json_pack("{s:s, s:b, s:b, s:b, s:b, s:i, s:I}", "manifest_digest",
				      res.manifest_digest, "erofs", res.erofs, "lazy", res.lazy,
				      "already", res.already, "no_chunk_index", res.no_chunk_index,
				      "blobs", (int)res.layers, "bytes_fetched",
				      (json_int_t)res.bytes_fetched));
	wr_image_free(&img);
	wrd_reply_json(r, 200, out);
	wrd_images_gc_auto();
}

void wrd_api_img_push(struct wrd_req *r)
{
	static const char *const keys[] = {"to", "auth", "insecure", "chunk_size", NULL};
	static const char *const query[] = {"ref", NULL};
	if (!wrd_api_image_admin(r, "image push") || wrd_query_check(r, query) < 0 ||
	    !store_ready(r))
		return;
	/* {ref} of the path, or "-" with ?ref= for names holding a '/' (as
	 * the other /v1/images/{ref} routes) */
	const char *local = r->id;
	if (strcmp(local, "-") == 0) {
		local = wrd_query(r, "ref");
		if (local == NULL || *local == 0) {
			wrd_reply_error(r, "invalid_argument", "ref",
					"ref: the path names '-', so ?ref= is required");
			return;
		}
	}
	_cleanup_err_ wr_err err = NULL;
	json_t *j = r->json, *v;
	const char *to = NULL;
	bool insecure = false;
	int64_t chunk = 0;
	if (j == NULL || (v = json_object_get(j, "to")) == NULL) {
		wrd_reply_error(r, "invalid_argument", "to",
				"to: the registry reference to push to is required");
		return;
	}
	if (wrd_api_known_keys(r, j, keys) < 0)
		return;
	if (wrd_j_str(v, "to", 1024, false, &to, &err) < 0 ||
	    ((v = json_object_get(j, "insecure")) &&
	     wrd_j_bool(v, "insecure", &insecure, &err) < 0) ||
	    ((v = json_object_get(j, "chunk_size")) &&
	     wrd_j_int(v, "chunk_size", 0, 1ll << 30, &chunk, &err) < 0)) {
		wrd_reply_err(r, err);
		return;
	}
	_cleanup_(regp) struct wr_registry *reg = NULL;
	if (wrd_registry_open_for(to, json_object_get(j, "auth"), insecure, &reg, &err) < 0) {
		if (err->field == NULL)
			err->field = strdup("to");
		reply_reg_err(r, err, "to");
		return;
	}
	struct wr_image_push_opts o = {.chunk_size = (size_t)chunk};
	struct wr_image_push_result res;
	/* a snapshot's processes first: a pull of the snapshot finds them */
	json_t *procs = NULL;
	struct wr_image *img = NULL;
	if (wr_image_resolve(wrd_images(), local, &img, &err) == 0) {
		const char *pd = wr_image_label(&img->config, WRD_SNAP_PROCS);
		_cleanup_free_ char *pto = pd ? wrd_images_procs_ref(to, pd, &err) : NULL;
		struct wr_image_push_result pres;
		if (pd && (pto == NULL ||
			   wr_image_push(wrd_images(), reg, pd, pto, &o, &pres, &err) < 0)) {
			wr_image_free(&img);
			wr_err_wrap(&err, "push the processes of snapshot %s", local);
			reply_reg_err(r, err, "to");
			return;
		}
		if (pd)
			procs = json_pack("{s:s, s:s, s:s, s:i}", "digest", pd, "to", pto,
					  "manifest_digest", pres.manifest_digest, "blobs_sent",
					  (int)pres.blobs_sent);
		wr_image_free(&img);
	}
	wr_err_free(&err);
	if (wr_image_push(wrd_images(), reg, local, to, &o, &res, &err) < 0) {
		json_decref(procs);
		/* an unknown local image is the path's fault, not a field's */
		reply_reg_err(r, err, err && err->errnum == ENOENT ? NULL : "to");
		return;
	}
	json_t *out = json_pack("{s:s, s:s, s:s, s:i, s:i, s:I}", "digest", res.blob_digest, "to",
				to, "manifest_digest", res.manifest_digest, "blobs_sent",
				(int)res.blobs_sent, "blobs_skipped", (int)res.blobs_skipped,
				"bytes_sent", (json_int_t)res.bytes_sent);
	if (procs)
		json_object_set_new(out, "processes", procs);
	wrd_reply_json(r, 200, out);
}
