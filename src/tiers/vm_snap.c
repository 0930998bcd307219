/* A full VM's whole state in a directory and back (qemu_snap.h): the pause
 * that frees its memory (keep_memory=false) and snapshots to the image
 * store, as microvm_snap.c does for microVMs.
 *
 * The disk is the VM's qcow2 overlay, taken while the VM is stopped (QEMU
 * flushed it when the migration completed): a hard link for a suspend (the
 * stopped VM writes nothing before it ends; a restored one nothing before
 * its record is committed), a copy for a snapshot of a VM that runs on.
 * The overlay names its base only as metadata: QEMU gets the base image as
 * an fd (-blockdev backing=base), so the same overlay restores on another
 * node whose base has another path. */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "tiers/qemu_proc.h"
#include "tiers/qemu_snap.h"
#include "tiers/vm.h"

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The machine a restore must start again (vm.c's spawn_qemu). */
static json_t *state_meta(const struct wr_fullvm_spec *s, bool kvm)
{
	char mem[32], smp[16], accel[48], disk[48];
	snprintf(mem, sizeof(mem), "%llu", (unsigned long long)(s->memory_bytes >> 20));
	snprintf(smp, sizeof(smp), "%u", s->cpus);
	if (kvm)
		snprintf(accel, sizeof(accel), "kvm");
	else
		snprintf(accel, sizeof(accel), "tcg,tb-size=%u", WR_QEMU_TCG_TB_MIB);
	snprintf(disk, sizeof(disk), "overlay=%llu", (unsigned long long)s->disk_bytes);
	/* bios and uefi keep the machine "q35" of states saved before
	 * uefi-secure's "q35,smm=on" existed */
	const char *machine = wr_fullvm_machine(s->firmware);
	return json_pack(
	    "{s:s, s:s, s:s, s:s, s:[s,s,s,s,s,s,s,s,s,s,s], s:I, s:i, s:I, s:s}", "format",
	    WR_QSNAP_FORMAT, "tier", "vm", "accel", kvm ? "kvm" : "tcg", "machine", machine, "args",
	    "-M", machine, "-m", mem, "-smp", smp, "-accel", accel, "-vga", "std", disk,
	    "memory_bytes", (json_int_t)s->memory_bytes, "cpus", (int)s->cpus, "disk_bytes",
	    (json_int_t)s->disk_bytes, "firmware", wr_fullvm_firmware_name(s->firmware));
}

/* A UEFI VM's variable store goes with its state (what the guest wrote
 * there: boot entries, its own variables); the VM's directory is the
 * overlay's. */
static int vars_save(struct wr_fullvm *vm, const struct wr_fullvm_spec *s, const char *dir,
		     wr_err *err)
{
	if (s->firmware == WR_VM_FW_BIOS)
		return 0;
	char from[1100], to[1100];
	const char *ov = wr_fullvm_overlay(vm), *slash = strrchr(ov, '/');
	if (slash == NULL)
		return wr_err_set(err, EINVAL, "overlay %s has no directory", ov);
	snprintf(from, sizeof(from), "%.*s/efivars.fd", (int)(slash - ov), ov);
	snprintf(to, sizeof(to), "%s/efivars.fd", dir);
	return wr_qsnap_copy(from, to, err);
}

int wr_fullvm_save(struct wr_fullvm *vm, const struct wr_fullvm_spec *sizes, const char *dir,
		   bool link, json_t **meta_out, wr_err *err)
{
	struct wr_qsnap_qmp q;
	wr_fullvm_qsnap(vm, &q);
	int kvm = wr_qsnap_kvm(&q, err);
	int stopped = kvm < 0 ? -1 : wr_qsnap_stopped(&q, err);
	if (stopped < 0)
		return wr_err_wrap(err, "save vm");
	if (mkdir(dir, 0700) < 0)
		return wr_err_sys(err, "save vm: mkdir %s", dir);
	char version[160], path[1100], disk[1100];
	json_t *meta = NULL;
	uint64_t t0 = now_ns(), bytes = 0;
	int r = wr_qsnap_version(&q, version, sizeof(version), err);
	if (r == 0 && !stopped)
		r = wr_fullvm_pause(vm, true, err);
	snprintf(path, sizeof(path), "%s/state", dir);
	snprintf(disk, sizeof(disk), "%s/disk", dir);
	if (r == 0)
		r = wr_qsnap_save_file(&q, path, &bytes, err);
	uint64_t t1 = now_ns();
	/* the overlay while the VM is stopped: a link (a suspend) or a copy
	 * (a snapshot: the VM runs on and writes it) */
	if (r == 0)
		r = link ? wr_qsnap_link_or_copy(wr_fullvm_overlay(vm), disk, err)
			 : wr_qsnap_copy(wr_fullvm_overlay(vm), disk, err);
	if (r == 0)
		r = vars_save(vm, sizes, dir, err);
	if (r == 0) {
		meta = state_meta(sizes, kvm == 1);
		struct timespec rt;
		clock_gettime(CLOCK_REALTIME, &rt);
		json_object_set_new(meta, "qemu_version", json_string(version));
		json_object_set_new(meta, "running", json_boolean(!stopped));
		json_object_set_new(meta, "disk_format", json_string("qcow2-overlay"));
		json_object_set_new(meta, "state_bytes", json_integer((json_int_t)bytes));
		json_object_set_new(meta, "saved_at", json_integer((json_int_t)rt.tv_sec));
		json_object_set_new(meta, "save_ms", json_real((double)(t1 - t0) / 1e6));
		json_object_set_new(meta, "disk_ms", json_real((double)(now_ns() - t1) / 1e6));
		r = wr_qsnap_write_meta(dir, meta, err);
	}
	if (r < 0) {
		json_decref(meta);
		wr_qsnap_remove(dir);
		_cleanup_err_ wr_err e2 = NULL;
		if (!stopped)
			wr_fullvm_pause(vm, false, &e2);
		return wr_err_wrap(err, "save vm");
	}
	if (meta_out)
		*meta_out = meta;
	else
		json_decref(meta);
	return 0;
}

int wr_fullvm_restore(const struct wr_fullvm_spec *in, const char *dir, struct wr_fullvm **out,
		      wr_err *err)
{
	_cleanup_(json_decrefp) json_t *meta = wr_qsnap_read_meta(dir, err);
	if (meta == NULL)
		return wr_err_wrap(err, "restore vm");
	struct wr_fullvm_spec s = *in;
	s.memory_bytes = (uint64_t)json_integer_value(json_object_get(meta, "memory_bytes"));
	s.disk_bytes = (uint64_t)json_integer_value(json_object_get(meta, "disk_bytes"));
	s.cpus = (unsigned)json_integer_value(json_object_get(meta, "cpus"));
	/* the firmware it was saved with (its memory, OVMF's and SMM's, is in
	 * the state), whatever the image record says; saved before the key
	 * existed: the spec's, and the machine check below still applies */
	const char *saved_fw = json_string_value(json_object_get(meta, "firmware"));
	if (saved_fw && wr_fullvm_firmware_parse(saved_fw, &s.firmware) < 0)
		return wr_err_field(err, "image", "image: the VM state names firmware '%s'",
				    saved_fw);
	/* the accelerator this node would use: the same as the saved one or
	 * the check below names both */
	const char *saved_accel = json_string_value(json_object_get(meta, "accel"));
	_cleanup_(json_decrefp) json_t *now = state_meta(&s, wr_fullvm_uses_kvm());
	if (s.memory_bytes == 0 || s.cpus == 0)
		return wr_err_set(err, EINVAL, "restore vm: saved sizes missing");
	if (wr_qsnap_check(meta, now, err) < 0)
		return wr_err_wrap(err, "restore vm (saved with %s)",
				   saved_accel ? saved_accel : "?");
	char disk[1100], state[1100], vars[1100];
	snprintf(disk, sizeof(disk), "%s/disk", dir);
	snprintf(state, sizeof(state), "%s/state", dir);
	snprintf(vars, sizeof(vars), "%s/efivars.fd", dir);
	/* saved before variable stores were kept: the firmware's empty one */
	s.vars_from = s.firmware != WR_VM_FW_BIOS && access(vars, F_OK) == 0 ? vars : NULL;
	_cleanup_close_ int sfd = open(state, O_RDONLY | O_CLOEXEC);
	if (sfd < 0)
		return wr_err_sys(err, "restore vm: open %s", state);
	s.incoming = true;
	s.overlay_from = disk;
	uint64_t start = now_ns();
	struct wr_fullvm *vm = NULL;
	if (wr_fullvm_create(&s, &vm, err) < 0)
		return wr_err_wrap(err, "restore vm");
	struct wr_qsnap_qmp q;
	wr_fullvm_qsnap(vm, &q);
	uint64_t deadline = start + (s.boot_timeout_ms ? s.boot_timeout_ms : 300000) * 1000000ull;
	if (wr_qsnap_check_version(meta, &q, err) < 0 ||
	    wr_qsnap_load(&q, sfd, deadline, err) < 0 || wr_fullvm_record(vm, err) < 0) {
		/* QEMU killed, its files gone: the saved directory stays */
		wr_fullvm_kill(vm);
		wr_fullvm_destroy(&vm, NULL);
		return wr_err_wrap(err, "restore vm");
	}
	*out = vm;
	return 0;
}

int wr_fullvm_restore_run(struct wr_fullvm *vm, wr_err *err)
{
	/* qemu-ga read EOF while no host was connected and waits: the stream
	 * resyncs with guest-sync-delimited once the guest runs */
	if (wr_fullvm_pause(vm, false, err) < 0 || wr_fullvm_sync(vm, 60000, err) < 0)
		return wr_err_wrap(err, "run restored vm");
	return 0;
}
