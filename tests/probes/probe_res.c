/* wr-probe: resource exhaustion, processes, signals and connects (see
 * wr-probe.c). */
#include "probe.h"

/* ---- resource exhaustion ------------------------------------------------ */

int cmd_forkbomb(void)
{
	enum { MAX = 1 << 20 };
	static pid_t kids[MAX];
	long n = 0;
	int e = 0;
	setpgid(0, 0);
	while (n < MAX) {
		pid_t p = fork();
		if (p == 0) {
			for (;;)
				pause();
		}
		if (p < 0) {
			e = errno;
			break;
		}
		kids[n++] = p;
	}
	/* the children are ours: kill and reap them before reporting */
	for (long i = 0; i < n; i++)
		kill(kids[i], SIGKILL);
	for (long i = 0; i < n; i++)
		waitpid(kids[i], NULL, 0);
	result("forkbomb", e ? -1 : 0, e, "forks=%ld", n);
	return 0;
}

static void *thread_pause(void *arg)
{
	(void)arg;
	for (;;)
		pause();
	return NULL;
}

int cmd_threads(int argc, char **argv)
{
	long want = parse_long(argc > 0 ? argv[0] : NULL, 100000);
	long n = 0;
	int e = 0;
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setstacksize(&at, 64 * 1024);
	while (n < want) {
		pthread_t t;
		e = pthread_create(&t, &at, thread_pause, NULL);
		if (e)
			break;
		n++;
	}
	result("threads", e ? -1 : 0, e, "threads=%ld", n);
	_exit(0); /* the threads go with us */
}

int cmd_membomb(int argc, char **argv)
{
	long mb = parse_long(argc > 0 ? argv[0] : NULL, -1);
	if (mb <= 0)
		return usage("membomb MB");
	long done = 0;
	for (; done < mb; done++) {
		char *p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (p == MAP_FAILED) {
			result("membomb", -1, errno, "mib=%ld", done);
			return 0;
		}
		for (long i = 0; i < (1 << 20); i += 4096)
			p[i] = (char)(i | 1);
	}
	result("membomb", 0, 0, "mib=%ld", done);
	return 0;
}

int cmd_diskfill(int argc, char **argv)
{
	if (argc < 1)
		return usage("diskfill DIR");
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/wr-probe-fill.%d", argv[0], (int)getpid());
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		result("diskfill", -1, errno, "mib=0");
		return 0;
	}
	static char buf[1 << 20];
	memset(buf, 'f', sizeof(buf));
	long mib = 0;
	int e = 0;
	for (;;) {
		size_t off = 0;
		while (off < sizeof(buf)) {
			ssize_t r = write(fd, buf + off, sizeof(buf) - off);
			if (r < 0) {
				e = errno;
				break;
			}
			off += (size_t)r;
		}
		if (e)
			break;
		mib++;
		/* quota-style limits may only show at writeback */
		if (mib % 64 == 0 && fdatasync(fd) < 0) {
			e = errno;
			break;
		}
	}
	if (fdatasync(fd) < 0 && e == 0)
		e = errno;
	close(fd);
	result("diskfill", -1, e, "mib=%ld", mib);
	return 0;
}

int cmd_inodefill(int argc, char **argv)
{
	if (argc < 1)
		return usage("inodefill DIR");
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s/wr-probe-inodes.%d", argv[0], (int)getpid());
	if (mkdir(dir, 0755) < 0) {
		result("inodefill", -1, errno, "files=0");
		return 0;
	}
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		result("inodefill", -1, errno, "files=0");
		return 0;
	}
	long n = 0;
	int e = 0;
	for (;;) {
		char name[32];
		snprintf(name, sizeof(name), "f%ld", n);
		int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0) {
			e = errno;
			break;
		}
		close(fd);
		n++;
	}
	close(dfd);
	result("inodefill", -1, e, "files=%ld", n);
	return 0;
}

int cmd_fdfill(void)
{
	long n = 0;
	int e = 0;
	for (;;) {
		int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			e = errno;
			break;
		}
		n++;
	}
	struct rlimit rl;
	getrlimit(RLIMIT_NOFILE, &rl);
	unsigned long long cur = rl.rlim_cur, max = rl.rlim_max;
	/* soft up to hard: allowed by the kernel, changes nothing if equal */
	struct rlimit up = {rl.rlim_max, rl.rlim_max};
	int soft_ok = setrlimit(RLIMIT_NOFILE, &up) == 0;
	int soft_e = errno;
	/* hard above hard: needs CAP_SYS_RESOURCE */
	struct rlimit above = {rl.rlim_max + 1, rl.rlim_max + 1};
	int hard_ok = setrlimit(RLIMIT_NOFILE, &above) == 0;
	int hard_e = errno;
	char b1[24], b2[24];
	char soft_s[40], hard_s[40];
	snprintf(soft_s, sizeof(soft_s), "%s%s",
		 soft_ok ? "ok" : "errno=", soft_ok ? "" : errname(soft_e, b1));
	snprintf(hard_s, sizeof(hard_s), "%s%s",
		 hard_ok ? "ok" : "errno=", hard_ok ? "" : errname(hard_e, b2));
	result("fdfill", -1, e, "opened=%ld nofile=%llu/%llu raise_soft_to_hard=%s raise_hard=%s",
	       n, cur, max, soft_s, hard_s);
	return 0;
}

int cmd_yes(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	static char buf[65536];
	long long limit = -1, done = 0;
	if (argc > 0) {
		limit = parse_long(argv[0], -1);
		if (limit < 0)
			return usage("yes [BYTES]");
		memset(buf, 'y', sizeof(buf));
	} else {
		for (size_t i = 0; i < sizeof(buf); i += 2) {
			buf[i] = 'y';
			buf[i + 1] = '\n';
		}
	}
	int e = 0;
	while (limit < 0 || done < limit) {
		size_t chunk = sizeof(buf);
		if (limit >= 0 && (long long)chunk > limit - done)
			chunk = (size_t)(limit - done);
		ssize_t r = write(1, buf, chunk);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			e = errno;
			break;
		}
		done += r;
	}
	char b[24];
	if (e)
		fprintf(stderr, "yes errno=%s bytes=%lld\n", errname(e, b), done);
	else
		fprintf(stderr, "yes ok bytes=%lld\n", done);
	return 0;
}

int cmd_linger(int argc, char **argv)
{
	long secs = parse_long(argc > 0 ? argv[0] : NULL, -1);
	if (secs < 0)
		return usage("linger SECONDS");
	int p[2];
	if (pipe(p) < 0) {
		result("linger", -1, errno, NULL);
		return 0;
	}
	pid_t mid = fork();
	if (mid < 0) {
		result("linger", -1, errno, NULL);
		return 0;
	}
	if (mid == 0) {
		close(p[0]);
		setsid();
		pid_t g = fork();
		if (g != 0)
			_exit(g < 0 ? 1 : 0); /* the grandchild is orphaned */
		signal(SIGTERM, SIG_IGN);
		signal(SIGHUP, SIG_IGN);
		signal(SIGINT, SIG_IGN);
		pid_t me = getpid();
		int fd = open("/tmp/linger.pid", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd >= 0) {
			char s[32];
			int n = snprintf(s, sizeof(s), "%d\n", (int)me);
			if (write(fd, s, (size_t)n) != n)
				me = -1;
			close(fd);
		}
		if (write(p[1], &me, sizeof(me)) != (ssize_t)sizeof(me))
			_exit(1);
		close(p[1]);
		/* like nohup + disown: nothing ties us to the command's stdio */
		int nul = open("/dev/null", O_RDWR);
		if (nul >= 0) {
			dup2(nul, 0);
			dup2(nul, 1);
			dup2(nul, 2);
			if (nul > 2)
				close(nul);
		}
		struct timespec ts = {secs, 0};
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
		_exit(0);
	}
	close(p[1]);
	waitpid(mid, NULL, 0);
	pid_t g = -1;
	ssize_t r = read(p[0], &g, sizeof(g));
	close(p[0]);
	if (r != (ssize_t)sizeof(g) || g <= 0)
		result("linger", -1, EIO, NULL);
	else
		result("linger", 0, 0, "pid=%d", (int)g);
	return 0;
}

int cmd_sleep(int argc, char **argv)
{
	long secs = parse_long(argc > 0 ? argv[0] : NULL, -1);
	if (secs < 0)
		return usage("sleep SECONDS");
	struct timespec ts = {secs, 0};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
	result("sleep", 0, 0, "seconds=%ld", secs);
	return 0;
}

int parse_signal(const char *s)
{
	static const struct {
		const char *name;
		int sig;
	} sigs[] = {{"HUP", SIGHUP},   {"INT", SIGINT},	  {"QUIT", SIGQUIT}, {"ILL", SIGILL},
		    {"TRAP", SIGTRAP}, {"ABRT", SIGABRT}, {"BUS", SIGBUS},   {"FPE", SIGFPE},
		    {"KILL", SIGKILL}, {"USR1", SIGUSR1}, {"SEGV", SIGSEGV}, {"USR2", SIGUSR2},
		    {"PIPE", SIGPIPE}, {"ALRM", SIGALRM}, {"TERM", SIGTERM}, {"CHLD", SIGCHLD},
		    {"CONT", SIGCONT}, {"STOP", SIGSTOP}, {"SYS", SIGSYS},   {"XFSZ", SIGXFSZ},
		    {"XCPU", SIGXCPU}};
	if (s == NULL)
		return -1;
	long n = parse_long(s, -1);
	if (n >= 0)
		return (int)n;
	if (strncmp(s, "SIG", 3) == 0)
		s += 3;
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		if (strcmp(sigs[i].name, s) == 0)
			return sigs[i].sig;
	return -1;
}

int cmd_kill_self(int argc, char **argv)
{
	int sig = parse_signal(argc > 0 ? argv[0] : NULL);
	if (sig <= 0)
		return usage("kill-self SIGNAL");
	printf("kill-self signal=%d\n", sig);
	fflush(stdout);
	signal(sig, SIG_DFL);
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, sig);
	sigprocmask(SIG_UNBLOCK, &s, NULL);
	raise(sig);
	result("kill-self", -1, EINTR, "survived=1");
	return 0;
}

int cmd_kill(int argc, char **argv)
{
	if (argc < 2)
		return usage("kill PID SIGNAL");
	long pid = parse_long(argv[0], LONG_MIN);
	int sig = parse_signal(argv[1]);
	if (pid == LONG_MIN || sig < 0)
		return usage("kill PID SIGNAL");
	long r = kill((pid_t)pid, sig);
	result("kill", r, errno, "pid=%ld signal=%d", pid, sig);
	return 0;
}

int cmd_sched_fifo(void)
{
	struct sched_param sp = {.sched_priority = 1};
	long r = sched_setscheduler(0, SCHED_FIFO, &sp);
	result("sched-fifo", r, errno, NULL);
	return 0;
}

int connect_unix(const char *subject, const char *name, int abstract)
{
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	size_t n = strlen(name);
	if (n + 1 + (size_t)abstract > sizeof(sa.sun_path)) {
		result(subject, -1, ENAMETOOLONG, NULL);
		return 0;
	}
	memcpy(sa.sun_path + abstract, name, n);
	socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)abstract + n +
				    (abstract ? 0 : 1));
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0) {
		result(subject, -1, errno, "stage=socket");
		return 0;
	}
	long r = connect(s, (struct sockaddr *)&sa, len);
	result(subject, r, errno, NULL);
	close(s);
	return 0;
}

int cmd_connect_tcp(int argc, char **argv)
{
	if (argc < 2)
		return usage("connect-tcp ADDR PORT");
	long port = parse_long(argv[1], -1);
	if (port < 0 || port > 65535)
		return usage("connect-tcp ADDR PORT");
	struct sockaddr_storage ss;
	memset(&ss, 0, sizeof(ss));
	socklen_t len;
	struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
	if (inet_pton(AF_INET, argv[0], &in4->sin_addr) == 1) {
		in4->sin_family = AF_INET;
		in4->sin_port = htons((uint16_t)port);
		len = sizeof(*in4);
	} else if (inet_pton(AF_INET6, argv[0], &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		len = sizeof(*in6);
	} else {
		return usage("connect-tcp ADDR PORT (numeric address)");
	}
	int s = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s < 0) {
		result("connect-tcp", -1, errno, "stage=socket");
		return 0;
	}
	long r = connect(s, (struct sockaddr *)&ss, len);
	int e = errno;
	if (r < 0 && e == EINPROGRESS) {
		struct pollfd pf = {s, POLLOUT, 0};
		int pr = poll(&pf, 1, 3000);
		if (pr == 0) {
			e = ETIMEDOUT;
		} else {
			socklen_t el = sizeof(e);
			getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &el);
			r = e ? -1 : 0;
		}
	}
	result("connect-tcp", r, e, "addr=%s port=%ld", argv[0], port);
	close(s);
	return 0;
}
