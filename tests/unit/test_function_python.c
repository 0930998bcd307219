/* The function tier's Python zygote: calls run submitted code in a fork of
 * a warm interpreter, with the same confinement as any call. Needs the
 * Python test image (WARREN_TEST_PYIMAGE, scripts/mkimage-python.sh). */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "function_fixture.h"

static struct wr_function_pool *g_pool;

static int setup(void **state)
{
	(void)state;
	const char *img = getenv("WARREN_TEST_PYIMAGE");
	if (img == NULL || fx_setup("warren-fnpy") < 0)
		return -1;
	static const char *const preload[] = {"json", "decimal"};
	g_pool = fx_pool(img, "python", preload, 2, "tenant-py");
	return g_pool ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	wr_function_pool_destroy(&g_pool, NULL);
	return fx_teardown();
}

static struct wr_call_result py(const char *code, uint64_t timeout_ms)
{
	return fx_call(g_pool, &(struct wr_call_spec){.code = code, .timeout_ms = timeout_ms});
}

static void test_code_runs_warm(void **state)
{
	(void)state;
	struct wr_call_result r = py("import sys\nprint(sum(range(1000)))\n"
				     "print('json' in sys.modules, 'decimal' in sys.modules)\n"
				     "sys.stderr.write('e\\n')\nsys.exit(4)",
				     0);
	assert_int_equal(r.reason, WR_EXIT_EXITED);
	assert_int_equal(r.exit_code, 4);
	assert_string_equal(r.out, "499500\nTrue True\n");
	assert_string_equal(r.err, "e\n");
	wr_call_result_free(&r);
	r = py("raise ValueError('boom')", 0);
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "ValueError: boom"));
	wr_call_result_free(&r);
}

static void test_same_confinement(void **state)
{
	(void)state;
	struct wr_call_result r =
	    py("import os\n"
	       "st = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines()"
	       " if ':\\t' in l)\n"
	       "print(st['NoNewPrivs'].strip(), st['Seccomp'].strip(), st['CapEff'].strip())\n"
	       "print(os.getuid(), os.getpid(), os.getcwd(), sorted(os.listdir('/proc'))[:1])\n"
	       "try:\n    open('/etc/x', 'w')\nexcept OSError as e:\n    print(e.errno)\n"
	       "try:\n    os.unshare(0)\nexcept AttributeError:\n    pass\n"
	       "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
	       "print(libc.mount(b'none', b'/tmp', b'tmpfs', 0, None), ctypes.get_errno())\n"
	       "print(sorted(os.listdir('/proc/self/fd')))",
	       0);
	assert_int_equal(r.exit_code, 0);
	/* On x86-64 the call runs in the holder's child (PID 2 of the call's
	 * own pid namespace, warren-pyzygote.py), elsewhere in the slot (PID 1). */
#if defined(__x86_64__)
	assert_string_equal(r.out, "1 2 0000000000000000\n1000 2 /work ['1']\n30\n-1 1\n"
				   "['0', '1', '2', '3']\n");
#else
	assert_string_equal(r.out, "1 2 0000000000000000\n1000 1 /work ['1']\n30\n-1 1\n"
				   "['0', '1', '2', '3']\n");
#endif
	wr_call_result_free(&r);
}

static void test_files_stdin_and_file_argv(void **state)
{
	(void)state;
	struct wr_call_file files[] = {
	    {.path = "main.py", .data = "import sys\nprint(sys.argv[1:], input())\n", .len = 39}};
	const char *argv[] = {"main.py", "a", "b", NULL};
	struct wr_call_result r = fx_call(g_pool, &(struct wr_call_spec){.argv = argv,
									 .files = files,
									 .n_files = 1,
									 .stdin_data = "line\n",
									 .stdin_len = 5});
	assert_int_equal(r.exit_code, 0);
	assert_string_equal(r.out, "['a', 'b'] line\n");
	wr_call_result_free(&r);
}

static void test_interpreter_state_not_shared(void **state)
{
	(void)state;
	struct wr_call_result r =
	    py("import builtins, json\nbuiltins.LEAK = 1\njson.dumps = None\nprint('set')", 0);
	assert_string_equal(r.out, "set\n");
	wr_call_result_free(&r);
	r = py("import builtins, json\nprint(hasattr(builtins, 'LEAK'), json.dumps([1]))", 0);
	assert_string_equal(r.out, "False [1]\n");
	wr_call_result_free(&r);
}

struct bg {
	pthread_t t;
	struct wr_call_result r;
	const char *code;
};

static void *bg_main(void *arg)
{
	struct bg *b = arg;
	b->r = py(b->code, 20000);
	return NULL;
}

static void test_abstract_sockets_and_signals_scoped(void **state)
{
	(void)state;
	struct bg a = {.code =
			   "import socket, time\n"
			   "s = socket.socket(socket.AF_UNIX)\n"
			   "s.bind(b'\\0warren-fn-test')\ns.listen()\ntime.sleep(3)\nprint('a')"};
	assert_int_equal(pthread_create(&a.t, NULL, bg_main, &a), 0);
	usleep(1500000);
	struct wr_call_result r =
	    py("import socket, os\n"
	       "c = socket.socket(socket.AF_UNIX)\n"
	       "try:\n    c.connect(b'\\0warren-fn-test')\n    print('connected')\n"
	       "except OSError as e:\n    print('refused', e.errno)\n",
	       0);
	assert_non_null(strstr(r.out, "refused"));
	wr_call_result_free(&r);
	pthread_join(a.t, NULL);
	assert_string_equal(a.r.out, "a\n");
	wr_call_result_free(&a.r);
}

/* Listener A holds TCP and UDP 127.0.0.1:47123 and an abstract name; B,
 * started while A listens, can neither reach them nor find them taken:
 * each call has a network namespace of its own. Timestamps prove that B
 * ran while A listened. */
static const char net_a[] =
    "import socket, time\n"
    "t = socket.socket(); t.bind(('127.0.0.1', 47123)); t.listen()\n"
    "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(('127.0.0.1', 47123))\n"
    "a = socket.socket(socket.AF_UNIX); a.bind(b'\\0warren-fn-net'); a.listen()\n"
    "t0 = time.time(); time.sleep(6)\nprint('%.3f %.3f' % (t0, time.time()))\n";
static const char net_b[] =
    "import socket, time\n"
    "out = ['%.3f' % time.time()]\n"
    "c = socket.socket()\n"
    "try:\n    c.connect(('127.0.0.1', 47123)); out.append('tcp-connected')\n"
    "except OSError:\n    out.append('tcp-refused')\n"
    "d = socket.socket(socket.AF_UNIX)\n"
    "try:\n    d.connect(b'\\0warren-fn-net'); out.append('abstract-connected')\n"
    "except OSError:\n    out.append('abstract-refused')\n"
    "t = socket.socket(); t.bind(('127.0.0.1', 47123)); t.listen()\n"
    "c2 = socket.socket(); c2.connect(('127.0.0.1', 47123)); out.append('own-tcp')\n"
    "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(('127.0.0.1', 47123))\n"
    "a = socket.socket(socket.AF_UNIX); a.bind(b'\\0warren-fn-net'); out.append('own-names')\n"
    "out.append('%.3f' % time.time())\nprint(' '.join(out))\n";

struct netcall {
	pthread_t t;
	struct wr_function_pool *pool;
	const char *code;
	struct wr_call_result r;
};

static void *net_main(void *arg)
{
	struct netcall *n = arg;
	if (n->pool != g_pool) {
		const char *argv[] = {"python3", "-c", n->code, NULL};
		n->r = fx_call(n->pool, &(struct wr_call_spec){.argv = argv, .timeout_ms = 30000});
	} else {
		n->r =
		    fx_call(n->pool, &(struct wr_call_spec){.code = n->code, .timeout_ms = 30000});
	}
	return NULL;
}

static void net_check(struct wr_function_pool *pool)
{
	struct netcall a = {.pool = pool, .code = net_a}, b = {.pool = pool, .code = net_b};
	assert_int_equal(pthread_create(&a.t, NULL, net_main, &a), 0);
	usleep(2000000);
	net_main(&b);
	pthread_join(a.t, NULL);
	if (a.r.exit_code || b.r.exit_code)
		fprintf(stderr, "net: a %d %s%s b %d %s%s\n", a.r.exit_code, a.r.out, a.r.err,
			b.r.exit_code, b.r.out, b.r.err);
	assert_int_equal(a.r.exit_code, 0);
	assert_int_equal(b.r.exit_code, 0);
	double a0, a1, b0, b1;
	char rest[128];
	assert_int_equal(sscanf(a.r.out, "%lf %lf", &a0, &a1), 2);
	assert_int_equal(sscanf(b.r.out, "%lf %127[a-z -] %lf", &b0, rest, &b1), 3);
	assert_string_equal(rest, "tcp-refused abstract-refused own-tcp own-names ");
	/* B ran while A held its sockets (else the test proves nothing). */
	assert_true(a0 < b0 && b1 < a1);
	wr_call_result_free(&a.r);
	wr_call_result_free(&b.r);
}

static void test_calls_have_their_own_network(void **state)
{
	(void)state;
	net_check(g_pool); /* Python zygote */
	/* The native zygote, running the image's python3 as a command. */
	struct wr_function_pool *native =
	    fx_pool(getenv("WARREN_TEST_PYIMAGE"), NULL, NULL, 0, "tenant-py");
	assert_non_null(native);
	net_check(native);
	wr_function_pool_destroy(&native, NULL);
}

static void test_python_bombs(void **state)
{
	(void)state;
	struct wr_call_result r = fx_call(
	    g_pool, &(struct wr_call_spec){.code = "x = bytearray(400 << 20)\nprint(len(x))",
					   .memory_bytes = 64ull << 20});
	assert_int_equal(r.reason, WR_EXIT_OOM);
	wr_call_result_free(&r);
	r = fx_call(g_pool,
		    &(struct wr_call_spec){.code = "while True: pass", .cpu_time_ms = 1000});
	assert_int_equal(r.reason, WR_EXIT_CPU_TIME);
	wr_call_result_free(&r);
	r = py("import time\ntime.sleep(10)", 400);
	assert_int_equal(r.reason, WR_EXIT_TIMEOUT);
	wr_call_result_free(&r);
	r = fx_call(g_pool, &(struct wr_call_spec){.code = "import sys\nwhile True: "
							   "sys.stdout.write('y' * 65536)",
						   .output_cap = 100000});
	if (!r.out_truncated)
		fprintf(stderr, "flood: %s %d out %zu err %.300s\n", wr_exit_reason_name(r.reason),
			r.exit_code, r.out_len, r.err);
	assert_true(r.out_truncated);
	assert_int_equal(r.out_len, 100000);
	wr_call_result_free(&r);
	/* (10 s: 64 forks of an interpreter take seconds on a loaded machine.) */
	r = py("import os\nfor i in range(200):\n    if os.fork() == 0:\n        import time\n"
	       "        time.sleep(30)\nprint('forked')",
	       10000);
	/* pids.max (64) stops the forks; the sleepers die with the call. */
	assert_int_equal(r.exit_code, 1);
	assert_non_null(strstr(r.err, "BlockingIOError"));
	wr_call_result_free(&r);
	r = py("print('still fine')", 0);
	assert_string_equal(r.out, "still fine\n");
	wr_call_result_free(&r);
}

static void test_bad_preload_is_reported(void **state)
{
	(void)state;
	static const char *const bad[] = {"no_such_module_xyz"};
	struct wr_function_pool_spec ps = {.image = getenv("WARREN_TEST_PYIMAGE"),
					   .language = "python",
					   .preload = bad,
					   .n_preload = 1};
	struct wr_function_pool *p = NULL;
	wr_err err = NULL;
	assert_true(wr_function_pool_create(&ps, &p, &err) < 0);
	assert_non_null(strstr(err->msg, "no_such_module_xyz"));
	wr_err_free(&err);
	static const char *const evil[] = {"os; import x"};
	ps.preload = evil;
	assert_true(wr_function_pool_create(&ps, &p, &err) < 0);
	assert_string_equal(err->field, "preload");
	wr_err_free(&err);
}

/* The slot rehearses the call's path (warren-pyzygote.py, rehearse()) before
 * the call arrives: the call's process, cloned after the rehearsal, finds
 * the pages that path writes and runs already its own and takes (nearly)
 * no page fault before the submitted code starts (each one a trap: about
 * 50 us on a paravirtualised host). ru_minflt of RUSAGE_SELF counts that
 * process's faults since it was cloned, up to the getrusage of the code. */
static void test_call_path_prefaulted(void **state)
{
	(void)state;
#if defined(__x86_64__)
	long best = -1;
	for (int i = 0; i < 4; i++) {
		struct wr_call_result r =
		    py("import resource\nprint(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)",
		       0);
		assert_int_equal(r.exit_code, 0);
		long n = atol(r.out);
		fprintf(stderr, "call path faults: %ld\n", n);
		if (best < 0 || n < best)
			best = n;
		wr_call_result_free(&r);
	}
	/* Without the rehearsal: 22. With it: 4-7, depending on the
	 * checkout and the node (7 in a fresh clone at 18:40); 12 keeps the
	 * two apart without depending on either. */
	assert_true(best <= 12);
#else
	skip();
#endif
}

/* The pool's cgroups once its refill settled: the same count for 0.5 s. */
/* A call on a pool with a spare left does not make the pool refill while
 * it runs (function_call.c: the interpreter's fork would take the CPUs the
 * call waits for); the refill comes at its end. */
static void test_full_pool_refills_after_the_call(void **state)
{
	(void)state;
	struct wr_call_result r = py("pass", 0);
	wr_call_result_free(&r);
	int before = fx_settled_cgroups();
	struct bg a = {.code = "import time\ntime.sleep(1.5)\nprint('a')"};
	assert_int_equal(pthread_create(&a.t, NULL, bg_main, &a), 0);
	usleep(800000);
	int during = fx_count_cgroups();
	pthread_join(a.t, NULL);
	assert_string_equal(a.r.out, "a\n");
	wr_call_result_free(&a.r);
	assert_int_equal(during, before);
	/* and after it the pool refills (and removes the call's leaf) */
	assert_int_equal(fx_settled_cgroups(), before);
}

/* The leaf of a Python call is recycled too, although the slot's holder
 * (PID 1 of the call's pid namespace) leaves it only after the call: the
 * refill thread looks at it again until the holder is gone. */
static void test_leaves_recycled_after_the_holder(void **state)
{
	(void)state;
	if (!fx_peak_resettable()) {
		print_message("memory.peak cannot be reset here (Linux < 6.12): no recycling\n");
		skip();
	}
	uint64_t made0, reused0, made, reused;
	wr_function_pool_leaf_counts(g_pool, &made0, &reused0);
	for (int i = 0; i < 16; i++) {
		struct wr_call_result r = py("print(1)", 0);
		assert_string_equal(r.out, "1\n");
		wr_call_result_free(&r);
	}
	wr_function_pool_leaf_counts(g_pool, &made, &reused);
	print_message("16 calls: leaves made %llu, reused %llu\n",
		      (unsigned long long)(made - made0), (unsigned long long)(reused - reused0));
	assert_true(reused - reused0 >= 8);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_code_runs_warm),
	    cmocka_unit_test(test_same_confinement),
	    cmocka_unit_test(test_files_stdin_and_file_argv),
	    cmocka_unit_test(test_interpreter_state_not_shared),
	    cmocka_unit_test(test_abstract_sockets_and_signals_scoped),
	    cmocka_unit_test(test_calls_have_their_own_network),
	    cmocka_unit_test(test_python_bombs),
	    cmocka_unit_test(test_bad_preload_is_reported),
	    cmocka_unit_test(test_call_path_prefaulted),
	    cmocka_unit_test(test_full_pool_refills_after_the_call),
	    cmocka_unit_test(test_leaves_recycled_after_the_holder),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
