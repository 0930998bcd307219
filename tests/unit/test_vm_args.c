/* The vm tier's UEFI firmware arguments: OVMF as two pflash chips from fds
 * (the code read-only, a per-VM copy of the variable store), and that
 * QEMU, given exactly these arguments under the tier's seccomp sandbox,
 * runs OVMF to its boot manager (its serial output says so) without ever
 * opening a firmware path itself; with Secure Boot (uefi-secure: SMM, the
 * pflash in secure mode, Microsoft's keys enrolled) OVMF refuses to start
 * an unsigned image (its own built-in shell: "Security Violation"), which
 * plain OVMF starts. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
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

#include "tiers/vm.h"

#define CODE "/usr/share/OVMF/OVMF_CODE_4M.fd"
#define VARS "/usr/share/OVMF/OVMF_VARS_4M.fd"
#define SB_CODE "/usr/share/OVMF/OVMF_CODE_4M.ms.fd"
#define SB_VARS "/usr/share/OVMF/OVMF_VARS_4M.ms.fd"

static void free_argv(char **argv, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(argv[i]);
}

/* firmware fw's arguments for code fd 9 and vars fds 10, 11 are want */
static void expect_uefi_argv(enum wr_vm_firmware fw, const char *const *want, size_t nwant)
{
	char *argv[16] = {0};
	size_t n = 0;
	assert_int_equal(wr_fullvm_uefi_args(argv, 16, &n, fw, 9, 10, 11), 0);
	assert_int_equal(n, nwant);
	for (size_t i = 0; i < n; i++)
		assert_string_equal(argv[i], want[i]);
	free_argv(argv, n);
}

static void test_uefi_argv(void **state)
{
	(void)state;
	const char *want[] = {
	    "-add-fd", "fd=9,set=3",
	    "-drive",  "if=pflash,unit=0,format=raw,readonly=on,file=/dev/fdset/3",
	    "-add-fd", "fd=10,set=4",
	    "-add-fd", "fd=11,set=4",
	    "-drive",  "if=pflash,unit=1,format=raw,file=/dev/fdset/4"};
	expect_uefi_argv(WR_VM_FW_UEFI, want, sizeof(want) / sizeof(want[0]));
	char *argv[16] = {0};
	size_t n = 0;
	/* no room: refused, nothing past the bound written */
	char *small[4] = {0};
	assert_int_equal(wr_fullvm_uefi_args(small, 4, &n, WR_VM_FW_UEFI, 9, 10, 11), -E2BIG);
	assert_true(n < 4 && small[3] == NULL);
	free_argv(small, n);
	/* SeaBIOS has no firmware arguments */
	n = 0;
	assert_int_equal(wr_fullvm_uefi_args(argv, 16, &n, WR_VM_FW_BIOS, 9, 10, 11), -EINVAL);
	assert_int_equal(n, 0);
}

static void test_secure_argv_and_names(void **state)
{
	(void)state;
	const char *want[] = {
	    "-add-fd", "fd=9,set=3",
	    "-drive",  "if=pflash,unit=0,format=raw,readonly=on,file=/dev/fdset/3",
	    "-add-fd", "fd=10,set=4",
	    "-add-fd", "fd=11,set=4",
	    "-drive",  "if=pflash,unit=1,format=raw,file=/dev/fdset/4",
	    "-global", "driver=cfi.pflash01,property=secure,value=on"};
	expect_uefi_argv(WR_VM_FW_UEFI_SECURE, want, sizeof(want) / sizeof(want[0]));
	assert_string_equal(wr_fullvm_machine(WR_VM_FW_UEFI_SECURE), "q35,smm=on");
	assert_string_equal(wr_fullvm_machine(WR_VM_FW_UEFI), "q35");
	assert_string_equal(wr_fullvm_machine(WR_VM_FW_BIOS), "q35");
	enum wr_vm_firmware f = WR_VM_FW_UEFI;
	assert_int_equal(wr_fullvm_firmware_parse(NULL, &f), 0);
	assert_int_equal(f, WR_VM_FW_BIOS);
	const char *names[] = {"bios", "uefi", "uefi-secure"};
	for (int i = 0; i < 3; i++) {
		assert_int_equal(wr_fullvm_firmware_parse(names[i], &f), 0);
		assert_int_equal(f, i);
		assert_string_equal(wr_fullvm_firmware_name(f), names[i]);
	}
	assert_int_equal(wr_fullvm_firmware_parse("efi", &f), -EINVAL);
	assert_int_equal(wr_fullvm_firmware_parse("uefi-secure ", &f), -EINVAL);
	assert_int_equal(wr_fullvm_firmware_parse("", &f), -EINVAL);
}

static int copy(const char *from, const char *to)
{
	int in = open(from, O_RDONLY | O_CLOEXEC);
	int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	char buf[65536];
	ssize_t k;
	int r = in >= 0 && out >= 0 ? 0 : -1;
	while (r == 0 && (k = read(in, buf, sizeof(buf))) > 0)
		r = write(out, buf, (size_t)k) == k ? 0 : -1;
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	return r;
}

/* QEMU with firmware f (code, a copy of vars) and no disk until its
 * serial output shows want; true when it did. */
static bool ovmf_shows(enum wr_vm_firmware f, const char *code_path, const char *vars_path,
		       const char *want)
{
	if (access(code_path, R_OK) != 0 || access(vars_path, R_OK) != 0) {
		fprintf(stderr, "(skipped: Debian's ovmf is not installed; scripts/deps.sh)\n");
		skip();
	}
	char dir[64], vars[96];
	snprintf(dir, sizeof(dir), "/tmp/warren-uefi-%d", (int)getpid());
	assert_int_equal(mkdir(dir, 0700), 0);
	snprintf(vars, sizeof(vars), "%s/efivars.fd", dir);
	assert_int_equal(copy(vars_path, vars), 0);
	char *argv[40] = {0};
	size_t n = 0;
	const char *head[] = {
	    "qemu-system-x86_64",
	    "-M",
	    wr_fullvm_machine(f),
	    "-accel",
	    "tcg",
	    "-m",
	    "256",
	    "-nodefaults",
	    "-no-user-config",
	    "-display",
	    "none",
	    "-serial",
	    "stdio",
	    "-sandbox",
	    "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"};
	for (size_t i = 0; i < sizeof(head) / sizeof(head[0]); i++)
		argv[n++] = strdup(head[i]);
	assert_int_equal(wr_fullvm_uefi_args(argv, 40, &n, f, 10, 11, 12), 0);
	int out[2];
	assert_int_equal(pipe(out), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int code = open(code_path, O_RDONLY), rw = open(vars, O_RDWR),
		    ro = open(vars, O_RDONLY);
		if (code < 0 || rw < 0 || ro < 0 || dup2(code, 10) < 0 || dup2(rw, 11) < 0 ||
		    dup2(ro, 12) < 0 || dup2(out[1], 1) < 0)
			_exit(127);
		int dn = open("/dev/null", O_RDWR);
		dup2(dn, 0);
		dup2(dn, 2);
		for (int fd = 13; fd < 1024; fd++)
			close(fd);
		for (int fd = 3; fd < 10; fd++)
			close(fd);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(out[1]);
	char buf[1 << 16];
	size_t have = 0;
	bool seen = false;
	time_t end = time(NULL) + 240; /* TCG on a loaded machine */
	while (!seen && time(NULL) < end && have < sizeof(buf) - 1) {
		struct pollfd p = {.fd = out[0], .events = POLLIN};
		if (poll(&p, 1, 1000) <= 0)
			continue;
		ssize_t k = read(out[0], buf + have, sizeof(buf) - 1 - have);
		if (k <= 0)
			break;
		have += (size_t)k;
		buf[have] = 0;
		seen = strstr(buf, want) != NULL;
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	close(out[0]);
	free_argv(argv, n);
	unlink(vars);
	rmdir(dir);
	if (!seen)
		fprintf(stderr, "serial (no \"%s\"): %.*s\n", want, (int)have, buf);
	return seen;
}

static void test_ovmf_runs_from_fds(void **state)
{
	(void)state;
	/* OVMF's boot manager prints "BdsDxe: ..." on the serial port */
	assert_true(ovmf_shows(WR_VM_FW_UEFI, CODE, VARS, "BdsDxe"));
}

static void test_secure_boot_refuses_unsigned(void **state)
{
	(void)state;
	/* with no disk, the boot manager tries its built-in shell, which is
	 * not signed: Secure Boot refuses it (plain OVMF starts it) */
	assert_true(ovmf_shows(WR_VM_FW_UEFI_SECURE, SB_CODE, SB_VARS, "Security Violation"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_uefi_argv),
	    cmocka_unit_test(test_secure_argv_and_names),
	    cmocka_unit_test(test_ovmf_runs_from_fds),
	    cmocka_unit_test(test_secure_boot_refuses_unsigned),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
