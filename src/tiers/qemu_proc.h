/* One QEMU process, jailed, for both VM tiers (microvm.c, vm.c): spawn,
 * stop, adoption by a restarted daemon, clean-up. Firecracker's jailer,
 * applied to QEMU:
 *
 *   - its own uid and gid (WR_QEMU_UID_BASE + slot), set by warrend's child
 *     before exec (setgroups, setresgid, setresuid, every capability set and
 *     the bounding set emptied, no_new_privs), so QEMU's own seccomp filter
 *     can deny every set*id call (elevateprivileges=deny);
 *   - its own mount, PID (it is PID 1 there), network, IPC and UTS
 *     namespaces (clone3), its own cgroup vm-<id> (memory, CPU, pids) under
 *     the tier's base, leaf "q";
 *   - pivoted into <dir>/root, an empty read-only directory holding the
 *     mount points of what QEMU opens by path and nothing else: the host's
 *     /usr read-only (QEMU is dynamically linked: ld.so, its libraries and
 *     its firmware under /usr/share), the files a tier binds in (kernel,
 *     initramfs, a RAM file) and /dev/kvm when KVM is used. Those mounts
 *     exist only in QEMU's mount namespace: they die with it, the host never
 *     sees them;
 *   - fds passed as 3, 4, ... in order, stdin and stdout /dev/null, stderr
 *     its log; every other fd closed (close_range).
 *
 * What a restarted daemon needs to find a QEMU again is in <dir>/vm.json
 * (written atomically once QEMU runs): pid, start time (clock ticks since
 * boot: with the pid it names one process for good), uid, plus what the
 * tier adds. */
#ifndef WARREN_TIERS_QEMU_PROC_H
#define WARREN_TIERS_QEMU_PROC_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

/* QEMU uids: above the container tier's ranges (src/isolate/idmap.h:
 * 0x10000000 up to 0x50000000), one per live QEMU of this daemon. */
#define WR_QEMU_UID_BASE 0x50000000u
#define WR_QEMU_UID_SLOTS 65536u
/* The group of files every QEMU may open by path once they are bound into
 * its jail (template RAM files): no file outside a jail is reachable. */
#define WR_QEMU_GID (WR_QEMU_UID_BASE - 1u)

/* TCG's translation cache, in MiB. QEMU 7.2's default is 1 GiB on a 64-bit
 * host, which a busy guest fills: with the cgroup's margin below guest RAM
 * + 256 MiB the vm tier's QEMU was OOM-killed by its own cgroup while a
 * Debian guest ran `find`. Both tiers pass `-accel tcg,tb-size=` this, and
 * the cgroup counts it (wr_qemu_spawn). */
#define WR_QEMU_TCG_TB_MIB 128u

struct wr_cgroup;

struct wr_qemu {
	pid_t pid;
	int pidfd;
	uid_t uid;		     /* 0: none allocated */
	uint64_t start_ticks;	     /* /proc/<pid>/stat field 22 */
	bool child;		     /* ours to reap (else adopted) */
	struct wr_cgroup *cg, *leaf; /* vm-<id> and its leaf "q" */
	char *dir;		     /* the VM's private directory */
};

/* A file bound into the jail at /<name> (read-only unless rw): the file
 * open at fd, or (fd < 0) at the path src. name may have one directory
 * ("etc/resolv.conf"), made in the jail too. */
struct wr_qemu_file {
	const char *src;
	int fd;
	const char *name;
	bool rw;
};

struct wr_qemu_spawn {
	const char *id;	   /* the VM's id: cgroup vm-<id> */
	char *const *argv; /* argv[0]: QEMU, under /usr */
	const int *fds;	   /* become 3, 4, ...; -1 leaves a hole */
	size_t n_fds;
	int log_fd; /* stderr */
	const struct wr_qemu_file *files;
	size_t n_files;
	bool kvm;
	uint64_t memory_bytes; /* guest RAM: the cgroup adds QEMU's own */
	unsigned cpus;
	/* QEMU gets SIGKILL when the thread that spawned it ends (no daemon
	 * to adopt it later: tests, one-shot front ends) */
	bool die_with_parent;
	/* > 0: fd + 1 of a network namespace QEMU joins (a networked
	 * sandbox's, see qemu_net.h) instead of an empty one of its own */
	int netns_fd1;
};

/* Once per process: the cgroup base (<own cgroup>/<base>) of every QEMU.
 * Later calls with another base fail (one base per process). */
int wr_qemu_init(const char *cgroup_base, wr_err *err);
/* A uid of its own and the directory (made 0700 here, EEXIST if there). */
int wr_qemu_prepare(struct wr_qemu *q, const char *dir, wr_err *err);
/* Starts QEMU jailed. q->pid, pidfd, start_ticks set on success. */
int wr_qemu_spawn(struct wr_qemu *q, const struct wr_qemu_spawn *s, wr_err *err);
/* Waits up to grace_ms for QEMU to exit (the caller asked it to: QMP quit,
 * ACPI), then SIGKILL; waits for its end (reaps our own child). */
void wr_qemu_stop(struct wr_qemu *q, int grace_ms);
/* SIGKILL now (through the pidfd); 0 or -errno. */
int wr_qemu_kill(struct wr_qemu *q);
/* After stop: removes the cgroup, the jail and every file in the VM's
 * directory and the directory itself; frees the uid. */
void wr_qemu_release(struct wr_qemu *q);

/* <dir>/vm.json := {"pid", "start", "uid"} + the members of extra
 * (borrowed), written to a temporary file, fsync'd and renamed. */
int wr_qemu_save(const struct wr_qemu *q, json_t *extra, wr_err *err);
/* Ordering invariant (warrend's start): every adoption, then the sweep,
 * then the first spawn. The uid slots of a previous process's QEMUs are
 * known only once adopted (or swept): a spawn before could pick the uid of
 * a QEMU still running, and its adoption would then be refused (EEXIST).
 *
 * Finds the QEMU of <dir>/vm.json again: the pid must name the same
 * process (start time), run as the recorded uid, and (pid_hint > 0) be the
 * pid the daemon recorded. Opens its pidfd and cgroup, takes its uid slot.
 * *state gets the whole file (new ref). On failure q holds what it could
 * open (release it after a kill). */
int wr_qemu_adopt(struct wr_qemu *q, const char *id, const char *dir, pid_t pid_hint,
		  json_t **state, wr_err *err);
/* For each entry of run_dir (a VM directory) whose id keep() refuses: kills
 * its QEMU (found through vm.json or its cgroup), removes the cgroup and
 * the files. Also removes vm-<id> cgroups left without a directory. keep
 * NULL: everything goes. Returns how many VMs were removed. */
size_t wr_qemu_sweep(const char *run_dir, bool (*keep)(const char *id, void *ctx), void *ctx);
/* A listening Unix socket <dirfd>/<name> for a QEMU chardev
 * (socket,fd=N,server=on,wait=off): QEMU accepts one client at a time, and
 * a restarted daemon connects again. Paths go through /proc/self/fd, so a
 * long directory name does not overflow sun_path. */
int wr_qemu_listen(int dirfd, const char *name, wr_err *err);
int wr_qemu_connect(int dirfd, const char *name, wr_err *err);
/* Start time of pid (clock ticks), 0 when there is no such process. */
uint64_t wr_qemu_start_ticks(pid_t pid);

#endif
