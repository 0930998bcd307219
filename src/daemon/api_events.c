/* Audit event routes:
 *   GET /v1/events?sandbox=&tenant=&layer=&since=&after=&limit=&denied=&flagged=&follow=
 *   GET /v1/sandboxes/{id}/events  lifecycle events (api_sandboxes.c), or
 *       with kind=audit or any audit parameter, that sandbox's audit events
 * and the API's own refusals (401, 403, 404 for another tenant's sandbox)
 * as audit events. */
#include <errno.h>
#include <stdint.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "daemon/api.h"
#include "daemon/audit_internal.h"
#include "daemon/jsonutil.h"

/* ---- the API's refusals ---------------------------------------------------- */

void wrd_audit_api(struct wrd_req *r, unsigned status, const char *reason)
{
	if (wr_audit_global == NULL)
		return;
	const char *route = r->route ? r->route->pattern : "unknown route";
	const char *method = r->route ? r->route->method : "";
	char action[200];
	snprintf(action, sizeof(action), "%s%s%s", method, *method ? " " : "", route);
	json_t *what = json_pack("{s:s, s:s, s:i, s:s, s:b}", "route", route, "method", method,
				 "status", (int)status, "reason", reason, "tcp", r->tcp);
	if (what && r->id[0])
		json_object_set_new(what, "id", json_string(r->id));
	struct wr_audit_event ev = {.sandbox_id = "",
				    .tenant = r->tenant ? r->tenant : "",
				    .layer = WR_AUDIT_API,
				    .denied = true,
				    .action = action,
				    .subject = reason,
				    .what = what,
				    .severity =
					status == 404 ? WR_AUDIT_SEV_MEDIUM : WR_AUDIT_SEV_LOW};
	wr_audit_emit(wr_audit_global, &ev);
	json_decref(what);
}

/* ---- parameters ------------------------------------------------------------ */

/* since: RFC 3339 UTC ("2026-12-02T13:50:00Z", fraction allowed), seconds
 * since the epoch, or a duration ago ("90s", "10m", "2h", "7d"). */
static int64_t secs_to_ns(double secs)
{
	/* Past 2262 nanoseconds no longer fit: later than any event. */
	if (secs >= 9.2e9)
		return INT64_MAX;
	return secs <= 0 ? 0 : (int64_t)(secs * 1e9);
}

static int parse_since(const char *s, int64_t *out_ns)
{
	char *end;
	if (*s >= '0' && *s <= '9') {
		double v = strtod(s, &end);
		if (end != s && *end == 0) {
			*out_ns = secs_to_ns(v);
			return 0;
		}
		if (end != s && end[1] == 0 && strchr("smhd", *end)) {
			double mul = 1;
			if (*end == 'm')
				mul = 60;
			else if (*end == 'h')
				mul = 3600;
			else if (*end == 'd')
				mul = 86400;
			struct timespec t;
			clock_gettime(CLOCK_REALTIME, &t);
			double ago = v * mul;
			*out_ns = secs_to_ns((double)t.tv_sec + (double)t.tv_nsec / 1e9 - ago);
			return 0;
		}
	}
	struct tm tm = {0};
	end = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
	if (end == NULL)
		return -1;
	double frac = 0;
	if (*end == '.') {
		char *e2;
		frac = strtod(end, &e2);
		end = e2;
	}
	if (strcmp(end, "Z") != 0 && strcmp(end, "+00:00") != 0)
		return -1;
	*out_ns = secs_to_ns((double)timegm(&tm) + frac);
	return 0;
}

struct follow {
	int fd;
	struct wra_query q;
	char *sandbox, *tenant;
	uint64_t rev;
};

static int write_events(int fd, json_t *arr)
{
	size_t i;
	json_t *e;
	json_array_foreach(arr, i, e)
	{
		char *s = json_dumps(e, JSON_COMPACT);
		if (s == NULL)
			return -1;
		size_t n = strlen(s);
		s[n] = '\n';
		ssize_t w = wr_write_all(fd, s, n + 1);
		free(s);
		if (w < 0)
			return -1;
	}
	return 0;
}

static void follow_main(void *arg)
{
	struct follow *f = arg;
	f->q.by_rev = true;
	f->q.limit = 500;
	int idle = 0;
	for (;;) {
		uint64_t committed = wr_audit_wait(f->rev, 1000);
		/* The client went away: the pipe's read end is closed. */
		struct pollfd p = {.fd = f->fd, .events = 0};
		if (poll(&p, 1, 0) > 0 && (p.revents & (POLLERR | POLLHUP)))
			break;
		if (wr_audit_global == NULL || wr_audit_followers_ended())
			break;
		if (committed <= f->rev) {
			/* A blank line now and then: a client that left is only
			 * noticed when something is sent to it. */
			if (++idle >= 5) {
				idle = 0;
				if (wr_write_all(f->fd, "\n", 1) < 0)
					break;
			}
			continue;
		}
		idle = 0;
		json_t *arr = json_array();
		int64_t last_id = 0;
		uint64_t last_rev = f->rev;
		f->q.after_rev = f->rev;
		_cleanup_err_ wr_err err = NULL;
		int r = wra_store_query(&f->q, arr, &last_id, &last_rev, &err);
		if (r == 0 && write_events(f->fd, arr) < 0)
			r = -1;
		bool full = json_array_size(arr) >= (size_t)f->q.limit;
		json_decref(arr);
		if (r < 0)
			break;
		f->rev = full ? last_rev : (last_rev > committed ? last_rev : committed);
	}
	close(f->fd);
	free(f->sandbox);
	free(f->tenant);
	free(f);
}

static void events_query(struct wrd_req *r, const char *sandbox)
{
	static const char *const allowed[] = {"sandbox", "tenant", "layer",  "since",
					      "after",	 "limit",  "denied", "flagged",
					      "follow",	 "kind",   NULL};
	if (wrd_query_check(r, allowed) < 0)
		return;
	struct wra_query q = {.denied = -1, .limit = 100};
	bool admin = !r->tcp || wrd_config_is_admin(wrd_mgr_cfg, r->tenant);
	const char *s;
	if ((s = wrd_query(r, "kind")) && strcmp(s, "audit") != 0) {
		wrd_reply_error(r, "invalid_argument", "kind",
				"kind: must be \"audit\" (lifecycle events take no audit "
				"parameters)");
		return;
	}
	bool path_sandbox = sandbox != NULL;
	if (sandbox == NULL)
		sandbox = wrd_query(r, "sandbox");
	else if (wrd_query(r, "sandbox")) {
		wrd_reply_error(r, "invalid_argument", "sandbox",
				"sandbox: already named by the path");
		return;
	}
	q.sandbox = sandbox && *sandbox ? sandbox : NULL;
	const char *tenant = wrd_query(r, "tenant");
	if (tenant && !admin && strcmp(tenant, r->tenant) != 0) {
		wrd_audit_api(r, 403, "events of another tenant");
		wrd_reply_error(r, "permission_denied", "tenant",
				"tenant: only admins may read another tenant's events");
		return;
	}
	q.tenant = admin ? (tenant && *tenant ? tenant : NULL) : r->tenant;
	/* A sandbox of another tenant is 404, as on every route (admins may
	 * name any sandbox in /v1/events). */
	if (q.sandbox && (path_sandbox || !admin)) {
		struct wrd_record rec;
		_cleanup_err_ wr_err err = NULL;
		int g = wrd_db_get(q.sandbox, &rec, &err);
		bool mine = g == 0 && strcmp(rec.tenant, r->tenant) == 0;
		if (g == 0) {
			if (!mine)
				wrd_audit_api(r, 404, "another tenant's sandbox");
			wrd_record_clear(&rec);
		}
		if (!mine) {
			wrd_reply_error(r, "not_found", NULL, "sandbox %s not found", q.sandbox);
			return;
		}
	}
	if ((s = wrd_query(r, "layer"))) {
		_cleanup_free_ char *copy = strdup(s);
		char *save = NULL;
		for (char *t = copy ? strtok_r(copy, ",", &save) : NULL; t;
		     t = strtok_r(NULL, ",", &save)) {
			int l = wr_audit_layer_parse(t);
			if (l < 0) {
				wrd_reply_error(r, "invalid_argument", "layer",
						"layer: '%s' is not one of seccomp, landlock, "
						"bpf-net, dns, cgroup-limit, api, file",
						t);
				return;
			}
			q.layers |= 1u << l;
		}
		if (q.layers == 0) {
			wrd_reply_error(r, "invalid_argument", "layer", "layer: empty");
			return;
		}
	}
	if ((s = wrd_query(r, "since")) && parse_since(s, &q.since_ns) < 0) {
		wrd_reply_error(r, "invalid_argument", "since",
				"since: an RFC 3339 UTC time, seconds since the epoch, or a "
				"duration ago such as 10m");
		return;
	}
	uint64_t u;
	if ((s = wrd_query(r, "after"))) {
		if (wr_parse_u64(s, INT64_MAX, &u) < 0) {
			wrd_reply_error(r, "invalid_argument", "after",
					"after: must be an event id (a non-negative integer)");
			return;
		}
		q.after_id = (int64_t)u;
	}
	if ((s = wrd_query(r, "limit"))) {
		if (wr_parse_u64(s, 1000, &u) < 0 || u < 1) {
			wrd_reply_error(r, "invalid_argument", "limit", "limit: must be 1 to 1000");
			return;
		}
		q.limit = (int)u;
	}
	bool b, follow = false;
	if (wrd_query(r, "denied")) {
		if (wrd_query_bool(r, "denied", false, &b) < 0)
			return;
		q.denied = b;
	}
	if (wrd_query_bool(r, "flagged", false, &q.flagged) < 0 ||
	    wrd_query_bool(r, "follow", false, &follow) < 0)
		return;
	if (wr_audit_global == NULL) {
		wrd_reply_error(r, "unavailable", NULL,
				"the audit is off on this node (audit.enabled)");
		return;
	}
	/* Readers see their own: what was emitted before this request is
	 * written first. */
	wr_audit_flush();
	uint64_t rev0 = wra_store_max_rev();
	json_t *arr = json_array();
	int64_t last_id = q.after_id;
	uint64_t last_rev = 0;
	_cleanup_err_ wr_err err = NULL;
	if (wra_store_query(&q, arr, &last_id, &last_rev, &err) < 0) {
		json_decref(arr);
		wrd_reply_err(r, err);
		return;
	}
	if (!follow) {
		json_t *o = json_object();
		json_object_set_new(o, "events", arr);
		json_object_set_new(o, "next_after", json_integer(last_id));
		wrd_reply_json(r, 200, o);
		return;
	}
	struct follow *f = calloc(1, sizeof(*f));
	if (f == NULL || (q.sandbox && (f->sandbox = strdup(q.sandbox)) == NULL) ||
	    (q.tenant && (f->tenant = strdup(q.tenant)) == NULL)) {
		if (f) {
			free(f->sandbox);
			free(f);
		}
		json_decref(arr);
		wrd_reply_error(r, "internal", NULL, "out of memory");
		return;
	}
	f->q = q;
	f->q.sandbox = f->sandbox;
	f->q.tenant = f->tenant;
	f->rev = rev0;
	int fd = wrd_reply_stream(r, 200, "application/x-ndjson");
	if (fd < 0) {
		free(f->sandbox);
		free(f->tenant);
		free(f);
		json_decref(arr);
		return;
	}
	f->fd = fd;
	int w = write_events(fd, arr);
	json_decref(arr);
	if (w < 0 || wrd_spawn_long(follow_main, f) < 0) {
		close(fd);
		free(f->sandbox);
		free(f->tenant);
		free(f);
	}
}

void wrd_api_events(struct wrd_req *r)
{
	events_query(r, NULL);
}

void wrd_api_sb_events_any(struct wrd_req *r)
{
	static const char *const audit_keys[] = {"kind",  "layer",  "denied", "flagged",
						 "after", "follow", "tenant", NULL};
	for (size_t i = 0; audit_keys[i]; i++)
		if (wrd_query(r, audit_keys[i])) {
			events_query(r, r->id);
			return;
		}
	wrd_api_sb_events(r);
}
