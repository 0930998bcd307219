/* The agent protocol's framing: what a hostile or broken peer can send. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/frame.h"

static size_t enc(uint8_t *out, uint8_t type, uint32_t id, const char *p)
{
	uint32_t len = (uint32_t)strlen(p);
	wr_frame_header(out, type, id, len);
	memcpy(out + WR_FRAME_HDR, p, len);
	return WR_FRAME_HDR + len;
}

static void test_byte_by_byte_and_batched(void **state)
{
	(void)state;
	uint8_t buf[256];
	size_t n = enc(buf, WR_FRAME_STDOUT, 7, "hello");
	n += enc(buf + n, WR_FRAME_EXIT, 7, "{}");
	n += enc(buf + n, WR_FRAME_STDIN, 9, "");
	struct wr_frame_reader r;
	wr_frame_reader_init(&r);
	struct wr_frame f;
	int got = 0;
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(wr_frame_feed(&r, buf + i, 1), 0);
		int k;
		while ((k = wr_frame_next(&r, &f)) == 1) {
			if (got == 0) {
				assert_int_equal(f.type, WR_FRAME_STDOUT);
				assert_int_equal(f.id, 7);
				assert_memory_equal(f.payload, "hello", 5);
			} else if (got == 1) {
				assert_int_equal(f.type, WR_FRAME_EXIT);
				assert_int_equal(f.len, 2);
			} else {
				assert_int_equal(f.type, WR_FRAME_STDIN);
				assert_int_equal(f.len, 0); /* EOF marker */
				assert_int_equal(f.id, 9);
			}
			got++;
		}
		assert_int_equal(k, 0);
	}
	assert_int_equal(got, 3);
	/* all at once */
	assert_int_equal(wr_frame_feed(&r, buf, n), 0);
	got = 0;
	while (wr_frame_next(&r, &f) == 1)
		got++;
	assert_int_equal(got, 3);
	wr_frame_reader_free(&r);
}

static void test_malformed_headers(void **state)
{
	(void)state;
	uint8_t h[WR_FRAME_HDR];
	struct wr_frame f;
	struct {
		uint8_t type;
		uint32_t len;
		int byte; /* a reserved byte set, or -1 */
	} bad[] = {{0, 0, -1},
		   {WR_FRAME_TYPE_MAX + 1, 0, -1},
		   {255, 0, -1},
		   {WR_FRAME_STDOUT, WR_FRAME_MAX + 1, -1},
		   {WR_FRAME_STDOUT, UINT32_MAX, -1},
		   {WR_FRAME_STDOUT, 0, 5},
		   {WR_FRAME_STDOUT, 0, 7}};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct wr_frame_reader r;
		wr_frame_reader_init(&r);
		wr_frame_header(h, bad[i].type, 1, bad[i].len);
		if (bad[i].byte >= 0)
			h[bad[i].byte] = 1;
		assert_int_equal(wr_frame_feed(&r, h, sizeof(h)), 0);
		assert_int_equal(wr_frame_next(&r, &f), -EBADMSG);
		wr_frame_reader_free(&r);
	}
}

/* A peer announcing the largest frame and trickling it in never makes the
 * reader hold more than one frame and one read. */
static void test_bounded_buffering(void **state)
{
	(void)state;
	struct wr_frame_reader r;
	wr_frame_reader_init(&r);
	uint8_t h[WR_FRAME_HDR];
	wr_frame_header(h, WR_FRAME_STDOUT, 1, WR_FRAME_MAX);
	assert_int_equal(wr_frame_feed(&r, h, sizeof(h)), 0);
	static uint8_t chunk[65536];
	struct wr_frame f;
	size_t fed = 0;
	while (fed < WR_FRAME_MAX) {
		assert_int_equal(wr_frame_next(&r, &f), 0);
		size_t k = WR_FRAME_MAX - fed < sizeof(chunk) ? WR_FRAME_MAX - fed : sizeof(chunk);
		assert_int_equal(wr_frame_feed(&r, chunk, k), 0);
		fed += k;
	}
	assert_int_equal(wr_frame_next(&r, &f), 1);
	assert_int_equal(f.len, WR_FRAME_MAX);
	assert_true(r.cap <= 2 * (WR_FRAME_HDR + (size_t)WR_FRAME_MAX) + 65536);
	/* one read bigger than any frame could be is refused */
	uint8_t *huge = calloc(1, 2 * WR_FRAME_MAX + 64);
	assert_int_equal(wr_frame_feed(&r, huge, 2 * WR_FRAME_MAX + 64), -ENOMEM);
	free(huge);
	wr_frame_reader_free(&r);
}

static void test_write_over_a_socket(void **state)
{
	(void)state;
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(wr_frame_write(sv[0], WR_FRAME_PING, 42, "abc", 3), 0);
	assert_int_equal(wr_frame_write(sv[0], WR_FRAME_PONG, 43, NULL, 0), 0);
	assert_int_equal(wr_frame_write(sv[0], WR_FRAME_PING, 1, "x", WR_FRAME_MAX + 1), -EMSGSIZE);
	uint8_t buf[64];
	ssize_t n = read(sv[1], buf, sizeof(buf));
	assert_int_equal(n, 2 * WR_FRAME_HDR + 3);
	struct wr_frame_reader r;
	wr_frame_reader_init(&r);
	assert_int_equal(wr_frame_feed(&r, buf, (size_t)n), 0);
	struct wr_frame f;
	assert_int_equal(wr_frame_next(&r, &f), 1);
	assert_int_equal(f.id, 42);
	assert_memory_equal(f.payload, "abc", 3);
	assert_int_equal(wr_frame_next(&r, &f), 1);
	assert_int_equal(f.type, WR_FRAME_PONG);
	assert_int_equal(wr_frame_next(&r, &f), 0);
	wr_frame_reader_free(&r);
	close(sv[0]);
	close(sv[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_byte_by_byte_and_batched),
	    cmocka_unit_test(test_malformed_headers),
	    cmocka_unit_test(test_bounded_buffering),
	    cmocka_unit_test(test_write_over_a_socket),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
