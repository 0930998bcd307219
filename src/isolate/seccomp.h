/* seccomp: the syscall allowlist.
 *
 * Parent half: wr_seccomp_get() compiles a profile with libseccomp once per
 * process and caches the resulting BPF program (thread-safe).
 * Child half: wr_seccomp_load() installs a ready program; it never
 * allocates and is safe between clone and exec. It must be the LAST step
 * before execve (after no_new_privs, Landlock and close_range), because
 * after it the profile also governs the setup code itself.
 *
 * Actions of the default profile:
 *   - syscalls on the deny list (ptrace, mount family, bpf, unshare, setns,
 *     ...; see wr_seccomp_denied_names()) -> EPERM whatever the arguments
 *   - clone3 -> ENOSYS (libcs fall back to clone, whose flags we can filter)
 *   - clone with any CLONE_NEW* flag -> EPERM
 *   - ioctl FICLONE, FICLONERANGE, FIDEDUPERANGE, FIBMAP, XFS swapext,
 *     XFS exchange-range (any size/direction), TIOCSTI, TIOCLINUX -> EPERM
 *   - socket(AF_VSOCK) -> EPERM; personality other than Docker's harmless
 *     values -> EPERM
 *   - any syscall not on the allowlist (unknown or new) -> ENOSYS
 *   - non-native architectures (i386, x32) -> process killed
 * The init profile is a separate, much smaller allowlist (everything else
 * EPERM); see seccomp.c for what warren-init may call.
 */
#ifndef WARREN_ISOLATE_SECCOMP_H
#define WARREN_ISOLATE_SECCOMP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

enum wr_seccomp_profile {
	WR_SECCOMP_DEFAULT = 0, /* containers and function calls */
	WR_SECCOMP_INIT,	/* warren-init: only what a reaper needs, else EPERM */
	WR_SECCOMP_NPROFILES,
};

struct wr_seccomp_prog; /* a compiled filter (struct sock_fprog inside) */

/* Compile (first call) or fetch (later calls) the program for a profile. */
int wr_seccomp_get(enum wr_seccomp_profile profile, const struct wr_seccomp_prog **out,
		   wr_err *err);

/* Child half: install the program on the calling thread with TSYNC off.
 * Requires no_new_privs already set (or CAP_SYS_ADMIN). */
int wr_seccomp_load(const struct wr_seccomp_prog *prog, struct wr_cerr *e);

/* The compiled program as classic BPF instructions (struct sock_filter,
 * 8 bytes each), for a process that cannot share our memory: the function
 * tier hands them to its zygotes, which load them per call with
 * wr_seccomp_load_insns (same rules as wr_seccomp_load). */
void wr_seccomp_prog_insns(const struct wr_seccomp_prog *prog, const void **insns, size_t *n);
int wr_seccomp_load_insns(const void *insns, size_t n, struct wr_cerr *e);

/* Refusals are logged by the kernel (SECCOMP_FILTER_FLAG_LOG at load: an
 * AUDIT_SECCOMP record per refused call, read by warrend's audit). On by
 * default; set before the first create (children read it after clone). */
void wr_seccomp_set_log(bool on);
/* The errno the default profile answers syscall nr with when it refuses
 * it: EPERM (deny list, argument filters), ENOSYS (clone3, not allowed). */
int wr_seccomp_refusal_errno(int nr);

/* For tests and docs: the names of the syscalls the profile refuses with
 * EPERM, NULL-terminated. */
const char *const *wr_seccomp_denied_names(void);

#endif
