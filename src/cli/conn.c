/* Shared plumbing of the verbs that talk to warrend: connection options,
 * error reporting, small parsers and output helpers. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/util.h"

bool cli_conn_opt(struct cli_conn *cc, int c, const char *arg)
{
	switch (c) {
	case CLI_OPT_SOCKET: cc->socket = arg; return true;
	case CLI_OPT_URL: cc->url = arg; return true;
	case CLI_OPT_TOKEN: cc->token = arg; return true;
	case CLI_OPT_JSON: cc->json = true; return true;
	default: return false;
	}
}

int cli_bad_option(int c, char **argv)
{
	char name[64];
	const char *arg = optind > 0 ? argv[optind - 1] : "";
	bool is_long = strncmp(arg, "--", 2) == 0;
	if (is_long) {
		snprintf(name, sizeof(name), "%.*s", (int)strcspn(arg, "="), arg);
	} else if (optopt > 0 && optopt < 256) {
		snprintf(name, sizeof(name), "-%c", optopt);
	} else {
		snprintf(name, sizeof(name), "%s", arg);
	}
	if (c == ':')
		return cli_usage_error(name, "requires a value");
	return cli_usage_error(name, "unknown option (see --help)");
}

int cli_fail(warren_error *err)
{
	const char *msg = warren_error_message(err);
	const char *field = warren_error_field(err);
	if (field && strstr(msg, field) == NULL)
		fprintf(stderr, "warren: %s (field: %s)\n", msg, field);
	else
		fprintf(stderr, "warren: %s\n", msg);
	warren_error_free(err);
	return WR_EXIT_WARREN;
}

int cli_connect(struct cli_conn *cc, warren_client **out)
{
	warren_client_opts o = WARREN_CLIENT_OPTS_INIT;
	if (cc->socket && cc->url)
		return cli_usage_error("--url", "cannot be combined with --socket");
	if (cc->socket) {
		o.socket_path = cc->socket;
	} else if (cc->url) {
		o.url = cc->url;
	} else {
		const char *env_url = getenv("WARREN_URL");
		const char *env_sock = getenv("WARREN_SOCKET");
		if (env_url && *env_url)
			o.url = env_url;
		else if (env_sock && *env_sock)
			o.socket_path = env_sock;
	}
	o.token = cc->token;
	if (o.token == NULL) {
		const char *env_tok = getenv("WARREN_TOKEN");
		if (env_tok && *env_tok)
			o.token = env_tok;
	}
	if (o.url && o.token == NULL)
		return cli_usage_error("--token", "is required with --url (or set $WARREN_TOKEN)");
	warren_error *err = NULL;
	if (warren_client_new(&o, out, &err) < 0) {
		const char *field = warren_error_field(err);
		if (field && (strcmp(field, "url") == 0 || strcmp(field, "token") == 0)) {
			char opt[16];
			snprintf(opt, sizeof(opt), "--%s", field);
			int r = cli_usage_error(opt, "%s", warren_error_message(err));
			warren_error_free(err);
			return r;
		}
		return cli_fail(err);
	}
	return 0;
}

int cli_conn_only_opts(int argc, char **argv, struct cli_conn *cc, void (*usage)(FILE *))
{
	static const struct option opts[] = {CLI_CONN_OPTIONS, {0}};
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		if (cli_conn_opt(cc, c, optarg))
			continue;
		if (c == 'h') {
			usage(stdout);
			return 0;
		}
		return cli_bad_option(c, argv);
	}
	return -1;
}

int cli_open_sandbox(struct cli_conn *cc, const char *id, warren_client **cl, warren_sandbox **sb)
{
	warren_error *err = NULL;
	*cl = NULL;
	*sb = NULL;
	int r = cli_connect(cc, cl);
	if (r)
		return r;
	if (warren_sandbox_connect(*cl, id, sb, &err) < 0) {
		r = cli_fail(err);
		warren_client_free(*cl);
		*cl = NULL;
		*sb = NULL;
	}
	return r;
}

int cli_parse_user(const char *arg, int64_t *out)
{
	uint64_t v;
	if (wr_parse_u64(arg, 65535, &v) < 0)
		return cli_usage_error("--user", "'%s' is not a uid between 0 and 65535", arg);
	*out = (int64_t)v;
	return 0;
}

int cli_read_whole(int fd, char **out, size_t *len, size_t max)
{
	size_t cap = 65536, n = 0;
	char *buf = malloc(cap);
	if (buf == NULL)
		return -ENOMEM;
	for (;;) {
		if (n == cap) {
			char *p = cap < max ? realloc(buf, cap * 2) : NULL;
			if (p == NULL) {
				free(buf);
				return -EFBIG;
			}
			buf = p;
			cap *= 2;
		}
		ssize_t r = read(fd, buf + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = errno;
			free(buf);
			return -e;
		}
		if (r == 0)
			break;
		n += (size_t)r;
		if (n > max) {
			free(buf);
			return -EFBIG;
		}
	}
	*out = buf;
	*len = n;
	return 0;
}

int cli_parse_kv(const char *opt, char *arg, warren_kv *out)
{
	char *eq = strchr(arg, '=');
	if (eq == NULL || eq == arg)
		return cli_usage_error(opt, "'%s' is not of the form KEY=VALUE", arg);
	*eq = 0;
	out->key = arg;
	out->value = eq + 1;
	return 0;
}

int cli_parse_seconds(const char *opt, const char *arg, int64_t *out)
{
	uint64_t ms;
	if (wr_parse_duration_ms(arg, &ms) < 0 || ms == 0 || ms > 100ull * 365 * 86400 * 1000)
		return cli_usage_error(opt, "'%s' is not a duration (e.g. 90, 30s, 5m, 2h)", arg);
	*out = (int64_t)((ms + 999) / 1000);
	return 0;
}

bool cli_split_remote(const char *arg, char **id, const char **path)
{
	const char *colon = strchr(arg, ':');
	if (colon == NULL || colon == arg)
		return false;
	for (const char *p = arg; p < colon; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '-' || *p == '_'))
			return false;
	*id = strndup(arg, (size_t)(colon - arg));
	*path = colon + 1;
	return *id != NULL;
}

void cli_print_json(const char *text)
{
	json_error_t jerr;
	json_t *j = text ? json_loads(text, JSON_DECODE_ANY, &jerr) : NULL;
	if (j == NULL) {
		printf("%s\n", text ? text : "null");
		return;
	}
	json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
	fputc('\n', stdout);
	json_decref(j);
}

void cli_mode_string(warren_file_type type, unsigned int mode, char out[11])
{
	static const char rwx[] = "rwxrwxrwx";
	out[0] = type == WARREN_FILE_DIR       ? 'd'
		 : type == WARREN_FILE_SYMLINK ? 'l'
		 : type == WARREN_FILE_REGULAR ? '-'
					       : '?';
	for (int i = 0; i < 9; i++)
		out[1 + i] = mode & (0400u >> i) ? rwx[i] : '-';
	out[10] = 0;
}
