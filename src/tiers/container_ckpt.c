/* The container tier's pause that frees the memory (tier op suspend,
 * tiers/tier.h): the sandbox's processes are checkpointed to disk with CRIU
 * and end; the resume restores them into the same sandbox. Measurements
 * and the reasons for each choice: docs/API-LIFECYCLE.md, "Checkpoint with
 * CRIU".
 *
 * What stays while the processes are gone: the sandbox's cgroups, its uid
 * range and record, and its file system, kept by mounts ("pins") under
 * <run_dir>/ckpt/<id>/ in the host's mount namespace, so that a daemon
 * crash loses none of it:
 *
 *   root/   a clone of the sandbox's root mount (the overlay: its upper
 *           and work directories and image layers with it)
 *   dev/, shm/, sys/   clones of its /dev, /dev/shm and /sys mounts
 *   devfs/  a clone of PID 1's read-only devfs/ (the masks' source)
 *   upper/  a clone of PID 1's upper directory
 *   net     its network namespace (a bind of the nsfs file)
 *
 * The images go to <state_dir>/ckpt/<id>/ (written as <id>.new, published
 * by rename), with warren.json: the CRIU keys of what PID 1 holds from
 * outside the sandbox (its executable, the two fds) and which mounts are
 * external, and where each comes from on restore.
 *
 * CRIU runs inside the sandbox's network and cgroup namespaces (and, for a
 * restore, in PID 1's cgroup), so those are never in the dumped set and
 * the restored tasks inherit them; the user, PID, mount, UTS and IPC
 * namespaces are made again by CRIU, with the same id mapping. The
 * commands' Landlock domain, which the kernel does not show, is entered
 * again from the same ruleset (warren's CRIU patch 0002).
 *
 * Steps (the daemon's order, lifecycle_suspend.c):
 *   SAVE   pins -> freeze -> dump --leave-running --freeze-cgroup (the
 *          tree stays frozen) -> images published
 *   END    the tree killed (the pins and images stay)
 *   UNDO   thaw, the images and pins go
 *   LOAD   criu restore --leave-stopped: the tree again, every task stopped
 *   RUN    SIGCONT to every task, then the images and pins go
 *   UNLOAD the restored tree killed (the images and pins stay)
 *
 * Snapshots with processes use the same dump and restore: save_procs dumps
 * the tree into a directory of the caller's (no pins; the tree runs on, or
 * stays paused), and a new sandbox's create (load_procs) pins its own fresh
 * file system as a checkpoint would, ends its fresh tree and restores the
 * saved one from those (read-only) images under its own ids (CRIU patch
 * 0004 moves the user namespace's map), left stopped until the tier's
 * start, which the daemon calls once the network filter is attached.
 *
 * This file: the steps. container_ckpt_pins.c: paths, pins, what PID 1
 * holds; container_ckpt_criu.c: running criu (container_ckpt.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/magic.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "common/util.h"
#include "isolate/landlock.h"
#include "isolate/mount.h"
#include "tiers/container_ckpt.h"
#include "tiers/container_internal.h"

/* ---- SAVE --------------------------------------------------------------- */

static void uncount(struct wr_sandbox **sb)
{
	atomic_fetch_sub(&(*sb)->cmds, 1);
}

/* The tree's images into dir (made by the caller), what the restore needs
 * in meta (warren.json, written here), every image readable by the
 * restored tasks. pin: the pins a suspended sandbox keeps are made too (a
 * snapshot's dump makes none).
 *
 * Invariant: frozen before the dump and after it. criu seizes the frozen
 * tree (--freeze-cgroup) and leaves it frozen, so the tree never runs
 * between its dump and what comes after (the end of the tree, the capture
 * of its files): no file changes under a dumped process. */
static int dump_tree(struct wr_sandbox *sb, const char *dir, json_t *meta, bool pin, wr_err *err)
{
	/* The parasite CRIU puts in each task reads the task's /proc: the
	 * sandbox's /proc (and devpts) are mounted first, as for a command,
	 * and this counts as one until the end, so that an idle release does
	 * not take them back meanwhile (container_mounts.c). */
	atomic_fetch_add(&sb->cmds, 1);
	__attribute__((cleanup(uncount))) struct wr_sandbox *counted = sb;
	int r = wr_container_devpts(sb, err);
	if (r == 0 && pin)
		r = wr_ckpt_make_pins(sb, err);
	if (r == 0)
		r = wr_ckpt_exe_key(sb, meta, err);
	if (r == 0)
		r = wr_ckpt_external_mounts(sb, meta, err);
	if (r == 0)
		r = wr_ckpt_pin_init_fds(sb, meta, pin, err);
	if (r == 0 && pin)
		r = wr_ckpt_pin_mounts(sb, err);
	if (r == 0)
		r = wr_container_freeze(sb, true, err);
	/* criu's freezer: the sandbox's cgroup where the freeze is (v2, or
	 * the unified one of a hybrid host). A v1-only host has none to
	 * give: the tree is thawed for the dump and frozen at once after. */
	int fz[1] = {-1};
	size_t nfz = 0;
	if (r == 0 && wr_cgroup_v2_fd(sb->cg) >= 0) {
		if ((fz[0] = fcntl(wr_cgroup_v2_fd(sb->cg), F_DUPFD_CLOEXEC, 64)) < 0)
			r = wr_err_sys(err, "dup");
		else
			nfz = 1;
	} else if (r == 0) {
		r = wr_container_freeze(sb, false, err);
	}
	struct strv a = {0};
	if (r == 0) {
		wr_ckpt_sv_add(&a, "%s", wr_ckpt_criu());
		wr_ckpt_sv_add(&a, "dump");
		wr_ckpt_sv_add(&a, "-D");
		wr_ckpt_sv_add(&a, "%s", dir);
		wr_ckpt_sv_add(&a, "-o");
		wr_ckpt_sv_add(&a, "dump.log");
		wr_ckpt_sv_add(&a, CRIU_LOG_LEVEL);
		wr_ckpt_sv_add(&a, "-t");
		wr_ckpt_sv_add(&a, "%d", (int)sb->init_pid);
		wr_ckpt_sv_add(&a, "--leave-running");
		if (nfz) {
			wr_ckpt_sv_add(&a, "--freeze-cgroup");
			wr_ckpt_sv_add(&a, "/proc/self/fd/3");
		}
		wr_ckpt_sv_add(&a, "--manage-cgroups=ignore");
		wr_ckpt_sv_add(&a, "--network-lock");
		wr_ckpt_sv_add(&a, "skip");
		/* what an agent's processes commonly hold: file locks, files
		 * deleted while open (their content goes into the images,
		 * bounded by the sandbox's disk), half-open connections
		 * (dropped). Not established TCP connections: restoring one
		 * needs TCP_REPAIR, CAP_NET_ADMIN over the network namespace,
		 * whose owner is the sandbox's first user namespace, not the
		 * one CRIU makes; such a dump is refused (ESRCH). */
		wr_ckpt_sv_add(&a, "--skip-in-flight");
		wr_ckpt_sv_add(&a, "--file-locks");
		wr_ckpt_sv_add(&a, "--ghost-limit");
		wr_ckpt_sv_add(&a, "%llu", (unsigned long long)GHOST_LIMIT);
		wr_ckpt_sv_add(&a, "--external");
		wr_ckpt_sv_add(&a, "mnt[]");
		json_t *m;
		size_t i;
		json_array_foreach(json_object_get(meta, "mounts"), i, m)
		{
			wr_ckpt_sv_add(&a, "--external");
			wr_ckpt_sv_add(&a, "mnt[%s]:%s",
				       json_string_value(json_object_get(m, "at")),
				       json_string_value(json_object_get(m, "key")));
		}
		wr_ckpt_sv_add(&a, "--external");
		wr_ckpt_sv_add(&a, "%s", json_string_value(json_object_get(meta, "exe")));
		json_array_foreach(json_object_get(meta, "fds"), i, m)
		{
			wr_ckpt_sv_add(&a, "--external");
			wr_ckpt_sv_add(&a, "%s", json_string_value(json_object_get(m, "key")));
		}
		if (a.oom)
			r = wr_err_set(err, ENOMEM, "criu arguments");
	}
	if (r == 0) {
		char log[4096];
		snprintf(log, sizeof(log), "%s/criu.out", dir);
		struct criu_run cr = {
		    .argv = a.v, .log = log, .init_pidfd = sb->init_pidfd, .fds = fz, .nfds = nfz};
		r = wr_ckpt_run_criu(&cr, NULL, sb->id, dir, "dump.log", err);
	}
	wr_ckpt_sv_free(&a);
	if (fz[0] >= 0)
		close(fz[0]);
	/* the v1-only path's freeze again (criu's own left it frozen) */
	_cleanup_err_ wr_err ferr = NULL;
	if (wr_container_freeze(sb, true, &ferr) < 0 && r == 0)
		r = wr_err_set(err, wr_err_code(ferr), "%s", ferr->msg);
	json_object_set_new(meta, "id_base", json_integer((json_int_t)sb->idmap.base));
	char p[4096];
	if (r == 0) {
		snprintf(p, sizeof(p), "%s/warren.json", dir);
		if (json_dump_file(meta, p, JSON_COMPACT) < 0)
			r = wr_err_set(err, EIO, "write %s", p);
	}
	_cleanup_close_ int dfd = r == 0 ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	if (r == 0) {
		/* every image on disk before a name says it is complete; each
		 * readable by the restored tasks (CRIU makes them 0600; see
		 * wr_ckpt_own_dir) */
		DIR *d = fdopendir(dup(dfd));
		struct dirent *de;
		while (d && (de = readdir(d)) != NULL) {
			if (de->d_name[0] == '.')
				continue;
			int f = openat(dfd, de->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
			if (f >= 0) {
				if (fchmod(f, 0644) < 0 && r == 0)
					r = wr_err_sys(err, "chmod %s", de->d_name);
				fsync(f);
				close(f);
			}
		}
		if (d)
			closedir(d);
	}
	return r;
}

static int save(struct wr_sandbox *sb, wr_err *err)
{
	struct wr_container_globals *g = &wr_cg_globals;
	if (wr_ckpt_criu() == NULL)
		return wr_err_set(err, EOPNOTSUPP, "no working CRIU on this node");
	if (sb->init_pid == 0)
		return wr_err_set(err, EALREADY, "sandbox %s is on disk already", sb->id);
	char dir[3072], p[4096];
	wr_ckpt_img_path(dir, sizeof(dir), sb->id, ".new");
	snprintf(p, sizeof(p), "%s/ckpt", g->state_dir);
	/* what an earlier attempt (or a crash) left; the layer's pins of an
	 * earlier checkpoint stay (they are its source now) */
	wr_container_ckpt_done(sb->id);
	/* a first checkpoint's layer pins go again with it when it is undone */
	sb->ckpt_first = !wr_container_ckpt_restored(sb->id);
	if (wr_ckpt_own_dir(p, true, err) < 0 || wr_ckpt_own_dir(dir, false, err) < 0)
		return -1;
	_cleanup_(json_decrefp) json_t *meta = json_object();
	int was_frozen = wr_container_frozen(sb, NULL);
	int r = dump_tree(sb, dir, meta, true, err);
	if (r == 0) {
		wr_ckpt_img_path(p, sizeof(p), sb->id, NULL);
		if (rename(dir, p) < 0)
			r = wr_err_sys(err, "publish %s", p);
		else {
			snprintf(p, sizeof(p), "%s/ckpt", g->state_dir);
			_cleanup_close_ int pd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			if (pd >= 0)
				fsync(pd);
		}
	}
	if (r < 0) {
		if (was_frozen != 1) {
			_cleanup_err_ wr_err e2 = NULL;
			wr_container_freeze(sb, false, &e2);
		}
		/* all of it but the log of the failure (and the layer pins of
		 * an earlier checkpoint) */
		wr_ckpt_unpin(sb->id, sb->ckpt_first);
		wr_rm_flat_dir(dir);
		return wr_err_wrap(err, "checkpoint sandbox %s", sb->id);
	}
	return 0;
}

int wr_container_save_procs(struct wr_sandbox *sb, const char *dir, wr_err *err)
{
	if (wr_ckpt_criu() == NULL)
		return wr_err_set(err, EOPNOTSUPP, "no working CRIU on this node");
	if (sb->init_pid == 0)
		return wr_err_set(err, EALREADY, "sandbox %s is on disk", sb->id);
	if (mkdir(dir, 0755) < 0)
		return wr_err_sys(err, "mkdir %s", dir);
	_cleanup_(json_decrefp) json_t *meta = json_object();
	int was_frozen = wr_container_frozen(sb, NULL);
	int r = dump_tree(sb, dir, meta, false, err);
	if (was_frozen != 1) {
		_cleanup_err_ wr_err e2 = NULL;
		if (wr_container_freeze(sb, false, &e2) < 0 && r == 0)
			r = wr_err_set(err, wr_err_code(e2), "%s", e2->msg);
	}
	/* criu's own files are no part of the images */
	static const char *const own[] = {"dump.log", "criu.out", "stats-dump"};
	for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++) {
		char p[4096];
		snprintf(p, sizeof(p), "%s/%s", dir, own[i]);
		unlink(p);
	}
	if (r < 0) {
		wr_rm_flat_dir(dir);
		return wr_err_wrap(err, "save the processes of sandbox %s", sb->id);
	}
	return 0;
}

/* ---- the tree gone, the tree back --------------------------------------- */

/* Kill whatever runs in the sandbox and wait for PID 1; the sandbox then
 * has no process (main_pid 0). */
static int end_tree(struct wr_sandbox *sb, wr_err *err)
{
	int r = wr_cgroup_kill(sb->cg, err);
	if (sb->init_pidfd >= 0) {
		wr_pidfd_send_signal(sb->init_pidfd, SIGKILL, NULL, 0);
		struct pollfd pf = {.fd = sb->init_pidfd, .events = POLLIN};
		while (poll(&pf, 1, 5000) < 0 && errno == EINTR)
			;
		close(sb->init_pidfd);
	}
	sb->init_pidfd = -1;
	sb->init_pid = 0;
	atomic_store(&sb->devpts, false);
	if (sb->root_fd >= 0)
		close(sb->root_fd);
	/* file operations have a root to look at (the pinned one) */
	char pin[4096];
	wr_ckpt_pin_path(pin, sizeof(pin), sb->id, "root");
	sb->root_fd = open(pin, O_PATH | O_DIRECTORY | O_CLOEXEC);
	return r;
}

/* The cgroup the restored tree goes to: PID 1's (the sandbox's own on v1
 * and hybrid hosts, its leaf "init" on pure v2, made again when a daemon
 * restart lost our handle of it: the tree is gone, the leaf is empty). */
static int init_cgroup(struct wr_sandbox *sb, struct wr_cgroup **cg, wr_err *err)
{
	if (wr_cgroup_root_mode(wr_cg_globals.cgroot) != WR_CG_V2) {
		*cg = sb->cg;
		return 0;
	}
	if (sb->init_cg == NULL) {
		unlinkat(wr_cgroup_v2_fd(sb->cg), "init", AT_REMOVEDIR);
		if (wr_cgroup_create_leaf(sb->cg, "init", &sb->init_cg, err) < 0)
			return -1;
	}
	*cg = sb->init_cg;
	return 0;
}

/* SIGCONT to the restored tree (criu restore --leave-stopped): every task
 * is in PID 1's cgroup (criu's, with --manage-cgroups=ignore). */
int wr_container_ckpt_continue(struct wr_sandbox *sb, wr_err *err)
{
	if (wr_cgroup_root_mode(wr_cg_globals.cgroot) != WR_CG_V2 || sb->init_cg)
		return wr_cgroup_signal(sb->init_cg ? sb->init_cg : sb->cg, SIGCONT, err);
	/* pure v2 after a restart: the leaf by its path */
	_cleanup_free_ char *procs = NULL;
	int v2 = wr_cgroup_v2_fd(sb->cg);
	if (v2 < 0 || wr_read_file_at(v2, "init/cgroup.procs", &procs, 1 << 22, err) < 0)
		return -1;
	char *sv = NULL;
	for (char *ln = strtok_r(procs, "\n", &sv); ln; ln = strtok_r(NULL, "\n", &sv)) {
		int pfd = wr_pidfd_open((pid_t)atoi(ln), 0);
		if (pfd >= 0) {
			wr_pidfd_send_signal(pfd, SIGCONT, NULL, 0);
			close(pfd);
		}
	}
	return 0;
}

/* The restored tree's masks must be read-only, as made (container.c): a
 * writable one would let the sandbox fill the masks' source. */
static int check_masks(pid_t pid, wr_err *err)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/mountinfo", (int)pid);
	_cleanup_free_ char *mi = NULL;
	if (wr_read_file_at(AT_FDCWD, p, &mi, 1 << 20, err) < 0)
		return -1;
	char *sv = NULL;
	for (char *ln = strtok_r(mi, "\n", &sv); ln; ln = strtok_r(NULL, "\n", &sv)) {
		char root[512], at[512], opts[512];
		if (sscanf(ln, "%*d %*d %*s %511s %511s %511s", root, at, opts) != 3)
			continue;
		bool ro = strncmp(opts, "ro,", 3) == 0 || strcmp(opts, "ro") == 0;
		if ((strcmp(root, "/devfs/mask") == 0 || strcmp(root, "/devfs/maskf") == 0 ||
		     strcmp(root, "/devfs/dev") == 0) &&
		    !ro)
			return wr_err_set(err, EPERM, "restored mount %s is writable", at);
	}
	return 0;
}

/* warren.json as a dump writes it (dump_tree): PID 1's two fds of the
 * writable layer, external mounts whose sources are pins, keys of CRIU's
 * form. The daemon restores only processes it signed (daemon/snapshot.h);
 * this keeps a damaged file from naming any other path or overflowing the
 * restore's fds. */
static bool key_ok(const char *k)
{
	if (k == NULL || *k == 0 || strlen(k) > 64)
		return false;
	for (const char *p = k; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || strchr("[]:", *p)))
			return false;
	return true;
}

static int check_meta(const json_t *meta, wr_err *err)
{
	static const char *const srcs[] = {"sys", "dev", "shm", "devfs/mask", "devfs/maskf"};
	json_t *fds = json_object_get(meta, "fds"), *m;
	size_t i;
	if (json_array_size(fds) != 2)
		return wr_err_set(err, EINVAL, "checkpoint: %zu fds of PID 1, not 2",
				  json_array_size(fds));
	json_array_foreach(fds, i, m)
	{
		const char *what = json_string_value(json_object_get(m, "what"));
		if (!key_ok(json_string_value(json_object_get(m, "key"))) || what == NULL ||
		    (strcmp(what, "upper") != 0 && strcmp(what, "devfs") != 0))
			return wr_err_set(err, EINVAL,
					  "checkpoint: PID 1's fd %zu is not one "
					  "of the writable layer",
					  i);
	}
	if (!key_ok(json_string_value(json_object_get(meta, "exe"))))
		return wr_err_set(err, EINVAL, "checkpoint: no key of PID 1's executable");
	json_t *mounts = json_object_get(meta, "mounts");
	if (!json_is_array(mounts) || json_array_size(mounts) > 64)
		return wr_err_set(err, EINVAL, "checkpoint: bad external mounts");
	json_array_foreach(mounts, i, m)
	{
		const char *src = json_string_value(json_object_get(m, "src"));
		bool known = false;
		for (size_t k = 0; src && k < sizeof(srcs) / sizeof(srcs[0]); k++)
			known |= strcmp(src, srcs[k]) == 0;
		if (!known || !key_ok(json_string_value(json_object_get(m, "key"))))
			return wr_err_set(err, EINVAL,
					  "checkpoint: external mount %zu is not "
					  "one of the sandbox's",
					  i);
	}
	return 0;
}

/* The tree of the images in `images` (NULL: the sandbox's own checkpoint)
 * restored into the sandbox, every task stopped. Images of another
 * sandbox (a snapshot's, perhaps of another node) are only read: criu's
 * log and pid file go to the sandbox's own <state_dir>/ckpt/<id>/. */
static int load(struct wr_sandbox *sb, const char *images, wr_err *err)
{
	struct wr_container_globals *g = &wr_cg_globals;
	if (wr_ckpt_criu() == NULL)
		return wr_err_set(err, EOPNOTSUPP, "no working CRIU on this node");
	if (sb->init_pid != 0)
		return wr_err_set(err, EALREADY, "sandbox %s runs", sb->id);
	char dir[3072], work[3072], p[4096];
	wr_ckpt_img_path(work, sizeof(work), sb->id, NULL);
	snprintf(dir, sizeof(dir), "%s", images ? images : work);
	snprintf(p, sizeof(p), "%s/warren.json", dir);
	json_error_t je;
	_cleanup_(json_decrefp) json_t *meta = json_load_file(p, 0, &je);
	if (meta == NULL)
		return wr_err_set(err, ENOENT, "sandbox %s: its checkpoint %s: %s", sb->id, p,
				  je.text);
	if (check_meta(meta, err) < 0)
		return wr_err_wrap(err, "sandbox %s", sb->id);
	for (size_t i = 0; wr_ckpt_pin_dirs[i]; i++) {
		wr_ckpt_pin_path(p, sizeof(p), sb->id, wr_ckpt_pin_dirs[i]);
		if (!wr_ckpt_is_mount_point(p))
			return wr_err_set(err, ENOENT, "sandbox %s: its kept %s is gone (%s)",
					  sb->id, wr_ckpt_pin_dirs[i], p);
	}
	/* leftovers of a restore a crash cut short */
	if (wr_cgroup_nprocs(sb->cg, NULL) > 0)
		wr_cgroup_kill(sb->cg, NULL);
	/* Invariant: thawed before criu joins it (a frozen cgroup would stop
	 * criu itself); the daemon froze it when it paused (and set its
	 * memory to be reclaimed first: undone with the thaw) */
	if (wr_container_freeze(sb, false, err) < 0)
		return -1;
	struct wr_cgroup *cg;
	if (init_cgroup(sb, &cg, err) < 0)
		return -1;

	/* fds criu gets, from 3: the ruleset (where Landlock is), the network
	 * namespace, the files of the tree's PID 1 (its executable and two
	 * mounts), the images directory */
	int fds[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
	size_t nfds = 0;
	int r = 0;
	struct wr_cerr ce = {0};
	uint32_t llflags = 0;
	bool ll = wr_landlock_abi() > 0;
	wr_ckpt_pin_path(p, sizeof(p), sb->id, "root");
	_cleanup_close_ int rootfd = open(p, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0)
		r = wr_err_sys(err, "open %s", p);
	if (r == 0 && ll &&
	    (fds[nfds++] =
		 wr_landlock_ruleset_at(&wr_container_cmd_landlock, rootfd, &llflags, &ce)) < 0)
		r = wr_err_set(err, ce.errnum, "%s", ce.msg);
	wr_ckpt_pin_path(p, sizeof(p), sb->id, "net");
	if (r == 0 && (fds[nfds++] = open(p, O_RDONLY | O_CLOEXEC)) < 0)
		r = wr_err_sys(err, "open %s", p);
	size_t exe_at = nfds;
	if (r == 0) {
		struct stat st;
		fds[nfds++] = open(g->init_path, O_RDONLY | O_CLOEXEC);
		if (fds[exe_at] < 0 || fstat(fds[exe_at], &st) < 0)
			r = wr_err_sys(err, "open %s", g->init_path);
		/* a snapshot's: criu checks the executable it maps (size and
		 * build-id) */
		else if (images == NULL &&
			 ((json_int_t)st.st_dev !=
			      json_integer_value(json_object_get(meta, "exe_dev")) ||
			  (json_int_t)st.st_ino !=
			      json_integer_value(json_object_get(meta, "exe_ino"))))
			r = wr_err_set(err, EOPNOTSUPP,
				       "%s was replaced since the checkpoint: its PID 1 cannot "
				       "be restored",
				       g->init_path);
	}
	json_t *fdm = json_object_get(meta, "fds"), *m;
	size_t i;
	json_array_foreach(fdm, i, m)
	{
		if (r < 0 || nfds >= 8)
			break;
		/* a detached clone, as PID 1 held (a later checkpoint clones
		 * it again) */
		wr_ckpt_pin_path(p, sizeof(p), sb->id,
				 json_string_value(json_object_get(m, "what")));
		if ((fds[nfds++] = wr_mount_clone(AT_FDCWD, p, false, &ce)) < 0)
			r = wr_err_set(err, ce.errnum, "%s", ce.msg);
	}
	/* the images directory, as criu sees it: /tmp is covered there
	 * (criu_child), and the state directory may be under it */
	size_t dir_at = nfds;
	if (r == 0 && (fds[nfds++] = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		r = wr_err_sys(err, "open %s", dir);
	size_t work_at = dir_at;
	if (r == 0 && images) {
		work_at = nfds;
		if ((fds[nfds++] = open(work, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
			r = wr_err_sys(err, "open %s", work);
	}
	if (r == 0)
		r = wr_ckpt_fds_high(fds, nfds, err);

	struct strv a = {0};
	char pidfile[4096];
	snprintf(pidfile, sizeof(pidfile), "%s/restore.pid", work);
	unlink(pidfile);
	if (r == 0) {
		wr_ckpt_sv_add(&a, "%s", wr_ckpt_criu());
		wr_ckpt_sv_add(&a, "restore");
		wr_ckpt_sv_add(&a, "-D");
		wr_ckpt_sv_add(&a, "/proc/self/fd/%zu", 3 + dir_at);
		wr_ckpt_sv_add(&a, "-W");
		wr_ckpt_sv_add(&a, "/proc/self/fd/%zu", 3 + work_at);
		wr_ckpt_sv_add(&a, "-o");
		wr_ckpt_sv_add(&a, "restore.log");
		wr_ckpt_sv_add(&a, CRIU_LOG_LEVEL);
		wr_ckpt_sv_add(&a, "-d");
		wr_ckpt_sv_add(&a, "--leave-stopped");
		wr_ckpt_sv_add(&a, "--pidfile"); /* in the work directory */
		wr_ckpt_sv_add(&a, "restore.pid");
		wr_ckpt_sv_add(&a, "--root");
		wr_ckpt_sv_add(&a, PINS_AT "/root");
		wr_ckpt_sv_add(&a, "--manage-cgroups=ignore");
		wr_ckpt_sv_add(&a, "--file-locks");
		/* the user namespace onto this sandbox's ids (warren's CRIU
		 * patch 0004): the same as dumped for its own checkpoint,
		 * moved for a snapshot of another sandbox */
		wr_ckpt_sv_add(&a, "--userns-lower-base");
		wr_ckpt_sv_add(&a, "%u", (unsigned)sb->idmap.base);
		wr_ckpt_sv_add(&a, "--ext-mount-map");
		wr_ckpt_sv_add(&a, "auto");
		json_array_foreach(json_object_get(meta, "mounts"), i, m)
		{
			wr_ckpt_sv_add(&a, "--external");
			wr_ckpt_sv_add(&a, "mnt[%s]:" PINS_AT "/%s",
				       json_string_value(json_object_get(m, "key")),
				       json_string_value(json_object_get(m, "src")));
		}
		size_t k = ll ? 2 : 1;
		wr_ckpt_sv_add(&a, "--inherit-fd");
		wr_ckpt_sv_add(&a, "fd[%zu]:%s", 3 + k,
			       json_string_value(json_object_get(meta, "exe")));
		json_array_foreach(fdm, i, m)
		{
			wr_ckpt_sv_add(&a, "--inherit-fd");
			wr_ckpt_sv_add(&a, "fd[%zu]:%s", 3 + k + 1 + i,
				       json_string_value(json_object_get(m, "key")));
		}
		if (ll) {
			wr_ckpt_sv_add(&a, "--landlock-ruleset-fd");
			wr_ckpt_sv_add(&a, "3");
			wr_ckpt_sv_add(&a, "--landlock-flags");
			wr_ckpt_sv_add(&a, "%u", llflags);
			wr_ckpt_sv_add(&a, "--landlock-root-children");
		}
		if (a.oom)
			r = wr_err_set(err, ENOMEM, "criu arguments");
	}
	if (r == 0) {
		char log[4096];
		snprintf(log, sizeof(log), "%s/criu.out", work);
		char pins[4096];
		wr_ckpt_pin_path(pins, sizeof(pins), sb->id, NULL);
		struct criu_run cr = {.argv = a.v,
				      .log = log,
				      .pins = pins,
				      .init_pidfd = -1,
				      .netns = fds[ll ? 1 : 0],
				      .fds = fds,
				      .nfds = nfds};
		r = wr_ckpt_run_criu(&cr, cg, sb->id, work, "restore.log", err);
	}
	wr_ckpt_sv_free(&a);
	for (size_t f = 0; f < nfds; f++)
		if (fds[f] >= 0)
			close(fds[f]);
	pid_t pid = 0;
	if (r == 0) {
		_cleanup_free_ char *txt = NULL;
		if (wr_read_file_at(AT_FDCWD, pidfile, &txt, 64, err) < 0 ||
		    (pid = (pid_t)atoi(txt)) <= 0)
			r = r < 0 ? r : wr_err_set(err, EIO, "criu restore: no pid in %s", pidfile);
	}
	int pidfd = r == 0 ? wr_pidfd_open(pid, 0) : -1;
	if (r == 0 && pidfd < 0)
		r = wr_err_sys(err, "restored PID 1 (%d) is gone", (int)pid);
	if (r == 0)
		r = check_masks(pid, err);
	if (r == 0) {
		char rp[64];
		snprintf(rp, sizeof(rp), "/proc/%d/root", (int)pid);
		int rf = open(rp, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (rf < 0)
			r = wr_err_sys(err, "open the restored root");
		else {
			if (sb->root_fd >= 0)
				close(sb->root_fd);
			sb->root_fd = rf;
		}
	}
	if (r < 0) {
		if (pidfd >= 0)
			close(pidfd);
		/* whatever the restore made goes; the checkpoint stays */
		wr_cgroup_kill(sb->cg, NULL);
		wr_container_freeze(sb, true, NULL);
		return wr_err_wrap(err, "restore sandbox %s", sb->id);
	}
	sb->init_pid = pid;
	sb->init_pidfd = pidfd;
	/* not our child: criu forked it and exited (as after a restart) */
	sb->adopted = true;
	/* the dump had them mounted (save), so the restored tree has them:
	 * an idle release may take them back */
	atomic_store(&sb->devpts, true);
	return 0;
}

/* ---- processes of a snapshot -------------------------------------------- */

int wr_container_load_procs(struct wr_sandbox *sb, const char *images, wr_err *err)
{
	if (wr_ckpt_criu() == NULL)
		return wr_err_set(err, EOPNOTSUPP,
				  "no working CRIU on this node: a snapshot's processes cannot "
				  "be restored");
	char p[4096];
	snprintf(p, sizeof(p), "%s/ckpt", wr_cg_globals.state_dir);
	/* The fresh sandbox's file system and network namespace pinned as a
	 * checkpoint's are (the restore's --root and external mounts come
	 * from the pins), its fresh tree ended, the snapshot's tree restored
	 * in its place with this sandbox's ids. */
	_cleanup_(json_decrefp) json_t *meta = json_object();
	sb->ckpt_first = true;
	int r = wr_ckpt_own_dir(p, true, err);
	wr_ckpt_img_path(p, sizeof(p), sb->id, NULL);
	if (r == 0)
		r = wr_ckpt_own_dir(p, false, err);
	if (r == 0)
		r = wr_ckpt_make_pins(sb, err);
	if (r == 0)
		r = wr_ckpt_pin_init_fds(sb, meta, true, err);
	if (r == 0)
		r = wr_ckpt_pin_mounts(sb, err);
	if (r == 0)
		r = end_tree(sb, err);
	if (r == 0)
		r = load(sb, images, err);
	if (r < 0) {
		wr_container_ckpt_drop(sb->id);
		return wr_err_wrap(err, "restore a snapshot's processes");
	}
	sb->procs_stopped = true;
	return 0;
}

/* The tier's create: a sandbox (by the spawner), then, for a snapshot with
 * processes (spec->restore), its tree replaced by the saved one. */
int wr_container_create_op(const struct wr_sandbox_spec *spec, struct wr_sandbox **out, wr_err *err)
{
	if (wr_container_create_spawned(spec, out, err) < 0)
		return -1;
	if (spec->restore && wr_container_load_procs(*out, spec->restore, err) < 0) {
		_cleanup_err_ wr_err e2 = NULL;
		wr_container_destroy(out, &e2);
		return -1;
	}
	return 0;
}

int wr_container_start(struct wr_sandbox *sb, wr_err *err)
{
	if (!sb->procs_stopped)
		return 0;
	sb->procs_stopped = false;
	int r = wr_container_ckpt_continue(sb, err);
	wr_container_ckpt_done(sb->id);
	return r;
}

int wr_container_suspend(struct wr_sandbox *sb, enum wr_suspend_step step, wr_err *err)
{
	switch (step) {
	case WR_SUSPEND_SAVE: return save(sb, err);
	case WR_SUSPEND_END: return end_tree(sb, err);
	case WR_SUSPEND_UNDO: {
		int r = wr_container_freeze(sb, false, err);
		if (sb->ckpt_first)
			wr_container_ckpt_drop(sb->id);
		else
			wr_container_ckpt_done(sb->id);
		return r;
	}
	case WR_SUSPEND_LOAD: return load(sb, NULL, err);
	case WR_SUSPEND_RUN: {
		int r = wr_container_ckpt_continue(sb, err);
		wr_container_ckpt_done(sb->id);
		return r;
	}
	case WR_SUSPEND_UNLOAD: {
		int r = end_tree(sb, err);
		wr_container_freeze(sb, true, NULL);
		return r;
	}
	}
	return wr_err_set(err, EINVAL, "suspend step %d", (int)step);
}
