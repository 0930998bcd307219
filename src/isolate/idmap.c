#include "isolate/idmap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"

static int open_dir(const char *state_dir, wr_err *err)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/idmap", state_dir);
	int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0 || errno != ENOENT)
		return fd >= 0 ? fd : wr_err_sys(err, "open %s", path);
	if (wr_mkdir_p(path, 0700, err) < 0)
		return -1;
	fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	return fd >= 0 ? fd : wr_err_sys(err, "open %s", path);
}

static void fill(struct wr_idmap *m, uint32_t slot)
{
	m->slot = slot;
	m->base = WR_IDMAP_BASE + slot * WR_IDMAP_SIZE;
	m->count = WR_IDMAP_SIZE;
}

int wr_idmap_alloc(const char *state_dir, const char *owner, struct wr_idmap *out, wr_err *err)
{
	_cleanup_close_ int dfd = open_dir(state_dir, err);
	if (dfd < 0)
		return wr_err_wrap(err, "allocate uid range");
	/* Random start + linear probe: O(1) expected with many live sandboxes
	 * and no shared counter to contend on. */
	uint32_t start = 0;
	if (getrandom(&start, sizeof(start), 0) != sizeof(start))
		start = (uint32_t)getpid();
	for (uint32_t i = 0; i < WR_IDMAP_SLOTS; i++) {
		uint32_t slot = (start + i) % WR_IDMAP_SLOTS;
		char name[16];
		snprintf(name, sizeof(name), "%u", slot);
		/* dfd is O_PATH: openat on it works for lookups */
		_cleanup_close_ int fd =
		    openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd < 0) {
			if (errno == EEXIST)
				continue;
			return wr_err_sys(err, "allocate uid range: create slot %u", slot);
		}
		/* No fsync: the file's existence is the allocation, and it
		 * survives a crash of this process in the page cache; a host crash
		 * ends every sandbox that could have held the range. */
		if (wr_write_all(fd, owner, strlen(owner)) < 0) {
			int r = wr_err_sys(err, "allocate uid range: write slot %u", slot);
			unlinkat(dfd, name, 0);
			return r;
		}
		fill(out, slot);
		return 0;
	}
	return wr_err_set(err, EAGAIN, "allocate uid range: all %u ranges are in use",
			  WR_IDMAP_SLOTS);
}

int wr_idmap_free(const char *state_dir, const struct wr_idmap *m, wr_err *err)
{
	_cleanup_close_ int dfd = open_dir(state_dir, err);
	if (dfd < 0)
		return wr_err_wrap(err, "free uid range");
	char name[16];
	snprintf(name, sizeof(name), "%u", m->slot);
	if (unlinkat(dfd, name, 0) < 0 && errno != ENOENT)
		return wr_err_sys(err, "free uid range %u", m->slot);
	return 0;
}

typedef int (*slot_fn)(int dfd, uint32_t slot, const char *owner, void *ctx);

static int each_slot(const char *state_dir, slot_fn fn, void *ctx, wr_err *err)
{
	_cleanup_close_ int dfd = open_dir(state_dir, err);
	if (dfd < 0)
		return -1;
	int rfd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (rfd < 0)
		return wr_err_sys(err, "open uid range directory");
	_cleanup_closedir_ DIR *d = fdopendir(rfd);
	if (d == NULL) {
		close(rfd);
		return wr_err_sys(err, "read uid range directory");
	}
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		uint64_t slot;
		if (wr_parse_u64(de->d_name, WR_IDMAP_SLOTS - 1, &slot) < 0)
			continue;
		char owner[256] = {0};
		_cleanup_close_ int fd = openat(dfd, de->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0)
			continue;
		if (wr_read_all(fd, owner, sizeof(owner) - 1) < 0)
			continue;
		int r = fn(dfd, (uint32_t)slot, owner, ctx);
		if (r != 0)
			return r;
	}
	return 0;
}

struct find_ctx {
	const char *owner;
	struct wr_idmap *out;
};

static int find_cb(int dfd, uint32_t slot, const char *owner, void *ctx)
{
	(void)dfd;
	struct find_ctx *c = ctx;
	if (strcmp(owner, c->owner) != 0)
		return 0;
	fill(c->out, slot);
	return 1;
}

int wr_idmap_find(const char *state_dir, const char *owner, struct wr_idmap *out, wr_err *err)
{
	struct find_ctx c = {owner, out};
	int r = each_slot(state_dir, find_cb, &c, err);
	if (r < 0)
		return wr_err_wrap(err, "find uid range of %s", owner);
	if (r == 0)
		return wr_err_set(err, ENOENT, "no uid range is allocated to %s", owner);
	return 0;
}

struct reclaim_ctx {
	bool (*alive)(const char *owner, void *ctx);
	void *ctx;
	int freed;
};

static int reclaim_cb(int dfd, uint32_t slot, const char *owner, void *ctx)
{
	struct reclaim_ctx *c = ctx;
	if (c->alive(owner, c->ctx))
		return 0;
	char name[16];
	snprintf(name, sizeof(name), "%u", slot);
	if (unlinkat(dfd, name, 0) == 0)
		c->freed++;
	return 0;
}

int wr_idmap_reclaim(const char *state_dir, bool (*alive)(const char *owner, void *ctx), void *ctx,
		     wr_err *err)
{
	struct reclaim_ctx c = {alive, ctx, 0};
	if (each_slot(state_dir, reclaim_cb, &c, err) < 0)
		return wr_err_wrap(err, "reclaim uid ranges");
	return c.freed;
}

int wr_idmap_write(pid_t pid, const struct wr_idmap *m, wr_err *err)
{
	char path[64], line[64];
	snprintf(line, sizeof(line), "0 %u %u\n", (unsigned)m->base, m->count);
	static const char *const files[] = {"uid_map", "gid_map"};
	for (size_t i = 0; i < WR_ARRAY_SIZE(files); i++) {
		snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, files[i]);
		if (wr_write_file_at(AT_FDCWD, path, line, err) < 0)
			return wr_err_wrap(err, "write %s", files[i]);
	}
	return 0;
}
