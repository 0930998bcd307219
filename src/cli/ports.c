/* warren ports: list, publish and unpublish a sandbox's published ports
 * (libwarren's warren_sandbox_port_*). Parse and dispatch only. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"

static void ports_usage(FILE *f)
{
	fprintf(f, "usage: warren ports SANDBOX [options]\n\n"
		   "Without an option, lists the sandbox's published ports. A published\n"
		   "port makes a TCP port of a networked sandbox reachable from the host.\n\n"
		   "  --publish PORT       publish the sandbox's PORT; prints where it is\n"
		   "  --host ADDR          on ADDR: 127.0.0.1 (the default), 0.0.0.0 or an\n"
		   "                       address of the host\n"
		   "  --host-port N        on host port N (default: a free one)\n"
		   "  --unix               on a Unix socket of the daemon's instead\n"
		   "  --unpublish PORT     remove every publication of the sandbox's "
		   "PORT\n" CLI_CONN_HELP);
}

enum { OPT_PUBLISH = 1000, OPT_HOST, OPT_HOST_PORT, OPT_UNIX, OPT_UNPUBLISH };

static int parse_port(const char *opt, const char *arg, unsigned int min, unsigned int *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(arg, &end, 10);
	if (!*arg || *end || errno || arg[0] == '-' || arg[0] == '+' || v < min || v > 65535)
		return cli_usage_error(opt, "'%s' is not a port number (%u-65535)", arg, min);
	*out = (unsigned int)v;
	return 0;
}

static void print_one(json_t *p)
{
	const char *unx = json_string_value(json_object_get(p, "unix"));
	long long port = (long long)json_integer_value(json_object_get(p, "port"));
	const char *via = json_string_value(json_object_get(p, "via"));
	if (unx)
		printf("%lld\t%s\t%s\n", port, unx, via ? via : "");
	else
		printf("%lld\t%s:%lld\t%s\n", port, json_string_value(json_object_get(p, "host")),
		       (long long)json_integer_value(json_object_get(p, "host_port")),
		       via ? via : "");
}

static void print_out(const char *json, bool list)
{
	json_t *o = json_loads(json, 0, NULL);
	if (!o) {
		printf("%s\n", json);
		return;
	}
	if (list) {
		size_t i;
		json_t *p;
		json_array_foreach(json_object_get(o, "ports"), i, p) print_one(p);
	} else {
		print_one(o);
	}
	json_decref(o);
}

int cmd_ports(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"publish", required_argument, NULL, OPT_PUBLISH},
	    {"host", required_argument, NULL, OPT_HOST},
	    {"host-port", required_argument, NULL, OPT_HOST_PORT},
	    {"unix", no_argument, NULL, OPT_UNIX},
	    {"unpublish", required_argument, NULL, OPT_UNPUBLISH},
	    CLI_CONN_OPTIONS,
	    {0},
	};
	struct cli_conn cc = {0};
	warren_port_opts po = {.version = WARREN_PORT_OPTS_VERSION};
	unsigned int unpublish = 0;
	bool publish = false, host_opts = false;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (cli_conn_opt(&cc, c, optarg))
			continue;
		switch (c) {
		case OPT_PUBLISH:
			if (parse_port("--publish", optarg, 1, &po.port))
				return WR_EXIT_WARREN;
			publish = true;
			break;
		case OPT_HOST:
			po.host = optarg;
			host_opts = true;
			break;
		case OPT_HOST_PORT:
			if (parse_port("--host-port", optarg, 0, &po.host_port))
				return WR_EXIT_WARREN;
			host_opts = true;
			break;
		case OPT_UNIX:
			po.unix_socket = true;
			host_opts = true;
			break;
		case OPT_UNPUBLISH:
			if (parse_port("--unpublish", optarg, 1, &unpublish))
				return WR_EXIT_WARREN;
			break;
		case 'h': ports_usage(stdout); return 0;
		default: return cli_bad_option(c, argv);
		}
	}
	if (argc - optind != 1)
		return cli_usage_error(NULL, "expected SANDBOX (warren ports SANDBOX [options])");
	if (publish && unpublish)
		return cli_usage_error("--unpublish", "give either --publish or --unpublish");
	if (host_opts && !publish)
		return cli_usage_error(po.unix_socket ? "--unix"
				       : po.host      ? "--host"
						      : "--host-port",
				       "goes with --publish");
	warren_client *cl = NULL;
	warren_sandbox *sb = NULL;
	warren_error *err = NULL;
	char *out = NULL;
	int r = cli_connect(&cc, &cl);
	if (r)
		return r;
	if (warren_sandbox_connect(cl, argv[optind], &sb, &err) < 0)
		r = cli_fail(err);
	else if (unpublish)
		r = warren_sandbox_port_unpublish(sb, unpublish, &err) < 0 ? cli_fail(err) : 0;
	else if ((publish ? warren_sandbox_port_publish(sb, &po, &out, &err)
			  : warren_sandbox_port_list(sb, &out, &err)) < 0)
		r = cli_fail(err);
	else if (cc.json)
		cli_print_json(out);
	else
		print_out(out, !publish);
	warren_free(out);
	warren_sandbox_free(sb);
	warren_client_free(cl);
	return r;
}
