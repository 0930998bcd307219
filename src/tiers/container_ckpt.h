/* The container tier's checkpoints (container_ckpt.c): what its three
 * files share. container_ckpt_pins.c: the paths, the pins that keep a
 * suspended sandbox's file system and network namespace, and what PID 1
 * holds from outside; container_ckpt_criu.c: running criu in the sandbox's
 * namespaces. */
#ifndef WARREN_TIERS_CONTAINER_CKPT_H
#define WARREN_TIERS_CONTAINER_CKPT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "common/error.h"
#include "isolate/cgroup.h"

struct wr_sandbox;

/* CRIU's log level for warrend's runs: errors, warnings and the outline
 * of each step (enough to see where it stopped). */
#define CRIU_LOG_LEVEL "-v2"
/* The largest file deleted while open that a dump keeps (CRIU's default:
 * 1 MiB); a larger one fails the dump. */
#define GHOST_LIMIT (1ULL << 30)

/* ---- container_ckpt_pins.c ---------------------------------------------- */

/* <run_dir>/ckpt/<id>[/what] and <state_dir>/ckpt/<id><suffix> */
void wr_ckpt_pin_path(char *buf, size_t n, const char *id, const char *what);
void wr_ckpt_img_path(char *buf, size_t n, const char *id, const char *suffix);
/* the pins' mount points, NULL-terminated */
extern const char *const wr_ckpt_pin_dirs[];
/* pin_dirs from here on stay from a checkpoint to the sandbox's end
 * (LAYER_PINS): see wr_container_ckpt_done. */
#define LAYER_PINS 4
/* The pins of one checkpoint (all: the layer's too) detached and removed. */
void wr_ckpt_unpin(const char *id, bool all);
bool wr_ckpt_is_mount_point(const char *path);
/* ckpt/ (shared) or a sandbox's directory in it, owned and moded. */
int wr_ckpt_own_dir(const char *path, bool shared, wr_err *err);
/* The pins' mount points, made. */
int wr_ckpt_make_pins(struct wr_sandbox *sb, wr_err *err);
/* What the dump records in meta (warren.json): PID 1's executable, the
 * external mounts, PID 1's two fds (pinned when pin); then the other pins. */
int wr_ckpt_exe_key(struct wr_sandbox *sb, json_t *meta, wr_err *err);
int wr_ckpt_external_mounts(struct wr_sandbox *sb, json_t *meta, wr_err *err);
int wr_ckpt_pin_init_fds(struct wr_sandbox *sb, json_t *meta, bool pin, wr_err *err);
int wr_ckpt_pin_mounts(struct wr_sandbox *sb, wr_err *err);

/* ---- container_ckpt_criu.c ---------------------------------------------- */

/* The criu binary (wr_container_set_criu), NULL when none works. */
const char *wr_ckpt_criu(void);

/* Where a restore's criu sees the pins (criu_child). */
#define PINS_AT "/tmp/warren-pins"

/* argv built in steps (oom: an allocation failed or too many) */
struct strv {
	char *v[160];
	size_t n;
	bool oom;
};
void wr_ckpt_sv_add(struct strv *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void wr_ckpt_sv_free(struct strv *s);

/* How the child that execs criu enters the sandbox: a dump joins PID 1's
 * network and cgroup namespaces; a restore waits until the parent has put
 * it in PID 1's cgroup (go), joins the network namespace, makes a cgroup
 * namespace rooted there (as PID 1's was) and a mount namespace of its own
 * (CRIU mounts the restored tree's there before it pivots). fds[i] is dup'd
 * to 3 + i. */
struct criu_run {
	char *const *argv;
	const char *log;  /* stdout and stderr */
	int init_pidfd;	  /* dump */
	int netns;	  /* restore */
	int go;		  /* restore: read end of the go pipe */
	const char *pins; /* restore: the pins' directory, shown at PINS_AT */
	const int *fds;
	size_t nfds;
	int exe; /* set by wr_ckpt_run_criu: argv[0] opened before the child's
		  * mounts, which may cover it (a build under /tmp) */
};
/* fds moved above the ones the child dups them to (3 .. 3+n). */
int wr_ckpt_fds_high(int *fds, size_t n, wr_err *err);
/* Runs criu as in says; cg: the cgroup the child joins first (restore).
 * Waits for it (bounded); 0 when it exited 0, else the error CRIU logged
 * (its log kept as <state_dir>/ckpt/<id>.log). */
int wr_ckpt_run_criu(const struct criu_run *in, struct wr_cgroup *cg, const char *id,
		     const char *dir, const char *logname, wr_err *err);

/* A daemon restart: a criu dump the previous daemon started may still run
 * (criu outlives it: killed mid-dump, it would kill the tasks its parasite
 * is in), and at its end it freezes the tree again (--freeze-cgroup). So
 * the adoption of init_pid waits (bounded by CRIU_TIMEOUT_MS) until none
 * dumps it before it makes the sandbox match its record. */
void wr_ckpt_wait_dumps(pid_t init_pid);

#endif
