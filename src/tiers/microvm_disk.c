/* The microVM's writable disk: an ext4 filesystem of the sandbox's disk
 * size, so the guest's writes stop at its quota with ENOSPC and never touch
 * a host filesystem's free space beyond it (the file is sparse: it takes
 * what the guest wrote). Formatting costs tens of ms, so each size is
 * formatted once into <state>/microvm/rw-<bytes>.ext4 and every VM gets a
 * sparse copy of it (only its data extents are copied: about a MiB). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "tiers/microvm_internal.h"

static int run_mkfs(const char *path, wr_err *err)
{
	pid_t pid = fork();
	if (pid == 0) {
		int nul = open("/dev/null", O_RDWR);
		if (nul >= 0) {
			dup2(nul, 0);
			dup2(nul, 1);
			dup2(nul, 2);
		}
		/* no lazy init left for the guest to do on first mount: the
		 * template is formatted once */
		execlp("mkfs.ext4", "mkfs.ext4", "-q", "-F", "-m", "0", "-E",
		       "lazy_itable_init=0,lazy_journal_init=0,nodiscard", path, (char *)NULL);
		_exit(127);
	}
	if (pid < 0)
		return wr_err_sys(err, "fork mkfs.ext4");
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return wr_err_sys(err, "wait mkfs.ext4");
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return wr_err_set(err, EIO, "mkfs.ext4 %s failed (status %d)", path, st);
	return 0;
}

static int template_for(uint64_t bytes, char **out, wr_err *err)
{
	char *path = NULL, *tmp = NULL;
	if (asprintf(&path, "%s/rw-%llu.ext4", wr_mvm.state_dir, (unsigned long long)bytes) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	if (access(path, R_OK) == 0) {
		*out = path;
		return 0;
	}
	char rnd[17];
	if (wr_random_id(rnd) < 0 || asprintf(&tmp, "%s/.rw-%llu.%s", wr_mvm.state_dir,
					      (unsigned long long)bytes, rnd) < 0) {
		free(path);
		return wr_err_set(err, ENOMEM, "out of memory");
	}
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	int r = fd < 0 ? wr_err_sys(err, "create %s", tmp) : 0;
	if (r == 0 && ftruncate(fd, (off_t)bytes) < 0)
		r = wr_err_sys(err, "size %s", tmp);
	if (fd >= 0)
		close(fd);
	if (r == 0)
		r = run_mkfs(tmp, err);
	/* two creates may format at once: the rename makes one win whole */
	if (r == 0 && rename(tmp, path) < 0)
		r = wr_err_sys(err, "rename %s", tmp);
	if (r < 0) {
		unlink(tmp);
		free(path);
	} else {
		*out = path;
	}
	free(tmp);
	return r;
}

static int copy_sparse(int in, int out, uint64_t size, wr_err *err)
{
	if (ftruncate(out, (off_t)size) < 0)
		return wr_err_sys(err, "size writable disk");
	off_t pos = 0;
	for (;;) {
		off_t data = lseek(in, pos, SEEK_DATA);
		if (data < 0) {
			if (errno == ENXIO)
				return 0; /* only holes left */
			return wr_err_sys(err, "seek template");
		}
		off_t hole = lseek(in, data, SEEK_HOLE);
		if (hole < 0)
			return wr_err_sys(err, "seek template");
		off_t a = data, b = data;
		while (a < hole) {
			ssize_t n = copy_file_range(in, &a, out, &b, (size_t)(hole - a), 0);
			if (n < 0)
				return wr_err_sys(err, "copy template");
			if (n == 0)
				break;
		}
		pos = hole;
	}
}

int wr_vm_disk_make(const char *path, uint64_t bytes, wr_err *err)
{
	_cleanup_free_ char *tpl = NULL;
	if (template_for(bytes, &tpl, err) < 0)
		return wr_err_wrap(err, "writable disk template");
	_cleanup_close_ int in = open(tpl, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return wr_err_sys(err, "open %s", tpl);
	_cleanup_close_ int out = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (out < 0)
		return wr_err_sys(err, "create %s", path);
	if (copy_sparse(in, out, bytes, err) < 0) {
		unlink(path);
		return wr_err_wrap(err, "writable disk");
	}
	return 0;
}
