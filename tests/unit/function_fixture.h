/* Shared set-up of the function tier's unit tests: a private state dir,
 * run dir and cgroup base, the container and function tiers initialised,
 * and teardown that removes every pool, cgroup and temp file. */
#ifndef WARREN_TESTS_FUNCTION_FIXTURE_H
#define WARREN_TESTS_FUNCTION_FIXTURE_H

#include <stdbool.h>

#include "tiers/container.h"
#include "tiers/function.h"

int fx_setup(const char *prefix);
int fx_teardown(void);
const char *fx_image(void);
const char *fx_base(void);
struct wr_function_pool *fx_pool(const char *image, const char *language,
				 const char *const *preload, size_t n_preload, const char *tenant);
/* A call that must not fail as a call (its result may be anything). */
struct wr_call_result fx_call(struct wr_function_pool *p, const struct wr_call_spec *spec);
/* Processes in cgroups beneath our base (all hierarchies' unified view). */
int fx_count_procs(void);
/* Leaf cgroups beneath a pool, summed over the hierarchies. */
int fx_count_cgroups(void);
/* The same once it holds still for half a second (a refill thread may be
 * recycling or removing leaves in the background), at most 30 s. */
int fx_settled_cgroups(void);
/* Can pools recycle their leaves here? Not where memory is on cgroup v2
 * (pure v2) and the kernel cannot reset memory.peak (Linux < 6.12). */
bool fx_peak_resettable(void);

#endif
