/* Registry references and the validation of names, tags and digests.
 * Every name that ends up in a URL passes through here first, so no user
 * string can add a path segment, a query or another host. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/sha.h>

#include "common/cleanup.h"
#include "image/registry_internal.h"

bool reg_host_is_loopback(const char *host)
{
	/* host may carry a port: compare the name part only */
	char name[256];
	size_t n;
	if (host[0] == '[') {
		const char *e = strchr(host, ']');
		if (e == NULL)
			return false;
		n = (size_t)(e - host - 1);
		if (n >= sizeof(name))
			return false;
		memcpy(name, host + 1, n);
	} else {
		const char *c = strchr(host, ':');
		n = c ? (size_t)(c - host) : strlen(host);
		if (n >= sizeof(name))
			return false;
		memcpy(name, host, n);
	}
	name[n] = 0;
	if (strcasecmp(name, "localhost") == 0 || strcmp(name, "::1") == 0)
		return true;
	unsigned a, b, c, d;
	char tail;
	if (sscanf(name, "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) == 4 && a == 127 && b < 256 &&
	    c < 256 && d < 256)
		return true;
	return false;
}

static bool is_lower_alnum(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)* */
static bool valid_component(const char *s, size_t n)
{
	size_t i = 0;
	if (n == 0 || !is_lower_alnum(s[0]) || !is_lower_alnum(s[n - 1]))
		return false;
	while (i < n) {
		if (is_lower_alnum(s[i])) {
			i++;
			continue;
		}
		size_t j = i;
		if (s[i] == '.') {
			j = i + 1;
		} else if (s[i] == '_') {
			j = i + 1;
			if (j < n && s[j] == '_')
				j++;
		} else if (s[i] == '-') {
			while (j < n && s[j] == '-')
				j++;
		} else {
			return false;
		}
		if (j >= n || !is_lower_alnum(s[j]))
			return false;
		i = j;
	}
	return true;
}

int reg_check_repo(const char *repo, wr_err *err)
{
	size_t n = repo ? strlen(repo) : 0;
	if (n == 0 || n > 255)
		return wr_err_set(err, EINVAL, "repository name must be 1 to 255 characters");
	const char *p = repo;
	while (1) {
		const char *slash = strchr(p, '/');
		size_t len = slash ? (size_t)(slash - p) : strlen(p);
		if (!valid_component(p, len))
			return wr_err_set(
			    err, EINVAL,
			    "repository '%s': components are lowercase letters and digits "
			    "separated by '.', '_', '__' or '-'",
			    repo);
		if (slash == NULL)
			break;
		p = slash + 1;
	}
	return 0;
}

int reg_check_digest(const char *digest, wr_err *err)
{
	if (digest == NULL || strncmp(digest, "sha256:", 7) != 0)
		return wr_err_set(err, EINVAL,
				  "digest '%s': only sha256:<64 hex> digests are supported",
				  digest ? digest : "");
	const char *h = digest + 7;
	size_t i;
	for (i = 0; h[i]; i++)
		if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f')))
			break;
	if (i != 64 || h[i] != 0)
		return wr_err_set(err, EINVAL,
				  "digest '%s': sha256 needs exactly 64 lowercase hex characters",
				  digest);
	return 0;
}

int reg_check_tag(const char *tag)
{
	size_t n = strlen(tag);
	if (n == 0 || n > 128)
		return -EINVAL;
	if (!(isalnum((unsigned char)tag[0]) || tag[0] == '_'))
		return -EINVAL;
	for (size_t i = 1; i < n; i++)
		if (!(isalnum((unsigned char)tag[i]) || strchr("_.-", tag[i])))
			return -EINVAL;
	return 0;
}

static int check_host(const char *h, size_t n)
{
	if (n == 0 || n > 255)
		return -EINVAL;
	size_t i = 0;
	if (h[0] == '[') {
		for (i = 1; i < n && h[i] != ']'; i++)
			if (!(isxdigit((unsigned char)h[i]) || h[i] == ':' || h[i] == '.'))
				return -EINVAL;
		if (i >= n || i == 1)
			return -EINVAL;
		i++;
	} else {
		for (; i < n && h[i] != ':'; i++)
			if (!(isalnum((unsigned char)h[i]) || h[i] == '.' || h[i] == '-'))
				return -EINVAL;
		if (i == 0 || h[0] == '-' || h[0] == '.')
			return -EINVAL;
	}
	if (i == n)
		return 0;
	if (h[i] != ':' || i + 1 == n || n - i - 1 > 5)
		return -EINVAL;
	unsigned port = 0;
	for (i++; i < n; i++) {
		if (!isdigit((unsigned char)h[i]))
			return -EINVAL;
		port = port * 10 + (unsigned)(h[i] - '0');
	}
	return port >= 1 && port <= 65535 ? 0 : -EINVAL;
}

static bool first_is_host(const char *s, size_t n)
{
	if (n == 9 && strncmp(s, "localhost", 9) == 0)
		return true;
	return memchr(s, '.', n) != NULL || memchr(s, ':', n) != NULL || (n > 0 && s[0] == '[');
}

bool wr_registry_ref_is_remote(const char *s)
{
	const char *slash = s ? strchr(s, '/') : NULL;
	return slash != NULL && first_is_host(s, (size_t)(slash - s));
}

void wr_registry_ref_free(struct wr_registry_ref *ref)
{
	if (ref == NULL)
		return;
	free(ref->host);
	free(ref->repo);
	free(ref->tag);
	free(ref->digest);
	memset(ref, 0, sizeof(*ref));
}

int wr_registry_ref_parse(const char *s, struct wr_registry_ref *out, wr_err *err)
{
	memset(out, 0, sizeof(*out));
	if (s == NULL || *s == 0)
		return wr_err_set(err, EINVAL, "empty registry reference");
	if (strlen(s) > 1024)
		return wr_err_set(err, EINVAL, "registry reference too long");
	if (strstr(s, "://"))
		return wr_err_set(err, EINVAL,
				  "registry reference '%s': give host/repo[:tag], without a scheme",
				  s);
	const char *slash = strchr(s, '/');
	if (!wr_registry_ref_is_remote(s))
		return wr_err_set(err, EINVAL,
				  "'%s' is not a registry reference: it must start with a registry "
				  "host (containing '.' or ':', or 'localhost'), as in "
				  "127.0.0.1:5000/team/python:3.12",
				  s);
	struct wr_registry_ref r = {0};
	r.host = strndup(s, (size_t)(slash - s));
	_cleanup_free_ char *rest = strdup(slash + 1);
	if (r.host == NULL || rest == NULL) {
		wr_registry_ref_free(&r);
		return wr_err_set(err, ENOMEM, "out of memory");
	}
	if (check_host(r.host, strlen(r.host)) < 0) {
		wr_err_set(err, EINVAL, "registry reference '%s': bad host '%s'", s, r.host);
		wr_registry_ref_free(&r);
		return -EINVAL;
	}
	char *at = strchr(rest, '@');
	if (at) {
		*at = 0;
		if (reg_check_digest(at + 1, err) < 0) {
			wr_err_wrap(err, "registry reference '%s'", s);
			wr_registry_ref_free(&r);
			return -EINVAL;
		}
		r.digest = strdup(at + 1);
	}
	char *lastslash = strrchr(rest, '/');
	char *colon = strchr(lastslash ? lastslash : rest, ':');
	if (colon) {
		*colon = 0;
		if (reg_check_tag(colon + 1) < 0) {
			wr_err_set(
			    err, EINVAL,
			    "registry reference '%s': tag '%s' must be 1 to 128 of [A-Za-z0-9_.-], "
			    "not starting with '.' or '-'",
			    s, colon + 1);
			wr_registry_ref_free(&r);
			return -EINVAL;
		}
		r.tag = strdup(colon + 1);
	} else if (r.digest == NULL) {
		r.tag = strdup("latest");
	}
	if (strcmp(r.host, "docker.io") == 0 && strchr(rest, '/') == NULL) {
		if (asprintf(&r.repo, "library/%s", rest) < 0)
			r.repo = NULL;
	} else {
		r.repo = strdup(rest);
	}
	if (r.repo == NULL || (r.tag == NULL && r.digest == NULL)) {
		wr_registry_ref_free(&r);
		return wr_err_set(err, ENOMEM, "out of memory");
	}
	if (reg_check_repo(r.repo, err) < 0) {
		wr_err_wrap(err, "registry reference '%s'", s);
		wr_registry_ref_free(&r);
		return -EINVAL;
	}
	*out = r;
	return 0;
}

char *wr_registry_ref_format(const struct wr_registry_ref *ref)
{
	char *s = NULL;
	if (asprintf(&s, "%s/%s%s%s%s%s", ref->host, ref->repo, ref->tag ? ":" : "",
		     ref->tag ? ref->tag : "", ref->digest ? "@" : "",
		     ref->digest ? ref->digest : "") < 0)
		return NULL;
	return s;
}

const char *wr_registry_ref_reference(const struct wr_registry_ref *ref)
{
	return ref->digest ? ref->digest : ref->tag;
}

void reg_digest_final(EVP_MD_CTX *ctx, char out[72])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;
	EVP_DigestFinal_ex(ctx, md, &n);
	memcpy(out, "sha256:", 7);
	for (unsigned i = 0; i < n && i < 32; i++)
		snprintf(out + 7 + 2 * i, 3, "%02x", md[i]);
	out[71] = 0;
}

void reg_digest_buf(const void *p, size_t len, char out[72])
{
	unsigned char md[SHA256_DIGEST_LENGTH];
	SHA256(p, len, md);
	memcpy(out, "sha256:", 7);
	for (unsigned i = 0; i < SHA256_DIGEST_LENGTH; i++)
		snprintf(out + 7 + 2 * i, 3, "%02x", md[i]);
	out[71] = 0;
}
