/* JSON and text helpers for the API: strict typed field checks that name the
 * field at fault, UTF-8 repair, base64, timestamps. */
#ifndef WARREN_DAEMON_JSONUTIL_H
#define WARREN_DAEMON_JSONUTIL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

/* Typed checks: each fails with wr_err_field(field, ...) (EINVAL). */
int wrd_j_int(json_t *v, const char *field, int64_t min, int64_t max, int64_t *out, wr_err *err);
int wrd_j_num(json_t *v, const char *field, double min_excl, double max, double *out, wr_err *err);
int wrd_j_bool(json_t *v, const char *field, bool *out, wr_err *err);
/* A string of 1..maxlen bytes (0 allowed when allow_empty). */
int wrd_j_str(json_t *v, const char *field, size_t maxlen, bool allow_empty, const char **out,
	      wr_err *err);
/* An object of string values ("env", "labels"); names nested fields "f.key". */
int wrd_j_strmap(json_t *v, const char *field, size_t max_pairs, wr_err *err);

/* Copy of buf with every invalid UTF-8 sequence replaced by U+FFFD.
 * *outlen excludes the NUL that terminates the copy. */
char *wrd_utf8_repair(const char *buf, size_t len, size_t *outlen);
/* Length of an incomplete (but so far valid) multi-byte sequence at the end
 * of buf: 0..3 bytes to carry over to the next chunk of a stream. */
size_t wrd_utf8_tail(const char *buf, size_t len);
/* Standard base64 with padding, NUL-terminated. */
char *wrd_base64(const void *buf, size_t len, size_t *outlen);
/* A JSON string of output: UTF-8 repaired text or base64. */
json_t *wrd_j_output(const char *buf, size_t len, bool base64);

/* Wall clock in ms since the epoch and its RFC 3339 UTC form
 * "2026-12-02T13:50:00.123Z" (buf >= 32 bytes). */
int64_t wrd_now_ms(void);
void wrd_iso_time(int64_t ms, char *buf, size_t n);
json_t *wrd_j_time(int64_t ms);

#endif
