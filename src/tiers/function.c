/* The function tier: pools, zygotes and call slots (host side).
 *
 * Pool create:  validate -> uid range (its own, per tenant) -> pool cgroup
 *   (limits of all calls together; pure v2: + leaf "zygote") -> image base
 *   mount -> seccomp program into a memfd -> start the zygote.
 * Zygote start (P = this process, Z = the zygote):
 *   P  clone3(user|mnt|pid|ipc|uts|net, INTO_CGROUP) -> v1 attach
 *      -> uid/gid maps -> idmapped image clone -> send it ("go")
 *   Z  become root of the userns -> cgroupns -> hostname, loopback
 *      -> rootfs (wr_rootfs_setup, as a container) -> /work -> "/"
 *      read-only -> Landlock ruleset of the calls (made here, in the final
 *      root) -> fds 3 (control), 4 (ruleset), 5 (seccomp memfd) -> stdio
 *      /dev/null -> no_new_privs -> every other fd close-on-exec -> exec
 *      warren-zygote (our static binary, by fd) or the image's python3
 *      with warren-pyzygote.py
 *   P  sync EOF = exec'd -> READY on the control socket (or ERROR: a
 *      preload that failed to import).
 * Slots: MAKE {leaf cgroup.procs fds} -> SLOT {pidfd, socket}. The pool
 * keeps `spare` slots forked ahead (grown with concurrency); the leaf of a
 * slot (a finished call's, recycled, or a new one) is ready when its MAKE is
 * sent, so a call never waits for a mkdir.
 * A zygote that died (its pidfd readable) is replaced on the next call;
 * the slots it made died with it (it is PID 1 of their pid namespaces'
 * parent).
 */
#include "tiers/function.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#include "common/cleanup.h"
#include "common/compat.h"
#include "common/util.h"
#include "isolate/caps.h"
#include "isolate/landlock.h"
#include "isolate/mount.h"
#include "isolate/netns.h"
#include "isolate/ns.h"
#include "isolate/rootfs.h"
#include "isolate/seccomp.h"
#include "tiers/container_internal.h"
#include "tiers/function_internal.h"
#include "tiers/function_proto.h"
#include "pyzygote_src.h" /* generated from src/agent/warren-pyzygote.py */

struct wr_function_globals wr_fn_globals;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

int wr_function_init(const struct wr_function_config *cfg, wr_err *err)
{
	pthread_mutex_lock(&g_lock);
	int r = 0;
	struct wr_function_globals *g = &wr_fn_globals;
	if (g->ready)
		goto out;
	if (!wr_cg_globals.ready) {
		r = wr_err_set(err, EINVAL, "function tier: the container tier is not initialised");
		goto out;
	}
	if (cfg == NULL || cfg->zygote_path == NULL) {
		r = wr_err_set(err, EINVAL, "function tier: no warren-zygote binary configured");
		goto out;
	}
	if (access(cfg->zygote_path, X_OK) < 0) {
		r = wr_err_sys(err, "function tier: warren-zygote %s", cfg->zygote_path);
		goto out;
	}
	g->zygote_path = strdup(cfg->zygote_path);
	g->python_path = strdup(cfg->python_path ? cfg->python_path : "/usr/bin/python3");
	if (!g->zygote_path || !g->python_path) {
		r = wr_err_set(err, ENOMEM, "function tier: out of memory");
		goto out;
	}
	g->spare = cfg->spare_slots ? cfg->spare_slots : 2;
	g->max_spare = cfg->max_spare_slots ? cfg->max_spare_slots : 8;
	if (g->max_spare < g->spare)
		g->max_spare = g->spare;
	const struct wr_seccomp_prog *prog;
	if (wr_seccomp_get(WR_SECCOMP_DEFAULT, &prog, err) < 0) {
		r = wr_err_wrap(err, "function tier");
		goto out;
	}
	g->ready = true;
	wr_tier_register(&wr_function_tier);
out:
	pthread_mutex_unlock(&g_lock);
	return r;
}

/* ---- messages ------------------------------------------------------------ */

int wr_fn_send(int sock, const void *buf, size_t len, const int *fds, int nfds)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * 16)];
		struct cmsghdr align;
	} u;
	memset(&u, 0, sizeof(u));
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
	if (nfds > 0) {
		m.msg_control = u.buf;
		m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
	}
	ssize_t n;
	do
		n = sendmsg(sock, &m, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	return n < 0 ? -errno : 0;
}

ssize_t wr_fn_recv(int sock, void *buf, size_t len, int *fds, int *nfds, int max, int flags)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * 16)];
		struct cmsghdr align;
	} u;
	struct iovec iov = {.iov_base = buf, .iov_len = len};
	struct msghdr m = {.msg_iov = &iov,
			   .msg_iovlen = 1,
			   .msg_control = u.buf,
			   .msg_controllen = sizeof(u.buf)};
	ssize_t n;
	do
		n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC | flags);
	while (n < 0 && errno == EINTR);
	if (nfds)
		*nfds = 0;
	if (n < 0)
		return -errno;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		int got[16];
		memcpy(got, CMSG_DATA(c), sizeof(int) * (size_t)(k > 16 ? 16 : k));
		for (int i = 0; i < k && i < 16; i++) {
			if (nfds && *nfds < max)
				fds[(*nfds)++] = got[i];
			else
				close(got[i]);
		}
	}
	return n;
}

/* ---- the zygote's child half ---------------------------------------------- */

struct zargs {
	int sync, sync_p, ctl, ctl_p, bpf_fd, exe_fd;
	const int *procs; /* cgroup.procs of the zygote's cgroup, per hierarchy */
	int nprocs;
	const char *mountpoint;
	bool python;
	const char *python_path;
	const char *preload_csv;
};

/* Z runs on a stack ASan does not know (wr_ns_spawn): not instrumented. */
#define ZYGOTE_FN __attribute__((no_sanitize_address))
#define ZYGOTE_STACK (512 * 1024)

static ZYGOTE_FN __attribute__((noreturn)) void zfail(int sync, struct wr_cerr *e)
{
	wr_cerr_send(sync, e);
	_exit(1);
}

/* Move fd to exactly `to` (not close-on-exec). */
static ZYGOTE_FN int place_fd(int fd, int to)
{
	if (fd == to)
		return fcntl(fd, F_SETFD, 0);
	return dup2(fd, to) < 0 ? -1 : 0;
}

/* Runs on its own stack in our memory (wr_ns_spawn, as container.c's PID 1):
 * no allocation, nothing written outside its stack but the wr_cerr sent. */
static ZYGOTE_FN __attribute__((noreturn)) void zygote_run(const struct zargs *a)
{
	struct wr_cerr e = {0};
	/* Our copies of the parent's ends would hide its death from us. */
	close(a->sync_p);
	close(a->ctl_p);
	for (int i = 0; i < a->nprocs; i++) {
		if (write(a->procs[i], "0", 1) != 1) {
			wr_cerr_sys(&e, "join the pool's cgroup");
			zfail(a->sync, &e);
		}
		close(a->procs[i]);
	}
	struct wr_rootfs_spec rs = {
	    .mountpoint_fd = -1, .disk_bytes = 16ull << 20, .disk_inodes = 4096};
	/* As in container.c: opened while our kuid is still the host's root. */
	rs.mountpoint_fd = open(a->mountpoint, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rs.mountpoint_fd < 0) {
		wr_cerr_sys(&e, "open %s", a->mountpoint);
		zfail(a->sync, &e);
	}
	int lower = wr_recv_fd(a->sync);
	if (lower < 0) {
		errno = -lower;
		wr_cerr_sys(&e, "wait for parent");
		zfail(a->sync, &e);
	}
	/* Raw syscalls: see container.c (no setxid broadcast in this child). */
	if (syscall(SYS_setresgid, 0, 0, 0) < 0 || syscall(SYS_setresuid, 0, 0, 0) < 0) {
		wr_cerr_sys(&e, "become root of the user namespace");
		zfail(a->sync, &e);
	}
	if (unshare(CLONE_NEWCGROUP) < 0) {
		wr_cerr_sys(&e, "cgroup namespace");
		zfail(a->sync, &e);
	}
	if (sethostname("warren", 6) < 0) {
		wr_cerr_sys(&e, "hostname");
		zfail(a->sync, &e);
	}
	if (wr_netns_loopback_up(&e) < 0)
		zfail(a->sync, &e);
	if (wr_rootfs_setup(&rs, &lower, 1, &e) < 0) {
		struct wr_cerr w;
		wr_cerr_set(&w, e.errnum, "rootfs: %s", e.msg);
		zfail(a->sync, &w);
	}
	/* The calls' working dir, then the image root read-only: a call writes
	 * only to its own fresh tmpfs mounts. */
	if (mkdir(WR_FNP_WORKDIR, 0755) < 0 && errno != EEXIST) {
		wr_cerr_sys(&e, "mkdir %s", WR_FNP_WORKDIR);
		zfail(a->sync, &e);
	}
	if (mkdir("/tmp", 01777) < 0 && errno != EEXIST) {
		wr_cerr_sys(&e, "mkdir /tmp");
		zfail(a->sync, &e);
	}
	int rootm = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rootm < 0 || wr_mount_setattr(rootm, MOUNT_ATTR_RDONLY, 0, -1, false, &e) < 0) {
		if (rootm < 0)
			wr_cerr_sys(&e, "open /");
		zfail(a->sync, &e);
	}
	close(rootm);
	/* Invariant: made after pivot_root, so its one rule ("/") is the pool's
	 * root; every call restricts itself with it (a domain per call). */
	struct wr_landlock_policy ll = {
	    .scope_signals = true, .scope_abstract_unix = true, .log_denials = true};
	uint32_t ll_flags = 0;
	int rfd = wr_landlock_ruleset(&ll, &ll_flags, &e);
	if (rfd < 0)
		zfail(a->sync, &e);
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0) {
		wr_cerr_sys(&e, "stdio");
		zfail(a->sync, &e);
	}
	/* Into place through high numbers, so no source is overwritten. */
	int hc = fcntl(a->ctl, F_DUPFD_CLOEXEC, 100), hr = fcntl(rfd, F_DUPFD_CLOEXEC, 100),
	    hb = fcntl(a->bpf_fd, F_DUPFD_CLOEXEC, 100);
	int sync = fcntl(a->sync, F_DUPFD_CLOEXEC, 100);
	int exe = a->python ? -1 : fcntl(a->exe_fd, F_DUPFD_CLOEXEC, 100);
	if (hc < 0 || hr < 0 || hb < 0 || sync < 0 || (!a->python && exe < 0) ||
	    place_fd(hc, WR_FNP_FD_CTL) < 0 || place_fd(hr, WR_FNP_FD_LANDLOCK) < 0 ||
	    place_fd(hb, WR_FNP_FD_SECCOMP) < 0) {
		wr_cerr_sys(&e, "zygote fds");
		zfail(a->sync, &e);
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		wr_cerr_sys(&e, "no_new_privs");
		zfail(sync, &e);
	}
	if (wr_close_range(6, ~0U, CLOSE_RANGE_CLOEXEC) < 0) {
		wr_cerr_sys(&e, "close_range");
		zfail(sync, &e);
	}
	/* The zygote works ahead of the calls (forking slots): it yields the CPU
	 * to them. Its slots run in leaves of their own, where this does not
	 * matter any more. */
	if (setpriority(PRIO_PROCESS, 0, WR_FN_ZYGOTE_NICE) < 0) {
		wr_cerr_sys(&e, "nice");
		zfail(sync, &e);
	}
	char flags[16];
	snprintf(flags, sizeof(flags), "%u", ll_flags);
	/* LD_BIND_NOW: the interpreter's symbols are bound once here, not in
	 * every slot it forks (a lazy binding writes the GOT: a page copy). */
	char *const envp[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
			      "HOME=/tmp", "LANG=C.UTF-8", "LD_BIND_NOW=1", NULL};
	if (a->python) {
		char *const argv[] = {
		    "python3", "-I", "-c", (char *)wr_pyzygote_src, flags, (char *)a->preload_csv,
		    NULL};
		execve(a->python_path, argv, envp);
		wr_cerr_sys(&e, "exec %s in the image", a->python_path);
	} else {
		char *const argv[] = {"warren-zygote", flags, NULL};
		syscall(__NR_execveat, exe, "", argv, envp, AT_EMPTY_PATH);
		wr_cerr_sys(&e, "exec warren-zygote");
	}
	zfail(sync, &e);
}

static ZYGOTE_FN int zygote_main(void *arg)
{
	zygote_run(arg);
}

static void unmap_stack(char **stack)
{
	if (*stack == NULL)
		return;
#if defined(__SANITIZE_ADDRESS__)
	/* Frames that ended in exec never unpoisoned their red zones. */
	__asan_unpoison_memory_region(*stack, ZYGOTE_STACK);
#endif
	munmap(*stack, ZYGOTE_STACK);
	*stack = NULL;
}

/* ---- zygote start and stop (pool lock held) ------------------------------- */

void wr_fn_slots_drop(struct fn_slot **list)
{
	while (*list) {
		struct fn_slot *s = *list;
		*list = s->next;
		wr_fn_slot_free(s, true);
	}
}

void wr_fn_zygote_stop(struct wr_function_pool *p)
{
	if (p->ctl >= 0)
		close(p->ctl);
	p->ctl = -1;
	wr_fn_slots_drop(&p->ready);
	wr_fn_slots_drop(&p->pending);
	p->ready_tail = &p->ready;
	p->pending_tail = &p->pending;
	p->nready = p->npending = 0;
	if (p->zpidfd >= 0) {
		/* Z is PID 1 of the pool: the whole pool goes with it. */
		wr_pidfd_send_signal(p->zpidfd, SIGKILL, NULL, 0);
		siginfo_t si;
		while (waitid(P_PIDFD, (id_t)p->zpidfd, &si, WEXITED) < 0 && errno == EINTR)
			;
		close(p->zpidfd);
	}
	p->zpidfd = -1;
	p->zpid = 0;
}

bool wr_fn_zygote_alive(struct wr_function_pool *p)
{
	if (p->zpidfd < 0)
		return false;
	/* Z's pidfd turns readable only once its pid namespace is empty, which
	 * lags its death by the kill of every slot (tens of ms on a loaded
	 * host): a slot taken meanwhile dies under its call. Z's files are
	 * closed first in its exit, and no slot keeps the control socket (they
	 * close it before anything else), so a hang-up there says it sooner. */
	struct pollfd pf[2] = {{.fd = p->zpidfd, .events = POLLIN},
			       {.fd = p->ctl, .events = POLLIN}};
	if (poll(pf, 2, 0) < 0)
		return true;
	return !(pf[0].revents & POLLIN) && !(pf[1].revents & (POLLHUP | POLLERR));
}

int wr_fn_zygote_start(struct wr_function_pool *p, wr_err *err)
{
	struct wr_container_globals *g = &wr_cg_globals;
	int r;
	pid_t pid = -1;
	int zpidfd = -1;
	_cleanup_close_ int sync_p = -1, sync_c = -1, ctl_p = -1, ctl_c = -1, exe = -1, userns = -1,
			    lower = -1;
	bool python = p->language != NULL;
	if (!python) {
		exe = open(wr_fn_globals.zygote_path, O_PATH | O_CLOEXEC);
		if (exe < 0)
			return wr_err_sys(err, "open %s", wr_fn_globals.zygote_path);
	}
	int sp[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
		return wr_err_sys(err, "socketpair");
	sync_p = sp[0];
	sync_c = sp[1];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
		return wr_err_sys(err, "socketpair");
	ctl_p = sp[0];
	ctl_c = sp[1];
	struct wr_cgroup *zcg = p->zcg ? p->zcg : p->cg;
	int procs[WR_FNP_MAX_PROCS];
	int nprocs = wr_cgroup_procs_fds(zcg, false, procs, WR_FNP_MAX_PROCS, err);
	if (nprocs < 0)
		return wr_err_wrap(err, "start zygote");
	struct zargs za = {.sync = sync_c,
			   .sync_p = sync_p,
			   .ctl = ctl_c,
			   .ctl_p = ctl_p,
			   .bpf_fd = p->bpf_fd,
			   .exe_fd = exe,
			   .procs = procs,
			   .nprocs = nprocs,
			   .mountpoint = g->mountpoint,
			   .python = python,
			   .python_path = wr_fn_globals.python_path,
			   .preload_csv = p->preload_csv ? p->preload_csv : ""};
	char *stack = mmap(NULL, ZYGOTE_STACK, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (stack == MAP_FAILED) {
		for (int i = 0; i < nprocs; i++)
			close(procs[i]);
		return wr_err_sys(err, "start zygote: stack");
	}
	/* Z shares our memory until it execs (as container.c's PID 1): it only
	 * reads za (this frame outlives it: every path below sees it exec or
	 * kills and reaps it) and writes its own stack. Invariant: until "go"
	 * Z only joins its cgroups, opens the mountpoint and waits while we
	 * write its maps; after "go" we only wait on the sync socket (the two
	 * share errno). */
	pid = wr_ns_spawn(WR_NS_SANDBOX, zygote_main, &za, stack + ZYGOTE_STACK, &zpidfd, err);
	for (int i = 0; i < nprocs; i++)
		close(procs[i]);
	if (pid < 0) {
		unmap_stack(&stack);
		return wr_err_wrap(err, "start zygote");
	}
	close(steal_fd(&sync_c));
	close(steal_fd(&ctl_c));
	if ((r = wr_idmap_write(pid, &p->idmap, err)) < 0)
		goto fail;
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
	userns = open(path, O_RDONLY | O_CLOEXEC);
	if (userns < 0) {
		r = wr_err_sys(err, "open %s", path);
		goto fail;
	}
	lower = wr_rootfs_lower_for(p->lower_fd, userns, err);
	if (lower < 0) {
		r = lower;
		goto fail;
	}
	int sr = wr_send_fd(sync_p, lower);
	if (sr < 0) {
		errno = -sr;
		r = wr_err_sys(err, "start zygote");
		goto fail;
	}
	if ((r = wr_err_recv(sync_p, err)) < 0)
		goto fail;
	unmap_stack(&stack); /* Z exec'd */
	/* READY, or ERROR (a preload that does not import), or EOF (died). */
	struct pollfd pf = {.fd = ctl_p, .events = POLLIN};
	int pr;
	do
		pr = poll(&pf, 1, 60000);
	while (pr < 0 && errno == EINTR);
	struct wr_fnp_error msg = {0};
	ssize_t n = pr > 0 ? wr_fn_recv(ctl_p, &msg, sizeof(msg), NULL, NULL, 0, 0) : 0;
	if (pr == 0) {
		r = wr_err_set(err, ETIMEDOUT, "zygote did not start within 60 s");
		goto fail;
	}
	if (n >= (ssize_t)sizeof(struct wr_fnp_hdr) && msg.h.type == WR_FNP_ERROR) {
		msg.msg[sizeof(msg.msg) - 1] = 0;
		r = wr_err_set(err, msg.errnum > 0 ? msg.errnum : EIO, "%s", msg.msg);
		goto fail;
	}
	if (n < (ssize_t)sizeof(struct wr_fnp_hdr) || msg.h.magic != WR_FNP_MAGIC ||
	    msg.h.type != WR_FNP_READY) {
		r = wr_err_set(err, ECHILD, "zygote exited during start");
		goto fail;
	}
	p->ctl = steal_fd(&ctl_p);
	p->zpidfd = zpidfd;
	p->zpid = pid;
	p->gen++;
	return 0;
fail:
	wr_err_wrap(err, "start zygote");
	wr_pidfd_send_signal(zpidfd, SIGKILL, NULL, 0);
	siginfo_t si;
	while (waitid(P_PIDFD, (id_t)zpidfd, &si, WEXITED) < 0 && errno == EINTR)
		;
	close(zpidfd);
	/* Z is gone (reaped above) or exec'd: its stack is free. */
	unmap_stack(&stack);
	return r;
}

/* ---- pool create / destroy -------------------------------------------------- */

static void refill_stop(struct wr_function_pool *p)
{
	if (!p->refill_running)
		return;
	pthread_mutex_lock(&p->lock);
	p->refill_stop = true;
	pthread_mutex_unlock(&p->lock);
	wr_fn_top_up(p);
	pthread_join(p->refill, NULL);
	p->refill_running = false;
}

static void pool_free(struct wr_function_pool *p)
{
	if (p->wake >= 0)
		close(p->wake);
	if (p->devnull >= 0)
		close(p->devnull);
	if (p->lower_fd >= 0)
		close(p->lower_fd);
	if (p->bpf_fd >= 0)
		close(p->bpf_fd);
	free(p->image);
	free(p->language);
	free(p->tenant);
	free(p->preload_csv);
	pthread_mutex_destroy(&p->lock);
	pthread_mutex_destroy(&p->leaves_lock);
	free(p);
}

bool wr_function_module_name_ok(const char *m)
{
	if (m == NULL || *m == 0 || strlen(m) > 200)
		return false;
	for (const char *c = m; *c; c++)
		if (!(*c == '_' || *c == '.' || (*c >= 'a' && *c <= 'z') ||
		      (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9')))
			return false;
	return true;
}

static int check_preload(const struct wr_function_pool_spec *s, char **csv, wr_err *err)
{
	size_t len = 1;
	for (size_t i = 0; i < s->n_preload; i++) {
		const char *m = s->preload[i];
		if (!wr_function_module_name_ok(m))
			return wr_err_field(err, "preload",
					    "%s is not a module name (1 to 200 of A-Z a-z 0-9 _ .)",
					    m ? m : "(null)");
		len += strlen(m) + 1;
	}
	*csv = calloc(1, len);
	if (*csv == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	for (size_t i = 0; i < s->n_preload; i++) {
		if (i)
			strcat(*csv, ",");
		strcat(*csv, s->preload[i]);
	}
	return 0;
}

int wr_function_pool_create(const struct wr_function_pool_spec *s, struct wr_function_pool **out,
			    wr_err *err)
{
	struct wr_container_globals *g = &wr_cg_globals;
	if (!wr_fn_globals.ready)
		return wr_err_set(err, EINVAL, "function tier not initialised");
	if (s->image == NULL || *s->image == 0)
		return wr_err_field(err, "image",
				    "an image is required (a rootfs directory or an EROFS file)");
	bool python = false;
	if (s->language && *s->language) {
		if (strcmp(s->language, "python") != 0)
			return wr_err_field(err, "language",
					    "must be \"python\" (or absent for argv calls)");
		python = true;
	} else if (s->n_preload) {
		return wr_err_field(err, "preload", "preloading needs a language");
	}
	if (s->memory_bytes && s->memory_bytes < (32ull << 20))
		return wr_err_field(err, "memory", "a pool needs at least 32 MiB");
	if (s->tmp_bytes && s->tmp_bytes < (64ull << 10))
		return wr_err_field(err, "tmp", "must be at least 64 KiB");
	if (s->tenant && (strlen(s->tenant) > 128 || strchr(s->tenant, '\n')))
		return wr_err_field(err, "tenant", "must be at most 128 characters on one line");

	struct wr_function_pool *p = calloc(1, sizeof(*p));
	if (p == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	pthread_mutex_init(&p->lock, NULL);
	pthread_mutex_init(&p->leaves_lock, NULL);
	p->lower_fd = p->bpf_fd = p->ctl = p->zpidfd = p->wake = p->devnull = -1;
	p->ready_tail = &p->ready;
	p->pending_tail = &p->pending;
	p->spare = wr_fn_globals.spare;
	p->memory_bytes = s->memory_bytes ? s->memory_bytes : 2ull << 30;
	p->pids = s->pids ? s->pids : 4096;
	p->tmp_bytes = s->tmp_bytes ? s->tmp_bytes : 64ull << 20;
	int r;
	char rnd[17];
	if (wr_random_id(rnd) < 0) {
		r = wr_err_set(err, EIO, "no randomness for an id");
		goto fail;
	}
	snprintf(p->id, sizeof(p->id), "fn-%s", rnd);
	p->image = strdup(s->image);
	p->tenant = strdup(s->tenant ? s->tenant : "");
	p->language = python ? strdup("python") : NULL;
	if (!p->image || !p->tenant || (python && !p->language)) {
		r = wr_err_set(err, ENOMEM, "out of memory");
		goto fail;
	}
	if ((r = check_preload(s, &p->preload_csv, err)) < 0)
		goto fail;

	p->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	p->devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (p->wake < 0 || p->devnull < 0) {
		r = wr_err_sys(err, p->wake < 0 ? "eventfd" : "open /dev/null");
		goto fail;
	}
	p->lower_fd = wr_rootfs_lower_open(s->image, err);
	if (p->lower_fd < 0) {
		r = p->lower_fd;
		goto fail;
	}
	/* The seccomp program for the zygote's calls, in a sealed memfd. */
	const struct wr_seccomp_prog *prog;
	if ((r = wr_seccomp_get(WR_SECCOMP_DEFAULT, &prog, err)) < 0)
		goto fail;
	const void *insns;
	size_t ninsns;
	wr_seccomp_prog_insns(prog, &insns, &ninsns);
	p->bpf_fd = memfd_create("warren-seccomp", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (p->bpf_fd < 0 || wr_write_all(p->bpf_fd, insns, ninsns * 8) < 0 ||
	    fcntl(p->bpf_fd, F_ADD_SEALS,
		  F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) < 0) {
		r = wr_err_sys(err, "seccomp memfd");
		goto fail;
	}

	if ((r = wr_idmap_alloc(g->state_dir, p->id, &p->idmap, err)) < 0)
		goto fail;
	p->have_idmap = true;
	struct wr_cgroup_limits lim;
	wr_cgroup_limits_default(&lim);
	lim.memory_bytes = p->memory_bytes;
	lim.pids = p->pids;
	if ((r = wr_cgroup_create(g->cgroot, p->id, &lim, &p->cg, err)) < 0)
		goto fail;
	if (wr_cgroup_root_mode(g->cgroot) == WR_CG_V2 &&
	    (r = wr_cgroup_create_leaf(p->cg, "zygote", &p->zcg, err)) < 0)
		goto fail;
	pthread_mutex_lock(&p->lock);
	r = wr_fn_zygote_start(p, err);
	if (r == 0) {
		while (p->nready + p->npending < p->spare && wr_fn_make_send(p, NULL) == 0)
			;
	}
	pthread_mutex_unlock(&p->lock);
	if (r == 0) {
		int pr = pthread_create(&p->refill, NULL, wr_fn_refill_main, p);
		if (pr != 0) {
			errno = pr;
			r = wr_err_sys(err, "refill thread");
			pthread_mutex_lock(&p->lock);
			wr_fn_zygote_stop(p);
			pthread_mutex_unlock(&p->lock);
		}
		p->refill_running = pr == 0;
	}
	if (r < 0)
		goto fail;
	p->last_used_ns = wr_now_ns();
	*out = p;
	return 0;
fail:
	wr_err_wrap(err, "create function pool");
	if (p->zcg)
		wr_cgroup_close(p->zcg);
	if (p->cg)
		wr_cgroup_destroy(&p->cg, NULL);
	if (p->have_idmap)
		wr_idmap_free(g->state_dir, &p->idmap, NULL);
	pool_free(p);
	return r < 0 ? r : -EIO;
}

int wr_function_pool_destroy(struct wr_function_pool **pp, wr_err *err)
{
	struct wr_function_pool *p = *pp;
	if (p == NULL)
		return 0;
	*pp = NULL;
	refill_stop(p);
	uint64_t cpu_ns;
	if (wr_fn_phases_on() && p->cg && wr_cgroup_cpu_ns(p->cg, &cpu_ns, NULL) == 0)
		wr_fn_phase_add(WR_FN_PH_POOL_CPU, cpu_ns);
	pthread_mutex_lock(&p->lock);
	p->destroyed = true;
	wr_fn_zygote_stop(p);
	wr_fn_slots_drop(&p->retired);
	pthread_mutex_unlock(&p->lock);
	pthread_mutex_lock(&p->leaves_lock);
	wr_fn_slots_drop(&p->leaves);
	p->nleaves = 0;
	pthread_mutex_unlock(&p->leaves_lock);
	int r = 0;
	/* Kills what is left (calls in flight), removes every leaf. */
	if (p->zcg)
		wr_cgroup_close(p->zcg);
	if (wr_cgroup_destroy(&p->cg, err) < 0)
		r = -1;
	if (wr_idmap_free(wr_cg_globals.state_dir, &p->idmap, r == 0 ? err : NULL) < 0 && r == 0)
		r = -1;
	if (r < 0)
		wr_err_wrap(err, "destroy function pool %s", p->id);
	pool_free(p);
	return r;
}

int wr_function_pool_park(struct wr_function_pool *p, wr_err *err)
{
	(void)err;
	pthread_mutex_lock(&p->lock);
	struct fn_slot *dead = NULL;
	if (p->inflight == 0) {
		wr_fn_zygote_stop(p);
		dead = steal_ptr(&p->retired);
		/* Lock order: the pool's, then the leaves'. */
		pthread_mutex_lock(&p->leaves_lock);
		struct fn_slot **end = &dead;
		while (*end)
			end = &(*end)->next;
		*end = steal_ptr(&p->leaves);
		p->nleaves = 0;
		pthread_mutex_unlock(&p->leaves_lock);
	}
	pthread_mutex_unlock(&p->lock);
	/* A parked pool keeps no leaf of a call, recycled ones included. */
	wr_fn_slots_drop(&dead);
	return 0;
}

const char *wr_function_pool_id(const struct wr_function_pool *p)
{
	return p->id; /* immutable after create */
}

pid_t wr_function_pool_zygote_pid(struct wr_function_pool *p)
{
	pthread_mutex_lock(&p->lock);
	pid_t pid = p->ctl >= 0 ? p->zpid : 0;
	pthread_mutex_unlock(&p->lock);
	return pid;
}

uint64_t wr_function_pool_idle_ns(struct wr_function_pool *p)
{
	pthread_mutex_lock(&p->lock);
	uint64_t idle = p->inflight ? 0 : wr_now_ns() - p->last_used_ns;
	pthread_mutex_unlock(&p->lock);
	return idle;
}

void wr_function_pool_leaf_counts(struct wr_function_pool *p, uint64_t *made, uint64_t *reused)
{
	pthread_mutex_lock(&p->leaves_lock);
	*made = p->leaves_made;
	*reused = p->leaves_reused;
	pthread_mutex_unlock(&p->leaves_lock);
}

unsigned wr_function_pool_restarts(struct wr_function_pool *p)
{
	pthread_mutex_lock(&p->lock);
	unsigned n = p->restarts;
	pthread_mutex_unlock(&p->lock);
	return n;
}
