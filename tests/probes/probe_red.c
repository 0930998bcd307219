/* wr-probe: the red-team commands (tests/redteam). Each prints result lines
 * in the format described at the top of wr-probe.c; lists are capped so a
 * line stays readable. Tokens the test looks for are passed hex-encoded and
 * XORed with 0x5a, so the probe's own argv (visible in /proc) never holds
 * one in clear and a "hit" in our own /proc/self/cmdline cannot happen. */
#include <ftw.h>
#include <sys/sysmacros.h>

#include "probe.h"

#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 1U
#endif

#define LIST_CAP 40
#define HUNT_READ_CAP (256 * 1024)

/* ---- small helpers ------------------------------------------------------ */

static const char *errstr(int e)
{
	static char bufs[8][24];
	static int k;
	k = (k + 1) % 8;
	return errname(e, bufs[k]);
}

/* "ok" or the errno name of a call's result. */
static const char *outcome(long rc, int e)
{
	return rc < 0 ? errstr(e) : "ok";
}

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int unhex_xor(const char *hex, char *out, size_t cap)
{
	size_t n = strlen(hex);
	if (n % 2 || n / 2 + 1 > cap)
		return -1;
	for (size_t i = 0; i < n / 2; i++) {
		unsigned v;
		if (sscanf(hex + 2 * i, "%2x", &v) != 1)
			return -1;
		out[i] = (char)(v ^ 0x5a);
	}
	out[n / 2] = 0;
	return (int)(n / 2);
}

/* A comma-separated list with at most LIST_CAP escaped entries. */
struct list {
	char buf[LIST_CAP * 96];
	size_t len;
	long n;
};

static void list_add(struct list *l, const char *s)
{
	l->n++;
	if (l->n > LIST_CAP)
		return;
	const char *e = esc(s);
	size_t need = strlen(e) + 1;
	if (l->len + need + 1 > sizeof(l->buf))
		return;
	if (l->len)
		l->buf[l->len++] = ',';
	memcpy(l->buf + l->len, e, need - 1);
	l->len += need - 1;
	l->buf[l->len] = 0;
}

/* ---- hunt: walk a tree, read everything, look for tokens ----------------- */

static struct {
	char tok[16][128];
	int ntok;
	size_t maxlen;
	uint64_t deadline;
	int timed_out;
	long dirs, files, opened, bytes, specials;
	long denied[8];
	int denied_err[8];
	struct list hits, names, sockets;
} H;

static void hunt_denied(int e)
{
	for (int i = 0; i < 8; i++) {
		if (H.denied_err[i] == e || H.denied_err[i] == 0) {
			H.denied_err[i] = e;
			H.denied[i]++;
			return;
		}
	}
}

static int name_interesting(const char *base)
{
	static const char *const suffixes[] = {".log", ".jsonl", ".journal", NULL};
	static const char *const words[] = {"answer", "solution", "expected",
					    "secret", "token",	  NULL};
	size_t n = strlen(base);
	for (int i = 0; suffixes[i]; i++) {
		size_t k = strlen(suffixes[i]);
		if (n >= k && strcmp(base + n - k, suffixes[i]) == 0)
			return 1;
	}
	for (int i = 0; words[i]; i++)
		if (strcasestr(base, words[i]))
			return 1;
	return 0;
}

static void hunt_file(const char *path)
{
	static char buf[HUNT_READ_CAP + 256];
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		hunt_denied(errno);
		return;
	}
	H.opened++;
	size_t total = 0;
	ssize_t r;
	while (total < HUNT_READ_CAP && (r = read(fd, buf + total, HUNT_READ_CAP - total)) > 0)
		total += (size_t)r;
	close(fd);
	H.bytes += (long)total;
	for (int t = 0; t < H.ntok; t++) {
		if (memmem(buf, total, H.tok[t], strlen(H.tok[t]))) {
			char s[PATH_MAX + 16];
			snprintf(s, sizeof(s), "%s#%d", path, t);
			list_add(&H.hits, s);
		}
	}
}

static int hunt_visit(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	if (now_ms() > H.deadline) {
		H.timed_out = 1;
		return FTW_STOP;
	}
	const char *base = path + ftw->base;
	/* our own process: its cmdline holds the encoded tokens only, but
	 * its memory and fds are not what we hunt for */
	static char selfdir[32];
	if (!selfdir[0])
		snprintf(selfdir, sizeof(selfdir), "/proc/%d", (int)getpid());
	if (type == FTW_D || type == FTW_DNR) {
		if (!strcmp(path, selfdir) || !strcmp(path, "/proc/self") ||
		    !strcmp(path, "/proc/thread-self") || !strcmp(base, "task"))
			return FTW_SKIP_SUBTREE;
		H.dirs++;
		if (type == FTW_DNR)
			hunt_denied(EACCES);
		if (name_interesting(base))
			list_add(&H.names, path);
		return FTW_CONTINUE;
	}
	if (type == FTW_NS) {
		hunt_denied(EACCES);
		return FTW_CONTINUE;
	}
	if (name_interesting(base))
		list_add(&H.names, path);
	if (S_ISSOCK(st->st_mode))
		list_add(&H.sockets, path);
	if (S_ISREG(st->st_mode)) {
		H.files++;
		hunt_file(path);
	} else if (!S_ISDIR(st->st_mode) && !S_ISLNK(st->st_mode)) {
		H.specials++;
	}
	return FTW_CONTINUE;
}

/* hunt ROOT SECONDS [XORHEX-TOKEN...] */
static int cmd_hunt(int argc, char **argv)
{
	if (argc < 2)
		return usage("hunt ROOT SECONDS [TOKEN-HEX...]");
	memset(&H, 0, sizeof(H));
	for (int i = 2; i < argc && H.ntok < 16; i++)
		if (unhex_xor(argv[i], H.tok[H.ntok], sizeof(H.tok[0])) > 0)
			H.ntok++;
	H.deadline = now_ms() + (uint64_t)parse_long(argv[1], 60) * 1000;
	uint64_t t0 = now_ms();
	int r = nftw(argv[0], hunt_visit, 64, FTW_PHYS | FTW_ACTIONRETVAL);
	int e = errno;
	printf("hunt %s%s root=%s done=%d ms=%llu dirs=%ld files=%ld opened=%ld bytes=%ld "
	       "specials=%ld",
	       r < 0 ? "errno=" : "ok", r < 0 ? errstr(e) : "", esc(argv[0]), !H.timed_out,
	       (unsigned long long)(now_ms() - t0), H.dirs, H.files, H.opened, H.bytes, H.specials);
	printf(" denied=");
	for (int i = 0; i < 8 && H.denied_err[i]; i++)
		printf("%s%s:%ld", i ? "," : "", errstr(H.denied_err[i]), H.denied[i]);
	printf(" nhits=%ld hits=%s nnames=%ld names=%s nsockets=%ld sockets=%s\n", H.hits.n,
	       H.hits.buf, H.names.n, H.names.buf, H.sockets.n, H.sockets.buf);
	fflush(stdout);
	return 0;
}

/* ---- fds after start and exec: where does each lead? --------------------- */

static int cmd_fdwalk(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (d == NULL) {
		result("fdwalk", -1, errno, NULL);
		return 0;
	}
	int self = dirfd(d);
	int fds[256], n = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL && n < 256)
		if (de->d_name[0] != '.' && atoi(de->d_name) != self)
			fds[n++] = atoi(de->d_name);
	closedir(d);
	printf("fdwalk ok count=%d", n);
	for (int i = 0; i < n; i++) {
		char p[64], link[PATH_MAX], up[PATH_MAX];
		snprintf(p, sizeof(p), "/proc/self/fd/%d", fds[i]);
		ssize_t k = readlink(p, link, sizeof(link) - 1);
		link[k < 0 ? 0 : k] = 0;
		/* openat(fd, "../../..") climbs from a directory fd; from
		 * anything else it must fail with ENOTDIR */
		int u = openat(fds[i], "../../..", O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (u >= 0) {
			snprintf(p, sizeof(p), "/proc/self/fd/%d", u);
			k = readlink(p, up, sizeof(up) - 1);
			up[k < 0 ? 0 : k] = 0;
			close(u);
		} else {
			snprintf(up, sizeof(up), "errno=%s", errstr(errno));
		}
		printf(" %d=%s", fds[i], esc(link));
		printf("|%s", esc(up));
	}
	putchar('\n');
	fflush(stdout);
	return 0;
}

/* ---- other processes: their fds, memory, exe ----------------------------- */

static void proc_status(int pid, char *comm, size_t cap, long *uid)
{
	char p[64], text[4096];
	snprintf(p, sizeof(p), "/proc/%d/status", pid);
	strcpy(comm, "?");
	*uid = -1;
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t n = read(fd, text, sizeof(text) - 1);
	close(fd);
	if (n <= 0)
		return;
	text[n] = 0;
	char *l = strstr(text, "Name:");
	if (l && sscanf(l, "Name:\t%63s", comm) != 1)
		strcpy(comm, "?");
	comm[cap - 1] = 0;
	l = strstr(text, "\nUid:");
	if (l)
		*uid = strtol(l + 5, NULL, 10);
}

static const char *try_open(int pid, const char *what, int flags)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/%s", pid, what);
	int fd = open(p, flags | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return errstr(errno);
	char c;
	/* an open that succeeded: can we also read it? */
	ssize_t r = (flags & O_ACCMODE) == O_WRONLY ? 0 : read(fd, &c, 1);
	int e = errno;
	close(fd);
	if (r < 0 && e != EAGAIN)
		return errstr(e);
	return "ok";
}

static void proc_attack(int pid)
{
	char comm[64];
	long uid;
	proc_status(pid, comm, sizeof(comm), &uid);
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/fd", pid);
	DIR *d = opendir(p);
	char fdres[32];
	if (d) {
		int k = 0;
		struct dirent *de;
		while ((de = readdir(d)) != NULL)
			k += de->d_name[0] != '.';
		closedir(d);
		snprintf(fdres, sizeof(fdres), "ok:%d", k);
	} else {
		snprintf(fdres, sizeof(fdres), "%s", errstr(errno));
	}
	const char *fd0 = pid == getpid() ? "self" : try_open(pid, "fd/0", O_RDONLY);
	const char *mem = try_open(pid, "mem", O_RDONLY);
	const char *env = try_open(pid, "environ", O_RDONLY);
	const char *exew = try_open(pid, "exe", O_WRONLY);
	char exe[PATH_MAX];
	snprintf(p, sizeof(p), "/proc/%d/exe", pid);
	ssize_t k = readlink(p, exe, sizeof(exe) - 1);
	if (k < 0)
		snprintf(exe, sizeof(exe), "errno=%s", errstr(errno));
	else
		exe[k] = 0;
	long pfd = syscall(__NR_pidfd_open, pid, 0);
	const char *pidfd = outcome(pfd, errno);
	long g = pfd >= 0 ? syscall(__NR_pidfd_getfd, pfd, 0, 0) : -1;
	const char *getfd = pfd >= 0 ? outcome(g, errno) : "skip";
	if (g >= 0)
		close((int)g);
	if (pfd >= 0)
		close((int)pfd);
	char lb[8];
	struct iovec l = {lb, 1}, r = {(void *)0x400000, 1};
	long vr = syscall(__NR_process_vm_readv, pid, &l, 1, &r, 1, 0);
	const char *vmread = vr < 0 ? errstr(errno) : "ok";
	const char *ptr = "self";
	if (pid != getpid()) {
		long pr = syscall(__NR_ptrace, 0x4206 /* SEIZE */, pid, 0, 0);
		ptr = outcome(pr, errno);
		if (pr == 0)
			syscall(__NR_ptrace, 17 /* DETACH */, pid, 0, 0);
	}
	printf("proc pid=%d uid=%ld comm=%s self=%d fd=%s fd0=%s mem=%s environ=%s exe=%s "
	       "exe_write=%s pidfd=%s getfd=%s vmread=%s ptrace=%s\n",
	       pid, uid, esc(comm), pid == getpid(), fdres, fd0, mem, env, esc(exe), exew, pidfd,
	       getfd, vmread, ptr);
}

/* procwalk: every process we can see, and what we can take from it. */
static int cmd_procwalk(void)
{
	DIR *d = opendir("/proc");
	if (d == NULL) {
		result("procwalk", -1, errno, NULL);
		return 0;
	}
	int pids[4096], n = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL && n < 4096)
		if (de->d_name[0] >= '1' && de->d_name[0] <= '9')
			pids[n++] = atoi(de->d_name);
	closedir(d);
	printf("procwalk ok count=%d self=%d pids=", n, (int)getpid());
	for (int i = 0; i < n; i++)
		printf("%s%d", i ? "," : "", pids[i]);
	putchar('\n');
	for (int i = 0; i < n; i++)
		proc_attack(pids[i]);
	fflush(stdout);
	return 0;
}

/* ---- extent sharing between our file and a protected one ----------------- */

static int cmd_extent_swap(int argc, char **argv)
{
	if (argc < 1)
		return usage("extent-swap PROTECTED");
	char own[64];
	snprintf(own, sizeof(own), "/tmp/wr-probe-own.%d", (int)getpid());
	int a = open(own, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int p = open(argv[0], O_RDONLY | O_CLOEXEC);
	int pw = open(argv[0], O_RDWR | O_CLOEXEC);
	printf("extent-swap setup own=%s protected=%s protected_rw=%s\n", outcome(a, errno),
	       outcome(p, p < 0 ? errno : 0), pw < 0 ? errstr(errno) : "ok");
	if (pw >= 0)
		close(pw);
	if (a < 0 || p < 0)
		return 0;
	static char block[8192];
	memset(block, 'o', sizeof(block));
	if (write(a, block, sizeof(block)) < 0)
		printf("extent-swap write errno=%s\n", errstr(errno));
	fsync(a);
	struct {
		int64_t src_fd;
		uint64_t src_offset, src_length, dest_offset;
	} fcr = {a, 0, 4096, 0};
	struct {
		uint64_t src_offset, src_length;
		uint16_t dest_count, reserved1;
		uint32_t reserved2;
		struct {
			int64_t dest_fd;
			uint64_t dest_offset, bytes_deduped;
			int32_t status;
			uint32_t reserved;
		} info[1];
	} fdr = {0, 4096, 1, 0, 0, {{p, 0, 0, 0, 0}}};
	struct {
		int64_t sx_version, sx_fdtarget, sx_fdtmp;
		int64_t sx_offset, sx_length;
		char pad[16];
		char stat[136];
	} sx;
	memset(&sx, 0, sizeof(sx));
	sx.sx_version = 0;
	sx.sx_fdtarget = p;
	sx.sx_fdtmp = a;
	sx.sx_length = 4096;
	struct {
		int32_t file1_fd;
		uint32_t pad;
		uint64_t file1_offset, file2_offset, length, flags;
	} xr = {p, 0, 0, 0, 4096, 0};
	int blk = 0;
	long r;
	/* into the protected file: must never work */
	r = ioctl(p, P_FICLONE, a);
	printf("extent-swap FICLONE-into-protected %s\n", outcome(r, errno));
	r = ioctl(p, P_FICLONERANGE, &fcr);
	printf("extent-swap FICLONERANGE-into-protected %s\n", outcome(r, errno));
	r = ioctl(a, P_FIDEDUPERANGE, &fdr);
	printf("extent-swap FIDEDUPERANGE-into-protected %s\n", outcome(r, errno));
	r = ioctl(a, P_XFS_SWAPEXT, &sx);
	printf("extent-swap XFS_IOC_SWAPEXT %s\n", outcome(r, errno));
	r = ioctl(a, P_XFS_EXCHRANGE, &xr);
	printf("extent-swap XFS_IOC_EXCHANGE_RANGE %s\n", outcome(r, errno));
	/* from the protected file into ours: a read by other means, refused too */
	r = ioctl(a, P_FICLONE, p);
	printf("extent-swap FICLONE-from-protected %s\n", outcome(r, errno));
	r = ioctl(p, P_FIBMAP, &blk);
	printf("extent-swap FIBMAP %s\n", outcome(r, errno));
	close(a);
	close(p);
	unlink(own);
	fflush(stdout);
	return 0;
}

/* ---- namespaces, cgroup release_agent, core_pattern, devices ------------ */

static int cmd_release_agent(void)
{
	long r = syscall(__NR_unshare, 0x10000000 | 0x00020000 | 0x02000000);
	printf("release-agent unshare-user-mnt-cgroup %s\n", outcome(r, errno));
	mkdir("/tmp/wr-cg", 0755);
	r = mount("cgroup", "/tmp/wr-cg", "cgroup", 0, "rdma");
	printf("release-agent mount-cgroup-v1 %s\n", outcome(r, errno));
	r = syscall(__NR_fsopen, "cgroup", 1);
	printf("release-agent fsopen-cgroup %s\n", outcome(r, errno));
	static const char *const agents[] = {"/sys/fs/cgroup/release_agent",
					     "/sys/fs/cgroup/rdma/release_agent",
					     "/sys/fs/cgroup/memory/release_agent",
					     "/sys/fs/cgroup/pids/release_agent",
					     "/sys/fs/cgroup/unified/cgroup.procs",
					     "/sys/fs/cgroup/cgroup.procs",
					     "/sys/fs/cgroup/memory/memory.limit_in_bytes",
					     "/sys/fs/cgroup/pids/pids.max",
					     "/sys/fs/cgroup/memory.max",
					     "/sys/fs/cgroup/pids.max",
					     NULL};
	for (int i = 0; agents[i]; i++) {
		int fd = open(agents[i], O_WRONLY | O_CLOEXEC);
		printf("release-agent write %s %s\n", esc(agents[i]), outcome(fd, errno));
		if (fd >= 0)
			close(fd);
	}
	rmdir("/tmp/wr-cg");
	fflush(stdout);
	return 0;
}

static int cmd_core_pattern(void)
{
	int fd = open("/proc/sys/kernel/core_pattern", O_WRONLY | O_CLOEXEC);
	printf("core-pattern write-proc %s\n", outcome(fd, errno));
	if (fd >= 0)
		close(fd);
	mkdir("/tmp/wr-proc", 0755);
	long r = mount("proc", "/tmp/wr-proc", "proc", 0, NULL);
	printf("core-pattern mount-proc %s\n", outcome(r, errno));
	r = syscall(__NR_fsopen, "proc", 1);
	printf("core-pattern fsopen-proc %s\n", outcome(r, errno));
	r = syscall(__NR_open_tree, AT_FDCWD, "/proc", 1 | O_CLOEXEC);
	printf("core-pattern open_tree-proc %s\n", outcome(r, errno));
	rmdir("/tmp/wr-proc");
	fflush(stdout);
	return 0;
}

static int cmd_devices(void)
{
	static const struct {
		const char *name;
		mode_t type;
		int maj, min;
	} nodes[] = {{"blk-sda", S_IFBLK, 8, 0},
		     {"chr-mem", S_IFCHR, 1, 1},
		     {"chr-kmsg", S_IFCHR, 1, 11},
		     {"blk-loop0", S_IFBLK, 7, 0},
		     {"chr-null", S_IFCHR, 1, 3}};
	for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++) {
		char p[64];
		snprintf(p, sizeof(p), "/tmp/wr-%s.%d", nodes[i].name, (int)getpid());
		long r = mknod(p, nodes[i].type | 0600,
			       makedev((unsigned)nodes[i].maj, (unsigned)nodes[i].min));
		printf("devices mknod-%s %s\n", nodes[i].name, outcome(r, errno));
		if (r == 0)
			unlink(p);
	}
	static const char *const raw[] = {
	    "/dev/sda",	 "/dev/vda",	 "/dev/nvme0n1", "/dev/xvda",		"/dev/loop0",
	    "/dev/mem",	 "/dev/kmem",	 "/dev/port",	 "/dev/kmsg",		"/dev/userfaultfd",
	    "/dev/fuse", "/dev/net/tun", "/dev/dm-0",	 "/dev/mapper/control", NULL};
	for (int i = 0; raw[i]; i++) {
		int fd = open(raw[i], O_RDONLY | O_CLOEXEC | O_NONBLOCK);
		printf("devices open %s %s\n", esc(raw[i]), outcome(fd, errno));
		if (fd >= 0)
			close(fd);
	}
	fflush(stdout);
	return 0;
}

/* ---- CPU, memory ---------------------------------------------------------- */

static volatile int spin_stop;
static void *spin_main(void *arg)
{
	volatile unsigned long x = 0;
	while (!spin_stop)
		x++;
	return arg;
}

/* spin THREADS SECONDS: busy threads; CPU time used vs wall time */
static int cmd_spin(int argc, char **argv)
{
	long nt = parse_long(argc > 0 ? argv[0] : NULL, 2);
	long secs = parse_long(argc > 1 ? argv[1] : NULL, 2);
	if (nt < 1 || nt > 64 || secs < 1)
		return usage("spin THREADS SECONDS");
	pthread_t t[64];
	uint64_t t0 = now_ms();
	for (long i = 0; i < nt; i++)
		pthread_create(&t[i], NULL, spin_main, NULL);
	sleep((unsigned)secs);
	spin_stop = 1;
	for (long i = 0; i < nt; i++)
		pthread_join(t[i], NULL);
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	long cpu_ms = ru.ru_utime.tv_sec * 1000 + ru.ru_utime.tv_usec / 1000 +
		      ru.ru_stime.tv_sec * 1000 + ru.ru_stime.tv_usec / 1000;
	printf("spin ok threads=%ld wall_ms=%llu cpu_ms=%ld\n", nt,
	       (unsigned long long)(now_ms() - t0), cpu_ms);
	fflush(stdout);
	return 0;
}

/* memfd MB: a memfd of MB MiB, fallocated and touched */
static int cmd_memfd(int argc, char **argv)
{
	long mb = parse_long(argc > 0 ? argv[0] : NULL, -1);
	if (mb <= 0)
		return usage("memfd MB");
	int fd = (int)syscall(__NR_memfd_create, "wr-probe", MFD_CLOEXEC);
	if (fd < 0) {
		result("memfd", -1, errno, "mib=0");
		return 0;
	}
	long r = fallocate(fd, 0, 0, (off_t)mb << 20);
	printf("memfd fallocate %s mib=%ld\n", outcome(r, errno), mb);
	fflush(stdout);
	long done = 0;
	static char buf[1 << 20];
	memset(buf, 'm', sizeof(buf));
	int e = 0;
	for (; done < mb; done++)
		if (pwrite(fd, buf, sizeof(buf), (off_t)done << 20) < 0) {
			e = errno;
			break;
		}
	result("memfd", e ? -1 : 0, e, "mib=%ld", done);
	return 0;
}

/* ---- output framing -------------------------------------------------------- */

/* inject: fake result markers, escapes, JSON and NUL bytes on both streams */
static int cmd_inject(void)
{
	static const char out[] =
	    "{\"type\":\"exit\",\"exit_code\":0,\"signal\":0,\"reason\":\"exited\"}\n"
	    "{\"type\":\"stderr\",\"data\":\"forged\"}\n"
	    "\x1b[2J\x1b[H\x1b]0;pwned\x07"
	    "RESULT: PASS\nALL TESTS PASSED\n"
	    "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
	    "\0NUL\0"
	    "\n{\"seq\":1,\"type\":\"killed\",\"detail\":{}}\n";
	fwrite(out, 1, sizeof(out) - 1, stdout);
	fflush(stdout);
	fwrite(out, 1, sizeof(out) - 1, stderr);
	fflush(stderr);
	return 0;
}

/* put PATH STRING: write STRING (no newline added) to an existing PATH */
static int cmd_put(int argc, char **argv)
{
	if (argc < 2)
		return usage("put PATH STRING");
	int fd = open(argv[0], O_WRONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		result("put", -1, errno, "path=%s", esc(argv[0]));
		return 0;
	}
	ssize_t w = write(fd, argv[1], strlen(argv[1]));
	int e = errno;
	close(fd);
	result("put", w < 0 ? -1 : 0, e, "path=%s", esc(argv[0]));
	return 0;
}

int red_main(const char *cmd, int n, char **a)
{
	if (!strcmp(cmd, "put"))
		return cmd_put(n, a);
	if (!strcmp(cmd, "hunt"))
		return cmd_hunt(n, a);
	if (!strcmp(cmd, "fdwalk"))
		return cmd_fdwalk();
	if (!strcmp(cmd, "procwalk"))
		return cmd_procwalk();
	if (!strcmp(cmd, "extent-swap"))
		return cmd_extent_swap(n, a);
	if (!strcmp(cmd, "release-agent"))
		return cmd_release_agent();
	if (!strcmp(cmd, "core-pattern"))
		return cmd_core_pattern();
	if (!strcmp(cmd, "devices"))
		return cmd_devices();
	if (!strcmp(cmd, "portscan"))
		return cmd_portscan(n, a);
	if (!strcmp(cmd, "egress"))
		return cmd_egress(n, a);
	if (!strcmp(cmd, "dns"))
		return cmd_dns(n, a);
	if (!strcmp(cmd, "abstract"))
		return cmd_abstract(n, a);
	if (!strcmp(cmd, "forge"))
		return cmd_forge(n, a);
	if (!strcmp(cmd, "spin"))
		return cmd_spin(n, a);
	if (!strcmp(cmd, "memfd"))
		return cmd_memfd(n, a);
	if (!strcmp(cmd, "inject"))
		return cmd_inject();
	return -1;
}
