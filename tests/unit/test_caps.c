/* Capabilities and rlimits: each check runs in a forked child (the test
 * runs as root) and reports through its exit status. Capability sets are
 * read back from /proc/self/status, before and after an execve. */
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <setjmp.h>
#include <cmocka.h>

#include "isolate/caps.h"
#include "isolate/rlimit.h"
#include "child_harness.h"

/* ---- /proc/self/status -------------------------------------------------- */

struct status {
	unsigned long long inh, prm, eff, bnd, amb;
	unsigned int uid[4], gid[4];
	char groups[64];
};

static int parse_status(const char *text, struct status *s)
{
	memset(s, 0xff, offsetof(struct status, groups));
	s->groups[0] = 0;
	int found = 0;
	for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		found += sscanf(l, "CapInh: %llx", &s->inh) == 1;
		found += sscanf(l, "CapPrm: %llx", &s->prm) == 1;
		found += sscanf(l, "CapEff: %llx", &s->eff) == 1;
		found += sscanf(l, "CapBnd: %llx", &s->bnd) == 1;
		found += sscanf(l, "CapAmb: %llx", &s->amb) == 1;
		found += sscanf(l, "Uid: %u %u %u %u", &s->uid[0], &s->uid[1], &s->uid[2],
				&s->uid[3]) == 4;
		found += sscanf(l, "Gid: %u %u %u %u", &s->gid[0], &s->gid[1], &s->gid[2],
				&s->gid[3]) == 4;
		if (strncmp(l, "Groups:", 7) == 0) {
			const char *v = l + 7;
			while (*v == ' ' || *v == '\t')
				v++;
			size_t n = strcspn(v, "\n");
			while (n > 0 && v[n - 1] == ' ')
				n--;
			if (n >= sizeof(s->groups))
				n = sizeof(s->groups) - 1;
			memcpy(s->groups, v, n);
			s->groups[n] = 0;
			found++;
		}
	}
	return found == 8 ? 0 : -1;
}

static int read_self_status(struct status *s)
{
	static char buf[8192];
	int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	return parse_status(buf, s);
}

/* The status as seen by a program exec'd now: /bin/cat /proc/self/status
 * with its output in a pipe. */
static int exec_status(struct status *s)
{
	int p[2];
	if (pipe(p) < 0)
		return -1;
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		dup2(p[1], 1);
		execl("/bin/cat", "cat", "/proc/self/status", (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	static char buf[8192];
	size_t n = 0;
	ssize_t r;
	while (n < sizeof(buf) - 1 && (r = read(p[0], buf + n, sizeof(buf) - 1 - n)) > 0)
		n += (size_t)r;
	buf[n] = 0;
	close(p[0]);
	int st = 0;
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return -1;
	return parse_status(buf, s);
}

static void dump(const char *when, const struct status *s)
{
	fprintf(stderr,
		"%s: uid %u gid %u groups '%s' inh %llx prm %llx eff %llx bnd %llx amb %llx\n",
		when, s->uid[0], s->gid[0], s->groups, s->inh, s->prm, s->eff, s->bnd, s->amb);
}

/* ---- capability sets ---------------------------------------------------- */

static void test_parse_and_mask(void **state)
{
	(void)state;
	enum wr_capset c = WR_CAPSET_ROOT;
	assert_int_equal(wr_capset_parse("none", &c), 0);
	assert_int_equal(c, WR_CAPSET_NONE);
	assert_int_equal(wr_capset_parse("root", &c), 0);
	assert_int_equal(c, WR_CAPSET_ROOT);
	assert_int_equal(wr_capset_parse("all", &c), -EINVAL);
	assert_int_equal(wr_capset_parse("", &c), -EINVAL);
	assert_int_equal(wr_capset_parse(NULL, &c), -EINVAL);
	assert_int_equal(wr_capset_mask(WR_CAPSET_NONE), 0);
	assert_int_equal(wr_capset_mask(WR_CAPSET_ROOT), WR_CAPS_ROOT_SET);
	/* the root set, exactly */
	const uint64_t want =
	    WR_CAP_BIT(CAP_CHOWN) | WR_CAP_BIT(CAP_DAC_OVERRIDE) | WR_CAP_BIT(CAP_FOWNER) |
	    WR_CAP_BIT(CAP_FSETID) | WR_CAP_BIT(CAP_KILL) | WR_CAP_BIT(CAP_SETGID) |
	    WR_CAP_BIT(CAP_SETUID) | WR_CAP_BIT(CAP_SETFCAP) | WR_CAP_BIT(CAP_NET_BIND_SERVICE);
	assert_int_equal(WR_CAPS_ROOT_SET, want);
	assert_int_equal(WR_CAPS_ROOT_SET & WR_CAP_BIT(CAP_SYS_ADMIN), 0);
	assert_int_equal(WR_CAPS_ROOT_SET & WR_CAP_BIT(CAP_SYS_CHROOT), 0);
}

struct switch_case {
	uid_t uid;
	gid_t gid;
	uint64_t keep;
	/* expected after the switch, and after an execve */
	uint64_t inh, prm, eff, bnd, amb;
	uint64_t x_prm, x_eff, x_amb;
};

static int child_switch(void *arg)
{
	const struct switch_case *c = arg;
	struct wr_cerr ce = {0};
	if (wr_caps_switch_user(c->uid, c->gid, c->keep, &ce) < 0) {
		fprintf(stderr, "switch: %s\n", ce.msg);
		return 1;
	}
	struct status s;
	CHECK(read_self_status(&s) == 0);
	dump("after switch", &s);
	for (int i = 0; i < 4; i++)
		CHECK(s.uid[i] == c->uid && s.gid[i] == c->gid);
	char g[16];
	snprintf(g, sizeof(g), "%u", (unsigned int)c->gid);
	CHECK(strcmp(s.groups, g) == 0);
	CHECK(s.inh == c->inh);
	CHECK(s.prm == c->prm);
	CHECK(s.eff == c->eff);
	CHECK(s.bnd == c->bnd);
	CHECK(s.amb == c->amb);

	struct status x;
	CHECK(exec_status(&x) == 0);
	dump("after exec", &x);
	CHECK(x.uid[0] == c->uid && x.gid[0] == c->gid);
	CHECK(x.prm == c->x_prm);
	CHECK(x.eff == c->x_eff);
	CHECK(x.amb == c->x_amb);
	CHECK(x.bnd == c->bnd);
	CHECK(x.inh == c->inh);
	return 0;
}

static void test_user_without_caps(void **state)
{
	(void)state;
	struct switch_case c = {.uid = 1000, .gid = 1000, .keep = 0};
	expect_child_ok(child_switch, &c);
}

static void test_root_without_caps(void **state)
{
	(void)state;
	/* uid 0 with an empty bounding set gets nothing back at execve */
	struct switch_case c = {.uid = 0, .gid = 0, .keep = 0};
	expect_child_ok(child_switch, &c);
}

static void test_root_with_root_set(void **state)
{
	(void)state;
	const uint64_t m = WR_CAPS_ROOT_SET;
	struct switch_case c = {.uid = 0,
				.gid = 0,
				.keep = m,
				.inh = m,
				.prm = m,
				.eff = m,
				.bnd = m,
				.amb = 0,
				.x_prm = m,
				.x_eff = m,
				.x_amb = 0};
	expect_child_ok(child_switch, &c);
}

static void test_user_with_root_set(void **state)
{
	(void)state;
	/* a non-root uid keeps the set across execve through the ambient set */
	const uint64_t m = WR_CAPS_ROOT_SET;
	struct switch_case c = {.uid = 1000,
				.gid = 1001,
				.keep = m,
				.inh = m,
				.prm = m,
				.eff = m,
				.bnd = m,
				.amb = m,
				.x_prm = m,
				.x_eff = m,
				.x_amb = m};
	expect_child_ok(child_switch, &c);
}

/* What the sets mean: root without caps is refused like any user; the
 * root set grants DAC override; nothing brings back a dropped cap. */
static int child_behaviour(void *arg)
{
	const char *file = arg; /* mode 0600, owned by 4242 */
	struct wr_cerr ce = {0};
	CHECK(wr_caps_switch_user(0, 0, 0, &ce) == 0);
	CHECK_ERRNO(open(file, O_RDONLY | O_CLOEXEC), EACCES);
	CHECK_ERRNO(chown(file, 0, 0), EPERM);
	CHECK_ERRNO(prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_DAC_OVERRIDE, 0, 0), EPERM);
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[2] = {
	    {.effective = 1U << CAP_DAC_OVERRIDE, .permitted = 1U << CAP_DAC_OVERRIDE}};
	CHECK_ERRNO(syscall(SYS_capset, &h, d), EPERM);
	return 0;
}
static int child_behaviour_root_set(void *arg)
{
	const char *file = arg;
	struct wr_cerr ce = {0};
	CHECK(wr_caps_switch_user(1000, 1000, WR_CAPS_ROOT_SET, &ce) == 0);
	int fd = open(file, O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0);
	close(fd);
	/* not in the set: raising it anywhere fails */
	CHECK_ERRNO(prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_SYS_ADMIN, 0, 0), EPERM);
	CHECK(prctl(PR_CAPBSET_READ, CAP_SYS_ADMIN, 0, 0, 0) == 0);
	CHECK(prctl(PR_CAPBSET_READ, CAP_CHOWN, 0, 0, 0) == 1);
	return 0;
}
static void test_caps_behaviour(void **state)
{
	(void)state;
	char file[] = "/tmp/wr-caps-XXXXXX";
	int fd = mkstemp(file);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(chmod(file, 0600), 0);
	assert_int_equal(chown(file, 4242, 4242), 0);
	expect_child_ok(child_behaviour, file);
	expect_child_ok(child_behaviour_root_set, file);
	assert_int_equal(unlink(file), 0);
}

/* Asking for a capability the process no longer has fails with EPERM
 * rather than silently leaving less. */
static int child_missing_cap(void *arg)
{
	(void)arg;
	CHECK(prctl(PR_CAPBSET_DROP, CAP_CHOWN, 0, 0, 0) == 0);
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[2];
	CHECK(syscall(SYS_capget, &h, d) == 0);
	d[0].permitted &= ~(1U << CAP_CHOWN);
	d[0].effective &= ~(1U << CAP_CHOWN);
	d[0].inheritable &= ~(1U << CAP_CHOWN);
	CHECK(syscall(SYS_capset, &h, d) == 0);
	struct wr_cerr ce = {0};
	CHECK(wr_caps_switch_user(1000, 1000, WR_CAPS_ROOT_SET, &ce) == -EPERM);
	CHECK(ce.errnum == EPERM);
	CHECK(strstr(ce.msg, "capset") != NULL);
	return 0;
}
static void test_missing_cap_is_an_error(void **state)
{
	(void)state;
	expect_child_ok(child_missing_cap, NULL);
}

/* ---- rlimits ------------------------------------------------------------ */

static void test_rlimit_defaults(void **state)
{
	(void)state;
	struct wr_rlimits r;
	memset(&r, 0x5a, sizeof(r));
	wr_rlimits_default(&r);
	assert_int_equal(r.nofile, 1024);
	assert_int_equal(r.core, 0);
	assert_true(r.fsize == WR_RLIM_UNSET);
	assert_true(r.cpu_secs == WR_RLIM_UNSET);
	assert_true(r.stack == WR_RLIM_UNSET);
}

static int rl_is(int res, rlim_t cur, rlim_t max)
{
	struct rlimit rl;
	if (getrlimit(res, &rl) < 0)
		return 0;
	if (rl.rlim_cur != cur || rl.rlim_max != max) {
		fprintf(stderr, "rlimit %d: %llu/%llu, want %llu/%llu\n", res,
			(unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max,
			(unsigned long long)cur, (unsigned long long)max);
		return 0;
	}
	return 1;
}

static int child_rlimit_defaults(void *arg)
{
	(void)arg;
	struct rlimit fsize0, stack0;
	CHECK(getrlimit(RLIMIT_FSIZE, &fsize0) == 0 && getrlimit(RLIMIT_STACK, &stack0) == 0);
	/* A daemon may inherit a non-zero RTPRIO; raising it needs
	 * CAP_SYS_RESOURCE, which some test hosts lack (then it is already 0). */
	struct rlimit rt = {5, 5};
	CHECK(setrlimit(RLIMIT_RTPRIO, &rt) == 0 || errno == EPERM);
	struct rlimit core = {RLIM_INFINITY, RLIM_INFINITY};
	CHECK(setrlimit(RLIMIT_CORE, &core) == 0);
	struct wr_rlimits r;
	wr_rlimits_default(&r);
	r.core = WR_RLIM_UNSET; /* UNSET core still means 0 */
	struct wr_cerr ce = {0};
	CHECK(wr_rlimits_apply(&r, &ce) == 0);
	CHECK(rl_is(RLIMIT_NOFILE, 1024, 1024));
	CHECK(rl_is(RLIMIT_CORE, 0, 0));
	CHECK(rl_is(RLIMIT_RTPRIO, 0, 0));
	CHECK(rl_is(RLIMIT_FSIZE, fsize0.rlim_cur, fsize0.rlim_max)); /* UNSET: untouched */
	CHECK(rl_is(RLIMIT_STACK, stack0.rlim_cur, stack0.rlim_max));
	/* applying again (lowering nothing) is fine */
	wr_rlimits_default(&r);
	CHECK(wr_rlimits_apply(&r, &ce) == 0);
	CHECK(rl_is(RLIMIT_CORE, 0, 0));
	/* no real-time scheduling for an unprivileged sandbox user */
	CHECK(syscall(SYS_setresuid, 65534, 65534, 65534) == 0);
	struct sched_param sp = {.sched_priority = 1};
	CHECK_ERRNO(sched_setscheduler(0, SCHED_FIFO, &sp), EPERM);
	return 0;
}
static void test_rlimit_apply_defaults(void **state)
{
	(void)state;
	expect_child_ok(child_rlimit_defaults, NULL);
}

static int child_rlimit_values(void *arg)
{
	(void)arg;
	struct wr_rlimits r = {
	    .nofile = 16, .core = 4096, .fsize = 8192, .cpu_secs = 30, .stack = 4 << 20};
	struct wr_cerr ce = {0};
	CHECK(wr_rlimits_apply(&r, &ce) == 0);
	CHECK(rl_is(RLIMIT_NOFILE, 16, 16));
	CHECK(rl_is(RLIMIT_CORE, 4096, 4096));
	CHECK(rl_is(RLIMIT_FSIZE, 8192, 8192));
	CHECK(rl_is(RLIMIT_CPU, 30, 30));
	CHECK(rl_is(RLIMIT_STACK, 4 << 20, 4 << 20));

	/* EMFILE exactly at the limit: fds 0..15 and no more */
	int last = -1;
	for (;;) {
		int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			break;
		last = fd;
	}
	CHECK(errno == EMFILE);
	CHECK(last == 15);

	/* FSIZE: the write stops at the limit */
	close(last);
	signal(SIGXFSZ, SIG_IGN);
	char path[] = "/tmp/wr-rlimit-XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	unlink(path);
	static char buf[12288];
	CHECK(write(fd, buf, sizeof(buf)) == 8192);
	CHECK_ERRNO(write(fd, buf, 1), EFBIG);

	/* the sandbox cannot raise them back: soft above hard is EINVAL, the
	 * hard limit itself needs CAP_SYS_RESOURCE */
	CHECK(syscall(SYS_setresuid, 65534, 65534, 65534) == 0);
	struct rlimit more = {17, 16};
	CHECK_ERRNO(setrlimit(RLIMIT_NOFILE, &more), EINVAL);
	more.rlim_max = 17;
	CHECK_ERRNO(setrlimit(RLIMIT_NOFILE, &more), EPERM);
	/* and wr_rlimits_apply reports the same refusal */
	r.nofile = 32;
	CHECK(wr_rlimits_apply(&r, &ce) == -EPERM);
	CHECK(ce.errnum == EPERM && strstr(ce.msg, "NOFILE") != NULL);
	return 0;
}
static void test_rlimit_apply_values(void **state)
{
	(void)state;
	expect_child_ok(child_rlimit_values, NULL);
}

static void test_rlimit_null(void **state)
{
	(void)state;
	struct wr_cerr ce = {0};
	assert_int_equal(wr_rlimits_apply(NULL, &ce), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parse_and_mask),
	    cmocka_unit_test(test_user_without_caps),
	    cmocka_unit_test(test_root_without_caps),
	    cmocka_unit_test(test_root_with_root_set),
	    cmocka_unit_test(test_user_with_root_set),
	    cmocka_unit_test(test_caps_behaviour),
	    cmocka_unit_test(test_missing_cap_is_an_error),
	    cmocka_unit_test(test_rlimit_defaults),
	    cmocka_unit_test(test_rlimit_apply_defaults),
	    cmocka_unit_test(test_rlimit_apply_values),
	    cmocka_unit_test(test_rlimit_null),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
