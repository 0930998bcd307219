/* A sandbox's network policy: data model, validation, JSON and merge.
 * The daemon's glue to the filter is netenforce.c. See netpolicy.h. */
#include "daemon/netpolicy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "daemon/dns.h"

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
	dst->cut_established = src->cut_established;
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

static int parse_established(json_t *v, const char *field, bool *cut, wr_err *err)
{
	const char *s = json_string_value(v);
	if (s && strcmp(s, "keep") == 0)
		*cut = false;
	else if (s && strcmp(s, "cut") == 0)
		*cut = true;
	else
		return wr_err_field(err, field, "%s: must be \"keep\" or \"cut\"", field);
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

/* The names the DNS forwarder answers for this policy (NULL: none, mode
 * none). Errors name "domains[i]" / "services[i]" (an unknown service). */
int wrd_netpolicy_dns_names(const struct wrd_netpolicy *p, bool for_mode, struct wr_dns_names **out,
			    wr_err *err)
{
	*out = NULL;
	if (for_mode && p->mode == WR_NET_NONE)
		return 0;
	return wrd_dns_policy_names((const char *const *)p->domains, p->n_domains,
				    (const char *const *)p->services, p->n_services,
				    for_mode && p->mode == WR_NET_OPEN, out, err);
}

/* Domains and services as the forwarder reads them (names known to the
 * node's services file); the field gets prefix ("network.") in front. */
static int dns_validate(const struct wrd_netpolicy *p, const char *prefix, wr_err *err)
{
	struct wr_dns_names *names = NULL;
	if (wrd_netpolicy_dns_names(p, false, &names, err) < 0) {
		if (*prefix && (*err)->field) {
			char f[96];
			snprintf(f, sizeof(f), "%s%s", prefix, (*err)->field);
			free((*err)->field);
			(*err)->field = strdup(f);
			wr_err_wrap(err, "%.*s", (int)strlen(prefix) - 1, prefix);
		}
		return -EINVAL;
	}
	wr_dns_names_unref(names);
	return 0;
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
	return dns_validate(p, "network.", err);
}

int wrd_netpolicy_parse(json_t *v, struct wrd_netpolicy *out, wr_err *err)
{
	static const char *const keys[] = {"mode",     "allow",	      "domains",
					   "services", "established", NULL};
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
	if ((x = json_object_get(v, "established")) &&
	    parse_established(x, "network.established", &out->cut_established, err) < 0)
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
	    "mode",	    "allow",	       "allow_add",	 "allow_remove",
	    "domains",	    "domains_add",     "domains_remove", "services",
	    "services_add", "services_remove", "established",	 NULL};
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
	if ((x = json_object_get(patch, "established")) &&
	    parse_established(x, "established", &out->cut_established, err) < 0)
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
	if (wr_net_policy_validate(&np, err) < 0)
		return -EINVAL;
	return dns_validate(out, "", err);
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
	json_object_set_new(o, "established", json_string(p->cut_established ? "cut" : "keep"));
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
