/* warrend's image store glue: config, open, sandbox holders, auto gc. */
#include "daemon/images.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "daemon/db.h"
#include "daemon/jsonutil.h"
#include "daemon/manager.h"
#include "image/registry.h"
#include "tiers/container.h"

static struct wr_image_store *g_store;
/* Node-level image events: the events table under sandbox id "" (no
 * sandbox has it), seq dense from 1 like a sandbox's. */
static pthread_mutex_t g_evlock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_evseq;

void wrd_images_event(const char *type, json_t *detail)
{
	pthread_mutex_lock(&g_evlock);
	wrd_db_event(WRD_IMAGES_EVENTS_ID, ++g_evseq, type, detail);
	pthread_mutex_unlock(&g_evlock);
}
static uint64_t g_upload_max = 64ull << 30;

struct wr_image_store *wrd_images(void)
{
	return g_store;
}

uint64_t wrd_images_upload_limit(void)
{
	return g_upload_max;
}

static int size_key(json_t *v, const char *k, uint64_t *out, wr_err *err)
{
	if (json_is_integer(v) && json_integer_value(v) >= 0) {
		*out = (uint64_t)json_integer_value(v);
		return 0;
	}
	if (json_is_string(v) && wr_parse_size(json_string_value(v), out) == 0)
		return 0;
	return wr_err_field(err, k, "image_store.%s: a byte count or a size like \"20G\"", k);
}

/* image_store.vm_build_script / vm_kernel_root (build-vm); NULL: defaults. */
struct vm_build_cfg {
	const char *script, *kernel_root;
};
static char *g_vm_script, *g_vm_kroot;

static int abs_path_key(json_t *v, const char *k, const char **out, wr_err *err)
{
	const char *p = json_string_value(v);
	if (p == NULL || p[0] != '/' || strlen(p) > 4095)
		return wr_err_field(err, k, "image_store.%s: an absolute path", k);
	*out = p;
	return 0;
}

static int parse(json_t *v, struct wr_image_store_opts *o, struct vm_build_cfg *vb, wr_err *err)
{
	if (v == NULL)
		return 0;
	if (!json_is_object(v))
		return wr_err_field(err, "image_store", "image_store: must be an object");
	const char *k;
	json_t *x;
	json_object_foreach(v, k, x)
	{
		int64_t n;
		int r;
		if (strcmp(k, "quota") == 0)
			r = size_key(x, k, &o->quota_bytes, err);
		else if (strcmp(k, "max_unpacked") == 0)
			r = size_key(x, k, &o->max_unpacked_bytes, err);
		else if (strcmp(k, "high_water_pct") == 0 || strcmp(k, "low_water_pct") == 0) {
			r = wrd_j_int(x, k, 1, 100, &n, err);
			if (k[0] == 'h')
				o->high_water_pct = (unsigned)n;
			else
				o->low_water_pct = (unsigned)n;
		} else if (strcmp(k, "grace") == 0) {
			uint64_t ms = 0;
			if (json_is_integer(x) && json_integer_value(x) >= 0) {
				ms = (uint64_t)json_integer_value(x) * 1000;
				r = 0;
			} else if (json_is_string(x) &&
				   wr_parse_duration_ms(json_string_value(x), &ms) == 0) {
				r = 0;
			} else {
				r = wr_err_field(err, k,
						 "image_store.grace: seconds or a duration like "
						 "\"10m\"");
			}
			o->grace_sec = (int64_t)(ms / 1000);
		} else if (strcmp(k, "vm_build_script") == 0) {
			r = abs_path_key(x, k, &vb->script, err);
		} else if (strcmp(k, "vm_kernel_root") == 0) {
			r = abs_path_key(x, k, &vb->kernel_root, err);
		} else if (strcmp(k, "max_entries") == 0) {
			r = wrd_j_int(x, k, 1, 100000000, &n, err);
			o->max_entries = (uint64_t)n;
		} else {
			r = wr_err_field(err, k, "image_store.%s: unknown key", k);
		}
		if (r < 0)
			return r;
	}
	return 0;
}

/* mkvmimage.sh of an installed tree (<prefix>/share/warren) or of the
 * source tree a build directory sits in; NULL when neither exists. */
static char *default_vm_script(void)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return NULL;
	exe[n] = '\0';
	char *slash = strrchr(exe, '/');
	if (slash == NULL)
		return NULL;
	*slash = '\0';
	static const char *const rel[] = {"../share/warren/mkvmimage.sh",
					  "../scripts/mkvmimage.sh"};
	for (size_t i = 0; i < WR_ARRAY_SIZE(rel); i++) {
		char p[PATH_MAX + 64];
		snprintf(p, sizeof(p), "%s/%s", exe, rel[i]);
		char *real = realpath(p, NULL);
		if (real && access(real, X_OK) == 0)
			return real;
		free(real);
	}
	return NULL;
}

const char *wrd_images_vm_script(void)
{
	return g_vm_script;
}

const char *wrd_images_vm_kernel_root(void)
{
	return g_vm_kroot;
}

int wrd_images_check_config(json_t *v, wr_err *err)
{
	struct wr_image_store_opts o = {0};
	struct vm_build_cfg vb = {0};
	return parse(v, &o, &vb, err);
}

/* ctx != NULL: running, where create-* holders belong to creates (and
 * imports) in flight; at start-up there are none, so a crash's leftovers go. */
static bool live(void *ctx, const char *holder)
{
	if (ctx && strncmp(holder, "create-", 7) == 0)
		return true;
	return wrd_table_has(holder);
}

static int g_running = 1;

int wrd_images_open(const struct wrd_config *cfg, json_t *conf, wr_err *err)
{
	struct wr_image_store_opts o = {.grace_sec = 600};
	struct vm_build_cfg vb = {0};
	int r = parse(conf, &o, &vb, err);
	if (r < 0)
		return r;
	/* build-vm: the kernel tree under the state dir (debootstrapped on the
	 * first build), the script installed next to warrend's tree. */
	free(g_vm_script);
	free(g_vm_kroot);
	g_vm_script = vb.script ? strdup(vb.script) : default_vm_script();
	if (vb.kernel_root ? (g_vm_kroot = strdup(vb.kernel_root)) == NULL
			   : asprintf(&g_vm_kroot, "%s/vm-kernel", cfg->state_dir) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	_cleanup_free_ char *dir = NULL;
	if (asprintf(&dir, "%s/images", cfg->state_dir) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	o.dir = dir;
	/* Lazily pulled images: acquire returns a warren-lazyfs file. */
	if ((r = wrd_images_lazy_attach(cfg, &o, err)) < 0)
		return r;
	if ((r = wr_image_store_open(&o, &g_store, err)) < 0)
		return r;
	g_evseq = (uint64_t)wrd_db_last_event_seq(WRD_IMAGES_EVENTS_ID);
	if (o.max_unpacked_bytes)
		g_upload_max = o.max_unpacked_bytes;
	/* Restart: holders of sandboxes that did not survive go. */
	if (wr_image_release_except(g_store, live, NULL, err) < 0)
		return -EIO;
	return wrd_images_lazy_start(err);
}

void wrd_images_close(void)
{
	wrd_images_lazy_stop();
	wr_image_store_close(&g_store);
}

static bool is_store_ref(const char *image)
{
	if (image[0] == '/' || image[0] == '.')
		return false;
	return strchr(image, ':') || strchr(image, '@') || strchr(image, '/') ||
	       strncmp(image, "sha256:", 7) == 0;
}

int wrd_images_acquire_for_create(const char *image, char **path, struct wr_image **img,
				  char holder[40], wr_err *err)
{
	if (g_store == NULL || image[0] == '/')
		return 0;
	char id[17];
	if (wr_random_id(id) < 0)
		return wr_err_sys(err, "random id");
	snprintf(holder, 40, "create-%s", id);
	_cleanup_err_ wr_err e = NULL;
	int r = wr_image_acquire(g_store, image, holder, path, img, &e);
	if (r == 0)
		return 1;
	/* A bare word that is no store name: a configured image, maybe. */
	if (r == -ENOENT && !is_store_ref(image))
		return 0;
	if (r == -EINVAL && !is_store_ref(image))
		return 0;
	*err = steal_ptr(&e);
	if (*err && (*err)->field == NULL)
		(*err)->field = strdup("image");
	return r;
}

void wrd_images_adopt(const char *digest, const char *holder, const char *sandbox_id)
{
	_cleanup_err_ wr_err err = NULL;
	char *p = NULL;
	if (wr_image_acquire(g_store, digest, sandbox_id, &p, NULL, &err) < 0)
		wr_log_err(err);
	free(p);
	wr_image_release(g_store, digest, holder, NULL);
}

void wrd_images_drop(const char *digest, const char *holder)
{
	wr_image_release(g_store, digest, holder, NULL);
}

void wrd_images_reconcile(void)
{
	_cleanup_err_ wr_err err = NULL;
	if (g_store && wr_image_release_except(g_store, live, &g_running, &err) < 0)
		wr_log_err(err);
}

void wrd_images_gc_event(void *ctx, const struct wr_image_gc_event *ev)
{
	(void)ctx;
	if (ev->dry_run)
		return;
	wrd_images_event("image_removed", json_pack("{s:s, s:I, s:s}", "digest", ev->digest, "size",
						    (json_int_t)ev->size, "reason",
						    wr_image_gc_reason_name(ev->reason)));
	wr_info("image gc: removed %s (%llu bytes, %s)", ev->digest, (unsigned long long)ev->size,
		wr_image_gc_reason_name(ev->reason));
	/* Our own cached mount of it (spawners sweep theirs within a second). */
	wr_container_images_sweep();
}

void wrd_images_gc_auto(void)
{
	wrd_images_gc_auto_keep(NULL);
}

void wrd_images_gc_auto_keep(const char *keep)
{
	_cleanup_err_ wr_err err = NULL;
	wrd_images_reconcile();
	/* The image just imported is held through the pass: its caller is
	 * about to use it, whatever the grace period. */
	char holder[40] = "", *p = NULL;
	char id[17];
	if (keep && wr_random_id(id) == 0) {
		snprintf(holder, sizeof(holder), "create-import-%s", id);
		if (wr_image_acquire(g_store, keep, holder, &p, NULL, NULL) < 0)
			holder[0] = '\0';
		free(p);
	}
	struct wr_image_gc_opts o = {.on_remove = wrd_images_gc_event};
	if (wr_image_gc_auto(g_store, &o, NULL, &err) < 0)
		wr_log_err(err);
	if (holder[0])
		wr_image_release(g_store, keep, holder, NULL);
}

int wrd_images_open_config(const struct wrd_config *cfg, wr_err *err)
{
	json_t *conf = cfg->image_store ? json_loads(cfg->image_store, 0, NULL) : NULL;
	int r = wrd_images_open(cfg, conf, err);
	json_decref(conf);
	return r < 0 ? wr_err_wrap(err, "image store") : 0;
}

uint64_t wrd_images_or_mgr_upload_limit(const char *tenant, const char *id)
{
	/* The only upload route without a sandbox id is the image import:
	 * a tenant that may not import does not get its body spooled (the
	 * route answers 403). The Unix socket's tenant may (the route checks
	 * the transport itself). */
	if (id == NULL || id[0] == '\0') {
		const struct wrd_config *c = wrd_mgr_cfg;
		bool may = c == NULL || wrd_config_is_admin(c, tenant) ||
			   (tenant && c->unix_tenant && strcmp(tenant, c->unix_tenant) == 0);
		return g_store && may ? g_upload_max : 0;
	}
	return wrd_mgr_upload_limit(tenant, id);
}

void wrd_images_apply_defaults(const struct wr_image *img, json_t *body, json_t *spec)
{
	const struct wr_image_config *c = &img->config;
	if (c->workdir && json_object_get(body, "workdir") == NULL)
		json_object_set_new(spec, "workdir", json_string(c->workdir));
	/* A later image's value replaces an earlier one's; the request's
	 * own keys always win. */
	json_t *env = json_object_get(spec, "env");
	json_t *asked = json_object_get(body, "env");
	for (size_t i = 0; json_is_object(env) && i < c->n_env; i++) {
		const char *eq = strchr(c->env[i], '=');
		_cleanup_free_ char *k = eq ? strndup(c->env[i], (size_t)(eq - c->env[i])) : NULL;
		if (k && json_object_get(asked, k) == NULL)
			json_object_set_new(env, k, json_string(eq + 1));
	}
	/* a disk's firmware goes with it to the vm tier */
	if (img->kind == WR_IMAGE_KIND_VM_DISK && img->firmware[0])
		json_object_set_new(spec, "firmware", json_string(img->firmware));
	/* OCI "User": a numeric uid (or uid:gid) applies; a user name would
	 * need the image's /etc/passwd, which the host does not read. */
	uint64_t uid;
	if (c->user && json_object_get(body, "user") == NULL) {
		_cleanup_free_ char *u = strdup(c->user);
		char *colon = u ? strchr(u, ':') : NULL;
		if (colon)
			*colon = '\0';
		if (u && wr_parse_u64(u, 65535, &uid) == 0)
			json_object_set_new(spec, "user", json_integer((json_int_t)uid));
	}
}

int wrd_images_hold(struct wrd_image_holds *h, const char *image, json_t *body, json_t *spec,
		    char **store_path, wr_err *err)
{
	if (h->n == WRD_MAX_HOLDS)
		return wr_err_set(err, E2BIG, "too many images");
	/* A registry reference: pulled into the store first (per the body's
	 * "pull" policy, validated by the create route). */
	_cleanup_free_ char *local = NULL;
	if (image[0] != '/' && image[0] != '.' && wr_registry_ref_is_remote(image)) {
		int policy =
		    wrd_images_pull_policy(json_string_value(json_object_get(body, "pull")));
		int r =
		    wrd_images_ensure_remote(image, policy < 0 ? WRD_PULL_MISSING : policy,
					     json_object_get(body, "registry_auth"), &local, err);
		if (r < 0)
			return r;
		image = local;
	}
	struct wr_image *img = NULL;
	int a = wrd_images_acquire_for_create(image, store_path, &img, h->holder[h->n], err);
	if (a <= 0)
		return a;
	/* A disk boots only on the vm tier, and the vm tier boots only disks
	 * (no tier: the container tier). */
	const char *tier = json_string_value(json_object_get(body, "tier"));
	bool vm = tier && strcmp(tier, "vm") == 0;
	if ((img->kind == WR_IMAGE_KIND_VM_DISK) != vm) {
		int r = wr_err_field(
		    err, "image", "image: '%s' is a %s image; the %s tier boots %s images", image,
		    wr_image_kind_name(img->kind),
		    vm	   ? "vm"
		    : tier ? tier
			   : "container",
		    vm ? "vm-disk (warren image import --vm-disk, image build-vm)" : "rootfs");
		wrd_images_drop(img->digest, h->holder[h->n]);
		wr_image_free(&img);
		free(*store_path);
		*store_path = NULL;
		return r;
	}
	snprintf(h->digest[h->n], sizeof(h->digest[0]), "%s", img->digest);
	h->n++;
	wrd_images_apply_defaults(img, body, spec);
	wr_image_free(&img);
	return 1;
}

int wrd_images_stack(struct wrd_image_holds *h, const struct wrd_config *cfg, json_t *body,
		     bool tcp, const char *base_path, json_t *spec, wr_err *err)
{
	json_t *ls = json_object_get(body, "layers");
	if (ls == NULL)
		return 0;
	size_t n = json_array_size(ls);
	if (!json_is_array(ls) || n == 0 || n > WRD_MAX_HOLDS - 1)
		return wr_err_field(err, "layers", "layers: an array of 1 to %d image references",
				    WRD_MAX_HOLDS - 1);
	json_t *paths = json_array();
	json_array_append_new(paths, json_string(base_path));
	int r = 0;
	for (size_t i = 0; i < n && r == 0; i++) {
		char field[16];
		snprintf(field, sizeof(field), "layers[%zu]", i);
		const char *ref = json_string_value(json_array_get(ls, i));
		if (ref == NULL || ref[0] == '\0' || strlen(ref) > 4095) {
			r = wr_err_field(err, field, "%s: must be a non-empty string", field);
			break;
		}
		_cleanup_free_ char *sp = NULL;
		const char *path = wrd_config_image(cfg, ref);
		if (path == NULL) {
			int a = wrd_images_hold(h, ref, body, spec, &sp, err);
			if (a < 0) {
				free((*err)->field);
				(*err)->field = strdup(field);
				r = a;
				break;
			}
			path = a ? sp : NULL;
		}
		struct stat st;
		if (path == NULL && ref[0] == '/' && !tcp)
			path = ref;
		if (path == NULL || stat(path, &st) < 0 ||
		    !(S_ISDIR(st.st_mode) || S_ISREG(st.st_mode))) {
			r = wr_err_field(
			    err, field, "%s: '%s' is not a store image, a configured image%s",
			    field, ref, tcp ? "" : " or an existing rootfs or EROFS file");
			break;
		}
		json_array_append_new(paths, json_string(path));
	}
	if (r == 0)
		json_object_set(spec, "layers", paths);
	json_decref(paths);
	return r;
}

void wrd_images_holds_adopt(struct wrd_image_holds *h, const char *sandbox_id)
{
	for (size_t i = 0; i < h->n; i++)
		wrd_images_adopt(h->digest[i], h->holder[i], sandbox_id);
	h->n = 0;
}

void wrd_images_holds_drop(struct wrd_image_holds *h)
{
	for (size_t i = 0; i < h->n; i++)
		wrd_images_drop(h->digest[i], h->holder[i]);
	h->n = 0;
}

static bool not_this(void *ctx, const char *holder)
{
	return strcmp(holder, ctx) != 0;
}

void wrd_images_release_sandbox(const char *sandbox_id)
{
	_cleanup_err_ wr_err err = NULL;
	if (g_store && wr_image_release_except(g_store, not_this, (void *)sandbox_id, &err) < 0)
		wr_log_err(err);
}
