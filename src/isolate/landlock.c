/* Landlock: everything beneath the sandbox root, nothing outside it.
 *
 * The ruleset handles every filesystem right the running kernel knows and
 * grants all of them beneath "/" as the caller sees it (the sandbox root,
 * since the caller has already pivoted). So paths inside the sandbox work as
 * if Landlock were absent, and the only thing it refuses is reaching a file
 * by a route that does not pass beneath that root: an inherited or leaked fd
 * of a host directory, a magic link into another mount namespace, a file
 * handle. Network rights are not handled (the sandbox has its own network
 * namespace; egress policy is a separate module).
 *
 * Raw syscalls only, no allocation: this runs between clone and exec. */
#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "isolate/landlock.h"

#ifndef LANDLOCK_CREATE_RULESET_VERSION
#define LANDLOCK_CREATE_RULESET_VERSION (1U << 0)
#endif
#ifndef LANDLOCK_ACCESS_FS_REFER
#define LANDLOCK_ACCESS_FS_REFER (1ULL << 13) /* ABI 2 */
#endif

/* ABI 1: EXECUTE .. MAKE_SYM, bits 0-12. */
#define WR_LL_FS_ABI1 ((1ULL << 13) - 1)

static int landlock_create_ruleset(const struct wr_landlock_ruleset_attr *attr, size_t size,
				   uint32_t flags)
{
	return (int)syscall(__NR_landlock_create_ruleset, attr, size, flags);
}
static int landlock_add_rule(int fd, int type, const void *attr, uint32_t flags)
{
	return (int)syscall(__NR_landlock_add_rule, fd, type, attr, flags);
}
static int landlock_restrict_self(int fd, uint32_t flags)
{
	return (int)syscall(__NR_landlock_restrict_self, fd, flags);
}

/* >0: the ABI; 0: not probed yet; <0: -errno of the probe (ENOSYS: not
 * built in; EOPNOTSUPP: disabled at boot). A plain atomic int: probing twice
 * from two threads is harmless, and the child half can probe without a lock. */
static int wr_ll_abi_cache;

static int probe_abi(void)
{
	int v = __atomic_load_n(&wr_ll_abi_cache, __ATOMIC_ACQUIRE);
	if (v != 0)
		return v;
	v = landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
	if (v <= 0)
		v = -(v < 0 && errno ? errno : EOPNOTSUPP);
	__atomic_store_n(&wr_ll_abi_cache, v, __ATOMIC_RELEASE);
	return v;
}

int wr_landlock_abi(void)
{
	int v = probe_abi();
	return v > 0 ? v : 0;
}

static uint64_t fs_rights(int abi)
{
	uint64_t r = WR_LL_FS_ABI1;
	if (abi >= 2)
		r |= LANDLOCK_ACCESS_FS_REFER;
	if (abi >= 3)
		r |= LANDLOCK_ACCESS_FS_TRUNCATE;
	if (abi >= 5)
		r |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
	return r;
}

int wr_landlock_ruleset(const struct wr_landlock_policy *p, uint32_t *restrict_flags,
			struct wr_cerr *e)
{
	/* Invariant: the caller is already in its final root (pivot_root or
	 * setns done), so "/" here is the sandbox root and not the host's. */
	_cleanup_close_ int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (root < 0)
		return wr_cerr_sys(e, "landlock: open /");
	return wr_landlock_ruleset_at(p, root, restrict_flags, e);
}

int wr_landlock_ruleset_at(const struct wr_landlock_policy *p, int root, uint32_t *restrict_flags,
			   struct wr_cerr *e)
{
	if (p == NULL)
		return wr_cerr_set(e, EINVAL, "landlock: no policy");
	int abi = probe_abi();
	if (abi < 0)
		return wr_cerr_set(e, -abi, "landlock: unavailable (errno %d)", -abi);

	struct wr_landlock_ruleset_attr attr = {
	    .handled_access_fs = fs_rights(abi),
	    .handled_access_net = 0, /* network: netns + the egress module */
	    .scoped = 0,
	};
	/* Pass exactly the attribute prefix this ABI knows: ABI 1-3 take only
	 * handled_access_fs, 4-5 add handled_access_net, 6+ add scoped. */
	size_t size = offsetof(struct wr_landlock_ruleset_attr, handled_access_net);
	if (abi >= 4)
		size = offsetof(struct wr_landlock_ruleset_attr, scoped);
	if (abi >= 6) {
		size = sizeof(attr);
		if (p->scope_abstract_unix)
			attr.scoped |= LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET;
		if (p->scope_signals)
			attr.scoped |= LANDLOCK_SCOPE_SIGNAL;
	}

	_cleanup_close_ int rfd = landlock_create_ruleset(&attr, size, 0);
	if (rfd < 0)
		return wr_cerr_sys(e, "landlock: create ruleset (ABI %d)", abi);

	struct landlock_path_beneath_attr beneath = {
	    .allowed_access = attr.handled_access_fs,
	    .parent_fd = root,
	};
	if (landlock_add_rule(rfd, LANDLOCK_RULE_PATH_BENEATH, &beneath, 0) < 0)
		return wr_cerr_sys(e, "landlock: add rule for /");

	/* Audit logging (ABI 7). By default the kernel logs denials only until
	 * the restricted task execs, i.e. only our own setup code; the denials
	 * worth seeing are the workload's, after exec, so log_denials asks for
	 * NEW_EXEC_ON. Without it we also silence the (short) pre-exec part. */
	*restrict_flags = 0;
	if (abi >= 7)
		*restrict_flags = p->log_denials ? LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON
						 : LANDLOCK_RESTRICT_SELF_LOG_SAME_EXEC_OFF;
	return steal_fd(&rfd);
}

int wr_landlock_restrict(int ruleset_fd, uint32_t restrict_flags, struct wr_cerr *e)
{
	/* Invariant: no_new_privs is already set (or the caller holds
	 * CAP_SYS_ADMIN); otherwise the kernel answers EPERM here. */
	if (landlock_restrict_self(ruleset_fd, restrict_flags) < 0)
		return wr_cerr_sys(e, "landlock: restrict self");
	return 0;
}

int wr_landlock_apply(const struct wr_landlock_policy *p, struct wr_cerr *e)
{
	uint32_t flags;
	_cleanup_close_ int rfd = wr_landlock_ruleset(p, &flags, e);
	if (rfd < 0)
		return rfd;
	return wr_landlock_restrict(rfd, flags, e);
}
