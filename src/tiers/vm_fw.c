/* The vm tier's firmware (vm.h): SeaBIOS (bios), OVMF (uefi) or OVMF with
 * Secure Boot (uefi-secure), each from Debian's packages.
 *
 *   uefi         OVMF_CODE_4M.fd read-only pflash unit 0, the VM's own copy
 *                of OVMF_VARS_4M.fd (an empty variable store) as unit 1
 *   uefi-secure  OVMF_CODE_4M.ms.fd (Debian: a link to the secboot build,
 *                which keeps its variables behind SMM) with a copy of
 *                OVMF_VARS_4M.ms.fd (Microsoft's keys enrolled, Secure
 *                Boot on): machine q35,smm=on and the pflash chips in
 *                secure mode (-global cfi.pflash01.secure=on: only SMM code
 *                writes the variable store, so the guest's kernel cannot
 *                write around the firmware's checks)
 *
 * Every firmware file is opened here and passed to QEMU as an fd (-add-fd,
 * file=/dev/fdset/N): QEMU opens no firmware path. The VM's variable store
 * is <dir>/efivars.fd: as large as the template (pflash never grows its
 * file), removed with the VM's directory, saved next to the state of a VM
 * paused to disk or snapshotted and copied from there by its restore. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "tiers/vm.h"

static struct {
	char *code[3], *vars[3]; /* by enum wr_vm_firmware; [BIOS] unused */
} fw;

static const char *const fw_names[] = {"bios", "uefi", "uefi-secure"};

int wr_fullvm_fw_init(const struct wr_fullvm_config *cfg, wr_err *err)
{
	const char *c[3] = {NULL, "/usr/share/OVMF/OVMF_CODE_4M.fd",
			    "/usr/share/OVMF/OVMF_CODE_4M.ms.fd"};
	const char *v[3] = {NULL, "/usr/share/OVMF/OVMF_VARS_4M.fd",
			    "/usr/share/OVMF/OVMF_VARS_4M.ms.fd"};
	if (cfg && cfg->ovmf_code)
		c[WR_VM_FW_UEFI] = cfg->ovmf_code;
	if (cfg && cfg->ovmf_vars)
		v[WR_VM_FW_UEFI] = cfg->ovmf_vars;
	if (cfg && cfg->ovmf_secure_code)
		c[WR_VM_FW_UEFI_SECURE] = cfg->ovmf_secure_code;
	if (cfg && cfg->ovmf_secure_vars)
		v[WR_VM_FW_UEFI_SECURE] = cfg->ovmf_secure_vars;
	for (int i = WR_VM_FW_UEFI; i <= WR_VM_FW_UEFI_SECURE; i++) {
		free(fw.code[i]);
		free(fw.vars[i]);
		fw.code[i] = strdup(c[i]);
		fw.vars[i] = strdup(v[i]);
		if (fw.code[i] == NULL || fw.vars[i] == NULL)
			return wr_err_set(err, ENOMEM, "out of memory");
	}
	return 0;
}

int wr_fullvm_firmware_parse(const char *name, enum wr_vm_firmware *out)
{
	if (name == NULL) {
		*out = WR_VM_FW_BIOS;
		return 0;
	}
	for (size_t i = 0; i < WR_ARRAY_SIZE(fw_names); i++)
		if (strcmp(name, fw_names[i]) == 0) {
			*out = (enum wr_vm_firmware)i;
			return 0;
		}
	return -EINVAL;
}

const char *wr_fullvm_firmware_name(enum wr_vm_firmware f)
{
	return (unsigned)f < WR_ARRAY_SIZE(fw_names) ? fw_names[f] : "?";
}

const char *wr_fullvm_machine(enum wr_vm_firmware f)
{
	/* the secboot OVMF keeps its variable store behind SMM */
	return f == WR_VM_FW_UEFI_SECURE ? "q35,smm=on" : "q35";
}

/* OVMF as two pflash chips: the code read-only, the VM's own copy of the
 * variable store writable (both fds of ours: QEMU opens no firmware path;
 * the read-only fd of the store's set is for QEMU's read-only reopen). */
int wr_fullvm_uefi_args(char **argv, size_t max, size_t *n, enum wr_vm_firmware f, int code_fd,
			int vars_fd, int vars_ro_fd)
{
	const char *fmt[] = {"-add-fd", "fd=%d,set=3",
			     "-drive",	"if=pflash,unit=0,format=raw,readonly=on,file=/dev/fdset/3",
			     "-add-fd", "fd=%d,set=4",
			     "-add-fd", "fd=%d,set=4",
			     "-drive",	"if=pflash,unit=1,format=raw,file=/dev/fdset/4",
			     "-global", "driver=cfi.pflash01,property=secure,value=on"};
	int fdv[] = {0, code_fd, 0, 0, 0, vars_fd, 0, vars_ro_fd, 0, 0, 0, 0};
	size_t count = WR_ARRAY_SIZE(fmt) - (f == WR_VM_FW_UEFI_SECURE ? 0 : 2);
	if (f != WR_VM_FW_UEFI && f != WR_VM_FW_UEFI_SECURE)
		return -EINVAL;
	for (size_t i = 0; i < count; i++) {
		if (*n + 1 >= max)
			return -E2BIG;
		char *a = NULL;
		if ((fdv[i] ? asprintf(&a, fmt[i], fdv[i]) : asprintf(&a, "%s", fmt[i])) < 0)
			return -ENOMEM;
		argv[(*n)++] = a;
	}
	return 0;
}

int wr_fullvm_fw_files(int dfd, enum wr_vm_firmware f, const char *vars_from, int out[3],
		       wr_err *err)
{
	if (f != WR_VM_FW_UEFI && f != WR_VM_FW_UEFI_SECURE)
		return wr_err_set(err, EINVAL, "firmware %s has no files",
				  wr_fullvm_firmware_name(f));
	const char *from = vars_from ? vars_from : fw.vars[f];
	_cleanup_close_ int src = open(from, O_RDONLY | O_CLOEXEC);
	if ((out[0] = open(fw.code[f], O_RDONLY | O_CLOEXEC)) < 0 || src < 0)
		return wr_err_sys(err, "%s firmware %s%s", wr_fullvm_firmware_name(f),
				  out[0] < 0 ? fw.code[f] : from,
				  out[0] < 0 || !vars_from ? " (Debian: ovmf)" : "");
	_cleanup_close_ int dst =
	    openat(dfd, "efivars.fd", O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (dst < 0)
		return wr_err_sys(err, "efivars.fd");
	/* bounded: a variable store is a few hundred KiB (a saved one is the
	 * VM's own, at most this large) */
	char buf[65536];
	ssize_t k;
	off_t total = 0;
	while ((k = read(src, buf, sizeof(buf))) > 0) {
		if ((total += k) > (off_t)WR_VM_VARS_MAX)
			return wr_err_set(err, EFBIG, "%s: a variable store over %u bytes", from,
					  WR_VM_VARS_MAX);
		if (wr_write_all(dst, buf, (size_t)k) < 0)
			return wr_err_sys(err, "efivars.fd");
	}
	if (k < 0)
		return wr_err_sys(err, "read %s", from);
	if ((out[1] = openat(dfd, "efivars.fd", O_RDWR | O_CLOEXEC | O_NOFOLLOW)) < 0 ||
	    (out[2] = openat(dfd, "efivars.fd", O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0)
		return wr_err_sys(err, "efivars.fd");
	return 0;
}
