/* Snapshots of a whole VM (microvm and vm tiers): RAM, devices and the
 * disk (tier op save, tiers/qemu_snap.h) as an image of the store, so it
 * is named, versioned, pushed and pulled like any image. The image is an
 * EROFS of the saved directory (state, disk as qcow2, meta.json) whose
 * config labels say what it is:
 *   dev.warren.vm.snapshot       the tier ("microvm", "vm")
 *   dev.warren.vm.base           sha256 digest of the VM's image file (a
 *                                store image's digest is the same hash)
 *   dev.warren.vm.image          the source sandbox's image as given
 *   dev.warren.vm.memory_mb, .disk_mb, .cpu   the VM's sizes
 *   dev.warren.snapshot.source   the sandbox id
 * A create with {"image": <vm snapshot>} (wrd_snapshot_vm_expand) boots
 * nothing: the base image is found (by digest in the store, or the
 * recorded name when this node's file has that digest), the snapshot is
 * unpacked (fsck.erofs --extract, which also checks it) into the store's
 * staging area and the tier restores the VM from it.
 *
 * Crash safety: the capture holds the sandbox's transition and records
 * nothing; its staging directory is under the store's tmp/ (swept at the
 * next open) and the image is committed by the store's atomic import. A
 * crash mid-capture leaves a VM stopped ("postmigrate") with a running
 * record, which recovery runs again (wrd_life_reconcile). */
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "daemon/config.h"
#include "daemon/images.h"
#include "daemon/jsonutil.h"
#include "daemon/manager.h"
#include "daemon/snapshot.h"
#include "tiers/qemu_snap.h"

#define L_TIER "dev.warren.vm.snapshot"
#define L_BASE "dev.warren.vm.base"
#define L_IMAGE "dev.warren.vm.image"
#define L_MEM "dev.warren.vm.memory_mb"
#define L_DISK "dev.warren.vm.disk_mb"
#define L_CPU "dev.warren.vm.cpu"

/* Digests of configured image files, by identity (a 1 GiB raw disk takes
 * seconds to hash): a file changed in place gets a new mtime or size. */
#define DIGEST_CACHE 16
static struct {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
	char digest[72];
} g_dc[DIGEST_CACHE];
static unsigned g_dc_next;
static pthread_mutex_t g_dc_lock = PTHREAD_MUTEX_INITIALIZER;

static bool same_file(int i, const struct stat *st)
{
	return g_dc[i].digest[0] && g_dc[i].dev == st->st_dev && g_dc[i].ino == st->st_ino &&
	       g_dc[i].size == st->st_size && g_dc[i].mtime.tv_sec == st->st_mtim.tv_sec &&
	       g_dc[i].mtime.tv_nsec == st->st_mtim.tv_nsec;
}

/* "sha256:<hex>" of a file's bytes. */
static int file_digest(const char *path, char out[72], wr_err *err)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return wr_err_sys(err, "open %s", path);
	struct stat st;
	if (fstat(fd, &st) < 0)
		return wr_err_sys(err, "stat %s", path);
	pthread_mutex_lock(&g_dc_lock);
	for (int i = 0; i < DIGEST_CACHE; i++)
		if (same_file(i, &st)) {
			memcpy(out, g_dc[i].digest, 72);
			pthread_mutex_unlock(&g_dc_lock);
			return 0;
		}
	pthread_mutex_unlock(&g_dc_lock);
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	if (c == NULL || EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1) {
		EVP_MD_CTX_free(c);
		return wr_err_set(err, ENOMEM, "sha256");
	}
	static __thread char buf[1 << 16];
	ssize_t n;
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		EVP_DigestUpdate(c, buf, (size_t)n);
	unsigned char md[32];
	unsigned len = 0;
	EVP_DigestFinal_ex(c, md, &len);
	EVP_MD_CTX_free(c);
	if (n < 0)
		return wr_err_sys(err, "read %s", path);
	memcpy(out, "sha256:", 7);
	for (int i = 0; i < 32; i++)
		snprintf(out + 7 + 2 * i, 3, "%02x", md[i]);
	pthread_mutex_lock(&g_dc_lock);
	unsigned k = g_dc_next++ % DIGEST_CACHE;
	g_dc[k].dev = st.st_dev;
	g_dc[k].ino = st.st_ino;
	g_dc[k].size = st.st_size;
	g_dc[k].mtime = st.st_mtim;
	memcpy(g_dc[k].digest, out, 72);
	pthread_mutex_unlock(&g_dc_lock);
	return 0;
}

static char *staging(struct wr_image_store *store)
{
	char rnd[17], *p = NULL;
	if (wr_random_id(rnd) < 0)
		return NULL;
	rnd[12] = '\0';
	if (asprintf(&p, "%s/tmp/vm-%s", wr_image_store_dir(store), rnd) < 0)
		return NULL;
	return p;
}

static void label(json_t *l, const char *k, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void label(json_t *l, const char *k, const char *fmt, ...)
{
	char v[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(v, sizeof(v), fmt, ap);
	va_end(ap);
	json_object_set_new(l, k, json_string(v));
}

static char *vm_config(struct wrd_sbx *sb, json_t *meta, const char *base)
{
	json_t *labels = json_object(), *spec = sb->rec.spec;
	label(labels, L_TIER, "%s", sb->rec.tier);
	label(labels, L_BASE, "%s", base);
	label(labels, L_IMAGE, "%s", sb->rec.image);
	label(labels, L_MEM, "%lld",
	      (long long)(json_integer_value(json_object_get(meta, "memory_bytes")) >> 20));
	label(labels, L_DISK, "%lld",
	      (long long)(json_integer_value(json_object_get(meta, "disk_bytes")) >> 20));
	label(labels, L_CPU, "%lld", (long long)json_integer_value(json_object_get(meta, "cpus")));
	label(labels, WRD_SNAP_SOURCE, "%s", sb->rec.id);
	json_t *cfg = json_pack("{s:o}", "Labels", labels);
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

int wrd_snapshot_vm_take(struct wrd_sbx *sb, const char *ref, struct wr_image **out, wr_err *err)
{
	struct wr_image_store *store = wrd_images();
	if (store == NULL)
		return wr_err_set(err, EOPNOTSUPP, "this node has no image store");
	char base[72];
	json_t *digests = json_object_get(sb->rec.spec, "image_digests");
	if (json_array_size(digests) > 0)
		snprintf(base, sizeof(base), "%s", json_string_value(json_array_get(digests, 0)));
	else if (file_digest(sb->rec.image_path, base, err) < 0)
		return wr_err_wrap(err, "snapshot sandbox %s", sb->rec.id);
	_cleanup_free_ char *dir = staging(store);
	if (dir == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	if (mkdir(dir, 0700) < 0)
		return wr_err_sys(err, "mkdir %s", dir);
	char root[1100];
	snprintf(root, sizeof(root), "%s/root", dir);

	pthread_mutex_lock(&sb->lock);
	wrd_sbx_wait_transition(sb);
	enum wrd_state st = sb->state;
	if ((st != WRD_RUNNING && st != WRD_PAUSED) || sb->reaping) {
		pthread_mutex_unlock(&sb->lock);
		rmdir(dir);
		return wr_err_set(err, ESRCH, "sandbox %s is %s", sb->rec.id,
				  st == WRD_RUNNING || st == WRD_PAUSED ? "being ended"
									: wrd_state_name(st));
	}
	sb->transition = true;
	pthread_mutex_unlock(&sb->lock);

	int64_t t0 = wrd_now_ms();
	json_t *meta = NULL;
	int r = sb->ops->save(sb->tsb, root, &meta, err);
	int64_t saved_ms = wrd_now_ms() - t0;
	/* the VM runs again (or stays paused) once saved: the import
	 * happens while it runs */
	pthread_mutex_lock(&sb->lock);
	sb->transition = false;
	pthread_cond_broadcast(&sb->cv);
	pthread_mutex_unlock(&sb->lock);
	_cleanup_free_ char *config = r == 0 ? vm_config(sb, meta, base) : NULL;
	if (r == 0 && config == NULL)
		r = wr_err_set(err, ENOMEM, "out of memory");
	char source[64];
	snprintf(source, sizeof(source), "snapshot:%s", sb->rec.id);
	if (r == 0) {
		/* the image's config: wr_image_import takes a directory's,
		 * so the labels go in through an import of the tree with the
		 * config (import_upper keeps files as they are) */
		_cleanup_close_ int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		struct wr_image_import_opts io = {.ref = ref, .source = source};
		r = fd < 0 ? wr_err_sys(err, "open %s", root)
			   : wr_image_import_upper(wrd_images(), fd, 0, config, &io, out, err);
	}
	wr_qsnap_remove(root);
	rmdir(dir);
	if (r < 0) {
		json_decref(meta);
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
	json_object_set_new(d, "frozen_s", json_real((double)saved_ms / 1000.0));
	json_object_set_new(d, "memory", json_true());
	json_object_set_new(d, "state_bytes", json_copy(json_object_get(meta, "state_bytes")));
	wrd_sbx_event(sb, "snapshot", d);
	json_decref(meta);
	json_t *ev = json_object();
	json_object_set_new(ev, "digest", json_string((*out)->digest));
	json_object_set_new(ev, "ref", json_string(ref));
	json_object_set_new(ev, "source", json_string(source));
	wrd_images_event("image_imported", ev);
	return 0;
}

/* body's key k: set to want when absent; 400 naming it when it differs. */
static int same_or_set(json_t *body, const char *k, long long want, const char *what, wr_err *err)
{
	json_t *v = json_object_get(body, k);
	if (v == NULL) {
		json_object_set_new(body, k, json_integer(want));
		return 0;
	}
	if (json_is_number(v) && (long long)(json_number_value(v) + 0.999) == want)
		return 0;
	return wr_err_field(err, k,
			    "%s: a VM snapshot restores with the %s it was taken with (%lld)", k,
			    what, want);
}

int wrd_snapshot_vm_expand(json_t *body, struct wr_image *img, char **restore_dir, wr_err *err)
{
	struct wr_image_store *store = wrd_images();
	const char *image = json_string_value(json_object_get(body, "image"));
	const char *tier = wr_image_label(&img->config, L_TIER);
	const char *base = wr_image_label(&img->config, L_BASE);
	const char *name = wr_image_label(&img->config, L_IMAGE);
	const char *btier = json_string_value(json_object_get(body, "tier"));
	if (btier && strcmp(btier, tier) != 0)
		return wr_err_field(err, "tier",
				    "tier: '%s' is a snapshot of a %s VM; it restores on that tier",
				    image, tier);
	if (json_object_get(body, "layers"))
		return wr_err_field(err, "layers", "layers: a VM snapshot restores a whole VM");
	if (base == NULL)
		return wr_err_field(err, "image", "image: VM snapshot '%s' names no base image",
				    image);
	const char *m = wr_image_label(&img->config, L_MEM);
	const char *dk = wr_image_label(&img->config, L_DISK);
	const char *cp = wr_image_label(&img->config, L_CPU);
	if (same_or_set(body, "memory_mb", m ? atoll(m) : 0, "memory", err) < 0 ||
	    same_or_set(body, "disk_mb", dk ? atoll(dk) : 0, "disk", err) < 0 ||
	    same_or_set(body, "cpu", cp ? atoll(cp) : 1, "vCPU count", err) < 0)
		return -1;
	/* the base: the store's image of that digest, or the recorded name
	 * when this node's file of that name has the digest */
	struct wr_image *b = NULL;
	_cleanup_err_ wr_err e2 = NULL;
	const char *use = NULL;
	if (wr_image_resolve(store, base, &b, &e2) == 0) {
		use = base;
		wr_image_free(&b);
	} else if (name) {
		const char *path = wrd_config_image(wrd_mgr_cfg, name);
		char d[72];
		_cleanup_err_ wr_err e3 = NULL;
		if (path && file_digest(path, d, &e3) == 0 && strcmp(d, base) == 0)
			use = name;
	}
	if (use == NULL)
		return wr_err_field(
		    err, "image",
		    "image: VM snapshot '%s' goes on image %s (%s), which this node "
		    "does not have (pull or import it first)",
		    image, name ? name : "?", base);
	/* unpacked (and checked) into the store's staging area */
	char *dir = NULL;
	if (wrd_snapshot_unpack(img, &dir, err) < 0)
		return wr_err_wrap(err, "unpack VM snapshot %s", image);
	json_object_set_new(body, "image", json_string(use));
	json_object_set_new(body, "tier", json_string(tier));
	*restore_dir = dir;
	return 0;
}

int wrd_snapshot_unpack(const struct wr_image *img, char **dir, wr_err *err)
{
	struct wr_image_store *store = wrd_images();
	char holder[40];
	_cleanup_free_ char *blob = NULL;
	snprintf(holder, sizeof(holder), "unpack-%.16s", img->digest + 7);
	if (wr_image_acquire(store, img->digest, holder, &blob, NULL, err) < 0)
		return -1;
	char *d = staging(store);
	char target[1100];
	snprintf(target, sizeof(target), "--extract=%s", d ? d : "");
	char *argv[] = {"/usr/bin/fsck.erofs", target, blob, NULL};
	_cleanup_err_ wr_err e4 = NULL;
	int r = d ? wr_qsnap_run(argv, err) : wr_err_set(err, ENOMEM, "out of memory");
	wr_image_release(store, img->digest, holder, &e4);
	if (r < 0) {
		if (d)
			wr_qsnap_remove(d);
		free(d);
		return -1;
	}
	*dir = d;
	return 0;
}

void wrd_snapshot_remove_dir(const char *dir)
{
	wr_qsnap_remove(dir);
}

void wrd_snapshot_restore_done(char **restore_dir)
{
	if (*restore_dir) {
		if (!wrd_snapshot_release_shared(*restore_dir))
			wr_qsnap_remove(*restore_dir);
		free(*restore_dir);
		*restore_dir = NULL;
	}
}
