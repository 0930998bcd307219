/* Import pipeline: input format -> staging tree -> EROFS blob -> record.
 *
 *   dir ──────────── validate walk ───────────────────────┐
 *   tar (plain/gz/zstd) ── unpack (hostile-input rules) ──┤
 *   oci-layout ── index -> manifest -> config + layers ──>┤ mkfs.erofs (fixed uuid,
 *   oci-archive / docker-archive ── unpack to stage/ ──^  │  build time), fsck.erofs,
 *                                  then as a layout       │  sha256, rename NOREPLACE
 *                                                         └> manifest + record (one txn)
 * Every blob read from a layout or archive is checked against its digest
 * before use. Whatever fails drops the whole staging directory.
 */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "common/util.h"
#include "image/store_internal.h"

#define MAX_JSON (4u << 20)

/* The runtime subset of an OCI image config that a manifest keeps. */
json_t *wri_runtime_config(json_t *oci)
{
	json_t *c = json_is_object(oci) ? json_object_get(oci, "config") : NULL;
	if (!json_is_object(c))
		c = json_is_object(oci) ? oci : NULL;
	if (c == NULL)
		return NULL;
	json_t *out = json_object();
	static const char *const keys[] = {"Env",	 "WorkingDir", "User",
					   "Entrypoint", "Cmd",	       "Labels"};
	for (size_t i = 0; i < WR_ARRAY_SIZE(keys); i++) {
		json_t *v = json_object_get(c, keys[i]);
		if (v && !json_is_null(v))
			json_object_set(out, keys[i], v);
	}
	return out;
}

/* Parse and check config JSON text; *rt gets the runtime subset. */
static int parse_config(const char *text, json_t **rt, wr_err *err)
{
	*rt = NULL;
	if (text == NULL)
		return 0;
	json_error_t je;
	json_t *j = json_loads(text, 0, &je);
	if (j == NULL)
		return wr_err_field(err, "config", "image config: invalid JSON: %s", je.text);
	struct wr_image_config c;
	int r = wri_config_from_json(j, &c, err);
	wri_config_clear(&c);
	if (r == 0)
		*rt = wri_runtime_config(j);
	json_decref(j);
	return r;
}

int wri_finish(struct wr_image_store *s, struct wri_stage *st, const char *src_path, json_t *config,
	       json_t *layers, const char *source, const struct wr_image_import_opts *o,
	       struct wr_image **out, wr_err *err)
{
	char digest[WR_IMAGE_DIGEST_LEN + 1];
	uint64_t size;
	int r = wri_build_erofs(s, st, src_path, digest, &size, err);
	if (r < 0)
		return r;
	struct wri_new n = {
	    .digest = digest,
	    .size = size,
	    .source = o && o->source ? o->source : source,
	    .config = config,
	    .layers = layers,
	    .stagefd = st->fd,
	    .tmp_name = "blob",
	    .complete = true,
	};
	return wri_commit_image(s, &n, o ? o->ref : NULL, out, err);
}

int wri_stage_root_path(struct wr_image_store *s, struct wri_stage *st, char **path, wr_err *err)
{
	if (asprintf(path, "%s/tmp/%s/root", s->dir, st->name) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	return 0;
}

static int check_ref(const struct wr_image_import_opts *o, wr_err *err)
{
	if (o == NULL || o->ref == NULL)
		return 0;
	_cleanup_free_ char *c = NULL;
	return wri_ref_canon(o->ref, &c, err);
}

/* ---- layers ------------------------------------------------------------ */

static bool layer_type_ok(const char *mt)
{
	static const char *const ok[] = {
	    "application/vnd.oci.image.layer.v1.tar",
	    "application/vnd.oci.image.layer.v1.tar+gzip",
	    "application/vnd.oci.image.layer.v1.tar+zstd",
	    "application/vnd.oci.image.layer.nondistributable.v1.tar",
	    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
	    "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
	    "application/vnd.docker.image.rootfs.diff.tar",
	    "application/vnd.docker.image.rootfs.diff.tar.gzip",
	    "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
	};
	if (mt == NULL)
		return true;
	for (size_t i = 0; i < WR_ARRAY_SIZE(ok); i++)
		if (strcmp(mt, ok[i]) == 0)
			return true;
	return false;
}

/* Verify and apply layers into st's root. */
int wri_apply_layers(struct wr_image_store *s, struct wri_stage *st,
		     const struct wr_image_layer *layers, size_t n, json_t *digests, wr_err *err)
{
	int r = wri_stage_root(st, err);
	if (r < 0)
		return r;
	struct wri_unpack u;
	wri_unpack_init(&u, st->rootfd, s);
	u.whiteouts = true;
	for (size_t i = 0; i < n && r == 0; i++) {
		char what[100];
		snprintf(what, sizeof(what), "layer %zu", i);
		if (!layer_type_ok(layers[i].media_type)) {
			r = wr_err_set(err, EINVAL, "%s: media type '%s' is not a tar layer", what,
				       layers[i].media_type);
			break;
		}
		char got[WR_IMAGE_DIGEST_LEN + 1];
		if ((r = wri_sha256_fd(layers[i].fd, got, NULL, err)) < 0) {
			wr_err_wrap(err, "%s", what);
			break;
		}
		if (layers[i].digest && strcmp(got, layers[i].digest) != 0) {
			r = wr_err_set(err, EBADMSG, "%s: digest mismatch: expected %s, got %s",
				       what, layers[i].digest, got);
			break;
		}
		json_array_append_new(digests, json_string(got));
		if (lseek(layers[i].fd, 0, SEEK_SET) < 0) {
			r = wr_err_sys(err, "%s: seek", what);
			break;
		}
		snprintf(what, sizeof(what), "layer %zu (%.19s)", i, got);
		r = wri_unpack_tar(&u, layers[i].fd, what, err);
	}
	if (r == 0)
		r = wri_unpack_finish(&u, err);
	wri_unpack_free(&u);
	return r;
}

int wr_image_import_layers(struct wr_image_store *s, const struct wr_image_layer *layers,
			   size_t n_layers, const char *config_json,
			   const struct wr_image_import_opts *o, struct wr_image **out, wr_err *err)
{
	json_t *cfg = NULL;
	int r = check_ref(o, err);
	if (r == 0)
		r = parse_config(config_json, &cfg, err);
	if (r < 0)
		return r;
	struct wri_stage st = {.fd = -1, .rootfd = -1};
	json_t *digests = json_array();
	_cleanup_free_ char *root = NULL;
	if ((r = wri_stage_new(s, &st, err)) == 0 &&
	    (r = wri_apply_layers(s, &st, layers, n_layers, digests, err)) == 0 &&
	    (r = wri_stage_root_path(s, &st, &root, err)) == 0)
		r = wri_finish(s, &st, root, cfg, digests, "layers", o, out, err);
	wri_stage_drop(s, &st);
	json_decref(cfg);
	json_decref(digests);
	return r < 0 ? wr_err_wrap(err, "import layers") : 0;
}

/* ---- ready blobs and remote records ------------------------------------- */

static int adopt_blob(struct wr_image_store *s, struct wri_stage *st, int fd, const char *expected,
		      char digest[WR_IMAGE_DIGEST_LEN + 1], uint64_t *size, wr_err *err)
{
	int r = wri_copy_fd(fd, st->fd, "blob", digest, size, err);
	if (r < 0)
		return r;
	if (expected && strcmp(expected, digest) != 0)
		return wr_err_set(err, EBADMSG, "blob digest mismatch: expected %s, got %s",
				  expected, digest);
	_cleanup_free_ char *path = NULL;
	if (asprintf(&path, "%s/tmp/%s/blob", s->dir, st->name) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	if ((r = wri_fsck(path, err)) < 0)
		return r;
	if (fchmodat(st->fd, "blob", 0444, 0) < 0)
		return wr_err_sys(err, "seal blob");
	return 0;
}

int wr_image_add_blob(struct wr_image_store *s, int fd, const char *expected_digest,
		      const char *config_json, const struct wr_image_import_opts *o,
		      struct wr_image **out, wr_err *err)
{
	if (expected_digest && !wri_is_digest(expected_digest))
		return wr_err_field(err, "digest", "digest '%s': not sha256:<64 hex>",
				    expected_digest);
	json_t *cfg = NULL;
	int r = check_ref(o, err);
	if (r == 0)
		r = parse_config(config_json, &cfg, err);
	if (r < 0)
		return r;
	struct wri_stage st = {.fd = -1, .rootfd = -1};
	char digest[WR_IMAGE_DIGEST_LEN + 1];
	uint64_t size = 0;
	if ((r = wri_stage_new(s, &st, err)) == 0 &&
	    (r = adopt_blob(s, &st, fd, expected_digest, digest, &size, err)) == 0) {
		struct wri_new n = {
		    .digest = digest,
		    .size = size,
		    .source = o && o->source ? o->source : "blob",
		    .config = cfg,
		    .stagefd = st.fd,
		    .tmp_name = "blob",
		    .complete = true,
		};
		r = wri_commit_image(s, &n, o ? o->ref : NULL, out, err);
	}
	wri_stage_drop(s, &st);
	json_decref(cfg);
	return r < 0 ? wr_err_wrap(err, "add blob") : 0;
}

int wr_image_add_remote(struct wr_image_store *s, const char *digest, uint64_t size,
			const struct wr_image_remote *remote, const char *config_json,
			const struct wr_image_import_opts *o, struct wr_image **out, wr_err *err)
{
	if (!wri_is_digest(digest))
		return wr_err_field(err, "digest", "digest '%s': not sha256:<64 hex>",
				    digest ? digest : "");
	if (remote == NULL || remote->reference == NULL)
		return wr_err_field(err, "remote", "remote: a reference is required");
	json_t *cfg = NULL;
	int r = check_ref(o, err);
	if (r == 0)
		r = parse_config(config_json, &cfg, err);
	if (r < 0)
		return r;
	json_t *rem = json_pack("{s:s, s:s?, s:I}", "reference", remote->reference, "blob_digest",
				remote->blob_digest, "size", (json_int_t)remote->size);
	struct wri_new n = {
	    .digest = digest,
	    .size = size,
	    .source = o && o->source ? o->source : remote->reference,
	    .config = cfg,
	    .remote = rem,
	    .stagefd = -1,
	    .complete = false,
	};
	r = wri_commit_image(s, &n, o ? o->ref : NULL, out, err);
	json_decref(cfg);
	json_decref(rem);
	return r < 0 ? wr_err_wrap(err, "add remote image") : 0;
}

int wr_image_blob_commit(struct wr_image_store *s, const char *digest, int fd, wr_err *err)
{
	struct wr_image *img = NULL;
	int r = wr_image_resolve(s, digest, &img, err);
	if (r < 0)
		return r;
	bool complete = img->complete;
	uint64_t size = img->size;
	wr_image_free(&img);
	if (complete)
		return 0;
	struct wri_stage st = {.fd = -1, .rootfd = -1};
	char got[WR_IMAGE_DIGEST_LEN + 1];
	uint64_t got_size = 0;
	if ((r = wri_stage_new(s, &st, err)) == 0 &&
	    (r = adopt_blob(s, &st, fd, digest, got, &got_size, err)) == 0) {
		struct wri_new n = {
		    .digest = digest,
		    .size = got_size ? got_size : size,
		    .source = "blob",
		    .stagefd = st.fd,
		    .tmp_name = "blob",
		    .complete = true,
		};
		r = wri_commit_image(s, &n, NULL, NULL, err);
	}
	wri_stage_drop(s, &st);
	return r < 0 ? wr_err_wrap(err, "commit blob %s", digest) : 0;
}

int wr_image_import(struct wr_image_store *s, const char *path,
		    const struct wr_image_import_opts *o, struct wr_image **out, wr_err *err)
{
	struct wr_image_import_opts dflt = {0};
	if (o == NULL)
		o = &dflt;
	int r = check_ref(o, err);
	if (r < 0)
		return r;
	if (path == NULL || path[0] != '/')
		return wr_err_field(err, "path", "path: must be absolute");
	_cleanup_free_ char *real = realpath(path, NULL);
	if (real == NULL)
		return wr_err_sys(err, "import %s", path);
	struct stat sb;
	if (stat(real, &sb) < 0)
		return wr_err_sys(err, "import %s", path);
	enum wr_image_format fmt = o->format;
	_cleanup_close_ int fd = -1;
	if (S_ISDIR(sb.st_mode)) {
		fd = open(real, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0)
			return wr_err_sys(err, "import %s", path);
		if (fmt == WR_IMAGE_FMT_AUTO)
			fmt = faccessat(fd, "oci-layout", F_OK, AT_SYMLINK_NOFOLLOW) == 0 &&
				      faccessat(fd, "index.json", F_OK, AT_SYMLINK_NOFOLLOW) == 0
				  ? WR_IMAGE_FMT_OCI_LAYOUT
				  : WR_IMAGE_FMT_DIR;
		if (fmt != WR_IMAGE_FMT_DIR && fmt != WR_IMAGE_FMT_OCI_LAYOUT)
			return wr_err_field(err, "format",
					    "import %s: a directory is imported as 'dir' or "
					    "'oci-layout', not '%s'",
					    path, wr_image_format_name(fmt));
	} else if (S_ISREG(sb.st_mode)) {
		fd = open(real, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return wr_err_sys(err, "import %s", path);
		if (fmt == WR_IMAGE_FMT_AUTO && (r = wri_detect(fd, &fmt, err)) < 0)
			return wr_err_wrap(err, "import %s", path);
		if (fmt == WR_IMAGE_FMT_DIR || fmt == WR_IMAGE_FMT_OCI_LAYOUT)
			return wr_err_field(err, "format",
					    "import %s: a file is imported as 'tar', "
					    "'oci-archive', 'docker-archive' or 'vm-disk', "
					    "not '%s'",
					    path, wr_image_format_name(fmt));
	} else {
		return wr_err_set(err, EINVAL, "import %s: not a directory or a regular file",
				  path);
	}
	struct wri_stage st = {.fd = -1, .rootfd = -1};
	if ((r = wri_stage_new(s, &st, err)) == 0) {
		if (fmt == WR_IMAGE_FMT_DIR)
			r = wri_import_dir(s, &st, real, o, out, err);
		else
			r = wri_import_format(s, &st, fd, fd, real, fmt, o, out, err);
	}
	wri_stage_drop(s, &st);
	return r < 0 ? wr_err_wrap(err, "import %s", path) : 0;
}

int wr_image_import_fd(struct wr_image_store *s, int fd, const struct wr_image_import_opts *o,
		       struct wr_image **out, wr_err *err)
{
	struct wr_image_import_opts dflt = {0};
	if (o == NULL)
		o = &dflt;
	int r = check_ref(o, err);
	if (r < 0)
		return r;
	enum wr_image_format fmt = o->format;
	if (fmt == WR_IMAGE_FMT_DIR || fmt == WR_IMAGE_FMT_OCI_LAYOUT)
		return wr_err_field(err, "format",
				    "a stream is imported as 'tar', 'oci-archive', "
				    "'docker-archive' or 'vm-disk', not '%s'",
				    wr_image_format_name(fmt));
	struct wri_stage st = {.fd = -1, .rootfd = -1};
	_cleanup_close_ int spool = -1;
	if ((r = wri_stage_new(s, &st, err)) < 0)
		return wr_err_wrap(err, "import stream");
	int in = fd;
	if (fmt != WR_IMAGE_FMT_TAR && lseek(fd, 0, SEEK_CUR) < 0) {
		/* Detection and archives read twice: keep a copy. */
		_cleanup_close_ int w =
		    openat(st.fd, "input", O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (w < 0) {
			r = wr_err_sys(err, "spool stream");
			goto out;
		}
		char buf[1 << 16];
		ssize_t n;
		while ((n = read(fd, buf, sizeof(buf))) > 0)
			if (wr_write_all(w, buf, (size_t)n) < 0)
				break;
		if (n != 0) {
			r = wr_err_sys(err, "spool stream");
			goto out;
		}
		spool = steal_fd(&w);
		in = spool;
	}
	if (fmt == WR_IMAGE_FMT_AUTO && (r = wri_detect(in, &fmt, err)) < 0)
		goto out;
	r = wri_import_format(s, &st, in, -1, "upload", fmt, o, out, err);
out:
	wri_stage_drop(s, &st);
	return r < 0 ? wr_err_wrap(err, "import stream") : 0;
}
