#include "daemon/elastic.h"
#include "daemon/manager.h"
#include "daemon/netpolicy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "common/log.h"
#include "common/util.h"
#include "daemon/audit.h"
#include "daemon/commands.h"
#include "daemon/images.h"
#include "daemon/jsonutil.h"
#include "daemon/metrics.h"
#include "daemon/network.h"
#include "tiers/container.h"
#include "tiers/microvm.h"
#include "tiers/vm_tier.h"

const struct wrd_config *wrd_mgr_cfg;

/* ---- the table ---------------------------------------------------------- */

#define NBUCKETS 4096
static struct wrd_sbx *g_buckets[NBUCKETS];
static size_t g_count;
static pthread_rwlock_t g_tlock = PTHREAD_RWLOCK_INITIALIZER;

static unsigned bucket(const char *id)
{
	unsigned h = 2166136261u;
	for (; *id; id++)
		h = (h ^ (unsigned char)*id) * 16777619u;
	return h % NBUCKETS;
}

static struct wrd_sbx *find_locked(const char *id)
{
	for (struct wrd_sbx *s = g_buckets[bucket(id)]; s; s = s->hnext)
		if (strcmp(s->rec.id, id) == 0)
			return s;
	return NULL;
}

void wrd_table_insert(struct wrd_sbx *sb)
{
	atomic_fetch_add(&sb->refs, 1); /* the table's */
	pthread_rwlock_wrlock(&g_tlock);
	unsigned b = bucket(sb->rec.id);
	sb->hnext = g_buckets[b];
	g_buckets[b] = sb;
	g_count++;
	pthread_rwlock_unlock(&g_tlock);
}

static void table_remove(struct wrd_sbx *sb)
{
	bool found = false;
	pthread_rwlock_wrlock(&g_tlock);
	for (struct wrd_sbx **pp = &g_buckets[bucket(sb->rec.id)]; *pp; pp = &(*pp)->hnext) {
		if (*pp == sb) {
			*pp = sb->hnext;
			g_count--;
			found = true;
			break;
		}
	}
	pthread_rwlock_unlock(&g_tlock);
	if (found)
		wrd_mgr_put(sb);
}

bool wrd_table_has(const char *id)
{
	pthread_rwlock_rdlock(&g_tlock);
	bool r = find_locked(id) != NULL;
	pthread_rwlock_unlock(&g_tlock);
	return r;
}

struct wrd_sbx **wrd_table_snapshot(size_t *n)
{
	pthread_rwlock_rdlock(&g_tlock);
	struct wrd_sbx **v = calloc(g_count ? g_count : 1, sizeof(*v));
	size_t k = 0;
	for (size_t b = 0; v && b < NBUCKETS; b++)
		for (struct wrd_sbx *s = g_buckets[b]; s; s = s->hnext) {
			atomic_fetch_add(&s->refs, 1);
			v[k++] = s;
		}
	pthread_rwlock_unlock(&g_tlock);
	*n = k;
	return v;
}

/* Sandboxes killed whose resources are still being released (after the
 * kill was answered): in the table, no longer live. Their processes are
 * gone; what is left (cgroup directories, a uid range) does not count
 * against max_sandboxes. */
static atomic_size_t g_releasing;

size_t wrd_mgr_live(void)
{
	pthread_rwlock_rdlock(&g_tlock);
	size_t n = g_count, rel = atomic_load(&g_releasing);
	pthread_rwlock_unlock(&g_tlock);
	return n > rel ? n - rel : 0;
}

int wrd_mgr_get(const char *tenant, const char *id, struct wrd_sbx **out)
{
	pthread_rwlock_rdlock(&g_tlock);
	struct wrd_sbx *s = find_locked(id);
	if (s && strcmp(s->rec.tenant, tenant) != 0)
		s = NULL;
	if (s)
		atomic_fetch_add(&s->refs, 1);
	pthread_rwlock_unlock(&g_tlock);
	*out = s;
	return s ? 0 : -ENOENT;
}

uint64_t wrd_mgr_upload_limit(const char *tenant, const char *id)
{
	uint64_t lim = 0;
	pthread_rwlock_rdlock(&g_tlock);
	struct wrd_sbx *s = find_locked(id);
	/* a paused sandbox too: the write resumes it (lifecycle.c) */
	if (s && strcmp(s->rec.tenant, tenant) == 0 &&
	    (s->state == WRD_RUNNING || s->state == WRD_PAUSED))
		lim = s->disk_bytes;
	pthread_rwlock_unlock(&g_tlock);
	return lim;
}

/* ---- one sandbox -------------------------------------------------------- */

struct wrd_sbx *wrd_sbx_new(const struct wrd_record *rec)
{
	struct wrd_sbx *sb = calloc(1, sizeof(*sb));
	if (sb == NULL)
		return NULL;
	sb->rec = *rec;
	sb->rec.tenant = strdup(rec->tenant);
	sb->rec.tier = strdup(rec->tier);
	sb->rec.image = strdup(rec->image);
	sb->rec.image_path = strdup(rec->image_path);
	sb->rec.spec = json_deep_copy(rec->spec);
	if (!sb->rec.tenant || !sb->rec.tier || !sb->rec.image || !sb->rec.image_path ||
	    !sb->rec.spec) {
		wrd_record_clear(&sb->rec);
		free(sb);
		return NULL;
	}
	pthread_mutex_init(&sb->lock, NULL);
	pthread_cond_init(&sb->cv, NULL);
	atomic_init(&sb->refs, 1);
	sb->state = rec->state;
	sb->pidfd = -1;
	sb->ops = wr_tier_lookup(rec->tier);
	sb->idle_timeout_ms = json_integer_value(json_object_get(rec->spec, "idle_timeout")) * 1000;
	sb->disk_bytes = (uint64_t)json_integer_value(json_object_get(rec->spec, "disk_mb")) << 20;
	sb->last_active_ms = wrd_now_ms();
	return sb;
}

void wrd_mgr_put(struct wrd_sbx *sb)
{
	if (sb == NULL || atomic_fetch_sub(&sb->refs, 1) != 1)
		return;
	wrd_cmds_free(sb);
	wrd_nf_detach(sb);
	if (sb->tsb) {
		/* only reached when a create could not be recorded */
		_cleanup_err_ wr_err err = NULL;
		sb->ops->destroy(&sb->tsb, &err);
	}
	if (sb->pidfd >= 0)
		close(sb->pidfd);
	wrd_net_free(sb);
	wrd_record_clear(&sb->rec);
	pthread_mutex_destroy(&sb->lock);
	pthread_cond_destroy(&sb->cv);
	free(sb);
}

int wrd_sbx_begin(struct wrd_sbx *sb)
{
	pthread_mutex_lock(&sb->lock);
	wrd_sbx_wait_transition(sb);
	int r = -ESRCH;
	if (sb->state == WRD_RUNNING) {
		sb->busy++;
		sb->last_active_ms = wrd_now_ms();
		r = 0;
	}
	pthread_mutex_unlock(&sb->lock);
	if (r == 0)
		wrd_harvest_wake(sb); /* an idle one gets its weight back first */
	return r;
}

void wrd_sbx_end(struct wrd_sbx *sb)
{
	pthread_mutex_lock(&sb->lock);
	if (--sb->busy == 0)
		pthread_cond_broadcast(&sb->cv);
	sb->last_active_ms = wrd_now_ms();
	pthread_mutex_unlock(&sb->lock);
}

void wrd_sbx_event(struct wrd_sbx *sb, const char *type, json_t *detail)
{
	/* seq assigned and queued under the lock: commits stay in seq order */
	pthread_mutex_lock(&sb->lock);
	uint64_t seq = ++sb->ev_seq;
	wrd_db_event(sb->rec.id, seq, type, detail);
	pthread_mutex_unlock(&sb->lock);
}

/* ---- create ------------------------------------------------------------- */

int wrd_spec_from_record(const struct wrd_record *rec, struct wr_sandbox_spec *spec,
			 struct wr_env_kv **env, wr_err *err)
{
	json_t *s = rec->spec;
	memset(spec, 0, sizeof(*spec));
	spec->image = rec->image_path;
	spec->memory_bytes = (uint64_t)json_integer_value(json_object_get(s, "memory_mb")) << 20;
	spec->disk_bytes = (uint64_t)json_integer_value(json_object_get(s, "disk_mb")) << 20;
	spec->pids = (uint64_t)json_integer_value(json_object_get(s, "pids"));
	/* containers (harvest.c): the weight follows the request `cpu`, the
	 * quota is `cpu_max`, or `cpu` when no max was asked for (a sandbox
	 * bursts only when its creator said how far: the red team's c-cpu row
	 * holds a plain `cpu` to its limit); the VM tiers' `cpu` is their vCPU
	 * count */
	bool container = strcmp(rec->tier, "container") == 0;
	spec->cpus = json_number_value(json_object_get(s, "cpu"));
	double cpu_max = json_number_value(json_object_get(s, "cpu_max"));
	if (container && cpu_max > 0)
		spec->cpus = cpu_max;
	if (container)
		spec->cpu_weight = wrd_harvest_weight(json_number_value(json_object_get(s, "cpu")));
	spec->user = (uid_t)json_integer_value(json_object_get(s, "user"));
	spec->group = spec->user;
	spec->workdir = json_string_value(json_object_get(s, "workdir"));
	/* the vm tier: the image's firmware, a VNC endpoint when asked for */
	spec->firmware = json_string_value(json_object_get(s, "firmware"));
	spec->vnc = json_is_true(json_object_get(json_object_get(s, "display"), "vnc"));
	spec->id = rec->id;
	spec->die_with_parent = false; /* sandboxes outlive a daemon restart */
	/* a VM snapshot unpacked for this create (snapshot_vm.c) */
	spec->restore = json_string_value(json_object_get(s, "restore_dir"));
	json_t *e = json_object_get(s, "env");
	size_t n = json_object_size(e);
	/* One allocation, freed by the caller as *env, also holds the layer
	 * path pointers (image store stacks: spec "layers", base first). */
	json_t *layers = json_object_get(s, "layers");
	size_t nl = json_array_size(layers);
	*env = calloc(1, (n ? n : 1) * sizeof(**env) + nl * sizeof(char *));
	if (*env == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	if (nl) {
		const char **lp = (const char **)(void *)(*env + (n ? n : 1));
		for (size_t l = 0; l < nl; l++)
			lp[l] = json_string_value(json_array_get(layers, l));
		spec->layers = lp;
		spec->n_layers = nl;
		spec->image = NULL;
	}
	const char *k;
	json_t *v;
	size_t i = 0;
	json_object_foreach(e, k, v)
	{
		(*env)[i].key = k;
		(*env)[i].value = json_string_value(v);
		i++;
	}
	spec->env = *env;
	spec->n_env = n;
	return 0;
}

int wrd_sbx_cgroup_v2_fd(struct wrd_sbx *sb)
{
	if (sb->tsb == NULL)
		return -1;
	if (strcmp(sb->ops->name, "container") == 0)
		return wr_sandbox_cgroup_v2_fd(sb->tsb);
	return sb->ops->cgroup_v2_fd ? sb->ops->cgroup_v2_fd(sb->tsb) : -1;
}

int wrd_mgr_create(struct wrd_record *rec, struct wrd_sbx **out, wr_err *err)
{
	uint64_t t0 = wr_now_ns();
	if (wrd_mgr_live() >= wrd_mgr_cfg->max_sandboxes)
		return wr_err_set(err, EAGAIN, "this node runs its maximum of %u sandboxes",
				  wrd_mgr_cfg->max_sandboxes);
	/* elastic.c: requests of running sandboxes and the node's pressure */
	if (wrd_elastic_admit(json_number_value(json_object_get(rec->spec, "cpu")), err) < 0)
		return -1;
	if (wr_random_id(rec->id) < 0)
		return wr_err_set(err, EIO, "no randomness for an id");
	rec->state = WRD_CREATING;
	rec->created_ms = wrd_now_ms();
	rec->expires_ms =
	    rec->created_ms + json_integer_value(json_object_get(rec->spec, "timeout")) * 1000;
	rec->init_pid = 0;
	struct wrd_sbx *sb = wrd_sbx_new(rec);
	if (sb == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	if (sb->ops == NULL) {
		wrd_mgr_put(sb);
		return wr_err_field(err, "tier", "tier: unknown tier '%s'", rec->tier);
	}
	/* Network plumbing and the eBPF filter: the container tier and the
	 * tiers that name a cgroup for the filter (the VM tiers: QEMU's, whose
	 * user-mode network makes the guest's connections QEMU's sockets);
	 * any other tier takes mode none. */
	bool container = strcmp(sb->ops->name, "container") == 0;
	bool netted = container || sb->ops->cgroup_v2_fd;
	const char *mode =
	    json_string_value(json_object_get(json_object_get(rec->spec, "network"), "mode"));
	if (!netted && mode && strcmp(mode, "none") != 0) {
		wrd_mgr_put(sb);
		return wr_err_field(err, "network.mode",
				    "network.mode: the %s tier has no network; only \"none\"",
				    rec->tier);
	}
	struct wr_sandbox_spec spec;
	_cleanup_free_ struct wr_env_kv *env = NULL;
	int r = wrd_spec_from_record(&sb->rec, &spec, &env, err);
	if (r == 0 && netted)
		r = wrd_net_prepare(sb, &spec, err); /* networked: a pool netns */
	if (r == 0)
		r = sb->ops->create(&spec, &sb->tsb, err);
	/* Write ordering: the record is written once, after the kernel work
	 * and before the answer, in state running with PID 1 (one commit).
	 * A crash before the commit leaves kernel objects that no record
	 * names: the next start's sweep keeps only ids of live records and
	 * removes them (nothing unacknowledged survives). A crash after it
	 * leaves a running record that the next start adopts. */
	/* The network filter before the record and the answer: no command
	 * (the first sandbox code that could use the network) runs before. */
	if (r == 0 && netted)
		r = wrd_nf_attach(sb, wrd_sbx_cgroup_v2_fd(sb), err);
	if (r == 0 && sb->ops->start) /* filtered first: a restored VM runs now */
		r = sb->ops->start(sb->tsb, err);
	if (r == 0) {
		sb->rec.init_pid = sb->ops->main_pid ? sb->ops->main_pid(sb->tsb) : 0;
		sb->rec.state = WRD_RUNNING;
		r = wrd_db_insert(&sb->rec, err);
	}
	if (r < 0) {
		_cleanup_err_ wr_err e2 = NULL;
		if (sb->tsb)
			sb->ops->destroy(&sb->tsb, &e2);
		wrd_net_release(sb);
		wrd_mgr_put(sb);
		return wr_err_wrap(err, "create sandbox");
	}
	wrd_net_created(sb);
	/* Our own pidfd, not the tier's: the monitor's epoll set holds it until
	 * the monitor thread drops the watch, which may come after destroy
	 * closed the tier's (sharing it would need a dup, the same syscall).
	 * pidfd_open makes it close-on-exec. */
	sb->pidfd = wr_pidfd_open(sb->rec.init_pid, 0);
	sb->state = WRD_RUNNING;
	wrd_table_insert(sb);
	wrd_audit_sandbox_start(sb); /* its file trail, before any command */
	wrd_monitor_watch(sb);
	json_t *d = json_object();
	json_object_set_new(d, "image", json_string(sb->rec.image));
	json_object_set_new(d, "create_ms", json_real((double)(wr_now_ns() - t0) / 1e6));
	wrd_sbx_event(sb, "created", d);
	wrd_metrics_create((double)(wr_now_ns() - t0) / 1e9);
	rec->state = WRD_RUNNING;
	rec->init_pid = sb->rec.init_pid;
	*out = sb;
	return 0;
}

/* ---- kill --------------------------------------------------------------- */

/* Every process of the sandbox has exited when PID 1 has: the kernel kills
 * the rest of its PID namespace (commands joined it too) and waits for
 * them before PID 1's exit completes. */
static void wait_dead(struct wrd_sbx *sb)
{
	if (sb->pidfd < 0)
		return;
	struct pollfd pf = {.fd = sb->pidfd, .events = POLLIN};
	uint64_t deadline = wr_now_ns() + 5000000000ull;
	for (;;) {
		uint64_t now = wr_now_ns();
		if (now >= deadline)
			return;
		int n = poll(&pf, 1, (int)((deadline - now) / 1000000) + 1);
		if (n != 0 && !(n < 0 && errno == EINTR))
			return;
	}
}

int wrd_mgr_kill(struct wrd_sbx *sb, enum wrd_state why, json_t *detail, void (*dead)(void *ctx),
		 void *ctx, wr_err *err)
{
	pthread_mutex_lock(&sb->lock);
	wrd_sbx_wait_transition(sb); /* a pause or resume finishes first */
	if (sb->state != WRD_RUNNING && sb->state != WRD_PAUSED) {
		enum wrd_state st = sb->state;
		pthread_mutex_unlock(&sb->lock);
		json_decref(detail);
		return wr_err_set(err, ESRCH, "sandbox %s is %s", sb->rec.id, wrd_state_name(st));
	}
	sb->state = sb->rec.state = why;
	pthread_mutex_unlock(&sb->lock);
	/* The monitor keeps watching PID 1; it drops the sandbox when PID 1
	 * is gone (only the monitor thread ever removes a watch). */
	/* The record first: a crash after it leaves a sandbox the next start
	 * sweeps; the other order could leave "running" for a dead one. */
	_cleanup_err_ wr_err dberr = NULL;
	if (wrd_db_set_state(sb->rec.id, why, &dberr) < 0)
		wr_warn("sandbox %s: %s", sb->rec.id, dberr->msg);
	_cleanup_err_ wr_err kerr = NULL;
	sb->ops->kill(sb->tsb, &kerr);
	const char *type = why == WRD_KILLED	  ? "killed"
			   : why == WRD_TIMED_OUT ? "timeout"
						  : "failed";
	/* queued before the answer: readers flush the queue first */
	wrd_sbx_event(sb, type, detail);
	if (dead) {
		wait_dead(sb);
		/* Its processes are gone: it uses its store images no more. The
		 * answer says they are released (holders 0), like the rest. */
		wrd_images_release_sandbox(sb->rec.id);
		atomic_fetch_add(&g_releasing, 1);
		dead(ctx);
	}
	wrd_cmds_abort(sb);
	pthread_mutex_lock(&sb->lock);
	while (sb->busy > 0)
		pthread_cond_wait(&sb->cv, &sb->lock);
	pthread_mutex_unlock(&sb->lock);
	/* its last limit counters and file trail: the cgroup goes next */
	wrd_audit_sandbox_end(sb);
	wrd_nf_detach(sb); /* its links and map entries: the cgroup goes next */
	int r = sb->ops->destroy(&sb->tsb, err);
	wrd_net_release(sb); /* its namespace to teardown, off this path */
	table_remove(sb);
	if (dead)
		atomic_fetch_sub(&g_releasing, 1);
	else
		wrd_images_release_sandbox(sb->rec.id); /* its store images (images.c) */
	if (r < 0)
		return wr_err_wrap(err, "kill sandbox %s", sb->rec.id);
	return 0;
}

int wrd_mgr_set_timeout(struct wrd_sbx *sb, int64_t seconds, wr_err *err)
{
	pthread_mutex_lock(&sb->lock);
	wrd_sbx_wait_transition(sb);
	if (sb->state == WRD_PAUSED) {
		/* the clock stands still: the lifetime left when it resumes */
		int r = wrd_db_set_remaining(sb->rec.id, seconds * 1000, err);
		if (r == 0)
			sb->rec.remaining_ms = seconds * 1000;
		pthread_mutex_unlock(&sb->lock);
		return r;
	}
	if (sb->state != WRD_RUNNING) {
		enum wrd_state st = sb->state;
		pthread_mutex_unlock(&sb->lock);
		return wr_err_set(err, ESRCH, "sandbox %s is %s", sb->rec.id, wrd_state_name(st));
	}
	int64_t exp = wrd_now_ms() + seconds * 1000;
	int r = wrd_db_set_expires(sb->rec.id, exp, err);
	if (r == 0) {
		sb->rec.expires_ms = exp;
		sb->last_active_ms = wrd_now_ms();
	}
	pthread_mutex_unlock(&sb->lock);
	if (r == 0)
		wrd_monitor_poke();
	return r;
}

/* A finished command's OOM kills and refused forks, recorded before its
 * leaf cgroup goes (tiers/exec.c; the sandbox's cgroup is named by its id). */
static int keep_leaf(void *ctx, const char *sandbox_id, const char *leaf,
		     const struct wr_cgroup_stats *c, wr_err *err)
{
	(void)ctx;
	return wrd_db_leaf_keep(sandbox_id, leaf, c->oom_kills, c->pids_max_hits, err);
}

int wrd_mgr_init(const struct wrd_config *cfg, wr_err *err)
{
	wrd_mgr_cfg = cfg;
	struct wr_container_config cc = {
	    .state_dir = cfg->state_dir,
	    .run_dir = cfg->run_dir,
	    .init_path = cfg->init_path,
	    .cgroup_base = cfg->cgroup_base,
	};
	if (wr_container_init(&cc, err) < 0)
		return -1;
	wr_container_keep_counts(keep_leaf, NULL);
	/* Now, while the daemon is small: creates then never copy it. One
	 * spawner per create-lane worker (pool.c, `workers`), up to 8: a
	 * create that reached a worker then never waits a second time for a
	 * spawner, and creates overlap their waits on the kernel (child setup,
	 * cgroup and mount locks). One per CPU up to 4 left them queueing at
	 * concurrency 64: API/library throughput 1.27x-1.57x there with 2 on
	 * the 2-CPU host, 1.05x-1.15x with 8 (bench/results/api.md). */
	int n = cfg->workers < 1 ? 1 : cfg->workers > 8 ? 8 : (int)cfg->workers;
	if (cfg->spawners)
		n = (int)cfg->spawners;
	if (wr_container_spawners_start(n, err) < 0)
		return -1;
	if (cfg->mvm_kernel) {
		struct wr_microvm_config mc = {.qemu = cfg->mvm_qemu,
					       .kernel = cfg->mvm_kernel,
					       .initrd = cfg->mvm_initrd,
					       .state_dir = cfg->state_dir,
					       .run_dir = cfg->run_dir,
					       .accel = cfg->mvm_accel,
					       .template_dir = cfg->mvm_templates,
					       .cgroup_base = cfg->cgroup_base,
					       .adoptable = true};
		/* what a previous run left and recovery does not adopt is
		 * swept after it (wrd_mgr_recover) */
		if (wr_microvm_init(&mc, err) < 0)
			return -1;
		wr_tier_register(&wr_microvm_tier);
		wr_info("microvm tier: %s", wr_microvm_accel());
	}
	if (cfg->vm_on) {
		struct wr_vm_tier_config vc = {.qemu = cfg->vm_qemu,
					       .qemu_img = cfg->vm_qemu_img,
					       .accel = cfg->vm_accel,
					       .run_dir = cfg->run_dir,
					       .boot_timeout_ms = cfg->vm_boot_timeout_ms,
					       .shutdown_timeout_ms = cfg->vm_shutdown_timeout_ms,
					       .state_dir = cfg->state_dir,
					       .cgroup_base = cfg->cgroup_base,
					       .adoptable = true};
		if (wr_vm_tier_init(&vc, err) < 0)
			return -1;
		wr_tier_register(&wr_vm_tier);
	}
	return 0;
}
