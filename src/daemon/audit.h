/* The refusal audit: one event model for every layer that refuses or limits
 * a sandbox (seccomp, Landlock, BPF network, DNS, cgroup limits, the API),
 * a sink that any thread may feed, and its durable store.
 *
 *   sources ──wr_audit_emit──► aggregate table (in memory, bounded)
 *   (audit netlink reader,        same (sandbox, layer, action, subject)
 *    cgroup poller, API,          within `window` = one row, count += n;
 *    bpf-net / dns callbacks)     new rows per sandbox: token bucket,
 *                                 past it one "suppressed" row per layer;
 *                                 detection rules flag new and grown rows
 *                                     │ dirty rows
 *                                     ▼
 *                               writer thread: one transaction per batch
 *                               (insert or update by id), retention by age
 *                               and count per sandbox, wakes followers
 *
 * wr_audit_emit never does I/O and never waits for the writer: it takes
 * one mutex for a hash lookup and a few stores. A flood from one sandbox
 * therefore costs its reader thread a counter increment per event, and
 * rows (and SQLite work) stay bounded by the token bucket whatever the
 * rate. When the table is full of rows that are still open, the event is
 * counted as dropped (warren_audit_dropped_total) instead of blocking. */
#ifndef WARREN_DAEMON_AUDIT_H
#define WARREN_DAEMON_AUDIT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

enum wr_audit_layer {
	WR_AUDIT_SECCOMP,
	WR_AUDIT_LANDLOCK,
	WR_AUDIT_BPF_NET,
	WR_AUDIT_DNS,
	WR_AUDIT_CGROUP_LIMIT,
	WR_AUDIT_API,
	WR_AUDIT_FILE, /* file-access trail entries (not refusals): no source yet */
	WR_AUDIT_NLAYERS,
};
const char *wr_audit_layer_name(enum wr_audit_layer l);
int wr_audit_layer_parse(const char *s); /* -1 if unknown */

enum wr_audit_severity {
	WR_AUDIT_SEV_INFO,
	WR_AUDIT_SEV_LOW,
	WR_AUDIT_SEV_MEDIUM,
	WR_AUDIT_SEV_HIGH,
	WR_AUDIT_SEV_CRITICAL,
	WR_AUDIT_NSEV,
};
const char *wr_audit_severity_name(enum wr_audit_severity s);
int wr_audit_severity_parse(const char *s); /* -1 if unknown */

/* One attempt (or `count` identical ones). Every pointer is borrowed for
 * the duration of the call only. */
struct wr_audit_event {
	const char *sandbox_id; /* NULL or "": not tied to a sandbox (API) */
	const char *tenant;	/* NULL: the sandbox's, looked up by the writer */
	int64_t time_ns;	/* CLOCK_REALTIME ns; 0 = now */
	int64_t first_ns;	/* with count > 1: the first one's time (0 = time_ns) */
	enum wr_audit_layer layer;
	bool denied; /* a refusal; false for limit notices and trail entries */
	/* What was attempted, as a short name used in summaries and to merge
	 * repeats: a syscall name ("ptrace"), a Landlock access ("fs.read_file"),
	 * "connect", "resolve", "oom_kill", "pids.max", "GET /v1/sandboxes/{id}". */
	const char *action;
	/* What it was attempted on, also part of the merge key (NULL: none):
	 * a path, "10.0.0.1:443/tcp", a DNS name, a route's reason. */
	const char *subject;
	/* Details (syscall number and arguments, path and access, dest, port,
	 * proto, limit and value, route and reason); may be NULL. */
	json_t *what;
	pid_t pid;	/* in the sandbox's pid namespace; 0 unknown */
	pid_t host_pid; /* 0 unknown */
	const char *comm, *exe;
	uint64_t count; /* occurrences this stands for; 0 means 1 */
	/* A source that already knows the severity (a rule of its own);
	 * detection rules may raise it. */
	enum wr_audit_severity severity;
	const char *rule; /* NULL: none */
};

struct wr_audit;

/* The sink's policy (config "audit" object; every key optional). */
struct wr_audit_config {
	bool enabled;		    /* true */
	double window_s;	    /* 10: repeats within it merge into one row */
	double rows_per_s;	    /* 20: new rows per sandbox per second ... */
	unsigned burst;		    /* 200: ... after a burst of this many */
	unsigned max_open;	    /* 8192: rows held in memory (open or dirty) */
	int64_t retention_s;	    /* 7 days */
	int64_t max_per_sandbox;    /* 10000 rows */
	int64_t max_rows;	    /* 1000000 rows in all */
	unsigned retention_check_s; /* 60: how often retention runs */
	char *rules_path;	    /* detection rules (JSON), NULL = none */
	char *kernel_audit;	    /* "auto" | "listen" | "off" (see audit_kernel.c) */
	char *init_netns;	    /* NULL: found; else the initial netns's path (audit_netns.c) */
	bool ignore_clone3_enosys;  /* true: glibc's clone3 probe is not a refusal */
	unsigned cgroup_poll_ms;    /* 1000: OOM and pids.max counters */
};
void wr_audit_config_default(struct wr_audit_config *c);
/* Parse the config's "audit" object (NULL: defaults). Errors name the key
 * ("audit.window"). */
int wr_audit_config_parse(json_t *obj, struct wr_audit_config *c, wr_err *err);
void wr_audit_config_clear(struct wr_audit_config *c);

/* The daemon's sink (NULL until wr_audit_start). */
extern struct wr_audit *wr_audit_global;

/* Feed one event. Safe from any thread, never blocks on I/O; a NULL sink
 * (audit off) ignores the call. */
void wr_audit_emit(struct wr_audit *a, const struct wr_audit_event *ev);

/* Owners of uid ranges that are not sandboxes (function pools, "fn-...")
 * have no record to take the tenant from: whoever knows it says so here
 * (any thread; idempotent and cheap, so it may be said on every call).
 * Events of such an owner that carry no tenant get this one. The map is
 * bounded (the least recently said owner goes first). */
void wr_audit_owner(const char *owner, const char *tenant);

/* Shorthand for sources that do not build a struct: layer, sandbox, action,
 * subject and a detail object (stolen, may be NULL), denied. */
void wr_audit_note(enum wr_audit_layer layer, const char *sandbox_id, const char *tenant,
		   const char *action, const char *subject, json_t *what, bool denied);

/* For the network layers' refusal callbacks (bpf-net ring buffer, DNS
 * forwarder): one refused connect / send / query. ip (text form, may be
 * NULL), port (0: none), proto ("tcp", "udp", "icmp", ...; may be NULL) and
 * name (a DNS name, may be NULL) become the subject ("10.0.0.1:443/tcp" or
 * the name) and what.{ip, port, proto, name} (rules match `dest` against
 * what.ip). action: "connect", "sendto", "resolve"...; count: how many this
 * stands for (a source's own summary of suppressed refusals); time_ms: 0 =
 * now. Any thread, never blocks. */
void wr_audit_net(enum wr_audit_layer layer, const char *sandbox_id, const char *tenant,
		  const char *action, const char *ip, unsigned port, const char *proto,
		  const char *name, const char *reason, uint64_t count, int64_t time_ms);

/* A command ended (commands.c): its output caps and, where the memory
 * cgroup's counter does not cover the command's leaf (cgroup v1), its OOM
 * kill, as cgroup-limit events. */
struct wr_exec_result;
void wrd_audit_command(const char *sandbox_id, const char *tenant, const char *cmd_id,
		       const struct wr_exec_result *res);

/* A sandbox is about to lose its cgroups (manager.c, after its processes
 * were killed, before the tier's destroy): the last reading of its OOM and
 * pids.max counters, so that a limit hit less than one poll before the end
 * is still recorded. Later polls leave the sandbox alone. */
struct wrd_sbx;
void wrd_audit_sandbox_end(struct wrd_sbx *sb);
/* A sandbox was created (manager.c, before its first command): its
 * file-access trail, when its spec asks for one (trail.c). Failures are
 * logged, never fail the create. */
void wrd_audit_sandbox_start(struct wrd_sbx *sb);

/* Counters for /metrics (cumulative since start). */
struct wr_audit_stats {
	uint64_t events[WR_AUDIT_NLAYERS];  /* attempts seen, counts included */
	uint64_t denied[WR_AUDIT_NLAYERS];  /* of which refusals */
	uint64_t rows[WR_AUDIT_NLAYERS];    /* rows opened */
	uint64_t flagged[WR_AUDIT_NLAYERS]; /* rows flagged by a rule */
	uint64_t suppressed;		    /* events folded by the rate limit */
	uint64_t dropped;		    /* events lost: table full */
	uint64_t kernel_lost;		    /* audit records the kernel dropped for us */
	uint64_t written;		    /* row writes committed */
	uint64_t write_errors;
};
void wr_audit_get_stats(struct wr_audit *a, struct wr_audit_stats *out);

#endif
