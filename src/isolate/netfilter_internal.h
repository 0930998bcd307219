/* What netfilter.c and netrules.c share. */
#ifndef WARREN_ISOLATE_NETFILTER_INTERNAL_H
#define WARREN_ISOLATE_NETFILTER_INTERNAL_H

#include <stddef.h>

#include "common/error.h"
#include "isolate/bpf/netfilter_abi.h"
#include "isolate/netfilter.h"

/* The port rules a trie entry for rules[i]'s prefix carries: those of every
 * rule whose prefix contains it (its own included), without duplicates;
 * their count, or -1 when more than NF_PORT_RULES. */
int wr_nf_entry_rules(const struct wr_net_rule *rules, size_t n, size_t i,
		      struct nf_port_rule *out);
/* rules well formed and each entry within NF_PORT_RULES; errors name what
 * ("allow", "deny"). */
int wr_nf_rules_validate(const struct wr_net_rule *rules, size_t n, const char *what, wr_err *err);

#endif
