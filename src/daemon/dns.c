/* warrend's DNS forwarder glue (dns.h): config, the address and policy
 * tables the forwarder's hooks read, events. */
#include "daemon/dns.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "daemon/audit.h"
#include "daemon/jsonutil.h"
#include "daemon/manager.h"

#define NB 1024

struct who_ent { /* one address of a sandbox */
	struct sockaddr_storage addr;
	char id[80];
	struct who_ent *next;
};

struct pol_ent { /* one sandbox: tenant and allowed names */
	char id[80];
	char tenant[128];
	struct wr_dns_names *names;
	unsigned n_addrs;
	struct pol_ent *next;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct who_ent *g_who[NB];
static struct pol_ent *g_pol[NB];
static struct wr_dns *g_dns;
static struct wr_services *g_services;
static wrd_dns_allow_fn g_allow;
static void *g_allow_ctx;

static size_t hbytes(const void *p, size_t n)
{
	const unsigned char *b = p;
	size_t h = 14695981039346656037ULL;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 1099511628211ULL;
	return h % NB;
}

static const void *ip_of(const struct sockaddr *a, size_t *n)
{
	if (a->sa_family == AF_INET) {
		*n = 4;
		return &((const struct sockaddr_in *)a)->sin_addr;
	}
	*n = 16;
	return &((const struct sockaddr_in6 *)a)->sin6_addr;
}

static size_t hid(const char *id)
{
	return hbytes(id, strlen(id));
}

static struct pol_ent *pol_find(const char *id)
{
	for (struct pol_ent *p = g_pol[hid(id)]; p; p = p->next)
		if (strcmp(p->id, id) == 0)
			return p;
	return NULL;
}

/* ---- config --------------------------------------------------------------- */
static const char *const dns_uints[] = {"timeout_ms",  "ttl_min",	 "ttl_max",
					"workers",     "max_inflight",	 "max_tcp",
					"event_burst", "events_per_min", "max_tcp_per_sandbox"};

static int addr_list(json_t *v, const char *field, size_t max, struct sockaddr_storage *out,
		     size_t *n, wr_err *err)
{
	if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > max)
		return wr_err_field(err, field, "%s: must be an array of 1..%zu addresses", field,
				    max);
	size_t i;
	json_t *e;
	*n = 0;
	json_array_foreach(v, i, e)
	{
		char f[64];
		snprintf(f, sizeof(f), "%s[%zu]", field, i);
		struct sockaddr_storage tmp;
		wr_err pe = NULL;
		if (!json_is_string(e))
			return wr_err_field(err, f, "%s: must be a string", f);
		if (wr_dns_parse_addr(json_string_value(e), out ? &out[i] : &tmp, &pe) < 0) {
			int r = wr_err_field(err, f, "%s: %s", f, pe->msg);
			wr_err_free(&pe);
			return r;
		}
		(*n)++;
	}
	return 0;
}

/* Fill c from the "dns" object (NULL: only check). */
static int dns_conf(json_t *o, struct wr_dns_config *c, bool *enabled, wr_err *err)
{
	struct wr_dns_config tmp;
	if (c == NULL)
		c = &tmp;
	wr_dns_config_init(c);
	*enabled = true;
	if (!json_is_object(o))
		return wr_err_field(err, "network.dns", "network.dns: must be an object");
	const char *k;
	json_t *v;
	json_object_foreach(o, k, v)
	{
		char f[64];
		snprintf(f, sizeof(f), "network.dns.%s", k);
		int r = 0;
		if (strcmp(k, "enabled") == 0)
			r = wrd_j_bool(v, f, enabled, err);
		else if (strcmp(k, "listen") == 0)
			r = addr_list(v, f, WR_DNS_MAX_LISTEN, c->listen, &c->n_listen, err);
		else if (strcmp(k, "upstreams") == 0)
			r = addr_list(v, f, WR_DNS_MAX_UPSTREAMS, c->upstream, &c->n_upstreams,
				      err);
		else {
			size_t i = 0;
			while (i < WR_ARRAY_SIZE(dns_uints) && strcmp(k, dns_uints[i]) != 0)
				i++;
			if (i == WR_ARRAY_SIZE(dns_uints))
				return wr_err_field(err, f, "%s: unknown key", f);
			int64_t x;
			if (wrd_j_int(v, f, i == 1 ? 0 : 1, i == 0 ? 60000 : 86400 * 7, &x, err) <
			    0)
				return -EINVAL;
			unsigned *dst[] = {
			    &c->timeout_ms,  &c->ttl_min,	&c->ttl_max,
			    &c->workers,     &c->max_inflight,	&c->max_tcp,
			    &c->event_burst, &c->event_per_min, &c->max_tcp_per_sandbox};
			*dst[i] = (unsigned)x;
		}
		if (r < 0)
			return r;
	}
	if (c->ttl_min > c->ttl_max)
		return wr_err_field(err, "network.dns.ttl_min",
				    "network.dns.ttl_min: above network.dns.ttl_max");
	if (c->workers > 256)
		return wr_err_field(err, "network.dns.workers", "network.dns.workers: 1..256");
	if (c->max_inflight >= c->workers)
		return wr_err_field(err, "network.dns.max_inflight",
				    "network.dns.max_inflight: must be below network.dns.workers "
				    "(%u), so that one sandbox never holds every worker",
				    c->workers);
	return 0;
}

int wrd_dns_check_config(json_t *network, wr_err *err)
{
	if (!json_is_object(network))
		return wr_err_field(err, "network", "network: must be an object");
	json_t *d = json_object_get(network, "dns");
	json_t *s = json_object_get(network, "services_file");
	bool en;
	if (d != NULL && dns_conf(d, NULL, &en, err) < 0)
		return -EINVAL;
	const char *path;
	if (s != NULL && wrd_j_str(s, "network.services_file", 4095, false, &path, err) < 0)
		return -EINVAL;
	/* A broken services file is a configuration error: refused at load,
	 * with the field inside the file named. */
	struct wr_services *svc = NULL;
	if (s != NULL && wr_services_load(path, &svc, err) < 0)
		return wr_err_wrap(err, "network.services_file");
	wr_services_free(svc);
	return 0;
}

/* ---- hooks -------------------------------------------------------------- */
static int who(void *ctx, const struct sockaddr *src, char *id, size_t len)
{
	(void)ctx;
	size_t n;
	const void *ip = ip_of(src, &n);
	int r = -1;
	pthread_mutex_lock(&g_lock);
	for (struct who_ent *w = g_who[hbytes(ip, n)]; w; w = w->next) {
		size_t m;
		const void *wip = ip_of((struct sockaddr *)&w->addr, &m);
		if (w->addr.ss_family == src->sa_family && memcmp(ip, wip, n) == 0) {
			snprintf(id, len, "%s", w->id);
			r = 0;
			break;
		}
	}
	pthread_mutex_unlock(&g_lock);
	return r;
}

static struct wr_dns_names *names(void *ctx, const char *id)
{
	(void)ctx;
	pthread_mutex_lock(&g_lock);
	struct pol_ent *p = pol_find(id);
	struct wr_dns_names *s = p ? wr_dns_names_ref(p->names) : NULL;
	pthread_mutex_unlock(&g_lock);
	return s;
}

static bool tenant_of(const char *id, char *tenant, size_t n)
{
	pthread_mutex_lock(&g_lock);
	struct pol_ent *p = pol_find(id);
	if (p)
		snprintf(tenant, n, "%s", p->tenant);
	pthread_mutex_unlock(&g_lock);
	return p != NULL;
}

static int allow_ip(void *ctx, const char *id, int family, const void *addr, uint32_t ttl,
		    uint32_t tag)
{
	(void)ctx;
	char tenant[128];
	struct wrd_sbx *sb = NULL;
	if (g_allow == NULL || !tenant_of(id, tenant, sizeof(tenant)) ||
	    wrd_mgr_get(tenant, id, &sb) < 0)
		return -ENOENT;
	const struct wr_svc_ports *ports = NULL;
	size_t n = 0;
	if (tag > 0) { /* a service's name: its ports (the table never changes) */
		if (g_services == NULL || tag > g_services->n) {
			wrd_mgr_put(sb);
			return -EINVAL;
		}
		ports = g_services->v[tag - 1].ports;
		n = g_services->v[tag - 1].n_ports;
	}
	int r = g_allow(g_allow_ctx, sb, family, addr, ttl, ports, n);
	wrd_mgr_put(sb);
	return r;
}

static void refused(void *ctx, const struct wr_dns_refusal *ev)
{
	(void)ctx;
	char tenant[128];
	struct wrd_sbx *sb = NULL;
	if (!tenant_of(ev->sandbox_id, tenant, sizeof(tenant)) ||
	    wrd_mgr_get(tenant, ev->sandbox_id, &sb) < 0)
		return;
	json_t *d =
	    json_pack("{s:s, s:i, s:s, s:I, s:I, s:o}", "layer", ev->layer, "qtype", (int)ev->qtype,
		      "reason", ev->reason, "suppressed", (json_int_t)ev->suppressed, "total",
		      (json_int_t)ev->total, "time", wrd_j_time(ev->time_ms));
	if (d != NULL && ev->name != NULL)
		json_object_set_new(d, "name", json_string(ev->name));
	if (d != NULL)
		wrd_sbx_event(sb, "network_refused", d);
	/* and the refusal audit's dns layer (GET /v1/events) */
	wr_audit_net(WR_AUDIT_DNS, ev->sandbox_id, tenant, "resolve", NULL, 0, "udp", ev->name,
		     ev->reason, ev->name ? 1 : ev->suppressed, ev->time_ms);
	wrd_mgr_put(sb);
}

/* ---- start / stop --------------------------------------------------------- */
void wrd_dns_set_allow_hook(wrd_dns_allow_fn fn, void *ctx)
{
	g_allow = fn;
	g_allow_ctx = ctx;
}

static struct sockaddr_storage g_gateway;

void wrd_dns_set_gateway(const struct sockaddr *gw)
{
	memset(&g_gateway, 0, sizeof(g_gateway));
	if (gw->sa_family == AF_INET) {
		memcpy(&g_gateway, gw, sizeof(struct sockaddr_in));
		((struct sockaddr_in *)&g_gateway)->sin_port = htons(53);
	} else if (gw->sa_family == AF_INET6) {
		memcpy(&g_gateway, gw, sizeof(struct sockaddr_in6));
		((struct sockaddr_in6 *)&g_gateway)->sin6_port = htons(53);
	}
}

int wrd_dns_start(const struct wrd_config *cfg, wr_err *err)
{
	if (cfg->network == NULL)
		return 0;
	json_error_t je;
	json_t *net = json_loads(cfg->network, 0, &je);
	if (net == NULL)
		return wr_err_set(err, EINVAL, "network config: %s", je.text);
	int r = 0;
	json_t *sf = json_object_get(net, "services_file");
	if (sf != NULL && (r = wr_services_load(json_string_value(sf), &g_services, err)) < 0)
		goto out;
	json_t *d = json_object_get(net, "dns");
	struct wr_dns_config c;
	bool en = false;
	if (d == NULL || (r = dns_conf(d, &c, &en, err)) < 0 || !en)
		goto out;
	if (c.n_listen == 0) { /* the bridge's address (plumbing) */
		if (g_gateway.ss_family != 0)
			c.listen[0] = g_gateway;
		else
			r = wr_dns_parse_addr("10.200.0.1", &c.listen[0], err);
		c.n_listen = 1;
	}
	if (r == 0 && c.n_upstreams == 0) {
		r = wr_dns_resolv_conf("/etc/resolv.conf", c.upstream, WR_DNS_MAX_UPSTREAMS,
				       &c.n_upstreams, err);
		if (r == 0 && c.n_upstreams == 0)
			r = wr_err_field(err, "network.dns.upstreams",
					 "network.dns.upstreams: none given and /etc/resolv.conf "
					 "names no nameserver");
	}
	/* Never forward to ourselves (a host whose resolv.conf names the
	 * bridge address would loop). */
	for (size_t i = 0; r == 0 && i < c.n_upstreams; i++)
		for (size_t k = 0; k < c.n_listen; k++)
			if (memcmp(&c.upstream[i], &c.listen[k], sizeof(c.upstream[i])) == 0)
				r = wr_err_field(err, "network.dns.upstreams",
						 "network.dns.upstreams[%zu]: is a listen address",
						 i);
	if (r < 0)
		goto out;
	struct wr_dns_hooks h = {
	    .who = who, .names = names, .allow_ip = allow_ip, .refused = refused};
	r = wr_dns_start(&c, &h, &g_dns, err);
	if (r == 0)
		wr_info("dns: forwarding for sandboxes to %zu upstream(s)%s", c.n_upstreams,
			g_allow ? "" : " (no address filter hooked: allowed names get SERVFAIL)");
out:
	json_decref(net);
	return r;
}

void wrd_dns_stop(void)
{
	wr_dns_stop(g_dns);
	g_dns = NULL;
	pthread_mutex_lock(&g_lock);
	for (size_t b = 0; b < NB; b++) {
		while (g_who[b]) {
			struct who_ent *w = g_who[b];
			g_who[b] = w->next;
			free(w);
		}
		while (g_pol[b]) {
			struct pol_ent *p = g_pol[b];
			g_pol[b] = p->next;
			wr_dns_names_unref(p->names);
			free(p);
		}
	}
	pthread_mutex_unlock(&g_lock);
	wr_services_free(g_services);
	g_services = NULL;
}

/* ---- tables --------------------------------------------------------------- */
/* Under g_lock: the sandbox's entry, made from *spare when missing. */
static struct pol_ent *pol_get(const char *tenant, const char *id, struct pol_ent **spare)
{
	struct pol_ent *p = pol_find(id);
	if (p != NULL)
		return p;
	p = *spare;
	*spare = NULL;
	snprintf(p->id, sizeof(p->id), "%s", id);
	snprintf(p->tenant, sizeof(p->tenant), "%s", tenant);
	p->next = g_pol[hid(id)];
	g_pol[hid(id)] = p;
	return p;
}

int wrd_dns_register(const char *tenant, const char *id, const struct sockaddr *addr, wr_err *err)
{
	if (addr->sa_family != AF_INET && addr->sa_family != AF_INET6)
		return wr_err_set(err, EAFNOSUPPORT, "dns register: not an IP address");
	struct who_ent *w = calloc(1, sizeof(*w));
	struct pol_ent *spare = calloc(1, sizeof(*spare));
	if (w == NULL || spare == NULL) {
		free(w);
		free(spare);
		return wr_err_set(err, ENOMEM, "out of memory");
	}
	memcpy(&w->addr, addr,
	       addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
					  : sizeof(struct sockaddr_in6));
	snprintf(w->id, sizeof(w->id), "%s", id);
	size_t n;
	const void *ip = ip_of(addr, &n);
	pthread_mutex_lock(&g_lock);
	pol_get(tenant, id, &spare)->n_addrs++;
	w->next = g_who[hbytes(ip, n)];
	g_who[hbytes(ip, n)] = w;
	pthread_mutex_unlock(&g_lock);
	free(spare);
	return 0;
}

void wrd_dns_unregister(const char *id)
{
	/* First: its suppressed refusals become an event while the tenant is
	 * still known (refused() looks it up in the policy table). */
	if (g_dns != NULL)
		wr_dns_forget(g_dns, id);
	pthread_mutex_lock(&g_lock);
	for (size_t b = 0; b < NB; b++)
		for (struct who_ent **pp = &g_who[b]; *pp;) {
			if (strcmp((*pp)->id, id) == 0) {
				struct who_ent *w = *pp;
				*pp = w->next;
				free(w);
			} else
				pp = &(*pp)->next;
		}
	struct wr_dns_names *old = NULL;
	for (struct pol_ent **pp = &g_pol[hid(id)]; *pp; pp = &(*pp)->next)
		if (strcmp((*pp)->id, id) == 0) {
			struct pol_ent *p = *pp;
			*pp = p->next;
			old = p->names;
			free(p);
			break;
		}
	pthread_mutex_unlock(&g_lock);
	wr_dns_names_unref(old);
}

int wrd_dns_set_names(const char *tenant, const char *id, struct wr_dns_names *names, wr_err *err)
{
	struct pol_ent *spare = calloc(1, sizeof(*spare));
	if (spare == NULL) {
		wr_dns_names_unref(names);
		return wr_err_set(err, ENOMEM, "out of memory");
	}
	pthread_mutex_lock(&g_lock);
	struct pol_ent *p = pol_get(tenant, id, &spare);
	struct wr_dns_names *old = p->names;
	p->names = names;
	pthread_mutex_unlock(&g_lock);
	wr_dns_names_unref(old);
	free(spare);
	return 0;
}

int wrd_dns_policy_names(const char *const *domains, size_t nd, const char *const *services,
			 size_t ns, bool open, struct wr_dns_names **out, wr_err *err)
{
	struct wr_svc_expansion x = {0};
	if (ns > 0 && wrd_dns_expand_services(services, ns, &x, err) < 0)
		return -EINVAL;
	size_t n = nd + x.n_domains + (open ? 1 : 0);
	struct wr_dns_pattern *p = calloc(n ? n : 1, sizeof(*p));
	if (p == NULL) {
		wr_services_expansion_free(&x);
		return wr_err_set(err, ENOMEM, "out of memory");
	}
	size_t k = 0;
	for (size_t i = 0; i < nd; i++) {
		char norm[256], f[32];
		if (wr_dns_pattern_check(domains[i], norm, err) < 0) {
			snprintf(f, sizeof(f), "domains[%zu]", i);
			char *why = strdup((*err)->msg);
			wr_err_free(err);
			wr_err_field(err, f, "%s: %s", f, why ? why : "invalid");
			free(why);
			free(p);
			wr_services_expansion_free(&x);
			return -EINVAL;
		}
		p[k++] = (struct wr_dns_pattern){.name = domains[i], .tag = 0};
	}
	for (size_t i = 0; i < x.n_domains; i++) {
		const struct wr_service *svc =
		    wr_services_find(g_services, services[x.service_of[i]]);
		p[k++] = (struct wr_dns_pattern){.name = x.domains[i],
						 .tag = 1 + (uint32_t)(svc - g_services->v)};
	}
	if (open)
		p[k++] = (struct wr_dns_pattern){.name = "*", .tag = 0};
	int r = wr_dns_names_new(p, k, out, err);
	free(p);
	wr_services_expansion_free(&x);
	return r;
}

const struct wr_services *wrd_dns_services(void)
{
	return g_services;
}

int wrd_dns_expand_services(const char *const *names, size_t n, struct wr_svc_expansion *out,
			    wr_err *err)
{
	if (g_services == NULL && n > 0)
		return wr_err_field(err, "services[0]",
				    "services: no services file configured "
				    "(network.services_file)");
	return wr_services_expand(g_services, names, n, out, err);
}

void wrd_dns_stats(const char *sandbox_id, struct wr_dns_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (g_dns != NULL)
		wr_dns_sandbox_stats(g_dns, sandbox_id, out);
}
