/* libwarren: screen and input of a VM sandbox (tier "vm"). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_internal.h"
#include "common/cleanup.h"

int warren_sandbox_screenshot(warren_sandbox *sb, int fd, warren_error **errp)
{
	struct wc_call c = {.client = sb->client};
	int r = fd < 0 ? wc_fail_field(&c, "fd", "fd: %d is not a file descriptor", fd) : 0;
	if (r >= 0) {
		_cleanup_free_ char *route = wc_fmt("/v1/sandboxes/%s/screen", sb->id);
		struct wc_req rq = WC_REQ_INIT("GET", route);
		rq.long_running = true;
		rq.out_fd = fd;
		r = route ? wc_do(&c, &rq, NULL) : wc_fail(&c, "internal", ENOMEM, "out of memory");
	}
	return wc_finish(&c, r < 0 ? r : 0, errp, "screenshot of %s", sb->id);
}

static int input(warren_sandbox *sb, json_t *body, warren_error **errp)
{
	struct wc_call c = {.client = sb->client};
	_cleanup_free_ char *route = wc_fmt("/v1/sandboxes/%s/input", sb->id);
	int r = route && body ? wc_json(&c, "POST", route, body, NULL)
			      : wc_fail(&c, "internal", ENOMEM, "out of memory");
	json_decref(body);
	return wc_finish(&c, r < 0 ? r : 0, errp, "input to %s", sb->id);
}

int warren_sandbox_type_text(warren_sandbox *sb, const char *text, warren_error **errp)
{
	return input(sb, json_pack("{s:s, s:s?}", "type", "text", "text", text), errp);
}

int warren_sandbox_press_keys(warren_sandbox *sb, const char *const *keys, size_t n,
			      warren_error **errp)
{
	json_t *arr = json_array();
	for (size_t i = 0; arr && i < n; i++)
		json_array_append_new(arr, json_string(keys[i] ? keys[i] : ""));
	return input(sb, json_pack("{s:s, s:o*}", "type", "key", "keys", arr), errp);
}

int warren_sandbox_pointer(warren_sandbox *sb, const char *type, int x, int y, const char *button,
			   int dy, warren_error **errp)
{
	json_t *b = json_pack("{s:s?, s:i, s:i}", "type", type, "x", x, "y", y);
	if (b && button)
		json_object_set_new(b, "button", json_string(button));
	if (b && type && strcmp(type, "scroll") == 0)
		json_object_set_new(b, "dy", json_integer(dy));
	return input(sb, b, errp);
}
