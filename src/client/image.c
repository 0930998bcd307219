/* libwarren: the node's image store (/v1/images). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/client_internal.h"
#include "common/cleanup.h"

static void image_clear(warren_image *img)
{
	free(img->digest);
	free(img->source);
	free(img->created_at);
	free(img->last_used_at);
	for (size_t i = 0; i < img->n_refs; i++)
		free(img->refs[i]);
	free(img->refs);
	free(img->json);
	free(img->kind);
	memset(img, 0, sizeof(*img));
}

void warren_image_free(warren_image *img)
{
	if (img == NULL)
		return;
	image_clear(img);
	free(img);
}

void warren_image_list_free(warren_image_list *l)
{
	if (l == NULL)
		return;
	for (size_t i = 0; i < l->count; i++)
		image_clear(&l->images[i]);
	free(l->images);
	free(l);
}

static int parse_image(struct wc_call *c, json_t *o, warren_image *img)
{
	memset(img, 0, sizeof(*img));
	if (!json_is_object(o) || !json_is_string(json_object_get(o, "digest")))
		return wc_fail(c, "protocol", EPROTO, "answer is not an image");
	img->digest = wc_jstr(o, "digest");
	img->size = wc_jint(o, "size", 0);
	img->source = wc_jstr(o, "source");
	img->created_at = wc_jstr(o, "created");
	img->last_used_at = wc_jstr(o, "last_used");
	img->pinned = wc_jbool(o, "pinned");
	img->complete = wc_jbool(o, "complete");
	img->holders = wc_jint(o, "holders", 0);
	img->kind =
	    json_is_string(json_object_get(o, "kind")) ? wc_jstr(o, "kind") : strdup("rootfs");
	json_t *refs = json_object_get(o, "refs");
	size_t n = json_array_size(refs);
	img->refs = calloc(n ? n : 1, sizeof(char *));
	if (img->refs == NULL)
		return wc_fail(c, "internal", ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		if (json_is_string(json_array_get(refs, i)))
			img->refs[img->n_refs++] =
			    strdup(json_string_value(json_array_get(refs, i)));
	img->json = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	return 0;
}

static int image_out(struct wc_call *c, json_t *ans, warren_image **out)
{
	if (out == NULL)
		return 0;
	warren_image *img = calloc(1, sizeof(*img));
	if (img == NULL)
		return wc_fail(c, "internal", ENOMEM, "out of memory");
	int r = parse_image(c, ans, img);
	if (r < 0) {
		warren_image_free(img);
		return r;
	}
	*out = img;
	return 0;
}

static int list(struct wc_call *c, warren_image_list **out)
{
	_cleanup_json_ json_t *ans = NULL;
	int r = wc_json(c, "GET", "/v1/images", NULL, &ans);
	if (r < 0)
		return r;
	json_t *arr = json_object_get(ans, "images");
	if (!json_is_array(arr))
		return wc_fail(c, "protocol", EPROTO, "answer has no images");
	warren_image_list *l = calloc(1, sizeof(*l));
	size_t n = json_array_size(arr);
	if (l == NULL || (l->images = calloc(n ? n : 1, sizeof(*l->images))) == NULL) {
		free(l);
		return wc_fail(c, "internal", ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		if ((r = parse_image(c, json_array_get(arr, i), &l->images[i])) < 0) {
			l->count = i + 1;
			warren_image_list_free(l);
			return r;
		}
		l->count = i + 1;
	}
	json_t *u = json_object_get(ans, "usage");
	l->blob_bytes = wc_jint(u, "blob_bytes", 0);
	l->cache_bytes = wc_jint(u, "cache_bytes", 0);
	l->quota_bytes = wc_jint(u, "quota_bytes", 0);
	*out = l;
	return 0;
}

int warren_image_list_get(warren_client *cl, warren_image_list **out, warren_error **errp)
{
	struct wc_call c = {.client = cl};
	*out = NULL;
	return wc_finish(&c, list(&c, out), errp, "list images");
}

/* "/v1/images/<ref><suffix>[?query]". A path segment cannot hold '/', so
 * a name with one goes as "/v1/images/-<suffix>?ref=<name>". */
static char *image_path(struct wc_call *c, const char *ref, const char *suffix, const char *query)
{
	if (ref == NULL || ref[0] == '\0' || strlen(ref) > 255) {
		wc_fail_field(c, "ref", "ref: 1 to 255 bytes are required");
		return NULL;
	}
	if (strchr(ref, '/')) {
		_cleanup_free_ char *e = wc_esc(ref);
		return e ? wc_fmt("/v1/images/-%s?ref=%s%s%s", suffix, e, query ? "&" : "",
				  query ? query : "")
			 : NULL;
	}
	static const char hex[] = "0123456789ABCDEF";
	char seg[256 * 3 + 1], *o = seg;
	for (const unsigned char *p = (const unsigned char *)ref; *p; p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		    (*p >= '0' && *p <= '9') || strchr("-._~:@", *p)) {
			*o++ = (char)*p;
		} else {
			*o++ = '%';
			*o++ = hex[*p >> 4];
			*o++ = hex[*p & 15];
		}
	}
	*o = '\0';
	return wc_fmt("/v1/images/%s%s%s%s", seg, suffix, query ? "?" : "", query ? query : "");
}

int warren_image_get(warren_client *cl, const char *ref, warren_image **out, warren_error **errp)
{
	struct wc_call c = {.client = cl};
	_cleanup_json_ json_t *ans = NULL;
	*out = NULL;
	_cleanup_free_ char *path = image_path(&c, ref, "", NULL);
	int r = path ? wc_json(&c, "GET", path, NULL, &ans) : -1;
	if (r >= 0)
		r = image_out(&c, ans, out);
	return wc_finish(&c, r < 0 ? r : 0, errp, "image %s", ref ? ref : "");
}

int warren_image_tag(warren_client *cl, const char *ref, const char *new_ref, warren_image **out,
		     warren_error **errp)
{
	struct wc_call c = {.client = cl};
	_cleanup_json_ json_t *ans = NULL, *req = NULL;
	if (out)
		*out = NULL;
	_cleanup_free_ char *path = image_path(&c, ref, "/tag", NULL);
	int r = path ? 0 : -1;
	if (r == 0 && (new_ref == NULL || new_ref[0] == '\0'))
		r = wc_fail_field(&c, "ref", "ref: the new name is required");
	if (r == 0 && (req = json_pack("{s:s}", "ref", new_ref)) == NULL)
		r = wc_fail(&c, "internal", ENOMEM, "out of memory");
	if (r == 0)
		r = wc_json(&c, "POST", path, req, &ans);
	if (r >= 0)
		r = image_out(&c, ans, out);
	return wc_finish(&c, r < 0 ? r : 0, errp, "tag image %s", ref ? ref : "");
}

int warren_image_build_vm(warren_client *cl, const char *image, const char *ref, const char *size,
			  warren_image **out, warren_error **errp)
{
	return warren_image_build_vm_firmware(cl, image, ref, size, NULL, out, errp);
}

int warren_image_build_vm_firmware(warren_client *cl, const char *image, const char *ref,
				   const char *size, const char *firmware, warren_image **out,
				   warren_error **errp)
{
	struct wc_call c = {.client = cl};
	_cleanup_json_ json_t *ans = NULL, *req = NULL;
	if (out)
		*out = NULL;
	int r = 0;
	if (image == NULL || image[0] == '\0')
		r = wc_fail_field(&c, "image", "image: the rootfs image to build from is required");
	if (r == 0 && (req = json_pack("{s:s, s:s?, s:s?, s:s?}", "image", image, "ref", ref,
				       "size", size, "firmware", firmware)) == NULL)
		r = wc_fail(&c, "internal", ENOMEM, "out of memory");
	if (r == 0)
		r = wc_json(&c, "POST", "/v1/images/build-vm", req, &ans);
	if (r >= 0)
		r = image_out(&c, ans, out);
	return wc_finish(&c, r < 0 ? r : 0, errp, "build-vm %s", image ? image : "");
}

int warren_image_remove(warren_client *cl, const char *ref, bool force, bool *removed,
			warren_error **errp)
{
	struct wc_call c = {.client = cl};
	_cleanup_json_ json_t *ans = NULL;
	if (removed)
		*removed = false;
	_cleanup_free_ char *path = image_path(&c, ref, "", force ? "force=1" : NULL);
	int r = path ? wc_json(&c, "DELETE", path, NULL, &ans) : -1;
	if (r >= 0 && removed)
		*removed = wc_jbool(ans, "removed");
	return wc_finish(&c, r < 0 ? r : 0, errp, "remove image %s", ref ? ref : "");
}

int warren_image_pin(warren_client *cl, const char *ref, bool pinned, warren_image **out,
		     warren_error **errp)
{
	struct wc_call c = {.client = cl};
	_cleanup_json_ json_t *ans = NULL;
	if (out)
		*out = NULL;
	_cleanup_free_ char *path = image_path(&c, ref, pinned ? "/pin" : "/unpin", NULL);
	int r = path ? wc_json(&c, "POST", path, NULL, &ans) : -1;
	if (r >= 0)
		r = image_out(&c, ans, out);
	return wc_finish(&c, r < 0 ? r : 0, errp, "%s image %s", pinned ? "pin" : "unpin",
			 ref ? ref : "");
}

int warren_image_gc(warren_client *cl, bool dry_run, bool prune_untagged, char **report_json,
		    warren_error **errp)
{
	struct wc_call c = {.client = cl};
	_cleanup_json_ json_t *ans = NULL;
	if (report_json)
		*report_json = NULL;
	_cleanup_free_ char *path = wc_fmt("/v1/images/gc?dry_run=%d&prune_untagged=%d",
					   dry_run ? 1 : 0, prune_untagged ? 1 : 0);
	int r = wc_json(&c, "POST", path, NULL, &ans);
	if (r >= 0 && report_json)
		*report_json = json_dumps(ans, JSON_COMPACT | JSON_PRESERVE_ORDER);
	return wc_finish(&c, r < 0 ? r : 0, errp, "image gc");
}

int warren_image_import(warren_client *cl, const warren_image_import_opts *o, warren_image **out,
			warren_error **errp)
{
	struct wc_call c = {.client = cl};
	_cleanup_json_ json_t *req = NULL, *ans = NULL;
	struct wc_buf body = {0};
	if (out)
		*out = NULL;
	int r = 0;
	if (o == NULL || ((o->node_path == NULL) == (o->fd < 0)))
		r = wc_fail_field(&c, "path", "import: give either a node path or a fd");
	_cleanup_free_ char *path = NULL;
	const char *fw = o && o->version >= 2 ? o->firmware : NULL;
	if (r == 0 && o->node_path) {
		req = json_pack("{s:s}", "path", o->node_path);
		if (req && o->format)
			json_object_set_new(req, "format", json_string(o->format));
		if (req && o->ref)
			json_object_set_new(req, "ref", json_string(o->ref));
		if (req && fw)
			json_object_set_new(req, "firmware", json_string(fw));
		_cleanup_free_ char *text = req ? json_dumps(req, JSON_COMPACT) : NULL;
		if (text == NULL)
			r = wc_fail(&c, "internal", ENOMEM, "out of memory");
		struct wc_req rq = WC_REQ_INIT("POST", "/v1/images/import");
		rq.data = text;
		rq.len = text ? strlen(text) : 0;
		rq.has_data = true;
		rq.content_type = "application/json";
		rq.long_running = true;
		if (r == 0)
			r = wc_do(&c, &rq, &body);
	} else if (r == 0) {
		_cleanup_free_ char *eref = o->ref ? wc_esc(o->ref) : NULL;
		_cleanup_free_ char *efmt = o->format ? wc_esc(o->format) : NULL;
		_cleanup_free_ char *efw = fw ? wc_esc(fw) : NULL;
		path = wc_fmt("/v1/images/import?format=%s%s%s%s%s", efmt ? efmt : "auto",
			      eref ? "&ref=" : "", eref ? eref : "", efw ? "&firmware=" : "",
			      efw ? efw : "");
		struct wc_req rq = WC_REQ_INIT("POST", path);
		rq.in_fd = o->fd;
		rq.content_type = "application/x-tar";
		rq.long_running = true;
		r = path ? wc_do(&c, &rq, &body) : wc_fail(&c, "internal", ENOMEM, "out of memory");
	}
	if (r >= 0) {
		json_error_t je;
		ans = body.p ? json_loadb(body.p, body.len, 0, &je) : NULL;
		r = ans ? image_out(&c, ans, out)
			: wc_fail(&c, "protocol", EPROTO, "import: answer is not JSON");
	}
	wc_buf_free(&body);
	return wc_finish(&c, r < 0 ? r : 0, errp, "import image");
}

/* For image_remote.c (registry push and pull, branch registry). */
char *wc_image_path(struct wc_call *c, const char *ref, const char *suffix, const char *query)
{
	return image_path(c, ref, suffix, query);
}

int wc_image_out(struct wc_call *c, json_t *ans, warren_image **out)
{
	return image_out(c, ans, out);
}
