/* Applying tar layers to a staging tree, treating every entry as hostile.
 *
 * Rules (each violation is an error naming the entry and the reason, and
 * the caller drops the whole staging tree):
 *   - names: no absolute paths, no ".." component, <= 4095 bytes, each
 *     component <= 255 bytes, depth <= 256;
 *   - every write resolves its parent one component at a time with
 *     openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
 *     RESOLVE_NO_XDEV) from the staging root: an entry never goes through a
 *     symlink made by an earlier entry or layer (it is refused), and a
 *     final component that exists is replaced, never followed;
 *   - hard links name a target inside the tree, resolved the same way;
 *   - character and block devices are refused (fifos are fine);
 *   - xattrs: user.*, security.capability and POSIX ACLs are kept,
 *     security.selinux is dropped (a host label), anything else is refused;
 *   - limits: entries and unpacked bytes across all layers (store options).
 * Whiteouts (layer mode): ".wh.NAME" removes NAME of lower layers,
 * ".wh..wh..opq" removes every lower-layer child of its directory; entries
 * of the same layer are never removed by them (OCI image spec).
 */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "image/store_internal.h"

#define MAX_PATH 4095
#define MAX_DEPTH 256
#define WH_PREFIX ".wh."
#define WH_OPAQUE ".wh..wh..opq"

struct wri_dirtime {
	char *path;
	struct timespec mtime;
};

/* Paths created by the current layer (a small open-addressing set). */
struct pathset {
	char **slot;
	size_t cap, n;
};

static uint64_t hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	while (*s)
		h = (h ^ (unsigned char)*s++) * 1099511628211ull;
	return h;
}

static void set_clear(struct pathset *ps)
{
	for (size_t i = 0; i < ps->cap; i++)
		free(ps->slot[i]);
	free(ps->slot);
	memset(ps, 0, sizeof(*ps));
}

static bool set_has(const struct pathset *ps, const char *p)
{
	if (ps->cap == 0)
		return false;
	for (size_t i = hash(p) & (ps->cap - 1);; i = (i + 1) & (ps->cap - 1)) {
		if (ps->slot[i] == NULL)
			return false;
		if (strcmp(ps->slot[i], p) == 0)
			return true;
	}
}

static int set_add(struct pathset *ps, const char *p)
{
	if (set_has(ps, p))
		return 0;
	if ((ps->n + 1) * 2 > ps->cap) {
		struct pathset nps = {calloc(ps->cap ? ps->cap * 2 : 1024, sizeof(char *)),
				      ps->cap ? ps->cap * 2 : 1024, 0};
		if (nps.slot == NULL)
			return -ENOMEM;
		for (size_t i = 0; i < ps->cap; i++) {
			char *e = ps->slot[i];
			if (e == NULL)
				continue;
			size_t j = hash(e) & (nps.cap - 1);
			while (nps.slot[j])
				j = (j + 1) & (nps.cap - 1);
			nps.slot[j] = e;
			nps.n++;
		}
		free(ps->slot);
		*ps = nps;
	}
	char *d = strdup(p);
	if (d == NULL)
		return -ENOMEM;
	size_t j = hash(p) & (ps->cap - 1);
	while (ps->slot[j])
		j = (j + 1) & (ps->cap - 1);
	ps->slot[j] = d;
	ps->n++;
	return 0;
}

void wri_unpack_init(struct wri_unpack *u, int rootfd, const struct wr_image_store *s)
{
	memset(u, 0, sizeof(*u));
	u->rootfd = rootfd;
	u->max_entries = s->o.max_entries;
	u->max_bytes = s->o.max_unpacked_bytes;
}

void wri_unpack_free(struct wri_unpack *u)
{
	for (size_t i = 0; i < u->n_dirtimes; i++)
		free(u->dirtimes[i].path);
	free(u->dirtimes);
	u->dirtimes = NULL;
	u->n_dirtimes = u->cap_dirtimes = 0;
}

/* Normalise an entry name into out ("" = the root). */
static int clean_path(const char *name, const char *what, char *out, wr_err *err)
{
	if (name == NULL)
		return wr_err_set(err, EPERM, "%s: entry without a name", what);
	if (name[0] == '/')
		return wr_err_set(err, EPERM, "%s: entry '%s': absolute path refused", what, name);
	if (strlen(name) > MAX_PATH)
		return wr_err_set(err, EPERM, "%s: entry '%.64s...': path longer than %d bytes",
				  what, name, MAX_PATH);
	size_t o = 0;
	int depth = 0;
	const char *p = name;
	while (*p) {
		const char *e = strchr(p, '/');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		if (n == 2 && p[0] == '.' && p[1] == '.')
			return wr_err_set(err, EPERM, "%s: entry '%s': '..' component refused",
					  what, name);
		if (n > 255)
			return wr_err_set(err, EPERM,
					  "%s: entry '%.64s...': component longer than 255 bytes",
					  what, name);
		if (n > 0 && !(n == 1 && p[0] == '.')) {
			if (++depth > MAX_DEPTH)
				return wr_err_set(err, EPERM,
						  "%s: entry '%.64s...': deeper than %d levels",
						  what, name, MAX_DEPTH);
			if (o)
				out[o++] = '/';
			memcpy(out + o, p, n);
			o += n;
		}
		p += n + (e ? 1 : 0);
	}
	out[o] = '\0';
	return 0;
}

static int open_beneath(int dirfd, const char *name, int flags)
{
	struct open_how how = {
	    .flags = (uint64_t)(flags | O_CLOEXEC | O_NOFOLLOW),
	    .resolve =
		RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
	};
	return wr_openat2(dirfd, name, &how);
}

/* Open the parent directory of path (relative, clean) one component at a
 * time; missing directories are made (0755, root) when create is set and
 * added to the layer set. *base points at the last component. */
static int open_parent(struct wri_unpack *u, struct pathset *ps, const char *path, bool create,
		       const char *what, const char **base, wr_err *err)
{
	const char *slash = strrchr(path, '/');
	*base = slash ? slash + 1 : path;
	int fd = fcntl(u->rootfd, F_DUPFD_CLOEXEC, 3);
	if (fd < 0)
		return wr_err_sys(err, "dup");
	if (slash == NULL)
		return fd;
	char comp[256], sofar[MAX_PATH + 1];
	const char *p = path;
	while (p < slash) {
		const char *e = strchr(p, '/');
		size_t n = (size_t)(e - p);
		memcpy(comp, p, n);
		comp[n] = '\0';
		snprintf(sofar, sizeof(sofar), "%.*s", (int)(e - path), path);
		int nfd = open_beneath(fd, comp, O_PATH | O_DIRECTORY);
		if (nfd < 0 && errno == ENOENT && create) {
			if (mkdirat(fd, comp, 0755) < 0 && errno != EEXIST) {
				int r =
				    wr_err_sys(err, "%s: entry '%s': mkdir %s", what, path, sofar);
				close(fd);
				return r;
			}
			if (ps && set_add(ps, sofar) < 0) {
				close(fd);
				return wr_err_set(err, ENOMEM, "out of memory");
			}
			nfd = open_beneath(fd, comp, O_PATH | O_DIRECTORY);
		}
		if (nfd < 0) {
			int e2 = errno;
			struct stat sb;
			if (e2 == ENOTDIR && fstatat(fd, comp, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
			    S_ISLNK(sb.st_mode))
				e2 = ELOOP;
			close(fd);
			if (e2 == ELOOP || e2 == EXDEV)
				return wr_err_set(err, EPERM,
						  "%s: entry '%s': '%s' is a symlink; writing "
						  "through links is refused",
						  what, path, sofar);
			if (e2 == ENOTDIR)
				return wr_err_set(err, EPERM,
						  "%s: entry '%s': '%s' is not a directory", what,
						  path, sofar);
			errno = e2;
			return wr_err_sys(err, "%s: entry '%s': open %s", what, path, sofar);
		}
		close(fd);
		fd = nfd;
		p = e + 1;
	}
	return fd;
}

static int remove_child(int dirfd, const char *name)
{
	return wri_rm_rf_at(dirfd, name);
}

/* ".wh..wh..opq" in dir: remove every child not created by this layer. */
static int apply_opaque(struct wri_unpack *u, struct pathset *ps, const char *dirpath,
			const char *what, wr_err *err)
{
	int fd;
	if (dirpath[0] == '\0')
		fd = fcntl(u->rootfd, F_DUPFD_CLOEXEC, 3);
	else
		fd = open_beneath(u->rootfd, dirpath, O_RDONLY | O_DIRECTORY);
	if (fd < 0) {
		if (errno == ENOENT)
			return 0;
		return wr_err_sys(err, "%s: opaque dir '%s'", what, dirpath);
	}
	DIR *d = fdopendir(fd);
	if (d == NULL) {
		close(fd);
		return wr_err_sys(err, "%s: opaque dir '%s'", what, dirpath);
	}
	struct dirent *e;
	int r = 0;
	char child[MAX_PATH + 300];
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		snprintf(child, sizeof(child), "%s%s%s", dirpath, dirpath[0] ? "/" : "", e->d_name);
		if (set_has(ps, child))
			continue;
		if (remove_child(dirfd(d), e->d_name) < 0) {
			r = wr_err_sys(err, "%s: opaque dir '%s': remove %s", what, dirpath,
				       e->d_name);
			break;
		}
	}
	closedir(d);
	return r;
}

static int add_dirtime(struct wri_unpack *u, const char *path, struct timespec t)
{
	if (u->n_dirtimes == u->cap_dirtimes) {
		size_t nc = u->cap_dirtimes ? u->cap_dirtimes * 2 : 256;
		struct wri_dirtime *nv = realloc(u->dirtimes, nc * sizeof(*nv));
		if (nv == NULL)
			return -ENOMEM;
		u->dirtimes = nv;
		u->cap_dirtimes = nc;
	}
	if ((u->dirtimes[u->n_dirtimes].path = strdup(path)) == NULL)
		return -ENOMEM;
	u->dirtimes[u->n_dirtimes++].mtime = t;
	return 0;
}

static int set_xattrs(struct archive_entry *ae, int fd, const char *what, const char *path,
		      wr_err *err)
{
	const char *name;
	const void *val;
	size_t len;
	archive_entry_xattr_reset(ae);
	while (archive_entry_xattr_next(ae, &name, &val, &len) == ARCHIVE_OK) {
		if (strcmp(name, "security.selinux") == 0)
			continue;
		if (strncmp(name, "user.", 5) != 0 && strcmp(name, "security.capability") != 0 &&
		    strcmp(name, "system.posix_acl_access") != 0 &&
		    strcmp(name, "system.posix_acl_default") != 0)
			return wr_err_set(err, EPERM, "%s: entry '%s': xattr '%s' refused", what,
					  path, name);
		if (fsetxattr(fd, name, val, len, 0) < 0)
			return wr_err_sys(err, "%s: entry '%s': set xattr %s", what, path, name);
	}
	return 0;
}

static int write_data(struct wri_unpack *u, struct archive *a, struct archive_entry *ae, int fd,
		      const char *what, const char *path, wr_err *err)
{
	const void *buf;
	size_t len;
	la_int64_t off;
	uint64_t end = 0;
	int rc;
	while ((rc = archive_read_data_block(a, &buf, &len, &off)) == ARCHIVE_OK) {
		if (off < 0)
			return wr_err_set(err, EBADMSG, "%s: entry '%s': bad data offset", what,
					  path);
		if ((uint64_t)off + len > end) {
			uint64_t grow = (uint64_t)off + len - end;
			if (u->bytes + grow > u->max_bytes)
				return wr_err_set(err, EFBIG,
						  "%s: entry '%s': unpacked size passes the limit "
						  "of %llu bytes",
						  what, path, (unsigned long long)u->max_bytes);
			u->bytes += grow;
			end = (uint64_t)off + len;
		}
		const char *p = buf;
		while (len) {
			ssize_t n = pwrite(fd, p, len, off);
			if (n < 0) {
				if (errno == EINTR)
					continue;
				return wr_err_sys(err, "%s: entry '%s': write", what, path);
			}
			p += n;
			len -= (size_t)n;
			off += n;
		}
	}
	if (rc != ARCHIVE_EOF)
		return wr_err_set(err, EBADMSG, "%s: entry '%s': %s", what, path,
				  archive_error_string(a) ? archive_error_string(a) : "read error");
	/* A sparse file ending in a hole: its declared size. */
	la_int64_t size = archive_entry_size(ae);
	if (archive_entry_size_is_set(ae) && size > 0 && (uint64_t)size > end) {
		if (u->bytes + ((uint64_t)size - end) > u->max_bytes)
			return wr_err_set(err, EFBIG,
					  "%s: entry '%s': unpacked size passes the limit of %llu "
					  "bytes",
					  what, path, (unsigned long long)u->max_bytes);
		u->bytes += (uint64_t)size - end;
		if (ftruncate(fd, size) < 0)
			return wr_err_sys(err, "%s: entry '%s': truncate", what, path);
	}
	return 0;
}

/* Metadata of a created entry (not for hard links: same inode). */
static int set_meta(struct wri_unpack *u, struct archive_entry *ae, int pfd, const char *base,
		    const char *path, mode_t type, int fd, const char *what, wr_err *err)
{
	uid_t uid = (uid_t)archive_entry_uid(ae);
	gid_t gid = (gid_t)archive_entry_gid(ae);
	mode_t mode = archive_entry_perm(ae) & 07777;
	struct timespec ts[2] = {{archive_entry_mtime(ae), archive_entry_mtime_nsec(ae)},
				 {archive_entry_mtime(ae), archive_entry_mtime_nsec(ae)}};
	if (type == S_IFLNK || type == S_IFIFO) {
		/* No fd: by name under the parent we hold, not followed. */
		if (fchownat(pfd, base, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
			return wr_err_sys(err, "%s: entry '%s': chown", what, path);
		if (type == S_IFIFO && fchmodat(pfd, base, mode, 0) < 0)
			return wr_err_sys(err, "%s: entry '%s': chmod", what, path);
		if (utimensat(pfd, base, ts, AT_SYMLINK_NOFOLLOW) < 0)
			return wr_err_sys(err, "%s: entry '%s': set mtime", what, path);
		return 0;
	}
	/* chown first: it clears set-id bits that chmod then sets. */
	if (fchown(fd, uid, gid) < 0 || fchmod(fd, mode) < 0)
		return wr_err_sys(err, "%s: entry '%s': chown/chmod", what, path);
	int r = set_xattrs(ae, fd, what, path, err);
	if (r < 0)
		return r;
	if (type == S_IFDIR) {
		if (add_dirtime(u, path, ts[1]) < 0)
			return wr_err_set(err, ENOMEM, "out of memory");
		return 0;
	}
	if (futimens(fd, ts) < 0)
		return wr_err_sys(err, "%s: entry '%s': set mtime", what, path);
	return 0;
}

static int apply_entry(struct wri_unpack *u, struct pathset *ps, struct archive *a,
		       struct archive_entry *ae, const char *what, wr_err *err)
{
	char path[MAX_PATH + 1];
	int r = clean_path(archive_entry_pathname(ae), what, path, err);
	if (r < 0)
		return r;
	if (++u->entries > u->max_entries)
		return wr_err_set(err, E2BIG, "%s: more than %llu entries", what,
				  (unsigned long long)u->max_entries);
	const char *hl = archive_entry_hardlink(ae);
	mode_t type = archive_entry_filetype(ae);
	if (hl == NULL && (type == AE_IFCHR || type == AE_IFBLK))
		return wr_err_set(err, EPERM, "%s: entry '%s': device nodes are refused", what,
				  path);
	if (hl == NULL && type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK &&
	    type != AE_IFIFO)
		return wr_err_set(err, EPERM, "%s: entry '%s': unsupported file type 0%o", what,
				  path, (unsigned)type);
	if (path[0] == '\0') {
		/* The root itself: metadata only. */
		if (type != AE_IFDIR || hl)
			return wr_err_set(err, EPERM,
					  "%s: entry '%s': the root must be a directory", what,
					  archive_entry_pathname(ae));
		_cleanup_close_ int fd = fcntl(u->rootfd, F_DUPFD_CLOEXEC, 3);
		return set_meta(u, ae, u->rootfd, ".", path, S_IFDIR, fd, what, err);
	}
	const char *slash = strrchr(path, '/');
	bool whiteout = u->whiteouts && strncmp(slash ? slash + 1 : path, WH_PREFIX, 4) == 0;
	const char *base;
	/* A whiteout under a directory no layer made removes nothing and must
	 * not make that directory. */
	_cleanup_close_ int pfd = open_parent(u, ps, path, !whiteout, what, &base, err);
	if (pfd < 0 && whiteout && wr_err_code(*err) == ENOENT) {
		wr_err_free(err);
		return 0;
	}
	if (pfd < 0)
		return pfd;
	if (whiteout) {
		size_t dl = (size_t)(base - path);
		char dir[MAX_PATH + 1];
		snprintf(dir, sizeof(dir), "%.*s", (int)(dl ? dl - 1 : 0), path);
		if (strcmp(base, WH_OPAQUE) == 0)
			return apply_opaque(u, ps, dir, what, err);
		const char *victim = base + 4;
		if (victim[0] == '\0' || strcmp(victim, ".") == 0 || strcmp(victim, "..") == 0)
			return wr_err_set(err, EPERM, "%s: entry '%s': bad whiteout", what, path);
		char vpath[2 * MAX_PATH + 2]; /* fits: it is path less ".wh." */
		snprintf(vpath, sizeof(vpath), "%s%s%s", dir, dir[0] ? "/" : "", victim);
		if (set_has(ps, vpath))
			return 0; /* same layer: whiteouts hide lower layers only */
		if (remove_child(pfd, victim) < 0)
			return wr_err_sys(err, "%s: whiteout '%s'", what, path);
		return 0;
	}
	struct stat st;
	bool exists = fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0;
	bool keep_dir = exists && S_ISDIR(st.st_mode) && type == AE_IFDIR && hl == NULL;
	if (exists && !keep_dir && (r = remove_child(pfd, base)) < 0) {
		errno = -r;
		return wr_err_sys(err, "%s: entry '%s': replace", what, path);
	}
	if (set_add(ps, path) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	if (hl) {
		char tpath[MAX_PATH + 1];
		if ((r = clean_path(hl, what, tpath, err)) < 0)
			return wr_err_wrap(err, "hard link '%s'", path);
		const char *tbase;
		_cleanup_close_ int tfd = open_parent(u, NULL, tpath, false, what, &tbase, err);
		if (tfd < 0)
			return wr_err_wrap(err, "hard link '%s' to '%s'", path, hl);
		struct stat ts;
		if (tpath[0] == '\0' || fstatat(tfd, tbase, &ts, AT_SYMLINK_NOFOLLOW) < 0)
			return wr_err_set(err, EPERM,
					  "%s: entry '%s': hard link to '%s', which is not in the "
					  "image",
					  what, path, hl);
		if (S_ISDIR(ts.st_mode))
			return wr_err_set(err, EPERM, "%s: entry '%s': hard link to a directory",
					  what, path);
		if (linkat(tfd, tbase, pfd, base, 0) < 0)
			return wr_err_sys(err, "%s: entry '%s': link to '%s'", what, path, hl);
		return 0;
	}
	_cleanup_close_ int fd = -1;
	switch (type) {
	case AE_IFDIR:
		if (!keep_dir && mkdirat(pfd, base, 0700) < 0)
			return wr_err_sys(err, "%s: entry '%s': mkdir", what, path);
		fd = open_beneath(pfd, base, O_RDONLY | O_DIRECTORY);
		break;
	case AE_IFREG:
		fd = openat(pfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd >= 0 && (r = write_data(u, a, ae, fd, what, path, err)) < 0)
			return r;
		break;
	case AE_IFLNK: {
		const char *target = archive_entry_symlink(ae);
		if (target == NULL || target[0] == '\0' || strlen(target) > MAX_PATH)
			return wr_err_set(err, EPERM, "%s: entry '%s': bad symlink target", what,
					  path);
		if (symlinkat(target, pfd, base) < 0)
			return wr_err_sys(err, "%s: entry '%s': symlink", what, path);
		return set_meta(u, ae, pfd, base, path, S_IFLNK, -1, what, err);
	}
	case AE_IFIFO:
		if (mknodat(pfd, base, S_IFIFO | 0600, 0) < 0)
			return wr_err_sys(err, "%s: entry '%s': mkfifo", what, path);
		return set_meta(u, ae, pfd, base, path, S_IFIFO, -1, what, err);
	}
	if (fd < 0)
		return wr_err_sys(err, "%s: entry '%s': open", what, path);
	return set_meta(u, ae, pfd, base, path, type == AE_IFDIR ? S_IFDIR : type, fd, what, err);
}

int wri_unpack_tar(struct wri_unpack *u, int fd, const char *what, wr_err *err)
{
	struct archive *a = archive_read_new();
	if (a == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	archive_read_support_filter_all(a);
	archive_read_support_format_tar(a);
	archive_read_support_format_gnutar(a);
	archive_read_support_format_empty(a);
	int r = 0;
	struct pathset ps = {0};
	if (archive_read_open_fd(a, fd, 1 << 16) != ARCHIVE_OK) {
		r = wr_err_set(err, EBADMSG, "%s: not a tar archive: %s", what,
			       archive_error_string(a) ? archive_error_string(a) : "unknown");
		goto out;
	}
	struct archive_entry *ae;
	int rc;
	while ((rc = archive_read_next_header(a, &ae)) == ARCHIVE_OK || rc == ARCHIVE_WARN) {
		if ((r = apply_entry(u, &ps, a, ae, what, err)) < 0)
			goto out;
	}
	if (rc != ARCHIVE_EOF)
		r = wr_err_set(err, EBADMSG, "%s: corrupt archive: %s", what,
			       archive_error_string(a) ? archive_error_string(a) : "read error");
out:
	set_clear(&ps);
	archive_read_free(a);
	return r;
}

/* Every directory's mtime to 0 (those no entry named), depth first. */
static int zero_dir_times(int fd, int depth)
{
	if (depth > MAX_DEPTH + 2)
		return -ELOOP;
	int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (dfd < 0)
		return -errno;
	DIR *d = fdopendir(dfd);
	if (d == NULL) {
		close(dfd);
		return -errno;
	}
	struct dirent *e;
	int r = 0;
	while ((e = readdir(d)) != NULL && r == 0) {
		if (e->d_type != DT_DIR || strcmp(e->d_name, ".") == 0 ||
		    strcmp(e->d_name, "..") == 0)
			continue;
		int cfd = openat(fd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (cfd < 0)
			continue;
		r = zero_dir_times(cfd, depth + 1);
		struct timespec z[2] = {{0, 0}, {0, 0}};
		if (r == 0 && futimens(cfd, z) < 0)
			r = -errno;
		close(cfd);
	}
	closedir(d);
	return r;
}

int wri_unpack_finish(struct wri_unpack *u, wr_err *err)
{
	int r = zero_dir_times(u->rootfd, 0);
	struct timespec z[2] = {{0, 0}, {0, 0}};
	if (r == 0 && futimens(u->rootfd, z) < 0)
		r = -errno;
	if (r < 0) {
		errno = -r;
		return wr_err_sys(err, "set directory times");
	}
	for (size_t i = 0; i < u->n_dirtimes; i++) {
		const char *p = u->dirtimes[i].path;
		_cleanup_close_ int fd = p[0] ? open_beneath(u->rootfd, p, O_RDONLY | O_DIRECTORY)
					      : fcntl(u->rootfd, F_DUPFD_CLOEXEC, 3);
		if (fd < 0)
			continue; /* removed or replaced by a later layer */
		struct timespec ts[2] = {u->dirtimes[i].mtime, u->dirtimes[i].mtime};
		if (futimens(fd, ts) < 0)
			return wr_err_sys(err, "set mtime of '%s'", p);
	}
	return 0;
}
