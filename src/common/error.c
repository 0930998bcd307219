#include "common/error.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int neg(int errnum)
{
	return errnum > 0 ? -errnum : -EIO;
}

static int vset(wr_err *err, int errnum, const char *fmt, va_list ap)
{
	if (err == NULL)
		return neg(errnum);
	wr_err_free(err);
	struct wr_error *e = calloc(1, sizeof(*e));
	if (e == NULL)
		return neg(errnum);
	e->errnum = errnum;
	if (vasprintf(&e->msg, fmt, ap) < 0)
		e->msg = NULL;
	*err = e;
	return neg(errnum);
}

int wr_err_set(wr_err *err, int errnum, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = vset(err, errnum, fmt, ap);
	va_end(ap);
	return r;
}

int wr_err_sys(wr_err *err, const char *fmt, ...)
{
	int saved = errno;
	char *base = NULL;
	va_list ap;
	va_start(ap, fmt);
	if (vasprintf(&base, fmt, ap) < 0)
		base = NULL;
	va_end(ap);
	int r = wr_err_set(err, saved, "%s: %s", base ? base : "?", strerror(saved));
	free(base);
	errno = saved;
	return r;
}

int wr_err_field(wr_err *err, const char *field, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = vset(err, EINVAL, fmt, ap);
	va_end(ap);
	if (err && *err && field)
		(*err)->field = strdup(field);
	return r;
}

int wr_err_wrap(wr_err *err, const char *fmt, ...)
{
	if (err == NULL)
		return -EIO;
	if (*err == NULL)
		wr_err_set(err, EIO, "unknown error");
	if (*err == NULL)
		return -EIO;
	char *ctx = NULL, *joined = NULL;
	va_list ap;
	va_start(ap, fmt);
	if (vasprintf(&ctx, fmt, ap) < 0)
		ctx = NULL;
	va_end(ap);
	if (ctx && asprintf(&joined, "%s: %s", ctx, (*err)->msg ? (*err)->msg : "?") >= 0) {
		free((*err)->msg);
		(*err)->msg = joined;
	}
	free(ctx);
	return neg((*err)->errnum);
}

int wr_err_code(const wr_err err)
{
	return err ? err->errnum : 0;
}

void wr_err_free(wr_err *err)
{
	if (err == NULL || *err == NULL)
		return;
	free((*err)->msg);
	free((*err)->field);
	free(*err);
	*err = NULL;
}

int wr_cerr_set(struct wr_cerr *e, int errnum, const char *fmt, ...)
{
	if (e) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
		va_end(ap);
		e->errnum = errnum;
	}
	return neg(errnum);
}

int wr_cerr_sys(struct wr_cerr *e, const char *fmt, ...)
{
	int saved = errno;
	if (e) {
		char base[400];
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(base, sizeof(base), fmt, ap);
		va_end(ap);
		/* strerror_r (GNU) does not allocate for known errnos */
		char eb[64];
		const char *es = strerror_r(saved, eb, sizeof(eb));
		snprintf(e->msg, sizeof(e->msg), "%s: %s", base, es);
		e->errnum = saved;
	}
	errno = saved;
	return neg(saved);
}

int wr_cerr_send(int fd, const struct wr_cerr *e)
{
	int32_t errnum = e && e->errnum ? e->errnum : EIO;
	const char *msg = e && e->msg[0] ? e->msg : "unknown error";
	uint32_t len = (uint32_t)strnlen(msg, sizeof(e->msg));
	char buf[8 + sizeof(e->msg)];
	memcpy(buf, &errnum, 4);
	memcpy(buf + 4, &len, 4);
	memcpy(buf + 8, msg, len);
	ssize_t n;
	do
		n = write(fd, buf, 8 + len);
	while (n < 0 && errno == EINTR);
	return n == (ssize_t)(8 + len) ? 0 : -EIO;
}

int wr_err_recv(int fd, wr_err *err)
{
	char buf[8 + 4096];
	ssize_t n;
	do
		n = read(fd, buf, sizeof(buf) - 1);
	while (n < 0 && errno == EINTR);
	if (n == 0)
		return 0;
	if (n < 8)
		return wr_err_set(err, EIO, "child setup failed without a report");
	int32_t errnum;
	uint32_t len;
	memcpy(&errnum, buf, 4);
	memcpy(&len, buf + 4, 4);
	if (len > (uint32_t)(n - 8))
		len = (uint32_t)(n - 8);
	buf[8 + len] = 0;
	return wr_err_set(err, errnum, "%s", buf + 8);
}
