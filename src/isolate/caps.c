/* Capabilities: the uid/gid switch and the five capability sets.
 *
 * Child half only, raw syscalls, no allocation. The set*id calls are raw
 * syscalls on purpose: glibc's wrappers broadcast the change to every thread
 * they believe exists (the setxid signal dance), and a child made with a raw
 * clone from a multi-threaded parent inherits that belief but not the
 * threads. Here the change must apply to the calling thread only, which is
 * the whole process. */
#include <errno.h>
#include <linux/capability.h>
#include <stdbool.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "isolate/caps.h"

#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_RAISE 2
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif

/* The "root" set: what root inside its own user namespace needs to behave
 * like root for package managers and build tools, and nothing that reaches
 * beyond the sandbox's own files and processes.
 *   CAP_CHOWN             chown files to other sandbox uids (dpkg, tar -p)
 *   CAP_DAC_OVERRIDE      read/write files regardless of mode bits
 *   CAP_FOWNER            chmod/utime/xattrs on files root does not own
 *   CAP_FSETID            keep setgid bits when writing/chowning (tar, dpkg)
 *   CAP_KILL              signal the sandbox's processes of other uids
 *   CAP_SETGID, CAP_SETUID  drop to service users (apt's _apt, su, runuser)
 *   CAP_SETFCAP           install packages whose files carry capabilities
 *   CAP_NET_BIND_SERVICE  bind ports < 1024 inside the sandbox's netns
 * Deliberately absent: CAP_SYS_CHROOT (chroot is refused by seccomp anyway),
 * CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_NET_RAW, CAP_MKNOD, CAP_SYS_PTRACE,
 * CAP_DAC_READ_SEARCH (open_by_handle_at), CAP_AUDIT_WRITE, CAP_SETPCAP. */
const uint64_t WR_CAPS_ROOT_SET =
    WR_CAP_BIT(CAP_CHOWN) | WR_CAP_BIT(CAP_DAC_OVERRIDE) | WR_CAP_BIT(CAP_FOWNER) |
    WR_CAP_BIT(CAP_FSETID) | WR_CAP_BIT(CAP_KILL) | WR_CAP_BIT(CAP_SETGID) |
    WR_CAP_BIT(CAP_SETUID) | WR_CAP_BIT(CAP_SETFCAP) | WR_CAP_BIT(CAP_NET_BIND_SERVICE);

int wr_capset_parse(const char *s, enum wr_capset *out)
{
	if (s == NULL)
		return -EINVAL;
	if (strcmp(s, "none") == 0) {
		*out = WR_CAPSET_NONE;
		return 0;
	}
	if (strcmp(s, "root") == 0) {
		*out = WR_CAPSET_ROOT;
		return 0;
	}
	return -EINVAL;
}

uint64_t wr_capset_mask(enum wr_capset set)
{
	return set == WR_CAPSET_ROOT ? WR_CAPS_ROOT_SET : 0;
}

static int set_caps(uint64_t eff, uint64_t perm, uint64_t inh)
{
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {
	    {(uint32_t)eff, (uint32_t)perm, (uint32_t)inh},
	    {(uint32_t)(eff >> 32), (uint32_t)(perm >> 32), (uint32_t)(inh >> 32)},
	};
	return (int)syscall(SYS_capset, &hdr, data);
}

int wr_caps_drop_bounding(uint64_t keep, struct wr_cerr *e)
{
	/* Drop every cap not kept, up to the kernel's last, found without
	 * reading /proc: CAPBSET_DROP answers EINVAL past it (and 0 for a cap
	 * already dropped), so one call per cap does, with no CAPBSET_READ. A
	 * kept cap is always a valid one (keep is a subset of our own sets). */
	for (int cap = 0;; cap++) {
		if (cap < 64 && (keep & WR_CAP_BIT(cap)))
			continue;
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
			if (errno == EINVAL && cap > 0)
				break;
			return wr_cerr_sys(e, "caps: drop bounding cap %d", cap);
		}
	}
	return 0;
}

static int switch_user(uid_t uid, gid_t gid, uint64_t keep, bool bounded, struct wr_cerr *e)
{
	/* Ordering: every step below needs a capability that a later step
	 * removes, so the order is fixed:
	 *  1. groups and gid: need CAP_SETGID;
	 *  2. bounding set: PR_CAPBSET_DROP needs CAP_SETPCAP in the effective
	 *     set, which setresuid to a non-zero uid clears;
	 *  3. uid, with KEEPCAPS so a non-zero uid keeps the permitted set;
	 *  4. capset eff = perm = inh = keep: needs keep within permitted (kept
	 *     by 3) and inheritable within bounding (done in 2);
	 *  5. ambient: each raised cap must be permitted and inheritable (4). */
	gid_t groups[1] = {gid};
	if (syscall(SYS_setgroups, 1, groups) < 0)
		return wr_cerr_sys(e, "caps: setgroups(%u)", (unsigned int)gid);
	if (syscall(SYS_setresgid, gid, gid, gid) < 0)
		return wr_cerr_sys(e, "caps: setresgid(%u)", (unsigned int)gid);

	if (!bounded && wr_caps_drop_bounding(keep, e) < 0)
		return -1;

	/* With nothing to keep, KEEPCAPS has nothing to keep: step 4 empties
	 * every set anyway. */
	if (keep && prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0)
		return wr_cerr_sys(e, "caps: set keepcaps");
	if (syscall(SYS_setresuid, uid, uid, uid) < 0)
		return wr_cerr_sys(e, "caps: setresuid(%u)", (unsigned int)uid);
	/* execve clears KEEPCAPS too; clear it now so nothing before exec
	 * depends on it. */
	if (keep && prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0) < 0)
		return wr_cerr_sys(e, "caps: clear keepcaps");

	if (set_caps(keep, keep, keep) < 0)
		return wr_cerr_sys(e, "caps: capset 0x%llx", (unsigned long long)keep);

	/* capset leaves only ambient caps that are both permitted and
	 * inheritable: with keep 0 that is none already, without this call. */
	if (keep && prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
		return wr_cerr_sys(e, "caps: clear ambient set");
	/* uid 0 needs no ambient caps: at execve root gets inheritable |
	 * bounding, both exactly `keep`. Any other uid loses every cap at
	 * execve unless it is ambient. */
	if (uid != 0) {
		for (int cap = 0; cap < 64; cap++) {
			if (!(keep & WR_CAP_BIT(cap)))
				continue;
			if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) < 0)
				return wr_cerr_sys(e, "caps: raise ambient cap %d", cap);
		}
	}
	return 0;
}

int wr_caps_switch_user(uid_t uid, gid_t gid, uint64_t keep, struct wr_cerr *e)
{
	return switch_user(uid, gid, keep, false, e);
}

int wr_caps_switch_user_bounded(uid_t uid, gid_t gid, uint64_t keep, struct wr_cerr *e)
{
	return switch_user(uid, gid, keep, true, e);
}
