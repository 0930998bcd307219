/* The container tier: create and destroy.
 *
 * Create pipeline (parent P = this process, child C = the sandbox's PID 1):
 *
 *   P  validate -> image layers (cached detached mounts) -> seccomp
 *      program (cached) -> clone(CLONE_VM, user|mnt|pid|ipc|uts) onto a
 *      stack of its own
 *   C  open the mountpoint -> unshare a network namespace, lo up
 *      -> hostname -> wait for "go"
 *   P  meanwhile: uid range -> cgroup (limits) + leaf "init" (pure v2)
 *      -> write uid/gid maps -> idmap a clone of each layer to C's userns
 *      -> send them and cgroup.procs fds of C's cgroups to C ("go")
 *   C  join the cgroups (write "0") -> become root of the userns
 *      -> unshare cgroupns -> rootfs (overlay, /proc, /sys, /dev, masks,
 *      pivot_root) -> stdio /dev/null -> setsid -> drop caps -> no_new_privs
 *      -> mark fds close-on-exec -> seccomp (last) -> execveat(warren-init)
 *   P  sync socket EOF (closed by exec) = ready; error message = failure
 *      -> keep a pidfd and an O_PATH fd of the root for file operations.
 *
 * C shares P's memory until its exec (as posix_spawn's child does): the
 * create copies no page tables and its exec tears none down, which was the
 * dearest part of a create. P keeps what C reads alive until C has exec'd
 * or is reaped.
 *
 * Every failure in P undoes what was done (kill + reap C, remove cgroups,
 * free the uid range); mounts live only in C's mount namespace and vanish
 * with it, so nothing mounted is ever left on the host.
 */
#include "tiers/container.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "common/util.h"
#include "isolate/caps.h"
#include "isolate/mount.h"
#include "isolate/netns.h"
#include "isolate/ns.h"
#include "isolate/rootfs.h"
#include "tiers/container_ckpt.h"
#include "tiers/container_internal.h"

struct wr_container_globals wr_cg_globals;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- "go": the lower layers and PID 1's cgroup.procs in one message ---- */

_Static_assert(WR_MAX_LAYERS <= WR_ROOTFS_MAX_LOWER, "rootfs takes every layer a spec may have");

#define MAX_PROCS 8 /* cgroup hierarchies PID 1 joins */

union go_cmsg {
	char buf[CMSG_SPACE(sizeof(int) * (WR_MAX_LAYERS + MAX_PROCS))];
	struct cmsghdr align;
};

static int send_go(int sock, const int *fds, size_t n)
{
	char byte = 'L';
	struct iovec iov = {.iov_base = &byte, .iov_len = 1};
	union go_cmsg u;
	memset(&u, 0, sizeof(u));
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	msg.msg_control = u.buf;
	msg.msg_controllen = CMSG_SPACE(sizeof(int) * n);
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int) * n);
	memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
	ssize_t r;
	do
		r = sendmsg(sock, &msg, MSG_NOSIGNAL);
	while (r < 0 && errno == EINTR);
	return r == 1 ? 0 : -errno;
}

/* Child half (no allocation): at least n and at most max fds into fds;
 * returns their count or -errno. */
static int recv_go(int sock, int *fds, size_t n, size_t max)
{
	char byte;
	struct iovec iov = {.iov_base = &byte, .iov_len = 1};
	union go_cmsg u;
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	msg.msg_control = u.buf;
	msg.msg_controllen = sizeof(u.buf);
	ssize_t r;
	do
		r = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	if (r == 0)
		return -EPIPE;
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	if (c == NULL || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
	    (msg.msg_flags & MSG_CTRUNC) || c->cmsg_len < CMSG_LEN(sizeof(int) * n) ||
	    c->cmsg_len > CMSG_LEN(sizeof(int) * max))
		return -EBADMSG;
	size_t got = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
	memcpy(fds, CMSG_DATA(c), sizeof(int) * got);
	return (int)got;
}

/* ---- process-wide set-up ------------------------------------------------ */

int wr_container_init(const struct wr_container_config *cfg, wr_err *err)
{
	pthread_mutex_lock(&g_lock);
	if (wr_cg_globals.ready) {
		pthread_mutex_unlock(&g_lock);
		return 0;
	}
	struct wr_container_globals *g = &wr_cg_globals;
	const char *state = cfg && cfg->state_dir ? cfg->state_dir : "/var/lib/warren";
	const char *run = cfg && cfg->run_dir ? cfg->run_dir : "/run/warren";
	int r = -1;
	if (cfg == NULL || cfg->init_path == NULL) {
		r = wr_err_set(err, EINVAL, "container tier: no warren-init binary configured");
		goto out;
	}
	if (access(cfg->init_path, X_OK) < 0) {
		r = wr_err_sys(err, "container tier: warren-init %s", cfg->init_path);
		goto out;
	}
	g->state_dir = strdup(state);
	g->run_dir = strdup(run);
	g->init_path = strdup(cfg->init_path);
	if (asprintf(&g->mountpoint, "%s/root", run) < 0)
		g->mountpoint = NULL;
	if (!g->state_dir || !g->run_dir || !g->init_path || !g->mountpoint) {
		r = wr_err_set(err, ENOMEM, "container tier: out of memory");
		goto out;
	}
	if (wr_mkdir_p(g->state_dir, 0700, err) < 0 || wr_mkdir_p(g->mountpoint, 0755, err) < 0) {
		r = wr_err_wrap(err, "container tier");
		goto out;
	}
	if (cfg->cgroot)
		g->cgroot = cfg->cgroot;
	else if (wr_cgroup_root_open(cfg->cgroup_base, &g->cgroot, err) < 0) {
		r = wr_err_wrap(err, "container tier");
		goto out;
	}
	if (wr_container_offline_sysfs(g, err) < 0) {
		r = wr_err_wrap(err, "container tier");
		goto out;
	}
	/* Compile both seccomp profiles now, off every later hot path. */
	const struct wr_seccomp_prog *p;
	if (wr_seccomp_get(WR_SECCOMP_DEFAULT, &p, err) < 0 ||
	    wr_seccomp_get(WR_SECCOMP_INIT, &p, err) < 0) {
		r = wr_err_wrap(err, "container tier");
		goto out;
	}
	g->ready = true;
	r = 0;
out:
	pthread_mutex_unlock(&g_lock);
	return r;
}

/* ---- the child half ----------------------------------------------------- */

struct child_args {
	int sync;	 /* child's end of the sync socket */
	int sync_p;	 /* the parent's end (our copy is closed first) */
	int init_fd;	 /* O_PATH of warren-init */
	size_t n_lowers; /* lower layers that come with "go" */
	bool die_with_parent;
	bool join_net;			 /* cloned into a pool namespace: make none */
	const char *resolv_conf, *hosts; /* networked: written into /etc */
	const char *hostname;
	const char *mountpoint;
	struct wr_rootfs_spec rootfs;
	const struct wr_seccomp_prog *seccomp;
};

/* C runs on a stack ASan does not know: its entry points are not
 * instrumented (ASan would warn about a stack switch at every _exit). */
#define CHILD_FN __attribute__((no_sanitize_address))

static CHILD_FN __attribute__((noreturn)) void child_fail(int sync, struct wr_cerr *e)
{
	wr_cerr_send(sync, e);
	_exit(1);
}

/* Runs on its own stack in the caller's memory (wr_ns_spawn): no allocation,
 * and nothing written outside its own stack but the wr_cerr it sends. */
static CHILD_FN __attribute__((noreturn)) void child_run(const struct child_args *a)
{
	struct wr_cerr e = {0};
	/* Our copy of the parent's end would keep us from seeing EOF if the
	 * parent died before "go". */
	close(a->sync_p);
	if (a->die_with_parent && prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0) {
		wr_cerr_sys(&e, "set parent-death signal");
		child_fail(a->sync, &e);
	}
	/* The mountpoint is opened while our kuid is still the host's root
	 * (before setresuid below): its parent directories may be private to
	 * root (a test's mkdtemp), and as the sandbox's uid we could not walk
	 * them. Our mount namespace is already our own, so the fd is usable. */
	struct wr_rootfs_spec rs = a->rootfs;
	int upper = -1, masks = -1;
	rs.upper_out = &upper;
	rs.proc_later = true;
	rs.masks_out = &masks;
	rs.mountpoint_fd = open(a->mountpoint, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rs.mountpoint_fd < 0) {
		wr_cerr_sys(&e, "open %s", a->mountpoint);
		child_fail(a->sync, &e);
	}
	/* While the parent allocates our uid range, makes our cgroups and
	 * writes our id maps: our network namespace (owned by our user
	 * namespace) with lo up, and our hostname. These need no id maps, only
	 * the capabilities we have in our user namespace. */
	if (!a->join_net && wr_netns_new(&e) < 0)
		child_fail(a->sync, &e);
	if (sethostname(a->hostname, strlen(a->hostname)) < 0) {
		wr_cerr_sys(&e, "hostname");
		child_fail(a->sync, &e);
	}
	/* "go": the parent has written our id maps and sends the image's
	 * layers, base first, then cgroup.procs of our cgroups. */
	int fds[WR_MAX_LAYERS + MAX_PROCS];
	int nfd = recv_go(a->sync, fds, a->n_lowers, WR_ARRAY_SIZE(fds));
	if (nfd < 0) {
		errno = -nfd;
		wr_cerr_sys(&e, "wait for parent");
		child_fail(a->sync, &e);
	}
	/* Join our cgroups: the fds were opened by the parent, whose
	 * credentials the kernel checks. */
	for (int i = (int)a->n_lowers; i < nfd; i++) {
		if (write(fds[i], "0", 1) != 1) {
			wr_cerr_sys(&e, "join the sandbox's cgroup");
			child_fail(a->sync, &e);
		}
		close(fds[i]);
	}
	/* Invariant: the maps exist now, so becoming uid 0 makes files we create
	 * belong to the sandbox's host range instead of failing EOVERFLOW. */
	/* Raw syscalls: glibc's wrappers would try to signal the parent's other
	 * threads (setxid broadcast), which do not exist in this process. */
	if (syscall(SYS_setresgid, 0, 0, 0) < 0 || syscall(SYS_setresuid, 0, 0, 0) < 0) {
		wr_cerr_sys(&e, "become root of the user namespace");
		child_fail(a->sync, &e);
	}
	/* Offline: our own network namespace lets every group of ours have an
	 * ICMP ping socket, so that the filter's sock_create hook sees it and
	 * refuses it with an event (the kernel's default range would refuse
	 * it first, unrecorded). Invariant: after the id maps, because the
	 * kernel maps the range's gids into our user namespace. */
	if (!a->join_net && wr_netns_allow_ping(&e) < 0)
		child_fail(a->sync, &e);
	/* We joined our cgroups above: the new cgroup namespace is rooted
	 * there and hides every host cgroup path. */
	if (unshare(CLONE_NEWCGROUP) < 0) {
		wr_cerr_sys(&e, "cgroup namespace");
		child_fail(a->sync, &e);
	}
	if (wr_rootfs_setup(&rs, fds, a->n_lowers, &e) < 0) {
		struct wr_cerr w;
		wr_cerr_set(&w, e.errnum, "rootfs: %s", e.msg);
		child_fail(a->sync, &w);
	}
	if ((a->resolv_conf && wr_netns_write_etc("/etc/resolv.conf", a->resolv_conf, &e) < 0) ||
	    (a->hosts && wr_netns_write_etc("/etc/hosts", a->hosts, &e) < 0))
		child_fail(a->sync, &e);
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0) {
		wr_cerr_sys(&e, "stdio");
		child_fail(a->sync, &e);
	}
	/* A session (and process group) of our own: we were in the caller's,
	 * whose leader lives outside our PID namespace, and CRIU refuses to
	 * dump a tree whose session leader it cannot see. */
	if (setsid() < 0) {
		wr_cerr_sys(&e, "setsid");
		child_fail(a->sync, &e);
	}
	/* Order before exec: capabilities, no_new_privs, fds, seccomp last (it
	 * also governs this setup code once loaded). PID 1 runs no sandbox code,
	 * and its seccomp profile allows no file, socket or process-creation
	 * call at all, so it gets no Landlock domain: that would also forbid
	 * executing warren-init, which lives outside the sandbox root. Every
	 * command gets Landlock (exec.c). */
	if (wr_caps_switch_user(0, 0, 0, &e) < 0)
		child_fail(a->sync, &e);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		wr_cerr_sys(&e, "no_new_privs");
		child_fail(a->sync, &e);
	}
	/* Every fd above 2 closes at exec; the sync socket's close is how the
	 * parent learns that exec succeeded. */
	if (wr_close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) < 0) {
		wr_cerr_sys(&e, "close_range");
		child_fail(a->sync, &e);
	}
	/* ... but two stay open in PID 1, its only fds above 2: the upper
	 * directory, where the host finds the sandbox's changes
	 * (wr_container_upper), and the read-only devfs/ clone that /proc's
	 * masks come from at the first command (wr_container_devpts). */
	if ((upper >= 0 && fcntl(upper, F_SETFD, 0) < 0) ||
	    (masks >= 0 && fcntl(masks, F_SETFD, 0) < 0)) {
		wr_cerr_sys(&e, "keep upper and masks");
		child_fail(a->sync, &e);
	}
	if (wr_seccomp_load(a->seccomp, &e) < 0)
		child_fail(a->sync, &e);
	char *const argv[] = {"warren-init", NULL};
	char *const envp[] = {NULL};
	syscall(__NR_execveat, a->init_fd, "", argv, envp, AT_EMPTY_PATH);
	/* Under seccomp now: report with no library call that might need a
	 * refused syscall. */
	e.errnum = errno;
	memcpy(e.msg, "exec warren-init", sizeof("exec warren-init"));
	child_fail(a->sync, &e);
}

static CHILD_FN int child_main(void *arg)
{
	child_run(arg);
}

/* ---- create ------------------------------------------------------------- */

static void unmap_stack(char **stack)
{
	wr_spawn_stack_put(*stack);
	*stack = NULL;
}

struct wr_sandbox *wr_container_sandbox_alloc(void)
{
	struct wr_sandbox *sb = calloc(1, sizeof(*sb));
	if (sb == NULL)
		return NULL;
	pthread_mutex_init(&sb->leaves_lock, NULL);
	pthread_mutex_init(&sb->devpts_lock, NULL);
	sb->init_pidfd = -1;
	sb->root_fd = -1;
	return sb;
}

void wr_container_sandbox_free(struct wr_sandbox *sb)
{
	if (sb == NULL)
		return;
	wr_env_free(sb->env);
	free(sb->workdir);
	pthread_mutex_destroy(&sb->leaves_lock);
	pthread_mutex_destroy(&sb->devpts_lock);
	free(sb);
}

int wr_container_copy_env(struct wr_sandbox *sb, const struct wr_sandbox_spec *spec, wr_err *err)
{
	static const char *const base[] = {
	    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	    "HOME=/root",
	    "TERM=xterm",
	    "LANG=C.UTF-8",
	};
	sb->env = wr_env_merge(base, WR_ARRAY_SIZE(base), spec->env, spec->n_env, &sb->n_env, err);
	return sb->env ? 0 : -1;
}

/* Validate and fill defaults. Errors name the field. */
int wr_container_normalize(const struct wr_sandbox_spec *in, struct wr_sandbox_spec *s, wr_err *err)
{
	*s = *in;
	if (s->n_layers > 0) {
		if (s->image != NULL && *s->image != 0)
			return wr_err_field(err, "image", "give an image or layers, not both");
		if (s->n_layers > WR_MAX_LAYERS)
			return wr_err_field(err, "layers", "at most %d layers (got %zu)",
					    WR_MAX_LAYERS, s->n_layers);
		if (s->layers == NULL)
			return wr_err_field(err, "layers", "%zu layers but no list", s->n_layers);
		for (size_t i = 0; i < s->n_layers; i++) {
			const char *l = s->layers[i];
			struct stat st;
			if (l == NULL || *l == 0)
				return wr_err_field(err, "layers", "layer %zu: no path", i);
			if (stat(l, &st) < 0)
				return wr_err_field(err, "layers", "layer %zu (%s): %s", i, l,
						    strerror(errno));
			if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
				return wr_err_field(
				    err, "layers",
				    "layer %zu (%s): not a directory or an EROFS file", i, l);
		}
	} else if (s->image == NULL || *s->image == 0) {
		return wr_err_field(err, "image",
				    "an image is required (a rootfs directory or an EROFS file)");
	}
	if (s->memory_bytes == 0)
		s->memory_bytes = 512ull << 20;
	if (s->memory_bytes < (8ull << 20))
		return wr_err_field(err, "memory", "must be at least 8 MiB");
	if (s->disk_bytes == 0)
		s->disk_bytes = 1ull << 30;
	if (s->disk_bytes < (1ull << 20))
		return wr_err_field(err, "disk", "must be at least 1 MiB");
	if (s->disk_inodes == 0) {
		s->disk_inodes = s->disk_bytes / 4096;
		if (s->disk_inodes > 1000000)
			s->disk_inodes = 1000000;
		if (s->disk_inodes < 1024)
			s->disk_inodes = 1024;
	}
	if (s->pids == 0)
		s->pids = 512;
	if (s->pids < 4)
		return wr_err_field(err, "pids", "must be at least 4");
	if (s->cpus < 0 || s->cpus > 4096)
		return wr_err_field(err, "cpu", "must be between 0 and 4096");
	if (s->cpu_weight == 0)
		s->cpu_weight = 100;
	if (s->cpu_weight > 10000)
		return wr_err_field(err, "cpu_weight", "must be between 1 and 10000");
	if (s->nofile == 0)
		s->nofile = 1024;
	if (s->nofile > (1u << 20))
		return wr_err_field(err, "nofile", "must be at most 1048576");
	if (s->user >= WR_IDMAP_SIZE)
		return wr_err_field(err, "user", "must be below %u", WR_IDMAP_SIZE);
	if (s->group == 0 && s->user != 0)
		s->group = s->user;
	if (s->group >= WR_IDMAP_SIZE)
		return wr_err_field(err, "group", "must be below %u", WR_IDMAP_SIZE);
	if (s->workdir == NULL || *s->workdir == 0)
		s->workdir = "/";
	if (s->workdir[0] != '/')
		return wr_err_field(err, "workdir", "must be an absolute path");
	if (s->hostname && (strlen(s->hostname) == 0 || strlen(s->hostname) > 63))
		return wr_err_field(err, "hostname", "must be 1 to 63 characters");
	if (s->id &&
	    (strlen(s->id) == 0 || strlen(s->id) > 64 || strchr(s->id, '/') || s->id[0] == '.'))
		return wr_err_field(err, "id", "must be 1 to 64 characters without '/'");
	return 0;
}

int wr_container_create(const struct wr_sandbox_spec *in, struct wr_sandbox **out, wr_err *err)
{
	struct wr_container_globals *g = &wr_cg_globals;
	if (!g->ready)
		return wr_err_set(err, EINVAL, "container tier not initialised");
	struct wr_sandbox_spec spec;
	if (wr_container_normalize(in, &spec, err) < 0)
		return -1;

	struct wr_sandbox *sb = wr_container_sandbox_alloc();
	if (sb == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	sb->init_pid = -1;
	bool have_idmap = false;
	pid_t pid = -1;
	int r;
	_cleanup_close_ int sync_p = -1, sync_c = -1, init_fd = -1, userns = -1, own_net = -1,
			    sysfs = -1;
	/* Lower layers, base first: counted base mounts (held until our
	 * idmapped clones of them exist), then those clones. */
	const char *const *layers = spec.n_layers ? spec.layers : &spec.image;
	size_t n_layers = spec.n_layers ? spec.n_layers : 1, n_idm = 0;
	struct image_entry *base[WR_MAX_LAYERS] = {0};
	int lower[WR_MAX_LAYERS];
	char *stack = NULL;
	int procs[MAX_PROCS], nprocs = 0;
	struct child_args ca = {.sync = -1};

	if (spec.id) {
		snprintf(sb->id, sizeof(sb->id), "%s", spec.id);
	} else {
		char rnd[17];
		if (wr_random_id(rnd) < 0) {
			r = wr_err_set(err, EIO, "no randomness for an id");
			goto fail;
		}
		snprintf(sb->id, sizeof(sb->id), "%s", rnd);
	}
	sb->user = spec.user;
	sb->group = spec.group;
	sb->caps = wr_capset_mask(spec.capset);
	wr_rlimits_default(&sb->rlimits);
	sb->rlimits.nofile = spec.nofile;
	if ((sb->workdir = strdup(spec.workdir)) == NULL) {
		r = wr_err_set(err, ENOMEM, "out of memory");
		goto fail;
	}
	if ((r = wr_container_copy_env(sb, &spec, err)) < 0)
		goto fail;

	for (size_t i = 0; i < n_layers; i++) {
		base[i] = wr_cimage_get(layers[i], err);
		if (base[i] == NULL) {
			r = -1;
			if (spec.n_layers)
				wr_err_wrap(err, "layer %zu", i);
			goto fail;
		}
	}
	const struct wr_seccomp_prog *init_prog;
	if ((r = wr_seccomp_get(WR_SECCOMP_INIT, &init_prog, err)) < 0)
		goto fail;

	init_fd = open(g->init_path, O_PATH | O_CLOEXEC);
	if (init_fd < 0) {
		r = wr_err_sys(err, "open %s", g->init_path);
		goto fail;
	}
	int sp[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0) {
		r = wr_err_sys(err, "socketpair");
		goto fail;
	}
	sync_p = sp[0];
	sync_c = sp[1];
	/* Offline: a clone of the shared sysfs (C consumes its copy of it). */
	if (spec.net == NULL) {
		struct wr_cerr ce = {0};
		if ((sysfs = wr_mount_clone(g->offline_sysfs, "", false, &ce)) < 0) {
			r = wr_err_set(err, ce.errnum, "sysfs: %s", ce.msg);
			goto fail;
		}
	}

	ca = (struct child_args){
	    .sync = sync_c,
	    .sync_p = sync_p,
	    .n_lowers = n_layers,
	    .init_fd = init_fd,
	    .die_with_parent = in->die_with_parent,
	    .join_net = spec.net != NULL,
	    .resolv_conf = spec.net ? spec.net->resolv_conf : NULL,
	    .hosts = spec.net ? spec.net->hosts : NULL,
	    .hostname = spec.hostname ? spec.hostname : sb->id,
	    .mountpoint = g->mountpoint,
	    .rootfs = {.mountpoint_fd = -1,
		       .disk_bytes = spec.disk_bytes,
		       .disk_inodes = spec.disk_inodes,
		       .use_sysfs_fd = true,
		       .sysfs_fd = spec.net ? spec.net->sysfs_fd : sysfs},
	    .seccomp = init_prog,
	};
	stack = wr_spawn_stack_get();
	if (stack == NULL) {
		r = wr_err_sys(err, "create sandbox process: stack");
		goto fail;
	}
	/* C shares our memory until it execs: no copy of this process's page
	 * tables, none to tear down at the exec. It only reads ca (on this
	 * frame, which outlives it: every path below either sees C exec
	 * (sync EOF) or kills and reaps it) and writes its own stack.
	 * C makes its network namespace itself (wr_netns_new), while we make
	 * its uid range, cgroups and id maps: the two dearest parts of a create
	 * overlap.
	 * Invariant: until "go", C only opens the mountpoint, makes its network
	 * namespace and sets its hostname: calls that fail only when the create
	 * fails anyway; after "go" we only wait on the sync socket. We share
	 * the thread's errno with C, so only a double failure could mix up the
	 * errno of a message. */
	/* A networked sandbox joins a pool namespace, which the host's user
	 * namespace owns: C could not setns into it from its own user
	 * namespace, so this thread enters it for the clone (C is born in it)
	 * and returns at once. Network namespaces are per thread: the others
	 * of this process are unaffected. */
	if (spec.net && (r = wr_netns_enter(spec.net->netns_fd, &own_net, err)) < 0)
		goto fail;
	pid = wr_ns_spawn(WR_NS_SANDBOX & ~(uint64_t)CLONE_NEWNET, child_main, &ca,
			  stack + WR_SPAWN_STACK, &sb->init_pidfd, err);
	/* Invariant: back in our own namespace before anything else runs on
	 * this thread (wr_netns_leave aborts otherwise). */
	wr_netns_leave(&own_net);
	if (pid < 0) {
		r = wr_err_wrap(err, "create sandbox process");
		goto fail;
	}
	sb->init_pid = pid;
	close(steal_fd(&sync_c));

	if ((r = wr_idmap_alloc(g->state_dir, sb->id, &sb->idmap, err)) < 0)
		goto fail;
	have_idmap = true;

	struct wr_cgroup_limits lim;
	wr_cgroup_limits_default(&lim);
	lim.memory_bytes = spec.memory_bytes;
	lim.pids = spec.pids;
	/* 100 is what a new cgroup has (v2 cpu.weight; v1 shares 1024): no
	 * write for the default. */
	if (spec.cpu_weight != 100)
		lim.cpu_weight = spec.cpu_weight;
	if (spec.cpus > 0) {
		lim.cpu_period_us = 100000;
		lim.cpu_quota_us = (uint64_t)(spec.cpus * 100000.0);
		if (lim.cpu_quota_us < 1000)
			lim.cpu_quota_us = 1000;
	}
	if ((r = wr_cgroup_create(g->cgroot, sb->id, &lim, &sb->cg, err)) < 0)
		goto fail;
	/* Pure v2 forbids processes in a cgroup whose children have
	 * controllers, so PID 1 gets a leaf there; on v1 and hybrid hosts it
	 * lives in the sandbox cgroup itself, which saves a directory per
	 * hierarchy on every create and destroy. */
	struct wr_cgroup *init_cg = sb->cg;
	if (wr_cgroup_root_mode(g->cgroot) == WR_CG_V2) {
		if ((r = wr_cgroup_create_leaf(sb->cg, "init", &sb->init_cg, err)) < 0)
			goto fail;
		init_cg = sb->init_cg;
	}

	nprocs = wr_cgroup_procs_fds(init_cg, false, procs, MAX_PROCS, err);
	if (nprocs < 0) {
		nprocs = 0;
		r = -1;
		goto fail;
	}
	if ((r = wr_idmap_write(pid, &sb->idmap, err)) < 0)
		goto fail;
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
	userns = open(path, O_RDONLY | O_CLOEXEC);
	if (userns < 0) {
		r = wr_err_sys(err, "open %s", path);
		goto fail;
	}
	for (; n_idm < n_layers; n_idm++) {
		lower[n_idm] = wr_rootfs_lower_for(base[n_idm]->fd, userns, err);
		if (lower[n_idm] < 0) {
			r = lower[n_idm];
			if (spec.n_layers)
				wr_err_wrap(err, "layer %zu", n_idm);
			goto fail;
		}
	}
	/* The clones hold the images' superblocks now: the cache may retire
	 * a base mount from here on without breaking this sandbox. */
	for (size_t i = 0; i < n_layers; i++) {
		wr_cimage_put(base[i]);
		base[i] = NULL;
	}
	/* "go": the layers, base first, then PID 1's cgroup.procs. */
	int go[WR_MAX_LAYERS + MAX_PROCS];
	memcpy(go, lower, n_layers * sizeof(int));
	memcpy(go + n_layers, procs, (size_t)nprocs * sizeof(int));
	int sr = send_go(sync_p, go, n_layers + (size_t)nprocs);
	if (sr < 0) {
		/* C failed before "go": its report is the better explanation */
		if ((r = wr_err_recv(sync_p, err)) < 0)
			goto fail;
		errno = -sr;
		r = wr_err_sys(err, "start sandbox");
		goto fail;
	}
	for (; n_idm > 0; n_idm--)
		close(lower[n_idm - 1]);
	for (; nprocs > 0; nprocs--)
		close(procs[nprocs - 1]);
	/* EOF: the child exec'd warren-init. A message: it failed. */
	if ((r = wr_err_recv(sync_p, err)) < 0)
		goto fail;
	unmap_stack(&stack);
	siginfo_t alive = {0};
	if (waitid(P_PIDFD, (id_t)sb->init_pidfd, &alive, WEXITED | WNOHANG | WNOWAIT) == 0 &&
	    alive.si_pid != 0) {
		r = wr_err_set(err, ECHILD, "sandbox PID 1 died during start (status %d)",
			       alive.si_status);
		goto fail;
	}

	snprintf(path, sizeof(path), "/proc/%d/root", (int)pid);
	sb->root_fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (sb->root_fd < 0) {
		r = wr_err_sys(err, "open sandbox root");
		goto fail;
	}
	*out = sb;
	return 0;

fail:
	wr_err_wrap(err, "create sandbox");
	for (size_t i = 0; i < n_layers; i++)
		wr_cimage_put(base[i]);
	for (; n_idm > 0; n_idm--)
		close(lower[n_idm - 1]);
	for (; nprocs > 0; nprocs--)
		close(procs[nprocs - 1]);
	if (pid > 0) {
		wr_pidfd_send_signal(sb->init_pidfd, SIGKILL, NULL, 0);
		siginfo_t si;
		while (waitid(P_PIDFD, (id_t)sb->init_pidfd, &si, WEXITED) < 0 && errno == EINTR)
			;
	}
	/* C is gone (reaped above) or never ran: its stack is free. */
	unmap_stack(&stack);
	if (sb->init_pidfd >= 0)
		close(sb->init_pidfd);
	if (sb->init_cg)
		wr_cgroup_close(sb->init_cg);
	if (sb->cg)
		wr_cgroup_destroy(&sb->cg, NULL);
	if (have_idmap)
		wr_idmap_free(g->state_dir, &sb->idmap, NULL);
	wr_container_sandbox_free(sb);
	return r < 0 ? r : -EIO;
}

/* ---- kill and destroy --------------------------------------------------- */

/* Wait for PID 1 to be gone: reap it when it is our child, else (adopted
 * after a restart) wait for its pidfd to become readable. */
static void wait_init(struct wr_sandbox *sb)
{
	siginfo_t si;
	if (!sb->adopted) {
		while (waitid(P_PIDFD, (id_t)sb->init_pidfd, &si, WEXITED) < 0 && errno == EINTR)
			;
		return;
	}
	struct pollfd pf = {.fd = sb->init_pidfd, .events = POLLIN};
	while (poll(&pf, 1, 5000) < 0 && errno == EINTR)
		;
}

int wr_container_kill(struct wr_sandbox *sb, wr_err *err)
{
	atomic_store(&sb->killed, true);
	/* The cgroup kill takes every process, including commands that are
	 * still between setns and exec; killing PID 1 alone would miss those. */
	int r = wr_cgroup_kill(sb->cg, err);
	wr_pidfd_send_signal(sb->init_pidfd, SIGKILL, NULL, 0);
	return r < 0 ? wr_err_wrap(err, "kill sandbox %s", sb->id) : 0;
}

int wr_container_destroy(struct wr_sandbox **psb, wr_err *err)
{
	struct wr_sandbox *sb = *psb;
	if (sb == NULL)
		return 0;
	*psb = NULL;
	int r = 0;
	wr_err ignored = NULL;
	if (wr_container_kill(sb, &ignored) < 0 && r == 0)
		r = wr_err_set(err, wr_err_code(ignored), "%s", ignored->msg);
	wr_err_free(&ignored);
	if (sb->init_pidfd >= 0) {
		wait_init(sb);
		close(sb->init_pidfd);
	}
	if (sb->root_fd >= 0)
		close(sb->root_fd);
	pthread_mutex_lock(&sb->leaves_lock);
	for (struct wr_leaf *l = sb->leaves; l;) {
		struct wr_leaf *next = l->next;
		wr_cgroup_close(l->cg);
		free(l);
		l = next;
	}
	sb->leaves = NULL;
	pthread_mutex_unlock(&sb->leaves_lock);
	if (sb->init_cg)
		wr_cgroup_close(sb->init_cg);
	/* a suspended sandbox's checkpoint and kept mounts */
	wr_container_ckpt_drop(sb->id);
	/* Removes the leaves too (init, cmd-N). */
	if (wr_cgroup_destroy(&sb->cg, r == 0 ? err : NULL) < 0 && r == 0)
		r = -1;
	if (wr_idmap_free(wr_cg_globals.state_dir, &sb->idmap, r == 0 ? err : NULL) < 0 && r == 0)
		r = -1;
	if (r < 0)
		wr_err_wrap(err, "destroy sandbox %s", sb->id);
	wr_container_sandbox_free(sb);
	return r;
}

int wr_container_fs(struct wr_sandbox *sb, struct wr_fs *out, wr_err *err)
{
	(void)err;
	out->root_fd = sb->root_fd;
	out->remote = NULL; /* a local root: fsops does the work */
	out->remote_ctx = NULL;
	out->id_base = sb->idmap.base;
	out->uid = sb->idmap.base + sb->user;
	out->gid = sb->idmap.base + sb->group;
	return 0;
}

const char *wr_sandbox_id(const struct wr_sandbox *sb)
{
	return sb->id;
}

pid_t wr_sandbox_init_pid(const struct wr_sandbox *sb)
{
	return sb->init_pid;
}

uid_t wr_sandbox_uid_base(const struct wr_sandbox *sb)
{
	return sb->idmap.base;
}

const struct wr_tier_ops wr_container_tier = {
    .name = "container",
    .create = wr_container_create_op,
    .exec = wr_container_exec,
    .fs = wr_container_fs,
    .kill = wr_container_kill,
    .freeze = wr_container_freeze,
    .frozen = wr_container_frozen,
    .usage = wr_container_usage,
    .cpu_time = wr_container_cpu_time,
    .cpu_share = wr_container_cpu_share,
    .idle_memory = wr_container_idle_memory,
    .idle_release = wr_container_idle_release,
    .upper = wr_container_upper,
    .suspend = wr_container_suspend,
    .save_procs = wr_container_save_procs,
    .start = wr_container_start,
    .destroy = wr_container_destroy,
    .main_pid = wr_sandbox_init_pid,
};

int wr_sandbox_cgroup_v2_fd(const struct wr_sandbox *sb)
{
	return sb->cg ? wr_cgroup_v2_fd(sb->cg) : -1;
}
