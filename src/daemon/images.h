/* warrend's image store: one wr_image_store at <state_dir>/images with the
 * policy of the config's "image_store" object, and the glue sandboxes use
 * (acquire at create, holders reconciled with live sandboxes). */
#ifndef WARREN_DAEMON_IMAGES_H
#define WARREN_DAEMON_IMAGES_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "daemon/config.h"
#include "image/image.h"

/* Validate the "image_store" config object (errors name the key). */
int wrd_images_check_config(json_t *v, wr_err *err);
/* Validate the "lazy" config object (images_lazy.c; errors name the key,
 * "lazy.chunk_size"). */
int wrd_images_check_lazy(json_t *v, wr_err *err);
/* The on-demand loading client of cfg->lazy plugged into so (so->dir set). */
int wrd_images_lazy_attach(const struct wrd_config *cfg, struct wr_image_store_opts *so,
			   wr_err *err);
/* Poll warren-lazyfs's events into image events (and the log) on a
 * thread of its own; _stop joins it. */
int wrd_images_lazy_start(wr_err *err);
void wrd_images_lazy_stop(void);
/* Open the store (after the manager recovered sandboxes): holders of
 * sandboxes that are not live any more are released. */
int wrd_images_open(const struct wrd_config *cfg, json_t *conf, wr_err *err);
/* The same, from cfg->image_store (main.c). */
int wrd_images_open_config(const struct wrd_config *cfg, wr_err *err);
void wrd_images_close(void);
/* The HTTP upload-limit hook: image imports (no sandbox id) or a
 * sandbox's disk quota. */
uint64_t wrd_images_or_mgr_upload_limit(const char *tenant, const char *id);
struct wr_image_store *wrd_images(void);
/* build-vm's script (NULL: none found; image_store.vm_build_script) and
 * kernel tree (image_store.vm_kernel_root, default <state_dir>/vm-kernel). */
const char *wrd_images_vm_script(void);
const char *wrd_images_vm_kernel_root(void);

/* Is `image` a store reference ("name:tag", "name@sha256:", "sha256:")
 * that the store knows? Then acquire it for a sandbox being created:
 * *path is the blob to mount, *img its record (config defaults), and
 * *holder a temporary holder id to hand over with wrd_images_adopt once
 * the sandbox id is known (or drop with wrd_images_drop on failure).
 * Returns 1 when acquired, 0 when `image` is not a store ref (the caller
 * falls back to configured names and paths), <0 on error. */
int wrd_images_acquire_for_create(const char *image, char **path, struct wr_image **img,
				  char holder[40], wr_err *err);
/* The image's config as the sandbox's defaults where the request body is
 * silent: workdir, env (request keys win), numeric user. */
void wrd_images_apply_defaults(const struct wr_image *img, json_t *body, json_t *spec);
void wrd_images_adopt(const char *digest, const char *holder, const char *sandbox_id);
void wrd_images_drop(const char *digest, const char *holder);
/* The store images a sandbox being created holds, under temporary holder
 * ids until wrd_images_holds_adopt (create succeeded) or _drop. */
#define WRD_MAX_HOLDS 17 /* the image and up to 16 layers */
struct wrd_image_holds {
	size_t n;
	char digest[WRD_MAX_HOLDS][WR_IMAGE_DIGEST_LEN + 1];
	char holder[WRD_MAX_HOLDS][40];
};
/* Resolve one image reference for a create: a store ref is acquired into
 * holds (its config applied to spec where body is silent) and its blob
 * path returned in *store_path; 0 when `image` is no store ref. */
int wrd_images_hold(struct wrd_image_holds *h, const char *image, json_t *body, json_t *spec,
		    char **store_path, wr_err *err);
/* The create body's "layers" (1..16 refs, stacked on `base_path` in order):
 * each a store ref, a configured image name or (Unix socket only) a node
 * path; the resolved stack, base first, goes to spec "layers". No
 * "layers" key: nothing to do. Errors name the field ("layers[2]"). */
int wrd_images_stack(struct wrd_image_holds *h, const struct wrd_config *cfg, json_t *body,
		     bool tcp, const char *base_path, json_t *spec, wr_err *err);
/* Pull on create (images_pull.c). The create body's "pull" policy: */
enum { WRD_PULL_MISSING = 0, WRD_PULL_ALWAYS, WRD_PULL_NEVER };
/* "missing" (or NULL), "always", "never"; -EINVAL otherwise. */
int wrd_images_pull_policy(const char *s);
/* The store name a pulled registry reference gets: "host/repo:tag", or
 * "host/repo:sha256-<hex>" for a digest reference. malloc'd. */
int wrd_images_remote_name(const char *remote, char **out, wr_err *err);
/* Make the registry reference `remote` a store image per policy (pulling
 * it, lazily where it can, when missing or always; concurrent calls for
 * one reference do one pull) and return its store name in *name. auth is
 * the request's "registry_auth" object or NULL. Errors name "image" (an
 * unreachable registry: ESHUTDOWN; unknown: ENOENT) or "registry_auth". */
int wrd_images_ensure_remote(const char *remote, int policy, json_t *auth, char **name,
			     wr_err *err);
/* A snapshot's processes (its label WRD_SNAP_PROCS names a store image of
 * their own) travel with it: pushed first, to the snapshot's repository as
 * tag "processes-<hex of their digest>", and pulled from there after it
 * when the store lacks them. procs_ref: that remote reference for the
 * repository of `remote` (malloc'd), NULL on error. pull_procs: after a
 * pull of img from `remote`, its processes pulled (in full) when it has
 * some the store lacks; *out: what was done, NULL when nothing. */
struct wr_registry;
char *wrd_images_procs_ref(const char *remote, const char *digest, wr_err *err);
int wrd_images_pull_procs(struct wr_registry *reg, const char *remote, const struct wr_image *img,
			  const char *as, json_t **out, wr_err *err);
void wrd_images_holds_adopt(struct wrd_image_holds *h, const char *sandbox_id);
void wrd_images_holds_drop(struct wrd_image_holds *h);
/* A sandbox ended (destroyed): release every store image it held. */
void wrd_images_release_sandbox(const char *sandbox_id);
/* Release holders whose sandbox is not live (before gc and listings). */
void wrd_images_reconcile(void);
/* Automatic reclamation after an import or pull; removals are events and
 * log lines. The _keep form holds `keep` (the digest just imported or
 * pulled) through the pass, whatever the grace period. */
void wrd_images_gc_auto(void);
void wrd_images_gc_auto_keep(const char *keep);
/* Node-level events of the store (image_imported, image_removed) go to
 * the events table under this id; GET /v1/images/events reads them. */
#define WRD_IMAGES_EVENTS_ID ""
void wrd_images_event(const char *type, json_t *detail); /* steals detail */
/* A gc on_remove callback that records and logs each removal. */
void wrd_images_gc_event(void *ctx, const struct wr_image_gc_event *ev);
/* Upload limit of the import route (body bytes). */
uint64_t wrd_images_upload_limit(void);

#endif
