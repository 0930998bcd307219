/* Network namespaces. Today every sandbox gets a private namespace with only
 * loopback (egress arrives with the network issue). */
#ifndef WARREN_ISOLATE_NETNS_H
#define WARREN_ISOLATE_NETNS_H

#include "common/error.h"

/* Child half: bring up "lo" in the caller's (new) network namespace. */
int wr_netns_loopback_up(struct wr_cerr *e);

#endif
