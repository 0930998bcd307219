/* CPU harvesting (harvest.h).
 *
 * Weights. A sandbox's CPU weight is its request: `cpu` x 100 (v2
 * cpu.weight units; v1 cpu.shares x 10.24), set at create
 * (wrd_spec_from_record), so under contention CPU is shared in proportion
 * to what each asked for. Its quota is `cpu_max` (absent: its request
 * `cpu`; neither: none): with a max above its request, an active sandbox
 * bursts into whatever CPU the others leave, up to its max.
 *
 * Idleness. The sampler thread reads every running sandbox's CPU time
 * (one file) each interval_s. A sandbox that used at most idle_cpu of one
 * CPU per interval and had no API call for idle_after_s is marked idle
 * (a call in flight, such as a command that sleeps, does not hold it off):
 * the lowest weight the kernel takes and cpu.idle = 1 where the file
 * exists (its tasks then run only on CPU nothing else wants), and its
 * memory is reclaimed first (v2: memory.reclaim of what it uses; v1:
 * soft limit 0, which the kernel acts on under global pressure). It gets
 * its weight back (and the soft limit undone) at its next tick over
 * idle_cpu, or at once when an operation begins on it (wrd_harvest_wake
 * from wrd_sbx_begin: an exec never starts at the idle weight). Paused
 * sandboxes are frozen and use nothing: they keep their marking, and the
 * window restarts when they run again.
 *
 * Ordering: a state change goes ACTIVE/IDLE -> CHANGING -> IDLE/ACTIVE by
 * compare-and-swap, the cgroup writes in between, so the sampler and a
 * waking call never write one cgroup at once. Both hold the sandbox's
 * `busy` (the sampler takes it, a begin already has it) so a kill cannot
 * destroy the tier handle under them.
 */
#include "daemon/harvest.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "daemon/jsonutil.h"
#include "daemon/manager.h"

#define HV_DEFAULTS                                                                                \
	{                                                                                          \
		true, 1.0, 10.0, 0.01, 0.1, true                                                   \
	}

static struct wrd_harvest_cfg g_cfg = HV_DEFAULTS;
static pthread_t g_thread;
static bool g_running;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static bool g_stop;
static atomic_ullong g_to_idle, g_to_active, g_reclaimed, g_ticks, g_tick_us;

int wrd_harvest_config(json_t *v, wr_err *err)
{
	struct wrd_harvest_cfg c = HV_DEFAULTS;
	if (v != NULL && !json_is_object(v))
		return wr_err_field(err, "harvest", "harvest: must be an object");
	const char *k;
	json_t *x;
	json_object_foreach(v, k, x)
	{
		int r;
		if (strcmp(k, "enabled") == 0)
			r = wrd_j_bool(x, "harvest.enabled", &c.enabled, err);
		else if (strcmp(k, "reclaim") == 0)
			r = wrd_j_bool(x, "harvest.reclaim", &c.reclaim, err);
		else if (strcmp(k, "interval_s") == 0)
			r = wrd_j_num(x, "harvest.interval_s", 0.099, 60, &c.interval_s, err);
		else if (strcmp(k, "idle_after_s") == 0)
			r = wrd_j_num(x, "harvest.idle_after_s", 0, 86400, &c.idle_after_s, err);
		else if (strcmp(k, "idle_cpu") == 0)
			r = wrd_j_num(x, "harvest.idle_cpu", 0, 1, &c.idle_cpu, err);
		else if (strcmp(k, "vm_idle_cpu") == 0)
			r = wrd_j_num(x, "harvest.vm_idle_cpu", 0, 1, &c.vm_idle_cpu, err);
		else
			r = wr_err_field(err, "harvest", "harvest.%s: unknown key", k);
		if (r < 0)
			return r;
	}
	if (c.interval_s < 0.1)
		return wr_err_field(err, "harvest.interval_s",
				    "harvest.interval_s: must be 0.1 to 60");
	if (c.idle_after_s < c.interval_s)
		return wr_err_field(err, "harvest.idle_after_s",
				    "harvest.idle_after_s: must be at least interval_s (%g)",
				    c.interval_s);
	g_cfg = c;
	return 0;
}

uint64_t wrd_harvest_weight(double cpu)
{
	if (!(cpu > 0))
		return 100;
	double w = (double)(uint64_t)(cpu * 100.0 + 0.5);
	return w < 1 ? 1 : w > 10000 ? 10000 : (uint64_t)w;
}

static uint64_t request_weight(struct wrd_sbx *sb)
{
	return wrd_harvest_weight(json_number_value(json_object_get(sb->rec.spec, "cpu")));
}

/* ---- transitions (busy held by the caller) ------------------------------ */

static void mark_idle(struct wrd_sbx *sb, int64_t now)
{
	int want = WRD_HV_ACTIVE;
	if (!atomic_compare_exchange_strong(&sb->hv.state, &want, WRD_HV_CHANGING))
		return;
	_cleanup_err_ wr_err err = NULL;
	int r = sb->ops->cpu_share(sb->tsb, 0, true, &err);
	if (r < 0) {
		wr_debug("harvest: sandbox %s stays active: %s", sb->rec.id, err->msg);
		atomic_store(&sb->hv.state, WRD_HV_ACTIVE);
		return;
	}
	atomic_store(&sb->hv.cpu_idle, r == 1);
	int64_t freed = 0;
	if (g_cfg.reclaim && sb->ops->idle_memory) {
		wr_err_free(&err);
		freed = sb->ops->idle_memory(sb->tsb, true, &err);
		if (freed < 0) {
			wr_debug("harvest: sandbox %s: %s", sb->rec.id, err->msg);
			freed = 0;
		}
		atomic_fetch_add(&g_reclaimed, (unsigned long long)freed);
	}
	atomic_store(&sb->hv.reclaimed_bytes, freed);
	if (sb->ops->idle_release) {
		wr_err_free(&err);
		if (sb->ops->idle_release(sb->tsb, &err) < 0)
			wr_debug("harvest: sandbox %s: %s", sb->rec.id, err->msg);
	}
	atomic_store(&sb->hv.idle_since_ms, now);
	atomic_fetch_add(&g_to_idle, 1);
	atomic_store(&sb->hv.state, WRD_HV_IDLE);
}

/* 0 done (or nothing to do), -EAGAIN: the other side is changing it. */
static int mark_active(struct wrd_sbx *sb, int64_t now)
{
	int want = WRD_HV_IDLE;
	if (!atomic_compare_exchange_strong(&sb->hv.state, &want, WRD_HV_CHANGING))
		return want == WRD_HV_CHANGING ? -EAGAIN : 0;
	_cleanup_err_ wr_err err = NULL;
	if (sb->ops->idle_memory && g_cfg.reclaim &&
	    sb->ops->idle_memory(sb->tsb, false, &err) < 0) {
		wr_debug("harvest: sandbox %s: %s", sb->rec.id, err->msg);
		wr_err_free(&err);
	}
	if (sb->ops->cpu_share(sb->tsb, request_weight(sb), false, &err) < 0)
		wr_warn("harvest: sandbox %s keeps the idle weight: %s", sb->rec.id, err->msg);
	atomic_store(&sb->hv.cpu_idle, false);
	atomic_store(&sb->hv.idle_since_ms, 0);
	atomic_store(&sb->hv.quiet_since_ms, now);
	atomic_fetch_add(&g_to_active, 1);
	atomic_store(&sb->hv.state, WRD_HV_ACTIVE);
	return 0;
}

/* The first sample of a sandbox in this daemon's life: its cgroup may
 * carry the idle share of a daemon before a restart while this one thinks
 * it active; write the request's weight so the two agree. */
static void sync_active(struct wrd_sbx *sb)
{
	int want = WRD_HV_ACTIVE;
	if (!atomic_compare_exchange_strong(&sb->hv.state, &want, WRD_HV_CHANGING))
		return;
	_cleanup_err_ wr_err err = NULL;
	if (sb->ops->cpu_share(sb->tsb, request_weight(sb), false, &err) < 0)
		wr_debug("harvest: sandbox %s: %s", sb->rec.id, err->msg);
	else
		sb->hv.synced = true;
	/* and its memory: a VM restored from a snapshot of an idle one
	 * starts with the balloon inflated (qemu_harvest.h) */
	wr_err_free(&err);
	if (g_cfg.reclaim && sb->ops->idle_memory && sb->ops->idle_memory(sb->tsb, false, &err) < 0)
		wr_debug("harvest: sandbox %s: %s", sb->rec.id, err->msg);
	atomic_store(&sb->hv.state, WRD_HV_ACTIVE);
}

void wrd_harvest_wake(struct wrd_sbx *sb)
{
	if (sb->ops->cpu_share == NULL)
		return;
	int64_t now = wrd_now_ms();
	atomic_store(&sb->hv.quiet_since_ms, now);
	/* the sampler may be marking it idle right now: wait for it (a few
	 * cgroup writes) and undo it */
	for (int i = 0; i < 2000 && mark_active(sb, now) == -EAGAIN; i++)
		usleep(50);
}

/* ---- the sampler -------------------------------------------------------- */

/* A VM tier's sandbox is its QEMU process: an idle guest still costs its
 * emulator a little CPU (timer ticks; under TCG 1-3% of a CPU, measured by
 * tests/e2e/test_vm_harvest.py), so it has a threshold of its own. */
double wrd_harvest_idle_cpu(const struct wrd_sbx *sb)
{
	const char *t = sb->ops->name;
	bool vm = t && (strcmp(t, "microvm") == 0 || strcmp(t, "vm") == 0);
	return vm ? g_cfg.vm_idle_cpu : g_cfg.idle_cpu;
}

static void sample(struct wrd_sbx *sb, int64_t now)
{
	pthread_mutex_lock(&sb->lock);
	bool live = sb->state == WRD_RUNNING && !sb->reaping && !sb->transition;
	/* API calls count as activity (a call in flight, such as a command
	 * that sleeps, does not: CPU use does) */
	int64_t last_call = sb->last_active_ms;
	if (live)
		sb->busy++;
	pthread_mutex_unlock(&sb->lock);
	if (!live) {
		sb->hv.sample_ms = 0; /* paused: the window restarts at resume */
		atomic_store(&sb->hv.rate_mcpu, 0);
		return;
	}
	uint64_t ns;
	_cleanup_err_ wr_err err = NULL;
	if (sb->ops->cpu_time(sb->tsb, &ns, &err) == 0) {
		int64_t quiet = atomic_load(&sb->hv.quiet_since_ms);
		if (last_call > quiet)
			quiet = last_call;
		if (sb->hv.sample_ms == 0) {
			/* first sample, or the first since a pause: the window
			 * starts now (a resume is not quiet time) */
			quiet = now;
			if (!sb->hv.synced)
				sync_active(sb);
		} else {
			double dt = (double)(now - sb->hv.sample_ms) / 1000.0;
			double rate = dt > 0 ? (double)(ns - sb->hv.cpu_ns) / 1e9 / dt : 0;
			atomic_store(&sb->hv.rate_mcpu, (uint64_t)(rate * 1000.0 + 0.5));
			if (rate > wrd_harvest_idle_cpu(sb))
				quiet = now;
		}
		atomic_store(&sb->hv.quiet_since_ms, quiet);
		sb->hv.cpu_ns = ns;
		sb->hv.sample_ms = now;
		int st = atomic_load(&sb->hv.state);
		if (quiet == now && st == WRD_HV_IDLE)
			mark_active(sb, now);
		else if (st == WRD_HV_ACTIVE &&
			 now - quiet >= (int64_t)(g_cfg.idle_after_s * 1000)) {
			mark_idle(sb, now);
			/* a call that began while it was being marked */
			pthread_mutex_lock(&sb->lock);
			bool again = sb->last_active_ms != last_call;
			pthread_mutex_unlock(&sb->lock);
			if (again)
				mark_active(sb, now);
		}
	}
	pthread_mutex_lock(&sb->lock);
	if (--sb->busy == 0)
		pthread_cond_broadcast(&sb->cv);
	pthread_mutex_unlock(&sb->lock);
}

static void tick(void)
{
	size_t n;
	uint64_t t0 = wr_now_ns();
	struct wrd_sbx **v = wrd_table_snapshot(&n);
	int64_t now = wrd_now_ms();
	for (size_t i = 0; v && i < n; i++) {
		if (v[i]->ops && v[i]->ops->cpu_time && v[i]->ops->cpu_share)
			sample(v[i], now);
		wrd_mgr_put(v[i]);
	}
	free(v);
	atomic_fetch_add(&g_ticks, 1);
	atomic_store(&g_tick_us, (wr_now_ns() - t0) / 1000);
}

static void *harvest_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "wrd-harvest");
	pthread_mutex_lock(&g_lock);
	while (!g_stop) {
		pthread_mutex_unlock(&g_lock);
		tick();
		/* At most a quarter of one CPU: a pass over many sandboxes on a
		 * node under memory pressure took 1-2 s (bench/results/
		 * lifecycle.md, density); then the period stretches. */
		uint64_t wait_ns = (uint64_t)(g_cfg.interval_s * 1e9);
		uint64_t pass_ns = (uint64_t)atomic_load(&g_tick_us) * 1000ull;
		if (wait_ns < 3 * pass_ns)
			wait_ns = 3 * pass_ns;
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		uint64_t ns = (uint64_t)ts.tv_nsec + wait_ns;
		ts.tv_sec += (time_t)(ns / 1000000000ull);
		ts.tv_nsec = (long)(ns % 1000000000ull);
		pthread_mutex_lock(&g_lock);
		while (!g_stop && pthread_cond_timedwait(&g_cv, &g_lock, &ts) == 0)
			;
	}
	pthread_mutex_unlock(&g_lock);
	return NULL;
}

int wrd_harvest_start(wr_err *err)
{
	if (!g_cfg.enabled)
		return 0;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&g_cv, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&g_thread, NULL, harvest_main, NULL) != 0)
		return wr_err_set(err, EAGAIN, "start the harvest sampler thread");
	g_running = true;
	return 0;
}

void wrd_harvest_stop(void)
{
	if (!g_running)
		return;
	pthread_mutex_lock(&g_lock);
	g_stop = true;
	pthread_cond_broadcast(&g_cv);
	pthread_mutex_unlock(&g_lock);
	pthread_join(g_thread, NULL);
	g_running = false;
}

/* ---- visibility --------------------------------------------------------- */

static const char *state_name(struct wrd_sbx *sb)
{
	return atomic_load(&sb->hv.state) == WRD_HV_IDLE ? "idle" : "active";
}

void wrd_harvest_json(struct wrd_sbx *sb, json_t *u)
{
	if (sb->ops->cpu_share == NULL || !g_cfg.enabled)
		return;
	bool idle = atomic_load(&sb->hv.state) == WRD_HV_IDLE;
	json_object_set_new(u, "cpu_cores",
			    json_real((double)atomic_load(&sb->hv.rate_mcpu) / 1000.0));
	json_t *h = json_object();
	json_object_set_new(h, "state", json_string(state_name(sb)));
	json_object_set_new(h, "cpu_weight",
			    json_integer(idle ? 0 : (json_int_t)request_weight(sb)));
	json_object_set_new(h, "cpu_idle", json_boolean(atomic_load(&sb->hv.cpu_idle)));
	int64_t since = atomic_load(&sb->hv.idle_since_ms);
	json_object_set_new(h, "idle_since", since ? wrd_j_time(since) : json_null());
	json_object_set_new(h, "memory_reclaimed_bytes",
			    json_integer((json_int_t)atomic_load(&sb->hv.reclaimed_bytes)));
	json_object_set_new(u, "harvest", h);
}

/* MemTotal and MemAvailable of the node, bytes (0 when unknown). */
static void meminfo(double *total, double *avail)
{
	*total = *avail = 0;
	_cleanup_fclose_ FILE *f = fopen("/proc/meminfo", "re");
	char line[128];
	double kb;
	while (f && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "MemTotal: %lf kB", &kb) == 1)
			*total = kb * 1024;
		else if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1)
			*avail = kb * 1024;
	}
}

void wrd_harvest_metrics(FILE *f)
{
	size_t n;
	struct wrd_sbx **v = wrd_table_snapshot(&n);
	static const char *const names[] = {"warren_sandbox_cpu_max_cores",
					    "warren_sandbox_cpu_used_cores",
					    "warren_sandbox_cpu_weight", "warren_sandbox_idle"};
	static const char *const help[] = {
	    "CPU quota (cpu_max, else cpu; 0: none, bursts to the node's free CPU).",
	    "CPU used over the last sampling interval, in CPUs.",
	    "CPU weight in force (v2 units; 0: the lowest, idle).",
	    "1 when the sampler marked it idle (lowest weight, memory reclaimed)."};
	double used = 0, req_mem = 0;
	unsigned count[3] = {0, 0, 0}; /* active, idle, paused */
	for (int m = 0; m < 4; m++) {
		fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n", names[m], help[m], names[m]);
		for (size_t i = 0; v && i < n; i++) {
			struct wrd_sbx *sb = v[i];
			if (sb->ops == NULL || sb->ops->cpu_share == NULL)
				continue;
			bool idle = atomic_load(&sb->hv.state) == WRD_HV_IDLE;
			double val;
			if (m == 0) {
				val = json_number_value(json_object_get(sb->rec.spec, "cpu_max"));
				if (val <= 0)
					val =
					    json_number_value(json_object_get(sb->rec.spec, "cpu"));
			} else if (m == 1) {
				val = (double)atomic_load(&sb->hv.rate_mcpu) / 1000.0;
				used += val;
			} else if (m == 2)
				val = idle ? 0 : (double)request_weight(sb);
			else {
				val = idle;
				pthread_mutex_lock(&sb->lock);
				bool paused = sb->state == WRD_PAUSED;
				bool running = sb->state == WRD_RUNNING;
				pthread_mutex_unlock(&sb->lock);
				count[paused ? 2 : idle ? 1 : 0]++;
				if (running)
					req_mem += (double)json_integer_value(
						       json_object_get(sb->rec.spec, "memory_mb")) *
						   1048576.0;
			}
			fprintf(f, "%s{id=\"%s\",tenant=\"%s\"} %.9g\n", names[m], sb->rec.id,
				sb->rec.tenant, val);
		}
	}
	for (size_t i = 0; v && i < n; i++)
		wrd_mgr_put(v[i]);
	free(v);
	double total, avail;
	meminfo(&total, &avail);
	fprintf(f,
		"# HELP warren_node_cpu_used_cores CPU used by the sandboxes over the last "
		"sampling interval, in CPUs.\n"
		"# TYPE warren_node_cpu_used_cores gauge\nwarren_node_cpu_used_cores %.9g\n"
		"# HELP warren_node_sandboxes_harvest Live sandboxes by harvesting state.\n"
		"# TYPE warren_node_sandboxes_harvest gauge\n"
		"warren_node_sandboxes_harvest{state=\"active\"} %u\n"
		"warren_node_sandboxes_harvest{state=\"idle\"} %u\n"
		"warren_node_sandboxes_harvest{state=\"paused\"} %u\n"
		"# HELP warren_node_memory_overcommit Memory limits of running sandboxes over "
		"the node's memory.\n"
		"# TYPE warren_node_memory_overcommit gauge\nwarren_node_memory_overcommit %.9g\n"
		"# HELP warren_node_memory_available_bytes The node's MemAvailable.\n"
		"# TYPE warren_node_memory_available_bytes gauge\n"
		"warren_node_memory_available_bytes %.9g\n"
		"# HELP warren_harvest_transitions_total Sandboxes marked idle or active again.\n"
		"# TYPE warren_harvest_transitions_total counter\n"
		"warren_harvest_transitions_total{to=\"idle\"} %llu\n"
		"warren_harvest_transitions_total{to=\"active\"} %llu\n"
		"# HELP warren_harvest_memory_reclaimed_bytes_total Memory reclaimed from "
		"sandboxes marked idle.\n"
		"# TYPE warren_harvest_memory_reclaimed_bytes_total counter\n"
		"warren_harvest_memory_reclaimed_bytes_total %llu\n"
		"# HELP warren_harvest_sample_seconds Duration of the last sampling pass.\n"
		"# TYPE warren_harvest_sample_seconds gauge\nwarren_harvest_sample_seconds %.6f\n",
		used, count[0], count[1], count[2], total > 0 ? req_mem / total : 0, avail,
		atomic_load(&g_to_idle), atomic_load(&g_to_active), atomic_load(&g_reclaimed),
		(double)atomic_load(&g_tick_us) / 1e6);
}
