/* Capabilities: none by default; an opt-in "root" set for workloads such as
 * apt-get that need to act as root inside their user namespace.
 *
 * Child half: runs after the uid/gid switch (setresuid drops permitted caps
 * for non-root uids unless ambient ones are raised, so this function raises
 * ambient caps when the target uid is not 0). Never allocates. Sets the
 * bounding set to exactly `keep` as well, so no later exec can gain more. */
#ifndef WARREN_ISOLATE_CAPS_H
#define WARREN_ISOLATE_CAPS_H

#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

#define WR_CAP_BIT(c) (1ULL << (c))

/* CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_FSETID, CAP_KILL,
 * CAP_SETGID, CAP_SETUID, CAP_SETFCAP, CAP_NET_BIND_SERVICE, CAP_SYS_CHROOT?
 * no: see caps.c for the exact list and why each is there. */
extern const uint64_t WR_CAPS_ROOT_SET;

enum wr_capset { WR_CAPSET_NONE = 0, WR_CAPSET_ROOT = 1 };
/* Parse "none" or "root". */
int wr_capset_parse(const char *s, enum wr_capset *out);
uint64_t wr_capset_mask(enum wr_capset set);

/* Child half: switch to uid/gid (and supplementary groups = {gid}) and
 * leave exactly `keep` in effective, permitted, inheritable, ambient and
 * bounding sets. Call before no_new_privs/Landlock/seccomp. */
int wr_caps_switch_user(uid_t uid, gid_t gid, uint64_t keep, struct wr_cerr *e);

/* The bounding-set step of wr_caps_switch_user alone: drop every cap not in
 * `keep` from the bounding set (needs CAP_SETPCAP). Inherited by every
 * process cloned or forked afterwards; it limits only what an execve can
 * grant, not the caps the caller holds now. */
int wr_caps_drop_bounding(uint64_t keep, struct wr_cerr *e);
/* wr_caps_switch_user without the bounding-set step, for a process whose
 * bounding set is within `keep` already: wr_caps_drop_bounding(k) with k a
 * subset of keep ran in it, or in an ancestor before it cloned or forked
 * this process, and no user namespace was entered or made in between (a
 * cloned process starts with its parent's set; only a new or entered user
 * namespace fills it again). The caller writes that invariant next to its
 * call. */
int wr_caps_switch_user_bounded(uid_t uid, gid_t gid, uint64_t keep, struct wr_cerr *e);

#endif
