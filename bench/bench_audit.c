/* bench_audit N: what a refused syscall costs the refusing thread under
 * each way of learning about refusals (docs/ARCHITECTURE.md "Refusal
 * audit"), and whether a reader of the kernel's records keeps up with a
 * storm. Each mode runs in a child of its own (seccomp filters cannot be
 * removed), loads a filter refusing keyctl(2) with EPERM, and times N
 * refused calls; allowed getppid(2) calls are timed too, for reference.
 *
 *   errno          SECCOMP_RET_ERRNO, nothing recorded (no audit)
 *   log            + SECCOMP_FILTER_FLAG_LOG: an audit record per refusal,
 *                  nobody listening
 *   log-reader     + a thread reading NETLINK_AUDIT's read-log group (what
 *                  warrend does); also reports records received / N
 *   user-notif     SECCOMP_RET_USER_NOTIF answered with EPERM by a thread
 *                  (warrend would answer from another process: a lower bound)
 *
 * Prints one JSON object per mode: {"mode", "n", "refused_ns", "allowed_ns",
 * "received"}. Needs root (CAP_AUDIT_READ) for log-reader. */

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <pthread.h>
#include <seccomp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int g_notif_fd = -1;
static atomic_long g_received;
static atomic_bool g_stop;
static int g_nl = -1;

static void *answer(void *arg)
{
	(void)arg;
	struct seccomp_notif *req;
	struct seccomp_notif_resp *resp;
	if (seccomp_notify_alloc(&req, &resp) != 0)
		return NULL;
	for (;;) {
		memset(req, 0, sizeof(*req));
		if (seccomp_notify_receive(g_notif_fd, req) != 0)
			break;
		resp->id = req->id;
		resp->error = -EPERM;
		resp->val = 0;
		resp->flags = 0;
		seccomp_notify_respond(g_notif_fd, resp);
	}
	seccomp_notify_free(req, resp);
	return NULL;
}

static void *reader(void *arg)
{
	pid_t self = *(pid_t *)arg;
	char buf[65537], pidkey[32];
	snprintf(pidkey, sizeof(pidkey), " pid=%d ", (int)self);
	while (!atomic_load(&g_stop)) {
		struct pollfd p = {.fd = g_nl, .events = POLLIN};
		if (poll(&p, 1, 100) <= 0)
			continue;
		for (;;) {
			ssize_t n = recv(g_nl, buf, sizeof(buf) - 1, MSG_DONTWAIT);
			if (n < 0 && errno == ENOBUFS)
				continue;
			if (n < (ssize_t)NLMSG_HDRLEN)
				break;
			buf[n] = 0;
			struct nlmsghdr *h = (struct nlmsghdr *)buf;
			if (h->nlmsg_type == 1326 && strstr(buf + NLMSG_HDRLEN, pidkey))
				atomic_fetch_add(&g_received, 1);
		}
	}
	return NULL;
}

static int run(const char *mode, long n)
{
	prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
	bool notif = strcmp(mode, "user-notif") == 0;
	bool log = strncmp(mode, "log", 3) == 0;
	pthread_t th;
	pid_t self = getpid();
	if (strcmp(mode, "log-reader") == 0) {
		g_nl = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_AUDIT);
		int sz = 32 << 20;
		setsockopt(g_nl, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz));
		struct sockaddr_nl a = {.nl_family = AF_NETLINK,
					.nl_groups = 1u << (AUDIT_NLGRP_READLOG - 1)};
		if (g_nl < 0 || bind(g_nl, (struct sockaddr *)&a, sizeof(a)) < 0) {
			perror("bench_audit: audit netlink (root needed)");
			return 1;
		}
		pthread_create(&th, NULL, reader, &self);
	}
	scmp_filter_ctx c = seccomp_init(SCMP_ACT_ALLOW);
	seccomp_rule_add(c, notif ? SCMP_ACT_NOTIFY : SCMP_ACT_ERRNO(EPERM), SCMP_SYS(keyctl), 0);
	if (log)
		seccomp_attr_set(c, SCMP_FLTATR_CTL_LOG, 1);
	if (seccomp_load(c) != 0) {
		fprintf(stderr, "bench_audit: seccomp_load failed\n");
		return 1;
	}
	if (notif) {
		g_notif_fd = seccomp_notify_fd(c);
		pthread_create(&th, NULL, answer, NULL);
	}
	double t0 = now_ns();
	for (long i = 0; i < n; i++)
		syscall(SYS_getppid);
	double allowed = (now_ns() - t0) / (double)n;
	long refused = 0;
	t0 = now_ns();
	for (long i = 0; i < n; i++)
		if (syscall(SYS_keyctl, 0, 0, 0, 0, 0) < 0 && errno == EPERM)
			refused++;
	double ref = (now_ns() - t0) / (double)n;
	if (refused != n) {
		fprintf(stderr, "bench_audit: %s: %ld of %ld refused\n", mode, refused, n);
		return 1;
	}
	long received = -1;
	if (g_nl >= 0) {
		usleep(500000); /* the reader drains what is queued */
		atomic_store(&g_stop, true);
		pthread_join(th, NULL);
		received = atomic_load(&g_received);
	}
	printf("{\"mode\": \"%s\", \"n\": %ld, \"refused_ns\": %.0f, \"allowed_ns\": %.0f, "
	       "\"received\": %ld}\n",
	       mode, n, ref, allowed, received);
	fflush(stdout);
	_exit(0);
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 200000;
	static const char *const modes[] = {"errno", "log", "log-reader", "user-notif"};
	int status = 0;
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		if (argc > 2 && strcmp(argv[2], modes[i]) != 0)
			continue;
		pid_t p = fork();
		if (p == 0)
			return run(modes[i], n);
		int st = 0;
		waitpid(p, &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			status = 1;
	}
	return status;
}
