/* warren registry client: handles, the request engine, manifests.
 *
 * Thread model: struct wr_registry is shared by all threads. Easy handles
 * come from a mutex-guarded pool (one per call in flight); they all share
 * one CURLSH (DNS, connections, TLS sessions) whose locks are ours. Auth
 * state has its own lock (registry_auth.c). Counters are atomics. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <jansson.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "image/registry_internal.h"

#ifndef WARREN_VERSION
#define WARREN_VERSION "0"
#endif

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

uint64_t reg_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Scheme verdicts of loopback/insecure registries, process-wide: a
 * registry speaking plain http answers a TLS probe slowly (Go's server
 * takes ~200 ms), and the daemon opens a client per request. A verdict is
 * trusted for 10 minutes. */
#define SCHEME_TTL_NS (600ull * 1000000000ull)
static pthread_mutex_t scheme_cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	char host[264];
	int scheme;
	uint64_t at_ns;
} scheme_cache[32];

static int scheme_cache_get(const char *host)
{
	int scheme = REG_SCHEME_UNKNOWN;
	uint64_t now = reg_now_ns();
	pthread_mutex_lock(&scheme_cache_lock);
	for (size_t i = 0; i < WR_ARRAY_SIZE(scheme_cache); i++)
		if (scheme_cache[i].at_ns && now - scheme_cache[i].at_ns < SCHEME_TTL_NS &&
		    strcasecmp(scheme_cache[i].host, host) == 0)
			scheme = scheme_cache[i].scheme;
	pthread_mutex_unlock(&scheme_cache_lock);
	return scheme;
}

static void scheme_cache_put(const char *host, int scheme)
{
	if (strlen(host) >= sizeof(scheme_cache[0].host))
		return;
	uint64_t now = reg_now_ns();
	size_t slot = 0;
	pthread_mutex_lock(&scheme_cache_lock);
	for (size_t i = 0; i < WR_ARRAY_SIZE(scheme_cache); i++) {
		if (strcasecmp(scheme_cache[i].host, host) == 0 || scheme_cache[i].at_ns == 0) {
			slot = i;
			break;
		}
		if (scheme_cache[i].at_ns < scheme_cache[slot].at_ns)
			slot = i; /* else the oldest goes */
	}
	snprintf(scheme_cache[slot].host, sizeof(scheme_cache[slot].host), "%s", host);
	scheme_cache[slot].scheme = scheme;
	scheme_cache[slot].at_ns = now;
	pthread_mutex_unlock(&scheme_cache_lock);
}

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *userp)
{
	(void)h;
	(void)access;
	struct wr_registry *reg = userp;
	pthread_mutex_lock(&reg->share_locks[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *userp)
{
	(void)h;
	struct wr_registry *reg = userp;
	pthread_mutex_unlock(&reg->share_locks[data]);
}

static char *dup_opt(const char *s, bool *oom)
{
	if (s == NULL)
		return NULL;
	char *d = strdup(s);
	if (d == NULL)
		*oom = true;
	return d;
}

int wr_registry_open(const char *host, const struct wr_registry_opts *opts,
		     struct wr_registry **out, wr_err *err)
{
	static const struct wr_registry_opts defaults;
	if (opts == NULL)
		opts = &defaults;
	*out = NULL;
	struct wr_registry_ref probe;
	_cleanup_free_ char *fake = NULL;
	if (host == NULL || asprintf(&fake, "%s/x", host) < 0 || strchr(host, '/') ||
	    !wr_registry_ref_is_remote(fake) || wr_registry_ref_parse(fake, &probe, NULL) < 0)
		return wr_err_set(err, EINVAL, "registry host '%s': give host[:port]",
				  host ? host : "");
	wr_registry_ref_free(&probe);
	pthread_once(&curl_once, curl_init);
	if (curl_init_rc != CURLE_OK)
		return wr_err_set(err, EIO, "libcurl init: %s", curl_easy_strerror(curl_init_rc));

	struct wr_registry *reg = calloc(1, sizeof(*reg));
	if (reg == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	bool oom = false;
	reg->host = dup_opt(host, &oom);
	reg->endpoint =
	    dup_opt(strcmp(host, "docker.io") == 0 ? "registry-1.docker.io" : host, &oom);
	reg->loopback = reg_host_is_loopback(host);
	reg->insecure = opts->insecure;
	reg->ca_file = dup_opt(opts->ca_file, &oom);
	if (opts->user_agent)
		reg->user_agent = dup_opt(opts->user_agent, &oom);
	else
		reg->user_agent = dup_opt("warren/" WARREN_VERSION, &oom);
	reg->connect_timeout_ms = opts->connect_timeout_ms ? opts->connect_timeout_ms : 5000;
	reg->low_speed_time_s = opts->low_speed_time_s ? opts->low_speed_time_s : 20;
	reg->low_speed_bytes = opts->low_speed_bytes ? opts->low_speed_bytes : 1;
	reg->range_timeout_ms = opts->range_timeout_ms ? opts->range_timeout_ms : 30000;
	reg->retries = opts->retries ? opts->retries : 2;
	reg->max_handles = opts->max_handles ? opts->max_handles : 16;
	pthread_mutex_init(&reg->auth_lock, NULL);
	pthread_mutex_init(&reg->token_fetch_lock, NULL);
	pthread_mutex_init(&reg->pool_lock, NULL);
	pthread_mutex_init(&reg->scheme_lock, NULL);
	/* only a loopback or insecure registry may speak plain http */
	if (!reg->loopback && !reg->insecure)
		atomic_store(&reg->scheme, REG_SCHEME_HTTPS);
	else
		atomic_store(&reg->scheme, scheme_cache_get(reg->endpoint));
	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_init(&reg->share_locks[i], NULL);
	reg->pool = calloc(reg->max_handles, sizeof(CURL *));
	reg->share = curl_share_init();
	if (oom || reg->pool == NULL || reg->share == NULL) {
		wr_registry_close(reg);
		return wr_err_set(err, ENOMEM, "out of memory");
	}
	curl_share_setopt(reg->share, CURLSHOPT_LOCKFUNC, share_lock);
	curl_share_setopt(reg->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
	curl_share_setopt(reg->share, CURLSHOPT_USERDATA, reg);
	curl_share_setopt(reg->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
	curl_share_setopt(reg->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
	curl_share_setopt(reg->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
	if (reg_auth_init(reg, opts, err) < 0) {
		wr_registry_close(reg);
		return wr_err_wrap(err, "registry %s", host);
	}
	*out = reg;
	return 0;
}

void wr_registry_close(struct wr_registry *reg)
{
	if (reg == NULL)
		return;
	for (unsigned i = 0; i < reg->npool; i++)
		curl_easy_cleanup(reg->pool[i]);
	free(reg->pool);
	if (reg->share)
		curl_share_cleanup(reg->share);
	reg_auth_free(reg);
	pthread_mutex_destroy(&reg->auth_lock);
	pthread_mutex_destroy(&reg->token_fetch_lock);
	pthread_mutex_destroy(&reg->pool_lock);
	pthread_mutex_destroy(&reg->scheme_lock);
	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_destroy(&reg->share_locks[i]);
	free(reg->host);
	free(reg->endpoint);
	free(reg->ca_file);
	free(reg->user_agent);
	free(reg);
}

const char *wr_registry_host(const struct wr_registry *reg)
{
	return reg->host;
}

void wr_registry_stats(struct wr_registry *reg, struct wr_registry_stats *out)
{
	out->requests = atomic_load(&reg->n_requests);
	out->bytes_in = atomic_load(&reg->n_in);
	out->bytes_out = atomic_load(&reg->n_out);
}

CURL *reg_handle_get(struct wr_registry *reg)
{
	CURL *h = NULL;
	pthread_mutex_lock(&reg->pool_lock);
	if (reg->npool > 0)
		h = reg->pool[--reg->npool];
	pthread_mutex_unlock(&reg->pool_lock);
	if (h == NULL)
		h = curl_easy_init();
	return h;
}

void reg_handle_put(struct wr_registry *reg, CURL *h)
{
	if (h == NULL)
		return;
	curl_easy_reset(h);
	pthread_mutex_lock(&reg->pool_lock);
	if (reg->npool < reg->max_handles) {
		reg->pool[reg->npool++] = h;
		h = NULL;
	}
	pthread_mutex_unlock(&reg->pool_lock);
	if (h)
		curl_easy_cleanup(h);
}

void reg_handle_setup(struct wr_registry *reg, CURL *h)
{
	curl_easy_setopt(h, CURLOPT_SHARE, reg->share);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)reg->connect_timeout_ms);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, (long)reg->low_speed_bytes);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, (long)reg->low_speed_time_s);
	curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(h, CURLOPT_USERAGENT, reg->user_agent);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_MAXREDIRS, 5L);
	if (reg->ca_file)
		curl_easy_setopt(h, CURLOPT_CAINFO, reg->ca_file);
	if (reg->insecure) {
		curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
	}
}

/* ---- URLs ---------------------------------------------------------------- */

static const char *scheme_str(struct wr_registry *reg)
{
	return atomic_load(&reg->scheme) == REG_SCHEME_HTTP ? "http" : "https";
}

char *reg_url(struct wr_registry *reg, const char *fmt, ...)
{
	_cleanup_free_ char *path = NULL;
	va_list ap;
	va_start(ap, fmt);
	int r = vasprintf(&path, fmt, ap);
	va_end(ap);
	if (r < 0)
		return NULL;
	char *url = NULL;
	if (asprintf(&url, "%s://%s/v2/%s", scheme_str(reg), reg->endpoint, path) < 0)
		return NULL;
	return url;
}

char *reg_resolve(struct wr_registry *reg, const char *location)
{
	_cleanup_free_ char *base = reg_url(reg, "%s", "");
	if (base == NULL)
		return NULL;
	CURLU *u = curl_url();
	char *out = NULL;
	if (u && curl_url_set(u, CURLUPART_URL, base, 0) == CURLUE_OK &&
	    curl_url_set(u, CURLUPART_URL, location, 0) == CURLUE_OK)
		curl_url_get(u, CURLUPART_URL, &out, 0);
	curl_url_cleanup(u);
	if (out == NULL)
		return NULL;
	char *copy = strdup(out);
	curl_free(out);
	return copy;
}

char *reg_url_add_query(const char *url, const char *name, const char *value)
{
	CURLU *u = curl_url();
	char *out = NULL;
	_cleanup_free_ char *q = NULL;
	if (u == NULL || asprintf(&q, "%s=%s", name, value) < 0) {
		curl_url_cleanup(u);
		return NULL;
	}
	if (curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
	    curl_url_set(u, CURLUPART_QUERY, q, CURLU_APPENDQUERY | CURLU_URLENCODE) == CURLUE_OK)
		curl_url_get(u, CURLUPART_URL, &out, 0);
	curl_url_cleanup(u);
	if (out == NULL)
		return NULL;
	char *copy = strdup(out);
	curl_free(out);
	return copy;
}

/* ---- the request engine ---------------------------------------------------- */

void reg_call_init(struct reg_call *c, const char *method, char *url)
{
	memset(c, 0, sizeof(*c));
	c->method = method;
	c->url = url;
	c->body_fd = -1;
	c->sink_fd = -1;
	c->content_length = -1;
	c->sink_cap = UINT64_MAX;
}

static void clear_headers(struct reg_call *c)
{
	free(c->content_type);
	free(c->location);
	free(c->docker_digest);
	free(c->www_auth);
	free(c->content_range);
	free(c->retry_after);
	c->content_type = c->location = c->docker_digest = c->www_auth = NULL;
	c->content_range = c->retry_after = NULL;
	c->content_length = -1;
}

void reg_call_reset_out(struct reg_call *c)
{
	clear_headers(c);
	free(c->mem);
	c->mem = NULL;
	c->mem_len = 0;
	c->status = 0;
	c->overflow = false;
	c->not_partial = false;
	c->sink_errno = 0;
	c->cc = CURLE_OK;
	c->curl_msg[0] = 0;
}

void reg_call_free(struct reg_call *c)
{
	reg_call_reset_out(c);
}

static bool status_ok(long s)
{
	return s >= 200 && s < 300;
}

static int mem_add(struct reg_call *c, const char *data, size_t n, size_t cap)
{
	if (c->mem_len + n > cap) {
		c->overflow = true;
		return -1;
	}
	char *p = realloc(c->mem, c->mem_len + n + 1);
	if (p == NULL)
		return -1;
	memcpy(p + c->mem_len, data, n);
	c->mem = p;
	c->mem_len += n;
	c->mem[c->mem_len] = 0;
	return 0;
}

static size_t on_header(char *data, size_t size, size_t n, void *userp)
{
	struct reg_call *c = userp;
	size_t len = size * n;
	if (len >= 5 && strncmp(data, "HTTP/", 5) == 0) {
		/* a new response (after a redirect or 100 Continue): its headers only */
		clear_headers(c);
		const char *sp = memchr(data, ' ', len);
		c->status = sp ? strtol(sp + 1, NULL, 10) : 0;
		return len;
	}
	const char *colon = memchr(data, ':', len);
	if (colon == NULL)
		return len;
	size_t nl = (size_t)(colon - data);
	const char *v = colon + 1, *end = data + len;
	while (v < end && (*v == ' ' || *v == '\t'))
		v++;
	while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
		end--;
	char **slot = NULL;
#define HDR(name, field)                                                                           \
	if (nl == sizeof(name) - 1 && strncasecmp(data, name, nl) == 0)                            \
	slot = &c->field
	HDR("content-type", content_type);
	HDR("location", location);
	HDR("docker-content-digest", docker_digest);
	HDR("www-authenticate", www_auth);
	HDR("content-range", content_range);
	HDR("retry-after", retry_after);
#undef HDR
	if (nl == 14 && strncasecmp(data, "content-length", 14) == 0) {
		char tmp[32];
		size_t vl = (size_t)(end - v);
		if (vl < sizeof(tmp)) {
			memcpy(tmp, v, vl);
			tmp[vl] = 0;
			c->content_length = strtoll(tmp, NULL, 10);
		}
	}
	if (slot && *slot == NULL)
		*slot = strndup(v, (size_t)(end - v));
	return len;
}

static size_t on_write(char *data, size_t size, size_t n, void *userp)
{
	struct reg_call *c = userp;
	size_t len = size * n;
	if (!status_ok(c->status) || c->sink == SINK_NONE) {
		mem_add(c, data, len, REG_ERRBODY_MAX); /* keep a prefix of an error body */
		c->overflow = false;
		return len;
	}
	if (c->need_partial && c->status != 206) {
		c->not_partial = true;
		return 0;
	}
	switch (c->sink) {
	case SINK_MEM:
		if (mem_add(c, data, len, c->mem_cap) < 0)
			return 0;
		break;
	case SINK_FD:
		if (c->sink_n + len > c->sink_cap) {
			c->overflow = true;
			return 0;
		}
		if (wr_write_all(c->sink_fd, data, len) < 0) {
			c->sink_errno = errno ? errno : EIO;
			return 0;
		}
		if (c->sink_hash)
			EVP_DigestUpdate(c->sink_hash, data, len);
		break;
	case SINK_BUF:
		if (c->sink_n + len > c->buf_len) {
			c->overflow = true;
			return 0;
		}
		memcpy((char *)c->buf + c->sink_n, data, len);
		break;
	case SINK_NONE: break;
	}
	c->sink_n += len;
	return len;
}

static size_t on_read(char *buf, size_t size, size_t n, void *userp)
{
	struct reg_call *c = userp;
	size_t want = size * n;
	uint64_t total = c->body_fd >= 0 ? c->body_size : c->body_len;
	uint64_t left = total - c->body_pos;
	if (want > left)
		want = (size_t)left;
	if (want == 0)
		return 0;
	if (c->body_fd >= 0) {
		ssize_t r;
		do
			r = pread(c->body_fd, buf, want, (off_t)(c->body_off + c->body_pos));
		while (r < 0 && errno == EINTR);
		if (r <= 0) {
			c->sink_errno = r < 0 ? errno : EIO; /* EOF before size: the file shrank */
			return CURL_READFUNC_ABORT;
		}
		want = (size_t)r;
	} else {
		memcpy(buf, c->body + c->body_pos, want);
	}
	if (c->body_hash)
		EVP_DigestUpdate(c->body_hash, buf, want);
	c->body_pos += want;
	return want;
}

static void hash_restart(struct reg_call *c)
{
	if (c->body_hash_start)
		EVP_MD_CTX_copy_ex(c->body_hash, c->body_hash_start);
	else
		EVP_DigestInit_ex(c->body_hash, EVP_sha256(), NULL);
}

static int on_seek(void *userp, curl_off_t off, int origin)
{
	struct reg_call *c = userp;
	if (origin != SEEK_SET || off < 0)
		return CURL_SEEKFUNC_CANTSEEK;
	if (c->body_hash) {
		/* a hash cannot rewind: only a restart from the start is possible */
		if (off != 0)
			return CURL_SEEKFUNC_CANTSEEK;
		hash_restart(c);
	}
	c->body_pos = (uint64_t)off;
	return CURL_SEEKFUNC_OK;
}

static int curl_errno(struct reg_call *c, CURL *h)
{
	long os = 0;
	switch (c->cc) {
	case CURLE_OPERATION_TIMEDOUT: return ETIMEDOUT;
	case CURLE_COULDNT_CONNECT:
		curl_easy_getinfo(h, CURLINFO_OS_ERRNO, &os);
		return os > 0 ? (int)os : ECONNREFUSED;
	case CURLE_COULDNT_RESOLVE_HOST: return EHOSTUNREACH;
	case CURLE_WRITE_ERROR:
		if (c->overflow)
			return EFBIG;
		return c->sink_errno ? c->sink_errno : EIO;
	case CURLE_READ_ERROR:
	case CURLE_ABORTED_BY_CALLBACK: return c->sink_errno ? c->sink_errno : EIO;
	case CURLE_OUT_OF_MEMORY: return ENOMEM;
	case CURLE_SSL_CONNECT_ERROR:
		/* a handshake cut off by our time bound is a timeout too */
		if (strcasestr(c->curl_msg, "timeout") || strcasestr(c->curl_msg, "timed out"))
			return ETIMEDOUT;
		return EIO;
	default: return EIO;
	}
}

static bool fallback_worthy(CURLcode cc)
{
	switch (cc) {
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CIPHER:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_COULDNT_CONNECT:
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_WEIRD_SERVER_REPLY: return true;
	default: return false;
	}
}

static bool transport_retryable(CURLcode cc)
{
	switch (cc) {
	case CURLE_COULDNT_CONNECT:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
	case CURLE_OPERATION_TIMEDOUT: return true;
	default: return false;
	}
}

/* The URL without its query (upload URLs carry long opaque state). */
static void url_for_msg(const char *url, char *out, size_t cap)
{
	size_t n = strcspn(url, "?");
	if (n >= cap)
		n = cap - 1;
	memcpy(out, url, n);
	out[n] = 0;
}

static void backoff(unsigned attempt, uint64_t deadline_ns)
{
	uint64_t ms = 100ull << (attempt < 5 ? attempt : 5);
	if (deadline_ns) {
		uint64_t now = reg_now_ns();
		if (now >= deadline_ns)
			return;
		uint64_t left = (deadline_ns - now) / 1000000;
		if (ms > left / 2)
			ms = left / 2;
	}
	struct timespec ts = {.tv_sec = (time_t)(ms / 1000),
			      .tv_nsec = (long)(ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
}

/* Does url point at the registry itself? Credentials go nowhere else (an
 * upload Location may name another host). */
static bool same_host(struct wr_registry *reg, const char *url)
{
	const char *p = strstr(url, "://");
	if (p == NULL)
		return false;
	p += 3;
	size_t n = strlen(reg->endpoint);
	return strncasecmp(p, reg->endpoint, n) == 0 && (p[n] == '/' || p[n] == 0);
}

/* One attempt on handle h. Fills c's outputs. */
static void attempt_once(struct wr_registry *reg, CURL *h, struct reg_call *c, const char *url,
			 const char *authz)
{
	struct curl_slist *hl = NULL;
	for (struct curl_slist *s = c->headers; s; s = s->next)
		hl = curl_slist_append(hl, s->data);
	if (authz && same_host(reg, url))
		hl = curl_slist_append(hl, authz);
	reg_handle_setup(reg, h);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, c->curl_msg);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, c);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, c);
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, c->follow ? 1L : 0L);
	if (c->deadline_ns) {
		uint64_t now = reg_now_ns();
		long ms = now < c->deadline_ns ? (long)((c->deadline_ns - now) / 1000000) : 1;
		curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, ms > 0 ? ms : 1L);
		if (ms < (long)reg->connect_timeout_ms)
			curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, ms > 0 ? ms : 1L);
	}
	bool has_body = c->body_fd >= 0 || c->body != NULL;
	if (strcmp(c->method, "HEAD") == 0) {
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	} else if (has_body || strcmp(c->method, "PUT") == 0 || strcmp(c->method, "PATCH") == 0) {
		c->body_pos = 0;
		if (c->body_hash)
			hash_restart(c);
		curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE,
				 (curl_off_t)(c->body_fd >= 0 ? c->body_size : c->body_len));
		curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
		curl_easy_setopt(h, CURLOPT_READDATA, c);
		curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, on_seek);
		curl_easy_setopt(h, CURLOPT_SEEKDATA, c);
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, c->method);
	} else if (strcmp(c->method, "POST") == 0) {
		curl_easy_setopt(h, CURLOPT_POST, 1L);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, 0L);
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
	} else if (strcmp(c->method, "GET") != 0) {
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, c->method);
	}
	c->cc = curl_easy_perform(h);
	atomic_fetch_add(&reg->n_requests, 1);
	curl_off_t up = 0, down = 0;
	curl_easy_getinfo(h, CURLINFO_SIZE_UPLOAD_T, &up);
	curl_easy_getinfo(h, CURLINFO_SIZE_DOWNLOAD_T, &down);
	atomic_fetch_add(&reg->n_out, (uint64_t)up);
	atomic_fetch_add(&reg->n_in, (uint64_t)down);
	if (c->cc == CURLE_OK) {
		long code = 0;
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
		c->status = code;
	}
	curl_slist_free_all(hl);
}

static size_t discard(char *data, size_t size, size_t n, void *userp)
{
	(void)data;
	(void)userp;
	return size * n;
}

/* One request to <scheme>://endpoint/v2/: did any HTTP answer come back? */
static CURLcode probe_one(struct wr_registry *reg, const char *scheme, uint64_t deadline_ns)
{
	long ms = (long)reg->connect_timeout_ms * 2;
	if (deadline_ns) {
		uint64_t now = reg_now_ns();
		long left = now < deadline_ns ? (long)((deadline_ns - now) / 1000000) : 1;
		if (left < ms)
			ms = left > 0 ? left : 1;
	}
	_cleanup_free_ char *url = NULL;
	if (asprintf(&url, "%s://%s/v2/", scheme, reg->endpoint) < 0)
		return CURLE_OUT_OF_MEMORY;
	CURL *h = reg_handle_get(reg);
	if (h == NULL)
		return CURLE_OUT_OF_MEMORY;
	reg_handle_setup(reg, h);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, ms);
	CURLcode cc = curl_easy_perform(h);
	atomic_fetch_add(&reg->n_requests, 1);
	reg_handle_put(reg, h);
	return cc;
}

/* First contact with a registry that may speak plain http (loopback, or
 * opened insecure): GET /v2/ over https, and over http when the TLS
 * handshake fails. Serialised, so a burst of first requests (the on-demand
 * loader's threads) costs one probe, not one failed handshake each. The
 * verdict is kept only when some HTTP answer came back: a registry that is
 * down leaves it open and the caller's own request reports the failure. */
static void probe_scheme(struct wr_registry *reg, uint64_t deadline_ns)
{
	pthread_mutex_lock(&reg->scheme_lock);
	/* threads that queued behind a probe that got no answer do not each
	 * wait out another one: their own requests fail fast instead */
	bool recent = reg->probe_failed_ns && reg_now_ns() - reg->probe_failed_ns < 1000000000ull;
	if (atomic_load(&reg->scheme) == REG_SCHEME_UNKNOWN && !recent) {
		CURLcode cc = probe_one(reg, "https", deadline_ns);
		if (cc == CURLE_OK)
			atomic_store(&reg->scheme, REG_SCHEME_HTTPS);
		else if (fallback_worthy(cc) && probe_one(reg, "http", deadline_ns) == CURLE_OK)
			atomic_store(&reg->scheme, REG_SCHEME_HTTP);
		if (atomic_load(&reg->scheme) != REG_SCHEME_UNKNOWN)
			scheme_cache_put(reg->endpoint, atomic_load(&reg->scheme));
		else
			reg->probe_failed_ns = reg_now_ns();
	}
	pthread_mutex_unlock(&reg->scheme_lock);
}

int reg_perform(struct wr_registry *reg, struct reg_call *c, wr_err *err)
{
	_cleanup_free_ char *url = strdup(c->url);
	if (url == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	bool auth_retried = false;
	unsigned attempt = 0;
	if (atomic_load(&reg->scheme) == REG_SCHEME_UNKNOWN)
		probe_scheme(reg, c->deadline_ns); /* within the caller's time bound */
	for (;;) {
		/* the scheme may have been settled since url was built */
		if (atomic_load(&reg->scheme) == REG_SCHEME_HTTP && same_host(reg, url) &&
		    strncmp(url, "https://", 8) == 0) {
			char *u2 = NULL;
			if (asprintf(&u2, "http://%s", url + 8) < 0)
				return wr_err_set(err, ENOMEM, "out of memory");
			free(url);
			url = u2;
		}
		_cleanup_free_ char *authz = NULL;
		if (reg_auth_header(reg, c->scope, &authz, err) < 0)
			return -1;
		reg_call_reset_out(c);
		uint64_t sink_before = c->sink_n;
		if (c->sink != SINK_FD)
			c->sink_n = 0;
		CURL *h = reg_handle_get(reg);
		if (h == NULL)
			return wr_err_set(err, ENOMEM, "out of memory (curl handle)");
		attempt_once(reg, h, c, url, authz);
		/* An error answer whose body broke off (Go's 416 promises the whole
		 * file's length) is still an answer: its status is what counts. */
		if (c->cc == CURLE_PARTIAL_FILE && c->status >= 300)
			c->cc = CURLE_OK;
		int eno = c->cc == CURLE_OK ? 0 : curl_errno(c, h);
		reg_handle_put(reg, h);

		if (c->cc != CURLE_OK) {
			bool progress = c->sink == SINK_FD && c->sink_n != sink_before;
			bool time_left =
			    c->deadline_ns == 0 || reg_now_ns() + 50000000ull < c->deadline_ns;
			bool may = c->idempotent && !progress && !c->not_partial &&
				   attempt < reg->retries && time_left && c->sink_errno == 0 &&
				   !c->overflow && transport_retryable(c->cc) &&
				   (c->cc != CURLE_OPERATION_TIMEDOUT || c->deadline_ns != 0);
			if (may) {
				backoff(attempt++, c->deadline_ns);
				continue;
			}
			char m[256];
			url_for_msg(url, m, sizeof(m));
			if (c->not_partial)
				return wr_err_set(
				    err, ENOTSUP,
				    "%s %s: the registry ignored the Range request (HTTP %ld)",
				    c->method, m, c->status);
			if (c->overflow)
				return wr_err_set(err, EFBIG, "%s %s: answer larger than expected",
						  c->method, m);
			if (c->sink_errno && c->cc != CURLE_OPERATION_TIMEDOUT)
				return wr_err_set(err, c->sink_errno, "%s %s: %s", c->method, m,
						  strerror(c->sink_errno));
			return wr_err_set(err, eno, "%s %s: %s", c->method, m,
					  c->curl_msg[0] ? c->curl_msg : curl_easy_strerror(c->cc));
		}
		if (c->status == 401 && !auth_retried) {
			if (reg_auth_challenge(reg, c->scope, c->www_auth, authz != NULL, err) < 0)
				return -1;
			auth_retried = true;
			continue;
		}
		bool transient = c->status == 429 || c->status == 502 || c->status == 503 ||
				 c->status == 504 || c->status == 500;
		if (transient && c->idempotent && attempt < reg->retries &&
		    (c->deadline_ns == 0 || reg_now_ns() + 50000000ull < c->deadline_ns)) {
			backoff(attempt++, c->deadline_ns);
			continue;
		}
		/* a 2xx transfer that broke off after the answer began */
		return 0;
	}
}

int reg_status_err(struct reg_call *c, wr_err *err, const char *what)
{
	int eno;
	switch (c->status) {
	case 401:
	case 403: eno = EACCES; break;
	case 404: eno = ENOENT; break;
	case 416: eno = ERANGE; break;
	case 429: eno = EAGAIN; break;
	case 405:
	case 501: eno = ENOTSUP; break;
	default: eno = EIO;
	}
	char detail[512] = "";
	size_t dl = 0;
	json_t *j = c->mem ? json_loadb(c->mem, c->mem_len, 0, NULL) : NULL;
	json_t *errs = j ? json_object_get(j, "errors") : NULL;
	size_t i;
	json_t *e;
	json_array_foreach(errs, i, e)
	{
		const char *code = json_string_value(json_object_get(e, "code"));
		const char *msg = json_string_value(json_object_get(e, "message"));
		if (code &&
		    (strcmp(code, "DIGEST_INVALID") == 0 || strcmp(code, "SIZE_INVALID") == 0))
			eno = EBADMSG;
		if (code && (strcmp(code, "DENIED") == 0 || strcmp(code, "UNAUTHORIZED") == 0))
			eno = EACCES;
		int w = snprintf(detail + dl, sizeof(detail) - dl, "%s%s%s%s", dl ? "; " : ": ",
				 code ? code : "?", msg ? ": " : "", msg ? msg : "");
		if (w < 0 || (size_t)w >= sizeof(detail) - dl)
			break;
		dl += (size_t)w;
	}
	json_decref(j);
	if (c->status == 401 || c->status == 403)
		return wr_err_set(err, eno, "%s: access denied by the registry (HTTP %ld)%s", what,
				  c->status, detail);
	return wr_err_set(err, eno, "%s: HTTP %ld%s", what, c->status, detail);
}

int wr_registry_ping(struct wr_registry *reg, wr_err *err)
{
	_cleanup_free_ char *url = reg_url(reg, "%s", "");
	if (url == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	struct reg_call c;
	reg_call_init(&c, "GET", url);
	c.idempotent = true;
	c.sink = SINK_MEM;
	c.mem_cap = REG_ERRBODY_MAX;
	int r = reg_perform(reg, &c, err);
	if (r == 0 && c.status != 200)
		r = reg_status_err(&c, err, "registry ping");
	reg_call_free(&c);
	return r < 0 ? wr_err_wrap(err, "registry %s", reg->host) : 0;
}
