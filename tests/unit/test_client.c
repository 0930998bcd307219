/* libwarren against a fake daemon: a thread in this process serving canned
 * HTTP answers on a Unix socket, recording each request it received. Covers
 * JSON decoding, NDJSON streaming split across chunks, base64, pagination,
 * streamed uploads and the mapping of API and transport errors. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "warren/warren.h"

#define MAX_EXCH 8

struct exchange {
	const char *answer; /* raw HTTP answer */
	char request[8192]; /* request line + headers + decoded body */
	size_t body_len;
	char body[65536];
};

struct fake {
	char dir[64];
	char sock[96];
	int lfd;
	pthread_t thread;
	bool joined;
	size_t n;
	struct exchange ex[MAX_EXCH];
	warren_client *cl;
};

static ssize_t read_some(int fd, char *buf, size_t cap)
{
	ssize_t n;
	do
		n = read(fd, buf, cap);
	while (n < 0 && errno == EINTR);
	return n;
}

/* Read one request: headers, then a Content-Length or chunked body. */
static void read_request(int fd, struct exchange *x)
{
	char buf[1 << 17];
	size_t len = 0;
	char *end = NULL;
	while (end == NULL && len < sizeof(buf) - 1) {
		ssize_t n = read_some(fd, buf + len, sizeof(buf) - 1 - len);
		if (n <= 0)
			return;
		len += (size_t)n;
		buf[len] = 0;
		end = strstr(buf, "\r\n\r\n");
	}
	if (end == NULL)
		return;
	size_t hlen = (size_t)(end + 4 - buf);
	snprintf(x->request, sizeof(x->request), "%.*s", (int)hlen, buf);
	const char *cl = strcasestr(x->request, "\r\nContent-Length:");
	bool chunked = strcasestr(x->request, "Transfer-Encoding: chunked") != NULL;
	size_t want = cl ? strtoul(cl + 17, NULL, 10) : 0;
	for (;;) {
		if (!chunked && len - hlen >= want)
			break;
		if (chunked && memmem(buf + hlen, len - hlen, "0\r\n\r\n", 5) &&
		    (len - hlen == 5 || memmem(buf + hlen, len - hlen, "\r\n0\r\n\r\n", 7)))
			break;
		ssize_t n = read_some(fd, buf + len, sizeof(buf) - 1 - len);
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	if (!chunked) {
		x->body_len = len - hlen < sizeof(x->body) ? len - hlen : sizeof(x->body);
		memcpy(x->body, buf + hlen, x->body_len);
		return;
	}
	const char *p = buf + hlen, *stop = buf + len;
	while (p < stop) {
		char *eol;
		size_t sz = strtoul(p, &eol, 16);
		if (sz == 0 || eol[0] != '\r')
			break;
		p = eol + 2;
		if (p + sz > stop || x->body_len + sz > sizeof(x->body))
			break;
		memcpy(x->body + x->body_len, p, sz);
		x->body_len += sz;
		p += sz + 2;
	}
}

static void *serve(void *arg)
{
	struct fake *f = arg;
	for (size_t i = 0; i < f->n; i++) {
		int fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			return NULL;
		read_request(fd, &f->ex[i]);
		const char *a = f->ex[i].answer;
		/* The body may hold NULs: Content-Length tells its size. */
		const char *hend = strstr(a, "\r\n\r\n");
		const char *cl = strcasestr(a, "\r\nContent-Length:");
		size_t len = strlen(a), off = 0;
		if (hend && cl && cl < hend)
			len = (size_t)(hend + 4 - a) + strtoul(cl + 17, NULL, 10);
		/* In small pieces, so the client sees lines split across reads. */
		while (off < len) {
			size_t n = len - off < 7 ? len - off : 7;
			if (send(fd, a + off, n, MSG_NOSIGNAL) < 0)
				break;
			off += n;
			if (off < len && (off / 7) % 8 == 0)
				usleep(1000);
		}
		close(fd);
	}
	return NULL;
}

/* Start a fake daemon answering the given raw answers in order. */
static struct fake *fake_start(size_t n, ...)
{
	struct fake *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	strcpy(f->dir, "/tmp/wr-client-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->sock, sizeof(f->sock), "%s/sock", f->dir);
	va_list ap;
	va_start(ap, n);
	for (size_t i = 0; i < n; i++)
		f->ex[i].answer = va_arg(ap, const char *);
	va_end(ap);
	f->n = n;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f->sock);
	f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(f->lfd >= 0);
	assert_int_equal(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(f->lfd, 8), 0);
	assert_int_equal(pthread_create(&f->thread, NULL, serve, f), 0);
	warren_client_opts o = WARREN_CLIENT_OPTS_INIT;
	o.socket_path = f->sock;
	o.token = "tok-1";
	warren_error *err = NULL;
	assert_int_equal(warren_client_new(&o, &f->cl, &err), 0);
	assert_null(err);
	return f;
}

/* Wait until every answer went out (the recorded requests are then final). */
static void fake_join(struct fake *f)
{
	if (!f->joined)
		pthread_join(f->thread, NULL);
	f->joined = true;
}

static void fake_stop(struct fake *f)
{
	shutdown(f->lfd, SHUT_RDWR);
	fake_join(f);
	close(f->lfd);
	unlink(f->sock);
	rmdir(f->dir);
	warren_client_free(f->cl);
	free(f);
}

/* An HTTP answer with a JSON body (Content-Length computed). */
static char *answer(const char *status, const char *body)
{
	char *s = NULL;
	assert_true(asprintf(&s,
			     "HTTP/1.1 %s\r\nContent-Type: application/json\r\nConnection: "
			     "close\r\nContent-Length: %zu\r\n\r\n%s",
			     status, strlen(body), body) > 0);
	return s;
}

#define SANDBOX_JSON                                                                               \
	"{\"id\":\"5f0c2d7a9b1e4c3d\",\"tier\":\"container\",\"image\":\"busybox\","               \
	"\"state\":\"running\",\"created_at\":\"2026-12-02T13:50:00.123Z\","                       \
	"\"expires_at\":\"2026-12-02T14:50:00.123Z\",\"cpu\":1.5,\"memory_mb\":512,"               \
	"\"disk_mb\":1024,\"pids\":512,\"user\":0,\"workdir\":\"/root\","                          \
	"\"labels\":{\"job\":\"rl-42\"},\"idle_timeout\":600,\"on_timeout\":\"kill\"}"

static warren_sandbox *connect_sb(struct fake *f)
{
	warren_sandbox *sb = NULL;
	warren_error *err = NULL;
	assert_int_equal(warren_sandbox_connect(f->cl, "5f0c2d7a9b1e4c3d", &sb, &err), 0);
	assert_null(err);
	return sb;
}

/* A client of a daemon that is not there: requests fail in the transport,
 * what the library checks before sending fails first. */
static warren_client *offline_client(void)
{
	warren_client *cl = NULL;
	warren_error *err = NULL;
	warren_client_opts co = WARREN_CLIENT_OPTS_INIT;
	co.socket_path = "/nonexistent/warren.sock";
	assert_int_equal(warren_client_new(&co, &cl, &err), 0);
	return cl;
}

static void test_create_and_info(void **state)
{
	(void)state;
	char *a = answer("201 Created", SANDBOX_JSON);
	struct fake *f = fake_start(1, a);
	warren_sandbox_opts o = WARREN_SANDBOX_OPTS_INIT;
	warren_kv labels[] = {{"job", "rl-42"}};
	o.image = "busybox";
	o.memory_mb = 512;
	o.labels = labels;
	o.n_labels = 1;
	o.user_set = true;
	warren_sandbox *sb = NULL;
	warren_error *err = NULL;
	assert_int_equal(warren_sandbox_create(f->cl, &o, &sb, &err), 0);
	assert_string_equal(warren_sandbox_id(sb), "5f0c2d7a9b1e4c3d");
	const warren_sandbox_info *in = warren_sandbox_last_info(sb);
	assert_string_equal(in->state, "running");
	assert_int_equal(in->memory_mb, 512);
	assert_true(in->cpu > 1.49 && in->cpu < 1.51);
	assert_int_equal(in->n_labels, 1);
	assert_string_equal(in->labels[0].value, "rl-42");
	assert_string_equal(in->expires_at, "2026-12-02T14:50:00.123Z");
	fake_stop(f);
	warren_sandbox_free(sb);
	free(a);
}

static void test_create_request_body(void **state)
{
	(void)state;
	char *a = answer("201 Created", SANDBOX_JSON);
	struct fake *f = fake_start(1, a);
	warren_sandbox_opts o = WARREN_SANDBOX_OPTS_INIT;
	warren_kv env[] = {{"LANG", "C.UTF-8"}};
	o.image = "busybox";
	o.env = env;
	o.n_env = 1;
	o.timeout = 60;
	warren_sandbox *sb = NULL;
	warren_error *err = NULL;
	assert_int_equal(warren_sandbox_create(f->cl, &o, &sb, &err), 0);
	struct exchange *x = &f->ex[0];
	fake_join(f);
	assert_non_null(strstr(x->request, "POST /v1/sandboxes HTTP/1.1\r\n"));
	assert_non_null(strstr(x->request, "Authorization: Bearer tok-1\r\n"));
	assert_non_null(strstr(x->request, "Content-Type: application/json\r\n"));
	assert_non_null(strstr(x->body, "\"image\":\"busybox\""));
	assert_non_null(strstr(x->body, "\"env\":{\"LANG\":\"C.UTF-8\"}"));
	assert_non_null(strstr(x->body, "\"timeout\":60"));
	assert_null(strstr(x->body, "memory_mb")); /* unset: the daemon's default */
	fake_stop(f);
	warren_sandbox_free(sb);
	free(a);
}

static void test_create_needs_image(void **state)
{
	(void)state;
	warren_client *cl = offline_client();
	warren_error *err = NULL;
	warren_sandbox_opts o = WARREN_SANDBOX_OPTS_INIT;
	warren_sandbox *sb = NULL;
	assert_true(warren_sandbox_create(cl, &o, &sb, &err) < 0);
	assert_null(sb);
	assert_string_equal(warren_error_code(err), "invalid_argument");
	assert_string_equal(warren_error_field(err), "image");
	assert_int_equal(warren_error_errno(err), EINVAL);
	assert_int_equal(warren_error_http_status(err), 0);
	warren_error_free(err);
	warren_client_free(cl);
}

static void test_api_error_not_found(void **state)
{
	(void)state;
	char *a = answer("404 Not Found", "{\"error\":{\"code\":\"not_found\",\"message\":"
					  "\"sandbox 5f0c2d7a9b1e4c3d not found\"}}");
	struct fake *f = fake_start(1, a);
	warren_sandbox *sb = NULL;
	warren_error *err = NULL;
	assert_true(warren_sandbox_connect(f->cl, "5f0c2d7a9b1e4c3d", &sb, &err) < 0);
	assert_null(sb);
	assert_non_null(err);
	assert_string_equal(warren_error_code(err), "not_found");
	assert_int_equal(warren_error_http_status(err), 404);
	assert_int_equal(warren_error_errno(err), ENOENT);
	assert_string_equal(warren_error_message(err),
			    "sandbox 5f0c2d7a9b1e4c3d: sandbox 5f0c2d7a9b1e4c3d not found");
	assert_null(warren_error_field(err));
	warren_error_free(err);
	fake_stop(f);
	free(a);
}

static void test_api_error_field(void **state)
{
	(void)state;
	char *a = answer("400 Bad Request",
			 "{\"error\":{\"code\":\"invalid_argument\",\"message\":\"memory_mb: must "
			 "be between 8 and 1048576\",\"field\":\"memory_mb\"}}");
	struct fake *f = fake_start(1, a);
	warren_sandbox_opts o = WARREN_SANDBOX_OPTS_INIT;
	o.image = "busybox";
	o.memory_mb = 1;
	warren_sandbox *sb = NULL;
	warren_error *err = NULL;
	assert_true(warren_sandbox_create(f->cl, &o, &sb, &err) < 0);
	assert_string_equal(warren_error_code(err), "invalid_argument");
	assert_int_equal(warren_error_http_status(err), 400);
	assert_string_equal(warren_error_field(err), "memory_mb");
	assert_string_equal(warren_error_message(err),
			    "create sandbox: memory_mb: must be between 8 and 1048576");
	warren_error_free(err);
	fake_stop(f);
	free(a);
}

static void test_error_without_json(void **state)
{
	(void)state;
	struct fake *f = fake_start(1, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: "
				       "text/plain\r\nConnection: close\r\nContent-Length: "
				       "4\r\n\r\ngone");
	warren_health *h = NULL;
	warren_error *err = NULL;
	assert_true(warren_health_get(f->cl, &h, &err) < 0);
	assert_null(h);
	assert_string_equal(warren_error_code(err), "unavailable");
	assert_int_equal(warren_error_http_status(err), 503);
	assert_int_equal(warren_error_errno(err), ESHUTDOWN);
	warren_error_free(err);
	fake_stop(f);
}

static void test_protocol_error(void **state)
{
	(void)state;
	char *a = answer("200 OK", "{\"state\":\"running\"}");
	struct fake *f = fake_start(1, a);
	warren_sandbox *sb = NULL;
	warren_error *err = NULL;
	assert_true(warren_sandbox_connect(f->cl, "abc", &sb, &err) < 0);
	assert_string_equal(warren_error_code(err), "protocol");
	assert_int_equal(warren_error_errno(err), EPROTO);
	warren_error_free(err);
	fake_stop(f);
	free(a);
}

static void test_transport_error(void **state)
{
	(void)state;
	warren_client *cl = offline_client();
	warren_error *err = NULL;
	warren_health *h = NULL;
	assert_true(warren_health_get(cl, &h, &err) < 0);
	assert_string_equal(warren_error_code(err), "transport");
	assert_int_equal(warren_error_errno(err), ENOENT);
	assert_int_equal(warren_error_http_status(err), 0);
	assert_non_null(strstr(warren_error_message(err), "/nonexistent/warren.sock"));
	warren_error_free(err);
	warren_client_free(cl);
}

static void test_bad_ids_and_urls(void **state)
{
	(void)state;
	warren_client *cl = NULL;
	warren_error *err = NULL;
	warren_client_opts co = WARREN_CLIENT_OPTS_INIT;
	co.url = "ftp://example";
	assert_true(warren_client_new(&co, &cl, &err) < 0);
	assert_string_equal(warren_error_field(err), "url");
	warren_error_free(err);
	err = NULL;
	co.url = NULL;
	co.socket_path = "/nonexistent/warren.sock";
	assert_int_equal(warren_client_new(&co, &cl, &err), 0);
	warren_sandbox *sb = NULL;
	assert_true(warren_sandbox_connect(cl, "../etc", &sb, &err) < 0);
	assert_string_equal(warren_error_code(err), "invalid_argument");
	assert_string_equal(warren_error_field(err), "id");
	warren_error_free(err);
	warren_client_free(cl);
}

static void test_exec_result(void **state)
{
	(void)state;
	char *a0 = answer("200 OK", SANDBOX_JSON);
	char *a1 = answer("200 OK", "{\"exit_code\":3,\"signal\":0,\"reason\":\"exited\","
				    "\"stdout\":\"aGkACg==\",\"stderr\":\"\","
				    "\"stdout_truncated\":false,\"stderr_truncated\":true,"
				    "\"duration_ms\":12.5,\"cpu_ms\":9.1,"
				    "\"memory_peak_bytes\":3145728}");
	struct fake *f = fake_start(2, a0, a1);
	warren_sandbox *sb = connect_sb(f);
	const char *argv[] = {"sh", "-c", "exit 3", NULL};
	warren_exec_opts o = WARREN_EXEC_OPTS_INIT;
	o.argv = argv;
	o.binary = true;
	o.stdin_data = "in";
	o.stdin_len = 2;
	o.timeout = 1.5;
	warren_exec_result *res = NULL;
	warren_error *err = NULL;
	assert_int_equal(warren_sandbox_exec(sb, &o, &res, &err), 0);
	assert_int_equal(res->exit_code, 3);
	assert_string_equal(res->reason, "exited");
	assert_int_equal(res->stdout_len, 4);
	assert_memory_equal(res->stdout_data, "hi\0\n", 4);
	assert_int_equal(res->stderr_len, 0);
	assert_true(res->stderr_truncated);
	assert_int_equal(res->memory_peak_bytes, 3145728);
	fake_join(f);
	assert_non_null(strstr(f->ex[1].request, "POST /v1/sandboxes/5f0c2d7a9b1e4c3d/commands "));
	assert_non_null(strstr(f->ex[1].body, "\"cmd\":[\"sh\",\"-c\",\"exit 3\"]"));
	assert_non_null(strstr(f->ex[1].body, "\"encoding\":\"base64\""));
	assert_non_null(strstr(f->ex[1].body, "\"stdin\":\"in\""));
	assert_non_null(strstr(f->ex[1].body, "\"timeout\":1.5"));
	assert_null(strstr(f->ex[1].body, "\"stream\""));
	warren_exec_result_free(res);
	warren_sandbox_free(sb);
	fake_stop(f);
	free(a0);
	free(a1);
}

/* A chunked NDJSON answer, one HTTP chunk per argument (NULL-terminated). */
static char *chunked(const char *first, ...)
{
	char *s = strdup("HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n"
			 "Connection: close\r\nTransfer-Encoding: chunked\r\n\r\n");
	va_list ap;
	va_start(ap, first);
	for (const char *p = first; p; p = va_arg(ap, const char *)) {
		char *t = NULL;
		assert_true(asprintf(&t, "%s%zx\r\n%s\r\n", s, strlen(p), p) > 0);
		free(s);
		s = t;
	}
	va_end(ap);
	char *t = NULL;
	assert_true(asprintf(&t, "%s0\r\n\r\n", s) > 0);
	free(s);
	return t;
}

struct collect {
	char out[256], err[256];
	size_t nout, nerr, calls;
	int stop_after;
};

static int collect(void *ctx, int stream, const char *data, size_t len)
{
	struct collect *c = ctx;
	c->calls++;
	if (stream == WARREN_STDOUT) {
		memcpy(c->out + c->nout, data, len);
		c->nout += len;
	} else {
		memcpy(c->err + c->nerr, data, len);
		c->nerr += len;
	}
	return c->stop_after && (int)c->calls >= c->stop_after;
}

static void test_exec_stream(void **state)
{
	(void)state;
	char *a0 = answer("200 OK", SANDBOX_JSON);
	/* Chunk boundaries fall inside lines; a blank line is tolerated; a
	 * line type of a later API version is ignored. */
	char *a1 = chunked("{\"type\":\"stdout\"", ",\"data\":\"aGVsbG8K\"}\n\n{\"type\":\"s",
			   "tderr\",\"data\":\"d2Fybg==\"}\n{\"type\":\"later\"}\n",
			   "{\"type\":\"exit\",\"exit_code\":0,\"signal\":0,"
			   "\"reason\":\"exited\",\"duration_ms\":2}\n",
			   NULL);
	struct fake *f = fake_start(2, a0, a1);
	warren_sandbox *sb = connect_sb(f);
	struct collect col = {0};
	warren_exec_opts o = WARREN_EXEC_OPTS_INIT;
	o.shell = "echo hello; echo warn >&2";
	o.binary = true;
	o.on_output = collect;
	o.ctx = &col;
	warren_exec_result *res = NULL;
	warren_error *err = NULL;
	int r = warren_sandbox_exec(sb, &o, &res, &err);
	if (r < 0)
		fail_msg("exec: %s", warren_error_message(err));
	assert_int_equal(col.nout, 6);
	assert_memory_equal(col.out, "hello\n", 6);
	assert_int_equal(col.nerr, 4);
	assert_memory_equal(col.err, "warn", 4);
	assert_int_equal(res->exit_code, 0);
	assert_null(res->stdout_data);
	fake_join(f);
	assert_non_null(strstr(f->ex[1].body, "\"stream\":true"));
	assert_non_null(strstr(f->ex[1].body, "\"cmd\":\"echo hello; echo warn >&2\""));
	warren_exec_result_free(res);
	warren_sandbox_free(sb);
	fake_stop(f);
	free(a0);
	free(a1);
}

static void test_exec_stream_errors(void **state)
{
	(void)state;
	char *a0 = answer("200 OK", SANDBOX_JSON);
	char *no_exit = chunked("{\"type\":\"stdout\",\"data\":\"x\"}\n", NULL);
	char *err_line = chunked("{\"type\":\"error\",\"error\":{\"code\":"
				 "\"internal\",\"message\":\"exec: boom\"}}\n",
				 NULL);
	char *two = chunked("{\"type\":\"stdout\",\"data\":\"a\"}\n"
			    "{\"type\":\"stdout\",\"data\":\"b\"}\n",
			    NULL);
	struct fake *f = fake_start(4, a0, no_exit, err_line, two);
	warren_sandbox *sb = connect_sb(f);
	struct collect col = {0};
	warren_exec_opts o = WARREN_EXEC_OPTS_INIT;
	o.shell = "true";
	o.on_output = collect;
	o.ctx = &col;
	warren_exec_result *res = NULL;
	warren_error *err = NULL;

	assert_true(warren_sandbox_exec(sb, &o, &res, &err) < 0);
	assert_null(res);
	assert_string_equal(warren_error_code(err), "protocol");
	assert_int_equal(col.nout, 1);
	warren_error_free(err);
	err = NULL;

	assert_true(warren_sandbox_exec(sb, &o, &res, &err) < 0);
	assert_string_equal(warren_error_code(err), "internal");
	assert_non_null(strstr(warren_error_message(err), "exec: boom"));
	warren_error_free(err);
	err = NULL;

	col = (struct collect){.stop_after = 1};
	assert_true(warren_sandbox_exec(sb, &o, &res, &err) < 0);
	assert_string_equal(warren_error_code(err), "cancelled");
	assert_int_equal(col.calls, 1);
	warren_error_free(err);

	warren_sandbox_free(sb);
	fake_stop(f);
	free(a0);
	free(no_exit);
	free(err_line);
	free(two);
}

static int count_sandboxes(void *ctx, const warren_sandbox_info *in)
{
	size_t *n = ctx;
	assert_non_null(in->id);
	(*n)++;
	return 0;
}

static void test_list_pages(void **state)
{
	(void)state;
	char *a0 = answer("200 OK", "{\"sandboxes\":[" SANDBOX_JSON "," SANDBOX_JSON
				    "],\"next_page_token\":\"p/2+x\"}");
	char *a1 = answer("200 OK", "{\"sandboxes\":[" SANDBOX_JSON "]}");
	struct fake *f = fake_start(2, a0, a1);
	warren_kv labels[] = {{"job", "rl 42"}};
	warren_list_opts lo = WARREN_LIST_OPTS_INIT;
	lo.state = "running";
	lo.labels = labels;
	lo.n_labels = 1;
	lo.page_size = 2;
	size_t n = 0;
	warren_error *err = NULL;
	assert_int_equal(warren_sandbox_list(f->cl, &lo, count_sandboxes, &n, &err), 0);
	assert_int_equal(n, 3);
	fake_join(f);
	assert_non_null(strstr(f->ex[0].request,
			       "GET /v1/sandboxes?state=running&label=job%3Drl%2042&limit=2 "));
	assert_non_null(strstr(f->ex[1].request, "&page_token=p/2%2Bx "));
	fake_stop(f);
	free(a0);
	free(a1);
}

static void test_files(void **state)
{
	(void)state;
	char *a0 = answer("200 OK", SANDBOX_JSON);
	const char *a1 = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
			 "Connection: close\r\nContent-Length: 5\r\n\r\nab\0cd";
	char *a2 = answer("200 OK", "{\"path\":\"/tmp/x\",\"name\":\"x\",\"type\":\"file\","
				    "\"size\":11,\"mode\":\"0640\",\"uid\":0,\"gid\":0}");
	char *a3 = answer("200 OK", "{\"exists\":false}");
	char *a4 = answer("200 OK", "{\"entries\":[{\"path\":\"/a\",\"name\":\"a\",\"type\":"
				    "\"dir\",\"mode\":\"0755\"},{\"path\":\"/l\",\"type\":"
				    "\"symlink\",\"target\":\"/a\"}]}");
	struct fake *f = fake_start(5, a0, a1, a2, a3, a4);
	warren_sandbox *sb = connect_sb(f);
	warren_error *err = NULL;
	void *data = NULL;
	size_t len = 0;
	assert_int_equal(warren_file_read(sb, "/etc/my file", &data, &len, &err), 0);
	assert_int_equal(len, 5);
	assert_memory_equal(data, "ab\0cd", 5);
	warren_free(data);

	int p[2];
	assert_int_equal(pipe(p), 0);
	assert_int_equal(write(p[1], "hello world", 11), 11);
	close(p[1]);
	warren_write_opts wo = WARREN_WRITE_OPTS_INIT;
	wo.mode = 0640;
	wo.parents = true;
	assert_int_equal(warren_file_write_fd(sb, "/tmp/x", p[0], &wo, &err), 0);
	close(p[0]);

	assert_int_equal(warren_file_exists(sb, "/nope", &err), 0);
	warren_file_list *l = NULL;
	assert_int_equal(warren_file_list_dir(sb, "/", 1, &l, &err), 0);
	assert_int_equal(l->count, 2);
	assert_int_equal(l->entries[0].type, WARREN_FILE_DIR);
	assert_int_equal(l->entries[0].mode, 0755);
	assert_int_equal(l->entries[1].type, WARREN_FILE_SYMLINK);
	assert_string_equal(l->entries[1].name, "l");
	assert_string_equal(l->entries[1].target, "/a");
	warren_file_list_free(l);

	fake_join(f);
	assert_non_null(strstr(f->ex[1].request,
			       "GET /v1/sandboxes/5f0c2d7a9b1e4c3d/files?path=/etc/my%20file "));
	assert_non_null(strstr(f->ex[2].request, "PUT /v1/sandboxes/5f0c2d7a9b1e4c3d/files?"
						 "path=/tmp/x&mode=0640&parents=true "));
	assert_int_equal(f->ex[2].body_len, 11);
	assert_memory_equal(f->ex[2].body, "hello world", 11);
	assert_non_null(strstr(f->ex[3].request, "/files/exists?path=/nope "));
	assert_non_null(strstr(f->ex[4].request, "/files/list?path=/&depth=1 "));
	warren_sandbox_free(sb);
	fake_stop(f);
	free(a0);
	free(a2);
	free(a3);
	free(a4);
}

static void test_command_wait(void **state)
{
	(void)state;
	char *a0 = answer("200 OK", SANDBOX_JSON);
	char *a1 = answer("201 Created", "{\"id\":\"c3\",\"pid\":0,\"state\":\"running\"}");
	char *a2 = answer("200 OK", "{\"id\":\"c3\",\"state\":\"running\",\"exit_code\":null}");
	char *a3 = answer("200 OK", "{\"id\":\"c3\",\"state\":\"finished\",\"exit_code\":7,"
				    "\"signal\":0,\"reason\":\"exited\",\"stdout\":\"out\"}");
	struct fake *f = fake_start(4, a0, a1, a2, a3);
	warren_sandbox *sb = connect_sb(f);
	warren_command *cmd = NULL;
	warren_exec_result *res = NULL;
	warren_error *err = NULL;
	warren_exec_opts o = WARREN_EXEC_OPTS_INIT;
	o.shell = "sleep 1; exit 7";
	assert_int_equal(warren_command_start(sb, &o, &cmd, &err), 0);
	assert_string_equal(warren_command_id(cmd), "c3");
	assert_int_equal(warren_command_wait(cmd, 0.5, &res, &err), 0);
	assert_null(res);
	assert_int_equal(warren_command_wait(cmd, 5, &res, &err), 1);
	assert_int_equal(res->exit_code, 7);
	assert_string_equal(res->stdout_data, "out");
	fake_join(f);
	assert_non_null(strstr(f->ex[1].body, "\"background\":true"));
	assert_non_null(strstr(f->ex[2].request, "/commands/c3/wait?timeout=0.500 "));
	warren_exec_result_free(res);
	warren_command_free(cmd);
	warren_sandbox_free(sb);
	fake_stop(f);
	free(a0);
	free(a1);
	free(a2);
	free(a3);
}

/* Lifecycle: pause and resume requests and the paused fields; leases:
 * create body, every call's route, parsing, and an invalid id refused
 * before any request. */
#define PAUSED_JSON                                                                                \
	"{\"id\":\"5f0c2d7a9b1e4c3d\",\"state\":\"paused\",\"expires_at\":null,"                   \
	"\"pause_reason\":\"idle\",\"timeout_remaining\":12.5,\"on_idle\":\"pause\","              \
	"\"lease\":\"job-42\",\"usage\":{\"cpu_s\":1.5,\"memory_bytes\":4096,"                     \
	"\"memory_peak_bytes\":8192,\"pids\":2}}"
#define LEASE_JSON                                                                                 \
	"{\"id\":\"job-42\",\"state\":\"suspended\",\"suspend_reason\":\"heartbeat\","             \
	"\"grace_s\":1.5,\"expire_s\":60,\"on_expire\":\"pause\",\"sandboxes\":3,"                 \
	"\"suspends_at\":null,\"expires_at\":\"2026-12-02T14:50:00.123Z\"}"

static void test_pause_resume(void **state)
{
	(void)state;
	char *a = answer("200 OK", SANDBOX_JSON), *b = answer("200 OK", PAUSED_JSON),
	     *c = answer("200 OK", SANDBOX_JSON);
	struct fake *f = fake_start(3, a, b, c);
	warren_sandbox *sb = connect_sb(f);
	warren_sandbox_info *in = NULL;
	warren_error *err = NULL;
	assert_int_equal(warren_sandbox_pause(sb, &in, &err), 0);
	assert_string_equal(in->state, "paused");
	assert_string_equal(in->pause_reason, "idle");
	assert_string_equal(in->lease, "job-42");
	assert_null(in->expires_at);
	assert_true(in->timeout_remaining > 12.4 && in->timeout_remaining < 12.6);
	assert_true(in->has_usage && in->usage_memory_peak_bytes == 8192 && in->usage_pids == 2);
	warren_sandbox_info_free(in);
	assert_int_equal(warren_sandbox_resume(sb, 600, NULL, &err), 0);
	fake_join(f);
	assert_non_null(strstr(f->ex[1].request, "POST /v1/sandboxes/5f0c2d7a9b1e4c3d/pause "));
	assert_non_null(strstr(f->ex[2].request, "POST /v1/sandboxes/5f0c2d7a9b1e4c3d/resume "));
	assert_non_null(strstr(f->ex[2].body, "\"timeout\":600"));
	fake_stop(f);
	warren_sandbox_free(sb);
	free(a);
	free(b);
	free(c);
}

static void test_leases(void **state)
{
	(void)state;
	char *a = answer("201 Created", LEASE_JSON), *b = answer("200 OK", LEASE_JSON),
	     *c = answer("200 OK", LEASE_JSON),
	     *d = answer("409 Conflict", "{\"error\":{\"code\":\"conflict\",\"message\":"
					 "\"lease job-42 is released\"}}");
	struct fake *f = fake_start(4, a, b, c, d);
	warren_lease_opts o = WARREN_LEASE_OPTS_INIT;
	o.id = "job-42";
	o.grace_s = 1.5;
	o.on_expire = "pause";
	warren_lease_info *l = NULL;
	warren_error *err = NULL;
	assert_int_equal(warren_lease_create(f->cl, &o, &l, &err), 0);
	assert_string_equal(l->state, "suspended");
	assert_string_equal(l->suspend_reason, "heartbeat");
	assert_int_equal(l->sandboxes, 3);
	assert_null(l->suspends_at);
	assert_true(l->grace_s > 1.49 && l->grace_s < 1.51);
	warren_lease_info_free(l);
	assert_int_equal(warren_lease_heartbeat(f->cl, "job-42", NULL, &err), 0);
	assert_int_equal(warren_lease_release(f->cl, "job-42", true, NULL, &err), 0);
	assert_true(warren_lease_suspend(f->cl, "job-42", NULL, &err) < 0);
	assert_string_equal(warren_error_code(err), "conflict");
	warren_error_free(err);
	err = NULL;
	fake_join(f);
	assert_non_null(strstr(f->ex[0].request, "POST /v1/leases "));
	assert_non_null(strstr(f->ex[0].body, "\"id\":\"job-42\""));
	assert_non_null(strstr(f->ex[0].body, "\"on_expire\":\"pause\""));
	assert_null(strstr(f->ex[0].body, "expire_s")); /* unset: the default */
	assert_non_null(strstr(f->ex[1].request, "POST /v1/leases/job-42/heartbeat "));
	assert_non_null(strstr(f->ex[2].request, "POST /v1/leases/job-42/release "));
	assert_non_null(strstr(f->ex[2].body, "\"sandboxes\":\"keep\""));
	assert_non_null(strstr(f->ex[3].request, "POST /v1/leases/job-42/suspend "));
	/* a bad id never reaches the daemon */
	assert_true(warren_lease_get(f->cl, "a/b", &l, &err) < 0);
	assert_string_equal(warren_error_field(err), "id");
	warren_error_free(err);
	fake_stop(f);
	free(a);
	free(b);
	free(c);
	free(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_create_and_info),
	    cmocka_unit_test(test_create_request_body),
	    cmocka_unit_test(test_create_needs_image),
	    cmocka_unit_test(test_api_error_not_found),
	    cmocka_unit_test(test_api_error_field),
	    cmocka_unit_test(test_error_without_json),
	    cmocka_unit_test(test_protocol_error),
	    cmocka_unit_test(test_transport_error),
	    cmocka_unit_test(test_bad_ids_and_urls),
	    cmocka_unit_test(test_exec_result),
	    cmocka_unit_test(test_exec_stream),
	    cmocka_unit_test(test_exec_stream_errors),
	    cmocka_unit_test(test_list_pages),
	    cmocka_unit_test(test_files),
	    cmocka_unit_test(test_command_wait),
	    cmocka_unit_test(test_pause_resume),
	    cmocka_unit_test(test_leases),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
