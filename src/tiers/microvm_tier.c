/* The microVM tier behind struct wr_tier_ops: a sandbox spec becomes a VM
 * spec, and the sandbox's defaults (env, workdir, user) apply to each
 * command as in the container tier. The handle is our own struct, passed
 * through the ops as the opaque struct wr_sandbox pointer. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "isolate/cgroup.h"
#include "tiers/microvm.h"
#include "tiers/microvm_files.h"
#include "tiers/microvm_internal.h"

struct mvm_sandbox {
	struct wr_vm *vm;
	struct wr_vm_fsctx fsx; /* the files view's context (microvm_files.c) */
	struct wr_env_kv *env;	/* the sandbox's env; strings owned in strs */
	size_t n_env;
	char **strs;
	char *workdir;
	int user, group;
};

static struct mvm_sandbox *of(struct wr_sandbox *sb)
{
	return (struct mvm_sandbox *)(void *)sb;
}

static void mvm_free(struct mvm_sandbox *m)
{
	for (size_t i = 0; m->strs && i < 2 * m->n_env; i++)
		free(m->strs[i]);
	free(m->strs);
	free(m->env);
	free(m->workdir);
	free(m);
}

/* A new VM, or (adopt: QEMU's pid) one a previous daemon left running. */
static int mvm_make(const struct wr_sandbox_spec *spec, pid_t adopt, struct wr_sandbox **out,
		    wr_err *err)
{
	if (spec->n_layers > 1)
		return wr_err_field(err, "layers", "the microvm tier boots one image (no layers)");
	const char *image = spec->n_layers ? spec->layers[0] : spec->image;
	struct stat st;
	if (image == NULL)
		return wr_err_field(err, "image", "an image is required");
	if (stat(image, &st) < 0)
		return wr_err_sys(err, "image %s", image);
	if (!S_ISREG(st.st_mode))
		return wr_err_field(
		    err, "image",
		    "the microvm tier needs an EROFS image file (store images are); "
		    "%s is a directory",
		    image);
	struct mvm_sandbox *m = calloc(1, sizeof(*m));
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
	struct wr_vm_spec vs = {.image = image,
				.memory_bytes = spec->memory_bytes,
				.disk_bytes = spec->disk_bytes,
				.cpus = (unsigned)cpus,
				.id = spec->id};
	if ((adopt ? wr_vm_adopt(spec->id, adopt, &m->vm, err) : wr_vm_create(&vs, &m->vm, err)) <
	    0) {
		mvm_free(m);
		return -1;
	}
	m->fsx = (struct wr_vm_fsctx){.vm = m->vm, .uid = (uid_t)m->user, .gid = (gid_t)m->group};
	*out = (struct wr_sandbox *)(void *)m;
	return 0;
nomem:
	mvm_free(m);
	return wr_err_set(err, ENOMEM, "out of memory");
}

static int mvm_create(const struct wr_sandbox_spec *spec, struct wr_sandbox **out, wr_err *err)
{
	return mvm_make(spec, 0, out, err);
}

/* warrend's recovery: the sandbox's defaults from its record, the VM found
 * again by its id and QEMU's pid (wr_vm_adopt; one that cannot be adopted
 * is killed and removed). */
static int mvm_adopt(const struct wr_sandbox_spec *spec, pid_t pid, struct wr_sandbox **out,
		     wr_err *err)
{
	if (spec->id == NULL || pid <= 0)
		return wr_err_set(err, EINVAL, "adopt: no sandbox id or QEMU pid");
	return mvm_make(spec, pid, out, err);
}

static int mvm_exec(struct wr_sandbox *sb, const struct wr_exec_spec *in,
		    struct wr_exec_result *res, wr_err *err)
{
	struct mvm_sandbox *m = of(sb);
	struct wr_exec_spec spec;
	struct wr_env_kv *env = NULL;
	if (wr_exec_spec_defaults(in, m->env, m->n_env, m->workdir, m->user, m->group, &spec, &env,
				  err) < 0)
		return -1;
	int r =
	    spec.pty ? wr_vm_exec_pty(m->vm, &spec, res, err) : wr_vm_exec(m->vm, &spec, res, err);
	free(env);
	return r;
}

/* Files go through the guest's agent (microvm_files.c), as the sandbox's
 * user. */
static int mvm_fs(struct wr_sandbox *sb, struct wr_fs *out, wr_err *err)
{
	(void)err;
	wr_vm_fs_view(&of(sb)->fsx, out);
	return 0;
}

static int mvm_kill(struct wr_sandbox *sb, wr_err *err)
{
	int r = wr_vm_kill(of(sb)->vm);
	if (r < 0) {
		errno = -r;
		return wr_err_sys(err, "kill microvm");
	}
	return 0;
}

static int mvm_destroy(struct wr_sandbox **sb, wr_err *err)
{
	if (*sb == NULL)
		return 0;
	struct mvm_sandbox *m = of(*sb);
	*sb = NULL;
	int r = wr_vm_destroy(&m->vm, err);
	mvm_free(m);
	return r;
}

/* A pause is QMP stop: the vCPUs stop, guest memory and device state stay
 * in QEMU (the container tier freezes its cgroup); every command in the
 * guest stops with them, and the host's deadlines keep running. */
static int mvm_freeze(struct wr_sandbox *sb, bool frozen, wr_err *err)
{
	return frozen ? wr_vm_pause(of(sb)->vm, err) : wr_vm_resume(of(sb)->vm, err);
}

static int mvm_frozen(struct wr_sandbox *sb, wr_err *err)
{
	return wr_vm_paused(of(sb)->vm, err);
}

static int mvm_usage(struct wr_sandbox *sb, struct wr_cgroup_stats *st, wr_err *err)
{
	return wr_vm_usage(of(sb)->vm, st, err);
}

static pid_t mvm_main_pid(const struct wr_sandbox *sb)
{
	return wr_vm_qemu_pid(((const struct mvm_sandbox *)(const void *)sb)->vm);
}

const struct wr_tier_ops wr_microvm_tier = {
    .name = "microvm",
    .create = mvm_create,
    .exec = mvm_exec,
    .fs = mvm_fs,
    .kill = mvm_kill,
    .destroy = mvm_destroy,
    .main_pid = mvm_main_pid,
    .freeze = mvm_freeze,
    .frozen = mvm_frozen,
    .usage = mvm_usage,
    .adopt = mvm_adopt,
};
