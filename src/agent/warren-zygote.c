/* warren-zygote: the native zygote of a function pool (see
 * docs/ARCHITECTURE.md, "Function tier", and src/tiers/function_proto.h).
 *
 * The host starts it as PID 1 of the pool's namespaces (user, mount with the
 * image's root read-only, pid, ipc, uts, net with loopback only), in the
 * pool's cgroup, with fd 3 the control socket, fd 4 the Landlock ruleset of
 * every call and fd 5 a memfd holding the seccomp program. It is small,
 * static and single-threaded, so forking it is cheap.
 *
 * Per MAKE it starts a call slot S ahead of the call:
 *   clone(VM|SETTLS|NEWPID|NEWNS|NEWIPC): S shares our memory until it execs
 *   (no page tables copied, no copy-on-write faults for either of us, and
 *   its exec has no address space of its own to tear down), on a stack and
 *   a copy of our thread-local storage of its own (its errno is its own);
 *   S is PID 1 of a pid namespace of its own, in a network namespace of
 *   its own (loopback only: fresh, or a clean one of an earlier call of
 *   this pool, see g_netns_free),
 *   in its own mount and IPC namespaces -> joins its leaf cgroup (fds from
 *   the host) -> fresh tmpfs on /tmp, /work and /dev/shm, its own devpts
 *   and a /proc of its pid namespace only (subset=pid) -> the call user
 *   without capabilities -> Landlock -> seccomp -> waits for CALL (all of
 *   that ahead of the call, off its path), having told the host it is
 *   PREPARED. no_new_privs, the empty bounding set and the rlimits that do
 *   not depend on the call are the zygote's, set once (zygote_confine).
 * On CALL S writes the input files (as the call user, into its own /work),
 * takes its stdio, lowers its rlimits, marks every other fd close-on-exec
 * and execs argv.
 * The zygote reaps S and tells the host on S's socket (REAPED); the host
 * reads the exit status from the kernel (pidfd) and usage from the leaf.
 *
 * Statically linked with the isolate modules it needs (caps, landlock,
 * netns, rlimit, seccomp) and nothing of the image.
 */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/compat.h"
#include "common/error.h"
#include "isolate/caps.h"
#include "isolate/landlock.h"
#include "isolate/netns.h"
#include "isolate/rlimit.h"
#include "isolate/seccomp.h"
#include "tiers/function_proto.h"

static void *g_bpf;
static size_t g_bpf_n;
static uint32_t g_ll_flags;

/* The memory of one slot, in our address space (S shares it until its
 * exec): this header, S's copy of our TLS and TCB, a guard page, S's stack.
 * Invariant: S touches no memory of ours but this region, the read-only
 * globals set before the first slot (g_bpf, g_ll_flags, g_tls_*), the
 * program's code and libc functions that keep no state (no malloc, no
 * stdio streams: S's libc state is its TLS copy, malloc's arenas are not
 * S's). Mappings S makes in our address space are listed here and unmapped
 * when S is reaped. Reused (pages already faulted in) after S is reaped. */
#define SLOT_MEM (512u * 1024)
#define SLOT_HDR 16384u /* header + TLS copy; the guard page follows */
struct slotmem {
	struct slotmem *next_free;
	void *maps[2]; /* payload and argv arrays S mapped (munmap at reap) */
	size_t map_len[2];
	int sock;
	int nprocs;
	int procs[WR_FNP_MAX_PROCS];
	uint64_t tmp_bytes;
	int netfd;     /* a recycled network namespace S enters, or -1 */
	int net_dirty; /* set by S: netfd was not clean, S made a fresh one */
};
static struct slotmem *g_free_mem;
static unsigned g_nfree_mem;
static size_t g_tls_off, g_tcb_size; /* static TLS below the thread pointer, TCB above */

struct slot {
	pid_t pid;
	int sock;  /* our copy of S's end: REAPED goes here */
	int ns[2]; /* S's mount and IPC namespaces, held until S is reaped */
	int net;   /* S's network namespace (recycled after S is reaped) */
	struct slotmem *mem;
};
static struct slot *g_slots;
static size_t g_nslots, g_aslots;

/* Network namespaces of finished slots, for later slots of this zygote.
 * Making one (copy_net_ns) and the kernel's cleanup of a dropped one cost
 * more CPU than a /bin/true call; reusing one costs a setns and the check
 * wr_netns_reusable. Invariants:
 *  - One zygote serves one pool: one image, profile and tenant (its user
 *    namespace, uid range and cgroup are the tenant's). A namespace here
 *    only ever goes to a later slot of this zygote: calls of two tenants
 *    never share one.
 *  - A namespace enters this list only when the slot that used it has been
 *    reaped. That slot is PID 1 of its pid namespace, so by then every
 *    process of its call is gone too (the kernel reaps the rest of a pid
 *    namespace before its init becomes a zombie); no call gets
 *    CAP_SYS_ADMIN over the pool's user namespace to setns into it, and
 *    nobody else holds it. It leaves the list for exactly one new slot: at
 *    most one call at a time ever runs in it.
 *  - The new slot checks it (wr_netns_reusable: no socket of any family,
 *    none in TIME_WAIT, no fragments, lo unchanged) before anything of its
 *    own opens a socket there; when it is not clean the slot makes a fresh
 *    one instead and sets net_dirty, and we drop the old one at its reap.
 *  - At most NETNS_KEEP are kept; the rest are closed (the kernel frees
 *    them). All are closed when the zygote exits (its pool is reaped or
 *    replaced). */
#define NETNS_KEEP 4
static int g_netns_free[NETNS_KEEP];
static unsigned g_nnetns_free;

static ssize_t recv_fds(int sock, void *buf, size_t len, int *fds, int *nfds, int max)
{
	char cbuf[CMSG_SPACE(sizeof(int) * 16)];
	struct iovec iov = {.iov_base = buf, .iov_len = len};
	struct msghdr m = {
	    .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof(cbuf)};
	ssize_t n;
	do
		n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	*nfds = 0;
	if (n < 0)
		return -1;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		int *p = (int *)CMSG_DATA(c);
		for (int i = 0; i < k; i++) {
			if (*nfds < max)
				fds[(*nfds)++] = p[i];
			else
				close(p[i]);
		}
	}
	return n;
}

static int send_fds(int sock, const void *buf, size_t len, const int *fds, int nfds)
{
	char cbuf[CMSG_SPACE(sizeof(int) * 16)] = {0};
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
	if (nfds > 0) {
		m.msg_control = cbuf;
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
	return n < 0 ? -1 : 0;
}

static void send_error(int sock, uint64_t slot, const struct wr_cerr *e)
{
	struct wr_fnp_error m = {
	    .h = {WR_FNP_MAGIC, WR_FNP_ERROR}, .slot = slot, .errnum = e->errnum};
	snprintf(m.msg, sizeof(m.msg), "%s", e->msg);
	send_fds(sock, &m, sizeof(m), NULL, 0);
}

/* ---- the call slot S ------------------------------------------------------ */

/* The mount points of a slot's fresh filesystems, with their options.
 * Invariant (mount(2) resolves its target path, following symlinks): each
 * is a directory reached through directories only, checked once by the
 * zygote (mountpoints_plain) before its first slot. The zygote's root is
 * read-only and no call ever runs in the zygote's mount namespace (a slot
 * makes its own at clone, before anything of a call runs), so what the
 * check saw is what every slot finds: a slot's mount(2) lands exactly
 * where the fd-based mount (fsmount + move_mount, which never follows the
 * last component) would. One mount(2) per filesystem instead of ~10
 * fsopen/fsconfig/fsmount/move_mount/close calls (the result is the
 * same superblock and mount flags). */
static const struct slot_mount {
	const char *path, *type;
	unsigned long flags;
	const char *opts; /* tmpfs: mode; the size and owner are added */
} g_slot_mounts[] = {
    {"/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "1777"},
    {WR_FNP_WORKDIR, "tmpfs", MS_NOSUID | MS_NODEV, "0755"},
    {"/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "1777"},
    {"/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"},
    /* Only this call's processes; subset=pid leaves out every global
     * /proc file (kcore, sysrq-trigger, ...) instead of masking them. */
    {"/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "subset=pid"},
};
#define N_SLOT_MOUNTS (sizeof(g_slot_mounts) / sizeof(g_slot_mounts[0]))

/* Zygote, before the first slot: every component of every slot mount point
 * is a directory, not a symlink (see g_slot_mounts). */
static int mountpoints_plain(struct wr_cerr *e)
{
	for (size_t i = 0; i < N_SLOT_MOUNTS; i++) {
		char p[64];
		snprintf(p, sizeof(p), "%s", g_slot_mounts[i].path);
		size_t n = strlen(p);
		for (size_t k = 1; k <= n; k++) {
			if (k < n && p[k] != '/')
				continue;
			char c = p[k];
			struct stat st;
			p[k] = 0;
			int r = lstat(p, &st);
			if (r < 0)
				return wr_cerr_sys(e, "slot mount point %s", p);
			if (!S_ISDIR(st.st_mode))
				return wr_cerr_set(e, ENOTDIR,
						   "slot mount point %s: not a directory", p);
			p[k] = c;
		}
	}
	return 0;
}

/* Fresh per-call filesystems in S's own mount namespace. */
static int slot_mounts(uint64_t tmp_bytes, struct wr_cerr *e)
{
	for (size_t i = 0; i < N_SLOT_MOUNTS; i++) {
		const struct slot_mount *m = &g_slot_mounts[i];
		char data[128];
		if (strcmp(m->type, "tmpfs") == 0)
			snprintf(data, sizeof(data), "size=%llu,mode=%s,uid=%d,gid=%d",
				 (unsigned long long)tmp_bytes, m->opts, WR_FNP_CALL_UID,
				 WR_FNP_CALL_UID);
		else
			snprintf(data, sizeof(data), "%s", m->opts);
		if (mount(m->type, m->path, m->type, m->flags, data) < 0)
			return wr_cerr_sys(e, "mount %s on %s", m->type, m->path);
	}
	return 0;
}

/* Input files: relative paths beneath /work, parents created. */
static int write_files(const char *p, const char *end, uint32_t n, struct wr_cerr *e)
{
	int work = open(WR_FNP_WORKDIR, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (work < 0)
		return wr_cerr_sys(e, "open %s", WR_FNP_WORKDIR);
	for (uint32_t i = 0; i < n; i++) {
		struct wr_fnp_file_rec rec;
		if ((size_t)(end - p) < sizeof(rec))
			return wr_cerr_set(e, EINVAL, "files: truncated");
		memcpy(&rec, p, sizeof(rec));
		p += sizeof(rec);
		if ((size_t)(end - p) < rec.name_len ||
		    (size_t)(end - p) - rec.name_len < rec.data_len || rec.name_len == 0 ||
		    rec.name_len >= 4096)
			return wr_cerr_set(e, EINVAL, "files: truncated");
		char name[4096];
		memcpy(name, p, rec.name_len);
		name[rec.name_len] = 0;
		p += rec.name_len;
		/* Parents, one component at a time, all beneath /work. */
		for (char *s = strchr(name, '/'); s; s = strchr(s + 1, '/')) {
			*s = 0;
			if (mkdirat(work, name, 0755) < 0 && errno != EEXIST)
				return wr_cerr_sys(e, "files: mkdir %s", name);
			*s = '/';
		}
		struct open_how how = {.flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
				       .mode = rec.mode & 07777,
				       .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS};
		int fd = wr_openat2(work, name, &how);
		if (fd < 0)
			return wr_cerr_sys(e, "files: create %s", name);
		size_t off = 0;
		while (off < rec.data_len) {
			ssize_t w = write(fd, p + off, rec.data_len - off);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				close(fd);
				return wr_cerr_sys(e, "files: write %s", name);
			}
			off += (size_t)w;
		}
		/* Created by the call user already; mode without the umask. */
		if (fchmod(fd, rec.mode & 07777) < 0) {
			close(fd);
			return wr_cerr_sys(e, "files: chown %s", name);
		}
		close(fd);
		p += rec.data_len;
	}
	close(work);
	return 0;
}

static __attribute__((noreturn)) void slot_exit(int code)
{
	/* Not exit(): atexit handlers and stdio are our zygote's. */
	syscall(SYS_exit, code);
	__builtin_unreachable();
}

static __attribute__((noreturn)) void slot_fail(int sock, struct wr_cerr *e, int code)
{
	send_error(sock, 0, e);
	slot_exit(code);
}

/* A mapping in the shared address space, listed for the zygote to unmap. */
static void *slot_map(struct slotmem *m, size_t len, int fd)
{
	int k = m->maps[0] ? 1 : 0;
	if (m->maps[k])
		return MAP_FAILED;
	void *p = mmap(NULL, len, fd < 0 ? PROT_READ | PROT_WRITE : PROT_READ,
		       fd < 0 ? MAP_PRIVATE | MAP_ANONYMOUS : MAP_PRIVATE, fd, 0);
	if (p != MAP_FAILED) {
		m->map_len[k] = len;
		m->maps[k] = p;
	}
	return p;
}

static int set_rlimit(int res, const char *name, uint64_t v, struct wr_cerr *e)
{
	struct rlimit rl = {.rlim_cur = (rlim_t)v, .rlim_max = (rlim_t)v};
	if (setrlimit(res, &rl) < 0)
		return wr_cerr_sys(e, "rlimit: set %s to %llu", name, (unsigned long long)v);
	return 0;
}

#define SLOT_VEC 4096 /* argv + envp pointers kept on the stack */

static int slot_main(void *arg)
{
	struct slotmem *m = arg;
	int sock = m->sock;
	struct wr_cerr e = {0};
	/* Only stdio (/dev/null: fds received later must not take 0-2, where
	 * dup2 would keep their close-on-exec flag), our socket, the cgroup
	 * files and the Landlock ruleset: the fd table is S's own copy (no
	 * CLONE_FILES). */
	int keep[WR_FNP_MAX_PROCS + 3];
	int nk = 0;
	keep[nk++] = sock;
	keep[nk++] = WR_FNP_FD_LANDLOCK;
	if (m->netfd >= 0)
		keep[nk++] = m->netfd;
	for (int i = 0; i < m->nprocs; i++)
		keep[nk++] = m->procs[i];
	for (int i = 1; i < nk; i++)
		for (int j = i; j > 0 && keep[j - 1] > keep[j]; j--) {
			int t = keep[j];
			keep[j] = keep[j - 1];
			keep[j - 1] = t;
		}
	unsigned from = 3;
	for (int i = 0; i <= nk; i++) {
		unsigned to = i < nk ? (unsigned)keep[i] : ~0U;
		if (to > from && wr_close_range(from, to - 1, 0) < 0) {
			wr_cerr_sys(&e, "close_range");
			slot_fail(sock, &e, 126);
		}
		from = to + 1;
	}
	/* Invariant: joined before anything is charged to us (the mounts'
	 * pages, the call's memory). */
	for (int i = 0; i < m->nprocs; i++) {
		if (write(m->procs[i], "0", 1) != 1) {
			wr_cerr_sys(&e, "join the call's cgroup");
			slot_fail(sock, &e, 126);
		}
	}
	/* (The cgroup.procs fds are close-on-exec: they go at the call's exec,
	 * with no close call each here.) */
	if (slot_mounts(m->tmp_bytes, &e) < 0)
		slot_fail(sock, &e, 126);
	/* A network namespace of its own, loopback only: no call reaches a
	 * socket (TCP, UDP, abstract Unix) of another call of the pool. Either
	 * clone made a fresh one, or we enter one of an earlier, finished call
	 * of this pool (see g_netns_free) and use it only if it is as clean as
	 * a fresh one; else a fresh one after all. */
	if (m->netfd >= 0) {
		struct wr_cerr why = {0};
		if (setns(m->netfd, CLONE_NEWNET) < 0) {
			wr_cerr_sys(&e, "enter a recycled network namespace");
			slot_fail(sock, &e, 126);
		}
		close(m->netfd);
		if (wr_netns_reusable(&why) < 0) {
			m->net_dirty = 1;
			if (wr_netns_new(&e) < 0)
				slot_fail(sock, &e, 126);
		}
	} else if (wr_netns_loopback_up(&e) < 0) {
		slot_fail(sock, &e, 126);
	}
	if (chdir(WR_FNP_WORKDIR) < 0) {
		wr_cerr_sys(&e, "chdir %s", WR_FNP_WORKDIR);
		slot_fail(sock, &e, 126);
	}
	/* The limits that do not depend on the call (no core dumps, no
	 * real-time priority) are the zygote's already (zygote_confine). */
	/* Confined before the call arrives, so that none of this (the filter's
	 * JIT compile above all) is on the call's path: the call user without
	 * capabilities, no_new_privs, Landlock, seccomp. What remains after the
	 * call arrives is unprivileged and allowed by the filter: reading the
	 * message, writing the call's files into our own /work (owned by the
	 * call user), stdio, lowering rlimits, exec. */
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* The bounding set is empty already and no_new_privs set: both since
	 * before our first slot (zygote_confine), inherited by clone, and no
	 * slot makes or enters a user namespace. */
	if (wr_caps_switch_user_bounded(WR_FNP_CALL_UID, WR_FNP_CALL_UID, 0, &e) < 0)
		slot_fail(sock, &e, 126);
	if (wr_landlock_restrict(WR_FNP_FD_LANDLOCK, g_ll_flags, &e) < 0)
		slot_fail(sock, &e, 126);
	close(WR_FNP_FD_LANDLOCK);
	/* Invariant: seccomp is the last privilege-dropping step; nothing after
	 * it needs a privilege or a refused call. */
	if (wr_seccomp_load_insns(g_bpf, g_bpf_n, &e) < 0)
		slot_fail(sock, &e, 126);
	/* The host hands calls to prepared slots first. */
	struct wr_fnp_prepared prepared = {.h = {WR_FNP_MAGIC, WR_FNP_PREPARED}};
	if (send_fds(sock, &prepared, sizeof(prepared), NULL, 0) < 0)
		slot_exit(0); /* the host dropped the slot */

	char hdrbuf[sizeof(struct wr_fnp_call) + WR_FNP_INLINE_MAX];
	char *vec[SLOT_VEC];
	int fds[4];
	int nfds;
	ssize_t n = recv_fds(sock, hdrbuf, sizeof(hdrbuf), fds, &nfds, 4);
	if (n == 0)
		slot_exit(0); /* the host dropped the slot unused */
	struct wr_fnp_call c;
	if (n < (ssize_t)sizeof(c) || nfds < 3) {
		wr_cerr_set(&e, EPROTO, "bad call message");
		slot_fail(sock, &e, 126);
	}
	memcpy(&c, hdrbuf, sizeof(c));
	const char *payload = hdrbuf + sizeof(c);
	if (c.h.magic != WR_FNP_MAGIC || c.h.type != WR_FNP_CALL) {
		wr_cerr_set(&e, EPROTO, "bad call message");
		slot_fail(sock, &e, 126);
	}
	if (c.flags & WR_FNP_PAYLOAD_FD) {
		if (nfds < 4) {
			wr_cerr_set(&e, EPROTO, "call payload missing");
			slot_fail(sock, &e, 126);
		}
		void *pm = slot_map(m, c.payload_len ? c.payload_len : 1, fds[3]);
		if (pm == MAP_FAILED) {
			wr_cerr_sys(&e, "map call payload");
			slot_fail(sock, &e, 126);
		}
		payload = pm;
	} else if ((uint64_t)(n - (ssize_t)sizeof(c)) != c.payload_len) {
		wr_cerr_set(&e, EPROTO, "call payload truncated");
		slot_fail(sock, &e, 126);
	}
	const char *end = payload + c.payload_len;
	if (c.argc == 0 || c.argc > 65536 || c.envc > 65536) {
		wr_cerr_set(&e, EPROTO, "bad argv");
		slot_fail(sock, &e, 126);
	}
	size_t nvec = (size_t)c.argc + c.envc + 2;
	char **argv = vec;
	if (nvec > SLOT_VEC) {
		argv = slot_map(m, nvec * sizeof(char *), -1);
		if (argv == MAP_FAILED) {
			wr_cerr_sys(&e, "argv");
			slot_fail(sock, &e, 126);
		}
	}
	char **envp = argv + c.argc + 1;
	argv[c.argc] = NULL;
	envp[c.envc] = NULL;
	const char *p = payload;
	for (uint32_t i = 0; i < c.argc + c.envc; i++) {
		const char *z = memchr(p, 0, (size_t)(end - p));
		if (z == NULL) {
			wr_cerr_set(&e, EPROTO, "call payload truncated");
			slot_fail(sock, &e, 126);
		}
		if (i < c.argc)
			argv[i] = (char *)p;
		else
			envp[i - c.argc] = (char *)p;
		p = z + 1;
	}
	if (c.nfiles && write_files(p, end, c.nfiles, &e) < 0)
		slot_fail(sock, &e, 126);

	if (dup2(fds[0], 0) < 0 || dup2(fds[1], 1) < 0 || dup2(fds[2], 2) < 0) {
		wr_cerr_sys(&e, "stdio");
		slot_fail(sock, &e, 126);
	}
	if (set_rlimit(RLIMIT_NOFILE, "NOFILE", c.nofile ? c.nofile : 256, &e) < 0 ||
	    (c.cpu_secs && set_rlimit(RLIMIT_CPU, "CPU", c.cpu_secs, &e) < 0) ||
	    (c.fsize && set_rlimit(RLIMIT_FSIZE, "FSIZE", c.fsize, &e) < 0))
		slot_fail(sock, &e, 126);
	/* Every fd but stdio closes at exec; the socket's close is how a
	 * successful exec shows. */
	if (wr_close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) < 0) {
		wr_cerr_sys(&e, "close_range");
		slot_fail(sock, &e, 126);
	}
	execvpe(argv[0], argv, envp);
	int saved = errno;
	e.errnum = saved;
	snprintf(e.msg, sizeof(e.msg), "exec %s: %s", argv[0], strerror(saved));
	slot_fail(sock, &e, saved == ENOENT ? 127 : 126);
}

/* ---- the zygote ----------------------------------------------------------- */

static void netns_put(int fd, bool clean)
{
	if (fd < 0)
		return;
	if (clean && g_nnetns_free < NETNS_KEEP)
		g_netns_free[g_nnetns_free++] = fd;
	else
		close(fd);
}

static void slot_add(pid_t pid, int sock, const int ns[2], int net, struct slotmem *mem)
{
	if (g_nslots == g_aslots) {
		size_t na = g_aslots ? g_aslots * 2 : 16;
		struct slot *ns = realloc(g_slots, na * sizeof(*ns));
		if (ns == NULL) {
			/* S keeps running; its memory stays ours until we exit. */
			close(sock);
			if (net >= 0)
				close(net);
			return;
		}
		g_slots = ns;
		g_aslots = na;
	}
	g_slots[g_nslots++] = (struct slot){pid, sock, {ns[0], ns[1]}, net, mem};
}

/* S is dead (reaped): its region is free again. */
static void mem_release(struct slotmem *m)
{
	for (int k = 0; k < 2; k++)
		if (m->maps[k]) {
			munmap(m->maps[k], m->map_len[k]);
			m->maps[k] = NULL;
		}
	if (g_nfree_mem >= 16) {
		munmap(m, SLOT_MEM);
		return;
	}
	m->next_free = g_free_mem;
	g_free_mem = m;
	g_nfree_mem++;
}

static struct slotmem *mem_get(void)
{
	struct slotmem *m = g_free_mem;
	if (m) {
		g_free_mem = m->next_free;
		g_nfree_mem--;
		return m;
	}
	m = mmap(NULL, SLOT_MEM, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK,
		 -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	/* A guard page between the header and the stack below it. */
	if (mprotect((char *)m + SLOT_HDR, 4096, PROT_NONE) < 0) {
		munmap(m, SLOT_MEM);
		return NULL;
	}
	memset(m, 0, sizeof(*m));
	return m;
}

/* S's thread pointer: a copy of our static TLS (below it) and TCB (above
 * it, whose first and third words point to itself), inside S's header. */
static void *tls_copy(struct slotmem *m)
{
	char *tp = __builtin_thread_pointer();
	uintptr_t at = ((uintptr_t)(m + 1) + g_tls_off + 63) & ~(uintptr_t)63;
	char *ntp = (char *)at;
	memcpy(ntp - g_tls_off, tp - g_tls_off, g_tls_off + g_tcb_size);
	((void **)ntp)[0] = ntp; /* tcb */
	((void **)ntp)[2] = ntp; /* self */
	return ntp;
}

extern const uint32_t _thread_db_sizeof_pthread; /* glibc: sizeof(struct pthread) */

static int tls_layout(void)
{
	const ElfW(Phdr) *ph = (const void *)getauxval(AT_PHDR);
	size_t n = getauxval(AT_PHNUM);
	size_t memsz = 0, align = 1;
	for (size_t i = 0; ph && i < n; i++)
		if (ph[i].p_type == PT_TLS) {
			memsz = ph[i].p_memsz;
			align = ph[i].p_align ? ph[i].p_align : 1;
		}
	g_tls_off = (memsz + align - 1) & ~(align - 1);
	g_tcb_size = _thread_db_sizeof_pthread;
	return sizeof(struct slotmem) + g_tls_off + g_tcb_size + 64 <= SLOT_HDR ? 0 : -1;
}

static void reap(void)
{
	for (;;) {
		int st;
		pid_t pid = waitpid(-1, &st, WNOHANG | __WALL);
		if (pid <= 0)
			return;
		for (size_t i = 0; i < g_nslots; i++) {
			if (g_slots[i].pid != pid)
				continue;
			struct wr_fnp_reaped m = {.h = {WR_FNP_MAGIC, WR_FNP_REAPED}, .status = st};
			send_fds(g_slots[i].sock, &m, sizeof(m), NULL, 0);
			close(g_slots[i].sock);
			/* Tearing S's mounts down (an RCU grace period per unmount)
			 * happens here, after the host has its answer, and not in
			 * S's exit, which the call waits for. */
			for (int k = 0; k < 2; k++)
				if (g_slots[i].ns[k] >= 0)
					close(g_slots[i].ns[k]);
			/* S and its whole pid namespace are gone (g_netns_free). */
			netns_put(g_slots[i].net, !g_slots[i].mem->net_dirty);
			mem_release(g_slots[i].mem);
			g_slots[i] = g_slots[--g_nslots];
			break;
		}
	}
}

static void make_slot(int ctl, const struct wr_fnp_make *mk, int *procs, int nprocs)
{
	struct wr_cerr e = {0};
	int sp[2];
	struct slotmem *mem = mem_get();
	if (mem == NULL) {
		wr_cerr_sys(&e, "slot memory");
		goto fail;
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0) {
		wr_cerr_sys(&e, "socketpair");
		mem_release(mem);
		goto fail;
	}
	mem->sock = sp[1];
	mem->nprocs = nprocs;
	for (int i = 0; i < nprocs; i++)
		mem->procs[i] = procs[i];
	mem->tmp_bytes = mk->tmp_bytes;
	mem->netfd = g_nnetns_free ? g_netns_free[--g_nnetns_free] : -1;
	mem->net_dirty = 0;
	int pidfd = -1;
	pid_t pid = clone(slot_main, (char *)mem + SLOT_MEM,
			  CLONE_VM | CLONE_SETTLS | CLONE_PIDFD | CLONE_NEWPID | CLONE_NEWNS |
			      CLONE_NEWIPC | (mem->netfd < 0 ? CLONE_NEWNET : 0) | SIGCHLD,
			  mem, &pidfd, tls_copy(mem), NULL);
	if (pid < 0) {
		wr_cerr_sys(&e, "start a call slot");
		close(sp[0]);
		close(sp[1]);
		/* Nobody entered it: as clean as before. */
		netns_put(mem->netfd, true);
		mem_release(mem);
		goto fail;
	}
	for (int i = 0; i < nprocs; i++)
		close(procs[i]);
	/* clone made S's namespaces: no race with S here. */
	int ns[2];
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/ns/mnt", (int)pid);
	ns[0] = open(path, O_RDONLY | O_CLOEXEC);
	snprintf(path, sizeof(path), "/proc/%d/ns/ipc", (int)pid);
	ns[1] = open(path, O_RDONLY | O_CLOEXEC);
	int net = mem->netfd;
	if (net < 0) {
		snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
		net = open(path, O_RDONLY | O_CLOEXEC);
	}
	slot_add(pid, sp[1], ns, net, mem);
	struct wr_fnp_slot m = {.h = {WR_FNP_MAGIC, WR_FNP_SLOT}, .slot = mk->slot};
	int fds[2] = {pidfd, sp[0]};
	send_fds(ctl, &m, sizeof(m), fds, 2);
	close(pidfd);
	close(sp[0]);
	return;
fail:
	for (int i = 0; i < nprocs; i++)
		close(procs[i]);
	send_error(ctl, mk->slot, &e);
}

/* What every slot would otherwise do for itself, done once before the first
 * slot; slots inherit it through clone. Invariants:
 *  - Bounding set empty: it only limits what an execve can grant, and the
 *    zygote never execs; it keeps every cap it holds now (CAP_SYS_ADMIN for
 *    the slots' namespaces and mounts, CAP_SETUID/SETGID for their switch
 *    to the call user), so only the slots' and calls' execs see it. No
 *    slot makes or enters a user namespace (that would fill it again).
 *  - no_new_privs: set by our parent before it exec'd us (function.c),
 *    kept across exec and clone, never cleared; checked here, not set.
 *  - No core dumps (a dump would write the zygote's memory, shared with
 *    the slots, and happens only if we crash), RLIMIT_RTPRIO 0. */
static int zygote_confine(struct wr_cerr *e)
{
	int nnp = prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0);
	if (nnp != 1)
		return wr_cerr_set(e, nnp < 0 ? errno : EPERM, "zygote without no_new_privs");
	if (wr_caps_drop_bounding(0, e) < 0)
		return -1;
	struct wr_rlimits rl;
	wr_rlimits_default(&rl);
	rl.nofile = WR_RLIM_UNSET;
	if (wr_rlimits_apply(&rl, e) < 0)
		return -1;
	return mountpoints_plain(e);
}

int main(int argc, char **argv)
{
	if (argc < 2 || tls_layout() < 0)
		return 2;
	g_ll_flags = (uint32_t)strtoul(argv[1], NULL, 10);
	struct stat st;
	if (fstat(WR_FNP_FD_SECCOMP, &st) < 0 || st.st_size <= 0 || st.st_size % 8)
		return 3;
	g_bpf = malloc((size_t)st.st_size);
	if (g_bpf == NULL || pread(WR_FNP_FD_SECCOMP, g_bpf, (size_t)st.st_size, 0) != st.st_size)
		return 3;
	g_bpf_n = (size_t)st.st_size / 8;
	close(WR_FNP_FD_SECCOMP);

	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, NULL);
	int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0)
		return 4;
	int ctl = WR_FNP_FD_CTL;
	struct wr_cerr e = {0};
	if (zygote_confine(&e) < 0) {
		send_error(ctl, 0, &e);
		return 7;
	}
	struct wr_fnp_hdr ready = {WR_FNP_MAGIC, WR_FNP_READY};
	if (send_fds(ctl, &ready, sizeof(ready), NULL, 0) < 0)
		return 6;
	for (;;) {
		struct pollfd pf[2] = {{.fd = ctl, .events = POLLIN},
				       {.fd = sfd, .events = POLLIN}};
		if (poll(pf, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return 5;
		}
		if (pf[1].revents) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof(si)) > 0)
				;
			reap();
		}
		if (pf[0].revents & POLLIN) {
			struct wr_fnp_make mk;
			int procs[WR_FNP_MAX_PROCS], np;
			ssize_t n = recv_fds(ctl, &mk, sizeof(mk), procs, &np, WR_FNP_MAX_PROCS);
			if (n == 0)
				return 0; /* the host closed the pool */
			if (n != (ssize_t)sizeof(mk) || mk.h.magic != WR_FNP_MAGIC ||
			    mk.h.type != WR_FNP_MAKE) {
				for (int i = 0; i < np; i++)
					close(procs[i]);
				continue;
			}
			make_slot(ctl, &mk, procs, np);
		} else if (pf[0].revents & (POLLHUP | POLLERR)) {
			return 0;
		}
	}
}
