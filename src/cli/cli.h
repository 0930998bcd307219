/* The warren CLI: one file per verb; each only parses and dispatches. */
#ifndef WARREN_CLI_CLI_H
#define WARREN_CLI_CLI_H

/* Exit status for warren's own failures (as podman uses). */
#define WR_EXIT_WARREN 125

int cmd_run(int argc, char **argv);

/* Usage error: one line on stderr naming the option and the reason. */
int cli_usage_error(const char *opt, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Locate warren-init next to this binary or in the install libexecdir. */
const char *cli_init_path(void);

#endif
