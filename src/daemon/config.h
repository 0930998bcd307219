/* warrend configuration: a JSON file (all keys optional, unknown keys are an
 * error), then environment overrides used by tests and packaging. */
#ifndef WARREN_DAEMON_CONFIG_H
#define WARREN_DAEMON_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

struct wrd_token {
	char *tenant;
	uint8_t sha256[32];
};

struct wrd_image {
	char *name;
	char *path;
};

/* Defaults applied to a create request that leaves a field out. */
struct wrd_limits {
	double cpu;	      /* 0 = no cap */
	int64_t memory_mb;    /* 512 */
	int64_t disk_mb;      /* 1024 */
	int64_t pids;	      /* 512 */
	int64_t timeout;      /* seconds, 300 */
	int64_t idle_timeout; /* seconds, 0 = off */
};

struct wrd_config {
	char *socket_path;  /* /run/warren/warren.sock */
	char *socket_group; /* "warren": chgrp'd to it when the group exists */
	char *state_dir;    /* /var/lib/warren */
	char *run_dir;	    /* /run/warren */
	char *listen;	    /* "host:port" for TCP, NULL = none */
	char *unix_tenant;  /* "default" */
	char *init_path;    /* warren-init */
	char *criu_path;    /* criu for container checkpoints (checkpoint.h) */
	/* the key that signs snapshots' processes (snapshot.h); NULL:
	 * <state_dir>/snapshot.key, made at the first start */
	char *snapshot_key;
	char *cgroup_base; /* "warren" */
	/* bpffs directory for the network filter's pinned links, so that they
	 * outlive a daemon restart; NULL: /sys/fs/bpf/warren-<cgroup_base>
	 * when /sys/fs/bpf is a bpffs, else none (netpolicy.c) */
	char *bpf_pin_dir;
	struct wrd_token *tokens;
	size_t n_tokens;
	struct wrd_image *images;
	size_t n_images;
	struct wrd_limits defaults;
	char *image_store;    /* the "image_store" object as JSON text, or NULL */
	char *lazy;	      /* the "lazy" object as JSON text, or NULL */
	char *network;	      /* the "network" object as JSON text, or NULL (dns.h, network.h) */
	char *functions;      /* the "functions" object as JSON text, or NULL */
	char *audit;	      /* the "audit" object as JSON text, or NULL (audit.h) */
	char **admin_tenants; /* may change the image store; NULL-terminated */
	size_t n_admin_tenants;
	unsigned workers; /* threads of each lane (pool.c): pool, create */
	/* microVM tier (absent: the tier is off): guest kernel, initramfs,
	 * optional qemu binary and accel ("auto", "kvm", "tcg") */
	char *mvm_kernel, *mvm_initrd, *mvm_qemu, *mvm_accel;
	char *mvm_templates; /* NULL: <run>/microvm-templates; "": off */
	/* the full VM tier (config key vm): on when vm_on */
	bool vm_on;
	char *vm_qemu, *vm_qemu_img, *vm_accel;
	uint64_t vm_boot_timeout_ms, vm_shutdown_timeout_ms;
	unsigned spawners;	   /* create processes (spawner.c); 0 = auto */
	unsigned max_sandboxes;	   /* live sandboxes per node */
	unsigned max_commands;	   /* threads for commands, waits, streams (256) */
	unsigned max_connections;  /* per listener */
	unsigned shutdown_timeout; /* seconds to finish in-flight requests */
	int log_level;		   /* enum wr_log_level */
};

/* Load `path` (NULL: defaults only), then apply WARREN_STATE_DIR,
 * WARREN_RUN_DIR, WARREN_CGROUP_BASE, WARREN_INIT. argv0 locates warren-init
 * next to the binary. Errors name the config key in err->field. */
int wrd_config_load(const char *path, struct wrd_config *cfg, wr_err *err);
void wrd_config_free(struct wrd_config *cfg);
/* Is `tenant` in the config's admin_tenants? (Requests over the Unix
 * socket are the node operator's and always admin: api.c.) */
bool wrd_config_is_admin(const struct wrd_config *cfg, const char *tenant);
/* Path of a configured image name, or NULL. */
const char *wrd_config_image(const struct wrd_config *cfg, const char *name);

#endif
