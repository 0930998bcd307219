/* The container tier on a pure cgroup v2 host, where PID 1 lives in the
 * sandbox's leaf "init" (a v2 cgroup with children holds no process):
 * this machine is hybrid, so the host is emulated on its unified hierarchy
 * with the v1 controllers hidden (tests/unit/cgroup_fixture.c; no limits
 * are enforced without controllers). What it covers is the v2-only code of
 * a pause to disk (tiers/container_ckpt.c): the restored tree goes to the
 * leaf init (made again when a daemon restart lost the handle of it), and
 * the restored tasks are continued by the leaf's path after a restart.
 * Skipped where there is no unified hierarchy or no working CRIU
 * ($WARREN_CRIU, the build's warren-criu). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cgroup_fixture.h"
#include "common/error.h"
#include "tier_fixture.h"
#include "tiers/container.h"
#include "tiers/tier.h"

static const char *g_image;
static char g_tmp[256];
static char g_base[64];
static bool g_ready; /* a v2 root and a criu */

static int group_setup(void **state)
{
	(void)state;
	g_image = getenv("WARREN_TEST_IMAGE");
	const char *init = getenv("WARREN_INIT");
	const char *criu = getenv("WARREN_CRIU");
	if (g_image == NULL || init == NULL) {
		fprintf(stderr, "WARREN_TEST_IMAGE and WARREN_INIT must be set\n");
		return -1;
	}
	int n = snprintf(g_tmp, sizeof(g_tmp), "/tmp/warren-ct2-");
	memset(g_tmp + n, 'X', 6);
	g_tmp[n + 6] = '\0';
	if (mkdtemp(g_tmp) == NULL)
		return -1;
	snprintf(g_base, sizeof(g_base), "warren-ct2-%d", (int)getpid());
	struct wr_cgroup_root *root = NULL;
	wr_err err = NULL;
	if (cgfx_root_open(g_base, V2_NO_LIMITS, WR_CG_NCTRL, &root, &err) < 0) {
		fprintf(stderr, "%s\n", err->msg);
		return -1;
	}
	if (root == NULL || criu == NULL || access(criu, X_OK) < 0) {
		fprintf(stderr, "no unified hierarchy or no criu (%s): skipped\n",
			criu ? criu : "WARREN_CRIU unset");
		if (root)
			wr_cgroup_root_close(root);
		return 0;
	}
	char state_dir[300], run_dir[300];
	snprintf(state_dir, sizeof(state_dir), "%s/state", g_tmp);
	snprintf(run_dir, sizeof(run_dir), "%s/run", g_tmp);
	struct wr_container_config cfg = {.state_dir = state_dir,
					  .run_dir = run_dir,
					  .init_path = init,
					  .cgroup_base = g_base,
					  .cgroot = root};
	if (wr_container_init(&cfg, &err) < 0) {
		fprintf(stderr, "init: %s\n", err->msg);
		return -1;
	}
	wr_container_set_criu(criu);
	g_ready = true;
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	if (!g_ready) {
		char cmd[300];
		snprintf(cmd, sizeof(cmd), "rm -rf %s", g_tmp);
		return system(cmd) == 0 ? 0 : -1;
	}
	return tierfx_teardown(g_base, g_tmp);
}

static void ok(int r, wr_err *err, const char *what)
{
	if (r < 0)
		fprintf(stderr, "%s: %s\n", what, (*err)->msg);
	assert_int_equal(r, 0);
	wr_err_free(err);
}

static void run(struct wr_sandbox *sb, const char *sh, char **out)
{
	const char *argv[] = {"sh", "-c", sh, NULL};
	struct wr_exec_spec ex = {
	    .argv = argv, .user = -1, .group = -1, .stdin_fd = -1, .timeout_ms = 20000};
	struct wr_exec_result res;
	wr_err err = NULL;
	ok(wr_container_exec(sb, &ex, &res, &err), &err, "exec");
	assert_int_equal(res.reason, WR_EXIT_EXITED);
	assert_int_equal(res.exit_code, 0);
	if (out)
		*out = strdup(res.out);
	wr_exec_result_free(&res);
}

/* The counter the background process writes, read from inside. */
static long count(struct wr_sandbox *sb)
{
	char *out = NULL;
	run(sb, "cat /tmp/c", &out);
	long v = strtol(out, NULL, 10);
	free(out);
	return v;
}

/* It goes on: the counter grows within 5 s. */
static void counts_on(struct wr_sandbox *sb)
{
	long a = count(sb);
	for (int i = 0; i < 100; i++) {
		usleep(50000);
		if (count(sb) > a)
			return;
	}
	fail_msg("the counter stays at %ld", a);
}

/* PID 1's cgroup as the host sees it ends in /<id>/init. */
static void pid1_in_init_leaf(struct wr_sandbox *sb, const char *id)
{
	char p[64], want[128], line[512];
	snprintf(p, sizeof(p), "/proc/%d/cgroup", (int)wr_sandbox_init_pid(sb));
	snprintf(want, sizeof(want), "/%s/init\n", id);
	FILE *f = fopen(p, "r");
	assert_non_null(f);
	bool found = false;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "0::", 3) == 0 && strlen(line) > strlen(want) &&
		    strcmp(line + strlen(line) - strlen(want), want) == 0)
			found = true;
	fclose(f);
	assert_true(found);
}

static void step(struct wr_sandbox *sb, enum wr_suspend_step s, const char *what)
{
	wr_err err = NULL;
	ok(wr_container_suspend(sb, s, &err), &err, what);
}

static void test_pause_to_disk_on_pure_v2(void **state)
{
	(void)state;
	if (!g_ready)
		skip();
	struct wr_sandbox_spec spec = {.image = g_image, .id = "v2ckpt"};
	struct wr_sandbox *sb = NULL;
	wr_err err = NULL;
	ok(wr_container_create(&spec, &sb, &err), &err, "create");
	pid1_in_init_leaf(sb, "v2ckpt");
	run(sb,
	    "setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/c; sleep 0.05; done' "
	    ">/dev/null 2>&1 </dev/null & while [ ! -s /tmp/c ]; do sleep 0.05; done",
	    NULL);
	counts_on(sb);

	/* to disk and back, one handle: the restored tree in the leaf init */
	ok(wr_container_freeze(sb, true, &err), &err, "freeze");
	step(sb, WR_SUSPEND_SAVE, "save");
	step(sb, WR_SUSPEND_END, "end");
	assert_int_equal(wr_sandbox_init_pid(sb), 0);
	step(sb, WR_SUSPEND_LOAD, "load");
	pid1_in_init_leaf(sb, "v2ckpt");
	step(sb, WR_SUSPEND_RUN, "run");
	counts_on(sb);

	/* to disk, then a daemon restart: the handle (and its leaf init) is
	 * lost; the adopted suspended sandbox makes the leaf again */
	ok(wr_container_freeze(sb, true, &err), &err, "freeze");
	step(sb, WR_SUSPEND_SAVE, "save");
	step(sb, WR_SUSPEND_END, "end");
	wr_container_release(&sb);
	ok(wr_container_adopt(&spec, 0, &sb, &err), &err, "adopt suspended");
	step(sb, WR_SUSPEND_LOAD, "load after a restart");
	pid1_in_init_leaf(sb, "v2ckpt");

	/* a restart between the restore and its continue: the adoption
	 * continues the stopped tasks by the leaf's path */
	pid_t pid = wr_sandbox_init_pid(sb);
	wr_container_release(&sb);
	ok(wr_container_adopt(&spec, pid, &sb, &err), &err, "adopt restored");
	ok(wr_container_freeze(sb, false, &err), &err, "thaw");
	counts_on(sb);

	ok(wr_container_destroy(&sb, &err), &err, "destroy");
}

/* A snapshot's processes (save_procs) restored into a new sandbox: its
 * tree goes to the new sandbox's leaf init. */
static void test_processes_into_a_new_sandbox_on_pure_v2(void **state)
{
	(void)state;
	if (!g_ready)
		skip();
	struct wr_sandbox_spec spec = {.image = g_image, .id = "v2src"};
	struct wr_sandbox *src = NULL, *copy = NULL;
	wr_err err = NULL;
	ok(wr_container_create(&spec, &src, &err), &err, "create");
	run(src,
	    "setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/c; sleep 0.05; done' "
	    ">/dev/null 2>&1 </dev/null & while [ ! -s /tmp/c ]; do sleep 0.05; done",
	    NULL);
	char dir[400];
	snprintf(dir, sizeof(dir), "%s/procs", g_tmp);
	ok(wr_container_freeze(src, true, &err), &err, "freeze");
	ok(wr_container_save_procs(src, dir, &err), &err, "save_procs");
	ok(wr_container_freeze(src, false, &err), &err, "thaw");
	counts_on(src);
	/* the files the processes have open: the same image here (a /tmp
	 * file is written again by the restored counter) */
	struct wr_sandbox_spec cspec = {.image = g_image, .id = "v2copy", .restore = dir};
	ok(wr_container_create_op(&cspec, &copy, &err), &err, "create from processes");
	pid1_in_init_leaf(copy, "v2copy");
	ok(wr_container_start(copy, &err), &err, "start");
	counts_on(copy);
	ok(wr_container_destroy(&copy, &err), &err, "destroy copy");
	ok(wr_container_destroy(&src, &err), &err, "destroy");
	char cmd[500];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_pause_to_disk_on_pure_v2),
	    cmocka_unit_test(test_processes_into_a_new_sandbox_on_pure_v2),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
