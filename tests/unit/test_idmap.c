/* uid-range allocation: unique while live, persistent, reclaimable. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "isolate/idmap.h"

static char g_dir[64];

static int setup(void **state)
{
	(void)state;
	snprintf(g_dir, sizeof(g_dir), "/tmp/warren-idmap-XXXXXX");
	return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", g_dir);
	return system(cmd) == 0 ? 0 : -1;
}

static void test_alloc_unique_and_aligned(void **state)
{
	(void)state;
	static struct wr_idmap m[300];
	wr_err err = NULL;
	for (int i = 0; i < 300; i++) {
		char owner[32];
		snprintf(owner, sizeof(owner), "sb-%d", i);
		assert_int_equal(wr_idmap_alloc(g_dir, owner, &m[i], &err), 0);
		assert_int_equal(m[i].count, WR_IDMAP_SIZE);
		assert_true(m[i].base >= WR_IDMAP_BASE);
		assert_int_equal((m[i].base - WR_IDMAP_BASE) % WR_IDMAP_SIZE, 0);
		assert_true((uint64_t)m[i].base + m[i].count <= 0x80000000ull);
		for (int j = 0; j < i; j++)
			assert_int_not_equal(m[i].slot, m[j].slot);
	}
	/* allocations survive a "restart": find reads them back from disk */
	struct wr_idmap f;
	assert_int_equal(wr_idmap_find(g_dir, "sb-123", &f, &err), 0);
	assert_int_equal(f.base, m[123].base);
	for (int i = 0; i < 300; i++)
		assert_int_equal(wr_idmap_free(g_dir, &m[i], &err), 0);
	assert_true(wr_idmap_find(g_dir, "sb-123", &f, &err) < 0);
	assert_int_equal(wr_err_code(err), ENOENT);
	wr_err_free(&err);
	/* freeing twice is harmless */
	assert_int_equal(wr_idmap_free(g_dir, &m[0], &err), 0);
}

static bool alive_even(const char *owner, void *ctx)
{
	(void)ctx;
	return atoi(owner + 3) % 2 == 0;
}

static void test_reclaim(void **state)
{
	(void)state;
	struct wr_idmap m;
	wr_err err = NULL;
	for (int i = 0; i < 10; i++) {
		char owner[32];
		snprintf(owner, sizeof(owner), "sb-%d", i);
		assert_int_equal(wr_idmap_alloc(g_dir, owner, &m, &err), 0);
	}
	assert_int_equal(wr_idmap_reclaim(g_dir, alive_even, NULL, &err), 5);
	assert_int_equal(wr_idmap_find(g_dir, "sb-4", &m, &err), 0);
	assert_true(wr_idmap_find(g_dir, "sb-5", &m, &err) < 0);
	wr_err_free(&err);
	for (int i = 0; i < 10; i += 2) {
		char owner[32];
		snprintf(owner, sizeof(owner), "sb-%d", i);
		assert_int_equal(wr_idmap_find(g_dir, owner, &m, &err), 0);
		assert_int_equal(wr_idmap_free(g_dir, &m, &err), 0);
	}
}

/* Many processes allocating at once never get the same range. */
static void test_concurrent_processes(void **state)
{
	(void)state;
	int pipes[2];
	assert_int_equal(pipe(pipes), 0);
	for (int p = 0; p < 8; p++) {
		if (fork() == 0) {
			for (int i = 0; i < 50; i++) {
				char owner[32];
				struct wr_idmap m;
				snprintf(owner, sizeof(owner), "p%d-%d", p, i);
				if (wr_idmap_alloc(g_dir, owner, &m, NULL) < 0)
					_exit(1);
				if (write(pipes[1], &m.slot, sizeof(m.slot)) != sizeof(m.slot))
					_exit(1);
			}
			_exit(0);
		}
	}
	close(pipes[1]);
	static unsigned char seen[WR_IDMAP_SLOTS];
	uint32_t slot;
	int n = 0;
	while (read(pipes[0], &slot, sizeof(slot)) == sizeof(slot)) {
		assert_true(slot < WR_IDMAP_SLOTS);
		assert_int_equal(seen[slot], 0);
		seen[slot] = 1;
		n++;
	}
	int st;
	while (wait(&st) > 0)
		assert_int_equal(WEXITSTATUS(st), 0);
	assert_int_equal(n, 400);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_alloc_unique_and_aligned, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_reclaim, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_concurrent_processes, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
