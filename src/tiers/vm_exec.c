/* Streaming commands on the vm tier, over the standard guest agent only.
 *
 * qemu-ga 7.2 (Debian 12) returns a guest-exec'd command's captured output
 * only once it exited (guest-exec-status has no out-data before), so the
 * output goes to files of the guest instead and is read as it grows:
 *
 *   mkdir /run/warren-exec (0700, root's) → create <id>.out and <id>.err
 *   (guest-file-open "w") → open both for reading → guest-exec of
 *     setsid sh -c 'exec >>"$1" 2>>"$2"; shift 2; exec "$@"' sh OUT ERR
 *       [setpriv --reuid --regid --clear-groups --] sh -c 'cd "$1" ...' CMD...
 *   → poll: guest-file-read of both (a read at EOF is followed by a
 *     guest-file-seek of 0 from "cur", which clears stdio's sticky EOF so
 *     the next read sees what came since) and guest-exec-status, 20 ms
 *     apart at first, backing off to 250 ms while nothing comes
 *   → exited: read both to their end → close, remove the files.
 *
 * Only fixed script text reaches a shell; the command, cwd and file names
 * are positional arguments. setsid makes the command a session and
 * process-group leader (it execs in place: qemu-ga's child is no group
 * leader, so the pid guest-exec returns is the group's id): a timeout or a
 * kill is kill -KILL -- -PGID in the guest, the whole group at once (a
 * process that makes a session of its own escapes it, as it would a shell's
 * job control; the guest has no cgroup of ours). Output beyond the cap is
 * left unread in the guest's file (tmpfs: the guest's memory) and the file
 * removed at the end. Everything read back is the guest's word. */
#include "tiers/vm_exec.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "tiers/qga.h"
#include "tiers/vm.h"

#define STDIN_MAX (16u << 20)
#define READ_CHUNK 65536
#define QGA_MS 60000
#define DIR_RUN "/run/warren-exec"
#define GRACE_MS 10000 /* after a kill, for the guest to report the exit */

struct stream {
	const char *path;
	json_int_t h;
	bool open, eof_seen, done;
	uint64_t n;
	bool trunc;
	struct wr_buf buf; /* buffered mode */
};

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
}

static int qcmd(struct wr_fullvm *vm, const char *cmd, json_t *args, json_t **ret, wr_err *err)
{
	int r = wr_fullvm_qga_cmd(vm, cmd, args, QGA_MS, ret, err);
	json_decref(args);
	return r;
}

/* A short helper run to its end (mkdir, rm, kill): fixed argv. */
static int tool(struct wr_fullvm *vm, const char *const *argv, wr_err *err)
{
	static const char *const env[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL};
	struct wr_qga_exec x = {.argv = argv, .env = env, .timeout_ms = 60000, .output_cap = 4096};
	struct wr_qga_result r = {0};
	int rc = wr_fullvm_qga_run(vm, &x, &r, err);
	if (rc == 0 && (!r.exited || r.exit_code != 0))
		rc =
		    wr_err_set(err, EIO, "vm exec: %s failed: %.200s", argv[0], r.err ? r.err : "");
	wr_qga_result_free(&r);
	return rc;
}

static int open_h(struct wr_fullvm *vm, const char *path, const char *mode, json_int_t *h,
		  wr_err *err)
{
	json_t *ret = NULL;
	if (qcmd(vm, "guest-file-open", json_pack("{s:s, s:s}", "path", path, "mode", mode), &ret,
		 err) < 0)
		return -1;
	int r = json_is_integer(ret) ? 0 : wr_err_set(err, EPROTO, "guest-file-open: no handle");
	*h = json_integer_value(ret);
	json_decref(ret);
	return r;
}

static void close_h(struct wr_fullvm *vm, json_int_t h)
{
	wr_err e = NULL;
	if (qcmd(vm, "guest-file-close", json_pack("{s:I}", "handle", h), NULL, &e) < 0)
		wr_err_free(&e);
}

/* Reads what the stream's file holds now: 1 when bytes came, 0 at its
 * (current) end, -1 on error. Delivers within the cap. */
static int pull(struct wr_fullvm *vm, const struct wr_exec_spec *spec, int which, struct stream *s,
		uint64_t cap, bool *stop_delivery, wr_err *err)
{
	if (!s->open || s->done)
		return 0;
	if (s->eof_seen) {
		/* stdio's EOF is sticky: a seek clears it */
		json_t *ret = NULL;
		if (qcmd(vm, "guest-file-seek",
			 json_pack("{s:I, s:I, s:s}", "handle", s->h, "offset", (json_int_t)0,
				   "whence", "cur"),
			 &ret, err) < 0)
			return -1;
		json_decref(ret);
		s->eof_seen = false;
	}
	json_t *ret = NULL;
	if (qcmd(vm, "guest-file-read",
		 json_pack("{s:I, s:I}", "handle", s->h, "count", (json_int_t)READ_CHUNK), &ret,
		 err) < 0)
		return -1;
	const char *b64 = json_string_value(json_object_get(ret, "buf-b64"));
	s->eof_seen = json_is_true(json_object_get(ret, "eof"));
	struct wr_buf chunk = {0};
	bool more = false;
	int d = b64 ? wr_qga_unb64(b64, &chunk, READ_CHUNK, &more) : -EBADMSG;
	json_decref(ret);
	if (d < 0 || more) {
		free(chunk.p);
		return wr_err_set(err, EPROTO, "guest-file-read: malformed data");
	}
	size_t room = s->n >= cap ? 0 : (size_t)(cap - s->n);
	size_t take = chunk.len < room ? chunk.len : room;
	if (take < chunk.len) {
		s->trunc = true;
		s->done = true; /* the rest stays in the guest's file */
	}
	if (take && spec->on_output) {
		if (!*stop_delivery && spec->on_output(spec->ctx, which, chunk.p, take) != 0)
			*stop_delivery = true;
	} else if (take && wr_buf_append(&s->buf, chunk.p, take) < 0) {
		s->trunc = true;
	}
	s->n += take;
	int got = chunk.len > 0;
	free(chunk.p);
	return got;
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

static void kill_group(struct wr_fullvm *vm, json_int_t pid)
{
	char pg[32];
	snprintf(pg, sizeof(pg), "-%lld", (long long)pid);
	const char *argv[] = {"/bin/kill", "-KILL", "--", pg, NULL};
	wr_err e = NULL;
	if (tool(vm, argv, &e) < 0)
		wr_err_free(&e); /* gone already */
}

/* The guest-exec request: the fixed wrappers, then the command. */
static json_t *exec_args(const struct wr_exec_spec *spec, const char *out, const char *errp,
			 const struct wr_buf *in)
{
	char uid[24], gid[24];
	int user = spec->user > 0 ? spec->user : 0;
	int group = spec->group > 0 ? spec->group : user;
	json_t *a = json_array();
	const char *head[] = {"-c", "exec >>\"$1\" 2>>\"$2\"; shift 2; exec \"$@\"", "sh", out,
			      errp};
	json_array_append_new(a, json_string("/bin/sh"));
	for (size_t i = 0; i < 5; i++)
		json_array_append_new(a, json_string(head[i]));
	if (user || group) {
		snprintf(uid, sizeof(uid), "--reuid=%d", user);
		snprintf(gid, sizeof(gid), "--regid=%d", group);
		const char *pv[] = {"/usr/bin/setpriv", uid, gid, "--clear-groups", "--"};
		for (size_t i = 0; i < 5; i++)
			json_array_append_new(a, json_string(pv[i]));
	}
	const char *cd[] = {"/bin/sh", "-c", "cd \"$1\" || exit 126; shift; exec \"$@\"", "sh",
			    spec->cwd ? spec->cwd : "/"};
	for (size_t i = 0; i < 5; i++)
		json_array_append_new(a, json_string(cd[i]));
	for (size_t i = 0; spec->argv[i]; i++)
		json_array_append_new(a, json_string(spec->argv[i]));
	json_t *env = json_array();
	json_array_append_new(env,
			      json_string("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
					  "/sbin:/bin"));
	json_array_append_new(env, json_string(user ? "HOME=/" : "HOME=/root"));
	for (size_t i = 0; i < spec->n_env; i++) {
		char *kv = NULL;
		if (asprintf(&kv, "%s=%s", spec->env[i].key, spec->env[i].value) >= 0)
			json_array_append_new(env, json_string(kv));
		free(kv);
	}
	json_t *args = json_pack("{s:s, s:o, s:o, s:b}", "path", "/usr/bin/setsid", "arg", a, "env",
				 env, "capture-output", 0);
	if (args && in->len) {
		char *b = wr_qga_b64(in->p, in->len);
		json_object_set_new(args, "input-data", json_string(b ? b : ""));
		free(b);
	}
	return args;
}

int wr_fullvm_exec_stream(struct wr_fullvm *vm, const struct wr_exec_spec *spec,
			  struct wr_exec_result *res, wr_err *err)
{
	memset(res, 0, sizeof(*res));
	if (spec->argv == NULL || spec->argv[0] == NULL)
		return wr_err_field(err, "cmd", "the command is empty");
	if (spec->pty)
		return wr_err_set(err, ENOTSUP, "vm tier: no terminal (qemu-guest-agent has none)");
	size_t na = 0;
	while (spec->argv[na])
		na++;
	if (na > 4000)
		return wr_err_field(err, "cmd", "at most 4000 arguments");
	struct wr_buf in = {0};
	if (spec->stdin_fd >= 0) {
		char buf[65536];
		ssize_t k;
		while ((k = read(spec->stdin_fd, buf, sizeof(buf))) > 0 ||
		       (k < 0 && errno == EINTR))
			if (k > 0 && (in.len + (size_t)k > STDIN_MAX ||
				      wr_buf_append(&in, buf, (size_t)k) < 0)) {
				free(in.p);
				return wr_err_field(err, "stdin",
						    "at most %u bytes of stdin on the vm tier",
						    STDIN_MAX);
			}
	}
	uint64_t start = now_ms();
	unsigned char rnd[8];
	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd)) {
		free(in.p);
		return wr_err_sys(err, "getrandom");
	}
	char id[17], outp[64], errp[64];
	for (int i = 0; i < 8; i++)
		snprintf(id + 2 * i, 3, "%02x", rnd[i]);
	snprintf(outp, sizeof(outp), DIR_RUN "/%s.out", id);
	snprintf(errp, sizeof(errp), DIR_RUN "/%s.err", id);
	struct stream so = {.path = outp}, se = {.path = errp};
	const char *mk[] = {"/bin/mkdir", "-p", "-m", "0700", "--", DIR_RUN, NULL};
	json_int_t pid = 0, h;
	int r = tool(vm, mk, err);
	/* the files exist before the command opens them for appending */
	for (int i = 0; i < 2 && r == 0; i++) {
		struct stream *s = i ? &se : &so;
		if ((r = open_h(vm, s->path, "w", &h, err)) == 0)
			close_h(vm, h);
		if (r == 0 && (r = open_h(vm, s->path, "r", &s->h, err)) == 0)
			s->open = true;
	}
	json_t *ret = NULL;
	if (r == 0 &&
	    (r = qcmd(vm, "guest-exec", exec_args(spec, outp, errp, &in), &ret, err)) == 0) {
		pid = json_integer_value(json_object_get(ret, "pid"));
		if (pid <= 0)
			r = wr_err_set(err, EPROTO, "guest-exec: no pid in the answer");
	}
	json_decref(ret);
	free(in.p);
	uint64_t cap = spec->output_cap ? spec->output_cap : WR_DEFAULT_OUTPUT_CAP;
	uint64_t deadline = spec->timeout_ms ? start + spec->timeout_ms : UINT64_MAX;
	bool exited = false, timed_out = false, killed = false, stop = false;
	json_t *st = NULL;
	unsigned delay = 20;
	while (r == 0 && !exited) {
		int a = pull(vm, spec, 1, &so, cap, &stop, err);
		int b = a < 0 ? -1 : pull(vm, spec, 2, &se, cap, &stop, err);
		if (a < 0 || b < 0) {
			r = -1;
			break;
		}
		json_decref(st);
		st = NULL;
		if ((r = qcmd(vm, "guest-exec-status", json_pack("{s:I}", "pid", pid), &st, err)) <
		    0)
			break;
		if (json_is_true(json_object_get(st, "exited"))) {
			exited = true;
			break;
		}
		uint64_t now = now_ms();
		if (!timed_out && !killed && (now >= deadline || ctl_killed(spec))) {
			if (now >= deadline)
				timed_out = true;
			else
				killed = true;
			kill_group(vm, pid);
			deadline = now + GRACE_MS;
		} else if ((timed_out || killed) && now >= deadline) {
			break; /* the guest did not report the exit: given up on */
		}
		if (a > 0 || b > 0)
			delay = 20;
		else
			sleep_ms(delay), delay = delay < 250 ? delay * 2 : 250;
	}
	/* what was written before the exit */
	while (r == 0 && exited) {
		int a = pull(vm, spec, 1, &so, cap, &stop, err);
		int b = a < 0 ? -1 : pull(vm, spec, 2, &se, cap, &stop, err);
		if (a < 0 || b < 0)
			r = -1;
		if (a <= 0 && b <= 0)
			break;
	}
	for (int i = 0; i < 2; i++) {
		struct stream *s = i ? &se : &so;
		if (s->open)
			close_h(vm, s->h);
	}
	const char *rm[] = {"/bin/rm", "-f", "--", outp, errp, NULL};
	wr_err e = NULL;
	if (tool(vm, rm, &e) < 0)
		wr_err_free(&e);
	res->duration_ns = (now_ms() - start) * 1000000ull;
	if (r < 0) {
		json_decref(st);
		free(so.buf.p);
		free(se.buf.p);
		return wr_err_wrap(err, "vm exec");
	}
	int sig = exited ? (int)json_integer_value(json_object_get(st, "signal")) : 9;
	int code = (int)json_integer_value(json_object_get(st, "exitcode"));
	json_decref(st);
	res->signal = sig;
	res->exit_code = sig ? 128 + sig : code;
	if (res->exit_code < 0 || res->exit_code > 255)
		res->exit_code = 255;
	res->reason = timed_out ? WR_EXIT_TIMEOUT
		      : killed	? WR_EXIT_KILLED
		      : sig	? WR_EXIT_SIGNALED
				: WR_EXIT_EXITED;
	res->out_truncated = so.trunc;
	res->err_truncated = se.trunc;
	if (spec->on_output == NULL) {
		if (wr_buf_append(&so.buf, "", 1) < 0 || wr_buf_append(&se.buf, "", 1) < 0) {
			free(so.buf.p);
			free(se.buf.p);
			return wr_err_set(err, ENOMEM, "out of memory");
		}
		res->out = so.buf.p;
		res->out_len = so.buf.len - 1;
		res->err = se.buf.p;
		res->err_len = se.buf.len - 1;
	} else {
		free(so.buf.p);
		free(se.buf.p);
	}
	return 0;
}
