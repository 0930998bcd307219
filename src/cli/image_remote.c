/* warren image push|pull: registry transfers through warrend. Parses and
 * dispatches into libwarren only. Passwords and tokens are read from stdin
 * (--password-stdin, --token-stdin), never from argv where ps shows them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static void remote_usage(FILE *f)
{
	fprintf(f, "usage: warren image pull [options] REGISTRY/REPO[:TAG|@sha256:...]\n"
		   "       warren image push [options] REF REGISTRY/REPO[:TAG]\n\n"
		   "  pull: fetch an image into the node's store (a warren artifact as is, any\n"
		   "        other OCI or Docker image converted on the node)\n"
		   "    --as NAME[:TAG]      local name (default: the repository path and tag)\n"
		   "    --lazy               record a warren artifact without fetching its blob\n"
		   "    --platform OS/ARCH   entry of a multi-platform index (linux/amd64)\n"
		   "  push: send a store image as a warren artifact (EROFS layer + OCI config)\n"
		   "    --chunk-size BYTES   upload in chunks of this size (default: whole)\n"
		   "  registry access (both):\n"
		   "    --user NAME          with --password-stdin: basic credentials, also used\n"
		   "                         for the registry's token service\n"
		   "    --password-stdin     read the password from the first line of stdin\n"
		   "    --token-stdin        read a ready bearer token from stdin\n"
		   "    --insecure           allow plain http and unverified TLS (loopback\n"
		   "                         registries need no flag)\n\n"
		   "options:\n" CLI_CONN_HELP);
}

enum {
	OPT_AS = 1100,
	OPT_LAZY,
	OPT_PLATFORM,
	OPT_CHUNK,
	OPT_USER,
	OPT_PWSTDIN,
	OPT_TOKSTDIN,
	OPT_INSECURE
};

char *cli_stdin_line(const char *opt)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t n = getline(&line, &cap, stdin);
	if (n <= 0) {
		free(line);
		cli_usage_error(opt, "%s: nothing on stdin", opt);
		return NULL;
	}
	while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		line[--n] = 0;
	if (n == 0) {
		free(line);
		cli_usage_error(opt, "%s: the first line of stdin is empty", opt);
		return NULL;
	}
	return line;
}

int cmd_image_remote(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"as", required_argument, NULL, OPT_AS},
	    {"lazy", no_argument, NULL, OPT_LAZY},
	    {"platform", required_argument, NULL, OPT_PLATFORM},
	    {"chunk-size", required_argument, NULL, OPT_CHUNK},
	    {"user", required_argument, NULL, OPT_USER},
	    {"password-stdin", no_argument, NULL, OPT_PWSTDIN},
	    {"token-stdin", no_argument, NULL, OPT_TOKSTDIN},
	    {"insecure", no_argument, NULL, OPT_INSECURE},
	    CLI_CONN_OPTIONS,
	    {0},
	};
	const char *verb = argv[1];
	bool pull = strcmp(verb, "pull") == 0;
	struct cli_conn cc = {0};
	const char *as = NULL, *platform = NULL, *user = NULL;
	bool lazy = false, pw_stdin = false, tok_stdin = false, insecure = false;
	int64_t chunk = 0;
	int c;
	argc--;
	argv++;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (cli_conn_opt(&cc, c, optarg))
			continue;
		switch (c) {
		case OPT_AS: as = optarg; break;
		case OPT_LAZY: lazy = true; break;
		case OPT_PLATFORM: platform = optarg; break;
		case OPT_USER: user = optarg; break;
		case OPT_PWSTDIN: pw_stdin = true; break;
		case OPT_TOKSTDIN: tok_stdin = true; break;
		case OPT_INSECURE: insecure = true; break;
		case OPT_CHUNK: {
			char *end;
			errno = 0;
			long long v = strtoll(optarg, &end, 10);
			if (errno || *end || v < 0 || v > (1ll << 30))
				return cli_usage_error("--chunk-size",
						       "--chunk-size: bytes from 0 to 1073741824");
			chunk = v;
			break;
		}
		case 'h': remote_usage(stdout); return 0;
		default: return cli_bad_option(c, argv);
		}
	}
	argc -= optind;
	argv += optind;
	if (pull && argc != 1)
		return cli_usage_error(NULL, "pull: one registry reference is needed");
	if (!pull && argc != 2)
		return cli_usage_error(NULL, "push: REF and a registry reference are needed");
	if (!pull && (as || lazy || platform))
		return cli_usage_error(as     ? "--as"
				       : lazy ? "--lazy"
					      : "--platform",
				       "push: --as, --lazy and --platform are pull options");
	if (pull && chunk)
		return cli_usage_error("--chunk-size", "pull: --chunk-size is a push option");
	if ((user != NULL) != pw_stdin)
		return cli_usage_error(user ? "--user" : "--password-stdin",
				       "--user and --password-stdin go together");
	if (tok_stdin && user)
		return cli_usage_error("--token-stdin", "--token-stdin excludes --user");
	char *secret = NULL;
	if ((pw_stdin || tok_stdin) &&
	    (secret = cli_stdin_line(pw_stdin ? "--password-stdin" : "--token-stdin")) == NULL)
		return WR_EXIT_WARREN;
	warren_registry_auth auth = {.username = user,
				     .password = pw_stdin ? secret : NULL,
				     .token = tok_stdin ? secret : NULL,
				     .insecure = insecure};
	warren_client *cl = NULL;
	int r = cli_connect(&cc, &cl);
	if (r) {
		free(secret);
		return r;
	}
	warren_error *err = NULL;
	char *rep = NULL;
	if (pull) {
		warren_image_pull_opts po = WARREN_IMAGE_PULL_OPTS_INIT;
		po.ref = argv[0];
		po.as = as;
		po.lazy = lazy;
		po.platform = platform;
		po.auth = auth;
		warren_image *img = NULL;
		if (warren_image_pull(cl, &po, &img, &rep, &err) < 0) {
			r = cli_fail(err);
		} else if (cc.json) {
			cli_print_json(img->json ? img->json : "{}");
		} else {
			printf("%s\n", img->digest);
		}
		warren_image_free(img);
	} else {
		warren_image_push_opts po = WARREN_IMAGE_PUSH_OPTS_INIT;
		po.to = argv[1];
		po.chunk_size = chunk;
		po.auth = auth;
		if (warren_image_push(cl, argv[0], &po, &rep, &err) < 0)
			r = cli_fail(err);
		else if (cc.json)
			cli_print_json(rep);
		else
			printf("%s\n", argv[1]);
	}
	warren_free(rep);
	if (secret) {
		memset(secret, 0, strlen(secret));
		free(secret);
	}
	warren_client_free(cl);
	return r;
}
