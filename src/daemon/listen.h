/* Listening sockets, made here (not by MHD) so that both are
 * close-on-exec and the Unix socket gets its mode and group before the
 * first connection. */
#ifndef WARREN_DAEMON_LISTEN_H
#define WARREN_DAEMON_LISTEN_H

#include "common/error.h"
#include "daemon/config.h"

/* cfg->socket_path: parent made, a stale socket replaced (a live daemon's
 * is refused), mode 0660, group cfg->socket_group when it exists. */
int wrd_unix_listener(const struct wrd_config *cfg, wr_err *err);
/* "host:port" or "[v6]:port". */
int wrd_tcp_listener(const char *addr, wr_err *err);

#endif
