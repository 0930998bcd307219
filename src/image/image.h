/* warren image store: content-addressed EROFS images with names, holders
 * and reclamation.
 *
 * Layout of a store directory (mode 0700, owned by the daemon's user):
 *   <dir>/blobs/sha256/<hex>   EROFS blobs, read-only files, named by the
 *                              sha256 of their bytes
 *   <dir>/manifests/<hex>.json one small JSON manifest per image (digest,
 *                              size, source, created, config, provenance)
 *   <dir>/store.db             SQLite (WAL): images, refs (names), holders
 *   <dir>/tmp/                 staging; swept at open (crash leftovers)
 *
 * Digests are "sha256:<64 lowercase hex>" of the EROFS blob. The same
 * content always builds the same blob (fixed UUID and build time, sorted
 * directories, per-file mtimes and owners kept), so two imports of one
 * tree give one digest and one blob.
 *
 * References accepted wherever a `ref` is taken:
 *   name[:tag]           tag defaults to "latest"; name is lowercase
 *                        [a-z0-9._/-] components as in OCI distribution
 *   name@sha256:<hex>    the digest must exist (name is informational)
 *   sha256:<hex>         a digest; a unique prefix of >= 12 hex is accepted
 *
 * Errors: every function returns 0 (or a count) on success and a negative
 * errno value on failure, filling *err (src/common/error.h). Notable
 * codes: -ENOENT unknown ref/digest, -EINVAL bad argument (err->field set
 * where a caller-supplied field is at fault, e.g. "ref", "format"),
 * -EBUSY image in use or referenced (remove without force), -EEXIST,
 * -EFBIG / -E2BIG entry size / count limits, -EBADMSG digest mismatch or
 * corrupt blob, -EPERM hostile archive entry (message names the entry and
 * the reason).
 *
 * Ownership: out-structures (struct wr_image, lists, reports) are
 * allocated by the store and released with the matching *_free. Input
 * strings and fds are borrowed: the store never closes a caller's fd.
 *
 * Concurrency: a store handle may be used from many threads at once, and
 * several processes may open the same directory. Metadata changes are
 * SQLite transactions (BEGIN IMMEDIATE, busy timeout); blobs enter the
 * store by rename from tmp/ only after they are complete, fsynced and
 * verified, and their record is committed only after the rename. So a crash
 * at any point leaves either no image or a complete one; an orphan blob or
 * manifest without a record is removed by the next open.
 * Acquire and gc serialise in the database: gc marks an image `deleting`
 * in a transaction only when it has no holder and only then unlinks the
 * blob; acquire of a `deleting` image fails with -ENOENT ("being
 * reclaimed"), never returns a path that is about to disappear.
 */
#ifndef WARREN_IMAGE_IMAGE_H
#define WARREN_IMAGE_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "common/error.h"

#define WR_IMAGE_DIGEST_LEN 71 /* "sha256:" + 64 hex */

struct wr_image_store; /* opaque, thread-safe */
struct wr_image;

/* Optional hooks of the on-demand loading module (src/image/lazy*). The
 * store calls them without holding any lock of its own. */
struct wr_image_lazy_ops {
	/* Bytes the chunk cache uses now (counted against quota_bytes). */
	uint64_t (*cache_bytes)(void *ctx);
	/* Free at least `want` bytes of cache not needed by images in use;
	 * stores what was freed in *freed. */
	int (*cache_trim)(void *ctx, uint64_t want, uint64_t *freed, wr_err *err);
	/* The image record `digest` was removed: drop its chunks. */
	void (*forget)(void *ctx, const char *digest);
	/* Path to mount for an image whose blob is not local (complete ==
	 * false): a file served by the FUSE daemon. malloc'd into *path. */
	int (*open_remote)(void *ctx, const struct wr_image *img, char **path, wr_err *err);
};

struct wr_image_store_opts {
	const char *dir;		      /* required; created (0700) if missing */
	uint64_t quota_bytes;		      /* blobs + chunk cache; 0 = unlimited */
	unsigned high_water_pct;	      /* automatic gc above this % of quota; 0 = 90 */
	unsigned low_water_pct;		      /* an automatic pass frees down to this; 0 = 80 */
	int64_t grace_sec;		      /* never reclaim within this after last use; <0 = 0 */
	uint64_t max_entries;		      /* per import: files + dirs + links; 0 = 1,000,000 */
	uint64_t max_unpacked_bytes;	      /* per import: sum of file sizes; 0 = 64 GiB */
	const struct wr_image_lazy_ops *lazy; /* optional */
	void *lazy_ctx;
};

int wr_image_store_open(const struct wr_image_store_opts *opts, struct wr_image_store **out,
			wr_err *err);
void wr_image_store_close(struct wr_image_store **store);
const char *wr_image_store_dir(const struct wr_image_store *store);

/* The runtime defaults an image carries (from the OCI config's "config"
 * object). Every field may be empty/NULL. */
struct wr_image_config {
	char **env; /* "K=V" strings */
	size_t n_env;
	char *workdir;
	char *user; /* as in OCI: "uid[:gid]" or a name */
	char **entrypoint;
	size_t n_entrypoint;
	char **cmd;
	size_t n_cmd;
	char **labels; /* OCI "Labels" as "key=value" strings, sorted by key */
	size_t n_labels;
};
/* The value of label `key`, or NULL. */
const char *wr_image_label(const struct wr_image_config *c, const char *key);

/* Where a lazily pulled image comes from (registry module). */
struct wr_image_remote {
	char *reference;   /* "registry/repo@sha256:..." or with a tag */
	char *blob_digest; /* the digest of the remote EROFS layer */
	uint64_t size;
};

/* What a blob is: an EROFS root filesystem (container, microVM and
 * function tiers) or a bootable disk for the vm tier (vmdisk.c). */
enum wr_image_kind {
	WR_IMAGE_KIND_ROOTFS = 0,
	WR_IMAGE_KIND_VM_DISK,
};
/* "rootfs", "vm-disk" */
const char *wr_image_kind_name(enum wr_image_kind k);

struct wr_image {
	char digest[WR_IMAGE_DIGEST_LEN + 1];
	enum wr_image_kind kind;
	/* vm-disk only: "raw" or "qcow2" (as the vm tier reads the file: the
	 * qcow2 magic) and the disk's virtual size in bytes. */
	char disk_format[8];
	uint64_t virtual_size;
	/* vm-disk only: "bios", "uefi" or "uefi-secure" (detected at import:
	 * bios or uefi; or as asked) */
	char firmware[16];
	uint64_t size;		    /* bytes of the EROFS blob */
	char *source;		    /* free text: "dir:/path", "oci-layout:...", "registry:..." */
	int64_t created, last_used; /* unix seconds; last_used 0 = never */
	bool pinned;
	bool complete; /* false while a lazily pulled blob is not fully local */
	bool deleting; /* gc is removing it */
	unsigned holders;
	char **refs; /* "name:tag" pointing at this digest, sorted */
	size_t n_refs;
	struct wr_image_config config;
	struct wr_image_remote remote; /* reference NULL unless lazily pulled */
	char **layers;		       /* provenance: source layer digests, base first */
	size_t n_layers;
};
void wr_image_free(struct wr_image **img);

enum wr_image_format {
	WR_IMAGE_FMT_AUTO = 0,
	WR_IMAGE_FMT_DIR,	     /* rootfs directory */
	WR_IMAGE_FMT_TAR,	     /* rootfs tar: plain, gzip, zstd, xz, bzip2 */
	WR_IMAGE_FMT_OCI_LAYOUT,     /* OCI image layout directory */
	WR_IMAGE_FMT_OCI_ARCHIVE,    /* tar of an OCI image layout (podman save) */
	WR_IMAGE_FMT_DOCKER_ARCHIVE, /* docker save: manifest.json + layer tars */
	WR_IMAGE_FMT_VM_DISK,	     /* a bootable disk file (raw or qcow2): kind vm-disk */
};
/* "auto", "dir", "tar", "oci-layout", "oci-archive", "docker-archive",
 * "vm-disk" (never detected: asked for explicitly). */
int wr_image_format_parse(const char *s, enum wr_image_format *out);
const char *wr_image_format_name(enum wr_image_format f);

struct wr_image_import_opts {
	enum wr_image_format format;
	const char *ref;      /* name[:tag] to point at the result, or NULL */
	const char *source;   /* provenance text; NULL = derived from the input */
	const char *platform; /* "os/arch[/variant]" picked from an index; NULL = linux/amd64 */
	/* vm-disk: "bios", "uefi" or "uefi-secure" (wr_image_firmware_ok);
	 * NULL: detected (a GPT disk with an EFI system partition and no BIOS
	 * boot partition boots with UEFI; Secure Boot only when asked for) */
	const char *firmware;
};
/* A vm-disk firmware this store records: bios, uefi or uefi-secure (OVMF
 * with Secure Boot, Microsoft's keys enrolled). */
bool wr_image_firmware_ok(const char *fw);

/* Import from a path (directory, tar, OCI layout, archive, or a disk file
 * with format vm-disk). The result is a complete image; *out (may be NULL)
 * receives its record.
 *
 * vm-disk: the file is copied as it is (its sha256 is the digest), the
 * format is raw or qcow2 by the qcow2 magic, and it is refused (-EPERM; a
 * damaged disk -EBADMSG) when a qcow2 has a
 * backing file, an external data file, encryption, the dirty or corrupt
 * bit or a version other than 2 and 3, when `qemu-img check` finds
 * corruption, or (-EFBIG) when the file or its virtual size exceeds
 * max_unpacked_bytes. qemu-img (info, check) only ever opens the staged
 * copy with an explicit format. */
int wr_image_import(struct wr_image_store *s, const char *path,
		    const struct wr_image_import_opts *o, struct wr_image **out, wr_err *err);
/* Import a tar stream (rootfs tar or an archive) read from fd until EOF.
 * Non-seekable fds are spooled into tmp/ first when the format needs
 * random access (archives, auto). */
int wr_image_import_fd(struct wr_image_store *s, int fd, const struct wr_image_import_opts *o,
		       struct wr_image **out, wr_err *err);

/* Import the upper directory of an overlay (a sandbox's writable layer,
 * read through upper_fd, borrowed) as a layer image: regular files, dirs,
 * symlinks and fifos are copied with their modes, times and user.*
 * xattrs; owners are shifted down by id_base (host ids of the sandbox's
 * user namespace; ids outside its 65536 become 65534); overlay whiteouts
 * (0/0 character devices) and opaque directories (user.overlay.opaque)
 * are kept as such, so stacked over its base with overlayfs' userxattr
 * convention the layer deletes what the sandbox deleted. Sockets and other
 * devices are left out; other user.overlay.* xattrs (origin, impure) are
 * dropped. config_json may carry Labels (see wr_image_label). */
int wr_image_import_upper(struct wr_image_store *s, int upper_fd, uid_t id_base,
			  const char *config_json, const struct wr_image_import_opts *o,
			  struct wr_image **out, wr_err *err);

/* A bootable vm-disk image from a rootfs image of the store (vmbuild.c):
 * the image's tree on an ext4 partition of a fresh disk (MBR), Debian's
 * cloud kernel, initrd and modules from kernel_root, extlinux, written as
 * qcow2 by `script` (scripts/mkvmimage.sh, run with a fixed argv: it needs
 * loop devices, mkfs.ext4 and extlinux, host tools all) and imported as
 * with format vm-disk. The source image is held meanwhile. Errors name
 * "image" (not a complete rootfs image, or no init or qemu-ga in it),
 * "size" or "ref". */
struct wr_image_build_vm_opts {
	const char *image;	 /* source: a rootfs image ref (required) */
	const char *ref;	 /* name[:tag] for the result, or NULL */
	uint64_t size;		 /* the disk's virtual size; 0 = 4 GiB */
	const char *kernel_root; /* Debian tree with the cloud kernel (required;
				  * debootstrapped there when it has none) */
	const char *script;	 /* mkvmimage.sh (required) */
	const char *firmware;	 /* "bios" (NULL) or "uefi": GPT, an EFI system
				  * partition, GRUB for UEFI; "uefi-secure": the
				  * same with shim, signed GRUB and kernel */
};
int wr_image_build_vm(struct wr_image_store *s, const struct wr_image_build_vm_opts *o,
		      struct wr_image **out, wr_err *err);

/* Building blocks for the registry module. */
struct wr_image_layer {
	int fd;			/* a layer blob, read from offset 0 (pread) */
	const char *media_type; /* OCI/Docker layer media type; NULL = detect */
	const char *digest;	/* "sha256:..." of the blob as stored; NULL = not checked */
};
/* Apply OCI layers (base first, whiteouts and opaque dirs) into a fresh
 * tree, build and verify the blob. config_json is the OCI image config
 * (may be NULL). */
int wr_image_import_layers(struct wr_image_store *s, const struct wr_image_layer *layers,
			   size_t n_layers, const char *config_json,
			   const struct wr_image_import_opts *o, struct wr_image **out,
			   wr_err *err);
/* Adopt a ready EROFS blob read from fd: its sha256 must equal
 * expected_digest (when not NULL) and fsck.erofs must accept it. */
int wr_image_add_blob(struct wr_image_store *s, int fd, const char *expected_digest,
		      const char *config_json, const struct wr_image_import_opts *o,
		      struct wr_image **out, wr_err *err);
/* A record whose blob is not local yet (complete = false). */
int wr_image_add_remote(struct wr_image_store *s, const char *digest, uint64_t size,
			const struct wr_image_remote *remote, const char *config_json,
			const struct wr_image_import_opts *o, struct wr_image **out, wr_err *err);
/* The blob of a remote record became local: verify fd's bytes against
 * digest, store them, mark the record complete. */
int wr_image_blob_commit(struct wr_image_store *s, const char *digest, int fd, wr_err *err);
/* Path of a local blob (malloc'd), -ENOENT when not local. The path is only
 * guaranteed to stay valid while the caller holds the image (acquire). */
int wr_image_blob_path(struct wr_image_store *s, const char *digest, char **path, wr_err *err);

/* Names. */
/* Resolve a ref to a record (refs, config ... filled). */
int wr_image_resolve(struct wr_image_store *s, const char *ref, struct wr_image **out, wr_err *err);
/* Point name[:tag] `ref` at the image `target` resolves to; a tag already
 * pointing elsewhere moves (the old digest stays until reclaimed). */
int wr_image_tag(struct wr_image_store *s, const char *target, const char *ref, wr_err *err);
/* Drop the name `ref` (name[:tag] only). */
int wr_image_untag(struct wr_image_store *s, const char *ref, wr_err *err);
/* Remove an image. A name[:tag] ref: the name is dropped, and the image
 * too when no other name points at it and it is not in use or pinned.
 * A digest: refuses (-EBUSY) while in use, pinned or named unless force;
 * force drops names and the pin, never a holder (in use stays -EBUSY).
 * *removed (may be NULL) tells whether the blob went. */
int wr_image_remove(struct wr_image_store *s, const char *ref, bool force, bool *removed,
		    wr_err *err);
int wr_image_pin(struct wr_image_store *s, const char *ref, bool pinned, wr_err *err);

struct wr_image_list {
	struct wr_image **items; /* newest first */
	size_t n;
};
int wr_image_list(struct wr_image_store *s, struct wr_image_list *out, wr_err *err);
void wr_image_list_free(struct wr_image_list *l);

/* Use. The holder is an opaque id (a sandbox id); one holder may hold an
 * image once (acquiring twice is idempotent). *path receives a path to
 * mount (the local blob, or the lazy module's file when not complete);
 * *img (may be NULL) the record. last_used is updated on acquire and
 * release. */
int wr_image_acquire(struct wr_image_store *s, const char *ref, const char *holder, char **path,
		     struct wr_image **img, wr_err *err);
int wr_image_release(struct wr_image_store *s, const char *digest, const char *holder, wr_err *err);
/* Daemon restart: drop every holder for which keep(ctx, holder) is false. */
int wr_image_release_except(struct wr_image_store *s, bool (*keep)(void *ctx, const char *holder),
			    void *ctx, wr_err *err);

/* Reclamation. */
enum wr_image_gc_reason {
	WR_IMAGE_GC_QUOTA,    /* LRU eviction to get under the quota */
	WR_IMAGE_GC_UNTAGGED, /* no name points at it (prune_untagged) */
};
const char *wr_image_gc_reason_name(enum wr_image_gc_reason r);

struct wr_image_gc_event {
	const char *digest;
	uint64_t size;
	int64_t last_used;
	enum wr_image_gc_reason reason;
	bool dry_run; /* it would have been removed */
};

struct wr_image_gc_opts {
	bool dry_run;
	bool prune_untagged;   /* also remove images no name points at */
	uint64_t target_bytes; /* free down to this; 0 = quota (or nothing when unlimited) */
	/* Called once per removal (after the unlink), from the calling thread. */
	void (*on_remove)(void *ctx, const struct wr_image_gc_event *ev);
	void *ctx;
};

struct wr_image_gc_report {
	uint64_t used_before, used_after; /* blobs + cache bytes */
	uint64_t freed_bytes;		  /* blobs removed */
	uint64_t cache_freed_bytes;	  /* chunk cache trimmed */
	size_t removed;			  /* images removed (or would be) */
	size_t skipped_in_use, skipped_pinned, skipped_grace;
};

/* One pass: candidates are images with no holder, not pinned and last
 * used (or created) more than grace_sec ago, least recently used first.
 * With prune_untagged every unnamed candidate goes; then candidates go in
 * LRU order while usage exceeds the target (the chunk cache is trimmed
 * first). Only one pass runs at a time per store. */
int wr_image_gc(struct wr_image_store *s, const struct wr_image_gc_opts *o,
		struct wr_image_gc_report *report, wr_err *err);
/* The automatic pass: when usage is above high_water_pct of the quota, a
 * gc down to low_water_pct. Returns 1 when it ran, 0 when not needed. */
int wr_image_gc_auto(struct wr_image_store *s, const struct wr_image_gc_opts *o,
		     struct wr_image_gc_report *report, wr_err *err);

struct wr_image_usage {
	uint64_t blob_bytes, cache_bytes, quota_bytes;
	size_t images;
};
int wr_image_usage(struct wr_image_store *s, struct wr_image_usage *out, wr_err *err);

#endif
