/* See cgroup_fixture.h. */
#include "cgroup_fixture.h"

#include <stdlib.h>

int cgfx_root_open(const char *base, enum flavour fl, enum wr_cg_ctrl need_v1,
		   struct wr_cgroup_root **root, wr_err *e)
{
	if (fl == HYBRID) {
		if (wr_cgroup_root_open(base, root, e) < 0) {
			wr_err_wrap(e, "root open");
			return -1;
		}
		return 0;
	}
	struct wr_cgroup_layout lay;
	if (wr_cgroup_layout_detect(&lay, 0, e) < 0) {
		wr_err_wrap(e, "layout");
		return -1;
	}
	if (fl == V1) {
		if (lay.mode != WR_CG_V1 ||
		    (need_v1 != WR_CG_NCTRL && lay.v1_dir[need_v1] == NULL)) {
			wr_cgroup_layout_free(&lay);
			return 0; /* no v1 (or not that controller) here: the tests skip */
		}
		free(lay.v2_dir); /* hide the unified hierarchy */
		lay.v2_dir = NULL;
	} else {
		if (lay.v2_dir == NULL) {
			wr_cgroup_layout_free(&lay);
			return 0;
		}
		for (int c = 0; c < WR_CG_NCTRL; c++) {
			free(lay.v1_dir[c]);
			lay.v1_dir[c] = NULL;
		}
		lay.mode = WR_CG_V2;
		lay.require_v2_controllers = false;
		lay.v2_skip_absent_limits = fl == V2_NO_LIMITS;
	}
	int r = wr_cgroup_root_open_at(&lay, base, root, e);
	wr_cgroup_layout_free(&lay);
	if (r < 0) {
		wr_err_wrap(e, "root open");
		return -1;
	}
	return 0;
}
