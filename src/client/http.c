/* libwarren: the client handle and the HTTP layer over libcurl.
 *
 * A call takes an idle easy handle from the client's pool (or makes one)
 * and returns it afterwards with its connection still open, so a client
 * may be used from several threads at once and each of them reuses a
 * connection (keep-alive) without contending on a shared cache. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "client/client_internal.h"
#include "common/cleanup.h"
#include "common/util.h"

/* Error bodies and JSON answers are small; do not buffer a hostile answer
 * without bound. Raw file reads into a buffer are not limited here. */
#define WC_ERROR_BODY_MAX (1u << 20)
#define WC_LINE_MAX (64u << 20)

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

const char *warren_version(void)
{
	return WARREN_VERSION;
}

int wc_buf_add(struct wc_buf *b, const void *data, size_t len)
{
	if (b->len + len + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + len + 1)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (p == NULL)
			return -ENOMEM;
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, data, len);
	b->len += len;
	b->p[b->len] = 0;
	return 0;
}

void wc_buf_free(struct wc_buf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}

char *wc_fmt(const char *fmt, ...)
{
	char *s = NULL;
	va_list ap;
	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	return s;
}

char *wc_esc(const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = strlen(s);
	char *out = malloc(n * 3 + 1), *o = out;
	if (out == NULL)
		return NULL;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		    (*p >= '0' && *p <= '9') || strchr("-._~/", *p)) {
			*o++ = (char)*p;
		} else {
			*o++ = '%';
			*o++ = hex[*p >> 4];
			*o++ = hex[*p & 15];
		}
	}
	*o = 0;
	return out;
}

int wc_check_id(struct wc_call *c, const char *field, const char *id)
{
	if (id == NULL || *id == 0)
		return wc_fail_field(c, field, "%s: must not be empty", field);
	if (strlen(id) > 128)
		return wc_fail_field(c, field, "%s: longer than 128 characters", field);
	for (const char *p = id; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '-' || *p == '_'))
			return wc_fail_field(c, field, "%s: '%s' is not a valid id", field, id);
	return 0;
}

int warren_client_new(const warren_client_opts *opts, warren_client **out, warren_error **errp)
{
	struct wc_call c = {0};
	warren_client_opts dflt = WARREN_CLIENT_OPTS_INIT;
	int r;
	if (opts == NULL)
		opts = &dflt;
	*out = NULL;
	if (opts->version > WARREN_CLIENT_OPTS_VERSION) {
		r = wc_fail_field(&c, "version", "version: %u is newer than this library",
				  opts->version);
		return wc_finish(&c, r, errp, "new client");
	}
	pthread_once(&curl_once, curl_init);
	if (curl_init_rc != CURLE_OK) {
		r = wc_fail(&c, "internal", EIO, "curl_global_init: %s",
			    curl_easy_strerror(curl_init_rc));
		return wc_finish(&c, r, errp, "new client");
	}
	warren_client *cl = calloc(1, sizeof(*cl));
	if (cl == NULL) {
		r = wc_fail(&c, "internal", ENOMEM, "out of memory");
		return wc_finish(&c, r, errp, "new client");
	}
	pthread_mutex_init(&cl->pool_lock, NULL);
	cl->connect_timeout_ms = opts->connect_timeout_ms > 0 ? opts->connect_timeout_ms : 10000;
	cl->request_timeout_ms = opts->request_timeout_ms > 0 ? opts->request_timeout_ms : 0;
	if (opts->url && *opts->url) {
		if (strncmp(opts->url, "http://", 7) != 0 &&
		    strncmp(opts->url, "https://", 8) != 0) {
			r = wc_fail_field(&c, "url", "url: '%s' is not an http:// or https:// URL",
					  opts->url);
			goto fail;
		}
		cl->base_url = strdup(opts->url);
		if (cl->base_url) {
			size_t n = strlen(cl->base_url);
			while (n > 0 && cl->base_url[n - 1] == '/')
				cl->base_url[--n] = 0;
		}
	} else {
		const char *sock = opts->socket_path && *opts->socket_path ? opts->socket_path
									   : WARREN_DEFAULT_SOCKET;
		cl->socket_path = strdup(sock);
		cl->base_url = strdup("http://localhost");
		if (cl->socket_path == NULL) {
			r = wc_fail(&c, "internal", ENOMEM, "out of memory");
			goto fail;
		}
	}
	if (opts->token && *opts->token) {
		if (strpbrk(opts->token, "\r\n")) {
			r = wc_fail_field(&c, "token", "token: must not contain a line break");
			goto fail;
		}
		cl->auth_header = wc_fmt("Authorization: Bearer %s", opts->token);
		if (cl->auth_header == NULL) {
			r = wc_fail(&c, "internal", ENOMEM, "out of memory");
			goto fail;
		}
	}
	cl->pool = calloc(WC_POOL_MAX, sizeof(*cl->pool));
	if (cl->base_url == NULL || cl->pool == NULL) {
		r = wc_fail(&c, "internal", ENOMEM, "out of memory");
		goto fail;
	}
	*out = cl;
	return 0;
fail:
	warren_client_free(cl);
	return wc_finish(&c, r, errp, "new client");
}

void warren_client_free(warren_client *cl)
{
	if (cl == NULL)
		return;
	for (size_t i = 0; i < cl->n_pool; i++)
		curl_easy_cleanup(cl->pool[i]);
	free(cl->pool);
	pthread_mutex_destroy(&cl->pool_lock);
	free(cl->base_url);
	free(cl->socket_path);
	free(cl->auth_header);
	free(cl);
}

/* ---- one transfer ---------------------------------------------------- */

static CURL *handle_get(warren_client *cl)
{
	CURL *h = NULL;
	pthread_mutex_lock(&cl->pool_lock);
	if (cl->n_pool > 0)
		h = cl->pool[--cl->n_pool];
	pthread_mutex_unlock(&cl->pool_lock);
	return h ? h : curl_easy_init();
}

static void handle_put(warren_client *cl, CURL *h)
{
	if (h == NULL)
		return;
	/* Options back to their defaults (they point at this call's stack
	 * and buffers); the connection stays open in the handle. */
	curl_easy_reset(h);
	pthread_mutex_lock(&cl->pool_lock);
	if (cl->n_pool < WC_POOL_MAX) {
		cl->pool[cl->n_pool++] = h;
		h = NULL;
	}
	pthread_mutex_unlock(&cl->pool_lock);
	if (h)
		curl_easy_cleanup(h);
}

struct xfer {
	struct wc_call *c;
	struct wc_req *rq;
	CURL *curl;
	long status;
	struct wc_buf *body;   /* 2xx answer when not sunk */
	struct wc_buf errbody; /* non-2xx answer */
	struct wc_buf line;    /* NDJSON partial line */
	bool failed;	       /* c holds the reason */
};

static int handle_line(struct xfer *x, const char *p, size_t n)
{
	while (n > 0 && (p[n - 1] == '\r' || p[n - 1] == ' '))
		n--;
	if (n == 0)
		return 0;
	json_error_t jerr;
	json_t *o = json_loadb(p, n, 0, &jerr);
	if (!json_is_object(o)) {
		json_decref(o);
		return wc_fail(x->c, "protocol", EPROTO, "stream line is not a JSON object: %s",
			       jerr.text);
	}
	int r = x->rq->on_line(x->rq->line_ctx, o, x->c);
	json_decref(o);
	return r;
}

static int feed_lines(struct xfer *x, const char *data, size_t len)
{
	while (len > 0) {
		const char *nl = memchr(data, '\n', len);
		size_t take = nl ? (size_t)(nl - data) : len;
		if (x->line.len + take > WC_LINE_MAX)
			return wc_fail(x->c, "protocol", EPROTO, "stream line over %u bytes",
				       WC_LINE_MAX);
		if (nl == NULL)
			return wc_buf_add(&x->line, data, take) < 0
				   ? wc_fail(x->c, "internal", ENOMEM, "out of memory")
				   : 0;
		int r;
		if (x->line.len) {
			if (wc_buf_add(&x->line, data, take) < 0)
				return wc_fail(x->c, "internal", ENOMEM, "out of memory");
			r = handle_line(x, x->line.p, x->line.len);
			x->line.len = 0;
		} else {
			r = handle_line(x, data, take);
		}
		if (r < 0)
			return r;
		data += take + 1;
		len -= take + 1;
	}
	return 0;
}

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *ud)
{
	struct xfer *x = ud;
	size_t len = size * nmemb;
	if (x->status == 0)
		curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &x->status);
	if (x->status < 200 || x->status >= 300) {
		if (x->errbody.len + len > WC_ERROR_BODY_MAX)
			return len; /* keep the head: enough for the message */
		return wc_buf_add(&x->errbody, ptr, len) < 0 ? 0 : len;
	}
	if (x->rq->out_fd >= 0) {
		if (wr_write_all(x->rq->out_fd, ptr, len) < 0) {
			wc_fail(x->c, "io", errno, "write: %s", strerror(errno));
			x->failed = true;
			return 0;
		}
		return len;
	}
	if (x->rq->on_line) {
		if (feed_lines(x, ptr, len) < 0) {
			x->failed = true;
			return 0;
		}
		return len;
	}
	if (x->body && wc_buf_add(x->body, ptr, len) < 0) {
		wc_fail(x->c, "internal", ENOMEM, "out of memory for a %zu-byte answer",
			x->body->len + len);
		x->failed = true;
		return 0;
	}
	return len;
}

static size_t on_read(char *buf, size_t size, size_t nmemb, void *ud)
{
	struct xfer *x = ud;
	ssize_t n;
	do
		n = read(x->rq->in_fd, buf, size * nmemb);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		wc_fail(x->c, "io", errno, "read: %s", strerror(errno));
		x->failed = true;
		return CURL_READFUNC_ABORT;
	}
	return (size_t)n;
}

static int set_body(struct wc_call *c, struct wc_req *rq, CURL *h, struct curl_slist **hdrs,
		    char **json_text)
{
	const char *ctype = rq->content_type;
	if (rq->body) {
		*json_text = json_dumps(rq->body, JSON_COMPACT);
		if (*json_text == NULL)
			return wc_fail(c, "internal", ENOMEM, "cannot serialize the request");
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, *json_text);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(*json_text));
		ctype = "application/json";
	} else if (rq->has_data) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, rq->data ? rq->data : "");
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rq->len);
	} else if (rq->in_fd >= 0) {
		struct stat st;
		curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
		if (fstat(rq->in_fd, &st) == 0 && S_ISREG(st.st_mode) &&
		    lseek(rq->in_fd, 0, SEEK_CUR) == 0)
			curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)st.st_size);
	}
	if (ctype) {
		char line[128];
		snprintf(line, sizeof(line), "Content-Type: %s", ctype);
		*hdrs = curl_slist_append(*hdrs, line);
	}
	/* Uploads go at once: the daemon answers errors before reading on. */
	*hdrs = curl_slist_append(*hdrs, "Expect:");
	return 0;
}

static int transport_error(struct wc_call *c, CURL *h, CURLcode rc, const char *errbuf)
{
	long oserr = 0;
	curl_easy_getinfo(h, CURLINFO_OS_ERRNO, &oserr);
	const char *detail = errbuf[0] ? errbuf : curl_easy_strerror(rc);
	int errnum = oserr > 0 ? (int)oserr : ECONNREFUSED;
	if (rc == CURLE_OPERATION_TIMEDOUT)
		errnum = ETIMEDOUT;
	if (c->client->socket_path)
		return wc_fail(c, "transport", errnum, "daemon at %s: %s", c->client->socket_path,
			       oserr > 0 && rc == CURLE_COULDNT_CONNECT ? strerror((int)oserr)
									: detail);
	return wc_fail(c, "transport", errnum, "daemon at %s: %s", c->client->base_url, detail);
}

int wc_do(struct wc_call *c, struct wc_req *rq, struct wc_buf *body)
{
	warren_client *cl = c->client;
	if (rq->path == NULL)
		return wc_fail(c, "internal", ENOMEM, "out of memory");
	_cleanup_free_ char *url = wc_fmt("%s%s", cl->base_url, rq->path);
	_cleanup_free_ char *json_text = NULL;
	CURL *h = handle_get(cl);
	struct curl_slist *hdrs = NULL;
	struct xfer x = {.c = c, .rq = rq, .curl = h, .body = body};
	char errbuf[CURL_ERROR_SIZE] = "";
	int r;
	if (h == NULL || url == NULL) {
		r = wc_fail(c, "internal", ENOMEM, "out of memory");
		goto out;
	}
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, cl->connect_timeout_ms);
	if (cl->request_timeout_ms > 0 && !rq->long_running)
		curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, cl->request_timeout_ms);
	if (cl->socket_path)
		curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, cl->socket_path);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_USERAGENT, "libwarren/" WARREN_VERSION);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
	curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
	curl_easy_setopt(h, CURLOPT_READDATA, &x);
	if (cl->auth_header)
		hdrs = curl_slist_append(hdrs, cl->auth_header);
	if (set_body(c, rq, h, &hdrs, &json_text) < 0) {
		r = -EIO;
		goto out;
	}
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, rq->method);
	if (strcmp(rq->method, "HEAD") == 0)
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);

	CURLcode rc = curl_easy_perform(h);
	if (x.failed) {
		r = c->err && c->err->errnum > 0 ? -c->err->errnum : -EIO;
		goto out;
	}
	long status = 0;
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	if (rc != CURLE_OK && !(status >= 400 && rc == CURLE_SEND_ERROR)) {
		r = transport_error(c, h, rc, errbuf);
		goto out;
	}
	c->http_status = (int)status;
	if (status < 200 || status >= 300) {
		r = wc_api_error(c, status, x.errbody.p, x.errbody.len);
		goto out;
	}
	if (rq->on_line && x.line.len) {
		r = handle_line(&x, x.line.p, x.line.len);
		if (r < 0)
			goto out;
	}
	r = (int)status;
out:
	wc_buf_free(&x.errbody);
	wc_buf_free(&x.line);
	handle_put(cl, h);
	curl_slist_free_all(hdrs);
	return r;
}

int wc_json(struct wc_call *c, const char *method, const char *path, json_t *body, json_t **out)
{
	struct wc_req rq = WC_REQ_INIT(method, path);
	struct wc_buf b = {0};
	rq.body = body;
	if (out)
		*out = NULL;
	int r = wc_do(c, &rq, &b);
	if (r < 0) {
		wc_buf_free(&b);
		return r;
	}
	if (out && b.len) {
		json_error_t jerr;
		*out = json_loadb(b.p, b.len, 0, &jerr);
		if (*out == NULL) {
			wc_buf_free(&b);
			return wc_fail(c, "protocol", EPROTO, "answer is not JSON: %s", jerr.text);
		}
	}
	wc_buf_free(&b);
	return r;
}
