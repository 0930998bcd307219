/* Checks of a running QEMU's jail from the host, shared by the microVM and
 * VM tier tests (tiers/qemu_proc.c): its own unprivileged uid and gid, no
 * capability in any set, no_new_privs, a seccomp filter, PID 1 of its own
 * PID namespace and in namespaces of its own, its root the VM's jail
 * directory holding only the mount points it needs, read-only, and no fd
 * of the test process. Include after cmocka.h. */
#ifndef WARREN_TESTS_QEMU_JAIL_H
#define WARREN_TESTS_QEMU_JAIL_H

#include <dirent.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

static unsigned long long jail_status_field(pid_t pid, const char *key, int base)
{
	char p[64], line[512];
	snprintf(p, sizeof(p), "/proc/%d/status", (int)pid);
	FILE *f = fopen(p, "re");
	assert_non_null(f);
	size_t kl = strlen(key);
	unsigned long long v = ~0ull;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, key, kl) == 0 && line[kl] == ':')
			v = strtoull(line + kl + 1, NULL, base);
	fclose(f);
	return v;
}

static void jail_assert_own_ns(pid_t pid, const char *ns)
{
	char a[64], b[64], la[128] = "", lb[128] = "";
	snprintf(a, sizeof(a), "/proc/%d/ns/%s", (int)pid, ns);
	snprintf(b, sizeof(b), "/proc/self/ns/%s", ns);
	assert_true(readlink(a, la, sizeof(la) - 1) > 0);
	assert_true(readlink(b, lb, sizeof(lb) - 1) > 0);
	if (strcmp(la, lb) == 0)
		fail_msg("QEMU shares the %s namespace (%s)", ns, la);
}

/* The names in dir (not . and ..), sorted, joined by ",". */
static void jail_list(const char *dir, char *out, size_t len)
{
	struct dirent **names = NULL;
	int n = scandir(dir, &names, NULL, alphasort);
	assert_true(n >= 0);
	out[0] = '\0';
	for (int i = 0; i < n; i++) {
		if (strcmp(names[i]->d_name, ".") && strcmp(names[i]->d_name, "..")) {
			if (out[0])
				strncat(out, ",", len - strlen(out) - 1);
			strncat(out, names[i]->d_name, len - strlen(out) - 1);
		}
		free(names[i]);
	}
	free(names);
}

/* pid: QEMU; vm_dir: the VM's directory (its jail is vm_dir/root); want:
 * the jail's entries, sorted, comma-joined; canary: a path the test holds
 * open without O_CLOEXEC, which QEMU must not have inherited. */
static void assert_qemu_jailed(pid_t pid, const char *vm_dir, const char *want, const char *canary)
{
	unsigned long long uid = jail_status_field(pid, "Uid", 10);
	assert_true(uid >= 0x50000000ull && uid < 0x50010000ull);
	assert_int_equal(jail_status_field(pid, "Gid", 10), uid);
	const char *caps[] = {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"};
	for (size_t i = 0; i < 5; i++)
		if (jail_status_field(pid, caps[i], 16) != 0)
			fail_msg("QEMU's %s is not empty", caps[i]);
	assert_int_equal(jail_status_field(pid, "NoNewPrivs", 10), 1);
	assert_int_equal(jail_status_field(pid, "Seccomp", 10), 2);
	/* PID 1 of a PID namespace of its own ("NSpid: <host> 1") */
	char p[PATH_MAX], line[512];
	snprintf(p, sizeof(p), "/proc/%d/status", (int)pid);
	FILE *f = fopen(p, "re");
	assert_non_null(f);
	bool ns1 = false;
	while (fgets(line, sizeof(line), f)) {
		int host, inner;
		if (sscanf(line, "NSpid: %d %d", &host, &inner) == 2)
			ns1 = host == pid && inner == 1;
	}
	fclose(f);
	assert_true(ns1);
	const char *nss[] = {"net", "mnt", "ipc", "uts", "pid"};
	for (size_t i = 0; i < 5; i++)
		jail_assert_own_ns(pid, nss[i]);
	/* its root is the jail directory (the same inode, seen through its
	 * own mounts), read-only, with only what QEMU opens by path */
	struct stat rs, js;
	char jail[PATH_MAX], list[512];
	snprintf(jail, sizeof(jail), "%s/root", vm_dir);
	snprintf(p, sizeof(p), "/proc/%d/root", (int)pid);
	assert_int_equal(stat(p, &rs), 0);
	assert_int_equal(stat(jail, &js), 0);
	assert_true(rs.st_ino == js.st_ino && rs.st_dev == js.st_dev);
	jail_list(p, list, sizeof(list));
	assert_string_equal(list, want);
	/* on the host side, the same names and no mount (they live only in
	 * QEMU's mount namespace) */
	jail_list(jail, list, sizeof(list));
	assert_string_equal(list, want);
	/* the host's mount table has nothing under the VM's directory */
	FILE *mi = fopen("/proc/self/mountinfo", "re");
	assert_non_null(mi);
	while (fgets(line, sizeof(line), mi))
		if (strstr(line, vm_dir))
			fail_msg("a mount in the VM's directory: %s", line);
	fclose(mi);
	struct statvfs vs;
	assert_int_equal(statvfs(p, &vs), 0);
	assert_true(vs.f_flag & ST_RDONLY);
	snprintf(p, sizeof(p), "/proc/%d/root/usr", (int)pid);
	assert_int_equal(statvfs(p, &vs), 0);
	assert_true((vs.f_flag & ST_RDONLY) && (vs.f_flag & ST_NOSUID));
	/* it cannot reach the host's files: no /etc, /proc, /tmp in there */
	snprintf(p, sizeof(p), "/proc/%d/root/etc", (int)pid);
	assert_int_not_equal(access(p, F_OK), 0);
	/* no fd of ours leaked into it */
	snprintf(p, sizeof(p), "/proc/%d/fd", (int)pid);
	DIR *d = opendir(p);
	assert_non_null(d);
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		char fp[PATH_MAX + 300], target[PATH_MAX] = "";
		snprintf(fp, sizeof(fp), "%s/%s", p, de->d_name);
		if (readlink(fp, target, sizeof(target) - 1) > 0 && strcmp(target, canary) == 0)
			fail_msg("QEMU inherited fd %s (%s)", de->d_name, target);
	}
	closedir(d);
}

#endif
