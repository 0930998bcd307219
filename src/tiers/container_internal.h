/* Shared between container.c (create/destroy) and exec.c (commands). */
#ifndef WARREN_TIERS_CONTAINER_INTERNAL_H
#define WARREN_TIERS_CONTAINER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "isolate/cgroup.h"
#include "isolate/idmap.h"
#include "isolate/landlock.h"
#include "isolate/rlimit.h"
#include "isolate/seccomp.h"
#include "tiers/container.h"

struct wr_container_globals {
	char *state_dir;
	char *run_dir;
	char *mountpoint; /* <run_dir>/root: the (empty) target dir in every sandbox's mount ns */
	char *init_path;
	struct wr_cgroup_root *cgroot;
	/* One network namespace (loopback only, held open) whose read-only
	 * sysfs every offline sandbox gets a clone of as /sys: a sysfs
	 * superblock per sandbox would cost memory in every memory cgroup of
	 * the node (docs/ARCHITECTURE.md, "Mount table of a container
	 * sandbox"). */
	int offline_netns, offline_sysfs;
	bool ready;
};
extern struct wr_container_globals wr_cg_globals;

/* A leaf cgroup of a finished command whose background processes still
 * run; removed once empty or at destroy. */
struct wr_leaf {
	struct wr_cgroup *cg;
	struct wr_leaf *next;
};

struct wr_sandbox {
	char id[65];
	struct wr_idmap idmap;
	struct wr_cgroup *cg;	   /* sandbox cgroup: the limits */
	struct wr_cgroup *init_cg; /* leaf of PID 1 */
	pid_t init_pid;		   /* host pid of warren-init */
	int init_pidfd;
	int root_fd; /* O_PATH of the sandbox root, for file operations */

	/* defaults for commands */
	uid_t user;
	gid_t group;
	uint64_t caps;
	struct wr_rlimits rlimits;
	char *workdir;
	char **env; /* "K=V", NULL-terminated */
	size_t n_env;

	bool adopted; /* PID 1 is not our child (daemon restart) */
	atomic_uint cmd_seq;
	atomic_bool killed;
	pthread_mutex_t leaves_lock;
	struct wr_leaf *leaves;
	/* The sandbox's /proc and devpts are mounted before its first
	 * command and given back while idle (container_mounts.c); the lock
	 * serialises the mounts and the release. */
	pthread_mutex_t devpts_lock;
	atomic_bool devpts;
	/* container_ckpt.c: the checkpoint being made is the sandbox's first
	 * (no earlier one left its layer pinned) */
	bool ckpt_first;
	/* wr_container_load_procs: a snapshot's tree restored and left
	 * stopped until the tier's start */
	bool procs_stopped;
	/* Commands counted from before the mounts they need until they end
	 * (exec.c): an idle sandbox gives its /proc and devpts back only
	 * while none runs (wr_container_idle_release). */
	atomic_uint cmds;
};

/* container.c, for container_adopt.c: a new handle (no fd, no process:
 * NULL when out of memory), a handle's memory freed (nothing else), the
 * spec's env copied into it, a spec checked and defaulted. */
struct wr_sandbox *wr_container_sandbox_alloc(void);
void wr_container_sandbox_free(struct wr_sandbox *sb);
int wr_container_copy_env(struct wr_sandbox *sb, const struct wr_sandbox_spec *spec, wr_err *err);
int wr_container_normalize(const struct wr_sandbox_spec *in, struct wr_sandbox_spec *s,
			   wr_err *err);

/* container_mounts.c: the shared offline network namespace and its
 * read-only sysfs (wr_container_globals), made at init. */
int wr_container_offline_sysfs(struct wr_container_globals *g, wr_err *err);
/* container_mounts.c: make sure the sandbox's /proc (with its masks) and
 * its own devpts on /dev/pts are mounted (once; later calls return at
 * once). Before any command or terminal. */
int wr_container_devpts(struct wr_sandbox *sb, wr_err *err);
/* container_life.c: one of the two fds PID 1 keeps (container.c): the
 * upper directory (readonly false) or the read-only devfs/ clone /proc's
 * masks come from; *fd a new O_RDONLY fd of it. */
int wr_container_init_fd(struct wr_sandbox *sb, bool readonly, int *fd, wr_err *err);

/* The Landlock policy of every command (exec.c), which a restore enters
 * again (container_ckpt.c). */
extern const struct wr_landlock_policy wr_container_cmd_landlock;

/* container_ckpt.c: a checkpoint's images and the mounts that keep the
 * suspended sandbox's file system (<state_dir>/ckpt/<id>,
 * <run_dir>/ckpt/<id>): whether one was published, and all of it removed
 * (nothing there is fine). */
bool wr_container_ckpt_exists(const char *id);
void wr_container_ckpt_drop(const char *id);
/* The same, but the writable layer's two pins stay (a restored sandbox's
 * lasting source of its upper directory and masks' source: the fds its
 * restored PID 1 holds are of mounts no clone can be made of). */
void wr_container_ckpt_done(const char *id);
/* A restored sandbox's pinned upper directory (a new O_RDONLY fd), or -1
 * when there is no such pin. */
int wr_container_ckpt_upper(struct wr_sandbox *sb);
/* Restored from a checkpoint (its layer pinned): its /proc and devpts stay
 * mounted while idle. They came back with the tree; mounted again, /proc's
 * masks would be cloned from the masks' source, which a restored PID 1
 * holds as a mount no clone can be made of, and which a pin cannot stand
 * for (a process of the sandbox may clone only detached mounts owned by
 * its own user namespace). */
bool wr_container_ckpt_restored(const char *id);
/* SIGCONT to every task of a restored tree (left stopped by the restore). */
int wr_container_ckpt_continue(struct wr_sandbox *sb, wr_err *err);
/* An O_PATH fd of the kept root of a suspended sandbox, or -1. */
int wr_container_ckpt_root(const char *id);
/* Checkpoints of sandboxes keep() does not know are dropped. */
void wr_container_ckpt_sweep(bool (*keep)(const char *id, void *ctx), void *ctx);

/* Stacks for children that run in our memory until they exec (PID 1 of a
 * create; the helper and the command of an exec): WR_SPAWN_STACK bytes,
 * the top of the range is the top of the stack. One per thread is kept
 * for its next spawn, so its pages are already faulted in. Put a stack
 * back only once no child runs on it any more. NULL (errno set) on
 * failure. */
#define WR_SPAWN_STACK (512 * 1024)
char *wr_spawn_stack_get(void);
void wr_spawn_stack_put(char *stack);

/* container_images.c: the image's base mount, counted (give it back
 * with wr_cimage_put once the create holds its own clone); NULL and *err
 * on failure. */
struct image_entry {
	char *path;
	dev_t dev;
	ino_t ino;
	struct timespec mtime;
	int fd;
	unsigned users;
	struct image_entry *next;
};
struct image_entry *wr_cimage_get(const char *image, wr_err *err);
void wr_cimage_put(struct image_entry *e);

#endif
