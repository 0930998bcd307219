/* The microVM tier's host half against a hostile or hung guest: a fake
 * guest on a socketpair (wr_vm_attach_fds), no QEMU. What a guest sends
 * must never crash warrend, grow its memory or hold a caller. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/frame.h"
#include "tiers/microvm_internal.h"

struct fake {
	int fd;
	enum { ANSWER_FLOOD, ANSWER_NOTHING } mode;
	uint64_t flood_bytes;
};

/* Reads frames; answers PING with PONG; answers EXEC as its mode says. */
static void *fake_guest(void *arg)
{
	struct fake *g = arg;
	struct wr_frame_reader rd;
	wr_frame_reader_init(&rd);
	static char buf[65536];
	static uint8_t chunk[1u << 20];
	memset(chunk, 'A', sizeof(chunk));
	for (;;) {
		ssize_t n = read(g->fd, buf, sizeof(buf));
		if (n <= 0 || wr_frame_feed(&rd, buf, (size_t)n) < 0)
			break;
		struct wr_frame f;
		while (wr_frame_next(&rd, &f) == 1) {
			if (f.type == WR_FRAME_PING && g->mode != ANSWER_NOTHING)
				wr_frame_write(g->fd, WR_FRAME_PONG, f.id, NULL, 0);
			if (f.type != WR_FRAME_EXEC || g->mode != ANSWER_FLOOD)
				continue;
			uint32_t id = f.id;
			/* output of an unknown command, then the flood */
			wr_frame_write(g->fd, WR_FRAME_STDOUT, id + 1000, "lie", 3);
			for (uint64_t sent = 0; sent < g->flood_bytes; sent += sizeof(chunk))
				if (wr_frame_write(g->fd, WR_FRAME_STDOUT, id, chunk,
						   sizeof(chunk)) < 0)
					goto out;
			const char *ex = "{\"exit_code\":7,\"signal\":0,\"reason\":\"exited\"}";
			wr_frame_write(g->fd, WR_FRAME_EXIT, id, ex, (uint32_t)strlen(ex));
		}
	}
out:
	wr_frame_reader_free(&rd);
	return NULL;
}

static struct wr_vm *attach(struct fake *g, pthread_t *t, int *console_peer)
{
	int ag[2], co[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ag), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, co), 0);
	struct wr_vm *vm = NULL;
	wr_err err = NULL;
	assert_int_equal(wr_vm_attach_fds(ag[0], co[0], &vm, &err), 0);
	g->fd = ag[1];
	*console_peer = co[1];
	if (t)
		assert_int_equal(pthread_create(t, NULL, fake_guest, g), 0);
	return vm;
}

static int exec_sh(struct wr_vm *vm, uint64_t timeout_ms, uint64_t cap, struct wr_exec_result *res,
		   wr_err *err)
{
	const char *argv[] = {"sh", "-c", "anything", NULL};
	struct wr_exec_spec ex = {.argv = argv,
				  .user = -1,
				  .group = -1,
				  .timeout_ms = timeout_ms,
				  .output_cap = cap,
				  .stdin_fd = -1};
	return wr_vm_exec(vm, &ex, res, err);
}

/* 64 MiB of output for a command capped at 4 KiB: the host keeps 4 KiB,
 * reads and drops the rest, and the command's exit still arrives. */
static void test_flood_is_capped(void **state)
{
	(void)state;
	struct fake g = {.mode = ANSWER_FLOOD, .flood_bytes = 64ull << 20};
	pthread_t t;
	int con;
	struct wr_vm *vm = attach(&g, &t, &con);
	wr_err err = NULL;
	assert_int_equal(wr_vm_ping(vm, 5000, &err), 0);
	struct wr_exec_result res;
	assert_int_equal(exec_sh(vm, 60000, 4096, &res, &err), 0);
	assert_int_equal(res.out_len, 4096);
	assert_true(res.out_truncated);
	assert_int_equal(res.exit_code, 7);
	wr_exec_result_free(&res);
	/* the console can be flooded too: only its last 64 KiB are kept */
	static char junk[1u << 20];
	memset(junk, 'c', sizeof(junk));
	for (int i = 0; i < 8; i++)
		assert_true(write(con, junk, sizeof(junk)) > 0);
	assert_int_equal(wr_vm_ping(vm, 5000, &err), 0);
	char *tail = wr_vm_console_tail(vm);
	assert_true(strlen(tail) <= VM_CONSOLE_RING);
	free(tail);
	assert_int_equal(wr_vm_destroy(&vm, &err), 0);
	close(g.fd);
	close(con);
	pthread_join(t, NULL);
}

/* Garbage on the channel: the VM is marked broken, its commands fail with
 * a clear error, nothing else happens. */
static void test_garbage_breaks_the_channel(void **state)
{
	(void)state;
	const uint8_t bad[][WR_FRAME_HDR] = {
	    {1, 0, 0, 0, 0xff, 0, 0, 0, 1, 0, 0, 0},			    /* unknown type */
	    {0, 0, 0, 0, WR_FRAME_STDOUT, 1, 0, 0, 1, 0, 0, 0},		    /* reserved flag */
	    {0xff, 0xff, 0xff, 0x7f, WR_FRAME_STDOUT, 0, 0, 0, 1, 0, 0, 0}, /* 2 GiB */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct fake g = {.mode = ANSWER_NOTHING};
		int con;
		struct wr_vm *vm = attach(&g, NULL, &con);
		assert_int_equal(write(g.fd, bad[i], WR_FRAME_HDR), WR_FRAME_HDR);
		struct wr_exec_result res;
		wr_err err = NULL;
		/* the reader may see the garbage before or after the exec is
		 * sent: either way the command fails, fast */
		assert_true(exec_sh(vm, 60000, 0, &res, &err) < 0);
		assert_non_null(strstr(err->msg, "microvm: agent:"));
		wr_err_free(&err);
		assert_true(wr_vm_ping(vm, 1000, &err) < 0);
		wr_err_free(&err);
		assert_int_equal(wr_vm_destroy(&vm, &err), 0);
		close(g.fd);
		close(con);
	}
}

/* A guest that stops answering: a ping says so in its timeout, and a
 * command is ended by the host's own deadline (timeout + grace, KILL,
 * grace), reported as a timeout. */
static void test_hung_guest(void **state)
{
	(void)state;
	struct fake g = {.mode = ANSWER_NOTHING};
	pthread_t t;
	int con;
	struct wr_vm *vm = attach(&g, &t, &con);
	wr_err err = NULL;
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	assert_int_equal(wr_vm_ping(vm, 300, &err), -ETIMEDOUT);
	clock_gettime(CLOCK_MONOTONIC, &b);
	assert_true(b.tv_sec - a.tv_sec < 5);
	assert_non_null(strstr(err->msg, "did not answer"));
	wr_err_free(&err);
	struct wr_exec_result res;
	assert_int_equal(exec_sh(vm, 100, 0, &res, &err), 0);
	assert_int_equal(res.reason, WR_EXIT_TIMEOUT);
	assert_true(res.duration_ns < 30ull * 1000000000ull);
	wr_exec_result_free(&res);
	assert_int_equal(wr_vm_destroy(&vm, &err), 0);
	close(g.fd);
	close(con);
	pthread_join(t, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_flood_is_capped),
	    cmocka_unit_test(test_garbage_breaks_the_channel),
	    cmocka_unit_test(test_hung_guest),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
