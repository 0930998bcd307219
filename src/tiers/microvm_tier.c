/* The microVM tier behind struct wr_tier_ops: a sandbox spec becomes a VM
 * spec, and the sandbox's defaults (env, workdir, user) apply to each
 * command as in the container tier. The handle is our own struct, passed
 * through the ops as the opaque struct wr_sandbox pointer. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"

#include "isolate/cgroup.h"
#include "tiers/microvm.h"
#include "tiers/microvm_files.h"
#include "tiers/microvm_internal.h"
#include "tiers/qemu_harvest.h"
#include "tiers/qemu_net.h"
#include "tiers/qemu_snap.h"

struct mvm_sandbox {
	struct wr_vm *vm;     /* NULL while suspended */
	char *saved;	      /* suspended (or being): its saved directory */
	struct wr_vm_spec vs; /* what a restore starts again (image owned) */
	char id[65];
	struct wr_vm_fsctx fsx; /* the files view's context (microvm_files.c) */
	struct wr_env_kv *env;	/* the sandbox's env; strings owned in strs */
	size_t n_env;
	char **strs;
	char *workdir;
	int user, group;
	/* Its network namespace, held while the sandbox lives (also while its
	 * QEMU is gone: a pause to disk), so a resume starts QEMU in it again
	 * with the NIC, the same address and veth (-1: QEMU's own, empty);
	 * the resolver line of its jail. */
	int netns_fd;
	char *resolv;
	bool start_pending; /* restored from a snapshot, not run yet */
};

/* The NIC a new QEMU of m gets (a resume, a restore). */
static const struct wr_qemu_net *mvm_net(const struct mvm_sandbox *m, struct wr_qemu_net *buf)
{
	if (m->netns_fd < 0)
		return NULL;
	*buf = (struct wr_qemu_net){.netns_fd = m->netns_fd, .resolv_conf = m->resolv};
	return buf;
}

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
	free(m->saved);
	free(m->resolv);
	if (m->netns_fd >= 0)
		close(m->netns_fd);
	free((char *)m->vs.image);
	free(m);
}

/* <state>/microvm/saved/<id>: a suspended VM's state (or "" when the
 * directory cannot be named). */
static char *saved_dir(const char *id, const char *prefix)
{
	char *p = NULL;
	char base[900];
	snprintf(base, sizeof(base), "%s/saved", wr_mvm.state_dir);
	if (mkdir(base, 0700) < 0 && errno != EEXIST)
		return NULL;
	if (asprintf(&p, "%s/%s%s", base, prefix, id) < 0)
		return NULL;
	return p;
}

/* A saved directory goes: renamed out of the way first (a crash leaves
 * a .old- name the sweep removes, never a half-removed directory under
 * its own name). */
static void saved_remove(const char *dir)
{
	char old[1100];
	const char *slash = strrchr(dir, '/');
	if (slash == NULL)
		return;
	snprintf(old, sizeof(old), "%.*s/.old-%s", (int)(slash - dir), dir, slash + 1);
	if (rename(dir, old) == 0)
		wr_qsnap_remove(old);
	else
		wr_qsnap_remove(dir);
}

static int mvm_adopt_saved(struct mvm_sandbox *m, const char *id, wr_err *err);
static int mvm_adopt_running(struct mvm_sandbox *m, const char *id, pid_t pid, wr_err *err);
static int mvm_from_saved(struct mvm_sandbox *m, const char *dir, wr_err *err);

/* A new VM (adopt < 0), one a previous daemon left running (adopt: QEMU's
 * pid) or left suspended (adopt 0). */
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
	m->netns_fd = -1;
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
	struct wr_qemu_net net;
	struct wr_vm_spec vs = {.image = image,
				.memory_bytes =
				    spec->memory_bytes ? spec->memory_bytes : 256ull << 20,
				.disk_bytes = spec->disk_bytes ? spec->disk_bytes : 1ull << 30,
				.cpus = (unsigned)cpus,
				.id = spec->id,
				.net = wr_qemu_net_of(spec, &net)};
	m->vs = vs;
	/* warrend closes its fds of the pooled namespace after the create:
	 * ours keeps it (and its veth) for a QEMU started again later */
	m->vs.net = NULL;
	if (vs.net && vs.net->netns_fd >= 0) {
		m->netns_fd = fcntl(vs.net->netns_fd, F_DUPFD_CLOEXEC, 3);
		if (m->netns_fd < 0) {
			mvm_free(m);
			return wr_err_sys(err, "microvm: hold the network namespace");
		}
		if (vs.net->resolv_conf && (m->resolv = strdup(vs.net->resolv_conf)) == NULL)
			goto nomem;
	}
	snprintf(m->id, sizeof(m->id), "%s", spec->id ? spec->id : "");
	m->vs.id = spec->id ? m->id : NULL;
	if ((m->vs.image = strdup(image)) == NULL)
		goto nomem;
	int r;
	if (adopt == 0)
		r = mvm_adopt_saved(m, spec->id, err);
	else if (adopt > 0)
		r = mvm_adopt_running(m, spec->id, adopt, err);
	else if (spec->restore)
		r = mvm_from_saved(m, spec->restore, err);
	else
		r = wr_vm_create(&vs, &m->vm, err);
	if (r < 0) {
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

/* The sizes a save records (wr_vm_adopt does not know them). */
static void vm_sizes(struct mvm_sandbox *m)
{
	m->vm->memory_bytes = m->vs.memory_bytes;
	m->vm->disk_bytes = m->vs.disk_bytes;
	m->vm->cpus = m->vs.cpus;
}

static bool only_id(const char *name, void *ctx)
{
	const char *id = ctx;
	/* keep everything but the VM's directory and its cgroup vm-<id> */
	return strcmp(name, id) != 0 &&
	       !(strncmp(name, "vm-", 3) == 0 && strcmp(name + 3, id) == 0);
}

/* Recorded suspended: its saved state must be there whole; a QEMU a crash
 * left (a restore cut before its commit: it never ran) is killed and its
 * files go. */
static int mvm_adopt_saved(struct mvm_sandbox *m, const char *id, wr_err *err)
{
	wr_qemu_sweep(wr_mvm.run_dir, only_id, (void *)id);
	m->saved = saved_dir(id, "");
	if (m->saved == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	json_t *meta = wr_qsnap_read_meta(m->saved, err);
	if (meta == NULL)
		return wr_err_wrap(err, "adopt suspended microvm %s", id);
	json_decref(meta);
	return 0;
}

/* A QEMU that runs (or is stopped): a saved state of a suspend that was
 * not committed (the crash came before) is obsolete. */
static int mvm_adopt_running(struct mvm_sandbox *m, const char *id, pid_t pid, wr_err *err)
{
	if (wr_vm_adopt(id, pid, &m->vm, err) < 0)
		return -1;
	vm_sizes(m);
	/* QEMU's namespace (the sandbox's pooled one when networked), held
	 * for a QEMU started again after a pause to disk */
	char ns[64];
	snprintf(ns, sizeof(ns), "/proc/%d/ns/net", (int)wr_vm_qemu_pid(m->vm));
	if (m->netns_fd < 0 && m->vm->nic && (m->netns_fd = open(ns, O_RDONLY | O_CLOEXEC)) < 0) {
		wr_err_sys(err, "microvm: hold %s", ns);
		wr_vm_destroy(&m->vm, NULL);
		return -1;
	}
	_cleanup_free_ char *dir = saved_dir(id, "");
	if (dir)
		saved_remove(dir);
	return 0;
}

/* A new sandbox from a saved VM (a snapshot of the store, unpacked by the
 * daemon into dir). */
static int mvm_from_saved(struct mvm_sandbox *m, const char *dir, wr_err *err)
{
	struct wr_vm_spec vs = m->vs;
	struct wr_qemu_net net;
	vs.net = mvm_net(m, &net);
	if (wr_vm_restore(&vs, dir, &m->vm, err) < 0)
		return -1;
	/* loaded and stopped: its guest (the snapshot's processes, which may
	 * connect at once) runs in mvm_start, after warrend attached the
	 * filter to QEMU's cgroup */
	m->start_pending = true;
	m->vs.memory_bytes = m->vm->memory_bytes;
	m->vs.disk_bytes = m->vm->disk_bytes;
	m->vs.cpus = m->vm->cpus;
	return 0;
}

static int mvm_create(const struct wr_sandbox_spec *spec, struct wr_sandbox **out, wr_err *err)
{
	return mvm_make(spec, -1, out, err);
}

/* warrend's recovery: the sandbox's defaults from its record, the VM found
 * again by its id and QEMU's pid (wr_vm_adopt; one that cannot be adopted
 * is killed and removed). */
static int mvm_adopt(const struct wr_sandbox_spec *spec, pid_t pid, struct wr_sandbox **out,
		     wr_err *err)
{
	if (spec->id == NULL || pid < 0)
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
	if (of(sb)->vm == NULL)
		return 0; /* suspended: no process */
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
	if (m->saved)
		saved_remove(m->saved);
	mvm_free(m);
	return r;
}

/* A pause is QMP stop: the vCPUs stop, guest memory and device state stay
 * in QEMU (the container tier freezes its cgroup); every command in the
 * guest stops with them, and the host's deadlines keep running. */
static int mvm_freeze(struct wr_sandbox *sb, bool frozen, wr_err *err)
{
	struct mvm_sandbox *m = of(sb);
	if (m->vm == NULL)
		return frozen ? 0
			      : wr_err_set(err, EINVAL, "microvm %s is suspended to disk",
					   m->vs.id ? m->vs.id : "");
	return frozen ? wr_vm_pause(m->vm, err) : wr_vm_resume(m->vm, err);
}

static int mvm_frozen(struct wr_sandbox *sb, wr_err *err)
{
	if (of(sb)->vm == NULL)
		return 1;
	return wr_vm_paused(of(sb)->vm, err);
}

static int mvm_usage(struct wr_sandbox *sb, struct wr_cgroup_stats *st, wr_err *err)
{
	if (of(sb)->vm == NULL) {
		memset(st, 0, sizeof(*st)); /* suspended: nothing in use */
		return 0;
	}
	return wr_vm_usage(of(sb)->vm, st, err);
}

static pid_t mvm_main_pid(const struct wr_sandbox *sb)
{
	const struct mvm_sandbox *m = (const struct mvm_sandbox *)(const void *)sb;
	return m->vm ? wr_vm_qemu_pid(m->vm) : 0;
}

/* A new QEMU from the saved state, stopped, with the NIC in the
 * sandbox's namespace when the state has one. */
static int mvm_load(struct mvm_sandbox *m, wr_err *err)
{
	struct wr_vm_spec vs = m->vs;
	struct wr_qemu_net net;
	vs.net = mvm_net(m, &net);
	return wr_vm_restore(&vs, m->saved, &m->vm, err);
}

/* keep_memory=false: the VM's state into <state>/microvm/saved/<id>
 * (qemu_snap.h; the disk a hard link of the stopped VM's), QEMU ended once
 * the daemon recorded it; resume starts a new QEMU from it. */
static int mvm_suspend(struct wr_sandbox *sb, enum wr_suspend_step step, wr_err *err)
{
	struct mvm_sandbox *m = of(sb);
	const char *id = m->vs.id;
	switch (step) {
	case WR_SUSPEND_SAVE: {
		if (m->vm == NULL)
			return 0;
		_cleanup_free_ char *tmp = saved_dir(id, ".tmp-");
		char *dir = saved_dir(id, "");
		if (tmp == NULL || dir == NULL) {
			free(dir);
			return wr_err_set(err, ENOMEM, "out of memory");
		}
		wr_qsnap_remove(tmp);
		saved_remove(dir); /* an obsolete one (not committed) */
		json_t *meta = NULL;
		if (wr_vm_save(m->vm, tmp, false, &meta, err) < 0 ||
		    wr_qsnap_publish(tmp, dir, err) < 0) {
			wr_qsnap_remove(tmp);
			if (meta) {
				_cleanup_err_ wr_err e2 = NULL;
				if (json_is_true(json_object_get(meta, "running")))
					wr_vm_resume(m->vm, &e2);
			}
			json_decref(meta);
			free(dir);
			return wr_err_wrap(err, "suspend microvm %s", id);
		}
		json_decref(meta);
		free(m->saved);
		m->saved = dir;
		return 0;
	}
	case WR_SUSPEND_END:
		/* QEMU goes: its memory, cgroup, uid and run directory */
		m->fsx.vm = NULL;
		return wr_vm_destroy(&m->vm, err);
	case WR_SUSPEND_UNDO:
		if (m->saved) {
			saved_remove(m->saved);
			free(m->saved);
			m->saved = NULL;
		}
		return m->vm ? wr_vm_resume(m->vm, err) : 0;
	case WR_SUSPEND_LOAD:
		if (m->vm)
			return 0;
		if (m->saved == NULL)
			return wr_err_set(err, ENOENT, "microvm %s has no saved state", id);
		return mvm_load(m, err);
	case WR_SUSPEND_RUN:
		if (m->vm == NULL)
			return wr_err_set(err, ENOENT, "microvm %s is not loaded", id);
		vm_sizes(m);
		m->fsx.vm = m->vm;
		if (m->saved) {
			saved_remove(m->saved);
			free(m->saved);
			m->saved = NULL;
		}
		return wr_vm_restore_run(m->vm, id, err);
	case WR_SUSPEND_UNLOAD: return m->saved ? wr_vm_destroy(&m->vm, err) : 0;
	}
	return wr_err_set(err, EINVAL, "suspend: unknown step");
}

/* A snapshot of the whole VM (RAM, devices, the disk as qcow2) into dir;
 * the VM runs again after when it ran. A suspended VM's saved state is
 * copied. */
static int mvm_save(struct wr_sandbox *sb, const char *dir, json_t **meta, wr_err *err)
{
	struct mvm_sandbox *m = of(sb);
	if (m->vm == NULL) {
		if (m->saved == NULL)
			return wr_err_set(err, ENOENT, "microvm %s has no state", m->vs.id);
		char from[1100], to[1100];
		if (mkdir(dir, 0700) < 0)
			return wr_err_sys(err, "mkdir %s", dir);
		json_t *j = wr_qsnap_read_meta(m->saved, err);
		int r = j ? 0 : -1;
		snprintf(from, sizeof(from), "%s/state", m->saved);
		snprintf(to, sizeof(to), "%s/state", dir);
		if (r == 0)
			r = wr_qsnap_link_or_copy(from, to, err);
		snprintf(from, sizeof(from), "%s/disk", m->saved);
		snprintf(to, sizeof(to), "%s/disk", dir);
		char *qimg = wr_find_in_path("qemu-img");
		char *argv[] = {qimg, "convert", "-q", "-f", "raw", "-O", "qcow2", from, to, NULL};
		if (r == 0)
			r = qimg ? wr_qsnap_run(argv, err)
				 : wr_err_set(err, ENOENT, "qemu-img not found");
		free(qimg);
		if (r == 0) {
			json_object_set_new(j, "disk_format", json_string("qcow2"));
			r = wr_qsnap_write_meta(dir, j, err);
		}
		if (r < 0) {
			json_decref(j);
			wr_qsnap_remove(dir);
			return wr_err_wrap(err, "snapshot suspended microvm %s", m->vs.id);
		}
		*meta = j;
		return 0;
	}
	if (wr_vm_save(m->vm, dir, true, meta, err) < 0)
		return -1;
	if (json_is_true(json_object_get(*meta, "running")) && wr_vm_resume(m->vm, err) < 0)
		return wr_err_wrap(err, "snapshot microvm %s: run it again", m->vs.id);
	return 0;
}

static int mvm_cgroup_v2_fd(const struct wr_sandbox *sb)
{
	/* no QEMU while its state is on disk (a pause with keep_memory=false) */
	const struct wr_vm *vm = ((const struct mvm_sandbox *)(const void *)sb)->vm;
	return vm ? wr_vm_cgroup_v2_fd(vm) : -1;
}

static int mvm_port(struct wr_sandbox *sb, const char *addr, unsigned port, bool add, wr_err *err)
{
	struct wr_vm *vm = of(sb)->vm;
	return wr_qemu_net_hostfwd(vm->qmp, &vm->qmp_lock, addr, port, add, err);
}

static int mvm_start(struct wr_sandbox *sb, wr_err *err)
{
	struct mvm_sandbox *m = of(sb);
	if (!m->start_pending)
		return 0;
	m->start_pending = false;
	if (wr_vm_restore_run(m->vm, NULL, err) < 0)
		return wr_err_wrap(err, "create microvm from a snapshot");
	return 0;
}

/* A suspended VM adopted after a restart: its namespace died with the
 * previous daemon; the resume's QEMU goes into this new one (NULL: none). */
static int mvm_set_net(struct wr_sandbox *sb, const struct wr_sandbox_net *net, wr_err *err)
{
	struct mvm_sandbox *m = of(sb);
	int fd = -1;
	char *resolv = NULL;
	if (net && (fd = fcntl(net->netns_fd, F_DUPFD_CLOEXEC, 3)) < 0)
		return wr_err_sys(err, "microvm: hold the network namespace");
	if (net && net->resolv_conf && (resolv = strdup(net->resolv_conf)) == NULL) {
		close(fd);
		return wr_err_set(err, ENOMEM, "out of memory");
	}
	if (m->netns_fd >= 0)
		close(m->netns_fd);
	free(m->resolv);
	m->netns_fd = fd;
	m->resolv = resolv;
	return 0;
}

/* CPU and memory harvesting on QEMU's cgroup (qemu_harvest.h: no
 * balloon in this tier, its template restores map RAM from a shared file).
 * The harvester samples running sandboxes only: vm is set. */
static int mvm_cpu_time(struct wr_sandbox *sb, uint64_t *ns, wr_err *err)
{
	struct wr_vm *vm = of(sb)->vm;
	return vm ? wr_qemu_hv_cpu_time(&vm->qp, ns, err) : wr_err_set(err, ENOENT, "no QEMU");
}

static int mvm_cpu_share(struct wr_sandbox *sb, uint64_t weight, bool idle, wr_err *err)
{
	struct wr_vm *vm = of(sb)->vm;
	return vm ? wr_qemu_hv_cpu_share(&vm->qp, weight, idle, err)
		  : wr_err_set(err, ENOENT, "no QEMU");
}

static int64_t mvm_idle_memory(struct wr_sandbox *sb, bool idle, wr_err *err)
{
	struct wr_vm *vm = of(sb)->vm;
	return vm ? wr_qemu_hv_idle_memory(&vm->qp, NULL, idle, err)
		  : wr_err_set(err, ENOENT, "no QEMU");
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
    .suspend = mvm_suspend,
    .save = mvm_save,
    .cgroup_v2_fd = mvm_cgroup_v2_fd,
    .port = mvm_port,
    .set_net = mvm_set_net,
    .start = mvm_start,
    .cpu_time = mvm_cpu_time,
    .cpu_share = mvm_cpu_share,
    .idle_memory = mvm_idle_memory,
};
