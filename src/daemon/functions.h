/* The function tier in warrend: POST /v1/functions/call and
 * POST /v1/functions/batch (api_functions.c). */
#ifndef WARREN_DAEMON_FUNCTIONS_H
#define WARREN_DAEMON_FUNCTIONS_H

#include <jansson.h>

#include "common/error.h"
#include "daemon/api.h"
#include "daemon/config.h"

/* The config's "functions" object (docs/API.md, "Functions"): errors name
 * the key ("functions.images.py.python_preload[2]"). */
int wrd_functions_check_config(json_t *v, wr_err *err);
/* After the container tier is up (wrd_mgr_init), with cfg->functions.
 * warren-zygote is taken from WARREN_ZYGOTE or beside warren-init. */
int wrd_functions_init(const struct wrd_config *cfg, wr_err *err);
/* At exit: every pool's calls and zygote killed, cgroups removed. */
void wrd_functions_stop(void);

void wrd_api_fn_call(struct wrd_req *r);
void wrd_api_fn_batch(struct wrd_req *r);

#endif
