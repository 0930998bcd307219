#include "isolate/netpool.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/compat.h"
#include "common/util.h"
#include "isolate/mount.h"
#include "isolate/rtnl.h"

#define TAKE_WAIT_S 10

struct wr_netpool {
	char bridge[IF_NAMESIZE];
	char prefix[8];
	struct in_addr net, gw;
	int plen;
	unsigned size, low_water, rate;
	int host_ns; /* our network namespace, to return to after a make */
	int bridge_idx;

	pthread_mutex_t lock;
	pthread_cond_t refill_cv; /* refill thread: fewer than low_water, or stop */
	pthread_cond_t ready_cv;  /* takers: an entry is ready */
	pthread_cond_t down_cv;	  /* teardown thread: queue non-empty, or stop */
	pthread_cond_t idle_cv;	  /* drainers: queue empty */
	struct wr_netns_lease *ready, *down, *adopted;
	unsigned n_ready, n_leased, n_down;
	bool stop, tearing; /* tearing: the teardown thread works on one */
	bool filling;	    /* the refill thread makes entries until size */
	unsigned waiters;   /* takers waiting for an entry */
	char *last_error;   /* the refill thread's last failure, for takers */
	bool range_full;    /* ... and it was that no address is free */
	uint8_t *used;	    /* address bitmap over the range, by host part */
	uint32_t n_hosts;
	uint32_t next_host, veth_seq;
	uint64_t made, destroyed, waited;
	pthread_t refill_th, down_th;
	bool threads;
};

/* ---- addresses ----------------------------------------------------------- */

int wr_netpool_parse_range(const char *s, struct in_addr *net, int *plen, wr_err *err)
{
	char buf[32];
	const char *slash = s ? strchr(s, '/') : NULL;
	if (s == NULL || slash == NULL || (size_t)(slash - s) >= sizeof(buf))
		return wr_err_field(
		    err, "range", "range: '%s' is not an IPv4 CIDR like 10.200.0.0/16", s ? s : "");
	memcpy(buf, s, (size_t)(slash - s));
	buf[slash - s] = 0;
	uint64_t n;
	if (inet_pton(AF_INET, buf, net) != 1 || wr_parse_u64(slash + 1, 32, &n) < 0)
		return wr_err_field(err, "range",
				    "range: '%s' is not an IPv4 CIDR like 10.200.0.0/16", s);
	if (n < 8 || n > 28)
		return wr_err_field(err, "range", "range: prefix /%d must be between /8 and /28",
				    (int)n);
	uint32_t mask = htonl(0xffffffffu << (32 - n));
	if (net->s_addr & ~mask)
		return wr_err_field(err, "range", "range: '%s' has host bits set", s);
	*plen = (int)n;
	return 0;
}

static struct in_addr host_addr(const struct wr_netpool *p, uint32_t host)
{
	return (struct in_addr){.s_addr = htonl(ntohl(p->net.s_addr) + host)};
}

static uint32_t host_of(const struct wr_netpool *p, struct in_addr a)
{
	return ntohl(a.s_addr) - ntohl(p->net.s_addr);
}

static bool in_range(const struct wr_netpool *p, struct in_addr a)
{
	uint32_t h = ntohl(a.s_addr) - ntohl(p->net.s_addr);
	return ntohl(a.s_addr) >= ntohl(p->net.s_addr) && h < p->n_hosts;
}

/* Under lock. Hosts 0 (network), 1 (bridge) and the last (broadcast) are
 * never handed out. Returns 0 when the range is full. */
static uint32_t addr_alloc(struct wr_netpool *p)
{
	for (uint32_t i = 0; i < p->n_hosts; i++) {
		uint32_t h = p->next_host + i;
		if (h >= p->n_hosts)
			h -= p->n_hosts;
		if (h < 2 || h == p->n_hosts - 1 || (p->used[h / 8] & (1u << (h % 8))))
			continue;
		p->used[h / 8] |= (uint8_t)(1u << (h % 8));
		p->next_host = h + 1;
		return h;
	}
	return 0;
}

static void addr_free(struct wr_netpool *p, struct in_addr a)
{
	if (!in_range(p, a))
		return;
	uint32_t h = host_of(p, a);
	p->used[h / 8] &= (uint8_t) ~(1u << (h % 8));
}

/* ---- making an entry (refill thread) ------------------------------------- */

static int sysctl_set(const char *path, const char *value, bool optional, wr_err *err)
{
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0) {
		if (optional && errno == ENOENT)
			return 0;
		return wr_err_sys(err, "open %s", path);
	}
	size_t n = strlen(value);
	if (write(fd, value, n) != (ssize_t)n)
		return wr_err_sys(err, "write %s", path);
	return 0;
}

/* The namespace side, run with the thread inside the new namespace. */
static int wire_inside(struct wr_netpool *p, struct wr_netns_lease *l, wr_err *err)
{
	/* Before eth0 exists: "default" is what new devices start with. */
	if (sysctl_set("/proc/sys/net/ipv4/ip_forward", "0", false, err) < 0 ||
	    sysctl_set("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1", true, err) < 0 ||
	    sysctl_set("/proc/sys/net/ipv4/ip_unprivileged_port_start", "0", false, err) < 0 ||
	    sysctl_set("/proc/sys/net/ipv4/ping_group_range", "0 2147483647", false, err) < 0)
		return -1;
	struct wr_rtnl nl = {.fd = -1};
	int r = wr_rtnl_open(&nl, err);
	if (r == 0)
		r = wr_rtnl_link_set(&nl, 1, true, 0, err); /* lo is ifindex 1 */
	if (r == 0)
		r = wr_rtnl_veth_add(&nl, "eth0", l->veth, p->host_ns, err);
	int idx = r == 0 ? wr_rtnl_ifindex(&nl, "eth0", err) : -1;
	if (idx > 0)
		r = wr_rtnl_addr_add(&nl, idx, l->addr, p->plen, err);
	else
		r = -1;
	if (r == 0)
		r = wr_rtnl_link_set(&nl, idx, true, 0, err);
	if (r == 0)
		r = wr_rtnl_route_default(&nl, idx, p->gw, err);
	wr_rtnl_close(&nl);
	if (r < 0)
		return r;
	/* sysfs shows the devices of the mounting task's namespace: this one.
	 * A sandbox's PID 1 attaches it in place of its own (it could not
	 * mount one for a namespace its user namespace does not own). */
	struct wr_cerr ce = {0};
	l->sysfs_fd = wr_mount_new(
	    "sysfs", "sysfs", NULL,
	    MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, &ce);
	if (l->sysfs_fd < 0)
		return wr_err_set(err, ce.errnum, "%s", ce.msg);
	return 0;
}

static void lease_close(struct wr_netns_lease *l)
{
	if (l->netns_fd >= 0)
		close(l->netns_fd);
	if (l->sysfs_fd >= 0)
		close(l->sysfs_fd);
	l->netns_fd = l->sysfs_fd = -1;
}

static int make_entry(struct wr_netpool *p, struct wr_rtnl *hnl, struct wr_netns_lease **out,
		      wr_err *err)
{
	struct wr_netns_lease *l = calloc(1, sizeof(*l));
	if (l == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	l->netns_fd = l->sysfs_fd = -1;
	pthread_mutex_lock(&p->lock);
	uint32_t h = addr_alloc(p);
	uint32_t seq = p->veth_seq++;
	pthread_mutex_unlock(&p->lock);
	if (h == 0) {
		free(l);
		char a[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, &p->net, a, sizeof(a));
		return wr_err_set(err, EAGAIN, "network range %s/%d is full", a, p->plen);
	}
	l->addr = host_addr(p, h);
	snprintf(l->veth, sizeof(l->veth), "%s%08x", p->prefix, seq);

	int r;
	if (unshare(CLONE_NEWNET) < 0) {
		r = wr_err_sys(err, "new network namespace");
		goto fail;
	}
	l->netns_fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (l->netns_fd < 0)
		r = wr_err_sys(err, "open network namespace");
	else
		r = wire_inside(p, l, err);
	/* Invariant: this thread goes back to the host's namespace whatever
	 * happened; it cannot work (nor report) from anywhere else. */
	if (setns(p->host_ns, CLONE_NEWNET) < 0)
		abort();
	if (r < 0)
		goto fail;
	char path[96];
	snprintf(path, sizeof(path), "/proc/sys/net/ipv6/conf/%s/disable_ipv6", l->veth);
	int idx = wr_rtnl_ifindex(hnl, l->veth, err);
	if (idx < 0 || (r = sysctl_set(path, "1", true, err)) < 0 ||
	    (r = wr_rtnl_link_set(hnl, idx, false, p->bridge_idx, err)) < 0 ||
	    (r = wr_rtnl_brport_isolate(hnl, idx, err)) < 0 ||
	    (r = wr_rtnl_link_set(hnl, idx, true, 0, err)) < 0) {
		r = -1;
		goto fail;
	}
	*out = l;
	return 0;
fail:
	wr_rtnl_link_del(hnl, l->veth, NULL);
	lease_close(l);
	pthread_mutex_lock(&p->lock);
	addr_free(p, l->addr);
	pthread_mutex_unlock(&p->lock);
	free(l);
	return wr_err_wrap(err, "network pool");
}

static void *refill_main(void *arg)
{
	struct wr_netpool *p = arg;
	struct wr_rtnl nl = {.fd = -1};
	_cleanup_err_ wr_err oerr = NULL;
	if (wr_rtnl_open(&nl, &oerr) < 0) {
		pthread_mutex_lock(&p->lock);
		p->last_error = strdup(oerr->msg);
		pthread_cond_broadcast(&p->ready_cv);
		pthread_mutex_unlock(&p->lock);
		return NULL;
	}
	unsigned backoff_ms = 0;
	pthread_mutex_lock(&p->lock);
	while (!p->stop) {
		if (p->n_ready >= p->size && p->n_ready >= p->waiters)
			p->filling = false;
		if (p->n_ready < p->low_water || p->n_ready < p->waiters)
			p->filling = true;
		if (!p->filling) {
			pthread_cond_wait(&p->refill_cv, &p->lock);
			continue;
		}
		pthread_mutex_unlock(&p->lock);
		if (backoff_ms) {
			struct timespec ts = {backoff_ms / 1000,
					      (long)(backoff_ms % 1000) * 1000000};
			nanosleep(&ts, NULL);
		}
		struct wr_netns_lease *l = NULL;
		_cleanup_err_ wr_err err = NULL;
		int r = make_entry(p, &nl, &l, &err);
		pthread_mutex_lock(&p->lock);
		if (r < 0) {
			/* kept for takers to report; retried with backoff */
			free(p->last_error);
			p->last_error = strdup(err && err->msg ? err->msg : "network pool failed");
			p->range_full = r == -EAGAIN;
			backoff_ms =
			    backoff_ms ? (backoff_ms * 2 > 1000 ? 1000 : backoff_ms * 2) : 10;
			pthread_cond_broadcast(&p->ready_cv);
			continue;
		}
		backoff_ms = 0;
		free(p->last_error);
		p->last_error = NULL;
		p->range_full = false;
		l->next = p->ready;
		p->ready = l;
		p->n_ready++;
		p->made++;
		pthread_cond_signal(&p->ready_cv);
	}
	pthread_mutex_unlock(&p->lock);
	wr_rtnl_close(&nl);
	return NULL;
}

/* ---- teardown (teardown thread) ------------------------------------------ */

static void destroy_entry(struct wr_netpool *p, struct wr_rtnl *nl, struct wr_netns_lease *l)
{
	/* Deleting the host end deletes the pair; the namespace itself goes
	 * when its last fd (ours) and process are gone. The address is free
	 * for reuse only now that no link carries it. */
	if (nl->fd >= 0)
		wr_rtnl_link_del(nl, l->veth, NULL);
	lease_close(l);
	pthread_mutex_lock(&p->lock);
	addr_free(p, l->addr);
	p->range_full = false; /* takers wait for the refill again */
	p->destroyed++;
	pthread_mutex_unlock(&p->lock);
	free(l);
}

static void *down_main(void *arg)
{
	struct wr_netpool *p = arg;
	struct wr_rtnl nl = {.fd = -1};
	_cleanup_err_ wr_err oerr = NULL;
	wr_rtnl_open(&nl, &oerr);
	/* Token bucket: `rate` a second, bursts of up to rate / 10 + 1. */
	double burst = p->rate / 10.0 + 1, tokens = burst;
	uint64_t last = wr_now_ns();
	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (p->down == NULL && !p->stop)
			pthread_cond_wait(&p->down_cv, &p->lock);
		if (p->down == NULL)
			break; /* stopping, and nothing left to tear down */
		struct wr_netns_lease *l = p->down;
		p->down = l->next;
		p->tearing = true;
		bool limited = !p->stop;
		pthread_mutex_unlock(&p->lock);
		if (limited && p->rate > 0) {
			uint64_t now = wr_now_ns();
			tokens += (double)(now - last) / 1e9 * p->rate;
			last = now;
			if (tokens > burst)
				tokens = burst;
			if (tokens < 1) {
				double wait_s = (1 - tokens) / p->rate;
				struct timespec ts = {
				    (time_t)wait_s,
				    (long)((wait_s - (double)(time_t)wait_s) * 1e9)};
				nanosleep(&ts, NULL);
				tokens = 1;
				last = wr_now_ns();
			}
			tokens -= 1;
		}
		destroy_entry(p, &nl, l);
		pthread_mutex_lock(&p->lock);
		p->n_down--;
		p->tearing = false;
		if (p->down == NULL)
			pthread_cond_broadcast(&p->idle_cv);
	}
	pthread_cond_broadcast(&p->idle_cv);
	pthread_mutex_unlock(&p->lock);
	wr_rtnl_close(&nl);
	return NULL;
}

/* ---- the pool's interface ------------------------------------------------ */

struct sweep_ctx {
	struct wr_netpool *p;
	const struct wr_netns_lease *keep;
	size_t n;
	char (*gone)[IF_NAMESIZE];
	size_t n_gone, cap;
};

static void sweep_cb(const char *name, void *ctx)
{
	struct sweep_ctx *s = ctx;
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->keep[i].veth, name) == 0)
			return;
	if (s->n_gone == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 16;
		void *g = realloc(s->gone, cap * IF_NAMESIZE);
		if (g == NULL)
			return;
		s->gone = g;
		s->cap = cap;
	}
	snprintf(s->gone[s->n_gone++], IF_NAMESIZE, "%s", name);
}

static int bridge_up(struct wr_netpool *p, struct wr_rtnl *nl, wr_err *err)
{
	char kind[32];
	int r = wr_rtnl_link_kind(nl, p->bridge, kind, sizeof(kind), NULL);
	if (r == -ENODEV) {
		if (wr_rtnl_bridge_add(nl, p->bridge, err) < 0)
			return -1;
	} else if (r < 0) {
		return wr_err_set(err, -r, "bridge %s: %s", p->bridge, strerror(-r));
	} else if (strcmp(kind, "bridge") != 0) {
		return wr_err_field(err, "bridge", "bridge: %s exists and is not a bridge (%s)",
				    p->bridge, kind[0] ? kind : "a device");
	}
	/* A fixed MAC: a bridge without one takes its lowest port's, which
	 * changes as ports come and go, and sandboxes that outlive a restart
	 * would keep sending to a gateway MAC nobody has until their ARP entry
	 * expires. Locally administered, derived from the name and range. */
	uint32_t h = 2166136261u;
	for (const char *c = p->bridge; *c; c++)
		h = (h ^ (unsigned char)*c) * 16777619u;
	h = (h ^ p->net.s_addr) * 16777619u;
	uint8_t mac[6] = {
	    0x02, 0x57, (uint8_t)(h >> 24), (uint8_t)(h >> 16), (uint8_t)(h >> 8), (uint8_t)h};
	char path[96];
	snprintf(path, sizeof(path), "/proc/sys/net/ipv6/conf/%s/disable_ipv6", p->bridge);
	if ((p->bridge_idx = wr_rtnl_ifindex(nl, p->bridge, err)) < 0 ||
	    wr_rtnl_link_set_mac(nl, p->bridge_idx, mac, err) < 0 ||
	    sysctl_set(path, "1", true, err) < 0 ||
	    wr_rtnl_addr_add(nl, p->bridge_idx, p->gw, p->plen, err) < 0 ||
	    wr_rtnl_link_set(nl, p->bridge_idx, true, 0, err) < 0)
		return wr_err_wrap(err, "bridge %s", p->bridge);
	return 0;
}

int wr_netpool_start(const struct wr_netpool_config *cfg, const struct wr_netns_lease *adopted,
		     size_t n, struct wr_netpool **out, wr_err *err)
{
	const char *bridge = cfg->bridge ? cfg->bridge : "warren0";
	const char *prefix = cfg->veth_prefix ? cfg->veth_prefix : "wrv";
	if (*bridge == 0 || strlen(bridge) >= IF_NAMESIZE || strchr(bridge, '/'))
		return wr_err_field(err, "bridge", "bridge: '%s' is not a valid interface name",
				    bridge);
	if (*prefix == 0 || strlen(prefix) > 6 || strchr(prefix, '/'))
		return wr_err_field(err, "veth_prefix", "veth_prefix: 1 to 6 characters");
	struct wr_netpool *p = calloc(1, sizeof(*p));
	if (p == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	snprintf(p->bridge, sizeof(p->bridge), "%s", bridge);
	snprintf(p->prefix, sizeof(p->prefix), "%s", prefix);
	p->host_ns = -1;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->refill_cv, NULL);
	pthread_cond_init(&p->ready_cv, NULL);
	pthread_cond_init(&p->down_cv, NULL);
	pthread_cond_init(&p->idle_cv, NULL);
	struct wr_rtnl nl = {.fd = -1};
	struct sweep_ctx sw = {.p = p, .keep = adopted, .n = n};
	if (wr_netpool_parse_range(cfg->range ? cfg->range : "10.200.0.0/16", &p->net, &p->plen,
				   err) < 0)
		goto fail;
	p->gw = host_addr(p, 1);
	p->n_hosts = 1u << (32 - p->plen);
	p->size = cfg->size;
	p->low_water = cfg->low_water ? cfg->low_water : (p->size + 1) / 2;
	if (p->low_water > p->size)
		p->low_water = p->size;
	p->rate = cfg->teardown_per_sec ? cfg->teardown_per_sec : 200;
	p->next_host = 2;
	uint32_t rnd = 0;
	if (getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd))
		rnd = (uint32_t)wr_now_ns();
	p->veth_seq = rnd;
	p->used = calloc(p->n_hosts / 8 + 1, 1);
	if (p->used == NULL) {
		wr_err_set(err, ENOMEM, "out of memory");
		goto fail;
	}
	p->host_ns = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (p->host_ns < 0) {
		wr_err_sys(err, "open our network namespace");
		goto fail;
	}
	if (wr_rtnl_open(&nl, err) < 0 || bridge_up(p, &nl, err) < 0)
		goto fail;
	for (size_t i = 0; i < n; i++) {
		if (!in_range(p, adopted[i].addr))
			continue;
		struct wr_netns_lease *l = calloc(1, sizeof(*l));
		if (l == NULL) {
			wr_err_set(err, ENOMEM, "out of memory");
			goto fail;
		}
		*l = adopted[i];
		l->netns_fd = l->sysfs_fd = -1;
		uint32_t h = host_of(p, l->addr);
		p->used[h / 8] |= (uint8_t)(1u << (h % 8));
		l->next = p->adopted;
		p->adopted = l;
		p->n_leased++;
	}
	/* Ports of the bridge that no adopted sandbox owns are a crashed
	 * run's: their namespaces died with it (they were held by fds), or
	 * their sandbox is gone. */
	if (wr_rtnl_each_port(&nl, p->bridge_idx, sweep_cb, &sw, err) < 0)
		goto fail;
	for (size_t i = 0; i < sw.n_gone; i++)
		wr_rtnl_link_del(&nl, sw.gone[i], NULL);
	free(sw.gone);
	sw.gone = NULL;
	wr_rtnl_close(&nl);
	if (pthread_create(&p->refill_th, NULL, refill_main, p) != 0) {
		wr_err_set(err, EAGAIN, "network pool: thread");
		goto fail;
	}
	if (pthread_create(&p->down_th, NULL, down_main, p) != 0) {
		pthread_mutex_lock(&p->lock);
		p->stop = true;
		pthread_cond_broadcast(&p->refill_cv);
		pthread_mutex_unlock(&p->lock);
		pthread_join(p->refill_th, NULL);
		wr_err_set(err, EAGAIN, "network pool: thread");
		goto fail;
	}
	p->threads = true;
	*out = p;
	return 0;
fail:
	free(sw.gone);
	wr_rtnl_close(&nl);
	wr_netpool_stop(&p, false);
	return wr_err_wrap(err, "network");
}

void wr_netpool_stop(struct wr_netpool **pp, bool remove_bridge)
{
	struct wr_netpool *p = *pp;
	if (p == NULL)
		return;
	*pp = NULL;
	if (p->threads) {
		pthread_mutex_lock(&p->lock);
		p->stop = true;
		pthread_cond_broadcast(&p->refill_cv);
		pthread_mutex_unlock(&p->lock);
		pthread_join(p->refill_th, NULL);
		/* the ready ones go down with the returned ones, unlimited */
		pthread_mutex_lock(&p->lock);
		while (p->ready) {
			struct wr_netns_lease *l = p->ready;
			p->ready = l->next;
			p->n_ready--;
			l->next = p->down;
			p->down = l;
			p->n_down++;
		}
		pthread_cond_broadcast(&p->down_cv);
		pthread_mutex_unlock(&p->lock);
		pthread_join(p->down_th, NULL);
	}
	if (remove_bridge && p->n_leased == 0 && p->bridge_idx > 0) {
		struct wr_rtnl nl = {.fd = -1};
		if (wr_rtnl_open(&nl, NULL) == 0)
			wr_rtnl_link_del(&nl, p->bridge, NULL);
		wr_rtnl_close(&nl);
	}
	while (p->adopted) {
		struct wr_netns_lease *l = p->adopted;
		p->adopted = l->next;
		free(l);
	}
	if (p->host_ns >= 0)
		close(p->host_ns);
	free(p->used);
	free(p->last_error);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->refill_cv);
	pthread_cond_destroy(&p->ready_cv);
	pthread_cond_destroy(&p->down_cv);
	pthread_cond_destroy(&p->idle_cv);
	free(p);
}

int wr_netpool_take(struct wr_netpool *p, struct wr_netns_lease **out, wr_err *err)
{
	struct timespec deadline;
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += TAKE_WAIT_S;
	pthread_mutex_lock(&p->lock);
	if (p->ready == NULL) {
		p->waited++;
		p->waiters++;
		pthread_cond_signal(&p->refill_cv);
		/* a full range frees up only as sandboxes go: no point waiting */
		while (p->ready == NULL && !p->stop && !p->range_full) {
			if (pthread_cond_timedwait(&p->ready_cv, &p->lock, &deadline) == ETIMEDOUT)
				break;
		}
		p->waiters--;
	}
	struct wr_netns_lease *l = p->ready;
	if (l == NULL) {
		int r = wr_err_set(err, EAGAIN, "no network namespace ready after %d s%s%s",
				   TAKE_WAIT_S, p->last_error ? ": " : "",
				   p->last_error ? p->last_error : "");
		pthread_mutex_unlock(&p->lock);
		return r;
	}
	p->ready = l->next;
	l->next = NULL;
	p->n_ready--;
	p->n_leased++;
	if (p->n_ready < p->low_water)
		pthread_cond_signal(&p->refill_cv);
	pthread_mutex_unlock(&p->lock);
	*out = l;
	return 0;
}

void wr_netpool_release(struct wr_netpool *p, struct wr_netns_lease *l)
{
	if (l == NULL)
		return;
	pthread_mutex_lock(&p->lock);
	l->next = p->down;
	p->down = l;
	p->n_down++;
	p->n_leased--;
	pthread_cond_signal(&p->down_cv);
	pthread_mutex_unlock(&p->lock);
}

struct wr_netns_lease *wr_netpool_adopted(struct wr_netpool *p, struct in_addr addr)
{
	pthread_mutex_lock(&p->lock);
	struct wr_netns_lease **pp = &p->adopted;
	while (*pp && (*pp)->addr.s_addr != addr.s_addr)
		pp = &(*pp)->next;
	struct wr_netns_lease *l = *pp;
	if (l) {
		*pp = l->next;
		l->next = NULL;
	}
	pthread_mutex_unlock(&p->lock);
	return l;
}

void wr_netpool_drain(struct wr_netpool *p)
{
	pthread_mutex_lock(&p->lock);
	while (p->down != NULL || p->tearing)
		pthread_cond_wait(&p->idle_cv, &p->lock);
	pthread_mutex_unlock(&p->lock);
}

void wr_netpool_stats(struct wr_netpool *p, struct wr_netpool_stats *st)
{
	pthread_mutex_lock(&p->lock);
	*st = (struct wr_netpool_stats){.ready = p->n_ready,
					.leased = p->n_leased,
					.tearing_down = p->n_down,
					.made = p->made,
					.destroyed = p->destroyed,
					.waited = p->waited};
	pthread_mutex_unlock(&p->lock);
}

struct in_addr wr_netpool_gateway(const struct wr_netpool *p)
{
	return p->gw;
}

int wr_netpool_prefix(const struct wr_netpool *p)
{
	return p->plen;
}

struct in_addr wr_netpool_network(const struct wr_netpool *p)
{
	return p->net;
}

const char *wr_netpool_bridge(const struct wr_netpool *p)
{
	return p->bridge;
}
