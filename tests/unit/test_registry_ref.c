/* image/registry: references, validation and what needs no network. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "image/distribute.h"
#include "image/registry.h"
#include "image/registry_internal.h"

#define D64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static void test_is_remote(void **state)
{
	(void)state;
	assert_true(wr_registry_ref_is_remote("localhost/x"));
	assert_true(wr_registry_ref_is_remote("127.0.0.1:5000/team/py:3.12"));
	assert_true(wr_registry_ref_is_remote("ghcr.io/a/b"));
	assert_true(wr_registry_ref_is_remote("[::1]:5000/a"));
	assert_false(wr_registry_ref_is_remote("python:3.12"));
	assert_false(wr_registry_ref_is_remote("team/python"));
	assert_false(wr_registry_ref_is_remote("sha256:" D64));
	assert_false(wr_registry_ref_is_remote(NULL));
}

static void expect_ref(const char *s, const char *host, const char *repo, const char *tag,
		       const char *digest)
{
	struct wr_registry_ref r;
	wr_err err = NULL;
	int rc = wr_registry_ref_parse(s, &r, &err);
	if (rc < 0)
		fail_msg("%s: %s", s, err->msg);
	assert_string_equal(r.host, host);
	assert_string_equal(r.repo, repo);
	if (tag)
		assert_string_equal(r.tag, tag);
	else
		assert_null(r.tag);
	if (digest)
		assert_string_equal(r.digest, digest);
	else
		assert_null(r.digest);
	char *f = wr_registry_ref_format(&r);
	struct wr_registry_ref again;
	assert_int_equal(wr_registry_ref_parse(f, &again, NULL), 0);
	assert_string_equal(again.repo, r.repo);
	free(f);
	wr_registry_ref_free(&again);
	wr_registry_ref_free(&r);
}

static void test_parse_good(void **state)
{
	(void)state;
	expect_ref("127.0.0.1:5000/team/py:3.12", "127.0.0.1:5000", "team/py", "3.12", NULL);
	expect_ref("localhost/x", "localhost", "x", "latest", NULL);
	expect_ref("ghcr.io/a/b-c/d_e.f", "ghcr.io", "a/b-c/d_e.f", "latest", NULL);
	expect_ref("r.io/a@sha256:" D64, "r.io", "a", NULL, "sha256:" D64);
	expect_ref("r.io/a:t@sha256:" D64, "r.io", "a", "t", "sha256:" D64);
	expect_ref("docker.io/python:3", "docker.io", "library/python", "3", NULL);
	expect_ref("docker.io/me/app", "docker.io", "me/app", "latest", NULL);
	expect_ref("[::1]:5000/a", "[::1]:5000", "a", "latest", NULL);
	expect_ref("r.io/a__b/c--d", "r.io", "a__b/c--d", "latest", NULL);
}

static void expect_bad(const char *s, const char *frag)
{
	struct wr_registry_ref r;
	wr_err err = NULL;
	assert_int_equal(wr_registry_ref_parse(s, &r, &err), -EINVAL);
	if (strstr(err->msg, frag) == NULL)
		fail_msg("%s: '%s' lacks '%s'", s, err->msg, frag);
	assert_null(r.host);
	wr_err_free(&err);
}

static void test_parse_bad(void **state)
{
	(void)state;
	expect_bad("", "empty");
	expect_bad("python:3.12", "not a registry reference");
	expect_bad("https://r.io/a", "scheme");
	expect_bad("r.io/A", "lowercase");
	expect_bad("r.io/a/../b", "repository");
	expect_bad("r.io/a//b", "repository");
	expect_bad("r.io/a-", "repository");
	expect_bad("r.io/a:-x", "tag");
	expect_bad("r.io/a:t t", "tag");
	expect_bad("r.io/a@sha256:abc", "64");
	expect_bad("r.io/a@md5:" D64, "sha256");
	expect_bad("r.io:0/a", "bad host");
	expect_bad("r.io:65536/a", "bad host");
	expect_bad("user@r.io/a", "bad host");
	expect_bad("r.io/a?x=1", "repository");
}

static void test_default_name_and_loopback(void **state)
{
	(void)state;
	char *n = NULL;
	assert_int_equal(wr_image_pull_default_name("127.0.0.1:5000/team/py:3.12", &n, NULL), 0);
	assert_string_equal(n, "team/py:3.12");
	free(n);
	assert_int_equal(wr_image_pull_default_name("docker.io/python:3.12", &n, NULL), 0);
	assert_string_equal(n, "python:3.12");
	free(n);
	assert_int_equal(wr_image_pull_default_name("r.io/a@sha256:" D64, &n, NULL), 0);
	assert_string_equal(n, "a");
	free(n);
	assert_true(reg_host_is_loopback("localhost:5000"));
	assert_true(reg_host_is_loopback("127.1.2.3"));
	assert_true(reg_host_is_loopback("[::1]:80"));
	assert_false(reg_host_is_loopback("128.0.0.1"));
	assert_false(reg_host_is_loopback("localhost.evil.com"));
	assert_false(reg_host_is_loopback("127.0.0.1.evil.com"));
}

static void test_open_validates(void **state)
{
	(void)state;
	struct wr_registry *reg = NULL;
	wr_err err = NULL;
	assert_int_equal(wr_registry_open("http://x", NULL, &reg, &err), -EINVAL);
	wr_err_free(&err);
	assert_int_equal(wr_registry_open("r.io/a", NULL, &reg, &err), -EINVAL);
	wr_err_free(&err);
	struct wr_registry_opts o = {.username = "u"};
	assert_int_equal(wr_registry_open("r.io", &o, &reg, &err), -EINVAL);
	assert_non_null(strstr(err->msg, "together"));
	wr_err_free(&err);
	struct wr_registry_opts bad = {.token = "a\r\nX-Evil: 1"};
	assert_int_equal(wr_registry_open("r.io", &bad, &reg, &err), -EINVAL);
	wr_err_free(&err);
	assert_int_equal(wr_registry_open("127.0.0.1:5000", NULL, &reg, &err), 0);
	assert_string_equal(wr_registry_host(reg), "127.0.0.1:5000");
	/* arguments are checked before any traffic */
	size_t got = 1;
	char buf[4];
	assert_int_equal(
	    wr_registry_blob_range(reg, "a/../b", "sha256:" D64, 0, 4, buf, &got, &err), -EINVAL);
	wr_err_free(&err);
	assert_int_equal(wr_registry_blob_range(reg, "a", "sha256:" D64, 0, 0, buf, &got, &err), 0);
	assert_int_equal(got, 0);
	assert_int_equal(wr_registry_blob_head(reg, "a", "sha256:XYZ", NULL, &err), -EINVAL);
	wr_err_free(&err);
	struct wr_registry_stats st;
	wr_registry_stats(reg, &st);
	assert_int_equal(st.requests, 0);
	wr_registry_close(reg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_is_remote),	   cmocka_unit_test(test_parse_good),
	    cmocka_unit_test(test_parse_bad),	   cmocka_unit_test(test_default_name_and_loopback),
	    cmocka_unit_test(test_open_validates),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
