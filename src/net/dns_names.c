/* Allowed-name sets of the DNS forwarder (dns.h): validation of patterns and
 * matching. A set is two sorted arrays (exact names, wildcard suffixes)
 * searched with bsearch: a match costs one search for the name and one per
 * label for the wildcards, with no allocation. */
#include "net/dns.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct ent {
	char *name; /* normalised; for a wildcard the suffix without "*." */
	uint32_t tag;
};

struct wr_dns_names {
	atomic_int refs;
	struct ent *exact, *wild;
	size_t n_exact, n_wild;
	uint32_t any_tags[WR_DNS_MAX_TAGS]; /* pattern "*" */
	size_t n_any;
};

static bool label_char(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

int wr_dns_pattern_check(const char *pattern, char out[256], wr_err *err)
{
	size_t n = strlen(pattern);
	if (n > 0 && pattern[n - 1] == '.')
		n--;
	if (n == 0)
		return wr_err_set(err, EINVAL, "empty name");
	if (n > 253)
		return wr_err_set(err, EINVAL, "longer than 253 bytes");
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)pattern[i];
		out[i] = (char)((c >= 'A' && c <= 'Z') ? c + 32 : c);
	}
	out[n] = 0;
	if (strcmp(out, "*") == 0)
		return 0;
	size_t start = 0;
	if (strncmp(out, "*.", 2) == 0)
		start = 2;
	size_t lab = 0;
	for (size_t i = start; i <= n; i++) {
		unsigned char c = (unsigned char)out[i];
		if (c == '.' || c == 0) {
			if (lab == 0)
				return wr_err_set(err, EINVAL, "empty label");
			lab = 0;
			continue;
		}
		if (c == '*')
			return wr_err_set(err, EINVAL,
					  "'*' is allowed only as the whole first label (\"*.%s\")",
					  out + i + 1 < out + n ? out + i + 1 : "example.org");
		if (!label_char(c))
			return wr_err_set(
			    err, EINVAL,
			    "byte 0x%02x at %zu: labels hold letters, digits, '-' and "
			    "'_' (international names in their xn-- form)",
			    c, i);
		if (++lab > 63)
			return wr_err_set(err, EINVAL, "label longer than 63 bytes");
	}
	return 0;
}

static int ent_cmp(const void *a, const void *b)
{
	const struct ent *x = a, *y = b;
	int c = strcmp(x->name, y->name);
	if (c != 0)
		return c;
	return x->tag < y->tag ? -1 : x->tag > y->tag;
}

static void names_free(struct wr_dns_names *s)
{
	for (size_t i = 0; i < s->n_exact; i++)
		free(s->exact[i].name);
	for (size_t i = 0; i < s->n_wild; i++)
		free(s->wild[i].name);
	free(s->exact);
	free(s->wild);
	free(s);
}

static void add_tag(uint32_t *tags, size_t *n, uint32_t tag)
{
	for (size_t i = 0; i < *n; i++)
		if (tags[i] == tag)
			return;
	if (*n < WR_DNS_MAX_TAGS)
		tags[(*n)++] = tag;
}

int wr_dns_names_new(const struct wr_dns_pattern *p, size_t n, struct wr_dns_names **out,
		     wr_err *err)
{
	struct wr_dns_names *s = calloc(1, sizeof(*s));
	if (s == NULL || (n > 0 && ((s->exact = calloc(n, sizeof(struct ent))) == NULL ||
				    (s->wild = calloc(n, sizeof(struct ent))) == NULL))) {
		if (s != NULL)
			names_free(s);
		return wr_err_set(err, ENOMEM, "out of memory");
	}
	atomic_init(&s->refs, 1);
	for (size_t i = 0; i < n; i++) {
		char norm[256];
		if (wr_dns_pattern_check(p[i].name, norm, err) < 0) {
			names_free(s);
			return wr_err_wrap(err, "name \"%.260s\"", p[i].name);
		}
		if (strcmp(norm, "*") == 0) {
			add_tag(s->any_tags, &s->n_any, p[i].tag);
			continue;
		}
		bool wild = norm[0] == '*';
		struct ent *e = wild ? &s->wild[s->n_wild++] : &s->exact[s->n_exact++];
		e->tag = p[i].tag;
		if ((e->name = strdup(wild ? norm + 2 : norm)) == NULL) {
			names_free(s);
			return wr_err_set(err, ENOMEM, "out of memory");
		}
	}
	if (s->n_exact) /* qsort's base must not be NULL, even for 0 entries */
		qsort(s->exact, s->n_exact, sizeof(struct ent), ent_cmp);
	if (s->n_wild)
		qsort(s->wild, s->n_wild, sizeof(struct ent), ent_cmp);
	*out = s;
	return 0;
}

struct wr_dns_names *wr_dns_names_ref(struct wr_dns_names *s)
{
	if (s != NULL)
		atomic_fetch_add(&s->refs, 1);
	return s;
}

void wr_dns_names_unref(struct wr_dns_names *s)
{
	if (s != NULL && atomic_fetch_sub(&s->refs, 1) == 1)
		names_free(s);
}

/* Every entry named `name` (the array is sorted by name, then tag). */
static void find_all(const struct ent *v, size_t n, const char *name, uint32_t *tags, size_t *nt)
{
	size_t lo = 0, hi = n;
	while (lo < hi) { /* first entry >= name */
		size_t mid = lo + (hi - lo) / 2;
		if (strcmp(v[mid].name, name) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < n && strcmp(v[lo].name, name) == 0; lo++)
		add_tag(tags, nt, v[lo].tag);
}

size_t wr_dns_names_match(const struct wr_dns_names *s, const char *name,
			  uint32_t tags[WR_DNS_MAX_TAGS])
{
	if (s == NULL)
		return 0;
	char q[256];
	size_t n = strnlen(name, 256);
	if (n == 256)
		return 0;
	if (n > 0 && name[n - 1] == '.')
		n--;
	if (n == 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)name[i];
		q[i] = (char)((c >= 'A' && c <= 'Z') ? c + 32 : c);
	}
	q[n] = 0;
	size_t nt = 0;
	for (size_t i = 0; i < s->n_any; i++)
		add_tag(tags, &nt, s->any_tags[i]);
	find_all(s->exact, s->n_exact, q, tags, &nt);
	/* "*.pypi.org" is stored as "pypi.org": try every proper suffix. */
	for (size_t i = 0; i < n; i++)
		if (q[i] == '.' && i + 1 < n)
			find_all(s->wild, s->n_wild, q + i + 1, tags, &nt);
	return nt;
}
