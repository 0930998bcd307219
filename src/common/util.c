#include "common/util.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"

ssize_t wr_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	size_t done = 0;
	while (done < len) {
		ssize_t n = write(fd, p + done, len - done);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		done += (size_t)n;
	}
	return (ssize_t)done;
}

ssize_t wr_read_all(int fd, void *buf, size_t len)
{
	char *p = buf;
	size_t done = 0;
	while (done < len) {
		ssize_t n = read(fd, p + done, len - done);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (n == 0)
			break;
		done += (size_t)n;
	}
	return (ssize_t)done;
}

int wr_write_file_at(int dirfd, const char *path, const char *data, wr_err *err)
{
	_cleanup_close_ int fd = openat(dirfd, path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return wr_err_sys(err, "open %s", path);
	size_t len = strlen(data);
	ssize_t n = write(fd, data, len);
	if (n < 0)
		return wr_err_sys(err, "write %s", path);
	if ((size_t)n != len)
		return wr_err_set(err, EIO, "short write to %s", path);
	return 0;
}

int wr_read_file_at(int dirfd, const char *path, char **out, size_t cap, wr_err *err)
{
	_cleanup_close_ int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return wr_err_sys(err, "open %s", path);
	_cleanup_free_ char *buf = malloc(cap + 1);
	if (buf == NULL)
		return wr_err_set(err, ENOMEM, "read %s: out of memory", path);
	ssize_t n = wr_read_all(fd, buf, cap);
	if (n < 0)
		return wr_err_sys(err, "read %s", path);
	buf[n] = 0;
	*out = steal_ptr(&buf);
	return (int)n;
}

static int parse_number(const char *s, double *val, const char **rest)
{
	if (s == NULL || *s == 0 || *s == '-' || *s == '+' || isspace((unsigned char)*s))
		return -EINVAL;
	char *end = NULL;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || v < 0 || v != v)
		return -EINVAL;
	*val = v;
	*rest = end;
	return 0;
}

int wr_parse_size(const char *s, uint64_t *out)
{
	double v;
	const char *rest;
	if (parse_number(s, &v, &rest) < 0)
		return -EINVAL;
	double mul = 1;
	char u = (char)tolower((unsigned char)*rest);
	if (*rest) {
		switch (u) {
		case 'b': mul = 1; break;
		case 'k': mul = 1024.0; break;
		case 'm': mul = 1024.0 * 1024; break;
		case 'g': mul = 1024.0 * 1024 * 1024; break;
		case 't': mul = 1024.0 * 1024 * 1024 * 1024; break;
		default: return -EINVAL;
		}
		rest++;
		if (u != 'b') {
			/* accept k, kb, kib */
			if (*rest == 'i' || *rest == 'I')
				rest++;
			if (*rest == 'b' || *rest == 'B')
				rest++;
		}
		if (*rest)
			return -EINVAL;
	}
	double bytes = v * mul;
	if (bytes >= 18446744073709551615.0)
		return -ERANGE;
	*out = (uint64_t)bytes;
	return 0;
}

int wr_parse_duration_ms(const char *s, uint64_t *out)
{
	double v;
	const char *rest;
	if (parse_number(s, &v, &rest) < 0)
		return -EINVAL;
	double mul;
	if (*rest == 0 || strcmp(rest, "s") == 0)
		mul = 1000;
	else if (strcmp(rest, "ms") == 0)
		mul = 1;
	else if (strcmp(rest, "m") == 0)
		mul = 60000;
	else if (strcmp(rest, "h") == 0)
		mul = 3600000;
	else
		return -EINVAL;
	double ms = v * mul;
	if (ms >= 9.2e18)
		return -ERANGE;
	*out = (uint64_t)ms;
	return 0;
}

int wr_parse_u64(const char *s, uint64_t max, uint64_t *out)
{
	if (s == NULL || !isdigit((unsigned char)*s))
		return -EINVAL;
	char *end = NULL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end)
		return -EINVAL;
	if (v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

uint64_t wr_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int wr_random_id(char out[17])
{
	unsigned char b[8];
	if (getrandom(b, sizeof(b), 0) != sizeof(b))
		return -EIO;
	for (int i = 0; i < 8; i++)
		snprintf(out + 2 * i, 3, "%02x", b[i]);
	return 0;
}

int wr_mkdir_p(const char *path, mode_t mode, wr_err *err)
{
	char buf[PATH_MAX];
	if (strlen(path) >= sizeof(buf))
		return wr_err_set(err, ENAMETOOLONG, "mkdir %s: path too long", path);
	strcpy(buf, path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(buf, mode) < 0 && errno != EEXIST)
			return wr_err_sys(err, "mkdir %s", buf);
		*p = '/';
	}
	if (mkdir(buf, mode) < 0 && errno != EEXIST)
		return wr_err_sys(err, "mkdir %s", buf);
	return 0;
}

#include <sys/socket.h>

int wr_send_fd(int sock, int fd)
{
	char byte = 'F';
	struct iovec iov = {.iov_base = &byte, .iov_len = 1};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	memset(&u, 0, sizeof(u));
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	msg.msg_control = u.buf;
	msg.msg_controllen = sizeof(u.buf);
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	ssize_t n;
	do
		n = sendmsg(sock, &msg, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	return n == 1 ? 0 : -errno;
}

int wr_recv_fd(int sock)
{
	char byte;
	struct iovec iov = {.iov_base = &byte, .iov_len = 1};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	msg.msg_control = u.buf;
	msg.msg_controllen = sizeof(u.buf);
	ssize_t n;
	do
		n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n == 0)
		return -EPIPE;
	struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
	if (c == NULL || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
	    c->cmsg_len != CMSG_LEN(sizeof(int)))
		return -EBADMSG;
	int fd;
	memcpy(&fd, CMSG_DATA(c), sizeof(int));
	return fd;
}

#include <linux/securebits.h>
#include <sys/fsuid.h>
#include <sys/prctl.h>

void wr_fscred_enter(uid_t uid, gid_t gid, struct wr_fscred *saved)
{
	int bits = prctl(PR_GET_SECUREBITS);
	if (bits >= 0 && !(bits & SECBIT_NO_SETUID_FIXUP))
		prctl(PR_SET_SECUREBITS, bits | SECBIT_NO_SETUID_FIXUP);
	saved->gid = setfsgid(gid);
	saved->uid = setfsuid(uid);
}

void wr_fscred_leave(const struct wr_fscred *saved)
{
	setfsuid((uid_t)saved->uid);
	setfsgid((gid_t)saved->gid);
}

int wr_buf_append(struct wr_buf *b, const void *d, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t c = b->cap ? b->cap : 4096;
		while (c < b->len + n + 1)
			c *= 2;
		char *np = realloc(b->p, c);
		if (np == NULL)
			return -ENOMEM;
		b->p = np;
		b->cap = c;
	}
	memcpy(b->p + b->len, d, n);
	b->len += n;
	b->p[b->len] = 0;
	return 0;
}

char *wr_find_in_path(const char *name)
{
	if (strchr(name, '/'))
		return access(name, X_OK) == 0 ? strdup(name) : NULL;
	const char *path = getenv("PATH");
	char *copy = strdup(path && *path ? path : "/usr/bin:/bin"), *save = NULL;
	for (char *d = copy ? strtok_r(copy, ":", &save) : NULL; d;
	     d = strtok_r(NULL, ":", &save)) {
		char *p = NULL;
		if (asprintf(&p, "%s/%s", d, name) >= 0 && access(p, X_OK) == 0) {
			free(copy);
			return p;
		}
		free(p);
	}
	free(copy);
	return NULL;
}

int wr_run_tool(char *const *argv, wr_err *err)
{
	int pipefd[2];
	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return wr_err_sys(err, "pipe");
	pid_t pid = fork();
	if (pid == 0) {
		dup2(pipefd[1], 2);
		int nul = open("/dev/null", O_RDWR);
		if (nul >= 0) {
			dup2(nul, 0);
			dup2(nul, 1);
		}
		execv(argv[0], argv);
		_exit(127);
	}
	close(pipefd[1]);
	if (pid < 0) {
		close(pipefd[0]);
		return wr_err_sys(err, "fork %s", argv[0]);
	}
	char msg[512];
	ssize_t n = read(pipefd[0], msg, sizeof(msg) - 1);
	close(pipefd[0]);
	msg[n > 0 ? n : 0] = '\0';
	msg[strcspn(msg, "\n")] = '\0';
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return wr_err_sys(err, "wait %s", argv[0]);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return wr_err_set(err, EIO, "%s failed: %s", argv[0], msg[0] ? msg : "?");
	return 0;
}

uint64_t wr_proc_stat_at(int dirfd, const char *path, char *state, int *status)
{
	_cleanup_free_ char *buf = NULL;
	if (wr_read_file_at(dirfd, path, &buf, 65536, NULL) < 0)
		return 0;
	const char *p = strrchr(buf, ')'); /* comm may hold anything */
	if (p == NULL || p[1] != ' ')
		return 0;
	p += 2; /* field 3 */
	if (state)
		*state = *p;
	uint64_t ticks = 0;
	for (int field = 3; p && field <= 52; field++) {
		if (field == 22)
			ticks = strtoull(p, NULL, 10);
		if (field == 52 && status)
			*status = (int)strtol(p, NULL, 10);
		p = strchr(p, ' ');
		if (p)
			p++;
	}
	return ticks;
}

int wr_pidfd_exit_status(int pidfd)
{
	struct pollfd pf = {.fd = pidfd, .events = POLLIN};
	if (poll(&pf, 1, 0) != 1 || !(pf.revents & POLLIN))
		return -1; /* still running (or not a pidfd) */
	for (int tries = 0; tries < 2000; tries++) {
		struct wr_pidfd_info info;
		memset(&info, 0, sizeof(info));
		info.mask = WR_PIDFD_INFO_EXIT | WR_PIDFD_INFO_PID;
		if (ioctl(pidfd, WR_PIDFD_GET_INFO, &info) < 0) {
			/* Reaped, and its status not stored yet: the kernel
			 * unhashes the task before it records the exit for
			 * pidfds (measured on 6.18: ESRCH right after the
			 * reap, then the status). Kernels that never record
			 * it say ESRCH for good. */
			if (errno != ESRCH || !wr_pidfd_exit_kept())
				return -1;
			usleep(100);
			continue;
		}
		if (info.mask & WR_PIDFD_INFO_EXIT)
			return info.exit_code;
		if (!(info.mask & WR_PIDFD_INFO_PID) || info.pid == 0)
			return -1;
		char path[64];
		snprintf(path, sizeof(path), "/proc/%u", info.pid);
		_cleanup_close_ int dfd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
		struct wr_pidfd_info again = {.mask = WR_PIDFD_INFO_PID};
		if (dfd >= 0 && ioctl(pidfd, WR_PIDFD_GET_INFO, &again) == 0 &&
		    (again.mask & WR_PIDFD_INFO_PID) && again.pid == info.pid) {
			int st = -1;
			if (wr_proc_stat_at(dfd, "stat", NULL, &st) != 0 && st >= 0)
				return st;
		}
		/* Reaped meanwhile: PIDFD_INFO_EXIT has it on the next turn. */
		usleep(100);
	}
	return -1;
}

static bool g_exit_kept;
static pthread_once_t g_exit_kept_once = PTHREAD_ONCE_INIT;

static void exit_kept_probe(void)
{
	int pidfd = -1;
	struct wr_clone_args ca = {
	    .flags = CLONE_PIDFD, .pidfd = (uint64_t)(uintptr_t)&pidfd, .exit_signal = SIGCHLD};
	long pid = wr_clone3(&ca);
	if (pid == 0)
		_exit(7);
	if (pid < 0)
		return;
	siginfo_t si;
	while (waitid(P_PIDFD, (id_t)pidfd, &si, WEXITED) < 0 && errno == EINTR)
		;
	struct wr_pidfd_info info = {.mask = WR_PIDFD_INFO_EXIT};
	bool kept = ioctl(pidfd, WR_PIDFD_GET_INFO, &info) == 0 &&
		    (info.mask & WR_PIDFD_INFO_EXIT) && WIFEXITED(info.exit_code) &&
		    WEXITSTATUS(info.exit_code) == 7;
	close(pidfd);
	g_exit_kept = kept;
}

bool wr_pidfd_exit_kept(void)
{
	pthread_once(&g_exit_kept_once, exit_kept_probe);
	return g_exit_kept;
}

void wr_rm_flat_dir(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;
	while (d && (de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			unlinkat(dirfd(d), de->d_name, 0);
	if (d)
		closedir(d);
	rmdir(path);
}
