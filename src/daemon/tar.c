/* Tar upload and download (libarchive for the formats: ustar, pax, GNU
 * long names; gzip-compressed uploads too).
 *
 * Upload: the body is already spooled to a file (http.c). Pass 1 reads
 * every header and validates it; nothing is written unless every entry
 * passes: relative names only, no ".." component, no entry beneath a
 * symlink of the same archive, only files, directories, symlinks and hard
 * links to earlier files of the same archive, total size within the disk
 * quota. Pass 2 writes through fsops (paths resolved inside the root), so
 * even a sandbox racing us with its own symlinks cannot make a write land
 * outside. Download: a pax archive of a tree listed with wr_fs_list, each
 * file copied through fsops. */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/securebits.h>
#include <sys/fsuid.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "common/util.h"
#include "daemon/api.h"
#include "daemon/files.h"
#include "daemon/jsonutil.h"

#define TAR_MAX_ENTRIES 100000

/* ---- a small string set ------------------------------------------------- */

struct sset {
	char **v;
	unsigned char *kind;
	size_t cap, n;
};

static size_t sset_hash(const char *s)
{
	size_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

/* kind of s, 0 if absent */
static int sset_get(const struct sset *st, const char *s)
{
	if (st->cap == 0)
		return 0;
	for (size_t i = sset_hash(s) & (st->cap - 1);; i = (i + 1) & (st->cap - 1)) {
		if (st->v[i] == NULL)
			return 0;
		if (strcmp(st->v[i], s) == 0)
			return st->kind[i];
	}
}

static int sset_put(struct sset *st, const char *s, int kind)
{
	if ((st->n + 1) * 2 > st->cap) {
		struct sset ns = {.cap = st->cap ? st->cap * 2 : 256};
		ns.v = calloc(ns.cap, sizeof(char *));
		ns.kind = calloc(ns.cap, 1);
		if (!ns.v || !ns.kind) {
			free(ns.v);
			free(ns.kind);
			return -ENOMEM;
		}
		for (size_t i = 0; i < st->cap; i++)
			if (st->v[i]) {
				size_t j = sset_hash(st->v[i]) & (ns.cap - 1);
				while (ns.v[j])
					j = (j + 1) & (ns.cap - 1);
				ns.v[j] = st->v[i];
				ns.kind[j] = st->kind[i];
				ns.n++;
			}
		free(st->v);
		free(st->kind);
		*st = ns;
	}
	size_t i = sset_hash(s) & (st->cap - 1);
	while (st->v[i] && strcmp(st->v[i], s) != 0)
		i = (i + 1) & (st->cap - 1);
	if (st->v[i] == NULL) {
		if ((st->v[i] = strdup(s)) == NULL)
			return -ENOMEM;
		st->n++;
	}
	st->kind[i] = (unsigned char)kind;
	return 0;
}

static void sset_free(struct sset *st)
{
	for (size_t i = 0; i < st->cap; i++)
		free(st->v[i]);
	free(st->v);
	free(st->kind);
}

/* ---- names -------------------------------------------------------------- */

/* "./a//b/" -> "a/b". 1: the archive's root ("." or "./"), skipped.
 * -1: absolute, "..", or too long. */
static int norm_name(const char *in, char *out, size_t n)
{
	if (in == NULL || in[0] == '/')
		return -1;
	size_t o = 0;
	const char *p = in;
	while (*p) {
		while (*p == '/')
			p++;
		const char *e = strchrnul(p, '/');
		size_t len = (size_t)(e - p);
		if (len == 0)
			break;
		if (len == 2 && p[0] == '.' && p[1] == '.')
			return -1;
		if (!(len == 1 && p[0] == '.')) {
			if (len > 255 || o + len + 2 > n)
				return -1;
			if (o)
				out[o++] = '/';
			memcpy(out + o, p, len);
			o += len;
		}
		p = e;
	}
	out[o] = 0;
	return o == 0 ? 1 : 0;
}

enum { K_FILE = 1, K_DIR, K_SYMLINK };

/* Is any proper prefix of name a symlink entry of the archive? */
static bool beneath_symlink(const struct sset *links, const char *name)
{
	char buf[4096];
	snprintf(buf, sizeof(buf), "%s", name);
	for (char *s = buf; (s = strchr(s, '/')); s++) {
		*s = 0;
		bool hit = sset_get(links, buf) == K_SYMLINK;
		*s = '/';
		if (hit)
			return true;
	}
	return false;
}

static struct archive *reader(int fd)
{
	struct archive *a = archive_read_new();
	if (a == NULL)
		return NULL;
	archive_read_support_format_tar(a);
	archive_read_support_format_gnutar(a);
	archive_read_support_filter_none(a);
	archive_read_support_filter_gzip(a);
	if (lseek(fd, 0, SEEK_SET) < 0 || archive_read_open_fd(a, fd, 65536) != ARCHIVE_OK) {
		archive_read_free(a);
		return NULL;
	}
	return a;
}

static int spool_tmp(void)
{
	char dir[4200];
	snprintf(dir, sizeof(dir), "%s/spool", wrd_mgr_cfg->state_dir);
	return open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
}

/* Pass 1. 0, or -1 with the reply set. */
static int validate(struct wrd_req *r, int fd, uint64_t quota)
{
	struct archive *a = reader(fd);
	if (a == NULL) {
		wrd_reply_error(r, "invalid_argument", "body", "not a tar archive");
		return -1;
	}
	struct sset seen = {0};
	struct archive_entry *e;
	uint64_t total = 0;
	size_t count = 0;
	int rc, ret = -1;
	char name[4096], target[4096];
	while ((rc = archive_read_next_header(a, &e)) == ARCHIVE_OK) {
		const char *raw = archive_entry_pathname(e);
		int nr = norm_name(raw, name, sizeof(name));
		if (nr < 0) {
			wrd_reply_error(r, "invalid_argument", raw ? raw : "",
					"tar entry '%s': absolute names, '..' and names over "
					"4095 bytes are refused",
					raw ? raw : "");
			goto out;
		}
		if (++count > TAR_MAX_ENTRIES) {
			wrd_reply_error(r, "invalid_argument", "body",
					"more than %d entries in the archive", TAR_MAX_ENTRIES);
			goto out;
		}
		if (nr == 1)
			continue;
		if (beneath_symlink(&seen, name)) {
			wrd_reply_error(r, "invalid_argument", raw,
					"tar entry '%s' is beneath a symlink of the same archive",
					raw);
			goto out;
		}
		const char *hl = archive_entry_hardlink(e);
		mode_t type = archive_entry_filetype(e);
		int kind;
		if (hl) {
			if (norm_name(hl, target, sizeof(target)) != 0 ||
			    sset_get(&seen, target) != K_FILE) {
				wrd_reply_error(r, "invalid_argument", raw,
						"tar entry '%s': a hard link must name an earlier "
						"file of the same archive",
						raw);
				goto out;
			}
			kind = K_FILE;
		} else if (type == AE_IFREG) {
			kind = K_FILE;
			total += (uint64_t)archive_entry_size(e);
		} else if (type == AE_IFDIR) {
			kind = K_DIR;
		} else if (type == AE_IFLNK) {
			const char *t = archive_entry_symlink(e);
			if (t == NULL || *t == 0 || strlen(t) > 4095) {
				wrd_reply_error(r, "invalid_argument", raw,
						"tar entry '%s': bad symlink target", raw);
				goto out;
			}
			kind = K_SYMLINK;
		} else {
			wrd_reply_error(r, "invalid_argument", raw,
					"tar entry '%s': only files, directories and symlinks are "
					"accepted",
					raw);
			goto out;
		}
		if (total > quota) {
			wrd_reply_error(r, "payload_too_large", "body",
					"the archive's files exceed the disk quota (%llu bytes)",
					(unsigned long long)quota);
			goto out;
		}
		if (sset_put(&seen, name, kind) < 0) {
			wrd_reply_error(r, "internal", NULL, "out of memory");
			goto out;
		}
	}
	if (rc != ARCHIVE_EOF) {
		wrd_reply_error(r, "invalid_argument", "body", "bad tar archive: %s",
				archive_error_string(a) ? archive_error_string(a) : "truncated");
		goto out;
	}
	ret = 0;
out:
	sset_free(&seen);
	archive_read_free(a);
	return ret;
}

/* A symlink at `path` (replacing a non-directory there), owned by the
 * sandbox user. fsops has no symlink call: the parent is resolved exactly
 * as fsops does (openat2 RESOLVE_IN_ROOT from the root fd, no magic links,
 * no mount crossing) and the link made with one *at() call in it. */
static int make_symlink(const struct wr_fs *fs, const char *path, const char *target, wr_err *err)
{
	if (fs->remote) /* a VM's guest makes it, by the same rules */
		return wr_fs_symlink(fs, path, target, err);
	char parent[8400];
	snprintf(parent, sizeof(parent), "%s", path);
	char *slash = strrchr(parent, '/');
	const char *name;
	if (slash == NULL) {
		name = path;
		snprintf(parent, sizeof(parent), "/");
	} else {
		name = path + (slash - parent) + 1;
		if (slash == parent)
			parent[1] = 0;
		else
			*slash = 0;
	}
	if (wr_fs_mkdir(fs, parent, 0755, true, err) < 0)
		return -1;
	struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
			       .resolve =
				   RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV};
	_cleanup_close_ int pfd = wr_openat2(fs->root_fd, parent, &how);
	if (pfd < 0)
		return wr_err_sys(err, "symlink %s", path);
	/* As fsops does: an inode owned by the host's root cannot exist in
	 * the sandbox's filesystems, so act with the sandbox user's fsuid and
	 * fsgid (per thread; capabilities kept by SECBIT_NO_SETUID_FIXUP). */
	int bits = prctl(PR_GET_SECUREBITS);
	if (bits >= 0 && !(bits & SECBIT_NO_SETUID_FIXUP))
		prctl(PR_SET_SECUREBITS, bits | SECBIT_NO_SETUID_FIXUP);
	int ogid = setfsgid(fs->gid), ouid = setfsuid(fs->uid);
	int r = 0;
	if (unlinkat(pfd, name, 0) < 0 && errno != ENOENT)
		r = wr_err_sys(err, "symlink %s: replace", path);
	else if (symlinkat(target, pfd, name) < 0)
		r = wr_err_sys(err, "symlink %s", path);
	setfsuid((uid_t)ouid);
	setfsgid((gid_t)ogid);
	return r;
}

/* Copy the entry's data (or a file already in the sandbox) into scratch. */
static int fill_scratch(int scratch, struct archive *a, wr_err *err)
{
	if (ftruncate(scratch, 0) < 0 || lseek(scratch, 0, SEEK_SET) < 0)
		return wr_err_sys(err, "scratch file");
	char buf[65536];
	la_ssize_t n;
	while ((n = archive_read_data(a, buf, sizeof(buf))) > 0)
		if (wr_write_all(scratch, buf, (size_t)n) < 0)
			return wr_err_sys(err, "scratch file");
	if (n < 0)
		return wr_err_set(err, EINVAL, "bad tar data: %s", archive_error_string(a));
	if (lseek(scratch, 0, SEEK_SET) < 0)
		return wr_err_sys(err, "scratch file");
	return 0;
}

static void join(char *out, size_t n, const char *dest, const char *name)
{
	size_t dl = strlen(dest);
	snprintf(out, n, "%s%s%s", dest, dl && dest[dl - 1] == '/' ? "" : "/", name);
}

/* Pass 2. */
static int extract(struct wrd_req *r, const struct wr_fs *fs, int fd, const char *dest,
		   uint64_t quota, uint64_t *files, uint64_t *bytes)
{
	struct archive *a = reader(fd);
	_cleanup_close_ int scratch = spool_tmp();
	_cleanup_err_ wr_err err = NULL;
	if (a == NULL || scratch < 0) {
		if (a)
			archive_read_free(a);
		wrd_reply_error(r, "internal", NULL, "tar: cannot reopen the upload");
		return -1;
	}
	if (wr_fs_mkdir(fs, dest, 0755, true, &err) < 0) {
		archive_read_free(a);
		wrd_fs_reply_err(r, err, "path");
		return -1;
	}
	struct archive_entry *e;
	char name[4096], full[8400], hl[4096], hlfull[8400];
	int ret = -1;
	while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
		if (norm_name(archive_entry_pathname(e), name, sizeof(name)) != 0)
			continue;
		join(full, sizeof(full), dest, name);
		mode_t perm = archive_entry_perm(e) & 0777;
		const char *link = archive_entry_hardlink(e);
		int rc = 0;
		if (link) {
			norm_name(link, hl, sizeof(hl));
			join(hlfull, sizeof(hlfull), dest, hl);
			uint64_t w = 0;
			if (ftruncate(scratch, 0) < 0 || lseek(scratch, 0, SEEK_SET) < 0)
				rc = wr_err_sys(&err, "scratch file");
			if (rc == 0 && wr_fs_read_to_fd(fs, hlfull, scratch, quota, &w, &err) < 0)
				rc = -1;
			if (rc == 0 && lseek(scratch, 0, SEEK_SET) < 0)
				rc = wr_err_sys(&err, "scratch file");
			if (rc == 0)
				rc = wr_fs_write_from_fd(fs, full, scratch, quota,
							 perm ? perm : 0644, true, &err);
			(*files)++;
			*bytes += w;
		} else if (archive_entry_filetype(e) == AE_IFDIR) {
			rc = wr_fs_mkdir(fs, full, perm ? perm : 0755, true, &err);
		} else if (archive_entry_filetype(e) == AE_IFLNK) {
			rc = make_symlink(fs, full, archive_entry_symlink(e), &err);
		} else {
			rc = fill_scratch(scratch, a, &err);
			if (rc == 0)
				rc =
				    wr_fs_write_from_fd(fs, full, scratch, quota, perm, true, &err);
			(*files)++;
			*bytes += (uint64_t)archive_entry_size(e);
		}
		if (rc < 0) {
			wr_err_wrap(&err, "tar entry '%s'", archive_entry_pathname(e));
			wrd_fs_reply_err(r, err, "path");
			goto out;
		}
	}
	ret = 0;
out:
	archive_read_free(a);
	return ret;
}

void wrd_api_tar_put(struct wrd_req *r)
{
	static const char *const allowed[] = {"path", NULL};
	const char *path;
	if (wrd_query_check(r, allowed) < 0 || (path = wrd_query_path(r, "path")) == NULL)
		return;
	struct wrd_sbx *sb = wrd_api_sandbox(r, true);
	if (sb == NULL)
		return;
	struct wr_fs fs;
	_cleanup_err_ wr_err err = NULL;
	uint64_t files = 0, bytes = 0;
	if (r->upload_fd < 0) {
		wrd_reply_error(r, "conflict", NULL, "sandbox %s stopped during the upload", r->id);
	} else if (sb->ops->fs(sb->tsb, &fs, &err) < 0) {
		wrd_reply_err(r, err);
	} else if (validate(r, r->upload_fd, r->upload_max) == 0 &&
		   extract(r, &fs, r->upload_fd, path, r->upload_max, &files, &bytes) == 0) {
		json_t *o = json_object();
		json_object_set_new(o, "files", json_integer((json_int_t)files));
		json_object_set_new(o, "bytes", json_integer((json_int_t)bytes));
		wrd_reply_json(r, 200, o);
	}
	wrd_api_done(sb, true);
}

/* ---- download ----------------------------------------------------------- */

struct tentry {
	char *rel;
	struct wr_fs_stat st;
};

struct tlist {
	struct tentry *v;
	size_t n, cap;
};

static int tlist_cb(void *ctx, const char *rel, const struct wr_fs_stat *st)
{
	struct tlist *l = ctx;
	if (l->n == l->cap) {
		size_t nc = l->cap ? l->cap * 2 : 256;
		struct tentry *nv = realloc(l->v, nc * sizeof(*nv));
		if (nv == NULL)
			return -ENOMEM;
		l->v = nv;
		l->cap = nc;
	}
	struct tentry *t = &l->v[l->n];
	t->rel = strdup(rel);
	t->st = *st;
	t->st.symlink_target = st->symlink_target ? strdup(st->symlink_target) : NULL;
	if (t->rel == NULL)
		return -ENOMEM;
	l->n++;
	return 0;
}

static void tlist_free(struct tlist *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->v[i].rel);
		wr_fs_stat_free(&l->v[i].st);
	}
	free(l->v);
}

static la_ssize_t write_cb(struct archive *a, void *ctx, const void *buf, size_t len)
{
	(void)a;
	int fd = *(int *)ctx;
	return wr_write_all(fd, buf, len) < 0 ? -1 : (la_ssize_t)len;
}

static int add_entry(struct archive *a, const struct wr_fs *fs, const char *src,
		     const struct tentry *t, int scratch)
{
	struct archive_entry *e = archive_entry_new();
	if (e == NULL)
		return -ENOMEM;
	char full[8400];
	int r = 0;
	archive_entry_set_pathname(e, t->rel);
	archive_entry_set_perm(e, t->st.mode & 07777);
	archive_entry_set_uid(e, t->st.uid);
	archive_entry_set_gid(e, t->st.gid);
	archive_entry_set_mtime(e, t->st.mtime_ns / 1000000000, t->st.mtime_ns % 1000000000);
	uint64_t size = 0;
	switch (t->st.type) {
	case WR_FS_DIR: archive_entry_set_filetype(e, AE_IFDIR); break;
	case WR_FS_SYMLINK:
		archive_entry_set_filetype(e, AE_IFLNK);
		archive_entry_set_symlink(e, t->st.symlink_target ? t->st.symlink_target : "");
		break;
	case WR_FS_FILE: {
		archive_entry_set_filetype(e, AE_IFREG);
		_cleanup_err_ wr_err err = NULL;
		if (*t->rel)
			join(full, sizeof(full), src, t->rel);
		else
			snprintf(full, sizeof(full), "%s", src);
		/* the file as it is now, up to its listed size: the header
		 * must carry the size the data will have */
		if (ftruncate(scratch, 0) < 0 || lseek(scratch, 0, SEEK_SET) < 0 ||
		    wr_fs_read_to_fd(fs, full, scratch, t->st.size, &size, &err) < 0 ||
		    lseek(scratch, 0, SEEK_SET) < 0)
			size = 0; /* vanished or unreadable: an empty file */
		break;
	}
	default: archive_entry_free(e); return 0; /* sockets, FIFOs, devices: skipped */
	}
	archive_entry_set_size(e, (la_int64_t)size);
	if (*t->rel == 0)
		archive_entry_set_pathname(e, strrchr(src, '/') ? strrchr(src, '/') + 1 : src);
	if (archive_write_header(a, e) != ARCHIVE_OK)
		r = -EIO;
	char buf[65536];
	while (r == 0 && size > 0) {
		ssize_t n = read(scratch, buf, size < sizeof(buf) ? size : sizeof(buf));
		if (n <= 0) {
			r = -EIO;
			break;
		}
		if (archive_write_data(a, buf, (size_t)n) != n)
			r = -EIO;
		size -= (uint64_t)n;
	}
	archive_entry_free(e);
	return r;
}

void wrd_api_tar_get(struct wrd_req *r)
{
	static const char *const allowed[] = {"path", NULL};
	const char *path;
	if (wrd_query_check(r, allowed) < 0 || (path = wrd_query_path(r, "path")) == NULL)
		return;
	struct wrd_sbx *sb = wrd_api_sandbox(r, true);
	if (sb == NULL)
		return;
	struct wr_fs fs;
	_cleanup_err_ wr_err err = NULL;
	struct tlist l = {0};
	struct wr_fs_stat st = {0};
	_cleanup_free_ char *src = strdup(path);
	_cleanup_close_ int scratch = spool_tmp();
	if (src == NULL || scratch < 0) {
		wrd_reply_error(r, "internal", NULL, "tar: %s", strerror(errno));
		goto out;
	}
	if (sb->ops->fs(sb->tsb, &fs, &err) < 0 || wr_fs_stat(&fs, src, &st, &err) < 0) {
		wrd_fs_reply_err(r, err, "path");
		goto out;
	}
	if (st.type == WR_FS_DIR) {
		if (wr_fs_list(&fs, src, WR_FS_LIST_MAX_DEPTH, tlist_cb, &l, &err) < 0) {
			wrd_fs_reply_err(r, err, "path");
			goto out;
		}
	} else {
		struct tentry one = {.rel = (char *)"", .st = st};
		if (tlist_cb(&l, one.rel, &one.st) < 0) {
			wrd_reply_error(r, "internal", NULL, "out of memory");
			goto out;
		}
	}
	int fd = wrd_reply_stream(r, 200, "application/x-tar");
	if (fd < 0)
		goto out;
	struct archive *a = archive_write_new();
	if (a && archive_write_set_format_pax_restricted(a) == ARCHIVE_OK &&
	    archive_write_set_bytes_in_last_block(a, 1) == ARCHIVE_OK &&
	    archive_write_open(a, &fd, NULL, write_cb, NULL) == ARCHIVE_OK) {
		for (size_t i = 0; i < l.n; i++)
			if (add_entry(a, &fs, src, &l.v[i], scratch) < 0)
				break;
		archive_write_close(a);
	}
	if (a)
		archive_write_free(a);
	close(fd);
out:
	wr_fs_stat_free(&st);
	tlist_free(&l);
	wrd_api_done(sb, true);
}
