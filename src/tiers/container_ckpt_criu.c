/* The container tier's checkpoints: running criu inside the sandbox's
 * namespaces (container_ckpt.c says which and why). */
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

static char *g_criu; /* NULL: no working CRIU (the daemon checked it) */

void wr_container_set_criu(const char *path)
{
	free(g_criu);
	g_criu = path && *path ? strdup(path) : NULL;
}

const char *wr_ckpt_criu(void)
{
	return g_criu;
}

/* A dump or restore that takes longer is killed (a 64 MiB tree: well
 * under a second here). */
#define CRIU_TIMEOUT_MS 120000

/* ---- running criu ------------------------------------------------------- */

void wr_ckpt_sv_add(struct strv *s, const char *fmt, ...)
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

void wr_ckpt_sv_free(struct strv *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	s->n = 0;
}

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
	syscall(SYS_execveat, r->exe, "", r->argv, envp, AT_EMPTY_PATH);
	_exit(127);
}

/* The error CRIU logged first (its log in dir), for the caller's message;
 * the log is kept as <state_dir>/ckpt/<id>.log (until the next attempt or
 * the sandbox's end) for whoever looks into it. */
static void criu_error(const char *id, const char *dir, const char *name, char *out, size_t n)
{
	char p[4096], kept[4096];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	wr_ckpt_img_path(kept, sizeof(kept), id, ".log");
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
int wr_ckpt_fds_high(int *fds, size_t n, wr_err *err)
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
int wr_ckpt_run_criu(const struct criu_run *in, struct wr_cgroup *cg, const char *id,
		     const char *dir, const char *logname, wr_err *err)
{
	struct criu_run r = *in;
	/* Invariant: opened here, in our mount namespace, and above the fds
	 * the child dups to 3.. (a restore's child covers /tmp, where a build
	 * may keep criu: criu_child) */
	_cleanup_close_ int exe = open(r.argv[0], O_PATH | O_CLOEXEC);
	if (exe < 0)
		return wr_err_sys(err, "open %s", r.argv[0]);
	if ((r.exe = fcntl(exe, F_DUPFD_CLOEXEC, 64)) < 0)
		return wr_err_sys(err, "dup");
	close(exe);
	exe = r.exe;
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

/* The target of /proc/<pid> when it is a criu dump (the same executable as
 * criu, "dump" and "-t <pid>" in its arguments), else 0. */
static pid_t dump_target(const char *pid, const struct stat *criu)
{
	char p[300]; /* a d_name is at most 255 bytes */
	struct stat st;
	snprintf(p, sizeof(p), "/proc/%s/exe", pid);
	if (stat(p, &st) < 0 || st.st_dev != criu->st_dev || st.st_ino != criu->st_ino)
		return 0;
	snprintf(p, sizeof(p), "/proc/%s/cmdline", pid);
	_cleanup_free_ char *cl = NULL;
	int n = wr_read_file_at(AT_FDCWD, p, &cl, 65536, NULL);
	if (n <= 0)
		return 0;
	bool dump = false;
	pid_t t = 0;
	for (char *a = cl; a < cl + n; a += strlen(a) + 1) {
		if (strcmp(a, "dump") == 0)
			dump = true;
		else if (strcmp(a, "-t") == 0 && a + strlen(a) + 1 < cl + n)
			t = (pid_t)atoi(a + strlen(a) + 1);
	}
	return dump ? t : 0;
}

/* The dumps found running by the first adoption of this process: one scan
 * of /proc for all (a restart adopts every sandbox). */
static pthread_mutex_t g_dumps_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_dumps_scanned;
static struct {
	pid_t criu, target;
} g_dumps[64];
static size_t g_ndumps;

void wr_ckpt_wait_dumps(pid_t init_pid)
{
	const char *criu = wr_ckpt_criu();
	struct stat cs;
	if (criu == NULL || init_pid <= 0 || stat(criu, &cs) < 0)
		return;
	pthread_mutex_lock(&g_dumps_lock);
	if (!g_dumps_scanned) {
		g_dumps_scanned = true;
		DIR *d = opendir("/proc");
		struct dirent *de;
		while (d && (de = readdir(d)) != NULL && g_ndumps < 64) {
			if (de->d_name[0] < '1' || de->d_name[0] > '9')
				continue;
			pid_t t = dump_target(de->d_name, &cs);
			if (t > 0) {
				g_dumps[g_ndumps].criu = (pid_t)atoi(de->d_name);
				g_dumps[g_ndumps++].target = t;
			}
		}
		if (d)
			closedir(d);
	}
	pid_t wait_for[64];
	size_t n = 0;
	for (size_t i = 0; i < g_ndumps; i++)
		if (g_dumps[i].target == init_pid)
			wait_for[n++] = g_dumps[i].criu;
	pthread_mutex_unlock(&g_dumps_lock);
	/* Bounded by criu's own timeout; past it the adoption goes on (and a
	 * dump still running would freeze the tree again at its end). */
	uint64_t deadline = wr_now_ns() + (uint64_t)CRIU_TIMEOUT_MS * 1000000ull;
	for (size_t i = 0; i < n; i++) {
		_cleanup_close_ int pfd = wr_pidfd_open(wait_for[i], 0);
		if (pfd < 0)
			continue; /* ended already */
		uint64_t now = wr_now_ns();
		struct pollfd pf = {.fd = pfd, .events = POLLIN};
		int ms = now < deadline ? (int)((deadline - now) / 1000000) : 0;
		while (poll(&pf, 1, ms) < 0 && errno == EINTR)
			;
	}
}
