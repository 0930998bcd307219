/* Spawners: sandbox creation in small single-threaded helper processes.
 *
 * Creating a sandbox clone()s the calling process. From a big multi-threaded
 * daemon that copy is the dearest part of a create: every mapping and page
 * table of the daemon is duplicated, and until the child execs warren-init
 * every page the daemon's other threads touch is copied on write, with a
 * TLB shootdown each time. So the daemon forks a few spawners at start,
 * while it is still small, and hands each create to one of them:
 *
 *   daemon thread ──request (spec)──► spawner: wr_container_create()
 *                 ◄──reply (pid 1, uid range, or the error)──
 *   daemon: wr_container_adopt_known() → a handle like any adopted sandbox
 *
 * The spawner stays the parent of the sandboxes it made and reaps their PID
 * 1 when they exit; the daemon watches and kills them through pidfds and
 * cgroups, exactly as after a daemon restart. A spawner that dies is
 * replaced on the next request; its sandboxes are unaffected (their PID 1 is
 * re-parented to the host's init). */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "tiers/container.h"
#include "tiers/container_internal.h"

#define MAX_SPAWNERS 8
#define MSG_MAX (256 * 1024)

/* The request: fixed fields, then NUL-terminated strings in this order:
 * image, hostname, workdir, id, key and value of each env entry, then each
 * of the n_layer_strs layers (none when n_layers is over the limit or the
 * list is missing: the create refuses that before it looks at them). */
struct spawn_req {
	uint64_t memory_bytes, disk_bytes, disk_inodes, pids, cpu_weight, nofile;
	uint64_t n_layers;
	double cpus;
	uint32_t user, group, capset, n_env, n_layer_strs;
	uint8_t has_hostname, has_workdir;
	/* networked: the namespace and its sysfs come as SCM_RIGHTS, and
	 * resolv.conf and hosts follow the layers as two more strings */
	uint8_t has_net;
};

struct spawn_reply {
	int32_t errnum; /* 0: created */
	int32_t init_pid;
	uint32_t slot;
	char field[32];
	char id[65];
	char msg[1024];
};

struct spawner {
	pid_t pid;
	int sock; /* daemon's end, SOCK_SEQPACKET */
	bool busy;
};

static struct spawner g_sp[MAX_SPAWNERS];
static int g_nsp;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;

/* ---- the spawner process ----------------------------------------------- */

static int unpack(char *buf, size_t len, struct wr_sandbox_spec *spec, struct wr_env_kv **env,
		  const char **layers, struct wr_sandbox_net *net)
{
	if (len < sizeof(struct spawn_req))
		return -EBADMSG;
	struct spawn_req q;
	memcpy(&q, buf, sizeof(q));
	char *p = buf + sizeof(q), *end = buf + len;
	const char *s[4];
	for (int i = 0; i < 4; i++) {
		char *z = memchr(p, 0, (size_t)(end - p));
		if (z == NULL)
			return -EBADMSG;
		s[i] = p;
		p = z + 1;
	}
	if (q.n_env > 4096)
		return -EBADMSG;
	*env = calloc(q.n_env + 1, sizeof(**env));
	if (*env == NULL)
		return -ENOMEM;
	for (uint32_t i = 0; i < 2 * q.n_env; i++) {
		char *z = memchr(p, 0, (size_t)(end - p));
		if (z == NULL)
			return -EBADMSG;
		if (i % 2 == 0)
			(*env)[i / 2].key = p;
		else
			(*env)[i / 2].value = p;
		p = z + 1;
	}
	size_t nl = q.n_layer_strs;
	if (nl > WR_MAX_LAYERS || (nl && nl != q.n_layers))
		return -EBADMSG;
	for (size_t i = 0; i < nl; i++) {
		char *z = memchr(p, 0, (size_t)(end - p));
		if (z == NULL)
			return -EBADMSG;
		layers[i] = p;
		p = z + 1;
	}
	const char *netstr[2] = {NULL, NULL};
	for (int i = 0; q.has_net && i < 2; i++) {
		char *z = memchr(p, 0, (size_t)(end - p));
		if (z == NULL)
			return -EBADMSG;
		netstr[i] = p[0] ? p : NULL;
		p = z + 1;
	}
	if (q.has_net && (net->netns_fd < 0 || net->sysfs_fd < 0))
		return -EBADMSG;
	net->resolv_conf = netstr[0];
	net->hosts = netstr[1];
	*spec = (struct wr_sandbox_spec){
	    .image = s[0][0] ? s[0] : NULL,
	    .layers = nl ? layers : NULL,
	    .n_layers = (size_t)q.n_layers,
	    .hostname = q.has_hostname ? s[1] : NULL,
	    .workdir = q.has_workdir ? s[2] : NULL,
	    .id = s[3][0] ? s[3] : NULL,
	    .memory_bytes = q.memory_bytes,
	    .disk_bytes = q.disk_bytes,
	    .disk_inodes = q.disk_inodes,
	    .pids = q.pids,
	    .cpu_weight = q.cpu_weight,
	    .nofile = q.nofile,
	    .cpus = q.cpus,
	    .user = q.user,
	    .group = q.group,
	    .capset = (enum wr_capset)q.capset,
	    .env = *env,
	    .n_env = q.n_env,
	    .net = q.has_net ? net : NULL,
	};
	return 0;
}

union net_cmsg {
	char buf[CMSG_SPACE(2 * sizeof(int))];
	struct cmsghdr align;
};

/* A request, and the two fds of a networked one (else -1). */
static ssize_t recv_req(int sock, char *buf, int fds[2])
{
	struct iovec iov = {.iov_base = buf, .iov_len = MSG_MAX};
	union net_cmsg u;
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	msg.msg_control = u.buf;
	msg.msg_controllen = sizeof(u.buf);
	fds[0] = fds[1] = -1;
	ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
	struct cmsghdr *c = n > 0 ? CMSG_FIRSTHDR(&msg) : NULL;
	if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		if (k == 2)
			memcpy(fds, CMSG_DATA(c), 2 * sizeof(int));
		else
			for (size_t i = 0; i < k; i++)
				close(((int *)(void *)CMSG_DATA(c))[i]);
	}
	return n;
}

static void serve(int sock, int sfd, char *buf)
{
	int fds[2];
	ssize_t n = recv_req(sock, buf, fds);
	if (n <= 0)
		_exit(0); /* the daemon closed its end */
	/* the namespace and sysfs fds are ours until the create is done */
	_cleanup_close_ int netns_fd = fds[0], sysfs_fd = fds[1];
	struct wr_sandbox_net net = {.netns_fd = netns_fd, .sysfs_fd = sysfs_fd};
	struct spawn_reply rep = {0};
	struct wr_sandbox_spec spec;
	_cleanup_free_ struct wr_env_kv *env = NULL;
	const char *layers[WR_MAX_LAYERS];
	int r = unpack(buf, (size_t)n, &spec, &env, layers, &net);
	if (r < 0) {
		rep.errnum = -r;
		snprintf(rep.msg, sizeof(rep.msg), "spawner: malformed request");
	} else {
		struct wr_sandbox *sb = NULL;
		wr_err err = NULL;
		if (wr_container_create(&spec, &sb, &err) < 0) {
			rep.errnum = wr_err_code(err) ? wr_err_code(err) : EIO;
			snprintf(rep.msg, sizeof(rep.msg), "%s", err && err->msg ? err->msg : "?");
			if (err && err->field)
				snprintf(rep.field, sizeof(rep.field), "%s", err->field);
			wr_err_free(&err);
		} else {
			rep.init_pid = wr_sandbox_init_pid(sb);
			rep.slot = sb->idmap.slot;
			snprintf(rep.id, sizeof(rep.id), "%s", wr_sandbox_id(sb));
			wr_container_release(&sb);
		}
	}
	(void)sfd;
	if (send(sock, &rep, sizeof(rep), MSG_NOSIGNAL) != sizeof(rep))
		_exit(0);
}

static void reap(int sfd)
{
	struct signalfd_siginfo si;
	while (read(sfd, &si, sizeof(si)) == sizeof(si))
		;
	while (waitpid(-1, NULL, WNOHANG | __WALL) > 0)
		;
}

static __attribute__((noreturn)) void spawner_main(int sock)
{
	prctl(PR_SET_NAME, "warren-spawner", 0, 0, 0);
	/* the daemon gone means nothing more to create */
	prctl(PR_SET_PDEATHSIG, SIGTERM, 0, 0, 0);
	/* Only SIGCHLD blocked (it is read from a signalfd), whatever the
	 * daemon's thread had blocked: SIGTERM must be able to end us. */
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigprocmask(SIG_SETMASK, &set, NULL);
	signal(SIGTERM, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	signal(SIGPIPE, SIG_IGN);
	int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	char *buf = malloc(MSG_MAX);
	if (sfd < 0 || buf == NULL)
		_exit(1);
	for (;;) {
		struct pollfd pf[2] = {{.fd = sock, .events = POLLIN},
				       {.fd = sfd, .events = POLLIN}};
		/* Idle with images cached: look every second for images the
		 * store reclaimed, so their space is not held here. */
		int idle_ms = wr_container_images_cached() ? 1000 : -1;
		int n = poll(pf, 2, idle_ms);
		if (n < 0)
			continue;
		if (n == 0)
			wr_container_images_sweep();
		if (pf[1].revents & POLLIN)
			reap(sfd);
		if (pf[0].revents & (POLLIN | POLLHUP | POLLERR))
			serve(sock, sfd, buf);
	}
}

/* ---- the daemon side --------------------------------------------------- */

static int start_one(struct spawner *s, wr_err *err)
{
	int sp[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
		return wr_err_sys(err, "spawner: socketpair");
	pid_t pid = fork();
	if (pid < 0) {
		close(sp[0]);
		close(sp[1]);
		return wr_err_sys(err, "spawner: fork");
	}
	if (pid == 0) {
		close(sp[0]);
		spawner_main(sp[1]);
	}
	close(sp[1]);
	s->pid = pid;
	s->sock = sp[0];
	s->busy = false;
	return 0;
}

int wr_container_spawners_start(int n, wr_err *err)
{
	if (!wr_cg_globals.ready)
		return wr_err_set(err, EINVAL, "container tier not initialised");
	if (n < 1 || n > MAX_SPAWNERS)
		return wr_err_set(err, EINVAL, "spawners: between 1 and %d", MAX_SPAWNERS);
	pthread_mutex_lock(&g_lock);
	for (; g_nsp < n; g_nsp++)
		if (start_one(&g_sp[g_nsp], err) < 0) {
			pthread_mutex_unlock(&g_lock);
			return -1;
		}
	pthread_mutex_unlock(&g_lock);
	return 0;
}

static size_t pack(const struct wr_sandbox_spec *spec, char *buf, size_t cap)
{
	struct spawn_req q = {
	    .memory_bytes = spec->memory_bytes,
	    .disk_bytes = spec->disk_bytes,
	    .disk_inodes = spec->disk_inodes,
	    .pids = spec->pids,
	    .cpu_weight = spec->cpu_weight,
	    .nofile = spec->nofile,
	    .cpus = spec->cpus,
	    .user = spec->user,
	    .group = spec->group,
	    .capset = spec->capset,
	    .n_env = (uint32_t)spec->n_env,
	    .n_layers = spec->n_layers,
	    .n_layer_strs =
		spec->n_layers <= WR_MAX_LAYERS && spec->layers ? (uint32_t)spec->n_layers : 0,
	    .has_hostname = spec->hostname != NULL,
	    .has_workdir = spec->workdir != NULL,
	    .has_net = spec->net != NULL,
	};
	size_t off = sizeof(q);
	if (off > cap)
		return 0;
	memcpy(buf, &q, sizeof(q));
	const char *strs[4] = {spec->image ? spec->image : "", spec->hostname ? spec->hostname : "",
			       spec->workdir ? spec->workdir : "", spec->id ? spec->id : ""};
	size_t nl = q.n_layer_strs;
	int n_env = 2 * (int)spec->n_env, n_net = spec->net ? 2 : 0;
	for (int i = 0; i < 4 + n_env + (int)nl + n_net; i++) {
		int k = i - 4 - n_env - (int)nl; /* the net strings */
		const char *str = i < 4	   ? strs[i]
				  : k >= 0 ? (k == 0 ? spec->net->resolv_conf : spec->net->hosts)
				  : i >= 4 + n_env ? spec->layers[i - 4 - n_env]
				  : i % 2 == 0	   ? spec->env[(i - 4) / 2].key
						   : spec->env[(i - 4) / 2].value;
		if (str == NULL)
			str = "";
		size_t l = strlen(str) + 1;
		if (off + l > cap)
			return 0;
		memcpy(buf + off, str, l);
		off += l;
	}
	return off;
}

static ssize_t send_req(int sock, const char *buf, size_t len, const struct wr_sandbox_net *net)
{
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	union net_cmsg u;
	if (net) {
		memset(&u, 0, sizeof(u));
		msg.msg_control = u.buf;
		msg.msg_controllen = sizeof(u.buf);
		struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(2 * sizeof(int));
		int fds[2] = {net->netns_fd, net->sysfs_fd};
		memcpy(CMSG_DATA(c), fds, sizeof(fds));
	}
	ssize_t n;
	do
		n = sendmsg(sock, &msg, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	return n;
}

int wr_container_create_spawned(const struct wr_sandbox_spec *spec, struct wr_sandbox **out,
				wr_err *err)
{
	if (g_nsp == 0 || spec->die_with_parent)
		return wr_container_create(spec, out, err);
	_cleanup_free_ char *buf = malloc(MSG_MAX);
	if (buf == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	size_t len = pack(spec, buf, MSG_MAX);
	if (len == 0)
		return wr_err_field(err, "env", "the sandbox spec is too large");

	pthread_mutex_lock(&g_lock);
	struct spawner *s = NULL;
	for (;;) {
		for (int i = 0; i < g_nsp && s == NULL; i++)
			if (!g_sp[i].busy)
				s = &g_sp[i];
		if (s)
			break;
		pthread_cond_wait(&g_cond, &g_lock);
	}
	s->busy = true;
	pthread_mutex_unlock(&g_lock);

	struct spawn_reply rep;
	int r = 0;
	ssize_t n = -1;
	for (int attempt = 0; attempt < 2; attempt++) {
		if (send_req(s->sock, buf, len, spec->net) == (ssize_t)len) {
			do
				n = recv(s->sock, &rep, sizeof(rep), 0);
			while (n < 0 && errno == EINTR);
			if (n == sizeof(rep))
				break;
		}
		/* The spawner died (or was killed): replace it and retry once. A
		 * create that it finished but could not report is swept by the
		 * daemon's next restart sweep. */
		close(s->sock);
		waitpid(s->pid, NULL, 0);
		if ((r = start_one(s, err)) < 0)
			break;
	}
	pthread_mutex_lock(&g_lock);
	s->busy = false;
	pthread_cond_signal(&g_cond);
	pthread_mutex_unlock(&g_lock);
	if (r < 0)
		return wr_err_wrap(err, "create sandbox");
	if (n != sizeof(rep))
		return wr_err_set(err, EIO, "create sandbox: the spawner did not answer");
	if (rep.errnum) {
		rep.msg[sizeof(rep.msg) - 1] = 0;
		rep.field[sizeof(rep.field) - 1] = 0;
		if (rep.field[0])
			return wr_err_field(err, rep.field, "%s", rep.msg);
		return wr_err_set(err, rep.errnum, "%s", rep.msg);
	}
	rep.id[sizeof(rep.id) - 1] = 0;
	struct wr_sandbox_spec known = *spec;
	known.id = rep.id;
	return wr_container_adopt_known(&known, rep.init_pid, rep.slot, out, err);
}
