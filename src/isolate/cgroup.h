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
 */
#ifndef WARREN_ISOLATE_CGROUP_H
#define WARREN_ISOLATE_CGROUP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

#define WR_CG_UNSET UINT64_MAX

struct wr_cgroup_limits {
	uint64_t memory_bytes; /* hard limit, swap included (no swap escape) */
	uint64_t pids;	       /* pids.max */
	uint64_t cpu_weight;   /* 1..10000, v2 semantics (v1: shares = weight*1024/100) */
	uint64_t cpu_quota_us; /* with cpu_period_us: cpu.max; UNSET = no max */
	uint64_t cpu_period_us;
	uint64_t io_weight; /* 1..10000 where io/blkio is available */
};
void wr_cgroup_limits_default(struct wr_cgroup_limits *l); /* all UNSET */

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
 * own so they never touch a running daemon's). Thread-safe after return. */
int wr_cgroup_root_open(const char *base, struct wr_cgroup_root **out, wr_err *err);
void wr_cgroup_root_close(struct wr_cgroup_root *root);
enum wr_cgroup_mode wr_cgroup_root_mode(const struct wr_cgroup_root *root);
/* True when a v2 hierarchy is available for CLONE_INTO_CGROUP / BPF. */
bool wr_cgroup_root_has_unified(const struct wr_cgroup_root *root);

/* Create <base>/<name> with limits. Fails with EEXIST if present. */
int wr_cgroup_create(struct wr_cgroup_root *root, const char *name,
		     const struct wr_cgroup_limits *lim, struct wr_cgroup **out, wr_err *err);
/* Create a leaf <parent>/<name> without limits of its own. */
int wr_cgroup_create_leaf(struct wr_cgroup *parent, const char *name, struct wr_cgroup **out,
			  wr_err *err);
/* Open an existing <base>/<name> (daemon restart adoption). ENOENT if gone. */
int wr_cgroup_open(struct wr_cgroup_root *root, const char *name, struct wr_cgroup **out,
		   wr_err *err);
/* Change limits of a live cgroup. */
int wr_cgroup_set_limits(struct wr_cgroup *cg, const struct wr_cgroup_limits *lim, wr_err *err);

/* fd of the cgroup's v2 directory (O_DIRECTORY), for clone3
 * CLONE_INTO_CGROUP; -1 when there is no v2 hierarchy. Owned by cg. */
int wr_cgroup_v2_fd(const struct wr_cgroup *cg);
/* Move pid into this cgroup in every hierarchy (skip_v2: the caller already
 * placed it with CLONE_INTO_CGROUP). pid 0 means the caller. */
int wr_cgroup_attach(struct wr_cgroup *cg, pid_t pid, bool skip_v2, wr_err *err);

/* Kill every process in the cgroup and its descendants at once:
 * v2 cgroup.kill; v1 without unified: freeze, SIGKILL every task, thaw. */
int wr_cgroup_kill(struct wr_cgroup *cg, wr_err *err);
int wr_cgroup_freeze(struct wr_cgroup *cg, bool frozen, wr_err *err);
/* Number of processes in it and its descendants (0 = empty). */
int wr_cgroup_nprocs(struct wr_cgroup *cg, wr_err *err);
int wr_cgroup_stats(struct wr_cgroup *cg, struct wr_cgroup_stats *st, wr_err *err);

/* Kill, wait (bounded, ~2 s) until empty, remove every directory including
 * leaves, free. *cg is NULL afterwards even on failure. */
int wr_cgroup_destroy(struct wr_cgroup **cg, wr_err *err);
/* Free the handle without touching the kernel (ownership elsewhere). */
void wr_cgroup_close(struct wr_cgroup *cg);

const char *wr_cgroup_name(const struct wr_cgroup *cg);

/* Remove leftovers: every <base>/<name> for which keep(name, ctx) returns
 * false is killed and removed (daemon restart, test teardown). */
int wr_cgroup_sweep(struct wr_cgroup_root *root, bool (*keep)(const char *name, void *ctx),
		    void *ctx, wr_err *err);

#endif
