/* The agent protocol's framing: one format for every tier whose commands
 * run behind an agent (the microVM and VM guests' warren-agent).
 *
 * A frame is a 12-byte header, little-endian, then `len` payload bytes:
 *
 *   u32 len      payload bytes, at most WR_FRAME_MAX
 *   u8  type     enum wr_frame_type
 *   u8  flags    0 (reserved)
 *   u16 rsvd     0
 *   u32 id       the command a frame belongs to (0: the connection)
 *
 * Control payloads (HELLO, EXEC, EXIT, ERROR) are JSON objects; data
 * payloads (STDIN, STDOUT, STDERR) are raw bytes, an empty STDIN meaning
 * end of input. The reader is strict: a header with a reserved bit set, an
 * unknown type or an oversized length is a protocol error, after which the
 * host drops the guest's channel (a guest can lie or flood, never crash
 * warrend or make it allocate more than one frame). */
#ifndef WARREN_COMMON_FRAME_H
#define WARREN_COMMON_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define WR_FRAME_HDR 12
#define WR_FRAME_MAX (1u << 20)

enum wr_frame_type {
	WR_FRAME_HELLO = 1, /* guest → host, once: {"version":1,"uptime_ms":N} */
	WR_FRAME_EXEC,	    /* host → guest: {"argv":[..],"env":[..],"cwd":..,...} */
	WR_FRAME_STDIN,	    /* host → guest: data; empty = EOF */
	WR_FRAME_STDOUT,    /* guest → host: data */
	WR_FRAME_STDERR,    /* guest → host: data */
	WR_FRAME_EXIT,	    /* guest → host: {"exit_code":..,"signal":..,"reason":..} */
	WR_FRAME_KILL,	    /* host → guest: kill the command's process tree */
	WR_FRAME_ERROR,	    /* guest → host: {"message":..} a request failed */
	WR_FRAME_PING,	    /* either way: answered by PONG with the same id */
	WR_FRAME_PONG,
	WR_FRAME_IDENTITY, /* host → guest after a restore from a template:
			    * {"hostname":..,"sandbox_id":..,"seed":hex,
			    * "realtime_ns":N}; answered by a new HELLO */
	/* Files (microVM guests; see src/tiers/microvm_files.c). One request
	 * per id, ids shared with commands; a KILL with a write's id abandons
	 * it (nothing is committed). */
	WR_FRAME_FS,	  /* host → guest: {"op":..,"path":..,...} */
	WR_FRAME_FS_DATA, /* file bytes: guest → host for a read, host →
			   * guest for a write (empty = end of the data) */
	WR_FRAME_FS_LIST, /* guest → host: [entry, ...] a batch of a list */
	WR_FRAME_FS_DONE, /* guest → host, last of a request: {"ok":true,..}
			   * or {"errno":N,"message":..} */
	/* PTY commands: EXEC with "pty":{"rows":R,"cols":C}; STDIN/STDOUT
	 * carry the terminal's bytes both ways. */
	WR_FRAME_RESIZE, /* host → guest: {"rows":R,"cols":C} */
	WR_FRAME_TYPE_MAX = WR_FRAME_RESIZE,
};

struct wr_frame {
	uint8_t type;
	uint32_t id;
	uint32_t len;
	const uint8_t *payload; /* borrowed from the reader until the next call */
};

/* Incremental reader for a byte stream (non-blocking friendly). */
struct wr_frame_reader {
	uint8_t *buf;
	size_t have, cap;
	size_t consumed; /* bytes of the frame returned last, dropped next call */
};

void wr_frame_reader_init(struct wr_frame_reader *r);
void wr_frame_reader_free(struct wr_frame_reader *r);
/* Appends bytes read from the channel. -ENOMEM if they cannot be kept
 * (never more than one frame plus one read is buffered). */
int wr_frame_feed(struct wr_frame_reader *r, const void *data, size_t n);
/* 1 and *f filled when a whole frame is buffered, 0 when more bytes are
 * needed, -EBADMSG for a malformed header (the stream is then unusable). */
int wr_frame_next(struct wr_frame_reader *r, struct wr_frame *f);

/* Encodes a header into out[WR_FRAME_HDR]. */
void wr_frame_header(uint8_t out[WR_FRAME_HDR], uint8_t type, uint32_t id, uint32_t len);
/* Writes one whole frame to a blocking or non-blocking fd (waits with poll
 * on EAGAIN, retries EINTR). 0, or -errno; -EMSGSIZE when len is too big. */
int wr_frame_write(int fd, uint8_t type, uint32_t id, const void *payload, uint32_t len);

#endif
