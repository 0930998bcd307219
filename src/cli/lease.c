/* warren lease: a training job's hold on its sandboxes. create, ls,
 * inspect, heartbeat (once, or every DUR until stopped), suspend, resume,
 * release. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"

static void usage(FILE *f)
{
	fprintf(
	    f, "usage: warren lease COMMAND [options]\n\n"
	       "  create [--id ID] [--grace DUR] [--expire DUR] [--on-expire kill|pause|snapshot]\n"
	       "         [--to-disk]  a new lease (prints its id); sandboxes join it with\n"
	       "                      'warren create --lease ID'; --to-disk: paused, they\n"
	       "                      go to disk (memory freed) where they can\n"
	       "  ls                  the tenant's leases\n"
	       "  inspect ID...       show leases\n"
	       "  heartbeat [--every DUR] ID\n"
	       "                      keep the lease alive (with --every: until interrupted\n"
	       "                      or the lease ends)\n"
	       "  suspend ID          pause its sandboxes now (a preempted job)\n"
	       "  resume ID           resume them\n"
	       "  release [--keep] ID end the lease: its sandboxes are killed (--keep: they\n"
	       "                      live on, on their own)\n"
	       "\nWithout heartbeats for the grace period (default 60s) the sandboxes are\n"
	       "paused; a heartbeat resumes them. After --expire (default 1h) without one,\n"
	       "--on-expire applies.\n\n" CLI_CONN_HELP);
}

static void print_lease(const struct cli_conn *cc, const warren_lease_info *l)
{
	if (cc->json) {
		cli_print_json(l->json);
		return;
	}
	printf("id:          %s\nstate:       %s%s%s%s\n", l->id, l->state,
	       l->suspend_reason ? " (" : "", l->suspend_reason ? l->suspend_reason : "",
	       l->suspend_reason ? ")" : "");
	printf("grace:       %gs\nexpire:      %gs\non expire:   %s\n", l->grace_s, l->expire_s,
	       l->on_expire ? l->on_expire : "-");
	printf("created:     %s\nheartbeat:   %s\nsuspends at: %s\nexpires at:  %s\n",
	       l->created_at ? l->created_at : "-",
	       l->last_heartbeat_at ? l->last_heartbeat_at : "-",
	       l->suspends_at ? l->suspends_at : "-", l->expires_at ? l->expires_at : "-");
	if (l->ended_at)
		printf("ended:       %s (%s)\n", l->ended_at,
		       l->ended_action ? l->ended_action : "-");
	printf("sandboxes:   %lld\n", (long long)l->sandboxes);
}

static int list_one(void *ctx, const warren_lease_info *l)
{
	const struct cli_conn *cc = ctx;
	if (cc->json)
		cli_print_json(l->json);
	else
		printf("%-24s %-10s %-10s %8gs %8gs %-8s %lld\n", l->id, l->state,
		       l->suspend_reason ? l->suspend_reason : "-", l->grace_s, l->expire_s,
		       l->on_expire ? l->on_expire : "-", (long long)l->sandboxes);
	return 0;
}

static volatile sig_atomic_t g_stop;
static void on_signal(int sig)
{
	(void)sig;
	g_stop = 1;
}

/* Heartbeat every `every` seconds until a signal or the lease ends; a
 * failed call (daemon restarting) is retried at the next beat. */
static int heartbeat_loop(warren_client *cl, const char *id, double every)
{
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	while (!g_stop) {
		warren_error *err = NULL;
		if (warren_lease_heartbeat(cl, id, NULL, &err) < 0) {
			const char *code = warren_error_code(err);
			if (strcmp(code, "conflict") == 0 || strcmp(code, "not_found") == 0)
				return cli_fail(err);
			fprintf(stderr, "warren: %s (retrying)\n", warren_error_message(err));
			warren_error_free(err);
		}
		struct timespec ts = {(time_t)every, (long)((every - (double)(time_t)every) * 1e9)};
		while (!g_stop && nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	}
	return 0;
}

int cmd_lease(int argc, char **argv)
{
	enum {
		OPT_ID = 1000,
		OPT_GRACE,
		OPT_EXPIRE,
		OPT_ON_EXPIRE,
		OPT_KEEP,
		OPT_EVERY,
		OPT_TO_DISK
	};
	static const struct option opts[] = {{"id", required_argument, NULL, OPT_ID},
					     {"grace", required_argument, NULL, OPT_GRACE},
					     {"expire", required_argument, NULL, OPT_EXPIRE},
					     {"on-expire", required_argument, NULL, OPT_ON_EXPIRE},
					     {"keep", no_argument, NULL, OPT_KEEP},
					     {"every", required_argument, NULL, OPT_EVERY},
					     {"to-disk", no_argument, NULL, OPT_TO_DISK},
					     CLI_CONN_OPTIONS,
					     {0}};
	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? WR_EXIT_WARREN : 0;
	}
	const char *sub = argv[1];
	static const char *const subs[] = {"create",  "ls",	"inspect", "heartbeat",
					   "suspend", "resume", "release", NULL};
	size_t k = 0;
	while (subs[k] && strcmp(subs[k], sub) != 0)
		k++;
	if (subs[k] == NULL)
		return cli_usage_error(
		    NULL, "unknown lease command '%s' (see 'warren lease --help')", sub);
	struct cli_conn cc = {0};
	warren_lease_opts lo = WARREN_LEASE_OPTS_INIT;
	bool keep = false;
	int64_t secs;
	double every = 0;
	int c;
	opterr = 0;
	optind = 2;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (cli_conn_opt(&cc, c, optarg))
			continue;
		bool create = strcmp(sub, "create") == 0;
		switch (c) {
		case 'h': usage(stdout); return 0;
		case OPT_ID:
			if (!create)
				return cli_bad_option(c, argv);
			lo.id = optarg;
			break;
		case OPT_GRACE:
		case OPT_EXPIRE:
		case OPT_EVERY: {
			const char *name = c == OPT_GRACE    ? "--grace"
					   : c == OPT_EXPIRE ? "--expire"
							     : "--every";
			if ((c == OPT_EVERY) == create ||
			    (c == OPT_EVERY && strcmp(sub, "heartbeat") != 0))
				return cli_bad_option(c, argv);
			if (cli_parse_seconds(name, optarg, &secs))
				return WR_EXIT_WARREN;
			*(c == OPT_GRACE    ? &lo.grace_s
			  : c == OPT_EXPIRE ? &lo.expire_s
					    : &every) = (double)secs;
			break;
		}
		case OPT_ON_EXPIRE:
			if (!create)
				return cli_bad_option(c, argv);
			if (strcmp(optarg, "kill") != 0 && strcmp(optarg, "pause") != 0 &&
			    strcmp(optarg, "snapshot") != 0)
				return cli_usage_error("--on-expire",
						       "'%s' is not one of kill, pause, snapshot",
						       optarg);
			lo.on_expire = optarg;
			break;
		case OPT_KEEP:
			if (strcmp(sub, "release") != 0)
				return cli_bad_option(c, argv);
			keep = true;
			break;
		case OPT_TO_DISK:
			if (!create)
				return cli_bad_option(c, argv);
			lo.to_disk = 1;
			break;
		default: return cli_bad_option(c, argv);
		}
	}
	int nargs = argc - optind;
	bool wants_ids = k >= 2;
	if (!wants_ids && nargs)
		return cli_usage_error(argv[optind], "unexpected argument");
	if (wants_ids && (nargs < 1 || (k > 2 && nargs != 1)))
		return cli_usage_error(NULL, "expected %s lease ID (warren lease %s ID)",
				       k == 2 ? "a" : "one", sub);
	warren_client *cl = NULL;
	int r = cli_connect(&cc, &cl);
	if (r)
		return r;
	warren_error *err = NULL;
	warren_lease_info *l = NULL;
	const char *id = wants_ids ? argv[optind] : NULL;
	switch (k) {
	case 0:
		if (warren_lease_create(cl, &lo, &l, &err) < 0)
			r = cli_fail(err);
		else if (cc.json)
			cli_print_json(l->json);
		else
			printf("%s\n", l->id);
		break;
	case 1:
		if (warren_lease_list(cl, list_one, &cc, &err) < 0)
			r = cli_fail(err);
		break;
	case 2:
		for (int i = optind; i < argc && r == 0; i++) {
			if (warren_lease_get(cl, argv[i], &l, &err) < 0) {
				r = cli_fail(err);
				break;
			}
			print_lease(&cc, l);
			warren_lease_info_free(l);
			l = NULL;
		}
		break;
	case 3:
		if (every > 0) {
			r = heartbeat_loop(cl, id, every);
			break;
		}
		/* fallthrough */
	default: {
		int (*op)(warren_client *, const char *, warren_lease_info **, warren_error **) =
		    k == 3   ? warren_lease_heartbeat
		    : k == 4 ? warren_lease_suspend
			     : warren_lease_resume;
		int rc =
		    k == 6 ? warren_lease_release(cl, id, keep, &l, &err) : op(cl, id, &l, &err);
		if (rc < 0)
			r = cli_fail(err);
		else if (cc.json)
			cli_print_json(l->json);
		else
			printf("%s %s\n", l->id, l->state);
	}
	}
	warren_lease_info_free(l);
	warren_client_free(cl);
	return r;
}
