/* The container tier's checkpoints: paths, the pins that keep a suspended
 * sandbox's file system and network namespace while its processes are on
 * disk, and what PID 1 holds from outside (container_ckpt.c says how they
 * are used). */
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

/* ---- paths -------------------------------------------------------------- */

void wr_ckpt_pin_path(char *buf, size_t n, const char *id, const char *what)
{
	snprintf(buf, n, "%s/ckpt/%s%s%s", wr_cg_globals.run_dir, id, what ? "/" : "",
		 what ? what : "");
}

void wr_ckpt_img_path(char *buf, size_t n, const char *id, const char *suffix)
{
	snprintf(buf, n, "%s/ckpt/%s%s", wr_cg_globals.state_dir, id, suffix ? suffix : "");
}

const char *const wr_ckpt_pin_dirs[] = {"root", "dev", "shm", "sys", "devfs", "upper", NULL};

static void unpin_one(const char *path, bool dir)
{
	while (umount2(path, MNT_DETACH) == 0)
		;
	if (dir)
		rmdir(path);
	else
		unlink(path);
}

/* The pins of one checkpoint (all: the layer's too) detached and their
 * mount points removed; nothing there is fine. */
void wr_ckpt_unpin(const char *id, bool all)
{
	char p[4096];
	for (size_t i = 0; wr_ckpt_pin_dirs[i] && (all || i < LAYER_PINS); i++) {
		wr_ckpt_pin_path(p, sizeof(p), id, wr_ckpt_pin_dirs[i]);
		unpin_one(p, true);
	}
	wr_ckpt_pin_path(p, sizeof(p), id, "net");
	unpin_one(p, false);
	wr_ckpt_pin_path(p, sizeof(p), id, NULL);
	rmdir(p); /* fails while the layer's pins stay */
}

static void drop_images(const char *id)
{
	char p[4096];
	wr_ckpt_img_path(p, sizeof(p), id, ".log");
	unlink(p);
	wr_ckpt_img_path(p, sizeof(p), id, ".new");
	wr_rm_flat_dir(p);
	wr_ckpt_img_path(p, sizeof(p), id, NULL);
	wr_rm_flat_dir(p);
}

bool wr_container_ckpt_exists(const char *id)
{
	char p[4096];
	wr_ckpt_img_path(p, sizeof(p), id, "/warren.json");
	return access(p, F_OK) == 0;
}

void wr_container_ckpt_drop(const char *id)
{
	wr_ckpt_unpin(id, true);
	drop_images(id);
}

void wr_container_ckpt_done(const char *id)
{
	wr_ckpt_unpin(id, false);
	drop_images(id);
}

int wr_container_ckpt_upper(struct wr_sandbox *sb)
{
	char p[4096];
	wr_ckpt_pin_path(p, sizeof(p), sb->id, "upper");
	if (!wr_ckpt_is_mount_point(p))
		return -1;
	return open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

bool wr_container_ckpt_restored(const char *id)
{
	char p[4096];
	wr_ckpt_pin_path(p, sizeof(p), id, "devfs");
	return wr_ckpt_is_mount_point(p);
}

int wr_container_ckpt_root(const char *id)
{
	char p[4096];
	wr_ckpt_pin_path(p, sizeof(p), id, "root");
	return open(p, O_PATH | O_DIRECTORY | O_CLOEXEC);
}

static void sweep_dir(const char *dir, bool (*keep)(const char *id, void *ctx), void *ctx)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	while (d && (de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		char id[256];
		snprintf(id, sizeof(id), "%s", de->d_name);
		char *dot = strchr(id, '.');
		if (dot)
			*dot = 0;
		if (!keep(id, ctx))
			wr_container_ckpt_drop(id);
	}
	if (d)
		closedir(d);
}

void wr_container_ckpt_sweep(bool (*keep)(const char *id, void *ctx), void *ctx)
{
	char p[4096];
	snprintf(p, sizeof(p), "%s/ckpt", wr_cg_globals.run_dir);
	sweep_dir(p, keep, ctx);
	snprintf(p, sizeof(p), "%s/ckpt", wr_cg_globals.state_dir);
	sweep_dir(p, keep, ctx);
}

bool wr_ckpt_is_mount_point(const char *path)
{
	struct statx a, b;
	char parent[4096];
	snprintf(parent, sizeof(parent), "%s/..", path);
	if (statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, STATX_MNT_ID, &a) < 0 ||
	    statx(AT_FDCWD, parent, 0, STATX_MNT_ID, &b) < 0)
		return false;
	return a.stx_mnt_id != b.stx_mnt_id;
}

/* ---- what PID 1 holds from outside -------------------------------------- */

/* CRIU's key of an open file: file[mnt_id:inode], hex. */
static int file_key(pid_t pid, int fd, char *key, size_t n, wr_err *err)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/fdinfo/%d", (int)pid, fd);
	_cleanup_free_ char *info = NULL;
	if (wr_read_file_at(AT_FDCWD, p, &info, 65536, err) < 0)
		return -1;
	const char *m = strstr(info, "mnt_id:");
	if (m == NULL)
		return wr_err_set(err, EIO, "%s: no mnt_id", p);
	unsigned long mnt = strtoul(m + 7, NULL, 10);
	snprintf(p, sizeof(p), "/proc/%d/fd/%d", (int)pid, fd);
	struct stat st;
	if (stat(p, &st) < 0)
		return wr_err_sys(err, "stat %s", p);
	snprintf(key, n, "file[%lx:%lx]", mnt, (unsigned long)st.st_ino);
	return 0;
}

/* The fds PID 1 keeps (container.c): the upper directory (a writable
 * tmpfs mount) and the masks' source (read-only); their numbers and keys
 * in meta, clones of both pinned (pin_them). Any other fd above 2 is refused: it
 * would be a host file CRIU cannot restore. */
int wr_ckpt_pin_init_fds(struct wr_sandbox *sb, json_t *meta, bool pin_them, wr_err *err)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)sb->init_pid);
	DIR *d = opendir(path);
	if (d == NULL)
		return wr_err_sys(err, "list PID 1's fds");
	json_t *fds = json_array();
	json_object_set_new(meta, "fds", fds);
	int r = 0;
	struct dirent *de;
	while (r == 0 && (de = readdir(d)) != NULL) {
		char *end;
		long n = strtol(de->d_name, &end, 10);
		if (*end || end == de->d_name || n <= 2)
			continue;
		_cleanup_close_ int f = (int)syscall(__NR_pidfd_getfd, sb->init_pidfd, (int)n, 0);
		struct statfs sf;
		if (f < 0 || fstatfs(f, &sf) < 0) {
			r = wr_err_sys(err, "PID 1's fd %ld", n);
			break;
		}
		if (sf.f_type != TMPFS_MAGIC) {
			r = wr_err_set(err, EOPNOTSUPP, "PID 1 holds fd %ld of another file system",
				       n);
			break;
		}
		const char *what = (sf.f_flags & ST_RDONLY) ? "devfs" : "upper";
		char key[64];
		if ((r = file_key(sb->init_pid, (int)n, key, sizeof(key), err)) < 0)
			break;
		struct wr_cerr ce = {0};
		char pin[4096];
		wr_ckpt_pin_path(pin, sizeof(pin), sb->id, what);
		/* Pinned by an earlier checkpoint already: a restored PID 1's
		 * fds are of mounts that CRIU's reopening detached for good (no
		 * clone can be made of them), so the pin stays the source. */
		if (pin_them && !wr_ckpt_is_mount_point(pin)) {
			_cleanup_close_ int clone = wr_mount_clone(f, NULL, false, &ce);
			if (clone < 0 || wr_mount_attach(clone, AT_FDCWD, pin, &ce) < 0) {
				r = wr_err_set(err, ce.errnum, "keep PID 1's %s: %s", what, ce.msg);
				break;
			}
		}
		json_array_append_new(
		    fds, json_pack("{s:i, s:s, s:s}", "fd", (int)n, "key", key, "what", what));
	}
	closedir(d);
	if (r == 0 && json_array_size(fds) != 2)
		r = wr_err_set(err, EOPNOTSUPP,
			       "PID 1 holds %zu of its 2 fds (a sandbox made before checkpoints)",
			       json_array_size(fds));
	return r;
}

/* warren-init, the executable of PID 1, is a host file: its key, and its
 * identity, so that a restore refuses a binary replaced meanwhile. */
int wr_ckpt_exe_key(struct wr_sandbox *sb, json_t *meta, wr_err *err)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/exe", (int)sb->init_pid);
	struct stat run, now;
	if (stat(p, &run) < 0)
		return wr_err_sys(err, "PID 1's executable");
	_cleanup_close_ int f = open(wr_cg_globals.init_path, O_RDONLY | O_CLOEXEC);
	if (f < 0 || fstat(f, &now) < 0)
		return wr_err_sys(err, "open %s", wr_cg_globals.init_path);
	if (run.st_dev != now.st_dev || run.st_ino != now.st_ino)
		return wr_err_set(err, EOPNOTSUPP,
				  "PID 1 runs a warren-init that has since been replaced (%s): "
				  "restart the sandbox to checkpoint it",
				  wr_cg_globals.init_path);
	char key[64];
	if (file_key(getpid(), f, key, sizeof(key), err) < 0)
		return -1;
	json_object_set_new(meta, "exe", json_string(key));
	json_object_set_new(meta, "exe_dev", json_integer((json_int_t)now.st_dev));
	json_object_set_new(meta, "exe_ino", json_integer((json_int_t)now.st_ino));
	return 0;
}

/* ---- mounts ------------------------------------------------------------- */

/* The sandbox's mounts CRIU cannot find a source for (their superblocks
 * are attached nowhere it looks): /dev, /dev/shm and the masks (directories
 * of the writable layer's tmpfs), and /sys (a clone of another network
 * namespace's sysfs). Each is external with a key of its own (a key shared
 * by several mounts loses their flags on restore) and a source in the
 * pins. Device binds (host device nodes), /proc and devpts CRIU handles
 * itself. */
int wr_ckpt_external_mounts(struct wr_sandbox *sb, json_t *meta, wr_err *err)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/mountinfo", (int)sb->init_pid);
	_cleanup_free_ char *mi = NULL;
	if (wr_read_file_at(AT_FDCWD, p, &mi, 1 << 20, err) < 0)
		return -1;
	json_t *ext = json_array();
	json_object_set_new(meta, "mounts", ext);
	unsigned masks = 0;
	char *sv = NULL;
	for (char *ln = strtok_r(mi, "\n", &sv); ln; ln = strtok_r(NULL, "\n", &sv)) {
		char root[512], at[512], fstype[64];
		/* id parent major:minor root mountpoint opts [optional...] - fstype */
		if (sscanf(ln, "%*d %*d %*s %511s %511s", root, at) != 2)
			continue;
		const char *dash = strstr(ln, " - ");
		if (dash == NULL || sscanf(dash + 3, "%63s", fstype) != 1)
			continue;
		char key[32];
		const char *src = NULL;
		if (strcmp(fstype, "sysfs") == 0 && strcmp(at, "/sys") == 0) {
			src = "sys";
		} else if (strcmp(fstype, "tmpfs") == 0 && strcmp(root, "/devfs/dev") == 0 &&
			   strcmp(at, "/dev") == 0) {
			src = "dev";
		} else if (strcmp(fstype, "tmpfs") == 0 && strcmp(root, "/devfs/shm") == 0 &&
			   strcmp(at, "/dev/shm") == 0) {
			src = "shm";
		} else if (strcmp(fstype, "tmpfs") == 0 && (strcmp(root, "/devfs/mask") == 0 ||
							    strcmp(root, "/devfs/maskf") == 0)) {
			src = strcmp(root, "/devfs/mask") == 0 ? "devfs/mask" : "devfs/maskf";
		} else if (strcmp(fstype, "tmpfs") == 0 || strcmp(fstype, "sysfs") == 0) {
			return wr_err_set(err, EOPNOTSUPP, "a mount warren does not know: %s on %s",
					  fstype, at);
		} else {
			continue;
		}
		if (strncmp(src, "devfs/", 6) == 0)
			snprintf(key, sizeof(key), "m%u", masks++);
		else
			snprintf(key, sizeof(key), "%s", src);
		json_array_append_new(
		    ext, json_pack("{s:s, s:s, s:s}", "at", at, "key", key, "src", src));
	}
	return 0;
}

/* Clones of the sandbox's "/", /dev, /dev/shm and /sys, made from inside
 * its mount namespace (a mount of another namespace cannot be cloned from
 * outside it), by a thread of our own that leaves ours for it. */
struct clone_job {
	int pidfd;
	int fds[4];
	struct wr_cerr e;
};
static const char *const clone_paths[] = {"/", "/dev", "/dev/shm", "/sys"};
static const char *const clone_pins[] = {"root", "dev", "shm", "sys"};

static void *clone_thread(void *arg)
{
	struct clone_job *j = arg;
	/* setns into a mount namespace needs a fs_struct of our own */
	if (unshare(CLONE_FS) < 0 || setns(j->pidfd, CLONE_NEWNS) < 0) {
		wr_cerr_sys(&j->e, "enter the sandbox's mount namespace");
		return NULL;
	}
	for (size_t i = 0; i < 4; i++)
		if ((j->fds[i] = wr_mount_clone(AT_FDCWD, clone_paths[i], false, &j->e)) < 0)
			break;
	return NULL;
}

int wr_ckpt_pin_mounts(struct wr_sandbox *sb, wr_err *err)
{
	struct clone_job j = {.pidfd = sb->init_pidfd, .fds = {-1, -1, -1, -1}};
	pthread_t t;
	int pr = pthread_create(&t, NULL, clone_thread, &j);
	if (pr != 0)
		return wr_err_set(err, pr, "start a thread");
	pthread_join(t, NULL);
	int r = 0;
	for (size_t i = 0; i < 4; i++) {
		char pin[4096];
		wr_ckpt_pin_path(pin, sizeof(pin), sb->id, clone_pins[i]);
		if (r == 0 && j.fds[i] < 0)
			r = wr_err_set(err, j.e.errnum, "keep the sandbox's %s: %s", clone_paths[i],
				       j.e.msg);
		if (r == 0 && wr_mount_attach(j.fds[i], AT_FDCWD, pin, &j.e) < 0)
			r = wr_err_set(err, j.e.errnum, "keep the sandbox's %s: %s", clone_paths[i],
				       j.e.msg);
		if (j.fds[i] >= 0)
			close(j.fds[i]);
	}
	if (r < 0)
		return r;
	char pin[4096], ns[64];
	wr_ckpt_pin_path(pin, sizeof(pin), sb->id, "net");
	snprintf(ns, sizeof(ns), "/proc/%d/ns/net", (int)sb->init_pid);
	if (mount(ns, pin, NULL, MS_BIND, NULL) < 0)
		return wr_err_sys(err, "keep the sandbox's network namespace");
	return 0;
}

/* ckpt/ (shared: 0700) or one sandbox's directory in it (0711). Restored
 * tasks open some of what CRIU left them themselves (images such as
 * tty-info.img, timens-0.img; the pins' paths), some still with host uid 0
 * but no capability over the files (their user namespace has no mapping
 * yet), some with the sandbox's root uid: they get through a sandbox's
 * directory (search only, no listing) from CRIU's fd of it; ckpt/ above it
 * is root's alone, so no other host user reaches any of it. */
int wr_ckpt_own_dir(const char *path, bool shared, wr_err *err)
{
	mode_t mode = shared ? 0700 : 0711;
	if (mkdir(path, mode) < 0 && errno != EEXIST)
		return wr_err_sys(err, "mkdir %s", path);
	if (chown(path, 0, 0) < 0 || chmod(path, mode) < 0)
		return wr_err_sys(err, "own %s", path);
	return 0;
}

int wr_ckpt_make_pins(struct wr_sandbox *sb, wr_err *err)
{
	char p[4096];
	snprintf(p, sizeof(p), "%s/ckpt", wr_cg_globals.run_dir);
	if (wr_ckpt_own_dir(p, true, err) < 0)
		return -1;
	wr_ckpt_pin_path(p, sizeof(p), sb->id, NULL);
	if (wr_ckpt_own_dir(p, false, err) < 0)
		return -1;
	for (size_t i = 0; wr_ckpt_pin_dirs[i]; i++) {
		wr_ckpt_pin_path(p, sizeof(p), sb->id, wr_ckpt_pin_dirs[i]);
		if (mkdir(p, 0700) < 0 && (errno != EEXIST || i < LAYER_PINS))
			return wr_err_sys(err, "mkdir %s", p);
	}
	wr_ckpt_pin_path(p, sizeof(p), sb->id, "net");
	int f = open(p, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
	if (f < 0)
		return wr_err_sys(err, "create %s", p);
	close(f);
	return 0;
}
