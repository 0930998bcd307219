/* Input formats: rootfs dir and tar, OCI image layout (dir or archive),
 * docker save archives. Files of layouts and archives are opened with
 * openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS): a symlink in them (old
 * docker archives link duplicate layers) resolves inside, never out. */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "image/store_internal.h"

#define MAX_JSON (4u << 20)
#define MAX_LAYERS 256

static const char *const index_types[] = {
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
};

static void decrefp(json_t **j)
{
	json_decref(*j);
}
#define _cleanup_json_ _cleanup_(decrefp)

static int open_in(int dirfd, const char *path, const char *what, wr_err *err)
{
	struct open_how how = {.flags = O_RDONLY | O_CLOEXEC,
			       .resolve =
				   RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV};
	int fd = wr_openat2(dirfd, path, &how);
	if (fd < 0)
		return wr_err_sys(err, "%s: open %s", what, path);
	struct stat sb;
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		close(fd);
		return wr_err_set(err, EINVAL, "%s: %s is not a regular file", what, path);
	}
	return fd;
}

static int blob_path(const char *digest, char *out, size_t n, const char *what, wr_err *err)
{
	if (!wri_is_digest(digest))
		return wr_err_set(err, EINVAL, "%s: digest '%s' is not sha256:<64 hex>", what,
				  digest ? digest : "(none)");
	snprintf(out, n, "blobs/sha256/%s", digest + 7);
	return 0;
}

/* Read a JSON file (<= 4 MiB), checking its sha256 when expected is set. */
static int read_json(int dirfd, const char *path, const char *expected, const char *what,
		     json_t **out, char **text_out, wr_err *err)
{
	_cleanup_close_ int fd = open_in(dirfd, path, what, err);
	if (fd < 0)
		return fd;
	char got[WR_IMAGE_DIGEST_LEN + 1];
	uint64_t size;
	int r = wri_sha256_fd(fd, got, &size, err);
	if (r < 0)
		return wr_err_wrap(err, "%s", what);
	if (expected && strcmp(expected, got) != 0)
		return wr_err_set(err, EBADMSG, "%s: %s: digest mismatch: expected %s, got %s",
				  what, path, expected, got);
	if (size > MAX_JSON)
		return wr_err_set(err, EFBIG, "%s: %s: larger than %u bytes", what, path, MAX_JSON);
	_cleanup_free_ char *text = malloc(size + 1);
	if (text == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	if (pread(fd, text, size, 0) != (ssize_t)size)
		return wr_err_sys(err, "%s: read %s", what, path);
	text[size] = '\0';
	json_error_t je;
	if ((*out = json_loads(text, 0, &je)) == NULL)
		return wr_err_set(err, EINVAL, "%s: %s: invalid JSON: %s", what, path, je.text);
	if (text_out)
		*text_out = steal_ptr(&text);
	return 0;
}

static bool is_index(const char *mt)
{
	for (size_t i = 0; mt && i < WR_ARRAY_SIZE(index_types); i++)
		if (strcmp(mt, index_types[i]) == 0)
			return true;
	return false;
}

static bool platform_ok(json_t *desc, const char *want)
{
	json_t *p = json_object_get(desc, "platform");
	if (!json_is_object(p))
		return true;
	const char *os = json_string_value(json_object_get(p, "os"));
	const char *arch = json_string_value(json_object_get(p, "architecture"));
	const char *var = json_string_value(json_object_get(p, "variant"));
	char have[128];
	snprintf(have, sizeof(have), "%s/%s", os ? os : "", arch ? arch : "");
	if (strcmp(have, want) == 0)
		return true;
	snprintf(have, sizeof(have), "%s/%s/%s", os ? os : "", arch ? arch : "", var ? var : "");
	return strcmp(have, want) == 0;
}

static int import_oci(struct wr_image_store *s, struct wri_stage *st, int lfd, const char *label,
		      const char *kind, const struct wr_image_import_opts *o, struct wr_image **out,
		      wr_err *err)
{
	const char *want = o->platform ? o->platform : "linux/amd64";
	_cleanup_json_ json_t *idx = NULL;
	int r = read_json(lfd, "index.json", NULL, kind, &idx, NULL, err);
	if (r < 0)
		return r;
	char digest[WR_IMAGE_DIGEST_LEN + 1] = "";
	char path[100];
	/* index -> (nested index ->) manifest */
	for (int depth = 0;; depth++) {
		json_t *ms = json_object_get(idx, "manifests");
		if (!json_is_array(ms) || json_array_size(ms) == 0)
			return wr_err_set(err, EINVAL, "%s: index lists no manifests", kind);
		json_t *pick = NULL;
		size_t i;
		json_t *m;
		json_array_foreach(ms, i, m)
		{
			if (platform_ok(m, want)) {
				pick = m;
				break;
			}
		}
		if (pick == NULL)
			return wr_err_set(err, ENOENT, "%s: no manifest for platform %s", kind,
					  want);
		const char *d = json_string_value(json_object_get(pick, "digest"));
		const char *mt = json_string_value(json_object_get(pick, "mediaType"));
		if ((r = blob_path(d, path, sizeof(path), kind, err)) < 0)
			return r;
		snprintf(digest, sizeof(digest), "%s", d);
		bool nested = is_index(mt); /* mt lives in idx, released below */
		json_t *next = NULL;
		if ((r = read_json(lfd, path, digest, kind, &next, NULL, err)) < 0)
			return r;
		json_decref(idx);
		idx = next;
		if (!nested && !json_is_array(json_object_get(idx, "manifests")))
			break;
		if (depth == 4)
			return wr_err_set(err, ELOOP, "%s: indexes nested too deep", kind);
	}
	json_t *manifest = idx;
	json_t *cdesc = json_object_get(manifest, "config");
	json_t *layers = json_object_get(manifest, "layers");
	if (!json_is_object(cdesc) || !json_is_array(layers))
		return wr_err_set(err, EINVAL, "%s: manifest %s: no config or layers", kind,
				  digest);
	size_t n = json_array_size(layers);
	if (n > MAX_LAYERS)
		return wr_err_set(err, E2BIG, "%s: more than %d layers", kind, MAX_LAYERS);
	_cleanup_json_ json_t *config = NULL;
	const char *cd = json_string_value(json_object_get(cdesc, "digest"));
	if ((r = blob_path(cd, path, sizeof(path), kind, err)) < 0 ||
	    (r = read_json(lfd, path, cd, kind, &config, NULL, err)) < 0)
		return r;
	struct wr_image_layer ls[MAX_LAYERS];
	int fds[MAX_LAYERS];
	size_t opened = 0;
	for (size_t i = 0; i < n; i++) {
		json_t *l = json_array_get(layers, i);
		const char *ld = json_string_value(json_object_get(l, "digest"));
		if ((r = blob_path(ld, path, sizeof(path), kind, err)) < 0)
			break;
		if ((fds[i] = open_in(lfd, path, kind, err)) < 0) {
			r = fds[i];
			break;
		}
		opened++;
		ls[i] = (struct wr_image_layer){
		    fds[i], json_string_value(json_object_get(l, "mediaType")), ld};
	}
	json_t *digests = json_array();
	json_t *rt = wri_runtime_config(config);
	_cleanup_free_ char *root = NULL, *source = NULL;
	if (r == 0 && (r = wri_apply_layers(s, st, ls, n, digests, err)) == 0 &&
	    (r = wri_stage_root_path(s, st, &root, err)) == 0) {
		if (asprintf(&source, "%s:%s@%s", kind, label, digest) < 0)
			r = wr_err_set(err, ENOMEM, "out of memory");
		else
			r = wri_finish(s, st, root, rt, digests, source, o, out, err);
	}
	for (size_t i = 0; i < opened; i++)
		close(fds[i]);
	json_decref(digests);
	json_decref(rt);
	return r;
}

static bool hex64(const char *p, size_t n)
{
	return n == 64 && strspn(p, "0123456789abcdef") >= 64;
}

/* The digest a docker-archive file name promises: blobs/sha256/<hex>,
 * <hex>.json or <hex>/layer.tar; "" when none. */
static void name_digest(const char *path, char out[WR_IMAGE_DIGEST_LEN + 1])
{
	out[0] = '\0';
	const char *b = strrchr(path, '/');
	b = b ? b + 1 : path;
	if (strncmp(path, "blobs/sha256/", 13) == 0 && hex64(path + 13, strlen(path + 13)))
		snprintf(out, WR_IMAGE_DIGEST_LEN + 1, "sha256:%s", path + 13);
	else if (strlen(b) == 69 && strcmp(b + 64, ".json") == 0 && hex64(b, 64))
		snprintf(out, WR_IMAGE_DIGEST_LEN + 1, "sha256:%.64s", b);
}

static int import_docker(struct wr_image_store *s, struct wri_stage *st, int afd, const char *label,
			 const struct wr_image_import_opts *o, struct wr_image **out, wr_err *err)
{
	const char *kind = "docker-archive";
	_cleanup_json_ json_t *m = NULL;
	int r = read_json(afd, "manifest.json", NULL, kind, &m, NULL, err);
	if (r < 0)
		return r;
	json_t *e = json_array_get(m, 0);
	const char *cfgpath = json_string_value(json_object_get(e, "Config"));
	json_t *layers = json_object_get(e, "Layers");
	if (cfgpath == NULL || !json_is_array(layers))
		return wr_err_set(err, EINVAL, "%s: manifest.json: no Config or Layers", kind);
	size_t n = json_array_size(layers);
	if (n > MAX_LAYERS)
		return wr_err_set(err, E2BIG, "%s: more than %d layers", kind, MAX_LAYERS);
	char want[WR_IMAGE_DIGEST_LEN + 1];
	name_digest(cfgpath, want);
	_cleanup_json_ json_t *config = NULL;
	if ((r = read_json(afd, cfgpath, want[0] ? want : NULL, kind, &config, NULL, err)) < 0)
		return r;
	json_t *diff_ids = json_object_get(json_object_get(config, "rootfs"), "diff_ids");
	struct wr_image_layer ls[MAX_LAYERS];
	int fds[MAX_LAYERS];
	size_t opened = 0;
	for (size_t i = 0; i < n && r == 0; i++) {
		const char *lp = json_string_value(json_array_get(layers, i));
		if (lp == NULL) {
			r = wr_err_set(err, EINVAL, "%s: Layers[%zu]: not a string", kind, i);
			break;
		}
		if ((fds[i] = open_in(afd, lp, kind, err)) < 0) {
			r = fds[i];
			break;
		}
		opened++;
		char got[WR_IMAGE_DIGEST_LEN + 1];
		if ((r = wri_sha256_fd(fds[i], got, NULL, err)) < 0)
			break;
		name_digest(lp, want);
		const char *diff = json_string_value(json_array_get(diff_ids, i));
		if (!(want[0] && strcmp(want, got) == 0) && !(diff && strcmp(diff, got) == 0)) {
			r = wr_err_set(err, EBADMSG,
				       "%s: layer %zu (%s): digest %s matches neither its name nor "
				       "the config's diff_ids",
				       kind, i, lp, got);
			break;
		}
		ls[i] = (struct wr_image_layer){fds[i], NULL, NULL};
	}
	json_t *digests = json_array();
	json_t *rt = wri_runtime_config(config);
	_cleanup_free_ char *root = NULL, *source = NULL;
	if (r == 0 && (r = wri_apply_layers(s, st, ls, n, digests, err)) == 0 &&
	    (r = wri_stage_root_path(s, st, &root, err)) == 0) {
		if (asprintf(&source, "%s:%s", kind, label) < 0)
			r = wr_err_set(err, ENOMEM, "out of memory");
		else
			r = wri_finish(s, st, root, rt, digests, source, o, out, err);
	}
	for (size_t i = 0; i < opened; i++)
		close(fds[i]);
	json_decref(digests);
	json_decref(rt);
	return r;
}

int wri_detect(int fd, enum wr_image_format *fmt, wr_err *err)
{
	if (lseek(fd, 0, SEEK_SET) < 0)
		return wr_err_sys(err, "detect format: seek");
	struct archive *a = archive_read_new();
	archive_read_support_filter_all(a);
	archive_read_support_format_tar(a);
	archive_read_support_format_gnutar(a);
	archive_read_support_format_empty(a);
	int r = 0;
	bool layout = false, index = false, manifest = false, layer_tar = false;
	if (archive_read_open_fd(a, fd, 1 << 16) != ARCHIVE_OK) {
		r = wr_err_set(err, EBADMSG, "not a tar archive: %s",
			       archive_error_string(a) ? archive_error_string(a) : "unknown");
		goto out;
	}
	struct archive_entry *ae;
	int rc;
	while ((rc = archive_read_next_header(a, &ae)) == ARCHIVE_OK || rc == ARCHIVE_WARN) {
		const char *p = archive_entry_pathname(ae);
		while (p && strncmp(p, "./", 2) == 0)
			p += 2;
		if (p == NULL)
			continue;
		layout |= strcmp(p, "oci-layout") == 0;
		index |= strcmp(p, "index.json") == 0;
		manifest |= strcmp(p, "manifest.json") == 0;
		size_t l = strlen(p);
		layer_tar |= (l > 10 && strcmp(p + l - 10, "/layer.tar") == 0) ||
			     strncmp(p, "blobs/sha256/", 13) == 0;
	}
	if (rc != ARCHIVE_EOF) {
		r = wr_err_set(err, EBADMSG, "corrupt archive: %s",
			       archive_error_string(a) ? archive_error_string(a) : "read error");
		goto out;
	}
	if (manifest && layer_tar)
		*fmt = WR_IMAGE_FMT_DOCKER_ARCHIVE;
	else if (layout && index)
		*fmt = WR_IMAGE_FMT_OCI_ARCHIVE;
	else
		*fmt = WR_IMAGE_FMT_TAR;
out:
	archive_read_free(a);
	if (lseek(fd, 0, SEEK_SET) < 0 && r == 0)
		r = wr_err_sys(err, "detect format: seek");
	return r;
}

int wri_import_format(struct wr_image_store *s, struct wri_stage *st, int fd, int dirfd,
		      const char *label, enum wr_image_format fmt,
		      const struct wr_image_import_opts *o, struct wr_image **out, wr_err *err)
{
	int r;
	if (fmt == WR_IMAGE_FMT_OCI_LAYOUT)
		return import_oci(s, st, dirfd, label, "oci-layout", o, out, err);
	if (fmt == WR_IMAGE_FMT_VM_DISK)
		return wri_import_vmdisk(s, st, fd, label, o, out, err);
	if (fmt == WR_IMAGE_FMT_TAR) {
		if ((r = wri_stage_root(st, err)) < 0)
			return r;
		struct wri_unpack u;
		wri_unpack_init(&u, st->rootfd, s);
		r = wri_unpack_tar(&u, fd, "tar", err);
		if (r == 0)
			r = wri_unpack_finish(&u, err);
		wri_unpack_free(&u);
		_cleanup_free_ char *root = NULL, *source = NULL;
		if (r == 0 && (r = wri_stage_root_path(s, st, &root, err)) == 0) {
			if (asprintf(&source, "tar:%s", label) < 0)
				return wr_err_set(err, ENOMEM, "out of memory");
			r = wri_finish(s, st, root, NULL, NULL, source, o, out, err);
		}
		return r;
	}
	/* Archives: unpack into stage/archive (same hostile-input rules and
	 * limits), then read it as a layout. */
	if (mkdirat(st->fd, "archive", 0700) < 0)
		return wr_err_sys(err, "staging: mkdir archive");
	_cleanup_close_ int afd =
	    openat(st->fd, "archive", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (afd < 0)
		return wr_err_sys(err, "staging: open archive");
	if (lseek(fd, 0, SEEK_SET) < 0)
		return wr_err_sys(err, "archive: seek");
	struct wri_unpack u;
	wri_unpack_init(&u, afd, s);
	r = wri_unpack_tar(&u, fd, wr_image_format_name(fmt), err);
	wri_unpack_free(&u);
	if (r < 0)
		return r;
	if (fmt == WR_IMAGE_FMT_OCI_ARCHIVE)
		return import_oci(s, st, afd, label, "oci-archive", o, out, err);
	if (fmt == WR_IMAGE_FMT_DOCKER_ARCHIVE)
		return import_docker(s, st, afd, label, o, out, err);
	return wr_err_field(err, "format", "format: unsupported here");
}

/* A rootfs directory is built as it is; first a walk refuses devices and
 * enforces the limits. */
static int walk(int fd, const char *rel, int depth, uint64_t *entries, uint64_t *bytes,
		const struct wr_image_store *s, wr_err *err)
{
	if (depth > 256)
		return wr_err_set(err, ELOOP, "'%s': deeper than 256 levels", rel);
	int dfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (d == NULL) {
		if (dfd >= 0)
			close(dfd);
		return wr_err_sys(err, "'%s': read directory", rel);
	}
	struct dirent *e;
	int r = 0;
	while (r == 0 && (e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		struct stat sb;
		if (fstatat(fd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0) {
			r = wr_err_sys(err, "'%s/%s'", rel, e->d_name);
			break;
		}
		if (++*entries > s->o.max_entries) {
			r = wr_err_set(err, E2BIG, "more than %llu entries",
				       (unsigned long long)s->o.max_entries);
			break;
		}
		if (S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode) || S_ISSOCK(sb.st_mode)) {
			r = wr_err_set(err, EPERM, "entry '%s/%s': %s refused", rel, e->d_name,
				       S_ISSOCK(sb.st_mode) ? "sockets are" : "device nodes are");
			break;
		}
		if (S_ISREG(sb.st_mode) &&
		    (*bytes += (uint64_t)sb.st_size) > s->o.max_unpacked_bytes) {
			r = wr_err_set(err, EFBIG, "more than %llu bytes",
				       (unsigned long long)s->o.max_unpacked_bytes);
			break;
		}
		if (S_ISDIR(sb.st_mode)) {
			_cleanup_close_ int cfd =
			    openat(fd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			_cleanup_free_ char *crel = NULL;
			if (cfd < 0 || asprintf(&crel, "%s/%s", rel, e->d_name) < 0) {
				r = wr_err_sys(err, "'%s/%s'", rel, e->d_name);
				break;
			}
			r = walk(cfd, crel, depth + 1, entries, bytes, s, err);
		}
	}
	closedir(d);
	return r;
}

int wri_import_dir(struct wr_image_store *s, struct wri_stage *st, const char *path,
		   const struct wr_image_import_opts *o, struct wr_image **out, wr_err *err)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return wr_err_sys(err, "open %s", path);
	uint64_t entries = 0, bytes = 0;
	int r = walk(fd, "", 0, &entries, &bytes, s, err);
	if (r < 0)
		return r;
	_cleanup_free_ char *source = NULL;
	if (asprintf(&source, "dir:%s", path) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	return wri_finish(s, st, path, NULL, NULL, source, o, out, err);
}
