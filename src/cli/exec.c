/* warren exec: run a command in a running sandbox with its output streamed,
 * and exit with the command's status. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/cleanup.h"
#include "common/util.h"

static void exec_usage(FILE *f)
{
	fprintf(f, "usage: warren exec [options] SANDBOX [--] CMD [ARG...]\n\n"
		   "  -e, --env K=V        environment variable (repeatable)\n"
		   "  -w, --workdir DIR    working directory\n"
		   "  -u, --user UID       user to run as\n"
		   "  -i, --stdin          send this program's standard input (read whole first)\n"
		   "  --timeout DUR        kill the command after DUR (e.g. 30s, 1.5)\n"
		   "  --output-cap SIZE    per-stream output cap\n"
		   "  --text               ask for UTF-8 text output (invalid bytes "
		   "replaced)\n" CLI_CONN_HELP
		   "\nOutput is streamed as it happens; with --json the command's result is\n"
		   "printed as one JSON object when it ends. Exits with the command's status;\n"
		   "128+N when killed by signal N, 124 on timeout, 137 when killed or OOM,\n"
		   "125 when warren itself fails.\n");
}

enum {
	OPT_TIMEOUT = 1000,
	OPT_OUTCAP,
	OPT_TEXT,
};

struct out_ctx {
	bool broken[3];
};

static int on_output(void *ctx, int stream, const char *data, size_t len)
{
	struct out_ctx *o = ctx;
	if (stream != WARREN_STDOUT && stream != WARREN_STDERR)
		return 0;
	if (!o->broken[stream] && wr_write_all(stream, data, len) < 0)
		o->broken[stream] = true;
	return 0;
}

/* The status this program exits with for a command's result. */
static int exit_status(const warren_exec_result *res, double timeout)
{
	const char *reason = res->reason ? res->reason : "exited";
	if (strcmp(reason, "timeout") == 0) {
		fprintf(stderr, "warren: command timed out after %gs; its processes were killed\n",
			timeout);
		return 124;
	}
	if (strcmp(reason, "oom") == 0) {
		fprintf(stderr, "warren: command was killed: out of memory\n");
		return 137;
	}
	if (strcmp(reason, "killed") == 0)
		return 137;
	if (strcmp(reason, "signaled") == 0 && res->signal > 0)
		return 128 + res->signal;
	if (res->stdout_truncated || res->stderr_truncated)
		fprintf(stderr, "warren: output truncated at the cap\n");
	return res->exit_code & 0xff;
}

int cmd_exec(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"env", required_argument, NULL, 'e'},
	    {"workdir", required_argument, NULL, 'w'},
	    {"user", required_argument, NULL, 'u'},
	    {"stdin", no_argument, NULL, 'i'},
	    {"timeout", required_argument, NULL, OPT_TIMEOUT},
	    {"output-cap", required_argument, NULL, OPT_OUTCAP},
	    {"text", no_argument, NULL, OPT_TEXT},
	    CLI_CONN_OPTIONS,
	    {0},
	};
	struct cli_conn cc = {0};
	warren_exec_opts eo = WARREN_EXEC_OPTS_INIT;
	_cleanup_free_ warren_kv *env = calloc((size_t)argc, sizeof(*env));
	_cleanup_free_ char *input = NULL;
	bool want_stdin = false, text = false;
	uint64_t v;
	int c;
	if (env == NULL)
		return cli_usage_error(NULL, "out of memory");
	opterr = 0;
	while ((c = getopt_long(argc, argv, "+:he:w:u:i", opts, NULL)) != -1) {
		if (cli_conn_opt(&cc, c, optarg))
			continue;
		switch (c) {
		case 'e':
			if (cli_parse_kv("--env", optarg, &env[eo.n_env]))
				return WR_EXIT_WARREN;
			eo.n_env++;
			break;
		case 'w': eo.cwd = optarg; break;
		case 'u':
			if (cli_parse_user(optarg, &eo.user))
				return WR_EXIT_WARREN;
			eo.user_set = true;
			break;
		case 'i': want_stdin = true; break;
		case OPT_TIMEOUT:
			if (wr_parse_duration_ms(optarg, &v) < 0 || v == 0)
				return cli_usage_error(
				    "--timeout", "'%s' is not a duration (e.g. 30s, 1.5)", optarg);
			eo.timeout = (double)v / 1000.0;
			break;
		case OPT_OUTCAP:
			if (wr_parse_size(optarg, &v) < 0 || v == 0 || v > INT64_MAX)
				return cli_usage_error("--output-cap", "'%s' is not a size",
						       optarg);
			eo.output_cap = (int64_t)v;
			break;
		case OPT_TEXT: text = true; break;
		case 'h': exec_usage(stdout); return 0;
		default: return cli_bad_option(c, argv);
		}
	}
	if (optind >= argc)
		return cli_usage_error(NULL, "no sandbox given (warren exec SANDBOX -- CMD...)");
	const char *id = argv[optind++];
	if (optind < argc && strcmp(argv[optind], "--") == 0)
		optind++;
	if (optind >= argc)
		return cli_usage_error(NULL, "no command given (warren exec SANDBOX -- CMD...)");
	eo.argv = (const char *const *)&argv[optind];
	eo.env = env;
	eo.binary = !text && !cc.json; /* --json prints the API's text */
	if (want_stdin) {
		/* the API takes it whole in the request */
		int r = cli_read_whole(0, &input, &eo.stdin_len, 64u << 20);
		if (r < 0)
			return cli_usage_error("--stdin", "cannot read standard input: %s",
					       strerror(-r));
		eo.stdin_data = input;
	}
	struct out_ctx octx = {0};
	if (!cc.json) {
		eo.on_output = on_output;
		eo.ctx = &octx;
	}
	signal(SIGPIPE, SIG_IGN);

	warren_client *cl;
	warren_sandbox *sb;
	warren_exec_result *res = NULL;
	warren_error *err = NULL;
	int r = cli_open_sandbox(&cc, id, &cl, &sb);
	if (r)
		return r;
	if (warren_sandbox_exec(sb, &eo, &res, &err) < 0) {
		r = cli_fail(err);
	} else {
		if (cc.json)
			cli_print_json(res->json);
		r = exit_status(res, eo.timeout);
	}
	warren_exec_result_free(res);
	warren_sandbox_free(sb);
	warren_client_free(cl);
	return r;
}
