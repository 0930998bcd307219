/* Configuration helpers of the DNS forwarder: defaults, addresses,
 * resolv.conf. */
#include "net/dns.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"

void wr_dns_config_init(struct wr_dns_config *c)
{
	memset(c, 0, sizeof(*c));
	c->timeout_ms = 1500;
	c->ttl_min = 30;
	c->ttl_max = 3600;
	c->workers = 16;
	c->max_inflight = 8;
	c->max_queue = 1024;
	c->max_tcp = 64;
	c->max_tcp_per_sandbox = 4;
	c->tcp_idle_ms = 10000;
	c->event_burst = 20;
	c->event_per_min = 60;
	c->max_sandboxes = 65536;
}

int wr_dns_parse_addr(const char *s, struct sockaddr_storage *out, wr_err *err)
{
	char host[INET6_ADDRSTRLEN + 1];
	const char *port = NULL;
	size_t n = strlen(s);
	memset(out, 0, sizeof(*out));
	if (s[0] == '[') {
		const char *e = strchr(s, ']');
		if (e == NULL || (size_t)(e - s - 1) >= sizeof(host))
			return wr_err_set(err, EINVAL, "\"%.80s\": bad [address]:port", s);
		memcpy(host, s + 1, (size_t)(e - s - 1));
		host[e - s - 1] = 0;
		if (e[1] == ':')
			port = e + 2;
		else if (e[1] != 0)
			return wr_err_set(err, EINVAL, "\"%.80s\": bad [address]:port", s);
	} else {
		const char *colon = strchr(s, ':');
		if (colon != NULL && strchr(colon + 1, ':') == NULL) { /* a.b.c.d:port */
			n = (size_t)(colon - s);
			port = colon + 1;
		}
		if (n >= sizeof(host))
			return wr_err_set(err, EINVAL, "\"%.80s\": not an IP address", s);
		memcpy(host, s, n);
		host[n] = 0;
	}
	unsigned long p = 53;
	if (port != NULL) {
		char *end;
		errno = 0;
		p = strtoul(port, &end, 10);
		if (*port == 0 || *end != 0 || errno != 0 || p == 0 || p > 65535)
			return wr_err_set(err, EINVAL, "\"%.80s\": port must be 1..65535", s);
	}
	struct sockaddr_in *a4 = (struct sockaddr_in *)out;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)out;
	if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
		a4->sin_family = AF_INET;
		a4->sin_port = htons((uint16_t)p);
	} else if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons((uint16_t)p);
	} else
		return wr_err_set(err, EINVAL, "\"%.80s\": not an IP address", s);
	return 0;
}

int wr_dns_resolv_conf(const char *path, struct sockaddr_storage *out, size_t max, size_t *n,
		       wr_err *err)
{
	_cleanup_fclose_ FILE *f = fopen(path, "re");
	*n = 0;
	if (f == NULL)
		return wr_err_sys(err, "open %s", path);
	char line[512];
	while (fgets(line, sizeof(line), f) != NULL && *n < max) {
		char addr[256];
		if (sscanf(line, " nameserver %255s", addr) != 1)
			continue;
		char *pct = strchr(addr, '%'); /* fe80::1%eth0: link-local, skip */
		if (pct != NULL)
			continue;
		wr_err ignored = NULL;
		if (wr_dns_parse_addr(addr, &out[*n], &ignored) == 0)
			(*n)++;
		wr_err_free(&ignored);
	}
	return 0;
}
