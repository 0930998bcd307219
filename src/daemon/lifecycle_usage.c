/* Requested vs used resources of live sandboxes, for the API (GET of a
 * sandbox) and /metrics, and the node's pressure (PSI) and lifecycle
 * counters. Usage comes from the sandbox's cgroup through the tier's
 * `usage` op; rates are left to the reader (Prometheus rate(), or two
 * GETs): the counters are cumulative. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "daemon/elastic.h"
#include "daemon/lease.h"
#include "daemon/manager.h"

static atomic_ullong g_pauses[4], g_resumes[3];
static const char *const pause_reasons[] = {"request", "idle", "lease", "timeout"};
static const char *const resume_reasons[] = {"request", "auto", "lease"};

void wrd_life_count(bool pause, const char *reason)
{
	const char *const *names = pause ? pause_reasons : resume_reasons;
	size_t n = pause ? WR_ARRAY_SIZE(pause_reasons) : WR_ARRAY_SIZE(resume_reasons);
	for (size_t i = 0; i < n; i++)
		if (strcmp(names[i], reason) == 0)
			atomic_fetch_add(pause ? &g_pauses[i] : &g_resumes[i], 1);
}

/* The sandbox's usage, or -1 when it is not live (a kill is destroying
 * its handle). busy holds a concurrent kill's destroy off meanwhile. */
static int read_usage(struct wrd_sbx *sb, struct wr_cgroup_stats *st)
{
	if (sb->ops->usage == NULL)
		return -1;
	pthread_mutex_lock(&sb->lock);
	bool live = (sb->state == WRD_RUNNING || sb->state == WRD_PAUSED) && !sb->reaping;
	if (live)
		sb->busy++;
	pthread_mutex_unlock(&sb->lock);
	if (!live)
		return -1;
	_cleanup_err_ wr_err err = NULL;
	int r = sb->ops->usage(sb->tsb, st, &err);
	pthread_mutex_lock(&sb->lock);
	if (--sb->busy == 0)
		pthread_cond_broadcast(&sb->cv);
	pthread_mutex_unlock(&sb->lock);
	return r;
}

void wrd_life_usage_json(const char *tenant, const char *id, json_t *obj)
{
	struct wrd_sbx *sb;
	if (wrd_mgr_get(tenant, id, &sb) < 0)
		return;
	struct wr_cgroup_stats st;
	if (read_usage(sb, &st) == 0) {
		json_t *u = json_object();
		json_object_set_new(u, "cpu_s", json_real((double)st.cpu_usage_ns / 1e9));
		json_object_set_new(u, "memory_bytes", json_integer((json_int_t)st.memory_current));
		json_object_set_new(u, "memory_peak_bytes",
				    json_integer((json_int_t)st.memory_peak));
		json_object_set_new(u, "pids", json_integer((json_int_t)st.pids_current));
		json_object_set_new(u, "oom_kills", json_integer((json_int_t)st.oom_kills));
		wrd_harvest_json(sb, u); /* cpu_cores, harvest state */
		json_object_set_new(obj, "usage", u);
	}
	wrd_mgr_put(sb);
}

/* /proc/pressure/<res>: "some avg10=.. avg60=.. avg300=.. total=..". */
static void pressure(FILE *f, const char *res)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/pressure/%s", res);
	_cleanup_fclose_ FILE *in = fopen(path, "re");
	char line[256];
	while (in && fgets(line, sizeof(line), in)) {
		char kind[8];
		double a10, a60, a300;
		if (sscanf(line, "%7s avg10=%lf avg60=%lf avg300=%lf", kind, &a10, &a60, &a300) !=
		    4)
			continue;
		fprintf(f,
			"warren_node_pressure{resource=\"%s\",kind=\"%s\",window=\"10s\"} %g\n"
			"warren_node_pressure{resource=\"%s\",kind=\"%s\",window=\"60s\"} %g\n",
			res, kind, a10 / 100, res, kind, a60 / 100);
	}
}

void wrd_life_metrics(FILE *f)
{
	fprintf(f, "# HELP warren_sandbox_pauses_total Pauses by reason.\n"
		   "# TYPE warren_sandbox_pauses_total counter\n");
	for (size_t i = 0; i < WR_ARRAY_SIZE(pause_reasons); i++)
		fprintf(f, "warren_sandbox_pauses_total{reason=\"%s\"} %llu\n", pause_reasons[i],
			atomic_load(&g_pauses[i]));
	fprintf(f, "# HELP warren_sandbox_resumes_total Resumes by reason.\n"
		   "# TYPE warren_sandbox_resumes_total counter\n");
	for (size_t i = 0; i < WR_ARRAY_SIZE(resume_reasons); i++)
		fprintf(f, "warren_sandbox_resumes_total{reason=\"%s\"} %llu\n", resume_reasons[i],
			atomic_load(&g_resumes[i]));
	fprintf(f, "# HELP warren_node_pressure Share of time tasks stalled (PSI), 0..1.\n"
		   "# TYPE warren_node_pressure gauge\n");
	pressure(f, "cpu");
	pressure(f, "memory");
	pressure(f, "io");
	wrd_elastic_metrics(f); /* node CPUs, requests, overcommit, refusals */
	/* per live sandbox: what it asked for and what it uses */
	size_t n;
	struct wrd_sbx **v = wrd_table_snapshot(&n);
	static const char *const names[] = {
	    "warren_sandbox_cpu_requested_cores", "warren_sandbox_cpu_seconds_total",
	    "warren_sandbox_memory_requested_bytes", "warren_sandbox_memory_bytes"};
	static const char *const help[] = {
	    "CPU cap asked at create (0: none).", "CPU time used by the sandbox.",
	    "Memory limit asked at create.", "Memory in use by the sandbox."};
	static const char *const types[] = {"gauge", "counter", "gauge", "gauge"};
	double req_cpu = 0, used_cpu = 0, req_mem = 0, used_mem = 0;
	for (int m = 0; m < 4; m++) {
		fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", names[m], help[m], names[m], types[m]);
		for (size_t i = 0; v && i < n; i++) {
			struct wrd_sbx *sb = v[i];
			json_t *spec = sb->rec.spec;
			double val;
			struct wr_cgroup_stats st;
			if (m == 0) {
				val = json_number_value(json_object_get(spec, "cpu"));
				req_cpu += val;
			} else if (m == 2) {
				val =
				    (double)json_integer_value(json_object_get(spec, "memory_mb")) *
				    1048576.0;
				req_mem += val;
			} else if (read_usage(sb, &st) == 0) {
				val = m == 1 ? (double)st.cpu_usage_ns / 1e9
					     : (double)st.memory_current;
				*(m == 1 ? &used_cpu : &used_mem) += val;
			} else {
				continue;
			}
			fprintf(f, "%s{id=\"%s\",tenant=\"%s\"} %.9g\n", names[m], sb->rec.id,
				sb->rec.tenant, val);
		}
	}
	fprintf(f,
		"# HELP warren_node_cpu_requested_cores Sum of the live sandboxes' CPU caps.\n"
		"# TYPE warren_node_cpu_requested_cores gauge\n"
		"warren_node_cpu_requested_cores %.9g\n"
		"# HELP warren_node_sandbox_cpu_seconds_total CPU time of the live sandboxes.\n"
		"# TYPE warren_node_sandbox_cpu_seconds_total counter\n"
		"warren_node_sandbox_cpu_seconds_total %.9g\n"
		"# HELP warren_node_memory_requested_bytes Sum of the live sandboxes' limits.\n"
		"# TYPE warren_node_memory_requested_bytes gauge\n"
		"warren_node_memory_requested_bytes %.9g\n"
		"# HELP warren_node_sandbox_memory_bytes Memory in use by the live sandboxes.\n"
		"# TYPE warren_node_sandbox_memory_bytes gauge\n"
		"warren_node_sandbox_memory_bytes %.9g\n",
		req_cpu, used_cpu, req_mem, used_mem);
	for (size_t i = 0; v && i < n; i++)
		wrd_mgr_put(v[i]);
	free(v);
	wrd_leases_metrics(f);
}
