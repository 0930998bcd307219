/* Elastic CPU: admission (elastic.h).
 *
 * A sandbox's CPU request is its `cpu` (a sandbox without one asks for
 * nothing and runs best effort). Paused sandboxes cost no CPU and do not
 * count. A create is refused when the requests of running sandboxes plus
 * its own would exceed cpu_overcommit x the node's CPUs, or when the
 * node's measured pressure (PSI "some" avg10 of cpu or memory) is above
 * its maximum: a node whose tasks already stall gets no more work. Two
 * creates at once may both pass the check (it is not a reservation): the
 * ratio bounds the steady state, not each instant.
 */
#include "daemon/elastic.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "daemon/harvest.h"
#include "daemon/jsonutil.h"
#include "daemon/manager.h"

static struct wrd_admission g_adm = {10.0, 1.0, 0.5};
static atomic_ullong g_refused[3]; /* overcommit, cpu pressure, memory pressure */

int wrd_elastic_config(json_t *v, struct wrd_admission *a, wr_err *err)
{
	*a = (struct wrd_admission){10.0, 1.0, 0.5};
	if (v == NULL)
		goto done;
	if (!json_is_object(v))
		return wr_err_field(err, "admission", "admission: must be an object");
	const char *k;
	json_t *x;
	json_object_foreach(v, k, x)
	{
		int r;
		if (strcmp(k, "cpu_overcommit") == 0) {
			r = wrd_j_num(x, "admission.cpu_overcommit", 0.01, 1000, &a->cpu_overcommit,
				      err);
			if (r == 0 && a->cpu_overcommit < 0.01)
				r = wr_err_field(err, "admission.cpu_overcommit",
						 "admission.cpu_overcommit: must be 0.01 to 1000");
		} else if (strcmp(k, "cpu_pressure_max") == 0)
			r = wrd_j_num(x, "admission.cpu_pressure_max", 0, 1, &a->cpu_pressure_max,
				      err);
		else if (strcmp(k, "memory_pressure_max") == 0)
			r = wrd_j_num(x, "admission.memory_pressure_max", 0, 1,
				      &a->memory_pressure_max, err);
		else
			r = wr_err_field(err, "admission", "admission.%s: unknown key", k);
		if (r < 0)
			return r;
	}
done:
	g_adm = *a;
	return 0;
}

/* PSI "some avg10" of a resource as 0..1, or -1 when not available. */
static double psi_read(const char *res)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/pressure/%s", res);
	FILE *f = fopen(path, "re");
	if (f == NULL)
		return -1;
	double v = -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "some ", 5) == 0) {
			const char *a = strstr(line, "avg10=");
			if (a)
				v = strtod(a + 6, NULL) / 100.0;
		}
	fclose(f);
	return v;
}

/* What admission reads of the node, read again at most every SAMPLE_NS:
 * avg10 is a 10 s average the kernel updates every 2 s, and the CPU count
 * changes with hotplug only, while a create that read them each time paid
 * three opens and reads (~0.1 ms on the dev VMs, bench/README.md). */
#define SAMPLE_NS 200000000ull
static struct {
	pthread_mutex_t lock;
	uint64_t at_ns; /* 0: never read */
	double ncpu, psi_cpu, psi_mem;
} g_node = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void node_sample(double *ncpu, double *psi_cpu, double *psi_mem)
{
	pthread_mutex_lock(&g_node.lock);
	uint64_t now = wr_now_ns();
	if (g_node.at_ns == 0 || now - g_node.at_ns >= SAMPLE_NS) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		g_node.ncpu = n > 0 ? (double)n : 1.0;
		g_node.psi_cpu = psi_read("cpu");
		g_node.psi_mem = psi_read("memory");
		g_node.at_ns = now;
	}
	if (ncpu)
		*ncpu = g_node.ncpu;
	if (psi_cpu)
		*psi_cpu = g_node.psi_cpu;
	if (psi_mem)
		*psi_mem = g_node.psi_mem;
	pthread_mutex_unlock(&g_node.lock);
}

static double node_cpus(void)
{
	double n;
	node_sample(&n, NULL, NULL);
	return n;
}

/* Requested CPUs of running (not paused) sandboxes. */
static double requested(void)
{
	size_t n;
	double sum = 0;
	struct wrd_sbx **v = wrd_table_snapshot(&n);
	for (size_t i = 0; v && i < n; i++) {
		pthread_mutex_lock(&v[i]->lock);
		bool run = v[i]->state == WRD_RUNNING || v[i]->state == WRD_CREATING;
		pthread_mutex_unlock(&v[i]->lock);
		if (run)
			sum += json_number_value(json_object_get(v[i]->rec.spec, "cpu"));
		wrd_mgr_put(v[i]);
	}
	free(v);
	return sum;
}

int wrd_elastic_admit(double cpu, wr_err *err)
{
	double ncpu = node_cpus(), allowed = g_adm.cpu_overcommit * ncpu;
	if (cpu > 0) {
		double req = requested();
		if (req + cpu > allowed + 1e-9) {
			atomic_fetch_add(&g_refused[0], 1);
			return wr_err_set(
			    err, EAGAIN,
			    "cpu overcommit: running sandboxes request %.2f CPUs, this "
			    "one %.2f, above the %.2f allowed (%g x %g CPUs)",
			    req, cpu, allowed, g_adm.cpu_overcommit, ncpu);
		}
	}
	double p, pmem;
	node_sample(NULL, &p, &pmem);
	if (p > g_adm.cpu_pressure_max) {
		atomic_fetch_add(&g_refused[1], 1);
		return wr_err_set(err, EAGAIN,
				  "cpu pressure: tasks stalled %.0f%% of the last 10 s, above the "
				  "%.0f%% allowed",
				  p * 100, g_adm.cpu_pressure_max * 100);
	}
	p = pmem;
	if (p > g_adm.memory_pressure_max) {
		atomic_fetch_add(&g_refused[2], 1);
		return wr_err_set(err, EAGAIN,
				  "memory pressure: tasks stalled %.0f%% of the last 10 s, above "
				  "the %.0f%% allowed",
				  p * 100, g_adm.memory_pressure_max * 100);
	}
	return 0;
}

void wrd_elastic_metrics(FILE *f)
{
	double ncpu = node_cpus(), req = requested();
	fprintf(f,
		"# HELP warren_node_cpus CPUs of the node.\n"
		"# TYPE warren_node_cpus gauge\nwarren_node_cpus %g\n"
		"# HELP warren_node_cpu_requested_running_cores CPUs requested by running (not "
		"paused) sandboxes.\n"
		"# TYPE warren_node_cpu_requested_running_cores "
		"gauge\nwarren_node_cpu_requested_running_cores %g\n"
		"# HELP warren_node_cpu_overcommit Requested CPUs over node CPUs, and the most "
		"admission allows.\n"
		"# TYPE warren_node_cpu_overcommit gauge\n"
		"warren_node_cpu_overcommit{kind=\"current\"} %g\n"
		"warren_node_cpu_overcommit{kind=\"max\"} %g\n"
		"# HELP warren_admission_refused_total Creates refused by admission, by reason.\n"
		"# TYPE warren_admission_refused_total counter\n"
		"warren_admission_refused_total{reason=\"cpu_overcommit\"} %llu\n"
		"warren_admission_refused_total{reason=\"cpu_pressure\"} %llu\n"
		"warren_admission_refused_total{reason=\"memory_pressure\"} %llu\n",
		ncpu, req, req / ncpu, g_adm.cpu_overcommit,
		(unsigned long long)atomic_load(&g_refused[0]),
		(unsigned long long)atomic_load(&g_refused[1]),
		(unsigned long long)atomic_load(&g_refused[2]));
	wrd_harvest_metrics(f); /* harvest.c: per sandbox max, use, weight */
}
