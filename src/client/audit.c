/* libwarren: audit events (GET /v1/events), listed or followed live. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_internal.h"
#include "common/cleanup.h"

static void event_clear(warren_audit_event *e)
{
	free(e->sandbox);
	free(e->tenant);
	free(e->layer);
	free(e->action);
	free(e->subject);
	free(e->time);
	free(e->severity);
	free(e->rule);
	free(e->summary);
	free(e->comm);
	free(e->exe);
	free(e->what_json);
	free(e->json);
	memset(e, 0, sizeof(*e));
}

void warren_audit_list_free(warren_audit_list *l)
{
	if (l == NULL)
		return;
	for (size_t i = 0; i < l->count; i++)
		event_clear(&l->events[i]);
	free(l->events);
	free(l);
}

static void event_fill(warren_audit_event *e, json_t *o)
{
	e->id = wc_jint(o, "id", 0);
	e->rev = wc_jint(o, "rev", 0);
	e->sandbox = wc_jstr(o, "sandbox");
	e->tenant = wc_jstr(o, "tenant");
	e->layer = wc_jstr(o, "layer");
	e->denied = wc_jbool(o, "denied");
	e->action = wc_jstr(o, "action");
	e->subject = wc_jstr(o, "subject");
	e->time = wc_jstr(o, "time");
	e->time_ns = wc_jint(o, "time_ns", 0);
	e->last_ns = wc_jint(o, "last_ns", 0);
	e->count = wc_jint(o, "count", 1);
	e->severity = wc_jstr(o, "severity");
	e->rule = wc_jstr(o, "rule");
	e->summary = wc_jstr(o, "summary");
	json_t *p = json_object_get(o, "process");
	e->pid = wc_jint(p, "pid", 0);
	e->comm = wc_jstr(p, "comm");
	e->exe = wc_jstr(p, "exe");
	json_t *w = json_object_get(o, "what");
	e->what_json = w ? json_dumps(w, JSON_COMPACT | JSON_SORT_KEYS) : strdup("{}");
	e->json = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
}

/* The query string (escaped), "" when empty. */
static char *query_string(const warren_audit_query *q, bool follow)
{
	char *parts[10] = {0};
	size_t n = 0;
	if (q && q->sandbox && *q->sandbox)
		parts[n++] = wc_fmt("sandbox=%s", q->sandbox);
	if (q && q->tenant && *q->tenant)
		parts[n++] = wc_fmt("tenant=%s", q->tenant);
	if (q && q->layer && *q->layer)
		parts[n++] = wc_fmt("layer=%s", q->layer);
	if (q && q->since && *q->since)
		parts[n++] = wc_fmt("since=%s", q->since);
	if (q && q->after > 0)
		parts[n++] = wc_fmt("after=%lld", (long long)q->after);
	if (q && q->limit > 0)
		parts[n++] = wc_fmt("limit=%d", q->limit);
	if (q && q->denied >= 0)
		parts[n++] = wc_fmt("denied=%s", q->denied ? "true" : "false");
	if (q && q->flagged)
		parts[n++] = wc_fmt("flagged=true");
	if (follow)
		parts[n++] = wc_fmt("follow=true");
	size_t len = 1;
	for (size_t i = 0; i < n; i++)
		len += (parts[i] ? strlen(parts[i]) * 3 : 0) + 1;
	char *out = calloc(1, len);
	for (size_t i = 0; i < n; i++) {
		if (out && parts[i]) {
			/* escape the value only */
			char *eq = strchr(parts[i], '=');
			*eq = 0;
			_cleanup_free_ char *v = wc_esc(eq + 1);
			if (v == NULL) {
				free(out);
				out = NULL;
			} else {
				strcat(out, i ? "&" : "");
				strcat(out, parts[i]);
				strcat(out, "=");
				strcat(out, v);
			}
		}
		free(parts[i]);
	}
	return out;
}

int warren_audit_events(warren_client *cl, const warren_audit_query *q, warren_audit_list **out,
			warren_error **errp)
{
	struct wc_call c = {.client = cl};
	_cleanup_json_ json_t *ans = NULL;
	*out = NULL;
	_cleanup_free_ char *qs = query_string(q, false);
	_cleanup_free_ char *path = qs ? wc_fmt("/v1/events%s%s", *qs ? "?" : "", qs) : NULL;
	int r = path ? wc_json(&c, "GET", path, NULL, &ans)
		     : wc_fail(&c, "internal", ENOMEM, "out of memory");
	json_t *arr = json_object_get(ans, "events");
	if (r >= 0 && !json_is_array(arr))
		r = wc_fail(&c, "protocol", EPROTO, "answer has no events array");
	warren_audit_list *l = NULL;
	if (r >= 0) {
		size_t n = json_array_size(arr);
		l = calloc(1, sizeof(*l));
		if (l)
			l->events = calloc(n ? n : 1, sizeof(*l->events));
		if (l == NULL || l->events == NULL) {
			free(l);
			l = NULL;
			r = wc_fail(&c, "internal", ENOMEM, "out of memory");
		}
	}
	if (l) {
		size_t i;
		json_t *o;
		json_array_foreach(arr, i, o) event_fill(&l->events[l->count++], o);
		l->next_after = wc_jint(ans, "next_after", 0);
		*out = l;
	}
	return wc_finish(&c, r < 0 ? r : 0, errp, "audit events");
}

struct follow_ctx {
	warren_audit_fn fn;
	void *ctx;
	bool stopped;
};

static int on_event(void *arg, json_t *o, struct wc_call *c)
{
	struct follow_ctx *f = arg;
	warren_audit_event e = {0};
	event_fill(&e, o);
	int r = f->fn(f->ctx, &e);
	event_clear(&e);
	if (r != 0) {
		f->stopped = true;
		return wc_fail(c, "cancelled", ECANCELED, "stopped by the caller");
	}
	return 0;
}

int warren_audit_follow(warren_client *cl, const warren_audit_query *q, warren_audit_fn fn,
			void *ctx, warren_error **errp)
{
	struct wc_call c = {.client = cl};
	struct follow_ctx f = {.fn = fn, .ctx = ctx};
	_cleanup_free_ char *qs = query_string(q, true);
	_cleanup_free_ char *path = qs ? wc_fmt("/v1/events?%s", qs) : NULL;
	if (path == NULL)
		return wc_finish(&c, wc_fail(&c, "internal", ENOMEM, "out of memory"), errp,
				 "audit events");
	struct wc_req rq = WC_REQ_INIT("GET", path);
	rq.long_running = true;
	rq.on_line = on_event;
	rq.line_ctx = &f;
	int r = wc_do(&c, &rq, NULL);
	if (f.stopped)
		r = 0;
	return wc_finish(&c, r < 0 ? r : 0, errp, "follow audit events");
}
