/* Detection rules: a small JSON file of patterns that flag audit rows with
 * a severity and the rule's name.
 *
 *   {"rules": [
 *     {"name": "answer-file-read", "severity": "high",
 *      "layers": ["landlock", "file"], "path_glob": ["*answer*"],
 *      "outside": ["/work", "/tmp"]},
 *     {"name": "metadata-ip", "severity": "critical", "layers": ["bpf-net"],
 *      "dest": ["169.254.169.254", "fd00:ec2::254/128"]},
 *     {"name": "repeated-refusals", "severity": "medium", "denied": true,
 *      "min_count": 1000}]}
 *
 * Every condition given must hold; a rule with none matches every row.
 * path_glob uses fnmatch(3) without FNM_PATHNAME ("*" crosses "/"). */
#include <arpa/inet.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "daemon/audit_internal.h"

static void free_list(char **v)
{
	for (size_t i = 0; v && v[i]; i++)
		free(v[i]);
	free(v);
}

void wra_rules_free(struct wra_rules *r)
{
	for (size_t i = 0; i < r->n; i++) {
		struct wra_rule *x = &r->v[i];
		free(x->name);
		free_list(x->actions);
		free_list(x->path_glob);
		free_list(x->outside);
		free_list(x->dest);
	}
	free(r->v);
	r->v = NULL;
	r->n = 0;
}

/* An IP or CIDR: family, bytes, prefix length. */
struct net {
	int af;
	unsigned char a[16];
	int bits;
};

static int parse_net(const char *s, struct net *n)
{
	char buf[64];
	if (strlen(s) >= sizeof(buf))
		return -1;
	strcpy(buf, s);
	char *slash = strchr(buf, '/');
	int bits = -1;
	if (slash) {
		*slash = 0;
		char *end;
		long b = strtol(slash + 1, &end, 10);
		if (*end || end == slash + 1 || b < 0)
			return -1;
		bits = (int)b;
	}
	memset(n, 0, sizeof(*n));
	if (inet_pton(AF_INET, buf, n->a) == 1)
		n->af = AF_INET;
	else if (inet_pton(AF_INET6, buf, n->a) == 1)
		n->af = AF_INET6;
	else
		return -1;
	int max = n->af == AF_INET ? 32 : 128;
	if (bits > max)
		return -1;
	n->bits = bits < 0 ? max : bits;
	return 0;
}

static bool net_has(const struct net *n, const struct net *ip)
{
	if (n->af != ip->af)
		return false;
	int full = n->bits / 8, rest = n->bits % 8;
	if (memcmp(n->a, ip->a, (size_t)full) != 0)
		return false;
	if (rest == 0)
		return true;
	unsigned char mask = (unsigned char)(0xff << (8 - rest));
	return (n->a[full] & mask) == (ip->a[full] & mask);
}

static int str_list(json_t *v, const char *field, bool nets, char ***out, wr_err *err)
{
	if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > 256)
		return wr_err_field(err, field, "%s: must be an array of 1 to 256 strings", field);
	char **l = calloc(json_array_size(v) + 1, sizeof(char *));
	if (l == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	size_t i;
	json_t *e;
	json_array_foreach(v, i, e)
	{
		const char *s = json_string_value(e);
		struct net n;
		if (s == NULL || *s == 0 || strlen(s) > 4096) {
			free_list(l);
			return wr_err_field(err, field, "%s[%zu]: must be a non-empty string",
					    field, i);
		}
		if (nets && parse_net(s, &n) < 0) {
			free_list(l);
			return wr_err_field(
			    err, field, "%s[%zu]: '%s' is not an IP address or CIDR", field, i, s);
		}
		if ((l[i] = strdup(s)) == NULL) {
			free_list(l);
			return wr_err_set(err, ENOMEM, "out of memory");
		}
	}
	*out = l;
	return 0;
}

static int parse_rule(json_t *o, size_t idx, struct wra_rule *x, wr_err *err)
{
	char f[96];
	x->denied = -1;
	x->severity = WR_AUDIT_SEV_MEDIUM;
	if (!json_is_object(o)) {
		snprintf(f, sizeof(f), "rules[%zu]", idx);
		return wr_err_field(err, f, "%s: must be an object", f);
	}
	const char *k;
	json_t *v;
	json_object_foreach(o, k, v)
	{
		snprintf(f, sizeof(f), "rules[%zu].%s", idx, k);
		int r = 0;
		if (strcmp(k, "name") == 0) {
			const char *s = json_string_value(v);
			if (s == NULL || *s == 0 || strlen(s) > 63)
				return wr_err_field(err, f, "%s: must be a string of 1 to 63 bytes",
						    f);
			if ((x->name = strdup(s)) == NULL)
				return wr_err_set(err, ENOMEM, "out of memory");
		} else if (strcmp(k, "severity") == 0) {
			int s = wr_audit_severity_parse(json_string_value(v));
			if (s < 0)
				return wr_err_field(
				    err, f, "%s: one of info, low, medium, high, critical", f);
			x->severity = (enum wr_audit_severity)s;
		} else if (strcmp(k, "layers") == 0) {
			if (!json_is_array(v) || json_array_size(v) == 0)
				return wr_err_field(err, f, "%s: must be an array of layer names",
						    f);
			size_t i;
			json_t *e;
			json_array_foreach(v, i, e)
			{
				int l = wr_audit_layer_parse(json_string_value(e));
				if (l < 0)
					return wr_err_field(err, f, "%s[%zu]: unknown layer", f, i);
				x->layers |= 1u << l;
			}
		} else if (strcmp(k, "denied") == 0) {
			if (!json_is_boolean(v))
				return wr_err_field(err, f, "%s: must be a boolean", f);
			x->denied = json_is_true(v);
		} else if (strcmp(k, "min_count") == 0) {
			if (!json_is_integer(v) || json_integer_value(v) < 0)
				return wr_err_field(err, f, "%s: must be a non-negative integer",
						    f);
			x->min_count = (uint64_t)json_integer_value(v);
		} else if (strcmp(k, "actions") == 0) {
			r = str_list(v, f, false, &x->actions, err);
		} else if (strcmp(k, "path_glob") == 0) {
			r = str_list(v, f, false, &x->path_glob, err);
		} else if (strcmp(k, "outside") == 0) {
			r = str_list(v, f, false, &x->outside, err);
		} else if (strcmp(k, "dest") == 0) {
			r = str_list(v, f, true, &x->dest, err);
		} else if (strcmp(k, "description") != 0) {
			return wr_err_field(err, f, "%s: unknown key", f);
		}
		if (r < 0)
			return r;
	}
	if (x->name == NULL) {
		snprintf(f, sizeof(f), "rules[%zu].name", idx);
		return wr_err_field(err, f, "%s: missing", f);
	}
	return 0;
}

int wra_rules_parse(json_t *root, struct wra_rules *out, wr_err *err)
{
	memset(out, 0, sizeof(*out));
	json_t *arr = json_is_object(root) ? json_object_get(root, "rules") : NULL;
	if (!json_is_array(arr) || json_object_size(root) != 1)
		return wr_err_field(err, "rules", "rules: the file must be {\"rules\": [...]}");
	size_t n = json_array_size(arr);
	if (n > 1024)
		return wr_err_field(err, "rules", "rules: at most 1024 rules");
	out->v = calloc(n ? n : 1, sizeof(*out->v));
	if (out->v == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		out->n = i + 1;
		if (parse_rule(json_array_get(arr, i), i, &out->v[i], err) < 0) {
			wra_rules_free(out);
			return -EINVAL;
		}
	}
	return 0;
}

int wra_rules_load(const char *path, struct wra_rules *out, wr_err *err)
{
	json_error_t je;
	json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
	if (root == NULL)
		return wr_err_set(err, EINVAL, "audit rules %s: line %d: %s", path, je.line,
				  je.text);
	int r = wra_rules_parse(root, out, err);
	json_decref(root);
	if (r < 0)
		return wr_err_wrap(err, "audit rules %s", path);
	return 0;
}

static bool beneath(const char *path, const char *dir)
{
	size_t n = strlen(dir);
	while (n > 1 && dir[n - 1] == '/')
		n--;
	if (strncmp(path, dir, n) != 0)
		return false;
	return path[n] == 0 || path[n] == '/' || (n == 1 && dir[0] == '/');
}

static bool rule_matches(const struct wra_rule *x, enum wr_audit_layer layer, bool denied,
			 const char *action, const char *subject, const char *ip, uint64_t count)
{
	if (x->layers && !(x->layers & (1u << layer)))
		return false;
	if (x->denied >= 0 && x->denied != (int)denied)
		return false;
	if (x->min_count > 1 && count < x->min_count)
		return false;
	if (x->actions) {
		bool hit = false;
		for (size_t i = 0; action && x->actions[i] && !hit; i++)
			hit = strcmp(x->actions[i], action) == 0;
		if (!hit)
			return false;
	}
	if (x->path_glob) {
		bool hit = false;
		for (size_t i = 0; subject && x->path_glob[i] && !hit; i++)
			hit = fnmatch(x->path_glob[i], subject, 0) == 0;
		if (!hit)
			return false;
	}
	if (x->outside) {
		if (subject == NULL || subject[0] != '/')
			return false;
		for (size_t i = 0; x->outside[i]; i++)
			if (beneath(subject, x->outside[i]))
				return false;
	}
	if (x->dest) {
		struct net a, n;
		if (ip == NULL || parse_net(ip, &a) < 0)
			return false;
		bool hit = false;
		for (size_t i = 0; x->dest[i] && !hit; i++)
			hit = parse_net(x->dest[i], &n) == 0 && net_has(&n, &a);
		if (!hit)
			return false;
	}
	return true;
}

const struct wra_rule *wra_rules_match(const struct wra_rules *r, enum wr_audit_layer layer,
				       bool denied, const char *action, const char *subject,
				       const char *ip, uint64_t count)
{
	const struct wra_rule *best = NULL;
	for (size_t i = 0; r && i < r->n; i++) {
		const struct wra_rule *x = &r->v[i];
		if ((best == NULL || x->severity > best->severity) &&
		    rule_matches(x, layer, denied, action, subject, ip, count))
			best = x;
	}
	return best;
}

bool wra_rules_crossed(const struct wra_rules *r, uint64_t before, uint64_t after)
{
	for (size_t i = 0; r && i < r->n; i++)
		if (r->v[i].min_count > before && r->v[i].min_count <= after)
			return true;
	return false;
}
