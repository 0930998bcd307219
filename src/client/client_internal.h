/* libwarren internals: the call context, the HTTP layer over libcurl and the
 * JSON decoding helpers shared by the API files. */
#ifndef WARREN_CLIENT_INTERNAL_H
#define WARREN_CLIENT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>

#include "common/error.h"
#include "warren/warren.h"

/* jansson's own json_decrefp (2.11+) */
#define _cleanup_json_ __attribute__((cleanup(json_decrefp)))

/* The public error: the core's error (errno, field, message with context)
 * plus what the API said. */
struct warren_error {
	struct wr_error base;
	char *code;
	int http_status;
};

struct warren_client {
	char *base_url; /* "http://localhost" for the socket */
	char *socket_path;
	char *auth_header; /* "Authorization: Bearer ..." or NULL */
	long connect_timeout_ms;
	long request_timeout_ms;
	/* Idle easy handles, each with its open connection to the daemon:
	 * a call takes one (or makes one) and puts it back. Reusing the
	 * handle keeps its connection and its internal state (wakeup
	 * socketpair, buffers), which curl_easy_init would make anew. */
	pthread_mutex_t pool_lock;
	CURL **pool;
	size_t n_pool;
};
/* Idle handles (= idle connections) a client keeps; more concurrent calls
 * than this still work, their surplus connections close when they end. */
#define WC_POOL_MAX 256

struct warren_sandbox {
	warren_client *client;
	char *id;
	warren_sandbox_info *info; /* as create or connect saw it */
};

struct warren_command {
	warren_sandbox *sb;
	char *id;
	bool binary; /* started with base64 output */
};

/* One public call: collects the failure while it unwinds. */
struct wc_call {
	warren_client *client;
	wr_err err;
	char *code;
	int http_status;
};

/* Record a failure that did not come from the API. Returns -errnum. */
int wc_fail(struct wc_call *c, const char *code, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Like wc_fail with code invalid_argument and a field. */
int wc_fail_field(struct wc_call *c, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Finish a call: on failure (r < 0) prefix context and hand the error to
 * *errp; always releases the context. Returns r. */
int wc_finish(struct wc_call *c, int r, warren_error **errp, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* errno for an API error code. */
int wc_code_errno(const char *code);
/* The API code a bare HTTP status stands for. */
const char *wc_status_code(long status);

/* A growable byte buffer, always NUL-terminated when non-empty. */
struct wc_buf {
	char *p;
	size_t len, cap;
};
int wc_buf_add(struct wc_buf *b, const void *data, size_t len);
void wc_buf_free(struct wc_buf *b);

/* NDJSON line handler: takes ownership of nothing; a negative return
 * (with the error recorded in c) aborts the transfer. */
typedef int (*wc_line_fn)(void *ctx, json_t *obj, struct wc_call *c);

struct wc_req {
	const char *method;
	const char *path; /* "/v1/...", query already escaped; not owned */
	json_t *body;
	const void *data; /* raw body (with content_type) */
	size_t len;
	bool has_data;
	int in_fd; /* stream the body from this fd; -1: none */
	const char *content_type;
	bool long_running; /* exempt from request_timeout_ms */
	int out_fd;	   /* 2xx body to this fd; -1: none */
	wc_line_fn on_line;
	void *line_ctx;
};
#define WC_REQ_INIT(m, p)                                                                          \
	{                                                                                          \
		.method = (m), .path = (p), .in_fd = -1, .out_fd = -1                              \
	}

/* Perform a request. 2xx: returns the status and fills *body (when not
 * sunk to a fd or line handler; may be NULL). Otherwise records the API
 * error (or transport failure) in c and returns negative. */
int wc_do(struct wc_call *c, struct wc_req *rq, struct wc_buf *body);
/* Request with an optional JSON body, answer parsed into *out (NULL for an
 * empty answer; out may be NULL). */
int wc_json(struct wc_call *c, const char *method, const char *path, json_t *body, json_t **out);

/* Percent-encode a query value (unreserved characters and '/' kept). */
char *wc_esc(const char *s);
/* Validate an id used in a route (sandbox or command). */
int wc_check_id(struct wc_call *c, const char *field, const char *id);
/* asprintf that returns NULL on failure. */
char *wc_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* JSON decoding (json.c). Each returns negative with a protocol error in c
 * when the object lacks what API v1 promises. */
char *wc_jstr(json_t *o, const char *key); /* strdup of a string member or NULL */
int64_t wc_jint(json_t *o, const char *key, int64_t dflt);
double wc_jnum(json_t *o, const char *key, double dflt);
bool wc_jbool(json_t *o, const char *key);
int wc_parse_info(struct wc_call *c, json_t *o, warren_sandbox_info **out);
int wc_parse_result(struct wc_call *c, json_t *o, bool base64, warren_exec_result **out);
int wc_parse_entry(struct wc_call *c, json_t *o, warren_file_entry *e);
void wc_entry_clear(warren_file_entry *e);
/* Decode base64 into a malloc'd NUL-terminated buffer. */
int wc_b64_decode(const char *in, size_t inlen, char **out, size_t *outlen);
/* Build the JSON of an API error answer body into the call (used by wc_do). */
int wc_api_error(struct wc_call *c, long status, const char *body, size_t len);
/* kv array -> JSON object; NULL key or value: invalid_argument naming field. */
int wc_kv_object(struct wc_call *c, const char *field, const warren_kv *kv, size_t n, json_t **out);
/* The /v1/images path of a local ref, and an image answer (image.c). */
char *wc_image_path(struct wc_call *c, const char *ref, const char *suffix, const char *query);
int wc_image_out(struct wc_call *c, json_t *ans, warren_image **out);

#endif
