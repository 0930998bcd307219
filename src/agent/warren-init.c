/* warren-init: PID 1 of a container sandbox.
 *
 * A reaper and nothing else: it never runs a command on anyone's behalf and
 * reads no input. Commands enter the sandbox from the host (setns) and are
 * reparented here as they start (exec.c: the double fork), so we reap them
 * and their orphans; their exit status reaches the host through its own
 * pidfds (PIDFD_INFO_EXIT), never through us. It exits only on SIGTERM or SIGINT
 * sent from outside the sandbox (si_pid == 0 in our PID namespace means the
 * sender lives in an ancestor namespace); its exit tears down the PID
 * namespace.
 *
 * The parent has already dropped every capability, set no_new_privs and
 * applied the init seccomp profile before exec'ing us, and every inherited
 * fd but 0-2 (/dev/null) was close-on-exec.
 *
 * One per sandbox, thousands per node: so it is freestanding (no libc, raw
 * system calls, a few KiB, a handful of resident pages) and starts with no
 * libc initialisation at all. */
#include <asm/unistd.h>
#include <linux/prctl.h>
#include <linux/signal.h>
#include <linux/wait.h>

#ifndef __x86_64__
#error "warren-init: only x86_64 is supported"
#endif

static long sys(long nr, long a, long b, long c, long d)
{
	long ret;
	register long r10 __asm__("r10") = d;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10)
			 : "rcx", "r11", "memory");
	return ret;
}

/* The kernel's siginfo layout for the fields we read. */
struct kinfo {
	int signo, errno_, code;
	int pad;
	int pid; /* si_pid for kill()/tgkill(): 0 when the sender is outside */
	int uid;
	char rest[128 - 24];
};

#define ALL_SIGNALS (~0UL)
#define SIGMASK(s) (1UL << ((s)-1))

__attribute__((noreturn)) static void die(int code)
{
	for (;;)
		sys(__NR_exit_group, code, 0, 0, 0);
}

__attribute__((noreturn, used)) void init_main(void)
{
	unsigned long all = ALL_SIGNALS;
	/* Invariant: every signal is blocked, so none can kill PID 1 by a
	 * default action; each one is looked at below. */
	sys(__NR_rt_sigprocmask, SIG_SETMASK, (long)&all, 0, sizeof(all));
	sys(__NR_prctl, PR_SET_NAME, (long)"warren-init", 0, 0);
	for (;;) {
		struct kinfo si;
		long sig = sys(__NR_rt_sigtimedwait, (long)&all, (long)&si, 0, sizeof(all));
		if (sig < 0)
			continue; /* EINTR */
		if (sig == SIGCHLD) {
			while (sys(__NR_wait4, -1, 0, WNOHANG | __WALL, 0) > 0)
				;
			continue;
		}
		if ((sig == SIGTERM || sig == SIGINT) && si.pid == 0)
			die(0);
		/* anything else, or anything from inside the sandbox: ignored */
	}
}

/* Entry point: align the stack and call init_main. */
__asm__(".text\n"
	".global _start\n"
	"_start:\n"
	"	xor %rbp, %rbp\n"
	"	and $-16, %rsp\n"
	"	call init_main\n"
	"	hlt\n");
