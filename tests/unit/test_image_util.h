/* Helpers for the image store's unit tests: a scratch directory per test,
 * small trees and tars built at runtime, and a look into built blobs with
 * erofs-utils (fsck.erofs --extract, dump.erofs): no mounts. */
#ifndef WARREN_TEST_IMAGE_UTIL_H
#define WARREN_TEST_IMAGE_UTIL_H

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/sysmacros.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image/image.h"

struct fixture {
	char base[64];
	char store[96];
	int extracts;
};

/* A tar entry: type 'f' file, 'd' dir, 'l' symlink, 'h' hard link,
 * 'p' fifo, 'c'/'b' devices. */
struct tentry {
	const char *name;
	char type;
	unsigned mode;
	const char *data;
	const char *link;
	unsigned uid;
	long mtime;
	const char *xname, *xval;
};

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static inline struct fixture *fixture_new(void)
{
	struct fixture *f = calloc(1, sizeof(*f));
	/* mkdtemp's template: six 'X' written at runtime */
	int n = snprintf(f->base, sizeof(f->base), "/tmp/wr-image-test-");
	memset(f->base + n, 'X', 6);
	f->base[n + 6] = '\0';
	if (mkdtemp(f->base) == NULL)
		return NULL;
	snprintf(f->store, sizeof(f->store), "%s/store", f->base);
	return f;
}

static inline void fixture_free(struct fixture *f)
{
	nftw(f->base, rm_cb, 64, FTW_DEPTH | FTW_PHYS);
	free(f);
}

static inline const char *pathcat(const char *a, const char *b)
{
	static char bufs[8][4096];
	static int i;
	char *p = bufs[i++ % 8];
	snprintf(p, 4096, "%s/%s", a, b);
	return p;
}

static inline const char *fpath(struct fixture *f, const char *rel)
{
	return pathcat(f->base, rel);
}

static inline int count_entries(const char *base, const char *rel)
{
	DIR *d = opendir(pathcat(base, rel));
	if (d == NULL)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

static inline bool exists(const char *p)
{
	struct stat sb;
	return lstat(p, &sb) == 0;
}

static inline void set_mtime(const char *p, long t)
{
	struct timespec ts[2] = {{t, 0}, {t, 0}};
	utimensat(AT_FDCWD, p, ts, AT_SYMLINK_NOFOLLOW);
}

static inline void write_file(const char *p, const char *data)
{
	FILE *fp = fopen(p, "w");
	fputs(data, fp);
	fclose(fp);
}

/* A small rootfs with fixed times (so two calls give the same content). */
static inline void make_rootfs(struct fixture *f, const char *name, long t)
{
	const char *root = fpath(f, name);
	char p[4096];
	mkdir(root, 0755);
	snprintf(p, sizeof(p), "%s/etc", root);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/bin", root);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/etc/hostname", root);
	write_file(p, "box\n");
	set_mtime(p, t);
	snprintf(p, sizeof(p), "%s/bin/tool", root);
	write_file(p, "#!/bin/sh\necho hi\n");
	chmod(p, 0755);
	set_mtime(p, t);
	snprintf(p, sizeof(p), "%s/bin/alias", root);
	symlink("tool", p);
	set_mtime(p, t);
	snprintf(p, sizeof(p), "%s/etc", root);
	set_mtime(p, t);
	snprintf(p, sizeof(p), "%s/bin", root);
	set_mtime(p, t);
	set_mtime(root, t);
}

static inline void make_tar(const char *path, const struct tentry *e, const char *comp)
{
	struct archive *a = archive_write_new();
	archive_write_set_format_pax_restricted(a);
	if (strcmp(comp, "gzip") == 0)
		archive_write_add_filter_gzip(a);
	else if (strcmp(comp, "zstd") == 0)
		archive_write_add_filter_zstd(a);
	archive_write_open_filename(a, path);
	for (; e->name; e++) {
		struct archive_entry *ae = archive_entry_new();
		archive_entry_set_pathname(ae, e->name);
		archive_entry_set_uid(ae, e->uid);
		archive_entry_set_gid(ae, e->uid);
		archive_entry_set_mtime(ae, e->mtime, 0);
		archive_entry_set_perm(ae, e->mode);
		size_t len = e->data ? strlen(e->data) : 0;
		switch (e->type) {
		case 'f':
			archive_entry_set_filetype(ae, AE_IFREG);
			archive_entry_set_size(ae, (la_int64_t)len);
			break;
		case 'd': archive_entry_set_filetype(ae, AE_IFDIR); break;
		case 'l':
			archive_entry_set_filetype(ae, AE_IFLNK);
			archive_entry_set_symlink(ae, e->link);
			break;
		case 'h':
			archive_entry_set_filetype(ae, AE_IFREG);
			archive_entry_set_hardlink(ae, e->link);
			break;
		case 'p': archive_entry_set_filetype(ae, AE_IFIFO); break;
		case 'c':
			archive_entry_set_filetype(ae, AE_IFCHR);
			archive_entry_set_rdev(ae, makedev(1, 1));
			break;
		case 'b':
			archive_entry_set_filetype(ae, AE_IFBLK);
			archive_entry_set_rdev(ae, makedev(8, 0));
			break;
		}
		if (e->xname)
			archive_entry_xattr_add_entry(ae, e->xname, e->xval, strlen(e->xval));
		archive_write_header(a, ae);
		if (e->type == 'f' && len)
			archive_write_data(a, e->data, len);
		archive_entry_free(ae);
	}
	archive_write_close(a);
	archive_write_free(a);
}

/* n files of `size` bytes each. */
static inline void make_many_tar(const char *path, int n, size_t size)
{
	struct archive *a = archive_write_new();
	archive_write_set_format_pax_restricted(a);
	archive_write_open_filename(a, path);
	char *buf = calloc(1, size);
	for (int i = 0; i < n; i++) {
		struct archive_entry *ae = archive_entry_new();
		char name[32];
		snprintf(name, sizeof(name), "f%05d", i);
		archive_entry_set_pathname(ae, name);
		archive_entry_set_filetype(ae, AE_IFREG);
		archive_entry_set_perm(ae, 0644);
		archive_entry_set_size(ae, (la_int64_t)size);
		archive_write_header(a, ae);
		archive_write_data(a, buf, size);
		archive_entry_free(ae);
	}
	free(buf);
	archive_write_close(a);
	archive_write_free(a);
}

/* Extract a blob of the store with fsck.erofs into a fresh directory. */
static inline const char *extract_blob(struct fixture *f, struct wr_image_store *s,
				       const char *digest)
{
	static char dir[8][128];
	char *d = dir[f->extracts % 8];
	snprintf(d, 128, "%s/x%d", f->base, f->extracts++);
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "fsck.erofs --extract=%s %s/blobs/sha256/%s >/dev/null 2>&1", d,
		 wr_image_store_dir(s), digest + 7);
	if (system(cmd) != 0)
		return "/nonexistent";
	return d;
}

/* A field of dump.erofs --path output ("NID: ", "Access: "), as a number
 * in `base`; -1 when absent. */
static inline long blob_field(struct fixture *f, const char *digest, const char *path,
			      const char *field, int base)
{
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "dump.erofs --path=/%s %s/blobs/sha256/%s 2>/dev/null", path,
		 f->store, digest + 7);
	FILE *p = popen(cmd, "r");
	char line[256];
	long v = -1;
	while (p && fgets(line, sizeof(line), p)) {
		char *at = strstr(line, field);
		if (at)
			v = strtol(at + strlen(field), NULL, base);
	}
	if (p)
		pclose(p);
	return v;
}

static inline long blob_nid(struct fixture *f, const char *digest, const char *path)
{
	return blob_field(f, digest, path, "NID: ", 10);
}

static inline long blob_nid_unused(struct fixture *f, const char *digest, const char *path)
{
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "dump.erofs --path=/%s %s/blobs/sha256/%s 2>/dev/null", path,
		 f->store, digest + 7);
	FILE *p = popen(cmd, "r");
	char line[256];
	long nid = -1;
	while (p && fgets(line, sizeof(line), p))
		if (strncmp(line, "NID: ", 5) == 0)
			nid = strtol(line + 5, NULL, 10);
	if (p)
		pclose(p);
	return nid;
}

static inline bool blob_hardlinked(struct fixture *f, const char *digest, const char *a,
				   const char *b)
{
	long x = blob_nid(f, digest, a), y = blob_nid(f, digest, b);
	return x >= 0 && x == y;
}

/* Run SQL on a store's database (simulating age or a crash). */
static inline int db_exec(struct fixture *f, const char *sql)
{
	char p[160];
	snprintf(p, sizeof(p), "%s/store.db", f->store);
	sqlite3 *db = NULL;
	int rc = sqlite3_open(p, &db);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
	sqlite3_close(db);
	return rc == SQLITE_OK ? 0 : -1;
}

/* lstat of a path inside a blob, through a real mount made in a child's
 * private mount namespace (gone with the child). 0 or -1. */
static inline int blob_stat(struct fixture *f, const char *digest, const char *path,
			    struct stat *out)
{
	int p[2];
	if (pipe(p) < 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		char mnt[160], blob[512], target[4096];
		snprintf(mnt, sizeof(mnt), "%s/mnt-%d", f->base, getpid());
		snprintf(blob, sizeof(blob), "%s/blobs/sha256/%s", f->store, digest + 7);
		snprintf(target, sizeof(target), "%s/%s", mnt, path);
		struct stat sb;
		if (unshare(CLONE_NEWNS) < 0 ||
		    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 || mkdir(mnt, 0700) < 0 ||
		    mount(blob, mnt, "erofs", MS_RDONLY, NULL) < 0 || lstat(target, &sb) < 0)
			_exit(1);
		if (write(p[1], &sb, sizeof(sb)) != (ssize_t)sizeof(sb))
			_exit(1);
		umount2(mnt, MNT_DETACH);
		rmdir(mnt);
		_exit(0);
	}
	close(p[1]);
	ssize_t n = read(p[0], out, sizeof(*out));
	close(p[0]);
	int st;
	waitpid(pid, &st, 0);
	char mnt[160];
	snprintf(mnt, sizeof(mnt), "%s/mnt-%d", f->base, pid);
	rmdir(mnt);
	return n == (ssize_t)sizeof(*out) ? 0 : -1;
}

#endif
