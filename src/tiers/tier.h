/* One struct of operations behind which every isolation tier sits.
 * The daemon and the CLI talk to tiers only through this. */
#ifndef WARREN_TIERS_TIER_H
#define WARREN_TIERS_TIER_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"
#include "isolate/caps.h"
#include "isolate/cgroup.h"
#include "tiers/fsops.h"

#define WR_DEFAULT_OUTPUT_CAP (16ull << 20) /* bytes per stream */
#define WR_MAX_LAYERS 16		    /* lower layers of a sandbox's rootfs */

struct wr_env_kv {
	const char *key;
	const char *value;
};

/* A network namespace for a sandbox to join instead of a private one with
 * only loopback (see isolate/netpool.h). Borrowed for the create only. */
struct wr_sandbox_net {
	int netns_fd;		 /* PID 1 is cloned into this namespace */
	int sysfs_fd;		 /* a detached read-only sysfs mount of it */
	const char *resolv_conf; /* content of /etc/resolv.conf, or NULL */
	const char *hosts;	 /* content of /etc/hosts, or NULL */
};

/* What a caller asks for when creating a sandbox. Zero/NULL means default. */
struct wr_sandbox_spec {
	const char *image; /* rootfs directory or EROFS image file: one layer */
	/* Or a stack of lower layers (n_layers > 0, image NULL), base first,
	 * each a directory or an EROFS file; a later layer shadows the earlier
	 * ones, and its whiteouts (0/0 character devices) hide their files. At
	 * most WR_MAX_LAYERS. The writable layer goes on top. */
	const char *const *layers;
	size_t n_layers;
	uint64_t memory_bytes;	     /* default 512 MiB */
	uint64_t disk_bytes;	     /* writable layer quota, default 1 GiB */
	uint64_t disk_inodes;	     /* default disk_bytes / 4096, capped at 1,000,000 */
	uint64_t pids;		     /* default 512 */
	double cpus;		     /* cpu.max in CPUs, 0 = no max */
	uint64_t cpu_weight;	     /* 1..10000, default 100 */
	uint64_t nofile;	     /* RLIMIT_NOFILE for commands, default 1024 */
	const char *hostname;	     /* default: the sandbox id */
	uid_t user;		     /* default uid inside for commands (0) */
	gid_t group;		     /* default gid inside (= user) */
	enum wr_capset capset;	     /* WR_CAPSET_NONE unless asked */
	const char *workdir;	     /* default "/" */
	const struct wr_env_kv *env; /* default env for commands */
	size_t n_env;
	const char *id;	      /* fixed id (daemon); NULL = random */
	bool die_with_parent; /* one-shot front ends: the sandbox dies with us */
	/* NULL: a private network namespace with loopback only (offline). */
	const struct wr_sandbox_net *net;
	/* VM tiers: start from this saved VM (a directory of qemu_snap.h)
	 * instead of a boot; its sizes are the saved ones. The container
	 * tier: start from the processes saved there (tier op save_procs). */
	const char *restore;
	/* the vm tier: "bios" (NULL) or "uefi" (the image's), and a VNC
	 * endpoint (never unless asked for) */
	const char *firmware;
	bool vnc;
};

/* The steps of a pause that frees the sandbox's memory (tier op suspend),
 * in the daemon's order: SAVE (state on disk, the VM stopped), the record
 * committed, END (its process gone); or UNDO (the record could not be
 * committed: the VM runs again, the saved state goes). Resume: LOAD (a
 * new process with the state loaded, stopped), the record committed, RUN;
 * or UNLOAD (not committed: the new process goes, the saved state stays). */
enum wr_suspend_step {
	WR_SUSPEND_SAVE,
	WR_SUSPEND_END,
	WR_SUSPEND_UNDO,
	WR_SUSPEND_LOAD,
	WR_SUSPEND_RUN,
	WR_SUSPEND_UNLOAD,
};

/* Control of a running command from other threads (optional, see
 * wr_exec_spec.ctl). Initialise before exec, destroy after it returned. */
struct wr_exec_ctl {
	pthread_mutex_t lock;
	struct wr_cgroup *leaf; /* the command's cgroup while it exists */
	int pidfd;		/* the command's pidfd while it runs (the tier's), else -1 */
	bool kill;		/* a kill was requested */
	/* Tiers whose commands have no host process (a VM's guest runs
	 * them): an eventfd, readable once the command ended, that
	 * wr_exec_ctl_pidfd hands out (a dup) instead of a pidfd; -1 else. */
	int done_fd;
};
void wr_exec_ctl_init(struct wr_exec_ctl *c);
void wr_exec_ctl_destroy(struct wr_exec_ctl *c);
/* Kill the command's whole process tree now, or as soon as it would start
 * (a kill before the start means it never runs); its result's reason
 * becomes WR_EXIT_KILLED. Safe from any thread at any time. */
int wr_exec_ctl_kill(struct wr_exec_ctl *c);
/* A pidfd of the running command, or -ESRCH. */
int wr_exec_ctl_pidfd(struct wr_exec_ctl *c);
/* The command's pid inside the sandbox, or 0 when it does not run. */
pid_t wr_exec_ctl_ns_pid(struct wr_exec_ctl *c);

/* A command to run in a sandbox. */
struct wr_exec_spec {
	const char *const *argv;     /* argv[0] is looked up in PATH inside */
	const struct wr_env_kv *env; /* added to (overriding) the sandbox env */
	size_t n_env;
	const char *cwd;     /* default: sandbox workdir */
	int user;	     /* -1: sandbox default */
	int group;	     /* -1: sandbox default */
	uint64_t timeout_ms; /* 0 = none; kills the command's whole tree */
	uint64_t output_cap; /* per stream; 0 = WR_DEFAULT_OUTPUT_CAP */
	/* stdio: fds the command gets (-1 = /dev/null for stdin, captured
	 * through a pipe for stdout/stderr). Borrowed. */
	int stdin_fd;
	/* Streaming: called with chunks as they arrive (stream 1 or 2).
	 * Returning non-zero stops delivery (the command keeps running). */
	int (*on_output)(void *ctx, int stream, const char *buf, size_t len);
	void *ctx;
	/* Buffered: when on_output is NULL, output is collected in the result. */
	/* Interactive: the command gets a new pseudo-terminal of the sandbox's
	 * own devpts as its controlling terminal and stdio (stdin_fd and
	 * on_output are not used). on_pty receives the master side, a fd the
	 * callback then owns, once the command runs; the caller relays it and
	 * resizes with TIOCSWINSZ. exec returns when the command exits. */
	bool pty;
	unsigned short pty_rows, pty_cols; /* 0: 24 x 80 */
	void (*on_pty)(void *ctx, int master_fd);
	struct wr_exec_ctl *ctl; /* optional: kill and inspect from other threads */
};

enum wr_exit_reason {
	WR_EXIT_EXITED,	      /* ran to completion; see exit_code */
	WR_EXIT_SIGNALED,     /* killed by a signal it got (not by warren) */
	WR_EXIT_TIMEOUT,      /* warren killed it at its deadline */
	WR_EXIT_OOM,	      /* killed by the OOM killer in the sandbox's memory cgroup */
	WR_EXIT_KILLED,	      /* warren killed it on request (sandbox kill) */
	WR_EXIT_START_FAILED, /* exec failed: see exit_code 126/127 */
	WR_EXIT_CPU_TIME,     /* exceeded its CPU time limit (function tier) */
};
const char *wr_exit_reason_name(enum wr_exit_reason r);

struct wr_exec_result {
	enum wr_exit_reason reason;
	int exit_code;	 /* 0..255 when exited; 128+signal otherwise (shell style) */
	int signal;	 /* terminating signal, 0 if none */
	char *out, *err; /* buffered output (NUL-terminated), when not streaming */
	size_t out_len, err_len;
	bool out_truncated, err_truncated;
	uint64_t duration_ns;
	uint64_t cpu_ns;      /* from the command's cgroup */
	uint64_t memory_peak; /* bytes, from the command's cgroup */
};
void wr_exec_result_free(struct wr_exec_result *r);

struct wr_sandbox; /* opaque */

struct wr_tier_ops {
	const char *name;
	/* Why the tier offers no interactive terminal (the pty route answers
	 * 501 with it before any upgrade); NULL when exec takes spec->pty. */
	const char *no_pty;
	int (*create)(const struct wr_sandbox_spec *spec, struct wr_sandbox **out, wr_err *err);
	int (*exec)(struct wr_sandbox *sb, const struct wr_exec_spec *spec,
		    struct wr_exec_result *res, wr_err *err);
	/* Borrowed view for file operations. */
	int (*fs)(struct wr_sandbox *sb, struct wr_fs *out, wr_err *err);
	int (*kill)(struct wr_sandbox *sb, wr_err *err);
	/* Pause (frozen) or resume every process of the sandbox, running
	 * commands included; idempotent, bounded (5 s). A paused sandbox can
	 * still be killed and destroyed. NULL: the tier cannot pause. */
	int (*freeze)(struct wr_sandbox *sb, bool frozen, wr_err *err);
	/* 1 when a pause is asked of the sandbox (also one a crash cut short),
	 * 0 when not, negative on error. */
	int (*frozen)(struct wr_sandbox *sb, wr_err *err);
	/* CPU time and memory of the whole sandbox (its cgroup). */
	int (*usage)(struct wr_sandbox *sb, struct wr_cgroup_stats *st, wr_err *err);
	/* CPU harvesting (the daemon's sampler, harvest.c); NULL: the tier
	 * does not take part. CPU time used so far, cheap (one read). */
	int (*cpu_time)(struct wr_sandbox *sb, uint64_t *ns, wr_err *err);
	/* CPU share: weight 1..10000 (0: the lowest), idle: SCHED_IDLE-like
	 * where the kernel can (wr_cgroup_cpu_share); 1 when idle was set. */
	int (*cpu_share)(struct wr_sandbox *sb, uint64_t weight, bool idle, wr_err *err);
	/* Memory of an idle sandbox reclaimed first (wr_cgroup_idle_memory):
	 * bytes reclaimed now, or negative. */
	int64_t (*idle_memory)(struct wr_sandbox *sb, bool idle, wr_err *err);
	/* What an idle sandbox holds for commands only, given back (a
	 * container's /proc and devpts: superblocks); the next command takes
	 * it again. 1 released, 0 nothing to give back. NULL: none. */
	int (*idle_release)(struct wr_sandbox *sb, wr_err *err);
	/* The writable layer's upper directory as the host sees it (overlay
	 * whiteouts and user.overlay.* xattrs included): an O_RDONLY directory
	 * fd the caller closes, and the host id that is 0 inside. NULL: the
	 * tier has no such layer (no snapshots). */
	int (*upper)(struct wr_sandbox *sb, int *fd, uid_t *id_base, wr_err *err);
	/* A pause that frees the memory (steps above); NULL: the tier keeps
	 * paused sandboxes in memory only. While suspended, main_pid is 0,
	 * frozen is 1 and kill has nothing to kill. */
	int (*suspend)(struct wr_sandbox *sb, enum wr_suspend_step step, wr_err *err);
	/* The sandbox's whole state (VM tiers: qemu_snap.h's directory, the
	 * disk compacted) saved into the new directory dir; a running sandbox
	 * runs again after, a paused one stays paused. *meta: its meta.json.
	 * NULL: the tier has no such snapshots. */
	int (*save)(struct wr_sandbox *sb, const char *dir, json_t **meta, wr_err *err);
	/* The sandbox's processes (container tier: CRIU images) saved into the
	 * new directory dir, for a snapshot with processes; the sandbox is
	 * left as it was (running or paused). A create whose spec->restore
	 * names such a directory starts from those processes (left stopped
	 * until start). NULL: the tier has no such snapshots. */
	int (*save_procs)(struct wr_sandbox *sb, const char *dir, wr_err *err);
	/* Kill everything, release every resource, free sb. */
	int (*destroy)(struct wr_sandbox **sb, wr_err *err);
	/* The host process whose exit means the sandbox is dead (container:
	 * PID 1; microVM: QEMU); the daemon watches its pidfd. */
	pid_t (*main_pid)(const struct wr_sandbox *sb);
	/* The sandbox's cgroup in the v2 hierarchy (a directory fd the tier
	 * keeps), where the daemon attaches the network filter; -1: none.
	 * NULL: the tier has no network (the container tier's is
	 * wr_sandbox_cgroup_v2_fd). A tier with it takes spec->net. */
	int (*cgroup_v2_fd)(const struct wr_sandbox *sb);
	/* A published port: connections to the sandbox's address (addr, its
	 * namespace's) on port reach port inside (add) or no longer do.
	 * NULL: nothing to do (a container listens in that namespace itself;
	 * a VM's guest is behind QEMU's user-mode network). */
	int (*port)(struct wr_sandbox *sb, const char *addr, unsigned port, bool add, wr_err *err);
	/* A new network namespace for the next start of the sandbox's
	 * process (the tier dups what it keeps): a VM suspended to disk across
	 * a daemon restart lost its namespace with the previous daemon.
	 * NULL: the tier never starts its process again. */
	int (*set_net)(struct wr_sandbox *sb, const struct wr_sandbox_net *net, wr_err *err);
	/* After create and the network filter's attach, before the record:
	 * runs what create left stopped (a VM restored from a snapshot, whose
	 * processes may use the network at once). NULL: nothing to run. */
	int (*start)(struct wr_sandbox *sb, wr_err *err);
	/* Finds a sandbox a previous daemon left running again (spec from its
	 * record, pid its recorded main_pid); one that cannot be adopted is
	 * killed and cleaned. NULL: the daemon's own path (container).
	 * pid 0 (tiers with suspend): a sandbox recorded as suspended, whose
	 * saved state is found again (a process a crash left is killed). */
	int (*adopt)(const struct wr_sandbox_spec *spec, pid_t pid, struct wr_sandbox **out,
		     wr_err *err);
};

const struct wr_tier_ops *wr_tier_lookup(const char *name);
/* For tiers outside the core library: make ops findable by its name. */
void wr_tier_register(const struct wr_tier_ops *ops);

/* For tier implementations: base ("K=V" strings) with kv added, a key given
 * again replacing the earlier value. Keys must be non-empty without '='
 * (error names the field "env"). Returns a NULL-terminated malloc'd array
 * (count in *n) or NULL; free with wr_env_free. */
char **wr_env_merge(const char *const *base, size_t nbase, const struct wr_env_kv *kv, size_t nkv,
		    size_t *n, wr_err *err);
void wr_env_free(char **env);

/* For tiers that keep a sandbox's defaults themselves (the VM tiers): *out
 * is *in with the sandbox's env first and the command's after it (later
 * wins), and cwd, user and group defaulted. *env_owned (free it after the
 * exec) holds the merged env array; the strings stay borrowed. */
int wr_exec_spec_defaults(const struct wr_exec_spec *in, const struct wr_env_kv *env, size_t n_env,
			  const char *workdir, int user, int group, struct wr_exec_spec *out,
			  struct wr_env_kv **env_owned, wr_err *err);

#endif
