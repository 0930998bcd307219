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
 *   SAVE   pins -> a running tree: dump --leave-running -> freeze the
 *          cgroup -> images published
 *   END    the tree killed (the pins and images stay)
 *   UNDO   thaw, the images and pins go
 *   LOAD   criu restore --leave-stopped: the tree again, every task stopped
 *   RUN    SIGCONT to every task, then the images and pins go
 *   UNLOAD the restored tree killed (the images and pins stay)
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
#include "tiers/container_internal.h"

static char *g_criu; /* NULL: no working CRIU (the daemon checked it) */

void wr_container_set_criu(const char *path)
{
	free(g_criu);
	g_criu = path && *path ? strdup(path) : NULL;
}

/* CRIU's log level for warrend's runs: errors, warnings and the outline
 * of each step (enough to see where it stopped). */
#define CRIU_LOG_LEVEL "-v2"
/* The largest file deleted while open that a dump keeps (CRIU's default:
 * 1 MiB); a larger one fails the dump. */
#define GHOST_LIMIT (1ULL << 30)
/* A dump or restore that takes longer is killed (a 64 MiB tree: well
 * under a second here). */
#define CRIU_TIMEOUT_MS 120000

/* ---- paths -------------------------------------------------------------- */

static void pin_path(char *buf, size_t n, const char *id, const char *what)
{
	snprintf(buf, n, "%s/ckpt/%s%s%s", wr_cg_globals.run_dir, id, what ? "/" : "",
		 what ? what : "");
}

static void img_path(char *buf, size_t n, const char *id, const char *suffix)
{
	snprintf(buf, n, "%s/ckpt/%s%s", wr_cg_globals.state_dir, id, suffix ? suffix : "");
}

/* Images are flat directories of files. */
static void remove_flat_dir(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;
	while (d && (de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			unlinkat(dirfd(d), de->d_name, 0);
	if (d)
		closedir(d);
	rmdir(path);
}

static const char *const pin_dirs[] = {"root", "dev", "shm", "sys", "devfs", "upper", NULL};
/* pin_dirs from here on stay from a checkpoint to the sandbox's end
 * (LAYER_PINS): see wr_container_ckpt_done. */
#define LAYER_PINS 4

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
static void unpin(const char *id, bool all)
{
	char p[4096];
	for (size_t i = 0; pin_dirs[i] && (all || i < LAYER_PINS); i++) {
		pin_path(p, sizeof(p), id, pin_dirs[i]);
		unpin_one(p, true);
	}
	pin_path(p, sizeof(p), id, "net");
	unpin_one(p, false);
	pin_path(p, sizeof(p), id, NULL);
	rmdir(p); /* fails while the layer's pins stay */
}

static void drop_images(const char *id)
{
	char p[4096];
	img_path(p, sizeof(p), id, ".log");
	unlink(p);
	img_path(p, sizeof(p), id, ".new");
	remove_flat_dir(p);
	img_path(p, sizeof(p), id, NULL);
	remove_flat_dir(p);
}

bool wr_container_ckpt_exists(const char *id)
{
	char p[4096];
	img_path(p, sizeof(p), id, "/warren.json");
	return access(p, F_OK) == 0;
}

void wr_container_ckpt_drop(const char *id)
{
	unpin(id, true);
	drop_images(id);
}

void wr_container_ckpt_done(const char *id)
{
	unpin(id, false);
	drop_images(id);
}

static bool is_mount_point(const char *path);

int wr_container_ckpt_upper(struct wr_sandbox *sb)
{
	char p[4096];
	pin_path(p, sizeof(p), sb->id, "upper");
	if (!is_mount_point(p))
		return -1;
	return open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

bool wr_container_ckpt_restored(const char *id)
{
	char p[4096];
	pin_path(p, sizeof(p), id, "devfs");
	return is_mount_point(p);
}

int wr_container_ckpt_root(const char *id)
{
	char p[4096];
	pin_path(p, sizeof(p), id, "root");
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

static bool is_mount_point(const char *path)
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
 * in meta, clones of both pinned. Any other fd above 2 is refused: it
 * would be a host file CRIU cannot restore. */
static int pin_init_fds(struct wr_sandbox *sb, json_t *meta, wr_err *err)
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
		pin_path(pin, sizeof(pin), sb->id, what);
		/* Pinned by an earlier checkpoint already: a restored PID 1's
		 * fds are of mounts that CRIU's reopening detached for good (no
		 * clone can be made of them), so the pin stays the source. */
		if (!is_mount_point(pin)) {
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
static int exe_key(struct wr_sandbox *sb, json_t *meta, wr_err *err)
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
static int external_mounts(struct wr_sandbox *sb, json_t *meta, wr_err *err)
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

static int pin_mounts(struct wr_sandbox *sb, wr_err *err)
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
		pin_path(pin, sizeof(pin), sb->id, clone_pins[i]);
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
	pin_path(pin, sizeof(pin), sb->id, "net");
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
static int own_dir(const char *path, bool shared, wr_err *err)
{
	mode_t mode = shared ? 0700 : 0711;
	if (mkdir(path, mode) < 0 && errno != EEXIST)
		return wr_err_sys(err, "mkdir %s", path);
	if (chown(path, 0, 0) < 0 || chmod(path, mode) < 0)
		return wr_err_sys(err, "own %s", path);
	return 0;
}

static int make_pins(struct wr_sandbox *sb, wr_err *err)
{
	char p[4096];
	snprintf(p, sizeof(p), "%s/ckpt", wr_cg_globals.run_dir);
	if (own_dir(p, true, err) < 0)
		return -1;
	pin_path(p, sizeof(p), sb->id, NULL);
	if (own_dir(p, false, err) < 0)
		return -1;
	for (size_t i = 0; pin_dirs[i]; i++) {
		pin_path(p, sizeof(p), sb->id, pin_dirs[i]);
		if (mkdir(p, 0700) < 0 && (errno != EEXIST || i < LAYER_PINS))
			return wr_err_sys(err, "mkdir %s", p);
	}
	pin_path(p, sizeof(p), sb->id, "net");
	int f = open(p, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
	if (f < 0)
		return wr_err_sys(err, "create %s", p);
	close(f);
	return 0;
}

/* ---- running criu ------------------------------------------------------- */

struct strv {
	char *v[160];
	size_t n;
	bool oom;
};

static void sv_add(struct strv *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sv_add(struct strv *s, const char *fmt, ...)
{
	if (s->n + 1 >= sizeof(s->v) / sizeof(s->v[0])) {
		s->oom = true;
		return;
	}
	va_list ap;
	va_start(ap, fmt);
	if (vasprintf(&s->v[s->n], fmt, ap) < 0) {
		s->v[s->n] = NULL;
		s->oom = true;
	} else {
		s->n++;
	}
	va_end(ap);
}

static void sv_free(struct strv *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	s->n = 0;
}

/* Where a restore's criu sees the pins (criu_child). */
#define PINS_AT "/tmp/warren-pins"

/* How the child that execs criu enters the sandbox: a dump joins PID 1's
 * network and cgroup namespaces; a restore waits until the parent has put
 * it in PID 1's cgroup (go), joins the network namespace, makes a cgroup
 * namespace rooted there (as PID 1's was) and a mount namespace of its own
 * (CRIU mounts the restored tree's there before it pivots). fds[i] is dup'd
 * to 3 + i. */
struct criu_run {
	char *const *argv;
	const char *log;  /* stdout and stderr */
	int init_pidfd;	  /* dump */
	int netns;	  /* restore */
	int go;		  /* restore: read end of the go pipe */
	const char *pins; /* restore: the pins' directory, shown at PINS_AT */
	const int *fds;
	size_t nfds;
};

static __attribute__((noreturn)) void criu_child(const struct criu_run *r)
{
	umask(022); /* the images: see save() */
	int log = open(r->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (log < 0 || nul < 0 || dup2(nul, 0) < 0 || dup2(log, 1) < 0 || dup2(log, 2) < 0)
		_exit(120);
	if (r->go >= 0) {
		char c;
		if (read(r->go, &c, 1) != 1)
			_exit(121);
		if (setns(r->netns, CLONE_NEWNET) < 0 ||
		    unshare(CLONE_NEWCGROUP | CLONE_NEWNS) < 0 ||
		    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
			_exit(122);
		/* The restored tasks look up the pins by path themselves, with
		 * the sandbox's ids, and the run directory's ancestors need not
		 * let them through: in this mount namespace only, the pins are
		 * shown at PINS_AT, on a tmpfs of our own over /tmp. The clone
		 * comes first: the run directory may be under /tmp. */
		int t = wr_open_tree(AT_FDCWD, r->pins,
				     OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
		if (t < 0 ||
		    mount("warren", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0711") < 0 ||
		    mkdir(PINS_AT, 0711) < 0 ||
		    wr_move_mount(t, "", AT_FDCWD, PINS_AT, MOVE_MOUNT_F_EMPTY_PATH) < 0)
			_exit(125);
	} else if (setns(r->init_pidfd, CLONE_NEWNET | CLONE_NEWCGROUP) < 0) {
		_exit(122);
	}
	/* the fds criu inherits go to 3.. (dup2 clears close-on-exec; the
	 * sources are all above them, made so by the parent) */
	for (size_t i = 0; i < r->nfds; i++)
		if (dup2(r->fds[i], 3 + (int)i) < 0)
			_exit(123);
	if (wr_close_range(3 + (unsigned)r->nfds, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
		_exit(124);
	/* CRIU's no-breakpoint mode: on paravirtualised hosts (PVM) its
	 * hardware breakpoints never fire and every dump hangs at its end */
	char *envp[] = {"CRIU_FAULT=130", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
	execve(r->argv[0], r->argv, envp);
	_exit(127);
}

/* The error CRIU logged first (its log in dir), for the caller's message;
 * the log is kept as <state_dir>/ckpt/<id>.log (until the next attempt or
 * the sandbox's end) for whoever looks into it. */
static void criu_error(const char *id, const char *dir, const char *name, char *out, size_t n)
{
	char p[4096], kept[4096];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	img_path(kept, sizeof(kept), id, ".log");
	_cleanup_free_ char *log = NULL;
	snprintf(out, n, "see %.1000s", kept);
	int r = wr_read_file_at(AT_FDCWD, p, &log, 8 << 20, NULL);
	rename(p, kept);
	if (r < 0)
		return;
	/* The first error, the cause (the later ones follow from it), but
	 * one CRIU goes on after (its own RLIMIT_NOFILE in a user namespace)
	 * and its closing "Dumping FAILED." or "Restoring FAILED.". */
	char *e = NULL;
	for (char *f = strstr(log, "Error ("); f && !e; f = strstr(f + 1, "Error (")) {
		char *nl = strchr(f, '\n');
		size_t len = nl ? (size_t)(nl - f) : strlen(f);
		if (!memmem(f, len, "FAILED", 6) && !memmem(f, len, "RLIMIT_NOFILE", 13))
			e = f;
	}
	if (e == NULL)
		return;
	char *nl = strchr(e, '\n');
	if (nl)
		*nl = 0;
	snprintf(out, n, "%.300s (log: %.1000s)", e, kept);
}

/* fds moved above the ones the child dups them to (3 .. 3+n). */
static int fds_high(int *fds, size_t n, wr_err *err)
{
	for (size_t i = 0; i < n; i++) {
		int f = fcntl(fds[i], F_DUPFD_CLOEXEC, 64);
		if (f < 0)
			return wr_err_sys(err, "dup");
		close(fds[i]);
		fds[i] = f;
	}
	return 0;
}

/* Runs criu as r says; cg: the cgroup the child joins first (restore).
 * Waits for it (bounded); 0 when it exited 0. */
static int run_criu(const struct criu_run *in, struct wr_cgroup *cg, const char *id,
		    const char *dir, const char *logname, wr_err *err)
{
	struct criu_run r = *in;
	int go[2] = {-1, -1};
	if (cg && pipe2(go, O_CLOEXEC) < 0)
		return wr_err_sys(err, "pipe");
	r.go = cg ? go[0] : -1;
	pid_t pid = fork();
	if (pid == 0)
		criu_child(&r);
	int fe = errno;
	if (go[0] >= 0)
		close(go[0]);
	if (pid < 0) {
		if (go[1] >= 0)
			close(go[1]);
		return wr_err_set(err, fe, "fork criu");
	}
	_cleanup_close_ int pfd = wr_pidfd_open(pid, 0);
	int rc = 0;
	if (cg) {
		_cleanup_err_ wr_err e2 = NULL;
		/* Invariant: the child is in PID 1's cgroup before it makes its
		 * cgroup namespace (rooted at its cgroup) and forks the tree. */
		if (wr_cgroup_attach(cg, pid, false, &e2) < 0)
			rc = wr_err_set(err, wr_err_code(e2), "%s", e2->msg);
		else if (write(go[1], "g", 1) != 1)
			rc = wr_err_sys(err, "start criu");
		close(go[1]);
	}
	struct pollfd pf = {.fd = pfd, .events = POLLIN};
	int pr = pfd >= 0 ? poll(&pf, 1, rc == 0 ? CRIU_TIMEOUT_MS : 0) : 1;
	if (pr == 0) {
		kill(pid, SIGKILL);
		if (rc == 0)
			rc = wr_err_set(err, ETIMEDOUT, "criu %s: no answer after %d s", r.argv[1],
					CRIU_TIMEOUT_MS / 1000);
	}
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (rc == 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
		char why[1400];
		criu_error(id, dir, logname, why, sizeof(why));
		if (WIFEXITED(st) && WEXITSTATUS(st) >= 120 && WEXITSTATUS(st) <= 127)
			snprintf(why, sizeof(why), "could not start %s (status %d)", r.argv[0],
				 WEXITSTATUS(st));
		if (strstr(why, "--tcp-established"))
			rc = wr_err_set(err, ESRCH,
					"the sandbox holds an established TCP connection, which a "
					"checkpoint does not keep: close it, or pause with "
					"keep_memory: true (criu: %s)",
					why);
		else
			rc = wr_err_set(err, EIO, "criu %s failed: %s", r.argv[1], why);
	}
	return rc;
}

/* ---- SAVE --------------------------------------------------------------- */

static void uncount(struct wr_sandbox **sb)
{
	atomic_fetch_sub(&(*sb)->cmds, 1);
}

static int save(struct wr_sandbox *sb, wr_err *err)
{
	struct wr_container_globals *g = &wr_cg_globals;
	if (g_criu == NULL)
		return wr_err_set(err, EOPNOTSUPP, "no working CRIU on this node");
	if (sb->init_pid == 0)
		return wr_err_set(err, EALREADY, "sandbox %s is on disk already", sb->id);
	char dir[3072], p[4096];
	img_path(dir, sizeof(dir), sb->id, ".new");
	snprintf(p, sizeof(p), "%s/ckpt", g->state_dir);
	/* what an earlier attempt (or a crash) left; the layer's pins of an
	 * earlier checkpoint stay (they are its source now) */
	wr_container_ckpt_done(sb->id);
	/* a first checkpoint's layer pins go again with it when it is undone */
	sb->ckpt_first = !wr_container_ckpt_restored(sb->id);
	if (own_dir(p, true, err) < 0 || own_dir(dir, false, err) < 0)
		return -1;
	_cleanup_(json_decrefp) json_t *meta = json_object();
	int was_frozen = wr_container_frozen(sb, NULL);
	/* The parasite CRIU puts in each task reads the task's /proc: the
	 * sandbox's /proc (and devpts) are mounted first, as for a command,
	 * and this counts as one until the end, so that an idle release does
	 * not take them back meanwhile (container_mounts.c). */
	atomic_fetch_add(&sb->cmds, 1);
	__attribute__((cleanup(uncount))) struct wr_sandbox *counted = sb;
	int r = wr_container_devpts(sb, err);
	if (r == 0)
		r = make_pins(sb, err);
	if (r == 0)
		r = exe_key(sb, meta, err);
	if (r == 0)
		r = external_mounts(sb, meta, err);
	if (r == 0)
		r = pin_init_fds(sb, meta, err);
	if (r == 0)
		r = pin_mounts(sb, err);
	/* a frozen tree cannot be seized: thawed for the dump, frozen again
	 * at once after it (the daemon's pause or this save's own) */
	if (r == 0 && was_frozen == 1)
		r = wr_container_freeze(sb, false, err);
	struct strv a = {0};
	if (r == 0) {
		sv_add(&a, "%s", g_criu);
		sv_add(&a, "dump");
		sv_add(&a, "-D");
		sv_add(&a, "%s", dir);
		sv_add(&a, "-o");
		sv_add(&a, "dump.log");
		sv_add(&a, CRIU_LOG_LEVEL);
		sv_add(&a, "-t");
		sv_add(&a, "%d", (int)sb->init_pid);
		sv_add(&a, "--leave-running");
		sv_add(&a, "--manage-cgroups=ignore");
		sv_add(&a, "--network-lock");
		sv_add(&a, "skip");
		/* what an agent's processes commonly hold: file locks, files
		 * deleted while open (their content goes into the images,
		 * bounded by the sandbox's disk), half-open connections
		 * (dropped). Not established TCP connections: restoring one
		 * needs TCP_REPAIR, CAP_NET_ADMIN over the network namespace,
		 * whose owner is the sandbox's first user namespace, not the
		 * one CRIU makes; such a dump is refused (ESRCH). */
		sv_add(&a, "--skip-in-flight");
		sv_add(&a, "--file-locks");
		sv_add(&a, "--ghost-limit");
		sv_add(&a, "%llu", (unsigned long long)GHOST_LIMIT);
		sv_add(&a, "--external");
		sv_add(&a, "mnt[]");
		json_t *m;
		size_t i;
		json_array_foreach(json_object_get(meta, "mounts"), i, m)
		{
			sv_add(&a, "--external");
			sv_add(&a, "mnt[%s]:%s", json_string_value(json_object_get(m, "at")),
			       json_string_value(json_object_get(m, "key")));
		}
		sv_add(&a, "--external");
		sv_add(&a, "%s", json_string_value(json_object_get(meta, "exe")));
		json_array_foreach(json_object_get(meta, "fds"), i, m)
		{
			sv_add(&a, "--external");
			sv_add(&a, "%s", json_string_value(json_object_get(m, "key")));
		}
		if (a.oom)
			r = wr_err_set(err, ENOMEM, "criu arguments");
	}
	if (r == 0) {
		char log[4096];
		snprintf(log, sizeof(log), "%s/criu.out", dir);
		struct criu_run cr = {.argv = a.v, .log = log, .init_pidfd = sb->init_pidfd};
		r = run_criu(&cr, NULL, sb->id, dir, "dump.log", err);
	}
	sv_free(&a);
	/* Invariant: frozen right after the dump, before the images are
	 * published: what the tree does from here on is never seen (the
	 * daemon's END kills it; UNDO thaws it). */
	_cleanup_err_ wr_err ferr = NULL;
	if (wr_container_freeze(sb, true, &ferr) < 0 && r == 0)
		r = wr_err_set(err, wr_err_code(ferr), "%s", ferr->msg);
	if (r == 0) {
		snprintf(p, sizeof(p), "%s/warren.json", dir);
		if (json_dump_file(meta, p, JSON_COMPACT) < 0)
			r = wr_err_set(err, EIO, "write %s", p);
	}
	_cleanup_close_ int dfd = r == 0 ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	if (r == 0) {
		/* every image on disk before the name says it is complete; each
		 * readable by the restored tasks (CRIU makes them 0600; see
		 * own_dir) */
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
		img_path(p, sizeof(p), sb->id, NULL);
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
		unpin(sb->id, sb->ckpt_first);
		remove_flat_dir(dir);
		return wr_err_wrap(err, "checkpoint sandbox %s", sb->id);
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
	pin_path(pin, sizeof(pin), sb->id, "root");
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

static int load(struct wr_sandbox *sb, wr_err *err)
{
	struct wr_container_globals *g = &wr_cg_globals;
	if (g_criu == NULL)
		return wr_err_set(err, EOPNOTSUPP, "no working CRIU on this node");
	if (sb->init_pid != 0)
		return wr_err_set(err, EALREADY, "sandbox %s runs", sb->id);
	char dir[3072], p[4096];
	img_path(dir, sizeof(dir), sb->id, NULL);
	snprintf(p, sizeof(p), "%s/warren.json", dir);
	json_error_t je;
	_cleanup_(json_decrefp) json_t *meta = json_load_file(p, 0, &je);
	if (meta == NULL)
		return wr_err_set(err, ENOENT, "sandbox %s: its checkpoint %s: %s", sb->id, p,
				  je.text);
	for (size_t i = 0; pin_dirs[i]; i++) {
		pin_path(p, sizeof(p), sb->id, pin_dirs[i]);
		if (!is_mount_point(p))
			return wr_err_set(err, ENOENT, "sandbox %s: its kept %s is gone (%s)",
					  sb->id, pin_dirs[i], p);
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
	pin_path(p, sizeof(p), sb->id, "root");
	_cleanup_close_ int rootfd = open(p, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0)
		r = wr_err_sys(err, "open %s", p);
	if (r == 0 && ll &&
	    (fds[nfds++] =
		 wr_landlock_ruleset_at(&wr_container_cmd_landlock, rootfd, &llflags, &ce)) < 0)
		r = wr_err_set(err, ce.errnum, "%s", ce.msg);
	pin_path(p, sizeof(p), sb->id, "net");
	if (r == 0 && (fds[nfds++] = open(p, O_RDONLY | O_CLOEXEC)) < 0)
		r = wr_err_sys(err, "open %s", p);
	size_t exe_at = nfds;
	if (r == 0) {
		struct stat st;
		fds[nfds++] = open(g->init_path, O_RDONLY | O_CLOEXEC);
		if (fds[exe_at] < 0 || fstat(fds[exe_at], &st) < 0)
			r = wr_err_sys(err, "open %s", g->init_path);
		else if ((json_int_t)st.st_dev !=
			     json_integer_value(json_object_get(meta, "exe_dev")) ||
			 (json_int_t)st.st_ino !=
			     json_integer_value(json_object_get(meta, "exe_ino")))
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
		pin_path(p, sizeof(p), sb->id, json_string_value(json_object_get(m, "what")));
		if ((fds[nfds++] = wr_mount_clone(AT_FDCWD, p, false, &ce)) < 0)
			r = wr_err_set(err, ce.errnum, "%s", ce.msg);
	}
	/* the images directory, as criu sees it: /tmp is covered there
	 * (criu_child), and the state directory may be under it */
	size_t dir_at = nfds;
	if (r == 0 && (fds[nfds++] = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		r = wr_err_sys(err, "open %s", dir);
	if (r == 0)
		r = fds_high(fds, nfds, err);

	struct strv a = {0};
	char pidfile[4096];
	snprintf(pidfile, sizeof(pidfile), "%s/restore.pid", dir);
	unlink(pidfile);
	if (r == 0) {
		sv_add(&a, "%s", g_criu);
		sv_add(&a, "restore");
		sv_add(&a, "-D");
		sv_add(&a, "/proc/self/fd/%zu", 3 + dir_at);
		sv_add(&a, "-o");
		sv_add(&a, "restore.log");
		sv_add(&a, CRIU_LOG_LEVEL);
		sv_add(&a, "-d");
		sv_add(&a, "--leave-stopped");
		sv_add(&a, "--pidfile"); /* in the images directory */
		sv_add(&a, "restore.pid");
		sv_add(&a, "--root");
		sv_add(&a, PINS_AT "/root");
		sv_add(&a, "--manage-cgroups=ignore");
		sv_add(&a, "--file-locks");
		sv_add(&a, "--ext-mount-map");
		sv_add(&a, "auto");
		json_array_foreach(json_object_get(meta, "mounts"), i, m)
		{
			sv_add(&a, "--external");
			sv_add(&a, "mnt[%s]:" PINS_AT "/%s",
			       json_string_value(json_object_get(m, "key")),
			       json_string_value(json_object_get(m, "src")));
		}
		size_t k = ll ? 2 : 1;
		sv_add(&a, "--inherit-fd");
		sv_add(&a, "fd[%zu]:%s", 3 + k, json_string_value(json_object_get(meta, "exe")));
		json_array_foreach(fdm, i, m)
		{
			sv_add(&a, "--inherit-fd");
			sv_add(&a, "fd[%zu]:%s", 3 + k + 1 + i,
			       json_string_value(json_object_get(m, "key")));
		}
		if (ll) {
			sv_add(&a, "--landlock-ruleset-fd");
			sv_add(&a, "3");
			sv_add(&a, "--landlock-flags");
			sv_add(&a, "%u", llflags);
			sv_add(&a, "--landlock-root-children");
		}
		if (a.oom)
			r = wr_err_set(err, ENOMEM, "criu arguments");
	}
	if (r == 0) {
		char log[4096];
		snprintf(log, sizeof(log), "%s/criu.out", dir);
		char pins[4096];
		pin_path(pins, sizeof(pins), sb->id, NULL);
		struct criu_run cr = {.argv = a.v,
				      .log = log,
				      .pins = pins,
				      .init_pidfd = -1,
				      .netns = fds[ll ? 1 : 0],
				      .fds = fds,
				      .nfds = nfds};
		r = run_criu(&cr, cg, sb->id, dir, "restore.log", err);
	}
	sv_free(&a);
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
	case WR_SUSPEND_LOAD: return load(sb, err);
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
