/* seccomp profiles: every check runs in a forked child that sets
 * no_new_privs and installs the profile, then reports through its exit
 * status (0 = all checks passed; messages on stderr name the failed one). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/fs.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <cmocka.h>
#include "child_harness.h"

#include "common/compat.h"
#include "isolate/caps.h"
#include "isolate/landlock.h"
#include "isolate/rlimit.h"
#include "isolate/seccomp.h"

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif
#ifndef TIOCLINUX
#define TIOCLINUX 0x541C
#endif
#define X32_BIT 0x40000000L

static const struct wr_seccomp_prog *profile(enum wr_seccomp_profile p)
{
	const struct wr_seccomp_prog *prog = NULL;
	wr_err err = NULL;
	int r = wr_seccomp_get(p, &prog, &err);
	if (r < 0)
		fail_msg("wr_seccomp_get: %s", err ? err->msg : "?");
	assert_non_null(prog);
	return prog;
}

/* In the child: no_new_privs, then the profile. */
static int enter(enum wr_seccomp_profile p)
{
	const struct wr_seccomp_prog *prog = profile(p);
	struct wr_cerr ce = {0};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -1;
	if (wr_seccomp_load(prog, &ce) < 0) {
		fprintf(stderr, "load: %s\n", ce.msg);
		return -1;
	}
	return 0;
}
#define ENTER(p) CHECK(enter(p) == 0)

/* ---- syscall names ------------------------------------------------------ */

/* What the brief requires on the EPERM list; the profile may refuse more. */
static const char *const required_denied[] = {
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "kcmp",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "add_key",
    "request_key",
    "keyctl",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "open_tree",
    "move_mount",
    "mount_setattr",
    "open_tree_attr",
    "unshare",
    "setns",
    "open_by_handle_at",
    "name_to_handle_at",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "syslog",
    "acct",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "lookup_dcookie",
    "quotactl",
    "quotactl_fd",
    "nfsservctl",
    "vhangup",
    "iopl",
    "ioperm",
    "personality",
    "uselib",
    "ustat",
    "sysfs",
    "_sysctl",
    "fanotify_init",
    "lsm_set_self_attr",
    "mbind",
    "set_mempolicy",
    "move_pages",
    "migrate_pages",
    "create_module",
    "get_kernel_syms",
    "query_module",
};

/* Resolve with libseccomp (independent of the implementation's table);
 * newer syscalls libseccomp 2.5.4 does not know come from the kernel ABI. */
static int resolve(const char *name)
{
	static const struct {
		const char *name;
		int nr;
	} newer[] = {{"open_tree_attr", 467}, {"lsm_set_self_attr", 460}, {"mseal", 462}};
	int nr = seccomp_syscall_resolve_name_arch(SCMP_ARCH_X86_64, name);
	if (nr >= 0)
		return nr;
	for (size_t i = 0; i < sizeof(newer) / sizeof(newer[0]); i++)
		if (strcmp(newer[i].name, name) == 0)
			return newer[i].nr;
	return -1;
}

static bool in_denied(const char *name)
{
	for (const char *const *n = wr_seccomp_denied_names(); *n; n++)
		if (strcmp(*n, name) == 0)
			return true;
	return false;
}

/* ---- tests: compilation and caching ------------------------------------- */

static void *get_default(void *unused)
{
	(void)unused;
	const struct wr_seccomp_prog *p = NULL;
	wr_err err = NULL;
	if (wr_seccomp_get(WR_SECCOMP_DEFAULT, &p, &err) < 0) {
		wr_err_free(&err);
		return NULL;
	}
	return (void *)p;
}

/* First compile races from several threads: one program comes out. */
static void test_get_is_cached_and_thread_safe(void **state)
{
	(void)state;
	pthread_t t[4];
	void *res[4];
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&t[i], NULL, get_default, NULL), 0);
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_join(t[i], &res[i]), 0);
	assert_non_null(res[0]);
	for (int i = 1; i < 4; i++)
		assert_ptr_equal(res[0], res[i]);
	assert_ptr_equal(profile(WR_SECCOMP_DEFAULT), res[0]);
	assert_ptr_not_equal(profile(WR_SECCOMP_INIT), res[0]);
	assert_ptr_equal(profile(WR_SECCOMP_INIT), profile(WR_SECCOMP_INIT));
}

static void test_get_rejects_unknown_profile(void **state)
{
	(void)state;
	const struct wr_seccomp_prog *p = NULL;
	wr_err err = NULL;
	assert_int_equal(wr_seccomp_get(WR_SECCOMP_NPROFILES, &p, &err), -EINVAL);
	assert_non_null(err);
	assert_int_equal(wr_err_code(err), EINVAL);
	assert_null(p);
	wr_err_free(&err);
}

static void test_load_rejects_null(void **state)
{
	(void)state;
	struct wr_cerr ce = {0};
	assert_int_equal(wr_seccomp_load(NULL, &ce), -EINVAL);
	assert_int_equal(ce.errnum, EINVAL);
}

/* Without no_new_privs and without CAP_SYS_ADMIN the kernel refuses. */
static int child_load_without_nnp(void *arg)
{
	(void)arg;
	const struct wr_seccomp_prog *prog = profile(WR_SECCOMP_DEFAULT);
	CHECK(syscall(SYS_setresuid, 65534, 65534, 65534) == 0);
	struct wr_cerr ce = {0};
	CHECK(wr_seccomp_load(prog, &ce) == -EACCES);
	CHECK(ce.errnum == EACCES);
	return 0;
}
static void test_load_requires_nnp(void **state)
{
	(void)state;
	expect_child_ok(child_load_without_nnp, NULL);
}

static void test_denied_names_cover_required(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(required_denied) / sizeof(required_denied[0]); i++)
		if (!in_denied(required_denied[i]))
			fail_msg("%s missing from wr_seccomp_denied_names()", required_denied[i]);
	size_t n = 0;
	for (const char *const *p = wr_seccomp_denied_names(); *p; p++, n++)
		if (resolve(*p) < 0)
			fail_msg("denied name %s is not an x86_64 syscall", *p);
	assert_true(n >= sizeof(required_denied) / sizeof(required_denied[0]));
	/* clone3 is ENOSYS, not EPERM, and ordinary calls are not listed */
	assert_false(in_denied("clone3"));
	assert_false(in_denied("read"));
	assert_false(in_denied("clone"));
}

/* ---- tests: the default profile ----------------------------------------- */

static int child_status_fields(void *arg)
{
	(void)arg;
	ENTER(WR_SECCOMP_DEFAULT);
	FILE *f = fopen("/proc/self/status", "re");
	CHECK(f != NULL);
	char line[256];
	int mode = -1, filters = -1;
	while (fgets(line, sizeof(line), f)) {
		sscanf(line, "Seccomp: %d", &mode);
		sscanf(line, "Seccomp_filters: %d", &filters);
	}
	fclose(f);
	CHECK(mode == 2);
	CHECK(filters == 1); /* guard and main are one program */
	return 0;
}
static void test_default_installs_one_filter(void **state)
{
	(void)state;
	expect_child_ok(child_status_fields, NULL);
}

/* Every denied syscall, called with all-ones arguments, answers EPERM. The
 * arguments are chosen so that no call could do harm if the filter were
 * missing (bad magic for reboot, bad pointers and fds everywhere). */
static int child_denied(void *arg)
{
	(void)arg;
	setsid(); /* vhangup: no controlling terminal to hang up, filter or not */
	ENTER(WR_SECCOMP_DEFAULT);
	int bad = 0;
	for (const char *const *p = wr_seccomp_denied_names(); *p; p++) {
		int nr = resolve(*p);
		errno = 0;
		long r = syscall(nr, -1L, -1L, -1L, -1L, -1L, -1L);
		if (r != -1 || errno != EPERM) {
			fprintf(stderr, "%s (%d): got %ld errno %s\n", *p, nr, r,
				strerrorname_np(errno));
			bad++;
		}
	}
	return bad ? 1 : 0;
}
static void test_denied_syscalls_eperm(void **state)
{
	(void)state;
	expect_child_ok(child_denied, NULL);
}

/* The control for the test above: without the filter, the same all-ones
 * calls fail with something other than EPERM (we run as root), so the EPERM
 * above came from the filter. */
static int child_denied_unfiltered(void *arg)
{
	(void)arg;
	CHECK_ERRNO(syscall(SYS_unshare, -1L), EINVAL);
	CHECK_ERRNO(syscall(SYS_setns, -1L, -1L), EBADF);
	CHECK_ERRNO(syscall(SYS_io_uring_enter, -1L, 0, 0, 0, NULL, 0), EBADF);
	CHECK_ERRNO(syscall(SYS_bpf, -1L, NULL, 0), EINVAL);
	CHECK_ERRNO(syscall(SYS_pidfd_getfd, -1L, -1L, 0), EBADF);
	CHECK_ERRNO(syscall(SYS_fsmount, -1L, -1L, -1L), EINVAL);
	CHECK_ERRNO(syscall(SYS_reboot, -1L, -1L, -1L, NULL), EINVAL);
	return 0;
}
static void test_denied_control_without_filter(void **state)
{
	(void)state;
	expect_child_ok(child_denied_unfiltered, NULL);
}

static int child_unlisted_enosys(void *arg)
{
	(void)arg;
	ENTER(WR_SECCOMP_DEFAULT);
	CHECK_ERRNO(syscall(1000), ENOSYS);
	CHECK_ERRNO(syscall(SYS_modify_ldt, 0, NULL, 0), ENOSYS);
	CHECK_ERRNO(syscall(451 /* cachestat */, -1, NULL, NULL, 0), ENOSYS);
	CHECK_ERRNO(syscall(SYS_clone3, NULL, 0), ENOSYS);
	struct wr_clone_args ca = {.exit_signal = SIGCHLD};
	long r = wr_clone3(&ca);
	if (r == 0)
		_exit(0);
	CHECK(r == -1 && errno == ENOSYS);
	return 0;
}
static void test_unlisted_and_clone3_enosys(void **state)
{
	(void)state;
	expect_child_ok(child_unlisted_enosys, NULL);
}

/* clone with a namespace flag, if it ever succeeds, must not leave the
 * new child running the checks too. */
static long raw_clone(unsigned long flags)
{
	long r = syscall(SYS_clone, flags, 0, NULL, NULL, 0);
	if (r == 0)
		_exit(0);
	if (r > 0)
		waitpid((pid_t)r, NULL, __WALL);
	return r;
}

static void *thread_fn(void *arg)
{
	return arg;
}

static int child_clone_flags(void *arg)
{
	(void)arg;
	ENTER(WR_SECCOMP_DEFAULT);
	static const unsigned long ns[] = {CLONE_NEWNS,	   CLONE_NEWUTS, CLONE_NEWIPC,
					   CLONE_NEWUSER,  CLONE_NEWPID, CLONE_NEWNET,
					   CLONE_NEWCGROUP};
	for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		CHECK_ERRNO(raw_clone(ns[i] | SIGCHLD), EPERM);
		/* junk in the upper half does not hide the flag */
		CHECK_ERRNO(raw_clone(0xdead00000000UL | ns[i] | SIGCHLD), EPERM);
	}
	CHECK_ERRNO(raw_clone(CLONE_NEWTIME), EPERM);
	CHECK_ERRNO(raw_clone(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | SIGCHLD), EPERM);
	/* ordinary fork and threads still work (glibc falls back from clone3) */
	long pid = raw_clone(SIGCHLD);
	CHECK(pid > 0);
	pid_t f = fork();
	CHECK(f >= 0);
	if (f == 0)
		_exit(7);
	int st = 0;
	CHECK(waitpid(f, &st, 0) == f && WIFEXITED(st) && WEXITSTATUS(st) == 7);
	pthread_t t;
	void *ret = NULL;
	CHECK(pthread_create(&t, NULL, thread_fn, (void *)0x77) == 0);
	CHECK(pthread_join(t, &ret) == 0 && ret == (void *)0x77);
	return 0;
}
static void test_clone_namespace_flags_eperm(void **state)
{
	(void)state;
	expect_child_ok(child_clone_flags, NULL);
}

static int child_ioctl(void *arg)
{
	const char *dir = arg;
	char a[PATH_MAX], b[PATH_MAX];
	snprintf(a, sizeof(a), "%s/a", dir);
	snprintf(b, sizeof(b), "%s/b", dir);
	int fa = open(a, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	int fb = open(b, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	CHECK(fa >= 0 && fb >= 0);
	CHECK(write(fa, "data", 4) == 4);
	int p[2];
	CHECK(pipe(p) == 0);
	ENTER(WR_SECCOMP_DEFAULT);

	struct file_clone_range fcr = {.src_fd = fa};
	struct file_dedupe_range fdr = {0};
	int blk = 0;
	char c = 'x';
	CHECK_ERRNO(ioctl(fb, FICLONE, fa), EPERM);
	CHECK_ERRNO(ioctl(fb, FICLONERANGE, &fcr), EPERM);
	CHECK_ERRNO(ioctl(fa, FIDEDUPERANGE, &fdr), EPERM);
	CHECK_ERRNO(ioctl(fa, FIBMAP, &blk), EPERM);
	CHECK_ERRNO(ioctl(fa, TIOCSTI, &c), EPERM);
	CHECK_ERRNO(ioctl(fa, TIOCLINUX, &c), EPERM);
	CHECK_ERRNO(ioctl(fa, XFS_IOC_SWAPEXT, NULL), EPERM);
	CHECK_ERRNO(ioctl(fa, XFS_IOC_EXCHANGE_RANGE, NULL), EPERM);
	/* every size and direction of the two XFS commands */
	CHECK_ERRNO(ioctl(fa, _IO('X', 109)), EPERM);
	CHECK_ERRNO(ioctl(fa, _IOR('X', 109, char[3]), NULL), EPERM);
	CHECK_ERRNO(ioctl(fa, _IOWR('X', 129, char[200]), NULL), EPERM);
	CHECK_ERRNO(ioctl(fa, _IOW('X', 129, uint64_t), NULL), EPERM);
	/* the kernel reads cmd as 32 bits: junk above it changes nothing */
	CHECK_ERRNO(syscall(SYS_ioctl, fb, (1UL << 32) | FICLONE, fa), EPERM);
	CHECK_ERRNO(syscall(SYS_ioctl, fa, 0xffffffff00000000UL | TIOCSTI, &c), EPERM);
	/* ordinary ioctls pass: near misses reach the kernel */
	int avail = -1;
	CHECK(ioctl(p[0], FIONREAD, &avail) == 0 && avail == 0);
	CHECK_ERRNO(ioctl(fa, TCGETS, NULL), ENOTTY);
	CHECK_ERRNO(ioctl(fa, _IO('X', 110)), ENOTTY);
	CHECK_ERRNO(ioctl(fa, _IO('Y', 109)), ENOTTY);
	return 0;
}
static int child_ioctl_unfiltered(void *arg)
{
	const char *dir = arg;
	char a[PATH_MAX], b[PATH_MAX];
	snprintf(a, sizeof(a), "%s/ua", dir);
	snprintf(b, sizeof(b), "%s/ub", dir);
	int fa = open(a, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	int fb = open(b, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	CHECK(fa >= 0 && fb >= 0);
	/* control: without the filter FICLONE gets past the EPERM stage */
	errno = 0;
	int r = ioctl(fb, FICLONE, fa);
	CHECK(r == 0 || errno != EPERM);
	return 0;
}
static void test_ioctl_denied(void **state)
{
	(void)state;
	char dir[] = "/tmp/wr-seccomp-XXXXXX";
	assert_non_null(mkdtemp(dir));
	expect_child_ok(child_ioctl, dir);
	expect_child_ok(child_ioctl_unfiltered, dir);
	char path[PATH_MAX];
	const char *names[] = {"a", "b", "ua", "ub"};
	for (size_t i = 0; i < 4; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		unlink(path);
	}
	assert_int_equal(rmdir(dir), 0);
}

static int child_socket_personality(void *arg)
{
	(void)arg;
	ENTER(WR_SECCOMP_DEFAULT);
	CHECK_ERRNO(socket(AF_VSOCK, SOCK_STREAM, 0), EPERM);
	CHECK_ERRNO(syscall(SYS_socket, (1UL << 32) | AF_VSOCK, SOCK_STREAM, 0), EPERM);
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(s >= 0);
	close(s);
	/* packet sockets of every type, raw IP sockets (flags and junk in the
	 * upper half do not matter); netlink's SOCK_RAW and UDP are fine */
	CHECK_ERRNO(socket(AF_PACKET, SOCK_RAW, 0), EPERM);
	CHECK_ERRNO(socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, 0), EPERM);
	CHECK_ERRNO(socket(AF_INET, SOCK_RAW, IPPROTO_ICMP), EPERM);
	CHECK_ERRNO(socket(AF_INET6, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_RAW), EPERM);
	CHECK_ERRNO(syscall(SYS_socket, (1UL << 32) | AF_INET, (1UL << 40) | SOCK_RAW, 1), EPERM);
	CHECK_ERRNO(syscall(SYS_socket, (1UL << 32) | AF_PACKET, SOCK_DGRAM, 0), EPERM);
	s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 0 /* NETLINK_ROUTE */);
	CHECK(s >= 0);
	close(s);
	s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	CHECK(s >= 0);
	close(s);

	CHECK(syscall(SYS_personality, 0xffffffffUL) >= 0);
	CHECK(syscall(SYS_personality, 0x0UL) >= 0);
	CHECK(syscall(SYS_personality, 0x8UL) >= 0);
	CHECK(syscall(SYS_personality, 0x0UL) >= 0);
	CHECK_ERRNO(syscall(SYS_personality, 0x0040000UL /* ADDR_NO_RANDOMIZE */), EPERM);
	CHECK_ERRNO(syscall(SYS_personality, 0x0400000UL /* READ_IMPLIES_EXEC */), EPERM);
	CHECK_ERRNO(syscall(SYS_personality, 1UL << 32), EPERM);
	return 0;
}
static void test_socket_and_personality(void **state)
{
	(void)state;
	expect_child_ok(child_socket_personality, NULL);
}

static int child_x32(void *arg)
{
	(void)arg;
	if (enter(WR_SECCOMP_DEFAULT) < 0)
		return 2;
	syscall(X32_BIT | SYS_getpid);
	return 3; /* not killed */
}
static int child_i386(void *arg)
{
	(void)arg;
	if (enter(WR_SECCOMP_DEFAULT) < 0)
		return 2;
	long ret = 20; /* i386 getpid */
	__asm__ volatile("int $0x80" : "+a"(ret) : : "memory", "r8", "r9", "r10", "r11");
	return 3;
}
static void test_foreign_arch_killed(void **state)
{
	(void)state;
	int st = run_child(child_x32, NULL);
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGSYS);
	/* int 0x80 may fault before seccomp where IA32 emulation is off */
	st = run_child(child_i386, NULL);
	assert_true(WIFSIGNALED(st));
	assert_true(WTERMSIG(st) == SIGSYS || WTERMSIG(st) == SIGSEGV);
}

/* Run argv (under the default profile when `filtered`), capture stdout,
 * return the wait status. */
struct exec_arg {
	const char *const *argv;
	int out;
	bool filtered;
};
static int child_exec(void *arg)
{
	struct exec_arg *a = arg;
	if (dup2(a->out, 1) < 0)
		return 2;
	if (a->filtered)
		ENTER(WR_SECCOMP_DEFAULT);
	execv(a->argv[0], (char *const *)a->argv);
	return 127;
}
static int capture(const char *const *argv, bool filtered, char *buf, size_t len)
{
	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	struct exec_arg a = {argv, p[1], filtered};
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		child_setup();
		child_exit(child_exec(&a));
	}
	close(p[1]);
	memset(buf, 0, len);
	size_t n = 0;
	ssize_t r;
	while (n < len - 1 && (r = read(p[0], buf + n, len - 1 - n)) > 0)
		n += (size_t)r;
	close(p[0]);
	int st = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return st;
}
static void run_under_filter(const char *const *argv, const char *want)
{
	char buf[256];
	int st = capture(argv, true, buf, sizeof(buf));
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("%s under the filter: %s %d, output '%s'", argv[0],
			 WIFEXITED(st) ? "exit" : "signal",
			 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), buf);
	assert_string_equal(buf, want);
}

/* An allowlist that is too strict shows here: libc start-up, a shell with
 * pipes and forks, and CPython with threads all have to work. */
static void test_real_programs_run(void **state)
{
	(void)state;
	const char *const sh[] = {"/usr/bin/busybox", "sh", "-c",
				  "echo hi; ls / >/dev/null && echo $(echo sub) | cat", NULL};
	run_under_filter(sh, "hi\nsub\n");
	const char *const py[] = {
	    "/usr/bin/python3", "-c",
	    "import threading, subprocess, socket, os\n"
	    "t = threading.Thread(target=lambda: None); t.start(); t.join()\n"
	    "a, b = socket.socketpair(); a.send(b'x'); assert b.recv(1) == b'x'\n"
	    "assert subprocess.run(['/usr/bin/busybox', 'true']).returncode == 0\n"
	    "print('pass', os.getpid() > 0)",
	    NULL};
	run_under_filter(py, "pass True\n");
	const char *const tr[] = {"/bin/true", NULL};
	run_under_filter(tr, "");
}

/* ---- tests: the wr-probe binary under the default profile ---------------
 * The probe is what integration and red-team tests run inside sandboxes;
 * here it must agree with the profile, name for name. */

static bool probe_path(char *out, size_t n)
{
	char self[PATH_MAX];
	ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (len <= 0)
		return false;
	self[len] = 0;
	*strrchr(self, '/') = 0;
	snprintf(out, n, "%s/wr-probe", self);
	return access(out, X_OK) == 0;
}

static void expect_probe(const char *probe, bool filtered, const char *cmd, const char *arg,
			 const char *want)
{
	const char *const argv[] = {probe, cmd, arg, NULL};
	char buf[512];
	int st = capture(argv, filtered, buf, sizeof(buf));
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("wr-probe %s %s: %s %d", cmd, arg, WIFEXITED(st) ? "exit" : "signal",
			 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
	if (strcmp(buf, want) != 0)
		fail_msg("wr-probe %s %s: got '%s', want '%s'", cmd, arg, buf, want);
}

static void test_probe_agrees_with_profile(void **state)
{
	(void)state;
	char probe[PATH_MAX + 16], want[128];
	if (!probe_path(probe, sizeof(probe)))
		skip();
	for (const char *const *p = wr_seccomp_denied_names(); *p; p++) {
		snprintf(want, sizeof(want), "%s errno=EPERM\n", *p);
		expect_probe(probe, true, "sys", *p, want);
	}
	static const struct {
		const char *cmd, *arg, *want;
	} cases[] = {
	    {"sys", "clone3", "clone3 errno=ENOSYS\n"},
	    {"sys", "clone-newuser", "clone-newuser errno=EPERM\n"},
	    {"sys", "clone-newns", "clone-newns errno=EPERM\n"},
	    {"sys", "clone-newpid", "clone-newpid errno=EPERM\n"},
	    {"sys", "clone-newnet", "clone-newnet errno=EPERM\n"},
	    {"sys", "clone-newuts", "clone-newuts errno=EPERM\n"},
	    {"sys", "clone-newipc", "clone-newipc errno=EPERM\n"},
	    {"sys", "clone-newcgroup", "clone-newcgroup errno=EPERM\n"},
	    {"sys", "clone-newtime", "clone-newtime errno=EPERM\n"},
	    {"sys", "fork", "fork ok\n"},
	    {"sys", "thread", "thread ok\n"},
	    {"sys", "getpid", "getpid ok\n"},
	    {"sys", "1000", "1000 errno=ENOSYS\n"},
	    {"sys", "modify_ldt", "modify_ldt errno=ENOSYS\n"},
	    {"sys", "personality-query", "personality-query ok\n"},
	    {"sys", "socket-vsock", "socket-vsock errno=EPERM\n"},
	    {"sys", "socket-vsock-hibits", "socket-vsock-hibits errno=EPERM\n"},
	    {"ioctl", "FICLONE", "FICLONE errno=EPERM\n"},
	    {"ioctl", "FICLONE-hibits", "FICLONE-hibits errno=EPERM\n"},
	    {"ioctl", "FICLONERANGE", "FICLONERANGE errno=EPERM\n"},
	    {"ioctl", "FIDEDUPERANGE", "FIDEDUPERANGE errno=EPERM\n"},
	    {"ioctl", "FIBMAP", "FIBMAP errno=EPERM\n"},
	    {"ioctl", "XFS_IOC_SWAPEXT", "XFS_IOC_SWAPEXT errno=EPERM\n"},
	    {"ioctl", "XFS_IOC_SWAPEXT-IO", "XFS_IOC_SWAPEXT-IO errno=EPERM\n"},
	    {"ioctl", "XFS_IOC_EXCHANGE_RANGE", "XFS_IOC_EXCHANGE_RANGE errno=EPERM\n"},
	    {"ioctl", "XFS_IOC_EXCHANGE_RANGE-IOWR", "XFS_IOC_EXCHANGE_RANGE-IOWR errno=EPERM\n"},
	    {"ioctl", "TIOCSTI", "TIOCSTI errno=EPERM\n"},
	    {"ioctl", "TIOCSTI-hibits", "TIOCSTI-hibits errno=EPERM\n"},
	    {"ioctl", "TIOCLINUX", "TIOCLINUX errno=EPERM\n"},
	    {"ioctl", "FIONREAD", "FIONREAD ok\n"},
	    {"ioctl", "TCGETS-file", "TCGETS-file errno=ENOTTY\n"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_probe(probe, true, cases[i].cmd, cases[i].arg, cases[i].want);

	/* x32: the probe is killed, it prints nothing */
	const char *const x32[] = {probe, "sys", "x32-getpid", NULL};
	char buf[256];
	int st = capture(x32, true, buf, sizeof(buf));
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGSYS);
	assert_string_equal(buf, "");

	/* status reports the filter */
	const char *const status[] = {probe, "status", NULL};
	st = capture(status, true, buf, sizeof(buf));
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_non_null(strstr(buf, " nonewprivs=1 seccomp=2 seccomp_filters=1 "));
}

/* Control: without the filter the same probes do not say EPERM, so the
 * agreement above is the filter's doing (we run as root). */
static void test_probe_control_without_filter(void **state)
{
	(void)state;
	char probe[PATH_MAX + 16];
	if (!probe_path(probe, sizeof(probe)))
		skip();
	expect_probe(probe, false, "sys", "name_to_handle_at", "name_to_handle_at ok\n");
	expect_probe(probe, false, "sys", "adjtimex", "adjtimex ok\n");
	expect_probe(probe, false, "sys", "sysfs", "sysfs ok\n");
	expect_probe(probe, false, "sys", "clone3", "clone3 ok\n");
	expect_probe(probe, false, "sys", "personality", "personality ok\n");
	expect_probe(probe, false, "sys", "reboot", "reboot errno=EINVAL\n");
	expect_probe(probe, false, "sys", "fsmount", "fsmount errno=EBADF\n");
	expect_probe(probe, false, "ioctl", "TCGETS-file", "TCGETS-file errno=ENOTTY\n");
	expect_probe(probe, false, "ioctl", "XFS_IOC_SWAPEXT", "XFS_IOC_SWAPEXT errno=ENOTTY\n");
}

/* The whole child-side sequence in the documented order, as the container
 * tier runs it before exec'ing a command: user and caps, rlimits,
 * no_new_privs, Landlock, seccomp last. The probe reports the result. */
struct stack_arg {
	const char *probe;
	int out;
};
static int child_full_stack(void *arg)
{
	struct stack_arg *a = arg;
	const struct wr_seccomp_prog *prog = profile(WR_SECCOMP_DEFAULT);
	struct wr_cerr ce = {0};
	struct wr_rlimits rl;
	wr_rlimits_default(&rl);
	const struct wr_landlock_policy ll = {
	    .scope_signals = true, .scope_abstract_unix = true, .log_denials = true};
	CHECK(dup2(a->out, 1) == 1);
	CHECK(wr_caps_switch_user(1000, 1000, 0, &ce) == 0);
	CHECK(wr_rlimits_apply(&rl, &ce) == 0);
	CHECK(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0);
	CHECK(wr_landlock_apply(&ll, &ce) == 0);
	CHECK(wr_seccomp_load(prog, &ce) == 0);
	execl(a->probe, "wr-probe", "status", (char *)NULL);
	return 127;
}
static void test_full_child_sequence(void **state)
{
	(void)state;
	char probe[PATH_MAX + 16];
	if (!probe_path(probe, sizeof(probe)))
		skip();
	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	struct stack_arg a = {probe, p[1]};
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		child_setup();
		child_exit(child_full_stack(&a));
	}
	close(p[1]);
	char buf[1024] = {0};
	size_t n = 0;
	ssize_t r;
	while (n < sizeof(buf) - 1 && (r = read(p[0], buf + n, sizeof(buf) - 1 - n)) > 0)
		n += (size_t)r;
	close(p[0]);
	int st = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	static const char *const want[] = {
	    "status ok ",
	    " uid=1000,1000,1000,1000 gid=1000,1000,1000,1000 groups=1000 ",
	    " capinh=0000000000000000 capprm=0000000000000000 capeff=0000000000000000"
	    " capbnd=0000000000000000 capamb=0000000000000000 ",
	    " nonewprivs=1 seccomp=2 seccomp_filters=1 ",
	    " nofile=1024/1024 core=0/0\n",
	};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		if (strstr(buf, want[i]) == NULL)
			fail_msg("status line '%s' lacks '%s'", buf, want[i]);
}

/* ---- tests: the warren-init profile ------------------------------------- */

static int child_init_profile(void *arg)
{
	(void)arg;
	ENTER(WR_SECCOMP_INIT);
	CHECK(getpid() > 0);
	CHECK(prctl(PR_SET_NAME, "wr-init-test", 0, 0, 0) == 0);
	CHECK(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0);
	struct rlimit rl;
	CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
	CHECK_ERRNO(setrlimit(RLIMIT_NOFILE, &rl), EPERM);
	CHECK_ERRNO(prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), EPERM);
	CHECK_ERRNO(syscall(SYS_prctl, (1UL << 32) | PR_SET_NAME, "x", 0, 0, 0), EPERM);
	CHECK_ERRNO(syscall(SYS_openat, AT_FDCWD, "/etc/hostname", O_RDONLY), EPERM);
	CHECK_ERRNO(syscall(SYS_socket, AF_UNIX, SOCK_STREAM, 0), EPERM);
	CHECK_ERRNO(syscall(SYS_clone, SIGCHLD, 0, NULL, NULL, 0), EPERM);
	CHECK_ERRNO(syscall(SYS_ptrace, -1L, -1L, 0, 0), EPERM);
	CHECK_ERRNO(syscall(1000), EPERM);
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, SIGUSR1);
	CHECK(sigprocmask(SIG_BLOCK, &s, NULL) == 0);
	CHECK(kill(getpid(), SIGUSR1) == 0);
	siginfo_t si;
	CHECK(sigwaitinfo(&s, &si) == SIGUSR1);
	CHECK_ERRNO(waitpid(-1, NULL, WNOHANG), ECHILD);
	return 0;
}
static void test_init_profile(void **state)
{
	(void)state;
	expect_child_ok(child_init_profile, NULL);
}

static int child_init_x32(void *arg)
{
	(void)arg;
	if (enter(WR_SECCOMP_INIT) < 0)
		return 2;
	syscall(X32_BIT | SYS_getpid);
	return 3;
}
static void test_init_profile_kills_x32(void **state)
{
	(void)state;
	int st = run_child(child_init_x32, NULL);
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGSYS);
}

/* The real warren-init (built next to the tests) starts and settles into
 * its wait loop under the profile it gets in production. */
static int child_exec_init(void *arg)
{
	ENTER(WR_SECCOMP_INIT);
	char *const argv[] = {"warren-init", NULL};
	execv((const char *)arg, argv);
	return 127;
}
static void test_init_profile_runs_warren_init(void **state)
{
	(void)state;
	char self[PATH_MAX], path[PATH_MAX + 32];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	assert_true(n > 0);
	self[n] = 0;
	*strrchr(self, '/') = 0;
	snprintf(path, sizeof(path), "%s/../warren-init", self);
	if (access(path, X_OK) != 0)
		skip();
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		child_setup();
		child_exit(child_exec_init(path));
	}
	struct timespec ts = {0, 300 * 1000 * 1000};
	nanosleep(&ts, NULL);
	int st = 0;
	pid_t w = waitpid(pid, &st, WNOHANG);
	char comm[64] = {0}, p[64];
	snprintf(p, sizeof(p), "/proc/%d/comm", pid);
	FILE *f = fopen(p, "re");
	if (f) {
		if (!fgets(comm, sizeof(comm), f))
			comm[0] = 0;
		fclose(f);
	}
	kill(pid, SIGKILL);
	if (w == 0)
		waitpid(pid, &st, 0);
	if (w != 0)
		fail_msg("warren-init died under its profile: %s %d",
			 WIFEXITED(st) ? "exit" : "signal",
			 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
	assert_string_equal(comm, "warren-init\n"); /* its prctl(PR_SET_NAME) passed */
}

/* A classic BPF interpreter (what the kernel's seccomp runs), counting the
 * instructions one evaluation takes. Returns the action, or -1 on an
 * instruction it does not know or a run past the end. */
static long run_bpf(const struct sock_filter *f, size_t n, const struct seccomp_data *d,
		    unsigned *steps)
{
	uint32_t a = 0, x = 0, mem[BPF_MEMWORDS] = {0};
	*steps = 0;
	for (size_t pc = 0; pc < n; pc++) {
		const struct sock_filter *i = &f[pc];
		uint32_t src = BPF_SRC(i->code) == BPF_X ? x : i->k;
		++*steps;
		switch (BPF_CLASS(i->code)) {
		case BPF_LD:
			if (BPF_MODE(i->code) == BPF_ABS && BPF_SIZE(i->code) == BPF_W &&
			    i->k + 4 <= sizeof(*d) && i->k % 4 == 0)
				memcpy(&a, (const char *)d + i->k, 4);
			else if (BPF_MODE(i->code) == BPF_IMM)
				a = i->k;
			else if (BPF_MODE(i->code) == BPF_MEM && i->k < BPF_MEMWORDS)
				a = mem[i->k];
			else
				return -1;
			break;
		case BPF_LDX:
			if (BPF_MODE(i->code) == BPF_IMM)
				x = i->k;
			else if (BPF_MODE(i->code) == BPF_MEM && i->k < BPF_MEMWORDS)
				x = mem[i->k];
			else
				return -1;
			break;
		case BPF_ST:
		case BPF_STX:
			if (i->k >= BPF_MEMWORDS)
				return -1;
			mem[i->k] = BPF_CLASS(i->code) == BPF_ST ? a : x;
			break;
		case BPF_ALU:
			switch (BPF_OP(i->code)) {
			case BPF_AND: a &= src; break;
			case BPF_OR: a |= src; break;
			case BPF_ADD: a += src; break;
			case BPF_SUB: a -= src; break;
			default: return -1;
			}
			break;
		case BPF_JMP: {
			bool t;
			switch (BPF_OP(i->code)) {
			case BPF_JA: pc += i->k; continue;
			case BPF_JEQ: t = a == src; break;
			case BPF_JGT: t = a > src; break;
			case BPF_JGE: t = a >= src; break;
			case BPF_JSET: t = (a & src) != 0; break;
			default: return -1;
			}
			pc += t ? i->jt : i->jf;
			break;
		}
		case BPF_RET: return BPF_RVAL(i->code) == BPF_A ? a : i->k;
		case BPF_MISC:
			if (BPF_MISCOP(i->code) == BPF_TAX)
				x = a;
			else
				a = x;
			break;
		default: return -1;
		}
	}
	return -1;
}

/* The default profile is searched, not scanned: every syscall number
 * reaches its action in a few dozen instructions. A load runs the program
 * once per syscall number to fill the kernel's action cache (with
 * interrupts off), and a function slot loads it per call: a program of
 * one compare per rule in a row took ~400 instructions for the last
 * ones. */
static void test_default_profile_is_a_search(void **state)
{
	(void)state;
	const void *insns;
	size_t n;
	wr_seccomp_prog_insns(profile(WR_SECCOMP_DEFAULT), &insns, &n);
	unsigned worst = 0, total = 0;
	for (int nr = 0; nr < 512; nr++) {
		struct seccomp_data d = {.nr = nr, .arch = AUDIT_ARCH_X86_64};
		unsigned steps;
		long act = run_bpf(insns, n, &d, &steps);
		if (act < 0)
			fail_msg("nr %d: the interpreter stopped", nr);
		/* The interpreter agrees with the kernel on a few known ones. */
		if (nr == __NR_read)
			assert_int_equal(act, SECCOMP_RET_ALLOW);
		if (nr == __NR_mount)
			assert_int_equal(act, SECCOMP_RET_ERRNO | EPERM);
		if (nr == 511)
			assert_int_equal(act, SECCOMP_RET_ERRNO | ENOSYS);
		worst = steps > worst ? steps : worst;
		total += steps;
	}
	if (worst > 64)
		fail_msg("a syscall number takes %u instructions (%u on average)", worst,
			 total / 512);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_get_is_cached_and_thread_safe),
	    cmocka_unit_test(test_get_rejects_unknown_profile),
	    cmocka_unit_test(test_load_rejects_null),
	    cmocka_unit_test(test_load_requires_nnp),
	    cmocka_unit_test(test_denied_names_cover_required),
	    cmocka_unit_test(test_default_installs_one_filter),
	    cmocka_unit_test(test_default_profile_is_a_search),
	    cmocka_unit_test(test_denied_syscalls_eperm),
	    cmocka_unit_test(test_denied_control_without_filter),
	    cmocka_unit_test(test_unlisted_and_clone3_enosys),
	    cmocka_unit_test(test_clone_namespace_flags_eperm),
	    cmocka_unit_test(test_ioctl_denied),
	    cmocka_unit_test(test_socket_and_personality),
	    cmocka_unit_test(test_foreign_arch_killed),
	    cmocka_unit_test(test_real_programs_run),
	    cmocka_unit_test(test_probe_agrees_with_profile),
	    cmocka_unit_test(test_probe_control_without_filter),
	    cmocka_unit_test(test_full_child_sequence),
	    cmocka_unit_test(test_init_profile),
	    cmocka_unit_test(test_init_profile_kills_x32),
	    cmocka_unit_test(test_init_profile_runs_warren_init),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
