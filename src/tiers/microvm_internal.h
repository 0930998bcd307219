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
#include "tiers/tier.h"

struct wr_microvm_globals {
	bool ready;
	bool kvm;
	unsigned long tsc_khz;
	char *qemu, *kernel, *initrd, *state_dir, *run_dir;
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
	pid_t pid;
	int pidfd;
	int agent, console; /* our ends of the socketpairs */
	struct wr_qmp *qmp;
	pthread_mutex_t qmp_lock;
	pthread_mutex_t write_lock; /* frames to the agent, whole */
	pthread_mutex_t lock;	    /* all below */
	pthread_cond_t cond;
	struct vm_cmd *cmds;
	uint32_t next_id;
	json_t *hello;
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
};

/* microvm_chan.c */
int wr_vm_reader_start(struct wr_vm *vm, wr_err *err);
void wr_vm_reader_stop(struct wr_vm *vm);
/* Waits for the agent's HELLO (or the channel's loss) until deadline. */
int wr_vm_wait_hello(struct wr_vm *vm, uint64_t deadline_ns, wr_err *err);

/* microvm_disk.c: a sparse copy of the formatted ext4 template of this
 * size at path (the template is made once, atomically). */
int wr_vm_disk_make(const char *path, uint64_t bytes, wr_err *err);

#endif
