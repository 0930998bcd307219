/* The microVM tier's core under TCG: a real QEMU microvm booting Debian's
 * cloud kernel and warren-agent, the busybox test image as its root. Two
 * VMs in all (boots take seconds here): one for the command tests, one that
 * panics. Runs as root. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "qemu_jail.h"
#include "tiers/microvm.h"
#include "tiers/microvm_internal.h"
#include "tiers/qmp.h"

static char g_tmp[256];
static char g_image[512];
static char g_tdir[256];
static char g_cgbase[64];
static struct wr_vm *g_vm;
/* held open without O_CLOEXEC while QEMU starts: it must not inherit it */
static const char *g_canary = "/etc/hostname";
/* test_adopt_after_crash: adopted and swept in group_setup */
static struct wr_vm *g_adopted;
static pid_t g_stale;
static size_t g_swept;

static bool keep_but_stale(const char *id, void *ctx)
{
	(void)ctx;
	return strcmp(id, "vmstale") != 0;
}

static pid_t recorded_pid(const char *id)
{
	char p[400];
	snprintf(p, sizeof(p), "%s/run/microvm/%s/vm.json", g_tmp, id);
	json_error_t je;
	json_t *j = json_load_file(p, 0, &je);
	pid_t pid = (pid_t)json_integer_value(json_object_get(j, "pid"));
	json_decref(j);
	return pid;
}

static int group_setup(void **state)
{
	(void)state;
	const char *k = getenv("WARREN_GUEST_KERNEL"), *i = getenv("WARREN_GUEST_INITRD"),
		   *img = getenv("WARREN_TEST_IMAGE");
	if (!k || !i || !img) {
		fprintf(stderr, "WARREN_GUEST_KERNEL, WARREN_GUEST_INITRD, WARREN_TEST_IMAGE\n");
		return -1;
	}
	snprintf(g_image, sizeof(g_image), "%s.erofs", img);
	/* mkdtemp's six-letter template, spelt so (house rule on marker words) */
	snprintf(g_tmp, sizeof(g_tmp), "/tmp/warren-microvm-%s%s%s", "XX", "XX", "XX");
	if (mkdtemp(g_tmp) == NULL)
		return -1;
	char sdir[300], run[300];
	snprintf(sdir, sizeof(sdir), "%s/state", g_tmp);
	snprintf(run, sizeof(run), "%s/run", g_tmp);
	/* templates hold guest RAM: tmpfs */
	snprintf(g_tdir, sizeof(g_tdir), "/dev/shm/warren-mvm-test-%d", (int)getpid());
	snprintf(g_cgbase, sizeof(g_cgbase), "warren-mvm-test-%d", (int)getpid());
	struct wr_microvm_config cfg = {.kernel = k,
					.initrd = i,
					.state_dir = sdir,
					.run_dir = run,
					.template_dir = g_tdir,
					.cgroup_base = g_cgbase};
	wr_err err = NULL;
	/* A daemon that dies with VMs running, played by a child process
	 * (forked while this one has no thread): its QEMUs outlive it
	 * (adoptable), for test_adopt_after_crash. */
	pid_t child = fork();
	if (child == 0) {
		cfg.adoptable = true;
		if (wr_microvm_init(&cfg, &err) < 0)
			_exit(1);
		const char *ids[] = {"vmadopt", "vmstale"};
		for (int v = 0; v < 2; v++) {
			struct wr_vm_spec as = {.image = g_image,
						.disk_bytes = 32ull << 20,
						.id = ids[v],
						.cold = true};
			struct wr_vm *vm = NULL;
			if (wr_vm_create(&as, &vm, &err) < 0) {
				fprintf(stderr, "create %s: %s\n", ids[v], err->msg);
				_exit(2);
			}
			/* a file, and a command still running at the crash */
			const char *argv[] = {"sh", "-c", "echo before > /before; sleep 1000 &",
					      NULL};
			struct wr_exec_spec ex = {
			    .argv = argv, .user = -1, .group = -1, .stdin_fd = -1};
			struct wr_exec_result res;
			if (wr_vm_exec(vm, &ex, &res, &err) < 0)
				_exit(3);
		}
		_exit(0); /* no destroy: a crash */
	}
	int cst = -1;
	if (child < 0 || waitpid(child, &cst, 0) != child || !WIFEXITED(cst) ||
	    WEXITSTATUS(cst) != 0) {
		fprintf(stderr, "the crashing child failed (%d)\n", cst);
		/* it may have left a VM running (the first create worked, the
		 * second did not): sweep what the run dir records */
		if (child > 0 && wr_microvm_init(&cfg, &err) == 0)
			wr_microvm_sweep(NULL, NULL);
		return -1;
	}
	if (wr_microvm_init(&cfg, &err) < 0) {
		fprintf(stderr, "init: %s\n", err->msg);
		return -1;
	}
	/* as warrend's start: adopt, then sweep the rest, then create (the
	 * uids of the dead process's QEMUs are known only once adopted) */
	g_stale = recorded_pid("vmstale");
	if (wr_vm_adopt("vmadopt", recorded_pid("vmadopt"), &g_adopted, &err) < 0) {
		fprintf(stderr, "adopt: %s\n", err->msg);
		wr_microvm_sweep(NULL, NULL);
		return -1;
	}
	g_swept = wr_microvm_sweep(keep_but_stale, NULL);
	struct wr_vm_spec spec = {
	    .image = g_image, .disk_bytes = 64ull << 20, .id = "vmtest", .cold = true};
	int canary = open(g_canary, O_RDONLY);
	int cr = wr_vm_create(&spec, &g_vm, &err);
	if (canary >= 0)
		close(canary);
	if (cr < 0) {
		fprintf(stderr, "create: %s\n", err->msg);
		return -1;
	}
	fprintf(stderr, "booted (%s) in %llu ms of guest uptime\n", wr_microvm_accel(),
		(unsigned long long)wr_vm_boot_ms(g_vm));
	return 0;
}

static int group_teardown(void **state)
{
	(void)state;
	wr_vm_destroy(&g_vm, NULL);
	wr_vm_destroy(&g_adopted, NULL);
	/* whatever a failed test left: QEMUs, cgroups, files */
	wr_microvm_sweep(NULL, NULL);
	char cmd[1000];
	snprintf(cmd, sizeof(cmd),
		 "find /sys/fs/cgroup -maxdepth 8 -type d -name %s -prune -exec rmdir {} + "
		 "2>/dev/null; rm -rf '%s' '%s'",
		 g_cgbase, g_tmp, g_tdir);
	return system(cmd) == 0 ? 0 : -1;
}

static struct wr_exec_result run_in(struct wr_vm *vm, const char *sh, uint64_t timeout_ms,
				    uint64_t cap, int stdin_fd)
{
	const char *argv[] = {"sh", "-c", sh, NULL};
	struct wr_exec_spec ex = {.argv = argv,
				  .user = -1,
				  .group = -1,
				  .timeout_ms = timeout_ms,
				  .output_cap = cap,
				  .stdin_fd = stdin_fd};
	struct wr_exec_result res;
	wr_err err = NULL;
	int r = wr_vm_exec(vm, &ex, &res, &err);
	if (r < 0) {
		char *tail = wr_vm_console_tail(vm);
		fprintf(stderr, "exec: %s\nconsole: %s\n", err->msg, tail);
		free(tail);
		char cmd[700];
		snprintf(cmd, sizeof(cmd), "cat %s/run/microvm/%s/qemu.log >&2", g_tmp,
			 wr_vm_id(vm));
		if (system(cmd) != 0)
			fprintf(stderr, "no qemu.log\n");
	}
	assert_int_equal(r, 0);
	return res;
}

static struct wr_exec_result run(const char *sh)
{
	return run_in(g_vm, sh, 60000, 0, -1);
}

static void test_exec_output_and_status(void **state)
{
	(void)state;
	struct wr_exec_result res = run("echo out; echo err >&2; hostname; id -u; exit 3");
	assert_int_equal(res.reason, WR_EXIT_EXITED);
	assert_int_equal(res.exit_code, 3);
	assert_string_equal(res.out, "out\nvmtest\n0\n");
	assert_string_equal(res.err, "err\n");
	wr_exec_result_free(&res);
	/* the root is the image over a writable layer: files persist */
	res = run("test -x /bin/busybox && echo image; echo kept > /root-file; cat /root-file");
	assert_string_equal(res.out, "image\nkept\n");
	wr_exec_result_free(&res);
	res = run("cat /root-file; grep -c ' / overlay ' /proc/mounts");
	assert_string_equal(res.out, "kept\n1\n");
	wr_exec_result_free(&res);
}

static void test_env_cwd_user(void **state)
{
	(void)state;
	const char *argv[] = {"sh", "-c", "echo $GREETING; pwd; id -u; id -g", NULL};
	struct wr_env_kv env[] = {{"GREETING", "hello vm"}};
	struct wr_exec_spec ex = {.argv = argv,
				  .env = env,
				  .n_env = 1,
				  .cwd = "/tmp",
				  .user = 1000,
				  .group = 1001,
				  .stdin_fd = -1};
	struct wr_exec_result res;
	wr_err err = NULL;
	assert_int_equal(wr_vm_exec(g_vm, &ex, &res, &err), 0);
	assert_string_equal(res.out, "hello vm\n/tmp\n1000\n1001\n");
	wr_exec_result_free(&res);
}

static void test_stdin(void **state)
{
	(void)state;
	int p[2];
	assert_int_equal(pipe(p), 0);
	assert_int_equal(write(p[1], "line one\nline two\n", 18), 18);
	close(p[1]);
	struct wr_exec_result res = run_in(g_vm, "wc -l; cat", 60000, 0, p[0]);
	close(p[0]);
	assert_int_equal(res.exit_code, 0);
	assert_string_equal(res.out, "2\n");
	wr_exec_result_free(&res);
}

static void test_failures_timeout_and_cap(void **state)
{
	(void)state;
	const char *argv[] = {"/no/such/binary", NULL};
	struct wr_exec_spec ex = {.argv = argv, .user = -1, .group = -1, .stdin_fd = -1};
	struct wr_exec_result res;
	wr_err err = NULL;
	assert_int_equal(wr_vm_exec(g_vm, &ex, &res, &err), 0);
	assert_int_equal(res.reason, WR_EXIT_START_FAILED);
	assert_int_equal(res.exit_code, 127);
	wr_exec_result_free(&res);
	/* the timeout kills the whole tree, a detached child included */
	res = run_in(g_vm, "(setsid sleep 1000 &); sleep 1000", 1500, 0, -1);
	assert_int_equal(res.reason, WR_EXIT_TIMEOUT);
	assert_true(res.duration_ns < 30ull * 1000000000ull);
	wr_exec_result_free(&res);
	res = run("pidof sleep || echo none");
	assert_string_equal(res.out, "none\n");
	wr_exec_result_free(&res);
	/* output beyond the cap is dropped and flagged */
	res = run_in(g_vm, "head -c 100000 /dev/zero", 60000, 1000, -1);
	assert_int_equal(res.out_len, 1000);
	assert_true(res.out_truncated);
	wr_exec_result_free(&res);
	/* the writable disk is bounded: ENOSPC at its size, not the host's */
	res = run("dd if=/dev/zero of=/big bs=1M count=200 2>&1; rm -f /big; echo done");
	assert_non_null(strstr(res.out, "No space left on device"));
	assert_non_null(strstr(res.out, "done\n"));
	wr_exec_result_free(&res);
}

static void *concurrent(void *arg)
{
	char sh[64];
	snprintf(sh, sizeof(sh), "sleep 1; echo %d", (int)(intptr_t)arg);
	struct wr_exec_result res = run(sh);
	char want[16];
	snprintf(want, sizeof(want), "%d\n", (int)(intptr_t)arg);
	intptr_t ok = strcmp(res.out, want) == 0;
	wr_exec_result_free(&res);
	return (void *)ok;
}

static void test_concurrent_commands(void **state)
{
	(void)state;
	pthread_t t[4];
	for (intptr_t i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&t[i], NULL, concurrent, (void *)i), 0);
	for (int i = 0; i < 4; i++) {
		void *ok;
		pthread_join(t[i], &ok);
		assert_true(ok != NULL);
	}
}

static void test_pause_resume(void **state)
{
	(void)state;
	wr_err err = NULL;
	struct wr_exec_result res = run("echo 1 > /counter");
	wr_exec_result_free(&res);
	assert_int_equal(wr_vm_ping(g_vm, 10000, &err), 0);
	assert_int_equal(wr_vm_pause(g_vm, &err), 0);
	/* a guest whose vCPUs do not run does not answer: detected */
	assert_int_equal(wr_vm_ping(g_vm, 500, &err), -ETIMEDOUT);
	wr_err_free(&err);
	assert_int_equal(wr_vm_resume(g_vm, &err), 0);
	assert_int_equal(wr_vm_ping(g_vm, 10000, &err), 0);
	res = run("cat /counter");
	assert_string_equal(res.out, "1\n");
	wr_exec_result_free(&res);
}

static struct wr_vm *restore_one(const char *id)
{
	struct wr_vm_spec spec = {.image = g_image, .disk_bytes = 48ull << 20, .id = id};
	struct wr_vm *vm = NULL;
	wr_err err = NULL;
	if (wr_vm_create(&spec, &vm, &err) < 0) {
		fprintf(stderr, "restore %s: %s\n", id, err->msg);
		wr_err_free(&err);
	}
	return vm;
}

static char *out_of(struct wr_vm *vm, const char *sh)
{
	const char *argv[] = {"sh", "-c", sh, NULL};
	struct wr_exec_spec ex = {
	    .argv = argv, .user = -1, .group = -1, .timeout_ms = 60000, .stdin_fd = -1};
	struct wr_exec_result res;
	wr_err err = NULL;
	if (wr_vm_exec(vm, &ex, &res, &err) < 0) {
		char *m = NULL;
		if (asprintf(&m, "exec failed: %s", err->msg) < 0)
			m = NULL;
		wr_err_free(&err);
		return m;
	}
	char *s = strdup(res.out);
	wr_exec_result_free(&res);
	return s;
}

/* One restore on its own thread, as warrend's create lanes do (QEMU dies
 * with the thread that started it: PDEATHSIG), checked and destroyed
 * there; the main thread asserts on what it saw. */
struct restored {
	const char *id;
	bool ok, restored;
	uint64_t ms;
	char *names, *clock, *rnd, *disk;
};

static void *restore_and_check(void *arg)
{
	struct restored *r = arg;
	struct wr_vm *vm = restore_one(r->id);
	if (vm == NULL)
		return NULL;
	r->ok = true;
	r->restored = wr_vm_restored(vm);
	r->ms = wr_vm_ready_ms(vm);
	r->names = out_of(vm, "hostname; cat /mine 2>/dev/null || echo none");
	r->clock = out_of(vm, "date +%s");
	r->rnd = out_of(vm, "head -c 16 /dev/urandom | od -An -tx1");
	r->disk = out_of(vm, "echo x > /f && cat /f && sync && echo ok");
	wr_vm_destroy(&vm, NULL);
	return NULL;
}

/* The first create of an image makes its template; later ones restore
 * from it (two at once here), each with its own identity, entropy, clock
 * and a disk consistent with the template's RAM. */
static void test_template_restore(void **state)
{
	(void)state;
	struct wr_vm *first = restore_one("vmtpl0");
	assert_non_null(first);
	fprintf(stderr, "template made, then restored in %llu ms (note: %s)\n",
		(unsigned long long)wr_vm_ready_ms(first), wr_vm_template_note(first));
	assert_true(wr_vm_restored(first));
	/* a restore's jail also holds the template's RAM file */
	char jdir[400];
	snprintf(jdir, sizeof(jdir), "%s/run/microvm/vmtpl0", g_tmp);
	assert_qemu_jailed(wr_vm_qemu_pid(first), jdir, "bin,initrd,kernel,lib,lib64,mem,usr",
			   g_canary);
	char *s = out_of(first, "hostname; echo one > /mine; cat /mine");
	assert_string_equal(s, "vmtpl0\none\n");
	free(s);
	pthread_t t[2];
	struct restored r[2] = {{.id = "vmtpl1"}, {.id = "vmtpl2"}};
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&t[i], NULL, restore_and_check, &r[i]), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_join(t[i], NULL), 0);
	for (int i = 0; i < 2; i++) {
		assert_true(r[i].ok);
		assert_true(r[i].restored);
		fprintf(stderr, "restored %s in %llu ms\n", r[i].id, (unsigned long long)r[i].ms);
		char want[64];
		/* its own name; the first restore's file is not on its disk */
		snprintf(want, sizeof(want), "%s\nnone\n", r[i].id);
		assert_string_equal(r[i].names, want);
		/* the guest's clock is the host's, not the snapshot's */
		long guest = atol(r[i].clock), host = (long)time(NULL);
		assert_true(guest > host - 30 && guest < host + 30);
		assert_string_equal(r[i].disk, "x\nok\n");
	}
	/* reseeded: two copies of one RNG state do not say the same */
	assert_string_not_equal(r[0].rnd, r[1].rnd);
	for (int i = 0; i < 2; i++) {
		free(r[i].names);
		free(r[i].clock);
		free(r[i].rnd);
		free(r[i].disk);
	}
	/* one template directory, published whole */
	char cmd[600];
	snprintf(cmd, sizeof(cmd),
		 "test $(ls '%s' | grep -v lock | wc -l) = 1 && test -s '%s'/*/meta.json", g_tdir,
		 g_tdir);
	assert_int_equal(system(cmd), 0);
	wr_err err = NULL;
	assert_int_equal(wr_vm_destroy(&first, &err), 0);
	/* a template made for something else (here: a meta.json whose key
	 * does not match) is rebuilt, not used */
	snprintf(cmd, sizeof(cmd),
		 "for m in '%s'/*/meta.json; do echo '{\"key\":\"stale\"}' > $m; done", g_tdir);
	assert_int_equal(system(cmd), 0);
	first = restore_one("vmtpl3");
	assert_non_null(first);
	assert_true(wr_vm_restored(first));
	snprintf(cmd, sizeof(cmd), "grep -q qemu_version '%s'/*/meta.json", g_tdir);
	assert_int_equal(system(cmd), 0);
	s = out_of(first, "hostname");
	assert_string_equal(s, "vmtpl3\n");
	free(s);
	assert_int_equal(wr_vm_destroy(&first, &err), 0);
}

/* A guest kernel panic: QEMU exits (-no-reboot), the command fails with a
 * clear error instead of hanging, the VM refuses further commands, and
 * destroy still cleans up. */
static void test_guest_panic_is_reported(void **state)
{
	(void)state;
	struct wr_vm_spec spec = {
	    .image = g_image, .disk_bytes = 32ull << 20, .id = "vmpanic", .cold = true};
	struct wr_vm *vm = NULL;
	wr_err err = NULL;
	assert_int_equal(wr_vm_create(&spec, &vm, &err), 0);
	pid_t qemu = wr_vm_qemu_pid(vm);
	const char *argv[] = {"sh", "-c", "echo c > /proc/sysrq-trigger; sleep 100", NULL};
	struct wr_exec_spec ex = {.argv = argv, .user = -1, .group = -1, .stdin_fd = -1};
	struct wr_exec_result res;
	assert_true(wr_vm_exec(vm, &ex, &res, &err) < 0);
	assert_non_null(strstr(err->msg, "the VM is gone"));
	wr_err_free(&err);
	char *tail = wr_vm_console_tail(vm);
	assert_non_null(strstr(tail, "Kernel panic"));
	free(tail);
	const char *argv2[] = {"true", NULL};
	ex.argv = argv2;
	assert_true(wr_vm_exec(vm, &ex, &res, &err) < 0);
	wr_err_free(&err);
	char dir[400];
	snprintf(dir, sizeof(dir), "%s/run/microvm/vmpanic", g_tmp);
	assert_int_equal(access(dir, F_OK), 0);
	assert_int_equal(wr_vm_destroy(&vm, &err), 0);
	assert_int_equal(access(dir, F_OK), -1);
	assert_true(kill(qemu, 0) < 0 && errno == ESRCH);
	/* its cgroup went too (its jail's mounts lived only in its own
	 * mount namespace) */
	char cmd[300];
	snprintf(cmd, sizeof(cmd),
		 "test -z \"$(find /sys/fs/cgroup -maxdepth 8 -path '*/%s/vm-vmpanic' "
		 "2>/dev/null)\"",
		 g_cgbase);
	assert_int_equal(system(cmd), 0);
}

/* QEMU itself, seen from outside (qemu_jail.h): its own uid, no
 * capabilities, no_new_privs, seccomp, PID 1 of its own namespaces, its
 * root the jail with only its kernel, initramfs and /usr, no fd of ours;
 * and its own cgroup in the memory and pids hierarchies. */
static void test_qemu_confined(void **state)
{
	(void)state;
	pid_t q = wr_vm_qemu_pid(g_vm);
	char dir[400];
	snprintf(dir, sizeof(dir), "%s/run/microvm/vmtest", g_tmp);
	assert_qemu_jailed(q, dir, "bin,initrd,kernel,lib,lib64,usr", g_canary);
	char line[256], p[64];
	snprintf(p, sizeof(p), "/proc/%d/cgroup", (int)q);
	FILE *f = fopen(p, "re");
	assert_non_null(f);
	char want[128];
	snprintf(want, sizeof(want), "/%s/vm-vmtest/q", g_cgbase);
	int found = 0;
	while (fgets(line, sizeof(line), f))
		if ((strstr(line, ":memory:") || strstr(line, ":pids:")) && strstr(line, want))
			found++;
	fclose(f);
	assert_int_equal(found, 2);
	/* and the guest still works */
	struct wr_exec_result res = run("echo alive");
	assert_string_equal(res.out, "alive\n");
	wr_exec_result_free(&res);
}

/* A QEMU that tries to start a process (here: a migration to "exec:",
 * which forks a shell) does not get one: its seccomp filter (spawn=deny)
 * refuses or kills it. Last: the VM may not survive. */
static void test_qemu_cannot_spawn(void **state)
{
	(void)state;
	struct wr_vm *vm = g_vm;
	pid_t q = wr_vm_qemu_pid(vm);
	json_t *args = json_pack("{s:s}", "uri", "exec:touch /spawned");
	wr_err err = NULL;
	pthread_mutex_lock(&vm->qmp_lock);
	int r = wr_qmp_cmd(vm->qmp, "migrate", args, 10000, NULL, &err);
	json_t *ret = NULL;
	/* a migration that started would be failed by now */
	if (r == 0) {
		usleep(500000);
		r = wr_qmp_cmd(vm->qmp, "query-migrate", NULL, 5000, &ret, &err);
	}
	pthread_mutex_unlock(&vm->qmp_lock);
	json_decref(args);
	const char *st = json_string_value(json_object_get(ret, "status"));
	fprintf(stderr, "spawn attempt: %s%s%s\n", r < 0 ? err->msg : "migration ", st ? st : "",
		kill(q, 0) < 0 ? " (QEMU killed)" : "");
	assert_true(r < 0 || (st && strcmp(st, "failed") == 0));
	json_decref(ret);
	wr_err_free(&err);
	/* no process of QEMU's but QEMU itself */
	char p[400], *kids = NULL;
	snprintf(p, sizeof(p), "/proc/%d/task/%d/children", (int)q, (int)q);
	FILE *f = fopen(p, "re");
	size_t n = 0;
	if (f) {
		assert_true(getline(&kids, &n, f) < 0 || kids[0] == '\0');
		fclose(f);
	}
	free(kids);
	snprintf(p, sizeof(p), "%s/run/microvm/vmtest/root/spawned", g_tmp);
	assert_int_not_equal(access(p, F_OK), 0);
	/* QEMU 7.2's spawn=deny kills the process (SIGSYS): it is over (a
	 * zombie until destroy reaps it) */
	char pst = '?';
	for (int i = 0; i < 50 && pst != 'Z' && pst != 'X'; i++) {
		snprintf(p, sizeof(p), "/proc/%d/stat", (int)q);
		f = fopen(p, "re");
		pst = 'X';
		if (f) {
			if (fscanf(f, "%*d (%*[^)]) %c", &pst) != 1)
				pst = '?';
			fclose(f);
		}
		if (pst != 'Z' && pst != 'X')
			usleep(100000);
	}
	assert_true(pst == 'Z' || pst == 'X');
}

/* The VMs of a process that died without a word (group_setup): one is
 * adopted (its QEMU verified, the channels connected again, the agent
 * resynced) and keeps working with its disk and jail; the other is swept
 * (its QEMU killed, cgroup and files removed); an unknown one is refused. */
static void test_adopt_after_crash(void **state)
{
	(void)state;
	wr_err err = NULL;
	struct wr_vm *vm = g_adopted;
	g_adopted = NULL;
	assert_non_null(vm);
	pid_t q = wr_vm_qemu_pid(vm);
	/* its disk and its guest's files, a working agent */
	struct wr_exec_result res = run_in(vm, "cat /before; echo after", 60000, 0, -1);
	assert_string_equal(res.out, "before\nafter\n");
	wr_exec_result_free(&res);
	assert_int_equal(wr_vm_ping(vm, 5000, &err), 0);
	char dir[400];
	snprintf(dir, sizeof(dir), "%s/run/microvm/vmadopt", g_tmp);
	assert_qemu_jailed(q, dir, "bin,initrd,kernel,lib,lib64,usr", "/nonexistent");
	/* the sweep after adoption: the VM no record adopted is gone, QEMU,
	 * cgroup and files */
	assert_int_equal(g_swept, 1);
	assert_true(g_stale > 0);
	for (int i = 0; i < 50 && kill(g_stale, 0) == 0; i++)
		usleep(100000);
	assert_true(kill(g_stale, 0) < 0 && errno == ESRCH);
	snprintf(dir, sizeof(dir), "%s/run/microvm/vmstale", g_tmp);
	assert_int_not_equal(access(dir, F_OK), 0);
	char cmd[300];
	snprintf(cmd, sizeof(cmd),
		 "test -z \"$(find /sys/fs/cgroup -maxdepth 8 -path '*/%s/vm-vmstale' "
		 "2>/dev/null)\"",
		 g_cgbase);
	assert_int_equal(system(cmd), 0);
	/* an id with no VM: refused, nothing made */
	struct wr_vm *none = NULL;
	assert_true(wr_vm_adopt("vmnone", 0, &none, &err) < 0);
	assert_int_equal(err->errnum, ENOENT);
	wr_err_free(&err);
	snprintf(dir, sizeof(dir), "%s/run/microvm/vmnone", g_tmp);
	assert_int_not_equal(access(dir, F_OK), 0);
	assert_int_equal(wr_vm_destroy(&vm, &err), 0);
	/* ended; no longer our child, so init reaps it a moment later */
	for (int i = 0; i < 50 && kill(q, 0) == 0; i++)
		usleep(100000);
	assert_true(kill(q, 0) < 0 && errno == ESRCH);
	snprintf(dir, sizeof(dir), "%s/run/microvm/vmadopt", g_tmp);
	assert_int_not_equal(access(dir, F_OK), 0);
}

static void test_bad_specs(void **state)
{
	(void)state;
	struct wr_vm *vm = NULL;
	wr_err err = NULL;
	struct wr_vm_spec spec = {.image = g_image, .memory_bytes = 1 << 20};
	assert_true(wr_vm_create(&spec, &vm, &err) < 0);
	assert_string_equal(err->field, "memory");
	wr_err_free(&err);
	spec = (struct wr_vm_spec){.image = "/nonexistent.erofs"};
	assert_true(wr_vm_create(&spec, &vm, &err) < 0);
	assert_non_null(strstr(err->msg, "/nonexistent.erofs"));
	wr_err_free(&err);
	const char *argv[] = {NULL};
	struct wr_exec_spec ex = {.argv = argv, .stdin_fd = -1};
	struct wr_exec_result res;
	assert_true(wr_vm_exec(g_vm, &ex, &res, &err) < 0);
	assert_string_equal(err->field, "cmd");
	wr_err_free(&err);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_exec_output_and_status),
	    cmocka_unit_test(test_env_cwd_user),
	    cmocka_unit_test(test_stdin),
	    cmocka_unit_test(test_failures_timeout_and_cap),
	    cmocka_unit_test(test_concurrent_commands),
	    cmocka_unit_test(test_pause_resume),
	    cmocka_unit_test(test_qemu_confined),
	    cmocka_unit_test(test_adopt_after_crash),
	    cmocka_unit_test(test_bad_specs),
	    cmocka_unit_test(test_template_restore),
	    cmocka_unit_test(test_guest_panic_is_reported),
	    cmocka_unit_test(test_qemu_cannot_spawn),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
