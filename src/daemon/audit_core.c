/* The aggregate table: repeats merge, new rows are rate-limited per
 * sandbox, detection rules flag rows. Pure logic over an explicit clock;
 * the sink (audit.c) serialises the calls.
 *
 * A row is open for `window` seconds from its first event: an event with
 * the same (sandbox, layer, action, subject) within it adds to the row's
 * count and last time. A new row costs its sandbox a token (rows_per_s,
 * up to `burst`); without one the event goes to the sandbox's "suppressed"
 * row of that layer (action "*"), which itself merges for a window. So one
 * sandbox opens at most burst + rows_per_s * t rows (plus one suppressed
 * row per layer and window), whatever it does, and every event is still
 * counted exactly in some row. A row changed since its last write is
 * dirty and queued once; it stays in memory until its window has passed
 * and it is written. When max_open rows are in memory the event is
 * dropped and counted. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/audit_internal.h"

struct wra_row {
	struct wra_snap s; /* the row's fields (strings owned) */
	/* Whose row: the sandbox id, or for events tied to no sandbox (API
	 * refusals) "\001" + the tenant, so two tenants never share a row. */
	char *owner;
	uint64_t hash;
	bool dirty, closed;
	struct wra_row *hnext;	       /* hash chain (open rows only) */
	struct wra_row *lprev, *lnext; /* LRU by creation */
	struct wra_row *dnext;	       /* dirty list */
};

struct wra_sbx {
	char *id;
	double tokens;
	int64_t last_ns;
	struct wra_sbx *next;
};

static const char *const layer_names[WR_AUDIT_NLAYERS] = {
    "seccomp", "landlock", "bpf-net", "dns", "cgroup-limit", "api", "file"};
static const char *const sev_names[WR_AUDIT_NSEV] = {"info", "low", "medium", "high", "critical"};

const char *wr_audit_layer_name(enum wr_audit_layer l)
{
	return (unsigned)l < WR_AUDIT_NLAYERS ? layer_names[l] : "unknown";
}

int wr_audit_layer_parse(const char *s)
{
	for (int i = 0; s && i < WR_AUDIT_NLAYERS; i++)
		if (strcmp(s, layer_names[i]) == 0)
			return i;
	return -1;
}

const char *wr_audit_severity_name(enum wr_audit_severity s)
{
	return (unsigned)s < WR_AUDIT_NSEV ? sev_names[s] : "unknown";
}

int wr_audit_severity_parse(const char *s)
{
	for (int i = 0; s && i < WR_AUDIT_NSEV; i++)
		if (strcmp(s, sev_names[i]) == 0)
			return i;
	return -1;
}

void wra_net_subject(const char *ip, unsigned port, const char *proto, const char *name, char *out,
		     size_t n)
{
	out[0] = 0;
	if (ip && *ip) {
		bool v6 = strchr(ip, ':') != NULL;
		size_t o = (size_t)snprintf(out, n, v6 && port ? "[%s]" : "%s", ip);
		if (port && o < n)
			o += (size_t)snprintf(out + o, n - o, ":%u", port);
		if (proto && *proto && o < n)
			snprintf(out + o, n - o, "/%s", proto);
	} else if (name && *name) {
		snprintf(out, n, "%s", name);
	}
}

void wra_snap_clear(struct wra_snap *s)
{
	free(s->sandbox);
	free(s->tenant);
	free(s->action);
	free(s->subject);
	free(s->what);
	free(s->comm);
	free(s->exe);
	free(s->rule);
	memset(s, 0, sizeof(*s));
}

/* FNV-1a over the key parts, with a separator that cannot be in them. */
static uint64_t fnv(uint64_t h, const char *s)
{
	for (; s && *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
	return (h ^ 0xff) * 0x100000001b3ULL;
}

static uint64_t key_hash(const char *sb, enum wr_audit_layer l, const char *action,
			 const char *subject)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	h = fnv(h, sb);
	h = fnv(h, layer_names[l]);
	h = fnv(h, action);
	return fnv(h, subject);
}

static bool str_eq(const char *a, const char *b)
{
	return strcmp(a ? a : "", b ? b : "") == 0;
}

static char *dup_or_null(const char *s)
{
	return s && *s ? strdup(s) : NULL;
}

int wra_core_init(struct wra_core *c, const struct wr_audit_config *cfg,
		  const struct wra_rules *rules, int64_t next_id)
{
	memset(c, 0, sizeof(*c));
	c->cfg = *cfg;
	c->cfg.rules_path = NULL;
	c->cfg.kernel_audit = NULL;
	c->rules = rules;
	c->nbuckets = 1024;
	while (c->nbuckets < (size_t)cfg->max_open * 2)
		c->nbuckets *= 2;
	c->buckets = calloc(c->nbuckets, sizeof(*c->buckets));
	c->n_sbx = 1024;
	c->sbx = calloc(c->n_sbx, sizeof(*c->sbx));
	c->dirty_tail = &c->dirty_head;
	c->next_id = next_id > 0 ? next_id : 1;
	if (c->buckets == NULL || c->sbx == NULL) {
		wra_core_free(c);
		return -ENOMEM;
	}
	return 0;
}

void wra_core_free(struct wra_core *c)
{
	for (struct wra_row *r = c->lru_head; r;) {
		struct wra_row *n = r->lnext;
		wra_snap_clear(&r->s);
		free(r->owner);
		free(r);
		r = n;
	}
	for (size_t i = 0; c->sbx && i < c->n_sbx; i++)
		for (struct wra_sbx *s = c->sbx[i]; s;) {
			struct wra_sbx *n = s->next;
			free(s->id);
			free(s);
			s = n;
		}
	free(c->buckets);
	free(c->sbx);
	memset(c, 0, sizeof(*c));
}

bool wra_core_dirty(const struct wra_core *c)
{
	return c->dirty_head != NULL;
}

static void mark_dirty(struct wra_core *c, struct wra_row *r)
{
	if (r->dirty)
		return;
	r->dirty = true;
	r->dnext = NULL;
	*c->dirty_tail = r;
	c->dirty_tail = &r->dnext;
}

static void unhash(struct wra_core *c, struct wra_row *r)
{
	for (struct wra_row **pp = &c->buckets[r->hash & (c->nbuckets - 1)]; *pp;
	     pp = &(*pp)->hnext)
		if (*pp == r) {
			*pp = r->hnext;
			break;
		}
	r->hnext = NULL;
}

static struct wra_row *find_open(struct wra_core *c, uint64_t h, const char *sb,
				 enum wr_audit_layer l, const char *action, const char *subject,
				 int64_t now_ns)
{
	int64_t window = (int64_t)(c->cfg.window_s * 1e9);
	struct wra_row **pp = &c->buckets[h & (c->nbuckets - 1)];
	while (*pp) {
		struct wra_row *r = *pp;
		if (r->hash == h && r->s.layer == l && str_eq(r->owner, sb) &&
		    str_eq(r->s.action, action) && str_eq(r->s.subject, subject)) {
			if (now_ns - r->s.first_ns <= window)
				return r;
			/* Its window is over: later events open a new row. */
			r->closed = true;
			*pp = r->hnext;
			r->hnext = NULL;
			continue;
		}
		pp = &r->hnext;
	}
	return NULL;
}

/* Token bucket of new rows per sandbox (sandbox "" is the node's). */
static bool take_token(struct wra_core *c, const char *sb, int64_t now_ns)
{
	if (c->cfg.rows_per_s <= 0)
		return true;
	uint64_t h = fnv(0xcbf29ce484222325ULL, sb) & (c->n_sbx - 1);
	struct wra_sbx *s = c->sbx[h];
	while (s && strcmp(s->id, sb ? sb : "") != 0)
		s = s->next;
	if (s == NULL) {
		s = calloc(1, sizeof(*s));
		if (s == NULL || (s->id = strdup(sb ? sb : "")) == NULL) {
			free(s);
			return false;
		}
		s->tokens = c->cfg.burst;
		s->last_ns = now_ns;
		s->next = c->sbx[h];
		c->sbx[h] = s;
	}
	double add = (double)(now_ns - s->last_ns) / 1e9 * c->cfg.rows_per_s;
	if (add > 0) {
		s->tokens += add;
		if (s->tokens > c->cfg.burst)
			s->tokens = c->cfg.burst;
		s->last_ns = now_ns;
	}
	if (s->tokens < 1)
		return false;
	s->tokens -= 1;
	return true;
}

static void apply_rules(struct wra_core *c, struct wra_row *r, json_t *what)
{
	if (c->rules == NULL || c->rules->n == 0)
		return;
	json_t *loaded = NULL;
	if (what == NULL && r->s.what && !r->s.suppressed)
		what = loaded = json_loads(r->s.what, 0, NULL);
	const char *ip = what ? json_string_value(json_object_get(what, "ip")) : NULL;
	const struct wra_rule *m =
	    wra_rules_match(c->rules, r->s.layer, r->s.denied, r->s.suppressed ? NULL : r->s.action,
			    r->s.subject, ip, r->s.count);
	json_decref(loaded);
	if (m == NULL || (r->s.rule && m->severity <= r->s.severity))
		return;
	if (r->s.rule == NULL)
		c->stats.flagged[r->s.layer]++;
	char *name = strdup(m->name);
	if (name == NULL)
		return;
	free(r->s.rule);
	r->s.rule = name;
	if (m->severity > r->s.severity)
		r->s.severity = m->severity;
	mark_dirty(c, r);
}

static struct wra_row *new_row(struct wra_core *c, const struct wr_audit_event *ev,
			       const char *owner, uint64_t h, const char *action,
			       const char *subject, bool suppressed, int64_t t)
{
	if (c->n_rows >= c->cfg.max_open)
		return NULL;
	struct wra_row *r = calloc(1, sizeof(*r));
	if (r == NULL)
		return NULL;
	if ((r->owner = strdup(owner)) == NULL) {
		free(r);
		return NULL;
	}
	struct wra_snap *s = &r->s;
	s->sandbox = dup_or_null(ev->sandbox_id);
	s->tenant = dup_or_null(ev->tenant);
	s->action = dup_or_null(action);
	s->subject = dup_or_null(subject);
	if (!suppressed) {
		s->comm = dup_or_null(ev->comm);
		s->exe = dup_or_null(ev->exe);
		s->pid = ev->pid;
		s->host_pid = ev->host_pid;
		s->what = ev->what ? json_dumps(ev->what, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
		s->rule = dup_or_null(ev->rule);
	} else {
		s->what = strdup("{\"rate_limited\":true}");
	}
	s->layer = ev->layer;
	s->denied = ev->denied;
	s->suppressed = suppressed;
	s->severity = ev->severity ? ev->severity
		      : ev->denied ? WR_AUDIT_SEV_LOW
				   : WR_AUDIT_SEV_INFO;
	s->first_ns = s->last_ns = t;
	if (ev->first_ns && ev->first_ns < t)
		s->first_ns = ev->first_ns;
	s->id = c->next_id++;
	r->hash = h;
	r->hnext = c->buckets[h & (c->nbuckets - 1)];
	c->buckets[h & (c->nbuckets - 1)] = r;
	r->lprev = c->lru_tail;
	if (c->lru_tail)
		c->lru_tail->lnext = r;
	else
		c->lru_head = r;
	c->lru_tail = r;
	c->n_rows++;
	c->stats.rows[ev->layer]++;
	return r;
}

void wra_core_feed(struct wra_core *c, const struct wr_audit_event *ev, int64_t now_ns)
{
	if ((unsigned)ev->layer >= WR_AUDIT_NLAYERS)
		return;
	uint64_t n = ev->count ? ev->count : 1;
	int64_t t = ev->time_ns ? ev->time_ns : now_ns;
	c->stats.events[ev->layer] += n;
	if (ev->denied)
		c->stats.denied[ev->layer] += n;
	/* The owner of the row and of the token bucket: the sandbox, or for
	 * events tied to none the tenant ("\001" cannot start a sandbox id). */
	char owner_buf[80];
	const char *sb = ev->sandbox_id ? ev->sandbox_id : "";
	if (*sb == 0) {
		snprintf(owner_buf, sizeof(owner_buf), "\001%s", ev->tenant ? ev->tenant : "");
		sb = owner_buf;
	}
	const char *action = ev->action ? ev->action : "";
	uint64_t h = key_hash(sb, ev->layer, action, ev->subject);
	struct wra_row *r = find_open(c, h, sb, ev->layer, action, ev->subject, now_ns);
	if (r == NULL && !take_token(c, sb, now_ns)) {
		/* Over the sandbox's budget: into its summary row of this layer. */
		c->stats.suppressed += n;
		uint64_t hs = key_hash(sb, ev->layer, "*", NULL);
		r = find_open(c, hs, sb, ev->layer, "*", NULL, now_ns);
		if (r == NULL && (r = new_row(c, ev, sb, hs, "*", NULL, true, t)) != NULL) {
			r->s.count = n;
			mark_dirty(c, r);
			apply_rules(c, r, NULL);
			return;
		}
	} else if (r == NULL &&
		   (r = new_row(c, ev, sb, h, action, ev->subject, false, t)) != NULL) {
		r->s.count = n;
		if (t > r->s.last_ns)
			r->s.last_ns = t;
		mark_dirty(c, r);
		apply_rules(c, r, ev->what);
		return;
	}
	if (r == NULL) {
		c->stats.dropped += n;
		return;
	}
	uint64_t before = r->s.count;
	r->s.count += n;
	if (t > r->s.last_ns)
		r->s.last_ns = t;
	mark_dirty(c, r);
	/* Count thresholds: a rule with min_count fires when the row reaches
	 * it (the row's details are matched again without `what`: a rule on
	 * what.ip matched, or not, when the row opened). */
	if (c->rules && wra_rules_crossed(c->rules, before, r->s.count))
		apply_rules(c, r, NULL);
}

static int snap_copy(const struct wra_snap *in, struct wra_snap *out)
{
	*out = *in;
	out->sandbox = dup_or_null(in->sandbox);
	out->tenant = dup_or_null(in->tenant);
	out->action = dup_or_null(in->action);
	out->subject = dup_or_null(in->subject);
	out->what = dup_or_null(in->what);
	out->comm = dup_or_null(in->comm);
	out->exe = dup_or_null(in->exe);
	out->rule = dup_or_null(in->rule);
	return 0;
}

size_t wra_core_take(struct wra_core *c, struct wra_snap *out, size_t max, int64_t now_ns)
{
	size_t n = 0;
	while (c->dirty_head && n < max) {
		struct wra_row *r = c->dirty_head;
		c->dirty_head = r->dnext;
		if (c->dirty_head == NULL)
			c->dirty_tail = &c->dirty_head;
		r->dirty = false;
		r->dnext = NULL;
		snap_copy(&r->s, &out[n++]);
	}
	/* Forget written rows whose window is over (oldest first). */
	int64_t window = (int64_t)(c->cfg.window_s * 1e9);
	while (c->lru_head && now_ns - c->lru_head->s.first_ns > window && !c->lru_head->dirty) {
		struct wra_row *r = c->lru_head;
		if (!r->closed)
			unhash(c, r);
		c->lru_head = r->lnext;
		if (c->lru_head)
			c->lru_head->lprev = NULL;
		else
			c->lru_tail = NULL;
		wra_snap_clear(&r->s);
		free(r->owner);
		free(r);
		c->n_rows--;
	}
	/* Token buckets of sandboxes idle for a minute are full again:
	 * forgetting them changes nothing. */
	for (size_t i = 0; i < c->n_sbx; i++)
		for (struct wra_sbx **pp = &c->sbx[i]; *pp;) {
			struct wra_sbx *s = *pp;
			if (now_ns - s->last_ns > 60 * 1000000000LL) {
				*pp = s->next;
				free(s->id);
				free(s);
			} else {
				pp = &s->next;
			}
		}
	return n;
}
