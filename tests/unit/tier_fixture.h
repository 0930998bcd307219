/* Teardown shared by the tests that run the container tier in-process
 * (test_container.c, and the function tier's tests via function_fixture.c). */
#ifndef WARREN_TESTS_TIER_FIXTURE_H
#define WARREN_TESTS_TIER_FIXTURE_H

/* fn(dir) for our cgroup base dir in every hierarchy (named ones
 * excepted; the unified one as /sys/fs/cgroup/unified/...): the sum. */
int tierfx_each_base(const char *base, int (*fn)(const char *dir));
/* Remove every sandbox a failed test left, then the cgroup base in every
 * hierarchy, then the temp dir tmp: 0, or -1 when tmp could not go. */
int tierfx_teardown(const char *base, const char *tmp);

#endif
