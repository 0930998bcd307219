/* `image build-vm`: a bootable vm-disk image from a rootfs image of the
 * store plus Debian's cloud kernel (image.h, wr_image_build_vm).
 *
 *   acquire the source (held: gc must not take it) ── its blob path
 *   scripts/mkvmimage.sh --from BLOB --kernel-root KDIR --out STAGE/disk.qcow2
 *       (fixed argv; partitions, mkfs.ext4, a loop device in a private mount
 *        namespace, cp -a of the mounted EROFS, kernel + extlinux, qemu-img
 *        convert; nothing of the image is run)
 *   wri_import_vmdisk(STAGE/disk.qcow2) ── the same checks as an import
 *   release the source, drop the stage
 *
 * A script rather than C: every step is a host tool (sfdisk, losetup,
 * mkfs.ext4, mount, cp, extlinux, qemu-img) that C would only fork in turn,
 * and the tests build their own disk with the same script, so the two
 * cannot drift apart. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "image/store_internal.h"

#define BUILD_VM_DEFAULT_SIZE (4ull << 30)
#define BUILD_VM_MIN_SIZE (256ull << 20)
#define EXIT_BAD_IMAGE 3 /* mkvmimage.sh: the image lacks what a VM needs */

/* The script's last stderr line (its message) into msg. */
static void last_line(int fd, char *msg, size_t cap)
{
	struct stat st;
	msg[0] = '\0';
	if (fstat(fd, &st) < 0 || st.st_size <= 0)
		return;
	off_t from = st.st_size > (off_t)cap - 1 ? st.st_size - (off_t)cap + 1 : 0;
	ssize_t n = pread(fd, msg, cap - 1, from);
	msg[n > 0 ? n : 0] = '\0';
	size_t len = strlen(msg);
	while (len && msg[len - 1] == '\n')
		msg[--len] = '\0';
	char *nl = strrchr(msg, '\n');
	if (nl)
		memmove(msg, nl + 1, strlen(nl + 1) + 1);
}

/* tmpdir: the build's stage directory, the script's TMPDIR: whatever it or
 * its tools leave there (a killed build included) goes with the stage. */
static int run_script(const struct wr_image_build_vm_opts *o, const char *blob, const char *out,
		      const char *tmpdir, uint64_t size, wr_err *err)
{
	char sz[32];
	snprintf(sz, sizeof(sz), "%" PRIu64, size);
	char *argv[] = {(char *)o->script,
			"--from",
			(char *)blob,
			"--kernel-root",
			(char *)o->kernel_root,
			"--out",
			(char *)out,
			"--size",
			sz,
			"--firmware",
			(char *)(o->firmware ? o->firmware : "bios"),
			NULL};
	/* The mirror a node may be configured with for debootstrap. */
	_cleanup_free_ char *mirror = NULL;
	const char *m = getenv("WARREN_DEBIAN_MIRROR");
	if (m && asprintf(&mirror, "WARREN_DEBIAN_MIRROR=%s", m) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	_cleanup_free_ char *tmpenv = NULL;
	if (asprintf(&tmpenv, "TMPDIR=%s", tmpdir) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	char *envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", tmpenv, mirror, NULL};
	_cleanup_close_ int errfd = open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (errfd < 0)
		return wr_err_sys(err, "build-vm: temporary file");
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, errfd, 2);
	pid_t pid;
	int rc = posix_spawn(&pid, o->script, &fa, NULL, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	if (rc != 0)
		return wr_err_set(err, rc, "build-vm: run %s: %s", o->script, strerror(rc));
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return wr_err_sys(err, "build-vm: wait %s", o->script);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	char msg[512];
	last_line(errfd, msg, sizeof(msg));
	if (WIFEXITED(status) && WEXITSTATUS(status) == EXIT_BAD_IMAGE)
		return wr_err_field(err, "image", "image '%s': %s", o->image, msg);
	return wr_err_set(err, EIO, "build-vm: %s failed (%s %d)%s%s", o->script,
			  WIFEXITED(status) ? "exit" : "signal",
			  WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status),
			  msg[0] ? ": " : "", msg);
}

static int build(struct wr_image_store *s, const struct wr_image_build_vm_opts *o,
		 const char *holder, uint64_t size, struct wr_image **out, wr_err *err)
{
	_cleanup_free_ char *blob = NULL;
	struct wr_image *src = NULL;
	int r = wr_image_acquire(s, o->image, holder, &blob, &src, err);
	if (r < 0) {
		if (*err && (*err)->field == NULL)
			(*err)->field = strdup("image");
		return r;
	}
	char digest[WR_IMAGE_DIGEST_LEN + 1];
	snprintf(digest, sizeof(digest), "%s", src->digest);
	bool rootfs = src->kind == WR_IMAGE_KIND_ROOTFS;
	wr_image_free(&src);
	struct wri_stage st = {.fd = -1, .rootfd = -1};
	_cleanup_free_ char *disk = NULL;
	if (!rootfs) {
		r = wr_err_field(err, "image",
				 "image '%s' is a vm-disk image; build-vm starts from a rootfs "
				 "image",
				 o->image);
	} else if ((r = wri_stage_new(s, &st, err)) == 0) {
		_cleanup_free_ char *stdir = NULL;
		if (asprintf(&stdir, "%s/tmp/%s", s->dir, st.name) < 0 ||
		    asprintf(&disk, "%s/disk.qcow2", stdir) < 0)
			r = wr_err_set(err, ENOMEM, "out of memory");
		else
			r = run_script(o, blob, disk, stdir, size, err);
	}
	if (r == 0) {
		_cleanup_close_ int fd =
		    openat(st.fd, "disk.qcow2", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		_cleanup_free_ char *source = NULL;
		if (fd < 0) {
			r = wr_err_sys(err, "build-vm: the built disk");
		} else if (asprintf(&source, "build-vm:%s", digest) < 0) {
			r = wr_err_set(err, ENOMEM, "out of memory");
		} else {
			struct wr_image_import_opts io = {.format = WR_IMAGE_FMT_VM_DISK,
							  .ref = o->ref,
							  .source = source,
							  .firmware = o->firmware};
			r = wri_import_vmdisk(s, &st, fd, source, &io, out, err);
		}
	}
	if (st.fd >= 0)
		wri_stage_drop(s, &st);
	wr_image_release(s, digest, holder, NULL);
	return r;
}

int wr_image_build_vm(struct wr_image_store *s, const struct wr_image_build_vm_opts *o,
		      struct wr_image **out, wr_err *err)
{
	if (o == NULL || o->image == NULL || o->image[0] == '\0')
		return wr_err_field(err, "image",
				    "image: the rootfs image to build from is required");
	if (o->ref) {
		_cleanup_free_ char *canon = NULL;
		int r = wri_ref_canon(o->ref, &canon, err);
		if (r < 0)
			return r;
	}
	if (o->firmware && !wr_image_firmware_ok(o->firmware))
		return wr_err_field(err, "firmware",
				    "firmware: bios, uefi or uefi-secure, not '%s'", o->firmware);
	uint64_t size = o->size ? o->size : BUILD_VM_DEFAULT_SIZE;
	if (size < BUILD_VM_MIN_SIZE || size > s->o.max_unpacked_bytes)
		return wr_err_field(err, "size",
				    "size: %" PRIu64 " bytes; a disk is 256 MiB to %" PRIu64
				    " bytes (image_store.max_unpacked)",
				    size, s->o.max_unpacked_bytes);
	if (o->script == NULL || o->script[0] != '/' || o->kernel_root == NULL ||
	    o->kernel_root[0] != '/')
		return wr_err_set(err, EINVAL,
				  "build-vm: the build script and the kernel tree must be absolute "
				  "paths");
	char id[17], holder[40];
	if (wr_random_id(id) < 0)
		return wr_err_sys(err, "random id");
	/* "create-": warrend's reconciliation keeps such holders while it
	 * runs (a build in flight) and drops them at start (a crash's). */
	snprintf(holder, sizeof(holder), "create-build-vm-%s", id);
	int r = build(s, o, holder, size, out, err);
	return r < 0 ? wr_err_wrap(err, "build-vm %s", o->image) : 0;
}
