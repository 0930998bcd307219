/* The per-sandbox file-access trail (fanotify), off by default: see
 * trail.c. Entries are audit events of layer "file". */
#ifndef WARREN_DAEMON_TRAIL_H
#define WARREN_DAEMON_TRAIL_H

#include <jansson.h>
#include <stdbool.h>

#include "common/error.h"

/* The create body's "file_trail" (NULL, false: off; true: every kind;
 * {"events": ["open", "read", "write", "exec"]}: those). *out: the
 * normalised {"events": [...]} for the spec, or NULL when off. Errors name
 * the field. tier: the sandbox's tier (only "container" has a trail). */
int wrd_trail_parse(json_t *v, const char *tier, json_t **out, wr_err *err);

struct wrd_sbx;
/* Start the trail of a running sandbox whose spec asks for one (no-op
 * otherwise, or when it runs already). Before its first command. */
int wrd_trail_start(struct wrd_sbx *sb, wr_err *err);
/* Drain and end it (its processes are gone; before its root goes). */
void wrd_trail_stop(const char *id);
bool wrd_trail_active(const char *id);
/* Daemon exit: every trail and the reader thread. */
void wrd_trail_shutdown(void);

#endif
