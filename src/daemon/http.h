/* HTTP glue between libmicrohttpd and the API handlers.
 *
 * Threading (why not MHD_USE_THREAD_PER_CONNECTION): one MHD event thread per
 * listener (epoll) owns every socket and never blocks. A request whose body
 * is complete is handed off with MHD_suspend_connection:
 *   inline  answered on the event thread (health, metrics: memory only)
 *   pool    a fixed pool of `workers` threads for bounded kernel work
 *           (create, kill, file operations, database reads)
 *   long    a thread of its own, capped at `max_commands`, for work whose
 *           length the client decides (commands, long polls, downloads)
 * and resumed with MHD_resume_connection once the answer is ready. Keep-alive
 * connections idle for free, a slow command never starves short requests,
 * and the number of threads doing kernel work stays bounded. Thread per
 * connection would tie a thread to every idle keep-alive client and make
 * the worker bound the connection bound.
 *
 * Streaming answers (NDJSON, file and tar downloads) are a pipe: the handler
 * writes to the write end (blocking: backpressure reaches the producer);
 * MHD's content reader reads the nonblocking read end and, when it is
 * empty, suspends the connection and asks the relay thread (epoll on the
 * read ends) to resume it when data or EOF arrives.
 *
 * Bodies: JSON bodies are buffered up to 1 MiB (413 past it); uploads (file
 * and tar PUT) are streamed into an unlinked temporary file in the state
 * directory, never into memory, bounded by the sandbox's disk quota. */
#ifndef WARREN_DAEMON_HTTP_H
#define WARREN_DAEMON_HTTP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "daemon/config.h"

#define WRD_JSON_MAX (1u << 20)

/* Where a handler runs: MHD's thread (inline: never blocks), the worker
 * pool, the create lane (creates wait for a spawner: on a lane of their
 * own they never hold up kills, reads and file calls), or a thread of its
 * own (long: commands, streams). */
enum wrd_class { WRD_INLINE, WRD_POOL, WRD_CREATE, WRD_LONG };
enum wrd_body { WRD_BODY_NONE, WRD_BODY_JSON, WRD_BODY_UPLOAD };

struct wrd_req;
struct wrd_route {
	const char *method;
	const char *pattern; /* "{id}" and "{cid}" match one path segment */
	enum wrd_body body;
	enum wrd_class cls;
	void (*fn)(struct wrd_req *r);
	size_t metric; /* index of the pattern in the metrics route list */
};

struct wrd_req {
	const struct wrd_route *route;
	char id[160]; /* {id}: a sandbox id or an image ref (digests are 71 bytes) */
	char cid[65]; /* {cid} */
	const char *tenant;
	bool tcp;      /* came in over TCP (else the Unix socket) */
	json_t *json;  /* JSON body (an object), NULL when the body was empty */
	int upload_fd; /* upload body, positioned at 0, or -1 */
	uint64_t upload_len;
	uint64_t upload_max; /* set by the header phase for upload routes */
	struct wrd_http_priv *priv;
};

/* Query parameters. Reject any not in `allowed` (NULL-terminated): 400
 * naming it. Returns 0, or -1 with the reply already set. */
int wrd_query_check(struct wrd_req *r, const char *const *allowed);
const char *wrd_query(struct wrd_req *r, const char *key);
/* A path parameter: present, 1..4095 bytes, no NUL. NULL with a 400 naming
 * `key` otherwise. */
const char *wrd_query_path(struct wrd_req *r, const char *key);
/* A boolean parameter: absent = def; "true"/"1" or "false"/"0". -1 with a
 * 400 otherwise. */
int wrd_query_bool(struct wrd_req *r, const char *key, bool def, bool *out);
/* Every value of a repeated parameter, in order (malloc'd array, count). */
const char **wrd_query_all(struct wrd_req *r, const char *key, size_t *n);

/* Replies: exactly one per request. */
void wrd_reply_json(struct wrd_req *r, unsigned status, json_t *body); /* steals */
void wrd_reply_empty(struct wrd_req *r, unsigned status);
void wrd_reply_text(struct wrd_req *r, unsigned status, const char *ctype, char *buf,
		    size_t len); /* steals buf */
void wrd_reply_error(struct wrd_req *r, const char *code, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Map a library error (errno + message + field) to the documented codes. */
void wrd_reply_err(struct wrd_req *r, const wr_err err);
/* Start a chunked streaming reply now; returns the pipe's write end
 * (blocking, close-on-exec) which the caller writes and must close. Only
 * from pool/long handlers. -1 (reply set to 500) on failure. */
int wrd_reply_stream(struct wrd_req *r, unsigned status, const char *ctype);

/* Send the answer set so far now; the handler goes on with work the
 * client need not wait for and must not reply again. Only from pool/long
 * handlers. */
void wrd_reply_send(struct wrd_req *r);

/* A request header (case-insensitive name), or NULL. */
const char *wrd_header(struct wrd_req *r, const char *name);
/* Add a header to the answer set so far (after a wrd_reply_*). */
void wrd_reply_header(struct wrd_req *r, const char *name, const char *value);

/* Protocol upgrade: answer 101 Switching Protocols with "Upgrade: proto"
 * now, then wait on this thread until MHD hands over the socket. 0 with
 * *out, or -1 when the connection ended before the switch (nothing more to
 * answer). Only from long handlers, as their last reply. The socket is
 * borrowed: never close() it, release it with wrd_upgrade_close. */
struct wrd_upgrade;
int wrd_reply_upgrade(struct wrd_req *r, const char *proto, struct wrd_upgrade **out);
int wrd_upgrade_fd(const struct wrd_upgrade *u);
/* Bytes the client sent after its request that MHD read already: they
 * come before anything read from the socket. */
const char *wrd_upgrade_extra(const struct wrd_upgrade *u, size_t *len);
/* Close the connection and free u. */
void wrd_upgrade_close(struct wrd_upgrade *u);

/* Run fn(arg) on a thread of its own (counts against max_commands).
 * -EAGAIN when the cap is reached. */
int wrd_spawn_long(void (*fn)(void *arg), void *arg);
/* Run fn(arg) on the worker pool. */
int wrd_pool_submit(void (*fn)(void *arg), void *arg);

struct wrd_http_hooks {
	/* upload routes: the body size limit for sandbox id (0: unknown id,
	 * the body is discarded and the handler answers). Event thread:
	 * memory only. */
	uint64_t (*upload_limit)(const char *tenant, const char *id);
};

int wrd_http_start(const struct wrd_config *cfg, const struct wrd_route *routes, size_t n_routes,
		   const struct wrd_http_hooks *hooks, wr_err *err);
/* Stop accepting, answer 503 to new requests on open connections, wait up
 * to timeout_s for requests in flight, then stop. */
void wrd_http_shutdown(unsigned timeout_s);
unsigned wrd_http_inflight(void);

#endif
