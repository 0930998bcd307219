/* Handlers of /v1/images (api_images.c). */
#ifndef WARREN_DAEMON_API_IMAGES_H
#define WARREN_DAEMON_API_IMAGES_H

#include <jansson.h>
#include <stdbool.h>

#include "daemon/http.h"
#include "image/image.h"

/* Mutating store operations (import, tag, rm, pin, unpin, gc, push) are
 * the node's admins': requests over the Unix socket and TCP tenants listed
 * in the config's admin_tenants. Otherwise replies 403 permission_denied
 * and returns false. Reads and pulls are every tenant's. */
bool wrd_api_image_admin(struct wrd_req *r, const char *what);
json_t *wrd_image_json(const struct wr_image *img);
void wrd_api_img_import(struct wrd_req *r);
void wrd_api_img_list(struct wrd_req *r);
void wrd_api_img_get(struct wrd_req *r);
void wrd_api_img_tag(struct wrd_req *r);
void wrd_api_img_remove(struct wrd_req *r);
void wrd_api_img_pin(struct wrd_req *r);
void wrd_api_img_unpin(struct wrd_req *r);
void wrd_api_img_gc(struct wrd_req *r);
void wrd_api_img_events(struct wrd_req *r);
/* POST /v1/images/build-vm (admins): a vm-disk image from a rootfs image. */
void wrd_api_img_build_vm(struct wrd_req *r);

#endif
