/* /v1/images: import, list, inspect, tag, remove, pin, gc. Thin: parse,
 * dispatch into src/image, shape the answer. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "daemon/api.h"
#include "daemon/api_images.h"
#include "daemon/images.h"
#include "daemon/db.h"
#include "daemon/jsonutil.h"
#include "common/util.h"

static json_t *strv_json(char **v, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_string(v[i]));
	return a;
}

json_t *wrd_image_json(const struct wr_image *img)
{
	json_t *cfg = json_pack("{s:o, s:s?, s:s?, s:o, s:o}", "env",
				strv_json(img->config.env, img->config.n_env), "workdir",
				img->config.workdir, "user", img->config.user, "entrypoint",
				strv_json(img->config.entrypoint, img->config.n_entrypoint), "cmd",
				strv_json(img->config.cmd, img->config.n_cmd));
	json_t *labels = json_object();
	for (size_t i = 0; i < img->config.n_labels; i++) {
		const char *kv = img->config.labels[i], *eq = strchr(kv, '=');
		if (eq) {
			_cleanup_free_ char *k = strndup(kv, (size_t)(eq - kv));
			if (k)
				json_object_set_new(labels, k, json_string(eq + 1));
		}
	}
	json_object_set_new(cfg, "labels", labels);
	json_t *j =
	    json_pack("{s:s, s:I, s:s, s:o, s:o, s:b, s:b, s:i, s:o, s:o, s:o}", "digest",
		      img->digest, "size", (json_int_t)img->size, "source", img->source, "created",
		      wrd_j_time((int64_t)img->created * 1000), "last_used",
		      img->last_used ? wrd_j_time((int64_t)img->last_used * 1000) : json_null(),
		      "pinned", img->pinned, "complete", img->complete, "holders",
		      (int)img->holders, "refs", strv_json(img->refs, img->n_refs), "layers",
		      strv_json(img->layers, img->n_layers), "config", cfg);
	json_object_set_new(j, "kind", json_string(wr_image_kind_name(img->kind)));
	if (img->kind == WR_IMAGE_KIND_VM_DISK)
		json_object_set_new(j, "disk",
				    json_pack("{s:s, s:I, s:s}", "format", img->disk_format,
					      "virtual_size", (json_int_t)img->virtual_size,
					      "firmware", img->firmware));
	if (img->remote.reference)
		json_object_set_new(
		    j, "remote",
		    json_pack("{s:s, s:s?, s:I}", "reference", img->remote.reference, "blob_digest",
			      img->remote.blob_digest, "size", (json_int_t)img->remote.size));
	return j;
}

/* firmware goes with vm-disk imports only (the value is checked there) */
static int firmware_ok(const struct wr_image_import_opts *o, wr_err *err)
{
	if (o->firmware && o->format != WR_IMAGE_FMT_VM_DISK)
		return wr_err_field(err, "firmware", "firmware: only for format vm-disk");
	return 0;
}

static void reply_store_err(struct wrd_req *r, wr_err err, const char *field)
{
	if (err && err->field == NULL && field && err->errnum != ENOENT)
		err->field = strdup(field);
	if (err && err->errnum == EBUSY) {
		wrd_reply_error(r, "conflict", err->field, "%s", err->msg);
		return;
	}
	if (err && (err->errnum == EBADMSG || err->errnum == EPERM || err->errnum == E2BIG)) {
		wrd_reply_error(r, "invalid_argument", err->field, "%s", err->msg);
		return;
	}
	wrd_reply_err(r, err);
}

/* {ref} of the path; "-" takes it from ?ref= instead (names with a '/',
 * which a path segment cannot hold). NULL with the reply set. */
static const char *path_ref(struct wrd_req *r)
{
	if (strcmp(r->id, "-") != 0)
		return r->id;
	const char *q = wrd_query(r, "ref");
	if (q == NULL || q[0] == '\0')
		wrd_reply_error(r, "invalid_argument", "ref",
				"ref: the path names '-', so ?ref= is required");
	return q && q[0] ? q : NULL;
}

static bool store_ready(struct wrd_req *r)
{
	if (wrd_images() == NULL) {
		wrd_reply_error(r, "unavailable", NULL, "the image store is not open");
		return false;
	}
	return true;
}

bool wrd_api_image_admin(struct wrd_req *r, const char *what)
{
	if (!r->tcp || wrd_config_is_admin(wrd_mgr_cfg, r->tenant))
		return true;
	wrd_reply_error(r, "permission_denied", NULL,
			"%s changes the node's image store: tenant '%s' is not in admin_tenants",
			what, r->tenant ? r->tenant : "");
	return false;
}

/* The body is JSON ({"path", "format", "ref"}) when it starts with '{'
 * (tar, gzip and zstd streams never do). */
static json_t *json_body(struct wrd_req *r)
{
	if (r->upload_fd < 0 || r->upload_len == 0 || r->upload_len > WRD_JSON_MAX)
		return NULL;
	char c;
	if (pread(r->upload_fd, &c, 1, 0) != 1 || c != '{')
		return NULL;
	_cleanup_free_ char *buf = malloc(r->upload_len + 1);
	if (buf == NULL || pread(r->upload_fd, buf, r->upload_len, 0) != (ssize_t)r->upload_len)
		return NULL;
	buf[r->upload_len] = '\0';
	return json_loads(buf, 0, NULL);
}

void wrd_api_img_import(struct wrd_req *r)
{
	static const char *const allowed[] = {"format", "ref", "firmware", NULL};
	if (!wrd_api_image_admin(r, "image import") || wrd_query_check(r, allowed) < 0 ||
	    !store_ready(r))
		return;
	const char *fmt_s = wrd_query(r, "format");
	struct wr_image_import_opts o = {.ref = wrd_query(r, "ref"),
					 .firmware = wrd_query(r, "firmware")};
	_cleanup_err_ wr_err err = NULL;
	struct wr_image *img = NULL;
	/* A disk body may begin with '{' as well: no JSON guess for it. */
	json_t *j = fmt_s && strcmp(fmt_s, "vm-disk") == 0 ? NULL : json_body(r);
	int rc;
	if (j) {
		static const char *const keys[] = {"path", "format", "ref", "firmware", NULL};
		const char *path = NULL;
		json_t *v;
		if (wrd_api_known_keys(r, j, keys) < 0)
			goto out;
		if (r->tcp) {
			wrd_reply_error(r, "invalid_argument", "path",
					"path: imports from a host path are accepted on the Unix "
					"socket only; send the image as a tar body");
			goto out;
		}
		if ((v = json_object_get(j, "path")) == NULL ||
		    wrd_j_str(v, "path", 4095, false, &path, &err) < 0) {
			if (err == NULL)
				wrd_reply_error(r, "invalid_argument", "path", "path: is required");
			else
				wrd_reply_err(r, err);
			goto out;
		}
		if ((v = json_object_get(j, "format")) &&
		    wrd_j_str(v, "format", 32, false, &fmt_s, &err) < 0) {
			wrd_reply_err(r, err);
			goto out;
		}
		if ((v = json_object_get(j, "ref")) &&
		    wrd_j_str(v, "ref", 255, false, &o.ref, &err) < 0) {
			wrd_reply_err(r, err);
			goto out;
		}
		if ((v = json_object_get(j, "firmware")) &&
		    wrd_j_str(v, "firmware", 15, false, &o.firmware, &err) < 0) {
			wrd_reply_err(r, err);
			goto out;
		}
		if (wr_image_format_parse(fmt_s, &o.format) < 0) {
			wrd_reply_error(r, "invalid_argument", "format",
					"format: one of auto, dir, tar, oci-layout, oci-archive, "
					"docker-archive, vm-disk");
			goto out;
		}
		rc = firmware_ok(&o, &err) < 0
			 ? -1
			 : wr_image_import(wrd_images(), path, &o, &img, &err);
	} else {
		if (wr_image_format_parse(fmt_s, &o.format) < 0) {
			wrd_reply_error(r, "invalid_argument", "format",
					"format: one of auto, tar, oci-archive, docker-archive, "
					"vm-disk");
			goto out;
		}
		if (r->upload_fd < 0 || r->upload_len == 0) {
			wrd_reply_error(r, "invalid_argument", "body",
					"body: a tar stream (or a JSON object with a path) is "
					"required");
			goto out;
		}
		lseek(r->upload_fd, 0, SEEK_SET);
		rc = firmware_ok(&o, &err) < 0
			 ? -1
			 : wr_image_import_fd(wrd_images(), r->upload_fd, &o, &img, &err);
	}
	if (rc < 0) {
		reply_store_err(r, err, j ? "path" : "body");
		goto out;
	}
	wrd_images_event("image_imported",
			 json_pack("{s:s, s:I, s:s, s:o}", "digest", img->digest, "size",
				   (json_int_t)img->size, "source", img->source, "refs",
				   strv_json(img->refs, img->n_refs)));
	wrd_images_gc_auto_keep(img->digest);
	wrd_reply_json(r, 201, wrd_image_json(img));
out:
	wr_image_free(&img);
	json_decref(j);
}

void wrd_api_img_list(struct wrd_req *r)
{
	if (wrd_query_check(r, NULL) < 0 || !store_ready(r))
		return;
	wrd_images_reconcile();
	struct wr_image_list l;
	_cleanup_err_ wr_err err = NULL;
	if (wr_image_list(wrd_images(), &l, &err) < 0) {
		wrd_reply_err(r, err);
		return;
	}
	json_t *a = json_array();
	for (size_t i = 0; i < l.n; i++)
		json_array_append_new(a, wrd_image_json(l.items[i]));
	wr_image_list_free(&l);
	struct wr_image_usage u;
	json_t *usage = json_null();
	if (wr_image_usage(wrd_images(), &u, &err) == 0)
		usage = json_pack("{s:I, s:I, s:I}", "blob_bytes", (json_int_t)u.blob_bytes,
				  "cache_bytes", (json_int_t)u.cache_bytes, "quota_bytes",
				  (json_int_t)u.quota_bytes);
	wrd_reply_json(r, 200, json_pack("{s:o, s:o}", "images", a, "usage", usage));
}

static const char *const ref_only[] = {"ref", NULL};

void wrd_api_img_get(struct wrd_req *r)
{
	const char *ref;
	if (wrd_query_check(r, ref_only) < 0 || !store_ready(r) || (ref = path_ref(r)) == NULL)
		return;
	wrd_images_reconcile();
	struct wr_image *img = NULL;
	_cleanup_err_ wr_err err = NULL;
	if (wr_image_resolve(wrd_images(), ref, &img, &err) < 0) {
		reply_store_err(r, err, "ref");
		return;
	}
	wrd_reply_json(r, 200, wrd_image_json(img));
	wr_image_free(&img);
}

void wrd_api_img_tag(struct wrd_req *r)
{
	const char *target;
	if (!wrd_api_image_admin(r, "image tag") || wrd_query_check(r, ref_only) < 0 ||
	    !store_ready(r) || (target = path_ref(r)) == NULL)
		return;
	static const char *const keys[] = {"ref", NULL};
	const char *ref = NULL;
	_cleanup_err_ wr_err err = NULL;
	json_t *v;
	if (r->json == NULL || (v = json_object_get(r->json, "ref")) == NULL) {
		wrd_reply_error(r, "invalid_argument", "ref", "ref: is required");
		return;
	}
	if (wrd_api_known_keys(r, r->json, keys) < 0)
		return;
	if (wrd_j_str(v, "ref", 255, false, &ref, &err) < 0) {
		wrd_reply_err(r, err);
		return;
	}
	struct wr_image *img = NULL;
	if (wr_image_tag(wrd_images(), target, ref, &err) < 0 ||
	    wr_image_resolve(wrd_images(), ref, &img, &err) < 0) {
		reply_store_err(r, err, NULL);
		return;
	}
	wrd_reply_json(r, 200, wrd_image_json(img));
	wr_image_free(&img);
}

void wrd_api_img_remove(struct wrd_req *r)
{
	static const char *const allowed[] = {"force", "ref", NULL};
	bool force = false, removed = false;
	const char *ref;
	if (!wrd_api_image_admin(r, "image rm") || wrd_query_check(r, allowed) < 0 ||
	    wrd_query_bool(r, "force", false, &force) < 0 || !store_ready(r) ||
	    (ref = path_ref(r)) == NULL)
		return;
	wrd_images_reconcile();
	_cleanup_err_ wr_err err = NULL;
	struct wr_image *img = NULL;
	if (wr_image_resolve(wrd_images(), ref, &img, &err) < 0) {
		reply_store_err(r, err, "ref");
		return;
	}
	if (wr_image_remove(wrd_images(), ref, force, &removed, &err) < 0) {
		reply_store_err(r, err, NULL);
	} else {
		wrd_reply_json(r, 200,
			       json_pack("{s:s, s:b}", "digest", img->digest, "removed", removed));
		if (removed) {
			wr_info("image %s removed (%s)", img->digest, ref);
			wrd_images_event("image_removed",
					 json_pack("{s:s, s:I, s:s, s:s}", "digest", img->digest,
						   "size", (json_int_t)img->size, "reason",
						   "removed", "ref", ref));
		}
	}
	wr_image_free(&img);
}

static void pin(struct wrd_req *r, bool on)
{
	const char *ref;
	if (!wrd_api_image_admin(r, on ? "image pin" : "image unpin") ||
	    wrd_query_check(r, ref_only) < 0 || !store_ready(r) || (ref = path_ref(r)) == NULL)
		return;
	_cleanup_err_ wr_err err = NULL;
	struct wr_image *img = NULL;
	if (wr_image_pin(wrd_images(), ref, on, &err) < 0 ||
	    wr_image_resolve(wrd_images(), ref, &img, &err) < 0) {
		reply_store_err(r, err, "ref");
		return;
	}
	wrd_reply_json(r, 200, wrd_image_json(img));
	wr_image_free(&img);
}

void wrd_api_img_pin(struct wrd_req *r)
{
	pin(r, true);
}

void wrd_api_img_unpin(struct wrd_req *r)
{
	pin(r, false);
}

static void on_removed(void *ctx, const struct wr_image_gc_event *ev)
{
	json_array_append_new(ctx, json_pack("{s:s, s:I, s:s, s:b}", "digest", ev->digest, "size",
					     (json_int_t)ev->size, "reason",
					     wr_image_gc_reason_name(ev->reason), "dry_run",
					     ev->dry_run));
	wrd_images_gc_event(NULL, ev);
}

void wrd_api_img_gc(struct wrd_req *r)
{
	static const char *const allowed[] = {"dry_run", "prune_untagged", NULL};
	struct wr_image_gc_opts o = {.on_remove = on_removed};
	if (!wrd_api_image_admin(r, "image gc") || wrd_query_check(r, allowed) < 0 ||
	    wrd_query_bool(r, "dry_run", false, &o.dry_run) < 0 ||
	    wrd_query_bool(r, "prune_untagged", false, &o.prune_untagged) < 0 || !store_ready(r))
		return;
	wrd_images_reconcile();
	json_t *removed = json_array();
	o.ctx = removed;
	struct wr_image_gc_report rep;
	_cleanup_err_ wr_err err = NULL;
	if (wr_image_gc(wrd_images(), &o, &rep, &err) < 0) {
		json_decref(removed);
		wrd_reply_err(r, err);
		return;
	}
	wrd_reply_json(
	    r, 200,
	    json_pack("{s:b, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "dry_run", o.dry_run,
		      "removed", removed, "freed_bytes", (json_int_t)rep.freed_bytes,
		      "cache_freed_bytes", (json_int_t)rep.cache_freed_bytes, "used_before",
		      (json_int_t)rep.used_before, "used_after", (json_int_t)rep.used_after,
		      "skipped_in_use", (json_int_t)rep.skipped_in_use, "skipped_pinned",
		      (json_int_t)rep.skipped_pinned, "skipped_grace",
		      (json_int_t)rep.skipped_grace));
}

void wrd_api_img_events(struct wrd_req *r)
{
	static const char *const allowed[] = {"since", "limit", NULL};
	if (wrd_query_check(r, allowed) < 0)
		return;
	uint64_t since = 0, limit = 100;
	const char *s;
	if ((s = wrd_query(r, "since")) && wr_parse_u64(s, INT64_MAX, &since) < 0) {
		wrd_reply_error(r, "invalid_argument", "since",
				"since: must be a non-negative integer");
		return;
	}
	if ((s = wrd_query(r, "limit")) && (wr_parse_u64(s, 1000, &limit) < 0 || limit < 1)) {
		wrd_reply_error(r, "invalid_argument", "limit", "limit: must be 1 to 1000");
		return;
	}
	_cleanup_err_ wr_err err = NULL;
	json_t *arr = json_array();
	if (wrd_db_events(WRD_IMAGES_EVENTS_ID, (int64_t)since, (int)limit, arr, &err) < 0) {
		json_decref(arr);
		wrd_reply_err(r, err);
		return;
	}
	wrd_reply_json(r, 200, json_pack("{s:o}", "events", arr));
}

void wrd_api_img_build_vm(struct wrd_req *r)
{
	if (!wrd_api_image_admin(r, "image build-vm") || !store_ready(r))
		return;
	static const char *const keys[] = {"image", "ref", "size", "firmware", NULL};
	json_t *j = r->json;
	if (j == NULL) {
		wrd_reply_error(r, "invalid_argument", "image",
				"image: the rootfs image to build from is required");
		return;
	}
	if (wrd_api_known_keys(r, j, keys) < 0)
		return;
	_cleanup_err_ wr_err err = NULL;
	struct wr_image_build_vm_opts o = {.script = wrd_images_vm_script(),
					   .kernel_root = wrd_images_vm_kernel_root()};
	json_t *v;
	if ((v = json_object_get(j, "image")) == NULL) {
		wrd_reply_error(r, "invalid_argument", "image",
				"image: the rootfs image to build from is required");
		return;
	}
	if (wrd_j_str(v, "image", 255, false, &o.image, &err) < 0 ||
	    ((v = json_object_get(j, "ref")) &&
	     wrd_j_str(v, "ref", 255, false, &o.ref, &err) < 0) ||
	    ((v = json_object_get(j, "firmware")) &&
	     wrd_j_str(v, "firmware", 15, false, &o.firmware, &err) < 0)) {
		wrd_reply_err(r, err);
		return;
	}
	if ((v = json_object_get(j, "size")) &&
	    !(json_is_integer(v) && json_integer_value(v) > 0 &&
	      (o.size = (uint64_t)json_integer_value(v))) &&
	    !(json_is_string(v) && wr_parse_size(json_string_value(v), &o.size) == 0)) {
		wrd_reply_error(r, "invalid_argument", "size",
				"size: a byte count or a size like \"4G\"");
		return;
	}
	if (o.script == NULL) {
		wrd_reply_error(r, "unavailable", NULL,
				"build-vm: no mkvmimage.sh found; set image_store.vm_build_script");
		return;
	}
	struct wr_image *img = NULL;
	if (wr_image_build_vm(wrd_images(), &o, &img, &err) < 0) {
		reply_store_err(r, err, NULL);
		return;
	}
	wrd_images_event("image_imported",
			 json_pack("{s:s, s:I, s:s, s:o}", "digest", img->digest, "size",
				   (json_int_t)img->size, "source", img->source, "refs",
				   strv_json(img->refs, img->n_refs)));
	wrd_images_gc_auto_keep(img->digest);
	wrd_reply_json(r, 201, wrd_image_json(img));
	wr_image_free(&img);
}
