/* wr-probe: the red-team network commands (portscan, egress, dns, abstract,
 * forge); see wr-probe.c. */
#include <netinet/ip_icmp.h>

#include "probe.h"

#define LIST_CAP 40

static const char *errstr(int e)
{
	static char bufs[8][24];
	static int k;
	k = (k + 1) % 8;
	return errname(e, bufs[k]);
}

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

struct list {
	char buf[LIST_CAP * 16];
	size_t len;
	long n;
};

static void list_add(struct list *l, const char *s)
{
	l->n++;
	size_t need = strlen(s);
	if (l->n > LIST_CAP || l->len + need + 2 > sizeof(l->buf))
		return;
	if (l->len)
		l->buf[l->len++] = ',';
	memcpy(l->buf + l->len, s, need);
	l->len += need;
	l->buf[l->len] = 0;
}

/* ---- network ------------------------------------------------------------ */

static int fill_addr(const char *addr, int port, struct sockaddr_storage *ss, socklen_t *len)
{
	memset(ss, 0, sizeof(*ss));
	struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, addr, &in4->sin_addr) == 1) {
		in4->sin_family = AF_INET;
		in4->sin_port = htons((uint16_t)port);
		*len = sizeof(*in4);
		return AF_INET;
	}
	if (inet_pton(AF_INET6, addr, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		*len = sizeof(*in6);
		return AF_INET6;
	}
	return -1;
}

/* portscan ADDR FROM TO [TIMEOUT_MS]: non-blocking connects, 256 at a time */
int cmd_portscan(int argc, char **argv)
{
	if (argc < 3)
		return usage("portscan ADDR FROM TO [TIMEOUT_MS]");
	long from = parse_long(argv[1], -1), to = parse_long(argv[2], -1);
	long tmo = parse_long(argc > 3 ? argv[3] : NULL, 500);
	struct sockaddr_storage ss;
	socklen_t len;
	int fam = fill_addr(argv[0], 0, &ss, &len);
	if (fam < 0 || from < 1 || to > 65535 || from > to)
		return usage("portscan ADDR FROM TO [TIMEOUT_MS]");
	long open_n = 0, self_n = 0, refused = 0, unreach = 0, timeout = 0, other = 0;
	int other_err = 0;
	uint64_t t0 = now_ms();
	struct list open_ports = {0};
	for (long base = from; base <= to; base += 256) {
		struct pollfd pf[256];
		int ports[256], n = 0;
		for (long port = base; port <= to && port < base + 256; port++) {
			int s = socket(fam, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
			if (s < 0) {
				other++;
				other_err = errno;
				continue;
			}
			if (fam == AF_INET)
				((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)port);
			else
				((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)port);
			int r = connect(s, (struct sockaddr *)&ss, len);
			int e = errno;
			if (r == 0 || e == EINPROGRESS) {
				pf[n] = (struct pollfd){s, POLLOUT, 0};
				ports[n++] = (int)port;
				continue;
			}
			close(s);
			if (e == ECONNREFUSED)
				refused++;
			else if (e == ENETUNREACH || e == EHOSTUNREACH)
				unreach++;
			else {
				other++;
				other_err = e;
			}
		}
		uint64_t until = now_ms() + (uint64_t)tmo;
		int left = n;
		while (left > 0 && now_ms() < until) {
			if (poll(pf, (nfds_t)n, (int)(until - now_ms())) <= 0)
				break;
			for (int i = 0; i < n; i++) {
				if (pf[i].fd < 0 || !pf[i].revents)
					continue;
				int e = 0;
				socklen_t el = sizeof(e);
				getsockopt(pf[i].fd, SOL_SOCKET, SO_ERROR, &e, &el);
				struct sockaddr_storage me;
				socklen_t ml = sizeof(me);
				if (e == 0 &&
				    getsockname(pf[i].fd, (struct sockaddr *)&me, &ml) == 0 &&
				    ((fam == AF_INET &&
				      ntohs(((struct sockaddr_in *)&me)->sin_port) == ports[i]) ||
				     (fam == AF_INET6 &&
				      ntohs(((struct sockaddr_in6 *)&me)->sin6_port) ==
					  ports[i]))) {
					/* TCP self-connect: our own ephemeral port */
					self_n++;
				} else if (e == 0) {
					open_n++;
					char s[16];
					snprintf(s, sizeof(s), "%d", ports[i]);
					list_add(&open_ports, s);
				} else if (e == ECONNREFUSED)
					refused++;
				else if (e == ENETUNREACH || e == EHOSTUNREACH)
					unreach++;
				else {
					other++;
					other_err = e;
				}
				close(pf[i].fd);
				pf[i].fd = -1;
				left--;
			}
		}
		for (int i = 0; i < n; i++)
			if (pf[i].fd >= 0) {
				timeout++;
				close(pf[i].fd);
			}
	}
	printf("portscan ok addr=%s ports=%ld-%ld ms=%llu open=%ld refused=%ld unreach=%ld "
	       "timeout=%ld self=%ld other=%ld other_errno=%s open_ports=%s\n",
	       argv[0], from, to, (unsigned long long)(now_ms() - t0), open_n, refused, unreach,
	       timeout, self_n, other, other ? errstr(other_err) : "none", open_ports.buf);
	fflush(stdout);
	return 0;
}

/* a DNS query for NAME (type A), as sent on the wire */
static size_t dns_query(const char *name, unsigned char *q, size_t cap)
{
	size_t o = 12;
	memset(q, 0, 12);
	q[0] = 0x12;
	q[1] = 0x34;
	q[2] = 0x01; /* RD */
	q[5] = 1;    /* one question */
	const char *p = name;
	while (*p && o + 70 < cap) {
		const char *dot = strchr(p, '.');
		size_t n = dot ? (size_t)(dot - p) : strlen(p);
		if (n > 63)
			n = 63;
		q[o++] = (unsigned char)n;
		memcpy(q + o, p, n);
		o += n;
		p += n + (dot ? 1 : 0);
		if (!dot)
			break;
	}
	q[o++] = 0;
	q[o++] = 0;
	q[o++] = 1; /* A */
	q[o++] = 0;
	q[o++] = 1; /* IN */
	return o;
}

/* One UDP datagram to ADDR:PORT without connect; wait for an answer. */
static const char *udp_sendto(const char *addr, int port, const void *buf, size_t n)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fam = fill_addr(addr, port, &ss, &len);
	if (fam < 0)
		return "badaddr";
	int s = socket(fam, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return errstr(errno);
	ssize_t r = sendto(s, buf, n, 0, (struct sockaddr *)&ss, len);
	if (r < 0) {
		int e = errno;
		close(s);
		return errstr(e);
	}
	struct pollfd pf = {s, POLLIN, 0};
	int pr = poll(&pf, 1, 1000);
	char ans[512];
	ssize_t k = pr > 0 ? recv(s, ans, sizeof(ans), MSG_DONTWAIT) : -1;
	int e = errno;
	close(s);
	if (k > 0)
		return "answered";
	return pr == 0 ? "sent-no-answer" : errstr(e);
}

static const char *tcp_try(const char *addr, int port)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fam = fill_addr(addr, port, &ss, &len);
	if (fam < 0)
		return "badaddr";
	int s = socket(fam, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s < 0)
		return errstr(errno);
	int r = connect(s, (struct sockaddr *)&ss, len);
	int e = errno;
	if (r < 0 && e == EINPROGRESS) {
		struct pollfd pf = {s, POLLOUT, 0};
		if (poll(&pf, 1, 2000) <= 0) {
			e = ETIMEDOUT;
		} else {
			socklen_t el = sizeof(e);
			getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &el);
			r = e ? -1 : 0;
		}
	}
	close(s);
	return r == 0 ? "ok" : errstr(e);
}

/* egress ADDR4 ADDR6 PORT: every way out we know of. */
int cmd_egress(int argc, char **argv)
{
	if (argc < 3)
		return usage("egress ADDR4 ADDR6 PORT");
	int port = (int)parse_long(argv[2], 80);
	printf("egress tcp4 %s\n", tcp_try(argv[0], port));
	printf("egress tcp6 %s\n", tcp_try(argv[1], port));
	printf("egress udp4-sendto %s\n", udp_sendto(argv[0], port, "x", 1));
	printf("egress udp6-sendto %s\n", udp_sendto(argv[1], port, "x", 1));
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, IPPROTO_ICMP);
	const char *icmp = s < 0 ? errstr(errno) : "ok";
	if (s >= 0) {
		struct icmphdr h = {.type = ICMP_ECHO};
		struct sockaddr_storage ss;
		socklen_t len;
		fill_addr(argv[0], 0, &ss, &len);
		if (sendto(s, &h, sizeof(h), 0, (struct sockaddr *)&ss, len) < 0)
			icmp = errstr(errno);
		close(s);
	}
	printf("egress icmp-dgram %s\n", icmp);
	s = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP);
	printf("egress raw-icmp %s\n", outcome(s, errno));
	if (s >= 0)
		close(s);
	s = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);
	printf("egress raw-ip %s\n", outcome(s, errno));
	if (s >= 0)
		close(s);
	s = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(0x0003));
	printf("egress packet %s\n", outcome(s, errno));
	if (s >= 0)
		close(s);
	s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 0 /* ROUTE */);
	printf("egress netlink-route %s\n", outcome(s, errno));
	if (s >= 0)
		close(s);
	fflush(stdout);
	return 0;
}

/* dns NAME SERVER...: a query for NAME over UDP and TCP 53 to each server
 * (and DoH: TCP 443), plus what /etc/resolv.conf names */
int cmd_dns(int argc, char **argv)
{
	if (argc < 2)
		return usage("dns NAME SERVER...");
	unsigned char q[512];
	size_t n = dns_query(argv[0], q, sizeof(q));
	for (int i = 1; i < argc; i++) {
		printf("dns udp53 %s %s\n", argv[i], udp_sendto(argv[i], 53, q, n));
		printf("dns tcp53 %s %s\n", argv[i], tcp_try(argv[i], 53));
		printf("dns doh443 %s %s\n", argv[i], tcp_try(argv[i], 443));
	}
	int fd = open("/etc/resolv.conf", O_RDONLY | O_CLOEXEC);
	char buf[4096];
	ssize_t k = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	if (fd >= 0)
		close(fd);
	buf[k < 0 ? 0 : k] = 0;
	int ns = 0;
	for (char *l = buf; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		char addr[64];
		if (sscanf(l, "nameserver %63s", addr) == 1) {
			ns++;
			printf("dns resolver %s udp53 %s\n", esc(addr), udp_sendto(addr, 53, q, n));
		}
	}
	printf("dns resolvers count=%d\n", ns);
	fflush(stdout);
	return 0;
}

/* abstract [TOKEN-HEX...]: connect to every abstract socket listed in
 * /proc/net/unix and to the given names (encoded as tokens are). */
int cmd_abstract(int argc, char **argv)
{
	char names[256][108];
	int n = 0, seen = 0;
	FILE *f = fopen("/proc/net/unix", "re");
	const char *procnet = f ? "ok" : errstr(errno);
	if (f) {
		char line[512];
		while (fgets(line, sizeof(line), f) && n < 256) {
			char *at = strchr(line, '@');
			if (!at)
				continue;
			at[strcspn(at, "\n")] = 0;
			seen++;
			snprintf(names[n++], sizeof(names[0]), "%s", at + 1);
		}
		fclose(f);
	}
	for (int i = 0; i < argc && n < 256; i++)
		if (unhex_xor(argv[i], names[n], sizeof(names[0])) > 0)
			n++;
	long connected = 0, counts[8] = {0};
	int errs[8] = {0};
	for (int i = 0; i < n; i++) {
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		size_t k = strlen(names[i]);
		memcpy(sa.sun_path + 1, names[i], k);
		int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (s < 0)
			continue;
		int r = connect(s, (struct sockaddr *)&sa,
				(socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + k));
		int e = errno;
		close(s);
		if (r == 0) {
			connected++;
			continue;
		}
		for (int j = 0; j < 8; j++)
			if (errs[j] == e || errs[j] == 0) {
				errs[j] = e;
				counts[j]++;
				break;
			}
	}
	printf("abstract ok procnet=%s seen=%d tried=%d connected=%ld errnos=", procnet, seen, n,
	       connected);
	for (int j = 0; j < 8 && errs[j]; j++)
		printf("%s%s:%ld", j ? "," : "", errstr(errs[j]), counts[j]);
	putchar('\n');
	fflush(stdout);
	return 0;
}

/* forge unix PATH | forge tcp ADDR PORT: connect and send an API request */
int cmd_forge(int argc, char **argv)
{
	if (argc < 2 || (strcmp(argv[0], "unix") && strcmp(argv[0], "tcp")) ||
	    (!strcmp(argv[0], "tcp") && argc < 3))
		return usage("forge unix PATH | forge tcp ADDR PORT");
	int s;
	int r;
	if (!strcmp(argv[0], "unix")) {
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", argv[1]);
		s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		r = s < 0 ? -1 : connect(s, (struct sockaddr *)&sa, sizeof(sa));
	} else {
		struct sockaddr_storage ss;
		socklen_t len;
		if (fill_addr(argv[1], (int)parse_long(argv[2], 0), &ss, &len) < 0)
			return usage("forge tcp ADDR PORT (numeric address)");
		s = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		r = s < 0 ? -1 : connect(s, (struct sockaddr *)&ss, len);
	}
	if (r < 0) {
		int e = errno;
		printf("forge %s errno=%s\n", argv[0], errstr(e));
		if (s >= 0)
			close(s);
		return 0;
	}
	static const char req[] = "GET /v1/sandboxes HTTP/1.0\r\nHost: x\r\n\r\n";
	ssize_t w = write(s, req, sizeof(req) - 1);
	char ans[256] = {0};
	ssize_t k = w > 0 ? read(s, ans, sizeof(ans) - 1) : -1;
	close(s);
	ans[k < 0 ? 0 : k] = 0;
	ans[strcspn(ans, "\r\n")] = 0;
	printf("forge %s connected answer=%s\n", argv[0], esc(ans));
	fflush(stdout);
	return 0;
}
