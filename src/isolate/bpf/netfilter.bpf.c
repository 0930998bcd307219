// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* warren's per-sandbox network filter: cgroup hooks on each sandbox's v2
 * cgroup (see netfilter_abi.h for the maps, src/isolate/netfilter.c for
 * the loader and docs/ARCHITECTURE.md, "Network enforcement").
 *
 *   cgroup/sock_create   SOCK_RAW refused unless the policy allows it;
 *                        ICMPv6 ping sockets refused (no IPv6 for sandboxes)
 *   cgroup/connect4,6    TCP and connected UDP/ICMP: new connections
 *   cgroup/sendmsg4,6    unconnected UDP (sendto with an address)
 *   cgroup_skb/egress    every IP packet a sandbox socket sends: ICMP,
 *                        raw, datagrams of connected sockets, TCP SYNs;
 *                        the layer nothing can route around
 *
 * Built only from UAPI headers: these program types read stable context
 * structs (bpf_sock_addr, bpf_sock, __sk_buff), so no vmlinux.h or CO-RE
 * is needed and the object does not depend on the build host's kernel. */
#include <linux/bpf.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/socket.h>
#include <linux/types.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "netfilter_abi.h"

#ifndef SOCK_RAW
#define SOCK_RAW 3
#endif
#define AF_INET_ 2
#define AF_INET6_ 10
#define IPPROTO_ICMPV6_ 58
#define IPPROTO_ICMP_ 1
#define IP_MF_ 0x2000
#define IP_OFFSET_ 0x1fff

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct nf_rl_k {
	__u64 refused;
	__u64 suppressed;
	__u64 dropped;
	__u64 tokens;
	__u64 last_ns;
	struct bpf_spin_lock lock;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__type(key, struct nf_key);
	__type(value, struct nf_val);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} deny SEC(".maps");

struct inner_trie {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1);
	__type(key, struct nf_key);
	__type(value, struct nf_val);
	__uint(map_flags, BPF_F_NO_PREALLOC);
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__array(values, struct inner_trie);
} sbx SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 262144);
	__type(key, struct nf_dyn_key);
	__type(value, struct nf_dyn_val);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} dyn SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct nf_rl_k);
	__uint(map_flags, BPF_F_NO_PREALLOC);
} rl SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_CGROUP_STORAGE);
	__type(key, __u64); /* the cgroup id only: shared by the six programs */
	__type(value, struct nf_local);
} local SEC(".maps");

struct nf_conf conf = {};
__u64 deny_blocks[2][NF_DENY_BLOCKS] = {};

/* What a hook asks about one destination. */
struct dest {
	__u8 addr[16]; /* v4: first 4 bytes */
	__u16 port;    /* host order */
	__u8 family;   /* 4 or 6 */
	__u8 proto;    /* IP protocol, ICMPv6 folded into NF_P_ICMP */
	__u8 layer;
	__u8 any_port; /* a fragment without ports: any port rule matches */
};

/* The sandbox cgroup this task (or socket) belongs to: its ancestor at one
 * of the levels where the loader attached sandboxes. */
static __always_inline void *find_trie(__u64 *cgid, struct __sk_buff *skb)
{
	__u32 mask = conf.level_mask;
#pragma clang loop unroll(full)
	for (int lvl = 0; lvl < 32; lvl++) {
		if (!(mask & (1u << lvl)))
			continue;
		__u64 id = skb ? bpf_skb_ancestor_cgroup_id(skb, lvl)
			       : bpf_get_current_ancestor_cgroup_id(lvl);
		if (!id)
			continue;
		void *t = bpf_map_lookup_elem(&sbx, &id);
		if (t) {
			*cgid = id;
			return t;
		}
	}
	*cgid = skb ? bpf_skb_cgroup_id(skb) : bpf_get_current_cgroup_id();
	return 0;
}

static __always_inline int ports_match(const struct nf_port_rule *r, __u32 n, const struct dest *d)
{
	for (__u32 i = 0; i < NF_PORT_RULES; i++) {
		if (i >= n)
			break;
		if (r[i].proto != NF_P_ANY && r[i].proto != d->proto)
			continue;
		if (d->any_port || r[i].proto == NF_P_ICMP ||
		    (d->port >= r[i].lo && d->port <= r[i].hi))
			return 1;
	}
	return 0;
}

/* The sandbox's entry for this destination: header fields (mode, flags,
 * gateway) and the port rules of the longest matching prefix; every
 * family has a /0 entry, so NULL only for a malformed trie. */
static __always_inline struct nf_val *trie_lookup(void *trie, __u8 family, const __u8 *addr)
{
	struct nf_key k = {};
	k.tag = bpf_htonl(family == 4 ? NF_TAG_V4 : NF_TAG_V6);
	k.prefixlen = 32 + (family == 4 ? 32 : 128);
	__builtin_memcpy(k.addr, addr, 16);
	return bpf_map_lookup_elem(trie, &k);
}

static __always_inline int dyn_match(__u64 cgid, const struct dest *d)
{
	struct nf_dyn_key k = {.cgid = cgid};
	if (d->family == 4) {
		k.addr[10] = 0xff;
		k.addr[11] = 0xff;
		__builtin_memcpy(&k.addr[12], d->addr, 4);
	} else {
		__builtin_memcpy(k.addr, d->addr, 16);
	}
	struct nf_dyn_val *v = bpf_map_lookup_elem(&dyn, &k);
	if (!v)
		return 0;
	if (v->expires_ns && v->expires_ns < bpf_ktime_get_boot_ns())
		return 0;
	__u32 n = v->n;
	for (__u32 i = 0; i < 4; i++) {
		if (i >= n)
			break;
		if (v->r[i].proto != NF_P_ANY && v->r[i].proto != d->proto)
			continue;
		if (d->any_port || (d->port >= v->r[i].lo && d->port <= v->r[i].hi))
			return 1;
	}
	return 0;
}

static __always_inline int is_loopback(const struct dest *d)
{
	if (d->family == 4)
		return d->addr[0] == 127 ||
		       (d->addr[0] == 0 && d->addr[1] == 0 && d->addr[2] == 0 && d->addr[3] == 0);
	__u8 acc = 0;
#pragma clang loop unroll(full)
	for (int i = 0; i < 15; i++)
		acc |= d->addr[i];
	return acc == 0 && (d->addr[15] == 0 || d->addr[15] == 1); /* :: and ::1 */
}

static __always_inline int same(const __u8 *a, const __u8 *b, int n)
{
	__u8 acc = 0;
#pragma clang loop unroll(full)
	for (int i = 0; i < 16; i++)
		if (i < n)
			acc |= a[i] ^ b[i];
	return acc == 0;
}

static __always_inline int is_gateway_dns(__u32 flags, const __u8 *gw4, const __u8 *gw6,
					  const struct dest *d)
{
	if (d->port != 53 || (d->proto != NF_P_UDP && d->proto != NF_P_TCP))
		return 0;
	if (d->family == 4)
		return (flags & NF_F_GW4) && same(gw4, d->addr, 4);
	return (flags & NF_F_GW6) && same(gw6, d->addr, 16);
}

/* DNS and DNS-over-TLS (TCP/UDP 53 and 853) to a resolver that is not the
 * sandbox's own: checked after the gateway's DNS, its own address and the
 * deny set, so only "anything else" reaches it. In mode open it refuses:
 * a sandbox's names go through the forwarder, whose refusals are recorded
 * (docs/ARCH-NETWORK.md); in mode allowlist the rules decide (a rule that
 * names a resolver's port opens it on purpose). A later fragment (no
 * ports) follows its first, which was checked. */
static __always_inline int other_resolver(const struct dest *d)
{
	if (d->any_port || (d->proto != NF_P_UDP && d->proto != NF_P_TCP))
		return 0;
	return d->port == 53 || d->port == 853;
}

/* In the node's deny set (whatever the sandbox's policy). */
static __always_inline int denied(const struct dest *d)
{
	__u32 block = ((__u32)d->addr[0] << 8 | d->addr[1]) & 0xffff;
	if (!(deny_blocks[d->family == 6][block >> 6] & (1ull << (block & 63))))
		return 0;
	struct nf_key dk = {};
	dk.tag = bpf_htonl(d->family == 4 ? NF_TAG_V4 : NF_TAG_V6);
	dk.prefixlen = 32 + (d->family == 4 ? 32 : 128);
	__builtin_memcpy(dk.addr, d->addr, 16);
	struct nf_val *dv = bpf_map_lookup_elem(&deny, &dk);
	return dv && ports_match(dv->r, dv->n, d);
}

/* Any flat rule allowing d (what the trie's longest match answers too:
 * every entry carries the rules of the prefixes around it). */
static __always_inline int flat_match(const struct nf_local *l, const struct dest *d)
{
	__u32 a[4];
	__builtin_memcpy(a, d->addr, 16);
	if (d->family == 4) {
		__u32 n = l->n4;
		for (__u32 i = 0; i < NF_FLAT_RULES; i++) {
			if (i >= n)
				break;
			const struct nf_flat4 *r = &l->r4[i];
			if ((a[0] & r->mask) != r->net ||
			    (r->proto != NF_P_ANY && r->proto != d->proto))
				continue;
			if (d->any_port || r->proto == NF_P_ICMP ||
			    (d->port >= r->lo && d->port <= r->hi))
				return 1;
		}
		return 0;
	}
	__u32 n = l->n6;
	for (__u32 i = 0; i < NF_FLAT_RULES; i++) {
		if (i >= n)
			break;
		const struct nf_flat6 *r = &l->r6[i];
		if ((a[0] & r->mask[0]) != r->net[0] || (a[1] & r->mask[1]) != r->net[1] ||
		    (a[2] & r->mask[2]) != r->net[2] || (a[3] & r->mask[3]) != r->net[3] ||
		    (r->proto != NF_P_ANY && r->proto != d->proto))
			continue;
		if (d->any_port || r->proto == NF_P_ICMP || (d->port >= r->lo && d->port <= r->hi))
			return 1;
	}
	return 0;
}

static __always_inline void refuse_event(__u64 cgid, const struct dest *d, __u8 reason)
{
	struct nf_rl_k *s = bpf_map_lookup_elem(&rl, &cgid);
	if (!s) {
		struct nf_rl_k z = {};
		z.tokens = (__u64)conf.burst * NF_TOKEN_SCALE;
		z.last_ns = bpf_ktime_get_boot_ns();
		bpf_map_update_elem(&rl, &cgid, &z, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&rl, &cgid);
		if (!s)
			return;
	}
	__u64 now = bpf_ktime_get_boot_ns();
	__u64 carry = 0;
	int emit = 0;
	bpf_spin_lock(&s->lock);
	s->refused++;
	__u64 per = conf.ns_per_token ? conf.ns_per_token : 1;
	__u64 cap = (__u64)conf.burst * NF_TOKEN_SCALE;
	if (now > s->last_ns) {
		__u64 add = (now - s->last_ns) * NF_TOKEN_SCALE / per;
		s->tokens = s->tokens + add > cap ? cap : s->tokens + add;
		s->last_ns = now;
	}
	if (s->tokens >= NF_TOKEN_SCALE) {
		s->tokens -= NF_TOKEN_SCALE;
		carry = s->suppressed + 1;
		s->suppressed = 0;
		emit = 1;
	} else {
		s->suppressed++;
	}
	bpf_spin_unlock(&s->lock);
	if (!emit)
		return;
	struct nf_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		/* No room: the refusals stay counted for the next event. */
		bpf_spin_lock(&s->lock);
		s->suppressed += carry;
		s->dropped++;
		bpf_spin_unlock(&s->lock);
		return;
	}
	e->cgid = cgid;
	e->ts_ns = now;
	e->count = carry;
	__builtin_memcpy(e->addr, d->addr, 16);
	e->port = d->port;
	e->family = d->family;
	e->proto = d->proto;
	e->layer = d->layer;
	e->reason = reason;
	e->pad[0] = 0;
	e->pad[1] = 0;
	bpf_ringbuf_submit(e, 0);
}

/* decide() from the local storage: no map lookup on the way to an allow
 * (but the deny set's when the destination's /16 block is in it, and the
 * DNS-learned addresses' in allowlist mode). */
static __always_inline int decide_flat(const struct nf_local *l, const struct dest *d)
{
	if (is_loopback(d))
		return 1;
	if (l->mode == NF_MODE_NONE) {
		refuse_event(l->cgid, d, NF_R_POLICY);
		return 0;
	}
	if (is_gateway_dns(l->flags, l->gw4, l->gw6, d))
		return 1;
	if (d->family == 4 && (l->flags & NF_F_SELF4) && same(l->self4, d->addr, 4))
		return 1;
	if (denied(d)) {
		refuse_event(l->cgid, d, NF_R_DENYSET);
		return 0;
	}
	if (l->mode == NF_MODE_OPEN) {
		if (!other_resolver(d))
			return 1;
		refuse_event(l->cgid, d, NF_R_DNS);
		return 0;
	}
	if (flat_match(l, d) || dyn_match(l->cgid, d))
		return 1;
	refuse_event(l->cgid, d, NF_R_POLICY);
	return 0;
}

/* 1 allow, 0 refuse (and report). */
static __always_inline int decide(const struct dest *d, struct __sk_buff *skb)
{
	struct nf_local *l = bpf_get_local_storage(&local, 0);
	if (l->flags & NF_F_FLAT)
		return decide_flat(l, d);
	__u64 cgid = 0;
	void *trie = find_trie(&cgid, skb);
	if (!trie) {
		refuse_event(cgid, d, NF_R_UNKNOWN);
		return 0;
	}
	if (is_loopback(d))
		return 1;
	struct nf_val *h = trie_lookup(trie, d->family, d->addr);
	if (!h) {
		refuse_event(cgid, d, NF_R_UNKNOWN);
		return 0;
	}
	if (h->mode == NF_MODE_NONE) {
		refuse_event(cgid, d, NF_R_POLICY);
		return 0;
	}
	if (is_gateway_dns(h->flags, h->gw4, h->gw6, d))
		return 1;
	/* its own address: it never leaves the sandbox's namespace (the
	 * bridge subnet around it is in the deny set) */
	if (d->family == 4 && (h->flags & NF_F_SELF4) && same(h->self4, d->addr, 4))
		return 1;
	if (denied(d)) {
		refuse_event(cgid, d, NF_R_DENYSET);
		return 0;
	}
	if (h->mode == NF_MODE_OPEN) {
		if (!other_resolver(d))
			return 1;
		refuse_event(cgid, d, NF_R_DNS);
		return 0;
	}
	if (ports_match(h->r, h->n, d) || dyn_match(cgid, d))
		return 1;
	refuse_event(cgid, d, NF_R_POLICY);
	return 0;
}

static __always_inline __u8 sock_proto(__u32 type, __u32 protocol)
{
	if (protocol == IPPROTO_ICMP || protocol == IPPROTO_ICMPV6_)
		return NF_P_ICMP;
	if (protocol)
		return protocol;
	return type == 1 /* SOCK_STREAM */ ? NF_P_TCP : NF_P_UDP;
}

static __always_inline int addr4(struct bpf_sock_addr *ctx, __u8 layer)
{
	struct dest d = {};
	__u32 ip = ctx->user_ip4;
	__builtin_memcpy(d.addr, &ip, 4);
	d.port = bpf_ntohs((__u16)ctx->user_port);
	d.family = 4;
	d.proto = sock_proto(ctx->type, ctx->protocol);
	d.layer = layer;
	return decide(&d, 0);
}

static __always_inline int addr6(struct bpf_sock_addr *ctx, __u8 layer)
{
	struct dest d = {};
	__u32 w0 = ctx->user_ip6[0], w1 = ctx->user_ip6[1], w2 = ctx->user_ip6[2],
	      w3 = ctx->user_ip6[3];
	d.port = bpf_ntohs((__u16)ctx->user_port);
	d.proto = sock_proto(ctx->type, ctx->protocol);
	d.layer = layer;
	if (w0 == 0 && w1 == 0 && w2 == bpf_htonl(0xffff)) {
		/* v4-mapped: a dual-stack socket reaching an IPv4 host */
		__builtin_memcpy(d.addr, &w3, 4);
		d.family = 4;
	} else {
		__builtin_memcpy(d.addr, &w0, 4);
		__builtin_memcpy(&d.addr[4], &w1, 4);
		__builtin_memcpy(&d.addr[8], &w2, 4);
		__builtin_memcpy(&d.addr[12], &w3, 4);
		d.family = 6;
	}
	return decide(&d, 0);
}

SEC("cgroup/connect4")
int wr_connect4(struct bpf_sock_addr *ctx)
{
	return addr4(ctx, NF_L_CONNECT4);
}

SEC("cgroup/connect6")
int wr_connect6(struct bpf_sock_addr *ctx)
{
	return addr6(ctx, NF_L_CONNECT6);
}

SEC("cgroup/sendmsg4")
int wr_sendmsg4(struct bpf_sock_addr *ctx)
{
	return addr4(ctx, NF_L_SENDMSG4);
}

SEC("cgroup/sendmsg6")
int wr_sendmsg6(struct bpf_sock_addr *ctx)
{
	return addr6(ctx, NF_L_SENDMSG6);
}

SEC("cgroup/sock_create")
int wr_sock_create(struct bpf_sock *sk)
{
	if (sk->family == AF_INET6_ && sk->protocol == IPPROTO_ICMPV6_ && sk->type != SOCK_RAW) {
		/* An ICMPv6 ping socket. Sandboxes get no IPv6 (the deny set
		 * holds all of it), and an unconnected ICMPv6 send could not
		 * be refused later with an errno: the kernel has no sendmsg
		 * hook for ping sockets and its ICMPv6 send path discards the
		 * egress verdict (ipv6/ping.c), while without a route the send
		 * ends at the route lookup (ENETUNREACH) unseen. So the socket
		 * itself is refused and recorded, in every mode: EPERM, like
		 * a connect to an IPv6 destination. */
		struct dest d6 = {};
		d6.family = 6;
		d6.proto = NF_P_ICMP;
		d6.layer = NF_L_SOCK_CREATE;
		struct nf_local *l6 = bpf_get_local_storage(&local, 0);
		__u64 cgid = l6->cgid;
		if (!(l6->flags & NF_F_FLAT))
			find_trie(&cgid, 0);
		refuse_event(cgid, &d6, NF_R_DENYSET);
		return 0;
	}
	if (sk->family == AF_INET_ && sk->protocol == IPPROTO_ICMP_ && sk->type != SOCK_RAW) {
		/* An ICMP ping socket in mode none (an offline sandbox's own
		 * namespace lets every group have one, so that it is refused
		 * here, recorded, instead of by ping_group_range unseen): an
		 * unconnected send would end at the route lookup (only lo)
		 * with ENETUNREACH and no event, since ping sockets have no
		 * sendmsg hook. Networked modes decide per destination. */
		struct nf_local *lp = bpf_get_local_storage(&local, 0);
		__u64 cgid = lp->cgid;
		__u32 mode = lp->mode;
		if (!(lp->flags & NF_F_FLAT)) {
			struct dest z = {};
			void *trie = find_trie(&cgid, 0);
			struct nf_val *h = trie ? trie_lookup(trie, 4, z.addr) : NULL;
			mode = h ? h->mode : NF_MODE_NONE;
		}
		if (mode != NF_MODE_NONE)
			return 1;
		struct dest d4 = {};
		d4.family = 4;
		d4.proto = NF_P_ICMP;
		d4.layer = NF_L_SOCK_CREATE;
		refuse_event(cgid, &d4, NF_R_POLICY);
		return 0;
	}
	if (sk->type != SOCK_RAW)
		return 1;
	struct dest d = {};
	d.family = sk->family == AF_INET6_ ? 6 : 4;
	d.proto = sk->protocol;
	d.layer = NF_L_SOCK_CREATE;
	struct nf_local *l = bpf_get_local_storage(&local, 0);
	if (l->flags & NF_F_FLAT) {
		if (l->flags & NF_F_RAW)
			return 1;
		refuse_event(l->cgid, &d, NF_R_SOCKTYPE);
		return 0;
	}
	__u64 cgid = 0;
	void *trie = find_trie(&cgid, 0);
	if (trie) {
		struct nf_val *h = trie_lookup(trie, 4, d.addr);
		if (h && (h->flags & NF_F_RAW))
			return 1;
	}
	refuse_event(cgid, &d, NF_R_SOCKTYPE);
	return 0;
}

/* Ports of a TCP/UDP header at off; for TCP also whether it opens a
 * connection (SYN without ACK). */
static __always_inline int l4(struct __sk_buff *skb, __u32 off, struct dest *d, int *syn)
{
	__u16 ports[2];
	if (bpf_skb_load_bytes(skb, off, ports, 4) < 0)
		return -1;
	d->port = bpf_ntohs(ports[1]);
	if (d->proto == NF_P_TCP) {
		__u8 fl;
		if (bpf_skb_load_bytes(skb, off + 13, &fl, 1) < 0)
			return -1;
		*syn = (fl & 0x02) && !(fl & 0x10);
	}
	return 0;
}

SEC("cgroup_skb/egress")
int wr_egress(struct __sk_buff *skb)
{
	struct dest d = {};
	int syn = 0;
	d.layer = NF_L_EGRESS;
	/* The common case first, before parsing anything: a stream socket's
	 * TCP passed connect4/6 (its SYN) or was accepted (its SYN-ACK), and no
	 * policy asks to cut established connections. */
	struct bpf_sock *sk = skb->sk;
	if (sk)
		sk = bpf_sk_fullsock(sk);
	int stream = sk && sk->type == 1 /* SOCK_STREAM */ && sk->protocol == IPPROTO_TCP;
	if (stream && !conf.cut_users)
		return 1;
	if (skb->protocol == bpf_htons(0x0800)) {
		struct iphdr ip;
		if (bpf_skb_load_bytes(skb, 0, &ip, sizeof(ip)) < 0)
			return 0;
		__builtin_memcpy(d.addr, &ip.daddr, 4);
		d.family = 4;
		d.proto = ip.protocol == IPPROTO_ICMP ? NF_P_ICMP : ip.protocol;
		if (bpf_ntohs(ip.frag_off) & IP_OFFSET_)
			d.any_port = 1; /* a later fragment: no L4 header */
		else if ((d.proto == NF_P_TCP || d.proto == NF_P_UDP) &&
			 l4(skb, ip.ihl * 4, &d, &syn) < 0)
			return 0;
	} else if (skb->protocol == bpf_htons(0x86DD)) {
		struct ipv6hdr ip6;
		if (bpf_skb_load_bytes(skb, 0, &ip6, sizeof(ip6)) < 0)
			return 0;
		__builtin_memcpy(d.addr, &ip6.daddr, 16);
		d.family = 6;
		__u8 nh = ip6.nexthdr;
		__u32 off = sizeof(ip6);
		if (nh == 44 /* fragment header: a datagram larger than the MTU */) {
			__u8 fh[4];
			if (bpf_skb_load_bytes(skb, off, fh, 4) < 0)
				return 0;
			nh = fh[0];
			off += 8;
			if (((fh[2] << 8) | fh[3]) & 0xfff8)
				d.any_port = 1; /* a later fragment: no L4 header */
		}
		d.proto = nh == IPPROTO_ICMPV6_ ? NF_P_ICMP : nh;
		if (d.any_port) {
			/* the address and protocol decide */
		} else if (nh == IPPROTO_ICMPV6_) {
			/* Neighbour discovery (133-137) stays on link and is what
			 * makes IPv6 work at all. */
			__u8 type;
			if (bpf_skb_load_bytes(skb, off, &type, 1) < 0)
				return 0;
			if (type >= 133 && type <= 137)
				return 1;
		} else if ((d.proto == NF_P_TCP || d.proto == NF_P_UDP) &&
			   l4(skb, off, &d, &syn) < 0) {
			return 0;
		}
	} else {
		return 1; /* not IP: never reaches this hook from a sandbox socket */
	}
	if (d.proto == NF_P_TCP) {
		/* A stream socket's TCP passed connect4/6 (SYN) or was accepted
		 * (its SYN-ACK): only a policy with the cut flag re-checks it
		 * here. A TCP segment from any other socket (raw) is checked. */
		if (stream && syn)
			return 1;
		if (stream) {
			struct nf_local *l = bpf_get_local_storage(&local, 0);
			if (l->flags & NF_F_FLAT) {
				if (!(l->flags & NF_F_CUT))
					return 1;
				return decide_flat(l, &d);
			}
			__u64 cgid = 0;
			void *trie = find_trie(&cgid, skb);
			if (!trie)
				return 0;
			struct nf_val *h = trie_lookup(trie, d.family, d.addr);
			if (!h || !(h->flags & NF_F_CUT))
				return 1;
		}
	}
	return decide(&d, skb);
}
