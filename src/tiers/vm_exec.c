/* Streaming commands on the vm tier, over the standard guest agent only.
 *
 * qemu-ga 7.2 (Debian 12) returns a guest-exec'd command's captured output
 * only once it exited (guest-exec-status has no out-data before), so the
 * output goes to files of the guest instead and is read as it grows:
 *
 *   mkdir /run/warren-exec (0700, root's) → create <id>.out and <id>.err
 *   (guest-file-open "w") → open both for reading → guest-exec of
 *     setsid sh -c WRAP sh OUT ERR UNIT LIMIT
 *       [setpriv --reuid --regid --clear-groups --] sh -c 'cd "$1" ...' CMD...
 *   → poll: guest-file-read of both (a read at EOF is followed by a
 *     guest-file-seek of 0 from "cur", which clears stdio's sticky EOF so
 *     the next read sees what came since) and guest-exec-status, 20 ms
 *     apart at first, backing off to 250 ms while nothing comes
 *   → exited: read both to their end → close, remove the files.
 *
 * WRAP redirects the output, then, in a guest booted with systemd (the
 * images warren builds; a user image without systemd falls back to the
 * process group below), execs systemd-run --scope: the command runs in a
 * transient scope warren-cmd-<id>.scope, its own cgroup, with TasksMax=25%
 * of the guest's tasks, CPUWeight=100 (set, so systemd enables the cpu
 * controller: the CPU is then shared by unit, and qemu-ga's service weighs
 * as much as a fork bomb's thousand tasks), KillSignal=SIGKILL and
 * RuntimeMaxSec = its timeout plus 2 s. So
 *   - its processes are not qemu-ga's: a fork bomb fills its scope's
 *     TasksMax, not qemu-guest-agent.service's, and the agent can still
 *     fork the next command and the kill;
 *   - its whole tree, however it detached (setsid, double fork, reparented
 *     to PID 1), ends at the timeout: the host kills the scope at the
 *     deadline (systemctl kill), and the guest's systemd does it by itself
 *     2 s later, also after the first process exited early (a fork bomb's
 *     shell returns at once) and when the host is gone. A kill or a
 *     timeout also sends SIGKILL to the process group (setsid made the
 *     command a session and group leader: it execs in place, qemu-ga's
 *     child is no group leader, so the pid guest-exec returns is the
 *     group's id), which is all an image without systemd gets.
 *
 * A guest agent that stops answering mid-command (a guest out of memory
 * stalls it; Debian's OOM killer may take it, and systemd restarts it: the
 * images warren builds give it OOMScoreAdjust=-1000 and Restart=always) is
 * waited for; back, it either still knows the command (go on), or it
 * restarted and lost it: the command then ends as `oom` when the guest's
 * kernel log says the OOM killer took its pid, else as an `unavailable`
 * error (503) saying so; an agent gone for good is the same error. A guest
 * agent refusing to start the command for lack of processes or memory
 * ("Failed to fork") is the guest's exhaustion, answered as EAGAIN
 * (resource_exhausted, 429), never an internal error.
 *
 * Only fixed script text reaches a shell; the command, cwd and file names
 * are positional arguments. Output beyond the cap is left unread in the
 * guest's file (tmpfs: the guest's memory) and the file removed at the end.
 * Everything read back is the guest's word. */
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
#define GRACE_MS 10000	    /* after a kill, for the guest to report the exit */
#define SCOPE_SLACK_MS 2000 /* the guest's own bound after the host's */
#define LOST_MS 120000	    /* how long a silent guest agent is waited for */
#define PROBE_MS 10000	    /* one try at reaching it */

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

/* The command's scope (every process in its cgroup) and its process
 * group, SIGKILL. */
static void kill_group(struct wr_fullvm *vm, const char *unit, json_int_t pid)
{
	char pg[32], scope[64];
	snprintf(pg, sizeof(pg), "-%lld", (long long)pid);
	snprintf(scope, sizeof(scope), "%s.scope", unit);
	const char *argv[] = {"/bin/sh",
			      "-c",
			      "systemctl kill --signal=SIGKILL -- \"$1\" >/dev/null 2>&1; "
			      "kill -KILL -- \"$2\" 2>/dev/null; exit 0",
			      "sh",
			      scope,
			      pg,
			      NULL};
	wr_err e = NULL;
	if (tool(vm, argv, &e) < 0)
		wr_err_free(&e); /* gone already, or the agent with it */
}

/* Whether the guest's OOM killer took process pid, by its kernel log. */
static bool oom_killed(struct wr_fullvm *vm, json_int_t pid)
{
	static const char *const env[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL};
	char pat[48];
	snprintf(pat, sizeof(pat), "Killed process %lld (", (long long)pid);
	const char *argv[] = {"/bin/sh", "-c", "dmesg | grep -qF -- \"$1\"", "sh", pat, NULL};
	struct wr_qga_exec x = {.argv = argv, .env = env, .timeout_ms = 30000, .output_cap = 4096};
	struct wr_qga_result r = {0};
	wr_err e = NULL;
	bool yes = wr_fullvm_qga_run(vm, &x, &r, &e) == 0 && r.exited && r.exit_code == 0;
	wr_err_free(&e);
	wr_qga_result_free(&r);
	return yes;
}

/* Whether err is the guest agent out of touch (no answer, its channel
 * closed), as opposed to an answer. */
static bool agent_silent(const wr_err err)
{
	return err && (err->errnum == ETIMEDOUT || err->errnum == EPIPE);
}

/* An error answer of the guest agent that is the guest's exhaustion (it
 * could not fork or allocate): EAGAIN, resource_exhausted. */
static void exhaustion_is_eagain(wr_err err)
{
	if (err && err->errnum == EIO && err->msg &&
	    (strstr(err->msg, "Failed to fork") ||
	     strstr(err->msg, "Resource temporarily unavailable") ||
	     strstr(err->msg, "Cannot allocate memory")))
		err->errnum = EAGAIN;
}

enum lost { LOST_BACK, LOST_EXITED, LOST_FORGOT, LOST_GONE };

/* After a failed poll step: waits (up to LOST_MS) for the agent to answer
 * guest-exec-status of pid again. BACK: it knows the command, still
 * running; EXITED: it knows it, exited (*st its status); FORGOT: it
 * answers but lost the command (restarted); GONE: no answer. */
static enum lost agent_lost(struct wr_fullvm *vm, json_int_t pid, json_t **st)
{
	uint64_t until = now_ms() + LOST_MS;
	for (;;) {
		wr_err e = NULL;
		json_t *ret = NULL;
		json_t *args = json_pack("{s:I}", "pid", pid);
		int r = wr_fullvm_qga_cmd(vm, "guest-exec-status", args, PROBE_MS, &ret, &e);
		json_decref(args);
		if (r == 0) {
			if (!json_is_true(json_object_get(ret, "exited"))) {
				json_decref(ret);
				return LOST_BACK;
			}
			*st = ret;
			return LOST_EXITED;
		}
		bool silent = agent_silent(e);
		wr_err_free(&e);
		if (!silent)
			return LOST_FORGOT; /* "Invalid parameter 'pid'" */
		if (now_ms() >= until)
			return LOST_GONE;
		sleep_ms(500);
	}
}

/* The guest-exec request: the fixed wrappers, then the command. */
static json_t *exec_args(const struct wr_exec_spec *spec, const char *out, const char *errp,
			 const char *unit, const struct wr_buf *in)
{
	char uid[24], gid[24], limit[32];
	int user = spec->user > 0 ? spec->user : 0;
	int group = spec->group > 0 ? spec->group : user;
	if (spec->timeout_ms)
		snprintf(limit, sizeof(limit), "%llums",
			 (unsigned long long)spec->timeout_ms + SCOPE_SLACK_MS);
	else
		snprintf(limit, sizeof(limit), "infinity");
	json_t *a = json_array();
	/* the scope: see the top of the file. The command does not inherit
	 * qemu-ga's OOMScoreAdjust=-1000 (the shell is still root here:
	 * raising it is always allowed, lowering it again is not for uid 1000) */
	const char *head[] = {
	    "-c",
	    "echo 0 >/proc/self/oom_score_adj 2>/dev/null\n"
	    "exec >>\"$1\" 2>>\"$2\"; u=$3 t=$4; shift 4\n"
	    "if [ -d /run/systemd/system ] && [ -x /usr/bin/systemd-run ]; then\n"
	    "  exec /usr/bin/systemd-run --scope --quiet --collect --unit=\"$u\" "
	    "-p TasksMax=25% -p CPUWeight=100 -p KillSignal=SIGKILL -p RuntimeMaxSec=\"$t\" "
	    "-- \"$@\"\n"
	    "fi\n"
	    "exec \"$@\"",
	    "sh",
	    out,
	    errp,
	    unit,
	    limit};
	json_array_append_new(a, json_string("/bin/sh"));
	for (size_t i = 0; i < sizeof(head) / sizeof(head[0]); i++)
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
	char id[17], outp[64], errp[64], unit[40];
	for (int i = 0; i < 8; i++)
		snprintf(id + 2 * i, 3, "%02x", rnd[i]);
	snprintf(unit, sizeof(unit), "warren-cmd-%s", id);
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
	    (r = qcmd(vm, "guest-exec", exec_args(spec, outp, errp, unit, &in), &ret, err)) == 0) {
		pid = json_integer_value(json_object_get(ret, "pid"));
		if (pid <= 0)
			r = wr_err_set(err, EPROTO, "guest-exec: no pid in the answer");
	}
	json_decref(ret);
	free(in.p);
	uint64_t cap = spec->output_cap ? spec->output_cap : WR_DEFAULT_OUTPUT_CAP;
	uint64_t deadline = spec->timeout_ms ? start + spec->timeout_ms : UINT64_MAX;
	uint64_t user_deadline = deadline;
	bool exited = false, timed_out = false, killed = false, stop = false, oom = false;
	bool lost = false; /* the agent restarted: its file handles are gone */
	json_t *st = NULL;
	unsigned delay = 20;
	while (r == 0 && !exited) {
		int a = pull(vm, spec, 1, &so, cap, &stop, err);
		int b = a < 0 ? -1 : pull(vm, spec, 2, &se, cap, &stop, err);
		json_decref(st);
		st = NULL;
		if (a >= 0 && b >= 0)
			r = qcmd(vm, "guest-exec-status", json_pack("{s:I}", "pid", pid), &st, err);
		if (a < 0 || b < 0 || r < 0) {
			/* a silent agent is waited for; an error answer from an
			 * agent that still knows the command is the error */
			bool silent = agent_silent(*err);
			enum lost l = agent_lost(vm, pid, &st);
			if (l == LOST_BACK && silent) {
				wr_err_free(err);
				r = 0;
				continue;
			}
			if (l == LOST_BACK) {
				r = -1;
				break;
			}
			wr_err_free(err);
			r = 0;
			if (l == LOST_EXITED) {
				exited = true;
				break;
			}
			lost = true;
			so.open = se.open = false; /* their handles went with it */
			if (l == LOST_FORGOT && oom_killed(vm, pid)) {
				oom = true;
				break;
			}
			if (l == LOST_FORGOT)
				kill_group(vm, unit, pid);
			if (l == LOST_FORGOT)
				r = wr_err_set(
				    err, ESHUTDOWN,
				    "the guest agent restarted and lost the command (its "
				    "end is unknown; the guest may have run out of memory)");
			else
				r = wr_err_set(err, ESHUTDOWN,
					       "the guest agent stopped answering (for %u s; the "
					       "guest may be out of memory)",
					       LOST_MS / 1000);
			break;
		}
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
			kill_group(vm, unit, pid);
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
		exhaustion_is_eagain(*err);
		return wr_err_wrap(err, "vm exec");
	}
	int sig = exited ? (int)json_integer_value(json_object_get(st, "signal")) : 9;
	int code = (int)json_integer_value(json_object_get(st, "exitcode"));
	json_decref(st);
	/* the guest's own bound (RuntimeMaxSec) may beat our poll to it */
	if (exited && sig == 9 && !killed && user_deadline != UINT64_MAX &&
	    now_ms() >= user_deadline)
		timed_out = true;
	if (exited && sig == 9 && !timed_out && !killed && !lost)
		oom = oom_killed(vm, pid);
	res->signal = sig;
	res->exit_code = sig ? 128 + sig : code;
	if (res->exit_code < 0 || res->exit_code > 255)
		res->exit_code = 255;
	res->reason = timed_out ? WR_EXIT_TIMEOUT
		      : killed	? WR_EXIT_KILLED
		      : oom	? WR_EXIT_OOM
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
