/* A QMP (QEMU Machine Protocol) client: JSON objects, one per line, over
 * a socket warrend made and passed to QEMU as `-chardev socket,fd=N`.
 * Blocking, one caller at a time (the microVM holds its lock around it).
 * Events that arrive while a command waits for its answer are counted and
 * dropped. */
#ifndef WARREN_TIERS_QMP_H
#define WARREN_TIERS_QMP_H

#include <jansson.h>

#include "common/error.h"

struct wr_qmp;

/* Reads the greeting and negotiates capabilities; takes ownership of fd. */
int wr_qmp_open(int fd, int timeout_ms, struct wr_qmp **out, wr_err *err);
/* Runs one command; *ret (if asked) gets its "return" value (new ref).
 * A QMP error answer is -EIO with QEMU's class and description. */
int wr_qmp_cmd(struct wr_qmp *q, const char *cmd, json_t *args, int timeout_ms, json_t **ret,
	       wr_err *err);
/* A command with fd attached (SCM_RIGHTS), as add-fd takes it. */
int wr_qmp_cmd_fd(struct wr_qmp *q, const char *cmd, json_t *args, int fd, int timeout_ms,
		  json_t **ret, wr_err *err);
/* getfd: passes fd (SCM_RIGHTS) to QEMU under name, for URIs like
 * "fd:name" (migration); fd stays ours. */
int wr_qmp_getfd(struct wr_qmp *q, const char *name, int fd, wr_err *err);
/* The status of the run state ("running", "paused", ...) into buf. */
int wr_qmp_status(struct wr_qmp *q, char *buf, size_t len, wr_err *err);
void wr_qmp_close(struct wr_qmp **q);

#endif
