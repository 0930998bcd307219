/* The function tier: one call (host side).
 *
 *   validate (errors name the field) -> payload (argv, env, files, code)
 *   -> take a slot (forked ahead, already in its leaf) -> leaf limits if the
 *   call's differ -> stdin memfd, stdout/stderr pipes -> CALL to the slot
 *   -> top up the spares (overlaps the call) -> pump output (capped per
 *   stream, past the cap the pipe is closed) until the slot exited and the
 *   zygote reaped it -> at the deadline or past the CPU time: cgroup.kill
 *   of the leaf (every process of the call, double-forked ones too) ->
 *   exit status from the kernel through the slot's pidfd (PIDFD_INFO_EXIT),
 *   OOM, CPU time and peak memory from the leaf -> leaf to the refill thread
 *   (recycled for a later slot of the pool, or removed).
 * Nothing the sandbox says is taken for a result: the zygote's REAPED only
 * tells us when to ask the kernel.
 */
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "common/util.h"
#include "tiers/function_internal.h"
#include "tiers/function_proto.h"

#define MAX_TIMEOUT_MS (3600ull * 1000)
#define MAX_PAYLOAD (64ull << 20)

/* ---- phase accounting (bench instrumentation) ---------------------------- */

static pthread_once_t phases_once = PTHREAD_ONCE_INIT;
static bool phases_enabled;
static uint64_t phase_ns[WR_FN_NPHASES], phase_calls, phase_unprepared;

static void phases_init(void)
{
	const char *v = getenv("WARREN_FN_PHASES");
	phases_enabled = v != NULL && *v != 0 && strcmp(v, "0") != 0;
}

bool wr_fn_phases_on(void)
{
	pthread_once(&phases_once, phases_init);
	return phases_enabled;
}

void wr_fn_phase_add(enum wr_fn_phase ph, uint64_t ns)
{
	__atomic_add_fetch(&phase_ns[ph], ns, __ATOMIC_RELAXED);
}

void wr_fn_phase_count(bool unprepared)
{
	__atomic_add_fetch(&phase_calls, 1, __ATOMIC_RELAXED);
	if (unprepared)
		__atomic_add_fetch(&phase_unprepared, 1, __ATOMIC_RELAXED);
}

void wr_function_phases(struct wr_fn_phases *out)
{
	out->calls = __atomic_load_n(&phase_calls, __ATOMIC_RELAXED);
	out->unprepared = __atomic_load_n(&phase_unprepared, __ATOMIC_RELAXED);
	for (int i = 0; i < WR_FN_NPHASES; i++)
		out->ns[i] = __atomic_load_n(&phase_ns[i], __ATOMIC_RELAXED);
}

const char *wr_function_phase_name(enum wr_fn_phase ph)
{
	static const char *const names[WR_FN_NPHASES] = {"take",       "prepared", "send",  "run",
							 "drain",      "status",   "stats", "done",
							 "refill_cpu", "pool_cpu"};
	return (unsigned)ph < WR_FN_NPHASES ? names[ph] : "?";
}

/* One phase of the call ends now (when measured). */
#define PHASE(ph)                                                                                  \
	do {                                                                                       \
		if (phases) {                                                                      \
			uint64_t n_ = wr_now_ns();                                                 \
			wr_fn_phase_add(ph, n_ - ph_t);                                            \
			ph_t = n_;                                                                 \
		}                                                                                  \
	} while (0)

void wr_call_result_free(struct wr_call_result *r)
{
	free(r->out);
	free(r->err);
	r->out = r->err = NULL;
}

static int bad_path(const char *s)
{
	if (s == NULL || *s == 0 || *s == '/' || strlen(s) >= 1024)
		return 1;
	for (const char *c = s; *c;) {
		const char *e = strchr(c, '/');
		size_t n = e ? (size_t)(e - c) : strlen(c);
		if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return 1;
		c += n + (e ? 1 : 0);
		if (e && *c == 0)
			return 1;
	}
	return 0;
}

/* Defaults and checks; errors name the API field. */
static int normalize(const struct wr_function_pool *p, const struct wr_call_spec *in,
		     struct wr_call_spec *s, wr_err *err)
{
	*s = *in;
	bool python = p->language != NULL;
	if (python) {
		if (s->code == NULL && (s->argv == NULL || s->argv[0] == NULL))
			return wr_err_field(err, "code",
					    "a python call needs code (or argv naming a file)");
		if (s->code && s->code_len == 0)
			s->code_len = strlen(s->code);
	} else {
		if (s->code)
			return wr_err_field(err, "code",
					    "this pool runs argv calls: code needs a language");
		if (s->argv == NULL || s->argv[0] == NULL || *s->argv[0] == 0)
			return wr_err_field(err, "argv", "a command is required");
	}
	if (s->timeout_ms == 0)
		s->timeout_ms = 10000;
	if (s->timeout_ms > MAX_TIMEOUT_MS)
		return wr_err_field(err, "timeout", "must be at most 1 h");
	if (s->memory_bytes == 0)
		s->memory_bytes = 256ull << 20;
	if (s->memory_bytes < (4ull << 20))
		return wr_err_field(err, "memory", "must be at least 4 MiB");
	if (s->memory_bytes > p->memory_bytes)
		return wr_err_field(err, "memory", "must be at most the pool's %llu bytes",
				    (unsigned long long)p->memory_bytes);
	if (s->cpu_time_ms == 0)
		s->cpu_time_ms = s->timeout_ms;
	if (s->cpu_time_ms > MAX_TIMEOUT_MS)
		return wr_err_field(err, "cpu_time", "must be at most 1 h");
	if (s->pids == 0)
		s->pids = 64;
	if (s->pids < 2 || s->pids > p->pids)
		return wr_err_field(err, "pids", "must be between 2 and the pool's %llu",
				    (unsigned long long)p->pids);
	if (s->fsize == 0)
		s->fsize = 64ull << 20;
	if (s->nofile == 0)
		s->nofile = 256;
	if (s->nofile < 16 || s->nofile > 65536)
		return wr_err_field(err, "nofile", "must be between 16 and 65536");
	if (s->output_cap == 0)
		s->output_cap = 1ull << 20;
	if (s->output_cap > (64ull << 20))
		return wr_err_field(err, "output_cap", "must be at most 64 MiB");
	for (size_t i = 0; i < s->n_env; i++) {
		const char *k = s->env[i].key;
		if (k == NULL || *k == 0 || strchr(k, '=') || s->env[i].value == NULL)
			return wr_err_field(err, "env", "names must be non-empty without '='");
	}
	for (size_t i = 0; i < s->n_files; i++) {
		if (bad_path(s->files[i].path))
			return wr_err_field(
			    err, "files",
			    "%s: a relative path beneath the working dir, without '.' or '..'",
			    s->files[i].path ? s->files[i].path : "(null)");
		if (s->files[i].len && s->files[i].data == NULL)
			return wr_err_field(err, "files", "%s: no data", s->files[i].path);
	}
	return 0;
}

static int build_payload(const struct wr_call_spec *s, struct wr_buf *b, uint32_t *argc,
			 uint32_t *envc)
{
	static const char *const pyargv[] = {"-c", NULL};
	const char *const *argv = s->argv && s->argv[0] ? s->argv : pyargv;
	*argc = 0;
	for (; argv[*argc]; (*argc)++)
		if (wr_buf_append(b, argv[*argc], strlen(argv[*argc]) + 1) < 0)
			return -ENOMEM;
	/* PATH and HOME unless the call sets them. */
	bool have_path = false, have_home = false;
	for (size_t i = 0; i < s->n_env; i++) {
		have_path |= strcmp(s->env[i].key, "PATH") == 0;
		have_home |= strcmp(s->env[i].key, "HOME") == 0;
	}
	*envc = 0;
	if (!have_path) {
		static const char path[] = "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
		if (wr_buf_append(b, path, sizeof(path)) < 0)
			return -ENOMEM;
		(*envc)++;
	}
	if (!have_home) {
		static const char home[] = "HOME=" WR_FNP_WORKDIR;
		if (wr_buf_append(b, home, sizeof(home)) < 0)
			return -ENOMEM;
		(*envc)++;
	}
	for (size_t i = 0; i < s->n_env; i++) {
		if (wr_buf_append(b, s->env[i].key, strlen(s->env[i].key)) < 0 ||
		    wr_buf_append(b, "=", 1) < 0 ||
		    wr_buf_append(b, s->env[i].value, strlen(s->env[i].value) + 1) < 0)
			return -ENOMEM;
		(*envc)++;
	}
	for (size_t i = 0; i < s->n_files; i++) {
		struct wr_fnp_file_rec rec = {.mode = s->files[i].mode ? s->files[i].mode : 0644,
					      .name_len = (uint32_t)strlen(s->files[i].path),
					      .data_len = s->files[i].len};
		if (wr_buf_append(b, &rec, sizeof(rec)) < 0 ||
		    wr_buf_append(b, s->files[i].path, rec.name_len) < 0 ||
		    (rec.data_len && wr_buf_append(b, s->files[i].data, s->files[i].len) < 0))
			return -ENOMEM;
	}
	if (s->code && s->code_len && wr_buf_append(b, s->code, s->code_len) < 0)
		return -ENOMEM;
	return 0;
}

static int memfd_with(const char *name, const void *data, size_t len, wr_err *err)
{
	_cleanup_close_ int fd = memfd_create(name, MFD_CLOEXEC);
	if (fd < 0)
		return wr_err_sys(err, "memfd");
	if (len && wr_write_all(fd, data, len) < 0)
		return wr_err_sys(err, "memfd write");
	if (lseek(fd, 0, SEEK_SET) < 0)
		return wr_err_sys(err, "memfd seek");
	return steal_fd(&fd);
}

struct stream {
	int fd;
	uint64_t cap;
	bool truncated;
	struct wr_buf b;
};

static int pump(struct stream *s)
{
	char tmp[65536];
	for (;;) {
		ssize_t n = read(s->fd, tmp, sizeof(tmp));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == EAGAIN ? 0 : -errno;
		if (n == 0) {
			close(s->fd);
			s->fd = -1;
			return 0;
		}
		size_t keep = (size_t)n;
		if (s->b.len + keep > s->cap) {
			keep = (size_t)(s->cap - s->b.len);
			s->truncated = true;
		}
		if (keep && wr_buf_append(&s->b, tmp, keep) < 0)
			return -ENOMEM;
		if (s->truncated) {
			/* As with `| head -c`: the writer gets EPIPE/SIGPIPE. */
			close(s->fd);
			s->fd = -1;
			return 0;
		}
	}
}

static int pipe_nb(int p[2], wr_err *err)
{
	if (pipe2(p, O_CLOEXEC) < 0)
		return wr_err_sys(err, "pipe");
	if (fcntl(p[0], F_SETFL, O_NONBLOCK) < 0)
		return wr_err_sys(err, "pipe nonblock");
	return 0;
}

int wr_function_call(struct wr_function_pool *p, const struct wr_call_spec *in,
		     struct wr_call_result *res, wr_err *err)
{
	memset(res, 0, sizeof(*res));
	struct wr_call_spec s;
	if (normalize(p, in, &s, err) < 0)
		return -1;
	struct wr_buf payload = {0};
	uint32_t argc, envc;
	if (build_payload(&s, &payload, &argc, &envc) < 0) {
		free(payload.p);
		return wr_err_set(err, ENOMEM, "call: out of memory");
	}
	if (payload.len > MAX_PAYLOAD) {
		free(payload.p);
		return wr_err_field(err, "files",
				    "argv, env, files and code exceed 64 MiB together");
	}
	uint64_t t0 = wr_now_ns();
	bool phases = wr_fn_phases_on(), unprepared = false;
	uint64_t ph_t = t0;
	struct fn_slot *slot = NULL;
	int r = -1;
	_cleanup_close_ int in_fd = -1, out_w = -1, err_w = -1, pay_fd = -1;
	struct stream so = {.fd = -1, .cap = s.output_cap}, se = {.fd = -1, .cap = s.output_cap};
	bool started = false;
	if ((r = wr_fn_take_slot(p, &slot, err)) < 0) {
		free(payload.p);
		return r;
	}
	unsigned gen = slot->gen;
	PHASE(WR_FN_PH_TAKE);
	unprepared = !slot->prepared;
	/* The call's weight before any wait for the slot's preparation: what
	 * is left of it is on the call's path now, and at the preparation's
	 * weight it would wait behind every runnable task of the host. */
	struct wr_cgroup_limits lim;
	wr_cgroup_limits_default(&lim);
	if (slot->low) {
		lim.cpu_weight = WR_FN_WEIGHT_CALL;
		wr_cgroup_set_limits(slot->leaf, &lim, NULL); /* set at make: it works */
		lim.cpu_weight = WR_CG_UNSET;
	}
	/* Usually prepared already; the call cannot start earlier anyway. */
	if (wr_fn_slot_await_prepared(slot, t0 + s.timeout_ms * 1000000ull) < 0) {
		r = wr_err_set(err, EIO, "call slot: the process to run the call is gone");
		goto out;
	}
	PHASE(WR_FN_PH_PREPARED);
	if (s.memory_bytes != slot->mem || s.pids != slot->pids) {
		if (s.memory_bytes != slot->mem)
			lim.memory_bytes = s.memory_bytes;
		if (s.pids != slot->pids)
			lim.pids = s.pids;
		/* The leaf's record: a recycled leaf whose limits differ from
		 * the defaults is reset to them (function_slots.c). */
		slot->mem = s.memory_bytes;
		slot->pids = s.pids;
		if ((r = wr_cgroup_set_limits(slot->leaf, &lim, err)) < 0)
			goto out;
	}
	if (s.stdin_len) {
		in_fd = memfd_with("warren-stdin", s.stdin_data, s.stdin_len, err);
		if (in_fd < 0) {
			r = -1;
			goto out;
		}
	}
	int pp[2];
	if ((r = pipe_nb(pp, err)) < 0)
		goto out;
	so.fd = pp[0];
	out_w = pp[1];
	if ((r = pipe_nb(pp, err)) < 0)
		goto out;
	se.fd = pp[0];
	err_w = pp[1];

	struct wr_fnp_call c = {.h = {WR_FNP_MAGIC, WR_FNP_CALL},
				.cpu_secs = (s.cpu_time_ms + 999) / 1000,
				.fsize = s.fsize,
				.nofile = s.nofile,
				.payload_len = payload.len,
				.code_len = s.code ? s.code_len : 0,
				.argc = argc,
				.envc = envc,
				.nfiles = (uint32_t)s.n_files};
	int fds[4] = {in_fd >= 0 ? in_fd : p->devnull, out_w, err_w, -1};
	int nfds = 3;
	struct wr_buf msg = {0};
	if (payload.len > WR_FNP_INLINE_MAX) {
		c.flags |= WR_FNP_PAYLOAD_FD;
		pay_fd = memfd_with("warren-call", payload.p, payload.len, err);
		if (pay_fd < 0) {
			r = -1;
			goto out;
		}
		fds[nfds++] = pay_fd;
	}
	if (wr_buf_append(&msg, &c, sizeof(c)) < 0 ||
	    (!(c.flags & WR_FNP_PAYLOAD_FD) && payload.len &&
	     wr_buf_append(&msg, payload.p, payload.len) < 0)) {
		free(msg.p);
		r = wr_err_set(err, ENOMEM, "call: out of memory");
		goto out;
	}
	if (s.ctl) {
		pthread_mutex_lock(&s.ctl->lock);
		bool killed = s.ctl->kill;
		if (!killed)
			s.ctl->leaf = slot->leaf;
		pthread_mutex_unlock(&s.ctl->lock);
		if (killed) {
			/* Killed before it started: it never runs. */
			free(msg.p);
			res->reason = WR_EXIT_KILLED;
			res->exit_code = 128 + SIGKILL;
			res->signal = SIGKILL;
			r = 0;
			goto out;
		}
	}
	r = wr_fn_send(slot->sock, msg.p, msg.len, fds, nfds);
	free(msg.p);
	if (r < 0) {
		errno = -r;
		r = wr_err_sys(err, "send the call to its slot");
		goto out;
	}
	started = true;
	PHASE(WR_FN_PH_SEND);
	close(steal_fd(&out_w));
	close(steal_fd(&err_w));
	close(steal_fd(&in_fd));
	close(steal_fd(&pay_fd));
	free(steal_ptr(&payload.p));
	/* The refill thread forks the next spare (not this thread: the exit
	 * of a short call must not wait for cgroup work). On a Python pool
	 * with another slot ready or coming, not before this call's end
	 * (wr_fn_slot_retire wakes it then): the zygote's fork of the
	 * interpreter, its copy-on-write and the new slot's set-up would take
	 * the CPUs this call and its host thread wait for, on a machine of few
	 * cores, for a slot no call needs yet. A pool without a spare refills
	 * at once (calls back to back are bound by the refill). */
	if (p->language == NULL || !slot->spare_left)
		wr_fn_top_up(p);

	uint64_t deadline = t0 + s.timeout_ms * 1000000ull;
	uint64_t cpu_limit_ns = s.cpu_time_ms * 1000000ull;
	bool exited = false, timed_out = false, cpu_out = false, sock_open = true;
	struct wr_cerr serr = {0};
	int zstatus = -1;
	uint64_t next_cpu_check = t0 + 100000000ull, drain_until = 0;
	/* Until the slot exited and its output is drained. The slot is PID 1 of
	 * its pid namespace: when it exits every process of the call is gone,
	 * so the pipes reach EOF right after (bounded anyway: 200 ms). */
	while (!exited || ((so.fd >= 0 || se.fd >= 0) && wr_now_ns() < drain_until)) {
		struct pollfd pf[4];
		pf[0] = (struct pollfd){.fd = exited ? -1 : slot->pidfd, .events = POLLIN};
		pf[1] = (struct pollfd){.fd = sock_open ? slot->sock : -1, .events = POLLIN};
		pf[2] = (struct pollfd){.fd = so.fd, .events = POLLIN};
		pf[3] = (struct pollfd){.fd = se.fd, .events = POLLIN};
		uint64_t now = wr_now_ns();
		if (!exited && !timed_out && !cpu_out && now >= deadline) {
			timed_out = true;
			wr_cgroup_kill(slot->leaf, NULL);
			wr_pidfd_send_signal(slot->pidfd, SIGKILL, NULL, 0);
		}
		if (!exited && !timed_out && !cpu_out && now >= next_cpu_check) {
			uint64_t cpu_ns;
			if (wr_cgroup_cpu_ns(slot->leaf, &cpu_ns, NULL) == 0 &&
			    cpu_ns > cpu_limit_ns) {
				cpu_out = true;
				wr_cgroup_kill(slot->leaf, NULL);
				wr_pidfd_send_signal(slot->pidfd, SIGKILL, NULL, 0);
			}
			next_cpu_check = now + 100000000ull;
		}
		uint64_t until = exited			     ? drain_until
				 : timed_out || cpu_out	     ? now + 5000000000ull
				 : deadline < next_cpu_check ? deadline
							     : next_cpu_check;
		int wait_ms = until > now ? (int)((until - now + 999999) / 1000000) : 0;
		int pr = poll(pf, 4, wait_ms);
		if (pr < 0 && errno != EINTR) {
			r = wr_err_sys(err, "poll");
			goto out;
		}
		if ((so.fd >= 0 && pump(&so) < 0) || (se.fd >= 0 && pump(&se) < 0)) {
			r = wr_err_set(err, ENOMEM, "capture output: out of memory");
			goto out;
		}
		if (pf[1].revents) {
			struct wr_fnp_error m;
			ssize_t n =
			    wr_fn_recv(slot->sock, &m, sizeof(m), NULL, NULL, 0, MSG_DONTWAIT);
			if (n == 0 || (n < 0 && n != -EAGAIN)) {
				sock_open = false;
			} else if (n > 0 && m.h.type == WR_FNP_ERROR &&
				   n > (ssize_t)offsetof(struct wr_fnp_error, msg)) {
				serr.errnum = m.errnum;
				m.msg[sizeof(m.msg) - 1] = 0;
				snprintf(serr.msg, sizeof(serr.msg), "%s", m.msg);
			} else if (n > 0 && m.h.type == WR_FNP_REAPED &&
				   n >= (ssize_t)sizeof(struct wr_fnp_reaped)) {
				zstatus = ((struct wr_fnp_reaped *)&m)->status;
				sock_open = false;
			}
		}
		if (!exited && (pf[0].revents & POLLIN)) {
			exited = true;
			drain_until = wr_now_ns() + 200000000ull;
			PHASE(WR_FN_PH_RUN);
		}
	}
	bool killed = false;
	if (s.ctl) {
		pthread_mutex_lock(&s.ctl->lock);
		s.ctl->leaf = NULL;
		killed = s.ctl->kill;
		pthread_mutex_unlock(&s.ctl->lock);
	}
	/* What the call wrote before it exited is in the pipes. */
	if (so.fd >= 0)
		pump(&so);
	if (se.fd >= 0)
		pump(&se);
	res->duration_ns = wr_now_ns() - t0;
	PHASE(WR_FN_PH_DRAIN);
	/* A set-up failure message the slot sent just before exiting. */
	for (int i = 0; sock_open && i < 4; i++) {
		struct wr_fnp_error m;
		ssize_t n = wr_fn_recv(slot->sock, &m, sizeof(m), NULL, NULL, 0, MSG_DONTWAIT);
		if (n <= 0)
			break;
		if (m.h.type == WR_FNP_ERROR && n > (ssize_t)offsetof(struct wr_fnp_error, msg)) {
			serr.errnum = m.errnum;
			m.msg[sizeof(m.msg) - 1] = 0;
			snprintf(serr.msg, sizeof(serr.msg), "%s", m.msg);
		}
	}
	/* from the kernel, without waiting for the zygote to reap the slot */
	int status = wr_pidfd_exit_status(slot->pidfd);
	if (status < 0 && zstatus < 0 && sock_open) {
		/* An old kernel: the zygote's word is all there is. */
		struct pollfd x = {.fd = slot->sock, .events = POLLIN};
		struct wr_fnp_reaped m;
		if (poll(&x, 1, 2000) > 0 &&
		    wr_fn_recv(slot->sock, &m, sizeof(m), NULL, NULL, 0, MSG_DONTWAIT) >=
			(ssize_t)sizeof(m) &&
		    m.h.type == WR_FNP_REAPED)
			zstatus = m.status;
	}
	if (status < 0)
		status = zstatus;
	/* A SIGKILL nobody here explains: did the zygote die (taking the pool's
	 * pid namespace, and this call, with it)? */
	bool unexplained = status < 0 || (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL &&
					  !timed_out && !cpu_out && !killed);
	if (unexplained && wr_fn_zygote_died(p, gen)) {
		r = wr_err_set(err, ECHILD, "the function zygote died during the call");
		goto out;
	}
	if (status < 0) {
		r = wr_err_set(err, EIO, "no exit status for the call");
		goto out;
	}
	PHASE(WR_FN_PH_STATUS);
	/* Usage from the leaf; its OOM count only matters for a call that
	 * failed (a SIGKILL, or a non-zero exit after the OOM killer took
	 * one of its processes): a successful call reads two files. */
	struct wr_cgroup_stats cst = {0};
	bool failed = WIFSIGNALED(status) ? WTERMSIG(status) == SIGKILL : WEXITSTATUS(status) != 0;
	wr_cgroup_stats_call(slot->leaf, failed, &cst, NULL);
	res->cpu_ns = cst.cpu_usage_ns;
	res->memory_peak = cst.memory_peak;
	PHASE(WR_FN_PH_STATS);
	if (WIFEXITED(status)) {
		res->reason = WR_EXIT_EXITED;
		res->exit_code = WEXITSTATUS(status);
		/* as in exec.c: a process of the call taken by the OOM killer,
		 * then the call failed */
		if (res->exit_code != 0 && cst.oom_kills > 0)
			res->reason = WR_EXIT_OOM;
	} else {
		res->signal = WTERMSIG(status);
		res->exit_code = 128 + res->signal;
		res->reason = WR_EXIT_SIGNALED;
		if (res->signal == SIGKILL && cst.oom_kills > 0)
			res->reason = WR_EXIT_OOM;
		/* RLIMIT_CPU: SIGXCPU at the soft limit, SIGKILL at the hard one
		 * (soft = hard here). The call is PID 1 of its pid namespace, so
		 * nothing inside it can SIGKILL it: a SIGKILL that is neither the
		 * OOM killer's nor our deadline's is the CPU limit's. The rlimit
		 * counts in ticks, the cgroup exactly: compare with slack. */
		if ((res->signal == SIGXCPU || res->signal == SIGKILL) &&
		    cst.cpu_usage_ns * 2 >= c.cpu_secs * 1000000000ull &&
		    res->reason != WR_EXIT_OOM)
			res->reason = WR_EXIT_CPU_TIME;
	}
	if (serr.msg[0] && WIFEXITED(status) && (res->exit_code == 126 || res->exit_code == 127)) {
		res->reason = WR_EXIT_START_FAILED;
		wr_buf_append(&se.b, serr.msg, strlen(serr.msg));
		wr_buf_append(&se.b, "\n", 1);
	}
	if (timed_out)
		res->reason = WR_EXIT_TIMEOUT;
	else if (cpu_out)
		res->reason = WR_EXIT_CPU_TIME;
	else if (killed && WIFSIGNALED(status))
		res->reason = WR_EXIT_KILLED;
	r = 0;
out:
	/* A kill from now on must not reach the leaf: the slot is freed or
	 * retired below (a failure after the handle was published left it). */
	if (s.ctl) {
		pthread_mutex_lock(&s.ctl->lock);
		if (s.ctl->leaf == slot->leaf)
			s.ctl->leaf = NULL;
		pthread_mutex_unlock(&s.ctl->lock);
	}
	if (!started)
		free(payload.p);
	if (so.fd >= 0)
		close(so.fd);
	if (se.fd >= 0)
		close(se.fd);
	if (r == 0) {
		res->out = so.b.p ? so.b.p : strdup("");
		res->err = se.b.p ? se.b.p : strdup("");
		res->out_len = so.b.len;
		res->err_len = se.b.len;
		res->out_truncated = so.truncated;
		res->err_truncated = se.truncated;
		if (res->out == NULL || res->err == NULL) {
			wr_call_result_free(res);
			r = wr_err_set(err, ENOMEM, "call: out of memory");
		}
	} else {
		free(so.b.p);
		free(se.b.p);
	}
	/* The slot is used up. Its pid namespace died with it, so its leaf is
	 * empty: recycled for a later slot or removed by the refill thread
	 * (wr_fn_slots_recycle), unless this call failed (removed now). */
	if (r == 0 && started)
		wr_fn_slot_retire(p, slot);
	else
		wr_fn_slot_free(slot, true);
	wr_fn_call_done(p);
	if (phases && r == 0) {
		PHASE(WR_FN_PH_DONE);
		wr_fn_phase_count(unprepared);
	}
	if (r < 0)
		wr_err_wrap(err, "call");
	return r;
}

/* ---- batch ---------------------------------------------------------------- */

struct batch {
	struct wr_function_pool *pool;
	const struct wr_call_spec *specs;
	struct wr_call_result *res;
	wr_err *errs;
	size_t n, next;
	int failed;
	pthread_mutex_t lock;
};

static void *batch_worker(void *arg)
{
	struct batch *b = arg;
	for (;;) {
		pthread_mutex_lock(&b->lock);
		size_t i = b->next++;
		pthread_mutex_unlock(&b->lock);
		if (i >= b->n)
			return NULL;
		wr_err e = NULL;
		if (wr_function_call(b->pool, &b->specs[i], &b->res[i], &e) < 0) {
			pthread_mutex_lock(&b->lock);
			b->failed++;
			pthread_mutex_unlock(&b->lock);
			if (b->errs)
				b->errs[i] = e;
			else
				wr_err_free(&e);
		}
	}
}

int wr_function_call_batch(struct wr_function_pool *pool, const struct wr_call_spec *specs,
			   size_t n, unsigned parallel, struct wr_call_result *res, wr_err *errs)
{
	struct batch b = {.pool = pool, .specs = specs, .res = res, .errs = errs, .n = n};
	pthread_mutex_init(&b.lock, NULL);
	size_t nt = parallel && parallel < n ? parallel : n;
	if (nt > 64)
		nt = 64;
	pthread_t th[64];
	size_t started = 0;
	for (size_t i = 1; i < nt; i++) {
		if (pthread_create(&th[started], NULL, batch_worker, &b) != 0)
			break;
		started++;
	}
	batch_worker(&b);
	for (size_t i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	pthread_mutex_destroy(&b.lock);
	return b.failed;
}
