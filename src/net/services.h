/* Named network services (issue 6): "pypi", "npm", "github"... each a set of
 * DNS names and a set of ports, loaded from a JSON file (deploy/services.json,
 * format in docs/NETWORK-SERVICES.md) so that a sandbox's policy can say
 * `"services": ["pypi"]` instead of listing hosts.
 *
 * A service lists exactly its hosts: no "*.example.org" unless every name
 * below is the service's own (module proxies and mirrors that fetch
 * arbitrary code are separate services, never part of another). */
#ifndef WARREN_NET_SERVICES_H
#define WARREN_NET_SERVICES_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

struct wr_svc_ports {
	uint16_t lo, hi; /* inclusive */
	uint8_t proto;	 /* IPPROTO_TCP or IPPROTO_UDP */
};

struct wr_service {
	char *name;
	char *description;
	char **domains; /* normalised patterns (dns.h rules) */
	size_t n_domains;
	struct wr_svc_ports *ports;
	size_t n_ports;
};

struct wr_services {
	struct wr_service *v; /* sorted by name */
	size_t n;
};

/* Load and validate; errors name the field ("services.pypi.ports[1]"). */
int wr_services_load(const char *path, struct wr_services **out, wr_err *err);
int wr_services_parse(const char *text, struct wr_services **out, wr_err *err);
void wr_services_free(struct wr_services *s);
const struct wr_service *wr_services_find(const struct wr_services *s, const char *name);

/* A policy's `services` expanded: every domain of every named service, each
 * with the index of its service in `names` (use it as the dns.h tag, e.g.
 * 1 + index), and the services' port rules. Unknown names fail with the
 * field "services[i]". Free with wr_services_expansion_free. */
struct wr_svc_expansion {
	const char **domains; /* point into the services table */
	uint32_t *service_of; /* index into names, per domain */
	size_t n_domains;
};
int wr_services_expand(const struct wr_services *s, const char *const *names, size_t n,
		       struct wr_svc_expansion *out, wr_err *err);
void wr_services_expansion_free(struct wr_svc_expansion *x);

/* "443", "443/tcp", "8000-8100/tcp", "53/udp" -> ports. */
int wr_svc_parse_ports(const char *s, struct wr_svc_ports *out, wr_err *err);

#endif
