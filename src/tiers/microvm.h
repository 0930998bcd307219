/* The microVM tier's core: one QEMU `microvm` machine per sandbox, its
 * guest running warren-agent (src/agent/guest) behind a virtio-serial port.
 *
 *   create: writable disk (sparse copy of a formatted ext4 template) →
 *           socketpairs for the agent, QMP and the console → fork+exec QEMU
 *           with every file it uses passed as an fd (-add-fd, chardev fd=)
 *           under -sandbox on,spawn=deny,... → HELLO from the agent
 *           (boot timeout) → QMP capabilities → reader thread
 *   exec:   EXEC frame → STDIN frames from stdin_fd → STDOUT/STDERR/EXIT
 *           frames demultiplexed by command id; the host keeps its own
 *           deadline (timeout + grace) and its own wall clock
 *   destroy: QMP quit, SIGKILL after a grace, reap, remove the VM's files
 *
 * What the agent reports (exit codes, output) is guest-reported; QEMU's
 * exit, wall time and deadlines are observed here. A guest that sends a
 * malformed frame loses its channel (the VM is marked broken), never the
 * daemon. */
#ifndef WARREN_TIERS_MICROVM_H
#define WARREN_TIERS_MICROVM_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "tiers/tier.h"

struct wr_microvm_config {
	const char *qemu;      /* default: qemu-system-x86_64 from PATH */
	const char *kernel;    /* vmlinux (scripts/mkguest.sh) */
	const char *initrd;    /* initramfs.cpio with warren-agent as /init */
	const char *state_dir; /* disk templates under <state>/microvm */
	const char *run_dir;   /* per-VM files under <run>/microvm/<id> */
	const char *accel;     /* "auto" (default), "kvm" or "tcg" */
	/* VM templates (guest RAM files: tmpfs belongs here); NULL:
	 * <run>/microvm-templates; "" turns templates off */
	const char *template_dir;
	/* each QEMU's cgroup is <own cgroup>/<base>/vm-<id> in every
	 * hierarchy (warrend: the container tier's base); default
	 * "warren-microvm" */
	const char *cgroup_base;
	/* QEMU outlives this process (warrend: the next start adopts it,
	 * wr_vm_adopt); false: it gets SIGKILL when the creating thread ends */
	bool adoptable;
};
int wr_microvm_init(const struct wr_microvm_config *cfg, wr_err *err);
/* "kvm" or "tcg": what creates use (auto resolves at init). */
const char *wr_microvm_accel(void);

struct wr_vm_spec {
	const char *image;	  /* EROFS file; NULL: the initramfs is the root */
	uint64_t memory_bytes;	  /* default 256 MiB */
	uint64_t disk_bytes;	  /* writable disk, default 1 GiB */
	unsigned cpus;		  /* default 1 */
	const char *id;		  /* default: random */
	uint64_t boot_timeout_ms; /* default 60 s (TCG on a loaded host) */
	bool cold;		  /* boot, never restore from a template */
	/* a NIC (user-mode networking in net's namespace, qemu_net.h);
	 * NULL: no NIC at all */
	const struct wr_qemu_net *net;
};

struct wr_vm;
struct wr_qemu_net;

int wr_vm_create(const struct wr_vm_spec *spec, struct wr_vm **out, wr_err *err);
/* Runs a command (argv, env, cwd, user, group, timeout_ms, output_cap,
 * stdin_fd, on_output and ctl's kill of wr_exec_spec; no pty yet:
 * -ENOTSUP). Several threads may exec at once. */
int wr_vm_exec(struct wr_vm *vm, const struct wr_exec_spec *spec, struct wr_exec_result *res,
	       wr_err *err);
/* PING over the agent channel, answered by the agent's PONG within
 * timeout_ms (-ETIMEDOUT otherwise: a hung guest, or a paused one). */
int wr_vm_ping(struct wr_vm *vm, uint64_t timeout_ms, wr_err *err);
/* QMP stop / cont: the guest's vCPUs stop, memory stays. */
int wr_vm_pause(struct wr_vm *vm, wr_err *err);
int wr_vm_resume(struct wr_vm *vm, wr_err *err);
/* 1 when QEMU's vCPUs are stopped (paused), 0 when not. */
int wr_vm_paused(struct wr_vm *vm, wr_err *err);
struct wr_cgroup_stats;
/* CPU time and memory of QEMU (its cgroup: guest RAM as QEMU uses it). */
int wr_vm_usage(struct wr_vm *vm, struct wr_cgroup_stats *st, wr_err *err);
/* The agent answered its boot in this many ms of guest uptime. */
uint64_t wr_vm_boot_ms(const struct wr_vm *vm);
/* Host wall time from create to a ready agent. */
uint64_t wr_vm_ready_ms(const struct wr_vm *vm);
/* Restored from the image's template (else booted cold). */
bool wr_vm_restored(const struct wr_vm *vm);
/* Why a cold boot happened though templates are on ("" if they are off
 * or were used). */
const char *wr_vm_template_note(const struct wr_vm *vm);
const char *wr_vm_id(const struct wr_vm *vm);
pid_t wr_vm_qemu_pid(const struct wr_vm *vm);
/* QEMU's cgroup in the v2 hierarchy (the network filter's), or -1. */
int wr_vm_cgroup_v2_fd(const struct wr_vm *vm);
/* The last bytes the guest wrote to its serial console (for a panic
 * report); NUL-terminated copy, free() it. */
char *wr_vm_console_tail(struct wr_vm *vm);
/* SIGKILL to QEMU now (the sandbox's kill); destroy reaps and cleans. */
int wr_vm_kill(struct wr_vm *vm);
/* At start, after adoption: every VM (its QEMU, cgroup and files) a
 * previous daemon left whose id keep() refuses (keep NULL: all). */
size_t wr_microvm_sweep(bool (*keep)(const char *id, void *ctx), void *ctx);
/* A VM a previous daemon left running, found again by its id (pid_hint:
 * the QEMU pid the daemon recorded, 0: not checked): its QEMU verified
 * (pid, start time, uid), the agent, QMP and console channels connected
 * again. A VM that cannot be adopted is killed and its files removed. */
int wr_vm_adopt(const char *id, pid_t pid_hint, struct wr_vm **out, wr_err *err);

/* The tier behind struct wr_tier_ops (microvm_tier.c); registered by
 * warrend when the node has a guest kernel configured. */
extern const struct wr_tier_ops wr_microvm_tier;

/* Stops QEMU (quit, then SIGKILL), reaps it, removes the VM's files. */
int wr_vm_destroy(struct wr_vm **vm, wr_err *err);

#endif
