/* cgroups: what the front (cgroup.c, cgroup_layout.c) and the two backends
 * (cgroup_v1.c, cgroup_v2.c) share, plus the hooks the unit tests use to
 * build a root from an explicit layout (a pure-v1 root on a hybrid machine,
 * or a v2 root on the controller-less unified hierarchy). Not part of the
 * public API. */
#ifndef WARREN_ISOLATE_CGROUP_INTERNAL_H
#define WARREN_ISOLATE_CGROUP_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"
#include "isolate/cgroup.h"

/* v1 controllers warren knows about (cpuset and devices are never used). */
enum wr_cg_ctrl {
	WR_CG_CPU,
	WR_CG_CPUACCT,
	WR_CG_MEMORY,
	WR_CG_PIDS,
	WR_CG_FREEZER,
	WR_CG_BLKIO,
	WR_CG_NCTRL
};
const char *wr_cg_ctrl_name(enum wr_cg_ctrl c);

/* v2 controllers warren delegates (bits of wr_cgroup_root.v2_ctrls). */
enum {
	WR_CG2_MEMORY = 1u << 0,
	WR_CG2_PIDS = 1u << 1,
	WR_CG2_CPU = 1u << 2,
	WR_CG2_IO = 1u << 3,
};

/* Where this process's own cgroup is, per hierarchy, as directory paths.
 * Co-mounted v1 controllers (cpu,cpuacct) carry the same path string. */
struct wr_cgroup_layout {
	enum wr_cgroup_mode mode;
	char *v1_dir[WR_CG_NCTRL]; /* NULL: controller not mounted (or unused) */
	char *v2_dir;		   /* NULL: no v2 hierarchy */
	/* v2 mode: fail unless memory and pids can be delegated (production);
	 * tests on the controller-less unified hierarchy turn this off. */
	bool require_v2_controllers;
	/* Tests only (a pure v2 host emulated where no controller is
	 * delegated): limits of absent controllers are left out, not refused. */
	bool v2_skip_absent_limits;
};
/* Read /proc/self/cgroup and /proc/self/mountinfo. `up` climbs that many
 * levels above the own cgroup (base "../name"); EINVAL above the root. */
int wr_cgroup_layout_detect(struct wr_cgroup_layout *lay, unsigned up, wr_err *err);
void wr_cgroup_layout_free(struct wr_cgroup_layout *lay);

/* Open a root on an explicit layout (the layout is copied). */
int wr_cgroup_root_open_at(const struct wr_cgroup_layout *lay, const char *base,
			   struct wr_cgroup_root **out, wr_err *err);
/* The O_PATH directory fd of cg in the hierarchy carrying controller c
 * (-1 when cg has no directory there), for tests that read files. */
int wr_cgroup_ctrl_fd(const struct wr_cgroup *cg, enum wr_cg_ctrl c);
/* Path of the base directory in controller c's hierarchy (NULL: none);
 * c == WR_CG_NCTRL names the v2 hierarchy. */
const char *wr_cgroup_root_path(const struct wr_cgroup_root *root, enum wr_cg_ctrl c);

/* ---- shared between front and backends ----------------------------- */

#define WR_CG_MAX_CHILDREN_DEPTH 32

/* A cgroup or base name: one non-empty component, at most 128 bytes, not
 * "." or "..", no newline (cgroup_layout.c). */
bool wr_cg_valid_name(const char *s);

struct wr_cg_hier {
	unsigned ctrls; /* bits (1u << enum wr_cg_ctrl) */
	int base_fd;	/* O_PATH: <own>/<base> */
	char *path;	/* the same, for messages */
	char label[64]; /* "memory", "cpu,cpuacct" */
};

struct wr_cgroup_root {
	enum wr_cgroup_mode mode;
	char *base;
	int nhier;
	struct wr_cg_hier hier[WR_CG_NCTRL];
	int ctrl_hier[WR_CG_NCTRL]; /* index into hier[], -1: not mounted */
	unsigned default_hiers;	    /* hier[] indexes every cgroup gets */
	int v2_base_fd;		    /* O_PATH: <own v2>/<base>; -1: none */
	char *v2_path;
	unsigned v2_ctrls; /* v2 mode: WR_CG2_* enabled for sandboxes */
	/* layout v2_skip_absent_limits (tests only) */
	bool v2_emulated;
};

struct wr_cgroup {
	struct wr_cgroup_root *root;
	char *name; /* last component */
	char *rel;  /* relative to the base: "name" or "name/leaf" */
	bool leaf;
	unsigned hiers;	     /* hier[] indexes this cgroup has a directory in */
	int fd[WR_CG_NCTRL]; /* per hier index, O_PATH|O_DIRECTORY; -1: none */
	int v2_fd;	     /* O_RDONLY|O_DIRECTORY (usable by clone3); -1: none */
	/* A command leaf (wr_cgroup_create_cmd_leaf): per hier index without a
	 * directory of its own, the parent's directory (O_PATH), which its
	 * processes join instead; -1 otherwise. */
	int up_fd[WR_CG_NCTRL];
	char **children; /* leaves created through this handle */
	size_t nchildren;
	/* Counters of leaves already removed (wr_cgroup_retire_leaf), which
	 * wr_cgroup_stats adds; the lock orders a retirement (record, rmdir,
	 * add) against a read of the subtree plus these. */
	pthread_mutex_t retire_lock;
	struct wr_cgroup_stats retired;
	/* A recycled leaf (wr_cgroup_leaf_recycle): its CPU time and OOM kills
	 * when it was made ready again, which wr_cgroup_stats_call and
	 * wr_cgroup_cpu_ns subtract; v2: memory.peak opened and reset then,
	 * read through this fd (the reset is per open file); -1 otherwise. */
	uint64_t base_cpu_ns, base_oom_kills;
	int peak_fd;
};

/* Write val to dfd/file; 0 or -errno, no message. */
int wr_cg_try_write(int dfd, const char *file, const char *val);
/* The same with "cgroup <label>: write <file>=<val>: <strerror>". */
int wr_cg_write(int dfd, const char *label, const char *file, const char *val, wr_err *err);
/* Read a small file into buf (NUL-terminated); length or -errno. */
ssize_t wr_cg_read(int dfd, const char *file, char *buf, size_t size);
/* Read one number ("max" = UINT64_MAX); 0 or -errno. */
int wr_cg_read_u64(int dfd, const char *file, uint64_t *out);
/* Find "key N" on a line of buf; 0 or -ENOENT. */
int wr_cg_key_u64(const char *buf, const char *key, uint64_t *out);
/* Read "key N" from dfd/file; 0 or -errno (-ENOENT: no file or no key). */
int wr_cg_read_key(int dfd, const char *file, const char *key, uint64_t *out);
/* Call fn(pid) for every pid listed in dfd/file; count of pids or -errno. */
int wr_cg_for_each_pid(int dfd, const char *file, int (*fn)(pid_t pid, void *ctx), void *ctx);
/* Call fn(dirfd) for dfd and every descendant directory, depth-first,
 * parents before children. 0 or the first negative fn result / -errno. */
int wr_cg_walk(int dfd, int (*fn)(int dirfd, void *ctx), void *ctx);
/* wr_cg_walk over cg's directory dfd, or fn(dfd) alone when cg is a leaf:
 * nothing makes cgroups below a leaf (processes live there, and no sandbox
 * mounts a cgroup filesystem), so a leaf needs no directory scan. */
int wr_cg_walk_cg(const struct wr_cgroup *cg, int dfd, int (*fn)(int dirfd, void *ctx), void *ctx);
/* A leaf's own counters that its removal would lose (cgroup.h, retiring),
 * and the id of the directory they are in (its inode: the cgroup id);
 * cgroup_harvest.c. Missing files read 0. 0 or -errno. */
int wr_cg_leaf_counts(struct wr_cgroup *leaf, struct wr_cgroup_stats *c, uint64_t *id);
/* Sleep for us microseconds. */
void wr_cg_sleep_us(unsigned us);

/* ---- backends ------------------------------------------------------- */

/* v1: limits on every hierarchy the cgroup has. */
int wr_cg_v1_set_limits(struct wr_cgroup *cg, const struct wr_cgroup_limits *lim, wr_err *err);
/* v1 without unified: freeze, SIGKILL every task of the subtree, thaw;
 * repeat until nothing is left (bounded). */
int wr_cg_v1_kill(struct wr_cgroup *cg, wr_err *err);
/* SIGKILL every process listed in any v1 hierarchy of the subtree (no
 * freezing); number signalled or -errno. Destroy's last resort. */
int wr_cg_v1_kill_listed(struct wr_cgroup *cg);
int wr_cg_v1_freeze(struct wr_cgroup *cg, bool frozen, wr_err *err);
int wr_cg_v1_frozen(struct wr_cgroup *cg, wr_err *err);
int wr_cg_v1_nprocs(struct wr_cgroup *cg, wr_err *err);
int wr_cg_v1_stats(struct wr_cgroup *cg, struct wr_cgroup_stats *st, wr_err *err);

/* v2: controller delegation in dfd (cgroup.subtree_control), limits, and
 * the core interface files used by both v2 and hybrid roots. */
int wr_cg_v2_delegate(int dfd, const char *path, unsigned want, unsigned *enabled, wr_err *err);
int wr_cg_v2_set_limits(struct wr_cgroup *cg, const struct wr_cgroup_limits *lim, wr_err *err);
int wr_cg_v2_kill(struct wr_cgroup *cg, wr_err *err);
int wr_cg_v2_freeze(struct wr_cgroup *cg, bool frozen, wr_err *err);
int wr_cg_v2_frozen(struct wr_cgroup *cg, wr_err *err);
int wr_cg_v2_nprocs(struct wr_cgroup *cg, wr_err *err);
int wr_cg_v2_stats(struct wr_cgroup *cg, struct wr_cgroup_stats *st, wr_err *err);
/* Wait (bounded) until cgroup.events of dfd shows "key want"; 0, -ETIMEDOUT
 * or -errno. */
int wr_cg_v2_wait_event(int dfd, const char *key, uint64_t want, unsigned timeout_ms);

#endif
