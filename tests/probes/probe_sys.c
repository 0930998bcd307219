/* wr-probe: the "sys" and "ioctl" commands (see wr-probe.c). */
#include "probe.h"

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

char zbuf[4096] __attribute__((aligned(4096)));
char zbuf2[4096] __attribute__((aligned(4096)));

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

int cmd_sys(int argc, char **argv)
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

int cmd_ioctl(int argc, char **argv)
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
