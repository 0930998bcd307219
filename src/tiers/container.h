/* The container tier: namespaces + cgroups + EROFS/overlay rootfs +
 * Landlock + seccomp. See docs/ARCHITECTURE.md for the create and exec
 * pipelines and their ordering invariants. */
#ifndef WARREN_TIERS_CONTAINER_H
#define WARREN_TIERS_CONTAINER_H

#include "tiers/tier.h"

/* Process-wide settings, set once before the first create. */
struct wr_container_config {
	const char *state_dir;	 /* /var/lib/warren: uid-range allocations */
	const char *run_dir;	 /* /run/warren: mountpoints */
	const char *init_path;	 /* the warren-init binary */
	const char *cgroup_base; /* "warren" */
	/* Tests only: a cgroup root the caller opened (the tier keeps it
	 * once init succeeds), e.g. a pure v2 host emulated on the
	 * unified hierarchy of a hybrid one (tests/unit/cgroup_fixture.c).
	 * NULL: wr_cgroup_root_open(cgroup_base). */
	struct wr_cgroup_root *cgroot;
};
int wr_container_init(const struct wr_container_config *cfg, wr_err *err);

extern const struct wr_tier_ops wr_container_tier;

int wr_container_create(const struct wr_sandbox_spec *spec, struct wr_sandbox **out, wr_err *err);
int wr_container_exec(struct wr_sandbox *sb, const struct wr_exec_spec *spec,
		      struct wr_exec_result *res, wr_err *err);
int wr_container_fs(struct wr_sandbox *sb, struct wr_fs *out, wr_err *err);
int wr_container_kill(struct wr_sandbox *sb, wr_err *err);
int wr_container_destroy(struct wr_sandbox **sb, wr_err *err);
/* Pause/resume: the cgroup freezer on the sandbox cgroup (PID 1, every
 * command and its leaves); see wr_cgroup_freeze. */
int wr_container_freeze(struct wr_sandbox *sb, bool frozen, wr_err *err);
int wr_container_frozen(struct wr_sandbox *sb, wr_err *err);
int wr_container_usage(struct wr_sandbox *sb, struct wr_cgroup_stats *st, wr_err *err);
/* CPU harvesting on the sandbox cgroup (tier.h's cpu_time, cpu_share,
 * idle_memory). */
int wr_container_cpu_time(struct wr_sandbox *sb, uint64_t *ns, wr_err *err);
int wr_container_cpu_share(struct wr_sandbox *sb, uint64_t weight, bool idle, wr_err *err);
int64_t wr_container_idle_memory(struct wr_sandbox *sb, bool idle, wr_err *err);
/* An idle sandbox with no process but PID 1 and no command starting
 * unmounts its /proc and devpts (container_mounts.c); its next command
 * mounts them again. 1 released, 0 nothing to do, negative on error. */
int wr_container_idle_release(struct wr_sandbox *sb, wr_err *err);
int wr_container_upper(struct wr_sandbox *sb, int *fd, uid_t *id_base, wr_err *err);
/* Pause to disk (tier op suspend, container_ckpt.c): the processes
 * checkpointed with CRIU and ended, restored on resume. Needs the criu
 * binary set first (one that passed `criu check`); without it every step
 * fails with EOPNOTSUPP. */
void wr_container_set_criu(const char *path);
int wr_container_suspend(struct wr_sandbox *sb, enum wr_suspend_step step, wr_err *err);
/* Snapshots with processes (container_ckpt.c). save_procs: the tree's
 * CRIU images and warren.json into the new directory dir; the tree is left
 * as it was (running or frozen), frozen meanwhile. load_procs: a sandbox
 * just created (no command run yet) takes the tree saved in images (read
 * only; another sandbox's, of this node or another): its own fresh tree
 * ends and the saved one is restored under its ids, network namespace and
 * file system, stopped until wr_container_start (tier op start). */
int wr_container_save_procs(struct wr_sandbox *sb, const char *dir, wr_err *err);
int wr_container_load_procs(struct wr_sandbox *sb, const char *images, wr_err *err);
int wr_container_start(struct wr_sandbox *sb, wr_err *err);
/* The tier's create: wr_container_create_spawned, then load_procs when
 * spec->restore names saved processes. */
int wr_container_create_op(const struct wr_sandbox_spec *spec, struct wr_sandbox **out,
			   wr_err *err);

/* Daemon restart: rebuild the handle of a sandbox that a previous process
 * created (its record says id, PID 1's host pid and the spec it was created
 * with). Verifies the pid is that sandbox's PID 1 (its cgroup is
 * <base>/<id>/init), then reopens pidfd, root, cgroups and uid range.
 * ENOENT/ESRCH when the sandbox is gone. The adopted PID 1 is not our child:
 * destroy waits for it through its pidfd. */
int wr_container_adopt(const struct wr_sandbox_spec *spec, pid_t init_pid, struct wr_sandbox **out,
		       wr_err *err);
/* The same when the uid range is known (no scan of the range files). */
int wr_container_adopt_known(const struct wr_sandbox_spec *spec, pid_t init_pid, uint32_t slot,
			     struct wr_sandbox **out, wr_err *err);
/* Counters of finished commands that their leaf cgroups keep alone (OOM
 * kills; cgroup.h, retiring): keep() persists each before its leaf goes
 * (exec.c). Set once before the first command; NULL: kept in memory only. */
void wr_container_keep_counts(wr_cgroup_keep_fn keep, void *ctx);
/* After wr_container_adopt: the sums keep() recorded for this sandbox
 * before, and the empty leaves a previous process left retired. */
int wr_container_adopt_counts(struct wr_sandbox *sb, const struct wr_cgroup_stats *kept,
			      wr_err *err);
/* Free a handle and leave the sandbox running (it is someone else's now). */
void wr_container_release(struct wr_sandbox **sb);

/* Spawners (spawner.c): creates done by small single-threaded helper
 * processes forked now, so that a big multi-threaded caller (warrend) is
 * never copied by a create. Call once, early, after wr_container_init and
 * before the caller grows. */
int wr_container_spawners_start(int n, wr_err *err);
/* wr_container_create through a spawner when spawners run (else directly);
 * the handle behaves as an adopted one (PID 1 is the spawner's child). */
int wr_container_create_spawned(const struct wr_sandbox_spec *spec, struct wr_sandbox **out,
				wr_err *err);

/* Kill and remove every sandbox cgroup and uid range whose id keep() does not
 * recognise (left by a crash mid-create, or by sandboxes whose record is
 * gone). Returns the number removed. */
int wr_container_sweep(bool (*keep)(const char *id, void *ctx), void *ctx, wr_err *err);

/* The image cache: each image a create used keeps one detached base mount,
 * which holds the image file open. Sweeping drops the mounts of images whose
 * file is gone or replaced (reclaimed by the store), so their disk space is
 * freed once no sandbox uses them; returns how many it dropped. Creates
 * sweep at most once a second on their own and idle spawners every second,
 * so calling this is only needed for an immediate effect. */
size_t wr_container_images_sweep(void);
size_t wr_container_images_cached(void);

const char *wr_sandbox_id(const struct wr_sandbox *sb);
pid_t wr_sandbox_init_pid(const struct wr_sandbox *sb);
uid_t wr_sandbox_uid_base(const struct wr_sandbox *sb);
/* The sandbox cgroup's v2 directory (network filter attach); -1 if none. */
int wr_sandbox_cgroup_v2_fd(const struct wr_sandbox *sb);

#endif
