/* common/: error convention and parsers. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/error.h"
#include "common/util.h"

static void test_error_context_unwinds(void **state)
{
	(void)state;
	wr_err err = NULL;
	assert_int_equal(wr_err_set(&err, ENOENT, "open %s", "/x"), -ENOENT);
	assert_int_equal(wr_err_wrap(&err, "rootfs"), -ENOENT);
	assert_int_equal(wr_err_wrap(&err, "create sandbox"), -ENOENT);
	assert_string_equal(err->msg, "create sandbox: rootfs: open /x");
	assert_int_equal(wr_err_code(err), ENOENT);
	wr_err_free(&err);
	assert_null(err);
	assert_int_equal(wr_err_field(&err, "memory", "too small"), -EINVAL);
	assert_string_equal(err->field, "memory");
	wr_err_free(&err);
}

static void test_child_error_crosses_a_pipe(void **state)
{
	(void)state;
	int p[2];
	assert_int_equal(pipe(p), 0);
	struct wr_cerr ce;
	errno = EACCES;
	assert_int_equal(wr_cerr_sys(&ce, "mount %s", "/proc"), -EACCES);
	assert_int_equal(wr_cerr_send(p[1], &ce), 0);
	close(p[1]);
	wr_err err = NULL;
	assert_int_equal(wr_err_recv(p[0], &err), -EACCES);
	assert_string_equal(err->msg, "mount /proc: Permission denied");
	wr_err_free(&err);
	/* EOF: no error */
	assert_int_equal(wr_err_recv(p[0], &err), 0);
	close(p[0]);
}

static void test_parse_size(void **state)
{
	(void)state;
	uint64_t v;
	assert_int_equal(wr_parse_size("512", &v), 0);
	assert_int_equal(v, 512);
	assert_int_equal(wr_parse_size("64k", &v), 0);
	assert_int_equal(v, 65536);
	assert_int_equal(wr_parse_size("1.5G", &v), 0);
	assert_int_equal(v, 1610612736ull);
	assert_int_equal(wr_parse_size("2GiB", &v), 0);
	assert_int_equal(v, 2147483648ull);
	assert_int_equal(wr_parse_size("16MB", &v), 0);
	assert_int_equal(v, 16777216ull);
	assert_int_equal(wr_parse_size("", &v), -EINVAL);
	assert_int_equal(wr_parse_size("-1M", &v), -EINVAL);
	assert_int_equal(wr_parse_size("12Q", &v), -EINVAL);
	assert_int_equal(wr_parse_size("1Mx", &v), -EINVAL);
	assert_int_equal(wr_parse_size("lots", &v), -EINVAL);
	assert_int_equal(wr_parse_size("99999999999T", &v), -ERANGE);
}

static void test_parse_duration(void **state)
{
	(void)state;
	uint64_t v;
	assert_int_equal(wr_parse_duration_ms("30s", &v), 0);
	assert_int_equal(v, 30000);
	assert_int_equal(wr_parse_duration_ms("500ms", &v), 0);
	assert_int_equal(v, 500);
	assert_int_equal(wr_parse_duration_ms("1.5", &v), 0);
	assert_int_equal(v, 1500);
	assert_int_equal(wr_parse_duration_ms("5m", &v), 0);
	assert_int_equal(v, 300000);
	assert_int_equal(wr_parse_duration_ms("2h", &v), 0);
	assert_int_equal(v, 7200000);
	assert_int_equal(wr_parse_duration_ms("soon", &v), -EINVAL);
	assert_int_equal(wr_parse_duration_ms("5d", &v), -EINVAL);
	assert_int_equal(wr_parse_u64("12", 100, &v), 0);
	assert_int_equal(wr_parse_u64("101", 100, &v), -ERANGE);
	assert_int_equal(wr_parse_u64("-3", 100, &v), -EINVAL);
	assert_int_equal(wr_parse_u64("3x", 100, &v), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_error_context_unwinds),
	    cmocka_unit_test(test_child_error_crosses_a_pipe),
	    cmocka_unit_test(test_parse_size),
	    cmocka_unit_test(test_parse_duration),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
