/* The container tier: running a command in a sandbox.
 *
 * Exec pipeline (P = this process, H = a short-lived helper, C = the command):
 *
 *   P  leaf cgroup cmd-N -> pipes -> clone H (sharing P's memory and fd
 *      table), which joins cmd-N in every hierarchy
 *   H  setns(pidfd of PID 1: user, mnt, pid, ipc, uts, net, then cgroup:
 *      PID 1's cgroup namespace, rooted at the sandbox's cgroup, where C
 *      sees its leaf as /cmd-N) -> clone I (in the sandbox's PID
 *      namespace, sharing the fd table) -> reap I -> exit
 *   I  clone C (CLONE_PIDFD: C's pidfd lands in P's fd table) -> exit at
 *      once, so C is reparented to the sandbox's PID 1 (warren-init reaps
 *      it) and sits in PID 1's process tree, which is what CRIU dumps. C
 *      waits until H has reaped I (the command never sees I, a host root
 *      process with P's memory); H then waits until C exec'd or exited (a
 *      futex word the kernel clears: CLONE_CHILD_CLEARTID) before it exits.
 *      (Kernels that keep no exit status for a pidfd, before 6.15, or
 *      WARREN_EXEC_CLONE_PARENT=1: no I; H clones C with CLONE_PARENT, C
 *      is P's child and P reaps it. Decided once, at the first command.)
 *   C  own session (setsid; a pty becomes its controlling terminal) ->
 *      stdio -> cwd resolved inside the root -> rlimits -> user + caps
 *      -> no_new_privs -> Landlock -> close-on-exec every fd > 2
 *      -> seccomp (last) -> execvpe; a failure is reported on a
 *      close-on-exec pipe (EOF on it = exec succeeded).
 *   P  pumps stdout/stderr (capped per stream), waits on the pidfd with the
 *      deadline; at the deadline it kills cmd-N with cgroup.kill, which
 *      takes double-forked, setsid'd descendants too. Exit status comes from
 *      the host kernel through C's pidfd (PIDFD_INFO_EXIT; waitid for P's
 *      child), OOM from the memory cgroup's counters, usage from the
 *      command's cgroup: nothing is taken from inside the sandbox.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <linux/securebits.h>
#include <sys/fsuid.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <termios.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "common/util.h"
#include "isolate/caps.h"
#include "isolate/ns.h"
#include "tiers/container_internal.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

/* H, I and C share P's memory (CLONE_VM, as posix_spawn does): no page
 * tables are copied, and they report through this struct. P is suspended
 * until H exits (CLONE_VFORK); H until I exits (it reaps I) and C execs or
 * exits (c_live; on the CLONE_PARENT path, CLONE_VFORK). So when P resumes,
 * C's pid or pidfd and any start failure are already here.
 * Invariant: H, I and C never allocate and never return into P's frames;
 * each runs on a stack of its own and leaves with _exit/exec. */
const struct wr_landlock_policy wr_container_cmd_landlock = {
    .scope_signals = true, .scope_abstract_unix = true, .log_denials = true};

struct cmd_args {
	int procs[8]; /* cgroup.procs of the command's leaf, per hierarchy */
	int nprocs;
	int init_pidfd;
	int fd_in, fd_out, fd_err;
	bool pty; /* fd_in is a terminal: make it the controlling one */
	uid_t uid;
	gid_t gid;
	uint64_t caps;
	const struct wr_rlimits *rlimits;
	const char *cwd;
	char *const *argv;
	char *const *envp;
	const struct wr_seccomp_prog *seccomp;
	bool in_tree; /* C goes into PID 1's tree (through I) */
	char *istack; /* top of I's stack */
	char *cstack; /* top of C's stack */
	/* results */
	pid_t cpid;	 /* CLONE_PARENT: set by the kernel when H clones C */
	int cpidfd;	 /* in_tree: set by the kernel when I clones C (-1 before) */
	bool cpidfd_set; /* cpidfd names an fd: I's clone returned, or C ran */
	/* in_tree: futex words. c_live: non-zero until the kernel clears it
	 * (CLONE_CHILD_CLEARTID) when C execs or exits; i_gone: set by H once
	 * I is reaped. */
	uint32_t c_live, i_gone;
	int start_failed;    /* set by C when it exits instead of exec'ing */
	struct wr_cerr herr; /* H's failure */
	struct wr_cerr cerr; /* C's failure */
};

/* The spawn stack, low to high: H's, I's, C's (stacks grow down). */
#define H_STACK_TOP (WR_SPAWN_STACK / 4)
#define I_STACK_TOP (WR_SPAWN_STACK / 2)
#define C_STACK_TOP WR_SPAWN_STACK

/* ---- spawn stacks (also used by create) ----------------------------------- */

static __thread char *t_stack; /* this thread's spare */
static pthread_key_t g_stack_key;
static pthread_once_t g_stack_once = PTHREAD_ONCE_INIT;

static void stack_unmap(void *stack)
{
	munmap(stack, WR_SPAWN_STACK);
}

static void stack_key_init(void)
{
	/* unmaps a thread's spare when the thread exits */
	pthread_key_create(&g_stack_key, stack_unmap);
}

char *wr_spawn_stack_get(void)
{
	char *s = t_stack;
	if (s) {
		t_stack = NULL;
		pthread_setspecific(g_stack_key, NULL);
		return s;
	}
	s = mmap(NULL, WR_SPAWN_STACK, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	return s == MAP_FAILED ? NULL : s;
}

void wr_spawn_stack_put(char *stack)
{
	if (stack == NULL)
		return;
#if defined(__SANITIZE_ADDRESS__)
	/* Frames that ended in _exit/exec never unpoisoned their red zones:
	 * clear the shadow before the range is used again. */
	__asan_unpoison_memory_region(stack, WR_SPAWN_STACK);
#endif
	pthread_once(&g_stack_once, stack_key_init);
	if (t_stack == NULL && pthread_setspecific(g_stack_key, stack) == 0) {
		t_stack = stack;
		return;
	}
	munmap(stack, WR_SPAWN_STACK);
}

/* H, I and C run on stacks ASan does not know; they are not instrumented
 * (ASan would otherwise warn about a stack switch at every _exit). */
#define SPAWN_FN __attribute__((no_sanitize_address))

static SPAWN_FN __attribute__((noreturn)) void cmd_fail(struct cmd_args *a, int code)
{
	a->start_failed = code;
	_exit(code);
}

/* C: never returns. */
static SPAWN_FN int command_main(void *arg)
{
	struct cmd_args *a = arg;
	struct wr_cerr *e = &a->cerr;
	/* We run, so the clone that made us is complete and our pidfd is
	 * installed in P's fd table (kernel: fd_install before the wake-up),
	 * even if I is killed before its clone returns. */
	a->cpidfd_set = true;
	/* Invariant: I is gone (reaped by H) before the command runs: I is a
	 * process of the host's (root, warrend's memory) in the sandbox's PID
	 * namespace, which the command must never see. We are PID 1's child
	 * from here on. */
	if (a->in_tree)
		while (__atomic_load_n(&a->i_gone, __ATOMIC_ACQUIRE) == 0)
			syscall(SYS_futex, &a->i_gone, FUTEX_WAIT, 0, NULL, NULL, 0);
	/* The command starts with default signal dispositions and nothing
	 * blocked, whatever the calling process (a CLI ignoring SIGPIPE, a
	 * daemon blocking SIGTERM for sigwait) had: ignored signals and the
	 * mask survive execve. C has its own copy of the handler table. */
	sigset_t none;
	sigemptyset(&none);
	/* Raw rt_sigaction: glibc's wrapper refuses its own internal signals
	 * (32, 33), which a sanitizer runtime or libc may have set to ignore. */
	struct {
		void *handler;
		unsigned long flags;
		void *restorer;
		unsigned long mask;
	} dfl = {0};
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			syscall(SYS_rt_sigaction, sig, &dfl, NULL, sizeof(dfl.mask));
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* A session and process group of its own, with or without a
	 * terminal: it would otherwise stay in the caller's (warrend's), whose
	 * leader is outside the sandbox's PID namespace; CRIU refuses to dump
	 * such a process, and a kill(0) inside would aim at that group. */
	if (setsid() < 0) {
		wr_cerr_sys(e, "setsid");
		cmd_fail(a, 126);
	}
	if (a->pty && ioctl(a->fd_in, TIOCSCTTY, 0) < 0) {
		wr_cerr_sys(e, "controlling terminal");
		cmd_fail(a, 126);
	}
	if (dup2(a->fd_in, 0) < 0 || dup2(a->fd_out, 1) < 0 || dup2(a->fd_err, 2) < 0) {
		wr_cerr_sys(e, "stdio");
		cmd_fail(a, 126);
	}
	/* The cwd must be a directory inside the sandbox root: resolved with
	 * RESOLVE_IN_ROOT from the root we just joined. */
	struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
			       .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
	int cwd = wr_openat2(AT_FDCWD, a->cwd, &how);
	if (cwd < 0 || fchdir(cwd) < 0) {
		wr_cerr_sys(e, "working directory %s", a->cwd);
		cmd_fail(a, 126);
	}
	close(cwd);
	if (wr_caps_switch_user(a->uid, a->gid, a->caps, e) < 0)
		cmd_fail(a, 126);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		wr_cerr_sys(e, "no_new_privs");
		cmd_fail(a, 126);
	}
	if (wr_landlock_abi() > 0 && wr_landlock_apply(&wr_container_cmd_landlock, e) < 0)
		cmd_fail(a, 126);
	/* Invariant: rlimits after Landlock. This process still holds a copy
	 * of the caller's fd table (a daemon may have thousands open) until
	 * exec closes them, so lowering RLIMIT_NOFILE first would make the
	 * ruleset's own fds fail with EMFILE. */
	if (wr_rlimits_apply(a->rlimits, e) < 0)
		cmd_fail(a, 126);
	if (wr_close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) < 0) {
		wr_cerr_sys(e, "close_range");
		cmd_fail(a, 126);
	}
	/* Invariant: seccomp is the last step; nothing after it but exec. */
	if (wr_seccomp_load(a->seccomp, e) < 0)
		cmd_fail(a, 126);
	execvpe(a->argv[0], a->argv, a->envp);
	/* Under seccomp now: no library call that might need a refused one. */
	int saved = errno;
	e->errnum = saved;
	static const struct {
		int no;
		const char *text;
	} why[] = {
	    {ENOENT, ": No such file or directory"},
	    {EACCES, ": Permission denied"},
	    {ENOEXEC, ": Exec format error"},
	    {ENOTDIR, ": Not a directory"},
	    {ELOOP, ": Too many levels of symbolic links"},
	    {E2BIG, ": Argument list too long"},
	    {ENOMEM, ": Cannot allocate memory"},
	    {ETXTBSY, ": Text file busy"},
	    {EPERM, ": Operation not permitted"},
	};
	const char *text = "";
	for (size_t i = 0; i < WR_ARRAY_SIZE(why); i++)
		if (why[i].no == saved)
			text = why[i].text;
	size_t n = strnlen(a->argv[0], sizeof(e->msg) - 64);
	memcpy(e->msg, "exec ", 5);
	memcpy(e->msg + 5, a->argv[0], n);
	memcpy(e->msg + 5 + n, text, strlen(text) + 1);
	cmd_fail(a, saved == ENOENT ? 127 : 126);
}

/* I: the first process of the command in the sandbox's PID namespace.
 * Its child C is reparented to that namespace's reaper, PID 1, when I
 * exits: the kernel picks the reaper from the exiting parent's own PID
 * namespace, and H's is the host's. */
static SPAWN_FN int intermediate_main(void *arg)
{
	struct cmd_args *a = arg;
	/* CLONE_PIDFD: the kernel stores C's pidfd (close-on-exec) in
	 * a->cpidfd and installs it in the fd table we share with H and P, so
	 * P holds it even if we are killed right after: C's end is then
	 * observed from the host kernel (PIDFD_INFO_EXIT), whoever reaps it.
	 * No CLONE_VFORK: we exit at once, and H waits for C's exec or exit
	 * instead (CLONE_CHILD_CLEARTID clears c_live at either). */
	int pid =
	    clone(command_main, a->cstack, CLONE_VM | CLONE_PIDFD | CLONE_CHILD_CLEARTID | SIGCHLD,
		  a, &a->cpidfd, NULL, &a->c_live);
	if (pid < 0) {
		wr_cerr_sys(&a->herr, "start command");
		__atomic_store_n(&a->c_live, 0, __ATOMIC_RELEASE);
		_exit(1);
	}
	a->cpidfd_set = true;
	_exit(0);
}

/* H: joins the command's cgroups and the sandbox's namespaces, then starts
 * C, in PID 1's tree through I, or as P's child (CLONE_PARENT). */
static SPAWN_FN int helper_main(void *arg)
{
	struct cmd_args *a = arg;
	for (int i = 0; i < a->nprocs; i++) {
		if (write(a->procs[i], "0", 1) != 1) {
			wr_cerr_sys(&a->herr, "join the command's cgroup");
			_exit(1);
		}
	}
	/* PID 1's cgroup namespace, not one of our own rooted at cmd-N: CRIU
	 * cannot dump nested cgroup namespaces. Invariant: before the user
	 * namespace, while we are the host's root: the namespace is owned by
	 * the sandbox's user namespace, or, for a PID 1 restored from a
	 * checkpoint, by the host's (container_ckpt.c makes it before CRIU
	 * makes the user namespace), and we need CAP_SYS_ADMIN over either. */
	if (setns(a->init_pidfd, CLONE_NEWCGROUP) < 0) {
		wr_cerr_sys(&a->herr, "cgroup namespace");
		_exit(1);
	}
	if (wr_ns_join(a->init_pidfd, &a->herr) < 0)
		_exit(1);
	if (a->in_tree) {
		/* CLONE_FILES: I's fd table is P's, where C's pidfd must land. */
		int ipid = clone(intermediate_main, a->istack,
				 CLONE_VM | CLONE_VFORK | CLONE_FILES | SIGCHLD, a);
		if (ipid < 0) {
			wr_cerr_sys(&a->herr, "start command");
			_exit(1);
		}
		/* I exited (CLONE_VFORK) or is about to: ours to reap. Then C
		 * may go on (it waits for i_gone before anything else). */
		while (waitpid(ipid, NULL, __WALL) < 0 && errno == EINTR)
			;
		__atomic_store_n(&a->i_gone, 1, __ATOMIC_RELEASE);
		syscall(SYS_futex, &a->i_gone, FUTEX_WAKE, 1, NULL, NULL, 0);
		/* P must not resume while C runs on its stack in P's memory:
		 * wait for C's exec or exit (I clears c_live itself when it
		 * could not start C). */
		for (uint32_t v; (v = __atomic_load_n(&a->c_live, __ATOMIC_ACQUIRE)) != 0;)
			syscall(SYS_futex, &a->c_live, FUTEX_WAIT, v, NULL, NULL, 0);
		_exit(0);
	}
	/* CLONE_PARENT: C becomes P's child, so P reaps it and reads its real
	 * exit status; H is not in the PID namespace, C is. */
	/* CLONE_PARENT_SETTID: the kernel stores C's pid (as seen from here,
	 * the host's PID namespace) in a->cpid before clone returns, so P
	 * learns it even if H is killed right after: an unreaped C would be a
	 * zombie in the sandbox's PID namespace that PID 1 can never get rid
	 * of, and the sandbox could not be torn down. */
	int pid = clone(command_main, a->cstack,
			CLONE_VM | CLONE_VFORK | CLONE_PARENT | CLONE_PARENT_SETTID, a, &a->cpid);
	if (pid < 0) {
		wr_cerr_sys(&a->herr, "start command");
		_exit(1);
	}
	_exit(0);
}

/* ---- output capture ---------------------------------------------------- */

struct stream {
	int fd;
	int no; /* 1 or 2 */
	uint64_t cap, seen;
	bool truncated;
	struct wr_buf b;
};

/* Read what is there. Past the cap the pipe is closed, so the writer gets
 * EPIPE/SIGPIPE as with `| head -c`: neither our memory nor the command's
 * time is spent on output nobody will see. */
static int stream_pump(struct stream *s, const struct wr_exec_spec *spec, bool *deliver)
{
	char buf[65536];
	for (;;) {
		ssize_t n = read(s->fd, buf, sizeof(buf));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				return 0;
			return -errno;
		}
		if (n == 0) {
			close(s->fd);
			s->fd = -1;
			return 0;
		}
		size_t keep = (size_t)n;
		if (s->seen + keep > s->cap) {
			keep = (size_t)(s->cap - s->seen);
			s->truncated = true;
		}
		s->seen += keep;
		if (keep) {
			if (spec->on_output) {
				if (*deliver && spec->on_output(spec->ctx, s->no, buf, keep) != 0)
					*deliver = false;
			} else if (wr_buf_append(&s->b, buf, keep) < 0) {
				return -ENOMEM;
			}
		}
		if (s->truncated) {
			close(s->fd);
			s->fd = -1;
			return 0;
		}
	}
}

/* Where a finished command's counters go before its leaf does (cgroup.h,
 * retiring): set once, before the first command (the daemon: SQLite). */
static wr_cgroup_keep_fn g_keep;
static void *g_keep_ctx;

void wr_container_keep_counts(wr_cgroup_keep_fn keep, void *ctx)
{
	g_keep = keep;
	g_keep_ctx = ctx;
}

int wr_container_adopt_counts(struct wr_sandbox *sb, const struct wr_cgroup_stats *kept,
			      wr_err *err)
{
	int r = wr_cgroup_adopt_retired(sb->cg, kept, "init", g_keep, g_keep_ctx, err);
	return r < 0 ? wr_err_wrap(err, "sandbox %s", sb->id) : r;
}

static void leaf_park(struct wr_sandbox *sb, struct wr_cgroup *leaf)
{
	/* Background processes of a finished command may live on; their leaf is
	 * removed once empty (checked on later commands) or at destroy. */
	struct wr_leaf *l = calloc(1, sizeof(*l));
	if (l == NULL) {
		wr_cgroup_close(leaf);
		return;
	}
	l->cg = leaf;
	pthread_mutex_lock(&sb->leaves_lock);
	l->next = sb->leaves;
	sb->leaves = l;
	pthread_mutex_unlock(&sb->leaves_lock);
}

static void leaves_reap(struct wr_sandbox *sb)
{
	pthread_mutex_lock(&sb->leaves_lock);
	struct wr_leaf **pp = &sb->leaves;
	while (*pp) {
		struct wr_leaf *l = *pp;
		/* retired even when the rmdir fails (the handle is gone then);
		 * kept only when its counters could not be recorded */
		if (wr_cgroup_nprocs(l->cg, NULL) == 0 &&
		    (wr_cgroup_retire_leaf(sb->cg, &l->cg, g_keep, g_keep_ctx, NULL) == 0 ||
		     l->cg == NULL)) {
			*pp = l->next;
			free(l);
			continue;
		}
		pp = &l->next;
	}
	pthread_mutex_unlock(&sb->leaves_lock);
}

static int pipe_nb(int p[2], wr_err *err)
{
	if (pipe2(p, O_CLOEXEC) < 0)
		return wr_err_sys(err, "pipe");
	if (fcntl(p[0], F_SETFL, O_NONBLOCK) < 0)
		return wr_err_sys(err, "pipe nonblock");
	return 0;
}

/* ---- control from other threads ---------------------------------------- */

void wr_exec_ctl_init(struct wr_exec_ctl *c)
{
	memset(c, 0, sizeof(*c));
	c->pidfd = -1;
	c->done_fd = -1;
	pthread_mutex_init(&c->lock, NULL);
}

void wr_exec_ctl_destroy(struct wr_exec_ctl *c)
{
	pthread_mutex_destroy(&c->lock);
}

int wr_exec_ctl_kill(struct wr_exec_ctl *c)
{
	pthread_mutex_lock(&c->lock);
	c->kill = true;
	int r = c->leaf ? wr_cgroup_kill(c->leaf, NULL) : 0;
	pthread_mutex_unlock(&c->lock);
	return r;
}

int wr_exec_ctl_pidfd(struct wr_exec_ctl *c)
{
	pthread_mutex_lock(&c->lock);
	/* Invariant: the pidfd is withdrawn before exec closes it. */
	int fd = -1, r = -ESRCH;
	if (c->pidfd >= 0)
		r = (fd = fcntl(c->pidfd, F_DUPFD_CLOEXEC, 3)) >= 0 ? fd : -errno;
	else if (c->done_fd >= 0) /* a guest's command: its end */
		r = (fd = fcntl(c->done_fd, F_DUPFD_CLOEXEC, 3)) >= 0 ? fd : -errno;
	pthread_mutex_unlock(&c->lock);
	return r;
}

pid_t wr_exec_ctl_ns_pid(struct wr_exec_ctl *c)
{
	pid_t ns = 0;
	pthread_mutex_lock(&c->lock);
	if (c->pidfd >= 0) {
		/* From the pidfd, not /proc/<pid>: the command is not our child
		 * (PID 1 reaps it), so its pid may be recycled once it ended. */
		char path[64], *st = NULL;
		snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", c->pidfd);
		if (wr_read_file_at(AT_FDCWD, path, &st, 65536, NULL) >= 0) {
			/* "NSpid:\t<host>\t<inside>": the last one is ours (-1
			 * once it exited) */
			char *l = strstr(st, "\nNSpid:");
			char *e = l ? strchr(l + 1, '\n') : NULL;
			if (e)
				*e = 0;
			char *last = l ? strrchr(l, '\t') : NULL;
			ns = last ? (pid_t)atoi(last + 1) : 0;
		}
		free(st);
	}
	pthread_mutex_unlock(&c->lock);
	return ns > 0 ? ns : 0;
}

static void ctl_set(struct wr_exec_ctl *c, struct wr_cgroup *leaf, int pidfd)
{
	if (c == NULL)
		return;
	pthread_mutex_lock(&c->lock);
	c->leaf = leaf;
	c->pidfd = pidfd;
	/* A kill that came while the helper was still joining the leaf did not
	 * reach it: repeat it now that the command is in. */
	if (c->kill && leaf && pidfd >= 0)
		wr_cgroup_kill(leaf, NULL);
	pthread_mutex_unlock(&c->lock);
}

static bool ctl_killed(struct wr_exec_ctl *c)
{
	if (c == NULL)
		return false;
	pthread_mutex_lock(&c->lock);
	bool k = c->kill;
	pthread_mutex_unlock(&c->lock);
	return k;
}

/* A new terminal in the sandbox's own devpts instance. The master is opened
 * through PID 1's root (host code, our own path: the sandbox cannot redirect
 * it), with the sandbox user's fsuid so the slave it creates belongs to that
 * user inside; the slave comes from TIOCGPTPEER, without any path lookup. */
static int open_pty(struct wr_sandbox *sb, const struct wr_exec_spec *spec, int *master, int *slave,
		    wr_err *err)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/root/dev/pts/ptmx", (int)sb->init_pid);
	uid_t uid = sb->idmap.base + (spec->user >= 0 ? (uid_t)spec->user : sb->user);
	gid_t gid = sb->idmap.base + (spec->group >= 0	? (gid_t)spec->group
				      : spec->user >= 0 ? (gid_t)spec->user
							: sb->group);
	struct wr_fscred cred;
	wr_fscred_enter(uid, gid, &cred);
	*master = open(path, O_RDWR | O_NOCTTY | O_CLOEXEC);
	int saved = errno;
	wr_fscred_leave(&cred);
	if (*master < 0) {
		errno = saved;
		return wr_err_sys(err, "open the sandbox's pty multiplexer");
	}
	int unlock = 0;
	struct winsize ws = {.ws_row = spec->pty_rows ? spec->pty_rows : 24,
			     .ws_col = spec->pty_cols ? spec->pty_cols : 80};
	if (ioctl(*master, TIOCSPTLCK, &unlock) < 0 || ioctl(*master, TIOCSWINSZ, &ws) < 0)
		return wr_err_sys(err, "set up pty");
	*slave = ioctl(*master, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (*slave < 0)
		return wr_err_sys(err, "open pty peer");
	return 0;
}

/* Whether commands go into PID 1's process tree (through I), decided once:
 * only where the kernel keeps their exit status for our pidfd, since PID 1
 * reaps them. WARREN_EXEC_CLONE_PARENT=1 keeps them P's children (the path
 * of older kernels), so tests run that path here too. */
static pthread_once_t g_tree_once = PTHREAD_ONCE_INIT;
static bool g_in_tree;

static void tree_decide(void)
{
	const char *v = getenv("WARREN_EXEC_CLONE_PARENT");
	bool forced = v != NULL && *v != 0 && strcmp(v, "0") != 0;
	g_in_tree = !forced && wr_pidfd_exit_kept();
}

static bool in_tree(void)
{
	pthread_once(&g_tree_once, tree_decide);
	return g_in_tree;
}

/* A waitid result as waitpid's status. */
static int wait_status(const siginfo_t *si)
{
	if (si->si_code == CLD_EXITED)
		return (si->si_status & 0xff) << 8;
	return si->si_status & 0x7f;
}

static void cmd_done(struct wr_sandbox **sb)
{
	atomic_fetch_sub(&(*sb)->cmds, 1);
}

int wr_container_exec(struct wr_sandbox *sb, const struct wr_exec_spec *spec,
		      struct wr_exec_result *res, wr_err *err)
{
	memset(res, 0, sizeof(*res));
	if (spec->argv == NULL || spec->argv[0] == NULL || *spec->argv[0] == 0)
		return wr_err_field(err, "argv", "a command is required");
	if (atomic_load(&sb->killed))
		return wr_err_set(err, ESRCH, "sandbox %s was killed", sb->id);
	if (spec->user >= (int)WR_IDMAP_SIZE || spec->group >= (int)WR_IDMAP_SIZE)
		return wr_err_field(err, "user", "must be below %u", WR_IDMAP_SIZE);
	/* Counted until we return, from before the mounts it needs: an idle
	 * sandbox's release of them waits for no command
	 * (wr_container_idle_release). */
	atomic_fetch_add(&sb->cmds, 1);
	__attribute__((cleanup(cmd_done))) struct wr_sandbox *counted = sb;
	/* Invariant: before the first command (and its terminal) exists. */
	if (wr_container_devpts(sb, err) < 0)
		return wr_err_wrap(err, "exec");
	const char *cwd = spec->cwd && *spec->cwd ? spec->cwd : sb->workdir;
	const struct wr_seccomp_prog *prog;
	if (wr_seccomp_get(WR_SECCOMP_DEFAULT, &prog, err) < 0)
		return wr_err_wrap(err, "exec");

	leaves_reap(sb);
	uint64_t t0 = wr_now_ns();
	int r = -1;
	pid_t cpid = -1; /* CLONE_PARENT: our child, unreaped while > 0 */
	_cleanup_close_ int cpidfd = -1;
	bool exited = false;
	int status = -1; /* C's wait status, from the host kernel */
	struct cmd_args ca = {.nprocs = 0, .cpidfd = -1};
	char *stacks = NULL;
	siginfo_t si;
	_cleanup_close_ int out_w = -1, err_w = -1, null_in = -1, pty_master = -1, pty_slave = -1;
	struct stream so = {.fd = -1, .no = 1}, se = {.fd = -1, .no = 2};
	struct wr_cgroup *leaf = NULL;
	size_t n_envp;
	char **envp = wr_env_merge((const char *const *)sb->env, sb->n_env, spec->env, spec->n_env,
				   &n_envp, err);
	if (envp == NULL)
		return wr_err_wrap(err, "exec");

	/* Leaf names are unique per sandbox; after an adoption a leaf of the
	 * previous process may still hold a name, so skip taken ones. */
	for (int tries = 0;; tries++) {
		char name[32];
		wr_err lerr = NULL;
		snprintf(name, sizeof(name), "cmd-%u", atomic_fetch_add(&sb->cmd_seq, 1) + 1);
		r = wr_cgroup_create_cmd_leaf(sb->cg, name, &leaf, &lerr);
		if (r >= 0)
			break;
		if (wr_err_code(lerr) != EEXIST || tries > 100) {
			r = wr_err_set(err, wr_err_code(lerr), "%s", lerr->msg);
			wr_err_free(&lerr);
			goto out;
		}
		wr_err_free(&lerr);
	}
	/* From here another thread can kill the command's tree; a kill that
	 * came first means it never starts. */
	if (spec->ctl) {
		pthread_mutex_lock(&spec->ctl->lock);
		bool killed_early = spec->ctl->kill;
		if (!killed_early)
			spec->ctl->leaf = leaf;
		pthread_mutex_unlock(&spec->ctl->lock);
		if (killed_early) {
			res->reason = WR_EXIT_KILLED;
			res->signal = SIGKILL;
			res->exit_code = 128 + SIGKILL;
			r = 0;
			goto out;
		}
	}

	int p[2];
	if ((r = pipe_nb(p, err)) < 0)
		goto out;
	so.fd = p[0];
	out_w = p[1];
	if ((r = pipe_nb(p, err)) < 0)
		goto out;
	se.fd = p[0];
	err_w = p[1];
	int in_fd = spec->stdin_fd;
	if (spec->pty) {
		if (spec->on_pty == NULL) {
			r = wr_err_field(err, "pty", "an interactive command needs a pty callback");
			goto out;
		}
		if ((r = open_pty(sb, spec, &pty_master, &pty_slave, err)) < 0)
			goto out;
		in_fd = pty_slave;
		ca.pty = true;
	} else if (in_fd < 0) {
		null_in = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (null_in < 0) {
			r = wr_err_sys(err, "open /dev/null");
			goto out;
		}
		in_fd = null_in;
	}
	so.cap = se.cap = spec->output_cap ? spec->output_cap : WR_DEFAULT_OUTPUT_CAP;

	ca.nprocs = wr_cgroup_procs_fds(leaf, false, ca.procs, (int)WR_ARRAY_SIZE(ca.procs), err);
	if (ca.nprocs < 0) {
		ca.nprocs = 0;
		r = -1;
		goto out;
	}
	stacks = wr_spawn_stack_get();
	if (stacks == NULL) {
		r = wr_err_sys(err, "exec: stack");
		goto out;
	}
	ca.init_pidfd = sb->init_pidfd;
	ca.fd_in = in_fd;
	ca.fd_out = spec->pty ? pty_slave : out_w;
	ca.fd_err = spec->pty ? pty_slave : err_w;
	ca.uid = spec->user >= 0 ? (uid_t)spec->user : sb->user;
	ca.gid = spec->group >= 0 ? (gid_t)spec->group
				  : (spec->user >= 0 ? (gid_t)spec->user : sb->group);
	ca.caps = sb->caps;
	ca.rlimits = &sb->rlimits;
	ca.cwd = cwd;
	ca.argv = (char *const *)spec->argv;
	ca.envp = envp;
	ca.seccomp = prog;
	ca.in_tree = in_tree();
	ca.c_live = 1;
	ca.istack = stacks + I_STACK_TOP;
	ca.cstack = stacks + C_STACK_TOP;
	/* Returns once H has exited, i.e. after C exec'd or failed (and I,
	 * if any, exited). CLONE_FILES: C's pidfd is made in this table. */
	pid_t hpid = clone(helper_main, stacks + H_STACK_TOP,
			   CLONE_VM | CLONE_VFORK | CLONE_FILES | SIGCHLD, &ca);
	if (hpid < 0) {
		r = wr_err_sys(err, "exec: start helper");
		goto out;
	}
	int hst;
	while (waitpid(hpid, &hst, __WALL) < 0 && errno == EINTR)
		;
	close(steal_fd(&out_w));
	close(steal_fd(&err_w));
	/* Whatever happened to H, a C that exists is ours to reap (out:), or
	 * (in PID 1's tree) its pidfd ours to close. A pidfd whose clone was
	 * killed after it installed the fd but before C ran is lost (an fd
	 * until we exit): taking a number not known to be ours could close
	 * another thread's fd. */
	cpid = ca.cpid > 0 ? ca.cpid : -1;
	if (ca.cpidfd_set && ca.cpidfd >= 0)
		cpidfd = ca.cpidfd;
	if (WIFSIGNALED(hst)) {
		/* H was killed: the command's cgroup was killed while it started */
		if (ctl_killed(spec->ctl)) {
			res->reason = WR_EXIT_KILLED;
			res->signal = SIGKILL;
			res->exit_code = 128 + SIGKILL;
			r = 0;
			goto out;
		}
		r = wr_err_set(err, atomic_load(&sb->killed) ? ESRCH : ECANCELED,
			       "command was killed while it started");
		goto out;
	}
	if (cpid <= 0 && cpidfd < 0) {
		r = wr_err_set(err, ca.herr.errnum ? ca.herr.errnum : EIO, "%s",
			       ca.herr.msg[0] ? ca.herr.msg : "command helper failed");
		goto out;
	}
	if (ca.start_failed) {
		if (cpid > 0) {
			while (waitid(P_PID, (id_t)cpid, &si, WEXITED) < 0 && errno == EINTR)
				;
			cpid = -1;
			status = wait_status(&si);
		} else {
			status = wr_pidfd_exit_status(cpidfd);
		}
		exited = true;
		res->reason = WR_EXIT_START_FAILED;
		res->exit_code =
		    status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : ca.start_failed;
		const char *msg = ca.cerr.msg[0] ? ca.cerr.msg : "command failed to start";
		if (!spec->on_output) {
			wr_buf_append(&se.b, msg, strlen(msg));
			wr_buf_append(&se.b, "\n", 1);
		} else {
			spec->on_output(spec->ctx, 2, msg, strlen(msg));
			spec->on_output(spec->ctx, 2, "\n", 1);
		}
		r = 0;
		goto out;
	}
	/* CLONE_PARENT: C is our unreaped child, its pid cannot be reused. */
	if (cpidfd < 0 && (cpidfd = wr_pidfd_open(cpid, 0)) < 0) {
		r = wr_err_sys(err, "pidfd of command");
		goto out;
	}
	ctl_set(spec->ctl, leaf, cpidfd);
	if (spec->pty) {
		/* The command holds the slave; ours would keep the terminal open
		 * after it exits, and the caller would never see EOF. */
		close(steal_fd(&pty_slave));
		close(steal_fd(&so.fd));
		close(steal_fd(&se.fd));
		spec->on_pty(spec->ctx, steal_fd(&pty_master));
	}

	uint64_t deadline = spec->timeout_ms ? t0 + spec->timeout_ms * 1000000ull : 0;
	bool deliver = true, timed_out = false;
	while (!exited) {
		struct pollfd pf[3];
		int np = 0;
		pf[np++] = (struct pollfd){.fd = cpidfd, .events = POLLIN};
		if (so.fd >= 0)
			pf[np++] = (struct pollfd){.fd = so.fd, .events = POLLIN};
		if (se.fd >= 0)
			pf[np++] = (struct pollfd){.fd = se.fd, .events = POLLIN};
		int wait_ms = -1;
		if (deadline) {
			uint64_t now = wr_now_ns();
			if (now >= deadline) {
				if (!timed_out) {
					timed_out = true;
					wr_cgroup_kill(leaf, NULL);
				}
				wait_ms = 100;
			} else {
				wait_ms = (int)((deadline - now + 999999) / 1000000);
			}
		}
		int pr = poll(pf, (nfds_t)np, wait_ms);
		if (pr < 0 && errno != EINTR) {
			r = wr_err_sys(err, "poll");
			goto out;
		}
		if ((so.fd >= 0 && stream_pump(&so, spec, &deliver) < 0) ||
		    (se.fd >= 0 && stream_pump(&se, spec, &deliver) < 0)) {
			r = wr_err_set(err, ENOMEM, "capture output: out of memory");
			goto out;
		}
		if (pr > 0 && (pf[0].revents & POLLIN))
			exited = true;
	}
	/* Invariant: the pidfd is withdrawn from the control before the reap
	 * (and before it is closed). */
	ctl_set(spec->ctl, leaf, -1);
	if (cpid > 0) {
		memset(&si, 0, sizeof(si));
		while (waitid(P_PIDFD, (id_t)cpidfd, &si, WEXITED) < 0 && errno == EINTR)
			;
		cpid = -1;
		status = wait_status(&si);
	} else {
		/* PID 1 reaps it; the kernel keeps its status for our pidfd. */
		status = wr_pidfd_exit_status(cpidfd);
		if (status < 0) {
			r = wr_err_set(err, EIO, "no exit status for the command");
			goto out;
		}
	}
	/* What the command wrote before it exited is in the pipes: drain it.
	 * Output of background children that outlive it is not waited for. */
	if (so.fd >= 0)
		stream_pump(&so, spec, &deliver);
	if (se.fd >= 0)
		stream_pump(&se, spec, &deliver);
	/* A timeout kills the whole tree, not just the main process. */
	if (timed_out)
		wr_cgroup_kill(leaf, NULL);

	res->duration_ns = wr_now_ns() - t0;
	/* The command's own cgroup: its usage, and whether the OOM killer took
	 * one of its processes (the leaf's counter counts only its own victims,
	 * not those of other commands of the sandbox). */
	struct wr_cgroup_stats cst = {0};
	wr_cgroup_stats(leaf, &cst, NULL);
	res->cpu_ns = cst.cpu_usage_ns;
	res->memory_peak = cst.memory_peak;
	if (WIFEXITED(status)) {
		res->reason = WR_EXIT_EXITED;
		res->exit_code = WEXITSTATUS(status);
		/* The OOM killer took one of its processes (a shell's child)
		 * and the command then failed: the memory limit is why. */
		if (res->exit_code != 0 && cst.oom_kills > 0)
			res->reason = WR_EXIT_OOM;
	} else {
		res->signal = WTERMSIG(status);
		res->exit_code = 128 + res->signal;
		res->reason = WR_EXIT_SIGNALED;
		if (res->signal == SIGKILL && cst.oom_kills > 0)
			res->reason = WR_EXIT_OOM;
	}
	if (timed_out)
		res->reason = WR_EXIT_TIMEOUT;
	else if ((atomic_load(&sb->killed) || ctl_killed(spec->ctl)) &&
		 res->reason == WR_EXIT_SIGNALED)
		res->reason = WR_EXIT_KILLED;
	r = 0;

out:
	/* Before the leaf goes: nobody may kill through it any more. */
	ctl_set(spec->ctl, NULL, -1);
	if (cpid > 0) {
		kill(cpid, SIGKILL); /* our unreaped child: the pid is still its */
		while (waitid(P_PID, (id_t)cpid, &si, WEXITED) < 0 && errno == EINTR)
			;
	} else if (cpidfd >= 0 && !exited) {
		/* PID 1's child: killed through its pidfd, PID 1 reaps it */
		wr_pidfd_send_signal(cpidfd, SIGKILL, NULL, 0);
	}
	for (int k = 0; k < ca.nprocs; k++)
		close(ca.procs[k]);
	/* H (and I) are reaped and C exec'd or exited: nothing runs on the
	 * stacks. */
	wr_spawn_stack_put(stacks);
	if (so.fd >= 0)
		close(so.fd);
	if (se.fd >= 0)
		close(se.fd);
	if (r == 0 && !spec->on_output) {
		res->out = so.b.p ? so.b.p : strdup("");
		res->err = se.b.p ? se.b.p : strdup("");
		res->out_len = so.b.len;
		res->err_len = se.b.len;
	} else {
		free(so.b.p);
		free(se.b.p);
	}
	res->out_truncated = so.truncated;
	res->err_truncated = se.truncated;
	if (leaf) {
		if (r < 0)
			wr_cgroup_kill(leaf, NULL);
		/* Its OOM kills (and v2 refused forks) live in the leaf alone:
		 * recorded and added to the sandbox's before the rmdir. */
		if (wr_cgroup_nprocs(leaf, NULL) == 0)
			wr_cgroup_retire_leaf(sb->cg, &leaf, g_keep, g_keep_ctx, NULL);
		if (leaf) /* processes remain, or the record failed: later */
			leaf_park(sb, leaf);
	}
	wr_env_free(envp);
	if (r < 0)
		wr_err_wrap(err, "exec in %s", sb->id);
	return r;
}
