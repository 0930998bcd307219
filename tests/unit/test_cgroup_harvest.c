/* CPU harvesting's cgroup calls (cgroup_harvest.c, wr_cgroup_idle_memory):
 * the CPU share (weight, cpu.idle) and CPU time of a sandbox cgroup, and
 * the memory of an idle one.
 *   fake v2  a directory of plain files shaped like a v2 cgroup with the
 *            cpu and memory controllers (this machine's unified hierarchy
 *            has none): which files are written, with what, in what cases
 *   hybrid   what wr_cgroup_root_open picks here (v1 cpu and memory, CPU
 *            time from the unified hierarchy), on the real kernel
 *   v1       the same v1 hierarchies with the unified one hidden (cpuacct)
 * Root only for the real ones; each works under its own base
 * "warren-hv-<pid>" and removes it in teardown, also when a test failed. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "isolate/cgroup.h"
#include "isolate/cgroup_internal.h"

#include "cgroup_fixture.h"

/* ---- fake v2 cgroup directory ------------------------------------------ */

struct fake {
	char dir[64];
	int dfd;
	struct wr_cgroup_root root;
	struct wr_cgroup cg;
};

/* (Re)create dir/file holding `val` ("" for empty); NULL val removes it. */
static void put(struct fake *f, const char *file, const char *val)
{
	unlinkat(f->dfd, file, 0);
	if (val == NULL)
		return;
	int fd = openat(f->dfd, file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, val, strlen(val)), (ssize_t)strlen(val));
	close(fd);
}

static const char *get(struct fake *f, const char *file)
{
	static char buf[256];
	ssize_t n = wr_cg_read(f->dfd, file, buf, sizeof(buf));
	if (n < 0)
		return NULL;
	return buf;
}

static int fake_setup(void **state)
{
	struct fake *f = calloc(1, sizeof(*f));
	if (f == NULL)
		return -1;
	snprintf(f->dir, sizeof(f->dir), "/tmp/warren-hvfake-%d", (int)getpid());
	if (mkdir(f->dir, 0700) < 0)
		return -1;
	f->dfd = open(f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	f->root.mode = WR_CG_V2;
	f->root.v2_ctrls = WR_CG2_CPU | WR_CG2_MEMORY | WR_CG2_PIDS;
	f->root.v2_base_fd = -1;
	for (int c = 0; c < WR_CG_NCTRL; c++)
		f->root.ctrl_hier[c] = -1;
	f->cg.root = &f->root;
	f->cg.name = f->cg.rel = "sbx";
	f->cg.v2_fd = f->dfd;
	for (int h = 0; h < WR_CG_NCTRL; h++)
		f->cg.fd[h] = f->cg.up_fd[h] = -1;
	*state = f;
	return 0;
}

static int fake_teardown(void **state)
{
	struct fake *f = *state;
	static const char *const files[] = {"cpu.weight",     "cpu.idle",	"cpu.stat",
					    "memory.current", "memory.reclaim", "cpu.shares"};
	for (size_t i = 0; i < WR_ARRAY_SIZE(files); i++)
		unlinkat(f->dfd, files[i], 0);
	close(f->dfd);
	int r = rmdir(f->dir);
	free(f);
	return r;
}

static void test_fake_v2_share(void **state)
{
	struct fake *f = *state;
	_cleanup_err_ wr_err e = NULL;
	/* a request of 2.5 CPUs: weight 250, cpu.idle cleared first */
	put(f, "cpu.weight", "");
	put(f, "cpu.idle", "");
	assert_int_equal(wr_cgroup_cpu_share(&f->cg, 250, false, &e), 0);
	assert_string_equal(get(f, "cpu.weight"), "250");
	assert_string_equal(get(f, "cpu.idle"), "0");
	/* idle: the lowest weight (1) and cpu.idle 1 */
	put(f, "cpu.weight", "");
	put(f, "cpu.idle", "");
	assert_int_equal(wr_cgroup_cpu_share(&f->cg, 0, true, &e), 1);
	assert_string_equal(get(f, "cpu.weight"), "1");
	assert_string_equal(get(f, "cpu.idle"), "1");
	/* a kernel without cpu.idle: the weight alone, and not an error */
	put(f, "cpu.weight", "");
	put(f, "cpu.idle", NULL);
	assert_int_equal(wr_cgroup_cpu_share(&f->cg, 0, true, &e), 0);
	assert_string_equal(get(f, "cpu.weight"), "1");
	assert_null(get(f, "cpu.idle"));
	put(f, "cpu.weight", "");
	assert_int_equal(wr_cgroup_cpu_share(&f->cg, 100, false, &e), 0);
	assert_string_equal(get(f, "cpu.weight"), "100");
	/* weights are capped at 10000 */
	put(f, "cpu.weight", "");
	assert_int_equal(wr_cgroup_cpu_share(&f->cg, 99999, false, &e), 0);
	assert_string_equal(get(f, "cpu.weight"), "10000");
	/* no cpu controller delegated: said, nothing written */
	f->root.v2_ctrls &= ~WR_CG2_CPU;
	put(f, "cpu.weight", "");
	assert_true(wr_cgroup_cpu_share(&f->cg, 100, false, &e) < 0);
	assert_int_equal(e->errnum, EOPNOTSUPP);
	assert_string_equal(get(f, "cpu.weight"), "");
	f->root.v2_ctrls |= WR_CG2_CPU;
}

static void test_fake_v2_reclaim_and_cpu_time(void **state)
{
	struct fake *f = *state;
	_cleanup_err_ wr_err e = NULL;
	/* idle: memory.reclaim of everything it uses (the kernel takes what
	 * it can); nothing to undo when it wakes */
	put(f, "memory.current", "12345678\n");
	put(f, "memory.reclaim", "");
	assert_true(wr_cgroup_idle_memory(&f->cg, true, &e) >= 0);
	assert_string_equal(get(f, "memory.reclaim"), "12345678");
	put(f, "memory.reclaim", "");
	assert_int_equal(wr_cgroup_idle_memory(&f->cg, false, &e), 0);
	assert_string_equal(get(f, "memory.reclaim"), "");
	/* nothing in use: no write */
	put(f, "memory.current", "0\n");
	assert_int_equal(wr_cgroup_idle_memory(&f->cg, true, &e), 0);
	assert_string_equal(get(f, "memory.reclaim"), "");
	/* CPU time: cpu.stat usage_usec */
	put(f, "cpu.stat", "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n");
	uint64_t ns = 0;
	assert_int_equal(wr_cgroup_cpu_ns(&f->cg, &ns, &e), 0);
	assert_int_equal(ns, 1500000);
	put(f, "cpu.stat", NULL);
	assert_true(wr_cgroup_cpu_ns(&f->cg, &ns, &e) < 0);
	assert_non_null(strstr(e->msg, "CPU time"));
}

/* ---- real hierarchies -------------------------------------------------- */

struct fx {
	char base[64];
	struct wr_cgroup_root *root;
	struct wr_cgroup *cg;
	pid_t kid;
};

static int setup_any(void **state, enum flavour fl)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	if (fx == NULL)
		return -1;
	snprintf(fx->base, sizeof(fx->base), "warren-hv-%d", (int)getpid());
	*state = fx;
	_cleanup_err_ wr_err e = NULL;
	return cgfx_root_open(fx->base, fl, WR_CG_NCTRL, &fx->root, &e);
}

static int setup_hybrid(void **state)
{
	return setup_any(state, HYBRID);
}
static int setup_v1(void **state)
{
	return setup_any(state, V1);
}

static int teardown(void **state)
{
	struct fx *fx = *state;
	int ret = 0;
	if (fx->kid > 0) {
		kill(fx->kid, SIGKILL);
		waitpid(fx->kid, NULL, 0);
	}
	_cleanup_err_ wr_err e = NULL;
	if (fx->cg && wr_cgroup_destroy(&fx->cg, &e) < 0)
		ret = -1;
	if (fx->root && wr_cgroup_root_remove(&fx->root, &e) < 0)
		ret = -1;
	free(fx);
	return ret;
}

static uint64_t u64_at(int dfd, const char *file)
{
	uint64_t v = 0;
	int r = wr_cg_read_u64(dfd, file, &v);
	if (r < 0)
		fail_msg("read %s: %s", file, strerror(-r));
	return v;
}

static void make_cg(struct fx *fx)
{
	if (fx->root == NULL)
		skip();
	_cleanup_err_ wr_err e = NULL;
	if (wr_cgroup_create(fx->root, "sbx", NULL, &fx->cg, &e) < 0)
		fail_msg("create: %s", e->msg);
}

/* Weights on the kernel: shares follow the request, idle takes cpu.idle
 * (which refuses a weight while set: the order matters), and back. */
static void test_share_real(void **state)
{
	struct fx *fx = *state;
	make_cg(fx);
	_cleanup_err_ wr_err e = NULL;
	int fd = wr_cgroup_ctrl_fd(fx->cg, WR_CG_CPU);
	assert_true(fd >= 0);
	assert_int_equal(wr_cgroup_cpu_share(fx->cg, 250, false, &e), 0);
	assert_int_equal(u64_at(fd, "cpu.shares"), 2560);
	struct stat st;
	bool has_idle = fstatat(fd, "cpu.idle", &st, 0) == 0;
	int r = wr_cgroup_cpu_share(fx->cg, 0, true, &e);
	assert_int_equal(r, has_idle ? 1 : 0);
	if (has_idle)
		assert_int_equal(u64_at(fd, "cpu.idle"), 1);
	else
		assert_int_equal(u64_at(fd, "cpu.shares"), 2);
	/* marked idle again (a repeated tick): no error although the kernel
	 * refuses the weight while the group is idle */
	assert_int_equal(wr_cgroup_cpu_share(fx->cg, 0, true, &e), r);
	/* activity: the request's weight back */
	if (wr_cgroup_cpu_share(fx->cg, 50, false, &e) < 0)
		fail_msg("%s", e->msg);
	if (has_idle)
		assert_int_equal(u64_at(fd, "cpu.idle"), 0);
	assert_int_equal(u64_at(fd, "cpu.shares"), 512);
	/* the lowest on v1 is 2 */
	assert_int_equal(wr_cgroup_cpu_share(fx->cg, 0, false, &e), 0);
	assert_int_equal(u64_at(fd, "cpu.shares"), 2);
}

/* v1 memory of an idle sandbox: soft limit 0, undone on wake. */
static void test_idle_memory_real(void **state)
{
	struct fx *fx = *state;
	make_cg(fx);
	_cleanup_err_ wr_err e = NULL;
	int fd = wr_cgroup_ctrl_fd(fx->cg, WR_CG_MEMORY);
	if (fd < 0)
		skip();
	assert_true(wr_cgroup_idle_memory(fx->cg, true, &e) >= 0);
	assert_int_equal(u64_at(fd, "memory.soft_limit_in_bytes"), 0);
	assert_int_equal(wr_cgroup_idle_memory(fx->cg, false, &e), 0);
	assert_true(u64_at(fd, "memory.soft_limit_in_bytes") > (1ull << 60));
}

/* CPU time of a spinning child: counted (unified cpu.stat on hybrid,
 * cpuacct.usage on v1). */
static void test_cpu_time_real(void **state)
{
	struct fx *fx = *state;
	make_cg(fx);
	_cleanup_err_ wr_err e = NULL;
	uint64_t before = 0, after = 0;
	assert_int_equal(wr_cgroup_cpu_ns(fx->cg, &before, &e), 0);
	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	fx->kid = fork();
	assert_true(fx->kid >= 0);
	if (fx->kid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		char c;
		if (read(p[0], &c, 1) != 1)
			_exit(99);
		uint64_t end = wr_now_ns() + 300000000ull;
		while (wr_now_ns() < end)
			;
		_exit(0);
	}
	close(p[0]);
	if (wr_cgroup_attach(fx->cg, fx->kid, false, &e) < 0)
		fail_msg("attach: %s", e->msg);
	assert_int_equal(write(p[1], "g", 1), 1);
	close(p[1]);
	int status;
	assert_int_equal(waitpid(fx->kid, &status, 0), fx->kid);
	fx->kid = 0;
	assert_int_equal(wr_cgroup_cpu_ns(fx->cg, &after, &e), 0);
	/* 300 ms of wall time spinning: at least 50 ms of CPU on a loaded
	 * machine */
	assert_true(after - before >= 50000000ull);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_fake_v2_share, fake_setup, fake_teardown),
	    cmocka_unit_test_setup_teardown(test_fake_v2_reclaim_and_cpu_time, fake_setup,
					    fake_teardown),
	    cmocka_unit_test_setup_teardown(test_share_real, setup_hybrid, teardown),
	    cmocka_unit_test_setup_teardown(test_share_real, setup_v1, teardown),
	    cmocka_unit_test_setup_teardown(test_idle_memory_real, setup_hybrid, teardown),
	    cmocka_unit_test_setup_teardown(test_cpu_time_real, setup_hybrid, teardown),
	    cmocka_unit_test_setup_teardown(test_cpu_time_real, setup_v1, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
