/* The function tier: single sandboxed calls at about the cost of a fork.
 *
 * A pool is keyed by (image, language + preloaded modules, tenant): one
 * uid range of its own (calls of two tenants never share a uid), a pool
 * cgroup with the pool's limits, and a zygote: a small process in the pool's
 * namespaces (user, mount with the image root read-only, pid, ipc, uts, net
 * with loopback only). The zygote forks call slots ahead of the calls, each
 * in a leaf cgroup of its own (memory, pids, CPU time), with fresh tmpfs on
 * /tmp, /work and /dev/shm and its own pid, mount and IPC namespaces; a call
 * takes a slot, which confines itself (user, no_new_privs, Landlock,
 * rlimits, seccomp last) and runs. Results come from the host kernel: exit
 * status from the slot's pidfd, usage and OOM from its leaf. See
 * docs/ARCHITECTURE.md, "Function tier".
 *
 * The container tier must be initialised first (wr_container_init): pools
 * use its state dir (uid ranges), run dir (mountpoint) and cgroup base.
 */
#ifndef WARREN_TIERS_FUNCTION_H
#define WARREN_TIERS_FUNCTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "tiers/tier.h"

struct wr_function_config {
	const char *zygote_path;  /* the warren-zygote binary */
	const char *python_path;  /* interpreter inside Python images, default /usr/bin/python3 */
	unsigned spare_slots;	  /* slots kept forked ahead per pool, default 2 */
	unsigned max_spare_slots; /* grown with concurrency up to this, default 8 */
};
int wr_function_init(const struct wr_function_config *cfg, wr_err *err);

struct wr_function_pool_spec {
	const char *image;	    /* rootfs directory or EROFS file */
	const char *language;	    /* NULL/"" = native argv; "python" */
	const char *const *preload; /* modules imported by the zygote (python) */
	size_t n_preload;
	const char *tenant;    /* owner; pools of two tenants share nothing */
	uint64_t memory_bytes; /* all calls of the pool together, default 2 GiB */
	uint64_t pids;	       /* all calls together, default 4096 */
	uint64_t tmp_bytes;    /* each tmpfs of a call, default 64 MiB */
};

struct wr_call_file {
	const char *path; /* relative to the working dir, no ".." */
	const void *data;
	size_t len;
	uint32_t mode; /* default 0644 */
};

struct wr_call_spec {
	const char *const *argv;     /* native: the command (PATH lookup inside) */
	const char *code;	     /* python: source to run (or argv[0] = a file) */
	size_t code_len;	     /* 0: strlen(code) */
	const struct wr_env_kv *env; /* the call's whole environment besides PATH/HOME */
	size_t n_env;
	const void *stdin_data;
	size_t stdin_len;
	const struct wr_call_file *files;
	size_t n_files;
	uint64_t timeout_ms;   /* wall clock, default 10 s, max 1 h */
	uint64_t memory_bytes; /* this call, default 256 MiB */
	uint64_t cpu_time_ms;  /* CPU time, default = timeout; RLIMIT_CPU + the leaf's usage */
	uint64_t pids;	       /* this call's processes, default 64 */
	uint64_t fsize;	       /* RLIMIT_FSIZE, default 64 MiB */
	uint64_t nofile;       /* RLIMIT_NOFILE, default 256 */
	uint64_t output_cap;   /* per stream, default 1 MiB */
	/* Optional: wr_exec_ctl_kill from another thread kills the call (its
	 * reason becomes KILLED; before the start it never runs). */
	struct wr_exec_ctl *ctl;
};

/* reason: EXITED, SIGNALED, TIMEOUT (wall clock), CPU_TIME (cpu_time
 * exceeded), OOM, KILLED (wr_function_pool kill/destroy), START_FAILED. */
struct wr_call_result {
	enum wr_exit_reason reason;
	int exit_code; /* 0..255, or 128+signal */
	int signal;
	char *out, *err; /* NUL-terminated */
	size_t out_len, err_len;
	bool out_truncated, err_truncated;
	uint64_t duration_ns;
	uint64_t cpu_ns;      /* from the call's cgroup */
	uint64_t memory_peak; /* bytes, from the call's cgroup */
};
void wr_call_result_free(struct wr_call_result *r);

/* A module name a Python pool may preload: 1 to 200 of [A-Za-z0-9_.]. */
bool wr_function_module_name_ok(const char *m);

struct wr_function_pool;

/* Start a pool (its zygote runs when this returns). Errors name the field. */
int wr_function_pool_create(const struct wr_function_pool_spec *spec, struct wr_function_pool **out,
			    wr_err *err);
/* Kill every call and the zygote, remove the cgroups, free the uid range.
 * No call may be in flight on the pool (the caller stops them first). */
int wr_function_pool_destroy(struct wr_function_pool **pool, wr_err *err);
/* Thread-safe: any number of concurrent calls on one pool. A failure of
 * the zygote itself (it crashed: the pool starts a new one for the next
 * call) is an error (ECHILD), not a result. */
int wr_function_call(struct wr_function_pool *pool, const struct wr_call_spec *spec,
		     struct wr_call_result *res, wr_err *err);
/* n calls in parallel (up to `parallel` at once, 0 = n); results in order.
 * Each result has its own outcome: errs[i] (may be NULL) gets a call's
 * error, res[i] is zeroed for it. Returns the number of calls that failed. */
int wr_function_call_batch(struct wr_function_pool *pool, const struct wr_call_spec *specs,
			   size_t n, unsigned parallel, struct wr_call_result *res, wr_err *errs);

/* The function tier behind wr_tier_ops (wr_tier_lookup("function") once
 * wr_function_init ran): a sandbox is one call on a pool of the tier's own
 * (keyed by image and limits), made by create, run by its one exec. What a
 * call cannot offer is refused naming the field: fs (no filesystem outlives
 * a call), pty, a second exec, layers, capabilities, cpu limits. */
extern const struct wr_tier_ops wr_function_tier;
/* Destroy the pools of wr_function_tier (their zygotes, cgroups, uid ranges). */
void wr_function_tier_cleanup(void);

/* Pool state, for tests and the daemon's pool manager. */
/* The pool's id ("fn-..."): the owner named by its uid range, which the
 * refusal audit maps its calls' kernel records to. */
const char *wr_function_pool_id(const struct wr_function_pool *pool);
pid_t wr_function_pool_zygote_pid(struct wr_function_pool *pool); /* 0 when none runs */
uint64_t wr_function_pool_idle_ns(struct wr_function_pool *pool);
unsigned wr_function_pool_restarts(struct wr_function_pool *pool);
/* Leaf cgroups of its slots: made (mkdir) and reused (a finished call's,
 * recycled) since the pool's creation. */
void wr_function_pool_leaf_counts(struct wr_function_pool *pool, uint64_t *made, uint64_t *reused);
/* Stop the zygote of an idle pool (the next call starts a new one). */
int wr_function_pool_park(struct wr_function_pool *pool, wr_err *err);

/* A set of pools keyed by (image, language, preload, tenant): get-or-create
 * on first use, reap idle ones. Thread-safe. */
struct wr_function_pools;
int wr_function_pools_new(struct wr_function_pools **out, wr_err *err);
/* Borrowed pointer, valid until wr_function_pools_free. */
int wr_function_pools_get(struct wr_function_pools *set, const struct wr_function_pool_spec *spec,
			  struct wr_function_pool **out, wr_err *err);
/* Park zygotes idle for longer than idle_ms. Returns how many. */
int wr_function_pools_reap(struct wr_function_pools *set, uint64_t idle_ms);
void wr_function_pools_free(struct wr_function_pools **set);

/* Benchmark instrumentation: where the time of this process's calls goes.
 * Measured only when WARREN_FN_PHASES is set in the environment at the
 * first call (otherwise each phase costs one load of a flag). Sums since
 * the start, ns: the phases of a call's wall time in order (take a slot,
 * wait for its PREPARED, limits + pipes + CALL sent, until the slot exited,
 * output drained, exit status, usage read, slot handed back), and the CPU
 * time the refill threads spent on leaves (made and removed, off the path
 * of the calls) and the CPU time of destroyed pools' cgroups. */
enum wr_fn_phase {
	WR_FN_PH_TAKE,
	WR_FN_PH_PREPARED,
	WR_FN_PH_SEND,
	WR_FN_PH_RUN,
	WR_FN_PH_DRAIN,
	WR_FN_PH_STATUS,
	WR_FN_PH_STATS,
	WR_FN_PH_DONE,
	WR_FN_PH_REFILL_CPU,
	WR_FN_PH_POOL_CPU, /* the pools' cgroups: zygotes, slots, calls (at destroy) */
	WR_FN_NPHASES
};
struct wr_fn_phases {
	uint64_t calls;
	uint64_t unprepared; /* calls that took a slot still preparing */
	uint64_t ns[WR_FN_NPHASES];
};
void wr_function_phases(struct wr_fn_phases *out);
const char *wr_function_phase_name(enum wr_fn_phase ph);

#endif
