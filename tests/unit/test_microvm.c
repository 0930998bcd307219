/* The microVM tier's core under TCG: a real QEMU microvm booting Debian's
 * cloud kernel and warren-agent, the busybox test image as its root. Two
 * VMs in all (boots take seconds here): one for the command tests, one that
 * panics. Runs as root. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "tiers/microvm.h"

static char g_tmp[256];
static char g_image[512];
static struct wr_vm *g_vm;

static int group_setup(void **state)
{
	(void)state;
	const char *k = getenv("WARREN_GUEST_KERNEL"), *i = getenv("WARREN_GUEST_INITRD"),
		   *img = getenv("WARREN_TEST_IMAGE");
	if (!k || !i || !img) {
		fprintf(stderr, "WARREN_GUEST_KERNEL, WARREN_GUEST_INITRD, WARREN_TEST_IMAGE\n");
		return -1;
	}
	snprintf(g_image, sizeof(g_image), "%s.erofs", img);
	snprintf(g_tmp, sizeof(g_tmp), "/tmp/warren-microvm-XXXXXX");
	if (mkdtemp(g_tmp) == NULL)
		return -1;
	char sdir[300], run[300];
	snprintf(sdir, sizeof(sdir), "%s/state", g_tmp);
	snprintf(run, sizeof(run), "%s/run", g_tmp);
	struct wr_microvm_config cfg = {
	    .kernel = k, .initrd = i, .state_dir = sdir, .run_dir = run};
	wr_err err = NULL;
	if (wr_microvm_init(&cfg, &err) < 0) {
		fprintf(stderr, "init: %s\n", err->msg);
		return -1;
	}
	struct wr_vm_spec spec = {.image = g_image, .disk_bytes = 64ull << 20, .id = "vmtest"};
	if (wr_vm_create(&spec, &g_vm, &err) < 0) {
		fprintf(stderr, "create: %s\n", err->msg);
		return -1;
	}
	fprintf(stderr, "booted (%s) in %llu ms of guest uptime\n", wr_microvm_accel(),
		(unsigned long long)wr_vm_boot_ms(g_vm));
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	wr_vm_destroy(&g_vm, NULL);
	char cmd[400];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_tmp);
	return system(cmd) == 0 ? 0 : -1;
}

static struct wr_exec_result run_in(struct wr_vm *vm, const char *sh, uint64_t timeout_ms,
				    uint64_t cap, int stdin_fd)
{
	const char *argv[] = {"sh", "-c", sh, NULL};
	struct wr_exec_spec ex = {.argv = argv,
				  .user = -1,
				  .group = -1,
				  .timeout_ms = timeout_ms,
				  .output_cap = cap,
				  .stdin_fd = stdin_fd};
	struct wr_exec_result res;
	wr_err err = NULL;
	int r = wr_vm_exec(vm, &ex, &res, &err);
	if (r < 0)
		fprintf(stderr, "exec: %s\n", err->msg);
	assert_int_equal(r, 0);
	return res;
}

static struct wr_exec_result run(const char *sh)
{
	return run_in(g_vm, sh, 60000, 0, -1);
}

static void test_exec_output_and_status(void **state)
{
	(void)state;
	struct wr_exec_result res = run("echo out; echo err >&2; hostname; id -u; exit 3");
	assert_int_equal(res.reason, WR_EXIT_EXITED);
	assert_int_equal(res.exit_code, 3);
	assert_string_equal(res.out, "out\nvmtest\n0\n");
	assert_string_equal(res.err, "err\n");
	wr_exec_result_free(&res);
	/* the root is the image over a writable layer: files persist */
	res = run("test -x /bin/busybox && echo image; echo kept > /root-file; cat /root-file");
	assert_string_equal(res.out, "image\nkept\n");
	wr_exec_result_free(&res);
	res = run("cat /root-file; grep -c ' / overlay ' /proc/mounts");
	assert_string_equal(res.out, "kept\n1\n");
	wr_exec_result_free(&res);
}

static void test_env_cwd_user(void **state)
{
	(void)state;
	const char *argv[] = {"sh", "-c", "echo $GREETING; pwd; id -u; id -g", NULL};
	struct wr_env_kv env[] = {{"GREETING", "hello vm"}};
	struct wr_exec_spec ex = {.argv = argv,
				  .env = env,
				  .n_env = 1,
				  .cwd = "/tmp",
				  .user = 1000,
				  .group = 1001,
				  .stdin_fd = -1};
	struct wr_exec_result res;
	wr_err err = NULL;
	assert_int_equal(wr_vm_exec(g_vm, &ex, &res, &err), 0);
	assert_string_equal(res.out, "hello vm\n/tmp\n1000\n1001\n");
	wr_exec_result_free(&res);
}

static void test_stdin(void **state)
{
	(void)state;
	int p[2];
	assert_int_equal(pipe(p), 0);
	assert_int_equal(write(p[1], "line one\nline two\n", 18), 18);
	close(p[1]);
	struct wr_exec_result res = run_in(g_vm, "wc -l; cat", 60000, 0, p[0]);
	close(p[0]);
	assert_int_equal(res.exit_code, 0);
	assert_string_equal(res.out, "2\n");
	wr_exec_result_free(&res);
}

static void test_failures_timeout_and_cap(void **state)
{
	(void)state;
	const char *argv[] = {"/no/such/binary", NULL};
	struct wr_exec_spec ex = {.argv = argv, .user = -1, .group = -1, .stdin_fd = -1};
	struct wr_exec_result res;
	wr_err err = NULL;
	assert_int_equal(wr_vm_exec(g_vm, &ex, &res, &err), 0);
	assert_int_equal(res.reason, WR_EXIT_START_FAILED);
	assert_int_equal(res.exit_code, 127);
	wr_exec_result_free(&res);
	/* the timeout kills the whole tree, a detached child included */
	res = run_in(g_vm, "(setsid sleep 1000 &); sleep 1000", 1500, 0, -1);
	assert_int_equal(res.reason, WR_EXIT_TIMEOUT);
	assert_true(res.duration_ns < 30ull * 1000000000ull);
	wr_exec_result_free(&res);
	res = run("pidof sleep || echo none");
	assert_string_equal(res.out, "none\n");
	wr_exec_result_free(&res);
	/* output beyond the cap is dropped and flagged */
	res = run_in(g_vm, "head -c 100000 /dev/zero", 60000, 1000, -1);
	assert_int_equal(res.out_len, 1000);
	assert_true(res.out_truncated);
	wr_exec_result_free(&res);
	/* the writable disk is bounded: ENOSPC at its size, not the host's */
	res = run("dd if=/dev/zero of=/big bs=1M count=200 2>&1; rm -f /big; echo done");
	assert_non_null(strstr(res.out, "No space left on device"));
	assert_non_null(strstr(res.out, "done\n"));
	wr_exec_result_free(&res);
}

static void *concurrent(void *arg)
{
	char sh[64];
	snprintf(sh, sizeof(sh), "sleep 1; echo %d", (int)(intptr_t)arg);
	struct wr_exec_result res = run(sh);
	char want[16];
	snprintf(want, sizeof(want), "%d\n", (int)(intptr_t)arg);
	intptr_t ok = strcmp(res.out, want) == 0;
	wr_exec_result_free(&res);
	return (void *)ok;
}

static void test_concurrent_commands(void **state)
{
	(void)state;
	pthread_t t[4];
	for (intptr_t i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&t[i], NULL, concurrent, (void *)i), 0);
	for (int i = 0; i < 4; i++) {
		void *ok;
		pthread_join(t[i], &ok);
		assert_true(ok != NULL);
	}
}

static void test_pause_resume(void **state)
{
	(void)state;
	wr_err err = NULL;
	struct wr_exec_result res = run("echo 1 > /counter");
	wr_exec_result_free(&res);
	assert_int_equal(wr_vm_pause(g_vm, &err), 0);
	assert_int_equal(wr_vm_resume(g_vm, &err), 0);
	res = run("cat /counter");
	assert_string_equal(res.out, "1\n");
	wr_exec_result_free(&res);
}

/* A guest kernel panic: QEMU exits (-no-reboot), the command fails with a
 * clear error instead of hanging, the VM refuses further commands, and
 * destroy still cleans up. */
static void test_guest_panic_is_reported(void **state)
{
	(void)state;
	struct wr_vm_spec spec = {.image = g_image, .disk_bytes = 32ull << 20, .id = "vmpanic"};
	struct wr_vm *vm = NULL;
	wr_err err = NULL;
	assert_int_equal(wr_vm_create(&spec, &vm, &err), 0);
	pid_t qemu = wr_vm_qemu_pid(vm);
	const char *argv[] = {"sh", "-c", "echo c > /proc/sysrq-trigger; sleep 100", NULL};
	struct wr_exec_spec ex = {.argv = argv, .user = -1, .group = -1, .stdin_fd = -1};
	struct wr_exec_result res;
	assert_true(wr_vm_exec(vm, &ex, &res, &err) < 0);
	assert_non_null(strstr(err->msg, "the VM is gone"));
	wr_err_free(&err);
	char *tail = wr_vm_console_tail(vm);
	assert_non_null(strstr(tail, "Kernel panic"));
	free(tail);
	const char *argv2[] = {"true", NULL};
	ex.argv = argv2;
	assert_true(wr_vm_exec(vm, &ex, &res, &err) < 0);
	wr_err_free(&err);
	char dir[400];
	snprintf(dir, sizeof(dir), "%s/run/microvm/vmpanic", g_tmp);
	assert_int_equal(access(dir, F_OK), 0);
	assert_int_equal(wr_vm_destroy(&vm, &err), 0);
	assert_int_equal(access(dir, F_OK), -1);
	assert_true(kill(qemu, 0) < 0 && errno == ESRCH);
}

static void test_bad_specs(void **state)
{
	(void)state;
	struct wr_vm *vm = NULL;
	wr_err err = NULL;
	struct wr_vm_spec spec = {.image = g_image, .memory_bytes = 1 << 20};
	assert_true(wr_vm_create(&spec, &vm, &err) < 0);
	assert_string_equal(err->field, "memory");
	wr_err_free(&err);
	spec = (struct wr_vm_spec){.image = "/nonexistent.erofs"};
	assert_true(wr_vm_create(&spec, &vm, &err) < 0);
	assert_non_null(strstr(err->msg, "/nonexistent.erofs"));
	wr_err_free(&err);
	const char *argv[] = {NULL};
	struct wr_exec_spec ex = {.argv = argv, .stdin_fd = -1};
	struct wr_exec_result res;
	assert_true(wr_vm_exec(g_vm, &ex, &res, &err) < 0);
	assert_string_equal(err->field, "cmd");
	wr_err_free(&err);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_exec_output_and_status),
	    cmocka_unit_test(test_env_cwd_user),
	    cmocka_unit_test(test_stdin),
	    cmocka_unit_test(test_failures_timeout_and_cap),
	    cmocka_unit_test(test_concurrent_commands),
	    cmocka_unit_test(test_pause_resume),
	    cmocka_unit_test(test_bad_specs),
	    cmocka_unit_test(test_guest_panic_is_reported),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
