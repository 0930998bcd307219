/* warren set-timeout: make a sandbox expire DUR from now. */
#include <stdio.h>

#include "cli/cli.h"

static void set_timeout_usage(FILE *f)
{
	fprintf(f, "usage: warren set-timeout [options] SANDBOX DUR\n\n"
		   "DUR counts from now (e.g. 600, 10m, 2h): it extends or shortens the\n"
		   "sandbox's lifetime.\n\n" CLI_CONN_HELP);
}

int cmd_set_timeout(int argc, char **argv)
{
	static const struct option opts[] = {CLI_CONN_OPTIONS, {0}};
	struct cli_conn cc = {0};
	int64_t seconds;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (cli_conn_opt(&cc, c, optarg))
			continue;
		if (c == 'h') {
			set_timeout_usage(stdout);
			return 0;
		}
		return cli_bad_option(c, argv);
	}
	if (argc - optind != 2)
		return cli_usage_error(NULL,
				       "expected SANDBOX and DUR (warren set-timeout SANDBOX DUR)");
	if (cli_parse_seconds("DUR", argv[optind + 1], &seconds))
		return WR_EXIT_WARREN;

	warren_client *cl = NULL;
	warren_sandbox *sb = NULL;
	warren_sandbox_info *info = NULL;
	warren_error *err = NULL;
	int r = cli_connect(&cc, &cl);
	if (r)
		return r;
	if (warren_sandbox_connect(cl, argv[optind], &sb, &err) < 0 ||
	    warren_sandbox_set_timeout(sb, seconds, &info, &err) < 0)
		r = cli_fail(err);
	else if (cc.json)
		cli_print_json(info->json);
	else
		printf("%s expires at %s\n", info->id, info->expires_at ? info->expires_at : "-");
	warren_sandbox_info_free(info);
	warren_sandbox_free(sb);
	warren_client_free(cl);
	return r;
}
