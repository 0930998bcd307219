/* warren network: show or change a sandbox's network policy; and the
 * network options of warren create (cli_net_*). Parse and dispatch only:
 * the daemon validates the policy and names the field at fault. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cli/cli.h"

static void network_usage(FILE *f)
{
	fprintf(f, "usage: warren network SANDBOX [options]\n\n"
		   "Without a change option, shows the policy, whether it is enforced and\n"
		   "the refused connections. Changes are merged into the policy (what is\n"
		   "not named stays as it is) and applied at once.\n\n"
		   "  --mode MODE          none (loopback only), allowlist, or open (all but\n"
		   "                       the host, link-local, metadata and other sandboxes)\n"
		   "  --allow RULE         add an allow rule (repeatable): CIDR[:PORTS][/PROTO],\n"
		   "                       IPv6 in brackets: [2001:db8::/32]:443/tcp; PORTS 80 or\n"
		   "                       8000-8100 (default all), PROTO tcp, udp, icmp, any\n"
		   "  --remove RULE        remove an allow rule, written as it was added\n"
		   "  --domain NAME        allow a domain (pypi.org, *.pythonhosted.org)\n"
		   "  --remove-domain NAME\n"
		   "  --service NAME       allow a named service of the node (pypi, npm, ...)\n"
		   "  --remove-service NAME\n"
		   "  --established keep|cut  whether open TCP connections outlive a change\n"
		   "                       (keep, the default) or follow the policy too "
		   "(cut)\n" CLI_CONN_HELP);
}

/* "10.0.0.0/8:80-90/tcp", "[2001:db8::/32]:443", "10.1.2.3" as a rule. */
int cli_net_rule(const char *opt, const char *arg, json_t **out)
{
	char buf[160];
	if (strlen(arg) >= sizeof(buf) || !*arg)
		return cli_usage_error(opt, "'%s' is not CIDR[:PORTS][/PROTO]", arg);
	strcpy(buf, arg);
	const char *proto = NULL, *ports = NULL, *cidr = buf;
	char *slash = strrchr(buf, '/');
	if (slash && (strcmp(slash + 1, "tcp") == 0 || strcmp(slash + 1, "udp") == 0 ||
		      strcmp(slash + 1, "icmp") == 0 || strcmp(slash + 1, "any") == 0)) {
		*slash = 0;
		proto = slash + 1;
	}
	if (buf[0] == '[') {
		char *close = strchr(buf, ']');
		if (!close || (close[1] && close[1] != ':'))
			return cli_usage_error(opt,
					       "'%s': an IPv6 CIDR goes in brackets, "
					       "[2001:db8::/32]:443/tcp",
					       arg);
		*close = 0;
		cidr = buf + 1;
		if (close[1] == ':')
			ports = close + 2;
	} else {
		char *colon = strchr(buf, ':');
		if (colon && !strchr(colon + 1, ':')) {
			*colon = 0;
			ports = colon + 1;
		}
	}
	json_t *r = json_pack("{s:s}", "cidr", cidr);
	if (ports)
		json_object_set_new(r, "ports", json_string(ports));
	if (proto)
		json_object_set_new(r, "protocol", json_string(proto));
	*out = r;
	return 0;
}

static int add_to(json_t *o, const char *key, json_t *v)
{
	json_t *a = json_object_get(o, key);
	if (!a) {
		a = json_array();
		json_object_set_new(o, key, a);
	}
	return json_array_append_new(a, v);
}

enum {
	OPT_MODE = 1000,
	OPT_ALLOW,
	OPT_REMOVE,
	OPT_DOMAIN,
	OPT_RM_DOMAIN,
	OPT_SERVICE,
	OPT_RM_SERVICE,
	OPT_ESTABLISHED,
};

static void print_policy(const char *json)
{
	json_t *o = json_loads(json, 0, NULL);
	if (!o) {
		printf("%s\n", json);
		return;
	}
	printf("mode      %s%s\n", json_string_value(json_object_get(o, "mode")),
	       json_is_true(json_object_get(o, "enforced")) ? "" : " (not enforced)");
	printf("established %s\n", json_string_value(json_object_get(o, "established")));
	size_t i;
	json_t *v;
	json_array_foreach(json_object_get(o, "allow"), i, v)
	    printf("allow     %s ports %s %s\n", json_string_value(json_object_get(v, "cidr")),
		   json_string_value(json_object_get(v, "ports")),
		   json_string_value(json_object_get(v, "protocol")));
	json_array_foreach(json_object_get(o, "domains"), i, v)
	    printf("domain    %s\n", json_string_value(v));
	json_array_foreach(json_object_get(o, "services"), i, v)
	    printf("service   %s\n", json_string_value(v));
	json_t *rf = json_object_get(o, "refusals");
	printf("refused   %lld\n", (long long)json_integer_value(json_object_get(rf, "total")));
	json_array_foreach(json_object_get(rf, "recent"), i, v)
	    printf("  %s %s %s:%lld %s x%lld\n", json_string_value(json_object_get(v, "time")),
		   json_string_value(json_object_get(v, "hook")),
		   json_string_value(json_object_get(v, "address")),
		   (long long)json_integer_value(json_object_get(v, "port")),
		   json_string_value(json_object_get(v, "protocol")),
		   (long long)json_integer_value(json_object_get(v, "count")));
	json_decref(o);
}

int cmd_network(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"mode", required_argument, NULL, OPT_MODE},
	    {"allow", required_argument, NULL, OPT_ALLOW},
	    {"remove", required_argument, NULL, OPT_REMOVE},
	    {"domain", required_argument, NULL, OPT_DOMAIN},
	    {"remove-domain", required_argument, NULL, OPT_RM_DOMAIN},
	    {"service", required_argument, NULL, OPT_SERVICE},
	    {"remove-service", required_argument, NULL, OPT_RM_SERVICE},
	    {"established", required_argument, NULL, OPT_ESTABLISHED},
	    CLI_CONN_OPTIONS,
	    {0},
	};
	struct cli_conn cc = {0};
	json_t *patch = json_object();
	json_t *rule;
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (cli_conn_opt(&cc, c, optarg))
			continue;
		switch (c) {
		case OPT_MODE: json_object_set_new(patch, "mode", json_string(optarg)); break;
		case OPT_ESTABLISHED:
			json_object_set_new(patch, "established", json_string(optarg));
			break;
		case OPT_ALLOW:
		case OPT_REMOVE:
			if (cli_net_rule(c == OPT_ALLOW ? "--allow" : "--remove", optarg, &rule)) {
				json_decref(patch);
				return WR_EXIT_WARREN;
			}
			add_to(patch, c == OPT_ALLOW ? "allow_add" : "allow_remove", rule);
			break;
		case OPT_DOMAIN: add_to(patch, "domains_add", json_string(optarg)); break;
		case OPT_RM_DOMAIN: add_to(patch, "domains_remove", json_string(optarg)); break;
		case OPT_SERVICE: add_to(patch, "services_add", json_string(optarg)); break;
		case OPT_RM_SERVICE: add_to(patch, "services_remove", json_string(optarg)); break;
		case 'h':
			network_usage(stdout);
			json_decref(patch);
			return 0;
		default: json_decref(patch); return cli_bad_option(c, argv);
		}
	}
	if (argc - optind != 1) {
		json_decref(patch);
		return cli_usage_error(NULL, "expected SANDBOX (warren network SANDBOX [options])");
	}
	char *body = json_object_size(patch) ? json_dumps(patch, JSON_COMPACT) : NULL;
	json_decref(patch);
	warren_client *cl = NULL;
	warren_sandbox *sb = NULL;
	warren_error *err = NULL;
	char *out = NULL;
	int r = cli_connect(&cc, &cl);
	if (r) {
		free(body);
		return r;
	}
	if (warren_sandbox_connect(cl, argv[optind], &sb, &err) < 0 ||
	    (body ? warren_sandbox_network_patch(sb, body, &out, &err)
		  : warren_sandbox_network_get(sb, &out, &err)) < 0)
		r = cli_fail(err);
	else if (cc.json)
		cli_print_json(out);
	else
		print_policy(out);
	warren_free(out);
	free(body);
	warren_sandbox_free(sb);
	warren_client_free(cl);
	return r;
}
