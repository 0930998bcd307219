/* warren registry client: what registry.c, registry_auth.c and
 * registry_blob.c share. Not a public interface. */
#ifndef WARREN_IMAGE_REGISTRY_INTERNAL_H
#define WARREN_IMAGE_REGISTRY_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <curl/curl.h>
#include <openssl/evp.h>

#include "image/registry.h"

/* Error bodies and token answers are small; never buffer a hostile answer
 * without bound. */
#define REG_ERRBODY_MAX (64u << 10)
#define REG_TOKEN_MAX (1u << 20)

enum reg_scheme { REG_SCHEME_UNKNOWN = 0, REG_SCHEME_HTTPS, REG_SCHEME_HTTP };

struct reg_token {
	struct reg_token *next;
	char *scope;	    /* our request's scope: the cache key */
	char *token;	    /* without "Bearer " */
	uint64_t expiry_ns; /* monotonic */
};

struct wr_registry {
	char *host;	/* as the user named it */
	char *endpoint; /* host[:port] actually contacted (docker.io -> registry-1.docker.io) */
	bool loopback;
	bool insecure;
	char *ca_file;
	char *user_agent;
	unsigned connect_timeout_ms, low_speed_time_s, low_speed_bytes, range_timeout_ms;
	unsigned retries, max_handles;

	/* credentials (immutable after open) */
	char *username, *password; /* basic, also for token requests */
	char *identity_token;	   /* OAuth2 refresh token from an auth file */
	char *static_token;	   /* fixed bearer token */
	char *basic_header;	   /* "Authorization: Basic ..." when username is set */

	atomic_int scheme;	     /* enum reg_scheme, decided at first contact */
	pthread_mutex_t scheme_lock; /* one first-contact probe at a time */
	uint64_t probe_failed_ns;    /* under scheme_lock: when a probe last got no answer */

	/* what the registry asked for, learnt from challenges */
	pthread_mutex_t auth_lock; /* guards the fields below and tokens */
	bool use_basic;
	char *realm, *service; /* bearer token endpoint */
	struct reg_token *tokens;
	pthread_mutex_t token_fetch_lock; /* one token fetch at a time (no stampede) */

	/* easy handle pool */
	pthread_mutex_t pool_lock;
	CURL **pool;
	unsigned npool;

	CURLSH *share;
	pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];

	atomic_uint_fast64_t n_requests, n_in, n_out;
};

enum reg_sink { SINK_NONE = 0, SINK_MEM, SINK_FD, SINK_BUF };

/* One HTTP exchange, with auth, retries and the scheme fallback. */
struct reg_call {
	/* in */
	const char *method;	    /* GET HEAD PUT POST PATCH DELETE */
	char *url;		    /* absolute; owned by the caller */
	const char *scope;	    /* auth scope(s), space-separated; NULL: none */
	struct curl_slist *headers; /* extra headers; owned by the caller */
	bool follow;		    /* follow redirects */
	bool idempotent;	    /* may be retried on transport errors and 5xx */
	uint64_t deadline_ns;	    /* 0: none; otherwise every attempt ends by then */

	/* request body: memory, or a range of an fd (pread), optionally hashed */
	const char *body;
	size_t body_len;
	int body_fd; /* -1 when no fd body */
	uint64_t body_off, body_size;
	EVP_MD_CTX *body_hash; /* updated with every byte sent; at each attempt (and
				  rewind) it restarts from body_hash_start, or empty */
	const EVP_MD_CTX *body_hash_start;
	uint64_t body_pos;

	/* response body for 2xx: where it goes */
	enum reg_sink sink;
	size_t mem_cap; /* SINK_MEM: larger is EFBIG */
	int sink_fd;	/* SINK_FD */
	EVP_MD_CTX *sink_hash;
	uint64_t sink_cap; /* SINK_FD: more bytes are EFBIG (default UINT64_MAX) */
	bool need_partial; /* a 2xx other than 206 is refused (Range requests) */
	void *buf;	   /* SINK_BUF */
	size_t buf_len;

	/* out */
	long status;
	char *mem; /* SINK_MEM body (NUL-terminated), or the error body of a non-2xx */
	size_t mem_len;
	uint64_t sink_n;  /* bytes delivered to the sink this call */
	bool overflow;	  /* the sink cap was hit */
	bool not_partial; /* need_partial and the answer was a 200 */
	int sink_errno;	  /* a write to sink_fd failed */
	char *content_type, *location, *docker_digest, *www_auth, *content_range, *retry_after;
	int64_t content_length; /* -1 when absent */
	CURLcode cc;
	char curl_msg[CURL_ERROR_SIZE];
};

void reg_call_init(struct reg_call *c, const char *method, char *url);
void reg_call_reset_out(struct reg_call *c);
void reg_call_free(struct reg_call *c);

/* Run the call. Returns 0 when an HTTP answer arrived (any status: check
 * c->status), negative with *err on transport failure. Handles 401 (auth
 * dance, once), retries per c->idempotent, and the https->http fallback. */
int reg_perform(struct wr_registry *reg, struct reg_call *c, wr_err *err);

/* An error for an unexpected status: "HTTP 404: BLOB_UNKNOWN: blob unknown
 * to registry". errno from the status. */
int reg_status_err(struct reg_call *c, wr_err *err, const char *what);

/* "scheme://endpoint/v2/<path>"; path already escaped. malloc'd. */
char *reg_url(struct wr_registry *reg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Resolve a Location (absolute or relative) against the registry base. */
char *reg_resolve(struct wr_registry *reg, const char *location);
/* Append "name=value" (value URL-escaped) to url's query. */
char *reg_url_add_query(const char *url, const char *name, const char *value);

/* Validation shared by all entry points. */
int reg_check_repo(const char *repo, wr_err *err);
int reg_check_digest(const char *digest, wr_err *err);
int reg_check_tag(const char *tag);

/* sha256 hex digest of a finished context: "sha256:<hex>" into out[72]. */
void reg_digest_final(EVP_MD_CTX *ctx, char out[72]);
/* Digest of a memory buffer. */
void reg_digest_buf(const void *p, size_t len, char out[72]);

/* ---- auth (registry_auth.c) ---- */
int reg_auth_init(struct wr_registry *reg, const struct wr_registry_opts *opts, wr_err *err);
void reg_auth_free(struct wr_registry *reg);
/* The Authorization header to send for scope now (NULL: none), fetching a
 * token first when the registry is known to want one. malloc'd in *out. */
int reg_auth_header(struct wr_registry *reg, const char *scope, char **out, wr_err *err);
/* Digest a 401: learn the scheme, drop a rejected token. 0 when a retry
 * may succeed, negative (EACCES) when not. */
int reg_auth_challenge(struct wr_registry *reg, const char *scope, const char *www_auth,
		       bool had_auth, wr_err *err);

/* ---- handles (registry.c) ---- */
CURL *reg_handle_get(struct wr_registry *reg);
void reg_handle_put(struct wr_registry *reg, CURL *h);
/* Common options on a fresh handle: share, timeouts, TLS, user agent. */
void reg_handle_setup(struct wr_registry *reg, CURL *h);

uint64_t reg_now_ns(void);
bool reg_host_is_loopback(const char *host);

#endif
