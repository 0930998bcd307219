/* warren: the one error convention.
 *
 * Every fallible function returns an int: >= 0 on success, negative on
 * failure. On failure it fills a wr_err with the errno that caused it and a
 * human message. Callers that unwind add context in front of the message
 * with wr_err_wrap(), so the final text reads outermost-first:
 *   "create sandbox: rootfs: mount overlay: Invalid argument"
 * Library code never logs; front ends print wr_err->msg once.
 */
#ifndef WARREN_COMMON_ERROR_H
#define WARREN_COMMON_ERROR_H

#include <stdarg.h>

struct wr_error {
	int errnum;  /* errno value, or 0 when there is none */
	char *field; /* optional: the user-supplied field at fault (API, CLI) */
	char *msg;   /* full message, context first */
};
typedef struct wr_error *wr_err;

/* Set a new error (freeing none: *err must be NULL). Always returns
 * -errnum (or -EIO when errnum is 0) so callers can `return wr_err_set(...)`. */
int wr_err_set(wr_err *err, int errnum, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Like wr_err_set, with errnum = errno and ": strerror(errno)" appended. */
int wr_err_sys(wr_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A validation error naming the offending field. errnum is EINVAL. */
int wr_err_field(wr_err *err, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prefix context to an existing error: "ctx: old". Returns the same negative
 * value wr_err_set would have. Tolerates *err == NULL (makes an EIO error). */
int wr_err_wrap(wr_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int wr_err_code(const wr_err err);
void wr_err_free(wr_err *err);

/* Child-half errors. Code that runs between clone and exec must not
 * allocate (the parent may be multi-threaded), so it reports into a fixed
 * buffer and the parent turns that into a wr_err. */
struct wr_cerr {
	int errnum;
	char msg[480];
};
int wr_cerr_set(struct wr_cerr *e, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* errno-based: appends ": strerror(errno)". Returns -errno. */
int wr_cerr_sys(struct wr_cerr *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Send a child error across a pipe or socket (one atomic write). */
int wr_cerr_send(int fd, const struct wr_cerr *e);
/* Parent side: returns 0 on EOF (child exec'd or finished without error),
 * or -errnum after filling *err with the child's message. */
int wr_err_recv(int fd, wr_err *err);

#endif
