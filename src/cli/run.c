/* warren run: create a sandbox, run one command in it with output streamed,
 * destroy it, and exit with the command's status. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "tiers/container.h"

static void run_usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: warren run [options] -- CMD [ARG...]\n\n"
	    "  --image DIR|FILE.erofs  root filesystem (required)\n"
	    "  --cpu N                 CPUs (fractions allowed; default: no cap)\n"
	    "  --memory SIZE           memory limit, swap included (default 512M)\n"
	    "  --pids N                process limit (default 512)\n"
	    "  --disk SIZE             writable layer quota (default 1G)\n"
	    "  --timeout DUR           kill the command and its children after DUR (e.g. 30s, 5m)\n"
	    "  --env K=V               environment variable (repeatable)\n"
	    "  --workdir DIR           working directory inside (default /)\n"
	    "  --user UID[:GID]        user inside (default 0)\n"
	    "  --hostname NAME         hostname inside (default: the sandbox id)\n"
	    "  --cap-set none|root     capabilities inside the user namespace (default none)\n"
	    "  --output-cap SIZE       per-stream output cap (default 16M)\n\n"
	    "Exits with the command's status; 125 when warren itself fails, 124 on\n"
	    "timeout, 137 when the command was OOM-killed.\n");
}

struct stream_ctx {
	bool broken[3];
};

static int on_output(void *ctx, int stream, const char *buf, size_t len)
{
	struct stream_ctx *c = ctx;
	if (c->broken[stream])
		return 0;
	if (wr_write_all(stream, buf, len) < 0)
		c->broken[stream] = true;
	return 0;
}

enum {
	OPT_IMAGE = 1000,
	OPT_CPU,
	OPT_MEMORY,
	OPT_PIDS,
	OPT_DISK,
	OPT_TIMEOUT,
	OPT_ENV,
	OPT_WORKDIR,
	OPT_USER,
	OPT_CAPSET,
	OPT_HOSTNAME,
	OPT_OUTCAP,
};

int cmd_run(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"image", required_argument, NULL, OPT_IMAGE},
	    {"cpu", required_argument, NULL, OPT_CPU},
	    {"memory", required_argument, NULL, OPT_MEMORY},
	    {"pids", required_argument, NULL, OPT_PIDS},
	    {"disk", required_argument, NULL, OPT_DISK},
	    {"timeout", required_argument, NULL, OPT_TIMEOUT},
	    {"env", required_argument, NULL, OPT_ENV},
	    {"workdir", required_argument, NULL, OPT_WORKDIR},
	    {"user", required_argument, NULL, OPT_USER},
	    {"cap-set", required_argument, NULL, OPT_CAPSET},
	    {"hostname", required_argument, NULL, OPT_HOSTNAME},
	    {"output-cap", required_argument, NULL, OPT_OUTCAP},
	    {"help", no_argument, NULL, 'h'},
	    {0},
	};
	struct wr_sandbox_spec spec = {0};
	struct wr_exec_spec ex = {0};
	ex.user = -1;
	ex.group = -1;
	ex.stdin_fd = 0;
	_cleanup_free_ struct wr_env_kv *env = calloc((size_t)argc, sizeof(*env));
	size_t n_env = 0;
	uint64_t v;
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case OPT_IMAGE: spec.image = optarg; break;
		case OPT_CPU: {
			char *end;
			errno = 0;
			double d = strtod(optarg, &end);
			if (errno || *end || end == optarg || d <= 0 || d > 4096)
				return cli_usage_error(
				    "--cpu", "'%s' is not a CPU count between 0 and 4096", optarg);
			spec.cpus = d;
			break;
		}
		case OPT_MEMORY:
			if (wr_parse_size(optarg, &v) < 0 || v == 0)
				return cli_usage_error(
				    "--memory", "'%s' is not a size (e.g. 512M, 2G)", optarg);
			spec.memory_bytes = v;
			break;
		case OPT_PIDS:
			if (wr_parse_u64(optarg, 1u << 22, &v) < 0 || v == 0)
				return cli_usage_error(
				    "--pids", "'%s' is not a count between 1 and 4194304", optarg);
			spec.pids = v;
			break;
		case OPT_DISK:
			if (wr_parse_size(optarg, &v) < 0 || v == 0)
				return cli_usage_error("--disk", "'%s' is not a size (e.g. 1G)",
						       optarg);
			spec.disk_bytes = v;
			break;
		case OPT_TIMEOUT:
			if (wr_parse_duration_ms(optarg, &v) < 0 || v == 0)
				return cli_usage_error(
				    "--timeout", "'%s' is not a duration (e.g. 30s, 5m)", optarg);
			ex.timeout_ms = v;
			break;
		case OPT_ENV: {
			char *eq = strchr(optarg, '=');
			if (eq == NULL || eq == optarg)
				return cli_usage_error("--env", "'%s' is not of the form KEY=VALUE",
						       optarg);
			*eq = 0;
			env[n_env].key = optarg;
			env[n_env].value = eq + 1;
			n_env++;
			break;
		}
		case OPT_WORKDIR:
			if (optarg[0] != '/')
				return cli_usage_error("--workdir", "'%s' is not an absolute path",
						       optarg);
			spec.workdir = optarg;
			break;
		case OPT_USER: {
			char *colon = strchr(optarg, ':');
			if (colon)
				*colon = 0;
			if (wr_parse_u64(optarg, 65535, &v) < 0)
				return cli_usage_error(
				    "--user", "'%s' is not a uid between 0 and 65535", optarg);
			spec.user = (uid_t)v;
			spec.group = (gid_t)v;
			if (colon) {
				if (wr_parse_u64(colon + 1, 65535, &v) < 0)
					return cli_usage_error(
					    "--user", "'%s' is not a gid between 0 and 65535",
					    colon + 1);
				spec.group = (gid_t)v;
			}
			break;
		}
		case OPT_CAPSET:
			if (wr_capset_parse(optarg, &spec.capset) < 0)
				return cli_usage_error("--cap-set",
						       "'%s' is not one of: none, root", optarg);
			break;
		case OPT_HOSTNAME: spec.hostname = optarg; break;
		case OPT_OUTCAP:
			if (wr_parse_size(optarg, &v) < 0 || v == 0)
				return cli_usage_error("--output-cap", "'%s' is not a size",
						       optarg);
			ex.output_cap = v;
			break;
		case 'h': run_usage(stdout); return 0;
		case '?':
		default:
			if (optopt)
				return cli_usage_error(NULL, "unknown or incomplete option '-%c'",
						       optopt);
			return cli_usage_error(argv[optind - 1], "unknown option or missing value");
		}
	}
	if (spec.image == NULL)
		return cli_usage_error("--image",
				       "is required (a rootfs directory or an EROFS file)");
	if (optind >= argc)
		return cli_usage_error(NULL,
				       "no command given (warren run [options] -- CMD [ARG...])");
	spec.env = env;
	spec.n_env = n_env;
	spec.die_with_parent = true;
	ex.argv = (const char *const *)&argv[optind];
	struct stream_ctx sctx = {0};
	ex.on_output = on_output;
	ex.ctx = &sctx;
	signal(SIGPIPE, SIG_IGN);

	struct wr_container_config cfg = {
	    .state_dir = getenv("WARREN_STATE_DIR"),
	    .run_dir = getenv("WARREN_RUN_DIR"),
	    .init_path = cli_init_path(),
	    .cgroup_base = getenv("WARREN_CGROUP_BASE"),
	};
	_cleanup_err_ wr_err err = NULL;
	if (wr_container_init(&cfg, &err) < 0) {
		wr_log_err(err);
		return WR_EXIT_WARREN;
	}
	struct wr_sandbox *sb = NULL;
	if (wr_container_create(&spec, &sb, &err) < 0) {
		if (err && err->field)
			return cli_usage_error(NULL, "--%s: %s", err->field, err->msg);
		wr_log_err(err);
		return WR_EXIT_WARREN;
	}
	struct wr_exec_result res;
	int status;
	if (wr_container_exec(sb, &ex, &res, &err) < 0) {
		wr_log_err(err);
		status = WR_EXIT_WARREN;
	} else {
		status = res.exit_code;
		if (res.out_truncated || res.err_truncated)
			wr_warn("output truncated at the cap (%s%s%s)",
				res.out_truncated ? "stdout" : "",
				res.out_truncated && res.err_truncated ? ", " : "",
				res.err_truncated ? "stderr" : "");
		switch (res.reason) {
		case WR_EXIT_TIMEOUT:
			wr_error("command timed out after %llu ms; its processes were killed",
				 (unsigned long long)ex.timeout_ms);
			status = 124;
			break;
		case WR_EXIT_OOM:
			wr_error("command was killed: out of memory (limit %llu bytes)",
				 (unsigned long long)(spec.memory_bytes ? spec.memory_bytes
									: 512ull << 20));
			status = 137;
			break;
		default: break;
		}
		wr_exec_result_free(&res);
	}
	wr_err_free(&err);
	if (wr_container_destroy(&sb, &err) < 0) {
		wr_log_err(err);
		if (status == 0)
			status = WR_EXIT_WARREN;
	}
	return status;
}
