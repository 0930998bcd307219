/* The daemon's network filter: loaded once, attached per sandbox at create
 * and adoption, swapped on PATCH, detached at destroy; refusals kept per
 * sandbox; the DNS forwarder's names and resolved addresses. See
 * netpolicy.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <linux/magic.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "daemon/audit.h"
#include "daemon/config.h"
#include "daemon/db.h"
#include "daemon/dns.h"
#include "daemon/jsonutil.h"
#include "daemon/manager.h"
#include "daemon/netpolicy.h"

/* ---- the daemon's filter ---------------------------------------------------- */

struct wrd_nf {
	struct wrd_sbx *sb; /* owner; the list entry goes before sb does */
	uint64_t cgid;
	struct wr_netfilter_att *att;
	/* a VM tier's sandbox with its state on disk: no QEMU, no cgroup, no
	 * links; the policy is attached when QEMU comes back (wrd_nf_resume) */
	bool pending;
	struct wrd_netpolicy pol;
	bool has_gw4, has_gw6, has_self4;
	uint8_t gw4[4], gw6[16], self4[4];
	uint64_t reported; /* sum of the counts of the events received */
	struct wr_net_refusal last[WRD_NET_LAST];
	unsigned nlast, head;
	struct wrd_nf *next;
};

/* g_lock covers the list and every wrd_net's policy and refusals; lock
 * order: g_lock, then a sandbox's lock (wrd_sbx_event). Never held across
 * a database write. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
/* One PATCH at a time: read, merge and apply under it, so two concurrent
 * PATCHes of a sandbox never lose one another's edits (and a
 * resume's attach, wrd_nf_resume, never attaches a policy a PATCH just
 * replaced). Lock order: g_patch, then g_lock. */
static pthread_mutex_t g_patch = PTHREAD_MUTEX_INITIALIZER;
static struct wr_netfilter *g_nf;
static struct wrd_nf *g_list;
static struct wr_net_rule g_deny[WR_NET_MAX_RULES];
static size_t g_ndeny;
static char g_why[256];
static pthread_t g_reader;

bool wrd_nf_enabled(void)
{
	return g_nf != NULL;
}

static void on_refusal(const struct wr_net_refusal *r, void *ctx)
{
	(void)ctx;
	char a[INET6_ADDRSTRLEN] = "";
	if (r->family)
		inet_ntop(r->family == 4 ? AF_INET : AF_INET6, r->addr, a, sizeof(a));
	pthread_mutex_lock(&g_lock);
	struct wrd_nf *n = g_list;
	while (n && n->cgid != r->cgroup_id)
		n = n->next;
	if (n) {
		n->last[n->head] = *r;
		n->head = (n->head + 1) % WRD_NET_LAST;
		if (n->nlast < WRD_NET_LAST)
			n->nlast++;
		n->reported += r->count;
		json_t *d =
		    json_pack("{s:s, s:s, s:s, s:I, s:s, s:i, s:s, s:I}", "layer", r->layer, "hook",
			      r->hook, "reason", r->reason, "count", (json_int_t)r->count,
			      "address", a, "port", r->port, "protocol",
			      wr_net_proto_name(r->proto), "time_ns", (json_int_t)r->time_ns);
		wrd_sbx_event(n->sb, "network_refused", d);
		/* the issue-7 sink: one model for every layer's refusals */
		const char *action = strncmp(r->hook, "connect", 7) == 0   ? "connect"
				     : strncmp(r->hook, "sendmsg", 7) == 0 ? "sendto"
				     : strcmp(r->hook, "sock_create") == 0 ? "socket"
									   : "send";
		wr_audit_net(WR_AUDIT_BPF_NET, n->sb->rec.id, n->sb->rec.tenant, action,
			     r->family ? a : NULL, r->port, wr_net_proto_name(r->proto), NULL,
			     r->reason, r->count, r->time_ns / 1000000);
	}
	pthread_mutex_unlock(&g_lock);
}

static void *reader_main(void *arg)
{
	(void)arg;
	struct pollfd p = {.fd = wr_netfilter_event_fd(g_nf), .events = POLLIN};
	int64_t next_expire = wrd_now_ms() + 60000;
	for (;;) {
		int pr = poll(&p, 1, 60000);
		if (wrd_now_ms() >= next_expire) {
			/* addresses learned from DNS whose TTL has passed */
			wr_netfilter_expire(g_nf);
			next_expire = wrd_now_ms() + 60000;
		}
		if (pr <= 0)
			continue;
		_cleanup_err_ wr_err err = NULL;
		if (wr_netfilter_consume(g_nf, &err) < 0)
			wr_warn("network refusals: %s", err->msg);
	}
	return NULL;
}

static int deny_push(const char *cidr, wr_err *err)
{
	if (g_ndeny == WR_NET_MAX_RULES)
		return wr_err_set(err, E2BIG, "deny set: at most %d entries", WR_NET_MAX_RULES);
	struct wr_net_rule *r = &g_deny[g_ndeny];
	memset(r, 0, sizeof(*r));
	if (wr_net_rule_parse_cidr(cidr, r, "deny", err) < 0)
		return -EINVAL;
	r->port_lo = 0;
	r->port_hi = 65535;
	r->proto = WR_NET_ANY;
	g_ndeny++;
	return 0;
}

int wrd_nf_deny_add(const char *cidr, wr_err *err)
{
	pthread_mutex_lock(&g_lock);
	int r = deny_push(cidr, err);
	if (r == 0 && g_nf)
		r = wr_netfilter_set_deny(g_nf, g_deny, g_ndeny, err);
	pthread_mutex_unlock(&g_lock);
	return r;
}

/* The DNS forwarder's "allow this answer": the service's ports, or for a
 * name of the policy's own domains web ports (tcp 80 and 443, udp 443). */
static int dns_allow(void *ctx, struct wrd_sbx *sb, int family, const void *addr, uint32_t ttl,
		     const struct wr_svc_ports *ports, size_t n_ports)
{
	(void)ctx;
	struct wr_net_rule r[4];
	size_t n = 0;
	memset(r, 0, sizeof(r));
	if (n_ports == 0) {
		r[0] = (struct wr_net_rule){.port_lo = 80, .port_hi = 80, .proto = WR_NET_TCP};
		r[1] = (struct wr_net_rule){.port_lo = 443, .port_hi = 443, .proto = WR_NET_TCP};
		r[2] = (struct wr_net_rule){.port_lo = 443, .port_hi = 443, .proto = WR_NET_UDP};
		n = 3;
	}
	for (size_t i = 0; i < n_ports && n < 4; i++, n++)
		r[n] = (struct wr_net_rule){.port_lo = ports[i].lo,
					    .port_hi = ports[i].hi,
					    .proto = ports[i].proto == IPPROTO_UDP ? WR_NET_UDP
										   : WR_NET_TCP};
	_cleanup_err_ wr_err err = NULL;
	int r2 = wrd_nf_allow_resolved(sb, family == AF_INET6 ? 6 : 4, addr, r, n, ttl, &err);
	return r2 < 0 ? r2 : 0;
}

/* Tell the forwarder which names this sandbox may resolve. */
static void dns_push(const char *tenant, const char *id, const struct wrd_netpolicy *p)
{
	struct wr_dns_names *names = NULL;
	_cleanup_err_ wr_err err = NULL;
	if (wrd_netpolicy_dns_names(p, true, &names, &err) < 0) {
		/* before the forwarder started (recovery): wrd_nf_dns_sync */
		if (wrd_dns_services() != NULL || p->n_services == 0)
			wr_warn("sandbox %s: DNS names: %s", id, err->msg);
		names = NULL;
	}
	_cleanup_err_ wr_err e2 = NULL;
	if (wrd_dns_set_names(tenant, id, names, &e2) < 0)
		wr_warn("sandbox %s: DNS names: %s", id, e2->msg);
}

struct sync_ent {
	char id[17];
	char *tenant;
	struct wrd_netpolicy pol;
};

void wrd_nf_dns_sync(void)
{
	/* copies under the lock, pushes after it (the forwarder has locks of
	 * its own; a PATCH meanwhile pushes its own names again) */
	pthread_mutex_lock(&g_lock);
	size_t n = 0;
	for (struct wrd_nf *x = g_list; x; x = x->next)
		n++;
	struct sync_ent *v = calloc(n ? n : 1, sizeof(*v));
	size_t k = 0;
	for (struct wrd_nf *x = g_list; v && x; x = x->next) {
		if (wrd_netpolicy_copy(&x->pol, &v[k].pol) < 0)
			continue;
		snprintf(v[k].id, sizeof(v[k].id), "%s", x->sb->rec.id);
		v[k].tenant = strdup(x->sb->rec.tenant);
		k++;
	}
	pthread_mutex_unlock(&g_lock);
	for (size_t i = 0; i < k; i++) {
		if (v[i].tenant)
			dns_push(v[i].tenant, v[i].id, &v[i].pol);
		free(v[i].tenant);
		wrd_netpolicy_clear(&v[i].pol);
	}
	free(v);
}

/* Where the links are pinned (see config.h, bpf_pin_dir). */
static void pin_dir_init(const struct wrd_config *cfg)
{
	char buf[PATH_MAX];
	const char *dir = cfg->bpf_pin_dir;
	struct statfs sf;
	if (!dir) {
		if (statfs("/sys/fs/bpf", &sf) < 0 || (unsigned long)sf.f_type != BPF_FS_MAGIC) {
			wr_warn("network filter: no bpffs at /sys/fs/bpf and no bpf_pin_dir: "
				"sandboxes run unfiltered from a daemon's exit to the next "
				"start's adoption");
			return;
		}
		snprintf(buf, sizeof(buf), "/sys/fs/bpf/warren-%s", cfg->cgroup_base);
		for (char *p = buf + strlen("/sys/fs/bpf/"); *p; p++)
			if (*p == '/' || *p == '.')
				*p = '_';
		dir = buf;
	}
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		wr_warn("network filter: bpf_pin_dir %s: %s", dir, strerror(errno));
		return;
	}
	_cleanup_err_ wr_err err = NULL;
	if (wr_netfilter_set_pin_dir(g_nf, dir, &err) < 0)
		wr_warn("network filter: %s", err->msg);
}

static bool pin_live(const char *name, void *ctx)
{
	(void)ctx;
	return wrd_table_has(name);
}

void wrd_nf_sweep(void)
{
	if (!g_nf)
		return;
	_cleanup_err_ wr_err err = NULL;
	int n = wr_netfilter_sweep_pins(g_nf, pin_live, NULL, &err);
	if (n < 0)
		wr_warn("network filter: %s", err->msg);
	else if (n > 0)
		wr_info("network filter: %d pinned links of gone sandboxes removed", n);
}

int wrd_nf_init(const struct wrd_config *cfg, wr_err *err)
{
	/* Never the host, link-local or a cloud's metadata service. */
	static const char *const fixed[] = {"169.254.0.0/16", "fe80::/10", "100.100.100.200/32",
					    "fd00:ec2::254/128"};
	for (size_t i = 0; i < WR_ARRAY_SIZE(fixed); i++)
		if (deny_push(fixed[i], err) < 0)
			return wr_err_wrap(err, "network deny set");
	struct ifaddrs *ifa = NULL;
	if (getifaddrs(&ifa) == 0) {
		for (struct ifaddrs *i = ifa; i; i = i->ifa_next) {
			if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET &&
					     i->ifa_addr->sa_family != AF_INET6))
				continue;
			char a[INET6_ADDRSTRLEN + 4];
			const void *src =
			    i->ifa_addr->sa_family == AF_INET
				? (const void *)&((struct sockaddr_in *)i->ifa_addr)->sin_addr
				: (const void *)&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
			inet_ntop(i->ifa_addr->sa_family, src, a, INET6_ADDRSTRLEN);
			if (strcmp(a, "127.0.0.1") == 0 || strcmp(a, "::1") == 0 ||
			    strncmp(a, "fe80:", 5) == 0)
				continue; /* loopback is the sandbox's own; link-local above */
			_cleanup_err_ wr_err e2 = NULL;
			if (deny_push(a, &e2) < 0)
				break;
		}
		freeifaddrs(ifa);
	}
	struct wr_netfilter_opts o = {.on_refusal = on_refusal};
	if (wr_netfilter_load(&o, &g_nf, err) < 0 ||
	    wr_netfilter_set_deny(g_nf, g_deny, g_ndeny, err) < 0) {
		snprintf(g_why, sizeof(g_why), "%s", (*err)->msg);
		wr_netfilter_free(g_nf);
		g_nf = NULL;
		return wr_err_wrap(err, "network filter");
	}
	pin_dir_init(cfg);
	wrd_dns_set_allow_hook(dns_allow, NULL); /* before wrd_dns_start */
	/* Created at start-up, as every daemon thread (no thread after the
	 * first sandbox: see ARCHITECTURE.md). */
	if (pthread_create(&g_reader, NULL, reader_main, NULL) != 0) {
		wr_netfilter_free(g_nf);
		g_nf = NULL;
		return wr_err_set(err, EAGAIN, "network filter: reader thread");
	}
	return 0;
}

static struct wrd_nf *net_of(struct wrd_sbx *sb)
{
	if (!sb->nf) {
		sb->nf = calloc(1, sizeof(*sb->nf));
		if (sb->nf)
			sb->nf->sb = sb;
	}
	return sb->nf;
}

void wrd_nf_set_gateway(struct wrd_sbx *sb, const uint8_t *gw4, const uint8_t *gw6)
{
	struct wrd_nf *n = net_of(sb);
	if (!n)
		return;
	pthread_mutex_lock(&g_lock);
	if ((n->has_gw4 = gw4 != NULL))
		memcpy(n->gw4, gw4, 4);
	if ((n->has_gw6 = gw6 != NULL))
		memcpy(n->gw6, gw6, 16);
	pthread_mutex_unlock(&g_lock);
}

static void to_filter(const struct wrd_nf *n, const struct wrd_netpolicy *p,
		      struct wr_net_policy *np)
{
	memset(np, 0, sizeof(*np));
	np->mode = p->mode;
	np->cut_established = p->cut_established;
	np->allow = p->allow;
	np->n_allow = p->n_allow;
	np->has_gw4 = n->has_gw4;
	np->has_gw6 = n->has_gw6;
	memcpy(np->gw4, n->gw4, 4);
	memcpy(np->gw6, n->gw6, 16);
	np->has_self4 = n->has_self4;
	memcpy(np->self4, n->self4, 4);
}

/* Recorded suspended to disk (lifecycle_suspend.c): a tier with the
 * suspend op, paused, no process. */
static bool suspended_rec(const struct wrd_sbx *sb)
{
	return sb->ops && sb->ops->suspend && sb->rec.state == WRD_PAUSED && sb->rec.init_pid == 0;
}

/* The sandbox's own address from its record (the plumbing's; a resume
 * after a restart may have taken a new one). */
static void self_from_record(struct wrd_sbx *sb, struct wrd_nf *n)
{
	json_t *rec = json_object_get(sb->rec.spec, "network");
	const char *self = json_string_value(json_object_get(rec, "address"));
	uint8_t self4[4];
	pthread_mutex_lock(&g_lock);
	n->has_self4 = self && inet_pton(AF_INET, self, self4) == 1;
	if (n->has_self4)
		memcpy(n->self4, self4, 4);
	pthread_mutex_unlock(&g_lock);
}

void wrd_nf_suspend(struct wrd_sbx *sb)
{
	struct wrd_nf *n = sb->nf;
	if (!n || !g_nf)
		return;
	pthread_mutex_lock(&g_lock);
	for (struct wrd_nf **pp = &g_list; *pp; pp = &(*pp)->next)
		if (*pp == n) {
			*pp = n->next;
			break;
		}
	n->pending = true;
	pthread_mutex_unlock(&g_lock);
	if (n->att)
		wr_netfilter_detach(g_nf, &n->att);
}

int wrd_nf_resume(struct wrd_sbx *sb, int cgroup_fd, wr_err *err)
{
	struct wrd_nf *n = sb->nf;
	if (!n || !n->pending || !g_nf)
		return 0;
	if (cgroup_fd < 0)
		return wr_err_set(err, ENOTSUP, "network filter: the sandbox has no v2 cgroup");
	self_from_record(sb, n);
	/* under g_patch: a PATCH meanwhile either wrote n->pol before (it is
	 * attached here) or waits and swaps the attached filter after */
	pthread_mutex_lock(&g_patch);
	struct wr_net_policy np;
	pthread_mutex_lock(&g_lock);
	to_filter(n, &n->pol, &np);
	pthread_mutex_unlock(&g_lock);
	struct wr_netfilter_att *att = NULL;
	int r = wr_netfilter_attach_pinned(g_nf, cgroup_fd, &np, sb->rec.id, &att, err);
	if (r == 0) {
		pthread_mutex_lock(&g_lock);
		n->att = att;
		n->cgid = wr_netfilter_att_cgid(att);
		n->pending = false;
		n->next = g_list;
		g_list = n;
		pthread_mutex_unlock(&g_lock);
		/* the forwarder's names (a renewed namespace re-registered) */
		dns_push(sb->rec.tenant, sb->rec.id, &n->pol);
	}
	pthread_mutex_unlock(&g_patch);
	return r < 0 ? wr_err_wrap(err, "network") : 0;
}

int wrd_nf_attach(struct wrd_sbx *sb, int cgroup_fd, wr_err *err)
{
	/* spec.network holds the policy and, for a networked sandbox, what the
	 * plumbing (network.c) recorded: its address, its gateway (where the
	 * DNS forwarder listens: port 53 there is allowed) and its veth */
	json_t *rec = json_object_get(sb->rec.spec, "network");
	json_t *pol = json_is_object(rec) ? json_deep_copy(rec) : NULL;
	const char *gw = json_string_value(json_object_get(rec, "gateway"));
	uint8_t gw4[4];
	if (gw && inet_pton(AF_INET, gw, gw4) == 1)
		wrd_nf_set_gateway(sb, gw4, NULL);
	/* its own address, which the deny set's bridge subnet covers */
	const char *self = json_string_value(json_object_get(rec, "address"));
	uint8_t self4[4];
	if (self && inet_pton(AF_INET, self, self4) == 1 && net_of(sb)) {
		pthread_mutex_lock(&g_lock);
		sb->nf->has_self4 = true;
		memcpy(sb->nf->self4, self4, 4);
		pthread_mutex_unlock(&g_lock);
	}
	if (pol) {
		json_object_del(pol, "address");
		json_object_del(pol, "gateway");
		json_object_del(pol, "host_veth");
	}
	struct wrd_netpolicy p;
	int pr = wrd_netpolicy_parse(pol, &p, err);
	json_decref(pol);
	if (pr < 0) {
		wrd_netpolicy_clear(&p);
		return wr_err_wrap(err, "network policy of the record");
	}
	struct wrd_nf *n = net_of(sb);
	if (!n) {
		wrd_netpolicy_clear(&p);
		return wr_err_set(err, ENOMEM, "out of memory");
	}
	if (g_nf && cgroup_fd < 0 && suspended_rec(sb)) {
		/* no QEMU (its state on disk): nothing runs that could use the
		 * network; wrd_nf_resume attaches before it runs again */
		n->pol = p;
		n->pending = true;
		dns_push(sb->rec.tenant, sb->rec.id, &n->pol);
		return 0;
	}
	if (!g_nf || (cgroup_fd < 0 && p.mode == WR_NET_NONE)) {
		/* no filter, or no v2 cgroup to hang it on (v1-only host):
		 * mode none still holds, the sandbox's netns has loopback only */
		if (p.mode != WR_NET_NONE) {
			wrd_netpolicy_clear(&p);
			return wr_err_field(err, "network.mode",
					    "network.mode: this node has no network filter (%s); "
					    "only \"none\" is possible",
					    g_why);
		}
		n->pol = p;
		dns_push(sb->rec.tenant, sb->rec.id, &n->pol);
		return 0; /* none: the sandbox's netns has loopback only */
	}
	if (cgroup_fd < 0) {
		wrd_netpolicy_clear(&p);
		return wr_err_set(err, ENOTSUP, "network filter: the sandbox has no v2 cgroup");
	}
	struct wr_net_policy np;
	pthread_mutex_lock(&g_lock);
	to_filter(n, &p, &np);
	pthread_mutex_unlock(&g_lock);
	struct wr_netfilter_att *att = NULL;
	if (wr_netfilter_attach_pinned(g_nf, cgroup_fd, &np, sb->rec.id, &att, err) < 0) {
		wrd_netpolicy_clear(&p);
		return wr_err_wrap(err, "network");
	}
	pthread_mutex_lock(&g_lock);
	n->att = att;
	n->cgid = wr_netfilter_att_cgid(att);
	n->pol = p;
	n->next = g_list;
	g_list = n;
	pthread_mutex_unlock(&g_lock);
	dns_push(sb->rec.tenant, sb->rec.id, &p);
	return 0;
}

int wrd_nf_attach_idle(int cgroup_fd, struct wr_netfilter_att **out, wr_err *err)
{
	*out = NULL;
	if (!g_nf)
		return 0;
	struct wr_net_policy p = {.mode = WR_NET_NONE};
	return wr_netfilter_attach(g_nf, cgroup_fd, &p, out, err);
}

void wrd_nf_detach_idle(struct wr_netfilter_att **att)
{
	if (g_nf && *att)
		wr_netfilter_detach(g_nf, att);
}

void wrd_nf_detach(struct wrd_sbx *sb)
{
	struct wrd_nf *n = sb->nf;
	if (!n)
		return;
	pthread_mutex_lock(&g_lock);
	for (struct wrd_nf **pp = &g_list; *pp; pp = &(*pp)->next)
		if (*pp == n) {
			*pp = n->next;
			break;
		}
	pthread_mutex_unlock(&g_lock);
	if (n->att)
		wr_netfilter_detach(g_nf, &n->att);
	wrd_dns_unregister(sb->rec.id);
	wrd_netpolicy_clear(&n->pol);
	free(n);
	sb->nf = NULL;
}

/* A policy's record keeps what the plumbing recorded beside it (address,
 * gateway, veth: a restart adopts the lease by them). */
static json_t *keep_plumbing(const struct wrd_sbx *sb, json_t *j)
{
	static const char *const keys[] = {"address", "gateway", "host_veth"};
	json_t *rn = json_object_get(sb->rec.spec, "network");
	for (size_t i = 0; j && i < sizeof(keys) / sizeof(keys[0]); i++) {
		json_t *v = json_object_get(rn, keys[i]);
		if (v)
			json_object_set(j, keys[i], v);
	}
	return j;
}

int wrd_nf_update(struct wrd_sbx *sb, const struct wrd_netpolicy *p, wr_err *err)
{
	struct wrd_nf *n = sb->nf;
	if (!n)
		return wr_err_set(err, ESRCH, "sandbox %s has no network state", sb->rec.id);
	if (!n->att && !n->pending && p->mode != WR_NET_NONE)
		return wr_err_field(err, "mode",
				    "mode: this sandbox has no network filter (%s); only \"none\"",
				    g_nf ? "no v2 cgroup" : g_why);
	struct wrd_netpolicy copy;
	if (wrd_netpolicy_copy(p, &copy) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	json_t *j = keep_plumbing(sb, wrd_netpolicy_json(p));
	_cleanup_free_ char *js = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	/* Durable first: a crash after the write re-attaches the new policy
	 * at the next start; the client only hears of success after both. */
	if (!js || wrd_db_set_network(sb->rec.id, js, err) < 0) {
		wrd_netpolicy_clear(&copy);
		return js ? wr_err_wrap(err, "network") : wr_err_set(err, ENOMEM, "out of memory");
	}
	if (n->att) {
		struct wr_net_policy np;
		pthread_mutex_lock(&g_lock);
		to_filter(n, p, &np);
		pthread_mutex_unlock(&g_lock);
		if (wr_netfilter_update(g_nf, n->att, &np, err) < 0) {
			/* put the record back to what is in force */
			json_t *oj = keep_plumbing(sb, wrd_netpolicy_json(&n->pol));
			_cleanup_free_ char *os = json_dumps(oj, JSON_COMPACT);
			json_decref(oj);
			_cleanup_err_ wr_err e2 = NULL;
			if (os && wrd_db_set_network(sb->rec.id, os, &e2) < 0)
				wr_warn("sandbox %s: network record: %s", sb->rec.id, e2->msg);
			wrd_netpolicy_clear(&copy);
			return wr_err_wrap(err, "network");
		}
	}
	pthread_mutex_lock(&g_lock);
	wrd_netpolicy_clear(&n->pol);
	n->pol = copy;
	pthread_mutex_unlock(&g_lock);
	dns_push(sb->rec.tenant, sb->rec.id, p);
	return 0;
}

int wrd_nf_policy_of(struct wrd_sbx *sb, struct wrd_netpolicy *out)
{
	struct wrd_netpolicy none = {0};
	pthread_mutex_lock(&g_lock);
	int r = wrd_netpolicy_copy(sb->nf ? &sb->nf->pol : &none, out);
	pthread_mutex_unlock(&g_lock);
	return r;
}

int wrd_nf_allow_resolved(struct wrd_sbx *sb, int family, const uint8_t *addr,
			  const struct wr_net_rule *ports, size_t n, uint32_t ttl_s, wr_err *err)
{
	if (!g_nf || !sb->nf || !sb->nf->att)
		return wr_err_set(err, ENOTSUP, "sandbox %s has no network filter", sb->rec.id);
	return wr_netfilter_allow_addr(g_nf, sb->nf->cgid, family, addr, ports, n, ttl_s, err);
}

json_t *wrd_nf_json(struct wrd_sbx *sb)
{
	struct wrd_nf *n = sb->nf;
	struct wr_net_counters c = {0};
	if (n && n->att) {
		_cleanup_err_ wr_err err = NULL;
		wr_netfilter_counters(g_nf, n->cgid, &c, &err);
	}
	pthread_mutex_lock(&g_lock);
	struct wrd_netpolicy none = {0};
	json_t *o = wrd_netpolicy_json(n ? &n->pol : &none);
	/* pending: no QEMU runs (its state on disk); attached before it does */
	json_object_set_new(o, "enforced", json_boolean(n && (n->att || n->pending)));
	json_t *rf = json_object();
	json_object_set_new(rf, "total", json_integer((json_int_t)c.refused));
	json_object_set_new(rf, "reported", json_integer(n ? (json_int_t)n->reported : 0));
	json_object_set_new(rf, "pending", json_integer((json_int_t)c.suppressed));
	json_object_set_new(rf, "events_dropped", json_integer((json_int_t)c.dropped));
	json_t *recent = json_array();
	for (unsigned i = 0; n && i < n->nlast; i++) {
		const struct wr_net_refusal *r =
		    &n->last[(n->head + WRD_NET_LAST - n->nlast + i) % WRD_NET_LAST];
		char a[INET6_ADDRSTRLEN] = "";
		if (r->family)
			inet_ntop(r->family == 4 ? AF_INET : AF_INET6, r->addr, a, sizeof(a));
		char ts[40];
		wrd_iso_time(r->time_ns / 1000000, ts, sizeof(ts));
		json_array_append_new(
		    recent,
		    json_pack("{s:s, s:i, s:s, s:i, s:s, s:s, s:s, s:s, s:I}", "time", ts, "family",
			      r->family, "address", a, "port", r->port, "protocol",
			      wr_net_proto_name(r->proto), "layer", r->layer, "hook", r->hook,
			      "reason", r->reason, "count", (json_int_t)r->count));
	}
	json_object_set_new(rf, "recent", recent);
	json_object_set_new(o, "refusals", rf);
	pthread_mutex_unlock(&g_lock);
	return o;
}

/* Has the sandbox a pooled namespace (made networked)? A VM's NIC and
 * slirp exist only then: QEMU cannot move into another namespace, and
 * microvm has no hot-plug (docs/ARCH-NETWORK.md, "The VM tiers' network"). */
static bool plumbed(const struct wrd_sbx *sb)
{
	json_t *net = json_object_get(sb->rec.spec, "network");
	return strcmp(sb->ops->name, "container") == 0 || json_object_get(net, "address") != NULL;
}

static int no_nic(const struct wrd_sbx *sb, wr_err *err)
{
	wr_err_field(err, "mode",
		     "mode: this %s sandbox was created offline (network mode \"none\"): it has no "
		     "network device and no network namespace to give one, so a policy change "
		     "cannot connect it; create it with the mode it will need (a policy of mode "
		     "\"none\" at first, then PATCHed, works on a sandbox created networked)",
		     sb->ops->name);
	(*err)->errnum = ECHILD; /* 409: the sandbox's state, not the request */
	return -1;
}

int wrd_nf_patch(struct wrd_sbx *sb, json_t *patch, wr_err *err)
{
	pthread_mutex_lock(&g_patch);
	struct wrd_netpolicy cur, next;
	int r = wrd_nf_policy_of(sb, &cur);
	if (r < 0) {
		pthread_mutex_unlock(&g_patch);
		return wr_err_set(err, ENOMEM, "out of memory");
	}
	r = wrd_netpolicy_patch(&cur, patch, &next, err);
	if (r == 0 && next.mode != WR_NET_NONE && !plumbed(sb))
		r = no_nic(sb, err);
	if (r == 0)
		r = wrd_nf_update(sb, &next, err);
	wrd_netpolicy_clear(&cur);
	wrd_netpolicy_clear(&next);
	pthread_mutex_unlock(&g_patch);
	return r;
}
