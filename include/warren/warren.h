/* libwarren: a blocking C client for the warren daemon (API v1, docs/API.md).
 *
 * Conventions
 *   - Every fallible call returns an int: >= 0 on success, negative (-errno
 *     like) on failure. On failure, when `err` is not NULL, *err receives a
 *     warren_error the caller frees with warren_error_free(). *err must be
 *     NULL on entry.
 *   - Handles are opaque. Structures the library returns (info, results,
 *     entries) are owned by the caller and freed with their _free function;
 *     later versions only append fields to them.
 *   - Option structures are caller-allocated: start them from their _INIT
 *     macro (or zero them) so fields added later keep their defaults.
 *   - A warren_client may be shared by threads; each call uses its own
 *     connection from a shared pool. Sandbox and command handles refer to
 *     their client, which must outlive them.
 */
#ifndef WARREN_WARREN_H
#define WARREN_WARREN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WARREN_API __attribute__((visibility("default")))

#define WARREN_DEFAULT_SOCKET "/run/warren/warren.sock"

typedef struct warren_client warren_client;
typedef struct warren_sandbox warren_sandbox;
typedef struct warren_command warren_command;
typedef struct warren_error warren_error;

/* ---- errors ---------------------------------------------------------- */

/* The API error code ("not_found", "invalid_argument", ...: see API.md) or,
 * for failures that never reached an API answer, one of:
 *   "transport"  the daemon could not be reached or the connection broke
 *   "protocol"   the daemon's answer was not what API v1 specifies
 *   "io"         reading or writing a local file descriptor failed
 *   "cancelled"  a callback asked to stop
 *   "invalid_argument" is also used for arguments rejected before sending. */
WARREN_API const char *warren_error_code(const warren_error *err);
/* HTTP status of the answer, or 0 when there was none. */
WARREN_API int warren_error_http_status(const warren_error *err);
/* An errno value describing the failure (ENOENT for not_found, ...). */
WARREN_API int warren_error_errno(const warren_error *err);
/* The message, outermost context first: "kill sandbox 5f0c: not found". */
WARREN_API const char *warren_error_message(const warren_error *err);
/* The request field at fault (API's "field"), or NULL. */
WARREN_API const char *warren_error_field(const warren_error *err);
WARREN_API void warren_error_free(warren_error *err);

/* Free a buffer the library returned (warren_file_read). */
WARREN_API void warren_free(void *p);

WARREN_API const char *warren_version(void);

/* ---- client ---------------------------------------------------------- */

#define WARREN_CLIENT_OPTS_VERSION 1
typedef struct {
	unsigned int version;
	/* Unix socket of the daemon; used when url is NULL. Default
	 * WARREN_DEFAULT_SOCKET. */
	const char *socket_path;
	/* "http://host:port" of a TCP listener. Takes precedence over
	 * socket_path. */
	const char *url;
	/* Bearer token: required on TCP, optional on the socket. */
	const char *token;
	/* Connect timeout in milliseconds (0: 10 s). */
	long connect_timeout_ms;
	/* Whole-request timeout for calls that are not commands, file or tar
	 * transfers, in milliseconds (0: none). */
	long request_timeout_ms;
} warren_client_opts;
#define WARREN_CLIENT_OPTS_INIT                                                                    \
	{                                                                                          \
		WARREN_CLIENT_OPTS_VERSION                                                         \
	}

WARREN_API int warren_client_new(const warren_client_opts *opts, warren_client **out,
				 warren_error **err);
WARREN_API void warren_client_free(warren_client *client);

typedef struct {
	char *status;  /* "ok" */
	char *version; /* the daemon's version */
	int64_t sandboxes;
	char *json; /* the answer as received */
} warren_health;
WARREN_API int warren_health_get(warren_client *client, warren_health **out, warren_error **err);
WARREN_API void warren_health_free(warren_health *h);

/* ---- sandboxes ------------------------------------------------------- */

typedef struct {
	const char *key;
	const char *value;
} warren_kv;

/* Credentials for one registry call: username + password, or a ready
 * bearer token; all NULL for anonymous. Sent to warrend with the request,
 * never stored. insecure allows plain http and unverified TLS (loopback
 * registries need no flag). */
typedef struct {
	const char *username;
	const char *password;
	const char *token;
	bool insecure;
} warren_registry_auth;

/* Version 2 added layers, pull and registry_auth; 3 on_idle and lease; 4 network; 5 cpu_max. */
#define WARREN_SANDBOX_OPTS_VERSION 6
typedef struct {
	unsigned int version;
	const char *image; /* required: a store ref (name:tag, digest), a registry ref
			      (host[:port]/repo[:tag|@digest], pulled when missing), a
			      configured image name or a node path */
	const char *tier;  /* NULL: the daemon's default ("container") */
	double cpu;	   /* request, and the cap unless cpu_max; 0: none */
	int64_t memory_mb; /* 0: default */
	int64_t disk_mb;
	int64_t pids;
	const warren_kv *env;
	size_t n_env;
	const char *workdir;
	int64_t user; /* -1 or 0 with user_set false: the daemon's default */
	bool user_set;
	const warren_kv *labels;
	size_t n_labels;
	int64_t timeout;      /* seconds of lifetime, 0: default */
	int64_t idle_timeout; /* seconds, 0: off */
	const char *on_timeout;
	/* version 2: image references stacked on image as overlay lowers,
	 * base first (1..16; each a store ref, registry ref or configured
	 * name) */
	const char *const *layers;
	size_t n_layers;
	/* registry references: "missing" (NULL), "always" or "never" */
	const char *pull;
	/* credentials for registry references (insecure is not used here:
	 * loopback registries need none); NULL = anonymous */
	const warren_registry_auth *registry_auth;
	/* version 3: after idle_timeout, "pause" (NULL: the default) or
	 * "kill"; on_timeout may be "pause" too. lease: the sandbox follows
	 * that lease (warren_lease_create) */
	const char *on_idle;
	const char *lease;
	/* version 4: the network policy, a JSON object as docs/API.md
	 * ("Network") describes: {"mode": "none|allowlist|open", "allow":
	 * [{"cidr", "ports", "protocol"}], "domains": [...], "services": [...]}.
	 * NULL: mode none (loopback only). */
	const char *network_json;
	/* version 5: CPU quota of a container sandbox, in cores (0 < x <= 64,
	 * at least cpu): it may burst above cpu up to this. 0: cpu is also
	 * the cap. */
	double cpu_max;
	/* version 6: image a snapshot taken with its processes
	 * (warren_sandbox_snapshot_with): 0 restores them (the daemon's
	 * default), -1 takes its files only, 1 requires processes (an image
	 * without them is an error) */
	int processes;
} warren_sandbox_opts;
#define WARREN_SANDBOX_OPTS_INIT                                                                   \
	{                                                                                          \
		WARREN_SANDBOX_OPTS_VERSION                                                        \
	}

typedef struct {
	char *id;
	char *tier;
	char *image;
	char *state; /* running, paused, killed, timed_out, failed, creating */
	char *created_at;
	char *expires_at; /* may be NULL */
	double cpu;
	int64_t memory_mb, disk_mb, pids, user;
	char *workdir;
	warren_kv *labels; /* strings owned by the info */
	size_t n_labels;
	int64_t idle_timeout;
	char *on_timeout;
	char *json; /* the sandbox object as received */
	/* lifecycle: NULL when not given */
	char *on_idle;
	char *lease;
	char *pause_reason;	  /* paused: request, idle, lease, timeout */
	double timeout_remaining; /* paused: seconds of lifetime left */
	/* what a live sandbox uses (has_usage false when not live) */
	bool has_usage;
	double usage_cpu_s;
	int64_t usage_memory_bytes, usage_memory_peak_bytes, usage_pids;
	/* CPU harvesting: the cap (0: none), CPUs used over the daemon's last
	 * sampling interval, "active" or "idle" (NULL: not given), the weight
	 * in force (0 while idle) */
	double cpu_max;
	double usage_cpu_cores;
	char *harvest_state;
	int64_t harvest_cpu_weight;
} warren_sandbox_info;
WARREN_API void warren_sandbox_info_free(warren_sandbox_info *info);

WARREN_API int warren_sandbox_create(warren_client *client, const warren_sandbox_opts *opts,
				     warren_sandbox **out, warren_error **err);
/* A handle on an existing sandbox; checks that it exists (GET). */
WARREN_API int warren_sandbox_connect(warren_client *client, const char *id, warren_sandbox **out,
				      warren_error **err);
/* Frees the handle only: the sandbox keeps running. */
WARREN_API void warren_sandbox_free(warren_sandbox *sb);
WARREN_API const char *warren_sandbox_id(const warren_sandbox *sb);
/* The sandbox as create or connect saw it (owned by the handle). */
WARREN_API const warren_sandbox_info *warren_sandbox_last_info(const warren_sandbox *sb);
/* Fresh state from the daemon. */
WARREN_API int warren_sandbox_get_info(warren_sandbox *sb, warren_sandbox_info **out,
				       warren_error **err);
WARREN_API int warren_sandbox_kill(warren_sandbox *sb, warren_error **err);
/* Expire `seconds` from now; *out (if not NULL) receives the new state. */
WARREN_API int warren_sandbox_set_timeout(warren_sandbox *sb, int64_t seconds,
					  warren_sandbox_info **out, warren_error **err);

/* Pause: freeze every process (memory kept; the lifetime clock stops).
 * Resume: thaw; timeout > 0 also sets a new lifetime from now. A paused
 * sandbox is resumed by any call that needs it running (exec, files,
 * pty), so an explicit resume is optional. *out (if not NULL) receives
 * the new state. */
WARREN_API int warren_sandbox_pause(warren_sandbox *sb, warren_sandbox_info **out,
				    warren_error **err);
/* Pause to disk (keep_memory false): the processes' state goes to disk and
 * their memory is freed (containers: CRIU; microvm and vm: the VM's state);
 * resume (or any call that needs it running) brings it back. */
WARREN_API int warren_sandbox_pause_to_disk(warren_sandbox *sb, warren_sandbox_info **out,
					    warren_error **err);
WARREN_API int warren_sandbox_resume(warren_sandbox *sb, int64_t timeout, warren_sandbox_info **out,
				     warren_error **err);

/* ---- screen and input (tier "vm") ------------------------------------ */

/* The screen as PNG, written to fd. */
WARREN_API int warren_sandbox_screenshot(warren_sandbox *sb, int fd, warren_error **err);
/* Types text on the VM's keyboard. */
WARREN_API int warren_sandbox_type_text(warren_sandbox *sb, const char *text, warren_error **err);
/* Presses keys together and releases them ({"ctrl", "c"}). */
WARREN_API int warren_sandbox_press_keys(warren_sandbox *sb, const char *const *keys, size_t n,
					 warren_error **err);
/* type "move", "click" (button NULL: left) or "scroll" (dy wheel steps,
 * negative up) at pixel x, y. */
WARREN_API int warren_sandbox_pointer(warren_sandbox *sb, const char *type, int x, int y,
				      const char *button, int dy, warren_error **err);

/* ---- leases ----------------------------------------------------------- */

/* A training job's hold on its sandboxes: heartbeats keep them running;
 * without one for grace_s they are paused, a heartbeat resumes them; after
 * expire_s without one, on_expire applies ("kill", "pause", "snapshot":
 * paused where the node has no snapshots). */
#define WARREN_LEASE_OPTS_VERSION 2
typedef struct {
	unsigned int version;
	const char *id;	       /* NULL: generated */
	double grace_s;	       /* 0: the daemon's default (60) */
	double expire_s;       /* 0: the daemon's default (3600) */
	const char *on_expire; /* NULL: "kill" */
	/* version 2: suspended, the sandboxes are paused to disk (memory
	 * freed) where they can be (keep_memory false) */
	int to_disk;
} warren_lease_opts;
#define WARREN_LEASE_OPTS_INIT                                                                     \
	{                                                                                          \
		WARREN_LEASE_OPTS_VERSION                                                          \
	}

typedef struct {
	char *id;
	char *state;	      /* active, suspended, expired, released */
	char *suspend_reason; /* suspended: heartbeat or request */
	double grace_s, expire_s;
	char *on_expire;
	char *created_at, *last_heartbeat_at, *suspends_at, *expires_at, *ended_at;
	char *ended_action; /* ended: kill, pause, keep */
	int64_t sandboxes;  /* live sandboxes under it */
	char *json;
} warren_lease_info;
WARREN_API void warren_lease_info_free(warren_lease_info *info);

/* *out may be NULL in every call below but create and get. */
WARREN_API int warren_lease_create(warren_client *client, const warren_lease_opts *opts,
				   warren_lease_info **out, warren_error **err);
WARREN_API int warren_lease_get(warren_client *client, const char *id, warren_lease_info **out,
				warren_error **err);
/* Every lease of the caller's tenant; cb as for warren_sandbox_list. */
typedef int (*warren_lease_cb)(void *ctx, const warren_lease_info *info);
WARREN_API int warren_lease_list(warren_client *client, warren_lease_cb cb, void *ctx,
				 warren_error **err);
WARREN_API int warren_lease_heartbeat(warren_client *client, const char *id,
				      warren_lease_info **out, warren_error **err);
/* suspend, resume and release return once the sandboxes follow. */
WARREN_API int warren_lease_suspend(warren_client *client, const char *id, warren_lease_info **out,
				    warren_error **err);
WARREN_API int warren_lease_resume(warren_client *client, const char *id, warren_lease_info **out,
				   warren_error **err);
/* keep: the sandboxes live on (resumed); else they are killed. */
WARREN_API int warren_lease_release(warren_client *client, const char *id, bool keep,
				    warren_lease_info **out, warren_error **err);

/* Network policy (docs/API.md, "Network"). *json_out (free with
 * warren_free) receives the answer: the policy in force, "enforced" and the
 * "refusals" (total, reported, pending, events_dropped, recent[]). The
 * patch is a JSON object with merge semantics: fields left out stay as
 * they are; mode/allow/domains/services replace; allow_add, allow_remove,
 * domains_add, domains_remove, services_add, services_remove edit. */
WARREN_API int warren_sandbox_network_get(warren_sandbox *sb, char **json_out, warren_error **err);
WARREN_API int warren_sandbox_network_patch(warren_sandbox *sb, const char *patch_json,
					    char **json_out, warren_error **err);

/* Published ports (docs/API-NETWORK.md, "Published ports"; src/client/ports.c):
 * a TCP port of a networked sandbox made reachable from the host. */
#define WARREN_PORT_OPTS_VERSION 1
typedef struct {
	unsigned int version;	/* WARREN_PORT_OPTS_VERSION */
	unsigned int port;	/* the sandbox's port, 1-65535 (required) */
	const char *host;	/* NULL: 127.0.0.1; 0.0.0.0 or an address of the host */
	unsigned int host_port; /* 0: a free port, chosen by the daemon */
	bool unix_socket;	/* a Unix socket of the daemon's instead of host/host_port */
} warren_port_opts;
/* *json_out (free with warren_free) receives the publication:
 * {"port", "host", "host_port", "via": "nat"|"relay"} or {"port", "unix",
 * "via": "relay"}. */
WARREN_API int warren_sandbox_port_publish(warren_sandbox *sb, const warren_port_opts *opts,
					   char **json_out, warren_error **err);
/* *json_out: {"ports": [publication, ...]}. */
WARREN_API int warren_sandbox_port_list(warren_sandbox *sb, char **json_out, warren_error **err);
/* Every publication of the sandbox's port `port`. */
WARREN_API int warren_sandbox_port_unpublish(warren_sandbox *sb, unsigned int port,
					     warren_error **err);

#define WARREN_LIST_OPTS_VERSION 1
typedef struct {
	unsigned int version;
	const char *state;	 /* NULL: any */
	const warren_kv *labels; /* all must match */
	size_t n_labels;
	int page_size; /* 0: the daemon's default */
} warren_list_opts;
#define WARREN_LIST_OPTS_INIT                                                                      \
	{                                                                                          \
		WARREN_LIST_OPTS_VERSION                                                           \
	}

/* Called once per sandbox, across every page, in creation order. The info
 * is borrowed for the call. A nonzero return stops the listing; the list
 * call then returns that value (if positive) without an error. */
typedef int (*warren_sandbox_cb)(void *ctx, const warren_sandbox_info *info);
WARREN_API int warren_sandbox_list(warren_client *client, const warren_list_opts *opts,
				   warren_sandbox_cb cb, void *ctx, warren_error **err);

/* ---- commands -------------------------------------------------------- */

enum { WARREN_STDOUT = 1, WARREN_STDERR = 2 };

/* Streamed output. A nonzero return cancels the call ("cancelled"). */
typedef int (*warren_output_cb)(void *ctx, int stream, const char *data, size_t len);

#define WARREN_EXEC_OPTS_VERSION 1
typedef struct {
	unsigned int version;
	const char *const *argv; /* NULL-terminated argv, or NULL and: */
	const char *shell;	 /* a string run with sh -c */
	const warren_kv *env;
	size_t n_env;
	const char *cwd;
	int64_t user;
	bool user_set;
	const void *stdin_data; /* given whole on the command's stdin */
	size_t stdin_len;
	double timeout;		    /* seconds, 0: none */
	int64_t output_cap;	    /* bytes per stream, 0: default */
	bool binary;		    /* exact bytes (base64 on the wire) instead of UTF-8 text */
	warren_output_cb on_output; /* set: stream the output as it happens */
	void *ctx;
} warren_exec_opts;
#define WARREN_EXEC_OPTS_INIT                                                                      \
	{                                                                                          \
		WARREN_EXEC_OPTS_VERSION                                                           \
	}

typedef struct {
	int exit_code;
	int signal;
	char *reason;	   /* exited, signaled, timeout, oom, killed, start_failed */
	char *stdout_data; /* NUL-terminated; NULL when streamed */
	size_t stdout_len;
	char *stderr_data;
	size_t stderr_len;
	bool stdout_truncated, stderr_truncated;
	double duration_ms, cpu_ms;
	int64_t memory_peak_bytes;
	char *json; /* the result (or exit line) as received */
} warren_exec_result;
WARREN_API void warren_exec_result_free(warren_exec_result *res);

/* Run a command to completion. With opts->on_output the output is
 * streamed to it and not kept in the result. */
WARREN_API int warren_sandbox_exec(warren_sandbox *sb, const warren_exec_opts *opts,
				   warren_exec_result **out, warren_error **err);

/* Background commands. on_output in opts is ignored. */
WARREN_API int warren_command_start(warren_sandbox *sb, const warren_exec_opts *opts,
				    warren_command **out, warren_error **err);
/* A handle on an existing command by id (no request). */
WARREN_API int warren_command_open(warren_sandbox *sb, const char *id, warren_command **out,
				   warren_error **err);
WARREN_API const char *warren_command_id(const warren_command *cmd);
WARREN_API void warren_command_free(warren_command *cmd);
/* Wait up to `timeout` seconds (<= 0: until it ends). Returns 1 with *out
 * when the command ended, 0 (and *out NULL) when it is still running. */
WARREN_API int warren_command_wait(warren_command *cmd, double timeout, warren_exec_result **out,
				   warren_error **err);
/* Attach to its output from the start; returns when it ends. */
WARREN_API int warren_command_stream(warren_command *cmd, warren_output_cb cb, void *ctx,
				     warren_exec_result **out, warren_error **err);
WARREN_API int warren_command_send_stdin(warren_command *cmd, const void *data, size_t len,
					 bool eof, warren_error **err);
WARREN_API int warren_command_kill(warren_command *cmd, warren_error **err);

/* ---- interactive shells (GET .../pty, docs/API.md) --------------------- */

typedef struct warren_pty warren_pty;

#define WARREN_PTY_OPTS_VERSION 1
typedef struct {
	unsigned int version;
	const char *const *argv; /* NULL: the sandbox's shell (/bin/sh) */
	const warren_kv *env;
	size_t n_env;
	const char *cwd;
	int64_t user;
	bool user_set;
	unsigned int rows, cols; /* 0: 24 x 80 */
} warren_pty_opts;
#define WARREN_PTY_OPTS_INIT                                                                       \
	{                                                                                          \
		WARREN_PTY_OPTS_VERSION                                                            \
	}

/* Frame types of the warren-pty/1 protocol. */
enum {
	WARREN_PTY_DATA = 0,   /* either way: terminal input / output bytes */
	WARREN_PTY_RESIZE = 1, /* to the daemon */
	WARREN_PTY_EOF = 2,    /* to the daemon */
	WARREN_PTY_EXIT = 3,   /* from the daemon: the result, then it closes */
};

/* Run a command (opts->argv, default the shell) on a new terminal in the
 * sandbox, over a connection of its own (the Unix socket or http://; not
 * https://). The handle may be used by two threads at once: one sending,
 * one reading. */
WARREN_API int warren_sandbox_pty_open(warren_sandbox *sb, const warren_pty_opts *opts,
				       warren_pty **out, warren_error **err);
/* The connection's fd, for poll(): readable when a frame starts. The handle
 * reads exactly one frame per call and never buffers past it. */
WARREN_API int warren_pty_fd(const warren_pty *pty);
/* Type into the terminal (any length: sent as frames of up to 1 MiB). */
WARREN_API int warren_pty_send_data(warren_pty *pty, const void *data, size_t len,
				    warren_error **err);
WARREN_API int warren_pty_resize(warren_pty *pty, unsigned int rows, unsigned int cols,
				 warren_error **err);
/* End of input: the terminal's EOF character (^D) is typed. */
WARREN_API int warren_pty_send_eof(warren_pty *pty, warren_error **err);
/* Read the next frame (blocking). Returns WARREN_PTY_DATA with *data and
 * *len (owned by the handle, valid until the next call), or WARREN_PTY_EXIT
 * with *res (the command's result, the caller frees it); after the exit
 * frame the daemon closes the connection. Negative on failure: "transport"
 * when the connection ended without an exit frame. */
WARREN_API int warren_pty_read_frame(warren_pty *pty, const void **data, size_t *len,
				     warren_exec_result **res, warren_error **err);
/* Close the connection (before the exit frame: the command's whole process
 * tree is killed) and free the handle. */
WARREN_API void warren_pty_close(warren_pty *pty);

/* ---- files ----------------------------------------------------------- */

typedef enum {
	WARREN_FILE_OTHER = 0,
	WARREN_FILE_REGULAR,
	WARREN_FILE_DIR,
	WARREN_FILE_SYMLINK,
} warren_file_type;

typedef struct {
	char *path;
	char *name;
	warren_file_type type;
	int64_t size;
	unsigned int mode; /* permission bits */
	int64_t uid, gid;
	char *mtime;  /* as the daemon reports it */
	char *target; /* symlinks; else NULL */
	char *json;   /* the entry as received */
} warren_file_entry;
WARREN_API void warren_file_entry_free(warren_file_entry *e);

typedef struct {
	size_t count;
	warren_file_entry *entries;
} warren_file_list;
WARREN_API void warren_file_list_free(warren_file_list *l);

#define WARREN_WRITE_OPTS_VERSION 1
typedef struct {
	unsigned int version;
	unsigned int mode; /* 0: the daemon's default */
	bool parents;	   /* create missing parent directories */
} warren_write_opts;
#define WARREN_WRITE_OPTS_INIT                                                                     \
	{                                                                                          \
		WARREN_WRITE_OPTS_VERSION                                                          \
	}

/* Whole file into a malloc'd buffer (NUL-terminated; free with warren_free). */
WARREN_API int warren_file_read(warren_sandbox *sb, const char *path, void **data, size_t *len,
				warren_error **err);
/* Stream the file into fd. */
WARREN_API int warren_file_read_fd(warren_sandbox *sb, const char *path, int fd,
				   warren_error **err);
WARREN_API int warren_file_write(warren_sandbox *sb, const char *path, const void *data, size_t len,
				 const warren_write_opts *opts, warren_error **err);
/* Stream fd (to EOF) into the file. */
WARREN_API int warren_file_write_fd(warren_sandbox *sb, const char *path, int fd,
				    const warren_write_opts *opts, warren_error **err);
WARREN_API int warren_file_stat(warren_sandbox *sb, const char *path, warren_file_entry **out,
				warren_error **err);
/* 1 if it exists, 0 if not. */
WARREN_API int warren_file_exists(warren_sandbox *sb, const char *path, warren_error **err);
/* depth 1..16 (0: 1). */
WARREN_API int warren_file_list_dir(warren_sandbox *sb, const char *path, int depth,
				    warren_file_list **out, warren_error **err);
/* mode 0: the daemon's default. *out may be NULL. */
WARREN_API int warren_file_mkdir(warren_sandbox *sb, const char *path, bool parents,
				 unsigned int mode, warren_file_entry **out, warren_error **err);
WARREN_API int warren_file_rename(warren_sandbox *sb, const char *from, const char *to,
				  warren_file_entry **out, warren_error **err);
WARREN_API int warren_file_remove(warren_sandbox *sb, const char *path, bool recursive,
				  warren_error **err);
/* Upload a tar stream read from fd, unpacked under dest. */
WARREN_API int warren_tar_upload(warren_sandbox *sb, const char *dest, int fd, int64_t *files,
				 int64_t *bytes, warren_error **err);
/* Download the tree at path as a tar stream written to fd. */
WARREN_API int warren_tar_download(warren_sandbox *sb, const char *path, int fd,
				   warren_error **err);

/* ---- events ---------------------------------------------------------- */

typedef struct {
	int64_t seq;
	char *time;
	char *type;
	char *detail_json; /* the "detail" object, serialized */
	char *json;	   /* the event as received */
} warren_event;

typedef struct {
	size_t count;
	warren_event *events;
} warren_event_list;
WARREN_API void warren_event_list_free(warren_event_list *l);

/* Events with seq > since, at most limit (0: the daemon's default). */
WARREN_API int warren_sandbox_events(warren_sandbox *sb, int64_t since, int limit,
				     warren_event_list **out, warren_error **err);

/* ---- audit events (API.md "Audit events") ------------------------------ */

/* One audit row: an attempt some layer refused or limited, or `count`
 * identical ones merged (first at time_ns, last at last_ns). */
typedef struct {
	int64_t id;
	int64_t rev;   /* the write that last changed it (follow streams) */
	char *sandbox; /* "" when not tied to a sandbox (API refusals) */
	char *tenant;
	char *layer; /* seccomp, landlock, bpf-net, dns, cgroup-limit, api, file */
	bool denied;
	char *action;  /* "ptrace", "scope.signal", "oom_kill", "GET /v1/..." */
	char *subject; /* a path, destination, name or reason; NULL if none */
	char *time;    /* RFC 3339 of the first */
	int64_t time_ns, last_ns;
	int64_t count;
	char *severity;	  /* info, low, medium, high, critical */
	char *rule;	  /* the detection rule that flagged it, or NULL */
	char *summary;	  /* "ptrace refused 120000 times in 10.0 s" */
	int64_t pid;	  /* in the sandbox; 0 unknown */
	char *comm, *exe; /* NULL unknown */
	char *what_json;  /* the "what" object, serialized */
	char *json;	  /* the event as received */
} warren_audit_event;

typedef struct {
	size_t count;
	warren_audit_event *events; /* oldest first */
	int64_t next_after;	    /* pass as `after` for the next page */
} warren_audit_list;
WARREN_API void warren_audit_list_free(warren_audit_list *l);

/* A query; zero fields are "any". Without `after`: the newest `limit`
 * matching events; with it: the first `limit` after that id. */
typedef struct {
	const char *sandbox;
	const char *tenant; /* admins only (another tenant's is 403) */
	const char *layer;  /* one layer or a comma-separated list */
	const char *since;  /* RFC 3339 UTC, epoch seconds, or "10m" ago */
	int64_t after;
	int limit;    /* 1..1000; 0 = the daemon's default (100) */
	int denied;   /* -1 any (set it: 0 means refusals excluded), 0, 1 */
	bool flagged; /* only events a detection rule flagged */
} warren_audit_query;
#define WARREN_AUDIT_QUERY_INIT                                                                    \
	{                                                                                          \
		.denied = -1                                                                       \
	}

WARREN_API int warren_audit_events(warren_client *cl, const warren_audit_query *q,
				   warren_audit_list **out, warren_error **err);
/* The live stream: the query's events first, then each new or grown one as
 * it is recorded (a row again with a larger count when repeats merge).
 * fn's event is valid during the call; a nonzero return ends the stream
 * (and the call returns 0). Blocks until then or the connection ends. */
typedef int (*warren_audit_fn)(void *ctx, const warren_audit_event *ev);
WARREN_API int warren_audit_follow(warren_client *cl, const warren_audit_query *q,
				   warren_audit_fn fn, void *ctx, warren_error **err);

/* ---- images (the node's image store; API.md "Images") ----------------- */

/* A reference is "name[:tag]" (tag "latest" by default), "name@sha256:..."
 * or "sha256:..." (a unique prefix of >= 12 hex digits works). */
typedef struct {
	char *digest; /* "sha256:<64 hex>" */
	int64_t size; /* bytes of the EROFS blob */
	char *source;
	char *created_at;
	char *last_used_at; /* NULL: never used */
	bool pinned;
	bool complete; /* false while a lazily pulled blob is not local */
	int64_t holders;
	char **refs; /* names pointing at it */
	size_t n_refs;
	char *json; /* the image object as received */
	char *kind; /* "rootfs", or "vm-disk" (a bootable disk for tier "vm") */
} warren_image;
WARREN_API void warren_image_free(warren_image *img);

/* Snapshot: the sandbox's filesystem changes as store image `name`
 * (name[:tag]; NULL: "snapshot/<id>:<ms>"), stacked on the image the
 * sandbox came from; creating a sandbox with the name as image recreates
 * the filesystem. A running sandbox is frozen during the capture, a paused
 * one stays paused. *out (if not NULL) receives the image. */
WARREN_API int warren_sandbox_snapshot(warren_sandbox *sb, const char *name, warren_image **out,
				       warren_error **err);
/* The same with flags: WARREN_SNAPSHOT_PROCESSES saves the running processes
 * too (container tier, with CRIU; frozen while saved, with the files); a
 * sandbox created from the snapshot goes on from them (a create body's
 * "processes": false takes the files only). The image's config label
 * "dev.warren.snapshot.processes" names the image that holds them. A fork
 * takes {"processes": true} in overrides_json. */
#define WARREN_SNAPSHOT_PROCESSES 1u
WARREN_API int warren_sandbox_snapshot_with(warren_sandbox *sb, const char *name, unsigned flags,
					    warren_image **out, warren_error **err);
/* Fork: count (1..256) new sandboxes from the sandbox's current filesystem
 * (a snapshot, then creates with the source's settings). overrides_json: a
 * JSON object of create fields that differ (memory_mb, cpu, env, ...) or
 * NULL. *ids (if not NULL) receives the new ids, a NULL-terminated array
 * (free each and the array); *json (if not NULL) the whole answer. */
WARREN_API int warren_sandbox_fork(warren_sandbox *sb, int count, const char *overrides_json,
				   char ***ids, char **json, warren_error **err);

typedef struct {
	size_t count;
	warren_image *images; /* newest first */
	int64_t blob_bytes, cache_bytes, quota_bytes;
} warren_image_list;
WARREN_API void warren_image_list_free(warren_image_list *l);
WARREN_API int warren_image_list_get(warren_client *client, warren_image_list **out,
				     warren_error **err);

#define WARREN_IMAGE_IMPORT_OPTS_VERSION 2
typedef struct {
	unsigned int version;
	const char *ref;    /* name[:tag] to point at the result, or NULL */
	const char *format; /* NULL/"auto", "dir", "tar", "oci-layout", "oci-archive",
			       "docker-archive", "vm-disk" (a raw or qcow2 disk for
			       tier "vm") */
	/* One of: a path on the daemon's node (Unix socket only), or a file
	 * descriptor streamed as the body (a tar, plain/gz/zstd, or an
	 * archive), read to EOF. */
	const char *node_path;
	int fd; /* -1: none */
	/* version 2: a vm-disk's firmware, "bios" or "uefi"; NULL: detected
	 * (GPT with an EFI system partition and no BIOS boot partition) */
	const char *firmware;
} warren_image_import_opts;
#define WARREN_IMAGE_IMPORT_OPTS_INIT                                                              \
	{                                                                                          \
		WARREN_IMAGE_IMPORT_OPTS_VERSION, .fd = -1                                         \
	}
WARREN_API int warren_image_import(warren_client *client, const warren_image_import_opts *opts,
				   warren_image **out, warren_error **err);
WARREN_API int warren_image_get(warren_client *client, const char *ref, warren_image **out,
				warren_error **err);
/* Point new_ref (name[:tag]) at the image ref names; out may be NULL. */
WARREN_API int warren_image_tag(warren_client *client, const char *ref, const char *new_ref,
				warren_image **out, warren_error **err);
/* Remove a name (and the image when nothing else keeps it) or, by digest,
 * the image (force: also when named or pinned; never while in use).
 * *removed (may be NULL) tells whether the image itself went. */
WARREN_API int warren_image_remove(warren_client *client, const char *ref, bool force,
				   bool *removed, warren_error **err);
WARREN_API int warren_image_pin(warren_client *client, const char *ref, bool pinned,
				warren_image **out, warren_error **err);
/* A bootable vm-disk image (tier "vm") built on the node from the rootfs
 * image `image` (it must bring systemd and qemu-guest-agent) and Debian's
 * cloud kernel: named ref (may be NULL), a disk of size (NULL: "4G"; bytes
 * or "20G"). Takes minutes; out may be NULL. */
WARREN_API int warren_image_build_vm(warren_client *client, const char *image, const char *ref,
				     const char *size, warren_image **out, warren_error **err);
/* The same with the disk's firmware: "bios" (NULL) or "uefi" (a GPT disk
 * with an EFI system partition and GRUB for UEFI; it boots with OVMF). */
WARREN_API int warren_image_build_vm_firmware(warren_client *client, const char *image,
					      const char *ref, const char *size,
					      const char *firmware, warren_image **out,
					      warren_error **err);
/* One reclamation pass; *report_json (free with warren_free) is the API's
 * answer (removed images, freed bytes, skips). */
WARREN_API int warren_image_gc(warren_client *client, bool dry_run, bool prune_untagged,
			       char **report_json, warren_error **err);

/* ---- functions (the function tier) --------------------------------------- */

typedef struct {
	const char *path; /* relative to the call's working dir (/work) */
	const void *data; /* text is sent as is, other bytes base64-encoded */
	size_t len;
	uint32_t mode; /* 0: 0644 */
} warren_call_file;

#define WARREN_CALL_OPTS_VERSION 1
typedef struct {
	unsigned int version;
	const char *image;	 /* configured name, or a path (Unix socket only) */
	const char *const *argv; /* NULL-terminated; or, with language: */
	const char *language;	 /* "python" */
	const char *code;	 /* source run in the warm interpreter */
	const warren_kv *env;
	size_t n_env;
	const void *stdin_data;
	size_t stdin_len;
	const warren_call_file *files;
	size_t n_files;
	double timeout;	    /* seconds, 0: the daemon's default (10) */
	double cpu_time;    /* seconds of CPU, 0: = timeout */
	int64_t memory_mb;  /* 0: default (256) */
	int64_t pids;	    /* 0: default (64) */
	int64_t output_cap; /* bytes per stream, 0: default (1 MiB) */
	bool binary;	    /* exact bytes (base64 on the wire) instead of UTF-8 text */
} warren_call_opts;
#define WARREN_CALL_OPTS_INIT                                                                      \
	{                                                                                          \
		WARREN_CALL_OPTS_VERSION                                                           \
	}

/* One sandboxed call (POST /v1/functions/call). The result is a command
 * result; reason also "cpu_time". A zygote that died under the call is the
 * error "unavailable" (retry). */
WARREN_API int warren_function_call(warren_client *client, const warren_call_opts *opts,
				    warren_exec_result **out, warren_error **err);
/* n calls in one request, run in parallel (parallel 0: the daemon's
 * default), results in order: results[i] or, for a call that could not run,
 * errs[i] (errs may be NULL). Returns 0 when the batch ran, even if some of
 * its calls could not; a bad call fails the whole batch (nothing ran). */
WARREN_API int warren_function_call_batch(warren_client *client, const warren_call_opts *calls,
					  size_t n, unsigned parallel, warren_exec_result **results,
					  warren_error **errs, warren_error **err);

/* ---- registry push and pull (API.md "Registry push and pull") --------- */

/* warren_registry_auth: above warren_sandbox_opts. */

#define WARREN_IMAGE_PULL_OPTS_VERSION 1
typedef struct {
	unsigned int version;
	const char *ref;      /* required: host[:port]/repo[:tag][@sha256:...] */
	const char *as;	      /* local name[:tag]; NULL: the reference's repo path and tag */
	bool lazy;	      /* record a warren artifact without fetching its blob */
	const char *platform; /* picked from an index; NULL: linux/amd64 */
	warren_registry_auth auth;
} warren_image_pull_opts;
#define WARREN_IMAGE_PULL_OPTS_INIT                                                                \
	{                                                                                          \
		WARREN_IMAGE_PULL_OPTS_VERSION                                                     \
	}
/* Pull into the node's store; *out (may be NULL) the image, *report_json
 * (may be NULL; free with warren_free) the answer's "pull" object
 * (manifest_digest, erofs, lazy, already, blobs, bytes_fetched). */
WARREN_API int warren_image_pull(warren_client *client, const warren_image_pull_opts *opts,
				 warren_image **out, char **report_json, warren_error **err);

#define WARREN_IMAGE_PUSH_OPTS_VERSION 1
typedef struct {
	unsigned int version;
	const char *to;	    /* required: host[:port]/repo[:tag] */
	int64_t chunk_size; /* 0: one upload per blob; else PATCH chunks of this size */
	warren_registry_auth auth;
} warren_image_push_opts;
#define WARREN_IMAGE_PUSH_OPTS_INIT                                                                \
	{                                                                                          \
		WARREN_IMAGE_PUSH_OPTS_VERSION                                                     \
	}
/* Push the store image ref names; *report_json (may be NULL; free with
 * warren_free): digest, to, manifest_digest, blobs_sent, blobs_skipped,
 * bytes_sent. */
WARREN_API int warren_image_push(warren_client *client, const char *ref,
				 const warren_image_push_opts *opts, char **report_json,
				 warren_error **err);

#ifdef __cplusplus
}
#endif

#endif
