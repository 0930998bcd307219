/* CRIU for container checkpoints (pause with keep_memory=false): which
 * criu binary, and whether it works on this node (`criu check`, run once at
 * start). */
#ifndef WARREN_DAEMON_CHECKPOINT_H
#define WARREN_DAEMON_CHECKPOINT_H

#include <jansson.h>
#include <stdbool.h>

/* Runs `criu check` once with the configured binary and records the
 * outcome; never fails the daemon's start (an unusable CRIU only turns
 * checkpointing off, with the reason). */
void wrd_ckpt_init(const char *criu_path);
/* true when CRIU passed its check; else *why (static text) says why not. */
bool wrd_ckpt_available(const char **why);
/* The configured criu binary (absolute path). */
const char *wrd_ckpt_criu(void);
/* {"available", "criu", "reason"?} for /v1/health. */
json_t *wrd_ckpt_json(void);

#endif
