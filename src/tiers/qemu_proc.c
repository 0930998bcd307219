/* One jailed QEMU process for both VM tiers (see qemu_proc.h). */
#include "tiers/qemu_proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/mount.h>
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
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "common/util.h"
#include "isolate/cgroup.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct wr_cgroup_root *g_cgroot;
static char *g_cgbase;
static uint8_t g_uid_used[WR_QEMU_UID_SLOTS / 8];
static unsigned g_uid_next;

int wr_qemu_init(const char *cgroup_base, wr_err *err)
{
	const char *base = cgroup_base ? cgroup_base : "warren-qemu";
	pthread_mutex_lock(&g_lock);
	int r = 0;
	if (g_cgroot) {
		if (strcmp(g_cgbase, base) != 0)
			r = wr_err_set(err, EINVAL, "qemu: cgroup base %s, not %s (one a process)",
				       g_cgbase, base);
	} else if (wr_cgroup_root_open(base, &g_cgroot, err) < 0) {
		r = wr_err_wrap(err, "QEMU's cgroups");
	} else if ((g_cgbase = strdup(base)) == NULL) {
		r = wr_err_set(err, ENOMEM, "out of memory");
	}
	pthread_mutex_unlock(&g_lock);
	return r;
}

/* ---- uids --------------------------------------------------------------------- */

static uid_t uid_get(void)
{
	uid_t u = 0;
	pthread_mutex_lock(&g_lock);
	for (unsigned i = 0; i < WR_QEMU_UID_SLOTS && u == 0; i++) {
		unsigned s = (g_uid_next + i) % WR_QEMU_UID_SLOTS;
		if (!(g_uid_used[s / 8] & (1u << (s % 8)))) {
			g_uid_used[s / 8] |= (uint8_t)(1u << (s % 8));
			g_uid_next = s + 1;
			u = WR_QEMU_UID_BASE + s;
		}
	}
	pthread_mutex_unlock(&g_lock);
	return u;
}

/* An adopted QEMU's uid: false when another live QEMU has it already. */
static bool uid_claim(uid_t u)
{
	if (u < WR_QEMU_UID_BASE || u - WR_QEMU_UID_BASE >= WR_QEMU_UID_SLOTS)
		return false;
	unsigned s = u - WR_QEMU_UID_BASE;
	pthread_mutex_lock(&g_lock);
	bool free_ = !(g_uid_used[s / 8] & (1u << (s % 8)));
	g_uid_used[s / 8] |= (uint8_t)(1u << (s % 8));
	pthread_mutex_unlock(&g_lock);
	return free_;
}

static void uid_put(uid_t u)
{
	if (u < WR_QEMU_UID_BASE || u - WR_QEMU_UID_BASE >= WR_QEMU_UID_SLOTS)
		return;
	unsigned s = u - WR_QEMU_UID_BASE;
	pthread_mutex_lock(&g_lock);
	g_uid_used[s / 8] &= (uint8_t) ~(1u << (s % 8));
	pthread_mutex_unlock(&g_lock);
}

int wr_qemu_prepare(struct wr_qemu *q, const char *dir, wr_err *err)
{
	*q = (struct wr_qemu){.pidfd = -1};
	if (g_cgroot == NULL)
		return wr_err_set(err, EINVAL, "qemu: not initialised");
	if ((q->uid = uid_get()) == 0)
		return wr_err_set(err, EAGAIN, "qemu: no uid left");
	if (mkdir(dir, 0700) < 0) {
		int r = wr_err_sys(err, "mkdir %s", dir);
		uid_put(q->uid);
		q->uid = 0;
		return r;
	}
	if ((q->dir = strdup(dir)) == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	return 0;
}

/* ---- the jail ------------------------------------------------------------------ */

/* The directory of a jail file named "dir/name" (one level: etc/...). */
static int jail_parent(int root, const char *name, wr_err *err)
{
	const char *slash = strchr(name, '/');
	if (slash == NULL)
		return 0;
	char dir[64];
	if (strchr(slash + 1, '/') || (size_t)(slash - name) >= sizeof(dir) || slash == name)
		return wr_err_set(err, EINVAL, "jail: %s: one directory level at most", name);
	memcpy(dir, name, (size_t)(slash - name));
	dir[slash - name] = '\0';
	if (mkdirat(root, dir, 0755) < 0 && errno != EEXIST)
		return wr_err_sys(err, "jail: mkdir %s", dir);
	return 0;
}

/* The jail's mount points, made by the parent (the child only mounts). */
static int jail_make(const char *dir, const struct wr_qemu_spawn *s, wr_err *err)
{
	int root = -1, r = 0;
	char path[600];
	snprintf(path, sizeof(path), "%s/root", dir);
	if (mkdir(path, 0755) < 0 || (root = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
		return wr_err_sys(err, "jail %s", path);
	if (mkdirat(root, "usr", 0755) < 0 || symlinkat("usr/lib", root, "lib") < 0 ||
	    symlinkat("usr/lib64", root, "lib64") < 0 || symlinkat("usr/bin", root, "bin") < 0)
		r = wr_err_sys(err, "jail %s", path);
	for (size_t i = 0; r == 0 && i < s->n_files; i++) {
		r = jail_parent(root, s->files[i].name, err);
		int fd = r < 0 ? -1
			       : openat(root, s->files[i].name,
					O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
		if (fd < 0 && r == 0)
			r = wr_err_sys(err, "jail %s/%s", path, s->files[i].name);
		else if (fd >= 0)
			close(fd);
	}
	if (r == 0 && s->kvm) {
		int fd = -1;
		if (mkdirat(root, "dev", 0755) < 0 ||
		    (fd = openat(root, "dev/kvm", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444)) <
			0)
			r = wr_err_sys(err, "jail %s/dev/kvm", path);
		if (fd >= 0)
			close(fd);
	}
	close(root);
	return r;
}

/* Removes what jail_make made (and nothing it did not: never through a
 * mount, never following a link). */
static void remove_tree(int dfd, const char *name, dev_t dev, int depth)
{
	struct stat st;
	if (depth > 4 || fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return;
	if (!S_ISDIR(st.st_mode)) {
		unlinkat(dfd, name, 0);
		return;
	}
	if (st.st_dev != dev)
		return;
	int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (d == NULL) {
		if (fd >= 0)
			close(fd);
		return;
	}
	struct dirent *de;
	while ((de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			remove_tree(dirfd(d), de->d_name, dev, depth + 1);
	closedir(d);
	unlinkat(dfd, name, AT_REMOVEDIR);
}

static void remove_dir(const char *dir)
{
	struct stat st;
	if (dir == NULL || lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
		return;
	remove_tree(AT_FDCWD, dir, st.st_dev, 0);
}

/* ---- the child ------------------------------------------------------------------ */

/* What the child needs, prepared by the parent: it must not allocate. */
struct child_ctx {
	const struct wr_qemu_spawn *s;
	uid_t uid;
	gid_t groups[2];
	int ngroups;
	char jail[600];
	char usr[620];
	char files[8][700];
	int trees[8]; /* detached mounts of the files (open_tree) */
	char kvm[620];
	int cg[8], ncg;
};

/* The message and errno, on QEMU's log (async-signal-safe). */
static __attribute__((noreturn)) void die(const char *m)
{
	char buf[160];
	size_t n = strlen(m);
	if (n > sizeof(buf) - 16)
		n = sizeof(buf) - 16;
	memcpy(buf, m, n);
	int e = errno;
	buf[n++] = ' ';
	buf[n++] = '(';
	char d[12];
	int k = 0;
	do
		d[k++] = (char)('0' + e % 10);
	while ((e /= 10) && k < 11);
	while (k)
		buf[n++] = d[--k];
	buf[n++] = ')';
	buf[n++] = '\n';
	if (write(2, buf, n) < 0)
		_exit(126);
	_exit(126);
}

static int bind_ro(const char *src, const char *dst, unsigned long extra, bool rw)
{
	if (mount(src, dst, NULL, MS_BIND, NULL) < 0)
		return -1;
	unsigned long fl = MS_REMOUNT | MS_BIND | MS_NOSUID | extra | (rw ? 0 : MS_RDONLY);
	return mount(NULL, dst, NULL, fl, NULL);
}

/* Child half: raw system calls only (the parent may be multi-threaded). */
static __attribute__((noreturn)) void child(const struct child_ctx *c)
{
	const struct wr_qemu_spawn *s = c->s;
	/* into its cgroup first: these fds may sit where the dups go */
	for (int i = 0; i < c->ncg; i++)
		if (write(c->cg[i], "0", 1) != 1)
			die("warren: QEMU's cgroup");
	/* stderr to the log now, so the jail's failures are told there */
	if (dup2(s->log_fd, 2) < 0)
		_exit(126);
	/* a networked sandbox's namespace (from the host's user namespace:
	 * joined while still root; the fd goes with close_range below) */
	if (s->netns_fd1 > 0 && setns(s->netns_fd1 - 1, CLONE_NEWNET) < 0)
		die("warren: cannot join the sandbox's network namespace");
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount(c->jail, c->jail, NULL, MS_BIND, NULL) < 0 ||
	    bind_ro("/usr", c->usr, MS_NODEV, false) < 0)
		die("warren: cannot make QEMU's jail");
	/* detached mounts made by the parent: a bind from its namespace's
	 * mounts (as through /proc/self/fd) is refused in this one */
	for (size_t i = 0; i < s->n_files; i++)
		if (wr_move_mount(c->trees[i], "", AT_FDCWD, c->files[i], MOVE_MOUNT_F_EMPTY_PATH) <
		    0)
			die("warren: cannot bind a file into QEMU's jail");
	if (s->kvm && bind_ro("/dev/kvm", c->kvm, MS_NOEXEC, true) < 0)
		die("warren: cannot bind /dev/kvm into QEMU's jail");
	int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (nul < 0 || chdir(c->jail) < 0 || syscall(SYS_pivot_root, ".", ".") < 0 ||
	    umount2(".", MNT_DETACH) < 0 || chdir("/") < 0 ||
	    mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) <
		0)
		die("warren: cannot pivot into QEMU's jail");
	/* fds to a range above every target first, so no dup2 clobbers a
	 * source still needed (/dev/null's fd included: it may sit at 3..) */
	int high[16];
	if (s->n_fds > 16)
		_exit(126);
	for (size_t i = 0; i < s->n_fds; i++) {
		high[i] = s->fds[i] < 0 ? -1 : fcntl(s->fds[i], F_DUPFD_CLOEXEC, 100);
		if (s->fds[i] >= 0 && high[i] < 0)
			_exit(126);
	}
	if (dup2(nul, 0) < 0 || dup2(nul, 1) < 0)
		_exit(126);
	for (size_t i = 0; i < s->n_fds; i++)
		if (high[i] >= 0 && dup2(high[i], 3 + (int)i) < 0)
			_exit(126);
	wr_close_range(3 + (unsigned)s->n_fds, ~0u, 0);
	/* its own uid and gid, no capability in any set, none to regain:
	 * QEMU's filter then denies every set*id call (elevateprivileges) */
	for (int cap = 0; cap <= 63; cap++)
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
			die("warren: cannot drop QEMU's bounding set");
	if (setgroups((size_t)c->ngroups, c->groups) < 0 || setresgid(c->uid, c->uid, c->uid) < 0 ||
	    setresuid(c->uid, c->uid, c->uid) < 0)
		die("warren: cannot change QEMU's uid");
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[2] = {{0}};
	if (syscall(SYS_capset, &h, d) < 0 ||
	    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 ||
	    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		die("warren: cannot drop QEMU's capabilities");
	/* after the uid change, which clears it */
	if (s->die_with_parent)
		prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	static char *const envp[] = {"PATH=/usr/bin", NULL};
	execve(s->argv[0], s->argv, envp);
	die("warren: cannot exec QEMU in its jail");
}

uint64_t wr_qemu_start_ticks(pid_t pid)
{
	char path[64];
	_cleanup_free_ char *buf = NULL;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (wr_read_file_at(AT_FDCWD, path, &buf, 65536, NULL) < 0)
		return 0;
	const char *p = strrchr(buf, ')'); /* comm may hold anything */
	if (p == NULL || p[1] != ' ')
		return 0;
	p += 2; /* field 3 */
	for (int field = 3; p && field < 22; field++) {
		p = strchr(p, ' ');
		if (p)
			p++;
	}
	return p ? strtoull(p, NULL, 10) : 0;
}

int wr_qemu_spawn(struct wr_qemu *q, const struct wr_qemu_spawn *s, wr_err *err)
{
	if (s->n_files > 8)
		return wr_err_set(err, EINVAL, "qemu: at most 8 files in the jail");
	if (strncmp(s->argv[0], "/usr/", 5) != 0)
		return wr_err_set(err, EINVAL, "qemu: %s is not under /usr (the jail carries /usr)",
				  s->argv[0]);
	if (jail_make(q->dir, s, err) < 0)
		return -1;
	/* its cgroup: guest RAM plus TCG's translation cache (bounded by
	 * -accel tcg,tb-size: WR_QEMU_TCG_TB_MIB) plus QEMU's own (device
	 * buffers, libraries), its threads, its vCPUs' worth of CPU */
	char cgname[80];
	snprintf(cgname, sizeof(cgname), "vm-%s", s->id);
	struct wr_cgroup_limits lim;
	wr_cgroup_limits_default(&lim);
	lim.memory_bytes = s->memory_bytes + ((uint64_t)WR_QEMU_TCG_TB_MIB << 20) + (256ull << 20);
	lim.pids = 256;
	lim.cpu_quota_us = 100000ull * (s->cpus ? s->cpus : 1);
	lim.cpu_period_us = 100000;
	struct child_ctx c = {.s = s, .uid = q->uid, .groups = {WR_QEMU_GID}, .ngroups = 1};
	if (wr_cgroup_create(g_cgroot, cgname, &lim, &q->cg, err) < 0 ||
	    wr_cgroup_create_leaf(q->cg, "q", &q->leaf, err) < 0 ||
	    (c.ncg = wr_cgroup_procs_fds(q->leaf, false, c.cg, 8, err)) < 0)
		return wr_err_wrap(err, "QEMU's cgroup");
	snprintf(c.jail, sizeof(c.jail), "%s/root", q->dir);
	snprintf(c.usr, sizeof(c.usr), "%s/usr", c.jail);
	snprintf(c.kvm, sizeof(c.kvm), "%s/dev/kvm", c.jail);
	int r = 0;
	for (size_t i = 0; i < s->n_files; i++) {
		const struct wr_qemu_file *f = &s->files[i];
		snprintf(c.files[i], sizeof(c.files[i]), "%s/%s", c.jail, f->name);
		c.trees[i] =
		    f->fd >= 0
			? wr_open_tree(f->fd, "",
				       OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH)
			: wr_open_tree(AT_FDCWD, f->src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
		struct mount_attr at = {.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
						    MOUNT_ATTR_NOEXEC |
						    (f->rw ? 0 : MOUNT_ATTR_RDONLY)};
		if (c.trees[i] < 0 ||
		    wr_sys_mount_setattr(c.trees[i], "", AT_EMPTY_PATH, &at) < 0) {
			r = wr_err_sys(err, "jail: bind %s", f->fd >= 0 ? f->name : f->src);
			for (size_t k = 0; k <= i; k++)
				if (c.trees[k] >= 0)
					close(c.trees[k]);
			for (int k = 0; k < c.ncg; k++)
				close(c.cg[k]);
			return r;
		}
	}
	struct stat kst;
	if (s->kvm && stat("/dev/kvm", &kst) == 0 && kst.st_gid != 0)
		c.groups[c.ngroups++] = kst.st_gid; /* the device's group */
	int pidfd = -1;
	/* handlers reset to default: none of warrend's runs in the child */
	struct wr_clone_args ca = {.flags = CLONE_PIDFD | CLONE_NEWNS | CLONE_NEWPID |
					    (s->netns_fd1 > 0 ? 0 : CLONE_NEWNET) | CLONE_NEWIPC |
					    CLONE_NEWUTS | CLONE_CLEAR_SIGHAND,
				   .pidfd = (uint64_t)(uintptr_t)&pidfd,
				   .exit_signal = SIGCHLD};
	long pid = wr_clone3(&ca);
	if (pid == 0)
		child(&c);
	if (pid < 0)
		r = wr_err_sys(err, "clone qemu");
	for (int i = 0; i < c.ncg; i++)
		close(c.cg[i]);
	for (size_t i = 0; i < s->n_files; i++)
		close(c.trees[i]);
	if (r < 0)
		return r;
	q->pid = (pid_t)pid;
	q->pidfd = pidfd;
	q->child = true;
	q->start_ticks = wr_qemu_start_ticks(q->pid);
	return 0;
}

/* ---- stop, release ---------------------------------------------------------------- */

static void wait_end(struct wr_qemu *q)
{
	if (q->child) {
		/* reaped through its pidfd: the pid itself is never named */
		siginfo_t si;
		if (q->pidfd >= 0)
			while (waitid(P_PIDFD, (id_t)q->pidfd, &si, WEXITED) < 0 && errno == EINTR)
				;
		else
			while (waitpid(q->pid, NULL, 0) < 0 && errno == EINTR)
				;
		return;
	}
	/* adopted: init reaps it; the pidfd says when it is gone */
	struct pollfd p = {.fd = q->pidfd, .events = POLLIN};
	if (q->pidfd >= 0)
		while (poll(&p, 1, 10000) < 0 && errno == EINTR)
			;
}

int wr_qemu_kill(struct wr_qemu *q)
{
	if (q->pid <= 0)
		return 0;
	if (q->pidfd >= 0) {
		if (syscall(__NR_pidfd_send_signal, q->pidfd, SIGKILL, NULL, 0) < 0 &&
		    errno != ESRCH)
			return -errno;
		return 0;
	}
	/* no pidfd: only our own unreaped child is safe to signal by pid */
	if (q->child && kill(q->pid, SIGKILL) < 0 && errno != ESRCH)
		return -errno;
	return 0;
}

void wr_qemu_stop(struct wr_qemu *q, int grace_ms)
{
	if (q->pid <= 0)
		return;
	struct pollfd p = {.fd = q->pidfd, .events = POLLIN};
	if (q->pidfd < 0 || grace_ms <= 0 || poll(&p, 1, grace_ms) <= 0)
		wr_qemu_kill(q);
	wait_end(q);
	q->pid = 0;
}

void wr_qemu_release(struct wr_qemu *q)
{
	if (q->pidfd >= 0)
		close(q->pidfd);
	q->pidfd = -1;
	/* QEMU ended (stop) before its cgroup goes; destroy kills anything
	 * left in it */
	if (q->leaf)
		wr_cgroup_close(q->leaf);
	q->leaf = NULL;
	if (q->cg)
		wr_cgroup_destroy(&q->cg, NULL);
	remove_dir(q->dir);
	free(q->dir);
	q->dir = NULL;
	uid_put(q->uid);
	q->uid = 0;
}

/* ---- channels ---------------------------------------------------------------------- */

static int sock_addr(int dirfd, const char *name, struct sockaddr_un *sa, wr_err *err)
{
	*sa = (struct sockaddr_un){.sun_family = AF_UNIX};
	int n = snprintf(sa->sun_path, sizeof(sa->sun_path), "/proc/self/fd/%d/%s", dirfd, name);
	if (n < 0 || (size_t)n >= sizeof(sa->sun_path))
		return wr_err_set(err, ENAMETOOLONG, "socket name %s", name);
	return 0;
}

int wr_qemu_listen(int dirfd, const char *name, wr_err *err)
{
	struct sockaddr_un sa;
	if (sock_addr(dirfd, name, &sa, err) < 0)
		return -1;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return wr_err_sys(err, "socket");
	unlinkat(dirfd, name, 0);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 4) < 0) {
		int r = wr_err_sys(err, "listen %s", name);
		close(fd);
		return r;
	}
	return fd;
}

int wr_qemu_connect(int dirfd, const char *name, wr_err *err)
{
	struct sockaddr_un sa;
	if (sock_addr(dirfd, name, &sa, err) < 0)
		return -1;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return wr_err_sys(err, "socket");
	int r;
	while ((r = connect(fd, (struct sockaddr *)&sa, sizeof(sa))) < 0 && errno == EINTR)
		;
	if (r < 0) {
		r = wr_err_sys(err, "connect %s", name);
		close(fd);
		return r;
	}
	return fd;
}

/* ---- adoption ---------------------------------------------------------------------- */

int wr_qemu_save(const struct wr_qemu *q, json_t *extra, wr_err *err)
{
	json_t *j = json_pack("{s:I, s:I, s:I}", "pid", (json_int_t)q->pid, "start",
			      (json_int_t)q->start_ticks, "uid", (json_int_t)q->uid);
	if (j == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	if (extra)
		json_object_update(j, extra);
	char tmp[600], path[600];
	snprintf(tmp, sizeof(tmp), "%s/.vm.json.tmp", q->dir);
	snprintf(path, sizeof(path), "%s/vm.json", q->dir);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int r = 0;
	if (fd < 0 || json_dumpfd(j, fd, JSON_COMPACT) < 0 || fsync(fd) < 0)
		r = wr_err_sys(err, "write %s", tmp);
	if (fd >= 0)
		close(fd);
	json_decref(j);
	/* the rename is the commit: a reader sees the old state or this one */
	if (r == 0 && rename(tmp, path) < 0)
		r = wr_err_sys(err, "rename %s", path);
	if (r < 0)
		unlink(tmp);
	return r;
}

static uid_t status_uid(pid_t pid)
{
	char path[64];
	_cleanup_free_ char *buf = NULL;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if (wr_read_file_at(AT_FDCWD, path, &buf, 65536, NULL) < 0)
		return 0;
	const char *p = strstr(buf, "\nUid:");
	return p ? (uid_t)strtoul(p + 5, NULL, 10) : 0;
}

int wr_qemu_adopt(struct wr_qemu *q, const char *id, const char *dir, pid_t pid_hint,
		  json_t **state, wr_err *err)
{
	*q = (struct wr_qemu){.pidfd = -1};
	*state = NULL;
	if (g_cgroot == NULL)
		return wr_err_set(err, EINVAL, "qemu: not initialised");
	if ((q->dir = strdup(dir)) == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	char path[600];
	snprintf(path, sizeof(path), "%s/vm.json", dir);
	json_error_t je;
	json_t *j = json_load_file(path, 0, &je);
	json_int_t pid = 0, start = 0, uid = 0;
	if (j == NULL ||
	    json_unpack(j, "{s:I, s:I, s:I}", "pid", &pid, "start", &start, "uid", &uid) < 0) {
		json_decref(j);
		return wr_err_set(err, ENOENT, "no state of this VM (%s)", path);
	}
	*state = j;
	/* the cgroup first: whatever else fails, release() then kills what
	 * is left in it */
	char cgname[80];
	snprintf(cgname, sizeof(cgname), "vm-%s", id);
	wr_err cerr = NULL;
	if (wr_cgroup_open(g_cgroot, cgname, &q->cg, &cerr) < 0)
		wr_err_free(&cerr);
	if (pid <= 0 || (pid_hint > 0 && pid != pid_hint))
		return wr_err_set(err, ESRCH, "QEMU's pid %lld is not the one recorded (%d)",
				  (long long)pid, (int)pid_hint);
	q->pidfd = wr_pidfd_open((pid_t)pid, 0);
	/* the pidfd before the checks: once they pass, it names that process */
	if (q->pidfd < 0 || wr_qemu_start_ticks((pid_t)pid) != (uint64_t)start)
		return wr_err_set(err, ESRCH, "QEMU (pid %lld) is gone", (long long)pid);
	q->pid = (pid_t)pid;
	q->start_ticks = (uint64_t)start;
	if (status_uid(q->pid) != (uid_t)uid)
		return wr_err_set(err, EPERM, "pid %lld does not run as QEMU's uid %lld",
				  (long long)pid, (long long)uid);
	if (q->cg == NULL)
		return wr_err_set(err, ENOENT, "QEMU's cgroup %s is gone", cgname);
	if (!uid_claim((uid_t)uid))
		return wr_err_set(err, EEXIST, "uid %lld is another QEMU's", (long long)uid);
	q->uid = (uid_t)uid;
	return 0;
}

struct sweep_ctx {
	bool (*keep)(const char *id, void *ctx);
	void *ctx;
};

static bool keep_cg(const char *name, void *arg)
{
	struct sweep_ctx *c = arg;
	if (strncmp(name, "vm-", 3) != 0)
		return true; /* the base may be the container tier's */
	return c->keep && c->keep(name + 3, c->ctx);
}

size_t wr_qemu_sweep(const char *run_dir, bool (*keep)(const char *id, void *ctx), void *ctx)
{
	size_t n = 0;
	DIR *d = run_dir ? opendir(run_dir) : NULL;
	struct dirent *de;
	while (d && (de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.' || (keep && keep(de->d_name, ctx)))
			continue;
		char dir[600];
		snprintf(dir, sizeof(dir), "%s/%s", run_dir, de->d_name);
		struct wr_qemu q;
		json_t *st = NULL;
		wr_err err = NULL;
		/* its QEMU, when the recorded one still runs: killed through
		 * its pidfd; anything else in its cgroup dies with it */
		if (wr_qemu_adopt(&q, de->d_name, dir, 0, &st, &err) == 0 ||
		    (q.pidfd >= 0 && q.pid > 0)) {
			wr_qemu_stop(&q, 0);
		}
		wr_err_free(&err);
		json_decref(st);
		wr_qemu_release(&q);
		n++;
	}
	if (d)
		closedir(d);
	if (g_cgroot) {
		struct sweep_ctx c = {keep, ctx};
		wr_cgroup_sweep(g_cgroot, keep_cg, &c, NULL);
	}
	return n;
}
