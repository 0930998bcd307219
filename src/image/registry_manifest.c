/* warren registry client: manifests (GET with content negotiation and
 * digest checks, PUT). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include "common/cleanup.h"
#include "image/registry_internal.h"

static const char *const default_accept[] = {WR_MT_OCI_MANIFEST, WR_MT_OCI_INDEX,
					     WR_MT_DOCKER_MANIFEST, WR_MT_DOCKER_LIST, NULL};

static char *media_type_of(const char *content_type, const char *body, size_t len)
{
	if (content_type) {
		size_t n = strcspn(content_type, "; \t");
		if (n > 0 && !(n == 16 && strncasecmp(content_type, "application/json", 16) == 0) &&
		    !(n == 10 && strncasecmp(content_type, "text/plain", 10) == 0))
			return strndup(content_type, n);
	}
	json_t *j = json_loadb(body, len, 0, NULL);
	const char *mt = json_string_value(json_object_get(j, "mediaType"));
	char *out = strdup(mt ? mt : "");
	json_decref(j);
	return out;
}

int wr_registry_manifest_get(struct wr_registry *reg, const struct wr_registry_ref *ref,
			     const char *const *accept, char **body, size_t *len, char **media_type,
			     char **digest, wr_err *err)
{
	if (body)
		*body = NULL;
	if (media_type)
		*media_type = NULL;
	if (digest)
		*digest = NULL;
	if (ref == NULL || ref->repo == NULL || (ref->tag == NULL && ref->digest == NULL))
		return wr_err_set(err, EINVAL, "manifest get: incomplete reference");
	if (ref->host && strcasecmp(ref->host, reg->host) != 0)
		return wr_err_set(err, EINVAL, "manifest get: reference names host %s, not %s",
				  ref->host, reg->host);
	if (reg_check_repo(ref->repo, err) < 0 ||
	    (ref->digest && reg_check_digest(ref->digest, err) < 0))
		return wr_err_wrap(err, "manifest get");
	if (ref->digest == NULL && reg_check_tag(ref->tag) < 0)
		return wr_err_set(err, EINVAL, "manifest get: bad tag '%s'", ref->tag);
	const char *reference = wr_registry_ref_reference(ref);
	_cleanup_free_ char *url = reg_url(reg, "%s/manifests/%s", ref->repo, reference);
	_cleanup_free_ char *acc = NULL, *scope = NULL;
	size_t alen = 16;
	if (accept == NULL)
		accept = default_accept;
	for (size_t i = 0; accept[i]; i++)
		alen += strlen(accept[i]) + 2;
	acc = malloc(alen);
	if (url == NULL || acc == NULL || asprintf(&scope, "repository:%s:pull", ref->repo) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	strcpy(acc, "Accept: ");
	for (size_t i = 0; accept[i]; i++) {
		if (i)
			strcat(acc, ", ");
		strcat(acc, accept[i]);
	}
	struct reg_call c;
	reg_call_init(&c, "GET", url);
	c.scope = scope;
	c.headers = curl_slist_append(NULL, acc);
	c.follow = true;
	c.idempotent = true;
	c.sink = SINK_MEM;
	c.mem_cap = WR_REGISTRY_MANIFEST_MAX;
	int r = reg_perform(reg, &c, err);
	curl_slist_free_all(c.headers);
	if (r == 0 && c.status != 200)
		r = reg_status_err(&c, err, "GET manifest");
	char d[72];
	if (r == 0) {
		reg_digest_buf(c.mem ? c.mem : "", c.mem_len, d);
		if (ref->digest && strcmp(d, ref->digest) != 0)
			r = wr_err_set(err, EBADMSG,
				       "manifest content hashes to %s, not the %s asked", d,
				       ref->digest);
		else if (c.docker_digest && strncmp(c.docker_digest, "sha256:", 7) == 0 &&
			 strcmp(c.docker_digest, d) != 0)
			r = wr_err_set(err, EBADMSG,
				       "manifest content hashes to %s, the registry says %s", d,
				       c.docker_digest);
	}
	if (r == 0) {
		if (c.mem == NULL && (c.mem = strdup("")) == NULL)
			r = wr_err_set(err, ENOMEM, "out of memory");
	}
	if (r == 0 && media_type) {
		*media_type = media_type_of(c.content_type, c.mem, c.mem_len);
		if (*media_type == NULL)
			r = wr_err_set(err, ENOMEM, "out of memory");
	}
	if (r == 0 && digest && (*digest = strdup(d)) == NULL)
		r = wr_err_set(err, ENOMEM, "out of memory");
	if (r < 0) {
		if (media_type) {
			free(*media_type);
			*media_type = NULL;
		}
		reg_call_free(&c);
		return wr_err_wrap(err, "%s/%s:%s", reg->host, ref->repo, reference);
	}
	if (len)
		*len = c.mem_len;
	if (body)
		*body = steal_ptr(&c.mem);
	reg_call_free(&c);
	return 0;
}

int wr_registry_manifest_put(struct wr_registry *reg, const char *repo, const char *reference,
			     const char *body, size_t len, const char *media_type,
			     char **digest_out, wr_err *err)
{
	if (digest_out)
		*digest_out = NULL;
	if (reg_check_repo(repo, err) < 0)
		return wr_err_wrap(err, "manifest put");
	if (reference == NULL ||
	    (strncmp(reference, "sha256:", 7) == 0 ? reg_check_digest(reference, NULL) < 0
						   : reg_check_tag(reference) < 0))
		return wr_err_set(err, EINVAL, "manifest put: bad tag or digest '%s'",
				  reference ? reference : "");
	if (body == NULL || len == 0 || len > WR_REGISTRY_MANIFEST_MAX)
		return wr_err_set(err, EINVAL, "manifest put: body must be 1 byte to 4 MiB");
	if (media_type == NULL || *media_type == 0 || strpbrk(media_type, "\r\n"))
		return wr_err_set(err, EINVAL, "manifest put: media type required");
	char d[72];
	reg_digest_buf(body, len, d);
	if (strncmp(reference, "sha256:", 7) == 0 && strcmp(reference, d) != 0)
		return wr_err_set(err, EINVAL, "manifest put: body hashes to %s, not %s", d,
				  reference);
	_cleanup_free_ char *url = reg_url(reg, "%s/manifests/%s", repo, reference);
	_cleanup_free_ char *ct = NULL, *scope = NULL;
	if (url == NULL || asprintf(&ct, "Content-Type: %s", media_type) < 0 ||
	    asprintf(&scope, "repository:%s:pull,push", repo) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	struct reg_call c;
	reg_call_init(&c, "PUT", url);
	c.scope = scope;
	c.headers = curl_slist_append(NULL, ct);
	c.idempotent = true;
	c.body = body;
	c.body_len = len;
	c.sink = SINK_NONE;
	int r = reg_perform(reg, &c, err);
	curl_slist_free_all(c.headers);
	if (r == 0 && c.status != 201 && c.status != 200)
		r = reg_status_err(&c, err, "PUT manifest");
	if (r == 0 && c.docker_digest && strncmp(c.docker_digest, "sha256:", 7) == 0 &&
	    strcmp(c.docker_digest, d) != 0)
		r = wr_err_set(err, EBADMSG, "registry stored the manifest as %s, expected %s",
			       c.docker_digest, d);
	reg_call_free(&c);
	if (r < 0)
		return wr_err_wrap(err, "%s/%s:%s", reg->host, repo, reference);
	if (digest_out && (*digest_out = strdup(d)) == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	return 0;
}
