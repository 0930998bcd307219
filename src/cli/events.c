/* warren events: audit events (what the node refused or limited), or a
 * sandbox's lifecycle events.
 *
 *   warren events [--denied] [--last N] [--follow] [--sandbox ID] [--layer L]
 *                 [--since T] [--flagged] [--tenant T] [--json]
 *   warren events SANDBOX [--since SEQ] [--limit N]   (lifecycle events) */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "common/util.h"

static void events_usage(FILE *f)
{
	fprintf(f, "usage: warren events [options]          audit events (refusals, limits)\n"
		   "       warren events [--since SEQ] [--limit N] SANDBOX\n"
		   "                                        a sandbox's lifecycle events\n\n"
		   "audit events:\n"
		   "  --denied        only refusals\n"
		   "  --last N        the newest N (1..1000, default 20)\n"
		   "  --follow        then print new ones as they are recorded (Ctrl-C ends)\n"
		   "  --sandbox ID    one sandbox's (also: warren events --layer L SANDBOX)\n"
		   "  --layer L       seccomp, landlock, bpf-net, dns, cgroup-limit, api, file\n"
		   "                  (comma-separated for several)\n"
		   "  --since T       RFC 3339 UTC time, epoch seconds, or ago: 30s, 10m, 2h\n"
		   "  --flagged       only events a detection rule flagged\n"
		   "  --tenant T      another tenant's (admins)\n"
		   "lifecycle events:\n"
		   "  --since SEQ     only events after sequence number SEQ\n"
		   "  --limit N       at most N events (1..1000)\n" CLI_CONN_HELP);
}

enum {
	OPT_SINCE = 1000,
	OPT_LIMIT,
	OPT_DENIED,
	OPT_LAST,
	OPT_FOLLOW,
	OPT_SANDBOX,
	OPT_LAYER,
	OPT_FLAGGED,
	OPT_TENANT,
};

static void print_event(const warren_audit_event *e, bool json)
{
	if (json) {
		printf("%s\n", e->json ? e->json : "{}");
	} else {
		char when[20] = "-";
		/* 2026-12-02T13:50:00.123Z -> 12-02 13:50:00 */
		if (e->time && strlen(e->time) >= 19)
			snprintf(when, sizeof(when), "%.5s %.8s", e->time + 5, e->time + 11);
		printf("%-14s %-16s %-12s %-8s %s", when,
		       e->sandbox && *e->sandbox ? e->sandbox : "-", e->layer ? e->layer : "-",
		       e->severity ? e->severity : "-", e->summary ? e->summary : "-");
		if (e->rule)
			printf("  [%s]", e->rule);
		printf("\n");
	}
	fflush(stdout);
}

static int on_follow(void *ctx, const warren_audit_event *e)
{
	print_event(e, *(bool *)ctx);
	return 0;
}

static int lifecycle(struct cli_conn *cc, const char *id, uint64_t since, uint64_t limit)
{
	warren_client *cl = NULL;
	warren_sandbox *sb = NULL;
	warren_event_list *ev = NULL;
	warren_error *err = NULL;
	int r = cli_connect(cc, &cl);
	if (r)
		return r;
	if (warren_sandbox_connect(cl, id, &sb, &err) < 0 ||
	    warren_sandbox_events(sb, (int64_t)since, (int)limit, &ev, &err) < 0) {
		r = cli_fail(err);
	} else if (cc->json) {
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

int cmd_events(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"since", required_argument, NULL, OPT_SINCE},
	    {"limit", required_argument, NULL, OPT_LIMIT},
	    {"denied", no_argument, NULL, OPT_DENIED},
	    {"last", required_argument, NULL, OPT_LAST},
	    {"follow", no_argument, NULL, OPT_FOLLOW},
	    {"sandbox", required_argument, NULL, OPT_SANDBOX},
	    {"layer", required_argument, NULL, OPT_LAYER},
	    {"flagged", no_argument, NULL, OPT_FLAGGED},
	    {"tenant", required_argument, NULL, OPT_TENANT},
	    CLI_CONN_OPTIONS,
	    {0},
	};
	struct cli_conn cc = {0};
	warren_audit_query q = WARREN_AUDIT_QUERY_INIT;
	const char *since = NULL;
	uint64_t limit = 0, last = 20;
	bool follow = false, audit = false;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (cli_conn_opt(&cc, c, optarg))
			continue;
		switch (c) {
		case OPT_SINCE: since = optarg; break;
		case OPT_LIMIT:
			if (wr_parse_u64(optarg, 1000, &limit) < 0 || limit == 0)
				return cli_usage_error("--limit", "'%s' is not between 1 and 1000",
						       optarg);
			break;
		case OPT_LAST:
			if (wr_parse_u64(optarg, 1000, &last) < 0 || last == 0)
				return cli_usage_error("--last", "'%s' is not between 1 and 1000",
						       optarg);
			audit = true;
			break;
		case OPT_DENIED:
			q.denied = 1;
			audit = true;
			break;
		case OPT_FOLLOW: follow = audit = true; break;
		case OPT_SANDBOX:
			q.sandbox = optarg;
			audit = true;
			break;
		case OPT_LAYER:
			q.layer = optarg;
			audit = true;
			break;
		case OPT_FLAGGED: q.flagged = audit = true; break;
		case OPT_TENANT:
			q.tenant = optarg;
			audit = true;
			break;
		case 'h': events_usage(stdout); return 0;
		default: return cli_bad_option(c, argv);
		}
	}
	if (optind + 1 < argc)
		return cli_usage_error(argv[optind + 1], "unexpected argument");
	const char *positional = optind < argc ? argv[optind] : NULL;
	/* A sandbox alone (or with the lifecycle options): its lifecycle. */
	if (positional && !audit) {
		uint64_t seq = 0;
		if (since && wr_parse_u64(since, INT64_MAX, &seq) < 0)
			return cli_usage_error("--since", "'%s' is not a sequence number", since);
		return lifecycle(&cc, positional, seq, limit);
	}
	if (limit)
		return cli_usage_error("--limit", "is for lifecycle events (use --last)");
	if (positional && q.sandbox && strcmp(positional, q.sandbox) != 0)
		return cli_usage_error(positional, "two sandboxes given (--sandbox %s)", q.sandbox);
	if (positional)
		q.sandbox = positional;
	q.since = since;
	q.limit = (int)last;

	warren_client *cl = NULL;
	warren_error *err = NULL;
	warren_audit_list *l = NULL;
	int r = cli_connect(&cc, &cl);
	if (r)
		return r;
	if (follow) {
		bool json = cc.json;
		if (!json)
			printf("%-14s %-16s %-12s %-8s %s\n", "TIME", "SANDBOX", "LAYER",
			       "SEVERITY", "WHAT");
		fflush(stdout);
		if (warren_audit_follow(cl, &q, on_follow, &json, &err) < 0)
			r = cli_fail(err);
	} else if (warren_audit_events(cl, &q, &l, &err) < 0) {
		r = cli_fail(err);
	} else if (cc.json) {
		printf("[");
		for (size_t i = 0; i < l->count; i++)
			printf("%s%s", i ? "," : "", l->events[i].json ? l->events[i].json : "{}");
		printf("]\n");
	} else {
		printf("%-14s %-16s %-12s %-8s %s\n", "TIME", "SANDBOX", "LAYER", "SEVERITY",
		       "WHAT");
		for (size_t i = 0; i < l->count; i++)
			print_event(&l->events[i], false);
	}
	warren_audit_list_free(l);
	warren_client_free(cl);
	return r;
}
