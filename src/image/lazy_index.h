/* The chunk index of an EROFS blob: the sha256 of every fixed-size piece,
 * so that warren-lazyfs can verify each byte range it fetches by HTTP Range
 * before any reader sees it (docs/ARCHITECTURE.md, "Chunk index").
 *
 * Pushed as its own blob, the second layer of warren's artifact manifest
 * (media type WR_MT_WARREN_CHUNKS): the manifest digest pins the index, the
 * index pins every piece of the blob.
 *
 * Format (all integers little-endian):
 *   0   8   magic "WRNCHIDX"
 *   8   4   version (1)
 *   12  4   grain G: piece size in bytes, a power of two, 4 KiB..64 MiB
 *   16  8   blob size in bytes (> 0)
 *   24  32  the blob's sha256 (raw)
 *   56  32*n  sha256 of piece i = bytes [i*G, min((i+1)*G, size)),
 *             n = ceil(size / G); the last piece is shorter
 * Nothing else: a file of any other length is refused.
 *
 * G = 64 KiB (WRL_INDEX_GRAIN): the index of a 1 GiB blob is 512 KiB (0.05%
 * of the blob, fetched once at pull), and 64 KiB is the smallest lazy fetch
 * (lazy.chunk_size is a power of two from 64 KiB), so every fetch is a
 * whole number of pieces and nothing is fetched only to be verified. 4 KiB
 * would make the index 8 MiB per GiB; 1 MiB would force 1 MiB fetches.
 */
#ifndef WARREN_IMAGE_LAZY_INDEX_H
#define WARREN_IMAGE_LAZY_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define WR_MT_WARREN_CHUNKS "application/vnd.warren.image.erofs.chunks.v1"
#define WRL_INDEX_GRAIN (64u << 10)
#define WRL_INDEX_GRAIN_MIN (4u << 10)
#define WRL_INDEX_GRAIN_MAX (64u << 20)
#define WRL_INDEX_HDR 56u
/* No index is larger (a 128 GiB blob at 64 KiB pieces): a hostile manifest
 * cannot make a pull or lazyfs hold more than this in memory. */
#define WRL_INDEX_MAX_BYTES (64ull << 20)
#define WRL_INDEX_MAGIC "WRNCHIDX"
#define WRL_INDEX_VERSION 1u

struct wrl_index {
	uint32_t grain;
	uint32_t n;    /* pieces */
	uint64_t size; /* of the blob */
	uint8_t *sums; /* n * 32 bytes */
};

/* Bytes of the index of a blob of size bytes at grain g. */
uint64_t wrl_index_len(uint64_t size, uint32_t g);
/* The largest index any grain allows for a blob of size bytes, at most
 * WRL_INDEX_MAX_BYTES. */
uint64_t wrl_index_max_len(uint64_t size);

/* Read fd's first size bytes once: the index at grain g (*out malloc'd,
 * *len bytes), and the whole blob's sha256 checked against blob_digest
 * ("sha256:<hex>"; -EBADMSG when the bytes are not that blob). */
int wrl_index_build(int fd, uint64_t size, uint32_t g, const char *blob_digest, uint8_t **out,
		    size_t *len, wr_err *err);

/* Check an index (its header must name blob_digest and size) and load it
 * into *ix (free with wrl_index_free). -EBADMSG on any mismatch. */
int wrl_index_parse(const void *buf, size_t len, const char *blob_digest, uint64_t size,
		    struct wrl_index *ix, wr_err *err);
void wrl_index_free(struct wrl_index *ix);

/* Verify len bytes of the blob starting at off (a multiple of the grain;
 * len whole pieces, or up to the blob's end). 0 when every piece matches;
 * else -EBADMSG and *bad = the offset of the first piece that does not. */
int wrl_index_check(const struct wrl_index *ix, uint64_t off, const void *buf, size_t len,
		    uint64_t *bad, wr_err *err);

/* <store_dir>/chunks/<hex>/index, written by the pull before the record
 * (written to a temporary name, fsync'd, renamed). */
int wrl_index_save(const char *store_dir, const char *hex, const void *buf, size_t len,
		   wr_err *err);
/* Load dirfd's "index" for blob_digest/size. -ENOENT when there is none. */
int wrl_index_load(int dirfd, const char *blob_digest, uint64_t size, struct wrl_index *ix,
		   wr_err *err);

#endif
