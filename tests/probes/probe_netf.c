/* wr-probe's commands for the network filter's tests (send-udp, socket);
 * see wr-probe.c for the output format. */
#include "probe.h"

/* A numeric address into ss; 0 or -1. */
static int probe_addr(const char *a, long port, struct sockaddr_storage *ss, socklen_t *len)
{
	memset(ss, 0, sizeof(*ss));
	struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, a, &in4->sin_addr) == 1) {
		in4->sin_family = AF_INET;
		in4->sin_port = htons((uint16_t)port);
		*len = sizeof(*in4);
		return 0;
	}
	if (inet_pton(AF_INET6, a, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		*len = sizeof(*in6);
		return 0;
	}
	return -1;
}

int cmd_send_udp(int argc, char **argv)
{
	struct sockaddr_storage ss;
	socklen_t len;
	char *end;
	long port = argc == 2 ? strtol(argv[1], &end, 10) : -1;
	if (argc != 2 || *end || port < 0 || port > 65535 || probe_addr(argv[0], port, &ss, &len))
		return usage("send-udp ADDR PORT (numeric address)");
	int s = socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0) {
		result("send-udp", -1, errno, "stage=socket");
		return 0;
	}
	long r = sendto(s, "x", 1, 0, (struct sockaddr *)&ss, len);
	result("send-udp", r, errno, "addr=%s port=%ld", argv[0], port);
	close(s);
	return 0;
}

int cmd_socket(int argc, char **argv)
{
	static const struct {
		const char *kind;
		int family, type, proto;
	} kinds[] = {{"packet", 17 /* AF_PACKET */, SOCK_RAW, 0x0300 /* htons(ETH_P_ALL) */},
		     {"raw4", AF_INET, SOCK_RAW, IPPROTO_ICMP},
		     {"raw6", AF_INET6, SOCK_RAW, IPPROTO_ICMPV6},
		     {"ping4", AF_INET, SOCK_DGRAM, IPPROTO_ICMP}};
	for (size_t i = 0; argc == 1 && i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		if (strcmp(argv[0], kinds[i].kind) != 0)
			continue;
		int s = socket(kinds[i].family, kinds[i].type | SOCK_CLOEXEC, kinds[i].proto);
		result("socket", s, errno, "kind=%s", argv[0]);
		if (s >= 0)
			close(s);
		return 0;
	}
	return usage("socket packet|raw4|raw6|ping4");
}

/* ping ADDR connect|sendto: one ICMP (or ICMPv6) echo request from a ping
 * socket (SOCK_DGRAM, no capability needed where ping_group_range lets the
 * gid in), either connect()ed first or sent unconnected. */
int cmd_ping(int argc, char **argv)
{
	struct sockaddr_storage ss;
	socklen_t len;
	if (argc != 2 || probe_addr(argv[0], 0, &ss, &len) ||
	    (strcmp(argv[1], "connect") && strcmp(argv[1], "sendto")))
		return usage("ping ADDR connect|sendto (numeric address)");
	int v6 = ss.ss_family == AF_INET6;
	int s = socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, v6 ? IPPROTO_ICMPV6 : IPPROTO_ICMP);
	if (s < 0) {
		result("ping", -1, errno, "stage=socket addr=%s", argv[0]);
		return 0;
	}
	/* type 8 (echo request) for ICMP, 128 for ICMPv6; the kernel fills
	 * in the identifier and the checksum */
	unsigned char echo[16] = {v6 ? 128 : 8, 0};
	long r;
	const char *stage = argv[1];
	if (strcmp(argv[1], "connect") == 0) {
		r = connect(s, (struct sockaddr *)&ss, len);
		if (r == 0) {
			stage = "send";
			r = send(s, echo, sizeof(echo), 0);
		}
	} else {
		r = sendto(s, echo, sizeof(echo), 0, (struct sockaddr *)&ss, len);
	}
	result("ping", r, errno, "stage=%s addr=%s", stage, argv[0]);
	close(s);
	return 0;
}
