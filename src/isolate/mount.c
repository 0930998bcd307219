#include "isolate/mount.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"

int wr_mount_new(const char *fstype, const char *source, const char *const *opts,
		 unsigned int attrs, struct wr_cerr *e)
{
	_cleanup_close_ int fs = wr_fsopen(fstype, FSOPEN_CLOEXEC);
	if (fs < 0)
		return wr_cerr_sys(e, "fsopen %s", fstype);
	if (source && wr_fsconfig(fs, FSCONFIG_SET_STRING, "source", source, 0) < 0)
		return wr_cerr_sys(e, "%s: source %s", fstype, source);
	for (size_t i = 0; opts && opts[i]; i++) {
		char key[64];
		const char *eq = strchr(opts[i], '=');
		int r;
		if (eq == NULL) {
			r = wr_fsconfig(fs, FSCONFIG_SET_FLAG, opts[i], NULL, 0);
		} else {
			size_t n = (size_t)(eq - opts[i]);
			if (n >= sizeof(key))
				return wr_cerr_set(e, EINVAL, "%s: option too long", fstype);
			memcpy(key, opts[i], n);
			key[n] = 0;
			r = wr_fsconfig(fs, FSCONFIG_SET_STRING, key, eq + 1, 0);
		}
		if (r < 0)
			return wr_cerr_sys(e, "%s: option %s", fstype, opts[i]);
	}
	if (wr_fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
		return wr_cerr_sys(e, "create %s", fstype);
	int mfd = wr_fsmount(fs, FSMOUNT_CLOEXEC, attrs);
	if (mfd < 0)
		return wr_cerr_sys(e, "fsmount %s", fstype);
	return mfd;
}

int wr_mount_clone(int dfd, const char *path, bool rec, struct wr_cerr *e)
{
	unsigned int flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC;
	if (rec)
		flags |= AT_RECURSIVE;
	if (path == NULL || *path == 0) {
		path = "";
		flags |= AT_EMPTY_PATH;
	}
	int mfd = wr_open_tree(dfd, path, flags);
	if (mfd < 0)
		return wr_cerr_sys(e, "clone mount %s", *path ? path : "(fd)");
	return mfd;
}

int wr_mount_setattr(int mfd, uint64_t set, uint64_t clr, int userns_fd, bool rec,
		     struct wr_cerr *e)
{
	struct mount_attr attr = {.attr_set = set, .attr_clr = clr};
	if (userns_fd >= 0) {
		attr.attr_set |= MOUNT_ATTR_IDMAP;
		attr.userns_fd = (uint64_t)userns_fd;
	}
	unsigned int flags = AT_EMPTY_PATH | (rec ? AT_RECURSIVE : 0);
	if (wr_sys_mount_setattr(mfd, "", flags, &attr) < 0)
		return wr_cerr_sys(e, "mount_setattr");
	return 0;
}

int wr_mount_attach(int mfd, int dfd, const char *path, struct wr_cerr *e)
{
	if (wr_move_mount(mfd, "", dfd, path, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		return wr_cerr_sys(e, "attach mount on %s", path);
	return 0;
}

int wr_mount_make_readonly(int dfd, const char *path, struct wr_cerr *e)
{
	_cleanup_close_ int mfd = wr_mount_clone(dfd, path, true, e);
	if (mfd < 0)
		return mfd;
	int r = wr_mount_setattr(mfd, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0,
				 -1, true, e);
	if (r < 0)
		return r;
	return wr_mount_attach(mfd, dfd, path, e);
}
