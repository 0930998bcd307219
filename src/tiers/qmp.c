/* QMP client (see qmp.h). The stream is untrusted only as far as QEMU is:
 * lines are bounded (64 KiB), and a malformed line is an error, not a
 * crash. */
#include "tiers/qmp.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"

#define LINE_MAX_QMP 65536

struct wr_qmp {
	int fd;
	char buf[LINE_MAX_QMP];
	size_t have;
	unsigned events; /* asynchronous events skipped */
	unsigned long id;
};

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One JSON object line. */
static int read_msg(struct wr_qmp *q, int64_t deadline, json_t **out, wr_err *err)
{
	for (;;) {
		char *nl = memchr(q->buf, '\n', q->have);
		if (nl) {
			size_t len = (size_t)(nl - q->buf);
			/* QEMU writes "not available" as UINT64_MAX (balloon
			 * statistics), above what jansson takes as an integer:
			 * -1, padded to the same length */
			static const char umax[] = "18446744073709551615";
			for (char *u = memmem(q->buf, len, umax, sizeof(umax) - 1); u;
			     u = memmem(u, len - (size_t)(u - q->buf), umax, sizeof(umax) - 1))
				memcpy(u, "-1                  ", sizeof(umax) - 1);
			json_error_t je;
			json_t *j = json_loadb(q->buf, len, 0, &je);
			memmove(q->buf, nl + 1, q->have - len - 1);
			q->have -= len + 1;
			if (!json_is_object(j)) {
				json_decref(j);
				return wr_err_set(err, EPROTO, "qmp: malformed message");
			}
			*out = j;
			return 0;
		}
		if (q->have == sizeof(q->buf))
			return wr_err_set(err, EPROTO, "qmp: line over %d bytes", LINE_MAX_QMP);
		int left = (int)(deadline - now_ms());
		if (left <= 0)
			return wr_err_set(err, ETIMEDOUT, "qmp: no answer");
		struct pollfd p = {.fd = q->fd, .events = POLLIN};
		int r = poll(&p, 1, left);
		if (r < 0 && errno != EINTR)
			return wr_err_sys(err, "qmp: poll");
		if (r <= 0)
			continue;
		ssize_t n = read(q->fd, q->buf + q->have, sizeof(q->buf) - q->have);
		if (n == 0)
			return wr_err_set(err, EPIPE, "qmp: QEMU closed the monitor");
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return wr_err_sys(err, "qmp: read");
		}
		q->have += (size_t)n;
	}
}

int wr_qmp_open(int fd, int timeout_ms, struct wr_qmp **out, wr_err *err)
{
	struct wr_qmp *q = calloc(1, sizeof(*q));
	if (q == NULL) {
		close(fd);
		return wr_err_set(err, ENOMEM, "qmp: out of memory");
	}
	q->fd = fd;
	json_t *greet = NULL;
	int r = read_msg(q, now_ms() + timeout_ms, &greet, err);
	if (r == 0 && json_object_get(greet, "QMP") == NULL)
		r = wr_err_set(err, EPROTO, "qmp: no greeting");
	json_decref(greet);
	if (r == 0)
		r = wr_qmp_cmd(q, "qmp_capabilities", NULL, timeout_ms, NULL, err);
	if (r < 0) {
		wr_qmp_close(&q);
		return r;
	}
	*out = q;
	return 0;
}

/* The line, with fd (if >= 0) attached as SCM_RIGHTS to its first byte. */
static int send_line(struct wr_qmp *q, const char *s, size_t len, int fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	memset(&u, 0, sizeof(u));
	struct iovec iov = {.iov_base = (void *)s, .iov_len = len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	if (fd >= 0) {
		mh.msg_control = u.buf;
		mh.msg_controllen = sizeof(u.buf);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	/* MSG_NOSIGNAL: QEMU gone is EPIPE, not SIGPIPE; the rest of a
	 * partly sent line goes without the fd */
	while (iov.iov_len) {
		ssize_t n = sendmsg(q->fd, &mh, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		iov.iov_base = (char *)iov.iov_base + n;
		iov.iov_len -= (size_t)n;
		mh.msg_control = NULL;
		mh.msg_controllen = 0;
	}
	return 0;
}

static int qmp_cmd(struct wr_qmp *q, const char *cmd, json_t *args, int fd, int timeout_ms,
		   json_t **ret, wr_err *err);

int wr_qmp_cmd(struct wr_qmp *q, const char *cmd, json_t *args, int timeout_ms, json_t **ret,
	       wr_err *err)
{
	return qmp_cmd(q, cmd, args, -1, timeout_ms, ret, err);
}

int wr_qmp_cmd_fd(struct wr_qmp *q, const char *cmd, json_t *args, int fd, int timeout_ms,
		  json_t **ret, wr_err *err)
{
	return qmp_cmd(q, cmd, args, fd, timeout_ms, ret, err);
}

int wr_qmp_getfd(struct wr_qmp *q, const char *name, int fd, wr_err *err)
{
	json_t *args = json_pack("{s:s}", "fdname", name);
	int r = args ? qmp_cmd(q, "getfd", args, fd, 10000, NULL, err)
		     : wr_err_set(err, ENOMEM, "qmp getfd: out of memory");
	json_decref(args);
	return r;
}

static int qmp_cmd(struct wr_qmp *q, const char *cmd, json_t *args, int fd, int timeout_ms,
		   json_t **ret, wr_err *err)
{
	unsigned long id = ++q->id;
	json_t *req = json_pack("{s:s, s:I}", "execute", cmd, "id", (json_int_t)id);
	if (req && args)
		json_object_set(req, "arguments", args);
	char *s = req ? json_dumps(req, JSON_COMPACT) : NULL;
	json_decref(req);
	if (s == NULL)
		return wr_err_set(err, ENOMEM, "qmp %s: out of memory", cmd);
	size_t len = strlen(s);
	s[len] = '\n';
	int w = send_line(q, s, len + 1, fd);
	free(s);
	if (w < 0)
		return wr_err_sys(err, "qmp %s: write", cmd);
	int64_t deadline = now_ms() + timeout_ms;
	for (;;) {
		json_t *m = NULL;
		int r = read_msg(q, deadline, &m, err);
		if (r < 0)
			return wr_err_wrap(err, "qmp %s", cmd);
		if (json_object_get(m, "event")) {
			q->events++;
			json_decref(m);
			continue;
		}
		json_t *mid = json_object_get(m, "id");
		if (!json_is_integer(mid) || (unsigned long)json_integer_value(mid) != id) {
			json_decref(m);
			continue; /* an answer to a command we gave up on */
		}
		json_t *e = json_object_get(m, "error");
		if (e) {
			r = wr_err_set(err, EIO, "qmp %s: %s: %s", cmd,
				       json_string_value(json_object_get(e, "class")) ?: "?",
				       json_string_value(json_object_get(e, "desc")) ?: "?");
			json_decref(m);
			return r;
		}
		if (ret)
			*ret = json_incref(json_object_get(m, "return"));
		json_decref(m);
		return 0;
	}
}

int wr_qmp_status(struct wr_qmp *q, char *buf, size_t len, wr_err *err)
{
	json_t *ret = NULL;
	if (wr_qmp_cmd(q, "query-status", NULL, 5000, &ret, err) < 0)
		return -1;
	const char *st = json_string_value(json_object_get(ret, "status"));
	snprintf(buf, len, "%s", st ? st : "unknown");
	json_decref(ret);
	return 0;
}

void wr_qmp_close(struct wr_qmp **q)
{
	if (*q == NULL)
		return;
	close((*q)->fd);
	free(*q);
	*q = NULL;
}
