/* Protocol upgrades (101 Switching Protocols) over libmicrohttpd, and
 * access to request headers.
 *
 * The handler's thread queues the 101 answer and waits. MHD sends it and,
 * on its event thread, hands the socket to upgraded() (never blocking
 * there: it only records the socket and wakes the handler). A connection
 * that fails before the switch ends in MHD's completion callback instead,
 * which wakes the handler with nothing. Both run on the listener's event
 * thread, so exactly one of them answers the waiting handler. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/http.h"
#include "daemon/http_internal.h"

struct wrd_upgrade {
	pthread_mutex_t lock;
	pthread_cond_t cv;
	int state; /* 0 waiting, 1 upgraded, -1 the connection ended */
	int fd;
	char *extra;
	size_t extra_len;
	struct MHD_UpgradeResponseHandle *urh;
};

const char *wrd_header(struct wrd_req *r, const char *name)
{
	return MHD_lookup_connection_value(r->priv->conn, MHD_HEADER_KIND, name);
}

void wrd_reply_header(struct wrd_req *r, const char *name, const char *value)
{
	if (r->priv->resp)
		MHD_add_response_header(r->priv->resp, name, value);
}

static void settle(struct wrd_upgrade *u, int state)
{
	pthread_mutex_lock(&u->lock);
	u->state = state;
	pthread_cond_signal(&u->cv);
	pthread_mutex_unlock(&u->lock);
}

/* MHD's event thread, once the 101 is sent. */
static void upgraded(void *cls, struct MHD_Connection *conn, void *con_cls, const char *extra_in,
		     size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
	(void)conn;
	(void)con_cls;
	struct wrd_http_priv *p = cls;
	struct wrd_upgrade *u = p->upgrade;
	if (u == NULL) { /* cannot happen: the response is used once */
		MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
		return;
	}
	p->upgrade = NULL;
	if (extra_in_size) {
		u->extra = malloc(extra_in_size);
		if (u->extra == NULL) {
			MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
			settle(u, -1);
			return;
		}
		memcpy(u->extra, extra_in, extra_in_size);
		u->extra_len = extra_in_size;
	}
	u->fd = sock;
	u->urh = urh;
	settle(u, 1);
}

void wrd_upgrade_ended(struct wrd_http_priv *p, enum MHD_RequestTerminationCode toe)
{
	(void)toe;
	struct wrd_upgrade *u = p->upgrade;
	if (u == NULL)
		return;
	p->upgrade = NULL;
	settle(u, -1);
}

static void upgrade_free(struct wrd_upgrade *u)
{
	pthread_mutex_destroy(&u->lock);
	pthread_cond_destroy(&u->cv);
	free(u->extra);
	free(u);
}

int wrd_reply_upgrade(struct wrd_req *r, const char *proto, struct wrd_upgrade **out)
{
	struct wrd_http_priv *p = r->priv;
	struct wrd_upgrade *u = calloc(1, sizeof(*u));
	struct MHD_Response *resp = u ? MHD_create_response_for_upgrade(upgraded, p) : NULL;
	if (resp == NULL) {
		free(u);
		wrd_reply_error(r, "internal", NULL, "upgrade: out of memory");
		return -1;
	}
	pthread_mutex_init(&u->lock, NULL);
	pthread_cond_init(&u->cv, NULL);
	u->fd = -1;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_UPGRADE, proto);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "Upgrade");
	p->upgrade = u;
	wrd_http_set_resp(p, MHD_HTTP_SWITCHING_PROTOCOLS, resp);
	wrd_http_commit(p);
	pthread_mutex_lock(&u->lock);
	while (u->state == 0)
		pthread_cond_wait(&u->cv, &u->lock);
	int state = u->state;
	pthread_mutex_unlock(&u->lock);
	if (state < 0) {
		upgrade_free(u);
		return -1;
	}
	*out = u;
	return 0;
}

int wrd_upgrade_fd(const struct wrd_upgrade *u)
{
	return u->fd;
}

const char *wrd_upgrade_extra(const struct wrd_upgrade *u, size_t *len)
{
	*len = u->extra_len;
	return u->extra;
}

void wrd_upgrade_close(struct wrd_upgrade *u)
{
	if (u == NULL)
		return;
	MHD_upgrade_action(u->urh, MHD_UPGRADE_ACTION_CLOSE);
	upgrade_free(u);
}
