/* vm-disk images: bootable disk files (raw or qcow2) for the vm tier, kept
 * in the store like any image (digest = sha256 of the file's bytes, names,
 * holders, gc).
 *
 *   input fd ── copy + sha256 ──> tmp/<stage>/blob (0444, fsynced)
 *            ── header checks (our own parse, before any tool runs)
 *            ── qemu-img info -f FMT, qemu-img check -f qcow2 (explicit
 *               format: qemu-img never probes, and with no backing file
 *               or data file in the header it opens nothing else)
 *            ── firmware: as asked, else uefi for a GPT disk with an EFI system
 *               partition and no BIOS boot partition (wri_vmdisk_firmware)
 *            ── record {kind: vm-disk, disk: {format, virtual_size, firmware}}
 *
 * The format is told by the qcow2 magic exactly as the vm tier tells it
 * when it boots the file (src/tiers/vm.c), so what was checked here is
 * what QEMU opens. A qcow2 header naming a backing file or an external
 * data file would make QEMU (and qemu-img) open another host path: such a
 * disk is refused before qemu-img ever sees it. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
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

#define QCOW2_MAGIC "QFI\xfb"
#define QCOW2_INCOMPAT_DIRTY (1ull << 0)
#define QCOW2_INCOMPAT_CORRUPT (1ull << 1)
#define QCOW2_INCOMPAT_DATA_FILE (1ull << 2)
#define QEMU_IMG_OUT_MAX (1u << 20)

static uint64_t be64(const unsigned char *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

static uint32_t be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Header checks of a qcow2 file; *vsize gets its virtual size. */
static int check_qcow2_header(int fd, uint64_t *vsize, wr_err *err)
{
	unsigned char h[104] = {0};
	ssize_t n = pread(fd, h, sizeof(h), 0);
	if (n < 72)
		return wr_err_set(err, EPERM, "vm-disk: a qcow2 header too short (%zd bytes)", n);
	uint32_t version = be32(h + 4);
	if (version != 2 && version != 3)
		return wr_err_set(err, EPERM, "vm-disk: qcow2 version %u (2 or 3 only)", version);
	if (be64(h + 8) != 0 || be32(h + 16) != 0)
		return wr_err_set(err, EPERM,
				  "vm-disk: the qcow2 disk has a backing file; an image must "
				  "be whole (qemu-img convert -O qcow2 it first)");
	if (be32(h + 32) != 0)
		return wr_err_set(err, EPERM,
				  "vm-disk: the qcow2 disk is encrypted; warren boots "
				  "unencrypted images only");
	if (version == 3) {
		if (n < 104)
			return wr_err_set(err, EPERM, "vm-disk: a qcow2 v3 header too short");
		uint64_t inc = be64(h + 72);
		if (inc & QCOW2_INCOMPAT_DATA_FILE)
			return wr_err_set(err, EPERM,
					  "vm-disk: the qcow2 disk keeps its data in an external "
					  "file; an image must be whole");
		if (inc & QCOW2_INCOMPAT_CORRUPT)
			return wr_err_set(err, EPERM, "vm-disk: the qcow2 disk is marked corrupt");
		if (inc & QCOW2_INCOMPAT_DIRTY)
			return wr_err_set(err, EPERM,
					  "vm-disk: the qcow2 disk was not closed cleanly "
					  "(qemu-img check -r all it first)");
	}
	*vsize = be64(h + 24);
	return 0;
}

/* Run a host qemu-img with a fixed argv; its stdout (at most 1 MiB) into
 * *out. Exit codes listed in ok_codes (terminated by -1) count as
 * success; *code gets the exit code. */
static int run_qemu_img(char *const argv[], const int *ok_codes, char **out, int *code, wr_err *err)
{
	_cleanup_close_ int outfd = open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	_cleanup_close_ int errfd = open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (outfd < 0 || errfd < 0)
		return wr_err_sys(err, "qemu-img: temporary file");
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, outfd, 1);
	posix_spawn_file_actions_adddup2(&fa, errfd, 2);
	char *envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL};
	pid_t pid;
	int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	if (rc != 0)
		return wr_err_set(err, rc, "run %s: %s (qemu-utils installs it)", argv[0],
				  strerror(rc));
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return wr_err_sys(err, "wait %s", argv[0]);
	*code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	bool ok = false;
	for (const int *c = ok_codes; *c >= 0; c++)
		ok = ok || (WIFEXITED(status) && *code == *c);
	if (!ok) {
		char msg[512] = "";
		ssize_t n = pread(errfd, msg, sizeof(msg) - 1, 0);
		msg[n > 0 ? n : 0] = '\0';
		for (char *p = msg; *p; p++)
			if (*p == '\n')
				*p = (p[1] ? ' ' : '\0');
		return wr_err_set(err, EBADMSG, "vm-disk: qemu-img %s failed (exit %d)%s%s",
				  argv[1], *code, msg[0] ? ": " : "", msg);
	}
	struct stat st;
	if (fstat(outfd, &st) < 0)
		return wr_err_sys(err, "qemu-img output");
	if ((uint64_t)st.st_size > QEMU_IMG_OUT_MAX)
		return wr_err_set(err, EFBIG, "vm-disk: qemu-img %s: output too large", argv[1]);
	char *buf = malloc((size_t)st.st_size + 1);
	if (buf == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	ssize_t n = pread(outfd, buf, (size_t)st.st_size, 0);
	buf[n > 0 ? n : 0] = '\0';
	*out = buf;
	return 0;
}

/* qemu-img's own view must agree with the header checks. */
static int qemu_img_verify(const char *path, const char *fmt, uint64_t max, uint64_t *vsize,
			   wr_err *err)
{
	_cleanup_free_ char *text = NULL;
	int code;
	static const int ok_info[] = {0, -1};
	char *info[] = {"qemu-img", "info", "-f", (char *)fmt, "--output=json", (char *)path, NULL};
	int r = run_qemu_img(info, ok_info, &text, &code, err);
	if (r < 0)
		return r;
	json_error_t je;
	json_t *j = json_loads(text, 0, &je);
	if (!json_is_object(j)) {
		json_decref(j);
		return wr_err_set(err, EBADMSG, "vm-disk: qemu-img info: %s", je.text);
	}
	const char *got = json_string_value(json_object_get(j, "format"));
	json_t *vs = json_object_get(j, "virtual-size");
	json_t *fs = json_object_get(json_object_get(j, "format-specific"), "data");
	bool backing = json_object_get(j, "backing-filename") != NULL ||
		       json_object_get(j, "full-backing-filename") != NULL;
	bool encrypted = json_is_true(json_object_get(j, "encrypted"));
	bool data_file = json_is_object(fs) && json_object_get(fs, "data-file") != NULL;
	bool corrupt = json_is_object(fs) && json_is_true(json_object_get(fs, "corrupt"));
	int64_t v = json_is_integer(vs) ? json_integer_value(vs) : -1;
	if (got == NULL || strcmp(got, fmt) != 0)
		r = wr_err_set(err, EPERM, "vm-disk: qemu-img reads a %s disk, not %s",
			       got ? got : "?", fmt);
	else if (backing || data_file)
		r = wr_err_set(err, EPERM,
			       "vm-disk: the disk refers to another file (backing or data "
			       "file); an image must be whole");
	else if (encrypted)
		r = wr_err_set(err, EPERM, "vm-disk: the disk is encrypted");
	else if (corrupt)
		r = wr_err_set(err, EPERM, "vm-disk: the qcow2 disk is marked corrupt");
	else if (v <= 0)
		r = wr_err_set(err, EPERM, "vm-disk: no virtual size");
	else if ((uint64_t)v > max)
		r = wr_err_set(err, EFBIG,
			       "vm-disk: a virtual size of %lld bytes is over the limit of %llu "
			       "(image_store.max_unpacked)",
			       (long long)v, (unsigned long long)max);
	json_decref(j);
	if (r < 0)
		return r;
	*vsize = (uint64_t)v;
	if (strcmp(fmt, "qcow2") != 0)
		return 0;
	/* Exit 3: leaked clusters only, harmless for a read-only base. */
	static const int ok_check[] = {0, 3, -1};
	char *check[] = {"qemu-img", "check", "-f", "qcow2", "--output=json", (char *)path, NULL};
	_cleanup_free_ char *ctext = NULL;
	r = run_qemu_img(check, ok_check, &ctext, &code, err);
	return r < 0 ? wr_err_wrap(err, "vm-disk: qemu-img check found damage") : 0;
}

/* ---- firmware ------------------------------------------------------------ */

#define GPT_HEAD_BYTES (1u << 20) /* the partition table is looked for here */

static uint64_t le(const unsigned char *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

bool wr_image_firmware_ok(const char *fw)
{
	return strcmp(fw, "bios") == 0 || strcmp(fw, "uefi") == 0 || strcmp(fw, "uefi-secure") == 0;
}

/* "uefi" for a GPT disk with an EFI system partition and no BIOS boot
 * partition (GRUB's for BIOS on GPT), else "bios" (MBR disks, hybrid GPT
 * disks that boot both ways: SeaBIOS is the default). head: the disk's
 * first bytes as the guest sees them, 512-byte sectors. */
const char *wri_vmdisk_firmware(const unsigned char *head, size_t len)
{
	static const unsigned char esp[16] = {0x28, 0x73, 0x2a, 0xc1, 0x1f, 0xf8, 0xd2, 0x11,
					      0xba, 0x4b, 0x00, 0xa0, 0xc9, 0x3e, 0xc9, 0x3b};
	static const unsigned char bios_boot[16] = "Hah!IdontNeedEFI";
	if (len < 1024 || memcmp(head + 512, "EFI PART", 8) != 0)
		return "bios";
	uint64_t lba = le(head + 512 + 72, 8), n = le(head + 512 + 80, 4),
		 size = le(head + 512 + 84, 4);
	if (size < 128 || size > 4096 || n > 4096 || lba < 2 || lba > len / 512)
		return "bios";
	bool has_esp = false, has_bios = false;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t off = lba * 512 + i * size;
		if (off + 16 > len)
			break;
		has_esp = has_esp || memcmp(head + off, esp, 16) == 0;
		has_bios = has_bios || memcmp(head + off, bios_boot, 16) == 0;
	}
	return has_esp && !has_bios ? "uefi" : "bios";
}

/* The staged disk's first GPT_HEAD_BYTES as the guest sees them: read as
 * they are from a raw file; a qcow2 file through qemu-img dd (explicit
 * format, into the stage). */
static int disk_head(struct wri_stage *st, const char *dir, int bfd, bool qcow2,
		     unsigned char **head, size_t *len, wr_err *err)
{
	unsigned char *b = calloc(1, GPT_HEAD_BYTES);
	if (b == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	ssize_t n;
	if (!qcow2) {
		n = pread(bfd, b, GPT_HEAD_BYTES, 0);
	} else {
		_cleanup_free_ char *in = NULL, *out = NULL, *ifa = NULL, *ofa = NULL, *text = NULL;
		int code;
		static const int ok[] = {0, -1};
		if (asprintf(&in, "%s/blob", dir) < 0 || asprintf(&out, "%s/head.raw", dir) < 0 ||
		    asprintf(&ifa, "if=%s", in) < 0 || asprintf(&ofa, "of=%s", out) < 0) {
			free(b);
			return wr_err_set(err, ENOMEM, "out of memory");
		}
		char count[32];
		snprintf(count, sizeof(count), "count=%u", GPT_HEAD_BYTES / 512);
		char *argv[] = {"qemu-img", "dd",  "-f", "qcow2", "-O", "raw",
				"bs=512",   count, ifa,	 ofa,	  NULL};
		if (run_qemu_img(argv, ok, &text, &code, err) < 0) {
			free(b);
			return wr_err_wrap(err, "vm-disk: reading its partition table");
		}
		_cleanup_close_ int h =
		    openat(st->fd, "head.raw", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		n = h < 0 ? -1 : pread(h, b, GPT_HEAD_BYTES, 0);
		unlinkat(st->fd, "head.raw", 0);
	}
	if (n < 0) {
		free(b);
		return wr_err_sys(err, "vm-disk: reading its partition table");
	}
	*head = b;
	*len = (size_t)n;
	return 0;
}

int wri_import_vmdisk(struct wr_image_store *s, struct wri_stage *st, int fd, const char *label,
		      const struct wr_image_import_opts *o, struct wr_image **out, wr_err *err)
{
	uint64_t max = s->o.max_unpacked_bytes;
	const char *fw = o ? o->firmware : NULL;
	if (fw && !wr_image_firmware_ok(fw))
		return wr_err_field(err, "firmware",
				    "firmware: bios, uefi or uefi-secure, not '%s'", fw);
	struct stat in;
	if (fstat(fd, &in) == 0 && S_ISREG(in.st_mode) && (uint64_t)in.st_size > max)
		return wr_err_set(err, EFBIG,
				  "vm-disk: %lld bytes is over the limit of %llu "
				  "(image_store.max_unpacked)",
				  (long long)in.st_size, (unsigned long long)max);
	char digest[WR_IMAGE_DIGEST_LEN + 1];
	uint64_t size = 0;
	int r = wri_copy_fd(fd, st->fd, "blob", digest, &size, err);
	if (r < 0)
		return wr_err_wrap(err, "vm-disk: copy");
	_cleanup_close_ int bfd = openat(st->fd, "blob", O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (bfd < 0)
		return wr_err_sys(err, "vm-disk: staged copy");
	if (size == 0)
		return wr_err_set(err, EPERM, "vm-disk: the disk file is empty");
	if (size > max)
		return wr_err_set(err, EFBIG, "vm-disk: over the limit of %llu bytes",
				  (unsigned long long)max);
	unsigned char magic[4] = {0};
	bool qcow2 = pread(bfd, magic, 4, 0) == 4 && memcmp(magic, QCOW2_MAGIC, 4) == 0;
	const char *fmt = qcow2 ? "qcow2" : "raw";
	uint64_t hdr_vsize = size, vsize = 0;
	if (qcow2 && (r = check_qcow2_header(bfd, &hdr_vsize, err)) < 0)
		return r;
	if (hdr_vsize > max)
		return wr_err_set(err, EFBIG,
				  "vm-disk: a virtual size of %llu bytes is over the limit of %llu "
				  "(image_store.max_unpacked)",
				  (unsigned long long)hdr_vsize, (unsigned long long)max);
	_cleanup_free_ char *path = NULL;
	if (asprintf(&path, "%s/tmp/%s/blob", s->dir, st->name) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	if ((r = qemu_img_verify(path, fmt, max, &vsize, err)) < 0)
		return r;
	if (fw == NULL) {
		_cleanup_free_ char *dir = NULL;
		unsigned char *head = NULL;
		size_t hl = 0;
		if (asprintf(&dir, "%s/tmp/%s", s->dir, st->name) < 0)
			return wr_err_set(err, ENOMEM, "out of memory");
		if ((r = disk_head(st, dir, bfd, qcow2, &head, &hl, err)) < 0)
			return r;
		fw = wri_vmdisk_firmware(head, hl);
		free(head);
	}
	if (fchmodat(st->fd, "blob", 0444, 0) < 0)
		return wr_err_sys(err, "vm-disk: chmod");
	json_t *disk = json_pack("{s:s, s:I, s:s}", "format", fmt, "virtual_size",
				 (json_int_t)vsize, "firmware", fw);
	_cleanup_free_ char *source = NULL;
	if (disk == NULL || asprintf(&source, "vm-disk:%s", label ? label : "upload") < 0) {
		json_decref(disk);
		return wr_err_set(err, ENOMEM, "out of memory");
	}
	struct wri_new n = {
	    .digest = digest,
	    .size = size,
	    .source = o && o->source ? o->source : source,
	    .disk = disk,
	    .stagefd = st->fd,
	    .tmp_name = "blob",
	    .complete = true,
	};
	r = wri_commit_image(s, &n, o ? o->ref : NULL, out, err);
	json_decref(disk);
	return r;
}
