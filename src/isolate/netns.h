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
/* In a sandbox's own network namespace, after its id maps: let every
 * group of its user namespace (0..65535) have an ICMP ping socket, so the
 * network filter's sock_create hook decides (and records) instead of the
 * kernel's default range. No allocation: callable from a clone child. */
int wr_netns_allow_ping(struct wr_cerr *e);

/* Child half, in a network namespace made by wr_netns_new or
 * wr_netns_loopback_up for an earlier call and entered again (function
 * tier, src/agent/warren-zygote.c): 0 when it is as clean as a fresh one:
 * no socket of any family in it (none open, none in TIME_WAIT, no queued
 * fragments) and lo the only link, up, with only 127.0.0.1/8 and ::1/128.
 * Else -1 with the reason (EBUSY: sockets left, EEXIST: lo changed). Call
 * it before opening any socket in that namespace. No allocation: callable
 * from a clone child. */
int wr_netns_reusable(struct wr_cerr *e);

/* Networked sandboxes (tiers/container.c, isolate/netpool.h). */
/* Child half, after pivot_root: path (under /etc) in the writable layer,
 * owned by the caller (the sandbox's root). Whatever the image had there
 * (a file, a symlink) is replaced; the sandbox may change it later. */
int wr_netns_write_etc(const char *path, const char *data, struct wr_cerr *e);
/* Move this thread into the network namespace fd (network namespaces are
 * per thread); *saved gets our own, for wr_netns_leave. */
int wr_netns_enter(int fd, int *saved, wr_err *err);
/* Back into *saved (closed). Aborts when that fails: the thread cannot go
 * on in another namespace, nor report from there. */
void wr_netns_leave(int *saved);

#endif
