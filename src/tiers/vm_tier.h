/* The full VM tier as a warrend tier (struct wr_tier_ops "vm"). */
#ifndef WARREN_TIERS_VM_TIER_H
#define WARREN_TIERS_VM_TIER_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "tiers/tier.h"
#include "tiers/vm.h"

struct wr_vm_tier_config {
	const char *qemu, *qemu_img, *accel, *run_dir;
	const char *cgroup_base;      /* QEMU's cgroups (see wr_fullvm_config) */
	bool adoptable;		      /* QEMU outlives the daemon, adopted later */
	uint64_t boot_timeout_ms;     /* 0: the core's default (300 s) */
	uint64_t shutdown_timeout_ms; /* ACPI shutdown's deadline at kill */
	const char *state_dir;	      /* keep_memory=false: <state>/vm-saved/<id> */
};
int wr_vm_tier_init(const struct wr_vm_tier_config *cfg, wr_err *err);
/* At start, after recovery: saved states (keep_memory=false) whose
 * sandbox is not live (keep refuses its id). */
size_t wr_vm_tier_sweep_saved(bool (*keep)(const char *id, void *ctx), void *ctx);
/* The VM of a sandbox of this tier (screen and input routes). */
struct wr_fullvm *wr_vm_tier_vm(struct wr_sandbox *sb);
extern const struct wr_tier_ops wr_vm_tier;

#endif
