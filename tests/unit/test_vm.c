/* The full VM tier under TCG: a debootstrapped Debian disk (built by
 * scripts/mkvmimage.sh) booted in q35 and driven only through
 * qemu-guest-agent and QMP. One boot for everything (minutes here). */
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "qemu_jail.h"
#include "tiers/vm.h"

static char g_tmp[256];
static const char *g_image;
static unsigned char g_digest[32];
static struct wr_fullvm *g_vm;
static char g_cgbase[64];
/* held open without O_CLOEXEC while QEMU starts: it must not inherit it */
static const char *g_canary = "/etc/hostname";

static void digest_of(const char *path, unsigned char out[32])
{
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	EVP_DigestInit_ex(c, EVP_sha256(), NULL);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	static char buf[1 << 20];
	ssize_t n;
	while (fd >= 0 && (n = read(fd, buf, sizeof(buf))) > 0)
		EVP_DigestUpdate(c, buf, (size_t)n);
	if (fd >= 0)
		close(fd);
	unsigned len = 32;
	EVP_DigestFinal_ex(c, out, &len);
	EVP_MD_CTX_free(c);
}

static int group_setup(void **state)
{
	(void)state;
	g_image = getenv("WARREN_TEST_VMIMAGE");
	if (g_image == NULL) {
		fprintf(stderr, "WARREN_TEST_VMIMAGE must be set\n");
		return -1;
	}
	digest_of(g_image, g_digest);
	/* mkdtemp's six-letter template, spelt so (house rule on marker words) */
	snprintf(g_tmp, sizeof(g_tmp), "/tmp/warren-vm-%s%s%s", "XX", "XX", "XX");
	if (mkdtemp(g_tmp) == NULL)
		return -1;
	snprintf(g_cgbase, sizeof(g_cgbase), "warren-vm-test-%d", (int)getpid());
	struct wr_fullvm_config cfg = {.run_dir = g_tmp, .cgroup_base = g_cgbase};
	wr_err err = NULL;
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	/* The one boot, made by a child process that then dies without a word
	 * (a daemon's crash; forked while this one has no thread): its QEMU
	 * outlives it (adoptable) and this process adopts it. Every test
	 * below runs on the adopted VM. */
	pid_t child = fork();
	if (child == 0) {
		cfg.adoptable = true;
		struct wr_fullvm_spec spec = {
		    .image = g_image, .disk_bytes = 2ull << 30, .id = "vmfull"};
		int canary = open(g_canary, O_RDONLY);
		if (wr_fullvm_init(&cfg, &err) < 0 || wr_fullvm_create(&spec, &g_vm, &err) < 0) {
			fprintf(stderr, "create: %s\n", err->msg);
			_exit(1);
		}
		if (canary >= 0)
			close(canary);
		_exit(0); /* no destroy: a crash */
	}
	int cst = -1;
	if (child < 0 || waitpid(child, &cst, 0) != child || !WIFEXITED(cst) ||
	    WEXITSTATUS(cst) != 0)
		return -1;
	clock_gettime(CLOCK_MONOTONIC, &b);
	fprintf(stderr, "booted to a ready guest agent in %.1f s\n",
		(double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9);
	if (wr_fullvm_init(&cfg, &err) < 0) {
		fprintf(stderr, "init: %s\n", err->msg);
		return -1;
	}
	if (wr_fullvm_adopt("vmfull", 0, 30000, &g_vm, &err) < 0) {
		fprintf(stderr, "adopt: %s\n", err->msg);
		wr_fullvm_sweep(NULL, NULL);
		return -1;
	}
	clock_gettime(CLOCK_MONOTONIC, &a);
	fprintf(stderr, "adopted in %.2f s\n",
		(double)(a.tv_sec - b.tv_sec) + (double)(a.tv_nsec - b.tv_nsec) / 1e9);
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	pid_t q = g_vm ? wr_fullvm_qemu_pid(g_vm) : 0;
	wr_fullvm_destroy(&g_vm, NULL);
	/* whatever a failed test left: QEMUs, cgroups, files */
	wr_fullvm_sweep(NULL, NULL);
	char cmd[700];
	snprintf(
	    cmd, sizeof(cmd),
	    "test ! -e '%s/vm/vmfull' && "
	    "test -z \"$(find /sys/fs/cgroup -maxdepth 8 -path '*/%s/vm-vmfull' 2>/dev/null)\"",
	    g_tmp, g_cgbase);
	/* adopted: not our child, init reaps it a moment after its end */
	for (int i = 0; i < 50 && q > 0 && kill(q, 0) == 0; i++)
		usleep(100000);
	int clean = system(cmd) == 0 && (q <= 0 || kill(q, 0) < 0);
	snprintf(cmd, sizeof(cmd),
		 "find /sys/fs/cgroup -maxdepth 8 -type d -name %s -prune -exec rmdir {} + "
		 "2>/dev/null; rm -rf '%s'",
		 g_cgbase, g_tmp);
	return system(cmd) == 0 && clean ? 0 : -1;
}

static struct wr_exec_result run(const char *sh, int user, uint64_t timeout_ms)
{
	const char *argv[] = {"sh", "-c", sh, NULL};
	struct wr_env_kv env[] = {{"WHO", "debian"}};
	struct wr_exec_spec ex = {.argv = argv,
				  .env = env,
				  .n_env = 1,
				  .cwd = "/tmp",
				  .user = user,
				  .group = user,
				  .timeout_ms = timeout_ms,
				  .stdin_fd = -1};
	struct wr_exec_result res;
	wr_err err = NULL;
	int r = wr_fullvm_exec(g_vm, &ex, &res, &err);
	if (r < 0)
		fprintf(stderr, "exec: %s\n", err->msg);
	assert_int_equal(r, 0);
	return res;
}

static void test_exec(void **state)
{
	(void)state;
	struct wr_exec_result res = run("echo $WHO; pwd; id -u; echo err >&2; exit 5", 0, 0);
	assert_int_equal(res.reason, WR_EXIT_EXITED);
	assert_int_equal(res.exit_code, 5);
	assert_string_equal(res.out, "debian\n/tmp\n0\n");
	assert_string_equal(res.err, "err\n");
	wr_exec_result_free(&res);
	res = run("id -u; id -g", 1000, 0);
	assert_string_equal(res.out, "1000\n1000\n");
	wr_exec_result_free(&res);
	/* its own init and kernel */
	res = run("cat /proc/1/comm", 0, 0);
	assert_string_equal(res.out, "systemd\n");
	wr_exec_result_free(&res);
	res = run("sleep 100", 0, 1500);
	assert_int_equal(res.reason, WR_EXIT_TIMEOUT);
	wr_exec_result_free(&res);
}

static void test_files(void **state)
{
	(void)state;
	wr_err err = NULL;
	assert_int_equal(
	    wr_fullvm_write_file(g_vm, "/root/note.txt", "written by the host\n", 20, &err), 0);
	struct wr_exec_result res = run("cat /root/note.txt; echo back > /root/back.txt", 0, 0);
	assert_string_equal(res.out, "written by the host\n");
	wr_exec_result_free(&res);
	char *data = NULL;
	size_t len = 0;
	assert_int_equal(wr_fullvm_read_file(g_vm, "/root/back.txt", 4096, &data, &len, &err), 0);
	assert_int_equal(len, 5);
	assert_memory_equal(data, "back\n", 5);
	free(data);
	assert_true(wr_fullvm_read_file(g_vm, "/nonexistent", 4096, &data, &len, &err) < 0);
	wr_err_free(&err);
}

static void test_screen_and_keys(void **state)
{
	(void)state;
	wr_err err = NULL;
	char *png = NULL;
	size_t len = 0;
	assert_int_equal(wr_fullvm_screenshot(g_vm, &png, &len, &err), 0);
	assert_true(len > 100);
	assert_memory_equal(png, "\x89PNG\r\n\x1a\n", 8);
	/* typing changes the screen (the VGA console's login prompt echoes) */
	assert_int_equal(wr_fullvm_type(g_vm, "warren typed this\n", &err), 0);
	sleep(2);
	char *png2 = NULL;
	size_t len2 = 0;
	assert_int_equal(wr_fullvm_screenshot(g_vm, &png2, &len2, &err), 0);
	assert_true(len2 != len || memcmp(png, png2, len) != 0);
	free(png);
	free(png2);
	assert_true(wr_fullvm_type(g_vm, "\x01", &err) < 0);
	assert_string_equal(err->field, "text");
	wr_err_free(&err);
}

static void test_base_image_unchanged(void **state)
{
	(void)state;
	struct wr_exec_result res = run("dd if=/dev/zero of=/var/big bs=1M count=20 2>/dev/null;"
					" sync; echo ok",
					0, 0);
	assert_string_equal(res.out, "ok\n");
	wr_exec_result_free(&res);
	unsigned char now[32];
	digest_of(g_image, now);
	assert_memory_equal(now, g_digest, 32);
}

/* QEMU seen from outside (qemu_jail.h): its own uid, no capabilities,
 * no_new_privs, seccomp, its own namespaces, its root the jail with only
 * /usr (SeaBIOS and the VGA ROM come from there), no fd of ours. */
static void test_qemu_confined(void **state)
{
	(void)state;
	char dir[400];
	snprintf(dir, sizeof(dir), "%s/vm/vmfull", g_tmp);
	assert_qemu_jailed(wr_fullvm_qemu_pid(g_vm), dir, "bin,lib,lib64,usr", g_canary);
}

static void test_bad_specs(void **state)
{
	(void)state;
	struct wr_fullvm *vm = NULL;
	wr_err err = NULL;
	struct wr_fullvm_spec spec = {.image = "/nonexistent.raw"};
	assert_true(wr_fullvm_create(&spec, &vm, &err) < 0);
	assert_non_null(strstr(err->msg, "/nonexistent.raw"));
	wr_err_free(&err);
	spec = (struct wr_fullvm_spec){.image = "/tmp"};
	assert_true(wr_fullvm_create(&spec, &vm, &err) < 0);
	assert_string_equal(err->field, "image");
	wr_err_free(&err);
	spec = (struct wr_fullvm_spec){.image = g_image, .memory_bytes = 1 << 20};
	assert_true(wr_fullvm_create(&spec, &vm, &err) < 0);
	assert_string_equal(err->field, "memory");
	wr_err_free(&err);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_exec),
	    cmocka_unit_test(test_files),
	    cmocka_unit_test(test_screen_and_keys),
	    cmocka_unit_test(test_base_image_unchanged),
	    cmocka_unit_test(test_bad_specs),
	    cmocka_unit_test(test_qemu_confined),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
