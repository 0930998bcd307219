/* Shared set-up of the cgroup unit tests (test_cgroup*.c): a test root
 * opened on this machine's hierarchies as one flavour of cgroup layout. */
#ifndef WARREN_TESTS_CGROUP_FIXTURE_H
#define WARREN_TESTS_CGROUP_FIXTURE_H

#include "common/error.h"
#include "isolate/cgroup.h"
#include "isolate/cgroup_internal.h"

enum flavour { HYBRID, V1, V2, V2_NO_LIMITS };

/* Open the root named base as flavour fl: HYBRID as the machine has it, V1
 * with the unified hierarchy hidden (and the v1 controller need_v1 mounted,
 * unless need_v1 is WR_CG_NCTRL), V2 with the v1 controllers hidden;
 * V2_NO_LIMITS as V2, limits of absent controllers left out (not refused),
 * for tests of a tier on an emulated pure v2 host.
 * 0 with *root left NULL when the machine has no such flavour (the tests
 * skip); -1 with *e ("layout: ..." or "root open: ...") on a failure. */
int cgfx_root_open(const char *base, enum flavour fl, enum wr_cg_ctrl need_v1,
		   struct wr_cgroup_root **root, wr_err *e);

/* In a test (cmocka): skip when the fixture found no such flavour here. */
#define NEED_ROOT(fx)                                                                              \
	do {                                                                                       \
		if ((fx)->root == NULL) {                                                          \
			print_message("no such hierarchy here\n");                                 \
			skip();                                                                    \
		}                                                                                  \
	} while (0)

#endif
