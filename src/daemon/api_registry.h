/* Handlers of /v1/images/pull and /v1/images/{ref}/push (api_registry.c). */
#ifndef WARREN_DAEMON_API_REGISTRY_H
#define WARREN_DAEMON_API_REGISTRY_H

#include <jansson.h>
#include <stdbool.h>

#include "daemon/http.h"
#include "image/registry.h"

/* A registry client for remote_ref's host with the request's "auth" object
 * ({"username","password"} or {"token"}; NULL for anonymous). Errors name
 * the field ("auth.username", ...). */
int wrd_registry_open_for(const char *remote_ref, json_t *auth, bool insecure,
			  struct wr_registry **out, wr_err *err);
void wrd_api_img_pull(struct wrd_req *r);
void wrd_api_img_push(struct wrd_req *r);

#endif
