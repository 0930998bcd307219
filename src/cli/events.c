/* warren events: a sandbox's event log. */
#include <stdio.h>

#include "cli/cli.h"
#include "common/util.h"

static void events_usage(FILE *f)
{
	fprintf(f, "usage: warren events [options] SANDBOX\n\n"
		   "  --since SEQ     only events after sequence number SEQ\n"
		   "  --limit N       at most N events (1..1000)\n" CLI_CONN_HELP);
}

enum {
	OPT_SINCE = 1000,
	OPT_LIMIT,
};

int cmd_events(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"since", required_argument, NULL, OPT_SINCE},
	    {"limit", required_argument, NULL, OPT_LIMIT},
	    CLI_CONN_OPTIONS,
	    {0},
	};
	struct cli_conn cc = {0};
	uint64_t since = 0, limit = 0;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (cli_conn_opt(&cc, c, optarg))
			continue;
		switch (c) {
		case OPT_SINCE:
			if (wr_parse_u64(optarg, INT64_MAX, &since) < 0)
				return cli_usage_error("--since", "'%s' is not a sequence number",
						       optarg);
			break;
		case OPT_LIMIT:
			if (wr_parse_u64(optarg, 1000, &limit) < 0 || limit == 0)
				return cli_usage_error("--limit", "'%s' is not between 1 and 1000",
						       optarg);
			break;
		case 'h': events_usage(stdout); return 0;
		default: return cli_bad_option(c, argv);
		}
	}
	if (optind >= argc)
		return cli_usage_error(NULL, "no sandbox given (warren events SANDBOX)");
	if (optind + 1 < argc)
		return cli_usage_error(argv[optind + 1], "unexpected argument");

	warren_client *cl = NULL;
	warren_sandbox *sb = NULL;
	warren_event_list *ev = NULL;
	warren_error *err = NULL;
	int r = cli_connect(&cc, &cl);
	if (r)
		return r;
	if (warren_sandbox_connect(cl, argv[optind], &sb, &err) < 0 ||
	    warren_sandbox_events(sb, (int64_t)since, (int)limit, &ev, &err) < 0) {
		r = cli_fail(err);
	} else if (cc.json) {
		printf("[");
		for (size_t i = 0; i < ev->count; i++)
			printf("%s%s", i ? "," : "",
			       ev->events[i].json ? ev->events[i].json : "{}");
		printf("]\n");
	} else {
		printf("%-6s %-24s %-18s %s\n", "SEQ", "TIME", "TYPE", "DETAIL");
		for (size_t i = 0; i < ev->count; i++)
			printf("%-6lld %-24s %-18s %s\n", (long long)ev->events[i].seq,
			       ev->events[i].time ? ev->events[i].time : "-",
			       ev->events[i].type ? ev->events[i].type : "-",
			       ev->events[i].detail_json ? ev->events[i].detail_json : "{}");
	}
	warren_event_list_free(ev);
	warren_sandbox_free(sb);
	warren_client_free(cl);
	return r;
}
