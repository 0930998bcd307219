/* Image store: open, records, names and holders (SQLite, WAL).
 *
 * Write ordering (crash safety), relied upon by open's recovery:
 *   1. a blob is complete, fsynced and verified in tmp/<stage>/ first;
 *   2. inside one write transaction: rename it into blobs/ (NOREPLACE),
 *      fsync blobs/, write the manifest (tmp + rename), insert the record;
 *   3. commit. A crash before 3 leaves a blob (and maybe a manifest) with no
 *      record: an orphan that open and gc remove. Never a record without
 *      its blob: the record is the last thing written.
 * Deletion is the reverse: mark `deleting` (committed, only with no
 * holder), unlink blob and manifest, delete the record. A crash between
 * leaves a `deleting` record that open finishes removing.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "image/store_internal.h"

#define SCHEMA                                                                                     \
	"CREATE TABLE IF NOT EXISTS images(digest TEXT PRIMARY KEY, size INTEGER NOT NULL,"        \
	" source TEXT NOT NULL, created INTEGER NOT NULL, last_used INTEGER NOT NULL DEFAULT 0,"   \
	" pinned INTEGER NOT NULL DEFAULT 0, complete INTEGER NOT NULL DEFAULT 1,"                 \
	" deleting INTEGER NOT NULL DEFAULT 0, meta TEXT NOT NULL);"                               \
	"CREATE TABLE IF NOT EXISTS refs(name TEXT PRIMARY KEY, digest TEXT NOT NULL);"            \
	"CREATE INDEX IF NOT EXISTS refs_digest ON refs(digest);"                                  \
	"CREATE TABLE IF NOT EXISTS holders(digest TEXT NOT NULL, holder TEXT NOT NULL,"           \
	" since INTEGER NOT NULL, PRIMARY KEY(digest, holder));"

int wri_db_err(struct wr_image_store *s, const char *what, wr_err *err)
{
	int c = sqlite3_errcode(s->db);
	int e = (c == SQLITE_BUSY || c == SQLITE_LOCKED) ? EBUSY : c == SQLITE_FULL ? ENOSPC : EIO;
	return wr_err_set(err, e, "%s: %s", what, sqlite3_errmsg(s->db));
}

int wri_db_exec(struct wr_image_store *s, const char *sql, wr_err *err)
{
	if (sqlite3_exec(s->db, sql, NULL, NULL, NULL) != SQLITE_OK)
		return wri_db_err(s, "image db", err);
	return 0;
}

int wri_db_begin(struct wr_image_store *s, wr_err *err)
{
	return wri_db_exec(s, "BEGIN IMMEDIATE", err);
}

void wri_db_rollback(struct wr_image_store *s)
{
	sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

static sqlite3_stmt *prep(struct wr_image_store *s, const char *sql, wr_err *err)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK) {
		wri_db_err(s, "image db", err);
		return NULL;
	}
	return st;
}
static void finalizep(sqlite3_stmt **st)
{
	if (*st)
		sqlite3_finalize(*st);
}
#define _cleanup_stmt_ _cleanup_(finalizep)

/* Run a statement with text parameters to completion. */
static int run(struct wr_image_store *s, const char *sql, int n, const char **args, wr_err *err)
{
	_cleanup_stmt_ sqlite3_stmt *st = prep(s, sql, err);
	if (st == NULL)
		return -EIO;
	for (int i = 0; i < n; i++)
		sqlite3_bind_text(st, i + 1, args[i], -1, SQLITE_STATIC);
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW)
		;
	if (rc != SQLITE_DONE)
		return wri_db_err(s, "image db", err);
	return sqlite3_changes(s->db);
}

static const char *hex_of(const char *digest)
{
	return digest + 7;
}

/* ---- open / close ---------------------------------------------------- */

static int open_dir_at(int dirfd, const char *name, int *out, wr_err *err)
{
	if (mkdirat(dirfd, name, 0700) < 0 && errno != EEXIST)
		return wr_err_sys(err, "mkdir %s", name);
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return wr_err_sys(err, "open %s", name);
	*out = fd;
	return 0;
}

/* Finish deletions a crash interrupted; drop holders of vanished images. */
static int recover(struct wr_image_store *s, wr_err *err)
{
	_cleanup_stmt_ sqlite3_stmt *st =
	    prep(s, "SELECT digest FROM images WHERE deleting=1", err);
	if (st == NULL)
		return -EIO;
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *d = (const char *)sqlite3_column_text(st, 0);
		char man[80];
		snprintf(man, sizeof(man), "%s.json", hex_of(d));
		unlinkat(s->blobsfd, hex_of(d), 0);
		unlinkat(s->mansfd, man, 0);
	}
	return wri_db_exec(s,
			   "DELETE FROM refs WHERE digest IN (SELECT digest FROM images WHERE "
			   "deleting=1); DELETE FROM holders WHERE digest IN (SELECT digest FROM "
			   "images WHERE deleting=1); DELETE FROM images WHERE deleting=1;",
			   err);
}

int wr_image_store_open(const struct wr_image_store_opts *opts, struct wr_image_store **out,
			wr_err *err)
{
	if (opts == NULL || opts->dir == NULL || opts->dir[0] != '/')
		return wr_err_field(err, "dir", "image store: dir must be an absolute path");
	struct wr_image_store *s = calloc(1, sizeof(*s));
	if (s == NULL)
		return wr_err_set(err, ENOMEM, "image store: out of memory");
	s->dirfd = s->blobsfd = s->mansfd = s->tmpfd = -1;
	s->o = *opts;
	s->dir = strdup(opts->dir);
	s->o.dir = s->dir;
	if (s->o.high_water_pct == 0 || s->o.high_water_pct > 100)
		s->o.high_water_pct = 90;
	if (s->o.low_water_pct == 0 || s->o.low_water_pct > s->o.high_water_pct)
		s->o.low_water_pct = s->o.high_water_pct > 10 ? s->o.high_water_pct - 10 : 1;
	if (s->o.grace_sec < 0)
		s->o.grace_sec = 0;
	if (s->o.max_entries == 0)
		s->o.max_entries = 1000000;
	if (s->o.max_unpacked_bytes == 0)
		s->o.max_unpacked_bytes = 64ull << 30;
	pthread_mutex_init(&s->lock, NULL);
	pthread_mutex_init(&s->gc_lock, NULL);
	int r;
	_cleanup_close_ int blobs = -1;
	if (s->dir == NULL) {
		r = wr_err_set(err, ENOMEM, "out of memory");
		goto fail;
	}
	if ((r = wr_mkdir_p(s->dir, 0700, err)) < 0)
		goto fail;
	s->dirfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->dirfd < 0) {
		r = wr_err_sys(err, "open %s", s->dir);
		goto fail;
	}
	if ((r = open_dir_at(s->dirfd, "blobs", &blobs, err)) < 0 ||
	    (r = open_dir_at(blobs, "sha256", &s->blobsfd, err)) < 0 ||
	    (r = open_dir_at(s->dirfd, "manifests", &s->mansfd, err)) < 0 ||
	    (r = open_dir_at(s->dirfd, "tmp", &s->tmpfd, err)) < 0)
		goto fail;
	_cleanup_free_ char *dbpath = NULL;
	if (asprintf(&dbpath, "%s/store.db", s->dir) < 0) {
		r = wr_err_set(err, ENOMEM, "out of memory");
		goto fail;
	}
	if (sqlite3_open_v2(dbpath, &s->db,
			    SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX |
				SQLITE_OPEN_EXRESCODE,
			    NULL) != SQLITE_OK) {
		r = wr_err_set(err, EIO, "open %s: %s", dbpath,
			       s->db ? sqlite3_errmsg(s->db) : "out of memory");
		goto fail;
	}
	sqlite3_busy_timeout(s->db, 30000);
	if ((r = wri_db_exec(s, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", err)) < 0 ||
	    (r = wri_db_exec(s, SCHEMA, err)) < 0 || (r = recover(s, err)) < 0)
		goto fail;
	wri_stage_sweep(s);
	*out = s;
	return 0;
fail:
	wr_err_wrap(err, "image store %s", opts->dir);
	wr_image_store_close(&s);
	return r;
}

void wr_image_store_close(struct wr_image_store **sp)
{
	struct wr_image_store *s = *sp;
	if (s == NULL)
		return;
	if (s->db)
		sqlite3_close_v2(s->db);
	for (int *fd = &s->dirfd; fd <= &s->tmpfd; fd++)
		if (*fd >= 0)
			close(*fd);
	pthread_mutex_destroy(&s->lock);
	pthread_mutex_destroy(&s->gc_lock);
	free(s->dir);
	free(s);
	*sp = NULL;
}

const char *wr_image_store_dir(const struct wr_image_store *s)
{
	return s->dir;
}

/* ---- records ----------------------------------------------------------- */

static void free_strv(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

void wr_image_free(struct wr_image **imgp)
{
	struct wr_image *img = *imgp;
	if (img == NULL)
		return;
	free(img->source);
	free_strv(img->refs, img->n_refs);
	free_strv(img->layers, img->n_layers);
	wri_config_clear(&img->config);
	free(img->remote.reference);
	free(img->remote.blob_digest);
	free(img);
	*imgp = NULL;
}

static int strv_from_json(json_t *a, char ***out, size_t *n)
{
	*out = NULL;
	*n = 0;
	if (!json_is_array(a) || json_array_size(a) == 0)
		return 0;
	char **v = calloc(json_array_size(a), sizeof(*v));
	if (v == NULL)
		return -ENOMEM;
	size_t i;
	json_t *e;
	json_array_foreach(a, i, e)
	{
		if (!json_is_string(e))
			continue;
		if ((v[*n] = strdup(json_string_value(e))) == NULL) {
			free_strv(v, *n);
			return -ENOMEM;
		}
		(*n)++;
	}
	*out = v;
	return 0;
}

/* The caller holds s->lock. */
static int load_locked(struct wr_image_store *s, const char *digest, struct wr_image **out,
		       wr_err *err)
{
	_cleanup_stmt_ sqlite3_stmt *st =
	    prep(s,
		 "SELECT size, source, created, last_used, pinned, complete, deleting, meta,"
		 " (SELECT count(*) FROM holders h WHERE h.digest=images.digest)"
		 " FROM images WHERE digest=?",
		 err);
	if (st == NULL)
		return -EIO;
	sqlite3_bind_text(st, 1, digest, -1, SQLITE_STATIC);
	int rc = sqlite3_step(st);
	if (rc == SQLITE_DONE)
		return wr_err_set(err, ENOENT, "image %s: no such image", digest);
	if (rc != SQLITE_ROW)
		return wri_db_err(s, "image db", err);
	struct wr_image *img = calloc(1, sizeof(*img));
	if (img == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	snprintf(img->digest, sizeof(img->digest), "%s", digest);
	img->size = (uint64_t)sqlite3_column_int64(st, 0);
	img->source = strdup((const char *)sqlite3_column_text(st, 1));
	img->created = sqlite3_column_int64(st, 2);
	img->last_used = sqlite3_column_int64(st, 3);
	img->pinned = sqlite3_column_int(st, 4) != 0;
	img->complete = sqlite3_column_int(st, 5) != 0;
	img->deleting = sqlite3_column_int(st, 6) != 0;
	img->holders = (unsigned)sqlite3_column_int(st, 8);
	json_t *meta = json_loads((const char *)sqlite3_column_text(st, 7), 0, NULL);
	int r = 0;
	if (meta) {
		r = wri_config_from_json(json_object_get(meta, "config"), &img->config, err);
		if (r == 0 && strv_from_json(json_object_get(meta, "layers"), &img->layers,
					     &img->n_layers) < 0)
			r = wr_err_set(err, ENOMEM, "out of memory");
		/* No "kind": a manifest written before vm-disk images existed. */
		json_t *disk = json_object_get(meta, "disk");
		if (json_is_object(disk)) {
			const char *f = json_string_value(json_object_get(disk, "format"));
			img->kind = WR_IMAGE_KIND_VM_DISK;
			snprintf(img->disk_format, sizeof(img->disk_format), "%s", f ? f : "raw");
			img->virtual_size =
			    (uint64_t)json_integer_value(json_object_get(disk, "virtual_size"));
			const char *fw = json_string_value(json_object_get(disk, "firmware"));
			snprintf(img->firmware, sizeof(img->firmware), "%s",
				 fw && wr_image_firmware_ok(fw) ? fw : "bios");
		}
		json_t *rem = json_object_get(meta, "remote");
		if (r == 0 && json_is_object(rem)) {
			const char *ref = json_string_value(json_object_get(rem, "reference"));
			const char *bd = json_string_value(json_object_get(rem, "blob_digest"));
			img->remote.reference = ref ? strdup(ref) : NULL;
			img->remote.blob_digest = bd ? strdup(bd) : NULL;
			img->remote.size =
			    (uint64_t)json_integer_value(json_object_get(rem, "size"));
		}
		json_decref(meta);
	}
	if (r < 0) {
		wr_image_free(&img);
		return r;
	}
	_cleanup_stmt_ sqlite3_stmt *rs =
	    prep(s, "SELECT name FROM refs WHERE digest=? ORDER BY name", err);
	if (rs == NULL) {
		wr_image_free(&img);
		return -EIO;
	}
	sqlite3_bind_text(rs, 1, digest, -1, SQLITE_STATIC);
	size_t cap = 0;
	while (sqlite3_step(rs) == SQLITE_ROW) {
		if (img->n_refs == cap) {
			cap = cap ? cap * 2 : 4;
			char **nv = realloc(img->refs, cap * sizeof(*nv));
			if (nv == NULL) {
				wr_image_free(&img);
				return wr_err_set(err, ENOMEM, "out of memory");
			}
			img->refs = nv;
		}
		img->refs[img->n_refs++] = strdup((const char *)sqlite3_column_text(rs, 0));
	}
	*out = img;
	return 0;
}

int wri_load(struct wr_image_store *s, const char *digest, struct wr_image **out, wr_err *err)
{
	pthread_mutex_lock(&s->lock);
	int r = load_locked(s, digest, out, err);
	pthread_mutex_unlock(&s->lock);
	return r;
}

static int write_manifest(struct wr_image_store *s, const struct wri_new *n, int64_t now,
			  char **meta_out, wr_err *err)
{
	json_t *meta = json_pack(
	    "{s:i, s:s, s:I, s:s, s:I, s:O?, s:O?, s:O?, s:s, s:O?}", "schemaVersion", 1, "digest",
	    n->digest, "size", (json_int_t)n->size, "source", n->source, "created", (json_int_t)now,
	    "config", n->config, "layers", n->layers, "remote", n->remote, "kind",
	    wr_image_kind_name(n->disk ? WR_IMAGE_KIND_VM_DISK : WR_IMAGE_KIND_ROOTFS), "disk",
	    n->disk);
	if (meta == NULL)
		return wr_err_set(err, ENOMEM, "manifest: out of memory");
	char *text = json_dumps(meta, JSON_SORT_KEYS | JSON_INDENT(1));
	json_decref(meta);
	if (text == NULL)
		return wr_err_set(err, ENOMEM, "manifest: out of memory");
	char tmp[100], name[80];
	snprintf(name, sizeof(name), "%s.json", hex_of(n->digest));
	snprintf(tmp, sizeof(tmp), ".%s.%d", name, (int)gettid());
	_cleanup_close_ int fd =
	    openat(s->mansfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0 || wr_write_all(fd, text, strlen(text)) < 0 || fsync(fd) < 0 ||
	    renameat(s->mansfd, tmp, s->mansfd, name) < 0) {
		int r = wr_err_sys(err, "manifest %s", name);
		unlinkat(s->mansfd, tmp, 0);
		free(text);
		return r;
	}
	*meta_out = text;
	return 0;
}

int wri_commit_image(struct wr_image_store *s, const struct wri_new *n, const char *ref,
		     struct wr_image **out, wr_err *err)
{
	_cleanup_free_ char *canon = NULL;
	int r;
	if (ref && (r = wri_ref_canon(ref, &canon, err)) < 0)
		return r;
	for (int tries = 0;; tries++) {
		pthread_mutex_lock(&s->lock);
		if ((r = wri_db_begin(s, err)) < 0) {
			pthread_mutex_unlock(&s->lock);
			return r;
		}
		_cleanup_stmt_ sqlite3_stmt *st =
		    prep(s, "SELECT deleting, complete FROM images WHERE digest=?", err);
		if (st == NULL) {
			r = -EIO;
			goto abort;
		}
		sqlite3_bind_text(st, 1, n->digest, -1, SQLITE_STATIC);
		int rc = sqlite3_step(st);
		bool exists = rc == SQLITE_ROW;
		bool deleting = exists && sqlite3_column_int(st, 0);
		bool was_complete = exists && sqlite3_column_int(st, 1);
		sqlite3_finalize(steal_ptr(&st));
		if (deleting) {
			/* gc is unlinking this digest: wait until its record is
			 * gone, then add ours as new. */
			wri_db_rollback(s);
			pthread_mutex_unlock(&s->lock);
			if (tries > 600)
				return wr_err_set(err, EBUSY, "image %s: being reclaimed",
						  n->digest);
			struct timespec ts = {0, 50 * 1000 * 1000};
			nanosleep(&ts, NULL);
			continue;
		}
		if (n->tmp_name && !was_complete) {
			/* No record (or a remote one): the blob is ours to
			 * place. EEXIST: another importer of the same bytes
			 * (or an orphan, identical by digest) got there. */
			if (renameat2(n->stagefd, n->tmp_name, s->blobsfd, hex_of(n->digest),
				      RENAME_NOREPLACE) < 0 &&
			    errno != EEXIST) {
				r = wr_err_sys(err, "store blob %s", n->digest);
				goto abort;
			}
			fsync(s->blobsfd);
		}
		if (!exists) {
			_cleanup_free_ char *meta = NULL;
			int64_t now = time(NULL);
			if ((r = write_manifest(s, n, now, &meta, err)) < 0)
				goto abort;
			st = prep(s,
				  "INSERT INTO images(digest,size,source,created,complete,meta)"
				  " VALUES(?,?,?,?,?,?)",
				  err);
			if (st == NULL) {
				r = -EIO;
				goto abort;
			}
			sqlite3_bind_text(st, 1, n->digest, -1, SQLITE_STATIC);
			sqlite3_bind_int64(st, 2, (sqlite3_int64)n->size);
			sqlite3_bind_text(st, 3, n->source, -1, SQLITE_STATIC);
			sqlite3_bind_int64(st, 4, now);
			sqlite3_bind_int(st, 5, n->complete);
			sqlite3_bind_text(st, 6, meta, -1, SQLITE_STATIC);
			rc = sqlite3_step(st);
			sqlite3_finalize(steal_ptr(&st));
			if (rc != SQLITE_DONE) {
				r = wri_db_err(s, "insert image", err);
				goto abort;
			}
		} else if (n->tmp_name && !was_complete) {
			const char *a[] = {n->digest};
			if ((r = run(s, "UPDATE images SET complete=1 WHERE digest=?", 1, a, err)) <
			    0)
				goto abort;
		}
		if (canon) {
			const char *a[] = {canon, n->digest};
			if ((r = run(s, "INSERT OR REPLACE INTO refs(name,digest) VALUES(?,?)", 2,
				     a, err)) < 0)
				goto abort;
		}
		if ((r = wri_db_exec(s, "COMMIT", err)) < 0)
			goto abort;
		r = out ? load_locked(s, n->digest, out, err) : 0;
		pthread_mutex_unlock(&s->lock);
		return r;
	abort:
		wri_db_rollback(s);
		pthread_mutex_unlock(&s->lock);
		return r;
	}
}

/* ---- names ------------------------------------------------------------- */

/* ref -> digest, the caller holds s->lock. */
static int resolve_locked(struct wr_image_store *s, const char *ref, char digest[72], wr_err *err)
{
	if (ref == NULL || ref[0] == '\0')
		return wr_err_field(err, "ref", "ref: must not be empty");
	const char *at = strchr(ref, '@');
	const char *d = at ? at + 1 : ref;
	if (at || strncmp(ref, "sha256:", 7) == 0) {
		size_t hl = strlen(d) - (strncmp(d, "sha256:", 7) == 0 ? 7 : strlen(d));
		if (strncmp(d, "sha256:", 7) != 0 || hl < 12 || hl > 64 ||
		    strspn(d + 7, "0123456789abcdef") != hl)
			return wr_err_field(err, "ref",
					    "ref '%s': a digest is sha256: and 12 to 64 lowercase "
					    "hex digits",
					    ref);
		if (at) {
			_cleanup_free_ char *name = strndup(ref, (size_t)(at - ref));
			_cleanup_free_ char *canon = NULL;
			int r = wri_ref_canon(name, &canon, err);
			if (r < 0)
				return r;
		}
		_cleanup_free_ char *like = NULL;
		if (asprintf(&like, "%s%%", d) < 0)
			return wr_err_set(err, ENOMEM, "out of memory");
		_cleanup_stmt_ sqlite3_stmt *st =
		    prep(s, "SELECT digest FROM images WHERE digest LIKE ? LIMIT 2", err);
		if (st == NULL)
			return -EIO;
		sqlite3_bind_text(st, 1, like, -1, SQLITE_STATIC);
		int n = 0;
		while (sqlite3_step(st) == SQLITE_ROW) {
			if (n++ == 0)
				snprintf(digest, 72, "%s",
					 (const char *)sqlite3_column_text(st, 0));
		}
		if (n == 0)
			return wr_err_set(err, ENOENT, "image %s: no such image", ref);
		if (n > 1)
			return wr_err_field(err, "ref", "ref '%s': ambiguous digest prefix", ref);
		return 0;
	}
	_cleanup_free_ char *canon = NULL;
	int r = wri_ref_canon(ref, &canon, err);
	if (r < 0)
		return r;
	_cleanup_stmt_ sqlite3_stmt *st = prep(s, "SELECT digest FROM refs WHERE name=?", err);
	if (st == NULL)
		return -EIO;
	sqlite3_bind_text(st, 1, canon, -1, SQLITE_STATIC);
	if (sqlite3_step(st) != SQLITE_ROW)
		return wr_err_set(err, ENOENT, "image %s: no such image", canon);
	snprintf(digest, 72, "%s", (const char *)sqlite3_column_text(st, 0));
	return 0;
}

int wr_image_resolve(struct wr_image_store *s, const char *ref, struct wr_image **out, wr_err *err)
{
	char d[72];
	pthread_mutex_lock(&s->lock);
	int r = resolve_locked(s, ref, d, err);
	if (r == 0)
		r = load_locked(s, d, out, err);
	pthread_mutex_unlock(&s->lock);
	return r;
}

int wr_image_tag(struct wr_image_store *s, const char *target, const char *ref, wr_err *err)
{
	_cleanup_free_ char *canon = NULL;
	int r = wri_ref_canon(ref, &canon, err);
	if (r < 0)
		return r;
	char d[72];
	pthread_mutex_lock(&s->lock);
	if ((r = wri_db_begin(s, err)) == 0) {
		if ((r = resolve_locked(s, target, d, err)) == 0) {
			const char *a[] = {canon, d};
			r = run(
			    s,
			    "INSERT OR REPLACE INTO refs(name,digest) SELECT ?,digest FROM images"
			    " WHERE digest=?2 AND deleting=0",
			    2, a, err);
			if (r == 0)
				r = wr_err_set(err, ENOENT, "image %s: being reclaimed", target);
		}
		if (r >= 0)
			r = wri_db_exec(s, "COMMIT", err);
		else
			wri_db_rollback(s);
	}
	pthread_mutex_unlock(&s->lock);
	return r < 0 ? r : 0;
}

int wr_image_untag(struct wr_image_store *s, const char *ref, wr_err *err)
{
	_cleanup_free_ char *canon = NULL;
	int r = wri_ref_canon(ref, &canon, err);
	if (r < 0)
		return r;
	const char *a[] = {canon};
	pthread_mutex_lock(&s->lock);
	r = run(s, "DELETE FROM refs WHERE name=?", 1, a, err);
	pthread_mutex_unlock(&s->lock);
	if (r == 0)
		return wr_err_set(err, ENOENT, "image %s: no such name", canon);
	return r < 0 ? r : 0;
}

int wr_image_pin(struct wr_image_store *s, const char *ref, bool pinned, wr_err *err)
{
	char d[72];
	pthread_mutex_lock(&s->lock);
	int r = resolve_locked(s, ref, d, err);
	if (r == 0) {
		const char *a[] = {d};
		r = run(s,
			pinned ? "UPDATE images SET pinned=1 WHERE digest=? AND deleting=0"
			       : "UPDATE images SET pinned=0 WHERE digest=?",
			1, a, err);
		if (r == 0)
			r = wr_err_set(err, ENOENT, "image %s: being reclaimed", ref);
	}
	pthread_mutex_unlock(&s->lock);
	return r < 0 ? r : 0;
}

int wr_image_list(struct wr_image_store *s, struct wr_image_list *out, wr_err *err)
{
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&s->lock);
	int r = 0;
	_cleanup_stmt_ sqlite3_stmt *st = prep(
	    s, "SELECT digest FROM images WHERE deleting=0 ORDER BY created DESC, digest", err);
	if (st == NULL) {
		r = -EIO;
		goto out;
	}
	size_t cap = 0;
	while (sqlite3_step(st) == SQLITE_ROW) {
		if (out->n == cap) {
			cap = cap ? cap * 2 : 16;
			struct wr_image **nv = realloc(out->items, cap * sizeof(*nv));
			if (nv == NULL) {
				r = wr_err_set(err, ENOMEM, "out of memory");
				goto out;
			}
			out->items = nv;
		}
		const char *d = (const char *)sqlite3_column_text(st, 0);
		if ((r = load_locked(s, d, &out->items[out->n], err)) < 0)
			goto out;
		out->n++;
	}
out:
	pthread_mutex_unlock(&s->lock);
	if (r < 0)
		wr_image_list_free(out);
	return r;
}

void wr_image_list_free(struct wr_image_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		wr_image_free(&l->items[i]);
	free(l->items);
	memset(l, 0, sizeof(*l));
}

/* ---- removal (also used by gc) ----------------------------------------- */

int wri_finish_delete(struct wr_image_store *s, const char *digest, wr_err *err)
{
	char man[80];
	snprintf(man, sizeof(man), "%s.json", hex_of(digest));
	if (unlinkat(s->blobsfd, hex_of(digest), 0) < 0 && errno != ENOENT)
		return wr_err_sys(err, "unlink blob %s", digest);
	unlinkat(s->mansfd, man, 0);
	const char *a[] = {digest};
	pthread_mutex_lock(&s->lock);
	int r = run(s, "DELETE FROM refs WHERE digest=?1", 1, a, err);
	if (r >= 0)
		r = run(s, "DELETE FROM holders WHERE digest=?1", 1, a, err);
	if (r >= 0)
		r = run(s, "DELETE FROM images WHERE digest=?1", 1, a, err);
	pthread_mutex_unlock(&s->lock);
	if (s->o.lazy && s->o.lazy->forget)
		s->o.lazy->forget(s->o.lazy_ctx, digest);
	return r < 0 ? r : 0;
}

int wri_mark_deleting(struct wr_image_store *s, const char *digest, bool force, wr_err *err)
{
	const char *a[] = {digest};
	int r = run(s,
		    force ? "UPDATE images SET deleting=1 WHERE digest=?1 AND deleting=0 AND NOT "
			    "EXISTS(SELECT 1 FROM holders WHERE digest=?1)"
			  : "UPDATE images SET deleting=1 WHERE digest=?1 AND deleting=0 AND "
			    "pinned=0 AND NOT EXISTS(SELECT 1 FROM holders WHERE digest=?1) AND "
			    "NOT EXISTS(SELECT 1 FROM refs WHERE digest=?1)",
		    1, a, err);
	if (r > 0 && force)
		r = run(s, "DELETE FROM refs WHERE digest=?1", 1, a, err) >= 0 ? 1 : -EIO;
	return r;
}

int wr_image_remove(struct wr_image_store *s, const char *ref, bool force, bool *removed,
		    wr_err *err)
{
	if (removed)
		*removed = false;
	bool by_name = ref && strncmp(ref, "sha256:", 7) != 0 && strchr(ref, '@') == NULL;
	char d[72];
	pthread_mutex_lock(&s->lock);
	int r = wri_db_begin(s, err);
	if (r < 0)
		goto unlock;
	if ((r = resolve_locked(s, ref, d, err)) < 0)
		goto abort;
	if (by_name) {
		_cleanup_free_ char *canon = NULL;
		if ((r = wri_ref_canon(ref, &canon, err)) < 0)
			goto abort;
		const char *a[] = {canon};
		if ((r = run(s, "DELETE FROM refs WHERE name=?", 1, a, err)) < 0)
			goto abort;
		/* The image goes too when nothing else keeps it. */
		if ((r = wri_mark_deleting(s, d, false, err)) < 0)
			goto abort;
	} else {
		if ((r = wri_mark_deleting(s, d, force, err)) < 0)
			goto abort;
		if (r == 0) {
			_cleanup_stmt_ sqlite3_stmt *st =
			    prep(s,
				 "SELECT (SELECT count(*) FROM holders WHERE digest=?1), pinned,"
				 " (SELECT count(*) FROM refs WHERE digest=?1) FROM images WHERE "
				 "digest=?1",
				 err);
			int h = 0, p = 0, n = 0;
			if (st) {
				sqlite3_bind_text(st, 1, d, -1, SQLITE_STATIC);
				if (sqlite3_step(st) == SQLITE_ROW) {
					h = sqlite3_column_int(st, 0);
					p = sqlite3_column_int(st, 1);
					n = sqlite3_column_int(st, 2);
				}
			}
			if (h)
				r = wr_err_set(err, EBUSY, "image %s: in use by %d sandbox%s", d, h,
					       h == 1 ? "" : "es");
			else if (p)
				r = wr_err_set(err, EBUSY, "image %s: pinned (unpin or force)", d);
			else if (n)
				r = wr_err_set(err, EBUSY,
					       "image %s: %d name%s point%s at it (untag or force)",
					       d, n, n == 1 ? "" : "s", n == 1 ? "s" : "");
			else
				r = wr_err_set(err, ENOENT, "image %s: being reclaimed", d);
			goto abort;
		}
	}
	bool marked = r > 0;
	if ((r = wri_db_exec(s, "COMMIT", err)) < 0)
		goto abort;
	pthread_mutex_unlock(&s->lock);
	if (!marked)
		return 0;
	if ((r = wri_finish_delete(s, d, err)) < 0)
		return r;
	if (removed)
		*removed = true;
	return 0;
abort:
	wri_db_rollback(s);
unlock:
	pthread_mutex_unlock(&s->lock);
	return r;
}

/* ---- use ------------------------------------------------------------------ */

int wr_image_blob_path(struct wr_image_store *s, const char *digest, char **path, wr_err *err)
{
	if (!wri_is_digest(digest))
		return wr_err_field(err, "digest", "digest '%s': not sha256:<64 hex>", digest);
	struct stat sb;
	if (fstatat(s->blobsfd, hex_of(digest), &sb, AT_SYMLINK_NOFOLLOW) < 0)
		return wr_err_sys(err, "blob %s", digest);
	if (asprintf(path, "%s/blobs/sha256/%s", s->dir, hex_of(digest)) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	return 0;
}

int wr_image_acquire(struct wr_image_store *s, const char *ref, const char *holder, char **path,
		     struct wr_image **img, wr_err *err)
{
	if (holder == NULL || holder[0] == '\0')
		return wr_err_field(err, "holder", "holder: must not be empty");
	char d[72];
	_cleanup_free_ char *now = NULL;
	if (asprintf(&now, "%lld", (long long)time(NULL)) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	struct wr_image *rec = NULL;
	pthread_mutex_lock(&s->lock);
	int r = wri_db_begin(s, err);
	if (r < 0)
		goto unlock;
	if ((r = resolve_locked(s, ref, d, err)) < 0)
		goto abort;
	const char *a[] = {d, holder, now};
	/* Serialised with gc's mark: a deleting image gets no new holder. */
	if ((r = run(
		 s,
		 "INSERT OR IGNORE INTO holders(digest,holder,since) SELECT ?1,?2,?3 FROM images"
		 " WHERE digest=?1 AND deleting=0",
		 3, a, err)) < 0)
		goto abort;
	if ((r = run(s, "UPDATE images SET last_used=?3 WHERE digest=?1 AND deleting=0", 3, a,
		     err)) < 0)
		goto abort;
	if (r == 0) {
		r = wr_err_set(err, ENOENT, "image %s: being reclaimed; import or pull it again",
			       ref);
		goto abort;
	}
	if ((r = load_locked(s, d, &rec, err)) < 0)
		goto abort;
	if ((r = wri_db_exec(s, "COMMIT", err)) < 0)
		goto abort;
	pthread_mutex_unlock(&s->lock);
	if (rec->complete)
		r = wr_image_blob_path(s, d, path, err);
	else if (s->o.lazy && s->o.lazy->open_remote)
		r = s->o.lazy->open_remote(s->o.lazy_ctx, rec, path, err);
	else
		r = wr_err_set(err, ENOENT, "image %s: blob not local and no on-demand loader", d);
	if (r < 0) {
		wr_image_release(s, d, holder, NULL);
		wr_image_free(&rec);
		return r;
	}
	if (img)
		*img = rec;
	else
		wr_image_free(&rec);
	return 0;
abort:
	wri_db_rollback(s);
unlock:
	pthread_mutex_unlock(&s->lock);
	wr_image_free(&rec);
	return r;
}

int wr_image_release(struct wr_image_store *s, const char *digest, const char *holder, wr_err *err)
{
	_cleanup_free_ char *now = NULL;
	if (asprintf(&now, "%lld", (long long)time(NULL)) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	const char *a[] = {digest, holder, now};
	pthread_mutex_lock(&s->lock);
	int r = run(s, "DELETE FROM holders WHERE digest=?1 AND holder=?2", 3, a, err);
	if (r > 0)
		r = run(s, "UPDATE images SET last_used=?3 WHERE digest=?1", 3, a, err);
	pthread_mutex_unlock(&s->lock);
	return r < 0 ? r : 0;
}

int wr_image_release_except(struct wr_image_store *s, bool (*keep)(void *ctx, const char *holder),
			    void *ctx, wr_err *err)
{
	pthread_mutex_lock(&s->lock);
	int r = 0;
	_cleanup_stmt_ sqlite3_stmt *st = prep(s, "SELECT digest, holder FROM holders", err);
	struct pair {
		char *d, *h;
	} *drop = NULL;
	size_t n = 0;
	if (st == NULL) {
		r = -EIO;
		goto out;
	}
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *h = (const char *)sqlite3_column_text(st, 1);
		if (keep && keep(ctx, h))
			continue;
		struct pair *nv = realloc(drop, (n + 1) * sizeof(*nv));
		if (nv == NULL) {
			r = wr_err_set(err, ENOMEM, "out of memory");
			goto out;
		}
		drop = nv;
		drop[n].d = strdup((const char *)sqlite3_column_text(st, 0));
		drop[n].h = strdup(h);
		n++;
	}
out:
	pthread_mutex_unlock(&s->lock);
	for (size_t i = 0; i < n; i++) {
		if (r == 0 && drop[i].d && drop[i].h)
			r = wr_image_release(s, drop[i].d, drop[i].h, err);
		free(drop[i].d);
		free(drop[i].h);
	}
	free(drop);
	return r;
}

int wr_image_usage(struct wr_image_store *s, struct wr_image_usage *out, wr_err *err)
{
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&s->lock);
	_cleanup_stmt_ sqlite3_stmt *st = prep(
	    s,
	    "SELECT coalesce(sum(CASE WHEN complete THEN size ELSE 0 END),0), count(*) FROM images",
	    err);
	int r = 0;
	if (st == NULL)
		r = -EIO;
	else if (sqlite3_step(st) == SQLITE_ROW) {
		out->blob_bytes = (uint64_t)sqlite3_column_int64(st, 0);
		out->images = (size_t)sqlite3_column_int64(st, 1);
	}
	pthread_mutex_unlock(&s->lock);
	if (s->o.lazy && s->o.lazy->cache_bytes)
		out->cache_bytes = s->o.lazy->cache_bytes(s->o.lazy_ctx);
	out->quota_bytes = s->o.quota_bytes;
	return r;
}
