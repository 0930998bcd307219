/* Landlock: every check runs in a forked child that sets no_new_privs and
 * applies the ruleset, then reports through its exit status. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <setjmp.h>
#include <cmocka.h>

#include "common/compat.h"
#include "isolate/landlock.h"
#include "child_harness.h"

static const struct wr_landlock_policy full = {
    .scope_signals = true, .scope_abstract_unix = true, .log_denials = true};

static int apply(const struct wr_landlock_policy *p)
{
	struct wr_cerr ce = {0};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -1;
	if (wr_landlock_apply(p, &ce) < 0) {
		fprintf(stderr, "apply: %s\n", ce.msg);
		return -1;
	}
	return 0;
}

/* The machines we target run ABI 7; a lower ABI here means the tests below
 * would silently check less. */
static void test_abi(void **state)
{
	(void)state;
	int abi = wr_landlock_abi();
	assert_true(abi >= 6);
	assert_int_equal(wr_landlock_abi(), abi); /* cached, stable */
	assert_int_equal(abi, (int)syscall(__NR_landlock_create_ruleset, NULL, 0, 1U));
}

static int child_requires_nnp(void *arg)
{
	(void)arg;
	/* without no_new_privs and without CAP_SYS_ADMIN: EPERM */
	CHECK(syscall(SYS_setresuid, 65534, 65534, 65534) == 0);
	struct wr_cerr ce = {0};
	CHECK(wr_landlock_apply(&full, &ce) == -EPERM);
	CHECK(ce.errnum == EPERM);
	return 0;
}
static void test_requires_nnp(void **state)
{
	(void)state;
	expect_child_ok(child_requires_nnp, NULL);
}

static void test_null_policy(void **state)
{
	(void)state;
	struct wr_cerr ce = {0};
	assert_int_equal(wr_landlock_apply(NULL, &ce), -EINVAL);
}

/* A tree: <tmp>/root (the "sandbox root", with a file) and <tmp>/host
 * (a "host" directory with a file) beside it. */
struct tree {
	char base[64];
	char root[96];
	char host[96];
};

static void tree_make(struct tree *t)
{
	strcpy(t->base, "/tmp/wr-landlock-XXXXXX");
	assert_non_null(mkdtemp(t->base));
	snprintf(t->root, sizeof(t->root), "%s/root", t->base);
	snprintf(t->host, sizeof(t->host), "%s/host", t->base);
	assert_int_equal(mkdir(t->root, 0755), 0);
	assert_int_equal(mkdir(t->host, 0755), 0);
	char proc[160];
	snprintf(proc, sizeof(proc), "%s/proc", t->root);
	assert_int_equal(mkdir(proc, 0755), 0);
	char p[160];
	snprintf(p, sizeof(p), "%s/inside", t->root);
	int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "in", 2), 2);
	close(fd);
	snprintf(p, sizeof(p), "%s/secret", t->host);
	fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "host", 4), 4);
	close(fd);
}

static void tree_remove(struct tree *t)
{
	char p[160];
	const char *files[] = {"root/inside", "root/new", "host/secret", "host/new"};
	for (size_t i = 0; i < 4; i++) {
		snprintf(p, sizeof(p), "%s/%s", t->base, files[i]);
		unlink(p);
	}
	snprintf(p, sizeof(p), "%s/proc", t->root);
	rmdir(p);
	rmdir(t->root);
	rmdir(t->host);
	assert_int_equal(rmdir(t->base), 0);
}

/* chroot into root/ (standing in for pivot_root), keep an fd of host/,
 * apply: everything beneath the new "/" works, the leaked fd reaches
 * nothing. */
static int child_fs(void *arg)
{
	struct tree *t = arg;
	/* A procfs inside the new root, whose magic links point outside. The
	 * fds below are opened after unshare, in the same mount namespace as
	 * the root, so that link/rename reach Landlock rather than failing
	 * the VFS cross-mount check. */
	char proc[160];
	snprintf(proc, sizeof(proc), "%s/proc", t->root);
	CHECK(unshare(CLONE_NEWNS) == 0);
	CHECK(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0);
	CHECK(mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) == 0);
	int hostfd = open(t->host, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	CHECK(hostfd >= 0);
	int hostpath = open(t->host, O_PATH | O_DIRECTORY | O_CLOEXEC);
	CHECK(hostpath >= 0);
	/* control: before Landlock the leaked fd reaches the host file */
	int c = openat(hostfd, "secret", O_RDONLY | O_CLOEXEC);
	CHECK(c >= 0);
	close(c);
	CHECK(chroot(t->root) == 0);
	CHECK(chdir("/") == 0);
	CHECK(apply(&full) == 0);

	/* inside the root: read, write, create, truncate, unlink all work */
	char buf[8] = {0};
	int fd = open("/inside", O_RDWR | O_CLOEXEC);
	CHECK(fd >= 0);
	CHECK(read(fd, buf, sizeof(buf)) == 2 && memcmp(buf, "in", 2) == 0);
	CHECK(ftruncate(fd, 0) == 0);
	close(fd);
	fd = open("/new", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	CHECK(fd >= 0);
	close(fd);
	CHECK(truncate("/new", 0) == 0);
	CHECK(unlink("/new") == 0);
	CHECK(mkdir("/d", 0755) == 0 && rmdir("/d") == 0);
	/* moving and linking between directories (REFER, ABI 2): without it
	 * Landlock refuses every reparenting with EXDEV, breaking mv */
	CHECK(mkdir("/a", 0755) == 0 && mkdir("/b", 0755) == 0);
	fd = open("/a/f", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	CHECK(fd >= 0);
	close(fd);
	CHECK(rename("/a/f", "/b/f") == 0);
	CHECK(link("/b/f", "/a/g") == 0);
	CHECK(unlink("/a/g") == 0 && unlink("/b/f") == 0);
	CHECK(rmdir("/a") == 0 && rmdir("/b") == 0);

	/* through the leaked host fd: refused */
	CHECK_ERRNO(openat(hostfd, "secret", O_RDONLY | O_CLOEXEC), EACCES);
	CHECK_ERRNO(openat(hostfd, "new", O_WRONLY | O_CREAT | O_CLOEXEC, 0644), EACCES);
	CHECK_ERRNO(openat(hostpath, "secret", O_RDONLY | O_CLOEXEC), EACCES);
	CHECK_ERRNO(mkdirat(hostfd, "d", 0755), EACCES);
	CHECK_ERRNO(unlinkat(hostfd, "secret", 0), EACCES);
	/* path-based truncate(2) through a magic link: TRUNCATE (ABI 3) */
	char via[64];
	snprintf(via, sizeof(via), "/proc/self/fd/%d/secret", hostpath);
	CHECK_ERRNO(truncate(via, 0), EACCES);
	CHECK_ERRNO(open(via, O_RDONLY | O_CLOEXEC), EACCES);
	/* listing the leaked directory is READ_DIR: refused too */
	CHECK_ERRNO(openat(hostfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC), EACCES);
	/* moving or linking a file out to the host: MAKE_REG there refused */
	CHECK_ERRNO(linkat(AT_FDCWD, "/inside", hostfd, "new", 0), EACCES);
	CHECK_ERRNO(renameat(AT_FDCWD, "/inside", hostfd, "new"), EACCES);
	return 0;
}
static void test_fs_outside_root_refused(void **state)
{
	(void)state;
	struct tree t;
	tree_make(&t);
	expect_child_ok(child_fs, &t);
	/* the host file is intact and nothing was created beside it */
	char p[160];
	snprintf(p, sizeof(p), "%s/secret", t.host);
	struct stat st;
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_size, 4);
	snprintf(p, sizeof(p), "%s/new", t.host);
	assert_int_equal(stat(p, &st), -1);
	tree_remove(&t);
}

/* Signals: nothing outside the domain can be signalled, a process created
 * after apply (same domain) can. */
static int child_signals(void *arg)
{
	pid_t outsider = *(pid_t *)arg;
	pid_t parent = getppid();
	CHECK(kill(parent, 0) == 0); /* control */
	CHECK(apply(&full) == 0);
	CHECK_ERRNO(kill(parent, 0), EPERM);
	CHECK_ERRNO(kill(outsider, SIGTERM), EPERM);
	CHECK_ERRNO(kill(1, 0), EPERM);
	pid_t kid = fork();
	CHECK(kid >= 0);
	if (kid == 0) {
		alarm(30); /* never outlives a failed check */
		pause();
		_exit(0);
	}
	CHECK(kill(kid, 0) == 0);
	CHECK(kill(kid, SIGKILL) == 0);
	int st = 0;
	CHECK(waitpid(kid, &st, 0) == kid && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	CHECK(kill(getpid(), 0) == 0);
	return 0;
}
static void test_signal_scoping(void **state)
{
	(void)state;
	pid_t outsider = fork();
	assert_true(outsider >= 0);
	if (outsider == 0) {
		alarm(30);
		pause();
		_exit(0);
	}
	int st = run_child(child_signals, &outsider);
	/* the outsider survived the attempt; reap it before asserting */
	int ost = 0;
	pid_t alive = waitpid(outsider, &ost, WNOHANG);
	kill(outsider, SIGKILL);
	if (alive == 0)
		waitpid(outsider, &ost, 0);
	assert_int_equal(alive, 0);
	check_status(st);
}

/* With scoping off (policy), the same signal goes through. */
static int child_signals_unscoped(void *arg)
{
	(void)arg;
	const struct wr_landlock_policy p = {.log_denials = false};
	CHECK(apply(&p) == 0);
	CHECK(kill(getppid(), 0) == 0);
	return 0;
}
static void test_signal_scoping_follows_policy(void **state)
{
	(void)state;
	expect_child_ok(child_signals_unscoped, NULL);
}

static int abstract_addr(struct sockaddr_un *sa, const char *name)
{
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	size_t n = strlen(name);
	memcpy(sa->sun_path + 1, name, n);
	return (int)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

/* Abstract names made outside the domain (the test process binds them
 * before the child applies): connect and sendto are refused. */
static int child_abstract(void *arg)
{
	const char *name = arg;
	char dname[80];
	snprintf(dname, sizeof(dname), "%s-dg", name);
	struct sockaddr_un sa, da;
	socklen_t len = (socklen_t)abstract_addr(&sa, name);
	socklen_t dlen = (socklen_t)abstract_addr(&da, dname);
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int d = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	CHECK(s >= 0 && d >= 0);
	CHECK(apply(&full) == 0);
	CHECK_ERRNO(connect(s, (struct sockaddr *)&sa, len), EPERM);
	CHECK_ERRNO(sendto(d, "x", 1, 0, (struct sockaddr *)&da, dlen), EPERM);
	CHECK_ERRNO(connect(d, (struct sockaddr *)&da, dlen), EPERM);
	/* abstract sockets made inside the domain still work */
	struct sockaddr_un in;
	char inner[96];
	snprintf(inner, sizeof(inner), "%s-inner", name);
	socklen_t ilen = (socklen_t)abstract_addr(&in, inner);
	int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(l >= 0);
	CHECK(bind(l, (struct sockaddr *)&in, ilen) == 0 && listen(l, 1) == 0);
	int c = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(c >= 0);
	CHECK(connect(c, (struct sockaddr *)&in, ilen) == 0);
	return 0;
}

/* Control: the same calls without Landlock succeed. */
static int child_abstract_control(void *arg)
{
	const char *name = arg;
	char dname[80];
	snprintf(dname, sizeof(dname), "%s-dg", name);
	struct sockaddr_un sa, da;
	socklen_t len = (socklen_t)abstract_addr(&sa, name);
	socklen_t dlen = (socklen_t)abstract_addr(&da, dname);
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int d = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	CHECK(s >= 0 && d >= 0);
	CHECK(connect(s, (struct sockaddr *)&sa, len) == 0);
	CHECK(sendto(d, "x", 1, 0, (struct sockaddr *)&da, dlen) == 1);
	return 0;
}

/* Scoping off by policy: the outside name is reachable. */
static int child_abstract_unscoped(void *arg)
{
	const char *name = arg;
	const struct wr_landlock_policy p = {.scope_signals = true, .log_denials = true};
	struct sockaddr_un sa;
	socklen_t len = (socklen_t)abstract_addr(&sa, name);
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(s >= 0);
	CHECK(apply(&p) == 0);
	CHECK(connect(s, (struct sockaddr *)&sa, len) == 0);
	return 0;
}

static void test_abstract_unix_scoping(void **state)
{
	(void)state;
	char name[64], dname[80];
	snprintf(name, sizeof(name), "wr-landlock-test-%d", getpid());
	snprintf(dname, sizeof(dname), "%s-dg", name);
	struct sockaddr_un sa, da;
	socklen_t len = (socklen_t)abstract_addr(&sa, name);
	socklen_t dlen = (socklen_t)abstract_addr(&da, dname);
	int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int d = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(l >= 0 && d >= 0);
	assert_int_equal(bind(l, (struct sockaddr *)&sa, len), 0);
	assert_int_equal(listen(l, 8), 0);
	assert_int_equal(bind(d, (struct sockaddr *)&da, dlen), 0);
	expect_child_ok(child_abstract_control, name);
	expect_child_ok(child_abstract, name);
	expect_child_ok(child_abstract_unscoped, name);
	close(d);
	close(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_abi),
	    cmocka_unit_test(test_requires_nnp),
	    cmocka_unit_test(test_null_policy),
	    cmocka_unit_test(test_fs_outside_root_refused),
	    cmocka_unit_test(test_signal_scoping),
	    cmocka_unit_test(test_signal_scoping_follows_policy),
	    cmocka_unit_test(test_abstract_unix_scoping),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
