/* cgroups, the common front: small file helpers shared with the backends,
 * cgroup handles (creating and opening a sandbox's directories in every
 * hierarchy, removing them), dispatch to the v1 and v2 backends, and the
 * sweep of leftovers. Where this process's cgroups are and the "warren" base
 * in each hierarchy (the root) are in cgroup_layout.c. See cgroup.h for the
 * layout. */
#include "isolate/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "common/util.h"
#include "isolate/cgroup_internal.h"

#define DESTROY_TIMEOUT_MS 2000

/* ---- small file helpers ------------------------------------------------ */

int wr_cg_try_write(int dfd, const char *file, const char *val)
{
	int fd = openat(dfd, file, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	size_t len = strlen(val);
	ssize_t n;
	do
		n = write(fd, val, len);
	while (n < 0 && errno == EINTR);
	int r = n < 0 ? -errno : (size_t)n == len ? 0 : -EIO;
	close(fd);
	return r;
}

int wr_cg_write(int dfd, const char *label, const char *file, const char *val, wr_err *err)
{
	int r = wr_cg_try_write(dfd, file, val);
	if (r < 0)
		return wr_err_set(err, -r, "cgroup %s: write %s=%s: %s", label, file, val,
				  strerror(-r));
	return 0;
}

ssize_t wr_cg_read(int dfd, const char *file, char *buf, size_t size)
{
	int fd = openat(dfd, file, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = wr_read_all(fd, buf, size - 1);
	int r = n < 0 ? -errno : 0;
	close(fd);
	if (r < 0)
		return r;
	buf[n] = 0;
	return n;
}

static int parse_u64(const char *s, uint64_t *out)
{
	while (*s == ' ' || *s == '\t')
		s++;
	if (strncmp(s, "max", 3) == 0) {
		*out = UINT64_MAX;
		return 0;
	}
	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		return -errno;
	*out = v;
	return 0;
}

int wr_cg_read_u64(int dfd, const char *file, uint64_t *out)
{
	char buf[64];
	ssize_t n = wr_cg_read(dfd, file, buf, sizeof(buf));
	if (n < 0)
		return (int)n;
	return parse_u64(buf, out);
}

int wr_cg_key_u64(const char *buf, const char *key, uint64_t *out)
{
	size_t klen = strlen(key);
	for (const char *p = buf; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		if (strncmp(p, key, klen) == 0 && p[klen] == ' ')
			return parse_u64(p + klen + 1, out);
	}
	return -ENOENT;
}

int wr_cg_read_key(int dfd, const char *file, const char *key, uint64_t *out)
{
	char buf[4096];
	ssize_t n = wr_cg_read(dfd, file, buf, sizeof(buf));
	if (n < 0)
		return (int)n;
	return wr_cg_key_u64(buf, key, out);
}

int wr_cg_for_each_pid(int dfd, const char *file, int (*fn)(pid_t pid, void *ctx), void *ctx)
{
	_cleanup_close_ int fd = openat(dfd, file, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	char buf[4096];
	size_t have = 0;
	int count = 0;
	for (;;) {
		ssize_t n = read(fd, buf + have, sizeof(buf) - have);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		have += (size_t)n;
		/* hand out every complete line; at EOF the rest is one too */
		size_t start = 0;
		for (size_t i = 0; i < have; i++) {
			if (buf[i] != '\n' && !(n == 0 && i == have - 1))
				continue;
			size_t end = buf[i] == '\n' ? i : i + 1;
			long v = 0;
			for (size_t j = start; j < end && v >= 0; j++)
				v = buf[j] >= '0' && buf[j] <= '9' && v < (1L << 40)
					? v * 10 + (buf[j] - '0')
					: -1;
			start = i + 1;
			if (v <= 0)
				continue;
			count++;
			if (fn) {
				int r = fn((pid_t)v, ctx);
				if (r < 0)
					return r;
			}
		}
		if (n == 0)
			return count;
		memmove(buf, buf + start, have - start);
		have -= start;
		if (have == sizeof(buf))
			return -EIO; /* a 4 KiB line: not a pid list */
	}
}

static int walk(int dfd, int depth, int (*fn)(int dirfd, void *ctx), void *ctx)
{
	int r = fn(dfd, ctx);
	if (r < 0)
		return r;
	if (depth >= WR_CG_MAX_CHILDREN_DEPTH)
		return 0;
	int lfd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (lfd < 0)
		return errno == ENOENT ? 0 : -errno;
	_cleanup_closedir_ DIR *d = fdopendir(lfd);
	if (d == NULL) {
		r = -errno;
		close(lfd);
		return r;
	}
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (de->d_type != DT_DIR || strcmp(de->d_name, ".") == 0 ||
		    strcmp(de->d_name, "..") == 0)
			continue;
		_cleanup_close_ int sub =
		    openat(dfd, de->d_name, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		if (sub < 0) {
			if (errno == ENOENT) /* removed meanwhile */
				continue;
			return -errno;
		}
		r = walk(sub, depth + 1, fn, ctx);
		if (r < 0)
			return r;
	}
	return 0;
}

int wr_cg_walk(int dfd, int (*fn)(int dirfd, void *ctx), void *ctx)
{
	return walk(dfd, 0, fn, ctx);
}

int wr_cg_walk_cg(const struct wr_cgroup *cg, int dfd, int (*fn)(int dirfd, void *ctx), void *ctx)
{
	return cg->leaf ? fn(dfd, ctx) : walk(dfd, 0, fn, ctx);
}

void wr_cg_sleep_us(unsigned us)
{
	struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (long)(us % 1000000) * 1000L};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* ---- cgroup handles ---------------------------------------------------- */

static struct wr_cgroup *cg_alloc(struct wr_cgroup_root *root, const char *parent_rel,
				  const char *name)
{
	struct wr_cgroup *cg = calloc(1, sizeof(*cg));
	if (cg == NULL)
		return NULL;
	cg->root = root;
	cg->v2_fd = cg->peak_fd = -1;
	pthread_mutex_init(&cg->retire_lock, NULL);
	for (int h = 0; h < WR_CG_NCTRL; h++)
		cg->fd[h] = cg->up_fd[h] = -1;
	cg->name = strdup(name);
	if (parent_rel) {
		if (asprintf(&cg->rel, "%s/%s", parent_rel, name) < 0)
			cg->rel = NULL;
		cg->leaf = true;
	} else {
		cg->rel = strdup(name);
	}
	if (cg->name == NULL || cg->rel == NULL) {
		wr_cgroup_close(cg);
		return NULL;
	}
	return cg;
}

void wr_cgroup_close(struct wr_cgroup *cg)
{
	if (cg == NULL)
		return;
	for (int h = 0; h < WR_CG_NCTRL; h++) {
		wr_closep(&cg->fd[h]);
		wr_closep(&cg->up_fd[h]);
	}
	wr_closep(&cg->v2_fd);
	wr_closep(&cg->peak_fd);
	for (size_t i = 0; i < cg->nchildren; i++)
		free(cg->children[i]);
	free(cg->children);
	free(cg->name);
	free(cg->rel);
	pthread_mutex_destroy(&cg->retire_lock);
	free(cg);
}

static void cg_closep(struct wr_cgroup **cg)
{
	wr_cgroup_close(*cg);
}

const char *wr_cgroup_name(const struct wr_cgroup *cg)
{
	return cg->name;
}

int wr_cgroup_v2_fd(const struct wr_cgroup *cg)
{
	return cg->v2_fd;
}

int wr_cgroup_ctrl_fd(const struct wr_cgroup *cg, enum wr_cg_ctrl c)
{
	if ((unsigned)c >= WR_CG_NCTRL)
		return -1;
	int h = cg->root->ctrl_hier[c];
	return h < 0 ? -1 : cg->fd[h];
}

/* Create cg's directories as `name` under the parent directories pfd[]
 * (per hierarchy) and pv2, in the hierarchies `hiers` (+ v2 when pv2 >= 0).
 * On failure removes what it made. */
static int make_dirs(struct wr_cgroup *cg, unsigned hiers, const int *pfd, int pv2,
		     const char *name, wr_err *err)
{
	struct wr_cgroup_root *root = cg->root;
	int r = 0;
	for (int h = 0; h < root->nhier && r == 0; h++) {
		if (!(hiers & (1u << h)))
			continue;
		const char *label = root->hier[h].label;
		if (mkdirat(pfd[h], name, 0755) < 0) {
			r = errno == EEXIST
				? wr_err_set(err, EEXIST, "cgroup %s: %s/%s already exists", label,
					     root->hier[h].path, cg->rel)
				: wr_err_sys(err, "cgroup %s: mkdir %s/%s", label,
					     root->hier[h].path, cg->rel);
			break;
		}
		cg->hiers |= 1u << h;
		cg->fd[h] = openat(pfd[h], name, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		if (cg->fd[h] < 0)
			r = wr_err_sys(err, "cgroup %s: open %s/%s", label, root->hier[h].path,
				       cg->rel);
	}
	if (r == 0 && pv2 >= 0) {
		if (mkdirat(pv2, name, 0755) < 0) {
			r = errno == EEXIST
				? wr_err_set(err, EEXIST, "cgroup v2: %s/%s already exists",
					     root->v2_path, cg->rel)
				: wr_err_sys(err, "cgroup v2: mkdir %s/%s", root->v2_path, cg->rel);
		} else {
			cg->v2_fd =
			    openat(pv2, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
			if (cg->v2_fd < 0) {
				r = wr_err_sys(err, "cgroup v2: open %s/%s", root->v2_path,
					       cg->rel);
				unlinkat(pv2, name, AT_REMOVEDIR);
			}
		}
	}
	if (r < 0) {
		for (int h = 0; h < root->nhier; h++) {
			if (!(cg->hiers & (1u << h)))
				continue;
			wr_closep(&cg->fd[h]);
			unlinkat(pfd[h], name, AT_REMOVEDIR);
		}
		cg->hiers = 0;
	}
	return r;
}

/* Remove fresh, empty directories made by make_dirs (failed create). */
static void unmake_dirs(struct wr_cgroup *cg, const int *pfd, int pv2)
{
	for (int h = 0; h < cg->root->nhier; h++) {
		if (!(cg->hiers & (1u << h)))
			continue;
		wr_closep(&cg->fd[h]);
		unlinkat(pfd[h], cg->name, AT_REMOVEDIR);
	}
	if (cg->v2_fd >= 0) {
		wr_closep(&cg->v2_fd);
		unlinkat(pv2, cg->name, AT_REMOVEDIR);
	}
	cg->hiers = 0;
}

static int check_limits(const struct wr_cgroup_limits *l, wr_err *err)
{
	if (l->memory_bytes != WR_CG_UNSET && l->memory_bytes < 4096)
		return wr_err_field(err, "memory_bytes",
				    "cgroup: memory limit %llu is below a page",
				    (unsigned long long)l->memory_bytes);
	if (l->pids != WR_CG_UNSET && (l->pids < 1 || l->pids > (1ull << 30)))
		return wr_err_field(err, "pids", "cgroup: pids limit %llu out of 1..2^30",
				    (unsigned long long)l->pids);
	if (l->cpu_weight != WR_CG_UNSET && (l->cpu_weight < 1 || l->cpu_weight > 10000))
		return wr_err_field(err, "cpu_weight", "cgroup: cpu weight %llu out of 1..10000",
				    (unsigned long long)l->cpu_weight);
	if (l->io_weight != WR_CG_UNSET && (l->io_weight < 1 || l->io_weight > 10000))
		return wr_err_field(err, "io_weight", "cgroup: io weight %llu out of 1..10000",
				    (unsigned long long)l->io_weight);
	if (l->cpu_period_us != WR_CG_UNSET &&
	    (l->cpu_period_us < 1000 || l->cpu_period_us > 1000000))
		return wr_err_field(err, "cpu_period_us",
				    "cgroup: cpu period %llu us out of 1000..1000000",
				    (unsigned long long)l->cpu_period_us);
	if (l->cpu_quota_us != WR_CG_UNSET &&
	    (l->cpu_quota_us < 1000 || l->cpu_quota_us > (1ull << 40)))
		return wr_err_field(err, "cpu_quota_us", "cgroup: cpu quota %llu us below 1000",
				    (unsigned long long)l->cpu_quota_us);
	return 0;
}

static int set_limits(struct wr_cgroup *cg, const struct wr_cgroup_limits *lim, wr_err *err)
{
	if (cg->root->mode == WR_CG_V2)
		return wr_cg_v2_set_limits(cg, lim, err);
	return wr_cg_v1_set_limits(cg, lim, err);
}

int wr_cgroup_create(struct wr_cgroup_root *root, const char *name,
		     const struct wr_cgroup_limits *lim, struct wr_cgroup **out, wr_err *err)
{
	if (!wr_cg_valid_name(name))
		return wr_err_set(err, EINVAL, "cgroup: invalid name \"%s\"", name ? name : "");
	struct wr_cgroup_limits none;
	if (lim == NULL) {
		wr_cgroup_limits_default(&none);
		lim = &none;
	}
	if (check_limits(lim, err) < 0)
		return wr_err_wrap(err, "create cgroup %s", name);
	_cleanup_(cg_closep) struct wr_cgroup *cg = cg_alloc(root, NULL, name);
	if (cg == NULL)
		return wr_err_set(err, ENOMEM, "create cgroup %s: out of memory", name);
	unsigned hiers = root->default_hiers;
	int bh = root->ctrl_hier[WR_CG_BLKIO];
	if (lim->io_weight != WR_CG_UNSET && bh >= 0)
		hiers |= 1u << bh;
	int pfd[WR_CG_NCTRL];
	for (int h = 0; h < WR_CG_NCTRL; h++)
		pfd[h] = root->hier[h].base_fd;
	if (make_dirs(cg, hiers, pfd, root->v2_base_fd, name, err) < 0)
		return wr_err_wrap(err, "create cgroup %s", name);
	int r = set_limits(cg, lim, err);
	if (r == 0 && root->mode == WR_CG_V2) {
		/* Leaves get memory and pids too: per-command peak, OOM and
		 * pids events. This cgroup then may hold no process itself. */
		char ctl[32] = "";
		if (root->v2_ctrls & WR_CG2_MEMORY)
			strcat(ctl, "+memory ");
		if (root->v2_ctrls & WR_CG2_PIDS)
			strcat(ctl, "+pids ");
		if (ctl[0]) {
			ctl[strlen(ctl) - 1] = 0;
			r = wr_cg_write(cg->v2_fd, "v2", "cgroup.subtree_control", ctl, err);
		}
	}
	if (r < 0) {
		unmake_dirs(cg, pfd, root->v2_base_fd);
		return wr_err_wrap(err, "create cgroup %s", name);
	}
	*out = steal_ptr(&cg);
	return 0;
}

int wr_cgroup_create_leaf(struct wr_cgroup *parent, const char *name, struct wr_cgroup **out,
			  wr_err *err)
{
	if (!wr_cg_valid_name(name))
		return wr_err_set(err, EINVAL, "cgroup: invalid leaf name \"%s\"",
				  name ? name : "");
	/* The parent handle is not modified: leaves may be created from many
	 * threads at once (concurrent commands of one sandbox), and a sandbox
	 * that runs a million commands must not accumulate a million names.
	 * Destroy finds leaves by scanning the directory. */
	_cleanup_(cg_closep) struct wr_cgroup *cg = cg_alloc(parent->root, parent->rel, name);
	if (cg == NULL)
		return wr_err_set(err, ENOMEM, "create cgroup %s/%s: out of memory", parent->rel,
				  name);
	if (make_dirs(cg, parent->hiers, parent->fd, parent->v2_fd, name, err) < 0)
		return wr_err_wrap(err, "create cgroup %s", cg->rel);
	*out = steal_ptr(&cg);
	return 0;
}

/* Controllers whose accounting or control a command needs for itself. */
#define CMD_CTRLS ((1u << WR_CG_MEMORY) | (1u << WR_CG_CPUACCT) | (1u << WR_CG_FREEZER))

int wr_cgroup_create_cmd_leaf(struct wr_cgroup *parent, const char *name, struct wr_cgroup **out,
			      wr_err *err)
{
	if (!wr_cg_valid_name(name))
		return wr_err_set(err, EINVAL, "cgroup: invalid leaf name \"%s\"",
				  name ? name : "");
	/* As wr_cgroup_create_leaf: the parent handle is not modified. */
	_cleanup_(cg_closep) struct wr_cgroup *cg = cg_alloc(parent->root, parent->rel, name);
	if (cg == NULL)
		return wr_err_set(err, ENOMEM, "create cgroup %s/%s: out of memory", parent->rel,
				  name);
	struct wr_cgroup_root *root = parent->root;
	unsigned own = 0;
	for (int h = 0; h < root->nhier; h++) {
		if (!(parent->hiers & (1u << h)))
			continue;
		if (root->hier[h].ctrls & CMD_CTRLS) {
			own |= 1u << h;
			continue;
		}
		cg->up_fd[h] = fcntl(parent->fd[h], F_DUPFD_CLOEXEC, 3);
		if (cg->up_fd[h] < 0)
			return wr_err_sys(err, "create cgroup %s: dup %s fd", cg->rel,
					  root->hier[h].label);
	}
	if (make_dirs(cg, own, parent->fd, parent->v2_fd, name, err) < 0)
		return wr_err_wrap(err, "create cgroup %s", cg->rel);
	*out = steal_ptr(&cg);
	return 0;
}

/* Open <base>/<name>. strict: the memory (v1) or v2 directory must exist;
 * otherwise any directory of the name will do (sweep of half-made ones). */
static int open_cg(struct wr_cgroup_root *root, const char *name, bool strict,
		   struct wr_cgroup **out, wr_err *err)
{
	if (!wr_cg_valid_name(name))
		return wr_err_set(err, EINVAL, "cgroup: invalid name \"%s\"", name ? name : "");
	_cleanup_(cg_closep) struct wr_cgroup *cg = cg_alloc(root, NULL, name);
	if (cg == NULL)
		return wr_err_set(err, ENOMEM, "open cgroup %s: out of memory", name);
	for (int h = 0; h < root->nhier; h++) {
		cg->fd[h] = openat(root->hier[h].base_fd, name,
				   O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		if (cg->fd[h] >= 0) {
			cg->hiers |= 1u << h;
			continue;
		}
		if (errno != ENOENT || (strict && h == root->ctrl_hier[WR_CG_MEMORY]))
			return wr_err_sys(err, "open cgroup %s: %s/%s", name, root->hier[h].path,
					  name);
	}
	if (root->v2_base_fd >= 0) {
		cg->v2_fd =
		    openat(root->v2_base_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		if (cg->v2_fd < 0 && (errno != ENOENT || (strict && root->mode == WR_CG_V2)))
			return wr_err_sys(err, "open cgroup %s: %s/%s", name, root->v2_path, name);
	}
	if (cg->hiers == 0 && cg->v2_fd < 0)
		return wr_err_set(err, ENOENT, "open cgroup %s: no such cgroup", name);
	*out = steal_ptr(&cg);
	return 0;
}

int wr_cgroup_open(struct wr_cgroup_root *root, const char *name, struct wr_cgroup **out,
		   wr_err *err)
{
	return open_cg(root, name, true, out, err);
}

int wr_cgroup_set_limits(struct wr_cgroup *cg, const struct wr_cgroup_limits *lim, wr_err *err)
{
	if (check_limits(lim, err) < 0 || set_limits(cg, lim, err) < 0)
		return wr_err_wrap(err, "set limits of cgroup %s", cg->rel);
	return 0;
}

int wr_cgroup_attach(struct wr_cgroup *cg, pid_t pid, bool skip_v2, wr_err *err)
{
	char buf[24];
	snprintf(buf, sizeof(buf), "%d", (int)pid);
	if (!skip_v2 && cg->v2_fd >= 0 &&
	    wr_cg_write(cg->v2_fd, "v2", "cgroup.procs", buf, err) < 0)
		return wr_err_wrap(err, "attach %d to cgroup %s", (int)pid, cg->rel);
	for (int h = 0; h < cg->root->nhier; h++) {
		int fd = cg->fd[h] >= 0 ? cg->fd[h] : cg->up_fd[h];
		if (fd < 0)
			continue;
		if (wr_cg_write(fd, cg->root->hier[h].label, "cgroup.procs", buf, err) < 0)
			return wr_err_wrap(err, "attach %d to cgroup %s", (int)pid, cg->rel);
	}
	return 0;
}

int wr_cgroup_procs_fds(struct wr_cgroup *cg, bool skip_v2, int *fds, int max, wr_err *err)
{
	int n = 0;
	if (!skip_v2 && cg->v2_fd >= 0) {
		if (n >= max)
			return wr_err_set(err, E2BIG, "cgroup %s: too many hierarchies", cg->rel);
		fds[n] = openat(cg->v2_fd, "cgroup.procs", O_WRONLY | O_CLOEXEC);
		if (fds[n] < 0)
			return wr_err_sys(err, "cgroup v2: open %s/cgroup.procs", cg->rel);
		n++;
	}
	for (int h = 0; h < cg->root->nhier; h++) {
		int dfd = cg->fd[h] >= 0 ? cg->fd[h] : cg->up_fd[h];
		if (dfd < 0)
			continue;
		if (n >= max) {
			while (n > 0)
				close(fds[--n]);
			return wr_err_set(err, E2BIG, "cgroup %s: too many hierarchies", cg->rel);
		}
		fds[n] = openat(dfd, "cgroup.procs", O_WRONLY | O_CLOEXEC);
		if (fds[n] < 0) {
			int r = wr_err_sys(err, "cgroup %s: open %s/cgroup.procs",
					   cg->root->hier[h].label, cg->rel);
			while (n > 0)
				close(fds[--n]);
			return r;
		}
		n++;
	}
	return n;
}

int wr_cgroup_kill(struct wr_cgroup *cg, wr_err *err)
{
	int r = cg->v2_fd >= 0 ? wr_cg_v2_kill(cg, err) : wr_cg_v1_kill(cg, err);
	return r < 0 ? wr_err_wrap(err, "kill cgroup %s", cg->rel) : 0;
}

int wr_cgroup_freeze(struct wr_cgroup *cg, bool frozen, wr_err *err)
{
	int r =
	    cg->v2_fd >= 0 ? wr_cg_v2_freeze(cg, frozen, err) : wr_cg_v1_freeze(cg, frozen, err);
	return r < 0 ? wr_err_wrap(err, "%s cgroup %s", frozen ? "freeze" : "thaw", cg->rel) : 0;
}

int wr_cgroup_frozen(struct wr_cgroup *cg, wr_err *err)
{
	int r = cg->v2_fd >= 0 ? wr_cg_v2_frozen(cg, err) : wr_cg_v1_frozen(cg, err);
	return r < 0 ? wr_err_wrap(err, "freezer state of cgroup %s", cg->rel) : r;
}

int64_t wr_cgroup_idle_memory(struct wr_cgroup *cg, bool idle, wr_err *err)
{
	int fd = wr_cgroup_ctrl_fd(cg, WR_CG_MEMORY);
	if (fd >= 0) {
		/* v1 (and hybrid, whose memory hierarchy is v1) */
		if (wr_cg_write(fd, "memory", "memory.soft_limit_in_bytes", idle ? "0" : "-1",
				err) < 0)
			return wr_err_wrap(err, "cgroup %s", cg->rel);
		return 0;
	}
	if (cg->root->mode != WR_CG_V2 || !(cg->root->v2_ctrls & WR_CG2_MEMORY) || cg->v2_fd < 0 ||
	    !idle)
		return 0;
	uint64_t before = 0, after = 0;
	if (wr_cg_read_u64(cg->v2_fd, "memory.current", &before) < 0 || before == 0)
		return 0;
	char v[32];
	snprintf(v, sizeof(v), "%llu", (unsigned long long)before);
	/* EAGAIN: it could not reclaim all of it, which is the normal case */
	int r = wr_cg_try_write(cg->v2_fd, "memory.reclaim", v);
	if (r < 0 && r != -EAGAIN && r != -ENOENT)
		return wr_err_set(err, -r, "cgroup %s: write memory.reclaim=%s: %s", cg->rel, v,
				  strerror(-r));
	if (wr_cg_read_u64(cg->v2_fd, "memory.current", &after) < 0 || after > before)
		return 0;
	return (int64_t)(before - after);
}

int wr_cgroup_nprocs(struct wr_cgroup *cg, wr_err *err)
{
	int r = cg->v2_fd >= 0 ? wr_cg_v2_nprocs(cg, err) : wr_cg_v1_nprocs(cg, err);
	return r < 0 ? wr_err_wrap(err, "count processes of cgroup %s", cg->rel) : r;
}

int wr_cgroup_signal(struct wr_cgroup *cg, int sig, wr_err *err)
{
	int fd = cg->v2_fd;
	for (int h = 0; fd < 0 && h < cg->root->nhier; h++)
		fd = cg->fd[h];
	if (fd < 0)
		return wr_err_set(err, ENOENT, "cgroup %s: no directory to list", cg->rel);
	_cleanup_free_ char *buf = NULL;
	if (wr_read_file_at(fd, "cgroup.procs", &buf, 1 << 22, err) < 0)
		return wr_err_wrap(err, "cgroup %s", cg->rel);
	char *sv = NULL;
	for (char *ln = strtok_r(buf, "\n", &sv); ln; ln = strtok_r(NULL, "\n", &sv)) {
		/* through a pidfd: a pid that exited meanwhile is not signalled
		 * under a new owner */
		int pfd = wr_pidfd_open((pid_t)atoi(ln), 0);
		if (pfd < 0)
			continue;
		wr_pidfd_send_signal(pfd, sig, NULL, 0);
		close(pfd);
	}
	return 0;
}

int wr_cgroup_stats(struct wr_cgroup *cg, struct wr_cgroup_stats *st, wr_err *err)
{
	memset(st, 0, sizeof(*st));
	/* the subtree and the retired leaves at one instant (retire_leaf) */
	pthread_mutex_lock(&cg->retire_lock);
	int r =
	    cg->root->mode == WR_CG_V2 ? wr_cg_v2_stats(cg, st, err) : wr_cg_v1_stats(cg, st, err);
	st->oom_kills += cg->retired.oom_kills;
	st->pids_max_hits += cg->retired.pids_max_hits;
	pthread_mutex_unlock(&cg->retire_lock);
	return r < 0 ? wr_err_wrap(err, "stats of cgroup %s", cg->rel) : 0;
}

/* ---- removal --------------------------------------------------------- */

/* rmdir every directory below dfd/name, deepest first, then dfd/name.
 * 0 when gone, -EBUSY while processes remain, -errno otherwise. */
static int rm_tree(int dfd, const char *name, int depth)
{
	if (unlinkat(dfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
		return 0;
	if (errno != EBUSY && errno != ENOTEMPTY)
		return -errno;
	if (depth >= WR_CG_MAX_CHILDREN_DEPTH)
		return -EBUSY;
	int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (sub < 0)
		return errno == ENOENT ? 0 : -errno;
	_cleanup_closedir_ DIR *d = fdopendir(sub);
	if (d == NULL) {
		int r = -errno;
		close(sub);
		return r;
	}
	bool had_children = false;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (de->d_type != DT_DIR || strcmp(de->d_name, ".") == 0 ||
		    strcmp(de->d_name, "..") == 0)
			continue;
		had_children = true;
		int r = rm_tree(dirfd(d), de->d_name, depth + 1);
		if (r < 0)
			return r;
	}
	if (!had_children)
		return -EBUSY; /* processes still in it */
	if (unlinkat(dfd, name, AT_REMOVEDIR) == 0 || errno == ENOENT)
		return 0;
	return -errno;
}

/* Remove cg's directory (known leaves first: the common case needs no
 * directory scan) in one hierarchy whose base is bfd. */
static int rm_cg_dir(struct wr_cgroup *cg, int bfd)
{
	char path[PATH_MAX];
	for (size_t i = 0; i < cg->nchildren; i++) {
		snprintf(path, sizeof(path), "%s/%s", cg->rel, cg->children[i]);
		if (unlinkat(bfd, path, AT_REMOVEDIR) < 0 && errno != ENOENT && errno != EBUSY)
			return -errno;
	}
	return rm_tree(bfd, cg->rel, 0);
}

int wr_cgroup_destroy(struct wr_cgroup **pcg, wr_err *err)
{
	_cleanup_(cg_closep) struct wr_cgroup *cg = steal_ptr(pcg);
	if (cg == NULL)
		return 0;
	struct wr_cgroup_root *root = cg->root;
	uint64_t deadline = wr_now_ns() + DESTROY_TIMEOUT_MS * 1000000ull;
	_cleanup_err_ wr_err kerr = NULL;
	int kr = wr_cgroup_kill(cg, &kerr);
	if (kr == 0 && cg->v2_fd >= 0)
		wr_cg_v2_wait_event(cg->v2_fd, "populated", 0, DESTROY_TIMEOUT_MS);
	/* The directories go as soon as the last task has exited. */
	unsigned pending = cg->hiers | (cg->v2_fd >= 0 ? 1u << WR_CG_NCTRL : 0);
	unsigned delay = 200; /* us */
	int busy_errno = 0;
	for (;;) {
		for (int h = 0; h <= WR_CG_NCTRL; h++) {
			if (!(pending & (1u << h)))
				continue;
			bool v2 = h == WR_CG_NCTRL;
			int r = rm_cg_dir(cg, v2 ? root->v2_base_fd : root->hier[h].base_fd);
			if (r == 0) {
				pending &= ~(1u << h);
			} else if (r != -EBUSY) {
				return wr_err_set(
				    err, -r, "destroy cgroup %s: cgroup %s: rmdir %s/%s: %s",
				    cg->rel, v2 ? "v2" : root->hier[h].label,
				    v2 ? root->v2_path : root->hier[h].path, cg->rel, strerror(-r));
			} else {
				busy_errno = EBUSY;
			}
		}
		if (pending == 0)
			break;
		if (wr_now_ns() > deadline) {
			if (kr < 0 && err) {
				/* the kill failing is the better explanation */
				wr_err_free(err);
				*err = steal_ptr(&kerr);
				return wr_err_wrap(err, "destroy cgroup %s", cg->rel);
			}
			return wr_err_set(err, busy_errno,
					  "destroy cgroup %s: processes remain after %d ms",
					  cg->rel, DESTROY_TIMEOUT_MS);
		}
		/* Something survived the kill (v1 tasks outside the unified
		 * cgroup, or a kill that failed): signal what is listed. */
		if (root->mode == WR_CG_V1)
			wr_cg_v1_kill_listed(cg);
		else if (cg->v2_fd >= 0)
			wr_cg_try_write(cg->v2_fd, "cgroup.kill", "1");
		wr_cg_sleep_us(delay);
		if (delay < 16000)
			delay *= 2;
	}
	return 0;
}

/* ---- sweep --------------------------------------------------------- */

struct names {
	char **v;
	size_t n;
};

static void names_free(struct names *ns)
{
	for (size_t i = 0; i < ns->n; i++)
		free(ns->v[i]);
	free(ns->v);
}

static int names_add_dir(struct names *ns, int bfd)
{
	int fd = openat(bfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	_cleanup_closedir_ DIR *d = fdopendir(fd);
	if (d == NULL) {
		int r = -errno;
		close(fd);
		return r;
	}
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (de->d_type != DT_DIR || strcmp(de->d_name, ".") == 0 ||
		    strcmp(de->d_name, "..") == 0)
			continue;
		size_t i;
		for (i = 0; i < ns->n; i++)
			if (strcmp(ns->v[i], de->d_name) == 0)
				break;
		if (i < ns->n)
			continue;
		char **nv = realloc(ns->v, (ns->n + 1) * sizeof(*nv));
		if (nv == NULL)
			return -ENOMEM;
		ns->v = nv;
		if ((ns->v[ns->n] = strdup(de->d_name)) == NULL)
			return -ENOMEM;
		ns->n++;
	}
	return 0;
}

int wr_cgroup_sweep(struct wr_cgroup_root *root, bool (*keep)(const char *name, void *ctx),
		    void *ctx, wr_err *err)
{
	_cleanup_(names_free) struct names ns = {0};
	for (int h = 0; h <= root->nhier; h++) {
		int bfd = h < root->nhier ? root->hier[h].base_fd : root->v2_base_fd;
		if (bfd < 0)
			continue;
		int r = names_add_dir(&ns, bfd);
		if (r < 0)
			return wr_err_set(err, -r, "sweep cgroups: list %s: %s",
					  h < root->nhier ? root->hier[h].path : root->v2_path,
					  strerror(-r));
	}
	int ret = 0;
	for (size_t i = 0; i < ns.n; i++) {
		if (keep && keep(ns.v[i], ctx))
			continue;
		struct wr_cgroup *cg = NULL;
		_cleanup_err_ wr_err e = NULL;
		int r = open_cg(root, ns.v[i], false, &cg, &e);
		if (r == 0)
			r = wr_cgroup_destroy(&cg, &e);
		if (r < 0 && r != -ENOENT && ret == 0) {
			ret = r;
			if (err)
				*err = steal_ptr(&e);
		}
	}
	if (ret < 0 && err)
		return wr_err_wrap(err, "sweep cgroups");
	return ret;
}

/* ---- retiring a command's leaf (cgroup.h) --------------------------- */

/* The parent's directory in the hierarchy holding the leaves' memory
 * counters: v1 memory (hybrid too), else v2. */
static int count_dir_fd(const struct wr_cgroup *parent)
{
	return parent->root->mode == WR_CG_V2 ? parent->v2_fd
					      : wr_cgroup_ctrl_fd(parent, WR_CG_MEMORY);
}

/* parent->retire_lock held. */
static int retire_locked(struct wr_cgroup *parent, struct wr_cgroup **pleaf, wr_cgroup_keep_fn keep,
			 void *ctx, wr_err *err)
{
	struct wr_cgroup *leaf = *pleaf;
	struct wr_cgroup_stats c;
	uint64_t id = 0;
	int r = wr_cg_leaf_counts(leaf, &c, &id);
	if (r < 0)
		return wr_err_set(err, -r, "retire cgroup %s: read its counters: %s", leaf->rel,
				  strerror(-r));
	int fresh = 1;
	if (keep && (c.oom_kills || c.pids_max_hits)) {
		char key[200];
		snprintf(key, sizeof(key), "%s@%llu", leaf->name, (unsigned long long)id);
		fresh = keep(ctx, parent->name, key, &c, err);
		if (fresh < 0)
			return wr_err_wrap(err, "retire cgroup %s", leaf->rel);
	}
	char name[256];
	snprintf(name, sizeof(name), "%s", leaf->name);
	r = wr_cgroup_destroy(pleaf, err);
	/* Its counts left the subtree with its counting directory (a destroy
	 * that failed may have removed it all the same). */
	int dfd = count_dir_fd(parent);
	bool gone =
	    dfd < 0 || (faccessat(dfd, name, F_OK, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT);
	if (fresh > 0 && gone) {
		parent->retired.oom_kills += c.oom_kills;
		parent->retired.pids_max_hits += c.pids_max_hits;
	}
	return r;
}

int wr_cgroup_retire_leaf(struct wr_cgroup *parent, struct wr_cgroup **leaf, wr_cgroup_keep_fn keep,
			  void *ctx, wr_err *err)
{
	if (*leaf == NULL)
		return 0;
	pthread_mutex_lock(&parent->retire_lock);
	int r = retire_locked(parent, leaf, keep, ctx, err);
	pthread_mutex_unlock(&parent->retire_lock);
	return r;
}

/* A handle on the existing leaf parent/name: its directories in the
 * hierarchies where it has one. ENOENT when it has none. */
static int open_leaf(struct wr_cgroup *parent, const char *name, struct wr_cgroup **out)
{
	if (!wr_cg_valid_name(name))
		return -EINVAL;
	_cleanup_(cg_closep) struct wr_cgroup *cg = cg_alloc(parent->root, parent->rel, name);
	if (cg == NULL)
		return -ENOMEM;
	for (int h = 0; h < parent->root->nhier; h++) {
		if (parent->fd[h] < 0)
			continue;
		cg->fd[h] =
		    openat(parent->fd[h], name, O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		if (cg->fd[h] >= 0)
			cg->hiers |= 1u << h;
		else if (errno != ENOENT)
			return -errno;
	}
	if (parent->v2_fd >= 0) {
		cg->v2_fd =
		    openat(parent->v2_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
		if (cg->v2_fd < 0 && errno != ENOENT)
			return -errno;
	}
	if (cg->hiers == 0 && cg->v2_fd < 0)
		return -ENOENT;
	*out = steal_ptr(&cg);
	return 0;
}

int wr_cgroup_adopt_retired(struct wr_cgroup *parent, const struct wr_cgroup_stats *kept,
			    const char *skip, wr_cgroup_keep_fn keep, void *ctx, wr_err *err)
{
	int dfd = count_dir_fd(parent);
	_cleanup_(names_free) struct names ns = {0};
	int r = dfd < 0 ? 0 : names_add_dir(&ns, dfd);
	if (r < 0)
		return wr_err_set(err, -r, "adopt cgroup %s: list its leaves: %s", parent->rel,
				  strerror(-r));
	pthread_mutex_lock(&parent->retire_lock);
	memset(&parent->retired, 0, sizeof(parent->retired));
	if (kept) {
		parent->retired.oom_kills = kept->oom_kills;
		parent->retired.pids_max_hits = kept->pids_max_hits;
	}
	int n = 0;
	for (size_t i = 0; i < ns.n && r >= 0; i++) {
		if (skip && strcmp(ns.v[i], skip) == 0)
			continue;
		struct wr_cgroup *leaf = NULL;
		if ((r = open_leaf(parent, ns.v[i], &leaf)) < 0) {
			r = r == -ENOENT ? 0
					 : wr_err_set(err, -r, "adopt cgroup %s: open %s: %s",
						      parent->rel, ns.v[i], strerror(-r));
			continue;
		}
		/* processes still in it: its counts are in the subtree */
		if (wr_cgroup_nprocs(leaf, NULL) != 0) {
			wr_cgroup_close(leaf);
			continue;
		}
		r = retire_locked(parent, &leaf, keep, ctx, err);
		wr_cgroup_close(leaf); /* NULL unless keep() failed */
		if (r == 0)
			n++;
	}
	pthread_mutex_unlock(&parent->retire_lock);
	return r < 0 ? wr_err_wrap(err, "adopt cgroup %s", parent->rel) : n;
}
