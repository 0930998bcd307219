/* libwarren: files inside a sandbox, and tar streams of whole trees. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_internal.h"
#include "common/cleanup.h"

static int check_path(struct wc_call *c, const char *field, const char *path)
{
	if (path == NULL || *path == 0)
		return wc_fail_field(c, field, "%s: must not be empty", field);
	return 0;
}

/* "/v1/sandboxes/ID/files<suffix>?path=P<extra>" */
static char *files_path(warren_sandbox *sb, const char *suffix, const char *path, const char *extra)
{
	_cleanup_free_ char *p = wc_esc(path);
	if (p == NULL)
		return NULL;
	return wc_fmt("/v1/sandboxes/%s/files%s?path=%s%s", sb->id, suffix, p, extra ? extra : "");
}

int warren_file_read(warren_sandbox *sb, const char *path, void **data, size_t *len,
		     warren_error **errp)
{
	struct wc_call c = {.client = sb->client};
	struct wc_buf b = {0};
	*data = NULL;
	*len = 0;
	int r = check_path(&c, "path", path);
	if (r >= 0) {
		_cleanup_free_ char *route = files_path(sb, "", path, NULL);
		struct wc_req rq = WC_REQ_INIT("GET", route);
		rq.long_running = true;
		r = wc_do(&c, &rq, &b);
	}
	if (r >= 0 && b.p == NULL && wc_buf_add(&b, "", 0) < 0)
		r = wc_fail(&c, "internal", ENOMEM, "out of memory");
	if (r >= 0) {
		*data = b.p;
		*len = b.len;
	} else {
		wc_buf_free(&b);
	}
	return wc_finish(&c, r < 0 ? r : 0, errp, "read %s", path ? path : "(null)");
}

/* GET the files route (suffix "" or "/tar") of path, the answer streamed
 * into fd; what names the operation in an error ("read /x: ..."). */
static int get_to_fd(warren_sandbox *sb, const char *suffix, const char *path, int fd,
		     const char *what, warren_error **errp)
{
	struct wc_call c = {.client = sb->client};
	int r = check_path(&c, "path", path);
	if (r >= 0 && fd < 0)
		r = wc_fail_field(&c, "fd", "fd: %d is not a file descriptor", fd);
	if (r >= 0) {
		_cleanup_free_ char *route = files_path(sb, suffix, path, NULL);
		struct wc_req rq = WC_REQ_INIT("GET", route);
		rq.long_running = true;
		rq.out_fd = fd;
		r = wc_do(&c, &rq, NULL);
	}
	return wc_finish(&c, r < 0 ? r : 0, errp, "%s %s", what, path ? path : "(null)");
}

int warren_file_read_fd(warren_sandbox *sb, const char *path, int fd, warren_error **errp)
{
	return get_to_fd(sb, "", path, fd, "read", errp);
}

static int write_common(warren_sandbox *sb, const char *path, const void *data, size_t len, int fd,
			const warren_write_opts *opts, warren_error **errp)
{
	struct wc_call c = {.client = sb->client};
	int r = check_path(&c, "path", path);
	if (r >= 0 && opts && opts->mode > 07777)
		r = wc_fail_field(&c, "mode", "mode: %o is not a permission mode", opts->mode);
	if (r >= 0) {
		char extra[64] = "";
		size_t n = 0;
		if (opts && opts->mode)
			n += (size_t)snprintf(extra + n, sizeof(extra) - n, "&mode=%04o",
					      opts->mode);
		if (opts && opts->parents)
			snprintf(extra + n, sizeof(extra) - n, "&parents=true");
		_cleanup_free_ char *route = files_path(sb, "", path, extra);
		struct wc_req rq = WC_REQ_INIT("PUT", route);
		struct wc_buf b = {0};
		rq.long_running = true;
		rq.content_type = "application/octet-stream";
		if (fd >= 0) {
			rq.in_fd = fd;
		} else {
			rq.has_data = true;
			rq.data = data;
			rq.len = len;
		}
		r = wc_do(&c, &rq, &b);
		wc_buf_free(&b);
	}
	return wc_finish(&c, r < 0 ? r : 0, errp, "write %s", path ? path : "(null)");
}

int warren_file_write(warren_sandbox *sb, const char *path, const void *data, size_t len,
		      const warren_write_opts *opts, warren_error **errp)
{
	return write_common(sb, path, data, len, -1, opts, errp);
}

int warren_file_write_fd(warren_sandbox *sb, const char *path, int fd,
			 const warren_write_opts *opts, warren_error **errp)
{
	if (fd < 0) {
		struct wc_call c = {.client = sb->client};
		int r = wc_fail_field(&c, "fd", "fd: %d is not a file descriptor", fd);
		return wc_finish(&c, r, errp, "write %s", path ? path : "(null)");
	}
	return write_common(sb, path, NULL, 0, fd, opts, errp);
}

static int get_entry(struct wc_call *c, json_t *ans, warren_file_entry **out)
{
	warren_file_entry *e = calloc(1, sizeof(*e));
	if (e == NULL)
		return wc_fail(c, "internal", ENOMEM, "out of memory");
	int r = wc_parse_entry(c, ans, e);
	if (r < 0) {
		warren_file_entry_free(e);
		return r;
	}
	*out = e;
	return 0;
}

int warren_file_stat(warren_sandbox *sb, const char *path, warren_file_entry **out,
		     warren_error **errp)
{
	struct wc_call c = {.client = sb->client};
	_cleanup_json_ json_t *ans = NULL;
	*out = NULL;
	int r = check_path(&c, "path", path);
	if (r >= 0) {
		_cleanup_free_ char *route = files_path(sb, "/stat", path, NULL);
		r = wc_json(&c, "GET", route, NULL, &ans);
	}
	if (r >= 0)
		r = get_entry(&c, ans, out);
	return wc_finish(&c, r < 0 ? r : 0, errp, "stat %s", path ? path : "(null)");
}

int warren_file_exists(warren_sandbox *sb, const char *path, warren_error **errp)
{
	struct wc_call c = {.client = sb->client};
	_cleanup_json_ json_t *ans = NULL;
	int r = check_path(&c, "path", path);
	if (r >= 0) {
		_cleanup_free_ char *route = files_path(sb, "/exists", path, NULL);
		r = wc_json(&c, "GET", route, NULL, &ans);
	}
	if (r >= 0) {
		json_t *v = json_object_get(ans, "exists");
		if (!json_is_boolean(v))
			r = wc_fail(&c, "protocol", EPROTO, "answer has no exists boolean");
		else
			r = json_is_true(v) ? 1 : 0;
	}
	return wc_finish(&c, r, errp, "exists %s", path ? path : "(null)");
}

int warren_file_list_dir(warren_sandbox *sb, const char *path, int depth, warren_file_list **out,
			 warren_error **errp)
{
	struct wc_call c = {.client = sb->client};
	_cleanup_json_ json_t *ans = NULL;
	*out = NULL;
	int r = check_path(&c, "path", path);
	if (r >= 0 && (depth < 0 || depth > 16))
		r = wc_fail_field(&c, "depth", "depth: %d is not between 1 and 16", depth);
	if (r >= 0) {
		char extra[32];
		snprintf(extra, sizeof(extra), "&depth=%d", depth ? depth : 1);
		_cleanup_free_ char *route = files_path(sb, "/list", path, extra);
		r = wc_json(&c, "GET", route, NULL, &ans);
	}
	json_t *arr = json_object_get(ans, "entries");
	if (r >= 0 && !json_is_array(arr))
		r = wc_fail(&c, "protocol", EPROTO, "answer has no entries array");
	if (r >= 0) {
		warren_file_list *l = calloc(1, sizeof(*l));
		size_t n = json_array_size(arr);
		if (l)
			l->entries = calloc(n ? n : 1, sizeof(*l->entries));
		if (l == NULL || l->entries == NULL) {
			free(l);
			r = wc_fail(&c, "internal", ENOMEM, "out of memory");
		} else {
			size_t i;
			json_t *o;
			json_array_foreach(arr, i, o)
			{
				r = wc_parse_entry(&c, o, &l->entries[l->count]);
				if (r < 0)
					break;
				l->count++;
			}
			if (r < 0)
				warren_file_list_free(l);
			else
				*out = l;
		}
	}
	return wc_finish(&c, r < 0 ? r : 0, errp, "list %s", path ? path : "(null)");
}

int warren_file_mkdir(warren_sandbox *sb, const char *path, bool parents, unsigned int mode,
		      warren_file_entry **out, warren_error **errp)
{
	struct wc_call c = {.client = sb->client};
	_cleanup_json_ json_t *req = NULL, *ans = NULL;
	_cleanup_free_ char *route = wc_fmt("/v1/sandboxes/%s/files/mkdir", sb->id);
	if (out)
		*out = NULL;
	int r = check_path(&c, "path", path);
	if (r >= 0 && mode > 07777)
		r = wc_fail_field(&c, "mode", "mode: %o is not a permission mode", mode);
	if (r >= 0) {
		req = json_object();
		if (json_object_set_new(req, "path", json_string(path)) < 0)
			r = wc_fail_field(&c, "path", "path: not UTF-8");
	}
	if (r >= 0) {
		json_object_set_new(req, "parents", json_boolean(parents));
		if (mode) {
			char m[16];
			snprintf(m, sizeof(m), "%04o", mode);
			json_object_set_new(req, "mode", json_string(m));
		}
		r = wc_json(&c, "POST", route, req, &ans);
	}
	if (r >= 0 && out && ans)
		r = get_entry(&c, ans, out);
	return wc_finish(&c, r < 0 ? r : 0, errp, "mkdir %s", path ? path : "(null)");
}

int warren_file_rename(warren_sandbox *sb, const char *from, const char *to,
		       warren_file_entry **out, warren_error **errp)
{
	struct wc_call c = {.client = sb->client};
	_cleanup_json_ json_t *req = json_object(), *ans = NULL;
	_cleanup_free_ char *route = wc_fmt("/v1/sandboxes/%s/files/rename", sb->id);
	if (out)
		*out = NULL;
	int r = check_path(&c, "from", from);
	if (r >= 0)
		r = check_path(&c, "to", to);
	if (r >= 0 && json_object_set_new(req, "from", json_string(from)) < 0)
		r = wc_fail_field(&c, "from", "from: not UTF-8");
	if (r >= 0 && json_object_set_new(req, "to", json_string(to)) < 0)
		r = wc_fail_field(&c, "to", "to: not UTF-8");
	if (r >= 0)
		r = wc_json(&c, "POST", route, req, &ans);
	if (r >= 0 && out && ans)
		r = get_entry(&c, ans, out);
	return wc_finish(&c, r < 0 ? r : 0, errp, "rename %s", from ? from : "(null)");
}

int warren_file_remove(warren_sandbox *sb, const char *path, bool recursive, warren_error **errp)
{
	struct wc_call c = {.client = sb->client};
	int r = check_path(&c, "path", path);
	if (r >= 0) {
		_cleanup_free_ char *route =
		    files_path(sb, "", path, recursive ? "&recursive=true" : NULL);
		r = wc_json(&c, "DELETE", route, NULL, NULL);
	}
	return wc_finish(&c, r < 0 ? r : 0, errp, "remove %s", path ? path : "(null)");
}

int warren_tar_upload(warren_sandbox *sb, const char *dest, int fd, int64_t *files, int64_t *bytes,
		      warren_error **errp)
{
	struct wc_call c = {.client = sb->client};
	struct wc_buf b = {0};
	_cleanup_json_ json_t *ans = NULL;
	int r = check_path(&c, "path", dest);
	if (r >= 0 && fd < 0)
		r = wc_fail_field(&c, "fd", "fd: %d is not a file descriptor", fd);
	if (r >= 0) {
		_cleanup_free_ char *route = files_path(sb, "/tar", dest, NULL);
		struct wc_req rq = WC_REQ_INIT("PUT", route);
		rq.long_running = true;
		rq.content_type = "application/x-tar";
		rq.in_fd = fd;
		r = wc_do(&c, &rq, &b);
	}
	json_error_t jerr;
	if (r >= 0 && b.len && (ans = json_loadb(b.p, b.len, 0, &jerr)) == NULL)
		r = wc_fail(&c, "protocol", EPROTO, "answer is not JSON: %s", jerr.text);
	wc_buf_free(&b);
	if (files)
		*files = r >= 0 ? wc_jint(ans, "files", 0) : 0;
	if (bytes)
		*bytes = r >= 0 ? wc_jint(ans, "bytes", 0) : 0;
	return wc_finish(&c, r < 0 ? r : 0, errp, "upload tar to %s", dest ? dest : "(null)");
}

int warren_tar_download(warren_sandbox *sb, const char *path, int fd, warren_error **errp)
{
	return get_to_fd(sb, "/tar", path, fd, "download tar of", errp);
}
