/* cgroups: one interface, two backends.
 *
 *   v2      pure unified hierarchy (production hosts): limits, kill, freeze
 *           and stats all on /sys/fs/cgroup.
 *   v1      controllers on /sys/fs/cgroup/<ctrl> (cpu, cpuacct, memory,
 *           pids, freezer, blkio), plus, when present (hybrid, as on our CI
 *           machines), the unified v2 hierarchy at /sys/fs/cgroup/unified,
 *           which has no controllers but gives cgroup.kill, cgroup.freeze,
 *           cgroup.events, CLONE_INTO_CGROUP and BPF attachment.
 *
 * Every cgroup warren creates lives beneath the cgroup this process started
 * in (per hierarchy, from /proc/self/cgroup), under a "warren" directory:
 *     <own cgroup>/warren/<name>            one per sandbox, carries limits
 *     <own cgroup>/warren/<name>/<leaf>     init, cmd-N: processes live here
 * (v2 forbids processes in a cgroup whose children have controllers, so
 * processes only ever live in leaves.)
 *
 * Hierarchies used. v1 with a unified hierarchy: memory, pids, cpu (with
 * cpuacct when co-mounted) and unified; kill, freeze, process counts and cpu
 * time come from unified, so no freezer or cpuacct directories are made
 * (each hierarchy costs a mkdir and an rmdir per cgroup). v1 without
 * unified: memory, pids, cpu, cpuacct, freezer. blkio only for sandboxes
 * created with an io_weight. cpuset and devices are never used.
 *
 * Pure v2 and delegation. Limits on <own>/warren/<name> need the memory and
 * pids controllers (cpu and io where available) enabled in the
 * cgroup.subtree_control of <own> and of <own>/warren; wr_cgroup_root_open
 * enables them. cgroup v2 lets a cgroup other than the root do that only
 * while it holds no processes, and <own> holds this one. warren never moves
 * its caller: the open fails with EBUSY and says how to fix it, which is to
 * run warrend in a delegated cgroup of its own with the daemon itself in a
 * leaf of it (systemd: Delegate=yes and DelegateSubgroup=daemon) and to
 * pass the base "../warren": "../" puts the base beside the daemon's leaf,
 * beneath the delegated cgroup, which holds no process. ("../" works on
 * every hierarchy; EINVAL where this process is in the root cgroup.)
 *
 * Thread-safety: a root is immutable after wr_cgroup_root_open and may be
 * shared by any number of threads; a wr_cgroup handle is used by one thread
 * at a time. Every handle must be closed or destroyed before its root.
 */
#ifndef WARREN_ISOLATE_CGROUP_H
#define WARREN_ISOLATE_CGROUP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

#define WR_CG_UNSET UINT64_MAX

/* UNSET: no limit at create; left unchanged by wr_cgroup_set_limits. */
struct wr_cgroup_limits {
	uint64_t memory_bytes; /* hard limit, swap included (no swap escape) */
	uint64_t pids;	       /* pids.max */
	uint64_t cpu_weight;   /* 1..10000, v2 semantics (v1: shares = weight*1024/100) */
	/* cpu.max "quota period". quota >= 1000; period 1000..1000000, default
	 * 100000. quota UNSET with a period set: "max period" (no max). */
	uint64_t cpu_quota_us;
	uint64_t cpu_period_us;
	/* 1..10000 where io/blkio is available (v1: blkio weight 10..1000).
	 * Best effort: silently skipped where the kernel or the IO scheduler
	 * has no weights; never fails a create. */
	uint64_t io_weight;
};
void wr_cgroup_limits_default(struct wr_cgroup_limits *l); /* all UNSET */

/* Of a cgroup and its descendants, removed leaves included (their OOM
 * kills and refused forks through wr_cgroup_retire_leaf). A value whose
 * controller the cgroup does not have (memory on a v2 hierarchy without it
 * delegated) reads 0. */
struct wr_cgroup_stats {
	uint64_t cpu_usage_ns;
	uint64_t memory_current;
	uint64_t memory_peak; /* max usage since creation */
	uint64_t oom_kills;   /* processes killed by the OOM killer in here */
	uint64_t pids_current;
	uint64_t pids_max_hits; /* forks refused at pids.max */
};

enum wr_cgroup_mode { WR_CG_V1 = 1, WR_CG_V2 = 2 };

struct wr_cgroup_root; /* the "warren" base in every hierarchy in use */
struct wr_cgroup;      /* one created (or adopted) cgroup */

/* Detect the mode and create <own cgroup>/warren in each hierarchy.
 * `base` overrides the directory name ("warren" by default; tests use their
 * own so they never touch a running daemon's); "../name" places it beside
 * the own cgroup instead (see delegation above). Thread-safe after return. */
int wr_cgroup_root_open(const char *base, struct wr_cgroup_root **out, wr_err *err);
void wr_cgroup_root_close(struct wr_cgroup_root *root);
/* Kill and remove every cgroup under the base, remove the base directory in
 * every hierarchy, and close the root (*root is NULL afterwards, also on
 * failure). For test teardown and uninstall; a daemon restart sweeps. */
int wr_cgroup_root_remove(struct wr_cgroup_root **root, wr_err *err);
enum wr_cgroup_mode wr_cgroup_root_mode(const struct wr_cgroup_root *root);
/* True when a v2 hierarchy is available for CLONE_INTO_CGROUP / BPF. */
bool wr_cgroup_root_has_unified(const struct wr_cgroup_root *root);

/* Create <base>/<name> with limits (NULL: none). Fails with EEXIST if
 * present, and leaves nothing behind on any failure. On v2 it also enables
 * memory and pids for its leaves (per-command peak and OOM counts), so the
 * cgroup itself can hold no process: attach to a leaf. */
int wr_cgroup_create(struct wr_cgroup_root *root, const char *name,
		     const struct wr_cgroup_limits *lim, struct wr_cgroup **out, wr_err *err);
/* Create a leaf <parent>/<name> without limits of its own. */
int wr_cgroup_create_leaf(struct wr_cgroup *parent, const char *name, struct wr_cgroup **out,
			  wr_err *err);
/* A leaf for one command: directories only in the hierarchies that account
 * or act per command (v2 or unified: kill, cpu time, BPF; memory: peak and
 * OOM kills; cpuacct and freezer where there is no unified hierarchy). In
 * the others (pids, cpu, blkio: limits, which the parent carries anyway)
 * its processes join the parent itself: wr_cgroup_attach and
 * wr_cgroup_procs_fds place them so. Saves a mkdir and an rmdir per such
 * hierarchy and command. Its stats have no pids counts. */
int wr_cgroup_create_cmd_leaf(struct wr_cgroup *parent, const char *name, struct wr_cgroup **out,
			      wr_err *err);
/* Open an existing <base>/<name> (daemon restart adoption). ENOENT if gone. */
int wr_cgroup_open(struct wr_cgroup_root *root, const char *name, struct wr_cgroup **out,
		   wr_err *err);
/* Change limits of a live cgroup; UNSET fields are left as they are.
 * Memory lowered below what cannot be reclaimed: v1 refuses (EBUSY), v2
 * sets it and OOM-kills in the cgroup. */
int wr_cgroup_set_limits(struct wr_cgroup *cg, const struct wr_cgroup_limits *lim, wr_err *err);

/* fd of the cgroup's v2 directory (O_DIRECTORY), for clone3
 * CLONE_INTO_CGROUP; -1 when there is no v2 hierarchy. Owned by cg. */
int wr_cgroup_v2_fd(const struct wr_cgroup *cg);
/* Move pid into this cgroup in every hierarchy (skip_v2: the caller already
 * placed it with CLONE_INTO_CGROUP). pid 0 means the caller. v2 first, so a
 * refusal there (EBUSY: not a leaf) leaves the v1 hierarchies untouched. */
int wr_cgroup_attach(struct wr_cgroup *cg, pid_t pid, bool skip_v2, wr_err *err);

/* Open cgroup.procs of this cgroup in every hierarchy (the v2 one unless
 * skip_v2), O_WRONLY|O_CLOEXEC, into fds (owned by the caller). For a
 * process that moves itself in with write(fd, "0") where it must not
 * allocate (between clone and exec). Returns the count. */
int wr_cgroup_procs_fds(struct wr_cgroup *cg, bool skip_v2, int *fds, int max, wr_err *err);

/* Kill every process in the cgroup and its descendants at once:
 * v2 cgroup.kill; v1 without unified: freeze, SIGKILL every task, thaw,
 * repeated (bounded, ~2 s) until nothing is listed, so a fork bomb cannot
 * outrun it. Returns before the processes have finished exiting on v2. */
int wr_cgroup_kill(struct wr_cgroup *cg, wr_err *err);
/* Freeze or thaw the subtree and wait (bounded, 5 s) until it is.
 * Idempotent. v2 (and hybrid: the unified hierarchy) writes cgroup.freeze
 * and waits on cgroup.events; v1 without unified writes freezer.state and
 * polls it. A frozen subtree can still be killed (wr_cgroup_kill,
 * wr_cgroup_destroy). Processes that join a frozen cgroup freeze too. */
int wr_cgroup_freeze(struct wr_cgroup *cg, bool frozen, wr_err *err);
/* Whether a freeze is asked of the cgroup itself: 1 frozen or freezing
 * (v2 cgroup.freeze = 1, v1 freezer.state FROZEN or FREEZING), 0 thawed,
 * negative on error. After a crash in the middle of a freeze or thaw this
 * tells what was last asked; wr_cgroup_freeze then completes either way. */
int wr_cgroup_frozen(struct wr_cgroup *cg, wr_err *err);
/* Memory of an idle (paused) sandbox: idle true makes its memory the
 * first the kernel reclaims, false undoes that. v1: memory.soft_limit_in_bytes
 * 0 (reclaimed first under global pressure) / back to unlimited. v2:
 * memory.reclaim of what it uses now (proactive; without swap only page
 * cache and other reclaimable pages go), nothing to undo. Returns the
 * bytes reclaimed now (v2), 0, or negative on error; a cgroup without a
 * memory controller: 0, nothing done. */
int64_t wr_cgroup_idle_memory(struct wr_cgroup *cg, bool idle, wr_err *err);
/* CPU harvesting (cgroup_harvest.c). CPU time of the subtree from one
 * file (v2 and hybrid: cpu.stat usage_usec; v1: cpuacct.usage), cheap
 * enough to sample every sandbox each second. */
int wr_cgroup_cpu_ns(struct wr_cgroup *cg, uint64_t *ns, wr_err *err);
/* The CPU share of a live cgroup: weight 1..10000 (v2 cpu.weight; v1
 * cpu.shares = weight * 1024 / 100), 0 for the lowest the kernel takes
 * (v2 1, v1 2). idle true also sets cpu.idle = 1 where the file exists
 * (v2, and the v1 cpu controller since Linux 5.15): the group's tasks run
 * like SCHED_IDLE ones, only on CPU time nothing else wants; false sets
 * it to 0 first. Returns 1 when cpu.idle was set, 0 otherwise, negative
 * on error (EOPNOTSUPP: no cpu controller). */
int wr_cgroup_cpu_share(struct wr_cgroup *cg, uint64_t weight, bool idle, wr_err *err);
/* Number of processes in it and its descendants (0 = empty). */
int wr_cgroup_nprocs(struct wr_cgroup *cg, wr_err *err);
/* Send sig to every process of this cgroup itself (not its descendants). */
int wr_cgroup_signal(struct wr_cgroup *cg, int sig, wr_err *err);
int wr_cgroup_stats(struct wr_cgroup *cg, struct wr_cgroup_stats *st, wr_err *err);
/* Only what a finished command reports (cgroup_harvest.c): CPU time, peak
 * memory and, when oom is true, OOM kills; the other fields read 0. Two
 * files on a leaf instead of wr_cgroup_stats' six or more: the function
 * tier reads it on the path of every call. A leaf's subtree is itself
 * (wr_cg_walk_cg); a cgroup with children gets wr_cgroup_stats. */
int wr_cgroup_stats_call(struct wr_cgroup *cg, bool oom, struct wr_cgroup_stats *st, wr_err *err);
/* Make the empty leaf of a finished call ready for another call of the same
 * owner, instead of an rmdir and a mkdir (the function tier, per call: a
 * memory cgroup's creation and offline are the dearest cgroup work there
 * is, and grow with the machine's count of memory-aware shrinkers). From
 * now on wr_cgroup_stats_call and wr_cgroup_cpu_ns count from zero again:
 * CPU time and OOM kills as differences from now, the peak reset (v1
 * memory.max_usage_in_bytes; v2 memory.peak through a file of its own,
 * Linux 6.12). Limits are left as they are. Returns 1 when ready, 0 when
 * the leaf cannot be reused: a process is still in it, it is frozen (pure
 * v1), more than max_left bytes of anonymous or tmpfs memory are still
 * charged to it (what the last call left, e.g. a tmpfs whose unmount is
 * under way, would count against the next call's limit), or the kernel
 * cannot reset the peak; negative on error. A leaf that is not ready is
 * for removal (its counters may have been reset already). */
int wr_cgroup_leaf_recycle(struct wr_cgroup *cg, uint64_t max_left, wr_err *err);

/* Retiring a command's leaf (cgroup.c). The kernel keeps two of a
 * leaf's counters in the leaf alone: OOM kills (v1 memory.oom_control and
 * v2 memory.events.local count the victim's own cgroup; v1 never counts
 * upwards) and, where the leaf has a pids directory and the kernel counts
 * a refused fork where it forked (v2 before 6.12 or with pids_localevents),
 * pids.events "max". Its rmdir would lose them. A parent's CPU time and
 * peak memory already include removed children (cpuacct charges every
 * ancestor, v2's rstat flushes a dying child into its parent, the page
 * counter's watermark is the parent's own), so they need nothing.
 *
 * keep persists one leaf's counters before the leaf goes; key names the
 * leaf for good ("<name>@<cgroup id>": the id is never reused while the
 * machine is up, and no sandbox outlives a reboot). Returns 1 when newly
 * recorded, 0 when already recorded (a retry of a retirement a crash cut
 * short after the record), negative when not recorded. */
typedef int (*wr_cgroup_keep_fn)(void *ctx, const char *parent, const char *key,
				 const struct wr_cgroup_stats *counts, wr_err *err);
/* Remove *leaf, an empty leaf of parent, keeping its counters: read them;
 * keep() them when not all 0 (keep NULL: nothing persists); rmdir; add
 * them to parent's retired counters, which wr_cgroup_stats(parent) adds to
 * its subtree's. Ordering invariant: the record before the rmdir, so a
 * crash in between leaves the leaf (read again at adoption, keep() says 0)
 * and never a count that is nowhere. Under parent's lock, which
 * wr_cgroup_stats(parent) takes too: a reader sees a leaf's counts once,
 * in the leaf or in the retired ones. keep() failing leaves *leaf as it
 * was (its counts stay in the subtree; retire it again later); otherwise
 * *leaf is NULL afterwards, as with wr_cgroup_destroy. */
int wr_cgroup_retire_leaf(struct wr_cgroup *parent, struct wr_cgroup **leaf, wr_cgroup_keep_fn keep,
			  void *ctx, wr_err *err);
/* Adoption of parent by a new process: its retired counters become kept
 * (the sums of what keep() recorded before; NULL: none), then every empty
 * leaf of parent other than `skip` (PID 1's) is retired; keep() saying 0
 * (recorded, but a crash came before the rmdir) adds nothing, kept holds
 * it already. Leaves with processes stay: their counts are in the subtree.
 * One hold of parent's lock throughout. Returns the number retired. */
int wr_cgroup_adopt_retired(struct wr_cgroup *parent, const struct wr_cgroup_stats *kept,
			    const char *skip, wr_cgroup_keep_fn keep, void *ctx, wr_err *err);

/* Kill, wait (bounded, ~2 s) until empty, remove every directory including
 * leaves, free. *cg is NULL afterwards even on failure. */
int wr_cgroup_destroy(struct wr_cgroup **cg, wr_err *err);
/* Free the handle without touching the kernel (ownership elsewhere). */
void wr_cgroup_close(struct wr_cgroup *cg);

const char *wr_cgroup_name(const struct wr_cgroup *cg);

/* Remove leftovers: every <base>/<name> (in any hierarchy, also half-made
 * ones) for which keep(name, ctx) returns false (keep NULL: all) is killed
 * and removed (daemon restart, test teardown). The base itself stays. */
int wr_cgroup_sweep(struct wr_cgroup_root *root, bool (*keep)(const char *name, void *ctx),
		    void *ctx, wr_err *err);

#endif
