/* Commands in a sandbox: foreground (buffered or streamed NDJSON) and
 * background ones with a handle (list, stdin, wait, stream, kill).
 *
 * A background command runs on a thread of its own that calls the tier's
 * exec; its output goes into an append-only log (chunks in arrival order,
 * each stream capped by output_cap) that stream readers replay from the
 * start and then follow. Its stdin is a pipe whose write end the daemon
 * keeps until {"eof": true} or the end of the command. */
#ifndef WARREN_DAEMON_COMMANDS_H
#define WARREN_DAEMON_COMMANDS_H

#include "daemon/http.h"
#include "daemon/manager.h"

/* Route handlers (POST/GET .../commands[...]) */
void wrd_api_cmd_run(struct wrd_req *r);
void wrd_api_cmd_list(struct wrd_req *r);
void wrd_api_cmd_get(struct wrd_req *r);
void wrd_api_cmd_stdin(struct wrd_req *r);
void wrd_api_cmd_wait(struct wrd_req *r);
void wrd_api_cmd_stream(struct wrd_req *r);
void wrd_api_cmd_kill(struct wrd_req *r);

/* Sandbox kill: close every command's stdin so nothing waits on it. */
void wrd_cmds_abort(struct wrd_sbx *sb);
/* Daemon start: the background commands an adopted sandbox had
 * (cmd_adopt.c). */
int wrd_cmds_adopt(struct wrd_sbx *sb, wr_err *err);
/* Last reference of the sandbox dropped: free the command records. */
void wrd_cmds_free(struct wrd_sbx *sb);

#endif
