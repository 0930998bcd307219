/* GET and PATCH /v1/sandboxes/{id}/network: parse and dispatch only (the
 * policy and the filter are netpolicy.c's). */
#include <errno.h>

#include "common/cleanup.h"
#include "daemon/api.h"
#include "daemon/netpolicy.h"

void wrd_api_net_get(struct wrd_req *r)
{
	if (wrd_query_check(r, NULL) < 0)
		return;
	struct wrd_sbx *sb = wrd_api_sandbox(r, false);
	if (sb == NULL)
		return;
	wrd_reply_json(r, 200, wrd_nf_json(sb));
	wrd_mgr_put(sb);
}

void wrd_api_net_patch(struct wrd_req *r)
{
	if (wrd_query_check(r, NULL) < 0)
		return;
	if (r->json == NULL) {
		wrd_reply_error(r, "invalid_argument", "body", "body: a JSON object is required");
		return;
	}
	/* begun: the sandbox cannot be destroyed (and its filter detached)
	 * while the policy changes */
	struct wrd_sbx *sb = wrd_api_sandbox(r, true);
	if (sb == NULL)
		return;
	_cleanup_err_ wr_err err = NULL;
	if (wrd_nf_patch(sb, r->json, &err) < 0)
		wrd_reply_err(r, err);
	else
		wrd_reply_json(r, 200, wrd_nf_json(sb));
	wrd_api_done(sb, true);
}
