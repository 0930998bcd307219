/* The container tier through its library API: what the CLI cannot show
 * (several commands in one live sandbox), the files API on a live sandbox,
 * and leak checks over many create/destroy cycles. Runs as root. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "tiers/container.h"

#include "tier_fixture.h"

static char g_tmp[256];
static char g_base[64];
static const char *g_image;

static int count_dir(const char *path)
{
	DIR *d = opendir(path);
	if (d == NULL)
		return 0;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL)
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

static int count_subdirs(const char *path)
{
	DIR *d = opendir(path);
	if (d == NULL)
		return 0;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL)
		if (de->d_name[0] != '.' && de->d_type == DT_DIR)
			n++;
	closedir(d);
	return n;
}

/* Sandbox cgroups under our base, summed over every hierarchy. */
static int count_sandbox_cgroups(void)
{
	return tierfx_each_base(g_base, count_subdirs);
}

/* Processes named warren-init in sandboxes of ours. */
static int count_inits(void)
{
	DIR *d = opendir("/proc");
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		char path[300], comm[64] = {0};
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/comm", de->d_name);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		ssize_t r = read(fd, comm, sizeof(comm) - 1);
		close(fd);
		if (r <= 0 || strncmp(comm, "warren-init", 11) != 0)
			continue;
		/* only ours: other processes on the machine run sandboxes too */
		char *cg = NULL, needle[80];
		snprintf(path, sizeof(path), "/proc/%s/cgroup", de->d_name);
		snprintf(needle, sizeof(needle), "/%s/", g_base);
		if (wr_read_file_at(AT_FDCWD, path, &cg, 65536, NULL) >= 0 && strstr(cg, needle))
			n++;
		free(cg);
	}
	closedir(d);
	return n;
}

/* Host mounts that could be ours: anything under our temp dir, any overlay
 * or tmpfs named "warren", any EROFS mount of our image. (Counting every host mount
 * would flag other processes' activity on a shared machine.) */
static int count_our_mounts(void)
{
	char *buf = NULL;
	if (wr_read_file_at(AT_FDCWD, "/proc/self/mountinfo", &buf, 1 << 22, NULL) < 0)
		return -1;
	int n = 0;
	for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n"))
		if (strstr(line, g_tmp) || strstr(line, " - overlay warren") ||
		    strstr(line, " - tmpfs warren") ||
		    (strstr(line, " - erofs ") && strstr(line, g_image)))
			n++;
	free(buf);
	return n;
}

static int group_setup(void **state)
{
	(void)state;
	g_image = getenv("WARREN_TEST_IMAGE");
	const char *init = getenv("WARREN_INIT");
	if (g_image == NULL || init == NULL) {
		fprintf(stderr, "WARREN_TEST_IMAGE and WARREN_INIT must be set\n");
		return -1;
	}
	/* mkdtemp's template: six 'X' written at runtime */
	int n = snprintf(g_tmp, sizeof(g_tmp), "/tmp/warren-ct-");
	memset(g_tmp + n, 'X', 6);
	g_tmp[n + 6] = '\0';
	if (mkdtemp(g_tmp) == NULL)
		return -1;
	snprintf(g_base, sizeof(g_base), "warren-ct-%d", (int)getpid());
	char state_dir[300], run_dir[300];
	snprintf(state_dir, sizeof(state_dir), "%s/state", g_tmp);
	snprintf(run_dir, sizeof(run_dir), "%s/run", g_tmp);
	/* the tier copies what it keeps */
	struct wr_container_config cfg = {
	    .state_dir = state_dir,
	    .run_dir = run_dir,
	    .init_path = init,
	    .cgroup_base = g_base,
	};
	wr_err err = NULL;
	if (wr_container_init(&cfg, &err) < 0) {
		fprintf(stderr, "init: %s\n", err->msg);
		return -1;
	}
	return 0;
}

/* Remove every sandbox a failed test left, then our base in every
 * hierarchy, then the temp dir. */
static int group_teardown(void **state)
{
	(void)state;
	return tierfx_teardown(g_base, g_tmp);
}

static struct wr_sandbox *mk(uint64_t memory)
{
	struct wr_sandbox_spec spec = {.image = g_image, .memory_bytes = memory};
	struct wr_sandbox *sb = NULL;
	wr_err err = NULL;
	int r = wr_container_create(&spec, &sb, &err);
	if (r < 0)
		fprintf(stderr, "create: %s\n", err->msg);
	assert_int_equal(r, 0);
	return sb;
}

static struct wr_exec_result run(struct wr_sandbox *sb, uint64_t timeout_ms, const char *sh)
{
	const char *argv[] = {"sh", "-c", sh, NULL};
	struct wr_exec_spec ex = {
	    .argv = argv, .user = -1, .group = -1, .stdin_fd = -1, .timeout_ms = timeout_ms};
	struct wr_exec_result res;
	wr_err err = NULL;
	int r = wr_container_exec(sb, &ex, &res, &err);
	if (r < 0)
		fprintf(stderr, "exec: %s\n", err->msg);
	assert_int_equal(r, 0);
	return res;
}

static void destroy(struct wr_sandbox **sb)
{
	wr_err err = NULL;
	int r = wr_container_destroy(sb, &err);
	if (r < 0)
		fprintf(stderr, "destroy: %s\n", err->msg);
	assert_int_equal(r, 0);
}

static void test_exec_basic(void **state)
{
	(void)state;
	struct wr_sandbox *sb = mk(0);
	struct wr_exec_result res = run(sb, 0, "echo hello; echo oops >&2; exit 3");
	assert_int_equal(res.reason, WR_EXIT_EXITED);
	assert_int_equal(res.exit_code, 3);
	assert_string_equal(res.out, "hello\n");
	assert_string_equal(res.err, "oops\n");
	assert_false(res.out_truncated);
	assert_true(res.duration_ns > 0);
	wr_exec_result_free(&res);
	/* a second command sees the first one's files */
	res = run(sb, 0, "echo data > /tmp/f");
	wr_exec_result_free(&res);
	res = run(sb, 0, "cat /tmp/f");
	assert_string_equal(res.out, "data\n");
	wr_exec_result_free(&res);
	destroy(&sb);
}

/* Commands run in PID 1's process tree (what CRIU dumps), through a double
 * fork in the sandbox's PID namespace; their results still come from the
 * host kernel. With WARREN_EXEC_CLONE_PARENT=1 (the path of kernels before
 * 6.15) they are the caller's children, outside the tree. */
static void test_command_in_pid1_tree(void **state)
{
	(void)state;
	const char *v = getenv("WARREN_EXEC_CLONE_PARENT");
	bool clone_parent = v && *v && strcmp(v, "0") != 0;
	struct wr_sandbox *sb = mk(0);
	/* From its first instruction: the parent, seen from inside, is PID 1
	 * (or none in the namespace, 0), and no process of the spawn (the
	 * intermediate, the host's root with warrend's memory) is to be seen:
	 * PID 1 and this shell only. */
	struct wr_exec_result res =
	    run(sb, 0, "set -- /proc/[0-9]*; echo $#; grep PPid /proc/$$/status");
	assert_int_equal(res.reason, WR_EXIT_EXITED);
	assert_string_equal(res.out, clone_parent ? "2\nPPid:\t0\n" : "2\nPPid:\t1\n");
	wr_exec_result_free(&res);
	/* it leads a session and process group of its own (fields 5, 6 of its
	 * stat; 0 0 when they were the caller's, outside the namespace) */
	res = run(sb, 0, "echo $$ $$; cut -d' ' -f5,6 /proc/$$/stat");
	char *nl = strchr(res.out, '\n');
	assert_non_null(nl);
	assert_true(strncmp(res.out, nl + 1, (size_t)(nl - res.out)) == 0);
	wr_exec_result_free(&res);
	res = run(sb, 0, "exit 42");
	assert_int_equal(res.reason, WR_EXIT_EXITED);
	assert_int_equal(res.exit_code, 42);
	wr_exec_result_free(&res);
	res = run(sb, 0, "kill -TERM $$");
	assert_int_equal(res.reason, WR_EXIT_SIGNALED);
	assert_int_equal(res.signal, SIGTERM);
	assert_int_equal(res.exit_code, 128 + SIGTERM);
	wr_exec_result_free(&res);
	res = run(sb, 300, "sleep 1000");
	assert_int_equal(res.reason, WR_EXIT_TIMEOUT);
	assert_int_equal(res.exit_code, 128 + SIGKILL);
	wr_exec_result_free(&res);
	const char *missing[] = {"/no/such/command", NULL}, *noexec[] = {"/etc/passwd", NULL};
	const char *const *argvs[] = {missing, noexec};
	int codes[] = {127, 126};
	for (int i = 0; i < 2; i++) {
		struct wr_exec_spec ex = {
		    .argv = argvs[i], .user = -1, .group = -1, .stdin_fd = -1};
		wr_err err = NULL;
		assert_int_equal(wr_container_exec(sb, &ex, &res, &err), 0);
		assert_int_equal(res.reason, WR_EXIT_START_FAILED);
		assert_int_equal(res.exit_code, codes[i]);
		wr_exec_result_free(&res);
	}
	/* nothing of those is left, not even a zombie, once PID 1 (woken by
	 * their SIGCHLD) has reaped them */
	res = run(sb, 0,
		  "i=0; while grep -q '^State:.Z' /proc/[0-9]*/status 2>/dev/null; do "
		  "[ $i -lt 250 ] || break; i=$((i+1)); sleep 0.02; done; "
		  "grep -l '^State:.Z' /proc/[0-9]*/status 2>/dev/null | wc -l; "
		  "set -- /proc/[0-9]*; echo $#");
	/* PID 1 and this shell */
	assert_string_equal(res.out, "0\n2\n");
	wr_exec_result_free(&res);
	destroy(&sb);
}

/* Commands join PID 1's cgroup namespace (CRIU cannot dump a nested one):
 * rooted at the sandbox's cgroup, so a command sees its own leaf as /cmd-N
 * (/../cmd-N on pure v2, where PID 1 is in the leaf init) and no host path,
 * and no other sandbox's cgroup is reachable from it. */
static void test_commands_share_pid1_cgroup_namespace(void **state)
{
	(void)state;
	struct wr_sandbox *sb = mk(0), *other = mk(0);
	struct wr_exec_result res =
	    run(sb, 0,
		"readlink /proc/self/ns/cgroup; cat /proc/self/cgroup; "
		"ls -A /sys/fs/cgroup | wc -l; mkdir /tmp/cg; "
		"mount -t cgroup2 none /tmp/cg 2>/dev/null || echo no-mount");
	assert_int_equal(res.exit_code, 0);
	char path[64], ns[64] = {0};
	snprintf(path, sizeof(path), "/proc/%d/ns/cgroup", (int)wr_sandbox_init_pid(sb));
	assert_true(readlink(path, ns, sizeof(ns) - 1) > 0);
	/* the same namespace as PID 1's */
	assert_true(strncmp(res.out, ns, strlen(ns)) == 0 && res.out[strlen(ns)] == '\n');
	/* each line: the namespace's root, or the command's own leaf below it */
	char *save = NULL, *copy = strdup(res.out);
	int lines = 0, own = 0;
	for (char *l = strtok_r(strchr(copy, '\n') + 1, "\n", &save); l;
	     l = strtok_r(NULL, "\n", &save)) {
		char *where = strchr(l, ':') ? strchr(strchr(l, ':') + 1, ':') : NULL;
		if (where == NULL)
			break; /* past /proc/self/cgroup */
		lines++;
		where++;
		if (strncmp(where, "/../", 4) == 0)
			where += 3;
		if (strncmp(where, "/cmd-", 5) == 0 && strspn(where + 5, "0123456789") > 0)
			own++;
		else
			assert_string_equal(where, "/");
	}
	free(copy);
	assert_true(lines > 0);
	assert_true(own > 0); /* memory and the unified hierarchy at least */
	assert_null(strstr(res.out, g_base));
	assert_null(strstr(res.out, wr_sandbox_id(sb)));
	/* no cgroup file system inside, and none can be mounted */
	assert_non_null(strstr(res.out, "\n0\nno-mount\n"));
	wr_exec_result_free(&res);
	destroy(&other);
	destroy(&sb);
}

/* PID 1 leads its own session and process group (CRIU refuses a session
 * leader outside the PID namespace), seen from the host and from inside. */
static void test_pid1_leads_its_session(void **state)
{
	(void)state;
	struct wr_sandbox *sb = mk(0);
	pid_t init = wr_sandbox_init_pid(sb);
	assert_int_equal(getsid(init), init);
	assert_int_equal(getpgid(init), init);
	/* fields 5 and 6 of /proc/1/stat: pgrp and session (0: outside) */
	struct wr_exec_result res = run(sb, 0, "cut -d' ' -f5,6 /proc/1/stat");
	assert_string_equal(res.out, "1 1\n");
	wr_exec_result_free(&res);
	destroy(&sb);
}

static void test_timeout_kills_tree_and_sandbox_lives_on(void **state)
{
	(void)state;
	struct wr_sandbox *sb = mk(0);
	struct wr_exec_result res =
	    run(sb, 500,
		"setsid nohup sh -c 'trap \"\" TERM HUP; echo $$ > /tmp/bg; sleep 1000' "
		">/dev/null 2>&1 & sleep 1000");
	assert_int_equal(res.reason, WR_EXIT_TIMEOUT);
	wr_exec_result_free(&res);
	res = run(sb, 0,
		  "kill -0 $(cat /tmp/bg) 2>/dev/null && echo alive || echo gone; "
		  "ls /proc | grep -c '^[0-9]'");
	/* only init, this shell, ls and grep are left */
	assert_int_equal(res.exit_code, 0);
	assert_non_null(strstr(res.out, "gone\n"));
	assert_true(atoi(strstr(res.out, "\n") + 1) <= 4);
	wr_exec_result_free(&res);
	destroy(&sb);
}

static void test_background_outlives_command_until_destroy(void **state)
{
	(void)state;
	struct wr_sandbox *sb = mk(0);
	struct wr_exec_result res = run(sb, 5000, "sleep 1000 >/dev/null 2>&1 &");
	assert_int_equal(res.reason, WR_EXIT_EXITED);
	assert_true(res.duration_ns < 4000000000ull);
	wr_exec_result_free(&res);
	res = run(sb, 0, "pidof sleep >/dev/null && echo running");
	assert_string_equal(res.out, "running\n");
	wr_exec_result_free(&res);
	int before = count_inits();
	destroy(&sb);
	assert_int_equal(count_inits(), before - 1);
}

/* Processes named sleep in a cgroup path containing needle; asserts where
 * each sits per hierarchy. */
static int count_sleeps_in(const char *needle, const char *cmd_needle)
{
	int found = 0;
	DIR *d = opendir("/proc");
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		char path[300], comm[64] = {0}, *cg = NULL;
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/comm", de->d_name);
		if (wr_read_file_at(AT_FDCWD, path, &cg, 4096, NULL) < 0)
			continue;
		snprintf(comm, sizeof(comm), "%s", cg);
		free(cg);
		cg = NULL;
		snprintf(path, sizeof(path), "/proc/%s/cgroup", de->d_name);
		if (strncmp(comm, "sleep", 5) != 0 ||
		    wr_read_file_at(AT_FDCWD, path, &cg, 65536, NULL) < 0 || !strstr(cg, needle)) {
			free(cg);
			continue;
		}
		found++;
		for (char *line = strtok(cg, "\n"); line; line = strtok(NULL, "\n")) {
			char *ctrl = strchr(line, ':') + 1, *where = strchr(ctrl, ':') + 1;
			bool own = strncmp(ctrl, "memory:", 7) == 0 || strncmp(ctrl, ":", 1) == 0;
			bool shared =
			    strncmp(ctrl, "pids:", 5) == 0 || strncmp(ctrl, "cpu:", 4) == 0;
			if (own)
				assert_non_null(strstr(where, cmd_needle));
			if (shared) {
				assert_null(strstr(where, cmd_needle));
				assert_non_null(strstr(where, needle));
			}
		}
		free(cg);
	}
	closedir(d);
	return found;
}

/* A command's leaf exists only where the command is accounted or acted on
 * by itself (memory, unified); in pids and cpu its processes join the
 * sandbox's cgroup, whose limits apply there. */
static void test_command_cgroups(void **state)
{
	(void)state;
	struct wr_sandbox *sb = mk(0);
	struct wr_exec_result res = run(sb, 5000, "sleep 1000 >/dev/null 2>&1 &");
	assert_int_equal(res.reason, WR_EXIT_EXITED);
	wr_exec_result_free(&res);
	char needle[160], cmd_needle[180];
	snprintf(needle, sizeof(needle), "/%s/%s", g_base, wr_sandbox_id(sb));
	snprintf(cmd_needle, sizeof(cmd_needle), "%s/cmd-", needle);
	/* the shell forked it: wait until the child has exec'd sleep */
	int found = 0;
	for (int tries = 0; tries < 100 && found == 0; tries++) {
		if (tries)
			usleep(20000);
		found = count_sleeps_in(needle, cmd_needle);
	}
	assert_int_equal(found, 1);
	destroy(&sb);
}

static void test_oom_is_reported(void **state)
{
	(void)state;
	struct wr_sandbox *sb = mk(32ull << 20);
	const char *argv[] = {"wr-probe", "membomb", "128", NULL};
	struct wr_exec_spec ex = {.argv = argv, .user = -1, .group = -1, .stdin_fd = -1};
	struct wr_exec_result res;
	wr_err err = NULL;
	assert_int_equal(wr_container_exec(sb, &ex, &res, &err), 0);
	assert_int_equal(res.reason, WR_EXIT_OOM);
	assert_int_equal(res.signal, 9);
	assert_true(res.memory_peak > (16ull << 20));
	wr_exec_result_free(&res);
	/* the sandbox survives its command's OOM */
	res = run(sb, 0, "echo ok");
	assert_string_equal(res.out, "ok\n");
	wr_exec_result_free(&res);
	destroy(&sb);
}

static void test_files_api_on_live_sandbox(void **state)
{
	(void)state;
	struct wr_sandbox *sb = mk(0);
	struct wr_fs fs;
	wr_err err = NULL;
	assert_int_equal(wr_container_fs(sb, &fs, &err), 0);
	assert_int_equal(wr_fs_write(&fs, "/tmp/in.txt", "from host\n", 10, 0644, false, &err), 0);
	struct wr_exec_result res = run(sb, 0, "cat /tmp/in.txt; stat -c %u /tmp/in.txt");
	assert_string_equal(res.out, "from host\n0\n");
	wr_exec_result_free(&res);

	/* A symlink planted inside to a host secret resolves inside the root. */
	res = run(sb, 0,
		  "ln -s /etc/shadow /tmp/link; ln -s ../../../../../etc/hostname /tmp/up; "
		  "echo inside > /tmp/out");
	wr_exec_result_free(&res);
	char *data = NULL;
	size_t len = 0;
	bool trunc = false;
	assert_true(wr_fs_read(&fs, "/tmp/link", 1 << 20, &data, &len, &trunc, &err) < 0);
	assert_int_equal(wr_err_code(err), ENOENT); /* the image has no /etc/shadow */
	wr_err_free(&err);
	assert_int_equal(wr_fs_read(&fs, "/tmp/up", 1 << 20, &data, &len, &trunc, &err), 0);
	assert_string_equal(data, "warren\n");
	free(data);
	assert_int_equal(
	    wr_fs_read(&fs, "../../../../etc/hostname", 1 << 20, &data, &len, &trunc, &err), 0);
	assert_string_equal(data, "warren\n");
	free(data);
	/* /proc of the sandbox is a different filesystem: out of reach */
	assert_true(wr_fs_read(&fs, "/proc/1/environ", 1 << 20, &data, &len, &trunc, &err) < 0);
	assert_int_equal(wr_err_code(err), EXDEV);
	wr_err_free(&err);
	destroy(&sb);
}

static void on_pty(void *ctx, int master)
{
	*(int *)ctx = master;
	/* typed before the shell reads: the terminal buffers it */
	assert_int_equal(write(master, "hello\n", 6), 6);
}

static void test_pty_is_a_controlling_terminal(void **state)
{
	(void)state;
	struct wr_sandbox *sb = mk(0);
	const char *argv[] = {"sh", "-c",
			      "read line; echo got=$line; tty; stty size; ls -ln $(tty)", NULL};
	int master = -1;
	struct wr_exec_spec ex = {.argv = argv,
				  .user = 1000,
				  .group = -1,
				  .stdin_fd = -1,
				  .pty = true,
				  .pty_rows = 40,
				  .pty_cols = 100,
				  .on_pty = on_pty,
				  .ctx = &master};
	struct wr_exec_result res;
	wr_err err = NULL;
	int r = wr_container_exec(sb, &ex, &res, &err);
	if (r < 0)
		fprintf(stderr, "exec: %s\n", err->msg);
	assert_int_equal(r, 0);
	assert_int_equal(res.exit_code, 0);
	assert_true(master >= 0);
	char buf[4096];
	size_t len = 0;
	ssize_t n;
	while ((n = read(master, buf + len, sizeof(buf) - 1 - len)) > 0)
		len += (size_t)n;
	buf[len] = 0;
	close(master);
	assert_non_null(strstr(buf, "got=hello"));
	assert_non_null(strstr(buf, "/dev/pts/0"));
	assert_non_null(strstr(buf, "40 100"));
	/* the terminal belongs to the user inside */
	assert_non_null(strstr(buf, " 1000 "));
	wr_exec_result_free(&res);
	destroy(&sb);
}

struct killer {
	struct wr_exec_ctl *ctl;
	int delay_ms;
};

static void *killer_main(void *arg)
{
	struct killer *k = arg;
	/* wait until the command runs (its pid is published), then kill */
	for (int i = 0; i < 500; i++) {
		int fd = wr_exec_ctl_pidfd(k->ctl);
		if (fd >= 0) {
			close(fd);
			break;
		}
		usleep(10000);
	}
	usleep((useconds_t)k->delay_ms * 1000);
	wr_exec_ctl_kill(k->ctl);
	return NULL;
}

static void test_exec_ctl_kills_the_tree(void **state)
{
	(void)state;
	struct wr_sandbox *sb = mk(0);
	struct wr_exec_ctl ctl;
	wr_exec_ctl_init(&ctl);
	const char *argv[] = {"sh", "-c", "setsid sleep 1000 & sleep 1000", NULL};
	struct wr_exec_spec ex = {
	    .argv = argv, .user = -1, .group = -1, .stdin_fd = -1, .ctl = &ctl};
	struct killer k = {&ctl, 100};
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, killer_main, &k), 0);
	struct wr_exec_result res;
	wr_err err = NULL;
	assert_int_equal(wr_container_exec(sb, &ex, &res, &err), 0);
	pthread_join(t, NULL);
	assert_int_equal(res.reason, WR_EXIT_KILLED);
	assert_int_equal(res.exit_code, 137);
	wr_exec_result_free(&res);
	/* the setsid'd sleep went with it */
	res = run(sb, 0, "pidof sleep || echo none");
	assert_string_equal(res.out, "none\n");
	wr_exec_result_free(&res);
	/* killed before it starts: it never runs */
	assert_int_equal(wr_exec_ctl_pidfd(&ctl), -ESRCH);
	const char *touch[] = {"touch", "/tmp/ran", NULL};
	ex.argv = touch;
	assert_int_equal(wr_container_exec(sb, &ex, &res, &err), 0);
	assert_int_equal(res.reason, WR_EXIT_KILLED);
	wr_exec_result_free(&res);
	res = run(sb, 0, "ls /tmp/ran 2>/dev/null || echo absent");
	assert_string_equal(res.out, "absent\n");
	wr_exec_result_free(&res);
	wr_exec_ctl_destroy(&ctl);
	destroy(&sb);
}

/* A daemon holds thousands of fds; its commands still get their own limit
 * and none of its fds. */
static void test_exec_from_a_caller_with_many_fds(void **state)
{
	(void)state;
	struct rlimit rl;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	struct rlimit more = {4096, rl.rlim_max > 4096 ? rl.rlim_max : 4096};
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &more), 0);
	static int fds[2000];
	for (int i = 0; i < 2000; i++)
		assert_true((fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0);
	struct wr_sandbox *sb = mk(0);
	struct wr_exec_result res = run(sb, 0, "ulimit -n; ls /proc/self/fd | wc -l");
	assert_int_equal(res.exit_code, 0);
	/* 1024, then 0 1 2 and the fd ls opens the directory with */
	assert_string_equal(res.out, "1024\n4\n");
	wr_exec_result_free(&res);
	destroy(&sb);
	for (int i = 0; i < 2000; i++)
		close(fds[i]);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
}

static void test_kill_then_exec_is_refused(void **state)
{
	(void)state;
	struct wr_sandbox *sb = mk(0);
	wr_err err = NULL;
	assert_int_equal(wr_container_kill(sb, &err), 0);
	const char *argv[] = {"true", NULL};
	struct wr_exec_spec ex = {.argv = argv, .user = -1, .group = -1, .stdin_fd = -1};
	struct wr_exec_result res;
	assert_true(wr_container_exec(sb, &ex, &res, &err) < 0);
	assert_int_equal(wr_err_code(err), ESRCH);
	wr_err_free(&err);
	destroy(&sb);
}

static void test_bad_spec_names_field(void **state)
{
	(void)state;
	struct wr_sandbox_spec spec = {.image = g_image, .memory_bytes = 1024};
	struct wr_sandbox *sb = NULL;
	wr_err err = NULL;
	assert_true(wr_container_create(&spec, &sb, &err) < 0);
	assert_string_equal(err->field, "memory");
	wr_err_free(&err);
	spec = (struct wr_sandbox_spec){.image = "/nonexistent"};
	assert_true(wr_container_create(&spec, &sb, &err) < 0);
	assert_int_equal(wr_err_code(err), ENOENT);
	assert_non_null(strstr(err->msg, "/nonexistent"));
	wr_err_free(&err);
}

/* ---- image layers ------------------------------------------------------ */

static void put_file(const char *dir, const char *rel, const char *content)
{
	char path[600];
	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	char *slash = strrchr(path, '/');
	*slash = 0;
	char cmd[700];
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", path);
	assert_int_equal(system(cmd), 0);
	*slash = '/';
	if (content == NULL) { /* an overlay whiteout */
		assert_int_equal(mknod(path, S_IFCHR | 0600, makedev(0, 0)), 0);
		return;
	}
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(content, f);
	fclose(f);
}

static struct wr_sandbox *mk_layers(const char *const *layers, size_t n)
{
	struct wr_sandbox_spec spec = {.layers = layers, .n_layers = n};
	struct wr_sandbox *sb = NULL;
	wr_err err = NULL;
	int r = wr_container_create(&spec, &sb, &err);
	if (r < 0)
		fprintf(stderr, "create: %s\n", err->msg);
	assert_int_equal(r, 0);
	return sb;
}

/* base (the test image) < toolkit < workspace < the writable layer. */
static void test_layers_stack_in_order(void **state)
{
	(void)state;
	char toolkit[300], ws[300];
	snprintf(toolkit, sizeof(toolkit), "%s/layer-toolkit", g_tmp);
	snprintf(ws, sizeof(ws), "%s/layer-ws", g_tmp);
	put_file(toolkit, "etc/hostname", "toolkit\n");
	put_file(toolkit, "opt/tool", "tool\n");
	put_file(toolkit, "opt/both", "toolkit\n");
	put_file(toolkit, "opt/gone", "toolkit\n");
	put_file(ws, "opt/both", "workspace\n");
	put_file(ws, "opt/gone", NULL);	 /* hides the toolkit's file */
	put_file(ws, "etc/group", NULL); /* hides the base's file */
	const char *layers[] = {g_image, toolkit, ws};
	struct wr_sandbox *sb = mk_layers(layers, 3);
	struct wr_exec_result res =
	    run(sb, 0,
		"test -s /etc/passwd && echo base-only; cat /etc/hostname /opt/tool /opt/both; "
		"test -e /opt/gone || echo gone-hidden; test -e /etc/group || echo group-hidden; "
		"ls /opt");
	assert_int_equal(res.exit_code, 0);
	assert_string_equal(res.out, "base-only\ntoolkit\ntool\nworkspace\ngone-hidden\n"
				     "group-hidden\nboth\ntool\n");
	wr_exec_result_free(&res);
	/* the writable layer is on top: new files, and copy-up of a lower one */
	res = run(sb, 0,
		  "echo new > /opt/both && echo mine > /opt/new && cat /opt/both /opt/new && "
		  "echo again > /opt/gone && cat /opt/gone");
	assert_int_equal(res.exit_code, 0);
	assert_string_equal(res.out, "new\nmine\nagain\n");
	wr_exec_result_free(&res);
	/* no host path of a layer shows in the sandbox's mount table */
	res = run(sb, 0, "grep -c layer- /proc/self/mountinfo");
	assert_string_equal(res.out, "0\n");
	wr_exec_result_free(&res);
	destroy(&sb);
	/* the layers themselves are untouched */
	char path[400], *got = NULL;
	snprintf(path, sizeof(path), "%s/opt/both", ws);
	assert_true(wr_read_file_at(AT_FDCWD, path, &got, 4096, NULL) > 0);
	assert_string_equal(got, "workspace\n");
	free(got);
	/* an EROFS file is a layer like a directory */
	char erofs[300];
	snprintf(erofs, sizeof(erofs), "%s.erofs", g_image);
	struct stat st;
	if (stat(erofs, &st) == 0) {
		const char *mixed[] = {erofs, ws};
		sb = mk_layers(mixed, 2);
		res = run(sb, 0,
			  "cat /opt/both; test -e /etc/group || echo group-hidden; "
			  "test -x /bin/busybox && echo busybox");
		assert_string_equal(res.out, "workspace\ngroup-hidden\nbusybox\n");
		wr_exec_result_free(&res);
		destroy(&sb);
	}
}

static void test_layers_validated(void **state)
{
	(void)state;
	struct wr_sandbox *sb = NULL;
	wr_err err = NULL;
	const char *many[WR_MAX_LAYERS + 1];
	char dirs[WR_MAX_LAYERS + 1][300];
	many[0] = g_image;
	for (size_t i = 1; i < WR_ARRAY_SIZE(many); i++) {
		char name[32];
		snprintf(dirs[i], sizeof(dirs[i]), "%s/many-%zu", g_tmp, i);
		snprintf(name, sizeof(name), "opt/l%zu", i);
		put_file(dirs[i], name, "x\n");
		many[i] = dirs[i];
	}
	struct wr_sandbox_spec spec = {.layers = many, .n_layers = WR_ARRAY_SIZE(many)};
	assert_true(wr_container_create(&spec, &sb, &err) < 0);
	assert_string_equal(err->field, "layers");
	assert_non_null(strstr(err->msg, "at most 16"));
	wr_err_free(&err);
	/* sixteen is fine */
	spec.n_layers = WR_MAX_LAYERS;
	sb = NULL;
	assert_int_equal(wr_container_create(&spec, &sb, &err), 0);
	struct wr_exec_result res = run(sb, 0, "ls /opt | wc -l");
	assert_string_equal(res.out, "15\n");
	wr_exec_result_free(&res);
	destroy(&sb);
	const char *missing[] = {g_image, "/nonexistent-layer"};
	spec = (struct wr_sandbox_spec){.layers = missing, .n_layers = 2};
	assert_true(wr_container_create(&spec, &sb, &err) < 0);
	assert_string_equal(err->field, "layers");
	assert_non_null(strstr(err->msg, "layer 1 (/nonexistent-layer)"));
	wr_err_free(&err);
	const char *dev[] = {"/dev/null"};
	spec = (struct wr_sandbox_spec){.layers = dev, .n_layers = 1};
	assert_true(wr_container_create(&spec, &sb, &err) < 0);
	assert_non_null(strstr(err->msg, "layer 0 (/dev/null): not a directory"));
	wr_err_free(&err);
	spec = (struct wr_sandbox_spec){.image = g_image, .layers = missing, .n_layers = 1};
	assert_true(wr_container_create(&spec, &sb, &err) < 0);
	assert_string_equal(err->field, "image");
	wr_err_free(&err);
}

static void test_cycles_leave_nothing_behind(void **state)
{
	(void)state;
	int cycles = getenv("WARREN_TEST_CYCLES") ? atoi(getenv("WARREN_TEST_CYCLES")) : 1000;
	char idmap[300];
	snprintf(idmap, sizeof(idmap), "%s/state/idmap", g_tmp);
	int mounts = count_our_mounts();
	int ranges = count_dir(idmap);
	int cgroups = count_sandbox_cgroups();
	int inits = count_inits();
	int fds = count_dir("/proc/self/fd");
	for (int i = 0; i < cycles; i++) {
		struct wr_sandbox *sb = mk(0);
		destroy(&sb);
	}
	assert_int_equal(count_dir(idmap), ranges);
	assert_int_equal(count_our_mounts(), mounts);
	assert_int_equal(count_inits(), inits);
	/* the image cache holds one fd per image; nothing else may grow */
	assert_true(count_dir("/proc/self/fd") <= fds + 1);
	assert_int_equal(count_sandbox_cgroups(), cgroups);
}

/* Creates through a spawner process: the sandbox is not our child, works
 * the same, and is torn down completely. */
static void test_spawned_sandboxes(void **state)
{
	(void)state;
	wr_err err = NULL;
	assert_int_equal(wr_container_spawners_start(1, &err), 0);
	int ranges_before = 0;
	char idmap[300];
	snprintf(idmap, sizeof(idmap), "%s/state/idmap", g_tmp);
	ranges_before = count_dir(idmap);
	for (int i = 0; i < 20; i++) {
		struct wr_sandbox_spec spec = {.image = g_image, .hostname = "spawned"};
		struct wr_sandbox *sb = NULL;
		int r = wr_container_create_spawned(&spec, &sb, &err);
		if (r < 0)
			fprintf(stderr, "create: %s\n", err->msg);
		assert_int_equal(r, 0);
		char path[64], *st = NULL;
		snprintf(path, sizeof(path), "/proc/%d/stat", (int)wr_sandbox_init_pid(sb));
		assert_true(wr_read_file_at(AT_FDCWD, path, &st, 4096, NULL) > 0);
		int ppid = 0;
		sscanf(strrchr(st, ')') + 2, "%*c %d", &ppid);
		free(st);
		assert_int_not_equal(ppid, (int)getpid()); /* the spawner's child */
		struct wr_exec_result res = run(sb, 0, "hostname; id -u");
		assert_string_equal(res.out, "spawned\n0\n");
		wr_exec_result_free(&res);
		destroy(&sb);
	}
	assert_int_equal(count_dir(idmap), ranges_before);
	/* bad input is reported as from a direct create, field included */
	struct wr_sandbox_spec bad = {.image = g_image, .memory_bytes = 1024};
	struct wr_sandbox *sb = NULL;
	assert_true(wr_container_create_spawned(&bad, &sb, &err) < 0);
	assert_string_equal(err->field, "memory");
	wr_err_free(&err);
	/* layers travel to the spawner, in order, and their errors back */
	char ws[300];
	snprintf(ws, sizeof(ws), "%s/layer-spawned", g_tmp);
	put_file(ws, "opt/where", "spawned layer\n");
	const char *layers[] = {g_image, ws};
	struct wr_sandbox_spec ls = {.layers = layers, .n_layers = 2};
	assert_int_equal(wr_container_create_spawned(&ls, &sb, &err), 0);
	struct wr_exec_result res = run(sb, 0, "cat /opt/where");
	assert_string_equal(res.out, "spawned layer\n");
	wr_exec_result_free(&res);
	destroy(&sb);
	const char *missing[] = {g_image, "/nonexistent-layer"};
	ls = (struct wr_sandbox_spec){.layers = missing, .n_layers = 2};
	assert_true(wr_container_create_spawned(&ls, &sb, &err) < 0);
	assert_string_equal(err->field, "layers");
	assert_non_null(strstr(err->msg, "layer 1"));
	wr_err_free(&err);
}

/* An EROFS layer of its own (mkfs.erofs from a small tree) at path. */
static void mk_erofs(const char *path, const char *content)
{
	char src[300], cmd[1024];
	snprintf(src, sizeof(src), "%s.src", path);
	put_file(src, "opt/reclaim", content);
	snprintf(cmd, sizeof(cmd), "mkfs.erofs --quiet '%s' '%s' && rm -rf '%s'", path, src, src);
	assert_int_equal(system(cmd), 0);
}

/* Waits up to ms for the watched file's inode to be freed (IN_DELETE_SELF
 * comes only when the last reference to an unlinked file goes). */
static bool inode_freed(int ino_fd, int ms)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	struct pollfd pf = {.fd = ino_fd, .events = POLLIN};
	while (poll(&pf, 1, ms) > 0) {
		ssize_t n = read(ino_fd, buf, sizeof(buf));
		for (ssize_t off = 0; n > 0 && off < n;) {
			const struct inotify_event *ev = (const void *)(buf + off);
			if (ev->mask & IN_DELETE_SELF)
				return true;
			off += (ssize_t)(sizeof(*ev) + ev->len);
		}
	}
	return false;
}

/* The image store reclaims an image by unlinking its file. The tier's
 * cached base mount must not keep that file's space: after a sweep (in
 * process) or within a few seconds (spawners sweep when idle) the inode is
 * freed, while a sandbox still using the image keeps working until its
 * destroy frees it. */
static void test_reclaimed_image_frees_its_space(void **state)
{
	(void)state;
	char img[300];
	snprintf(img, sizeof(img), "%s/reclaim.erofs", g_tmp);
	_cleanup_close_ int ino = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	assert_true(ino >= 0);

	/* in process: no sandbox left, the sweep alone frees it */
	mk_erofs(img, "one\n");
	assert_true(inotify_add_watch(ino, img, IN_DELETE_SELF) >= 0);
	const char *layers[] = {g_image, img};
	struct wr_sandbox *sb = mk_layers(layers, 2);
	struct wr_exec_result res = run(sb, 0, "cat /opt/reclaim");
	assert_string_equal(res.out, "one\n");
	wr_exec_result_free(&res);
	destroy(&sb);
	assert_int_equal(unlink(img), 0);
	assert_false(inode_freed(ino, 200)); /* the cache held it */
	assert_true(wr_container_images_sweep() >= 1);
	assert_true(inode_freed(ino, 5000));

	/* a sandbox still running on a reclaimed image keeps it until destroy */
	mk_erofs(img, "two\n");
	assert_true(inotify_add_watch(ino, img, IN_DELETE_SELF) >= 0);
	sb = mk_layers(layers, 2);
	assert_int_equal(unlink(img), 0);
	assert_true(wr_container_images_sweep() >= 1);
	res = run(sb, 0, "cat /opt/reclaim");
	assert_string_equal(res.out, "two\n");
	wr_exec_result_free(&res);
	assert_false(inode_freed(ino, 200));
	destroy(&sb);
	assert_true(inode_freed(ino, 5000));

	/* a spawner's cache: swept by the idle spawner itself */
	wr_err err = NULL;
	assert_int_equal(wr_container_spawners_start(1, &err), 0);
	mk_erofs(img, "three\n");
	assert_true(inotify_add_watch(ino, img, IN_DELETE_SELF) >= 0);
	struct wr_sandbox_spec spec = {.layers = layers, .n_layers = 2};
	int r = wr_container_create_spawned(&spec, &sb, &err);
	if (r < 0)
		fprintf(stderr, "create: %s\n", err->msg);
	assert_int_equal(r, 0);
	res = run(sb, 0, "cat /opt/reclaim");
	assert_string_equal(res.out, "three\n");
	wr_exec_result_free(&res);
	destroy(&sb);
	assert_int_equal(unlink(img), 0);
	assert_true(inode_freed(ino, 5000));
}

int main(void)
{
	/* WARREN_EXEC_CLONE_PARENT=1: the command path of kernels before 6.15,
	 * run by a test of its own (tests/meson.build): what commands do. */
	const struct CMUnitTest clone_parent[] = {
	    cmocka_unit_test(test_exec_basic),
	    cmocka_unit_test(test_command_in_pid1_tree),
	    cmocka_unit_test(test_commands_share_pid1_cgroup_namespace),
	    cmocka_unit_test(test_timeout_kills_tree_and_sandbox_lives_on),
	    cmocka_unit_test(test_background_outlives_command_until_destroy),
	    cmocka_unit_test(test_oom_is_reported),
	    cmocka_unit_test(test_pty_is_a_controlling_terminal),
	    cmocka_unit_test(test_exec_from_a_caller_with_many_fds),
	    cmocka_unit_test(test_exec_ctl_kills_the_tree),
	};
	const char *v = getenv("WARREN_EXEC_CLONE_PARENT");
	if (v && *v && strcmp(v, "0") != 0)
		return cmocka_run_group_tests(clone_parent, group_setup, group_teardown);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_pid1_leads_its_session),
	    cmocka_unit_test(test_command_in_pid1_tree),
	    cmocka_unit_test(test_commands_share_pid1_cgroup_namespace),
	    cmocka_unit_test(test_exec_basic),
	    cmocka_unit_test(test_timeout_kills_tree_and_sandbox_lives_on),
	    cmocka_unit_test(test_background_outlives_command_until_destroy),
	    cmocka_unit_test(test_command_cgroups),
	    cmocka_unit_test(test_oom_is_reported),
	    cmocka_unit_test(test_files_api_on_live_sandbox),
	    cmocka_unit_test(test_pty_is_a_controlling_terminal),
	    cmocka_unit_test(test_exec_from_a_caller_with_many_fds),
	    cmocka_unit_test(test_exec_ctl_kills_the_tree),
	    cmocka_unit_test(test_kill_then_exec_is_refused),
	    cmocka_unit_test(test_bad_spec_names_field),
	    cmocka_unit_test(test_layers_stack_in_order),
	    cmocka_unit_test(test_layers_validated),
	    cmocka_unit_test(test_cycles_leave_nothing_behind),
	    cmocka_unit_test(test_spawned_sandboxes),
	    cmocka_unit_test(test_reclaimed_image_frees_its_space),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
