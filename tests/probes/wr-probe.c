/* wr-probe: a static multi-call probe that integration and red-team tests
 * copy into a sandbox image and run inside it.
 *
 *   wr-probe <command> [args...]
 *
 * Each command tries one thing and prints ONE result line on stdout, then
 * exits 0 when the probe itself ran: whether the outcome is a pass is for
 * the test to decide. Result lines have the form
 *
 *   <subject> ok [key=value ...]
 *   <subject> errno=<NAME> [key=value ...]
 *
 * with errno names from a fixed table ("errno=<number>" for the rest) and
 * values that never contain spaces: paths and names are %XX-escaped,
 * multi-valued fields are comma-separated (uid=0,0,0,0), limits are
 * soft/hard with "inf" for unlimited. Example:
 *   status ok uid=0,0,0,0 gid=0,0,0,0 groups=0 capinh=... capprm=... capeff=...
 *     capbnd=... capamb=... nonewprivs=1 seccomp=2 seccomp_filters=1 pid=7
 *     ppid=1 hostname=box nofile=1024/1024 core=0/0      (all on one line) Usage
 * errors print "usage: ..." on stderr and exit 2. Commands that are meant to
 * be killed (membomb, sys x32-getpid, yes, kill-self) may print nothing.
 *
 * Commands
 *   sys NAME [PID]      one syscall with benign arguments (see sys_table);
 *                       NAME may also be a number (raw call, zero args).
 *                       PID is the target of ptrace, process_vm_readv,
 *                       kcmp and pidfd_getfd (default 1).
 *   ioctl NAME          FICLONE, FICLONERANGE, FIDEDUPERANGE, FIBMAP,
 *                       XFS_IOC_SWAPEXT, XFS_IOC_EXCHANGE_RANGE, TIOCSTI,
 *                       TIOCLINUX and variants (see ioctl_table) on files
 *                       the probe creates in /tmp, ttys on fd 0 or /dev/tty
 *   status              ids, capability sets, no_new_privs, seccomp, pid,
 *                       ppid, hostname, RLIMIT_NOFILE and RLIMIT_CORE
 *   read PATH           bytes read (at most 1 MiB)
 *   write PATH BYTES    create/truncate PATH and write BYTES bytes of 'x'
 *   ls PATH             number of entries and their names
 *   fds                 every /proc/self/fd entry and its target
 *   forkbomb            fork until failure (children pause); prints the
 *                       count and the errno, then kills the children
 *   threads N           start up to N threads; count and errno
 *   membomb MB          allocate and touch MB MiB (expect an OOM kill)
 *   diskfill DIR        1 MiB writes to DIR/wr-probe-fill.<pid> until
 *                       failure; MiB written and errno (the file stays)
 *   inodefill DIR       empty files in DIR/wr-probe-inodes.<pid>/ until
 *                       failure; count and errno (the files stay)
 *   fdfill              open /dev/null until failure; then raise the soft
 *                       NOFILE limit to the hard one, and the hard above
 *   yes [BYTES]         "y\n" forever, or one line of BYTES bytes without a
 *                       newline, on stdout; summary on stderr at EPIPE
 *   linger SECONDS      setsid + double fork; the grandchild ignores
 *                       SIGTERM/SIGHUP, detaches from stdio, writes its pid
 *                       to /tmp/linger.pid and sleeps; we return at once
 *   sleep SECONDS       sleep
 *   exit N              exit with status N
 *   kill-self SIGNAL    raise SIGNAL (name like TERM/SIGTERM, or number)
 *   kill PID SIGNAL     send SIGNAL to PID (0 probes)
 *   sched-fifo          sched_setscheduler(SCHED_FIFO, 1)
 *   connect-unix PATH   connect a stream unix socket to PATH
 *   connect-abstract NAME  same for the abstract name NAME
 *   connect-tcp ADDR PORT  TCP connect (IPv4 or IPv6 literal), 3 s timeout
 *
 * Deliberately one file with no dependencies but static glibc. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- constants newer than the build headers ----------------------------- */
#ifndef __NR_clone3
#define __NR_clone3 435
#endif
#ifndef __NR_pidfd_open
#define __NR_pidfd_open 434
#endif
#ifndef __NR_pidfd_getfd
#define __NR_pidfd_getfd 438
#endif
#ifndef __NR_open_tree
#define __NR_open_tree 428
#define __NR_move_mount 429
#define __NR_fsopen 430
#define __NR_fsconfig 431
#define __NR_fsmount 432
#define __NR_fspick 433
#endif
#ifndef __NR_mount_setattr
#define __NR_mount_setattr 442
#endif
#ifndef __NR_quotactl_fd
#define __NR_quotactl_fd 443
#endif
#ifndef __NR_memfd_secret
#define __NR_memfd_secret 447
#endif
#ifndef __NR_set_mempolicy_home_node
#define __NR_set_mempolicy_home_node 450
#endif
#ifndef __NR_lsm_set_self_attr
#define __NR_lsm_set_self_attr 460
#endif
#ifndef __NR_open_tree_attr
#define __NR_open_tree_attr 467
#endif
#ifndef __NR_process_madvise
#define __NR_process_madvise 440
#endif
#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif
#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif
#define X32_SYSCALL_BIT 0x40000000L

/* ioctl numbers (x86_64) */
#define P_FICLONE 0x40049409UL	     /* _IOW(0x94, 9, int) */
#define P_FICLONERANGE 0x4020940dUL  /* _IOW(0x94, 13, struct file_clone_range) */
#define P_FIDEDUPERANGE 0xc0189436UL /* _IOWR(0x94, 54, struct file_dedupe_range) */
#define P_FIBMAP 0x1UL		     /* _IO(0x00, 1) */
#define P_XFS_SWAPEXT 0xc0b0586dUL   /* _IOWR('X', 109, struct xfs_swapext) */
#define P_XFS_EXCHRANGE 0x40285881UL /* _IOW('X', 129, struct xfs_exchange_range) */
#define P_TIOCSTI 0x5412UL
#define P_TIOCLINUX 0x541cUL
#define P_FIONREAD 0x541bUL
#define P_TCGETS 0x5401UL

/* ---- output ------------------------------------------------------------- */

static const struct {
	int num;
	const char *name;
} errno_names[] = {
    {EPERM, "EPERM"},
    {ENOENT, "ENOENT"},
    {ESRCH, "ESRCH"},
    {EINTR, "EINTR"},
    {EIO, "EIO"},
    {ENXIO, "ENXIO"},
    {E2BIG, "E2BIG"},
    {ENOEXEC, "ENOEXEC"},
    {EBADF, "EBADF"},
    {ECHILD, "ECHILD"},
    {EAGAIN, "EAGAIN"},
    {ENOMEM, "ENOMEM"},
    {EACCES, "EACCES"},
    {EFAULT, "EFAULT"},
    {EBUSY, "EBUSY"},
    {EEXIST, "EEXIST"},
    {EXDEV, "EXDEV"},
    {ENODEV, "ENODEV"},
    {ENOTDIR, "ENOTDIR"},
    {EISDIR, "EISDIR"},
    {EINVAL, "EINVAL"},
    {ENFILE, "ENFILE"},
    {EMFILE, "EMFILE"},
    {ENOTTY, "ENOTTY"},
    {ETXTBSY, "ETXTBSY"},
    {EFBIG, "EFBIG"},
    {ENOSPC, "ENOSPC"},
    {ESPIPE, "ESPIPE"},
    {EROFS, "EROFS"},
    {EMLINK, "EMLINK"},
    {EPIPE, "EPIPE"},
    {ERANGE, "ERANGE"},
    {ENAMETOOLONG, "ENAMETOOLONG"},
    {ENOSYS, "ENOSYS"},
    {ENOTEMPTY, "ENOTEMPTY"},
    {ELOOP, "ELOOP"},
    {ENODATA, "ENODATA"},
    {EOVERFLOW, "EOVERFLOW"},
    {ENOTSOCK, "ENOTSOCK"},
    {EPROTOTYPE, "EPROTOTYPE"},
    {EOPNOTSUPP, "EOPNOTSUPP"},
    {EAFNOSUPPORT, "EAFNOSUPPORT"},
    {EADDRINUSE, "EADDRINUSE"},
    {EADDRNOTAVAIL, "EADDRNOTAVAIL"},
    {ENETDOWN, "ENETDOWN"},
    {ENETUNREACH, "ENETUNREACH"},
    {ECONNRESET, "ECONNRESET"},
    {EISCONN, "EISCONN"},
    {ETIMEDOUT, "ETIMEDOUT"},
    {ECONNREFUSED, "ECONNREFUSED"},
    {EHOSTUNREACH, "EHOSTUNREACH"},
    {EALREADY, "EALREADY"},
    {EINPROGRESS, "EINPROGRESS"},
    {EDQUOT, "EDQUOT"},
    {ENOKEY, "ENOKEY"},
    {ESTALE, "ESTALE"},
    {EBADFD, "EBADFD"},
    {ENOMSG, "ENOMSG"},
    {EPROTONOSUPPORT, "EPROTONOSUPPORT"},
};

static const char *errname(int e, char buf[24])
{
	for (size_t i = 0; i < sizeof(errno_names) / sizeof(errno_names[0]); i++)
		if (errno_names[i].num == e)
			return errno_names[i].name;
	snprintf(buf, 24, "%d", e);
	return buf;
}

/* Escape a value so it contains no spaces or control bytes. */
static void put_escaped(const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p <= ' ' || *p >= 0x7f || *p == '%' || *p == ',' || *p == '=')
			printf("%%%02X", *p);
		else
			putchar(*p);
	}
}

/* The escaped form of s in a static buffer (one per line is enough). */
static const char *esc(const char *s)
{
	static char out[3 * PATH_MAX + 1];
	size_t o = 0;
	for (const unsigned char *p = (const unsigned char *)s; *p && o + 4 < sizeof(out); p++) {
		if (*p <= ' ' || *p >= 0x7f || *p == '%' || *p == ',' || *p == '=')
			o += (size_t)snprintf(out + o, sizeof(out) - o, "%%%02X", *p);
		else
			out[o++] = (char)*p;
	}
	out[o] = 0;
	return out;
}

/* "<subject> ok" or "<subject> errno=NAME", then optional extra text. */
static void result(const char *subject, long rc, int err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void result(const char *subject, long rc, int err, const char *fmt, ...)
{
	char b[24];
	put_escaped(subject);
	if (rc < 0)
		printf(" errno=%s", errname(err, b));
	else
		printf(" ok");
	if (fmt) {
		va_list ap;
		va_start(ap, fmt);
		putchar(' ');
		vprintf(fmt, ap);
		va_end(ap);
	}
	putchar('\n');
	fflush(stdout);
}

static int usage(const char *msg)
{
	fprintf(stderr, "usage: wr-probe %s\n", msg);
	return 2;
}

static long parse_long(const char *s, long dflt)
{
	if (s == NULL)
		return dflt;
	char *end = NULL;
	errno = 0;
	long v = strtol(s, &end, 0);
	if (errno || end == s || *end)
		return dflt;
	return v;
}

/* ---- sys ---------------------------------------------------------------- */

/* Argument tokens resolved at call time. */
enum {
	A_ZBUF = -1000, /* a zeroed 4 KiB buffer */
	A_ZBUF2,	/* a second one */
	A_NOPATH,	/* "/nonexistent-wr-probe" */
	A_ROOT,		/* "/" */
	A_EMPTY,	/* "" */
	A_SELF,		/* getpid() */
	A_TARGET,	/* the PID argument, default 1 */
	A_TARGETPIDFD,	/* pidfd_open(TARGET) */
	A_LIOV,		/* one iovec over our own buffer */
	A_RIOV_TARGET,	/* one iovec at an address of the target */
	A_RIOV_SELF,	/* one iovec over our own second buffer */
	A_STR_USER,	/* "user" */
	A_STR_NAME,	/* "wr-probe" */
	A_STR_TMPFS,	/* "tmpfs" */
	A_STR_NONE,	/* "none" */
	A_HANDLE,	/* struct file_handle, 8 zero bytes */
	A_BIGHANDLE,	/* struct file_handle with room for 128 bytes */
	A_MNTID,	/* int * */
	A_TIMEX,	/* struct timex, modes 0: a read */
	A_MIN = A_ZBUF,
	A_MAX = A_TIMEX,
};

/* Benign arguments: each call, even where the filter let it through,
 * changes nothing outside the probe (bad magic for reboot, a nonexistent
 * path for mount, a read-only timex, an invalid kexec arch, ...), and
 * most would fail with an errno other than EPERM if they got to the
 * kernel, so an EPERM points at the filter. */
struct sysent {
	const char *name;
	long nr;
	long a[6];
};
static const struct sysent sys_table[] = {
    {"ptrace", __NR_ptrace, {0x4206 /* PTRACE_SEIZE */, A_TARGET, 0, 0}},
    {"process_vm_readv", __NR_process_vm_readv, {A_TARGET, A_LIOV, 1, A_RIOV_TARGET, 1, 0}},
    {"process_vm_writev", __NR_process_vm_writev, {A_SELF, A_LIOV, 1, A_RIOV_SELF, 1, 0}},
    {"process_madvise", __NR_process_madvise, {-1, 0, 0, 0, 0}},
    {"pidfd_getfd", __NR_pidfd_getfd, {A_TARGETPIDFD, 0, 0}},
    {"kcmp", __NR_kcmp, {A_SELF, A_TARGET, 0 /* KCMP_FILE */, 0, 0}},
    {"bpf", __NR_bpf, {0 /* BPF_MAP_CREATE, type UNSPEC */, A_ZBUF, 72}},
    {"perf_event_open", __NR_perf_event_open, {A_ZBUF, 0, -1, -1, 0}},
    {"userfaultfd", __NR_userfaultfd, {O_CLOEXEC}},
    {"io_uring_setup", __NR_io_uring_setup, {1, A_ZBUF}},
    {"io_uring_enter", __NR_io_uring_enter, {-1, 0, 0, 0, 0, 0}},
    {"io_uring_register", __NR_io_uring_register, {-1, 0, 0, 0}},
    {"add_key", __NR_add_key, {A_STR_USER, A_STR_NAME, A_STR_NAME, 8, -2}},
    {"request_key", __NR_request_key, {A_STR_USER, A_STR_NAME, 0, 0}},
    {"keyctl", __NR_keyctl, {0 /* GET_KEYRING_ID */, -3 /* session */, 0}},
    {"mount", __NR_mount, {A_STR_NONE, A_NOPATH, A_STR_TMPFS, 0, 0}},
    {"umount2", __NR_umount2, {A_NOPATH, 0}},
    {"pivot_root", __NR_pivot_root, {A_NOPATH, A_NOPATH}},
    {"chroot", __NR_chroot, {A_ROOT}},
    {"fsopen", __NR_fsopen, {A_STR_TMPFS, 1 /* FSOPEN_CLOEXEC */}},
    {"fsconfig", __NR_fsconfig, {-1, 6 /* CMD_CREATE */, 0, 0, 0}},
    {"fsmount", __NR_fsmount, {-1, 0, 0}},
    {"fspick", __NR_fspick, {AT_FDCWD, A_ROOT, 1 /* FSPICK_CLOEXEC */}},
    {"open_tree", __NR_open_tree, {AT_FDCWD, A_ROOT, 1 | O_CLOEXEC /* CLONE */}},
    {"move_mount", __NR_move_mount, {-1, A_EMPTY, -1, A_EMPTY, 4 /* F_EMPTY_PATH */}},
    {"mount_setattr", __NR_mount_setattr, {-1, A_EMPTY, AT_EMPTY_PATH, A_ZBUF, 32}},
    {"open_tree_attr", __NR_open_tree_attr, {AT_FDCWD, A_ROOT, 1 | O_CLOEXEC, 0, 0}},
    {"unshare", __NR_unshare, {0x10000000 /* CLONE_NEWUSER */}},
    {"setns", __NR_setns, {-1, 0}},
    {"sethostname", __NR_sethostname, {A_STR_NAME, 8}},
    {"setdomainname", __NR_setdomainname, {A_STR_NAME, 8}},
    {"open_by_handle_at", __NR_open_by_handle_at, {AT_FDCWD, A_HANDLE, O_RDONLY}},
    {"name_to_handle_at", __NR_name_to_handle_at, {AT_FDCWD, A_ROOT, A_BIGHANDLE, A_MNTID, 0}},
    {"init_module", __NR_init_module, {A_ZBUF, 0, A_EMPTY}},
    {"finit_module", __NR_finit_module, {-1, A_EMPTY, 0}},
    {"delete_module", __NR_delete_module, {A_STR_NAME, O_NONBLOCK}},
    {"create_module", __NR_create_module, {0}},
    {"get_kernel_syms", __NR_get_kernel_syms, {0}},
    {"query_module", __NR_query_module, {0}},
    {"kexec_load", __NR_kexec_load, {0, 0, 0, 0xdead0000L /* no such arch */}},
    {"kexec_file_load", __NR_kexec_file_load, {-1, -1, 0, A_EMPTY, 0}},
    {"reboot", __NR_reboot, {0, 0, 0, 0} /* bad magic */},
    {"swapon", __NR_swapon, {A_NOPATH, 0}},
    {"swapoff", __NR_swapoff, {A_NOPATH}},
    {"syslog", __NR_syslog, {10 /* SIZE_BUFFER */, 0, 0}},
    {"acct", __NR_acct, {A_NOPATH}},
    {"lookup_dcookie", __NR_lookup_dcookie, {0, 0, 0}},
    {"quotactl", __NR_quotactl, {-1, 0, 0, 0}},
    {"quotactl_fd", __NR_quotactl_fd, {-1, 0, 0, 0}},
    {"nfsservctl", __NR_nfsservctl, {0}},
    {"vhangup", __NR_vhangup, {0}},
    {"iopl", __NR_iopl, {0}},
    {"ioperm", __NR_ioperm, {0x80, 1, 0 /* turn off */}},
    {"personality", __NR_personality, {0x0040000 /* ADDR_NO_RANDOMIZE */}},
    {"personality-query", __NR_personality, {0xffffffffL}},
    {"uselib", __NR_uselib, {A_NOPATH}},
    {"ustat", __NR_ustat, {0, A_ZBUF}},
    {"sysfs", __NR_sysfs, {3}},
    {"_sysctl", __NR__sysctl, {A_ZBUF}},
    {"fanotify_init", __NR_fanotify_init, {0x200 | 1 /* REPORT_FID|CLOEXEC */, O_RDONLY}},
    {"lsm_set_self_attr", __NR_lsm_set_self_attr, {100, A_ZBUF, 0, 0}},
    {"memfd_secret", __NR_memfd_secret, {0}},
    {"settimeofday", __NR_settimeofday, {0, 0}},
    {"clock_settime", __NR_clock_settime, {CLOCK_REALTIME, 0}},
    {"clock_adjtime", __NR_clock_adjtime, {CLOCK_REALTIME, A_TIMEX}},
    {"adjtimex", __NR_adjtimex, {A_TIMEX}},
    {"mbind", __NR_mbind, {A_ZBUF, 0, 0, 0, 0, 0}},
    {"set_mempolicy", __NR_set_mempolicy, {0, 0, 0}},
    {"set_mempolicy_home_node", __NR_set_mempolicy_home_node, {0, 0, 0, 0}},
    {"get_mempolicy", __NR_get_mempolicy, {0, 0, 0, 0, 0}},
    {"move_pages", __NR_move_pages, {0, 0, 0, 0, 0, 0}},
    {"migrate_pages", __NR_migrate_pages, {0, 0, 0, 0}},
    {"modify_ldt", __NR_modify_ldt, {0, A_ZBUF, 16}},
    {"socket-vsock", __NR_socket, {AF_VSOCK, SOCK_STREAM, 0}},
    {"getpid", __NR_getpid, {0}},
};

static char zbuf[4096] __attribute__((aligned(4096)));
static char zbuf2[4096] __attribute__((aligned(4096)));

static long resolve_arg(long a, pid_t target)
{
	static struct iovec liov, riov;
	static struct {
		unsigned int bytes;
		int type;
		unsigned char h[128];
	} handle;
	static int mntid;
	static long timex[32]; /* struct timex is 208 bytes; modes (first) = 0 */
	if (a < A_MIN || a > A_MAX)
		return a;
	switch (a) {
	case A_ZBUF: memset(zbuf, 0, sizeof(zbuf)); return (long)zbuf;
	case A_ZBUF2: return (long)zbuf2;
	case A_NOPATH: return (long)"/nonexistent-wr-probe";
	case A_ROOT: return (long)"/";
	case A_EMPTY: return (long)"";
	case A_SELF: return getpid();
	case A_TARGET: return target;
	case A_TARGETPIDFD: {
		long fd = syscall(__NR_pidfd_open, target, 0);
		return fd >= 0 ? fd : -1;
	}
	case A_LIOV: liov = (struct iovec){zbuf, 1}; return (long)&liov;
	case A_RIOV_TARGET: riov = (struct iovec){(void *)0x400000, 1}; return (long)&riov;
	case A_RIOV_SELF: riov = (struct iovec){zbuf2, 1}; return (long)&riov;
	case A_STR_USER: return (long)"user";
	case A_STR_NAME: return (long)"wr-probe";
	case A_STR_TMPFS: return (long)"tmpfs";
	case A_STR_NONE: return (long)"none";
	case A_HANDLE:
		handle.bytes = 8;
		handle.type = 1;
		return (long)&handle;
	case A_BIGHANDLE:
		handle.bytes = 128;
		handle.type = 0;
		return (long)&handle;
	case A_MNTID: return (long)&mntid;
	case A_TIMEX: memset(timex, 0, sizeof(timex)); return (long)timex;
	}
	return a;
}

/* A clone that, if it succeeds, must not leave a second probe running. */
static long try_clone(unsigned long flags)
{
	long r = syscall(__NR_clone, flags, 0, NULL, NULL, 0);
	if (r == 0)
		_exit(0);
	if (r > 0)
		waitpid((pid_t)r, NULL, __WALL);
	return r;
}

static void *thread_main(void *arg)
{
	return arg;
}

static int cmd_sys(int argc, char **argv)
{
	if (argc < 1)
		return usage("sys NAME [PID]");
	const char *name = argv[0];
	pid_t target = (pid_t)parse_long(argc > 1 ? argv[1] : NULL, 1);
	long r;

	static const struct {
		const char *name;
		unsigned long flag;
	} clones[] = {
	    {"clone-newuser", 0x10000000},   {"clone-newns", 0x00020000},
	    {"clone-newpid", 0x20000000},    {"clone-newnet", 0x40000000},
	    {"clone-newuts", 0x04000000},    {"clone-newipc", 0x08000000},
	    {"clone-newcgroup", 0x02000000}, {"clone-newtime", CLONE_NEWTIME},
	};
	for (size_t i = 0; i < sizeof(clones) / sizeof(clones[0]); i++) {
		if (strcmp(name, clones[i].name) == 0) {
			r = try_clone(clones[i].flag | SIGCHLD);
			result(name, r, errno, NULL);
			return 0;
		}
	}
	if (strcmp(name, "fork") == 0) {
		r = try_clone(SIGCHLD);
		result(name, r, errno, NULL);
		return 0;
	}
	if (strcmp(name, "clone3") == 0) {
		uint64_t args[11] = {0};
		args[4] = SIGCHLD; /* exit_signal */
		r = syscall(__NR_clone3, args, sizeof(args));
		if (r == 0)
			_exit(0);
		int e = errno;
		if (r > 0)
			waitpid((pid_t)r, NULL, 0);
		result(name, r, e, NULL);
		return 0;
	}
	if (strcmp(name, "thread") == 0) {
		pthread_t t;
		int e = pthread_create(&t, NULL, thread_main, NULL);
		if (e == 0)
			pthread_join(t, NULL);
		result(name, e ? -1 : 0, e, NULL);
		return 0;
	}
	if (strcmp(name, "x32-getpid") == 0) {
		/* expected: killed by SIGSYS before this prints anything */
		r = syscall(X32_SYSCALL_BIT | __NR_getpid);
		result(name, r, errno, NULL);
		return 0;
	}
	if (strcmp(name, "i386-getpid") == 0) {
		/* expected: killed (SIGSYS from the filter, or SIGSEGV where the
		 * kernel has IA32 emulation off) */
		long ret = 20;
		__asm__ volatile("int $0x80" : "+a"(ret) : : "memory", "r8", "r9", "r10", "r11");
		result(name, ret < 0 && ret > -4096 ? -1 : 0, (int)-ret, NULL);
		return 0;
	}
	if (strcmp(name, "socket-vsock-hibits") == 0) {
		r = syscall(__NR_socket, (1L << 32) | AF_VSOCK, SOCK_STREAM, 0);
		result(name, r, errno, NULL);
		return 0;
	}
	char *end = NULL;
	long nr = strtol(name, &end, 0);
	if (end != name && *end == 0) {
		r = syscall(nr, 0, 0, 0, 0, 0, 0);
		result(name, r, errno, NULL);
		return 0;
	}
	for (size_t i = 0; i < sizeof(sys_table) / sizeof(sys_table[0]); i++) {
		const struct sysent *s = &sys_table[i];
		if (strcmp(s->name, name) != 0)
			continue;
		long a[6];
		for (int k = 0; k < 6; k++)
			a[k] = resolve_arg(s->a[k], target);
		errno = 0;
		r = syscall(s->nr, a[0], a[1], a[2], a[3], a[4], a[5]);
		result(name, r, errno, NULL);
		return 0;
	}
	fprintf(stderr, "wr-probe: unknown syscall probe '%s'\n", name);
	return 2;
}

/* ---- ioctl -------------------------------------------------------------- */

static int open_tty(void)
{
	if (isatty(0))
		return 0;
	int fd = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);
	return fd >= 0 ? fd : 0;
}

static int cmd_ioctl(int argc, char **argv)
{
	if (argc < 1)
		return usage("ioctl NAME");
	const char *name = argv[0];
	char pa[64], pb[64];
	snprintf(pa, sizeof(pa), "/tmp/wr-probe-ioctl.%d.a", (int)getpid());
	snprintf(pb, sizeof(pb), "/tmp/wr-probe-ioctl.%d.b", (int)getpid());
	int a = open(pa, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int b = open(pb, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (a < 0 || b < 0) {
		result(name, -1, errno, "stage=setup");
		return 0;
	}
	static char block[4096];
	memset(block, 'd', sizeof(block));
	if (write(a, block, sizeof(block)) != (ssize_t)sizeof(block)) {
		result(name, -1, errno, "stage=setup");
		return 0;
	}
	fsync(a);
	unlink(pa);
	unlink(pb);

	struct {
		int64_t src_fd;
		uint64_t src_offset, src_length, dest_offset;
	} fcr = {a, 0, 0, 0};
	struct {
		uint64_t src_offset, src_length;
		uint16_t dest_count, reserved1;
		uint32_t reserved2;
		struct {
			int64_t dest_fd;
			uint64_t dest_offset, bytes_deduped;
			int32_t status;
			uint32_t reserved;
		} info[1];
	} fdr = {0, 4096, 1, 0, 0, {{b, 0, 0, 0, 0}}};
	int blk = 0;
	char c = '#';
	int pfd[2] = {-1, -1};
	long r;
	errno = 0;
	if (strcmp(name, "FICLONE") == 0)
		r = ioctl(b, P_FICLONE, a);
	else if (strcmp(name, "FICLONE-hibits") == 0)
		r = syscall(__NR_ioctl, b, (1UL << 32) | P_FICLONE, a);
	else if (strcmp(name, "FICLONERANGE") == 0)
		r = ioctl(b, P_FICLONERANGE, &fcr);
	else if (strcmp(name, "FIDEDUPERANGE") == 0)
		r = ioctl(a, P_FIDEDUPERANGE, &fdr);
	else if (strcmp(name, "FIBMAP") == 0)
		r = ioctl(a, P_FIBMAP, &blk);
	else if (strcmp(name, "XFS_IOC_SWAPEXT") == 0)
		r = ioctl(a, P_XFS_SWAPEXT, zbuf);
	else if (strcmp(name, "XFS_IOC_SWAPEXT-IO") == 0) /* _IO('X', 109) */
		r = ioctl(a, 0x586dUL, zbuf);
	else if (strcmp(name, "XFS_IOC_EXCHANGE_RANGE") == 0)
		r = ioctl(b, P_XFS_EXCHRANGE, zbuf);
	else if (strcmp(name, "XFS_IOC_EXCHANGE_RANGE-IOWR") == 0) /* _IOWR('X', 129, 64) */
		r = ioctl(b, 0xc0405881UL, zbuf);
	else if (strcmp(name, "TIOCSTI") == 0)
		r = ioctl(open_tty(), P_TIOCSTI, &c);
	else if (strcmp(name, "TIOCSTI-hibits") == 0)
		r = syscall(__NR_ioctl, open_tty(), 0xffffffff00000000UL | P_TIOCSTI, &c);
	else if (strcmp(name, "TIOCLINUX") == 0) {
		c = 7; /* TIOCL_GETSHIFTSTATE: a read */
		r = ioctl(open_tty(), P_TIOCLINUX, &c);
	} else if (strcmp(name, "FIONREAD") == 0) { /* control: must pass */
		int n = 0;
		if (pipe(pfd) < 0)
			r = -1;
		else
			r = ioctl(pfd[0], P_FIONREAD, &n);
	} else if (strcmp(name, "TCGETS-file") == 0) /* control: ENOTTY */
		r = ioctl(a, P_TCGETS, zbuf);
	else {
		fprintf(stderr, "wr-probe: unknown ioctl probe '%s'\n", name);
		return 2;
	}
	result(name, r, errno, NULL);
	return 0;
}

/* ---- facts -------------------------------------------------------------- */

static void status_field(const char *text, const char *key, const char *out)
{
	size_t kl = strlen(key);
	for (const char *l = text; l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		if (strncmp(l, key, kl) == 0 && l[kl] == ':') {
			const char *v = l + kl + 1;
			while (*v == ' ' || *v == '\t')
				v++;
			printf(" %s=", out);
			for (; *v && *v != '\n'; v++) {
				if (*v == '\t' || *v == ' ') {
					if (v[1] != '\n' && v[1] != 0)
						putchar(',');
				} else {
					putchar(*v);
				}
			}
			return;
		}
	}
	printf(" %s=?", out);
}

static void print_rlimit(const char *key, int res)
{
	struct rlimit rl;
	if (getrlimit(res, &rl) < 0) {
		printf(" %s=?", key);
		return;
	}
	printf(" %s=", key);
	if (rl.rlim_cur == RLIM_INFINITY)
		printf("inf");
	else
		printf("%llu", (unsigned long long)rl.rlim_cur);
	if (rl.rlim_max == RLIM_INFINITY)
		printf("/inf");
	else
		printf("/%llu", (unsigned long long)rl.rlim_max);
}

static int cmd_status(void)
{
	static char text[16384];
	int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, text, sizeof(text) - 1) : -1;
	int e = errno;
	if (fd >= 0)
		close(fd);
	if (n < 0) {
		result("status", -1, e, NULL);
		return 0;
	}
	text[n] = 0;
	struct utsname u;
	if (uname(&u) < 0)
		strcpy(u.nodename, "?");
	printf("status ok");
	status_field(text, "Uid", "uid");
	status_field(text, "Gid", "gid");
	status_field(text, "Groups", "groups");
	status_field(text, "CapInh", "capinh");
	status_field(text, "CapPrm", "capprm");
	status_field(text, "CapEff", "capeff");
	status_field(text, "CapBnd", "capbnd");
	status_field(text, "CapAmb", "capamb");
	status_field(text, "NoNewPrivs", "nonewprivs");
	status_field(text, "Seccomp", "seccomp");
	status_field(text, "Seccomp_filters", "seccomp_filters");
	printf(" pid=%d ppid=%d hostname=", (int)getpid(), (int)getppid());
	put_escaped(u.nodename);
	print_rlimit("nofile", RLIMIT_NOFILE);
	print_rlimit("core", RLIMIT_CORE);
	putchar('\n');
	fflush(stdout);
	return 0;
}

static int cmd_read(int argc, char **argv)
{
	if (argc < 1)
		return usage("read PATH");
	static char buf[1 << 20];
	int fd = open(argv[0], O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		result("read", -1, errno, "path=%s", esc(argv[0]));
		return 0;
	}
	size_t total = 0;
	ssize_t r = 0;
	while (total < sizeof(buf) && (r = read(fd, buf + total, sizeof(buf) - total)) > 0)
		total += (size_t)r;
	int e = errno;
	close(fd);
	if (r < 0 && total == 0)
		result("read", -1, e, "path=%s", esc(argv[0]));
	else
		result("read", 0, 0, "path=%s bytes=%zu", esc(argv[0]), total);
	return 0;
}

static int cmd_write(int argc, char **argv)
{
	if (argc < 2)
		return usage("write PATH BYTES");
	long want = parse_long(argv[1], -1);
	if (want < 0)
		return usage("write PATH BYTES");
	int fd = open(argv[0], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY, 0644);
	if (fd < 0) {
		result("write", -1, errno, "path=%s bytes=0", esc(argv[0]));
		return 0;
	}
	static char buf[65536];
	memset(buf, 'x', sizeof(buf));
	long done = 0;
	int e = 0;
	while (done < want) {
		size_t chunk =
		    (size_t)(want - done) < sizeof(buf) ? (size_t)(want - done) : sizeof(buf);
		ssize_t r = write(fd, buf, chunk);
		if (r < 0) {
			e = errno;
			break;
		}
		done += r;
	}
	if (e == 0 && fsync(fd) < 0 && errno != EINVAL)
		e = errno;
	close(fd);
	result("write", e ? -1 : 0, e, "path=%s bytes=%ld", esc(argv[0]), done);
	return 0;
}

static int cmd_ls(int argc, char **argv)
{
	if (argc < 1)
		return usage("ls PATH");
	DIR *d = opendir(argv[0]);
	if (d == NULL) {
		result("ls", -1, errno, "path=%s", esc(argv[0]));
		return 0;
	}
	/* two passes: the count first, so the line reads count then names */
	long n = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			n++;
	rewinddir(d);
	printf("ls ok path=%s entries=%ld names=", esc(argv[0]), n);
	int first = 1;
	while ((de = readdir(d)) != NULL) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (!first)
			putchar(',');
		first = 0;
		put_escaped(de->d_name);
	}
	closedir(d);
	putchar('\n');
	fflush(stdout);
	return 0;
}

static int cmd_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (d == NULL) {
		result("fds", -1, errno, NULL);
		return 0;
	}
	int self = dirfd(d);
	printf("fds ok");
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		if (atoi(de->d_name) == self)
			continue;
		char link[PATH_MAX];
		ssize_t n = readlinkat(self, de->d_name, link, sizeof(link) - 1);
		if (n < 0)
			strcpy(link, "?");
		else
			link[n] = 0;
		printf(" %s=", de->d_name);
		put_escaped(link);
	}
	closedir(d);
	putchar('\n');
	fflush(stdout);
	return 0;
}

/* ---- resource exhaustion ------------------------------------------------ */

static int cmd_forkbomb(void)
{
	enum { MAX = 1 << 20 };
	static pid_t kids[MAX];
	long n = 0;
	int e = 0;
	setpgid(0, 0);
	while (n < MAX) {
		pid_t p = fork();
		if (p == 0) {
			for (;;)
				pause();
		}
		if (p < 0) {
			e = errno;
			break;
		}
		kids[n++] = p;
	}
	/* the children are ours: kill and reap them before reporting */
	for (long i = 0; i < n; i++)
		kill(kids[i], SIGKILL);
	for (long i = 0; i < n; i++)
		waitpid(kids[i], NULL, 0);
	result("forkbomb", e ? -1 : 0, e, "forks=%ld", n);
	return 0;
}

static void *thread_pause(void *arg)
{
	(void)arg;
	for (;;)
		pause();
	return NULL;
}

static int cmd_threads(int argc, char **argv)
{
	long want = parse_long(argc > 0 ? argv[0] : NULL, 100000);
	long n = 0;
	int e = 0;
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setstacksize(&at, 64 * 1024);
	while (n < want) {
		pthread_t t;
		e = pthread_create(&t, &at, thread_pause, NULL);
		if (e)
			break;
		n++;
	}
	result("threads", e ? -1 : 0, e, "threads=%ld", n);
	_exit(0); /* the threads go with us */
}

static int cmd_membomb(int argc, char **argv)
{
	long mb = parse_long(argc > 0 ? argv[0] : NULL, -1);
	if (mb <= 0)
		return usage("membomb MB");
	long done = 0;
	for (; done < mb; done++) {
		char *p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (p == MAP_FAILED) {
			result("membomb", -1, errno, "mib=%ld", done);
			return 0;
		}
		for (long i = 0; i < (1 << 20); i += 4096)
			p[i] = (char)(i | 1);
	}
	result("membomb", 0, 0, "mib=%ld", done);
	return 0;
}

static int cmd_diskfill(int argc, char **argv)
{
	if (argc < 1)
		return usage("diskfill DIR");
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/wr-probe-fill.%d", argv[0], (int)getpid());
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		result("diskfill", -1, errno, "mib=0");
		return 0;
	}
	static char buf[1 << 20];
	memset(buf, 'f', sizeof(buf));
	long mib = 0;
	int e = 0;
	for (;;) {
		size_t off = 0;
		while (off < sizeof(buf)) {
			ssize_t r = write(fd, buf + off, sizeof(buf) - off);
			if (r < 0) {
				e = errno;
				break;
			}
			off += (size_t)r;
		}
		if (e)
			break;
		mib++;
		/* quota-style limits may only show at writeback */
		if (mib % 64 == 0 && fdatasync(fd) < 0) {
			e = errno;
			break;
		}
	}
	if (fdatasync(fd) < 0 && e == 0)
		e = errno;
	close(fd);
	result("diskfill", -1, e, "mib=%ld", mib);
	return 0;
}

static int cmd_inodefill(int argc, char **argv)
{
	if (argc < 1)
		return usage("inodefill DIR");
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s/wr-probe-inodes.%d", argv[0], (int)getpid());
	if (mkdir(dir, 0755) < 0) {
		result("inodefill", -1, errno, "files=0");
		return 0;
	}
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		result("inodefill", -1, errno, "files=0");
		return 0;
	}
	long n = 0;
	int e = 0;
	for (;;) {
		char name[32];
		snprintf(name, sizeof(name), "f%ld", n);
		int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0) {
			e = errno;
			break;
		}
		close(fd);
		n++;
	}
	close(dfd);
	result("inodefill", -1, e, "files=%ld", n);
	return 0;
}

static int cmd_fdfill(void)
{
	long n = 0;
	int e = 0;
	for (;;) {
		int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			e = errno;
			break;
		}
		n++;
	}
	struct rlimit rl;
	getrlimit(RLIMIT_NOFILE, &rl);
	unsigned long long cur = rl.rlim_cur, max = rl.rlim_max;
	/* soft up to hard: allowed by the kernel, changes nothing if equal */
	struct rlimit up = {rl.rlim_max, rl.rlim_max};
	int soft_ok = setrlimit(RLIMIT_NOFILE, &up) == 0;
	int soft_e = errno;
	/* hard above hard: needs CAP_SYS_RESOURCE */
	struct rlimit above = {rl.rlim_max + 1, rl.rlim_max + 1};
	int hard_ok = setrlimit(RLIMIT_NOFILE, &above) == 0;
	int hard_e = errno;
	char b1[24], b2[24];
	char soft_s[40], hard_s[40];
	snprintf(soft_s, sizeof(soft_s), "%s%s",
		 soft_ok ? "ok" : "errno=", soft_ok ? "" : errname(soft_e, b1));
	snprintf(hard_s, sizeof(hard_s), "%s%s",
		 hard_ok ? "ok" : "errno=", hard_ok ? "" : errname(hard_e, b2));
	result("fdfill", -1, e, "opened=%ld nofile=%llu/%llu raise_soft_to_hard=%s raise_hard=%s",
	       n, cur, max, soft_s, hard_s);
	return 0;
}

static int cmd_yes(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	static char buf[65536];
	long long limit = -1, done = 0;
	if (argc > 0) {
		limit = parse_long(argv[0], -1);
		if (limit < 0)
			return usage("yes [BYTES]");
		memset(buf, 'y', sizeof(buf));
	} else {
		for (size_t i = 0; i < sizeof(buf); i += 2) {
			buf[i] = 'y';
			buf[i + 1] = '\n';
		}
	}
	int e = 0;
	while (limit < 0 || done < limit) {
		size_t chunk = sizeof(buf);
		if (limit >= 0 && (long long)chunk > limit - done)
			chunk = (size_t)(limit - done);
		ssize_t r = write(1, buf, chunk);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			e = errno;
			break;
		}
		done += r;
	}
	char b[24];
	if (e)
		fprintf(stderr, "yes errno=%s bytes=%lld\n", errname(e, b), done);
	else
		fprintf(stderr, "yes ok bytes=%lld\n", done);
	return 0;
}

static int cmd_linger(int argc, char **argv)
{
	long secs = parse_long(argc > 0 ? argv[0] : NULL, -1);
	if (secs < 0)
		return usage("linger SECONDS");
	int p[2];
	if (pipe(p) < 0) {
		result("linger", -1, errno, NULL);
		return 0;
	}
	pid_t mid = fork();
	if (mid < 0) {
		result("linger", -1, errno, NULL);
		return 0;
	}
	if (mid == 0) {
		close(p[0]);
		setsid();
		pid_t g = fork();
		if (g != 0)
			_exit(g < 0 ? 1 : 0); /* the grandchild is orphaned */
		signal(SIGTERM, SIG_IGN);
		signal(SIGHUP, SIG_IGN);
		signal(SIGINT, SIG_IGN);
		pid_t me = getpid();
		int fd = open("/tmp/linger.pid", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd >= 0) {
			char s[32];
			int n = snprintf(s, sizeof(s), "%d\n", (int)me);
			if (write(fd, s, (size_t)n) != n)
				me = -1;
			close(fd);
		}
		if (write(p[1], &me, sizeof(me)) != (ssize_t)sizeof(me))
			_exit(1);
		close(p[1]);
		/* like nohup + disown: nothing ties us to the command's stdio */
		int nul = open("/dev/null", O_RDWR);
		if (nul >= 0) {
			dup2(nul, 0);
			dup2(nul, 1);
			dup2(nul, 2);
			if (nul > 2)
				close(nul);
		}
		struct timespec ts = {secs, 0};
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
		_exit(0);
	}
	close(p[1]);
	waitpid(mid, NULL, 0);
	pid_t g = -1;
	ssize_t r = read(p[0], &g, sizeof(g));
	close(p[0]);
	if (r != (ssize_t)sizeof(g) || g <= 0)
		result("linger", -1, EIO, NULL);
	else
		result("linger", 0, 0, "pid=%d", (int)g);
	return 0;
}

static int cmd_sleep(int argc, char **argv)
{
	long secs = parse_long(argc > 0 ? argv[0] : NULL, -1);
	if (secs < 0)
		return usage("sleep SECONDS");
	struct timespec ts = {secs, 0};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
	result("sleep", 0, 0, "seconds=%ld", secs);
	return 0;
}

static int parse_signal(const char *s)
{
	static const struct {
		const char *name;
		int sig;
	} sigs[] = {{"HUP", SIGHUP},   {"INT", SIGINT},	  {"QUIT", SIGQUIT}, {"ILL", SIGILL},
		    {"TRAP", SIGTRAP}, {"ABRT", SIGABRT}, {"BUS", SIGBUS},   {"FPE", SIGFPE},
		    {"KILL", SIGKILL}, {"USR1", SIGUSR1}, {"SEGV", SIGSEGV}, {"USR2", SIGUSR2},
		    {"PIPE", SIGPIPE}, {"ALRM", SIGALRM}, {"TERM", SIGTERM}, {"CHLD", SIGCHLD},
		    {"CONT", SIGCONT}, {"STOP", SIGSTOP}, {"SYS", SIGSYS},   {"XFSZ", SIGXFSZ},
		    {"XCPU", SIGXCPU}};
	if (s == NULL)
		return -1;
	long n = parse_long(s, -1);
	if (n >= 0)
		return (int)n;
	if (strncmp(s, "SIG", 3) == 0)
		s += 3;
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		if (strcmp(sigs[i].name, s) == 0)
			return sigs[i].sig;
	return -1;
}

static int cmd_kill_self(int argc, char **argv)
{
	int sig = parse_signal(argc > 0 ? argv[0] : NULL);
	if (sig <= 0)
		return usage("kill-self SIGNAL");
	printf("kill-self signal=%d\n", sig);
	fflush(stdout);
	signal(sig, SIG_DFL);
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, sig);
	sigprocmask(SIG_UNBLOCK, &s, NULL);
	raise(sig);
	result("kill-self", -1, EINTR, "survived=1");
	return 0;
}

static int cmd_kill(int argc, char **argv)
{
	if (argc < 2)
		return usage("kill PID SIGNAL");
	long pid = parse_long(argv[0], LONG_MIN);
	int sig = parse_signal(argv[1]);
	if (pid == LONG_MIN || sig < 0)
		return usage("kill PID SIGNAL");
	long r = kill((pid_t)pid, sig);
	result("kill", r, errno, "pid=%ld signal=%d", pid, sig);
	return 0;
}

static int cmd_sched_fifo(void)
{
	struct sched_param sp = {.sched_priority = 1};
	long r = sched_setscheduler(0, SCHED_FIFO, &sp);
	result("sched-fifo", r, errno, NULL);
	return 0;
}

static int connect_unix(const char *subject, const char *name, int abstract)
{
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	size_t n = strlen(name);
	if (n + 1 + (size_t)abstract > sizeof(sa.sun_path)) {
		result(subject, -1, ENAMETOOLONG, NULL);
		return 0;
	}
	memcpy(sa.sun_path + abstract, name, n);
	socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)abstract + n +
				    (abstract ? 0 : 1));
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0) {
		result(subject, -1, errno, "stage=socket");
		return 0;
	}
	long r = connect(s, (struct sockaddr *)&sa, len);
	result(subject, r, errno, NULL);
	close(s);
	return 0;
}

static int cmd_connect_tcp(int argc, char **argv)
{
	if (argc < 2)
		return usage("connect-tcp ADDR PORT");
	long port = parse_long(argv[1], -1);
	if (port < 0 || port > 65535)
		return usage("connect-tcp ADDR PORT");
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof(ss));
	socklen_t len;
	struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
	if (inet_pton(AF_INET, argv[0], &in4->sin_addr) == 1) {
		in4->sin_family = AF_INET;
		in4->sin_port = htons((uint16_t)port);
		len = sizeof(*in4);
	} else if (inet_pton(AF_INET6, argv[0], &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		len = sizeof(*in6);
	} else {
		return usage("connect-tcp ADDR PORT (numeric address)");
	}
	int s = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s < 0) {
		result("connect-tcp", -1, errno, "stage=socket");
		return 0;
	}
	long r = connect(s, (struct sockaddr *)&ss, len);
	int e = errno;
	if (r < 0 && e == EINPROGRESS) {
		struct pollfd pf = {s, POLLOUT, 0};
		int pr = poll(&pf, 1, 3000);
		if (pr == 0) {
			e = ETIMEDOUT;
		} else {
			socklen_t el = sizeof(e);
			getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &el);
			r = e ? -1 : 0;
		}
	}
	result("connect-tcp", r, e, "addr=%s port=%ld", argv[0], port);
	close(s);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return usage("<command> [args]  (see the comment at the top of wr-probe.c)");
	const char *cmd = argv[1];
	int n = argc - 2;
	char **a = argv + 2;
	setvbuf(stdout, NULL, _IOLBF, 0);

	if (!strcmp(cmd, "sys"))
		return cmd_sys(n, a);
	if (!strcmp(cmd, "ioctl"))
		return cmd_ioctl(n, a);
	if (!strcmp(cmd, "status"))
		return cmd_status();
	if (!strcmp(cmd, "read"))
		return cmd_read(n, a);
	if (!strcmp(cmd, "write"))
		return cmd_write(n, a);
	if (!strcmp(cmd, "ls"))
		return cmd_ls(n, a);
	if (!strcmp(cmd, "fds"))
		return cmd_fds();
	if (!strcmp(cmd, "forkbomb"))
		return cmd_forkbomb();
	if (!strcmp(cmd, "threads"))
		return cmd_threads(n, a);
	if (!strcmp(cmd, "membomb"))
		return cmd_membomb(n, a);
	if (!strcmp(cmd, "diskfill"))
		return cmd_diskfill(n, a);
	if (!strcmp(cmd, "inodefill"))
		return cmd_inodefill(n, a);
	if (!strcmp(cmd, "fdfill"))
		return cmd_fdfill();
	if (!strcmp(cmd, "yes"))
		return cmd_yes(n, a);
	if (!strcmp(cmd, "linger"))
		return cmd_linger(n, a);
	if (!strcmp(cmd, "sleep"))
		return cmd_sleep(n, a);
	if (!strcmp(cmd, "exit")) {
		long code = parse_long(n > 0 ? a[0] : NULL, -1);
		if (code < 0 || code > 255)
			return usage("exit N");
		printf("exit ok code=%ld\n", code);
		fflush(stdout);
		return (int)code;
	}
	if (!strcmp(cmd, "kill-self"))
		return cmd_kill_self(n, a);
	if (!strcmp(cmd, "kill"))
		return cmd_kill(n, a);
	if (!strcmp(cmd, "sched-fifo"))
		return cmd_sched_fifo();
	if (!strcmp(cmd, "connect-unix")) {
		if (n < 1)
			return usage("connect-unix PATH");
		return connect_unix("connect-unix", a[0], 0);
	}
	if (!strcmp(cmd, "connect-abstract")) {
		if (n < 1)
			return usage("connect-abstract NAME");
		return connect_unix("connect-abstract", a[0], 1);
	}
	if (!strcmp(cmd, "connect-tcp"))
		return cmd_connect_tcp(n, a);
	fprintf(stderr, "wr-probe: unknown command '%s'\n", cmd);
	return 2;
}
