/* Screen and input of a full-VM sandbox, for computer-use agents:
 * GET /v1/sandboxes/{id}/screen answers the screen as PNG, POST
 * /v1/sandboxes/{id}/input types text, presses keys, moves, clicks and
 * scrolls the absolute pointer. Other tiers have no screen: 501. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/cleanup.h"
#include "daemon/api.h"
#include "daemon/jsonutil.h"
#include "daemon/manager.h"
#include "tiers/vm_tier.h"

/* The sandbox's VM, begun (resumed when paused), or NULL with the reply set. */
static struct wrd_sbx *vm_sandbox(struct wrd_req *r, struct wr_fullvm **vm)
{
	struct wrd_sbx *sb = wrd_api_sandbox(r, true);
	if (sb == NULL)
		return NULL;
	if (sb->ops != &wr_vm_tier) {
		wrd_reply_error(r, "not_implemented", NULL,
				"the %s tier has no screen (only tier vm has one)", sb->ops->name);
		wrd_api_done(sb, true);
		return NULL;
	}
	*vm = wr_vm_tier_vm(sb->tsb);
	return sb;
}

void wrd_api_vm_screen(struct wrd_req *r)
{
	if (wrd_query_check(r, NULL) < 0)
		return;
	struct wr_fullvm *vm;
	struct wrd_sbx *sb = vm_sandbox(r, &vm);
	if (sb == NULL)
		return;
	_cleanup_err_ wr_err err = NULL;
	char *png = NULL;
	size_t len = 0;
	if (wr_fullvm_screenshot(vm, &png, &len, &err) < 0)
		wrd_reply_err(r, err);
	else
		wrd_reply_text(r, 200, "image/png", png, len);
	wrd_api_done(sb, true);
}

static int pointer_args(json_t *b, const char *type, struct wr_fullvm_pointer *p, wr_err *err)
{
	int64_t x, y;
	json_t *jx = json_object_get(b, "x"), *jy = json_object_get(b, "y");
	if (jx == NULL)
		return wr_err_field(err, "x", "x is required for %s", type);
	if (jy == NULL)
		return wr_err_field(err, "y", "y is required for %s", type);
	if (wrd_j_int(jx, "x", 0, 65535, &x, err) < 0 || wrd_j_int(jy, "y", 0, 65535, &y, err) < 0)
		return -1;
	p->x = (unsigned)x;
	p->y = (unsigned)y;
	return 0;
}

static int input(struct wr_fullvm *vm, json_t *b, wr_err *err)
{
	const char *type;
	json_t *v = json_object_get(b, "type");
	if (v == NULL)
		return wr_err_field(err, "type",
				    "type is required: text, key, move, click or scroll");
	if (wrd_j_str(v, "type", 16, false, &type, err) < 0)
		return -1;
	static const char *const text_keys[] = {"type", "text", NULL};
	static const char *const key_keys[] = {"type", "keys", NULL};
	static const char *const ptr_keys[] = {"type", "x", "y", "button", "double", "dy", NULL};
	const char *const *allowed = strcmp(type, "text") == 0	? text_keys
				     : strcmp(type, "key") == 0 ? key_keys
								: ptr_keys;
	const char *k;
	json_t *x;
	json_object_foreach(b, k, x)
	{
		bool ok = false;
		for (size_t i = 0; allowed[i] && !ok; i++)
			ok = strcmp(allowed[i], k) == 0;
		if (!ok)
			return wr_err_field(err, k, "%s: not a field of a %s input", k, type);
	}
	if (strcmp(type, "text") == 0) {
		const char *text;
		if ((v = json_object_get(b, "text")) == NULL)
			return wr_err_field(err, "text", "text is required");
		if (wrd_j_str(v, "text", 4096, false, &text, err) < 0)
			return -1;
		return wr_fullvm_type(vm, text, err);
	}
	if (strcmp(type, "key") == 0) {
		v = json_object_get(b, "keys");
		if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > 8)
			return wr_err_field(err, "keys", "keys: 1 to 8 key names pressed together");
		const char *names[8];
		for (size_t i = 0; i < json_array_size(v); i++)
			if (wrd_j_str(json_array_get(v, i), "keys", 16, false, &names[i], err) < 0)
				return -1;
		return wr_fullvm_keys(vm, names, json_array_size(v), err);
	}
	struct wr_fullvm_pointer p = {0};
	if (strcmp(type, "move") && strcmp(type, "click") && strcmp(type, "scroll"))
		return wr_err_field(err, "type", "type: text, key, move, click or scroll, not %s",
				    type);
	if (pointer_args(b, type, &p, err) < 0)
		return -1;
	if (strcmp(type, "move") == 0) {
		if (json_object_size(b) > 3)
			return wr_err_field(err, "type", "move takes only x and y");
	} else if (strcmp(type, "click") == 0) {
		p.button = "left";
		if ((v = json_object_get(b, "button")) &&
		    wrd_j_str(v, "button", 8, false, &p.button, err) < 0)
			return -1;
		if (strcmp(p.button, "left") && strcmp(p.button, "right") &&
		    strcmp(p.button, "middle"))
			return wr_err_field(err, "button", "button: left, right or middle");
		if ((v = json_object_get(b, "double")) &&
		    wrd_j_bool(v, "double", &p.double_click, err) < 0)
			return -1;
		if (json_object_get(b, "dy"))
			return wr_err_field(err, "dy", "dy belongs to a scroll");
	} else {
		int64_t dy;
		if ((v = json_object_get(b, "dy")) == NULL)
			return wr_err_field(err, "dy", "dy (wheel steps, negative up) is required");
		if (wrd_j_int(v, "dy", -50, 50, &dy, err) < 0)
			return -1;
		if (dy == 0)
			return wr_err_field(err, "dy", "dy must not be 0");
		if (json_object_get(b, "button") || json_object_get(b, "double"))
			return wr_err_field(err, "button", "a scroll takes x, y and dy");
		p.scroll = (int)dy;
	}
	return wr_fullvm_pointer(vm, &p, err);
}

void wrd_api_vm_input(struct wrd_req *r)
{
	if (wrd_query_check(r, NULL) < 0)
		return;
	if (!json_is_object(r->json)) {
		wrd_reply_error(r, "invalid_argument", NULL, "the body must be a JSON object");
		return;
	}
	struct wr_fullvm *vm;
	struct wrd_sbx *sb = vm_sandbox(r, &vm);
	if (sb == NULL)
		return;
	_cleanup_err_ wr_err err = NULL;
	if (input(vm, r->json, &err) < 0)
		wrd_reply_err(r, err);
	else
		wrd_reply_empty(r, 204);
	wrd_api_done(sb, true);
}

/* GET of a vm sandbox made with display.vnc: its VNC endpoint (a Unix
 * socket of warrend's, and the password VNC authentication asks for). */
void wrd_api_vm_display_json(const char *tenant, const char *id, json_t *obj)
{
	struct wrd_sbx *sb;
	if (wrd_mgr_get(tenant, id, &sb) < 0)
		return;
	/* busy holds a concurrent kill's destroy off, as for usage */
	pthread_mutex_lock(&sb->lock);
	bool live = sb->ops == &wr_vm_tier && sb->tsb &&
		    (sb->state == WRD_RUNNING || sb->state == WRD_PAUSED) && !sb->reaping;
	if (live)
		sb->busy++;
	pthread_mutex_unlock(&sb->lock);
	const char *sock, *pass;
	if (live && wr_fullvm_vnc(wr_vm_tier_vm(sb->tsb), &sock, &pass) == 0)
		json_object_set_new(
		    obj, "display",
		    json_pack("{s:{s:s, s:s}}", "vnc", "socket", sock, "password", pass));
	if (live) {
		pthread_mutex_lock(&sb->lock);
		if (--sb->busy == 0)
			pthread_cond_broadcast(&sb->cv);
		pthread_mutex_unlock(&sb->lock);
	}
	wrd_mgr_put(sb);
}
