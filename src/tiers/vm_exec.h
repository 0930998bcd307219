/* The vm tier's commands with streamed output (vm_exec.c). */
#ifndef WARREN_TIERS_VM_EXEC_H
#define WARREN_TIERS_VM_EXEC_H

#include "common/error.h"
#include "tiers/tier.h"

struct wr_fullvm;

/* wr_fullvm_exec with output as it comes: argv, env, cwd, user, group,
 * timeout_ms (the command's process group killed in the guest),
 * output_cap, stdin_fd (read to its end first, at most 16 MiB), on_output
 * (chunks as the guest writes them) or buffered output, and ctl's kill.
 * No pty (-ENOTSUP). */
int wr_fullvm_exec_stream(struct wr_fullvm *vm, const struct wr_exec_spec *spec,
			  struct wr_exec_result *res, wr_err *err);

#endif
