/* A QEMU's state to a file and back (see qemu_snap.h). */
#include "tiers/qemu_snap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "tiers/qmp.h"

extern char **environ;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmd(const struct wr_qsnap_qmp *q, const char *name, json_t *args, json_t **ret,
	       wr_err *err)
{
	pthread_mutex_lock(q->lock);
	int r = q->qmp ? wr_qmp_cmd(q->qmp, name, args, 30000, ret, err)
		       : wr_err_set(err, EIO, "no QEMU monitor");
	pthread_mutex_unlock(q->lock);
	json_decref(args);
	return r;
}

static int getfd(const struct wr_qsnap_qmp *q, const char *name, int fd, wr_err *err)
{
	pthread_mutex_lock(q->lock);
	int r =
	    q->qmp ? wr_qmp_getfd(q->qmp, name, fd, err) : wr_err_set(err, EIO, "no QEMU monitor");
	pthread_mutex_unlock(q->lock);
	return r;
}

int wr_qsnap_version(const struct wr_qsnap_qmp *q, char *buf, size_t len, wr_err *err)
{
	json_t *v = NULL;
	if (cmd(q, "query-version", NULL, &v, err) < 0)
		return -1;
	json_t *m = json_object_get(v, "qemu");
	const char *pkg = json_string_value(json_object_get(v, "package"));
	snprintf(buf, len, "%lld.%lld.%lld%s%s",
		 (long long)json_integer_value(json_object_get(m, "major")),
		 (long long)json_integer_value(json_object_get(m, "minor")),
		 (long long)json_integer_value(json_object_get(m, "micro")),
		 pkg && *pkg && *pkg != ' ' ? " " : "", pkg ? pkg : "");
	json_decref(v);
	return 0;
}

int wr_qsnap_stopped(const struct wr_qsnap_qmp *q, wr_err *err)
{
	char st[64];
	pthread_mutex_lock(q->lock);
	int r = q->qmp ? wr_qmp_status(q->qmp, st, sizeof(st), err)
		       : wr_err_set(err, EIO, "no QEMU monitor");
	pthread_mutex_unlock(q->lock);
	if (r < 0)
		return r;
	return strcmp(st, "paused") == 0 || strcmp(st, "postmigrate") == 0 ||
	       strcmp(st, "finish-migrate") == 0;
}

/* Polls query-migrate until "completed" (0) or "failed" (error). */
static int wait_migration(const struct wr_qsnap_qmp *q, const char *what, uint64_t deadline,
			  wr_err *err)
{
	for (unsigned i = 0;; i++) {
		json_t *st = NULL;
		if (cmd(q, "query-migrate", NULL, &st, err) < 0)
			return -1;
		const char *s = json_string_value(json_object_get(st, "status"));
		const char *why = json_string_value(json_object_get(st, "error-desc"));
		int r = 1;
		if (s && strcmp(s, "completed") == 0)
			r = 0;
		else if (s && strcmp(s, "failed") == 0)
			r = wr_err_set(err, EIO, "%s failed: %s", what, why ? why : "?");
		else if (now_ns() > deadline)
			r = wr_err_set(err, ETIMEDOUT, "%s: migration still %s", what,
				       s ? s : "none");
		json_decref(st);
		if (r <= 0)
			return r;
		/* short waits first: a small VM saves in tens of ms */
		struct timespec ts = {0, (i < 50 ? 2 : 20) * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
}

int wr_qsnap_save(const struct wr_qsnap_qmp *q, int fd, uint64_t *bytes, wr_err *err)
{
	/* every RAM block goes into the stream: a template's shared RAM file
	 * is not the VM's to keep (x-ignore-shared off), and no bandwidth
	 * cap (7.2's default is 128 MiB/s: a stopped VM has no guest to
	 * spare) */
	if (cmd(q, "migrate-set-capabilities",
		json_pack("{s:[{s:s, s:b}]}", "capabilities", "capability", "x-ignore-shared",
			  "state", 0),
		NULL, err) < 0 ||
	    cmd(q, "migrate-set-parameters",
		json_pack("{s:I}", "max-bandwidth", (json_int_t)1 << 40), NULL, err) < 0 ||
	    getfd(q, "wrsnap", fd, err) < 0 ||
	    cmd(q, "migrate", json_pack("{s:s}", "uri", "fd:wrsnap"), NULL, err) < 0 ||
	    wait_migration(q, "save", now_ns() + 600ull * 1000000000ull, err) < 0)
		return wr_err_wrap(err, "save the VM's state");
	if (fsync(fd) < 0)
		return wr_err_sys(err, "save the VM's state: fsync");
	struct stat st;
	if (bytes)
		*bytes = fstat(fd, &st) == 0 ? (uint64_t)st.st_size : 0;
	return 0;
}

int wr_qsnap_load(const struct wr_qsnap_qmp *q, int fd, uint64_t deadline_ns, wr_err *err)
{
	if (lseek(fd, 0, SEEK_SET) < 0)
		return wr_err_sys(err, "load the VM's state: seek");
	if (getfd(q, "wrsnap", fd, err) < 0 ||
	    cmd(q, "migrate-incoming", json_pack("{s:s}", "uri", "fd:wrsnap"), NULL, err) < 0)
		return wr_err_wrap(err, "load the VM's state");
	for (;;) {
		/* QEMU's main loop reads a file's stream without yielding: QMP
		 * answers only once the load is done, so the wait for an
		 * answer is bounded by the deadline, not a short timeout */
		char st[64];
		uint64_t now = now_ns();
		int left = now < deadline_ns ? (int)((deadline_ns - now) / 1000000) + 1 : 1;
		json_t *ret = NULL;
		pthread_mutex_lock(q->lock);
		int r = wr_qmp_cmd(q->qmp, "query-status", NULL, left, &ret, err);
		pthread_mutex_unlock(q->lock);
		if (r < 0)
			return wr_err_wrap(err, "load the VM's state");
		snprintf(st, sizeof(st), "%s",
			 json_string_value(json_object_get(ret, "status")) ?: "?");
		json_decref(ret);
		/* loaded: the VM stays stopped (-incoming without autostart
		 * ends paused) until the caller's cont */
		if (strcmp(st, "paused") == 0 || strcmp(st, "running") == 0)
			return 0;
		if (strcmp(st, "inmigrate") != 0 && strcmp(st, "prelaunch") != 0) {
			json_t *m = NULL;
			_cleanup_err_ wr_err e2 = NULL;
			const char *why = NULL;
			if (cmd(q, "query-migrate", NULL, &m, &e2) == 0)
				why = json_string_value(json_object_get(m, "error-desc"));
			r = wr_err_set(err, EIO, "load the VM's state: the VM is %s%s%s", st,
				       why ? ": " : "", why ? why : "");
			json_decref(m);
			return r;
		}
		if (now_ns() > deadline_ns)
			return wr_err_set(err, ETIMEDOUT, "load the VM's state: still %s", st);
		struct timespec ts = {0, 2 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
}

int wr_qsnap_check(json_t *saved, json_t *now, wr_err *err)
{
	static const char *const keys[] = {"format", "tier", "accel", "machine", "args"};
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		json_t *a = json_object_get(saved, keys[i]), *b = json_object_get(now, keys[i]);
		if (a && b && json_equal(a, b))
			continue;
		char *sa = a ? json_dumps(a, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
		char *sb = b ? json_dumps(b, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
		int r = wr_err_field(err, "image",
				     "image: the VM state was saved with %s %s; this node would "
				     "restore it with %s (a VM state restores only into the same "
				     "QEMU set-up)",
				     keys[i], sa ? sa : "(none)", sb ? sb : "(none)");
		free(sa);
		free(sb);
		return r;
	}
	return 0;
}

int wr_qsnap_check_version(json_t *saved, const struct wr_qsnap_qmp *q, wr_err *err)
{
	char v[160];
	if (wr_qsnap_version(q, v, sizeof(v), err) < 0)
		return -1;
	const char *s = json_string_value(json_object_get(saved, "qemu_version"));
	if (s == NULL || strcmp(s, v) != 0)
		return wr_err_field(err, "image",
				    "image: the VM state was saved by QEMU %s; this node runs QEMU "
				    "%s (a VM state restores only into the same QEMU version)",
				    s ? s : "(unknown)", v);
	return 0;
}

int wr_qsnap_fsync(const char *path, wr_err *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return wr_err_sys(err, "open %s", path);
	int r = fsync(fd) < 0 ? wr_err_sys(err, "fsync %s", path) : 0;
	close(fd);
	return r;
}

int wr_qsnap_write_meta(const char *dir, json_t *j, wr_err *err)
{
	char tmp[1100], path[1100];
	snprintf(tmp, sizeof(tmp), "%s/.meta.json.tmp", dir);
	snprintf(path, sizeof(path), "%s/meta.json", dir);
	char *text = json_dumps(j, JSON_INDENT(1) | JSON_SORT_KEYS);
	if (text == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	size_t n = strlen(text);
	int r = 0;
	if (fd < 0 || write(fd, text, n) != (ssize_t)n || fsync(fd) < 0)
		r = wr_err_sys(err, "write %s", tmp);
	if (fd >= 0)
		close(fd);
	free(text);
	if (r == 0 && rename(tmp, path) < 0)
		r = wr_err_sys(err, "rename %s", path);
	if (r == 0)
		r = wr_qsnap_fsync(dir, err);
	return r;
}

json_t *wr_qsnap_read_meta(const char *dir, wr_err *err)
{
	char path[1100];
	snprintf(path, sizeof(path), "%s/meta.json", dir);
	json_error_t je;
	json_t *j = json_load_file(path, 0, &je);
	if (!json_is_object(j)) {
		json_decref(j);
		wr_err_set(err, ENOENT, "saved VM %s: no valid meta.json (%s)", dir, je.text);
		return NULL;
	}
	return j;
}

int wr_qsnap_publish(const char *tmp, const char *final, wr_err *err)
{
	if (rename(tmp, final) < 0)
		return wr_err_sys(err, "publish %s", final);
	_cleanup_free_ char *copy = strdup(final);
	if (copy == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	return wr_qsnap_fsync(dirname(copy), err);
}

/* The data runs of in, copied to out at the same offsets (holes stay). */
static int copy_sparse(int in, int out, wr_err *err)
{
	struct stat st;
	if (fstat(in, &st) < 0)
		return wr_err_sys(err, "stat");
	if (ftruncate(out, st.st_size) < 0)
		return wr_err_sys(err, "truncate");
	off_t pos = 0;
	while (pos < st.st_size) {
		off_t data = lseek(in, pos, SEEK_DATA);
		if (data < 0 && errno == ENXIO)
			break;
		if (data < 0)
			return wr_err_sys(err, "seek data");
		off_t hole = lseek(in, data, SEEK_HOLE);
		if (hole < 0)
			hole = st.st_size;
		off_t a = data, b = data;
		while (a < hole) {
			ssize_t n = copy_file_range(in, &a, out, &b, (size_t)(hole - a), 0);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				return wr_err_sys(err, "copy");
		}
		pos = hole;
	}
	return 0;
}

int wr_qsnap_link_or_copy(const char *from, const char *to, wr_err *err)
{
	if (link(from, to) == 0)
		return 0;
	if (errno != EXDEV && errno != EPERM && errno != EMLINK)
		return wr_err_sys(err, "link %s", to);
	return wr_qsnap_copy(from, to, err);
}

int wr_qsnap_copy(const char *from, const char *to, wr_err *err)
{
	_cleanup_close_ int in = open(from, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return wr_err_sys(err, "open %s", from);
	_cleanup_close_ int out = open(to, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (out < 0)
		return wr_err_sys(err, "create %s", to);
	if (copy_sparse(in, out, err) < 0 || (fsync(out) < 0 && wr_err_sys(err, "fsync") < 0)) {
		unlink(to);
		return wr_err_wrap(err, "copy %s", from);
	}
	return 0;
}

int wr_qsnap_kvm(const struct wr_qsnap_qmp *q, wr_err *err)
{
	json_t *k = NULL;
	if (cmd(q, "query-kvm", NULL, &k, err) < 0)
		return -1;
	int r = json_is_true(json_object_get(k, "enabled"));
	json_decref(k);
	return r;
}

void wr_qsnap_remove(const char *dir)
{
	wr_rm_flat_dir(dir);
}

int wr_qsnap_run(char *const *argv, wr_err *err)
{
	/* its stderr, for the error: a memfd (dup2 into the child clears
	 * close-on-exec there) */
	int efd = memfd_create("qsnap-stderr", MFD_CLOEXEC);
	if (efd < 0)
		return wr_err_sys(err, "memfd_create");
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, efd, 2);
	pid_t pid;
	int r = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (r != 0) {
		close(efd);
		errno = r;
		return wr_err_sys(err, "run %s", argv[0]);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
		close(efd);
		return 0;
	}
	char msg[512] = "";
	ssize_t n = pread(efd, msg, sizeof(msg) - 1, 0);
	close(efd);
	msg[n > 0 ? n : 0] = '\0';
	for (char *c = msg; *c; c++)
		if (*c == '\n')
			*c = ' ';
	return wr_err_set(err, EIO, "%s failed (status %d): %s", argv[0], st, msg);
}

size_t wr_qsnap_sweep(const char *dir, bool (*keep)(const char *id, void *ctx), void *ctx)
{
	size_t n = 0;
	DIR *d = opendir(dir);
	struct dirent *de;
	while (d && (de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		/* half-made (.tmp-) and half-removed (.old-) ones always go */
		if (de->d_name[0] != '.' && keep && keep(de->d_name, ctx))
			continue;
		char p[1100];
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		wr_qsnap_remove(p);
		n++;
	}
	if (d)
		closedir(d);
	return n;
}

int wr_qsnap_save_file(const struct wr_qsnap_qmp *q, const char *path, uint64_t *bytes, wr_err *err)
{
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return wr_err_sys(err, "create %s", path);
	int r = wr_qsnap_save(q, fd, bytes, err);
	close(fd);
	return r;
}
