/* The microVM files API's host half against a lying guest: a fake guest
 * on a socketpair (wr_vm_attach_fds, no QEMU) answers FS requests with
 * what a hostile guest could send. Every case must end in a clean error
 * (EIO for nonsense), never a crash, an unbounded allocation or a hang. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/frame.h"
#include "tiers/microvm_files.h"
#include "tiers/microvm_internal.h"

enum mode {
	M_GOOD_ERRNO,  /* a proper error: ENOENT */
	M_BAD_ERRNO,   /* errno out of range */
	M_BAD_DONE,    /* not JSON */
	M_BAD_STAT,    /* an unknown file type */
	M_NEG_SIZE,    /* a negative size */
	M_MORE_DATA,   /* a read: more bytes than asked for */
	M_LIST_FLOOD,  /* more entries than WR_FS_LIST_MAX_ENTRIES */
	M_LIST_BAD,    /* an entry without a path */
	M_STRAY,       /* frames for ids nobody asked, then a good stat */
	M_GARBAGE,     /* a malformed header */
	M_WRITE_COUNT, /* counts a write's bytes, answers ok */
};

struct fake {
	int fd;
	enum mode mode;
	uint64_t write_bytes;
	bool write_end, write_killed;
};

static void done(int fd, uint32_t id, const char *json)
{
	wr_frame_write(fd, WR_FRAME_FS_DONE, id, json, (uint32_t)strlen(json));
}

static const char *good_stat = "{\"ok\":true,\"stat\":{\"type\":\"file\",\"size\":3,\"mode\":420,"
			       "\"uid\":0,\"gid\":0,\"mtime_ns\":1}}";

static void answer(struct fake *g, uint32_t id)
{
	switch (g->mode) {
	case M_GOOD_ERRNO:
		done(g->fd, id, "{\"errno\":2,\"message\":\"stat /x: No such file\"}");
		break;
	case M_BAD_ERRNO: done(g->fd, id, "{\"errno\":99999,\"message\":\"x\"}"); break;
	case M_BAD_DONE: wr_frame_write(g->fd, WR_FRAME_FS_DONE, id, "{nope", 5); break;
	case M_BAD_STAT:
		done(g->fd, id,
		     "{\"ok\":true,\"stat\":{\"type\":\"socketish\",\"size\":1,\"mode\":1,"
		     "\"uid\":0,\"gid\":0,\"mtime_ns\":1}}");
		break;
	case M_NEG_SIZE:
		done(g->fd, id,
		     "{\"ok\":true,\"stat\":{\"type\":\"file\",\"size\":-5,\"mode\":1,"
		     "\"uid\":0,\"gid\":0,\"mtime_ns\":1}}");
		break;
	case M_MORE_DATA: {
		static char big[8192];
		wr_frame_write(g->fd, WR_FRAME_FS_DATA, id, big, sizeof(big));
		done(g->fd, id, "{\"ok\":true,\"written\":10,\"truncated\":false}");
		break;
	}
	case M_LIST_FLOOD: {
		/* 10,000 entries a batch (under 1 MiB), 11 batches: over 100,000 */
		size_t cap = 10000 * 96 + 16;
		char *b = malloc(cap);
		size_t n = 0;
		b[n++] = '[';
		for (int i = 0; i < 10000; i++)
			n += (size_t)snprintf(b + n, cap - n,
					      "%s{\"path\":\"f%d\",\"type\":\"file\",\"size\":0,"
					      "\"mode\":0,\"uid\":0,\"gid\":0,\"mtime_ns\":0}",
					      i ? "," : "", i);
		b[n++] = ']';
		for (int k = 0; k < 11; k++)
			if (wr_frame_write(g->fd, WR_FRAME_FS_LIST, id, b, (uint32_t)n) < 0)
				abort(); /* the test's own mistake, not the host's */
		free(b);
		done(g->fd, id, "{\"ok\":true}");
		break;
	}
	case M_LIST_BAD: {
		const char *l = "[{\"type\":\"file\",\"size\":0,\"mode\":0,\"uid\":0,\"gid\":0,"
				"\"mtime_ns\":0}]";
		wr_frame_write(g->fd, WR_FRAME_FS_LIST, id, l, (uint32_t)strlen(l));
		done(g->fd, id, "{\"ok\":true}");
		break;
	}
	case M_STRAY:
		wr_frame_write(g->fd, WR_FRAME_FS_DATA, id + 77, "lie", 3);
		done(g->fd, id + 78, "{\"ok\":true}");
		wr_frame_write(g->fd, WR_FRAME_FS_LIST, id + 79, "[]", 2);
		done(g->fd, id, good_stat);
		break;
	case M_GARBAGE: {
		uint8_t junk[WR_FRAME_HDR] = {0xff, 0xff, 0xff, 0xff, 99};
		if (write(g->fd, junk, sizeof(junk)) < 0)
			return;
		break;
	}
	case M_WRITE_COUNT: break; /* answered at the end of the data */
	}
}

static void *fake_guest(void *arg)
{
	struct fake *g = arg;
	struct wr_frame_reader rd;
	wr_frame_reader_init(&rd);
	static char buf[65536];
	for (;;) {
		ssize_t n = read(g->fd, buf, sizeof(buf));
		if (n <= 0 || wr_frame_feed(&rd, buf, (size_t)n) < 0)
			break;
		struct wr_frame f;
		while (wr_frame_next(&rd, &f) == 1) {
			if (f.type == WR_FRAME_FS)
				answer(g, f.id);
			if (f.type == WR_FRAME_KILL && g->mode == M_WRITE_COUNT) {
				g->write_killed = true;
				done(g->fd, f.id, "{\"errno\":104,\"message\":\"read input\"}");
			}
			if (f.type == WR_FRAME_FS_DATA && g->mode == M_WRITE_COUNT) {
				g->write_bytes += f.len;
				if (f.len == 0) {
					g->write_end = true;
					done(g->fd, f.id, "{\"ok\":true}");
				}
			}
		}
	}
	wr_frame_reader_free(&rd);
	return NULL;
}

struct rig {
	struct fake g;
	pthread_t t;
	int console;
	struct wr_vm *vm;
	struct wr_vm_fsctx ctx;
	struct wr_fs fs;
};

static void rig_up(struct rig *r, enum mode m)
{
	int ag[2], co[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ag), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, co), 0);
	wr_err err = NULL;
	assert_int_equal(wr_vm_attach_fds(ag[0], co[0], &r->vm, &err), 0);
	r->g = (struct fake){.fd = ag[1], .mode = m};
	r->console = co[1];
	assert_int_equal(pthread_create(&r->t, NULL, fake_guest, &r->g), 0);
	r->ctx = (struct wr_vm_fsctx){.vm = r->vm};
	wr_vm_fs_view(&r->ctx, &r->fs);
}

static void rig_down(struct rig *r)
{
	wr_err err = NULL;
	shutdown(r->g.fd, SHUT_RDWR);
	pthread_join(r->t, NULL);
	close(r->g.fd);
	close(r->console);
	wr_vm_destroy(&r->vm, &err);
	wr_err_free(&err);
}

static int stat_errno(enum mode m)
{
	struct rig r;
	rig_up(&r, m);
	struct wr_fs_stat st = {0};
	wr_err err = NULL;
	int rc = wr_fs_stat(&r.fs, "/x", &st, &err);
	int e = rc < 0 ? wr_err_code(err) : 0;
	wr_fs_stat_free(&st);
	wr_err_free(&err);
	rig_down(&r);
	return e;
}

static void test_answers_are_checked(void **state)
{
	(void)state;
	assert_int_equal(stat_errno(M_GOOD_ERRNO), ENOENT);
	assert_int_equal(stat_errno(M_BAD_ERRNO), EIO);
	assert_int_equal(stat_errno(M_BAD_DONE), EIO);
	assert_int_equal(stat_errno(M_BAD_STAT), EIO);
	assert_int_equal(stat_errno(M_NEG_SIZE), EIO);
	/* frames for other ids are dropped, the real answer counts */
	assert_int_equal(stat_errno(M_STRAY), 0);
	/* a broken stream fails the request, the channel is gone after */
	assert_int_equal(stat_errno(M_GARBAGE), EIO);
}

static void test_read_more_than_asked(void **state)
{
	(void)state;
	struct rig r;
	rig_up(&r, M_MORE_DATA);
	char *data = NULL;
	size_t len = 0;
	bool trunc = false;
	wr_err err = NULL;
	assert_true(wr_fs_read(&r.fs, "/x", 10, &data, &len, &trunc, &err) < 0);
	assert_int_equal(wr_err_code(err), EIO);
	assert_non_null(strstr(err->msg, "more bytes"));
	wr_err_free(&err);
	free(data);
	rig_down(&r);
}

static int count_cb(void *ctx, const char *rel, const struct wr_fs_stat *st)
{
	(void)rel;
	(void)st;
	(*(size_t *)ctx)++;
	return 0;
}

static void test_list_bounds(void **state)
{
	(void)state;
	enum mode modes[] = {M_LIST_FLOOD, M_LIST_BAD};
	for (size_t i = 0; i < 2; i++) {
		struct rig r;
		rig_up(&r, modes[i]);
		size_t n = 0;
		wr_err err = NULL;
		assert_true(wr_fs_list(&r.fs, "/", 1, count_cb, &n, &err) < 0);
		assert_int_equal(wr_err_code(err), EIO);
		assert_int_equal(n, 0); /* nothing handed on from a bad answer */
		wr_err_free(&err);
		rig_down(&r);
	}
}

static void test_write_sends_at_most_max_plus_one(void **state)
{
	(void)state;
	struct rig r;
	rig_up(&r, M_WRITE_COUNT);
	int p[2];
	assert_int_equal(pipe(p), 0);
	static char blob[60000]; /* fits a pipe's buffer */
	/* more than max in the pipe: the host forwards max + 1 (the guest's
	 * fsops then says EFBIG), never the whole input */
	ssize_t put = write(p[1], blob, 60000);
	assert_int_equal(put, 60000);
	close(p[1]);
	wr_err err = NULL;
	assert_int_equal(wr_fs_write_from_fd(&r.fs, "/f", p[0], 1000, 0644, false, &err), 0);
	assert_true(r.g.write_end);
	assert_int_equal(r.g.write_bytes, 1001);
	close(p[0]);
	wr_err_free(&err);
	rig_down(&r);
}

static void test_failed_input_abandons_the_write(void **state)
{
	(void)state;
	struct rig r;
	rig_up(&r, M_WRITE_COUNT);
	int dir = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* read: EISDIR */
	assert_true(dir >= 0);
	wr_err err = NULL;
	assert_true(wr_fs_write_from_fd(&r.fs, "/f", dir, 1000, 0644, false, &err) < 0);
	close(dir);
	wr_err_free(&err);
	rig_down(&r); /* joins the fake guest: it saw everything */
	/* a KILL, never the end frame that would commit a partial file */
	assert_true(r.g.write_killed);
	assert_false(r.g.write_end);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_answers_are_checked),
	    cmocka_unit_test(test_read_more_than_asked),
	    cmocka_unit_test(test_list_bounds),
	    cmocka_unit_test(test_write_sends_at_most_max_plus_one),
	    cmocka_unit_test(test_failed_input_abandons_the_write),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
