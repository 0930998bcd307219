/* Image references, formats and the OCI config's runtime defaults. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "image/store_internal.h"

bool wri_is_digest(const char *s)
{
	return s && strncmp(s, "sha256:", 7) == 0 && strlen(s) == 71 &&
	       strspn(s + 7, "0123456789abcdef") == 64;
}

/* One path component of a repository name: [a-z0-9]+ joined by one of
 * '.', '_', '__', '-'+ (OCI distribution grammar). */
static bool component_ok(const char *c, size_t n)
{
	if (n == 0 || !isalnum((unsigned char)c[0]) || !isalnum((unsigned char)c[n - 1]))
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)c[i];
		if (isupper(ch))
			return false;
		if (!isalnum(ch) && ch != '.' && ch != '_' && ch != '-')
			return false;
		if (ch == '.' && (c[i + 1] == '.'))
			return false;
	}
	return true;
}

/* The registry host part of a name may hold uppercase, ':port'. */
static bool host_ok(const char *c, size_t n)
{
	if (n == 0)
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)c[i];
		if (!isalnum(ch) && ch != '.' && ch != '-' && ch != ':')
			return false;
	}
	return true;
}

int wri_ref_canon(const char *ref, char **out, wr_err *err)
{
	if (ref == NULL || ref[0] == '\0')
		return wr_err_field(err, "ref", "ref: must not be empty");
	size_t len = strlen(ref);
	if (len > 255)
		return wr_err_field(err, "ref", "ref: longer than 255 characters");
	if (strchr(ref, '@') || strncmp(ref, "sha256:", 7) == 0)
		return wr_err_field(err, "ref",
				    "ref '%s': a name[:tag] is needed here, not a digest", ref);
	const char *slash = strrchr(ref, '/');
	const char *colon = strrchr(ref, ':');
	if (colon && slash && colon < slash)
		colon = NULL; /* a registry port, not a tag */
	size_t nlen = colon ? (size_t)(colon - ref) : len;
	const char *tag = colon ? colon + 1 : "latest";
	size_t tl = strlen(tag);
	if (tl == 0 || tl > 128 || !(isalnum((unsigned char)tag[0]) || tag[0] == '_'))
		return wr_err_field(err, "ref",
				    "ref '%s': a tag is 1-128 of [A-Za-z0-9_.-], not "
				    "starting with '.' or '-'",
				    ref);
	for (size_t i = 0; i < tl; i++)
		if (!isalnum((unsigned char)tag[i]) && !strchr("_.-", tag[i]))
			return wr_err_field(err, "ref",
					    "ref '%s': a tag is 1-128 of [A-Za-z0-9_.-], not "
					    "starting with '.' or '-'",
					    ref);
	/* Components between slashes; the first may be a registry host. */
	size_t start = 0;
	bool first = true;
	for (size_t i = 0; i <= nlen; i++) {
		if (i < nlen && ref[i] != '/')
			continue;
		size_t n = i - start;
		bool host = first && i < nlen &&
			    (memchr(ref + start, '.', n) || memchr(ref + start, ':', n) ||
			     (n == 9 && memcmp(ref + start, "localhost", 9) == 0));
		if (host ? !host_ok(ref + start, n) : !component_ok(ref + start, n))
			return wr_err_field(err, "ref",
					    "ref '%s': a name is lowercase [a-z0-9] components "
					    "joined by '.', '_' or '-', separated by '/'",
					    ref);
		first = false;
		start = i + 1;
	}
	if (asprintf(out, "%.*s:%s", (int)nlen, ref, tag) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	return 0;
}

static const char *const fmt_names[] = {
    [WR_IMAGE_FMT_AUTO] = "auto",
    [WR_IMAGE_FMT_DIR] = "dir",
    [WR_IMAGE_FMT_TAR] = "tar",
    [WR_IMAGE_FMT_OCI_LAYOUT] = "oci-layout",
    [WR_IMAGE_FMT_OCI_ARCHIVE] = "oci-archive",
    [WR_IMAGE_FMT_DOCKER_ARCHIVE] = "docker-archive",
    [WR_IMAGE_FMT_VM_DISK] = "vm-disk",
};

const char *wr_image_kind_name(enum wr_image_kind k)
{
	return k == WR_IMAGE_KIND_VM_DISK ? "vm-disk" : "rootfs";
}

int wr_image_format_parse(const char *s, enum wr_image_format *out)
{
	if (s == NULL || s[0] == '\0') {
		*out = WR_IMAGE_FMT_AUTO;
		return 0;
	}
	for (size_t i = 0; i < WR_ARRAY_SIZE(fmt_names); i++)
		if (strcmp(s, fmt_names[i]) == 0) {
			*out = (enum wr_image_format)i;
			return 0;
		}
	return -EINVAL;
}

const char *wr_image_format_name(enum wr_image_format f)
{
	return (size_t)f < WR_ARRAY_SIZE(fmt_names) ? fmt_names[f] : "?";
}

const char *wr_image_gc_reason_name(enum wr_image_gc_reason r)
{
	return r == WR_IMAGE_GC_UNTAGGED ? "untagged" : "quota";
}

void wri_config_clear(struct wr_image_config *c)
{
	for (size_t i = 0; i < c->n_env; i++)
		free(c->env[i]);
	for (size_t i = 0; i < c->n_entrypoint; i++)
		free(c->entrypoint[i]);
	for (size_t i = 0; i < c->n_cmd; i++)
		free(c->cmd[i]);
	for (size_t i = 0; i < c->n_labels; i++)
		free(c->labels[i]);
	free(c->labels);
	free(c->env);
	free(c->entrypoint);
	free(c->cmd);
	free(c->workdir);
	free(c->user);
	memset(c, 0, sizeof(*c));
}

static int strv(json_t *a, const char *what, char ***out, size_t *n, wr_err *err)
{
	if (a == NULL || json_is_null(a))
		return 0;
	if (!json_is_array(a))
		return wr_err_set(err, EINVAL, "image config: %s: not an array", what);
	*out = calloc(json_array_size(a) + 1, sizeof(char *));
	if (*out == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	size_t i;
	json_t *e;
	json_array_foreach(a, i, e)
	{
		if (!json_is_string(e))
			return wr_err_set(err, EINVAL, "image config: %s[%zu]: not a string", what,
					  i);
		if (((*out)[(*n)++] = strdup(json_string_value(e))) == NULL)
			return wr_err_set(err, ENOMEM, "out of memory");
	}
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

const char *wr_image_label(const struct wr_image_config *c, const char *key)
{
	size_t kl = strlen(key);
	for (size_t i = 0; i < c->n_labels; i++)
		if (strncmp(c->labels[i], key, kl) == 0 && c->labels[i][kl] == '=')
			return c->labels[i] + kl + 1;
	return NULL;
}

/* Accepts both the stored form ({Env, WorkingDir, User, Entrypoint, Cmd})
 * and a whole OCI image config ({"config": {...}, ...}). */
int wri_config_from_json(json_t *j, struct wr_image_config *c, wr_err *err)
{
	memset(c, 0, sizeof(*c));
	if (j == NULL || json_is_null(j))
		return 0;
	if (!json_is_object(j))
		return wr_err_set(err, EINVAL, "image config: not an object");
	json_t *inner = json_object_get(j, "config");
	if (json_is_object(inner))
		j = inner;
	int r;
	if ((r = strv(json_object_get(j, "Env"), "Env", &c->env, &c->n_env, err)) < 0 ||
	    (r = strv(json_object_get(j, "Entrypoint"), "Entrypoint", &c->entrypoint,
		      &c->n_entrypoint, err)) < 0 ||
	    (r = strv(json_object_get(j, "Cmd"), "Cmd", &c->cmd, &c->n_cmd, err)) < 0) {
		wri_config_clear(c);
		return r;
	}
	for (size_t i = 0; i < c->n_env; i++)
		if (strchr(c->env[i], '=') == NULL || c->env[i][0] == '=') {
			r = wr_err_set(err, EINVAL, "image config: Env[%zu] '%s': not KEY=VALUE", i,
				       c->env[i]);
			wri_config_clear(c);
			return r;
		}
	json_t *lb = json_object_get(j, "Labels");
	if (lb && !json_is_null(lb)) {
		if (!json_is_object(lb)) {
			wri_config_clear(c);
			return wr_err_set(err, EINVAL, "image config: Labels: not an object");
		}
		if ((c->labels = calloc(json_object_size(lb) + 1, sizeof(char *))) == NULL) {
			wri_config_clear(c);
			return wr_err_set(err, ENOMEM, "out of memory");
		}
		/* jansson iterates in insertion order; sort for a stable form */
		const char **keys = calloc(json_object_size(lb) + 1, sizeof(char *));
		size_t nk = 0;
		const char *k;
		json_t *v;
		json_object_foreach(lb, k, v)
		{
			if (keys && json_is_string(v))
				keys[nk++] = k;
		}
		qsort(keys, nk, sizeof(*keys), cmp_str);
		for (size_t i = 0; keys && i < nk; i++)
			if (asprintf(&c->labels[c->n_labels], "%s=%s", keys[i],
				     json_string_value(json_object_get(lb, keys[i]))) >= 0)
				c->n_labels++;
		free(keys);
	}
	const char *wd = json_string_value(json_object_get(j, "WorkingDir"));
	const char *user = json_string_value(json_object_get(j, "User"));
	if (wd && wd[0] && wd[0] != '/') {
		wri_config_clear(c);
		return wr_err_set(err, EINVAL, "image config: WorkingDir '%s': not absolute", wd);
	}
	if ((wd && wd[0] && (c->workdir = strdup(wd)) == NULL) ||
	    (user && user[0] && (c->user = strdup(user)) == NULL)) {
		wri_config_clear(c);
		return wr_err_set(err, ENOMEM, "out of memory");
	}
	return 0;
}
