/* File operations on a sandbox's filesystem from the host, race-free.
 *
 * The sandbox is hostile: it can plant symlinks, swap directories for
 * symlinks between two of our syscalls and mount things. So no path string
 * is ever handed to a plain path-walking syscall. Whole caller paths go
 * through openat2() beneath fs->root_fd with RESOLVE_IN_ROOT (".." and
 * absolute symlinks stop at the root), RESOLVE_NO_MAGICLINKS (no
 * /proc/x/fd/y or /proc/self/root jumps) and RESOLVE_NO_XDEV (never enter
 * another mount). Everything after that works on the directory fd it gave,
 * with single path components and *at() calls, and a single component is
 * opened with RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS so a swapped-in symlink
 * fails instead of being followed.
 *
 * This file: path checks and resolution (shared with fsops_tree.c through
 * fsops_internal.h), stat, read, the atomic write, and every public entry
 * point, each run under the sandbox user's fs ids. The directory-tree
 * operations (list, mkdir, remove, rename) are in fsops_tree.c.
 */
#include "tiers/fsops.h"

#include <errno.h>
#include <linux/securebits.h>
#include <sys/fsuid.h>
#include <sys/prctl.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "common/util.h"
#include "tiers/fsops_internal.h"

#define CHUNK (64 * 1024)
/* openat2 returns EAGAIN when a rename or mount raced a ".." step. */
#define RESOLVE_RETRIES 64
#define TMP_RETRIES 100
/* New parent directories made by a write with `parents`. */
#define PARENT_MODE 0755
/* Initial read buffer, grown as the file turns out to be larger. */
#define READ_PREALLOC (1024 * 1024)
/* Ids outside the sandbox's range are reported as the overflow id. */
#define OVERFLOW_ID 65534

const char *fsi_shown(const char *p)
{
	return p ? p : "";
}

const char *fsi_ellipsis(const char *p)
{
	return p && strnlen(p, SHOWN + 1) > SHOWN ? "..." : "";
}

/* errnum with its strerror text, for the caller to wrap with "op path". */
int fsi_sys_err(wr_err *err, int errnum)
{
	return wr_err_set(err, errnum, "%s", strerror(errnum));
}

/* ---- resolution ---------------------------------------------------------- */

/* openat2 with the EAGAIN retry. Returns an fd or -errno. */
int fsi_resolve(int dirfd, const char *path, int flags, mode_t mode, uint64_t how_resolve)
{
	struct open_how how = {
	    .flags = (uint64_t)(unsigned int)(flags | O_CLOEXEC),
	    .mode = (flags & O_CREAT) ? mode : 0,
	    .resolve = how_resolve,
	};
	for (int i = 0; i < RESOLVE_RETRIES; i++) {
		int fd = wr_openat2(dirfd, path, &how);
		if (fd >= 0)
			return fd;
		if (errno != EAGAIN)
			return -errno;
	}
	return -EAGAIN;
}

/* The error for a failed fsi_resolve(). */
static int resolve_err(wr_err *err, int neg)
{
	if (neg == -EAGAIN)
		return wr_err_set(err, EAGAIN, "path kept changing during resolution");
	return fsi_sys_err(err, -neg);
}

int fsi_open_in_root(const struct wr_fs *fs, const char *path, int flags, wr_err *err)
{
	int fd = fsi_resolve(fs->root_fd, path, flags, 0, WALK_ROOT);
	return fd < 0 ? resolve_err(err, fd) : fd;
}

int fsi_check_fs(const struct wr_fs *fs, wr_err *err)
{
	if (fs == NULL || fs->root_fd < 0)
		return wr_err_set(err, EBADF, "no sandbox root");
	return 0;
}

/* Empty -> EINVAL; longer than PATH_MAX - 1 bytes or a component longer
 * than NAME_MAX -> ENAMETOOLONG. */
int fsi_check_path(const char *path, wr_err *err)
{
	if (path == NULL || path[0] == '\0')
		return wr_err_set(err, EINVAL, "empty path");
	size_t len = strnlen(path, PATH_MAX);
	if (len >= PATH_MAX)
		return wr_err_set(err, ENAMETOOLONG, "path longer than %d bytes", PATH_MAX - 1);
	size_t comp = 0;
	for (size_t i = 0; i <= len; i++) {
		if (path[i] == '/' || path[i] == '\0') {
			if (comp > NAME_MAX)
				return wr_err_set(err, ENAMETOOLONG,
						  "path component longer than %d bytes", NAME_MAX);
			comp = 0;
		} else {
			comp++;
		}
	}
	return 0;
}

int fsi_split_path(const char *path, struct split *sp, wr_err *err)
{
	int r = fsi_check_path(path, err);
	if (r < 0)
		return r;
	size_t len = strlen(path);
	memcpy(sp->buf, path, len + 1);
	sp->trailing_slash = len > 1 && path[len - 1] == '/';
	while (len > 1 && sp->buf[len - 1] == '/')
		sp->buf[--len] = '\0';

	sp->is_root = true;
	for (const char *c = sp->buf; *c; c++) {
		if (*c != '/' && *c != '.') {
			sp->is_root = false;
			break;
		}
		/* ".." is not the root ("a/.." is refused below) */
		if (c[0] == '.' && c[1] == '.') {
			sp->is_root = false;
			break;
		}
	}
	if (sp->is_root) {
		sp->parent = "/";
		sp->base = NULL;
		return 0;
	}

	char *slash = strrchr(sp->buf, '/');
	if (slash == NULL) {
		sp->parent = ".";
		sp->base = sp->buf;
	} else if (slash == sp->buf) {
		sp->parent = "/";
		sp->base = slash + 1;
	} else {
		*slash = '\0';
		sp->parent = sp->buf;
		sp->base = slash + 1;
	}
	if (sp->base[0] == '\0' || strcmp(sp->base, ".") == 0 || strcmp(sp->base, "..") == 0)
		return wr_err_set(err, EINVAL, "last path component must be a name, not \"%s\"",
				  sp->base);
	return 0;
}

/* Open a directory we just made, without following anything, and give it
 * to the sandbox: owner uid/gid, exact mode (mkdirat applied the umask). */
int fsi_adopt_dir(const struct wr_fs *fs, int pfd, const char *name, mode_t mode, wr_err *err)
{
	_cleanup_close_ int fd =
	    fsi_resolve(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0, WALK_ONE);
	if (fd < 0)
		return fsi_sys_err(err, -fd);
	if (fchown(fd, fs->uid, fs->gid) < 0 || fchmod(fd, mode & 07777) < 0)
		return fsi_sys_err(err, errno);
	return steal_fd(&fd);
}

/* Resolve directory `path`, creating missing components one at a time.
 * Each prefix is resolved from the root (so "..", symlinks and swaps keep
 * their in-root meaning); a missing one is made with mkdirat() in the fd of
 * the prefix before it and opened without following anything. */
static int mkdir_walk(const struct wr_fs *fs, const char *path, mode_t mode, wr_err *err)
{
	int fd = fsi_resolve(fs->root_fd, path, O_PATH | O_DIRECTORY, 0, WALK_ROOT);
	if (fd >= 0)
		return fd;
	if (fd != -ENOENT)
		return resolve_err(err, fd);

	_cleanup_close_ int cur = fsi_open_in_root(fs, "/", O_PATH | O_DIRECTORY, err);
	if (cur < 0)
		return cur;
	char prefix[PATH_MAX];
	size_t n = strlen(path), i = 0;
	while (i < n) {
		while (i < n && path[i] == '/')
			i++;
		if (i >= n)
			break;
		size_t start = i;
		while (i < n && path[i] != '/')
			i++;
		memcpy(prefix, path, i);
		prefix[i] = '\0';
		const char *comp = prefix + start;

		int next = fsi_resolve(fs->root_fd, prefix, O_PATH | O_DIRECTORY, 0, WALK_ROOT);
		if (next == -ENOENT) {
			if (mkdirat(cur, comp, 0700) == 0) {
				next = fsi_adopt_dir(fs, cur, comp, mode, err);
				if (next < 0)
					return wr_err_wrap(err, "create " PFMT, PARG(prefix));
			} else if (errno == EEXIST) {
				/* made concurrently, or a dangling symlink */
				next = fsi_resolve(fs->root_fd, prefix, O_PATH | O_DIRECTORY, 0,
						   WALK_ROOT);
			} else {
				return wr_err_sys(err, "create " PFMT, PARG(prefix));
			}
		}
		if (next < 0) {
			resolve_err(err, next);
			return wr_err_wrap(err, PFMT, PARG(prefix));
		}
		close(cur);
		cur = next;
	}
	return steal_fd(&cur);
}

int fsi_open_parent(const struct wr_fs *fs, const struct split *sp, bool parents, wr_err *err)
{
	if (parents)
		return mkdir_walk(fs, sp->parent, PARENT_MODE, err);
	return fsi_open_in_root(fs, sp->parent, O_PATH | O_DIRECTORY, err);
}

/* ---- stat ------------------------------------------------------------------ */

static enum wr_fs_type type_of(mode_t m)
{
	if (S_ISREG(m))
		return WR_FS_FILE;
	if (S_ISDIR(m))
		return WR_FS_DIR;
	if (S_ISLNK(m))
		return WR_FS_SYMLINK;
	return WR_FS_OTHER;
}

static const char *type_name(mode_t m)
{
	switch (m & S_IFMT) {
	case S_IFIFO: return "fifo";
	case S_IFSOCK: return "socket";
	case S_IFCHR: return "char device";
	case S_IFBLK: return "block device";
	case S_IFDIR: return "directory";
	case S_IFLNK: return "symlink";
	default: return "unknown type";
	}
}

static uid_t sandbox_id(const struct wr_fs *fs, uid_t host)
{
	return host >= fs->id_base ? host - fs->id_base : OVERFLOW_ID;
}

void fsi_fill_stat(const struct wr_fs *fs, const struct stat *st, struct wr_fs_stat *out)
{
	out->type = type_of(st->st_mode);
	out->size = (uint64_t)st->st_size;
	out->mode = st->st_mode & 07777;
	out->uid = sandbox_id(fs, st->st_uid);
	out->gid = (gid_t)sandbox_id(fs, (uid_t)st->st_gid);
	out->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
	out->symlink_target = NULL;
}

/* readlinkat into a malloc'd string; NULL with errno on failure. */
char *fsi_read_link(int dirfd, const char *name)
{
	_cleanup_free_ char *buf = malloc(PATH_MAX + 1);
	if (buf == NULL)
		return NULL;
	ssize_t n = readlinkat(dirfd, name, buf, PATH_MAX);
	if (n < 0)
		return NULL;
	buf[n] = '\0';
	return steal_ptr(&buf);
}

void wr_fs_stat_free(struct wr_fs_stat *st)
{
	if (st == NULL)
		return;
	free(st->symlink_target);
	st->symlink_target = NULL;
}

static int fs_stat_unguarded(const struct wr_fs *fs, const char *path, struct wr_fs_stat *st,
			     wr_err *err)
{
	memset(st, 0, sizeof(*st));
	int r = fsi_check_fs(fs, err);
	if (r == 0)
		r = fsi_check_path(path, err);
	if (r < 0)
		return wr_err_wrap(err, "stat " PFMT, PARG(path));

	/* O_PATH|O_NOFOLLOW: the last component itself, symlink or not. */
	_cleanup_close_ int fd = fsi_open_in_root(fs, path, O_PATH | O_NOFOLLOW, err);
	if (fd < 0)
		return wr_err_wrap(err, "stat " PFMT, PARG(path));
	struct stat sb;
	if (fstat(fd, &sb) < 0)
		return wr_err_sys(err, "stat " PFMT, PARG(path));
	fsi_fill_stat(fs, &sb, st);
	if (S_ISLNK(sb.st_mode)) {
		st->symlink_target = fsi_read_link(fd, "");
		if (st->symlink_target == NULL)
			return wr_err_sys(err, "stat " PFMT ": read link", PARG(path));
	}
	return 0;
}

static int fs_exists_unguarded(const struct wr_fs *fs, const char *path, bool *exists, wr_err *err)
{
	struct wr_fs_stat st;
	*exists = false;
	int r = wr_fs_stat(fs, path, &st, err);
	if (r == -ENOENT || r == -ENOTDIR) {
		wr_err_free(err);
		return 0;
	}
	if (r < 0)
		return r;
	wr_fs_stat_free(&st);
	*exists = true;
	return 0;
}

/* ---- read ------------------------------------------------------------------ */

/* Open a regular file for reading. The path is resolved to an O_PATH fd
 * first (which opens nothing: no FIFO blocks, no device driver's open
 * runs), its type checked, and that very inode reopened through
 * /proc/thread-self/fd, so what is read is what was checked. */
static int open_regular(const struct wr_fs *fs, const char *path, struct stat *st, wr_err *err)
{
	_cleanup_close_ int pfd = fsi_open_in_root(fs, path, O_PATH, err);
	if (pfd < 0)
		return pfd;
	if (fstat(pfd, st) < 0)
		return fsi_sys_err(err, errno);
	if (S_ISDIR(st->st_mode))
		return fsi_sys_err(err, EISDIR);
	if (!S_ISREG(st->st_mode))
		return wr_err_set(err, EINVAL, "not a regular file (%s)", type_name(st->st_mode));

	char proc[64];
	snprintf(proc, sizeof(proc), "/proc/thread-self/fd/%d", pfd);
	_cleanup_close_ int fd = open(proc, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return wr_err_sys(err, "reopen through procfs (is /proc mounted?)");
	struct stat again;
	if (fstat(fd, &again) < 0)
		return fsi_sys_err(err, errno);
	if (again.st_dev != st->st_dev || again.st_ino != st->st_ino || !S_ISREG(again.st_mode))
		return wr_err_set(err, EAGAIN, "file changed while being opened");
	*st = again;
	return steal_fd(&fd);
}

static ssize_t read_some(int fd, void *buf, size_t len)
{
	for (;;) {
		ssize_t n = read(fd, buf, len);
		if (n >= 0)
			return n;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			struct pollfd p = {.fd = fd, .events = POLLIN};
			if (poll(&p, 1, -1) < 0 && errno != EINTR)
				return -1;
			continue;
		}
		return -1;
	}
}

static int write_full(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				struct pollfd pf = {.fd = fd, .events = POLLOUT};
				if (poll(&pf, 1, -1) < 0 && errno != EINTR)
					return -1;
				continue;
			}
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Is there at least one more byte to read? -1 on error. */
static int more_data(int fd)
{
	char c;
	ssize_t n = read_some(fd, &c, 1);
	return n < 0 ? -1 : n > 0;
}

static int fs_read_unguarded(const struct wr_fs *fs, const char *path, uint64_t max, char **data,
			     size_t *len, bool *truncated, wr_err *err)
{
	*data = NULL;
	*len = 0;
	*truncated = false;
	int r = fsi_check_fs(fs, err);
	if (r == 0)
		r = fsi_check_path(path, err);
	if (r < 0)
		return wr_err_wrap(err, "read " PFMT, PARG(path));
	struct stat st;
	_cleanup_close_ int fd = open_regular(fs, path, &st, err);
	if (fd < 0)
		return wr_err_wrap(err, "read " PFMT, PARG(path));

	if (max > SIZE_MAX - 1)
		max = SIZE_MAX - 1;
	size_t cap = (uint64_t)st.st_size < max ? (size_t)st.st_size : (size_t)max;
	if (cap > READ_PREALLOC)
		cap = READ_PREALLOC;
	cap += 1;
	_cleanup_free_ char *buf = malloc(cap);
	if (buf == NULL)
		return wr_err_set(err, ENOMEM, "read " PFMT ": out of memory", PARG(path));
	size_t got = 0;
	while (got < max) {
		if (got + 1 >= cap) {
			size_t ncap = cap > (SIZE_MAX - 1) / 2 ? SIZE_MAX : cap * 2;
			if (ncap - 1 > max)
				ncap = (size_t)max + 1;
			char *nbuf = realloc(buf, ncap);
			if (nbuf == NULL)
				return wr_err_set(err, ENOMEM, "read " PFMT ": out of memory",
						  PARG(path));
			buf = nbuf;
			cap = ncap;
		}
		size_t want = cap - 1 - got;
		if (want > CHUNK)
			want = CHUNK;
		ssize_t n = read_some(fd, buf + got, want);
		if (n < 0)
			return wr_err_sys(err, "read " PFMT, PARG(path));
		if (n == 0)
			break;
		got += (size_t)n;
	}
	if (got == max) {
		int more = more_data(fd);
		if (more < 0)
			return wr_err_sys(err, "read " PFMT, PARG(path));
		*truncated = more;
	}
	buf[got] = '\0';
	*data = steal_ptr(&buf);
	*len = got;
	return 0;
}

static int fs_read_to_fd_unguarded(const struct wr_fs *fs, const char *path, int out_fd,
				   uint64_t max, uint64_t *written, wr_err *err)
{
	*written = 0;
	int r = fsi_check_fs(fs, err);
	if (r == 0)
		r = fsi_check_path(path, err);
	if (r < 0)
		return wr_err_wrap(err, "read " PFMT, PARG(path));
	struct stat st;
	_cleanup_close_ int fd = open_regular(fs, path, &st, err);
	if (fd < 0)
		return wr_err_wrap(err, "read " PFMT, PARG(path));
	_cleanup_free_ char *buf = malloc(CHUNK);
	if (buf == NULL)
		return wr_err_set(err, ENOMEM, "read " PFMT ": out of memory", PARG(path));

	uint64_t done = 0;
	while (done < max) {
		size_t want = max - done < CHUNK ? (size_t)(max - done) : CHUNK;
		ssize_t n = read_some(fd, buf, want);
		if (n < 0)
			return wr_err_sys(err, "read " PFMT, PARG(path));
		if (n == 0)
			return 0;
		if (write_full(out_fd, buf, (size_t)n) < 0)
			return wr_err_sys(err, "read " PFMT ": write output", PARG(path));
		done += (uint64_t)n;
		*written = done;
	}
	int more = more_data(fd);
	if (more < 0)
		return wr_err_sys(err, "read " PFMT, PARG(path));
	return more;
}

/* ---- write ----------------------------------------------------------------- */

/* Where the new content comes from: a buffer, or fd (when fd >= 0) with at
 * most max bytes. */
struct wsrc {
	const void *data;
	size_t len;
	int fd;
	uint64_t max;
};

static int fill_tmp(int tfd, const struct wsrc *src, wr_err *err)
{
	if (src->fd < 0) {
		if (write_full(tfd, src->data, src->len) < 0)
			return fsi_sys_err(err, errno);
		return 0;
	}
	_cleanup_free_ char *buf = malloc(CHUNK);
	if (buf == NULL)
		return fsi_sys_err(err, ENOMEM);
	uint64_t total = 0;
	for (;;) {
		ssize_t n = read_some(src->fd, buf, CHUNK);
		if (n < 0)
			return wr_err_sys(err, "read input");
		if (n == 0)
			return 0;
		if ((uint64_t)n > src->max - total)
			return wr_err_set(err, EFBIG, "input larger than the %llu byte limit",
					  (unsigned long long)src->max);
		total += (uint64_t)n;
		if (write_full(tfd, buf, (size_t)n) < 0)
			return fsi_sys_err(err, errno);
	}
}

/* Create ".<base>.wr-tmp-XXXXXX" in pfd; its name goes to name. */
static int create_tmp(int pfd, const char *base, char name[NAME_MAX + 1], wr_err *err)
{
	static const char set[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
	for (int attempt = 0; attempt < TMP_RETRIES; attempt++) {
		unsigned char rnd[6];
		char sfx[sizeof(rnd) + 1];
		if (getrandom(rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
			return wr_err_sys(err, "getrandom");
		for (size_t i = 0; i < sizeof(rnd); i++)
			sfx[i] = set[rnd[i] % (sizeof(set) - 1)];
		sfx[sizeof(rnd)] = '\0';
		/* 1 + 200 + 8 + 6 bytes: always within NAME_MAX */
		snprintf(name, NAME_MAX + 1, ".%.200s.wr-tmp-%s", base, sfx);
		int fd = fsi_resolve(pfd, name, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW, 0600,
				     WALK_ONE);
		if (fd >= 0)
			return fd;
		if (fd != -EEXIST && fd != -ELOOP)
			return fsi_sys_err(err, -fd);
	}
	return wr_err_set(err, EEXIST, "could not pick a temporary file name");
}

static int write_atomic(const struct wr_fs *fs, const char *path, const struct wsrc *src,
			mode_t mode, bool parents, wr_err *err)
{
	int r = fsi_check_fs(fs, err);
	if (r < 0)
		return r;
	_cleanup_free_ struct split *sp = malloc(sizeof(*sp));
	if (sp == NULL)
		return fsi_sys_err(err, ENOMEM);
	r = fsi_split_path(path, sp, err);
	if (r < 0)
		return r;
	if (sp->is_root || sp->trailing_slash)
		return fsi_sys_err(err, EISDIR);

	_cleanup_close_ int pfd = fsi_open_parent(fs, sp, parents, err);
	if (pfd < 0)
		return pfd;

	/* An existing file keeps its permissions (set-id bits dropped, as
	 * write(2) by a non-owner would); a symlink or other entry at the
	 * name is replaced, never written through. */
	mode_t fmode = mode & 07777;
	struct stat st;
	if (fstatat(pfd, sp->base, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (S_ISDIR(st.st_mode))
			return fsi_sys_err(err, EISDIR);
		if (S_ISREG(st.st_mode))
			fmode = st.st_mode & 07777 & ~(mode_t)(S_ISUID | S_ISGID);
	} else if (errno != ENOENT) {
		return fsi_sys_err(err, errno);
	}

	char tmp[NAME_MAX + 1];
	_cleanup_close_ int tfd = create_tmp(pfd, sp->base, tmp, err);
	if (tfd < 0)
		return tfd;
	if (fchown(tfd, fs->uid, fs->gid) < 0 || fchmod(tfd, fmode) < 0)
		r = fsi_sys_err(err, errno);
	if (r == 0)
		r = fill_tmp(tfd, src, err);
	/* tmpfs and overlay can report a full disk as late as close() */
	if (r == 0 && close(steal_fd(&tfd)) < 0)
		r = fsi_sys_err(err, errno);
	if (r == 0 && renameat(pfd, tmp, pfd, sp->base) < 0)
		r = fsi_sys_err(err, errno);
	if (r < 0)
		unlinkat(pfd, tmp, 0);
	return r;
}

static int fs_write_unguarded(const struct wr_fs *fs, const char *path, const void *data,
			      size_t len, mode_t mode, bool parents, wr_err *err)
{
	struct wsrc src = {.data = data, .len = len, .fd = -1};
	int r = write_atomic(fs, path, &src, mode, parents, err);
	return r < 0 ? wr_err_wrap(err, "write " PFMT, PARG(path)) : 0;
}

static int fs_write_from_fd_unguarded(const struct wr_fs *fs, const char *path, int in_fd,
				      uint64_t max, mode_t mode, bool parents, wr_err *err)
{
	if (in_fd < 0)
		return wr_err_set(err, EBADF, "write " PFMT ": no input", PARG(path));
	struct wsrc src = {.fd = in_fd, .max = max};
	int r = write_atomic(fs, path, &src, mode, parents, err);
	return r < 0 ? wr_err_wrap(err, "write " PFMT, PARG(path)) : 0;
}

/* ---- credentials ---------------------------------------------------------
 *
 * The sandbox's filesystems belong to its user namespace: an inode owned by
 * the host's uid 0 cannot exist in them (creating one fails EOVERFLOW). So
 * every operation runs with the thread's fsuid/fsgid set to the sandbox
 * user's host ids, and SECBIT_NO_SETUID_FIXUP keeps the thread's
 * capabilities while it does (the host side acts with full access, as the
 * owner of the sandbox; what it creates belongs to the sandbox user).
 * fsuid is per thread, so concurrent operations on other threads and other
 * sandboxes are unaffected; the previous ids are restored on the way out
 * (wr_fscred_enter/leave, shared with the pty set-up in exec.c). */
#define GUARDED(call)                                                                              \
	do {                                                                                       \
		if (fs->remote)                                                                    \
			return REMOTE_##call;                                                      \
		struct wr_fscred c_;                                                               \
		wr_fscred_enter(fs->uid, fs->gid, &c_);                                            \
		int r_ = call;                                                                     \
		wr_fscred_leave(&c_);                                                              \
		return r_;                                                                         \
	} while (0)

/* A remote root (struct wr_fs_remote) gets each call as it came. */
#define REMOTE_fs_stat_unguarded(fs, ...) fs->remote->stat(fs->remote_ctx, __VA_ARGS__)
#define REMOTE_fs_exists_unguarded(fs, ...) fs->remote->exists(fs->remote_ctx, __VA_ARGS__)
#define REMOTE_fs_read_unguarded(fs, ...) fs->remote->read(fs->remote_ctx, __VA_ARGS__)
#define REMOTE_fs_read_to_fd_unguarded(fs, ...) fs->remote->read_to_fd(fs->remote_ctx, __VA_ARGS__)
#define REMOTE_fs_write_unguarded(fs, ...) fs->remote->write(fs->remote_ctx, __VA_ARGS__)
#define REMOTE_fs_write_from_fd_unguarded(fs, ...)                                                 \
	fs->remote->write_from_fd(fs->remote_ctx, __VA_ARGS__)
#define REMOTE_fsi_list_unguarded(fs, ...) fs->remote->list(fs->remote_ctx, __VA_ARGS__)
#define REMOTE_fsi_mkdir_unguarded(fs, ...) fs->remote->mkdir(fs->remote_ctx, __VA_ARGS__)
#define REMOTE_fsi_remove_unguarded(fs, ...) fs->remote->remove(fs->remote_ctx, __VA_ARGS__)
#define REMOTE_fsi_rename_unguarded(fs, ...) fs->remote->rename(fs->remote_ctx, __VA_ARGS__)

int wr_fs_symlink(const struct wr_fs *fs, const char *path, const char *target, wr_err *err)
{
	if (fs->remote == NULL || fs->remote->symlink == NULL)
		return wr_err_set(err, EOPNOTSUPP, "symlink " PFMT ": not on this root",
				  PARG(path));
	return fs->remote->symlink(fs->remote_ctx, path, target, err);
}

int wr_fs_stat(const struct wr_fs *fs, const char *path, struct wr_fs_stat *st, wr_err *err)
{
	GUARDED(fs_stat_unguarded(fs, path, st, err));
}

int wr_fs_exists(const struct wr_fs *fs, const char *path, bool *exists, wr_err *err)
{
	GUARDED(fs_exists_unguarded(fs, path, exists, err));
}

int wr_fs_read(const struct wr_fs *fs, const char *path, uint64_t max, char **data, size_t *len,
	       bool *truncated, wr_err *err)
{
	GUARDED(fs_read_unguarded(fs, path, max, data, len, truncated, err));
}

int wr_fs_read_to_fd(const struct wr_fs *fs, const char *path, int out_fd, uint64_t max,
		     uint64_t *written, wr_err *err)
{
	GUARDED(fs_read_to_fd_unguarded(fs, path, out_fd, max, written, err));
}

int wr_fs_write(const struct wr_fs *fs, const char *path, const void *data, size_t len, mode_t mode,
		bool parents, wr_err *err)
{
	GUARDED(fs_write_unguarded(fs, path, data, len, mode, parents, err));
}

int wr_fs_write_from_fd(const struct wr_fs *fs, const char *path, int in_fd, uint64_t max,
			mode_t mode, bool parents, wr_err *err)
{
	GUARDED(fs_write_from_fd_unguarded(fs, path, in_fd, max, mode, parents, err));
}

int wr_fs_list(const struct wr_fs *fs, const char *path, int depth, wr_fs_list_cb cb, void *ctx,
	       wr_err *err)
{
	GUARDED(fsi_list_unguarded(fs, path, depth, cb, ctx, err));
}

int wr_fs_mkdir(const struct wr_fs *fs, const char *path, mode_t mode, bool parents, wr_err *err)
{
	GUARDED(fsi_mkdir_unguarded(fs, path, mode, parents, err));
}

int wr_fs_remove(const struct wr_fs *fs, const char *path, bool recursive, wr_err *err)
{
	GUARDED(fsi_remove_unguarded(fs, path, recursive, err));
}

int wr_fs_rename(const struct wr_fs *fs, const char *from, const char *to, wr_err *err)
{
	GUARDED(fsi_rename_unguarded(fs, from, to, err));
}
