/* Snapshots of a sandbox's filesystem: its writable layer captured as an
 * EROFS layer image in the store, named like any image (so it can be
 * pushed), whose config labels name the stack it goes on:
 *   dev.warren.snapshot.base    digest of the base image
 *   dev.warren.snapshot.layers  digests of the layers between base and the
 *                               snapshot, base side first, comma-separated
 *                               (absent when none)
 *   dev.warren.snapshot.source  the sandbox id it was taken from
 * A create with {"image": <snapshot>} becomes base + layers + snapshot
 * (wrd_snapshot_expand). */
#ifndef WARREN_DAEMON_SNAPSHOT_H
#define WARREN_DAEMON_SNAPSHOT_H

#include <jansson.h>

#include "common/error.h"
#include "daemon/manager.h"
#include "image/image.h"

#define WRD_SNAP_BASE "dev.warren.snapshot.base"
#define WRD_SNAP_LAYERS "dev.warren.snapshot.layers"
#define WRD_SNAP_SOURCE "dev.warren.snapshot.source"

/* Capture sb's filesystem changes as image `ref` (name[:tag]). A running
 * sandbox is frozen during the capture and thawed after; a paused one
 * stays paused. Concurrent pause, resume, exec and kill wait for it.
 * Crash safety: the freeze is not recorded, so after a crash recovery
 * thaws a sandbox whose record says running; the store commits the image
 * only once complete. Errors: EINVAL (field "name") for a bad ref,
 * EOPNOTSUPP for a sandbox whose stack is not made of store images. */
int wrd_snapshot_take(struct wrd_sbx *sb, const char *ref, struct wr_image **out, wr_err *err);

/* A create body whose "image" is a snapshot: rewritten in place to its
 * base image with "layers" = the snapshot's stack (+ the body's own
 * layers after it). 0 when done or nothing to do; errors name "image". */
int wrd_snapshot_expand(json_t *body, wr_err *err);

/* The default name of an automatic snapshot of sb: "snapshot/<id>:<what>". */
void wrd_snapshot_name(const struct wrd_sbx *sb, const char *what, char *buf, size_t len);

#endif
