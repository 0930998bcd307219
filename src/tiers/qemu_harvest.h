/* CPU and memory harvesting of one QEMU (both VM tiers, daemon/harvest.c
 * through tier.h's cpu_time, cpu_share and idle_memory).
 *
 * CPU: a VM is its QEMU's cgroup vm-<id> (qemu_proc.h), whose quota is its
 * vCPUs: the harvester sets that cgroup's weight from the request, the
 * lowest weight and cpu.idle (v2) when the VM is idle, exactly as for a
 * container's cgroup.
 *
 * Memory: an idle VM's cgroup gets the same reclaim as a container's
 * (memory.reclaim on v2, soft limit 0 on v1), and a VM with a balloon
 * device (WR_QEMU_BALLOON_PCI: the vm tier) gives its guest's free and
 * cache memory back to the host: its balloon is inflated to what the
 * guest reports available (virtio-balloon statistics) less a headroom,
 * and deflated to the whole RAM on its next API call. The device also
 * has free page reporting (the guest returns freed pages by itself, no
 * agent of ours) and deflate-on-oom (a guest short of memory takes balloon
 * pages back before its OOM killer runs).
 *
 * Why the microVM tier has no balloon (QEMU 7.2, Debian 12): a template
 * restore maps guest RAM as a private mapping of the template's file, and
 * QEMU 7.2 discards a page of a file-backed RAM block (balloon inflation,
 * free page reporting) with fallocate(PUNCH_HOLE) on the file itself: it
 * would zero pages of the template under every other VM restored from it.
 * QEMU fixed that for private mappings later (MADV_DONTNEED only); until
 * the tier runs such a QEMU, a microVM's memory is reclaimed host-side
 * only. */
#ifndef WARREN_TIERS_QEMU_HARVEST_H
#define WARREN_TIERS_QEMU_HARVEST_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "tiers/qemu_proc.h"
#include "tiers/qemu_snap.h"

/* The balloon of a q35 VM whose RAM is anonymous (-m): id balloon0. */
#define WR_QEMU_BALLOON_PCI                                                                        \
	"virtio-balloon-pci,id=balloon0,free-page-reporting=on,deflate-on-oom=on"

/* CPU time used by QEMU's cgroup so far (one read). */
int wr_qemu_hv_cpu_time(struct wr_qemu *q, uint64_t *ns, wr_err *err);
/* Its cgroup's CPU weight (0: the lowest), idle: cpu.idle where the kernel
 * has it; 1 when cpu.idle was set (wr_cgroup_cpu_share). */
int wr_qemu_hv_cpu_share(struct wr_qemu *q, uint64_t weight, bool idle, wr_err *err);
/* idle: reclaim the VM's memory (balloon: the VM's QMP, NULL when it has no
 * balloon); bytes its cgroup's usage went down by, or negative. !idle:
 * the balloon deflated and the cgroup's reclaim undone; 0. */
int64_t wr_qemu_hv_idle_memory(struct wr_qemu *q, const struct wr_qsnap_qmp *balloon, bool idle,
			       wr_err *err);

#endif
