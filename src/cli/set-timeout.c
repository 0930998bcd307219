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
	struct cli_conn cc = {0};
	int64_t seconds;
	int r = cli_conn_only_opts(argc, argv, &cc, set_timeout_usage);
	if (r >= 0)
		return r;
	if (argc - optind != 2)
		return cli_usage_error(NULL,
				       "expected SANDBOX and DUR (warren set-timeout SANDBOX DUR)");
	if (cli_parse_seconds("DUR", argv[optind + 1], &seconds))
		return WR_EXIT_WARREN;

	warren_client *cl;
	warren_sandbox *sb;
	warren_sandbox_info *info = NULL;
	warren_error *err = NULL;
	r = cli_open_sandbox(&cc, argv[optind], &cl, &sb);
	if (r)
		return r;
	if (warren_sandbox_set_timeout(sb, seconds, &info, &err) < 0)
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
