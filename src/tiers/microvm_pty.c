/* Interactive commands in a microVM: the guest's agent gives the command
 * a terminal of the guest's devpts (EXEC with "pty"), STDIN and STDOUT
 * frames carry the terminal's bytes, RESIZE frames its size.
 *
 * The daemon's relay (src/daemon/pty.c) wants what the container tier
 * gives it: a terminal master to move bytes through and resize with
 * TIOCSWINSZ, and a pollable fd that says when the command ended. So the
 * host side is a terminal of the host's own (raw on both ends: the line
 * discipline that matters is the guest's): the relay gets its master; a
 * pump thread here moves the slave's bytes to STDIN frames, watches the
 * slave's window size (the relay's TIOCSWINSZ lands there) and sends it as
 * RESIZE, and forwards a kill; the reader thread writes the guest's output
 * into the slave. The command's end is an eventfd (wr_exec_ctl.done_fd)
 * the relay polls as it would a pidfd.
 *
 * Ordering invariant: the eventfd is written only after the EXIT frame,
 * and every STDOUT frame before it has been written to the slave (the
 * reader thread handles frames in order), so the relay's drain after the
 * end sees all the output. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "common/frame.h"
#include "tiers/microvm_internal.h"

#define GRACE_NS (5ull * 1000000000ull)
#define OUT_STALL_MS 10000 /* a client that reads nothing: output dropped */

struct pty_run {
	struct wr_vm *vm;
	const struct wr_exec_spec *orig;
	struct wr_exec_spec spec; /* the copy the reader delivers through */
	struct vm_cmd c;
	int slave, efd;
	bool host_timeout;
	int send_err;
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int send_frame(struct wr_vm *vm, uint8_t type, uint32_t id, const void *p, uint32_t len)
{
	pthread_mutex_lock(&vm->write_lock);
	int r = wr_frame_write(vm->agent, type, id, p, len);
	pthread_mutex_unlock(&vm->write_lock);
	return r;
}

/* The reader thread, vm->lock held: the guest's terminal output into the
 * host terminal, waiting (bounded) for a relay that is behind. */
static int to_slave(void *ctx, int stream, const char *buf, size_t len)
{
	(void)stream;
	struct pty_run *p = ctx;
	while (len > 0) {
		ssize_t n = write(p->slave, buf, len);
		if (n > 0) {
			buf += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		struct pollfd pf = {.fd = p->slave, .events = POLLOUT};
		if (n < 0 && errno == EAGAIN && poll(&pf, 1, OUT_STALL_MS) > 0)
			continue;
		break; /* the relay is gone or stalled: the rest is dropped */
	}
	return 0;
}

static bool ctl_killed(const struct wr_exec_spec *spec)
{
	if (spec->ctl == NULL)
		return false;
	pthread_mutex_lock(&spec->ctl->lock);
	bool k = spec->ctl->kill;
	pthread_mutex_unlock(&spec->ctl->lock);
	return k;
}

/* The pump: host terminal → STDIN and RESIZE frames, kills and the host's
 * deadline, until the command is done; then the eventfd. */
static void *pump(void *arg)
{
	struct pty_run *p = arg;
	struct wr_vm *vm = p->vm;
	uint64_t start = now_ns();
	uint64_t deadline =
	    p->orig->timeout_ms ? start + p->orig->timeout_ms * 1000000ull + GRACE_NS : UINT64_MAX;
	struct winsize last = {0};
	ioctl(p->slave, TIOCGWINSZ, &last);
	bool kill_sent = false;
	char buf[16384];
	for (;;) {
		pthread_mutex_lock(&vm->lock);
		bool over = p->c.done || vm->broken;
		pthread_mutex_unlock(&vm->lock);
		if (over)
			break;
		uint64_t now = now_ns();
		if (!kill_sent && (ctl_killed(p->orig) || now >= deadline)) {
			kill_sent = true;
			send_frame(vm, WR_FRAME_KILL, p->c.id, NULL, 0);
			deadline = now + GRACE_NS;
		} else if (kill_sent && now >= deadline) {
			p->host_timeout = true; /* the guest neither finished nor obeyed */
			break;
		}
		struct pollfd pf = {.fd = p->slave, .events = POLLIN};
		if (poll(&pf, 1, 50) > 0) {
			ssize_t n = read(p->slave, buf, sizeof(buf));
			if (n > 0 && send_frame(vm, WR_FRAME_STDIN, p->c.id, buf, (uint32_t)n) < 0)
				p->send_err = -EIO;
		}
		struct winsize ws;
		if (ioctl(p->slave, TIOCGWINSZ, &ws) == 0 &&
		    (ws.ws_row != last.ws_row || ws.ws_col != last.ws_col)) {
			last = ws;
			char j[64];
			int l = snprintf(j, sizeof(j), "{\"rows\":%u,\"cols\":%u}", ws.ws_row,
					 ws.ws_col);
			send_frame(vm, WR_FRAME_RESIZE, p->c.id, j, (uint32_t)l);
		}
	}
	uint64_t one = 1;
	if (write(p->efd, &one, sizeof(one)) < 0) {
		/* an eventfd far from its limit: cannot fail */
	}
	return NULL;
}

static int open_host_pty(unsigned short rows, unsigned short cols, int *master, int *slave)
{
	int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (m < 0 || grantpt(m) < 0 || unlockpt(m) < 0)
		goto fail;
	int s = ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC | O_NONBLOCK);
	if (s < 0)
		goto fail;
	struct termios t;
	if (tcgetattr(s, &t) == 0) {
		cfmakeraw(&t);
		tcsetattr(s, TCSANOW, &t);
	}
	struct winsize ws = {.ws_row = rows ? rows : 24, .ws_col = cols ? cols : 80};
	ioctl(m, TIOCSWINSZ, &ws);
	*master = m;
	*slave = s;
	return 0;
fail:;
	int e = errno;
	if (m >= 0)
		close(m);
	return -e;
}

static void unlink_cmd(struct wr_vm *vm, struct vm_cmd *c)
{
	for (struct vm_cmd **pp = &vm->cmds; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
}

int wr_vm_exec_pty(struct wr_vm *vm, const struct wr_exec_spec *spec, struct wr_exec_result *res,
		   wr_err *err)
{
	memset(res, 0, sizeof(*res));
	if (spec->on_pty == NULL)
		return wr_err_set(err, EINVAL, "microvm: a pty command needs on_pty");
	struct pty_run *p = calloc(1, sizeof(*p));
	if (p == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	p->vm = vm;
	p->orig = spec;
	p->spec = *spec;
	p->spec.on_output = to_slave;
	p->spec.ctx = p;
	p->c = (struct vm_cmd){.spec = &p->spec, .cap = UINT64_MAX};
	int master = -1, r;
	p->slave = p->efd = -1;
	if ((r = open_host_pty(spec->pty_rows, spec->pty_cols, &master, &p->slave)) < 0 ||
	    (p->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
		errno = r < 0 ? -r : errno;
		r = wr_err_sys(err, "microvm: terminal");
		goto out;
	}
	json_t *req = wr_vm_exec_request(spec);
	json_t *pty = json_pack("{s:i, s:i}", "rows", spec->pty_rows ? spec->pty_rows : 24, "cols",
				spec->pty_cols ? spec->pty_cols : 80);
	if (req && pty)
		json_object_set_new(req, "pty", pty);
	else
		json_decref(pty);
	char *s = req ? json_dumps(req, JSON_COMPACT) : NULL;
	json_decref(req);
	if (s == NULL || strlen(s) > WR_FRAME_MAX) {
		free(s);
		r = wr_err_field(err, "cmd", "command and environment over %u bytes", WR_FRAME_MAX);
		goto out;
	}
	pthread_mutex_lock(&vm->lock);
	if (vm->broken) {
		r = wr_err_set(err, EIO, "microvm: %s", vm->broken_msg);
		pthread_mutex_unlock(&vm->lock);
		free(s);
		goto out;
	}
	p->c.id = ++vm->next_id ? vm->next_id : ++vm->next_id;
	p->c.next = vm->cmds;
	vm->cmds = &p->c;
	pthread_mutex_unlock(&vm->lock);
	uint64_t start = now_ns();
	r = send_frame(vm, WR_FRAME_EXEC, p->c.id, s, (uint32_t)strlen(s));
	free(s);
	pthread_t th;
	bool sent = r == 0;
	if (r == 0 && (r = -pthread_create(&th, NULL, pump, p)) != 0)
		send_frame(vm, WR_FRAME_KILL, p->c.id, NULL, 0); /* nobody would relay it */
	if (sent && r == 0) {
		if (spec->ctl) {
			pthread_mutex_lock(&spec->ctl->lock);
			spec->ctl->done_fd = p->efd;
			pthread_mutex_unlock(&spec->ctl->lock);
		}
		/* the relay: returns once the eventfd said the command ended */
		spec->on_pty(spec->ctx, master);
		master = -1;
		pthread_join(th, NULL);
		if (spec->ctl) {
			pthread_mutex_lock(&spec->ctl->lock);
			spec->ctl->done_fd = -1;
			pthread_mutex_unlock(&spec->ctl->lock);
		}
	}
	pthread_mutex_lock(&vm->lock);
	unlink_cmd(vm, &p->c);
	bool broken = vm->broken && !p->c.done;
	char msg[256];
	snprintf(msg, sizeof(msg), "%s", vm->broken_msg);
	pthread_mutex_unlock(&vm->lock);
	res->duration_ns = now_ns() - start;
	if (r < 0) {
		errno = -r;
		r = wr_err_sys(err, "microvm: pty command");
	} else if (broken) {
		r = wr_err_set(err, EIO, "microvm: %s", msg);
	} else if (p->c.error[0] && p->c.exit == NULL) {
		r = wr_err_set(err, EIO, "microvm: %s", p->c.error);
	} else if (p->host_timeout) {
		res->reason = ctl_killed(spec) ? WR_EXIT_KILLED : WR_EXIT_TIMEOUT;
		res->exit_code = 128 + 9;
		res->signal = 9;
	} else {
		json_t *x = p->c.exit;
		res->reason = wr_vm_exit_reason(json_string_value(json_object_get(x, "reason")));
		res->signal = (int)json_integer_value(json_object_get(x, "signal"));
		res->exit_code = res->signal
				     ? 128 + res->signal
				     : (int)json_integer_value(json_object_get(x, "exit_code"));
		if (res->exit_code < 0 || res->exit_code > 255)
			res->exit_code = 255;
	}
out:
	if (master >= 0)
		close(master);
	if (p->slave >= 0)
		close(p->slave);
	if (p->efd >= 0)
		close(p->efd);
	json_decref(p->c.exit);
	free(p->c.out.p);
	free(p->c.err.p);
	free(p);
	return r < 0 ? -1 : 0;
}
