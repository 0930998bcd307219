/* Per-sandbox network filter: loader, policy tries, attach/detach and the
 * refusal reader. See netfilter.h and bpf/netfilter_abi.h; the rules'
 * parsing and validation are in netrules.c. */
#include "isolate/netfilter.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <limits.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "common/cleanup.h"
#include "isolate/bpf/netfilter_abi.h"
#include "isolate/netfilter_internal.h"
#include "netfilter.skel.h"

#define NF_HOOKS 6

struct wr_netfilter {
	struct netfilter_bpf *skel;
	char *pin_dir; /* links pinned here (a bpffs directory), or NULL */
	struct ring_buffer *rb;
	wr_net_refusal_fn on_refusal;
	void *ctx;
	pthread_mutex_t lock; /* conf.level_mask and the level counts */
	uint32_t level_users[32];
};

struct wr_netfilter_att {
	char *pin; /* name of its pins: <pin_dir>/<pin>:<hook>, or NULL */
	uint64_t cgid;
	int level;
	bool cut;    /* counted in conf.cut_users */
	bool in_sbx; /* its trie is in the sbx map (a policy that is not flat) */
	struct bpf_link *links[NF_HOOKS];
};

/* ---- tries ---------------------------------------------------------------- */

static bool same_prefix(const struct wr_net_rule *a, const struct wr_net_rule *b)
{
	return a->family == b->family && a->prefix == b->prefix &&
	       memcmp(a->addr, b->addr, 16) == 0;
}

static void rule_key(const struct wr_net_rule *r, struct nf_key *k)
{
	memset(k, 0, sizeof(*k));
	k->tag = htonl(r->family == 4 ? NF_TAG_V4 : NF_TAG_V6);
	k->prefixlen = 32 + r->prefix;
	memcpy(k->addr, r->addr, r->family == 4 ? 4 : 16);
}

/* Insert one entry per distinct prefix; fd is an LPM trie of nf_key. With
 * hdr (a sandbox's trie), every entry carries the header (mode, flags, DNS
 * gateway) and each family gets a /0 entry, so the one longest-prefix
 * lookup of a hook returns the header and the matching rules together. */
static int trie_fill(int fd, const struct wr_net_rule *rules, size_t n, const struct nf_val *hdr,
		     wr_err *err)
{
	bool has0[2] = {false, false};
	for (size_t i = 0; i < n; i++) {
		if (rules[i].prefix == 0)
			has0[rules[i].family == 6] = true;
		bool seen = false;
		for (size_t j = 0; j < i && !seen; j++)
			seen = same_prefix(&rules[i], &rules[j]);
		if (seen)
			continue;
		struct nf_val v;
		if (hdr)
			v = *hdr;
		else
			memset(&v, 0, sizeof(v));
		int k = wr_nf_entry_rules(rules, n, i, v.r);
		if (k < 0)
			return wr_err_set(err, E2BIG, "rule %zu: too many port rules", i);
		v.n = (uint32_t)k;
		struct nf_key key;
		rule_key(&rules[i], &key);
		if (bpf_map_update_elem(fd, &key, &v, BPF_ANY) < 0)
			return wr_err_sys(err, "rule trie: insert");
	}
	for (int f = 0; hdr && f < 2; f++) {
		if (has0[f])
			continue;
		struct nf_key key = {.prefixlen = 32, .tag = htonl(f ? NF_TAG_V6 : NF_TAG_V4)};
		if (bpf_map_update_elem(fd, &key, hdr, BPF_ANY) < 0)
			return wr_err_sys(err, "rule trie: insert");
	}
	return 0;
}

/* A new trie holding policy p: header, then rules. Returns its fd. */
static int policy_trie(const struct wr_net_policy *p, wr_err *err)
{
	LIBBPF_OPTS(bpf_map_create_opts, o, .map_flags = BPF_F_NO_PREALLOC);
	size_t n = p->mode == WR_NET_ALLOWLIST ? p->n_allow : 0;
	_cleanup_close_ int fd =
	    bpf_map_create(BPF_MAP_TYPE_LPM_TRIE, "wr_nf_policy", sizeof(struct nf_key),
			   sizeof(struct nf_val), (uint32_t)n + 2, &o);
	if (fd < 0)
		return wr_err_sys(err, "policy trie: create");
	struct nf_val h;
	memset(&h, 0, sizeof(h));
	h.mode = p->mode == WR_NET_OPEN	       ? NF_MODE_OPEN
		 : p->mode == WR_NET_ALLOWLIST ? NF_MODE_ALLOWLIST
					       : NF_MODE_NONE;
	h.flags = (p->allow_raw ? NF_F_RAW : 0) | (p->cut_established ? NF_F_CUT : 0) |
		  (p->has_gw4 ? NF_F_GW4 : 0) | (p->has_gw6 ? NF_F_GW6 : 0) |
		  (p->has_self4 ? NF_F_SELF4 : 0);
	memcpy(h.gw4, p->gw4, 4);
	memcpy(h.self4, p->self4, 4);
	memcpy(h.gw6, p->gw6, 16);
	if (trie_fill(fd, p->allow, n, &h, err) < 0)
		return wr_err_wrap(err, "policy trie");
	return steal_fd(&fd);
}

/* Whether local_write can hold p in the flat form (no trie needed). */
static bool policy_flat(const struct wr_net_policy *p)
{
	size_t n = p->mode == WR_NET_ALLOWLIST ? p->n_allow : 0, n4 = 0, n6 = 0;
	for (size_t i = 0; i < n; i++) {
		if (p->allow[i].family == 4)
			n4++;
		else if (p->allow[i].family == 6)
			n6++;
	}
	return n4 <= NF_FLAT_RULES && n6 <= NF_FLAT_RULES;
}

/* The policy in the sandbox cgroup's local storage (the programs' fast
 * path, see nf_local): flat when it has at most NF_FLAT_RULES rules. If
 * the flat value cannot be written, the header without NF_F_FLAT is: the
 * hooks then read the trie, which already holds p (callers swap the trie
 * first). Only if that fails too is it an error. flat_only: p is flat and
 * has no trie in the sbx map, so the header alone would send the hooks to
 * a trie that is not there: a flat value that cannot be written is -EAGAIN
 * (the caller installs the trie and writes again without flat_only). */
static int local_write(struct wr_netfilter *nf, uint64_t cgid, const struct wr_net_policy *p,
		       bool flat_only, wr_err *err)
{
	struct nf_local l;
	memset(&l, 0, sizeof(l));
	size_t n = p->mode == WR_NET_ALLOWLIST ? p->n_allow : 0;
	l.cgid = cgid;
	l.mode = p->mode == WR_NET_OPEN	       ? NF_MODE_OPEN
		 : p->mode == WR_NET_ALLOWLIST ? NF_MODE_ALLOWLIST
					       : NF_MODE_NONE;
	l.flags = (p->allow_raw ? NF_F_RAW : 0) | (p->cut_established ? NF_F_CUT : 0) |
		  (p->has_gw4 ? NF_F_GW4 : 0) | (p->has_gw6 ? NF_F_GW6 : 0) |
		  (p->has_self4 ? NF_F_SELF4 : 0);
	memcpy(l.gw4, p->gw4, 4);
	memcpy(l.gw6, p->gw6, 16);
	memcpy(l.self4, p->self4, 4);
	bool flat = true;
	for (size_t i = 0; i < n && flat; i++) {
		const struct wr_net_rule *r = &p->allow[i];
		uint8_t mask[16] = {0};
		for (int b = 0; b < r->prefix; b++)
			mask[b / 8] |= (uint8_t)(0x80 >> (b % 8));
		uint32_t a[4], m[4];
		memcpy(a, r->addr, 16);
		memcpy(m, mask, 16);
		if (r->family == 4 && l.n4 < NF_FLAT_RULES) {
			struct nf_flat4 *f = &l.r4[l.n4++];
			*f = (struct nf_flat4){.net = a[0] & m[0],
					       .mask = m[0],
					       .lo = r->port_lo,
					       .hi = r->port_hi,
					       .proto = r->proto};
		} else if (r->family == 6 && l.n6 < NF_FLAT_RULES) {
			struct nf_flat6 *f = &l.r6[l.n6++];
			for (int w = 0; w < 4; w++) {
				f->net[w] = a[w] & m[w];
				f->mask[w] = m[w];
			}
			f->lo = r->port_lo;
			f->hi = r->port_hi;
			f->proto = r->proto;
		} else {
			flat = false; /* more than the storage holds: the trie */
		}
	}
	if (flat)
		l.flags |= NF_F_FLAT;
	else
		l.n4 = l.n6 = 0;
	int fd = bpf_map__fd(nf->skel->maps.local);
	if (bpf_map_update_elem(fd, &cgid, &l, BPF_ANY) == 0)
		return 0;
	if (flat_only) {
		wr_err_sys(err, "policy: local storage");
		return -EAGAIN;
	}
	l.flags &= ~NF_F_FLAT;
	l.n4 = l.n6 = 0;
	if (bpf_map_update_elem(fd, &cgid, &l, BPF_ANY) == 0)
		return 0;
	return wr_err_sys(err, "policy: local storage");
}

/* ---- load ----------------------------------------------------------------- */

static const char *hook_name(uint8_t layer)
{
	switch (layer) {
	case NF_L_CONNECT4: return "connect4";
	case NF_L_CONNECT6: return "connect6";
	case NF_L_SENDMSG4: return "sendmsg4";
	case NF_L_SENDMSG6: return "sendmsg6";
	case NF_L_EGRESS: return "egress";
	case NF_L_SOCK_CREATE: return "sock_create";
	default: return "unknown";
	}
}

static const char *reason_name(uint8_t r)
{
	switch (r) {
	case NF_R_POLICY: return "policy";
	case NF_R_DENYSET: return "deny_set";
	case NF_R_SOCKTYPE: return "raw_socket";
	case NF_R_DNS: return "dns_resolver";
	default: return "no_policy";
	}
}

static int64_t ts_of(const struct timespec *t)
{
	return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

static int on_event(void *ctx, void *data, size_t size)
{
	struct wr_netfilter *nf = ctx;
	if (size < sizeof(struct nf_event) || !nf->on_refusal)
		return 0;
	const struct nf_event *e = data;
	struct timespec rt, bt;
	clock_gettime(CLOCK_REALTIME, &rt);
	clock_gettime(CLOCK_BOOTTIME, &bt);
	struct wr_net_refusal r = {
	    .cgroup_id = e->cgid,
	    .time_ns = ts_of(&rt) - (ts_of(&bt) - (int64_t)e->ts_ns),
	    .family = e->family,
	    .proto = e->proto,
	    .port = e->port,
	    .layer = "bpf-net",
	    .hook = hook_name(e->layer),
	    .reason = reason_name(e->reason),
	    .count = e->count,
	};
	memcpy(r.addr, e->addr, 16);
	nf->on_refusal(&r, nf->ctx);
	return 0;
}

static int silent_print(enum libbpf_print_level lvl, const char *fmt, va_list ap)
{
	(void)lvl;
	(void)fmt;
	(void)ap;
	return 0;
}

int wr_netfilter_load(const struct wr_netfilter_opts *o, struct wr_netfilter **out, wr_err *err)
{
	/* Library code does not log: libbpf's messages would go to stderr. */
	libbpf_set_print(silent_print);
	struct wr_netfilter *nf = calloc(1, sizeof(*nf));
	if (!nf)
		return wr_err_sys(err, "netfilter: alloc");
	pthread_mutex_init(&nf->lock, NULL);
	nf->on_refusal = o ? o->on_refusal : NULL;
	nf->ctx = o ? o->ctx : NULL;
	uint32_t burst = o && o->event_burst ? o->event_burst : 32;
	uint32_t rate = o && o->events_per_sec ? o->events_per_sec : 10;
	nf->skel = netfilter_bpf__open();
	if (!nf->skel) {
		int r = wr_err_sys(err, "netfilter: open BPF object");
		wr_netfilter_free(nf);
		return r;
	}
	nf->skel->bss->conf.burst = burst;
	nf->skel->bss->conf.ns_per_token = 1000000000ull / rate;
	if (netfilter_bpf__load(nf->skel) < 0) {
		int r = wr_err_sys(err, "netfilter: load BPF programs (needs CAP_BPF and "
					"CAP_NET_ADMIN)");
		wr_netfilter_free(nf);
		return r;
	}
	nf->rb = ring_buffer__new(bpf_map__fd(nf->skel->maps.events), on_event, nf, NULL);
	if (!nf->rb) {
		int r = wr_err_sys(err, "netfilter: ring buffer");
		wr_netfilter_free(nf);
		return r;
	}
	*out = nf;
	return 0;
}

void wr_netfilter_free(struct wr_netfilter *nf)
{
	if (!nf)
		return;
	/* Links still open belong to attachments their owner did not detach;
	 * they hold the programs, which go when the last link does. */
	ring_buffer__free(nf->rb);
	netfilter_bpf__destroy(nf->skel);
	free(nf->pin_dir);
	pthread_mutex_destroy(&nf->lock);
	free(nf);
}

int wr_netfilter_set_deny(struct wr_netfilter *nf, const struct wr_net_rule *rules, size_t n,
			  wr_err *err)
{
	if (wr_nf_rules_validate(rules, n, "deny", err) < 0)
		return -EINVAL;
	int fd = bpf_map__fd(nf->skel->maps.deny);
	/* The blocks of the new set join those of the old first, entries are
	 * inserted, stale ones removed, and only then the blocks become the
	 * new set's: a block bit is never clear while an entry needs it. */
	_cleanup_free_ __u64(*blocks)[NF_DENY_BLOCKS] = calloc(2, sizeof(*blocks));
	if (!blocks)
		return wr_err_sys(err, "deny set: alloc");
	for (size_t i = 0; i < n; i++) {
		unsigned first = (unsigned)rules[i].addr[0] << 8 | rules[i].addr[1];
		unsigned count = rules[i].prefix >= 16 ? 1 : 1u << (16 - rules[i].prefix);
		for (unsigned b = first; b < first + count && b < 65536; b++)
			blocks[rules[i].family == 6][b / 64] |= 1ull << (b % 64);
	}
	__u64(*live)[NF_DENY_BLOCKS] = nf->skel->bss->deny_blocks;
	for (int f = 0; f < 2; f++)
		for (int w = 0; w < NF_DENY_BLOCKS; w++)
			__atomic_or_fetch(&live[f][w], blocks[f][w], __ATOMIC_SEQ_CST);
	if (trie_fill(fd, rules, n, NULL, err) < 0)
		return wr_err_wrap(err, "deny set");
	struct nf_key k, next;
	void *prev = NULL;
	while (bpf_map_get_next_key(fd, prev, &next) == 0) {
		k = next;
		prev = &k;
		bool keep = false;
		for (size_t i = 0; i < n && !keep; i++) {
			struct nf_key rk;
			rule_key(&rules[i], &rk);
			keep = memcmp(&rk, &k, sizeof(k)) == 0;
		}
		if (!keep && bpf_map_delete_elem(fd, &k) == 0)
			prev = NULL; /* restart: the iteration order changed */
	}
	for (int f = 0; f < 2; f++)
		for (int w = 0; w < NF_DENY_BLOCKS; w++)
			__atomic_store_n(&live[f][w], blocks[f][w], __ATOMIC_SEQ_CST);
	return 0;
}

/* ---- pins ------------------------------------------------------------------ */

/* The hooks in the order of wr_netfilter_att.links; pin file suffixes. */
static const char *const pin_hooks[NF_HOOKS] = {"sock_create", "connect4", "connect6",
						"sendmsg4",    "sendmsg6", "egress"};

int wr_netfilter_set_pin_dir(struct wr_netfilter *nf, const char *dir, wr_err *err)
{
	struct statfs sf;
	if (statfs(dir, &sf) < 0)
		return wr_err_sys(err, "netfilter pins: %s", dir);
	if ((unsigned long)sf.f_type != BPF_FS_MAGIC)
		return wr_err_set(err, ENOTSUP, "netfilter pins: %s is not on a bpf filesystem",
				  dir);
	free(nf->pin_dir);
	nf->pin_dir = strdup(dir);
	return nf->pin_dir ? 0 : wr_err_sys(err, "netfilter pins: alloc");
}

static bool pin_name_ok(const char *name)
{
	if (!*name || strlen(name) > 64)
		return false;
	for (; *name; name++)
		if (!((*name >= 'a' && *name <= 'z') || (*name >= 'A' && *name <= 'Z') ||
		      (*name >= '0' && *name <= '9') || *name == '-' || *name == '_'))
			return false;
	return true;
}

/* Pin the attachment's links as <dir>/<name>:<hook> (bpffs refuses dots in
 * names), replacing pins of an
 * earlier daemon: each old pin is removed only once the new link is
 * attached (both run in between; a refusal of either refuses), so the
 * cgroup is never without the filter. */
static int pin_links(struct wr_netfilter *nf, struct wr_netfilter_att *att, const char *name,
		     wr_err *err)
{
	att->pin = strdup(name);
	if (!att->pin)
		return wr_err_sys(err, "netfilter pins: alloc");
	for (int i = 0; i < NF_HOOKS; i++) {
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/%s:%s", nf->pin_dir, name, pin_hooks[i]);
		if (unlink(path) < 0 && errno != ENOENT)
			return wr_err_sys(err, "netfilter pins: remove %s", path);
		int r = bpf_link__pin(att->links[i], path);
		if (r < 0) {
			errno = -r;
			return wr_err_sys(err, "netfilter pins: %s", path);
		}
	}
	return 0;
}

int wr_netfilter_sweep_pins(struct wr_netfilter *nf, bool (*keep)(const char *name, void *ctx),
			    void *ctx, wr_err *err)
{
	if (!nf->pin_dir)
		return 0;
	_cleanup_closedir_ DIR *d = opendir(nf->pin_dir);
	if (!d)
		return wr_err_sys(err, "netfilter pins: %s", nf->pin_dir);
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		const char *dot = strrchr(de->d_name, ':');
		if (de->d_name[0] == '.' || !dot || (size_t)(dot - de->d_name) > 64)
			continue;
		char name[65];
		memcpy(name, de->d_name, (size_t)(dot - de->d_name));
		name[dot - de->d_name] = 0;
		if (keep && keep(name, ctx))
			continue;
		if (unlinkat(dirfd(d), de->d_name, 0) == 0)
			n++;
	}
	return n;
}

/* ---- attach --------------------------------------------------------------- */

/* Level of a v2 cgroup (the root is 0): the ids of its ancestors are what
 * the programs look up (bpf_get_current_ancestor_cgroup_id). */
static int cgroup_level(int fd, uint64_t *id, wr_err *err)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return wr_err_sys(err, "cgroup: stat");
	*id = st.st_ino; /* a cgroup's id is its kernfs inode number */
	_cleanup_close_ int cur = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (cur < 0)
		return wr_err_sys(err, "cgroup: dup");
	uint64_t ino = st.st_ino;
	for (int level = 0; level < 32; level++) {
		if (ino == 1) /* the root cgroup */
			return level;
		int up = openat(cur, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (up < 0)
			return wr_err_sys(err, "cgroup: open parent");
		close(cur);
		cur = up;
		if (fstat(cur, &st) < 0)
			return wr_err_sys(err, "cgroup: stat parent");
		if (st.st_ino == ino)
			return level; /* the root of this mount */
		ino = st.st_ino;
	}
	return wr_err_set(err, ELOOP, "cgroup: nested 32 levels or deeper");
}

static void level_ref(struct wr_netfilter *nf, int level, bool add)
{
	pthread_mutex_lock(&nf->lock);
	if (add) {
		if (nf->level_users[level]++ == 0)
			__atomic_or_fetch(&nf->skel->bss->conf.level_mask, 1u << level,
					  __ATOMIC_SEQ_CST);
	} else if (nf->level_users[level] && --nf->level_users[level] == 0) {
		__atomic_and_fetch(&nf->skel->bss->conf.level_mask, ~(1u << level),
				   __ATOMIC_SEQ_CST);
	}
	pthread_mutex_unlock(&nf->lock);
}

/* conf.cut_users: while no policy asks to cut established TCP, the egress
 * program passes a stream socket's segments without a lookup. */
static void cut_ref(struct wr_netfilter *nf, struct wr_netfilter_att *att, bool cut)
{
	if (att->cut == cut)
		return;
	att->cut = cut;
	if (cut)
		__atomic_add_fetch(&nf->skel->bss->conf.cut_users, 1, __ATOMIC_SEQ_CST);
	else
		__atomic_sub_fetch(&nf->skel->bss->conf.cut_users, 1, __ATOMIC_SEQ_CST);
}

static void forget_cgid(struct wr_netfilter *nf, uint64_t cgid)
{
	bpf_map_delete_elem(bpf_map__fd(nf->skel->maps.sbx), &cgid);
	bpf_map_delete_elem(bpf_map__fd(nf->skel->maps.rl), &cgid);
	int fd = bpf_map__fd(nf->skel->maps.dyn);
	struct nf_dyn_key k, next;
	void *prev = NULL;
	while (bpf_map_get_next_key(fd, prev, &next) == 0) {
		k = next;
		prev = &k;
		if (k.cgid == cgid && bpf_map_delete_elem(fd, &k) == 0)
			prev = NULL;
	}
}

/* Put a trie holding p in the sbx map for att's cgroup (insert or
 * replace). The one switch: an old trie stays alive for hooks already
 * reading it (the kernel frees an inner map after an RCU grace period). */
static int install_trie(struct wr_netfilter *nf, struct wr_netfilter_att *att,
			const struct wr_net_policy *p, wr_err *err)
{
	_cleanup_close_ int trie = policy_trie(p, err);
	if (trie < 0)
		return -1;
	if (bpf_map_update_elem(bpf_map__fd(nf->skel->maps.sbx), &att->cgid, &trie, BPF_ANY) < 0)
		return wr_err_sys(err, "policy map");
	att->in_sbx = true;
	return 0;
}

int wr_netfilter_attach(struct wr_netfilter *nf, int cgroup_fd, const struct wr_net_policy *p,
			struct wr_netfilter_att **out, wr_err *err)
{
	return wr_netfilter_attach_pinned(nf, cgroup_fd, p, NULL, out, err);
}

int wr_netfilter_attach_pinned(struct wr_netfilter *nf, int cgroup_fd,
			       const struct wr_net_policy *p, const char *pin_name,
			       struct wr_netfilter_att **out, wr_err *err)
{
	if (wr_net_policy_validate(p, err) < 0)
		return -EINVAL;
	if (pin_name && nf->pin_dir && !pin_name_ok(pin_name))
		return wr_err_set(err, EINVAL, "netfilter attach: pin name '%s'", pin_name);
	uint64_t cgid;
	int level = cgroup_level(cgroup_fd, &cgid, err);
	if (level < 0)
		return wr_err_wrap(err, "netfilter attach");
	/* A flat policy (at most NF_FLAT_RULES rules a family, every policy the
	 * API's defaults make) lives in the cgroup's local storage alone: the
	 * hooks read no trie for it, so it gets none and no entry in the sbx
	 * map. An update of a hash of maps waits for an RCU grace period in
	 * the kernel (as does the delete at detach): 0.2 ms at the median and
	 * several ms in the tail of every create on the loaded 2-CPU VMs
	 * (bench/README.md, API overhead). */
	bool flat = policy_flat(p);
	int lfd = bpf_map__fd(nf->skel->maps.local);
	struct nf_local cur;
	if (flat && bpf_map_lookup_elem(lfd, &cgid, &cur) == 0 && cur.cgid != 0)
		return wr_err_set(err, EEXIST, "netfilter attach: cgroup %llu is attached",
				  (unsigned long long)cgid);
	_cleanup_close_ int trie = flat ? -1 : policy_trie(p, err);
	if (!flat && trie < 0)
		return wr_err_wrap(err, "netfilter attach");
	if (!flat &&
	    bpf_map_update_elem(bpf_map__fd(nf->skel->maps.sbx), &cgid, &trie, BPF_NOEXIST) < 0) {
		if (errno == EEXIST)
			return wr_err_set(err, EEXIST, "netfilter attach: cgroup %llu is attached",
					  (unsigned long long)cgid);
		return wr_err_sys(err, "netfilter attach: policy map");
	}
	/* A refusal count from an earlier cgroup with a reused id is gone. */
	bpf_map_delete_elem(bpf_map__fd(nf->skel->maps.rl), &cgid);
	struct wr_netfilter_att *att = calloc(1, sizeof(*att));
	if (!att) {
		forget_cgid(nf, cgid);
		return wr_err_sys(err, "netfilter attach: alloc");
	}
	att->in_sbx = !flat;
	att->cgid = cgid;
	att->level = level;
	level_ref(nf, level, true);
	cut_ref(nf, att, p->cut_established);
	struct bpf_program *progs[NF_HOOKS] = {
	    nf->skel->progs.wr_sock_create, nf->skel->progs.wr_connect4,
	    nf->skel->progs.wr_connect6,    nf->skel->progs.wr_sendmsg4,
	    nf->skel->progs.wr_sendmsg6,    nf->skel->progs.wr_egress,
	};
	for (int i = 0; i < NF_HOOKS; i++) {
		att->links[i] = bpf_program__attach_cgroup(progs[i], cgroup_fd);
		if (!att->links[i]) {
			int r =
			    wr_err_sys(err, "netfilter attach: %s", bpf_program__name(progs[i]));
			wr_netfilter_detach(nf, &att);
			return r;
		}
	}
	/* after the links: their attachment made the storage (until it is
	 * written, a zero header sends the hooks to the sbx map, where a flat
	 * policy has no trie: they refuse, and no sandbox code runs yet) */
	int lr = local_write(nf, cgid, p, flat, err);
	if (lr == -EAGAIN) {
		/* no flat value: the trie after all, then the header */
		wr_err_free(err);
		lr = install_trie(nf, att, p, err);
		if (lr == 0)
			lr = local_write(nf, cgid, p, false, err);
	}
	if (lr < 0) {
		wr_netfilter_detach_keep_pins(nf, &att);
		return wr_err_wrap(err, "netfilter attach");
	}
	if (pin_name && nf->pin_dir && pin_links(nf, att, pin_name, err) < 0) {
		/* the old pins, if any, stay: they still hold the old filter */
		wr_netfilter_detach_keep_pins(nf, &att);
		return wr_err_wrap(err, "netfilter attach");
	}
	*out = att;
	return 0;
}

int wr_netfilter_update(struct wr_netfilter *nf, struct wr_netfilter_att *att,
			const struct wr_net_policy *p, wr_err *err)
{
	if (wr_net_policy_validate(p, err) < 0)
		return -EINVAL;
	bool flat = policy_flat(p);
	/* Trie first, storage second: whichever a hook reads meanwhile (a
	 * flat storage is complete; one without NF_F_FLAT sends it to the
	 * trie), it sees the old policy or the new one. A flat policy needs
	 * no trie; one of an earlier policy is dropped after the storage. */
	if (!flat && install_trie(nf, att, p, err) < 0)
		return wr_err_wrap(err, "netfilter update");
	cut_ref(nf, att, p->cut_established);
	int r = local_write(nf, att->cgid, p, flat, err);
	if (r == -EAGAIN) {
		wr_err_free(err);
		r = install_trie(nf, att, p, err);
		if (r == 0)
			r = local_write(nf, att->cgid, p, false, err);
		flat = false;
	}
	if (r < 0)
		return wr_err_wrap(err, "netfilter update");
	if (flat && att->in_sbx &&
	    bpf_map_delete_elem(bpf_map__fd(nf->skel->maps.sbx), &att->cgid) == 0)
		att->in_sbx = false;
	return 0;
}

static void detach(struct wr_netfilter *nf, struct wr_netfilter_att **attp, bool unpin)
{
	struct wr_netfilter_att *att = *attp;
	if (!att)
		return;
	*attp = NULL;
	for (int i = 0; i < NF_HOOKS; i++) {
		if (att->pin && unpin && att->links[i]) {
			char path[PATH_MAX];
			snprintf(path, sizeof(path), "%s/%s:%s", nf->pin_dir, att->pin,
				 pin_hooks[i]);
			unlink(path);
		}
		bpf_link__destroy(att->links[i]);
	}
	/* The cgroup's storage outlives the links (the kernel frees it when
	 * the cgroup goes, not at detach): marked unwritten, so that a later
	 * attach to the same cgroup (a container restored from a checkpoint,
	 * container_ckpt.c) is not taken for a second one. No hook of ours
	 * runs on the cgroup any more. */
	struct nf_local unwritten;
	memset(&unwritten, 0, sizeof(unwritten));
	bpf_map_update_elem(bpf_map__fd(nf->skel->maps.local), &att->cgid, &unwritten, BPF_EXIST);
	free(att->pin);
	forget_cgid(nf, att->cgid);
	level_ref(nf, att->level, false);
	cut_ref(nf, att, false);
	free(att);
}

void wr_netfilter_detach(struct wr_netfilter *nf, struct wr_netfilter_att **attp)
{
	detach(nf, attp, true);
}

void wr_netfilter_detach_keep_pins(struct wr_netfilter *nf, struct wr_netfilter_att **attp)
{
	detach(nf, attp, false);
}

uint64_t wr_netfilter_att_cgid(const struct wr_netfilter_att *att)
{
	return att->cgid;
}

int wr_netfilter_counters(struct wr_netfilter *nf, uint64_t cgid, struct wr_net_counters *c,
			  wr_err *err)
{
	struct nf_rl v;
	memset(c, 0, sizeof(*c));
	if (bpf_map_lookup_elem_flags(bpf_map__fd(nf->skel->maps.rl), &cgid, &v, BPF_F_LOCK) < 0) {
		if (errno == ENOENT)
			return 0; /* nothing refused yet */
		return wr_err_sys(err, "netfilter counters");
	}
	c->refused = v.refused;
	c->suppressed = v.suppressed;
	c->dropped = v.dropped;
	return 0;
}

int wr_netfilter_allow_addr(struct wr_netfilter *nf, uint64_t cgid, int family, const uint8_t *addr,
			    const struct wr_net_rule *ports, size_t n, uint32_t ttl_s, wr_err *err)
{
	if ((family != 4 && family != 6) || n == 0 || n > 4)
		return wr_err_set(err, EINVAL, "netfilter allow addr: family 4/6, 1..4 port rules");
	struct nf_dyn_key k;
	memset(&k, 0, sizeof(k));
	k.cgid = cgid;
	if (family == 4) {
		k.addr[10] = k.addr[11] = 0xff;
		memcpy(&k.addr[12], addr, 4);
	} else {
		memcpy(k.addr, addr, 16);
	}
	struct nf_dyn_val v;
	memset(&v, 0, sizeof(v));
	if (ttl_s) {
		struct timespec bt;
		clock_gettime(CLOCK_BOOTTIME, &bt);
		v.expires_ns = (uint64_t)ts_of(&bt) + (uint64_t)ttl_s * 1000000000ull;
	}
	v.n = (uint32_t)n;
	for (size_t i = 0; i < n; i++) {
		v.r[i].lo = ports[i].port_lo;
		v.r[i].hi = ports[i].port_hi;
		v.r[i].proto = ports[i].proto;
	}
	if (bpf_map_update_elem(bpf_map__fd(nf->skel->maps.dyn), &k, &v, BPF_ANY) < 0)
		return wr_err_sys(err, "netfilter allow addr");
	return 0;
}

int wr_netfilter_expire(struct wr_netfilter *nf)
{
	struct timespec bt;
	clock_gettime(CLOCK_BOOTTIME, &bt);
	uint64_t now = (uint64_t)ts_of(&bt);
	int fd = bpf_map__fd(nf->skel->maps.dyn), n = 0;
	struct nf_dyn_key k, next;
	void *prev = NULL;
	while (bpf_map_get_next_key(fd, prev, &next) == 0) {
		k = next;
		prev = &k;
		struct nf_dyn_val v;
		if (bpf_map_lookup_elem(fd, &k, &v) == 0 && v.expires_ns && v.expires_ns < now &&
		    bpf_map_delete_elem(fd, &k) == 0) {
			n++;
			prev = NULL; /* restart: the iteration order changed */
		}
	}
	return n;
}

int wr_netfilter_event_fd(const struct wr_netfilter *nf)
{
	return ring_buffer__epoll_fd(nf->rb);
}

int wr_netfilter_consume(struct wr_netfilter *nf, wr_err *err)
{
	int r = ring_buffer__consume(nf->rb);
	if (r < 0) {
		errno = -r;
		return wr_err_sys(err, "netfilter events");
	}
	return r;
}
