/* warren image distribution: push store images to an OCI registry and pull
 * registry images into a store.
 *
 * What a push writes (the "warren EROFS artifact", docs/ARCHITECTURE.md):
 *   an OCI image manifest (application/vnd.oci.image.manifest.v1+json) with
 *     artifactType  application/vnd.warren.image.v1
 *     config        application/vnd.oci.image.config.v1+json: a standard OCI
 *                   image config (architecture, os, config.Env/WorkingDir/
 *                   User/Entrypoint/Cmd, rootfs.diff_ids = [the EROFS digest]),
 *                   so `skopeo inspect --config` and friends read it
 *     layers        exactly one: mediaType application/vnd.warren.image.erofs.v1,
 *                   the store's EROFS blob byte for byte (its digest is the
 *                   image's digest in every store), annotated
 *                   org.opencontainers.image.title=rootfs.erofs
 *                 and second, its chunk index (lazy_index.h): mediaType
 *                   application/vnd.warren.image.erofs.chunks.v1, the sha256
 *                   of every 64 KiB piece of the EROFS blob, annotated
 *                   org.opencontainers.image.title=rootfs.erofs.chunks
 *   tagged with the remote reference's tag. Everything is deterministic: the
 *   same image pushed twice gives the same manifest digest, and blobs the
 *   repository already has are not sent again (HEAD first).
 *   No tar layer is added: plain OCI runtimes cannot run a warren artifact,
 *   by choice (it would double the upload and the registry storage).
 *
 * What a pull accepts: OCI and Docker schema 2 manifests, and OCI indexes /
 * Docker manifest lists (the entry for the wanted platform, default
 * linux/amd64). A manifest carrying the warren EROFS layer is fetched as is
 * (full) or recorded as remote (lazy: wr_image_add_remote; the on-demand
 * module serves it). A lazy pull first fetches the chunk index (its digest
 * pinned by the manifest), checks that its header names the EROFS layer's
 * digest and size, and saves it as <store>/chunks/<hex>/index before the
 * record exists: lazyfs verifies every fetched range against it. A warren
 * artifact without an index (pushed by an older warren) is pulled in full
 * instead: nothing unverified is ever served. Any other image has its tar layers (gzip, zstd or
 * plain) fetched and converted on the node by wr_image_import_layers; lazy
 * is not possible for those (they must be converted) and the pull is full.
 * Every manifest, config and layer is checked against its digest. A pull
 * whose manifest digest the store already holds (same source) only points
 * the local name at it: no blob traffic.
 */
#ifndef WARREN_IMAGE_DISTRIBUTE_H
#define WARREN_IMAGE_DISTRIBUTE_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "image/image.h"
#include "image/registry.h"

#define WR_MT_WARREN_EROFS "application/vnd.warren.image.erofs.v1"
#define WR_MT_WARREN_ARTIFACT "application/vnd.warren.image.v1"
#define WR_MT_OCI_CONFIG "application/vnd.oci.image.config.v1+json"
/* A vm-disk image: its one layer is the disk file as it is (raw or qcow2,
 * annotated with dev.warren.disk.format and dev.warren.disk.firmware); a
 * pull imports it exactly as a local vm-disk import (qemu-img checks). */
#define WR_MT_WARREN_VMDISK "application/vnd.warren.image.vm-disk.v1"

struct wr_image_push_opts {
	size_t chunk_size;	  /* 0: monolithic uploads; else chunked PATCHes of this size */
	const char *mount_from;	  /* a repository on the same registry to mount blobs from */
	bool without_chunk_index; /* tests only: push as warren did before chunk indexes */
	uint32_t index_grain;	  /* chunk index pieces; 0 = 64 KiB (other values: tests) */
};

struct wr_image_push_result {
	char manifest_digest[72];
	char blob_digest[72];  /* the EROFS layer = the image digest */
	char index_digest[72]; /* its chunk index ("" when pushed without) */
	unsigned blobs_sent, blobs_skipped;
	uint64_t bytes_sent;
};

/* Push the store image local_ref resolves to as remote_ref
 * ("host[:port]/repo[:tag]", or "...@sha256:<manifest>" which must then
 * match what is pushed). reg must be open for remote_ref's host. The image
 * is held (acquired) while it is read, so gc cannot take it meanwhile. An
 * image whose blob is not local (lazily pulled, not complete) is refused:
 * pull it fully first. res may be NULL. */
int wr_image_push(struct wr_image_store *s, struct wr_registry *reg, const char *local_ref,
		  const char *remote_ref, const struct wr_image_push_opts *o,
		  struct wr_image_push_result *res, wr_err *err);

enum wr_image_pull_mode { WR_IMAGE_PULL_FULL = 0, WR_IMAGE_PULL_LAZY };

struct wr_image_pull_opts {
	enum wr_image_pull_mode mode;
	const char *platform; /* "os/arch[/variant]" picked from an index; NULL = linux/amd64 */
};

struct wr_image_pull_result {
	char manifest_digest[72]; /* of the image manifest (after the index) */
	bool erofs;		  /* it carried the warren EROFS layer */
	bool lazy;		  /* recorded as remote (not fetched) */
	bool already;		  /* the store had it: nothing fetched */
	bool no_chunk_index;	  /* lazy asked, but no chunk index: pulled in full */
	unsigned layers;	  /* blobs fetched (config included) */
	uint64_t bytes_fetched;
};

/* Pull remote_ref into the store and point local_ref (name[:tag], or NULL:
 * no name) at it. *out (may be NULL) receives the image record; res may be
 * NULL. A failed pull leaves no image, name or temporary file behind. */
int wr_image_pull(struct wr_image_store *s, struct wr_registry *reg, const char *remote_ref,
		  const char *local_ref, const struct wr_image_pull_opts *o, struct wr_image **out,
		  struct wr_image_pull_result *res, wr_err *err);

/* The local name a pull uses when none is given: the repository path and
 * tag of remote_ref ("127.0.0.1:5000/team/py:3.12" -> "team/py:3.12"; a
 * digest-only reference gives the path alone). malloc'd. */
int wr_image_pull_default_name(const char *remote_ref, char **out, wr_err *err);

#endif
