/* libwarren: interactive shells (GET .../pty upgraded to warren-pty/1).
 *
 * libcurl (7.88) cannot hand over an upgraded connection, so this speaks
 * HTTP/1.1 itself on a plain socket for the one request: it writes the
 * request, reads the answer's head byte by byte (never past it: what
 * follows belongs to the framed protocol), accepts only 101 and maps any
 * other answer's JSON error body to the usual error object. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "client/client_internal.h"
#include "common/cleanup.h"

#define PTY_PROTO "warren-pty/1"
#define HEAD_MAX (16u << 10)
#define ERROR_BODY_MAX (1u << 20)
#define SEND_FRAME_MAX (1u << 20)  /* the daemon's limit per client frame */
#define READ_FRAME_MAX (16u << 20) /* bigger than anything the daemon sends */
#define HANDSHAKE_TIMEOUT_MS 60000 /* for the answer, when no request timeout is set */

struct warren_pty {
	int fd;
	char *buf; /* the last frame's payload */
	size_t cap;
};

/* ---- the connection ------------------------------------------------------ */

static int connect_timeout(int fd, const struct sockaddr *sa, socklen_t len, long ms)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	int r = connect(fd, sa, len);
	if (r < 0 && errno == EINPROGRESS) {
		struct pollfd pf = {.fd = fd, .events = POLLOUT};
		int n;
		while ((n = poll(&pf, 1, (int)ms)) < 0 && errno == EINTR)
			;
		int soerr = 0;
		socklen_t sl = sizeof(soerr);
		if (n == 0)
			soerr = ETIMEDOUT;
		else if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
			soerr = errno;
		r = soerr ? -1 : 0;
		errno = soerr;
	}
	if (r < 0)
		return -errno;
	return fcntl(fd, F_SETFL, fl) < 0 ? -errno : 0;
}

/* Split "http://host[:port][/prefix]". */
static int parse_url(struct wc_call *c, const char *url, char **host, char **port, char **prefix)
{
	if (strncmp(url, "http://", 7) != 0)
		return wc_fail_field(
		    c, "url", "url: interactive shells need http:// or the Unix socket (%s)", url);
	const char *h = url + 7, *slash = strchr(h, '/');
	size_t hl = slash ? (size_t)(slash - h) : strlen(h);
	const char *colon = NULL;
	if (*h == '[') { /* [v6]:port */
		const char *rb = memchr(h, ']', hl);
		if (rb == NULL)
			return wc_fail_field(c, "url", "url: '%s' has an unterminated [", url);
		*host = strndup(h + 1, (size_t)(rb - h - 1));
		colon = rb + 1 < h + hl && rb[1] == ':' ? rb + 1 : NULL;
	} else {
		colon = memchr(h, ':', hl);
		*host = strndup(h, colon ? (size_t)(colon - h) : hl);
	}
	*port = colon ? strndup(colon + 1, (size_t)(h + hl - colon - 1)) : strdup("80");
	*prefix = strdup(slash ? slash : "");
	if (*host == NULL || *port == NULL || *prefix == NULL)
		return wc_fail(c, "internal", ENOMEM, "out of memory");
	return 0;
}

static int dial(struct wc_call *c, char **prefix, char **hosthdr)
{
	warren_client *cl = c->client;
	if (cl->socket_path) {
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		if (strlen(cl->socket_path) >= sizeof(sa.sun_path))
			return wc_fail(c, "transport", ENAMETOOLONG, "daemon at %s: path too long",
				       cl->socket_path);
		strcpy(sa.sun_path, cl->socket_path);
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return wc_fail(c, "transport", errno, "socket: %s", strerror(errno));
		int r =
		    connect_timeout(fd, (struct sockaddr *)&sa, sizeof(sa), cl->connect_timeout_ms);
		if (r < 0) {
			close(fd);
			return wc_fail(c, "transport", -r, "daemon at %s: %s", cl->socket_path,
				       strerror(-r));
		}
		*prefix = strdup("");
		*hosthdr = strdup("localhost");
		if (*prefix == NULL || *hosthdr == NULL) {
			close(fd);
			return wc_fail(c, "internal", ENOMEM, "out of memory");
		}
		return fd;
	}
	_cleanup_free_ char *host = NULL, *port = NULL;
	if (parse_url(c, cl->base_url, &host, &port, prefix) < 0)
		return -EINVAL;
	*hosthdr = strchr(host, ':') ? wc_fmt("[%s]:%s", host, port) : wc_fmt("%s:%s", host, port);
	if (*hosthdr == NULL)
		return wc_fail(c, "internal", ENOMEM, "out of memory");
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
	int g = getaddrinfo(host, port, &hints, &ai);
	if (g != 0)
		return wc_fail(c, "transport", EHOSTUNREACH, "daemon at %s: %s", cl->base_url,
			       gai_strerror(g));
	int r = -ECONNREFUSED, fd = -1;
	for (struct addrinfo *a = ai; a; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
		if (fd < 0) {
			r = -errno;
			continue;
		}
		r = connect_timeout(fd, a->ai_addr, a->ai_addrlen, cl->connect_timeout_ms);
		if (r == 0)
			break;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	if (fd < 0)
		return wc_fail(c, "transport", -r, "daemon at %s: %s", cl->base_url, strerror(-r));
	int one = 1; /* keystrokes go out at once */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static int send_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len > 0) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Read exactly len bytes: 0, or -EPIPE at EOF (*got says how many came). */
static int read_full(int fd, void *buf, size_t len, size_t *got)
{
	char *p = buf;
	size_t n = 0;
	while (n < len) {
		ssize_t r = read(fd, p + n, len - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (got)
				*got = n;
			return r == 0 ? -EPIPE : -errno;
		}
		n += (size_t)r;
	}
	if (got)
		*got = n;
	return 0;
}

/* ---- the handshake ------------------------------------------------------ */

static int add_param(struct wc_buf *q, const char *key, const char *value)
{
	_cleanup_free_ char *v = wc_esc(value);
	if (v == NULL)
		return -ENOMEM;
	if (wc_buf_add(q, q->len ? "&" : "?", 1) < 0 || wc_buf_add(q, key, strlen(key)) < 0 ||
	    wc_buf_add(q, "=", 1) < 0 || wc_buf_add(q, v, strlen(v)) < 0)
		return -ENOMEM;
	return 0;
}

static int build_query(struct wc_call *c, const warren_pty_opts *o, struct wc_buf *q)
{
	char num[32];
	int r = 0;
	if (o->argv) {
		if (o->argv[0] == NULL || *o->argv[0] == 0)
			return wc_fail_field(c, "cmd", "cmd: argv is empty");
		for (size_t i = 0; o->argv[i] && r == 0; i++)
			r = add_param(q, "cmd", o->argv[i]);
	}
	for (size_t i = 0; i < o->n_env && r == 0; i++) {
		const warren_kv *kv = &o->env[i];
		if (kv->key == NULL || *kv->key == 0 || strchr(kv->key, '=') || kv->value == NULL)
			return wc_fail_field(c, "env", "env: a key is empty, has '=' or no value");
		_cleanup_free_ char *pair = wc_fmt("%s=%s", kv->key, kv->value);
		r = pair ? add_param(q, "env", pair) : -ENOMEM;
	}
	if (o->cwd && r == 0)
		r = add_param(q, "cwd", o->cwd);
	if (o->user_set && r == 0) {
		snprintf(num, sizeof(num), "%lld", (long long)o->user);
		r = add_param(q, "user", num);
	}
	if (o->rows > 65535 || o->cols > 65535)
		return wc_fail_field(c, "rows", "rows, cols: at most 65535");
	if (o->rows && r == 0) {
		snprintf(num, sizeof(num), "%u", o->rows);
		r = add_param(q, "rows", num);
	}
	if (o->cols && r == 0) {
		snprintf(num, sizeof(num), "%u", o->cols);
		r = add_param(q, "cols", num);
	}
	return r < 0 ? wc_fail(c, "internal", ENOMEM, "out of memory") : 0;
}

/* The value of header name in an answer head, trimmed (malloc'd), or NULL. */
static char *head_value(const char *head, const char *name)
{
	size_t nl = strlen(name);
	for (const char *l = strstr(head, "\r\n"); l; l = strstr(l, "\r\n")) {
		l += 2;
		if (strncasecmp(l, name, nl) != 0 || l[nl] != ':')
			continue;
		const char *v = l + nl + 1, *e = strstr(v, "\r\n");
		v += strspn(v, " \t");
		size_t n = e ? (size_t)(e - v) : strlen(v);
		while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
			n--;
		return strndup(v, n);
	}
	return NULL;
}

/* A non-101 answer: its body holds the API error. */
static int refused(struct wc_call *c, int fd, int status, const char *head)
{
	_cleanup_free_ char *cl = head_value(head, "Content-Length");
	_cleanup_free_ char *body = malloc(ERROR_BODY_MAX);
	size_t len = 0;
	if (body == NULL)
		return wc_fail(c, "internal", ENOMEM, "out of memory");
	if (cl) {
		char *end;
		unsigned long long n = strtoull(cl, &end, 10);
		if (*cl == 0 || *end != 0)
			return wc_fail(c, "protocol", EPROTO, "bad Content-Length '%s'", cl);
		read_full(fd, body, n < ERROR_BODY_MAX ? (size_t)n : ERROR_BODY_MAX, &len);
	} else {
		read_full(fd, body, ERROR_BODY_MAX, &len); /* to EOF */
	}
	if (status >= 200 && status < 300)
		return wc_fail(c, "protocol", EPROTO,
			       "the daemon answered HTTP %d instead of switching protocols",
			       status);
	return wc_api_error(c, status, body, len);
}

static int handshake(struct wc_call *c, int fd, const char *target, const char *hosthdr)
{
	warren_client *cl = c->client;
	_cleanup_free_ char *req = wc_fmt("GET %s HTTP/1.1\r\nHost: %s\r\n"
					  "User-Agent: libwarren/" WARREN_VERSION "\r\n"
					  "Connection: Upgrade\r\nUpgrade: " PTY_PROTO "\r\n"
					  "%s%s\r\n",
					  target, hosthdr, cl->auth_header ? cl->auth_header : "",
					  cl->auth_header ? "\r\n" : "");
	if (req == NULL)
		return wc_fail(c, "internal", ENOMEM, "out of memory");
	long ms = cl->request_timeout_ms > 0 ? cl->request_timeout_ms : HANDSHAKE_TIMEOUT_MS;
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	int r = send_all(fd, req, strlen(req));
	if (r < 0)
		return wc_fail(c, "transport", -r, "send the request: %s", strerror(-r));
	/* the head, byte by byte: the frames that follow it are not ours */
	char head[HEAD_MAX + 1];
	size_t n = 0;
	while (n < 4 || memcmp(head + n - 4, "\r\n\r\n", 4) != 0) {
		if (n == HEAD_MAX)
			return wc_fail(c, "protocol", EPROTO, "answer head over %u bytes",
				       HEAD_MAX);
		ssize_t k = read(fd, head + n, 1);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			int e = k == 0 ? ECONNRESET : errno == EAGAIN ? ETIMEDOUT : errno;
			return wc_fail(c, "transport", e, "read the answer: %s",
				       k == 0 ? "connection closed" : strerror(e));
		}
		n++;
	}
	head[n] = 0;
	int status = 0;
	if (sscanf(head, "HTTP/1.%*1[01] %3d", &status) != 1 || status < 100 || status > 599)
		return wc_fail(c, "protocol", EPROTO, "not an HTTP/1.1 answer: %.40s", head);
	c->http_status = status;
	if (status != 101)
		return refused(c, fd, status, head);
	_cleanup_free_ char *up = head_value(head, "Upgrade");
	if (up == NULL || strcasecmp(up, PTY_PROTO) != 0)
		return wc_fail(c, "protocol", EPROTO, "switched to '%s', not " PTY_PROTO,
			       up ? up : "(none)");
	struct timeval none = {0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof(none));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof(none));
	return 0;
}

int warren_sandbox_pty_open(warren_sandbox *sb, const warren_pty_opts *opts, warren_pty **out,
			    warren_error **errp)
{
	struct wc_call c = {.client = sb->client};
	warren_pty_opts dflt = WARREN_PTY_OPTS_INIT;
	struct wc_buf q = {0};
	_cleanup_free_ char *prefix = NULL, *hosthdr = NULL, *target = NULL, *id = NULL;
	_cleanup_close_ int fd = -1;
	int r;
	*out = NULL;
	if (opts == NULL)
		opts = &dflt;
	if (opts->version > WARREN_PTY_OPTS_VERSION) {
		r = wc_fail_field(&c, "version", "version: %u is newer than this library",
				  opts->version);
		goto out;
	}
	if ((r = build_query(&c, opts, &q)) < 0 || (r = fd = dial(&c, &prefix, &hosthdr)) < 0)
		goto out;
	id = wc_esc(sb->id);
	target = id ? wc_fmt("%s/v1/sandboxes/%s/pty%s", prefix, id, q.p ? q.p : "") : NULL;
	if (target == NULL) {
		r = wc_fail(&c, "internal", ENOMEM, "out of memory");
		goto out;
	}
	if ((r = handshake(&c, fd, target, hosthdr)) < 0)
		goto out;
	warren_pty *p = calloc(1, sizeof(*p));
	if (p == NULL) {
		r = wc_fail(&c, "internal", ENOMEM, "out of memory");
		goto out;
	}
	p->fd = steal_fd(&fd);
	*out = p;
	r = 0;
out:
	wc_buf_free(&q);
	return wc_finish(&c, r, errp, "shell in sandbox %s", sb->id);
}

/* ---- frames ------------------------------------------------------------- */

int warren_pty_fd(const warren_pty *pty)
{
	return pty->fd;
}

static int send_frame(warren_pty *pty, int type, const void *data, size_t len, warren_error **errp,
		      const char *what)
{
	struct wc_call c = {0};
	unsigned char hdr[5] = {(unsigned char)type, (unsigned char)(len >> 24),
				(unsigned char)(len >> 16), (unsigned char)(len >> 8),
				(unsigned char)len};
	int r = send_all(pty->fd, hdr, 5);
	if (r == 0 && len)
		r = send_all(pty->fd, data, len);
	if (r < 0)
		wc_fail(&c, "transport", -r, "%s", strerror(-r));
	return wc_finish(&c, r, errp, "shell: send %s", what);
}

int warren_pty_send_data(warren_pty *pty, const void *data, size_t len, warren_error **errp)
{
	const char *p = data;
	do {
		size_t n = len < SEND_FRAME_MAX ? len : SEND_FRAME_MAX;
		int r = send_frame(pty, WARREN_PTY_DATA, p, n, errp, "input");
		if (r < 0)
			return r;
		p += n;
		len -= n;
	} while (len > 0);
	return 0;
}

int warren_pty_resize(warren_pty *pty, unsigned int rows, unsigned int cols, warren_error **errp)
{
	if (rows == 0 || cols == 0 || rows > 65535 || cols > 65535) {
		struct wc_call c = {0};
		int r = wc_fail_field(&c, "rows", "rows, cols: must be 1 to 65535");
		return wc_finish(&c, r, errp, "shell: resize");
	}
	unsigned char p[4] = {(unsigned char)(rows >> 8), (unsigned char)rows,
			      (unsigned char)(cols >> 8), (unsigned char)cols};
	return send_frame(pty, WARREN_PTY_RESIZE, p, 4, errp, "resize");
}

int warren_pty_send_eof(warren_pty *pty, warren_error **errp)
{
	return send_frame(pty, WARREN_PTY_EOF, NULL, 0, errp, "eof");
}

static int exit_frame(struct wc_call *c, const char *buf, size_t len, warren_exec_result **res)
{
	json_error_t jerr;
	_cleanup_json_ json_t *o = json_loadb(buf, len, 0, &jerr);
	if (!json_is_object(o))
		return wc_fail(c, "protocol", EPROTO, "exit frame is not a JSON object: %s",
			       jerr.text);
	const char *reason = json_string_value(json_object_get(o, "reason"));
	if (reason && strcmp(reason, "error") == 0) {
		const char *msg = json_string_value(json_object_get(o, "error"));
		return wc_fail(c, "internal", EIO, "the daemon could not run it: %s",
			       msg ? msg : "unknown error");
	}
	return wc_parse_result(c, o, false, res);
}

int warren_pty_read_frame(warren_pty *pty, const void **data, size_t *len, warren_exec_result **res,
			  warren_error **errp)
{
	struct wc_call c = {0};
	unsigned char hdr[5];
	size_t got = 0;
	*data = NULL;
	*len = 0;
	if (res)
		*res = NULL;
	int r = read_full(pty->fd, hdr, 5, &got);
	if (r < 0) {
		r = wc_fail(&c, "transport", r == -EPIPE ? ECONNRESET : -r, "%s",
			    r == -EPIPE ? "the connection ended without an exit frame"
					: strerror(-r));
		return wc_finish(&c, r, errp, "shell");
	}
	size_t n = (size_t)hdr[1] << 24 | (size_t)hdr[2] << 16 | (size_t)hdr[3] << 8 | hdr[4];
	if (hdr[0] != WARREN_PTY_DATA && hdr[0] != WARREN_PTY_EXIT)
		r = wc_fail(&c, "protocol", EPROTO, "unknown frame type %u", hdr[0]);
	else if (n > READ_FRAME_MAX)
		r = wc_fail(&c, "protocol", EPROTO, "frame of %zu bytes", n);
	else if (n + 1 > pty->cap) {
		char *b = realloc(pty->buf, n + 1);
		if (b == NULL)
			r = wc_fail(&c, "internal", ENOMEM, "out of memory");
		else {
			pty->buf = b;
			pty->cap = n + 1;
		}
	}
	if (r == 0 && (r = read_full(pty->fd, pty->buf, n, NULL)) < 0)
		r = wc_fail(&c, "transport", r == -EPIPE ? ECONNRESET : -r,
			    "the connection ended inside a frame");
	if (r < 0)
		return wc_finish(&c, r, errp, "shell");
	pty->buf[n] = 0;
	if (hdr[0] == WARREN_PTY_DATA) {
		*data = pty->buf;
		*len = n;
		return WARREN_PTY_DATA;
	}
	warren_exec_result *tmp = NULL;
	r = exit_frame(&c, pty->buf, n, &tmp);
	if (r < 0)
		return wc_finish(&c, r, errp, "shell");
	if (res)
		*res = tmp;
	else
		warren_exec_result_free(tmp);
	return WARREN_PTY_EXIT;
}

void warren_pty_close(warren_pty *pty)
{
	if (pty == NULL)
		return;
	if (pty->fd >= 0)
		close(pty->fd);
	free(pty->buf);
	free(pty);
}
