/* warren create: start a sandbox in the daemon and print its id. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"
#include "common/cleanup.h"
#include "common/util.h"

static void create_usage(FILE *f)
{
	fprintf(f,
		"usage: warren create --image IMAGE [options]\n\n"
		"  --image REF|PATH   store image (name:tag, digest), registry reference\n"
		"                     (host[:port]/repo[:tag], pulled when missing), configured\n"
		"                     name, or a rootfs path on the node\n"
		"  --layer REF        image stacked on --image as an overlay lower (repeatable,\n"
		"                     base first: the first --layer sits right above --image)\n"
		"  --pull POLICY      registry references: missing (default), always, never\n"
		"  --tier NAME        isolation tier (default: the daemon's)\n"
		"  --cpu N            CPUs requested: the CPU weight, and the cap unless\n"
		"                     --cpu-max (fractions allowed; default: no cap)\n"
		"  --cpu-max N        CPU cap (at least --cpu): bursts above --cpu up to N\n"
		"  --memory SIZE      memory limit (e.g. 512M, 2G)\n"
		"  --disk SIZE        writable layer quota (e.g. 1G)\n"
		"  --pids N           process limit\n"
		"  --env K=V          environment of every command (repeatable)\n"
		"  --workdir DIR      working directory of commands\n"
		"  --user UID         user commands run as\n"
		"  --label K=V        label (repeatable)\n"
		"  --timeout DUR      lifetime (e.g. 300, 10m, 2h)\n"
		"  --idle-timeout DUR pause (or kill) after DUR without API activity or CPU use\n"
		"  --on-idle POLICY   pause (default) or kill when idle\n"
		"  --on-timeout POLICY at the end of its lifetime: kill (default) or pause\n"
		"  --lease ID         follow that lease (warren lease create)\n"
		"  --network MODE|JSON  none (default: loopback only), allowlist, open; or\n"
		"                     the whole policy as a JSON object (docs/API.md)\n"
		"  --allow RULE       allow CIDR[:PORTS][/PROTO] (repeatable; implies\n"
		"                     allowlist; IPv6 in brackets: [2001:db8::/32]:443)\n"
		"  --domain NAME      allow a domain (repeatable; *.example.org)\n"
		"  --service NAME     allow a named service of the node (repeatable)\n"
		"  --no-processes     of a snapshot taken with its processes: the files "
		"only\n" CLI_CONN_HELP
		"\nPrints the new sandbox's id (with --json: the sandbox object).\n");
}

enum {
	OPT_IMAGE = 1000,
	OPT_TIER,
	OPT_CPU,
	OPT_CPU_MAX,
	OPT_MEMORY,
	OPT_DISK,
	OPT_PIDS,
	OPT_ENV,
	OPT_WORKDIR,
	OPT_USER,
	OPT_LABEL,
	OPT_TIMEOUT,
	OPT_IDLE,
	OPT_LAYER,
	OPT_PULL,
	OPT_REG_USER,
	OPT_REG_PW,
	OPT_REG_TOKEN,
	OPT_ON_IDLE,
	OPT_ON_TIMEOUT,
	OPT_LEASE,
	OPT_NETWORK,
	OPT_ALLOW,
	OPT_DOMAIN,
	OPT_SERVICE,
	OPT_NO_PROCS,
};

/* --network, --allow, --domain, --service into one policy object. */
static int net_opt(json_t **net, int c, const char *arg)
{
	if (!*net)
		*net = json_object();
	if (c == OPT_NETWORK) {
		if (arg[0] == '{') {
			json_t *o = json_loads(arg, JSON_REJECT_DUPLICATES, NULL);
			if (!json_is_object(o)) {
				json_decref(o);
				return cli_usage_error("--network", "is not a JSON object");
			}
			json_object_update(*net, o);
			json_decref(o);
		} else {
			json_object_set_new(*net, "mode", json_string(arg));
		}
		return 0;
	}
	const char *key = c == OPT_ALLOW ? "allow" : c == OPT_DOMAIN ? "domains" : "services";
	json_t *v;
	if (c == OPT_ALLOW) {
		if (cli_net_rule("--allow", arg, &v))
			return WR_EXIT_WARREN;
	} else {
		v = json_string(arg);
	}
	json_t *a = json_object_get(*net, key);
	if (!a) {
		a = json_array();
		json_object_set_new(*net, key, a);
	}
	json_array_append_new(a, v);
	return 0;
}

static int parse_mb(const char *opt, const char *arg, int64_t *out)
{
	uint64_t v;
	if (wr_parse_size(arg, &v) < 0 || v < (1u << 20))
		return cli_usage_error(opt, "'%s' is not a size of at least 1M (e.g. 512M, 2G)",
				       arg);
	*out = (int64_t)((v + (1u << 20) - 1) >> 20);
	return 0;
}

static int parse_cpus(const char *opt, const char *arg, double *out)
{
	char *end;
	errno = 0;
	double d = strtod(arg, &end);
	if (errno || *end || end == arg || !(d > 0 && d <= 64))
		return cli_usage_error(opt, "'%s' is not a CPU count above 0 and up to 64", arg);
	*out = d;
	return 0;
}

int cmd_create(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"image", required_argument, NULL, OPT_IMAGE},
	    {"tier", required_argument, NULL, OPT_TIER},
	    {"cpu", required_argument, NULL, OPT_CPU},
	    {"cpu-max", required_argument, NULL, OPT_CPU_MAX},
	    {"memory", required_argument, NULL, OPT_MEMORY},
	    {"disk", required_argument, NULL, OPT_DISK},
	    {"pids", required_argument, NULL, OPT_PIDS},
	    {"env", required_argument, NULL, OPT_ENV},
	    {"workdir", required_argument, NULL, OPT_WORKDIR},
	    {"user", required_argument, NULL, OPT_USER},
	    {"label", required_argument, NULL, OPT_LABEL},
	    {"timeout", required_argument, NULL, OPT_TIMEOUT},
	    {"idle-timeout", required_argument, NULL, OPT_IDLE},
	    {"layer", required_argument, NULL, OPT_LAYER},
	    {"pull", required_argument, NULL, OPT_PULL},
	    {"registry-user", required_argument, NULL, OPT_REG_USER},
	    {"registry-password-stdin", no_argument, NULL, OPT_REG_PW},
	    {"registry-token-stdin", no_argument, NULL, OPT_REG_TOKEN},
	    {"on-idle", required_argument, NULL, OPT_ON_IDLE},
	    {"on-timeout", required_argument, NULL, OPT_ON_TIMEOUT},
	    {"lease", required_argument, NULL, OPT_LEASE},
	    {"network", required_argument, NULL, OPT_NETWORK},
	    {"allow", required_argument, NULL, OPT_ALLOW},
	    {"domain", required_argument, NULL, OPT_DOMAIN},
	    {"service", required_argument, NULL, OPT_SERVICE},
	    {"no-processes", no_argument, NULL, OPT_NO_PROCS},
	    CLI_CONN_OPTIONS,
	    {0},
	};
	struct cli_conn cc = {0};
	warren_sandbox_opts so = WARREN_SANDBOX_OPTS_INIT;
	_cleanup_free_ warren_kv *env = calloc((size_t)argc, sizeof(*env));
	_cleanup_free_ warren_kv *labels = calloc((size_t)argc, sizeof(*labels));
	uint64_t v;
	int c;
	_cleanup_(json_decrefp) json_t *net = NULL; /* the network policy, if named */
	const char *reg_user = NULL;
	bool reg_pw = false, reg_token = false;
	_cleanup_free_ const char **layers = calloc((size_t)argc, sizeof(*layers));
	if (env == NULL || labels == NULL || layers == NULL)
		return cli_usage_error(NULL, "out of memory");
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (cli_conn_opt(&cc, c, optarg))
			continue;
		switch (c) {
		case OPT_IMAGE: so.image = optarg; break;
		case OPT_TIER: so.tier = optarg; break;
		case OPT_CPU:
		case OPT_CPU_MAX:
			if (parse_cpus(c == OPT_CPU ? "--cpu" : "--cpu-max", optarg,
				       c == OPT_CPU ? &so.cpu : &so.cpu_max))
				return WR_EXIT_WARREN;
			break;
		case OPT_MEMORY:
			if (parse_mb("--memory", optarg, &so.memory_mb))
				return WR_EXIT_WARREN;
			break;
		case OPT_DISK:
			if (parse_mb("--disk", optarg, &so.disk_mb))
				return WR_EXIT_WARREN;
			break;
		case OPT_PIDS:
			if (wr_parse_u64(optarg, 1u << 22, &v) < 0 || v == 0)
				return cli_usage_error("--pids", "'%s' is not a positive count",
						       optarg);
			so.pids = (int64_t)v;
			break;
		case OPT_ENV:
			if (cli_parse_kv("--env", optarg, &env[so.n_env]))
				return WR_EXIT_WARREN;
			so.n_env++;
			break;
		case OPT_WORKDIR: so.workdir = optarg; break;
		case OPT_USER:
			if (wr_parse_u64(optarg, 65535, &v) < 0)
				return cli_usage_error(
				    "--user", "'%s' is not a uid between 0 and 65535", optarg);
			so.user = (int64_t)v;
			so.user_set = true;
			break;
		case OPT_LABEL:
			if (cli_parse_kv("--label", optarg, &labels[so.n_labels]))
				return WR_EXIT_WARREN;
			so.n_labels++;
			break;
		case OPT_TIMEOUT:
			if (cli_parse_seconds("--timeout", optarg, &so.timeout))
				return WR_EXIT_WARREN;
			break;
		case OPT_IDLE:
			if (cli_parse_seconds("--idle-timeout", optarg, &so.idle_timeout))
				return WR_EXIT_WARREN;
			break;
		case OPT_LAYER:
			if (*optarg == 0)
				return cli_usage_error("--layer", "needs an image reference");
			if (so.n_layers == 16)
				return cli_usage_error("--layer", "at most 16 layers");
			layers[so.n_layers++] = optarg;
			break;
		case OPT_PULL:
			if (strcmp(optarg, "missing") != 0 && strcmp(optarg, "always") != 0 &&
			    strcmp(optarg, "never") != 0)
				return cli_usage_error(
				    "--pull", "'%s' is not one of missing, always, never", optarg);
			so.pull = optarg;
			break;
		case OPT_REG_USER: reg_user = optarg; break;
		case OPT_REG_PW: reg_pw = true; break;
		case OPT_REG_TOKEN: reg_token = true; break;
		case OPT_ON_IDLE:
		case OPT_ON_TIMEOUT:
			if (strcmp(optarg, "pause") != 0 && strcmp(optarg, "kill") != 0)
				return cli_usage_error(c == OPT_ON_IDLE ? "--on-idle"
									: "--on-timeout",
						       "'%s' is not one of pause, kill", optarg);
			*(c == OPT_ON_IDLE ? &so.on_idle : &so.on_timeout) = optarg;
			break;
		case OPT_LEASE: so.lease = optarg; break;
		case OPT_NO_PROCS: so.processes = -1; break;
		case OPT_NETWORK:
		case OPT_ALLOW:
		case OPT_DOMAIN:
		case OPT_SERVICE:
			if (net_opt(&net, c, optarg))
				return WR_EXIT_WARREN;
			break;
		case 'h': create_usage(stdout); return 0;
		default: return cli_bad_option(c, argv);
		}
	}
	if (optind < argc)
		return cli_usage_error(argv[optind], "unexpected argument (the image is --image)");
	if (so.image == NULL)
		return cli_usage_error("--image", "is required (an image name or a rootfs path)");
	if (so.cpu_max > 0 && so.cpu > 0 && so.cpu_max < so.cpu)
		return cli_usage_error("--cpu-max",
				       "%g is below --cpu %g (the cap is at least the request)",
				       so.cpu_max, so.cpu);
	so.env = env;
	so.labels = labels;
	so.layers = layers;
	_cleanup_free_ char *net_json = net ? json_dumps(net, JSON_COMPACT) : NULL;
	so.network_json = net_json;
	if ((reg_user != NULL) != reg_pw)
		return cli_usage_error(reg_user ? "--registry-user" : "--registry-password-stdin",
				       "--registry-user and --registry-password-stdin go together");
	if (reg_token && reg_user)
		return cli_usage_error("--registry-token-stdin",
				       "--registry-token-stdin excludes --registry-user");
	_cleanup_free_ char *secret = NULL;
	if ((reg_pw || reg_token) &&
	    (secret = cli_stdin_line(reg_pw ? "--registry-password-stdin"
					    : "--registry-token-stdin")) == NULL)
		return WR_EXIT_WARREN;
	warren_registry_auth auth = {.username = reg_user,
				     .password = reg_pw ? secret : NULL,
				     .token = reg_token ? secret : NULL};
	if (secret)
		so.registry_auth = &auth;

	warren_client *cl = NULL;
	warren_sandbox *sb = NULL;
	warren_error *err = NULL;
	int r = cli_connect(&cc, &cl);
	if (r)
		return r;
	if (warren_sandbox_create(cl, &so, &sb, &err) < 0) {
		warren_client_free(cl);
		return cli_fail(err);
	}
	if (cc.json)
		cli_print_json(warren_sandbox_last_info(sb)->json);
	else
		printf("%s\n", warren_sandbox_id(sb));
	warren_sandbox_free(sb);
	warren_client_free(cl);
	return r;
}
