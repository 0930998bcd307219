/* The freezer API that pause and resume rest on (wr_cgroup_freeze,
 * wr_cgroup_frozen), on the three roots this machine can give: hybrid
 * (unified cgroup.freeze), pure v1 (freezer.state; the unified hierarchy
 * hidden) and v2 (the unified hierarchy alone). Root only; every test works
 * under its own base "warren-frz-<pid>" and removes it in teardown. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "isolate/cgroup.h"
#include "isolate/cgroup_internal.h"

#include "cgroup_fixture.h"

struct fx {
	char base[64];
	struct wr_cgroup_root *root;
	pid_t kid;
	atomic_ulong *counter; /* shared with the child, which counts */
};

static int setup_any(void **state, enum flavour fl)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	if (fx == NULL)
		return -1;
	snprintf(fx->base, sizeof(fx->base), "warren-frz-%d", (int)getpid());
	fx->counter = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (fx->counter == MAP_FAILED)
		return -1;
	*state = fx;
	_cleanup_err_ wr_err e = NULL;
	/* V1: the tests skip where there is no v1 freezer */
	return cgfx_root_open(fx->base, fl, WR_CG_FREEZER, &fx->root, &e);
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
	if (fx->kid > 0) {
		kill(fx->kid, SIGKILL);
		waitpid(fx->kid, NULL, 0);
	}
	if (fx->root) {
		_cleanup_err_ wr_err e = NULL;
		if (wr_cgroup_root_remove(&fx->root, &e) < 0) {
			print_error("teardown: %s\n", e->msg);
			ret = -1;
		}
	}
	munmap(fx->counter, 4096);
	free(fx);
	return ret;
}

static struct wr_cgroup *mk(struct fx *fx, const char *name)
{
	struct wr_cgroup *cg = NULL;
	_cleanup_err_ wr_err e = NULL;
	if (wr_cgroup_create(fx->root, name, NULL, &cg, &e) < 0)
		fail_msg("create %s: %s", name, e->msg);
	return cg;
}

static struct wr_cgroup *mk_leaf(struct wr_cgroup *cg, const char *name)
{
	struct wr_cgroup *leaf = NULL;
	_cleanup_err_ wr_err e = NULL;
	if (wr_cgroup_create_leaf(cg, name, &leaf, &e) < 0)
		fail_msg("leaf %s: %s", name, e->msg);
	return leaf;
}

/* A child in leaf that counts in shared memory, started once it is in. */
static pid_t counter_in(struct fx *fx, struct wr_cgroup *leaf)
{
	int p[2];
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char c;
		close(p[1]);
		if (read(p[0], &c, 1) != 1)
			_exit(1);
		for (;;) {
			atomic_fetch_add(fx->counter, 1);
			usleep(1000);
		}
	}
	close(p[0]);
	_cleanup_err_ wr_err e = NULL;
	if (wr_cgroup_attach(leaf, pid, false, &e) < 0)
		fail_msg("attach: %s", e->msg);
	assert_int_equal(write(p[1], "g", 1), 1);
	close(p[1]);
	return pid;
}

static void freeze_ok(struct wr_cgroup *cg, bool frozen)
{
	_cleanup_err_ wr_err e = NULL;
	if (wr_cgroup_freeze(cg, frozen, &e) < 0)
		fail_msg("%s: %s", frozen ? "freeze" : "thaw", e->msg);
}

static int frozen_of(struct wr_cgroup *cg)
{
	_cleanup_err_ wr_err e = NULL;
	int r = wr_cgroup_frozen(cg, &e);
	if (r < 0)
		fail_msg("frozen: %s", e->msg);
	return r;
}

static unsigned long settle(struct fx *fx)
{
	usleep(50000);
	return atomic_load(fx->counter);
}

/* Pause and resume: the process stops where it is and goes on from there,
 * the state query follows, and both directions are idempotent. */
static void test_pause_resume(void **state)
{
	struct fx *fx = *state;
	NEED_ROOT(fx);
	struct wr_cgroup *cg = mk(fx, "sbx");
	struct wr_cgroup *leaf = mk_leaf(cg, "init");
	assert_int_equal(frozen_of(cg), 0);
	fx->kid = counter_in(fx, leaf);
	while (atomic_load(fx->counter) < 5)
		usleep(1000);
	freeze_ok(cg, true);
	assert_int_equal(frozen_of(cg), 1);
	unsigned long a = settle(fx);
	usleep(200000);
	assert_int_equal(atomic_load(fx->counter), a); /* frozen: no step */
	freeze_ok(cg, true);			       /* again: no-op */
	assert_int_equal(frozen_of(cg), 1);
	freeze_ok(cg, false);
	assert_int_equal(frozen_of(cg), 0);
	usleep(100000);
	unsigned long b = atomic_load(fx->counter);
	assert_true(b > a);		       /* the same process counts on */
	assert_true(b < a + 1000);	       /* from where it was */
	freeze_ok(cg, false);		       /* again: no-op */
	assert_int_equal(kill(fx->kid, 0), 0); /* never restarted */
	wr_cgroup_close(leaf);
	_cleanup_err_ wr_err e = NULL;
	assert_int_equal(wr_cgroup_destroy(&cg, &e), 0);
}

/* A process that joins a frozen cgroup freezes too; a leaf made under a
 * frozen cgroup is frozen. */
static void test_join_frozen(void **state)
{
	struct fx *fx = *state;
	NEED_ROOT(fx);
	struct wr_cgroup *cg = mk(fx, "sbx");
	freeze_ok(cg, true);
	struct wr_cgroup *leaf = mk_leaf(cg, "cmd-1");
	fx->kid = counter_in(fx, leaf);
	usleep(200000);
	assert_int_equal(atomic_load(fx->counter), 0);
	freeze_ok(cg, false);
	usleep(100000);
	assert_true(atomic_load(fx->counter) > 0);
	wr_cgroup_close(leaf);
	_cleanup_err_ wr_err e = NULL;
	assert_int_equal(wr_cgroup_destroy(&cg, &e), 0);
}

/* A frozen cgroup can be killed (kill of a paused sandbox), and a handle
 * opened afresh (daemon restart) sees the freeze. */
static void test_kill_and_reopen_frozen(void **state)
{
	struct fx *fx = *state;
	NEED_ROOT(fx);
	struct wr_cgroup *cg = mk(fx, "sbx");
	struct wr_cgroup *leaf = mk_leaf(cg, "init");
	fx->kid = counter_in(fx, leaf);
	freeze_ok(cg, true);
	wr_cgroup_close(leaf);
	wr_cgroup_close(cg);
	_cleanup_err_ wr_err e = NULL;
	struct wr_cgroup *again = NULL;
	if (wr_cgroup_open(fx->root, "sbx", &again, &e) < 0)
		fail_msg("open: %s", e->msg);
	assert_int_equal(frozen_of(again), 1);
	if (wr_cgroup_kill(again, &e) < 0)
		fail_msg("kill: %s", e->msg);
	int st;
	assert_int_equal(waitpid(fx->kid, &st, 0), fx->kid);
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	fx->kid = 0;
	assert_int_equal(wr_cgroup_destroy(&again, &e), 0);
}

/* Idle memory: v1's soft limit goes to 0 and back; without a memory
 * controller (v2 here) nothing is done and nothing fails. */
static void test_idle_memory(void **state)
{
	struct fx *fx = *state;
	NEED_ROOT(fx);
	struct wr_cgroup *cg = mk(fx, "sbx");
	_cleanup_err_ wr_err e = NULL;
	int fd = wr_cgroup_ctrl_fd(cg, WR_CG_MEMORY);
	if (wr_cgroup_idle_memory(cg, true, &e) < 0)
		fail_msg("idle: %s", e->msg);
	uint64_t v = 1;
	if (fd >= 0) {
		assert_int_equal(wr_cg_read_u64(fd, "memory.soft_limit_in_bytes", &v), 0);
		assert_int_equal(v, 0);
	}
	if (wr_cgroup_idle_memory(cg, false, &e) < 0)
		fail_msg("busy: %s", e->msg);
	if (fd >= 0) {
		assert_int_equal(wr_cg_read_u64(fd, "memory.soft_limit_in_bytes", &v), 0);
		assert_true(v > (1ull << 50)); /* unlimited again */
	}
	assert_int_equal(wr_cgroup_destroy(&cg, &e), 0);
}

#define T(fn, setup) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
	if (geteuid() != 0) {
		fprintf(stderr, "test_cgroup_freeze needs root; skipping\n");
		return 77;
	}
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	const struct CMUnitTest tests[] = {
	    T(test_pause_resume, setup_hybrid),
	    T(test_join_frozen, setup_hybrid),
	    T(test_kill_and_reopen_frozen, setup_hybrid),
	    T(test_idle_memory, setup_hybrid),
	    T(test_pause_resume, setup_v1),
	    T(test_join_frozen, setup_v1),
	    T(test_kill_and_reopen_frozen, setup_v1),
	    T(test_idle_memory, setup_v1),
	    T(test_pause_resume, setup_v2),
	    T(test_join_frozen, setup_v2),
	    T(test_kill_and_reopen_frozen, setup_v2),
	    T(test_idle_memory, setup_v2),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
