/* The vm tier's files over qemu-guest-agent (see vm_files.h for the rules).
 *
 * Trust: everything qemu-ga and the tools print is the guest's word. Tool
 * output is bounded (qemu-ga's own 16 MiB capture, and our cap), parsed
 * strictly (NUL-separated fields of find -printf, numbers range-checked);
 * a read takes at most what was asked for. A malformed answer is EIO. */
#include "tiers/vm_files.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/util.h"
#include "tiers/qga.h"
#include "tiers/vm.h"

#define IO_CHUNK 49152	       /* bytes per guest-file-read/write call */
#define USER_CHUNK (4u << 20)  /* bytes per dd run as the sandbox user */
#define TOOL_CAP (16u << 20)   /* a tool's output */
#define TOOL_TIMEOUT_MS 120000 /* a tool's run (TCG guests are slow) */
#define QGA_MS 60000
#define SHOWN 256

/* fields of one find -printf record, NUL-separated */
#define STAT_FMT "%y\\0%s\\0%m\\0%U\\0%G\\0%T@\\0%D\\0%l\\0"
#define STAT_FIELDS 8

/* ---- paths and errors ------------------------------------------------------ */

/* The guest path for a caller's path: relative ones are relative to "/";
 * the guest's kernel resolves the rest from its own root. */
static int gpath(const char *op, const char *path, char out[PATH_MAX], wr_err *err)
{
	if (path == NULL || *path == 0)
		return wr_err_set(err, EINVAL, "%s: empty path", op);
	if (strlen(path) + 1 >= PATH_MAX)
		return wr_err_set(err, ENAMETOOLONG, "%s %.*s...: path too long", op, SHOWN, path);
	for (const char *p = path; *p;) {
		size_t n = strcspn(p, "/");
		if (n > NAME_MAX)
			return wr_err_set(err, ENAMETOOLONG, "%s %.*s: a name is too long", op,
					  SHOWN, path);
		p += n;
		p += strspn(p, "/");
	}
	snprintf(out, PATH_MAX, "%s%s", path[0] == '/' ? "" : "/", path);
	return 0;
}

/* The last component (a copy), "" for the root; dir gets the rest. */
static void split(const char *g, char dir[PATH_MAX], char base[NAME_MAX + 1])
{
	char tmp[PATH_MAX];
	snprintf(tmp, sizeof(tmp), "%s", g);
	size_t n = strlen(tmp);
	while (n > 1 && tmp[n - 1] == '/')
		tmp[--n] = 0;
	char *s = strrchr(tmp, '/');
	snprintf(base, NAME_MAX + 1, "%.*s", NAME_MAX, s ? s + 1 : tmp); /* gpath checked */
	if (s == tmp)
		snprintf(dir, PATH_MAX, "/");
	else if (s) {
		*s = 0;
		snprintf(dir, PATH_MAX, "%s", tmp);
	} else
		snprintf(dir, PATH_MAX, "/");
}

/* Operations on a last component refuse ".", ".." and the root. */
static int last_ok(const char *op, const char *path, const char *g, wr_err *err)
{
	char dir[PATH_MAX], base[NAME_MAX + 1];
	split(g, dir, base);
	if (base[0] == 0)
		return wr_err_set(err, EBUSY, "%s %.*s: the root", op, SHOWN, path);
	if (!strcmp(base, ".") || !strcmp(base, ".."))
		return wr_err_set(err, EINVAL, "%s %.*s: not a name", op, SHOWN, path);
	return 0;
}

/* The errno a tool's or qemu-ga's message names (glibc's strerror text,
 * the same in the guest), EIO when none. */
static int errno_of(const char *text)
{
	int best = 0;
	size_t best_len = 0;
	for (int e = 1; e < 134 && text; e++) {
		const char *d = strerrordesc_np(e);
		if (d && strlen(d) > best_len && strstr(text, d)) {
			best = e;
			best_len = strlen(d);
		}
	}
	return best ? best : EIO;
}

static int guest_err(wr_err *err, const char *op, const char *path, const char *text)
{
	int e = errno_of(text);
	return wr_err_set(err, e, "%s %.*s: %s", op, SHOWN, path,
			  e == EIO ? "the guest failed" : strerrordesc_np(e));
}

/* ---- tools ----------------------------------------------------------------- */

struct tool {
	int exit_code;
	char *out, *err;
	size_t out_len;
};

static void tool_free(struct tool *t)
{
	free(t->out);
	free(t->err);
}

/* Root, the guest agent's own user: bytes go through guest-file-* directly.
 * Any other sandbox user: every tool runs as that user, and bytes through
 * dd run as that user (user_read, user_write), so the guest's kernel checks
 * each path and permission as it would for the sandbox's own processes. */
static bool as_root(const struct wr_fullvm_fsctx *x)
{
	return x->uid == 0 && x->gid == 0;
}

/* argv[0] an absolute path of the guest; run as the sandbox user (setpriv,
 * as commands are: no supplementary groups) unless root or privileged;
 * in: the tool's stdin (guest-exec's input-data). */
static int run_io(struct wr_fullvm_fsctx *x, bool privileged, const char *const *argv,
		  const void *in, size_t in_len, struct tool *t, wr_err *err)
{
	memset(t, 0, sizeof(*t));
	static const char *const env[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL};
	const char *full[24];
	char uid[32], gid[32];
	size_t n = 0;
	if (!privileged && !as_root(x)) {
		snprintf(uid, sizeof(uid), "--reuid=%u", (unsigned)x->uid);
		snprintf(gid, sizeof(gid), "--regid=%u", (unsigned)x->gid);
		const char *pv[] = {"/usr/bin/setpriv", uid, gid, "--clear-groups", "--"};
		for (size_t i = 0; i < 5; i++)
			full[n++] = pv[i];
	}
	for (size_t i = 0; argv[i]; i++) {
		if (n + 1 >= sizeof(full) / sizeof(full[0]))
			return wr_err_set(err, E2BIG, "vm files: %s: too many arguments", argv[0]);
		full[n++] = argv[i];
	}
	full[n] = NULL;
	struct wr_qga_exec e = {.argv = full,
				.env = env,
				.input = in,
				.input_len = in_len,
				.timeout_ms = TOOL_TIMEOUT_MS,
				.output_cap = TOOL_CAP};
	struct wr_qga_result r = {0};
	if (wr_fullvm_qga_run(x->vm, &e, &r, err) < 0)
		return wr_err_wrap(err, "vm files: %s", argv[0]);
	if (!r.exited || r.out_truncated) {
		wr_qga_result_free(&r);
		return wr_err_set(err, EIO, "vm files: %s: %s", argv[0],
				  r.exited ? "output over its bound" : "did not finish");
	}
	t->exit_code = r.signal ? 128 + r.signal : r.exit_code;
	t->out = r.out;
	t->out_len = r.out_len;
	t->err = r.err;
	return 0;
}

static int run(struct wr_fullvm_fsctx *x, const char *const *argv, struct tool *t, wr_err *err)
{
	return run_io(x, false, argv, NULL, 0, t, err);
}

/* A tool that prints nothing useful: 0 when it succeeded, else the
 * guest's errno in err. */
static int run_ok(struct wr_fullvm_fsctx *x, const char *op, const char *path,
		  const char *const *argv, wr_err *err)
{
	struct tool t;
	if (run(x, argv, &t, err) < 0)
		return -1;
	int r = t.exit_code == 0 ? 0 : guest_err(err, op, path, t.err);
	tool_free(&t);
	return r;
}

/* ---- stat -------------------------------------------------------------------- */

static bool num(const char *s, long long lo, long long hi, long long *v)
{
	char *end;
	errno = 0;
	long long n = strtoll(s, &end, 10);
	if (errno || end == s || *end || n < lo || n > hi)
		return false;
	*v = n;
	return true;
}

/* One record of STAT_FMT at *p (within end): fills st and *dev; advances. */
static int parse_rec(const char **p, const char *end, struct wr_fs_stat *st, long long *dev)
{
	const char *f[STAT_FIELDS];
	for (int i = 0; i < STAT_FIELDS; i++) {
		const char *z = memchr(*p, 0, (size_t)(end - *p));
		if (z == NULL)
			return -1;
		f[i] = *p;
		*p = z + 1;
	}
	memset(st, 0, sizeof(*st));
	switch (f[0][0] && !f[0][1] ? f[0][0] : '?') {
	case 'f': st->type = WR_FS_FILE; break;
	case 'd': st->type = WR_FS_DIR; break;
	case 'l': st->type = WR_FS_SYMLINK; break;
	case 'p':
	case 'c':
	case 'b':
	case 's':
	case 'D': st->type = WR_FS_OTHER; break;
	default: return -1;
	}
	long long v, mode;
	if (!num(f[1], 0, LLONG_MAX, &v))
		return -1;
	st->size = (uint64_t)v;
	char *e;
	mode = strtoll(f[2], &e, 8);
	if (e == f[2] || *e || mode < 0 || mode > 07777)
		return -1;
	st->mode = (mode_t)mode;
	if (!num(f[3], 0, UINT32_MAX, &v))
		return -1;
	st->uid = (uid_t)v;
	if (!num(f[4], 0, UINT32_MAX, &v))
		return -1;
	st->gid = (gid_t)v;
	/* %T@: seconds.fraction */
	long long sec = 0, ns = 0;
	const char *dot = strchr(f[5], '.');
	char sb[32];
	size_t sl = dot ? (size_t)(dot - f[5]) : strlen(f[5]);
	if (sl == 0 || sl >= sizeof(sb))
		return -1;
	memcpy(sb, f[5], sl);
	sb[sl] = 0;
	if (!num(sb, LLONG_MIN / 1000000000, LLONG_MAX / 1000000000, &sec))
		return -1;
	if (dot) {
		int digits = 0;
		for (const char *q = dot + 1; *q; q++) {
			if (*q < '0' || *q > '9')
				return -1;
			if (digits++ < 9)
				ns = ns * 10 + (*q - '0');
		}
		for (; digits < 9; digits++)
			ns *= 10;
	}
	st->mtime_ns = sec * 1000000000 + (sec < 0 ? -ns : ns);
	if (!num(f[6], 0, LLONG_MAX, dev))
		return -1;
	if (st->type == WR_FS_SYMLINK && (st->symlink_target = strdup(f[7])) == NULL)
		return -1;
	return 0;
}

/* The device of the guest's root, for EXDEV. */
static int root_dev(struct wr_fullvm_fsctx *x, long long *dev, wr_err *err);

/* find's view of g: follow a final symlink (-H) or not (-P). 1 with st
 * filled, 0 when absent (ENOENT/ENOTDIR: *why set), -1 on error. */
static int gstat(struct wr_fullvm_fsctx *x, const char *op, const char *path, const char *g,
		 bool follow, struct wr_fs_stat *st, int *why, wr_err *err)
{
	const char *argv[] = {
	    "/usr/bin/find", follow ? "-H" : "-P", g, "-maxdepth", "0", "-printf", STAT_FMT, NULL};
	/* find takes a path starting with '-' or '(' as an option: g always
	 * starts with '/' (gpath) */
	struct tool t;
	if (run(x, argv, &t, err) < 0)
		return -1;
	int r;
	long long dev = 0, rdev = 0;
	const char *p = t.out;
	if (t.exit_code != 0) {
		int e = errno_of(t.err);
		if (e == ENOENT || e == ENOTDIR) {
			*why = e;
			r = 0;
		} else {
			r = guest_err(err, op, path, t.err);
		}
	} else if (parse_rec(&p, t.out + t.out_len, st, &dev) < 0 || p != t.out + t.out_len) {
		wr_fs_stat_free(st);
		r = wr_err_set(err, EIO, "%s %.*s: the guest's find answered nonsense", op, SHOWN,
			       path);
	} else if (root_dev(x, &rdev, err) < 0) {
		wr_fs_stat_free(st);
		r = -1;
	} else if (dev != rdev && strcmp(g, "/") != 0) {
		wr_fs_stat_free(st);
		r = wr_err_set(err, EXDEV, "%s %.*s: on another filesystem than the root", op,
			       SHOWN, path);
	} else {
		r = 1;
	}
	tool_free(&t);
	return r;
}

static int root_dev(struct wr_fullvm_fsctx *x, long long *dev, wr_err *err)
{
	/* asked once per sandbox: the root's device never changes */
	long long known = __atomic_load_n(&x->root_dev, __ATOMIC_RELAXED);
	if (known > 0) {
		*dev = known;
		return 0;
	}
	const char *argv[] = {"/usr/bin/find", "-P", "/", "-maxdepth", "0", "-printf", "%D", NULL};
	struct tool t;
	if (run(x, argv, &t, err) < 0)
		return -1;
	int r = t.exit_code == 0 && num(t.out, 1, LLONG_MAX, dev)
		    ? 0
		    : wr_err_set(err, EIO, "vm files: the guest's root has no device");
	if (r == 0)
		__atomic_store_n(&x->root_dev, *dev, __ATOMIC_RELAXED);
	tool_free(&t);
	return r;
}

static int r_stat(void *ctx, const char *path, struct wr_fs_stat *st, wr_err *err)
{
	char g[PATH_MAX];
	int why = 0;
	if (gpath("stat", path, g, err) < 0)
		return -1;
	int r = gstat(ctx, "stat", path, g, false, st, &why, err);
	if (r == 0)
		return wr_err_set(err, why, "stat %.*s: %s", SHOWN, path, strerrordesc_np(why));
	return r < 0 ? -1 : 0;
}

static int r_exists(void *ctx, const char *path, bool *exists, wr_err *err)
{
	char g[PATH_MAX];
	int why = 0;
	struct wr_fs_stat st = {0};
	if (gpath("exists", path, g, err) < 0)
		return -1;
	int r = gstat(ctx, "exists", path, g, false, &st, &why, err);
	wr_fs_stat_free(&st);
	if (r < 0 && wr_err_code(*err) == EXDEV) {
		wr_err_free(err); /* it exists, on another filesystem */
		r = 1;
	}
	*exists = r == 1;
	return r < 0 ? -1 : 0;
}

/* ---- read ---------------------------------------------------------------------- */

static void fclose_h(struct wr_fullvm_fsctx *x, json_int_t h)
{
	json_t *a = json_pack("{s:I}", "handle", h);
	wr_err e = NULL;
	if (wr_fullvm_qga_cmd(x->vm, "guest-file-close", a, QGA_MS, NULL, &e) < 0)
		wr_err_free(&e);
	json_decref(a);
}

static int fopen_h(struct wr_fullvm_fsctx *x, const char *op, const char *path, const char *g,
		   const char *mode, json_int_t *h, wr_err *err)
{
	json_t *a = json_pack("{s:s, s:s}", "path", g, "mode", mode), *ret = NULL;
	wr_err e = NULL;
	int r = wr_fullvm_qga_cmd(x->vm, "guest-file-open", a, QGA_MS, &ret, &e);
	json_decref(a);
	if (r < 0) {
		r = guest_err(err, op, path, e ? e->msg : NULL);
		wr_err_free(&e);
		return r;
	}
	r = json_is_integer(ret) ? 0 : wr_err_set(err, EIO, "%s: guest-file-open: no handle", op);
	*h = json_integer_value(ret);
	json_decref(ret);
	return r;
}

/* Delivers n bytes to out_fd (a failed write only stops delivery: the
 * caller still finishes cleanly) or appends them to b. */
static int deliver(int out_fd, struct wr_buf *b, const char *p, size_t n, bool *out_failed,
		   wr_err *err)
{
	if (n && out_fd >= 0 && !*out_failed && wr_write_all(out_fd, p, n) < 0)
		*out_failed = true; /* the client went */
	if (n && out_fd < 0 && wr_buf_append(b, p, n) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	return 0;
}

/* A read as the sandbox user: dd run as that user opens the path, so the
 * guest's kernel resolves it and checks the permission for that user
 * (nothing opened as root is ever handed to the user's side). Slices of
 * USER_CHUNK bytes each (guest-exec's captured output, bounded), one byte
 * past max to tell a larger file; O_NONBLOCK, so a FIFO swapped in after
 * the stat cannot stall the read. 1 when larger than max, 0 when whole. */
static int user_read(struct wr_fullvm_fsctx *x, const char *path, const char *g, uint64_t max,
		     int out_fd, struct wr_buf *b, uint64_t *written, wr_err *err)
{
	bool out_failed = false;
	for (;;) {
		uint64_t left = max - *written;
		uint64_t want = left >= USER_CHUNK ? USER_CHUNK : left + 1;
		char ifp[PATH_MAX + 8], skip[40], count[40];
		snprintf(ifp, sizeof(ifp), "if=%s", g);
		snprintf(skip, sizeof(skip), "skip=%llu", (unsigned long long)*written);
		snprintf(count, sizeof(count), "count=%llu", (unsigned long long)want);
		const char *argv[] = {
		    "/bin/dd",	   ifp,	  "iflag=skip_bytes,count_bytes,fullblock,nonblock",
		    skip,	   count, "bs=65536",
		    "status=none", NULL};
		struct tool t;
		if (run(x, argv, &t, err) < 0)
			return wr_err_wrap(err, "read %.*s", SHOWN, path);
		int r = 0;
		if (t.exit_code != 0)
			r = guest_err(err, "read", path, t.err);
		else if (t.out_len > want)
			r = wr_err_set(err, EIO, "read %.*s: the guest's dd gave more than asked",
				       SHOWN, path);
		size_t take = t.out_len > left ? (size_t)left : t.out_len;
		if (r == 0)
			r = deliver(out_fd, b, t.out, take, &out_failed, err);
		*written += r == 0 ? take : 0;
		bool larger = t.out_len > take, short_read = t.out_len < want;
		tool_free(&t);
		if (r < 0)
			return -1;
		if (larger)
			return 1;
		if (short_read || out_failed)
			return 0;
	}
}

/* Up to max bytes of a regular file to out_fd (or into b): 1 when the
 * file is larger (truncated), 0 when whole. */
static int do_read(struct wr_fullvm_fsctx *x, const char *path, uint64_t max, int out_fd,
		   struct wr_buf *b, uint64_t *written, wr_err *err)
{
	char g[PATH_MAX];
	int why = 0;
	struct wr_fs_stat st = {0};
	*written = 0;
	if (gpath("read", path, g, err) < 0)
		return -1;
	int r = gstat(x, "read", path, g, true, &st, &why, err);
	enum wr_fs_type type = st.type;
	wr_fs_stat_free(&st);
	if (r < 0)
		return -1;
	if (r == 0 || type == WR_FS_SYMLINK) /* absent, or a dangling link */
		return wr_err_set(err, r ? ENOENT : why, "read %.*s: %s", SHOWN, path,
				  strerrordesc_np(r ? ENOENT : why));
	if (type == WR_FS_DIR)
		return wr_err_set(err, EISDIR, "read %.*s: is a directory", SHOWN, path);
	if (type != WR_FS_FILE)
		return wr_err_set(err, EINVAL, "read %.*s: not a regular file", SHOWN, path);
	if (!as_root(x))
		return user_read(x, path, g, max, out_fd, b, written, err);
	json_int_t h;
	if (fopen_h(x, "read", path, g, "r", &h, err) < 0)
		return -1;
	struct wr_buf chunk = {0};
	bool out_failed = false;
	r = 0;
	for (;;) {
		/* one byte past max tells a larger file from one of max bytes */
		uint64_t left = max - *written;
		json_int_t count = left >= IO_CHUNK ? IO_CHUNK : (json_int_t)left + 1;
		json_t *a = json_pack("{s:I, s:I}", "handle", h, "count", count), *ret = NULL;
		int q = wr_fullvm_qga_cmd(x->vm, "guest-file-read", a, QGA_MS, &ret, err);
		json_decref(a);
		if (q < 0) {
			r = wr_err_wrap(err, "read %.*s", SHOWN, path);
			break;
		}
		const char *s = json_string_value(json_object_get(ret, "buf-b64"));
		bool eof = json_is_true(json_object_get(ret, "eof"));
		bool more = false;
		chunk.len = 0;
		int d = s ? wr_qga_unb64(s, &chunk, (size_t)count, &more) : -EBADMSG;
		json_decref(ret);
		if (d < 0 || more) {
			r = wr_err_set(err, EIO, "read %.*s: the guest's data is malformed", SHOWN,
				       path);
			break;
		}
		size_t take = chunk.len > left ? (size_t)left : chunk.len;
		if (take && out_fd >= 0 && !out_failed && wr_write_all(out_fd, chunk.p, take) < 0)
			out_failed = true; /* the client went: still close the handle */
		if (take && out_fd < 0 && wr_buf_append(b, chunk.p, take) < 0) {
			r = wr_err_set(err, ENOMEM, "out of memory");
			break;
		}
		*written += take;
		if (chunk.len > take) {
			r = 1; /* more than max */
			break;
		}
		if (eof || chunk.len == 0 || out_failed)
			break;
	}
	free(chunk.p);
	fclose_h(x, h);
	return r;
}

static int r_read(void *ctx, const char *path, uint64_t max, char **data, size_t *len,
		  bool *truncated, wr_err *err)
{
	struct wr_buf b = {0};
	uint64_t w = 0;
	int r = do_read(ctx, path, max, -1, &b, &w, err);
	if (r >= 0 && wr_buf_append(&b, "", 1) < 0)
		r = wr_err_set(err, ENOMEM, "out of memory");
	if (r < 0) {
		free(b.p);
		return -1;
	}
	*data = b.p;
	*len = b.len - 1;
	*truncated = r == 1;
	return 0;
}

static int r_read_to_fd(void *ctx, const char *path, int out_fd, uint64_t max, uint64_t *written,
			wr_err *err)
{
	return do_read(ctx, path, max, out_fd, NULL, written, err);
}

/* ---- write ----------------------------------------------------------------------- */

static int r_mkdir(void *ctx, const char *path, mode_t mode, bool parents, wr_err *err);

struct wsrc {
	const char *data;
	size_t len;
	int fd;
	uint64_t max;
};

/* The next piece of the source, at most cap bytes: n = 0 at its end. */
static int next_piece(const struct wsrc *src, uint64_t total, char *buf, size_t cap, const char **p,
		      size_t *n, const char *path, wr_err *err)
{
	if (src->fd < 0) {
		*n = src->len - total > cap ? cap : (size_t)(src->len - total);
		*p = src->data + total;
	} else {
		size_t got = 0;
		while (got < cap) {
			ssize_t k = read(src->fd, buf + got, cap - got);
			if (k < 0 && errno == EINTR)
				continue;
			if (k < 0)
				return wr_err_sys(err, "write %.*s: input", SHOWN, path);
			if (k == 0)
				break;
			got += (size_t)k;
		}
		*n = got;
		*p = buf;
	}
	if (total + *n > src->max)
		return wr_err_set(err, EFBIG, "write %.*s: over %llu bytes", SHOWN, path,
				  (unsigned long long)src->max);
	return 0;
}

/* Root: the bytes into tmp through guest-file-open/write/close. */
static int root_copy(struct wr_fullvm_fsctx *x, const char *path, const char *tmp,
		     const struct wsrc *src, wr_err *err)
{
	json_int_t h;
	if (fopen_h(x, "write", path, tmp, "w", &h, err) < 0)
		return -1;
	char *buf = src->fd >= 0 ? malloc(IO_CHUNK) : NULL;
	uint64_t total = 0;
	int r = src->fd >= 0 && buf == NULL ? wr_err_set(err, ENOMEM, "out of memory") : 0;
	while (r == 0) {
		const char *p;
		size_t n;
		if ((r = next_piece(src, total, buf, IO_CHUNK, &p, &n, path, err)) < 0 || n == 0)
			break;
		char *b64 = wr_qga_b64(p, n);
		json_t *a = b64 ? json_pack("{s:I, s:s}", "handle", h, "buf-b64", b64) : NULL;
		free(b64);
		wr_err e = NULL;
		if (a == NULL)
			r = wr_err_set(err, ENOMEM, "out of memory");
		else if (wr_fullvm_qga_cmd(x->vm, "guest-file-write", a, QGA_MS, NULL, &e) < 0)
			r = guest_err(err, "write", path, e ? e->msg : NULL);
		wr_err_free(&e);
		json_decref(a);
		total += n;
	}
	free(buf);
	/* close flushes: a full disk may show only here */
	json_t *a = json_pack("{s:I}", "handle", h);
	wr_err e = NULL;
	if (wr_fullvm_qga_cmd(x->vm, "guest-file-close", a, QGA_MS, NULL, &e) < 0 && r == 0)
		r = guest_err(err, "write", path, e ? e->msg : NULL);
	wr_err_free(&e);
	json_decref(a);
	return r;
}

/* Another user: dd run as that user makes tmp (O_EXCL: never through a
 * name someone else put there, mode 0600 until the chmod) and appends the
 * bytes given as its stdin, USER_CHUNK at a time; the file is the user's
 * from the start, made only where the user may write. */
static int user_copy(struct wr_fullvm_fsctx *x, const char *path, const char *tmp,
		     const struct wsrc *src, wr_err *err)
{
	char *buf = src->fd >= 0 ? malloc(USER_CHUNK) : NULL;
	if (src->fd >= 0 && buf == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	char ofp[PATH_MAX + 72];
	snprintf(ofp, sizeof(ofp), "of=%s", tmp);
	uint64_t total = 0;
	int r = 0;
	for (bool first = true; r == 0; first = false) {
		const char *p;
		size_t n;
		if ((r = next_piece(src, total, buf, USER_CHUNK, &p, &n, path, err)) < 0 ||
		    (n == 0 && !first))
			break;
		const char *argv[] = {"/bin/sh",
				      "-c",
				      "umask 077 && exec \"$@\"",
				      "sh",
				      "/bin/dd",
				      ofp,
				      "bs=65536",
				      "status=none",
				      first ? "conv=excl" : "conv=notrunc",
				      first ? (n ? NULL : "count=0") : "oflag=append",
				      NULL};
		struct tool t;
		if ((r = run_io(x, false, argv, p, n, &t, err)) < 0)
			break;
		if (t.exit_code != 0)
			r = guest_err(err, "write", path, t.err);
		tool_free(&t);
		total += n;
		if (n == 0)
			break;
	}
	free(buf);
	return r;
}

static int do_write(struct wr_fullvm_fsctx *x, const char *path, const struct wsrc *src,
		    mode_t mode, bool parents, wr_err *err)
{
	char g[PATH_MAX], dir[PATH_MAX], base[NAME_MAX + 1];
	if (gpath("write", path, g, err) < 0 || last_ok("write", path, g, err) < 0)
		return -1;
	split(g, dir, base);
	struct wr_fs_stat st = {0};
	int why = 0;
	int r = gstat(x, "write", path, g, false, &st, &why, err);
	enum wr_fs_type type = st.type;
	mode_t old = st.mode;
	wr_fs_stat_free(&st);
	if (r < 0)
		return -1;
	if (r == 1 && type == WR_FS_DIR)
		return wr_err_set(err, EISDIR, "write %.*s: is a directory", SHOWN, path);
	if (r == 1 && type == WR_FS_FILE)
		mode = old & ~(mode_t)06000; /* an existing file keeps its mode */
	if (parents && r_mkdir(x, dir, 0755, true, err) < 0)
		return wr_err_wrap(err, "write %.*s", SHOWN, path);
	unsigned char rnd[4] = {0};
	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
		return wr_err_sys(err, "getrandom");
	char tmp[PATH_MAX + 64];
	int tl = snprintf(tmp, sizeof(tmp), "%s/.%.*s.wr-tmp-%02x%02x%02x%02x",
			  strcmp(dir, "/") ? dir : "", NAME_MAX - 20, base, rnd[0], rnd[1], rnd[2],
			  rnd[3]);
	if (tl >= PATH_MAX)
		return wr_err_set(err, ENAMETOOLONG, "write %.*s: path too long", SHOWN, path);
	/* from here on, any failure removes the temp file */
	r = as_root(x) ? root_copy(x, path, tmp, src, err) : user_copy(x, path, tmp, src, err);
	char ms[8];
	snprintf(ms, sizeof(ms), "%04o", (unsigned)(mode & 07777));
	const char *chmod_argv[] = {"/bin/chmod", ms, "--", tmp, NULL};
	const char *mv_argv[] = {"/bin/mv", "-fT", "--", tmp, g, NULL};
	if (r == 0)
		r = run_ok(x, "write", path, chmod_argv, err);
	if (r == 0)
		r = run_ok(x, "write", path, mv_argv, err);
	if (r < 0) {
		const char *rm_argv[] = {"/bin/rm", "-f", "--", tmp, NULL};
		wr_err ignored = NULL;
		run_ok(x, "write", path, rm_argv, &ignored);
		wr_err_free(&ignored);
	}
	return r < 0 ? -1 : 0;
}

static int r_write(void *ctx, const char *path, const void *data, size_t len, mode_t mode,
		   bool parents, wr_err *err)
{
	struct wsrc s = {.data = data, .len = len, .fd = -1, .max = len};
	return do_write(ctx, path, &s, mode, parents, err);
}

static int r_write_from_fd(void *ctx, const char *path, int in_fd, uint64_t max, mode_t mode,
			   bool parents, wr_err *err)
{
	if (in_fd < 0)
		return wr_err_set(err, EBADF, "write %.*s: no input", SHOWN, path);
	struct wsrc s = {.fd = in_fd, .max = max};
	return do_write(ctx, path, &s, mode, parents, err);
}

/* ---- the tree ------------------------------------------------------------------- */

static int r_list(void *ctx, const char *path, int depth, wr_fs_list_cb cb, void *cbctx,
		  wr_err *err)
{
	struct wr_fullvm_fsctx *x = ctx;
	char g[PATH_MAX], ds[16];
	if (gpath("list", path, g, err) < 0)
		return -1;
	if (depth < 1 || depth > WR_FS_LIST_MAX_DEPTH)
		return wr_err_set(err, EINVAL, "list %.*s: depth must be 1 to %d", SHOWN, path,
				  WR_FS_LIST_MAX_DEPTH);
	struct wr_fs_stat st = {0};
	int why = 0;
	int r = gstat(x, "list", path, g, true, &st, &why, err);
	enum wr_fs_type type = st.type;
	wr_fs_stat_free(&st);
	if (r < 0)
		return -1;
	if (r == 0)
		return wr_err_set(err, why, "list %.*s: %s", SHOWN, path, strerrordesc_np(why));
	if (type != WR_FS_DIR)
		return wr_err_set(err, ENOTDIR, "list %.*s: not a directory", SHOWN, path);
	snprintf(ds, sizeof(ds), "%d", depth);
	const char *argv[] = {
	    "/usr/bin/find",  "-H", g, "-mindepth", "1", "-maxdepth", ds, "-xdev", "-printf",
	    "%P\\0" STAT_FMT, NULL};
	struct tool t;
	if (run(x, argv, &t, err) < 0)
		return -1;
	if (t.exit_code != 0 && t.out_len == 0) {
		r = guest_err(err, "list", path, t.err);
		tool_free(&t);
		return r;
	}
	const char *p = t.out, *end = t.out + t.out_len;
	size_t n = 0;
	r = 0;
	while (p < end && r == 0) {
		const char *z = memchr(p, 0, (size_t)(end - p));
		long long dev;
		if (z == NULL || z == p || (size_t)(z - p) >= PATH_MAX) {
			r = wr_err_set(err, EIO, "list %.*s: the guest's find answered nonsense",
				       SHOWN, path);
			break;
		}
		const char *rel = p;
		p = z + 1;
		if (parse_rec(&p, end, &st, &dev) < 0) {
			r = wr_err_set(err, EIO, "list %.*s: the guest's find answered nonsense",
				       SHOWN, path);
			break;
		}
		if (++n > WR_FS_LIST_MAX_ENTRIES)
			r = wr_err_set(err, E2BIG, "list %.*s: more than %d entries", SHOWN, path,
				       WR_FS_LIST_MAX_ENTRIES);
		else
			r = cb(cbctx, rel, &st);
		wr_fs_stat_free(&st);
		if (r < 0)
			r = wr_err_set(err, -r, "list %.*s", SHOWN, path);
	}
	tool_free(&t);
	return r;
}

static int r_mkdir(void *ctx, const char *path, mode_t mode, bool parents, wr_err *err)
{
	struct wr_fullvm_fsctx *x = ctx;
	char g[PATH_MAX], ms[8];
	if (gpath("mkdir", path, g, err) < 0)
		return -1;
	if (!parents && last_ok("mkdir", path, g, err) < 0)
		return -1;
	struct wr_fs_stat st = {0};
	int why = 0;
	int r = gstat(x, "mkdir", path, g, parents, &st, &why, err);
	enum wr_fs_type type = st.type;
	wr_fs_stat_free(&st);
	if (r < 0)
		return -1;
	if (r == 1 && (!parents || type != WR_FS_DIR))
		return wr_err_set(err, EEXIST, "mkdir %.*s: %s", SHOWN, path,
				  strerrordesc_np(EEXIST));
	if (r == 1)
		return 0;
	snprintf(ms, sizeof(ms), "%04o", (unsigned)(mode & 07777));
	/* with -p, -m applies to the last directory only; the parents made
	 * get 0755 (the guest's umask 022), as mkdir -p -m does */
	const char *argv_p[] = {"/bin/mkdir", "-p", "-m", ms, "--", g, NULL};
	const char *argv_1[] = {"/bin/mkdir", "-m", ms, "--", g, NULL};
	return run_ok(x, "mkdir", path, parents ? argv_p : argv_1, err);
}

static int r_remove(void *ctx, const char *path, bool recursive, wr_err *err)
{
	struct wr_fullvm_fsctx *x = ctx;
	char g[PATH_MAX];
	if (gpath("remove", path, g, err) < 0 || last_ok("remove", path, g, err) < 0)
		return -1;
	struct wr_fs_stat st = {0};
	int why = 0;
	int r = gstat(x, "remove", path, g, false, &st, &why, err);
	enum wr_fs_type type = st.type;
	wr_fs_stat_free(&st);
	if (r < 0)
		return -1;
	if (r == 0)
		return wr_err_set(err, why, "remove %.*s: %s", SHOWN, path, strerrordesc_np(why));
	if (type == WR_FS_DIR && !recursive) {
		const char *argv[] = {"/bin/rmdir", "--", g, NULL};
		return run_ok(x, "remove", path, argv, err);
	}
	const char *argv[] = {"/bin/rm", "-r", "--one-file-system", "--", g, NULL};
	return run_ok(x, "remove", path, argv, err);
}

static int r_rename(void *ctx, const char *from, const char *to, wr_err *err)
{
	struct wr_fullvm_fsctx *x = ctx;
	char gf[PATH_MAX], gt[PATH_MAX];
	if (gpath("rename", from, gf, err) < 0 || last_ok("rename", from, gf, err) < 0 ||
	    gpath("rename", to, gt, err) < 0 || last_ok("rename", to, gt, err) < 0)
		return -1;
	struct wr_fs_stat st = {0};
	int why = 0;
	int r = gstat(x, "rename", from, gf, false, &st, &why, err);
	wr_fs_stat_free(&st);
	if (r < 0)
		return -1;
	if (r == 0)
		return wr_err_set(err, why, "rename %.*s: %s", SHOWN, from, strerrordesc_np(why));
	/* -T: to is the new name itself, never a directory to move into */
	const char *argv[] = {"/bin/mv", "-fT", "--", gf, gt, NULL};
	return run_ok(x, "rename", from, argv, err);
}

static int r_symlink(void *ctx, const char *path, const char *target, wr_err *err)
{
	struct wr_fullvm_fsctx *x = ctx;
	char g[PATH_MAX], dir[PATH_MAX], base[NAME_MAX + 1];
	if (gpath("symlink", path, g, err) < 0 || last_ok("symlink", path, g, err) < 0)
		return -1;
	if (target == NULL || *target == 0 || strlen(target) >= PATH_MAX)
		return wr_err_set(err, EINVAL, "symlink %.*s: bad target", SHOWN, path);
	split(g, dir, base);
	if (r_mkdir(x, dir, 0755, true, err) < 0)
		return -1;
	const char *argv[] = {"/bin/ln", "-sfnT", "--", target, g, NULL};
	return run_ok(x, "symlink", path, argv, err);
}

static const struct wr_fs_remote g_remote = {
    .stat = r_stat,
    .exists = r_exists,
    .read = r_read,
    .read_to_fd = r_read_to_fd,
    .write = r_write,
    .write_from_fd = r_write_from_fd,
    .list = r_list,
    .mkdir = r_mkdir,
    .remove = r_remove,
    .rename = r_rename,
    .symlink = r_symlink,
};

void wr_fullvm_fs_view(struct wr_fullvm_fsctx *ctx, struct wr_fs *out)
{
	*out = (struct wr_fs){.root_fd = -1, .remote = &g_remote, .remote_ctx = ctx};
}
