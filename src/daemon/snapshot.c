/* Snapshots: a sandbox's writable layer as a store image (snapshot.h).
 *
 * Ordering (crash safety): the capture holds the sandbox's `transition`
 * (pause, resume, exec and kill wait for it), freezes a running sandbox
 * without recording it, reads the upper directory into the store's staging
 * area, commits the image (atomic: rename, then one transaction), thaws.
 * A crash before the commit leaves a staging directory the next open of
 * the store sweeps, and a frozen sandbox whose record says running, which
 * recovery (wrd_life_reconcile) thaws. A paused sandbox is never thawed.
 */
#include "daemon/snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "daemon/checkpoint.h"
#include "daemon/images.h"
#include "image/registry.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>
#include <sys/stat.h>
#include "daemon/jsonutil.h"

void wrd_snapshot_name(const struct wrd_sbx *sb, const char *what, char *buf, size_t len)
{
	snprintf(buf, len, "snapshot/%s:%s", sb->rec.id, what);
}

/* The snapshot's config: the sandbox's runtime defaults and the labels
 * naming its stack. */
/* ---- the snapshot key --------------------------------------------------- */

static unsigned char g_key[32];
static bool g_key_ok;

int wrd_snapshot_key_init(const char *path, const char *state_dir, wr_err *err)
{
	char dflt[4096];
	if (path == NULL) {
		snprintf(dflt, sizeof(dflt), "%s/snapshot.key", state_dir);
		path = dflt;
		int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd >= 0) {
			unsigned char k[32];
			bool ok = getrandom(k, sizeof(k), 0) == sizeof(k) &&
				  write(fd, k, sizeof(k)) == sizeof(k) && fsync(fd) == 0;
			close(fd);
			if (!ok) {
				unlink(path);
				return wr_err_sys(err, "make the snapshot key %s", path);
			}
		} else if (errno != EEXIST) {
			return wr_err_sys(err, "make the snapshot key %s", path);
		}
	}
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		return wr_err_sys(err, "snapshot key %s", path);
	if ((st.st_mode & 077) != 0)
		return wr_err_field(err, "snapshot_key",
				    "snapshot_key: %s is readable by others than its owner (chmod "
				    "600 it)",
				    path);
	if (read(fd, g_key, sizeof(g_key)) != (ssize_t)sizeof(g_key))
		return wr_err_field(err, "snapshot_key",
				    "snapshot_key: %s must hold at least 32 bytes", path);
	g_key_ok = true;
	return 0;
}

/* hex HMAC-SHA256 of digest with the key */
static int sign(const char *digest, char out[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned n = 0;
	if (!g_key_ok ||
	    HMAC(EVP_sha256(), g_key, sizeof(g_key), (const unsigned char *)digest, strlen(digest),
		 md, &n) == NULL ||
	    n != 32)
		return -1;
	for (unsigned i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
	return 0;
}

bool wrd_snapshot_procs_name(const char *ref, char *out, size_t n)
{
	if (ref == NULL || strchr(ref, '@') || strncmp(ref, "sha256:", 7) == 0)
		return false;
	const char *slash = strrchr(ref, '/');
	const char *colon = strrchr(slash ? slash : ref, ':');
	int len = colon ? snprintf(out, n, "%.*s.processes:%s", (int)(colon - ref), ref, colon + 1)
			: snprintf(out, n, "%s.processes:latest", ref);
	return len > 0 && (size_t)len < n && len <= 255;
}

bool wrd_snapshot_digest_ok(const char *d)
{
	if (d == NULL || strncmp(d, "sha256:", 7) != 0 || strlen(d) != 71)
		return false;
	for (const char *p = d + 7; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return false;
	return true;
}

int wrd_snapshot_procs_of(const struct wr_image *snap, const char **digest, wr_err *err)
{
	*digest = NULL;
	const char *pd = wr_image_label(&snap->config, WRD_SNAP_PROCS);
	if (pd == NULL)
		return 0;
	if (!wrd_snapshot_digest_ok(pd))
		return wr_err_field(err, "image",
				    "image: snapshot %s names its processes with '%.80s', not a "
				    "sha256 digest",
				    snap->digest, pd);
	const char *sig = wr_image_label(&snap->config, WRD_SNAP_PROCS_SIG);
	char want[65];
	if (sign(pd, want) < 0)
		return wr_err_field(err, "image",
				    "image: this node has no snapshot key: processes are not "
				    "restored here");
	if (sig == NULL || strlen(sig) != 64 || CRYPTO_memcmp(sig, want, 64) != 0)
		return wr_err_field(err, "image",
				    "image: the processes of snapshot %s are not signed with this "
				    "node's snapshot key (nodes that exchange snapshots with "
				    "processes share it: config \"snapshot_key\"); \"processes\": "
				    "false takes its files only",
				    snap->digest);
	*digest = pd;
	return 1;
}

static char *snap_config(struct wrd_sbx *sb, json_t *digests, const char *procs)
{
	json_t *cfg = json_object(), *labels = json_object();
	char sig[65];
	if (procs && sign(procs, sig) == 0) {
		json_object_set_new(labels, WRD_SNAP_PROCS, json_string(procs));
		json_object_set_new(labels, WRD_SNAP_PROCS_SIG, json_string(sig));
	}
	json_object_set_new(labels, WRD_SNAP_BASE, json_copy(json_array_get(digests, 0)));
	char *mid = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&mid, &len);
	for (size_t i = 1; f && i < json_array_size(digests); i++)
		fprintf(f, "%s%s", i > 1 ? "," : "", json_string_value(json_array_get(digests, i)));
	if (f)
		fclose(f);
	if (mid && mid[0])
		json_object_set_new(labels, WRD_SNAP_LAYERS, json_string(mid));
	free(mid);
	json_object_set_new(labels, WRD_SNAP_SOURCE, json_string(sb->rec.id));
	json_object_set_new(cfg, "Labels", labels);
	json_t *spec = sb->rec.spec;
	json_t *env = json_array();
	const char *k;
	json_t *v;
	json_object_foreach(json_object_get(spec, "env"), k, v)
	{
		char *kv = NULL;
		if (asprintf(&kv, "%s=%s", k, json_string_value(v)) >= 0)
			json_array_append_new(env, json_string(kv));
		free(kv);
	}
	json_object_set_new(cfg, "Env", env);
	const char *wd = json_string_value(json_object_get(spec, "workdir"));
	if (wd)
		json_object_set_new(cfg, "WorkingDir", json_string(wd));
	char user[16];
	snprintf(user, sizeof(user), "%lld",
		 (long long)json_integer_value(json_object_get(spec, "user")));
	json_object_set_new(cfg, "User", json_string(user));
	json_t *root = json_pack("{s:o}", "config", cfg);
	char *text = json_dumps(root, JSON_COMPACT);
	json_decref(root);
	return text;
}

/* The processes' images (tier op save_procs, frozen already) as an image
 * of the store named after the snapshot (ref): *digest. */
static int take_procs(struct wrd_sbx *sb, const char *ref, char digest[WR_IMAGE_DIGEST_LEN + 1],
		      wr_err *err)
{
	struct wr_image_store *store = wrd_images();
	char rnd[17];
	if (wr_random_id(rnd) < 0)
		return wr_err_set(err, EIO, "random id");
	rnd[12] = '\0';
	char dir[4096];
	snprintf(dir, sizeof(dir), "%s/tmp/procs-%s", wr_image_store_dir(store), rnd);
	if (sb->ops->save_procs(sb->tsb, dir, err) < 0)
		return -1;
	json_t *labels =
	    json_pack("{s:s, s:s}", WRD_PROCS_OF, sb->rec.id, WRD_PROCS_TIER, sb->ops->name);
	json_t *root = json_pack("{s:{s:o}}", "config", "Labels", labels);
	_cleanup_free_ char *config = json_dumps(root, JSON_COMPACT);
	json_decref(root);
	char source[96];
	snprintf(source, sizeof(source), "snapshot-processes:%s", sb->rec.id);
	char name[300];
	struct wr_image_import_opts io = {
	    .ref = wrd_snapshot_procs_name(ref, name, sizeof(name)) ? name : NULL,
	    .source = source};
	struct wr_image *img = NULL;
	_cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int r = fd < 0 ? wr_err_sys(err, "open %s", dir)
		       : wr_image_import_upper(store, fd, 0, config, &io, &img, err);
	wr_rm_flat_dir(dir);
	if (r == 0)
		snprintf(digest, WR_IMAGE_DIGEST_LEN + 1, "%s", img->digest);
	wr_image_free(&img);
	return r;
}

int wrd_snapshot_take(struct wrd_sbx *sb, const char *ref, bool procs, struct wr_image **out,
		      wr_err *err)
{
	struct wr_image_store *store = wrd_images();
	if (store == NULL)
		return wr_err_set(err, EOPNOTSUPP, "this node has no image store");
	if (sb->ops->save) /* a whole VM: snapshot_vm.c */
		return wrd_snapshot_vm_take(sb, ref, out, err);
	if (sb->ops->upper == NULL || sb->ops->freeze == NULL)
		return wr_err_set(err, EOPNOTSUPP, "the %s tier has no snapshots", sb->ops->name);
	const char *no_criu = NULL;
	if (procs && sb->ops->save_procs == NULL)
		return wr_err_field(err, "processes",
				    "processes: the %s tier's snapshots hold its files only",
				    sb->ops->name);
	if (procs && strcmp(sb->ops->name, "container") == 0 && !wrd_ckpt_available(&no_criu))
		return wr_err_field(err, "processes",
				    "processes: saving processes needs CRIU, unusable on this "
				    "node: %s",
				    no_criu);
	if (procs && !g_key_ok)
		return wr_err_field(err, "processes",
				    "processes: this node has no snapshot key (config "
				    "\"snapshot_key\")");
	json_t *digests = json_object_get(sb->rec.spec, "image_digests");
	if (json_array_size(digests) == 0)
		return wr_err_set(err, EOPNOTSUPP,
				  "sandbox %s was not created from store images only: a snapshot "
				  "could not name its base",
				  sb->rec.id);

	/* Short holds of the sandbox (the harvest sampler, a usage read) end
	 * within milliseconds: a snapshot of processes waits for them (2 s at
	 * most) before the calls still in flight refuse it. Each wait lets
	 * the lock go: everything is checked again after it. */
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl); /* sb->cv's clock */
	dl.tv_sec += 2;
	bool waited = false; /* the 2 s are over */
	pthread_mutex_lock(&sb->lock);
again:
	wrd_sbx_wait_transition(sb);
	enum wrd_state st = sb->state;
	if ((st != WRD_RUNNING && st != WRD_PAUSED) || sb->reaping) {
		pthread_mutex_unlock(&sb->lock);
		return wr_err_set(err, ESRCH, "sandbox %s is %s", sb->rec.id,
				  st == WRD_RUNNING || st == WRD_PAUSED ? "being ended"
									: wrd_state_name(st));
	}
	if (procs && wrd_sbx_suspended(sb)) {
		pthread_mutex_unlock(&sb->lock);
		return wr_err_set(err, ESRCH,
				  "sandbox %s is paused to disk: resume it (or pause it in "
				  "memory) to snapshot its processes",
				  sb->rec.id);
	}
	if (procs && sb->busy > 0 && !waited) {
		waited = pthread_cond_timedwait(&sb->cv, &sb->lock, &dl) == ETIMEDOUT;
		goto again;
	}
	if (procs && sb->busy > 0) {
		pthread_mutex_unlock(&sb->lock);
		return wr_err_set(err, ESRCH,
				  "sandbox %s has operations in flight (a command, a file "
				  "transfer, a terminal): its processes are saved only when none "
				  "runs",
				  sb->rec.id);
	}
	sb->transition = true;
	pthread_mutex_unlock(&sb->lock);

	/* Ordering: frozen, then the processes saved (they stay frozen), then
	 * the files read: what the processes have open is what the layer
	 * holds. The processes' image first: the layer's config names it. */
	int64_t t0 = wrd_now_ms();
	bool thaw = st == WRD_RUNNING;
	int r = thaw ? sb->ops->freeze(sb->tsb, true, err) : 0;
	char pdigest[WR_IMAGE_DIGEST_LEN + 1] = "";
	if (r == 0 && procs)
		r = take_procs(sb, ref, pdigest, err);
	_cleanup_free_ char *config = NULL;
	if (r == 0 && (config = snap_config(sb, digests, procs ? pdigest : NULL)) == NULL)
		r = wr_err_set(err, ENOMEM, "out of memory");
	int fd = -1;
	uid_t base = 0;
	if (r == 0)
		r = sb->ops->upper(sb->tsb, &fd, &base, err);
	struct wr_image_import_opts io = {.ref = ref, .source = NULL};
	char source[64];
	snprintf(source, sizeof(source), "snapshot:%s", sb->rec.id);
	io.source = source;
	if (r == 0) {
		r = wr_image_import_upper(store, fd, base, config, &io, out, err);
		close(fd);
	}
	int64_t frozen_ms = wrd_now_ms() - t0;
	if (thaw) {
		_cleanup_err_ wr_err e2 = NULL;
		if (sb->ops->freeze(sb->tsb, false, &e2) < 0)
			wr_warn("sandbox %s: %s", sb->rec.id, e2->msg);
	}
	pthread_mutex_lock(&sb->lock);
	sb->transition = false;
	pthread_cond_broadcast(&sb->cv);
	pthread_mutex_unlock(&sb->lock);
	if (r < 0) {
		if ((*err)->errnum == EINVAL && (*err)->field) {
			free((*err)->field);
			(*err)->field = strdup("name");
		}
		return wr_err_wrap(err, "snapshot sandbox %s", sb->rec.id);
	}
	json_t *d = json_object();
	json_object_set_new(d, "name", json_string(ref));
	json_object_set_new(d, "digest", json_string((*out)->digest));
	json_object_set_new(d, "size", json_integer((json_int_t)(*out)->size));
	json_object_set_new(d, "frozen_s", json_real((double)frozen_ms / 1000.0));
	if (procs)
		json_object_set_new(d, "processes", json_string(pdigest));
	wrd_sbx_event(sb, "snapshot", d);
	json_t *ev = json_object();
	json_object_set_new(ev, "digest", json_string((*out)->digest));
	json_object_set_new(ev, "ref", json_string(ref));
	json_object_set_new(ev, "source", json_string(source));
	wrd_images_event("image_imported", ev);
	return 0;
}

/* Processes images unpacked for the creates that restore them at once (a
 * fork's N, a burst of creates from one snapshot): one unpack, shared (the
 * restores only read it), removed when the last of them is done
 * (wrd_snapshot_restore_done). */
struct unpacked {
	char digest[WR_IMAGE_DIGEST_LEN + 1];
	char *dir;
	unsigned refs;
	bool ready;
	int rc;
	struct unpacked *next;
};
static pthread_mutex_t g_up_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_up_cv = PTHREAD_COND_INITIALIZER;
static struct unpacked *g_up;

/* With g_up_lock held: one use fewer; the last unlinks the entry, which
 * the caller frees (up_free) once the lock is let go. */
static struct unpacked *up_unref(struct unpacked *u)
{
	if (--u->refs > 0)
		return NULL;
	for (struct unpacked **pp = &g_up; *pp; pp = &(*pp)->next)
		if (*pp == u) {
			*pp = u->next;
			break;
		}
	return u;
}

/* Without the lock: the directory removed (other creates go on meanwhile). */
static void up_free(struct unpacked *u)
{
	if (u == NULL)
		return;
	if (u->dir)
		wrd_snapshot_remove_dir(u->dir);
	free(u->dir);
	free(u);
}

static int unpack_shared(const struct wr_image *p, char **dir, wr_err *err)
{
	pthread_mutex_lock(&g_up_lock);
	struct unpacked *u = g_up;
	while (u && strcmp(u->digest, p->digest) != 0)
		u = u->next;
	if (u) {
		u->refs++;
		while (!u->ready)
			pthread_cond_wait(&g_up_cv, &g_up_lock);
		int rc = u->rc;
		*dir = rc == 0 ? strdup(u->dir) : NULL;
		struct unpacked *gone = rc < 0 || *dir == NULL ? up_unref(u) : NULL;
		pthread_mutex_unlock(&g_up_lock);
		up_free(gone);
		if (rc < 0)
			return wr_err_set(err, EIO, "unpack %s failed (in a create alongside)",
					  p->digest);
		return *dir ? 0 : wr_err_set(err, ENOMEM, "out of memory");
	}
	u = calloc(1, sizeof(*u));
	if (u == NULL) {
		pthread_mutex_unlock(&g_up_lock);
		return wr_err_set(err, ENOMEM, "out of memory");
	}
	snprintf(u->digest, sizeof(u->digest), "%s", p->digest);
	u->refs = 1;
	u->next = g_up;
	g_up = u;
	pthread_mutex_unlock(&g_up_lock);
	char *d = NULL;
	int rc = wrd_snapshot_unpack(p, &d, err);
	pthread_mutex_lock(&g_up_lock);
	u->ready = true;
	u->rc = rc < 0 ? rc : 0;
	u->dir = d;
	pthread_cond_broadcast(&g_up_cv);
	*dir = rc == 0 ? strdup(d) : NULL;
	struct unpacked *gone = rc < 0 || *dir == NULL ? up_unref(u) : NULL;
	pthread_mutex_unlock(&g_up_lock);
	up_free(gone);
	if (rc == 0 && *dir == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	return rc;
}

bool wrd_snapshot_release_shared(const char *dir)
{
	pthread_mutex_lock(&g_up_lock);
	struct unpacked *u = g_up;
	while (u && !(u->dir && strcmp(u->dir, dir) == 0))
		u = u->next;
	bool found = u != NULL;
	struct unpacked *gone = u ? up_unref(u) : NULL;
	pthread_mutex_unlock(&g_up_lock);
	up_free(gone);
	return found;
}

int wrd_snapshot_procs_hold(const struct wr_image *snap, char **dir, wr_err *err)
{
	*dir = NULL;
	const char *pd = NULL;
	int r0 = wrd_snapshot_procs_of(snap, &pd, err);
	if (r0 <= 0)
		return r0;
	struct wr_image *p = NULL;
	if (wr_image_resolve(wrd_images(), pd, &p, err) < 0)
		return -1;
	int r = unpack_shared(p, dir, err);
	wr_image_free(&p);
	return r;
}

/* A snapshot's processes for a create (body "processes", default true):
 * their image unpacked into *dir, the tier the container's. */
static int expand_procs(json_t *body, const char *image, const char *pd, char **dir, wr_err *err)
{
	json_t *want = json_object_get(body, "processes");
	if (want && !json_is_true(want))
		return 0;
	const char *tier = json_string_value(json_object_get(body, "tier"));
	if (tier && strcmp(tier, "container") != 0)
		return wr_err_field(err, "tier",
				    "tier: snapshot '%s' holds a container's processes; they "
				    "restore on the container tier (or give \"processes\": false)",
				    image);
	struct wr_image *p = NULL;
	_cleanup_err_ wr_err e2 = NULL;
	if (wr_image_resolve(wrd_images(), pd, &p, &e2) < 0)
		return wr_err_field(err, "image",
				    "image: snapshot '%s' holds its processes in image %s, which "
				    "this node's store does not have (pull it too, or give "
				    "\"processes\": false)",
				    image, pd);
	int r = unpack_shared(p, dir, err);
	wr_image_free(&p);
	if (r < 0)
		return wr_err_wrap(err, "unpack the processes of snapshot %s", image);
	json_object_set_new(body, "tier", json_string("container"));
	return 0;
}

int wrd_snapshot_expand(json_t *body, char **restore_dir, wr_err *err)
{
	*restore_dir = NULL;
	struct wr_image_store *store = wrd_images();
	const char *image = json_string_value(json_object_get(body, "image"));
	/* "processes" (a create's choice for a snapshot with processes) is
	 * taken out here, so the create's own checks never see it */
	json_t *want = json_incref(json_object_get(body, "processes"));
	json_object_del(body, "processes");
	_cleanup_(json_decrefp) json_t *want_ref = want;
	if (want && !json_is_boolean(want))
		return wr_err_field(err, "processes", "processes: must be true or false");
	/* A registry reference is pulled (per the body's "pull") first: it
	 * may be a snapshot, whose stack the create needs. An invalid policy
	 * is left to the create's checks. */
	_cleanup_free_ char *local = NULL;
	int policy = wrd_images_pull_policy(json_string_value(json_object_get(body, "pull")));
	if (store && image && image[0] != '/' && image[0] != '.' &&
	    wr_registry_ref_is_remote(image) && policy >= 0 &&
	    wrd_images_ensure_remote(image, policy, json_object_get(body, "registry_auth"), &local,
				     err) < 0)
		return -1;
	/* pulled now: the create's own resolution finds it without a second
	 * registry round trip (which, with "always", could see a moved tag) */
	if (local)
		json_object_set_new(body, "pull", json_string("missing"));
	struct wr_image *img = NULL;
	_cleanup_err_ wr_err e2 = NULL;
	if (store == NULL || image == NULL || image[0] == '/' || image[0] == '.' ||
	    wr_image_resolve(store, local ? local : image, &img, &e2) < 0) {
		/* not a store image: the create resolves it otherwise */
		if (json_is_true(want))
			return wr_err_field(err, "processes",
					    "processes: image '%s' is no snapshot with processes",
					    image ? image : "");
		return 0;
	}
	const char *pd = wr_image_label(&img->config, WRD_SNAP_PROCS);
	bool vm = wr_image_label(&img->config, "dev.warren.vm.snapshot") != NULL;
	/* processes asked for (or by default): well formed and signed */
	if (pd && !vm && !(want && json_is_false(want)) &&
	    wrd_snapshot_procs_of(img, &pd, err) < 0) {
		wr_image_free(&img);
		return -1;
	}
	if (json_is_true(want) && pd == NULL && !vm) {
		wr_image_free(&img);
		return wr_err_field(err, "processes",
				    "processes: image '%s' is no snapshot with processes", image);
	}
	if (vm) {
		int vr = wrd_snapshot_vm_expand(body, img, restore_dir, err);
		wr_image_free(&img);
		return vr;
	}
	const char *base = wr_image_label(&img->config, WRD_SNAP_BASE);
	if (base == NULL) {
		wr_image_free(&img);
		return 0;
	}
	json_t *layers = json_array();
	const char *mid = wr_image_label(&img->config, WRD_SNAP_LAYERS);
	_cleanup_free_ char *copy = mid ? strdup(mid) : NULL;
	char *save = NULL;
	for (char *t = copy ? strtok_r(copy, ",", &save) : NULL; t; t = strtok_r(NULL, ",", &save))
		json_array_append_new(layers, json_string(t));
	json_array_append_new(layers, json_string(img->digest));
	json_t *own = json_object_get(body, "layers");
	if (json_is_array(own))
		json_array_extend(layers, own);
	int r = 0;
	struct wr_image *b = NULL;
	if (wr_image_resolve(store, base, &b, &e2) < 0) {
		r = wr_err_field(err, "image",
				 "image: snapshot '%s' goes on base image %s, which this node's "
				 "store does not have (pull or import it first)",
				 image, base);
	} else if (json_array_size(layers) > WRD_MAX_HOLDS - 1) {
		r = wr_err_field(err, "image",
				 "image: snapshot '%s' stacks %zu layers (at most %d)", image,
				 json_array_size(layers), WRD_MAX_HOLDS - 1);
	} else {
		if (pd) {
			json_t *w = json_object();
			if (want)
				json_object_set(w, "processes", want);
			json_object_set(w, "tier", json_object_get(body, "tier"));
			r = expand_procs(w, image, pd, restore_dir, err);
			if (r == 0 && *restore_dir)
				json_object_set_new(body, "tier", json_string("container"));
			json_decref(w);
		}
		if (r == 0) {
			json_object_set_new(body, "image", json_string(base));
			json_object_set(body, "layers", layers);
		}
	}
	wr_image_free(&b);
	wr_image_free(&img);
	json_decref(layers);
	return r;
}
