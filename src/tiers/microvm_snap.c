/* A microVM's whole state in a directory and back (qemu_snap.h): the
 * pause that frees a VM's memory (keep_memory=false) and snapshots to the
 * image store.
 *
 * Consistency: the VM is stopped (QMP stop) before its state is written,
 * and its disk is taken while it stays stopped (QEMU flushed it when the
 * migration completed), so disk, RAM and devices are of one instant. A
 * restore starts QEMU with the saved machine arguments and -incoming
 * defer, checks QEMU's version, loads the state (the VM stays stopped)
 * and only wr_vm_restore_run lets the guest run: a caller commits its
 * record between the two, so a guest never writes a disk that a crash
 * could still roll back to. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "tiers/microvm_internal.h"
#include "tiers/qemu_net.h"
#include "tiers/qemu_snap.h"
#include "tiers/qmp.h"

#define MACHINE "microvm,acpi=on,rtc=on"

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

json_t *wr_vm_state_meta(uint64_t memory_bytes, unsigned cpus, uint64_t disk_bytes,
			 bool ram_backend)
{
	char m[64], mem[32], smp[16], accel[48], tsc[48], disk[48];
	snprintf(m, sizeof(m), "%s%s", MACHINE, ram_backend ? ",memory-backend=mem" : "");
	snprintf(mem, sizeof(mem), "%lluM", (unsigned long long)(memory_bytes >> 20));
	snprintf(smp, sizeof(smp), "%u", cpus);
	if (wr_mvm.kvm)
		snprintf(accel, sizeof(accel), "kvm");
	else
		snprintf(accel, sizeof(accel), "tcg,tb-size=%u", WR_QEMU_TCG_TB_MIB);
	/* the guest kernel calibrated its clock with it under TCG */
	snprintf(tsc, sizeof(tsc), "tsc_early_khz=%lu", wr_mvm.kvm ? 0 : wr_mvm.tsc_khz);
	snprintf(disk, sizeof(disk), "rw=%llu", (unsigned long long)disk_bytes);
	return json_pack("{s:s, s:s, s:s, s:s, s:[s,s,s,s,s,s,s,s,s,s], s:I, s:i, s:I, s:b}",
			 "format", WR_QSNAP_FORMAT, "tier", "microvm", "accel",
			 wr_mvm.kvm ? "kvm" : "tcg", "machine", MACHINE, "args", "-M", m, "-m", mem,
			 "-smp", smp, "-accel", accel, tsc, disk, "memory_bytes",
			 (json_int_t)memory_bytes, "cpus", (int)cpus, "disk_bytes",
			 (json_int_t)disk_bytes, "ram_backend", ram_backend);
}

static struct wr_qsnap_qmp qq(struct wr_vm *vm)
{
	return (struct wr_qsnap_qmp){vm->qmp, &vm->qmp_lock, &vm->qp};
}

int wr_vm_save(struct wr_vm *vm, const char *dir, bool compact, json_t **meta_out, wr_err *err)
{
	struct wr_qsnap_qmp q = qq(vm);
	int stopped = wr_qsnap_stopped(&q, err);
	if (stopped < 0)
		return wr_err_wrap(err, "save microvm %s", vm->id);
	if (mkdir(dir, 0700) < 0)
		return wr_err_sys(err, "save microvm %s: mkdir %s", vm->id, dir);
	char version[160], path[1100], disk[1100];
	json_t *meta = NULL;
	uint64_t t0 = now_ns(), bytes = 0;
	int r = wr_qsnap_version(&q, version, sizeof(version), err);
	if (r == 0 && !stopped)
		r = wr_vm_pause(vm, err);
	snprintf(path, sizeof(path), "%s/state", dir);
	snprintf(disk, sizeof(disk), "%s/disk", dir);
	if (r == 0)
		r = wr_qsnap_save_file(&q, path, &bytes, err);
	uint64_t t1 = now_ns();
	/* the disk while the VM is stopped: it matches the RAM */
	if (r == 0 && compact) {
		char *qimg = wr_find_in_path("qemu-img");
		char *argv[] = {qimg, "convert", "-q",	      "-f", "raw",
				"-O", "qcow2",	 vm->rw_path, disk, NULL};
		r = qimg ? wr_qsnap_run(argv, err) : wr_err_set(err, ENOENT, "qemu-img not found");
		free(qimg);
		if (r == 0)
			r = wr_qsnap_fsync(disk, err);
	} else if (r == 0) {
		r = wr_qsnap_link_or_copy(vm->rw_path, disk, err);
	}
	if (r == 0) {
		meta =
		    wr_vm_state_meta(vm->memory_bytes, vm->cpus, vm->disk_bytes, vm->ram_backend);
		struct timespec rt;
		clock_gettime(CLOCK_REALTIME, &rt);
		json_object_set_new(meta, "qemu_version", json_string(version));
		json_object_set_new(meta, "running", json_boolean(!stopped));
		json_object_set_new(meta, "disk_format", json_string(compact ? "qcow2" : "raw"));
		json_object_set_new(meta, "state_bytes", json_integer((json_int_t)bytes));
		json_object_set_new(meta, "saved_at", json_integer((json_int_t)rt.tv_sec));
		json_object_set_new(meta, "source", json_string(vm->id));
		json_object_set_new(meta, "nic", json_boolean(vm->nic));
		json_object_set_new(meta, "save_ms", json_real((double)(t1 - t0) / 1e6));
		json_object_set_new(meta, "disk_ms", json_real((double)(now_ns() - t1) / 1e6));
		r = wr_qsnap_write_meta(dir, meta, err);
	}
	if (r < 0) {
		json_decref(meta);
		wr_qsnap_remove(dir);
		/* a running VM runs again: nothing was saved */
		_cleanup_err_ wr_err e2 = NULL;
		if (!stopped)
			wr_vm_resume(vm, &e2);
		return wr_err_wrap(err, "save microvm %s", vm->id);
	}
	if (meta_out)
		*meta_out = meta;
	else
		json_decref(meta);
	return 0;
}

static uint64_t meta_u64(json_t *m, const char *k)
{
	return (uint64_t)json_integer_value(json_object_get(m, k));
}

int wr_vm_restore(const struct wr_vm_spec *in, const char *dir, struct wr_vm **out, wr_err *err)
{
	if (!wr_mvm.ready)
		return wr_err_set(err, EINVAL, "microvm: tier not initialised");
	_cleanup_(json_decrefp) json_t *meta = wr_qsnap_read_meta(dir, err);
	if (meta == NULL)
		return wr_err_wrap(err, "restore microvm");
	struct wr_vm_spec spec = *in;
	spec.memory_bytes = meta_u64(meta, "memory_bytes");
	spec.disk_bytes = meta_u64(meta, "disk_bytes");
	spec.cpus = (unsigned)meta_u64(meta, "cpus");
	if (spec.boot_timeout_ms == 0)
		spec.boot_timeout_ms = 60000;
	bool ram_backend = json_is_true(json_object_get(meta, "ram_backend"));
	_cleanup_(json_decrefp) json_t *now =
	    wr_vm_state_meta(spec.memory_bytes, spec.cpus, spec.disk_bytes, ram_backend);
	if (spec.memory_bytes == 0 || spec.cpus == 0 || wr_qsnap_check(meta, now, err) < 0)
		return *err ? wr_err_wrap(err, "restore microvm")
			    : wr_err_set(err, EINVAL, "restore microvm: saved sizes missing");
	/* The NIC follows the saved state (its device state is in the
	 * stream): with the sandbox's namespace when it is networked, else in
	 * an empty one of QEMU's own (the NIC is there, nothing reachable; a
	 * later PATCH cannot reach it either). A state without a NIC cannot
	 * give a networked sandbox one. */
	bool nic = json_is_true(json_object_get(meta, "nic"));
	struct wr_qemu_net none = {.netns_fd = -1};
	if (nic && spec.net == NULL)
		spec.net = &none;
	else if (!nic && spec.net)
		return wr_err_field(
		    err, "network.mode",
		    "network.mode: this microVM state was saved without a network "
		    "device (its sandbox was offline); restore it with mode \"none\"");
	struct wr_vm *vm = NULL;
	/* before the first goto fail: its cleanup runs on every path */
	_cleanup_close_ int sfd = -1;
	int r = wr_vm_alloc(spec.id, &vm, err);
	if (r < 0)
		return r;
	uint64_t start = now_ns();
	uint64_t deadline = start + spec.boot_timeout_ms * 1000000ull;
	char disk[1100], state[1100];
	snprintf(disk, sizeof(disk), "%s/disk", dir);
	snprintf(state, sizeof(state), "%s/state", dir);
	const char *fmt = json_string_value(json_object_get(meta, "disk_format"));
	if (fmt && strcmp(fmt, "qcow2") == 0) {
		char *qimg = wr_find_in_path("qemu-img");
		char *argv[] = {qimg, "convert", "-q", "-f",	    "qcow2",
				"-O", "raw",	 disk, vm->rw_path, NULL};
		r = qimg ? wr_qsnap_run(argv, err) : wr_err_set(err, ENOENT, "qemu-img not found");
		free(qimg);
	} else {
		/* the same inode: the guest runs only after the caller's
		 * commit, which makes the saved directory obsolete */
		r = wr_qsnap_link_or_copy(disk, vm->rw_path, err);
	}
	if (r < 0)
		goto fail;
	struct vm_boot boot = {
	    .hostname = vm->id, .mem = ram_backend, .mem_ram = true, .incoming = true};
	struct wr_qsnap_qmp q;
	sfd = open(state, O_RDONLY | O_CLOEXEC);
	if (sfd < 0) {
		r = wr_err_sys(err, "open %s", state);
		goto fail;
	}
	if ((r = wr_vm_launch(vm, &spec, &boot, -1, err)) < 0)
		goto fail;
	q = qq(vm);
	if ((r = wr_qsnap_check_version(meta, &q, err)) < 0 ||
	    (r = wr_qsnap_load(&q, sfd, deadline, err)) < 0)
		goto fail;
	vm->ready_ns = now_ns() - start;
	json_t *extra = json_pack("{s:b, s:I, s:I, s:b, s:b}", "restored", 0, "boot_ms",
				  (json_int_t)0, "ready_ms", (json_int_t)(vm->ready_ns / 1000000),
				  "ram_backend", ram_backend, "nic", vm->nic);
	r = wr_qemu_save(&vm->qp, extra, err);
	json_decref(extra);
	if (r < 0)
		goto fail;
	*out = vm;
	return 0;
fail:
	wr_vm_fail(vm, err);
	return wr_err_wrap(err, "restore microvm");
}

int wr_vm_restore_run(struct wr_vm *vm, const char *hostname, wr_err *err)
{
	uint64_t deadline = now_ns() + 30ull * 1000000000ull;
	/* the guest's agent reads EOF on its port while no host is
	 * connected and waits: resync the stream (as after an adoption),
	 * then its identity (the clock jumped; a copy needs its own
	 * entropy), answered by a HELLO */
	if (wr_vm_resume(vm, err) < 0 || wr_vm_resync(vm, 30000, err) < 0 ||
	    wr_vm_send_identity(vm, hostname ? hostname : vm->id, err) < 0 ||
	    wr_vm_wait_hello(vm, deadline, err) < 0)
		return wr_err_wrap(err, "run restored microvm %s", vm->id);
	return 0;
}
