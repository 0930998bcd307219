#include "isolate/netpool_nft.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <nftables/libnftables.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

/* Names go into ruleset text: only characters that need no quoting. */
static bool name_ok(const char *s, size_t max)
{
	size_t n = s ? strlen(s) : 0;
	if (n == 0 || n > max)
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '_' || *s == '-' || *s == '.'))
			return false;
	return true;
}

/* One transaction: the whole buffer applies or nothing does. */
static int run(const char *cmds, const char *what, wr_err *err)
{
	pthread_mutex_lock(&g_lock);
	struct nft_ctx *ctx = nft_ctx_new(NFT_CTX_DEFAULT);
	if (ctx == NULL) {
		pthread_mutex_unlock(&g_lock);
		return wr_err_set(err, ENOMEM, "%s: nftables context", what);
	}
	nft_ctx_buffer_output(ctx);
	nft_ctx_buffer_error(ctx);
	int r = 0;
	if (nft_run_cmd_from_buffer(ctx, cmds) != 0) {
		const char *e = nft_ctx_get_error_buffer(ctx);
		/* the first line says what the kernel or the parser refused */
		size_t n = e ? strcspn(e, "\n") : 0;
		int code = e && strstr(e, "No such file or directory") ? ENOENT
			   : e && strstr(e, "File exists")	       ? EEXIST
								       : EIO;
		r = wr_err_set(err, code, "%s: nftables: %.*s", what, (int)n, n ? e : "failed");
	}
	nft_ctx_free(ctx);
	pthread_mutex_unlock(&g_lock);
	return r;
}

int wr_netfw_setup(const struct wr_netfw_config *c, wr_err *err)
{
	const char *t = c->table ? c->table : "warren";
	bool any_uplink = c->uplink == NULL || *c->uplink == 0;
	if (!name_ok(t, 64))
		return wr_err_field(err, "table", "table: '%s' must be 1 to 64 of [A-Za-z0-9_.-]",
				    t);
	if (!name_ok(c->bridge, IF_NAMESIZE - 1))
		return wr_err_field(err, "bridge", "bridge: invalid interface name");
	if (!any_uplink && !name_ok(c->uplink, IF_NAMESIZE - 1))
		return wr_err_field(err, "uplink", "uplink: invalid interface name");
	char net[INET_ADDRSTRLEN], gw[INET_ADDRSTRLEN], out[48];
	inet_ntop(AF_INET, &c->net, net, sizeof(net));
	inet_ntop(AF_INET, &c->gw, gw, sizeof(gw));
	if (any_uplink)
		snprintf(out, sizeof(out), "oifname != \"%s\"", c->bridge);
	else
		snprintf(out, sizeof(out), "oifname \"%s\"", c->uplink);
	const char *br = c->bridge;
	_cleanup_free_ char *cmds = NULL;
	/* "add" then "delete" then the table: an atomic replace, whether or
	 * not a previous run left it. Priorities just before the usual filter
	 * and NAT ones: our drops are final whatever other tables accept. */
	if (asprintf(&cmds,
		     "add table inet %1$s\n"
		     "delete table inet %1$s\n"
		     "table inet %1$s {\n"
		     "  map expose4 { type ipv4_addr . inet_service : ipv4_addr . inet_service; }\n"
		     "  chain input {\n"
		     "    type filter hook input priority -5; policy accept;\n"
		     "    iifname \"%2$s\" ct state established,related accept\n"
		     "    iifname \"%2$s\" ip daddr %4$s udp dport 53 accept\n"
		     "    iifname \"%2$s\" ip daddr %4$s tcp dport 53 accept\n"
		     "    iifname \"%2$s\" drop\n"
		     "  }\n"
		     "  chain forward {\n"
		     "    type filter hook forward priority -5; policy accept;\n"
		     "    iifname \"%2$s\" meta nfproto ipv6 drop\n"
		     "    iifname \"%2$s\" ip saddr != %3$s/%5$d drop\n"
		     "    iifname \"%2$s\" oifname \"%2$s\" drop\n"
		     "    iifname \"%2$s\" ip daddr { %3$s/%5$d, 169.254.0.0/16, 127.0.0.0/8, "
		     "0.0.0.0/8, 224.0.0.0/4, 255.255.255.255 } drop\n"
		     "    oifname \"%2$s\" ct state established,related accept\n"
		     "    oifname \"%2$s\" ct status dnat accept\n"
		     "    oifname \"%2$s\" drop\n"
		     "  }\n"
		     "  chain prerouting {\n"
		     "    type nat hook prerouting priority -105; policy accept;\n"
		     "    iifname != \"%2$s\" meta l4proto tcp dnat ip to ip daddr . tcp dport map "
		     "@expose4\n"
		     "  }\n"
		     "  chain output {\n"
		     "    type nat hook output priority -105; policy accept;\n"
		     "    meta l4proto tcp dnat ip to ip daddr . tcp dport map @expose4\n"
		     "  }\n"
		     "  chain postrouting {\n"
		     "    type nat hook postrouting priority 95; policy accept;\n"
		     "    ip saddr %3$s/%5$d ip daddr != %3$s/%5$d %6$s masquerade\n"
		     "  }\n"
		     "}\n",
		     t, br, net, gw, c->plen, out) < 0)
		return wr_err_set(err, ENOMEM, "out of memory");
	return run(cmds, "network rules", err);
}

int wr_netfw_remove(const char *table, wr_err *err)
{
	const char *t = table ? table : "warren";
	if (!name_ok(t, 64))
		return wr_err_field(err, "table", "table: invalid name");
	char cmds[160];
	/* "add" first: deleting a table that does not exist is then no error */
	snprintf(cmds, sizeof(cmds), "add table inet %1$s\ndelete table inet %1$s\n", t);
	return run(cmds, "remove network rules", err);
}

static int element(const char *verb, const char *table, struct in_addr host, uint16_t host_port,
		   const struct in_addr *addr, uint16_t port, wr_err *err)
{
	const char *t = table ? table : "warren";
	if (!name_ok(t, 64))
		return wr_err_field(err, "table", "table: invalid name");
	char h[INET_ADDRSTRLEN], a[INET_ADDRSTRLEN], cmds[256];
	inet_ntop(AF_INET, &host, h, sizeof(h));
	if (addr) {
		inet_ntop(AF_INET, addr, a, sizeof(a));
		snprintf(cmds, sizeof(cmds), "%s element inet %s expose4 { %s . %u : %s . %u }\n",
			 verb, t, h, host_port, a, port);
	} else {
		snprintf(cmds, sizeof(cmds), "%s element inet %s expose4 { %s . %u }\n", verb, t, h,
			 host_port);
	}
	return run(cmds, "published port", err);
}

int wr_netfw_expose_add(const char *table, struct in_addr host, uint16_t host_port,
			struct in_addr addr, uint16_t port, wr_err *err)
{
	return element("add", table, host, host_port, &addr, port, err);
}

int wr_netfw_expose_del(const char *table, struct in_addr host, uint16_t host_port, wr_err *err)
{
	return element("delete", table, host, host_port, NULL, 0, err);
}

/* ---- forwarding ------------------------------------------------------------ */

#define MAX_SAVED 3
static struct {
	char path[96];
	char old;
} g_saved[MAX_SAVED];
static int g_nsaved;

static int forward_on(const char *path, wr_err *err)
{
	_cleanup_close_ int fd = open(path, O_RDWR | O_CLOEXEC);
	char old = 0;
	if (fd < 0 || read(fd, &old, 1) != 1)
		return wr_err_sys(err, "%s", path);
	if (old == '1')
		return 0;
	if (pwrite(fd, "1", 1, 0) != 1)
		return wr_err_sys(err, "enable %s", path);
	if (g_nsaved < MAX_SAVED) {
		snprintf(g_saved[g_nsaved].path, sizeof(g_saved[0].path), "%s", path);
		g_saved[g_nsaved++].old = old;
	}
	return 0;
}

int wr_netfw_forwarding_enable(const char *bridge, const char *uplink, wr_err *err)
{
	char path[96];
	pthread_mutex_lock(&g_lock);
	int r;
	if (uplink == NULL || *uplink == 0) {
		r = forward_on("/proc/sys/net/ipv4/ip_forward", err);
	} else {
		snprintf(path, sizeof(path), "/proc/sys/net/ipv4/conf/%s/forwarding", bridge);
		r = forward_on(path, err);
		snprintf(path, sizeof(path), "/proc/sys/net/ipv4/conf/%s/forwarding", uplink);
		if (r == 0)
			r = forward_on(path, err);
	}
	pthread_mutex_unlock(&g_lock);
	return r;
}

void wr_netfw_forwarding_restore(void)
{
	pthread_mutex_lock(&g_lock);
	for (; g_nsaved > 0; g_nsaved--) {
		int fd = open(g_saved[g_nsaved - 1].path, O_WRONLY | O_CLOEXEC);
		if (fd >= 0) {
			if (write(fd, &g_saved[g_nsaved - 1].old, 1) != 1) {
				/* best effort: the value stays on */
			}
			close(fd);
		}
	}
	pthread_mutex_unlock(&g_lock);
}
