/* The full VM tier's core (see vm.h). */
#include "tiers/vm.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "common/util.h"
#include "tiers/qga.h"
#include "tiers/qemu_net.h"
#include "tiers/qemu_proc.h"
#include "tiers/qemu_harvest.h" /* and qemu_snap.h */
#include "tiers/qmp.h"
#include "tiers/vm_vnc.h"

static struct {
	bool ready, kvm, adoptable;
	char *qemu, *qemu_img, *run_dir;
} g;

struct wr_fullvm {
	char id[65];
	struct wr_qemu qp; /* the process, its uid, cgroup and jail */
	int console;	   /* drained into the ring by the console thread */
	struct wr_qmp *qmp;
	struct wr_qga *qga;
	pthread_mutex_t qmp_lock, qga_lock;
	pthread_t con_thread;
	bool con_started;
	char *dir, *overlay;
	struct wr_vm_vnc *vnc;	/* NULL unless asked for (vm_vnc.h) */
	unsigned width, height; /* of the last screenshot (pointer scaling) */
};

int wr_fullvm_init(const struct wr_fullvm_config *cfg, wr_err *err)
{
	if (g.ready)
		return 0;
	const char *qemu = cfg && cfg->qemu ? cfg->qemu : "qemu-system-x86_64";
	const char *img = cfg && cfg->qemu_img ? cfg->qemu_img : "qemu-img";
	if ((g.qemu = wr_find_in_path(qemu)) == NULL)
		return wr_err_set(err, ENOENT, "vm tier: %s not found", qemu);
	if ((g.qemu_img = wr_find_in_path(img)) == NULL)
		return wr_err_set(err, ENOENT, "vm tier: %s not found (Debian: qemu-utils)", img);
	const char *accel = cfg && cfg->accel ? cfg->accel : "auto";
	int kfd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	bool kvm_ok = kfd >= 0;
	if (kfd >= 0)
		close(kfd);
	if (strcmp(accel, "kvm") == 0 && !kvm_ok)
		return wr_err_field(err, "accel",
				    "vm tier: accel kvm asked for, /dev/kvm unusable");
	if (strcmp(accel, "auto") && strcmp(accel, "kvm") && strcmp(accel, "tcg"))
		return wr_err_field(err, "accel", "vm tier: accel must be auto, kvm or tcg");
	g.kvm = strcmp(accel, "kvm") == 0 || (strcmp(accel, "auto") == 0 && kvm_ok);
	const char *run = cfg && cfg->run_dir ? cfg->run_dir : "/run/warren";
	if (asprintf(&g.run_dir, "%s/vm", run) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	if (wr_mkdir_p(g.run_dir, 0700, err) < 0)
		return wr_err_wrap(err, "vm tier");
	if (wr_qemu_init(cfg && cfg->cgroup_base ? cfg->cgroup_base : "warren-microvm", err) < 0)
		return wr_err_wrap(err, "vm tier");
	g.adoptable = cfg && cfg->adoptable;
	if (wr_fullvm_fw_init(cfg, err) < 0)
		return wr_err_wrap(err, "vm tier");
	g.ready = true;
	return 0;
}

/* ---- helpers ---------------------------------------------------------------- */

/* raw or qcow2, by the qcow2 magic */
static const char *image_format(int fd)
{
	unsigned char m[4];
	return pread(fd, m, 4, 0) == 4 && !memcmp(m, "QFI\xfb", 4) ? "qcow2" : "raw";
}

static void *console_main(void *arg)
{
	struct wr_fullvm *vm = arg;
	char buf[16384];
	/* the console is read and dropped (a guest cannot fill our memory or
	 * stall its serial port); screenshots show the screen */
	while (read(vm->console, buf, sizeof(buf)) > 0)
		;
	return NULL;
}

/* QEMU's fds (qemu_proc.c hands them over as 3, 4, ...); the channels are
 * listening sockets in the VM's directory, so a restarted daemon connects
 * to them again. */
enum { FD_QMP = 3, FD_QGA, FD_CONSOLE, FD_BASE, FD_OV, FD_OV_RO, FD_END };
#define N_FDS (FD_END - FD_QMP)
/* a UEFI VM's firmware fds follow the others */
enum { FD_FW_CODE = FD_END, FD_FW_VARS, FD_FW_VARS_RO, N_FW_FDS = 3 };

#define ARG(...)                                                                                   \
	do {                                                                                       \
		if (n + 1 >= WR_ARRAY_SIZE(argv) || asprintf(&argv[n++], __VA_ARGS__) < 0)         \
			goto nomem;                                                                \
	} while (0)

/* The firmware and display a VM asked for. */
static int vm_opt_args(char **argv, size_t max, size_t *n, const struct wr_fullvm_spec *s)
{
	if (s->firmware != WR_VM_FW_BIOS) {
		int r = wr_fullvm_uefi_args(argv, max, n, s->firmware, FD_FW_CODE, FD_FW_VARS,
					    FD_FW_VARS_RO);
		if (r < 0)
			return r;
	}
	if (s->vnc) {
		if (*n + 2 >= max)
			return -E2BIG;
		if ((argv[(*n)++] = strdup("-vnc")) == NULL ||
		    (argv[(*n)++] = strdup(WR_VM_VNC_ARG)) == NULL)
			return -ENOMEM;
	}
	return 0;
}

static int spawn_qemu(struct wr_fullvm *vm, const struct wr_fullvm_spec *s, const char *fmt,
		      const int *fds, size_t n_fds, int log_fd, wr_err *err)
{
	char *argv[96] = {0};
	size_t n = 0;
	char netdev[256], nic[128], resolv[600];
	struct wr_qemu_file files[1];
	int r, n_files = 0;
	if (s->net) {
		/* the NIC, and (a sandbox's namespace) where its DNS goes */
		if ((r = wr_qemu_net_args("virtio-net-pci", netdev, sizeof(netdev), nic,
					  sizeof(nic), err)) < 0 ||
		    (n_files = wr_qemu_net_resolv(s->net, vm->dir, resolv, sizeof(resolv), files,
						  err)) < 0)
			return -1;
	}
	ARG("%s", g.qemu);
	ARG("-M");
	ARG("%s", wr_fullvm_machine(s->firmware));
	ARG("-accel");
	if (g.kvm)
		ARG("kvm");
	else
		ARG("tcg,tb-size=%u", WR_QEMU_TCG_TB_MIB);
	if (g.kvm) {
		ARG("-cpu");
		ARG("host");
	}
	ARG("-m");
	ARG("%llu", (unsigned long long)(s->memory_bytes >> 20));
	ARG("-smp");
	ARG("%u", s->cpus);
	ARG("-name");
	ARG("warren-vm-%s", vm->id);
	ARG("-nodefaults");
	ARG("-no-user-config");
	ARG("-display");
	ARG("none");
	ARG("-vga");
	ARG("std");
	ARG("-no-reboot");
	if (s->incoming) { /* a restore: the state comes through QMP */
		ARG("-incoming");
		ARG("defer");
	}
	ARG("-chardev");
	ARG("socket,id=qmp,fd=%d,server=on,wait=off", FD_QMP);
	ARG("-mon");
	ARG("chardev=qmp,mode=control");
	ARG("-chardev");
	ARG("socket,id=con,fd=%d,server=on,wait=off", FD_CONSOLE);
	ARG("-serial");
	ARG("chardev:con");
	ARG("-device");
	ARG("virtio-serial-pci");
	ARG("-chardev");
	ARG("socket,id=qga,fd=%d,server=on,wait=off", FD_QGA);
	ARG("-device");
	ARG("virtserialport,chardev=qga,name=org.qemu.guest_agent.0");
	ARG("-device");
	ARG("virtio-rng-pci");
	ARG("-device"); /* harvesting: qemu_harvest.h */
	ARG(WR_QEMU_BALLOON_PCI);
	if (s->net) {
		ARG("-netdev");
		ARG("%s", netdev);
		ARG("-device");
		ARG("%s", nic);
	}
	/* an absolute pointer for computer-use input (input-send-event abs) */
	ARG("-device");
	ARG("qemu-xhci,id=xhci");
	ARG("-device");
	ARG("usb-tablet,bus=xhci.0");
	/* the image read-only under a qcow2 overlay, both opened by us */
	ARG("-add-fd");
	ARG("fd=%d,set=1", FD_BASE);
	ARG("-blockdev");
	ARG("driver=file,node-name=basef,filename=/dev/fdset/1,read-only=on");
	ARG("-blockdev");
	ARG("driver=%s,node-name=base,file=basef,read-only=on", fmt);
	ARG("-add-fd");
	ARG("fd=%d,set=2", FD_OV);
	ARG("-add-fd");
	ARG("fd=%d,set=2", FD_OV_RO);
	ARG("-blockdev");
	ARG("driver=file,node-name=ovf,filename=/dev/fdset/2");
	ARG("-blockdev");
	ARG("driver=qcow2,node-name=ov,file=ovf,backing=base");
	ARG("-device");
	ARG("virtio-blk-pci,drive=ov");
	/* its uid is set before exec (qemu_proc.c): no set*id for QEMU */
	ARG("-sandbox");
	ARG("on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny");
	if (vm_opt_args(argv, WR_ARRAY_SIZE(argv), &n, s) < 0)
		goto nomem;
	argv[n] = NULL;
	/* nothing bound in: SeaBIOS and the VGA ROM come from /usr/share */
	struct wr_qemu_spawn sp = {.id = vm->id,
				   .argv = argv,
				   .fds = fds,
				   .n_fds = n_fds,
				   .log_fd = log_fd,
				   .kvm = g.kvm,
				   .memory_bytes = s->memory_bytes,
				   .cpus = s->cpus,
				   .die_with_parent = !g.adoptable,
				   .files = files,
				   .n_files = (size_t)n_files,
				   .netns_fd1 = wr_qemu_net_fd1(s->net)};
	r = wr_qemu_spawn(&vm->qp, &sp, err);
	goto out;
nomem:
	r = wr_err_set(err, ENOMEM, "qemu arguments: out of memory");
out:
	for (size_t i = 0; i < n; i++)
		free(argv[i]);
	return r;
}

static void qemu_stop(struct wr_fullvm *vm, bool quit, int grace_ms)
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

static void vm_free(struct wr_fullvm *vm)
{
	wr_vm_vnc_stop(&vm->vnc); /* its thread uses QMP */
	if (vm->qmp)
		wr_qmp_close(&vm->qmp);
	if (vm->qga)
		wr_qga_free(&vm->qga);
	if (vm->console >= 0)
		shutdown(vm->console, SHUT_RDWR);
	if (vm->con_started)
		pthread_join(vm->con_thread, NULL);
	if (vm->console >= 0)
		close(vm->console);
	/* QEMU ended (qemu_stop) before its cgroup, jail and files go */
	wr_qemu_release(&vm->qp);
	free(vm->overlay);
	free(vm->dir);
	pthread_mutex_destroy(&vm->qmp_lock);
	pthread_mutex_destroy(&vm->qga_lock);
	free(vm);
}

static struct wr_fullvm *vm_new(void)
{
	struct wr_fullvm *vm = calloc(1, sizeof(*vm));
	if (vm == NULL)
		return NULL;
	vm->qp.pidfd = vm->console = -1;
	pthread_mutex_init(&vm->qmp_lock, NULL);
	pthread_mutex_init(&vm->qga_lock, NULL);
	return vm;
}

/* Connects to QEMU's three sockets and starts the console drain. */
static int connect_all(struct wr_fullvm *vm, int dfd, int qmp_ms, wr_err *err)
{
	int qfd = -1, gfd = -1;
	if ((vm->console = wr_qemu_connect(dfd, "console.sock", err)) < 0 ||
	    (qfd = wr_qemu_connect(dfd, "qmp.sock", err)) < 0)
		return -1;
	if (pthread_create(&vm->con_thread, NULL, console_main, vm) == 0)
		vm->con_started = true;
	if (wr_qmp_open(qfd, qmp_ms, &vm->qmp, err) < 0)
		return -1;
	if ((gfd = wr_qemu_connect(dfd, "qga.sock", err)) < 0)
		return -1;
	return wr_qga_new(gfd, &vm->qga, err);
}

int wr_fullvm_vnc(const struct wr_fullvm *vm, const char **socket, const char **password)
{
	if (vm == NULL || vm->vnc == NULL) /* no QEMU while its state is on disk */
		return -ENOENT;
	*socket = wr_vm_vnc_socket(vm->vnc);
	*password = wr_vm_vnc_password(vm->vnc);
	return 0;
}

int wr_fullvm_create(const struct wr_fullvm_spec *in, struct wr_fullvm **out, wr_err *err)
{
	if (!g.ready)
		return wr_err_set(err, EINVAL, "vm tier: not initialised");
	struct wr_fullvm_spec s = *in;
	if (s.memory_bytes == 0)
		s.memory_bytes = 512ull << 20;
	if (s.cpus == 0)
		s.cpus = 1;
	if (s.boot_timeout_ms == 0)
		s.boot_timeout_ms = 300000;
	if (s.memory_bytes < (128ull << 20) || s.memory_bytes > (256ull << 30))
		return wr_err_field(err, "memory", "a VM takes 128 MiB to 256 GiB of memory");
	if (s.cpus > 64)
		return wr_err_field(err, "cpu", "a VM has 1 to 64 vCPUs");
	if (s.image == NULL)
		return wr_err_field(err, "image", "an image is required");
	_cleanup_close_ int base = open(s.image, O_RDONLY | O_CLOEXEC), ov = -1, ov_ro = -1,
			    log = -1, dfd = -1, qm = -1, qg = -1, co = -1;
	if (base < 0)
		return wr_err_sys(err, "image %s", s.image);
	struct stat st;
	if (fstat(base, &st) < 0 || !S_ISREG(st.st_mode))
		return wr_err_field(err, "image", "the vm tier boots a disk image file (%s)",
				    s.image);
	const char *fmt = image_format(base);
	struct wr_fullvm *vm = vm_new();
	if (vm == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	int r;
	if (s.id)
		snprintf(vm->id, sizeof(vm->id), "%s", s.id);
	else if (wr_random_id(vm->id) < 0) {
		r = wr_err_set(err, EIO, "no randomness for an id");
		goto fail;
	}
	if (asprintf(&vm->dir, "%s/%s", g.run_dir, vm->id) < 0 ||
	    asprintf(&vm->overlay, "%s/disk.qcow2", vm->dir) < 0) {
		r = wr_err_set(err, ENOMEM, "out of memory");
		goto fail;
	}
	/* its uid and its directory (not ours to remove when it existed) */
	if ((r = wr_qemu_prepare(&vm->qp, vm->dir, err)) < 0)
		goto fail;
	/* the overlay names its backing file only as metadata: QEMU gets the
	 * base as an fd (-blockdev backing=base) and never opens that path */
	char size[32], fmtopt[64];
	snprintf(size, sizeof(size), "%llu",
		 (unsigned long long)(s.disk_bytes ? s.disk_bytes : (uint64_t)st.st_size));
	snprintf(fmtopt, sizeof(fmtopt), "%s", fmt);
	char *img_argv[] = {g.qemu_img,	     "create", "-q",   "-f",	    "qcow2", "-b",
			    (char *)s.image, "-F",     fmtopt, vm->overlay, size,    NULL};
	if ((r = s.overlay_from ? wr_qsnap_link_or_copy(s.overlay_from, vm->overlay, err)
				: wr_run_tool(img_argv, err)) < 0)
		goto fail;
	ov = open(vm->overlay, O_RDWR | O_CLOEXEC);
	ov_ro = open(vm->overlay, O_RDONLY | O_CLOEXEC);
	if (ov < 0 || ov_ro < 0) {
		r = wr_err_sys(err, "open %s", vm->overlay);
		goto fail;
	}
	if ((dfd = open(vm->dir, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0 ||
	    (log = openat(dfd, "qemu.log", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0) {
		r = wr_err_sys(err, "open %s", vm->dir);
		goto fail;
	}
	if ((qm = r = wr_qemu_listen(dfd, "qmp.sock", err)) < 0 ||
	    (qg = r = wr_qemu_listen(dfd, "qga.sock", err)) < 0 ||
	    (co = r = wr_qemu_listen(dfd, "console.sock", err)) < 0)
		goto fail;
	int fds[N_FDS + N_FW_FDS] = {qm, qg, co, base, ov, ov_ro, -1, -1, -1};
	bool uefi = s.firmware != WR_VM_FW_BIOS;
	r = uefi ? wr_fullvm_fw_files(dfd, s.firmware, s.vars_from, fds + N_FDS, err) : 0;
	if (r == 0)
		r = spawn_qemu(vm, &s, fmt, fds, N_FDS + (uefi ? N_FW_FDS : 0), log, err);
	for (int i = N_FDS; i < N_FDS + N_FW_FDS; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	if (r < 0)
		goto fail;
	if ((r = connect_all(vm, dfd, 30000, err)) < 0)
		goto fail;
	/* a restore's QEMU runs -vnc too: its endpoint before the state loads */
	if (s.vnc && (r = wr_vm_vnc_start(vm->dir, vm->qmp, &vm->qmp_lock, true, s.vnc_password,
					  &vm->vnc, err)) < 0)
		goto fail;
	if (s.incoming) { /* vm_snap.c loads its state */
		*out = vm;
		return 0;
	}
	if ((r = wr_qga_sync(vm->qga, (int)s.boot_timeout_ms, err)) < 0) {
		wr_err_wrap(err, "boot (does the image run qemu-guest-agent?)");
		goto fail;
	}
	/* what a restarted daemon needs to adopt it (wr_fullvm_adopt) */
	if ((r = wr_qemu_save(&vm->qp, NULL, err)) < 0)
		goto fail;
	*out = vm;
	return 0;
fail:
	qemu_stop(vm, false, 0);
	vm_free(vm);
	return wr_err_wrap(err, "create vm");
}

int wr_fullvm_adopt(const char *id, pid_t pid_hint, int sync_ms, struct wr_fullvm **out,
		    wr_err *err)
{
	if (!g.ready)
		return wr_err_set(err, EINVAL, "vm tier: not initialised");
	struct wr_fullvm *vm = vm_new();
	if (vm == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	snprintf(vm->id, sizeof(vm->id), "%s", id);
	json_t *st = NULL;
	_cleanup_close_ int dfd = -1;
	int r;
	if (asprintf(&vm->dir, "%s/%s", g.run_dir, vm->id) < 0 ||
	    asprintf(&vm->overlay, "%s/disk.qcow2", vm->dir) < 0) {
		r = wr_err_set(err, ENOMEM, "out of memory");
		goto fail;
	}
	if ((r = wr_qemu_adopt(&vm->qp, vm->id, vm->dir, pid_hint, &st, err)) < 0)
		goto fail;
	if ((dfd = open(vm->dir, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) {
		r = wr_err_sys(err, "open %s", vm->dir);
		goto fail;
	}
	/* qemu-ga reads EOF while no daemon is connected and waits; its
	 * stream resyncs with guest-sync-delimited (here when the guest
	 * runs; a paused one's before its first command after resume) */
	if ((r = connect_all(vm, dfd, 10000, err)) < 0)
		goto fail;
	r = wr_vm_vnc_start(vm->dir, vm->qmp, &vm->qmp_lock, false, NULL, &vm->vnc, err);
	if (r < 0 && r != -ENOENT) /* its VNC endpoint again; ENOENT: made without */
		goto fail;
	int paused = wr_fullvm_paused(vm, err);
	if ((r = paused) < 0 || (!paused && (r = wr_qga_sync(vm->qga, sync_ms, err)) < 0))
		goto fail;
	json_decref(st);
	*out = vm;
	return 0;
fail:
	json_decref(st);
	/* never a QEMU left behind: killed, its cgroup, jail and files gone */
	qemu_stop(vm, false, 0);
	vm_free(vm);
	return wr_err_wrap(err, "adopt vm %s", id);
}

int wr_fullvm_destroy(struct wr_fullvm **pvm, wr_err *err)
{
	(void)err;
	struct wr_fullvm *vm = *pvm;
	if (vm == NULL)
		return 0;
	*pvm = NULL;
	qemu_stop(vm, true, 3000);
	vm_free(vm);
	return 0;
}

int wr_fullvm_kill(struct wr_fullvm *vm)
{
	return wr_qemu_kill(&vm->qp);
}

int wr_fullvm_shutdown(struct wr_fullvm *vm, int deadline_ms)
{
	if (vm->qp.pid <= 0)
		return 0;
	if (vm->qmp && deadline_ms > 0) {
		pthread_mutex_lock(&vm->qmp_lock);
		/* a paused guest cannot see the button: run it first */
		wr_qmp_cmd(vm->qmp, "cont", NULL, 2000, NULL, NULL);
		int r = wr_qmp_cmd(vm->qmp, "system_powerdown", NULL, 2000, NULL, NULL);
		pthread_mutex_unlock(&vm->qmp_lock);
		struct pollfd p = {.fd = vm->qp.pidfd, .events = POLLIN};
		if (r == 0 && vm->qp.pidfd >= 0 && poll(&p, 1, deadline_ms) > 0)
			return 0;
	}
	return wr_fullvm_kill(vm);
}

int wr_fullvm_pause(struct wr_fullvm *vm, bool paused, wr_err *err)
{
	pthread_mutex_lock(&vm->qmp_lock);
	int r = wr_qmp_cmd(vm->qmp, paused ? "stop" : "cont", NULL, 5000, NULL, err);
	pthread_mutex_unlock(&vm->qmp_lock);
	return r < 0 ? wr_err_wrap(err, "vm %s", paused ? "pause" : "resume") : 0;
}

int wr_fullvm_paused(struct wr_fullvm *vm, wr_err *err)
{
	json_t *ret = NULL;
	pthread_mutex_lock(&vm->qmp_lock);
	int r = wr_qmp_cmd(vm->qmp, "query-status", NULL, 5000, &ret, err);
	pthread_mutex_unlock(&vm->qmp_lock);
	if (r < 0)
		return wr_err_wrap(err, "vm status");
	const char *st = json_string_value(json_object_get(ret, "status"));
	/* postmigrate: stopped after a save of its state (a cont runs it) */
	r = st && (strcmp(st, "paused") == 0 || strcmp(st, "postmigrate") == 0);
	json_decref(ret);
	return r;
}

size_t wr_fullvm_sweep(bool (*keep)(const char *id, void *ctx), void *ctx)
{
	return g.ready ? wr_qemu_sweep(g.run_dir, keep, ctx) : 0;
}

pid_t wr_fullvm_qemu_pid(const struct wr_fullvm *vm)
{
	return vm->qp.pid;
}

bool wr_fullvm_uses_kvm(void)
{
	return g.kvm;
}

void wr_fullvm_qsnap(struct wr_fullvm *vm, struct wr_qsnap_qmp *q)
{
	*q = (struct wr_qsnap_qmp){vm->qmp, &vm->qmp_lock, &vm->qp};
}

const char *wr_fullvm_overlay(const struct wr_fullvm *vm)
{
	return vm->overlay;
}

int wr_fullvm_sync(struct wr_fullvm *vm, int timeout_ms, wr_err *err)
{
	pthread_mutex_lock(&vm->qga_lock);
	int r = wr_qga_sync(vm->qga, timeout_ms, err);
	pthread_mutex_unlock(&vm->qga_lock);
	return r;
}

int wr_fullvm_record(struct wr_fullvm *vm, wr_err *err)
{
	return wr_qemu_save(&vm->qp, NULL, err);
}

/* ---- commands, files, screen --------------------------------------------------- */

#define STDIN_MAX (16u << 20)

int wr_fullvm_exec(struct wr_fullvm *vm, const struct wr_exec_spec *spec,
		   struct wr_exec_result *res, wr_err *err)
{
	memset(res, 0, sizeof(*res));
	if (spec->argv == NULL || spec->argv[0] == NULL)
		return wr_err_field(err, "cmd", "the command is empty");
	if (spec->pty)
		return wr_err_set(err, ENOTSUP, "vm tier: no pty yet");
	/* guest-exec has no cwd or user: the guest's sh and setpriv do it */
	const char *argv[600];
	size_t n = 0, na = 0;
	while (spec->argv[na])
		na++;
	if (na > 500)
		return wr_err_field(err, "cmd", "at most 500 arguments");
	char uid[24], gid[24];
	int user = spec->user > 0 ? spec->user : 0;
	int group = spec->group > 0 ? spec->group : user;
	if (user || group) {
		snprintf(uid, sizeof(uid), "--reuid=%d", user);
		snprintf(gid, sizeof(gid), "--regid=%d", group);
		argv[n++] = "/usr/bin/setpriv";
		argv[n++] = uid;
		argv[n++] = gid;
		argv[n++] = "--clear-groups";
		argv[n++] = "--";
	}
	argv[n++] = "/bin/sh";
	argv[n++] = "-c";
	argv[n++] = "cd \"$1\" || exit 126; shift; exec \"$@\"";
	argv[n++] = "sh";
	argv[n++] = spec->cwd ? spec->cwd : "/";
	for (size_t i = 0; i < na; i++)
		argv[n++] = spec->argv[i];
	argv[n] = NULL;
	char *envs[260];
	size_t ne = 0;
	envs[ne++] = strdup("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
	envs[ne++] = strdup(user ? "HOME=/" : "HOME=/root");
	for (size_t i = 0; i < spec->n_env && ne < 258; i++)
		if (asprintf(&envs[ne], "%s=%s", spec->env[i].key, spec->env[i].value) >= 0)
			ne++;
	envs[ne] = NULL;
	struct wr_buf in = {0};
	int r = 0;
	if (spec->stdin_fd >= 0) {
		char buf[65536];
		ssize_t k;
		while ((k = read(spec->stdin_fd, buf, sizeof(buf))) > 0 ||
		       (k < 0 && errno == EINTR))
			if (k > 0 && (in.len + (size_t)k > STDIN_MAX ||
				      wr_buf_append(&in, buf, (size_t)k) < 0)) {
				r = wr_err_field(err, "stdin",
						 "at most %u bytes of stdin on the vm tier",
						 STDIN_MAX);
				break;
			}
	}
	struct wr_qga_exec x = {.argv = argv,
				.env = (const char *const *)envs,
				.input = in.p,
				.input_len = in.len,
				.timeout_ms = spec->timeout_ms,
				.output_cap = spec->output_cap};
	struct wr_qga_result q = {0};
	uint64_t t0 = (uint64_t)time(NULL);
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	(void)t0;
	if (r == 0) {
		pthread_mutex_lock(&vm->qga_lock);
		r = wr_qga_run(vm->qga, &x, &q, err);
		pthread_mutex_unlock(&vm->qga_lock);
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	for (size_t i = 0; i < ne; i++)
		free(envs[i]);
	free(in.p);
	if (r < 0)
		return wr_err_wrap(err, "vm exec");
	res->duration_ns = (uint64_t)(b.tv_sec - a.tv_sec) * 1000000000ull + (uint64_t)b.tv_nsec -
			   (uint64_t)a.tv_nsec;
	res->signal = q.signal;
	res->exit_code = q.signal ? 128 + q.signal : q.exit_code;
	res->reason = q.timed_out ? WR_EXIT_TIMEOUT : q.signal ? WR_EXIT_SIGNALED : WR_EXIT_EXITED;
	res->out_truncated = q.out_truncated;
	res->err_truncated = q.err_truncated;
	if (spec->on_output) {
		if (q.out_len)
			spec->on_output(spec->ctx, 1, q.out, q.out_len);
		if (q.err_len)
			spec->on_output(spec->ctx, 2, q.err, q.err_len);
		wr_qga_result_free(&q);
	} else {
		res->out = q.out;
		res->out_len = q.out_len;
		res->err = q.err;
		res->err_len = q.err_len;
	}
	return 0;
}

int wr_fullvm_read_file(struct wr_fullvm *vm, const char *path, size_t max, char **data,
			size_t *len, wr_err *err)
{
	pthread_mutex_lock(&vm->qga_lock);
	int r = wr_qga_read_file(vm->qga, path, max, data, len, err);
	pthread_mutex_unlock(&vm->qga_lock);
	return r;
}

int wr_fullvm_write_file(struct wr_fullvm *vm, const char *path, const char *data, size_t len,
			 wr_err *err)
{
	pthread_mutex_lock(&vm->qga_lock);
	int r = wr_qga_write_file(vm->qga, path, data, len, err);
	pthread_mutex_unlock(&vm->qga_lock);
	return r;
}

int wr_fullvm_screenshot(struct wr_fullvm *vm, char **png, size_t *len, wr_err *err)
{
	/* QEMU opens screendump's file by name, and its jail has no place
	 * to write: a memfd of ours, write-only, goes in as fdset 9 */
	_cleanup_close_ int mfd = memfd_create("warren-screen", MFD_CLOEXEC), wfd = -1;
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", mfd);
	if (mfd < 0 || (wfd = open(path, O_WRONLY | O_CLOEXEC)) < 0)
		return wr_err_sys(err, "screenshot: memfd");
	pthread_mutex_lock(&vm->qmp_lock);
	json_t *args = json_pack("{s:i}", "fdset-id", 9);
	int r = wr_qmp_cmd_fd(vm->qmp, "add-fd", args, wfd, 10000, NULL, err);
	json_decref(args);
	if (r == 0) {
		args = json_pack("{s:s, s:s}", "filename", "/dev/fdset/9", "format", "png");
		r = wr_qmp_cmd(vm->qmp, "screendump", args, 30000, NULL, err);
		json_decref(args);
		args = json_pack("{s:i}", "fdset-id", 9);
		wr_qmp_cmd(vm->qmp, "remove-fd", args, 10000, NULL, NULL);
		json_decref(args);
	}
	pthread_mutex_unlock(&vm->qmp_lock);
	if (r < 0)
		return wr_err_wrap(err, "screenshot");
	struct stat st;
	if (fstat(mfd, &st) < 0)
		return wr_err_sys(err, "screenshot");
	if (st.st_size <= 0 || st.st_size > (64 << 20))
		return wr_err_set(err, EIO, "screenshot: QEMU wrote %lld bytes",
				  (long long)st.st_size);
	char *data = malloc((size_t)st.st_size);
	ssize_t n = data ? pread(mfd, data, (size_t)st.st_size, 0) : -1;
	if (n != st.st_size) {
		free(data);
		return wr_err_sys(err, "screenshot: read");
	}
	/* PNG: 8-byte signature, IHDR length and type, width, height */
	if (n >= 24 && memcmp(data + 12, "IHDR", 4) == 0) {
		const unsigned char *u = (const unsigned char *)data;
		vm->width =
		    (unsigned)u[16] << 24 | (unsigned)u[17] << 16 | (unsigned)u[18] << 8 | u[19];
		vm->height =
		    (unsigned)u[20] << 24 | (unsigned)u[21] << 16 | (unsigned)u[22] << 8 | u[23];
	}
	*png = data;
	*len = (size_t)n;
	return 0;
}

/* QEMU's key names (qcodes) for what wr_fullvm_type accepts. */
static const char *qcode(char c, bool *shift)
{
	static const char *const punct[][3] = {
	    {" ", "spc", ""},	       {"\n", "ret", ""},	{"-", "minus", ""},
	    {"_", "minus", "s"},       {"=", "equal", ""},	{"+", "equal", "s"},
	    {".", "dot", ""},	       {",", "comma", ""},	{"/", "slash", ""},
	    {";", "semicolon", ""},    {":", "semicolon", "s"}, {"'", "apostrophe", ""},
	    {"\"", "apostrophe", "s"}, {"!", "1", "s"},		{"$", "4", "s"},
	    {"&", "7", "s"},	       {"*", "8", "s"},		{"(", "9", "s"},
	    {")", "0", "s"},	       {"|", "backslash", "s"}, {">", "dot", "s"},
	    {"<", "comma", "s"},       {"\t", "tab", ""},
	};
	static char one[2];
	*shift = false;
	if (islower((unsigned char)c) || isdigit((unsigned char)c)) {
		one[0] = c;
		return one;
	}
	if (isupper((unsigned char)c)) {
		*shift = true;
		one[0] = (char)tolower((unsigned char)c);
		return one;
	}
	for (size_t i = 0; i < sizeof(punct) / sizeof(punct[0]); i++)
		if (punct[i][0][0] == c) {
			*shift = punct[i][2][0] == 's';
			return punct[i][1];
		}
	return NULL;
}

int wr_fullvm_type(struct wr_fullvm *vm, const char *text, wr_err *err)
{
	int r = 0;
	pthread_mutex_lock(&vm->qmp_lock);
	for (const char *p = text; *p && r == 0; p++) {
		bool shift;
		const char *k = qcode(*p, &shift);
		if (k == NULL) {
			r = wr_err_field(err, "text", "cannot type the character 0x%02x",
					 (unsigned char)*p);
			break;
		}
		json_t *keys = json_array();
		if (shift)
			json_array_append_new(
			    keys, json_pack("{s:s, s:s}", "type", "qcode", "data", "shift"));
		json_array_append_new(keys, json_pack("{s:s, s:s}", "type", "qcode", "data", k));
		json_t *args = json_pack("{s:o}", "keys", keys);
		r = wr_qmp_cmd(vm->qmp, "send-key", args, 10000, NULL, err);
		json_decref(args);
	}
	pthread_mutex_unlock(&vm->qmp_lock);
	return r;
}

int wr_fullvm_keys(struct wr_fullvm *vm, const char *const *keys, size_t n, wr_err *err)
{
	static const struct {
		const char *name, *qcode;
	} alias[] = {{"ctrl", "ctrl"},	   {"control", "ctrl"},
		     {"alt", "alt"},	   {"shift", "shift"},
		     {"super", "meta_l"},  {"meta", "meta_l"},
		     {"win", "meta_l"},	   {"enter", "ret"},
		     {"return", "ret"},	   {"escape", "esc"},
		     {"esc", "esc"},	   {"tab", "tab"},
		     {"space", "spc"},	   {"backspace", "backspace"},
		     {"delete", "delete"}, {"up", "up"},
		     {"down", "down"},	   {"left", "left"},
		     {"right", "right"},   {"home", "home"},
		     {"end", "end"},	   {"pageup", "pgup"},
		     {"pagedown", "pgdn"}, {"insert", "insert"}};
	if (n == 0 || n > 8)
		return wr_err_field(err, "keys", "1 to 8 keys pressed together");
	json_t *arr = json_array();
	for (size_t i = 0; i < n; i++) {
		const char *k = keys[i], *q = NULL;
		char fk[8];
		for (size_t j = 0; j < WR_ARRAY_SIZE(alias) && !q; j++)
			if (strcasecmp(alias[j].name, k) == 0)
				q = alias[j].qcode;
		if (!q && strlen(k) == 1 && (isalnum((unsigned char)k[0]))) {
			fk[0] = (char)tolower((unsigned char)k[0]);
			fk[1] = '\0';
			q = fk;
		}
		if (!q && (k[0] == 'f' || k[0] == 'F') && atoi(k + 1) >= 1 && atoi(k + 1) <= 12 &&
		    strlen(k) <= 3) {
			snprintf(fk, sizeof(fk), "f%d", atoi(k + 1));
			q = fk;
		}
		if (!q) {
			json_decref(arr);
			return wr_err_field(err, "keys", "unknown key '%s'", k);
		}
		json_array_append_new(arr, json_pack("{s:s, s:s}", "type", "qcode", "data", q));
	}
	json_t *args = json_pack("{s:o}", "keys", arr);
	pthread_mutex_lock(&vm->qmp_lock);
	int r = wr_qmp_cmd(vm->qmp, "send-key", args, 10000, NULL, err);
	pthread_mutex_unlock(&vm->qmp_lock);
	json_decref(args);
	return r < 0 ? wr_err_wrap(err, "keys") : 0;
}

static int send_events(struct wr_fullvm *vm, json_t *events, wr_err *err)
{
	json_t *args = json_pack("{s:o}", "events", events);
	pthread_mutex_lock(&vm->qmp_lock);
	int r = wr_qmp_cmd(vm->qmp, "input-send-event", args, 10000, NULL, err);
	pthread_mutex_unlock(&vm->qmp_lock);
	json_decref(args);
	return r < 0 ? wr_err_wrap(err, "pointer") : 0;
}

static json_t *abs_events(struct wr_fullvm *vm, unsigned x, unsigned y)
{
	/* QEMU's absolute axes run 0..0x7fff over the whole screen */
	uint64_t ax = vm->width > 1 ? (uint64_t)x * 0x7fff / (vm->width - 1) : 0;
	uint64_t ay = vm->height > 1 ? (uint64_t)y * 0x7fff / (vm->height - 1) : 0;
	return json_pack("[{s:s, s:{s:s, s:I}}, {s:s, s:{s:s, s:I}}]", "type", "abs", "data",
			 "axis", "x", "value", (json_int_t)(ax > 0x7fff ? 0x7fff : ax), "type",
			 "abs", "data", "axis", "y", "value",
			 (json_int_t)(ay > 0x7fff ? 0x7fff : ay));
}

static int screen_size(struct wr_fullvm *vm, wr_err *err)
{
	if (vm->width && vm->height)
		return 0;
	char *png = NULL;
	size_t len;
	if (wr_fullvm_screenshot(vm, &png, &len, err) < 0)
		return -1;
	free(png);
	if (!vm->width || !vm->height)
		return wr_err_set(err, EIO, "the screen's size is unknown");
	return 0;
}

int wr_fullvm_pointer(struct wr_fullvm *vm, const struct wr_fullvm_pointer *p, wr_err *err)
{
	if (screen_size(vm, err) < 0)
		return -1;
	if (p->x >= vm->width)
		return wr_err_field(err, "x", "x must be below the screen's width %u", vm->width);
	if (p->y >= vm->height)
		return wr_err_field(err, "y", "y must be below the screen's height %u", vm->height);
	json_t *ev = abs_events(vm, p->x, p->y);
	if (send_events(vm, ev, err) < 0)
		return -1;
	if (p->button) {
		for (unsigned i = 0; i < (p->double_click ? 2u : 1u); i++)
			for (int down = 1; down >= 0; down--) {
				json_t *b = json_pack("[{s:s, s:{s:s, s:b}}]", "type", "btn",
						      "data", "button", p->button, "down", down);
				if (send_events(vm, b, err) < 0)
					return -1;
			}
	}
	for (int i = 0; i < (p->scroll < 0 ? -p->scroll : p->scroll); i++)
		for (int down = 1; down >= 0; down--) {
			json_t *b =
			    json_pack("[{s:s, s:{s:s, s:b}}]", "type", "btn", "data", "button",
				      p->scroll < 0 ? "wheel-up" : "wheel-down", "down", down);
			if (send_events(vm, b, err) < 0)
				return -1;
		}
	return 0;
}

/* For vm_files.c and vm_exec.c: one guest-agent command, or one short
 * command run to its end, each under the VM's agent lock (no caller holds
 * it across calls, so files and running commands interleave). */
int wr_fullvm_qga_cmd(struct wr_fullvm *vm, const char *cmd, json_t *args, int timeout_ms,
		      json_t **ret, wr_err *err)
{
	pthread_mutex_lock(&vm->qga_lock);
	int r = wr_qga_cmd(vm->qga, cmd, args, timeout_ms, ret, err);
	pthread_mutex_unlock(&vm->qga_lock);
	return r;
}

int wr_fullvm_qga_run(struct wr_fullvm *vm, const struct wr_qga_exec *x, struct wr_qga_result *res,
		      wr_err *err)
{
	pthread_mutex_lock(&vm->qga_lock);
	int r = wr_qga_run(vm->qga, x, res, err);
	pthread_mutex_unlock(&vm->qga_lock);
	return r;
}

int wr_fullvm_cgroup_v2_fd(const struct wr_fullvm *vm)
{
	return wr_qemu_cgroup_v2_fd(&vm->qp);
}

int wr_fullvm_hostfwd(struct wr_fullvm *vm, const char *addr, unsigned port, bool add, wr_err *err)
{
	return wr_qemu_net_hostfwd(vm->qmp, &vm->qmp_lock, addr, port, add, err);
}
