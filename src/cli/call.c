/* warren call: one sandboxed function call through warrend (the function
 * tier), printing its output and exiting with its status. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/cleanup.h"
#include "common/util.h"

#define CALL_MAX_INPUT (1u << 20) /* the daemon's JSON body limit */

static void call_usage(FILE *f)
{
	fprintf(
	    f, "usage: warren call [options] IMAGE [--] CMD [ARG...]\n"
	       "       warren call [options] --python -c CODE IMAGE [ARG...]\n"
	       "       warren call [options] --python IMAGE FILE.py [ARG...]   (FILE.py sent with "
	       "-f)\n\n"
	       "  -c, --code CODE      source code to run (with --python)\n"
	       "  --python             run Python in a warm interpreter of the image\n"
	       "  -e, --env K=V        environment variable (repeatable)\n"
	       "  -f, --file SRC[:DST] send local file SRC as DST in the working dir (repeatable)\n"
	       "  -i, --stdin          send this program's standard input (read whole first)\n"
	       "  --timeout DUR        wall-clock limit (default 10s)\n"
	       "  --cpu-time DUR       CPU time limit (default: the timeout)\n"
	       "  --memory SIZE        memory limit (default 256M)\n"
	       "  --pids N             process limit (default 64)\n"
	       "  --output-cap SIZE    per-stream output cap (default 1M)\n" CLI_CONN_HELP
	       "\nExits with the call's status; 128+N when killed by signal N, 124 on\n"
	       "timeout or CPU time exceeded, 137 on OOM, 125 when warren itself fails.\n");
}

enum {
	OPT_TIMEOUT = 1000,
	OPT_CPU,
	OPT_MEMORY,
	OPT_PIDS,
	OPT_OUTCAP,
	OPT_PYTHON,
};

static int add_file(char *arg, warren_call_file *f, char **data)
{
	char *colon = strchr(arg, ':');
	const char *src = arg, *dst;
	if (colon) {
		*colon = 0;
		dst = colon + 1;
	} else {
		const char *slash = strrchr(arg, '/');
		dst = slash ? slash + 1 : arg;
	}
	if (*src == 0 || *dst == 0)
		return cli_usage_error("--file", "'%s': SRC[:DST] with both non-empty", arg);
	_cleanup_close_ int fd = open(src, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		return cli_usage_error("--file", "%s: %s", src, strerror(errno));
	int r = cli_read_whole(fd, data, &f->len, CALL_MAX_INPUT);
	if (r < 0)
		return cli_usage_error("--file", "%s: %s", src,
				       r == -EFBIG ? "larger than 1 MiB" : strerror(-r));
	f->path = dst;
	f->data = *data;
	f->mode = st.st_mode & 0111 ? 0755 : 0644;
	return 0;
}

static int exit_status(const warren_exec_result *res, double timeout)
{
	const char *reason = res->reason ? res->reason : "exited";
	if (res->stdout_truncated || res->stderr_truncated)
		fprintf(stderr, "warren: output truncated at the cap\n");
	if (strcmp(reason, "timeout") == 0) {
		fprintf(stderr, "warren: call timed out after %gs; its processes were killed\n",
			timeout ? timeout : 10.0);
		return 124;
	}
	if (strcmp(reason, "cpu_time") == 0) {
		fprintf(stderr, "warren: call exceeded its CPU time; its processes were killed\n");
		return 124;
	}
	if (strcmp(reason, "oom") == 0) {
		fprintf(stderr, "warren: call was killed: out of memory\n");
		return 137;
	}
	if (strcmp(reason, "killed") == 0)
		return 137;
	if (strcmp(reason, "signaled") == 0 && res->signal > 0)
		return 128 + res->signal;
	return res->exit_code & 0xff;
}

int cmd_call(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"code", required_argument, NULL, 'c'},
	    {"python", no_argument, NULL, OPT_PYTHON},
	    {"env", required_argument, NULL, 'e'},
	    {"file", required_argument, NULL, 'f'},
	    {"stdin", no_argument, NULL, 'i'},
	    {"timeout", required_argument, NULL, OPT_TIMEOUT},
	    {"cpu-time", required_argument, NULL, OPT_CPU},
	    {"memory", required_argument, NULL, OPT_MEMORY},
	    {"pids", required_argument, NULL, OPT_PIDS},
	    {"output-cap", required_argument, NULL, OPT_OUTCAP},
	    CLI_CONN_OPTIONS,
	    {0},
	};
	struct cli_conn cc = {0};
	warren_call_opts co = WARREN_CALL_OPTS_INIT;
	_cleanup_free_ warren_kv *env = calloc((size_t)argc, sizeof(*env));
	_cleanup_free_ warren_call_file *files = calloc((size_t)argc, sizeof(*files));
	_cleanup_free_ char **datas = calloc((size_t)argc, sizeof(char *));
	_cleanup_free_ char *input = NULL;
	bool want_stdin = false;
	uint64_t v;
	int c, r = 0;
	if (env == NULL || files == NULL || datas == NULL)
		return cli_usage_error(NULL, "out of memory");
	opterr = 0;
	while (r == 0 && (c = getopt_long(argc, argv, "+:hc:e:f:i", opts, NULL)) != -1) {
		if (cli_conn_opt(&cc, c, optarg))
			continue;
		switch (c) {
		case 'c': co.code = optarg; break;
		case OPT_PYTHON: co.language = "python"; break;
		case 'e':
			if (cli_parse_kv("--env", optarg, &env[co.n_env]))
				r = WR_EXIT_WARREN;
			co.n_env++;
			break;
		case 'f':
			r = add_file(optarg, &files[co.n_files], &datas[co.n_files]);
			co.n_files++;
			break;
		case 'i': want_stdin = true; break;
		case OPT_TIMEOUT:
		case OPT_CPU:
			if (wr_parse_duration_ms(optarg, &v) < 0 || v == 0) {
				r = cli_usage_error(c == OPT_CPU ? "--cpu-time" : "--timeout",
						    "'%s' is not a duration (e.g. 30s, 1.5)",
						    optarg);
				break;
			}
			*(c == OPT_CPU ? &co.cpu_time : &co.timeout) = (double)v / 1000.0;
			break;
		case OPT_MEMORY:
			if (wr_parse_size(optarg, &v) < 0 || v < (1u << 20))
				r = cli_usage_error("--memory", "'%s' is not a size of 1M or more",
						    optarg);
			co.memory_mb = (int64_t)(v >> 20);
			break;
		case OPT_PIDS:
			if (wr_parse_u64(optarg, 1u << 20, &v) < 0 || v == 0)
				r = cli_usage_error("--pids", "'%s' is not a positive number",
						    optarg);
			co.pids = (int64_t)v;
			break;
		case OPT_OUTCAP:
			if (wr_parse_size(optarg, &v) < 0 || v == 0 || v > INT64_MAX)
				r = cli_usage_error("--output-cap", "'%s' is not a size", optarg);
			co.output_cap = (int64_t)v;
			break;
		case 'h': call_usage(stdout); return 0;
		default: return cli_bad_option(c, argv);
		}
	}
	int rc = r;
	if (rc)
		goto out;
	if (co.code && co.language == NULL) {
		rc = cli_usage_error("--code", "needs --python");
		goto out;
	}
	if (optind >= argc) {
		rc = cli_usage_error(NULL, "no image given (warren call IMAGE -- CMD...)");
		goto out;
	}
	co.image = argv[optind++];
	if (optind < argc && strcmp(argv[optind], "--") == 0)
		optind++;
	if (optind < argc)
		co.argv = (const char *const *)&argv[optind];
	else if (co.code == NULL) {
		rc = cli_usage_error(NULL, "no command given (warren call IMAGE -- CMD..., or "
					   "--python -c CODE)");
		goto out;
	}
	co.env = env;
	co.files = files;
	if (want_stdin) {
		int sr = cli_read_whole(0, &input, &co.stdin_len, CALL_MAX_INPUT);
		if (sr < 0) {
			rc = cli_usage_error("--stdin", "cannot read standard input: %s",
					     sr == -EFBIG ? "larger than 1 MiB" : strerror(-sr));
			goto out;
		}
		co.stdin_data = input;
	}
	co.binary = !cc.json; /* --json prints the API's text */
	signal(SIGPIPE, SIG_IGN);

	warren_client *cl = NULL;
	warren_exec_result *res = NULL;
	warren_error *err = NULL;
	rc = cli_connect(&cc, &cl);
	if (rc)
		goto out;
	if (warren_function_call(cl, &co, &res, &err) < 0) {
		rc = cli_fail(err);
	} else {
		if (cc.json) {
			cli_print_json(res->json);
		} else {
			if (res->stdout_len)
				wr_write_all(1, res->stdout_data, res->stdout_len);
			if (res->stderr_len)
				wr_write_all(2, res->stderr_data, res->stderr_len);
		}
		rc = exit_status(res, co.timeout);
	}
	warren_exec_result_free(res);
	warren_client_free(cl);
out:
	for (size_t i = 0; i < co.n_files; i++)
		free(datas[i]);
	return rc;
}
