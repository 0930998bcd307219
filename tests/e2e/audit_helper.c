/* audit-helper: attempts the e2e audit tests need, built static by the
 * test and uploaded into the sandbox.
 *   flood NAME N       N calls of a refused syscall (keyctl, ptrace, ...);
 *                      prints "flood <name> refused=<k> errno=<e>"
 *   memfd-reopen       open /proc/self/fd/<memfd> (Landlock refuses: the
 *                      memfd is outside the sandbox's root)
 *   open PATH          open(PATH, O_RDONLY); prints ok or the errno */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static long nr_of(const char *name)
{
	if (strcmp(name, "keyctl") == 0)
		return SYS_keyctl;
	if (strcmp(name, "ptrace") == 0)
		return SYS_ptrace;
	if (strcmp(name, "mount") == 0)
		return SYS_mount;
	if (strcmp(name, "bpf") == 0)
		return SYS_bpf;
	return -1;
}

int main(int argc, char **argv)
{
	if (argc >= 4 && strcmp(argv[1], "flood") == 0) {
		long nr = nr_of(argv[2]);
		long n = atol(argv[3]), refused = 0;
		int last = 0;
		for (long i = 0; i < n; i++)
			if (syscall(nr, 0x4206 * (nr == SYS_ptrace), 1, 0, 0, 0) < 0 &&
			    (errno == EPERM || errno == ENOSYS)) {
				refused++;
				last = errno;
			}
		printf("flood %s refused=%ld errno=%s\n", argv[2], refused,
		       last == EPERM	? "EPERM"
		       : last == ENOSYS ? "ENOSYS"
					: "none");
		return 0;
	}
	if (argc >= 2 && strcmp(argv[1], "memfd-reopen") == 0) {
		int fd = memfd_create("wr-audit", 0);
		char p[64];
		snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
		int r = open(p, O_RDONLY);
		printf("memfd-reopen %s\n", r >= 0 ? "ok" : strerror(errno));
		return 0;
	}
	if (argc >= 3 && strcmp(argv[1], "open") == 0) {
		int r = open(argv[2], O_RDONLY);
		printf("open %s\n", r >= 0 ? "ok" : strerror(errno));
		return 0;
	}
	fprintf(stderr, "usage: audit-helper flood NAME N | memfd-reopen | open PATH\n");
	return 2;
}
