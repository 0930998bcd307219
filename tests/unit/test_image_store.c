/* Image store: imports, digests, hostile archives, names, holders, gc.
 * Every test builds its inputs at runtime (trees, tars via libarchive's
 * writer) in a fresh temporary directory and removes it afterwards. */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/cleanup.h"
#include "image/image.h"
#include "test_image_util.h"

static struct wr_image_store *open_store(struct fixture *f, uint64_t quota, int64_t grace)
{
	struct wr_image_store_opts o = {.dir = f->store,
					.quota_bytes = quota,
					.grace_sec = grace,
					.max_entries = 1000,
					.max_unpacked_bytes = 1 << 20};
	struct wr_image_store *s = NULL;
	_cleanup_err_ wr_err err = NULL;
	int r = wr_image_store_open(&o, &s, &err);
	if (r < 0)
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

static void import_ok(struct wr_image_store *s, const char *path, enum wr_image_format fmt,
		      const char *ref, char digest[72])
{
	_cleanup_err_ wr_err err = NULL;
	struct wr_image *img = NULL;
	struct wr_image_import_opts o = {.format = fmt, .ref = ref};
	int r = wr_image_import(s, path, &o, &img, &err);
	if (r < 0)
		fail_msg("import %s: %s", path, err->msg);
	assert_true(img->complete);
	snprintf(digest, 72, "%s", img->digest);
	wr_image_free(&img);
}

/* Import must fail with errnum and a message containing `needle`, and
 * leave neither an image nor staging files. */
static void import_bad(struct fixture *f, struct wr_image_store *s, const char *path, int errnum,
		       const char *needle)
{
	_cleanup_err_ wr_err err = NULL;
	struct wr_image_import_opts o = {.ref = "bad:1"};
	int r = wr_image_import(s, path, &o, NULL, &err);
	assert_int_equal(r, -errnum);
	if (strstr(err->msg, needle) == NULL)
		fail_msg("message '%s' lacks '%s'", err->msg, needle);
	struct wr_image_list l;
	assert_int_equal(wr_image_list(s, &l, &err), 0);
	assert_int_equal(l.n, 0);
	wr_image_list_free(&l);
	assert_int_equal(count_entries(f->store, "tmp"), 0);
	assert_int_equal(count_entries(f->store, "blobs/sha256"), 0);
}

static void test_dir_digest_stable(void **state)
{
	struct fixture *f = *state;
	struct wr_image_store *s = open_store(f, 0, 0);
	make_rootfs(f, "a", 1000);
	make_rootfs(f, "b", 1000); /* same content, made later, other inodes */
	char d1[72], d2[72], d3[72];
	import_ok(s, fpath(f, "a"), WR_IMAGE_FMT_AUTO, "app:1", d1);
	import_ok(s, fpath(f, "b"), WR_IMAGE_FMT_DIR, "app:2", d2);
	assert_string_equal(d1, d2);
	assert_int_equal(count_entries(f->store, "blobs/sha256"), 1);
	/* an mtime is content */
	set_mtime(fpath(f, "b/etc/hostname"), 2000);
	import_ok(s, fpath(f, "b"), WR_IMAGE_FMT_DIR, "app:3", d3);
	assert_string_not_equal(d1, d3);
	/* an owner is content */
	assert_int_equal(lchown(fpath(f, "a/etc/hostname"), 12, 34), 0);
	import_ok(s, fpath(f, "a"), WR_IMAGE_FMT_DIR, NULL, d2);
	assert_string_not_equal(d1, d2);
	assert_string_not_equal(d3, d2);
	wr_image_store_close(&s);
}

static void test_tar_compressions_same_digest(void **state)
{
	struct fixture *f = *state;
	struct wr_image_store *s = open_store(f, 0, 0);
	const struct tentry e[] = {
	    {"./", 'd', 0755, NULL, NULL, 0, 100},
	    {"./bin/", 'd', 0755, NULL, NULL, 0, 100},
	    {"./bin/sh", 'f', 04755, "#!", NULL, 0, 100},
	    {"./bin/link", 'h', 0, NULL, "./bin/sh", 0, 100},
	    {"./bin/sym", 'l', 0777, NULL, "sh", 0, 100},
	    {"./etc/", 'd', 0700, NULL, NULL, 5, 100},
	    {"./etc/fifo", 'p', 0600, NULL, NULL, 0, 100},
	    {"./etc/x", 'f', 0640, "xattr", NULL, 7, 100, "user.k", "v"},
	    {NULL},
	};
	char d[3][72];
	const char *comp[] = {"none", "gzip", "zstd"};
	for (int i = 0; i < 3; i++) {
		char name[32];
		snprintf(name, sizeof(name), "t%d.tar", i);
		make_tar(fpath(f, name), e, comp[i]);
		import_ok(s, fpath(f, name), WR_IMAGE_FMT_AUTO, NULL, d[i]);
	}
	assert_string_equal(d[0], d[1]);
	assert_string_equal(d[0], d[2]);
	/* the tree as built: modes, owners, links, xattrs */
	const char *x = extract_blob(f, s, d[0]);
	struct stat a, b;
	assert_int_equal(lstat(pathcat(x, "bin/sh"), &a), 0);
	assert_int_equal(a.st_mode & 0777, 0755);
	/* fsck.erofs does not extract set-id bits: look through a mount */
	assert_int_equal(blob_stat(f, d[0], "bin/sh", &a), 0);
	assert_int_equal(a.st_mode & 07777, 04755);
	assert_int_equal(a.st_mtime, 100);
	assert_int_equal(lstat(pathcat(x, "etc"), &b), 0);
	assert_int_equal(b.st_uid, 5);
	assert_int_equal(b.st_mode & 07777, 0700);
	assert_int_equal(b.st_mtime, 100);
	assert_int_equal(lstat(pathcat(x, "etc/fifo"), &b), 0);
	assert_true(S_ISFIFO(b.st_mode));
	assert_int_equal(lstat(pathcat(x, "bin/sym"), &b), 0);
	assert_true(S_ISLNK(b.st_mode));
	assert_int_equal(lstat(pathcat(x, "etc/x"), &b), 0);
	assert_int_equal(b.st_uid, 7);
	wr_image_store_close(&s);
	/* hard link kept: same inode in the mounted blob */
	assert_true(blob_hardlinked(f, d[0], "bin/sh", "bin/link"));
}

static void test_tar_attacks(void **state)
{
	struct fixture *f = *state;
	struct wr_image_store *s = open_store(f, 0, 0);
	struct {
		struct tentry e[4];
		int errnum;
		const char *needle;
	} cases[] = {
	    {{{"a/../../etc/passwd", 'f', 0644, "x"}}, EPERM, "'..' component refused"},
	    {{{"/etc/passwd", 'f', 0644, "x"}}, EPERM, "absolute path refused"},
	    {{{"a", 'l', 0777, NULL, "/etc"}, {"a/passwd", 'f', 0644, "x"}},
	     EPERM,
	     "'a' is a symlink; writing through links is refused"},
	    {{{"d", 'l', 0777, NULL, "."}, {"d/d/x", 'f', 0644, "x"}}, EPERM, "is a symlink"},
	    {{{"dev/sda", 'b', 0600}}, EPERM, "device nodes are refused"},
	    {{{"dev/mem", 'c', 0600}}, EPERM, "device nodes are refused"},
	    {{{"h", 'h', 0, NULL, "/etc/shadow"}}, EPERM, "absolute path refused"},
	    {{{"h", 'h', 0, NULL, "../../etc/shadow"}}, EPERM, "'..' component refused"},
	    {{{"h", 'h', 0, NULL, "nothere"}}, EPERM, "not in the image"},
	    {{{"l", 'l', 0777, NULL, "/etc"}, {"h", 'h', 0, NULL, "l/shadow"}},
	     EPERM,
	     "is a symlink"},
	    {{{"x", 'f', 0644, "x", NULL, 0, 0, "trusted.overlay.opaque", "y"}},
	     EPERM,
	     "xattr 'trusted.overlay.opaque' refused"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		make_tar(fpath(f, "evil.tar"), cases[i].e, "none");
		import_bad(f, s, fpath(f, "evil.tar"), cases[i].errnum, cases[i].needle);
	}
	/* nothing was written outside the staging tree */
	struct stat sb;
	assert_int_equal(lstat(fpath(f, "passwd"), &sb), -1);
	wr_image_store_close(&s);
}

static void test_limits(void **state)
{
	struct fixture *f = *state;
	struct wr_image_store *s = open_store(f, 0, 0);
	/* more entries than max_entries (1000) */
	make_many_tar(fpath(f, "many.tar"), 1500, 1);
	import_bad(f, s, fpath(f, "many.tar"), E2BIG, "more than 1000 entries");
	/* more bytes than max_unpacked_bytes (1 MiB), also in a sparse-free bomb */
	make_many_tar(fpath(f, "big.tar"), 3, 600 * 1024);
	import_bad(f, s, fpath(f, "big.tar"), EFBIG, "passes the limit");
	/* path length bomb */
	char longp[5000];
	memset(longp, 'a', sizeof(longp) - 1);
	longp[sizeof(longp) - 1] = '\0';
	for (size_t i = 100; i < sizeof(longp) - 1; i += 101)
		longp[i] = '/';
	struct tentry e[] = {{longp, 'f', 0644, "x"}, {NULL}};
	make_tar(fpath(f, "long.tar"), e, "none");
	import_bad(f, s, fpath(f, "long.tar"), EPERM, "path longer than");
	wr_image_store_close(&s);
}

static void test_layers_whiteouts(void **state)
{
	struct fixture *f = *state;
	struct wr_image_store *s = open_store(f, 0, 0);
	struct tentry l0[] = {
	    {"etc/", 'd', 0755},
	    {"etc/keep", 'f', 0644, "k"},
	    {"etc/gone", 'f', 0644, "g"},
	    {"opq/", 'd', 0755},
	    {"opq/old", 'f', 0644, "o"},
	    {"opq/sub/", 'd', 0755},
	    {"opq/sub/deep", 'f', 0644, "d"},
	    {"dir/", 'd', 0755},
	    {"dir/f", 'f', 0644, "f"},
	    {NULL},
	};
	struct tentry l1[] = {
	    {"etc/.wh.gone", 'f', 0644},
	    {"opq/new", 'f', 0644, "n"}, /* same layer, before the marker: kept */
	    {"opq/.wh..wh..opq", 'f', 0644},
	    {"opq/new2", 'f', 0644, "n2"},
	    {".wh.dir", 'f', 0644},
	    {"etc/.wh.new", 'f', 0644},	    /* whiteout of something not there */
	    {"ghost/sub/.wh.x", 'f', 0644}, /* ... under directories not there */
	    {NULL},
	};
	make_tar(fpath(f, "l0.tar"), l0, "gzip");
	make_tar(fpath(f, "l1.tar"), l1, "zstd");
	_cleanup_close_ int f0 = open(fpath(f, "l0.tar"), O_RDONLY | O_CLOEXEC);
	_cleanup_close_ int f1 = open(fpath(f, "l1.tar"), O_RDONLY | O_CLOEXEC);
	struct wr_image_layer ls[] = {
	    {f0, "application/vnd.oci.image.layer.v1.tar+gzip", NULL},
	    {f1, "application/vnd.oci.image.layer.v1.tar+zstd", NULL},
	};
	_cleanup_err_ wr_err err = NULL;
	struct wr_image *img = NULL;
	struct wr_image_import_opts o = {.ref = "layered"};
	const char *cfg = "{\"config\":{\"Env\":[\"A=1\",\"PATH=/bin\"],\"WorkingDir\":\"/w\","
			  "\"User\":\"1000:1000\",\"Cmd\":[\"sh\"]}}";
	if (wr_image_import_layers(s, ls, 2, cfg, &o, &img, &err) < 0)
		fail_msg("%s", err->msg);
	assert_int_equal(img->n_layers, 2);
	assert_int_equal(img->config.n_env, 2);
	assert_string_equal(img->config.workdir, "/w");
	assert_string_equal(img->config.user, "1000:1000");
	assert_string_equal(img->refs[0], "layered:latest");
	const char *x = extract_blob(f, s, img->digest);
	assert_true(exists(pathcat(x, "etc/keep")));
	assert_false(exists(pathcat(x, "etc/gone")));
	assert_false(exists(pathcat(x, "etc/.wh.gone")));
	assert_false(exists(pathcat(x, "opq/old")));
	assert_false(exists(pathcat(x, "opq/sub")));
	assert_true(exists(pathcat(x, "opq/new")));
	assert_true(exists(pathcat(x, "opq/new2")));
	assert_false(exists(pathcat(x, "dir")));
	assert_false(exists(pathcat(x, "opq/.wh..wh..opq")));
	assert_false(exists(pathcat(x, "ghost")));
	/* a wrong layer digest is refused */
	wr_err_free(&err);
	ls[1].digest = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
	assert_int_equal(wr_image_import_layers(s, ls, 2, NULL, NULL, NULL, &err), -EBADMSG);
	assert_non_null(strstr(err->msg, "digest mismatch"));
	wr_image_free(&img);
	wr_image_store_close(&s);
}

/* A symlink of one layer never carries a write of a later layer out. */
static void test_symlink_across_layers(void **state)
{
	struct fixture *f = *state;
	struct wr_image_store *s = open_store(f, 0, 0);
	char outside[200];
	snprintf(outside, sizeof(outside), "%s/outside", f->base);
	assert_int_equal(mkdir(outside, 0755), 0);
	struct tentry l0[] = {
	    {"escape", 'l', 0777, NULL, outside}, {"rel", 'l', 0777, NULL, "../../.."}, {NULL}};
	struct tentry l1[] = {{"escape/pwned", 'f', 0644, "x"}, {NULL}};
	struct tentry l2[] = {{"rel/pwned", 'f', 0644, "x"}, {NULL}};
	struct tentry l3[] = {{"h", 'h', 0, NULL, "escape/x"}, {NULL}};
	make_tar(fpath(f, "l0.tar"), l0, "none");
	make_tar(fpath(f, "l1.tar"), l1, "none");
	make_tar(fpath(f, "l2.tar"), l2, "none");
	make_tar(fpath(f, "l3.tar"), l3, "none");
	const char *tops[] = {"l1.tar", "l2.tar", "l3.tar"};
	for (int i = 0; i < 3; i++) {
		_cleanup_close_ int f0 = open(fpath(f, "l0.tar"), O_RDONLY | O_CLOEXEC);
		_cleanup_close_ int f1 = open(fpath(f, tops[i]), O_RDONLY | O_CLOEXEC);
		struct wr_image_layer ls[] = {{f0, NULL, NULL}, {f1, NULL, NULL}};
		_cleanup_err_ wr_err err = NULL;
		assert_int_equal(wr_image_import_layers(s, ls, 2, NULL, NULL, NULL, &err), -EPERM);
		assert_non_null(strstr(err->msg, "is a symlink"));
		assert_int_equal(count_entries(f->base, "outside"), 0);
		assert_int_equal(count_entries(f->store, "tmp"), 0);
	}
	wr_image_store_close(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_dir_digest_stable, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_tar_compressions_same_digest, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_tar_attacks, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_limits, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_layers_whiteouts, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_symlink_across_layers, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
