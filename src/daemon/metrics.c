#include "daemon/audit.h"
#include "daemon/metrics.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "daemon/db.h"
#include "daemon/manager.h"

#define MAX_ROUTES 64

static const char *const *g_routes;
static size_t g_nroutes;
static atomic_ullong g_requests[MAX_ROUTES];

static const char *const error_codes[] = {
    "invalid_argument",	  "unauthenticated",  "not_found",	   "method_not_allowed",
    "conflict",		  "upgrade_required", "payload_too_large", "unsupported_media_type",
    "resource_exhausted", "internal",	      "unavailable"};
static atomic_ullong g_errors[WR_ARRAY_SIZE(error_codes)];

struct histo {
	const double *bounds;
	size_t n;
	atomic_ullong counts[16]; /* per bucket (not cumulative); last = +Inf */
	atomic_ullong sum_us;
	atomic_ullong total;
};

static const double create_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
static const double command_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
					1,     2.5,  5,	    10,	  30,  60,   300};
static struct histo g_create = {create_bounds, WR_ARRAY_SIZE(create_bounds), {0}, 0, 0};
static struct histo g_command = {command_bounds, WR_ARRAY_SIZE(command_bounds), {0}, 0, 0};
static atomic_ullong g_creates_total;

void wrd_metrics_init(const char *const *routes, size_t n_routes)
{
	g_routes = routes;
	g_nroutes = n_routes < MAX_ROUTES ? n_routes : MAX_ROUTES;
}

void wrd_metrics_request(size_t route)
{
	if (route < g_nroutes)
		atomic_fetch_add(&g_requests[route], 1);
}

void wrd_metrics_error(const char *code)
{
	for (size_t i = 0; i < WR_ARRAY_SIZE(error_codes); i++)
		if (strcmp(code, error_codes[i]) == 0)
			atomic_fetch_add(&g_errors[i], 1);
}

static void observe(struct histo *h, double s)
{
	size_t i = 0;
	while (i < h->n && s > h->bounds[i])
		i++;
	atomic_fetch_add(&h->counts[i], 1);
	atomic_fetch_add(&h->sum_us, (unsigned long long)(s * 1e6));
	atomic_fetch_add(&h->total, 1);
}

void wrd_metrics_create(double seconds)
{
	atomic_fetch_add(&g_creates_total, 1);
	observe(&g_create, seconds);
}

void wrd_metrics_command(double seconds)
{
	observe(&g_command, seconds);
}

static void render_histo(FILE *f, const char *name, const char *help, struct histo *h)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	unsigned long long cum = 0;
	for (size_t i = 0; i < h->n; i++) {
		cum += atomic_load(&h->counts[i]);
		fprintf(f, "%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[i], cum);
	}
	cum += atomic_load(&h->counts[h->n]);
	fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n", name, cum);
	fprintf(f, "%s_sum %.6f\n", name, (double)atomic_load(&h->sum_us) / 1e6);
	fprintf(f, "%s_count %llu\n", name, cum);
}

struct count_ctx {
	FILE *f;
	bool seen[WRD_NSTATES];
};

static void count_row(const char *tier, const char *state, int64_t n, void *ctx)
{
	struct count_ctx *c = ctx;
	int s = wrd_state_parse(state);
	if (s >= 0 && strcmp(tier, "container") == 0)
		c->seen[s] = true;
	fprintf(c->f, "warren_sandboxes{tier=\"%s\",state=\"%s\"} %lld\n", tier, state,
		(long long)n);
}

/* The refusal audit's counters (audit.h), by layer. */
static void render_audit(FILE *f)
{
	struct wr_audit_stats st;
	wr_audit_get_stats(wr_audit_global, &st);
	static const struct {
		const char *name, *help;
		size_t off;
	} per_layer[] = {
	    {"warren_audit_events_total", "Attempts the audit saw (repeats counted).",
	     offsetof(struct wr_audit_stats, events)},
	    {"warren_audit_denied_total", "Refusals the audit saw (repeats counted).",
	     offsetof(struct wr_audit_stats, denied)},
	    {"warren_audit_rows_total", "Audit rows opened (after merging and rate limits).",
	     offsetof(struct wr_audit_stats, rows)},
	    {"warren_audit_flagged_total", "Audit rows flagged by a detection rule.",
	     offsetof(struct wr_audit_stats, flagged)},
	};
	for (size_t i = 0; i < WR_ARRAY_SIZE(per_layer); i++) {
		fprintf(f, "# HELP %s %s\n# TYPE %s counter\n", per_layer[i].name,
			per_layer[i].help, per_layer[i].name);
		const uint64_t *v = (const uint64_t *)((const char *)&st + per_layer[i].off);
		for (int l = 0; l < WR_AUDIT_NLAYERS; l++)
			fprintf(f, "%s{layer=\"%s\"} %llu\n", per_layer[i].name,
				wr_audit_layer_name((enum wr_audit_layer)l),
				(unsigned long long)v[l]);
	}
	fprintf(
	    f,
	    "# HELP warren_audit_suppressed_total Events folded into rate-limited summary rows.\n"
	    "# TYPE warren_audit_suppressed_total counter\n"
	    "warren_audit_suppressed_total %llu\n"
	    "# HELP warren_audit_dropped_total Events lost: the audit table was full.\n"
	    "# TYPE warren_audit_dropped_total counter\n"
	    "warren_audit_dropped_total %llu\n"
	    "# HELP warren_audit_kernel_overruns_total Times the kernel dropped audit records "
	    "for warrend (receive buffer full).\n"
	    "# TYPE warren_audit_kernel_overruns_total counter\n"
	    "warren_audit_kernel_overruns_total %llu\n"
	    "# HELP warren_audit_writes_total Audit row writes committed.\n"
	    "# TYPE warren_audit_writes_total counter\n"
	    "warren_audit_writes_total %llu\n"
	    "# HELP warren_audit_write_errors_total Audit row writes that failed.\n"
	    "# TYPE warren_audit_write_errors_total counter\n"
	    "warren_audit_write_errors_total %llu\n",
	    (unsigned long long)st.suppressed, (unsigned long long)st.dropped,
	    (unsigned long long)st.kernel_lost, (unsigned long long)st.written,
	    (unsigned long long)st.write_errors);
}

char *wrd_metrics_render(size_t *len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);
	if (f == NULL)
		return NULL;
	fprintf(f, "# HELP warren_sandboxes Sandboxes known to this node by tier and state.\n"
		   "# TYPE warren_sandboxes gauge\n");
	struct count_ctx c = {.f = f};
	wr_err err = NULL;
	wrd_db_count_states(count_row, &c, &err);
	wr_err_free(&err);
	for (int s = 0; s < WRD_NSTATES; s++)
		if (!c.seen[s])
			fprintf(f, "warren_sandboxes{tier=\"container\",state=\"%s\"} 0\n",
				wrd_state_name((enum wrd_state)s));
	fprintf(f,
		"# HELP warren_sandbox_creates_total Sandboxes created successfully.\n"
		"# TYPE warren_sandbox_creates_total counter\n"
		"warren_sandbox_creates_total %llu\n",
		atomic_load(&g_creates_total));
	render_histo(f, "warren_sandbox_create_seconds", "Time to create a sandbox.", &g_create);
	render_histo(f, "warren_command_seconds", "Wall time of commands.", &g_command);
	fprintf(f, "# HELP warren_api_errors_total API errors by code.\n"
		   "# TYPE warren_api_errors_total counter\n");
	for (size_t i = 0; i < WR_ARRAY_SIZE(error_codes); i++)
		fprintf(f, "warren_api_errors_total{code=\"%s\"} %llu\n", error_codes[i],
			atomic_load(&g_errors[i]));
	fprintf(f, "# HELP warren_api_requests_total API requests by route.\n"
		   "# TYPE warren_api_requests_total counter\n");
	for (size_t i = 0; i < g_nroutes; i++)
		fprintf(f, "warren_api_requests_total{route=\"%s\"} %llu\n", g_routes[i],
			atomic_load(&g_requests[i]));
	wrd_life_metrics(f); /* lifecycle_usage.c: requested vs used, PSI, leases */
	render_audit(f);
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}
