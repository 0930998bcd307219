/* The route table: method, pattern, body kind, thread class, handler, and
 * the metrics label (index into wrd_route_labels). A path that matches a
 * pattern with another method is 405; no pattern at all is 404. */
#include "daemon/api.h"
#include "daemon/api_images.h"
#include "daemon/api_registry.h"
#include "daemon/commands.h"
#include "daemon/functions.h"
#include "daemon/network.h"
#include "daemon/pty.h"

#include "common/cleanup.h"

#define P0 "/v1/health"
#define P1 "/metrics"
#define P2 "/v1/sandboxes"
#define P3 "/v1/sandboxes/{id}"
#define P4 "/v1/sandboxes/{id}/timeout"
#define P5 "/v1/sandboxes/{id}/events"
#define P6 "/v1/sandboxes/{id}/commands"
#define P7 "/v1/sandboxes/{id}/commands/{cid}"
#define P8 "/v1/sandboxes/{id}/commands/{cid}/stdin"
#define P9 "/v1/sandboxes/{id}/commands/{cid}/wait"
#define P10 "/v1/sandboxes/{id}/commands/{cid}/stream"
#define P11 "/v1/sandboxes/{id}/files"
#define P12 "/v1/sandboxes/{id}/files/stat"
#define P13 "/v1/sandboxes/{id}/files/exists"
#define P14 "/v1/sandboxes/{id}/files/list"
#define P15 "/v1/sandboxes/{id}/files/mkdir"
#define P16 "/v1/sandboxes/{id}/files/rename"
#define P17 "/v1/sandboxes/{id}/files/tar"
#define P18 "/v1/sandboxes/{id}/pty"
#define P19 "/v1/images"
#define P20 "/v1/images/import"
#define P21 "/v1/images/gc"
#define P22 "/v1/images/{id}"
#define P23 "/v1/images/{id}/tag"
#define P24 "/v1/images/{id}/pin"
#define P25 "/v1/images/{id}/unpin"
#define P26 "/v1/images/events"
#define P27 "/v1/images/pull"
#define P28 "/v1/images/{id}/push"
#define P29 "/v1/functions/call"
#define P30 "/v1/functions/batch"
#define P31 "/v1/sandboxes/{id}/pause"
#define P32 "/v1/sandboxes/{id}/resume"
#define P33 "/v1/leases"
#define P34 "/v1/leases/{id}"
#define P35 "/v1/leases/{id}/heartbeat"
#define P36 "/v1/leases/{id}/suspend"
#define P37 "/v1/leases/{id}/resume"
#define P38 "/v1/leases/{id}/release"
#define P39 "/v1/events"
#define P40 "/v1/sandboxes/{id}/ports"
#define P41 "/v1/sandboxes/{id}/ports/{cid}"
#define P42 "/v1/sandboxes/{id}/network"
#define P43 "/v1/sandboxes/{id}/snapshot"
#define P44 "/v1/sandboxes/{id}/fork"
#define P45 "/v1/sandboxes/{id}/screen"
#define P46 "/v1/sandboxes/{id}/input"
#define P47 "/v1/images/build-vm"
#define P48 "other"

const char *const wrd_route_labels[] = {
    P0,	 /* 0 */
    P1,	 /* 1 */
    P2,	 /* 2 */
    P3,	 /* 3 */
    P4,	 /* 4 */
    P5,	 /* 5 */
    P6,	 /* 6 */
    P7,	 /* 7 */
    P8,	 /* 8 */
    P9,	 /* 9 */
    P10, /* 10 */
    P11, /* 11 */
    P12, /* 12 */
    P13, /* 13 */
    P14, /* 14 */
    P15, /* 15 */
    P16, /* 16 */
    P17, /* 17 */
    P18, /* 18 */
    P19, /* 19 */
    P20, /* 20 */
    P21, /* 21 */
    P22, /* 22 */
    P23, /* 23 */
    P24, /* 24 */
    P25, /* 25 */
    P26, /* 26 */
    P27, /* 27 */
    P28, /* 28 */
    P29, /* 29 */
    P30, /* 30 */
    P31, /* 31 */
    P32, /* 32 */
    P33, /* 33 */
    P34, /* 34 */
    P35, /* 35 */
    P36, /* 36 */
    P37, /* 37 */
    P38, /* 38 */
    P39, /* 39 */
    P40, /* 40 */
    P41, /* 41 */
    P42, /* 42 */
    P43, /* 43 */
    P44, /* 44 */
    P45, /* 45 */
    P46, /* 46 */
    P47, /* 47 */
    P48, /* 48: no route */
};
const size_t wrd_n_route_labels = WR_ARRAY_SIZE(wrd_route_labels);

#define R(m, l, b, c, f)                                                                           \
	{                                                                                          \
		m, P##l, b, c, f, l                                                                \
	}

/* Fixed literal segments ("files/stat") come before the {cid} patterns
 * they could be confused with; match() compares whole segments. */
const struct wrd_route wrd_routes[] = {
    R("GET", 0, WRD_BODY_NONE, WRD_INLINE, wrd_api_health),
    R("GET", 1, WRD_BODY_NONE, WRD_POOL, wrd_api_metrics),
    R("POST", 2, WRD_BODY_JSON, WRD_CREATE, wrd_api_sb_create),
    R("GET", 2, WRD_BODY_NONE, WRD_POOL, wrd_api_sb_list),
    R("GET", 3, WRD_BODY_NONE, WRD_POOL, wrd_api_sb_get),
    R("DELETE", 3, WRD_BODY_NONE, WRD_POOL, wrd_api_sb_kill),
    R("POST", 4, WRD_BODY_JSON, WRD_POOL, wrd_api_sb_timeout),
    R("GET", 5, WRD_BODY_NONE, WRD_POOL, wrd_api_sb_events_any),
    R("POST", 6, WRD_BODY_JSON, WRD_LONG, wrd_api_cmd_run),
    R("GET", 6, WRD_BODY_NONE, WRD_POOL, wrd_api_cmd_list),
    R("GET", 7, WRD_BODY_NONE, WRD_POOL, wrd_api_cmd_get),
    R("DELETE", 7, WRD_BODY_NONE, WRD_POOL, wrd_api_cmd_kill),
    R("POST", 8, WRD_BODY_JSON, WRD_LONG, wrd_api_cmd_stdin),
    R("GET", 9, WRD_BODY_NONE, WRD_LONG, wrd_api_cmd_wait),
    R("GET", 10, WRD_BODY_NONE, WRD_LONG, wrd_api_cmd_stream),
    R("GET", 11, WRD_BODY_NONE, WRD_LONG, wrd_api_fs_read),
    R("PUT", 11, WRD_BODY_UPLOAD, WRD_LONG, wrd_api_fs_write),
    R("DELETE", 11, WRD_BODY_NONE, WRD_POOL, wrd_api_fs_remove),
    R("GET", 12, WRD_BODY_NONE, WRD_POOL, wrd_api_fs_stat),
    R("GET", 13, WRD_BODY_NONE, WRD_POOL, wrd_api_fs_exists),
    R("GET", 14, WRD_BODY_NONE, WRD_POOL, wrd_api_fs_list),
    R("POST", 15, WRD_BODY_JSON, WRD_POOL, wrd_api_fs_mkdir),
    R("POST", 16, WRD_BODY_JSON, WRD_POOL, wrd_api_fs_rename),
    R("PUT", 17, WRD_BODY_UPLOAD, WRD_LONG, wrd_api_tar_put),
    R("GET", 17, WRD_BODY_NONE, WRD_LONG, wrd_api_tar_get),
    R("GET", 18, WRD_BODY_NONE, WRD_LONG, wrd_api_pty),
    /* images (api_images.c) */
    R("GET", 19, WRD_BODY_NONE, WRD_POOL, wrd_api_img_list),
    R("POST", 20, WRD_BODY_UPLOAD, WRD_LONG, wrd_api_img_import),
    R("POST", 21, WRD_BODY_NONE, WRD_LONG, wrd_api_img_gc),
    R("POST", 47, WRD_BODY_JSON, WRD_LONG, wrd_api_img_build_vm),
    R("GET", 26, WRD_BODY_NONE, WRD_POOL, wrd_api_img_events), /* before {id} */
    R("GET", 22, WRD_BODY_NONE, WRD_POOL, wrd_api_img_get),
    R("DELETE", 22, WRD_BODY_NONE, WRD_POOL, wrd_api_img_remove),
    R("POST", 23, WRD_BODY_JSON, WRD_POOL, wrd_api_img_tag),
    R("POST", 24, WRD_BODY_NONE, WRD_POOL, wrd_api_img_pin),
    R("POST", 25, WRD_BODY_NONE, WRD_POOL, wrd_api_img_unpin),
    /* registry push and pull (api_registry.c) */
    R("POST", 27, WRD_BODY_JSON, WRD_LONG, wrd_api_img_pull),
    R("POST", 28, WRD_BODY_JSON, WRD_LONG, wrd_api_img_push),
    /* functions (api_functions.c) */
    R("POST", 29, WRD_BODY_JSON, WRD_LONG, wrd_api_fn_call),
    R("POST", 30, WRD_BODY_JSON, WRD_LONG, wrd_api_fn_batch),
    /* lifecycle (api_lifecycle.c): the lease calls that wait for their
     * sandboxes run on long threads, their work on the pool */
    R("POST", 31, WRD_BODY_JSON, WRD_POOL, wrd_api_sb_pause),
    R("POST", 32, WRD_BODY_JSON, WRD_POOL, wrd_api_sb_resume),
    R("POST", 33, WRD_BODY_JSON, WRD_POOL, wrd_api_lease_create),
    R("GET", 33, WRD_BODY_NONE, WRD_POOL, wrd_api_lease_list),
    R("GET", 34, WRD_BODY_NONE, WRD_POOL, wrd_api_lease_get),
    R("POST", 35, WRD_BODY_JSON, WRD_POOL, wrd_api_lease_heartbeat),
    R("POST", 36, WRD_BODY_JSON, WRD_LONG, wrd_api_lease_suspend),
    R("POST", 37, WRD_BODY_JSON, WRD_LONG, wrd_api_lease_resume),
    R("POST", 38, WRD_BODY_JSON, WRD_LONG, wrd_api_lease_release),
    /* audit events (api_events.c) */
    R("GET", 39, WRD_BODY_NONE, WRD_POOL, wrd_api_events),
    /* published ports (network_ports.c) */
    R("POST", 40, WRD_BODY_JSON, WRD_POOL, wrd_api_ports_add),
    R("GET", 40, WRD_BODY_NONE, WRD_POOL, wrd_api_ports_list),
    R("DELETE", 41, WRD_BODY_NONE, WRD_POOL, wrd_api_ports_del),
    /* network policy (api_network.c) */
    R("GET", 42, WRD_BODY_NONE, WRD_POOL, wrd_api_net_get),
    R("PATCH", 42, WRD_BODY_JSON, WRD_POOL, wrd_api_net_patch),
    /* snapshots (api_snapshot.c) */
    R("POST", 43, WRD_BODY_JSON, WRD_LONG, wrd_api_sb_snapshot),
    R("POST", 44, WRD_BODY_JSON, WRD_LONG, wrd_api_sb_fork),
    /* screen and input of full VMs (api_vm.c) */
    R("GET", 45, WRD_BODY_NONE, WRD_LONG, wrd_api_vm_screen),
    R("POST", 46, WRD_BODY_JSON, WRD_LONG, wrd_api_vm_input),
};
const size_t wrd_n_routes = WR_ARRAY_SIZE(wrd_routes);
