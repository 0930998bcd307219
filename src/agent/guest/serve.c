/* warren-agent, command half: EXEC/STDIN/KILL/PING frames in, output and
 * EXIT frames out (protocol: src/common/frame.h).
 *
 * Each command runs in a cgroup of its own (/sys/fs/cgroup/cmds/cmd-<id>)
 * as the leader of a new session, so a kill or a timeout takes its whole
 * tree with cgroup.kill, however its processes detached or were reparented
 * to us. A command is over when its first process has been reaped and its
 * stdout and stderr reached EOF, or 200 ms after that process went while
 * background children still hold them. Background processes live on in the
 * cgroup until the command's timeout (a command without one: until the VM
 * ends, as in the container tier): the cgroup of a finished command with
 * processes left "lingers" until its deadline, then goes with cgroup.kill,
 * so a fork bomb that returned at once (`b() { b | b & }; b`) is still
 * bounded by its timeout.
 *
 * Every command's cgroup sits in /sys/fs/cgroup/cmds, whose pids.max is
 * half the kernel's threads-max (itself one task per 128 KiB of RAM), and
 * the cpu controller shares the CPU by cgroup: the agent (PID 1, in the
 * root cgroup) can always fork the next command, answer and kill, with
 * half the CPU against all commands, whatever the commands did. A kernel without the pids
 * controller gets the cgroups directly below /sys/fs/cgroup, unbounded.
 *
 * Backpressure: output frames are written blocking, so a host that stops
 * reading stalls this loop (and with it every command's output) rather than
 * letting the guest buffer without bound; the host therefore keeps reading
 * past its output caps and discards. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <jansson.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/random.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/guest/agent.h"
#include "common/frame.h"

#define MAX_CMDS 256
#define DRAIN_MS 200

struct cmd {
	uint32_t id;
	pid_t pid; /* 0 once reaped */
	int status;
	int out, err, in, timer, cg;
	bool exited, timed_out, killed, draining;
	char exec_error[256];
	uint64_t start_ns, deadline_ns; /* 0: no timeout */
	char *pending;			/* stdin bytes not yet taken by the pipe */
	size_t npending;
	bool in_eof; /* close stdin once pending is written */
	bool pty;    /* out and in are the terminal's master */
};

static struct cmd *g_cmds[MAX_CMDS];
static const char *g_cgbase = "/sys/fs/cgroup";

/* The cgroup of a finished command with processes left, killed at the
 * command's deadline (then removed once empty: retried every 50 ms, for
 * up to 5 s, as the kill is asynchronous). */
struct linger {
	uint32_t id;
	int cg, timer, tries;
	bool killed;
};
static struct linger *g_linger[MAX_CMDS];
static int g_chan = -1;
static pthread_mutex_t g_wlock = PTHREAD_MUTEX_INITIALIZER;

int ga_send(uint8_t type, uint32_t id, const void *p, uint32_t len)
{
	pthread_mutex_lock(&g_wlock);
	int r = wr_frame_write(g_chan, type, id, p, len);
	pthread_mutex_unlock(&g_wlock);
	return r;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void send_json(uint8_t type, uint32_t id, json_t *j)
{
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (s == NULL)
		return;
	ga_send(type, id, s, (uint32_t)strlen(s));
	free(s);
}

static void send_error(uint32_t id, const char *msg)
{
	send_json(WR_FRAME_ERROR, id, json_pack("{s:s}", "message", msg));
}

static struct cmd *find(uint32_t id)
{
	for (int i = 0; i < MAX_CMDS; i++)
		if (g_cmds[i] && g_cmds[i]->id == id)
			return g_cmds[i];
	return NULL;
}

static void closefd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static void cg_kill(struct cmd *c)
{
	if (c->cg < 0)
		return;
	int fd = openat(c->cg, "cgroup.kill", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (write(fd, "1", 1) < 0) {
			/* the cgroup is gone with its processes: nothing to kill */
		}
		close(fd);
	}
}

static void cg_path(char *path, size_t n, uint32_t id)
{
	snprintf(path, n, "%s/cmd-%u", g_cgbase, id);
}

static void arm(int timer, uint64_t ms)
{
	struct itimerspec it = {
	    .it_value = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000}};
	if (ms == 0)
		it.it_value.tv_nsec = 1;
	timerfd_settime(timer, 0, &it, NULL);
}

static void linger_free(int slot)
{
	struct linger *l = g_linger[slot];
	closefd(&l->cg);
	closefd(&l->timer);
	free(l);
	g_linger[slot] = NULL;
}

/* The lingering cgroup's timer (or now, when forced): kill at the
 * deadline, then remove. */
static void linger_tick(int slot, bool force)
{
	struct linger *l = g_linger[slot];
	uint64_t ticks;
	if (read(l->timer, &ticks, sizeof(ticks)) < 0 && !force)
		return;
	if (!l->killed) {
		int fd = openat(l->cg, "cgroup.kill", O_WRONLY | O_CLOEXEC);
		if (fd >= 0) {
			if (write(fd, "1", 1) < 0) {
				/* emptied meanwhile: rmdir below */
			}
			close(fd);
		}
		l->killed = true;
	}
	char path[96];
	cg_path(path, sizeof(path), l->id);
	if (rmdir(path) == 0 || errno != EBUSY || ++l->tries > 100) {
		linger_free(slot);
		return;
	}
	arm(l->timer, 50);
}

/* Hands the cgroup of finished command c over to the linger list when
 * processes are left in it and a deadline is still ahead; 0 if taken. */
static int linger_take(struct cmd *c)
{
	if (c->deadline_ns == 0 || c->cg < 0 || c->timer < 0)
		return -1;
	int slot = -1;
	for (int i = 0; i < MAX_CMDS && slot < 0; i++)
		if (g_linger[i] == NULL)
			slot = i;
	struct linger *l = slot < 0 ? NULL : calloc(1, sizeof(*l));
	if (l == NULL) {
		cg_kill(c); /* no room to wait: the deadline comes now */
		return -1;
	}
	*l = (struct linger){.id = c->id, .cg = c->cg, .timer = c->timer};
	c->cg = c->timer = -1;
	uint64_t now = now_ns();
	arm(l->timer, c->deadline_ns > now ? (c->deadline_ns - now) / 1000000 : 0);
	g_linger[slot] = l;
	return 0;
}

/* The lingering cgroup of command id killed now (a KILL for it, or its id
 * used again); 1 if there was one. */
static int linger_kill_now(uint32_t id)
{
	for (int i = 0; i < MAX_CMDS; i++)
		if (g_linger[i] && g_linger[i]->id == id) {
			linger_tick(i, true);
			return 1;
		}
	return 0;
}

static int put_str(const char *path, const char *v)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? write(fd, v, strlen(v)) : -1;
	if (fd >= 0)
		close(fd);
	return n == (ssize_t)strlen(v) ? 0 : -1;
}

/* The parent of the commands' cgroups, with a pids.max that leaves the
 * agent room to fork (see the top of the file). */
static void cmds_cgroup_init(void)
{
	long tmax = 0;
	FILE *f = fopen("/proc/sys/kernel/threads-max", "re");
	if (f) {
		if (fscanf(f, "%ld", &tmax) != 1)
			tmax = 0;
		fclose(f);
	}
	bool ok = put_str("/sys/fs/cgroup/cgroup.subtree_control", "+pids") == 0;
	/* the CPU is shared by cgroup, not by task: the agent weighs as
	 * much as all the commands together (a fork bomb's thousand tasks
	 * would otherwise leave it a thousandth, too little to answer or
	 * kill), and in cmds each command as much as another */
	bool cpu = put_str("/sys/fs/cgroup/cgroup.subtree_control", "+cpu") == 0;
	if (!ok || tmax <= 0 || (mkdir("/sys/fs/cgroup/cmds", 0755) < 0 && errno != EEXIST))
		return;
	char v[32];
	snprintf(v, sizeof(v), "%ld", tmax / 2 > 64 ? tmax / 2 : 64);
	if (put_str("/sys/fs/cgroup/cmds/pids.max", v) < 0)
		return;
	if (cpu)
		put_str("/sys/fs/cgroup/cmds/cgroup.subtree_control", "+cpu");
	g_cgbase = "/sys/fs/cgroup/cmds";
}

static void finish(struct cmd *c)
{
	int slot = -1;
	for (int i = 0; i < MAX_CMDS; i++)
		if (g_cmds[i] == c)
			slot = i;
	const char *reason = c->exec_error[0]	      ? "exec_failed"
			     : c->timed_out	      ? "timeout"
			     : c->killed	      ? "killed"
			     : WIFSIGNALED(c->status) ? "signaled"
						      : "exited";
	json_t *j = json_pack("{s:i, s:i, s:s, s:I}", "exit_code",
			      WIFEXITED(c->status) ? WEXITSTATUS(c->status) : -1, "signal",
			      WIFSIGNALED(c->status) ? WTERMSIG(c->status) : 0, "reason", reason,
			      "duration_ms", (json_int_t)((now_ns() - c->start_ns) / 1000000));
	if (j && c->exec_error[0])
		json_object_set_new(j, "message", json_string(c->exec_error));
	send_json(WR_FRAME_EXIT, c->id, j);
	closefd(&c->out);
	closefd(&c->err);
	closefd(&c->in);
	if (c->cg >= 0) {
		char path[96];
		cg_path(path, sizeof(path), c->id);
		/* EBUSY while background processes live: kept, and killed at
		 * the command's deadline if it has one */
		if (rmdir(path) == 0 || errno != EBUSY || linger_take(c) < 0)
			closefd(&c->cg);
	}
	closefd(&c->timer);
	free(c->pending);
	free(c);
	if (slot >= 0)
		g_cmds[slot] = NULL;
}

static void maybe_finish(struct cmd *c)
{
	if (!c->exited)
		return;
	if (c->out < 0 && c->err < 0) {
		finish(c);
		return;
	}
	if (!c->draining) {
		c->draining = true;
		arm(c->timer, DRAIN_MS);
	}
}

/* Child: never returns. Errors go to ep (close-on-exec: EOF = exec'd). */
static void child(json_t *req, int cgfd, int in, int out, int err, int ep)
{
	char msg[256];
	json_t *argv = json_object_get(req, "argv"), *env = json_object_get(req, "env");
	size_t na = json_array_size(argv), ne = json_array_size(env);
	char **av = calloc(na + 1, sizeof(char *)), **ev = calloc(ne + 1, sizeof(char *));
	for (size_t i = 0; i < na; i++)
		av[i] = (char *)json_string_value(json_array_get(argv, i));
	for (size_t i = 0; i < ne; i++)
		ev[i] = (char *)json_string_value(json_array_get(env, i));
	const char *cwd = json_string_value(json_object_get(req, "cwd"));
	int uid = (int)json_integer_value(json_object_get(req, "uid"));
	int gid = (int)json_integer_value(json_object_get(req, "gid"));
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	setsid();
	if (json_object_get(req, "pty") && ioctl(in, TIOCSCTTY, 0) < 0) {
		snprintf(msg, sizeof(msg), "controlling terminal: %s", strerror(errno));
		goto fail;
	}
	int procs = openat(cgfd, "cgroup.procs", O_WRONLY | O_CLOEXEC);
	if (procs < 0 || write(procs, "0", 1) != 1) {
		snprintf(msg, sizeof(msg), "join cgroup: %s", strerror(errno));
		goto fail;
	}
	if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) {
		snprintf(msg, sizeof(msg), "dup2: %s", strerror(errno));
		goto fail;
	}
	if (json_object_get(req, "pty") && fchown(in, (uid_t)uid, (gid_t)gid) < 0) {
		snprintf(msg, sizeof(msg), "terminal owner: %s", strerror(errno));
		goto fail;
	}
	if (setgroups(0, NULL) < 0 || setgid((gid_t)gid) < 0 || setuid((uid_t)uid) < 0) {
		snprintf(msg, sizeof(msg), "set uid %d gid %d: %s", uid, gid, strerror(errno));
		goto fail;
	}
	if (cwd && chdir(cwd) < 0) {
		snprintf(msg, sizeof(msg), "cwd %s: %s", cwd, strerror(errno));
		goto fail;
	}
	/* PATH lookup in the command's own environment */
	for (size_t i = 0; i < ne; i++)
		if (strncmp(ev[i], "PATH=", 5) == 0)
			setenv("PATH", ev[i] + 5, 1);
	execvpe(av[0], av, ev);
	snprintf(msg, sizeof(msg), "%s: %s", av[0], strerror(errno));
fail:
	/* on a terminal the reason shows there too, as the container tier
	 * prints it (the EXIT frame carries it for everyone else) */
	if (json_object_get(req, "pty"))
		dprintf(err, "warren: %s\r\n", msg);
	if (write(ep, msg, strlen(msg)) < 0)
		_exit(126);
	_exit(127);
}

/* A terminal for a pty command: the child gets the slave as stdio (in[0],
 * out[1], err[1]); we keep the master as out[0] (output) and in[1]
 * (input), err[0] stays -1. */
static int open_pty(json_t *pty, int o[2], int i[2], int e[2])
{
	int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (m < 0 || grantpt(m) < 0 || unlockpt(m) < 0) {
		if (m >= 0)
			close(m);
		return -1;
	}
	json_int_t rows = json_integer_value(json_object_get(pty, "rows"));
	json_int_t cols = json_integer_value(json_object_get(pty, "cols"));
	struct winsize ws = {.ws_row = rows > 0 && rows < 65536 ? (unsigned short)rows : 24,
			     .ws_col = cols > 0 && cols < 65536 ? (unsigned short)cols : 80};
	ioctl(m, TIOCSWINSZ, &ws);
	int s = ioctl(m, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
	int s2 = s >= 0 ? fcntl(s, F_DUPFD_CLOEXEC, 0) : -1;
	int s3 = s >= 0 ? fcntl(s, F_DUPFD_CLOEXEC, 0) : -1;
	int m2 = fcntl(m, F_DUPFD_CLOEXEC, 0);
	if (s < 0 || s2 < 0 || s3 < 0 || m2 < 0) {
		int fds[] = {m, m2, s, s2, s3};
		for (size_t k = 0; k < sizeof(fds) / sizeof(fds[0]); k++)
			if (fds[k] >= 0)
				close(fds[k]);
		return -1;
	}
	o[0] = m;
	i[1] = m2;
	i[0] = s;
	o[1] = s2;
	e[1] = s3;
	return 0;
}

static void do_resize(uint32_t id, const uint8_t *p, uint32_t len)
{
	struct cmd *c = NULL;
	for (int k = 0; k < MAX_CMDS; k++)
		if (g_cmds[k] && g_cmds[k]->id == id)
			c = g_cmds[k];
	json_error_t je;
	json_t *j = json_loadb((const char *)p, len, 0, &je);
	json_int_t rows = json_integer_value(json_object_get(j, "rows"));
	json_int_t cols = json_integer_value(json_object_get(j, "cols"));
	json_decref(j);
	if (c == NULL || !c->pty || c->in < 0 || rows <= 0 || cols <= 0 || rows > 65535 ||
	    cols > 65535)
		return; /* a finished command, or nonsense: ignored */
	struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
	ioctl(c->in, TIOCSWINSZ, &ws); /* the terminal signals SIGWINCH */
}

static int str_array(json_t *a, size_t min)
{
	if (!json_is_array(a) || json_array_size(a) < min || json_array_size(a) > 4096)
		return -1;
	for (size_t i = 0; i < json_array_size(a); i++)
		if (!json_is_string(json_array_get(a, i)))
			return -1;
	return 0;
}

static void do_exec(uint32_t id, const uint8_t *p, uint32_t len)
{
	json_error_t je;
	json_t *req = json_loadb((const char *)p, len, 0, &je);
	json_t *env = req ? json_object_get(req, "env") : NULL;
	int slot = -1;
	for (int i = 0; i < MAX_CMDS && slot < 0; i++)
		if (g_cmds[i] == NULL)
			slot = i;
	if (req == NULL || str_array(json_object_get(req, "argv"), 1) < 0 ||
	    (env && str_array(env, 0) < 0)) {
		send_error(id, "exec: argv must be a non-empty array of strings, env an array");
		json_decref(req);
		return;
	}
	if (id == 0 || find(id) || slot < 0) {
		send_error(id, slot < 0 ? "exec: too many commands" : "exec: bad or duplicate id");
		json_decref(req);
		return;
	}
	json_t *pty = json_object_get(req, "pty");
	if (pty && !json_is_object(pty)) {
		send_error(id, "exec: pty must be an object {rows, cols}");
		json_decref(req);
		return;
	}
	linger_kill_now(id); /* an id used again: the old one's leftovers go */
	struct cmd *c = calloc(1, sizeof(*c));
	int o[2] = {-1, -1}, e[2] = {-1, -1}, i[2] = {-1, -1}, ep[2] = {-1, -1};
	char path[96];
	cg_path(path, sizeof(path), id);
	if (c == NULL || pipe2(ep, O_CLOEXEC) < 0 || (mkdir(path, 0755) < 0 && errno != EEXIST)) {
		send_error(id, "exec: out of resources");
		goto out;
	}
	if (pty) {
		if (open_pty(pty, o, i, e) < 0) {
			send_error(id, "exec: no terminal (devpts)");
			goto out;
		}
		c->pty = true;
	} else if (pipe2(o, O_CLOEXEC) < 0 || pipe2(e, O_CLOEXEC) < 0 ||
		   (json_is_true(json_object_get(req, "stdin"))
			? pipe2(i, O_CLOEXEC)
			: (i[0] = open("/dev/null", O_RDONLY | O_CLOEXEC))) < 0) {
		send_error(id, "exec: out of resources");
		goto out;
	}
	c->cg = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	c->timer = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	c->id = id;
	c->start_ns = now_ns();
	pid_t pid = c->cg < 0 || c->timer < 0 ? -1 : fork();
	if (pid == 0)
		child(req, c->cg, i[0], o[1], e[1], ep[1]);
	if (pid < 0) {
		send_error(id, "exec: fork failed");
		closefd(&c->cg);
		closefd(&c->timer);
		goto out;
	}
	close(ep[1]);
	ep[1] = -1;
	ssize_t n = read(ep[0], c->exec_error, sizeof(c->exec_error) - 1);
	c->exec_error[n > 0 ? n : 0] = '\0';
	c->pid = pid;
	c->out = o[0];
	c->err = e[0];
	c->in = i[1];
	o[0] = e[0] = i[1] = -1;
	if (c->in >= 0)
		fcntl(c->in, F_SETFL, O_NONBLOCK);
	json_int_t t = json_integer_value(json_object_get(req, "timeout_ms"));
	if (t > 0) {
		c->deadline_ns = c->start_ns + (uint64_t)t * 1000000ull;
		arm(c->timer, (uint64_t)t);
	}
	g_cmds[slot] = c;
	c = NULL;
out:
	closefd(&o[0]);
	closefd(&o[1]);
	closefd(&e[0]);
	closefd(&e[1]);
	closefd(&i[0]);
	closefd(&i[1]);
	closefd(&ep[0]);
	closefd(&ep[1]);
	free(c);
	json_decref(req);
}

static void flush_stdin(struct cmd *c)
{
	while (c->in >= 0 && c->npending) {
		ssize_t w = write(c->in, c->pending, c->npending);
		if (w < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return;
			c->npending = 0; /* EPIPE: the command stopped reading */
			break;
		}
		memmove(c->pending, c->pending + w, c->npending - (size_t)w);
		c->npending -= (size_t)w;
	}
	if (c->in_eof && c->npending == 0)
		closefd(&c->in);
}

static void do_stdin(uint32_t id, const uint8_t *p, uint32_t len)
{
	struct cmd *c = find(id);
	if (c == NULL || c->in < 0)
		return; /* finished, or stdin closed: late input is dropped */
	if (len == 0) {
		c->in_eof = true;
	} else {
		/* At most 4 MiB waits for a command that does not read; a
		 * host sending more is told so and the excess is dropped. */
		if (c->npending + len > (4u << 20)) {
			send_error(id, "stdin: more than 4 MiB waiting; dropped");
			return;
		}
		char *n = realloc(c->pending, c->npending + len);
		if (n == NULL)
			return;
		c->pending = n;
		memcpy(c->pending + c->npending, p, len);
		c->npending += len;
	}
	flush_stdin(c);
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* A VM restored from a template wakes up as a copy of the template's
 * guest: same hostname, same RNG state, its clocks where the snapshot
 * stopped them. The host tells it who it is now; the answer is a new
 * HELLO, so the host knows the identity is in place before any command. */
static void do_identity(const uint8_t *p, uint32_t len)
{
	json_error_t je;
	json_t *j = json_loadb((const char *)p, len, 0, &je);
	const char *host = json_string_value(json_object_get(j, "hostname"));
	const char *seed = json_string_value(json_object_get(j, "seed"));
	json_t *rt = json_object_get(j, "realtime_ns");
	char err[256] = "";
	if (!json_is_object(j) || host == NULL || seed == NULL || !json_is_integer(rt) ||
	    strlen(seed) > 128 || strlen(seed) % 2) {
		snprintf(err, sizeof(err), "identity: hostname, seed (hex) and realtime_ns needed");
		goto answer;
	}
	if (sethostname(host, strlen(host)) < 0)
		snprintf(err, sizeof(err), "identity: hostname: %s", strerror(errno));
	/* new entropy, credited: the template's pool is shared by every copy */
	struct {
		struct rand_pool_info info;
		uint8_t buf[64];
	} ent = {.info = {.entropy_count = 0, .buf_size = 0}};
	size_t n = strlen(seed) / 2;
	for (size_t i = 0; i < n; i++) {
		int hi = hexval(seed[2 * i]), lo = hexval(seed[2 * i + 1]);
		if (hi < 0 || lo < 0) {
			snprintf(err, sizeof(err), "identity: seed is not hex");
			goto answer;
		}
		ent.buf[i] = (uint8_t)(hi << 4 | lo);
	}
	ent.info.buf_size = (int)n;
	ent.info.entropy_count = (int)n * 8;
	int rfd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
	/* credited entropy alone waits for the next scheduled reseed of the
	 * crng (copies would say the same until then): reseed it now */
	if (rfd < 0 || ioctl(rfd, RNDADDENTROPY, &ent) < 0 || ioctl(rfd, RNDRESEEDCRNG) < 0)
		snprintf(err, sizeof(err), "identity: reseed: %s", strerror(errno));
	if (rfd >= 0)
		close(rfd);
	json_int_t ns = json_integer_value(rt);
	struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000),
			      .tv_nsec = (long)(ns % 1000000000)};
	if (clock_settime(CLOCK_REALTIME, &ts) < 0 && !err[0])
		snprintf(err, sizeof(err), "identity: clock: %s", strerror(errno));
answer:;
	struct timespec up;
	clock_gettime(CLOCK_BOOTTIME, &up);
	json_t *hello = json_pack("{s:i, s:I, s:b, s:b}", "version", 1, "uptime_ms",
				  (json_int_t)(up.tv_sec * 1000 + up.tv_nsec / 1000000), "ok",
				  err[0] == 0, "restored", 1);
	if (hello && err[0])
		json_object_set_new(hello, "error", json_string(err));
	send_json(WR_FRAME_HELLO, 0, hello);
	json_decref(j);
}

static void on_frame(const struct wr_frame *f)
{
	switch (f->type) {
	case WR_FRAME_EXEC: do_exec(f->id, f->payload, f->len); break;
	case WR_FRAME_STDIN: do_stdin(f->id, f->payload, f->len); break;
	case WR_FRAME_KILL: {
		struct cmd *c = find(f->id);
		if (c) {
			c->killed = true;
			cg_kill(c);
		} else if (!linger_kill_now(f->id)) {
			ga_fs_abort(f->id); /* a file write the host gave up on */
		}
		break;
	}
	case WR_FRAME_PING: ga_send(WR_FRAME_PONG, f->id, f->payload, f->len); break;
	case WR_FRAME_RESIZE: do_resize(f->id, f->payload, f->len); break;
	case WR_FRAME_FS: ga_fs_request(f->id, f->payload, f->len); break;
	case WR_FRAME_FS_DATA: ga_fs_data(f->id, f->payload, f->len); break;
	case WR_FRAME_IDENTITY: do_identity(f->payload, f->len); break;
	default: send_error(f->id, "unexpected frame type");
	}
}

static void reap(int sfd)
{
	struct signalfd_siginfo si;
	while (read(sfd, &si, sizeof(si)) == sizeof(si))
		;
	int st;
	pid_t pid;
	while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
		for (int i = 0; i < MAX_CMDS; i++) {
			struct cmd *c = g_cmds[i];
			if (c && c->pid == pid) {
				c->pid = 0;
				c->status = st;
				c->exited = true;
				maybe_finish(c);
				break;
			}
		}
		/* any other pid: an orphan reparented to us, now reaped */
	}
}

static void pump(struct cmd *c, int *fd, uint8_t type)
{
	static char buf[65536];
	ssize_t n = read(*fd, buf, sizeof(buf));
	if (n > 0) {
		ga_send(type, c->id, buf, (uint32_t)n);
		return;
	}
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	closefd(fd);
	maybe_finish(c);
}

static void on_timer(struct cmd *c)
{
	uint64_t ticks;
	if (read(c->timer, &ticks, sizeof(ticks)) < 0)
		return;
	if (c->draining) {
		/* background children hold the pipes: the command is over */
		closefd(&c->out);
		closefd(&c->err);
		finish(c);
		return;
	}
	c->timed_out = true;
	cg_kill(c);
}

void ga_serve(int chan)
{
	g_chan = chan;
	cmds_cgroup_init();
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, NULL);
	int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
	struct wr_frame_reader rd;
	wr_frame_reader_init(&rd);
	static char buf[65536];
	for (;;) {
		struct pollfd pf[2 + 5 * MAX_CMDS + 64];
		struct {
			struct cmd *c;
			int what;
		} who[2 + 5 * MAX_CMDS];
		int n = 0;
		pf[n++] = (struct pollfd){.fd = chan, .events = POLLIN};
		pf[n++] = (struct pollfd){.fd = sfd, .events = POLLIN};
		for (int i = 0; i < MAX_CMDS; i++) {
			struct cmd *c = g_cmds[i];
			if (c == NULL)
				continue;
			int fds[4] = {c->out, c->err, c->timer, c->npending ? c->in : -1};
			for (int k = 0; k < 4; k++) {
				if (fds[k] < 0)
					continue;
				who[n].c = c;
				who[n].what = k;
				pf[n++] = (struct pollfd){.fd = fds[k],
							  .events = k == 3 ? POLLOUT : POLLIN};
			}
		}
		for (int i = 0; i < MAX_CMDS; i++) {
			if (g_linger[i] == NULL)
				continue;
			who[n].c = NULL;
			who[n].what = 10 + i;
			pf[n++] = (struct pollfd){.fd = g_linger[i]->timer, .events = POLLIN};
		}
		int nfs = ga_fs_poll_add(pf + n, 0);
		if (poll(pf, (nfds_t)(n + nfs), -1) < 0)
			continue;
		ga_fs_poll_handle(pf + n, nfs);
		if (pf[1].revents)
			reap(sfd);
		for (int k = 2; k < n; k++) {
			if (!pf[k].revents)
				continue;
			if (who[k].what >= 10) {
				int i = who[k].what - 10;
				if (g_linger[i] && g_linger[i]->timer == pf[k].fd)
					linger_tick(i, false);
				continue;
			}
			struct cmd *c = who[k].c;
			bool live = false;
			for (int i = 0; i < MAX_CMDS; i++)
				live |= g_cmds[i] == c;
			if (!live || pf[k].fd < 0)
				continue; /* finished earlier in this round */
			switch (who[k].what) {
			case 0:
				if (c->out == pf[k].fd)
					pump(c, &c->out, WR_FRAME_STDOUT);
				break;
			case 1:
				if (c->err == pf[k].fd)
					pump(c, &c->err, WR_FRAME_STDERR);
				break;
			case 2:
				if (c->timer == pf[k].fd)
					on_timer(c);
				break;
			default: flush_stdin(c);
			}
		}
		if (pf[0].revents) {
			ssize_t r = read(chan, buf, sizeof(buf));
			if (r == 0) {
				/* the host side closed: a daemon that died, whose
				 * next run connects again and resyncs (PING). A
				 * frame it was sending is cut: start afresh. The
				 * port reads EOF until then: poll it at 10 Hz. */
				wr_frame_reader_free(&rd);
				wr_frame_reader_init(&rd);
				struct timespec ts = {0, 100 * 1000 * 1000};
				nanosleep(&ts, NULL);
				continue;
			}
			if (r < 0 && errno != EAGAIN && errno != EINTR)
				break;
			if (r > 0 && wr_frame_feed(&rd, buf, (size_t)r) < 0)
				break;
			struct wr_frame f;
			int got;
			while ((got = wr_frame_next(&rd, &f)) == 1)
				on_frame(&f);
			if (got < 0)
				break; /* a broken host stream: nothing sane to answer */
		}
	}
	wr_frame_reader_free(&rd);
}
