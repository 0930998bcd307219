/* Small fd, file and parsing helpers shared by every module. */
#ifndef WARREN_COMMON_UTIL_H
#define WARREN_COMMON_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

/* A growable byte buffer, always NUL-terminated after its len bytes. */
struct wr_buf {
	char *p;
	size_t len, cap;
};
/* Append n bytes (doubling from 4 KiB); -ENOMEM leaves b as it was. */
int wr_buf_append(struct wr_buf *b, const void *d, size_t n);

/* Write all of buf to fd, retrying on EINTR and short writes. */
ssize_t wr_write_all(int fd, const void *buf, size_t len);
/* Read until EOF or len bytes. */
ssize_t wr_read_all(int fd, void *buf, size_t len);

/* Write a whole small string to dirfd/path (O_WRONLY|O_CLOEXEC, no create).
 * Used for cgroup and /proc control files. */
int wr_write_file_at(int dirfd, const char *path, const char *data, wr_err *err);
/* Read a small file (< cap bytes) into a NUL-terminated malloc'd buffer. */
int wr_read_file_at(int dirfd, const char *path, char **out, size_t cap, wr_err *err);

/* Parse "512", "64k", "1.5G", "2GiB" (powers of 1024) into bytes. */
int wr_parse_size(const char *s, uint64_t *out);
/* Parse "500ms", "30s", "5m", "1h", "1.5" (seconds) into milliseconds. */
int wr_parse_duration_ms(const char *s, uint64_t *out);
/* Parse a non-negative decimal integer that fits in max. */
int wr_parse_u64(const char *s, uint64_t max, uint64_t *out);

/* Monotonic clock in nanoseconds. */
uint64_t wr_now_ns(void);

/* 16 lowercase hex chars of randomness + NUL (sandbox ids). */
int wr_random_id(char out[17]);

/* The absolute path of an executable: name itself when it has a '/',
 * else the first match in $PATH (default /usr/bin:/bin). malloc'd, or NULL
 * when none is executable. */
char *wr_find_in_path(const char *name);

/* mkdir -p with mode; EEXIST is success. */
int wr_mkdir_p(const char *path, mode_t mode, wr_err *err);

/* Act on a sandbox's filesystems as its user: the calling thread's
 * fsuid/fsgid become uid/gid (host ids) and SECBIT_NO_SETUID_FIXUP keeps
 * its capabilities meanwhile. Per thread; restore with wr_fscred_leave. */
struct wr_fscred {
	int uid, gid; /* the previous ids */
};
void wr_fscred_enter(uid_t uid, gid_t gid, struct wr_fscred *saved);
void wr_fscred_leave(const struct wr_fscred *saved);

/* Pass one fd over a Unix socket (SCM_RIGHTS) with a one-byte payload.
 * Child-half safe: no allocation. wr_recv_fd returns the received fd
 * (close-on-exec), -EPIPE on EOF, -errno on failure. */
int wr_send_fd(int sock, int fd);
int wr_recv_fd(int sock);

/* Run argv[0] (an absolute path to a host tool) with stdin and stdout on
 * /dev/null and wait for it; a non-zero exit is an EIO error carrying the
 * first line of its stderr. */
int wr_run_tool(char *const *argv, wr_err *err);

/* A /proc/<pid>/stat file (path relative to dirfd): the state (field 3),
 * the start time (22: clock ticks since boot; with the pid it names one
 * process for good) and, for a zombie, its wait status (52). Returns the
 * start time, 0 when it cannot be read. state and status may be NULL. */
uint64_t wr_proc_stat_at(int dirfd, const char *path, char *state, int *status);

/* The wait status (as waitpid reports it) of an exited process, from the
 * host kernel through a pidfd of it, whoever its parent is and whether that
 * parent reaped it yet: PIDFD_INFO_EXIT (Linux 6.15) once it was reaped,
 * else the zombie's /proc/<pid>/stat (exit_code, field 52), read through a
 * /proc/<pid> dir opened while the pidfd still showed it unreaped (so that
 * dir is the process's, never a recycled pid's). -1 while it runs, or when
 * the kernel cannot say (older than 6.15, and reaped). */
int wr_pidfd_exit_status(int pidfd);
/* Whether this kernel keeps a reaped process's exit status for its pidfds
 * (PIDFD_INFO_EXIT): tried once on a child of our own (a fork that exits),
 * then remembered. */
bool wr_pidfd_exit_kept(void);

/* Remove a directory of plain files (saved VM states, checkpoint images):
 * its entries unlinked, then itself; best effort, nothing there is fine. */
void wr_rm_flat_dir(const char *path);

#endif
