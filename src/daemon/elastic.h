/* Elastic CPU: admission of new sandboxes by what running sandboxes ask
 * and the node's measured pressure (PSI), up to an overcommit ratio. */
#ifndef WARREN_DAEMON_ELASTIC_H
#define WARREN_DAEMON_ELASTIC_H

#include <jansson.h>
#include <stdio.h>

#include "common/error.h"

struct wrd_admission {
	double cpu_overcommit;	 /* requested CPUs of running sandboxes <= this x node CPUs (10) */
	double cpu_pressure_max; /* refuse above this PSI cpu "some" avg10, 0..1 (1: off) */
	double memory_pressure_max; /* refuse above this PSI memory "some" avg10, 0..1 (0.5) */
};

/* Validate the config's "admission" object into a (errors name the key,
 * "admission.cpu_overcommit"). NULL v: the defaults. */
int wrd_elastic_config(json_t *v, struct wrd_admission *a, wr_err *err);
/* May a sandbox asking `cpu` CPUs (0: no cap, counted as nothing) start
 * now? -EAGAIN with a message naming the reason (the API's 429
 * resource_exhausted) when not. */
int wrd_elastic_admit(double cpu, wr_err *err);
/* Node lines of /metrics: CPUs, requested CPUs of running sandboxes, the
 * overcommit allowed, admissions refused by reason. */
void wrd_elastic_metrics(FILE *f);

#endif
