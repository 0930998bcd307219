/* The full VM tier's core: any bootable disk image (raw or qcow2) in a QEMU
 * q35 machine (SeaBIOS), its own kernel and init, driven only through the
 * standard QEMU guest agent (src/tiers/qga.h) and QMP (qmp.h).
 *
 *   create: qcow2 overlay (qemu-img, sized to the sandbox's disk) over the
 *           image, which stays read-only (a hundred VMs share one base) →
 *           socketpairs for QMP, the guest agent and the console → fork+exec
 *           QEMU with both disk files passed as fds (-add-fd, -blockdev),
 *           -sandbox on,spawn=deny,... → guest-sync-delimited answered
 *           (readiness; an image without qemu-guest-agent fails here with
 *           a clear error after its boot timeout)
 *   exec:   guest-exec + guest-exec-status polling; the timeout kills the
 *           process with the guest's kill(1); output arrives at the end
 *   screen: QMP screendump as PNG; input-send-event for keys and pointer
 *   destroy: QMP quit, SIGKILL after a grace, reap, remove the overlay
 *
 * Exit codes and output are guest-reported. */
#ifndef WARREN_TIERS_VM_H
#define WARREN_TIERS_VM_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "tiers/tier.h"

struct wr_fullvm_config {
	const char *qemu;     /* default: qemu-system-x86_64 from PATH */
	const char *qemu_img; /* default: qemu-img from PATH */
	const char *run_dir;  /* per-VM files under <run>/vm/<id> */
	const char *accel;    /* "auto" (default), "kvm" or "tcg" */
	/* each QEMU's cgroup is <own cgroup>/<base>/vm-<id> (one base a
	 * process, the microVM tier's); default "warren-microvm" */
	const char *cgroup_base;
	/* UEFI firmware (Debian's ovmf): the code, read-only pflash, and the
	 * variable store each UEFI VM gets a copy of; NULL: /usr/share/OVMF's
	 * OVMF_CODE_4M.fd and OVMF_VARS_4M.fd */
	const char *ovmf_code, *ovmf_vars;
	/* the same for Secure Boot (uefi-secure, vm_fw.c); NULL:
	 * OVMF_CODE_4M.ms.fd and OVMF_VARS_4M.ms.fd (Microsoft's keys) */
	const char *ovmf_secure_code, *ovmf_secure_vars;
	/* QEMU outlives this process (warrend: the next start adopts it,
	 * wr_fullvm_adopt); false: it gets SIGKILL when the creating thread
	 * ends */
	bool adoptable;
};
int wr_fullvm_init(const struct wr_fullvm_config *cfg, wr_err *err);

/* How a VM boots (vm_fw.c). */
enum wr_vm_firmware {
	WR_VM_FW_BIOS,	      /* SeaBIOS */
	WR_VM_FW_UEFI,	      /* OVMF */
	WR_VM_FW_UEFI_SECURE, /* OVMF with Secure Boot, Microsoft's keys enrolled */
};
/* A VM's variable store (<dir>/efivars.fd) is at most this large. */
#define WR_VM_VARS_MAX (4u << 20)
/* "bios" (also NULL), "uefi", "uefi-secure"; -EINVAL for anything else. */
int wr_fullvm_firmware_parse(const char *name, enum wr_vm_firmware *out);
const char *wr_fullvm_firmware_name(enum wr_vm_firmware f);
/* QEMU's -M for the firmware ("q35", "q35,smm=on"). */
const char *wr_fullvm_machine(enum wr_vm_firmware f);

struct wr_fullvm_spec {
	const char *image;	  /* bootable disk: raw or qcow2 */
	uint64_t memory_bytes;	  /* default 512 MiB */
	uint64_t disk_bytes;	  /* overlay's virtual size; default: the image's */
	unsigned cpus;		  /* default 1 */
	const char *id;		  /* default: random */
	uint64_t boot_timeout_ms; /* default 300 s (TCG boots of a whole OS) */
	/* a restore of a saved VM (vm_snap.c): QEMU starts with -incoming
	 * defer and waits for its state (no boot, no agent sync, no vm.json
	 * yet), on this overlay (linked or copied) instead of a new one */
	bool incoming;
	const char *overlay_from;
	enum wr_vm_firmware firmware;
	/* a restore's variable store (a UEFI VM's saved efivars.fd); NULL:
	 * the firmware's empty one */
	const char *vars_from;
	bool vnc; /* a VNC endpoint (vm_vnc.h); never by default */
	/* with vnc: the password to set (a VM restored for the same sandbox
	 * keeps the one its user has); NULL: a new random one */
	const char *vnc_password;
	/* a virtio-net NIC (user-mode networking in net's namespace,
	 * qemu_net.h; the image configures it by DHCP); NULL: no NIC */
	const struct wr_qemu_net *net;
};

struct wr_fullvm;
struct wr_qemu_net;
/* QEMU's cgroup in the v2 hierarchy (the network filter's), or -1. */
int wr_fullvm_cgroup_v2_fd(const struct wr_fullvm *vm);
/* A published port into the guest (wr_qemu_net_hostfwd). */
int wr_fullvm_hostfwd(struct wr_fullvm *vm, const char *addr, unsigned port, bool add, wr_err *err);

int wr_fullvm_create(const struct wr_fullvm_spec *spec, struct wr_fullvm **out, wr_err *err);
/* argv, env, cwd, user, group, timeout_ms, output_cap, stdin_fd (read to
 * its end first, at most 16 MiB) and on_output (called once per stream at
 * the end) of wr_exec_spec; pty: -ENOTSUP. */
int wr_fullvm_exec(struct wr_fullvm *vm, const struct wr_exec_spec *spec,
		   struct wr_exec_result *res, wr_err *err);
int wr_fullvm_read_file(struct wr_fullvm *vm, const char *path, size_t max, char **data,
			size_t *len, wr_err *err);
int wr_fullvm_write_file(struct wr_fullvm *vm, const char *path, const char *data, size_t len,
			 wr_err *err);
/* The screen as PNG (malloc'd). */
int wr_fullvm_screenshot(struct wr_fullvm *vm, char **png, size_t *len, wr_err *err);
/* Types text on the keyboard (ASCII letters, digits, space, newline and
 * common punctuation). */
int wr_fullvm_type(struct wr_fullvm *vm, const char *text, wr_err *err);
/* Keys pressed together and released (["ctrl","c"]): names ctrl, alt,
 * shift, super, enter, escape, tab, space, backspace, delete, arrows,
 * home, end, pageup, pagedown, insert, f1..f12, letters and digits. */
int wr_fullvm_keys(struct wr_fullvm *vm, const char *const *keys, size_t n, wr_err *err);
/* Moves the absolute pointer (USB tablet) to x, y in screen pixels, then
 * clicks button ("left", "right", "middle"; NULL: none) and scrolls
 * (negative: up) there. */
struct wr_fullvm_pointer {
	unsigned x, y;
	const char *button;
	bool double_click;
	int scroll;
};
int wr_fullvm_pointer(struct wr_fullvm *vm, const struct wr_fullvm_pointer *p, wr_err *err);
pid_t wr_fullvm_qemu_pid(const struct wr_fullvm *vm);
/* The VNC endpoint of a VM made with vnc (its Unix socket, the password
 * VNC authentication asks for): 0, or -ENOENT when it has none. */
int wr_fullvm_vnc(const struct wr_fullvm *vm, const char **socket, const char **password);
/* QEMU's firmware arguments for a UEFI VM (vm_fw.c; exposed for tests):
 * appended to argv (malloc'd strings) at *n, below max. */
int wr_fullvm_uefi_args(char **argv, size_t max, size_t *n, enum wr_vm_firmware f, int code_fd,
			int vars_fd, int vars_ro_fd);
/* (vm_fw.c, for vm.c) The firmware's paths from the config. */
int wr_fullvm_fw_init(const struct wr_fullvm_config *cfg, wr_err *err);
/* A UEFI VM's firmware fds: out[0] the code (read-only), out[1] and out[2]
 * its variable store <dfd>/efivars.fd (read-write, read-only), made as a
 * copy of vars_from or of the firmware's empty store. */
int wr_fullvm_fw_files(int dfd, enum wr_vm_firmware f, const char *vars_from, int out[3],
		       wr_err *err);
int wr_fullvm_kill(struct wr_fullvm *vm);
/* ACPI power button (QMP system_powerdown), then SIGKILL when QEMU has not
 * exited within deadline_ms (the guest's own shutdown ends QEMU). */
int wr_fullvm_shutdown(struct wr_fullvm *vm, int deadline_ms);
/* QMP stop/cont: every vCPU stops, running commands included. */
int wr_fullvm_pause(struct wr_fullvm *vm, bool paused, wr_err *err);
/* 1 when stopped by wr_fullvm_pause, 0 when running, negative on error. */
int wr_fullvm_paused(struct wr_fullvm *vm, wr_err *err);
/* At start, after adoption: every VM (its QEMU, cgroup and files) a
 * previous daemon left whose id keep() refuses (keep NULL: all); returns
 * how many. */
size_t wr_fullvm_sweep(bool (*keep)(const char *id, void *ctx), void *ctx);
/* A VM a previous daemon left running, found again by its id (pid_hint:
 * the QEMU pid the daemon recorded, 0: not checked): QEMU verified (pid,
 * start time, uid), QMP, the console and the guest agent connected again
 * (the agent answering within sync_ms). One that cannot be adopted is
 * killed and its files removed. */
int wr_fullvm_adopt(const char *id, pid_t pid_hint, int sync_ms, struct wr_fullvm **out,
		    wr_err *err);
int wr_fullvm_destroy(struct wr_fullvm **vm, wr_err *err);

/* For vm_snap.c (the VM's whole state to a directory and back). */
struct wr_qsnap_qmp;
bool wr_fullvm_uses_kvm(void);
void wr_fullvm_qsnap(struct wr_fullvm *vm, struct wr_qsnap_qmp *q);
const char *wr_fullvm_overlay(const struct wr_fullvm *vm);
/* The agent resynced (after a restore: qemu-ga waited for a host). */
int wr_fullvm_sync(struct wr_fullvm *vm, int timeout_ms, wr_err *err);
/* vm.json for a later adoption (a restore writes it once loaded). */
int wr_fullvm_record(struct wr_fullvm *vm, wr_err *err);
/* vm_snap.c: see there. */
int wr_fullvm_save(struct wr_fullvm *vm, const struct wr_fullvm_spec *sizes, const char *dir,
		   bool link, json_t **meta, wr_err *err);
int wr_fullvm_restore(const struct wr_fullvm_spec *spec, const char *dir, struct wr_fullvm **out,
		      wr_err *err);
int wr_fullvm_restore_run(struct wr_fullvm *vm, wr_err *err);

/* The guest agent for vm_files.c and vm_exec.c: one command (args
 * borrowed), or a short command run to its end, under the VM's agent lock
 * (see qga.h for both). */
#include <jansson.h>
struct wr_qga_exec;
struct wr_qga_result;
int wr_fullvm_qga_cmd(struct wr_fullvm *vm, const char *cmd, json_t *args, int timeout_ms,
		      json_t **ret, wr_err *err);
int wr_fullvm_qga_run(struct wr_fullvm *vm, const struct wr_qga_exec *x, struct wr_qga_result *res,
		      wr_err *err);

#endif
