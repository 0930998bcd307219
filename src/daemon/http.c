/* libmicrohttpd glue: listeners, request phases, hand-off to worker
 * threads with suspend/resume, streaming pipes, error shape. See http.h for
 * the threading model. */
#include "daemon/http.h"
#include "daemon/http_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "daemon/api.h"
#include "daemon/listen.h"
#include "daemon/metrics.h"
#include "daemon/sha256.h"

static const struct wrd_config *g_cfg;
static const struct wrd_route *g_routes;
static size_t g_nroutes, g_metric_other;
static struct wrd_http_hooks g_hooks;
static struct MHD_Daemon *g_daemons[2];
static int g_listen_fds[2] = {-1, -1};
static atomic_uint g_inflight;
static atomic_bool g_stopping;
static char *g_spool_dir;

/* ---- error shape ------------------------------------------------------ */

static const struct {
	const char *code;
	unsigned status;
} codes[] = {
    /* clang-format off */
    {"invalid_argument", 400},
    {"unauthenticated", 401},
    {"permission_denied", 403},
    {"not_found", 404},
    {"method_not_allowed", 405},
    {"conflict", 409},
    {"payload_too_large", 413},
    {"unsupported_media_type", 415},
    {"upgrade_required", 426},
    {"resource_exhausted", 429},
    {"internal", 500},
    {"not_implemented", 501},
    {"unavailable", 503},
    /* clang-format on */
};

static unsigned code_status(const char *code)
{
	for (size_t i = 0; i < WR_ARRAY_SIZE(codes); i++)
		if (strcmp(codes[i].code, code) == 0)
			return codes[i].status;
	return 500;
}

void wrd_http_set_resp(struct wrd_http_priv *p, unsigned status, struct MHD_Response *resp)
{
	if (p->resp)
		MHD_destroy_response(p->resp);
	p->resp = resp;
	p->status = status;
}

static struct MHD_Response *buffer_response(char *buf, size_t len, const char *ctype)
{
	struct MHD_Response *resp =
	    MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
	if (resp == NULL) {
		free(buf);
		return NULL;
	}
	if (ctype)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	return resp;
}

static void reply_json_status(struct wrd_http_priv *p, unsigned status, json_t *body)
{
	char *s = json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(9));
	json_decref(body);
	if (s == NULL) {
		wrd_http_set_resp(p, 500, NULL);
		return;
	}
	size_t n = strlen(s);
	/* one JSON document per response, newline-terminated for curl users */
	char *t = realloc(s, n + 2);
	if (t) {
		t[n] = '\n';
		t[n + 1] = 0;
		s = t;
		n++;
	}
	wrd_http_set_resp(p, status, buffer_response(s, n, "application/json"));
}

static void verror(struct wrd_http_priv *p, const char *code, const char *field, const char *fmt,
		   va_list ap)
{
	char msg[1024];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	json_t *e = json_object();
	json_object_set_new(e, "code", json_string(code));
	json_object_set_new(e, "message", json_string(msg));
	if (field)
		json_object_set_new(e, "field", json_string(field));
	json_t *body = json_object();
	json_object_set_new(body, "error", e);
	wrd_metrics_error(code);
	if (strcmp(code, "unauthenticated") == 0 || strcmp(code, "permission_denied") == 0)
		wrd_audit_api(&p->req, code_status(code), msg);
	reply_json_status(p, code_status(code), body);
}

static void perror_(struct wrd_http_priv *p, const char *code, const char *field, const char *fmt,
		    ...) __attribute__((format(printf, 4, 5)));
static void perror_(struct wrd_http_priv *p, const char *code, const char *field, const char *fmt,
		    ...)
{
	va_list ap;
	va_start(ap, fmt);
	verror(p, code, field, fmt, ap);
	va_end(ap);
}

void wrd_reply_error(struct wrd_req *r, const char *code, const char *field, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	verror(r->priv, code, field, fmt, ap);
	va_end(ap);
}

void wrd_reply_err(struct wrd_req *r, const wr_err err)
{
	int e = err ? err->errnum : EIO;
	const char *msg = err && err->msg ? err->msg : "unknown error";
	const char *code;
	switch (e) {
	case EINVAL:
	case ENAMETOOLONG:
	case ELOOP:
	case EXDEV:
	case EBUSY:
	case EISDIR:
	case E2BIG:
	case EACCES:
	case EPERM:
	case EILSEQ: code = "invalid_argument"; break;
	case ENOENT:
	case ENOTDIR: code = "not_found"; break;
	case EEXIST:
	case ENOTEMPTY:
	case ESRCH:
	case ECHILD: code = "conflict"; break;
	case ENOSPC:
	case EFBIG:
	case EDQUOT: code = "payload_too_large"; break;
	case EAGAIN:
	case EMFILE:
	case ENFILE: code = "resource_exhausted"; break;
	case ESHUTDOWN: code = "unavailable"; break;
	case ENOTSUP: code = "not_implemented"; break;
	default: code = "internal"; break;
	}
	wrd_reply_error(r, code, err ? err->field : NULL, "%s", msg);
}

void wrd_reply_json(struct wrd_req *r, unsigned status, json_t *body)
{
	reply_json_status(r->priv, status, body);
}

void wrd_reply_empty(struct wrd_req *r, unsigned status)
{
	wrd_http_set_resp(r->priv, status,
			  MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT));
}

void wrd_reply_text(struct wrd_req *r, unsigned status, const char *ctype, char *buf, size_t len)
{
	wrd_http_set_resp(r->priv, status, buffer_response(buf, len, ctype));
}

/* ---- query parameters ------------------------------------------------- */

struct qcheck {
	const char *const *allowed;
	const char *bad;
};

static enum MHD_Result qcheck_it(void *cls, enum MHD_ValueKind kind, const char *key,
				 const char *value)
{
	(void)kind;
	(void)value;
	struct qcheck *q = cls;
	for (size_t i = 0; q->allowed && q->allowed[i]; i++)
		if (strcmp(key, q->allowed[i]) == 0)
			return MHD_YES;
	q->bad = key;
	return MHD_NO;
}

int wrd_query_check(struct wrd_req *r, const char *const *allowed)
{
	struct qcheck q = {.allowed = allowed};
	MHD_get_connection_values(r->priv->conn, MHD_GET_ARGUMENT_KIND, qcheck_it, &q);
	if (q.bad) {
		wrd_reply_error(r, "invalid_argument", q.bad, "%s: unknown query parameter", q.bad);
		return -1;
	}
	return 0;
}

const char *wrd_query(struct wrd_req *r, const char *key)
{
	return MHD_lookup_connection_value(r->priv->conn, MHD_GET_ARGUMENT_KIND, key);
}

const char *wrd_query_path(struct wrd_req *r, const char *key)
{
	const char *v = NULL;
	size_t n = 0;
	if (MHD_lookup_connection_value_n(r->priv->conn, MHD_GET_ARGUMENT_KIND, key, strlen(key),
					  &v, &n) != MHD_YES ||
	    v == NULL) {
		wrd_reply_error(r, "invalid_argument", key, "%s: is required", key);
		return NULL;
	}
	if (n == 0 || n > 4095 || strlen(v) != n) {
		wrd_reply_error(r, "invalid_argument", key,
				"%s: must be 1 to 4095 bytes without NUL", key);
		return NULL;
	}
	return v;
}

int wrd_query_bool(struct wrd_req *r, const char *key, bool def, bool *out)
{
	const char *v = wrd_query(r, key);
	*out = def;
	if (v == NULL)
		return 0;
	if (strcmp(v, "true") == 0 || strcmp(v, "1") == 0)
		*out = true;
	else if (strcmp(v, "false") == 0 || strcmp(v, "0") == 0)
		*out = false;
	else {
		wrd_reply_error(r, "invalid_argument", key, "%s: must be true or false", key);
		return -1;
	}
	return 0;
}

struct qall {
	const char *key;
	const char **v;
	size_t n, cap;
};

static enum MHD_Result qall_it(void *cls, enum MHD_ValueKind kind, const char *key,
			       const char *value)
{
	(void)kind;
	struct qall *q = cls;
	if (strcmp(key, q->key) != 0)
		return MHD_YES;
	if (q->n == q->cap) {
		q->cap = q->cap ? q->cap * 2 : 8;
		const char **nv = realloc(q->v, q->cap * sizeof(*nv));
		if (nv == NULL)
			return MHD_NO;
		q->v = nv;
	}
	q->v[q->n++] = value ? value : "";
	return MHD_YES;
}

const char **wrd_query_all(struct wrd_req *r, const char *key, size_t *n)
{
	struct qall q = {.key = key};
	MHD_get_connection_values(r->priv->conn, MHD_GET_ARGUMENT_KIND, qall_it, &q);
	*n = q.n;
	return q.v;
}

/* ---- streaming pipes and the relay thread ------------------------------ */

struct pstream {
	int rfd;
	struct MHD_Connection *conn;
};

static int g_relay_ep = -1, g_relay_stop = -1;
static pthread_t g_relay;

static ssize_t pstream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)pos;
	struct pstream *s = cls;
	for (;;) {
		ssize_t n = read(s->rfd, buf, max);
		if (n > 0)
			return n;
		if (n == 0)
			return MHD_CONTENT_READER_END_OF_STREAM;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		/* Nothing yet: park the connection until the relay sees data. */
		MHD_suspend_connection(s->conn);
		struct epoll_event ev = {.events = EPOLLIN | EPOLLONESHOT, .data.ptr = s};
		if (epoll_ctl(g_relay_ep, EPOLL_CTL_MOD, s->rfd, &ev) < 0 &&
		    epoll_ctl(g_relay_ep, EPOLL_CTL_ADD, s->rfd, &ev) < 0) {
			MHD_resume_connection(s->conn);
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
		return 0;
	}
}

static void pstream_free(void *cls)
{
	struct pstream *s = cls;
	epoll_ctl(g_relay_ep, EPOLL_CTL_DEL, s->rfd, NULL);
	close(s->rfd);
	free(s);
}

static void *relay_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "wrd-relay");
	struct epoll_event evs[64];
	for (;;) {
		int n = epoll_wait(g_relay_ep, evs, 64, -1);
		if (n < 0 && errno != EINTR)
			return NULL;
		for (int i = 0; i < n; i++) {
			if (evs[i].data.ptr == NULL)
				return NULL; /* the stop eventfd */
			struct pstream *s = evs[i].data.ptr;
			MHD_resume_connection(s->conn);
		}
	}
}

int wrd_reply_stream(struct wrd_req *r, unsigned status, const char *ctype)
{
	struct wrd_http_priv *p = r->priv;
	int fds[2];
	if (pipe2(fds, O_CLOEXEC) < 0) {
		perror_(p, "internal", NULL, "stream: pipe: %s", strerror(errno));
		return -1;
	}
	fcntl(fds[0], F_SETFL, O_NONBLOCK);
	fcntl(fds[0], F_SETPIPE_SZ, 1 << 20);
	struct pstream *s = calloc(1, sizeof(*s));
	struct MHD_Response *resp = NULL;
	if (s) {
		s->rfd = fds[0];
		s->conn = p->conn;
		resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, pstream_read,
							 s, pstream_free);
	}
	if (resp == NULL) {
		free(s);
		close(fds[0]);
		close(fds[1]);
		perror_(p, "internal", NULL, "stream: out of memory");
		return -1;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	wrd_http_set_resp(p, status, resp);
	wrd_http_commit(p);
	return fds[1];
}

/* ---- request phases ----------------------------------------------------- */

static void priv_unref(struct wrd_http_priv *p)
{
	if (atomic_fetch_sub(&p->refs, 1) != 1)
		return;
	json_decref(p->req.json);
	if (p->req.upload_fd >= 0)
		close(p->req.upload_fd);
	if (p->resp)
		MHD_destroy_response(p->resp);
	free(p->buf);
	free(p);
	atomic_fetch_sub(&g_inflight, 1);
}

void wrd_http_commit(struct wrd_http_priv *p)
{
	if (p->resp == NULL)
		perror_(p, "internal", NULL, "handler gave no answer");
	p->committed = true;
	MHD_resume_connection(p->conn);
}

void wrd_reply_send(struct wrd_req *r)
{
	if (!r->priv->committed)
		wrd_http_commit(r->priv);
}

/* Pool and long handlers: commit the reply unless the handler streamed or
 * sent it early (the reply is MHD's then). */
static void run_and_commit(void *arg)
{
	struct wrd_http_priv *p = arg;
	p->req.route->fn(&p->req);
	if (!p->committed)
		wrd_http_commit(p);
	priv_unref(p);
}

static const char *header(struct MHD_Connection *c, const char *name)
{
	return MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
}

static bool auth(struct wrd_http_priv *p)
{
	const char *h = header(p->conn, MHD_HTTP_HEADER_AUTHORIZATION);
	if (h == NULL) {
		if (p->tcp)
			return false;
		p->req.tenant = g_cfg->unix_tenant;
		return true;
	}
	if (strncasecmp(h, "Bearer ", 7) != 0)
		return false;
	const char *tok = h + 7;
	while (*tok == ' ')
		tok++;
	uint8_t d[32];
	wrd_sha256(tok, strlen(tok), d);
	const char *tenant = NULL;
	/* every token is compared, in constant time each */
	for (size_t i = 0; i < g_cfg->n_tokens; i++)
		if (wrd_digest_equal(d, g_cfg->tokens[i].sha256) && tenant == NULL)
			tenant = g_cfg->tokens[i].tenant;
	if (tenant == NULL)
		return false;
	p->req.tenant = tenant;
	return true;
}

/* Match url against a pattern; fills {id}/{cid}. */
static bool match(const char *pattern, const char *url, struct wrd_req *r)
{
	const char *p = pattern, *u = url;
	while (*p && *u) {
		if (*p == '{') {
			const char *pe = strchr(p, '}');
			const char *ue = strchr(u, '/');
			size_t n = ue ? (size_t)(ue - u) : strlen(u);
			if (pe == NULL || n == 0 || n >= sizeof(r->id))
				return false;
			char *dst = strncmp(p, "{id}", 4) == 0 ? r->id : r->cid;
			memcpy(dst, u, n);
			dst[n] = 0;
			p = pe + 1;
			u += n;
			continue;
		}
		if (*p != *u)
			return false;
		p++;
		u++;
	}
	return *p == 0 && *u == 0;
}

static void header_phase(struct wrd_http_priv *p, const char *url, const char *method)
{
	struct wrd_req *r = &p->req;
	p->metric = g_metric_other;
	/* strip one trailing slash */
	char path[1024];
	snprintf(path, sizeof(path), "%s", url);
	size_t pl = strlen(path);
	if (pl > 1 && path[pl - 1] == '/')
		path[pl - 1] = 0;
	bool path_known = false;
	for (size_t i = 0; i < g_nroutes; i++) {
		if (!match(g_routes[i].pattern, path, r))
			continue;
		path_known = true;
		p->metric = g_routes[i].metric;
		if (strcmp(g_routes[i].method, method) == 0) {
			r->route = &g_routes[i];
			break;
		}
	}
	wrd_metrics_request(p->metric);
	if (atomic_load(&g_stopping)) {
		perror_(p, "unavailable", NULL, "the daemon is shutting down");
		return;
	}
	if (!auth(p)) {
		perror_(p, "unauthenticated", NULL,
			p->tcp ? "a valid bearer token is required"
			       : "the bearer token is not valid");
		return;
	}
	if (r->route == NULL) {
		if (path_known)
			perror_(p, "method_not_allowed", NULL, "%s is not allowed on %s", method,
				path);
		else
			perror_(p, "not_found", NULL, "no route %s %s", method, path);
		return;
	}
	if (r->route->body == WRD_BODY_JSON) {
		const char *ct = header(p->conn, MHD_HTTP_HEADER_CONTENT_TYPE);
		if (ct && strncasecmp(ct, "application/json", 16) != 0) {
			perror_(p, "unsupported_media_type", NULL,
				"Content-Type must be application/json, not %s", ct);
			return;
		}
	} else if (r->route->body == WRD_BODY_UPLOAD) {
		r->upload_max = g_hooks.upload_limit ? g_hooks.upload_limit(r->tenant, r->id) : 0;
		if (r->upload_max == 0) {
			p->upload_discard = true; /* the handler answers 404/409 */
			return;
		}
		int fd = open(g_spool_dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
		if (fd < 0) {
			perror_(p, "internal", NULL, "spool upload: %s", strerror(errno));
			return;
		}
		r->upload_fd = fd;
	}
}

static void body_chunk(struct wrd_http_priv *p, const char *data, size_t n)
{
	struct wrd_req *r = &p->req;
	if (p->resp || p->too_large || r->route == NULL)
		return; /* discarded: an error is pending */
	if (r->route->body == WRD_BODY_JSON) {
		if (p->len + n > WRD_JSON_MAX) {
			p->too_large = true;
			return;
		}
		if (p->len + n > p->cap) {
			size_t want = p->cap ? p->cap : 4096;
			while (want < p->len + n)
				want *= 2;
			char *nb = realloc(p->buf, want);
			if (nb == NULL) {
				perror_(p, "internal", NULL, "out of memory");
				return;
			}
			p->buf = nb;
			p->cap = want;
		}
		memcpy(p->buf + p->len, data, n);
		p->len += n;
	} else if (r->route->body == WRD_BODY_UPLOAD && !p->upload_discard) {
		if (r->upload_len + n > r->upload_max) {
			p->too_large = true;
			return;
		}
		if (wr_write_all(r->upload_fd, data, n) < 0) {
			if (errno == ENOSPC)
				p->too_large = true;
			else
				perror_(p, "internal", NULL, "spool upload: %s", strerror(errno));
			return;
		}
		r->upload_len += n;
	}
}

/* The body is complete: parse it. false when an error reply is set. */
static bool body_done(struct wrd_http_priv *p)
{
	struct wrd_req *r = &p->req;
	if (p->too_large) {
		if (r->route->body == WRD_BODY_JSON)
			perror_(p, "payload_too_large", "body",
				"JSON bodies are limited to %u bytes", WRD_JSON_MAX);
		else
			perror_(p, "payload_too_large", "body",
				"the upload exceeds the sandbox's disk quota (%llu bytes)",
				(unsigned long long)r->upload_max);
		return false;
	}
	if (r->route->body == WRD_BODY_JSON && p->len > 0) {
		json_error_t je;
		r->json = json_loadb(p->buf, p->len, JSON_REJECT_DUPLICATES, &je);
		if (r->json == NULL) {
			perror_(p, "invalid_argument", "body", "malformed JSON: %s (at byte %d)",
				je.text, je.position);
			return false;
		}
		if (!json_is_object(r->json)) {
			perror_(p, "invalid_argument", "body", "the body must be a JSON object");
			return false;
		}
	}
	if (r->upload_fd >= 0 && lseek(r->upload_fd, 0, SEEK_SET) < 0) {
		perror_(p, "internal", NULL, "spool upload: %s", strerror(errno));
		return false;
	}
	return true;
}

static enum MHD_Result queue(struct wrd_http_priv *p)
{
	struct MHD_Response *resp = p->resp;
	p->resp = NULL;
	if (resp == NULL)
		return MHD_NO; /* out of memory: drop the connection */
	enum MHD_Result ret = MHD_queue_response(p->conn, p->status, resp);
	MHD_destroy_response(resp);
	return ret;
}

struct listener {
	bool tcp;
};
static struct listener g_lunix = {false}, g_ltcp = {true};

static enum MHD_Result access_cb(void *cls, struct MHD_Connection *conn, const char *url,
				 const char *method, const char *version, const char *upload_data,
				 size_t *upload_size, void **con_cls)
{
	(void)version;
	struct listener *l = cls;
	struct wrd_http_priv *p = *con_cls;
	if (p == NULL) {
		p = calloc(1, sizeof(*p));
		if (p == NULL)
			return MHD_NO;
		atomic_fetch_add(&g_inflight, 1);
		atomic_init(&p->refs, 1);
		p->req.priv = p;
		p->req.upload_fd = -1;
		p->conn = conn;
		p->tcp = p->req.tcp = l->tcp;
		*con_cls = p;
		header_phase(p, url, method);
		return MHD_YES;
	}
	if (*upload_size) {
		body_chunk(p, upload_data, *upload_size);
		*upload_size = 0;
		return MHD_YES;
	}
	if (p->resp)
		return queue(p);
	if (p->dispatched)
		return MHD_NO; /* resumed without an answer: cannot happen */
	if (!body_done(p))
		return queue(p);
	p->dispatched = true;
	enum wrd_class cls_ = p->req.route->cls;
	if (cls_ == WRD_INLINE) {
		p->req.route->fn(&p->req);
		if (p->resp == NULL)
			perror_(p, "internal", NULL, "handler gave no answer");
		return queue(p);
	}
	if (cls_ == WRD_LONG && !wrd_long_reserve()) {
		perror_(p, "resource_exhausted", NULL,
			"too many commands and streams in flight (max_commands %u)",
			g_cfg->max_commands);
		return queue(p);
	}
	atomic_fetch_add(&p->refs, 1);
	MHD_suspend_connection(conn);
	int r = cls_ == WRD_LONG     ? wrd_long_start(run_and_commit, p)
		: cls_ == WRD_CREATE ? wrd_lane_submit(WRD_LANE_CREATE, run_and_commit, p)
				     : wrd_lane_submit(WRD_LANE_POOL, run_and_commit, p);
	if (r < 0) {
		perror_(p, "resource_exhausted", NULL, "cannot start a worker");
		atomic_fetch_sub(&p->refs, 1);
		MHD_resume_connection(conn);
	}
	return MHD_YES;
}

static void completed_cb(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	(void)cls;
	(void)conn;
	struct wrd_http_priv *p = *con_cls;
	if (p) {
		wrd_upgrade_ended(p, toe);
		priv_unref(p);
	}
	*con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	char buf[1024];
	vsnprintf(buf, sizeof(buf), fmt, ap);
	wr_debug("http: %s", buf);
}

/* ---- listeners ---------------------------------------------------------- */

static struct MHD_Daemon *start_daemon(int fd, struct listener *l, unsigned max_conn)
{
	return MHD_start_daemon(
	    MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_TURBO |
		MHD_ALLOW_SUSPEND_RESUME | MHD_ALLOW_UPGRADE | MHD_USE_ERROR_LOG,
	    0, NULL, NULL, access_cb, l, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_NOTIFY_COMPLETED,
	    completed_cb, NULL, MHD_OPTION_CONNECTION_LIMIT, max_conn,
	    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)300, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
	    (size_t)(256 * 1024), MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_END);
}

int wrd_http_start(const struct wrd_config *cfg, const struct wrd_route *routes, size_t n_routes,
		   const struct wrd_http_hooks *hooks, wr_err *err)
{
	g_cfg = cfg;
	g_routes = routes;
	g_nroutes = n_routes;
	g_hooks = *hooks;
	g_metric_other = 0;
	for (size_t i = 0; i < n_routes; i++)
		if (routes[i].metric + 1 > g_metric_other)
			g_metric_other = routes[i].metric + 1;
	if (asprintf(&g_spool_dir, "%s/spool", cfg->state_dir) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	if (wr_mkdir_p(g_spool_dir, 0700, err) < 0)
		return wr_err_wrap(err, "spool directory");

	g_relay_ep = epoll_create1(EPOLL_CLOEXEC);
	g_relay_stop = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
	if (g_relay_ep < 0 || g_relay_stop < 0 ||
	    epoll_ctl(g_relay_ep, EPOLL_CTL_ADD, g_relay_stop, &ev) < 0)
		return wr_err_sys(err, "relay epoll");
	if (pthread_create(&g_relay, NULL, relay_main, NULL) != 0)
		return wr_err_set(err, EAGAIN, "start relay thread");

	if (wrd_pool_start(cfg, err) < 0)
		return -1;

	int fd = wrd_unix_listener(cfg, err);
	if (fd < 0)
		return fd;
	g_listen_fds[0] = fd;
	g_daemons[0] = start_daemon(fd, &g_lunix, cfg->max_connections);
	if (g_daemons[0] == NULL)
		return wr_err_set(err, EIO, "start HTTP server on %s", cfg->socket_path);
	if (cfg->listen) {
		fd = wrd_tcp_listener(cfg->listen, err);
		if (fd < 0)
			return fd;
		g_listen_fds[1] = fd;
		g_daemons[1] = start_daemon(fd, &g_ltcp, cfg->max_connections);
		if (g_daemons[1] == NULL)
			return wr_err_set(err, EIO, "start HTTP server on %s", cfg->listen);
	}
	return 0;
}

unsigned wrd_http_inflight(void)
{
	return atomic_load(&g_inflight);
}

void wrd_http_shutdown(unsigned timeout_s)
{
	atomic_store(&g_stopping, true);
	for (int i = 0; i < 2; i++) {
		if (g_daemons[i] == NULL)
			continue;
		MHD_socket s = MHD_quiesce_daemon(g_daemons[i]);
		if (s >= 0 && s == g_listen_fds[i])
			close(s);
		g_listen_fds[i] = -1;
	}
	struct stat st;
	if (g_cfg && stat(g_cfg->socket_path, &st) == 0 && S_ISSOCK(st.st_mode))
		unlink(g_cfg->socket_path);
	uint64_t deadline = wr_now_ns() + (uint64_t)timeout_s * 1000000000ull;
	while (atomic_load(&g_inflight) > 0 && wr_now_ns() < deadline)
		usleep(20 * 1000);
	if (atomic_load(&g_inflight) > 0) {
		/* MHD cannot be stopped with suspended connections; the process
		 * exits around them (sandboxes are not ours to kill). */
		wr_warn("shutdown: %u requests still in flight after %u s; exiting anyway",
			atomic_load(&g_inflight), timeout_s);
		return;
	}
	for (int i = 0; i < 2; i++)
		if (g_daemons[i]) {
			MHD_stop_daemon(g_daemons[i]);
			g_daemons[i] = NULL;
		}
	wrd_pool_stop();
	uint64_t one = 1;
	if (write(g_relay_stop, &one, sizeof(one)) == sizeof(one))
		pthread_join(g_relay, NULL);
	close(g_relay_stop);
	close(g_relay_ep);
	free(g_spool_dir);
	g_spool_dir = NULL;
}
