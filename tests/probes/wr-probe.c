/* wr-probe: a static multi-call probe that integration and red-team tests
 * copy into a sandbox image and run inside it.
 *
 *   wr-probe <command> [args...]
 *
 * Each command tries one thing and prints ONE result line on stdout, then
 * exits 0 when the probe itself ran: whether the outcome is a pass is for
 * the test to decide. Result lines have the form
 *
 *   <subject> ok [key=value ...]
 *   <subject> errno=<NAME> [key=value ...]
 *
 * with errno names from a fixed table ("errno=<number>" for the rest) and
 * values that never contain spaces: paths and names are %XX-escaped,
 * multi-valued fields are comma-separated (uid=0,0,0,0), limits are
 * soft/hard with "inf" for unlimited. Example:
 *   status ok uid=0,0,0,0 gid=0,0,0,0 groups=0 capinh=... capprm=... capeff=...
 *     capbnd=... capamb=... nonewprivs=1 seccomp=2 seccomp_filters=1 pid=7
 *     ppid=1 hostname=box nofile=1024/1024 core=0/0      (all on one line) Usage
 * errors print "usage: ..." on stderr and exit 2. Commands that are meant to
 * be killed (membomb, sys x32-getpid, yes, kill-self) may print nothing.
 *
 * Commands
 *   sys NAME [PID]      one syscall with benign arguments (see sys_table);
 *                       NAME may also be a number (raw call, zero args).
 *                       PID is the target of ptrace, process_vm_readv,
 *                       kcmp and pidfd_getfd (default 1).
 *   ioctl NAME          FICLONE, FICLONERANGE, FIDEDUPERANGE, FIBMAP,
 *                       XFS_IOC_SWAPEXT, XFS_IOC_EXCHANGE_RANGE, TIOCSTI,
 *                       TIOCLINUX and variants (see ioctl_table) on files
 *                       the probe creates in /tmp, ttys on fd 0 or /dev/tty
 *   status              ids, capability sets, no_new_privs, seccomp, pid,
 *                       ppid, hostname, RLIMIT_NOFILE and RLIMIT_CORE
 *   read PATH           bytes read (at most 1 MiB)
 *   write PATH BYTES    create/truncate PATH and write BYTES bytes of 'x'
 *   ls PATH             number of entries and their names
 *   fds                 every /proc/self/fd entry and its target
 *   forkbomb            fork until failure (children pause); prints the
 *                       count and the errno, then kills the children
 *   threads N           start up to N threads; count and errno
 *   membomb MB          allocate and touch MB MiB (expect an OOM kill)
 *   diskfill DIR        1 MiB writes to DIR/wr-probe-fill.<pid> until
 *                       failure; MiB written and errno (the file stays)
 *   inodefill DIR       empty files in DIR/wr-probe-inodes.<pid>/ until
 *                       failure; count and errno (the files stay)
 *   fdfill              open /dev/null until failure; then raise the soft
 *                       NOFILE limit to the hard one, and the hard above
 *   yes [BYTES]         "y\n" forever, or one line of BYTES bytes without a
 *                       newline, on stdout; summary on stderr at EPIPE
 *   linger SECONDS      setsid + double fork; the grandchild ignores
 *                       SIGTERM/SIGHUP, detaches from stdio, writes its pid
 *                       to /tmp/linger.pid and sleeps; we return at once
 *   sleep SECONDS       sleep
 *   exit N              exit with status N
 *   kill-self SIGNAL    raise SIGNAL (name like TERM/SIGTERM, or number)
 *   kill PID SIGNAL     send SIGNAL to PID (0 probes)
 *   sched-fifo          sched_setscheduler(SCHED_FIFO, 1)
 *   connect-unix PATH   connect a stream unix socket to PATH
 *   connect-abstract NAME  same for the abstract name NAME
 *   connect-tcp ADDR PORT  TCP connect (IPv4 or IPv6 literal), 3 s timeout
 *   send-udp ADDR PORT  one unconnected UDP datagram (sendto)
 *   socket KIND         socket(): packet (AF_PACKET raw), raw4 (AF_INET
 *                       SOCK_RAW ICMP), raw6, ping4 (ICMP datagram socket)
 *   ping ADDR connect|sendto  one ICMP/ICMPv6 echo request from a ping
 *                       socket, connect()ed first or sent unconnected
 *
 * Red-team commands (probe_red.c; TOKEN-HEX is a token XORed with 0x5a and
 * hex-encoded, so the probe's argv never holds the token itself):
 *   hunt ROOT SECS TOKEN-HEX...  walk ROOT (no symlinks), read every regular
 *                       file (256 KiB each) for the tokens; counts, hits,
 *                       interesting names (*.log, *answer*...), sockets
 *   fdwalk              every fd, its target and where openat(fd, "../../..")
 *                       leads
 *   procwalk            every visible process: its fds, mem, environ, exe
 *                       (and exe for writing), pidfd_getfd, process_vm_readv,
 *                       ptrace
 *   extent-swap FILE    FICLONE/FICLONERANGE/FIDEDUPERANGE/XFS swap and
 *                       exchange-range/FIBMAP between a file of ours and FILE
 *   release-agent       unshare user+mnt+cgroup, mount cgroup v1, write
 *                       release_agent and cgroup limit files
 *   core-pattern        write core_pattern directly and via a new procfs
 *   devices             mknod block/char devices; open raw disks and /dev/mem
 *   portscan ADDR FROM TO [MS]  TCP connect scan; counts per outcome
 *   egress ADDR4 ADDR6 PORT  TCP/UDP v4/v6, ICMP, raw IP, AF_PACKET, netlink
 *   dns NAME SERVER...  DNS query over UDP/TCP 53 and DoH's TCP 443
 *   abstract [TOKEN-HEX...]  connect to every abstract socket seen
 *   forge unix PATH | forge tcp ADDR PORT  send an API request
 *   spin THREADS SECS   busy threads; CPU time used
 *   memfd MB            memfd_create + fallocate + writes
 *   inject              fake exit lines, escapes, JSON, NUL on stdout/stderr
 *   put PATH STRING     write STRING into the existing file PATH
 *
 * Sources: wr-probe.c (output, facts, main), probe_sys.c (sys, ioctl),
 * probe_res.c (resources, processes, connects), probe_red.c; no dependency
 * but static glibc. */
#include "probe.h"

/* ---- output ------------------------------------------------------------- */

static const struct {
	int num;
	const char *name;
} errno_names[] = {
    {EPERM, "EPERM"},
    {ENOENT, "ENOENT"},
    {ESRCH, "ESRCH"},
    {EINTR, "EINTR"},
    {EIO, "EIO"},
    {ENXIO, "ENXIO"},
    {E2BIG, "E2BIG"},
    {ENOEXEC, "ENOEXEC"},
    {EBADF, "EBADF"},
    {ECHILD, "ECHILD"},
    {EAGAIN, "EAGAIN"},
    {ENOMEM, "ENOMEM"},
    {EACCES, "EACCES"},
    {EFAULT, "EFAULT"},
    {EBUSY, "EBUSY"},
    {EEXIST, "EEXIST"},
    {EXDEV, "EXDEV"},
    {ENODEV, "ENODEV"},
    {ENOTDIR, "ENOTDIR"},
    {EISDIR, "EISDIR"},
    {EINVAL, "EINVAL"},
    {ENFILE, "ENFILE"},
    {EMFILE, "EMFILE"},
    {ENOTTY, "ENOTTY"},
    {ETXTBSY, "ETXTBSY"},
    {EFBIG, "EFBIG"},
    {ENOSPC, "ENOSPC"},
    {ESPIPE, "ESPIPE"},
    {EROFS, "EROFS"},
    {EMLINK, "EMLINK"},
    {EPIPE, "EPIPE"},
    {ERANGE, "ERANGE"},
    {ENAMETOOLONG, "ENAMETOOLONG"},
    {ENOSYS, "ENOSYS"},
    {ENOTEMPTY, "ENOTEMPTY"},
    {ELOOP, "ELOOP"},
    {ENODATA, "ENODATA"},
    {EOVERFLOW, "EOVERFLOW"},
    {ENOTSOCK, "ENOTSOCK"},
    {EPROTOTYPE, "EPROTOTYPE"},
    {EOPNOTSUPP, "EOPNOTSUPP"},
    {EAFNOSUPPORT, "EAFNOSUPPORT"},
    {EADDRINUSE, "EADDRINUSE"},
    {EADDRNOTAVAIL, "EADDRNOTAVAIL"},
    {ENETDOWN, "ENETDOWN"},
    {ENETUNREACH, "ENETUNREACH"},
    {ECONNRESET, "ECONNRESET"},
    {EISCONN, "EISCONN"},
    {ETIMEDOUT, "ETIMEDOUT"},
    {ECONNREFUSED, "ECONNREFUSED"},
    {EHOSTUNREACH, "EHOSTUNREACH"},
    {EALREADY, "EALREADY"},
    {EINPROGRESS, "EINPROGRESS"},
    {EDQUOT, "EDQUOT"},
    {ENOKEY, "ENOKEY"},
    {ESTALE, "ESTALE"},
    {EBADFD, "EBADFD"},
    {ENOMSG, "ENOMSG"},
    {EPROTONOSUPPORT, "EPROTONOSUPPORT"},
};

const char *errname(int e, char buf[24])
{
	for (size_t i = 0; i < sizeof(errno_names) / sizeof(errno_names[0]); i++)
		if (errno_names[i].num == e)
			return errno_names[i].name;
	snprintf(buf, 24, "%d", e);
	return buf;
}

/* Escape a value so it contains no spaces or control bytes. */
void put_escaped(const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p <= ' ' || *p >= 0x7f || *p == '%' || *p == ',' || *p == '=')
			printf("%%%02X", *p);
		else
			putchar(*p);
	}
}

/* The escaped form of s in a static buffer (one per line is enough). */
const char *esc(const char *s)
{
	static char out[3 * PATH_MAX + 1];
	size_t o = 0;
	for (const unsigned char *p = (const unsigned char *)s; *p && o + 4 < sizeof(out); p++) {
		if (*p <= ' ' || *p >= 0x7f || *p == '%' || *p == ',' || *p == '=')
			o += (size_t)snprintf(out + o, sizeof(out) - o, "%%%02X", *p);
		else
			out[o++] = (char)*p;
	}
	out[o] = 0;
	return out;
}

void result(const char *subject, long rc, int err, const char *fmt, ...)
{
	char b[24];
	put_escaped(subject);
	if (rc < 0)
		printf(" errno=%s", errname(err, b));
	else
		printf(" ok");
	if (fmt) {
		va_list ap;
		va_start(ap, fmt);
		putchar(' ');
		vprintf(fmt, ap);
		va_end(ap);
	}
	putchar('\n');
	fflush(stdout);
}

int usage(const char *msg)
{
	fprintf(stderr, "usage: wr-probe %s\n", msg);
	return 2;
}

long parse_long(const char *s, long dflt)
{
	if (s == NULL)
		return dflt;
	char *end = NULL;
	errno = 0;
	long v = strtol(s, &end, 0);
	if (errno || end == s || *end)
		return dflt;
	return v;
}

/* ---- facts -------------------------------------------------------------- */

static void status_field(const char *text, const char *key, const char *out)
{
	size_t kl = strlen(key);
	for (const char *l = text; l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		if (strncmp(l, key, kl) == 0 && l[kl] == ':') {
			const char *v = l + kl + 1;
			while (*v == ' ' || *v == '\t')
				v++;
			printf(" %s=", out);
			for (; *v && *v != '\n'; v++) {
				if (*v == '\t' || *v == ' ') {
					if (v[1] != '\n' && v[1] != 0)
						putchar(',');
				} else {
					putchar(*v);
				}
			}
			return;
		}
	}
	printf(" %s=?", out);
}

static void print_rlimit(const char *key, int res)
{
	struct rlimit rl;
	if (getrlimit(res, &rl) < 0) {
		printf(" %s=?", key);
		return;
	}
	printf(" %s=", key);
	if (rl.rlim_cur == RLIM_INFINITY)
		printf("inf");
	else
		printf("%llu", (unsigned long long)rl.rlim_cur);
	if (rl.rlim_max == RLIM_INFINITY)
		printf("/inf");
	else
		printf("/%llu", (unsigned long long)rl.rlim_max);
}

static int cmd_status(void)
{
	static char text[16384];
	int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, text, sizeof(text) - 1) : -1;
	int e = errno;
	if (fd >= 0)
		close(fd);
	if (n < 0) {
		result("status", -1, e, NULL);
		return 0;
	}
	text[n] = 0;
	struct utsname u;
	if (uname(&u) < 0)
		strcpy(u.nodename, "?");
	printf("status ok");
	status_field(text, "Uid", "uid");
	status_field(text, "Gid", "gid");
	status_field(text, "Groups", "groups");
	status_field(text, "CapInh", "capinh");
	status_field(text, "CapPrm", "capprm");
	status_field(text, "CapEff", "capeff");
	status_field(text, "CapBnd", "capbnd");
	status_field(text, "CapAmb", "capamb");
	status_field(text, "NoNewPrivs", "nonewprivs");
	status_field(text, "Seccomp", "seccomp");
	status_field(text, "Seccomp_filters", "seccomp_filters");
	printf(" pid=%d ppid=%d hostname=", (int)getpid(), (int)getppid());
	put_escaped(u.nodename);
	print_rlimit("nofile", RLIMIT_NOFILE);
	print_rlimit("core", RLIMIT_CORE);
	putchar('\n');
	fflush(stdout);
	return 0;
}

static int cmd_read(int argc, char **argv)
{
	if (argc < 1)
		return usage("read PATH");
	static char buf[1 << 20];
	int fd = open(argv[0], O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		result("read", -1, errno, "path=%s", esc(argv[0]));
		return 0;
	}
	size_t total = 0;
	ssize_t r = 0;
	while (total < sizeof(buf) && (r = read(fd, buf + total, sizeof(buf) - total)) > 0)
		total += (size_t)r;
	int e = errno;
	close(fd);
	if (r < 0 && total == 0)
		result("read", -1, e, "path=%s", esc(argv[0]));
	else
		result("read", 0, 0, "path=%s bytes=%zu", esc(argv[0]), total);
	return 0;
}

static int cmd_write(int argc, char **argv)
{
	if (argc < 2)
		return usage("write PATH BYTES");
	long want = parse_long(argv[1], -1);
	if (want < 0)
		return usage("write PATH BYTES");
	int fd = open(argv[0], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY, 0644);
	if (fd < 0) {
		result("write", -1, errno, "path=%s bytes=0", esc(argv[0]));
		return 0;
	}
	static char buf[65536];
	memset(buf, 'x', sizeof(buf));
	long done = 0;
	int e = 0;
	while (done < want) {
		size_t chunk =
		    (size_t)(want - done) < sizeof(buf) ? (size_t)(want - done) : sizeof(buf);
		ssize_t r = write(fd, buf, chunk);
		if (r < 0) {
			e = errno;
			break;
		}
		done += r;
	}
	if (e == 0 && fsync(fd) < 0 && errno != EINVAL)
		e = errno;
	close(fd);
	result("write", e ? -1 : 0, e, "path=%s bytes=%ld", esc(argv[0]), done);
	return 0;
}

static int cmd_ls(int argc, char **argv)
{
	if (argc < 1)
		return usage("ls PATH");
	DIR *d = opendir(argv[0]);
	if (d == NULL) {
		result("ls", -1, errno, "path=%s", esc(argv[0]));
		return 0;
	}
	/* two passes: the count first, so the line reads count then names */
	long n = 0;
	struct dirent *de;
	while ((de = readdir(d)) != NULL)
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			n++;
	rewinddir(d);
	printf("ls ok path=%s entries=%ld names=", esc(argv[0]), n);
	int first = 1;
	while ((de = readdir(d)) != NULL) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (!first)
			putchar(',');
		first = 0;
		put_escaped(de->d_name);
	}
	closedir(d);
	putchar('\n');
	fflush(stdout);
	return 0;
}

static int cmd_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (d == NULL) {
		result("fds", -1, errno, NULL);
		return 0;
	}
	int self = dirfd(d);
	printf("fds ok");
	struct dirent *de;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		if (atoi(de->d_name) == self)
			continue;
		char link[PATH_MAX];
		ssize_t n = readlinkat(self, de->d_name, link, sizeof(link) - 1);
		if (n < 0)
			strcpy(link, "?");
		else
			link[n] = 0;
		printf(" %s=", de->d_name);
		put_escaped(link);
	}
	closedir(d);
	putchar('\n');
	fflush(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return usage("<command> [args]  (see the comment at the top of wr-probe.c)");
	const char *cmd = argv[1];
	int n = argc - 2;
	char **a = argv + 2;
	setvbuf(stdout, NULL, _IOLBF, 0);

	if (!strcmp(cmd, "sys"))
		return cmd_sys(n, a);
	if (!strcmp(cmd, "ioctl"))
		return cmd_ioctl(n, a);
	if (!strcmp(cmd, "status"))
		return cmd_status();
	if (!strcmp(cmd, "read"))
		return cmd_read(n, a);
	if (!strcmp(cmd, "write"))
		return cmd_write(n, a);
	if (!strcmp(cmd, "ls"))
		return cmd_ls(n, a);
	if (!strcmp(cmd, "fds"))
		return cmd_fds();
	if (!strcmp(cmd, "forkbomb"))
		return cmd_forkbomb();
	if (!strcmp(cmd, "threads"))
		return cmd_threads(n, a);
	if (!strcmp(cmd, "membomb"))
		return cmd_membomb(n, a);
	if (!strcmp(cmd, "diskfill"))
		return cmd_diskfill(n, a);
	if (!strcmp(cmd, "inodefill"))
		return cmd_inodefill(n, a);
	if (!strcmp(cmd, "fdfill"))
		return cmd_fdfill();
	if (!strcmp(cmd, "yes"))
		return cmd_yes(n, a);
	if (!strcmp(cmd, "linger"))
		return cmd_linger(n, a);
	if (!strcmp(cmd, "sleep"))
		return cmd_sleep(n, a);
	if (!strcmp(cmd, "exit")) {
		long code = parse_long(n > 0 ? a[0] : NULL, -1);
		if (code < 0 || code > 255)
			return usage("exit N");
		printf("exit ok code=%ld\n", code);
		fflush(stdout);
		return (int)code;
	}
	if (!strcmp(cmd, "kill-self"))
		return cmd_kill_self(n, a);
	if (!strcmp(cmd, "kill"))
		return cmd_kill(n, a);
	if (!strcmp(cmd, "sched-fifo"))
		return cmd_sched_fifo();
	if (!strcmp(cmd, "connect-unix")) {
		if (n < 1)
			return usage("connect-unix PATH");
		return connect_unix("connect-unix", a[0], 0);
	}
	if (!strcmp(cmd, "connect-abstract")) {
		if (n < 1)
			return usage("connect-abstract NAME");
		return connect_unix("connect-abstract", a[0], 1);
	}
	if (!strcmp(cmd, "connect-tcp"))
		return cmd_connect_tcp(n, a);
	int r = red_main(cmd, n, a);
	if (r >= 0)
		return r;
	if (!strcmp(cmd, "send-udp"))
		return cmd_send_udp(n, a);
	if (!strcmp(cmd, "socket"))
		return cmd_socket(n, a);
	if (!strcmp(cmd, "ping"))
		return cmd_ping(n, a);
	fprintf(stderr, "wr-probe: unknown command '%s'\n", cmd);
	return 2;
}
