/* cgroup tests: run as root on a real cgroup tree. Every test works under
 * its own base "warren-test-<pid>" beneath this process's cgroups and
 * removes it in teardown, also when the test failed. Three roots:
 *   hybrid  what wr_cgroup_root_open picks here (v1 + unified)
 *   v1      the same v1 hierarchies with the unified one hidden: the
 *           freezer-based kill, cpuacct, freezer.state
 *   v2      the v2 backend on the controller-less unified hierarchy:
 *           structure, kill, freeze, events, cpu.stat, clone3 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "common/util.h"
#include "isolate/cgroup.h"
#include "isolate/cgroup_internal.h"

#include "cgroup_fixture.h"

#define MiB (1024ull * 1024ull)

struct fx {
	enum flavour flavour;
	char base[64];
	struct wr_cgroup_root *root;
	pid_t kids[16];
	int nkids;
};

/* ---- helpers ---------------------------------------------------------- */

static uint64_t now_ms(void)
{
	return wr_now_ns() / 1000000ull;
}

static void reap_all(void)
{
	while (waitpid(-1, NULL, WNOHANG | __WALL) > 0)
		;
}

static bool read_at(int dfd, const char *file, char *buf, size_t size)
{
	return dfd >= 0 && wr_cg_read(dfd, file, buf, size) >= 0;
}

static uint64_t u64_at(int dfd, const char *file)
{
	uint64_t v = 0;
	int r = wr_cg_read_u64(dfd, file, &v);
	if (r < 0)
		fail_msg("read %s: %s", file, strerror(-r));
	return v;
}

static bool pid_listed(int dfd, pid_t pid)
{
	char buf[8192];
	if (!read_at(dfd, "cgroup.procs", buf, sizeof(buf)))
		return false;
	for (char *p = buf; *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p))
		if (atoi(p) == pid)
			return true;
	return false;
}

/* Does <base>/<rel> exist in any hierarchy the root has? */
static bool exists_anywhere(struct wr_cgroup_root *root, const char *rel)
{
	for (int c = 0; c <= WR_CG_NCTRL; c++) {
		const char *b = wr_cgroup_root_path(root, (enum wr_cg_ctrl)c);
		if (b == NULL)
			continue;
		char p[4096];
		snprintf(p, sizeof(p), "%s/%s", b, rel);
		if (access(p, F_OK) == 0)
			return true;
	}
	return false;
}

static int count_subdirs(const char *dir)
{
	_cleanup_closedir_ DIR *d = opendir(dir);
	if (d == NULL)
		return -1;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL)
		if (de->d_type == DT_DIR && strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			n++;
	return n;
}

/* Fork a child that waits for go() and then runs fn. */
static pid_t spawn(struct fx *fx, void (*fn)(void *), void *arg, int *go_fd)
{
	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(p[1]);
		char c;
		if (read(p[0], &c, 1) != 1)
			_exit(99);
		close(p[0]);
		fn(arg);
		_exit(0);
	}
	close(p[0]);
	if (fx->nkids < (int)WR_ARRAY_SIZE(fx->kids))
		fx->kids[fx->nkids++] = pid;
	*go_fd = p[1];
	return pid;
}

static void go(int fd)
{
	assert_int_equal(write(fd, "g", 1), 1);
	close(fd);
}

static void attach_or_fail(struct wr_cgroup *cg, pid_t pid)
{
	_cleanup_err_ wr_err e = NULL;
	if (wr_cgroup_attach(cg, pid, false, &e) < 0)
		fail_msg("attach: %s", e->msg);
}

static int wait_empty(struct wr_cgroup *cg, unsigned timeout_ms)
{
	uint64_t t0 = now_ms();
	for (;;) {
		_cleanup_err_ wr_err e = NULL;
		int n = wr_cgroup_nprocs(cg, &e);
		if (n < 0)
			fail_msg("nprocs: %s", e->msg);
		if (n == 0)
			return (int)(now_ms() - t0);
		if (now_ms() - t0 > timeout_ms)
			fail_msg("cgroup still has %d processes after %u ms", n, timeout_ms);
		usleep(1000);
	}
}

static void get_stats(struct wr_cgroup *cg, struct wr_cgroup_stats *st)
{
	_cleanup_err_ wr_err e = NULL;
	if (wr_cgroup_stats(cg, st, &e) < 0)
		fail_msg("stats: %s", e->msg);
}

/* Does cpu usage pass from + by within timeout_ms? (a loaded CI machine
 * gives a busy child far less than a core) */
static bool cpu_grows(struct wr_cgroup *cg, uint64_t from, uint64_t by, unsigned timeout_ms)
{
	uint64_t t0 = now_ms();
	struct wr_cgroup_stats st;
	do {
		usleep(10000);
		get_stats(cg, &st);
		if (st.cpu_usage_ns > from + by)
			return true;
	} while (now_ms() - t0 < timeout_ms);
	return false;
}

static struct wr_cgroup *mk(struct fx *fx, const char *name, const struct wr_cgroup_limits *l)
{
	struct wr_cgroup *cg = NULL;
	_cleanup_err_ wr_err e = NULL;
	if (wr_cgroup_create(fx->root, name, l, &cg, &e) < 0)
		fail_msg("create %s: %s", name, e->msg);
	return cg;
}

static struct wr_cgroup *mk_leaf(struct wr_cgroup *parent, const char *name)
{
	struct wr_cgroup *cg = NULL;
	_cleanup_err_ wr_err e = NULL;
	if (wr_cgroup_create_leaf(parent, name, &cg, &e) < 0)
		fail_msg("create leaf %s: %s", name, e->msg);
	return cg;
}

static void destroy_ok(struct wr_cgroup **cg)
{
	_cleanup_err_ wr_err e = NULL;
	if (wr_cgroup_destroy(cg, &e) < 0)
		fail_msg("destroy: %s", e->msg);
	assert_null(*cg);
}

/* ---- child bodies ------------------------------------------------------ */

static void body_sleep(void *arg)
{
	(void)arg;
	for (int i = 0; i < 600; i++)
		usleep(100000);
}

static void body_busy(void *arg)
{
	(void)arg;
	uint64_t end = now_ms() + 20000;
	volatile uint64_t x = 0;
	while (now_ms() < end)
		for (int i = 0; i < 100000; i++)
			x += (uint64_t)i;
}

/* Report the pids of a small tree through the pipe: a sleeping child and a
 * double-forked setsid grandchild (a daemon that left the session). */
static void body_tree(void *arg)
{
	int wfd = *(int *)arg;
	pid_t c1 = fork();
	if (c1 == 0) {
		body_sleep(NULL);
		_exit(0);
	}
	pid_t mid = fork();
	if (mid == 0) {
		setsid();
		pid_t d = fork();
		if (d == 0) {
			body_sleep(NULL);
			_exit(0);
		}
		if (write(wfd, &d, sizeof(d)) != sizeof(d))
			_exit(1);
		_exit(0); /* d is orphaned */
	}
	waitpid(mid, NULL, 0);
	pid_t me = getpid();
	if (write(wfd, &c1, sizeof(c1)) != sizeof(c1) || write(wfd, &me, sizeof(me)) != sizeof(me))
		_exit(1);
	close(wfd);
	body_sleep(NULL);
}

/* Fork without end; the first process refused a fork says so once. */
struct bomb {
	int wfd;
};
static void body_bomb(void *arg)
{
	struct bomb *b = arg;
	uint64_t end = now_ms() + 15000; /* never outlives a broken test */
	while (now_ms() < end) {
		pid_t p = fork();
		if (p < 0 && errno == EAGAIN && b->wfd >= 0) {
			if (write(b->wfd, "E", 1) != 1)
				_exit(1);
			close(b->wfd);
			b->wfd = -1;
		}
		if (p == 0) {
			if (b->wfd >= 0) {
				close(b->wfd);
				b->wfd = -1;
			}
		}
	}
	_exit(0);
}

static void body_hog(void *arg)
{
	size_t len = *(size_t *)arg;
	char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		_exit(2);
	for (size_t i = 0; i < len; i += 4096)
		m[i] = 1;
	_exit(3); /* the limit did not hold */
}

static void body_hold(void *arg)
{
	size_t len = *(size_t *)arg;
	char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		_exit(2);
	for (size_t i = 0; i < len; i += 4096)
		m[i] = 1;
	body_sleep(NULL);
}

/* ---- fixtures ---------------------------------------------------------- */

static int setup_any(void **state, enum flavour fl)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	if (fx == NULL)
		return -1;
	fx->flavour = fl;
	snprintf(fx->base, sizeof(fx->base), "warren-test-%d", (int)getpid());
	*state = fx;
	_cleanup_err_ wr_err e = NULL;
	if (cgfx_root_open(fx->base, fl, WR_CG_NCTRL, &fx->root, &e) < 0) {
		print_error("%s\n", e->msg);
		return -1;
	}
	return 0;
}

static int setup_hybrid(void **state)
{
	return setup_any(state, HYBRID);
}
static int setup_v1(void **state)
{
	return setup_any(state, V1);
}
static int setup_v2(void **state)
{
	return setup_any(state, V2);
}

static int teardown(void **state)
{
	struct fx *fx = *state;
	int ret = 0;
	for (int i = 0; i < fx->nkids; i++) {
		kill(fx->kids[i], SIGKILL);
		waitpid(fx->kids[i], NULL, __WALL);
	}
	if (fx->root) {
		char paths[WR_CG_NCTRL + 1][4096];
		for (int c = 0; c <= WR_CG_NCTRL; c++) {
			const char *p = wr_cgroup_root_path(fx->root, (enum wr_cg_ctrl)c);
			snprintf(paths[c], sizeof(paths[c]), "%s", p ? p : "");
		}
		_cleanup_err_ wr_err e = NULL;
		if (wr_cgroup_root_remove(&fx->root, &e) < 0) {
			print_error("teardown: %s\n", e->msg);
			ret = -1;
		}
		for (int c = 0; c <= WR_CG_NCTRL; c++) {
			if (paths[c][0] && access(paths[c], F_OK) == 0) {
				print_error("teardown: %s left behind\n", paths[c]);
				ret = -1;
			}
		}
	}
	reap_all();
	free(fx);
	return ret;
}

/* ---- tests ------------------------------------------------------------ */

static void test_root_layout(void **state)
{
	struct fx *fx = *state;
	NEED_ROOT(fx);
	struct wr_cgroup_root *root = fx->root;
	if (fx->flavour == V2) {
		assert_int_equal(wr_cgroup_root_mode(root), WR_CG_V2);
		assert_true(wr_cgroup_root_has_unified(root));
		assert_null(wr_cgroup_root_path(root, WR_CG_MEMORY));
		return;
	}
	assert_int_equal(wr_cgroup_root_mode(root), WR_CG_V1);
	assert_int_equal(wr_cgroup_root_has_unified(root), fx->flavour == HYBRID);
	const char *mem = wr_cgroup_root_path(root, WR_CG_MEMORY);
	assert_non_null(mem);
	assert_int_equal(access(mem, F_OK), 0);
	/* the base sits right below this process's own memory cgroup */
	char own[4096], *self = NULL;
	assert_true(wr_read_file_at(AT_FDCWD, "/proc/self/cgroup", &self, 65536, NULL) > 0);
	char *line = strstr(self, ":memory:");
	assert_non_null(line);
	line += strlen(":memory:");
	line[strcspn(line, "\n")] = 0;
	snprintf(own, sizeof(own), "%s/%s", strcmp(line, "/") ? line : "", fx->base);
	assert_non_null(strstr(mem, own));
	free(self);
	if (fx->flavour == HYBRID) {
		/* freeze, kill and cpu time come from the unified hierarchy */
		assert_non_null(wr_cgroup_root_path(root, WR_CG_NCTRL));
		const char *fz = wr_cgroup_root_path(root, WR_CG_FREEZER);
		if (fz)
			assert_int_not_equal(access(fz, F_OK), 0);
	} else {
		assert_null(wr_cgroup_root_path(root, WR_CG_NCTRL));
		assert_non_null(wr_cgroup_root_path(root, WR_CG_FREEZER));
	}

	/* "../" climbs one level; above the root of a hierarchy it is refused */
	struct wr_cgroup_layout lay;
	_cleanup_err_ wr_err e = NULL;
	int r = wr_cgroup_layout_detect(&lay, 1, &e);
	if (r == 0) {
		/* one level above this process's memory cgroup */
		const char *up = lay.v1_dir[WR_CG_MEMORY];
		assert_non_null(up);
		assert_memory_equal(mem, up, strlen(up));
		assert_true(strlen(up) + strlen(own) > strlen(mem));
		wr_cgroup_layout_free(&lay);
	} else {
		/* some hierarchy has this process in its root cgroup */
		assert_int_equal(wr_err_code(e), EINVAL);
		assert_non_null(strstr(e->msg, "climbs above the root"));
	}
}

static void test_create_limits(void **state)
{
	struct fx *fx = *state;
	NEED_ROOT(fx);
	struct wr_cgroup_limits l;
	wr_cgroup_limits_default(&l);
	l.memory_bytes = 64 * MiB;
	l.pids = 100;
	l.cpu_weight = 50;
	l.cpu_quota_us = 50000;
	l.cpu_period_us = 100000;
	l.io_weight = 100;
	struct wr_cgroup *cg = mk(fx, "lim", &l);
	assert_string_equal(wr_cgroup_name(cg), "lim");
	int mem = wr_cgroup_ctrl_fd(cg, WR_CG_MEMORY);
	int cpu = wr_cgroup_ctrl_fd(cg, WR_CG_CPU);
	int pids = wr_cgroup_ctrl_fd(cg, WR_CG_PIDS);
	char buf[256];
	if (wr_cgroup_root_mode(fx->root) == WR_CG_V1) {
		assert_int_equal(u64_at(mem, "memory.limit_in_bytes"), 64 * MiB);
		bool memsw = faccessat(mem, "memory.memsw.limit_in_bytes", F_OK, 0) == 0;
		if (memsw)
			assert_int_equal(u64_at(mem, "memory.memsw.limit_in_bytes"), 64 * MiB);
		assert_int_equal(u64_at(mem, "memory.swappiness"), 0);
		assert_int_equal(u64_at(pids, "pids.max"), 100);
		assert_int_equal(u64_at(cpu, "cpu.shares"), 512);
		assert_int_equal(u64_at(cpu, "cpu.cfs_quota_us"), 50000);
		assert_int_equal(u64_at(cpu, "cpu.cfs_period_us"), 100000);
		int blk = wr_cgroup_ctrl_fd(cg, WR_CG_BLKIO);
		if (wr_cgroup_root_path(fx->root, WR_CG_BLKIO)) {
			assert_true(blk >= 0); /* asked for io: the blkio dir exists */
			if (read_at(blk, "blkio.weight", buf, sizeof(buf)) ||
			    read_at(blk, "blkio.bfq.weight", buf, sizeof(buf)))
				assert_int_equal(atoi(buf), 10 + 99 * 990 / 9999);
		}

		/* raising past memsw writes memsw first; lowering the limit first */
		wr_cgroup_limits_default(&l);
		l.memory_bytes = 128 * MiB;
		_cleanup_err_ wr_err e = NULL;
		if (wr_cgroup_set_limits(cg, &l, &e) < 0)
			fail_msg("raise: %s", e->msg);
		assert_int_equal(u64_at(mem, "memory.limit_in_bytes"), 128 * MiB);
		if (memsw)
			assert_int_equal(u64_at(mem, "memory.memsw.limit_in_bytes"), 128 * MiB);
		l.memory_bytes = 32 * MiB;
		if (wr_cgroup_set_limits(cg, &l, &e) < 0)
			fail_msg("lower: %s", e->msg);
		assert_int_equal(u64_at(mem, "memory.limit_in_bytes"), 32 * MiB);
		if (memsw)
			assert_int_equal(u64_at(mem, "memory.memsw.limit_in_bytes"), 32 * MiB);
		/* UNSET leaves a value alone; quota UNSET with a period: no max */
		assert_int_equal(u64_at(pids, "pids.max"), 100);
		wr_cgroup_limits_default(&l);
		l.cpu_period_us = 200000;
		if (wr_cgroup_set_limits(cg, &l, &e) < 0)
			fail_msg("cpu max: %s", e->msg);
		assert_true(read_at(cpu, "cpu.cfs_quota_us", buf, sizeof(buf)));
		assert_int_equal(atoi(buf), -1);
		assert_int_equal(u64_at(cpu, "cpu.cfs_period_us"), 200000);
	} else { /* a pure v2 host */
		int fd = wr_cgroup_v2_fd(cg);
		assert_int_equal(u64_at(fd, "memory.max"), 64 * MiB);
		if (faccessat(fd, "memory.swap.max", F_OK, 0) == 0)
			assert_int_equal(u64_at(fd, "memory.swap.max"), 0);
		assert_int_equal(u64_at(fd, "pids.max"), 100);
		assert_int_equal(u64_at(fd, "cpu.weight"), 50);
		assert_true(read_at(fd, "cpu.max", buf, sizeof(buf)));
		assert_string_equal(buf, "50000 100000\n");
	}

	/* a second create of the name fails and leaves the first intact */
	struct wr_cgroup *dup = NULL;
	_cleanup_err_ wr_err e = NULL;
	assert_int_equal(wr_cgroup_create(fx->root, "lim", NULL, &dup, &e), -EEXIST);
	assert_null(dup);
	assert_true(exists_anywhere(fx->root, "lim"));
	wr_err_free(&e);

	/* invalid limits are refused before anything is made */
	wr_cgroup_limits_default(&l);
	l.cpu_weight = 20000;
	assert_int_equal(wr_cgroup_create(fx->root, "bad", &l, &dup, &e), -EINVAL);
	assert_string_equal(e->field, "cpu_weight");
	assert_false(exists_anywhere(fx->root, "bad"));
	wr_err_free(&e);
	assert_int_equal(wr_cgroup_create(fx->root, "a/b", NULL, &dup, &e), -EINVAL);
	wr_err_free(&e);

	destroy_ok(&cg);
	assert_false(exists_anywhere(fx->root, "lim"));
}

/* Limits need controllers: the controller-less unified hierarchy says so. */
static void test_v2_without_controllers(void **state)
{
	struct fx *fx = *state;
	NEED_ROOT(fx);
	if (fx->root->v2_ctrls & WR_CG2_MEMORY)
		skip();
	struct wr_cgroup_limits l;
	wr_cgroup_limits_default(&l);
	l.memory_bytes = 64 * MiB;
	struct wr_cgroup *cg = NULL;
	_cleanup_err_ wr_err e = NULL;
	assert_int_equal(wr_cgroup_create(fx->root, "nomem", &l, &cg, &e), -EOPNOTSUPP);
	assert_non_null(strstr(e->msg, "memory controller is not enabled"));
	assert_false(exists_anywhere(fx->root, "nomem"));
	/* io is best effort: never refused */
	wr_cgroup_limits_default(&l);
	l.io_weight = 500;
	cg = mk(fx, "io", &l);
	destroy_ok(&cg);
}

static void test_error_names_file_and_value(void **state)
{
	struct fx *fx = *state;
	NEED_ROOT(fx);
	if (wr_cgroup_root_mode(fx->root) != WR_CG_V1)
		skip();
	/* v1 refuses a memory limit below what it cannot reclaim (no swap) */
	struct wr_cgroup *cg = mk(fx, "busy", NULL);
	struct wr_cgroup *leaf = mk_leaf(cg, "init");
	size_t len = 16 * MiB;
	int gofd;
	pid_t pid = spawn(fx, body_hold, &len, &gofd);
	attach_or_fail(leaf, pid);
	go(gofd);
	struct wr_cgroup_stats st;
	uint64_t t0 = now_ms();
	do {
		usleep(2000);
		get_stats(cg, &st);
	} while (st.memory_current < len && now_ms() - t0 < 5000);
	struct wr_cgroup_limits l;
	wr_cgroup_limits_default(&l);
	l.memory_bytes = 4 * MiB;
	_cleanup_err_ wr_err e = NULL;
	int r = wr_cgroup_set_limits(cg, &l, &e);
	if (r == 0) {
		print_message("the kernel reclaimed 16 MiB of anon memory: swap is on\n");
	} else {
		assert_int_equal(r, -EBUSY);
		print_message("%s\n", e->msg);
		assert_non_null(strstr(e->msg,
				       "cgroup memory: write memory.limit_in_bytes=4194304: "
				       "Device or resource busy"));
	}
	wr_cgroup_close(leaf);
	destroy_ok(&cg);
}

static void test_leaf_attach(void **state)
{
	struct fx *fx = *state;
	NEED_ROOT(fx);
	struct wr_cgroup *cg = mk(fx, "att", NULL);
	struct wr_cgroup *leaf = mk_leaf(cg, "init");
	assert_string_equal(wr_cgroup_name(leaf), "init");
	int gofd;
	pid_t pid = spawn(fx, body_sleep, NULL, &gofd);
	attach_or_fail(leaf, pid);
	int n = 0;
	for (int c = 0; c < WR_CG_NCTRL; c++) {
		int fd = wr_cgroup_ctrl_fd(leaf, (enum wr_cg_ctrl)c);
		if (fd < 0)
			continue;
		assert_true(pid_listed(fd, pid));
		assert_false(pid_listed(wr_cgroup_ctrl_fd(cg, (enum wr_cg_ctrl)c), pid));
		n++;
	}
	if (wr_cgroup_v2_fd(leaf) >= 0) {
		assert_true(pid_listed(wr_cgroup_v2_fd(leaf), pid));
		n++;
	}
	assert_true(n >= (fx->flavour == V2 ? 1 : 3));
	/* /proc agrees */
	char path[64], *pc = NULL;
	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	assert_true(wr_read_file_at(AT_FDCWD, path, &pc, 65536, NULL) > 0);
	char want[128];
	snprintf(want, sizeof(want), "/%s/att/init\n", fx->base);
	assert_non_null(strstr(pc, want));
	free(pc);

	_cleanup_err_ wr_err e = NULL;
	assert_int_equal(wr_cgroup_nprocs(cg, &e), 1);
	assert_int_equal(wr_cgroup_nprocs(leaf, &e), 1);
	go(gofd);
	assert_int_equal(wr_cgroup_kill(cg, &e), 0);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	wait_empty(cg, 2000);
	wr_cgroup_close(leaf);
	destroy_ok(&cg);
}

static void test_clone_into_cgroup(void **state)
{
	struct fx *fx = *state;
	NEED_ROOT(fx);
	if (!wr_cgroup_root_has_unified(fx->root))
		skip();
	struct wr_cgroup *cg = mk(fx, "clone", NULL);
	struct wr_cgroup *leaf = mk_leaf(cg, "cmd-1");
	assert_true(wr_cgroup_v2_fd(leaf) >= 0);
	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	struct wr_clone_args a = {
	    .flags = CLONE_INTO_CGROUP,
	    .exit_signal = SIGCHLD,
	    .cgroup = (uint64_t)wr_cgroup_v2_fd(leaf),
	};
	pid_t pid = (pid_t)wr_clone3(&a);
	if (pid == 0) {
		char c;
		close(p[1]);
		(void)!read(p[0], &c, 1); /* until the parent closes */
		_exit(0);
	}
	assert_true(pid > 0);
	fx->kids[fx->nkids++] = pid;
	close(p[0]);
	/* born in the unified leaf: no window in the parent's cgroup */
	assert_true(pid_listed(wr_cgroup_v2_fd(leaf), pid));
	int mem = wr_cgroup_ctrl_fd(leaf, WR_CG_MEMORY);
	if (mem >= 0) {
		assert_false(pid_listed(mem, pid));
		_cleanup_err_ wr_err e = NULL;
		if (wr_cgroup_attach(leaf, pid, true, &e) < 0)
			fail_msg("attach skip_v2: %s", e->msg);
		assert_true(pid_listed(mem, pid));
	}
	close(p[1]);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	wr_cgroup_close(leaf);
	destroy_ok(&cg);
}

static void test_kill_tree(void **state)
{
	struct fx *fx = *state;
	NEED_ROOT(fx);
	struct wr_cgroup *cg = mk(fx, "tree", NULL);
	struct wr_cgroup *leaf = mk_leaf(cg, "init");
	int rp[2];
	assert_int_equal(pipe2(rp, O_CLOEXEC), 0);
	int gofd;
	pid_t pid = spawn(fx, body_tree, &rp[1], &gofd);
	close(rp[1]);
	attach_or_fail(leaf, pid);
	go(gofd);
	pid_t pids[3];
	for (int i = 0; i < 3; i++)
		assert_int_equal(read(rp[0], &pids[i], sizeof(pids[i])), sizeof(pids[i]));
	close(rp[0]);
	_cleanup_err_ wr_err e = NULL;
	assert_int_equal(wr_cgroup_nprocs(cg, &e), 3);
	for (int i = 0; i < 3; i++)
		assert_int_equal(kill(pids[i], 0), 0);
	if (wr_cgroup_kill(cg, &e) < 0)
		fail_msg("kill: %s", e->msg);
	assert_int_equal(waitpid(pid, NULL, 0), pid);
	int ms = wait_empty(cg, 2000);
	print_message("tree of 3 gone in %d ms\n", ms);
	/* orphans come to us (subreaper): reap, then nothing is left */
	uint64_t t0 = now_ms();
	for (int i = 0; i < 3; i++) {
		while (kill(pids[i], 0) == 0 && now_ms() - t0 < 2000) {
			reap_all();
			usleep(1000);
		}
		assert_int_equal(kill(pids[i], 0), -1);
		assert_int_equal(errno, ESRCH);
	}
	wr_cgroup_close(leaf);
	destroy_ok(&cg);
}

/* A thread reports its tid and sleeps; the main thread sleeps outside. */
static void *thread_body(void *arg)
{
	int wfd = *(int *)arg;
	pid_t tid = gettid();
	if (write(wfd, &tid, sizeof(tid)) != sizeof(tid))
		_exit(1);
	body_sleep(NULL);
	return NULL;
}

static void body_thread(void *arg)
{
	pthread_t t;
	if (pthread_create(&t, NULL, thread_body, arg) != 0)
		_exit(1);
	body_sleep(NULL);
}

/* v1 moves single threads: a process whose leader is outside the cgroup
 * but with a thread inside belongs to it for kill, like any other. */
static void test_v1_stray_thread(void **state)
{
	struct fx *fx = *state;
	NEED_ROOT(fx);
	if (wr_cgroup_root_has_unified(fx->root))
		skip(); /* threads move together on unified */
	struct wr_cgroup *cg = mk(fx, "thr", NULL);
	struct wr_cgroup *leaf = mk_leaf(cg, "init");
	int tp[2];
	assert_int_equal(pipe2(tp, O_CLOEXEC), 0);
	int gofd;
	pid_t pid = spawn(fx, body_thread, &tp[1], &gofd);
	close(tp[1]);
	go(gofd);
	pid_t tid;
	assert_int_equal(read(tp[0], &tid, sizeof(tid)), sizeof(tid));
	close(tp[0]);
	char v[24];
	snprintf(v, sizeof(v), "%d", (int)tid);
	for (int c = 0; c < WR_CG_NCTRL; c++) {
		int fd = wr_cgroup_ctrl_fd(leaf, (enum wr_cg_ctrl)c);
		if (fd >= 0 && (c == 0 || fd != wr_cgroup_ctrl_fd(leaf, (enum wr_cg_ctrl)(c - 1))))
			assert_int_equal(wr_cg_try_write(fd, "tasks", v), 0);
	}
	_cleanup_err_ wr_err e = NULL;
	assert_int_equal(wr_cgroup_nprocs(cg, &e), 1); /* v1 lists its tgid */
	assert_false(pid_listed(wr_cgroup_ctrl_fd(leaf, WR_CG_MEMORY), tid));
	if (wr_cgroup_kill(cg, &e) < 0)
		fail_msg("kill: %s", e->msg);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	wr_cgroup_close(leaf);
	destroy_ok(&cg);
}

static void test_fork_bomb(void **state)
{
	struct fx *fx = *state;
	NEED_ROOT(fx);
	if (fx->flavour == V2)
		skip(); /* no pids controller on the unified hierarchy here */
	struct wr_cgroup_limits l;
	wr_cgroup_limits_default(&l);
	l.pids = 64;
	struct wr_cgroup *cg = mk(fx, "bomb", &l);
	struct wr_cgroup *leaf = mk_leaf(cg, "init");
	int ep[2];
	assert_int_equal(pipe2(ep, O_CLOEXEC), 0);
	struct bomb b = {.wfd = ep[1]};
	int gofd;
	pid_t pid = spawn(fx, body_bomb, &b, &gofd);
	close(ep[1]);
	attach_or_fail(leaf, pid);
	go(gofd);
	char c;
	assert_int_equal(read(ep[0], &c, 1), 1); /* a fork failed with EAGAIN */
	close(ep[0]);
	struct wr_cgroup_stats st;
	get_stats(cg, &st);
	assert_true(st.pids_max_hits > 0);
	assert_true(st.pids_current <= 64);
	print_message("bomb: %llu pids, %llu refused forks\n", (unsigned long long)st.pids_current,
		      (unsigned long long)st.pids_max_hits);
	usleep(100000); /* let it rage */
	uint64_t t0 = wr_now_ns();
	_cleanup_err_ wr_err e = NULL;
	if (wr_cgroup_kill(cg, &e) < 0)
		fail_msg("kill: %s", e->msg);
	int ms = wait_empty(cg, 2000);
	print_message("kill during a fork bomb: empty after %.1f ms\n",
		      (double)(wr_now_ns() - t0) / 1e6);
	assert_true(ms < 1000);
	/* pids stay charged to zombies: the orphans are ours (subreaper) */
	waitpid(pid, NULL, 0);
	t0 = wr_now_ns();
	do {
		reap_all();
		get_stats(cg, &st);
	} while (st.pids_current > 0 && wr_now_ns() - t0 < 2000000000ull);
	assert_int_equal(st.pids_current, 0);
	wr_cgroup_close(leaf);
	destroy_ok(&cg);
}

/* A cgroup limited to 32 MiB of memory (the OOM tests'). */
static struct wr_cgroup *mk_32m(struct fx *fx, const char *name)
{
	struct wr_cgroup_limits l;
	wr_cgroup_limits_default(&l);
	l.memory_bytes = 32 * MiB;
	return mk(fx, name, &l);
}

static void test_oom(void **state)
{
	struct fx *fx = *state;
	NEED_ROOT(fx);
	if (fx->flavour == V2 && !(fx->root->v2_ctrls & WR_CG2_MEMORY))
		skip();
	struct wr_cgroup *cg = mk_32m(fx, "oom");
	struct wr_cgroup *leaf = mk_leaf(cg, "cmd-1");
	size_t len = 64 * MiB;
	int gofd;
	pid_t pid = spawn(fx, body_hog, &len, &gofd);
	attach_or_fail(leaf, pid);
	go(gofd);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGKILL);
	struct wr_cgroup_stats st;
	get_stats(cg, &st);
	assert_int_equal(st.oom_kills, 1);
	assert_true(st.memory_peak > 16 * MiB);
	assert_true(st.memory_peak <= 32 * MiB);
	struct wr_cgroup_stats ls;
	get_stats(leaf, &ls); /* the command's own cgroup knows too */
	assert_int_equal(ls.oom_kills, 1);
	wr_cgroup_close(leaf);
	destroy_ok(&cg);
}

/* What keep() was told, and what it answers. */
struct keeper {
	int calls;
	int answer;	     /* 1 recorded now, 0 recorded before, < 0 failure */
	const char *old_key; /* answered 0: "recorded before" */
	char parent[64], key[200];
	struct wr_cgroup_stats last;
};

static int keep_cb(void *ctx, const char *parent, const char *key, const struct wr_cgroup_stats *c,
		   wr_err *err)
{
	struct keeper *k = ctx;
	k->calls++;
	snprintf(k->parent, sizeof(k->parent), "%s", parent);
	snprintf(k->key, sizeof(k->key), "%s", key);
	k->last = *c;
	if (k->answer < 0)
		return wr_err_set(err, EIO, "keep: refused");
	return k->old_key && strcmp(key, k->old_key) == 0 ? 0 : k->answer;
}

/* A command's leaf, OOM-killed in: its process gone, the leaf left. */
static struct wr_cgroup *oom_leaf(struct fx *fx, struct wr_cgroup *cg, const char *name)
{
	struct wr_cgroup *leaf = NULL;
	_cleanup_err_ wr_err e = NULL;
	if (wr_cgroup_create_cmd_leaf(cg, name, &leaf, &e) < 0)
		fail_msg("create leaf %s: %s", name, e->msg);
	size_t len = 64 * MiB;
	int gofd, status;
	pid_t pid = spawn(fx, body_hog, &len, &gofd);
	attach_or_fail(leaf, pid);
	go(gofd);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	wait_empty(leaf, 2000);
	return leaf;
}

/* The OOM kills of a removed leaf stay the sandbox's: recorded (keep)
 * before the rmdir, then added to what the parent reports; a record that
 * fails keeps the leaf; adoption counts a leaf a crash left after its
 * record once (kept has it) and retires the leaves left without one. */
static void test_retire_leaf(void **state)
{
	struct fx *fx = *state;
	NEED_ROOT(fx);
	if (fx->flavour == V2 && !(fx->root->v2_ctrls & WR_CG2_MEMORY))
		skip();
	struct wr_cgroup *cg = mk_32m(fx, "ret");
	struct wr_cgroup_stats st;
	struct keeper k = {.answer = -1};
	_cleanup_err_ wr_err e = NULL;

	/* a plain destroy loses the count: why retiring exists */
	struct wr_cgroup *leaf = oom_leaf(fx, cg, "cmd-0");
	destroy_ok(&leaf);
	get_stats(cg, &st);
	assert_int_equal(st.oom_kills, 0);

	leaf = oom_leaf(fx, cg, "cmd-1");
	assert_true(wr_cgroup_retire_leaf(cg, &leaf, keep_cb, &k, &e) < 0);
	assert_non_null(leaf); /* not recorded: the leaf stays, counted there */
	assert_true(exists_anywhere(fx->root, "ret/cmd-1"));
	assert_int_equal(k.calls, 1);
	assert_int_equal(k.last.oom_kills, 1);
	assert_string_equal(k.parent, "ret");
	assert_memory_equal(k.key, "cmd-1@", 6);
	get_stats(cg, &st);
	assert_int_equal(st.oom_kills, 1);
	wr_err_free(&e);

	k.answer = 1;
	assert_int_equal(wr_cgroup_retire_leaf(cg, &leaf, keep_cb, &k, &e), 0);
	assert_null(leaf);
	assert_false(exists_anywhere(fx->root, "ret/cmd-1"));
	assert_int_equal(k.calls, 2);
	get_stats(cg, &st);
	assert_int_equal(st.oom_kills, 1);

	/* a leaf without a kill is not recorded */
	leaf = mk_leaf(cg, "cmd-2");
	assert_int_equal(wr_cgroup_retire_leaf(cg, &leaf, keep_cb, &k, &e), 0);
	assert_int_equal(k.calls, 2);

	/* A crash after cmd-3's record, before its rmdir; cmd-4 ended while
	 * no process ran; cmd-5 still runs. A new process adopts with the
	 * sums of the records (cmd-1, cmd-3). */
	leaf = oom_leaf(fx, cg, "cmd-3");
	uint64_t id = 0;
	struct wr_cgroup_stats c3;
	assert_int_equal(wr_cg_leaf_counts(leaf, &c3, &id), 0);
	char key3[200];
	snprintf(key3, sizeof(key3), "cmd-3@%llu", (unsigned long long)id);
	wr_cgroup_close(leaf);
	leaf = oom_leaf(fx, cg, "cmd-4");
	wr_cgroup_close(leaf);
	struct wr_cgroup *busy = NULL;
	if (wr_cgroup_create_cmd_leaf(cg, "cmd-5", &busy, &e) < 0)
		fail_msg("create leaf: %s", e->msg);
	int gofd;
	pid_t pid = spawn(fx, body_busy, NULL, &gofd);
	attach_or_fail(busy, pid);
	go(gofd);
	wr_cgroup_close(cg);
	if (wr_cgroup_open(fx->root, "ret", &cg, &e) < 0)
		fail_msg("open: %s", e->msg);
	get_stats(cg, &st); /* the new handle: the live leaves only */
	assert_int_equal(st.oom_kills, 2);
	struct wr_cgroup_stats kept = {.oom_kills = 2};
	k.old_key = key3;
	k.calls = 0;
	assert_int_equal(wr_cgroup_adopt_retired(cg, &kept, "init", keep_cb, &k, &e), 2);
	assert_int_equal(k.calls, 2); /* cmd-3 (already) and cmd-4 (now) */
	assert_false(exists_anywhere(fx->root, "ret/cmd-3"));
	assert_false(exists_anywhere(fx->root, "ret/cmd-4"));
	assert_true(exists_anywhere(fx->root, "ret/cmd-5"));
	get_stats(cg, &st);
	assert_int_equal(st.oom_kills, 3); /* cmd-1, cmd-3, cmd-4: each once */
	wr_cgroup_close(busy);
	destroy_ok(&cg);
}

/* Write 4 MiB to a tmpfs file (charged to our memory cgroup) and exit. */
static void body_shm(void *arg)
{
	int fd = open(arg, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	static char buf[1 << 16];
	memset(buf, 'x', sizeof(buf));
	for (int i = 0; fd >= 0 && i < 64; i++)
		if (write(fd, buf, sizeof(buf)) != (ssize_t)sizeof(buf))
			_exit(2);
	_exit(fd >= 0 ? 0 : 2);
}

/* Run fn in leaf to its end; its wait status. */
static int run_to_end(struct fx *fx, struct wr_cgroup *leaf, void (*fn)(void *), void *arg)
{
	int gofd, status;
	pid_t pid = spawn(fx, fn, arg, &gofd);
	attach_or_fail(leaf, pid);
	go(gofd);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	wait_empty(leaf, 2000);
	return status;
}

/* Can this kernel reset a v2 peak (memory.peak writable, Linux 6.12)?
 * Recycling needs it where memory is on v2. */
static bool v2_peak_resettable(struct wr_cgroup *cg)
{
	int fd = openat(cg->v2_fd, "memory.peak", O_RDWR | O_CLOEXEC);
	bool ok = fd >= 0 && write(fd, "reset", 5) == 5;
	if (fd >= 0)
		close(fd);
	return ok;
}

static int recycle(struct wr_cgroup *leaf, uint64_t max_left)
{
	_cleanup_err_ wr_err e = NULL;
	int r = wr_cgroup_leaf_recycle(leaf, max_left, &e);
	if (r < 0)
		fail_msg("recycle: %s", e->msg);
	return r;
}

static void call_stats(struct wr_cgroup *leaf, struct wr_cgroup_stats *st)
{
	_cleanup_err_ wr_err e = NULL;
	if (wr_cgroup_stats_call(leaf, true, st, &e) < 0)
		fail_msg("stats_call: %s", e->msg);
}

/* A leaf recycled for the next call of its owner (the function tier):
 * refused while a process is in it or while more than max_left is still
 * charged to it; once recycled, its CPU time, OOM kills and peak count
 * from zero, as in a new leaf. */
static void test_leaf_recycle(void **state)
{
	struct fx *fx = *state;
	NEED_ROOT(fx);
	bool mem = fx->flavour != V2 || (fx->root->v2_ctrls & WR_CG2_MEMORY);
	struct wr_cgroup *cg = mk(fx, "rec", NULL);
	struct wr_cgroup *leaf = mk_leaf(cg, "c-1");
	if (fx->flavour == V2 && mem && !v2_peak_resettable(leaf)) {
		wr_cgroup_close(leaf);
		destroy_ok(&cg);
		print_message("memory.peak cannot be reset here (Linux < 6.12)\n");
		skip();
	}
	_cleanup_err_ wr_err e = NULL;
	assert_true(wr_cgroup_leaf_recycle(cg, 0, &e) < 0); /* a leaf only */
	assert_int_equal(wr_err_code(e), EINVAL);

	/* a process in it: not now */
	int gofd;
	pid_t pid = spawn(fx, body_busy, NULL, &gofd);
	attach_or_fail(leaf, pid);
	go(gofd);
	assert_true(cpu_grows(leaf, 0, 50000000ull, 5000));
	assert_int_equal(recycle(leaf, WR_CG_UNSET), 0);
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, NULL, 0), pid);
	wait_empty(leaf, 2000);
	struct wr_cgroup_stats st;
	call_stats(leaf, &st);
	assert_true(st.cpu_usage_ns > 50000000ull);
	assert_int_equal(recycle(leaf, WR_CG_UNSET), 1);
	call_stats(leaf, &st);
	assert_true(st.cpu_usage_ns < 5000000ull);
	uint64_t cpu_ns = 0;
	assert_int_equal(wr_cgroup_cpu_ns(leaf, &cpu_ns, NULL), 0);
	assert_true(cpu_ns < 5000000ull);
	/* and counts again from there */
	pid = spawn(fx, body_busy, NULL, &gofd);
	attach_or_fail(leaf, pid);
	go(gofd);
	assert_true(cpu_grows(leaf, 0, 50000000ull, 5000));
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, NULL, 0), pid);
	wait_empty(leaf, 2000);
	assert_int_equal(recycle(leaf, WR_CG_UNSET), 1);

	if (mem) {
		/* an OOM kill and a peak of ~32 MiB, then none of either */
		struct wr_cgroup_limits l;
		wr_cgroup_limits_default(&l);
		l.memory_bytes = 32 * MiB;
		if (wr_cgroup_set_limits(leaf, &l, &e) < 0)
			fail_msg("limits: %s", e->msg);
		/* twice: the bases move with each recycle, the peak rises again */
		for (int round = 0; round < 2; round++) {
			size_t len = 64 * MiB;
			int status = run_to_end(fx, leaf, body_hog, &len);
			assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
			call_stats(leaf, &st);
			assert_int_equal(st.oom_kills, 1);
			assert_true(st.memory_peak > 16 * MiB);
			assert_int_equal(recycle(leaf, MiB), 1);
			call_stats(leaf, &st);
			assert_int_equal(st.oom_kills, 0);
			assert_true(st.memory_peak <= 2 * MiB);
		}

		/* 4 MiB of tmpfs still charged: refused until it is gone */
		char path[64];
		snprintf(path, sizeof(path), "/dev/shm/wr-test-recycle-%d", (int)getpid());
		int status = run_to_end(fx, leaf, body_shm, path);
		int busy = recycle(leaf, MiB);
		int gone = unlink(path);
		assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		assert_int_equal(busy, 0);
		assert_int_equal(gone, 0);
		assert_int_equal(recycle(leaf, MiB), 1);
	}
	wr_cgroup_close(leaf);
	destroy_ok(&cg);
}

static void test_freeze(void **state)
{
	struct fx *fx = *state;
	NEED_ROOT(fx);
	struct wr_cgroup *cg = mk(fx, "frz", NULL);
	struct wr_cgroup *leaf = mk_leaf(cg, "init");
	int gofd;
	pid_t pid = spawn(fx, body_busy, NULL, &gofd);
	attach_or_fail(leaf, pid);
	go(gofd);
	usleep(50000);
	_cleanup_err_ wr_err e = NULL;
	if (wr_cgroup_freeze(cg, true, &e) < 0)
		fail_msg("freeze: %s", e->msg);
	struct wr_cgroup_stats a, b;
	get_stats(cg, &a);
	usleep(200000);
	get_stats(cg, &b);
	print_message("frozen: cpu %llu -> %llu ns\n", (unsigned long long)a.cpu_usage_ns,
		      (unsigned long long)b.cpu_usage_ns);
	assert_true(b.cpu_usage_ns - a.cpu_usage_ns < 5000000); /* < 5 ms in 200 ms */
	if (wr_cgroup_freeze(cg, false, &e) < 0)
		fail_msg("thaw: %s", e->msg);
	assert_true(cpu_grows(cg, b.cpu_usage_ns, 50000000ull, 5000)); /* runs again */
	/* a frozen cgroup can still be killed */
	if (wr_cgroup_freeze(cg, true, &e) < 0)
		fail_msg("freeze: %s", e->msg);
	wr_cgroup_close(leaf);
	destroy_ok(&cg);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
}

static void test_stats_cpu(void **state)
{
	struct fx *fx = *state;
	NEED_ROOT(fx);
	struct wr_cgroup *cg = mk(fx, "cpu", NULL);
	struct wr_cgroup *leaf = mk_leaf(cg, "init");
	struct wr_cgroup_stats a, b;
	get_stats(cg, &a);
	assert_int_equal(a.cpu_usage_ns, 0);
	int gofd;
	pid_t pid = spawn(fx, body_busy, NULL, &gofd);
	attach_or_fail(leaf, pid);
	go(gofd);
	uint64_t t0 = now_ms();
	assert_true(cpu_grows(cg, 0, 100000000ull, 5000));
	get_stats(cg, &b);
	print_message("busy: cpu %.1f ms after %llu ms, memory %llu, pids %llu\n",
		      (double)b.cpu_usage_ns / 1e6, (unsigned long long)(now_ms() - t0),
		      (unsigned long long)b.memory_current, (unsigned long long)b.pids_current);
	if (fx->flavour != V2) {
		assert_int_equal(b.pids_current, 1);
		assert_true(b.memory_current > 0);
	}
	assert_true(cpu_grows(leaf, b.cpu_usage_ns, 1000000ull, 5000)); /* the leaf's own */
	wr_cgroup_close(leaf);
	destroy_ok(&cg);
	waitpid(pid, NULL, 0);
}

static void test_destroy_removes_everything(void **state)
{
	struct fx *fx = *state;
	NEED_ROOT(fx);
	struct wr_cgroup_limits l;
	wr_cgroup_limits_default(&l);
	l.io_weight = 200; /* brings the blkio hierarchy in, where present */
	struct wr_cgroup *cg = mk(fx, "gone", &l);
	struct wr_cgroup *l1 = mk_leaf(cg, "init");
	struct wr_cgroup *l2 = mk_leaf(cg, "cmd-1");
	int gofd;
	pid_t pid = spawn(fx, body_sleep, NULL, &gofd);
	attach_or_fail(l2, pid);
	go(gofd);
	assert_true(exists_anywhere(fx->root, "gone/cmd-1"));
	/* destroying a leaf takes only the leaf */
	destroy_ok(&l1);
	assert_false(exists_anywhere(fx->root, "gone/init"));
	assert_true(exists_anywhere(fx->root, "gone"));
	uint64_t t0 = wr_now_ns();
	wr_cgroup_close(l2);
	destroy_ok(&cg);
	print_message("destroy with a live process: %.1f ms\n", (double)(wr_now_ns() - t0) / 1e6);
	assert_false(exists_anywhere(fx->root, "gone"));
	for (int c = 0; c <= WR_CG_NCTRL; c++) {
		const char *b = wr_cgroup_root_path(fx->root, (enum wr_cg_ctrl)c);
		if (b)
			assert_int_equal(count_subdirs(b), 0);
	}
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st));
	/* destroy of NULL is a no-op */
	struct wr_cgroup *none = NULL;
	destroy_ok(&none);
}

/* Adopt a cgroup made by an earlier "run" (leaves unknown to the handle). */
static void test_open_adopt(void **state)
{
	struct fx *fx = *state;
	NEED_ROOT(fx);
	struct wr_cgroup *cg = mk(fx, "adopt", NULL);
	struct wr_cgroup *leaf = mk_leaf(cg, "init");
	struct wr_cgroup *deep = mk_leaf(leaf, "sub");
	int gofd;
	pid_t pid = spawn(fx, body_sleep, NULL, &gofd);
	attach_or_fail(deep, pid);
	go(gofd);
	wr_cgroup_close(deep);
	wr_cgroup_close(leaf);
	wr_cgroup_close(cg);
	struct wr_cgroup *again = NULL;
	_cleanup_err_ wr_err e = NULL;
	assert_int_equal(wr_cgroup_open(fx->root, "missing", &again, &e), -ENOENT);
	wr_err_free(&e);
	if (wr_cgroup_open(fx->root, "adopt", &again, &e) < 0)
		fail_msg("open: %s", e->msg);
	assert_int_equal(wr_cgroup_nprocs(again, &e), 1);
	destroy_ok(&again);
	assert_false(exists_anywhere(fx->root, "adopt"));
	waitpid(pid, NULL, 0);
}

static bool keep_b(const char *name, void *ctx)
{
	(*(int *)ctx)++;
	return strcmp(name, "b") == 0;
}

static void test_sweep(void **state)
{
	struct fx *fx = *state;
	NEED_ROOT(fx);
	const char *names[] = {"a", "b", "c"};
	pid_t pids[3];
	for (int i = 0; i < 3; i++) {
		struct wr_cgroup *cg = mk(fx, names[i], NULL);
		struct wr_cgroup *leaf = mk_leaf(cg, "init");
		int gofd;
		pids[i] = spawn(fx, body_sleep, NULL, &gofd);
		attach_or_fail(leaf, pids[i]);
		go(gofd);
		wr_cgroup_close(leaf);
		wr_cgroup_close(cg); /* the "daemon" died */
	}
	/* a half-made leftover: present in one hierarchy only */
	const char *one = wr_cgroup_root_path(fx->root, WR_CG_PIDS);
	if (one == NULL)
		one = wr_cgroup_root_path(fx->root, WR_CG_NCTRL);
	char p[4096];
	snprintf(p, sizeof(p), "%s/half", one);
	assert_int_equal(mkdir(p, 0755), 0);
	int asked = 0;
	_cleanup_err_ wr_err e = NULL;
	if (wr_cgroup_sweep(fx->root, keep_b, &asked, &e) < 0)
		fail_msg("sweep: %s", e->msg);
	assert_int_equal(asked, 4);
	assert_false(exists_anywhere(fx->root, "a"));
	assert_false(exists_anywhere(fx->root, "c"));
	assert_false(exists_anywhere(fx->root, "half"));
	assert_true(exists_anywhere(fx->root, "b"));
	assert_int_equal(waitpid(pids[0], NULL, 0), pids[0]);
	assert_int_equal(waitpid(pids[2], NULL, 0), pids[2]);
	assert_int_equal(kill(pids[1], 0), 0);
	if (wr_cgroup_sweep(fx->root, NULL, NULL, &e) < 0)
		fail_msg("sweep all: %s", e->msg);
	assert_false(exists_anywhere(fx->root, "b"));
	assert_int_equal(waitpid(pids[1], NULL, 0), pids[1]);
}

static void test_cycles(void **state)
{
	struct fx *fx = *state;
	NEED_ROOT(fx);
	struct wr_cgroup_limits l;
	wr_cgroup_limits_default(&l);
	if (fx->flavour != V2) {
		l.memory_bytes = 512 * MiB;
		l.pids = 512;
		l.cpu_weight = 100;
	}
	const int N = 200;
	uint64_t t_create = 0, t_leaf = 0, t_destroy = 0;
	for (int i = 0; i < N; i++) {
		char name[32];
		snprintf(name, sizeof(name), "cyc-%d", i);
		uint64_t t0 = wr_now_ns();
		struct wr_cgroup *cg = mk(fx, name, &l);
		uint64_t t1 = wr_now_ns();
		struct wr_cgroup *leaf = mk_leaf(cg, "init");
		uint64_t t2 = wr_now_ns();
		wr_cgroup_close(leaf);
		destroy_ok(&cg);
		uint64_t t3 = wr_now_ns();
		t_create += t1 - t0;
		t_leaf += t2 - t1;
		t_destroy += t3 - t2;
	}
	print_message("%d cycles: create %.0f us, leaf %.0f us, destroy %.0f us, total %.0f us\n",
		      N, (double)t_create / N / 1e3, (double)t_leaf / N / 1e3,
		      (double)t_destroy / N / 1e3,
		      (double)(t_create + t_leaf + t_destroy) / N / 1e3);
	for (int c = 0; c <= WR_CG_NCTRL; c++) {
		const char *b = wr_cgroup_root_path(fx->root, (enum wr_cg_ctrl)c);
		if (b)
			assert_int_equal(count_subdirs(b), 0);
	}
}

/* cpu and cpuacct co-mounted (the common layout elsewhere): one hierarchy,
 * one directory per cgroup, labelled "cpu,cpuacct". Built from the real
 * layout with cpuacct pointed at the cpu mount. */
static int setup_comount(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	if (fx == NULL)
		return -1;
	fx->flavour = V1;
	snprintf(fx->base, sizeof(fx->base), "warren-test-%d", (int)getpid());
	*state = fx;
	_cleanup_err_ wr_err e = NULL;
	struct wr_cgroup_layout lay;
	if (wr_cgroup_layout_detect(&lay, 0, &e) < 0)
		return -1;
	if (lay.mode != WR_CG_V1 || lay.v1_dir[WR_CG_CPU] == NULL) {
		wr_cgroup_layout_free(&lay);
		return 0;
	}
	free(lay.v2_dir);
	lay.v2_dir = NULL;
	free(lay.v1_dir[WR_CG_CPUACCT]);
	lay.v1_dir[WR_CG_CPUACCT] = strdup(lay.v1_dir[WR_CG_CPU]);
	int r = wr_cgroup_root_open_at(&lay, fx->base, &fx->root, &e);
	wr_cgroup_layout_free(&lay);
	if (r < 0)
		print_error("root open: %s\n", e->msg);
	return r < 0 ? -1 : 0;
}

static void test_comount(void **state)
{
	struct fx *fx = *state;
	NEED_ROOT(fx);
	const char *cpu = wr_cgroup_root_path(fx->root, WR_CG_CPU);
	const char *acct = wr_cgroup_root_path(fx->root, WR_CG_CPUACCT);
	assert_non_null(cpu);
	assert_ptr_equal(cpu, acct);
	int h = fx->root->ctrl_hier[WR_CG_CPU];
	assert_string_equal(fx->root->hier[h].label, "cpu,cpuacct");
	struct wr_cgroup_limits l;
	wr_cgroup_limits_default(&l);
	l.cpu_weight = 200;
	struct wr_cgroup *cg = mk(fx, "co", &l);
	assert_int_equal(wr_cgroup_ctrl_fd(cg, WR_CG_CPU), wr_cgroup_ctrl_fd(cg, WR_CG_CPUACCT));
	assert_int_equal(u64_at(wr_cgroup_ctrl_fd(cg, WR_CG_CPU), "cpu.shares"), 2048);
	struct wr_cgroup_stats st;
	get_stats(cg, &st); /* no cpuacct.usage in the cpu-only dir: 0, no error */
	destroy_ok(&cg);
	assert_false(exists_anywhere(fx->root, "co"));
}

#define T(fn, setup) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
	if (geteuid() != 0) {
		fprintf(stderr, "test_cgroup needs root; skipping\n");
		return 77;
	}
	/* orphans of killed process trees come to us, to be reaped */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	const struct CMUnitTest tests[] = {
	    T(test_root_layout, setup_hybrid),
	    T(test_create_limits, setup_hybrid),
	    T(test_error_names_file_and_value, setup_hybrid),
	    T(test_leaf_attach, setup_hybrid),
	    T(test_clone_into_cgroup, setup_hybrid),
	    T(test_kill_tree, setup_hybrid),
	    T(test_fork_bomb, setup_hybrid),
	    T(test_oom, setup_hybrid),
	    T(test_retire_leaf, setup_hybrid),
	    T(test_leaf_recycle, setup_hybrid),
	    T(test_freeze, setup_hybrid),
	    T(test_stats_cpu, setup_hybrid),
	    T(test_destroy_removes_everything, setup_hybrid),
	    T(test_open_adopt, setup_hybrid),
	    T(test_sweep, setup_hybrid),
	    T(test_cycles, setup_hybrid),

	    T(test_root_layout, setup_v1),
	    T(test_create_limits, setup_v1),
	    T(test_leaf_attach, setup_v1),
	    T(test_kill_tree, setup_v1),
	    T(test_v1_stray_thread, setup_v1),
	    T(test_fork_bomb, setup_v1),
	    T(test_oom, setup_v1),
	    T(test_retire_leaf, setup_v1),
	    T(test_leaf_recycle, setup_v1),
	    T(test_freeze, setup_v1),
	    T(test_stats_cpu, setup_v1),
	    T(test_destroy_removes_everything, setup_v1),
	    T(test_open_adopt, setup_v1),
	    T(test_sweep, setup_v1),
	    T(test_cycles, setup_v1),
	    T(test_comount, setup_comount),

	    T(test_root_layout, setup_v2),
	    T(test_v2_without_controllers, setup_v2),
	    T(test_leaf_attach, setup_v2),
	    T(test_clone_into_cgroup, setup_v2),
	    T(test_kill_tree, setup_v2),
	    T(test_freeze, setup_v2),
	    T(test_stats_cpu, setup_v2),
	    T(test_leaf_recycle, setup_v2),
	    T(test_destroy_removes_everything, setup_v2),
	    T(test_open_adopt, setup_v2),
	    T(test_sweep, setup_v2),
	    T(test_cycles, setup_v2),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
