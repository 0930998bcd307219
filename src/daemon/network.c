/* warrend's network plumbing: configuration, start and shutdown, and the
 * manager's hooks (network.h). Published ports: network_ports.c. */
#include "daemon/network.h"

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "daemon/api.h"
#include "daemon/db.h"
#include "daemon/dns.h"
#include "daemon/jsonutil.h"
#include "daemon/manager.h"
#include "daemon/netpolicy.h"
#include "daemon/network_internal.h"
#include "isolate/rtnl.h"

struct wrd_netstate wrd_netst;

/* ---- configuration ---------------------------------------------------------- */

/* "dns" and "services_file" are the DNS forwarder's (dns.c checks them). */
static const char *const cfg_keys[] = {
    "enable",	      "bridge",		  "range",	 "table", "uplink",	   "pool_size",
    "pool_low_water", "teardown_per_sec", "veth_prefix", "dns",	  "services_file", NULL};

static int parse_config(json_t *v, struct wrd_netcfg *c, wr_err *err)
{
	memset(c, 0, sizeof(*c));
	c->bridge = "warren0";
	c->range = "10.200.0.0/16";
	c->table = "warren";
	c->uplink = "auto";
	c->veth_prefix = "wrv";
	c->pool_size = 32;
	c->teardown_per_sec = 200;
	if (v == NULL)
		return 0;
	if (!json_is_object(v))
		return wr_err_field(err, "network", "network: must be an object");
	const char *k;
	json_t *x;
	json_object_foreach(v, k, x)
	{
		size_t i = 0;
		while (cfg_keys[i] && strcmp(cfg_keys[i], k) != 0)
			i++;
		if (cfg_keys[i] == NULL)
			return wr_err_field(err, "network", "network.%s: unknown key", k);
	}
	int64_t n;
	if ((x = json_object_get(v, "enable")) && wrd_j_bool(x, "network.enable", &c->enable, err))
		return -1;
	static const struct {
		const char *key, *field;
		size_t off, max;
		bool empty;
	} strs[] = {
	    {"bridge", "network.bridge", offsetof(struct wrd_netcfg, bridge), IF_NAMESIZE - 1, 0},
	    {"range", "network.range", offsetof(struct wrd_netcfg, range), 18, 0},
	    {"table", "network.table", offsetof(struct wrd_netcfg, table), 64, 0},
	    {"uplink", "network.uplink", offsetof(struct wrd_netcfg, uplink), IF_NAMESIZE - 1, 1},
	    {"veth_prefix", "network.veth_prefix", offsetof(struct wrd_netcfg, veth_prefix), 6, 0},
	};
	for (size_t i = 0; i < WR_ARRAY_SIZE(strs); i++)
		if ((x = json_object_get(v, strs[i].key)) &&
		    wrd_j_str(x, strs[i].field, strs[i].max, strs[i].empty,
			      (const char **)(void *)((char *)c + strs[i].off), err) < 0)
			return -1;
	if ((x = json_object_get(v, "pool_size"))) {
		if (wrd_j_int(x, "network.pool_size", 0, 4096, &n, err) < 0)
			return -1;
		c->pool_size = (unsigned)n;
	}
	c->low_water = (c->pool_size + 1) / 2;
	if ((x = json_object_get(v, "pool_low_water"))) {
		if (wrd_j_int(x, "network.pool_low_water", 0, c->pool_size, &n, err) < 0)
			return -1;
		c->low_water = (unsigned)n;
	}
	if ((x = json_object_get(v, "teardown_per_sec"))) {
		if (wrd_j_int(x, "network.teardown_per_sec", 1, 100000, &n, err) < 0)
			return -1;
		c->teardown_per_sec = (unsigned)n;
	}
	struct in_addr net;
	int plen;
	_cleanup_err_ wr_err rerr = NULL;
	if (wr_netpool_parse_range(c->range, &net, &plen, &rerr) < 0)
		return wr_err_field(err, "network.range", "network.%s", rerr->msg);
	return 0;
}

int wrd_net_check_config(json_t *v, wr_err *err)
{
	struct wrd_netcfg c;
	return parse_config(v, &c, err);
}

bool wrd_net_enabled(void)
{
	return wrd_netst.pool != NULL;
}

/* ---- start and stop ------------------------------------------------------------ */

/* The forwarder answers a source address only once it knows its sandbox. */
static void dns_register(struct wrd_sbx *sb)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr = sb->net->addr};
	_cleanup_err_ wr_err err = NULL;
	if (wrd_dns_register(sb->rec.tenant, sb->rec.id, (struct sockaddr *)&a, &err) < 0)
		wr_warn("sandbox %s: dns: %s", sb->rec.id, err->msg);
}

static int adopted_list(struct wr_netns_lease **out, struct wrd_sbx ***snap, size_t *nsnap)
{
	size_t n;
	struct wrd_sbx **v = wrd_table_snapshot(&n);
	struct wr_netns_lease *l = calloc(n ? n : 1, sizeof(*l));
	size_t k = 0;
	for (size_t i = 0; l && i < n; i++) {
		json_t *net = json_object_get(v[i]->rec.spec, "network");
		const char *a = json_string_value(json_object_get(net, "address"));
		const char *veth = json_string_value(json_object_get(net, "host_veth"));
		if (a && veth && inet_pton(AF_INET, a, &l[k].addr) == 1) {
			snprintf(l[k].veth, sizeof(l[k].veth), "%s", veth);
			k++;
		}
	}
	*out = l;
	*snap = v;
	*nsnap = n;
	return (int)k;
}

int wrd_net_start(const struct wrd_config *cfg, wr_err *err)
{
	struct wrd_netstate *s = &wrd_netst;
	json_t *v = NULL;
	if (cfg->network) {
		json_error_t je;
		v = json_loads(cfg->network, 0, &je);
	}
	int r = parse_config(v, &s->cfg, err);
	if (r == 0 && s->cfg.enable) {
		/* the config's strings live in v, kept for the daemon's life */
		s->cfg_json = v;
		v = NULL;
	}
	json_decref(v);
	if (r < 0 || !s->cfg.enable)
		return r;
	if (asprintf(&s->ports_dir, "%s/ports", cfg->run_dir) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	struct wr_netns_lease *adopted = NULL;
	struct wrd_sbx **snap = NULL;
	size_t nsnap = 0;
	int nad = adopted_list(&adopted, &snap, &nsnap);
	struct wr_netpool_config pc = {.bridge = s->cfg.bridge,
				       .range = s->cfg.range,
				       .veth_prefix = s->cfg.veth_prefix,
				       .size = s->cfg.pool_size,
				       .low_water = s->cfg.low_water,
				       .teardown_per_sec = s->cfg.teardown_per_sec};
	r = wr_netpool_start(&pc, adopted, nad < 0 ? 0 : (size_t)nad, &s->pool, err);
	/* adopted sandboxes get their leases back (released when they die) */
	for (size_t i = 0; r == 0 && i < nsnap; i++) {
		json_t *net = json_object_get(snap[i]->rec.spec, "network");
		const char *a = json_string_value(json_object_get(net, "address"));
		struct in_addr addr;
		if (a && inet_pton(AF_INET, a, &addr) == 1) {
			struct wrd_net *n = calloc(1, sizeof(*n));
			if (n) {
				pthread_mutex_init(&n->lock, NULL);
				n->lease = wr_netpool_adopted(s->pool, addr);
				n->addr = addr;
				/* no process held its namespace but the dead daemon */
				n->stale = wrd_sbx_suspended(snap[i]);
				snap[i]->net = n;
			}
		}
	}
	for (size_t i = 0; i < nsnap; i++) {
		if (r == 0 && snap[i]->net)
			dns_register(snap[i]);
		wrd_mgr_put(snap[i]);
	}
	free(snap);
	free(adopted);
	if (r < 0)
		return -1;
	/* The filter's second layer under the table's forward rules: the
	 * sandboxes' own range (each other, the bridge address but its DNS on
	 * port 53, whatever is published there) in every mode, and all of
	 * IPv6, which this plumbing never gives a sandbox (the forward chain
	 * drops it too): refused at connect/sendmsg with an event. In place
	 * before the first networked create is served; adopted sandboxes'
	 * filters read the same deny map, so they get it at once too. */
	const char *const deny[] = {s->cfg.range, "::/0"};
	for (size_t i = 0; i < WR_ARRAY_SIZE(deny); i++)
		if (wrd_nf_deny_add(deny[i], err) < 0) {
			wr_netpool_stop(&s->pool, false);
			return wr_err_wrap(err, "network: deny set");
		}
	/* The DNS forwarder (started after us) listens on the bridge address. */
	struct sockaddr_in gws = {.sin_family = AF_INET, .sin_addr = wr_netpool_gateway(s->pool)};
	wrd_dns_set_gateway((struct sockaddr *)&gws);

	/* The uplink: named, or the default route's interface now. */
	char up[IF_NAMESIZE] = "";
	if (strcmp(s->cfg.uplink, "auto") == 0) {
		struct wr_rtnl nl;
		_cleanup_err_ wr_err rerr = NULL;
		if (wr_rtnl_open(&nl, &rerr) == 0) {
			int idx = wr_rtnl_default_oif(&nl, &rerr);
			if (idx > 0)
				if_indextoname((unsigned)idx, up);
			wr_rtnl_close(&nl);
		}
	} else {
		snprintf(up, sizeof(up), "%s", s->cfg.uplink);
	}
	snprintf(s->uplink, sizeof(s->uplink), "%s", up);
	struct wr_netfw_config fc = {.table = s->cfg.table,
				     .bridge = s->cfg.bridge,
				     .net = wr_netpool_network(s->pool),
				     .plen = wr_netpool_prefix(s->pool),
				     .gw = wr_netpool_gateway(s->pool),
				     .uplink = up};
	if (wr_netfw_setup(&fc, err) < 0 ||
	    wr_netfw_forwarding_enable(s->cfg.bridge, up[0] ? up : NULL, err) < 0) {
		wr_netpool_stop(&s->pool, false);
		return wr_err_wrap(err, "network");
	}
	char gw[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &fc.gw, gw, sizeof(gw));
	wr_info("network: bridge %s %s/%d, uplink %s, %u namespaces kept ready", s->cfg.bridge, gw,
		fc.plen, up[0] ? up : "(any)", s->cfg.pool_size);
	return 0;
}

void wrd_net_stop(void)
{
	struct wrd_netstate *s = &wrd_netst;
	if (s->pool == NULL)
		return;
	wrd_ports_stop_all();
	struct wr_netpool_stats st;
	wr_netpool_stats(s->pool, &st);
	bool keep = st.leased > 0;
	wr_netpool_stop(&s->pool, !keep);
	if (!keep) {
		_cleanup_err_ wr_err err = NULL;
		if (wr_netfw_remove(s->cfg.table, &err) < 0)
			wr_warn("network: %s", err->msg);
		wr_netfw_forwarding_restore();
	} else {
		wr_info("network: %u networked sandboxes still run: bridge %s and table %s kept",
			st.leased, s->cfg.bridge, s->cfg.table);
	}
	json_decref(s->cfg_json);
	s->cfg_json = NULL;
	free(s->ports_dir);
	s->ports_dir = NULL;
}

/* ---- the create request (until the policy branch's parser) -------------------- */

int wrd_net_request(struct wrd_req *r, json_t *body, json_t *spec)
{
	json_t *v = json_object_get(body, "network");
	const char *mode = "none";
	if (v && !json_is_null(v)) {
		static const char *const keys[] = {"mode", NULL};
		if (!json_is_object(v)) {
			wrd_reply_error(r, "invalid_argument", "network",
					"network: must be an object like {\"mode\": \"open\"}");
			return -1;
		}
		if (wrd_api_known_keys(r, v, keys) < 0)
			return -1;
		json_t *m = json_object_get(v, "mode");
		_cleanup_err_ wr_err err = NULL;
		if (m && wrd_j_str(m, "network.mode", 16, false, &mode, &err) < 0) {
			wrd_reply_err(r, err);
			return -1;
		}
		if (strcmp(mode, "none") != 0 && strcmp(mode, "allowlist") != 0 &&
		    strcmp(mode, "open") != 0) {
			wrd_reply_error(r, "invalid_argument", "network.mode",
					"network.mode: one of \"none\", \"allowlist\", \"open\"");
			return -1;
		}
	}
	if (strcmp(mode, "none") != 0 && !wrd_net_enabled()) {
		wrd_reply_error(r, "invalid_argument", "network.mode",
				"network.mode: this node has networking disabled (config "
				"network.enable); only \"none\" is available");
		return -1;
	}
	json_t *n = json_object();
	json_object_set_new(n, "mode", json_string(mode));
	json_object_set_new(spec, "network", n);
	return 0;
}

/* ---- manager hooks ------------------------------------------------------------- */

static const char *mode_of(const struct wrd_sbx *sb)
{
	const char *m =
	    json_string_value(json_object_get(json_object_get(sb->rec.spec, "network"), "mode"));
	return m ? m : "none";
}

int wrd_net_prepare(struct wrd_sbx *sb, struct wr_sandbox_spec *spec, wr_err *err)
{
	struct wrd_netstate *s = &wrd_netst;
	if (strcmp(mode_of(sb), "none") == 0)
		return 0; /* offline: the tier's private namespace, as ever */
	if (s->pool == NULL)
		return wr_err_field(err, "network.mode", "network.mode: networking is disabled");
	struct wrd_net *n = calloc(1, sizeof(*n));
	if (n == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	pthread_mutex_init(&n->lock, NULL);
	if (wr_netpool_take(s->pool, &n->lease, err) < 0) {
		pthread_mutex_destroy(&n->lock);
		free(n);
		return wr_err_wrap(err, "network");
	}
	n->addr = n->lease->addr;
	char a[INET_ADDRSTRLEN], gw[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &n->addr, a, sizeof(a));
	struct in_addr g = wr_netpool_gateway(s->pool);
	inet_ntop(AF_INET, &g, gw, sizeof(gw));
	const char *host = spec->hostname ? spec->hostname : sb->rec.id;
	snprintf(n->resolv, sizeof(n->resolv), "nameserver %s\n", gw);
	snprintf(n->hosts, sizeof(n->hosts),
		 "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n%s\t%s\n", a,
		 host);
	n->tnet = (struct wr_sandbox_net){.netns_fd = n->lease->netns_fd,
					  .sysfs_fd = n->lease->sysfs_fd,
					  .resolv_conf = n->resolv,
					  .hosts = n->hosts};
	spec->net = &n->tnet;
	sb->net = n;
	/* Write ordering: the address is in the record before it is written
	 * (after the tier's create): a restart adopts it with the sandbox. */
	json_t *net = json_object_get(sb->rec.spec, "network");
	json_object_set_new(net, "address", json_string(a));
	json_object_set_new(net, "gateway", json_string(gw));
	json_object_set_new(net, "host_veth", json_string(n->lease->veth));
	return 0;
}

void wrd_net_created(struct wrd_sbx *sb)
{
	struct wrd_net *n = sb->net;
	if (n == NULL || n->lease == NULL)
		return;
	/* The sandbox's processes hold its namespace now; teardown needs only
	 * the veth's name. */
	if (n->lease->netns_fd >= 0)
		close(n->lease->netns_fd);
	if (n->lease->sysfs_fd >= 0)
		close(n->lease->sysfs_fd);
	n->lease->netns_fd = n->lease->sysfs_fd = -1;
	dns_register(sb);
}

struct addr_upd {
	const char *id, *addr, *veth;
};

static void bind_addr(sqlite3_stmt *st, const void *ctx)
{
	const struct addr_upd *u = ctx;
	sqlite3_bind_text(st, 1, u->id, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, u->addr, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, u->veth, -1, SQLITE_STATIC);
}

int wrd_net_resume(struct wrd_sbx *sb, wr_err *err)
{
	struct wrd_net *n = sb->net;
	if (n == NULL || !n->stale || sb->ops->set_net == NULL)
		return 0;
	struct wrd_netstate *s = &wrd_netst;
	if (s->pool == NULL)
		return wr_err_field(err, "network.mode", "network.mode: networking is disabled");
	struct wr_netns_lease *fresh = NULL;
	if (wr_netpool_take(s->pool, &fresh, err) < 0)
		return wr_err_wrap(err, "network");
	char a[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &fresh->addr, a, sizeof(a));
	struct in_addr g = wr_netpool_gateway(s->pool);
	char gw[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &g, gw, sizeof(gw));
	snprintf(n->resolv, sizeof(n->resolv), "nameserver %s\n", gw);
	snprintf(n->hosts, sizeof(n->hosts),
		 "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n%s\t%s\n", a,
		 sb->rec.id);
	struct wr_sandbox_net tnet = {.netns_fd = fresh->netns_fd,
				      .sysfs_fd = fresh->sysfs_fd,
				      .resolv_conf = n->resolv,
				      .hosts = n->hosts};
	/* Write ordering: the tier holds the namespace, then the record names
	 * the new address and veth (a crash before the commit leaves the old
	 * ones recorded: the next start reserves those, and the new veth,
	 * no record's, is swept), then the old lease goes. */
	struct addr_upd u = {sb->rec.id, a, fresh->veth};
	int r = sb->ops->set_net(sb->tsb, &tnet, err);
	if (r == 0 &&
	    (r = wrd_db_write("UPDATE sandboxes SET spec = json_set(spec, '$.network.address', ?2, "
			      "'$.network.host_veth', ?3) WHERE id = ?1",
			      "record the sandbox's new address", bind_addr, &u, err)) < 0) {
		_cleanup_err_ wr_err e2 = NULL;
		sb->ops->set_net(sb->tsb, NULL, &e2);
	}
	if (r < 0) {
		wr_netpool_release(s->pool, fresh);
		return wr_err_wrap(err, "network");
	}
	json_t *net = json_object_get(sb->rec.spec, "network");
	json_object_set_new(net, "address", json_string(a));
	json_object_set_new(net, "host_veth", json_string(fresh->veth));
	if (fresh->netns_fd >= 0)
		close(fresh->netns_fd);
	if (fresh->sysfs_fd >= 0)
		close(fresh->sysfs_fd);
	fresh->netns_fd = fresh->sysfs_fd = -1;
	pthread_mutex_lock(&n->lock);
	struct wr_netns_lease *old = n->lease;
	n->lease = fresh;
	n->addr = fresh->addr;
	n->stale = false;
	pthread_mutex_unlock(&n->lock);
	wrd_dns_unregister(sb->rec.id); /* the old address; names come back at attach */
	dns_register(sb);
	if (old)
		wr_netpool_release(s->pool, old);
	return 0;
}

void wrd_net_release(struct wrd_sbx *sb)
{
	struct wrd_net *n = sb->net;
	if (n == NULL)
		return;
	/* Ports first: no relay or DNAT outlives the address's owner. The
	 * struct stays (API handlers may hold the sandbox) until
	 * wrd_net_free. */
	wrd_ports_remove_all(n);
	pthread_mutex_lock(&n->lock);
	struct wr_netns_lease *l = n->lease;
	n->lease = NULL;
	pthread_mutex_unlock(&n->lock);
	wrd_dns_unregister(sb->rec.id); /* idempotent (dns.h) */
	if (l && wrd_netst.pool)
		wr_netpool_release(wrd_netst.pool, l);
}

void wrd_net_free(struct wrd_sbx *sb)
{
	struct wrd_net *n = sb->net;
	if (n == NULL)
		return;
	wrd_net_release(sb); /* a create that failed after prepare */
	sb->net = NULL;
	pthread_mutex_destroy(&n->lock);
	free(n);
}
