/* warren pause / resume: freeze a sandbox's processes (memory kept, the
 * lifetime clock stopped), or put them on disk (--to-disk), and bring them
 * back. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static void usage(FILE *f, bool pause)
{
	if (pause)
		fprintf(f,
			"usage: warren pause [--to-disk] [options] SANDBOX...\n\n"
			"Freezes every process of each sandbox; memory and files are kept and\n"
			"its lifetime stops counting. Any call that needs it running (exec,\n"
			"cp, shell) resumes it.\n\n"
			"  --to-disk  the processes' state to disk, their memory freed\n"
			"             (containers: CRIU; VMs: the VM's state)\n\n" CLI_CONN_HELP);
	else
		fprintf(f,
			"usage: warren resume [--timeout DUR] [options] SANDBOX...\n\n"
			"  --timeout DUR  a new lifetime from now (default: the time it had left)\n"
			"\n" CLI_CONN_HELP);
}

static int pause_or_resume(int argc, char **argv, bool pause)
{
	enum { OPT_TIMEOUT = 1000, OPT_TO_DISK };
	static const struct option opts[] = {{"timeout", required_argument, NULL, OPT_TIMEOUT},
					     {"to-disk", no_argument, NULL, OPT_TO_DISK},
					     CLI_CONN_OPTIONS,
					     {0}};
	struct cli_conn cc = {0};
	int64_t timeout = 0;
	bool to_disk = false;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (cli_conn_opt(&cc, c, optarg))
			continue;
		if (c == 'h') {
			usage(stdout, pause);
			return 0;
		}
		if (c == OPT_TIMEOUT && !pause) {
			if (cli_parse_seconds("--timeout", optarg, &timeout))
				return WR_EXIT_WARREN;
			continue;
		}
		if (c == OPT_TO_DISK && pause) {
			to_disk = true;
			continue;
		}
		return cli_bad_option(c, argv);
	}
	if (optind >= argc)
		return cli_usage_error(NULL, "expected one or more SANDBOX ids (warren %s SANDBOX)",
				       pause ? "pause" : "resume");
	warren_client *cl = NULL;
	int r = cli_connect(&cc, &cl);
	if (r)
		return r;
	for (int i = optind; i < argc && r == 0; i++) {
		warren_sandbox *sb = NULL;
		warren_sandbox_info *info = NULL;
		warren_error *err = NULL;
		if (warren_sandbox_connect(cl, argv[i], &sb, &err) < 0 ||
		    (pause ? (to_disk ? warren_sandbox_pause_to_disk(sb, &info, &err)
				      : warren_sandbox_pause(sb, &info, &err))
			   : warren_sandbox_resume(sb, timeout, &info, &err)) < 0)
			r = cli_fail(err);
		else if (cc.json)
			cli_print_json(info->json);
		else
			printf("%s %s\n", info->id, info->state);
		warren_sandbox_info_free(info);
		warren_sandbox_free(sb);
	}
	warren_client_free(cl);
	return r;
}

int cmd_pause(int argc, char **argv)
{
	return pause_or_resume(argc, argv, true);
}

int cmd_resume(int argc, char **argv)
{
	return pause_or_resume(argc, argv, false);
}
