/* Published ports of a sandbox: /v1/sandboxes/{id}/ports (docs/API-NETWORK.md).
 * The daemon validates and names the field at fault; here only what the
 * request cannot carry (a missing or out-of-range port) is refused first. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_internal.h"
#include "common/cleanup.h"

static int answer(struct wc_call *c, json_t *ans, char **json_out)
{
	if (json_out && !(*json_out = json_dumps(ans, JSON_COMPACT)))
		return wc_fail(c, "internal", ENOMEM, "out of memory");
	return 0;
}

int warren_sandbox_port_publish(warren_sandbox *sb, const warren_port_opts *o, char **json_out,
				warren_error **errp)
{
	struct wc_call c = {.client = sb->client};
	_cleanup_json_ json_t *req = NULL, *ans = NULL;
	_cleanup_free_ char *path = wc_fmt("/v1/sandboxes/%s/ports", sb->id);
	int r = 0;
	if (json_out)
		*json_out = NULL;
	if (!o || o->version < 1 || o->version > WARREN_PORT_OPTS_VERSION)
		r = wc_fail_field(&c, "version", "port options: version must be 1..%d",
				  WARREN_PORT_OPTS_VERSION);
	else if (o->port < 1 || o->port > 65535)
		r = wc_fail_field(&c, "port", "port: %u is not 1-65535", o->port);
	else if (o->host_port > 65535)
		r = wc_fail_field(&c, "host_port", "host_port: %u is not 0-65535", o->host_port);
	if (r == 0) {
		req = json_pack("{s:I}", "port", (json_int_t)o->port);
		if (o->unix_socket)
			json_object_set_new(req, "unix", json_true());
		if (o->host)
			json_object_set_new(req, "host", json_string(o->host));
		if (o->host_port)
			json_object_set_new(req, "host_port", json_integer(o->host_port));
		r = wc_json(&c, "POST", path, req, &ans);
	}
	if (r >= 0)
		r = answer(&c, ans, json_out);
	return wc_finish(&c, r < 0 ? r : 0, errp, "publish port %u of sandbox %s", o ? o->port : 0,
			 sb->id);
}

int warren_sandbox_port_list(warren_sandbox *sb, char **json_out, warren_error **errp)
{
	struct wc_call c = {.client = sb->client};
	_cleanup_json_ json_t *ans = NULL;
	_cleanup_free_ char *path = wc_fmt("/v1/sandboxes/%s/ports", sb->id);
	if (json_out)
		*json_out = NULL;
	int r = wc_json(&c, "GET", path, NULL, &ans);
	if (r >= 0)
		r = answer(&c, ans, json_out);
	return wc_finish(&c, r < 0 ? r : 0, errp, "ports of sandbox %s", sb->id);
}

int warren_sandbox_port_unpublish(warren_sandbox *sb, unsigned int port, warren_error **errp)
{
	struct wc_call c = {.client = sb->client};
	int r = 0;
	if (port < 1 || port > 65535) {
		r = wc_fail_field(&c, "port", "port: %u is not 1-65535", port);
	} else {
		_cleanup_free_ char *path = wc_fmt("/v1/sandboxes/%s/ports/%u", sb->id, port);
		_cleanup_json_ json_t *ans = NULL;
		r = wc_json(&c, "DELETE", path, NULL, &ans);
	}
	return wc_finish(&c, r < 0 ? r : 0, errp, "unpublish port %u of sandbox %s", port, sb->id);
}
