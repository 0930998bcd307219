/* rlimits: per-process bounds that complement the cgroup limits. */
#ifndef WARREN_ISOLATE_RLIMIT_H
#define WARREN_ISOLATE_RLIMIT_H

#include <stdint.h>

#include "common/error.h"

#define WR_RLIM_UNSET UINT64_MAX

/* Every limit is applied with soft = hard. UNSET leaves a limit as the
 * child inherited it (the daemon's: normally unlimited), except core. */
struct wr_rlimits {
	uint64_t nofile;   /* soft = hard; default 1024 */
	uint64_t core;	   /* always 0 unless set (UNSET also means 0) */
	uint64_t fsize;	   /* bytes; UNSET = unlimited */
	uint64_t cpu_secs; /* UNSET = unlimited (function tier sets it) */
	uint64_t stack;	   /* UNSET = inherit */
};

void wr_rlimits_default(struct wr_rlimits *r);
/* Child half: apply; never allocates. Also always sets RLIMIT_RTPRIO to 0
 * (no real-time scheduling whatever the daemon inherited). */
int wr_rlimits_apply(const struct wr_rlimits *r, struct wr_cerr *e);

#endif
