/* A QEMU's whole state to a file and back, for both VM tiers: the
 * building blocks of a pause that frees the VM's memory (keep_memory=false)
 * and of snapshots to disk.
 *
 * The state is QEMU's migration stream (device state and every page of
 * guest RAM; zero pages take a few bytes) written to a file through QMP
 * `migrate fd:` (QEMU 7.2 has no `file:` URI, and `exec:` dies under
 * spawn=deny) and read back by a new QEMU started with `-incoming defer`
 * and the same machine arguments (`migrate-incoming fd:`).
 *
 * A saved VM is a directory:
 *   state      the migration stream
 *   disk       the VM's writable disk as it was while the VM was stopped
 *              (so it matches the RAM)
 *   meta.json  "format", "tier", QEMU's version, the machine, the
 *              accelerator and the arguments a restore must repeat, the
 *              VM's sizes and whether its vCPUs ran when it was saved
 *
 * A restore refuses a saved VM whose format, tier, accelerator, machine or
 * arguments differ from what this node would start (wr_qsnap_check), or
 * whose QEMU version differs from the new QEMU's (checked before any byte
 * of the stream is loaded), with an error naming the difference.
 *
 * Write ordering (crash safety): a saved directory is built under a
 * temporary name, each file fsync'd, meta.json last, then renamed into
 * place and its parent fsync'd (wr_qsnap_publish); a directory without a
 * meta.json is never used. */
#ifndef WARREN_TIERS_QEMU_SNAP_H
#define WARREN_TIERS_QEMU_SNAP_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

struct wr_qmp;

#define WR_QSNAP_FORMAT "warren-vm-state 1"

/* QMP with its lock (the tiers keep one per VM). */
struct wr_qsnap_qmp {
	struct wr_qmp *qmp;
	pthread_mutex_t *lock;
	struct wr_qemu *qemu; /* the process and its cgroup (qemu_harvest.h) */
};

/* QEMU's version, "7.2.19 (Debian 1:7.2+dfsg-7+deb12u18)". */
int wr_qsnap_version(const struct wr_qsnap_qmp *q, char *buf, size_t len, wr_err *err);
/* Writes the state of a stopped VM (QMP stop first) into fd and fsyncs
 * it; *bytes (may be NULL) its size. The VM is left "postmigrate" (its
 * disks flushed and inactive until a `cont`, which activates them). */
int wr_qsnap_save(const struct wr_qsnap_qmp *q, int fd, uint64_t *bytes, wr_err *err);
/* wr_qsnap_save into a new file at path (0600, never an existing one). */
int wr_qsnap_save_file(const struct wr_qsnap_qmp *q, const char *path, uint64_t *bytes,
		       wr_err *err);
/* A QEMU started with -incoming defer loads the state in fd; returns once
 * it is loaded (the VM paused), or an error by deadline_ns (monotonic). */
int wr_qsnap_load(const struct wr_qsnap_qmp *q, int fd, uint64_t deadline_ns, wr_err *err);
/* Is the VM's run state one of a stopped VM ("paused", "postmigrate",
 * "finish-migrate")? 1 yes, 0 no, negative on error. */
int wr_qsnap_stopped(const struct wr_qsnap_qmp *q, wr_err *err);

/* saved's "format", "tier", "accel", "machine" and "args" equal now's; the
 * error (EINVAL, field "image") names the first that differs. */
int wr_qsnap_check(json_t *saved, json_t *now, wr_err *err);
/* saved's "qemu_version" equals the running QEMU's (after its start with
 * -incoming defer, before the load). */
int wr_qsnap_check_version(json_t *saved, const struct wr_qsnap_qmp *q, wr_err *err);

/* <dir>/meta.json := j, written to a temporary name, fsync'd, renamed. */
int wr_qsnap_write_meta(const char *dir, json_t *j, wr_err *err);
/* <dir>/meta.json, or NULL with err set. */
json_t *wr_qsnap_read_meta(const char *dir, wr_err *err);
/* fsync of a file by path (data) or of a directory (its entries). */
int wr_qsnap_fsync(const char *path, wr_err *err);
/* rename tmp to final (which must not exist), fsync final's parent. */
int wr_qsnap_publish(const char *tmp, const char *final, wr_err *err);
/* A hard link of from at to (the same inode: nothing is copied), or a
 * sparse copy when they are on different filesystems; fsync'd. */
int wr_qsnap_link_or_copy(const char *from, const char *to, wr_err *err);
/* A sparse copy, fsync'd. */
int wr_qsnap_copy(const char *from, const char *to, wr_err *err);
/* 1 when QEMU runs with KVM, 0 with TCG. */
int wr_qsnap_kvm(const struct wr_qsnap_qmp *q, wr_err *err);
/* Removes a saved directory (its files, then itself); quiet. */
void wr_qsnap_remove(const char *dir);
/* At start, after recovery: the saved directories under dir whose id
 * keep() refuses (no live record), and every .tmp- and .old- one. */
size_t wr_qsnap_sweep(const char *dir, bool (*keep)(const char *id, void *ctx), void *ctx);
/* Runs a host tool (qemu-img) with a fixed argv and no shell; its stderr
 * goes into the error. */
int wr_qsnap_run(char *const *argv, wr_err *err);

#endif
