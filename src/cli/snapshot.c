/* warren snapshot / fork: a sandbox's filesystem as a store image, and N
 * new sandboxes from it. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common/util.h"

static void snapshot_usage(FILE *f)
{
	fprintf(f, "usage: warren snapshot [--processes] [options] SANDBOX [NAME[:TAG]]\n\n"
		   "Captures the sandbox's filesystem changes as an image of the node's store\n"
		   "(default name snapshot/SANDBOX:<ms>). 'warren create --image NAME' then\n"
		   "starts from it; 'warren image push' sends it to a registry.\n\n"
		   "  --processes    its running processes too (container tier, with CRIU): a\n"
		   "                 sandbox created from the snapshot goes on from them\n"
		   "\n" CLI_CONN_HELP);
}

int cmd_snapshot(int argc, char **argv)
{
	enum { OPT_PROCS = 1000 };
	static const struct option opts[] = {
	    {"processes", no_argument, NULL, OPT_PROCS}, CLI_CONN_OPTIONS, {0}};
	struct cli_conn cc = {0};
	unsigned flags = 0;
	int c, r = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (cli_conn_opt(&cc, c, optarg))
			continue;
		if (c == 'h') {
			snapshot_usage(stdout);
			return 0;
		}
		if (c == OPT_PROCS)
			flags |= WARREN_SNAPSHOT_PROCESSES;
		else
			return cli_bad_option(c, argv);
	}
	if (optind >= argc || argc - optind > 2)
		return cli_usage_error(NULL,
				       "expected SANDBOX [NAME] (warren snapshot SANDBOX NAME)");
	warren_client *cl;
	warren_sandbox *sb;
	r = cli_open_sandbox(&cc, argv[optind], &cl, &sb);
	if (r)
		return r;
	warren_image *img = NULL;
	warren_error *err = NULL;
	if (warren_sandbox_snapshot_with(sb, optind + 1 < argc ? argv[optind + 1] : NULL, flags,
					 &img, &err) < 0)
		r = cli_fail(err);
	else if (cc.json)
		cli_print_json(img->json);
	else
		printf("%s %s\n", img->n_refs ? img->refs[0] : "-", img->digest);
	warren_image_free(img);
	warren_sandbox_free(sb);
	warren_client_free(cl);
	return r;
}

static void fork_usage(FILE *f)
{
	fprintf(f,
		"usage: warren fork [--count N] [--memory SIZE] [--cpu N] [--processes] [options] "
		"SANDBOX\n\n"
		"Starts N (default 1, at most 256) new sandboxes from the sandbox's current\n"
		"filesystem, with its settings unless overridden; prints their ids.\n\n"
		"  --count N      how many\n"
		"  --processes    with its running processes too (see warren snapshot)\n"
		"  --memory SIZE  memory limit of the new ones (e.g. 512M)\n"
		"  --cpu N        CPUs of the new ones\n"
		"\n" CLI_CONN_HELP);
}

int cmd_fork(int argc, char **argv)
{
	enum { OPT_COUNT = 1000, OPT_MEMORY, OPT_CPU, OPT_PROCS };
	static const struct option opts[] = {{"count", required_argument, NULL, OPT_COUNT},
					     {"memory", required_argument, NULL, OPT_MEMORY},
					     {"cpu", required_argument, NULL, OPT_CPU},
					     {"processes", no_argument, NULL, OPT_PROCS},
					     CLI_CONN_OPTIONS,
					     {0}};
	struct cli_conn cc = {0};
	uint64_t count = 1, mem = 0;
	double cpu = 0;
	bool procs = false;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (cli_conn_opt(&cc, c, optarg))
			continue;
		if (c == 'h') {
			fork_usage(stdout);
			return 0;
		}
		if (c == OPT_COUNT) {
			if (wr_parse_u64(optarg, 256, &count) < 0 || count == 0)
				return cli_usage_error("--count", "'%s' is not a count of 1 to 256",
						       optarg);
		} else if (c == OPT_MEMORY) {
			if (wr_parse_size(optarg, &mem) < 0 || mem < (1u << 20))
				return cli_usage_error(
				    "--memory", "'%s' is not a size of at least 1M (e.g. 512M)",
				    optarg);
		} else if (c == OPT_PROCS) {
			procs = true;
		} else if (c == OPT_CPU) {
			char *end;
			cpu = strtod(optarg, &end);
			if (*end || end == optarg || !(cpu > 0 && cpu <= 64))
				return cli_usage_error(
				    "--cpu", "'%s' is not a CPU count above 0 and up to 64",
				    optarg);
		} else {
			return cli_bad_option(c, argv);
		}
	}
	if (argc - optind != 1)
		return cli_usage_error(NULL, "expected one SANDBOX (warren fork SANDBOX)");
	char over[128];
	int n = snprintf(over, sizeof(over), "{");
	if (mem)
		n += snprintf(over + n, sizeof(over) - (size_t)n, "\"memory_mb\":%llu",
			      (unsigned long long)((mem + (1u << 20) - 1) >> 20));
	if (cpu > 0)
		n += snprintf(over + n, sizeof(over) - (size_t)n, "%s\"cpu\":%g", mem ? "," : "",
			      cpu);
	if (procs)
		snprintf(over + n, sizeof(over) - (size_t)n, "%s\"processes\":true",
			 mem || cpu > 0 ? "," : "");
	strcat(over, "}");
	warren_client *cl;
	warren_sandbox *sb;
	int r = cli_open_sandbox(&cc, argv[optind], &cl, &sb);
	if (r)
		return r;
	warren_error *err = NULL;
	char **ids = NULL, *json = NULL;
	if (warren_sandbox_fork(sb, (int)count, over, &ids, &json, &err) < 0) {
		r = cli_fail(err);
	} else if (cc.json) {
		cli_print_json(json);
	} else {
		for (size_t i = 0; ids[i]; i++)
			printf("%s\n", ids[i]);
	}
	for (size_t i = 0; ids && ids[i]; i++)
		free(ids[i]);
	free(ids);
	free(json);
	warren_sandbox_free(sb);
	warren_client_free(cl);
	return r;
}
