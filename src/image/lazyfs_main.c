/* warren-lazyfs: the on-demand image loader's supervisor (process model in
 * lazyfs.h). Started by the lazy client (src/image/lazy_client.c), one per
 * store directory:
 *
 *   warren-lazyfs --store DIR --run DIR [--daemon] [--chunk-size N]
 *                 [--fetch-all] [--prefetch-threads N] [--max-threads N]
 *                 [--pattern-window-s N] [--page-cache] [--insecure]
 *                 [--auth-file F] [--ca-file F] [--connect-timeout-ms N]
 *                 [--range-timeout-ms N] [--retries N] [--log FILE]
 *                 [--adopt-fd N]
 *
 * Mounts <run>/lazyfs/mnt, listens on <run>/lazyfs/ctl.sock, writes
 * <run>/lazyfs/pid, holds <store>/chunks/.lock (a second instance for the
 * same store exits with status 3). --daemon: returns once the file system
 * serves (status 0) or failed (1, one line on stderr); the supervisor lives
 * on in its own session with stdio on the log file. SIGTERM stops it and
 * unmounts: reads through mounts of its files then fail with EIO.
 *
 * --adopt-fd N: fd N is the /dev/fuse connection of a lazyfs that died (the
 * mount keeper's dup, lazyfs.h): serve that mount instead of mounting. Exit
 * status 4 (--daemon: at once) when the kernel cannot resend requests.
 * SIGUSR1 (an upgrade): stop without unmounting, so that the keeper starts
 * the binary now installed on the same mounts; without resend mode it is a
 * SIGTERM. */
#define FUSE_USE_VERSION 312
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <fuse3/fuse_lowlevel.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "common/util.h"
#include "image/lazy.h"
#include "image/lazyfs.h"

static volatile sig_atomic_t g_stop, g_handover;
static volatile pid_t g_worker;

static void on_term(int sig)
{
	g_stop = 1;
	g_handover = sig == SIGUSR1;
	if (g_worker > 0)
		kill(g_worker, SIGTERM);
}

static struct lazyfs_cfg g_cfg;

static void sup_init(void *userdata, struct fuse_conn_info *conn)
{
	(void)userdata;
	lazyfs_conn_init(&g_cfg, conn);
}

static const struct fuse_lowlevel_ops sup_ops = {.init = sup_init};

static void usage(void)
{
	fprintf(stderr, "usage: warren-lazyfs --store DIR --run DIR [--daemon] [options]\n");
	exit(2);
}

static unsigned num(const char *name, const char *s, uint64_t max)
{
	uint64_t v;
	if (wr_parse_u64(s, max, &v) < 0) {
		fprintf(stderr, "warren-lazyfs: %s: not a number up to %llu: %s\n", name,
			(unsigned long long)max, s);
		exit(2);
	}
	return (unsigned)v;
}

static int g_adopt = -1;

static void parse(int argc, char **argv, bool *daemon, const char **log)
{
	static const struct option lo[] = {
	    {"store", 1, 0, 's'},
	    {"run", 1, 0, 'r'},
	    {"daemon", 0, 0, 'd'},
	    {"chunk-size", 1, 0, 'c'},
	    {"fetch-all", 0, 0, 'a'},
	    {"prefetch-threads", 1, 0, 'p'},
	    {"max-threads", 1, 0, 't'},
	    {"pattern-window-s", 1, 0, 'w'},
	    {"page-cache", 0, 0, 'P'},
	    {"insecure", 0, 0, 'k'},
	    {"auth-file", 1, 0, 'A'},
	    {"ca-file", 1, 0, 'C'},
	    {"connect-timeout-ms", 1, 0, 'T'},
	    {"range-timeout-ms", 1, 0, 'R'},
	    {"retries", 1, 0, 'y'},
	    {"log", 1, 0, 'l'},
	    {"adopt-fd", 1, 0, 'F'},
	    {0, 0, 0, 0},
	};
	g_cfg.chunk_size = WR_LAZY_CHUNK_DEFAULT;
	g_cfg.pattern_window_s = 120;
	int c;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 's': g_cfg.store_dir = optarg; break;
		case 'r': g_cfg.run_dir = optarg; break;
		case 'd': *daemon = true; break;
		case 'c': {
			uint64_t v;
			if (wr_parse_size(optarg, &v) < 0 || v > (64u << 20)) {
				fprintf(stderr, "warren-lazyfs: --chunk-size: bad size %s\n",
					optarg);
				exit(2);
			}
			g_cfg.chunk_size = (uint32_t)v;
			break;
		}
		case 'a': g_cfg.fetch_all = true; break;
		case 'p': g_cfg.prefetch_threads = num("--prefetch-threads", optarg, 64); break;
		case 't': g_cfg.max_threads = num("--max-threads", optarg, 1024); break;
		case 'w': g_cfg.pattern_window_s = num("--pattern-window-s", optarg, 86400); break;
		case 'P': g_cfg.page_cache = true; break;
		case 'k': g_cfg.reg.insecure = true; break;
		case 'A': g_cfg.reg.auth_file = optarg; break;
		case 'C': g_cfg.reg.ca_file = optarg; break;
		case 'T':
			g_cfg.reg.connect_timeout_ms = num("--connect-timeout-ms", optarg, 600000);
			break;
		case 'R':
			g_cfg.reg.range_timeout_ms = num("--range-timeout-ms", optarg, 600000);
			break;
		case 'y': g_cfg.reg.retries = num("--retries", optarg, 10); break;
		case 'l': *log = optarg; break;
		case 'F': g_adopt = (int)num("--adopt-fd", optarg, 1 << 20); break;
		default: usage();
		}
	}
	if (optind != argc || !g_cfg.store_dir || !g_cfg.run_dir || g_cfg.store_dir[0] != '/' ||
	    g_cfg.run_dir[0] != '/')
		usage();
	uint32_t cs = g_cfg.chunk_size;
	if (cs < (64u << 10) || (cs & (cs - 1)) != 0) {
		fprintf(stderr, "warren-lazyfs: --chunk-size: a power of two in 64KiB..64MiB\n");
		exit(2);
	}
	/* A stalled registry must turn into EIO well within a reader's
	 * patience; the client's default for a whole Range read is 30 s. */
	if (g_cfg.reg.low_speed_time_s == 0)
		g_cfg.reg.low_speed_time_s = 10;
}

/* Tell the --daemon parent how it went: "OK" or an error line. */
static int g_notify = -1;
static void notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void notify(const char *fmt, ...)
{
	char buf[600];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (strcmp(buf, "OK") != 0)
		fprintf(stderr, "warren-lazyfs: %s\n", buf);
	if (g_notify >= 0) {
		if (wr_write_all(g_notify, buf, strlen(buf)) < 0) {
			/* the parent is gone: nobody to tell */
		}
		close(g_notify);
		g_notify = -1;
	}
}

static int daemonize(const char *log)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid > 0) {
		close(p[1]);
		char buf[600];
		ssize_t n = wr_read_all(p[0], buf, sizeof(buf) - 1);
		buf[n > 0 ? n : 0] = '\0';
		if (strcmp(buf, "OK") == 0)
			_exit(0);
		if (strncmp(buf, "BUSY", 4) == 0)
			_exit(3);
		if (strncmp(buf, "NORESEND", 8) == 0) {
			fprintf(stderr, "warren-lazyfs: %s\n", buf);
			_exit(4);
		}
		fprintf(stderr, "warren-lazyfs: %s\n", n > 0 ? buf : "failed to start");
		_exit(1);
	}
	close(p[0]);
	g_notify = p[1];
	setsid();
	int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (fd >= 0 && nul >= 0) {
		dup2(nul, 0);
		dup2(fd, 1);
		dup2(fd, 2);
	}
	if (fd > 2)
		close(fd);
	if (nul > 2)
		close(nul);
	return 0;
}

static int listen_ctl(const char *path)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(a.sun_path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	strcpy(a.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	unlink(path);
	mode_t old = umask(077);
	int r = bind(fd, (struct sockaddr *)&a, sizeof(a));
	umask(old);
	if (r < 0 || listen(fd, 128) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static pid_t start_worker(int master, uint64_t dev, const void *init, size_t len, int lfd,
			  bool fresh, uint64_t starts, int *readyfd)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid_t self = getpid();
	pid_t pid = fork();
	if (pid == 0) {
		/* Dies with us (set again by the worker): no worker of a dead
		 * supervisor may go on reading the connection (lazyfs.h). */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != self)
			_exit(1);
		close(p[0]);
		if (g_notify >= 0) /* the --daemon parent waits for EOF */
			close(g_notify);
		signal(SIGTERM, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		_exit(lazyfs_worker_run(&g_cfg, master, dev, init, len, lfd, p[1], fresh, starts));
	}
	close(p[1]);
	if (pid < 0) {
		close(p[0]);
		return -1;
	}
	*readyfd = p[0];
	return pid;
}

/* <run>/lazyfs/conn: what a lazyfs adopting this mount needs, written
 * (by rename) once the mount answered FUSE_INIT:
 *   dev=<st_dev of the mount>\nminor=<kernel's FUSE minor>\ninit=<hex>\n */
static int conn_write(const char *path, uint64_t dev, unsigned minor, const uint8_t *init,
		      size_t len)
{
	_cleanup_free_ char *tmp = NULL, *txt = malloc(64 + 2 * len);
	if (txt == NULL || asprintf(&tmp, "%s.tmp", path) < 0)
		return -1;
	int n = sprintf(txt, "dev=%llu\nminor=%u\ninit=", (unsigned long long)dev, minor);
	for (size_t i = 0; i < len; i++)
		n += sprintf(txt + n, "%02x", init[i]);
	txt[n++] = '\n';
	_cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || wr_write_all(fd, txt, (size_t)n) < 0 || fsync(fd) < 0)
		return -1;
	return rename(tmp, path);
}

static int conn_read(const char *path, uint64_t *dev, unsigned *minor, uint8_t **init, size_t *len)
{
	char txt[2048];
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? wr_read_all(fd, txt, sizeof(txt) - 1) : -1;
	if (n <= 0)
		return -1;
	txt[n] = '\0';
	unsigned long long d;
	int off = 0;
	if (sscanf(txt, "dev=%llu\nminor=%u\ninit=%n", &d, minor, &off) != 2 || off == 0)
		return -1;
	const char *h = txt + off;
	size_t hl = strcspn(h, "\n");
	if (hl < 2 * 48 || hl % 2)
		return -1;
	*init = malloc(hl / 2);
	if (*init == NULL)
		return -1;
	for (size_t i = 0; i < hl / 2; i++) {
		unsigned v;
		if (sscanf(h + 2 * i, "%2x", &v) != 1) {
			free(*init);
			return -1;
		}
		(*init)[i] = (uint8_t)v;
	}
	*dev = d;
	*len = hl / 2;
	return 0;
}

/* st_dev of the topmost mount at path, from /proc/self/mountinfo (0 when
 * none): a stat there would ask the FUSE server, which may not run yet. */
static uint64_t mount_dev(const char *path)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (f == NULL)
		return 0;
	char *line = NULL;
	size_t cap = 0;
	uint64_t dev = 0;
	while (getline(&line, &cap, f) > 0) {
		unsigned maj, min;
		char mp[4096];
		if (sscanf(line, "%*u %*u %u:%u %*s %4095s", &maj, &min, mp) == 3 &&
		    strcmp(mp, path) == 0)
			dev = (uint64_t)makedev(maj, min);
	}
	free(line);
	fclose(f);
	return dev;
}

/* The kernel's protocol minor in its FUSE_INIT (fuse_in_header, then
 * fuse_init_in {major, minor, ...}): what it can do, whatever libfuse
 * 3.14 (protocol 7.38) negotiates. The kernel accepts a notification by
 * its own version (fs/fuse/dev.c, fuse_notify), not the negotiated one. */
static unsigned kernel_minor(const uint8_t *init, size_t len)
{
	uint32_t major, minor;
	if (len < 48)
		return 0;
	memcpy(&major, init + 40, 4);
	memcpy(&minor, init + 44, 4);
	return major == 7 ? minor : 0;
}

/* Wait for the worker's ready byte (or its death). */
static bool worker_ready(int readyfd)
{
	struct pollfd pfd = {.fd = readyfd, .events = POLLIN};
	char c = 0;
	bool ok = poll(&pfd, 1, 60000) == 1 && read(readyfd, &c, 1) == 1 && c == 'R';
	close(readyfd);
	return ok;
}

int main(int argc, char **argv)
{
	bool daemon = false;
	const char *log = NULL;
	/* warrend blocks the signals it reads with signalfd; a blocked
	 * SIGTERM inherited from it would make us unstoppable. */
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	parse(argc, argv, &daemon, &log);
	_cleanup_free_ char *dir = NULL, *mnt = NULL, *sock = NULL, *pidf = NULL, *deflog = NULL,
			    *connf = NULL;
	if (asprintf(&dir, "%s/lazyfs", g_cfg.run_dir) < 0 ||
	    asprintf(&mnt, "%s/lazyfs/mnt", g_cfg.run_dir) < 0 ||
	    asprintf(&sock, "%s/lazyfs/ctl.sock", g_cfg.run_dir) < 0 ||
	    asprintf(&pidf, "%s/lazyfs/pid", g_cfg.run_dir) < 0 ||
	    asprintf(&connf, "%s/lazyfs/conn", g_cfg.run_dir) < 0 ||
	    asprintf(&deflog, "%s/lazyfs/lazyfs.log", g_cfg.run_dir) < 0)
		return 1;
	if (g_adopt >= 0 && fcntl(g_adopt, F_SETFD, FD_CLOEXEC) < 0) {
		fprintf(stderr, "warren-lazyfs: --adopt-fd %d: %m\n", g_adopt);
		return 1;
	}
	wr_err err = NULL;
	if (wr_mkdir_p(dir, 0700, &err) < 0) {
		fprintf(stderr, "warren-lazyfs: %s\n", err->msg);
		return 1;
	}
	if (daemon && daemonize(log ? log : deflog) < 0) {
		fprintf(stderr, "warren-lazyfs: daemonize: %m\n");
		return 1;
	}
	int chunksfd = wrl_chunks_open(g_cfg.store_dir, &err);
	int lockfd = chunksfd >= 0 ? wrl_chunks_lock(chunksfd, true, &err) : -1;
	if (lockfd < 0) {
		if (wr_err_code(err) == EWOULDBLOCK) {
			notify("BUSY: another warren-lazyfs serves %s", g_cfg.store_dir);
			return 3;
		}
		notify("%s", err->msg);
		return 1;
	}
	struct fuse_session *se = NULL;
	char *fargv[] = {"warren-lazyfs", "-o",
			 "ro,default_permissions,fsname=warren-lazyfs,subtype=warren-lazyfs", NULL};
	struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
	uint8_t *init = NULL;
	size_t init_len = 0;
	uint64_t dev = 0;
	unsigned kminor = 0;
	int master = -1;
	if (g_adopt >= 0) {
		/* Take over the mount of a lazyfs that died (lazyfs.h): the same
		 * connection must still be mounted here. */
		if (conn_read(connf, &dev, &kminor, &init, &init_len) < 0) {
			notify("adopt: %s: missing or unreadable", connf);
			return 1;
		}
		if (dev == 0 || mount_dev(mnt) != dev) {
			notify("adopt: the mount of that connection is gone from %s", mnt);
			return 1;
		}
		if (kminor < WR_FUSE_MINOR_RESEND) {
			notify("NORESEND: adopt: the kernel's FUSE protocol 7.%u cannot resend "
			       "pending requests (7.%u needed); the mount ends",
			       kminor, WR_FUSE_MINOR_RESEND);
			return 4;
		}
		master = g_adopt;
		g_cfg.adopted = true;
	} else {
		/* A mount left by a lazyfs that died: its connection is gone. */
		while (umount2(mnt, MNT_DETACH) == 0)
			;
		unlink(connf);
		if (mkdir(mnt, 0700) < 0 && errno != EEXIST) {
			notify("mkdir %s: %s", mnt, strerror(errno));
			return 1;
		}
	}
	int lfd = listen_ctl(sock);
	if (lfd < 0) {
		notify("control socket %s: %s", sock, strerror(errno));
		return 1;
	}
	if (g_adopt < 0) {
		se = fuse_session_new(&args, &sup_ops, sizeof(sup_ops), NULL);
		if (se == NULL || fuse_session_mount(se, mnt) != 0) {
			notify("mount %s: failed (is /dev/fuse there?)", mnt);
			return 1;
		}
		/* The kernel's first request is FUSE_INIT: answer it here and
		 * keep its bytes, which every worker replays (lazyfs.h). */
		struct fuse_buf fb = {0};
		int n = fuse_session_receive_buf(se, &fb);
		if (n <= 0) {
			notify("mount %s: no FUSE_INIT from the kernel", mnt);
			fuse_session_unmount(se);
			return 1;
		}
		init_len = (size_t)n;
		init = malloc(init_len);
		if (init == NULL)
			return 1;
		memcpy(init, fb.mem, init_len);
		fuse_session_process_buf(se, &fb);
		free(fb.mem);
		master = fuse_session_fd(se);
		kminor = kernel_minor(init, init_len);
		dev = mount_dev(mnt);
		if (conn_write(connf, dev, kminor, init, init_len) < 0)
			fprintf(stderr,
				"warren-lazyfs: write %s: %m (the mount is not adoptable)\n",
				connf);
	}
	/* The environment knob stands in for a kernel older than 6.9 (tests
	 * of the fallback on a newer one). */
	g_cfg.resend = kminor >= WR_FUSE_MINOR_RESEND && getenv("WARREN_LAZYFS_NO_RESEND") == NULL;

	struct sigaction sa = {.sa_handler = on_term}; /* no SA_RESTART: waitpid returns */
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	uint64_t starts = 0;
	int readyfd = -1;
	g_worker = start_worker(master, dev, init, init_len, lfd, g_adopt < 0, ++starts, &readyfd);
	if (g_worker < 0 || !worker_ready(readyfd)) {
		notify("worker did not start (see the log)");
		if (g_worker > 0)
			kill(g_worker, SIGKILL);
		if (se)
			fuse_session_unmount(se);
		unlink(sock);
		return 1;
	}
	_cleanup_free_ char *pidtxt = NULL;
	int pfd = open(pidf, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (pfd >= 0 && asprintf(&pidtxt, "%d\n", (int)getpid()) > 0 &&
	    wr_write_all(pfd, pidtxt, strlen(pidtxt)) < 0)
		fprintf(stderr, "warren-lazyfs: write %s: %m\n", pidf);
	if (pfd >= 0)
		close(pfd);
	notify("OK");
	fprintf(stderr, "warren-lazyfs: %s %s on %s (pid %d, kernel FUSE 7.%u, %s)\n",
		g_adopt >= 0 ? "took over" : "serving", g_cfg.store_dir, mnt, (int)getpid(), kminor,
		g_cfg.resend ? "resend mode" : "cloned fds");

	double backoff = 0.1;
	time_t started = time(NULL);
	while (!g_stop) {
		int st;
		pid_t w = waitpid(g_worker, &st, 0);
		if (w < 0 && errno == EINTR)
			continue;
		if (g_stop)
			break;
		if (w > 0 && WIFEXITED(st) && WEXITSTATUS(st) == LAZYFS_EXIT_NORESEND) {
			/* Requests of the last worker would wait forever: end the
			 * connection instead (EIO for the readers). */
			fprintf(stderr, "warren-lazyfs: worker could not resend; stopping\n");
			g_worker = 0;
			break;
		}
		/* A worker that dies soon after its start is restarted ever
		 * later (up to 5 s), one that ran a while at once. */
		backoff = time(NULL) - started < 5 ? (backoff < 2.5 ? backoff * 2 : 5) : 0.1;
		fprintf(stderr, "warren-lazyfs: worker %d %s %d; restarting\n", (int)g_worker,
			w > 0 && WIFSIGNALED(st) ? "killed by signal" : "exited with",
			w > 0 ? (WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st)) : -1);
		struct timespec ts = {(time_t)backoff, (long)((backoff - (time_t)backoff) * 1e9)};
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR && !g_stop)
			;
		if (g_stop)
			break;
		started = time(NULL);
		g_worker =
		    start_worker(master, dev, init, init_len, lfd, false, ++starts, &readyfd);
		if (g_worker > 0)
			worker_ready(readyfd);
	}
	if (g_worker > 0) {
		kill(g_worker, SIGTERM);
		for (int i = 0; i < 50 && waitpid(g_worker, NULL, WNOHANG) == 0; i++)
			usleep(100000);
		kill(g_worker, SIGKILL);
		waitpid(g_worker, NULL, 0);
	}
	if (g_handover && g_cfg.resend) {
		/* An upgrade: the worker flushed and stopped; leave the mount,
		 * conn and the pid file (naming us) to the keeper, which starts
		 * the next lazyfs on them as after a crash; what our worker had
		 * read and not answered is resent by the next one. */
		_cleanup_free_ char *ho = NULL;
		int hfd = open(pidf, O_WRONLY | O_TRUNC | O_CLOEXEC);
		if (hfd >= 0 && asprintf(&ho, "%d handover\n", (int)getpid()) > 0 &&
		    wr_write_all(hfd, ho, strlen(ho)) < 0)
			fprintf(stderr, "warren-lazyfs: write %s: %m\n", pidf);
		if (hfd >= 0)
			close(hfd);
		close(master);
		close(lfd);
		free(init);
		close(lockfd);
		fprintf(stderr, "warren-lazyfs: handed the mount over (SIGUSR1)\n");
		return 0;
	}
	/* Detach the mount, then drop our fd of the connection: reads through
	 * mounts of our files fail from here on (a mount keeper seeing the pid
	 * file gone closes its dup too, lazyfs.h). */
	unlink(connf);
	if (se)
		fuse_session_unmount(se); /* a lazy unmount; frees its mountpoint copy */
	umount2(mnt, MNT_DETACH);
	if (se)
		fuse_session_destroy(se); /* closes master */
	else
		close(master);
	fuse_opt_free_args(&args);
	free(init);
	unlink(sock);
	unlink(pidf);
	close(lockfd);
	fprintf(stderr, "warren-lazyfs: stopped\n");
	return 0;
}
