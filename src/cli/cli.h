/* The warren CLI: one file per verb; each only parses and dispatches. */
#ifndef WARREN_CLI_CLI_H
#define WARREN_CLI_CLI_H

/* Exit status for warren's own failures (as podman uses). */
#define WR_EXIT_WARREN 125

int cmd_run(int argc, char **argv);
int cmd_create(int argc, char **argv);
int cmd_exec(int argc, char **argv);
int cmd_shell(int argc, char **argv);
int cmd_cp(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_rm(int argc, char **argv);
int cmd_set_timeout(int argc, char **argv);
int cmd_events(int argc, char **argv);
int cmd_image(int argc, char **argv);
/* warren image push|pull (image_remote.c), dispatched from cmd_image */
int cmd_image_remote(int argc, char **argv);
int cmd_call(int argc, char **argv);
/* screen and input of VMs: screen.c */
int cmd_screenshot(int argc, char **argv);
int cmd_input(int argc, char **argv);
/* lifecycle: pause.c, lease.c */
int cmd_pause(int argc, char **argv);
int cmd_resume(int argc, char **argv);
int cmd_lease(int argc, char **argv);
int cmd_network(int argc, char **argv);
int cmd_ports(int argc, char **argv);
/* snapshot.c */
int cmd_snapshot(int argc, char **argv);
int cmd_fork(int argc, char **argv);

/* Usage error: one line on stderr naming the option and the reason. */
int cli_usage_error(const char *opt, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Locate warren-init next to this binary or in the install libexecdir. */
const char *cli_init_path(void);

/* ---- verbs that talk to warrend (conn.c) ---------------------------- */

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

#include "warren/warren.h"

/* Connection and output options every client verb accepts. */
enum {
	CLI_OPT_SOCKET = 900,
	CLI_OPT_URL,
	CLI_OPT_TOKEN,
	CLI_OPT_JSON,
};
/* clang-format off */
#define CLI_CONN_OPTIONS \
	{"socket", required_argument, NULL, CLI_OPT_SOCKET}, \
	{"url", required_argument, NULL, CLI_OPT_URL}, \
	{"token", required_argument, NULL, CLI_OPT_TOKEN}, \
	{"json", no_argument, NULL, CLI_OPT_JSON}, \
	{"help", no_argument, NULL, 'h'}
/* clang-format on */
#define CLI_CONN_HELP                                                                              \
	"  --socket PATH   daemon socket (default $WARREN_SOCKET or " WARREN_DEFAULT_SOCKET ")\n"  \
	"  --url URL       daemon over TCP (default $WARREN_URL); needs --token\n"                 \
	"  --token TOKEN   bearer token (default $WARREN_TOKEN)\n"                                 \
	"  --json          machine-readable output\n"

struct cli_conn {
	const char *socket;
	const char *url;
	const char *token;
	bool json;
};

/* Take a connection option; returns true when c was one. */
bool cli_conn_opt(struct cli_conn *cc, int c, const char *arg);
/* Report a getopt failure ('?' or ':') naming the option; returns 125. */
int cli_bad_option(int c, char **argv);
/* Make the client (flags, then environment). Prints and returns 125 on
 * failure, 0 on success. */
int cli_connect(struct cli_conn *cc, warren_client **out);
/* Print a library error as one line and free it; returns 125. */
int cli_fail(warren_error *err);
/* Parse argv for the connection options and -h only (verbs with no options
 * of their own). Returns -1 to go on with argv[optind..], else the exit
 * status: 0 after printing usage(stdout) for -h, 125 on a bad option. */
int cli_conn_only_opts(int argc, char **argv, struct cli_conn *cc, void (*usage)(FILE *));
/* cli_connect, then connect to sandbox id. 0 with both set; else the
 * error printed, nothing held (*cl and *sb NULL) and 125 returned. */
int cli_open_sandbox(struct cli_conn *cc, const char *id, warren_client **cl, warren_sandbox **sb);
/* -u/--user: a uid from 0 to 65535; 125 (usage error printed) or 0. */
int cli_parse_user(const char *arg, int64_t *out);
/* Read fd to its end into a malloc'd buffer of at most max bytes: 0, or
 * -EFBIG past max, -errno on a read or allocation failure. */
int cli_read_whole(int fd, char **out, size_t *len, size_t max);
/* Parse "KEY=VALUE" in place for option opt; returns 125 on error, 0 ok. */
int cli_parse_kv(const char *opt, char *arg, warren_kv *out);
/* Parse a duration into whole seconds (rounded up); 125 on error. */
int cli_parse_seconds(const char *opt, const char *arg, int64_t *out);
/* Split "SB:PATH"; returns true (with *id malloc'd, *path borrowed) when arg
 * names a sandbox path. */
bool cli_split_remote(const char *arg, char **id, const char **path);
/* network.c: "CIDR[:PORTS][/PROTO]" (IPv6 in brackets) as a rule object
 * for the API; a usage error naming opt (125) when malformed. */
struct json_t;
int cli_net_rule(const char *opt, const char *arg, struct json_t **out);
/* Print a JSON text pretty (2-space indent) on stdout. */
void cli_print_json(const char *json);
/* Format a file mode as "drwxr-xr-x". */
void cli_mode_string(warren_file_type type, unsigned int mode, char out[11]);

/* First line of stdin without its newline (malloc'd); NULL, with the one
 * error line printed, if there is none. For secrets (never argv). */
char *cli_stdin_line(const char *opt);

#endif
