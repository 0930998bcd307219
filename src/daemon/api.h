/* Route handlers and what they share. Each handler validates its input
 * strictly (unknown fields and parameters are 400 naming them), resolves
 * the sandbox for the caller's tenant, and answers exactly once. */
#ifndef WARREN_DAEMON_API_H
#define WARREN_DAEMON_API_H

#include "daemon/http.h"
#include "daemon/manager.h"

/* The route table (routes.c) and the metrics labels of its patterns. */
extern const struct wrd_route wrd_routes[];
extern const size_t wrd_n_routes;
extern const char *const wrd_route_labels[];
extern const size_t wrd_n_route_labels;

/* {id} of the request: the caller's live sandbox, referenced, and with
 * `begin` also marked busy (a tier operation may run). NULL with the reply
 * set: 404 (unknown, another tenant's) or 409 (not running). Release with
 * wrd_api_done(sb, begin). */
struct wrd_sbx *wrd_api_sandbox(struct wrd_req *r, bool begin);
void wrd_api_done(struct wrd_sbx *sb, bool begun);
/* 404 or 409 for an id that is not live, from the database. */
void wrd_api_not_live(struct wrd_req *r);

/* Reject keys of obj not in allowed (NULL-terminated): 400 naming it. */
int wrd_api_known_keys(struct wrd_req *r, json_t *obj, const char *const *allowed);
/* An environment map: keys non-empty without '=' or NUL. */
int wrd_api_env(struct wrd_req *r, json_t *env, const char *field);

/* sandboxes */
void wrd_api_sb_create(struct wrd_req *r);
/* A create from `body` (validated as POST /v1/sandboxes' body) on behalf
 * of r: the sandbox (referenced), or NULL with r's error reply set. */
struct wrd_sbx *wrd_api_create_body(struct wrd_req *r, json_t *body);
/* api_snapshot.c */
void wrd_api_sb_snapshot(struct wrd_req *r);
void wrd_api_sb_fork(struct wrd_req *r);
void wrd_api_sb_list(struct wrd_req *r);
void wrd_api_sb_get(struct wrd_req *r);
void wrd_api_sb_kill(struct wrd_req *r);
void wrd_api_sb_timeout(struct wrd_req *r);
void wrd_api_sb_events(struct wrd_req *r);
/* audit events (api_events.c); the sandbox route serves lifecycle events
 * unless audit parameters are given. */
void wrd_api_events(struct wrd_req *r);
void wrd_api_sb_events_any(struct wrd_req *r);
/* Record an API refusal (401, 403, 404 for another tenant's sandbox). */
void wrd_audit_api(struct wrd_req *r, unsigned status, const char *reason);
void wrd_api_health(struct wrd_req *r);
void wrd_api_metrics(struct wrd_req *r);

/* lifecycle (api_lifecycle.c): pause, resume, leases */
void wrd_api_sb_pause(struct wrd_req *r);
void wrd_api_sb_resume(struct wrd_req *r);
/* screen and input of full VMs (api_vm.c) */
void wrd_api_vm_screen(struct wrd_req *r);
/* Adds "display" (the VNC endpoint) to a vm sandbox's GET object. */
void wrd_api_vm_display_json(const char *tenant, const char *id, json_t *obj);
void wrd_api_vm_input(struct wrd_req *r);
void wrd_api_lease_create(struct wrd_req *r);
void wrd_api_lease_list(struct wrd_req *r);
void wrd_api_lease_get(struct wrd_req *r);
void wrd_api_lease_heartbeat(struct wrd_req *r);
void wrd_api_lease_suspend(struct wrd_req *r);
void wrd_api_lease_resume(struct wrd_req *r);
void wrd_api_lease_release(struct wrd_req *r);
/* Create: validate on_idle and lease into spec (400/404/409 replied). */
int wrd_api_life_spec(struct wrd_req *r, json_t *body, json_t *spec);
/* network policy (api_network.c) */
void wrd_api_net_get(struct wrd_req *r);
void wrd_api_net_patch(struct wrd_req *r);

/* files */
void wrd_api_fs_read(struct wrd_req *r);
void wrd_api_fs_write(struct wrd_req *r);
void wrd_api_fs_stat(struct wrd_req *r);
void wrd_api_fs_exists(struct wrd_req *r);
void wrd_api_fs_list(struct wrd_req *r);
void wrd_api_fs_mkdir(struct wrd_req *r);
void wrd_api_fs_rename(struct wrd_req *r);
void wrd_api_fs_remove(struct wrd_req *r);
void wrd_api_tar_put(struct wrd_req *r);
void wrd_api_tar_get(struct wrd_req *r);

#endif
