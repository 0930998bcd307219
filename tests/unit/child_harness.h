/* SPDX-License-Identifier: Apache-2.0 */
/* Child-process harness shared by the unit tests of the isolation layers
 * (caps, Landlock, seccomp): each case forks, applies a layer in the child
 * (which the test runner must never carry on with) and checks the child's
 * outcome from the parent. Include after <cmocka.h>. */
#ifndef WARREN_TESTS_CHILD_HARNESS_H
#define WARREN_TESTS_CHILD_HARNESS_H

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* In a child: report a failed condition with errno and return 1. */
#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: check failed: %s (errno %d %s)\n", __FILE__,       \
				__LINE__, #cond, errno, strerrorname_np(errno));                   \
			return 1;                                                                  \
		}                                                                                  \
	} while (0)

/* In a child: a raw syscall expected to fail with exactly `want`. */
#define CHECK_ERRNO(call, want)                                                                    \
	do {                                                                                       \
		errno = 0;                                                                         \
		long r_ = (long)(call);                                                            \
		int e_ = errno;                                                                    \
		if (r_ != -1 || e_ != (want)) {                                                    \
			fprintf(stderr, "%s:%d: %s: want -1/%s, got %ld/%s\n", __FILE__, __LINE__, \
				#call, strerrorname_np(want), r_, strerrorname_np(e_));            \
			return 1;                                                                  \
		}                                                                                  \
	} while (0)

typedef int (*child_fn)(void *arg);

/* The child leaves through a raw exit_group: _exit() is noreturn, and ASan
 * prepares noreturn calls with sigaltstack(), which a seccomp profile may
 * refuse. Fault signals go back to their default action so that neither
 * ASan's nor cmocka's handler (which longjmps back into the test runner)
 * can make a dying child run the remaining tests. */
static inline void child_exit(int code)
{
	syscall(SYS_exit_group, code);
}

static inline void child_setup(void)
{
	static const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGSYS};
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		signal(sigs[i], SIG_DFL);
}

/* Fork, run fn in the child, return the raw wait status. */
static inline int run_child(child_fn fn, void *arg)
{
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		child_setup();
		child_exit(fn(arg));
	}
	int st = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return st;
}

/* Fail the test unless the wait status is a clean exit 0. */
static inline void check_status(int st)
{
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		fail_msg("child failed: %s %d", WIFEXITED(st) ? "exit" : "signal",
			 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
}

static inline void expect_child_ok(child_fn fn, void *arg)
{
	check_status(run_child(fn, arg));
}

#endif
