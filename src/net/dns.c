/* The DNS forwarder (dns.h): sockets, threads, the per-sandbox counters and
 * rate limit, and the answer of one query.
 *
 * Ordering invariant (the reason the forwarder exists): allow_ip is called
 * for every address of an answer, and has returned, BEFORE the reply is
 * sent; when any call fails the reply is SERVFAIL, never the addresses. */
#include "net/dns.h"
#include "net/dns_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"

#define SBX_ID_MAX 80
#define SUMMARY_BATCH 256

/* ---- per-sandbox counters and the refusal rate limit --------------------- */
struct sbs {
	char id[SBX_ID_MAX];
	struct wr_dns_stats st;
	unsigned inflight;
	unsigned tcp; /* open TCP client connections */
	double tokens;
	int64_t refill_ms;
	uint64_t pending; /* suppressed since the last event */
	struct sbs *next;
};

struct job {
	struct wr_dnsm_query q;
	struct sockaddr_storage src;
	socklen_t srclen;
	int fd; /* the UDP socket it came in on */
	char sbx[SBX_ID_MAX];
	struct job *next;
};

struct wr_dns {
	struct wr_dns_config cfg;
	struct wr_dns_hooks h;
	int udp[WR_DNS_MAX_LISTEN], tcp[WR_DNS_MAX_LISTEN];
	int epfd, stopfd;
	pthread_t ev_thread;
	bool ev_started;
	pthread_t *workers;
	unsigned n_workers;

	pthread_mutex_t lock; /* the table, the queue, tcp_fds, all counters */
	pthread_cond_t cv;    /* queue non-empty / stopping / tcp_live drops */
	struct sbs **tab;
	size_t tab_size, n_sbs;
	struct sbs overflow; /* shared by sandboxes beyond max_sandboxes */
	struct wr_dns_stats total;
	struct job *qhead, *qtail;
	unsigned qlen;
	bool stopping;
	int *tcp_fds; /* live TCP client sockets, -1 = free slot */
	unsigned tcp_live;
};

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static size_t hash(const char *s)
{
	size_t h = 14695981039346656037ULL;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h;
}

/* Under lock. Never NULL: the overflow entry when the table is full. */
static struct sbs *sbs_get(struct wr_dns *d, const char *id)
{
	size_t b = hash(id) % d->tab_size;
	for (struct sbs *s = d->tab[b]; s; s = s->next)
		if (strcmp(s->id, id) == 0)
			return s;
	struct sbs *s = d->n_sbs < d->cfg.max_sandboxes ? calloc(1, sizeof(*s)) : NULL;
	if (s == NULL)
		return &d->overflow;
	snprintf(s->id, sizeof(s->id), "%s", id);
	s->tokens = d->cfg.event_burst;
	s->refill_ms = mono_ms();
	s->next = d->tab[b];
	d->tab[b] = s;
	d->n_sbs++;
	return s;
}

static void refill(struct wr_dns *d, struct sbs *s, int64_t now)
{
	double add = (double)(now - s->refill_ms) * d->cfg.event_per_min / 60000.0;
	s->refill_ms = now;
	s->tokens += add;
	if (s->tokens > d->cfg.event_burst)
		s->tokens = d->cfg.event_burst;
}

#define BUMP(d, s, field)                                                                          \
	do {                                                                                       \
		(s)->st.field++;                                                                   \
		(d)->total.field++;                                                                \
	} while (0)

/* Count a refusal and report it unless the sandbox is over its rate. */
static void refuse(struct wr_dns *d, const char *sbx, const struct wr_dnsm_query *q,
		   const char *reason)
{
	struct wr_dns_refusal ev = {.sandbox_id = sbx,
				    .name = q->shown,
				    .qtype = q->qtype,
				    .time_ms = now_ms(),
				    .layer = "dns",
				    .reason = reason};
	bool report = false;
	pthread_mutex_lock(&d->lock);
	struct sbs *s = sbs_get(d, sbx);
	BUMP(d, s, refused);
	refill(d, s, mono_ms());
	if (s->tokens >= 1.0) {
		s->tokens -= 1.0;
		report = true;
		ev.suppressed = s->pending;
		s->pending = 0;
		BUMP(d, s, events);
	} else {
		s->pending++;
		BUMP(d, s, suppressed);
	}
	ev.total = s->st.refused;
	pthread_mutex_unlock(&d->lock);
	if (report && d->h.refused != NULL)
		d->h.refused(d->h.ctx, &ev);
}

/* Event thread, once a second: a summary for every sandbox whose suppressed
 * refusals can be reported now (or all of them when stopping/forgetting). */
static size_t flush_summaries(struct wr_dns *d, const char *only, bool force)
{
	struct wr_dns_refusal evs[SUMMARY_BATCH];
	char ids[SUMMARY_BATCH][SBX_ID_MAX];
	size_t n = 0;
	int64_t now = mono_ms(), wall = now_ms();
	pthread_mutex_lock(&d->lock);
	for (size_t b = 0; b < d->tab_size && n < SUMMARY_BATCH; b++)
		for (struct sbs *s = d->tab[b]; s && n < SUMMARY_BATCH; s = s->next) {
			if (s->pending == 0 || (only != NULL && strcmp(s->id, only) != 0))
				continue;
			refill(d, s, now);
			if (s->tokens < 1.0 && !force)
				continue;
			if (s->tokens >= 1.0)
				s->tokens -= 1.0;
			snprintf(ids[n], SBX_ID_MAX, "%s", s->id);
			evs[n] = (struct wr_dns_refusal){.sandbox_id = ids[n],
							 .time_ms = wall,
							 .layer = "dns",
							 .reason = "name",
							 .suppressed = s->pending,
							 .total = s->st.refused};
			s->pending = 0;
			BUMP(d, s, events);
			n++;
		}
	pthread_mutex_unlock(&d->lock);
	for (size_t i = 0; i < n && d->h.refused != NULL; i++)
		d->h.refused(d->h.ctx, &evs[i]);
	return n;
}

void wr_dns_sandbox_stats(struct wr_dns *d, const char *sandbox_id, struct wr_dns_stats *out)
{
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&d->lock);
	if (sandbox_id == NULL)
		*out = d->total;
	else
		for (struct sbs *s = d->tab[hash(sandbox_id) % d->tab_size]; s; s = s->next)
			if (strcmp(s->id, sandbox_id) == 0)
				*out = s->st;
	pthread_mutex_unlock(&d->lock);
}

void wr_dns_forget(struct wr_dns *d, const char *sandbox_id)
{
	(void)flush_summaries(d, sandbox_id, true);
	pthread_mutex_lock(&d->lock);
	struct sbs **pp = &d->tab[hash(sandbox_id) % d->tab_size];
	for (; *pp; pp = &(*pp)->next)
		if (strcmp((*pp)->id, sandbox_id) == 0) {
			struct sbs *s = *pp;
			if (s->inflight == 0) { /* else its queries still count on it */
				*pp = s->next;
				free(s);
				d->n_sbs--;
			}
			break;
		}
	pthread_mutex_unlock(&d->lock);
}

/* Take an in-flight slot of the sandbox (false: over its bound). */
static bool inflight_take(struct wr_dns *d, const char *sbx, bool queued)
{
	pthread_mutex_lock(&d->lock);
	struct sbs *s = sbs_get(d, sbx);
	bool ok = s->inflight < d->cfg.max_inflight && (!queued || d->qlen < d->cfg.max_queue);
	if (ok)
		s->inflight++;
	else
		BUMP(d, s, overload);
	pthread_mutex_unlock(&d->lock);
	return ok;
}

static void inflight_drop(struct wr_dns *d, const char *sbx)
{
	pthread_mutex_lock(&d->lock);
	struct sbs *s = sbs_get(d, sbx);
	if (s->inflight > 0)
		s->inflight--;
	pthread_mutex_unlock(&d->lock);
}

static void count(struct wr_dns *d, const char *sbx, int what, uint64_t n)
{
	pthread_mutex_lock(&d->lock);
	struct sbs *s = sbs_get(d, sbx);
	switch (what) {
	case 0: BUMP(d, s, queries); break;
	case 1: BUMP(d, s, forwarded); break;
	case 2: BUMP(d, s, servfail); break;
	case 3:
		s->st.allowed_addrs += n;
		d->total.allowed_addrs += n;
		break;
	}
	pthread_mutex_unlock(&d->lock);
}

/* ---- talking to the upstreams ------------------------------------------- */
static int remaining(int64_t deadline)
{
	int64_t r = deadline - mono_ms();
	return r < 0 ? 0 : (int)r;
}

static socklen_t sa_len(const struct sockaddr_storage *s)
{
	return s->ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
}

/* One UDP exchange: a fresh socket (random source port) per query. */
static int upstream_udp(const struct sockaddr_storage *up, const uint8_t *wire, size_t len,
			uint16_t id, const struct wr_dnsm_query *q, const struct wr_dns_config *c,
			int64_t deadline, struct wr_dnsm_answer *a)
{
	_cleanup_close_ int fd =
	    socket(up->ss_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0 || connect(fd, (const struct sockaddr *)up, sa_len(up)) < 0 ||
	    send(fd, wire, len, 0) != (ssize_t)len)
		return -errno;
	uint8_t buf[4096];
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int t = remaining(deadline);
		if (t == 0 || poll(&p, 1, t) == 0)
			return -ETIMEDOUT;
		ssize_t n = recv(fd, buf, sizeof(buf), 0);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n < 0)
			return -errno; /* ECONNREFUSED: next upstream */
		if (wr_dnsm_parse_answer(buf, (size_t)n, id, q, c->ttl_min, c->ttl_max, a) == 0)
			return 0;
		/* not the answer (spoofed, stale, malformed): keep waiting */
	}
}

static int io_wait(int fd, short ev, int64_t deadline)
{
	struct pollfd p = {.fd = fd, .events = ev};
	int t = remaining(deadline);
	if (t == 0)
		return -ETIMEDOUT;
	int r = poll(&p, 1, t);
	return r < 0 ? -errno : r == 0 ? -ETIMEDOUT : 0;
}

static int read_full(int fd, uint8_t *b, size_t n, int64_t deadline)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, b + got, n - got);
		if (r > 0) {
			got += (size_t)r;
			continue;
		}
		if (r == 0)
			return -ECONNRESET;
		if (errno != EAGAIN && errno != EINTR)
			return -errno;
		int w = io_wait(fd, POLLIN, deadline);
		if (w < 0)
			return w;
	}
	return 0;
}

static int write_full(int fd, const uint8_t *b, size_t n, int64_t deadline)
{
	size_t put = 0;
	while (put < n) {
		ssize_t r = send(fd, b + put, n - put, MSG_NOSIGNAL);
		if (r > 0) {
			put += (size_t)r;
			continue;
		}
		if (r < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		int w = io_wait(fd, POLLOUT, deadline);
		if (w < 0)
			return w;
	}
	return 0;
}

static int upstream_tcp(const struct sockaddr_storage *up, const uint8_t *wire, size_t len,
			uint16_t id, const struct wr_dnsm_query *q, const struct wr_dns_config *c,
			int64_t deadline, struct wr_dnsm_answer *a)
{
	_cleanup_close_ int fd =
	    socket(up->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (const struct sockaddr *)up, sa_len(up)) < 0) {
		if (errno != EINPROGRESS)
			return -errno;
		int r = io_wait(fd, POLLOUT, deadline), e = 0;
		socklen_t el = sizeof(e);
		if (r < 0)
			return r;
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0 || e != 0)
			return -(e ? e : errno);
	}
	uint8_t hdr[2] = {(uint8_t)(len >> 8), (uint8_t)len};
	int r = write_full(fd, hdr, 2, deadline);
	if (r == 0)
		r = write_full(fd, wire, len, deadline);
	if (r == 0)
		r = read_full(fd, hdr, 2, deadline);
	if (r < 0)
		return r;
	size_t n = (size_t)hdr[0] << 8 | hdr[1];
	_cleanup_free_ uint8_t *buf = malloc(n ? n : 1);
	if (buf == NULL)
		return -ENOMEM;
	if ((r = read_full(fd, buf, n, deadline)) < 0)
		return r;
	return wr_dnsm_parse_answer(buf, n, id, q, c->ttl_min, c->ttl_max, a) == 0 ? 0 : -EBADMSG;
}

/* Ask the upstreams in order; UDP first, TCP for a truncated answer. */
static int ask_upstreams(struct wr_dns *d, const struct wr_dnsm_query *q, struct wr_dnsm_answer *a)
{
	int r = -EHOSTUNREACH;
	for (size_t i = 0; i < d->cfg.n_upstreams; i++) {
		uint16_t id;
		if (getrandom(&id, sizeof(id), 0) != sizeof(id))
			return -errno;
		_cleanup_free_ uint8_t *wire = NULL;
		size_t len;
		if ((r = wr_dnsm_upstream_query(q, id, &wire, &len)) < 0)
			return r;
		int64_t deadline = mono_ms() + d->cfg.timeout_ms;
		r = upstream_udp(&d->cfg.upstream[i], wire, len, id, q, &d->cfg, deadline, a);
		if (r == 0 && a->tc) {
			wr_dnsm_answer_free(a);
			r = upstream_tcp(&d->cfg.upstream[i], wire, len, id, q, &d->cfg, deadline,
					 a);
		}
		if (r == 0 && a->rcode != LDNS_RCODE_NOERROR && a->rcode != LDNS_RCODE_NXDOMAIN) {
			wr_dnsm_answer_free(a); /* SERVFAIL, REFUSED...: try the next one */
			r = -EIO;
		}
		if (r == 0)
			return 0;
	}
	return r;
}

/* ---- one query ------------------------------------------------------------ */
enum verdict { V_FORWARD, V_NXDOMAIN, V_NODATA, V_NODATA_EVENT };

static enum verdict decide(struct wr_dns *d, const char *sbx, const struct wr_dnsm_query *q)
{
	uint32_t tags[WR_DNS_MAX_TAGS];
	struct wr_dns_names *names = d->h.names ? d->h.names(d->h.ctx, sbx) : NULL;
	size_t nt = q->matchable && q->name[0] ? wr_dns_names_match(names, q->name, tags) : 0;
	wr_dns_names_unref(names);
	if (nt == 0)
		return V_NXDOMAIN;
	if (q->qclass != LDNS_RR_CLASS_IN)
		return V_NODATA_EVENT;
	switch (q->qtype) {
	case LDNS_RR_TYPE_A:
	case LDNS_RR_TYPE_AAAA:
	case LDNS_RR_TYPE_CNAME: return V_FORWARD;
	case 64: /* SVCB */
	case 65: /* HTTPS */ return V_NODATA;
	default: return V_NODATA_EVENT;
	}
}

/* The answer of an allowed question: upstream, allow_ip, reply. */
static int forward(struct wr_dns *d, const char *sbx, const struct wr_dnsm_query *q, bool udp,
		   uint8_t **wire, size_t *len)
{
	struct wr_dnsm_answer a;
	count(d, sbx, 1, 0);
	if (ask_upstreams(d, q, &a) < 0)
		goto servfail;
	if (a.n_addrs > 0) {
		/* The policy may have changed while the upstream answered: the
		 * addresses are allowed under the tags that match now. */
		uint32_t tags[WR_DNS_MAX_TAGS];
		struct wr_dns_names *names = d->h.names ? d->h.names(d->h.ctx, sbx) : NULL;
		size_t nt = wr_dns_names_match(names, q->name, tags);
		wr_dns_names_unref(names);
		if (nt == 0 || d->h.allow_ip == NULL) {
			wr_dnsm_answer_free(&a);
			goto servfail;
		}
		for (size_t i = 0; i < a.n_addrs; i++)
			for (size_t t = 0; t < nt; t++)
				if (d->h.allow_ip(d->h.ctx, sbx, a.addrs[i].family, a.addrs[i].addr,
						  a.addrs[i].ttl, tags[t]) < 0) {
					wr_dnsm_answer_free(&a);
					goto servfail;
				}
		count(d, sbx, 3, a.n_addrs);
	}
	int r = wr_dnsm_reply(q, a.rcode, &a, udp, wire, len);
	wr_dnsm_answer_free(&a);
	return r;
servfail:
	count(d, sbx, 2, 0);
	return wr_dnsm_reply(q, LDNS_RCODE_SERVFAIL, NULL, udp, wire, len);
}

/* Everything but the forward: the reply now, or 1 = forward it. */
static int answer_now(struct wr_dns *d, const char *sbx, const struct wr_dnsm_query *q, bool udp,
		      uint8_t **wire, size_t *len)
{
	count(d, sbx, 0, 0);
	switch (decide(d, sbx, q)) {
	case V_FORWARD: return 1;
	case V_NXDOMAIN:
		refuse(d, sbx, q, "name");
		return wr_dnsm_reply(q, LDNS_RCODE_NXDOMAIN, NULL, udp, wire, len);
	case V_NODATA_EVENT: refuse(d, sbx, q, "qtype"); /* fall through */
	case V_NODATA: break;
	}
	return wr_dnsm_reply(q, LDNS_RCODE_NOERROR, NULL, udp, wire, len);
}

/* ---- sockets and threads -------------------------------------------------- */
static void send_reply(int fd, const struct sockaddr_storage *to, socklen_t tolen,
		       const uint8_t *wire, size_t len)
{
	/* A full socket buffer drops the reply, as a lost datagram would. */
	(void)sendto(fd, wire, len, MSG_DONTWAIT | MSG_NOSIGNAL, (const struct sockaddr *)to,
		     tolen);
}

/* Parse a datagram or TCP message; the sandbox's id in sbx. Returns 0 with
 * *wire set (reply now), 1 (forward q), or -1 (drop). */
static int first_pass(struct wr_dns *d, const struct sockaddr *src, const uint8_t *buf, size_t n,
		      bool udp, struct wr_dnsm_query *q, char sbx[SBX_ID_MAX], uint8_t **wire,
		      size_t *len)
{
	int r = wr_dnsm_parse_query(buf, n, q);
	if (r == -EINVAL)
		return -1;
	if (r == -EBADMSG) {
		if ((*wire = malloc(12)) == NULL)
			return -1;
		wr_dnsm_formerr(buf, *wire);
		*len = 12;
		return 0;
	}
	if (d->h.who == NULL || d->h.who(d->h.ctx, src, sbx, SBX_ID_MAX) < 0) {
		sbx[0] = 0;
		return wr_dnsm_reply(q, LDNS_RCODE_REFUSED, NULL, udp, wire, len) < 0 ? -1 : 0;
	}
	sbx[SBX_ID_MAX - 1] = 0;
	r = answer_now(d, sbx, q, udp, wire, len);
	return r < 0 ? -1 : r;
}

static void on_udp(struct wr_dns *d, int fd)
{
	for (int burst = 0; burst < 64; burst++) {
		uint8_t buf[4096];
		struct job *j = calloc(1, sizeof(*j));
		if (j == NULL)
			return;
		j->srclen = sizeof(j->src);
		ssize_t n = recvfrom(fd, buf, sizeof(buf), MSG_DONTWAIT, (struct sockaddr *)&j->src,
				     &j->srclen);
		if (n < 0) {
			free(j);
			return;
		}
		uint8_t *wire = NULL;
		size_t len = 0;
		int r = first_pass(d, (struct sockaddr *)&j->src, buf, (size_t)n, true, &j->q,
				   j->sbx, &wire, &len);
		if (r == 1 && !inflight_take(d, j->sbx, true)) {
			if (wr_dnsm_reply(&j->q, LDNS_RCODE_SERVFAIL, NULL, true, &wire, &len) == 0)
				r = 0;
			else
				r = -1;
		}
		if (r == 1) {
			j->fd = fd;
			pthread_mutex_lock(&d->lock);
			if (d->qtail)
				d->qtail->next = j;
			else
				d->qhead = j;
			d->qtail = j;
			d->qlen++;
			pthread_cond_signal(&d->cv);
			pthread_mutex_unlock(&d->lock);
			continue;
		}
		if (r == 0)
			send_reply(fd, &j->src, j->srclen, wire, len);
		free(wire);
		wr_dnsm_query_free(&j->q);
		free(j);
	}
}

static void *worker_main(void *arg)
{
	struct wr_dns *d = arg;
	for (;;) {
		pthread_mutex_lock(&d->lock);
		while (d->qhead == NULL && !d->stopping)
			pthread_cond_wait(&d->cv, &d->lock);
		struct job *j = d->qhead;
		if (j == NULL) { /* stopping and nothing left */
			pthread_mutex_unlock(&d->lock);
			return NULL;
		}
		d->qhead = j->next;
		if (d->qhead == NULL)
			d->qtail = NULL;
		d->qlen--;
		bool stopping = d->stopping;
		pthread_mutex_unlock(&d->lock);
		uint8_t *wire = NULL;
		size_t len = 0;
		/* Stopping: what is still queued is dropped (the client retries
		 * against the next daemon) rather than each waiting on upstreams. */
		if (!stopping && forward(d, j->sbx, &j->q, true, &wire, &len) == 0)
			send_reply(j->fd, &j->src, j->srclen, wire, len);
		inflight_drop(d, j->sbx);
		free(wire);
		wr_dnsm_query_free(&j->q);
		free(j);
	}
}

struct tcp_arg {
	struct wr_dns *d;
	int fd;
	unsigned slot;
	struct sockaddr_storage peer;
	char sbx[SBX_ID_MAX]; /* "" for a source no sandbox has */
};

/* One TCP client connection: queries answered in order until EOF, an
 * error or tcp_idle_ms without a query. */
static void *tcp_main(void *arg)
{
	struct tcp_arg *t = arg;
	struct wr_dns *d = t->d;
	for (;;) {
		int64_t deadline = mono_ms() + d->cfg.tcp_idle_ms;
		uint8_t hdr[2];
		if (read_full(t->fd, hdr, 2, deadline) < 0)
			break;
		size_t n = (size_t)hdr[0] << 8 | hdr[1];
		uint8_t *buf = malloc(n ? n : 1);
		if (buf == NULL || read_full(t->fd, buf, n, mono_ms() + d->cfg.timeout_ms) < 0) {
			free(buf);
			break;
		}
		struct wr_dnsm_query q;
		char sbx[SBX_ID_MAX];
		uint8_t *wire = NULL;
		size_t len = 0;
		int r =
		    first_pass(d, (struct sockaddr *)&t->peer, buf, n, false, &q, sbx, &wire, &len);
		free(buf);
		if (r == 1) {
			if (inflight_take(d, sbx, false)) {
				r = forward(d, sbx, &q, false, &wire, &len);
				inflight_drop(d, sbx);
			} else
				r = wr_dnsm_reply(&q, LDNS_RCODE_SERVFAIL, NULL, false, &wire,
						  &len);
		}
		wr_dnsm_query_free(&q);
		if (r < 0) {
			free(wire);
			break;
		}
		uint8_t lh[2] = {(uint8_t)(len >> 8), (uint8_t)len};
		deadline = mono_ms() + d->cfg.timeout_ms;
		r = write_full(t->fd, lh, 2, deadline);
		if (r == 0)
			r = write_full(t->fd, wire, len, deadline);
		free(wire);
		if (r < 0)
			break;
	}
	pthread_mutex_lock(&d->lock);
	struct sbs *s = sbs_get(d, t->sbx);
	if (s->tcp > 0)
		s->tcp--;
	d->tcp_fds[t->slot] = -1;
	close(t->fd);
	d->tcp_live--;
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->lock);
	free(t);
	return NULL;
}

static void on_accept(struct wr_dns *d, int lfd)
{
	for (;;) {
		struct sockaddr_storage peer;
		socklen_t pl = sizeof(peer);
		int fd = accept4(lfd, (struct sockaddr *)&peer, &pl, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0)
			return;
		struct tcp_arg *t = calloc(1, sizeof(*t));
		char sbx[SBX_ID_MAX] = "";
		if (d->h.who == NULL ||
		    d->h.who(d->h.ctx, (struct sockaddr *)&peer, sbx, SBX_ID_MAX) < 0)
			sbx[0] = 0;
		sbx[SBX_ID_MAX - 1] = 0;
		pthread_mutex_lock(&d->lock);
		struct sbs *s = sbs_get(d, sbx);
		unsigned slot = d->cfg.max_tcp;
		for (unsigned i = 0; t != NULL && i < d->cfg.max_tcp && !d->stopping &&
				     s->tcp < d->cfg.max_tcp_per_sandbox;
		     i++)
			if (d->tcp_fds[i] < 0) {
				slot = i;
				break;
			}
		if (slot == d->cfg.max_tcp) { /* over a bound: close, as on overload */
			BUMP(d, s, overload);
			pthread_mutex_unlock(&d->lock);
			close(fd);
			free(t);
			continue;
		}
		*t = (struct tcp_arg){.d = d, .fd = fd, .slot = slot, .peer = peer};
		memcpy(t->sbx, sbx, sizeof(sbx));
		s->tcp++;
		d->tcp_fds[slot] = fd;
		d->tcp_live++;
		pthread_attr_t at;
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		pthread_attr_setstacksize(&at, 256 * 1024);
		pthread_t th;
		if (pthread_create(&th, &at, tcp_main, t) != 0) {
			s->tcp--;
			d->tcp_fds[slot] = -1;
			d->tcp_live--;
			close(fd);
			free(t);
		}
		pthread_attr_destroy(&at);
		pthread_mutex_unlock(&d->lock);
	}
}

static void *event_main(void *arg)
{
	struct wr_dns *d = arg;
	int64_t next_flush = mono_ms() + 1000;
	for (;;) {
		struct epoll_event evs[16];
		int n = epoll_wait(d->epfd, evs, 16, remaining(next_flush) + 1);
		for (int i = 0; i < n; i++) {
			int fd = evs[i].data.fd;
			if (fd == d->stopfd)
				return NULL;
			bool is_tcp = false;
			for (size_t k = 0; k < d->cfg.n_listen; k++)
				is_tcp |= d->tcp[k] == fd;
			if (is_tcp)
				on_accept(d, fd);
			else
				on_udp(d, fd);
		}
		if (mono_ms() >= next_flush) {
			(void)flush_summaries(d, NULL, false);
			next_flush = mono_ms() + 1000;
		}
	}
}

static int listen_on(struct wr_dns *d, size_t i, wr_err *err)
{
	const struct sockaddr_storage *a = &d->cfg.listen[i];
	int one = 1;
	d->udp[i] = socket(a->ss_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	d->tcp[i] = socket(a->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (d->udp[i] < 0 || d->tcp[i] < 0)
		return wr_err_sys(err, "socket");
	setsockopt(d->tcp[i], SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (a->ss_family == AF_INET6) {
		setsockopt(d->udp[i], IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
		setsockopt(d->tcp[i], IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	}
	/* The bridge address may not exist yet when the daemon starts before
	 * the network plumbing: bind it anyway. */
	setsockopt(d->udp[i], IPPROTO_IP, IP_FREEBIND, &one, sizeof(one));
	setsockopt(d->tcp[i], IPPROTO_IP, IP_FREEBIND, &one, sizeof(one));
	if (bind(d->udp[i], (const struct sockaddr *)a, sa_len(a)) < 0 ||
	    bind(d->tcp[i], (const struct sockaddr *)a, sa_len(a)) < 0)
		return wr_err_sys(err, "bind listen address %zu", i);
	if (listen(d->tcp[i], 128) < 0)
		return wr_err_sys(err, "listen");
	struct epoll_event ev = {.events = EPOLLIN, .data.fd = d->udp[i]};
	if (epoll_ctl(d->epfd, EPOLL_CTL_ADD, d->udp[i], &ev) < 0)
		return wr_err_sys(err, "epoll_ctl");
	ev.data.fd = d->tcp[i];
	if (epoll_ctl(d->epfd, EPOLL_CTL_ADD, d->tcp[i], &ev) < 0)
		return wr_err_sys(err, "epoll_ctl");
	return 0;
}

int wr_dns_start(const struct wr_dns_config *c, const struct wr_dns_hooks *h, struct wr_dns **out,
		 wr_err *err)
{
	if (c->n_listen == 0 || c->n_listen > WR_DNS_MAX_LISTEN)
		return wr_err_field(err, "listen", "dns: 1..%d listen addresses",
				    WR_DNS_MAX_LISTEN);
	if (c->n_upstreams == 0 || c->n_upstreams > WR_DNS_MAX_UPSTREAMS)
		return wr_err_field(err, "upstreams", "dns: 1..%d upstream resolvers",
				    WR_DNS_MAX_UPSTREAMS);
	if (c->ttl_min > c->ttl_max)
		return wr_err_field(err, "ttl_min", "dns: ttl_min above ttl_max");
	if (c->workers == 0 || c->max_inflight == 0 || c->max_tcp == 0 || c->max_queue == 0 ||
	    c->timeout_ms == 0 || c->max_sandboxes == 0 || c->max_tcp_per_sandbox == 0)
		return wr_err_set(err, EINVAL, "dns: bounds must be positive");
	/* One sandbox never holds every worker: the others keep being served
	 * while its queries wait on a slow upstream. */
	if (c->max_inflight >= c->workers)
		return wr_err_field(err, "max_inflight", "dns: max_inflight must be below workers");
	struct wr_dns *d = calloc(1, sizeof(*d));
	if (d == NULL)
		return wr_err_set(err, ENOMEM, "out of memory");
	d->cfg = *c;
	d->h = *h;
	d->epfd = d->stopfd = -1;
	for (size_t i = 0; i < WR_DNS_MAX_LISTEN; i++)
		d->udp[i] = d->tcp[i] = -1;
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->cv, NULL);
	snprintf(d->overflow.id, sizeof(d->overflow.id), "(overflow)");
	d->overflow.tokens = c->event_burst;
	d->overflow.refill_ms = mono_ms();
	d->tab_size = 1024;
	d->tab = calloc(d->tab_size, sizeof(*d->tab));
	d->tcp_fds = malloc(c->max_tcp * sizeof(int));
	d->workers = calloc(c->workers, sizeof(pthread_t));
	if (d->tab == NULL || d->tcp_fds == NULL || d->workers == NULL) {
		wr_err_set(err, ENOMEM, "out of memory");
		goto fail;
	}
	for (unsigned i = 0; i < c->max_tcp; i++)
		d->tcp_fds[i] = -1;
	if ((d->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
	    (d->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
		wr_err_sys(err, "epoll");
		goto fail;
	}
	struct epoll_event ev = {.events = EPOLLIN, .data.fd = d->stopfd};
	if (epoll_ctl(d->epfd, EPOLL_CTL_ADD, d->stopfd, &ev) < 0) {
		wr_err_sys(err, "epoll_ctl");
		goto fail;
	}
	for (size_t i = 0; i < c->n_listen; i++)
		if (listen_on(d, i, err) < 0)
			goto fail;
	for (; d->n_workers < c->workers; d->n_workers++)
		if (pthread_create(&d->workers[d->n_workers], NULL, worker_main, d) != 0) {
			wr_err_set(err, EAGAIN, "dns: cannot start a worker thread");
			goto fail;
		}
	if (pthread_create(&d->ev_thread, NULL, event_main, d) != 0) {
		wr_err_set(err, EAGAIN, "dns: cannot start the event thread");
		goto fail;
	}
	d->ev_started = true;
	*out = d;
	return 0;
fail:
	wr_dns_stop(d);
	return wr_err_wrap(err, "dns forwarder");
}

void wr_dns_stop(struct wr_dns *d)
{
	if (d == NULL)
		return;
	if (d->ev_started) {
		uint64_t one = 1;
		if (write(d->stopfd, &one, sizeof(one)) < 0) {
			/* an eventfd write of 1 cannot fail short of overflow */
		}
		pthread_join(d->ev_thread, NULL);
	}
	pthread_mutex_lock(&d->lock);
	d->stopping = true;
	pthread_cond_broadcast(&d->cv);
	/* TCP threads own their sockets: wake them and wait for them. */
	for (unsigned i = 0; d->tcp_fds != NULL && i < d->cfg.max_tcp; i++)
		if (d->tcp_fds[i] >= 0)
			shutdown(d->tcp_fds[i], SHUT_RDWR);
	while (d->tcp_live > 0)
		pthread_cond_wait(&d->cv, &d->lock);
	pthread_mutex_unlock(&d->lock);
	for (unsigned i = 0; i < d->n_workers; i++)
		pthread_join(d->workers[i], NULL);
	if (d->tab != NULL)
		while (flush_summaries(d, NULL, true) == SUMMARY_BATCH)
			; /* counts are never left unreported */
	for (size_t i = 0; i < WR_DNS_MAX_LISTEN; i++) {
		if (d->udp[i] >= 0)
			close(d->udp[i]);
		if (d->tcp[i] >= 0)
			close(d->tcp[i]);
	}
	if (d->epfd >= 0)
		close(d->epfd);
	if (d->stopfd >= 0)
		close(d->stopfd);
	for (size_t b = 0; d->tab != NULL && b < d->tab_size; b++)
		while (d->tab[b]) {
			struct sbs *s = d->tab[b];
			d->tab[b] = s->next;
			free(s);
		}
	free(d->tab);
	free(d->tcp_fds);
	free(d->workers);
	pthread_mutex_destroy(&d->lock);
	pthread_cond_destroy(&d->cv);
	free(d);
}
