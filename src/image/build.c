/* Staging directories, reproducible EROFS builds, verification, digests. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "image/store_internal.h"

/* Fixed inputs of every build: the same tree gives the same bytes. The
 * build time only clamps mtimes later than it (year 2096). */
#define EROFS_UUID "6c7ae2f5-3b7e-4a37-9f0e-2d1a9a4c0b01"
#define EROFS_EPOCH "4000000000"
#define TOOL_PATH "PATH=/usr/sbin:/usr/bin:/sbin:/bin"

extern char **environ;

int wri_rm_rf_at(int dirfd, const char *name)
{
	if (unlinkat(dirfd, name, 0) == 0 || errno == ENOENT)
		return 0;
	if (errno != EISDIR && errno != EPERM)
		return -errno;
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	DIR *d = fdopendir(fd);
	if (d == NULL) {
		close(fd);
		return -errno;
	}
	struct dirent *e;
	int r = 0;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		int rr = wri_rm_rf_at(fd, e->d_name);
		if (rr < 0 && r == 0)
			r = rr;
	}
	closedir(d);
	if (unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT && r == 0)
		r = -errno;
	return r;
}

int wri_stage_new(struct wr_image_store *s, struct wri_stage *st, wr_err *err)
{
	char id[17];
	st->fd = st->rootfd = -1;
	if (wr_random_id(id) < 0)
		return wr_err_sys(err, "staging: random id");
	snprintf(st->name, sizeof(st->name), "stage-%s", id);
	if (mkdirat(s->tmpfd, st->name, 0700) < 0)
		return wr_err_sys(err, "staging: mkdir tmp/%s", st->name);
	st->fd = openat(s->tmpfd, st->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (st->fd < 0 || flock(st->fd, LOCK_EX) < 0) {
		int r = wr_err_sys(err, "staging: open tmp/%s", st->name);
		wri_stage_drop(s, st);
		return r;
	}
	return 0;
}

int wri_stage_root(struct wri_stage *st, wr_err *err)
{
	if (st->rootfd >= 0)
		return 0;
	if (mkdirat(st->fd, "root", 0755) < 0)
		return wr_err_sys(err, "staging: mkdir root");
	st->rootfd = openat(st->fd, "root", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (st->rootfd < 0)
		return wr_err_sys(err, "staging: open root");
	return 0;
}

void wri_stage_drop(struct wr_image_store *s, struct wri_stage *st)
{
	if (st->rootfd >= 0)
		close(st->rootfd);
	if (st->name[0])
		wri_rm_rf_at(s->tmpfd, st->name);
	if (st->fd >= 0)
		close(st->fd); /* drops the lock after the tree is gone */
	st->fd = st->rootfd = -1;
	st->name[0] = '\0';
}

void wri_stage_sweep(struct wr_image_store *s)
{
	int fd = dup(s->tmpfd);
	if (fd < 0)
		return;
	DIR *d = fdopendir(fd);
	if (d == NULL) {
		close(fd);
		return;
	}
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		_cleanup_close_ int sfd =
		    openat(s->tmpfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		/* A live importer (this or another process) holds the lock. */
		if (sfd >= 0 && flock(sfd, LOCK_EX | LOCK_NB) < 0)
			continue;
		wri_rm_rf_at(s->tmpfd, e->d_name);
	}
	closedir(d);
}

/* Run argv (a host tool, never anything from an image) with stdio on
 * /dev/null, its stderr kept for the error message. */
static int run_tool(char *const argv[], wr_err *err)
{
	_cleanup_close_ int errfd = open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	if (errfd >= 0)
		posix_spawn_file_actions_adddup2(&fa, errfd, 2);
	else
		posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	char *envp[] = {TOOL_PATH, "LC_ALL=C", "SOURCE_DATE_EPOCH=" EROFS_EPOCH, NULL};
	pid_t pid;
	int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	if (rc != 0)
		return wr_err_set(err, rc, "run %s: %s", argv[0], strerror(rc));
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return wr_err_sys(err, "wait %s", argv[0]);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	char msg[512] = "";
	if (errfd >= 0) {
		ssize_t n = pread(errfd, msg, sizeof(msg) - 1, 0);
		msg[n > 0 ? n : 0] = '\0';
		for (char *p = msg; *p; p++)
			if (*p == '\n')
				*p = (p[1] ? ' ' : '\0');
	}
	return wr_err_set(
	    err, EBADMSG, "%s failed (%s %d)%s%s", argv[0], WIFEXITED(status) ? "exit" : "signal",
	    WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), msg[0] ? ": " : "", msg);
}

int wri_fsck(const char *path, wr_err *err)
{
	char *argv[] = {"fsck.erofs", "--extract", (char *)path, NULL};
	int r = run_tool(argv, err);
	if (r < 0)
		return wr_err_wrap(err, "verify EROFS blob");
	return 0;
}

static int hash_fd(int fd, int outfd, char out[WR_IMAGE_DIGEST_LEN + 1], uint64_t *size,
		   wr_err *err)
{
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	if (ctx == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
		EVP_MD_CTX_free(ctx);
		return wr_err_set(err, ENOMEM, "sha256: init failed");
	}
	_cleanup_free_ char *buf = malloc(1 << 20);
	uint64_t off = 0;
	int r = 0;
	if (buf == NULL)
		r = wr_err_set(err, ENOMEM, "out of memory");
	while (r == 0) {
		ssize_t n = pread(fd, buf, 1 << 20, (off_t)off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			r = wr_err_sys(err, "read");
			break;
		}
		if (n == 0)
			break;
		EVP_DigestUpdate(ctx, buf, (size_t)n);
		if (outfd >= 0 && wr_write_all(outfd, buf, (size_t)n) < 0)
			r = wr_err_sys(err, "write");
		off += (uint64_t)n;
	}
	unsigned char md[32];
	unsigned int mdlen = 0;
	EVP_DigestFinal_ex(ctx, md, &mdlen);
	EVP_MD_CTX_free(ctx);
	if (r < 0)
		return r;
	memcpy(out, "sha256:", 7);
	for (int i = 0; i < 32; i++)
		snprintf(out + 7 + 2 * i, 3, "%02x", md[i]);
	if (size)
		*size = off;
	return 0;
}

int wri_sha256_fd(int fd, char out[WR_IMAGE_DIGEST_LEN + 1], uint64_t *size, wr_err *err)
{
	return hash_fd(fd, -1, out, size, err);
}

int wri_copy_fd(int fd, int dirfd, const char *name, char digest[WR_IMAGE_DIGEST_LEN + 1],
		uint64_t *size, wr_err *err)
{
	_cleanup_close_ int out =
	    openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (out < 0)
		return wr_err_sys(err, "create %s", name);
	int r = hash_fd(fd, out, digest, size, err);
	if (r == 0 && fsync(out) < 0)
		r = wr_err_sys(err, "fsync %s", name);
	return r;
}

int wri_build_erofs(struct wr_image_store *s, struct wri_stage *st, const char *src_path,
		    char digest[WR_IMAGE_DIGEST_LEN + 1], uint64_t *size, wr_err *err)
{
	_cleanup_free_ char *blob = NULL;
	if (asprintf(&blob, "%s/tmp/%s/blob", s->dir, st->name) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	char *argv[] = {"mkfs.erofs", "--quiet", "-U" EROFS_UUID, blob, (char *)src_path, NULL};
	int r = run_tool(argv, err);
	if (r < 0)
		return wr_err_wrap(err, "build EROFS");
	if ((r = wri_fsck(blob, err)) < 0)
		return r;
	_cleanup_close_ int fd = openat(st->fd, "blob", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return wr_err_sys(err, "open built blob");
	if ((r = wri_sha256_fd(fd, digest, size, err)) < 0)
		return wr_err_wrap(err, "digest built blob");
	if (fchmod(fd, 0444) < 0 || fsync(fd) < 0)
		return wr_err_sys(err, "seal built blob");
	return 0;
}
