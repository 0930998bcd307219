/* Routes of the lifecycle: pause and resume of a sandbox, leases, and the
 * lifecycle fields of a create. Parse and dispatch only: the work is in
 * lifecycle.c and lease.c. */
#include <errno.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "daemon/api.h"
#include "daemon/jsonutil.h"
#include "daemon/lease.h"

#define MAX_SECONDS 2592000.0 /* 30 days, as a sandbox's timeout */

int wrd_api_life_spec(struct wrd_req *r, json_t *b, json_t *spec)
{
	_cleanup_err_ wr_err err = NULL;
	json_t *v;
	const char *s = "pause";
	if ((v = json_object_get(b, "on_idle"))) {
		if (wrd_j_str(v, "on_idle", 16, false, &s, &err) < 0) {
			wrd_reply_err(r, err);
			return -1;
		}
		if (strcmp(s, "pause") != 0 && strcmp(s, "kill") != 0) {
			wrd_reply_error(r, "invalid_argument", "on_idle",
					"on_idle: one of \"pause\", \"kill\"");
			return -1;
		}
	}
	json_object_set_new(spec, "on_idle", json_string(s));
	if ((v = json_object_get(b, "lease")) && !json_is_null(v)) {
		if (wrd_j_str(v, "lease", WRD_LEASE_ID_MAX, false, &s, &err) < 0) {
			wrd_reply_err(r, err);
			return -1;
		}
		if (!wrd_lease_id_ok(s)) {
			wrd_reply_error(r, "invalid_argument", "lease",
					"lease: 1 to 63 of [A-Za-z0-9_.-]");
			return -1;
		}
		if (wrd_lease_check(r->tenant, s, &err) < 0) {
			wrd_reply_err(r, err);
			return -1;
		}
		json_object_set_new(spec, "lease", json_string(s));
	}
	return 0;
}

/* ---- pause, resume ------------------------------------------------------ */

static void reply_sandbox(struct wrd_req *r, struct wrd_sbx *sb, int rc, wr_err err)
{
	if (rc < 0 && err->errnum == ESRCH) {
		wrd_reply_error(r, "conflict", NULL, "%s", err->msg);
	} else if (rc < 0) {
		wrd_reply_err(r, err);
	} else {
		pthread_mutex_lock(&sb->lock);
		json_t *o = wrd_record_json(&sb->rec);
		pthread_mutex_unlock(&sb->lock);
		wrd_reply_json(r, 200, o);
	}
}

void wrd_api_sb_pause(struct wrd_req *r)
{
	static const char *const keys[] = {"keep_memory", NULL};
	if (wrd_query_check(r, NULL) < 0 || (r->json && wrd_api_known_keys(r, r->json, keys) < 0))
		return;
	_cleanup_err_ wr_err err = NULL;
	json_t *v = r->json ? json_object_get(r->json, "keep_memory") : NULL;
	bool keep = true;
	if (v && wrd_j_bool(v, "keep_memory", &keep, &err) < 0) {
		wrd_reply_err(r, err);
		return;
	}
	struct wrd_sbx *sb = wrd_api_sandbox(r, false);
	if (sb == NULL)
		return;
	/* keep_memory=false: the VM tiers write the VM's state to disk and
	 * end its QEMU (lifecycle_suspend.c); containers refuse it, with the
	 * reason (checkpoint.c) */
	int rc = keep ? wrd_mgr_pause(sb, "request", &err) : wrd_mgr_suspend(sb, "request", &err);
	reply_sandbox(r, sb, rc, err);
	wrd_mgr_put(sb);
}

void wrd_api_sb_resume(struct wrd_req *r)
{
	static const char *const keys[] = {"timeout", NULL};
	if (wrd_query_check(r, NULL) < 0 || (r->json && wrd_api_known_keys(r, r->json, keys) < 0))
		return;
	_cleanup_err_ wr_err err = NULL;
	json_t *v = r->json ? json_object_get(r->json, "timeout") : NULL;
	int64_t t = 0;
	if (v && wrd_j_int(v, "timeout", 1, (int64_t)MAX_SECONDS, &t, &err) < 0) {
		wrd_reply_err(r, err);
		return;
	}
	struct wrd_sbx *sb = wrd_api_sandbox(r, false);
	if (sb == NULL)
		return;
	int rc = wrd_mgr_resume(sb, "request", NULL, &err);
	/* a new lifetime from now, as E2B's connect(timeout) */
	if (rc == 0 && t > 0)
		rc = wrd_mgr_set_timeout(sb, t, &err);
	reply_sandbox(r, sb, rc, err);
	wrd_mgr_put(sb);
}

/* ---- leases ------------------------------------------------------------- */

static void reply_lease(struct wrd_req *r, int rc, wr_err err, json_t *o, unsigned status)
{
	if (rc < 0)
		wrd_reply_err(r, err);
	else
		wrd_reply_json(r, status, o);
}

static int seconds(struct wrd_req *r, const char *key, double dflt, double *out)
{
	_cleanup_err_ wr_err err = NULL;
	json_t *v = r->json ? json_object_get(r->json, key) : NULL;
	*out = dflt;
	if (v && wrd_j_num(v, key, 0, MAX_SECONDS, out, &err) < 0) {
		wrd_reply_err(r, err);
		return -1;
	}
	if (*out < 0.1) {
		wrd_reply_error(r, "invalid_argument", key, "%s: at least 0.1 seconds", key);
		return -1;
	}
	return 0;
}

void wrd_api_lease_create(struct wrd_req *r)
{
	static const char *const keys[] = {"id",	"grace_s",     "expire_s",
					   "on_expire", "keep_memory", NULL};
	if (wrd_query_check(r, NULL) < 0 || (r->json && wrd_api_known_keys(r, r->json, keys) < 0))
		return;
	_cleanup_err_ wr_err err = NULL;
	struct wrd_lease_opts o = {.on_expire = "kill", .keep_memory = true};
	json_t *v;
	if (r->json && (v = json_object_get(r->json, "keep_memory")) &&
	    wrd_j_bool(v, "keep_memory", &o.keep_memory, &err) < 0) {
		wrd_reply_err(r, err);
		return;
	}
	if (r->json && (v = json_object_get(r->json, "id")) && !json_is_null(v)) {
		if (wrd_j_str(v, "id", WRD_LEASE_ID_MAX, false, &o.id, &err) < 0) {
			wrd_reply_err(r, err);
			return;
		}
		if (!wrd_lease_id_ok(o.id)) {
			wrd_reply_error(r, "invalid_argument", "id",
					"id: 1 to 63 of [A-Za-z0-9_.-]");
			return;
		}
	}
	double grace, expire;
	if (seconds(r, "grace_s", 60, &grace) < 0 || seconds(r, "expire_s", 3600, &expire) < 0)
		return;
	if (expire < grace) {
		wrd_reply_error(r, "invalid_argument", "expire_s",
				"expire_s: must be at least grace_s (%g)", grace);
		return;
	}
	if (r->json && (v = json_object_get(r->json, "on_expire"))) {
		if (wrd_j_str(v, "on_expire", 16, false, &o.on_expire, &err) < 0) {
			wrd_reply_err(r, err);
			return;
		}
		if (strcmp(o.on_expire, "kill") != 0 && strcmp(o.on_expire, "pause") != 0 &&
		    strcmp(o.on_expire, "snapshot") != 0) {
			wrd_reply_error(r, "invalid_argument", "on_expire",
					"on_expire: one of \"kill\", \"pause\", \"snapshot\"");
			return;
		}
	}
	o.grace_ms = (int64_t)(grace * 1000);
	o.expire_ms = (int64_t)(expire * 1000);
	json_t *out = NULL;
	int rc = wrd_lease_create(r->tenant, &o, &out, &err);
	reply_lease(r, rc, err, out, 201);
}

void wrd_api_lease_list(struct wrd_req *r)
{
	if (wrd_query_check(r, NULL) < 0)
		return;
	_cleanup_err_ wr_err err = NULL;
	json_t *out = NULL;
	int rc = wrd_lease_list(r->tenant, &out, &err);
	reply_lease(r, rc, err, out, 200);
}

void wrd_api_lease_get(struct wrd_req *r)
{
	if (wrd_query_check(r, NULL) < 0)
		return;
	_cleanup_err_ wr_err err = NULL;
	json_t *out = NULL;
	int rc = wrd_lease_get(r->tenant, r->id, &out, &err);
	reply_lease(r, rc, err, out, 200);
}

/* heartbeat, suspend, resume: no body fields */
static void lease_op(struct wrd_req *r, int (*op)(const char *, const char *, json_t **, wr_err *))
{
	static const char *const keys[] = {NULL};
	if (wrd_query_check(r, NULL) < 0 || (r->json && wrd_api_known_keys(r, r->json, keys) < 0))
		return;
	_cleanup_err_ wr_err err = NULL;
	json_t *out = NULL;
	int rc = op(r->tenant, r->id, &out, &err);
	reply_lease(r, rc, err, out, 200);
}

void wrd_api_lease_heartbeat(struct wrd_req *r)
{
	lease_op(r, wrd_lease_heartbeat);
}

void wrd_api_lease_suspend(struct wrd_req *r)
{
	lease_op(r, wrd_lease_suspend);
}

void wrd_api_lease_resume(struct wrd_req *r)
{
	lease_op(r, wrd_lease_resume);
}

void wrd_api_lease_release(struct wrd_req *r)
{
	static const char *const keys[] = {"sandboxes", NULL};
	if (wrd_query_check(r, NULL) < 0 || (r->json && wrd_api_known_keys(r, r->json, keys) < 0))
		return;
	_cleanup_err_ wr_err err = NULL;
	const char *s = "kill";
	json_t *v = r->json ? json_object_get(r->json, "sandboxes") : NULL;
	if (v && wrd_j_str(v, "sandboxes", 16, false, &s, &err) < 0) {
		wrd_reply_err(r, err);
		return;
	}
	if (strcmp(s, "kill") != 0 && strcmp(s, "keep") != 0) {
		wrd_reply_error(r, "invalid_argument", "sandboxes",
				"sandboxes: one of \"kill\", \"keep\"");
		return;
	}
	json_t *out = NULL;
	int rc = wrd_lease_release(r->tenant, r->id, strcmp(s, "keep") == 0, &out, &err);
	reply_lease(r, rc, err, out, 200);
}
