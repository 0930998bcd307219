/* Shared between the microVM tier's files (microvm.c: process and life
 * cycle; microvm_chan.c: the agent channel and exec; microvm_disk.c: the
 * writable disk). */
#ifndef WARREN_TIERS_MICROVM_INTERNAL_H
#define WARREN_TIERS_MICROVM_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"
#include "common/util.h"
#include "isolate/cgroup.h"
#include "tiers/microvm.h"
#include "tiers/qemu_proc.h"
#include "tiers/tier.h"

struct wr_microvm_globals {
	bool ready;
	bool kvm;
	unsigned long tsc_khz;
	char *qemu, *kernel, *initrd, *state_dir, *run_dir;
	char *template_dir; /* NULL: templates off */
	bool adoptable;	    /* QEMU outlives the process (a daemon) */
};
extern struct wr_microvm_globals wr_mvm;

/* One command in flight, owned by its exec call; the reader thread fills
 * it under vm->lock. */
struct vm_cmd {
	uint32_t id;
	const struct wr_exec_spec *spec;
	uint64_t cap;
	struct wr_buf out, err;
	size_t out_n, err_n;
	bool out_trunc, err_trunc, stop_delivery;
	bool done;
	json_t *exit;	 /* the EXIT frame's object */
	char error[256]; /* an ERROR frame's message */
	struct vm_cmd *next;
};

#define VM_CONSOLE_RING 65536

struct wr_vm {
	char id[65];
	struct wr_qemu qp;  /* the process, its uid, cgroup and jail */
	int agent, console; /* our ends of the socketpairs */
	struct wr_qmp *qmp;
	pthread_mutex_t qmp_lock;
	pthread_mutex_t write_lock; /* frames to the agent, whole */
	pthread_mutex_t lock;	    /* all below */
	pthread_cond_t cond;
	struct vm_cmd *cmds;
	uint32_t next_id;
	json_t *hello;
	uint32_t next_ping, pong; /* the last PONG's id */
	/* resync after adoption: bytes are dropped until the PONG of this
	 * PING id (0: in step); the last 12 bytes seen */
	uint32_t sync_id;
	uint8_t sync_win[12];
	size_t sync_n;
	bool broken; /* channel lost or abused: no more commands */
	char broken_msg[256];
	char ring[VM_CONSOLE_RING];
	size_t ring_len, ring_pos;
	int stop[2]; /* reader thread's stop pipe */
	pthread_t reader;
	bool reader_started;
	char *dir;
	char *rw_path;
	uint64_t boot_ms;
	uint64_t ready_ns;     /* create to a ready agent, host wall time */
	bool restored;	       /* from a template */
	char tmpl_note[256];   /* why a template was not used, if it was not */
	struct vm_fsop *fsops; /* file requests in flight (microvm_files.c) */
	/* as launched, for a save (microvm_snap.c): guest RAM is the memory
	 * backend "mem" (template and state restores) or the machine's own */
	bool ram_backend;
	uint64_t memory_bytes, disk_bytes;
	unsigned cpus;
	/* a virtio-net NIC (qemu_net.h): its device state is in every save,
	 * so a restore must have it too (meta.json "nic") */
	bool nic;
};

/* How QEMU starts: a cold boot, a boot that makes a template (RAM in a
 * shared file) or a restore (RAM a private mapping of a template's file,
 * device state through migrate-incoming). */
struct vm_boot {
	const char *hostname; /* on the kernel command line */
	bool mem;	      /* RAM in the file at FD_MEM (mem_fd) */
	bool share;
	bool incoming;
	bool mem_ram; /* with mem: an anonymous memory-backend-ram "mem" (no file) */
};

/* microvm.c */
int wr_vm_alloc(const char *id, struct wr_vm **out, wr_err *err);
/* Starts QEMU for vm (its rw disk at vm->rw_path exists) and opens QMP. */
int wr_vm_launch(struct wr_vm *vm, const struct wr_vm_spec *spec, const struct vm_boot *boot,
		 int mem_fd, wr_err *err);
/* Stops a VM that failed to start (adds its console and QEMU's last words
 * to err) and frees it. */
void wr_vm_fail(struct wr_vm *vm, wr_err *err);
/* A whole cold boot to the agent's HELLO; boot NULL: a plain one. */
int wr_vm_boot_cold(const struct wr_vm_spec *spec, const struct vm_boot *boot, int mem_fd,
		    struct wr_vm **out, wr_err *err);

/* A VM with no QEMU around an agent channel (and a console) the caller
 * made: the host half of the protocol against a fake guest, for tests of
 * what a hostile guest can do. Takes ownership of both fds. */
int wr_vm_attach_fds(int agent, int console, struct wr_vm **out, wr_err *err);

/* microvm_tmpl.c: a VM from the template of spec (made first when there is
 * no valid one). */
int wr_vm_tmpl_restore(const struct wr_vm_spec *spec, struct wr_vm **out, wr_err *err);
/* Removes templates half made by a daemon that died. */
void wr_vm_tmpl_sweep(void);

/* microvm_tmpl.c: the guest learns its hostname, fresh entropy and the
 * host's clock; answered by a HELLO (wr_vm_wait_hello). */
int wr_vm_send_identity(struct wr_vm *vm, const char *hostname, wr_err *err);

/* microvm_snap.c: a VM's whole state in a directory (qemu_snap.h) and
 * back. Save stops a running VM and leaves it stopped (the caller's
 * wr_vm_resume runs it again); compact: the disk as qcow2 (zeros left
 * out: a store image), else a hard link of the stopped VM's disk (or a
 * copy). *meta (may be NULL) gets meta.json's content. */
int wr_vm_save(struct wr_vm *vm, const char *dir, bool compact, json_t **meta, wr_err *err);
/* A new VM (spec's id and image; sizes from the saved meta) from the
 * saved directory dir, loaded and stopped: wr_vm_restore_run runs it. */
int wr_vm_restore(const struct wr_vm_spec *spec, const char *dir, struct wr_vm **out, wr_err *err);
/* cont, then the agent resynced and (identity) told its hostname, new
 * entropy and the clock. */
int wr_vm_restore_run(struct wr_vm *vm, const char *hostname, wr_err *err);
/* What this node would record for a save of a VM of these sizes (the
 * check of a restore compares it with the saved meta). */
json_t *wr_vm_state_meta(uint64_t memory_bytes, unsigned cpus, uint64_t disk_bytes,
			 bool ram_backend);

/* microvm_files.c: FS_DATA, FS_LIST and FS_DONE frames, from the reader
 * thread with vm->lock held. */
struct wr_frame;
void wr_vm_fs_frame(struct wr_vm *vm, const struct wr_frame *f);

/* microvm_pty.c: wr_vm_exec of a command with a terminal (spec->pty). */
int wr_vm_exec_pty(struct wr_vm *vm, const struct wr_exec_spec *spec, struct wr_exec_result *res,
		   wr_err *err);

/* microvm_chan.c */
json_t *wr_vm_exec_request(const struct wr_exec_spec *spec);
enum wr_exit_reason wr_vm_exit_reason(const char *s);
int wr_vm_reader_start(struct wr_vm *vm, wr_err *err);
void wr_vm_reader_stop(struct wr_vm *vm);
/* A channel connected to a guest that talked to a previous daemon: starts
 * the reader, which drops the stream up to the PONG of a fresh PING (the
 * previous daemon may have died within a frame), and moves command ids
 * away from those the guest may still run. Waits up to timeout_ms for the
 * PONG (0: does not wait; a paused guest answers when it runs again). */
int wr_vm_resync(struct wr_vm *vm, uint64_t timeout_ms, wr_err *err);
/* Waits for the agent's HELLO (or the channel's loss) until deadline. */
int wr_vm_wait_hello(struct wr_vm *vm, uint64_t deadline_ns, wr_err *err);

/* microvm_disk.c: a sparse copy of the formatted ext4 template of this
 * size at path (the template is made once, atomically). */
int wr_vm_disk_make(const char *path, uint64_t bytes, wr_err *err);
/* A sparse copy of the disk file from into a new file to. */
int wr_vm_disk_copy(const char *from, const char *to, uint64_t bytes, wr_err *err);

#endif
