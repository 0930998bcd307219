/* Snapshots: a sandbox's writable layer as a store image (snapshot.h).
 *
 * Ordering (crash safety): the capture holds the sandbox's `transition`
 * (pause, resume, exec and kill wait for it), freezes a running sandbox
 * without recording it, reads the upper directory into the store's staging
 * area, commits the image (atomic: rename, then one transaction), thaws.
 * A crash before the commit leaves a staging directory the next open of
 * the store sweeps, and a frozen sandbox whose record says running, which
 * recovery (wrd_life_reconcile) thaws. A paused sandbox is never thawed.
 */
#include "daemon/snapshot.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "daemon/images.h"
#include "daemon/jsonutil.h"

void wrd_snapshot_name(const struct wrd_sbx *sb, const char *what, char *buf, size_t len)
{
	snprintf(buf, len, "snapshot/%s:%s", sb->rec.id, what);
}

/* The snapshot's config: the sandbox's runtime defaults and the labels
 * naming its stack. */
static char *snap_config(struct wrd_sbx *sb, json_t *digests)
{
	json_t *cfg = json_object(), *labels = json_object();
	json_object_set_new(labels, WRD_SNAP_BASE, json_copy(json_array_get(digests, 0)));
	char *mid = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&mid, &len);
	for (size_t i = 1; f && i < json_array_size(digests); i++)
		fprintf(f, "%s%s", i > 1 ? "," : "", json_string_value(json_array_get(digests, i)));
	if (f)
		fclose(f);
	if (mid && mid[0])
		json_object_set_new(labels, WRD_SNAP_LAYERS, json_string(mid));
	free(mid);
	json_object_set_new(labels, WRD_SNAP_SOURCE, json_string(sb->rec.id));
	json_object_set_new(cfg, "Labels", labels);
	json_t *spec = sb->rec.spec;
	json_t *env = json_array();
	const char *k;
	json_t *v;
	json_object_foreach(json_object_get(spec, "env"), k, v)
	{
		char *kv = NULL;
		if (asprintf(&kv, "%s=%s", k, json_string_value(v)) >= 0)
			json_array_append_new(env, json_string(kv));
		free(kv);
	}
	json_object_set_new(cfg, "Env", env);
	const char *wd = json_string_value(json_object_get(spec, "workdir"));
	if (wd)
		json_object_set_new(cfg, "WorkingDir", json_string(wd));
	char user[16];
	snprintf(user, sizeof(user), "%lld",
		 (long long)json_integer_value(json_object_get(spec, "user")));
	json_object_set_new(cfg, "User", json_string(user));
	json_t *root = json_pack("{s:o}", "config", cfg);
	char *text = json_dumps(root, JSON_COMPACT);
	json_decref(root);
	return text;
}

int wrd_snapshot_take(struct wrd_sbx *sb, const char *ref, struct wr_image **out, wr_err *err)
{
	struct wr_image_store *store = wrd_images();
	if (store == NULL)
		return wr_err_set(err, EOPNOTSUPP, "this node has no image store");
	if (sb->ops->save) /* a whole VM: snapshot_vm.c */
		return wrd_snapshot_vm_take(sb, ref, out, err);
	if (sb->ops->upper == NULL || sb->ops->freeze == NULL)
		return wr_err_set(err, EOPNOTSUPP, "the %s tier has no snapshots", sb->ops->name);
	json_t *digests = json_object_get(sb->rec.spec, "image_digests");
	if (json_array_size(digests) == 0)
		return wr_err_set(err, EOPNOTSUPP,
				  "sandbox %s was not created from store images only: a snapshot "
				  "could not name its base",
				  sb->rec.id);
	_cleanup_free_ char *config = snap_config(sb, digests);
	if (config == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");

	pthread_mutex_lock(&sb->lock);
	wrd_sbx_wait_transition(sb);
	enum wrd_state st = sb->state;
	if ((st != WRD_RUNNING && st != WRD_PAUSED) || sb->reaping) {
		pthread_mutex_unlock(&sb->lock);
		return wr_err_set(err, ESRCH, "sandbox %s is %s", sb->rec.id,
				  st == WRD_RUNNING || st == WRD_PAUSED ? "being ended"
									: wrd_state_name(st));
	}
	sb->transition = true;
	pthread_mutex_unlock(&sb->lock);

	int64_t t0 = wrd_now_ms();
	bool thaw = st == WRD_RUNNING;
	int r = thaw ? sb->ops->freeze(sb->tsb, true, err) : 0;
	int fd = -1;
	uid_t base = 0;
	if (r == 0)
		r = sb->ops->upper(sb->tsb, &fd, &base, err);
	struct wr_image_import_opts io = {.ref = ref, .source = NULL};
	char source[64];
	snprintf(source, sizeof(source), "snapshot:%s", sb->rec.id);
	io.source = source;
	if (r == 0) {
		r = wr_image_import_upper(store, fd, base, config, &io, out, err);
		close(fd);
	}
	int64_t frozen_ms = wrd_now_ms() - t0;
	if (thaw) {
		_cleanup_err_ wr_err e2 = NULL;
		if (sb->ops->freeze(sb->tsb, false, &e2) < 0)
			wr_warn("sandbox %s: %s", sb->rec.id, e2->msg);
	}
	pthread_mutex_lock(&sb->lock);
	sb->transition = false;
	pthread_cond_broadcast(&sb->cv);
	pthread_mutex_unlock(&sb->lock);
	if (r < 0) {
		if ((*err)->errnum == EINVAL && (*err)->field) {
			free((*err)->field);
			(*err)->field = strdup("name");
		}
		return wr_err_wrap(err, "snapshot sandbox %s", sb->rec.id);
	}
	json_t *d = json_object();
	json_object_set_new(d, "name", json_string(ref));
	json_object_set_new(d, "digest", json_string((*out)->digest));
	json_object_set_new(d, "size", json_integer((json_int_t)(*out)->size));
	json_object_set_new(d, "frozen_s", json_real((double)frozen_ms / 1000.0));
	wrd_sbx_event(sb, "snapshot", d);
	json_t *ev = json_object();
	json_object_set_new(ev, "digest", json_string((*out)->digest));
	json_object_set_new(ev, "ref", json_string(ref));
	json_object_set_new(ev, "source", json_string(source));
	wrd_images_event("image_imported", ev);
	return 0;
}

int wrd_snapshot_expand(json_t *body, char **restore_dir, wr_err *err)
{
	*restore_dir = NULL;
	struct wr_image_store *store = wrd_images();
	const char *image = json_string_value(json_object_get(body, "image"));
	if (store == NULL || image == NULL || image[0] == '/' || image[0] == '.')
		return 0;
	struct wr_image *img = NULL;
	_cleanup_err_ wr_err e2 = NULL;
	if (wr_image_resolve(store, image, &img, &e2) < 0)
		return 0; /* not a store image: the create resolves it otherwise */
	if (wr_image_label(&img->config, "dev.warren.vm.snapshot")) {
		int vr = wrd_snapshot_vm_expand(body, img, restore_dir, err);
		wr_image_free(&img);
		return vr;
	}
	const char *base = wr_image_label(&img->config, WRD_SNAP_BASE);
	if (base == NULL) {
		wr_image_free(&img);
		return 0;
	}
	json_t *layers = json_array();
	const char *mid = wr_image_label(&img->config, WRD_SNAP_LAYERS);
	_cleanup_free_ char *copy = mid ? strdup(mid) : NULL;
	char *save = NULL;
	for (char *t = copy ? strtok_r(copy, ",", &save) : NULL; t; t = strtok_r(NULL, ",", &save))
		json_array_append_new(layers, json_string(t));
	json_array_append_new(layers, json_string(img->digest));
	json_t *own = json_object_get(body, "layers");
	if (json_is_array(own))
		json_array_extend(layers, own);
	int r = 0;
	struct wr_image *b = NULL;
	if (wr_image_resolve(store, base, &b, &e2) < 0) {
		r = wr_err_field(err, "image",
				 "image: snapshot '%s' goes on base image %s, which this node's "
				 "store does not have (pull or import it first)",
				 image, base);
	} else if (json_array_size(layers) > WRD_MAX_HOLDS - 1) {
		r = wr_err_field(err, "image",
				 "image: snapshot '%s' stacks %zu layers (at most %d)", image,
				 json_array_size(layers), WRD_MAX_HOLDS - 1);
	} else {
		json_object_set_new(body, "image", json_string(base));
		json_object_set(body, "layers", layers);
	}
	wr_image_free(&b);
	wr_image_free(&img);
	json_decref(layers);
	return r;
}
