/* Handles of commands: list, get, wait (long poll), stream (replay then
 * follow), stdin, kill. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"
#include "daemon/api.h"
#include "daemon/cmd_internal.h"
#include "daemon/commands.h"
#include "daemon/jsonutil.h"

/* ---- handles ------------------------------------------------------------ */

static struct wrd_cmd *cmd_find(struct wrd_sbx *sb, const char *cid)
{
	pthread_mutex_lock(&sb->lock);
	struct wrd_cmd *c = sb->cmds;
	while (c && strcmp(c->id, cid) != 0)
		c = c->next;
	if (c)
		atomic_fetch_add(&c->refs, 1);
	pthread_mutex_unlock(&sb->lock);
	return c;
}

/* The request's sandbox and command, or NULL with the reply set. */
static struct wrd_cmd *req_cmd(struct wrd_req *r, struct wrd_sbx **psb)
{
	struct wrd_sbx *sb = wrd_api_sandbox(r, false);
	if (sb == NULL)
		return NULL;
	struct wrd_cmd *c = cmd_find(sb, r->cid);
	if (c == NULL) {
		wrd_reply_error(r, "not_found", NULL, "command %s not found in sandbox %s", r->cid,
				r->id);
		wrd_api_done(sb, false);
		return NULL;
	}
	*psb = sb;
	return c;
}

/* req_cmd for the routes that take no query parameter. */
static struct wrd_cmd *req_cmd_noquery(struct wrd_req *r, struct wrd_sbx **psb)
{
	if (wrd_query_check(r, NULL) < 0)
		return NULL;
	return req_cmd(r, psb);
}

/* A client waiting on a command that still runs: a paused sandbox is
 * resumed and is not idle meanwhile (lifecycle.c). True: unwatch later. */
static bool wake_for(struct wrd_sbx *sb, struct wrd_cmd *c)
{
	pthread_mutex_lock(&c->lock);
	bool running = !c->done;
	pthread_mutex_unlock(&c->lock);
	if (running)
		wrd_sbx_watch(sb, true);
	return running;
}

static void unwatch(struct wrd_sbx *sb, bool watching)
{
	if (watching)
		wrd_sbx_watch(sb, false);
}

void wrd_api_cmd_list(struct wrd_req *r)
{
	if (wrd_query_check(r, NULL) < 0)
		return;
	struct wrd_sbx *sb = wrd_api_sandbox(r, false);
	if (sb == NULL)
		return;
	json_t *arr = json_array();
	pthread_mutex_lock(&sb->lock);
	for (struct wrd_cmd *c = sb->cmds; c; c = c->next) {
		pthread_mutex_lock(&c->lock);
		json_array_append_new(arr, wrd_cmd_json(c, false));
		pthread_mutex_unlock(&c->lock);
	}
	pthread_mutex_unlock(&sb->lock);
	json_t *o = json_object();
	json_object_set_new(o, "commands", arr);
	wrd_reply_json(r, 200, o);
	wrd_api_done(sb, false);
}

void wrd_api_cmd_get(struct wrd_req *r)
{
	struct wrd_sbx *sb;
	struct wrd_cmd *c = req_cmd_noquery(r, &sb);
	if (c == NULL)
		return;
	pthread_mutex_lock(&c->lock);
	json_t *o = wrd_cmd_json(c, true);
	pthread_mutex_unlock(&c->lock);
	wrd_reply_json(r, 200, o);
	wrd_cmd_put(c);
	wrd_api_done(sb, false);
}

void wrd_api_cmd_wait(struct wrd_req *r)
{
	static const char *const allowed[] = {"timeout", NULL};
	if (wrd_query_check(r, allowed) < 0)
		return;
	uint64_t ms = 30000;
	const char *t = wrd_query(r, "timeout");
	if (t && (wr_parse_duration_ms(t, &ms) < 0 || ms > 3600 * 1000ull)) {
		wrd_reply_error(r, "invalid_argument", "timeout",
				"timeout: must be a duration in seconds, at most 3600");
		return;
	}
	struct wrd_sbx *sb;
	struct wrd_cmd *c = req_cmd(r, &sb);
	if (c == NULL)
		return;
	bool watching = wake_for(sb, c); /* a paused sandbox's command would never end */
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += (time_t)(ms / 1000);
	dl.tv_nsec += (long)(ms % 1000) * 1000000;
	if (dl.tv_nsec >= 1000000000) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&c->lock);
	while (!c->done && pthread_cond_timedwait(&c->cv, &c->lock, &dl) != ETIMEDOUT)
		;
	json_t *o = wrd_cmd_json(c, true);
	pthread_mutex_unlock(&c->lock);
	wrd_reply_json(r, 200, o);
	unwatch(sb, watching);
	wrd_cmd_put(c);
	wrd_api_done(sb, false);
}

void wrd_api_cmd_stream(struct wrd_req *r)
{
	struct wrd_sbx *sb;
	struct wrd_cmd *c = req_cmd_noquery(r, &sb);
	if (c == NULL)
		return;
	bool watching = wake_for(sb, c); /* a paused sandbox's command would never end */
	struct ndjson nd = {.base64 = c->base64};
	nd.fd = wrd_reply_stream(r, 200, "application/x-ndjson");
	if (nd.fd >= 0) {
		size_t cursor = 0;
		char *buf = NULL;
		pthread_mutex_lock(&c->lock);
		while (!nd.broken) {
			if (cursor < c->nchunks) {
				struct chunk ch = c->chunks[cursor++];
				char *nb = realloc(buf, ch.len ? ch.len : 1);
				if (nb == NULL)
					break;
				buf = nb;
				memcpy(buf, c->data + ch.off, ch.len);
				pthread_mutex_unlock(&c->lock);
				wrd_nd_data(&nd, ch.stream, buf, ch.len, false);
				pthread_mutex_lock(&c->lock);
				continue;
			}
			if (c->done)
				break;
			pthread_cond_wait(&c->cv, &c->lock);
		}
		struct wr_exec_result res = c->res;
		char *error = c->error ? strdup(c->error) : NULL;
		bool done = c->done;
		json_t *adopted = done && c->adopted ? wrd_cmd_adopted_result(c) : NULL;
		pthread_mutex_unlock(&c->lock);
		if (adopted) {
			json_object_set_new(adopted, "output_available", json_false());
			wrd_nd_exit_json(&nd, adopted);
			json_decref(adopted);
		} else if (done) {
			wrd_nd_exit(&nd, &res, error);
		}
		free(error);
		free(buf);
		close(nd.fd);
	}
	unwatch(sb, watching);
	wrd_cmd_put(c);
	wrd_api_done(sb, false);
}

void wrd_api_cmd_stdin(struct wrd_req *r)
{
	static const char *const keys[] = {"data", "eof", "encoding", NULL};
	json_t *b = r->json;
	if (b && wrd_api_known_keys(r, b, keys) < 0)
		return;
	const char *data = "";
	size_t len = 0;
	bool eof = false, b64 = false;
	_cleanup_err_ wr_err err = NULL;
	json_t *v;
	if (b && (v = json_object_get(b, "data"))) {
		if (!json_is_string(v)) {
			wrd_reply_error(r, "invalid_argument", "data", "data: must be a string");
			return;
		}
		data = json_string_value(v);
		len = json_string_length(v);
	}
	if (b && (v = json_object_get(b, "eof")) && wrd_j_bool(v, "eof", &eof, &err) < 0) {
		wrd_reply_err(r, err);
		return;
	}
	if (b && (v = json_object_get(b, "encoding"))) {
		const char *s;
		if (wrd_j_str(v, "encoding", 16, false, &s, &err) < 0 ||
		    (strcmp(s, "base64") != 0 && strcmp(s, "utf-8") != 0)) {
			wrd_reply_error(r, "invalid_argument", "encoding",
					"encoding: must be \"utf-8\" or \"base64\"");
			return;
		}
		b64 = strcmp(s, "base64") == 0;
	}
	_cleanup_free_ char *raw = NULL;
	if (b64) {
		raw = malloc(len / 4 * 3 + 3);
		size_t n = 0;
		uint32_t acc = 0;
		int bits = 0;
		for (size_t i = 0; raw && i < len; i++) {
			char ch = data[i];
			int x = ch >= 'A' && ch <= 'Z'	 ? ch - 'A'
				: ch >= 'a' && ch <= 'z' ? ch - 'a' + 26
				: ch >= '0' && ch <= '9' ? ch - '0' + 52
				: ch == '+'		 ? 62
				: ch == '/'		 ? 63
				: ch == '='		 ? -2
							 : -1;
			if (x == -2)
				break;
			if (x < 0) {
				wrd_reply_error(r, "invalid_argument", "data",
						"data: not valid base64");
				return;
			}
			acc = acc << 6 | (uint32_t)x;
			bits += 6;
			if (bits >= 8) {
				bits -= 8;
				raw[n++] = (char)(acc >> bits);
			}
		}
		data = raw;
		len = n;
	}
	struct wrd_sbx *sb;
	struct wrd_cmd *c = req_cmd(r, &sb);
	if (c == NULL)
		return;
	unwatch(sb, wake_for(sb, c)); /* a paused sandbox's command reads nothing */
	pthread_mutex_lock(&c->lock);
	int fd = c->stdin_w >= 0 && !c->done ? dup(c->stdin_w) : -1;
	pthread_mutex_unlock(&c->lock);
	if (fd < 0) {
		wrd_reply_error(r, "conflict", NULL, "command %s: its stdin is closed", c->id);
		goto out;
	}
	/* Wait for room while the command runs; never past 60 s. */
	fcntl(fd, F_SETFD, FD_CLOEXEC);
	fcntl(fd, F_SETFL, O_NONBLOCK);
	size_t off = 0;
	uint64_t deadline = wr_now_ns() + 60ull * 1000000000ull;
	while (off < len) {
		ssize_t n = write(fd, data + off, len - off);
		if (n > 0) {
			off += (size_t)n;
			continue;
		}
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			break;
		pthread_mutex_lock(&c->lock);
		bool done = c->done;
		pthread_mutex_unlock(&c->lock);
		if (done || wr_now_ns() > deadline)
			break;
		struct pollfd pf = {.fd = fd, .events = POLLOUT};
		poll(&pf, 1, 200);
	}
	close(fd);
	if (off < len) {
		wrd_reply_error(r, "conflict", NULL,
				"command %s: wrote %zu of %zu bytes: it ended or does not read "
				"its stdin",
				c->id, off, len);
		goto out;
	}
	if (eof) {
		pthread_mutex_lock(&c->lock);
		if (c->stdin_w >= 0) {
			close(c->stdin_w);
			c->stdin_w = -1;
		}
		pthread_mutex_unlock(&c->lock);
	}
	wrd_reply_empty(r, 204);
out:
	wrd_cmd_put(c);
	wrd_api_done(sb, false);
}

void wrd_api_cmd_kill(struct wrd_req *r)
{
	struct wrd_sbx *sb;
	struct wrd_cmd *c = req_cmd_noquery(r, &sb);
	if (c == NULL)
		return;
	/* Sticky: a command that has not started yet never will. */
	pthread_mutex_lock(&c->lock);
	c->kill_requested = true;
	bool done = c->done;
	pthread_mutex_unlock(&c->lock);
	if (!done)
		wrd_cmd_kill_tree(c);
	wrd_reply_empty(r, 204);
	wrd_cmd_put(c);
	wrd_api_done(sb, false);
}
