/* The full VM tier behind struct wr_tier_ops: a sandbox spec becomes a VM
 * spec (the image a bootable disk file: a vm-disk store image, which the
 * daemon resolved to its blob, or a configured path), and the sandbox's defaults (env,
 * workdir, user) apply to each command as in the container tier. The
 * handle is our own struct, passed through the ops as the opaque struct
 * wr_sandbox pointer. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* A new VM, or (adopt: QEMU's pid) one a previous daemon left running. */
static int fvm_make(const struct wr_sandbox_spec *spec, pid_t adopt, struct wr_sandbox **out,
		    wr_err *err)
{
	if (spec->n_layers > 1)
		return wr_err_field(err, "layers", "the vm tier boots one disk image (no layers)");
	if (spec->firmware && strcmp(spec->firmware, "bios") && strcmp(spec->firmware, "uefi"))
		return wr_err_field(err, "firmware", "firmware: bios or uefi, not '%s'",
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
				    .uefi = spec->firmware && strcmp(spec->firmware, "uefi") == 0,
				    .vnc = spec->vnc};
	/* a disk smaller than the image cannot hold it: keep the image's
	 * (a qcow2 file is smaller than the disk it holds) */
	uint64_t vsize = image_virtual_size(image, (uint64_t)st.st_size);
	if (vs.disk_bytes < vsize)
		vs.disk_bytes = vsize;
	if ((adopt ? wr_fullvm_adopt(spec->id, adopt, 30000, &m->vm, err)
		   : wr_fullvm_create(&vs, &m->vm, err)) < 0) {
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
	return fvm_make(spec, 0, out, err);
}

/* warrend's recovery: the sandbox's defaults from its record, the VM found
 * again by its id and QEMU's pid (wr_fullvm_adopt; one that cannot be
 * adopted is killed and removed). */
static int fvm_adopt(const struct wr_sandbox_spec *spec, pid_t pid, struct wr_sandbox **out,
		     wr_err *err)
{
	if (spec->id == NULL || pid <= 0)
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
	int r = wr_fullvm_shutdown(of(sb)->vm, (int)g_cfg.shutdown_timeout_ms);
	if (r < 0) {
		errno = -r;
		return wr_err_sys(err, "kill vm");
	}
	return 0;
}

static int fvm_freeze(struct wr_sandbox *sb, bool frozen, wr_err *err)
{
	return wr_fullvm_pause(of(sb)->vm, frozen, err);
}

static int fvm_frozen(struct wr_sandbox *sb, wr_err *err)
{
	return wr_fullvm_paused(of(sb)->vm, err);
}

static int fvm_destroy(struct wr_sandbox **sb, wr_err *err)
{
	if (*sb == NULL)
		return 0;
	struct fvm_sandbox *m = of(*sb);
	*sb = NULL;
	int r = wr_fullvm_destroy(&m->vm, err);
	fvm_free(m);
	return r;
}

static pid_t fvm_main_pid(const struct wr_sandbox *sb)
{
	return wr_fullvm_qemu_pid(((const struct fvm_sandbox *)(const void *)sb)->vm);
}

struct wr_fullvm *wr_vm_tier_vm(struct wr_sandbox *sb)
{
	return of(sb)->vm;
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
};
