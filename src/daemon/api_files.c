/* File routes: a thin mapping of HTTP onto fsops (every path resolved
 * inside the sandbox root by the library). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "daemon/api.h"
#include "daemon/files.h"
#include "daemon/jsonutil.h"

void wrd_fs_reply_err(struct wrd_req *r, wr_err err, const char *field)
{
	if (err && err->field == NULL && field) {
		int e = err->errnum;
		if (e == EINVAL || e == ENAMETOOLONG || e == ELOOP || e == EXDEV || e == EBUSY ||
		    e == EISDIR || e == E2BIG)
			err->field = strdup(field);
	}
	wrd_reply_err(r, err);
}

static const char *type_name(enum wr_fs_type t)
{
	switch (t) {
	case WR_FS_FILE: return "file";
	case WR_FS_DIR: return "dir";
	case WR_FS_SYMLINK: return "symlink";
	default: return "other";
	}
}

json_t *wrd_fs_entry(const char *path, const struct wr_fs_stat *st)
{
	json_t *o = json_object();
	char buf[4096];
	snprintf(buf, sizeof(buf), "%s", path);
	size_t n = strlen(buf);
	while (n > 1 && buf[n - 1] == '/')
		buf[--n] = 0;
	const char *slash = strrchr(buf, '/');
	json_object_set_new(o, "path", json_string(buf));
	json_object_set_new(o, "name", json_string(slash && slash[1] ? slash + 1 : buf));
	json_object_set_new(o, "type", json_string(type_name(st->type)));
	json_object_set_new(o, "size", json_integer((json_int_t)st->size));
	char mode[8];
	snprintf(mode, sizeof(mode), "%04o", (unsigned)st->mode & 07777);
	json_object_set_new(o, "mode", json_string(mode));
	json_object_set_new(o, "uid", json_integer(st->uid));
	json_object_set_new(o, "gid", json_integer(st->gid));
	json_object_set_new(o, "mtime", wrd_j_time(st->mtime_ns / 1000000));
	if (st->type == WR_FS_SYMLINK)
		json_object_set_new(o, "target",
				    json_string(st->symlink_target ? st->symlink_target : ""));
	return o;
}

int wrd_parse_mode(struct wrd_req *r, const char *text, const char *key, mode_t *out)
{
	char *end;
	errno = 0;
	unsigned long m = strtoul(text, &end, 8);
	if (errno || *text == 0 || *end || m > 07777 || text[0] == '-' || text[0] == '+') {
		wrd_reply_error(r, "invalid_argument", key,
				"%s: must be an octal mode such as \"0644\"", key);
		return -1;
	}
	*out = (mode_t)m;
	return 0;
}

/* Resolve the sandbox and its filesystem view. */
static struct wrd_sbx *fs_begin(struct wrd_req *r, struct wr_fs *fs)
{
	struct wrd_sbx *sb = wrd_api_sandbox(r, true);
	if (sb == NULL)
		return NULL;
	_cleanup_err_ wr_err err = NULL;
	if (sb->ops->fs(sb->tsb, fs, &err) < 0) {
		wrd_reply_err(r, err);
		wrd_api_done(sb, true);
		return NULL;
	}
	return sb;
}

/* fs_begin for the routes whose one parameter is ?path=, after checking
 * the query. NULL when a reply went out. */
static struct wrd_sbx *path_begin(struct wrd_req *r, struct wr_fs *fs, const char **path)
{
	static const char *const allowed[] = {"path", NULL};
	if (wrd_query_check(r, allowed) < 0 || (*path = wrd_query_path(r, "path")) == NULL)
		return NULL;
	return fs_begin(r, fs);
}

static void reply_entry(struct wrd_req *r, const struct wr_fs *fs, const char *path,
			unsigned status)
{
	struct wr_fs_stat st = {0};
	_cleanup_err_ wr_err err = NULL;
	if (wr_fs_stat(fs, path, &st, &err) < 0) {
		wrd_fs_reply_err(r, err, "path");
		return;
	}
	wrd_reply_json(r, status, wrd_fs_entry(path, &st));
	wr_fs_stat_free(&st);
}

/* Whether a symlink does not lead to a regular file inside the root (err
 * set then): a read of 0 bytes resolves it exactly as the stream will. */
static bool link_unreadable(const struct wr_fs *fs, const char *path, wr_err *err)
{
	char *data = NULL;
	size_t len = 0;
	bool truncated = false;
	int rc = wr_fs_read(fs, path, 0, &data, &len, &truncated, err);
	free(data);
	return rc < 0;
}

void wrd_api_fs_read(struct wrd_req *r)
{
	const char *path;
	struct wr_fs fs;
	struct wrd_sbx *sb = path_begin(r, &fs, &path);
	if (sb == NULL)
		return;
	/* Errors before the first byte get their status; the read then
	 * streams whatever size the file has. */
	struct wr_fs_stat st = {0};
	_cleanup_err_ wr_err err = NULL;
	char *tmp = strdup(path);
	if (wr_fs_stat(&fs, path, &st, &err) < 0) {
		wrd_fs_reply_err(r, err, "path");
	} else if (st.type == WR_FS_DIR) {
		wrd_reply_error(r, "invalid_argument", "path", "%s is a directory", path);
	} else if (st.type == WR_FS_OTHER) {
		wrd_reply_error(r, "invalid_argument", "path", "%s is not a regular file", path);
	} else if (link_unreadable(&fs, path, &err)) {
		/* a dangling link (or one to a directory, a magic link), or a
		 * file the sandbox's user may not read, gets its status, not a
		 * 200 with an empty body */
		wrd_fs_reply_err(r, err, "path");
	} else {
		int fd = wrd_reply_stream(r, 200, "application/octet-stream");
		if (fd >= 0) {
			uint64_t written = 0;
			wr_fs_read_to_fd(&fs, tmp ? tmp : "/", fd, UINT64_MAX, &written, &err);
			close(fd);
		}
	}
	free(tmp);
	wr_fs_stat_free(&st);
	wrd_api_done(sb, true);
}

void wrd_api_fs_write(struct wrd_req *r)
{
	static const char *const allowed[] = {"path", "mode", "parents", NULL};
	const char *path, *ms;
	mode_t mode = 0644;
	bool parents;
	if (wrd_query_check(r, allowed) < 0 || (path = wrd_query_path(r, "path")) == NULL ||
	    ((ms = wrd_query(r, "mode")) && wrd_parse_mode(r, ms, "mode", &mode) < 0) ||
	    wrd_query_bool(r, "parents", false, &parents) < 0)
		return;
	struct wr_fs fs;
	struct wrd_sbx *sb = fs_begin(r, &fs);
	if (sb == NULL)
		return;
	_cleanup_err_ wr_err err = NULL;
	if (r->upload_fd < 0)
		wrd_reply_error(r, "conflict", NULL, "sandbox %s stopped during the upload", r->id);
	else if (wr_fs_write_from_fd(&fs, path, r->upload_fd, r->upload_max, mode, parents, &err) <
		 0)
		wrd_fs_reply_err(r, err, "path");
	else
		reply_entry(r, &fs, path, 200);
	wrd_api_done(sb, true);
}

void wrd_api_fs_stat(struct wrd_req *r)
{
	const char *path;
	struct wr_fs fs;
	struct wrd_sbx *sb = path_begin(r, &fs, &path);
	if (sb == NULL)
		return;
	reply_entry(r, &fs, path, 200);
	wrd_api_done(sb, true);
}

void wrd_api_fs_exists(struct wrd_req *r)
{
	const char *path;
	struct wr_fs fs;
	struct wrd_sbx *sb = path_begin(r, &fs, &path);
	if (sb == NULL)
		return;
	bool exists = false;
	_cleanup_err_ wr_err err = NULL;
	if (wr_fs_exists(&fs, path, &exists, &err) < 0) {
		wrd_fs_reply_err(r, err, "path");
	} else {
		json_t *o = json_object();
		json_object_set_new(o, "exists", json_boolean(exists));
		wrd_reply_json(r, 200, o);
	}
	wrd_api_done(sb, true);
}

struct list_ctx {
	const char *base;
	json_t *arr;
};

static int list_cb(void *ctx, const char *rel, const struct wr_fs_stat *st)
{
	struct list_ctx *c = ctx;
	char path[8192];
	size_t bl = strlen(c->base);
	snprintf(path, sizeof(path), "%s%s%s", c->base, bl && c->base[bl - 1] == '/' ? "" : "/",
		 rel);
	json_array_append_new(c->arr, wrd_fs_entry(path, st));
	return 0;
}

void wrd_api_fs_list(struct wrd_req *r)
{
	static const char *const allowed[] = {"path", "depth", NULL};
	const char *path, *ds;
	uint64_t depth = 1;
	if (wrd_query_check(r, allowed) < 0 || (path = wrd_query_path(r, "path")) == NULL)
		return;
	if ((ds = wrd_query(r, "depth")) && (wr_parse_u64(ds, 16, &depth) < 0 || depth < 1)) {
		wrd_reply_error(r, "invalid_argument", "depth", "depth: must be 1 to 16");
		return;
	}
	struct wr_fs fs;
	struct wrd_sbx *sb = fs_begin(r, &fs);
	if (sb == NULL)
		return;
	struct list_ctx c = {.base = path, .arr = json_array()};
	_cleanup_err_ wr_err err = NULL;
	if (wr_fs_list(&fs, path, (int)depth, list_cb, &c, &err) < 0) {
		json_decref(c.arr);
		wrd_fs_reply_err(r, err, "path");
	} else {
		json_t *o = json_object();
		json_object_set_new(o, "entries", c.arr);
		wrd_reply_json(r, 200, o);
	}
	wrd_api_done(sb, true);
}

void wrd_api_fs_mkdir(struct wrd_req *r)
{
	static const char *const keys[] = {"path", "parents", "mode", NULL};
	if (wrd_query_check(r, NULL) < 0)
		return;
	json_t *b = r->json;
	if (b == NULL) {
		wrd_reply_error(r, "invalid_argument", "path", "path: is required");
		return;
	}
	if (wrd_api_known_keys(r, b, keys) < 0)
		return;
	const char *path, *ms;
	bool parents = false;
	mode_t mode = 0755;
	_cleanup_err_ wr_err err = NULL;
	json_t *v = json_object_get(b, "path");
	if (v == NULL) {
		wrd_reply_error(r, "invalid_argument", "path", "path: is required");
		return;
	}
	if (wrd_j_str(v, "path", 4095, false, &path, &err) < 0 ||
	    ((v = json_object_get(b, "parents")) && wrd_j_bool(v, "parents", &parents, &err) < 0) ||
	    ((v = json_object_get(b, "mode")) && wrd_j_str(v, "mode", 8, false, &ms, &err) < 0)) {
		wrd_reply_err(r, err);
		return;
	}
	if (v && wrd_parse_mode(r, ms, "mode", &mode) < 0)
		return;
	struct wr_fs fs;
	struct wrd_sbx *sb = fs_begin(r, &fs);
	if (sb == NULL)
		return;
	if (wr_fs_mkdir(&fs, path, mode, parents, &err) < 0)
		wrd_fs_reply_err(r, err, "path");
	else
		reply_entry(r, &fs, path, 200);
	wrd_api_done(sb, true);
}

void wrd_api_fs_rename(struct wrd_req *r)
{
	static const char *const keys[] = {"from", "to", NULL};
	if (wrd_query_check(r, NULL) < 0)
		return;
	json_t *b = r->json;
	if (b && wrd_api_known_keys(r, b, keys) < 0)
		return;
	const char *from, *to;
	_cleanup_err_ wr_err err = NULL;
	json_t *f = b ? json_object_get(b, "from") : NULL, *t = b ? json_object_get(b, "to") : NULL;
	if (f == NULL || t == NULL) {
		wrd_reply_error(r, "invalid_argument", f ? "to" : "from", "%s: is required",
				f ? "to" : "from");
		return;
	}
	if (wrd_j_str(f, "from", 4095, false, &from, &err) < 0 ||
	    wrd_j_str(t, "to", 4095, false, &to, &err) < 0) {
		wrd_reply_err(r, err);
		return;
	}
	struct wr_fs fs;
	struct wrd_sbx *sb = fs_begin(r, &fs);
	if (sb == NULL)
		return;
	if (wr_fs_rename(&fs, from, to, &err) < 0)
		wrd_fs_reply_err(r, err, "from");
	else
		reply_entry(r, &fs, to, 200);
	wrd_api_done(sb, true);
}

void wrd_api_fs_remove(struct wrd_req *r)
{
	static const char *const allowed[] = {"path", "recursive", NULL};
	const char *path;
	bool recursive;
	if (wrd_query_check(r, allowed) < 0 || (path = wrd_query_path(r, "path")) == NULL ||
	    wrd_query_bool(r, "recursive", false, &recursive) < 0)
		return;
	struct wr_fs fs;
	struct wrd_sbx *sb = fs_begin(r, &fs);
	if (sb == NULL)
		return;
	_cleanup_err_ wr_err err = NULL;
	if (wr_fs_remove(&fs, path, recursive, &err) < 0)
		wrd_fs_reply_err(r, err, "path");
	else
		wrd_reply_empty(r, 204);
	wrd_api_done(sb, true);
}
