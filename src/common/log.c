#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *g_prog = "warren";
static enum wr_log_level g_level = WR_LOG_WARN;

void wr_log_init(const char *progname, enum wr_log_level level)
{
	if (progname) {
		const char *slash = strrchr(progname, '/');
		g_prog = slash ? slash + 1 : progname;
	}
	g_level = level;
}

void wr_log(enum wr_log_level level, const char *fmt, ...)
{
	if (level > g_level)
		return;
	static const char *names[] = {"error", "warning", "info", "debug"};
	char line[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	/* one line per message, so interleaved writers never split it */
	for (char *p = line; *p; p++)
		if (*p == '\n')
			*p = ' ';
	fprintf(stderr, "%s: %s%s%s\n", g_prog, level == WR_LOG_ERROR ? "" : names[level],
		level == WR_LOG_ERROR ? "" : ": ", line);
}

void wr_log_err(const wr_err err)
{
	wr_log(WR_LOG_ERROR, "%s", err && err->msg ? err->msg : "unknown error");
}
