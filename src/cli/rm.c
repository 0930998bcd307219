/* warren rm: kill sandboxes (SANDBOX) or remove files (SANDBOX:PATH). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static void rm_usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: warren rm [options] SANDBOX|SANDBOX:PATH...\n\n"
	    "SANDBOX kills the sandbox (its record stays, in state killed);\n"
	    "SANDBOX:PATH removes a file or directory inside it.\n\n"
	    "  -r, --recursive  remove directories and their contents\n"
	    "  -f, --force      no error for what is already gone or not running\n" CLI_CONN_HELP);
}

static bool ignorable(const warren_error *err)
{
	const char *code = warren_error_code(err);
	return strcmp(code, "not_found") == 0 || strcmp(code, "conflict") == 0;
}

static int rm_one(warren_client *cl, const char *arg, bool recursive, bool force, bool json)
{
	warren_sandbox *sb = NULL;
	warren_error *err = NULL;
	char *id = NULL;
	const char *path = NULL;
	bool is_file = cli_split_remote(arg, &id, &path);
	int r = warren_sandbox_connect(cl, is_file ? id : arg, &sb, &err);
	if (r >= 0 && is_file)
		r = warren_file_remove(sb, path, recursive, &err);
	else if (r >= 0)
		r = warren_sandbox_kill(sb, &err);
	free(id);
	warren_sandbox_free(sb);
	if (r < 0 && force && ignorable(err)) {
		warren_error_free(err);
		return 0;
	}
	if (r < 0)
		return cli_fail(err);
	if (json) {
		json_t *o = json_pack("{ss}", "removed", arg);
		char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
		printf("%s\n", text ? text : "{}");
		free(text);
		json_decref(o);
	} else
		printf("%s\n", arg);
	return 0;
}

int cmd_rm(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"recursive", no_argument, NULL, 'r'},
	    {"force", no_argument, NULL, 'f'},
	    CLI_CONN_OPTIONS,
	    {0},
	};
	struct cli_conn cc = {0};
	bool recursive = false, force = false;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hrf", opts, NULL)) != -1) {
		if (cli_conn_opt(&cc, c, optarg))
			continue;
		switch (c) {
		case 'r': recursive = true; break;
		case 'f': force = true; break;
		case 'h': rm_usage(stdout); return 0;
		default: return cli_bad_option(c, argv);
		}
	}
	if (optind >= argc)
		return cli_usage_error(NULL,
				       "nothing to remove (warren rm SANDBOX|SANDBOX:PATH...)");
	warren_client *cl = NULL;
	int r = cli_connect(&cc, &cl);
	if (r)
		return r;
	for (int i = optind; i < argc; i++)
		if (rm_one(cl, argv[i], recursive, force, cc.json))
			r = WR_EXIT_WARREN;
	warren_client_free(cl);
	return r;
}
