/* warren screenshot / input: the screen and keyboard/pointer of a VM
 * sandbox (tier "vm"), for computer-use agents. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

static const char screenshot_help[] =
    "usage: warren screenshot [options] SANDBOX -o FILE.png\n\n"
    "Saves the screen of a VM sandbox as PNG (-o - writes it to stdout).\n\n" CLI_CONN_HELP;

static const char input_help[] =
    "usage: warren input [options] SANDBOX text TEXT\n"
    "       warren input [options] SANDBOX key KEY...        (pressed together: key ctrl c)\n"
    "       warren input [options] SANDBOX move X Y\n"
    "       warren input [options] SANDBOX click X Y [left|right|middle]\n"
    "       warren input [options] SANDBOX scroll X Y DY     (DY wheel steps, negative up)\n"
    "\n" CLI_CONN_HELP;

static int parse_opts(int argc, char **argv, struct cli_conn *cc, const char **out,
		      const char *help)
{
	static const struct option opts[] = {
	    {"output", required_argument, NULL, 'o'}, CLI_CONN_OPTIONS, {0}};
	int c;
	opterr = 0;
	while ((c = getopt_long(argc, argv, out ? ":ho:" : "+:h", opts, NULL)) != -1) {
		if (cli_conn_opt(cc, c, optarg))
			continue;
		if (c == 'h') {
			fputs(help, stdout);
			return -1;
		}
		if (c == 'o' && out) {
			*out = optarg;
			continue;
		}
		return cli_bad_option(c, argv);
	}
	return 0;
}

static int parse_int(const char *what, const char *s, int *v)
{
	char *end;
	errno = 0;
	long x = strtol(s, &end, 10);
	if (errno || end == s || *end || x < -65535 || x > 65535)
		return cli_usage_error(NULL, "%s: expected a number, not '%s'", what, s);
	*v = (int)x;
	return 0;
}

int cmd_screenshot(int argc, char **argv)
{
	struct cli_conn cc = {0};
	const char *out = NULL;
	int r = parse_opts(argc, argv, &cc, &out, screenshot_help);
	if (r)
		return r < 0 ? 0 : r;
	if (optind + 1 != argc)
		return cli_usage_error(
		    NULL, "expected one SANDBOX id (warren screenshot SANDBOX -o FILE)");
	if (out == NULL)
		return cli_usage_error("-o", "-o FILE.png is required (- for stdout)");
	int fd =
	    strcmp(out, "-") == 0 ? 1 : open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		fprintf(stderr, "warren: %s: %s\n", out, strerror(errno));
		return WR_EXIT_WARREN;
	}
	warren_client *cl = NULL;
	if ((r = cli_connect(&cc, &cl)) == 0) {
		warren_sandbox *sb = NULL;
		warren_error *err = NULL;
		if (warren_sandbox_connect(cl, argv[optind], &sb, &err) < 0 ||
		    warren_sandbox_screenshot(sb, fd, &err) < 0)
			r = cli_fail(err);
		warren_sandbox_free(sb);
		warren_client_free(cl);
	}
	if (fd != 1)
		close(fd);
	if (r && fd != 1)
		unlink(out);
	return r;
}

int cmd_input(int argc, char **argv)
{
	struct cli_conn cc = {0};
	int r = parse_opts(argc, argv, &cc, NULL, input_help);
	if (r)
		return r < 0 ? 0 : r;
	if (argc - optind < 2)
		return cli_usage_error(NULL,
				       "expected SANDBOX and text, key, move, click or scroll");
	const char *id = argv[optind], *what = argv[optind + 1];
	char **rest = argv + optind + 2;
	int n = argc - optind - 2, x = 0, y = 0, dy = 0;
	const char *button = NULL;
	if (strcmp(what, "text") == 0) {
		if (n != 1)
			return cli_usage_error(NULL, "text takes one TEXT argument");
	} else if (strcmp(what, "key") == 0) {
		if (n < 1)
			return cli_usage_error(NULL, "key takes one or more KEY names");
	} else if (!strcmp(what, "move") || !strcmp(what, "click") || !strcmp(what, "scroll")) {
		int want = strcmp(what, "move") == 0 ? 2 : 3;
		if (n < 2 || n > want || (strcmp(what, "scroll") == 0 && n != 3))
			return cli_usage_error(NULL, "%s: see warren input --help", what);
		if (parse_int("X", rest[0], &x) || parse_int("Y", rest[1], &y))
			return WR_EXIT_WARREN;
		if (strcmp(what, "click") == 0 && n == 3)
			button = rest[2];
		if (strcmp(what, "scroll") == 0 && parse_int("DY", rest[2], &dy))
			return WR_EXIT_WARREN;
	} else {
		return cli_usage_error(NULL, "'%s': expected text, key, move, click or scroll",
				       what);
	}
	warren_client *cl = NULL;
	if ((r = cli_connect(&cc, &cl)) != 0)
		return r;
	warren_sandbox *sb = NULL;
	warren_error *err = NULL;
	int rc = warren_sandbox_connect(cl, id, &sb, &err);
	if (rc == 0) {
		if (strcmp(what, "text") == 0)
			rc = warren_sandbox_type_text(sb, rest[0], &err);
		else if (strcmp(what, "key") == 0)
			rc = warren_sandbox_press_keys(sb, (const char *const *)rest, (size_t)n,
						       &err);
		else
			rc = warren_sandbox_pointer(sb, what, x, y, button, dy, &err);
	}
	if (rc < 0)
		r = cli_fail(err);
	warren_sandbox_free(sb);
	warren_client_free(cl);
	return r;
}
