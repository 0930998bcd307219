/* The microVM's agent channel: one reader thread per VM demultiplexes the
 * guest's frames to the exec calls waiting for them, and keeps the last
 * 64 KiB of the serial console. exec runs on the caller's thread.
 *
 * Trust: every frame from the guest is checked (type, id of a command in
 * flight, size); a malformed stream marks the VM broken and fails its
 * commands. Output beyond a command's cap is read and discarded, never
 * buffered, so a guest cannot grow the daemon's memory; the host keeps its
 * own deadline for every command (its timeout plus a grace), so a guest
 * that never answers cannot hold a caller. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "common/frame.h"
#include "tiers/microvm.h"
#include "tiers/microvm_internal.h"

static int send_frame(struct wr_vm *vm, uint8_t type, uint32_t id, const void *p, uint32_t len);

#define HOST_GRACE_NS (5ull * 1000000000ull)

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void deadline_ts(uint64_t ns, struct timespec *ts)
{
	/* the condvar uses CLOCK_MONOTONIC (see wr_vm_create) */
	ts->tv_sec = (time_t)(ns / 1000000000ull);
	ts->tv_nsec = (long)(ns % 1000000000ull);
}

/* Called with vm->lock held. */
static void mark_broken(struct wr_vm *vm, const char *msg)
{
	if (!vm->broken) {
		vm->broken = true;
		snprintf(vm->broken_msg, sizeof(vm->broken_msg), "%s", msg);
	}
	pthread_cond_broadcast(&vm->cond);
}

static struct vm_cmd *find(struct wr_vm *vm, uint32_t id)
{
	for (struct vm_cmd *c = vm->cmds; c; c = c->next)
		if (c->id == id)
			return c;
	return NULL;
}

static void deliver(struct vm_cmd *c, int stream, const uint8_t *p, size_t len)
{
	size_t *n = stream == 1 ? &c->out_n : &c->err_n;
	bool *trunc = stream == 1 ? &c->out_trunc : &c->err_trunc;
	size_t room = *n >= c->cap ? 0 : (size_t)(c->cap - *n);
	size_t take = len < room ? len : room;
	if (take < len)
		*trunc = true;
	*n += take;
	if (take == 0)
		return;
	if (c->spec->on_output) {
		if (!c->stop_delivery &&
		    c->spec->on_output(c->spec->ctx, stream, (const char *)p, take) != 0)
			c->stop_delivery = true;
	} else if (wr_buf_append(stream == 1 ? &c->out : &c->err, p, take) < 0) {
		*trunc = true;
	}
}

/* Called with vm->lock held. */
static void on_frame(struct wr_vm *vm, const struct wr_frame *f)
{
	if (f->type == WR_FRAME_HELLO) {
		if (vm->hello == NULL) {
			json_error_t je;
			vm->hello = json_loadb((const char *)f->payload, f->len, 0, &je);
			if (!json_is_object(vm->hello)) {
				json_decref(vm->hello);
				vm->hello = NULL;
				mark_broken(vm, "agent: malformed hello");
			}
			pthread_cond_broadcast(&vm->cond);
		}
		return;
	}
	if (f->type == WR_FRAME_PONG) {
		vm->pong = f->id;
		pthread_cond_broadcast(&vm->cond);
		return;
	}
	if (f->type >= WR_FRAME_FS_DATA && f->type <= WR_FRAME_FS_DONE) {
		wr_vm_fs_frame(vm, f); /* files: microvm_files.c */
		return;
	}
	struct vm_cmd *c = find(vm, f->id);
	if (c == NULL || c->done)
		return; /* a command the host gave up on, or a guest's invention */
	switch (f->type) {
	case WR_FRAME_STDOUT:
	case WR_FRAME_STDERR:
		deliver(c, f->type == WR_FRAME_STDOUT ? 1 : 2, f->payload, f->len);
		break;
	case WR_FRAME_EXIT: {
		json_error_t je;
		json_t *j = json_loadb((const char *)f->payload, f->len, 0, &je);
		if (!json_is_object(j)) {
			json_decref(j);
			snprintf(c->error, sizeof(c->error), "agent: malformed exit");
		} else {
			c->exit = j;
		}
		c->done = true;
		pthread_cond_broadcast(&vm->cond);
		break;
	}
	case WR_FRAME_ERROR: {
		json_error_t je;
		json_t *j = json_loadb((const char *)f->payload, f->len, 0, &je);
		const char *m = json_string_value(json_object_get(j, "message"));
		snprintf(c->error, sizeof(c->error), "agent: %s", m ? m : "error");
		json_decref(j);
		c->done = true;
		pthread_cond_broadcast(&vm->cond);
		break;
	}
	default: mark_broken(vm, "agent: unexpected frame type");
	}
}

static void ring_put(struct wr_vm *vm, const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		vm->ring[vm->ring_pos] = p[i];
		vm->ring_pos = (vm->ring_pos + 1) % VM_CONSOLE_RING;
	}
	vm->ring_len = vm->ring_len + n > VM_CONSOLE_RING ? VM_CONSOLE_RING : vm->ring_len + n;
}

/* In resync: how many bytes of p up to and including the PONG header of
 * vm->sync_id (which ends the resync), or n when it is not among them.
 * Called with vm->lock held. */
static size_t sync_scan(struct wr_vm *vm, const uint8_t *p, size_t n)
{
	uint8_t want[WR_FRAME_HDR] = {0, 0, 0, 0, WR_FRAME_PONG, 0, 0, 0};
	for (int k = 0; k < 4; k++)
		want[8 + k] = (uint8_t)(vm->sync_id >> (8 * k));
	for (size_t i = 0; i < n; i++) {
		if (vm->sync_n == WR_FRAME_HDR) {
			memmove(vm->sync_win, vm->sync_win + 1, WR_FRAME_HDR - 1);
			vm->sync_n--;
		}
		vm->sync_win[vm->sync_n++] = p[i];
		if (vm->sync_n == WR_FRAME_HDR && memcmp(vm->sync_win, want, WR_FRAME_HDR) == 0) {
			vm->sync_id = 0;
			pthread_cond_broadcast(&vm->cond);
			return i + 1;
		}
	}
	return n;
}

static void *reader_main(void *arg)
{
	struct wr_vm *vm = arg;
	struct wr_frame_reader rd;
	wr_frame_reader_init(&rd);
	char buf[65536]; /* the reader's stack: 8 MiB by default */
	bool agent_open = true, console_open = true;
	while (agent_open || console_open) {
		struct pollfd pf[3] = {{.fd = agent_open ? vm->agent : -1, .events = POLLIN},
				       {.fd = console_open ? vm->console : -1, .events = POLLIN},
				       {.fd = vm->stop[0], .events = POLLIN}};
		if (poll(pf, 3, -1) < 0)
			continue;
		if (pf[2].revents)
			break;
		if (pf[1].revents) {
			ssize_t n = read(vm->console, buf, sizeof(buf));
			if (n <= 0 && !(n < 0 && errno == EINTR)) {
				console_open = false;
			} else if (n > 0) {
				pthread_mutex_lock(&vm->lock);
				ring_put(vm, buf, (size_t)n);
				pthread_mutex_unlock(&vm->lock);
			}
		}
		if (pf[0].revents) {
			ssize_t n = read(vm->agent, buf, sizeof(buf));
			if (n < 0 && errno == EINTR)
				continue;
			pthread_mutex_lock(&vm->lock);
			size_t skip = 0;
			if (n <= 0) {
				mark_broken(vm, "the VM is gone (its agent channel closed)");
				agent_open = false;
			} else if ((skip = vm->sync_id ? sync_scan(vm, (uint8_t *)buf, (size_t)n)
						       : 0) == (size_t)n) {
				/* still resyncing: dropped */
			} else if (wr_frame_feed(&rd, buf + skip, (size_t)n - skip) < 0) {
				mark_broken(vm, "agent: frame stream over its bounds");
				agent_open = false;
			} else {
				struct wr_frame f;
				int got;
				while ((got = wr_frame_next(&rd, &f)) == 1)
					on_frame(vm, &f);
				if (got < 0) {
					mark_broken(vm, "agent: malformed frame");
					agent_open = false;
				}
			}
			pthread_mutex_unlock(&vm->lock);
		}
	}
	wr_frame_reader_free(&rd);
	return NULL;
}

int wr_vm_reader_start(struct wr_vm *vm, wr_err *err)
{
	if (pipe2(vm->stop, O_CLOEXEC) < 0)
		return wr_err_sys(err, "pipe");
	int r = pthread_create(&vm->reader, NULL, reader_main, vm);
	if (r != 0) {
		errno = r;
		return wr_err_sys(err, "reader thread");
	}
	vm->reader_started = true;
	return 0;
}

void wr_vm_reader_stop(struct wr_vm *vm)
{
	if (!vm->reader_started)
		return;
	if (write(vm->stop[1], "x", 1) < 0) {
		/* a pipe with room: cannot fail; the join below would tell */
	}
	pthread_join(vm->reader, NULL);
	vm->reader_started = false;
}

int wr_vm_resync(struct wr_vm *vm, uint64_t timeout_ms, wr_err *err)
{
	uint32_t rnd[3] = {0};
	if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
		return wr_err_sys(err, "getrandom");
	pthread_mutex_lock(&vm->lock);
	vm->sync_id = rnd[0] | 1u;
	vm->sync_n = 0;
	/* commands the guest may still run keep ids near where the previous
	 * daemon counted from: start far away (their frames are dropped) */
	vm->next_id = rnd[1] | 0x80000000u;
	vm->next_ping = rnd[2];
	uint32_t id = vm->sync_id;
	pthread_mutex_unlock(&vm->lock);
	if (!vm->reader_started && wr_vm_reader_start(vm, err) < 0)
		return -1;
	int r = send_frame(vm, WR_FRAME_PING, id, NULL, 0);
	if (r < 0) {
		errno = -r;
		return wr_err_sys(err, "microvm: resync");
	}
	if (timeout_ms == 0)
		return 0;
	struct timespec ts;
	deadline_ts(now_ns() + timeout_ms * 1000000ull, &ts);
	pthread_mutex_lock(&vm->lock);
	while (vm->sync_id != 0 && !vm->broken &&
	       pthread_cond_timedwait(&vm->cond, &vm->lock, &ts) != ETIMEDOUT)
		;
	if (vm->sync_id == 0)
		r = 0;
	else if (vm->broken)
		r = wr_err_set(err, EIO, "resync: %s", vm->broken_msg);
	else
		r = wr_err_set(err, ETIMEDOUT, "resync: the guest agent did not answer in %llu ms",
			       (unsigned long long)timeout_ms);
	pthread_mutex_unlock(&vm->lock);
	return r;
}

int wr_vm_wait_hello(struct wr_vm *vm, uint64_t deadline_ns, wr_err *err)
{
	struct timespec ts;
	deadline_ts(deadline_ns, &ts);
	pthread_mutex_lock(&vm->lock);
	while (vm->hello == NULL && !vm->broken &&
	       pthread_cond_timedwait(&vm->cond, &vm->lock, &ts) != ETIMEDOUT)
		;
	int r = 0;
	if (vm->hello == NULL)
		r = wr_err_set(err, vm->broken ? EIO : ETIMEDOUT, "boot: %s",
			       vm->broken ? vm->broken_msg : "no answer from the guest agent");
	else if (!json_is_true(json_object_get(vm->hello, "ok")))
		r = wr_err_set(err, EIO, "boot: guest: %s",
			       json_string_value(json_object_get(vm->hello, "error")) ?: "failed");
	else
		vm->boot_ms = (uint64_t)json_integer_value(json_object_get(vm->hello, "uptime_ms"));
	pthread_mutex_unlock(&vm->lock);
	return r;
}

/* ---- exec ------------------------------------------------------------------ */

static int send_frame(struct wr_vm *vm, uint8_t type, uint32_t id, const void *p, uint32_t len);

int wr_vm_ping(struct wr_vm *vm, uint64_t timeout_ms, wr_err *err)
{
	pthread_mutex_lock(&vm->lock);
	uint32_t id = ++vm->next_ping ? vm->next_ping : ++vm->next_ping;
	bool broken = vm->broken;
	pthread_mutex_unlock(&vm->lock);
	if (broken)
		return wr_err_set(err, EIO, "microvm: %s", vm->broken_msg);
	int r = send_frame(vm, WR_FRAME_PING, id, NULL, 0);
	if (r < 0) {
		errno = -r;
		return wr_err_sys(err, "microvm: ping");
	}
	struct timespec ts;
	deadline_ts(now_ns() + timeout_ms * 1000000ull, &ts);
	pthread_mutex_lock(&vm->lock);
	while (vm->pong != id && !vm->broken &&
	       pthread_cond_timedwait(&vm->cond, &vm->lock, &ts) != ETIMEDOUT)
		;
	if (vm->pong == id)
		r = 0;
	else if (vm->broken)
		r = wr_err_set(err, EIO, "microvm: %s", vm->broken_msg);
	else
		r = wr_err_set(err, ETIMEDOUT,
			       "microvm: the guest did not answer a ping in %llu ms",
			       (unsigned long long)timeout_ms);
	pthread_mutex_unlock(&vm->lock);
	return r;
}

static int send_frame(struct wr_vm *vm, uint8_t type, uint32_t id, const void *p, uint32_t len)
{
	pthread_mutex_lock(&vm->write_lock);
	int r = wr_frame_write(vm->agent, type, id, p, len);
	pthread_mutex_unlock(&vm->write_lock);
	return r;
}

static json_t *exec_request(const struct wr_exec_spec *spec)
{
	json_t *argv = json_array(), *env = json_array();
	for (size_t i = 0; spec->argv[i]; i++)
		json_array_append_new(argv, json_string(spec->argv[i]));
	json_array_append_new(env,
			      json_string("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
					  "/sbin:/bin"));
	json_array_append_new(env, json_string(spec->user > 0 ? "HOME=/" : "HOME=/root"));
	for (size_t i = 0; i < spec->n_env; i++) {
		char *kv = NULL;
		if (asprintf(&kv, "%s=%s", spec->env[i].key, spec->env[i].value) >= 0)
			json_array_append_new(env, json_string(kv));
		free(kv);
	}
	return json_pack("{s:o, s:o, s:s, s:i, s:i, s:I, s:b}", "argv", argv, "env", env, "cwd",
			 spec->cwd ? spec->cwd : "/", "uid", spec->user > 0 ? spec->user : 0, "gid",
			 spec->group > 0 ? spec->group : (spec->user > 0 ? spec->user : 0),
			 "timeout_ms", (json_int_t)spec->timeout_ms, "stdin", spec->stdin_fd >= 0);
}

static enum wr_exit_reason reason_of(const char *s)
{
	if (s == NULL)
		return WR_EXIT_EXITED;
	if (!strcmp(s, "signaled"))
		return WR_EXIT_SIGNALED;
	if (!strcmp(s, "timeout"))
		return WR_EXIT_TIMEOUT;
	if (!strcmp(s, "killed"))
		return WR_EXIT_KILLED;
	if (!strcmp(s, "exec_failed"))
		return WR_EXIT_START_FAILED;
	return WR_EXIT_EXITED;
}

/* stdin_fd → STDIN frames; returns once it reached EOF (then sent) or the
 * command is done. */
static void pump_stdin(struct wr_vm *vm, struct vm_cmd *c, int fd, bool *eof_sent)
{
	char buf[16384];
	struct pollfd p = {.fd = fd, .events = POLLIN};
	if (*eof_sent || poll(&p, 1, 20) <= 0)
		return;
	ssize_t n = read(fd, buf, sizeof(buf));
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (send_frame(vm, WR_FRAME_STDIN, c->id, buf, n > 0 ? (uint32_t)n : 0) < 0 || n <= 0)
		*eof_sent = true;
}

int wr_vm_exec(struct wr_vm *vm, const struct wr_exec_spec *spec, struct wr_exec_result *res,
	       wr_err *err)
{
	memset(res, 0, sizeof(*res));
	if (spec->argv == NULL || spec->argv[0] == NULL)
		return wr_err_field(err, "cmd", "the command is empty");
	if (spec->pty)
		return wr_err_set(err, ENOTSUP, "microvm: no pty yet");
	struct vm_cmd c = {.spec = spec,
			   .cap = spec->output_cap ? spec->output_cap : WR_DEFAULT_OUTPUT_CAP};
	json_t *req = exec_request(spec);
	char *s = req ? json_dumps(req, JSON_COMPACT) : NULL;
	json_decref(req);
	if (s == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	if (strlen(s) > WR_FRAME_MAX) {
		free(s);
		return wr_err_field(err, "cmd", "command and environment over %u bytes",
				    WR_FRAME_MAX);
	}
	pthread_mutex_lock(&vm->lock);
	if (vm->broken) {
		int r = wr_err_set(err, EIO, "microvm: %s", vm->broken_msg);
		pthread_mutex_unlock(&vm->lock);
		free(s);
		return r;
	}
	c.id = ++vm->next_id ? vm->next_id : ++vm->next_id;
	c.next = vm->cmds;
	vm->cmds = &c;
	pthread_mutex_unlock(&vm->lock);

	uint64_t start = now_ns();
	int r = send_frame(vm, WR_FRAME_EXEC, c.id, s, (uint32_t)strlen(s));
	free(s);
	/* the host's own deadline: the guest's timeout plus a grace, then a
	 * KILL and another grace, then the VM is not answering */
	uint64_t deadline =
	    spec->timeout_ms ? start + spec->timeout_ms * 1000000ull + HOST_GRACE_NS : UINT64_MAX;
	bool eof_sent = spec->stdin_fd < 0, killed = false, host_timeout = false, ctl_sent = false;
	pthread_mutex_lock(&vm->lock);
	while (r == 0 && !c.done && !vm->broken) {
		if (!eof_sent) {
			pthread_mutex_unlock(&vm->lock);
			pump_stdin(vm, &c, spec->stdin_fd, &eof_sent);
			pthread_mutex_lock(&vm->lock);
			continue;
		}
		uint64_t now = now_ns();
		bool asked = false;
		if (spec->ctl && !ctl_sent) {
			/* wr_exec_ctl_kill from another thread: only its flag
			 * means something here (no host pid, no leaf) */
			pthread_mutex_lock(&spec->ctl->lock);
			asked = spec->ctl->kill;
			pthread_mutex_unlock(&spec->ctl->lock);
		}
		if (asked) {
			ctl_sent = true;
			pthread_mutex_unlock(&vm->lock);
			send_frame(vm, WR_FRAME_KILL, c.id, NULL, 0);
			pthread_mutex_lock(&vm->lock);
			continue;
		}
		if (now >= deadline) {
			if (!killed) {
				killed = true;
				deadline = now + HOST_GRACE_NS;
				pthread_mutex_unlock(&vm->lock);
				send_frame(vm, WR_FRAME_KILL, c.id, NULL, 0);
				pthread_mutex_lock(&vm->lock);
				continue;
			}
			host_timeout = true;
			break;
		}
		struct timespec ts;
		uint64_t wake = deadline == UINT64_MAX ? now + 3600ull * 1000000000ull : deadline;
		if (spec->ctl && !ctl_sent && wake > now + 100000000ull)
			wake = now + 100000000ull; /* look at the kill flag 10 times a second */
		deadline_ts(wake, &ts);
		pthread_cond_timedwait(&vm->cond, &vm->lock, &ts);
	}
	for (struct vm_cmd **pp = &vm->cmds; *pp; pp = &(*pp)->next)
		if (*pp == &c) {
			*pp = c.next;
			break;
		}
	bool broken = vm->broken && !c.done;
	char msg[256];
	snprintf(msg, sizeof(msg), "%s", vm->broken_msg);
	pthread_mutex_unlock(&vm->lock);

	res->duration_ns = now_ns() - start;
	if (r < 0) {
		errno = -r;
		r = wr_err_sys(err, "microvm: send command");
	} else if (broken) {
		r = wr_err_set(err, EIO, "microvm: %s", msg);
	} else if (c.error[0] && c.exit == NULL) {
		r = wr_err_set(err, EIO, "microvm: %s", c.error);
	} else if (host_timeout) {
		/* observed here: the guest neither finished nor obeyed */
		res->reason = WR_EXIT_TIMEOUT;
		res->exit_code = 128 + 9;
		res->signal = 9;
	} else {
		res->reason = reason_of(json_string_value(json_object_get(c.exit, "reason")));
		res->signal = (int)json_integer_value(json_object_get(c.exit, "signal"));
		res->exit_code =
		    res->signal ? 128 + res->signal
				: (int)json_integer_value(json_object_get(c.exit, "exit_code"));
		if (res->exit_code < 0 || res->exit_code > 255)
			res->exit_code = 255;
	}
	json_decref(c.exit);
	if (r < 0) {
		free(c.out.p);
		free(c.err.p);
		return r;
	}
	res->out_truncated = c.out_trunc;
	res->err_truncated = c.err_trunc;
	if (spec->on_output == NULL) {
		if (wr_buf_append(&c.out, "", 1) < 0 || wr_buf_append(&c.err, "", 1) < 0) {
			free(c.out.p);
			free(c.err.p);
			return wr_err_set(err, ENOMEM, "out of memory");
		}
		res->out = c.out.p;
		res->out_len = c.out.len - 1;
		res->err = c.err.p;
		res->err_len = c.err.len - 1;
	}
	return 0;
}

/* For microvm_pty.c: the same EXEC request and exit reasons. */
json_t *wr_vm_exec_request(const struct wr_exec_spec *spec)
{
	return exec_request(spec);
}

enum wr_exit_reason wr_vm_exit_reason(const char *s)
{
	return reason_of(s);
}
