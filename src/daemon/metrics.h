/* Prometheus metrics: lock-free counters and fixed-bucket histograms,
 * rendered in the text exposition format. */
#ifndef WARREN_DAEMON_METRICS_H
#define WARREN_DAEMON_METRICS_H

#include <stddef.h>

/* Route labels are the route patterns; set once before serving. */
void wrd_metrics_init(const char *const *routes, size_t n_routes);
void wrd_metrics_request(size_t route);
void wrd_metrics_error(const char *code);
void wrd_metrics_create(double seconds);
void wrd_metrics_command(double seconds);
/* The whole exposition (malloc'd), or NULL when out of memory. */
char *wrd_metrics_render(size_t *len);

#endif
