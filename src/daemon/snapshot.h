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
#include <stdbool.h>

#include "common/error.h"
#include "daemon/manager.h"
#include "image/image.h"

#define WRD_SNAP_BASE "dev.warren.snapshot.base"
#define WRD_SNAP_LAYERS "dev.warren.snapshot.layers"
#define WRD_SNAP_SOURCE "dev.warren.snapshot.source"
/* A snapshot with processes (container tier): the digest of the store
 * image that holds them (CRIU's images of the tree, flat), whose own labels
 * say whose they are and for which tier. */
#define WRD_SNAP_PROCS "dev.warren.snapshot.processes"
#define WRD_PROCS_OF "dev.warren.processes.source"
#define WRD_PROCS_TIER "dev.warren.processes.tier"
/* HMAC-SHA256 (hex) of the processes digest with the node's snapshot key:
 * criu restores processes images as root, and a hostile one (made by hand,
 * pushed to a registry) could ask for anything (no user namespace, host
 * mounts). Only processes signed with a key this node has are restored;
 * nodes that exchange snapshots with processes share the key (config
 * "snapshot_key", default <state_dir>/snapshot.key, made at first start). */
#define WRD_SNAP_PROCS_SIG "dev.warren.snapshot.processes.hmac"

/* Capture sb's filesystem changes as image `ref` (name[:tag]). A running
 * sandbox is frozen during the capture and thawed after; a paused one
 * stays paused. Concurrent pause, resume, exec and kill wait for it.
 * Crash safety: the freeze is not recorded, so after a crash recovery
 * thaws a sandbox whose record says running; the store commits the image
 * only once complete. Errors: EINVAL (field "name") for a bad ref,
 * EOPNOTSUPP for a sandbox whose stack is not made of store images.
 * procs: its processes too (tier op save_procs), into an image of their own
 * named by the snapshot's label WRD_SNAP_PROCS; saved while frozen, before
 * the files, so the two agree. A call in flight (a command, a transfer)
 * is waited for 2 s, then refused (ESRCH). VM snapshots always hold the
 * whole VM. */
int wrd_snapshot_take(struct wrd_sbx *sb, const char *ref, bool procs, struct wr_image **out,
		      wr_err *err);

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
/* An image of the store unpacked (fsck.erofs --extract, which also checks
 * it) into a new directory of the store's staging area: *dir, removed with
 * wrd_snapshot_restore_done. */
int wrd_snapshot_unpack(const struct wr_image *img, char **dir, wr_err *err);
/* Cleanup of a create's *restore_dir: the unpacked snapshot goes (a
 * processes image's shared one when its last create is done). */
void wrd_snapshot_restore_done(char **restore_dir);
/* snapshot.c: a shared unpacked directory released (true), or false when
 * dir is not one; snapshot_vm.c: a directory of unpacked files removed. */
bool wrd_snapshot_release_shared(const char *dir);
/* The processes of snapshot snap (none: *dir NULL) unpacked and held for a
 * series of creates from it (a fork's): they share it; released with
 * wrd_snapshot_restore_done. */
int wrd_snapshot_procs_hold(const struct wr_image *snap, char **dir, wr_err *err);
void wrd_snapshot_remove_dir(const char *dir);

/* The snapshot key: read from path (NULL: <state_dir>/snapshot.key, made
 * when missing: 32 random bytes, 0600). Without it no processes snapshot is
 * taken or restored. */
int wrd_snapshot_key_init(const char *path, const char *state_dir, wr_err *err);
/* The processes digest a snapshot's labels name, when well formed
 * ("sha256:" + 64 hex) and signed with this node's key: 1; 0 when it has
 * none; negative with *err (field "image") otherwise. */
int wrd_snapshot_procs_of(const struct wr_image *snap, const char **digest, wr_err *err);
/* The store name of a snapshot's processes image: "<name>.processes:<tag>"
 * for snapshot ref "name[:tag]" (a name keeps it from gc's pruning of
 * unnamed images); false (out unset) for a digest ref or one too long. */
bool wrd_snapshot_procs_name(const char *ref, char *out, size_t n);
/* "sha256:" + 64 lowercase hex */
bool wrd_snapshot_digest_ok(const char *d);

/* The default name of an automatic snapshot of sb: "snapshot/<id>:<what>". */
void wrd_snapshot_name(const struct wrd_sbx *sb, const char *what, char *buf, size_t len);

#endif
