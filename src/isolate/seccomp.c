/* seccomp: the syscall allowlist, compiled once per process with libseccomp
 * and installed with the raw seccomp(2) syscall.
 *
 * How the default profile is built
 * --------------------------------
 * libseccomp cannot express "allow syscall X unless its argument matches Y"
 * in an allowlist: an unconditional rule for a syscall replaces every
 * conditional rule of that syscall, and the complement of a masked compare
 * is not a conjunction of compares. So the default profile is two libseccomp
 * filters joined into ONE classic BPF program:
 *
 *   guard: default action = a private sentinel (TRACE with WR_GUARD_NEXT),
 *          rules only for the argument-filtered cases: ioctl commands,
 *          clone namespace flags, socket(AF_VSOCK, AF_PACKET, raw IP),
 *          clone3, the harmless personality values;
 *   main:  default action ERRNO(ENOSYS), the plain allowlist (ioctl, clone,
 *          socket unconditionally allowed) and the EPERM deny list.
 *
 * Every "return sentinel" of the guard is rewritten into a forward jump to
 * the first instruction of main, which follows the guard in the same array.
 * A syscall the guard has no opinion on therefore continues into main; one
 * the guard refuses never reaches it. Both halves check the architecture
 * first and kill non-native callers (i386, x32).
 *
 * Argument compares. A rule that REFUSES on an argument the kernel reads as
 * a 32-bit int (ioctl cmd, socket domain) compares only the low 32 bits
 * (SCMP_CMP_MASKED_EQ with 0xffffffff), so junk in the upper half of the
 * register cannot slip a refused value past the filter. A rule that ALLOWS
 * (personality, prctl options, prlimit64's new-limit pointer) compares all
 * 64 bits exactly, so junk in the upper half can only make it refuse.
 *
 * Fork safety. wr_seccomp_get() takes a mutex and allocates; it runs in the
 * parent only. wr_seccomp_load() only reads the finished program, so a child
 * forked while another thread holds the mutex is still safe, as long as the
 * caller fetched the program with wr_seccomp_get() before cloning.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/fs.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <seccomp.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "common/util.h"
#include "isolate/seccomp.h"

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif
#ifndef TIOCLINUX
#define TIOCLINUX 0x541C
#endif
#ifndef __NR_set_mempolicy_home_node
#define __NR_set_mempolicy_home_node 450
#endif
#ifndef __NR_quotactl_fd
#define __NR_quotactl_fd 443
#endif

/* The guard's "no opinion, continue into main" action. TRACE is never used
 * by a rule of ours, and the value is rewritten away before the program is
 * handed out, so the kernel never sees it. */
#define WR_GUARD_NEXT_DATA 0x5752 /* "WR" */
#define WR_GUARD_NEXT SCMP_ACT_TRACE(WR_GUARD_NEXT_DATA)

struct wr_seccomp_prog {
	struct sock_fprog fprog;
	enum wr_seccomp_profile profile;
};

struct wr_sysent {
	const char *name;
	int nr;
};
#define WR_SYS(n)                                                                                  \
	{                                                                                          \
#n, __NR_##n                                                                       \
	}

/* ---- the default profile ------------------------------------------------ */

/* Docker's unconditional x86_64 allowlist (moby profiles/seccomp/default.json)
 * with these differences:
 *   removed (to the EPERM list): adjtimex, clock_adjtime (their "modes"
 *     field lives in memory, so a read-only call cannot be told apart from a
 *     clock change), io_uring_* (a large kernel attack surface that also
 *     bypasses this filter for the I/O it performs), name_to_handle_at
 *     (half of the "shocker" handle attack), memfd_secret (see below);
 *   removed (to ENOSYS, like a kernel built without them): modify_ldt
 *     (CONFIG_MODIFY_LDT_SYSCALL=n is common and only 16-bit code needs it);
 *   added: fchmodat2 (glibc 2.39+ lchmod/fchmodat, falls back on ENOSYS
 *     anyway), map_shadow_stack (CET shadow stacks for the caller's own
 *     threads), mseal (seals the caller's own mappings: only restricts);
 *   argument-filtered in the guard: ioctl, clone, socket, personality.
 * Syscalls Docker grants only with a capability (mount family, bpf, ptrace,
 * ...) are refused with EPERM whatever capabilities the sandbox holds.
 *
 * memfd_secret: refused. Hardly any program uses it, and each secret page is
 * removed from the kernel's direct map, which splits huge direct-map pages
 * host-wide (a cross-tenant performance cost) and hides the memory from the
 * host's own diagnostics. */
static const struct wr_sysent default_allow[] = {
    WR_SYS(accept),
    WR_SYS(accept4),
    WR_SYS(access),
    WR_SYS(alarm),
    WR_SYS(arch_prctl),
    WR_SYS(bind),
    WR_SYS(brk),
    WR_SYS(capget),
    WR_SYS(capset),
    WR_SYS(chdir),
    WR_SYS(chmod),
    WR_SYS(chown),
    WR_SYS(clock_getres),
    WR_SYS(clock_gettime),
    WR_SYS(clock_nanosleep),
    WR_SYS(clone), /* namespace flags refused by the guard */
    WR_SYS(close),
    WR_SYS(close_range),
    WR_SYS(connect),
    WR_SYS(copy_file_range),
    WR_SYS(creat),
    WR_SYS(dup),
    WR_SYS(dup2),
    WR_SYS(dup3),
    WR_SYS(epoll_create),
    WR_SYS(epoll_create1),
    WR_SYS(epoll_ctl),
    WR_SYS(epoll_ctl_old),
    WR_SYS(epoll_pwait),
    WR_SYS(epoll_pwait2),
    WR_SYS(epoll_wait),
    WR_SYS(epoll_wait_old),
    WR_SYS(eventfd),
    WR_SYS(eventfd2),
    WR_SYS(execve),
    WR_SYS(execveat),
    WR_SYS(exit),
    WR_SYS(exit_group),
    WR_SYS(faccessat),
    WR_SYS(faccessat2),
    WR_SYS(fadvise64),
    WR_SYS(fallocate),
    WR_SYS(fanotify_mark),
    WR_SYS(fchdir),
    WR_SYS(fchmod),
    WR_SYS(fchmodat),
    WR_SYS(fchmodat2),
    WR_SYS(fchown),
    WR_SYS(fchownat),
    WR_SYS(fcntl),
    WR_SYS(fdatasync),
    WR_SYS(fgetxattr),
    WR_SYS(flistxattr),
    WR_SYS(flock),
    WR_SYS(fork),
    WR_SYS(fremovexattr),
    WR_SYS(fsetxattr),
    WR_SYS(fstat),
    WR_SYS(fstatfs),
    WR_SYS(fsync),
    WR_SYS(ftruncate),
    WR_SYS(futex),
    WR_SYS(futex_waitv),
    WR_SYS(futimesat),
    WR_SYS(get_robust_list),
    WR_SYS(get_thread_area),
    WR_SYS(getcpu),
    WR_SYS(getcwd),
    WR_SYS(getdents),
    WR_SYS(getdents64),
    WR_SYS(getegid),
    WR_SYS(geteuid),
    WR_SYS(getgid),
    WR_SYS(getgroups),
    WR_SYS(getitimer),
    WR_SYS(getpeername),
    WR_SYS(getpgid),
    WR_SYS(getpgrp),
    WR_SYS(getpid),
    WR_SYS(getppid),
    WR_SYS(getpriority),
    WR_SYS(getrandom),
    WR_SYS(getresgid),
    WR_SYS(getresuid),
    WR_SYS(getrlimit),
    WR_SYS(getrusage),
    WR_SYS(getsid),
    WR_SYS(getsockname),
    WR_SYS(getsockopt),
    WR_SYS(gettid),
    WR_SYS(gettimeofday),
    WR_SYS(getuid),
    WR_SYS(getxattr),
    WR_SYS(inotify_add_watch),
    WR_SYS(inotify_init),
    WR_SYS(inotify_init1),
    WR_SYS(inotify_rm_watch),
    WR_SYS(io_cancel),
    WR_SYS(io_destroy),
    WR_SYS(io_getevents),
    WR_SYS(io_pgetevents),
    WR_SYS(io_setup),
    WR_SYS(io_submit),
    WR_SYS(ioctl), /* cloning, extent-swap and tty-injection commands refused by the guard */
    WR_SYS(ioprio_get),
    WR_SYS(ioprio_set),
    WR_SYS(kill),
    WR_SYS(landlock_add_rule),
    WR_SYS(landlock_create_ruleset),
    WR_SYS(landlock_restrict_self),
    WR_SYS(lchown),
    WR_SYS(lgetxattr),
    WR_SYS(link),
    WR_SYS(linkat),
    WR_SYS(listen),
    WR_SYS(listxattr),
    WR_SYS(llistxattr),
    WR_SYS(lremovexattr),
    WR_SYS(lseek),
    WR_SYS(lsetxattr),
    WR_SYS(lstat),
    WR_SYS(madvise),
    WR_SYS(map_shadow_stack),
    WR_SYS(membarrier),
    WR_SYS(memfd_create),
    WR_SYS(mincore),
    WR_SYS(mkdir),
    WR_SYS(mkdirat),
    WR_SYS(mknod),
    WR_SYS(mknodat),
    WR_SYS(mlock),
    WR_SYS(mlock2),
    WR_SYS(mlockall),
    WR_SYS(mmap),
    WR_SYS(mprotect),
    WR_SYS(mq_getsetattr),
    WR_SYS(mq_notify),
    WR_SYS(mq_open),
    WR_SYS(mq_timedreceive),
    WR_SYS(mq_timedsend),
    WR_SYS(mq_unlink),
    WR_SYS(mremap),
    WR_SYS(mseal),
    WR_SYS(msgctl),
    WR_SYS(msgget),
    WR_SYS(msgrcv),
    WR_SYS(msgsnd),
    WR_SYS(msync),
    WR_SYS(munlock),
    WR_SYS(munlockall),
    WR_SYS(munmap),
    WR_SYS(nanosleep),
    WR_SYS(newfstatat),
    WR_SYS(open),
    WR_SYS(openat),
    WR_SYS(openat2),
    WR_SYS(pause),
    WR_SYS(pidfd_open),
    WR_SYS(pidfd_send_signal),
    WR_SYS(pipe),
    WR_SYS(pipe2),
    WR_SYS(pkey_alloc),
    WR_SYS(pkey_free),
    WR_SYS(pkey_mprotect),
    WR_SYS(poll),
    WR_SYS(ppoll),
    WR_SYS(prctl),
    WR_SYS(pread64),
    WR_SYS(preadv),
    WR_SYS(preadv2),
    WR_SYS(prlimit64),
    WR_SYS(process_mrelease),
    WR_SYS(pselect6),
    WR_SYS(pwrite64),
    WR_SYS(pwritev),
    WR_SYS(pwritev2),
    WR_SYS(read),
    WR_SYS(readahead),
    WR_SYS(readlink),
    WR_SYS(readlinkat),
    WR_SYS(readv),
    WR_SYS(recvfrom),
    WR_SYS(recvmmsg),
    WR_SYS(recvmsg),
    WR_SYS(remap_file_pages),
    WR_SYS(removexattr),
    WR_SYS(rename),
    WR_SYS(renameat),
    WR_SYS(renameat2),
    WR_SYS(restart_syscall),
    WR_SYS(rmdir),
    WR_SYS(rseq),
    WR_SYS(rt_sigaction),
    WR_SYS(rt_sigpending),
    WR_SYS(rt_sigprocmask),
    WR_SYS(rt_sigqueueinfo),
    WR_SYS(rt_sigreturn),
    WR_SYS(rt_sigsuspend),
    WR_SYS(rt_sigtimedwait),
    WR_SYS(rt_tgsigqueueinfo),
    WR_SYS(sched_get_priority_max),
    WR_SYS(sched_get_priority_min),
    WR_SYS(sched_getaffinity),
    WR_SYS(sched_getattr),
    WR_SYS(sched_getparam),
    WR_SYS(sched_getscheduler),
    WR_SYS(sched_rr_get_interval),
    WR_SYS(sched_setaffinity),
    WR_SYS(sched_setattr),	/* real-time policies: the kernel checks */
    WR_SYS(sched_setparam),	/* CAP_SYS_NICE in the initial user ns and */
    WR_SYS(sched_setscheduler), /* RLIMIT_RTPRIO, which rlimit.c sets to 0 */
    WR_SYS(sched_yield),
    WR_SYS(seccomp), /* stacking more filters only restricts further */
    WR_SYS(select),
    WR_SYS(semctl),
    WR_SYS(semget),
    WR_SYS(semop),
    WR_SYS(semtimedop),
    WR_SYS(sendfile),
    WR_SYS(sendmmsg),
    WR_SYS(sendmsg),
    WR_SYS(sendto),
    WR_SYS(set_robust_list),
    WR_SYS(set_thread_area),
    WR_SYS(set_tid_address),
    WR_SYS(setfsgid),
    WR_SYS(setfsuid),
    WR_SYS(setgid),
    WR_SYS(setgroups),
    WR_SYS(setitimer),
    WR_SYS(setpgid),
    WR_SYS(setpriority),
    WR_SYS(setregid),
    WR_SYS(setresgid),
    WR_SYS(setresuid),
    WR_SYS(setreuid),
    WR_SYS(setrlimit),
    WR_SYS(setsid),
    WR_SYS(setsockopt),
    WR_SYS(setuid),
    WR_SYS(setxattr),
    WR_SYS(shmat),
    WR_SYS(shmctl),
    WR_SYS(shmdt),
    WR_SYS(shmget),
    WR_SYS(shutdown),
    WR_SYS(sigaltstack),
    WR_SYS(signalfd),
    WR_SYS(signalfd4),
    WR_SYS(socket), /* AF_VSOCK refused by the guard */
    WR_SYS(socketpair),
    WR_SYS(splice),
    WR_SYS(stat),
    WR_SYS(statfs),
    WR_SYS(statx),
    WR_SYS(symlink),
    WR_SYS(symlinkat),
    WR_SYS(sync),
    WR_SYS(sync_file_range),
    WR_SYS(syncfs),
    WR_SYS(sysinfo),
    WR_SYS(tee),
    WR_SYS(tgkill),
    WR_SYS(time),
    WR_SYS(timer_create),
    WR_SYS(timer_delete),
    WR_SYS(timer_getoverrun),
    WR_SYS(timer_gettime),
    WR_SYS(timer_settime),
    WR_SYS(timerfd_create),
    WR_SYS(timerfd_gettime),
    WR_SYS(timerfd_settime),
    WR_SYS(times),
    WR_SYS(tkill),
    WR_SYS(truncate),
    WR_SYS(umask),
    WR_SYS(uname),
    WR_SYS(unlink),
    WR_SYS(unlinkat),
    WR_SYS(utime),
    WR_SYS(utimensat),
    WR_SYS(utimes),
    WR_SYS(vfork),
    WR_SYS(vmsplice),
    WR_SYS(wait4),
    WR_SYS(waitid),
    WR_SYS(write),
    WR_SYS(writev),
};

/* Refused with EPERM by the default profile, whatever the arguments. The
 * i386-only members of this family (stime, vm86, vm86old, umount, the *_time64
 * variants) have no x86_64 number: the filters kill every non-native caller
 * before any of them could run. personality is listed because the guard lets
 * only Docker's harmless values through (0, PER_LINUX32, UNAME26,
 * UNAME26|PER_LINUX32, and the 0xffffffff query); all others land here. */
#define WR_DENY_LIST(X)                                                                            \
	/* other processes' memory, fds and identity */                                            \
	X(ptrace)                                                                                  \
	X(process_vm_readv)                                                                        \
	X(process_vm_writev)                                                                       \
	X(process_madvise)                                                                         \
	X(pidfd_getfd)                                                                             \
	X(kcmp)                                                                                    \
	/* large kernel attack surfaces */                                                         \
	X(bpf)                                                                                     \
	X(perf_event_open)                                                                         \
	X(userfaultfd)                                                                             \
	X(io_uring_setup)                                                                          \
	X(io_uring_enter)                                                                          \
	X(io_uring_register)                                                                       \
	/* kernel keyrings are not namespaced */                                                   \
	X(add_key)                                                                                 \
	X(request_key)                                                                             \
	X(keyctl)                                                                                  \
	/* mounts and namespaces: the sandbox's shape is the platform's */                         \
	X(mount)                                                                                   \
	X(umount2)                                                                                 \
	X(pivot_root)                                                                              \
	X(chroot)                                                                                  \
	X(fsopen)                                                                                  \
	X(fsconfig)                                                                                \
	X(fsmount)                                                                                 \
	X(fspick)                                                                                  \
	X(open_tree)                                                                               \
	X(move_mount)                                                                              \
	X(mount_setattr)                                                                           \
	X(open_tree_attr)                                                                          \
	X(unshare)                                                                                 \
	X(setns)                                                                                   \
	X(sethostname)                                                                             \
	X(setdomainname)                                                                           \
	/* file handles bypass path-based confinement */                                           \
	X(open_by_handle_at)                                                                       \
	X(name_to_handle_at)                                                                       \
	/* the host kernel and machine */                                                          \
	X(init_module)                                                                             \
	X(finit_module)                                                                            \
	X(delete_module)                                                                           \
	X(create_module)                                                                           \
	X(get_kernel_syms)                                                                         \
	X(query_module)                                                                            \
	X(kexec_load)                                                                              \
	X(kexec_file_load)                                                                         \
	X(reboot)                                                                                  \
	X(swapon)                                                                                  \
	X(swapoff)                                                                                 \
	X(syslog)                                                                                  \
	X(acct)                                                                                    \
	X(lookup_dcookie)                                                                          \
	X(quotactl)                                                                                \
	X(quotactl_fd)                                                                             \
	X(nfsservctl)                                                                              \
	X(vhangup)                                                                                 \
	X(iopl)                                                                                    \
	X(ioperm)                                                                                  \
	X(uselib)                                                                                  \
	X(ustat)                                                                                   \
	X(sysfs)                                                                                   \
	X(_sysctl)                                                                                 \
	X(fanotify_init)                                                                           \
	X(lsm_set_self_attr)                                                                       \
	X(memfd_secret)                                                                            \
	X(personality)                                                                             \
	/* clocks are host-wide; adjtimex/clock_adjtime even when read-only */                     \
	X(settimeofday)                                                                            \
	X(clock_settime)                                                                           \
	X(clock_adjtime)                                                                           \
	X(adjtimex)                                                                                \
	/* NUMA policy: placement is the platform's (Docker: CAP_SYS_NICE only) */                 \
	X(mbind)                                                                                   \
	X(set_mempolicy)                                                                           \
	X(set_mempolicy_home_node)                                                                 \
	X(get_mempolicy)                                                                           \
	X(move_pages)                                                                              \
	X(migrate_pages)

#define WR_DENY_ENT(n) WR_SYS(n),
#define WR_DENY_NAME(n) #n,
static const struct wr_sysent default_deny[] = {WR_DENY_LIST(WR_DENY_ENT)};
static const char *const default_deny_names[] = {WR_DENY_LIST(WR_DENY_NAME) NULL};

/* ioctl commands refused whole (compared on the low 32 bits). */
static const uint32_t deny_ioctl_cmds[] = {
    FICLONE,	   /* reflink another file's extents into ours */
    FICLONERANGE,  /* same, for a range */
    FIDEDUPERANGE, /* share extents with a file we may only read */
    FIBMAP,	   /* physical block numbers: raw-disk reconnaissance */
    TIOCSTI,	   /* push input into a terminal we share */
    TIOCLINUX,	   /* console control, including selection paste */
};
/* ioctls refused by type and number only (mask 0xffff), so every size and
 * direction variant of the command is caught. */
static const uint32_t deny_ioctl_typenr[] = {
    0x586d, /* 'X' 109: XFS_IOC_SWAPEXT */
    0x5881, /* 'X' 129: XFS_IOC_EXCHANGE_RANGE */
};
/* clone(2) flags that create namespaces. CLONE_NEWTIME (0x80) shares its bit
 * with the exit-signal byte of clone(2), where 0x80 would be an invalid
 * signal (> 64) the kernel refuses with EINVAL anyway; refusing it here only
 * turns that EINVAL into EPERM. clone3 is ENOSYS, unshare and setns EPERM,
 * so these flags have no other way in. */
static const uint64_t deny_clone_flags[] = {
    CLONE_NEWNS,  CLONE_NEWUTS, CLONE_NEWIPC,	 CLONE_NEWUSER,
    CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP, CLONE_NEWTIME,
};
static const uint64_t allow_personality[] = {0x0, 0x8, 0x20000, 0x20008, 0xffffffff};

/* ---- the warren-init profile -------------------------------------------- */

/* warren-init only blocks every signal, waits for them and reaps. This
 * profile is installed by the parent BEFORE it execs warren-init, so it
 * governs that execve and the static glibc start-up too:
 *   execve, execveat: the parent's own exec of warren-init. A filter cannot
 *     count calls; a second exec gains nothing, because the init profile
 *     would still govern the new image (filters survive exec) and
 *     no_new_privs keeps setuid bits inert;
 *   arch_prctl (TLS), set_tid_address, set_robust_list, rseq, brk, mmap,
 *     munmap, mprotect, getrandom: static glibc start-up and malloc;
 *   prlimit64 with a NULL new limit: start-up reads RLIMIT_STACK;
 *   fstat, newfstatat, futex, gettid, tgkill: stdio and abort() internals.
 * Commands never descend from warren-init (they enter with setns), so
 * nothing else ever runs under this profile. Anything else: EPERM. */
static const struct wr_sysent init_allow[] = {
    WR_SYS(execve),
    WR_SYS(execveat),
    WR_SYS(arch_prctl),
    WR_SYS(set_tid_address),
    WR_SYS(set_robust_list),
    WR_SYS(rseq),
    WR_SYS(brk),
    WR_SYS(mmap),
    WR_SYS(munmap),
    WR_SYS(mprotect),
    WR_SYS(getrandom),
    WR_SYS(fstat),
    WR_SYS(newfstatat),
    WR_SYS(futex),
    WR_SYS(gettid),
    WR_SYS(tgkill),
    WR_SYS(wait4),
    WR_SYS(waitid),
    WR_SYS(rt_sigaction),
    WR_SYS(rt_sigprocmask),
    WR_SYS(rt_sigreturn),
    WR_SYS(rt_sigtimedwait),
    WR_SYS(rt_sigsuspend),
    WR_SYS(rt_sigpending),
    WR_SYS(signalfd),
    WR_SYS(signalfd4),
    WR_SYS(read),
    WR_SYS(write),
    WR_SYS(close),
    WR_SYS(close_range),
    WR_SYS(poll),
    WR_SYS(ppoll),
    WR_SYS(kill),
    WR_SYS(nanosleep),
    WR_SYS(clock_nanosleep),
    WR_SYS(clock_gettime),
    WR_SYS(restart_syscall),
    WR_SYS(getpid),
    WR_SYS(exit),
    WR_SYS(exit_group),
};
static const uint64_t init_allow_prctl[] = {PR_SET_CHILD_SUBREAPER, PR_SET_NAME};

/* ---- state -------------------------------------------------------------- */

static pthread_mutex_t wr_seccomp_lock = PTHREAD_MUTEX_INITIALIZER;
static struct wr_seccomp_prog wr_progs[WR_SECCOMP_NPROFILES]; /* under the lock */

static bool wr_seccomp_log = true;

void wr_seccomp_set_log(bool on)
{
	wr_seccomp_log = on;
}

int wr_seccomp_refusal_errno(int nr)
{
	for (size_t i = 0; i < WR_ARRAY_SIZE(default_deny); i++)
		if (default_deny[i].nr == nr)
			return EPERM;
	if (nr == __NR_ioctl || nr == __NR_clone || nr == __NR_socket || nr == __NR_personality)
		return EPERM;
	return ENOSYS;
}

const char *const *wr_seccomp_denied_names(void)
{
	return default_deny_names;
}

/* ---- compilation (parent side) ------------------------------------------ */

static void wr_scmp_releasep(scmp_filter_ctx *ctx)
{
	if (*ctx)
		seccomp_release(*ctx);
}
#define _cleanup_scmp_ _cleanup_(wr_scmp_releasep)

static int new_filter(scmp_filter_ctx *out, uint32_t def_action, const char *what, wr_err *err)
{
	scmp_filter_ctx ctx = seccomp_init(def_action);
	if (ctx == NULL)
		return wr_err_set(err, ENOMEM, "seccomp %s: seccomp_init failed", what);
	/* Native x86_64 only: i386 (int 0x80) and x32 (nr | 0x40000000) callers
	 * are killed, not refused, since their numbers mean other syscalls. */
	int r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
	/* The caller sets no_new_privs itself (before Landlock); we never call
	 * seccomp_load, but keep libseccomp from assuming it either way. */
	if (r == 0)
		r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0);
	/* A binary search on the syscall number instead of one compare per
	 * rule in a row: the same actions, ~20 compares instead of up to
	 * ~400. It matters most at load, which a function slot does per call:
	 * the kernel runs the program once per syscall number to fill its
	 * action cache (seccomp_cache_prepare, with interrupts off), ~250 us of
	 * the ~550 us a load of the linear program (456 instructions) cost on
	 * the benchmark host; the tree (550) loads in ~370 us, its extra
	 * instructions costing the JIT less than the search saves. */
	if (r == 0)
		r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
	if (r < 0) {
		seccomp_release(ctx);
		return wr_err_set(err, -r, "seccomp %s: set filter attributes", what);
	}
	*out = ctx;
	return 0;
}

static int add_rule(scmp_filter_ctx ctx, uint32_t action, const char *name, int nr,
		    unsigned int n_arg, const struct scmp_arg_cmp *arg, wr_err *err)
{
	int r = seccomp_rule_add_array(ctx, action, nr, n_arg, arg);
	if (r < 0)
		return wr_err_set(err, -r, "seccomp: add rule for %s (%d): %s", name, nr,
				  strerror(-r));
	return 0;
}

static int add_list(scmp_filter_ctx ctx, uint32_t action, const struct wr_sysent *list, size_t n,
		    wr_err *err)
{
	for (size_t i = 0; i < n; i++) {
		int r = add_rule(ctx, action, list[i].name, list[i].nr, 0, NULL, err);
		if (r < 0)
			return r;
	}
	return 0;
}

/* libseccomp 2.5.4 has no seccomp_export_bpf_mem: export into a memfd and
 * read the instructions back into a buffer we own. */
static int export_bpf(scmp_filter_ctx ctx, struct sock_filter **out, size_t *n_out, wr_err *err)
{
	_cleanup_close_ int fd = memfd_create("warren-seccomp", MFD_CLOEXEC);
	if (fd < 0)
		return wr_err_sys(err, "seccomp: memfd_create");
	int r = seccomp_export_bpf(ctx, fd);
	if (r < 0)
		return wr_err_set(err, -r, "seccomp: export BPF: %s", strerror(-r));
	struct stat st;
	if (fstat(fd, &st) < 0)
		return wr_err_sys(err, "seccomp: stat exported BPF");
	size_t len = (size_t)st.st_size;
	if (len == 0 || len % sizeof(struct sock_filter) != 0 ||
	    len / sizeof(struct sock_filter) > BPF_MAXINSNS)
		return wr_err_set(err, EINVAL, "seccomp: exported BPF has a bad size (%zu bytes)",
				  len);
	_cleanup_free_ struct sock_filter *buf = malloc(len);
	if (buf == NULL)
		return wr_err_set(err, ENOMEM, "seccomp: out of memory");
	if (lseek(fd, 0, SEEK_SET) < 0)
		return wr_err_sys(err, "seccomp: rewind exported BPF");
	ssize_t got = wr_read_all(fd, buf, len);
	if (got < 0)
		return wr_err_sys(err, "seccomp: read exported BPF");
	if ((size_t)got != len)
		return wr_err_set(err, EIO, "seccomp: short read of exported BPF");
	*out = steal_ptr(&buf);
	*n_out = len / sizeof(struct sock_filter);
	return 0;
}

static int build_guard(scmp_filter_ctx *out, wr_err *err)
{
	_cleanup_scmp_ scmp_filter_ctx ctx = NULL;
	int r = new_filter(&ctx, WR_GUARD_NEXT, "guard", err);
	if (r < 0)
		return r;
	for (size_t i = 0; i < WR_ARRAY_SIZE(deny_ioctl_cmds); i++) {
		struct scmp_arg_cmp c =
		    SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffULL, deny_ioctl_cmds[i]);
		r = add_rule(ctx, SCMP_ACT_ERRNO(EPERM), "ioctl", __NR_ioctl, 1, &c, err);
		if (r < 0)
			return r;
	}
	for (size_t i = 0; i < WR_ARRAY_SIZE(deny_ioctl_typenr); i++) {
		struct scmp_arg_cmp c =
		    SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffULL, deny_ioctl_typenr[i]);
		r = add_rule(ctx, SCMP_ACT_ERRNO(EPERM), "ioctl", __NR_ioctl, 1, &c, err);
		if (r < 0)
			return r;
	}
	for (size_t i = 0; i < WR_ARRAY_SIZE(deny_clone_flags); i++) {
		struct scmp_arg_cmp c =
		    SCMP_A0(SCMP_CMP_MASKED_EQ, deny_clone_flags[i], deny_clone_flags[i]);
		r = add_rule(ctx, SCMP_ACT_ERRNO(EPERM), "clone", __NR_clone, 1, &c, err);
		if (r < 0)
			return r;
	}
	struct scmp_arg_cmp vsock = SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffULL, AF_VSOCK);
	r = add_rule(ctx, SCMP_ACT_ERRNO(EPERM), "socket", __NR_socket, 1, &vsock, err);
	if (r < 0)
		return r;
	/* Packet sockets (any type) and raw IP sockets. No sandbox holds
	 * CAP_NET_RAW (caps.c), so the kernel would refuse them with EPERM
	 * too, but silently: refused here, the refusal is the filter's and
	 * has its audit record (a seccomp event). The type is compared on its
	 * low 4 bits (SOCK_TYPE_MASK: SOCK_NONBLOCK and SOCK_CLOEXEC live
	 * above). Only AF_INET/AF_INET6 are matched for SOCK_RAW: netlink
	 * sockets are SOCK_RAW too (glibc's getaddrinfo, ip, ss use them). */
	struct scmp_arg_cmp packet = SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffULL, AF_PACKET);
	r = add_rule(ctx, SCMP_ACT_ERRNO(EPERM), "socket", __NR_socket, 1, &packet, err);
	if (r < 0)
		return r;
	static const int raw_families[] = {AF_INET, AF_INET6};
	for (size_t i = 0; i < WR_ARRAY_SIZE(raw_families); i++) {
		struct scmp_arg_cmp raw[] = {
		    SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffULL, (uint64_t)raw_families[i]),
		    SCMP_A1(SCMP_CMP_MASKED_EQ, 0xfULL, SOCK_RAW)};
		r = add_rule(ctx, SCMP_ACT_ERRNO(EPERM), "socket", __NR_socket, 2, raw, err);
		if (r < 0)
			return r;
	}
	/* clone3 passes its flags in memory, where no filter can see them:
	 * ENOSYS makes glibc (2.34+) and others fall back to clone(2). */
	r = add_rule(ctx, SCMP_ACT_ERRNO(ENOSYS), "clone3", __NR_clone3, 0, NULL, err);
	if (r < 0)
		return r;
	for (size_t i = 0; i < WR_ARRAY_SIZE(allow_personality); i++) {
		struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_EQ, allow_personality[i]);
		r = add_rule(ctx, SCMP_ACT_ALLOW, "personality", __NR_personality, 1, &c, err);
		if (r < 0)
			return r;
	}
	*out = steal_ptr(&ctx);
	return 0;
}

static int build_main(scmp_filter_ctx *out, wr_err *err)
{
	/* A syscall on both lists would get whichever rule libseccomp keeps:
	 * refuse to build an ambiguous profile. */
	for (size_t i = 0; i < WR_ARRAY_SIZE(default_allow); i++)
		for (size_t j = 0; j < WR_ARRAY_SIZE(default_deny); j++)
			if (default_allow[i].nr == default_deny[j].nr)
				return wr_err_set(err, EINVAL,
						  "seccomp: %s is both allowed and denied",
						  default_allow[i].name);
	_cleanup_scmp_ scmp_filter_ctx ctx = NULL;
	int r = new_filter(&ctx, SCMP_ACT_ERRNO(ENOSYS), "default", err);
	if (r < 0)
		return r;
	r = add_list(ctx, SCMP_ACT_ALLOW, default_allow, WR_ARRAY_SIZE(default_allow), err);
	if (r < 0)
		return r;
	r = add_list(ctx, SCMP_ACT_ERRNO(EPERM), default_deny, WR_ARRAY_SIZE(default_deny), err);
	if (r < 0)
		return r;
	*out = steal_ptr(&ctx);
	return 0;
}

/* Join guard and main into one program: guard[0..ng) main[0..nm). */
static int join_guard_main(const struct sock_filter *g, size_t ng, const struct sock_filter *m,
			   size_t nm, struct sock_fprog *out, wr_err *err)
{
	if (ng + nm > BPF_MAXINSNS)
		return wr_err_set(err, E2BIG, "seccomp: profile too long (%zu instructions)",
				  ng + nm);
	_cleanup_free_ struct sock_filter *p = calloc(ng + nm, sizeof(*p));
	if (p == NULL)
		return wr_err_set(err, ENOMEM, "seccomp: out of memory");
	memcpy(p, g, ng * sizeof(*p));
	memcpy(p + ng, m, nm * sizeof(*p));
	size_t rewritten = 0;
	for (size_t i = 0; i < ng; i++) {
		if (BPF_CLASS(p[i].code) != BPF_RET)
			continue;
		/* libseccomp only emits "return constant"; anything else would
		 * hide an action from this rewrite. */
		if (BPF_RVAL(p[i].code) != BPF_K)
			return wr_err_set(err, EINVAL, "seccomp: unexpected BPF return at %zu", i);
		if (p[i].k != WR_GUARD_NEXT)
			continue;
		/* Forward jump from i to ng, the first instruction of main. */
		p[i] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JA, (uint32_t)(ng - i - 1), 0, 0);
		rewritten++;
	}
	if (rewritten == 0)
		return wr_err_set(err, EINVAL, "seccomp: guard has no exit into the main filter");
	out->len = (unsigned short)(ng + nm);
	out->filter = steal_ptr(&p);
	return 0;
}

static int compile_default(struct sock_fprog *out, wr_err *err)
{
	_cleanup_scmp_ scmp_filter_ctx guard = NULL;
	_cleanup_scmp_ scmp_filter_ctx main_ctx = NULL;
	_cleanup_free_ struct sock_filter *g = NULL;
	_cleanup_free_ struct sock_filter *m = NULL;
	size_t ng = 0, nm = 0;
	int r = build_guard(&guard, err);
	if (r == 0)
		r = build_main(&main_ctx, err);
	if (r == 0)
		r = export_bpf(guard, &g, &ng, err);
	if (r == 0)
		r = export_bpf(main_ctx, &m, &nm, err);
	if (r == 0)
		r = join_guard_main(g, ng, m, nm, out, err);
	return r;
}

static int compile_init(struct sock_fprog *out, wr_err *err)
{
	_cleanup_scmp_ scmp_filter_ctx ctx = NULL;
	int r = new_filter(&ctx, SCMP_ACT_ERRNO(EPERM), "init", err);
	if (r < 0)
		return r;
	r = add_list(ctx, SCMP_ACT_ALLOW, init_allow, WR_ARRAY_SIZE(init_allow), err);
	if (r < 0)
		return r;
	for (size_t i = 0; i < WR_ARRAY_SIZE(init_allow_prctl); i++) {
		struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_EQ, init_allow_prctl[i]);
		r = add_rule(ctx, SCMP_ACT_ALLOW, "prctl", __NR_prctl, 1, &c, err);
		if (r < 0)
			return r;
	}
	struct scmp_arg_cmp getonly = SCMP_A2(SCMP_CMP_EQ, 0);
	r = add_rule(ctx, SCMP_ACT_ALLOW, "prlimit64", __NR_prlimit64, 1, &getonly, err);
	if (r < 0)
		return r;
	struct sock_filter *f = NULL;
	size_t n = 0;
	r = export_bpf(ctx, &f, &n, err);
	if (r < 0)
		return r;
	out->len = (unsigned short)n;
	out->filter = f;
	return 0;
}

int wr_seccomp_get(enum wr_seccomp_profile profile, const struct wr_seccomp_prog **out, wr_err *err)
{
	if ((unsigned int)profile >= WR_SECCOMP_NPROFILES)
		return wr_err_set(err, EINVAL, "seccomp: unknown profile %d", (int)profile);
	pthread_mutex_lock(&wr_seccomp_lock);
	struct wr_seccomp_prog *p = &wr_progs[profile];
	int r = 0;
	/* A failed compile caches nothing, so a later call retries. Programs
	 * live until the process exits: children read them after fork. */
	if (p->fprog.filter == NULL) {
		struct sock_fprog f = {0};
		r = profile == WR_SECCOMP_INIT ? compile_init(&f, err) : compile_default(&f, err);
		if (r == 0) {
			p->profile = profile;
			p->fprog = f;
		}
	}
	pthread_mutex_unlock(&wr_seccomp_lock);
	if (r < 0)
		return r;
	*out = p;
	return 0;
}

/* ---- installation (child half) ------------------------------------------ */

int wr_seccomp_load(const struct wr_seccomp_prog *prog, struct wr_cerr *e)
{
	if (prog == NULL || prog->fprog.filter == NULL || prog->fprog.len == 0)
		return wr_cerr_set(e, EINVAL, "seccomp: no compiled program");
	return wr_seccomp_load_insns(prog->fprog.filter, prog->fprog.len, e);
}

void wr_seccomp_prog_insns(const struct wr_seccomp_prog *prog, const void **insns, size_t *n)
{
	*insns = prog->fprog.filter;
	*n = prog->fprog.len;
}

int wr_seccomp_load_insns(const void *insns, size_t n, struct wr_cerr *e)
{
	if (insns == NULL || n == 0 || n > BPF_MAXINSNS)
		return wr_cerr_set(e, EINVAL, "seccomp: no compiled program");
	/* The kernel copies the program; ours stays untouched. No TSYNC: the
	 * caller is the single thread of a freshly cloned child. */
	struct sock_fprog f = {.len = (unsigned short)n, .filter = (struct sock_filter *)insns};
	/* FLAG_LOG: the kernel writes an audit record for every refusal
	 * (ERRNO and KILL actions) of this filter; the program is the same. */
	unsigned flags = wr_seccomp_log ? SECCOMP_FILTER_FLAG_LOG : 0;
	if (syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, flags, &f) < 0)
		return wr_cerr_sys(e, "seccomp: install filter");
	return 0;
}
