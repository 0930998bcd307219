/* fsops: the host-side files API into a sandbox's root, attacked.
 *
 * Runs as root. The process moves into a private mount namespace first
 * (every mount a test makes vanishes with it, and teardown unmounts them
 * anyway) and mounts a tmpfs over its temp dir. Each test gets
 *   <base>/tN/root   the fake sandbox root (fs->root_fd)
 *   <base>/tN/host   stands for host files outside the root, with markers
 * and teardown removes the whole tN tree, stopping an attacker thread and
 * unmounting first, whether the test passed or not.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <setjmp.h>
#include <cmocka.h>

#include "common/cleanup.h"
#include "tiers/fsops.h"

#define ID_BASE 100000
#define UID (ID_BASE + 1000)
#define GID (ID_BASE + 1001)
#define HOST_SECRET "HOST-SECRET"
#define RACE_ROUNDS 1000

static char g_base[64];
static int g_tmp_fd = -1; /* /tmp as mounted before / went read-only */
static bool g_private;	  /* own mount namespace: tests may mount */
static int g_seq;

struct fx {
	char dir[128];
	char root[192];
	char host[192];
	char mounts[4][PATH_MAX];
	int nmounts;
	int root_fd;
	struct wr_fs fs;
	wr_err err;
	pthread_t attacker;
	bool attacking;
	atomic_bool stop;
	atomic_ulong swaps;
	int attack_fd;
};

/* ---- host-side helpers (the test's own view, plain paths) --------------- */

static void pathf(char *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void pathf(char *out, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(out, PATH_MAX, fmt, ap);
	va_end(ap);
	assert_true(n > 0 && n < PATH_MAX);
}

static void put_file(const char *path, const char *content)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		fail_msg("create %s: %s", path, strerror(errno));
	size_t len = strlen(content);
	assert_int_equal(write(fd, content, len), (ssize_t)len);
	close(fd);
}

static void rput(struct fx *fx, const char *rel, const char *content)
{
	char p[PATH_MAX];
	pathf(p, "%s/%s", fx->root, rel);
	put_file(p, content);
}

static void rmkdir(struct fx *fx, const char *rel)
{
	char p[PATH_MAX];
	pathf(p, "%s/%s", fx->root, rel);
	if (mkdir(p, 0755) < 0)
		fail_msg("mkdir %s: %s", p, strerror(errno));
}

static void rsymlink(struct fx *fx, const char *target, const char *rel)
{
	char p[PATH_MAX];
	pathf(p, "%s/%s", fx->root, rel);
	if (symlink(target, p) < 0)
		fail_msg("symlink %s: %s", p, strerror(errno));
}

/* Content of a host file (static buffer), or NULL when absent. */
static const char *slurp(const char *path)
{
	static char buf[4096];
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return NULL;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	assert_true(n >= 0);
	buf[n] = '\0';
	return buf;
}

static const char *rslurp(struct fx *fx, const char *rel)
{
	char p[PATH_MAX];
	pathf(p, "%s/%s", fx->root, rel);
	return slurp(p);
}

static bool lexists(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0;
}

static bool rexists(struct fx *fx, const char *rel)
{
	char p[PATH_MAX];
	pathf(p, "%s/%s", fx->root, rel);
	return lexists(p);
}

static struct stat rlstat(struct fx *fx, const char *rel)
{
	char p[PATH_MAX];
	struct stat st;
	pathf(p, "%s/%s", fx->root, rel);
	if (lstat(p, &st) < 0)
		fail_msg("lstat %s: %s", p, strerror(errno));
	return st;
}

/* Number of entries of dir (not recursive) whose name contains needle. */
static int count_names(const char *dir, const char *needle)
{
	DIR *d = opendir(dir);
	assert_non_null(d);
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..") &&
		    strstr(de->d_name, needle))
			n++;
	closedir(d);
	return n;
}

static int count_tmp_tree(const char *dir)
{
	int n = count_names(dir, ".wr-tmp-");
	DIR *d = opendir(dir);
	assert_non_null(d);
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char p[PATH_MAX];
		struct stat st;
		pathf(p, "%s/%s", dir, de->d_name);
		if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
			n += count_tmp_tree(p);
	}
	closedir(d);
	return n;
}

static void host_intact(struct fx *fx)
{
	char p[PATH_MAX];
	pathf(p, "%s/secret", fx->host);
	const char *s = slurp(p);
	assert_non_null(s);
	assert_string_equal(s, HOST_SECRET);
	pathf(p, "%s/victim/keep", fx->host);
	s = slurp(p);
	assert_non_null(s);
	assert_string_equal(s, "KEEP");
	/* nothing but the markers was ever created there */
	assert_int_equal(count_names(fx->host, ""), 2);
	pathf(p, "%s/victim", fx->host);
	assert_int_equal(count_names(p, ""), 1);
}

/* ---- assertions on results ---------------------------------------------- */

#define OK(fx, expr)                                                                               \
	do {                                                                                       \
		int r_ = (expr);                                                                   \
		if (r_ < 0)                                                                        \
			fail_msg("%s -> %d: %s", #expr, r_,                                        \
				 (fx)->err && (fx)->err->msg ? (fx)->err->msg : "(no message)");   \
	} while (0)

/* The exact errno, in the return value and in err; the message never shows
 * the host location of the root. */
#define FAILS(fx, expr, e)                                                                         \
	do {                                                                                       \
		int r_ = (expr);                                                                   \
		if (r_ != -(e))                                                                    \
			fail_msg("%s -> %d (%s), expected -%s", #expr, r_,                         \
				 (fx)->err && (fx)->err->msg ? (fx)->err->msg : "no error", #e);   \
		assert_non_null((fx)->err);                                                        \
		assert_int_equal((fx)->err->errnum, (e));                                          \
		assert_non_null((fx)->err->msg);                                                   \
		assert_null(strstr((fx)->err->msg, (fx)->root));                                   \
		wr_err_free(&(fx)->err);                                                           \
	} while (0)

static void read_is(struct fx *fx, const char *path, const char *want)
{
	char *data = NULL;
	size_t len = 0;
	bool trunc = true;
	OK(fx, wr_fs_read(&fx->fs, path, 1 << 20, &data, &len, &trunc, &fx->err));
	assert_false(trunc);
	assert_int_equal(len, strlen(want));
	assert_string_equal(data, want);
	free(data);
}

static int read_err(struct fx *fx, const char *path)
{
	char *data = NULL;
	size_t len = 0;
	bool trunc;
	int r = wr_fs_read(&fx->fs, path, 1 << 20, &data, &len, &trunc, &fx->err);
	assert_true(r < 0);
	assert_null(data);
	return r;
}

static int write_str(struct fx *fx, const char *path, const char *s, bool parents)
{
	return wr_fs_write(&fx->fs, path, s, strlen(s), 0644, parents, &fx->err);
}

/* ---- fixtures ------------------------------------------------------------- */

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(p);
	return 0;
}

static void rm_rf(const char *dir)
{
	nftw(dir, rm_cb, 64, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

static int group_setup(void **state)
{
	(void)state;
	umask(022);
	snprintf(g_base, sizeof(g_base), "/tmp/wr-fsops-XXXXXX");
	if (mkdtemp(g_base) == NULL)
		return -1;
	g_tmp_fd = open("/tmp", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (g_tmp_fd < 0)
		return -1;
	if (unshare(CLONE_NEWNS) == 0 && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0) {
		g_private = true;
		/* fast, and gone with the namespace whatever happens; with the
		 * test tree on its own mount, the machine's / is made read-only
		 * in this namespace, so a confinement bug fails a test with
		 * EROFS instead of writing to the host */
		if (mount("wr-fsops", g_base, "tmpfs", 0, "size=256m,mode=0700") == 0)
			mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL);
	}
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	if (g_private)
		umount2(g_base, MNT_DETACH);
	rm_rf(g_base);
	/* through the fd taken before the read-only remount */
	unlinkat(g_tmp_fd, g_base + strlen("/tmp/"), AT_REMOVEDIR);
	close(g_tmp_fd);
	return 0;
}

static int setup(void **state)
{
	struct fx *fx = calloc(1, sizeof(*fx));
	if (fx == NULL)
		return -1;
	fx->root_fd = -1;
	fx->attack_fd = -1;
	snprintf(fx->dir, sizeof(fx->dir), "%s/t%d", g_base, ++g_seq);
	snprintf(fx->root, sizeof(fx->root), "%s/root", fx->dir);
	snprintf(fx->host, sizeof(fx->host), "%s/host", fx->dir);
	*state = fx;
	if (mkdir(fx->dir, 0755) < 0 || mkdir(fx->root, 0755) < 0 || mkdir(fx->host, 0755) < 0)
		return -1;
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/secret", fx->host);
	put_file(p, HOST_SECRET);
	snprintf(p, sizeof(p), "%s/victim", fx->host);
	if (mkdir(p, 0755) < 0)
		return -1;
	snprintf(p, sizeof(p), "%s/victim/keep", fx->host);
	put_file(p, "KEEP");
	fx->root_fd = open(fx->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fx->root_fd < 0)
		return -1;
	fx->fs = (struct wr_fs){.root_fd = fx->root_fd, .id_base = ID_BASE, .uid = UID, .gid = GID};
	return 0;
}

static int teardown(void **state)
{
	struct fx *fx = *state;
	if (fx == NULL)
		return 0;
	if (fx->attacking) {
		atomic_store(&fx->stop, true);
		pthread_join(fx->attacker, NULL);
	}
	alarm(0);
	while (fx->nmounts > 0)
		umount2(fx->mounts[--fx->nmounts], MNT_DETACH);
	if (fx->attack_fd >= 0)
		close(fx->attack_fd);
	if (fx->root_fd >= 0)
		close(fx->root_fd);
	wr_err_free(&fx->err);
	rm_rf(fx->dir);
	free(fx);
	return 0;
}

static void fx_mount(struct fx *fx, const char *src, const char *target, const char *type,
		     const char *opts)
{
	if (!g_private)
		skip();
	assert_true(fx->nmounts < 4);
	if (mount(src, target, type, 0, opts) < 0)
		fail_msg("mount %s on %s: %s", type, target, strerror(errno));
	snprintf(fx->mounts[fx->nmounts++], PATH_MAX, "%s", target);
}

/* ---- happy paths ---------------------------------------------------------- */

static void test_write_read(void **state)
{
	struct fx *fx = *state;
	OK(fx, wr_fs_write(&fx->fs, "a.txt", "hello", 5, 0640, false, &fx->err));
	read_is(fx, "a.txt", "hello");
	read_is(fx, "/a.txt", "hello");
	assert_string_equal(rslurp(fx, "a.txt"), "hello");
	struct stat st = rlstat(fx, "a.txt");
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_uid, UID);
	assert_int_equal(st.st_gid, GID);
	assert_int_equal(st.st_mode & 07777, 0640);

	/* replace: new content, the existing file's mode is kept */
	OK(fx, wr_fs_write(&fx->fs, "a.txt", "bye", 3, 0600, false, &fx->err));
	read_is(fx, "a.txt", "bye");
	assert_int_equal(rlstat(fx, "a.txt").st_mode & 07777, 0640);
	/* set-id bits of an existing file do not survive a rewrite */
	char p[PATH_MAX];
	pathf(p, "%s/a.txt", fx->root);
	assert_int_equal(chmod(p, 04755), 0);
	OK(fx, write_str(fx, "a.txt", "again", false));
	assert_int_equal(rlstat(fx, "a.txt").st_mode & 07777, 0755);

	/* an empty file */
	OK(fx, wr_fs_write(&fx->fs, "empty", "", 0, 0600, false, &fx->err));
	read_is(fx, "empty", "");
	assert_int_equal(rlstat(fx, "empty").st_size, 0);

	/* missing parents: ENOENT, then created and owned by the sandbox */
	FAILS(fx, write_str(fx, "x/y/z.txt", "deep", false), ENOENT);
	assert_false(rexists(fx, "x"));
	OK(fx, write_str(fx, "x/y/z.txt", "deep", true));
	read_is(fx, "x/y/z.txt", "deep");
	st = rlstat(fx, "x");
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_uid, UID);
	assert_int_equal(st.st_gid, GID);
	assert_int_equal(st.st_mode & 07777, 0755);
	assert_int_equal(rlstat(fx, "x/y").st_uid, UID);
	/* parents through "..": stays a plain mkdir -p */
	OK(fx, write_str(fx, "m/../n/f", "mn", true));
	read_is(fx, "n/f", "mn");
	assert_true(rexists(fx, "m"));

	assert_int_equal(count_tmp_tree(fx->root), 0);
	host_intact(fx);
}

static void test_read_limits(void **state)
{
	struct fx *fx = *state;
	char big[200 * 1024];
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (char)('a' + i % 26);
	OK(fx, wr_fs_write(&fx->fs, "big", big, sizeof(big), 0644, false, &fx->err));
	OK(fx, write_str(fx, "small", "0123456789abcdef", false));

	char *data = NULL;
	size_t len = 0;
	bool trunc = false;
	OK(fx, wr_fs_read(&fx->fs, "small", 10, &data, &len, &trunc, &fx->err));
	assert_int_equal(len, 10);
	assert_true(trunc);
	assert_memory_equal(data, "0123456789", 10);
	free(data);
	OK(fx, wr_fs_read(&fx->fs, "small", 16, &data, &len, &trunc, &fx->err));
	assert_int_equal(len, 16);
	assert_false(trunc);
	free(data);
	OK(fx, wr_fs_read(&fx->fs, "small", 0, &data, &len, &trunc, &fx->err));
	assert_int_equal(len, 0);
	assert_true(trunc);
	free(data);
	OK(fx, wr_fs_read(&fx->fs, "big", UINT64_MAX, &data, &len, &trunc, &fx->err));
	assert_int_equal(len, sizeof(big));
	assert_false(trunc);
	assert_memory_equal(data, big, sizeof(big));
	free(data);

	/* streaming, larger than one 64 KiB chunk */
	int out = memfd_create("out", MFD_CLOEXEC);
	assert_true(out >= 0);
	uint64_t written = 0;
	int r = wr_fs_read_to_fd(&fx->fs, "big", out, UINT64_MAX, &written, &fx->err);
	assert_int_equal(r, 0);
	assert_int_equal(written, sizeof(big));
	char *back = malloc(sizeof(big));
	assert_non_null(back);
	assert_int_equal(pread(out, back, sizeof(big), 0), (ssize_t)sizeof(big));
	assert_memory_equal(back, big, sizeof(big));
	assert_int_equal(ftruncate(out, 0), 0);
	assert_int_equal(lseek(out, 0, SEEK_SET), 0);
	r = wr_fs_read_to_fd(&fx->fs, "big", out, 70000, &written, &fx->err);
	assert_int_equal(r, 1);
	assert_int_equal(written, 70000);
	struct stat st;
	assert_int_equal(fstat(out, &st), 0);
	assert_int_equal(st.st_size, 70000);
	r = wr_fs_read_to_fd(&fx->fs, "big", out, sizeof(big), &written, &fx->err);
	assert_int_equal(r, 0);
	free(back);
	close(out);
	FAILS(fx, wr_fs_read_to_fd(&fx->fs, "nope", 1, 10, &written, &fx->err), ENOENT);
	assert_int_equal(written, 0);
}

static void test_write_from_fd(void **state)
{
	struct fx *fx = *state;
	size_t n = 150 * 1024;
	char *buf = malloc(n);
	assert_non_null(buf);
	for (size_t i = 0; i < n; i++)
		buf[i] = (char)(i * 7);
	int in = memfd_create("in", MFD_CLOEXEC);
	assert_true(in >= 0);
	assert_int_equal(write(in, buf, n), (ssize_t)n);

	assert_int_equal(lseek(in, 0, SEEK_SET), 0);
	OK(fx, wr_fs_write_from_fd(&fx->fs, "f", in, n, 0600, false, &fx->err));
	char *data = NULL;
	size_t len = 0;
	bool trunc;
	OK(fx, wr_fs_read(&fx->fs, "f", UINT64_MAX, &data, &len, &trunc, &fx->err));
	assert_int_equal(len, n);
	assert_memory_equal(data, buf, n);
	free(data);
	assert_int_equal(rlstat(fx, "f").st_uid, UID);
	assert_int_equal(rlstat(fx, "f").st_mode & 07777, 0600);

	/* one byte over the limit: EFBIG, the old content stays, no temp */
	OK(fx, write_str(fx, "g", "old", false));
	assert_int_equal(lseek(in, 0, SEEK_SET), 0);
	FAILS(fx, wr_fs_write_from_fd(&fx->fs, "g", in, n - 1, 0600, false, &fx->err), EFBIG);
	read_is(fx, "g", "old");
	assert_int_equal(lseek(in, 0, SEEK_SET), 0);
	FAILS(fx, wr_fs_write_from_fd(&fx->fs, "h", in, 1000, 0600, false, &fx->err), EFBIG);
	assert_false(rexists(fx, "h"));
	assert_int_equal(count_tmp_tree(fx->root), 0);
	close(in);
	free(buf);
}

static void test_stat_exists(void **state)
{
	struct fx *fx = *state;
	OK(fx, wr_fs_write(&fx->fs, "f", "12345", 5, 0640, false, &fx->err));
	OK(fx, wr_fs_mkdir(&fx->fs, "d", 0711, false, &fx->err));
	rsymlink(fx, "/etc/shadow", "l");
	rput(fx, "hostowned", "x"); /* owned by host root: below id_base */

	struct wr_fs_stat st;
	OK(fx, wr_fs_stat(&fx->fs, "f", &st, &fx->err));
	assert_int_equal(st.type, WR_FS_FILE);
	assert_int_equal(st.size, 5);
	assert_int_equal(st.mode, 0640);
	assert_int_equal(st.uid, 1000);
	assert_int_equal(st.gid, 1001);
	assert_true(st.mtime_ns > 0);
	assert_null(st.symlink_target);
	wr_fs_stat_free(&st);

	OK(fx, wr_fs_stat(&fx->fs, "/d/", &st, &fx->err));
	assert_int_equal(st.type, WR_FS_DIR);
	assert_int_equal(st.mode, 0711);
	assert_int_equal(st.uid, 1000);
	wr_fs_stat_free(&st);

	/* lstat semantics: the symlink itself, its target as text */
	OK(fx, wr_fs_stat(&fx->fs, "l", &st, &fx->err));
	assert_int_equal(st.type, WR_FS_SYMLINK);
	assert_non_null(st.symlink_target);
	assert_string_equal(st.symlink_target, "/etc/shadow");
	wr_fs_stat_free(&st);
	assert_null(st.symlink_target);

	OK(fx, wr_fs_stat(&fx->fs, "hostowned", &st, &fx->err));
	assert_int_equal(st.uid, 65534);
	assert_int_equal(st.gid, 65534);
	wr_fs_stat_free(&st);

	OK(fx, wr_fs_stat(&fx->fs, "/", &st, &fx->err));
	assert_int_equal(st.type, WR_FS_DIR);
	wr_fs_stat_free(&st);

	FAILS(fx, wr_fs_stat(&fx->fs, "nope", &st, &fx->err), ENOENT);
	FAILS(fx, wr_fs_stat(&fx->fs, "f/x", &st, &fx->err), ENOTDIR);
	FAILS(fx, wr_fs_stat(&fx->fs, "", &st, &fx->err), EINVAL);

	bool ex = false;
	OK(fx, wr_fs_exists(&fx->fs, "f", &ex, &fx->err));
	assert_true(ex);
	OK(fx, wr_fs_exists(&fx->fs, "l", &ex, &fx->err)); /* dangling inside: still there */
	assert_true(ex);
	OK(fx, wr_fs_exists(&fx->fs, "/", &ex, &fx->err));
	assert_true(ex);
	OK(fx, wr_fs_exists(&fx->fs, "nope", &ex, &fx->err));
	assert_false(ex);
	assert_null(fx->err);
	OK(fx, wr_fs_exists(&fx->fs, "f/x", &ex, &fx->err));
	assert_false(ex);
	/* the host file exists, the sandbox's does not */
	char p[PATH_MAX];
	pathf(p, "%s/secret", fx->host);
	OK(fx, wr_fs_exists(&fx->fs, p, &ex, &fx->err));
	assert_false(ex);
	FAILS(fx, wr_fs_exists(&fx->fs, "", &ex, &fx->err), EINVAL);
}

static void test_mkdir(void **state)
{
	struct fx *fx = *state;
	OK(fx, wr_fs_mkdir(&fx->fs, "d", 0777, false, &fx->err));
	struct stat st = rlstat(fx, "d");
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0777); /* exact: no umask */
	assert_int_equal(st.st_uid, UID);
	assert_int_equal(st.st_gid, GID);

	FAILS(fx, wr_fs_mkdir(&fx->fs, "d", 0755, false, &fx->err), EEXIST);
	OK(fx, wr_fs_mkdir(&fx->fs, "d", 0755, true, &fx->err));
	assert_int_equal(rlstat(fx, "d").st_mode & 07777, 0777); /* untouched */

	FAILS(fx, wr_fs_mkdir(&fx->fs, "p/q/r", 0750, false, &fx->err), ENOENT);
	OK(fx, wr_fs_mkdir(&fx->fs, "p/q/r", 0750, true, &fx->err));
	/* like mkdir -p -m: the last one gets mode, the parents 0755 */
	const char *made[] = {"p", "p/q", "p/q/r"};
	for (size_t i = 0; i < WR_ARRAY_SIZE(made); i++) {
		st = rlstat(fx, made[i]);
		assert_true(S_ISDIR(st.st_mode));
		assert_int_equal(st.st_uid, UID);
		assert_int_equal(st.st_gid, GID);
		assert_int_equal(st.st_mode & 07777, i == 2 ? 0750 : 0755);
	}

	rput(fx, "file", "x");
	FAILS(fx, wr_fs_mkdir(&fx->fs, "file", 0755, false, &fx->err), EEXIST);
	FAILS(fx, wr_fs_mkdir(&fx->fs, "file", 0755, true, &fx->err), EEXIST);
	FAILS(fx, wr_fs_mkdir(&fx->fs, "file/sub", 0755, false, &fx->err), ENOTDIR);
	FAILS(fx, wr_fs_mkdir(&fx->fs, "file/sub", 0755, true, &fx->err), ENOTDIR);
	FAILS(fx, wr_fs_mkdir(&fx->fs, "/", 0755, false, &fx->err), EEXIST);
	OK(fx, wr_fs_mkdir(&fx->fs, "/", 0755, true, &fx->err));
	FAILS(fx, wr_fs_mkdir(&fx->fs, "d/..", 0755, false, &fx->err), EINVAL);
	FAILS(fx, wr_fs_mkdir(&fx->fs, "d/.", 0755, true, &fx->err), EINVAL);
	FAILS(fx, wr_fs_mkdir(&fx->fs, "", 0755, true, &fx->err), EINVAL);

	/* through a symlink to a host dir: it dangles inside the root (like
	 * mkdir -p, a dangling symlink is not created through), and once its
	 * target exists inside, that is where the new dir lands */
	rsymlink(fx, fx->host, "hostlink");
	FAILS(fx, wr_fs_mkdir(&fx->fs, "hostlink/new", 0755, false, &fx->err), ENOENT);
	FAILS(fx, wr_fs_mkdir(&fx->fs, "hostlink/new", 0755, true, &fx->err), ENOENT);
	OK(fx, wr_fs_mkdir(&fx->fs, fx->host, 0755, true, &fx->err));
	OK(fx, wr_fs_mkdir(&fx->fs, "hostlink/new", 0755, true, &fx->err));
	char p[PATH_MAX];
	pathf(p, "%s%s/new", fx->root, fx->host);
	assert_true(lexists(p));
	host_intact(fx);
}

/* ---- list ------------------------------------------------------------------ */

#define MAX_SEEN 64
struct seen {
	int n;
	char path[MAX_SEEN][256];
	struct wr_fs_stat st[MAX_SEEN];
	char target[MAX_SEEN][64];
	int stop_after;
};

static int collect(void *ctx, const char *relpath, const struct wr_fs_stat *st)
{
	struct seen *s = ctx;
	if (s->n >= MAX_SEEN)
		return -ENOBUFS;
	snprintf(s->path[s->n], sizeof(s->path[0]), "%s", relpath);
	s->st[s->n] = *st;
	s->st[s->n].symlink_target = NULL;
	snprintf(s->target[s->n], sizeof(s->target[0]), "%s",
		 st->symlink_target ? st->symlink_target : "");
	s->n++;
	return s->stop_after && s->n >= s->stop_after ? 7 : 0;
}

static int find_seen(const struct seen *s, const char *path)
{
	for (int i = 0; i < s->n; i++)
		if (strcmp(s->path[i], path) == 0)
			return i;
	return -1;
}

static void test_list(void **state)
{
	struct fx *fx = *state;
	rput(fx, "a", "1");
	rmkdir(fx, "d");
	rput(fx, "d/b", "22");
	rmkdir(fx, "d/e");
	rput(fx, "d/e/c", "333");
	rsymlink(fx, "/", "toroot");
	rsymlink(fx, fx->host, "tohost");

	struct seen s = {0};
	OK(fx, wr_fs_list(&fx->fs, "/", 1, collect, &s, &fx->err));
	assert_int_equal(s.n, 4);
	assert_true(find_seen(&s, "a") >= 0);
	assert_true(find_seen(&s, "d") >= 0);
	int i = find_seen(&s, "toroot");
	assert_true(i >= 0);
	assert_int_equal(s.st[i].type, WR_FS_SYMLINK);
	assert_string_equal(s.target[i], "/");
	i = find_seen(&s, "tohost");
	assert_true(i >= 0);
	assert_string_equal(s.target[i], fx->host);

	memset(&s, 0, sizeof(s));
	OK(fx, wr_fs_list(&fx->fs, "/", 2, collect, &s, &fx->err));
	assert_int_equal(s.n, 6);
	assert_true(find_seen(&s, "d/b") >= 0);
	i = find_seen(&s, "d/e");
	assert_true(i >= 0);
	assert_int_equal(s.st[i].type, WR_FS_DIR);
	assert_int_equal(find_seen(&s, "d/e/c"), -1);

	/* deep: symlinks are reported, never followed (the host dir's
	 * "secret" and the root's own entries do not show up again) */
	memset(&s, 0, sizeof(s));
	OK(fx, wr_fs_list(&fx->fs, ".", WR_FS_LIST_MAX_DEPTH, collect, &s, &fx->err));
	assert_int_equal(s.n, 7);
	i = find_seen(&s, "d/e/c");
	assert_true(i >= 0);
	assert_int_equal(s.st[i].type, WR_FS_FILE);
	assert_int_equal(s.st[i].size, 3);
	for (i = 0; i < s.n; i++)
		assert_null(strstr(s.path[i], "secret"));

	/* relative to the listed dir, which may be reached through a symlink */
	memset(&s, 0, sizeof(s));
	OK(fx, wr_fs_list(&fx->fs, "d", 2, collect, &s, &fx->err));
	assert_int_equal(s.n, 3);
	assert_true(find_seen(&s, "e/c") >= 0);
	memset(&s, 0, sizeof(s));
	OK(fx, wr_fs_list(&fx->fs, "toroot/d/e", 1, collect, &s, &fx->err));
	assert_int_equal(s.n, 1);
	assert_string_equal(s.path[0], "c");
	FAILS(fx, wr_fs_list(&fx->fs, "tohost", 1, collect, &s, &fx->err), ENOENT);

	/* the callback stops the walk with its own value */
	memset(&s, 0, sizeof(s));
	s.stop_after = 2;
	assert_int_equal(wr_fs_list(&fx->fs, "/", 3, collect, &s, &fx->err), 7);
	assert_int_equal(s.n, 2);
	assert_null(fx->err);

	/* bounds */
	FAILS(fx, wr_fs_list(&fx->fs, "/", 0, collect, &s, &fx->err), EINVAL);
	FAILS(fx, wr_fs_list(&fx->fs, "/", -1, collect, &s, &fx->err), EINVAL);
	FAILS(fx, wr_fs_list(&fx->fs, "/", WR_FS_LIST_MAX_DEPTH + 1, collect, &s, &fx->err),
	      EINVAL);
	FAILS(fx, wr_fs_list(&fx->fs, "a", 1, collect, &s, &fx->err), ENOTDIR);
	FAILS(fx, wr_fs_list(&fx->fs, "nope", 1, collect, &s, &fx->err), ENOENT);
	FAILS(fx, wr_fs_list(&fx->fs, "", 1, collect, &s, &fx->err), EINVAL);
}

static int count_cb(void *ctx, const char *relpath, const struct wr_fs_stat *st)
{
	(void)relpath;
	(void)st;
	(*(unsigned long *)ctx)++;
	return 0;
}

static void test_list_entry_limit(void **state)
{
	struct fx *fx = *state;
	rmkdir(fx, "many");
	char p[PATH_MAX];
	pathf(p, "%s/many", fx->root);
	int dfd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	assert_true(dfd >= 0);
	for (int i = 0; i < WR_FS_LIST_MAX_ENTRIES; i++) {
		char name[32];
		snprintf(name, sizeof(name), "f%d", i);
		int fd = openat(dfd, name, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
		assert_true(fd >= 0);
		close(fd);
	}
	unsigned long n = 0;
	OK(fx, wr_fs_list(&fx->fs, "many", 1, count_cb, &n, &fx->err));
	assert_int_equal(n, WR_FS_LIST_MAX_ENTRIES);
	int fd = openat(dfd, "one-more", O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	close(fd);
	close(dfd);
	n = 0;
	FAILS(fx, wr_fs_list(&fx->fs, "many", 1, count_cb, &n, &fx->err), E2BIG);
	assert_int_equal(n, WR_FS_LIST_MAX_ENTRIES);
}

/* ---- remove / rename --------------------------------------------------- */

static void test_remove(void **state)
{
	struct fx *fx = *state;
	rput(fx, "f", "x");
	OK(fx, wr_fs_remove(&fx->fs, "f", false, &fx->err));
	assert_false(rexists(fx, "f"));
	FAILS(fx, wr_fs_remove(&fx->fs, "f", false, &fx->err), ENOENT);

	rmkdir(fx, "empty");
	OK(fx, wr_fs_remove(&fx->fs, "empty/", false, &fx->err));
	assert_false(rexists(fx, "empty"));

	/* a tree with links to host dirs, absolute and relative */
	rmkdir(fx, "tree");
	rput(fx, "tree/f", "1");
	rmkdir(fx, "tree/sub");
	rput(fx, "tree/sub/g", "2");
	rmkdir(fx, "tree/sub/deeper");
	rsymlink(fx, fx->host, "tree/hostlink");
	rsymlink(fx, "../../../host", "tree/sub/rellink");
	char victim[PATH_MAX];
	pathf(victim, "%s/victim", fx->host);
	rsymlink(fx, victim, "tree/sub/deeper/victimlink");
	FAILS(fx, wr_fs_remove(&fx->fs, "tree", false, &fx->err), ENOTEMPTY);
	assert_true(rexists(fx, "tree/f"));
	OK(fx, wr_fs_remove(&fx->fs, "tree", true, &fx->err));
	assert_false(rexists(fx, "tree"));
	host_intact(fx);

	/* a symlink to a dir: the link goes, the dir stays */
	rmkdir(fx, "keep");
	rput(fx, "keep/k", "k");
	rsymlink(fx, "keep", "kl");
	rsymlink(fx, "/keep", "kl2");
	OK(fx, wr_fs_remove(&fx->fs, "kl", true, &fx->err));
	OK(fx, wr_fs_remove(&fx->fs, "kl2", false, &fx->err));
	assert_false(rexists(fx, "kl"));
	assert_false(rexists(fx, "kl2"));
	assert_string_equal(rslurp(fx, "keep/k"), "k");
	/* through a symlinked parent: removes inside the root only */
	rsymlink(fx, fx->host, "hl");
	FAILS(fx, wr_fs_remove(&fx->fs, "hl/secret", false, &fx->err), ENOENT);
	FAILS(fx, wr_fs_remove(&fx->fs, "hl/victim", true, &fx->err), ENOENT);
	host_intact(fx);

	FAILS(fx, wr_fs_remove(&fx->fs, "/", true, &fx->err), EBUSY);
	FAILS(fx, wr_fs_remove(&fx->fs, ".", true, &fx->err), EBUSY);
	FAILS(fx, wr_fs_remove(&fx->fs, "keep/.", true, &fx->err), EINVAL);
	FAILS(fx, wr_fs_remove(&fx->fs, "keep/..", true, &fx->err), EINVAL);
	FAILS(fx, wr_fs_remove(&fx->fs, "", true, &fx->err), EINVAL);
	assert_true(rexists(fx, "keep/k"));
}

static void test_remove_depth(void **state)
{
	struct fx *fx = *state;
	/* nested deeper than WR_FS_REMOVE_MAX_DEPTH: ELOOP; within: fine */
	const char *names[] = {"shallow", "deep"};
	int levels[] = {WR_FS_REMOVE_MAX_DEPTH - 1, WR_FS_REMOVE_MAX_DEPTH + 5};
	for (int t = 0; t < 2; t++) {
		rmkdir(fx, names[t]);
		char p[PATH_MAX];
		pathf(p, "%s/%s", fx->root, names[t]);
		int fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		assert_true(fd >= 0);
		for (int i = 0; i < levels[t]; i++) {
			assert_int_equal(mkdirat(fd, "d", 0755), 0);
			int next = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			assert_true(next >= 0);
			close(fd);
			fd = next;
		}
		close(fd);
	}
	OK(fx, wr_fs_remove(&fx->fs, "shallow", true, &fx->err));
	assert_false(rexists(fx, "shallow"));
	FAILS(fx, wr_fs_remove(&fx->fs, "deep", true, &fx->err), ELOOP);
}

static void test_rename(void **state)
{
	struct fx *fx = *state;
	rput(fx, "a", "A");
	OK(fx, wr_fs_rename(&fx->fs, "a", "b", &fx->err));
	assert_false(rexists(fx, "a"));
	read_is(fx, "b", "A");
	rput(fx, "c", "C");
	OK(fx, wr_fs_rename(&fx->fs, "/b", "/c", &fx->err)); /* replaces */
	read_is(fx, "c", "A");
	rmkdir(fx, "d");
	OK(fx, wr_fs_rename(&fx->fs, "c", "d/c", &fx->err));
	read_is(fx, "d/c", "A");
	FAILS(fx, wr_fs_rename(&fx->fs, "nope", "x", &fx->err), ENOENT);
	FAILS(fx, wr_fs_rename(&fx->fs, "/", "x", &fx->err), EBUSY);
	FAILS(fx, wr_fs_rename(&fx->fs, "d", "/", &fx->err), EBUSY);
	FAILS(fx, wr_fs_rename(&fx->fs, "d/..", "x", &fx->err), EINVAL);
	FAILS(fx, wr_fs_rename(&fx->fs, "d", "", &fx->err), EINVAL);
	FAILS(fx, wr_fs_rename(&fx->fs, "d", "d/c/x", &fx->err), ENOTDIR);

	/* into a symlinked dir pointing at the host: stays inside */
	rsymlink(fx, fx->host, "out");
	rsymlink(fx, "../../../../host", "relout");
	rput(fx, "f", "F");
	FAILS(fx, wr_fs_rename(&fx->fs, "f", "out/f", &fx->err), ENOENT);
	FAILS(fx, wr_fs_rename(&fx->fs, "f", "relout/f", &fx->err), ENOENT);
	FAILS(fx, wr_fs_rename(&fx->fs, "out/secret", "stolen", &fx->err), ENOENT);
	OK(fx, wr_fs_mkdir(&fx->fs, fx->host, 0755, true, &fx->err));
	OK(fx, wr_fs_rename(&fx->fs, "f", "out/f", &fx->err));
	char p[PATH_MAX];
	pathf(p, "%s%s/f", fx->root, fx->host);
	assert_string_equal(slurp(p), "F");
	/* renaming the link moves the link, not the host dir */
	OK(fx, wr_fs_rename(&fx->fs, "out", "out2", &fx->err));
	struct stat st = rlstat(fx, "out2");
	assert_true(S_ISLNK(st.st_mode));
	host_intact(fx);
}

/* ---- escapes ------------------------------------------------------------- */

static void test_dotdot_and_absolute(void **state)
{
	struct fx *fx = *state;
	rmkdir(fx, "etc");
	rput(fx, "etc/passwd", "SANDBOX-PASSWD");
	rmkdir(fx, "a");
	read_is(fx, "../../etc/passwd", "SANDBOX-PASSWD");
	read_is(fx, "/etc/passwd", "SANDBOX-PASSWD");
	read_is(fx, "a/../../etc/passwd", "SANDBOX-PASSWD");
	read_is(fx, "/../../../../../../etc/passwd", "SANDBOX-PASSWD");
	read_is(fx, "etc/../etc/./passwd", "SANDBOX-PASSWD");

	/* absent in the root: ENOENT, though the host has one */
	assert_true(lexists("/etc/passwd"));
	char p[PATH_MAX];
	pathf(p, "%s/etc/passwd", fx->root);
	assert_int_equal(unlink(p), 0);
	FAILS(fx, read_err(fx, "/etc/passwd"), ENOENT);
	assert_int_equal(read_err(fx, "/etc/shadow"), -ENOENT);
	assert_string_equal(fx->err->msg, "read /etc/shadow: No such file or directory");
	wr_err_free(&fx->err);
	FAILS(fx, read_err(fx, "../../../etc/passwd"), ENOENT);

	/* the host file by its absolute path: not reachable */
	pathf(p, "%s/secret", fx->host);
	FAILS(fx, read_err(fx, p), ENOENT);
	pathf(p, "../../host/secret");
	FAILS(fx, read_err(fx, p), ENOENT);

	/* writes by such paths land inside */
	OK(fx, write_str(fx, "../../../etc/passwd", "W", false));
	assert_string_equal(rslurp(fx, "etc/passwd"), "W");
	FAILS(fx, write_str(fx, "../host/new", "W", false), ENOENT);
	host_intact(fx);
}

static void test_symlink_to_host_files(void **state)
{
	struct fx *fx = *state;
	rmkdir(fx, "etc");
	rput(fx, "etc/shadow", "SANDBOX-SHADOW");
	rsymlink(fx, "/etc/shadow", "evil");
	rsymlink(fx, "/etc", "etcl");
	rsymlink(fx, "../../../../../../../etc/shadow", "evilrel");
	rsymlink(fx, "evil", "chain");
	read_is(fx, "evil", "SANDBOX-SHADOW");
	read_is(fx, "etcl/shadow", "SANDBOX-SHADOW");
	read_is(fx, "evilrel", "SANDBOX-SHADOW");
	read_is(fx, "chain", "SANDBOX-SHADOW");

	char p[PATH_MAX];
	pathf(p, "%s/secret", fx->host);
	rsymlink(fx, p, "hostfile");
	FAILS(fx, read_err(fx, "hostfile"), ENOENT);
	rsymlink(fx, fx->host, "hostdir");
	FAILS(fx, read_err(fx, "hostdir/secret"), ENOENT);
	uint64_t w;
	FAILS(fx, wr_fs_read_to_fd(&fx->fs, "hostfile", 1, 100, &w, &fx->err), ENOENT);

	/* the marker inside the root is what a host-looking path reads */
	OK(fx, wr_fs_mkdir(&fx->fs, fx->host, 0755, true, &fx->err));
	pathf(p, "%s%s/secret", fx->root, fx->host);
	put_file(p, "SANDBOX-SECRET");
	read_is(fx, "hostfile", "SANDBOX-SECRET");
	read_is(fx, "hostdir/secret", "SANDBOX-SECRET");

	/* symlink loops */
	rsymlink(fx, "loop2", "loop1");
	rsymlink(fx, "loop1", "loop2");
	FAILS(fx, read_err(fx, "loop1"), ELOOP);
	host_intact(fx);
}

static void test_magic_links(void **state)
{
	struct fx *fx = *state;
	/* a fake root with a plain /proc dir: the link stays inside */
	rsymlink(fx, "/proc/self/root", "me");
	FAILS(fx, read_err(fx, "me/etc/passwd"), ENOENT);

	/* procfs as the root: its magic links are refused */
	int proc = open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC);
	assert_true(proc >= 0);
	struct wr_fs pfs = {.root_fd = proc, .id_base = ID_BASE, .uid = UID, .gid = GID};
	char *data = NULL;
	size_t len;
	bool trunc;
	FAILS(fx, wr_fs_read(&pfs, "self/root/etc/passwd", 100, &data, &len, &trunc, &fx->err),
	      ELOOP);
	FAILS(fx,
	      wr_fs_read(&pfs, "thread-self/root/etc/passwd", 100, &data, &len, &trunc, &fx->err),
	      ELOOP);
	FAILS(fx, wr_fs_read(&pfs, "self/cwd/x", 100, &data, &len, &trunc, &fx->err), ELOOP);
	char fdpath[64];
	snprintf(fdpath, sizeof(fdpath), "self/fd/%d", fx->root_fd);
	FAILS(fx, wr_fs_read(&pfs, fdpath, 100, &data, &len, &trunc, &fx->err), ELOOP);
	struct seen s = {0};
	FAILS(fx, wr_fs_list(&pfs, "self/root", 1, collect, &s, &fx->err), ELOOP);
	FAILS(fx, wr_fs_write(&pfs, "self/root/tmp/x", "x", 1, 0644, false, &fx->err), ELOOP);
	close(proc);
	assert_null(data);

	/* procfs mounted in the root: a symlink to it is not entered */
	if (!g_private)
		skip();
	rmkdir(fx, "proc");
	char p[PATH_MAX];
	pathf(p, "%s/proc", fx->root);
	fx_mount(fx, "proc", p, "proc", NULL);
	FAILS(fx, read_err(fx, "me/etc/passwd"), EXDEV);
	FAILS(fx, read_err(fx, "/proc/self/status"), EXDEV);
	FAILS(fx, read_err(fx, "/proc/self/root/etc/passwd"), EXDEV);
}

static void test_special_files(void **state)
{
	struct fx *fx = *state;
	char p[PATH_MAX];
	pathf(p, "%s/fifo", fx->root);
	assert_int_equal(mkfifo(p, 0666), 0);
	pathf(p, "%s/null", fx->root);
	assert_int_equal(mknod(p, S_IFCHR | 0666, makedev(1, 3)), 0);
	pathf(p, "%s/loop", fx->root);
	assert_int_equal(mknod(p, S_IFBLK | 0600, makedev(7, 0)), 0);
	rsymlink(fx, "/fifo", "fifolink");
	int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(sock >= 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	pathf(p, "%s/sock", fx->root);
	assert_true(strlen(p) < sizeof(sa.sun_path));
	memcpy(sa.sun_path, p, strlen(p) + 1);
	assert_int_equal(bind(sock, (struct sockaddr *)&sa, sizeof(sa)), 0);
	rmkdir(fx, "dir");

	/* nothing may block: a hung open on the FIFO kills the test */
	alarm(10);
	struct {
		const char *path, *type;
	} cases[] = {{"fifo", "fifo"},
		     {"fifolink", "fifo"},
		     {"null", "char device"},
		     {"loop", "block device"},
		     {"sock", "socket"}};
	for (size_t i = 0; i < WR_ARRAY_SIZE(cases); i++) {
		assert_int_equal(read_err(fx, cases[i].path), -EINVAL);
		assert_int_equal(fx->err->errnum, EINVAL);
		if (strstr(fx->err->msg, cases[i].type) == NULL)
			fail_msg("%s: message \"%s\" does not name \"%s\"", cases[i].path,
				 fx->err->msg, cases[i].type);
		wr_err_free(&fx->err);
		uint64_t w;
		FAILS(fx, wr_fs_read_to_fd(&fx->fs, cases[i].path, 1, 10, &w, &fx->err), EINVAL);
	}
	FAILS(fx, read_err(fx, "dir"), EISDIR);
	FAILS(fx, read_err(fx, "/"), EISDIR);
	alarm(0);
	close(sock);

	/* writing over a FIFO replaces the entry, never opens it */
	alarm(10);
	OK(fx, write_str(fx, "fifo", "now a file", false));
	alarm(0);
	read_is(fx, "fifo", "now a file");
}

static void test_write_parent_symlink(void **state)
{
	struct fx *fx = *state;
	rsymlink(fx, fx->host, "out");
	rsymlink(fx, "../../host", "rel");
	rsymlink(fx, "/", "top");
	FAILS(fx, write_str(fx, "out/new", "x", false), ENOENT);
	FAILS(fx, write_str(fx, "out/secret", "pwned", false), ENOENT);
	FAILS(fx, write_str(fx, "rel/new", "x", false), ENOENT);
	/* parents are not made through a dangling symlink (mkdir -p) */
	FAILS(fx, write_str(fx, "out/new", "x", true), ENOENT);
	FAILS(fx, write_str(fx, "rel/new", "x", true), ENOENT);
	host_intact(fx);

	/* the links' targets made inside the root: that is where writes go */
	OK(fx, wr_fs_mkdir(&fx->fs, fx->host, 0755, true, &fx->err));
	OK(fx, wr_fs_mkdir(&fx->fs, "host", 0755, false, &fx->err));
	OK(fx, write_str(fx, "out/new", "in", true));
	OK(fx, write_str(fx, "out/secret", "in", true));
	OK(fx, write_str(fx, "rel/new2", "in2", true));
	OK(fx, write_str(fx, "top/t", "t", false));
	char p[PATH_MAX];
	pathf(p, "%s%s/new", fx->root, fx->host);
	assert_string_equal(slurp(p), "in");
	assert_string_equal(rslurp(fx, "host/new2"), "in2");
	assert_string_equal(rslurp(fx, "t"), "t");
	host_intact(fx);
}

static void test_write_final_symlink(void **state)
{
	struct fx *fx = *state;
	rput(fx, "target", "ORIG");
	rsymlink(fx, "target", "link");
	OK(fx, write_str(fx, "link", "NEW", false));
	struct stat st = rlstat(fx, "link");
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_uid, UID);
	assert_string_equal(rslurp(fx, "link"), "NEW");
	assert_string_equal(rslurp(fx, "target"), "ORIG");

	char p[PATH_MAX];
	pathf(p, "%s/secret", fx->host);
	rsymlink(fx, p, "hostlink");
	OK(fx, write_str(fx, "hostlink", "NEW", false));
	assert_true(S_ISREG(rlstat(fx, "hostlink").st_mode));
	rsymlink(fx, "/nonexistent", "dangling");
	OK(fx, write_str(fx, "dangling", "D", false));
	assert_true(S_ISREG(rlstat(fx, "dangling").st_mode));
	assert_false(rexists(fx, "nonexistent"));
	assert_false(lexists("/nonexistent"));
	/* a symlink to a directory is replaced too, the dir untouched */
	rmkdir(fx, "dir");
	rsymlink(fx, "dir", "dirlink");
	OK(fx, write_str(fx, "dirlink", "F", false));
	assert_true(S_ISREG(rlstat(fx, "dirlink").st_mode));
	assert_true(S_ISDIR(rlstat(fx, "dir").st_mode));
	assert_int_equal(count_names(fx->root, ".wr-tmp-"), 0);
	host_intact(fx);
}

static void test_write_bad_targets(void **state)
{
	struct fx *fx = *state;
	rmkdir(fx, "d");
	rput(fx, "f", "x");
	FAILS(fx, write_str(fx, "d", "x", false), EISDIR);
	FAILS(fx, write_str(fx, "f/", "x", false), EISDIR);
	FAILS(fx, write_str(fx, "/", "x", false), EISDIR);
	FAILS(fx, write_str(fx, ".", "x", true), EISDIR);
	FAILS(fx, write_str(fx, "d/..", "x", false), EINVAL);
	FAILS(fx, write_str(fx, "d/.", "x", false), EINVAL);
	FAILS(fx, write_str(fx, "", "x", false), EINVAL);
	FAILS(fx, write_str(fx, "f/x", "x", false), ENOTDIR);
	FAILS(fx, write_str(fx, "f/x/y", "x", true), ENOTDIR);
	FAILS(fx, wr_fs_write(&fx->fs, NULL, "x", 1, 0644, false, &fx->err), EINVAL);
	assert_true(S_ISDIR(rlstat(fx, "d").st_mode));
	assert_string_equal(rslurp(fx, "f"), "x");
	assert_int_equal(count_tmp_tree(fx->root), 0);
}

static void test_names_too_long(void **state)
{
	struct fx *fx = *state;
	char name[NAME_MAX + 2];
	memset(name, 'n', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0'; /* 256 bytes */
	char *data = NULL;
	size_t len;
	bool trunc, ex;
	struct wr_fs_stat st;
	struct seen s = {0};
	FAILS(fx, wr_fs_read(&fx->fs, name, 10, &data, &len, &trunc, &fx->err), ENAMETOOLONG);
	FAILS(fx, write_str(fx, name, "x", true), ENAMETOOLONG);
	FAILS(fx, wr_fs_stat(&fx->fs, name, &st, &fx->err), ENAMETOOLONG);
	FAILS(fx, wr_fs_exists(&fx->fs, name, &ex, &fx->err), ENAMETOOLONG);
	FAILS(fx, wr_fs_mkdir(&fx->fs, name, 0755, true, &fx->err), ENAMETOOLONG);
	FAILS(fx, wr_fs_remove(&fx->fs, name, true, &fx->err), ENAMETOOLONG);
	FAILS(fx, wr_fs_list(&fx->fs, name, 1, collect, &s, &fx->err), ENAMETOOLONG);
	FAILS(fx, wr_fs_rename(&fx->fs, "a", name, &fx->err), ENAMETOOLONG);
	char mid[PATH_MAX];
	pathf(mid, "a/%s/b", name);
	FAILS(fx, write_str(fx, mid, "x", true), ENAMETOOLONG);
	assert_false(rexists(fx, "a"));

	/* exactly NAME_MAX: fine, temp file name included */
	name[NAME_MAX] = '\0';
	OK(fx, write_str(fx, name, "max", false));
	read_is(fx, name, "max");
	OK(fx, write_str(fx, name, "again", false));
	read_is(fx, name, "again");

	/* whole path: PATH_MAX - 1 bytes pass the check, PATH_MAX do not */
	char *longp = malloc(PATH_MAX + 1);
	assert_non_null(longp);
	for (int i = 0; i < PATH_MAX; i += 2)
		memcpy(longp + i, "a/", 2);
	longp[PATH_MAX] = '\0';
	FAILS(fx, wr_fs_stat(&fx->fs, longp, &st, &fx->err), ENAMETOOLONG);
	FAILS(fx, write_str(fx, longp, "x", true), ENAMETOOLONG);
	longp[PATH_MAX - 1] = '\0';
	FAILS(fx, wr_fs_stat(&fx->fs, longp, &st, &fx->err), ENOENT);
	/* messages cut long paths */
	memset(longp, 'z', PATH_MAX);
	longp[PATH_MAX] = '\0';
	FAILS(fx, read_err(fx, longp), ENAMETOOLONG);
	free(longp);
}

/* ---- mounts ------------------------------------------------------------- */

static void test_nospc(void **state)
{
	struct fx *fx = *state;
	char small[PATH_MAX];
	pathf(small, "%s/small", fx->dir);
	assert_int_equal(mkdir(small, 0755), 0);
	fx_mount(fx, "wr-small", small, "tmpfs", "size=1m");
	int fd = open(small, O_PATH | O_DIRECTORY | O_CLOEXEC);
	assert_true(fd >= 0);
	struct wr_fs sfs = {.root_fd = fd, .id_base = ID_BASE, .uid = UID, .gid = GID};

	size_t n = 2 << 20;
	char *big = malloc(n);
	assert_non_null(big);
	memset(big, 'B', n);
	OK(fx, wr_fs_write(&sfs, "keep", "ok", 2, 0644, false, &fx->err));
	FAILS(fx, wr_fs_write(&sfs, "big", big, n, 0644, false, &fx->err), ENOSPC);
	assert_int_equal(count_names(small, ".wr-tmp-"), 0);
	char p[PATH_MAX];
	pathf(p, "%s/big", small);
	assert_false(lexists(p));
	assert_int_equal(wr_fs_write(&sfs, "big", big, n, 0644, false, &fx->err), -ENOSPC);
	assert_string_equal(fx->err->msg, "write big: No space left on device");
	wr_err_free(&fx->err);

	/* a failed replace leaves the old file */
	FAILS(fx, wr_fs_write(&sfs, "keep", big, n, 0644, false, &fx->err), ENOSPC);
	pathf(p, "%s/keep", small);
	assert_string_equal(slurp(p), "ok");

	int in = memfd_create("in", MFD_CLOEXEC);
	assert_true(in >= 0);
	assert_int_equal(write(in, big, n), (ssize_t)n);
	assert_int_equal(lseek(in, 0, SEEK_SET), 0);
	FAILS(fx, wr_fs_write_from_fd(&sfs, "stream", in, UINT64_MAX, 0644, true, &fx->err),
	      ENOSPC);
	close(in);
	assert_int_equal(count_names(small, ".wr-tmp-"), 0);
	assert_int_equal(count_names(small, ""), 1);

	/* and the space is back */
	OK(fx, wr_fs_write(&sfs, "after", big, 512 * 1024, 0644, false, &fx->err));
	close(fd);
	free(big);
}

static void test_no_xdev(void **state)
{
	struct fx *fx = *state;
	rmkdir(fx, "mnt");
	char p[PATH_MAX];
	pathf(p, "%s/mnt", fx->root);
	fx_mount(fx, "wr-inner", p, "tmpfs", "size=1m");
	rput(fx, "mnt/inner", "INNER");
	rsymlink(fx, "/mnt", "ml");
	rput(fx, "plain", "P");

	FAILS(fx, read_err(fx, "mnt/inner"), EXDEV);
	FAILS(fx, read_err(fx, "ml/inner"), EXDEV);
	FAILS(fx, write_str(fx, "mnt/new", "x", false), EXDEV);
	FAILS(fx, write_str(fx, "ml/sub/new", "x", true), EXDEV);
	struct wr_fs_stat st;
	FAILS(fx, wr_fs_stat(&fx->fs, "mnt", &st, &fx->err), EXDEV);
	FAILS(fx, wr_fs_stat(&fx->fs, "mnt/inner", &st, &fx->err), EXDEV);
	FAILS(fx, wr_fs_mkdir(&fx->fs, "mnt/d", 0755, false, &fx->err), EXDEV);
	FAILS(fx, wr_fs_rename(&fx->fs, "mnt/inner", "stolen", &fx->err), EXDEV);
	FAILS(fx, wr_fs_rename(&fx->fs, "plain", "mnt/plain", &fx->err), EXDEV);
	FAILS(fx, wr_fs_remove(&fx->fs, "mnt/inner", false, &fx->err), EXDEV);
	FAILS(fx, wr_fs_remove(&fx->fs, "mnt", true, &fx->err), EXDEV);
	FAILS(fx, wr_fs_remove(&fx->fs, "mnt", false, &fx->err), EBUSY);
	struct seen s = {0};
	FAILS(fx, wr_fs_list(&fx->fs, "mnt", 1, collect, &s, &fx->err), EXDEV);

	/* listed as an entry, never entered */
	memset(&s, 0, sizeof(s));
	OK(fx, wr_fs_list(&fx->fs, "/", 5, collect, &s, &fx->err));
	assert_true(find_seen(&s, "mnt") >= 0);
	assert_int_equal(find_seen(&s, "mnt/inner"), -1);
	/* a recursive remove of the parent stops at the mount */
	rmkdir(fx, "outer");
	pathf(p, "%s/outer", fx->root);
	rput(fx, "outer/f", "f");
	rmkdir(fx, "outer/m");
	pathf(p, "%s/outer/m", fx->root);
	fx_mount(fx, "wr-inner2", p, "tmpfs", "size=1m");
	rput(fx, "outer/m/keep", "K");
	FAILS(fx, wr_fs_remove(&fx->fs, "outer", true, &fx->err), EXDEV);
	assert_string_equal(rslurp(fx, "outer/m/keep"), "K");
	assert_string_equal(rslurp(fx, "mnt/inner"), "INNER");
}

/* ---- the race ------------------------------------------------------------ */

/* The sandbox's side: swap a real directory with a symlink to the host dir
 * and another with a symlink to "/", as fast as it can. */
static void *attacker(void *arg)
{
	struct fx *fx = arg;
	while (!atomic_load(&fx->stop)) {
		renameat2(fx->attack_fd, "d", fx->attack_fd, "s", RENAME_EXCHANGE);
		renameat2(fx->attack_fd, "e", fx->attack_fd, "t", RENAME_EXCHANGE);
		atomic_fetch_add(&fx->swaps, 1);
	}
	return NULL;
}

static void read_sandboxed(struct fx *fx, const char *path, int *ok)
{
	char *data = NULL;
	size_t len = 0;
	bool trunc;
	if (wr_fs_read(&fx->fs, path, 4096, &data, &len, &trunc, &fx->err) == 0) {
		if (strncmp(data, "SANDBOX", 7) != 0)
			fail_msg("read %s returned \"%s\"", path, data);
		(*ok)++;
	} else {
		assert_non_null(fx->err);
		assert_null(strstr(fx->err->msg, HOST_SECRET));
	}
	free(data);
	wr_err_free(&fx->err);
}

/* Names that exist on the host but never inside the root. */
static int host_name_cb(void *ctx, const char *relpath, const struct wr_fs_stat *st)
{
	(void)ctx;
	(void)st;
	static const char *host_only[] = {"keep", "usr", "proc", "sys", "boot", "var"};
	const char *last = strrchr(relpath, '/');
	last = last ? last + 1 : relpath;
	for (size_t i = 0; i < WR_ARRAY_SIZE(host_only); i++)
		if (strcmp(last, host_only[i]) == 0)
			fail_msg("listed the host's %s", relpath);
	return 0;
}

static void test_race_swap(void **state)
{
	struct fx *fx = *state;
	char race_name[64];
	snprintf(race_name, sizeof(race_name), "wr-fsops-race-%d", (int)getpid());
	char host_race[PATH_MAX];
	pathf(host_race, "/%s", race_name);
	assert_false(lexists(host_race));

	rmkdir(fx, "d");
	rput(fx, "d/secret", "SANDBOX-D");
	rsymlink(fx, fx->host, "s");
	rmkdir(fx, "e");
	rmkdir(fx, "e/etc");
	rput(fx, "e/etc/passwd", "SANDBOX-E");
	rmkdir(fx, "etc");
	rput(fx, "etc/passwd", "SANDBOX-ROOT");
	rsymlink(fx, "/", "t");
	/* s's target made inside the root, with decoys named like the host's */
	OK(fx, wr_fs_mkdir(&fx->fs, fx->host, 0755, true, &fx->err));
	char p[PATH_MAX];
	pathf(p, "%s/victim", fx->host);
	OK(fx, wr_fs_mkdir(&fx->fs, p, 0755, false, &fx->err));
	pathf(p, "%s/secret", fx->host);
	OK(fx, write_str(fx, p, "SANDBOX-HS", false));

	fx->attack_fd = open(fx->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	assert_true(fx->attack_fd >= 0);
	assert_int_equal(pthread_create(&fx->attacker, NULL, attacker, fx), 0);
	fx->attacking = true;

	int reads = 0;
	char wname[PATH_MAX];
	for (int i = 0; i < RACE_ROUNDS; i++) {
		read_sandboxed(fx, "d/secret", &reads);
		read_sandboxed(fx, "s/secret", &reads);
		read_sandboxed(fx, "d/../s/secret", &reads);
		read_sandboxed(fx, "e/etc/passwd", &reads);
		read_sandboxed(fx, "t/etc/passwd", &reads);
		read_sandboxed(fx, "e/../t/etc/passwd", &reads);
		read_sandboxed(fx, "s/victim/keep", &reads);
		read_sandboxed(fx, "stolen", &reads);

		snprintf(wname, sizeof(wname), "d/%s", race_name);
		write_str(fx, wname, "SANDBOX-W", false);
		wr_err_free(&fx->err);
		snprintf(wname, sizeof(wname), "s/%s", race_name);
		write_str(fx, wname, "SANDBOX-W", i % 2);
		wr_err_free(&fx->err);
		snprintf(wname, sizeof(wname), "t/%s", race_name);
		write_str(fx, wname, "SANDBOX-W", false);
		wr_err_free(&fx->err);
		snprintf(wname, sizeof(wname), "e/%s", race_name);
		write_str(fx, wname, "SANDBOX-W", false);
		wr_err_free(&fx->err);
		wr_fs_mkdir(&fx->fs, "s/victim/sub", 0755, true, &fx->err);
		wr_err_free(&fx->err);
		wr_fs_remove(&fx->fs, "s/victim", true, &fx->err);
		wr_err_free(&fx->err);
		wr_fs_remove(&fx->fs, "d/secret-copy", false, &fx->err);
		wr_err_free(&fx->err);
		wr_fs_rename(&fx->fs, "s/secret", "stolen", &fx->err);
		wr_err_free(&fx->err);
		wr_fs_rename(&fx->fs, "stolen", "s/secret", &fx->err);
		wr_err_free(&fx->err);
		wr_fs_list(&fx->fs, "s", 3, host_name_cb, NULL, &fx->err);
		wr_err_free(&fx->err);
		wr_fs_list(&fx->fs, "t", 2, host_name_cb, NULL, &fx->err);
		wr_err_free(&fx->err);
	}
	atomic_store(&fx->stop, true);
	pthread_join(fx->attacker, NULL);
	fx->attacking = false;

	assert_true(atomic_load(&fx->swaps) > 0);
	assert_true(reads > 0);
	/* nothing outside the root was read, created, moved or removed */
	host_intact(fx);
	if (lexists(host_race)) {
		unlink(host_race);
		fail_msg("created %s on the host", host_race);
	}
	pathf(p, "%s/%s", fx->dir, race_name);
	assert_false(lexists(p));
	assert_int_equal(count_names(fx->dir, ""), 2); /* root, host */
	/* and the sandbox's own files are where the sandbox put them */
	assert_int_equal(count_tmp_tree(fx->root), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_write_read, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_read_limits, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_write_from_fd, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_stat_exists, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_mkdir, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_list, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_list_entry_limit, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_remove, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_remove_depth, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_rename, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_dotdot_and_absolute, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_symlink_to_host_files, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_magic_links, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_special_files, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_write_parent_symlink, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_write_final_symlink, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_write_bad_targets, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_names_too_long, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_nospc, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_no_xdev, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_race_swap, setup, teardown),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
