#include "isolate/rtnl.h"

#include <errno.h>
#include <linux/if_bridge.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MSG_CAP 4096

struct msg {
	union {
		struct nlmsghdr h;
		char buf[MSG_CAP];
	};
};

int wr_rtnl_open(struct wr_rtnl *nl, wr_err *err)
{
	nl->seq = 1;
	nl->fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (nl->fd < 0)
		return wr_err_sys(err, "netlink socket");
	struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
	if (bind(nl->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int r = wr_err_sys(err, "netlink bind");
		close(nl->fd);
		nl->fd = -1;
		return r;
	}
	int one = 1;
	/* Errors carry the offending attribute's text (extended acks). */
	setsockopt(nl->fd, SOL_NETLINK, NETLINK_EXT_ACK, &one, sizeof(one));
	return 0;
}

void wr_rtnl_close(struct wr_rtnl *nl)
{
	if (nl->fd >= 0)
		close(nl->fd);
	nl->fd = -1;
}

static void *msg_init(struct msg *m, uint16_t type, uint16_t flags, size_t hdr)
{
	memset(m->buf, 0, NLMSG_SPACE(hdr));
	m->h.nlmsg_len = (uint32_t)NLMSG_LENGTH(hdr);
	m->h.nlmsg_type = type;
	m->h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | flags;
	return NLMSG_DATA(&m->h);
}

static struct rtattr *attr_add(struct msg *m, uint16_t type, const void *data, size_t len)
{
	size_t off = NLMSG_ALIGN(m->h.nlmsg_len);
	if (off + RTA_SPACE(len) > MSG_CAP)
		return NULL; /* callers build small fixed messages: never reached */
	struct rtattr *a = (struct rtattr *)(void *)(m->buf + off);
	a->rta_type = type;
	a->rta_len = (unsigned short)RTA_LENGTH(len);
	if (len)
		memcpy(RTA_DATA(a), data, len);
	m->h.nlmsg_len = (uint32_t)(off + RTA_SPACE(len));
	return a;
}

static struct rtattr *nest_begin(struct msg *m, uint16_t type)
{
	return attr_add(m, type | NLA_F_NESTED, NULL, 0);
}

static void nest_end(struct msg *m, struct rtattr *a)
{
	a->rta_len = (unsigned short)(m->buf + m->h.nlmsg_len - (char *)a);
}

/* Send m and read replies until the ack (or the dump's end), passing each
 * data message to cb. */
static int talk(struct wr_rtnl *nl, struct msg *m, int (*cb)(struct nlmsghdr *h, void *ctx),
		void *ctx, const char *what, wr_err *err)
{
	m->h.nlmsg_seq = ++nl->seq;
	struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
	ssize_t n;
	do
		n = sendto(nl->fd, m->buf, m->h.nlmsg_len, 0, (struct sockaddr *)&sa, sizeof(sa));
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return wr_err_sys(err, "%s: netlink send", what);
	char buf[16384] __attribute__((aligned(NLMSG_ALIGNTO)));
	for (;;) {
		do
			n = recv(nl->fd, buf, sizeof(buf), 0);
		while (n < 0 && errno == EINTR);
		if (n < 0)
			return wr_err_sys(err, "%s: netlink receive", what);
		size_t len = (size_t)n;
		for (struct nlmsghdr *h = (struct nlmsghdr *)(void *)buf; NLMSG_OK(h, len);
		     h = NLMSG_NEXT(h, len)) {
			if (h->nlmsg_seq != nl->seq)
				continue;
			if (h->nlmsg_type == NLMSG_DONE)
				return 0;
			if (h->nlmsg_type == NLMSG_ERROR) {
				struct nlmsgerr *e = NLMSG_DATA(h);
				if (e->error == 0)
					return 0;
				return wr_err_set(err, -e->error, "%s: %s", what,
						  strerror(-e->error));
			}
			if (cb) {
				int r = cb(h, ctx);
				if (r < 0)
					return wr_err_set(err, -r, "%s: %s", what, strerror(-r));
			}
		}
	}
}

int wr_rtnl_ifindex(struct wr_rtnl *nl, const char *name, wr_err *err)
{
	(void)nl;
	unsigned idx = if_nametoindex(name);
	if (idx == 0)
		return errno == ENODEV || errno == ENXIO
			   ? wr_err_set(err, ENODEV, "no interface %s", name)
			   : wr_err_sys(err, "interface %s", name);
	return (int)idx;
}

int wr_rtnl_bridge_add(struct wr_rtnl *nl, const char *name, wr_err *err)
{
	struct msg m;
	msg_init(&m, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, sizeof(struct ifinfomsg));
	attr_add(&m, IFLA_IFNAME, name, strlen(name) + 1);
	struct rtattr *li = nest_begin(&m, IFLA_LINKINFO);
	attr_add(&m, IFLA_INFO_KIND, "bridge", 6);
	nest_end(&m, li);
	return talk(nl, &m, NULL, NULL, "create bridge", err);
}

struct kind_ctx {
	char *kind;
	size_t cap;
};

static int kind_cb(struct nlmsghdr *h, void *ctx)
{
	struct kind_ctx *k = ctx;
	if (h->nlmsg_type != RTM_NEWLINK)
		return 0;
	struct ifinfomsg *ifi = NLMSG_DATA(h);
	int len = (int)IFLA_PAYLOAD(h);
	for (struct rtattr *a = IFLA_RTA(ifi); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
		if (a->rta_type != IFLA_LINKINFO)
			continue;
		int l2 = (int)RTA_PAYLOAD(a);
		for (struct rtattr *b = RTA_DATA(a); RTA_OK(b, l2); b = RTA_NEXT(b, l2))
			if (b->rta_type == IFLA_INFO_KIND)
				snprintf(k->kind, k->cap, "%.*s", (int)RTA_PAYLOAD(b),
					 (char *)RTA_DATA(b));
	}
	return 0;
}

int wr_rtnl_link_kind(struct wr_rtnl *nl, const char *name, char *kind, size_t cap, wr_err *err)
{
	struct msg m;
	/* the reply, then the ack */
	msg_init(&m, RTM_GETLINK, 0, sizeof(struct ifinfomsg));
	attr_add(&m, IFLA_IFNAME, name, strlen(name) + 1);
	kind[0] = 0;
	struct kind_ctx k = {kind, cap};
	return talk(nl, &m, kind_cb, &k, "get link", err);
}

int wr_rtnl_veth_add(struct wr_rtnl *nl, const char *name, const char *peer, int peer_netns_fd,
		     wr_err *err)
{
	struct msg m;
	msg_init(&m, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, sizeof(struct ifinfomsg));
	attr_add(&m, IFLA_IFNAME, name, strlen(name) + 1);
	struct rtattr *li = nest_begin(&m, IFLA_LINKINFO);
	attr_add(&m, IFLA_INFO_KIND, "veth", 4);
	struct rtattr *data = nest_begin(&m, IFLA_INFO_DATA);
	struct rtattr *p = nest_begin(&m, VETH_INFO_PEER);
	/* the peer's ifinfomsg, then its attributes */
	struct ifinfomsg pifi = {.ifi_family = AF_UNSPEC};
	size_t off = NLMSG_ALIGN(m.h.nlmsg_len);
	memcpy(m.buf + off, &pifi, sizeof(pifi));
	m.h.nlmsg_len = (uint32_t)(off + NLMSG_ALIGN(sizeof(pifi)));
	attr_add(&m, IFLA_IFNAME, peer, strlen(peer) + 1);
	uint32_t nsfd = (uint32_t)peer_netns_fd;
	attr_add(&m, IFLA_NET_NS_FD, &nsfd, sizeof(nsfd));
	nest_end(&m, p);
	nest_end(&m, data);
	nest_end(&m, li);
	return talk(nl, &m, NULL, NULL, "create veth pair", err);
}

int wr_rtnl_link_set(struct wr_rtnl *nl, int ifindex, bool up, int master, wr_err *err)
{
	struct msg m;
	struct ifinfomsg *ifi = msg_init(&m, RTM_NEWLINK, 0, sizeof(*ifi));
	ifi->ifi_family = AF_UNSPEC;
	ifi->ifi_index = ifindex;
	ifi->ifi_change = IFF_UP;
	ifi->ifi_flags = up ? IFF_UP : 0;
	if (master > 0) {
		uint32_t mi = (uint32_t)master;
		attr_add(&m, IFLA_MASTER, &mi, sizeof(mi));
	}
	return talk(nl, &m, NULL, NULL, "set link", err);
}

int wr_rtnl_link_set_mac(struct wr_rtnl *nl, int ifindex, const uint8_t mac[6], wr_err *err)
{
	struct msg m;
	struct ifinfomsg *ifi = msg_init(&m, RTM_NEWLINK, 0, sizeof(*ifi));
	ifi->ifi_family = AF_UNSPEC;
	ifi->ifi_index = ifindex;
	attr_add(&m, IFLA_ADDRESS, mac, 6);
	return talk(nl, &m, NULL, NULL, "set link address", err);
}

int wr_rtnl_brport_isolate(struct wr_rtnl *nl, int ifindex, wr_err *err)
{
	struct msg m;
	struct ifinfomsg *ifi = msg_init(&m, RTM_SETLINK, 0, sizeof(*ifi));
	ifi->ifi_family = AF_BRIDGE;
	ifi->ifi_index = ifindex;
	struct rtattr *pi = nest_begin(&m, IFLA_PROTINFO);
	uint8_t one = 1;
	attr_add(&m, IFLA_BRPORT_ISOLATED, &one, 1);
	nest_end(&m, pi);
	return talk(nl, &m, NULL, NULL, "isolate bridge port", err);
}

int wr_rtnl_link_del(struct wr_rtnl *nl, const char *name, wr_err *err)
{
	struct msg m;
	msg_init(&m, RTM_DELLINK, 0, sizeof(struct ifinfomsg));
	attr_add(&m, IFLA_IFNAME, name, strlen(name) + 1);
	return talk(nl, &m, NULL, NULL, "delete link", err);
}

int wr_rtnl_addr_add(struct wr_rtnl *nl, int ifindex, struct in_addr addr, int plen, wr_err *err)
{
	struct msg m;
	struct ifaddrmsg *ifa =
	    msg_init(&m, RTM_NEWADDR, NLM_F_CREATE | NLM_F_REPLACE, sizeof(*ifa));
	ifa->ifa_family = AF_INET;
	ifa->ifa_prefixlen = (unsigned char)plen;
	ifa->ifa_index = (unsigned)ifindex;
	ifa->ifa_scope = RT_SCOPE_UNIVERSE;
	attr_add(&m, IFA_LOCAL, &addr, sizeof(addr));
	attr_add(&m, IFA_ADDRESS, &addr, sizeof(addr));
	if (plen < 31) {
		struct in_addr bc = {.s_addr = addr.s_addr | htonl(0xffffffffu >> plen)};
		attr_add(&m, IFA_BROADCAST, &bc, sizeof(bc));
	}
	return talk(nl, &m, NULL, NULL, "add address", err);
}

int wr_rtnl_route_default(struct wr_rtnl *nl, int ifindex, struct in_addr gw, wr_err *err)
{
	return wr_rtnl_route_add(nl, ifindex, (struct in_addr){0}, 0, gw, err);
}

int wr_rtnl_route_add(struct wr_rtnl *nl, int ifindex, struct in_addr dst, int plen,
		      struct in_addr gw, wr_err *err)
{
	struct msg m;
	struct rtmsg *rt = msg_init(&m, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE, sizeof(*rt));
	rt->rtm_family = AF_INET;
	rt->rtm_table = RT_TABLE_MAIN;
	rt->rtm_protocol = RTPROT_STATIC;
	rt->rtm_scope = RT_SCOPE_UNIVERSE;
	rt->rtm_type = RTN_UNICAST;
	uint32_t oif = (uint32_t)ifindex;
	rt->rtm_dst_len = (unsigned char)plen;
	if (plen > 0)
		attr_add(&m, RTA_DST, &dst, sizeof(dst));
	attr_add(&m, RTA_GATEWAY, &gw, sizeof(gw));
	attr_add(&m, RTA_OIF, &oif, sizeof(oif));
	return talk(nl, &m, NULL, NULL, "add route", err);
}

struct port_ctx {
	int master;
	void (*cb)(const char *name, void *ctx);
	void *ctx;
};

static int port_cb(struct nlmsghdr *h, void *ctx)
{
	struct port_ctx *p = ctx;
	if (h->nlmsg_type != RTM_NEWLINK)
		return 0;
	struct ifinfomsg *ifi = NLMSG_DATA(h);
	int len = (int)IFLA_PAYLOAD(h);
	const char *name = NULL;
	int master = 0;
	for (struct rtattr *a = IFLA_RTA(ifi); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
		if (a->rta_type == IFLA_IFNAME)
			name = RTA_DATA(a);
		else if (a->rta_type == IFLA_MASTER)
			memcpy(&master, RTA_DATA(a), sizeof(master));
	}
	if (name && master == p->master)
		p->cb(name, p->ctx);
	return 0;
}

int wr_rtnl_each_port(struct wr_rtnl *nl, int master, void (*cb)(const char *name, void *ctx),
		      void *ctx, wr_err *err)
{
	struct msg m;
	struct ifinfomsg *ifi = msg_init(&m, RTM_GETLINK, NLM_F_DUMP, sizeof(*ifi));
	m.h.nlmsg_flags &= (uint16_t)~NLM_F_ACK;
	ifi->ifi_family = AF_UNSPEC;
	uint32_t mi = (uint32_t)master;
	attr_add(&m, IFLA_MASTER, &mi, sizeof(mi)); /* filtered dump */
	struct port_ctx p = {master, cb, ctx};
	return talk(nl, &m, port_cb, &p, "list bridge ports", err);
}

static int route_cb(struct nlmsghdr *h, void *ctx)
{
	int *oif = ctx;
	if (h->nlmsg_type != RTM_NEWROUTE || *oif > 0)
		return 0;
	struct rtmsg *rt = NLMSG_DATA(h);
	if (rt->rtm_family != AF_INET || rt->rtm_dst_len != 0 || rt->rtm_table != RT_TABLE_MAIN ||
	    rt->rtm_type != RTN_UNICAST)
		return 0;
	int len = (int)RTM_PAYLOAD(h);
	for (struct rtattr *a = RTM_RTA(rt); RTA_OK(a, len); a = RTA_NEXT(a, len))
		if (a->rta_type == RTA_OIF)
			memcpy(oif, RTA_DATA(a), sizeof(*oif));
	return 0;
}

int wr_rtnl_default_oif(struct wr_rtnl *nl, wr_err *err)
{
	struct msg m;
	struct rtmsg *rt = msg_init(&m, RTM_GETROUTE, NLM_F_DUMP, sizeof(*rt));
	m.h.nlmsg_flags &= (uint16_t)~NLM_F_ACK;
	rt->rtm_family = AF_INET;
	int oif = 0;
	if (talk(nl, &m, route_cb, &oif, "list routes", err) < 0)
		return -1;
	return oif > 0 ? oif : wr_err_set(err, ENOENT, "no IPv4 default route");
}
