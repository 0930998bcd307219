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

static bool keep_not_vm(const char *name, void *ctx)
{
	(void)ctx;
	return strncmp(name, "vm-", 3) != 0;
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
	if (wr_cgroup_root_open(cfg->cgroup_base ? cfg->cgroup_base : "warren-microvm",
				&wr_mvm.cgroot, err) < 0)
		return wr_err_wrap(err, "microvm cgroups");
	/* no VM of this process exists yet: a vm-* there was left (the base
	 * may be the container tier's: its cgroups are not ours) */
	wr_cgroup_sweep(wr_mvm.cgroot, keep_not_vm, NULL, NULL);
	wr_mvm.ready = true;
	return 0;
}

const char *wr_microvm_accel(void)
{
	return wr_mvm.kvm ? "kvm" : "tcg";
}

/* ---- the QEMU process ------------------------------------------------------ */

/* QEMU picks a set's fd by access mode and probes read-only first, so the
 * writable disk's set holds a read-only and a read-write fd. */
enum { FD_AGENT = 3, FD_QMP, FD_CONSOLE, FD_IMAGE, FD_RW, FD_LOG, FD_RW_RO, FD_MEM, FD_FIRST_FREE };
#define N_FDS (FD_FIRST_FREE - FD_AGENT)

/* Child half: async-signal-safe only (the caller may be multi-threaded). */
static __attribute__((noreturn)) void qemu_child(char *const *argv, const int *fds, size_t n,
						 const int *cg, int ncg)
{
	/* into its cgroup first: these fds may sit where the dups go */
	for (int i = 0; i < ncg; i++)
		if (write(cg[i], "0", 1) != 1)
			_exit(126);
	/* fds to a range above every target first, so no dup2 clobbers a
	 * source still needed */
	int high[N_FDS];
	if (n > N_FDS)
		_exit(126);
	for (size_t i = 0; i < n; i++) {
		high[i] = fds[i] < 0 ? -1 : fcntl(fds[i], F_DUPFD, 100);
		if (fds[i] >= 0 && high[i] < 0)
			_exit(126);
	}
	for (size_t i = 0; i < n; i++)
		if (high[i] >= 0 && dup2(high[i], FD_AGENT + (int)i) < 0)
			_exit(126);
	wr_close_range(FD_FIRST_FREE, ~0u, 0);
	int nul = open("/dev/null", O_RDWR);
	if (nul >= 0) {
		dup2(nul, 0);
		dup2(nul, 1);
	}
	dup2(FD_LOG, 2); /* QEMU's own messages: <dir>/qemu.log */
	close(FD_LOG);
	/* a VM never outlives the process that holds its channels */
	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	/* its own network (no interface but a down loopback: no network at
	 * all until the network pool gives it one), mounts, IPC and UTS; no
	 * privilege gained by exec; -runas drops to its own uid once QEMU
	 * opened its memory backend, kernel and initramfs */
	if (unshare(CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS) < 0 ||
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		static const char m[] = "warren: cannot confine QEMU (namespaces, no_new_privs)\n";
		if (write(2, m, sizeof(m) - 1) < 0)
			_exit(126);
		_exit(126);
	}
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	execv(argv[0], argv);
	_exit(127);
}

#define ARG(...)                                                                                   \
	do {                                                                                       \
		if (n + 1 >= WR_ARRAY_SIZE(argv) || asprintf(&argv[n++], __VA_ARGS__) < 0)         \
			goto nomem;                                                                \
	} while (0)

static int spawn_qemu(struct wr_vm *vm, const struct wr_vm_spec *spec, const struct vm_boot *boot,
		      const int *fds, wr_err *err)
{
	/* its cgroup: guest RAM plus QEMU's own (TCG's translation cache,
	 * device buffers), its threads, its vCPUs' worth of CPU */
	int cg[8], ncg = 0;
	char cgname[80];
	snprintf(cgname, sizeof(cgname), "vm-%s", vm->id);
	struct wr_cgroup_limits lim;
	wr_cgroup_limits_default(&lim);
	lim.memory_bytes = spec->memory_bytes + (256ull << 20);
	lim.pids = 256;
	lim.cpu_quota_us = 100000ull * spec->cpus;
	lim.cpu_period_us = 100000;
	if (wr_cgroup_create(wr_mvm.cgroot, cgname, &lim, &vm->cg, err) < 0 ||
	    wr_cgroup_create_leaf(vm->cg, "q", &vm->cg_leaf, err) < 0 ||
	    (ncg = wr_cgroup_procs_fds(vm->cg_leaf, false, cg, 8, err)) < 0)
		return wr_err_wrap(err, "QEMU's cgroup");
	char *argv[64] = {0};
	size_t n = 0;
	int r;
	ARG("%s", wr_mvm.qemu);
	ARG("-M");
	ARG("microvm,acpi=on,rtc=on%s", boot->mem ? ",memory-backend=mem" : "");
	if (boot->mem) {
		/* guest RAM in a file: shared with the template's file while a
		 * template is made (so the snapshot needs no RAM copy:
		 * x-ignore-shared), a private copy-on-write mapping of it in a
		 * restore. QEMU 7.2 opens mem-path itself: the path of the fd
		 * we opened, so it names no file of ours. */
		ARG("-object");
		ARG("memory-backend-file,id=mem,size=%lluM,mem-path=/proc/self/fd/%d,share=%s",
		    (unsigned long long)(spec->memory_bytes >> 20), FD_MEM,
		    boot->share ? "on" : "off");
	}
	if (boot->incoming) {
		ARG("-incoming");
		ARG("defer");
	}
	ARG("-accel");
	ARG("%s", wr_mvm.kvm ? "kvm" : "tcg");
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
	ARG("%s", wr_mvm.kernel);
	ARG("-initrd");
	ARG("%s", wr_mvm.initrd);
	ARG("-append");
	char tsc[48] = "";
	if (!wr_mvm.kvm && wr_mvm.tsc_khz)
		snprintf(tsc, sizeof(tsc), " tsc_early_khz=%lu", wr_mvm.tsc_khz);
	ARG("console=ttyS0 quiet panic=-1%s warren.hostname=%s warren.root=%s "
	    "warren.rw=serial:warren-rw",
	    tsc, boot->hostname, spec->image ? "serial:warren-image" : "none");
	ARG("-chardev");
	ARG("socket,id=con,fd=%d", FD_CONSOLE);
	ARG("-serial");
	ARG("chardev:con");
	ARG("-chardev");
	ARG("socket,id=qmp,fd=%d", FD_QMP);
	ARG("-mon");
	ARG("chardev=qmp,mode=control");
	ARG("-device");
	ARG("virtio-serial-device");
	ARG("-chardev");
	ARG("socket,id=agent,fd=%d", FD_AGENT);
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
	/* QEMU's own seccomp filter: no new processes, no setuid, no
	 * obsolete syscalls, no scheduler or resource changes */
	/* QEMU 7.2 installs its seccomp filter before -runas changes its uid,
	 * so elevateprivileges=deny would kill that change: set*id stays
	 * allowed, and cannot elevate anything once the uid changed (no
	 * capabilities left, no_new_privs) */
	ARG("-runas");
	ARG("%u:%u", vm->uid, vm->uid);
	ARG("-sandbox");
	ARG("on,obsolete=deny,elevateprivileges=allow,spawn=deny,resourcecontrol=deny");
	argv[n] = NULL;
	pid_t pid = fork();
	if (pid == 0)
		qemu_child(argv, fds, N_FDS, cg, ncg);
	if (pid < 0) {
		r = wr_err_sys(err, "fork qemu");
		goto out;
	}
	vm->pid = pid;
	r = 0;
	goto out;
nomem:
	r = wr_err_set(err, ENOMEM, "qemu arguments: out of memory");
out:
	for (int i = 0; i < ncg; i++)
		close(cg[i]);
	for (size_t i = 0; i < n; i++)
		free(argv[i]);
	return r;
}

/* ---- QEMU's uids ------------------------------------------------------------ */

/* Each QEMU runs as a uid (and gid) of its own, WR_MVM_UID_BASE + slot:
 * above the container tier's ranges (src/isolate/idmap.h: 0x10000000 up
 * to 0x50000000), so no QEMU shares an id with another or with a
 * container's mapped users. Slots are this process's. */
#define WR_MVM_UID_BASE 0x50000000u
#define WR_MVM_UID_SLOTS 65536u
static pthread_mutex_t g_uid_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t g_uid_used[WR_MVM_UID_SLOTS / 8];
static unsigned g_uid_next;

static uid_t uid_get(void)
{
	uid_t u = 0;
	pthread_mutex_lock(&g_uid_lock);
	for (unsigned i = 0; i < WR_MVM_UID_SLOTS && u == 0; i++) {
		unsigned s = (g_uid_next + i) % WR_MVM_UID_SLOTS;
		if (!(g_uid_used[s / 8] & (1u << (s % 8)))) {
			g_uid_used[s / 8] |= (uint8_t)(1u << (s % 8));
			g_uid_next = s + 1;
			u = WR_MVM_UID_BASE + s;
		}
	}
	pthread_mutex_unlock(&g_uid_lock);
	return u;
}

static void uid_put(uid_t u)
{
	if (u < WR_MVM_UID_BASE)
		return;
	unsigned s = u - WR_MVM_UID_BASE;
	pthread_mutex_lock(&g_uid_lock);
	g_uid_used[s / 8] &= (uint8_t) ~(1u << (s % 8));
	pthread_mutex_unlock(&g_uid_lock);
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
	if (vm->pidfd >= 0)
		close(vm->pidfd);
	if (vm->rw_path)
		unlink(vm->rw_path);
	if (vm->dir) {
		char *log = NULL;
		if (asprintf(&log, "%s/qemu.log", vm->dir) >= 0)
			unlink(log);
		free(log);
		rmdir(vm->dir);
	}
	json_decref(vm->hello);
	/* QEMU is reaped (qemu_stop) before its cgroup goes */
	if (vm->cg_leaf)
		wr_cgroup_close(vm->cg_leaf);
	if (vm->cg)
		wr_cgroup_destroy(&vm->cg, NULL);
	uid_put(vm->uid);
	free(vm->rw_path);
	free(vm->dir);
	pthread_mutex_destroy(&vm->lock);
	pthread_mutex_destroy(&vm->write_lock);
	pthread_mutex_destroy(&vm->qmp_lock);
	pthread_cond_destroy(&vm->cond);
	free(vm);
}

/* Ends QEMU: quit through QMP when asked (a clean stop), then SIGKILL
 * after grace_ms; reaps it. */
static void qemu_stop(struct wr_vm *vm, bool quit, int grace_ms)
{
	if (vm->pid <= 0)
		return;
	if (quit && vm->qmp) {
		pthread_mutex_lock(&vm->qmp_lock);
		wr_qmp_cmd(vm->qmp, "quit", NULL, grace_ms, NULL, NULL);
		pthread_mutex_unlock(&vm->qmp_lock);
	}
	struct pollfd p = {.fd = vm->pidfd, .events = POLLIN};
	if (vm->pidfd < 0 || poll(&p, 1, quit ? grace_ms : 0) <= 0)
		kill(vm->pid, SIGKILL);
	while (waitpid(vm->pid, NULL, 0) < 0 && errno == EINTR)
		;
	vm->pid = 0;
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

int wr_vm_alloc(const char *id, struct wr_vm **out, wr_err *err)
{
	struct wr_vm *vm = calloc(1, sizeof(*vm));
	if (vm == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	vm->agent = vm->console = vm->pidfd = -1;
	vm->stop[0] = vm->stop[1] = -1;
	pthread_mutex_init(&vm->lock, NULL);
	pthread_mutex_init(&vm->write_lock, NULL);
	pthread_mutex_init(&vm->qmp_lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&vm->cond, &ca);
	pthread_condattr_destroy(&ca);
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
	if ((vm->uid = uid_get()) == 0) {
		r = wr_err_set(err, EAGAIN, "microvm: no uid left for QEMU");
		goto fail;
	}
	if (mkdir(vm->dir, 0700) < 0) {
		r = wr_err_sys(err, "mkdir %s", vm->dir);
		free(vm->dir);
		vm->dir = NULL; /* not ours to remove */
		free(vm->rw_path);
		vm->rw_path = NULL;
		goto fail;
	}
	*out = vm;
	return 0;
fail:
	vm_free(vm);
	return r;
}

int wr_vm_attach_fds(int agent, int console, struct wr_vm **out, wr_err *err)
{
	struct wr_vm *vm = calloc(1, sizeof(*vm));
	if (vm == NULL) {
		close(agent);
		close(console);
		return wr_err_set(err, ENOMEM, "out of memory");
	}
	vm->pidfd = -1;
	vm->stop[0] = vm->stop[1] = -1;
	vm->agent = agent;
	vm->console = console;
	snprintf(vm->id, sizeof(vm->id), "attached");
	pthread_mutex_init(&vm->lock, NULL);
	pthread_mutex_init(&vm->write_lock, NULL);
	pthread_mutex_init(&vm->qmp_lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&vm->cond, &ca);
	pthread_condattr_destroy(&ca);
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
	_cleanup_close_ int image = -1, rw = -1, rw_ro = -1, log = -1;
	if (spec->image && (image = open(spec->image, O_RDONLY | O_CLOEXEC)) < 0)
		return wr_err_sys(err, "image %s", spec->image);
	rw = open(vm->rw_path, O_RDWR | O_CLOEXEC);
	if (rw < 0)
		return wr_err_sys(err, "open %s", vm->rw_path);
	int ag[2], qm[2], co[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ag) < 0)
		return wr_err_sys(err, "socketpair");
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, qm) < 0) {
		close(ag[0]);
		close(ag[1]);
		return wr_err_sys(err, "socketpair");
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, co) < 0) {
		close(ag[0]);
		close(ag[1]);
		close(qm[0]);
		close(qm[1]);
		return wr_err_sys(err, "socketpair");
	}
	vm->agent = ag[0];
	vm->console = co[0];
	/* QEMU's fds in the order of FD_AGENT.. */
	char *logp = NULL;
	if (asprintf(&logp, "%s/qemu.log", vm->dir) >= 0)
		log = open(logp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	free(logp);
	rw_ro = open(vm->rw_path, O_RDONLY | O_CLOEXEC);
	int fds[N_FDS] = {ag[1], qm[1], co[1], image, rw, log, rw_ro, mem_fd};
	int r = spawn_qemu(vm, spec, boot, fds, err);
	close(ag[1]);
	close(qm[1]);
	close(co[1]);
	if (r < 0) {
		close(qm[0]);
		return r;
	}
	vm->pidfd = wr_pidfd_open(vm->pid, 0);
	if ((r = wr_vm_reader_start(vm, err)) < 0) {
		close(qm[0]);
		return r;
	}
	return wr_qmp_open(qm[0], 30000, &vm->qmp, err);
}

void wr_vm_fail(struct wr_vm *vm, wr_err *err)
{
	if (vm->pid > 0) {
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
	if (!spec.cold && wr_mvm.template_dir) {
		/* from the image's template (made by this call when there is
		 * none); any failure there falls back to a cold boot */
		wr_err terr = NULL;
		if (wr_vm_tmpl_restore(&spec, out, &terr) == 0)
			return 0;
		snprintf(note, sizeof(note), "%s", terr && terr->msg ? terr->msg : "failed");
		wr_err_free(&terr);
	}
	if (wr_vm_boot_cold(&spec, NULL, -1, out, err) < 0)
		return wr_err_wrap(err, "create microvm");
	snprintf((*out)->tmpl_note, sizeof((*out)->tmpl_note), "%s", note);
	return 0;
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
	return strcmp(st, "paused") == 0;
}

int wr_vm_usage(struct wr_vm *vm, struct wr_cgroup_stats *st, wr_err *err)
{
	if (vm->cg == NULL)
		return wr_err_set(err, ENOENT, "microvm: no cgroup");
	return wr_cgroup_stats(vm->cg, st, err);
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
	return vm->pid;
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
	if (vm->pid > 0 && kill(vm->pid, SIGKILL) < 0 && errno != ESRCH)
		return -errno;
	return 0;
}

size_t wr_microvm_sweep(void)
{
	/* Left by a daemon that died: its QEMUs died with it (PDEATHSIG), their
	 * files did not. Called at start, before any create. */
	size_t n = 0;
	DIR *d = opendir(wr_mvm.run_dir);
	struct dirent *de;
	while (d && (de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		const char *files[] = {"rw.ext4", "qemu.log"};
		for (size_t i = 0; i < 2; i++) {
			char p[600];
			snprintf(p, sizeof(p), "%s/%s/%s", wr_mvm.run_dir, de->d_name, files[i]);
			unlink(p);
		}
		char p[600];
		snprintf(p, sizeof(p), "%s/%s", wr_mvm.run_dir, de->d_name);
		if (rmdir(p) == 0)
			n++;
	}
	if (d)
		closedir(d);
	return n;
}
