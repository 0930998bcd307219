/* warren shell: an interactive terminal in a running sandbox.
 *
 * The local terminal (when stdin is one) goes into raw mode so every key,
 * ^C and ^D included, reaches the remote terminal, which does the echo and
 * line editing; it is restored on every way out (normal end, errors, and
 * the signals that end this program). Two threads: this one reads frames
 * and writes output, an input thread forwards stdin and window sizes (so a
 * command that is not reading its input never stops its output). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/cleanup.h"
#include "common/util.h"

static void shell_usage(FILE *f)
{
	fprintf(f, "usage: warren shell [options] SANDBOX [--] [CMD [ARG...]]\n\n"
		   "  -e, --env K=V        environment variable (repeatable)\n"
		   "  -w, --workdir DIR    working directory\n"
		   "  -u, --user UID       user to run as\n" CLI_CONN_HELP
		   "\nRuns CMD (default: the sandbox's shell) on a terminal in the sandbox.\n"
		   "When standard input is a terminal it is put in raw mode and its size\n"
		   "follows the window; otherwise standard input is sent as typed text and\n"
		   "its end as ^D (end a script piped into a shell with 'exit': a line\n"
		   "editor may not see a ^D typed ahead). TERM is passed on unless -e sets\n"
		   "it. Exits with the command's status (128+N when killed by signal N,\n"
		   "137 when killed), 125 when warren itself fails.\n");
}

static struct termios g_saved;
static volatile sig_atomic_t g_raw;
static int g_tty = -1;		  /* the local terminal whose size is followed */
static int g_winch[2] = {-1, -1}; /* SIGWINCH -> the input thread */

static void restore(void)
{
	if (g_raw) {
		tcsetattr(0, TCSADRAIN, &g_saved);
		g_raw = 0;
	}
}

static void on_fatal(int sig)
{
	restore(); /* tcsetattr is async-signal-safe */
	signal(sig, SIG_DFL);
	raise(sig);
}

static void on_winch(int sig)
{
	(void)sig;
	int e = errno;
	if (write(g_winch[1], "w", 1) < 0) {
		/* a full pipe already holds a pending resize */
	}
	errno = e;
}

static int raw_mode(void)
{
	if (tcgetattr(0, &g_saved) < 0)
		return -errno;
	struct termios t = g_saved;
	cfmakeraw(&t);
	struct sigaction sa = {.sa_handler = on_fatal};
	sigemptyset(&sa.sa_mask);
	int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		sigaction(sigs[i], &sa, NULL);
	atexit(restore);
	g_raw = 1;
	if (tcsetattr(0, TCSADRAIN, &t) < 0) {
		g_raw = 0;
		return -errno;
	}
	return 0;
}

static bool win_size(unsigned *rows, unsigned *cols)
{
	struct winsize ws;
	if (g_tty < 0 || ioctl(g_tty, TIOCGWINSZ, &ws) < 0 || ws.ws_row == 0 || ws.ws_col == 0)
		return false;
	*rows = ws.ws_row;
	*cols = ws.ws_col;
	return true;
}

static void send_size(warren_pty *pty)
{
	unsigned rows, cols;
	warren_error *err = NULL;
	if (win_size(&rows, &cols) && warren_pty_resize(pty, rows, cols, &err) < 0)
		warren_error_free(err);
}

/* stdin and window sizes -> the daemon. A send failure ends the thread:
 * the reader sees the broken connection. */
static void *input_main(void *arg)
{
	warren_pty *pty = arg;
	static char buf[65536];
	bool in_open = true;
	for (;;) {
		struct pollfd pf[2] = {{.fd = g_winch[0], .events = POLLIN},
				       {.fd = 0, .events = POLLIN}};
		if (poll(pf, in_open ? 2 : 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			return NULL;
		}
		if (pf[0].revents & POLLIN) {
			char drain[64];
			if (read(g_winch[0], drain, sizeof(drain)) > 0)
				send_size(pty);
		}
		if (!in_open || !(pf[1].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		ssize_t n = read(0, buf, sizeof(buf));
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		warren_error *err = NULL;
		int r;
		if (n > 0) {
			r = warren_pty_send_data(pty, buf, (size_t)n, &err);
		} else {
			in_open = false; /* end of input: ^D on the remote terminal */
			r = warren_pty_send_eof(pty, &err);
		}
		if (r < 0) {
			warren_error_free(err);
			return NULL;
		}
	}
}

static int status_of(const warren_exec_result *res)
{
	const char *reason = res->reason ? res->reason : "exited";
	if (strcmp(reason, "killed") == 0 || strcmp(reason, "oom") == 0)
		return 137;
	if (strcmp(reason, "timeout") == 0)
		return 124;
	if (strcmp(reason, "signaled") == 0 && res->signal > 0)
		return 128 + res->signal;
	return res->exit_code & 0xff;
}

/* Frames -> stdout until the exit frame. */
static int relay_output(warren_pty *pty, warren_exec_result **res)
{
	bool broken = false;
	for (;;) {
		const void *data;
		size_t len;
		warren_error *err = NULL;
		int t = warren_pty_read_frame(pty, &data, &len, res, &err);
		if (t < 0) {
			restore();
			return cli_fail(err);
		}
		if (t == WARREN_PTY_EXIT)
			return 0;
		if (!broken && wr_write_all(1, data, len) < 0)
			broken = true;
	}
}

int cmd_shell(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"env", required_argument, NULL, 'e'},
	    {"workdir", required_argument, NULL, 'w'},
	    {"user", required_argument, NULL, 'u'},
	    CLI_CONN_OPTIONS,
	    {0},
	};
	struct cli_conn cc = {0};
	warren_pty_opts po = WARREN_PTY_OPTS_INIT;
	_cleanup_free_ warren_kv *env = calloc((size_t)argc + 1, sizeof(*env));
	bool term_set = false;
	int c;
	if (env == NULL)
		return cli_usage_error(NULL, "out of memory");
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:he:w:u:", opts, NULL)) != -1) {
		if (cli_conn_opt(&cc, c, optarg))
			continue;
		switch (c) {
		case 'e':
			if (cli_parse_kv("--env", optarg, &env[po.n_env]))
				return WR_EXIT_WARREN;
			term_set = term_set || strcmp(env[po.n_env].key, "TERM") == 0;
			po.n_env++;
			break;
		case 'w': po.cwd = optarg; break;
		case 'u':
			if (cli_parse_user(optarg, &po.user))
				return WR_EXIT_WARREN;
			po.user_set = true;
			break;
		case 'h': shell_usage(stdout); return 0;
		default: return cli_bad_option(c, argv);
		}
	}
	if (optind >= argc)
		return cli_usage_error(NULL, "no sandbox given (warren shell SANDBOX [CMD...])");
	const char *id = argv[optind++];
	if (optind < argc && strcmp(argv[optind], "--") == 0)
		optind++;
	if (optind < argc)
		po.argv = (const char *const *)&argv[optind];
	const char *term = getenv("TERM");
	if (!term_set && term && *term)
		env[po.n_env++] = (warren_kv){"TERM", term};
	po.env = env;
	g_tty = isatty(0) ? 0 : isatty(1) ? 1 : -1;
	unsigned rows, cols;
	if (win_size(&rows, &cols)) {
		po.rows = rows;
		po.cols = cols;
	}
	signal(SIGPIPE, SIG_IGN);

	warren_client *cl;
	warren_sandbox *sb;
	warren_pty *pty = NULL;
	warren_exec_result *res = NULL;
	warren_error *err = NULL;
	int r = cli_open_sandbox(&cc, id, &cl, &sb);
	if (r)
		return r;
	if (warren_sandbox_pty_open(sb, &po, &pty, &err) < 0) {
		r = cli_fail(err);
		goto out;
	}
	if (pipe2(g_winch, O_CLOEXEC | O_NONBLOCK) < 0) {
		r = cli_usage_error(NULL, "pipe: %s", strerror(errno));
		goto out;
	}
	struct sigaction sa = {.sa_handler = on_winch, .sa_flags = SA_RESTART};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGWINCH, &sa, NULL);
	if (isatty(0) && raw_mode() < 0) {
		r = cli_usage_error(NULL, "cannot put the terminal in raw mode: %s",
				    strerror(errno));
		goto out;
	}
	send_size(pty); /* it may have changed while connecting */
	pthread_t in;
	if (pthread_create(&in, NULL, input_main, pty) != 0) {
		restore();
		r = cli_usage_error(NULL, "cannot start the input thread");
		goto out;
	}
	pthread_detach(in); /* blocked in poll() on stdin when we are done */
	r = relay_output(pty, &res);
	restore();
	if (r == 0)
		r = status_of(res);
	/* the input thread may still use pty: end the process without
	 * freeing what it holds */
	warren_exec_result_free(res);
	fflush(stdout);
	_exit(r);
out:
	restore();
	warren_pty_close(pty);
	warren_sandbox_free(sb);
	warren_client_free(cl);
	return r;
}
