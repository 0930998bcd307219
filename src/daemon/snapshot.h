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
 * layers after it); a VM snapshot as wrd_snapshot_vm_expand says (then
 * *restore_dir is set). 0 when done or nothing to do; errors name
 * "image". */
int wrd_snapshot_expand(json_t *body, char **restore_dir, wr_err *err);

/* VM tiers (snapshot_vm.c): the whole VM (RAM, devices, disk) as a store
 * image; and a create body whose image is one: rewritten to its base
 * image, tier and sizes, the snapshot unpacked into *restore_dir (the
 * caller removes it after the create: wr_qsnap_remove). */
int wrd_snapshot_vm_take(struct wrd_sbx *sb, const char *ref, struct wr_image **out, wr_err *err);
int wrd_snapshot_vm_expand(json_t *body, struct wr_image *img, char **restore_dir, wr_err *err);
/* Cleanup of a create's *restore_dir: the unpacked snapshot goes. */
void wrd_snapshot_restore_done(char **restore_dir);

/* The default name of an automatic snapshot of sb: "snapshot/<id>:<what>". */
void wrd_snapshot_name(const struct wrd_sbx *sb, const char *what, char *buf, size_t len);

#endif
