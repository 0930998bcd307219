/* The microVM tier's core (see microvm.h for the pipeline). */
#include "tiers/microvm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "common/frame.h"
#include "common/util.h"
#include "tiers/microvm_internal.h"
#include "tiers/qemu_net.h"
#include "tiers/qemu_proc.h"
#include "tiers/qemu_snap.h"
#include "tiers/qmp.h"

struct wr_microvm_globals wr_mvm;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- process-wide set-up -------------------------------------------------- */

/* The host's TSC rate for tsc_early_khz: a guest under TCG that calibrates
 * its TSC itself hangs about one boot in ten (FACTS.md). */
static unsigned long host_tsc_khz(void)
{
	FILE *f = fopen("/proc/cpuinfo", "re");
	char line[256];
	double mhz = 0;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "cpu MHz : %lf", &mhz) == 1)
			break;
	if (f)
		fclose(f);
	return (unsigned long)(mhz * 1000.0);
}

/* QEMU opens the kernel and initramfs as its own unprivileged uid, through
 * bind mounts in its jail: the files themselves must let it. */
static int readable_by_qemu(const char *what, const char *path, wr_err *err)
{
	struct stat st;
	if (stat(path, &st) < 0)
		return wr_err_sys(err, "microvm: %s %s", what, path);
	if (!(st.st_mode & S_IROTH) && !(st.st_gid == WR_QEMU_GID && (st.st_mode & S_IRGRP)))
		return wr_err_set(err, EACCES,
				  "microvm: %s %s must be readable by QEMU's own uid (o+r, or g+r "
				  "for gid %u)",
				  what, path, WR_QEMU_GID);
	return 0;
}

int wr_microvm_init(const struct wr_microvm_config *cfg, wr_err *err)
{
	if (wr_mvm.ready)
		return 0;
	if (cfg == NULL || cfg->kernel == NULL || cfg->initrd == NULL)
		return wr_err_set(err, EINVAL, "microvm: no guest kernel and initramfs configured");
	if (access(cfg->kernel, R_OK) < 0)
		return wr_err_sys(err, "microvm: kernel %s", cfg->kernel);
	if (access(cfg->initrd, R_OK) < 0)
		return wr_err_sys(err, "microvm: initramfs %s", cfg->initrd);
	if (readable_by_qemu("kernel", cfg->kernel, err) < 0 ||
	    readable_by_qemu("initramfs", cfg->initrd, err) < 0)
		return -1;
	char *qemu = wr_find_in_path(cfg->qemu ? cfg->qemu : "qemu-system-x86_64");
	if (qemu == NULL)
		return wr_err_set(err, ENOENT, "microvm: %s not found",
				  cfg->qemu ? cfg->qemu : "qemu-system-x86_64");
	const char *accel = cfg->accel ? cfg->accel : "auto";
	bool kvm_ok = false;
	int kfd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (kfd >= 0) {
		kvm_ok = true;
		close(kfd);
	}
	if (strcmp(accel, "auto") == 0)
		accel = kvm_ok ? "kvm" : "tcg";
	else if (strcmp(accel, "kvm") == 0 && !kvm_ok) {
		free(qemu);
		return wr_err_field(err, "accel",
				    "microvm: accel kvm asked for, /dev/kvm unusable");
	} else if (strcmp(accel, "tcg") != 0 && strcmp(accel, "kvm") != 0) {
		free(qemu);
		return wr_err_field(err, "accel", "microvm: accel must be auto, kvm or tcg");
	}
	const char *state = cfg->state_dir ? cfg->state_dir : "/var/lib/warren";
	const char *run = cfg->run_dir ? cfg->run_dir : "/run/warren";
	wr_mvm.qemu = qemu;
	wr_mvm.kernel = strdup(cfg->kernel);
	wr_mvm.initrd = strdup(cfg->initrd);
	wr_mvm.kvm = strcmp(accel, "kvm") == 0;
	wr_mvm.tsc_khz = host_tsc_khz();
	if (asprintf(&wr_mvm.state_dir, "%s/microvm", state) < 0 ||
	    asprintf(&wr_mvm.run_dir, "%s/microvm", run) < 0)
		return wr_err_set(err, ENOMEM, "microvm: out of memory");
	if (wr_mkdir_p(wr_mvm.state_dir, 0700, err) < 0 ||
	    wr_mkdir_p(wr_mvm.run_dir, 0700, err) < 0)
		return wr_err_wrap(err, "microvm");
	if (cfg->template_dir == NULL) {
		if (asprintf(&wr_mvm.template_dir, "%s/microvm-templates", run) < 0)
			return wr_err_set(err, ENOMEM, "microvm: out of memory");
	} else if (*cfg->template_dir) {
		wr_mvm.template_dir = strdup(cfg->template_dir);
	}
	if (wr_mvm.template_dir && wr_mkdir_p(wr_mvm.template_dir, 0700, err) < 0)
		return wr_err_wrap(err, "microvm templates");
	if (wr_mvm.template_dir)
		wr_vm_tmpl_sweep();
	if (wr_qemu_init(cfg->cgroup_base ? cfg->cgroup_base : "warren-microvm", err) < 0)
		return wr_err_wrap(err, "microvm");
	wr_mvm.adoptable = cfg->adoptable;
	wr_mvm.ready = true;
	return 0;
}

const char *wr_microvm_accel(void)
{
	return wr_mvm.kvm ? "kvm" : "tcg";
}

/* ---- the QEMU process ------------------------------------------------------ */

/* QEMU's fds (qemu_proc.c hands them over as 3, 4, ...). The channels are
 * listening sockets in the VM's directory (chardev server=on,wait=off), so
 * a restarted daemon connects to them again. QEMU picks a set's fd by
 * access mode and probes read-only first, so the writable disk's set holds
 * a read-only and a read-write fd. */
enum { FD_AGENT = 3, FD_QMP, FD_CONSOLE, FD_IMAGE, FD_RW, FD_RW_RO, FD_END };
#define N_FDS (FD_END - FD_AGENT)

#define ARG(...)                                                                                   \
	do {                                                                                       \
		if (n + 1 >= WR_ARRAY_SIZE(argv) || asprintf(&argv[n++], __VA_ARGS__) < 0)         \
			goto nomem;                                                                \
	} while (0)

static int spawn_qemu(struct wr_vm *vm, const struct wr_vm_spec *spec, const struct vm_boot *boot,
		      const int *fds, int log_fd, int mem_fd, wr_err *err)
{
	/* what QEMU 7.2 opens by path (plain open(), no fd form): bound
	 * read-only into its jail; guest RAM read-write (7.2 opens it O_RDWR
	 * even for a private mapping) */
	struct wr_qemu_file files[4] = {{wr_mvm.kernel, -1, "kernel", false},
					{wr_mvm.initrd, -1, "initrd", false},
					{NULL, mem_fd, "mem", true}};
	size_t n_files = boot->mem && !boot->mem_ram ? 3 : 2;
	char *argv[72] = {0};
	size_t n = 0;
	char netdev[256], nic[128], resolv[600];
	int r;
	if (spec->net) {
		/* the NIC, and (a sandbox's namespace) where its DNS goes */
		if ((r = wr_qemu_net_args("virtio-net-device", netdev, sizeof(netdev), nic,
					  sizeof(nic), err)) < 0 ||
		    (r = wr_qemu_net_resolv(spec->net, vm->dir, resolv, sizeof(resolv),
					    &files[n_files], err)) < 0)
			return r;
		n_files += (size_t)r;
	}
	ARG("%s", wr_mvm.qemu);
	ARG("-M");
	ARG("microvm,acpi=on,rtc=on%s", boot->mem ? ",memory-backend=mem" : "");
	if (boot->mem) {
		/* guest RAM in a file: shared with the template's file while a
		 * template is made (so the snapshot needs no RAM copy:
		 * x-ignore-shared), a private copy-on-write mapping of it in a
		 * restore. QEMU 7.2 opens mem-path itself: the file we opened,
		 * bound into its jail as /mem. */
		ARG("-object");
		if (boot->mem_ram) /* a state restore: the stream fills it */
			ARG("memory-backend-ram,id=mem,size=%lluM",
			    (unsigned long long)(spec->memory_bytes >> 20));
		else
			ARG("memory-backend-file,id=mem,size=%lluM,mem-path=/mem,share=%s",
			    (unsigned long long)(spec->memory_bytes >> 20),
			    boot->share ? "on" : "off");
	}
	if (boot->incoming) {
		ARG("-incoming");
		ARG("defer");
	}
	ARG("-accel");
	if (wr_mvm.kvm)
		ARG("kvm");
	else
		ARG("tcg,tb-size=%u", WR_QEMU_TCG_TB_MIB);
	if (wr_mvm.kvm) {
		ARG("-cpu");
		ARG("host");
	}
	ARG("-m");
	ARG("%llu", (unsigned long long)(spec->memory_bytes >> 20));
	ARG("-smp");
	ARG("%u", spec->cpus);
	ARG("-name"); /* for ps: the kernel command line of a restore is its template's */
	ARG("%s", vm->id);
	ARG("-nodefaults");
	ARG("-no-user-config");
	ARG("-nographic");
	ARG("-no-reboot");
	ARG("-kernel");
	ARG("/kernel");
	ARG("-initrd");
	ARG("/initrd");
	ARG("-append");
	char tsc[48] = "";
	if (!wr_mvm.kvm && wr_mvm.tsc_khz)
		snprintf(tsc, sizeof(tsc), " tsc_early_khz=%lu", wr_mvm.tsc_khz);
	ARG("console=ttyS0 quiet panic=-1%s warren.hostname=%s warren.root=%s "
	    "warren.rw=serial:warren-rw%s%s",
	    tsc, boot->hostname, spec->image ? "serial:warren-image" : "none", spec->net ? " " : "",
	    spec->net ? wr_qemu_net_cmdline() : "");
	if (spec->net) {
		ARG("-netdev");
		ARG("%s", netdev);
		ARG("-device");
		ARG("%s", nic);
	}
	ARG("-chardev");
	ARG("socket,id=con,fd=%d,server=on,wait=off", FD_CONSOLE);
	ARG("-serial");
	ARG("chardev:con");
	ARG("-chardev");
	ARG("socket,id=qmp,fd=%d,server=on,wait=off", FD_QMP);
	ARG("-mon");
	ARG("chardev=qmp,mode=control");
	ARG("-device");
	ARG("virtio-serial-device");
	ARG("-chardev");
	ARG("socket,id=agent,fd=%d,server=on,wait=off", FD_AGENT);
	ARG("-device");
	ARG("virtserialport,chardev=agent,name=warren.agent");
	if (spec->image) {
		ARG("-add-fd");
		ARG("fd=%d,set=1", FD_IMAGE);
		ARG("-drive");
		ARG("file=/dev/fdset/1,file.locking=off,if=none,id=img,format=raw,read-only=on");
		ARG("-device");
		ARG("virtio-blk-device,drive=img,serial=warren-image");
	}
	/* no image locking: every file is the VM's own or read-only, and
	 * the OFD locks of a set's two fds conflict when a restore
	 * activates its disks */
	ARG("-add-fd");
	ARG("fd=%d,set=2", FD_RW);
	ARG("-add-fd");
	ARG("fd=%d,set=2", FD_RW_RO);
	ARG("-drive");
	ARG("file=/dev/fdset/2,file.locking=off,if=none,id=rw,format=raw,discard=unmap");
	ARG("-device");
	ARG("virtio-blk-device,drive=rw,serial=warren-rw");
	/* QEMU's own seccomp filter: no new processes, no set*id (its uid
	 * is set before exec: qemu_proc.c), no obsolete syscalls, no
	 * scheduler or resource changes */
	ARG("-sandbox");
	ARG("on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny");
	argv[n] = NULL;
	struct wr_qemu_spawn sp = {.id = vm->id,
				   .argv = argv,
				   .fds = fds,
				   .n_fds = N_FDS,
				   .log_fd = log_fd,
				   .files = files,
				   .n_files = n_files,
				   .netns_fd1 = wr_qemu_net_fd1(spec->net),
				   .kvm = wr_mvm.kvm,
				   .memory_bytes = spec->memory_bytes,
				   .cpus = spec->cpus,
				   .die_with_parent = !wr_mvm.adoptable};
	r = wr_qemu_spawn(&vm->qp, &sp, err);
	goto out;
nomem:
	r = wr_err_set(err, ENOMEM, "qemu arguments: out of memory");
out:
	for (size_t i = 0; i < n; i++)
		free(argv[i]);
	return r;
}

/* ---- create / destroy ------------------------------------------------------- */

static void vm_free(struct wr_vm *vm)
{
	wr_vm_reader_stop(vm);
	if (vm->qmp)
		wr_qmp_close(&vm->qmp);
	for (int *fd = &vm->agent; fd <= &vm->console; fd++)
		if (*fd >= 0)
			close(*fd);
	for (int i = 0; i < 2; i++)
		if (vm->stop[i] >= 0)
			close(vm->stop[i]);
	json_decref(vm->hello);
	/* QEMU ended (qemu_stop) before its cgroup, jail and files go */
	wr_qemu_release(&vm->qp);
	free(vm->rw_path);
	free(vm->dir);
	pthread_mutex_destroy(&vm->lock);
	pthread_mutex_destroy(&vm->write_lock);
	pthread_mutex_destroy(&vm->qmp_lock);
	pthread_cond_destroy(&vm->cond);
	free(vm);
}

/* Ends QEMU: quit through QMP when asked (a clean stop), then SIGKILL
 * after grace_ms; waits for its end. */
static void qemu_stop(struct wr_vm *vm, bool quit, int grace_ms)
{
	if (vm->qp.pid <= 0)
		return;
	if (quit && vm->qmp) {
		pthread_mutex_lock(&vm->qmp_lock);
		wr_qmp_cmd(vm->qmp, "quit", NULL, grace_ms, NULL, NULL);
		pthread_mutex_unlock(&vm->qmp_lock);
	}
	wr_qemu_stop(&vm->qp, quit ? grace_ms : 0);
}

/* QEMU's own last words (its stderr, <dir>/qemu.log) after an error. */
static void append_qemu_log(struct wr_vm *vm, wr_err *err)
{
	char path[512], buf[512];
	snprintf(path, sizeof(path), "%s/qemu.log", vm->dir);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || *err == NULL || (*err)->msg == NULL) {
		if (fd >= 0)
			close(fd);
		return;
	}
	off_t end = lseek(fd, 0, SEEK_END);
	off_t from = end > (off_t)sizeof(buf) - 1 ? end - (off_t)sizeof(buf) + 1 : 0;
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, from);
	close(fd);
	if (n <= 0)
		return;
	buf[n] = '\0';
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = '\0';
	char *line = strrchr(buf, '\n');
	line = line ? line + 1 : buf;
	char *m = NULL;
	if (*line && asprintf(&m, "%s (qemu: %s)", (*err)->msg, line) >= 0) {
		free((*err)->msg);
		(*err)->msg = m;
	}
}

static int check_spec(const struct wr_vm_spec *in, struct wr_vm_spec *spec, wr_err *err)
{
	*spec = *in;
	if (spec->memory_bytes == 0)
		spec->memory_bytes = 256ull << 20;
	if (spec->disk_bytes == 0)
		spec->disk_bytes = 1ull << 30;
	if (spec->cpus == 0)
		spec->cpus = 1;
	if (spec->boot_timeout_ms == 0)
		spec->boot_timeout_ms = 60000;
	if (spec->memory_bytes < (64ull << 20) || spec->memory_bytes > (64ull << 30))
		return wr_err_field(err, "memory", "a microVM takes 64 MiB to 64 GiB of memory");
	if (spec->disk_bytes < (16ull << 20) || spec->disk_bytes > (1ull << 40))
		return wr_err_field(err, "disk", "a microVM's disk is 16 MiB to 1 TiB");
	if (spec->cpus > 64)
		return wr_err_field(err, "cpu", "a microVM has 1 to 64 vCPUs");
	if (spec->image && access(spec->image, R_OK) < 0)
		return wr_err_sys(err, "image %s", spec->image);
	return 0;
}

static struct wr_vm *vm_new(void)
{
	struct wr_vm *vm = calloc(1, sizeof(*vm));
	if (vm == NULL)
		return NULL;
	vm->agent = vm->console = vm->qp.pidfd = -1;
	vm->stop[0] = vm->stop[1] = -1;
	pthread_mutex_init(&vm->lock, NULL);
	pthread_mutex_init(&vm->write_lock, NULL);
	pthread_mutex_init(&vm->qmp_lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&vm->cond, &ca);
	pthread_condattr_destroy(&ca);
	return vm;
}

int wr_vm_alloc(const char *id, struct wr_vm **out, wr_err *err)
{
	struct wr_vm *vm = vm_new();
	if (vm == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	int r;
	if (id)
		snprintf(vm->id, sizeof(vm->id), "%s", id);
	else if (wr_random_id(vm->id) < 0) {
		r = wr_err_set(err, EIO, "no randomness for an id");
		goto fail;
	}
	if (asprintf(&vm->dir, "%s/%s", wr_mvm.run_dir, vm->id) < 0 ||
	    asprintf(&vm->rw_path, "%s/rw.ext4", vm->dir) < 0) {
		r = wr_err_set(err, ENOMEM, "out of memory");
		goto fail;
	}
	/* its uid and its directory (not ours to remove when it existed) */
	if ((r = wr_qemu_prepare(&vm->qp, vm->dir, err)) < 0)
		goto fail;
	*out = vm;
	return 0;
fail:
	vm_free(vm);
	return wr_err_wrap(err, "microvm");
}

int wr_vm_attach_fds(int agent, int console, struct wr_vm **out, wr_err *err)
{
	struct wr_vm *vm = vm_new();
	if (vm == NULL) {
		close(agent);
		close(console);
		return wr_err_set(err, ENOMEM, "out of memory");
	}
	vm->agent = agent;
	vm->console = console;
	snprintf(vm->id, sizeof(vm->id), "attached");
	if (wr_vm_reader_start(vm, err) < 0) {
		vm_free(vm);
		return -1;
	}
	*out = vm;
	return 0;
}

int wr_vm_launch(struct wr_vm *vm, const struct wr_vm_spec *spec, const struct vm_boot *boot,
		 int mem_fd, wr_err *err)
{
	_cleanup_close_ int image = -1, rw = -1, rw_ro = -1, log = -1, dfd = -1, ag = -1, qm = -1,
			    co = -1;
	if (spec->image && (image = open(spec->image, O_RDONLY | O_CLOEXEC)) < 0)
		return wr_err_sys(err, "image %s", spec->image);
	rw = open(vm->rw_path, O_RDWR | O_CLOEXEC);
	if (rw < 0)
		return wr_err_sys(err, "open %s", vm->rw_path);
	rw_ro = open(vm->rw_path, O_RDONLY | O_CLOEXEC);
	if ((dfd = open(vm->dir, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
		return wr_err_sys(err, "open %s", vm->dir);
	if ((ag = wr_qemu_listen(dfd, "agent.sock", err)) < 0 ||
	    (qm = wr_qemu_listen(dfd, "qmp.sock", err)) < 0 ||
	    (co = wr_qemu_listen(dfd, "console.sock", err)) < 0)
		return -1;
	log = openat(dfd, "qemu.log", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (log < 0)
		return wr_err_sys(err, "open %s/qemu.log", vm->dir);
	if (mem_fd >= 0 && (fchown(mem_fd, 0, WR_QEMU_GID) < 0 || fchmod(mem_fd, 0660) < 0))
		return wr_err_sys(err, "guest RAM file: give it to QEMU's group");
	vm->ram_backend = boot->mem;
	vm->memory_bytes = spec->memory_bytes;
	vm->disk_bytes = spec->disk_bytes;
	vm->cpus = spec->cpus;
	vm->nic = spec->net != NULL;
	/* QEMU's fds in the order of FD_AGENT.. */
	int fds[N_FDS] = {ag, qm, co, image, rw, rw_ro};
	int r = spawn_qemu(vm, spec, boot, fds, log, mem_fd, err);
	if (r < 0)
		return r;
	/* the sockets listen already: these connect before QEMU accepts */
	int qfd;
	if ((vm->agent = wr_qemu_connect(dfd, "agent.sock", err)) < 0 ||
	    (vm->console = wr_qemu_connect(dfd, "console.sock", err)) < 0 ||
	    (qfd = wr_qemu_connect(dfd, "qmp.sock", err)) < 0)
		return -1;
	if ((r = wr_vm_reader_start(vm, err)) < 0) {
		close(qfd);
		return r;
	}
	return wr_qmp_open(qfd, 30000, &vm->qmp, err);
}

void wr_vm_fail(struct wr_vm *vm, wr_err *err)
{
	if (vm->qp.pid > 0) {
		char *tail = wr_vm_console_tail(vm);
		qemu_stop(vm, false, 0);
		append_qemu_log(vm, err);
		if (tail && *tail && *err && (*err)->msg) {
			/* a boot failure's best explanation is the guest's
			 * console: its last lines, printable, on one line */
			char *last = tail + strlen(tail);
			int lines = 0;
			while (last > tail && lines < 4)
				if (*--last == '\n')
					lines++;
			for (char *c = last; *c; c++)
				if (*c == '\n' || *c == '\r' || *c == '\t')
					*c = ' ';
				else if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f)
					*c = '?';
			char *m = NULL;
			if (asprintf(&m, "%s (guest console: %s)", (*err)->msg, last) >= 0) {
				free((*err)->msg);
				(*err)->msg = m;
			}
		}
		free(tail);
	}
	vm_free(vm);
}

int wr_vm_boot_cold(const struct wr_vm_spec *spec, const struct vm_boot *boot, int mem_fd,
		    struct wr_vm **out, wr_err *err)
{
	struct wr_vm *vm = NULL;
	int r = wr_vm_alloc(spec->id, &vm, err);
	if (r < 0)
		return r;
	uint64_t start = now_ns();
	if ((r = wr_vm_disk_make(vm->rw_path, spec->disk_bytes, err)) < 0 ||
	    (r = wr_vm_launch(vm, spec, boot ? boot : &(struct vm_boot){.hostname = vm->id}, mem_fd,
			      err)) < 0 ||
	    (r = wr_vm_wait_hello(vm, start + spec->boot_timeout_ms * 1000000ull, err)) < 0) {
		wr_vm_fail(vm, err);
		return r;
	}
	vm->ready_ns = now_ns() - start;
	*out = vm;
	return 0;
}

int wr_vm_create(const struct wr_vm_spec *in, struct wr_vm **out, wr_err *err)
{
	if (!wr_mvm.ready)
		return wr_err_set(err, EINVAL, "microvm: tier not initialised");
	struct wr_vm_spec spec;
	if (check_spec(in, &spec, err) < 0)
		return wr_err_wrap(err, "create microvm");
	char note[256] = "";
	bool made = false;
	if (!spec.cold && wr_mvm.template_dir) {
		/* from the image's template (made by this call when there is
		 * none); any failure there falls back to a cold boot */
		wr_err terr = NULL;
		made = wr_vm_tmpl_restore(&spec, out, &terr) == 0;
		if (!made)
			snprintf(note, sizeof(note), "%s",
				 terr && terr->msg ? terr->msg : "failed");
		wr_err_free(&terr);
	}
	if (!made && wr_vm_boot_cold(&spec, NULL, -1, out, err) < 0)
		return wr_err_wrap(err, "create microvm");
	snprintf((*out)->tmpl_note, sizeof((*out)->tmpl_note), "%s", note);
	/* what a restarted daemon needs to adopt it (wr_vm_adopt) */
	json_t *extra = json_pack("{s:b, s:I, s:I, s:b, s:b}", "restored", (*out)->restored,
				  "boot_ms", (json_int_t)(*out)->boot_ms, "ready_ms",
				  (json_int_t)((*out)->ready_ns / 1000000), "ram_backend",
				  (*out)->ram_backend, "nic", (*out)->nic);
	int r = wr_qemu_save(&(*out)->qp, extra, err);
	json_decref(extra);
	if (r < 0) {
		wr_vm_destroy(out, NULL);
		return wr_err_wrap(err, "create microvm");
	}
	return 0;
}

int wr_vm_adopt(const char *id, pid_t pid_hint, struct wr_vm **out, wr_err *err)
{
	if (!wr_mvm.ready)
		return wr_err_set(err, EINVAL, "microvm: tier not initialised");
	struct wr_vm *vm = vm_new();
	if (vm == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	snprintf(vm->id, sizeof(vm->id), "%s", id);
	json_t *st = NULL;
	_cleanup_close_ int dfd = -1;
	int r, qfd = -1;
	if (asprintf(&vm->dir, "%s/%s", wr_mvm.run_dir, vm->id) < 0 ||
	    asprintf(&vm->rw_path, "%s/rw.ext4", vm->dir) < 0) {
		r = wr_err_set(err, ENOMEM, "out of memory");
		goto fail;
	}
	if ((r = wr_qemu_adopt(&vm->qp, vm->id, vm->dir, pid_hint, &st, err)) < 0)
		goto fail;
	if ((dfd = open(vm->dir, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) {
		r = wr_err_sys(err, "open %s", vm->dir);
		goto fail;
	}
	/* the previous daemon's connections died with it: QEMU listens again */
	if ((vm->agent = r = wr_qemu_connect(dfd, "agent.sock", err)) < 0 ||
	    (vm->console = r = wr_qemu_connect(dfd, "console.sock", err)) < 0 ||
	    (qfd = r = wr_qemu_connect(dfd, "qmp.sock", err)) < 0)
		goto fail;
	vm->restored = json_is_true(json_object_get(st, "restored"));
	json_t *rb = json_object_get(st, "ram_backend");
	vm->ram_backend = rb ? json_is_true(rb) : vm->restored;
	vm->nic = json_is_true(json_object_get(st, "nic"));
	vm->boot_ms = (uint64_t)json_integer_value(json_object_get(st, "boot_ms"));
	vm->ready_ns = (uint64_t)json_integer_value(json_object_get(st, "ready_ms")) * 1000000ull;
	/* the guest said hello to the previous daemon */
	vm->hello = json_pack("{s:b}", "ok", 1);
	if ((r = wr_qmp_open(qfd, 10000, &vm->qmp, err)) < 0)
		goto fail;
	/* a paused guest (a paused sandbox) cannot answer now: the PING goes
	 * out anyway and the reader drops the stream up to its PONG whenever
	 * the guest runs again; frames of later commands come after it */
	char status[64] = "";
	if ((r = wr_qmp_status(vm->qmp, status, sizeof(status), err)) < 0 ||
	    (r = wr_vm_resync(vm, strcmp(status, "running") == 0 ? 15000 : 0, err)) < 0)
		goto fail;
	json_decref(st);
	*out = vm;
	return 0;
fail:
	json_decref(st);
	/* never a QEMU left behind: killed, its cgroup, jail and files gone */
	qemu_stop(vm, false, 0);
	vm_free(vm);
	return wr_err_wrap(err, "adopt microvm %s", id);
}

int wr_vm_destroy(struct wr_vm **pvm, wr_err *err)
{
	(void)err;
	struct wr_vm *vm = *pvm;
	if (vm == NULL)
		return 0;
	*pvm = NULL;
	qemu_stop(vm, true, 3000);
	vm_free(vm);
	return 0;
}

static int qmp_simple(struct wr_vm *vm, const char *cmd, wr_err *err)
{
	pthread_mutex_lock(&vm->qmp_lock);
	int r = vm->qmp ? wr_qmp_cmd(vm->qmp, cmd, NULL, 10000, NULL, err)
			: wr_err_set(err, EIO, "microvm: no monitor");
	pthread_mutex_unlock(&vm->qmp_lock);
	return r;
}

int wr_vm_pause(struct wr_vm *vm, wr_err *err)
{
	return qmp_simple(vm, "stop", err);
}

int wr_vm_resume(struct wr_vm *vm, wr_err *err)
{
	return qmp_simple(vm, "cont", err);
}

int wr_vm_paused(struct wr_vm *vm, wr_err *err)
{
	char st[64];
	pthread_mutex_lock(&vm->qmp_lock);
	int r = vm->qmp ? wr_qmp_status(vm->qmp, st, sizeof(st), err)
			: wr_err_set(err, EIO, "microvm: no monitor");
	pthread_mutex_unlock(&vm->qmp_lock);
	if (r < 0)
		return r;
	/* postmigrate: stopped after a save of its state (a cont runs it) */
	return strcmp(st, "paused") == 0 || strcmp(st, "postmigrate") == 0;
}

int wr_vm_usage(struct wr_vm *vm, struct wr_cgroup_stats *st, wr_err *err)
{
	if (vm->qp.cg == NULL)
		return wr_err_set(err, ENOENT, "microvm: no cgroup");
	return wr_cgroup_stats(vm->qp.cg, st, err);
}

uint64_t wr_vm_boot_ms(const struct wr_vm *vm)
{
	return vm->boot_ms;
}

uint64_t wr_vm_ready_ms(const struct wr_vm *vm)
{
	return vm->ready_ns / 1000000;
}

bool wr_vm_restored(const struct wr_vm *vm)
{
	return vm->restored;
}

const char *wr_vm_template_note(const struct wr_vm *vm)
{
	return vm->tmpl_note;
}

const char *wr_vm_id(const struct wr_vm *vm)
{
	return vm->id;
}

pid_t wr_vm_qemu_pid(const struct wr_vm *vm)
{
	return vm->qp.pid;
}

int wr_vm_cgroup_v2_fd(const struct wr_vm *vm)
{
	return wr_qemu_cgroup_v2_fd(&vm->qp);
}

char *wr_vm_console_tail(struct wr_vm *vm)
{
	pthread_mutex_lock(&vm->lock);
	char *s = malloc(vm->ring_len + 1);
	if (s) {
		size_t start = (vm->ring_pos + VM_CONSOLE_RING - vm->ring_len) % VM_CONSOLE_RING;
		for (size_t i = 0; i < vm->ring_len; i++)
			s[i] = vm->ring[(start + i) % VM_CONSOLE_RING];
		s[vm->ring_len] = '\0';
	}
	pthread_mutex_unlock(&vm->lock);
	return s;
}

int wr_vm_kill(struct wr_vm *vm)
{
	return wr_qemu_kill(&vm->qp);
}

size_t wr_microvm_sweep(bool (*keep)(const char *id, void *ctx), void *ctx)
{
	/* Left by a daemon that died: every VM directory whose id keep()
	 * refuses, its QEMU (still running: nothing ties it to the daemon)
	 * and its cgroup. */
	if (!wr_mvm.ready)
		return 0;
	/* and saved states (keep_memory=false) of sandboxes no longer live */
	char saved[900];
	snprintf(saved, sizeof(saved), "%s/saved", wr_mvm.state_dir);
	return wr_qemu_sweep(wr_mvm.run_dir, keep, ctx) + wr_qsnap_sweep(saved, keep, ctx);
}
