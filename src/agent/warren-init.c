/* warren-init: PID 1 of a container sandbox.
 *
 * A reaper and nothing else: it never runs a command on anyone's behalf and
 * reads no input. Commands enter the sandbox from the host (setns), so their
 * orphans are reparented here and reaped. It exits only on SIGTERM sent from
 * outside the sandbox (si_pid == 0 in our PID namespace means the sender
 * lives in an ancestor namespace); its exit tears down the PID namespace.
 *
 * The parent has already dropped every capability, set no_new_privs and
 * applied Landlock and the init seccomp profile before exec'ing us, and every
 * inherited fd but 0-2 (/dev/null) was close-on-exec.
 *
 * Static and tiny on purpose: one per sandbox, thousands per node. */
#include <errno.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void)
{
	sigset_t all;
	sigfillset(&all);
	/* Invariant: every signal is blocked, so none can kill PID 1 by a
	 * default action; we look at each one in sigwaitinfo below. */
	sigprocmask(SIG_SETMASK, &all, NULL);
	prctl(PR_SET_NAME, "warren-init", 0, 0, 0);

	for (;;) {
		siginfo_t si;
		int sig = sigwaitinfo(&all, &si);
		if (sig < 0) {
			if (errno == EINTR)
				continue;
			_exit(1);
		}
		if (sig == SIGCHLD) {
			while (waitpid(-1, NULL, WNOHANG | __WALL) > 0)
				;
			continue;
		}
		if ((sig == SIGTERM || sig == SIGINT) && si.si_pid == 0)
			_exit(0);
		/* anything else, or anything from inside the sandbox: ignored */
	}
}
