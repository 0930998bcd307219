/* Private to the HTTP glue (http.c and http_upgrade.c): the per-request
 * state MHD keeps as the connection's closure. */
#ifndef WARREN_DAEMON_HTTP_INTERNAL_H
#define WARREN_DAEMON_HTTP_INTERNAL_H

#include <microhttpd.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "daemon/http.h"

struct wrd_http_priv {
	struct wrd_req req;
	struct MHD_Connection *conn;
	atomic_int refs; /* MHD's + a worker's while it runs the handler */
	bool tcp;
	bool dispatched;
	bool committed; /* the worker handed the reply to MHD */
	bool upload_discard;
	bool too_large;
	struct MHD_Response *resp; /* ready to queue */
	unsigned status;
	char *buf; /* JSON body */
	size_t len, cap;
	size_t metric;
	struct wrd_upgrade *upgrade; /* a 101 answer waiting for the socket */
};

/* Replace the pending answer (NULL resp: out of memory, the connection is
 * dropped). */
void wrd_http_set_resp(struct wrd_http_priv *p, unsigned status, struct MHD_Response *resp);
/* Hand the pending answer to MHD (resumes the suspended connection). */
void wrd_http_commit(struct wrd_http_priv *p);
/* The request is over (MHD's completion callback): a handler still waiting
 * for an upgraded socket learns that none will come. */
void wrd_upgrade_ended(struct wrd_http_priv *p, enum MHD_RequestTerminationCode toe);

/* pool.c: the threads handlers run on. Lanes are fixed sets of workers
 * with a FIFO each; long jobs get a thread each, up to max_commands. */
enum wrd_lane { WRD_LANE_POOL, WRD_LANE_CREATE, WRD_NLANES };
int wrd_pool_start(const struct wrd_config *cfg, wr_err *err);
void wrd_pool_stop(void);
int wrd_lane_submit(enum wrd_lane lane, void (*fn)(void *arg), void *arg);
/* Reserve a long thread (false at the cap), then start the job on it. */
bool wrd_long_reserve(void);
int wrd_long_start(void (*fn)(void *arg), void *arg);

#endif
