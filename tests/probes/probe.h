/* probe.h: what the parts of wr-probe (one static binary, several files)
 * share: the output helpers, the zeroed buffers and every command. See the
 * comment at the top of wr-probe.c for the commands and the output format. */
#pragma once

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
#include <sys/mount.h>
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

/* ---- shared helpers (wr-probe.c) ---------------------------------------- */

const char *errname(int e, char buf[24]);
void put_escaped(const char *s);
const char *esc(const char *s);
/* "<subject> ok" or "<subject> errno=NAME", then optional extra text. */
void result(const char *subject, long rc, int err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int usage(const char *msg);
long parse_long(const char *s, long dflt);
int parse_signal(const char *s);
extern char zbuf[4096];
extern char zbuf2[4096];

/* ---- commands (argc/argv are the arguments after the command name) ------- */

int cmd_sys(int argc, char **argv);
int cmd_ioctl(int argc, char **argv);
int cmd_forkbomb(void);
int cmd_threads(int argc, char **argv);
int cmd_membomb(int argc, char **argv);
int cmd_diskfill(int argc, char **argv);
int cmd_inodefill(int argc, char **argv);
int cmd_yes(int argc, char **argv);
int cmd_linger(int argc, char **argv);
int cmd_sleep(int argc, char **argv);
int cmd_kill_self(int argc, char **argv);
int cmd_kill(int argc, char **argv);
int cmd_connect_tcp(int argc, char **argv);
int cmd_fdfill(void);
int cmd_sched_fifo(void);
int connect_unix(const char *subject, const char *name, int abstract);
/* the red-team commands (probe_red.c): -1 when CMD is not one of them */
int red_main(const char *cmd, int argc, char **argv);
/* network commands (probe_net.c) */
int cmd_portscan(int argc, char **argv);
int cmd_egress(int argc, char **argv);
int cmd_dns(int argc, char **argv);
int cmd_abstract(int argc, char **argv);
int cmd_forge(int argc, char **argv);
/* probe_netf.c: the network filter's tests */
int cmd_send_udp(int argc, char **argv);
int cmd_socket(int argc, char **argv);
int cmd_ping(int argc, char **argv);
/* shared with probe_net.c: tokens arrive XORed with 0x5a and hex-encoded */
int unhex_xor(const char *hex, char *out, size_t cap);
