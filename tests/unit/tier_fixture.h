/* Teardown shared by the tests that run the container tier in-process
 * (test_container.c, and the function tier's tests via function_fixture.c). */
#ifndef WARREN_TESTS_TIER_FIXTURE_H
#define WARREN_TESTS_TIER_FIXTURE_H

/* Remove every sandbox a failed test left, then the cgroup base in every
 * hierarchy, then the temp dir tmp: 0, or -1 when tmp could not go. */
int tierfx_teardown(const char *base, const char *tmp);

#endif
