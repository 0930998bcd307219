/* Routes on sandboxes: create, get, list, kill, timeout, events; health
 * and metrics; and the helpers every handler shares. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "daemon/api.h"
#include "daemon/checkpoint.h"
#include "tiers/tier.h"
#include "daemon/images.h"
#include "daemon/jsonutil.h"
#include "daemon/trail.h"
#include "daemon/lease.h"
#include "daemon/metrics.h"
#include "daemon/network.h"
#include "daemon/netpolicy.h"
#include "daemon/snapshot.h"

#ifndef WARREN_VERSION
#define WARREN_VERSION "0.0.0"
#endif

/* ---- shared helpers ----------------------------------------------------- */

void wrd_api_not_live(struct wrd_req *r)
{
	struct wrd_record rec;
	_cleanup_err_ wr_err err = NULL;
	int g = wrd_db_get(r->id, &rec, &err);
	if (g == 0 && strcmp(rec.tenant, r->tenant) == 0) {
		wrd_reply_error(r, "conflict", NULL, "sandbox %s is %s", r->id,
				wrd_state_name(rec.state));
		wrd_record_clear(&rec);
		return;
	}
	if (g == 0) {
		wrd_record_clear(&rec);
		wrd_audit_api(r, 404, "another tenant's sandbox");
	}
	if (g < 0 && err && err->errnum != ENOENT) {
		wrd_reply_err(r, err);
		return;
	}
	wrd_reply_error(r, "not_found", NULL, "sandbox %s not found", r->id);
}

struct wrd_sbx *wrd_api_sandbox(struct wrd_req *r, bool begin)
{
	struct wrd_sbx *sb;
	if (wrd_mgr_get(r->tenant, r->id, &sb) < 0) {
		wrd_api_not_live(r);
		return NULL;
	}
	if (begin) {
		/* an operation that needs it running resumes a paused one
		 * first (lifecycle.c) */
		_cleanup_err_ wr_err err = NULL;
		if (wrd_sbx_begin_resume(sb, &err) == 0)
			return sb;
		if (err->errnum == ESRCH)
			wrd_reply_error(r, "conflict", NULL, "%s", err->msg);
		else
			wrd_reply_err(r, err);
		wrd_mgr_put(sb);
		return NULL;
	}
	pthread_mutex_lock(&sb->lock);
	bool live = sb->state == WRD_RUNNING || sb->state == WRD_PAUSED;
	if (live)
		sb->last_active_ms = wrd_now_ms();
	pthread_mutex_unlock(&sb->lock);
	if (live)
		return sb;
	wrd_reply_error(r, "conflict", NULL, "sandbox %s is %s", r->id, wrd_state_name(sb->state));
	wrd_mgr_put(sb);
	return NULL;
}

void wrd_api_done(struct wrd_sbx *sb, bool begun)
{
	if (begun)
		wrd_sbx_end(sb);
	wrd_mgr_put(sb);
}

int wrd_api_known_keys(struct wrd_req *r, json_t *obj, const char *const *allowed)
{
	const char *k;
	json_t *v;
	json_object_foreach(obj, k, v)
	{
		size_t i = 0;
		while (allowed[i] && strcmp(allowed[i], k) != 0)
			i++;
		if (allowed[i] == NULL) {
			wrd_reply_error(r, "invalid_argument", k, "%s: unknown field", k);
			return -1;
		}
	}
	return 0;
}

int wrd_api_env(struct wrd_req *r, json_t *env, const char *field)
{
	_cleanup_err_ wr_err err = NULL;
	if (wrd_j_strmap(env, field, 4096, &err) < 0) {
		wrd_reply_err(r, err);
		return -1;
	}
	const char *k;
	json_t *v;
	json_object_foreach(env, k, v)
	{
		if (*k == 0 || strchr(k, '=') || strlen(k) > 1024) {
			wrd_reply_error(r, "invalid_argument", field,
					"%s: invalid variable name '%s' (empty, '=' or too long)",
					field, k);
			return -1;
		}
	}
	return 0;
}

/* ---- create ------------------------------------------------------------- */

static const char *const create_keys[] = {
    "tier",	  "image",	"cpu",	   "memory_mb",	    "disk_mb", "pids",
    "env",	  "workdir",	"user",	   "labels",	    "timeout", "idle_timeout",
    "on_timeout", "layers",	"pull",	   "registry_auth", "on_idle", "lease",
    "network",	  "file_trail", "cpu_max", "display",	    NULL};

static bool label_key_ok(const char *k)
{
	size_t n = strlen(k);
	if (n < 1 || n > 63)
		return false;
	for (; *k; k++)
		if (!((*k >= 'a' && *k <= 'z') || (*k >= 'A' && *k <= 'Z') ||
		      (*k >= '0' && *k <= '9') || *k == '_' || *k == '.' || *k == '-'))
			return false;
	return true;
}

static int check_labels(struct wrd_req *r, json_t *v)
{
	_cleanup_err_ wr_err err = NULL;
	if (wrd_j_strmap(v, "labels", 64, &err) < 0) {
		wrd_reply_err(r, err);
		return -1;
	}
	const char *k;
	json_t *val;
	json_object_foreach(v, k, val)
	{
		if (!label_key_ok(k)) {
			wrd_reply_error(r, "invalid_argument", "labels",
					"labels: key '%s' must be 1 to 63 of [A-Za-z0-9_.-]", k);
			return -1;
		}
		if (json_string_length(val) > 255) {
			wrd_reply_error(r, "invalid_argument", "labels",
					"labels.%s: values are at most 255 bytes", k);
			return -1;
		}
	}
	return 0;
}

/* Validate the body into a normalised spec (defaults filled). */
static json_t *create_spec(struct wrd_req *r, const char **image, const char **tier)
{
	json_t *b = r->json;
	const struct wrd_limits *d = &wrd_mgr_cfg->defaults;
	_cleanup_err_ wr_err err = NULL;
	if (b == NULL) {
		wrd_reply_error(r, "invalid_argument", "image", "image: is required");
		return NULL;
	}
	if (wrd_api_known_keys(r, b, create_keys) < 0)
		return NULL;
	json_t *spec = json_object();
	json_t *v;
	int64_t x;
	double cpu = d->cpu;
	const char *s;
	*tier = "container";
	if ((v = json_object_get(b, "tier"))) {
		if (wrd_j_str(v, "tier", 64, false, tier, &err) < 0)
			goto bad;
		if (strcmp(*tier, "function") == 0) {
			/* one call, not a sandbox one keeps: its own routes */
			wrd_reply_error(r, "invalid_argument", "tier",
					"tier: function calls go to /v1/functions/call");
			goto fail;
		}
		if (wr_tier_lookup(*tier) == NULL) {
			wrd_reply_error(r, "invalid_argument", "tier",
					"tier: unknown tier '%s' (this node offers: container%s)",
					*tier, wr_tier_lookup("microvm") ? ", microvm" : "");
			goto fail;
		}
	}
	if ((v = json_object_get(b, "image")) == NULL) {
		wrd_reply_error(r, "invalid_argument", "image", "image: is required");
		goto fail;
	}
	if (wrd_j_str(v, "image", 4095, false, image, &err) < 0)
		goto bad;
	if ((v = json_object_get(b, "cpu")) && wrd_j_num(v, "cpu", 0, 64, &cpu, &err) < 0)
		goto bad;
	json_object_set_new(spec, "cpu", json_real(cpu));
	/* the quota (harvest.c): a request can burst up to it */
	double cpu_max = 0;
	if ((v = json_object_get(b, "cpu_max")) &&
	    wrd_j_num(v, "cpu_max", 0, 64, &cpu_max, &err) < 0)
		goto bad;
	if (v && strcmp(*tier, "container") != 0) {
		wrd_reply_error(
		    r, "invalid_argument", "cpu_max",
		    "cpu_max: only container sandboxes burst (a VM's cpu is its vCPUs)");
		goto fail;
	}
	if (cpu_max > 0 && cpu_max < cpu) {
		wrd_reply_error(r, "invalid_argument", "cpu_max",
				"cpu_max: must be at least cpu (%g)", cpu);
		goto fail;
	}
	if (cpu_max > 0)
		json_object_set_new(spec, "cpu_max", json_real(cpu_max));
	static const struct {
		const char *key;
		int64_t min, max;
	} ints[] = {{"memory_mb", 8, 1048576}, {"disk_mb", 1, 1048576},
		    {"pids", 4, 65536},	       {"user", 0, 65535},
		    {"timeout", 1, 2592000},   {"idle_timeout", 0, 2592000}};
	int64_t defs[] = {d->memory_mb, d->disk_mb, d->pids, 0, d->timeout, d->idle_timeout};
	for (size_t i = 0; i < WR_ARRAY_SIZE(ints); i++) {
		x = defs[i];
		if ((v = json_object_get(b, ints[i].key)) &&
		    wrd_j_int(v, ints[i].key, ints[i].min, ints[i].max, &x, &err) < 0)
			goto bad;
		json_object_set_new(spec, ints[i].key, json_integer(x));
	}
	const char *workdir = "/";
	if ((v = json_object_get(b, "workdir"))) {
		if (wrd_j_str(v, "workdir", 4095, false, &workdir, &err) < 0)
			goto bad;
		if (workdir[0] != '/') {
			wrd_reply_error(r, "invalid_argument", "workdir",
					"workdir: must be an absolute path");
			goto fail;
		}
	}
	json_object_set_new(spec, "workdir", json_string(workdir));
	if ((v = json_object_get(b, "env"))) {
		if (wrd_api_env(r, v, "env") < 0)
			goto fail;
		json_object_set(spec, "env", v);
	} else {
		json_object_set_new(spec, "env", json_object());
	}
	if ((v = json_object_get(b, "labels"))) {
		if (check_labels(r, v) < 0)
			goto fail;
		json_object_set(spec, "labels", v);
	} else {
		json_object_set_new(spec, "labels", json_object());
	}
	s = "kill";
	if ((v = json_object_get(b, "on_timeout"))) {
		if (wrd_j_str(v, "on_timeout", 16, false, &s, &err) < 0)
			goto bad;
		if (strcmp(s, "kill") != 0 && strcmp(s, "pause") != 0) {
			wrd_reply_error(r, "invalid_argument", "on_timeout",
					"on_timeout: one of \"kill\", \"pause\"");
			goto fail;
		}
	}
	json_object_set_new(spec, "on_timeout", json_string(s));
	/* the vm tier's display: a VNC endpoint only when asked for */
	if ((v = json_object_get(b, "display"))) {
		json_t *vnc = json_object_get(v, "vnc");
		if (!json_is_object(v) || json_object_size(v) != (vnc ? 1u : 0u) ||
		    (vnc && !json_is_boolean(vnc))) {
			wrd_reply_error(r, "invalid_argument", "display",
					"display: must be {\"vnc\": true|false}");
			goto fail;
		}
		if (strcmp(*tier, "vm") != 0) {
			wrd_reply_error(r, "invalid_argument", "display",
					"display: only the vm tier has a display");
			goto fail;
		}
		if (json_is_true(vnc))
			json_object_set_new(spec, "display", json_pack("{s:b}", "vnc", 1));
	}
	/* lifecycle (lifecycle.c, lease.c): what idleness does, the lease */
	if (wrd_api_life_spec(r, b, spec) < 0)
		goto fail;
	/* network policy (netpolicy.c), stored normalised with the record; its
	 * "mode" is what the plumbing (network.c) reads to give a networked
	 * sandbox a namespace of the pool */
	{
		struct wrd_netpolicy np;
		int nr = wrd_netpolicy_parse(json_object_get(b, "network"), &np, &err);
		if (nr == 0 && np.mode != WR_NET_NONE && !wrd_net_enabled())
			nr = wr_err_field(&err, "network.mode",
					  "network.mode: this node has networking disabled (config "
					  "network.enable); only \"none\" is available");
		if (nr == 0 && np.mode != WR_NET_NONE && !wrd_nf_enabled())
			nr = wr_err_field(&err, "network.mode",
					  "network.mode: this node has no network filter; only "
					  "\"none\" is possible");
		if (nr == 0)
			json_object_set_new(spec, "network", wrd_netpolicy_json(&np));
		wrd_netpolicy_clear(&np);
		if (nr < 0)
			goto bad;
	}
	/* the file-access trail (trail.c), off unless asked for */
	{
		json_t *trail = NULL;
		if (wrd_trail_parse(json_object_get(b, "file_trail"), *tier, &trail, &err) < 0)
			goto bad;
		if (trail)
			json_object_set_new(spec, "file_trail", trail);
	}
	/* pull policy and credentials of registry references (images_pull.c);
	 * the credentials never reach the spec, the database or the log */
	if ((v = json_object_get(b, "pull"))) {
		if (wrd_j_str(v, "pull", 16, false, &s, &err) < 0)
			goto bad;
		if (wrd_images_pull_policy(s) < 0) {
			wrd_reply_error(r, "invalid_argument", "pull",
					"pull: one of \"missing\", \"always\", \"never\"");
			goto fail;
		}
	}
	if ((v = json_object_get(b, "registry_auth")) && !json_is_object(v) && !json_is_null(v)) {
		wrd_reply_error(r, "invalid_argument", "registry_auth",
				"registry_auth: an object {\"username\", \"password\"} or "
				"{\"token\"}");
		goto fail;
	}
	return spec;
bad:
	wrd_reply_err(r, err);
fail:
	json_decref(spec);
	return NULL;
}

static struct wrd_sbx *create_body(struct wrd_req *r);

struct wrd_sbx *wrd_api_create_body(struct wrd_req *r, json_t *body)
{
	/* the body is the request's for create_spec and the image helpers */
	json_t *saved = r->json;
	r->json = body;
	struct wrd_sbx *sb = create_body(r);
	r->json = saved;
	return sb;
}

void wrd_api_sb_create(struct wrd_req *r)
{
	if (wrd_query_check(r, NULL) < 0)
		return;
	struct wrd_sbx *sb = create_body(r);
	if (sb == NULL)
		return;
	wrd_lease_created(sb); /* suspended meanwhile: paused now */
	pthread_mutex_lock(&sb->lock);
	json_t *o = wrd_record_json(&sb->rec);
	pthread_mutex_unlock(&sb->lock);
	wrd_reply_json(r, 201, o);
	wrd_mgr_put(sb);
}

/* The create's work: the reply is set on failure only (NULL). */
static struct wrd_sbx *create_body(struct wrd_req *r)
{
	const char *image, *tier;
	/* a snapshot stands for its stack: base + layers + itself */
	_cleanup_err_ wr_err xerr = NULL;
	_cleanup_(wrd_snapshot_restore_done) char *restore = NULL; /* a VM snapshot unpacked */
	json_t *orig_image = r->json ? json_incref(json_object_get(r->json, "image")) : NULL;
	/* A configured image name is that image, before the store (as below):
	 * it is no snapshot, and its create does not look it up in the store
	 * (~0.1 ms of every create, bench/README.md). */
	if (r->json && json_is_string(orig_image) &&
	    wrd_config_image(wrd_mgr_cfg, json_string_value(orig_image)) == NULL &&
	    wrd_snapshot_expand(r->json, &restore, &xerr) < 0) {
		json_decref(orig_image);
		wrd_reply_err(r, xerr);
		return NULL;
	}
	json_t *spec = create_spec(r, &image, &tier);
	if (spec == NULL) {
		json_decref(orig_image);
		return NULL;
	}
	if (restore)
		json_object_set_new(spec, "restore_dir", json_string(restore));
	const char *path = wrd_config_image(wrd_mgr_cfg, image);
	/* image store refs and layers (images.c): held by the sandbox */
	_cleanup_free_ char *store_path = NULL;
	struct wrd_image_holds holds = {0};
	_cleanup_err_ wr_err ierr = NULL;
	if (path == NULL && wrd_images_hold(&holds, image, r->json, spec, &store_path, &ierr) < 0) {
		wrd_reply_err(r, ierr);
		json_decref(spec);
		json_decref(orig_image);
		return NULL;
	}
	if (store_path)
		path = store_path;
	if (path == NULL && image[0] == '/') {
		/* A host path as rootfs is the node operator's choice only:
		 * remote tenants could otherwise read any host directory. */
		if (r->tcp) {
			wrd_reply_error(r, "invalid_argument", "image",
					"image: paths are accepted on the Unix socket only; use a "
					"configured image name");
			json_decref(spec);
			json_decref(orig_image);
			return NULL;
		}
		path = image;
	}
	struct stat st;
	if (path == NULL || stat(path, &st) < 0 || !(S_ISDIR(st.st_mode) || S_ISREG(st.st_mode))) {
		wrd_reply_error(r, "invalid_argument", "image",
				"image: '%s' is not a configured image or an existing rootfs "
				"directory or EROFS file",
				image);
		wrd_images_holds_drop(&holds);
		json_decref(spec);
		json_decref(orig_image);
		return NULL;
	}
	if (wrd_images_stack(&holds, wrd_mgr_cfg, r->json, r->tcp, path, spec, &ierr) < 0) {
		wrd_reply_err(r, ierr);
		wrd_images_holds_drop(&holds);
		json_decref(spec);
		json_decref(orig_image);
		return NULL;
	}
	/* the stack's digests, base first, when every part is a store image:
	 * what a snapshot of this sandbox records as its base */
	json_t *ls = json_object_get(r->json, "layers");
	if (store_path && holds.n == 1 + json_array_size(ls)) {
		json_t *dg = json_array();
		for (size_t i = 0; i < holds.n; i++)
			json_array_append_new(dg, json_string(holds.digest[i]));
		json_object_set_new(spec, "image_digests", dg);
	}
	struct wrd_record rec = {0};
	rec.tenant = (char *)r->tenant;
	rec.tier = (char *)tier;
	rec.image = (char *)(json_is_string(orig_image) ? json_string_value(orig_image) : image);
	rec.image_path = (char *)path;
	rec.spec = spec;
	struct wrd_sbx *sb = NULL;
	_cleanup_err_ wr_err err = NULL;
	if (wrd_mgr_create(&rec, &sb, &err) < 0) {
		if (err && err->errnum == EINVAL && err->field == NULL)
			err->errnum = EIO; /* the kernel's EINVAL is not the client's fault */
		wrd_reply_err(r, err);
		wrd_images_holds_drop(&holds);
		sb = NULL;
	} else {
		wrd_images_holds_adopt(&holds, sb->rec.id);
	}
	json_decref(spec);
	json_decref(orig_image);
	return sb;
}

/* ---- get, list, kill, timeout ------------------------------------------- */

void wrd_api_sb_get(struct wrd_req *r)
{
	if (wrd_query_check(r, NULL) < 0)
		return;
	struct wrd_record rec;
	_cleanup_err_ wr_err err = NULL;
	if (wrd_db_get(r->id, &rec, &err) < 0) {
		if (err->errnum == ENOENT)
			wrd_reply_error(r, "not_found", NULL, "sandbox %s not found", r->id);
		else
			wrd_reply_err(r, err);
		return;
	}
	if (strcmp(rec.tenant, r->tenant) != 0) {
		/* the same 404 as an unknown id, and the refusal recorded as
		 * every other route of another tenant's sandbox records it */
		wrd_audit_api(r, 404, "another tenant's sandbox");
		wrd_reply_error(r, "not_found", NULL, "sandbox %s not found", r->id);
	} else {
		json_t *o = wrd_record_json(&rec);
		wrd_life_usage_json(r->tenant, r->id, o); /* live: what it uses */
		wrd_api_vm_display_json(r->tenant, r->id, o);
		wrd_reply_json(r, 200, o);
	}
	wrd_record_clear(&rec);
}

void wrd_api_sb_list(struct wrd_req *r)
{
	static const char *const allowed[] = {"state", "label", "limit", "page_token", NULL};
	if (wrd_query_check(r, allowed) < 0)
		return;
	struct wrd_list_query q = {.tenant = r->tenant, .state = -1, .limit = 100};
	const char *s = wrd_query(r, "state");
	if (s && (q.state = wrd_state_parse(s)) < 0) {
		wrd_reply_error(r, "invalid_argument", "state",
				"state: one of creating, running, paused, killed, timed_out, "
				"failed");
		return;
	}
	uint64_t v;
	if ((s = wrd_query(r, "limit")) && (wr_parse_u64(s, 1000, &v) < 0 || v < 1)) {
		wrd_reply_error(r, "invalid_argument", "limit", "limit: must be 1 to 1000");
		return;
	} else if (s) {
		q.limit = (int)v;
	}
	char after_id[17] = "";
	if ((s = wrd_query(r, "page_token"))) {
		long long ms;
		int n = 0;
		if (sscanf(s, "%lld.%16[0-9a-f]%n", &ms, after_id, &n) != 2 || s[n] != 0) {
			wrd_reply_error(r, "invalid_argument", "page_token",
					"page_token: not a token this server gave");
			return;
		}
		q.after_ms = ms;
		q.after_id = after_id;
	} else {
		q.after_ms = INT64_MIN;
	}
	size_t nl;
	_cleanup_free_ const char **labels = wrd_query_all(r, "label", &nl);
	if (nl > 64) {
		wrd_reply_error(r, "invalid_argument", "label", "label: at most 64 filters");
		return;
	}
	char keys[64][64];
	const char *kp[64], *vp[64];
	for (size_t i = 0; i < nl; i++) {
		const char *eq = strchr(labels[i], '=');
		size_t kl = eq ? (size_t)(eq - labels[i]) : 0;
		if (eq == NULL || kl == 0 || kl > 63) {
			wrd_reply_error(r, "invalid_argument", "label",
					"label: must be key=value, got '%s'", labels[i]);
			return;
		}
		memcpy(keys[i], labels[i], kl);
		keys[i][kl] = 0;
		if (!label_key_ok(keys[i])) {
			wrd_reply_error(r, "invalid_argument", "label",
					"label: key '%s' must be 1 to 63 of [A-Za-z0-9_.-]",
					keys[i]);
			return;
		}
		kp[i] = keys[i];
		vp[i] = eq + 1;
	}
	q.label_keys = kp;
	q.label_values = vp;
	q.n_labels = nl;
	json_t *arr = json_array();
	bool more = false;
	int64_t last_ms = 0;
	char last_id[17] = "";
	_cleanup_err_ wr_err err = NULL;
	if (wrd_db_list(&q, arr, &more, &last_ms, last_id, &err) < 0) {
		json_decref(arr);
		wrd_reply_err(r, err);
		return;
	}
	json_t *o = json_object();
	json_object_set_new(o, "sandboxes", arr);
	if (more) {
		char tok[64];
		snprintf(tok, sizeof(tok), "%lld.%s", (long long)last_ms, last_id);
		json_object_set_new(o, "next_page_token", json_string(tok));
	}
	wrd_reply_json(r, 200, o);
}

struct kill_ctx {
	struct wrd_req *r;
	bool sent;
};

/* The record says killed and no process of the sandbox is left: answer
 * now; releasing cgroups, uid range and the handle follows on this thread
 * (the sandbox counts toward max_sandboxes until then). */
static void kill_dead(void *ctx)
{
	struct kill_ctx *k = ctx;
	wrd_reply_empty(k->r, 204);
	wrd_reply_send(k->r);
	k->sent = true;
}

void wrd_api_sb_kill(struct wrd_req *r)
{
	if (wrd_query_check(r, NULL) < 0)
		return;
	struct wrd_sbx *sb = wrd_api_sandbox(r, false);
	if (sb == NULL)
		return;
	_cleanup_err_ wr_err err = NULL;
	struct kill_ctx k = {.r = r};
	int rc = wrd_mgr_kill(sb, WRD_KILLED, json_object(), kill_dead, &k, &err);
	if (k.sent) {
		/* answered already: a failure to release is the daemon's */
		if (rc < 0)
			wr_warn("%s", err->msg);
	} else if (rc < 0 && err->errnum == ESRCH) {
		wrd_reply_error(r, "conflict", NULL, "%s", err->msg);
	} else if (rc < 0) {
		wrd_reply_err(r, err);
	} else {
		wrd_reply_empty(r, 204);
	}
	wrd_mgr_put(sb);
}

void wrd_api_sb_timeout(struct wrd_req *r)
{
	static const char *const keys[] = {"timeout", NULL};
	if (wrd_query_check(r, NULL) < 0)
		return;
	json_t *v = r->json ? json_object_get(r->json, "timeout") : NULL;
	if (r->json && wrd_api_known_keys(r, r->json, keys) < 0)
		return;
	int64_t t;
	_cleanup_err_ wr_err err = NULL;
	if (v == NULL) {
		wrd_reply_error(r, "invalid_argument", "timeout", "timeout: is required");
		return;
	}
	if (wrd_j_int(v, "timeout", 1, 2592000, &t, &err) < 0) {
		wrd_reply_err(r, err);
		return;
	}
	struct wrd_sbx *sb = wrd_api_sandbox(r, false);
	if (sb == NULL)
		return;
	if (wrd_mgr_set_timeout(sb, t, &err) < 0) {
		if (err->errnum == ESRCH)
			wrd_reply_error(r, "conflict", NULL, "%s", err->msg);
		else
			wrd_reply_err(r, err);
	} else {
		pthread_mutex_lock(&sb->lock);
		json_t *o = wrd_record_json(&sb->rec);
		pthread_mutex_unlock(&sb->lock);
		wrd_reply_json(r, 200, o);
	}
	wrd_mgr_put(sb);
}

/* ---- events, health, metrics -------------------------------------------- */

void wrd_api_sb_events(struct wrd_req *r)
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
	struct wrd_record rec;
	_cleanup_err_ wr_err err = NULL;
	if (wrd_db_get(r->id, &rec, &err) < 0 || strcmp(rec.tenant, r->tenant) != 0) {
		if (err == NULL) {
			wrd_record_clear(&rec);
			wrd_audit_api(r, 404, "another tenant's sandbox");
		}
		if (err && err->errnum != ENOENT)
			wrd_reply_err(r, err);
		else
			wrd_reply_error(r, "not_found", NULL, "sandbox %s not found", r->id);
		return;
	}
	wrd_record_clear(&rec);
	json_t *arr = json_array();
	if (wrd_db_events(r->id, (int64_t)since, (int)limit, arr, &err) < 0) {
		json_decref(arr);
		wrd_reply_err(r, err);
		return;
	}
	json_t *o = json_object();
	json_object_set_new(o, "events", arr);
	wrd_reply_json(r, 200, o);
}

void wrd_api_health(struct wrd_req *r)
{
	if (wrd_query_check(r, NULL) < 0)
		return;
	json_t *o = json_object();
	json_object_set_new(o, "status", json_string("ok"));
	json_object_set_new(o, "version", json_string(WARREN_VERSION));
	json_object_set_new(o, "sandboxes", json_integer((json_int_t)wrd_mgr_live()));
	json_object_set_new(o, "checkpoint", wrd_ckpt_json());
	wrd_reply_json(r, 200, o);
}

void wrd_api_metrics(struct wrd_req *r)
{
	size_t len = 0;
	char *text = wrd_metrics_render(&len);
	if (text == NULL) {
		wrd_reply_error(r, "internal", NULL, "metrics: out of memory");
		return;
	}
	wrd_reply_text(r, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
}
