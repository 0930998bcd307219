/* The layout shared by the network filter's BPF programs (netfilter.bpf.c)
 * and their loader (src/isolate/netfilter.c). Plain __u types only: this
 * header is compiled both by clang -target bpf and by the host compiler.
 *
 * Maps (one set per loaded filter, i.e. per daemon):
 *   sbx     hash of maps: sandbox cgroup id -> that sandbox's rule trie
 *   deny    LPM trie: the node's deny set (every mode, every sandbox)
 *   dyn     hash: {cgroup id, address} -> ports allowed until a deadline
 *           (addresses learned from DNS answers, added by the forwarder)
 *   rl      hash: cgroup id -> refusal counters and event token bucket
 *   events  ring buffer of refusal events
 *
 *   local   cgroup local storage (one per sandbox cgroup, shared by its six
 *           programs): the policy again, flat, when it has at most
 *           NF_FLAT_RULES rules: the fast path (no lookup at all)
 *
 * A sandbox's rule trie holds its whole policy: one header entry (mode,
 * flags, DNS gateway) under tag NF_TAG_HDR and its allow rules under
 * NF_TAG_V4 / NF_TAG_V6. A policy change builds a new trie and swaps the
 * one sbx element, so a hook sees the old policy or the new one, never a
 * mix: it reads header and rules through the same inner map pointer. */
#ifndef WARREN_ISOLATE_BPF_NETFILTER_ABI_H
#define WARREN_ISOLATE_BPF_NETFILTER_ABI_H

#include <linux/types.h>

#define NF_TAG_HDR 0
#define NF_TAG_V4 4
#define NF_TAG_V6 6

/* Port rules one trie entry carries (its own and those of every shorter
 * prefix that contains it: a longest-prefix match must still see them). */
#define NF_PORT_RULES 16

#define NF_MODE_NONE 0
#define NF_MODE_ALLOWLIST 1
#define NF_MODE_OPEN 2

/* Header flags. */
#define NF_F_RAW 1u /* SOCK_RAW sockets allowed (their packets still filtered) */
#define NF_F_GW4 2u /* gw4 is set */
#define NF_F_GW6 4u /* gw6 is set */
#define NF_F_CUT 8u /* established TCP is re-checked per packet too */
#define NF_F_SELF4 16u
#define NF_F_FLAT                                                                                  \
	32u /* local storage: the whole policy is here */ /* self4 is set: the sandbox's own       \
							     address */

/* Protocols of a rule: IP protocol numbers; ICMP covers ICMPv6. */
#define NF_P_ANY 0
#define NF_P_ICMP 1
#define NF_P_TCP 6
#define NF_P_UDP 17

/* Where a refusal happened. */
#define NF_L_CONNECT4 1
#define NF_L_CONNECT6 2
#define NF_L_SENDMSG4 3
#define NF_L_SENDMSG6 4
#define NF_L_EGRESS 5
#define NF_L_SOCK_CREATE 6

/* Why. */
#define NF_R_POLICY 1	/* not allowed by the mode / rules */
#define NF_R_DENYSET 2	/* in the node's deny set */
#define NF_R_SOCKTYPE 3 /* raw socket */
#define NF_R_UNKNOWN 4	/* cgroup carries the programs but no policy */
#define NF_R_DNS 5	/* mode open: DNS (53, 853) to another resolver than its own */

struct nf_key {
	__u32 prefixlen; /* 32 (tag) + address bits */
	__u32 tag;	 /* NF_TAG_*, big-endian on the wire of the trie */
	__u8 addr[16];	 /* v4: first 4 bytes */
};

struct nf_port_rule {
	__u16 lo, hi; /* host order, inclusive; 0-65535 = any */
	__u8 proto;   /* NF_P_* */
	__u8 pad[3];
};

struct nf_val {
	__u32 n; /* port rules used */
	/* header entry only */
	__u32 mode;
	__u32 flags;
	__u8 gw4[4];
	__u8 self4[4]; /* its own address, reached through its loopback */
	__u8 gw6[16];
	struct nf_port_rule r[NF_PORT_RULES];
};

/* The fast path. A sandbox cgroup's local storage (bpf_get_local_storage:
 * no map lookup; the kernel hands the program its attachment's storage).
 * Zero when the links are made; the loader writes it after them, and on
 * every change after the trie: a write replaces the whole value at once
 * (the kernel swaps a new buffer in under RCU), so a hook sees the old
 * policy or the new one. Without NF_F_FLAT (not written yet, or more than
 * NF_FLAT_RULES rules of a family) the hooks take the trie path. IPv4
 * rules are 16 bytes each: a scan of all of them reads 4 cache lines. */
#define NF_FLAT_RULES 16

struct nf_flat4 {
	__u32 net;    /* network order, host bits zero */
	__u32 mask;   /* network order */
	__u16 lo, hi; /* host order, inclusive */
	__u8 proto;   /* NF_P_* */
	__u8 pad[3];
};

struct nf_flat6 {
	__u32 net[4];
	__u32 mask[4];
	__u16 lo, hi;
	__u8 proto;
	__u8 pad[3];
};

struct nf_local {
	__u64 cgid;
	__u32 mode;
	__u32 flags; /* NF_F_* */
	__u8 gw4[4];
	__u8 self4[4];
	__u32 n4, n6; /* rules used */
	struct nf_flat4 r4[NF_FLAT_RULES];
	__u8 gw6[16];
	struct nf_flat6 r6[NF_FLAT_RULES];
};

struct nf_dyn_key {
	__u64 cgid;
	__u8 addr[16]; /* v4 as ::ffff:a.b.c.d */
};

struct nf_dyn_val {
	__u64 expires_ns; /* CLOCK_BOOTTIME; 0 = never */
	__u32 n;
	__u32 pad;
	struct nf_port_rule r[4];
};

struct nf_rl {
	__u64 refused;	  /* every refusal, exact */
	__u64 suppressed; /* refusals not yet carried by an event */
	__u64 dropped;	  /* events the ring buffer had no room for */
	__u64 tokens;	  /* event tokens, scaled by NF_TOKEN_SCALE */
	__u64 last_ns;
	__u32 lock; /* struct bpf_spin_lock in the programs' view */
	__u32 pad;
};
#define NF_TOKEN_SCALE 1000000ull

struct nf_event {
	__u64 cgid;
	__u64 ts_ns; /* CLOCK_BOOTTIME */
	__u64 count; /* refusals this event stands for (>= 1) */
	__u8 addr[16];
	__u16 port;
	__u8 family; /* 4 or 6; 0 for a socket creation */
	__u8 proto;  /* IP protocol number (0 unknown) */
	__u8 layer;  /* NF_L_* */
	__u8 reason; /* NF_R_* */
	__u8 pad[2];
};

/* Which /16 blocks (first 16 address bits, per family) the deny set
 * touches: a bit clear means no deny prefix covers the address, and the
 * deny trie is not looked up. Always a superset of the trie's coverage. */
#define NF_DENY_BLOCKS (65536 / 64)

/* Tunables in the programs' .bss, set by the loader before any attach. */
struct nf_conf {
	__u32 level_mask;   /* cgroup levels at which sandboxes are attached */
	__u32 burst;	    /* events per sandbox in a burst */
	__u64 ns_per_token; /* refill: one event per this many ns */
	__u32 cut_users;    /* attached policies with NF_F_CUT */
	__u32 pad;
};

#endif
