/* warren-agent, boot half: from the initramfs to the sandbox's root.
 *
 *   mount /proc /sys /dev → load the modules listed in /etc/warren/modules
 *   (in order: the build resolved their dependencies) → wait for the image
 *   disk → EROFS (read-only) + ext4 writable disk → overlay on /newroot →
 *   move /proc /sys /dev along → switch root (MS_MOVE + chroot, as
 *   switch_root does) → cgroup2, devpts, /dev/shm → hostname.
 *
 * Disks are named on the kernel command line: warren.root=<dev> (the EROFS
 * image, default vda) and warren.rw=<dev> (the writable disk, default vdb),
 * either as a device name or as serial:<virtio serial>;
 * warren.root=none keeps the initramfs as the root (tests of the agent). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "agent/guest/agent.h"

static char g_cmdline[4096];

const char *ga_cmdline_get(const char *key, char *out, size_t len)
{
	size_t kl = strlen(key);
	for (char *p = g_cmdline; *p;) {
		while (*p == ' ' || *p == '\n')
			p++;
		char *end = p + strcspn(p, " \n");
		if (strncmp(p, key, kl) == 0 && p[kl] == '=') {
			size_t vl = (size_t)(end - (p + kl + 1));
			if (vl >= len)
				vl = len - 1;
			memcpy(out, p + kl + 1, vl);
			out[vl] = '\0';
			return out;
		}
		p = end;
	}
	return NULL;
}

static int load_modules(char *err, size_t errlen)
{
	FILE *f = fopen("/etc/warren/modules", "re");
	if (f == NULL)
		return errno == ENOENT ? 0 : -errno;
	char line[512];
	int r = 0;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		if (line[0] == '\0' || line[0] == '#')
			continue;
		int fd = open(line, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || (syscall(SYS_finit_module, fd, "", 0) < 0 && errno != EEXIST)) {
			snprintf(err, errlen, "module %s: %s", line, strerror(errno));
			r = -errno;
		}
		if (fd >= 0)
			close(fd);
		if (r < 0)
			break;
	}
	fclose(f);
	return r;
}

static int wait_for(const char *path, int ms)
{
	struct timespec ts = {0, 5 * 1000 * 1000};
	for (int i = 0; i < ms / 5; i++) {
		if (access(path, F_OK) == 0)
			return 0;
		nanosleep(&ts, NULL);
	}
	return -ENOENT;
}

#define TRY(expr, what)                                                                            \
	do {                                                                                       \
		if ((expr) < 0) {                                                                  \
			snprintf(err, errlen, "%s: %s", what, strerror(errno));                    \
			return -errno;                                                             \
		}                                                                                  \
	} while (0)

static int early_mounts(char *err, size_t errlen)
{
	mkdir("/proc", 0555);
	mkdir("/sys", 0555);
	mkdir("/dev", 0755);
	TRY(mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL), "mount /proc");
	TRY(mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL), "mount /sys");
	if (mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755") < 0 && errno != EBUSY) {
		snprintf(err, errlen, "mount /dev: %s", strerror(errno));
		return -errno;
	}
	int fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = read(fd, g_cmdline, sizeof(g_cmdline) - 1);
		g_cmdline[n > 0 ? n : 0] = '\0';
		close(fd);
	}
	return 0;
}

/* "serial:NAME" names the virtio disk whose serial is NAME (the host sets
 * it: device order is not stable across machines), else a /dev name. */
static int resolve_disk(const char *spec, char *dev, size_t len)
{
	if (strncmp(spec, "serial:", 7) != 0) {
		snprintf(dev, len, "/dev/%s", spec);
		return 0;
	}
	for (int tries = 0; tries < 1000; tries++) {
		for (char c = 'a'; c <= 'z'; c++) {
			char path[64], serial[64] = "";
			snprintf(path, sizeof(path), "/sys/block/vd%c/serial", c);
			int fd = open(path, O_RDONLY | O_CLOEXEC);
			if (fd < 0)
				continue;
			ssize_t n = read(fd, serial, sizeof(serial) - 1);
			close(fd);
			serial[n > 0 ? n : 0] = '\0';
			serial[strcspn(serial, "\n")] = '\0';
			if (strcmp(serial, spec + 7) == 0) {
				snprintf(dev, len, "/dev/vd%c", c);
				return 0;
			}
		}
		struct timespec ts = {0, 5 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	return -ENODEV;
}

static int new_root(char *err, size_t errlen)
{
	char root[64], rw[64], dev[80], dev2[80];
	if (!ga_cmdline_get("warren.root", root, sizeof(root)))
		snprintf(root, sizeof(root), "vda");
	if (strcmp(root, "none") == 0)
		return 0;
	if (!ga_cmdline_get("warren.rw", rw, sizeof(rw)))
		snprintf(rw, sizeof(rw), "vdb");
	if (resolve_disk(root, dev, sizeof(dev)) < 0 || resolve_disk(rw, dev2, sizeof(dev2)) < 0 ||
	    wait_for(dev, 5000) < 0 || wait_for(dev2, 5000) < 0) {
		snprintf(err, errlen, "disks %s, %s did not appear", dev, dev2);
		return -ENODEV;
	}
	mkdir("/mnt", 0755);
	mkdir("/mnt/lower", 0755);
	mkdir("/mnt/rw", 0755);
	mkdir("/newroot", 0755);
	TRY(mount(dev, "/mnt/lower", "erofs", MS_RDONLY, NULL), "mount image");
	TRY(mount(dev2, "/mnt/rw", "ext4", MS_NOSUID | MS_NODEV, NULL), "mount writable disk");
	mkdir("/mnt/rw/upper", 0755);
	mkdir("/mnt/rw/work", 0755);
	TRY(mount("overlay", "/newroot", "overlay", 0,
		  "lowerdir=/mnt/lower,upperdir=/mnt/rw/upper,workdir=/mnt/rw/work"),
	    "mount overlay");
	const char *moved[] = {"/proc", "/sys", "/dev"};
	for (size_t i = 0; i < 3; i++) {
		char to[64];
		snprintf(to, sizeof(to), "/newroot%s", moved[i]);
		mkdir(to, 0755);
		TRY(mount(moved[i], to, NULL, MS_MOVE, NULL), "move mount");
	}
	TRY(chdir("/newroot"), "chdir /newroot");
	TRY(mount(".", "/", NULL, MS_MOVE, NULL), "switch root");
	TRY(chroot("."), "chroot");
	TRY(chdir("/"), "chdir /");
	return 0;
}

int ga_boot(char *err, size_t errlen)
{
	int r;
	if ((r = early_mounts(err, errlen)) < 0 || (r = load_modules(err, errlen)) < 0 ||
	    (r = new_root(err, errlen)) < 0)
		return r;
	mkdir("/sys/fs/cgroup", 0755);
	TRY(mount("cgroup2", "/sys/fs/cgroup", "cgroup2", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL),
	    "mount cgroup2");
	mkdir("/dev/pts", 0755);
	mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666");
	mkdir("/dev/shm", 01777);
	mount("shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=64m");
	mkdir("/tmp", 01777);
	char host[65];
	if (ga_cmdline_get("warren.hostname", host, sizeof(host)))
		sethostname(host, strlen(host));
	/* after the root switch: /etc is the sandbox's */
	return ga_net_up(err, errlen);
}
