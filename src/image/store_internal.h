/* Internals shared by the image store's modules (not for other modules). */
#ifndef WARREN_IMAGE_STORE_INTERNAL_H
#define WARREN_IMAGE_STORE_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "image/image.h"

struct wr_image_store {
	char *dir;
	int dirfd;   /* <dir> */
	int blobsfd; /* <dir>/blobs/sha256 */
	int mansfd;  /* <dir>/manifests */
	int tmpfd;   /* <dir>/tmp */
	sqlite3 *db;
	pthread_mutex_t lock;	 /* the db connection: one statement sequence at a time */
	pthread_mutex_t gc_lock; /* one gc pass at a time */
	struct wr_image_store_opts o;
};

/* ---- store.c ---- */
/* db helpers: the caller holds s->lock. */
int wri_db_exec(struct wr_image_store *s, const char *sql, wr_err *err);
int wri_db_begin(struct wr_image_store *s, wr_err *err); /* BEGIN IMMEDIATE, retried */
void wri_db_rollback(struct wr_image_store *s);
int wri_db_err(struct wr_image_store *s, const char *what, wr_err *err);

/* Record of a new image: in a write transaction, adopt the staged blob
 * (tmp_name under stagefd; NULL for a remote record) as digest, write its
 * manifest, insert the record and point ref at it. Waits while a record
 * of the same digest is being deleted. On return the staged blob is
 * consumed or left for the caller's staging cleanup. */
struct wri_new {
	const char *digest;
	uint64_t size;
	const char *source;
	json_t *config; /* the OCI "config" object or NULL (borrowed) */
	json_t *layers; /* array of layer digests or NULL (borrowed) */
	json_t *remote; /* {reference, blob_digest, size} or NULL (borrowed) */
	json_t *disk;	/* vm-disk: {format, virtual_size}; NULL: a rootfs (borrowed) */
	int stagefd;	/* directory holding tmp_name */
	const char *tmp_name;
	bool complete;
};
int wri_commit_image(struct wr_image_store *s, const struct wri_new *n, const char *ref,
		     struct wr_image **out, wr_err *err);
/* Second half of a deletion: the record is marked deleting (committed). */
int wri_finish_delete(struct wr_image_store *s, const char *digest, wr_err *err);
/* In a transaction the caller opened (holding s->lock): mark digest
 * deleting if it has no holder (and, unless force, no pin and no name).
 * Returns 1 when marked, 0 when not. */
int wri_mark_deleting(struct wr_image_store *s, const char *digest, bool force, wr_err *err);
int wri_load(struct wr_image_store *s, const char *digest, struct wr_image **out, wr_err *err);

/* ---- refs.c ---- */
/* Split a name[:tag] into a canonical "name:tag" (malloc'd). */
int wri_ref_canon(const char *ref, char **out, wr_err *err);
/* "sha256:<64 hex>" */
bool wri_is_digest(const char *s);
/* Parse the config JSON of an image into cfg; NULL input gives an empty one. */
int wri_config_from_json(json_t *config, struct wr_image_config *cfg, wr_err *err);
void wri_config_clear(struct wr_image_config *cfg);

/* ---- build.c ---- */
/* A private staging directory under tmp/, locked (flock) while it lives so
 * a sweep by another process never removes it. */
struct wri_stage {
	char name[40];
	int fd;	    /* the staging dir */
	int rootfd; /* <stage>/root, created on demand by wri_stage_root */
};
int wri_stage_new(struct wr_image_store *s, struct wri_stage *st, wr_err *err);
int wri_stage_root(struct wri_stage *st, wr_err *err);
void wri_stage_drop(struct wr_image_store *s, struct wri_stage *st);
/* Remove unlocked leftovers in tmp/. */
void wri_stage_sweep(struct wr_image_store *s);
/* rm -rf name under dirfd without following symlinks. */
int wri_rm_rf_at(int dirfd, const char *name);
/* Build <stage>/blob from the tree at src_path (reproducible), fsck it,
 * and digest it: fills digest and size. */
int wri_build_erofs(struct wr_image_store *s, struct wri_stage *st, const char *src_path,
		    char digest[WR_IMAGE_DIGEST_LEN + 1], uint64_t *size, wr_err *err);
/* fsck.erofs a file. */
int wri_fsck(const char *path, wr_err *err);
/* sha256 of a whole fd (pread from 0): "sha256:<hex>"; size too. */
int wri_sha256_fd(int fd, char out[WR_IMAGE_DIGEST_LEN + 1], uint64_t *size, wr_err *err);
/* Copy fd (from offset 0) to a new file name in dirfd, hashing it. */
int wri_copy_fd(int fd, int dirfd, const char *name, char digest[WR_IMAGE_DIGEST_LEN + 1],
		uint64_t *size, wr_err *err);

/* ---- unpack.c ---- */
struct wri_unpack {
	int rootfd;	      /* the tree being built */
	uint64_t max_entries; /* across all layers */
	uint64_t max_bytes;
	uint64_t entries, bytes;
	/* recorded directory mtimes, applied at the end */
	struct wri_dirtime *dirtimes;
	size_t n_dirtimes, cap_dirtimes;
	bool whiteouts; /* layer mode: .wh. entries remove from lower layers */
};
void wri_unpack_init(struct wri_unpack *u, int rootfd, const struct wr_image_store *s);
void wri_unpack_free(struct wri_unpack *u);
/* Apply one tar (any compression libarchive knows) read from fd at its
 * current offset (seekable or not). `what` names the input in errors. */
int wri_unpack_tar(struct wri_unpack *u, int fd, const char *what, wr_err *err);
/* Set directory mtimes (recorded, else 0) once everything is applied. */
int wri_unpack_finish(struct wri_unpack *u, wr_err *err);

/* ---- import.c ---- */
json_t *wri_runtime_config(json_t *oci);
int wri_stage_root_path(struct wr_image_store *s, struct wri_stage *st, char **path, wr_err *err);
/* Verify and apply layers (base first) into st's root; appends the layer
 * digests to `digests`. */
int wri_apply_layers(struct wr_image_store *s, struct wri_stage *st,
		     const struct wr_image_layer *layers, size_t n, json_t *digests, wr_err *err);
/* Build the tree at src_path and commit it as an image. */
int wri_finish(struct wr_image_store *s, struct wri_stage *st, const char *src_path, json_t *config,
	       json_t *layers, const char *source, const struct wr_image_import_opts *o,
	       struct wr_image **out, wr_err *err);

/* ---- vmdisk.c ---- */
/* "uefi" or "bios" for a disk whose first len bytes are head. */
const char *wri_vmdisk_firmware(const unsigned char *head, size_t len);
/* Import the disk file fd (read from offset 0) as a vm-disk image. */
int wri_import_vmdisk(struct wr_image_store *s, struct wri_stage *st, int fd, const char *label,
		      const struct wr_image_import_opts *o, struct wr_image **out, wr_err *err);

/* ---- formats.c ---- */
/* fd: the input file (tar, archive); dirfd: a layout directory. */
int wri_import_format(struct wr_image_store *s, struct wri_stage *st, int fd, int dirfd,
		      const char *label, enum wr_image_format fmt,
		      const struct wr_image_import_opts *o, struct wr_image **out, wr_err *err);
/* Tell a rootfs tar from an OCI or docker archive (fd rewound after). */
int wri_detect(int fd, enum wr_image_format *fmt, wr_err *err);
int wri_import_dir(struct wr_image_store *s, struct wri_stage *st, const char *path,
		   const struct wr_image_import_opts *o, struct wr_image **out, wr_err *err);

#endif
