#include "daemon/jsonutil.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int wrd_j_int(json_t *v, const char *field, int64_t min, int64_t max, int64_t *out, wr_err *err)
{
	if (!json_is_integer(v))
		return wr_err_field(err, field, "%s: must be an integer", field);
	json_int_t x = json_integer_value(v);
	if (x < min || x > max)
		return wr_err_field(err, field, "%s: must be between %lld and %lld", field,
				    (long long)min, (long long)max);
	*out = x;
	return 0;
}

int wrd_j_num(json_t *v, const char *field, double min_excl, double max, double *out, wr_err *err)
{
	if (!json_is_number(v))
		return wr_err_field(err, field, "%s: must be a number", field);
	double x = json_number_value(v);
	if (!isfinite(x) || x < 0 || (x <= min_excl && x != 0) || x > max)
		return wr_err_field(err, field, "%s: must be 0 or between %g (exclusive) and %g",
				    field, min_excl, max);
	*out = x;
	return 0;
}

int wrd_j_bool(json_t *v, const char *field, bool *out, wr_err *err)
{
	if (!json_is_boolean(v))
		return wr_err_field(err, field, "%s: must be true or false", field);
	*out = json_is_true(v);
	return 0;
}

int wrd_j_str(json_t *v, const char *field, size_t maxlen, bool allow_empty, const char **out,
	      wr_err *err)
{
	if (!json_is_string(v))
		return wr_err_field(err, field, "%s: must be a string", field);
	size_t n = json_string_length(v);
	const char *s = json_string_value(v);
	if (memchr(s, 0, n))
		return wr_err_field(err, field, "%s: must not contain NUL", field);
	if ((n == 0 && !allow_empty) || n > maxlen)
		return wr_err_field(err, field, "%s: must be %d to %zu bytes long", field,
				    allow_empty ? 0 : 1, maxlen);
	*out = s;
	return 0;
}

int wrd_j_strmap(json_t *v, const char *field, size_t max_pairs, wr_err *err)
{
	if (!json_is_object(v))
		return wr_err_field(err, field, "%s: must be an object of strings", field);
	if (json_object_size(v) > max_pairs)
		return wr_err_field(err, field, "%s: at most %zu entries", field, max_pairs);
	const char *k;
	json_t *val;
	json_object_foreach(v, k, val)
	{
		char name[320];
		snprintf(name, sizeof(name), "%s.%s", field, k);
		const char *s;
		if (wrd_j_str(val, name, 65536, true, &s, err) < 0)
			return -EINVAL;
	}
	return 0;
}

/* Length of the valid UTF-8 sequence at p (1..4), 0 if invalid, -n if it is
 * a valid but incomplete prefix of n bytes at the end of the buffer. */
static int utf8_seq(const unsigned char *p, size_t avail)
{
	unsigned char c = p[0];
	int n;
	unsigned lo = 0x80, hi = 0xBF;
	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		n = 2;
	else if (c >= 0xE0 && c <= 0xEF) {
		n = 3;
		if (c == 0xE0)
			lo = 0xA0;
		if (c == 0xED)
			hi = 0x9F;
	} else if (c >= 0xF0 && c <= 0xF4) {
		n = 4;
		if (c == 0xF0)
			lo = 0x90;
		if (c == 0xF4)
			hi = 0x8F;
	} else
		return 0;
	for (int i = 1; i < n; i++) {
		if ((size_t)i >= avail)
			return -i;
		unsigned char b = p[i];
		if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF))
			return 0;
	}
	return n;
}

char *wrd_utf8_repair(const char *buf, size_t len, size_t *outlen)
{
	/* worst case: every byte becomes the 3-byte U+FFFD */
	char *out = malloc(len * 3 + 1);
	if (out == NULL)
		return NULL;
	const unsigned char *p = (const unsigned char *)buf;
	size_t i = 0, o = 0;
	while (i < len) {
		int n = utf8_seq(p + i, len - i);
		if (n > 0) {
			memcpy(out + o, p + i, (size_t)n);
			o += (size_t)n;
			i += (size_t)n;
		} else {
			memcpy(out + o, "\xEF\xBF\xBD", 3);
			o += 3;
			/* an incomplete tail is one replacement; else skip one byte */
			i += n < 0 ? (size_t)-n : 1;
		}
	}
	out[o] = 0;
	*outlen = o;
	return out;
}

size_t wrd_utf8_tail(const char *buf, size_t len)
{
	const unsigned char *p = (const unsigned char *)buf;
	for (size_t back = 1; back <= 3 && back <= len; back++) {
		unsigned char c = p[len - back];
		if ((c & 0xC0) == 0x80)
			continue; /* continuation byte: keep looking for the lead */
		int n = utf8_seq(p + len - back, back);
		return n < 0 ? back : 0;
	}
	return 0;
}

char *wrd_base64(const void *buf, size_t len, size_t *outlen)
{
	static const char tbl[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t n = 4 * ((len + 2) / 3);
	char *out = malloc(n + 1);
	if (out == NULL)
		return NULL;
	const unsigned char *p = buf;
	size_t o = 0, i = 0;
	for (; i + 2 < len; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
		out[o++] = tbl[v >> 18];
		out[o++] = tbl[(v >> 12) & 63];
		out[o++] = tbl[(v >> 6) & 63];
		out[o++] = tbl[v & 63];
	}
	if (i < len) {
		uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < len ? (uint32_t)p[i + 1] << 8 : 0);
		out[o++] = tbl[v >> 18];
		out[o++] = tbl[(v >> 12) & 63];
		out[o++] = i + 1 < len ? tbl[(v >> 6) & 63] : '=';
		out[o++] = '=';
	}
	out[o] = 0;
	if (outlen)
		*outlen = o;
	return out;
}

json_t *wrd_j_output(const char *buf, size_t len, bool base64)
{
	size_t n;
	char *s = base64 ? wrd_base64(buf, len, &n) : wrd_utf8_repair(buf ? buf : "", len, &n);
	if (s == NULL)
		return NULL;
	json_t *j = json_stringn_nocheck(s, n);
	free(s);
	return j;
}

int64_t wrd_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void wrd_iso_time(int64_t ms, char *buf, size_t n)
{
	time_t s = (time_t)(ms / 1000);
	struct tm tm;
	gmtime_r(&s, &tm);
	snprintf(buf, n, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
		 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
}

json_t *wrd_j_time(int64_t ms)
{
	char buf[40];
	wrd_iso_time(ms, buf, sizeof(buf));
	return json_string(buf);
}
