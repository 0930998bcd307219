/* Image store: the building blocks of the registry and on-demand loading
 * work (ready blobs, remote records, the lazy hooks), streamed imports,
 * and an import racing the deletion of the same digest. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/cleanup.h"
#include "image/image.h"
#include "image/store_internal.h"
#include "test_image_util.h"

struct fake_lazy {
	uint64_t cache;
	uint64_t trimmed;
	int forgets, opens;
	char path[256];
};

static uint64_t fl_bytes(void *ctx)
{
	return ((struct fake_lazy *)ctx)->cache;
}
static int fl_trim(void *ctx, uint64_t want, uint64_t *freed, wr_err *err)
{
	(void)err;
	struct fake_lazy *l = ctx;
	uint64_t n = want < l->cache ? want : l->cache;
	l->cache -= n;
	l->trimmed += n;
	*freed = n;
	return 0;
}
static void fl_forget(void *ctx, const char *digest)
{
	(void)digest;
	((struct fake_lazy *)ctx)->forgets++;
}
static int fl_open(void *ctx, const struct wr_image *img, char **path, wr_err *err)
{
	(void)err;
	struct fake_lazy *l = ctx;
	assert_false(img->complete);
	assert_non_null(img->remote.reference);
	l->opens++;
	*path = strdup(l->path);
	return 0;
}
static const struct wr_image_lazy_ops fl_ops = {fl_bytes, fl_trim, fl_forget, fl_open};

static struct wr_image_store *open_store(struct fixture *f, const char *dir, uint64_t quota,
					 struct fake_lazy *lazy)
{
	struct wr_image_store_opts o = {.dir = dir ? dir : f->store,
					.quota_bytes = quota,
					.lazy = lazy ? &fl_ops : NULL,
					.lazy_ctx = lazy};
	struct wr_image_store *s = NULL;
	_cleanup_err_ wr_err err = NULL;
	if (wr_image_store_open(&o, &s, &err) < 0)
		fail_msg("open: %s", err->msg);
	return s;
}

static int setup(void **state)
{
	*state = fixture_new();
	return *state ? 0 : -1;
}
static int teardown(void **state)
{
	fixture_free(*state);
	return 0;
}

/* A real EROFS blob built by a second store ("another node"). */
static void other_blob(struct fixture *f, char digest[72], char path[512])
{
	char dir[200];
	snprintf(dir, sizeof(dir), "%s/other", f->base);
	struct wr_image_store *o = open_store(f, dir, 0, NULL);
	make_rootfs(f, "tree", 77);
	_cleanup_err_ wr_err err = NULL;
	struct wr_image *img = NULL;
	if (wr_image_import(o, fpath(f, "tree"), NULL, &img, &err) < 0)
		fail_msg("%s", err->msg);
	snprintf(digest, 72, "%s", img->digest);
	snprintf(path, 512, "%s/blobs/sha256/%s", dir, img->digest + 7);
	wr_image_free(&img);
	wr_image_store_close(&o);
}

static void test_add_blob(void **state)
{
	struct fixture *f = *state;
	char digest[72], path[512];
	other_blob(f, digest, path);
	struct wr_image_store *s = open_store(f, NULL, 0, NULL);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	_cleanup_err_ wr_err err = NULL;
	struct wr_image *img = NULL;
	const char *cfg = "{\"config\":{\"Env\":[\"X=1\"]}}";
	struct wr_image_import_opts o = {.ref = "pulled:1", .source = "registry:test"};
	/* wrong expected digest */
	assert_int_equal(wr_image_add_blob(s, fd,
					   "sha256:"
					   "0000000000000000000000000000000000000000"
					   "000000000000000000000000",
					   cfg, &o, &img, &err),
			 -EBADMSG);
	wr_err_free(&err);
	assert_int_equal(wr_image_add_blob(s, fd, digest, cfg, &o, &img, &err), 0);
	assert_string_equal(img->digest, digest);
	assert_string_equal(img->source, "registry:test");
	assert_int_equal(img->config.n_env, 1);
	wr_image_free(&img);
	/* not an EROFS image: fsck refuses it */
	write_file(fpath(f, "junk"), "this is not a filesystem");
	_cleanup_close_ int jfd = open(fpath(f, "junk"), O_RDONLY | O_CLOEXEC);
	assert_true(wr_image_add_blob(s, jfd, NULL, NULL, NULL, NULL, &err) < 0);
	assert_non_null(strstr(err->msg, "fsck.erofs"));
	assert_int_equal(count_entries(f->store, "blobs/sha256"), 1);
	assert_int_equal(count_entries(f->store, "tmp"), 0);
	wr_image_store_close(&s);
}

static void test_remote_then_commit(void **state)
{
	struct fixture *f = *state;
	char digest[72], path[512];
	other_blob(f, digest, path);
	struct fake_lazy lazy = {.cache = 5000};
	snprintf(lazy.path, sizeof(lazy.path), "/run/fake-fuse/%s", digest + 7);
	struct wr_image_store *s = open_store(f, NULL, 0, &lazy);
	struct stat sb;
	assert_int_equal(stat(path, &sb), 0);
	struct wr_image_remote rem = {.reference = "localhost:5000/app@sha256:abc",
				      .blob_digest = digest,
				      .size = (uint64_t)sb.st_size};
	_cleanup_err_ wr_err err = NULL;
	struct wr_image *img = NULL;
	struct wr_image_import_opts o = {.ref = "lazy:1"};
	assert_int_equal(
	    wr_image_add_remote(s, digest, (uint64_t)sb.st_size, &rem, NULL, &o, &img, &err), 0);
	assert_false(img->complete);
	assert_string_equal(img->remote.reference, rem.reference);
	wr_image_free(&img);
	/* not local: acquire goes through the lazy loader */
	char *p = NULL;
	assert_int_equal(wr_image_acquire(s, "lazy:1", "sbx", &p, NULL, &err), 0);
	assert_string_equal(p, lazy.path);
	assert_int_equal(lazy.opens, 1);
	free(p);
	struct wr_image_usage u;
	assert_int_equal(wr_image_usage(s, &u, &err), 0);
	assert_int_equal(u.blob_bytes, 0);
	assert_int_equal(u.cache_bytes, 5000);
	/* the blob arrives: bad bytes are refused, the right ones commit */
	write_file(fpath(f, "bad"), "garbage");
	_cleanup_close_ int bfd = open(fpath(f, "bad"), O_RDONLY | O_CLOEXEC);
	assert_int_equal(wr_image_blob_commit(s, digest, bfd, &err), -EBADMSG);
	wr_err_free(&err);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_int_equal(wr_image_blob_commit(s, digest, fd, &err), 0);
	assert_int_equal(wr_image_resolve(s, "lazy:1", &img, &err), 0);
	assert_true(img->complete);
	wr_image_free(&img);
	assert_int_equal(wr_image_blob_path(s, digest, &p, &err), 0);
	assert_true(exists(p));
	free(p);
	assert_int_equal(wr_image_release(s, digest, "sbx", &err), 0);
	wr_image_store_close(&s);
}

static void test_gc_trims_cache_and_forgets(void **state)
{
	struct fixture *f = *state;
	struct fake_lazy lazy = {.cache = 1 << 20};
	struct wr_image_store *s = open_store(f, NULL, 1, &lazy);
	make_rootfs(f, "t", 5);
	_cleanup_err_ wr_err err = NULL;
	struct wr_image *img = NULL;
	assert_int_equal(wr_image_import(s, fpath(f, "t"), NULL, &img, &err), 0);
	struct wr_image_gc_report rep;
	assert_int_equal(wr_image_gc(s, NULL, &rep, &err), 0);
	assert_true(lazy.trimmed > 0);
	assert_int_equal(rep.cache_freed_bytes, lazy.trimmed);
	assert_int_equal(rep.removed, 1);
	assert_int_equal(lazy.forgets, 1);
	wr_image_free(&img);
	wr_image_store_close(&s);
}

struct piper {
	int fd;
	const char *path;
};
static void *feed(void *arg)
{
	struct piper *p = arg;
	int in = open(p->path, O_RDONLY | O_CLOEXEC);
	char buf[4096];
	ssize_t n;
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write(p->fd, buf, (size_t)n) != n)
			break;
	close(in);
	close(p->fd);
	return NULL;
}

static void import_pipe(struct wr_image_store *s, const char *path, enum wr_image_format fmt,
			char digest[72])
{
	int pfd[2];
	assert_int_equal(pipe2(pfd, O_CLOEXEC), 0);
	struct piper p = {pfd[1], path};
	pthread_t t;
	pthread_create(&t, NULL, feed, &p);
	_cleanup_err_ wr_err err = NULL;
	struct wr_image *img = NULL;
	struct wr_image_import_opts o = {.format = fmt};
	int r = wr_image_import_fd(s, pfd[0], &o, &img, &err);
	pthread_join(t, NULL);
	close(pfd[0]);
	if (r < 0)
		fail_msg("%s", err->msg);
	snprintf(digest, 72, "%s", img->digest);
	wr_image_free(&img);
}

static void test_import_from_pipes(void **state)
{
	struct fixture *f = *state;
	struct wr_image_store *s = open_store(f, NULL, 0, NULL);
	struct tentry e[] = {
	    {"./", 'd', 0755, NULL, NULL, 0, 9}, {"./a", 'f', 0644, "aaa", NULL, 0, 9}, {NULL}};
	make_tar(fpath(f, "p.tar.gz"), e, "gzip");
	char d1[72], d2[72], d3[72];
	import_pipe(s, fpath(f, "p.tar.gz"), WR_IMAGE_FMT_TAR, d1);  /* streamed */
	import_pipe(s, fpath(f, "p.tar.gz"), WR_IMAGE_FMT_AUTO, d2); /* spooled, detected */
	assert_string_equal(d1, d2);
	_cleanup_close_ int fd = open(fpath(f, "p.tar.gz"), O_RDONLY | O_CLOEXEC);
	_cleanup_err_ wr_err err = NULL;
	struct wr_image *img = NULL;
	assert_int_equal(wr_image_import_fd(s, fd, NULL, &img, &err), 0); /* seekable */
	snprintf(d3, sizeof(d3), "%s", img->digest);
	assert_string_equal(d1, d3);
	wr_image_free(&img);
	assert_int_equal(count_entries(f->store, "tmp"), 0);
	wr_image_store_close(&s);
}

struct importer {
	struct wr_image_store *s;
	const char *path;
	int rc;
	char digest[72];
};
static void *import_thread(void *arg)
{
	struct importer *im = arg;
	_cleanup_err_ wr_err err = NULL;
	struct wr_image *img = NULL;
	im->rc = wr_image_import(im->s, im->path, NULL, &img, &err);
	if (img)
		snprintf(im->digest, 72, "%s", img->digest);
	wr_image_free(&img);
	return NULL;
}

/* An import of content whose record gc is deleting waits for the deletion
 * to finish and then adds the image anew: never a record without a blob. */
static void test_import_waits_for_deletion(void **state)
{
	struct fixture *f = *state;
	struct wr_image_store *s = open_store(f, NULL, 0, NULL);
	make_rootfs(f, "t", 11);
	struct importer first = {s, fpath(f, "t")};
	import_thread(&first);
	assert_int_equal(first.rc, 0);
	char sql[200];
	snprintf(sql, sizeof(sql), "UPDATE images SET deleting=1 WHERE digest='%s'", first.digest);
	assert_int_equal(db_exec(f, sql), 0);
	struct importer second = {s, fpath(f, "t")};
	pthread_t t;
	pthread_create(&t, NULL, import_thread, &second);
	struct timespec ts = {0, 300 * 1000 * 1000};
	nanosleep(&ts, NULL);
	/* gc's second half: unlink, drop the record */
	_cleanup_err_ wr_err err = NULL;
	assert_int_equal(wri_finish_delete(s, first.digest, &err), 0);
	pthread_join(t, NULL);
	assert_int_equal(second.rc, 0);
	assert_string_equal(second.digest, first.digest);
	char *p = NULL;
	assert_int_equal(wr_image_blob_path(s, first.digest, &p, &err), 0);
	assert_true(exists(p));
	free(p);
	wr_image_store_close(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_add_blob, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_remote_then_commit, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_gc_trims_cache_and_forgets, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_import_from_pipes, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_import_waits_for_deletion, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
