/* libwarren: the public error object and the mapping of API errors. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_internal.h"
#include "common/cleanup.h"

static const struct {
	const char *code;
	int status;
	int errnum;
} codes[] = {
    {"invalid_argument", 400, EINVAL},
    {"unauthenticated", 401, EACCES},
    {"permission_denied", 403, EPERM},
    {"not_found", 404, ENOENT},
    {"method_not_allowed", 405, EOPNOTSUPP},
    {"conflict", 409, EBUSY},
    {"upgrade_required", 426, EPROTONOSUPPORT},
    {"payload_too_large", 413, EFBIG},
    {"unsupported_media_type", 415, EPROTO},
    {"resource_exhausted", 429, EAGAIN},
    {"internal", 500, EIO},
    {"unavailable", 503, ESHUTDOWN},
    {"transport", 0, ECONNREFUSED},
    {"protocol", 0, EPROTO},
    {"io", 0, EIO},
    {"cancelled", 0, ECANCELED},
};

int wc_code_errno(const char *code)
{
	for (size_t i = 0; code && i < WR_ARRAY_SIZE(codes); i++)
		if (strcmp(codes[i].code, code) == 0)
			return codes[i].errnum;
	return EIO;
}

const char *wc_status_code(long status)
{
	for (size_t i = 0; i < WR_ARRAY_SIZE(codes); i++)
		if (codes[i].status == status)
			return codes[i].code;
	return status >= 500 ? "internal" : "invalid_argument";
}

static int vfail(struct wc_call *c, const char *code, int errnum, const char *field,
		 const char *fmt, va_list ap)
{
	_cleanup_free_ char *msg = NULL;
	if (vasprintf(&msg, fmt, ap) < 0)
		msg = NULL;
	wr_err_free(&c->err);
	int r = wr_err_set(&c->err, errnum, "%s", msg ? msg : "out of memory");
	if (field && c->err)
		c->err->field = strdup(field);
	free(c->code);
	c->code = strdup(code);
	return r;
}

int wc_fail(struct wc_call *c, const char *code, int errnum, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = vfail(c, code, errnum, NULL, fmt, ap);
	va_end(ap);
	return r;
}

int wc_fail_field(struct wc_call *c, const char *field, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = vfail(c, "invalid_argument", EINVAL, field, fmt, ap);
	va_end(ap);
	return r;
}

static int fail_code(struct wc_call *c, const char *code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_code(struct wc_call *c, const char *code, const char *field, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int r = vfail(c, code, wc_code_errno(code), field, fmt, ap);
	va_end(ap);
	return r;
}

int wc_api_error(struct wc_call *c, long status, const char *body, size_t len)
{
	json_error_t jerr;
	json_t *root = body && len ? json_loadb(body, len, 0, &jerr) : NULL;
	json_t *e = root ? json_object_get(root, "error") : NULL;
	const char *code = json_string_value(json_object_get(e, "code"));
	const char *msg = json_string_value(json_object_get(e, "message"));
	const char *field = json_string_value(json_object_get(e, "field"));
	int r;
	if (code == NULL)
		code = wc_status_code(status);
	if (msg)
		r = fail_code(c, code, field, "%s", msg);
	else
		r = fail_code(c, code, field, "HTTP %ld (%s)", status, code);
	c->http_status = (int)status;
	json_decref(root);
	return r;
}

int wc_finish(struct wc_call *c, int r, warren_error **errp, const char *fmt, ...)
{
	if (r < 0) {
		if (c->err == NULL)
			wc_fail(c, "internal", EIO, "unknown failure");
		if (fmt) {
			_cleanup_free_ char *ctx = NULL;
			va_list ap;
			va_start(ap, fmt);
			if (vasprintf(&ctx, fmt, ap) < 0)
				ctx = NULL;
			va_end(ap);
			wr_err_wrap(&c->err, "%s", ctx ? ctx : "?");
		}
		struct warren_error *we = errp ? calloc(1, sizeof(*we)) : NULL;
		if (we && c->err) {
			we->base = *c->err;
			free(c->err);
			c->err = NULL;
			we->code = c->code ? c->code : strdup("internal");
			c->code = NULL;
			we->http_status = c->http_status;
			*errp = we;
		} else {
			free(we);
		}
	}
	wr_err_free(&c->err);
	free(c->code);
	c->code = NULL;
	return r;
}

const char *warren_error_code(const warren_error *err)
{
	return err && err->code ? err->code : "internal";
}

int warren_error_http_status(const warren_error *err)
{
	return err ? err->http_status : 0;
}

int warren_error_errno(const warren_error *err)
{
	return err ? err->base.errnum : 0;
}

const char *warren_error_message(const warren_error *err)
{
	return err && err->base.msg ? err->base.msg : "unknown error";
}

const char *warren_error_field(const warren_error *err)
{
	return err ? err->base.field : NULL;
}

void warren_error_free(warren_error *err)
{
	if (err == NULL)
		return;
	free(err->base.msg);
	free(err->base.field);
	free(err->code);
	free(err);
}

void warren_free(void *p)
{
	free(p);
}
