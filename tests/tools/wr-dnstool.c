/* wr-dnstool: runs the DNS forwarder (src/net/dns.h) with hooks that print
 * what they receive, one JSON object a line on stdout, for
 * tests/integration/test_dns.py.
 *
 *   wr-dnstool --listen ADDR --upstream ADDR [--upstream ADDR]
 *              [--timeout-ms N] [--ttl-min N] [--ttl-max N] [--burst N]
 *              [--per-min N] [--inflight N] [--allow-delay-ms N]
 *              --sandbox ID=SRCIP[=PATTERN,PATTERN...] ...
 *
 * A pattern may carry a tag: "pypi.org@3". stdin commands, one a line:
 *   names ID PATTERN,...   replace a sandbox's names (live policy change)
 *   fail ID                allow_ip fails for that sandbox from now on
 *   stats ID|*             print the counters
 *   forget ID              wr_dns_forget
 * EOF stops the forwarder. Output lines: {"ev":"ready"},
 * {"ev":"allow_ip",...,"mono_ns":N} (printed when allow_ip returns),
 * {"ev":"refused",...}, {"ev":"stats",...}. */
#include <arpa/inet.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "net/dns.h"

#define MAXS 16

static struct sbx {
	char id[64];
	struct sockaddr_storage src;
	struct wr_dns_names *names;
	bool fail;
} sbxs[MAXS];
static size_t n_sbx;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned allow_delay_ms;

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static bool same_ip(const struct sockaddr_storage *a, const struct sockaddr *b)
{
	if (a->ss_family != b->sa_family)
		return false;
	if (b->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
		      &((const struct sockaddr_in6 *)b)->sin6_addr, 16) == 0;
}

static int who(void *ctx, const struct sockaddr *src, char *id, size_t len)
{
	(void)ctx;
	for (size_t i = 0; i < n_sbx; i++)
		if (same_ip(&sbxs[i].src, src)) {
			snprintf(id, len, "%s", sbxs[i].id);
			return 0;
		}
	return -1;
}

static struct sbx *find(const char *id)
{
	for (size_t i = 0; i < n_sbx; i++)
		if (strcmp(sbxs[i].id, id) == 0)
			return &sbxs[i];
	return NULL;
}

static struct wr_dns_names *names(void *ctx, const char *id)
{
	(void)ctx;
	pthread_mutex_lock(&lock);
	struct sbx *s = find(id);
	struct wr_dns_names *n = s ? wr_dns_names_ref(s->names) : NULL;
	pthread_mutex_unlock(&lock);
	return n;
}

static int allow_ip(void *ctx, const char *id, int family, const void *addr, uint32_t ttl,
		    uint32_t tag)
{
	(void)ctx;
	char a[INET6_ADDRSTRLEN];
	inet_ntop(family, addr, a, sizeof(a));
	if (allow_delay_ms)
		usleep(allow_delay_ms * 1000);
	pthread_mutex_lock(&lock);
	struct sbx *s = find(id);
	bool fail = s && s->fail;
	printf("{\"ev\":\"allow_ip\",\"sandbox\":\"%s\",\"family\":%d,\"addr\":\"%s\",\"ttl\":%u,"
	       "\"tag\":%u,\"ok\":%s,\"mono_ns\":%llu}\n",
	       id, family == AF_INET ? 4 : 6, a, ttl, tag, fail ? "false" : "true",
	       (unsigned long long)mono_ns());
	fflush(stdout);
	pthread_mutex_unlock(&lock);
	return fail ? -1 : 0;
}

static void refused(void *ctx, const struct wr_dns_refusal *ev)
{
	(void)ctx;
	pthread_mutex_lock(&lock);
	printf("{\"ev\":\"refused\",\"sandbox\":\"%s\",\"name\":", ev->sandbox_id);
	if (ev->name == NULL)
		printf("null");
	else {
		putchar('"');
		for (const char *p = ev->name; *p; p++)
			if (*p == '"' || *p == '\\')
				printf("\\%c", *p);
			else
				putchar(*p);
		putchar('"');
	}
	printf(",\"qtype\":%u,\"time_ms\":%lld,\"layer\":\"%s\",\"reason\":\"%s\","
	       "\"suppressed\":%llu,\"total\":%llu}\n",
	       ev->qtype, (long long)ev->time_ms, ev->layer, ev->reason,
	       (unsigned long long)ev->suppressed, (unsigned long long)ev->total);
	fflush(stdout);
	pthread_mutex_unlock(&lock);
}

static struct wr_dns_names *parse_names(const char *list)
{
	struct wr_dns_pattern p[64];
	char buf[4096], *save = NULL;
	size_t n = 0;
	snprintf(buf, sizeof(buf), "%s", list);
	for (char *t = strtok_r(buf, ",", &save); t && n < 64; t = strtok_r(NULL, ",", &save)) {
		char *at = strchr(t, '@');
		p[n].tag = 0;
		if (at) {
			*at = 0;
			p[n].tag = (uint32_t)atoi(at + 1);
		}
		p[n++].name = t;
	}
	struct wr_dns_names *s = NULL;
	wr_err err = NULL;
	if (wr_dns_names_new(p, n, &s, &err) < 0) {
		fprintf(stderr, "wr-dnstool: %s\n", err->msg);
		exit(2);
	}
	return s;
}

static void add_sandbox(char *arg)
{
	char *eq = strchr(arg, '=');
	if (eq == NULL || n_sbx == MAXS) {
		fprintf(stderr, "wr-dnstool: --sandbox ID=SRCIP[=NAMES]\n");
		exit(2);
	}
	*eq = 0;
	char *eq2 = strchr(eq + 1, '=');
	if (eq2)
		*eq2 = 0;
	struct sbx *s = &sbxs[n_sbx++];
	snprintf(s->id, sizeof(s->id), "%s", arg);
	wr_err err = NULL;
	if (wr_dns_parse_addr(eq + 1, &s->src, &err) < 0) {
		fprintf(stderr, "wr-dnstool: %s\n", err->msg);
		exit(2);
	}
	s->names = eq2 ? parse_names(eq2 + 1) : NULL;
}

static void addr_opt(const char *s, struct sockaddr_storage *v, size_t *n, size_t max)
{
	wr_err err = NULL;
	if (*n == max || wr_dns_parse_addr(s, &v[*n], &err) < 0) {
		fprintf(stderr, "wr-dnstool: %s: %s\n", s, err ? err->msg : "too many");
		exit(2);
	}
	(*n)++;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {{"listen", 1, NULL, 'l'},
					     {"upstream", 1, NULL, 'u'},
					     {"timeout-ms", 1, NULL, 't'},
					     {"ttl-min", 1, NULL, 'm'},
					     {"ttl-max", 1, NULL, 'M'},
					     {"burst", 1, NULL, 'b'},
					     {"per-min", 1, NULL, 'p'},
					     {"inflight", 1, NULL, 'i'},
					     {"sandbox", 1, NULL, 's'},
					     {"allow-delay-ms", 1, NULL, 'd'},
					     {0}};
	struct wr_dns_config c;
	wr_dns_config_init(&c);
	int o;
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1)
		switch (o) {
		case 'l': addr_opt(optarg, c.listen, &c.n_listen, WR_DNS_MAX_LISTEN); break;
		case 'u': addr_opt(optarg, c.upstream, &c.n_upstreams, WR_DNS_MAX_UPSTREAMS); break;
		case 't': c.timeout_ms = (unsigned)atoi(optarg); break;
		case 'm': c.ttl_min = (unsigned)atoi(optarg); break;
		case 'M': c.ttl_max = (unsigned)atoi(optarg); break;
		case 'b': c.event_burst = (unsigned)atoi(optarg); break;
		case 'p': c.event_per_min = (unsigned)atoi(optarg); break;
		case 'i': c.max_inflight = (unsigned)atoi(optarg); break;
		case 'd': allow_delay_ms = (unsigned)atoi(optarg); break;
		case 's': add_sandbox(optarg); break;
		default: return 2;
		}
	struct wr_dns_hooks h = {
	    .who = who, .names = names, .allow_ip = allow_ip, .refused = refused};
	struct wr_dns *d = NULL;
	wr_err err = NULL;
	if (wr_dns_start(&c, &h, &d, &err) < 0) {
		fprintf(stderr, "wr-dnstool: %s\n", err->msg);
		return 1;
	}
	printf("{\"ev\":\"ready\"}\n");
	fflush(stdout);
	char line[4096];
	while (fgets(line, sizeof(line), stdin) != NULL) {
		char cmd[16], id[64], arg[4000] = "";
		line[strcspn(line, "\n")] = 0;
		if (sscanf(line, "%15s %63s %3999s", cmd, id, arg) < 2)
			continue;
		if (strcmp(cmd, "names") == 0) {
			struct wr_dns_names *nn = parse_names(arg), *old;
			pthread_mutex_lock(&lock);
			struct sbx *s = find(id);
			old = s ? s->names : nn;
			if (s)
				s->names = nn;
			pthread_mutex_unlock(&lock);
			wr_dns_names_unref(old);
			printf("{\"ev\":\"ok\"}\n");
		} else if (strcmp(cmd, "fail") == 0) {
			pthread_mutex_lock(&lock);
			if (find(id))
				find(id)->fail = true;
			pthread_mutex_unlock(&lock);
			printf("{\"ev\":\"ok\"}\n");
		} else if (strcmp(cmd, "forget") == 0) {
			wr_dns_forget(d, id);
			printf("{\"ev\":\"ok\"}\n");
		} else if (strcmp(cmd, "stats") == 0) {
			struct wr_dns_stats st;
			wr_dns_sandbox_stats(d, strcmp(id, "*") == 0 ? NULL : id, &st);
			pthread_mutex_lock(&lock);
			printf("{\"ev\":\"stats\",\"queries\":%llu,\"forwarded\":%llu,"
			       "\"allowed_addrs\":%llu,\"refused\":%llu,\"events\":%llu,"
			       "\"suppressed\":%llu,\"servfail\":%llu,\"overload\":%llu}\n",
			       (unsigned long long)st.queries, (unsigned long long)st.forwarded,
			       (unsigned long long)st.allowed_addrs, (unsigned long long)st.refused,
			       (unsigned long long)st.events, (unsigned long long)st.suppressed,
			       (unsigned long long)st.servfail, (unsigned long long)st.overload);
			pthread_mutex_unlock(&lock);
		}
		fflush(stdout);
	}
	wr_dns_stop(d);
	for (size_t i = 0; i < n_sbx; i++)
		wr_dns_names_unref(sbxs[i].names);
	return 0;
}
