/* Keep the kernel's cgroup-BPF hooks switched on between sandboxes.
 *
 * Every create attaches the network filter's six programs to the sandbox's
 * cgroup and every kill detaches them (netenforce.c). The kernel guards each
 * cgroup hook with a static key counted per attached program: the first
 * attachment of a hook type on the host patches the kernel's text to turn
 * the hook on, the last detachment patches it off again, each a
 * machine-wide text poke with IPIs to every CPU. A daemon whose sandboxes
 * come and go one at a time (the API benchmark at concurrency 1, a quiet
 * node) paid twelve such pokes per sandbox: the filter's attach took
 * 4.8 ms of a 10 ms create on a loaded 2-CPU host, 0.36 ms with the keys
 * held on (bench/results/api.md).
 *
 * So the daemon holds one attachment (mode none: refuse everything) on an
 * empty cgroup of its own, <base>/bpf-anchor, for as long as it runs. No
 * process ever joins it, so the programs never run there; the static keys
 * just stay counted up. It costs the host what any live sandbox already
 * costs: the hooks' checks on socket calls of processes outside every
 * sandbox (an empty program array each).
 *
 * Crash safety: the links are fds of this process, gone with it; the
 * directory is not a live sandbox's, so the next start's sweep
 * (wr_container_sweep, before this runs) removes it. */
#include "daemon/hookwarm.h"

#include <stddef.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "daemon/netpolicy.h"
#include "isolate/cgroup.h"

#define ANCHOR "bpf-anchor"

static struct wr_cgroup_root *g_root;
static struct wr_cgroup *g_cg;
static struct wr_netfilter_att *g_att;

void wrd_hookwarm_start(const char *cgroup_base)
{
	if (!wrd_nf_enabled())
		return;
	_cleanup_err_ wr_err err = NULL;
	if (wr_cgroup_root_open(cgroup_base, &g_root, &err) < 0 ||
	    wr_cgroup_create(g_root, ANCHOR, NULL, &g_cg, &err) < 0) {
		/* only creates get slower: said, not fatal */
		wr_warn("cgroup hooks: %s/%s: %s", cgroup_base, ANCHOR, err->msg);
		wrd_hookwarm_stop();
		return;
	}
	int fd = wr_cgroup_v2_fd(g_cg);
	if (fd < 0) {
		wrd_hookwarm_stop(); /* no v2 cgroups: no filter to warm */
		return;
	}
	if (wrd_nf_attach_idle(fd, &g_att, &err) < 0) {
		wr_warn("cgroup hooks: %s", err->msg);
		wrd_hookwarm_stop();
	}
}

void wrd_hookwarm_stop(void)
{
	wrd_nf_detach_idle(&g_att);
	if (g_cg) {
		_cleanup_err_ wr_err err = NULL;
		if (wr_cgroup_destroy(&g_cg, &err) < 0)
			wr_warn("cgroup hooks: %s", err->msg);
	}
	if (g_root)
		wr_cgroup_root_close(g_root);
	g_root = NULL;
}
