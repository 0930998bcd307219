/* Interactive commands over an upgraded connection.
 *
 * The handler validates the request like any other (query, headers,
 * tenancy), answers 101 and keeps its command thread: it runs the tier's
 * exec with a terminal, and the tier calls relay() with the terminal's
 * master once the command runs. relay() moves bytes between the socket and
 * the master with poll() and two bounded buffers until the command (a pidfd
 * of it) exits, then drains the terminal; exec then returns the result,
 * which is sent as the exit frame.
 *
 * Frames, both ways: type (1 byte), length (4 bytes, big-endian), payload.
 * A client that goes away or sends a frame outside the protocol gets its
 * command's whole tree killed (its leaf cgroup) and the connection closed. */
#include "daemon/pty.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "common/log.h"
#include "common/util.h"
#include "daemon/api.h"
#include "daemon/cmd_internal.h"

#define FRAME_MAX (1u << 20) /* payload bytes a client frame may announce */
#define IO_BUF (64u << 10)   /* each direction */
#define MAX_ARGV 4096
#define MAX_ENV 4096
#define DRAIN_QUIET_MS 200 /* after the exit: no more output for this long */
#define DRAIN_MAX_MS 5000
#define EOF_SETTLE_MS 30
#define SEND_MAX_MS 5000 /* the exit frame to a client that does not read */
#define LINGER_MS 2000	 /* then for the client to close */

enum { FR_DATA = 0, FR_RESIZE = 1, FR_EOF = 2, FR_EXIT = 3 };

struct relay {
	struct wrd_cmd *c;
	int sock, master;
	bool started;	 /* the command ran: relay() was called */
	bool gone;	 /* the client closed or broke the connection */
	bool rd_eof;	 /* the client closed its write side: kill, still answer */
	bool malformed;	 /* ... or sent a frame outside the protocol */
	bool master_eof; /* every holder of the terminal closed it */
	/* client -> terminal: socket bytes, parsed in place */
	unsigned char *in;
	size_t in_off, in_len, in_cap;
	unsigned char hdr[5];
	size_t hdr_len;
	bool in_frame, eof_pending;
	bool eof_wait; /* the eof frame waits for the reader (see eof_ready) */
	uint64_t eof_ready_since;
	uint8_t type;
	uint32_t left; /* payload bytes of the current frame still to come */
	unsigned char arg[4];
	size_t arg_len;
	/* terminal -> client: one data frame at a time */
	unsigned char out[5 + IO_BUF];
	size_t out_off, out_len;
};

static void put_be32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}

static int ms_left(uint64_t deadline)
{
	uint64_t now = wr_now_ns();
	return now >= deadline ? 0 : (int)((deadline - now + 999999) / 1000000);
}

/* ---- client -> terminal ------------------------------------------------- */

static void bad_frame(struct relay *x, const char *why)
{
	wr_info("pty %s/%s: closing: %s", x->c->sb->rec.id, x->c->id, why);
	x->malformed = true;
}

/* Write to the terminal. 1 written (or the terminal is gone: dropped), 0
 * when it would block. */
static int to_master(struct relay *x, const void *buf, size_t len, size_t *done)
{
	ssize_t n = write(x->master, buf, len);
	if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
		*done = 0;
		return 0;
	}
	*done = n < 0 ? len : (size_t)n;
	return 1;
}

static void frame_start(struct relay *x)
{
	x->type = x->hdr[0];
	x->left = (uint32_t)x->hdr[1] << 24 | (uint32_t)x->hdr[2] << 16 | (uint32_t)x->hdr[3] << 8 |
		  x->hdr[4];
	x->hdr_len = 0;
	x->arg_len = 0;
	if (x->type != FR_DATA && x->type != FR_RESIZE && x->type != FR_EOF) {
		bad_frame(x, "unknown frame type");
		return;
	}
	if (x->left > FRAME_MAX) {
		bad_frame(x, "frame longer than 1 MiB");
		return;
	}
	if ((x->type == FR_RESIZE && x->left != 4) || (x->type == FR_EOF && x->left != 0)) {
		bad_frame(x, "resize needs 4 bytes of payload, eof none");
		return;
	}
	if (x->type == FR_EOF)
		x->eof_pending = true;
	x->in_frame = x->left > 0;
}

static void resize(struct relay *x)
{
	struct winsize ws = {.ws_row = (unsigned short)(x->arg[0] << 8 | x->arg[1]),
			     .ws_col = (unsigned short)(x->arg[2] << 8 | x->arg[3])};
	if (ws.ws_row && ws.ws_col)
		ioctl(x->master, TIOCSWINSZ, &ws); /* the terminal sends SIGWINCH */
}

/* Is a process blocked reading its stdio? From the numbers of
 * /proc/<pid>/syscall: "nr arg0 ...". */
static bool pid_reading(pid_t pid)
{
	char path[64], buf[128];
	snprintf(path, sizeof(path), "/proc/%d/syscall", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = 0;
	long nr = strtol(buf, NULL, 10);
	const char *a0 = strchr(buf, ' ');
	unsigned long fd0 = a0 ? strtoul(a0 + 1, NULL, 16) : 99;
	/* read(2)/readv(2) of stdin..stderr only: a poll on the terminal may be
	 * a line editor peeking before it switches to raw mode (busybox asks
	 * the terminal where the cursor is) */
	return (nr == 0 || nr == 19) && fd0 <= 2;
}

/* Some process of the foreground group pg blocked reading? The group's
 * leader and its descendants in the group (a non-interactive `sh -c` runs
 * `cat` in its own group), at most 64 of them. */
static bool fg_reading(pid_t pg)
{
	pid_t pending[64];
	size_t n = 0, i = 0;
	pending[n++] = pg;
	while (i < n) {
		pid_t pid = pending[i++];
		char path[64], buf[4096];
		snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		ssize_t len = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (len <= 0)
			continue;
		buf[len] = 0;
		/* "pid (comm) state ppid pgrp ...": comm may hold spaces */
		const char *rp = strrchr(buf, ')');
		int ppid = 0, pgrp = 0;
		char st;
		if (rp == NULL || sscanf(rp + 1, " %c %d %d", &st, &ppid, &pgrp) != 3)
			continue;
		if (pgrp == pg && pid_reading(pid))
			return true;
		snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		len = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (len <= 0)
			continue;
		buf[len] = 0;
		for (char *p = buf, *e; n < WR_ARRAY_SIZE(pending); p = e) {
			long c = strtol(p, &e, 10);
			if (e == p)
				break;
			pending[n++] = (pid_t)c;
		}
	}
	return false;
}

/* An eof frame types the terminal's EOF character, but only once the
 * command can take it as end of input; typed any earlier it is wrong:
 * ahead of unread input it cuts a line short, and typed while the
 * terminal is canonical ahead of a program that then switches it to raw
 * mode (a shell's line editor between two commands of a script) it
 * arrives as a NUL byte. So wait until everything typed before has been
 * read (the input queue, seen through a peer fd of the terminal, is empty)
 * and then until either the terminal is raw (a line editor waits for a
 * key: ^D on an empty line ends it) or the foreground process is blocked
 * reading (a canonical reader: cat, read), on looks 30 ms apart. A command that never
 * reads keeps the eof pending, as a real terminal would. */
static bool eof_ready_now(struct relay *x)
{
	int peer = ioctl(x->master, TIOCGPTPEER, O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (peer >= 0) {
		int queued = 0;
		int r = ioctl(peer, TIOCINQ, &queued);
		close(peer);
		if (r == 0 && queued > 0)
			return false;
	}
	struct termios t;
	if (tcgetattr(x->master, &t) < 0 || !(t.c_lflag & ICANON))
		return true;
	pid_t pg = tcgetpgrp(x->master);
	return pg <= 0 || fg_reading(pg);
}

/* Ready on looks at least EOF_SETTLE_MS apart, none between them saying
 * otherwise: a program passing through a state (a shell between two
 * commands) is not taken for one waiting in it. */
static bool eof_ready(struct relay *x)
{
	uint64_t now = wr_now_ns();
	if (!eof_ready_now(x)) {
		x->eof_ready_since = 0;
		return false;
	}
	if (x->eof_ready_since == 0)
		x->eof_ready_since = now;
	return now - x->eof_ready_since >= EOF_SETTLE_MS * 1000000ull;
}

/* Act on the buffered client bytes. false when the terminal would block
 * (wait for POLLOUT on it). */
static bool consume(struct relay *x)
{
	for (;;) {
		x->eof_wait = false;
		if (x->eof_pending && !eof_ready(x)) {
			x->eof_wait = true; /* look again shortly */
			return true;
		}
		if (x->eof_pending) {
			/* end of input: the terminal's EOF character (^D) */
			struct termios t;
			char veof = tcgetattr(x->master, &t) == 0 ? (char)t.c_cc[VEOF] : 4;
			size_t done;
			if (!to_master(x, &veof, 1, &done))
				return false;
			x->eof_pending = false;
		}
		if (x->malformed || x->in_off == x->in_len)
			break;
		size_t avail = x->in_len - x->in_off;
		unsigned char *p = x->in + x->in_off;
		if (!x->in_frame) {
			size_t n = 5 - x->hdr_len < avail ? 5 - x->hdr_len : avail;
			memcpy(x->hdr + x->hdr_len, p, n);
			x->hdr_len += n;
			x->in_off += n;
			if (x->hdr_len == 5)
				frame_start(x);
			continue;
		}
		size_t n = x->left < avail ? x->left : avail;
		if (x->type == FR_DATA) {
			if (!to_master(x, p, n, &n))
				return false;
		} else { /* FR_RESIZE */
			memcpy(x->arg + x->arg_len, p, n);
			x->arg_len += n;
			if (x->arg_len == 4)
				resize(x);
		}
		x->in_off += n;
		x->left -= (uint32_t)n;
		x->in_frame = x->left > 0;
	}
	if (x->in_off == x->in_len)
		x->in_off = x->in_len = 0;
	return true;
}

static void sock_read(struct relay *x)
{
	if (x->in_off > 0) {
		memmove(x->in, x->in + x->in_off, x->in_len - x->in_off);
		x->in_len -= x->in_off;
		x->in_off = 0;
	}
	if (x->in_len == x->in_cap)
		return;
	ssize_t n = read(x->sock, x->in + x->in_len, x->in_cap - x->in_len);
	if (n > 0)
		x->in_len += (size_t)n;
	else if (n == 0)
		x->rd_eof = true;
	else if (errno != EAGAIN && errno != EINTR)
		x->gone = true;
}

/* ---- terminal -> client ------------------------------------------------- */

static void master_read(struct relay *x)
{
	ssize_t n = read(x->master, x->out + 5, IO_BUF);
	if (n > 0) {
		x->out[0] = FR_DATA;
		put_be32(x->out + 1, (uint32_t)n);
		x->out_off = 0;
		x->out_len = 5 + (size_t)n;
	} else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
		x->master_eof = true; /* EIO: no process holds the terminal */
	}
}

static void sock_write(struct relay *x)
{
	ssize_t n = send(x->sock, x->out + x->out_off, x->out_len - x->out_off, MSG_NOSIGNAL);
	if (n > 0) {
		x->out_off += (size_t)n;
		if (x->out_off == x->out_len)
			x->out_off = x->out_len = 0;
	} else if (n < 0 && errno != EAGAIN && errno != EINTR) {
		x->gone = true;
	}
}

/* Blocking send of buf (the socket is nonblocking) until the deadline. */
static int send_all(struct relay *x, const void *buf, size_t len, uint64_t deadline)
{
	const char *p = buf;
	while (len > 0 && !x->gone) {
		ssize_t n = send(x->sock, p, len, MSG_NOSIGNAL);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			break;
		struct pollfd pf = {.fd = x->sock, .events = POLLOUT};
		int t = ms_left(deadline);
		if (t == 0 || (poll(&pf, 1, t) < 0 && errno != EINTR))
			break;
	}
	if (len > 0)
		x->gone = true;
	return x->gone ? -1 : 0;
}

/* After the command exited: what it wrote is in the terminal, possibly
 * still on its way (the kernel pushes terminal output asynchronously), so
 * read until EOF (EIO: nobody holds the terminal) or a quiet moment. */
static void drain(struct relay *x)
{
	uint64_t deadline = wr_now_ns() + DRAIN_MAX_MS * 1000000ull;
	while (!x->gone) {
		if (x->out_len) {
			send_all(x, x->out + x->out_off, x->out_len - x->out_off, deadline);
			x->out_off = x->out_len = 0;
			continue;
		}
		int t = ms_left(deadline);
		if (x->master_eof || t == 0)
			break;
		struct pollfd pf = {.fd = x->master, .events = POLLIN};
		int n = poll(&pf, 1, t < DRAIN_QUIET_MS ? t : DRAIN_QUIET_MS);
		if (n == 0)
			break;
		if (n > 0)
			master_read(x);
	}
}

/* ---- the relay -------------------------------------------------------- */

static void kill_tree(struct relay *x, int pidfd)
{
	struct wrd_cmd *c = x->c;
	pthread_mutex_lock(&c->lock);
	c->kill_requested = true; /* its reason becomes "killed" */
	int r = wrd_cmd_kill_tree(c);
	pthread_mutex_unlock(&c->lock);
	if (r < 0 && pidfd >= 0)
		wr_pidfd_send_signal(pidfd, SIGKILL, NULL, 0);
}

static int cmd_pidfd(struct wrd_cmd *c)
{
	pthread_mutex_lock(&c->lock);
	int fd = wrd_cmd_pidfd(c);
	pthread_mutex_unlock(&c->lock);
	return fd;
}

/* The tier's on_pty: runs on the exec thread while the command runs. */
static void relay(void *ctx, int master)
{
	struct relay *x = ctx;
	x->started = true;
	x->master = master;
	fcntl(master, F_SETFL, fcntl(master, F_GETFL) | O_NONBLOCK);
	int pidfd = cmd_pidfd(x->c);
	bool exited = pidfd == -ESRCH, killed = false;
	while (!exited) {
		bool blocked = !x->gone && !x->malformed && !x->rd_eof && !consume(x);
		bool live = !x->gone && !x->malformed;
		if ((!live || x->rd_eof) && !killed) {
			kill_tree(x, pidfd);
			killed = true;
		}
		struct pollfd pf[3];
		int np = 0, ip = -1, is = -1, im = -1;
		if (pidfd >= 0) {
			ip = np;
			pf[np++] = (struct pollfd){.fd = pidfd, .events = POLLIN};
		}
		if (live) {
			short ev = x->in_len < x->in_cap && !x->rd_eof ? POLLIN : 0;
			if (x->out_len)
				ev |= POLLOUT;
			is = np;
			pf[np++] = (struct pollfd){.fd = x->sock, .events = ev};
			short mev = !x->master_eof && x->out_len == 0 ? POLLIN : 0;
			if (blocked)
				mev |= POLLOUT;
			if (mev) {
				im = np;
				pf[np++] = (struct pollfd){.fd = master, .events = mev};
			}
		}
		/* without a pidfd (EMFILE), look again every 100 ms; once killed,
		 * kill again each second until it is gone */
		int timeout = pidfd < 0 ? 100 : killed ? 1000 : -1;
		if (x->eof_wait && live && (timeout < 0 || timeout > 20))
			timeout = 20;
		int n = poll(pf, (nfds_t)np, timeout);
		if (n < 0 && errno != EINTR) {
			x->gone = true;
			continue;
		}
		if (n == 0 && killed)
			killed = false;
		if (pidfd < 0) {
			pidfd = cmd_pidfd(x->c);
			exited = pidfd == -ESRCH;
		}
		if (ip >= 0 && pf[ip].revents)
			exited = true;
		if (is >= 0) {
			if ((pf[is].revents & POLLIN) && !x->rd_eof)
				sock_read(x);
			else if (pf[is].revents & (POLLERR | POLLHUP))
				x->gone = true;
			if (!x->gone && (pf[is].revents & POLLOUT))
				sock_write(x);
		}
		if (im >= 0 && (pf[im].revents & (POLLIN | POLLHUP | POLLERR)) && x->out_len == 0) {
			master_read(x);
			if (x->out_len)
				sock_write(x);
		}
	}
	if (!x->gone && !x->malformed)
		drain(x);
	if (pidfd >= 0)
		close(pidfd);
	close(master);
}

/* ---- the request ---------------------------------------------------------- */

/* A comma-separated header value holds tok (case-insensitive). */
static bool has_token(const char *h, const char *tok)
{
	size_t tl = strlen(tok);
	while (h && *h) {
		h += strspn(h, " \t,");
		size_t n = strcspn(h, ",");
		size_t m = n;
		while (m > 0 && (h[m - 1] == ' ' || h[m - 1] == '\t'))
			m--;
		if (m == tl && strncasecmp(h, tok, tl) == 0)
			return true;
		h += n;
	}
	return false;
}

static int parse_u16(struct wrd_req *r, const char *key, uint64_t min, uint64_t max, uint64_t *out)
{
	const char *v = wrd_query(r, key);
	if (v == NULL)
		return 0;
	if (wr_parse_u64(v, max, out) < 0 || *out < min) {
		wrd_reply_error(r, "invalid_argument", key,
				"%s: must be an integer from %llu to %llu", key,
				(unsigned long long)min, (unsigned long long)max);
		return -1;
	}
	return 0;
}

static int parse_argv(struct wrd_req *r, struct wrd_cmd *c)
{
	size_t n = 0;
	_cleanup_free_ const char **v = wrd_query_all(r, "cmd", &n);
	if (n > MAX_ARGV || (n > 0 && *v[0] == 0)) {
		wrd_reply_error(r, "invalid_argument", "cmd",
				"cmd: at most %d arguments, the first not empty", MAX_ARGV);
		return -1;
	}
	static const char *const dflt[] = {"/bin/sh"};
	const char *const *src = n ? v : dflt;
	size_t cnt = n ? n : 1;
	c->argv = calloc(cnt + 1, sizeof(char *));
	c->cmd = json_array();
	if (c->argv == NULL || c->cmd == NULL)
		goto oom;
	for (size_t i = 0; i < cnt; i++)
		if ((c->argv[i] = strdup(src[i])) == NULL ||
		    json_array_append_new(c->cmd, json_string(src[i])) < 0)
			goto oom;
	return 0;
oom:
	wrd_reply_error(r, "internal", NULL, "out of memory");
	return -1;
}

static int parse_env(struct wrd_req *r, struct wrd_cmd *c)
{
	size_t n = 0;
	_cleanup_free_ const char **v = wrd_query_all(r, "env", &n);
	if (n > MAX_ENV) {
		wrd_reply_error(r, "invalid_argument", "env", "env: at most %d", MAX_ENV);
		return -1;
	}
	if (n == 0)
		return 0;
	if ((c->env = calloc(n, sizeof(*c->env))) == NULL)
		goto oom;
	for (size_t i = 0; i < n; i++) {
		const char *eq = strchr(v[i], '=');
		if (eq == NULL || eq == v[i]) {
			wrd_reply_error(r, "invalid_argument", "env",
					"env: '%s' is not of the form KEY=VALUE", v[i]);
			return -1;
		}
		c->env[i].key = strndup(v[i], (size_t)(eq - v[i]));
		c->env[i].value = strdup(eq + 1);
		c->n_env++;
		if (c->env[i].key == NULL || c->env[i].value == NULL)
			goto oom;
	}
	return 0;
oom:
	wrd_reply_error(r, "internal", NULL, "out of memory");
	return -1;
}

static int parse(struct wrd_req *r, struct wrd_cmd *c)
{
	static const char *const allowed[] = {"cmd", "rows", "cols", "user", "cwd", "env", NULL};
	uint64_t rows = 24, cols = 80, user = 0;
	if (wrd_query_check(r, allowed) < 0 || parse_u16(r, "rows", 1, 65535, &rows) < 0 ||
	    parse_u16(r, "cols", 1, 65535, &cols) < 0 || parse_u16(r, "user", 0, 65535, &user) < 0)
		return -1;
	c->rows = (unsigned short)rows;
	c->cols = (unsigned short)cols;
	c->user = wrd_query(r, "user") ? (int)user : -1;
	if (wrd_query(r, "cwd")) {
		const char *cwd = wrd_query_path(r, "cwd");
		if (cwd == NULL)
			return -1;
		if ((c->cwd = strdup(cwd)) == NULL) {
			wrd_reply_error(r, "internal", NULL, "out of memory");
			return -1;
		}
	}
	if (parse_argv(r, c) < 0 || parse_env(r, c) < 0)
		return -1;
	const char *up = wrd_header(r, "Upgrade");
	if (up == NULL || !has_token(up, WRD_PTY_PROTO)) {
		wrd_reply_error(r, "upgrade_required", "Upgrade",
				"this route needs the headers Upgrade: " WRD_PTY_PROTO
				" and Connection: Upgrade");
		wrd_reply_header(r, "Upgrade", WRD_PTY_PROTO);
		return -1;
	}
	const char *conn = wrd_header(r, "Connection");
	if (conn == NULL || !has_token(conn, "upgrade")) {
		wrd_reply_error(r, "invalid_argument", "Connection",
				"Connection: must include Upgrade");
		return -1;
	}
	return 0;
}

static void send_frame(struct relay *x, int type, const void *buf, size_t len)
{
	unsigned char hdr[5] = {(unsigned char)type};
	put_be32(hdr + 1, (uint32_t)len);
	uint64_t deadline = wr_now_ns() + SEND_MAX_MS * 1000000ull;
	if (send_all(x, hdr, 5, deadline) == 0)
		send_all(x, buf, len, deadline);
}

/* The end of the session: output the tier gave instead of running the
 * command (a start failure's message), then the exit frame. */
static void finish(struct relay *x)
{
	struct wrd_cmd *c = x->c;
	pthread_mutex_lock(&c->lock);
	if (!x->started && c->data_len)
		send_frame(x, FR_DATA, c->data, c->data_len);
	json_t *o = json_object();
	json_object_set_new(o, "id", json_string(c->id));
	if (c->error) {
		json_object_set_new(o, "exit_code", json_null());
		json_object_set_new(o, "reason", json_string("error"));
		json_object_set_new(o, "error", json_string(c->error));
	} else {
		wrd_result_fields(o, &c->res);
	}
	pthread_mutex_unlock(&c->lock);
	char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9));
	json_decref(o);
	if (s)
		send_frame(x, FR_EXIT, s, strlen(s));
	free(s);
	/* Closing with input unread (a late eof frame) would reset the
	 * connection, and a reset can discard the exit frame before the client
	 * reads it: end our side, then read until the client closes. */
	if (x->gone || shutdown(x->sock, SHUT_WR) < 0 || x->rd_eof)
		return;
	uint64_t deadline = wr_now_ns() + LINGER_MS * 1000000ull;
	char buf[4096];
	for (int t; (t = ms_left(deadline)) > 0;) {
		struct pollfd pf = {.fd = x->sock, .events = POLLIN};
		if (poll(&pf, 1, t) == 0)
			break;
		ssize_t n = read(x->sock, buf, sizeof(buf));
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			break;
	}
}

void wrd_api_pty(struct wrd_req *r)
{
	struct wrd_cmd *c = wrd_cmd_new();
	struct relay *x = calloc(1, sizeof(*x));
	struct wrd_sbx *sb = NULL;
	struct wrd_upgrade *up = NULL;
	if (c == NULL || x == NULL) {
		wrd_reply_error(r, "internal", NULL, "out of memory");
		goto out;
	}
	if (parse(r, c) < 0 || (sb = wrd_api_sandbox(r, true)) == NULL)
		goto out;
	c->sb = sb;
	if (sb->ops->no_pty) {
		wrd_reply_error(r, "not_implemented", NULL, "%s", sb->ops->no_pty);
		goto out;
	}
	size_t extra_len;
	const char *extra;
	if (wrd_reply_upgrade(r, WRD_PTY_PROTO, &up) < 0)
		goto out; /* the client left before the switch */
	extra = wrd_upgrade_extra(up, &extra_len);
	x->c = c;
	x->sock = wrd_upgrade_fd(up);
	x->master = -1;
	x->in_cap = extra_len > IO_BUF ? extra_len : IO_BUF;
	if ((x->in = malloc(x->in_cap)) == NULL)
		goto out;
	if (extra_len)
		memcpy(x->in, extra, extra_len);
	x->in_len = extra_len;
	fcntl(x->sock, F_SETFL, fcntl(x->sock, F_GETFL) | O_NONBLOCK);

	c->pty = true;
	c->on_pty = relay;
	c->pty_ctx = x;
	wrd_cmd_register(sb, c);
	json_t *d = json_object();
	json_object_set_new(d, "id", json_string(c->id));
	json_object_set(d, "cmd", c->cmd);
	json_object_set_new(d, "background", json_false());
	json_object_set_new(d, "pty", json_true());
	wrd_sbx_event(sb, "command_started", d);
	wrd_cmd_execute(c, NULL);
	if (!x->gone && !x->malformed)
		finish(x);
out:
	wrd_upgrade_close(up);
	if (sb)
		wrd_api_done(sb, true);
	wrd_cmd_put(c);
	if (x)
		free(x->in);
	free(x);
}
