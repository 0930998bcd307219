#include "tiers/tier.h"

#include <stdlib.h>
#include <string.h>

#include "tiers/container.h"

const char *wr_exit_reason_name(enum wr_exit_reason r)
{
	switch (r) {
	case WR_EXIT_EXITED: return "exited";
	case WR_EXIT_SIGNALED: return "signaled";
	case WR_EXIT_TIMEOUT: return "timeout";
	case WR_EXIT_OOM: return "oom";
	case WR_EXIT_KILLED: return "killed";
	case WR_EXIT_START_FAILED: return "start_failed";
	}
	return "unknown";
}

void wr_exec_result_free(struct wr_exec_result *r)
{
	free(r->out);
	free(r->err);
	r->out = r->err = NULL;
}

const struct wr_tier_ops *wr_tier_lookup(const char *name)
{
	if (name == NULL || strcmp(name, "container") == 0)
		return &wr_container_tier;
	return NULL;
}
