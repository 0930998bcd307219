/* Network namespaces. Today every sandbox gets a private namespace with only
 * loopback (egress arrives with the network issue). */
#ifndef WARREN_ISOLATE_NETNS_H
#define WARREN_ISOLATE_NETNS_H

#include "common/error.h"

/* Child half: bring up "lo" in the caller's (new) network namespace. */
int wr_netns_loopback_up(struct wr_cerr *e);
/* Child half: move the caller into a new network namespace, owned by its
 * user namespace, with "lo" up. A sandbox's PID 1 makes its own (rather
 * than clone making it in the parent) so that this, the dearest namespace
 * to make, overlaps with the parent's work for the same create. */
int wr_netns_new(struct wr_cerr *e);

#endif
