/* The full VM tier behind struct wr_tier_ops: a sandbox spec becomes a VM
 * spec (the image a bootable disk file: a vm-disk store image, which the
 * daemon resolved to its blob, or a configured path), and the sandbox's defaults (env,
 * workdir, user) apply to each command as in the container tier. The
 * handle is our own struct, passed through the ops as the opaque struct
 * wr_sandbox pointer. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "isolate/cgroup.h"
#include "tiers/qemu_harvest.h"
#include "tiers/qemu_net.h"
#include "tiers/qemu_snap.h"
#include "tiers/vm.h"
#include "tiers/vm_exec.h"
#include "tiers/vm_files.h"
#include "tiers/vm_tier.h"

/* qemu-guest-agent, the only way into a stock image, has no terminal: a
 * guest-exec'd process gets pipes or nothing (docs/ARCH-TIERS.md). */
#define NO_PTY                                                                                     \
	"the vm tier has no interactive terminal: qemu-guest-agent, its only channel into the "    \
	"guest, runs commands with pipes and has no pty; use commands (streamed), or the screen "  \
	"and input routes for the console"

static struct wr_vm_tier_config g_cfg;

struct fvm_sandbox {
	struct wr_fullvm *vm;
	struct wr_fullvm_fsctx fsx; /* the files view's context (vm_files.c) */
	struct wr_env_kv *env;	    /* the sandbox's env; strings owned in strs */
	size_t n_env;
	char **strs;
	char *workdir;
	int user, group;
	/* keep_memory=false and snapshots (vm_snap.c) */
	struct wr_fullvm_spec vs; /* what a restore starts again (image owned) */
	char id[65];
	char *saved; /* suspended (or being): its saved directory */
	/* the VNC password, kept when QEMU ends for a suspend so that the
	 * restored VM's endpoint takes the one its user has (vs.vnc_password) */
	char vnc_pass[16];
};

static struct fvm_sandbox *of(struct wr_sandbox *sb)
{
	return (struct fvm_sandbox *)(void *)sb;
}

static void fvm_free(struct fvm_sandbox *m)
{
	for (size_t i = 0; m->strs && i < 2 * m->n_env; i++)
		free(m->strs[i]);
	free(m->strs);
	free(m->env);
	free(m->workdir);
	free(m->saved);
	free((char *)m->vs.image);
	explicit_bzero(m->vnc_pass, sizeof(m->vnc_pass));
	free(m);
}

int wr_vm_tier_init(const struct wr_vm_tier_config *cfg, wr_err *err)
{
	struct wr_fullvm_config fc = {.qemu = cfg->qemu,
				      .qemu_img = cfg->qemu_img,
				      .run_dir = cfg->run_dir,
				      .accel = cfg->accel,
				      .cgroup_base = cfg->cgroup_base,
				      .adoptable = cfg->adoptable};
	if (wr_fullvm_init(&fc, err) < 0)
		return -1;
	g_cfg = *cfg;
	return 0;
}

/* The disk's size as the guest sees it: a qcow2 header's virtual size
 * (big-endian at offset 24), else the file's size. Images from the store
 * were checked at import (src/image/vmdisk.c). */
static uint64_t image_virtual_size(const char *image, uint64_t file_size)
{
	unsigned char h[32];
	int fd = open(image, O_RDONLY | O_CLOEXEC);
	uint64_t v = file_size;
	if (fd >= 0 && pread(fd, h, sizeof(h), 0) == (ssize_t)sizeof(h) &&
	    memcmp(h, "QFI\xfb", 4) == 0) {
		v = 0;
		for (int i = 24; i < 32; i++)
			v = v << 8 | h[i];
	}
	if (fd >= 0)
		close(fd);
	return v;
}

/* ---- keep_memory=false and snapshots (vm_snap.c) ------------------------ */

static int fvm_adopt_saved(struct fvm_sandbox *m, wr_err *err);
static int fvm_adopted_running(struct fvm_sandbox *m);
static int fvm_from_saved(struct fvm_sandbox *m, const char *dir, wr_err *err);
static void fvm_saved_remove(const char *dir);

/* A new VM (adopt < 0), one a previous daemon left running (adopt: QEMU's
 * pid) or suspended (adopt 0). */
static int fvm_make(const struct wr_sandbox_spec *spec, pid_t adopt, struct wr_sandbox **out,
		    wr_err *err)
{
	if (spec->n_layers > 1)
		return wr_err_field(err, "layers", "the vm tier boots one disk image (no layers)");
	enum wr_vm_firmware fw;
	if (wr_fullvm_firmware_parse(spec->firmware, &fw) < 0)
		return wr_err_field(err, "firmware",
				    "firmware: bios, uefi or uefi-secure, not '%s'",
				    spec->firmware);
	const char *image = spec->n_layers ? spec->layers[0] : spec->image;
	struct stat st;
	if (image == NULL)
		return wr_err_field(err, "image", "an image is required");
	if (stat(image, &st) < 0)
		return wr_err_sys(err, "image %s", image);
	if (!S_ISREG(st.st_mode))
		return wr_err_field(err, "image",
				    "the vm tier boots a disk image file (raw or qcow2); "
				    "%s is a directory",
				    image);
	struct fvm_sandbox *m = calloc(1, sizeof(*m));
	if (m == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	m->user = (int)spec->user;
	m->group = (int)(spec->group ? spec->group : spec->user);
	m->n_env = spec->n_env;
	m->env = calloc(spec->n_env + 1, sizeof(*m->env));
	m->strs = calloc(2 * spec->n_env + 1, sizeof(char *));
	m->workdir = strdup(spec->workdir ? spec->workdir : "/");
	if (!m->env || !m->strs || !m->workdir)
		goto nomem;
	for (size_t i = 0; i < spec->n_env; i++) {
		m->strs[2 * i] = strdup(spec->env[i].key);
		m->strs[2 * i + 1] = strdup(spec->env[i].value ? spec->env[i].value : "");
		if (!m->strs[2 * i] || !m->strs[2 * i + 1])
			goto nomem;
		m->env[i] = (struct wr_env_kv){m->strs[2 * i], m->strs[2 * i + 1]};
	}
	uint64_t cpus = spec->cpus > 0 ? (uint64_t)(spec->cpus + 0.999) : 1;
	struct wr_fullvm_spec vs = {.image = image,
				    .memory_bytes = spec->memory_bytes,
				    .disk_bytes = spec->disk_bytes,
				    .cpus = (unsigned)cpus,
				    .id = spec->id,
				    .boot_timeout_ms = g_cfg.boot_timeout_ms,
				    .firmware = fw,
				    .vnc = spec->vnc};
	struct wr_qemu_net net;
	vs.net = wr_qemu_net_of(spec, &net); /* NULL: offline, no NIC */
	/* a disk smaller than the image cannot hold it: keep the image's
	 * (a qcow2 file is smaller than the disk it holds) */
	uint64_t vsize = image_virtual_size(image, (uint64_t)st.st_size);
	if (vs.disk_bytes < vsize)
		vs.disk_bytes = vsize;
	m->vs = vs;
	/* the pooled namespace is the create's only (warrend closes its fds
	 * after it): nothing later starts QEMU again from m->vs with it */
	m->vs.net = NULL;
	if (m->vs.memory_bytes == 0)
		m->vs.memory_bytes = 512ull << 20; /* wr_fullvm_create's default */
	snprintf(m->id, sizeof(m->id), "%s", spec->id ? spec->id : "");
	m->vs.id = spec->id ? m->id : NULL;
	if ((m->vs.image = strdup(image)) == NULL)
		goto nomem;
	int r;
	if (adopt == 0) /* recorded suspended (vm_tier_snap.c) */
		r = fvm_adopt_saved(m, err);
	else if (adopt > 0)
		r = wr_fullvm_adopt(spec->id, adopt, 30000, &m->vm, err) < 0
			? -1
			: fvm_adopted_running(m);
	else if (spec->restore)
		r = fvm_from_saved(m, spec->restore, err);
	else
		r = wr_fullvm_create(&vs, &m->vm, err);
	if (r < 0) {
		fvm_free(m);
		return -1;
	}
	m->fsx =
	    (struct wr_fullvm_fsctx){.vm = m->vm, .uid = (uid_t)m->user, .gid = (gid_t)m->group};
	*out = (struct wr_sandbox *)(void *)m;
	return 0;
nomem:
	fvm_free(m);
	return wr_err_set(err, ENOMEM, "out of memory");
}

static int fvm_create(const struct wr_sandbox_spec *spec, struct wr_sandbox **out, wr_err *err)
{
	return fvm_make(spec, -1, out, err);
}

/* warrend's recovery: the sandbox's defaults from its record, the VM found
 * again by its id and QEMU's pid (wr_fullvm_adopt; one that cannot be
 * adopted is killed and removed). */
static int fvm_adopt(const struct wr_sandbox_spec *spec, pid_t pid, struct wr_sandbox **out,
		     wr_err *err)
{
	if (spec->id == NULL || pid < 0)
		return wr_err_set(err, EINVAL, "adopt: no sandbox id or QEMU pid");
	return fvm_make(spec, pid, out, err);
}

static int fvm_exec(struct wr_sandbox *sb, const struct wr_exec_spec *in,
		    struct wr_exec_result *res, wr_err *err)
{
	struct fvm_sandbox *m = of(sb);
	struct wr_exec_spec spec;
	struct wr_env_kv *env = NULL;
	if (in->pty)
		return wr_err_set(err, ENOTSUP, NO_PTY);
	if (wr_exec_spec_defaults(in, m->env, m->n_env, m->workdir, m->user, m->group, &spec, &env,
				  err) < 0)
		return -1;
	/* output streamed as it comes (vm_exec.c) */
	int r = wr_fullvm_exec_stream(m->vm, &spec, res, err);
	free(env);
	return r;
}

/* Files through qemu-guest-agent (vm_files.c). */
static int fvm_fs(struct wr_sandbox *sb, struct wr_fs *out, wr_err *err)
{
	(void)err;
	wr_fullvm_fs_view(&of(sb)->fsx, out);
	return 0;
}

static int fvm_kill(struct wr_sandbox *sb, wr_err *err)
{
	if (of(sb)->vm == NULL)
		return 0; /* suspended: no process */
	int r = wr_fullvm_shutdown(of(sb)->vm, (int)g_cfg.shutdown_timeout_ms);
	if (r < 0) {
		errno = -r;
		return wr_err_sys(err, "kill vm");
	}
	return 0;
}

static int fvm_freeze(struct wr_sandbox *sb, bool frozen, wr_err *err)
{
	if (of(sb)->vm == NULL)
		return frozen ? 0 : wr_err_set(err, EINVAL, "the vm is suspended to disk");
	return wr_fullvm_pause(of(sb)->vm, frozen, err);
}

static int fvm_frozen(struct wr_sandbox *sb, wr_err *err)
{
	if (of(sb)->vm == NULL)
		return 1;
	return wr_fullvm_paused(of(sb)->vm, err);
}

static int fvm_destroy(struct wr_sandbox **sb, wr_err *err)
{
	if (*sb == NULL)
		return 0;
	struct fvm_sandbox *m = of(*sb);
	*sb = NULL;
	int r = wr_fullvm_destroy(&m->vm, err);
	if (m->saved)
		fvm_saved_remove(m->saved);
	fvm_free(m);
	return r;
}

static pid_t fvm_main_pid(const struct wr_sandbox *sb)
{
	const struct fvm_sandbox *m = (const struct fvm_sandbox *)(const void *)sb;
	return m->vm ? wr_fullvm_qemu_pid(m->vm) : 0;
}

/* <state>/vm-saved/<prefix><id> */
static char *saved_dir(const char *id, const char *prefix)
{
	char base[900], *p = NULL;
	snprintf(base, sizeof(base), "%s/vm-saved",
		 g_cfg.state_dir ? g_cfg.state_dir : "/var/lib/warren");
	if (mkdir(base, 0700) < 0 && errno != EEXIST)
		return NULL;
	if (asprintf(&p, "%s/%s%s", base, prefix, id) < 0)
		return NULL;
	return p;
}

/* Renamed out of the way first: a crash leaves a .old- name, never a
 * half-removed directory under its own name. */
static void fvm_saved_remove(const char *dir)
{
	char old[1100];
	const char *slash = strrchr(dir, '/');
	if (slash == NULL)
		return;
	snprintf(old, sizeof(old), "%.*s/.old-%s", (int)(slash - dir), dir, slash + 1);
	wr_qsnap_remove(rename(dir, old) == 0 ? old : dir);
}

static bool only_id(const char *name, void *ctx)
{
	const char *id = ctx;
	return strcmp(name, id) != 0 &&
	       !(strncmp(name, "vm-", 3) == 0 && strcmp(name + 3, id) == 0);
}

/* Recorded suspended: the saved state must be whole; a QEMU a crash left
 * (a restore cut before its commit: its guest never ran) is killed. */
static int fvm_adopt_saved(struct fvm_sandbox *m, wr_err *err)
{
	wr_fullvm_sweep(only_id, m->id);
	if ((m->saved = saved_dir(m->id, "")) == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	json_t *meta = wr_qsnap_read_meta(m->saved, err);
	if (meta == NULL)
		return wr_err_wrap(err, "adopt suspended vm %s", m->id);
	json_decref(meta);
	return 0;
}

/* A QEMU that runs: a saved state not committed (the crash came first)
 * is obsolete. */
static int fvm_adopted_running(struct fvm_sandbox *m)
{
	_cleanup_free_ char *dir = saved_dir(m->id, "");
	if (dir)
		fvm_saved_remove(dir);
	return 0;
}

static void sizes_from(struct fvm_sandbox *m, const char *dir)
{
	json_t *meta = wr_qsnap_read_meta(dir, NULL);
	m->vs.memory_bytes = (uint64_t)json_integer_value(json_object_get(meta, "memory_bytes"));
	m->vs.disk_bytes = (uint64_t)json_integer_value(json_object_get(meta, "disk_bytes"));
	m->vs.cpus = (unsigned)json_integer_value(json_object_get(meta, "cpus"));
	/* the firmware the state runs with (the restore took the saved one) */
	const char *fw = json_string_value(json_object_get(meta, "firmware"));
	enum wr_vm_firmware f;
	if (fw && wr_fullvm_firmware_parse(fw, &f) == 0)
		m->vs.firmware = f;
	json_decref(meta);
}

/* A new sandbox from a VM snapshot the daemon unpacked into dir. */
static int fvm_from_saved(struct fvm_sandbox *m, const char *dir, wr_err *err)
{
	if (wr_fullvm_restore(&m->vs, dir, &m->vm, err) < 0)
		return -1;
	if (wr_fullvm_restore_run(m->vm, err) < 0) {
		wr_fullvm_destroy(&m->vm, NULL);
		return wr_err_wrap(err, "create vm from a snapshot");
	}
	sizes_from(m, dir);
	return 0;
}

static int fvm_suspend(struct wr_sandbox *sb, enum wr_suspend_step step, wr_err *err)
{
	struct fvm_sandbox *m = of(sb);
	switch (step) {
	case WR_SUSPEND_SAVE: {
		if (m->vm == NULL)
			return 0;
		_cleanup_free_ char *tmp = saved_dir(m->id, ".tmp-");
		char *dir = saved_dir(m->id, "");
		if (tmp == NULL || dir == NULL) {
			free(dir);
			return wr_err_set(err, ENOMEM, "out of memory");
		}
		wr_qsnap_remove(tmp);
		fvm_saved_remove(dir);
		json_t *meta = NULL;
		if (wr_fullvm_save(m->vm, &m->vs, tmp, true, &meta, err) < 0 ||
		    wr_qsnap_publish(tmp, dir, err) < 0) {
			wr_qsnap_remove(tmp);
			_cleanup_err_ wr_err e2 = NULL;
			if (meta && json_is_true(json_object_get(meta, "running")))
				wr_fullvm_pause(m->vm, false, &e2);
			json_decref(meta);
			free(dir);
			return wr_err_wrap(err, "suspend vm %s", m->id);
		}
		json_decref(meta);
		free(m->saved);
		m->saved = dir;
		return 0;
	}
	case WR_SUSPEND_END: {
		const char *sock, *pass;
		if (m->vm && wr_fullvm_vnc(m->vm, &sock, &pass) == 0) {
			snprintf(m->vnc_pass, sizeof(m->vnc_pass), "%s", pass);
			m->vs.vnc_password = m->vnc_pass;
		}
		m->fsx.vm = NULL;
		return wr_fullvm_destroy(&m->vm, err);
	}
	case WR_SUSPEND_UNDO:
		if (m->saved) {
			fvm_saved_remove(m->saved);
			free(m->saved);
			m->saved = NULL;
		}
		return m->vm ? wr_fullvm_pause(m->vm, false, err) : 0;
	case WR_SUSPEND_LOAD:
		if (m->vm)
			return 0;
		if (m->saved == NULL)
			return wr_err_set(err, ENOENT, "vm %s has no saved state", m->id);
		sizes_from(m, m->saved);
		return wr_fullvm_restore(&m->vs, m->saved, &m->vm, err);
	case WR_SUSPEND_RUN:
		if (m->vm == NULL)
			return wr_err_set(err, ENOENT, "vm %s is not loaded", m->id);
		m->fsx.vm = m->vm;
		if (m->saved) {
			fvm_saved_remove(m->saved);
			free(m->saved);
			m->saved = NULL;
		}
		return wr_fullvm_restore_run(m->vm, err);
	case WR_SUSPEND_UNLOAD: return m->saved ? wr_fullvm_destroy(&m->vm, err) : 0;
	}
	return wr_err_set(err, EINVAL, "suspend: unknown step");
}

/* A snapshot: RAM, devices and a copy of the overlay into dir; the VM
 * runs on when it ran. A suspended one's saved state is copied. */
static int fvm_save(struct wr_sandbox *sb, const char *dir, json_t **meta, wr_err *err)
{
	struct fvm_sandbox *m = of(sb);
	if (m->vm == NULL) {
		if (m->saved == NULL)
			return wr_err_set(err, ENOENT, "vm %s has no state", m->id);
		if (mkdir(dir, 0700) < 0)
			return wr_err_sys(err, "mkdir %s", dir);
		char from[1100], to[1100];
		int r = 0;
		for (int i = 0; r == 0 && i < 2; i++) {
			const char *f = i ? "disk" : "state";
			snprintf(from, sizeof(from), "%s/%s", m->saved, f);
			snprintf(to, sizeof(to), "%s/%s", dir, f);
			r = wr_qsnap_copy(from, to, err);
		}
		json_t *j = r == 0 ? wr_qsnap_read_meta(m->saved, err) : NULL;
		if (j == NULL || wr_qsnap_write_meta(dir, j, err) < 0) {
			json_decref(j);
			wr_qsnap_remove(dir);
			return wr_err_wrap(err, "snapshot suspended vm %s", m->id);
		}
		*meta = j;
		return 0;
	}
	if (wr_fullvm_save(m->vm, &m->vs, dir, false, meta, err) < 0)
		return -1;
	if (json_is_true(json_object_get(*meta, "running")) &&
	    wr_fullvm_pause(m->vm, false, err) < 0)
		return wr_err_wrap(err, "snapshot vm %s: run it again", m->id);
	return 0;
}

size_t wr_vm_tier_sweep_saved(bool (*keep)(const char *id, void *ctx), void *ctx)
{
	char dir[900];
	snprintf(dir, sizeof(dir), "%s/vm-saved",
		 g_cfg.state_dir ? g_cfg.state_dir : "/var/lib/warren");
	return wr_qsnap_sweep(dir, keep, ctx);
}

struct wr_fullvm *wr_vm_tier_vm(struct wr_sandbox *sb)
{
	return of(sb)->vm;
}

static int fvm_cgroup_v2_fd(const struct wr_sandbox *sb)
{
	/* no QEMU while its state is on disk (a pause with keep_memory=false) */
	const struct wr_fullvm *vm = ((const struct fvm_sandbox *)(const void *)sb)->vm;
	return vm ? wr_fullvm_cgroup_v2_fd(vm) : -1;
}

static int fvm_port(struct wr_sandbox *sb, const char *addr, unsigned port, bool add, wr_err *err)
{
	return wr_fullvm_hostfwd(of(sb)->vm, addr, port, add, err);
}

/* CPU harvesting on QEMU's cgroup (qemu_harvest.h). The VM's balloon
 * (free page reporting) is on, but the harvester does not inflate it on
 * idle: that freed nothing in the tests (branch harvest), so it is not
 * offered until it is shown to work. The harvester samples running
 * sandboxes only: vm is set. */
/* What QEMU's cgroup uses (GET's usage; the idle policy's CPU check). */
static int fvm_usage(struct wr_sandbox *sb, struct wr_cgroup_stats *st, wr_err *err)
{
	struct wr_fullvm *vm = of(sb)->vm;
	if (vm == NULL) {
		memset(st, 0, sizeof(*st)); /* suspended: nothing in use */
		return 0;
	}
	struct wr_qsnap_qmp m;
	wr_fullvm_qsnap(vm, &m);
	struct wr_qemu *q = m.qemu;
	if (q->cg == NULL)
		return wr_err_set(err, ENOENT, "vm: QEMU has no cgroup");
	return wr_cgroup_stats(q->cg, st, err);
}

static int fvm_cpu_time(struct wr_sandbox *sb, uint64_t *ns, wr_err *err)
{
	struct wr_fullvm *vm = of(sb)->vm;
	struct wr_qsnap_qmp m;
	if (vm == NULL)
		return wr_err_set(err, ENOENT, "no QEMU");
	wr_fullvm_qsnap(vm, &m);
	return wr_qemu_hv_cpu_time(m.qemu, ns, err);
}

static int fvm_cpu_share(struct wr_sandbox *sb, uint64_t weight, bool idle, wr_err *err)
{
	struct wr_fullvm *vm = of(sb)->vm;
	struct wr_qsnap_qmp m;
	if (vm == NULL)
		return wr_err_set(err, ENOENT, "no QEMU");
	wr_fullvm_qsnap(vm, &m);
	return wr_qemu_hv_cpu_share(m.qemu, weight, idle, err);
}

const struct wr_tier_ops wr_vm_tier = {
    .name = "vm",
    .no_pty = NO_PTY,
    .create = fvm_create,
    .exec = fvm_exec,
    .fs = fvm_fs,
    .kill = fvm_kill,
    .freeze = fvm_freeze,
    .frozen = fvm_frozen,
    .destroy = fvm_destroy,
    .main_pid = fvm_main_pid,
    .adopt = fvm_adopt,
    .suspend = fvm_suspend,
    .save = fvm_save,
    .cgroup_v2_fd = fvm_cgroup_v2_fd,
    .port = fvm_port,
    .usage = fvm_usage,
    .cpu_time = fvm_cpu_time,
    .cpu_share = fvm_cpu_share,
};
