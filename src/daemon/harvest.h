/* CPU harvesting (harvest.c): each sandbox's CPU weight follows its
 * request; a sampler marks sandboxes that use no CPU over a window idle
 * and gives them the lowest weight (cpu.idle where the kernel has it) and
 * reclaims their memory; they get their weight back when they use CPU or
 * are called again. */
#ifndef WARREN_DAEMON_HARVEST_H
#define WARREN_DAEMON_HARVEST_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/error.h"

struct wrd_sbx;

enum { WRD_HV_ACTIVE, WRD_HV_IDLE, WRD_HV_CHANGING };

/* Per sandbox (in struct wrd_sbx, zeroed at its creation = active, no
 * sample yet). The sample fields belong to the sampler thread; the rest is
 * read by API threads. */
struct wrd_hv {
	atomic_int state;		      /* WRD_HV_* */
	atomic_bool cpu_idle;		      /* cpu.idle set with the idle weight */
	atomic_uint_least64_t rate_mcpu;      /* CPU used over the last tick, 1/1000 CPU */
	atomic_int_least64_t idle_since_ms;   /* marked idle then (0: active) */
	atomic_int_least64_t reclaimed_bytes; /* at the last idle marking */
	atomic_int_least64_t quiet_since_ms;  /* no CPU use or call since then */
	uint64_t cpu_ns;		      /* the last sample */
	int64_t sample_ms;		      /* when (0: none) */
	bool synced;			      /* the request's weight written once by this daemon */
};

struct wrd_harvest_cfg {
	bool enabled;	     /* true */
	double interval_s;   /* sampling period (1) */
	double idle_after_s; /* no CPU use for this long: idle (10) */
	double idle_cpu;     /* "no use": at most this share of one CPU (0.01) */
	double vm_idle_cpu;  /* the same for a VM tier's QEMU (0.1: an idle TCG
				guest's QEMU uses 2-4%, docs/API-LIFECYCLE.md) */
	bool reclaim;	     /* reclaim an idle sandbox's memory (true) */
};

/* Validate the config's "harvest" object (errors name the key,
 * "harvest.idle_after_s") and make it the one in force. NULL v: defaults. */
int wrd_harvest_config(json_t *v, wr_err *err);
/* The CPU weight a request of `cpu` CPUs gets: cpu x 100 (v2 cpu.weight
 * units: 1 CPU = 100 = the kernel's default), 1..10000; a sandbox without
 * a request (0) gets the default 100. */
uint64_t wrd_harvest_weight(double cpu);
/* "No CPU use" for sb: at most this share of one CPU (harvest.idle_cpu,
 * harvest.vm_idle_cpu for the VM tiers, whose QEMU costs CPU while its
 * guest idles); the idle policy (lifecycle.c) uses it too. */
double wrd_harvest_idle_cpu(const struct wrd_sbx *sb);
/* Start and stop the sampler thread (daemon start-up and shutdown). */
int wrd_harvest_start(wr_err *err);
void wrd_harvest_stop(void);
/* An operation begins on a running sandbox (wrd_sbx_begin, with busy
 * held): an idle one gets its request's weight back before it runs. */
void wrd_harvest_wake(struct wrd_sbx *sb);
/* GET of a sandbox: "cpu_cores" and "harvest" in its usage object. */
void wrd_harvest_json(struct wrd_sbx *sb, json_t *usage);
/* /metrics: per sandbox request, max, use and weight; node counts. */
void wrd_harvest_metrics(FILE *f);

#endif
