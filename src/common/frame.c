/* Agent protocol framing (see frame.h). Used by warrend and, statically
 * linked, by warren-agent inside guests: no logging, no globals. */
#include "common/frame.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

void wr_frame_reader_init(struct wr_frame_reader *r)
{
	memset(r, 0, sizeof(*r));
}

void wr_frame_reader_free(struct wr_frame_reader *r)
{
	free(r->buf);
	memset(r, 0, sizeof(*r));
}

static void drop_consumed(struct wr_frame_reader *r)
{
	if (r->consumed == 0)
		return;
	memmove(r->buf, r->buf + r->consumed, r->have - r->consumed);
	r->have -= r->consumed;
	r->consumed = 0;
}

int wr_frame_feed(struct wr_frame_reader *r, const void *data, size_t n)
{
	drop_consumed(r);
	if (n > WR_FRAME_HDR + WR_FRAME_MAX || r->have > SIZE_MAX - n)
		return -ENOMEM;
	if (r->have + n > r->cap) {
		size_t cap = r->cap ? r->cap : 4096;
		while (cap < r->have + n)
			cap *= 2;
		/* bounded: a reader holds at most one frame plus what one feed
		 * brings, and a bad header stops the stream before more */
		if (cap > 2 * (WR_FRAME_HDR + (size_t)WR_FRAME_MAX) + 65536)
			return -ENOMEM;
		uint8_t *b = realloc(r->buf, cap);
		if (b == NULL)
			return -ENOMEM;
		r->buf = b;
		r->cap = cap;
	}
	memcpy(r->buf + r->have, data, n);
	r->have += n;
	return 0;
}

int wr_frame_next(struct wr_frame_reader *r, struct wr_frame *f)
{
	drop_consumed(r);
	if (r->have < WR_FRAME_HDR)
		return 0;
	const uint8_t *h = r->buf;
	uint32_t len = get32(h);
	uint8_t type = h[4];
	if (len > WR_FRAME_MAX || type == 0 || type > WR_FRAME_TYPE_MAX || h[5] != 0 || h[6] != 0 ||
	    h[7] != 0)
		return -EBADMSG;
	if (r->have - WR_FRAME_HDR < len)
		return 0;
	f->type = type;
	f->id = get32(h + 8);
	f->len = len;
	f->payload = h + WR_FRAME_HDR;
	r->consumed = WR_FRAME_HDR + (size_t)len;
	return 1;
}

void wr_frame_header(uint8_t out[WR_FRAME_HDR], uint8_t type, uint32_t id, uint32_t len)
{
	put32(out, len);
	out[4] = type;
	out[5] = out[6] = out[7] = 0;
	put32(out + 8, id);
}

int wr_frame_write(int fd, uint8_t type, uint32_t id, const void *payload, uint32_t len)
{
	if (len > WR_FRAME_MAX)
		return -EMSGSIZE;
	uint8_t h[WR_FRAME_HDR];
	wr_frame_header(h, type, id, len);
	struct iovec iov[2] = {{.iov_base = h, .iov_len = sizeof(h)},
			       {.iov_base = (void *)payload, .iov_len = len}};
	int n = len ? 2 : 1, i = 0;
	while (i < n) {
		ssize_t w = writev(fd, iov + i, n - i);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				struct pollfd p = {.fd = fd, .events = POLLOUT};
				if (poll(&p, 1, -1) < 0 && errno != EINTR)
					return -errno;
				continue;
			}
			return -errno;
		}
		while (i < n && (size_t)w >= iov[i].iov_len) {
			w -= (ssize_t)iov[i].iov_len;
			i++;
		}
		if (i < n) {
			iov[i].iov_base = (uint8_t *)iov[i].iov_base + w;
			iov[i].iov_len -= (size_t)w;
		}
	}
	return 0;
}
