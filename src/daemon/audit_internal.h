/* The audit sink's parts (audit.h has the model and the entry point):
 *   audit_core.c    aggregate table, per-sandbox token bucket, detection
 *                   rule hook: pure logic over an explicit clock, no lock,
 *                   no I/O (unit-tested alone)
 *   audit_rules.c   the detection rule file and matching
 *   audit.c         the sink: lock, writer thread, followers, config
 *   audit_store.c   SQLite: schema, batch writes, retention, queries
 *   audit_kernel.c  the kernel's audit records (seccomp, Landlock) over
 *                   NETLINK_AUDIT, mapped to sandboxes by host uid
 *   audit_cgroup.c  OOM kills and pids.max hits from cgroup counters */
#ifndef WARREN_DAEMON_AUDIT_INTERNAL_H
#define WARREN_DAEMON_AUDIT_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/audit.h"

/* ---- detection rules (audit_rules.c) ------------------------------------ */

struct wra_rule {
	char *name;
	enum wr_audit_severity severity;
	uint32_t layers;    /* bit per layer; 0 = any */
	int denied;	    /* -1 any, 0, 1 */
	char **actions;	    /* exact action names, NULL = any */
	char **path_glob;   /* fnmatch on the subject (a path), NULL = any */
	char **outside;	    /* the subject must not be beneath any of these */
	char **dest;	    /* IPs or CIDRs matched against what.ip */
	uint64_t min_count; /* the row's count must reach it (0/1: first) */
};
struct wra_rules {
	struct wra_rule *v;
	size_t n;
};
/* Parse a rule file's JSON ({"rules": [...]}). Errors name the rule and key
 * ("rules[2].path_glob"). */
int wra_rules_parse(json_t *root, struct wra_rules *out, wr_err *err);
int wra_rules_load(const char *path, struct wra_rules *out, wr_err *err);
void wra_rules_free(struct wra_rules *r);
/* The most severe rule (first of equals) that matches, or NULL. ip may be
 * NULL. */
const struct wra_rule *wra_rules_match(const struct wra_rules *r, enum wr_audit_layer layer,
				       bool denied, const char *action, const char *subject,
				       const char *ip, uint64_t count);

/* Does a rule's min_count lie in (before, after]? */
bool wra_rules_crossed(const struct wra_rules *r, uint64_t before, uint64_t after);

/* ---- aggregate table (audit_core.c) ------------------------------------- */

struct wra_row;
struct wra_sbx;

/* A copy of a row for the writer (strings owned). */
struct wra_snap {
	int64_t id;
	char *sandbox, *tenant, *action, *subject, *what, *comm, *exe, *rule;
	enum wr_audit_layer layer;
	enum wr_audit_severity severity;
	bool denied, suppressed;
	pid_t pid, host_pid;
	int64_t first_ns, last_ns;
	uint64_t count;
};
void wra_snap_clear(struct wra_snap *s);

struct wra_core {
	struct wr_audit_config cfg; /* copied scalars; strings not used */
	const struct wra_rules *rules;
	struct wra_row **buckets;
	size_t nbuckets;
	struct wra_row *lru_head, *lru_tail; /* by creation, oldest first */
	struct wra_row *dirty_head, **dirty_tail;
	size_t n_rows;
	struct wra_sbx **sbx;
	size_t n_sbx;
	int64_t next_id;
	struct wr_audit_stats stats;
};
int wra_core_init(struct wra_core *c, const struct wr_audit_config *cfg,
		  const struct wra_rules *rules, int64_t next_id);
void wra_core_free(struct wra_core *c);
/* Account one event at now_ns (the caller serialises calls). */
void wra_core_feed(struct wra_core *c, const struct wr_audit_event *ev, int64_t now_ns);
/* Move up to max dirty rows into out (oldest change first), then forget
 * rows whose window has passed and that are written. Returns how many. */
size_t wra_core_take(struct wra_core *c, struct wra_snap *out, size_t max, int64_t now_ns);
/* Rows waiting to be written. */
bool wra_core_dirty(const struct wra_core *c);

/* The subject of a network refusal: "10.0.0.1:443/tcp", "[fd00::1]:53/udp",
 * "10.0.0.1" (no port), or the DNS name when there is no address; "" when
 * neither. */
void wra_net_subject(const char *ip, unsigned port, const char *proto, const char *name, char *out,
		     size_t n);

/* ---- store (audit_store.c) ---------------------------------------------- */

int wra_store_init(int64_t *next_id, wr_err *err);
/* Write a batch in one transaction (tenant filled from the sandbox record
 * where NULL). Sets *rev to the last revision written. */
int wra_store_write(struct wra_snap *rows, size_t n, uint64_t *rev, wr_err *err);
/* Delete rows older than max_age_s, beyond max_per_sandbox per sandbox and
 * beyond max_rows in all. Returns rows deleted. */
int64_t wra_store_retain(int64_t max_age_s, int64_t max_per_sandbox, int64_t max_rows,
			 int64_t now_ns, wr_err *err);

struct wra_query {
	const char *sandbox; /* NULL any */
	const char *tenant;  /* NULL any (admins) */
	uint32_t layers;     /* 0 any */
	int denied;	     /* -1 any */
	bool flagged;	     /* only rows a rule flagged */
	int64_t since_ns;    /* last_ns >= since (0: any) */
	int64_t after_id;    /* id > after (paging forward; 0: the newest) */
	uint64_t after_rev;  /* follow: rev > after_rev, ordered by rev */
	bool by_rev;
	int limit;
};
/* Appends event objects to out (oldest first). *last_id / *last_rev: the
 * largest seen (unchanged when none). */
int wra_store_query(const struct wra_query *q, json_t *out, int64_t *last_id, uint64_t *last_rev,
		    wr_err *err);
uint64_t wra_store_max_rev(void);
/* The human summary of a row ("ptrace refused 120000 times in 10.0 s"). */
char *wra_summary(const char *layer, const char *action, const char *subject, bool denied,
		  bool suppressed, uint64_t count, int64_t first_ns, int64_t last_ns);

/* ---- the sink (audit.c) -------------------------------------------------- */

struct wrd_config;
int wr_audit_start(const struct wrd_config *cfg, wr_err *err);
void wr_audit_stop(void);
/* Why the kernel's records are not read (kernel_audit "auto" on a host
 * without them), or NULL. */
const char *wr_audit_kernel_unavailable(void);
/* Followers: wait until a revision past `rev` is committed or timeout_ms
 * passes; returns the committed revision. */
uint64_t wr_audit_wait(uint64_t rev, int timeout_ms);
/* Write everything pending now (readers call it to see their own). */
void wr_audit_flush(void);
/* Shutdown: end every follow stream (before the HTTP server waits for
 * requests in flight). */
void wr_audit_end_followers(void);
bool wr_audit_followers_ended(void);
const struct wr_audit_config *wr_audit_cfg(void);
void wr_audit_kernel_lost(uint64_t n);

/* ---- sources ------------------------------------------------------------ */

/* audit_kernel.c: the NETLINK_AUDIT reader thread. state_dir locates the
 * uid-range slot files (owner = sandbox id); init_netns: audit.init_netns
 * (NULL: found, see audit_netns.c). */
int wra_kernel_start(const char *state_dir, const char *mode, bool ignore_clone3,
		     const char *init_netns, wr_err *err);
/* audit_netns.c: a NETLINK_AUDIT socket of the initial network namespace
 * (the only one the kernel multicasts records to), made from whichever
 * namespace warrend runs in. Returns the fd or negative. */
int wra_audit_socket(const char *init_netns, wr_err *err);
void wra_kernel_stop(void);
/* audit_cgroup.c: the cgroup counter poller. */
int wra_cgroup_start(unsigned interval_ms, wr_err *err);
void wra_cgroup_stop(void);

#endif
