/* Landlock: filesystem access limited to the sandbox's own tree, abstract
 * unix sockets and signals scoped to the sandbox.
 *
 * Child half only: call after the process is in its final mount namespace
 * and root (after pivot_root or setns), after no_new_privs, before seccomp.
 * The ruleset allows every filesystem access beneath "/" as seen by the
 * caller, i.e. the sandbox root; anything reached through a path or fd that
 * is not beneath it (a leaked host fd, a magic link) is refused.
 * Degrades by ABI: handles what the running kernel knows (ABI 1..7). */
#ifndef WARREN_ISOLATE_LANDLOCK_H
#define WARREN_ISOLATE_LANDLOCK_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"

struct wr_landlock_policy {
	bool scope_signals;	  /* ABI 6: signals only within the domain */
	bool scope_abstract_unix; /* ABI 6: abstract sockets only within the domain */
	/* ABI 7: audit-log denials (default on). The workload runs after
	 * execve, so true means LOG_NEW_EXEC_ON (the kernel's default logs
	 * only until exec); false means LOG_SAME_EXEC_OFF (nothing logged). */
	bool log_denials;
};

/* The running kernel's ABI (0 when Landlock is unavailable). Cached. */
int wr_landlock_abi(void);

/* Child half: build the ruleset and restrict the calling thread. Never
 * allocates. Requires no_new_privs (or CAP_SYS_ADMIN), else -EPERM.
 * Returns -ENOSYS/-EOPNOTSUPP if Landlock is unavailable. */
int wr_landlock_apply(const struct wr_landlock_policy *p, struct wr_cerr *e);

/* The two halves of wr_landlock_apply, for a ruleset made once and applied
 * by many processes (the function tier's zygote makes it once, in its final
 * root; every call restricts itself with it, which gives each call a domain
 * of its own). wr_landlock_ruleset returns the ruleset fd (close-on-exec)
 * and the flags to pass to wr_landlock_restrict. Never allocate. */
int wr_landlock_ruleset(const struct wr_landlock_policy *p, uint32_t *restrict_flags,
			struct wr_cerr *e);
/* The same ruleset with root (an O_PATH directory fd) as the tree every
 * access is allowed beneath, from outside the sandbox: a checkpoint's
 * restore gives the restored processes the domain their commands made
 * with "/" (container_ckpt.c), the sandbox root being the same dentry
 * (warren's CRIU adds rules for its own fds of the images and /proc, which
 * the restore still uses after the domain is entered). */
int wr_landlock_ruleset_at(const struct wr_landlock_policy *p, int root, uint32_t *restrict_flags,
			   struct wr_cerr *e);
int wr_landlock_restrict(int ruleset_fd, uint32_t restrict_flags, struct wr_cerr *e);

#endif
