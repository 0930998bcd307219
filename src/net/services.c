/* The named-services file (services.h): strict loading with jansson. */
#include "net/services.h"

#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/dns.h"

#define SVC_MAX 256
#define SVC_MAX_DOMAINS 64
/* The eBPF filter takes at most 4 port rules with a resolved address. */
#define SVC_MAX_PORTS 4

static int parse_u16(const char *s, size_t n, uint16_t *out)
{
	if (n == 0 || n > 5)
		return -1;
	unsigned v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	if (v == 0 || v > 65535)
		return -1;
	*out = (uint16_t)v;
	return 0;
}

int wr_svc_parse_ports(const char *s, struct wr_svc_ports *out, wr_err *err)
{
	const char *slash = strchr(s, '/');
	size_t n = slash ? (size_t)(slash - s) : strlen(s);
	out->proto = IPPROTO_TCP;
	if (slash != NULL) {
		if (strcmp(slash + 1, "tcp") == 0)
			out->proto = IPPROTO_TCP;
		else if (strcmp(slash + 1, "udp") == 0)
			out->proto = IPPROTO_UDP;
		else
			return wr_err_set(err, EINVAL, "\"%.40s\": protocol must be tcp or udp", s);
	}
	const char *dash = memchr(s, '-', n);
	if (dash == NULL) {
		if (parse_u16(s, n, &out->lo) < 0)
			return wr_err_set(err, EINVAL, "\"%.40s\": port must be 1..65535", s);
		out->hi = out->lo;
		return 0;
	}
	if (parse_u16(s, (size_t)(dash - s), &out->lo) < 0 ||
	    parse_u16(dash + 1, n - (size_t)(dash - s) - 1, &out->hi) < 0 || out->lo > out->hi)
		return wr_err_set(err, EINVAL, "\"%.40s\": range must be LO-HI within 1..65535", s);
	return 0;
}

static bool name_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 63 || s[0] == '-')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-' ||
		      s[i] == '_'))
			return false;
	return true;
}

void wr_services_free(struct wr_services *s)
{
	if (s == NULL)
		return;
	for (size_t i = 0; i < s->n; i++) {
		struct wr_service *v = &s->v[i];
		free(v->name);
		free(v->description);
		for (size_t k = 0; k < v->n_domains; k++)
			free(v->domains[k]);
		free(v->domains);
		free(v->ports);
	}
	free(s->v);
	free(s);
}

static int load_one(const char *name, json_t *o, struct wr_service *v, wr_err *err)
{
	char f[160];
	if (!name_ok(name))
		return wr_err_field(err, "services",
				    "services.%.63s: a service name is 1..63 of a-z, "
				    "0-9, '-', '_'",
				    name);
	if ((v->name = strdup(name)) == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	snprintf(f, sizeof(f), "services.%s", name);
	json_t *desc = NULL, *doms = NULL, *ports = NULL;
	json_error_t je;
	if (!json_is_object(o))
		return wr_err_field(err, f, "%s: must be an object", f);
	if (json_unpack_ex(o, &je, JSON_STRICT, "{s?o, s:o, s:o}", "description", &desc, "domains",
			   &doms, "ports", &ports) < 0) {
		/* jansson says which key is missing or unknown */
		return wr_err_field(err, f, "%s: %s (keys: description, domains, ports)", f,
				    je.text);
	}
	if (desc != NULL) {
		snprintf(f, sizeof(f), "services.%s.description", name);
		if (!json_is_string(desc) || json_string_length(desc) > 200)
			return wr_err_field(err, f, "%s: must be a string of at most 200 bytes", f);
		if ((v->description = strdup(json_string_value(desc))) == NULL)
			return wr_err_set(err, ENOMEM, "out of memory");
	}
	snprintf(f, sizeof(f), "services.%s.domains", name);
	if (!json_is_array(doms) || json_array_size(doms) == 0 ||
	    json_array_size(doms) > SVC_MAX_DOMAINS)
		return wr_err_field(err, f, "%s: must be an array of 1..%d names", f,
				    SVC_MAX_DOMAINS);
	if ((v->domains = calloc(json_array_size(doms), sizeof(char *))) == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	size_t i;
	json_t *e;
	json_array_foreach(doms, i, e)
	{
		snprintf(f, sizeof(f), "services.%s.domains[%zu]", name, i);
		char norm[256];
		if (!json_is_string(e))
			return wr_err_field(err, f, "%s: must be a string", f);
		if (wr_dns_pattern_check(json_string_value(e), norm, err) < 0) {
			/* the field, then why */
			char *why = strdup((*err)->msg);
			wr_err_free(err);
			int r = wr_err_field(err, f, "%s: %s", f, why ? why : "invalid");
			free(why);
			return r;
		}
		if (strcmp(norm, "*") == 0)
			return wr_err_field(err, f, "%s: \"*\" would allow every name", f);
		if ((v->domains[v->n_domains++] = strdup(norm)) == NULL)
			return wr_err_set(err, ENOMEM, "out of memory");
	}
	snprintf(f, sizeof(f), "services.%s.ports", name);
	if (!json_is_array(ports) || json_array_size(ports) == 0 ||
	    json_array_size(ports) > SVC_MAX_PORTS)
		return wr_err_field(err, f,
				    "%s: must be an array of 1..%d \"PORT[-PORT][/tcp|/udp]\"", f,
				    SVC_MAX_PORTS);
	if ((v->ports = calloc(json_array_size(ports), sizeof(*v->ports))) == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	json_array_foreach(ports, i, e)
	{
		snprintf(f, sizeof(f), "services.%s.ports[%zu]", name, i);
		if (!json_is_string(e))
			return wr_err_field(err, f, "%s: must be a string such as \"443/tcp\"", f);
		wr_err pe = NULL;
		if (wr_svc_parse_ports(json_string_value(e), &v->ports[v->n_ports], &pe) < 0) {
			int r = wr_err_field(err, f, "%s: %s", f, pe->msg);
			wr_err_free(&pe);
			return r;
		}
		v->n_ports++;
	}
	return 0;
}

static int svc_cmp(const void *a, const void *b)
{
	return strcmp(((const struct wr_service *)a)->name, ((const struct wr_service *)b)->name);
}

static int from_json(json_t *root, struct wr_services **out, wr_err *err)
{
	json_t *ver = NULL, *svcs = NULL;
	json_error_t je;
	if (!json_is_object(root))
		return wr_err_field(err, "", "services file: must be a JSON object");
	if (json_unpack_ex(root, &je, JSON_STRICT, "{s:o, s:o}", "version", &ver, "services",
			   &svcs) < 0)
		return wr_err_field(err, "", "services file: %s (keys: version, services)",
				    je.text);
	if (!json_is_integer(ver) || json_integer_value(ver) != 1)
		return wr_err_field(err, "version", "version: must be 1");
	if (!json_is_object(svcs) || json_object_size(svcs) > SVC_MAX)
		return wr_err_field(err, "services",
				    "services: must be an object of at most %d "
				    "services",
				    SVC_MAX);
	struct wr_services *s = calloc(1, sizeof(*s));
	if (s == NULL || (s->v = calloc(json_object_size(svcs) + 1, sizeof(*s->v))) == NULL) {
		free(s);
		return wr_err_set(err, ENOMEM, "out of memory");
	}
	const char *k;
	json_t *v;
	json_object_foreach(svcs, k, v)
	{
		int r = load_one(k, v, &s->v[s->n++], err);
		if (r < 0) {
			wr_services_free(s);
			return r;
		}
	}
	qsort(s->v, s->n, sizeof(*s->v), svc_cmp);
	*out = s;
	return 0;
}

int wr_services_parse(const char *text, struct wr_services **out, wr_err *err)
{
	json_error_t je;
	json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &je);
	if (root == NULL)
		return wr_err_field(err, "", "line %d: %s", je.line, je.text);
	int r = from_json(root, out, err);
	json_decref(root);
	return r;
}

int wr_services_load(const char *path, struct wr_services **out, wr_err *err)
{
	json_error_t je;
	json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
	if (root == NULL)
		return wr_err_field(err, "", "services file %s: line %d: %s", path, je.line,
				    je.text);
	int r = from_json(root, out, err);
	json_decref(root);
	if (r < 0)
		wr_err_wrap(err, "services file %s", path);
	return r;
}

const struct wr_service *wr_services_find(const struct wr_services *s, const char *name)
{
	if (s == NULL)
		return NULL;
	struct wr_service key = {.name = (char *)name};
	return bsearch(&key, s->v, s->n, sizeof(*s->v), svc_cmp);
}

int wr_services_expand(const struct wr_services *s, const char *const *names, size_t n,
		       struct wr_svc_expansion *out, wr_err *err)
{
	memset(out, 0, sizeof(*out));
	size_t total = 0;
	for (size_t i = 0; i < n; i++) {
		const struct wr_service *v = wr_services_find(s, names[i]);
		if (v == NULL) {
			char f[32];
			snprintf(f, sizeof(f), "services[%zu]", i);
			return wr_err_field(err, f, "%s: unknown service \"%.64s\"", f, names[i]);
		}
		total += v->n_domains;
	}
	out->domains = calloc(total + 1, sizeof(char *));
	out->service_of = calloc(total + 1, sizeof(uint32_t));
	if (out->domains == NULL || out->service_of == NULL) {
		wr_services_expansion_free(out);
		return wr_err_set(err, ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		const struct wr_service *v = wr_services_find(s, names[i]);
		for (size_t k = 0; k < v->n_domains; k++) {
			out->domains[out->n_domains] = v->domains[k];
			out->service_of[out->n_domains++] = (uint32_t)i;
		}
	}
	return 0;
}

void wr_services_expansion_free(struct wr_svc_expansion *x)
{
	free(x->domains);
	free(x->service_of);
	x->domains = NULL;
	x->service_of = NULL;
	x->n_domains = 0;
}
