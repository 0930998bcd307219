/* warren: a client of OCI distribution registries (Docker Registry v2 API).
 *
 * One struct wr_registry talks to one registry host. It owns a pool of
 * libcurl easy handles sharing one curl share object (DNS cache, live
 * connections, TLS sessions), a cache of bearer tokens per scope, and
 * counters. Every function below is thread-safe on the same handle: the
 * lazy-loading FUSE daemon calls wr_registry_blob_range from many threads
 * at once. wr_registry_close must not race with calls in flight.
 *
 * Time bounds: no call waits forever. Connecting is bounded by
 * connect_timeout_ms; a transfer that moves fewer than low_speed_bytes per
 * second for low_speed_time_s seconds is aborted (ETIMEDOUT); a Range read
 * is additionally bounded as a whole by range_timeout_ms. So a dead or
 * stalled registry yields an error within a bounded time, never a hang.
 *
 * Transport: https, verified against the system CAs (or ca_file). When the
 * host is loopback (localhost, 127.0.0.0/8, ::1) or opts->insecure is set,
 * the first request probes GET /v2/ over https and, when the TLS handshake
 * fails, over plain http, which is then used for the rest of the handle's
 * life (Docker's "insecure registry" behaviour; one probe however many
 * threads start at once). opts->insecure also turns TLS verification off. Redirects (blob storage
 * backends) are followed; credentials are never sent to a redirect target
 * on another host.
 *
 * Auth: anonymous, basic (username/password, or found for the host in a
 * docker-style auth file), a fixed bearer token, and the token dance: a 401
 * with `WWW-Authenticate: Bearer realm=..,service=..,scope=..` makes the
 * client GET the realm (with basic credentials when it has them), cache the
 * token per scope until it expires, and retry once. Credentials only ever
 * travel to the registry host and its token realm; nothing here reaches a
 * sandbox.
 *
 * Errors follow src/common/error.h. errno values: ENOENT (manifest or blob
 * unknown, HTTP 404), EACCES (401/403 after auth), ETIMEDOUT (time bounds
 * above), ECONNREFUSED/EHOSTUNREACH (cannot connect), EBADMSG (digest or
 * size mismatch, malformed response), ENOTSUP (registry ignored a Range
 * request), EFBIG (response larger than the declared or allowed size),
 * EINVAL (bad argument), EIO (other HTTP or transport failure; the message
 * carries the status and the registry's error codes).
 */
#ifndef WARREN_IMAGE_REGISTRY_H
#define WARREN_IMAGE_REGISTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

/* ---- references ------------------------------------------------------- */

/* "host[:port]/repo/path[:tag][@sha256:<64 hex>]". Parsed form. */
struct wr_registry_ref {
	char *host; /* as written: "127.0.0.1:5000", "ghcr.io", "docker.io" */
	char *repo; /* "team/python"; for docker.io a one-part name gets "library/" */
	char *tag;  /* "latest" when neither tag nor digest is given; NULL when only a digest is */
	char *digest; /* "sha256:<64 lowercase hex>" or NULL */
};

/* True when s names a registry reference: its first '/'-separated component
 * contains '.' or ':' or is "localhost" (Docker's rule). "python:3.12" and
 * "team/python" are local names; "localhost/x", "127.0.0.1:5000/x" and
 * "ghcr.io/a/b:1" are remote. */
bool wr_registry_ref_is_remote(const char *s);

/* Parse a registry reference. Validates host (no scheme, no userinfo),
 * repository components ([a-z0-9]+ separated by '.', '_', '__', '-'+, at
 * most 255 chars in all), tag ([A-Za-z0-9_][A-Za-z0-9_.-]{0,127}) and digest
 * (sha256 with 64 lowercase hex). The default tag is "latest". *out is
 * zeroed first and owns its strings; free with wr_registry_ref_free. */
int wr_registry_ref_parse(const char *s, struct wr_registry_ref *out, wr_err *err);
void wr_registry_ref_free(struct wr_registry_ref *ref);
/* "host/repo:tag@digest" (parts present only). malloc'd; NULL on ENOMEM. */
char *wr_registry_ref_format(const struct wr_registry_ref *ref);
/* The manifest reference to fetch: the digest when present, else the tag. */
const char *wr_registry_ref_reference(const struct wr_registry_ref *ref);

/* ---- opening ---------------------------------------------------------- */

struct wr_registry_opts {
	bool insecure;	      /* allow plain http and unverified TLS for any host */
	const char *ca_file;  /* extra CA bundle (PEM) to verify the registry with */
	const char *username; /* basic credentials, also used to fetch bearer tokens */
	const char *password;
	const char *token;	     /* a ready bearer token: sent as is, no dance */
	const char *auth_file;	     /* docker config.json: {"auths":{"<host>":{"auth":"b64(u:p)"} |
					{"username":..,"password":..} | {"identitytoken":..}}};
					used when username and token are NULL */
	const char *user_agent;	     /* default "warren/<version>" */
	unsigned connect_timeout_ms; /* default 5000 */
	unsigned low_speed_time_s;   /* default 20: abort a transfer slower than... */
	unsigned low_speed_bytes;    /* ...this many bytes/s (default 1) for that long */
	unsigned range_timeout_ms;   /* whole wr_registry_blob_range call; default 30000 */
	unsigned retries;	     /* extra attempts on connection errors, 429 and 5xx
					(idempotent requests only); default 2 */
	unsigned max_handles;	     /* easy handles kept for reuse; default 16 */
};

struct wr_registry;

/* Open a client for one registry host ("host[:port]", as in a ref). No
 * network traffic happens here; opts may be NULL (anonymous, defaults).
 * opts' strings are copied. */
int wr_registry_open(const char *host, const struct wr_registry_opts *opts,
		     struct wr_registry **out, wr_err *err);
void wr_registry_close(struct wr_registry *reg);
const char *wr_registry_host(const struct wr_registry *reg);

/* GET /v2/: checks the registry speaks the v2 API and that the credentials
 * are accepted (runs the token dance with no scope when asked to). */
int wr_registry_ping(struct wr_registry *reg, wr_err *err);

/* Counters since open (all requests, all threads). */
struct wr_registry_stats {
	uint64_t requests;  /* HTTP requests sent, retries and token fetches included */
	uint64_t bytes_in;  /* response body bytes received */
	uint64_t bytes_out; /* request body bytes sent */
};
void wr_registry_stats(struct wr_registry *reg, struct wr_registry_stats *out);

/* ---- manifests -------------------------------------------------------- */

/* Media types this client knows (manifest_get's default Accept list). */
#define WR_MT_OCI_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define WR_MT_OCI_INDEX "application/vnd.oci.image.index.v1+json"
#define WR_MT_DOCKER_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"
#define WR_MT_DOCKER_LIST "application/vnd.docker.distribution.manifest.list.v2+json"

/* Manifests larger than this are refused (the distribution spec's limit). */
#define WR_REGISTRY_MANIFEST_MAX (4u << 20)

/* GET /v2/<repo>/manifests/<digest or tag> of ref (ref->host must name
 * this registry). accept: NULL-terminated list of media types, or NULL for
 * the four above. On success *body (NUL-terminated, *len bytes without the
 * NUL), *media_type (from Content-Type, else the body's "mediaType") and
 * *digest ("sha256:..." of the body bytes, computed here) are malloc'd and
 * owned by the caller; any out pointer may be NULL. When ref has a digest
 * the body must hash to it (EBADMSG otherwise); a Docker-Content-Digest
 * header that disagrees with the body is EBADMSG too. */
int wr_registry_manifest_get(struct wr_registry *reg, const struct wr_registry_ref *ref,
			     const char *const *accept, char **body, size_t *len, char **media_type,
			     char **digest, wr_err *err);

/* PUT /v2/<repo>/manifests/<reference> (a tag, or the body's digest).
 * The body must be JSON; media_type becomes the Content-Type. *digest_out
 * (optional, malloc'd) is the digest of body, checked against the
 * registry's Docker-Content-Digest answer. Every blob the manifest names
 * must already be in the repository. */
int wr_registry_manifest_put(struct wr_registry *reg, const char *repo, const char *reference,
			     const char *body, size_t len, const char *media_type,
			     char **digest_out, wr_err *err);

/* ---- blobs -------------------------------------------------------------- */

/* HEAD /v2/<repo>/blobs/<digest>. 0 and *size (optional) when present,
 * -ENOENT (with *err set) when absent, other negatives on failure. */
int wr_registry_blob_head(struct wr_registry *reg, const char *repo, const char *digest,
			  uint64_t *size, wr_err *err);
/* 1 when the blob is in repo, 0 when not (no error), negative on failure. */
int wr_registry_blob_exists(struct wr_registry *reg, const char *repo, const char *digest,
			    wr_err *err);

/* GET the whole blob and write it to fd (write(2) from fd's current
 * position), hashing as it streams. expect_size is the descriptor's size,
 * or -1 when unknown: more bytes than that abort the transfer (EFBIG),
 * fewer are EBADMSG. A digest mismatch is EBADMSG. On failure fd may hold
 * a partial copy: the caller writes into a temporary file and renames it
 * only on success. *written (optional) gets the byte count. */
int wr_registry_blob_get(struct wr_registry *reg, const char *repo, const char *digest,
			 int64_t expect_size, int fd, uint64_t *written, wr_err *err);

/* GET bytes [off, off+len) of a blob with an HTTP Range request into buf.
 * The registry must answer 206 (a 200 with the whole blob is ENOTSUP: the
 * caller would otherwise download everything). *got is the bytes stored:
 * len, or fewer when the range runs past the end of the blob; 0 when off
 * is at or past the end (HTTP 416). The bytes are NOT verified against the
 * digest (a range cannot be); the caller checks what it can. Thread-safe;
 * bounded by range_timeout_ms in all, and retried on connection errors
 * within that budget. This is what the lazy FUSE layer calls. */
int wr_registry_blob_range(struct wr_registry *reg, const char *repo, const char *digest,
			   uint64_t off, size_t len, void *buf, size_t *got, wr_err *err);

/* Upload size bytes read (pread, from offset 0) from fd as blob digest
 * ("sha256:...", checked while reading: a mismatch aborts the upload,
 * EBADMSG) into repo:
 *   - when mount_from (a repository on the same registry, or NULL) is set,
 *     first POST ?mount=<digest>&from=<mount_from>; a 201 ends here;
 *   - chunk_size == 0: POST to open an upload session, then one PUT with
 *     the whole body (monolithic);
 *   - chunk_size > 0: POST, then PATCH chunks of chunk_size bytes with
 *     Content-Range, following each Location, then a closing PUT.
 * Does not check whether the blob already exists (call blob_exists). */
int wr_registry_blob_put(struct wr_registry *reg, const char *repo, int fd, uint64_t size,
			 const char *digest, size_t chunk_size, const char *mount_from,
			 wr_err *err);

#endif
