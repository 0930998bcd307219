/* warren ls: list sandboxes (no argument) or the files of a sandbox
 * directory (SANDBOX:PATH). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common/util.h"

static void ls_usage(FILE *f)
{
	fprintf(f,
		"usage: warren ls [options]               list sandboxes\n"
		"       warren ls [options] SANDBOX:PATH  list a directory in a sandbox\n\n"
		"  -a, --all          sandboxes in every state (default: running)\n"
		"  --state STATE      only sandboxes in STATE\n"
		"  -l, --label K=V    only sandboxes with this label (repeatable; all match)\n"
		"  -d, --depth N      directory levels to list (1..16, default 1)\n" CLI_CONN_HELP);
}

enum { OPT_STATE = 1000 };

struct list_ctx {
	bool json;
	size_t n;
};

static void header(void)
{
	printf("%-18s %-10s %-12s %-25s %-25s %s\n", "ID", "STATE", "IMAGE", "CREATED", "EXPIRES",
	       "LABELS");
}

static int print_sandbox(void *ctx, const warren_sandbox_info *in)
{
	struct list_ctx *l = ctx;
	if (l->json) {
		printf("%s%s", l->n ? "," : "[", in->json ? in->json : "{}");
	} else {
		if (l->n == 0)
			header();
		printf("%-18s %-10s %-12s %-25s %-25s", in->id, in->state,
		       in->image ? in->image : "-", in->created_at ? in->created_at : "-",
		       in->expires_at ? in->expires_at : "-");
		for (size_t i = 0; i < in->n_labels; i++)
			printf("%s%s=%s", i ? "," : " ", in->labels[i].key, in->labels[i].value);
		printf("\n");
	}
	l->n++;
	return 0;
}

static int list_sandboxes(warren_client *cl, const warren_list_opts *lo, bool json)
{
	struct list_ctx l = {.json = json};
	warren_error *err = NULL;
	if (warren_sandbox_list(cl, lo, print_sandbox, &l, &err) < 0) {
		if (l.n)
			printf("%s\n", json ? "]" : "");
		fflush(stdout);
		return cli_fail(err);
	}
	if (json)
		printf("%s]\n", l.n ? "" : "[");
	else if (l.n == 0)
		header();
	return 0;
}

static int list_files(warren_client *cl, const char *id, const char *path, int depth, bool json)
{
	warren_sandbox *sb = NULL;
	warren_file_list *fl = NULL;
	warren_error *err = NULL;
	int r = 0;
	if (warren_sandbox_connect(cl, id, &sb, &err) < 0 ||
	    warren_file_list_dir(sb, *path ? path : "/", depth, &fl, &err) < 0) {
		r = cli_fail(err);
	} else if (json) {
		printf("[");
		for (size_t i = 0; i < fl->count; i++)
			printf("%s%s", i ? "," : "",
			       fl->entries[i].json ? fl->entries[i].json : "{}");
		printf("]\n");
	} else {
		for (size_t i = 0; i < fl->count; i++) {
			const warren_file_entry *e = &fl->entries[i];
			char mode[11];
			cli_mode_string(e->type, e->mode, mode);
			printf("%s %5lld %5lld %10lld %-20s %s%s%s\n", mode, (long long)e->uid,
			       (long long)e->gid, (long long)e->size, e->mtime ? e->mtime : "-",
			       depth > 1 ? e->path : e->name, e->target ? " -> " : "",
			       e->target ? e->target : "");
		}
	}
	warren_file_list_free(fl);
	warren_sandbox_free(sb);
	return r;
}

int cmd_ls(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"all", no_argument, NULL, 'a'},
	    {"state", required_argument, NULL, OPT_STATE},
	    {"label", required_argument, NULL, 'l'},
	    {"depth", required_argument, NULL, 'd'},
	    CLI_CONN_OPTIONS,
	    {0},
	};
	struct cli_conn cc = {0};
	warren_list_opts lo = WARREN_LIST_OPTS_INIT;
	warren_kv *labels = calloc((size_t)argc, sizeof(*labels));
	bool all = false;
	uint64_t depth = 1;
	int c, r;
	if (labels == NULL)
		return cli_usage_error(NULL, "out of memory");
	lo.state = "running";
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":hal:d:", opts, NULL)) != -1) {
		if (cli_conn_opt(&cc, c, optarg))
			continue;
		switch (c) {
		case 'a': all = true; break;
		case OPT_STATE: lo.state = optarg; break;
		case 'l':
			if (cli_parse_kv("--label", optarg, &labels[lo.n_labels])) {
				free(labels);
				return WR_EXIT_WARREN;
			}
			lo.n_labels++;
			break;
		case 'd':
			if (wr_parse_u64(optarg, 16, &depth) < 0 || depth == 0) {
				free(labels);
				return cli_usage_error("--depth", "'%s' is not between 1 and 16",
						       optarg);
			}
			break;
		case 'h':
			ls_usage(stdout);
			free(labels);
			return 0;
		default: free(labels); return cli_bad_option(c, argv);
		}
	}
	lo.labels = labels;
	if (all)
		lo.state = NULL;
	char *id = NULL;
	const char *path = NULL;
	if (optind + 1 < argc) {
		free(labels);
		return cli_usage_error(argv[optind + 1], "unexpected argument");
	}
	if (optind < argc && !cli_split_remote(argv[optind], &id, &path)) {
		free(labels);
		return cli_usage_error(
		    argv[optind], "is not SANDBOX:PATH (with no argument, ls lists sandboxes)");
	}
	warren_client *cl = NULL;
	r = cli_connect(&cc, &cl);
	if (r == 0 && id)
		r = list_files(cl, id, path, (int)depth, cc.json);
	else if (r == 0)
		r = list_sandboxes(cl, &lo, cc.json);
	warren_client_free(cl);
	free(id);
	free(labels);
	return r;
}
