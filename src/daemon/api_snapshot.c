/* Routes of snapshots: POST /v1/sandboxes/{id}/snapshot and /fork. Parse
 * and dispatch: the work is in snapshot.c and the create path. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/cleanup.h"
#include "daemon/api.h"
#include "daemon/api_images.h"
#include "daemon/jsonutil.h"
#include "daemon/lease.h"
#include "daemon/snapshot.h"

#define MAX_FORK 256

static void reply_snap_err(struct wrd_req *r, wr_err err)
{
	if (err->errnum == ESRCH)
		wrd_reply_error(r, "conflict", NULL, "%s", err->msg);
	else if (err->errnum == EOPNOTSUPP)
		wrd_reply_error(r, "invalid_argument", NULL, "%s", err->msg);
	else
		wrd_reply_err(r, err);
}

/* "processes": a boolean, false when absent. */
static int procs_arg(struct wrd_req *r, bool *procs)
{
	json_t *v = r->json ? json_object_get(r->json, "processes") : NULL;
	if (v && !json_is_boolean(v)) {
		wrd_reply_error(r, "invalid_argument", "processes",
				"processes: must be true or false");
		return -1;
	}
	*procs = json_is_true(v);
	return 0;
}

void wrd_api_sb_snapshot(struct wrd_req *r)
{
	static const char *const keys[] = {"name", "processes", NULL};
	if (wrd_query_check(r, NULL) < 0 || (r->json && wrd_api_known_keys(r, r->json, keys) < 0))
		return;
	_cleanup_err_ wr_err err = NULL;
	const char *name = NULL;
	json_t *v = r->json ? json_object_get(r->json, "name") : NULL;
	if (v && wrd_j_str(v, "name", 255, false, &name, &err) < 0) {
		wrd_reply_err(r, err);
		return;
	}
	bool procs = false;
	if (procs_arg(r, &procs) < 0)
		return;
	struct wrd_sbx *sb = wrd_api_sandbox(r, false);
	if (sb == NULL)
		return;
	char dflt[128];
	if (name == NULL) {
		char t[32];
		snprintf(t, sizeof(t), "%lld", (long long)wrd_now_ms());
		wrd_snapshot_name(sb, t, dflt, sizeof(dflt));
		name = dflt;
	}
	struct wr_image *img = NULL;
	if (wrd_snapshot_take(sb, name, procs, &img, &err) < 0)
		reply_snap_err(r, err);
	else
		wrd_reply_json(r, 201, wrd_image_json(img));
	wr_image_free(&img);
	wrd_mgr_put(sb);
}

/* fork: a snapshot, then `count` creates from it; the create fields of
 * POST /v1/sandboxes other than image and layers override the source's. */
void wrd_api_sb_fork(struct wrd_req *r)
{
	if (wrd_query_check(r, NULL) < 0)
		return;
	_cleanup_err_ wr_err err = NULL;
	int64_t count = 1;
	json_t *v = r->json ? json_object_get(r->json, "count") : NULL;
	if (v && wrd_j_int(v, "count", 1, MAX_FORK, &count, &err) < 0) {
		wrd_reply_err(r, err);
		return;
	}
	const char *name = NULL;
	if ((v = r->json ? json_object_get(r->json, "name") : NULL) &&
	    wrd_j_str(v, "name", 255, false, &name, &err) < 0) {
		wrd_reply_err(r, err);
		return;
	}
	static const char *const banned[] = {"image", "layers"};
	for (size_t i = 0; r->json && i < 2; i++)
		if (json_object_get(r->json, banned[i])) {
			wrd_reply_error(r, "invalid_argument", banned[i],
					"%s: a fork starts from its source's filesystem",
					banned[i]);
			return;
		}
	bool procs = false;
	if (procs_arg(r, &procs) < 0)
		return;
	struct wrd_sbx *sb = wrd_api_sandbox(r, false);
	if (sb == NULL)
		return;
	char dflt[128];
	if (name == NULL) {
		char t[40];
		snprintf(t, sizeof(t), "fork-%lld", (long long)wrd_now_ms());
		wrd_snapshot_name(sb, t, dflt, sizeof(dflt));
		name = dflt;
	}
	/* the source's settings, then the body's overrides */
	json_t *body = json_object();
	json_t *spec = sb->rec.spec;
	static const char *const inherit[] = {
	    "cpu",    "memory_mb", "disk_mb",	   "pids",	 "user",    "workdir", "env",
	    "labels", "timeout",   "idle_timeout", "on_timeout", "on_idle", "lease",   "cpu_max"};
	for (size_t i = 0; i < sizeof(inherit) / sizeof(inherit[0]); i++)
		if ((v = json_object_get(spec, inherit[i])))
			json_object_set(body, inherit[i], v);
	const char *k;
	json_object_foreach(r->json, k, v)
	{
		if (strcmp(k, "count") != 0 && strcmp(k, "name") != 0 &&
		    strcmp(k, "processes") != 0)
			json_object_set(body, k, v);
	}
	struct wr_image *img = NULL;
	/* declared before the first jump to out (its cleanup runs there) */
	_cleanup_(wrd_snapshot_restore_done) char *held = NULL;
	if (wrd_snapshot_take(sb, name, procs, &img, &err) < 0) {
		reply_snap_err(r, err);
		goto out;
	}
	json_object_set_new(body, "image", json_string(img->digest));
	/* its processes unpacked once for all N creates */
	if (procs && wrd_snapshot_procs_hold(img, &held, &err) < 0) {
		wrd_reply_err(r, err);
		goto out;
	}
	json_t *made = json_array();
	struct wrd_sbx *kids[MAX_FORK];
	int64_t n = 0;
	for (; n < count; n++) {
		json_t *b = json_deep_copy(body);
		kids[n] = wrd_api_create_body(r, b);
		json_decref(b);
		if (kids[n] == NULL)
			break;
	}
	if (n < count) {
		/* all or nothing: the error reply is set; end the ones made */
		for (int64_t i = 0; i < n; i++) {
			_cleanup_err_ wr_err e2 = NULL;
			wrd_mgr_kill(kids[i], WRD_KILLED, NULL, NULL, NULL, &e2);
			wrd_mgr_put(kids[i]);
		}
		json_decref(made);
		goto out;
	}
	for (int64_t i = 0; i < n; i++) {
		wrd_lease_created(kids[i]);
		pthread_mutex_lock(&kids[i]->lock);
		json_array_append_new(made, wrd_record_json(&kids[i]->rec));
		pthread_mutex_unlock(&kids[i]->lock);
		wrd_mgr_put(kids[i]);
	}
	json_t *o = json_object();
	json_object_set_new(o, "snapshot", wrd_image_json(img));
	json_object_set_new(o, "sandboxes", made);
	wrd_reply_json(r, 201, o);
out:
	wr_image_free(&img);
	json_decref(body);
	wrd_mgr_put(sb);
}
