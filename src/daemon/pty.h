/* Interactive commands: GET /v1/sandboxes/{id}/pty, upgraded to the
 * warren-pty/1 framed protocol (docs/API.md) and relayed to a terminal the
 * command gets as its controlling one. */
#ifndef WARREN_DAEMON_PTY_H
#define WARREN_DAEMON_PTY_H

#include "daemon/http.h"

#define WRD_PTY_PROTO "warren-pty/1"

void wrd_api_pty(struct wrd_req *r);

#endif
