/* Reclamation: LRU under a byte quota, never pinned, never in use, never
 * within the grace period after last use.
 *
 * Serialisation with acquire: a candidate is marked `deleting` in one
 * write transaction whose WHERE clause re-checks "no holder, not pinned,
 * still past grace"; acquire inserts its holder in a transaction that
 * requires deleting=0. Whichever commits first wins: either the sandbox
 * holds the image and gc skips it, or gc owns it and acquire reports
 * "being reclaimed". The blob is unlinked only after the mark commits. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "image/store_internal.h"

struct cand {
	char digest[WR_IMAGE_DIGEST_LEN + 1];
	uint64_t size;
	int64_t last;
	bool pinned, complete;
	int holders, refs;
};

static int load_cands(struct wr_image_store *s, struct cand **out, size_t *n, wr_err *err)
{
	*out = NULL;
	*n = 0;
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(s->db,
			       "SELECT digest, size, max(last_used, created), pinned, complete,"
			       " (SELECT count(*) FROM holders h WHERE h.digest=i.digest),"
			       " (SELECT count(*) FROM refs r WHERE r.digest=i.digest)"
			       " FROM images i WHERE deleting=0 ORDER BY 3 ASC, digest",
			       -1, &st, NULL) != SQLITE_OK)
		return wri_db_err(s, "gc", err);
	size_t cap = 0;
	int r = 0;
	while (sqlite3_step(st) == SQLITE_ROW) {
		if (*n == cap) {
			cap = cap ? cap * 2 : 64;
			struct cand *nv = realloc(*out, cap * sizeof(*nv));
			if (nv == NULL) {
				r = wr_err_set(err, ENOMEM, "out of memory");
				break;
			}
			*out = nv;
		}
		struct cand *c = &(*out)[(*n)++];
		snprintf(c->digest, sizeof(c->digest), "%s",
			 (const char *)sqlite3_column_text(st, 0));
		c->size = (uint64_t)sqlite3_column_int64(st, 1);
		c->last = sqlite3_column_int64(st, 2);
		c->pinned = sqlite3_column_int(st, 3) != 0;
		c->complete = sqlite3_column_int(st, 4) != 0;
		c->holders = sqlite3_column_int(st, 5);
		c->refs = sqlite3_column_int(st, 6);
	}
	sqlite3_finalize(st);
	return r;
}

/* Mark one candidate, re-checking the policy inside the transaction.
 * 1 = marked (the caller unlinks), 0 = it changed meanwhile. */
static int mark(struct wr_image_store *s, const char *digest, int64_t cutoff, wr_err *err)
{
	pthread_mutex_lock(&s->lock);
	int r = wri_db_begin(s, err);
	if (r < 0)
		goto unlock;
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(s->db,
			       "UPDATE images SET deleting=1 WHERE digest=?1 AND deleting=0 AND"
			       " pinned=0 AND max(last_used, created) <= ?2 AND NOT EXISTS"
			       " (SELECT 1 FROM holders WHERE digest=?1)",
			       -1, &st, NULL) != SQLITE_OK) {
		r = wri_db_err(s, "gc", err);
		goto abort;
	}
	sqlite3_bind_text(st, 1, digest, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, cutoff);
	int rc = sqlite3_step(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_DONE) {
		r = wri_db_err(s, "gc", err);
		goto abort;
	}
	int marked = sqlite3_changes(s->db);
	if ((r = wri_db_exec(s, "COMMIT", err)) < 0)
		goto abort;
	pthread_mutex_unlock(&s->lock);
	return marked;
abort:
	wri_db_rollback(s);
unlock:
	pthread_mutex_unlock(&s->lock);
	return r;
}

/* Blobs and manifests with no record, older than an hour (a younger one
 * may belong to an import about to commit in another process). */
static void sweep_orphans(struct wr_image_store *s)
{
	int fd = dup(s->blobsfd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (d == NULL) {
		if (fd >= 0)
			close(fd);
		return;
	}
	time_t now = time(NULL);
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (strlen(e->d_name) != 64)
			continue;
		struct stat sb;
		if (fstatat(s->blobsfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) < 0 ||
		    now - sb.st_ctime < 3600)
			continue;
		char digest[80];
		snprintf(digest, sizeof(digest), "sha256:%.64s", e->d_name);
		pthread_mutex_lock(&s->lock);
		if (wri_db_begin(s, NULL) == 0) {
			sqlite3_stmt *st = NULL;
			bool known = true;
			if (sqlite3_prepare_v2(s->db, "SELECT 1 FROM images WHERE digest=?", -1,
					       &st, NULL) == SQLITE_OK) {
				sqlite3_bind_text(st, 1, digest, -1, SQLITE_STATIC);
				known = sqlite3_step(st) == SQLITE_ROW;
				sqlite3_finalize(st);
			}
			if (!known) {
				char man[80];
				snprintf(man, sizeof(man), "%.64s.json", e->d_name);
				unlinkat(s->blobsfd, e->d_name, 0);
				unlinkat(s->mansfd, man, 0);
			}
			wri_db_exec(s, "COMMIT", NULL);
		}
		pthread_mutex_unlock(&s->lock);
	}
	closedir(d);
}

int wr_image_gc(struct wr_image_store *s, const struct wr_image_gc_opts *o,
		struct wr_image_gc_report *rep, wr_err *err)
{
	struct wr_image_gc_opts dflt = {0};
	struct wr_image_gc_report local;
	if (o == NULL)
		o = &dflt;
	if (rep == NULL)
		rep = &local;
	memset(rep, 0, sizeof(*rep));
	_cleanup_free_ struct cand *c = NULL;
	size_t n = 0;
	pthread_mutex_lock(&s->gc_lock);
	struct wr_image_usage u;
	int r = wr_image_usage(s, &u, err);
	if (r < 0)
		goto out;
	uint64_t used = u.blob_bytes + u.cache_bytes;
	rep->used_before = used;
	uint64_t target = o->target_bytes ? o->target_bytes : s->o.quota_bytes;
	bool quota = target > 0;
	if (quota && used > target && !o->dry_run && s->o.lazy && s->o.lazy->cache_trim) {
		uint64_t freed = 0;
		if ((r = s->o.lazy->cache_trim(s->o.lazy_ctx, used - target, &freed, err)) < 0)
			goto out;
		rep->cache_freed_bytes = freed;
		used -= freed < used ? freed : used;
	}
	pthread_mutex_lock(&s->lock);
	r = load_cands(s, &c, &n, err);
	pthread_mutex_unlock(&s->lock);
	if (r < 0)
		goto out;
	int64_t now = time(NULL);
	int64_t cutoff = now - s->o.grace_sec;
	for (size_t i = 0; i < n; i++) {
		bool untagged = o->prune_untagged && c[i].refs == 0;
		bool over = quota && used > target && c[i].complete;
		if (!untagged && !over)
			continue;
		if (c[i].holders) {
			rep->skipped_in_use++;
			continue;
		}
		if (c[i].pinned) {
			rep->skipped_pinned++;
			continue;
		}
		if (c[i].last > cutoff) {
			rep->skipped_grace++;
			continue;
		}
		if (!o->dry_run) {
			int m = mark(s, c[i].digest, cutoff, err);
			if (m < 0) {
				r = m;
				goto out;
			}
			if (m == 0) {
				rep->skipped_in_use++; /* taken meanwhile */
				continue;
			}
			if ((r = wri_finish_delete(s, c[i].digest, err)) < 0)
				goto out;
		}
		uint64_t freed = c[i].complete ? c[i].size : 0;
		used -= freed < used ? freed : used;
		rep->freed_bytes += freed;
		rep->removed++;
		if (o->on_remove) {
			struct wr_image_gc_event ev = {
			    .digest = c[i].digest,
			    .size = c[i].size,
			    .last_used = c[i].last,
			    .reason = untagged ? WR_IMAGE_GC_UNTAGGED : WR_IMAGE_GC_QUOTA,
			    .dry_run = o->dry_run,
			};
			o->on_remove(o->ctx, &ev);
		}
	}
	if (!o->dry_run)
		sweep_orphans(s);
	rep->used_after = used;
out:
	pthread_mutex_unlock(&s->gc_lock);
	return r < 0 ? wr_err_wrap(err, "image gc") : 0;
}

int wr_image_gc_auto(struct wr_image_store *s, const struct wr_image_gc_opts *o,
		     struct wr_image_gc_report *report, wr_err *err)
{
	if (s->o.quota_bytes == 0)
		return 0;
	struct wr_image_usage u;
	int r = wr_image_usage(s, &u, err);
	if (r < 0)
		return r;
	uint64_t used = u.blob_bytes + u.cache_bytes;
	if (used * 100 <= s->o.quota_bytes * s->o.high_water_pct)
		return 0;
	struct wr_image_gc_opts g = o ? *o : (struct wr_image_gc_opts){0};
	g.dry_run = false;
	g.target_bytes = s->o.quota_bytes * s->o.low_water_pct / 100;
	if (g.target_bytes == 0)
		g.target_bytes = 1;
	if ((r = wr_image_gc(s, &g, report, err)) < 0)
		return r;
	return 1;
}
