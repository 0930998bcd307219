/* Logging for front ends (CLI, warrend) only. Library code reports through
 * wr_err and never calls these. */
#ifndef WARREN_COMMON_LOG_H
#define WARREN_COMMON_LOG_H

#include "common/error.h"

enum wr_log_level { WR_LOG_ERROR, WR_LOG_WARN, WR_LOG_INFO, WR_LOG_DEBUG };

void wr_log_init(const char *progname, enum wr_log_level level);
void wr_log(enum wr_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Print "progname: msg" for an error object on one line of stderr. */
void wr_log_err(const wr_err err);

#define wr_error(...) wr_log(WR_LOG_ERROR, __VA_ARGS__)
#define wr_warn(...) wr_log(WR_LOG_WARN, __VA_ARGS__)
#define wr_info(...) wr_log(WR_LOG_INFO, __VA_ARGS__)
#define wr_debug(...) wr_log(WR_LOG_DEBUG, __VA_ARGS__)

#endif
