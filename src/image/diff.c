/* Import an overlay upper directory (a sandbox's changes) as a layer image.
 *
 *   upper (host view, fd-relative walk, nothing followed)
 *     -> staging tree: files, dirs, symlinks, fifos, whiteouts (0/0 char
 *        devices), opaque marks (user.overlay.opaque), owners shifted to
 *        the ids seen inside
 *     -> mkfs.erofs, fsck, digest, commit (as every import: wri_finish)
 *
 * The upper is the sandbox's own data: it is read as hostile input (no
 * path is followed, only regular files are opened, sizes and counts are
 * bounded by the store's limits). The caller keeps the sandbox paused
 * while this runs so the tree does not change under the walk.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "image/store_internal.h"

#define OVL_XATTR "user.overlay."
#define OVL_OPAQUE "user.overlay.opaque"
#define IDS_INSIDE 65536u

struct diff {
	struct wr_image_store *s;
	uid_t base;
	uint64_t entries, bytes;
};

static uid_t shift(const struct diff *d, uid_t id)
{
	return id >= d->base && id - d->base < IDS_INSIDE ? id - d->base : 65534;
}

/* user.* xattrs of src (a real fd) onto dst; overlay's own only "opaque". */
static int copy_xattrs(int src, int dst, const char *rel, wr_err *err)
{
	char names[8192];
	ssize_t n = flistxattr(src, names, sizeof(names));
	if (n < 0)
		return errno == ENOTSUP ? 0 : wr_err_sys(err, "'%s': list xattrs", rel);
	for (ssize_t off = 0; off < n; off += (ssize_t)strlen(names + off) + 1) {
		const char *name = names + off;
		if (strncmp(name, "user.", 5) != 0)
			continue;
		if (strncmp(name, OVL_XATTR, strlen(OVL_XATTR)) == 0 &&
		    strcmp(name, OVL_OPAQUE) != 0)
			continue;
		char val[4096];
		ssize_t vl = fgetxattr(src, name, val, sizeof(val));
		if (vl < 0)
			return wr_err_sys(err, "'%s': read xattr %s", rel, name);
		if (fsetxattr(dst, name, val, (size_t)vl, 0) < 0)
			return wr_err_sys(err, "'%s': set xattr %s", rel, name);
	}
	return 0;
}

static int set_meta(int fd, const struct diff *d, const struct stat *sb, const char *rel,
		    wr_err *err)
{
	/* owner first: a chown clears set-id bits the chmod then restores */
	if (fchown(fd, shift(d, sb->st_uid), shift(d, sb->st_gid)) < 0 ||
	    fchmod(fd, sb->st_mode & 07777) < 0)
		return wr_err_sys(err, "'%s': set owner and mode", rel);
	return 0;
}

static int copy_file(struct diff *d, int sfd, int dfd, const char *name, const struct stat *sb,
		     const char *rel, wr_err *err)
{
	_cleanup_close_ int in = openat(sfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (in < 0)
		return wr_err_sys(err, "'%s': open", rel);
	struct stat now;
	if (fstat(in, &now) < 0 || !S_ISREG(now.st_mode) || now.st_ino != sb->st_ino)
		return wr_err_set(err, EAGAIN, "'%s': changed during the snapshot", rel);
	_cleanup_close_ int out =
	    openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (out < 0)
		return wr_err_sys(err, "'%s': create", rel);
	char buf[1 << 16];
	ssize_t n;
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (wr_write_all(out, buf, (size_t)n) < 0)
			return wr_err_sys(err, "'%s': write", rel);
	if (n < 0)
		return wr_err_sys(err, "'%s': read", rel);
	int r = copy_xattrs(in, out, rel, err);
	if (r == 0)
		r = set_meta(out, d, sb, rel, err);
	struct timespec ts[2] = {sb->st_atim, sb->st_mtim};
	if (r == 0 && futimens(out, ts) < 0)
		r = wr_err_sys(err, "'%s': set times", rel);
	return r;
}

static int copy_tree(struct diff *d, int sfd, int dfd, const char *rel, int depth, wr_err *err);

static int copy_entry(struct diff *d, int sfd, int dfd, const char *name, const char *rel,
		      int depth, wr_err *err)
{
	struct stat sb;
	if (fstatat(sfd, name, &sb, AT_SYMLINK_NOFOLLOW) < 0)
		return wr_err_sys(err, "'%s'", rel);
	if (++d->entries > d->s->o.max_entries)
		return wr_err_set(err, E2BIG, "more than %llu entries",
				  (unsigned long long)d->s->o.max_entries);
	struct timespec ts[2] = {sb.st_atim, sb.st_mtim};
	uid_t uid = shift(d, sb.st_uid), gid = shift(d, sb.st_gid);
	if (S_ISREG(sb.st_mode)) {
		if ((d->bytes += (uint64_t)sb.st_size) > d->s->o.max_unpacked_bytes)
			return wr_err_set(err, EFBIG, "more than %llu bytes",
					  (unsigned long long)d->s->o.max_unpacked_bytes);
		return copy_file(d, sfd, dfd, name, &sb, rel, err);
	}
	if (S_ISDIR(sb.st_mode)) {
		if (mkdirat(dfd, name, 0700) < 0)
			return wr_err_sys(err, "'%s': mkdir", rel);
		_cleanup_close_ int sc =
		    openat(sfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		_cleanup_close_ int dc =
		    openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sc < 0 || dc < 0)
			return wr_err_sys(err, "'%s': open", rel);
		int r = copy_tree(d, sc, dc, rel, depth + 1, err);
		if (r == 0)
			r = copy_xattrs(sc, dc, rel, err);
		if (r == 0)
			r = set_meta(dc, d, &sb, rel, err);
		/* last: creating children moved the mtime */
		if (r == 0 && futimens(dc, ts) < 0)
			r = wr_err_sys(err, "'%s': set times", rel);
		return r;
	}
	if (S_ISLNK(sb.st_mode)) {
		char target[4096];
		ssize_t n = readlinkat(sfd, name, target, sizeof(target) - 1);
		if (n < 0)
			return wr_err_sys(err, "'%s': readlink", rel);
		target[n] = 0;
		if (symlinkat(target, dfd, name) < 0)
			return wr_err_sys(err, "'%s': symlink", rel);
	} else if (S_ISCHR(sb.st_mode) && sb.st_rdev == makedev(0, 0)) {
		/* an overlay whiteout: the sandbox deleted this name */
		if (mknodat(dfd, name, S_IFCHR | 0, makedev(0, 0)) < 0)
			return wr_err_sys(err, "'%s': whiteout", rel);
	} else if (S_ISFIFO(sb.st_mode)) {
		if (mkfifoat(dfd, name, sb.st_mode & 07777) < 0)
			return wr_err_sys(err, "'%s': mkfifo", rel);
	} else {
		return 0; /* sockets, devices: runtime state, not content */
	}
	if (fchownat(dfd, name, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
		return wr_err_sys(err, "'%s': set owner", rel);
	if (!S_ISLNK(sb.st_mode) && fchmodat(dfd, name, sb.st_mode & 07777, 0) < 0)
		return wr_err_sys(err, "'%s': set mode", rel);
	if (utimensat(dfd, name, ts, AT_SYMLINK_NOFOLLOW) < 0)
		return wr_err_sys(err, "'%s': set times", rel);
	return 0;
}

static int copy_tree(struct diff *d, int sfd, int dfd, const char *rel, int depth, wr_err *err)
{
	if (depth > 256)
		return wr_err_set(err, ELOOP, "'%s': deeper than 256 levels", rel);
	int dup = fcntl(sfd, F_DUPFD_CLOEXEC, 3);
	DIR *dir = dup >= 0 ? fdopendir(dup) : NULL;
	if (dir == NULL) {
		if (dup >= 0)
			close(dup);
		return wr_err_sys(err, "'%s': read directory", rel);
	}
	int r = 0;
	struct dirent *e;
	while (r == 0 && (errno = 0, e = readdir(dir)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		_cleanup_free_ char *crel = NULL;
		if (asprintf(&crel, "%s/%s", rel, e->d_name) < 0) {
			r = wr_err_set(err, ENOMEM, "out of memory");
			break;
		}
		r = copy_entry(d, sfd, dfd, e->d_name, crel, depth, err);
	}
	if (r == 0 && errno != 0)
		r = wr_err_sys(err, "'%s': read directory", rel);
	closedir(dir);
	return r;
}

int wr_image_import_upper(struct wr_image_store *s, int upper_fd, uid_t id_base,
			  const char *config_json, const struct wr_image_import_opts *o,
			  struct wr_image **out, wr_err *err)
{
	if (o && o->ref) {
		_cleanup_free_ char *c = NULL;
		if (wri_ref_canon(o->ref, &c, err) < 0)
			return -1;
	}
	json_t *cfg = NULL;
	if (config_json) {
		json_error_t je;
		json_t *j = json_loads(config_json, 0, &je);
		if (j == NULL)
			return wr_err_field(err, "config", "image config: invalid JSON: %s",
					    je.text);
		struct wr_image_config c;
		int r = wri_config_from_json(j, &c, err);
		wri_config_clear(&c);
		cfg = r == 0 ? wri_runtime_config(j) : NULL;
		json_decref(j);
		if (r < 0)
			return r;
	}
	struct diff d = {.s = s, .base = id_base};
	struct wri_stage st = {.fd = -1, .rootfd = -1};
	_cleanup_free_ char *root = NULL;
	struct stat sb;
	int r;
	if ((r = wri_stage_new(s, &st, err)) == 0 && (r = wri_stage_root(&st, err)) == 0 &&
	    (r = copy_tree(&d, upper_fd, st.rootfd, "", 0, err)) == 0) {
		/* the root's own owner and mode: the upper's, shifted */
		if (fstat(upper_fd, &sb) < 0)
			r = wr_err_sys(err, "upper");
		else
			r = set_meta(st.rootfd, &d, &sb, "/", err);
	}
	if (r == 0 && (r = wri_stage_root_path(s, &st, &root, err)) == 0)
		r = wri_finish(s, &st, root, cfg, NULL, "snapshot", o, out, err);
	wri_stage_drop(s, &st);
	json_decref(cfg);
	return r < 0 ? wr_err_wrap(err, "import snapshot layer") : 0;
}
