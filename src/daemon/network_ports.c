/* Published ports: a sandbox's TCP port made reachable from the host, on
 * request only (nothing reaches a sandbox from outside otherwise).
 *
 *   host a non-loopback address of this host: an nftables DNAT map element
 *     (netpool_nft.c), for every client that reaches that address; a bound,
 *     non-listening socket holds the host port so no local program takes it;
 *   host 127.0.0.1 (the default) or 0.0.0.0: a relay in warrend listening
 *     there (DNAT to a loopback destination would need route_localnet, which
 *     lets 127/8 packets onto real networks host-wide);
 *   unix: a relay listening on <run_dir>/ports/<sandbox>-<port>.sock (0600).
 * A relay is one accept thread per published port and one thread per
 * connection (at most MAX_RELAYS at a time over the daemon). Everything of a
 * sandbox is unpublished when it dies. Not kept across a daemon restart. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/log.h"
#include "common/util.h"
#include "daemon/api.h"
#include "daemon/jsonutil.h"
#include "daemon/network.h"
#include "daemon/network_internal.h"

#define MAX_RELAYS 1024
#define MAX_PORTS 64 /* per sandbox */

enum port_kind { PORT_DNAT, PORT_RELAY, PORT_UNIX };

struct wrd_port {
	enum port_kind kind;
	uint16_t port;	    /* in the sandbox */
	struct in_addr dst; /* the sandbox's address */
	struct in_addr host;
	uint16_t host_port;
	char *path; /* PORT_UNIX */
	int fd;	    /* listening socket, or the DNAT port's reservation */
	int stopfd; /* eventfd: the accept thread ends */
	pthread_t th;
	bool thread;
	struct wrd_port *next;
};

static atomic_int g_relays;

/* ---- relays ------------------------------------------------------------------ */

struct relay {
	int client;
	struct in_addr dst;
	uint16_t port;
};

static int connect_to(struct in_addr dst, uint16_t port)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s < 0)
		return -1;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr = dst};
	if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS) {
		close(s);
		return -1;
	}
	struct pollfd pf = {.fd = s, .events = POLLOUT};
	int e = 0;
	socklen_t el = sizeof(e);
	if (poll(&pf, 1, 5000) != 1 || getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &el) < 0 || e) {
		close(s);
		return -1;
	}
	int fl = fcntl(s, F_GETFL);
	fcntl(s, F_SETFL, fl & ~O_NONBLOCK);
	return s;
}

static void *relay_main(void *arg)
{
	struct relay rl = *(struct relay *)arg;
	free(arg);
	int fds[2] = {rl.client, connect_to(rl.dst, rl.port)};
	if (fds[1] >= 0) {
		char buf[65536];
		bool open_in[2] = {true, true}; /* reading side i still gives data */
		while (open_in[0] || open_in[1]) {
			struct pollfd pf[2] = {{.fd = open_in[0] ? fds[0] : -1, .events = POLLIN},
					       {.fd = open_in[1] ? fds[1] : -1, .events = POLLIN}};
			if (poll(pf, 2, -1) < 0) {
				if (errno == EINTR)
					continue;
				break;
			}
			bool fail = false;
			for (int i = 0; i < 2 && !fail; i++) {
				if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
					continue;
				ssize_t n = read(fds[i], buf, sizeof(buf));
				if (n <= 0) {
					/* half-close: the other side sees EOF */
					open_in[i] = false;
					shutdown(fds[1 - i], SHUT_WR);
					fail = n < 0;
				} else if (wr_write_all(fds[1 - i], buf, (size_t)n) < 0) {
					fail = true;
				}
			}
			if (fail)
				break;
		}
		close(fds[1]);
	}
	close(fds[0]);
	atomic_fetch_sub(&g_relays, 1);
	return NULL;
}

static void *accept_main(void *arg)
{
	struct wrd_port *p = arg;
	for (;;) {
		struct pollfd pf[2] = {{.fd = p->fd, .events = POLLIN},
				       {.fd = p->stopfd, .events = POLLIN}};
		if (poll(pf, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pf[1].revents)
			break;
		int c = accept4(p->fd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			continue;
		struct relay *rl = malloc(sizeof(*rl));
		pthread_t th;
		pthread_attr_t at;
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(&at, 256 * 1024);
		if (rl == NULL || atomic_fetch_add(&g_relays, 1) >= MAX_RELAYS) {
			if (rl)
				atomic_fetch_sub(&g_relays, 1);
			free(rl);
			close(c);
		} else {
			*rl = (struct relay){.client = c, .dst = p->dst, .port = p->port};
			if (pthread_create(&th, &at, relay_main, rl) != 0) {
				atomic_fetch_sub(&g_relays, 1);
				free(rl);
				close(c);
			}
		}
		pthread_attr_destroy(&at);
	}
	return NULL;
}

/* ---- publishing ----------------------------------------------------------------- */

static void port_free(struct wrd_port *p)
{
	if (p->thread) {
		uint64_t one = 1;
		if (write(p->stopfd, &one, sizeof(one)) != sizeof(one))
			wr_warn("published port: cannot stop its relay");
		pthread_join(p->th, NULL);
	}
	if (p->kind == PORT_DNAT) {
		_cleanup_err_ wr_err err = NULL;
		if (wr_netfw_expose_del(wrd_netst.cfg.table, p->host, p->host_port, &err) < 0)
			wr_warn("%s", err->msg);
	}
	if (p->path)
		unlink(p->path);
	if (p->fd >= 0)
		close(p->fd);
	if (p->stopfd >= 0)
		close(p->stopfd);
	free(p->path);
	free(p);
}

static json_t *port_json(const struct wrd_port *p)
{
	char h[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &p->host, h, sizeof(h));
	json_t *o = json_object();
	json_object_set_new(o, "port", json_integer(p->port));
	if (p->kind == PORT_UNIX) {
		json_object_set_new(o, "unix", json_string(p->path));
	} else {
		json_object_set_new(o, "host", json_string(h));
		json_object_set_new(o, "host_port", json_integer(p->host_port));
	}
	json_object_set_new(o, "via", json_string(p->kind == PORT_DNAT ? "nat" : "relay"));
	return o;
}

/* Bind (and for relays listen on) the host side. Errors name the field. */
static int bind_host(struct wrd_port *p, const char *sbid, wr_err *err)
{
	if (p->kind == PORT_UNIX) {
		if (wr_mkdir_p(wrd_netst.ports_dir, 0755, err) < 0)
			return -1;
		if (asprintf(&p->path, "%s/%s-%u.sock", wrd_netst.ports_dir, sbid, p->port) < 0)
			return wr_err_set(err, ENOMEM, "out of memory");
		struct sockaddr_un su = {.sun_family = AF_UNIX};
		if (strlen(p->path) >= sizeof(su.sun_path))
			return wr_err_set(err, ENAMETOOLONG, "socket path %s is too long", p->path);
		strcpy(su.sun_path, p->path);
		unlink(p->path);
		p->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		mode_t old = umask(0177);
		int b = p->fd < 0 ? -1 : bind(p->fd, (struct sockaddr *)&su, sizeof(su));
		umask(old);
		if (b < 0 || listen(p->fd, 128) < 0)
			return wr_err_sys(err, "listen on %s", p->path);
		return 0;
	}
	p->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (p->fd < 0)
		return wr_err_sys(err, "socket");
	/* A relay may rebind over TIME_WAIT; a DNAT port's reservation must
	 * conflict with any other bind (two non-listening SO_REUSEADDR sockets
	 * could share the port). */
	int one = 1;
	if (p->kind == PORT_RELAY)
		setsockopt(p->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in sa = {
	    .sin_family = AF_INET, .sin_port = htons(p->host_port), .sin_addr = p->host};
	if (bind(p->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		if (errno == EADDRINUSE)
			return wr_err_set(err, EEXIST, "host_port: %u is in use", p->host_port);
		if (errno == EADDRNOTAVAIL)
			return wr_err_field(err, "host", "host: not an address of this host");
		return wr_err_sys(err, "bind the host port");
	}
	socklen_t sl = sizeof(sa);
	getsockname(p->fd, (struct sockaddr *)&sa, &sl);
	p->host_port = ntohs(sa.sin_port);
	if (p->kind == PORT_RELAY && listen(p->fd, 128) < 0)
		return wr_err_sys(err, "listen on the host port");
	return 0;
}

static int publish(struct wrd_net *n, struct wrd_port *p, const char *sbid, wr_err *err)
{
	p->fd = p->stopfd = -1;
	p->dst = n->addr;
	if (bind_host(p, sbid, err) < 0)
		return -1;
	if (p->kind == PORT_DNAT)
		return wr_netfw_expose_add(wrd_netst.cfg.table, p->host, p->host_port, p->dst,
					   p->port, err);
	p->stopfd = eventfd(0, EFD_CLOEXEC);
	if (p->stopfd < 0)
		return wr_err_sys(err, "eventfd");
	if (pthread_create(&p->th, NULL, accept_main, p) != 0)
		return wr_err_set(err, EAGAIN, "published port: thread");
	p->thread = true;
	return 0;
}

static int guest_port(struct wrd_sbx *sb, struct wrd_net *n, unsigned port, bool add, wr_err *err)
{
	char a[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &n->addr, a, sizeof(a));
	wr_err e2 = NULL;
	int r = sb->ops->port(sb->tsb, a, port, add, err ? err : &e2);
	wr_err_free(&e2);
	return r;
}

static struct wrd_sbx *networked(struct wrd_req *r)
{
	struct wrd_sbx *sb = wrd_api_sandbox(r, false);
	if (sb == NULL)
		return NULL;
	if (sb->net == NULL) {
		wrd_reply_error(r, "conflict", NULL,
				"sandbox %s is offline (network.mode \"none\"): it has no address "
				"to publish",
				r->id);
		wrd_api_done(sb, false);
		return NULL;
	}
	return sb;
}

void wrd_api_ports_add(struct wrd_req *r)
{
	static const char *const keys[] = {"port", "host_port", "host", "unix", NULL};
	if (wrd_query_check(r, NULL) < 0)
		return;
	json_t *b = r->json;
	if (b == NULL) {
		wrd_reply_error(r, "invalid_argument", "port", "port: is required");
		return;
	}
	if (wrd_api_known_keys(r, b, keys) < 0)
		return;
	_cleanup_err_ wr_err err = NULL;
	int64_t port = 0, host_port = 0;
	const char *host = "127.0.0.1";
	bool unx = false;
	json_t *v;
	if ((v = json_object_get(b, "port")) == NULL) {
		wrd_reply_error(r, "invalid_argument", "port", "port: is required");
		return;
	}
	if (wrd_j_int(v, "port", 1, 65535, &port, &err) < 0 ||
	    ((v = json_object_get(b, "host_port")) &&
	     wrd_j_int(v, "host_port", 0, 65535, &host_port, &err) < 0) ||
	    ((v = json_object_get(b, "host")) &&
	     wrd_j_str(v, "host", 15, false, &host, &err) < 0) ||
	    ((v = json_object_get(b, "unix")) && wrd_j_bool(v, "unix", &unx, &err) < 0)) {
		wrd_reply_err(r, err);
		return;
	}
	struct wrd_port *p = calloc(1, sizeof(*p));
	if (p == NULL) {
		wrd_reply_error(r, "internal", NULL, "out of memory");
		return;
	}
	p->port = (uint16_t)port;
	p->host_port = (uint16_t)host_port;
	if (unx) {
		if (json_object_get(b, "host") || json_object_get(b, "host_port")) {
			free(p);
			wrd_reply_error(r, "invalid_argument", "unix",
					"unix: give either unix or host/host_port");
			return;
		}
		p->kind = PORT_UNIX;
	} else if (inet_pton(AF_INET, host, &p->host) != 1) {
		free(p);
		wrd_reply_error(r, "invalid_argument", "host",
				"host: '%s' is not an IPv4 address of this host", host);
		return;
	} else {
		uint32_t h = ntohl(p->host.s_addr);
		p->kind = (h >> 24) == 127 || h == 0 ? PORT_RELAY : PORT_DNAT;
	}
	struct wrd_sbx *sb = networked(r);
	if (sb == NULL) {
		free(p);
		return;
	}
	struct wrd_net *n = sb->net;
	pthread_mutex_lock(&n->lock);
	unsigned count = 0, same = 0;
	for (struct wrd_port *q = n->ports; q; q = q->next) {
		count++;
		same += q->port == p->port;
	}
	int rc = 0;
	/* a VM's guest port: QEMU's user-mode network listens on the
	 * sandbox's address for it (tier op port), once per guest port */
	bool fwd = sb->ops->port && same == 0 && sb->tsb;
	if (n->dead)
		rc = wr_err_set(&err, ESRCH, "sandbox %s is gone", r->id);
	else if (count >= MAX_PORTS)
		rc = wr_err_set(&err, EAGAIN, "at most %d published ports per sandbox", MAX_PORTS);
	else if (fwd && (rc = guest_port(sb, n, p->port, true, &err)) < 0)
		fwd = false;
	else if ((rc = publish(n, p, sb->rec.id, &err)) < 0 && fwd)
		guest_port(sb, n, p->port, false, NULL);
	if (rc == 0) {
		p->next = n->ports;
		n->ports = p;
	}
	pthread_mutex_unlock(&n->lock);
	if (rc < 0) {
		port_free(p);
		wrd_reply_err(r, err);
	} else {
		json_t *d = port_json(p);
		wrd_sbx_event(sb, "port_published", json_deep_copy(d));
		wrd_reply_json(r, 201, d);
	}
	wrd_api_done(sb, false);
}

void wrd_api_ports_list(struct wrd_req *r)
{
	if (wrd_query_check(r, NULL) < 0)
		return;
	struct wrd_sbx *sb = wrd_api_sandbox(r, false);
	if (sb == NULL)
		return;
	json_t *a = json_array();
	if (sb->net) {
		pthread_mutex_lock(&sb->net->lock);
		for (struct wrd_port *q = sb->net->ports; q; q = q->next)
			json_array_append_new(a, port_json(q));
		pthread_mutex_unlock(&sb->net->lock);
	}
	json_t *o = json_object();
	json_object_set_new(o, "ports", a);
	wrd_reply_json(r, 200, o);
	wrd_api_done(sb, false);
}

void wrd_api_ports_del(struct wrd_req *r)
{
	if (wrd_query_check(r, NULL) < 0)
		return;
	uint64_t port;
	if (wr_parse_u64(r->cid, 65535, &port) < 0 || port == 0) {
		wrd_reply_error(r, "invalid_argument", "port", "port: '%s' is not a port number",
				r->cid);
		return;
	}
	struct wrd_sbx *sb = networked(r);
	if (sb == NULL)
		return;
	struct wrd_port *gone = NULL;
	pthread_mutex_lock(&sb->net->lock);
	for (struct wrd_port **pp = &sb->net->ports; *pp;) {
		struct wrd_port *q = *pp;
		if (q->port == port) {
			*pp = q->next;
			q->next = gone;
			gone = q;
		} else {
			pp = &q->next;
		}
	}
	if (gone && sb->ops->port && sb->tsb)
		guest_port(sb, sb->net, (unsigned)port, false, NULL);
	pthread_mutex_unlock(&sb->net->lock);
	if (gone == NULL) {
		wrd_reply_error(r, "not_found", "port", "port %u of sandbox %s is not published",
				(unsigned)port, r->id);
	} else {
		while (gone) {
			struct wrd_port *q = gone;
			gone = q->next;
			port_free(q);
		}
		json_t *d = json_object();
		json_object_set_new(d, "port", json_integer((json_int_t)port));
		wrd_sbx_event(sb, "port_unpublished", d);
		wrd_reply_empty(r, 204);
	}
	wrd_api_done(sb, false);
}

void wrd_ports_remove_all(struct wrd_net *n)
{
	pthread_mutex_lock(&n->lock);
	n->dead = true;
	struct wrd_port *all = n->ports;
	n->ports = NULL;
	pthread_mutex_unlock(&n->lock);
	while (all) {
		struct wrd_port *q = all;
		all = q->next;
		port_free(q);
	}
}

void wrd_ports_stop_all(void)
{
	size_t n;
	struct wrd_sbx **v = wrd_table_snapshot(&n);
	for (size_t i = 0; v && i < n; i++) {
		if (v[i]->net) {
			pthread_mutex_lock(&v[i]->net->lock);
			struct wrd_port *all = v[i]->net->ports;
			v[i]->net->ports = NULL;
			pthread_mutex_unlock(&v[i]->net->lock);
			while (all) {
				struct wrd_port *q = all;
				all = q->next;
				port_free(q);
			}
		}
		wrd_mgr_put(v[i]);
	}
	free(v);
}
