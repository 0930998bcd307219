/* warren: the command-line front end. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <limits.h>
#include <libgen.h>

#include "cli/cli.h"
#include "common/log.h"

static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *help;
} verbs[] = {
    {"run", cmd_run, "create a sandbox, run a command in it, destroy it (no daemon)"},
    {"create", cmd_create, "create a sandbox in the daemon; prints its id"},
    {"exec", cmd_exec, "run a command in a sandbox, streaming its output"},
    {"call", cmd_call, "one sandboxed function call (argv, or Python code) on a warm zygote"},
    {"shell", cmd_shell, "an interactive terminal in a sandbox (shell or CMD)"},
    {"cp", cmd_cp, "copy files or directories to or from a sandbox"},
    {"ls", cmd_ls, "list sandboxes, or files with SANDBOX:PATH"},
    {"inspect", cmd_inspect, "show a sandbox"},
    {"set-timeout", cmd_set_timeout, "make a sandbox expire DUR from now"},
    {"events", cmd_events, "show a sandbox's event log"},
    {"screenshot", cmd_screenshot, "save a VM sandbox's screen as PNG"},
    {"input", cmd_input, "type, press keys, move, click or scroll in a VM sandbox"},
    {"pause", cmd_pause, "freeze sandboxes (memory kept, lifetime stopped)"},
    {"resume", cmd_resume, "resume paused sandboxes"},
    {"snapshot", cmd_snapshot, "capture a sandbox's filesystem as a store image"},
    {"fork", cmd_fork, "start N new sandboxes from a sandbox's current filesystem"},
    {"lease", cmd_lease, "leases of training jobs: create, heartbeat, suspend, release"},
    {"network", cmd_network, "show or change a sandbox's network policy"},
    {"ports", cmd_ports, "list, publish or unpublish a sandbox's ports on the host"},
    {"rm", cmd_rm, "kill sandboxes, or remove files with SANDBOX:PATH"},
    {"image", cmd_image, "the node's images: import, ls, inspect, tag, rm, pin, gc"},
};

static void usage(FILE *f)
{
	fprintf(f, "usage: warren <command> [options]\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
		fprintf(f, "  %-12s %s\n", verbs[i].name, verbs[i].help);
	fprintf(f, "\nRun 'warren <command> --help' for a command's options.\n");
}

int cli_usage_error(const char *opt, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (opt)
		fprintf(stderr, "warren: %s: %s\n", opt, msg);
	else
		fprintf(stderr, "warren: %s\n", msg);
	return WR_EXIT_WARREN;
}

const char *cli_init_path(void)
{
	static char path[PATH_MAX];
	const char *env = getenv("WARREN_INIT");
	if (env && *env)
		return env;
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		self[n] = 0;
		snprintf(path, sizeof(path), "%s/warren-init", dirname(self));
		if (access(path, X_OK) == 0)
			return path;
	}
	snprintf(path, sizeof(path), "%s/warren-init", WARREN_LIBEXECDIR);
	return path;
}

int main(int argc, char **argv)
{
	wr_log_init("warren", WR_LOG_WARN);
	if (argc < 2) {
		usage(stderr);
		return WR_EXIT_WARREN;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		usage(stdout);
		return 0;
	}
	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
		if (strcmp(argv[1], verbs[i].name) == 0)
			return verbs[i].fn(argc - 1, argv + 1);
	return cli_usage_error(NULL, "unknown command '%s' (see 'warren --help')", argv[1]);
}
