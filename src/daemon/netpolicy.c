/* A sandbox's network policy: data model, JSON, merge, and the daemon's
 * glue to the eBPF filter. See netpolicy.h. */
#include "daemon/netpolicy.h"

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
#include "daemon/config.h"
#include "daemon/db.h"
#include "daemon/jsonutil.h"
#include "daemon/manager.h"

/* ---- the policy ------------------------------------------------------------ */

static void strv_free(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

void wrd_netpolicy_clear(struct wrd_netpolicy *p)
{
	free(p->allow);
	strv_free(p->domains, p->n_domains);
	strv_free(p->services, p->n_services);
	memset(p, 0, sizeof(*p));
}

static char **strv_dup(char *const *v, size_t n)
{
	char **o = calloc(n ? n : 1, sizeof(char *));
	for (size_t i = 0; o && i < n; i++)
		if (!(o[i] = strdup(v[i]))) {
			strv_free(o, i);
			return NULL;
		}
	return o;
}

int wrd_netpolicy_copy(const struct wrd_netpolicy *src, struct wrd_netpolicy *dst)
{
	memset(dst, 0, sizeof(*dst));
	dst->mode = src->mode;
	dst->allow = calloc(src->n_allow ? src->n_allow : 1, sizeof(*dst->allow));
	dst->domains = strv_dup(src->domains, src->n_domains);
	dst->services = strv_dup(src->services, src->n_services);
	if (!dst->allow || !dst->domains || !dst->services) {
		wrd_netpolicy_clear(dst);
		return -ENOMEM;
	}
	if (src->n_allow)
		memcpy(dst->allow, src->allow, src->n_allow * sizeof(*dst->allow));
	dst->n_allow = src->n_allow;
	dst->n_domains = src->n_domains;
	dst->n_services = src->n_services;
	return 0;
}

static int known_keys(json_t *o, const char *const *keys, const char *prefix, wr_err *err)
{
	const char *k;
	json_t *v;
	json_object_foreach(o, k, v)
	{
		size_t i = 0;
		while (keys[i] && strcmp(keys[i], k) != 0)
			i++;
		if (!keys[i]) {
			char f[128];
			snprintf(f, sizeof(f), "%s.%s", prefix, k);
			return wr_err_field(err, f, "%s: unknown field", f);
		}
	}
	return 0;
}

static int parse_rule(json_t *o, const char *field, struct wr_net_rule *r, wr_err *err)
{
	static const char *const keys[] = {"cidr", "ports", "protocol", NULL};
	char f[128];
	if (!json_is_object(o))
		return wr_err_field(
		    err, field, "%s: must be an object {\"cidr\", \"ports\", \"protocol\"}", field);
	if (known_keys(o, keys, field, err) < 0)
		return -EINVAL;
	memset(r, 0, sizeof(*r));
	snprintf(f, sizeof(f), "%s.cidr", field);
	json_t *c = json_object_get(o, "cidr");
	if (!c)
		return wr_err_field(err, f, "%s: is required", f);
	if (!json_is_string(c) || wr_net_rule_parse_cidr(json_string_value(c), r, f, err) < 0)
		return err && *err ? -EINVAL : wr_err_field(err, f, "%s: must be a string", f);
	snprintf(f, sizeof(f), "%s.ports", field);
	json_t *p = json_object_get(o, "ports");
	char pb[16];
	const char *ps = "";
	if (json_is_integer(p)) {
		snprintf(pb, sizeof(pb), "%lld", (long long)json_integer_value(p));
		ps = pb;
	} else if (json_is_string(p)) {
		ps = json_string_value(p);
	} else if (p && !json_is_null(p)) {
		return wr_err_field(err, f, "%s: a port (80) or a range (\"8000-8100\")", f);
	}
	if (wr_net_rule_parse_ports(ps, r, f, err) < 0)
		return -EINVAL;
	snprintf(f, sizeof(f), "%s.protocol", field);
	json_t *pr = json_object_get(o, "protocol");
	if (pr && !json_is_string(pr))
		return wr_err_field(err, f, "%s: must be tcp, udp, icmp or any", f);
	return wr_net_rule_parse_proto(pr ? json_string_value(pr) : "any", r, f, err);
}

static int parse_rules(json_t *a, const char *field, struct wr_net_rule **out, size_t *n,
		       wr_err *err)
{
	if (!json_is_array(a))
		return wr_err_field(err, field, "%s: must be an array of rules", field);
	if (json_array_size(a) > WR_NET_MAX_RULES)
		return wr_err_field(err, field, "%s: at most %d rules", field, WR_NET_MAX_RULES);
	*n = json_array_size(a);
	*out = calloc(*n ? *n : 1, sizeof(**out));
	if (!*out)
		return wr_err_set(err, ENOMEM, "out of memory");
	for (size_t i = 0; i < *n; i++) {
		char f[96];
		snprintf(f, sizeof(f), "%s[%zu]", field, i);
		if (parse_rule(json_array_get(a, i), f, &(*out)[i], err) < 0)
			return -EINVAL;
	}
	return 0;
}

/* "pypi.org", "*.pythonhosted.org": lower-cased in place. */
static bool domain_ok(char *d)
{
	size_t n = strlen(d);
	if (n == 0 || n > 253)
		return false;
	char *p = d;
	if (p[0] == '*') {
		if (p[1] != '.')
			return false;
		p += 2;
	}
	if (d[n - 1] == '.')
		d[--n] = '\0'; /* the root's dot */
	size_t label = 0;
	int labels = 0;
	for (; *p; p++) {
		char c = *p;
		if (c >= 'A' && c <= 'Z')
			*p = c = (char)(c - 'A' + 'a');
		if (c == '.') {
			if (label == 0 || p[-1] == '-')
				return false;
			label = 0;
			labels++;
			continue;
		}
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
			return false;
		if ((label == 0 && c == '-') || ++label > 63)
			return false;
	}
	return label > 0 && labels >= 1;
}

static bool service_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 63)
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-' ||
		      *s == '_'))
			return false;
	return true;
}

static int parse_names(json_t *a, const char *field, bool domains, char ***out, size_t *n,
		       wr_err *err)
{
	if (!json_is_array(a))
		return wr_err_field(err, field, "%s: must be an array of strings", field);
	if (json_array_size(a) > WRD_NET_MAX_NAMES)
		return wr_err_field(err, field, "%s: at most %d names", field, WRD_NET_MAX_NAMES);
	*n = 0;
	*out = calloc(json_array_size(a) + 1, sizeof(char *));
	if (!*out)
		return wr_err_set(err, ENOMEM, "out of memory");
	for (size_t i = 0; i < json_array_size(a); i++) {
		char f[96];
		snprintf(f, sizeof(f), "%s[%zu]", field, i);
		json_t *v = json_array_get(a, i);
		if (!json_is_string(v) || json_string_length(v) > 253)
			return wr_err_field(err, f, "%s: must be a string", f);
		char *s = strdup(json_string_value(v));
		if (!s)
			return wr_err_set(err, ENOMEM, "out of memory");
		(*out)[(*n)++] = s;
		if (domains ? !domain_ok(s) : !service_ok(s))
			return wr_err_field(err, f,
					    domains ? "%s: \"%s\" is not a domain name (or "
						      "\"*.\" and one)"
						    : "%s: \"%s\" is not a service name "
						      "([a-z0-9_-], 1 to 63)",
					    f, json_string_value(v));
	}
	return 0;
}

static int parse_mode(json_t *v, const char *field, enum wr_net_mode *m, wr_err *err)
{
	if (!json_is_string(v) || wr_net_mode_parse(json_string_value(v), m) < 0)
		return wr_err_field(err, field, "%s: must be \"none\", \"allowlist\" or \"open\"",
				    field);
	return 0;
}

static void dedupe_rules(struct wrd_netpolicy *p)
{
	size_t k = 0;
	for (size_t i = 0; i < p->n_allow; i++) {
		bool dup = false;
		for (size_t j = 0; j < k && !dup; j++)
			dup = wr_net_rule_equal(&p->allow[j], &p->allow[i]);
		if (!dup)
			p->allow[k++] = p->allow[i];
	}
	p->n_allow = k;
}

static void dedupe_names(char **v, size_t *n)
{
	size_t k = 0;
	for (size_t i = 0; i < *n; i++) {
		bool dup = false;
		for (size_t j = 0; j < k && !dup; j++)
			dup = strcmp(v[j], v[i]) == 0;
		if (dup)
			free(v[i]);
		else
			v[k++] = v[i];
	}
	*n = k;
}

static int finish(struct wrd_netpolicy *p, const char *prefix, wr_err *err)
{
	dedupe_rules(p);
	dedupe_names(p->domains, &p->n_domains);
	dedupe_names(p->services, &p->n_services);
	struct wr_net_policy np = {.mode = p->mode, .allow = p->allow, .n_allow = p->n_allow};
	if (wr_net_policy_validate(&np, err) < 0) {
		char f[64];
		snprintf(f, sizeof(f), "%s.%s", prefix, (*err)->field ? (*err)->field : "allow");
		free((*err)->field);
		(*err)->field = strdup(f);
		return wr_err_wrap(err, "%s", prefix);
	}
	return 0;
}

int wrd_netpolicy_parse(json_t *v, struct wrd_netpolicy *out, wr_err *err)
{
	static const char *const keys[] = {"mode", "allow", "domains", "services", NULL};
	memset(out, 0, sizeof(*out));
	out->allow = calloc(1, sizeof(*out->allow));
	out->domains = calloc(1, sizeof(char *));
	out->services = calloc(1, sizeof(char *));
	if (!out->allow || !out->domains || !out->services)
		return wr_err_set(err, ENOMEM, "out of memory");
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_object(v))
		return wr_err_field(err, "network", "network: must be an object");
	if (known_keys(v, keys, "network", err) < 0)
		return -EINVAL;
	json_t *x;
	if ((x = json_object_get(v, "mode")) && parse_mode(x, "network.mode", &out->mode, err) < 0)
		return -EINVAL;
	if ((x = json_object_get(v, "allow"))) {
		free(out->allow);
		if (parse_rules(x, "network.allow", &out->allow, &out->n_allow, err) < 0)
			return -EINVAL;
	}
	if ((x = json_object_get(v, "domains"))) {
		free(out->domains);
		if (parse_names(x, "network.domains", true, &out->domains, &out->n_domains, err) <
		    0)
			return -EINVAL;
	}
	if ((x = json_object_get(v, "services"))) {
		free(out->services);
		if (parse_names(x, "network.services", false, &out->services, &out->n_services,
				err) < 0)
			return -EINVAL;
	}
	if (!json_object_get(v, "mode") && (out->n_allow || out->n_domains || out->n_services))
		out->mode = WR_NET_ALLOWLIST; /* rules without a mode mean an allowlist */
	return finish(out, "network", err);
}

/* Remove the names of `rm` from v; one that is not there is an error. */
static int names_remove(char **v, size_t *n, json_t *rm, const char *field, bool domains,
			wr_err *err)
{
	char **names = NULL;
	size_t nn = 0;
	int r = parse_names(rm, field, domains, &names, &nn, err);
	for (size_t i = 0; r == 0 && i < nn; i++) {
		size_t j = 0;
		while (j < *n && strcmp(v[j], names[i]) != 0)
			j++;
		if (j == *n) {
			char f[96];
			snprintf(f, sizeof(f), "%s[%zu]", field, i);
			r = wr_err_field(err, f, "%s: \"%s\" is not in the policy", f, names[i]);
			break;
		}
		free(v[j]);
		memmove(&v[j], &v[j + 1], (*n - j - 1) * sizeof(char *));
		(*n)--;
	}
	strv_free(names, nn);
	return r;
}

static int names_add(char ***v, size_t *n, json_t *add, const char *field, bool domains,
		     wr_err *err)
{
	char **names = NULL;
	size_t nn = 0;
	if (parse_names(add, field, domains, &names, &nn, err) < 0) {
		strv_free(names, nn);
		return -EINVAL;
	}
	if (*n + nn > WRD_NET_MAX_NAMES) {
		strv_free(names, nn);
		return wr_err_field(err, field, "%s: at most %d names in all", field,
				    WRD_NET_MAX_NAMES);
	}
	char **g = realloc(*v, (*n + nn + 1) * sizeof(char *));
	if (!g) {
		strv_free(names, nn);
		return wr_err_set(err, ENOMEM, "out of memory");
	}
	*v = g;
	memcpy(&g[*n], names, nn * sizeof(char *));
	*n += nn;
	free(names);
	return 0;
}

int wrd_netpolicy_patch(const struct wrd_netpolicy *cur, json_t *patch, struct wrd_netpolicy *out,
			wr_err *err)
{
	static const char *const keys[] = {
	    "mode",	   "allow",	     "allow_add", "allow_remove", "domains",
	    "domains_add", "domains_remove", "services",  "services_add", "services_remove",
	    NULL};
	memset(out, 0, sizeof(*out));
	if (!json_is_object(patch))
		return wr_err_field(err, "body", "body: must be an object");
	if (known_keys(patch, keys, "network", err) < 0) {
		/* top-level PATCH fields are named as they are */
		char *dot = strchr((*err)->field, '.');
		if (dot)
			memmove((*err)->field, dot + 1, strlen(dot));
		return -EINVAL;
	}
	if (json_object_get(patch, "allow") &&
	    (json_object_get(patch, "allow_add") || json_object_get(patch, "allow_remove")))
		return wr_err_field(err, "allow",
				    "allow: replaces the rules; use it without "
				    "allow_add and allow_remove");
	if (wrd_netpolicy_copy(cur, out) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	json_t *x;
	if ((x = json_object_get(patch, "mode")) && parse_mode(x, "mode", &out->mode, err) < 0)
		return -EINVAL;
	if ((x = json_object_get(patch, "allow"))) {
		free(out->allow);
		out->allow = NULL;
		out->n_allow = 0;
		if (parse_rules(x, "allow", &out->allow, &out->n_allow, err) < 0)
			return -EINVAL;
	}
	if ((x = json_object_get(patch, "allow_remove"))) {
		_cleanup_free_ struct wr_net_rule *rm = NULL;
		size_t nrm = 0;
		if (parse_rules(x, "allow_remove", &rm, &nrm, err) < 0)
			return -EINVAL;
		for (size_t i = 0; i < nrm; i++) {
			size_t j = 0;
			while (j < out->n_allow && !wr_net_rule_equal(&out->allow[j], &rm[i]))
				j++;
			if (j == out->n_allow) {
				char f[64];
				snprintf(f, sizeof(f), "allow_remove[%zu]", i);
				return wr_err_field(err, f, "%s: no such rule in the policy", f);
			}
			memmove(&out->allow[j], &out->allow[j + 1],
				(out->n_allow - j - 1) * sizeof(*out->allow));
			out->n_allow--;
		}
	}
	if ((x = json_object_get(patch, "allow_add"))) {
		_cleanup_free_ struct wr_net_rule *add = NULL;
		size_t nadd = 0;
		if (parse_rules(x, "allow_add", &add, &nadd, err) < 0)
			return -EINVAL;
		if (out->n_allow + nadd > WR_NET_MAX_RULES)
			return wr_err_field(err, "allow_add", "allow_add: at most %d rules in all",
					    WR_NET_MAX_RULES);
		struct wr_net_rule *g =
		    realloc(out->allow, (out->n_allow + nadd + 1) * sizeof(*out->allow));
		if (!g)
			return wr_err_set(err, ENOMEM, "out of memory");
		out->allow = g;
		memcpy(&g[out->n_allow], add, nadd * sizeof(*add));
		out->n_allow += nadd;
	}
	static const struct {
		const char *set, *add, *rm;
		bool domains;
	} lists[] = {{"domains", "domains_add", "domains_remove", true},
		     {"services", "services_add", "services_remove", false}};
	for (size_t l = 0; l < 2; l++) {
		char ***v = lists[l].domains ? &out->domains : &out->services;
		size_t *n = lists[l].domains ? &out->n_domains : &out->n_services;
		if ((x = json_object_get(patch, lists[l].set))) {
			if (json_object_get(patch, lists[l].add) ||
			    json_object_get(patch, lists[l].rm))
				return wr_err_field(err, lists[l].set,
						    "%s: replaces the list; use it without "
						    "%s and %s",
						    lists[l].set, lists[l].add, lists[l].rm);
			strv_free(*v, *n);
			*v = NULL;
			*n = 0;
			if (parse_names(x, lists[l].set, lists[l].domains, v, n, err) < 0)
				return -EINVAL;
		}
		if ((x = json_object_get(patch, lists[l].rm)) &&
		    names_remove(*v, n, x, lists[l].rm, lists[l].domains, err) < 0)
			return -EINVAL;
		if ((x = json_object_get(patch, lists[l].add)) &&
		    names_add(v, n, x, lists[l].add, lists[l].domains, err) < 0)
			return -EINVAL;
	}
	dedupe_rules(out);
	dedupe_names(out->domains, &out->n_domains);
	dedupe_names(out->services, &out->n_services);
	struct wr_net_policy np = {.mode = out->mode, .allow = out->allow, .n_allow = out->n_allow};
	return wr_net_policy_validate(&np, err);
}

static json_t *rule_json(const struct wr_net_rule *r)
{
	char c[64], p[16];
	wr_net_rule_format_cidr(r, c, sizeof(c));
	wr_net_rule_format_ports(r, p, sizeof(p));
	return json_pack("{s:s, s:s, s:s}", "cidr", c, "ports", *p ? p : "*", "protocol",
			 wr_net_proto_name(r->proto));
}

json_t *wrd_netpolicy_json(const struct wrd_netpolicy *p)
{
	json_t *o = json_object();
	json_object_set_new(o, "mode", json_string(wr_net_mode_name(p->mode)));
	json_t *a = json_array();
	for (size_t i = 0; i < p->n_allow; i++)
		json_array_append_new(a, rule_json(&p->allow[i]));
	json_object_set_new(o, "allow", a);
	json_t *d = json_array();
	for (size_t i = 0; i < p->n_domains; i++)
		json_array_append_new(d, json_string(p->domains[i]));
	json_object_set_new(o, "domains", d);
	json_t *s = json_array();
	for (size_t i = 0; i < p->n_services; i++)
		json_array_append_new(s, json_string(p->services[i]));
	json_object_set_new(o, "services", s);
	return o;
}

/* ---- the daemon's filter ---------------------------------------------------- */

struct wrd_net {
	struct wrd_sbx *sb; /* owner; the list entry goes before sb does */
	uint64_t cgid;
	struct wr_netfilter_att *att;
	struct wrd_netpolicy pol;
	bool has_gw4, has_gw6;
	uint8_t gw4[4], gw6[16];
	uint64_t reported; /* sum of the counts of the events received */
	struct wr_net_refusal last[WRD_NET_LAST];
	unsigned nlast, head;
	struct wrd_net *next;
};

/* g_lock covers the list and every wrd_net's policy and refusals; lock
 * order: g_lock, then a sandbox's lock (wrd_sbx_event). Never held across
 * a database write. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct wr_netfilter *g_nf;
static struct wrd_net *g_list;
static struct wr_net_rule g_deny[WR_NET_MAX_RULES];
static size_t g_ndeny;
static char g_why[256];
static pthread_t g_reader;

bool wrd_net_enabled(void)
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
	struct wrd_net *n = g_list;
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

int wrd_net_deny_add(const char *cidr, wr_err *err)
{
	pthread_mutex_lock(&g_lock);
	int r = deny_push(cidr, err);
	if (r == 0 && g_nf)
		r = wr_netfilter_set_deny(g_nf, g_deny, g_ndeny, err);
	pthread_mutex_unlock(&g_lock);
	return r;
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

void wrd_net_sweep(void)
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

int wrd_net_init(const struct wrd_config *cfg, wr_err *err)
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
	/* Created at start-up, as every daemon thread (no thread after the
	 * first sandbox: see ARCHITECTURE.md). */
	if (pthread_create(&g_reader, NULL, reader_main, NULL) != 0) {
		wr_netfilter_free(g_nf);
		g_nf = NULL;
		return wr_err_set(err, EAGAIN, "network filter: reader thread");
	}
	return 0;
}

static struct wrd_net *net_of(struct wrd_sbx *sb)
{
	if (!sb->net) {
		sb->net = calloc(1, sizeof(*sb->net));
		if (sb->net)
			sb->net->sb = sb;
	}
	return sb->net;
}

void wrd_net_set_gateway(struct wrd_sbx *sb, const uint8_t *gw4, const uint8_t *gw6)
{
	struct wrd_net *n = net_of(sb);
	if (!n)
		return;
	pthread_mutex_lock(&g_lock);
	if ((n->has_gw4 = gw4 != NULL))
		memcpy(n->gw4, gw4, 4);
	if ((n->has_gw6 = gw6 != NULL))
		memcpy(n->gw6, gw6, 16);
	pthread_mutex_unlock(&g_lock);
}

static void to_filter(const struct wrd_net *n, const struct wrd_netpolicy *p,
		      struct wr_net_policy *np)
{
	memset(np, 0, sizeof(*np));
	np->mode = p->mode;
	np->allow = p->allow;
	np->n_allow = p->n_allow;
	np->has_gw4 = n->has_gw4;
	np->has_gw6 = n->has_gw6;
	memcpy(np->gw4, n->gw4, 4);
	memcpy(np->gw6, n->gw6, 16);
}

int wrd_net_attach(struct wrd_sbx *sb, int cgroup_fd, wr_err *err)
{
	struct wrd_netpolicy p;
	if (wrd_netpolicy_parse(json_object_get(sb->rec.spec, "network"), &p, err) < 0) {
		wrd_netpolicy_clear(&p);
		return wr_err_wrap(err, "network policy of the record");
	}
	struct wrd_net *n = net_of(sb);
	if (!n) {
		wrd_netpolicy_clear(&p);
		return wr_err_set(err, ENOMEM, "out of memory");
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
	return 0;
}

void wrd_net_detach(struct wrd_sbx *sb)
{
	struct wrd_net *n = sb->net;
	if (!n)
		return;
	pthread_mutex_lock(&g_lock);
	for (struct wrd_net **pp = &g_list; *pp; pp = &(*pp)->next)
		if (*pp == n) {
			*pp = n->next;
			break;
		}
	pthread_mutex_unlock(&g_lock);
	if (n->att)
		wr_netfilter_detach(g_nf, &n->att);
	wrd_netpolicy_clear(&n->pol);
	free(n);
	sb->net = NULL;
}

int wrd_net_update(struct wrd_sbx *sb, const struct wrd_netpolicy *p, wr_err *err)
{
	struct wrd_net *n = sb->net;
	if (!n)
		return wr_err_set(err, ESRCH, "sandbox %s has no network state", sb->rec.id);
	if (!n->att && p->mode != WR_NET_NONE)
		return wr_err_field(err, "mode",
				    "mode: this sandbox has no network filter (%s); only \"none\"",
				    g_nf ? "no v2 cgroup" : g_why);
	struct wrd_netpolicy copy;
	if (wrd_netpolicy_copy(p, &copy) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	json_t *j = wrd_netpolicy_json(p);
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
			json_t *oj = wrd_netpolicy_json(&n->pol);
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
	return 0;
}

int wrd_net_policy_of(struct wrd_sbx *sb, struct wrd_netpolicy *out)
{
	struct wrd_netpolicy none = {0};
	pthread_mutex_lock(&g_lock);
	int r = wrd_netpolicy_copy(sb->net ? &sb->net->pol : &none, out);
	pthread_mutex_unlock(&g_lock);
	return r;
}

int wrd_net_allow_resolved(struct wrd_sbx *sb, int family, const uint8_t *addr,
			   const struct wr_net_rule *ports, size_t n, uint32_t ttl_s, wr_err *err)
{
	if (!g_nf || !sb->net || !sb->net->att)
		return wr_err_set(err, ENOTSUP, "sandbox %s has no network filter", sb->rec.id);
	return wr_netfilter_allow_addr(g_nf, sb->net->cgid, family, addr, ports, n, ttl_s, err);
}

json_t *wrd_net_json(struct wrd_sbx *sb)
{
	struct wrd_net *n = sb->net;
	struct wr_net_counters c = {0};
	if (n && n->att) {
		_cleanup_err_ wr_err err = NULL;
		wr_netfilter_counters(g_nf, n->cgid, &c, &err);
	}
	pthread_mutex_lock(&g_lock);
	struct wrd_netpolicy none = {0};
	json_t *o = wrd_netpolicy_json(n ? &n->pol : &none);
	json_object_set_new(o, "enforced", json_boolean(n && n->att));
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

/* One PATCH at a time: read, merge and apply under it, so two concurrent
 * PATCHes of a sandbox never lose one another's edits. */
static pthread_mutex_t g_patch = PTHREAD_MUTEX_INITIALIZER;

int wrd_net_patch(struct wrd_sbx *sb, json_t *patch, wr_err *err)
{
	pthread_mutex_lock(&g_patch);
	struct wrd_netpolicy cur, next;
	int r = wrd_net_policy_of(sb, &cur);
	if (r < 0) {
		pthread_mutex_unlock(&g_patch);
		return wr_err_set(err, ENOMEM, "out of memory");
	}
	r = wrd_netpolicy_patch(&cur, patch, &next, err);
	if (r == 0)
		r = wrd_net_update(sb, &next, err);
	wrd_netpolicy_clear(&cur);
	wrd_netpolicy_clear(&next);
	pthread_mutex_unlock(&g_patch);
	return r;
}
