/* warren cp: copy files and directories between this host and a sandbox.
 *
 *   warren cp LOCAL SANDBOX:PATH     upload
 *   warren cp SANDBOX:PATH LOCAL     download
 *
 * A destination that is an existing directory receives the source under its
 * own name (as cp does). Directories travel as tar streams made and
 * unpacked by the system's tar: the daemon validates every entry of an
 * upload, and GNU tar refuses absolute names, `..` and writes through
 * symlinks of the archive on download. "-" is standard input or output. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/cleanup.h"

static void cp_usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: warren cp [options] LOCAL SANDBOX:PATH\n"
	    "       warren cp [options] SANDBOX:PATH LOCAL\n\n"
	    "Copies files and directories (recursively). LOCAL may be '-' for\n"
	    "standard input or output (a directory is written as a tar stream).\n\n" CLI_CONN_HELP);
}

/* Last path component, ignoring trailing slashes ("" for "/"). */
static char *last_name(const char *path)
{
	_cleanup_free_ char *copy = strdup(path);
	if (copy == NULL)
		return NULL;
	size_t n = strlen(copy);
	while (n > 1 && copy[n - 1] == '/')
		copy[--n] = 0;
	const char *base = strrchr(copy, '/');
	base = base ? base + 1 : copy;
	return strdup(base);
}

static char *join(const char *dir, const char *name)
{
	size_t n = strlen(dir);
	char *s = NULL;
	if (asprintf(&s, "%s%s%s", dir, n && dir[n - 1] == '/' ? "" : "/", name) < 0)
		return NULL;
	return s;
}

/* Run tar with argv, its stdin (dir 0) or stdout (dir 1) on a new pipe
 * whose other end is returned in *fd. */
static pid_t spawn_tar(char *const *argv, int dir, int *fd)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid_t pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (pid == 0) {
		signal(SIGPIPE, SIG_DFL);
		if (dup2(p[dir == 0 ? 0 : 1], dir) < 0)
			_exit(127);
		execvp("tar", argv);
		fprintf(stderr, "warren: tar: %s\n", strerror(errno));
		_exit(127);
	}
	close(p[dir == 0 ? 0 : 1]);
	*fd = p[dir == 0 ? 1 : 0];
	return pid;
}

static int reap_tar(pid_t pid)
{
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static int upload_dir(warren_sandbox *sb, const char *local, const char *target)
{
	warren_error *err = NULL;
	if (warren_file_mkdir(sb, target, true, 0, NULL, &err) < 0 &&
	    strcmp(warren_error_code(err), "conflict") != 0)
		return cli_fail(err);
	warren_error_free(err);
	err = NULL;
	_cleanup_closedir_ DIR *d = opendir(local);
	if (d == NULL)
		return cli_usage_error(local, "%s", strerror(errno));
	size_t n = 0, cap = 16;
	_cleanup_free_ char **argv = malloc(cap * sizeof(*argv));
	if (argv == NULL)
		return cli_usage_error(NULL, "out of memory");
	const char *head[] = {"tar", "-C", local, "-cf", "-", "--"};
	for (size_t i = 0; i < WR_ARRAY_SIZE(head); i++)
		argv[n++] = (char *)head[i];
	size_t first = n;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (n + 2 > cap) {
			char **p = realloc(argv, (cap *= 2) * sizeof(*argv));
			if (p == NULL)
				return cli_usage_error(NULL, "out of memory");
			argv = p;
		}
		argv[n++] = de->d_name;
	}
	argv[n] = NULL;
	if (n == first)
		return 0; /* empty directory: made above */
	int fd = -1;
	pid_t pid = spawn_tar(argv, 1, &fd);
	if (pid < 0)
		return cli_usage_error(NULL, "cannot run tar: %s", strerror(errno));
	int r = warren_tar_upload(sb, target, fd, NULL, NULL, &err);
	close(fd);
	int tr = reap_tar(pid);
	if (r < 0)
		return cli_fail(err);
	if (tr < 0)
		return cli_usage_error(local, "tar failed to read the directory");
	return 0;
}

static int upload(warren_sandbox *sb, const char *local, const char *rpath)
{
	warren_write_opts wo = WARREN_WRITE_OPTS_INIT;
	warren_error *err = NULL;
	wo.parents = true;
	if (strcmp(local, "-") == 0) {
		if (warren_file_write_fd(sb, rpath, 0, &wo, &err) < 0)
			return cli_fail(err);
		return 0;
	}
	struct stat st;
	if (stat(local, &st) < 0)
		return cli_usage_error(local, "%s", strerror(errno));
	/* Into an existing directory: keep the source's name. */
	_cleanup_free_ char *target = NULL;
	warren_file_entry *e = NULL;
	if (warren_file_stat(sb, rpath, &e, &err) < 0) {
		if (strcmp(warren_error_code(err), "not_found") != 0)
			return cli_fail(err);
		warren_error_free(err);
		err = NULL;
	}
	_cleanup_free_ char *name = last_name(local);
	if ((e && e->type == WARREN_FILE_DIR) || rpath[strlen(rpath) - 1] == '/')
		target = join(rpath, name ? name : "");
	else
		target = strdup(rpath);
	warren_file_entry_free(e);
	if (target == NULL)
		return cli_usage_error(NULL, "out of memory");
	if (S_ISDIR(st.st_mode))
		return upload_dir(sb, local, target);
	if (!S_ISREG(st.st_mode))
		return cli_usage_error(local, "is neither a regular file nor a directory");
	_cleanup_close_ int fd = open(local, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return cli_usage_error(local, "%s", strerror(errno));
	wo.mode = st.st_mode & 07777;
	if (warren_file_write_fd(sb, target, fd, &wo, &err) < 0)
		return cli_fail(err);
	return 0;
}

static int download_dir(warren_sandbox *sb, const char *rpath, const char *target)
{
	warren_error *err = NULL;
	if (mkdir(target, 0755) < 0 && errno != EEXIST)
		return cli_usage_error(target, "%s", strerror(errno));
	char *argv[] = {"tar", "-C", (char *)target, "-xf", "-", "--no-same-owner", NULL};
	int fd = -1;
	pid_t pid = spawn_tar(argv, 0, &fd);
	if (pid < 0)
		return cli_usage_error(NULL, "cannot run tar: %s", strerror(errno));
	int r = warren_tar_download(sb, rpath, fd, &err);
	close(fd);
	int tr = reap_tar(pid);
	if (r < 0)
		return cli_fail(err);
	if (tr < 0)
		return cli_usage_error(target, "tar failed to unpack the download");
	return 0;
}

static int download(warren_sandbox *sb, const char *rpath, const char *local)
{
	warren_file_entry *e = NULL;
	warren_error *err = NULL;
	if (warren_file_stat(sb, rpath, &e, &err) < 0)
		return cli_fail(err);
	bool is_dir = e->type == WARREN_FILE_DIR;
	unsigned int mode = e->mode ? e->mode & 0777 : 0644;
	warren_file_entry_free(e);
	if (strcmp(local, "-") == 0) {
		int r = is_dir ? warren_tar_download(sb, rpath, 1, &err)
			       : warren_file_read_fd(sb, rpath, 1, &err);
		return r < 0 ? cli_fail(err) : 0;
	}
	struct stat st;
	_cleanup_free_ char *target = NULL;
	_cleanup_free_ char *name = last_name(rpath);
	if (stat(local, &st) == 0 && S_ISDIR(st.st_mode) && name && *name)
		target = join(local, name);
	else
		target = strdup(local);
	if (target == NULL)
		return cli_usage_error(NULL, "out of memory");
	if (is_dir)
		return download_dir(sb, rpath, target);
	bool existed = access(target, F_OK) == 0;
	_cleanup_close_ int fd = open(target, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	if (fd < 0)
		return cli_usage_error(target, "%s", strerror(errno));
	if (warren_file_read_fd(sb, rpath, fd, &err) < 0) {
		if (!existed)
			unlink(target);
		return cli_fail(err);
	}
	return 0;
}

int cmd_cp(int argc, char **argv)
{
	struct cli_conn cc = {0};
	int r = cli_conn_only_opts(argc, argv, &cc, cp_usage);
	if (r >= 0)
		return r;
	if (argc - optind != 2)
		return cli_usage_error(NULL,
				       "expected a source and a destination "
				       "(warren cp LOCAL SANDBOX:PATH or SANDBOX:PATH LOCAL)");
	const char *src = argv[optind], *dst = argv[optind + 1];
	_cleanup_free_ char *src_id = NULL, *dst_id = NULL;
	const char *src_path = NULL, *dst_path = NULL;
	bool src_remote = cli_split_remote(src, &src_id, &src_path);
	bool dst_remote = cli_split_remote(dst, &dst_id, &dst_path);
	if (src_remote == dst_remote)
		return cli_usage_error(NULL, "exactly one of source and destination must be "
					     "SANDBOX:PATH");
	const char *rpath = src_remote ? src_path : dst_path;
	if (*rpath == 0)
		return cli_usage_error(src_remote ? src : dst, "has an empty path");
	signal(SIGPIPE, SIG_IGN);

	warren_client *cl;
	warren_sandbox *sb;
	r = cli_open_sandbox(&cc, src_remote ? src_id : dst_id, &cl, &sb);
	if (r)
		return r;
	if (src_remote)
		r = download(sb, src_path, dst);
	else
		r = upload(sb, src, dst_path);
	warren_sandbox_free(sb);
	warren_client_free(cl);
	return r;
}
