/* warren image distribution: push and pull (see distribute.h for the
 * artifact format and the pull rules). */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <jansson.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "image/distribute.h"
#include "image/lazy_index.h"
#include "image/registry_internal.h"

/* Configs are small JSON; refuse a hostile giant before fetching it. */
#define CONFIG_MAX (16u << 20)

static void refp(struct wr_registry_ref *r)
{
	wr_registry_ref_free(r);
}
static void jsonp(json_t **j)
{
	json_decref(*j);
}
static void imgp(struct wr_image **i)
{
	wr_image_free(i);
}
#define _cleanup_ref_ _cleanup_(refp)
#define _cleanup_json_ _cleanup_(jsonp)
#define _cleanup_img_ _cleanup_(imgp)

#if defined(__x86_64__)
#define HOST_ARCH "amd64"
#elif defined(__aarch64__)
#define HOST_ARCH "arm64"
#else
#define HOST_ARCH "unknown"
#endif

static int parse_remote(struct wr_registry *reg, const char *remote_ref, const char *field,
			struct wr_registry_ref *out, wr_err *err)
{
	if (wr_registry_ref_parse(remote_ref, out, err) < 0) {
		(*err)->field = strdup(field);
		return -EINVAL;
	}
	if (strcasecmp(out->host, wr_registry_host(reg)) != 0)
		return wr_err_field(err, field, "%s: names registry %s, the client is for %s",
				    field, out->host, wr_registry_host(reg));
	return 0;
}

int wr_image_pull_default_name(const char *remote_ref, char **out, wr_err *err)
{
	struct wr_registry_ref r;
	*out = NULL;
	if (wr_registry_ref_parse(remote_ref, &r, err) < 0)
		return -EINVAL;
	/* Docker Hub's official images are named without their "library/" */
	const char *repo = r.repo;
	if (strcmp(r.host, "docker.io") == 0 && strncmp(repo, "library/", 8) == 0)
		repo += 8;
	int rc = r.tag ? asprintf(out, "%s:%s", repo, r.tag) : asprintf(out, "%s", repo);
	wr_registry_ref_free(&r);
	if (rc < 0) {
		*out = NULL;
		return wr_err_set(err, ENOMEM, "out of memory");
	}
	return 0;
}

/* An anonymous file holding text, read from offset 0 by blob_put. */
static int memfd_with(const char *name, const char *text, size_t len, wr_err *err)
{
	_cleanup_close_ int fd = memfd_create(name, MFD_CLOEXEC);
	if (fd < 0)
		return wr_err_sys(err, "memfd");
	if (wr_write_all(fd, text, len) < 0)
		return wr_err_sys(err, "memfd write");
	return steal_fd(&fd);
}

/* An unnamed temporary file beside the store (same filesystem, so large
 * layers do not land in a small /tmp); nothing to clean up on a crash. */
static int store_tmpfile(struct wr_image_store *s, wr_err *err)
{
	_cleanup_free_ char *dir = NULL;
	if (asprintf(&dir, "%s/tmp", wr_image_store_dir(s)) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0)
		return wr_err_sys(err, "temporary file in %s", dir);
	return fd;
}

/* ---- push ------------------------------------------------------------------ */

static json_t *strv_json(char **v, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_string(v[i]));
	return a;
}

/* The OCI image config: what the store knows of the image's runtime
 * defaults, in the standard shape. */
static char *oci_config(const struct wr_image *img)
{
	const struct wr_image_config *c = &img->config;
	json_t *cfg = json_object();
	if (c->n_env)
		json_object_set_new(cfg, "Env", strv_json(c->env, c->n_env));
	if (c->workdir && *c->workdir)
		json_object_set_new(cfg, "WorkingDir", json_string(c->workdir));
	if (c->user && *c->user)
		json_object_set_new(cfg, "User", json_string(c->user));
	if (c->n_entrypoint)
		json_object_set_new(cfg, "Entrypoint", strv_json(c->entrypoint, c->n_entrypoint));
	if (c->n_cmd)
		json_object_set_new(cfg, "Cmd", strv_json(c->cmd, c->n_cmd));
	if (c->n_labels) {
		json_t *lb = json_object();
		for (size_t i = 0; i < c->n_labels; i++) {
			const char *eq = strchr(c->labels[i], '=');
			_cleanup_free_ char *k =
			    eq ? strndup(c->labels[i], (size_t)(eq - c->labels[i])) : NULL;
			if (k)
				json_object_set_new(lb, k, json_string(eq + 1));
		}
		json_object_set_new(cfg, "Labels", lb);
	}
	char created[32] = "1970-01-01T00:00:00Z";
	time_t t = (time_t)img->created;
	struct tm tm;
	if (gmtime_r(&t, &tm))
		strftime(created, sizeof(created), "%Y-%m-%dT%H:%M:%SZ", &tm);
	json_t *root = json_pack("{s:s, s:s, s:s, s:o, s:{s:s, s:[s]}}", "architecture", HOST_ARCH,
				 "os", "linux", "created", created, "config", cfg, "rootfs", "type",
				 "layers", "diff_ids", img->digest);
	if (root == NULL)
		return NULL;
	char *text = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(root);
	return text;
}

/* The manifest names the EROFS layer and, second, its chunk index (when
 * there is one): as a layer, the registry checks that the index blob exists
 * when the manifest is put and keeps it as long as the manifest (its
 * garbage collector would drop a blob only an annotation names), and copy
 * tools carry it along. Pullers older than the index pick the EROFS layer
 * by media type and ignore the other. */
static char *oci_manifest(const char *cfg_digest, size_t cfg_size, const struct wr_image *img,
			  const char *idx_digest, size_t idx_size)
{
	bool disk = img->kind == WR_IMAGE_KIND_VM_DISK;
	json_t *layers =
	    disk ? json_pack("[{s:s, s:s, s:I, s:{s:s, s:s, s:s}}]", "mediaType",
			     WR_MT_WARREN_VMDISK, "digest", img->digest, "size",
			     (json_int_t)img->size, "annotations", "org.opencontainers.image.title",
			     strcmp(img->disk_format, "qcow2") == 0 ? "disk.qcow2" : "disk.raw",
			     "dev.warren.disk.format", img->disk_format, "dev.warren.disk.firmware",
			     img->firmware[0] ? img->firmware : "bios")
		 : json_pack("[{s:s, s:s, s:I, s:{s:s}}]", "mediaType", WR_MT_WARREN_EROFS,
			     "digest", img->digest, "size", (json_int_t)img->size, "annotations",
			     "org.opencontainers.image.title", "rootfs.erofs");
	if (layers && idx_digest)
		json_array_append_new(layers, json_pack("{s:s, s:s, s:I, s:{s:s}}", "mediaType",
							WR_MT_WARREN_CHUNKS, "digest", idx_digest,
							"size", (json_int_t)idx_size, "annotations",
							"org.opencontainers.image.title",
							"rootfs.erofs.chunks"));
	json_t *root = json_pack(
	    "{s:i, s:s, s:s, s:{s:s, s:s, s:I}, s:o, s:{s:s}}", "schemaVersion", 2, "mediaType",
	    WR_MT_OCI_MANIFEST, "artifactType", WR_MT_WARREN_ARTIFACT, "config", "mediaType",
	    WR_MT_OCI_CONFIG, "digest", cfg_digest, "size", (json_int_t)cfg_size, "layers", layers,
	    "annotations", "dev.warren.image.digest", img->digest);
	if (root == NULL)
		return NULL;
	char *text = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(root);
	return text;
}

static int push_blob(struct wr_registry *reg, const char *repo, int fd, uint64_t size,
		     const char *digest, const struct wr_image_push_opts *o,
		     struct wr_image_push_result *res, wr_err *err)
{
	int r = wr_registry_blob_exists(reg, repo, digest, err);
	if (r < 0)
		return r;
	if (r == 1) {
		res->blobs_skipped++;
		return 0;
	}
	if (wr_registry_blob_put(reg, repo, fd, size, digest, o->chunk_size, o->mount_from, err) <
	    0)
		return -1;
	res->blobs_sent++;
	res->bytes_sent += size;
	return 0;
}

static int push_locked(struct wr_registry *reg, const struct wr_registry_ref *rref,
		       const struct wr_image *img, const char *path,
		       const struct wr_image_push_opts *o, struct wr_image_push_result *res,
		       wr_err *err)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		return wr_err_sys(err, "open image blob");
	if ((uint64_t)st.st_size != img->size)
		return wr_err_set(err, EBADMSG, "image blob is %jd bytes, its record says %" PRIu64,
				  (intmax_t)st.st_size, img->size);
	_cleanup_free_ char *cfg = oci_config(img);
	if (cfg == NULL)
		return wr_err_set(err, ENOMEM, "out of memory (config)");
	char cfg_digest[72];
	{
		_cleanup_close_ int cfd = memfd_with("config", cfg, strlen(cfg), err);
		if (cfd < 0)
			return -1;
		reg_digest_buf(cfg, strlen(cfg), cfg_digest);
		if (push_blob(reg, rref->repo, cfd, strlen(cfg), cfg_digest, o, res, err) < 0)
			return wr_err_wrap(err, "config blob");
	}
	/* The index is built from the bytes being pushed, and the same pass
	 * checks they still hash to the image digest. */
	char idx_digest[72];
	size_t idx_len = 0;
	/* a disk is pulled whole (lazyfs serves EROFS images): no index */
	bool with_index = !o->without_chunk_index && img->kind != WR_IMAGE_KIND_VM_DISK;
	if (with_index) {
		_cleanup_free_ uint8_t *idx = NULL;
		/* 64 KiB pieces; doubled for blobs over 128 GiB, whose index
		 * would pass WRL_INDEX_MAX_BYTES (lazyfs then fetches whole
		 * pieces of that size). */
		uint32_t g = o->index_grain ? o->index_grain : WRL_INDEX_GRAIN;
		while (wrl_index_len(img->size, g) > WRL_INDEX_MAX_BYTES && g < WRL_INDEX_GRAIN_MAX)
			g *= 2;
		if (wrl_index_build(fd, img->size, g, img->digest, &idx, &idx_len, err) < 0)
			return wr_err_wrap(err, "EROFS layer");
		reg_digest_buf((const char *)idx, idx_len, idx_digest);
		_cleanup_close_ int ifd = memfd_with("chunks", (const char *)idx, idx_len, err);
		if (ifd < 0)
			return -1;
		if (push_blob(reg, rref->repo, ifd, idx_len, idx_digest, o, res, err) < 0)
			return wr_err_wrap(err, "chunk index");
		snprintf(res->index_digest, sizeof(res->index_digest), "%s", idx_digest);
	}
	if (push_blob(reg, rref->repo, fd, img->size, img->digest, o, res, err) < 0)
		return wr_err_wrap(err,
				   img->kind == WR_IMAGE_KIND_VM_DISK ? "disk" : "EROFS layer");
	_cleanup_free_ char *man =
	    oci_manifest(cfg_digest, strlen(cfg), img, with_index ? idx_digest : NULL, idx_len);
	if (man == NULL)
		return wr_err_set(err, ENOMEM, "out of memory (manifest)");
	char man_digest[72];
	reg_digest_buf(man, strlen(man), man_digest);
	if (rref->digest && strcmp(rref->digest, man_digest) != 0)
		return wr_err_field(err, "ref",
				    "ref: pushing by digest %s, but the manifest of %s is %s",
				    rref->digest, img->digest, man_digest);
	_cleanup_free_ char *put_digest = NULL;
	if (wr_registry_manifest_put(reg, rref->repo, rref->tag ? rref->tag : man_digest, man,
				     strlen(man), WR_MT_OCI_MANIFEST, &put_digest, err) < 0)
		return -1;
	snprintf(res->manifest_digest, sizeof(res->manifest_digest), "%s", man_digest);
	snprintf(res->blob_digest, sizeof(res->blob_digest), "%s", img->digest);
	return 0;
}

int wr_image_push(struct wr_image_store *s, struct wr_registry *reg, const char *local_ref,
		  const char *remote_ref, const struct wr_image_push_opts *o,
		  struct wr_image_push_result *res, wr_err *err)
{
	static const struct wr_image_push_opts dflt;
	struct wr_image_push_result tmp;
	if (o == NULL)
		o = &dflt;
	if (res == NULL)
		res = &tmp;
	memset(res, 0, sizeof(*res));
	if (local_ref == NULL || *local_ref == 0)
		return wr_err_field(err, "ref", "ref: the local image to push is required");
	_cleanup_ref_ struct wr_registry_ref rref = {0};
	if (parse_remote(reg, remote_ref, "to", &rref, err) < 0)
		return -EINVAL;
	_cleanup_img_ struct wr_image *img = NULL;
	if (wr_image_resolve(s, local_ref, &img, err) < 0)
		return wr_err_wrap(err, "push %s", local_ref);
	if (!img->complete)
		return wr_err_set(err, EAGAIN,
				  "push %s: image %s is not fully local (pulled lazily); pull it "
				  "fully first",
				  local_ref, img->digest);
	/* hold the image while its blob is read: gc must not take it */
	char id[17], holder[64];
	if (wr_random_id(id) < 0)
		return wr_err_sys(err, "random");
	snprintf(holder, sizeof(holder), "push:%s", id);
	_cleanup_free_ char *path = NULL;
	char digest[72];
	snprintf(digest, sizeof(digest), "%s", img->digest);
	if (wr_image_acquire(s, digest, holder, &path, NULL, err) < 0)
		return wr_err_wrap(err, "push %s", local_ref);
	int r = push_locked(reg, &rref, img, path, o, res, err);
	_cleanup_err_ wr_err rerr = NULL;
	wr_image_release(s, digest, holder, &rerr);
	if (r < 0)
		return wr_err_wrap(err, "push %s to %s", local_ref, remote_ref);
	return 0;
}

/* ---- pull ------------------------------------------------------------------ */

static bool is_index(const char *mt)
{
	return strcmp(mt, WR_MT_OCI_INDEX) == 0 || strcmp(mt, WR_MT_DOCKER_LIST) == 0;
}

static bool is_manifest(const char *mt)
{
	return strcmp(mt, WR_MT_OCI_MANIFEST) == 0 || strcmp(mt, WR_MT_DOCKER_MANIFEST) == 0;
}

/* A descriptor's digest and size, checked. */
static int descriptor(json_t *d, const char *what, const char **digest, uint64_t *size,
		      const char **mt, wr_err *err)
{
	*digest = json_string_value(json_object_get(d, "digest"));
	json_t *sz = json_object_get(d, "size");
	if (mt)
		*mt = json_string_value(json_object_get(d, "mediaType"));
	if (*digest == NULL || !json_is_integer(sz) || json_integer_value(sz) < 0)
		return wr_err_set(err, EBADMSG, "%s: descriptor without digest or size", what);
	if (strncmp(*digest, "sha256:", 7) != 0)
		return wr_err_set(err, ENOTSUP, "%s: digest %s: only sha256 is supported", what,
				  *digest);
	*size = (uint64_t)json_integer_value(sz);
	return 0;
}

/* Pick the index entry for platform "os/arch[/variant]". */
static int pick_platform(json_t *index, const char *platform, const char **digest, uint64_t *size,
			 wr_err *err)
{
	char os[32] = "linux", arch[32] = HOST_ARCH, variant[32] = "";
	if (platform && sscanf(platform, "%31[^/]/%31[^/]/%31s", os, arch, variant) < 2)
		return wr_err_field(err, "platform", "platform '%s': give os/arch[/variant]",
				    platform);
	json_t *list = json_object_get(index, "manifests");
	if (!json_is_array(list))
		return wr_err_set(err, EBADMSG, "index without a manifests list");
	size_t i;
	json_t *m;
	json_array_foreach(list, i, m)
	{
		json_t *p = json_object_get(m, "platform");
		const char *pos = json_string_value(json_object_get(p, "os"));
		const char *parch = json_string_value(json_object_get(p, "architecture"));
		const char *pvar = json_string_value(json_object_get(p, "variant"));
		const char *mt = json_string_value(json_object_get(m, "mediaType"));
		if (!pos || !parch || strcmp(pos, os) != 0 || strcmp(parch, arch) != 0)
			continue;
		if (variant[0] && (!pvar || strcmp(pvar, variant) != 0))
			continue;
		if (mt && !is_manifest(mt))
			continue;
		return descriptor(m, "index entry", digest, size, NULL, err);
	}
	return wr_err_set(err, ENOENT, "no image for platform %s/%s%s%s in the index", os, arch,
			  variant[0] ? "/" : "", variant);
}

struct pull {
	struct wr_image_store *s;
	struct wr_registry *reg;
	struct wr_registry_ref ref;
	const struct wr_image_pull_opts *o;
	struct wr_image_pull_result *res;
	const char *local_ref;
	char *source; /* "registry:host/repo@<manifest digest>" */
};

static int fetch_to_tmp(struct pull *p, const char *digest, uint64_t size, int *out, wr_err *err)
{
	if (size > INT64_MAX)
		return wr_err_set(err, EFBIG, "blob %s: size %" PRIu64 " out of range", digest,
				  size);
	_cleanup_close_ int fd = store_tmpfile(p->s, err);
	if (fd < 0)
		return -1;
	/* Reserve the space first: a blob that cannot fit fails now, not after
	 * filling the disk (a filesystem without fallocate just downloads). */
	if (size > 0 && fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)size) < 0 && errno == ENOSPC)
		return wr_err_set(err, ENOSPC,
				  "blob %s of %" PRIu64
				  " bytes does not fit in the store's filesystem",
				  digest, size);
	uint64_t n = 0;
	if (wr_registry_blob_get(p->reg, p->ref.repo, digest, (int64_t)size, fd, &n, err) < 0)
		return -1;
	if (lseek(fd, 0, SEEK_SET) < 0)
		return wr_err_sys(err, "rewind");
	p->res->layers++;
	p->res->bytes_fetched += n;
	*out = steal_fd(&fd);
	return 0;
}

static int fetch_config(struct pull *p, json_t *man, char **out, wr_err *err)
{
	*out = NULL;
	json_t *cd = json_object_get(man, "config");
	const char *digest;
	uint64_t size;
	if (descriptor(cd, "config", &digest, &size, NULL, err) < 0)
		return -1;
	if (size > CONFIG_MAX)
		return wr_err_set(err, EFBIG, "config of %" PRIu64 " bytes: more than %u allowed",
				  size, CONFIG_MAX);
	_cleanup_close_ int fd = memfd_create("config", MFD_CLOEXEC);
	if (fd < 0)
		return wr_err_sys(err, "memfd");
	uint64_t n = 0;
	if (wr_registry_blob_get(p->reg, p->ref.repo, digest, (int64_t)size, fd, &n, err) < 0)
		return wr_err_wrap(err, "config");
	p->res->layers++;
	p->res->bytes_fetched += n;
	char *text = malloc(n + 1);
	if (text == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	if (pread(fd, text, n, 0) != (ssize_t)n) {
		free(text);
		return wr_err_sys(err, "read config");
	}
	text[n] = 0;
	json_error_t je;
	json_t *j = json_loads(text, 0, &je);
	if (!json_is_object(j)) {
		json_decref(j);
		free(text);
		return wr_err_set(err, EBADMSG, "config %s: not a JSON object", digest);
	}
	json_decref(j);
	*out = text;
	return 0;
}

/* The store already has what this manifest makes: point the name at it. */
static int reuse(struct pull *p, const char *digest, struct wr_image **out, wr_err *err)
{
	if (p->local_ref && wr_image_tag(p->s, digest, p->local_ref, err) < 0)
		return -1;
	p->res->already = true;
	return out ? wr_image_resolve(p->s, digest, out, err) : 0;
}

/* An image converted from this very manifest earlier, found by source. */
static int find_by_source(struct pull *p, char digest[72], wr_err *err)
{
	struct wr_image_list l = {0};
	if (wr_image_list(p->s, &l, err) < 0)
		return -1;
	int found = 0;
	for (size_t i = 0; i < l.n && !found; i++)
		if (l.items[i]->source && strcmp(l.items[i]->source, p->source) == 0 &&
		    l.items[i]->complete && !l.items[i]->deleting) {
			snprintf(digest, 72, "%s", l.items[i]->digest);
			found = 1;
		}
	wr_image_list_free(&l);
	return found;
}

/* The chunk index of the EROFS layer (digest, size) for a lazy pull: kept
 * when <store>/chunks/<hex>/index is already there and names this blob,
 * else fetched (its digest is pinned by the manifest, checked while it
 * streams), its header checked against the layer and saved. Write order:
 * the index is on disk before the record that lazyfs serves exists, so a
 * lazily pulled record always finds its index. */
static int pull_index(struct pull *p, json_t *chunks, const char *digest, uint64_t size,
		      wr_err *err)
{
	_cleanup_free_ char *dir = NULL;
	if (asprintf(&dir, "%s/chunks/%s", wr_image_store_dir(p->s), digest + 7) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	_cleanup_close_ int dfd = open(dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct wrl_index ix;
	if (dfd >= 0 && wrl_index_load(dfd, digest, size, &ix, NULL) == 0) {
		wrl_index_free(&ix);
		return 0;
	}
	const char *idig;
	uint64_t isz;
	if (descriptor(chunks, "chunk index", &idig, &isz, NULL, err) < 0)
		return -1;
	if (isz > wrl_index_max_len(size) || isz < WRL_INDEX_HDR)
		return wr_err_set(err, EBADMSG,
				  "chunk index: %" PRIu64 " bytes cannot index a blob of %" PRIu64,
				  isz, size);
	_cleanup_close_ int fd = memfd_create("chunks", MFD_CLOEXEC);
	if (fd < 0)
		return wr_err_sys(err, "memfd");
	uint64_t n = 0;
	if (wr_registry_blob_get(p->reg, p->ref.repo, idig, (int64_t)isz, fd, &n, err) < 0)
		return wr_err_wrap(err, "chunk index");
	p->res->layers++;
	p->res->bytes_fetched += n;
	_cleanup_free_ uint8_t *buf = malloc(n ? n : 1);
	if (buf == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	if (pread(fd, buf, n, 0) != (ssize_t)n)
		return wr_err_sys(err, "read chunk index");
	if (wrl_index_parse(buf, n, digest, size, &ix, err) < 0)
		return wr_err_wrap(err, "chunk index %s", idig);
	wrl_index_free(&ix);
	return wrl_index_save(wr_image_store_dir(p->s), digest + 7, buf, n, err);
}

/* lazy: the pull is lazy and the manifest has a chunk index (chunks). */
static int pull_erofs(struct pull *p, json_t *layer, json_t *chunks, bool lazy, const char *config,
		      struct wr_image **out, wr_err *err)
{
	const char *digest;
	uint64_t size;
	if (descriptor(layer, "EROFS layer", &digest, &size, NULL, err) < 0)
		return -1;
	p->res->erofs = true;
	struct wr_image_import_opts io = {.ref = p->local_ref, .source = p->source};
	_cleanup_img_ struct wr_image *have = NULL;
	_cleanup_err_ wr_err e = NULL;
	if (wr_image_resolve(p->s, digest, &have, &e) == 0 && strcmp(have->digest, digest) == 0 &&
	    !have->deleting) {
		if (have->complete || lazy) {
			if (!have->complete && pull_index(p, chunks, digest, size, err) < 0)
				return -1;
			p->res->lazy = !have->complete;
			return reuse(p, digest, out, err);
		}
		/* a lazy record made complete: fetch, commit, then name it */
		_cleanup_close_ int fd = -1;
		if (fetch_to_tmp(p, digest, size, &fd, err) < 0 ||
		    wr_image_blob_commit(p->s, digest, fd, err) < 0)
			return -1;
		if (p->local_ref && wr_image_tag(p->s, digest, p->local_ref, err) < 0)
			return -1;
		return out ? wr_image_resolve(p->s, digest, out, err) : 0;
	}
	if (lazy) {
		if (pull_index(p, chunks, digest, size, err) < 0)
			return -1;
		_cleanup_free_ char *reference = NULL;
		if (asprintf(&reference, "%s/%s@%s", p->ref.host, p->ref.repo,
			     p->res->manifest_digest) < 0)
			return wr_err_set(err, ENOMEM, "out of memory");
		struct wr_image_remote rem = {
		    .reference = reference, .blob_digest = (char *)digest, .size = size};
		p->res->lazy = true;
		return wr_image_add_remote(p->s, digest, size, &rem, config, &io, out, err);
	}
	_cleanup_close_ int fd = -1;
	if (fetch_to_tmp(p, digest, size, &fd, err) < 0)
		return -1;
	return wr_image_add_blob(p->s, fd, digest, config, &io, out, err);
}

/* A vm-disk layer: fetched whole (its digest checked as it streams), then
 * imported as any local disk (qemu-img checks, firmware as the artifact
 * says, validated there); the store's digest must be the layer's. */
static int pull_vmdisk(struct pull *p, json_t *layer, struct wr_image **out, wr_err *err)
{
	const char *digest;
	uint64_t size;
	if (descriptor(layer, "disk", &digest, &size, NULL, err) < 0)
		return -1;
	_cleanup_img_ struct wr_image *have = NULL;
	_cleanup_err_ wr_err e = NULL;
	if (wr_image_resolve(p->s, digest, &have, &e) == 0 && strcmp(have->digest, digest) == 0 &&
	    !have->deleting && have->complete)
		return reuse(p, digest, out, err);
	json_t *ann = json_object_get(layer, "annotations");
	const char *fw = json_string_value(json_object_get(ann, "dev.warren.disk.firmware"));
	_cleanup_close_ int fd = -1;
	if (fetch_to_tmp(p, digest, size, &fd, err) < 0)
		return wr_err_wrap(err, "disk");
	struct wr_image_import_opts io = {.format = WR_IMAGE_FMT_VM_DISK,
					  .ref = p->local_ref,
					  .source = p->source,
					  .firmware = fw};
	_cleanup_img_ struct wr_image *img = NULL;
	if (wr_image_import_fd(p->s, fd, &io, &img, err) < 0)
		return wr_err_wrap(err, "disk %s", digest);
	if (strcmp(img->digest, digest) != 0)
		return wr_err_set(err, EBADMSG, "disk: imported as %s, the manifest says %s",
				  img->digest, digest);
	if (out)
		*out = steal_ptr(&img);
	return 0;
}

static bool tar_layer(const char *mt)
{
	static const char *const ok[] = {
	    "application/vnd.oci.image.layer.v1.tar",
	    "application/vnd.oci.image.layer.v1.tar+gzip",
	    "application/vnd.oci.image.layer.v1.tar+zstd",
	    "application/vnd.docker.image.rootfs.diff.tar.gzip",
	    "application/vnd.docker.image.rootfs.diff.tar",
	};
	for (size_t i = 0; i < WR_ARRAY_SIZE(ok); i++)
		if (strcmp(mt, ok[i]) == 0)
			return true;
	return false;
}

static int pull_layers(struct pull *p, json_t *layers, const char *config, struct wr_image **out,
		       wr_err *err)
{
	char have[72];
	int f = find_by_source(p, have, err);
	if (f < 0)
		return -1;
	if (f == 1)
		return reuse(p, have, out, err);
	size_t n = json_array_size(layers);
	if (n == 0)
		return wr_err_set(err, EBADMSG, "manifest has no layers");
	if (n > 1024)
		return wr_err_set(err, E2BIG, "manifest has %zu layers: at most 1024", n);
	struct wr_image_layer *ls = calloc(n, sizeof(*ls));
	if (ls == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		ls[i].fd = -1;
	int r = 0;
	for (size_t i = 0; i < n && r == 0; i++) {
		const char *digest, *mt;
		uint64_t size;
		json_t *d = json_array_get(layers, i);
		if ((r = descriptor(d, "layer", &digest, &size, &mt, err)) < 0)
			break;
		if (mt == NULL || !tar_layer(mt)) {
			r = wr_err_set(err, ENOTSUP,
				       "layer %zu (%s): media type %s cannot be unpacked", i,
				       digest, mt ? mt : "(none)");
			break;
		}
		if (json_object_get(d, "urls"))
			r = wr_err_set(err, ENOTSUP,
				       "layer %zu: foreign layers (urls) are not fetched", i);
		else if ((r = fetch_to_tmp(p, digest, size, &ls[i].fd, err)) < 0)
			wr_err_wrap(err, "layer %zu", i);
		ls[i].media_type = mt;
		ls[i].digest = digest;
	}
	if (r == 0) {
		struct wr_image_import_opts io = {.ref = p->local_ref, .source = p->source};
		r = wr_image_import_layers(p->s, ls, n, config, &io, out, err);
	}
	for (size_t i = 0; i < n; i++)
		if (ls[i].fd >= 0)
			close(ls[i].fd);
	free(ls);
	return r;
}

static int pull_manifest(struct pull *p, const char *body, size_t len, struct wr_image **out,
			 wr_err *err)
{
	json_error_t je;
	_cleanup_json_ json_t *man = json_loadb(body, len, 0, &je);
	if (!json_is_object(man))
		return wr_err_set(err, EBADMSG, "manifest: invalid JSON: %s", je.text);
	if (json_integer_value(json_object_get(man, "schemaVersion")) != 2)
		return wr_err_set(err, ENOTSUP, "manifest: only schemaVersion 2 is supported");
	json_t *layers = json_object_get(man, "layers");
	if (!json_is_array(layers))
		return wr_err_set(err, EBADMSG, "manifest: no layers list");
	_cleanup_free_ char *config = NULL;
	json_t *erofs = NULL, *chunks = NULL, *disk = NULL;
	size_t i;
	json_t *l;
	json_array_foreach(layers, i, l)
	{
		const char *mt = json_string_value(json_object_get(l, "mediaType"));
		if (mt && strcmp(mt, WR_MT_WARREN_EROFS) == 0)
			erofs = l;
		else if (mt && strcmp(mt, WR_MT_WARREN_VMDISK) == 0)
			disk = l;
		else if (mt && strcmp(mt, WR_MT_WARREN_CHUNKS) == 0)
			chunks = l;
	}
	if (disk && (erofs || json_array_size(layers) != 1))
		return wr_err_set(err, EBADMSG, "manifest: a vm-disk artifact has one layer");
	if (disk)
		return pull_vmdisk(p, disk, out, err);
	if (erofs) {
		/* Lazy only with a chunk index: lazyfs serves no byte it cannot
		 * verify, so an artifact without one (an older warren pushed
		 * it) is pulled in full, verified as a whole before any use. */
		bool lazy = p->o->mode == WR_IMAGE_PULL_LAZY && chunks != NULL;
		p->res->no_chunk_index = p->o->mode == WR_IMAGE_PULL_LAZY && chunks == NULL;
		/* no fetch at all when the store has it (same blob digest) */
		const char *d;
		uint64_t sz;
		_cleanup_img_ struct wr_image *have = NULL;
		_cleanup_err_ wr_err e = NULL;
		if (descriptor(erofs, "EROFS layer", &d, &sz, NULL, err) < 0)
			return -1;
		bool local = wr_image_resolve(p->s, d, &have, &e) == 0 &&
			     strcmp(have->digest, d) == 0 && !have->deleting &&
			     (have->complete || lazy);
		if (!local && fetch_config(p, man, &config, err) < 0)
			return -1;
		return pull_erofs(p, erofs, chunks, lazy, config, out, err);
	}
	char have[72];
	int f = find_by_source(p, have, err);
	if (f < 0)
		return -1;
	if (f == 1)
		return reuse(p, have, out, err);
	if (fetch_config(p, man, &config, err) < 0)
		return -1;
	return pull_layers(p, layers, config, out, err);
}

int wr_image_pull(struct wr_image_store *s, struct wr_registry *reg, const char *remote_ref,
		  const char *local_ref, const struct wr_image_pull_opts *o, struct wr_image **out,
		  struct wr_image_pull_result *res, wr_err *err)
{
	static const struct wr_image_pull_opts dflt;
	struct wr_image_pull_result tmp;
	if (o == NULL)
		o = &dflt;
	if (res == NULL)
		res = &tmp;
	memset(res, 0, sizeof(*res));
	if (out)
		*out = NULL;
	struct pull p = {.s = s, .reg = reg, .o = o, .res = res, .local_ref = local_ref};
	if (parse_remote(reg, remote_ref, "ref", &p.ref, err) < 0)
		return -EINVAL;
	if (local_ref) {
		/* a bad local name fails before any download */
		struct wr_image *tmpimg = NULL;
		_cleanup_err_ wr_err e = NULL;
		if (wr_image_resolve(s, local_ref, &tmpimg, &e) < 0 && wr_err_code(e) == EINVAL) {
			wr_registry_ref_free(&p.ref);
			*err = steal_ptr(&e);
			return wr_err_wrap(err, "pull %s: local name", remote_ref);
		}
		wr_image_free(&tmpimg);
	}
	_cleanup_free_ char *body = NULL, *mt = NULL, *digest = NULL;
	size_t len = 0;
	int r = wr_registry_manifest_get(reg, &p.ref, NULL, &body, &len, &mt, &digest, err);
	if (r == 0 && is_index(mt)) {
		json_error_t je;
		_cleanup_json_ json_t *idx = json_loadb(body, len, 0, &je);
		const char *d;
		uint64_t sz;
		if (!json_is_object(idx))
			r = wr_err_set(err, EBADMSG, "index: invalid JSON: %s", je.text);
		else
			r = pick_platform(idx, o->platform, &d, &sz, err);
		if (r == 0) {
			struct wr_registry_ref byd = {
			    .host = p.ref.host, .repo = p.ref.repo, .digest = (char *)d};
			char *b2 = NULL, *m2 = NULL, *d2 = NULL;
			size_t l2 = 0;
			r = wr_registry_manifest_get(reg, &byd, NULL, &b2, &l2, &m2, &d2, err);
			free(body);
			free(mt);
			free(digest);
			body = b2;
			mt = m2;
			digest = d2;
			len = l2;
			if (r == 0 && l2 != sz)
				r = wr_err_set(err, EBADMSG,
					       "manifest is %zu bytes, the index says %" PRIu64, l2,
					       sz);
		}
	}
	if (r == 0 && !is_manifest(mt))
		r = wr_err_set(err, ENOTSUP,
			       "manifest media type '%s' is not supported (OCI or Docker schema 2 "
			       "images and indexes are)",
			       mt);
	if (r == 0) {
		snprintf(res->manifest_digest, sizeof(res->manifest_digest), "%s", digest);
		if (asprintf(&p.source, "registry:%s/%s@%s", p.ref.host, p.ref.repo, digest) < 0)
			r = wr_err_set(err, ENOMEM, "out of memory");
	}
	if (r == 0)
		r = pull_manifest(&p, body, len, out, err);
	free(p.source);
	wr_registry_ref_free(&p.ref);
	return r < 0 ? wr_err_wrap(err, "pull %s", remote_ref) : 0;
}
