/* warren registry client: blobs (HEAD, streamed GET with digest check and
 * resume, Range reads, monolithic and chunked uploads, cross-repo mount). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "image/registry_internal.h"

static void md_freep(EVP_MD_CTX **p)
{
	EVP_MD_CTX_free(*p);
}
#define _cleanup_md_ _cleanup_(md_freep)

static int check_blob_args(const char *repo, const char *digest, const char *what, wr_err *err)
{
	if (reg_check_repo(repo, err) < 0 || reg_check_digest(digest, err) < 0)
		return wr_err_wrap(err, "%s", what);
	return 0;
}

int wr_registry_blob_head(struct wr_registry *reg, const char *repo, const char *digest,
			  uint64_t *size, wr_err *err)
{
	if (check_blob_args(repo, digest, "blob head", err) < 0)
		return -EINVAL;
	_cleanup_free_ char *url = reg_url(reg, "%s/blobs/%s", repo, digest);
	_cleanup_free_ char *scope = NULL;
	if (url == NULL || asprintf(&scope, "repository:%s:pull", repo) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	struct reg_call c;
	reg_call_init(&c, "HEAD", url);
	c.scope = scope;
	c.idempotent = true;
	/* not followed: a storage backend's presigned URL may be for GET only */
	int r = reg_perform(reg, &c, err);
	if (r == 0) {
		if (c.status == 200 || (c.status >= 300 && c.status < 400)) {
			if (size)
				*size = c.content_length >= 0 ? (uint64_t)c.content_length : 0;
		} else {
			r = reg_status_err(&c, err, "HEAD blob");
		}
	}
	reg_call_free(&c);
	return r < 0 ? wr_err_wrap(err, "%s/%s@%s", reg->host, repo, digest) : 0;
}

int wr_registry_blob_exists(struct wr_registry *reg, const char *repo, const char *digest,
			    wr_err *err)
{
	_cleanup_err_ wr_err e = NULL;
	int r = wr_registry_blob_head(reg, repo, digest, NULL, &e);
	if (r == 0)
		return 1;
	if (wr_err_code(e) == ENOENT)
		return 0;
	*err = steal_ptr(&e);
	return r;
}

/* "bytes 100-199/1000" (or "100-199/1000") -> start */
static int range_start(const char *cr, uint64_t *start)
{
	if (cr == NULL)
		return -1;
	if (strncasecmp(cr, "bytes", 5) == 0)
		cr += 5;
	while (*cr == ' ' || *cr == '=')
		cr++;
	char *end;
	unsigned long long v = strtoull(cr, &end, 10);
	if (end == cr || *end != '-')
		return -1;
	*start = v;
	return 0;
}

int wr_registry_blob_get(struct wr_registry *reg, const char *repo, const char *digest,
			 int64_t expect_size, int fd, uint64_t *written, wr_err *err)
{
	if (written)
		*written = 0;
	if (check_blob_args(repo, digest, "blob get", err) < 0)
		return -EINVAL;
	if (fd < 0)
		return wr_err_set(err, EBADF, "blob get: no file to write to");
	_cleanup_free_ char *url = reg_url(reg, "%s/blobs/%s", repo, digest);
	_cleanup_free_ char *scope = NULL;
	_cleanup_md_ EVP_MD_CTX *md = EVP_MD_CTX_new();
	if (url == NULL || md == NULL || asprintf(&scope, "repository:%s:pull", repo) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	EVP_DigestInit_ex(md, EVP_sha256(), NULL);
	struct reg_call c;
	reg_call_init(&c, "GET", url);
	c.scope = scope;
	c.follow = true;
	c.idempotent = true;
	c.sink = SINK_FD;
	c.sink_fd = fd;
	c.sink_hash = md;
	if (expect_size >= 0)
		c.sink_cap = (uint64_t)expect_size;
	/* A transfer that breaks off after some bytes resumes with a Range
	 * request for the rest; the hash simply continues. */
	unsigned resumes = 0;
	int r;
	for (;;) {
		_cleanup_err_ wr_err e = NULL;
		uint64_t before = c.sink_n;
		r = reg_perform(reg, &c, &e);
		if (r == 0 && c.status != (before ? 206 : 200))
			r = reg_status_err(&c, &e, "GET blob");
		if (r == 0 && before) {
			uint64_t st;
			if (range_start(c.content_range, &st) < 0 || st != before)
				r = wr_err_set(&e, EBADMSG,
					       "GET blob: resumed at the wrong offset");
		}
		if (r == 0)
			break;
		int code = wr_err_code(e);
		bool transient =
		    code == ETIMEDOUT || code == EIO || code == ECONNRESET || code == ECONNREFUSED;
		if (c.sink_n > before && transient && resumes < reg->retries + 2 && !c.overflow &&
		    !c.sink_errno && c.status == (before ? 206 : 200)) {
			resumes++;
			char rh[64];
			snprintf(rh, sizeof(rh), "Range: bytes=%" PRIu64 "-", c.sink_n);
			curl_slist_free_all(c.headers);
			c.headers = curl_slist_append(NULL, rh);
			c.need_partial = true;
			continue;
		}
		*err = steal_ptr(&e);
		break;
	}
	curl_slist_free_all(c.headers);
	c.headers = NULL;
	char got[72];
	if (r == 0) {
		reg_digest_final(md, got);
		if (expect_size >= 0 && c.sink_n != (uint64_t)expect_size)
			r = wr_err_set(err, EBADMSG,
				       "blob is %" PRIu64 " bytes, the manifest says %" PRId64,
				       c.sink_n, expect_size);
		else if (strcmp(got, digest) != 0)
			r = wr_err_set(err, EBADMSG, "blob content hashes to %s", got);
	}
	if (written)
		*written = c.sink_n;
	reg_call_free(&c);
	return r < 0 ? wr_err_wrap(err, "%s/%s@%s", reg->host, repo, digest) : 0;
}

int wr_registry_blob_range(struct wr_registry *reg, const char *repo, const char *digest,
			   uint64_t off, size_t len, void *buf, size_t *got, wr_err *err)
{
	*got = 0;
	if (check_blob_args(repo, digest, "blob range", err) < 0)
		return -EINVAL;
	if (len == 0)
		return 0;
	if (buf == NULL || off > INT64_MAX || len > INT64_MAX - off)
		return wr_err_set(err, EINVAL, "blob range: bad buffer or range");
	_cleanup_free_ char *url = reg_url(reg, "%s/blobs/%s", repo, digest);
	_cleanup_free_ char *scope = NULL;
	if (url == NULL || asprintf(&scope, "repository:%s:pull", repo) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	char rh[80];
	snprintf(rh, sizeof(rh), "Range: bytes=%" PRIu64 "-%" PRIu64, off, off + len - 1);
	struct reg_call c;
	reg_call_init(&c, "GET", url);
	c.scope = scope;
	c.headers = curl_slist_append(NULL, rh);
	c.follow = true;
	c.idempotent = true;
	c.need_partial = true;
	c.sink = SINK_BUF;
	c.buf = buf;
	c.buf_len = len;
	c.deadline_ns = reg_now_ns() + (uint64_t)reg->range_timeout_ms * 1000000ull;
	int r = reg_perform(reg, &c, err);
	curl_slist_free_all(c.headers);
	if (r == 0) {
		uint64_t st;
		if (c.status == 416) {
			*got = 0; /* at or past the end */
		} else if (c.status == 200) {
			r = wr_err_set(err, ENOTSUP,
				       "the registry ignored the Range request (HTTP 200)");
		} else if (c.status != 206) {
			r = reg_status_err(&c, err, "GET blob range");
		} else if (range_start(c.content_range, &st) < 0 || st != off) {
			r = wr_err_set(
			    err, EBADMSG, "registry answered Range %" PRIu64 "+%zu with '%s'", off,
			    len, c.content_range ? c.content_range : "(no Content-Range)");
		} else {
			*got = (size_t)c.sink_n;
		}
	}
	reg_call_free(&c);
	return r < 0 ? wr_err_wrap(err, "%s/%s@%s", reg->host, repo, digest) : 0;
}

/* ---- uploads ----------------------------------------------------------- */

static int upload_call(struct wr_registry *reg, struct reg_call *c, const char *scope,
		       const char *what, long want, wr_err *err)
{
	c->scope = scope;
	int r = reg_perform(reg, c, err);
	if (r == 0 && c->status != want)
		r = reg_status_err(c, err, what);
	return r;
}

/* Cancel an upload session (best effort: the registry expires it anyway). */
static void upload_cancel(struct wr_registry *reg, const char *url, const char *scope)
{
	_cleanup_free_ char *u = strdup(url);
	if (u == NULL)
		return;
	struct reg_call c;
	reg_call_init(&c, "DELETE", u);
	c.scope = scope;
	_cleanup_err_ wr_err e = NULL;
	reg_perform(reg, &c, &e);
	reg_call_free(&c);
}

static char *next_location(struct wr_registry *reg, struct reg_call *c, wr_err *err)
{
	if (c->location == NULL) {
		wr_err_set(err, EBADMSG, "registry gave no upload Location");
		return NULL;
	}
	char *u = reg_resolve(reg, c->location);
	if (u == NULL)
		wr_err_set(err, EBADMSG, "registry gave a bad upload Location");
	return u;
}

int wr_registry_blob_put(struct wr_registry *reg, const char *repo, int fd, uint64_t size,
			 const char *digest, size_t chunk_size, const char *mount_from, wr_err *err)
{
	if (check_blob_args(repo, digest, "blob put", err) < 0)
		return -EINVAL;
	if (mount_from && reg_check_repo(mount_from, err) < 0)
		return wr_err_wrap(err, "blob put: mount_from");
	if (fd < 0)
		return wr_err_set(err, EBADF, "blob put: no file to read");
	_cleanup_free_ char *scope = NULL, *url = NULL, *upload = NULL;
	int r =
	    mount_from && strcmp(mount_from, repo) != 0
		? asprintf(&scope, "repository:%s:pull,push repository:%s:pull", repo, mount_from)
		: asprintf(&scope, "repository:%s:pull,push", repo);
	if (r < 0 || (url = reg_url(reg, "%s/blobs/uploads/", repo)) == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	if (mount_from && strcmp(mount_from, repo) != 0) {
		char *u = reg_url_add_query(url, "mount", digest);
		char *u2 = u ? reg_url_add_query(u, "from", mount_from) : NULL;
		free(u);
		free(url);
		if ((url = u2) == NULL)
			return wr_err_set(err, ENOMEM, "out of memory");
	}
	/* open the session (or mount) */
	struct reg_call c;
	reg_call_init(&c, "POST", url);
	c.scope = scope;
	r = reg_perform(reg, &c, err);
	if (r == 0 && c.status == 201 && mount_from) {
		reg_call_free(&c);
		return 0; /* mounted from the other repository: nothing to send */
	}
	if (r == 0 && c.status != 202)
		r = reg_status_err(&c, err, "POST blob upload");
	if (r == 0 && (upload = next_location(reg, &c, err)) == NULL)
		r = -1;
	reg_call_free(&c);
	if (r < 0)
		return wr_err_wrap(err, "%s/%s@%s", reg->host, repo, digest);

	_cleanup_md_ EVP_MD_CTX *md = EVP_MD_CTX_new();
	_cleanup_md_ EVP_MD_CTX *work = EVP_MD_CTX_new();
	if (md == NULL || work == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	EVP_DigestInit_ex(md, EVP_sha256(), NULL);
	struct curl_slist *ct = curl_slist_append(NULL, "Content-Type: application/octet-stream");
	char sum[72];
	if (chunk_size == 0) {
		/* monolithic: the whole body on the closing PUT */
		_cleanup_free_ char *put = reg_url_add_query(upload, "digest", digest);
		if (put == NULL) {
			curl_slist_free_all(ct);
			return wr_err_set(err, ENOMEM, "out of memory");
		}
		reg_call_init(&c, "PUT", put);
		c.headers = ct;
		c.body_fd = fd;
		c.body_size = size;
		c.body_hash = md;
		r = upload_call(reg, &c, scope, "PUT blob", 201, err);
		if (r < 0 && c.status == 0 && c.body_pos < size && c.sink_errno)
			wr_err_wrap(err, "reading the blob");
		reg_call_free(&c);
		if (r == 0) {
			reg_digest_final(md, sum);
			if (strcmp(sum, digest) != 0)
				r = wr_err_set(err, EBADMSG, "uploaded content hashes to %s", sum);
		}
	} else {
		uint64_t off = 0;
		while (r == 0 && off < size) {
			uint64_t n = size - off < chunk_size ? size - off : chunk_size;
			char cr[80];
			snprintf(cr, sizeof(cr), "Content-Range: %" PRIu64 "-%" PRIu64, off,
				 off + n - 1);
			struct curl_slist *hl =
			    curl_slist_append(NULL, "Content-Type: application/octet-stream");
			hl = curl_slist_append(hl, cr);
			reg_call_init(&c, "PATCH", upload);
			c.headers = hl;
			c.body_fd = fd;
			c.body_off = off;
			c.body_size = n;
			c.body_hash = work;
			c.body_hash_start = md;
			r = upload_call(reg, &c, scope, "PATCH blob chunk", 202, err);
			curl_slist_free_all(hl);
			char *next = r == 0 ? next_location(reg, &c, err) : NULL;
			if (r == 0 && next == NULL)
				r = -1;
			reg_call_free(&c);
			if (r < 0)
				break;
			free(upload);
			upload = next;
			EVP_MD_CTX_copy_ex(md, work);
			off += n;
		}
		if (r == 0) {
			EVP_MD_CTX_copy_ex(work, md);
			reg_digest_final(work, sum);
			if (strcmp(sum, digest) != 0)
				r = wr_err_set(err, EBADMSG,
					       "content hashes to %s; upload cancelled", sum);
		}
		if (r == 0) {
			_cleanup_free_ char *put = reg_url_add_query(upload, "digest", digest);
			if (put == NULL) {
				r = wr_err_set(err, ENOMEM, "out of memory");
			} else {
				reg_call_init(&c, "PUT", put);
				c.headers = ct;
				c.idempotent = true;
				r = upload_call(reg, &c, scope, "PUT blob (close upload)", 201,
						err);
				reg_call_free(&c);
			}
		}
		if (r < 0)
			upload_cancel(reg, upload, scope);
	}
	curl_slist_free_all(ct);
	return r < 0 ? wr_err_wrap(err, "%s/%s@%s", reg->host, repo, digest) : 0;
}
