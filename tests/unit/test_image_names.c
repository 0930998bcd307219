/* Image store: names and tags, removal rules, holders, gc policy and the
 * concurrency guarantees (one blob per content, acquire vs gc). */
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/cleanup.h"
#include "image/image.h"
#include "test_image_util.h"

static struct wr_image_store *open_store(struct fixture *f, uint64_t quota, int64_t grace)
{
	struct wr_image_store_opts o = {.dir = f->store, .quota_bytes = quota, .grace_sec = grace};
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

/* Import a distinct small rootfs (content varies with t). */
static void import_tree(struct fixture *f, struct wr_image_store *s, long t, const char *ref,
			char digest[72])
{
	char name[32];
	snprintf(name, sizeof(name), "tree%ld", t);
	make_rootfs(f, name, t);
	_cleanup_err_ wr_err err = NULL;
	struct wr_image *img = NULL;
	struct wr_image_import_opts o = {.ref = ref};
	if (wr_image_import(s, fpath(f, name), &o, &img, &err) < 0)
		fail_msg("import: %s", err->msg);
	snprintf(digest, 72, "%s", img->digest);
	wr_image_free(&img);
}

static void test_tags_move_keep_old(void **state)
{
	struct fixture *f = *state;
	struct wr_image_store *s = open_store(f, 0, 0);
	char d1[72], d2[72];
	import_tree(f, s, 1000, "py:3.12", d1);
	import_tree(f, s, 2000, "py:3.12", d2);
	assert_string_not_equal(d1, d2);
	_cleanup_err_ wr_err err = NULL;
	struct wr_image *img = NULL;
	assert_int_equal(wr_image_resolve(s, "py:3.12", &img, &err), 0);
	assert_string_equal(img->digest, d2);
	wr_image_free(&img);
	/* the old version stays, by digest and by name@digest and prefix */
	assert_int_equal(wr_image_resolve(s, d1, &img, &err), 0);
	assert_int_equal(img->n_refs, 0);
	wr_image_free(&img);
	char ref[120];
	snprintf(ref, sizeof(ref), "py@%s", d1);
	assert_int_equal(wr_image_resolve(s, ref, &img, &err), 0);
	wr_image_free(&img);
	snprintf(ref, sizeof(ref), "%.19s", d1);
	assert_int_equal(wr_image_resolve(s, ref, &img, &err), 0);
	assert_string_equal(img->digest, d1);
	wr_image_free(&img);
	/* default tag, registry hosts with ports */
	assert_int_equal(wr_image_tag(s, d1, "localhost:5000/team/py", &err), 0);
	assert_int_equal(wr_image_resolve(s, "localhost:5000/team/py:latest", &img, &err), 0);
	assert_string_equal(img->refs[0], "localhost:5000/team/py:latest");
	wr_image_free(&img);
	/* bad names name the field */
	assert_int_equal(wr_image_tag(s, d1, "Bad/Name", &err), -EINVAL);
	assert_string_equal(err->field, "ref");
	wr_err_free(&err);
	assert_int_equal(wr_image_resolve(s, "nope:1", &img, &err), -ENOENT);
	wr_err_free(&err);
	assert_int_equal(wr_image_untag(s, "py:3.12", &err), 0);
	assert_int_equal(wr_image_resolve(s, d2, &img, &err), 0);
	wr_image_free(&img);
	wr_image_store_close(&s);
}

static void test_remove_rules(void **state)
{
	struct fixture *f = *state;
	struct wr_image_store *s = open_store(f, 0, 0);
	char d[72];
	import_tree(f, s, 1000, "app:1", d);
	_cleanup_err_ wr_err err = NULL;
	bool removed;
	/* by digest: named -> busy */
	assert_int_equal(wr_image_remove(s, d, false, &removed, &err), -EBUSY);
	assert_non_null(strstr(err->msg, "name"));
	wr_err_free(&err);
	/* in use -> busy even with force */
	char *path = NULL;
	assert_int_equal(wr_image_acquire(s, "app:1", "sbx1", &path, NULL, &err), 0);
	assert_true(exists(path));
	assert_int_equal(wr_image_remove(s, d, true, &removed, &err), -EBUSY);
	assert_non_null(strstr(err->msg, "in use"));
	wr_err_free(&err);
	/* untagging by name keeps the in-use image */
	assert_int_equal(wr_image_remove(s, "app:1", false, &removed, &err), 0);
	assert_false(removed);
	assert_true(exists(path));
	assert_int_equal(wr_image_release(s, d, "sbx1", &err), 0);
	assert_int_equal(wr_image_pin(s, d, true, &err), 0);
	assert_int_equal(wr_image_remove(s, d, false, &removed, &err), -EBUSY);
	assert_non_null(strstr(err->msg, "pinned"));
	wr_err_free(&err);
	assert_int_equal(wr_image_remove(s, d, true, &removed, &err), 0);
	assert_true(removed);
	assert_false(exists(path));
	assert_int_equal(count_entries(f->store, "manifests"), 0);
	free(path);
	wr_image_store_close(&s);
}

static bool keep_live(void *ctx, const char *h)
{
	(void)ctx;
	return strncmp(h, "live", 4) == 0;
}

static void test_holders_release_except(void **state)
{
	struct fixture *f = *state;
	struct wr_image_store *s = open_store(f, 0, 0);
	char d[72];
	import_tree(f, s, 1000, "a", d);
	_cleanup_err_ wr_err err = NULL;
	char *p = NULL;
	const char *ids[] = {"live1", "dead1", "live2", "dead2"};
	for (int i = 0; i < 4; i++) {
		assert_int_equal(wr_image_acquire(s, "a", ids[i], &p, NULL, &err), 0);
		free(p);
	}
	struct wr_image *img = NULL;
	assert_int_equal(wr_image_resolve(s, "a", &img, &err), 0);
	assert_int_equal(img->holders, 4);
	assert_true(img->last_used > 0);
	wr_image_free(&img);
	assert_int_equal(wr_image_release_except(s, keep_live, NULL, &err), 0);
	assert_int_equal(wr_image_resolve(s, "a", &img, &err), 0);
	assert_int_equal(img->holders, 2);
	wr_image_free(&img);
	wr_image_store_close(&s);
	/* holders persist across a reopen (daemon restart) */
	s = open_store(f, 0, 0);
	assert_int_equal(wr_image_resolve(s, "a", &img, &err), 0);
	assert_int_equal(img->holders, 2);
	wr_image_free(&img);
	wr_image_store_close(&s);
}

struct evlog {
	int n;
	char digests[8][72];
};
static void on_remove(void *ctx, const struct wr_image_gc_event *ev)
{
	struct evlog *l = ctx;
	if (l->n < 8)
		snprintf(l->digests[l->n], 72, "%s", ev->digest);
	l->n++;
}

static void set_last_used(struct fixture *f, const char *digest, long t)
{
	char sql[512];
	snprintf(sql, sizeof(sql), "UPDATE images SET last_used=%ld, created=%ld WHERE digest='%s'",
		 t, t, digest);
	assert_int_equal(db_exec(f, sql), 0);
}

static void test_gc_policy(void **state)
{
	struct fixture *f = *state;
	char d[5][72];
	struct wr_image_store *s = open_store(f, 0, 0);
	for (int i = 0; i < 5; i++) {
		char ref[16];
		snprintf(ref, sizeof(ref), "img:%d", i);
		import_tree(f, s, 1000 + i, ref, d[i]);
	}
	struct wr_image_usage u;
	_cleanup_err_ wr_err err = NULL;
	assert_int_equal(wr_image_usage(s, &u, &err), 0);
	uint64_t one = u.blob_bytes / 5;
	wr_image_store_close(&s);
	long now = (long)time(NULL);
	/* ages: 0 oldest .. 4 newest; 4 within the grace period */
	for (int i = 0; i < 5; i++)
		set_last_used(f, d[i], now - 10000 + i * 1000 + (i == 4 ? 9000 : 0));
	/* quota fits two images; grace one hour */
	s = open_store(f, 2 * one + one / 2, 3600);
	assert_int_equal(wr_image_pin(s, "img:0", true, &err), 0);
	char *p = NULL;
	assert_int_equal(wr_image_acquire(s, "img:1", "sbx", &p, NULL, &err), 0);
	free(p);
	set_last_used(f, d[1], now - 9000); /* in use and old */
	struct evlog log = {0};
	struct wr_image_gc_report rep;
	struct wr_image_gc_opts o = {.dry_run = true, .on_remove = on_remove, .ctx = &log};
	assert_int_equal(wr_image_gc(s, &o, &rep, &err), 0);
	assert_int_equal(rep.removed, 2); /* would remove 2 and 3 */
	assert_int_equal(count_entries(f->store, "blobs/sha256"), 5);
	memset(&log, 0, sizeof(log));
	o.dry_run = false;
	assert_int_equal(wr_image_gc(s, &o, &rep, &err), 0);
	assert_int_equal(rep.removed, 2);
	assert_int_equal(log.n, 2);
	assert_string_equal(log.digests[0], d[2]); /* LRU first */
	assert_string_equal(log.digests[1], d[3]);
	assert_int_equal(rep.skipped_pinned, 1);
	assert_int_equal(rep.skipped_in_use, 1);
	assert_int_equal(rep.skipped_grace, 1);
	struct wr_image *img = NULL;
	assert_int_equal(wr_image_resolve(s, "img:2", &img, &err), -ENOENT);
	wr_err_free(&err);
	for (int i = 0; i < 5; i++) {
		if (i == 2 || i == 3)
			continue;
		assert_int_equal(wr_image_resolve(s, d[i], &img, &err), 0);
		wr_image_free(&img);
	}
	/* still above the high-water mark: the automatic pass runs, and
	 * finds nothing it may remove */
	assert_int_equal(wr_image_gc_auto(s, NULL, &rep, &err), 1);
	assert_int_equal(rep.removed, 0);
	wr_image_store_close(&s);
}

struct racer {
	struct fixture *f;
	struct wr_image_store *s;
	const char *path;
	char digest[72];
	int rc;
};
static void *import_thread(void *arg)
{
	struct racer *r = arg;
	_cleanup_err_ wr_err err = NULL;
	struct wr_image *img = NULL;
	struct wr_image_import_opts o = {.ref = "same"};
	r->rc = wr_image_import(r->s, r->path, &o, &img, &err);
	if (img)
		snprintf(r->digest, 72, "%s", img->digest);
	wr_image_free(&img);
	return NULL;
}

static void test_concurrent_same_content(void **state)
{
	struct fixture *f = *state;
	struct wr_image_store *s1 = open_store(f, 0, 0);
	struct wr_image_store *s2 = open_store(f, 0, 0); /* as a second process would */
	make_rootfs(f, "x", 42);
	make_rootfs(f, "y", 42);
	struct racer r[4] = {{f, s1, fpath(f, "x")},
			     {f, s2, fpath(f, "y")},
			     {f, s1, fpath(f, "y")},
			     {f, s2, fpath(f, "x")}};
	pthread_t t[4];
	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, import_thread, &r[i]);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(r[i].rc, 0);
		assert_string_equal(r[i].digest, r[0].digest);
	}
	assert_int_equal(count_entries(f->store, "blobs/sha256"), 1);
	assert_int_equal(count_entries(f->store, "tmp"), 0);
	wr_image_store_close(&s1);
	wr_image_store_close(&s2);
}

static void test_acquire_vs_gc(void **state)
{
	struct fixture *f = *state;
	struct wr_image_store *s = open_store(f, 1, 0);
	_cleanup_err_ wr_err err = NULL;
	for (int round = 0; round < 10; round++) {
		char d[72];
		import_tree(f, s, 5000 + round, NULL, d);
		/* an acquirer and gc race; either the acquire wins (and the
		 * blob stays while held) or it fails cleanly */
		char *path = NULL;
		struct wr_image_gc_report rep;
		pid_t pid = fork();
		if (pid == 0) {
			struct wr_image_store *s2 = open_store(f, 1, 0);
			wr_err e2 = NULL;
			_exit(wr_image_gc(s2, NULL, &rep, &e2) < 0);
		}
		int r = wr_image_acquire(s, d, "sbx", &path, NULL, &err);
		int st;
		waitpid(pid, &st, 0);
		assert_int_equal(WEXITSTATUS(st), 0);
		if (r == 0) {
			assert_true(exists(path));
			assert_int_equal(wr_image_release(s, d, "sbx", &err), 0);
		} else {
			assert_int_equal(r, -ENOENT);
			wr_err_free(&err);
		}
		free(path);
	}
	wr_image_store_close(&s);
}

static void test_crash_leftovers_swept(void **state)
{
	struct fixture *f = *state;
	struct wr_image_store *s = open_store(f, 0, 0);
	wr_image_store_close(&s);
	/* an abandoned staging tree, and a record left mid-deletion */
	assert_int_equal(mkdir(pathcat(f->store, "tmp/stage-dead"), 0700), 0);
	write_file(pathcat(f->store, "tmp/stage-dead/blob"), "partial");
	s = open_store(f, 0, 0);
	assert_int_equal(count_entries(f->store, "tmp"), 0);
	char d[72];
	import_tree(f, s, 7, "z", d);
	wr_image_store_close(&s);
	assert_int_equal(db_exec(f, "UPDATE images SET deleting=1"), 0);
	s = open_store(f, 0, 0);
	assert_int_equal(count_entries(f->store, "blobs/sha256"), 0);
	struct wr_image_list l;
	_cleanup_err_ wr_err err = NULL;
	assert_int_equal(wr_image_list(s, &l, &err), 0);
	assert_int_equal(l.n, 0);
	wr_image_list_free(&l);
	wr_image_store_close(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_tags_move_keep_old, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_remove_rules, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_holders_release_except, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_gc_policy, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_concurrent_same_content, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_acquire_vs_gc, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_crash_leftovers_swept, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
